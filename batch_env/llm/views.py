"""What the observation, ``info`` and the frames read of an LLM server (each function
takes the :class:`~batch_env.llm.LLMServer`), beyond its state:
queries that combine the queues, the request classes and the SLA books.
"""

from __future__ import annotations

import math
from typing import Any

from .orders import candidates


def past_ttft_waiting(server: Any) -> int:
    """Waiting requests without a first token whose TTFT deadline has passed (at the
    last settled epoch), clipped to the waiting count: the requests past their
    deadline without a first token are waiting, or in their first prefill."""
    w = len(server.state.waiting)
    late = server.sla_books.past_without_first() - _first_prefills_late(server)
    return min(max(late, 0), w)


def _first_prefills_late(server: Any) -> int:
    """Prefills in progress (chunked) of requests that have no first token yet and
    whose TTFT deadline has passed."""
    srv = server.state
    if not srv.prefilling:
        return 0
    G, R, books = srv.generated, srv.running, server.sla_books
    return sum(1 for e in R[len(R) - srv.prefilling :] if G[e] == 0 and books.past_deadline(e))


def class_counts(server: Any) -> tuple[list[int], list[int], list[float]]:
    """Per class: waiting and running requests, and its oldest waiting request's
    arrival time (``inf``: none waits). The waiting queue is in arrival order but for
    preempted requests at its head, which are older still, so a class's first entry
    in it is its oldest (the queue keeps both per class: O(1), not O(queue))."""
    srv, n = server.state, len(server.classes)
    cls = srv.request_class
    waiting, first = srv.waiting.by_class(n)
    arr = server.arrivals
    oldest = [arr[e] if e >= 0 else math.inf for e in first]
    running = [0] * n
    for e in srv.running:
        running[cls[e]] += 1
    return waiting, running, oldest


def first_admitted(server: Any, order: str) -> int:
    """The first waiting request ``order`` would admit (requests must be waiting)."""
    return next(iter(candidates(server.state, 1, order)))
