"""The benchmark tasks' protocol and reference figures (``batch-env benchmark``).

:func:`run_protocol` evaluates a policy on a task's protocol: one episode per held-out
seed, the reward rate per second of each (``info["serving"]["reward_rate_per_s"]``), and
their mean with a Student-t 95% confidence interval. :func:`compute_references` runs the
reference policies of each task (random valid actions, greedy, the SMDP policy at the
mean rate, and on the bursty task the phase filter ``smdp-belief``) and solves its bound
(the exact SMDP optimum, or the phase-aware optimum), then writes them to
``batch_env/tasks_references.json``, which :func:`batch_env.tasks.normalized_score` reads.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import baselines
import batch_env
from agents import load_policy
from agents.policy import parse_policy_spec, read_run_config
from baselines.smdp import SMDPProblem, gains_at_loads, solve
from baselines.smdp_mmpp import MMPPProblem, solve_mmpp
from batch_env import tasks
from batch_env.provenance import provenance
from batch_env.scoring import (
    BEST_CONSTANT,
    bound_at_seeds,
    paired_score,
    protocol_part,
    ratio_to_bound,
    seed_loads,
    summarize_rates,
    top_candidates,
)
from experiments.harness.options import POLICY_SETTINGS_HELP, add_json, count, is_agent
from experiments.harness.strict_json import dumps

from .harness.backends import process_pool
from .harness.report import md_table, pyplot, save_figure
from .harness.stats import by_group, ci_half_width, grouped_mean, mean_ci
from .harness.store import Store

#: Triton's dynamic batcher, tuned: the grid searched (on :data:`TUNING_SEEDS`, never on
#: the held-out ones) for its best setting, which then runs the protocol.
TRITON_GRID: dict[str, list[Any]] = {
    "max_queue_delay_ms": [0.5, 1, 2, 4, 8],
    "max_batch_size": [8, 16, 32],
}
TUNE = {"tune": TRITON_GRID}
#: seeds the tuned references pick their setting on (disjoint from every task's seeds)
TUNING_SEEDS = (0, 1, 2, 3, 4)


def _llm_static_grid(task_id: str) -> dict[str, Any]:
    """``{"tune": grid}`` of an LLM task's static token budgets and admission orders (its
    actions' own): the tuned reference ``budget-best`` picks from them (:func:`tune`, on
    :data:`TUNING_SEEDS`)."""
    kw = tasks.get(task_id).kwargs
    return {"tune": {"budget": list(kw["budget_grid"]), "order": list(kw["orders"])}}


def _oracle_grid(task_id: str) -> dict[str, Any]:
    """``{"tune": grid}`` of the budgets ``oracle-srpt`` is tuned over on an LLM task: its
    static budgets and sarathi's rule (``None``)."""
    return {"tune": {"budget": [None, *tasks.get(task_id).kwargs["budget_grid"]]}}


#: The reference policies per task: label -> (baseline name or "random", parameters;
#: ``{"tune": grid}``: the best setting of the grid, see :func:`tune`).
#: ``smdp-oracle`` sees the hidden phase (``oracle_info=True``): it checks the bound in
#: the env and is never the task's best policy.
REFERENCE_POLICIES: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "batch_env/LowLoadEnergy-v0": {
        "random": ("random", {}),
        "greedy": ("greedy", {}),
        "smdp": ("smdp", {}),
    },
    "batch_env/AnyLoad-v0": {
        "random": ("random", {}),
        "greedy": ("greedy", {}),
        "smdp": ("smdp", {}),
        "smdp-adaptive": ("smdp-adaptive", {}),
    },
    "batch_env/Trace-v0": {
        "random": ("random", {}),
        "greedy": ("greedy", {}),
        "smdp": ("smdp", {}),
        "smdp-adaptive": ("smdp-adaptive", {}),
        "triton-best": ("timeout", TUNE),
    },
    "batch_env/NodeAnyLoad-v0": {
        "random": ("random", {}),
        "greedy": ("greedy", {}),
        "lazy": ("lazy", {}),
        "lazy-conservative": ("lazy", {"slack": "conservative"}),
        "graph-best": ("graph", {"tune": {"window_ms": [0, 1, 2, 5, 10]}}),
    },
    "batch_env/LLMMemoryPressure-v0": {
        "random": ("random", {}),
        # greedy on an LLM server: the largest cap every iteration (vLLM's default)
        "greedy": ("static-cap", {"cap": 256}),
        "memory-aware": ("memory-aware", {}),
        "sla-feedback": ("sla-feedback", {}),
        "pang2025": ("pang2025", {}),
    },
    "batch_env/LLMMemoryPressure-v1": {
        "random": ("random", {}),
        # vLLM v1's defaults: the largest cap and token budget, first come first served
        "greedy": ("static-budget", {"budget": 4096}),
        "budget-best": ("static-budget", _llm_static_grid("batch_env/LLMMemoryPressure-v1")),
        "sarathi": ("sarathi", {}),
        "shortest-prompt": ("shortest-prompt", {}),
        "memory-aware": ("memory-aware", {}),
        "pang2025": ("pang2025", {}),
        # not realizable: the true output lengths; its best budget (or sarathi's rule)
        "oracle-srpt": ("oracle-srpt", _oracle_grid("batch_env/LLMMemoryPressure-v1")),
    },
    "batch_env/LLMBurstyLongPrompts-v0": {
        "random": ("random", {}),
        # vLLM v1's defaults on an A100: cap 256, budget 2,048, first come first served
        "greedy": ("static-budget", {"budget": 2048}),
        "budget-best": ("static-budget", _llm_static_grid("batch_env/LLMBurstyLongPrompts-v0")),
        "sarathi": ("sarathi", {}),
        # one class: EDF admits as FCFS does, so it measures sarathi's figures
        "edf": ("edf", {}),
        "oracle-srpt": ("oracle-srpt", _oracle_grid("batch_env/LLMBurstyLongPrompts-v0")),
    },
    "batch_env/LLMTwoClasses-v0": {
        "random": ("random", {}),
        "greedy": ("static-budget", {"budget": 2048}),
        "budget-best": ("static-budget", _llm_static_grid("batch_env/LLMTwoClasses-v0")),
        "sarathi": ("sarathi", {}),
        "edf": ("edf", {}),
        "shortest-prompt": ("shortest-prompt", {}),
        "class-priority": ("class-priority", {}),
        "oracle-srpt": ("oracle-srpt", _oracle_grid("batch_env/LLMTwoClasses-v0")),
    },
    **{
        task_id: {
            "random": ("random", {}),
            # vLLM v1's defaults on an H100/H200: cap 256, budget 8,192, FCFS, the GPU's clock
            "greedy": ("static-budget", {"budget": 8192}),
            "budget-best": ("static-budget", _llm_static_grid(task_id)),
            "sarathi": ("sarathi", {}),
            # the best constant clock with a static budget (order FCFS)
            "clock-best": (
                "static-budget",
                {"tune": {"budget": [256, 512, 1024], "clock": list(tasks.LLM_CLOCK_GRID)}},
            ),
            # the clock set by the queue: low until prompts queue (DVFS by the load)
            "clock-queue": (
                "clock-queue",
                {
                    "tune": {
                        "low_clock": [810.0, 990.0],
                        "high_clock": [1410.0, 1620.0],
                        "threshold": [1, 4],
                        "budget": [512],
                    }
                },
            ),
        }
        for task_id in ("batch_env/LLMClockBursts-v0", "batch_env/LLMClockQwenH200-v0")
    },
    "batch_env/Bursty-v0": {
        "random": ("random", {}),
        "greedy": ("greedy", {}),
        "smdp": ("smdp", {}),
        "smdp-adaptive": ("smdp-adaptive", {}),
        "smdp-belief": ("smdp-belief", {}),
        "smdp-belief-fit": ("smdp-belief-fit", {}),
        "smdp-oracle": ("smdp-oracle", {}),
    },
}
# The best constant action (``batch-env headroom``'s, chosen on its tuning seeds and stored
# with the task's references) of every task that has one, run on the protocol: the
# yardstick of state-dependent control, against which ``batch-env benchmark`` pairs a
# policy's gain seed by seed, beside its normalized score.
for _tid, _ref in tasks.references().items():
    if "best_constant" in _ref and _tid in REFERENCE_POLICIES:
        REFERENCE_POLICIES[_tid][BEST_CONSTANT] = (
            "constant",
            {"action": int(_ref["best_constant"]["action"])},
        )
