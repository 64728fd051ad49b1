"""Admission orders: which waiting requests a scheduler offers a prefill first.

The waiting queue (:attr:`batch_env.llm.LLMServerState.waiting`) stays first come first
served: arrivals join its tail and preempted requests return to its head. An order is a
view of it: :func:`candidates` gives the first ``room`` waiting entries in that order, and
a scheduler scans them as it scans the queue's head under FCFS (the scan stops at the
first it cannot serve). Ties, and the order within a class, follow the queue.

* ``fcfs``: the queue itself;
* ``edf``: earliest TTFT deadline first (arrival + its class's TTFT SLA);
* ``shortest-prompt``: fewest tokens to prefill first (prompt + generated: a preempted
  request recomputes what it had generated);
* ``class-priority``: the first class of ``classes`` first, then the second, ...;
* ``srpt``: fewest output tokens left first, the true remaining length: an oracle, offered
  only on an env made with ``oracle_info=True``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from itertools import islice
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .state import LLMServerState

FCFS = "fcfs"


def _keys(state: LLMServerState) -> dict[str, Callable[[int], float]]:
    P, G, O = state.prompt, state.generated, state.output  # noqa: E741 (the state's names)
    return {
        "edf": state.ttft_deadline.__getitem__,
        "shortest-prompt": lambda e: P[e] + G[e],
        "class-priority": state.request_class.__getitem__,
        "srpt": lambda e: O[e] - G[e],
    }


def candidates(state: LLMServerState, room: int, order: str) -> Iterable[int]:
    """The first ``room`` waiting entries in ``order`` (module docstring)."""
    W = state.waiting
    if order == FCFS or room <= 0:
        return islice(W, max(room, 0))
    key = _keys(state)[order]
    if room >= len(W):
        return sorted(W, key=key)  # stable: ties keep the queue's order
    return [e for _, _, e in heapq.nsmallest(room, ((key(e), i, e) for i, e in enumerate(W)))]


def leave_queue(state: LLMServerState, e: int) -> None:
    """Waiting entry ``e`` is admitted: it leaves the queue (at its head under FCFS)."""
    W = state.waiting
    if W[0] == e:
        W.popleft()
    else:
        W.remove(e)
