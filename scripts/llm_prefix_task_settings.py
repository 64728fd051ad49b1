"""The numbers behind issue 63's item 6: does a prefix-caching task on the Mooncake
conversation trace reward state-dependent control?

A task is registered only where a realizable policy that reads the state beats the best
constant action by at least 5% on held-out seeds. For each candidate setting (a model and
GPU, the trace's rate: ``target_rate_per_s``, each seed replaying from its own offset) it
runs ``LLMBatching-v2`` with prefix caching on (the trace's block hashes), the cap at
256, the orders ``fcfs`` and ``longest-prefix`` (SGLang's longest prefix match with its
switch to FCFS above 128 waiting) and the budgets 512-8,192, and tries:

* every constant action (order x budget);
* ``lpm-below``: longest-prefix while at most ``k`` requests wait, FCFS above (SGLang's
  switch at other thresholds);
* ``cached-budget``: longest-prefix, the larger of two budgets while the waiting prompts'
  cached fraction (the observation's ``waiting_cached_fraction``) is at least ``theta``,
  else the smaller (cheap prompts admitted in bulk, costly ones paced);
* ``queue-budget``: longest-prefix, the smaller of two budgets while more than ``k``
  wait, else the larger.

Every policy is tuned on the tuning seeds (0, 1); the best constant and the best rule of
each family then run on the held-out seeds (100-103), paired (the same episodes), and
the table gives each family's gain over the best constant with its paired 95% CI, and
the best constant's prefix hit rate.

    python scripts/llm_prefix_task_settings.py [--requests 600] [--jobs 2]
        [--out docs/results/llm-prefix-task-settings.md]

``docs/results/llm-prefix-task-settings.md`` is this script's output with its defaults.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import batch_env  # noqa: F401 (registers the ids)
from batch_env.evaluate import ci95_half_width
from batch_env.llm.prefixes import waiting_cached_fraction

TUNING_SEEDS = (0, 1)
HELD_SEEDS = (100, 101, 102, 103)
BUDGETS = (512, 2048, 8192)
ORDERS = ("fcfs", "longest-prefix")

#: the candidate settings: name, profile, trace rate (requests/s), GPU memory utilization
SETTINGS: tuple[tuple[Any, ...], ...] = (
    ("8B/H100, 1.1/s (load < 1)", "llama-3.1-8b-h100", 1.1, 0.9),
    ("8B/H100, 1.5/s (overload)", "llama-3.1-8b-h100", 1.5, 0.9),
    ("Qwen7B/H200, 1.6/s (load < 1)", "qwen2.5-7b-h200", 1.6, 0.9),
    ("Qwen7B/H200, 2.2/s (overload)", "qwen2.5-7b-h200", 2.2, 0.9),
)


def make_env(setting: tuple[Any, ...], requests: int) -> gym.Env:
    """The setting's env: LLMBatching-v2 on the Mooncake conversation trace."""
    _, profile, rate, util = setting
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(
            "batch_env/LLMBatching-v2",
            profile=profile,
            workload={
                "kind": "trace",
                "dataset": "mooncake-conversation",
                "target_rate_per_s": rate,
                "random_offset": True,
            },
            max_model_len=131_072,
            gpu_memory_utilization=util,
            grid=[256],
            max_num_batched_tokens=max(BUDGETS),
            budget_grid=list(BUDGETS),
            orders=list(ORDERS),
            horizon_requests=requests,
            warmup_requests=100,
        )


def policies() -> list[tuple[str, tuple[Any, ...]]]:
    """(family, parameters) of every policy tried."""
    out: list[tuple[str, tuple[Any, ...]]] = [
        ("constant", (o, b)) for o, b in itertools.product(ORDERS, BUDGETS)
    ]
    pairs = [(lo, hi) for lo, hi in itertools.combinations(BUDGETS, 2)]
    out += [("lpm-below", (k, b)) for k in (2, 8, 32) for b in BUDGETS]
    out += [("cached-budget", (t, lo, hi)) for t in (0.1, 0.3, 0.6) for lo, hi in pairs]
    out += [("queue-budget", (k, lo, hi)) for k in (2, 8, 32) for lo, hi in pairs]
    return out


