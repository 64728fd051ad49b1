"""CPU per completed request of ``LLMBatching-v2`` (and v1) here against another checkout
of batch-env, in one run (issue 49: "speed unchanged or better: v2's CPU per completed
request in ``batch-env bench`` within 5% of today's, measured in one run against the old
commit").

Each round runs, in fresh processes taking turns (this checkout, then the other), one
episode of ``bench_llm_v2``'s settings (``experiments.bench.llm.llm_v2_settings``: v1's
defaults and ``LLMMemoryPressure-v0``'s problem) at the largest action, as
``batch-env bench`` does (``experiments.bench.llm.llm_episode_cost``: process CPU time); the
figure is each side's best round (the least disturbed by other load) and the median of
the rounds' ratios.

Usage: ``python scripts/llm_cpu_vs.py OTHER_CHECKOUT [--rounds 7] [--requests 2000]``,
e.g. ``git worktree add /tmp/old <commit>`` first (both need this venv's packages).

On a shared 2-core VM the rounds' ratios move by 5-10% from round to round.
``--instructions`` counts instead the CPU instructions per completed request of ``LLMBatching-v2``
(valgrind's callgrind, which must be installed; ``PYTHONHASHSEED=0``): each side runs one
episode of ``--requests`` + 20 requests and one of 20, and the difference over
``--requests`` is its count per request, free of the start-up (imports, the env's
construction). Not time (memory stalls and branch misses do not count), and the
start-up's count moves by some 10-30 million instructions from process to process, so
use ``--requests 6000`` or more (about 1.5% at 2,000, 0.5% at 6,000 on v1's defaults).
At 6,000 it takes about 15 minutes a setting.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r})
from experiments.bench.llm import llm_episode_cost, llm_v2_settings
out = {{}}
for name, kw in llm_v2_settings().items():
    for env_id in ("batch_env/LLMBatching-v2", "batch_env/LLMBatching-v1"):
        r = llm_episode_cost(env_id, {{**kw, "horizon_requests": {n}}}, 0)
        out[name + " " + env_id.split("-")[-1]] = r["cpu_s"] / r["completed"]
print(json.dumps(out))
"""


def _one(root: Path, n: int) -> dict[str, float]:
    code = CHILD.format(root=str(root), n=n)
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


INSTRUCTIONS_CHILD = """
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r})
from experiments.bench.llm import llm_episode_cost, llm_v2_settings
kw = llm_v2_settings()[{name!r}]
r = llm_episode_cost("batch_env/LLMBatching-v2", {{**kw, "horizon_requests": {n}}}, 0)
print(r["completed"])
"""


def _instructions(root: Path, name: str, n: int) -> int:
    """CPU instructions of one episode of ``n`` requests of setting ``name`` (callgrind)."""
    code = INSTRUCTIONS_CHILD.format(root=str(root), name=name, n=n)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    res = subprocess.run(
        [*cmd, sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    m = re.search(r"Collected : (\d+)", res.stderr)
    if m is None:
        raise RuntimeError(f"callgrind printed no count: {res.stderr[-500:]}")
    return int(m.group(1))


def instructions(other: Path, requests: int) -> int:
    """The ``--instructions`` table (module docstring)."""
    if shutil.which("valgrind") is None:
        print("error: --instructions needs valgrind (callgrind) on the PATH", file=sys.stderr)
        return 2
    print(f"{'setting (LLMBatching-v2)':34s} {'here /req':>12s} {'other /req':>12s} {'ratio':>8s}")
    for name in ("v1-defaults", "LLMMemoryPressure-v0"):
        per = []
        for root in (HERE, other.resolve()):
            big = _instructions(root, name, requests + 20)
            small = _instructions(root, name, 20)
            per.append((big - small) / requests)
        print(f"{name:34s} {per[0]:12.0f} {per[1]:12.0f} {per[0] / per[1]:8.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("other", type=Path, help="the other checkout (e.g. the commit before)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("--requests", type=int, default=2000, help="horizon_requests (2000)")
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="count CPU instructions per request with callgrind instead (module docstring)",
    )
    args = ap.parse_args(argv)
    if args.instructions:
        return instructions(args.other, args.requests)
    here: list[dict[str, float]] = []
    other: list[dict[str, float]] = []
    for r in range(args.rounds):
        here.append(_one(HERE, args.requests))
        other.append(_one(args.other.resolve(), args.requests))
        print(
            f"round {r + 1}: "
            + ", ".join(f"{k} {here[-1][k] / other[-1][k]:.3f}" for k in here[-1])
        )
    print(
        f"{'setting':34s} {'here us/req':>12s} {'other us/req':>13s} {'best ratio':>11s} {'median ratio':>13s}"
    )
    for k in here[0]:
        a = min(h[k] for h in here)
        b = min(o[k] for o in other)
        med = statistics.median(h[k] / o[k] for h, o in zip(here, other, strict=True))
        print(f"{k:34s} {1e6 * a:12.1f} {1e6 * b:13.1f} {a / b:11.3f} {med:13.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
