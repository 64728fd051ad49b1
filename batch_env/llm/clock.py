"""The GPU's SM clock of one LLM server: :class:`SMClock`, its one owner.

``LLMBatching-v2`` with a ``clock_grid`` chooses the clock at each decision; the server's
profile is then :meth:`batch_env.llm_profile.LLMProfile.at_clock` of it (compute-bound
prefills slow with the clock, memory-bound decodes barely; power falls). Without a grid
the clock is the profile's own throughout (``clock_mhz`` of the env fixes it, before the
server is built) and :attr:`SMClock.mhz` is ``None``.

A clock change takes ``clock_latency_ms`` to take effect (issue 64, item 5; 0: at once):
a requested clock is *pending* until then, the iterations that start before it run at
the clock in force, the first that starts at or after it at the new one. An iteration
that spans the moment runs at the clock it started at (an error of at most one
iteration's time in when the change lands). Asking again for the clock in force cancels
a pending change; asking for another one restarts the wait. Nothing else is charged for
a change: no stall and no energy (no published measurement of either was found;
docs/validation.md, "Clock changes as a real GPU makes them").
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..profiles.llm_profile import LLMProfile


#: the profiles at each clock of a grid, by the profile's content and the grid: building
#: them takes about 0.1 s (two roofline builds a clock), an env's construction's most;
#: headroom's tuning and the tests make hundreds of envs of one problem. Profiles are
#: never written after construction (a planner's copies share them), so sharing is safe.
_BUILT: dict[tuple[str, tuple[float, ...]], tuple[LLMProfile, ...]] = {}
_BUILT_MAX = 16


def _profiles_at(profile: LLMProfile, grid: tuple[float, ...]) -> tuple[LLMProfile, ...]:
    """``profile.at_clock`` of each clock of ``grid`` (cached by content; naming
    ``clock_grid[i]`` where the GPU cannot run at it)."""
    key = (json.dumps(profile.raw, sort_keys=True, default=repr), grid)
    hit = _BUILT.get(key)
    if hit is not None:
        return hit
    built = []
    for i, f in enumerate(grid):
        try:
            built.append(profile.at_clock(f))
        except ValueError as err:
            raise ValueError(f"clock_grid[{i}]={f:g}: {err}") from None
    if len(_BUILT) >= _BUILT_MAX:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[key] = out = tuple(built)
    return out


class SMClock:
    """The clock grid (MHz), the profile at each clock, the clock in force and a pending
    change.

    :param grid: the clocks a decision chooses among (``None`` or empty: none).
    :param profile: the server's profile (at the GPU's default clock: a grid and a fixed
        ``clock_mhz`` exclude each other).
    :param latency_s: how long a change takes to take effect (seconds, >= 0).
    :raises ValueError: a fixed clock with a grid, or a clock the GPU cannot run at
        (naming ``clock_grid[i]``).
    """

    __slots__ = ("grid", "profiles", "mhz", "index", "latency_s", "pending", "switch_at")

    def __init__(
        self, grid: Sequence[float] | None, profile: LLMProfile, latency_s: float = 0.0
    ) -> None:
        #: the clock grid (MHz; empty: no clock in the action)
        self.grid: tuple[float, ...] = tuple(grid) if grid is not None else ()
        #: the profile at each clock of the grid
        self.profiles: tuple[LLMProfile, ...] = ()
        #: the clock in force (MHz; ``None``: the profile's, no grid) and its grid index
        self.mhz: float | None = None
        self.index = -1
        #: how long a change takes to take effect (s)
        self.latency_s = float(latency_s)
        #: the pending change's grid index (-1: none) and when it takes effect (inf: none)
        self.pending = -1
        self.switch_at = math.inf
        if not self.grid:
            return
        if profile.clock_mhz is not None and profile.clock_mhz != profile.max_clock_mhz:
            raise ValueError(
                f"clock_grid={list(self.grid)} and clock_mhz={profile.clock_mhz:g}: give one "
                "(the grid's clocks are chosen per decision; clock_mhz fixes one)"
            )
        self.profiles = _profiles_at(profile, self.grid)

    @classmethod
    def of(cls, config: Any, profile: LLMProfile) -> SMClock:
        """The clock of a server with ``config`` (its ``clock_grid`` and
        ``clock_latency_ms``, where it has them) and ``profile``."""
        ms = getattr(config, "clock_latency_ms", 0.0)
        return cls(getattr(config, "clock_grid", None), profile, ms / 1000.0)

    def set(self, k: int) -> LLMProfile:
        """Run at ``grid[k]`` from now, at once (an episode's start), dropping any pending
        change; returns the profile at it."""
        self.mhz, self.index = self.grid[k], k
        self.pending, self.switch_at = -1, math.inf
        return self.profiles[k]

    def request(self, k: int, now: float) -> LLMProfile | None:
        """A decision asks for ``grid[k]`` at time ``now``: the profile to run at from now
        when the change is immediate (no latency), else ``None`` (it is pending until
        :attr:`switch_at`, or nothing changes: ``k`` is the clock in force or already
        pending)."""
        if self.latency_s <= 0.0:
            return self.set(k) if k != self.index else None
        if k == self.index:
            self.pending, self.switch_at = -1, math.inf  # back to the clock in force
        elif k != self.pending:
            self.pending, self.switch_at = k, now + self.latency_s
        return None

    def due(self, now: float) -> LLMProfile | None:
        """The pending change when it has taken effect by ``now`` (it is then in force):
        its profile, else ``None``."""
        if now < self.switch_at:
            return None
        return self.set(self.pending)

    @property
    def requested_mhz(self) -> float | None:
        """The clock last asked for (the pending one, else the one in force)."""
        return self.grid[self.pending] if self.pending >= 0 else self.mhz
