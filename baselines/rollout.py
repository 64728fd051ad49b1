"""Lookahead planners and constant actions: what a task's headroom is measured with.

* ``constant``: play one action at every decision (:class:`ConstantPolicy`). The best
  constant action over a task's action space is the yardstick of ``batch-env headroom``:
  what control that ignores the state achieves.
* ``rollout``: a realizable lookahead planner (:class:`RolloutPolicy`). At a decision it
  plays each candidate action in copies of the env, continues each copy with a base
  policy (a constant action by default) for a horizon of simulated time, and plays the
  candidate whose copies did best on average. The copies are realizable
  (:meth:`batch_env.core.ServingEnv.fork` with a generator): arrivals after the decision
  come from the planner's model of the workload and the output lengths of the LLM
  requests in flight are redrawn given what they have generated, so the planner never
  reads the env's future. The same draws serve every candidate (common random numbers),
  so candidates are compared on the same futures.
* ``rollout-oracle``: its clairvoyant twin, which plans on the env's true future (one
  copy per candidate, the env's own streams). Not realizable: a bound-like reference, as
  ``smdp-oracle`` is.

Comparing candidates: each copy runs until the first epoch at or after ``now +
horizon_s`` at which the system holds at most one request (the request that has just
arrived to an empty server), or until ``EXTEND`` horizons have passed, or its episode
ends. Ending every copy in the same, regenerative state matters: cut at a fixed time, a
copy that has deferred a batch has not paid for it yet (measured on LowLoadEnergy-v0 with
a static base: the planner then did 8% worse than its base). A copy's score is its
rewards' sum minus the decision's mean reward rate times its elapsed time (the
average-reward relative value, as in SMDP policy iteration), so a copy that runs longer
is not charged for the extra time. Rates are per second of simulated time.

These are the one policy family here that reads the env beyond ``obs`` and ``info``: the
server's own state, through ``fork()`` (what a real server knows: its queue, what runs,
how much each request has generated). The test suite checks that a realizable planner's
decisions do not change when the env's future is replaced (tests/test_rollout.py).
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np

from batch_env.checks import check_number

#: steps one copy may take before the planner stops it (a bound: a copy's horizon is
#: reached in far fewer)
MAX_ROLLOUT_STEPS = 100_000
#: a copy that is still busy at its horizon runs on until the system is empty (at most
#: this many horizons in all): see the module docstring
EXTEND = 10.0
#: horizons the copy runs that estimates the base policy's reward rate (once an episode)
RATE_HORIZONS = 400.0
#: a realizable planner plays the base policy's own choice unless the best candidate
#: beats it by this many standard errors of their paired difference over the futures
MARGIN = 1.0


def _serving_env(env: gym.Env | None, who: str) -> Any:
    """``env.unwrapped``, checked to be a batch-env env that can fork."""
    if env is None:
        raise ValueError(f"{who}: env=None: a planner needs the env it acts in")
    u = env.unwrapped
    if not hasattr(u, "fork"):
        raise ValueError(
            f"{who}: env {type(u).__name__} cannot be copied for planning (no fork()): "
            "pass a batch_env environment"
        )
    return u


def _action(env: Any, value: Any, name: str) -> int:
    """``value`` as an action of ``env``'s space, or a ValueError naming ``name``."""
    n = int(env.action_space.n)
    check_number(name, value, low=0, high=n - 1, integer=True)
    return int(value)


class ConstantPolicy:
    """Play ``action`` at every decision.

    :param env: the env (for its action space).
    :param action: the action, ``0 <= action < env.action_space.n``.
    """

    name = "constant"

    def __init__(self, env: gym.Env | None = None, action: int = 0) -> None:
        u = _serving_env(env, "constant")
        self.action = _action(u, action, "action")

    def reset(self) -> None:
        """Stateless."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The constant action."""
        return self.action


