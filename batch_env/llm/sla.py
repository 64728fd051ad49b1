"""The LLM envs' SLA books: per-class TTFT deadlines, first tokens, TPOT at completion.

A request *misses* at most once: when its TTFT deadline passes without a first token
(``t - arrival > ttft_sla`` of its class; a latency equal to the SLA meets it), or, having
met TTFT, at completion when its TPOT ``(completion - first token) / (output - 1)``
exceeds its class's ``tpot_sla``. A miss counts ``weight`` of its class (1 by default) in
the reward's SLA term, and is counted when it happens (TTFT: when the deadline passes;
TPOT: at completion).

Deadlines are monotone in arrival order *within a class*, so each class keeps its
entries in arrival order and a pointer to the first whose deadline has not passed; the
met flags of the entries behind it are final (a first token within the SLA comes before
the deadline). First tokens may come in any order (the admission order is a control), so
they are kept per entry. With one class of weight 1 every figure is the integer count
``LLMBatching-v0`` always had.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence


class SLABooks:
    """TTFT and TPOT misses of one episode, per request class.

    :param ttft_s: each class's TTFT SLA (seconds).
    :param tpot_s: each class's TPOT SLA (seconds).
    :param weights: each class's weight of a miss.
    """

    def __init__(
        self, ttft_s: Sequence[float], tpot_s: Sequence[float], weights: Sequence[float]
    ) -> None:
        self.ttft_s = [float(x) for x in ttft_s]
        self.tpot_s = [float(x) for x in tpot_s]
        self.weights = [float(w) for w in weights]
        #: every class weighs 1: the misses are integer counts
        self.unweighted = all(w == 1.0 for w in self.weights)
        self.clear()

    def clear(self) -> None:
        """No request yet."""
        n = len(self.ttft_s)
        #: per entry: its class, its place among its class's entries, its arrival time,
        #: its first-token time (NaN until then)
        self.cls: list[int] = []
        self.pos: list[int] = []
        self.arrival: list[float] = []
        self.first_at: list[float] = []
        # per class: its entries' arrivals in order, the met flags (first token within
        # the TTFT SLA) in that order, the deadline pointer and what lies behind it
        self.arrivals: list[list[float]] = [[] for _ in range(n)]
        self._entries: list[list[int]] = [[] for _ in range(n)]
        self._met: list[list[int]] = [[] for _ in range(n)]
        self._passed = [0] * n  # entries whose deadline has passed (a prefix of the class)
        self._passed_met = [0] * n  # of those, met TTFT
        self._passed_first = [0] * n  # of those, have a first token by now
        self.ttft_missed = [0] * n  # per class, counted when the deadline passed (cached)
        self.tpot_missed = [0] * n

    @property
    def n_classes(self) -> int:
        """Number of classes."""
        return len(self.ttft_s)

    def admit(self, classes: Sequence[int], arrivals: Sequence[float]) -> None:
        """New entries (in arrival order): their classes and arrival times."""
        for c, a in zip(classes, arrivals, strict=True):
            self.cls.append(c)
            self.pos.append(len(self.arrivals[c]))
            self.arrival.append(a)
            self.first_at.append(math.nan)
            self.arrivals[c].append(a)
            self._entries[c].append(len(self.cls) - 1)
            self._met[c].append(0)

    def first_token(self, e: int, t: float) -> None:
        """Entry ``e``'s first token at ``t``."""
        c = self.cls[e]
        self.first_at[e] = t
        if t - self.arrival[e] <= self.ttft_s[c]:
            self._met[c][self.pos[e]] = 1
        if self.pos[e] < self._passed[c]:  # its deadline had passed: a late first token
            self._passed_first[c] += 1

    def finish(self, e: int, t: float, output_tokens: int) -> None:
        """Entry ``e`` completed at ``t`` with ``output_tokens``: a TPOT miss is counted
        now (TTFT met, at least two tokens)."""
        c = self.cls[e]
        first = self.first_at[e]
        if (
            first - self.arrival[e] <= self.ttft_s[c]
            and output_tokens >= 2
            and (t - first) / (output_tokens - 1) > self.tpot_s[c]
        ):
            self.tpot_missed[c] += 1

    def advance(self, t: float) -> None:
        """Move every class's deadline pointer to ``t``."""
        for c, arr in enumerate(self.arrivals):
            k, sla, n = self._passed[c], self.ttft_s[c], len(arr)
            if k == n or not t - arr[k] > sla:
                continue  # no new deadline passed (deadlines are in arrival order)
            met, entries, first = self._met[c], self._entries[c], self.first_at
            m = self._passed_met[c]
            f = self._passed_first[c]
            while k < n and t - arr[k] > sla:
                m += met[k]
                f += not math.isnan(first[entries[k]])  # has a first token
                k += 1
            self._passed[c], self._passed_met[c], self._passed_first[c] = k, m, f
            self.ttft_missed[c] = k - m

    def misses(self, t: float) -> float:
        """Weighted misses counted by ``t`` (an epoch; the pointers move to ``t``): an
        ``int`` when every class weighs 1."""
        self.advance(t)
        if self.unweighted:
            return sum(self.ttft_missed) + sum(self.tpot_missed)
        return sum(
            w * (a + b)
            for w, a, b in zip(self.weights, self.ttft_missed, self.tpot_missed, strict=True)
        )

    def misses_exact(self, t: float) -> float:
        """:meth:`misses` at any instant ``t`` at or after the last epoch, the pointers
        left where they are."""
        total: float = 0
        for c, arr in enumerate(self.arrivals):
            sla = self.ttft_s[c]
            k = bisect_right(arr, t - sla, self._passed[c])
            while k < len(arr) and t - arr[k] > sla:
                k += 1
            while k > self._passed[c] and not t - arr[k - 1] > sla:
                k -= 1
            met = self._passed_met[c] + sum(self._met[c][self._passed[c] : k])
            n = k - met + self.tpot_missed[c]
            total += n if self.unweighted else self.weights[c] * n
        return total

    def past_without_first(self) -> int:
        """Requests whose TTFT deadline had passed at the last :meth:`misses` and that
        have no first token yet (waiting, or a first prefill in progress)."""
        return sum(self._passed) - sum(self._passed_first)

    def past_deadline(self, e: int) -> bool:
        """Whether entry ``e``'s TTFT deadline had passed at the last :meth:`misses`."""
        return self.pos[e] < self._passed[self.cls[e]]
