"""The superposition of several workloads: their arrivals merged in time, each tagged.

``{"kind": "superposition", "parts": [{...}, {...}]}`` (through :func:`make_workload`) or
:class:`Superposition` directly: every part arrives as it would alone, from its own child
of the env's arrival stream (``rng.spawn``), and the merged stream carries, per arrival,
the index of its part (:attr:`ArrivalChunk.source`) and the parts' token columns where
they have them (``-1`` where a part has none). ``LLMBatching-v2``'s request classes with
their own arrival process or trace are such parts: class ``c`` is part ``c``.

Merging: each part's stream is read a chunk at a time; the merged stream emits, in time
order, every buffered arrival no later than the earliest of the parts' last buffered
arrivals (no part can then still deliver an earlier one), so each chunk is exact and
non-empty until every part has ended. Ties keep the parts' order. A part that ends (a
trace with ``loop=False``) stops constraining the others; the superposition ends when
all have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..checks import positive
from .arrivals import DEFAULT_CHUNK_SIZE, ArrivalChunk, ArrivalStream, Workload

__all__ = ["Superposition"]


class _Part:
    """One part's stream and what of it is buffered."""

    def __init__(self, stream: ArrivalStream) -> None:
        self.stream = stream
        self.times = np.empty(0)
        self.prompt: np.ndarray | None = None
        self.output: np.ndarray | None = None
        self.prefix: np.ndarray | None = None
        self.pos = 0
        self.ended = False

    def fill(self) -> None:
        """Read the next chunk when the buffer is used up (marks the end of a finite part)."""
        while self.pos >= self.times.size and not self.ended:
            ch = self.stream.next_chunk()
            if len(ch) == 0:
                self.ended = True
                return
            self.times, self.prompt, self.output, self.prefix, self.pos = (
                ch.times,
                ch.prompt_tokens,
                ch.output_tokens,
                ch.prefix,
                0,
            )

    @property
    def left(self) -> int:
        return self.times.size - self.pos


class _SuperpositionStream(ArrivalStream):
    """The parts' streams merged in time (module docstring)."""

    def __init__(self, streams: list[ArrivalStream]) -> None:
        self._parts = [_Part(s) for s in streams]

    def next_chunk(self) -> ArrivalChunk:
        """Every buffered arrival up to the earliest of the live parts' last buffered ones."""
        parts = self._parts
        for p in parts:
            p.fill()
        live = [p for p in parts if p.left]
        if not live:
            self.exhausted = True
            return ArrivalChunk(np.empty(0))
        # a part that has not ended may still deliver arrivals after its buffer's last
        cutoff = min((float(p.times[-1]) for p in parts if not p.ended), default=np.inf)
        times, source, prompt, output, prefix = [], [], [], [], []
        tokens = any(p.prompt is not None for p in parts)
        hashes = any(p.prefix is not None for p in parts)
        for k, p in enumerate(parts):
            if not p.left:
                continue
            end = p.pos + int(np.searchsorted(p.times[p.pos :], cutoff, side="right"))
            sl = slice(p.pos, end)
            n = end - p.pos
            times.append(p.times[sl])
            source.append(np.full(n, k, np.int64))
            if tokens:
                prompt.append(p.prompt[sl] if p.prompt is not None else np.full(n, -1, np.int64))
                output.append(p.output[sl] if p.output is not None else np.full(n, -1, np.int64))
            if hashes:  # a part without prefix information: None per arrival
                prefix.append(p.prefix[sl] if p.prefix is not None else np.full(n, None, object))
            p.pos = end
        t = np.concatenate(times)
        order = np.argsort(t, kind="stable")  # ties keep the parts' order
        return ArrivalChunk(
            t[order],
            np.concatenate(prompt)[order] if tokens else None,
            np.concatenate(output)[order] if tokens else None,
            np.concatenate(source)[order],
            np.concatenate(prefix)[order] if hashes else None,
        )


@dataclass(frozen=True)
class Superposition(Workload):
    """Several workloads' arrivals merged in time (module docstring).

    :param parts: the workloads (at least one; built by :func:`make_workload` from dicts).
    """

    kind: ClassVar[str] = "superposition"
    parts: tuple[Workload, ...]

    def __post_init__(self) -> None:
        parts = tuple(self.parts)
        if not parts or not all(isinstance(p, Workload) for p in parts):
            raise ValueError(
                f"superposition: parts={self.parts!r} is invalid: expected a non-empty list of "
                "workloads"
            )
        object.__setattr__(self, "parts", parts)

    @property
    def mean_rate_per_s(self) -> float:
        """The parts' rates summed."""
        return float(sum(p.mean_rate_per_s for p in self.parts))

    @property
    def arrival_cv(self) -> float | None:
        """Not known in closed form (``None``), but for one part: its own."""
        return self.parts[0].arrival_cv if len(self.parts) == 1 else None

    @property
    def has_prefix(self) -> bool:
        """Whether some part's arrivals carry their prompts' block hashes."""
        return any(getattr(p, "has_prefix", False) for p in self.parts)

    @property
    def total_arrivals(self) -> int | None:
        """The parts' arrivals summed when every part is finite, else ``None``."""
        totals = [p.total_arrivals for p in self.parts]
        return None if any(t is None for t in totals) else sum(t or 0 for t in totals)

    def with_mean_rate(self, rate_per_s: float) -> Superposition:
        """Every part's rate times ``rate_per_s / mean_rate_per_s`` (the shares kept)."""
        f = (
            positive(rate_per_s, "rate_per_s", "Superposition.with_mean_rate")
            / self.mean_rate_per_s
        )
        return Superposition(tuple(p.with_mean_rate(p.mean_rate_per_s * f) for p in self.parts))

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "superposition", "parts": [...]}``."""
        return {"kind": self.kind, "parts": [p.to_dict() for p in self.parts]}

    def stream(
        self, rng: np.random.Generator, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> ArrivalStream:
        """The merged stream; part ``k`` draws from the ``k``-th child of ``rng``."""
        n = self._check_stream_args(rng, chunk_size)
        children = rng.spawn(len(self.parts))
        return _SuperpositionStream(
            [p.stream(g, n) for p, g in zip(self.parts, children, strict=True)]
        )
