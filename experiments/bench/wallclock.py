"""Wall-clock to a good agent (:func:`bench_wallclock`; ``batch-env bench --wallclock``, not
in the default run: about 20 minutes on one core, nine tenths of them spent evaluating the
task): how long PPO with the project's defaults (``agents/hyperparams/ppo.yml``, trained
by ``agents.train.train``, one torch thread, CPU) takes to bring
``batch_env/LowLoadEnergy-v0``'s cost rate within 1% of the SMDP gain, against
CartPole-v1's time to an evaluation mean return of 475 with the same PPO settings, budget
and evaluation cadence, seed by seed in the same run. Each run stops at the first
periodic evaluation (every ``eval_freq`` = 10,000 steps: 3 deterministic episodes on the
held-out seeds 100000-100002, ``batch_env.evaluate``) that meets its target; the median
over 3 seeds is reported in environment steps and in training seconds (evaluations
excluded; with them too), each seed's figures beside it, and a run that does not meet
the target within its step budget (the file's ``n_timesteps``, 300,000) is reported as
not reached with its best figure. The record also goes to ``results/bench/wallclock.json``."""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml

import batch_env
from agents.common import load_hyperparams
from batch_env.tasks import TASKS

#: the task of :func:`bench_wallclock` and the reference it is timed against
WALLCLOCK_TASK = "batch_env/LowLoadEnergy-v0"


WALLCLOCK_REFERENCE = "CartPole-v1"


#: CartPole-v1's target: the evaluation's mean return (the env's reward threshold, 475)
CARTPOLE_TARGET_RETURN = 475.0


def _median_or_none(values: list[float | None]) -> float | None:
    """Median with ``None`` (not reached) counted as infinite; ``None`` when the median
    itself is not reached (at least half the runs missed the target)."""
    m = statistics.median([math.inf if v is None else float(v) for v in values])
    return None if math.isinf(m) else m


def _time_to_target(
    env_id: str,
    env_kwargs: dict[str, Any],
    hyperparams: str | None,
    seed: int,
    settings: dict[str, Any],
    reached: Callable[[dict[str, Any]], bool],
    figure: Callable[[dict[str, Any]], float],
    best: Callable[[list[float]], float],
    run_dir: Path,
) -> dict[str, Any]:
    """One training run (``agents.train.train``) stopped at the first evaluation that
    meets ``reached``, and its figures: the step and the seconds of that evaluation, or
    not reached with the best ``figure`` of its evaluations (the final one included)."""
    from agents.train import TrainArgs, train

    t0 = time.perf_counter()
    run = train(
        TrainArgs(
            algo="ppo",
            env_id=env_id,
            env_kwargs=env_kwargs,
            hyperparams=hyperparams,
            n_timesteps=settings["budget_steps"],
            seed=seed,
            run_dir=str(run_dir),
            device="cpu",
            threads=1,
            eval_freq=settings["eval_freq"],
            eval_episodes=settings["eval_episodes"],
            eval_seed=settings["eval_seed"],
            progress=False,
        ),
        stop_when=reached,
    )
    run_s = time.perf_counter() - t0
    history = json.loads((run / "evaluations.json").read_text())
    hit = next((r for r in history if reached(r)), None)
    figures = [figure(r) for r in history]
    return {
        "seed": seed,
        "reached": hit is not None,
        "steps": None if hit is None else int(hit["timesteps"]),
        "seconds": None if hit is None else hit["train_s"],
        "seconds_with_eval": None if hit is None else hit["wall_s"] + hit["eval_s"],
        "figure_at_target": None if hit is None else figure(hit),
        "best_figure": best(figures),
        "steps_trained": int(history[-1]["timesteps"]),
        "evaluations": len(history),
        "eval_s": sum(r["eval_s"] for r in history),
        "run_s": run_s,
    }


