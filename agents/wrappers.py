"""Wrappers that the hyperparameter files name for rl-zoo3 (and ``batch-env train``).

* :class:`CenteredReward`: :class:`batch_env.wrappers.AverageRewardCentering` whose
  gain may be given as a mode: ``greedy`` (the measured cost rate of the greedy baseline
  on the same env configuration), ``best-constant`` (a benchmark task's stored best
  constant action's cost rate, :func:`stored_best_constant_gain`), ``smdp`` (the SMDP
  optimum's gain), ``online`` (estimated while training) or a number. The default is
  :data:`DEFAULT_CENTERING_GAIN`, the one default of ``batch-env train
  --centering-gain`` too. A mode is resolved by :func:`resolve_gain` once per env
  configuration and process (cached), at the first step, so that building the env
  (rl-zoo3 builds several, and ``evaluate`` one to read the wrappers) costs nothing.
* :class:`ServingSummary`: prints the serving summary of each episode (the cost rate per
  second, latency, power, SLA attainment) when the env renders for a person
  (``render_mode="human"``, what ``python -m rl_zoo3.enjoy`` asks for), and their mean at
  ``close()``: the rewards that enjoy sums are centred, and say nothing about serving cost.

* :class:`PhaseBelief`: appends the exact posterior over an MMPP workload's hidden
  phase (the filter of the ``smdp-belief`` baseline, :class:`baselines.smdp_mmpp.PhaseFilter`)
  to the observation: the burst state as a probability, for agents on bursty traffic.

``batch_env`` does not import ``agents`` or ``baselines``; these wrappers may.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np

from baselines.common import env_config
from batch_env.wrappers import (
    AverageRewardCentering,
    StatefulFeatures,
    check_gain_curve,
    check_relative,
)

#: The default centring gain of every training path (``batch-env train``, the shipped
#: hyperparameter files under rl-zoo3): greedy's measured cost rate per second.
DEFAULT_CENTERING_GAIN = "greedy"
#: the gain modes besides a number
GAIN_MODES = (
    "greedy",
    "best-constant",
    "smdp",
    "online",
    "greedy-by-load",
    "smdp-by-load",
    "lazy-by-load",
    "smdp-by-rate",
)
#: the modes that resolve to a gain per load (a curve), on envs that draw their load:
#: the SMDP optimum, or a baseline's measured cost (``lazy``: LazyBatching, node-level
#: envs only; on NodeAnyLoad-v0 greedy costs 3-9x more than the best policy at the low
#: and middle loads, far from any good policy's cost rate)
CURVE_MODES = ("greedy-by-load", "smdp-by-load", "lazy-by-load", "smdp-by-rate")
#: the loads (rate over max throughput) of ``smdp-by-rate``'s curve: where the rate
#: estimate of a trace or of bursts moves, for a workload whose load is not drawn
RATE_CURVE_LOADS = (0.05, 1.0)
#: loads a gain curve is measured at: the midpoints of this many equal cells of the range
CURVE_POINTS = 10
#: seed of the reference episodes that measure greedy's rate (``batch-env train`` adds its seed)
GAIN_SEED = 50_000
#: summary requests of each episode that measures a gain, at most (the env's own
#: ``horizon_requests`` when shorter): a gain is a centring reference, and measuring it
#: must not cost a protocol-length episode before training starts (an LLM task's
#: episode is about 2 million steps)
GAIN_HORIZON_REQUESTS = 2000

#: dotted paths of the centring wrappers a hyperparameter file may name
CENTERING_WRAPPERS = ("batch_env.wrappers.AverageRewardCentering", "agents.wrappers.CenteredReward")
#: wrappers that only display (for rl-zoo3's enjoy), left out of a run's env by ``batch-env train``
DISPLAY_WRAPPERS = ("agents.wrappers.ServingSummary",)

_GAIN_CACHE: dict[tuple[str, str, str, int], float | list[list[float]] | None] = {}


def check_gain_mode(gain: Any, field: str = "centering_gain") -> None:
    """Raise ``ValueError`` naming ``field`` unless ``gain`` is a mode of :data:`GAIN_MODES`,
    ``None`` (online) or a finite number (cost per second)."""
    if gain is None or str(gain) in GAIN_MODES:
        return
    try:
        value = float(gain)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(gain, bool) or not math.isfinite(value):
        raise ValueError(
            f"{field}={gain!r} is invalid: expected one of {', '.join(GAIN_MODES)} or a "
            "number (cost per second)"
        )


def resolve_gain(
    mode: Any, env_id: str, env_kwargs: dict[str, Any], seed: int = 0
) -> float | list[list[float]] | None:
    """The centring gain g (cost per second) for ``mode``: ``greedy`` = the greedy
    baseline's cost rate (on a benchmark task's problem the figure stored with its
    references, :func:`stored_greedy_gain`; elsewhere measured in 3 episodes, seeds
    ``seed + GAIN_SEED`` on; on LLMBatching-v0, which has no batch size to fill, the
    static cap at ``max_num_seqs``, vLLM's default), ``best-constant`` = a benchmark task's
    stored best constant action's cost rate (:func:`stored_best_constant_gain`), ``smdp`` =
    the SMDP optimum's gain, ``online`` or ``None`` = None
    (estimated while training), a number = itself. On an env that draws its load per
    episode (a ``load_range`` workload) ``greedy-by-load``, ``lazy-by-load`` (node-level
    envs) and ``smdp-by-load`` give a gain curve instead, ``[[load, g], ...]`` at
    :data:`CURVE_POINTS` loads over the range (greedy's or LazyBatching's cost measured in
    one episode at each, seed ``seed + GAIN_SEED + k``; the SMDP optimum at each, where it
    is exact), for
    :class:`~batch_env.wrappers.AverageRewardCentering`'s ``gain_curve``. On any
    ``DynamicBatching-v0`` workload (a trace, bursts), ``smdp-by-rate`` gives the SMDP
    optimum's gain as if the arrivals were Poisson at each load of
    :data:`RATE_CURVE_LOADS`: an approximation, for centring at the rate the policy
    observes where the rate moves within an episode. Every measuring episode holds at
    most :data:`GAIN_HORIZON_REQUESTS` summary requests. Cached per (mode, env, kwargs,
    seed).

    :raises ValueError: naming ``centering_gain`` for any other value, or a curve mode on
        an env that does not draw its load.
    """
    check_gain_mode(mode)
    if mode is None or mode == "online":
        return None
    if str(mode) not in GAIN_MODES:
        return float(mode)
    key = (str(mode), env_id, json.dumps(env_kwargs, sort_keys=True, default=repr), int(seed))
    if key not in _GAIN_CACHE:
        _GAIN_CACHE[key] = _measure_gain(str(mode), env_id, env_kwargs, int(seed))
    return _GAIN_CACHE[key]


def run_specs(
    specs: list[tuple[str, dict[str, Any]]], gain: float | list[list[float]] | None
) -> list[tuple[str, dict[str, Any]]]:
    """A hyperparameter file's wrapper specs as a run uses them: display-only wrappers
    (:data:`DISPLAY_WRAPPERS`) left out, every centring wrapper as
    ``batch_env.wrappers.AverageRewardCentering`` with ``gain`` (a number, None: online;
    a list of ``[load, gain]`` pairs: its ``gain_curve``), which has a vector twin and
    needs nothing resolved when the run is loaded again."""

    def centring(kw: dict[str, Any]) -> dict[str, Any]:  # a fresh copy each (no aliases)
        out: dict[str, Any]
        if isinstance(gain, list):
            out = {"gain": None, "gain_curve": [list(pair) for pair in gain]}
        else:
            out = {"gain": gain}
        if kw.get("relative"):
            out["relative"] = True
        return out

    return [
        (CENTERING_WRAPPERS[0], centring(kw)) if p in CENTERING_WRAPPERS else (p, dict(kw))
        for p, kw in specs
        if p not in DISPLAY_WRAPPERS
    ]


def _gain_curve(mode: str, env: gym.Env, seed: int) -> list[list[float]]:
    """:func:`resolve_gain`'s curve for a curve mode on ``env``."""
    import baselines
    from batch_env import evaluate
    from batch_env.tasks import load_grid

    if mode == "smdp-by-rate":
        return _rate_curve(env)
    rng = getattr(getattr(env.unwrapped, "workload", None), "load_range", None)
    if rng is None or not hasattr(env_config(env), "max_batch_size"):
        raise ValueError(
            f"centering_gain={mode!r} needs an env that draws its load per episode (a "
            "DynamicBatching or NodeBatching workload with a 'load_range'): give greedy, "
            "smdp, online or a number"
        )
    loads = list(load_grid(rng[0], rng[1], CURVE_POINTS, 1))
    if mode == "smdp-by-load":
        from baselines.smdp import gains_at_loads, is_exact_per_load

        if not is_exact_per_load(env):
            raise ValueError(
                f"centering_gain={mode!r} needs the SMDP optimum at each load, exact only on "
                "DynamicBatching-v0 with Poisson arrivals and SLA weight 0: give "
                "greedy-by-load"
            )
        gains = gains_at_loads(env, loads)
    else:
        name = mode.removesuffix("-by-load")
        try:
            pol = baselines.make(name, env=env)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"centering_gain={mode!r}: {exc}") from None
        res = evaluate(
            pol,
            env,
            n_episodes=len(loads),
            seed=seed + GAIN_SEED,
            options=[{"load": x} for x in loads],
        )
        gains = [-float(ep["reward_rate_per_s"]) for ep in res.episodes]
    return [[float(x), float(g)] for x, g in zip(loads, gains, strict=True)]


