"""A cluster's replica events (:class:`ReplicaEvents`): each replica's next event, run
lazily, one replica at a time up to an instant, or, once the cluster asks for it, all in
time order from a heap (:mod:`batch_env.llm.cluster`: lazy replicas).

A replica's event is the end of its iteration in progress, a decode-only stretch's
boundary, or (idle) its wake at a routed arrival; running it is the replica's
``on_event(t)`` and then its ``begin()``, which returns its next event's time.

Imports: nothing of the package (the replicas are duck-typed: ``on_event``, ``begin``,
``summary_done``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

_INF = math.inf
#: Events one replica may run for one request of the cluster, or one event loop between
#: arrivals (a bound: a replica that never reaches the instant is an error)
MAX_EVENTS = 10_000_000


class ReplicaEvents:
    """The next event of each of ``replicas`` (module docstring).

    :param replicas: the cluster's replicas.
    """

    def __init__(self, replicas: Sequence[Any]) -> None:
        self.replicas = replicas
        self.reset()

    def reset(self) -> None:
        """A new episode: no event, lazy."""
        #: each replica's next event (inf: none)
        self.ev = [_INF] * len(self.replicas)
        self._heap: list[tuple[float, int]] = []
        #: whether the events run in time order (from the heap) rather than lazily
        self.eager = False
        #: after the end mark, the replicas not yet known to have every summary request
        #: done (the end check takes them from the back)
        self.not_done: list[int] = []

    def schedule(self, r: int, t: float) -> None:
        """Replica ``r``'s next event is at ``t`` (``inf``: none), unless it has one."""
        if t != _INF and self.ev[r] == _INF:
            self.ev[r] = t
            if self.eager:
                heapq.heappush(self._heap, (t, r))

    def advance(self, r: int, t: float, until_done: bool = False) -> bool:
        """Run replica ``r``'s events before ``t``, in its own time order; with
        ``until_done``, stop as soon as its summary requests are all done (at that
        instant, its clock there). Returns whether they are (with ``until_done``)."""
        rep, ev = self.replicas[r], self.ev
        if until_done and rep.summary_done():
            return True
        for _ in range(MAX_EVENTS):
            te = ev[r]
            if te >= t:
                return False
            ev[r] = _INF
            rep.on_event(te)
            if until_done and rep.summary_done():
                ev[r] = te  # its begin() at te is left to its next run (a no-op event first)
                return True
            self.schedule(r, rep.begin())
            if until_done and rep.summary_done():  # (a stretch ended at its last completion)
                return True
        raise RuntimeError(
            f"LLMCluster: replica {r} ran {MAX_EVENTS} events without reaching t={t} "
            "(bound MAX_EVENTS)"
        )

    def ends_after(self, t: float) -> bool:
        """After the end mark: whether some summary request is still not done at ``t``
        (the replicas known done are not run; the first one found not done answers)."""
        left = self.not_done
        while left:
            if not self.advance(left[-1], t, until_done=True):
                return True
            left.pop()
        return False

    def flush(self, t: float) -> None:
        """Every replica's events before ``t`` run (lazily; nothing once eager)."""
        if not self.eager:
            for r in range(len(self.replicas)):
                self.advance(r, t)

    def go_eager(self, t: float) -> None:
        """From now (``t``) on the events run in time order (:meth:`next_time`,
        :meth:`pop`)."""
        self.flush(t)
        self._heap = [(te, r) for r, te in enumerate(self.ev) if te != _INF]
        heapq.heapify(self._heap)
        self.eager = True

    def next_time(self) -> float:
        """The earliest event's time, once eager (``inf``: none)."""
        return self._heap[0][0] if self._heap else _INF

    def pop(self) -> tuple[float, int]:
        """The earliest event, taken off (once eager): its time and replica."""
        t, r = heapq.heappop(self._heap)
        self.ev[r] = _INF
        return t, r
