"""Arrival processes (workloads) for the batching environments.

A *workload* is a frozen, validated configuration object that describes how inference
requests arrive. Four kinds exist:

- :class:`Poisson`: exponential inter-arrival times (CV 1);
- :class:`MMPP`: a Markov-modulated Poisson process (bursty; the arrival rate follows a
  continuous-time Markov chain over two or more states);
- :class:`Gamma`: a renewal process with gamma inter-arrival times of a chosen
  coefficient of variation (the "burstiness" knob of vLLM's benchmarks);
- :class:`Trace`: a replay of the timestamps (and optional token counts) of a CSV file
  (``path``) or of a named dataset (``dataset``, see :mod:`batch_env.data`), rescaled to a
  target rate, optionally started at a random offset, looped by default.

``workload.stream(rng)`` returns an :class:`ArrivalStream` whose
:meth:`ArrivalStream.next_chunk` yields the arrival times in vectorized chunks of a few
thousand (:class:`ArrivalChunk`). All randomness comes from the generator that is passed
in (the env's *arrivals* child stream, see docs/design.md, "Random streams"), so the same seed
gives the same arrival times, independently of the policy.

Times are float64 seconds from the start of the episode (0). Within a stream they are
strictly increasing, across chunks too, except that equal trace timestamps stay equal
(and keep their file order). Synthetic streams are infinite and never return an empty
chunk; a trace with ``loop=False`` ends, after which ``next_chunk`` returns an empty
chunk (the env then needs a finite horizon, which it always has).

:func:`make_workload` builds a workload from a dict such as
``{"kind": "poisson", "rate_per_s": 300}`` (or ``{"kind": "gamma", "cv": 2, "load": 0.8}``
together with a reference throughput), with clear errors for bad specs.
"""

from __future__ import annotations

import bisect
import csv
import dataclasses
import functools
import math
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .config import is_real_number

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "ArrivalChunk",
    "ArrivalStream",
    "Workload",
    "Poisson",
    "MMPP",
    "Gamma",
    "Trace",
    "WORKLOAD_KINDS",
    "make_workload",
]

#: Target number of arrivals per chunk returned by :meth:`ArrivalStream.next_chunk`.
DEFAULT_CHUNK_SIZE = 4096


# ----------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------


def _positive(value: Any, name: str, owner: str) -> float:
    """Validate a finite, strictly positive number and return it as float.

    :param value: the value to check.
    :param name: field name, quoted in the error message.
    :param owner: what the field belongs to (e.g. ``"Poisson"``), quoted in the message.
    :return: ``float(value)``.
    :raises ValueError: if ``value`` is not a finite number > 0.
    """
    if not is_real_number(value) or not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(f"{owner}: {name}={value!r} is invalid; expected a finite number > 0")
    return float(value)


def _nonnegative(value: Any, name: str, owner: str) -> float:
    """Validate a finite number >= 0 and return it as float.

    :param value: the value to check.
    :param name: field name, quoted in the error message.
    :param owner: what the field belongs to, quoted in the message.
    :return: ``float(value)``.
    :raises ValueError: if ``value`` is not a finite number >= 0.
    """
    if not is_real_number(value) or not math.isfinite(float(value)) or float(value) < 0:
        raise ValueError(f"{owner}: {name}={value!r} is invalid; expected a finite number >= 0")
    return float(value)


def _strictly_increasing(times: np.ndarray, prev: float) -> np.ndarray:
    """Nudge non-decreasing, non-negative times by whole ulps so they strictly increase.

    Float64 sums can round tiny gaps (e.g. gamma inter-arrivals with a large CV) to zero;
    this moves each tied time up by the fewest ulps that make the sequence strictly
    increasing after ``prev``. Non-negative float64 values order like their bit patterns,
    so the fix is a vectorized running maximum on the integer view.

    A cheaper sufficient test (Poisson pieces use it): times ``t_i = fl(base + s_i)`` with
    ``s_i = fl(s_{i-1} + g_i)``, ``base, s_0, g_i >= 0``, strictly increase when every gap
    ``g_i >= 4U``, where ``U = ulp(2 t_last)`` bounds the spacing of every value involved:
    each rounding moves a value by at most ``U/2``, so ``s_i - s_{i-1} >= 3.5U`` and
    ``t_i - t_{i-1} >= 2.5U > 0``.

    :param times: non-decreasing, non-negative float64 times.
    :param prev: the last time emitted before ``times`` (>= 0).
    :return: ``times`` itself when already strictly increasing, else a fixed copy.
    """
    if times.size == 0:
        return times
    if times[0] > prev and bool((times[1:] > times[:-1]).all()):
        return times
    bits = np.concatenate((np.array([prev], dtype=np.float64), times)).view(np.int64)
    idx = np.arange(bits.size, dtype=np.int64)
    fixed = np.maximum.accumulate(bits - idx) + idx
    return fixed[1:].view(np.float64).copy()


# ----------------------------------------------------------------------------------
# Chunks and streams
# ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ArrivalChunk:
    """A batch of consecutive arrivals.

    :param times: float64 arrival times, seconds from the episode start (0), in order.
    :param prompt_tokens: int64 prompt (context) tokens per arrival, or None when the
        workload does not carry request sizes.
    :param output_tokens: int64 output (generated) tokens per arrival, or None.
    """

    times: np.ndarray
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        """Return the number of arrivals in the chunk."""
        return int(self.times.size)


class ArrivalStream(ABC):
    """An iterator over arrival chunks drawn from one random generator.

    Synthetic streams are infinite and never return an empty chunk. A trace stream with
    ``loop=False`` returns an empty chunk (and keeps doing so) once every record has
    been replayed; :attr:`exhausted` then becomes True.
    """

    #: True once a finite stream has delivered all its arrivals.
    exhausted: bool = False

    @abstractmethod
    def next_chunk(self) -> ArrivalChunk:
        """Return the next chunk of arrivals (empty only once a finite stream has ended).

        :return: the next :class:`ArrivalChunk`; its times follow the previous chunk's.
        """


class _PoissonStream(ArrivalStream):
    """Poisson arrivals: cumulative sums of exponential gaps."""

    def __init__(self, rate_per_s: float, rng: np.random.Generator, chunk_size: int) -> None:
        """:param rate_per_s: arrival rate. :param rng: generator. :param chunk_size: chunk length."""
        self._scale = 1.0 / rate_per_s
        self._rng = rng
        self._n = chunk_size
        self._t = 0.0  # the last time emitted
        self._base = 0.0  # the current chunk's start time
        self._acc = 0.0  # the running sum of the current chunk's gaps
        self._left = 0  # arrivals left in the current chunk

    def next_chunk(self) -> ArrivalChunk:
        """Return the next ``chunk_size`` arrivals."""
        if self._left:
            return self.next_piece(self._left)
        gaps = self._rng.exponential(self._scale, size=self._n)
        times = _strictly_increasing(self._t + np.cumsum(gaps), self._t)
        self._t = float(times[-1])
        return ArrivalChunk(times)

    def next_piece(self, max_n: int) -> ArrivalChunk:
        """Return the next ``min(max_n, rest of the chunk)`` arrivals, bit-identical to the
        corresponding part of :meth:`next_chunk`'s chunks.

        Exponential draws do not depend on how they are split, the running sum continues
        the chunk's sequential sum, and the tie fix-up is a running maximum, so pieces
        concatenate to exactly the chunks ``next_chunk`` returns: a consumer that needs
        few arrivals at a time (the vector env, at every reset) draws only those.

        :param max_n: the most arrivals to return (>= 1).
        """
        if not self._left:
            self._base, self._acc, self._left = self._t, 0.0, self._n
        m = min(int(max_n), self._left)
        gaps = np.empty(m + 1)
        gaps[0] = self._acc
        draws = gaps[1:]
        # exponential(scale) is scale * standard_exponential() draw for draw (NumPy's
        # random_exponential), so filling in place gives the same numbers without copies
        self._rng.standard_exponential(out=draws)
        draws *= self._scale
        gap_min = float(np.minimum.reduce(draws))
        np.add.accumulate(gaps, out=gaps)  # (np.cumsum, without its wrapper: 1.6 µs less)
        self._acc = float(gaps[-1])
        draws += self._base
        if draws[0] > self._t and gap_min >= 4.0 * math.ulp(2.0 * float(draws[-1])):
            times = draws  # strictly increasing, as _strictly_increasing would find (see there)
        else:
            times = _strictly_increasing(draws, self._t)
        self._t = float(times[-1])
        self._left -= m
        return ArrivalChunk(times)


