"""The one event loop shared by every batching environment.

:class:`ServingCore` owns the simulated clock, the arrival stream, the FIFO queue, the
counters that make up the reward (latency integral, energy, SLA misses, drops) and the
summary window, and implements the normative event semantics of ``docs/design.md``. Concrete
environments (``envs/``) subclass it and only decide what a step does: wait until the
next epoch (:meth:`ServingCore.advance`), start a batch (:meth:`_start_batch`), finish
it (:meth:`_finish_batch`).

Data layout (chosen for speed: the hot path is C-level list operations, no per-request
Python loop):

* ``_buf``: arrival times of every arrival generated so far (global arrival index);
  ``arrival_index`` is the next arrival not yet processed.
* ``arrivals``: arrival times of *admitted* requests ("entries", in arrival order);
  ``started`` entries have started service, so the waiting queue is ``arrivals[started:]``.
* ``_comp``: completion time of the first ``_nk`` entries, the ones whose completion time
  is known. Whole-model batches know it when they start (the executor returns the
  duration before the clock moves), so ``_nk == started`` at every epoch of
  ``DynamicBatching-v0``; node-level groups learn it when their last node finishes, so
  there ``_nk`` trails ``started`` by the requests in flight. Completion is FIFO in both.

SLA misses. A request misses when ``completion - arrival > sla`` (latency equal to the
SLA meets it), and the miss is counted when its deadline passes. Misses of the ``_nk``
entries with known completion are in ``_served_missed``; since deadlines are monotone in
arrival order, the cumulative number of misses whose deadline has passed at an epoch
``t`` is ``served_missed + #(entries past _nk with t - arrival > sla)``: an entry whose
completion is unknown at ``t`` and whose deadline has passed has missed.

Summary window (docs/design.md: Episodes). Arrival numbers ``warmup`` .. ``warmup + horizon - 1``
are the summary requests. The loop snapshots its cumulative totals at the exact instant
the first summary request arrives (splitting a step if need be) and the admitted-entry
count just after the last one, so window totals are exact differences. The summary also
counts the whole episode (``arrived_total``, ``completed_total``, ``dropped_total`` and the
requests outside the window), and a summary that hides something (no summary request
completed, or drops outside the window) comes with a
:class:`batch_env.metrics.SummaryWarning` (:mod:`batch_env.metrics`: Outside the window,
Warnings).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from .checks import ArgumentError, check_number, init_arguments
from .config import DEFAULT_WORKLOAD, ServingConfig
from .metrics import SeedWarning, WindowStart, summarize, warn_summaries
from .planning import PLANNING_CHUNK, ShiftedStream, future_model, planning_copy
from .profiles.batch_profile import Profile
from .profiles.batch_profile import load as load_profile
from .render import HumanWindow, ServerView
from .workload import ArrivalStream, Workload, make_workload

if TYPE_CHECKING:
    from .executor import Executor, LLMExecutor

_INF = math.inf
_BEFORE_RESET = "call reset() before step(), action_masks() or render()"
_AFTER_END = "the episode ended (truncated=True): call reset() before step()"


def _fixed_arrivals(workload: Workload) -> bool:
    """Whether a workload's arrivals are the same for every seed: a trace without
    ``random_offset``, or a superposition of such traces."""
    parts = getattr(workload, "parts", None)
    if parts is not None:
        return all(_fixed_arrivals(p) for p in parts)
    return getattr(workload, "kind", None) == "trace" and not getattr(
        workload, "random_offset", True
    )


class ServingEnv(gym.Env):
    """Gymnasium's side of every batch-env env: argument checks, the order of calls,
    render modes, actions, configuration.

    Order of calls (Gymnasium's convention, enforced here so that it also holds without
    ``gymnasium.make``'s wrappers): ``step``, ``action_masks`` and ``render`` before the
    first ``reset`` raise :class:`gymnasium.error.ResetNeeded`, and so does ``step`` after
    the step that returned ``truncated=True``.

    Hooks: ``_render_text()``, ``_make_view()`` and ``_render_frame(view)``: the frames,
    called by :meth:`render`.
    """

    #: Why the env cannot step now (``None``: it can). Set until the first ``reset``, and
    #: again by the step that ends an episode; ``reset`` clears it.
    _needs_reset: str | None = _BEFORE_RESET
    #: Every env's actions are integers (``Discrete``), which :meth:`_coerce_action` checks.
    action_space: gym.spaces.Discrete
    #: What executes the batches (built in ``__init__``); each env narrows the type.
    executor: Executor | LLMExecutor
    #: What :meth:`get_config` reports: the profile, workload and configuration the env
    #: was built with, and its time horizon (set in ``__init__``).
    profile: Any
    workload: Workload
    config: Any
    horizon_s: float

    #: The workload's mean load (mean arrival rate / max throughput; None on an LLM server,
    #: where load is not defined). On a workload that draws its load per episode (a
    #: ``load_range``) it is the range's midpoint, not an episode's load: that one is hidden
    #: from policies, and shown only to oracles, as ``info["oracle"]["load"]`` with
    #: ``oracle_info=True``.
    mean_load: float | None = None

    @property
    def load(self) -> float | None:
        """The workload's mean load: :attr:`mean_load` (the old name). On a workload that
        draws its load per episode it warns that it is not the episode's load."""
        if getattr(self.workload, "load_range", None) is not None:
            warnings.warn(
                f"{type(self).__name__}.load is the workload's mean load ({self.mean_load:.4g}, "
                "the midpoint of its load_range), not the load this episode drew: read "
                "mean_load for the mean; an episode's drawn load is info['oracle']['load'] on an "
                "env made with oracle_info=True (hidden from policies)",
                stacklevel=2,
            )
        return self.mean_load

    #: The benchmark task this env was made as (its id; None: not a task). A task's
    #: registration passes ``task=<id>`` with its fixed kwargs (:mod:`batch_env.tasks`).
    task: str | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> ServingEnv:
        """Refuse unknown keyword arguments, listing the allowed ones (Python's own
        ``TypeError`` names only the first bad key), and, with ``task=<id>``, any kwarg
        that would change that task's problem
        (:func:`batch_env.tasks.check_task_kwargs`)."""
        env_cls: type = cls
        unknown = sorted(set(kwargs) - init_arguments(env_cls))
        if unknown:
            raise ArgumentError(
                f"{cls.__name__}: unknown argument(s) {unknown}: allowed arguments are "
                f"{sorted(init_arguments(env_cls))}"
            )
        if kwargs.get("task") is not None:
            from .tasks import check_task_kwargs

            check_task_kwargs(kwargs["task"], kwargs, cls.__name__)
        return super().__new__(cls)

    def _refuse(self, call: str) -> None:
        """Raise :class:`gymnasium.error.ResetNeeded`: ``call`` is not allowed now."""
        raise ResetNeeded(f"{type(self).__name__}.{call}: {self._needs_reset}")

    def _check_started(self, call: str) -> None:
        """Refuse ``call`` (``action_masks``, ``render``) before the first ``reset``."""
        if self._needs_reset is _BEFORE_RESET:
            self._refuse(call)

    # -- construction -------------------------------------------------------------------
    def _set_render_mode(self, render_mode: str | None) -> None:
        """Check and set ``render_mode`` (``ValueError`` naming the allowed values)."""
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is invalid: allowed values are "
                f"{[None] + self.metadata['render_modes']}"
            )
        self.render_mode = render_mode
        self._view: ServerView | None = None  # the frame layout, built on the first frame
        self._human: HumanWindow | None = None  # the window of render_mode="human"

    def render(self) -> str | np.ndarray | None:
        """The current state, as ``render_mode`` asks (Gymnasium's convention).

        * ``"ansi"``: a line of text;
        * ``"rgb_array"``: an ``H x W x 3`` uint8 image (a new array each call; see
          :mod:`batch_env.render` and ``docs/render.md``);
        * ``"human"``: shows that image in a window, or prints the text when no display
          is available (warning once), and returns ``None``; ``reset`` and ``step`` call
          it by themselves in this mode;
        * ``None``: returns ``None``.

        Before the first ``reset`` it raises :class:`gymnasium.error.ResetNeeded`.
        """
        mode = self.render_mode
        if mode is None:
            return None
        self._check_started("render")
        if mode == "ansi":
            return self._render_text()
        if self._view is None:
            self._view = self._make_view()
        frame = self._render_frame(self._view)
        if mode == "rgb_array":
            return frame
        if self._human is None:
            self._human = HumanWindow(type(self).__name__, self.metadata["render_fps"])
        self._human.show(frame, self._render_text())
        return None

    def _coerce_action(self, action: Any) -> int:
        """An integer action in the action space, or ``ValueError`` naming the value."""
        high = int(self.action_space.n) - 1
        try:
            arr = np.asarray(action)
            if (
                arr.shape != ()
                or arr.dtype.kind not in "iub"
                and not (
                    arr.dtype.kind == "f" and math.isfinite(float(arr)) and float(arr).is_integer()
                )
            ):
                raise TypeError
            a = int(arr)
        except (TypeError, ValueError):
            raise ValueError(
                f"action={action!r} is invalid: expected an integer in 0..{high}"
            ) from None
        if a < 0 or a > high:
            raise ValueError(f"action={action!r} is out of range: expected an integer in 0..{high}")
        return a

    def close(self) -> None:
        """Release the executor's resources (a real model, an energy meter) and close the
        ``"human"`` window; idempotent."""
        executor = getattr(self, "executor", None)  # None when construction failed before it
        if executor is not None:
            executor.close()
        human = getattr(self, "_human", None)
        if human is not None:
            human.close()
        super().close()

    def get_config(self) -> dict[str, Any]:
        """The env's resolved configuration (profile name, workload, config fields)."""
        return {
            "profile": self.profile.name,
            "workload": self.workload.to_dict(),
            **self.config.to_dict(),
            "horizon_s": self.horizon_s,
            "load": self.mean_load,
            **getattr(self, "_executor_spec", {}),
        }

    def _record_executor(
        self,
        executor: str,
        model: str | None,
        torch_device: str,
        executor_options: dict | None,
    ) -> None:
        """Record how ``self.executor`` was built, for :meth:`get_config` (a real one's
        model, device, options and metadata too)."""
        self._executor_spec: dict[str, Any] = {"executor": executor}
        if executor != "profile":
            self._executor_spec.update(
                model=model,
                torch_device=torch_device,
                executor_options=dict(executor_options or {}),
                executor_metadata=self.executor.metadata(),
            )

    @property
    def engine(self) -> ServingLoop:
        """The event loop this env runs (the env itself for the whole-model and node-level
        envs; the LLM envs' :class:`batch_env.llm.LLMServer`)."""
        return cast("ServingLoop", self)

    def fork(self, rng: np.random.Generator | None = None) -> ServingEnv:
        """A copy of this env at this decision epoch, for a planner to step: nothing
        done to the copy changes this env (:mod:`batch_env.planning`).

        :param rng: ``None``: a clairvoyant copy, which replays this env's true future
            (its own random streams: for oracles only). A generator: a realizable copy,
            whose every random stream is a fresh one drawn from ``rng``, whose arrivals
            after now come from the planner's model of the workload
            (:func:`batch_env.planning.future_model`), and whose requests in the system
            have what a server cannot know of them redrawn
            (:meth:`ServingLoop.resample_future`).
        :raises gymnasium.error.ResetNeeded: before the first ``reset`` and after the
            episode ended.
        :raises ValueError: on an env that executes batches for real (a planner's copies
            simulate).
        """
        if self._needs_reset is not None:
            self._refuse("fork")
        if getattr(self, "_executor_spec", {}).get("executor", "profile") != "profile":
            raise ValueError(
                f"executor={self._executor_spec['executor']!r}: fork() copies a simulated env "
                "only (executor='profile'); plan on a profile-backed twin of the env"
            )
        display = (self._view, self._human, getattr(self.engine, "timeline", None))
        twin = cast("ServingEnv", planning_copy(self, rng, display))
        twin.render_mode = None
        if rng is not None:
            twin.engine.resample_future(rng)
        return twin

    def upcoming_input(self, n: int) -> dict[str, np.ndarray]:
        """The episode's next ``n`` arrivals, which its seed fixed at ``reset`` whatever
        the actions (``docs/input_replay.md``): ``"dt_s"``, each one's time from now, and
        on the LLM envs ``"prompt_tokens"``, ``"output_tokens"`` (as served: clipped to
        ``max_model_len``; prompts that cannot fit are rejected at arrival and not listed)
        and ``"request_class"``. Fewer where the workload ends first. For a critic given
        the input (an input-dependent baseline); a policy that reads it is clairvoyant.

        :param n: how many, ``0..1_000_000``.
        :raises gymnasium.error.ResetNeeded: before the first ``reset``.
        """
        self._check_started("upcoming_input")
        check_number("n", n, low=0, high=1_000_000, integer=True)
        return self.engine.upcoming(int(n))

    def _checked_action(self, action: Any) -> int:
        """``action`` as an integer of the action space (:meth:`_coerce_action`), once
        ``step`` is allowed (:class:`gymnasium.error.ResetNeeded` before ``reset`` and
        after the step that ended the episode)."""
        if self._needs_reset is not None:
            self._refuse("step")
        if type(action) is not int or action < 0 or action >= self.action_space.n:
            action = self._coerce_action(action)
        return action

    def _end_episode(self, summary: dict[str, Any], now_s: float) -> None:
        """The episode ended at ``now_s`` with ``summary``: ``step`` is refused until
        ``reset``, and a summary that hides something warns (:meth:`_warn_summary`)."""
        self._episode_ended()
        self._warn_summary(summary, now_s, stacklevel=5)

    def _warn_summary(self, summary: dict[str, Any], now_s: float, stacklevel: int = 4) -> None:
        """Warn once for this episode if its summary hides something (metrics: Warnings)."""
        name = self.spec.id if self.spec is not None else type(self).__name__
        warn_summaries(summary, f"{name} episode ending at t={now_s:.6g} s", stacklevel=stacklevel)

    def _episode_seed(self, seed: int | None) -> int:
        """An episode's seed (``None``: one drawn from ``np_random``); ``step`` is refused
        from now until the reset is complete (:meth:`_episode_started`)."""
        if seed is None:
            seed = int(self.np_random.integers(0, 2**63 - 1))
        self._needs_reset = _BEFORE_RESET
        return seed

    def _episode_started(self) -> None:
        """The reset is complete: ``step`` is allowed."""
        self._needs_reset = None

    def _episode_ended(self) -> None:
        """The episode ended: ``step`` is refused until ``reset``."""
        self._needs_reset = _AFTER_END

    def _render_text(self) -> str:
        """The ``"ansi"`` text (each env its own)."""
        raise NotImplementedError

    def _make_view(self) -> ServerView:
        """The env's frame layout (captions of its panels)."""
        raise NotImplementedError

    def _render_frame(self, view: ServerView) -> np.ndarray:
        """Draw the current state with ``view`` and return the frame."""
        raise NotImplementedError


