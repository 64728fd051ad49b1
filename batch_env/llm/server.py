"""The LLM server: one simulated inference engine, usable without an env.

:class:`LLMServer` is what the LLM envs drive (vLLM's engine, which holds a scheduler
and a KV-cache manager; vidur's replica). It is built from one validated configuration
(:class:`batch_env.config.LLMConfig`), a profile, a workload and an executor; it draws
its arrivals and their lengths (and classes) from its own streams, admits them, and runs
iterations through the scheduler named in the configuration
(:func:`batch_env.llm.make_scheduler`) as vLLM v1's engine core does: the scheduler plans
and starts an iteration, the server runs the executor, the scheduler applies the result,
and the server moves the clock, records first tokens and frees the completed requests
(:meth:`LLMServer.run_iteration`); no scheduler calls back into it. It owns its parts: the request intake
(:attr:`LLMServer.intake`, :class:`~batch_env.llm.intake.RequestIntake`: each arrival's
lengths, class and prefix hashes), the requests, queues and KV cache
(:attr:`LLMServer.state`, an :class:`~batch_env.llm.state.LLMServerState` whose ``kv`` is
the only writer of block state), the SM clock (:attr:`LLMServer.sm_clock`), the SLA books
(:attr:`LLMServer.sla_books`) and the counters the episode summary reads.

The clock, the arrival stream, the admission with its queue capacity and drops, the
latency and energy integrals and the summary window are the one event loop's
(:class:`batch_env.core.ServingLoop`), which this class extends through its hooks
(``arrival_chunk``, ``absorb``, ``on_mark``, ``misses``, ``summary_done``,
``waiting_count``, ...) and uses through its public operations (``advance``,
``complete``, ``count_batches``, ``use_profile``, ``commit_stretch``): it writes none of
the loop's fields.

Driving it::

    server = LLMServer(config, profile, workload, executor)
    server.reset(seed=0)
    while not server.over():
        ran, last = server.run_to_epoch(cap, budget)   # to the next decision point
        reward, costs, dt_s, arrivals = server.step_accounting()  # what happened in between

:meth:`LLMServer.run_iteration` runs one iteration (``LLMBatching-v0``/``-v1`` ask at
every iteration boundary); :meth:`LLMServer.run_to_epoch` runs until two settings would
schedule different iterations (``LLMBatching-v2``'s decision epochs), running the
decode-only stretches that no setting can change in one loop
(:func:`batch_env.llm.decode_runs.run_decodes`).
Several servers can run side by side, each with its own streams and clock.

Imports: ``batch_env.core`` (the loop), ``batch_env.config``, ``batch_env.executor``,
``batch_env.metrics``, ``batch_env.workload`` and this package; never ``batch_env.envs``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..config import LLM_DEFAULT_WORKLOAD, LLMConfig
from ..core import ServingLoop
from ..executor import LLMExecutor, LLMProfileExecutor
from ..metrics import llm_episode_summary
from ..profiles.llm_profile import load as load_llm_profile
from ..workload import Superposition, make_workload
from .cascade import cascade_rule
from .chunked import ChunkedScheduler
from .clock import SMClock
from .epochs import forced_plan, run_to_epoch
from .intake import RequestIntake
from .orders import FCFS
from .prefixes import counters, prefix_summary
from .registry import make_scheduler
from .scheduler import Iteration, Plan, Started, execute
from .sla import SLABooks
from .state import LLMServerState
from .views import class_counts

if TYPE_CHECKING:
    from ..profiles.llm_profile import LLMProfile
    from ..render import Timeline
    from ..workload import Workload


class WindowBooks(NamedTuple):
    """What a summary of pooled servers needs of one server's summary window beyond its
    entries (:meth:`LLMServer.window_books`): its window counters now and at the
    window's start (``None``: not opened), and its drops per class at the two marks."""

    counters: tuple[int, int, float, int, int, int]
    counters_at_start: tuple[int, int, float, int, int, int] | None
    class_drops_at_start: list[int] | None
    class_drops_at_end: list[int] | None


