"""The GPU's SM clock of one LLM server: :class:`SMClock`, its one owner.

``LLMBatching-v2`` with a ``clock_grid`` chooses the clock at each decision; the server's
profile is then :meth:`batch_env.llm_profile.LLMProfile.at_clock` of it (compute-bound
prefills slow with the clock, memory-bound decodes barely; power falls). Without a grid
the clock is the profile's own throughout (``clock_mhz`` of the env fixes it, before the
server is built) and :attr:`SMClock.mhz` is ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..profiles.llm_profile import LLMProfile


class SMClock:
    """The clock grid (MHz), the profile at each clock, and the clock in force.

    :param grid: the clocks a decision chooses among (``None`` or empty: none).
    :param profile: the server's profile (at the GPU's default clock: a grid and a fixed
        ``clock_mhz`` exclude each other).
    :raises ValueError: a fixed clock with a grid, or a clock the GPU cannot run at
        (naming ``clock_grid[i]``).
    """

    __slots__ = ("grid", "profiles", "mhz")

    def __init__(self, grid: Sequence[float] | None, profile: LLMProfile) -> None:
        #: the clock grid (MHz; empty: no clock in the action)
        self.grid: tuple[float, ...] = tuple(grid) if grid is not None else ()
        #: the profile at each clock of the grid
        self.profiles: tuple[LLMProfile, ...] = ()
        #: the clock in force (MHz; ``None``: the profile's, no grid)
        self.mhz: float | None = None
        if not self.grid:
            return
        if profile.clock_mhz is not None and profile.clock_mhz != profile.max_clock_mhz:
            raise ValueError(
                f"clock_grid={list(self.grid)} and clock_mhz={profile.clock_mhz:g}: give one "
                "(the grid's clocks are chosen per decision; clock_mhz fixes one)"
            )
        built = []
        for i, f in enumerate(self.grid):
            try:
                built.append(profile.at_clock(f))
            except ValueError as err:
                raise ValueError(f"clock_grid[{i}]={f:g}: {err}") from None
        self.profiles = tuple(built)

    def set(self, k: int) -> LLMProfile:
        """Run at ``grid[k]`` from now; returns the profile at it."""
        self.mhz = self.grid[k]
        return self.profiles[k]