class RolloutPolicy:
    """A lookahead planner over copies of the env (the module docstring).

    :param env: the env it acts in (it forks ``env.unwrapped`` at each decision).
    :param base: the policy each copy continues with after a candidate action: an action
        (``int``: a constant action, e.g. the best constant one) or a baseline name of
        :func:`baselines.make` whose ``act`` reads only ``obs`` and ``info`` (a fresh copy
        of it runs each copy).
    :param base_params: the base baseline's parameters (with ``base`` a name).
    :param policies: further base policies to choose from (each a baseline name or
        ``{"name": ..., **params}``): at an episode's first decision, and again every
        ``RATE_HORIZONS`` horizons of simulated time, each of them and ``base`` runs one
        long copy from the current state (``RATE_HORIZONS`` horizons, the same future for
        all), and the best becomes the base of the one-step lookahead until the next
        choice (its rate is the ``g`` of the relative values). A short copy cannot tell
        policies whose costs differ by 1-2% apart (measured on LowLoadEnergy-v0); a long
        one can.
    :param horizon_s: simulated seconds each copy runs at least (default: 20 mean
        inter-arrival times of the workload).
    :param samples: futures drawn per decision (common to all candidates); the
        clairvoyant planner uses one (the true future).
    :param candidates: the actions compared (default: every action valid at the decision,
        by the env's mask); invalid ones are skipped at each decision, and the base
        policy's own choice is always compared too.
    :param every: plan at one decision in ``every`` (1: plan at every decision); at the
        others play as ``between`` says.
    :param between: what the decisions between two planned ones play: ``"hold"`` (the
        default) the planned action again while it is valid; ``"base"`` the base policy's
        own choice (what a state-dependent base, such as a clock rule, needs: held, its
        action would outlive the state it was chosen for).
    :param margin: play the base policy's own choice unless the best candidate beats it
        by ``margin`` standard errors of their paired difference (realizable, with
        ``samples > 1``); 0: always the best mean.
    :param clairvoyant: plan on the env's true future (``rollout-oracle``; not realizable).
    :param seed: the planner's own generator's seed (its futures); reset keeps the stream.
    """

    name = "rollout"

    def __init__(
        self,
        env: gym.Env | None = None,
        base: int | str = "greedy",
        base_params: dict[str, Any] | None = None,
        policies: Sequence[str | dict[str, Any]] = (),
        horizon_s: float | None = None,
        samples: int = 4,
        candidates: Sequence[int] | None = None,
        every: int = 1,
        between: str = "hold",
        margin: float = MARGIN,
        clairvoyant: bool = False,
        seed: int = 0,
    ) -> None:
        from . import make

        u = _serving_env(env, "rollout")
        self._env = u
        if isinstance(base, str):
            self._base: Any = make(base, env=env, **(base_params or {}))
            self._base_action: int | None = None
        else:
            if base_params:
                raise ValueError(
                    f"base_params={base_params!r} is invalid with a constant base action: "
                    "give base as a baseline name to pass it parameters"
                )
            self._base, self._base_action = None, _action(u, base, "base")
        self._family: list[tuple[Any, int | None]] = [(self._base, self._base_action)]
        for spec in policies:
            kw = dict(spec) if isinstance(spec, dict) else {"name": spec}
            if not isinstance(kw.get("name"), str):
                raise ValueError(
                    f"policies entry {spec!r} is invalid: give a baseline name or a dict "
                    "with 'name' and its parameters"
                )
            self._family.append((make(kw.pop("name"), env=env, **kw), None))
        rate = float(u.engine.mean_rate_per_s)
        self.horizon_s = (
            20.0 / rate if horizon_s is None else check_number("horizon_s", horizon_s, low=0.0)
        )
        if self.horizon_s <= 0:
            raise ValueError(f"horizon_s={horizon_s!r} is out of range: expected a number > 0")
        self.samples = (
            1 if clairvoyant else int(check_number("samples", samples, low=1, integer=True))
        )
        self.candidates = (
            None if candidates is None else [_action(u, a, "candidates") for a in candidates]
        )
        if self.candidates is not None and not self.candidates:
            raise ValueError("candidates=[] is invalid: give at least one action (or None: all)")
        self.every = int(check_number("every", every, low=1, integer=True))
        if between not in ("hold", "base"):
            raise ValueError(f"between={between!r} is invalid: allowed values are 'hold', 'base'")
        self.between = between
        self.margin = float(check_number("margin", margin, low=0.0))
        self.clairvoyant = bool(clairvoyant)
        self.name = "rollout-oracle" if clairvoyant else "rollout"
        self._rng = np.random.default_rng(check_number("seed", seed, low=0, integer=True))
        #: decisions taken, of them planned, and the planner's CPU seconds (process time)
        self.decisions = 0
        self.plans = 0
        self.cpu_s = 0.0
        self.reset()

    def reset(self) -> None:
        """A new episode: the held action and the base's rate estimate are dropped (the
        counters and the generator go on)."""
        self._held: int | None = None
        self._k = 0
        self._rate: float | None = None
        self._next_choice = 0.0
        self._base, self._base_action = self._family[0]

    @property
    def cpu_s_per_decision(self) -> float:
        """The planner's CPU seconds per decision so far (0 before the first)."""
        return self.cpu_s / self.decisions if self.decisions else 0.0

    def _valid(self, info: dict[str, Any], every: bool = False) -> list[int]:
        """The candidates valid at this decision (``every``: all valid actions)."""
        mask = info.get("action_mask")
        if mask is None:
            mask = self._env.action_masks()
        allowed = np.flatnonzero(mask).tolist()
        if self.candidates is None or every:
            return allowed
        ok = set(allowed)
        return [a for a in self.candidates if a in ok] or allowed

    def _as_valid(self, action: int, valid: list[int]) -> int | None:
        """``action`` if valid, else the valid action that does the same where the env
        names one (an LLM env's masked ``longest-prefix`` action: its FCFS twin,
        :meth:`batch_env.llm.actions.ActionCodec.twin`), else None."""
        if action in valid:
            return action
        twin_of = getattr(getattr(self._env, "actions", None), "twin", None)
        twin = twin_of(action) if callable(twin_of) else None
        return twin if twin in valid else None

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Plan (or repeat the planned action) and return the action to play."""
        self.decisions += 1
        k = self._k
        self._k = k + 1
        valid = self._valid(info)
        if self._held is not None and k % self.every:
            if self.between == "base":
                own = self._as_valid(self._base_choice(obs, info), valid)
                if own is not None:
                    return own
            else:
                held = self._as_valid(self._held, valid)
                if held is not None:
                    return held
        t = time.process_time()
        if len(valid) == 1:
            best = valid[0]
        else:
            best = self._plan(valid, obs, info)
        self.cpu_s += time.process_time() - t
        self.plans += 1
        self._held = best
        return best

    def _plan(self, valid: list[int], obs: Any, info: dict[str, Any]) -> int:
        """The first action of the candidate with the best mean relative value over the
        sampled futures (candidates: each valid action then the base, and each policy of
        the family on its own)."""
        env = self._env
        t0 = float(env.engine.now)
        t_end = t0 + self.horizon_s
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._base_rate(obs, info, t0)  # the base, chosen before its own choice is read
        choice = self._base_choice(obs, info)
        own = choice if choice in valid else self._as_valid(choice, self._valid(info, True))
        if own is not None and own not in valid:
            valid = [*valid, own]  # the base's own choice (or its twin) is always a candidate
        sums = np.zeros((len(valid), self.samples))
        ends = np.zeros_like(sums)
        with warnings.catch_warnings():  # a copy's episode end warns as the env's would
            warnings.simplefilter("ignore")
            rate = self._base_rate(obs, info, t0)
            for j in range(self.samples):
                seed = None if self.clairvoyant else int(self._rng.integers(1 << 62))
                for i, a in enumerate(valid):
                    twin = env.fork(None if seed is None else np.random.default_rng(seed))
                    sums[i, j], ends[i, j] = self._rollout(twin, a, obs, info, t_end)
        values = sums - rate * (ends - t0)
        best = int(np.argmax(values.mean(axis=1)))
        if own in valid and self.samples > 1 and valid[best] != own:
            d = values[best] - values[valid.index(own)]  # paired by future
            if d.mean() <= self.margin * d.std(ddof=1) / math.sqrt(d.size):
                return own  # nothing beats the base's own choice beyond the noise
        return valid[best]

    def _fork(self) -> Any:
        """A copy of the env: clairvoyant, or realizable on a fresh draw of the future."""
        if self.clairvoyant:
            return self._env.fork()
        return self._env.fork(np.random.default_rng(int(self._rng.integers(1 << 62))))

    def _base_rate(self, obs: Any, info: dict[str, Any], t0: float) -> float:
        """The base policy's reward rate per second (the ``g`` of the relative values),
        and the base itself, chosen among ``base`` and ``policies`` (the class docstring)
        at the episode's first decision and every ``RATE_HORIZONS`` horizons: each runs a
        copy for ``RATE_HORIZONS`` horizons (realizable: on the planner's model of the
        future, the same draw for all)."""
        if self._rate is None or t0 >= self._next_choice:
            span = RATE_HORIZONS * self.horizon_s
            seed = None if self.clairvoyant else int(self._rng.integers(1 << 62))
            best, chosen = -math.inf, self._family[0]
            for pol, act in self._family:
                twin = self._env.fork(None if seed is None else np.random.default_rng(seed))
                self._base, self._base_action = pol, act
                total, t = self._rollout(twin, None, obs, info, t0 + span, False)
                rate = total / (t - t0) if t > t0 else -math.inf
                if rate > best:
                    best, chosen = rate, (pol, act)
            self._base, self._base_action = chosen
            self._rate, self._next_choice = best if math.isfinite(best) else 0.0, t0 + span
        return self._rate

    def _base_choice(self, obs: Any, info: dict[str, Any]) -> int:
        """What the base policy would play now."""
        if self._base is None:
            return cast(int, self._base_action)
        return int(copy.deepcopy(self._base).act(obs, info))

    def _rollout(
        self,
        twin: Any,
        action: int | None,
        obs: Any,
        info: dict[str, Any],
        t_end: float,
        regenerate: bool = True,
    ) -> tuple[float, float]:
        """Run ``twin``: ``action`` (``None``: none) then the base policy, until the first
        epoch at or after ``t_end`` (with ``regenerate``: at which the system holds at
        most one request, ``EXTEND`` horizons at most).

        :returns: the rewards' sum and the simulated time at the end.
        """
        runner = None if self._base is None else copy.deepcopy(self._base)
        fixed = self._base_action
        eng = twin.engine
        t_cap = t_end + (EXTEND - 1.0) * self.horizon_s if regenerate else t_end
        total = 0.0
        steps = 0
        term = trunc = False
        while not (term or trunc) and steps < MAX_ROLLOUT_STEPS:
            if steps and eng.now >= t_end and (eng.in_system <= 1 or eng.now >= t_cap):
                break
            if steps == 0 and action is not None:
                a = action
            elif runner is None:
                a = cast(int, fixed)
            else:
                a = int(runner.act(obs, info))
            obs, r, term, trunc, info = twin.step(a)
            total += float(r)
            steps += 1
        return total, float(eng.now)


def rollout_oracle(env: gym.Env | None = None, **params: Any) -> RolloutPolicy:
    """``rollout-oracle``: :class:`RolloutPolicy` on the env's true future (not realizable)."""
    return RolloutPolicy(env=env, clairvoyant=True, **params)