#: policies that see what the task hides from every other policy (``oracle_info=True``;
#: on a task with ``oracle_kwargs``, its base env with them: the oracle's own actions)
ORACLE_POLICIES = frozenset({"smdp-oracle", "oracle-srpt"})
#: what each oracle reference knows that no realizable policy does (the tables say it)
ORACLE_SEES = {
    "smdp-oracle": "sees the phase",
    "oracle-srpt": "oracle: reads the true output lengths",
}
REFERENCES_PATH = Path(batch_env.__file__).parent / "tasks_references.json"
#: where the reference runs keep their finished episodes (``--references`` resumes)
EPISODES_DIR = Path("results/benchmark/episodes")


class RandomValidPolicy:
    """Uniformly random valid actions (from ``info["action_mask"]``), seeded per episode."""

    name = "random"

    def __init__(self, env: gym.Env | None = None, seed: int = 0) -> None:
        self._seed = seed
        self._episode = 0
        self._rng = np.random.default_rng(seed)

    def reset(self) -> None:
        """A new episode: a new, seeded stream."""
        self._rng = np.random.default_rng([self._seed, self._episode])
        self._episode += 1

    def key_next_episode(self, key: int) -> None:
        """Draw the next episode's stream from ``[seed, key]`` (instead of the episode's
        index in the run): an extra reference seed keys its own stream, so that it reruns
        alike alone or in any batch (:func:`run_protocol`)."""
        self._episode = key

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """A uniformly random valid action (the draws ``rng.choice`` would make, without
        its overhead: a third of the LLM env's step time went to it)."""
        valid = np.flatnonzero(info["action_mask"])
        return int(valid[self._rng.integers(len(valid))])


def _policy(name: str, env: gym.Env, **params: Any) -> Any:
    """A reference policy exactly as :data:`REFERENCE_POLICIES` gives it (not the task's
    stored settings that :func:`baselines.make` gives a baseline made on a task with no
    parameters: the references are what those settings come from)."""
    if name == "random":
        return RandomValidPolicy(env)
    return baselines.make(name, env, task_defaults=False, **params)