def episode(args: tuple[tuple[Any, ...], str, tuple[Any, ...], int, int]) -> tuple[float, float]:
    """One episode: its reward rate per second and prefix hit rate."""
    setting, family, p, seed, requests = args
    env = make_env(setting, requests)
    u = env.unwrapped
    srv = u.server
    env.reset(seed=seed)
    for _ in range(50 * requests + 10_000):  # bounded: an episode takes a few steps a request
        state = srv.state
        if family == "constant":
            a = u.action_of(256, budget=p[1], order=p[0])
        elif family == "lpm-below":
            order = "longest-prefix" if len(state.waiting) <= p[0] else "fcfs"
            a = u.action_of(256, budget=p[1], order=order)
        elif family == "cached-budget":
            b = p[2] if waiting_cached_fraction(state) >= p[0] else p[1]
            a = u.action_of(256, budget=b, order="longest-prefix")
        else:  # queue-budget
            b = p[1] if len(state.waiting) > p[0] else p[2]
            a = u.action_of(256, budget=b, order="longest-prefix")
        *_, term, trunc, info = env.step(a)
        if term or trunc:
            break
    else:
        raise RuntimeError(f"{setting[0]} {family}{p} seed {seed}: no end")
    s = info["serving"]
    env.close()
    return float(s["reward_rate_per_s"]), float(s.get("prefix_hit_rate", 0.0))


def run_setting(setting: tuple[Any, ...], requests: int, jobs: int) -> list[str]:
    """The setting's table row: best constant, each family's paired gain."""
    pols = policies()
    with ProcessPoolExecutor(jobs) as pool:
        tune = list(
            pool.map(episode, [(setting, f, p, s, requests) for f, p in pols for s in TUNING_SEEDS])
        )
        k = len(TUNING_SEEDS)
        mean = [float(np.mean([r for r, _ in tune[i * k : (i + 1) * k]])) for i in range(len(pols))]
        best: dict[str, int] = {}
        for i, (f, _) in enumerate(pols):
            if f not in best or mean[i] > mean[best[f]]:
                best[f] = i
        chosen = list(best.values())
        held = list(
            pool.map(
                episode,
                [(setting, *pols[i], s, requests) for i in chosen for s in HELD_SEEDS],
            )
        )
    n = len(HELD_SEEDS)
    res = {pols[i][0]: held[j * n : (j + 1) * n] for j, i in enumerate(chosen)}
    base = np.array([r for r, _ in res["constant"]])
    c = pols[best["constant"]][1]
    row = [
        setting[0],
        f"{c[0]}, budget {c[1]}: {base.mean():.3f}/s, hit {np.mean([h for _, h in res['constant']]):.1%}",
    ]
    for f in ("lpm-below", "cached-budget", "queue-budget"):
        d = np.array([r for r, _ in res[f]]) - base
        gain = d / abs(base.mean())
        row.append(
            f"{100 * gain.mean():+.1f}% ± {100 * ci95_half_width(gain):.1f} ({pols[best[f]][1]})"
        )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=600, help="requests per episode (600)")
    ap.add_argument("--jobs", type=int, default=2, help="processes")
    ap.add_argument("--out", type=Path, help="also write the table here (Markdown)")
    args = ap.parse_args(argv)
    if args.requests < 1 or args.jobs < 1:
        print("error: --requests and --jobs must be >= 1", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    head = [
        "| setting | best constant (tuned on seeds 0, 1) | lpm-below | cached-budget | queue-budget |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines = list(head)
    for setting in SETTINGS:
        lines.append("| " + " | ".join(run_setting(setting, args.requests, args.jobs)) + " |")
        print(lines[-1], flush=True)
    text = (
        f"Gains over the best constant action on held-out seeds {list(HELD_SEEDS)}, paired "
        f"(mean ± 95% CI of the per-seed gain over |best constant|); {args.requests} requests "
        f"an episode after 100 of warm-up; the Mooncake conversation trace, prefix caching "
        f"on, cap 256. Each rule's best parameters on the tuning seeds in brackets.\n\n"
        + "\n".join(lines)
        + f"\n\n({time.perf_counter() - t0:.0f} s)\n"
    )
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