class _GammaStream(ArrivalStream):
    """Gamma renewal arrivals: cumulative sums of gamma gaps."""

    def __init__(
        self, shape: float, scale: float, rng: np.random.Generator, chunk_size: int
    ) -> None:
        """:param shape: gamma shape. :param scale: gamma scale (s). :param rng: generator.
        :param chunk_size: chunk length."""
        self._shape = shape
        self._scale = scale
        self._rng = rng
        self._n = chunk_size
        self._t = 0.0

    def next_chunk(self) -> ArrivalChunk:
        """Return the next ``chunk_size`` arrivals."""
        gaps = self._rng.gamma(self._shape, self._scale, size=self._n)
        times = _strictly_increasing(self._t + np.cumsum(gaps), self._t)
        self._t = float(times[-1])
        return ArrivalChunk(times)


class _MMPPStream(ArrivalStream):
    """Exact MMPP sampling.

    The modulating chain's path (states and sojourn durations) is drawn in vectorized
    blocks. Each chunk takes whole sojourns, or a time window of a long sojourn, until
    the expected number of arrivals reaches the chunk size; then, per segment, the
    number of arrivals is Poisson(rate x length) and their times are uniform in the
    segment (sorted). Which segments a chunk takes depends only on the chain's path,
    never on the arrival counts, so the result is exactly the MMPP.
    """

    def __init__(self, wl: MMPP, rng: np.random.Generator, chunk_size: int) -> None:
        """:param wl: the MMPP workload. :param rng: generator. :param chunk_size: target length."""
        self._rng = rng
        self._n = chunk_size
        self._rates = np.asarray(wl.rates_per_s, dtype=np.float64)
        q = wl.generator
        self._leave = -np.diag(q).copy()
        m = self._rates.size
        self._m = m
        jump = np.where(np.eye(m, dtype=bool), 0.0, q) / self._leave[:, None]
        self._uniform_jumps = not isinstance(wl.switch_rates_per_s[0], (tuple, list))
        cum_jump = np.cumsum(jump, axis=1)
        # a target after which only impossible jumps follow can never be passed
        tail_zero = np.cumsum(jump[:, ::-1], axis=1)[:, ::-1][:, 1:] == 0
        cum_jump[:, :-1][tail_zero] = np.inf
        self._cum_jump = [list(row[:-1]) for row in cum_jump]
        pi = wl.stationary_distribution
        if wl.initial_state is None:
            self._state = int(min(np.searchsorted(np.cumsum(pi), rng.random(), "right"), m - 1))
        else:
            self._state = int(wl.initial_state)
        jump_rate = float(pi @ self._leave)
        per_sojourn = wl.mean_rate_per_s / jump_rate
        self._block = int(np.clip(math.ceil(chunk_size / max(per_sojourn, 1e-12)), 16, 8192))
        # pending sojourns: start time, duration, rate; index and time used in the current one
        self._starts = np.empty(0)
        self._durs = np.empty(0)
        self._seg_rates = np.empty(0)
        self._pos = 0
        self._used = 0.0
        self._t_next = 0.0  # start of the next, not yet drawn, sojourn
        self._t = 0.0  # last emitted arrival time

    def _draw_block(self) -> None:
        """Draw the next block of sojourns of the modulating chain."""
        rng = self._rng
        b = self._block
        states = np.empty(b, dtype=np.int64)
        states[0] = self._state
        if self._uniform_jumps:
            steps = rng.integers(1, self._m, size=b - 1)
            states[1:] = (self._state + np.cumsum(steps)) % self._m
        else:
            u = rng.random(b - 1)
            cum = self._cum_jump
            s = self._state
            for k in range(b - 1):
                s = bisect.bisect_right(cum[s], u[k])
                states[k + 1] = s
        durs = rng.standard_exponential(b) / self._leave[states]
        starts = self._t_next + np.concatenate(([0.0], np.cumsum(durs[:-1])))
        self._t_next = float(starts[-1] + durs[-1])
        # the state after the block: its first sojourn starts the next block
        if self._uniform_jumps:
            self._state = int((states[-1] + rng.integers(1, self._m)) % self._m)
        else:
            self._state = bisect.bisect_right(self._cum_jump[int(states[-1])], rng.random())
        self._starts, self._durs, self._seg_rates = starts, durs, self._rates[states]
        self._pos = 0
        self._used = 0.0

    def _segments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Take segments whose expected arrivals add up to the chunk size.

        :return: arrays of segment starts, lengths and rates.
        """
        seg_s: list[np.ndarray] = []
        seg_l: list[np.ndarray] = []
        seg_r: list[np.ndarray] = []
        need = float(self._n)
        while need > 0:
            if self._pos >= self._starts.size:
                self._draw_block()
            p = self._pos
            starts = self._starts[p:].copy()
            lens = self._durs[p:].copy()
            starts[0] += self._used
            lens[0] -= self._used
            rates = self._seg_rates[p:]
            cum = np.cumsum(rates * lens)
            k = int(np.searchsorted(cum, need, "left"))  # first segment that reaches `need`
            if k >= cum.size:  # the whole rest of the block fits
                seg_s.append(starts)
                seg_l.append(lens)
                seg_r.append(rates)
                need -= float(cum[-1])
                self._pos = self._starts.size
                continue
            before = float(cum[k - 1]) if k > 0 else 0.0
            w = (need - before) / rates[k]  # rates[k] > 0 since cum rises at k
            w = min(w, float(lens[k]))
            seg_s.append(np.append(starts[:k], starts[k]))
            seg_l.append(np.append(lens[:k], w))
            seg_r.append(rates[: k + 1])
            if w >= lens[k]:
                self._pos = p + k + 1
                self._used = 0.0
            else:
                self._pos = p + k
                self._used = (self._used if k == 0 else 0.0) + w
            need = 0.0
        return np.concatenate(seg_s), np.concatenate(seg_l), np.concatenate(seg_r)

    def next_chunk(self) -> ArrivalChunk:
        """Return the next chunk (about ``chunk_size`` arrivals, never empty)."""
        rng = self._rng
        while True:
            starts, lens, rates = self._segments()
            counts = rng.poisson(rates * lens)
            total = int(counts.sum())
            if total > 0:
                break
        rep = np.repeat(np.arange(starts.size), counts)
        times = np.sort(starts[rep] + lens[rep] * rng.random(total))
        times = _strictly_increasing(times, self._t)
        self._t = float(times[-1])
        return ArrivalChunk(times)


class _TraceStream(ArrivalStream):
    """Replay of a trace: looped, rescaled, optionally from a random offset."""

    def __init__(self, wl: Trace, rng: np.random.Generator, chunk_size: int) -> None:
        """:param wl: the trace workload. :param rng: generator. :param chunk_size: chunk length."""
        data = wl._data()
        self._t = data.times
        self._prompt = data.prompt_tokens
        self._output = data.output_tokens
        self._nrec = data.times.size
        self._period = data.period_s
        self._scale = wl._scale()
        self._n = chunk_size
        if wl.random_offset:
            self._offset = float(rng.random()) * self._period
            self._next = int(np.searchsorted(self._t, self._offset, "left"))
        else:
            self._offset = 0.0
            self._next = 0
        self._end = self._next + self._nrec if not wl.loop else None

    def next_chunk(self) -> ArrivalChunk:
        """Return the next ``chunk_size`` records (empty once a non-looping trace ended)."""
        stop = self._next + self._n
        if self._end is not None:
            stop = min(stop, self._end)
        if stop <= self._next:
            self.exhausted = True
            empty = np.empty(0, dtype=np.int64)
            return ArrivalChunk(
                np.empty(0, dtype=np.float64),
                None if self._prompt is None else empty,
                None if self._output is None else empty.copy(),
            )
        j = np.arange(self._next, stop, dtype=np.int64)
        loops, i = np.divmod(j, self._nrec)
        times = (self._t[i] + loops * self._period - self._offset) / self._scale
        self._next = stop
        if self._end is not None and stop >= self._end:
            self.exhausted = True
        return ArrivalChunk(
            times,
            None if self._prompt is None else self._prompt[i],
            None if self._output is None else self._output[i],
        )


# ----------------------------------------------------------------------------------
# Workloads
# ----------------------------------------------------------------------------------


class Workload(ABC):
    """Base class of all workload configurations (frozen dataclasses)."""

    #: The ``kind`` string used by :func:`make_workload` and :meth:`to_dict`.
    kind: ClassVar[str]

    @property
    @abstractmethod
    def mean_rate_per_s(self) -> float:
        """Long-run mean arrival rate (requests per second)."""

    @property
    @abstractmethod
    def arrival_cv(self) -> float | None:
        """Theoretical coefficient of variation of the inter-arrival times, None if unknown."""

    @property
    def total_arrivals(self) -> int | None:
        """Number of arrivals of a finite stream (non-looping trace); None if infinite."""
        return None

    @abstractmethod
    def with_mean_rate(self, rate_per_s: float) -> Workload:
        """Return a copy rescaled to a new mean arrival rate.

        :param rate_per_s: the new mean rate (> 0).
        :return: a workload of the same kind and shape with ``mean_rate_per_s == rate_per_s``.
        """

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """Return a plain-Python dict that :func:`make_workload` turns back into this workload."""

    @abstractmethod
    def stream(
        self, rng: np.random.Generator, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> ArrivalStream:
        """Start an arrival stream.

        :param rng: the only source of randomness (the env's arrivals child stream).
        :param chunk_size: target number of arrivals per chunk.
        :return: a fresh :class:`ArrivalStream` starting at time 0.
        """

    def _check_stream_args(self, rng: Any, chunk_size: Any) -> int:
        """Validate :meth:`stream` arguments.

        :param rng: should be a ``numpy.random.Generator``.
        :param chunk_size: should be a positive int.
        :return: ``int(chunk_size)``.
        :raises ValueError: on a bad argument.
        """
        if not isinstance(rng, np.random.Generator):
            raise ValueError(
                f"{type(self).__name__}.stream: rng={rng!r} is not a numpy.random.Generator"
            )
        if (
            not isinstance(chunk_size, (int, np.integer))
            or isinstance(chunk_size, bool)
            or chunk_size < 1
        ):
            raise ValueError(
                f"{type(self).__name__}.stream: chunk_size={chunk_size!r} is invalid; expected an int >= 1"
            )
        return int(chunk_size)


@dataclass(frozen=True)
class Poisson(Workload):
    """Poisson arrivals (exponential inter-arrival times, CV 1).

    :param rate_per_s: arrival rate in requests per second (> 0).
    """

    kind: ClassVar[str] = "poisson"
    rate_per_s: float

    def __post_init__(self) -> None:
        """Validate and normalize the fields."""
        object.__setattr__(self, "rate_per_s", _positive(self.rate_per_s, "rate_per_s", "Poisson"))

    @property
    def mean_rate_per_s(self) -> float:
        """The arrival rate."""
        return self.rate_per_s

    @property
    def arrival_cv(self) -> float:
        """1.0 (exponential inter-arrival times)."""
        return 1.0

    def with_mean_rate(self, rate_per_s: float) -> Poisson:
        """Return a Poisson workload with the given rate.

        :param rate_per_s: the new rate (> 0).
        :return: the rescaled workload.
        """
        return Poisson(_positive(rate_per_s, "rate_per_s", "Poisson.with_mean_rate"))

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"kind": "poisson", "rate_per_s": ...}``."""
        return {"kind": self.kind, "rate_per_s": self.rate_per_s}

    def stream(
        self, rng: np.random.Generator, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> ArrivalStream:
        """Start a Poisson stream; the first arrival is one exponential gap after 0.

        :param rng: the only source of randomness.
        :param chunk_size: arrivals per chunk.
        :return: the stream.
        """
        n = self._check_stream_args(rng, chunk_size)
        return _PoissonStream(self.rate_per_s, rng, n)


@dataclass(frozen=True)
class Gamma(Workload):
    """Renewal arrivals with gamma inter-arrival times.

    The gaps have mean ``1 / rate_per_s`` and coefficient of variation ``cv`` (gamma
    shape ``1 / cv**2``); ``cv = 1`` is Poisson, ``cv > 1`` is bursty, ``cv < 1`` is
    more regular.

    :param rate_per_s: mean arrival rate in requests per second (> 0).
    :param cv: coefficient of variation of the inter-arrival times (> 0).
    """

    kind: ClassVar[str] = "gamma"
    rate_per_s: float
    cv: float

    def __post_init__(self) -> None:
        """Validate and normalize the fields."""
        object.__setattr__(self, "rate_per_s", _positive(self.rate_per_s, "rate_per_s", "Gamma"))
        object.__setattr__(self, "cv", _positive(self.cv, "cv", "Gamma"))

    @property
    def mean_rate_per_s(self) -> float:
        """The mean arrival rate."""
        return self.rate_per_s

    @property
    def arrival_cv(self) -> float:
        """The configured ``cv``."""
        return self.cv

    def with_mean_rate(self, rate_per_s: float) -> Gamma:
        """Return a copy with the given mean rate and the same CV.

        :param rate_per_s: the new mean rate (> 0).
        :return: the rescaled workload.
        """
        return Gamma(_positive(rate_per_s, "rate_per_s", "Gamma.with_mean_rate"), self.cv)

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"kind": "gamma", "rate_per_s": ..., "cv": ...}``."""
        return {"kind": self.kind, "rate_per_s": self.rate_per_s, "cv": self.cv}

    def stream(
        self, rng: np.random.Generator, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> ArrivalStream:
        """Start a gamma renewal stream; the first arrival is one gap after 0.

        :param rng: the only source of randomness.
        :param chunk_size: arrivals per chunk.
        :return: the stream.
        """
        n = self._check_stream_args(rng, chunk_size)
        shape = 1.0 / self.cv**2
        return _GammaStream(shape, 1.0 / (self.rate_per_s * shape), rng, n)


@dataclass(frozen=True)
class MMPP(Workload):
    """Markov-modulated Poisson process.

    A continuous-time Markov chain over ``len(rates_per_s) >= 2`` states modulates the
    arrival rate: in state ``i`` requests arrive as a Poisson process of rate
    ``rates_per_s[i]`` (0 allowed, e.g. for ON/OFF traffic, but not all 0).

    :param rates_per_s: arrival rate per state (requests per second, >= 0).
    :param switch_rates_per_s: either a vector with one leaving rate per state (> 0; the
        chain then jumps to one of the other states uniformly at random), or a square
        matrix of transition rates ``[i][j]`` from state i to state j (off-diagonal
        entries >= 0; the diagonal is ignored when 0 or equal to minus the row's
        off-diagonal sum, as in a generator). The chain must be irreducible.
    :param initial_state: the state at time 0; None (default) draws it from the
        stationary distribution, which makes the arrival process stationary.
    """

    kind: ClassVar[str] = "mmpp"
    rates_per_s: tuple[float, ...]
    switch_rates_per_s: tuple[float, ...] | tuple[tuple[float, ...], ...]
    initial_state: int | None = None
    _q: np.ndarray = field(init=False, repr=False, compare=False, hash=False)
    _pi: np.ndarray = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        """Validate the fields, normalize them to tuples of floats, precompute the chain."""
        rates = self.rates_per_s
        if isinstance(rates, (str, bytes)) or not isinstance(rates, (Sequence, np.ndarray)):
            raise ValueError(
                f"MMPP: rates_per_s={rates!r} is invalid; expected a list of >= 2 rates (numbers >= 0)"
            )
        rates_t = tuple(_nonnegative(r, f"rates_per_s[{i}]", "MMPP") for i, r in enumerate(rates))
        m = len(rates_t)
        if m < 2:
            raise ValueError(
                f"MMPP: rates_per_s={list(rates_t)!r} has {m} state(s); expected >= 2 "
                "(use Poisson for a single rate)"
            )
        if not any(r > 0 for r in rates_t):
            raise ValueError(
                f"MMPP: rates_per_s={list(rates_t)!r} are all 0; at least one must be > 0"
            )
        sw = self.switch_rates_per_s
        if isinstance(sw, (str, bytes)) or not isinstance(sw, (Sequence, np.ndarray)):
            raise ValueError(
                f"MMPP: switch_rates_per_s={sw!r} is invalid; expected {m} leaving rates (> 0) "
                f"or a {m}x{m} matrix of transition rates"
            )
        rows = list(sw)
        is_matrix = len(rows) > 0 and all(
            isinstance(r, (Sequence, np.ndarray)) and not isinstance(r, (str, bytes)) for r in rows
        )
        q = np.zeros((m, m))
        if is_matrix:
            if len(rows) != m or any(len(r) != m for r in rows):
                raise ValueError(
                    f"MMPP: switch_rates_per_s={sw!r} is not a {m}x{m} matrix "
                    f"(one row and column per state of rates_per_s)"
                )
            sw_t: Any = tuple(
                tuple(float(_check_matrix_entry(v, i, j, sw)) for j, v in enumerate(r))
                for i, r in enumerate(rows)
            )
            for i in range(m):
                off = sum(sw_t[i][j] for j in range(m) if j != i)
                d = sw_t[i][i]
                if d != 0 and not math.isclose(d, -off, rel_tol=1e-9, abs_tol=1e-12):
                    raise ValueError(
                        f"MMPP: switch_rates_per_s[{i}][{i}]={d!r} is invalid; the diagonal "
                        f"must be 0 or minus the row's off-diagonal sum ({-off!r})"
                    )
                if off <= 0:
                    raise ValueError(
                        f"MMPP: switch_rates_per_s[{i}]={list(sw_t[i])!r} gives state {i} no way "
                        "out; every state needs a positive off-diagonal rate"
                    )
                for j in range(m):
                    if j != i:
                        q[i, j] = sw_t[i][j]
        else:
            if len(rows) != m:
                raise ValueError(
                    f"MMPP: switch_rates_per_s={sw!r} has {len(rows)} entries; expected {m} "
                    f"leaving rates (one per state of rates_per_s) or a {m}x{m} matrix"
                )
            sw_t = tuple(
                _positive(v, f"switch_rates_per_s[{i}]", "MMPP") for i, v in enumerate(rows)
            )
            for i in range(m):
                q[i, :] = sw_t[i] / (m - 1)
        np.fill_diagonal(q, 0.0)
        _check_irreducible(q, sw)
        np.fill_diagonal(q, -q.sum(axis=1))
        init = self.initial_state
        if init is not None:
            if (
                not isinstance(init, (int, np.integer))
                or isinstance(init, (bool, np.bool_))
                or not 0 <= int(init) < m
            ):
                raise ValueError(
                    f"MMPP: initial_state={init!r} is invalid; expected None or an int in 0..{m - 1}"
                )
            init = int(init)
        a = np.vstack((q.T, np.ones((1, m))))
        b = np.zeros(m + 1)
        b[-1] = 1.0
        pi = np.linalg.lstsq(a, b, rcond=None)[0]
        pi = np.clip(pi, 0.0, None)
        pi /= pi.sum()
        q.setflags(write=False)
        pi.setflags(write=False)
        object.__setattr__(self, "rates_per_s", rates_t)
        object.__setattr__(self, "switch_rates_per_s", sw_t)
        object.__setattr__(self, "initial_state", init)
        object.__setattr__(self, "_q", q)
        object.__setattr__(self, "_pi", pi)

    @property
    def generator(self) -> np.ndarray:
        """The modulating chain's generator matrix Q (read-only; rows sum to 0)."""
        return self._q

    @property
    def stationary_distribution(self) -> np.ndarray:
        """The chain's stationary distribution pi (pi Q = 0, sum 1; read-only)."""
        return self._pi

    @property
    def mean_rate_per_s(self) -> float:
        """Mean rate sum_i pi_i * rates_per_s[i]."""
        return float(self._pi @ np.asarray(self.rates_per_s))

    @property
    def arrival_cv(self) -> float:
        """Exact CV of the stationary inter-arrival time.

        The gap after an arrival is phase-type: it starts in the state seen by the
        arrival (pi_i rate_i / mean rate) with sub-generator Q - diag(rates); its k-th
        moment is k! phi (diag(rates) - Q)^-k 1.
        """
        lam = np.asarray(self.rates_per_s)
        phi = self._pi * lam / float(self._pi @ lam)
        t = np.diag(lam) - self._q
        ones = np.ones(lam.size)
        x1 = np.linalg.solve(t, ones)
        x2 = np.linalg.solve(t, x1)
        m1 = float(phi @ x1)
        m2 = 2.0 * float(phi @ x2)
        return math.sqrt(max(m2 - m1 * m1, 0.0)) / m1

    def with_mean_rate(self, rate_per_s: float) -> MMPP:
        """Return a copy whose per-state rates are all scaled by one factor.

        Switching rates stay the same, so the burst pattern (in time) is kept.

        :param rate_per_s: the new mean rate (> 0).
        :return: the rescaled workload.
        """
        rate = _positive(rate_per_s, "rate_per_s", "MMPP.with_mean_rate")
        f = rate / self.mean_rate_per_s
        return dataclasses.replace(self, rates_per_s=tuple(r * f for r in self.rates_per_s))

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"kind": "mmpp", "rates_per_s": [...], "switch_rates_per_s": [...], ...}``."""
        sw = self.switch_rates_per_s
        sw_l: list[Any] = [list(r) if isinstance(r, tuple) else r for r in sw]
        return {
            "kind": self.kind,
            "rates_per_s": list(self.rates_per_s),
            "switch_rates_per_s": sw_l,
            "initial_state": self.initial_state,
        }

    def stream(
        self, rng: np.random.Generator, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> ArrivalStream:
        """Start an MMPP stream (exact sampling, see :class:`_MMPPStream`).

        :param rng: the only source of randomness (also draws the initial state if None).
        :param chunk_size: target arrivals per chunk (chunks vary around it).
        :return: the stream.
        """
        n = self._check_stream_args(rng, chunk_size)
        return _MMPPStream(self, rng, n)


def _check_matrix_entry(v: Any, i: int, j: int, sw: Any) -> float:
    """Validate one entry of an MMPP switch-rate matrix.

    :param v: the entry.
    :param i: row.
    :param j: column.
    :param sw: the whole matrix (for the message).
    :return: ``float(v)``.
    :raises ValueError: if ``v`` is not a finite number (>= 0 off the diagonal).
    """
    ok = is_real_number(v) and math.isfinite(float(v)) and (i == j or float(v) >= 0)
    if not ok:
        raise ValueError(
            f"MMPP: switch_rates_per_s[{i}][{j}]={v!r} is invalid; expected a finite number "
            ">= 0 (off-diagonal transition rate per second)"
        )
    return float(v)


def _check_irreducible(q: np.ndarray, sw: Any) -> None:
    """Raise unless every state of the chain with off-diagonal rates ``q`` reaches every other.

    :param q: matrix of off-diagonal rates (zero diagonal).
    :param sw: the user's switch rates (for the message).
    :raises ValueError: if the chain is reducible.
    """
    m = q.shape[0]
    reach = (q > 0) | np.eye(m, dtype=bool)
    for _ in range(m):
        reach = (reach.astype(np.int64) @ reach.astype(np.int64)) > 0
    if not reach.all():
        i, j = map(int, np.argwhere(~reach)[0])
        raise ValueError(
            f"MMPP: switch_rates_per_s={sw!r} is reducible: state {i} can never reach state {j}; "
            "every state must be reachable from every other"
        )


# ----------------------------------------------------------------------------------
# Trace loading
# ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TraceData:
    """Parsed trace: relative raw times (s) and tokens, all read-only.

    :param times: float64 seconds since the first record (non-decreasing).
    :param prompt_tokens: int64 or None.
    :param output_tokens: int64 or None.
    :param period_s: loop period in raw seconds (span + mean gap).
    :param cv: CV of the gaps over one loop period (including the seam gap).
    """

    times: np.ndarray
    prompt_tokens: np.ndarray | None
    output_tokens: np.ndarray | None
    period_s: float
    cv: float


def check_llm_tokens(prompt: np.ndarray, output: np.ndarray, where: str, columns: tuple[str, str]) -> None:
    """Refuse token counts an LLM request cannot have: a prompt or an output of 0 tokens.

    A request needs a prompt token to prefill and produces its first output token in the
    prefill, so both counts must be >= 1 (nothing is rounded up silently).

    :param prompt: prompt-token counts per row.
    :param output: output-token counts per row.
    :param where: the file, for the message.
    :param columns: the names of the prompt and output columns.
    :raises ValueError: naming the file, the column, the first bad row and its value.
    """
    for name, col in zip(columns, (prompt, output), strict=True):
        bad = np.flatnonzero(col < 1)
        if bad.size:
            k = int(bad[0])
            raise ValueError(
                f"{where}: column {name!r} data row {k + 1}: token count {int(col[k])} is "
                f"invalid for an LLM request: expected an integer >= 1 ({bad.size} such row(s))"
            )


_TZ_RE = re.compile(r"(?<=[T ]\d\d:\d\d)(?::\d\d(?:\.\d+)?)?(Z|[+-]\d\d:?\d\d)$")


def _parse_datetimes(values: list[str]) -> np.ndarray:
    """Parse ISO-like datetimes (space or 'T', up to 9 fractional digits, optional zone).

    :param values: the stripped strings.
    :return: int64 nanoseconds since the epoch (UTC when a zone is given).
    :raises ValueError: if a value does not parse (the caller locates it).
    """
    offsets = np.zeros(len(values), dtype=np.int64)
    cleaned = values
    if any(v.endswith("Z") or "+" in v or v.count("-") > 2 for v in values):
        cleaned = []
        for k, v in enumerate(values):
            mt = _TZ_RE.search(v)
            if mt is None:
                cleaned.append(v)
                continue
            zone = mt.group(1)
            cleaned.append(v[: mt.start(1)])
            if zone != "Z":
                hh, mm = int(zone[1:3]), int(zone[-2:])
                sign = 1 if zone[0] == "+" else -1
                offsets[k] = sign * (hh * 3600 + mm * 60) * 1_000_000_000
    arr = np.array(cleaned, dtype="datetime64[ns]")
    if np.isnat(arr).any():
        raise ValueError("NaT")
    return arr.astype(np.int64) - offsets


def _parse_float(v: str) -> float | None:
    """Return ``float(v)`` or None when it does not parse."""
    try:
        return float(v)
    except ValueError:
        return None


def _parse_dt(v: str) -> int | None:
    """Return nanoseconds of one datetime string, or None when it does not parse."""
    try:
        return int(_parse_datetimes([v])[0])
    except ValueError:
        return None


@functools.lru_cache(maxsize=16)
def _load_trace(
    path: str,
    mtime_ns: int,
    size: int,
    ts_col: str,
    prompt_col: str | None,
    output_col: str | None,
) -> _TraceData:
    """Read and validate a trace CSV (cached on path, modification time and columns).

    Leading lines starting with ``#`` and blank lines are skipped; the first other line
    is the header.

    :param path: file path.
    :param mtime_ns: modification time (cache key only).
    :param size: file size (cache key only).
    :param ts_col: timestamp column.
    :param prompt_col: prompt-token column or None.
    :param output_col: output-token column or None.
    :return: the parsed trace.
    :raises ValueError: on any problem, naming the file, column, row and value.
    """
    where = f"Trace {path!r}"
    header: list[str] | None = None
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            for rec in reader:
                if header is None:
                    if not rec or not "".join(rec).strip() or rec[0].lstrip().startswith("#"):
                        continue
                    header = [h.strip() for h in rec]
                    continue
                if not rec or (len(rec) == 1 and not rec[0].strip()):
                    continue
                rows.append(rec)
                lines.append(reader.line_num)
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{where}: not a UTF-8 text CSV file (byte {e.start}: {e.reason}); expected a CSV "
            "with a header line"
        ) from None
    except csv.Error as e:
        raise ValueError(f"{where}: not a readable CSV file: {e}") from None
    except OSError as e:
        raise ValueError(f"{where}: cannot read it: {e.strerror or e}") from None
    if header is None:
        raise ValueError(f"{where}: the file is empty (no header, no rows)")
    if ts_col not in header:
        raise ValueError(
            f"{where}: timestamp column timestamp_column={ts_col!r} not found; "
            f"columns found: {header!r}"
        )
    if not rows:
        raise ValueError(f"{where}: the file has a header {header!r} but no data rows")

    def col(name: str) -> list[str]:
        c = header.index(name)
        return [r[c].strip() if c < len(r) else "" for r in rows]

    def loc(k: int) -> str:
        return f"row {k + 1} (line {lines[k]})"

    raw = col(ts_col)
    first = raw[0]
    if _parse_float(first) is not None:
        try:
            secs = np.array(raw, dtype=np.float64)
            bad = ~np.isfinite(secs)
        except ValueError:
            secs = np.zeros(len(raw))
            bad = np.array([_parse_float(v) is None for v in raw])
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(
                f"{where}: column {ts_col!r} {loc(k)}: cannot parse timestamp {raw[k]!r} "
                f"(this column holds seconds, from row 1 {first!r}; expected a finite number)"
            )
        rel = secs - secs[0]
        fmt = "seconds"
    else:
        try:
            ns = _parse_datetimes(raw)
        except ValueError:
            ns = np.zeros(len(raw), dtype=np.int64)
            for k, v in enumerate(raw):
                if _parse_dt(v) is None:
                    raise ValueError(
                        f"{where}: column {ts_col!r} {loc(k)}: cannot parse timestamp {v!r}; "
                        "expected a datetime like '2023-11-16 18:15:46.6805900' (ISO 8601, "
                        "space or 'T', up to 9 fractional digits) or plain seconds"
                    ) from None
        rel = (ns - ns[0]).astype(np.float64) / 1e9
        fmt = "datetimes"
    dec = np.flatnonzero(np.diff(rel) < 0)
    if dec.size:
        k = int(dec[0]) + 1
        raise ValueError(
            f"{where}: column {ts_col!r} {loc(k)}: timestamp {raw[k]!r} is earlier than the "
            f"previous row's {raw[k - 1]!r}; timestamps must be non-decreasing"
        )
    n = rel.size
    span = float(rel[-1])
    if n < 2 or span <= 0:
        raise ValueError(
            f"{where}: column {ts_col!r}: the {n} timestamp(s) ({fmt}) span {span!r} s; a trace "
            "needs at least two distinct timestamps to define a rate"
        )

    def tokens(name: str | None) -> np.ndarray | None:
        if name is None or name not in header:
            return None
        vals = col(name)
        try:
            arr = np.array(vals, dtype=np.float64)
        except ValueError:
            arr = np.array(
                [_parse_float(v) if _parse_float(v) is not None else np.nan for v in vals]
            )
        bad = ~np.isfinite(arr) | (arr < 0) | (arr != np.round(arr))
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(
                f"{where}: column {name!r} {loc(k)}: token count {vals[k]!r} is invalid; "
                "expected an integer >= 0"
            )
        out = arr.astype(np.int64)
        out.setflags(write=False)
        return out

    prompt = tokens(prompt_col)
    output = tokens(output_col)
    period = span * n / (n - 1)
    gaps = np.append(np.diff(rel), period / n)
    cv = float(np.std(gaps) / np.mean(gaps))
    rel.setflags(write=False)
    return _TraceData(rel, prompt, output, period, cv)


def _dataset_path(dataset: Any, path: Any, owner: str) -> str | None:
    """The local file of ``dataset`` (None when no dataset is given); never downloads.

    ``path`` may only be None or that same file (as :func:`dataclasses.replace` passes it).

    :raises ValueError: for an unknown dataset, one not fetched (naming the command that
        fetches it), or a ``path`` given together with the dataset.
    """
    if dataset is None:
        return None
    from . import data

    if not isinstance(dataset, str):
        raise ValueError(f"{owner}: dataset={dataset!r} is invalid; expected a dataset name "
                         f"({', '.join(data.DATASETS)})")
    file = str(data.path(dataset))
    if path is not None and (not isinstance(path, (str, os.PathLike)) or os.fspath(path) != file):
        raise ValueError(f"{owner}: give either path={path!r} or dataset={dataset!r}, not both")
    return file


@dataclass(frozen=True)
class Trace(Workload):
    """Replay of a CSV trace of request arrivals.

    The timestamp column holds absolute datetimes (``2023-11-16 18:15:46.6805900`` as
    in the Azure LLM inference trace, ISO 8601 with ``T``, up to 9 fractional digits,
    an optional ``Z``/``+hh:mm`` zone) or plain seconds (floats). Times are taken
    relative to the first record, so without ``random_offset`` the first arrival is at
    time 0. Equal timestamps are kept, in file order. Leading ``#`` comment lines are
    skipped. The file is read (and validated) when the workload is created, and cached.

    Looping: the replay repeats with period ``span + mean gap`` (``span`` = last - first
    timestamp, mean gap = ``span / (n - 1)``), so the looped traffic keeps the trace's
    mean rate ``n / period`` and no two arrivals meet at the seam.

    Give exactly one of ``path`` and ``dataset``. A dataset (``"azure-conv-2023"``; see
    :mod:`batch_env.data` and ``batch-env data list``) is a shipped excerpt or a file
    fetched before with ``batch-env data fetch NAME``: nothing is downloaded here, and a
    dataset that is not in the cache is a ValueError naming that command. ``path`` then
    holds the dataset's local file, and :meth:`to_dict` gives the dataset without it.

    :param path: CSV file path.
    :param timestamp_column: name of the timestamp column.
    :param prompt_tokens_column: prompt-token column; None, or a name not in the file,
        gives ``prompt_tokens=None`` in the chunks.
    :param output_tokens_column: output-token column; same rules.
    :param rate_scale: speed-up factor (> 0): times are divided by it (2 = twice the
        traffic).
    :param target_rate_per_s: if set (> 0), rescale times so the mean rate is this;
        mutually exclusive with ``rate_scale != 1``.
    :param random_offset: start at a uniformly random position in ``[0, period)`` (drawn
        from the stream's generator) and wrap around.
    :param loop: repeat the trace forever (default). With ``loop=False`` the stream
        replays each record exactly once (from the offset, wrapping once, if
        ``random_offset``) and then returns empty chunks: the env must end the episode
        by its horizon.
    :param dataset: a dataset name of :data:`batch_env.data.DATASETS`, instead of ``path``.
    """

    kind: ClassVar[str] = "trace"
    path: str | None = None
    timestamp_column: str = "TIMESTAMP"
    prompt_tokens_column: str | None = "ContextTokens"
    output_tokens_column: str | None = "GeneratedTokens"
    rate_scale: float = 1.0
    target_rate_per_s: float | None = None
    random_offset: bool = False
    loop: bool = True
    dataset: str | None = None

    def __post_init__(self) -> None:
        """Validate the fields and load the file (raising ValueError on any problem)."""
        p = _dataset_path(self.dataset, self.path, "Trace")
        if p is None and self.path is None:
            raise ValueError(
                "Trace: give a CSV file (path=...) or a dataset name (dataset=...; "
                "see `batch-env data list`)"
            )
        p = self.path if p is None else p
        if not isinstance(p, (str, os.PathLike)) or not os.fspath(p):
            raise ValueError(f"Trace: path={p!r} is invalid; expected a CSV file path")
        path = os.fspath(p)
        if not isinstance(path, str):
            path = os.fsdecode(path)
        object.__setattr__(self, "path", path)
        for name in ("timestamp_column", "prompt_tokens_column", "output_tokens_column"):
            v = getattr(self, name)
            optional = name != "timestamp_column"
            if not (isinstance(v, str) and v) and not (optional and v is None):
                allowed = "a column name" + (" or None" if optional else "")
                raise ValueError(f"Trace: {name}={v!r} is invalid; expected {allowed}")
        object.__setattr__(self, "rate_scale", _positive(self.rate_scale, "rate_scale", "Trace"))
        if self.target_rate_per_s is not None:
            object.__setattr__(
                self,
                "target_rate_per_s",
                _positive(self.target_rate_per_s, "target_rate_per_s", "Trace"),
            )
            if self.rate_scale != 1.0:
                raise ValueError(
                    f"Trace: rate_scale={self.rate_scale!r} and target_rate_per_s="
                    f"{self.target_rate_per_s!r} are mutually exclusive; set one of them "
                    "(rate_scale=1 with a target)"
                )
        for name in ("random_offset", "loop"):
            v = getattr(self, name)
            if not isinstance(v, (bool, np.bool_)):
                raise ValueError(f"Trace: {name}={v!r} is invalid; expected True or False")
            object.__setattr__(self, name, bool(v))
        if not os.path.isfile(path):
            raise ValueError(f"Trace: path={path!r}: file not found")
        self._data()

    def _data(self) -> _TraceData:
        """Return the parsed (cached) trace data.

        :raises ValueError: if the file has disappeared since the workload was created.
        """
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise ValueError(f"Trace: path={self.path!r}: cannot read the file ({exc})") from None
        return _load_trace(
            os.path.abspath(self.path),
            st.st_mtime_ns,
            st.st_size,
            self.timestamp_column,
            self.prompt_tokens_column,
            self.output_tokens_column,
        )

    def _scale(self) -> float:
        """Return the factor raw times are divided by."""
        if self.target_rate_per_s is None:
            return self.rate_scale
        d = self._data()
        return self.target_rate_per_s / (d.times.size / d.period_s)

    @property
    def n_records(self) -> int:
        """Number of records (rows) in the trace."""
        return int(self._data().times.size)

    @property
    def period_s(self) -> float:
        """Loop period after rescaling: (span + mean gap) / scale."""
        return self._data().period_s / self._scale()

    @property
    def mean_rate_per_s(self) -> float:
        """Mean rate over one loop period after rescaling: ``n_records / period_s``."""
        return self.n_records / self.period_s

    @property
    def arrival_cv(self) -> float:
        """CV of the replayed gaps over one loop period (the seam gap included)."""
        return self._data().cv

    @property
    def total_arrivals(self) -> int | None:
        """``n_records`` when ``loop=False``, else None (infinite)."""
        return None if self.loop else self.n_records

    def with_mean_rate(self, rate_per_s: float) -> Trace:
        """Return a copy with ``target_rate_per_s = rate_per_s`` (and ``rate_scale = 1``).

        :param rate_per_s: the new mean rate (> 0).
        :return: the rescaled workload.
        """
        rate = _positive(rate_per_s, "rate_per_s", "Trace.with_mean_rate")
        return dataclasses.replace(self, rate_scale=1.0, target_rate_per_s=rate)

    def to_dict(self) -> dict[str, Any]:
        """Return all fields with ``"kind": "trace"`` (``path`` None when ``dataset`` is set)."""
        d: dict[str, Any] = {"kind": self.kind}
        d.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        if self.dataset is not None:
            d["path"] = None
        return d

    def stream(
        self, rng: np.random.Generator, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> ArrivalStream:
        """Start a replay.

        :param rng: source of the random offset (unused without ``random_offset``).
        :param chunk_size: records per chunk.
        :return: the stream (finite when ``loop=False``).
        """
        n = self._check_stream_args(rng, chunk_size)
        return _TraceStream(self, rng, n)


# ----------------------------------------------------------------------------------
# Factory
# ----------------------------------------------------------------------------------

#: Workload classes by ``kind``.
WORKLOAD_KINDS: dict[str, type[Workload]] = {
    "poisson": Poisson,
    "mmpp": MMPP,
    "gamma": Gamma,
    "trace": Trace,
}

# which field "load" replaces (None: "load" rescales the shape given by other fields)
_RATE_FIELD: dict[str, str | None] = {
    "poisson": "rate_per_s",
    "gamma": "rate_per_s",
    "mmpp": None,
    "trace": "target_rate_per_s",
}


def make_workload(
    spec: Workload | Mapping[str, Any], max_throughput_rps: float | None = None
) -> Workload:
    """Build a workload from a spec.

    ``spec`` is a :class:`Workload` (returned as is) or a dict with a ``"kind"`` in
    ``poisson``, ``mmpp``, ``gamma``, ``trace`` and that kind's fields, e.g.
    ``{"kind": "gamma", "rate_per_s": 300, "cv": 2.0}``. Instead of a rate the dict may
    give ``"load": rho`` (> 0): the workload is then rescaled with
    :meth:`Workload.with_mean_rate` to ``rho * max_throughput_rps``. ``load`` replaces
    ``rate_per_s`` for poisson and gamma, and ``target_rate_per_s`` (and ``rate_scale``)
    for a trace; for mmpp ``rates_per_s`` is still required and gives the shape.

    :param spec: a workload or a dict spec.
    :param max_throughput_rps: the reference throughput (requests per second) that
        ``load`` is relative to; required when the spec has ``load``.
    :return: the workload.
    :raises ValueError: on an unknown kind or field, a missing field, a wrong type, a
        NaN or non-positive rate, ``load`` together with a rate, or ``load`` without
        ``max_throughput_rps``; the message names the field, the value and what is allowed.
    """
    if isinstance(spec, Workload):
        return spec
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"make_workload: spec={spec!r} is invalid; expected a Workload or a dict with a "
            f"'kind' in {sorted(WORKLOAD_KINDS)}"
        )
    if "kind" not in spec:
        raise ValueError(
            f"make_workload: spec {dict(spec)!r} has no 'kind'; expected one of {sorted(WORKLOAD_KINDS)}"
        )
    kind = spec["kind"]
    if not isinstance(kind, str) or kind.lower() not in WORKLOAD_KINDS:
        raise ValueError(
            f"make_workload: kind={kind!r} is unknown; expected one of {sorted(WORKLOAD_KINDS)}"
        )
    kind = kind.lower()
    cls = WORKLOAD_KINDS[kind]
    flds = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in flds]
    allowed = ["kind", *names, "load"]
    for key in spec:
        if key not in allowed:
            raise ValueError(
                f"make_workload: field {key!r} (value {spec[key]!r}) is not a field of kind "
                f"{kind!r}; allowed fields: {allowed}"
            )
    kwargs = {k: v for k, v in spec.items() if k not in ("kind", "load")}
    load = spec.get("load")
    has_load = "load" in spec
    rate_field = _RATE_FIELD[kind]
    if has_load:
        load = _positive(load, "load", f"make_workload({kind})")
        if max_throughput_rps is None:
            raise ValueError(
                f"make_workload({kind}): load={load!r} needs max_throughput_rps (the reference "
                "throughput the load is relative to); pass it or give a rate instead"
            )
        mt = _positive(max_throughput_rps, "max_throughput_rps", f"make_workload({kind})")
        if rate_field is not None and kwargs.get(rate_field) is not None:
            raise ValueError(
                f"make_workload({kind}): give either load={load!r} or "
                f"{rate_field}={kwargs[rate_field]!r}, not both"
            )
        if kind == "trace" and kwargs.get("rate_scale", 1.0) != 1.0:
            raise ValueError(
                f"make_workload(trace): give either load={load!r} or "
                f"rate_scale={kwargs['rate_scale']!r}, not both"
            )
        if rate_field == "rate_per_s":
            kwargs[rate_field] = 1.0
    for f in flds:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in kwargs:
            extra = " (or 'load' with max_throughput_rps)" if f.name == rate_field else ""
            raise ValueError(
                f"make_workload({kind}): missing field {f.name!r}{extra}; fields: {names}"
            )
    wl = cls(**kwargs)
    if has_load:
        wl = wl.with_mean_rate(load * mt)
    return wl


# ----------------------------------------------------------------------------------
# Request lengths (LLMBatching-v0)
# ----------------------------------------------------------------------------------

def _lognormal_params(mean: float, cv: float) -> tuple[float, float]:
    """``(mu, sigma)`` of the lognormal with this mean and coefficient of variation."""
    s2 = math.log1p(cv * cv)
    return math.log(mean) - s2 / 2.0, math.sqrt(s2)


#: Kinds of :class:`RequestLengths`.
LENGTH_KINDS = ("lognormal", "fixed", "empirical", "trace")


@dataclass(frozen=True)
class RequestLengths:
    """Prompt and output token counts of LLM requests (docs/design.md: LLMBatching-v0).

    Drawn from the env's request-size stream (the third child stream), one pair per
    arrival, so two policies on the same seed see the same requests.

    * ``lognormal`` (default): independent lognormals with the given means and
      coefficients of variation, rounded to integers >= 1. The defaults are the
      Azure LLM conversation trace's (2023, dataset ``azure-conv-2023``):
      prompt mean 1155 tokens, CV 0.96; output mean 211 tokens, CV 0.77.
    * ``fixed``: every request has ``prompt_tokens`` and ``output_tokens``.
    * ``empirical``: pairs (prompt, output) sampled uniformly with replacement from the
      rows of an Azure-format CSV (``path``, or a named ``dataset`` of
      :mod:`batch_env.data`; columns ``ContextTokens``, ``GeneratedTokens``), keeping their
      joint distribution.
    * ``trace``: the lengths come with the arrivals (a ``trace`` workload with token
      columns), row by row.

    :param kind: one of :data:`LENGTH_KINDS`.
    :param prompt_tokens: mean (lognormal) or value (fixed) of the prompt length.
    :param output_tokens: mean (lognormal) or value (fixed) of the output length.
    :param prompt_cv: lognormal coefficient of variation of the prompt length.
    :param output_cv: lognormal coefficient of variation of the output length.
    :param path: CSV file for ``empirical``.
    :param dataset: instead of ``path``, a dataset name (``azure-conv-2023``; a shipped
        excerpt or a file fetched with ``batch-env data fetch NAME``, never downloaded here).
    """

    kind: str = "lognormal"
    prompt_tokens: float = 1155.0
    output_tokens: float = 211.0
    prompt_cv: float = 0.96
    output_cv: float = 0.77
    path: str | None = None
    dataset: str | None = None

    def __post_init__(self) -> None:
        """Validate the fields (ValueError naming the field, value and what is allowed)."""
        if self.kind not in LENGTH_KINDS:
            raise ValueError(f"lengths.kind={self.kind!r} is invalid: allowed values are {LENGTH_KINDS}")
        for name in ("prompt_tokens", "output_tokens"):
            v = _positive(getattr(self, name), name, "lengths")
            if v < 1:
                raise ValueError(f"lengths.{name}={v!r} is out of range: expected a number >= 1")
            if self.kind == "fixed" and v != int(v):
                raise ValueError(f"lengths.{name}={v!r} is invalid: fixed lengths are integers")
            object.__setattr__(self, name, v)
        for name in ("prompt_cv", "output_cv"):
            object.__setattr__(self, name, _nonnegative(getattr(self, name), name, "lengths"))
        if self.dataset is not None and self.kind != "empirical":
            raise ValueError(f"lengths.dataset={self.dataset!r} is only allowed with kind 'empirical'")
        if self.kind == "empirical":
            file = _dataset_path(self.dataset, self.path, "lengths")
            if file is not None:
                object.__setattr__(self, "path", file)
            if not isinstance(self.path, (str, os.PathLike)) or not os.fspath(self.path):
                raise ValueError(f"lengths.path={self.path!r} is invalid: 'empirical' needs a CSV path "
                                 "or a dataset name (dataset=...)")
            if not os.path.isfile(self.path):
                raise ValueError(f"lengths.path={self.path!r}: file not found")
            check_llm_tokens(
                *self._table(), f"lengths.path={self.path!r}", ("ContextTokens", "GeneratedTokens")
            )
        elif self.path is not None:
            raise ValueError(f"lengths.path={self.path!r} is only allowed with kind 'empirical'")

    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        """The (prompt, output) columns of the empirical CSV (cached, validated)."""
        st = os.stat(self.path)
        data = _load_trace(
            os.path.abspath(self.path), st.st_mtime_ns, st.st_size,
            "TIMESTAMP", "ContextTokens", "GeneratedTokens",
        )
        if data.prompt_tokens is None or data.output_tokens is None:
            raise ValueError(
                f"lengths.path={self.path!r}: needs columns 'ContextTokens' and 'GeneratedTokens'"
            )
        return data.prompt_tokens, data.output_tokens

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` (prompt, output) pairs as int64 arrays (``trace``: not drawn here).

        :param rng: the request-size generator.
        :param n: number of requests.
        """
        if self.kind == "fixed":
            return (np.full(n, int(self.prompt_tokens), np.int64), np.full(n, int(self.output_tokens), np.int64))
        if self.kind == "empirical":
            p, o = self._table()
            idx = rng.integers(0, p.size, n)
            return p[idx].astype(np.int64), o[idx].astype(np.int64)
        if self.kind == "trace":
            raise ValueError("lengths.kind='trace' takes the lengths from a trace workload's token columns")
        out = []
        for mean, cv in ((self.prompt_tokens, self.prompt_cv), (self.output_tokens, self.output_cv)):
            if cv == 0.0:
                out.append(np.full(n, max(1, round(mean)), np.int64))
                continue
            x = rng.lognormal(*_lognormal_params(mean, cv), n)
            out.append(np.maximum(np.rint(x), 1).astype(np.int64))
        return out[0], out[1]

    def fit_fraction(self, max_prompt: int) -> tuple[float, str]:
        """The fraction of drawn prompts of at most ``max_prompt`` tokens, and what was drawn.

        Exact for ``fixed`` and ``empirical``; for ``lognormal`` the fraction of draws that
        round to at most ``max_prompt`` (the lognormal CDF at ``max_prompt + 0.5``).

        :param max_prompt: the longest prompt that fits (``max_model_len - 1``).
        :returns: ``(fraction, description of the prompt lengths for messages)``.
        """
        if self.kind == "fixed":
            return float(self.prompt_tokens <= max_prompt), f"lengths.prompt_tokens={int(self.prompt_tokens)}"
        if self.kind == "empirical":
            p, _ = self._table()
            return (
                float(np.count_nonzero(p <= max_prompt)) / p.size,
                f"the shortest prompt of lengths.path={self.path!r} has {int(p.min())} tokens",
            )
        if self.kind == "trace":
            raise ValueError("lengths.kind='trace' takes the lengths from a trace workload's token columns")
        mean, cv = self.prompt_tokens, self.prompt_cv
        what = f"the prompts are lognormal with mean lengths.prompt_tokens={mean:g} and CV {cv:g}"
        mu, sigma = _lognormal_params(mean, cv)
        if sigma == 0.0:  # no spread (a CV of 0, or so small that its square underflows)
            return float(max(1, round(mean)) <= max_prompt), what
        z = (math.log(max_prompt + 0.5) - mu) / sigma
        return 0.5 * math.erfc(-z / math.sqrt(2.0)), what

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (``make_lengths`` round-trips it; ``path`` None when ``dataset`` is set)."""
        d = dataclasses.asdict(self)
        if self.dataset is not None:
            d["path"] = None
        return d


def make_lengths(spec: RequestLengths | Mapping[str, Any] | None) -> RequestLengths:
    """Build :class:`RequestLengths` from itself, a dict of its fields, or ``None`` (defaults).

    :raises ValueError: on an unknown field or an invalid value, naming it.
    """
    if spec is None:
        return RequestLengths()
    if isinstance(spec, RequestLengths):
        return spec
    if not isinstance(spec, Mapping):
        raise ValueError(f"lengths={spec!r} is invalid: expected a dict with a 'kind' in {LENGTH_KINDS}")
    names = [f.name for f in dataclasses.fields(RequestLengths)]
    unknown = sorted(set(spec) - set(names))
    if unknown:
        raise ValueError(f"lengths has unknown field(s) {unknown}: allowed fields are {names}")
    return RequestLengths(**spec)
