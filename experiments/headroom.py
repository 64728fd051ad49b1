"""How much a task rewards state-dependent control (``batch-env headroom``).

For each task, on held-out seeds, with paired 95% confidence intervals (Student t over
the seeds' differences):

1. **the best constant action**: every action of the task's space played at every
   decision (:class:`baselines.rollout.ConstantPolicy`), tuned on the tuning seeds
   (:data:`experiments.benchmark.TUNING_SEEDS`, never a held-out one), then run on the
   held-out seeds: what control that ignores the state achieves;
2. **the best constant action per episode**: the best, seed by seed, of the ``top``
   constants of the tuning (what adapting once per episode, with hindsight, is worth;
   of constants that behave alike on the tuning seeds, equal rates, only the best
   counts, so the ``top`` differ: on the LLM tasks every cap the queue never reaches
   gives the same episodes);
3. **the realizable planner** (``rollout``): a one-step lookahead over copies of the env
   whose future it draws from its model (:mod:`baselines.rollout`), with the best
   constant as its base, the ``top`` constants and the task's best stored reference
   (on a task without a bound: the policy its score calls 1) as the base policies it may
   switch to, and as its candidates every valid action (at most :data:`ALL_CANDIDATES` actions) or
   the ``top`` constants;
4. **its clairvoyant twin** (``rollout-oracle``): the same on the env's true future (not
   realizable, a reference as ``smdp-oracle`` is);
5. on a task without a bound, **the task's best stored reference** on the held-out
   seeds, paired with the best constant (a state-dependent reference, such as a clock
   rule, shows its headroom here at the constants' precision).

The planners cost far more CPU per decision than a policy: they run on
``planner_seeds`` of the held-out seeds (spread over them) with ``planner_horizon`` requests an episode,
paired with the best constant action on the same episodes, and their CPU seconds per
decision are reported. Every figure is a reward rate per second (higher is better); a
headroom is the paired difference over ``|best constant|``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from batch_env import tasks
from batch_env.provenance import provenance, provenance_line
from experiments.benchmark import TUNING_SEEDS, run_protocol
from experiments.harness.options import count
from experiments.harness.report import md_table
from experiments.harness.strict_json import dumps

from .harness.backends import process_pool

#: with at most this many actions the planner compares every valid one; with more (the
#: LLM tasks: 90-144) only the tuning's ``top`` constants
ALL_CANDIDATES = 66
#: steps a request a constant action may take before its episode is cut (the best
#: constants take 1-5; one that starves an LLM server, 250)
STEPS_PER_REQUEST = 20
RESULTS_DIR = Path("results/headroom")


def _spread(size: int, n: int) -> list[int]:
    """``n`` indices spread evenly over ``0..size-1`` (all of them if ``n >= size``)."""
    if n >= size:
        return list(range(size))
    return [int(i) for i in np.linspace(0, size - 1, n).round()]


def spread_seeds(task: tasks.Task, n: int) -> tuple[int, ...]:
    """``n`` of a task's held-out seeds spread over its list (on a load-grid task the
    seeds go by load, so the first ``n`` would all be low loads)."""
    return tuple(int(task.seeds[i]) for i in _spread(len(task.seeds), n))


def _job(
    task_id: str,
    name: str,
    params: dict[str, Any],
    seeds: tuple[int, ...],
    horizon: int,
    warmup: int | None = None,
    max_steps: int | None = None,
    say: Any = None,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One policy on ``seeds`` (a process pool's job): per-seed rates, wall seconds and,
    for a planner, its CPU seconds per decision. ``say`` (in this process only) gets a
    line after each episode; ``env_kwargs`` override the task's env arguments."""
    made: list[Any] = []

    def factory(env: gym.Env) -> Any:
        import baselines

        made.append(baselines.make(name, env, **params))
        return made[-1]

    t0 = time.perf_counter()
    with warnings.catch_warnings():  # a constant that starves the server warns per episode
        warnings.simplefilter("ignore")
        out = run_protocol(
            task_id,
            factory,
            seeds=seeds,
            horizon_requests=horizon,
            cut_ok=True,
            warmup_requests=warmup,
            max_steps=max_steps,
            env_kwargs=env_kwargs,
            tick=None
            if say is None
            else lambda done, total: say(
                f"  {name}: episode {done}/{total} ({time.perf_counter() - t0:.0f} s)"
            ),
        )
    res = {
        "per_seed": out["per_seed"],
        "cut_seeds": out.get("cut_seeds", []),
        "seeds": list(seeds),
        "horizon_requests": horizon,
        **({"warmup_requests": warmup} if warmup is not None else {}),
        "wall_s": time.perf_counter() - t0,
        "policy": name,
        "params": params,
    }
    if hasattr(made[0], "cpu_s_per_decision"):
        decisions = sum(int(p.decisions) for p in made)
        res["decisions"] = decisions
        res["cpu_s_per_decision"] = sum(float(p.cpu_s) for p in made) / max(1, decisions)
    return res


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean of ``a - b`` seed by seed, its 95% half-width, and both over ``|mean b|``."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    from batch_env.evaluate import ci95_half_width

    half = ci95_half_width(d) if d.size > 1 else math.nan
    scale = abs(float(np.mean(b)))
    return {
        "diff": float(d.mean()),
        "ci95": float(half),
        "rel": float(d.mean()) / scale if scale else math.nan,
        "rel_ci95": float(half) / scale if scale else math.nan,
    }