class ServingLoop:
    """The loop: clock, arrivals, FIFO queue, reward counters, summary window.

    Not an env: :class:`ServingCore` puts Gymnasium's side on it for the whole-model and
    node-level envs, and the LLM server (:class:`batch_env.llm.LLMServer`) is one of its
    own, which the LLM envs hold. ``setup_loop`` in construction, ``_reset_core`` at an
    episode's start, then the loop's :meth:`advance`, :meth:`_wait`, :meth:`_start_batch`,
    :meth:`_admit`, :meth:`_record_completions`, :meth:`_finish_batch` and
    :meth:`step_accounting`, and :meth:`over` at each epoch.

    Extension hooks (the last section of this class; a subclass overrides them and reaches
    the base behaviour with ``super()``; the rest of the class is the loop and is not
    overridden)

    * ``to_first_arrival()``: at an episode's start, draw the first arrivals and idle to
      the first (a cluster's replica, whose arrivals are routed to it, does nothing).
    * ``more_arrivals() -> bool``: append the next chunk of arrivals to ``_buf`` (the LLM server
      adds each arrival's lengths and rejects prompts that cannot fit).
    * ``absorb(t_end, j, power_w)``: move the clock, admitting or dropping arrivals up to
      index ``j`` (the LLM server also admits the new entries' lengths and integrates KV use).
    * ``on_mark()``: snapshot at the summary window's start and end marks (the LLM server
      adds its token and iteration counters).
    * ``in_service_count()`` and ``rejected_count()``: requests in service, and arrivals
      rejected before admission, for :meth:`request_counts` (0 and 0 here).
    * ``misses()`` and ``misses_at(t)``: cumulative SLA misses whose deadline has
      passed (at an epoch; at any instant); the LLM server counts TTFT and TPOT misses.
    * ``summary_done()``: every summary request has completed or been dropped.
    * ``_serving_summary()``: ``info["serving"]`` at the end of an episode.
    """

    #: What executes the batches (built in ``__init__``); each subclass narrows the type.
    executor: Executor | LLMExecutor

    def setup_loop(self, profile: Profile, workload: Workload, config: ServingConfig) -> None:
        """Construction: the profile, workload and configuration the loop runs (an LLM
        server passes its own, which share what the loop reads), the reward weights,
        queue capacity, idle power, ticks, horizon, rate window and summary marks."""
        self.profile = profile
        self.workload = workload
        self.config = config
        w = config.reward_weights
        self._wl, self._we, self._ws, self._wd = w.latency, w.energy, w.sla, w.drop
        self._sla = config.sla_ms / 1000.0
        self.queue_capacity = config.queue_capacity
        self.idle_power_w = (
            float(config.idle_power_w) if config.idle_power_w is not None else profile.idle_power_w
        )
        self._tick = (
            config.decision_interval_ms / 1000.0
            if config.decision_interval_ms is not None
            else None
        )
        self.mean_rate_per_s = float(workload.mean_rate_per_s)
        n_sum = config.warmup_requests + config.horizon_requests
        self.horizon_s = (
            float(config.horizon_s)
            if config.horizon_s is not None
            else 10.0 * n_sum / self.mean_rate_per_s
        )
        self.rate_window_s = (
            config.rate_window_s
            if config.rate_window_s is not None
            else 200.0 / self.mean_rate_per_s
        )
        self._first_summary = config.warmup_requests
        self._end_summary = n_sum

    # -- episode start --------------------------------------------------------------------
    def draws_beyond_arrivals(self) -> bool:
        """Whether an episode draws anything from the seed besides its arrivals (here:
        lognormal service times; the LLM env adds its request lengths and classes)."""
        return getattr(self.config, "service", "deterministic") != "deterministic"

    def warn_if_seed_invariant(self, executor: str, name: str | None = None) -> None:
        """Warn once, at construction, where no seed can change an episode: arrivals from a
        trace without ``random_offset`` (every episode starts at the trace's first record)
        and nothing else drawn (a profile executor; real execution's measured times vary)."""
        if executor != "profile" or not _fixed_arrivals(self.workload):
            return
        if self.draws_beyond_arrivals():
            return
        warnings.warn(
            f"{name or type(self).__name__}: every seed gives the same episode: the workload is a trace "
            "without random_offset (each episode starts at its first record) and nothing else "
            "is drawn; an evaluation over seeds will report a spread of 0. Set random_offset: "
            "true on the trace to draw a start per seed",
            SeedWarning,
            stacklevel=4,
        )

    def episode_workload(self, options: dict[str, Any] | None) -> Workload:
        """This episode's workload: the env's, or, with ``options={"load": x}`` on a
        workload with a ``load_range``, that workload at load ``x`` for this episode (an
        evaluator fixing the loads of its episodes; the policy is not told).

        :raises ValueError: for another option, a workload without a load range, or a
            load outside it.
        """
        if not options:
            return self.workload
        if not isinstance(options, dict) or set(options) - {"load"}:
            raise ValueError(
                f"options={options!r} is invalid: the only reset option is 'load' (a load "
                "within the workload's load_range)"
            )
        rng = getattr(self.workload, "load_range", None)
        if rng is None:
            raise ValueError(
                f"options['load']={options['load']!r} is invalid here: the workload has no "
                "load_range (a workload spec with 'load_range' draws a load per episode)"
            )
        load = check_number("options['load']", options["load"], low=rng[0], high=rng[1])
        return dataclasses.replace(self.workload, load_range=(float(load), float(load)))

    def start_loop(
        self, seed: int, options: dict[str, Any] | None = None
    ) -> tuple[np.random.Generator, np.random.Generator]:
        """Seed the streams, reset the executor and advance to the first arrival.

        :param seed: the episode's seed (its three streams are spawned from it).
        :param options: the reset's options (:meth:`episode_workload`).

        :returns: the service-time and request-size generators (the arrival stream is
            consumed here; the service stream is handed to the executor).
        """
        arrivals, service, sizes = (
            np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(seed).spawn(3)
        )
        self.sizes_rng = sizes  # read by arrival_chunk() where requests have sizes
        self._stream: ArrivalStream = self.episode_workload(options).stream(arrivals)
        self._buf: list[float] = []
        self._ended = False
        self.arrival_index = 0
        self.arrivals: list[float] = []
        self._comp: list[float] = []
        self.started = 0
        self._nk = 0
        self.completed = 0
        self.in_system = 0
        self.now = 0.0
        self.latency_integral_s = 0.0
        self.energy_j = 0.0
        self.drops = 0
        self._served_missed = 0
        self._kd = 0  # entries [0, _kd) have passed their deadline
        self.batches = 0
        self.batched = 0
        self._arrived = 0  # arrivals processed, for the rate estimate
        self.rate_per_s = self.mean_rate_per_s
        self._marks = [self._first_summary, self._end_summary]
        self._mark = self._marks[0]
        self.window: WindowStart | None = None
        self.window_end: int | None = None
        self._drops_at_end_mark: int | None = None
        self.to_first_arrival()
        self._base = (
            self.latency_integral_s,
            self.energy_j,
            self.misses(),
            self.drops,
            self.now,
            self._arrived,
        )
        self.rate_since = (self.now, self._arrived)
        self.executor.reset(service)
        return service, sizes

    @property
    def queue_len(self) -> int:
        """Requests waiting now (not counting those in service)."""
        return self.waiting_count()

    def waiting_count(self) -> int:
        """Requests waiting now, as admission's queue capacity counts them: the entries
        after ``started`` (the queue is FIFO here); an engine whose queue is not (the LLM
        server) says its own."""
        return len(self.arrivals) - self.started

    def past_sla_waiting(self) -> int:
        """Waiting requests that have already waited longer than the SLA (they will miss
        it whatever is done now); 0 on an env without a latency SLA."""
        sla = getattr(self, "_sla", None)
        if sla is None:
            return 0
        return int(np.sum(self.now - np.asarray(self.arrivals[self.started :]) > sla))

    def request_counts(self) -> dict[str, int]:
        """Where every request that has arrived is now (docs/design.md: Request life cycle).

        ``arrived == completed + waiting + in_service + dropped + rejected`` holds at every
        epoch, and ``in_system == waiting + in_service``; the counts come from separate
        bookkeeping (arrival counter, completion counter, the queue, what is in service, the
        drop counter, the latency integral's request count), so the identities are checks.
        ``rejected`` counts LLM prompts that can never fit (0 elsewhere).
        """
        rejected = self.rejected_count()
        return {
            "arrived": self._arrived + rejected,
            "completed": self.completed,
            "waiting": self.queue_len,
            "in_service": self.in_service_count(),
            "dropped": self.drops,
            "rejected": rejected,
            "in_system": self.in_system,
        }

    # -- arrivals -------------------------------------------------------------------------
    def _next_arrival(self) -> float:
        """Time of the next unprocessed arrival (``inf`` when a finite trace ended).

        When a finite trace has delivered its last arrival, every summary request that
        will ever arrive has arrived: the end mark is taken then, so the episode can end
        as soon as they are served.
        """
        if self.arrival_index >= len(self._buf) and not self.more_arrivals():
            if self.window_end is None:
                self.take_end_mark()
            return _INF
        return self._buf[self.arrival_index]

    def peek_arrival(self) -> float:
        """Time of the next unprocessed arrival, drawing more of the stream if need be
        (``inf`` when it ended); unlike :meth:`_next_arrival`, it takes no end mark."""
        i = self.arrival_index
        return self._buf[i] if i < len(self._buf) or self.more_arrivals() else _INF

    def take_end_mark(self) -> None:
        """The summary window's end mark, now: the entries admitted so far are the last
        summary requests (every arrival of a finite trace has come; a cluster's arrivals
        have ended)."""
        self.window_end = len(self.arrivals)
        self._drops_at_end_mark = self.drops
        self._mark = 1 << 62

    # -- arrivals routed to the loop (a cluster's replica: batch_env.llm.cluster) ------------
    def marks_from_outside(self) -> None:
        """At an episode's start: the summary window's marks are taken by the caller
        (:meth:`mark_at`, :meth:`take_end_mark`), not at arrival counts of this loop."""
        self._marks = [1 << 62, 1 << 62]
        self._mark = 1 << 62

    def push_arrival(self, t: float) -> None:
        """An arrival at ``t`` (not before any pushed earlier) joins the buffer, to be
        admitted when the clock reaches it (a loop whose ``more_arrivals`` draws none)."""
        self._buf.append(t)

    @property
    def unadmitted(self) -> int:
        """Buffered arrivals not yet admitted or dropped."""
        return len(self._buf) - self.arrival_index

    def pending_latency(self, t: float) -> float:
        """The latency its requests accrue from its clock to ``t`` (>= the clock), not yet
        integrated: those in the system for the whole span, each buffered arrival not yet
        admitted from its arrival time (counted until it is admitted or dropped)."""
        i = self.arrival_index
        j = bisect_right(self._buf, t, i)
        return self.in_system * (t - self.now) + (j - i) * t - math.fsum(self._buf[i:j])

    def next_unadmitted(self) -> float:
        """The first buffered arrival not yet admitted (``inf``: none), drawing nothing."""
        i = self.arrival_index
        return self._buf[i] if i < len(self._buf) else _INF

    def admit_through(self, t: float, power_w: float) -> None:
        """Move the clock to ``t`` at ``power_w``, admitting the buffered arrivals up to
        ``t`` (:meth:`absorb`; no mark is taken)."""
        self.absorb(t, bisect_right(self._buf, t, self.arrival_index), power_w)

    def mark_at(self, t: float, power_w: float) -> None:
        """The summary window's next mark at ``t`` (at or after every buffered arrival):
        the clock moves there at ``power_w``, the buffered arrivals are admitted, and the
        window's start (or end) is taken, as :meth:`advance` does at a mark's arrival."""
        self.absorb(t, len(self._buf), power_w)
        self.on_mark()

    def upcoming(self, n: int) -> dict[str, np.ndarray]:
        """The next ``n`` arrivals after now (fewer where the stream ends first):
        ``"dt_s"``, each one's time from now, and what :meth:`arrival_sizes` knows of them.
        Exact and free of side effects on what follows: the stream's chunks, and the sizes
        drawn for them, are drawn in the order an episode draws them anyway, so looking
        ahead only draws them earlier (``tests/test_input_replay.py``)."""
        i = self.arrival_index
        while len(self._buf) < i + n and self.more_arrivals():  # each call adds arrivals
            pass
        j = min(len(self._buf), i + n)
        dt = np.asarray(self._buf[i:j], np.float64) - self.now
        return {"dt_s": dt, **self.arrival_sizes(i, j)}

    def arrival_sizes(self, i: int, j: int) -> dict[str, np.ndarray]:
        """What is known of buffered arrivals ``i .. j - 1`` besides their times (the LLM
        server: their lengths and classes); nothing here."""
        return {}

    def resample_future(self, rng: np.random.Generator) -> None:
        """Replace what this loop has drawn of its future with draws from ``rng``: the
        arrivals after now come from :func:`batch_env.planning.future_model` (the
        buffered ones not yet arrived are forgotten). A realizable planner's copy
        (:meth:`ServingEnv.fork`); the LLM server also redraws its requests' output
        lengths."""
        del self._buf[self.arrival_index :]
        model = future_model(self.workload, self.rate_per_s)
        self._stream = ShiftedStream(model.stream(rng, PLANNING_CHUNK), self.now)
        self._ended = False

    # -- the clock ------------------------------------------------------------------------
    def advance(self, t_end: float, power_w: float) -> None:
        """Move the clock to ``t_end`` at ``power_w``, admitting or dropping arrivals.

        Arrivals at exactly ``t_end`` are processed (they join before the decision). The
        queue does not drain inside the interval (service is non-preemptive and batches
        start only at epochs), so arrivals are admitted while there is room, in bulk.
        """
        buf = self._buf
        j = bisect_right(buf, t_end, self.arrival_index)
        while j == len(buf) and self.more_arrivals():
            j = bisect_right(buf, t_end, self.arrival_index)
        while self._mark < j:
            self.absorb(buf[self._mark], self._mark, power_w)
            self.on_mark()
        self.absorb(t_end, j, power_w)

    def _wait(self) -> None:
        """Idle until the next epoch: the next arrival or relative tick (docs/design.md: Ticks)."""
        t = self._next_arrival()
        if self._tick is not None and self.now + self._tick < t:
            t = self.now + self._tick
        if t == _INF:  # a finite trace ended: idle until the horizon, unless all is done
            t = self.now if self.summary_done() else max(self.horizon_s, self.now)
        self.advance(t, self.idle_power_w)

    def idle_until_arrival(self) -> bool:
        """Idle device, empty queue: idle to the next arrival (no decision is needed).

        :returns: False when a finite trace has ended (the clock then moves to the
            horizon unless every summary request is done).
        """
        t = self._next_arrival()
        if t == _INF:
            if not self.summary_done():
                self.advance(max(self.horizon_s, self.now), self.idle_power_w)
            return False
        self.advance(t, self.idle_power_w)
        return True

    # -- batches --------------------------------------------------------------------------
    def _start_batch(self, b: int, completion_s: float) -> None:
        """Start the ``b`` oldest waiting requests; they complete at ``completion_s``."""
        self.started += b
        self._record_completions(b, completion_s)
        self.batches += 1
        self.batched += b

    def _admit(self, k: int) -> None:
        """The ``k`` oldest waiting requests leave the queue (their completion is unknown)."""
        self.started += k

    def _record_completions(self, n: int, completion_s: float) -> None:
        """The next ``n`` entries of unknown completion complete at ``completion_s``."""
        arr = self.arrivals
        s = self._nk
        e = s + n
        sla = self._sla
        # misses form a prefix: the oldest requests
        k = bisect_left(arr, completion_s - sla, s, e)
        while k > s and not completion_s - arr[k - 1] > sla:
            k -= 1
        while k < e and completion_s - arr[k] > sla:
            k += 1
        self._served_missed += k - s
        self._comp += [completion_s] * n
        self._nk = e

    def _finish_batch(self, b: int) -> None:
        """The ``b`` requests of the running batch complete now (:meth:`complete`,
        written out: the batch envs' hot path)."""
        self.in_system -= b
        self.completed += b

    def complete(self, n: int) -> None:
        """``n`` requests in the system complete now (they leave it)."""
        self.in_system -= n
        self.completed += n

    def count_batches(self, batches: int, requests: int) -> None:
        """``batches`` more batches ran, of ``requests`` requests in all (the summary's
        mean batch size)."""
        self.batches += batches
        self.batched += requests

    def use_profile(self, profile: Any) -> None:
        """Time and power the coming work by ``profile`` (the LLM server's profile at the
        SM clock in force)."""
        self.profile = profile

    def commit_stretch(
        self,
        t_end: float,
        latency_integral_s: float,
        energy_j: float,
        rate_per_s: float,
        rate_since: tuple[float, int],
    ) -> None:
        """Commit work that ran outside :meth:`advance` and admitted no arrival (the LLM
        server's decode-only stretches): the clock at ``t_end``, and the latency and energy
        integrals and the arrival-rate estimate as the caller carried them forward from
        this loop's values by this loop's rules (``advance``'s integrals, ``update_rate``'s
        decay at each boundary).

        :raises RuntimeError: ``t_end`` before now, or an arrival before ``t_end``.
        """
        i = self.arrival_index  # (the caller has drawn the next arrival: peek_arrival)
        if t_end < self.now or (i < len(self._buf) and self._buf[i] < t_end):
            raise RuntimeError(
                f"commit_stretch: t_end={t_end!r} must lie between now ({self.now!r}) and the "
                f"next arrival ({self.peek_arrival()!r})"
            )
        self.now, self.latency_integral_s, self.energy_j = t_end, latency_integral_s, energy_j
        self.rate_per_s, self.rate_since = rate_per_s, rate_since

    # -- SLA bookkeeping ------------------------------------------------------------------
    def _deadline_prefix(self, t: float) -> int:
        """Number of entries whose deadline has passed at ``t`` (``t - arrival > sla``)."""
        arr = self.arrivals
        sla = self._sla
        kd = self._kd
        if kd == len(arr) or not t - arr[kd] > sla:  # no new deadline passed (arrival order)
            return kd
        k = bisect_left(arr, t - sla, kd)
        n = len(arr)
        while k > self._kd and not t - arr[k - 1] > sla:
            k -= 1
        while k < n and t - arr[k] > sla:
            k += 1
        self._kd = k
        return k

    # -- step accounting ------------------------------------------------------------------
    def step_accounting(self) -> tuple[float, dict[str, float], float, int]:
        """Reward components since the last epoch.

        :returns: ``(reward, components, dt_s, arrivals_in_step)``
        """
        L0, E0, M0, D0, t0, n0 = self._base
        misses = self.misses()
        L, E, D, now, n = (
            self.latency_integral_s,
            self.energy_j,
            self.drops,
            self.now,
            self._arrived,
        )
        self._base = (L, E, misses, D, now, n)
        dL, dE, dM, dD = L - L0, E - E0, misses - M0, D - D0
        reward = -(self._wl * dL + self._we * dE + self._ws * dM + self._wd * dD)
        self.update_rate()
        return reward, {"latency": dL, "energy": dE, "sla": dM, "drop": dD}, now - t0, n - n0

    def update_rate(self) -> None:
        """The arrival-rate estimate, brought up to now (at every epoch, from
        :meth:`step_accounting`; an env that runs several of its boundaries inside one
        step may update it at each of them)."""
        t0, n0 = self.rate_since
        now, n = self.now, self._arrived
        self.rate_since = (now, n)
        dt = now - t0
        # time-decayed arrival count: an unbiased rate estimate in steady state
        if dt > 0.0:
            decay = math.exp(-dt / self.rate_window_s)
            self.rate_per_s = self.rate_per_s * decay + (n - n0) / self.rate_window_s
        elif n > n0:
            self.rate_per_s += (n - n0) / self.rate_window_s

    def over(self) -> bool:
        """Whether the episode ends now: the horizon is reached or every summary request is
        done (completed or dropped)."""
        return self.now >= self.horizon_s or self.summary_done()

    def summary_drops(self) -> int:
        """Dropped summary requests: drops between the window's start and its end mark."""
        end = self._drops_at_end_mark if self._drops_at_end_mark is not None else self.drops
        return end - (self.window.drops if self.window is not None else self.drops)

    def warn_if_drop_pays(self, cheapest_j: float) -> None:
        """Warn (at construction) when dropping a request costs less than serving it, whose
        cheapest energy is ``cheapest_j`` (docs/design.md: Dropping)."""
        w = self.config.reward_weights
        if w.drop < w.energy * cheapest_j:
            warnings.warn(
                f"reward_weights.drop={w.drop} is below the cheapest energy cost of serving a "
                f"request (energy weight {w.energy} x {cheapest_j:.4g} J): dropping pays",
                stacklevel=5,
            )

    def totals(self) -> dict[str, Any]:
        """The loop's totals that a summary reads (:func:`batch_env.metrics.summarize`'s
        keyword arguments): the summary window's drops, the clock, the latency and energy
        integrals, the SLA misses (counted up to now), the drops, the batches and their
        requests, the requests in the system, and the episode's totals
        (:meth:`episode_totals`)."""
        return {
            "drops_summary": self.summary_drops(),
            "now_s": self.now,
            "latency_integral_s": self.latency_integral_s,
            "energy_j": self.energy_j,
            "misses": self.misses(),
            "drops": self.drops,
            "n_batches": self.batches,
            "sum_batch": self.batched,
            "in_system": self.in_system,
            **self.episode_totals(),
        }

    def episode_totals(self) -> dict[str, int]:
        """The whole episode's arrivals and completions (``summarize``'s ``arrived_total``
        and ``completed_total``), as :meth:`request_counts` counts them."""
        return {
            "arrived_total": self._arrived + self.rejected_count(),
            "completed_total": self.completed,
        }

    def to_first_arrival(self) -> None:
        """An episode's start: draw the first chunk of arrivals and idle to the first (a
        finite trace with no admissible arrival: to the end). A cluster's replica, whose
        arrivals are routed to it, overrides it to do nothing."""
        self.more_arrivals()
        self.idle_until_arrival()

    def more_arrivals(self) -> bool:
        """Append the next chunk of arrivals to the buffer (the times
        :meth:`arrival_chunk` keeps of it: chunks of which it keeps none are passed
        over); False when the stream ended."""
        while not self._ended:
            chunk = self._stream.next_chunk()
            if len(chunk.times) == 0:
                self._ended = True
                return False
            times = self.arrival_chunk(chunk)
            if len(times):
                self._buf.extend(times.tolist())
                return True
        return False

    def arrival_chunk(self, chunk: Any) -> np.ndarray:
        """The arrival times of ``chunk`` (an :class:`batch_env.workload.ArrivalChunk`)
        that join the buffer: all of them here (the LLM server rejects prompts that cannot
        fit, and keeps each arrival's lengths and class)."""
        return chunk.times

    def absorb(self, t_end: float, j: int, power_w: float) -> None:
        """Move the clock to ``t_end`` at ``power_w`` and process the arrivals before index
        ``j`` (admitted while there is room, else dropped), integrating latency and energy."""
        i = self.arrival_index
        now = self.now
        L = self.in_system * (t_end - now)
        k = j - i
        if k:
            arr = self.arrivals
            room = self.queue_capacity - self.waiting_count()
            adm = k if k <= room else (room if room > 0 else 0)
            if adm:
                seg = self._buf[i : i + adm]
                L += adm * t_end - math.fsum(seg)
                arr += seg
                self.in_system += adm
            if k > adm:
                self.drops += k - adm
            self.arrival_index = j
            self._arrived += k
        self.latency_integral_s += L
        self.energy_j += power_w * (t_end - now)
        self.now = t_end

    def on_mark(self) -> None:
        """Snapshot at the instant arrival number ``_mark`` is about to be processed."""
        if self.window is None:
            self.window = WindowStart(
                time_s=self.now,
                latency_integral_s=self.latency_integral_s,
                energy_j=self.energy_j,
                misses=self.misses_at(self.now),
                drops=self.drops,
                entry=len(self.arrivals),
                n_batches=self.batches,
                sum_batch=self.batched,
            )
            self._mark = self._marks[1]
        else:
            self.window_end = len(self.arrivals)
            self._drops_at_end_mark = self.drops
            self._mark = 1 << 62

    def in_service_count(self) -> int:
        """Requests in service at an epoch: none for whole-model batches (they complete
        inside the step that started them); overridden where work stays in flight."""
        return 0

    def rejected_count(self) -> int:
        """Arrivals rejected before admission (LLM prompts that cannot fit); 0 here."""
        return 0

    def misses(self) -> float:
        """Cumulative SLA misses whose deadline has passed by now, valid at any epoch."""
        k = self._deadline_prefix(self.now)
        return self._served_missed + (k - self._nk if k > self._nk else 0)

    def misses_at(self, t: float) -> float:
        """Cumulative misses whose deadline passed by ``t``, valid at any instant (slow)."""
        arr, comp, sla = self.arrivals, self._comp, self._sla
        n = 0
        for idx, a in enumerate(arr):
            if not t - a > sla:
                break
            if idx >= len(comp) or comp[idx] - a > sla:
                n += 1
        return n

    def summary_done(self) -> bool:
        """All summary requests have arrived and are completed or dropped."""
        return self.window_end is not None and self.completed >= self.window_end

    def _serving_summary(self) -> dict[str, Any]:
        """The episode summary (``info["serving"]``), from the one metrics recorder."""
        summary = summarize(
            arrivals=self.arrivals,
            completions=self._comp,
            n_done=self.completed,
            window=self.window,
            entry_hi=self.window_end if self.window_end is not None else len(self.arrivals),
            sla_s=self._sla,
            weights=(self._wl, self._we, self._ws, self._wd),
            **self.totals(),
        )
        return summary