def _summary(env_id: str, target: str, figure: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "env_id": env_id,
        "target": target,
        "figure": figure,
        "reached": sum(r["reached"] for r in runs),
        "runs": len(runs),
        "median_steps": _median_or_none([r["steps"] for r in runs]),
        "median_seconds": _median_or_none([r["seconds"] for r in runs]),
        "median_seconds_with_eval": _median_or_none([r["seconds_with_eval"] for r in runs]),
        "seeds": runs,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def score_span_on_episodes(
    task: str, env_kwargs: dict[str, Any], n_episodes: int, seed: int
) -> dict[str, Any]:
    """Greedy's and the best realizable reference's mean reward rates on the evaluation
    episodes of a training run (``env_kwargs``: the run's, e.g. the shipped episode
    length; seeds ``seed`` ... ``seed + n_episodes - 1``, the loads a periodic
    evaluation plays), deterministic, each with the policy and parameters its stored
    reference of ``task`` names: the span of a normalized score paired on those very
    episodes (0 at greedy, 1 at the best).

    :raises ValueError: when ``task`` has no defined score (no stored reference above
        greedy), or when on these episodes the best reference is no better than greedy.
    """
    from agents.callbacks import eval_load_grid
    from baselines import make as make_baseline
    from batch_env import tasks

    ref = tasks.references().get(task, {})
    best = ref.get("best_policy")
    pols = ref.get("policies", {})
    if (
        best in (None, "greedy")
        or "greedy" not in pols
        or best not in pols
        or ref.get("score_undefined")
    ):
        raise ValueError(
            f"task={task!r} has no defined normalized score (no stored reference above greedy): "
            "pick a task with an exact SMDP bound or a defined score (docs/benchmark.md)"
        )
    env = gym.make(task, **env_kwargs)
    try:
        loads = eval_load_grid(env, n_episodes)
        rates = {}
        for label in ("greedy", best):
            fig = pols[label]
            res = batch_env.evaluate(
                make_baseline(fig["policy"], env, **fig["params"]),
                env,
                n_episodes=n_episodes,
                seed=seed,
                options=None if loads is None else [{"load": x} for x in loads],
            )
            rates[label] = {
                "policy": fig["policy"],
                "params": fig["params"],
                "reward_rate_per_s": res.mean("reward_rate_per_s"),
            }
    finally:
        env.close()
    low, top = rates["greedy"]["reward_rate_per_s"], rates[best]["reward_rate_per_s"]
    if top <= low:
        raise ValueError(
            f"task={task!r}: on these evaluation episodes {best} ({top:.4f} per s) is no better "
            f"than greedy ({low:.4f} per s): no score span; evaluate on more episodes"
        )
    return {"greedy": rates["greedy"], "best": {"label": best, **rates[best]}}


def bench_wallclock(
    seeds: tuple[int, ...] = (0, 1, 2),
    budget_steps: int | None = None,
    eval_freq: int = 10_000,
    eval_episodes: int = 3,
    eval_seed: int = 100_000,
    gap_tolerance: float = 0.01,
    cartpole_target: float = CARTPOLE_TARGET_RETURN,
    task: str = WALLCLOCK_TASK,
    task_kwargs: dict[str, Any] | None = None,
    run_root: str | Path | None = None,
    score_target: float = 0.5,
) -> dict[str, Any]:
    """Wall-clock to a good agent: PPO on ``task`` to within ``gap_tolerance`` of the SMDP
    gain (a task with an exact bound) or to a normalized score of ``score_target`` (a task
    without one, e.g. the LLM tasks), against CartPole-v1 to a mean return of
    ``cartpole_target``, same PPO settings.

    Both train with ``agents.train.train``: the task with the shipped
    ``agents/hyperparams/ppo.yml`` (its base env's entry: 4 envs, 512-step rollouts, 10
    epochs, gamma 0.999, 64x64 MLP, ``VecNormalize``, the task's wrappers and greedy's
    centring gain), CartPole-v1 with the same entry less the batching wrappers; CPU, one
    torch thread, the same step budget (default: the entry's ``n_timesteps``, 300,000)
    and evaluation cadence. For each seed, the task's run, then CartPole's (interleaved, so
    that load on the machine falls on both alike).

    How the target is measured: every ``eval_freq`` environment steps (all envs
    together) the run's periodic evaluation (``agents.callbacks.PeriodicEvaluation``,
    ``batch_env.evaluate``) plays ``eval_episodes`` episodes with seeds ``eval_seed``,
    ``eval_seed + 1``, ... (the same for every run), deterministic actions, with the
    run's current observation statistics (and the same number of stochastic ones, which
    the project's evaluation logs and the target ignores). The task's target is met when
    the deterministic episodes' mean cost rate (``-reward_rate_per_s``, each episode the
    task's 20,000 requests) is at most ``(1 + gap_tolerance)`` x the SMDP gain
    (``baselines.smdp.solve``); CartPole's when their mean return is at least
    ``cartpole_target``. Training stops at the first evaluation that meets it, and that
    evaluation's step count is the run's ``steps`` (a multiple of ``eval_freq``: the
    resolution). On a task without an exact bound the target is a normalized score
    paired on the evaluation episodes: greedy and the task's best realizable reference
    play the same episodes first (:func:`score_span_on_episodes`, with the run's env
    kwargs: the shipped episode length, not the protocol's), and the target is met when
    ``(r - r_greedy) / (r_best - r_greedy) >= score_target`` for the deterministic mean
    reward rate ``r``; the run's figure is that score. ``seconds`` is the training's
    wall-clock up to that evaluation without
    the time spent in evaluations; ``seconds_with_eval`` includes every evaluation up to
    and including that one (when the run knew it had reached the target); ``run_s`` is the
    whole ``train`` call (set-up, greedy's centring gain, saving). A run that does not meet
    its target within the budget (the final evaluation at the budget counts) is
    ``reached: false``, with ``steps`` and ``seconds`` None and its best figure (smallest
    gap in percent, or largest mean return) in ``best_figure``. Medians count a run not
    reached as infinite, and are None when at least half the runs missed.

    :param seeds: training seeds (each env, each seed: one run).
    :param budget_steps: step budget of every run (default: the hyperparameter file's).
    :param eval_freq: environment steps between evaluations.
    :param eval_episodes: episodes per evaluation (and mode).
    :param eval_seed: seed of the first evaluation episode.
    :param gap_tolerance: the task's target, relative to the SMDP gain.
    :param cartpole_target: CartPole-v1's target mean return.
    :param task: a task with an exact SMDP bound, or one with a defined normalized score.
    :param task_kwargs: env kwargs over the task's (tests shorten its episodes).
    :param run_root: keep the runs under this folder (default: a temporary one, removed).
    :param score_target: the normalized score to reach on a task without an exact bound.
    """

    from agents.train import entry_env_kwargs, smdp_gain_if_exact

    t_start = time.perf_counter()
    if task not in TASKS:
        raise ValueError(f"task={task!r} is not a benchmark task: allowed are {', '.join(TASKS)}")
    task_kwargs = dict(task_kwargs or {})
    hp = load_hyperparams("ppo", task)
    gain = smdp_gain_if_exact(task, task_kwargs)
    span = None
    if gain is None:
        if not (isinstance(score_target, (int, float)) and 0.0 < score_target <= 1.0):
            raise ValueError(
                f"score_target={score_target!r} is invalid: expected a number in (0, 1]"
            )
        span = score_span_on_episodes(
            task, entry_env_kwargs(hp, task_kwargs), eval_episodes, eval_seed
        )
    budget = int(budget_steps if budget_steps is not None else float(hp["n_timesteps"]))
    settings = {
        "budget_steps": budget,
        "eval_freq": eval_freq,
        "eval_episodes": eval_episodes,
        "eval_seed": eval_seed,
    }
    task_reached, task_gap, best_of, target, figure = _task_target(
        gain, span, gap_tolerance, score_target
    )

    # the task entry less what is the task's own (its wrappers, callback and env kwargs)
    cart_hp = {k: v for k, v in hp.items() if k not in ("env_wrapper", "callback", "env_kwargs")}
    task_runs, cart_runs = _interleaved_runs(
        task,
        task_kwargs,
        seeds,
        settings,
        (task_reached, task_gap, best_of),
        cart_hp,
        cartpole_target,
        run_root,
    )
    ours = _summary(task, target, figure, task_runs)
    ref = _summary(
        WALLCLOCK_REFERENCE,
        f"deterministic mean return >= {cartpole_target:g}",
        "return (deterministic mean episode return)",
        cart_runs,
    )
    return {
        "task": ours,
        "cartpole": ref,
        "smdp_gain": gain,
        "gap_tolerance": gap_tolerance,
        **({} if span is None else {"score_target": score_target, "score_span": span}),
        "cartpole_target_return": cartpole_target,
        "ratio_steps_vs_cartpole": _ratio(ours["median_steps"], ref["median_steps"]),
        "ratio_seconds_vs_cartpole": _ratio(ours["median_seconds"], ref["median_seconds"]),
        "task_kwargs_override": task_kwargs,
        "settings": {
            **settings,
            "seeds": list(seeds),
            "n_envs": hp["n_envs"],
            "algo": "ppo",
            **{k: v for k, v in cart_hp.items() if k not in ("n_envs", "n_timesteps")},
            "device": "cpu",
            "threads": 1,
        },
        "measured_s": time.perf_counter() - t_start,
    }


def _task_target(
    gain: float | None, span: dict[str, Any] | None, gap_tolerance: float, score_target: float
) -> tuple[Callable[[dict[str, Any]], bool], Callable[[dict[str, Any]], float], Any, str, str]:
    """The task's target for :func:`bench_wallclock`: ``(reached(record), figure(record),
    best_of, target text, figure text)``, within ``gap_tolerance`` of the SMDP gain (a
    task with an exact bound) or a paired normalized score of ``score_target`` (``span``)."""
    from agents.callbacks import eval_score

    if span is None:
        assert gain is not None
        target_cost = (1.0 + gap_tolerance) * gain

        def reached(rec: dict[str, Any]) -> bool:
            return -eval_score(rec) <= target_cost

        def gap(rec: dict[str, Any]) -> float:
            return 100.0 * (-eval_score(rec) - gain) / gain

        target = (
            f"deterministic mean cost rate <= {1 + gap_tolerance:g} x SMDP gain "
            f"({target_cost:.4f} per s)"
        )
        return (
            reached,
            gap,
            min,
            target,
            "gap_percent (deterministic cost rate above the SMDP gain, %)",
        )
    low = span["greedy"]["reward_rate_per_s"]
    top = span["best"]["reward_rate_per_s"]

    def score(rec: dict[str, Any]) -> float:
        return float((eval_score(rec) - low) / (top - low))

    def reached_score(rec: dict[str, Any]) -> bool:
        return score(rec) >= score_target

    target = (
        f"deterministic normalized score >= {score_target:g}, paired on the evaluation "
        f"episodes (greedy {low:.4f}, {span['best']['label']} {top:.4f} per s there)"
    )
    figure = "normalized score (0 at greedy, 1 at the best realizable reference, same episodes)"
    return reached_score, score, max, target, figure


def _interleaved_runs(
    task: str,
    task_kwargs: dict[str, Any],
    seeds: tuple[int, ...],
    settings: dict[str, Any],
    task_target: tuple[Any, Any, Any],
    cart_hp: dict[str, Any],
    cartpole_target: float,
    run_root: str | Path | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`bench_wallclock`'s runs: for each seed the task's, then CartPole's."""

    def cart_reached(rec: dict[str, Any]) -> bool:
        return rec["deterministic"]["return"][0] >= cartpole_target

    def cart_return(rec: dict[str, Any]) -> float:
        return float(rec["deterministic"]["return"][0])

    task_reached, task_gap, best_of = task_target
    task_runs, cart_runs = [], []
    with tempfile.TemporaryDirectory(prefix="bench-wallclock-") as tmp:
        root = Path(run_root) if run_root is not None else Path(tmp)
        cart_file = Path(tmp) / "ppo-cartpole.yml"
        cart_file.write_text(yaml.safe_dump({WALLCLOCK_REFERENCE: cart_hp}))
        for seed in seeds:
            task_runs.append(
                _time_to_target(
                    task,
                    task_kwargs,
                    None,
                    seed,
                    settings,
                    task_reached,
                    task_gap,
                    best_of,
                    root / f"task-s{seed}",
                )
            )
            cart_runs.append(
                _time_to_target(
                    WALLCLOCK_REFERENCE,
                    {},
                    str(cart_file),
                    seed,
                    settings,
                    cart_reached,
                    cart_return,
                    max,
                    root / f"cartpole-s{seed}",
                )
            )
    return task_runs, cart_runs


def format_wallclock(wc: dict[str, Any]) -> str:
    """The wall-clock item in a few lines: medians, then each seed."""

    def num(x: float | None, fmt: str) -> str:
        return "not reached" if x is None else format(x, fmt)

    lines = []
    for part in (wc["task"], wc["cartpole"]):
        lines.append(
            f"wall-clock to a good agent, {part['env_id']} ({part['target']}): median "
            f"{num(part['median_steps'], ',.0f')} steps, {num(part['median_seconds'], '.1f')} s "
            f"training ({num(part['median_seconds_with_eval'], '.1f')} s with evaluations); "
            f"{part['reached']} of {part['runs']} runs reached it"
        )
        for r in part["seeds"]:
            lines.append(
                f"  seed {r['seed']}: "
                + (
                    f"{r['steps']:,} steps, {r['seconds']:.1f} s ({r['seconds_with_eval']:.1f} s with evaluations)"
                    if r["reached"]
                    else f"not reached in {r['steps_trained']:,} steps, best {r['best_figure']:.3f}"
                )
            )
    lines.append(
        f"ratio to CartPole-v1: steps {num(wc['ratio_steps_vs_cartpole'], '.2f')}, "
        f"seconds {num(wc['ratio_seconds_vs_cartpole'], '.2f')}"
    )
    return "\n".join(lines)
