"""Multi-turn chat sessions with shared system prompts: a synthetic LLM workload with
prefix information (:class:`Sessions`, ``{"kind": "sessions", ...}``).

A session starts with one of ``system_prompts`` shared system prompts (chosen uniformly,
each ``system_prompt_tokens`` long), then runs a number of turns (geometric, mean
``turns_mean``). Turn ``k``'s prompt is the session so far (the system prompt, every
earlier user message and every earlier answer) followed by a new user message; its
output is the answer. So each turn's prompt extends the last one's, and sessions on the
same system prompt share it: what prefix caching reuses.

Arrivals are open-loop, as a trace's are: sessions start as a Poisson process, and a
turn arrives ``think_time`` after the previous one (exponential, mean ``think_time_s``),
whether or not the previous answer is done. The mean request rate is ``rate_per_s``
(sessions start at ``rate_per_s / turns_mean``). User messages and answers have
lognormal lengths (means ``user_tokens_mean``, ``output_tokens_mean``; coefficients of
variation ``user_tokens_cv``, ``output_tokens_cv``), rounded, at least 1 token.

Prefix information: each prompt's blocks of ``prefix_block_tokens`` tokens get hashes as
a trace's ``hash_ids``: a block inside the system prompt has the system prompt's own id
for that position (shared by every session on it); a later full block has the session's
id for that position (shared by its later turns); a partial last block has a fresh id
(its next turn's block at that position holds more tokens). With 16-token KV blocks and
64-token hashed blocks (the default), a turn misses at most 48 tokens of its previous
turn's prompt that vLLM's per-block hashing would find (the full 16-token blocks of a
partial hashed block): the price of hashing a prompt in fewer pieces.

Everything is drawn from the stream's generator, in arrival order; its first draw is the
number of its first session (so that another stream's sessions, such as those a
planner's copy imagines, have hashes of their own).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..checks import check_number, positive
from .arrivals import DEFAULT_CHUNK_SIZE, ArrivalChunk, ArrivalStream, Workload

__all__ = ["Sessions"]

#: hashes per system prompt or session, apart (a block index never reaches it: 2**20
#: blocks of a prompt)
_SPAN = 1 << 20
#: the range of a stream's first session number (drawn: two streams, such as a planner's
#: copy's future and the episode it plans in, do not reuse each other's sessions' hashes)
_BASES = 1 << 30


@dataclass(frozen=True)
class Sessions(Workload):
    """Multi-turn chat sessions with shared system prompts (module docstring).

    :param rate_per_s: mean request (turn) rate, per second (> 0).
    :param turns_mean: mean turns per session (>= 1; geometric on 1, 2, ...).
    :param think_time_s: mean time from a turn's arrival to the next turn's (> 0; exponential).
    :param system_prompts: distinct shared system prompts (>= 1).
    :param system_prompt_tokens: tokens of each system prompt (>= 0).
    :param user_tokens_mean: mean tokens of a user message (>= 1).
    :param user_tokens_cv: their coefficient of variation (>= 0; lognormal).
    :param output_tokens_mean: mean tokens of an answer (>= 1).
    :param output_tokens_cv: their coefficient of variation (>= 0; lognormal).
    :param prefix_block_tokens: tokens per hashed block of a prompt (>= 1; 64).
    """

    kind: ClassVar[str] = "sessions"
    rate_per_s: float
    turns_mean: float = 4.0
    think_time_s: float = 30.0
    system_prompts: int = 8
    system_prompt_tokens: int = 1024
    user_tokens_mean: float = 200.0
    user_tokens_cv: float = 1.0
    output_tokens_mean: float = 250.0
    output_tokens_cv: float = 0.8
    prefix_block_tokens: int = 64

    def __post_init__(self) -> None:
        """Validate and normalize the fields (one-line errors naming the field)."""
        w = "Sessions"
        object.__setattr__(self, "rate_per_s", positive(self.rate_per_s, "rate_per_s", w))
        object.__setattr__(self, "think_time_s", positive(self.think_time_s, "think_time_s", w))
        for name in ("turns_mean", "user_tokens_mean", "output_tokens_mean"):
            check_number(f"{w}: {name}", getattr(self, name), low=1.0)
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("user_tokens_cv", "output_tokens_cv"):
            check_number(f"{w}: {name}", getattr(self, name), low=0.0)
            object.__setattr__(self, name, float(getattr(self, name)))
        for name, low in (("system_prompts", 1), ("system_prompt_tokens", 0)):
            check_number(f"{w}: {name}", getattr(self, name), low=low, integer=True)
            object.__setattr__(self, name, int(getattr(self, name)))
        check_number(f"{w}: prefix_block_tokens", self.prefix_block_tokens, low=1, integer=True)
        object.__setattr__(self, "prefix_block_tokens", int(self.prefix_block_tokens))

    @property
    def mean_rate_per_s(self) -> float:
        """The mean request rate."""
        return self.rate_per_s

    @property
    def arrival_cv(self) -> float | None:
        """Not known in closed form (turns cluster in sessions)."""
        return None

    @property
    def has_prefix(self) -> bool:
        """Its prompts carry block hashes."""
        return True

    @property
    def has_tokens(self) -> bool:
        """Its arrivals carry prompt and output lengths."""
        return True

    @property
    def min_prompt_tokens(self) -> int:
        """The shortest prompt it can draw: the system prompt and one user token."""
        return self.system_prompt_tokens + 1

    def with_mean_rate(self, rate_per_s: float) -> Sessions:
        """The same sessions at another request rate."""
        from dataclasses import replace

        return replace(self, rate_per_s=positive(rate_per_s, "rate_per_s", "Sessions"))

    def to_dict(self) -> dict[str, Any]:
        """All fields with ``"kind": "sessions"``."""
        from dataclasses import fields

        return {"kind": self.kind, **{f.name: getattr(self, f.name) for f in fields(self)}}

    def stream(
        self, rng: np.random.Generator, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> ArrivalStream:
        """Start the sessions (module docstring); everything is drawn from ``rng``."""
        n = self._check_stream_args(rng, chunk_size)
        return _SessionsStream(self, rng, n)


def _lognormal(mean: float, cv: float) -> tuple[float, float]:
    """``(mu, sigma)`` of a lognormal with this mean and coefficient of variation."""
    s2 = math.log1p(cv * cv)
    return math.log(mean) - s2 / 2, math.sqrt(s2)


class _SessionsStream(ArrivalStream):
    """The turns of the sessions in time order (a heap of each live session's next turn)."""

    def __init__(self, wl: Sessions, rng: np.random.Generator, chunk_size: int) -> None:
        self._wl = wl
        self._rng = rng
        self._n = chunk_size
        self._start_rate = wl.rate_per_s / wl.turns_mean
        self._p_end = 1.0 / wl.turns_mean  # a turn is the session's last with this chance
        self._user = _lognormal(wl.user_tokens_mean, wl.user_tokens_cv)
        self._out = _lognormal(wl.output_tokens_mean, wl.output_tokens_cv)
        self._next_start = float(rng.exponential(1.0 / self._start_rate))
        # live sessions: (next turn's time, session id, system prompt, context tokens, hashes)
        self._heap: list[tuple[float, int, int, int, tuple[int, ...]]] = []
        base = int(rng.integers(_BASES))
        self._sessions = base  # the next session's number
        self._fresh = base * _SPAN  # ids of partial blocks: negative, never repeated

    def _length(self, mu_sigma: tuple[float, float]) -> int:
        mu, sigma = mu_sigma
        return (
            max(1, round(float(self._rng.lognormal(mu, sigma))))
            if sigma
            else max(1, round(math.exp(mu)))
        )

    def _hashes(
        self, sys_p: int, sid: int, prompt: int, full_before: tuple[int, ...]
    ) -> tuple[int, ...]:
        """The prompt's block hashes: the session's full blocks so far kept, then the new
        full blocks (the system prompt's, or the session's), then a partial one's fresh id."""
        wl = self._wl
        b = wl.prefix_block_tokens
        full = prompt // b
        sys_full = wl.system_prompt_tokens // b
        hs = list(full_before[:full])
        for j in range(len(hs), full):
            hs.append(
                1 + sys_p * _SPAN + j if j < sys_full else 1 + (wl.system_prompts + sid) * _SPAN + j
            )
        if prompt % b:
            self._fresh += 1
            hs.append(-self._fresh)
        return tuple(hs)

    def _turn(
        self, t: float, sid: int, sys_p: int, ctx: int, full_before: tuple[int, ...]
    ) -> tuple[int, int, tuple[int, ...]]:
        """One turn at ``t``: its prompt, output and hashes; the session's next turn queued
        unless this one is its last."""
        prompt = ctx + self._length(self._user)
        out = self._length(self._out)
        hs = self._hashes(sys_p, sid, prompt, full_before)
        if self._rng.random() >= self._p_end:  # not the last turn
            b = self._wl.prefix_block_tokens
            nxt = t + float(self._rng.exponential(self._wl.think_time_s))
            keep = hs[: prompt // b]  # the full blocks (the next prompt extends this one)
            heapq.heappush(self._heap, (nxt, sid, sys_p, prompt + out, keep))
        return prompt, out, hs

    def next_chunk(self) -> ArrivalChunk:
        """The next ``chunk_size`` turns, in time order."""
        n = self._n
        times = np.empty(n)
        prompt = np.empty(n, np.int64)
        output = np.empty(n, np.int64)
        prefix = np.empty(n, dtype=object)
        heap = self._heap
        for i in range(n):
            if heap and heap[0][0] <= self._next_start:
                t, sid, sys_p, ctx, before = heapq.heappop(heap)
            else:  # a new session
                t = self._next_start
                sid = self._sessions
                self._sessions += 1
                sys_p = int(self._rng.integers(self._wl.system_prompts))
                ctx, before = self._wl.system_prompt_tokens, ()
                self._next_start = t + float(self._rng.exponential(1.0 / self._start_rate))
            p, o, hs = self._turn(t, sid, sys_p, ctx, before)
            times[i], prompt[i], output[i], prefix[i] = t, p, o, hs
        return ArrivalChunk(times, prompt, output, prefix=prefix)
