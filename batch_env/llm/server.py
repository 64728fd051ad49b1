"""The LLM server: one simulated inference engine, usable without an env.

:class:`LLMServer` is what the LLM envs drive (vLLM's engine, which holds a scheduler
and a KV-cache manager; vidur's replica). It is built from one validated configuration
(:class:`batch_env.config.LLMConfig`), a profile, a workload and an executor; it draws
its arrivals and their lengths (and classes) from its own streams, admits them, and runs
iterations through the scheduler named in the configuration
(:func:`batch_env.llm.make_scheduler`), which reports back to it (it is the scheduler's
:class:`~batch_env.llm.scheduler.Host`). It owns the requests, queues and KV cache
(:attr:`LLMServer.state`, an :class:`~batch_env.llm.state.LLMServerState`), the SLA books
(:attr:`LLMServer.sla_books`) and the counters the episode summary reads.

The clock, the arrival stream, the FIFO admission with its queue capacity and drops, the
latency and energy integrals and the summary window are the one event loop's
(:class:`batch_env.core.ServingLoop`, which this class extends through its hooks:
``more_arrivals``, ``absorb``, ``on_mark``, ``misses``, ``summary_done``, ...).

Driving it::

    server = LLMServer(config, profile, workload, executor)
    server.reset(seed=0)
    while not server.over():
        ran, last = server.run_to_epoch(cap, budget)   # to the next decision point
        reward, costs, dt_s, arrivals = server.step_accounting()  # what happened in between

:meth:`LLMServer.run_iteration` runs one iteration (``LLMBatching-v0``/``-v1`` ask at
every iteration boundary); :meth:`LLMServer.run_to_epoch` runs until two settings would
schedule different iterations (``LLMBatching-v2``'s decision epochs), running the
decode-only stretches that no setting can change in one loop (:meth:`_run_decodes`).
Several servers can run side by side, each with its own streams and clock.

Imports: ``batch_env.core`` (the loop), ``batch_env.config``, ``batch_env.executor``,
``batch_env.metrics``, ``batch_env.workload`` and this package; never ``batch_env.envs``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..config import LLM_DEFAULT_WORKLOAD, LLMConfig, RequestClass
from ..core import ServingLoop
from ..executor import LLMExecutor, LLMProfileExecutor
from ..metrics import llm_episode_summary
from ..profiles.llm_profile import load as load_llm_profile
from ..workload import Superposition, check_llm_tokens, make_workload
from .chunked import ChunkedScheduler
from .orders import FCFS, candidates
from .prefixes import PrefixUnits, counters, prefix_summary
from .registry import make_scheduler
from .scheduler import Iteration, Plan
from .sla import SLABooks
from .state import LLMServerState

if TYPE_CHECKING:
    from ..profiles.llm_profile import LLMProfile
    from ..render import Timeline
    from ..workload import RequestLengths, Trace, Workload
    from .prefix_cache import PrefixKVCache

#: Least fraction of drawn prompts that must fit ``max_model_len`` (see ``_check_admissible``).
_MIN_FIT = 1e-3
#: Rejected arrivals in a row after which ``more_arrivals`` gives up (at least this many; a trace's
#: bound is twice its length, so a full loop of it always contains a fitting prompt).
_MAX_REJECTED_RUN = 100_000
#: Iterations :meth:`LLMServer.run_to_epoch` may run at most (a bound, never reached: it
#: returns at the next boundary where the settings differ or at the episode's end).
MAX_ITERATIONS_PER_STEP = 10_000_000


class LLMServer(ServingLoop):
    """One LLM server (module docstring): the loop, its requests, KV cache and scheduler.

    :param config: the validated configuration (its ``max_num_batched_tokens`` within the
        profile's largest prefill).
    :param profile: the LLM profile (iteration times and power, KV bytes per token).
    :param workload: the arrivals (a trace with token columns may give the lengths).
    :param executor: what runs the iterations, or a function of no argument that builds
        it, called last, once everything else is valid (a real executor builds a model).
    :param timeline: where to log each iteration (batch / max_num_seqs, time / TPOT SLA,
        prefill) for the frames; ``None``: nothing per iteration.
    :param name: what its warnings call it (an env passes its class's name).
    :raises ValueError: a configuration under which no request can be admitted, or whose
        ``max_model_len`` does not fit the KV cache.
    """

    executor: LLMExecutor
    profile: LLMProfile  # type: ignore[assignment]  # the loop's is the batch Profile
    config: LLMConfig  # type: ignore[assignment]  # and the batch configuration

    def __init__(
        self,
        config: LLMConfig,
        profile: LLMProfile,
        workload: Workload,
        executor: LLMExecutor | Callable[[], LLMExecutor],
        timeline: Timeline | None = None,
        name: str = "LLMServer",
    ) -> None:
        # ServingLoop reads only what LLMProfile and LLMConfig share with Profile and ServingConfig
        self.setup_loop(profile, workload, config)  # type: ignore[arg-type]
        #: the configuration's token limits: a request's context, and an iteration's tokens
        self.max_model_len = config.max_model_len
        assert config.max_num_batched_tokens is not None  # LLMConfig fills the default
        self.max_num_batched_tokens: int = config.max_num_batched_tokens
        self._setup_lengths(config, workload)
        # the KV cache
        bs = config.block_size
        total = profile.kv_blocks_total(bs, config.gpu_memory_utilization)
        watermark = int(config.watermark * total)
        need = -(-config.max_model_len // bs)
        if total - watermark < need:
            raise ValueError(
                f"max_model_len={config.max_model_len} needs {need} KV blocks of {bs} tokens but "
                f"profile '{profile.name}' has {total} ({watermark} kept free by the watermark) "
                "at this gpu_memory_utilization: lower max_model_len"
            )
        self._setup_prefix(config, workload)
        self.state = LLMServerState(bs, total, watermark, self.prefix_ratio)
        self.state.fcfs_above = getattr(config, "longest_prefix_fcfs_above", 128)
        # the SLA books: each class's SLAs and weight (one class: the config's, weight 1)
        self.sla_books = SLABooks(
            [(c.ttft_sla_ms or config.ttft_sla_ms) / 1000.0 for c in self.classes],
            [(c.tpot_sla_ms or config.tpot_sla_ms) / 1000.0 for c in self.classes],
            [c.weight for c in self.classes],
        )
        #: the TTFT and TPOT SLAs (s) that scale the observation and the frames: the one
        #: class's, else the configuration's
        self.ttft_scale_s: float = (
            config.ttft_sla_ms / 1000.0 if self.multi else self.sla_books.ttft_s[0]
        )
        self.tpot_scale_s: float = (
            config.tpot_sla_ms / 1000.0 if self.multi else self.sla_books.tpot_s[0]
        )
        # the settings a decision chooses among: the caps (``grid``), the token budgets
        # (``budget_grid``, else ``max_num_batched_tokens`` alone) and admission orders
        assert config.grid is not None  # LLMConfig.__post_init__ fills the default
        self.grid: tuple[int, ...] = config.grid
        self.budgets: tuple[int, ...] = (
            config.budget_grid if config.budget_grid is not None else (self.max_num_batched_tokens,)
        )
        self.orders: tuple[str, ...] = tuple(getattr(config, "orders", (FCFS,)))
        self._one_setting = len(self.grid) * len(self.budgets) * len(self.orders) == 1
        self._setup_clocks(config, profile)
        self._check_drop_cost()
        self.timeline = timeline
        # last, once the configuration is valid
        self.executor = executor() if callable(executor) else executor
        options = (
            {"decode_first": config.decode_first, "split_prompts": config.split_prompts}
            if config.scheduler == "chunked"
            else {}
        )
        self.scheduler = make_scheduler(
            config.scheduler, self.state, self, self.executor, **options
        )
        #: whether decode-only stretches run in one loop (:meth:`_run_decodes`): with the
        #: chunked scheduler on the profile executor, outside the frame modes (whose
        #: timeline logs each iteration)
        self.decode_runs = (
            isinstance(self.scheduler, ChunkedScheduler)
            and isinstance(self.executor, LLMProfileExecutor)
            and timeline is None
        )
        if self.clocks and not isinstance(self.executor, LLMProfileExecutor):
            raise ValueError(
                "clock_grid: the SM clock is an action only in profile mode (executor="
                "'profile'); a real executor runs at the device's own clock"
            )
        self.warn_if_seed_invariant(
            "profile" if isinstance(self.executor, LLMProfileExecutor) else "real", name
        )

    def _setup_prefix(self, config: LLMConfig, workload: Workload) -> None:
        """Whether prompts share cached prefixes (``prefix_caching``; ``None``: where the
        workload carries prefix information), and the blocks per prefix unit."""
        has = bool(getattr(workload, "has_prefix", False))
        on = has if config.prefix_caching is None else config.prefix_caching
        #: blocks per hashed prefix unit of the workload (None: no prefix caching)
        self.prefix_ratio: int | None = None
        #: the requests' prefix units (interned per episode)
        self.prefix_units = PrefixUnits()
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

    def _setup_clocks(self, config: LLMConfig, profile: LLMProfile) -> None:
        """The SM clocks a decision chooses among (``LLMBatching-v2``'s ``clock_grid``; else
        none: the profile's clock throughout) and the profile at each
        (:meth:`batch_env.llm_profile.LLMProfile.at_clock`)."""
        grid = getattr(config, "clock_grid", None)
        #: the clock grid (MHz; empty: no clock in the action)
        self.clocks: tuple[float, ...] = tuple(grid) if grid is not None else ()
        self.clock_profiles: tuple[LLMProfile, ...] = ()
        self._clocked = len(self.clocks) > 1  # the clock-aware epoch rule (run_to_epoch)
        if not self.clocks:
            return
        if profile.clock_mhz is not None and profile.clock_mhz != profile.max_clock_mhz:
            raise ValueError(
                f"clock_grid={list(self.clocks)} and clock_mhz={profile.clock_mhz:g}: give one "
                "(the grid's clocks are chosen per decision; clock_mhz fixes one)"
            )
        built = []
        for i, f in enumerate(self.clocks):
            try:
                built.append(profile.at_clock(f))
            except ValueError as err:
                raise ValueError(f"clock_grid[{i}]={f:g}: {err}") from None
        self.clock_profiles = tuple(built)

    # -- construction: lengths and classes ------------------------------------------------
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
        self._class_drops = [0] * len(self.classes)

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
        them would. This bounds the search for an admissible arrival (see :meth:`more_arrivals`).
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

    def _check_drop_cost(self) -> None:
        """Warn when a drop costs less than the energy of the cheapest request (one token)."""
        p = self.profile
        n = self.config.max_num_seqs
        self.warn_if_drop_pays(min(p.decode_time_s(b, b) * p.decode_power_w(b) / b for b in (1, n)))

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

    # -- an episode ----------------------------------------------------------------------
    def reset(self, seed: int, options: dict[str, Any] | None = None) -> None:
        """Start an episode: empty the server, seed its streams from ``seed``, and advance
        the clock to the first arrival.

        :param options: ``{"load": x}`` on a workload with a ``load_range``
            (as :class:`batch_env.core.ServingLoop` draws an episode's workload).
        """
        self._arrival_prompt: list[int] = []  # the buffered arrivals' prompt tokens,
        self._arrival_output: list[int] = []  # output tokens, clipped flags and classes
        self._arrival_clipped: list[bool] = []
        self._arrival_class: list[int] = []
        self._class_drops = [0] * len(self.classes)  # drops per class, and at the marks
        self._class_drops_w0: list[int] | None = None
        self._class_drops_end: list[int] | None = None
        self._rejected_at: list[float] = []  # arrival times of the rejected prompts
        self._rejected_run = 0  # arrivals rejected in a row
        self._arrival_hashes: list[Any] = []  # their prompts' block hashes (prefix caching)
        self.prefix_units.clear()
        self._prefix0: tuple[int, int, int] | None = None  # the cache's counters at the window
        self.state.clear()
        #: per entry: its completion time (``None`` while in the system)
        self.finished_at: list[float | None] = []
        self.sla_books.clear()
        #: integral of the KV blocks in use (block-seconds)
        self.kv_integral = 0.0
        #: outputs clipped to ``max_model_len``, iterations, prefill iterations
        self.clipped = 0
        self.iterations = 0
        self.prefill_iterations = 0
        self._done_upto = 0  # entries before it are all finished (for summary_done)
        self._window_counts0: tuple[int, int, float, int, int, int] | None = None
        n = self.config.recent_iterations
        self._recent_time_s: deque[float] = deque(maxlen=n)  # recent decode iterations'
        self._recent_batch: deque[int] = deque(maxlen=n)  # times and batch sizes
        self._recent_time_sum = 0.0  # their sums, kept as they change
        self._recent_batch_sum = 0
        #: the setting in force: cap on running requests, token budget, admission order
        self.cap = self.grid[-1]
        self.budget = self.budgets[-1]
        self.order = self.orders[0]
        #: the SM clock in force (MHz; ``None``: the profile's, no clock grid)
        self.clock: float | None = None
        if self.clocks:
            self._set_clock(len(self.clocks) - 1)
        #: what the last iteration did: requests preempted, prompt tokens chunked, whether
        #: it was a prefill (1.0) or not (0.0)
        self.last_preempted = 0
        self.last_chunk_tokens = 0
        self.last_prefill = 0.0
        self.start_loop(seed, options)  # (the SLA books' pointers at the first arrival)
        if self.timeline is not None:
            self.timeline.clear()
            self._timeline_tokens = 0

    def set(self, cap: int, budget: int, order: str, clock_index: int | None = None) -> None:
        """The setting in force from now: the cap on running requests, the token budget,
        the admission order and (with a clock grid) the SM clock ``clocks[clock_index]``
        (``None``: unchanged)."""
        self.cap, self.budget, self.order = cap, budget, order
        if clock_index is not None and self.clocks:
            self._set_clock(clock_index)

    def _set_clock(self, k: int) -> None:
        """Run the coming iterations at ``clocks[k]``: its profile times and powers them."""
        prof = self.clock_profiles[k]
        self.clock = self.clocks[k]
        self.use_profile(prof)
        if isinstance(self.executor, LLMProfileExecutor):  # (a clock grid needs it)
            self.executor.use_profile(prof)

    def prefill_phase(self) -> bool:
        """Whether prompt work is pending: a request waits or a prefill is in progress
        (the clock-aware epoch rule's phase, :meth:`run_to_epoch`)."""
        return bool(self.state.waiting or self.state.prefilling)

    def at_epoch(self) -> None:
        """Bring the arrival-rate estimate and the SLA books up to this boundary (a
        decision epoch reached without a step settling it: the first one of an episode)."""
        self.update_rate()
        self.misses()

    # -- arrivals with lengths (the loop's hooks) ---------------------------------------
    def arrival_chunk(self, chunk: Any) -> np.ndarray:
        """The arrivals of ``chunk`` whose prompts fit ``max_model_len``, their lengths (and
        classes) kept; the rejected ones leave the stream here (the loop's hook).

        Bounded: after ``_max_rejected_run`` rejected arrivals in a row it raises
        ``ValueError`` (the construction-time check makes that practically impossible:
        with at least :data:`_MIN_FIT` of the prompts fitting, its chance is below e**-100).
        """
        times = chunk.times
        if self.multi or self._by_source or self._own_lengths[0] is not None:
            # a class's own lengths win over the config's and a trace's token columns
            # (RequestClass), as the construction-time checks assume
            cls, p, o = self._class_lengths(chunk)
        else:
            cls = None
            if self._lengths_from_trace:
                p = np.asarray(chunk.prompt_tokens, np.int64)
                o = np.asarray(chunk.output_tokens, np.int64)
            else:
                p, o = self.lengths.sample(self.sizes_rng, len(times))
        fit = p + 1 <= self.max_model_len
        pre = chunk.prefix if self.prefix_ratio is not None else None
        if not fit.all():
            self._rejected_at.extend(times[~fit].tolist())
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

    def _class_lengths(self, ch: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A chunk's classes, drawn by share, and the lengths each class draws (its own,
        else the config's or the trace's), from the request-size stream in class order."""
        rng = self.sizes_rng
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

    def resample_future(self, rng: np.random.Generator) -> None:
        """The loop's (future arrivals from the planner's model, with lengths and classes
        drawn from ``rng``), and the output lengths of the requests in the system redrawn
        given the tokens each has generated (:meth:`RequestLengths.output_given`, from
        its class's lengths), clipped to ``max_model_len`` as at arrival."""
        i = self.arrival_index
        super().resample_future(rng)
        for kept in (
            self._arrival_prompt,
            self._arrival_output,
            self._arrival_clipped,
            self._arrival_class,
            self._arrival_hashes,
        ):
            del kept[i:]
        del self._rejected_at[bisect_right(self._rejected_at, self.now) :]
        self._rejected_run = 0
        s, fin = self.state, self.finished_at
        live = [e for e in range(self._done_upto, len(fin)) if fin[e] is None]
        if not live:
            return
        cls = np.asarray([s.request_class[e] for e in live], np.int64)
        for c, own in enumerate(self._own_lengths):
            lens = own or self.lengths
            idx = [live[k] for k in np.flatnonzero(cls == c)]
            if not idx:
                continue
            new = lens.output_given(rng, np.asarray([s.generated[e] for e in idx], np.int64))
            for e, o in zip(idx, new.tolist(), strict=True):
                s.output[e] = min(o, self.max_model_len - s.prompt[e])

    def absorb(self, t_end: float, j: int, power_w: float) -> None:
        """The loop's admission, plus the new entries' lengths and the KV-use integral."""
        i = self.arrival_index
        n0 = len(self.arrivals)
        self.kv_integral += self.state.kv.used * (t_end - self.now)
        super().absorb(t_end, j, power_w)
        adm = len(self.arrivals) - n0
        if adm:
            classes = self._arrival_class[i : i + adm]
            ttft = self.sla_books.ttft_s
            deadlines = [a + ttft[c] for a, c in zip(self.arrivals[n0:], classes, strict=True)]
            self.state.admit(
                self._arrival_prompt[i : i + adm],
                self._arrival_output[i : i + adm],
                classes,
                deadlines,
                self.prefix_units.units(self._arrival_hashes[i : i + adm])
                if self.prefix_ratio is not None
                else None,
            )
            self.sla_books.admit(classes, self.arrivals[n0:])
            self.clipped += sum(self._arrival_clipped[i : i + adm])
            self.finished_at += [None] * adm
        if self.multi and j - i > adm:  # dropped by a full queue: the last of the arrivals
            for c in self._arrival_class[i + adm : j]:
                self._class_drops[c] += 1

    def in_service_count(self) -> int:
        """The running requests."""
        return len(self.state.running)

    def rejected_count(self) -> int:
        """Prompts rejected by now (they never fit ``max_model_len``)."""
        return bisect_right(self._rejected_at, self.now)

    def on_mark(self) -> None:
        """The loop's snapshot at the summary window's marks, plus the server's counters
        and per-class drops."""
        first = self.window is None
        super().on_mark()
        if first:
            self._window_counts0 = self._window_counters()
            self._class_drops_w0 = list(self._class_drops)
            if self.prefix_ratio is not None:
                self._prefix0 = counters(cast("PrefixKVCache", self.state.kv))
        else:
            self._class_drops_end = list(self._class_drops)

    def _window_counters(self) -> tuple[int, int, float, int, int, int]:
        """The counters the summary window takes differences of: output tokens,
        preemptions, the KV-use integral, iterations, prefill iterations, clipped outputs."""
        srv = self.state
        return (
            srv.tokens_out,
            srv.preemptions,
            self.kv_integral,
            self.iterations,
            self.prefill_iterations,
            self.clipped,
        )

    # -- SLA bookkeeping (TTFT deadlines in arrival order, TPOT at completion) -----------
    def misses(self) -> float:
        """Weighted SLA misses counted by now (an ``int`` when every class weighs 1)."""
        return self.sla_books.misses(self.now)

    def misses_at(self, t: float) -> float:
        """Weighted SLA misses whose deadline passed by ``t``, at any instant."""
        return self.sla_books.misses_exact(t)

    def summary_done(self) -> bool:
        """Every summary request has completed or been dropped (completion is not FIFO
        here: the first unfinished entry is tracked)."""
        if self.window_end is None:
            return False
        fin, d = self.finished_at, self._done_upto
        n = len(fin)
        while d < n and fin[d] is not None:
            d += 1
        self._done_upto = d
        return d >= self.window_end

    # -- what the scheduler reports (batch_env.llm.scheduler.Host) ----------------------
    def now_s(self) -> float:
        """The simulated time now."""
        return self.now

    def first_token(self, e: int, t: float) -> None:
        """Entry ``e``'s first token at ``t``."""
        self.sla_books.first_token(e, t)

    def waiting_count(self) -> int:
        """The waiting requests (the loop's queue capacity counts them): the waiting queue,
        which is not the arrivals' FIFO tail here (admission orders, preemptions)."""
        return len(self.state.waiting)

    def finish(self, e: int, t: float) -> None:
        """Entry ``e`` completed at ``t``; a TPOT miss is counted now (TTFT met)."""
        self.finished_at[e] = t
        self.complete(1)
        self.sla_books.finish(e, t, self.state.output[e])

    # -- iterations ----------------------------------------------------------------------
    def run_iteration(self, cap: int, budget: int, plan: Plan | None = None) -> Iteration:
        """One iteration of the scheduler at this cap and budget and the order in force
        (``plan``: its plan, made at this boundary), and its counters."""
        sch = self.scheduler
        self.last_chunk_tokens = 0
        it = sch.run(sch.plan(cap, budget, self.order) if plan is None else plan)
        self.iterations += 1
        if self.timeline is not None:  # frame modes only: (batch, time / TPOT SLA, prefill)
            tokens = self.state.tokens_out
            self.timeline.push(
                (tokens - self._timeline_tokens) / self.config.max_num_seqs,
                it.duration_s / self.tpot_scale_s,
                int(it.prefill),
            )
            self._timeline_tokens = tokens
        d, _kind, prefill, b, self.last_preempted, chunk_tokens, empty = it
        if not empty:
            self.last_chunk_tokens = chunk_tokens
            if prefill:
                self.prefill_iterations += 1
            if b:
                self.count_batches(1, b)
                self._recent(d, b)
            self.last_prefill = 1.0 if prefill else 0.0
        return it

    def run_one(self, cap: int, budget: int) -> Iteration | None:
        """An iteration boundary's decision carried out (``LLMBatching-v0``/``-v1``): one
        iteration if requests are in the system, then idle while it is empty. Returns the
        iteration (``None``: none ran)."""
        self.last_preempted = 0
        self.last_chunk_tokens = 0
        it = self.run_iteration(cap, budget) if self.in_system else None
        self.idle_while_empty()
        return it

    def forced_plan(self, cap: int, budget: int) -> Plan | None:
        """The next iteration's plan when every setting schedules it alike (this boundary
        is no decision epoch), else ``None``.

        Exact and cheap (``LLMBatchingV2Env``: Decision epochs): with nothing waiting and
        no prefill in progress every setting runs the same decode; elsewhere the smallest
        and the largest setting are planned, and admission is monotone in between."""
        sch, srv = self.scheduler, self.state
        if self._one_setting or not (srv.waiting or srv.prefilling):
            # nothing to admit or to continue: the same decode
            return sch.plan(cap, budget, self.order)
        lo, hi = (self.grid[0], self.budgets[0]), (self.grid[-1], self.budgets[-1])
        first = sch.plan(*hi, self.order)
        for order in self.orders:  # monotone in the cap and budget for each order
            for setting in (lo, hi):
                if (setting, order) != (hi, self.order):
                    if not first.same_iteration(sch.plan(*setting, order)):
                        return None
        return first

    def idle_while_empty(self) -> None:
        """An empty system idles to the next arrival (no decision is needed); a finite
        trace that has ended moves the clock to the horizon (the episode then ends)."""
        while self.in_system == 0:
            if not self.idle_until_arrival():
                break

    def _recent(self, d: float, b: int) -> None:
        """Record a decode iteration's time and batch size in the recent windows (and
        their sums: the same ``sum`` the observation would take)."""
        rb = self._recent_batch
        if len(rb) == rb.maxlen:
            self._recent_batch_sum -= rb[0]  # integers: the running sum is exact
        rb.append(b)
        self._recent_batch_sum += b
        self._recent_time_s.append(d)
        self._recent_time_sum = sum(self._recent_time_s)  # floats: summed afresh

    def _recent_many(self, pairs: deque[tuple[float, int]]) -> None:
        """:meth:`_recent` for each ``(time, batch)`` of ``pairs`` in turn (at most the
        windows' length of them), its sums taken once at the end: the same sums, since
        both are sums of the final windows' contents (exact for the integer one)."""
        rd, rb = self._recent_time_s, self._recent_batch
        for d, b in pairs:
            rd.append(d)
            rb.append(b)
        self._recent_batch_sum = sum(rb)
        self._recent_time_sum = sum(rd)

    # -- to the next decision epoch --------------------------------------------------------
    def run_to_epoch(
        self, cap: int, budget: int, chosen: bool = True
    ) -> tuple[int, Iteration | None]:
        """Run iterations from this boundary until a decision epoch or the episode's end:
        the first one whatever it is when ``chosen`` (a decision chose it here), then every
        one that all settings would run alike. Returns how many ran and the last. The
        rate estimate is brought up to each boundary passed, as a step per iteration would.

        With several clocks (``clock_grid``) every setting schedules the same iterations
        at every clock, but times and powers them differently, so the clock adds epochs of
        its own: a boundary is also an epoch where prompt work appears or ends
        (:meth:`prefill_phase` differs from the previous boundary's; an episode starts
        empty). A clock chosen at an epoch holds until the next.
        """
        ran = 0
        last: Iteration | None = None
        phase = self.prefill_phase() if chosen else False
        while not (self.now >= self.horizon_s or self.summary_done()):
            plan = None
            if self._clocked and (ran or not chosen) and self.prefill_phase() != phase:
                break  # prompt work appeared or ended: the clock's epoch
            if ran or not chosen:
                plan = self.forced_plan(cap, budget)
                if plan is None:
                    break  # the settings differ here: a decision epoch
                if ran:
                    self.update_rate()  # a step per iteration ends at this boundary
            if ran >= MAX_ITERATIONS_PER_STEP:
                raise RuntimeError(
                    f"LLMServer: {ran} iterations without a decision epoch or the episode's "
                    "end (bound MAX_ITERATIONS_PER_STEP)"
                )
            if (
                plan is not None
                and self.decode_runs
                and not plan.chunks
                and not plan.victims
                and not self.state.prefilling
            ):
                k, it = self._run_decodes()
                if k:
                    ran += k
                    last = it
                    self.idle_while_empty()  # the last requests may have completed
                    continue
            self.last_preempted = 0
            last = self.run_iteration(cap, budget, plan)
            ran += 1
            self.idle_while_empty()
        return ran, last

    def _run_decodes(self) -> tuple[int, Iteration | None]:
        """Run the coming decode-only iterations in one loop: those before the next
        arrival, while no decode needs a KV block that is not free, and until the episode
        ends (or, when requests wait, the first completion). Returns how many ran and the
        last.

        Called at a boundary where no prefill is in progress and every setting runs the
        same decode (nothing waits, or no setting admits anything), with the profile
        executor. Each iteration is the chunked scheduler's decode to the bit: the same
        time, energy, latency and KV-use integrals, summed in the same order, the same
        completions (:meth:`finish`), the rate estimate brought up to every boundary; what
        no boundary reads in between (each request's tokens and blocks, the recent
        windows, the counters) is brought up to date once, at the end. The requests'
        completions are scheduled from their remaining tokens, and their block growth
        from their block phase (:class:`batch_env.llm.state.LLMServerState`), so an iteration
        costs no pass over the running requests. ``tests/test_llm_v2.py`` holds the
        result identical to running each iteration through the scheduler.
        """
        srv = self.state
        R = srv.running
        kv = srv.kv
        bs, total = srv.block_size, kv.total
        K0 = K = srv.decode_steps
        used = kv.used  # kv.used + the blocks taken and not yet committed (pending)
        pending = 0
        counts = [len(bucket) for bucket in srv.block_phase]
        b = len(R)
        if not b or counts[(1 - K) % bs] > total - used:
            return 0, None  # a decode must preempt: the scheduler's own path
        t_next = self.peek_arrival()
        prof = self.profile
        base, per_ctx, pw = prof.decode_step(b)
        ctx = srv.decode_context
        if self.now + (base + per_ctx * ctx) >= t_next:
            return 0, None  # the first iteration admits an arrival (before any setup)
        # requests wait, but no setting admits any (the plan was forced, without chunks);
        # without a completion none will (the cap's room and the budget left stay, the
        # free blocks only shrink), so after a completion the queue's head is tried
        blocked = bool(srv.waiting)
        P, out = srv.prompt, srv.output
        finishing = _completions(R, out, srv.generated)
        now, L, E, kv_int = self.now, self.latency_integral_s, self.energy_j, self.kv_integral
        rate, (rate_t, rate_n) = self.rate_per_s, self.rate_since
        tau, horizon = self.rate_window_s, self.horizon_s
        recent: deque[tuple[float, int]] = deque(maxlen=self.config.recent_iterations)
        done: dict[int, int] = {}  # finished request -> its iteration
        j = tokens = 0
        n_sys = self.in_system
        exp = math.exp
        finished_now: list[int] | None = None
        while True:
            if j:  # the boundary before iteration j: what run_to_epoch checks there
                if now >= horizon or not b:
                    break
                if finished_now and (
                    self.summary_done()
                    or (blocked and self._head_fits(b, used + counts[(1 - K) % bs]))
                ):
                    break  # the episode's end, or the freed room and blocks admit the head
            need = counts[(1 - K) % bs]
            if need > total - used:
                break  # preemption: the scheduler's own path
            d = base + per_ctx * ctx
            energy = d * pw
            t = now + d
            if t >= t_next:
                break  # this iteration admits an arrival: the usual path
            if j:  # the rate estimate at that boundary (update_rate; no arrival came)
                rate = rate * exp(-(now - rate_t) / tau) + 0.0
                rate_t = now
            # the iteration: its blocks, then the clock (advance), then the tokens
            used += need
            pending += need
            dt = t - now
            kv_int += used * dt
            L += n_sys * dt
            E += (energy / d if d > 0.0 else 0.0) * dt
            now = t
            recent.append((d, b))
            tokens += b
            ctx += b
            K += 1
            finished_now = finishing.get(j)
            if finished_now:
                kv.take(pending)  # the decodes' blocks so far, before any is freed
                pending = 0
                for e in finished_now:
                    g = out[e]
                    ctx -= P[e] + g
                    r = (P[e] + g - K) % bs
                    counts[r] -= 1
                    used -= kv.free(e, _grown(K0, r, j + 1, bs))
                    done[e] = j
                    self.finish(e, t)
                b -= len(finished_now)
                n_sys -= len(finished_now)  # as finish did to the loop's count
                if b:
                    base, per_ctx, pw = prof.decode_step(b)
            j += 1
        if not j:
            return 0, None
        self.kv_integral = kv_int
        self.commit_stretch(now, L, E, rate, (rate_t, rate_n))
        kv.take(pending)
        srv.decode_context, srv.decode_steps = ctx, K
        srv.tokens_out += tokens
        self._catch_up(done, j, K0, tokens, recent)
        return j, Iteration(recent[-1][0], "decode", False, recent[-1][1], 0, 0, False)

    def _head_fits(self, decodes: int, used: int) -> bool:
        """Whether the largest setting would schedule a chunk of the first waiting request
        of some admission order, with ``decodes`` requests running, all decoding, and
        ``used`` KV blocks in use once their blocks for the next token are given (the
        chunked scheduler's scan, with no prefill in progress, stops at that first
        request). If it would not, no setting would (monotone)."""
        srv = self.state
        cfg = self.config
        if self.grid[-1] - decodes <= 0:
            return False  # no room under the largest cap
        left = self.budgets[-1] - (decodes if cfg.decode_first else 0)
        free = srv.kv.total - used - srv.kv.watermark
        if left <= 0 or free <= 0:
            return False
        if cfg.split_prompts:
            return True  # a chunk of at least one token fits
        kv = srv.kv
        for order in self.orders:  # the first waiting request each order offers
            e = next(iter(candidates(srv, 1, order)))
            p = srv.prompt[e] + srv.generated[e]
            h, taken = kv.lookup(e, p) if kv.prefix else (0, 0)
            if p - h * srv.block_size <= left and -(-p // srv.block_size) - h + taken <= free:
                return True
        return False

    def _catch_up(
        self, done: dict[int, int], j: int, k0: int, tokens: int, recent: deque[tuple[float, int]]
    ) -> None:
        """After :meth:`_run_decodes`' ``j`` iterations from decode step ``k0``: each
        request's tokens and blocks (``done``: those that completed), the running list,
        the counters and the recent windows, which no boundary read in between."""
        srv = self.state
        P, G, out, kv, phase, bs = (
            srv.prompt,
            srv.generated,
            srv.output,
            srv.kv,
            srv.block_phase,
            srv.block_size,
        )
        keep = []
        for e in srv.running:
            r = (P[e] + G[e] - k0) % bs
            if e in done:  # (its blocks were freed at its completion)
                G[e] = out[e]
                phase[r].remove(e)
            else:
                G[e] += j
                kv.attach(e, _grown(k0, r, j, bs))
                keep.append(e)
        srv.running = keep
        self.iterations += j
        self.count_batches(j, tokens)
        self._recent_many(recent)
        self.last_prefill = 0.0
        self.last_preempted = self.last_chunk_tokens = 0

    # -- what the observation, info and frames read --------------------------------------
    def recent_decode(self) -> tuple[float, int, int]:
        """The recent decode iterations (the last ``recent_iterations``): the sum of their
        times (s), the sum of their batch sizes, and how many there are (0 before the
        first)."""
        return self._recent_time_sum, self._recent_batch_sum, len(self._recent_time_s)

    def rejected_total(self) -> int:
        """Prompts rejected by now (they never fit ``max_model_len``)."""
        return bisect_right(self._rejected_at, self.now) if self._rejected_at else 0

    def past_ttft_waiting(self) -> int:
        """Waiting requests without a first token whose TTFT deadline has passed (at the
        last settled epoch), clipped to the waiting count: the requests past their
        deadline without a first token are waiting, or in their first prefill."""
        w = len(self.state.waiting)
        late = self.sla_books.past_without_first() - self._first_prefills_late()
        return min(max(late, 0), w)

    def _first_prefills_late(self) -> int:
        """Prefills in progress (chunked) of requests that have no first token yet and
        whose TTFT deadline has passed."""
        srv = self.state
        if not srv.prefilling:
            return 0
        G, R, books = srv.generated, srv.running, self.sla_books
        return sum(1 for e in R[len(R) - srv.prefilling :] if G[e] == 0 and books.past_deadline(e))

    def class_counts(self) -> tuple[list[int], list[int], list[float]]:
        """Per class: waiting and running requests, and its oldest waiting request's
        arrival time (``inf``: none waits). The waiting queue is in arrival order but for
        preempted requests at its head, which are older still, so a class's first entry
        in it is its oldest (the queue keeps both per class: O(1), not O(queue))."""
        srv, n = self.state, len(self.classes)
        cls = srv.request_class
        waiting, first = srv.waiting.by_class(n)
        arr = self.arrivals
        oldest = [arr[e] if e >= 0 else math.inf for e in first]
        running = [0] * n
        for e in srv.running:
            running[cls[e]] += 1
        return waiting, running, oldest

    def first_admitted(self, order: str) -> int:
        """The first waiting request ``order`` would admit (requests must be waiting)."""
        return next(iter(candidates(self.state, 1, order)))

    # -- the episode summary ------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The episode summary (``info["serving"]``): the loop's keys (latency =
        end-to-end) and the LLM metrics, per class with several classes
        (:func:`batch_env.metrics.llm_episode_summary`)."""
        win = self.window
        srv = self.state
        w = self.config.reward_weights
        out = llm_episode_summary(
            arrivals=self.arrivals,
            finished_at=self.finished_at,
            first_token=self.sla_books.first_at,
            output=srv.output,
            request_class=srv.request_class,
            window=win,
            entry_hi=self.window_end,
            weights=(w.latency, w.energy, w.sla, w.drop),
            totals=self.totals(),
            counters=self._window_counters(),
            counters_at_start=self._window_counts0,
            kv_total=srv.kv_total,
            rejected_at=self._rejected_at,
            classes=self.classes if self.multi else None,
            ttft_sla_s=self.sla_books.ttft_s,
            tpot_sla_s=self.sla_books.tpot_s,
            class_drops=(self._class_drops_w0, self._class_drops_end, self._class_drops),
        )
        if self.prefix_ratio is not None:
            out.update(prefix_summary(cast("PrefixKVCache", srv.kv), self._prefix0))
        return out


def profile_for(
    profile: str | dict | LLMProfile,
    clock_mhz: float | None,
    config: LLMConfig,
    settings: dict[str, Any],
    executor: str = "profile",
) -> tuple[LLMProfile, LLMConfig]:
    """The server's profile (at the GPU's SM clock ``clock_mhz``; ``None``: its default)
    and its configuration checked against it: ``max_num_seqs`` and the token budget within
    the profile's tables; without a ``max_num_batched_tokens`` among ``settings`` (the
    arguments given), the default budget is cut to the profile's largest prefill.

    :param executor: the env's executor name (a clock grid needs ``"profile"``).
    :raises ValueError: a setting beyond the profile (naming the one given).
    """
    if getattr(config, "clock_grid", None) is not None and executor != "profile":
        raise ValueError(
            f"clock_grid: the SM clock is an action only with executor='profile' (got "
            f"executor={executor!r}); a real executor runs at the device's own clock"
        )
    prof = load_llm_profile(profile)
    if clock_mhz is not None:
        prof = prof.at_clock(clock_mhz)
    prof.check_max_num_seqs(config.max_num_seqs)
    budget = config.max_num_batched_tokens
    assert budget is not None  # LLMConfig.__post_init__ fills the default
    limit = prof.max_batch_tokens
    if settings.get("max_num_batched_tokens") is None and limit is not None:
        # the default budget derives from max_model_len: name what the user set
        if config.max_model_len > limit:
            raise ValueError(
                f"max_model_len={config.max_model_len!r} is out of range: a prompt of up to "
                f"max_model_len - 1 tokens must fit one prefill, and profile '{prof.name}' "
                f"covers prefills of up to {limit} tokens (no extrapolation); expected "
                f"max_model_len <= {limit}"
            )
        if budget > limit:
            config = replace(config, max_num_batched_tokens=limit)
            budget = limit
    prof.check_max_num_batched_tokens(budget)  # the largest (budget_grid's are below it)
    return prof, config


def llm_workload(config: LLMConfig, workload: dict | Workload | None) -> Workload:
    """The server's arrivals: ``workload`` (default
    :data:`batch_env.config.LLM_DEFAULT_WORKLOAD`), or, when the request classes have
    their own workloads, their superposition.

    :raises ValueError: both given, or a ``load`` (not defined for an LLM server).
    """
    own = [c.workload for c in (getattr(config, "classes", None) or ()) if c.workload]
    if own:  # classes with their own arrivals: the server's are their superposition
        if workload is not None:
            raise ValueError(
                f"workload={workload!r}: the classes have their own workloads, so the "
                "env's arrivals are their superposition; give the env no workload (or "
                "give the classes shares of it instead)"
            )
        workload = Superposition(tuple(own))
    if workload is None:
        workload = dict(LLM_DEFAULT_WORKLOAD)
    if isinstance(workload, dict) and "load" in workload:
        raise ValueError(
            f"workload.load={workload['load']!r} is not defined for LLMBatching-v0 (an LLM "
            "server's request throughput depends on the lengths and the policy): give "
            "rate_per_s (or target_rate_per_s for a trace)"
        )
    return make_workload(workload)


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


def _completions(
    running: list[int], output: list[int], generated: list[int]
) -> dict[int, list[int]]:
    """The decoding requests by the iteration (from 0) in which they complete: request
    ``e`` produces its last token ``output[e] - generated[e]`` decodes from now."""
    out: dict[int, list[int]] = {}
    for e in running:
        j = output[e] - generated[e] - 1
        if j in out:
            out[j].append(e)
        else:
            out[j] = [e]
    return out


def _grown(k0: int, r: int, m: int, bs: int) -> int:
    """KV blocks a decoding request of block phase ``r`` gains over ``m`` decode
    iterations from decode step ``k0``: one at each iteration ``j`` with
    ``(1 - k0 - j) % bs == r`` (:class:`batch_env.llm.state.LLMServerState`: block_phase)."""
    j0 = (1 - k0 - r) % bs
    return 0 if j0 >= m else (m - 1 - j0) // bs + 1
