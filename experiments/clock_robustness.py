"""clock-sensitivity, clock-latency: how robust the clock tasks' state-dependent gain is
(issue 64, items 4 and 5).

The clock tasks (``LLMClockBursts-v0``, ``LLMClockQwenH200-v0``) reward setting the SM
clock by the state because of the power model: a low clock saves a quarter of a
compute-bound prefill's energy and halves its speed, while memory-bound decode barely
slows. Two things the tasks take as given are not pinned by measurements:

* **How power falls with the clock** (``batch-env clock-sensitivity``): the exponent
  ``alpha``, memory power ``mem_w`` and the share of it that scales with the clock
  (``mem_clock_share``, ``s``); docs/validation.md ("The clock where it can be checked")
  gives the range the published per-clock figures allow. For each task and power model
  (:data:`POWER_MODELS`, through
  :meth:`batch_env.llm_profile.LLMProfile.with_power_model`): every constant action
  re-tuned on 2 tuning seeds, the reference rule ``clock-queue`` re-tuned
  (:data:`RULE_GRID`), then both, and optionally the realizable planner, on held-out
  seeds, paired (:func:`experiments.headroom.measure` with the changed problem).
  Writes ``RESULTS_DIR/<task>__<power model>.json`` as each ends (a rerun runs only the
  missing ones) and the table, ``docs/results/clock-sensitivity.md`` by default.
* **How long a clock change takes** (``batch-env clock-latency``): ``clock_latency_ms``
  of ``LLMBatching-v2`` (:mod:`batch_env.llm.clock`; published: 10-100 ms on Hopper-class
  GPUs, up to some 500 ms). For each task and latency: the rule re-tuned, against the
  task's stored best constant clock (``clock-best``), on held-out seeds, paired; and how
  often the rule's changes take effect. Writes the table,
  ``docs/results/clock-latency.md`` by default.

Episodes follow the task's protocol but are shorter (``--requests`` after the task's
1,000 of warm-up; the protocol has 20,000).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import baselines
from batch_env import tasks
from batch_env.evaluate import ci95_half_width
from batch_env.profiles.llm_profile import load as load_llm_profile
from batch_env.provenance import provenance_line
from experiments.benchmark import run_protocol
from experiments.harness.options import add_results_dir, count
from experiments.headroom import TUNING_SEEDS, measure

TASKS = ("LLMClockBursts-v0", "LLMClockQwenH200-v0")
#: power models: name -> the constants changed (``mem_w`` as a factor of the GPU's)
POWER_MODELS: dict[str, dict[str, float]] = {
    "default": {},
    "alpha=1": {"alpha": 1.0},
    "alpha=3": {"alpha": 3.0},
    "mem_w x0.7": {"mem_w": 0.7},
    "mem_w x1.3": {"mem_w": 1.3},
    "s=0.5": {"mem_clock_share": 0.5},
    "alpha=3+s=0.5": {"alpha": 3.0, "mem_clock_share": 0.5},
}
#: the rule's tuning grid: low clocks, high clocks, thresholds, budgets
RULE_GRID = ((810.0, 990.0, 1200.0), (1410.0, 1620.0, 1980.0), (0, 1, 2, 4), (512, 1024))


def _rates(
    task_id: str, policy: str, params: dict[str, Any], seeds: tuple[int, ...], n: int, kw: Any
) -> list[float]:
    out = run_protocol(
        task_id, policy, seeds=seeds, horizon_requests=n, params=params, env_kwargs=kw
    )
    return [float(x) for x in out["per_seed"]]


def tune_rule(
    task_id: str, env_kwargs: dict[str, Any] | None, n: int, grid: tuple[Any, ...] = RULE_GRID
) -> dict[str, Any]:
    """``clock-queue``'s parameters with the best mean rate on 2 tuning seeds (``n``
    requests an episode) on the task changed by ``env_kwargs``."""
    best: tuple[float, dict[str, Any]] = (-np.inf, {})
    for lo, hi, k, b in itertools.product(*grid):
        p = {"low_clock": lo, "high_clock": hi, "threshold": k, "budget": b}
        r = float(np.mean(_rates(task_id, "clock-queue", p, TUNING_SEEDS[:2], n, env_kwargs)))
        if r > best[0]:
            best = (r, p)
    return best[1]


def profile_of(task_id: str, model: str) -> dict[str, Any]:
    """The task's profile with the power model ``model`` (:data:`POWER_MODELS`), a dict."""
    base = load_llm_profile(tasks.get(task_id).kwargs["profile"])
    pm = base._arch_gpu().power_model
    changes = {k: (pm[k] * v if k == "mem_w" else v) for k, v in POWER_MODELS[model].items()}
    return base.with_power_model(**changes).to_dict()


