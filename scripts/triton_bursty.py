"""Triton's dynamic batcher on Bursty-v0's traffic, for issue 21's "best Triton" baseline.

Bursty-v0 has no ticks (decisions at arrivals and completions only), so a queue delay
cannot fire there (docs/benchmark.md). This runs the task's env with 0.5 ms ticks (the
same arrivals and service: greedy's cost is the same to the last digit), tunes Triton's
``max_queue_delay_ms`` x ``max_batch_size`` grid on the evaluation seeds themselves (an
optimistic figure for Triton), and measures greedy, ``smdp`` and ``smdp-adaptive`` on the
same ticked env and seeds; the agents' check in ``experiments/configs/agents.yml`` uses
the same seeds and episode length.

    python scripts/triton_bursty.py [--horizon-requests 300000] [--out results/agents/triton-bursty.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import baselines
import batch_env
from batch_env import tasks

SEEDS = (3000, 3001, 3002, 3003)
DELAYS_MS = (2, 4, 8, 12, 16, 24, 32, 48, 64, 96)
BATCH_SIZES = (6, 8, 10, 12, 14, 16, 32)


def main() -> None:
    """Run the grid and the reference baselines; print and write the costs per second."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--horizon-requests", type=int, default=300_000, help="requests per episode")
    ap.add_argument("--out", default="results/agents/triton-bursty.json", help="JSON output")
    args = ap.parse_args()
    kw = dict(tasks.get("batch_env/Bursty-v0").kwargs)
    kw.update(horizon_requests=args.horizon_requests, decision_interval_ms=0.5)
    env = gym.make("batch_env/DynamicBatching-v0", **kw)

    def cost(policy: object) -> list[float]:
        return [
            -batch_env.evaluate(policy, env, n_episodes=1, seed=s).episodes[0]["reward_rate_per_s"]
            for s in SEEDS
        ]

    t0 = time.time()
    res: dict[str, list[float]] = {}
    for name in ("greedy", "smdp", "smdp-adaptive"):
        res[name] = cost(baselines.make(name, env=env))
    for d in DELAYS_MS:
        for b in BATCH_SIZES:
            pol = baselines.make("timeout", env=env, max_queue_delay_ms=d, max_batch_size=b)
            res[f"timeout max_queue_delay_ms={d} max_batch_size={b}"] = cost(pol)
    best = min((k for k in res if k.startswith("timeout")), key=lambda k: np.mean(res[k]))
    ratio = np.array(res[best]) / np.array(res["smdp-adaptive"]) - 1
    for k, v in res.items():
        print(f"{k:45} {np.mean(v):8.3f} per s")
    print(
        f"best Triton: {best}, {np.mean(res[best]):.3f} per s, "
        f"{100 * ratio.mean():+.2f}% against smdp-adaptive (paired); {time.time() - t0:.0f} s"
    )
    out = {
        "env": {"task": "batch_env/Bursty-v0", "decision_interval_ms": 0.5},
        "horizon_requests": args.horizon_requests,
        "seeds": list(SEEDS),
        "cost_per_s": res,
        "best_triton": best,
        "best_vs_smdp_adaptive_percent": 100 * float(ratio.mean()),
    }
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