class ServingCore(ServingEnv, ServingLoop):
    """Base class of the whole-model and node-level envs: :class:`ServingLoop` with
    Gymnasium's side (:class:`ServingEnv`).

    Subclasses call :meth:`_init_env` (which calls :meth:`setup_loop`) and
    :meth:`_init_executor` in ``__init__``, :meth:`_reset_core` in ``reset``, and the loop's
    :meth:`advance`, :meth:`_wait`, :meth:`_start_batch`, :meth:`_admit`,
    :meth:`_record_completions`, :meth:`_finish_batch` and :meth:`step_accounting` in
    ``step``; see :class:`batch_env.envs.dynamic_batching.DynamicBatchingEnv`. Extension
    hooks: :class:`ServingLoop`'s and :class:`ServingEnv`'s.
    """

    def _init_env(
        self,
        profile: str | dict | Profile,
        workload: dict | Workload | None,
        config: ServingConfig,
        render_mode: str | None,
    ) -> Profile:
        """Shared construction of every env: render mode, profile, workload, load, weights.

        :returns: the loaded profile (checked against ``max_batch_size``).
        """
        self._set_render_mode(render_mode)
        prof = load_profile(profile)
        prof.check_max_batch_size(config.max_batch_size)
        self.max_throughput_rps = prof.max_throughput_rps(config.max_batch_size)
        if workload is None:
            workload = dict(DEFAULT_WORKLOAD)
        wl = make_workload(workload, max_throughput_rps=self.max_throughput_rps)
        self.setup_loop(prof, wl, config)
        self.mean_load = self.mean_rate_per_s / self.max_throughput_rps
        self._B = config.max_batch_size
        self._check_drop_weight()
        return prof

    def _init_executor(
        self,
        executor: str,
        model: str | None,
        torch_device: str,
        executor_options: dict | None,
    ) -> None:
        """Build ``self.executor`` (docs/design.md: Executors) and record how, for ``get_config``."""
        from .executor import make_executor

        cfg = self.config
        self.executor = make_executor(
            executor,
            self.profile,
            cfg.max_batch_size,
            cfg.service,
            cfg.service_cv,
            model=model,
            torch_device=torch_device,
            options=executor_options,
        )
        self.warn_if_seed_invariant(executor)
        self._record_executor(executor, model, torch_device, executor_options)

    def _check_drop_weight(self) -> None:
        """Warn when dropping a request costs less than serving it (docs/design.md: Dropping)."""
        lat, energy = self.profile.tables(self._B)
        self.warn_if_drop_pays(float(np.min(energy[1:] / np.arange(1, self._B + 1))))

    def _reset_core(
        self, seed: int | None, options: dict[str, Any] | None = None
    ) -> tuple[np.random.Generator, np.random.Generator]:
        """:meth:`ServingLoop.start_loop`, ``seed=None`` drawing one from the env's
        ``np_random``; ``step`` is refused until it is complete."""
        streams = self.start_loop(self._episode_seed(seed), options)
        self._episode_started()
        return streams

    def request_counts(self) -> dict[str, int]:
        """:meth:`ServingLoop.request_counts`, refused before the first ``reset``."""
        self._check_started("request_counts")
        return super().request_counts()

    def _episode_over(self) -> bool:
        """Whether the episode ends at this epoch; if so, ``step`` is refused until ``reset``."""
        if self.over():
            self._episode_ended()
            return True
        return False

    def _serving_summary(self) -> dict[str, Any]:
        """:meth:`ServingLoop._serving_summary`, with a
        :class:`batch_env.metrics.SummaryWarning` when it hides something."""
        summary = super()._serving_summary()
        self._warn_summary(summary, self.now)
        return summary


def is_serving_env(env: gym.Env) -> bool:
    """Whether ``env`` (wrapped or not) is one of batch-env's serving envs: whole-model,
    node-level or LLM, every :class:`ServingEnv`, whose episodes end with a serving
    summary in ``info["serving"]`` and are bounded by their requests, not by a step cap.
    The evaluation harness and the training callbacks both ask this one question."""
    return isinstance(env.unwrapped, ServingEnv)
