"""Admission orders: which waiting requests a scheduler offers a prefill first.

The waiting queue (:attr:`batch_env.llm.state.LLMServerState.waiting`, a :class:`WaitingQueue`)
stays first come first served: arrivals join its tail and preempted requests return to
its head. An order is a view of it: :func:`candidates` gives the first ``room`` waiting
entries in that order, and a scheduler scans them as it scans the queue's head under FCFS
(the scan stops at the first it cannot serve). Ties, and the order within a class, follow
the queue.

* ``fcfs``: the queue itself;
* ``edf``: earliest TTFT deadline first (arrival + its class's TTFT SLA);
* ``shortest-prompt``: fewest tokens to prefill first (prompt + generated: a preempted
  request recomputes what it had generated);
* ``class-priority``: the first class of ``classes`` first, then the second, ...;
* ``srpt``: fewest output tokens left first, the true remaining length: an oracle, offered
  only on an env made with ``oracle_info=True``;
* ``longest-prefix``: SGLang's longest prefix match (LPM): most prompt blocks found in the
  prefix cache first (ties: the queue's order), and first come first served while more
  than ``longest_prefix_fcfs_above`` requests wait (SGLang's switch, 128: matching a long
  queue costs more than it gains). Without prefix caching every match is empty: FCFS.

Cost. ``longest-prefix``'s key changes as the cache does: :func:`candidates` looks up
every waiting request's cached prefix (at most ``longest_prefix_fcfs_above`` of them, a
few dictionary reads each) and sorts them, at each plan. Every other order's key is fixed while a request waits (its prompt, generated tokens,
deadline, class and output change only while it runs), so the queue keeps, for each order
a scheduler has asked for, a heap of ``(key, position, entry)``: an entry's position is
its place in the queue (the tail's grows, the head's shrinks), the tie-break the queue
gives. An entry that leaves stays in the heaps, stale, until it reaches a heap's top
(popped when the heap is next read) or the heap holds more than twice the queue (then it
is rebuilt: amortised O(1) a removal). :func:`candidates` walks a heap
in order without popping it, lazily: the first ``k`` entries cost O(k log k) (stale ones
walked past included), not O(queue) as a sort or ``heapq.nsmallest`` over the queue
would. A queue of thousands of requests (a policy that starves the server) keeps a step
as cheap as a short one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from heapq import heapify, heappop, heappush
from itertools import islice
from typing import Any, Protocol

FCFS = "fcfs"
#: SGLang's longest prefix match (module docstring)
LONGEST_PREFIX = "longest-prefix"


class OrderedState(Protocol):
    """What the orders read of the server (:class:`batch_env.llm.state.LLMServerState`, which
    imports this module: a protocol here keeps the imports one way)."""

    prompt: list[int]
    generated: list[int]
    output: list[int]
    ttft_deadline: list[float]
    request_class: list[int]
    waiting: WaitingQueue
    kv: Any  # the KV cache: its lookup gives longest-prefix's key
    fcfs_above: int | None  # longest-prefix admits FCFS while more wait (None: never)


_SLACK = 32  # stale heap entries tolerated beyond the queue's length before a rebuild


def _edf(s: OrderedState, e: int) -> float:
    return s.ttft_deadline[e]


def _shortest_prompt(s: OrderedState, e: int) -> int:
    return s.prompt[e] + s.generated[e]


def _class_priority(s: OrderedState, e: int) -> int:
    return s.request_class[e]


def _srpt(s: OrderedState, e: int) -> int:
    return s.output[e] - s.generated[e]


#: each order's key of a waiting entry (fixed while it waits); module functions, so that
#: an env pickles (``copy.deepcopy``, vector envs' workers)
_KEYS: dict[str, Callable[[OrderedState, int], Any]] = {
    "edf": _edf,
    "shortest-prompt": _shortest_prompt,
    "class-priority": _class_priority,
    "srpt": _srpt,
}


class WaitingQueue:
    """The waiting entries, first come first served (a deque's ``len``, iteration, ``[0]``,
    ``extend``, ``extendleft``, ``popleft`` and ``remove``), with an index per admission
    order and per request class, kept as entries come and go (module docstring, "Cost").

    :param state: the server whose columns give the orders' keys and the classes.
    """

    __slots__ = ("_state", "_q", "_pos", "_head", "_tail", "_heaps", "_class_heaps", "_counts")

    def __init__(self, state: OrderedState) -> None:
        self._state = state
        self._q: deque[int] = deque()
        self._pos: dict[int, int] = {}  # a waiting entry's position
        self._head, self._tail = -1, 0  # the next positions at the head and at the tail
        # per order asked for, and per class (keyed by the class: the queue's order within
        # it), heaps of (key, position, entry); an item is stale once its entry has left
        self._heaps: dict[str, list[tuple[Any, int, int]]] = {}
        self._class_heaps: list[list[tuple[Any, int, int]]] | None = None
        self._counts: list[int] | None = None

    # -- the deque's interface ------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def __iter__(self) -> Iterator[int]:
        return iter(self._q)

    def __getitem__(self, i: int) -> int:
        return self._q[i]

    def __repr__(self) -> str:
        return f"WaitingQueue({list(self._q)})"

    def extend(self, entries: Iterable[int]) -> None:
        """Entries join the tail, in turn."""
        for e in entries:
            self._q.append(e)
            self._enter(e, self._tail)
            self._tail += 1

    def extendleft(self, entries: Iterable[int]) -> None:
        """Entries join the head, in turn (the last ends up first, as a deque's)."""
        for e in entries:
            self._q.appendleft(e)
            self._enter(e, self._head)
            self._head -= 1

    def popleft(self) -> int:
        """The head leaves."""
        e = self._q.popleft()
        self._leave(e)
        return e

    def remove(self, e: int) -> None:
        """Entry ``e`` leaves (``ValueError`` if it does not wait)."""
        self._q.remove(e)
        self._leave(e)

    # -- the indexes ----------------------------------------------------------------------
    def _enter(self, e: int, pos: int) -> None:
        self._pos[e] = pos
        for order, heap in self._heaps.items():
            heappush(heap, (_KEYS[order](self._state, e), pos, e))
        if self._counts is not None:
            assert self._class_heaps is not None
            c = self._state.request_class[e]
            self._counts[c] += 1
            heappush(self._class_heaps[c], (c, pos, e))

    def _leave(self, e: int) -> None:
        del self._pos[e]
        n = len(self._q)
        for order, heap in self._heaps.items():
            if len(heap) > 2 * n + _SLACK:
                self._heaps[order] = self._built(_KEYS[order])
        if self._counts is not None:
            assert self._class_heaps is not None
            c = self._state.request_class[e]
            self._counts[c] -= 1
            if len(self._class_heaps[c]) > 2 * self._counts[c] + _SLACK:
                self._class_heaps[c] = self._built(_class_priority, c)

    def _built(
        self, key: Callable[[OrderedState, int], Any], c: int | None = None
    ) -> list[tuple[Any, int, int]]:
        """A heap of the waiting entries by ``key`` (of class ``c`` only, when given)."""
        pos, st = self._pos, self._state
        cls = st.request_class
        heap = [(key(st, e), pos[e], e) for e in self._q if c is None or cls[e] == c]
        heapify(heap)
        return heap

    def _drop_stale_top(self, heap: list[tuple[Any, int, int]]) -> None:
        """Pop the heap's stale items from its top (their entries left): gone for good."""
        pos = self._pos
        while heap and pos.get(heap[0][2]) != heap[0][1]:
            heappop(heap)

    def in_order(self, order: str, room: int) -> Iterator[int]:
        """The first ``room`` waiting entries in ``order`` (not ``fcfs``), lazily: read
        them before the queue changes (a scheduler plans, then runs its plan)."""
        if order not in self._heaps:
            if order not in _KEYS:
                raise ValueError(f"order: unknown admission order {order!r}")
            self._heaps[order] = self._built(_KEYS[order])
        heap = self._heaps[order]
        self._drop_stale_top(heap)
        return self._walk(heap, room)

    def _walk(self, heap: list[tuple[Any, int, int]], room: int) -> Iterator[int]:
        """Heap ``heap``'s valid items in order, at most ``room`` (a frontier heap of the
        heap's nodes: each step pops the least and offers its two children)."""
        pos, n = self._pos, len(heap)
        if not n or room <= 0:
            return
        front = [(heap[0], 0)]
        while front:
            item, i = heappop(front)
            if pos.get(item[2]) == item[1]:  # not stale
                yield item[2]
                room -= 1
                if not room:
                    return
            c = 2 * i + 1
            if c < n:
                heappush(front, (heap[c], c))
                if c + 1 < n:
                    heappush(front, (heap[c + 1], c + 1))

    def by_class(self, n_classes: int) -> tuple[list[int], list[int]]:
        """Per class: its waiting entries, and its first waiting entry (-1: none)."""
        if self._class_heaps is None:
            self._class_heaps = [self._built(_class_priority, c) for c in range(n_classes)]
            self._counts = [len(h) for h in self._class_heaps]
        assert self._counts is not None
        first = []
        for h in self._class_heaps:
            self._drop_stale_top(h)
            first.append(h[0][2] if h else -1)
        return list(self._counts), first


def candidates(state: OrderedState, room: int, order: str) -> Iterable[int]:
    """The first ``room`` waiting entries in ``order`` (module docstring), lazily: the
    scheduler's scan reads only as far as it admits."""
    W = state.waiting
    if order == FCFS or room <= 0:
        return islice(W, max(room, 0))
    if order == LONGEST_PREFIX:
        if not state.kv.prefix or (state.fcfs_above is not None and len(W) > state.fcfs_above):
            return islice(W, room)
        P, G, lookup = state.prompt, state.generated, state.kv.lookup
        keyed = sorted((-lookup(e, P[e] + G[e])[0], i, e) for i, e in enumerate(W))
        return [e for _, _, e in keyed[:room]]
    return W.in_order(order, room)


def acts_as_fcfs(state: OrderedState, order: str) -> bool:
    """Whether ``order`` offers the waiting requests in the queue's own order now, so that
    any cap and budget admit under it exactly what they admit under FCFS (checked for
    ``fcfs`` and ``longest-prefix``; any other order: ``False``). ``longest-prefix`` does
    without prefix caching, above its switch to FCFS, and where no waiting request's
    cached prefix is longer than one ahead of it (its stable sort is then the queue)."""
    if order == FCFS:
        return True
    if order != LONGEST_PREFIX:
        return False
    W = state.waiting
    if len(W) < 2 or not state.kv.prefix:
        return True
    if state.fcfs_above is not None and len(W) > state.fcfs_above:
        return True
    P, G, lookup = state.prompt, state.generated, state.kv.lookup
    ahead = None
    for e in W:
        h = lookup(e, P[e] + G[e])[0]
        if ahead is not None and h > ahead:
            return False
        ahead = h
    return True


def leave_queue(state: OrderedState, e: int) -> None:
    """Waiting entry ``e`` is admitted: it leaves the queue (at its head under FCFS)."""
    W = state.waiting
    if W[0] == e:
        W.popleft()
    else:
        W.remove(e)