def _rate_curve(env: gym.Env) -> list[list[float]]:
    """``smdp-by-rate``'s curve: the SMDP optimum at each load of :data:`RATE_CURVE_LOADS`
    (:data:`CURVE_POINTS` cell midpoints) for the env's own profile, batch limit, queue,
    ticks and weights, with Poisson arrivals at ``load x max throughput``."""
    from baselines.smdp import SMDPProblem, solve
    from batch_env.envs import DynamicBatchingEnv
    from batch_env.tasks import load_grid

    core = env.unwrapped
    if not isinstance(core, DynamicBatchingEnv):
        raise ValueError(
            "centering_gain='smdp-by-rate' needs a DynamicBatching-v0 env (the SMDP of "
            "whole-model batching): give greedy, online or a number"
        )
    mu = float(core.max_throughput_rps)
    loads = list(load_grid(RATE_CURVE_LOADS[0], RATE_CURVE_LOADS[1], CURVE_POINTS, 1))
    try:
        gains = [solve(SMDPProblem.from_env(env, rate_per_s=x * mu)).gain for x in loads]
    except ValueError as exc:
        raise ValueError(f"centering_gain='smdp-by-rate': {exc}") from None
    return [[float(x), float(g)] for x, g in zip(loads, gains, strict=True)]


