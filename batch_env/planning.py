"""Copies of a serving env for planners: what :meth:`batch_env.core.ServingEnv.fork` uses.

A lookahead planner (``baselines.rollout``) plays candidate actions in copies of the env
and continues each with a base policy. Two kinds of copy:

* **clairvoyant** (``fork()``): the copy keeps the env's own random streams, so it
  replays the env's true future: its arrivals, service times and, in the LLM envs, the
  output lengths already drawn for the requests in it. Only an oracle may plan on it.
* **realizable** (``fork(rng)``): every random generator of the copy is a fresh one
  drawn from the planner's ``rng``; arrivals after the decision are drawn from the
  planner's model of the workload (:func:`future_model`), and what a server cannot know
  about the requests in it (an LLM request's output length) is redrawn from the length
  distribution given what the request has shown (its prompt, the tokens it has generated).
  Nothing the env has drawn for its future reaches the copy.

:func:`planning_copy` is the copy itself. ``copy.deepcopy`` of a mid-episode env costs
5-15 ms, almost all of it in the episode's history (per-request lists of floats and
ints, which deepcopy walks element by element) and in the profile; here the flat lists
are copied as lists (a C-level copy of their pointers: their elements are immutable), the
immutable parts (profiles, configs, workloads, spaces: frozen or read-only by contract)
are shared, and only the rest goes through ``deepcopy``. The scan passes through
wrappers (``gymnasium.Wrapper``, any library's) without counting them as a level: a
training env's lane under reward and summary wrappers copies in about 1 ms where a
plain ``deepcopy`` of it took about 30 ms (1,500 steps into an episode of
``LLMBatching-v2``, 2026-12-07). The sharing rules then apply to those wrappers' own
attributes too: a wrapper's action or observation space (with its random generator) is
shared with the original, as a batch_env env's is, so a wrapper that draws from
``self.action_space.sample()`` would draw from the original's generator; no shipped
wrapper does (``tests/test_crn.py`` checks a wrapped lane against ``deepcopy``).

Decisions recorded here (docs/decisions.md, "Planners"): the model of the future is the
workload itself where it is a stationary process a server operator would know (Poisson,
gamma renewal, MMPP, a superposition of them; restarted at the decision, so an MMPP's
phase is drawn from its start law and a gamma process's first gap is a full one); a
workload whose load is drawn per episode is modelled as its base at the env's own
arrival-rate estimate (the policy cannot know the drawn load); a trace, as the same trace
replayed from an offset drawn by the planner.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from .workload import ArrivalChunk, ArrivalStream, RandomLoad, Trace, Workload

__all__ = ["ShiftedStream", "future_model", "planning_copy"]

_SCALARS = (float, int, bool, type(None), str)
#: how deep the scan for flat lists and shared parts goes below the env
_MAX_DEPTH = 6


def _shared(v: Any) -> bool:
    """Whether ``v`` is immutable, or read-only by contract, so a copy may share it."""
    if isinstance(v, (Workload, spaces.Space, EnvSpec, type)):
        return True
    if type(v) is tuple:  # a tuple of shared parts (an LLM server's clock profiles)
        return bool(v) and all(type(x) in _SCALARS or _shared(x) for x in v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return bool(type(v).__dataclass_params__.frozen)  # type: ignore[attr-defined]
    if isinstance(v, np.ndarray):
        return not v.flags.writeable
    from .profiles.batch_profile import Profile
    from .profiles.llm_profile import LLMProfile

    return isinstance(v, (Profile, LLMProfile))


def _flat(v: list[Any]) -> bool:
    """A list of immutable scalars: checked at both ends (the lists the envs keep hold one
    type each), in full where an end is ``None`` (a list of optional objects, such as
    ``PrefixKVCache.leaf``, whose ends are often ``None``: its objects must be copied)."""
    a, b = type(v[0]), type(v[-1])
    if a not in _SCALARS or b not in _SCALARS:
        return False
    if a is type(None) or b is type(None):
        return all(type(x) in _SCALARS for x in v)
    return True


def _attributes(obj: Any) -> list[Any]:
    """An object's instance attributes (``__dict__`` and ``__slots__``)."""
    out = list(getattr(obj, "__dict__", {}).values())
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(obj, name):
                out.append(getattr(obj, name))
    return out


def planning_copy(
    root: Any, rng: np.random.Generator | None = None, detach: tuple[Any, ...] = ()
) -> Any:
    """A deep copy of ``root`` (an env) that shares what is immutable.

    :param root: the object to copy.
    :param rng: ``None``: random generators are copied (the copy draws what the original
        would). Else each generator of the copy is a fresh one seeded from ``rng``.
    :param detach: objects the copy holds ``None`` instead of (its display: windows,
        frames, a timeline of iterations).
    :returns: the copy, independent of ``root`` in everything it may change.
    """
    memo: dict[int, Any] = {id(x): None for x in detach if x is not None}
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        seen.add(id(obj))
        for v in _attributes(obj):
            vid = id(v)
            if vid in memo or vid in seen or type(v) in _SCALARS:
                continue
            if type(v) is list:
                if v and _flat(v):
                    memo[vid] = v.copy()
                elif v and type(v[0]) is list:  # per-class lists
                    for inner in v:
                        if inner and type(inner) is list and _flat(inner):
                            memo[id(inner)] = inner.copy()
                continue
            if isinstance(v, np.random.Generator):
                if rng is not None:
                    memo[vid] = np.random.Generator(np.random.PCG64(rng.integers(1 << 62)))
                continue
            if _shared(v):
                memo[vid] = v
                continue
            if isinstance(v, gym.Wrapper):  # a wrapper (any library's) is no level
                visit(v, depth)
            elif depth < _MAX_DEPTH and type(v).__module__.startswith("batch_env"):
                visit(v, depth + 1)

    visit(root, 0)
    return copy.deepcopy(root, memo)


class ShiftedStream(ArrivalStream):
    """A stream's arrivals moved ``t0`` seconds later (a model's future from ``t0``).

    :param inner: a fresh stream (its times start after 0).
    :param t0: the shift, seconds.
    """

    def __init__(self, inner: ArrivalStream, t0: float) -> None:
        self._inner = inner
        self._t0 = float(t0)

    @property
    def exhausted(self) -> bool:  # type: ignore[override]  # the inner stream's
        """Whether the (finite) inner stream has ended."""
        return self._inner.exhausted

    def next_chunk(self) -> ArrivalChunk:
        """The inner stream's next chunk, shifted."""
        ch = self._inner.next_chunk()
        return dataclasses.replace(ch, times=ch.times + self._t0)


#: arrivals per chunk of a planner's model stream (a copy looks a short way ahead)
PLANNING_CHUNK = 64


def future_model(workload: Workload, rate_estimate_per_s: float) -> Workload:
    """What a realizable planner draws the arrivals after a decision from (the module's
    docstring says why).

    :param workload: the env's workload.
    :param rate_estimate_per_s: the env's arrival-rate estimate now (what a policy sees).
    """
    if isinstance(workload, RandomLoad):
        return workload.base.with_mean_rate(max(rate_estimate_per_s, 1e-9))
    if isinstance(workload, Trace):
        return dataclasses.replace(workload, random_offset=True, loop=True)
    return workload
