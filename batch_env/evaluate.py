"""The one evaluation harness: any policy on any env, N seeded episodes, with 95% CIs.

A policy is anything with ``reset()`` and ``act(obs, info) -> action`` (baselines and
trained agents alike; duck typing keeps ``batch_env`` free of imports from
``baselines``/``agents``). Episode ``k`` is seeded with ``seed + k``, so two policies
evaluated with the same ``seed`` see the same arrivals (common random numbers) and
:func:`paired_difference` gives a paired confidence interval.

Confidence intervals are Student-t 95% intervals over episodes (each episode's summary
is one observation); with a single episode the half-width is NaN.

Summaries that hide something (:mod:`batch_env.metrics`: Outside the window, Warnings): the
envs' per-episode :class:`~batch_env.metrics.SummaryWarning` is replaced by one warning
per evaluation that counts the episodes concerned (no summary request completed: their
NaN latency figures are left out of the means; drops outside the summary window), and
:attr:`EvaluationResult.warnings` keeps each episode's sentence. The summary keys
``completed``, ``dropped_outside_window``, ``drop_rate_total`` and the other episode
counts are in every result (and ``metrics.HEADLINE_KEYS`` puts the first two in tables).

An env that is not one of ours (not a :class:`batch_env.core.ServingCore`, e.g.
``CartPole-v1``, the reference of ``batch-env bench``) has no serving summary: each of its
episodes records ``return``, ``steps`` and ``seed`` only, and must still end (terminated
or truncated) within ``max_steps``.
"""

from __future__ import annotations

import inspect
import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import gymnasium as gym
import numpy as np
from scipy import stats

from .checks import check_number
from .metrics import SeedWarning, SummaryWarning, hides_outside_drops, summary_warning


class Policy(Protocol):
    """What ``evaluate`` needs from a policy."""

    def reset(self) -> None:
        """Forget any state from a previous episode (a policy whose ``reset`` also takes
        ``seed`` is given each episode's seed: a sampling agent seeds its draws with it)."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Choose an action from the observation and the info dict."""


def t_quantile_95(dof: int) -> float:
    """The Student-t quantile of a two-sided 95% interval with ``dof`` degrees of freedom."""
    return float(stats.t.ppf(0.975, dof))


def ci95_half_width(values: Sequence[float] | np.ndarray) -> float:
    """Half-width of the Student-t 95% confidence interval of the mean.

    :param values: independent observations (NaNs are ignored).
    """
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    n = x.size
    if n < 2:
        return math.nan
    return float(t_quantile_95(n - 1) * x.std(ddof=1) / math.sqrt(n))


def by_group(values: Any, groups: list[float] | tuple[float, ...]) -> list[np.ndarray]:
    """``values`` split by their group (each value's load), in the groups' order."""
    arr = np.asarray(values, dtype=np.float64)
    keys = np.asarray(groups, dtype=np.float64)
    return [arr[keys == k] for k in np.unique(keys)]


def ci_half_width(values: Any, groups: list[float] | tuple[float, ...] = ()) -> float:
    """Student-t 95% half-width of the mean of ``values`` (NaN for fewer than two): over
    all values, or over ``groups`` (each value's load on a load-grid protocol, two or
    more values per group): then of the mean of the groups' means, whose variance is the
    sum of the groups' sample variances over their sizes over the number of groups
    squared, with values minus groups degrees of freedom (the spread between loads is
    fixed by the protocol, not noise)."""
    values = np.asarray(values, dtype=np.float64)
    if groups:
        parts = by_group(values, groups)
        if min(p.size for p in parts) >= 2:
            var = sum(p.var(ddof=1) / p.size for p in parts) / len(parts) ** 2
            return float(t_quantile_95(values.size - len(parts)) * math.sqrt(var))
    if np.isnan(values).any():  # a NaN observation: no interval (not a smaller sample)
        return math.nan
    return ci95_half_width(values)


def grouped_mean(
    values: np.ndarray | list[float], groups: list[float] | tuple[float, ...] = ()
) -> float:
    """The mean of ``values``, or of their groups' means (equal weight per load)."""
    values = np.asarray(values, dtype=np.float64)
    if not groups:
        return float(np.mean(values))
    return float(np.mean([p.mean() for p in by_group(values, groups)]))


