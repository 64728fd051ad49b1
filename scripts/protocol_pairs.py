"""Pair trained runs' whole-protocol figures with a task's stored references, seed by seed.

Input: files written by ``batch-env benchmark --policy ALGO:RUN --tasks TASK --json``
(one per run). For each run and each reference named, the run's cost per second above
the reference's on the same protocol seeds, in percent, with a 95% Student-t CI over the
seeds (cost = minus the reward rate). Writes JSON, prints a Markdown table::

    python scripts/protocol_pairs.py --references greedy,clock-best,clock-queue \\
        --out results/agents-llm-scratch/input-critic-protocol.json runs/*.protocol.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from batch_env import tasks


def paired_pct(run: list[float], ref: list[float]) -> tuple[float, float]:
    """The run's cost above the reference's, percent of the reference's mean cost, and the
    95% Student-t half-width of that mean over the seeds."""
    a, b = -np.asarray(run, float), -np.asarray(ref, float)
    d = a - b
    half = float(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    base = float(b.mean())
    return 100.0 * float(d.mean()) / base, 100.0 * half / base


def main(argv: list[str] | None = None) -> int:
    """Pair each benchmark result file with the references; print and write the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="batch-env benchmark --json outputs, one per run")
    ap.add_argument("--references", required=True, help="stored reference labels, comma-separated")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)
    args.references = [r for r in args.references.split(",") if r]
    refs = tasks.references()
    rows: dict[str, dict] = {}
    for f in args.files:
        try:
            results = json.loads(Path(f).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"error: {f}: {exc}", file=sys.stderr)
            return 2
        for res in results:
            task = res["task"]
            stored = refs[task]["policies"]
            if not res.get("protocol", False):
                print(
                    f"error: {f}: {task} ran {res.get('horizon_requests')} requests an "
                    "episode, not the protocol: its seeds cannot pair with the references",
                    file=sys.stderr,
                )
                return 2
            row = {"task": task, "policy": res["policy"], "cost_per_s": -res["reward_rate_per_s"]}
            row["normalized_score"] = res.get("normalized_score")
            for label in args.references:
                if label not in stored:
                    print(f"error: {task} has no stored reference {label!r}", file=sys.stderr)
                    return 2
                n = len(res["per_seed"])
                if stored[label].get("seeds", res["seeds"])[:n] != res["seeds"]:
                    print(f"error: {f}: its seeds are not {label}'s", file=sys.stderr)
                    return 2
                ref = stored[label]["per_seed"][:n]
                row[f"vs_{label}_pct"] = list(paired_pct(res["per_seed"], ref))
            rows[f"{Path(f).stem}"] = row
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    what = (
        "each run's whole protocol (batch-env benchmark --json) paired per seed with the "
        "stored references: cost % above the reference, 95% Student-t CI over the seeds"
    )
    Path(args.out).write_text(json.dumps({"what": what, "runs": rows}, indent=1) + "\n")
    head = ["run", "task", "cost per s", "score", *(f"vs {r}" for r in args.references)]
    print("| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
    for name, row in rows.items():
        cells = [name, row["task"].split("/")[-1], f"{row['cost_per_s']:.3f}"]
        cells.append(
            f"{row['normalized_score']:.3f}" if row["normalized_score"] is not None else "-"
        )
        cells += [
            f"{row[f'vs_{r}_pct'][0]:+.2f} ± {row[f'vs_{r}_pct'][1]:.2f}%" for r in args.references
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
