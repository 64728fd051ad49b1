"""The numbers behind the LLM benchmark tasks' settings (issue 40).

An LLM task needs two things that only measurement can tell: its best realizable
reference must beat greedy (vLLM's defaults) by clearly more than the paired CI, so that
its normalized score is defined; and ``oracle-srpt`` (which reads the true output lengths,
so no server can run it) must beat that reference, so that the task is not solved on
arrival. For each candidate setting of each task this script runs, on the same seeds
(common random numbers, so every difference is paired):

* ``greedy``: vLLM's defaults, the largest cap (256), vLLM v1's default token budget for
  the profile's GPU (2,048 on the A100), first come first served;
* the task's realizable references: ``sarathi`` (the budget sized to the TPOT SLA), each
  admission order with sarathi's budget (``edf``, ``shortest-prompt``,
  ``class-priority``), and ``budget-best``, the static budget and order with the best
  figure on separate tuning seeds (0-3);
* ``oracle-srpt``: shortest true remaining output first, with sarathi's budget (``srpt``)
  or its best static budget on the tuning seeds (``srpt-best``).

It prints and writes a Markdown table per task: each policy's mean reward rate per second,
the best realizable reference's gain over greedy with its paired 95% CI, and the oracle's
gain over that reference with its paired 95% CI.

    python scripts/llm_task_settings.py [--task bursty|classes] [--seeds 6]
        [--requests 1500] [--jobs 2] [--out docs/results/llm-task-settings.md]

Episodes are shorter than a task's protocol (``--requests`` summary requests after 200
of warm-up), so that a grid of settings runs in minutes; the chosen settings' figures at
full length are the tasks' stored references (``batch-env benchmark --references``).
The grid's budgets go up to 4,096; the tasks stop at vLLM's A100 default, 2,048, so that
greedy is their largest action (the tuned budget was 256 at every setting measured).
``docs/results/llm-task-settings.md`` is this script's output with its defaults
(566 s with 2 processes on the 2-core VM, beside other runs).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import baselines
import batch_env
from batch_env.evaluate import ci95_half_width
from batch_env.tasks import LLM_BUDGET_GRID, LLM_CAP_GRID

TUNING_SEEDS = (0, 1, 2, 3)
CODE = {"kind": "empirical", "dataset": "azure-code-2023-gz"}
CONV = {"kind": "empirical", "dataset": "azure-conv-2023-gz"}
#: long prompts with outputs that vary (lognormal): prompt lengths like the code trace's
#: (mean 2,055, CV 1.0), outputs of a summary or an answer (mean 256, CV 1.2)
LONG = {
    "kind": "lognormal",
    "prompt_tokens": 2048,
    "prompt_cv": 1.0,
    "output_tokens": 256,
    "output_cv": 1.2,
}
#: batch work beside chat: medium prompts, long outputs that vary (reports, translations)
BATCH = {
    "kind": "lognormal",
    "prompt_tokens": 512,
    "prompt_cv": 0.5,
    "output_tokens": 400,
    "output_cv": 1.0,
}

COMMON: dict[str, Any] = {
    "profile": "llama-2-7b-a100",
    "scheduler": "chunked",
    "grid": list(LLM_CAP_GRID),
    "max_num_batched_tokens": 4096,
    "budget_grid": list(LLM_BUDGET_GRID),
}


def bursty(rate: float, cv: float, lengths: dict, w_energy: float) -> dict[str, Any]:
    """The bursty long-prompt task's kwargs at one setting."""
    return {
        **COMMON,
        "workload": {"kind": "gamma", "rate_per_s": rate, "cv": cv},
        "lengths": lengths,
        "ttft_sla_ms": 2000.0,
        "tpot_sla_ms": 50.0,
        "orders": ["fcfs", "edf", "shortest-prompt"],
        "reward_weights": {"latency": 1.0, "energy": w_energy, "sla": 20.0, "drop": 20.0},
    }