def sensitivity_one(task_id: str, model: str, n: int, planners: bool) -> dict[str, Any]:
    """The headroom figures of one task under one power model (the module docstring)."""
    import time

    t0 = time.perf_counter()
    kw = {"profile": profile_of(task_id, model)}
    rule = tune_rule(task_id, kw, n)
    res = measure(
        f"batch_env/{task_id}",
        horizon=n,
        eval_seeds=10,
        top=4,
        samples=4,
        between="base",
        planner_horizon=300,
        planner_seeds=3,
        planner_warmup=200,
        every=4,
        tuning=2,
        env_kwargs=kw,
        reference=("clock-queue", rule),
        oracle=False,
        planners=planners,
    )
    res.update(variant=model, power_model=kw["profile"]["arch"]["gpu"]["power_model"])
    res["wall_s"] = time.perf_counter() - t0
    return res


def _pct(f: dict[str, float] | None) -> str:
    return "-" if f is None else f"{100 * f['rel']:+.1f}% ± {100 * f['rel_ci95']:.1f}"


def sensitivity_table(results: list[dict[str, Any]]) -> str:
    """The sensitivity table (Markdown), one row per task and power model."""
    lines = [
        "| task | power model (alpha, mem_w, s) | best constant (rate/s) | clock-queue (tuned) | "
        "clock-queue's gain | rollout's gain | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        pm, ref = r["power_model"], r["reference"]["params"]
        lines.append(
            f"| {r['task'].removeprefix('batch_env/')} | {r['variant']} ({pm['alpha']:g}, "
            f"{pm['mem_w']:.0f} W, {pm.get('mem_clock_share', 0.0):g}) | "
            f"{r['best_constant_parts']} ({r['best_constant_rate']:.2f}) | "
            f"{ref['low_clock']:g}/{ref['high_clock']:g} MHz, > {ref['threshold']} waiting, "
            f"budget {ref['budget']} | {_pct(r['figures'].get('reference'))} | "
            f"{_pct(r['figures'].get('rollout'))} | {r['wall_s'] / 60:.0f} min |"
        )
    return "\n".join(lines)


def _names(text: str, allowed: list[str], option: str) -> list[str]:
    got = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in got if x not in allowed]
    if bad or not got:
        raise ValueError(f"{option}={text!r} is invalid: allowed values are {allowed}")
    return got