def _episode_kwargs(
    horizon_requests: int | None,
    warmup_requests: int | None,
    cache: Any,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The episode length a shortened protocol gives the task's env, and the env
    arguments a changed problem overrides (``env_kwargs``)."""
    kw: dict[str, Any] = {}
    if env_kwargs:
        if cache is not None:
            raise ValueError("env_kwargs is not for a cached run (the cache keys omit it)")
        kw.update(env_kwargs)
    if horizon_requests is not None:
        kw["horizon_requests"] = horizon_requests
    if warmup_requests is not None:
        if cache is not None:
            raise ValueError("warmup_requests is not for a cached run (the cache keys omit it)")
        kw["warmup_requests"] = warmup_requests
    return kw


def run_protocol(
    task_id: str,
    policy: str | Callable[[gym.Env], Any],
    seeds: tuple[int, ...] | None = None,
    horizon_requests: int | None = None,
    params: dict[str, Any] | None = None,
    cache: Path | str | None = None,
    tick: Callable[[int, int], None] | None = None,
    agent_bound: bool = False,
    cut_ok: bool = False,
    warmup_requests: int | None = None,
    max_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate a policy on a task's protocol.

    :param task_id: a task id of :data:`batch_env.tasks.TASKS`.
    :param policy: a baseline name (or ``"random"``), or a factory ``env -> policy``.
    :param seeds: override the held-out seeds (tests use fewer; on a load-grid task a
        protocol or extra seed keeps its load, see :meth:`batch_env.tasks.Task.load_of`,
        and other seeds spread over the grid's loads).
    :param horizon_requests: override the episode length (tests use shorter).
    :param params: the baseline's parameters (with a name only).
    :param cache: a JSON-lines file of finished episodes (with a name only): an episode
        whose policy, parameters, seed, load and length match a line is read from it
        instead of run (the policy is still reset, so that a policy's per-episode streams
        stay as in an uninterrupted run), and each episode run is appended as it ends. A
        long protocol (``--references``) resumes where it stopped.
    :param tick: called with ``(episodes done, episodes)`` after each episode.
    :param agent_bound: cut an episode at the bound training's evaluations use (100 x
        greedy's steps on the first seed, at least 10,000; :func:`agent_step_bound`)
        instead of the task's net: a trained agent that starves the server is stopped
        there (:class:`batch_env.EpisodeCut`, with what it did) instead of running to the
        million-step net on every seed.
    :param warmup_requests: override the task's warm-up requests (a shortened protocol,
        as ``horizon_requests``; not with ``cache``).
    :param max_steps: cut an episode at this many steps (below the task's net), e.g. to
        bound what a policy that starves the server costs (with ``cut_ok``).
    :param cut_ok: an episode the step net cuts (a policy that starves the server) counts
        with its rate while it ran (:class:`batch_env.EpisodeCut`'s ``partial``) instead
        of raising; its seed is listed in ``cut_seeds``.
    :param env_kwargs: more keyword arguments for the task's env, overriding the task's
        (a changed problem, e.g. ``profile`` with another power model; not with ``cache``).
    :returns: :func:`summarize_rates`' figures plus ``seeds``, ``horizon_requests`` and
        ``wall_s`` (the episodes' own seconds, cached ones included).
    :raises batch_env.EpisodeCut: with ``agent_bound``, an episode the bound cut.
    """
    task = tasks.get(task_id)
    seeds = task.seeds if seeds is None else tuple(seeds)
    # a load-grid task: a protocol seed at its grid load, an extra seed at its cell's
    # (Task.load_of); any other seed (the tuning seeds) spread over the grid's loads, the
    # i-th of n at the distinct load floor(i k / n) of k, so that a few tuning seeds see
    # low and high loads alike
    levels = task.grid_loads
    loads: tuple[float, ...] = ()
    if levels:
        loads = tuple(
            lo if (lo := task.load_of(s)) is not None else levels[(i * len(levels)) // len(seeds)]
            for i, s in enumerate(seeds)
        )
    kw = _episode_kwargs(horizon_requests, warmup_requests, cache, env_kwargs)
    horizon = horizon_requests or task.horizon_requests
    if cache is not None and not isinstance(policy, str):
        raise ValueError("cache is only for a named policy (its name and parameters key it)")
    store = None if cache is None else Store(cache, log=True, then="rerunning the episode")
    env = _protocol_env(task, policy, kw)
    wall = 0.0
    try:
        pol = _policy(policy, env, **(params or {})) if isinstance(policy, str) else policy(env)
        rates = []
        cut: list[int] = []
        # per request class (an env with classes), per metric, per seed
        by_class: dict[str, dict[str, list[float]]] = {}
        net = env.spec.max_episode_steps if env.spec is not None else None  # the task's net
        if max_steps is None or (net is not None and net < max_steps):
            max_steps = net
        if agent_bound:
            bound = agent_step_bound(env, seeds[0], None if not loads else loads[0])
            max_steps = bound if max_steps is None else min(max_steps, bound)
        for i, s in enumerate(seeds):
            load = loads[i] if loads else None
            key = "" if cache is None else _episode_key(task, policy, params, s, load, horizon)
            done = None if store is None else store.get(key, _episode_record)
            if done is not None:
                pol.reset()  # as the skipped episode would have
                rates.append(float(done["reward_rate_per_s"]))
                _add_classes(by_class, done.get("classes"))
                wall += float(done["wall_s"])
                if tick is not None:
                    tick(i + 1, len(seeds))
                continue
            if s >= tasks.EXTRA_SEED_BASE and hasattr(pol, "key_next_episode"):
                pol.key_next_episode(s)  # its own stream, whatever the batch
            t0 = time.perf_counter()
            try:
                res = batch_env.evaluate(
                    pol,
                    env,
                    n_episodes=1,
                    seed=s,
                    max_steps=max_steps,
                    options=None if load is None else {"load": load},
                )
            except batch_env.EpisodeCut as e:
                if not cut_ok:
                    raise
                rates.append(float(e.partial.get("reward_rate_per_s", -math.inf)))
                cut.append(s)
                wall += time.perf_counter() - t0
                if tick is not None:
                    tick(i + 1, len(seeds))
                continue
            rate = res.episodes[0]["reward_rate_per_s"]
            dt = time.perf_counter() - t0
            rates.append(rate)
            classes = _class_figures(res.episodes[0])
            _add_classes(by_class, classes)
            wall += dt
            if store is not None:
                store.put(
                    key,
                    {
                        "reward_rate_per_s": rate,
                        "wall_s": dt,
                        **({"classes": classes} if classes else {}),
                    },
                )
            if tick is not None:
                tick(i + 1, len(seeds))
    finally:
        env.close()
    out = summarize_rates(rates, loads)
    if by_class and all(len(v) == len(rates) for c in by_class.values() for v in c.values()):
        out["classes"] = {
            name: {m: {**mean_ci(v), "per_seed": v} for m, v in figs.items()}
            for name, figs in by_class.items()
        }
    out.update(
        seeds=list(seeds),
        **({"loads": list(loads)} if loads else {}),
        horizon_requests=horizon,
        wall_s=wall,
        **({"cut_seeds": cut} if cut else {}),
    )
    return out


def agent_step_bound(env: gym.Env, seed: int, load: float | None) -> int:
    """The step bound of a trained agent's protocol episode: training's evaluation bound
    (``agents.callbacks.EVAL_STEPS_FACTOR`` x greedy's steps on ``seed``, at least
    ``EVAL_MIN_STEPS``), so that a starving agent is named in a bounded time."""
    from agents.callbacks import EVAL_MIN_STEPS, EVAL_STEPS_FACTOR

    greedy = batch_env.evaluate(
        baselines.make("greedy", env=env),
        env,
        n_episodes=1,
        seed=seed,
        options=None if load is None else {"load": load},
    )
    return int(max(EVAL_STEPS_FACTOR * int(greedy.episodes[0]["steps"]), EVAL_MIN_STEPS))


#: the figures kept per request class of a protocol episode (an env with request
#: classes: ``serving["classes"]``), for ``run_protocol``'s ``classes``
CLASS_METRICS = ("sla_attainment", "ttft_p99_ms", "tpot_p99_ms", "latency_mean_ms", "goodput_rps")


def _class_figures(episode: dict[str, Any]) -> dict[str, dict[str, float]] | None:
    """An episode's :data:`CLASS_METRICS` per request class (None without classes)."""
    classes = episode.get("classes")
    if not isinstance(classes, dict) or not classes:
        return None
    return {
        name: {m: float(fig.get(m, math.nan)) for m in CLASS_METRICS}
        for name, fig in classes.items()
    }


def _add_classes(
    by_class: dict[str, dict[str, list[float]]], classes: dict[str, dict[str, float]] | None
) -> None:
    """Append one episode's per-class figures (a cached episode from before classes were
    kept has none: the protocol's ``classes`` is then left out)."""
    for name, figs in (classes or {}).items():
        for m, v in figs.items():
            by_class.setdefault(name, {}).setdefault(m, []).append(float(v))


def _protocol_env(task: tasks.Task, policy: Any, kw: dict[str, Any]) -> gym.Env:
    """The env a protocol runs ``policy`` on: the task's id, or for an oracle policy the
    task with ``oracle_info=True`` (on the task's base env with its ``oracle_kwargs``
    where it has them, under the task's step net). Where ``kw`` changes the task's
    problem (``env_kwargs``), the task's base env with its kwargs and ``kw``
    (:func:`batch_env.tasks.make_args`), under the task's step net."""
    oracle = policy in ORACLE_POLICIES
    extra = dict(task.oracle_kwargs) if oracle else {}
    env_id, kwargs = tasks.make_args(task.id, **extra, **kw)
    if oracle:
        kwargs["oracle_info"] = True
    if env_id == task.id:
        return gym.make(env_id, **kwargs)
    return gym.make(env_id, max_episode_steps=task.safety_steps, **kwargs)


def _episode_key(
    task: tasks.Task,
    policy: Any,
    params: dict[str, Any] | None,
    seed: int,
    load: float | None,
    horizon: int,
) -> str:
    """What identifies a finished protocol episode in a cache (canonical JSON): the task
    with its registration's kwargs (a changed task never reads its old episodes), the
    policy and its parameters, the seed, the load and the length."""
    return json.dumps(
        {
            "task": task.id,
            "kwargs": dict(task.kwargs),
            "policy": policy,
            "params": params or {},
            "seed": seed,
            "load": load,
            "horizon_requests": horizon,
        },
        sort_keys=True,
    )


def _episode_record(rec: Any) -> None:
    """Raise ``ValueError`` unless ``rec`` is a whole finished episode of a cache."""
    float(rec["reward_rate_per_s"]), float(rec["wall_s"])


def _solve_poisson(env: gym.Env) -> Any:

    return solve(SMDPProblem.from_env(env))


def solve_bound(task_id: str) -> dict[str, Any]:
    """The task's bound as a reward rate per second (minus the optimal gain), or ``{}``.

    ``"smdp-per-seed"`` (the any-load task): the exact SMDP optimum at each held-out
    seed's load (``bound_per_seed``, with the loads), and their mean (per load).
    """

    task = tasks.get(task_id)
    if task.bound == "smdp-per-seed":
        loads = task.eval_loads
        env = gym.make(task.id)
        try:
            gains = gains_at_loads(env, loads)
        finally:
            env.close()
        return {
            "bound_reward_rate_per_s": -grouped_mean(np.asarray(gains), loads),
            "bound_per_seed": [-g for g in gains],
            "loads_per_seed": list(loads),
            "bound_policy": "smdp at each seed's load (known to the evaluator only)",
        }
    env = gym.make(task.id)
    try:
        if task.bound == "smdp":
            sol = _solve_poisson(env)
            return {
                "bound_reward_rate_per_s": -sol.gain,
                "bound_policy": "smdp",
                "bound_threshold": sol.threshold,
            }
        if task.bound == "smdp-oracle":
            msol = solve_mmpp(MMPPProblem.from_env(env))
            return {
                "bound_reward_rate_per_s": -msol.gain,
                "bound_policy": "smdp-oracle (phase-aware optimum; the phase is hidden from every other policy)",
                "bound_thresholds": msol.thresholds,
            }
    finally:
        env.close()
    return {}


def tune(
    task_id: str, name: str, grid: dict[str, list[Any]], cache: Path | str | None = None
) -> dict[str, Any]:
    """The setting of ``grid`` (every combination) with the best mean reward rate on the
    task over :data:`TUNING_SEEDS` (full-length episodes), and the rates of all.
    ``cache``: :func:`run_protocol`'s file of finished episodes (tuning resumes too)."""

    keys = sorted(grid)
    scores = []
    for values in itertools.product(*(grid[k] for k in keys)):
        params = dict(zip(keys, values, strict=True))
        r = run_protocol(task_id, name, seeds=TUNING_SEEDS, params=params, cache=cache)
        scores.append((r["reward_rate_per_s"], params))
    best = max(scores, key=lambda sp: sp[0])
    return {
        "params": best[1],
        "grid": grid,
        "tuning_seeds": list(TUNING_SEEDS),
        "tuning_rates": [[p, r] for r, p in scores],
    }


def _best_beats_greedy(entry: dict[str, Any], task: tasks.Task) -> dict[str, str]:
    """``{}`` when the best reference beats greedy by more than the paired 95% CI of the
    per-seed differences on the protocol's seeds; else ``{"score_undefined": why}`` (a task without a bound then
    has no normalized score: its top would be greedy, or noise above it)."""
    best = protocol_part(task, entry["policies"][entry["best_policy"]])
    greedy = protocol_part(task, entry["policies"]["greedy"])
    assert best is not None and greedy is not None  # the references run the protocol
    diff = np.asarray(best) - np.asarray(greedy)
    mean, half = grouped_mean(diff, task.eval_loads), ci_half_width(diff, task.eval_loads)
    if entry["best_policy"] != "greedy" and mean > half:
        return {}
    return {
        "score_undefined": f"{entry['best_policy']} is {mean:+.4f} +- {half:.4f} per s "
        "from greedy, paired"
    }


#: a reference figure's precision target: its 95% CI under this fraction of its value
REFERENCE_CI_TARGET = 0.01
#: the extra episodes a reference figure may add, at most, as a multiple of the protocol's
MAX_EXTRA_FACTOR = 32
#: rounds of extra episodes, each sized from the spread measured so far
MAX_EXTRA_ROUNDS = 4


def extra_allocation(
    per_seed: list[float], loads: tuple[float, ...], target_half: float
) -> list[int]:
    """Extra episodes per cell (one cell where ``loads`` is empty) that bring the 95%
    half-width of the (stratified) mean to ``target_half``, by Neyman allocation: cell c
    gets ``n_c = s_c (sum s) / (K^2 V)`` episodes in all, with ``s_c`` its sample standard
    deviation so far, ``K`` the cells and ``V = (target_half / 1.96)^2``; the cells already
    hold what they hold. A cell of zero spread gets none."""
    parts = by_group(per_seed, loads) if loads else [np.asarray(per_seed, dtype=np.float64)]
    sd = np.array([p.std(ddof=1) if p.size >= 2 else 0.0 for p in parts])
    v = (target_half / 1.96) ** 2
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"target_half={target_half!r} must be a positive number")
    need = sd * sd.sum() / (len(parts) ** 2 * v)
    return [max(0, math.ceil(n) - p.size) for n, p in zip(need, parts, strict=True)]


def extend_to_precision(
    task_id: str,
    name: str,
    params: dict[str, Any],
    fig: dict[str, Any],
    cache: Path | str | None = None,
    target: float = REFERENCE_CI_TARGET,
    horizon_requests: int | None = None,
) -> dict[str, Any]:
    """A reference figure whose 95% CI is ``target`` of its value or more, with extra
    held-out episodes (:meth:`batch_env.tasks.Task.extra_seed`: the protocol's episodes
    on seeds no protocol uses; per cell of a load grid, by :func:`extra_allocation`) until
    it is under it: the same figure (the mean reward rate of a protocol episode), known
    more precisely. At most :data:`MAX_EXTRA_ROUNDS` rounds and :data:`MAX_EXTRA_FACTOR`
    times the protocol's episodes; ``extra_episodes`` and ``protocol_ci95`` record what
    was added, and ``precision_target_met`` whether the target was reached. A figure
    already under the target comes back as it is. Policies near saturation need this
    (random valid actions on ``NodeAnyLoad-v0``): their episodes scatter far more than
    any useful policy's, and a protocol long enough for them would make every user's
    evaluation many times longer (``docs/benchmark.md``). ``horizon_requests`` shortens
    the extra episodes as it shortened ``fig``'s (tests)."""
    task = tasks.get(task_id)
    n0 = len(task.seeds)
    if fig["seeds"] != list(task.seeds) or abs(fig["ci95"]) < target * abs(
        fig["reward_rate_per_s"]
    ):
        return fig
    cells = task.grid_loads
    seeds, rates = list(fig["seeds"]), list(fig["per_seed"])
    used = [0] * max(1, len(cells))  # extra seeds taken per cell
    out = dict(fig)
    for _ in range(MAX_EXTRA_ROUNDS):
        loads = seed_loads(task, seeds)
        want = extra_allocation(rates, loads, 0.9 * target * abs(grouped_mean(rates, loads)))
        room = MAX_EXTRA_FACTOR * n0 - (len(seeds) - n0)
        if sum(want) > room:  # scale down to the cap, keeping the proportions
            want = [w * room // sum(want) for w in want]
        if sum(want) == 0:
            break
        new = [task.extra_seed(used[c] + j, c) for c, w in enumerate(want) for j in range(w)]
        for c, w in enumerate(want):
            used[c] += w
        more = run_protocol(
            task_id,
            name,
            seeds=tuple(new),
            params=params,
            cache=cache,
            horizon_requests=horizon_requests,
        )
        seeds += new
        rates += more["per_seed"]
        out["wall_s"] += more["wall_s"]
        loads = seed_loads(task, seeds)
        out.update(summarize_rates(rates, loads))
        if out["ci95"] < target * abs(out["reward_rate_per_s"]):
            break
    out.update(
        seeds=seeds,
        **({"loads": list(seed_loads(task, seeds))} if cells else {}),
        extra_episodes=len(seeds) - n0,
        protocol_ci95=fig["ci95"],
        protocol_reward_rate_per_s=fig["reward_rate_per_s"],
        precision_target_met=bool(out["ci95"] < target * abs(out["reward_rate_per_s"])),
    )
    return out


def episode_cache(task_id: str, label: str, cache_dir: Path | str = EPISODES_DIR) -> Path:
    """The file of a reference run's finished episodes (see :func:`run_protocol`)."""
    return Path(cache_dir) / task_id.split("/")[-1] / f"{label}.jsonl"


def _reference_run(
    task_id: str, label: str, cache_dir: Path | str | None = None, resume: bool = False
) -> dict[str, Any]:
    name, params = REFERENCE_POLICIES[task_id][label]
    cache = None if cache_dir is None else episode_cache(task_id, label, cache_dir)
    if cache is not None and not resume:
        Store(cache, log=True).clear()  # a fresh run: no episode of another code's run
    tuned = tune(task_id, name, params["tune"], cache) if "tune" in params else None
    if tuned is not None:
        params = tuned["params"]
    out = run_protocol(task_id, name, params=params, cache=cache)
    out = extend_to_precision(task_id, name, params, out, cache)
    out.update(policy=name, params=params)
    if tuned is not None:
        out["tuning"] = tuned
    if label in ORACLE_POLICIES:
        out["oracle"] = True
    return out


def compute_references(
    task_ids: list[str] | None = None,
    out: Path | str = REFERENCES_PATH,
    progress: Callable[[str], None] | None = print,
    jobs: int = 1,
    cache_dir: Path | str | None = None,
    labels: list[str] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Run every task's reference policies and bound; write (merge into) ``out``.

    :param jobs: processes running reference policies at once (each run is one process's
        work, its figures identical whatever ``jobs`` is).
    :param cache_dir: where each run keeps its finished episodes
        (:func:`episode_cache`; ``batch-env benchmark --references`` keeps them in
        :data:`EPISODES_DIR`); ``None`` (default): keep none.
    :param resume: read the finished episodes already in ``cache_dir`` instead of
        rerunning them (to go on after an interruption, or after adding seeds to a
        protocol, with the same code); without it each run starts its cache afresh, so
        that episodes of older code are never reused.
    :param labels: only these reference policies (e.g. to fill the cache of the long
        ones in parallel runs); the references file is then left as it is, since a task's
        entry needs all of its policies.
    """
    path = Path(out)
    ids = task_ids or list(tasks.current())
    runs = [
        (tid, label)
        for tid in ids
        for label in REFERENCE_POLICIES[tid]
        if labels is None or label in labels
    ]
    known = {lb for tid in ids for lb in REFERENCE_POLICIES[tid]}
    if labels is not None and (not labels or set(labels) - known):
        raise ValueError(
            f"labels={labels!r}: {sorted(set(labels) - known) or 'none given'} is not a "
            f"reference policy of {ids}: they are {sorted(known)}"
        )
    results: dict[tuple[str, str], dict[str, Any]] = {}

    def done(key: tuple[str, str], r: dict[str, Any]) -> None:
        results[key] = r
        if progress:
            progress(
                f"{key[0]} {key[1]}: {r['reward_rate_per_s']:.4f} +- {r['ci95']:.4f} per s "
                f"({r['wall_s']:.0f} s)"
            )

    if jobs <= 1:
        for key in runs:
            done(key, _reference_run(*key, cache_dir, resume))
    else:
        with process_pool(jobs, fresh=False) as pool:  # baselines only: no PyTorch
            futures = {pool.submit(_reference_run, *key, cache_dir, resume): key for key in runs}
            for fut in as_completed(futures):
                done(futures[fut], fut.result())
    if labels is not None:
        return {"runs": {f"{tid} {label}": r for (tid, label), r in results.items()}}
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    for tid in ids:
        task = tasks.get(tid)
        entry: dict[str, Any] = {
            "policies": {label: results[(tid, label)] for label in REFERENCE_POLICIES[tid]}
        }
        entry.update(solve_bound(tid))
        _settle(task, entry, entry["policies"])
        entry["protocol"] = {"seeds": list(task.seeds), "horizon_requests": task.horizon_requests}
        entry["provenance"] = provenance()  # where this task's figures were measured
        # the profile they were measured on: scores refuse references of another one
        entry["stamp"] = {
            "profile_sha256": tasks.profile_stamp(tid),
            "stamped_at_commit": entry["provenance"]["source"].get("commit"),
        }
        data[tid] = entry
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _settle(task: tasks.Task, entry: dict[str, Any], new: dict[str, Any]) -> None:
    """What a task's entry derives from its figures: the ratio to a per-seed bound of the
    ``new`` figures, the top (:func:`batch_env.scoring.top_candidates`' best) and, without
    a bound, whether the top beats greedy (:func:`_best_beats_greedy`)."""
    for fig in new.values():
        loads = seed_loads(task, fig["seeds"])
        bound = bound_at_seeds(entry, loads)
        if bound is not None:
            fig.update(ratio_to_bound(fig["per_seed"], bound, loads))
    best = max(top_candidates(entry).items(), key=lambda kv: kv[1]["reward_rate_per_s"])
    entry["best_policy"], entry["best_reward_rate_per_s"] = best[0], best[1]["reward_rate_per_s"]
    entry.pop("score_undefined", None)
    if "bound_reward_rate_per_s" not in entry:
        entry.update(_best_beats_greedy(entry, task))


def merge_references(runs: dict[str, dict[str, Any]], out: Path | str) -> dict[str, Any]:
    """Merge figures of some reference policies (:func:`compute_references`' ``labels``
    run: ``{"<task> <label>": figure}``) into the references file ``out``, each stamped
    with the provenance of the run that made it; the other figures, the bound and the
    profile stamp stay as they are, and what the entry derives from its figures is
    settled again (:func:`_settle`). A task must be in ``out`` already.

    :raises ValueError: for a task not in ``out``, or a label that is not one of the
        task's reference policies.
    """
    path = Path(out)
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    by_task: dict[str, dict[str, Any]] = {}
    for key, fig in runs.items():
        tid, label = key.split(" ", 1)
        if tid not in data or label not in REFERENCE_POLICIES.get(tid, {}):
            raise ValueError(
                f"cannot merge {key!r} into {path}: "
                + (
                    f"{tid} has no entry there (run the whole task's references)"
                    if tid not in data
                    else f"{label!r} is not a reference policy of {tid}"
                )
            )
        by_task.setdefault(tid, {})[label] = {**fig, "provenance": provenance()}
    for tid, new in by_task.items():
        entry = data[tid]
        figs = {**entry["policies"], **new}
        entry["policies"] = {k: figs[k] for k in REFERENCE_POLICIES[tid] if k in figs}
        _settle(tasks.get(tid), entry, new)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def policy_factory(spec: str) -> tuple[str, Callable[[gym.Env], Any]]:
    """``(label, env -> policy)`` for a baseline name (``name:key=value,...`` with its
    settings), ``"random"``, or a trained agent ``<algo>:<run_dir>`` (as ``batch-env
    evaluate --policy`` takes them)."""
    if is_agent(spec):
        _, run_dir = parse_policy_spec(spec)
        read_run_config(run_dir)  # a missing or broken run is refused before anything runs
        return spec, lambda env: load_policy(run_dir, name=spec)
    labels = sorted({k for refs in REFERENCE_POLICIES.values() for k in refs} - {"random"})
    if spec != "random" and spec not in labels:
        if ":" not in spec and spec not in baselines.available():
            raise ValueError(
                f"--policy={spec!r} is unknown: a baseline ({', '.join(baselines.available())}; "
                f"name:key=value,... with settings), a task's reference label "
                f"({', '.join(labels)}), 'random', or a trained agent <algo>:<run_dir>"
            )
        name, params = baselines.parse_spec(spec)  # settings checked before anything runs
        return spec, lambda env: _policy(name, env, **params)
    return spec, lambda env: _policy(spec, env)


def task_policy(tid: str, spec: str) -> tuple[str, dict[str, Any]]:
    """The baseline and parameters ``spec`` names on task ``tid``: a reference label of the
    task (``greedy`` on the LLM task is its largest cap; a tuned label takes the stored
    tuned parameters); a baseline with settings (``name:key=value,...``) with them; else
    the baseline of that name with the task's stored settings for it
    (:func:`baselines.task_settings`: the same policy ``baselines.make`` gives on the
    task's env), or its defaults where no reference runs it."""
    if spec not in REFERENCE_POLICIES.get(tid, {}):
        if spec == "random":
            return spec, {}
        name, params = baselines.parse_spec(spec)
        if ":" not in spec:
            found = baselines.task_settings(name, tid)
            params = found[0] if found is not None else {}
        return name, params
    name, params = REFERENCE_POLICIES[tid][spec]
    if "tune" in params:
        stored = tasks.references().get(tid, {}).get("policies", {}).get(spec)
        if stored is None:
            raise ValueError(
                f"--policy={spec!r} on {tid} takes its tuned parameters from the stored "
                "references, which have none: run `batch-env benchmark --references`"
            )
        params = stored["params"]
    return name, params


def trained_on(spec: str, task_id: str) -> dict[str, Any] | None:
    """How the env a trained agent ``<algo>:<run_dir>`` was trained on differs from the
    task ``task_id``'s (its ``config.yaml``): ``{"env_id", "kwargs": {key: [the run's,
    the task's]}, "same_problem"}``, where ``same_problem`` says that only the episode
    length or display differ (:data:`batch_env.tasks.FREE_KWARGS`: the task's problem
    in shorter episodes, say); None when the run was trained on the task as registered.
    The agent is scored on the task's protocol either way; this says what it learned on."""

    _, run_dir = parse_policy_spec(spec)
    cfg = read_run_config(run_dir)
    env_id, kw = str(cfg["env_id"]), dict(cfg["env_kwargs"])
    base, found = tasks.differences(task_id, env_id, kw)
    diff = {}
    for k, pair in sorted(found.items()):
        run, task = (None if v is tasks.NOT_GIVEN else v for v in pair)
        if k != "render_mode" and run != task:
            diff[k] = [run, task]
    if base == tasks.get(task_id).base and not diff:
        return None
    same = base == tasks.get(task_id).base and set(diff) <= set(tasks.FREE_KWARGS)
    return {"env_id": env_id, "kwargs": diff, "same_problem": same}


def training_budget(spec: str) -> dict[str, Any]:
    """A trained agent's training budget, ``{"training_steps": n, "track": t}``: its run's
    ``n_timesteps`` and the sample-budget track of exactly that budget
    (:func:`batch_env.tasks.sample_track`; ``None`` off the tracks); ``{}`` where the run
    does not record it (an rl-zoo3 run)."""
    _, run_dir = parse_policy_spec(spec)
    steps = read_run_config(run_dir).get("n_timesteps")
    if not isinstance(steps, int):
        return {}
    return {"training_steps": steps, "track": tasks.sample_track(steps)}


def run_benchmark(
    policy: str,
    task_ids: list[str] | None = None,
    horizon_requests: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """The protocol of each task for one policy, with its normalized score (None where
    the task has no stored references). On the protocol's seeds the score's 95%
    half-width is paired against greedy's stored per-seed figures, and a task whose bound
    differs per seed also gets the mean ratio to it (:func:`ratio_to_bound`).
    ``horizon_requests`` shortens the episodes (the rows then say they are not the
    protocol, and carry no paired figures). A policy that does not apply to a task's
    env (a node-level policy on a whole-model task) gives a row with ``"error"``. A
    trained agent's row says how the env it was trained on differs from the task's
    (``trained_on``, :func:`trained_on`). ``progress`` receives the plan (which tasks,
    how many episodes, about how long) and a line per episode with the time left."""
    label, factory = policy_factory(policy)
    ids = [tasks.get(tid).id for tid in task_ids] if task_ids else list(tasks.current())
    agent = is_agent(policy)
    if progress is not None:
        progress(benchmark_plan(ids, horizon_requests, agent=agent))
    rows = []
    for k, tid in enumerate(ids):
        row: dict[str, Any] = {"task": tid, "policy": label, "normalized_score": None}
        ticker = None if progress is None else _Ticker(progress, f"[{k + 1}/{len(ids)}] {tid}")
        try:
            if agent:  # a trained agent
                diff = trained_on(policy, tid)
                if diff is not None:
                    row["trained_on"] = diff
                row.update(training_budget(policy))
                try:
                    res = run_protocol(
                        tid,
                        factory,
                        horizon_requests=horizon_requests,
                        tick=ticker,
                        agent_bound=True,
                    )
                except batch_env.EpisodeCut as cut:
                    rows.append({**row, "error": _starved(cut), "unfinished": cut.partial})
                    continue
            else:  # a baseline by name (so an oracle gets its info)
                name, params = task_policy(tid, policy)
                res = run_protocol(
                    tid, name, horizon_requests=horizon_requests, params=params, tick=ticker
                )
                if params:
                    row["params"] = params
        except ValueError as e:
            rows.append({**row, "error": str(e).splitlines()[0]})
            continue
        row.update(res)
        if horizon_requests is None:
            row.update(paired_score(tid, res["per_seed"], res["seeds"]))
        else:
            try:
                row["normalized_score"] = tasks.normalized_score(tid, res["reward_rate_per_s"])
            except ValueError:
                pass
        row["protocol"] = horizon_requests is None
        rows.append(row)
    return rows


def _starved(cut: Any) -> str:
    """The row's error where an agent's protocol episode was cut (:func:`agent_step_bound`)."""
    p = cut.partial
    did = (
        f"; in {p['elapsed_s']:.4g} simulated s it completed {p.get('completed', '?')} of "
        f"{p.get('arrived', '?')} requests and left {p.get('waiting', '?')} waiting"
        if "elapsed_s" in p
        else ""
    )
    return (
        f"the episode of seed {cut.seed} had not ended after {cut.steps:,} steps (100 x "
        f"greedy's): the agent serves too little to finish it{did}; no score"
    )


def _score_cell(r: dict[str, Any]) -> str:
    if r["normalized_score"] is None:
        if "score_note" in r:
            return "undefined (no bound; no known policy beats greedy)"
        return "n/a (no references)"
    cell = f"{r['normalized_score']:.3f}"
    if "normalized_score_ci95" in r:
        cell += f" +- {r['normalized_score_ci95']:.3f}"
    if "ratio_to_bound" in r:
        cell += f" (cost / bound {r['ratio_to_bound']:.4f} +- {r['ratio_to_bound_ci95']:.4f})"
    return cell


def _random_cell(r: dict[str, Any]) -> str:
    """The score above random play, paired against random's stored figures ("-" where
    the task stores no random figure above which the top lies)."""
    if r.get("score_vs_random") is None:
        return "-"
    cell = f"{r['score_vs_random']:.3f}"
    if "score_vs_random_ci95" in r:
        cell += f" +- {r['score_vs_random_ci95']:.3f}"
    return cell


def _gain_cell(r: dict[str, Any]) -> str:
    """The paired gain over the best constant action, % of its cost ("" without one)."""
    if "gain_over_best_constant_pct" not in r:
        return "-"
    return (
        f"{r['gain_over_best_constant_pct']:+.2f}% +- {r['gain_over_best_constant_ci95_pct']:.2f}"
    )


def benchmark_plan(task_ids: list[str], horizon_requests: int | None, agent: bool) -> str:
    """What ``batch-env benchmark`` is about to run, said before it starts: each task's
    episodes and how long greedy's protocol took where the references were computed
    (their ``wall_s``; a shortened protocol scales it by its length; an agent takes
    longer, one network call per decision)."""
    ref = tasks.references()
    parts, total = [], 0.0
    for tid in task_ids:
        t = tasks.get(tid)
        h = horizon_requests or t.horizon_requests
        g = ref.get(tid, {}).get("policies", {}).get("greedy", {})
        wall = float(g.get("wall_s", math.nan)) * h / t.horizon_requests
        total += wall if math.isfinite(wall) else 0.0
        took = f", greedy ~{_duration(wall)}" if math.isfinite(wall) else ""
        parts.append(f"{tid} ({t.episodes} x {h:,} requests{took})")
    slower = " (an agent takes longer: a network call per decision)" if agent else ""
    return (
        f"benchmark: {len(task_ids)} task(s): {'; '.join(parts)}. In all ~{_duration(total)} for "
        f"greedy on the machine that computed the references{slower}; --tasks runs fewer."
    )


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class _Ticker:
    """Per-episode progress of one task's protocol: a line after the first episode, after
    each tenth of them and at the end, with the episodes done, the time spent and the
    time left (the mean episode since the first, which also built the policy, times the
    episodes left)."""

    def __init__(self, out: Callable[[str], None], label: str) -> None:
        self.out, self.label = out, label
        self.t0 = time.perf_counter()
        self.t1: float | None = None  # when the first episode ended

    def __call__(self, done: int, total: int) -> None:
        """Report ``done`` of ``total`` episodes finished."""
        now = time.perf_counter()
        if self.t1 is None:
            self.t1 = now
        if done not in (1, total) and done % max(1, total // 10):
            return
        per = (now - self.t1) / (done - 1) if done > 1 else now - self.t0
        eta = f", ~{_duration(per * (total - done))} left" if done < total else ", done"
        self.out(f"{self.label}: episode {done}/{total}, {_duration(now - self.t0)}{eta}")


def format_benchmark(rows: list[dict[str, Any]]) -> str:
    """A markdown table of :func:`run_benchmark`'s rows, and below it, for a trained
    agent, how the env it was trained on differs from each task's."""
    # written by hand: a row that does not apply ends in empty cells, "| |" (one space);
    # md_table's would be "|  |"
    lines = [
        "| task | policy | reward rate per s (95% CI) | normalized score (95% CI, paired) "
        "| score above random (95% CI, paired) "
        "| gain over the best constant action (% of its cost, paired) | episodes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['task']} | {r['policy']} | does not apply: {r['error']} | | | | |")
            continue
        eps = f"{len(r['seeds'])} x {r['horizon_requests']:,} requests"
        if not r["protocol"]:
            eps += " (shortened: not the protocol)"
        lines.append(
            f"| {r['task']} | {r['policy']} | {r['reward_rate_per_s']:.3f} +- {r['ci95']:.3f} "
            f"| {_score_cell(r)} | {_random_cell(r)} | {_gain_cell(r)} | {eps} |"
        )
    ran = [r for r in rows if "error" not in r and r.get("params")]
    if ran:
        lines += ["", "Settings each task's run used:"]
        for r in ran:
            where = "given" if ":" in r["policy"] else "the task's stored reference settings"
            lines.append(f"- {r['task']}: {r['policy']} with {_params_text(r)} ({where})")
    budgets = {(r["training_steps"], r["track"]) for r in rows if "training_steps" in r}
    for steps, track in sorted(budgets):
        lines += ["", _budget_note(steps, track)]
    notes = [_trained_on_note(r) for r in rows if r.get("trained_on")]
    if notes:
        lines += ["", "Trained on another env than the task's (scored on the task's protocol):"]
        lines += notes
    return "\n".join(lines)


def _budget_note(steps: int, track: str | None) -> str:
    """The line under the table that says which sample-budget track an agent is on."""
    if track is not None:
        return f"Trained for {steps:,} env steps: the {track} sample-budget track."
    tracks = ", ".join(f"{k} ({v:,})" for k, v in tasks.SAMPLE_TRACKS.items())
    return (
        f"Trained for {steps:,} env steps: on no sample-budget track ({tracks} env steps); "
        "compare it only with runs of the same budget (docs/benchmark.md)."
    )


def _trained_on_note(r: dict[str, Any]) -> str:
    t = r["trained_on"]
    diffs = ", ".join(
        f"{k}={run!r} (the task's: {task!r})" for k, (run, task) in t["kwargs"].items()
    )
    what = (
        "the task's problem, other episodes"
        if t["same_problem"]
        else "another problem than the task's"
    )
    return f"- {r['task']}: trained on {t['env_id']} with {diffs or 'its defaults'}: {what}"


#: where ``batch-env benchmark --references`` (and ``--report``) writes the table and plot
RESULTS_DIR = Path("results/benchmark")


def _params_text(fig: dict[str, Any]) -> str:
    params = fig.get("params") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or "-"


def reference_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per task and reference policy (and bound): the reward rate with its CI,
    the CI as a fraction of the value, the normalized score with its paired CI."""
    rows = []
    for tid, ref in data.items():
        for name, fig in ref["policies"].items():
            row = {
                "task": tid,
                "policy": name,
                "params": _params_text(fig),
                "reward_rate_per_s": fig["reward_rate_per_s"],
                "ci95": fig["ci95"],
                "oracle": bool(fig.get("oracle")),
            }
            row.update(paired_score(tid, fig["per_seed"], fig["seeds"], ref))
            rows.append(row)
        if "bound_reward_rate_per_s" in ref:
            rows.append(
                {
                    "task": tid,
                    "policy": "bound",
                    "params": ref["bound_policy"],
                    "reward_rate_per_s": ref["bound_reward_rate_per_s"],
                    "ci95": 0.0,
                    "normalized_score": 1.0,
                    "exact": True,
                }
            )
    return rows


def format_references(data: dict[str, Any]) -> str:
    """A markdown table of :func:`reference_rows`."""
    rows = []
    for r in reference_rows(data):
        if r.get("exact"):
            rate, rel = f"{r['reward_rate_per_s']:.3f} (exact)", "-"
        else:
            rate = f"{r['reward_rate_per_s']:.3f} +- {r['ci95']:.3f}"
            rel = f"{100 * r['ci95'] / abs(r['reward_rate_per_s']):.2f}%"
        name = r["policy"] + (
            f" ({ORACLE_SEES.get(r['policy'], 'oracle')})" if r.get("oracle") else ""
        )
        rows.append(
            (
                r["task"].removeprefix("batch_env/"),
                name,
                r["params"],
                rate,
                rel,
                _score_cell(r),
                _gain_cell(r),
            )
        )
    header = (
        "task",
        "policy",
        "parameters",
        "reward rate per s (95% CI)",
        "CI / value",
        "normalized score (95% CI, paired)",
        "gain over the best constant action (% of its cost, paired)",
    )
    return "\n".join(md_table(header, rows))


#: the plot's left edge: scores below it (random valid actions) are written, not drawn
_PLOT_LOW = -0.6


def plot_references(data: dict[str, Any], path: Path | str) -> Path:
    """Bars of each task's reference normalized scores with their paired 95% CIs (0 =
    greedy, 1 = the bound or the best known policy), one panel per task; a PNG."""
    plt = pyplot()

    rows = reference_rows(data)
    ids = list(data)
    fig, axes = plt.subplots(len(ids), 1, figsize=(7.5, 1.1 + 0.45 * len(rows)), squeeze=False)
    for ax, tid in zip(axes[:, 0], ids, strict=True):
        mine = [r for r in rows if r["task"] == tid]
        if all(r["normalized_score"] is None for r in mine):
            ax.set_title(tid.removeprefix("batch_env/"), fontsize=9)
            ax.text(
                0.5,
                0.5,
                "no normalized score: no bound, and no known policy beats greedy",
                ha="center",
                va="center",
                fontsize=8,
                transform=ax.transAxes,
            )
            ax.set_axis_off()
            continue
        y = np.arange(len(mine))
        ax.barh(
            y,
            [r["normalized_score"] for r in mine],
            xerr=[r.get("normalized_score_ci95", 0.0) for r in mine],
            color=["#888" if r.get("exact") or r.get("oracle") else "#4a7ab5" for r in mine],
        )
        ax.set_yticks(y, [r["policy"] for r in mine], fontsize=8)
        ax.set_xlim(_PLOT_LOW, 1.2)
        for yi, r in zip(y, mine, strict=True):  # off the scale: say the value
            if r["normalized_score"] < _PLOT_LOW:
                ax.text(
                    _PLOT_LOW + 0.02,
                    yi,
                    f"{r['normalized_score']:.1f} (off scale)",
                    va="center",
                    fontsize=7,
                    color="w",
                )
            else:
                ax.text(
                    max(r["normalized_score"], 0.0) + 0.02,
                    yi,
                    f"{r['normalized_score']:.3f}",
                    va="center",
                    fontsize=7,
                )
        ax.axvline(0.0, color="k", lw=0.8)
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        top = "bound" if "bound_reward_rate_per_s" in data[tid] else "best known"
        ax.set_title(f"{tid.removeprefix('batch_env/')} (1 = {top})", fontsize=9)
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel("normalized score (0 = greedy)")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out, dpi=110)
    return out


def write_report(data: dict[str, Any], out_dir: Path | str = RESULTS_DIR) -> list[Path]:
    """``references.md`` (the table, with each task's protocol) and ``references.png``
    (the plot) in ``out_dir``, from the references ``data``."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    proto = [
        f"- `{tid}`: {len(ref['protocol']['seeds'])} held-out seeds "
        f"({min(ref['protocol']['seeds'])}-{max(ref['protocol']['seeds'])}) x "
        f"{ref['protocol']['horizon_requests']:,} requests"
        for tid, ref in data.items()
    ]
    text = (
        "# Benchmark reference figures\n\n"
        "Written by `batch-env benchmark --report` from `batch_env/tasks_references.json` "
        "(computed by `batch-env benchmark --references`). Reward rates are per second "
        "(minus the cost rate: higher is better); the normalized score is 0 at greedy and 1 "
        "at the bound (or the best known policy), its CI paired per seed against greedy.\n\n"
        "Protocols:\n\n" + "\n".join(proto) + "\n\n" + format_references(data) + "\n"
    )
    md = folder / "references.md"
    md.write_text(text)
    return [md, plot_references(data, folder / "references.png")]


def _check_writable_references() -> None:
    """Refuse to write the stored references of an installed package (no git checkout
    around it): they are package data, the same for every user of that version."""
    if not (REFERENCES_PATH.resolve().parents[1] / ".git").exists():
        raise ValueError(
            f"the stored references {REFERENCES_PATH} belong to an installed batch_env "
            "(no git checkout around it), which --references does not overwrite: write "
            "them elsewhere with --out FILE"
        )


def _read_references(path: str) -> dict[str, Any]:
    """A references JSON written by ``--references --out``; ValueError naming the file."""

    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"--out={path!r}: cannot read it: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"--out={path!r}: not a references JSON file ({e})") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, dict) and "policies" in v for v in data.values()
    ):
        raise ValueError(
            f"--out={path!r}: not a references JSON file (expected task ids mapping to "
            "their reference figures)"
        )
    return data


def cmd_benchmark(args: argparse.Namespace) -> int:
    """Run the named benchmark tasks' protocol for a policy and print its reward rates
    with their 95% CIs and its normalized scores (0 at greedy, 1 at the bound); with
    --references, recompute the tasks' stored reference figures instead (and write the
    reference table and plot); with --report, only write that table and plot from the
    stored figures."""

    ids = (
        # with or without batch_env/; an unknown id: ValueError naming it and the tasks
        [tasks.get(t.strip()).id for t in args.tasks.split(",") if t.strip()]
        if args.tasks
        else list(tasks.current())
    )
    if (args.only or args.resume) and not args.references:
        raise ValueError(
            "--only and --resume are for --references (which reference policies to run, "
            "and whether to reuse an interrupted run's episodes)"
        )
    only = [x.strip() for x in args.only.split(",") if x.strip()] if args.only else None
    if only is not None:
        known = {lb for tid in ids for lb in REFERENCE_POLICIES[tid]}
        if not only or set(only) - known:
            raise ValueError(
                f"--only={args.only!r}: {sorted(set(only) - known) or 'no label'} is not a "
                f"reference policy of the tasks {ids}: they are {sorted(known)}"
            )
    if args.merge and not args.only:
        raise ValueError("--merge is for --references --only (whose figures it merges)")
    if args.references:
        out = args.out or REFERENCES_PATH
        if args.out is None and (not args.only or args.merge):
            _check_writable_references()
        data = compute_references(
            ids,
            out=out,
            progress=None if args.json else print,
            jobs=args.jobs,
            cache_dir=Path(args.results_dir) / "episodes",
            labels=only,
            resume=args.resume,
        )
        if args.only and args.merge:  # their figures into the references, the rest kept
            data = merge_references(data["runs"], out)
        elif args.only:  # some policies only: their figures, the stored references untouched
            if args.json:
                print(dumps(data, indent=1))
            return 0
        if args.json:
            print(dumps({t: data[t] for t in ids}, indent=1))
        else:
            for path in write_report(data, args.results_dir):
                print(f"wrote {path}")
        return 0
    if args.report:
        stored = tasks.references() if args.out is None else _read_references(args.out)
        for path in write_report(stored, args.results_dir):
            print(f"wrote {path}")
        return 0
    if not args.policy:
        raise ValueError(
            "--policy is required (a baseline, 'random' or <algo>:<run_dir>), or --references"
        )
    rows = run_benchmark(
        args.policy,
        ids,
        horizon_requests=args.horizon_requests,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(dumps(rows, indent=1) if args.json else format_benchmark(rows))
    return 2 if all("error" in r for r in rows) else 0


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "benchmark",
        help="a policy on the named benchmark tasks: reward rates, CIs, normalized scores",
        description=cmd_benchmark.__doc__,
    )
    p.add_argument(
        "--policy",
        default=None,
        help="a baseline name, a task's reference label (budget-best, clock-best, ...), "
        f"'random', or a trained agent <algo>:<run_dir>; {POLICY_SETTINGS_HELP}",
    )
    p.add_argument(
        "--tasks",
        default=None,
        help="comma-separated task ids (default: every current task of batch_env.tasks; a "
        "superseded one, such as LLMMemoryPressure-v0, runs only when named)",
    )
    p.add_argument(
        "--horizon-requests",
        type=count(1),
        default=None,
        help="shorten the episodes (the table then says it is not the protocol)",
    )
    p.add_argument(
        "--references",
        action="store_true",
        help="recompute the tasks' reference figures (random, greedy, smdp, ...) and bounds",
    )
    p.add_argument(
        "--out",
        default=None,
        help="with --references: the JSON file to write (default: batch_env/tasks_references.json)",
    )
    p.add_argument(
        "--jobs",
        type=count(1),
        default=1,
        help="with --references: reference runs in parallel processes (default 1; the "
        "figures are the same whatever it is)",
    )
    p.add_argument(
        "--only",
        default=None,
        help="with --references: run only these reference policies (comma-separated "
        "labels, e.g. random,greedy), filling their episode caches; the references file "
        "is left as it is (--merge: their figures go into it)",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="with --references --only: merge those policies' figures into the references "
        "file (--out, default the stored references), each with its provenance, keeping "
        "the other figures, the bound and the stamp",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="with --references: reuse the finished episodes of an interrupted run (each "
        "run appends them to RESULTS_DIR/episodes/<task>/<policy>.jsonl as they end; "
        "without --resume a run starts that file afresh). Only with the same code: the "
        "file records the task, policy, seed and length, not the code's version",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="write the reference table (references.md) and plot (references.png) from the "
        "stored figures (or from --out's JSON) without running anything",
    )
    p.add_argument(
        "--results-dir",
        default="results/benchmark",
        help="with --references or --report: where the table and plot go (default "
        "results/benchmark)",
    )
    add_json(p)
    p.set_defaults(func=cmd_benchmark)
