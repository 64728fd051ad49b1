"""A workload whose load is drawn anew for every episode (the "any load" setting).

``{"kind": "poisson", "load_range": [0.1, 0.95]}`` (through :func:`make_workload`, with
the env's max throughput) is Poisson arrivals whose load, the rate over the max
throughput, is drawn uniformly from ``[0.1, 0.95]`` at every reset; any kind that takes
``load`` takes ``load_range`` (for MMPP the rates keep their shape and scale together).
The drawn load is hidden from the policy (the observation's rate estimate must find it)
and shown to an oracle: ``info["oracle"]["load"]`` with ``oracle_info=True``.

The general form, which :meth:`RandomLoad.to_dict` writes, is
``{"kind": "random-load", "base": {...}, "load_range": [lo, hi]}``: each episode runs the
base workload with its rate multiplied by a factor drawn uniformly from ``[lo, hi]``
(the load, when the base runs at the max throughput, as ``load_range`` builds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..checks import positive
from .arrivals import DEFAULT_CHUNK_SIZE, ArrivalChunk, ArrivalStream, Workload

__all__ = ["RandomLoad"]


class _RandomLoadStream(ArrivalStream):
    """The base workload's stream at the episode's drawn factor."""

    def __init__(
        self, inner: ArrivalStream, factor: float, rate_per_s: float, oracle: bool
    ) -> None:
        self._inner = inner
        self.factor = factor
        self.rate_per_s = rate_per_s
        self._inner_oracle = oracle

    @property
    def exhausted(self) -> bool:  # type: ignore[override]  # the inner stream's
        """Whether the (finite) base stream has ended."""
        return self._inner.exhausted

    def next_chunk(self) -> ArrivalChunk:
        """The base stream's next chunk."""
        return self._inner.next_chunk()

    def oracle(self, t: float) -> dict[str, Any]:
        """``{"load": the drawn factor, "rate_per_s": the episode's mean rate}``, plus
        what the base stream hides (an MMPP's phase)."""
        out: dict[str, Any] = {"load": self.factor, "rate_per_s": self.rate_per_s}
        if self._inner_oracle:
            out.update(self._inner.oracle(t))
        return out


@dataclass(frozen=True)
class RandomLoad(Workload):
    """The base workload with its rate times a factor drawn uniformly per episode.

    :param base: the workload at factor 1 (a :class:`Workload`; :func:`make_workload`
        builds it first from a dict spec with a rate).
    :param load_range: ``(low, high)``, ``0 < low <= high``: the factor's range.
    """

    kind: ClassVar[str] = "random-load"
    has_oracle: ClassVar[bool] = True
    base: Workload
    load_range: tuple[float, float]

    def __post_init__(self) -> None:
        """Check the base and the range."""
        base = self.base
        if not isinstance(base, Workload) or isinstance(base, RandomLoad):
            raise ValueError(
                f"RandomLoad: base={self.base!r} is invalid: expected a workload other than "
                "random-load (make_workload builds one from a dict spec with a rate)"
            )
        rng = self.load_range
        if not isinstance(rng, (list, tuple)) or len(rng) != 2:
            raise ValueError(f"RandomLoad: load_range={rng!r} is invalid: expected [low, high]")
        lo = positive(rng[0], "load_range[0]", "RandomLoad")
        hi = positive(rng[1], "load_range[1]", "RandomLoad")
        if hi < lo:
            raise ValueError(
                f"RandomLoad: load_range={list(rng)!r} is invalid: expected low <= high"
            )
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "load_range", (lo, hi))

    @property
    def mean_rate_per_s(self) -> float:
        """The base's mean rate times the factor's mean."""
        return self.base.mean_rate_per_s * 0.5 * (self.load_range[0] + self.load_range[1])

    @property
    def arrival_cv(self) -> float | None:
        """The base's (within an episode)."""
        return self.base.arrival_cv

    @property
    def total_arrivals(self) -> int | None:
        """The base's."""
        return self.base.total_arrivals

    def with_mean_rate(self, rate_per_s: float) -> RandomLoad:
        """The same range around a base rescaled so that the mean rate is ``rate_per_s``."""
        rate = positive(rate_per_s, "rate_per_s", "RandomLoad.with_mean_rate")
        scale = rate / self.mean_rate_per_s
        return RandomLoad(
            self.base.with_mean_rate(self.base.mean_rate_per_s * scale), self.load_range
        )

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "random-load", "base": ..., "load_range": [lo, hi]}``."""
        return {"kind": self.kind, "base": self.base.to_dict(), "load_range": list(self.load_range)}

    def stream(
        self, rng: np.random.Generator, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> ArrivalStream:
        """Draw the episode's factor (the stream's first draw), then the base's stream."""
        n = self._check_stream_args(rng, chunk_size)
        factor = float(rng.uniform(self.load_range[0], self.load_range[1]))
        rate = self.base.mean_rate_per_s * factor
        inner = self.base.with_mean_rate(rate).stream(rng, n)
        return _RandomLoadStream(inner, factor, rate, self.base.has_oracle)
