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

``--planner`` measures the realizable lookahead planner instead
(:class:`baselines.rollout.RolloutPolicy`, as ``batch-env headroom`` builds it: the
setting's best constant as its base, the other constants as the base policies it may
switch to, every action a candidate, 4 futures a decision). It costs seconds of CPU a
planned decision, so it runs on a subset of the protocol: the settings of
``--planner-settings`` (default the two overloaded ones, 1 and 3: below one GPU's load
the queue seldom forms and the rules gained +0.0%), ``--planner-requests`` requests an
episode (default 300, after the same 100 of warm-up), and a plan at one decision in
``--planner-every`` (default 250; a decision is an engine iteration, some 10,000 an
episode: a plan takes 3-9 CPU s, so a plan at every decision would take 8-25 hours an
episode), the base's own choice at the others (``--planner-between base``: what the
one-step lookahead evaluated; holding the planned action instead, ``hold``, did far
worse in a probe). Planning at one decision in 250, the planner changes at most that
share of the decisions: its gain is what those deviations are worth, not what a planner
at every decision would gain. The best constant is tuned as above (``--requests`` on
the tuning seeds), then it and the planner run on the held-out seeds on the shortened
protocol, paired; the table gives the planner's gain with its paired 95% CI, its CPU ms
per decision and per planned decision, and the decisions it planned. ``--oracle`` adds
the clairvoyant twin (``rollout-oracle``, not realizable: it plans on the env's true
future). ``--jobs`` does not apply: the planner runs in one process.