def classes(rate: float, chat_share: float, util: float, batch: dict) -> dict[str, Any]:
    """The two-class task's kwargs at one setting."""
    return {
        **COMMON,
        "gpu_memory_utilization": util,
        "workload": {"kind": "poisson", "rate_per_s": rate},
        "classes": [
            {
                "name": "chat",
                "share": chat_share,
                "ttft_sla_ms": 1000.0,
                "tpot_sla_ms": 50.0,
                "weight": 1.0,
                "lengths": CONV,
            },
            {
                "name": "batch",
                "share": 1.0 - chat_share,
                "ttft_sla_ms": 10000.0,
                "tpot_sla_ms": 200.0,
                "weight": 0.25,
                "lengths": batch,
            },
        ],
        "orders": ["fcfs", "edf", "shortest-prompt", "class-priority"],
        "reward_weights": {"latency": 1.0, "energy": 0.0, "sla": 20.0, "drop": 20.0},
    }


#: candidate settings per task: name -> kwargs
CANDIDATES: dict[str, dict[str, dict[str, Any]]] = {
    "bursty": {
        f"{ln} gamma {rate} cv {cv} w_e {we}": bursty(rate, cv, lengths, we)
        for (ln, lengths, rates), cv, we in itertools.product(
            (("code", CODE, (0.6, 0.9)), ("long", LONG, (0.5, 0.8))), (2.0, 4.0), (0.005,)
        )
        for rate in rates
    },
    "classes": {
        f"{bn} {rate}/s chat {share} util {util}": classes(rate, share, util, batch)
        for (bn, batch, rates), share, util in itertools.product(
            (("code", CODE, (2.0, 3.0)), ("batch", BATCH, (1.2, 1.6))), (0.5,), (0.25,)
        )
        for rate in rates
    },
}
#: the realizable references per task (label -> baseline, params), beside greedy
REALIZABLE = {
    "bursty": {
        "sarathi": ("sarathi", {}),
        "edf": ("edf", {}),
        "shortest-prompt": ("shortest-prompt", {}),
    },
    "classes": {
        "sarathi": ("sarathi", {}),
        "edf": ("edf", {}),
        "shortest-prompt": ("shortest-prompt", {}),
        "class-priority": ("class-priority", {}),
    },
}


def episode(args: tuple[dict[str, Any], str, dict[str, Any], int, int, bool]) -> float:
    """One episode's reward rate per second."""
    kw, name, params, seed, requests, oracle = args
    kw = {**kw, "horizon_requests": requests, "warmup_requests": 200}
    if oracle:
        kw["orders"] = [*kw["orders"], "srpt"]
    env = gym.make("batch_env/LLMBatching-v2", oracle_info=oracle, max_episode_steps=10**8, **kw)
    try:
        res = batch_env.evaluate(baselines.make(name, env, **params), env, n_episodes=1, seed=seed)
    finally:
        env.close()
    return float(res.episodes[0]["reward_rate_per_s"])


