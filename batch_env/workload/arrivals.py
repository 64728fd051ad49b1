"""Arrival processes: streams of arrival times and the synthetic workloads.

A *workload* is a frozen, validated configuration object that describes how inference
requests arrive. The synthetic kinds live here:

- :class:`Poisson`: exponential inter-arrival times (CV 1);
- :class:`MMPP`: a Markov-modulated Poisson process (bursty; the arrival rate follows a
  continuous-time Markov chain over two or more states);
- :class:`Gamma`: a renewal process with gamma inter-arrival times of a chosen
  coefficient of variation (the "burstiness" knob of vLLM's benchmarks);

and :class:`~batch_env.workload.traces.Trace` (a CSV replay) in :mod:`.traces`.

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
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..checks import is_real_number, nonnegative, positive

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "ArrivalChunk",
    "ArrivalStream",
    "Workload",
    "Poisson",
    "MMPP",
    "Gamma",
]

#: Target number of arrivals per chunk returned by :meth:`ArrivalStream.next_chunk`.
DEFAULT_CHUNK_SIZE = 4096


def _strictly_increasing(times: np.ndarray, prev: float) -> np.ndarray:
    """Nudge non-decreasing, non-negative times by whole ulps so they strictly increase.

    Float64 sums can round tiny gaps (e.g. gamma inter-arrivals with a large CV) to zero;
    this moves each tied time up by the fewest ulps that make the sequence strictly
    increasing after ``prev``. Non-negative float64 values order like their bit patterns,
    so the fix is a vectorized running maximum on the integer view.

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
    :param source: int64 index of the part each arrival came from, for a superposition of
        workloads (:class:`batch_env.workload.superposition.Superposition`); else None.
    :param prefix: per arrival, the tuple of its prompt's block hashes (an object array;
        ``None`` entries: an arrival without them), or None when the workload carries no
        prefix information (:class:`batch_env.workload.Trace`).
    """

    times: np.ndarray
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None
    source: np.ndarray | None = None
    prefix: np.ndarray | None = None

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

    def phase_at(self, t: float) -> int:
        """The modulating chain's state at time ``t``: only MMPP streams have one.

        :raises ValueError: here (the stream has no phases).
        """
        raise ValueError(f"{type(self).__name__} has no phases: only MMPP arrivals do")

    def oracle(self, t: float) -> dict[str, Any]:
        """What the workload hides at time ``t`` (the MMPP phase, an episode's drawn load),
        for oracle policies and bounds; the env shows it only with ``oracle_info=True``.

        :raises ValueError: here (this stream hides nothing).
        """
        raise ValueError(f"{type(self).__name__} hides nothing: no oracle information")


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
        np.add.accumulate(gaps, out=gaps)  # (np.cumsum, without its wrapper: 1.6 µs less)
        self._acc = float(gaps[-1])
        draws += self._base
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
            self._state = int(
                min(int(np.searchsorted(np.cumsum(pi), rng.random(), "right")), m - 1)
            )
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
        # (sojourn starts, states) of the blocks drawn and not yet passed by phase_at
        self._phase_log: list[tuple[np.ndarray, np.ndarray]] = []

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
        self._phase_log.append((starts, states))
        self._pos = 0
        self._used = 0.0

    def phase_at(self, t: float) -> int:
        """The modulating chain's state at time ``t`` (seconds from the stream's start).

        Reads the path drawn so far and draws nothing, so asking changes no arrival. Times
        must not go back between calls (sojourns before the last one asked about are
        forgotten), and ``t`` must lie within the path drawn so far: an env asks at its
        epochs, and the arrivals it has buffered beyond an epoch came from later sojourns.

        :raises ValueError: for a ``t`` before the last one asked about or beyond the path.
        """
        log = self._phase_log
        while len(log) > 1 and log[1][0][0] <= t:
            log.pop(0)
        if not log or not log[0][0][0] <= t < self._t_next:
            raise ValueError(
                f"phase_at(t={t!r}): the drawn path covers "
                f"[{log[0][0][0] if log else 0.0!r}, {self._t_next!r}) (times must not go back)"
            )
        starts, states = log[0]
        return int(states[int(np.searchsorted(starts, t, "right")) - 1])

    def oracle(self, t: float) -> dict[str, Any]:
        """``{"phase": the chain's state at t}`` (see :meth:`phase_at`)."""
        return {"phase": self.phase_at(t)}

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


# ----------------------------------------------------------------------------------
# Workloads
# ----------------------------------------------------------------------------------


class Workload(ABC):
    """Base class of all workload configurations (frozen dataclasses)."""

    #: The ``kind`` string used by :func:`make_workload` and :meth:`to_dict`.
    kind: ClassVar[str]
    #: Whether its streams hide something an oracle may read (:meth:`ArrivalStream.oracle`).
    has_oracle: ClassVar[bool] = False

    if TYPE_CHECKING:  # every concrete workload is a dataclass (dataclasses.fields works on it)
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    @property
    def has_prefix(self) -> bool:
        """Whether the arrivals carry their prompts' block hashes (prefix information, for
        prefix caching): a trace with them, the ``sessions`` workload; here, no."""
        return False

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
        object.__setattr__(self, "rate_per_s", positive(self.rate_per_s, "rate_per_s", "Poisson"))

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
        return Poisson(positive(rate_per_s, "rate_per_s", "Poisson.with_mean_rate"))

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
        object.__setattr__(self, "rate_per_s", positive(self.rate_per_s, "rate_per_s", "Gamma"))
        object.__setattr__(self, "cv", positive(self.cv, "cv", "Gamma"))

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
        return Gamma(positive(rate_per_s, "rate_per_s", "Gamma.with_mean_rate"), self.cv)

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
    has_oracle: ClassVar[bool] = True
    rates_per_s: tuple[float, ...]
    switch_rates_per_s: tuple[float, ...] | tuple[tuple[float, ...], ...]
    initial_state: int | None = None
    _q: np.ndarray = field(init=False, repr=False, compare=False, hash=False)
    _pi: np.ndarray = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        """Validate the fields, normalize them to tuples of floats, precompute the chain."""
        rates_t = _mmpp_rates(self.rates_per_s)
        m = len(rates_t)
        sw_t, q = _mmpp_switch_rates(self.switch_rates_per_s, m)
        init = _mmpp_initial_state(self.initial_state, m)
        pi = _stationary_distribution(q)
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
        rate = positive(rate_per_s, "rate_per_s", "MMPP.with_mean_rate")
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


def _mmpp_rates(rates: Any) -> tuple[float, ...]:
    """Validate MMPP ``rates_per_s``: >= 2 numbers >= 0, not all 0.

    :param rates: the user's rates.
    :return: the rates as a tuple of floats.
    :raises ValueError: if they are not a list, have fewer than 2 states, or are all 0.
    """
    if isinstance(rates, (str, bytes)) or not isinstance(rates, (Sequence, np.ndarray)):
        raise ValueError(
            f"MMPP: rates_per_s={rates!r} is invalid; expected a list of >= 2 rates (numbers >= 0)"
        )
    rates_t = tuple(nonnegative(r, f"rates_per_s[{i}]", "MMPP") for i, r in enumerate(rates))
    m = len(rates_t)
    if m < 2:
        raise ValueError(
            f"MMPP: rates_per_s={list(rates_t)!r} has {m} state(s); expected >= 2 "
            "(use Poisson for a single rate)"
        )
    if not any(r > 0 for r in rates_t):
        raise ValueError(f"MMPP: rates_per_s={list(rates_t)!r} are all 0; at least one must be > 0")
    return rates_t


def _mmpp_switch_rates(sw: Any, m: int) -> tuple[Any, np.ndarray]:
    """Validate MMPP ``switch_rates_per_s`` (a vector or an ``m x m`` matrix) into a generator.

    :param sw: the user's switch rates.
    :param m: the number of states.
    :return: the switch rates normalized to (nested) tuples of floats, and the generator
        matrix Q (writable; rows sum to 0).
    :raises ValueError: if the shape or an entry is invalid, or the chain is reducible.
    """
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
        sw_t: Any = _switch_matrix(rows, sw, m, q)
    else:
        sw_t = _switch_vector(rows, sw, m, q)
    np.fill_diagonal(q, 0.0)
    _check_irreducible(q, sw)
    np.fill_diagonal(q, -q.sum(axis=1))
    return sw_t, q


def _switch_matrix(
    rows: list[Any], sw: Any, m: int, q: np.ndarray
) -> tuple[tuple[float, ...], ...]:
    """Validate a matrix of MMPP transition rates and write its off-diagonal into ``q``.

    :param rows: the matrix rows.
    :param sw: the user's switch rates (for the messages).
    :param m: the number of states.
    :param q: the ``m x m`` array to fill (off-diagonal entries only).
    :return: the matrix as nested tuples of floats.
    :raises ValueError: if it is not ``m x m``, an entry is invalid, a diagonal entry is
        neither 0 nor minus its row's off-diagonal sum, or a state has no way out.
    """
    if len(rows) != m or any(len(r) != m for r in rows):
        raise ValueError(
            f"MMPP: switch_rates_per_s={sw!r} is not a {m}x{m} matrix "
            f"(one row and column per state of rates_per_s)"
        )
    sw_t = tuple(
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
    return sw_t


def _switch_vector(rows: list[Any], sw: Any, m: int, q: np.ndarray) -> tuple[float, ...]:
    """Validate a vector of MMPP leaving rates and spread each uniformly over ``q``'s row.

    :param rows: the leaving rates, one per state.
    :param sw: the user's switch rates (for the message).
    :param m: the number of states.
    :param q: the ``m x m`` array to fill (its diagonal is cleared by the caller).
    :return: the rates as a tuple of floats.
    :raises ValueError: if there are not ``m`` rates or one is not > 0.
    """
    if len(rows) != m:
        raise ValueError(
            f"MMPP: switch_rates_per_s={sw!r} has {len(rows)} entries; expected {m} "
            f"leaving rates (one per state of rates_per_s) or a {m}x{m} matrix"
        )
    sw_t = tuple(positive(v, f"switch_rates_per_s[{i}]", "MMPP") for i, v in enumerate(rows))
    for i in range(m):
        q[i, :] = sw_t[i] / (m - 1)
    return sw_t


def _mmpp_initial_state(init: Any, m: int) -> int | None:
    """Validate MMPP ``initial_state``: None or an int in ``0..m-1`` (not a bool).

    :raises ValueError: otherwise.
    """
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
    return init


def _stationary_distribution(q: np.ndarray) -> np.ndarray:
    """Solve pi Q = 0, sum(pi) = 1 by least squares (clipped at 0, renormalized)."""
    m = q.shape[0]
    a = np.vstack((q.T, np.ones((1, m))))
    b = np.zeros(m + 1)
    b[-1] = 1.0
    pi = np.linalg.lstsq(a, b, rcond=None)[0]
    pi = np.clip(pi, 0.0, None)
    pi /= pi.sum()
    return pi