def reference_baseline(env: gym.Env) -> str:
    """The baseline a run is centred on and set against by default: ``greedy`` (on an LLM
    env, vLLM's defaults: :class:`baselines.llm.LLMGreedyPolicy`, the largest cap and
    token budget, first come first served)."""
    del env  # the same name on every env since greedy means vLLM's defaults on an LLM env
    return "greedy"


def _stored_rate(env_id: str, env_kwargs: dict[str, Any], label: str) -> float | None:
    """The cost rate per second of the reference ``label`` stored with a benchmark task's
    references (``batch_env.tasks.references``), when ``env_id`` with ``env_kwargs`` is
    that task's problem (its episodes may be shorter: a rate per second does not depend
    on them); None where there is none."""
    from batch_env import tasks

    found = tasks.task_of(env_id, env_kwargs)
    ref = tasks.references().get(found[0]) if found is not None else None
    policy = (ref or {}).get("policies", {}).get(label)
    return None if policy is None else -float(policy["reward_rate_per_s"])


def stored_greedy_gain(env_id: str, env_kwargs: dict[str, Any]) -> float | None:
    """Greedy's cost rate per second on a benchmark task's protocol, as stored with the
    task's references, when ``env_id`` with ``env_kwargs`` is that task's problem; None
    otherwise (:func:`_stored_rate`)."""
    return _stored_rate(env_id, env_kwargs, "greedy")


def stored_best_constant_gain(env_id: str, env_kwargs: dict[str, Any]) -> float:
    """The cost rate per second of a benchmark task's best constant action on its protocol
    (its stored ``best-constant`` reference, ``batch-env headroom``'s), when ``env_id``
    with ``env_kwargs`` is that task's problem.

    :raises ValueError: naming ``centering_gain`` where there is none (not a task's problem,
        or a task without a stored best constant action).
    """
    rate = _stored_rate(env_id, env_kwargs, "best-constant")
    if rate is None:
        from batch_env import tasks

        has = sorted(t for t, r in tasks.references().items() if "best-constant" in r["policies"])
        raise ValueError(
            f"centering_gain='best-constant' needs a benchmark task with a stored best constant "
            f"action ({', '.join(has)}); {env_id} with these kwargs has none: give greedy, "
            "online or a number"
        )
    return rate


