"""CPU time per decision of trained runs acting on a task's episode (one core).

Each run acts, as load_policy gives it (its own acting mode), on one episode of the task
(default: seed 3000, 2,000 requests); the CPU time of every ``act`` call is measured
(``time.process_time_ns``: the policy's own work, not the simulator's) and summarized:

    python scripts/decision_time.py --task batch_env/LLMClockBursts-v0 \\
        --runs runs/agents-llm-distilled/clock-bursts-distilled-s0 --out results/x.json

(issue 52's target: a learned policy decides within 1 ms on one CPU core.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import batch_env  # noqa: E402, F401
from agents import load_policy  # noqa: E402
from batch_env import tasks  # noqa: E402
from batch_env.provenance import provenance  # noqa: E402


def act_times_ms(run: str, task: str, seed: int, horizon: int) -> np.ndarray:
    """The CPU milliseconds of each of the run's decisions on one episode."""
    pol = load_policy(run)
    env_id, kw = tasks.make_args(task, horizon_requests=horizon)
    env = gym.make(env_id, **kw)
    obs, info = env.reset(seed=seed)
    pol.reset(seed=seed)
    out = []
    for _ in range(batch_env.MAX_EPISODE_STEPS):
        t0 = time.process_time_ns()
        a = pol.act(obs, info)
        out.append(time.process_time_ns() - t0)
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    return np.asarray(out) / 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True, help="benchmark task id")
    p.add_argument("--runs", nargs="+", required=True, help="training run folders")
    p.add_argument("--seed", type=int, default=3000)
    p.add_argument("--horizon-requests", type=int, default=2000)
    p.add_argument("--out", required=True, help="JSON file to write")
    a = p.parse_args(argv)
    out: dict = {
        "task": a.task,
        "seed": a.seed,
        "horizon_requests": a.horizon_requests,
        "runs": {},
        "provenance": provenance(),
    }
    for run in a.runs:
        ms = act_times_ms(run, a.task, a.seed, a.horizon_requests)
        row = {
            "decisions": int(ms.size),
            "mean_ms": float(ms.mean()),
            "median_ms": float(np.median(ms)),
            "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": float(ms.max()),
        }
        out["runs"][run] = row
        print(
            f"{run}: {row['decisions']} decisions, CPU per decision mean {row['mean_ms']:.3f} ms, "
            f"p99 {row['p99_ms']:.3f} ms, max {row['max_ms']:.3f} ms",
            flush=True,
        )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
