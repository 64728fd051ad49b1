"""Both acting modes of trained runs on a task's check episodes, paired with greedy.

Each run acts twice on the same held-out episodes (default: seeds 3000-3007 x 5,000
requests, the check of experiments/configs/agents-llm-*.yml): with its policy's most
likely action at every step (deterministic) and drawing its actions from the policy
(stochastic, seeded per episode); an episode that does not end within ``--max-steps`` is
cut and counted as such. Prints one line per run and mode and writes the figures as JSON:

    python scripts/acting_modes.py --task batch_env/LLMTwoClasses-v0 \\
        --runs runs/agents-llm-scratch/two-classes-s0 runs/agents-llm-scratch/two-classes-s1 \\
        --out results/acting-modes/LLMTwoClasses-v0.json

(docs/results/agents-llm-scratch.md: why PPO's most likely action starves the server on
the LLM tasks while its draws do not.)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import baselines  # noqa: E402
import batch_env  # noqa: E402
from agents import load_policy  # noqa: E402
from batch_env import tasks  # noqa: E402
from batch_env.provenance import provenance  # noqa: E402


def rates(policy, env, seeds: list[int], max_steps: int) -> list[float]:
    """Each seed's reward rate per second (NaN where the episode was cut)."""
    out = []
    for s in seeds:
        try:
            r = batch_env.evaluate(policy, env, n_episodes=1, seed=s, max_steps=max_steps)
            out.append(float(r.episodes[0]["reward_rate_per_s"]))
        except batch_env.EpisodeCut:
            out.append(math.nan)
    return out


def paired_percent(agent: list[float], ref: list[float]) -> tuple[float, float, int]:
    """Mean and 95% CI half-width of the agent's cost in percent above the reference's,
    per seed, over the seeds whose episodes ended; and how many were cut."""
    a, g = np.asarray(agent), np.asarray(ref)
    ok = ~np.isnan(a)
    d = 100.0 * (a[ok] / g[ok] - 1.0)  # both rates are minus a cost: the ratio of costs
    half = 1.96 * d.std(ddof=1) / math.sqrt(d.size) if d.size > 1 else math.nan
    return float(d.mean()) if d.size else math.nan, float(half), int((~ok).sum())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True, help="benchmark task id")
    p.add_argument("--runs", nargs="+", required=True, help="training run folders")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(3000, 3008)))
    p.add_argument("--horizon-requests", type=int, default=5000)
    p.add_argument("--max-steps", type=int, default=300_000, help="steps before an episode is cut")
    p.add_argument("--out", required=True, help="JSON file to write")
    a = p.parse_args(argv)
    env_id, kw = tasks.make_args(a.task, horizon_requests=a.horizon_requests)
    env = gym.make(env_id, **kw)
    greedy = rates(baselines.make("greedy", env), env, a.seeds, a.max_steps)
    print(f"{a.task}: greedy {np.mean(greedy):.4g} per s on seeds {a.seeds}", flush=True)
    out = {
        "task": a.task,
        "seeds": a.seeds,
        "horizon_requests": a.horizon_requests,
        "greedy": greedy,
        "runs": {},
        "provenance": provenance(),
    }
    for run in a.runs:
        row = {}
        for mode, det in (("deterministic", True), ("stochastic", False)):
            r = rates(load_policy(run, deterministic=det), env, a.seeds, a.max_steps)
            pct, half, cut = paired_percent(r, greedy)
            row[mode] = {"reward_rate_per_s": r, "cost_vs_greedy_pct": [pct, half], "cut": cut}
            print(
                f"{run} {mode}: cost {pct:+.1f} ± {half:.1f}% against greedy (paired)"
                + (f", {cut} episodes cut" if cut else ""),
                flush=True,
            )
        out["runs"][run] = row
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