Spec = tuple[str, str, dict[str, Any], tuple[int, ...], int, int | None]
"""A run of :func:`measure`: its key, the policy's name and parameters, the seeds, the
requests per episode and the warm-up requests (``None``: the task's)."""


def _run_all(
    task_id: str,
    specs: list[Spec],
    jobs: int,
    warm: int,
    say: Any = None,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`_job` for each spec (in ``jobs`` processes), by key. A constant that takes
    more than :data:`STEPS_PER_REQUEST` steps a request (one that starves the server: a
    cap of 1 on an LLM task takes 250) is cut there. ``say`` gets a line per finished
    run (and, in one process, per planner episode: a planner's run takes minutes)."""

    def bound(name: str, hz: int, wu: int | None) -> int | None:
        if name != "constant":
            return None
        return STEPS_PER_REQUEST * (hz + (warm if wu is None else wu))

    out: dict[str, Any] = {}
    t0 = time.perf_counter()

    def done(key: str) -> None:
        if say is not None:
            left = len(specs) - len(out)
            say(
                f"{task_id}: {key} done in {out[key]['wall_s']:.0f} s ({len(out)}/{len(specs)}"
                f" runs, {time.perf_counter() - t0:.0f} s so far{'' if left else ', all done'})"
            )

    if jobs <= 1:
        for key, name, params, seeds, hz, wu in specs:
            tick = say if say is not None and name.startswith("rollout") else None
            out[key] = _job(
                task_id, name, params, seeds, hz, wu, bound(name, hz, wu), tick, env_kwargs
            )
            done(key)
        return out
    with process_pool(jobs, fresh=False) as pool:  # baselines only: no PyTorch
        futs = {
            pool.submit(
                _job, task_id, name, params, seeds, hz, wu, bound(name, hz, wu), None, env_kwargs
            ): key
            for key, name, params, seeds, hz, wu in specs
        }
        for fut in as_completed(futs):
            out[futs[fut]] = fut.result()
            done(futs[fut])
    return out


def stored_reference(task_id: str) -> tuple[str, dict[str, Any]] | None:
    """The task's best realizable reference policy as stored (its baseline name and its
    tuned parameters), or ``None`` where the task has a bound or no stored references: on
    a task without a bound, the policy its normalized score calls 1."""
    ref = tasks.references().get(task_id)
    if ref is None or "best_policy" not in ref or tasks.get(task_id).bound is not None:
        return None
    fig = ref["policies"][ref["best_policy"]]
    if fig.get("oracle") or fig.get("policy") in (None, "random"):
        return None
    return str(fig["policy"]), dict(fig.get("params") or {})


def action_name(env: gym.Env, a: int) -> str:
    """The action ``a`` as the headroom table names it: its parts on an env that has
    them (``LLMAction(cap=16, budget=512, order='fcfs', clock=810.0)``), else its number."""
    describe = getattr(env.unwrapped, "action_parts", None)
    return str(describe(a)) if describe is not None else str(a)


def _rank_constants(
    tuned_runs: dict[str, Any], top: int
) -> tuple[dict[int, float], set[int], int, list[int]]:
    """``(mean rate per constant, the constants cut, the best, the kept)`` of the tuning:
    the best constant and the ``top`` that behave differently (of constants whose tuning
    rates are equal to 1e-9, the same episodes, e.g. caps the queue never reaches, only
    the first). A constant cut on a tuning seed is not a candidate (its rate is the cost
    before its queue grew), unless every one was cut."""
    tuned = {int(a): float(np.mean(r["per_seed"])) for a, r in tuned_runs.items()}
    cut = {int(a) for a, r in tuned_runs.items() if r["cut_seeds"]}
    order = sorted(tuned, key=lambda a: (a in cut and len(cut) < len(tuned), -tuned[a]))
    distinct: list[int] = []
    for a in order:
        if all(abs(tuned[a] - tuned[b]) > 1e-9 * abs(tuned[b]) for b in distinct):
            distinct.append(a)
    return tuned, cut, order[0], distinct[: max(1, top)]


def _family(
    best: int, kept: list[int], reference: tuple[str, dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The base policies the planners may switch to: the kept constants but the best
    (their own base), and the task's best stored reference where it has one."""
    family: list[dict[str, Any]] = [{"name": "constant", "action": a} for a in kept if a != best]
    if reference is not None:
        family.append({"name": reference[0], **reference[1]})
    return family


def measure(
    task_id: str,
    *,
    horizon: int,
    eval_seeds: int,
    planner_seeds: int,
    planner_horizon: int,
    top: int = 8,
    samples: int = 4,
    every: int = 1,
    between: str = "hold",
    planner_warmup: int | None = None,
    jobs: int = 1,
    planners: bool = True,
    tuning: int = len(TUNING_SEEDS),
    log: Any = None,
    env_kwargs: dict[str, Any] | None = None,
    reference: tuple[str, dict[str, Any]] | None | str = "stored",
    oracle: bool = True,
) -> dict[str, Any]:
    """The headroom figures of one task (the module docstring).

    :param horizon: requests per episode of the tuning and the held-out constants.
    :param eval_seeds: held-out seeds of the constants (spread over the task's list).
    :param planner_seeds: how many of those the planners run on (spread over them).
    :param planner_horizon: requests per planner episode.
    :param top: constants of the tuning kept for the per-episode best and the planners.
    :param samples: futures per decision of the realizable planner.
    :param every: the planners plan at one decision in ``every``.
    :param between: what the planners play between planned decisions (``"hold"``: the
        planned action; ``"base"``: their base policy's choice).
    :param planner_warmup: warm-up requests of a planner episode (``None``: the task's).
    :param jobs: processes.
    :param planners: run the planners (False: constants only).
    :param tuning: how many of the tuning seeds the constants are tuned on (the first).
    :param log: called with a line of progress.
    :param env_kwargs: the task's env arguments changed (another power model, a latency).
    :param reference: ``(baseline name, parameters)`` measured beside the constants,
        ``None``, or ``"stored"``: the task's stored best (:func:`stored_reference`).
    :param oracle: run the clairvoyant planner too (with ``planners``).
    """
    task = tasks.get(task_id)
    env_id, kwargs = tasks.make_args(task_id, **(env_kwargs or {}))
    env = gym.make(env_id, **kwargs)
    n_actions = int(env.action_space.n)  # type: ignore[attr-defined]  # Discrete
    names = [action_name(env, a) for a in range(n_actions)]
    env.close()
    say = log or (lambda line: None)
    held = spread_seeds(task, eval_seeds)
    tuning_seeds = tuple(TUNING_SEEDS[: max(1, tuning)])
    # the planners' seeds spread over the held-out ones too (a load grid's go by load)
    sub = tuple(held[i] for i in _spread(len(held), max(1, planner_seeds)))

    warm = int(task.kwargs.get("warmup_requests", 0))

    def run_all(specs: list[Spec], progress: bool = True) -> dict[str, Any]:
        return _run_all(task_id, specs, jobs, warm, say if progress else None, env_kwargs)

    def named(a: int) -> str:  # the action as the table names it, and its number
        return f"{names[a]} (action {a})" if names[a] != str(a) else f"action {a}"

    t0 = time.perf_counter()
    say(
        f"{task_id}: tuning {n_actions} constant actions on {len(tuning_seeds)} seed(s) x "
        f"{horizon} requests"
    )
    tuned_runs = run_all(
        [
            (str(a), "constant", {"action": a}, tuning_seeds, horizon, None)
            for a in range(n_actions)
        ],
        progress=False,  # one line per constant would be hundreds
    )
    tuned, cut, best, kept = _rank_constants(tuned_runs, top)
    say(
        f"{task_id}: tuned {n_actions} constants in {time.perf_counter() - t0:.0f} s; best "
        f"{named(best)}"
    )
    specs: list[Spec] = [("greedy", "greedy", {}, held, horizon, None)]
    specs += [(f"constant {a}", "constant", {"action": a}, held, horizon, None) for a in kept]
    ref_policy = stored_reference(task_id) if isinstance(reference, str) else reference
    if ref_policy is not None:
        name, params = ref_policy
        specs.append(("reference", name, params, held, horizon, None))
    if planners:
        rollout = {
            "base": best,
            "policies": _family(best, kept, ref_policy),
            "candidates": None if n_actions <= ALL_CANDIDATES else kept,
            "samples": samples,
            "every": every,
            "between": between,
        }
        on = (sub, planner_horizon, planner_warmup)
        specs += [
            ("best constant (planner episodes)", "constant", {"action": best}, *on),
            ("rollout", "rollout", rollout, *on),
        ]
        if oracle:
            clairvoyant = {k: v for k, v in rollout.items() if k != "samples"}
            specs.append(("rollout-oracle", "rollout-oracle", clairvoyant, *on))
    which = "the two planners" if oracle else "the realizable planner"
    say(
        f"{task_id}: {len(specs)} runs on the held-out seeds: greedy, {len(kept)} constants"
        + (", the task's reference" if ref_policy is not None else "")
        + (f", and {which} on {len(sub)} x {planner_horizon} requests" if planners else "")
    )
    runs = run_all(specs)
    const = runs[f"constant {best}"]["per_seed"]
    per_episode = np.max([runs[f"constant {a}"]["per_seed"] for a in kept], axis=0).tolist()
    out: dict[str, Any] = {
        "task": task_id,
        "actions": n_actions,
        "best_constant": best,
        "best_constant_parts": names[best],
        "top": kept,
        "tuning": {
            "seeds": list(tuning_seeds),
            "horizon_requests": horizon,
            "rates": tuned,
            "cut": sorted(cut),
            "steps_per_request_cap": STEPS_PER_REQUEST,
        },
        "held_out": {"seeds": list(held), "horizon_requests": horizon},
        "runs": runs,
        "figures": {
            "greedy": paired(runs["greedy"]["per_seed"], const),
            "best constant per episode": paired(per_episode, const),
        },
        "wall_s": time.perf_counter() - t0,
    }
    out["best_constant_rate"] = float(np.mean(const))
    if ref_policy is not None:
        out["reference"] = {"policy": ref_policy[0], "params": ref_policy[1]}
        out["figures"]["reference"] = paired(runs["reference"]["per_seed"], const)
    if planners:
        ref = runs["best constant (planner episodes)"]["per_seed"]
        out["planner_episodes"] = {
            "seeds": list(sub),
            "horizon_requests": planner_horizon,
            "warmup_requests": planner_warmup,
            "every": every,
            "between": between,
        }
        out["figures"]["rollout"] = paired(runs["rollout"]["per_seed"], ref)
        if oracle:
            out["figures"]["rollout-oracle"] = paired(runs["rollout-oracle"]["per_seed"], ref)
    return out


def _cell(f: dict[str, float] | None) -> str:
    if f is None or f.get("rel") is None:
        return "-"
    half = f.get("rel_ci95")  # None in a stored file where it was NaN (one seed: no CI)
    if half is None or not math.isfinite(half):
        return f"{100 * f['rel']:+.1f}%"
    return f"{100 * f['rel']:+.1f}% ± {100 * f['rel_ci95']:.1f}"


def format_table(results: list[dict[str, Any]]) -> str:
    """The headroom table (Markdown): each figure as a paired difference with the best
    constant action over its magnitude (positive: better than it)."""
    rows = []
    for r in results:
        f = r["figures"]
        cpu = r["runs"].get("rollout", {}).get("cpu_s_per_decision")
        ocpu = r["runs"].get("rollout-oracle", {}).get("cpu_s_per_decision")
        pe = r.get("planner_episodes")
        rows.append(
            [
                r["task"].removeprefix("batch_env/"),
                r["actions"],
                f"{r['best_constant_parts']} ({r['best_constant_rate']:.4g}/s)",
                _cell(f.get("greedy")),
                _cell(f.get("best constant per episode")),
                _cell(f.get("reference"))
                + (f" ({r['reference']['policy']})" if "reference" in f else ""),
                _cell(f.get("rollout")),
                _cell(f.get("rollout-oracle")),
                "-" if cpu is None else f"{cpu * 1e3:.3g} / {ocpu * 1e3:.3g}",
                f"{len(r['held_out']['seeds'])} x {r['held_out']['horizon_requests']}"
                + ("" if pe is None else f"; {len(pe['seeds'])} x {pe['horizon_requests']}"),
            ]
        )
    header = [
        "task",
        "actions",
        "best constant (reward rate)",
        "greedy",
        "best constant per episode",
        "task's reference",
        "rollout",
        "rollout-oracle",
        "planner ms/decision",
        "episodes (constants; planners)",
    ]
    where = sorted(
        {
            r["task"].removeprefix("batch_env/") + ": " + provenance_line(r["provenance"])
            for r in results
            if "provenance" in r
        }
    )
    return "\n".join(md_table(header, rows) + ([""] + [f"- {w}" for w in where] if where else []))


def cmd_headroom(args: argparse.Namespace) -> int:
    """How much each task rewards state-dependent control: the best constant action
    (tuned on the tuning seeds), the best constant per episode, a realizable lookahead
    planner and its clairvoyant twin, on held-out seeds with paired 95% CIs; writes
    RESULTS_DIR/<task>.json and RESULTS_DIR/headroom.md (docs/headroom.md)."""
    # with or without batch_env/; unknown ids fail before anything runs
    given = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else []
    ids = [tasks.get(t).id for t in given] if given else list(tasks.current())
    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for t in ids:
        r = measure(
            t,
            horizon=args.horizon_requests,
            eval_seeds=args.seeds,
            planner_seeds=args.planner_seeds,
            planner_horizon=args.planner_horizon_requests,
            top=args.top,
            samples=args.samples,
            every=args.planner_every,
            between=args.planner_between,
            planner_warmup=args.planner_warmup_requests,
            jobs=args.jobs,
            planners=not args.no_planners,
            tuning=args.tuning_seeds,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
        r["provenance"] = provenance()
        (out_dir / f"{t.removeprefix('batch_env/')}.json").write_text(dumps(r, indent=1) + "\n")
        results.append(r)
    every = sorted(out_dir.glob("*.json"))
    stored = [json.loads(p.read_text()) for p in every]
    table = format_table(stored)
    (out_dir / "headroom.md").write_text(table + "\n")
    print(format_table(results))
    return 0


def add_parser(sub: Any) -> None:
    """Add ``batch-env headroom`` to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "headroom",
        help="how much each task rewards state-dependent control (best constant action, "
        "per-episode best, lookahead planners)",
        description=cmd_headroom.__doc__,
    )
    p.add_argument(
        "--tasks", default=None, help="comma-separated task ids (default: every current task)"
    )
    p.add_argument(
        "--horizon-requests",
        type=count(1),
        default=5000,
        help="requests per episode of the constants (tuning and held-out; default 5000)",
    )
    p.add_argument(
        "--seeds",
        type=count(1),
        default=10,
        help="held-out seeds of the constants (default 10; with 1 the figures have no CI)",
    )
    p.add_argument(
        "--planner-seeds",
        type=count(1),
        default=4,
        help="held-out seeds of the planners, spread over those of --seeds (default 4; with 1 "
        "the planners' figures have no CI)",
    )
    p.add_argument(
        "--planner-horizon-requests",
        type=count(1),
        default=1000,
        help="requests per planner episode (default 1000)",
    )
    p.add_argument(
        "--planner-warmup-requests",
        type=count(0),
        default=None,
        help="warm-up requests per planner episode (default: the task's)",
    )
    p.add_argument(
        "--planner-every",
        type=count(1),
        default=1,
        help="the planners plan at one decision in this many (default 1: every decision)",
    )
    p.add_argument(
        "--planner-between",
        choices=("hold", "base"),
        default="hold",
        help="between planned decisions the planners hold the planned action (hold, the "
        "default) or play their base policy's choice (base: for state-dependent bases)",
    )
    p.add_argument(
        "--top", type=count(1), default=8, help="constants kept from the tuning (default 8)"
    )
    p.add_argument(
        "--samples",
        type=count(1),
        default=4,
        help="futures per decision of the realizable planner (default 4)",
    )
    p.add_argument(
        "--tuning-seeds",
        type=count(1),
        default=len(TUNING_SEEDS),
        help=f"tune the constants on the first this many of the tuning seeds {list(TUNING_SEEDS)} "
        f"(default {len(TUNING_SEEDS)})",
    )
    p.add_argument("--jobs", type=count(1), default=1, help="processes (default 1)")
    p.add_argument("--no-planners", action="store_true", help="constants only")
    p.add_argument(
        "--results-dir",
        default=str(RESULTS_DIR),
        help=f"where the JSON files and the table go (default {RESULTS_DIR})",
    )
    p.set_defaults(func=cmd_headroom)


__all__ = ["format_table", "measure", "paired", "spread_seeds"]