def _measure_gain(
    mode: str, env_id: str, env_kwargs: dict[str, Any], seed: int
) -> float | list[list[float]]:
    import baselines
    from batch_env import evaluate

    if mode == "greedy":
        stored = stored_greedy_gain(env_id, env_kwargs)
        if stored is not None:
            return stored
    if mode == "best-constant":
        return stored_best_constant_gain(env_id, env_kwargs)
    env = gym.make(env_id, **env_kwargs)
    horizon = int(env_config(env).horizon_requests)
    if horizon > GAIN_HORIZON_REQUESTS:  # shorter episodes of the same problem
        env.close()
        env = gym.make(env_id, **{**env_kwargs, "horizon_requests": GAIN_HORIZON_REQUESTS})
    try:
        if mode in CURVE_MODES:
            return _gain_curve(mode, env, seed)
        if mode == "smdp":
            from baselines.smdp import SMDPProblem, solve

            return float(solve(SMDPProblem.from_env(env)).gain)
        res = evaluate(
            baselines.make(reference_baseline(env), env=env),
            env,
            n_episodes=3,
            seed=seed + GAIN_SEED,
        )
        return -res.mean("reward_rate_per_s")
    finally:
        env.close()


def _env_config(env: gym.Env) -> tuple[str, dict[str, Any]]:
    """The registered id and kwargs that made ``env`` (its spec), without ``render_mode``."""
    spec = env.unwrapped.spec or env.spec
    if spec is None:
        raise ValueError(
            "CenteredReward needs an env made by gymnasium.make (its spec names the configuration "
            "that gain='greedy' or 'smdp' measures): give a number instead"
        )
    kwargs = {k: v for k, v in (spec.kwargs or {}).items() if k != "render_mode"}
    return spec.id, kwargs


class CenteredReward(AverageRewardCentering):
    """Average-reward centring (:class:`batch_env.wrappers.AverageRewardCentering`) whose
    gain may be a mode, resolved for the wrapped env's configuration.

    :param env: a batching env made by ``gymnasium.make``.
    :param gain: ``greedy``, ``smdp``, ``online`` (or ``None``), ``greedy-by-load``,
        ``lazy-by-load`` or ``smdp-by-load`` (a gain curve over the loads of an env that
        draws its load) or a number (cost per second); default :data:`DEFAULT_CENTERING_GAIN`.
    :param seed: offset of the reference episodes' seeds (:func:`resolve_gain`).
    :param relative: rewards relative to the gain
        (:class:`~batch_env.wrappers.AverageRewardCentering`'s ``relative``).
    """

    def __init__(
        self,
        env: gym.Env,
        gain: Any = DEFAULT_CENTERING_GAIN,
        seed: int = 0,
        relative: bool = False,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, gain=gain, seed=seed, relative=relative
        )  # first: the mode, not the number
        check_gain_mode(gain, "gain")
        online = gain is None or gain == "online"
        number = None if online or str(gain) in GAIN_MODES else float(gain)
        if not isinstance(relative, bool):
            raise ValueError(f"relative={relative!r} is invalid: expected true or false")
        if relative and online:
            raise ValueError(
                "relative=True divides by the gain: give a gain mode or a number, not online"
            )
        super().__init__(env, gain=number)  # a curve or mode: resolved at the first step
        self._relative_asked = relative  # checked against the gain once it is resolved
        self.relative = check_relative(relative, number, None) if number is not None else False
        self.mode = "online" if online else str(gain)
        self.seed = int(seed)
        self._resolved = online or number is not None

    def resolve(self) -> float | None:
        """Resolve the gain now (once); return it (None while online or for a curve,
        which is then :attr:`curve`)."""
        if not self._resolved:
            env_id, kwargs = _env_config(self.env)
            got = resolve_gain(self.mode, env_id, kwargs, self.seed)
            if isinstance(got, list):
                self.curve = check_gain_curve(got)
                self.curve_index = 2  # the load estimate (rate / max throughput)
                self.online = False
                self.relative = check_relative(self._relative_asked, None, got)
            else:  # a number from now on: no longer the online estimate
                self.gain = float(cast("float", got))
                self.online = False
                self.relative = check_relative(self._relative_asked, self.gain, None)
            self._resolved = True
        return None if self.online or self.curve is not None else self.gain

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step with the centred reward (resolving the gain at the first step)."""
        self.resolve()
        return super().step(action)


#: the figures of ServingSummary's line: (key of info["serving"], label, format)
SUMMARY_FIGURES = (
    ("reward_rate_per_s", "cost rate", "{:.4g}/s"),
    ("latency_p99_ms", "p99", "{:.3g} ms"),
    ("power_mean_w", "power", "{:.4g} W"),
    ("sla_attainment", "SLA", "{:.1%}"),
    ("throughput_rps", "throughput", "{:.4g} rps"),
)


def format_serving(serving: dict[str, Any]) -> str:
    """One line of an episode's serving summary (``info["serving"]``): reward rate per
    second (minus the cost rate), p99 latency, mean power, SLA attainment, throughput."""
    parts = []
    for key, label, fmt in SUMMARY_FIGURES:
        value = serving.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            parts.append(
                f"{'reward rate' if key == 'reward_rate_per_s' else label} {fmt.format(value)}"
            )
    return ", ".join(parts)


def _enjoying() -> bool:
    """Whether this process runs rl-zoo3's enjoy script (``python -m rl_zoo3.enjoy``, ``rl_zoo3 enjoy``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", "") or ""
    return (
        name == "rl_zoo3.enjoy"
        or (name in ("rl_zoo3.cli", "agents.zoo") and "enjoy" in sys.argv[:1])
        or any(arg.endswith(("rl_zoo3/enjoy.py", "rl_zoo3.enjoy")) for arg in sys.argv[:1])
    )