class LLMServer(ServingLoop):
    """One LLM server (module docstring): the loop, its requests, KV cache and scheduler.

    :param config: the validated configuration (its ``max_num_batched_tokens`` within the
        profile's largest prefill).
    :param profile: the LLM profile (iteration times and power, KV bytes per token).
    :param workload: the arrivals (a trace with token columns may give the lengths).
    :param executor: what runs the iterations: the profile executor, or a real one or a
        function of no argument that builds a real one, called last, once everything else
        is valid (a real executor builds a model).
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
        #: what the server knows of each arrival (lengths, class, prefix hashes)
        self.intake = RequestIntake(config, workload)
        #: the request classes (one, ``"default"``, when the configuration has none) and
        #: whether there are several; the lengths drawn where no class has its own
        self.classes, self.multi = self.intake.classes, self.intake.multi
        self.lengths = self.intake.lengths
        #: blocks per hashed prefix unit of the workload (None: no prefix caching)
        self.prefix_ratio = self.intake.prefix_ratio
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
        self.state = LLMServerState(bs, total, watermark, self.prefix_ratio)
        # (only LLMBatching-v2's configuration offers orders, and so this setting)
        self.state.fcfs_above = getattr(config, "longest_prefix_fcfs_above", None)
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
        self.one_setting = len(self.grid) * len(self.budgets) * len(self.orders) == 1
        #: the GPU's SM clock: its grid, the profile at each clock, the clock in force
        self.sm_clock = SMClock.of(config, profile)
        self.clocked = len(self.sm_clock.grid) > 1  # the clock-aware epoch rule
        self._check_drop_cost()
        self.timeline = timeline
        # what only profile mode simulates, refused before a real executor is built
        simulated = isinstance(executor, LLMProfileExecutor)
        for on, name, why in (
            (self.prefix_ratio is not None, "prefix_caching", "set prefix_caching=False"),
            (self.sm_clock.grid, "clock_grid", "a real executor runs at the device's own clock"),
        ):
            if on and not simulated:
                raise ValueError(
                    f"{name}: simulated in profile mode only (executor='profile'), not with "
                    f"a real executor: {why}"
                )
        # last, once the configuration is valid
        self.executor = executor() if callable(executor) else executor
        options = (
            {"decode_first": config.decode_first, "split_prompts": config.split_prompts}
            | {"cascade": cascade_rule(config, profile, self.prefix_ratio is not None)}
            if config.scheduler == "chunked"
            else {"num_scheduler_steps": config.num_scheduler_steps}
        )
        self.scheduler = make_scheduler(
            config.scheduler, self.state, self.executor.needs_sequences, **options
        )
        #: whether decode-only stretches run in one loop (:func:`~batch_env.llm.decode_runs.run_decodes`): with the
        #: chunked scheduler on the profile executor, outside the frame modes (whose
        #: timeline logs each iteration)
        self.decode_runs = (
            isinstance(self.scheduler, ChunkedScheduler)
            and isinstance(self.executor, LLMProfileExecutor)
            and timeline is None
        )
        self.warn_if_seed_invariant("profile" if simulated else "real", name)

    # -- construction: lengths and classes ------------------------------------------------

    def _check_drop_cost(self) -> None:
        """Warn when a drop costs less than the energy of the cheapest request (one token)."""
        p = self.profile
        n = self.config.max_num_seqs
        self.warn_if_drop_pays(min(p.decode_time_s(b, b) * p.decode_power_w(b) / b for b in (1, n)))

    def draws_beyond_arrivals(self) -> bool:
        """Whether an episode draws request lengths or classes from the seed."""
        return self.intake.draws_beyond_arrivals()

    def arrival_sizes(self, i: int, j: int) -> dict[str, np.ndarray]:
        """The loop's hook: :meth:`RequestIntake.sizes`."""
        return self.intake.sizes(i, j)

    # -- an episode ----------------------------------------------------------------------
    def reset(self, seed: int, options: dict[str, Any] | None = None) -> None:
        """Start an episode: empty the server, seed its streams from ``seed``, and advance
        the clock to the first arrival. ``options``: as :class:`batch_env.core.ServingLoop`'s
        (``{"load": x}`` on a workload with a ``load_range``)."""
        self.intake.clear()
        self._class_drops_w0: list[int] | None = None  # drops per class at the marks
        self._class_drops_end: list[int] | None = None
        self._prefix0: tuple[int, int, int, int] | None = None  # the cache's counters at the window
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
        #: the recent decode iterations' times and batch sizes
        self.recent = RecentDecodes(n)
        #: the setting in force: cap on running requests, token budget, admission order
        self.cap = self.grid[-1]
        self.budget = self.budgets[-1]
        self.order = self.orders[0]
        self.sm_clock.mhz = None
        if self.sm_clock.grid:  # each episode starts at the highest clock, at once
            self.run_at(self.sm_clock.set(len(self.sm_clock.grid) - 1))
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
        if clock_index is not None and self.sm_clock.grid:
            self.run_at(self.sm_clock.request(clock_index, self.now))

    def run_at(self, prof: LLMProfile | None) -> None:
        """Time and power the coming iterations by ``prof``, the profile at the clock now in
        force (:attr:`sm_clock`, the clock's one owner; ``None``: no change)."""
        if prof is None:
            return
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
        """The arrivals of ``chunk`` whose prompts fit ``max_model_len``, their lengths,
        classes and prefix hashes kept by the intake (:meth:`RequestIntake.take`, from the
        request-size stream); the rejected ones leave the stream here (the loop's hook)."""
        return self.intake.take(chunk, self.sizes_rng)

    def resample_future(self, rng: np.random.Generator) -> None:
        """The loop's (future arrivals from the planner's model, with lengths and classes
        drawn from ``rng``), and the output lengths of the requests in the system redrawn
        given the tokens each has generated (:meth:`RequestIntake.outputs_given`: its
        class's lengths, or a trace's own), clipped to ``max_model_len`` as at arrival."""
        i = self.arrival_index
        super().resample_future(rng)
        self.intake.forget_from(i, self.now)
        self.redraw_outputs(rng)

    def redraw_outputs(self, rng: np.random.Generator) -> None:
        """The output lengths of the requests in the system redrawn from ``rng`` given the
        tokens each has generated (a realizable planner's copy: :meth:`resample_future`)."""
        s, fin = self.state, self.finished_at
        live = [e for e in range(self._done_upto, len(fin)) if fin[e] is None]
        if not live:
            return
        cls = np.asarray([s.request_class[e] for e in live], np.int64)
        for c in range(len(self.classes)):
            idx = [live[k] for k in np.flatnonzero(cls == c)]
            if not idx:
                continue
            g = np.asarray([s.generated[e] for e in idx], np.int64)
            new = self.intake.outputs_given(c, rng, g)
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
            prompts, outputs, classes, clipped, units = self.intake.admitted(i, adm)
            ttft = self.sla_books.ttft_s
            deadlines = [a + ttft[c] for a, c in zip(self.arrivals[n0:], classes, strict=True)]
            self.state.admit(prompts, outputs, classes, deadlines, units)
            self.sla_books.admit(classes, self.arrivals[n0:])
            self.clipped += clipped
            self.finished_at += [None] * adm
        if self.multi and j - i > adm:  # dropped by a full queue: the last of the arrivals
            self.intake.dropped(i + adm, j)

    def in_service_count(self) -> int:
        """The running requests."""
        return len(self.state.running)

    def rejected_count(self) -> int:
        """Prompts rejected by now (they never fit ``max_model_len``)."""
        return self.intake.rejected_by(self.now)

    def on_mark(self) -> None:
        """The loop's snapshot at the summary window's marks, plus the server's counters
        and per-class drops."""
        first = self.window is None
        super().on_mark()
        if first:
            self._window_counts0 = self._window_counters()
            self._class_drops_w0 = list(self.intake.class_drops)
            if self.prefix_ratio is not None:
                self._prefix0 = counters(self.state)
        else:
            self._class_drops_end = list(self.intake.class_drops)

    def window_books(self) -> WindowBooks:
        """Its summary window's counters and per-class drops (:class:`WindowBooks`)."""
        return WindowBooks(
            self._window_counters(),
            self._window_counts0,
            self._class_drops_w0,
            self._class_drops_end,
        )

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

    # -- the requests' milestones ---------------------------------------------------------
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
        return self.end_iteration(self.begin_iteration(cap, budget, plan))

    def begin_iteration(self, cap: int, budget: int, plan: Plan | None = None) -> Started:
        """The first half of :meth:`run_iteration`, at this boundary: the scheduler plans
        (``plan``: the plan made here) and starts the iteration, the executor runs it and
        the scheduler applies the result. The clock stays here until
        :meth:`end_iteration` (a cluster routes the arrivals before the end in between:
        :class:`batch_env.llm.cluster.LLMCluster`)."""
        sch, ex = self.scheduler, self.executor
        self.last_chunk_tokens = 0
        work = sch.start(sch.plan(cap, budget, self.order) if plan is None else plan)
        if work.victims and ex.needs_sequences:
            ex.release(list(work.victims))  # recompute: their KV cache is dropped
        # (execute(ex, work), written out: the hot path's commonest kind first)
        d, energy = ex.mixed(*work.args) if work.kind == "mixed" else execute(ex, work)
        return Started(sch.apply(work, d), energy / d if d > 0.0 else 0.0, self.now + d)

    def end_iteration(self, started: Started) -> Iteration:
        """The second half of :meth:`run_iteration`: the clock to the iteration's end (its
        arrivals admitted), first tokens recorded, completed requests freed; the counters."""
        (it, first, finished, tokens_at_end), power_w, t = started
        ex = self.executor
        if not it.empty:  # the clock to its end; then its completed requests leave
            for e in first:
                self.sla_books.first_token(e, t)
            self.advance(t, power_w)
            self.state.tokens_out += tokens_at_end
            kv = self.state.kv
            for e in finished:
                kv.free(e)
                self.finish(e, t)
            if finished and ex.needs_sequences:
                ex.release(finished)
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
                self.recent.add(d, b)
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
        is no decision epoch), else ``None`` (:func:`batch_env.llm.epochs.forced_plan`)."""
        return forced_plan(self, cap, budget)

    def idle_while_empty(self) -> None:
        """An empty system idles to the next arrival (no decision is needed); a finite
        trace that has ended moves the clock to the horizon (the episode then ends)."""
        while self.in_system == 0:
            if not self.idle_until_arrival():
                break

    # -- to the next decision epoch --------------------------------------------------------
    def run_to_epoch(
        self, cap: int, budget: int, chosen: bool = True
    ) -> tuple[int, Iteration | None]:
        """Run iterations from this boundary until a decision epoch or the episode's end
        (:func:`batch_env.llm.epochs.run_to_epoch`): the first one whatever it is when
        ``chosen``, then every one that all settings would run alike. Returns how many ran
        and the last."""
        return run_to_epoch(self, cap, budget, chosen)

    # -- what the observation, info and frames read --------------------------------------
    def recent_decode(self) -> tuple[float, int, int]:
        """The recent decode iterations (the last ``recent_iterations``): the sum of their
        times (s), the sum of their batch sizes, and how many there are (0 before the
        first)."""
        r = self.recent
        return r.time_sum, r.batch_sum, len(r.time_s)

    def rejected_total(self) -> int:
        """Prompts rejected by now (they never fit ``max_model_len``)."""
        return self.intake.rejected_by(self.now)

    def class_counts(self) -> tuple[list[int], list[int], list[float]]:
        """Per class: waiting and running requests, and its oldest waiting request's
        arrival (:func:`batch_env.llm.views.class_counts`)."""
        return class_counts(self)

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
            rejected_at=self.intake.rejected_at,
            classes=self.classes if self.multi else None,
            ttft_sla_s=self.sla_books.ttft_s,
            tpot_sla_s=self.sla_books.tpot_s,
            class_drops=(self._class_drops_w0, self._class_drops_end, self.intake.class_drops),
        )
        if self.prefix_ratio is not None:
            out.update(prefix_summary(srv, self._prefix0, self.config.cascade_attention))
        return out


def profile_for(
    profile: str | dict | LLMProfile,
    clock_mhz: float | None,
    settings: dict[str, Any],
    config_class: type[LLMConfig] = LLMConfig,
) -> tuple[LLMProfile, LLMConfig]:
    """The server's profile (at the GPU's SM clock ``clock_mhz``; ``None``: its default)
    and its configuration built from ``settings`` (``config_class``'s fields) for it: the
    default token budget within the profile's largest prefill (settled by the
    configuration, :class:`batch_env.config.LLMConfig`), ``max_num_seqs`` and the budget
    checked against the profile's tables.

    :raises ValueError: an invalid setting, or one beyond the profile (naming it).
    """
    prof = load_llm_profile(profile)
    if clock_mhz is not None:
        prof = prof.at_clock(clock_mhz)
    config = config_class(**settings, profile_max_batch_tokens=prof.max_batch_tokens)
    prof.check_max_num_seqs(config.max_num_seqs)
    assert config.max_num_batched_tokens is not None  # the configuration settles it
    prof.check_max_num_batched_tokens(config.max_num_batched_tokens)  # (budget_grid's are below)
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


class RecentDecodes:
    """The last ``n`` decode iterations' times and batch sizes, and their sums (what the
    observation's and ``info``'s recent decode latency and batch size read)."""

    __slots__ = ("time_s", "batch", "time_sum", "batch_sum")

    def __init__(self, n: int) -> None:
        self.time_s: deque[float] = deque(maxlen=n)
        self.batch: deque[int] = deque(maxlen=n)
        self.time_sum = 0.0  # the sums, kept as they change
        self.batch_sum = 0

    def add(self, d: float, b: int) -> None:
        """A decode iteration of ``d`` seconds and batch ``b`` (the sums: the same ``sum``
        the observation would take)."""
        rb = self.batch
        if len(rb) == rb.maxlen:
            self.batch_sum -= rb[0]  # integers: the running sum is exact
        rb.append(b)
        self.batch_sum += b
        self.time_s.append(d)
        self.time_sum = sum(self.time_s)  # floats: summed afresh

    def add_many(self, pairs: deque[tuple[float, int]]) -> None:
        """:meth:`add` for each ``(time, batch)`` of ``pairs`` in turn (at most the
        windows' length of them), the sums taken once at the end: the same sums, since
        both are sums of the final windows' contents (exact for the integer one)."""
        rd, rb = self.time_s, self.batch
        for d, b in pairs:
            rd.append(d)
            rb.append(b)
        self.batch_sum = sum(rb)
        self.time_sum = sum(rd)