@dataclass
class EvaluationResult:
    """Per-episode summaries of one policy on one env, with aggregate statistics.

    :param policy: the policy's name.
    :param seeds: the episode seeds.
    :param episodes: one dict per episode: ``info["serving"]`` plus ``return``, ``steps``
        and ``seed`` (only the last three on an env without a serving summary).
    :param warnings: one sentence per episode whose summary hides something
        (``"seed 3: ..."``, :func:`batch_env.metrics.summary_warning`).
    :param settings: what the policy says it ran with, where it says (a baseline's
        ``settings``: ``{"params": {...}, "source": "..."}``, :func:`baselines.make`).
    """

    policy: str
    seeds: list[int]
    episodes: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    settings: dict[str, Any] | None = None

    @property
    def seeds_change_nothing(self) -> bool:
        """Whether every episode came out the same although the seeds differ (an env
        that draws nothing from the seed: e.g. a trace without ``random_offset`` and
        fixed lengths): its CI of 0 says nothing about the noise of the figures."""
        if len(self.episodes) < 2:
            return False
        strip = [{k: v for k, v in ep.items() if k != "seed"} for ep in self.episodes]
        return all(_same(strip[0], other) for other in strip[1:])

    def note(self) -> str | None:
        """A sentence for a reader of the figures, or ``None``: said where
        :attr:`seeds_change_nothing`."""
        if not self.seeds_change_nothing:
            return None
        return (
            f"{self.policy}: the {len(self.episodes)} seeds gave the same episode (the env "
            "draws nothing from the seed, e.g. a trace without random_offset with its own or "
            "fixed lengths): the ± 0 is no confidence interval; set random_offset: true on the "
            "trace to draw a start per seed"
        )

    def values(self, key: str) -> np.ndarray:
        """Per-episode values of ``key`` (a ``serving`` key, ``return`` or ``steps``)."""
        if self.episodes and key not in self.episodes[0]:
            raise KeyError(
                f"unknown summary key {key!r}: available keys are {sorted(self.episodes[0])}"
            )
        return np.array([float(ep[key]) for ep in self.episodes], dtype=np.float64)

    def mean(self, key: str) -> float:
        """Mean over episodes of ``key`` (NaN episodes ignored)."""
        v = self.values(key)
        v = v[~np.isnan(v)]
        return float(v.mean()) if v.size else math.nan

    def ci95(self, key: str) -> float:
        """95% confidence half-width of the mean of ``key``."""
        return ci95_half_width(self.values(key))

    def summary(self) -> dict[str, tuple[float, float]]:
        """``{key: (mean, ci95 half-width)}`` for every numeric key (not the lists and
        tables a summary may hold: a cluster's per-replica summaries)."""
        first = self.episodes[0] if self.episodes else {}
        keys = [k for k, v in first.items() if k != "seed" and isinstance(v, numbers.Real)]
        return {k: (self.mean(k), self.ci95(k)) for k in keys}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form: policy, seeds, episodes and the aggregate summary."""
        return {
            "policy": self.policy,
            "seeds": self.seeds,
            "episodes": self.episodes,
            "summary": {k: {"mean": m, "ci95": h} for k, (m, h) in self.summary().items()},
            "warnings": list(self.warnings),
            **({"note": self.note()} if self.note() else {}),
            **({"settings": self.settings} if self.settings is not None else {}),
        }

    def warning(self) -> str | None:
        """One sentence on the episodes whose summaries hide something, or ``None``."""
        if not self.warnings:
            return None
        n = len(self.episodes)
        parts = []
        idle = [ep for ep in self.episodes if ep.get("completed", 1) == 0]
        if idle:
            parts.append(
                f"{len(idle)} of {n} episodes completed no summary request (their NaN "
                f"latency figures are left out of the means)"
            )
        drops = [ep for ep in self.episodes if hides_outside_drops(ep)]
        if drops:
            out = sum(int(ep["dropped_outside_window"]) for ep in drops)
            inside = sum(int(ep["dropped"]) for ep in drops)
            parts.append(
                f"{len(drops)} of {n} episodes dropped {out} requests outside the summary "
                f"window ({inside} summary requests dropped in them; see "
                f"dropped_outside_window, drop_rate_total)"
            )
        return (
            f"evaluation of {self.policy!r}: " + "; ".join(parts) + " (EvaluationResult.warnings)"
        )


class FunctionPolicy:
    """A plain function ``(obs, info) -> action`` as a policy: nothing to reset.

    :param fn: the function.
    """

    def __init__(self, fn: Callable[[Any, dict[str, Any]], Any]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", None) or type(fn).__name__

    def reset(self) -> None:
        """Nothing to forget: a plain function keeps no state of its own."""

    def act(self, obs: Any, info: dict[str, Any]) -> Any:
        """``fn(obs, info)``."""
        return self.fn(obs, info)


def as_policy(policy: Any) -> Policy:
    """``policy`` as :func:`evaluate` needs it: an object with ``reset()`` and
    ``act(obs, info)`` as it is, a plain function ``(obs, info) -> action`` wrapped in
    :class:`FunctionPolicy`; anything else is refused with a ``TypeError`` saying what a
    policy is."""
    if callable(getattr(policy, "act", None)):
        if not callable(getattr(policy, "reset", None)):
            raise TypeError(
                f"policy={policy!r} has act() but no reset(): a policy needs both (reset() "
                "forgets the previous episode; define it to do nothing if there is nothing to forget)"
            )
        return cast(Policy, policy)
    if callable(policy):
        return FunctionPolicy(policy)
    raise TypeError(
        f"policy={policy!r} is not a policy: give an object with reset() and act(obs, info) "
        "-> action (a baseline from baselines.make, a trained agent from agents.load_policy) "
        "or a function (obs, info) -> action"
    )


def check_policy_fits(policy: Policy, env: gym.Env, label: str | None = None) -> None:
    """Refuse, before any step, a policy whose observation or action space does not fit
    ``env``'s: a policy that declares the spaces it was trained on (``observation_space``,
    ``action_space``, and ``env_id`` where it knows it, as a trained agent does) against
    the raw env's.

    :raises ValueError: naming both shapes (or sizes) and both env ids.
    """
    want_obs = getattr(policy, "observation_space", None)
    want_act = getattr(policy, "action_space", None)
    if want_obs is None and want_act is None:
        return
    raw = getattr(env, "unwrapped", env)
    here = getattr(getattr(env, "spec", None), "id", None) or type(raw).__name__
    trained = getattr(policy, "env_id", None) or "its training env"
    who = label or getattr(policy, "name", None) or type(policy).__name__
    o_have = getattr(raw.observation_space, "shape", None)
    o_want = getattr(want_obs, "shape", None)
    if want_obs is not None and o_want != o_have:
        raise ValueError(
            f"policy {who!r} does not fit the env: it observes shape {o_want} ({trained}) where "
            f"{here} gives shape {o_have}; evaluate it on the env it was trained on (leave "
            "out --env-id) or train it on this one"
        )
    a_have, a_want = getattr(raw.action_space, "n", None), getattr(want_act, "n", None)
    if want_act is not None and a_want != a_have:
        raise ValueError(
            f"policy {who!r} does not fit the env: it chooses among {a_want} actions ({trained}) "
            f"where {here} offers {a_have}; evaluate it on the env it was trained on or train "
            "it on this one"
        )


def evaluate(
    policy: Policy,
    env: gym.Env | str | Callable[[], gym.Env],
    n_episodes: int = 10,
    seed: int = 0,
    *,
    name: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
    max_steps: int | None = None,
    options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
) -> EvaluationResult:
    """Run ``policy`` on ``env`` for ``n_episodes`` seeded episodes.

    :param policy: an object with ``reset()`` and ``act(obs, info)``, or a plain function
        ``(obs, info) -> action`` (:func:`as_policy`).
    :param env: an env instance, a registered id (made with ``env_kwargs``) or a factory.
    :param n_episodes: number of episodes (>= 1).
    :param seed: episode ``k`` is reset with ``seed + k``.
    :param name: label for the result (default: the policy's ``name`` attribute or class).
    :param env_kwargs: keyword arguments for ``gymnasium.make`` when ``env`` is an id.
    :param progress: called with the number of finished episodes after each episode.
    :param max_steps: steps after which an episode that has not ended is an error (a bound
        even on an env without the registration's ``TimeLimit``); ``None``:
        :data:`batch_env.MAX_EPISODE_STEPS`.
    :param options: passed to every ``env.reset`` (e.g. ``{"load": 0.3}`` on a workload
        with a ``load_range``), or a sequence of ``n_episodes`` of them, one per episode
        (e.g. a grid of loads).
    :returns: the per-episode summaries with confidence intervals.
    :raises EpisodeCut: an episode did not end, with its summary, within the step bound.
    """
    if not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError(f"n_episodes={n_episodes!r} is invalid: expected an integer >= 1")
    if max_steps is None:
        from . import MAX_EPISODE_STEPS

        max_steps = MAX_EPISODE_STEPS
    check_number("max_steps", max_steps, low=1, integer=True)
    policy = as_policy(policy)
    if isinstance(env, str):
        env = gym.make(env, **(env_kwargs or {}))
    elif not isinstance(env, gym.Env) and callable(env):
        env = env()
    label = name or getattr(policy, "name", None) or type(policy).__name__
    check_policy_fits(policy, env, label)
    seeds = [seed + k for k in range(n_episodes)]
    if options is None or isinstance(options, dict):
        per_episode: list[dict[str, Any] | None] = [options] * n_episodes
    else:
        per_episode = list(options)
        if len(per_episode) != n_episodes:
            raise ValueError(
                f"options has {len(per_episode)} entries for n_episodes={n_episodes}: give "
                "one dict for every episode, or a list with one per episode"
            )
    settings = getattr(policy, "settings", None)
    result = EvaluationResult(
        policy=label, seeds=seeds, settings=dict(settings) if isinstance(settings, dict) else None
    )
    with warnings.catch_warnings():  # one warning per evaluation instead of one per episode
        warnings.simplefilter("ignore", SummaryWarning)
        _run_episodes(policy, env, seeds, result, max_steps, progress, per_episode)
    message = result.warning()
    if message:
        warnings.warn(message, SummaryWarning, stacklevel=2)
    note = result.note()
    if note:
        warnings.warn(note, SeedWarning, stacklevel=2)
    return result


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal summaries (NaN equal to NaN)."""
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if x != y:
            return False
    return True


class EpisodeCut(RuntimeError):
    """An episode of :func:`evaluate` ended without its summary (``info["serving"]``):
    the step bound (``max_steps``, or the registration's ``max_episode_steps``) cut it.

    :param seed: the episode's seed.
    :param steps: the steps it ran.
    :param max_steps: the evaluation's step bound.
    :param partial: what the episode did until it was cut, where the env says:
        ``elapsed_s`` (simulated seconds), ``return`` and ``reward_rate_per_s`` (the
        rewards' sum over those seconds: minus the cost per second while it ran), and the
        env's request counts (``arrived``, ``completed``, ``waiting``, ``in_service``,
        ``dropped``) at the cut.
    """

    def __init__(
        self, seed: int, steps: int, max_steps: int, partial: dict[str, Any] | None = None
    ) -> None:
        self.seed, self.steps, self.max_steps = seed, steps, max_steps
        self.partial = dict(partial or {})
        super().__init__(
            f"episode with seed {seed} ended after {steps} steps without info['serving']: "
            f"the step bound (max_steps={max_steps} here, or the registration's "
            "max_episode_steps) cut it; raise it or lower horizon_requests"
        )


def _run_episodes(
    policy: Policy,
    env: gym.Env,
    seeds: list[int],
    result: EvaluationResult,
    max_steps: int,
    progress: Callable[[int], None] | None,
    options: list[dict[str, Any] | None],
) -> None:
    """The episodes of :func:`evaluate`, appended to ``result`` (``options[k]`` for the
    reset of episode ``k``)."""
    from .core import is_serving_env

    serving_env = is_serving_env(env)
    # a policy whose reset takes the episode's seed (a sampling agent's draws) gets it
    try:
        seeded = "seed" in inspect.signature(policy.reset).parameters
    except (TypeError, ValueError):
        seeded = False
    for k, s in enumerate(seeds):
        if seeded:
            policy.reset(seed=s)  # type: ignore[call-arg]
        else:
            policy.reset()
        obs, info = env.reset(seed=s, options=options[k])
        total = 0.0
        steps = 0
        ended = False
        while steps < max_steps:
            obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
            total += float(reward)
            steps += 1
            if terminated or truncated:
                ended = True
                break
        if "serving" not in info and (serving_env or not ended):
            raise EpisodeCut(s, steps, max_steps, _partial(env, info, total, serving_env))
        serving = info.get("serving", {})
        result.episodes.append({**serving, "return": total, "steps": steps, "seed": s})
        message = summary_warning(serving)
        if message:
            result.warnings.append(f"seed {s}: {message}")
        if progress is not None:
            progress(k + 1)


def _partial(env: gym.Env, info: dict[str, Any], total: float, serving_env: bool) -> dict[str, Any]:
    """What a cut episode did until the cut (:class:`EpisodeCut`'s ``partial``)."""
    out: dict[str, Any] = {"return": total}
    now = info.get("now_s")
    if isinstance(now, (int, float)) and now > 0:
        out["elapsed_s"] = float(now)
        out["reward_rate_per_s"] = total / float(now)
    if serving_env:
        out.update(env.unwrapped.request_counts())  # type: ignore[attr-defined]
    return out


def paired_difference(a: EvaluationResult, b: EvaluationResult, key: str) -> tuple[float, float]:
    """Mean and 95% CI half-width of ``a[key] - b[key]`` over their common seeds.

    Pairing by seed removes the variance the two runs share through common arrivals.

    :param a: first result.
    :param b: second result (same seeds).
    :param key: summary key, e.g. ``"reward_rate_per_s"``.
    """
    common = sorted(set(a.seeds) & set(b.seeds))
    if not common:
        raise ValueError(f"results {a.policy!r} and {b.policy!r} share no seed: cannot pair them")
    va = {ep["seed"]: float(ep[key]) for ep in a.episodes}
    vb = {ep["seed"]: float(ep[key]) for ep in b.episodes}
    d = np.array([va[s] - vb[s] for s in common])
    return float(np.nanmean(d)), ci95_half_width(d)