class ServingSummary(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Print each episode's serving summary (``info["serving"]``) and, at ``close()``, the
    mean reward rate per second over the episodes; the episodes' summaries are kept in
    :attr:`episodes` either way.

    :param env: a batching env.
    :param verbose: print (1) or not (0); ``None`` (default): print when the env renders
        for a person (``render_mode="human"``, as ``rl_zoo3.enjoy`` makes it) or the process
        runs ``rl_zoo3.enjoy`` (``--no-render`` too), not while training.
    :param stream: where to print (default stdout).
    """

    def __init__(self, env: gym.Env, verbose: int | None = None, stream: Any = None) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, verbose=verbose)
        gym.Wrapper.__init__(self, env)
        self.verbose = (
            int(env.render_mode == "human" or _enjoying()) if verbose is None else int(verbose)
        )
        self.stream = stream
        self.episodes: list[dict[str, Any]] = []

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout, flush=True)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step; at an episode's end, record (and print) its serving summary."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        serving = info.get("serving")
        if serving:
            self.episodes.append(dict(serving))
            if self.verbose:
                self._print(f"serving, episode {len(self.episodes)}: {format_serving(serving)}")
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Print the mean reward rate per second of the episodes seen, then close."""
        rates = [
            s["reward_rate_per_s"]
            for s in self.episodes
            if isinstance(s.get("reward_rate_per_s"), (int, float))
            and math.isfinite(s["reward_rate_per_s"])
        ]
        if self.verbose and rates:
            self._print(
                f"serving: mean reward rate {np.mean(rates):.4g} +/- {np.std(rates):.2g} per second over "
                f"{len(rates)} episode(s) (minus the serving cost per second; the centred rewards above "
                "are not)"
            )
        super().close()


class PhaseBelief(StatefulFeatures, gym.utils.RecordConstructorArgs):
    """Append the posterior probability of each phase of the env's MMPP workload.

    The filter (:class:`baselines.smdp_mmpp.PhaseFilter`, as ``smdp-belief`` runs it)
    knows the MMPP's parameters from the env's configuration, as the ``smdp`` baseline
    knows the profile, and never the phase: it updates the belief from each step's
    ``info`` (the wait or the batch, its duration, the arrivals it saw). The ``K``
    features, in ``[0, 1]`` and summing to 1, follow the wrapped observation.

    With :meth:`observe_reset` / :meth:`observe_step` a policy acting on another env
    (``agents.load_policy``) keeps the same belief from the ``(obs, info)`` it is shown.

    :param env: a ``DynamicBatching-v0`` env (or a task on it) with an MMPP workload.
    :raises ValueError: the workload is not an MMPP.
    """

    def __init__(self, env: gym.Env) -> None:
        from baselines.smdp_mmpp import PhaseFilter

        gym.utils.RecordConstructorArgs.__init__(self)
        StatefulFeatures.__init__(self, env)
        self.filter = PhaseFilter(env)
        base = cast(gym.spaces.Box, env.observation_space)
        k = self.filter.phases
        self.observation_space = gym.spaces.Box(
            low=np.concatenate([base.low, np.zeros(k)]).astype(np.float32),
            high=np.concatenate([base.high, np.ones(k)]).astype(np.float32),
            dtype=np.float32,
        )

    def observe_reset(self, obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        """The features of an episode's first observation: what :meth:`reset` returns."""
        self.filter.reset()
        return self._append(obs, self.filter.update(info))

    def observe_step(self, obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        """The features after a step, from its ``info``: what :meth:`step` returns."""
        return self._append(obs, self.filter.update(info))

    @staticmethod
    def _append(obs: np.ndarray, belief: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, belief]).astype(np.float32)
