"""Request intake: what the LLM server knows of each arrival before it is admitted.

:class:`RequestIntake` decides, from the configuration and the workload, where each
request's prompt and output lengths come from (a trace's token columns, the ``sessions``
workload's own, or a distribution), its class (``LLMBatching-v2``'s ``classes``: drawn by
share, or the part of a superposition it came from) and whether its prompt carries block
hashes for prefix caching (and so whether prefix caching is on, and the blocks per
hashed unit). It refuses, at construction, a configuration under which (almost) no
prompt could be admitted. During an episode it takes the arrival chunks the loop reads
(:meth:`RequestIntake.take`): rejects the prompts that do not fit ``max_model_len``,
clips outputs to it, and buffers each kept arrival's lengths, class and hashes until the
server admits it (:meth:`RequestIntake.admitted`) or a full queue drops it
(:meth:`RequestIntake.dropped`).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..config import LLMConfig, RequestClass
from ..workload import check_llm_tokens
from ..workload.lengths import outputs_above
from .prefixes import PrefixUnits

if TYPE_CHECKING:
    from ..workload import RequestLengths, Trace, Workload

#: Least fraction of drawn prompts that must fit ``max_model_len`` (see ``_check_admissible``).
_MIN_FIT = 1e-3
#: Rejected arrivals in a row after which :meth:`RequestIntake.take` gives up (at least this
#: many; a trace's bound is twice its length, so a full loop of it always contains a fitting
#: prompt).
_MAX_REJECTED_RUN = 100_000


class RequestIntake:
    """The arrivals' lengths, classes and prefix hashes, and the rejected prompts (module
    docstring).

    :param config: the server's validated configuration.
    :param workload: its arrivals.
    :raises ValueError: (almost) no prompt can be admitted; prefix caching asked for on a
        workload without prefix information; a block size that does not divide the
        workload's hashed blocks.
    """

    def __init__(self, config: LLMConfig, workload: Workload) -> None:
        self.workload = workload
        self._trace_outputs: np.ndarray | None = None  # (outputs_given, on first use)
        #: a request's context limit (prompts that do not fit are rejected)
        self.max_model_len = config.max_model_len
        self._setup_lengths(config, workload)
        self._setup_prefix(config, workload)
        #: the requests' prefix units (interned per episode)
        self.prefix_units = PrefixUnits()
        self.clear()

    def clear(self) -> None:
        """A new episode: nothing buffered, nothing rejected or dropped."""
        self._arrival_prompt: list[int] = []  # the buffered arrivals' prompt tokens,
        self._arrival_output: list[int] = []  # output tokens, clipped flags, classes
        self._arrival_clipped: list[bool] = []  # and prompts' block hashes
        self._arrival_class: list[int] = []
        self._arrival_hashes: list[Any] = []
        #: dropped arrivals per class (by a full queue)
        self.class_drops = [0] * len(self.classes)
        #: arrival times of the rejected prompts
        self.rejected_at: list[float] = []
        self._rejected_run = 0  # arrivals rejected in a row
        self.prefix_units.clear()

    # -- construction ------------------------------------------------------------------------
    def _setup_lengths(self, config: LLMConfig, workload: Workload) -> None:
        """Where the requests' lengths come from (the trace's own token columns, or a
        distribution), and the request classes."""
        lens: RequestLengths | None = config.lengths
        trace = cast("Trace", workload) if workload.kind == "trace" else None
        data = trace.data() if trace is not None else None
        has_tokens = (
            data is not None and data.prompt_tokens is not None and data.output_tokens is not None
        ) or _has_tokens(workload)  # (a sessions workload draws its own lengths)
        if lens is not None and lens.kind == "trace" and not has_tokens:
            raise ValueError(
                "lengths.kind='trace' needs a trace workload with prompt and output token columns"
            )
        self._lengths_from_trace = has_tokens and (lens is None or lens.kind == "trace")
        if lens is None and not self._lengths_from_trace:
            from ..workload import RequestLengths

            lens = RequestLengths()
        # None only when the lengths come from the trace, and then it is never read
        self.lengths = cast("RequestLengths", lens)
        if self._lengths_from_trace and trace is not None:
            # has_tokens: the trace's data has both token columns, so both are named
            assert data is not None
            assert data.prompt_tokens is not None and data.output_tokens is not None
            p_col, o_col = trace.prompt_tokens_column, trace.output_tokens_column
            assert p_col is not None and o_col is not None
            check_llm_tokens(
                data.prompt_tokens, data.output_tokens, f"Trace {trace.path!r}", (p_col, o_col)
            )
        self._setup_classes(config, data)

    def _setup_classes(self, config: LLMConfig, data: Any) -> None:
        """The request classes (``LLMBatching-v2``'s ``classes``; else one class with the
        config's SLAs and lengths), their arrival shares and lengths, and the check that
        requests of each can be admitted."""
        classes = getattr(config, "classes", None)
        #: the request classes (one, ``"default"``, when the configuration has none)
        self.classes: tuple[RequestClass, ...] = classes or (RequestClass("default"),)
        #: whether there are several
        self.multi = len(self.classes) > 1
        shares = np.array([c.share or 1.0 for c in self.classes], dtype=np.float64)
        self._shares = shares / shares.sum()
        # classes with their own arrivals (a superposition): part c is class c, and a
        # trace part with token columns gives its class's lengths
        self._by_source = self.classes[0].workload is not None
        self._part_tokens = [
            self._by_source and _has_tokens(c.workload) and c.lengths is None for c in self.classes
        ]
        # which classes draw the config's lengths (or the trace's columns), and which their own
        self._own_lengths = [c.lengths for c in self.classes]
        self._max_rejected_run = _MAX_REJECTED_RUN
        if any(
            lens is None and not tokens
            for lens, tokens in zip(self._own_lengths, self._part_tokens, strict=True)
        ):
            self._check_admissible(data)
        for c, tokens in zip(self.classes, self._part_tokens, strict=True):
            if tokens:
                self._check_trace_part(c)
        for i, lens in enumerate(self._own_lengths):
            if lens is None:
                continue
            frac, what = lens.fit_fraction(self.max_model_len - 1)
            if frac < _MIN_FIT:
                raise ValueError(
                    f"classes[{i}].lengths: almost no request of class "
                    f"{self.classes[i].name!r} can be admitted: a prompt fits when prompt + 1 "
                    f"<= max_model_len={self.max_model_len}, and {what}: a fraction {frac:.3g} "
                    f"of the prompts would fit (at least {_MIN_FIT:g} is needed)"
                )

    def _check_trace_part(self, c: RequestClass) -> None:
        """A class whose own trace gives its lengths: some prompt of it must fit (as
        :meth:`_check_admissible` asks of a trace workload)."""
        if c.workload.kind != "trace":  # the sessions' own lengths
            _check_shortest(c.workload, self.max_model_len, f"class {c.name!r}: ")
            return
        trace = cast("Trace", c.workload)
        data = trace.data()
        assert data.prompt_tokens is not None and data.output_tokens is not None
        if not np.any(data.prompt_tokens + 1 <= self.max_model_len):
            raise ValueError(
                f"class {c.name!r}: no request of its trace {trace.path!r} can ever be admitted: "
                f"a prompt fits when prompt + 1 <= max_model_len={self.max_model_len}, and its "
                f"shortest prompt has {int(data.prompt_tokens.min())} tokens; raise max_model_len"
            )
        self._max_rejected_run = max(self._max_rejected_run, 2 * int(data.prompt_tokens.size))

    def _check_admissible(self, data: Any) -> None:
        """Refuse a configuration under which (almost) no prompt fits ``max_model_len``.

        Prompts that do not fit are rejected at arrival, so such a configuration would
        reject arrival after arrival without ever reaching a decision. A trace is refused
        when none of its prompts fits; drawn lengths when fewer than :data:`_MIN_FIT` of
        them would. This bounds the search for an admissible arrival (see :meth:`take`).
        """
        maxlen = self.max_model_len
        if self._lengths_from_trace and data is None:  # the sessions' own lengths
            _check_shortest(self.workload, maxlen, "")
            self._max_rejected_run = _MAX_REJECTED_RUN
            return
        if self._lengths_from_trace:
            if not np.any(data.prompt_tokens + 1 <= maxlen):
                raise ValueError(
                    f"no request can ever be admitted: a prompt fits when prompt + 1 <= "
                    f"max_model_len={maxlen}, and the shortest prompt of trace "
                    f"{cast('Trace', self.workload).path!r} has {int(data.prompt_tokens.min())} "
                    "tokens; raise max_model_len or use other lengths"
                )
            self._max_rejected_run = max(_MAX_REJECTED_RUN, 2 * int(data.prompt_tokens.size))
            return
        frac, what = self.lengths.fit_fraction(maxlen - 1)
        if frac < _MIN_FIT:
            raise ValueError(
                f"almost no request can be admitted: a prompt fits when prompt + 1 <= max_model_len="
                f"{maxlen}, and {what}: a fraction {frac:.3g} of the prompts would fit (at "
                f"least {_MIN_FIT:g} is needed); raise max_model_len or shorten the prompts"
            )
        self._max_rejected_run = _MAX_REJECTED_RUN

    def _setup_prefix(self, config: LLMConfig, workload: Workload) -> None:
        """Whether prompts share cached prefixes (``prefix_caching``; ``None``: where the
        workload carries prefix information), and the blocks per prefix unit."""
        has = bool(getattr(workload, "has_prefix", False))
        on = has if config.prefix_caching is None else config.prefix_caching
        #: blocks per hashed prefix unit of the workload (None: no prefix caching)
        self.prefix_ratio: int | None = None
        if not on:
            return
        if not has:
            raise ValueError(
                "prefix_caching=True needs a workload whose prompts carry prefix information: "
                "a trace with block hashes (e.g. {'kind': 'trace', 'dataset': "
                "'mooncake-conversation'}, or a JSONL trace with a 'hash_ids' list per request "
                "and its prefix_block_tokens), or the 'sessions' workload; or set "
                "prefix_caching=False"
            )
        unit = _prefix_block_tokens(workload)
        bs = config.block_size
        if unit % bs:
            raise ValueError(
                f"block_size={bs} does not divide the workload's prefix blocks of {unit} tokens "
                f"(prefix_block_tokens): a hashed block must be whole KV blocks; use a "
                f"block_size that divides {unit}"
            )
        self.prefix_ratio = unit // bs

    def draws_beyond_arrivals(self) -> bool:
        """Whether an episode draws request lengths or classes from the seed (a trace's
        own token columns and fixed lengths draw nothing)."""
        if self.multi and not self._by_source:
            return True  # each arrival's class, by share
        for own, tokens in zip(self._own_lengths, self._part_tokens, strict=True):
            lens = (
                own
                if own is not None
                else (None if self._lengths_from_trace or tokens else self.lengths)
            )
            if lens is not None and lens.kind != "fixed":
                return True
        return False

    # -- an episode --------------------------------------------------------------------------
    def take(self, chunk: Any, rng: np.random.Generator) -> np.ndarray:
        """The arrivals of ``chunk`` whose prompts fit ``max_model_len``, their lengths (and
        classes and prefix hashes) kept; the rejected ones leave the stream here (the
        server's :meth:`~batch_env.llm.LLMServer.arrival_chunk`); ``rng``: the request-size
        stream.

        Bounded: after ``_max_rejected_run`` rejected arrivals in a row it raises
        ``ValueError`` (the construction-time check makes that practically impossible:
        with at least :data:`_MIN_FIT` of the prompts fitting, its chance is below e**-100).
        """
        times = chunk.times
        if self.multi or self._by_source or self._own_lengths[0] is not None:
            # a class's own lengths win over the config's and a trace's token columns
            # (RequestClass), as the construction-time checks assume
            cls, p, o = self._class_lengths(chunk, rng)
        else:
            cls = None
            if self._lengths_from_trace:
                p = np.asarray(chunk.prompt_tokens, np.int64)
                o = np.asarray(chunk.output_tokens, np.int64)
            else:
                p, o = self.lengths.sample(rng, len(times))
        fit = p + 1 <= self.max_model_len
        pre = chunk.prefix if self.prefix_ratio is not None else None
        if not fit.all():
            self.rejected_at.extend(times[~fit].tolist())
            times, p, o = times[fit], p[fit], o[fit]
            cls = None if cls is None else cls[fit]
            pre = None if pre is None else pre[fit]
            if not len(times):
                self._rejected_run += len(fit)
                if self._rejected_run > self._max_rejected_run:
                    raise ValueError(
                        f"{self._rejected_run} arrivals in a row were rejected: none had "
                        f"prompt + 1 <= max_model_len={self.max_model_len}; raise "
                        "max_model_len or shorten the prompts"
                    )
                return times
        self._rejected_run = 0
        room = self.max_model_len - p
        clip = o > room
        if clip.any():
            o = np.where(clip, room, o)
        self._arrival_prompt.extend(p.tolist())
        self._arrival_output.extend(o.tolist())
        self._arrival_clipped.extend(clip.tolist())
        self._arrival_class.extend([0] * len(times) if cls is None else cls.tolist())
        if self.prefix_ratio is not None:  # (interned at admission: only what enters)
            self._arrival_hashes.extend([None] * len(times) if pre is None else pre.tolist())
        return times

    def _class_lengths(
        self, ch: Any, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A chunk's classes, drawn by share, and the lengths each class draws (its own,
        else the config's or the trace's), from the request-size stream in class order."""
        n = len(ch.times)
        if self._by_source:  # the classes' own arrivals: the part is the class
            cls = np.asarray(ch.source, np.int64)
        elif not self.multi:  # one class: nothing to draw
            cls = np.zeros(n, np.int64)
        else:
            cls = rng.choice(len(self.classes), size=n, p=self._shares)
        p = np.empty(n, np.int64)
        o = np.empty(n, np.int64)
        if self._lengths_from_trace or any(self._part_tokens):
            p[:] = np.asarray(ch.prompt_tokens, np.int64)
            o[:] = np.asarray(ch.output_tokens, np.int64)
        for c, lens in enumerate(self._own_lengths):
            idx = np.flatnonzero(cls == c)
            from_trace = self._part_tokens[c] or (lens is None and self._lengths_from_trace)
            if not idx.size or from_trace:
                continue
            p[idx], o[idx] = (lens or self.lengths).sample(rng, idx.size)
        return cls, p, o

    def admitted(
        self, i: int, n: int
    ) -> tuple[list[int], list[int], list[int], int, list[tuple[int, ...]] | None]:
        """Buffered arrivals ``i .. i + n - 1`` are admitted: their prompt and output
        tokens, classes, how many outputs were clipped, and their prefix units (``None``
        without prefix caching)."""
        j = i + n
        units = (
            self.prefix_units.units(self._arrival_hashes[i:j])
            if self.prefix_ratio is not None
            else None
        )
        return (
            self._arrival_prompt[i:j],
            self._arrival_output[i:j],
            self._arrival_class[i:j],
            sum(self._arrival_clipped[i:j]),
            units,
        )

    def record(self, i: int) -> tuple[int, int, bool, int, Any]:
        """Buffered arrival ``i``: its prompt and output tokens (clipped), whether the
        output was clipped, its class and its prompt's block hashes (``None`` without
        prefix caching): what a cluster's front hands the replica it routes it to."""
        hashes = self._arrival_hashes[i] if self.prefix_ratio is not None else None
        return (
            self._arrival_prompt[i],
            self._arrival_output[i],
            self._arrival_clipped[i],
            self._arrival_class[i],
            hashes,
        )

    def push(self, prompt: int, output: int, clipped: bool, cls: int, hashes: Any) -> None:
        """One arrival taken by another intake (a cluster's front, :meth:`record`) joins
        this buffer, its output clipped to this ``max_model_len`` (the prompt fits it:
        the cluster routes no request to a replica it does not fit)."""
        room = self.max_model_len - prompt
        if output > room:
            output, clipped = room, True
        self._arrival_prompt.append(prompt)
        self._arrival_output.append(output)
        self._arrival_clipped.append(clipped)
        self._arrival_class.append(cls)
        if self.prefix_ratio is not None:
            self._arrival_hashes.append(hashes)

    def prompt_tokens(self, i: int, j: int) -> int:
        """The prompt tokens of buffered arrivals ``i .. j - 1``."""
        return sum(self._arrival_prompt[i:j])

    def sizes(self, i: int, j: int) -> dict[str, np.ndarray]:
        """Buffered arrivals ``i .. j - 1``: their prompt and output tokens (clipped) and
        classes."""
        return {
            "prompt_tokens": np.asarray(self._arrival_prompt[i:j], np.int64),
            "output_tokens": np.asarray(self._arrival_output[i:j], np.int64),
            "request_class": np.asarray(self._arrival_class[i:j], np.int64),
        }

    def dropped(self, i: int, j: int) -> None:
        """Buffered arrivals ``i .. j - 1`` were dropped by a full queue (counted per class)."""
        for c in self._arrival_class[i:j]:
            self.class_drops[c] += 1

    def forget_from(self, i: int, now: float) -> None:
        """Forget the buffered arrivals from ``i`` on, and the prompts rejected after
        ``now`` (a planner's copy redraws its future)."""
        for kept in (
            self._arrival_prompt,
            self._arrival_output,
            self._arrival_clipped,
            self._arrival_class,
            self._arrival_hashes,
        ):
            del kept[i:]
        del self.rejected_at[bisect_right(self.rejected_at, now) :]
        self._rejected_run = 0

    def redraw_buffered(self, i: int, rng: np.random.Generator) -> None:
        """The buffered arrivals from ``i`` on keep their prompts and classes; their
        output lengths are redrawn from ``rng`` (each class's law, nothing generated yet),
        clipped to ``max_model_len`` as at arrival (a realizable planner's copy of a
        cluster, whose routed arrivals have come but whose outputs nobody knows)."""
        cls = np.asarray(self._arrival_class[i:], np.int64)
        for c in range(len(self.classes)):
            idx = np.flatnonzero(cls == c) + i
            if not idx.size:
                continue
            new = self.outputs_given(c, rng, np.zeros(idx.size, np.int64))
            for k, o in zip(idx.tolist(), new.tolist(), strict=True):
                room = self.max_model_len - self._arrival_prompt[k]
                self._arrival_output[k] = min(o, room)
                self._arrival_clipped[k] = o > room

    def output_lengths(self, c: int) -> RequestLengths:
        """The lengths that class ``c``'s outputs are drawn from (its own, else the
        configuration's)."""
        return self._own_lengths[c] or self.lengths

    def outputs_given(self, c: int, rng: np.random.Generator, generated: np.ndarray) -> np.ndarray:
        """Class ``c``'s output lengths of requests in flight that have ``generated``
        tokens, redrawn for a planner's copy: from the class's law given what each has
        generated (:meth:`RequestLengths.output_given`), or, where the lengths come with
        a trace's rows, from the trace's output lengths above it (the trace a planner
        replays futures of: ``batch_env.planning``)."""
        lens = self.output_lengths(c)
        if lens is not None and lens.kind != "trace":
            return lens.output_given(rng, generated)
        if self._trace_outputs is None:
            parts = getattr(self.workload, "parts", None) or (self.workload,)
            cols = [p.data().output_tokens for p in parts if hasattr(p, "data")]
            cols = [x for x in cols if x is not None]
            if not cols:
                raise ValueError("outputs_given: the workload carries no output lengths")
            self._trace_outputs = np.sort(np.concatenate(cols).astype(np.int64))
        return outputs_above(self._trace_outputs, rng, generated)

    def buffered(self) -> int:
        """Arrivals taken so far (admitted, dropped or still to come) and not forgotten."""
        return len(self._arrival_prompt)

    def rejected_by(self, t: float) -> int:
        """Prompts rejected by ``t`` (they never fit ``max_model_len``)."""
        return bisect_right(self.rejected_at, t) if self.rejected_at else 0


def _prefix_block_tokens(workload: Any) -> int:
    """The tokens per hashed block of a workload with prefix information (a superposition:
    its parts', which must agree)."""
    parts = getattr(workload, "parts", None) or (workload,)
    sizes = {p.prefix_block_tokens for p in parts if getattr(p, "has_prefix", False)}
    if len(sizes) != 1:
        raise ValueError(
            f"the workload's parts hash their prompts in blocks of different sizes "
            f"{sorted(sizes)} (prefix_block_tokens): give them one size"
        )
    return sizes.pop()


def _check_shortest(workload: Any, maxlen: int, where: str) -> None:
    """Refuse a workload with its own lengths (``sessions``) whose shortest prompt never
    fits ``max_model_len``."""
    shortest = workload.min_prompt_tokens
    if shortest + 1 > maxlen:
        raise ValueError(
            f"{where}no request can ever be admitted: a prompt fits when prompt + 1 <= "
            f"max_model_len={maxlen}, and the workload's shortest prompt has {shortest} tokens "
            "(the system prompt and one user token); raise max_model_len or shorten "
            "system_prompt_tokens"
        )


def _has_tokens(workload: Any) -> bool:
    """Whether a workload's arrivals carry prompt and output lengths: a trace whose data
    has both token columns, or a workload that draws its own (``sessions``)."""
    if getattr(workload, "kind", None) != "trace":
        return bool(getattr(workload, "has_tokens", False))
    data = cast("Trace", workload).data()
    return data.prompt_tokens is not None and data.output_tokens is not None