def cmd_clock_sensitivity(args: argparse.Namespace) -> int:
    """The clock tasks' headroom (the re-tuned clock rule, and optionally the realizable
    planner, over the re-tuned best constant action) under each power model the published
    per-clock figures leave open; writes RESULTS_DIR/<task>__<power model>.json and the
    table (--out)."""
    task_ids = _names(args.tasks, list(TASKS), "--tasks")
    models = _names(args.power_models, list(POWER_MODELS), "--power-models")
    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    def path(t: str, m: str) -> Path:
        return out_dir / f"{t}__{m.replace(' ', '_').replace(',', '')}.json"

    todo = [(t, m) for t in task_ids for m in models if not path(t, m).exists()]
    print(f"{len(todo)} runs to do", file=sys.stderr, flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        futs = {
            pool.submit(sensitivity_one, t, m, args.requests, args.planners): (t, m)
            for t, m in todo
        }
        for fut in as_completed(futs):
            t, m = futs[fut]
            res = fut.result()
            path(t, m).write_text(json.dumps(res, indent=1, default=float))
            print(f"{t} {m}: done in {res['wall_s'] / 60:.1f} min", file=sys.stderr, flush=True)
    done = [json.loads(path(t, m).read_text()) for t in task_ids for m in models]
    text = sensitivity_table(done)
    _write(
        args.out,
        "The clock tasks' headroom under the power model's uncertainty",
        "Output of `batch-env clock-sensitivity` (experiments/clock_robustness.py gives the "
        "protocol). Gains are over the best constant action of the same power model, paired, "
        "with 95% CIs; mem_w x0.7 / x1.3 are the GPU's memory power at 70% / 130%.",
        text,
    )
    print(text)
    return 0


def switches(task_id: str, rule: dict[str, Any], seed: int, n: int, ms: float) -> float:
    """Clock changes that took effect per simulated second, in one episode of the rule."""
    env_id, kw = tasks.make_args(f"batch_env/{task_id}", horizon_requests=n, clock_latency_ms=ms)
    env = gym.make(env_id, **kw)
    pol = baselines.make("clock-queue", env, **rule)
    obs, info = env.reset(seed=seed)
    last, changes, t0 = info["clock_mhz"], 0, env.unwrapped.server.now  # type: ignore[attr-defined]
    for _ in range(10_000_000):
        obs, _r, term, trunc, info = env.step(pol.act(obs, info))
        changes += info["clock_mhz"] != last
        last = info["clock_mhz"]
        if term or trunc:
            break
    elapsed = env.unwrapped.server.now - t0  # type: ignore[attr-defined]
    env.close()
    return changes / elapsed if elapsed > 0 else 0.0


def cmd_clock_latency(args: argparse.Namespace) -> int:
    """The clock tasks' reference rule, re-tuned, against the task's best constant clock
    when a clock change takes each of --latencies ms to take effect; writes the table
    (--out)."""
    task_ids = _names(args.tasks, list(TASKS), "--tasks")
    lines = [
        "| task | clock latency (ms) | clock-queue tuned | clock-queue (rate/s) | "
        "best constant clock (rate/s) | gain | switches a second |",
        "|---|---|---|---|---|---|---|",
    ]
    budgets = (512,)
    for t in task_ids:
        held = tasks.get(f"batch_env/{t}").seeds[: args.seeds]
        const = dict(tasks.references()[f"batch_env/{t}"]["policies"]["clock-best"]["params"])
        for ms in args.latencies:
            kw = {"clock_latency_ms": ms} if ms else None
            grid = (RULE_GRID[0], (1620.0, 1980.0), RULE_GRID[2], budgets)
            rule = tune_rule(t, kw, min(args.requests, 3000), grid)
            a = _rates(t, "clock-queue", rule, held, args.requests, kw)
            b = _rates(t, "static-budget", const, held, args.requests, kw)
            d, scale = np.asarray(a) - np.asarray(b), abs(float(np.mean(b)))
            lines.append(
                f"| {t} | {ms:g} | {rule['low_clock']:g}/{rule['high_clock']:g} MHz, > "
                f"{rule['threshold']} waiting | {np.mean(a):.3f} | {np.mean(b):.3f} | "
                f"{100 * d.mean() / scale:+.1f}% ± {100 * ci95_half_width(d) / scale:.1f} | "
                f"{switches(t, rule, held[0], args.requests, ms):.2f} |"
            )
            print(lines[-1], flush=True)
    _write(
        args.out,
        "The clock tasks' reference rule when a clock change takes time",
        "Output of `batch-env clock-latency` (experiments/clock_robustness.py gives the "
        "protocol); gains are the re-tuned `clock-queue` over the task's best constant clock, "
        "paired over the held-out seeds, with 95% CIs; switches are the clock changes that "
        "took effect a second of the first held-out episode.",
        "\n".join(lines),
    )
    return 0


def _write(out: str, title: str, intro: str, table: str) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(f"# {title}\n\n{intro}\n\n{table}\n\n{provenance_line()}\n")


def _latencies(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(not (0 <= x <= 1e5) for x in out):
        raise argparse.ArgumentTypeError(
            f"{text!r} is invalid: expected comma-separated milliseconds in [0, 100000]"
        )
    return out


def add_parser(sub: Any) -> None:
    """Add ``batch-env clock-sensitivity`` and ``clock-latency`` to the subparsers."""
    p = sub.add_parser(
        "clock-sensitivity",
        help="the clock tasks' gain under the power models the published figures leave open",
        description=cmd_clock_sensitivity.__doc__,
    )
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated clock tasks")
    p.add_argument(
        "--power-models",
        default=",".join(POWER_MODELS),
        help=f"comma-separated power models of {list(POWER_MODELS)} (default all)",
    )
    p.add_argument("--requests", type=count(1), default=3000, help="requests an episode")
    p.add_argument("--jobs", type=count(1), default=2, help="processes (default 2)")
    p.add_argument(
        "--planners",
        action="store_true",
        help="the realizable planner too (3 x 300 requests: 10 minutes a power model)",
    )
    add_results_dir(p, "results/clock_sensitivity", "folder of the per-run JSON files")
    p.add_argument("--out", default="docs/results/clock-sensitivity.md", help="the table")
    p.set_defaults(func=cmd_clock_sensitivity)
    q = sub.add_parser(
        "clock-latency",
        help="the clock tasks' rule when a clock change takes time",
        description=cmd_clock_latency.__doc__,
    )
    q.add_argument("--tasks", default=",".join(TASKS), help="comma-separated clock tasks")
    q.add_argument(
        "--latencies",
        type=_latencies,
        default=[0.0, 10.0, 30.0, 100.0, 300.0],
        help="comma-separated clock latencies in ms (default 0,10,30,100,300)",
    )
    q.add_argument("--requests", type=count(1), default=5000, help="requests an episode")
    q.add_argument("--seeds", type=count(2), default=10, help="held-out seeds (default 10)")
    q.add_argument("--out", default="docs/results/clock-latency.md", help="the table")
    q.set_defaults(func=cmd_clock_latency)
