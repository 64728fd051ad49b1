"""Write the result files of four experiments on fixed seeds into one folder, so that two
versions of the code can be compared file by file (``diff -r A B``).

Issue 39 moved every experiment onto one harness with "behaviour unchanged" as its first
rule; this is the check: run it at the commit before a refactor and at the commit after,
each into its own folder, and diff. What runs (small, one to two minutes on 2 cores):

* ``compare``: a 3-load x 3-policy grid on DynamicBatching-v0 (2 seeds);
* ``benchmark``: greedy on one task at a short horizon;
* ``regimes``: the SMDP map (exact solves, seconds);
* ``llm``: one profile, one traffic, three policies on LLMBatching-v0.

Timestamps and wall times are the only things that differ between runs; the script drops
them (keys named ``*wall*``, ``*time*``, ``*_s`` timings, ``created``/``date``) from JSON
files and from markdown lines that report them, so that the folders compare byte for
byte.

Usage: ``python scripts/experiment_outputs.py OUT_DIR``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

CLI = [str(Path(sys.executable).with_name("batch-env"))]  # the installed command, as a user runs it

COMPARE = {
    "name": "golden",
    "env": {
        "profile": "resnet50-v100",
        "decision_interval_ms": 0.5,
        "horizon_requests": 3000,
        "reward_weights": {"sla": 0.0},
    },
    "workloads": {"poisson": {"kind": "poisson"}},
    "loads": [0.3, 0.6, 0.9],
    "seeds": 2,
    "reference": "greedy",
    "policies": {
        "greedy": {},
        "static-8": {"name": "static", "batch_size": 8, "timeout_ms": 5},
        "tf": {"name": "tfserving", "batch_timeout_ms": 1.0},
    },
}
LLM = {
    "name": "golden-llm",
    "reference": "static-256",
    "attainment": 0.9,
    "bisection_steps": 3,
    "seeds": [0, 1],
    "env_kwargs": {
        "horizon_requests": 120,
        "warmup_requests": 20,
        "ttft_sla_ms": 1000.0,
        "tpot_sla_ms": 50.0,
    },
    "profiles": {"llama-2-7b-h100": {"rates": [4.0, 8.0, 12.0, 16.0]}},
    "traffic": {"poisson": {"kind": "poisson", "lengths": {"kind": "lognormal"}}},
    "policies": {
        "static-256": {"policy": "static-cap", "cap": 256},
        "static-16": {"policy": "static-cap", "cap": 16},
        "memory-aware": {"policy": "memory-aware"},
    },
}
TIMING = re.compile(r"(wall|time|elapsed|seconds|created|date|_s$)", re.I)
TIMING_COLUMN = re.compile(r"(wall|time|\bs\)|\(s\)|seconds)", re.I)
TIMING_LINE = re.compile(r"(wall|took|elapsed|seconds|generated|\d+(\.\d+)? ?s\b)", re.I)


def _drop_timings(obj):
    if isinstance(obj, dict):
        return {k: _drop_timings(v) for k, v in obj.items() if not TIMING.search(str(k))}
    if isinstance(obj, list):
        return [_drop_timings(v) for v in obj]
    return obj


def _md_lines(lines: list[str]) -> list[str]:
    """Markdown without its timing lines, and with a table's timing columns blanked."""
    out, blank = [], set()
    for ln in lines:
        if ln.startswith("|"):
            cells = ln.split("|")
            if not set(ln) <= set("|-: "):
                if not blank and any(TIMING_COLUMN.search(c) for c in cells):
                    blank = {i for i, c in enumerate(cells) if TIMING_COLUMN.search(c)}
            out.append("|".join("" if i in blank else c for i, c in enumerate(cells)))
            continue
        blank = set()
        if not TIMING_LINE.search(ln):
            out.append(ln)
    return out


def _normalize(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix in (".json", ".jsonl"):
            lines = path.read_text().splitlines()
            try:
                docs = [json.loads(line) for line in lines] if path.suffix == ".jsonl" else None
                text = (
                    "\n".join(json.dumps(_drop_timings(d), sort_keys=True) for d in docs)
                    if docs is not None
                    else json.dumps(
                        _drop_timings(json.loads(path.read_text())), indent=1, sort_keys=True
                    )
                )
            except ValueError:
                continue
            path.write_text(text + "\n")
        elif path.suffix in (".md", ".txt", ".csv"):
            path.write_text("\n".join(_md_lines(path.read_text().splitlines())) + "\n")
        elif path.suffix == ".png":
            path.write_text("png\n")  # matplotlib embeds its version and metadata


def main(out: str) -> int:
    folder = Path(out).resolve()
    folder.mkdir(parents=True, exist_ok=False)
    (folder / "compare.yaml").write_text(yaml.safe_dump(COMPARE))
    (folder / "llm.yml").write_text(yaml.safe_dump(LLM))
    runs = {
        "compare": [
            "compare",
            "--config",
            str(folder / "compare.yaml"),
            "--results-dir",
            str(folder / "compare"),
            "--json",
        ],
        "benchmark": [
            "benchmark",
            "--policy",
            "greedy",
            "--tasks",
            "batch_env/LowLoadEnergy-v0",
            "--horizon-requests",
            "1500",
            "--json",
        ],
        "regimes": ["regimes", "smdp", "--results-dir", str(folder / "regimes"), "--json"],
        "llm": [
            "llm",
            "--config",
            str(folder / "llm.yml"),
            "--results-dir",
            str(folder / "llm"),
            "--json",
            "--no-train",
        ],
    }
    for name, argv in runs.items():
        done = subprocess.run([*CLI, *argv], stdout=subprocess.PIPE, text=True, check=False)
        rc = done.returncode
        (folder / f"{name}.stdout").write_text(done.stdout)
        print(f"{name}: exit {rc}", file=sys.stderr)
        if rc != 0:
            return rc
    for name in runs:  # stdout JSON: drop timings too
        p = folder / f"{name}.stdout"
        try:
            p.write_text(
                json.dumps(_drop_timings(json.loads(p.read_text())), indent=1, sort_keys=True)
                + "\n"
            )
        except ValueError:
            pass
    _normalize(folder)
    for path in folder.rglob("*"):  # the folder itself is named in some outputs
        if path.is_file() and path.suffix != ".png":
            path.write_text(path.read_text().replace(str(folder), "OUT"))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    sys.exit(main(sys.argv[1]))
