"""An LLM env's action and its parts: the cap, the token budget, the admission order and
the GPU's SM clock.

The LLM envs (``LLMBatching-v0/v1/v2``) offer one ``Discrete`` action that picks a cap on
running requests from ``grid``, a token budget from ``budgets`` (v1/v2 with a
``budget_grid``; else the one budget), an admission order from ``orders`` (v2's
``orders``; else FCFS) and, on v2 with a ``clock_grid``, an SM clock from ``clocks``::

    action = ((clock index * len(orders) + order index) * len(budgets) + budget index)
             * len(grid) + cap index

Without a clock grid there is one clock index (0) and the encoding is the three-part one.

Masks (:meth:`ActionCodec.mask`): an action is masked where another valid action does
exactly the same. That is the case of a ``longest-prefix`` action whose FCFS twin (the
same cap, budget and clock) is offered, at an epoch where longest prefix match would
offer the waiting requests in the queue's own order
(:func:`batch_env.llm.orders.acts_as_fcfs`: no prefix caching, too few or too many
waiting, or no longer cached prefix behind a shorter one); every other action is valid
at every epoch.

:class:`ActionCodec` is that encoding, the only place it is written: the envs decode their
actions with it, the baselines encode theirs, and a user's policy goes between an action
and its parts with ``env.unwrapped.action_parts(action)`` and
``env.unwrapped.action_of(cap=..., budget=..., order=...)``
(``docs/tutorials/policy.md``, "An LLM policy").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .orders import FCFS, LONGEST_PREFIX, acts_as_fcfs

if TYPE_CHECKING:
    from .orders import OrderedState

__all__ = ["ActionCodec", "LLMAction"]


class LLMAction(NamedTuple):
    """The parts of one LLM action (``clock``: the SM clock in MHz, ``None`` where the
    action does not pick one)."""

    cap: int
    budget: int
    order: str
    clock: float | None = None


class ActionCodec:
    """The action encoding of an LLM env with these caps, budgets and orders.

    :param grid: the caps (increasing).
    :param budgets: the token budgets (increasing; one where the action does not pick it).
    :param orders: the admission orders (``("fcfs",)`` where the action does not pick it).
    :param clocks: the SM clocks in MHz (increasing; empty where the action does not pick
        one).
    """

    def __init__(
        self,
        grid: Sequence[int],
        budgets: Sequence[int],
        orders: Sequence[str],
        clocks: Sequence[float] = (),
    ) -> None:
        self.grid = tuple(int(c) for c in grid)
        self.budgets = tuple(int(b) for b in budgets)
        self.orders = tuple(str(o) for o in orders)
        self.clocks = tuple(float(f) for f in clocks)
        if not (self.grid and self.budgets and self.orders):
            raise ValueError("an LLM action needs at least one cap, one budget and one order")
        #: every action valid; the same with the longest-prefix actions that have an FCFS
        #: twin masked (None: no such action)
        self._valid = np.ones(self.n, dtype=bool)
        self._twins_masked: np.ndarray | None = None
        if LONGEST_PREFIX in self.orders and FCFS in self.orders:
            m = self._valid.copy()
            k = self.orders.index(LONGEST_PREFIX)
            per = len(self.grid) * len(self.budgets)
            for c in range(self.n_clocks):
                start = (c * len(self.orders) + k) * per
                m[start : start + per] = False
            self._twins_masked = m

    def mask(self, state: OrderedState) -> np.ndarray:
        """The valid actions at this epoch (module docstring: Masks), a read-only array
        (copy it to change it)."""
        if self._twins_masked is not None and acts_as_fcfs(state, LONGEST_PREFIX):
            return self._twins_masked
        return self._valid

    def twin(self, action: int) -> int:
        """The action that does what ``action`` does where it is masked: a
        ``longest-prefix`` action's FCFS twin (the same cap, budget and clock), which is
        valid wherever it is masked (module docstring: Masks); any other action itself."""
        if self._twins_masked is None or self._twins_masked[action]:
            return action
        c, b, _ = self.indices(action)
        return self.encode(c, b, self.orders.index(FCFS), self.clock_index(action))

    @property
    def n_clocks(self) -> int:
        """The clock indices: ``len(clocks)``, at least 1 (no clock grid: index 0)."""
        return max(1, len(self.clocks))

    @property
    def n(self) -> int:
        """The number of actions: ``len(grid) * len(budgets) * len(orders) * n_clocks``."""
        return len(self.grid) * len(self.budgets) * len(self.orders) * self.n_clocks

    def encode(
        self,
        cap_index: int,
        budget_index: int = 0,
        order_index: int = 0,
        clock_index: int | None = None,
    ) -> int:
        """The action of these indices (each checked against its list; ``clock_index``
        ``None``: the highest clock, the GPU's default)."""
        k = self.n_clocks - 1 if clock_index is None else clock_index
        for name, i, size in (
            ("cap_index", cap_index, len(self.grid)),
            ("budget_index", budget_index, len(self.budgets)),
            ("order_index", order_index, len(self.orders)),
            ("clock_index", k, self.n_clocks),
        ):
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < size:
                raise ValueError(
                    f"{name}={i!r} is out of range: expected an integer in 0..{size - 1}"
                )
        inner = (order_index * len(self.budgets) + budget_index) * len(self.grid) + cap_index
        return k * (len(self.grid) * len(self.budgets) * len(self.orders)) + inner

    def indices(self, action: int) -> tuple[int, int, int]:
        """``(cap index, budget index, order index)`` of ``action`` (in ``0..n-1``)."""
        ng, nb, no = len(self.grid), len(self.budgets), len(self.orders)
        return action % ng, (action // ng) % nb, (action // (ng * nb)) % no

    def clock_index(self, action: int) -> int:
        """The clock index of ``action`` (0 without a clock grid)."""
        return action // (len(self.grid) * len(self.budgets) * len(self.orders))

    def parts(self, action: int) -> LLMAction:
        """The cap, budget and order of ``action``.

        :raises ValueError: ``action`` is not an integer in ``0..n-1``.
        """
        if isinstance(action, bool) or not isinstance(action, int) or not 0 <= action < self.n:
            try:
                ok = float(action).is_integer() and 0 <= int(action) < self.n
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(
                    f"action={action!r} is out of range: expected an integer in 0..{self.n - 1}"
                )
            action = int(action)
        c, b, o = self.indices(action)
        k = self.clock_index(action)
        clock = self.clocks[k] if self.clocks else None
        return LLMAction(self.grid[c], self.budgets[b], self.orders[o], clock)

    def action(
        self,
        cap: int,
        budget: int | None = None,
        order: str | None = None,
        clock: float | None = None,
    ) -> int:
        """The action that sets ``cap``, ``budget``, ``order`` and ``clock``.

        :param cap: one of :attr:`grid`.
        :param budget: one of :attr:`budgets` (default: the largest, the configured
            ``max_num_batched_tokens``, as vLLM runs).
        :param order: one of :attr:`orders` (default: ``"fcfs"`` where offered, else the
            first).
        :param clock: one of :attr:`clocks` (default: the highest, the GPU's default;
            without a clock grid only ``None``).
        :raises ValueError: a part the env does not offer, naming the values it does.
        """
        if cap not in self.grid:
            raise ValueError(f"cap={cap!r} is not one of the env's caps: grid={list(self.grid)}")
        if budget is None:
            budget = self.budgets[-1]
        if budget not in self.budgets:
            raise ValueError(
                f"budget={budget!r} is not one of the env's token budgets: {list(self.budgets)} "
                "(budget_grid, or max_num_batched_tokens)"
            )
        if order is None:
            order = "fcfs" if "fcfs" in self.orders else self.orders[0]
        if order not in self.orders:
            raise ValueError(
                f"order={order!r} is not one of the env's admission orders: {list(self.orders)}"
            )
        if clock is None:
            k = None
        elif clock in self.clocks:
            k = self.clocks.index(float(clock))
        else:
            raise ValueError(
                f"clock={clock!r} is not one of the env's SM clocks: clock_grid="
                f"{list(self.clocks) if self.clocks else None}"
            )
        return self.encode(
            self.grid.index(cap), self.budgets.index(budget), self.orders.index(order), k
        )
