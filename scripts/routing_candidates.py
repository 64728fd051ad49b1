"""The first numbers behind issue 66's item 4: how the shipped routers compare on
candidate routing tasks (three on the Mooncake conversation trace, one with Poisson
arrivals on a cluster of A100s and H200s), and how far a tuned parameter of the best
one moves it.

A routing task is to be registered only where a realizable policy that reads the state
beats the best router baseline by at least 5% on held-out seeds. This script measures
the baselines' side: for each candidate setting (replicas, the rate: a trace's
``target_rate_per_s``, each seed replaying the trace from its own offset, or a Poisson
``rate_per_s``; 500 warm-up and 2,000 summary requests) every router of
``baselines.routers`` with its source's defaults, and two tuned variants (SGLang's ``cache_threshold`` 0.1, Dynamo's
``overlap_score_weight`` 16), each on the same seeds; the table gives each one's cost
per second (minus the summary's reward rate), mean TTFT, prefix hit rate and its cost
above the best default router, paired per seed with a 95% Student-t CI::

    python scripts/routing_candidates.py [--seeds 0,1,2,3] [--requests 2000]
        [--out results/routing/candidates.md]

``results/routing/candidates.md`` is its output with the defaults (about 90 CPU
seconds), which ``docs/results/routing-candidates.md`` shows.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from scipy import stats

import baselines
import batch_env  # noqa: F401  (registers the ids)
from baselines.routers import ROUTERS

MOONCAKE = {"kind": "trace", "dataset": "mooncake-conversation", "random_offset": True}
COMMON = {
    "max_model_len": 131_072,
    "max_num_batched_tokens": 8192,
    "gpu_memory_utilization": 0.9,
    "warmup_requests": 500,
}
H100, A100 = {"profile": "llama-3.1-8b-h100"}, {"profile": "llama-3.1-8b-a100"}
H200 = {"profile": "llama-3.1-8b-h200"}
#: Poisson arrivals with the default (Azure conversation) lengths, no prefixes
POISSON: dict[str, Any] = {"kind": "poisson"}
#: the candidate settings: name, replicas, workload, rate (requests/s)
SETTINGS: tuple[tuple[str, list[dict[str, Any]], dict[str, Any], float], ...] = (
    ("4 x 8B/H100, 4.0/s", [H100] * 4, MOONCAKE, 4.0),
    ("4 x 8B/H100, 5.5/s (overload)", [H100] * 4, MOONCAKE, 5.5),
    ("2 x 8B/A100 + 2 x 8B/H100, 3.5/s", [A100, A100, H100, H100], MOONCAKE, 3.5),
    ("2 x 8B/A100 + 2 x 8B/H200, Poisson 8/s", [A100, A100, H200, H200], POISSON, 8.0),
)
TUNED = ("sglang-cache-aware:cache_threshold=0.1", "dynamo-kv:overlap_score_weight=16")


def run(env: gym.Env, spec: str, seeds: list[int]) -> np.ndarray:
    """One router (``name`` or ``name:key=value,...``) on ``seeds``: per seed its cost per
    second, mean TTFT (ms) and prefix hit rate."""
    name, params = baselines.parse_spec(spec)
    policy = baselines.make(name, env, **params)
    out = []
    for seed in seeds:
        policy.reset(seed=seed)
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            obs, _r, term, trunc, info = env.step(policy.act(obs, info))
            done = term or trunc
        s = info["serving"]
        out.append((-s["reward_rate_per_s"], s["ttft_mean_ms"], s.get("prefix_hit_rate", math.nan)))
    return np.asarray(out)


def paired(x: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """``x``'s cost above ``ref``'s, percent of ``ref``'s mean, and its 95% half-width."""
    d = x - ref
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return 100 * d.mean() / ref.mean(), 100 * half / ref.mean()


def main(argv: list[str] | None = None) -> int:
    """Run every setting and write the Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3", help="episode seeds, comma-separated")
    ap.add_argument("--requests", type=int, default=2000, help="summary requests an episode")
    ap.add_argument("--out", type=Path, default=None, help="Markdown file to write")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    lines = [
        f"Seeds {seeds}, {args.requests} summary requests after 500 of warm-up; cost above "
        "the best default router, paired per seed, 95% CI.",
        "",
        "| setting | router | cost per s | TTFT ms | prefix hits | vs the best default |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, replicas, workload, rate in SETTINGS:
        key = "target_rate_per_s" if workload.get("kind") == "trace" else "rate_per_s"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make(
                "batch_env/LLMRouting-v0",
                replicas=replicas,
                workload={**workload, key: rate},
                horizon_requests=args.requests,
                **COMMON,
            )
            t0 = time.process_time()
            res = {spec: run(env, spec, seeds) for spec in (*ROUTERS, *TUNED)}
        best = min(ROUTERS, key=lambda k: res[k][:, 0].mean())
        for spec, r in res.items():
            gain, half = paired(r[:, 0], res[best][:, 0])
            lines.append(
                f"| {name} | `{spec}` | {r[:, 0].mean():.2f} | {r[:, 1].mean():.0f} | "
                f"{r[:, 2].mean():.3f} | {gain:+.2f} ± {half:.2f}% |"
            )
        print(f"{name}: {time.process_time() - t0:.0f} CPU s", file=sys.stderr)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