The planner did not run on this env at first: a realizable copy (``fork(rng)``) raised
``AttributeError: 'NoneType' object has no attribute 'output_given'`` (a trace whose rows
carry the lengths has no law to redraw an in-flight request's output from), and any copy
shared ``PrefixKVCache.leaf``'s nodes with the env (``planning_copy`` took a list whose
ends are ``None`` for a flat list of scalars), so stepping it corrupted the env's cache
(``RuntimeError: requests wait, none runs, none admissible`` or an ``AssertionError`` in
``PrefixKVCache._take``). Both are fixed in the library (86ecb10: the trace's own output
lengths above what a request has generated; such a list scanned in full). A third gap
was worked around here at first: the env masks a ``longest-prefix`` action where it
admits as its FCFS twin (at 98-99% of the best constant's decisions here), and
``RolloutPolicy`` planned at every decision where its base's action (or the held one)
was masked, whatever ``every``; it now plays the masked action's valid twin
(``ActionCodec.twin``), the same action, so the script shows it the env's own mask.

    python scripts/llm_prefix_task_settings.py --planner [--planner-settings 1,3]
        [--planner-requests 300] [--planner-every 250] [--oracle] [--out FILE (appended)]
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
from baselines.rollout import RolloutPolicy
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
#: the settings the planner runs on by default (indices of SETTINGS): the overloaded ones
PLANNER_SETTINGS = (1, 3)


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
    u: Any = env.unwrapped
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


def planner_episode(
    args: tuple[tuple[Any, ...], tuple[Any, ...], int, int, dict[str, Any]],
) -> tuple[float, int, int, int, float, str]:
    """One planner episode (``RolloutPolicy`` with ``params``; its base the constant
    action ``(order, budget)``, the other constants its alternatives): its reward rate per
    second, its decisions, those it planned, those of them where it played another action
    than the base's (its FCFS twin where the base is masked is the same action), its CPU
    seconds, and the actions it planned (counts)."""
    setting, const, seed, requests, params = args
    env = make_env(setting, requests)
    u: Any = env.unwrapped
    acts = [u.action_of(256, budget=b, order=o) for o, b in itertools.product(ORDERS, BUDGETS)]
    base = u.action_of(256, budget=const[1], order=const[0])
    twin = u.action_of(256, budget=const[1], order="fcfs")
    pol = RolloutPolicy(
        env,
        base=base,
        policies=[{"name": "constant", "action": a} for a in acts if a != base],
        seed=seed,
        **params,
    )
    moved = 0  # planned decisions whose action is not the base's
    planned: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obs, info = env.reset(seed=seed)
        for _ in range(50 * requests + 10_000):
            k = pol.plans
            a = pol.act(obs, info)
            if pol.plans > k:
                moved += a != base and not (a == twin and not info["action_mask"][base])
                act = u.action_parts(a)
                name = f"{act.order} {act.budget}"
                planned[name] = planned.get(name, 0) + 1
            obs, _r, term, trunc, info = env.step(a)
            if term or trunc:
                break
        else:
            raise RuntimeError(f"{setting[0]} planner seed {seed}: no end")
    env.close()
    rate = float(info["serving"]["reward_rate_per_s"])
    counts = ", ".join(f"{n}: {c}" for n, c in sorted(planned.items()))
    return rate, pol.decisions, pol.plans, moved, pol.cpu_s, counts


def planner_setting(setting: tuple[Any, ...], args: argparse.Namespace) -> list[str]:
    """The setting's planner cells: the best constant (tuned as the rules' is), then it
    and the planner(s) on the held-out seeds, paired, on the planner's protocol (a
    progress line per episode on stderr)."""
    t0 = time.perf_counter()

    def say(line: str) -> None:
        print(f"  [{time.perf_counter() - t0:5.0f} s] {setting[0]}: {line}", file=sys.stderr)

    consts = [p for f, p in policies() if f == "constant"]
    tune = [
        float(
            np.mean([episode((setting, "constant", c, s, args.requests))[0] for s in TUNING_SEEDS])
        )
        for c in consts
    ]
    c = consts[int(np.argmax(tune))]
    say(f"best constant {c} ({max(tune):.3f}/s on the tuning seeds)")
    base = np.array(
        [episode((setting, "constant", c, s, args.planner_requests))[0] for s in HELD_SEEDS]
    )
    say(f"best constant on the held-out seeds: {np.round(base, 3).tolist()}")
    planners = [("rollout", {"samples": args.samples})]
    if args.oracle:
        planners.append(("rollout-oracle", {"clairvoyant": True}))
    cells = [f"{c[0]}, budget {c[1]}: {base.mean():.3f}/s"]
    for name, extra in planners:
        params = {"every": args.planner_every, "between": args.planner_between, **extra}
        runs = []
        for s in HELD_SEEDS:
            runs.append(planner_episode((setting, c, s, args.planner_requests, params)))
            r, n, k, m, cpu, counts = runs[-1]
            say(
                f"{name} seed {s}: {r:.4f}/s (best constant {base[HELD_SEEDS.index(s)]:.4f}), "
                f"{k} of {n} decisions planned ({m} not the base's action; {counts}), "
                f"{cpu:.0f} CPU s"
            )
        gain = (np.array([r for r, *_ in runs]) - base) / abs(base.mean())
        n, k, m = (sum(int(x[i]) for x in runs) for i in (1, 2, 3))
        cpu = sum(x[4] for x in runs)
        cells.append(
            f"{100 * gain.mean():+.2f}% ± {100 * ci95_half_width(gain):.2f}; "
            f"{1000 * cpu / n:.0f} ms/decision, {cpu / k:.2f} s/plan; {k} of {n} planned, "
            f"{m} not the base's action"
        )
    return cells


def planner_main(args: argparse.Namespace) -> int:
    """``--planner``: the planner's table (the module docstring)."""
    try:
        chosen = [SETTINGS[int(i)] for i in args.planner_settings.split(",")]
    except (ValueError, IndexError):
        print(
            f"error: --planner-settings {args.planner_settings!r}: give indices 0-"
            f"{len(SETTINGS) - 1}, comma-separated",
            file=sys.stderr,
        )
        return 2
    t0 = time.perf_counter()
    names = ["rollout"] + (["rollout-oracle"] if args.oracle else [])
    lines = [
        "| setting | best constant (tuned on seeds 0, 1), on these episodes | "
        + " | ".join(f"{n}: gain; CPU; decisions planned" for n in names)
        + " |",
        "| --- | --- |" + " --- |" * len(names),
    ]
    for setting in chosen:
        cells = planner_setting(setting, args)
        lines.append("| " + " | ".join([setting[0], *cells]) + " |")
        print(lines[-1], flush=True)
    text = (
        f"The planner ran on a subset of the protocol: settings "
        f"{[SETTINGS.index(s) for s in chosen]}, held-out seeds {list(HELD_SEEDS)}, "
        f"{args.planner_requests} requests an episode after 100 of warm-up, a plan at one "
        f"decision in {args.planner_every} ({args.planner_between!r} between), "
        f"{args.samples} futures a plan. Gains over the best constant action (tuned on the "
        f"tuning seeds with {args.requests} requests an episode) on the same episodes, "
        f"paired (mean ± 95% CI of the per-seed gain over |best constant|); CPU: the "
        f"planner's process time per decision and per planned decision. rollout is "
        f"realizable (its futures drawn from its model)"
        + ("; rollout-oracle plans on the true future (not realizable)" if args.oracle else "")
        + ".\n\n"
        + "\n".join(lines)
        + f"\n\n({time.perf_counter() - t0:.0f} s)\n"
    )
    print(text)
    if args.out:
        with args.out.open("a") as f:
            f.write("\n" + text)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=600, help="requests per episode (600)")
    ap.add_argument("--jobs", type=int, default=2, help="processes (--planner: one, always)")
    ap.add_argument(
        "--out", type=Path, help="also write the table here (Markdown; --planner: appended)"
    )
    ap.add_argument(
        "--planner", action="store_true", help="measure the lookahead planner (the docstring)"
    )
    ap.add_argument(
        "--planner-settings",
        default=",".join(map(str, PLANNER_SETTINGS)),
        help="indices of the settings the planner runs on (default 1,3: the overloaded ones)",
    )
    ap.add_argument(
        "--planner-requests", type=int, default=300, help="requests per planner episode (300)"
    )
    ap.add_argument(
        "--planner-every", type=int, default=250, help="plan at one decision in this many (250)"
    )
    ap.add_argument(
        "--planner-between",
        choices=("base", "hold"),
        default="base",
        help="between plans play the base's choice (base, the default) or the planned action",
    )
    ap.add_argument("--samples", type=int, default=4, help="futures per plan (4)")
    ap.add_argument(
        "--oracle", action="store_true", help="also the clairvoyant rollout-oracle (--planner)"
    )
    args = ap.parse_args(argv)
    if min(args.requests, args.jobs, args.planner_requests, args.planner_every, args.samples) < 1:
        print(
            "error: --requests, --jobs, --planner-requests, --planner-every and --samples "
            "must be >= 1",
            file=sys.stderr,
        )
        return 2
    if args.planner:
        return planner_main(args)
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