def run_setting(kw: dict, task: str, seeds: tuple[int, ...], requests: int, pool: Any) -> dict:
    """Every policy's per-seed figures at one setting (the tuned ones tuned first)."""

    def many(items: list[tuple[str, dict, tuple[int, ...], bool]]) -> list[np.ndarray]:
        jobs = [(kw, n, p, s, requests, o) for n, p, ss, o in items for s in ss]
        out = list(pool.map(episode, jobs))
        res, i = [], 0
        for _, _, ss, _ in items:
            res.append(np.array(out[i : i + len(ss)]))
            i += len(ss)
        return res

    orders = [o for o in kw["orders"] if o != "class-priority" or "classes" in kw]
    static = [{"budget": b, "order": o} for b in LLM_BUDGET_GRID for o in orders]
    oracle_budgets = [{}] + [{"budget": b} for b in LLM_BUDGET_GRID]
    tuned = many(
        [("static-budget", p, TUNING_SEEDS, False) for p in static]
        + [("oracle-srpt", p, TUNING_SEEDS, True) for p in oracle_budgets]
    )
    best_static = static[int(np.argmax([t.mean() for t in tuned[: len(static)]]))]
    best_oracle = oracle_budgets[int(np.argmax([t.mean() for t in tuned[len(static) :]]))]
    labels = {
        "greedy": ("static-budget", {"budget": 2048}, False),
        **{k: (n, p, False) for k, (n, p) in REALIZABLE[task].items()},
        "budget-best": ("static-budget", best_static, False),
        "srpt": ("oracle-srpt", {}, True),
        "srpt-best": ("oracle-srpt", best_oracle, True),
    }
    figs = many([(n, p, seeds, o) for n, p, o in labels.values()])
    return {
        "rates": dict(zip(labels, figs, strict=True)),
        "budget_best": best_static,
        "srpt_best": best_oracle,
    }


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean of ``a - b`` and its 95% CI half-width."""
    d = a - b
    return float(d.mean()), ci95_half_width(d)


def table(task: str, rows: list[tuple[str, dict]]) -> list[str]:
    """The Markdown table of one task's settings."""
    names = list(rows[0][1]["rates"])
    lines = [
        f"| setting | {' | '.join(names)} | best realizable | its gain over greedy "
        "| oracle gain over it | both hold |",
        "|" + " --- |" * (len(names) + 5),
    ]
    for name, r in rows:
        rates = r["rates"]
        real = {k: v for k, v in rates.items() if k not in ("srpt", "srpt-best")}
        best = max(real, key=lambda k: real[k].mean())
        oracle = max(("srpt", "srpt-best"), key=lambda k: rates[k].mean())
        g, gh = paired(real[best], rates["greedy"])
        o, oh = paired(rates[oracle], real[best])
        ok = best != "greedy" and g > gh and o > oh
        cells = " | ".join(f"{rates[k].mean():.3f}" for k in names)
        lines.append(
            f"| {name} | {cells} | {best}"
            + (f" ({json.dumps(r['budget_best'])})" if best == "budget-best" else "")
            + f" | {g:+.3f} +- {gh:.3f} ({100 * g / abs(rates['greedy'].mean()):+.1f}%) "
            f"| {oracle}: {o:+.3f} +- {oh:.3f} ({100 * o / abs(real[best].mean()):+.1f}%) "
            f"| {'yes' if ok else 'no'} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Measure the candidate settings and write the tables."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--task",
        choices=sorted(CANDIDATES),
        action="append",
        help="the task(s) to measure (default: both)",
    )
    ap.add_argument("--seeds", type=int, default=6, help="measurement seeds (1000, 1001, ...)")
    ap.add_argument("--requests", type=int, default=1500, help="summary requests per episode")
    ap.add_argument("--jobs", type=int, default=2, help="episodes in parallel processes")
    ap.add_argument(
        "--out", default="docs/results/llm-task-settings.md", help="Markdown output file"
    )
    args = ap.parse_args(argv)
    seeds = tuple(range(1000, 1000 + args.seeds))
    lines = [
        "# The LLM tasks' settings (`scripts/llm_task_settings.py`)",
        "",
        f"{args.seeds} seeds x {args.requests} summary requests (200 warm-up) per figure, "
        "paired across policies (common random numbers); tuned references chose on seeds "
        f"{list(TUNING_SEEDS)}. Reward rates per second (higher is better). `both hold`: "
        "the best realizable reference beats greedy by more than its paired 95% CI, and "
        "the better oracle beats that reference by more than its paired 95% CI.",
        "",
    ]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        for task in args.task or sorted(CANDIDATES):
            rows = []
            for name, kw in CANDIDATES[task].items():
                rows.append((name, run_setting(kw, task, seeds, args.requests, pool)))
                print(table(task, rows[-1:])[-1], flush=True)
            lines += [f"## {task}", "", *table(task, rows), ""]
    lines.append(f"Run time: {time.perf_counter() - t0:.0f} s with {args.jobs} processes.")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
