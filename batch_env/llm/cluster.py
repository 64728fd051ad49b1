"""A cluster of LLM servers behind a router, on one simulated clock (vidur's replicas with a
global scheduler; vLLM's data-parallel deployments; SGLang's and llm-d's routers).

:class:`LLMCluster` holds ``N`` :class:`Replica` s (each an
:class:`~batch_env.llm.LLMServer` with its own scheduler, KV cache, prefix cache, SM clock
and SLA books, possibly of different GPUs, models or clocks) and the cluster's arrivals.
It is usable without an env, like a server::

    cluster = LLMCluster.build([{"profile": "llama-2-7b-a100"}] * 4, workload)
    cluster.reset(seed=0)
    while (g := cluster.next_arrival()) is not None:    # runs to the next arrival
        cluster.route(g % cluster.n)                     # a router's choice
    summary = cluster.summary()

Semantics (``docs/design.md``: A cluster of replicas):

* **Arrivals** are drawn once, by the cluster, exactly as a lone server draws them from
  the same seed (the arrival and request-size streams of
  :meth:`batch_env.core.ServingLoop.start_loop`, the lengths, classes and prefix hashes
  by a :class:`~batch_env.llm.intake.RequestIntake`; prompts that fit no replica are
  rejected there). Each is routed at its arrival instant, in arrival order, to one
  replica, which admits it (or drops it, its queue full) at its next iteration boundary
  at or after that instant, as a lone server admits the arrivals of an iteration at its
  end.
* **One event loop**: the events are the arrivals and each replica's iteration ends, in
  time order; at equal times the arrivals come first (they join before the boundary's
  plan, as on a lone server), then the replicas in index order. A replica's iteration is
  planned and executed at its start (:meth:`LLMServer.begin_iteration`) and its clock
  moves at its end (:meth:`LLMServer.end_iteration`); a router that reads a replica in
  between sees the iteration in progress (the requests it runs are running).
* **Lazy replicas**: replicas interact only through the router, the summary window's
  marks and the episode's end, so each runs its own events (in its own time order) only
  when something needs it at the arrival's instant: an arrival routed to it, a reader
  (:meth:`replica_view`, :meth:`request_counts`, :meth:`costs`, :meth:`summary`, or
  :meth:`flush` before reading :attr:`replicas` directly), the marks. After the end mark
  the episode ends when the last summary request is done: before each arrival the
  replicas not yet known done are run up to it, one at a time, until one is found not
  done; once all are, the episode ends at the last one's instant. Events run in time
  order again only when the arrivals have ended or the next one is past the horizon.
  A decode-only stretch stops before the next arrival (where it may be read or routed
  to); a replica whose summary requests are done runs one only while an arrival that
  the end check passed is pending (never past the end). So a router that reads nothing
  (round robin, random) costs the cluster per request, not per request and replica;
  the episode is the one the event-by-event loop made (``tests/test_llm_cluster.py``).
* **Settings**: each replica runs one setting (cap, token budget, admission order, SM
  clock; by default vLLM's: the largest cap and budget, FCFS, the highest clock) chosen
  at construction; the router's choice is the only decision.
* **The summary window** is the cluster's: from the instant its ``warmup_requests``-th
  arrival is routed to the completion of the last of the next ``horizon_requests`` (or
  the horizon). At both marks every replica takes its window mark at that instant
  (admitting what was routed to it before, as a lone server does at its marks), so each
  replica's summary covers its own summary requests over the same span and the
  cluster's summary sums the replicas' energy, latency, misses and drops and pools their
  requests (:meth:`summary`).
* **Seeds**: replica 0 is seeded with the cluster's seed and replica ``r`` with a child
  of it (their executors' streams), so that a cluster of one replica whose router always
  picks it runs the same trajectory as ``LLMBatching-v2`` at that setting on the same
  seed (``tests/test_llm_cluster.py``). One difference remains at an episode's end: a
  lone server that empties as its last summary request completes idles to its next
  arrival before its episode ends; a cluster ends at that completion.

Imports: this package, ``batch_env.config``, ``batch_env.executor``, ``batch_env.metrics``
and ``batch_env.planning`` (its realizable copies); never ``batch_env.envs``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..config import LLMConfigV2
from ..executor import make_llm_executor
from ..metrics import llm_episode_summary
from ..planning import PLANNING_CHUNK, ShiftedStream, future_model
from .cluster_events import ReplicaEvents
from .decode_runs import run_decodes
from .intake import RequestIntake
from .prefixes import PrefixUnits
from .router_tree import RoutedPrefixes
from .server import LLMServer, Started, llm_workload, profile_for

if TYPE_CHECKING:
    from ..config import LLMConfig
    from ..executor import LLMExecutor
    from ..profiles.llm_profile import LLMProfile
    from ..workload import Workload
    from .prefix_cache import PrefixKVCache

_INF = math.inf
#: First tokens a replica's recent TTFT (``LLMCluster.replica_view``) averages over
RECENT_TTFT = 16
#: Events (iteration ends, wake-ups) :meth:`LLMCluster.next_arrival` processes at most
#: between two arrivals (a bound, never reached: every iteration moves the clock).
MAX_EVENTS_PER_ARRIVAL = 10_000_000


class Replica(LLMServer):
    """One replica of a cluster: an :class:`~batch_env.llm.LLMServer` whose arrivals a
    cluster routes to it (:meth:`receive`), running one setting.

    :param config: its configuration; ``profile``, ``workload``, ``executor``: as the
        server's (``workload``: the cluster's, which the replica never draws from).
    :param setting: ``(cap, budget, order, clock_index)``, one of its configuration's
        caps (``grid``), token budgets and orders and, with a clock grid, the index of its
        clock (``None``: the highest); default vLLM's: the largest cap and budget, the
        first order (FCFS).
    :param name: what its errors and warnings call it.
    :raises ValueError: a setting the configuration does not offer (naming it).
    """

    def __init__(
        self,
        config: LLMConfig,
        profile: LLMProfile,
        workload: Workload,
        executor: LLMExecutor | Callable[[], LLMExecutor],
        setting: tuple[int, int, str, int | None] | None = None,
        name: str = "replica",
    ) -> None:
        super().__init__(config, profile, workload, executor, None, name)
        if setting is None:
            setting = (self.grid[-1], self.budgets[-1], self.orders[0], None)
        cap, budget, order, clock = setting
        for field, value, allowed in (
            ("cap", cap, self.grid),
            ("budget", budget, self.budgets),
            ("order", order, self.orders),
        ):
            if value not in allowed:
                raise ValueError(
                    f"{name}: setting {field}={value!r} is not offered: one of {list(allowed)}"
                )
        n_clocks = len(self.sm_clock.grid)
        if clock is not None and not (isinstance(clock, int) and 0 <= clock < max(n_clocks, 1)):
            raise ValueError(
                f"{name}: setting clock_index={clock!r} is invalid: an index into its "
                f"clock_grid of {n_clocks} clocks, or None"
            )
        #: the setting it runs: cap, token budget, admission order, clock index
        self.setting = (cap, budget, order, clock)
        self.name = name
        #: the iteration in progress (``None``: idle)
        self.in_flight: Started | None = None
        #: whether decode-only stretches may run in one loop (the cluster allows them;
        #: after its end mark only until this replica's own summary requests are done,
        #: so that no replica runs past the episode's end), and the cluster's next
        #: arrival to route (a stretch stops before it)
        self.stretches = False
        self.end_marked = False
        #: whether, its own summary requests done after the end mark, it may still run a
        #: stretch (the cluster's say: only up to an arrival known not past the end)
        self.may_stretch_done: Callable[[], bool] = lambda: False
        self.next_routed: Callable[[], float] = lambda: _INF
        self._end_pending = False
        #: the last :data:`RECENT_TTFT` first tokens' TTFTs (s), what a router reads
        self.recent_ttft: deque[float] = deque(maxlen=RECENT_TTFT)
        self.nominal_speed = self._nominal_speed()

    # -- the loop's hooks: arrivals come from the cluster ------------------------------
    def to_first_arrival(self) -> None:
        """Nothing: the replica starts empty at 0 and its arrivals are routed to it."""

    def more_arrivals(self) -> bool:
        """Nothing to draw: the cluster appends what it routes here (:meth:`receive`)."""
        return False

    def reset(self, seed: int, options: dict[str, Any] | None = None) -> None:
        """Start an episode (:meth:`LLMServer.reset`, its executor's stream from
        ``seed``), empty, at 0, at its setting; its window marks come from the cluster."""
        super().reset(seed, options)
        self.marks_from_outside()  # (the cluster takes them: mark())
        self.in_flight = None
        self._end_pending = False
        self.recent_ttft.clear()
        cap, budget, order, clock = self.setting
        self.set(cap, budget, order, clock)
        #: its nominal decode rate at its setting's clock (tokens/s; ``_nominal_speed``)
        self.nominal_speed = self._nominal_speed()

    def absorb(self, t_end: float, j: int, power_w: float) -> None:
        """The server's, and the end mark once the cluster's arrivals have ended and what
        was routed here is admitted (:meth:`end_when_admitted`)."""
        super().absorb(t_end, j, power_w)
        if self._end_pending and self.unadmitted == 0:
            self._end_pending = False
            self.take_end_mark()

    def in_service_count(self) -> int:
        """The running requests, and during an iteration those it completes (out of the
        running list from its start, they leave the system at its end)."""
        n = len(self.state.running)
        return n + len(self.in_flight.outcome.finished) if self.in_flight is not None else n

    # -- what the cluster does to it -----------------------------------------------------
    @property
    def power_w(self) -> float:
        """The power it draws now: its iteration's, or idle."""
        return self.in_flight.power_w if self.in_flight is not None else self.idle_power_w

    def receive(self, t: float, record: tuple[int, int, bool, int, Any]) -> None:
        """An arrival at ``t`` (not before any routed earlier) is routed here, with its
        intake ``record`` (:meth:`RequestIntake.record`)."""
        self.push_arrival(t)
        self.intake.push(*record)

    def resample_future(self, rng: np.random.Generator) -> None:
        """A realizable copy's replica (:meth:`LLMCluster.resample_future`): the arrivals
        routed here stay (they have come), and the output lengths of its requests in the
        system and of those routed here not yet admitted are redrawn from ``rng``."""
        self.redraw_outputs(rng)
        if self.unadmitted:
            self.intake.redraw_buffered(self.arrival_index, rng)

    def mark(self, t: float) -> None:
        """The summary window's mark at ``t`` (the cluster's): the arrivals routed here so
        far are admitted at ``t`` and the window's counters taken, as a lone server does
        at the mark's arrival."""
        self.mark_at(t, self.power_w)

    def end_when_admitted(self) -> None:
        """The cluster's arrivals have ended: the end mark is taken once what was routed
        here is admitted (at once if nothing waits to be)."""
        if self.window_end is not None:
            return
        if self.unadmitted == 0:
            self.take_end_mark()
        else:
            self._end_pending = True

    def sync(self, t: float) -> None:
        """Bring the clock and integrals to ``t`` (at most its event's time): the
        cluster's end, where every replica's summary is taken at one instant."""
        if t > self.now:
            self.admit_through(t, self.power_w)

    def peek_arrival(self) -> float:
        """The next arrival that could come here: the first routed one not yet admitted,
        or the cluster's next arrival to route (what a decode stretch stops before)."""
        return min(self.next_unadmitted(), self.next_routed())

    def wake_at(self) -> float:
        """When an idle replica next has work: its first routed arrival not yet admitted
        (``inf``: none)."""
        return self.next_unadmitted()

    def on_event(self, t: float) -> None:
        """Its event at ``t``: the iteration in progress ends, or (idle) it wakes to the
        arrivals routed to it by ``t``."""
        if self.in_flight is not None:
            started, self.in_flight = self.in_flight, None
            self.end_iteration(started)
            first, arr, rt = self.sla_books.first_at, self.arrivals, self.recent_ttft
            for e in started.outcome.first_tokens:
                rt.append(first[e] - arr[e])
        else:
            self.advance(t, self.idle_power_w)

    def cached_blocks(self, record: tuple[int, int, bool, int, Any]) -> int:
        """The leading KV blocks of a request not routed yet (its intake ``record``) that
        this replica's prefix cache holds now (0 without prefix caching)."""
        if self.prefix_ratio is None:
            return 0
        prompt, hashes = record[0], record[4]
        units = self.intake.prefix_units.known(hashes)
        bs = self.state.block_size
        m = min((prompt - 1) // bs, len(units) * self.prefix_ratio)
        if m <= 0:
            return 0
        return cast("PrefixKVCache", self.state.kv).match(units, m)[0]

    def _nominal_speed(self) -> float:
        """Its nominal decode rate (tokens/s): one decode step of 32 running requests
        with 1,024-token contexts, from its profile at its clock; the static weight an
        operator gives a load balancer for this replica (``sed``)."""
        p = self.profile
        b = min(32, p.max_batch_size or 32)
        return b / p.decode_time_s(b, b * 1024)

    def prefill_tokens(self) -> int:
        """Prompt tokens it has still to prefill: the waiting requests' (their prompts
        and generated tokens, none of them found cached yet), the prefills in progress'
        rest, and those routed here and not yet admitted."""
        st = self.state
        left = st.waiting_tokens + sum(
            st.prefill_left[e] for e in st.running[len(st.running) - st.prefilling :]
        )
        i = self.arrival_index
        return left + self.intake.prompt_tokens(i, i + self.unadmitted)

    def begin(self) -> float:
        """At a boundary: a pending clock change lands; with requests in the system the
        next iteration begins. Returns its next event's time (its end; idle: its next
        routed arrival, ``inf`` if none)."""
        if self.now >= self.sm_clock.switch_at:
            self.run_at(self.sm_clock.due(self.now))
        if self.in_system:
            self.last_preempted = 0
            st = self.state
            if (
                self.decode_runs
                and self.stretches
                and not (st.waiting or st.prefilling)
                and not (self.end_marked and self.summary_done() and not self.may_stretch_done())
            ):
                # every setting runs the same decodes: those before the next arrival that
                # could come here, in one loop (exact, as on a lone server), and the one
                # that ends after it, begun
                k, _it, crossing = run_decodes(self)
                if crossing is not None:
                    self.in_flight = crossing
                    return crossing.end_s
                if k:
                    return self.now  # a boundary: its event runs begin() again
            started = self.begin_iteration(self.cap, self.budget)
            if not started.outcome.iteration.empty:
                self.in_flight = started
                return started.end_s
            self.end_iteration(started)  # nothing could run: wait for an arrival
        return self.wake_at()


class LLMCluster:
    """``N`` replicas behind a router, on one clock (module docstring).

    :param replicas: the replicas, built on one workload (:meth:`build` makes them from
        settings); they must agree on the request classes and the summary window
        (``warmup_requests``, ``horizon_requests``, ``horizon_s``).
    :raises ValueError: no replica, or replicas that disagree (naming the field).
    """

    def __init__(self, replicas: Sequence[Replica]) -> None:
        if len(replicas) == 0:
            raise ValueError("replicas: a cluster needs at least one replica (got 0)")
        self.replicas = list(replicas)
        #: how many replicas
        self.n = len(self.replicas)
        first = self.replicas[0]
        for k, rep in enumerate(self.replicas[1:], 1):
            if rep.workload is not first.workload:
                raise ValueError(f"replicas[{k}]: built on another workload than replicas[0]")
            for field in (
                "warmup_requests",
                "horizon_requests",
                "horizon_s",
                "classes",
                "reward_weights",
            ):
                a, b = getattr(first.config, field, None), getattr(rep.config, field, None)
                if a != b:
                    raise ValueError(
                        f"replicas[{k}].{field}={b!r} differs from replicas[0]'s {a!r}: the "
                        "replicas of a cluster share its requests and summary window"
                    )
        self.workload = first.workload
        widest = max(self.replicas, key=lambda r: r.max_model_len)
        #: the arrivals' intake: a prompt that fits no replica is rejected here
        self.intake = RequestIntake(widest.config, self.workload)
        self.horizon_s = first.horizon_s
        self.mean_rate_per_s = first.mean_rate_per_s
        self._mark_at = (first.config.warmup_requests, first.config.warmup_requests
                       + first.config.horizon_requests)  # fmt: skip
        self._max_len = [r.max_model_len for r in self.replicas]
        #: each replica's next event, run lazily or in time order
        self.events = ReplicaEvents(self.replicas)
        ratio = self.intake.prefix_ratio
        #: what was routed where, as SGLang's router keeps it (None without prefix hashes)
        self.routed_prefixes: RoutedPrefixes | None = (
            RoutedPrefixes(self.n, ratio * widest.config.block_size) if ratio else None
        )
        self._route_units = PrefixUnits()  # the routed prompts' units (the replicas' own apart)
        self._units_of: tuple[int, tuple[int, ...]] = (-1, ())

    @classmethod
    def build(
        cls,
        replicas: Sequence[dict[str, Any]],
        workload: dict | Workload | None = None,
        **common: Any,
    ) -> LLMCluster:
        """A cluster of profile-executor replicas from settings: each entry of
        ``replicas`` has ``profile`` (a name, dict or profile; default
        ``"llama-2-7b-a100"``), optional ``clock_mhz`` and ``setting`` (:class:`Replica`)
        and any :class:`batch_env.config.LLMConfigV2` field, over ``common``'s.

        :raises ValueError: no replica, or an invalid setting (naming the replica).
        """
        if not isinstance(replicas, Sequence) or isinstance(replicas, str) or not replicas:
            raise ValueError(
                f"replicas={replicas!r}: a cluster needs a non-empty list of replica specs "
                "(dicts with a profile and settings)"
            )
        built: list[Replica] = []
        shared: Workload | None = None
        for k, spec in enumerate(replicas):
            if not isinstance(spec, dict):
                raise ValueError(f"replicas[{k}]={spec!r}: expected a dict of settings")
            spec = {**common, **spec}
            profile = spec.pop("profile", "llama-2-7b-a100")
            clock = spec.pop("clock_mhz", None)
            setting = spec.pop("setting", None)
            try:
                prof, config = profile_for(profile, clock, spec, LLMConfigV2)
                if shared is None:
                    shared = llm_workload(config, workload)
                ex = make_llm_executor("profile", prof, config.max_num_seqs, config.max_model_len)
                setting = tuple(setting) if setting is not None else None
                built.append(Replica(config, prof, shared, ex, setting, f"replicas[{k}]"))
            except (TypeError, ValueError) as err:
                raise ValueError(f"replicas[{k}]: {err}") from None
        return cls(built)

    # -- an episode --------------------------------------------------------------------
    def reset(self, seed: int, options: dict[str, Any] | None = None) -> None:
        """Start an episode: every replica empty at 0 (replica 0's streams from ``seed``,
        replica ``r``'s from a child of it), the arrivals drawn from ``seed`` as a lone
        server's. ``options``: as :meth:`LLMServer.reset` (``{"load": x}``)."""
        for r, rep in enumerate(self.replicas):
            rep.reset(seed if r == 0 else _child_seed(seed, r), options)
        arrivals, _service, sizes = (
            np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(seed).spawn(3)
        )
        self._arrival_stream = self.replicas[0].episode_workload(options).stream(arrivals)
        self._sizes = sizes
        self._drawn_all = False
        self.intake.clear()
        self._route_units.clear()
        self._units_of = (-1, ())
        if self.routed_prefixes is not None:
            self.routed_prefixes.clear()
        #: the arrival times drawn (every admissible arrival of the episode so far)
        self.times: list[float] = []
        #: the replica each arrival was routed to, in arrival order
        self.routed: list[int] = []
        #: the clock: the last event's time
        self.now = 0.0
        self.events.reset()  # lazy until the end mark or the horizon (module docstring)
        self._n_marks = 0  # marks taken: 0, 1 (window open), 2 (end mark)
        self._window_t0: float | None = None
        self._pending: int | None = None
        for rep in self.replicas:
            rep.stretches = True
            rep.end_marked = False
            rep.next_routed = self._peek_time
            rep.may_stretch_done = self._done_may_stretch

    def _more(self) -> bool:
        """Draw the next chunk of arrivals (the intake keeps those that fit); False when
        the stream ended."""
        while not self._drawn_all:
            chunk = self._arrival_stream.next_chunk()
            if len(chunk.times) == 0:
                self._drawn_all = True
                return False
            times = self.intake.take(chunk, self._sizes)
            if len(times):
                self.times.extend(times.tolist())
                return True
        return False

    def _peek_time(self) -> float:
        """The next arrival to route (``inf``: the arrivals ended), drawing more of the
        stream if need be; no mark is taken."""
        g = len(self.routed)
        return self.times[g] if g < len(self.times) or self._more() else _INF

    def _end_marked(self) -> None:
        """The end mark is taken: from now on the events run in time order and the
        episode's end is decided at each; a replica runs decode stretches only until its
        own summary requests are done (so none runs past the end)."""
        self._n_marks = 2
        for rep in self.replicas:
            rep.end_marked = True
        self.events.not_done = list(range(self.n))  # (the lazy end check's)

    def _peek(self) -> float:
        """The next arrival to route (``inf``: the arrivals ended; the end mark is then
        taken where it was not)."""
        g = len(self.routed)
        if g < len(self.times) or self._more():
            return self.times[g]
        if self._n_marks < 2:
            self._end_marked()
            for rep in self.replicas:
                rep.end_when_admitted()
        return _INF

    def over(self) -> bool:
        """Whether the episode has ended: the horizon is reached, or every summary request
        is done (completed or dropped) by now (a replica whose decode stretch ran ahead
        of the clock is done only once the clock reaches it)."""
        if self.now >= self.horizon_s:
            return True
        return self.summary_done() and all(rep.now <= self.now for rep in self.replicas)

    def summary_done(self) -> bool:
        """Every summary request has completed or been dropped."""
        return self._n_marks == 2 and all(rep.summary_done() for rep in self.replicas)

    def next_arrival(self) -> int | None:
        """Run the replicas up to the next arrival to route and return its number (its
        index into :attr:`times`; ``None``: the episode is over). Events at the arrival's
        instant run after it is routed."""
        if self._pending is not None:
            return self._pending
        events = self.events
        if not events.eager:
            ta = self._peek_time()
            if ta < self.horizon_s:
                if self._n_marks < 2 or events.ends_after(ta):
                    self.now = ta  # (each replica's events before it run when it is read)
                    self._pending = len(self.routed)
                    return self._pending
                self._end_lazily()  # every summary request was done before ta
            events.go_eager(self.now)
        for _ in range(MAX_EVENTS_PER_ARRIVAL):
            if self.over():
                self._end_at(self.now)
                return None
            ta = self._peek()
            te = events.next_time()
            if ta <= te and ta != _INF:
                self.now = ta
                self._pending = len(self.routed)
                return self._pending
            if te == _INF:  # nothing left to happen: idle to the horizon
                self._end_at(max(self.horizon_s, self.now))
                return None
            t, r = events.pop()
            self.now = t
            rep = self.replicas[r]
            rep.on_event(t)
            if not self.over():
                events.schedule(r, rep.begin())
        raise RuntimeError(
            f"LLMCluster: {MAX_EVENTS_PER_ARRIVAL} events without an arrival or the episode's "
            "end (bound MAX_EVENTS_PER_ARRIVAL)"
        )

    def _done_may_stretch(self) -> bool:
        """Whether a replica whose summary requests are done may run a decode stretch now
        (up to the next arrival): lazily, while an arrival that the end check passed is
        pending (its time is not past the episode's end); never once events run in time
        order (a stretch would run the replica past the end the others decide)."""
        return self._pending is not None and not self.events.eager

    def _end_lazily(self) -> None:
        """Every summary request was done before the next arrival: the episode ends at the
        last one's instant (the latest clock: each replica found done stopped at it, and
        none ran past it), every replica's events before it run."""
        self.now = max(rep.now for rep in self.replicas)
        self.events.flush(self.now)

    def flush(self) -> None:
        """Bring every replica to the cluster's clock: each one's events before now run.
        The cluster's own readers (:meth:`replica_view`, :meth:`request_counts`,
        :meth:`costs`, :meth:`summary`, ...) do it first; a caller that reads
        :attr:`replicas` directly between arrivals calls it (module docstring: lazy
        replicas)."""
        self.events.flush(self.now)

    def rate_estimate(self) -> float:
        """The arrivals per second over the last rate window (replica 0's
        ``rate_window_s``) before now; the workload's mean before a window has passed."""
        w = self.replicas[0].rate_window_s
        if self.now < w:
            return self.mean_rate_per_s
        n = len(self.routed) + (self._pending is not None)
        k = bisect_right(self.times, self.now - w, 0, n)
        return (n - k) / w

    def resample_future(self, rng: np.random.Generator) -> None:
        """A realizable planner's copy (:meth:`batch_env.core.ServingEnv.fork`): the
        arrivals after now come from the planner's model of the workload
        (:func:`batch_env.planning.future_model`, at :meth:`rate_estimate`), drawn with
        ``rng``; what has arrived stays, but no output length is known: the pending
        arrival's, the routed ones', and those of every replica's requests in the system
        are redrawn (:meth:`Replica.resample_future`)."""
        self.flush()
        i = len(self.routed) + (self._pending is not None)
        del self.times[i:]
        self.intake.forget_from(i, self.now)
        model = future_model(self.workload, self.rate_estimate())
        self._arrival_stream = ShiftedStream(model.stream(rng, PLANNING_CHUNK), self.now)
        self._drawn_all = False
        if self._pending is not None:
            self.intake.redraw_buffered(self._pending, rng)
        for rep in self.replicas:
            rep.resample_future(rng)

    def arrival_sizes(self, i: int, j: int) -> dict[str, np.ndarray]:
        """Arrivals ``i .. j - 1``: their prompt and output tokens and classes
        (:meth:`RequestIntake.sizes`)."""
        return self.intake.sizes(i, j)

    def upcoming(self, n: int) -> dict[str, np.ndarray]:
        """The next ``n`` arrivals from now, the pending one first (fewer where the
        stream ends): ``"dt_s"``, each one's time from now, and their sizes; drawn in
        the order an episode draws them anyway, so looking ahead changes nothing."""
        i = len(self.routed)
        while len(self.times) < i + n and self._more():
            pass
        j = min(len(self.times), i + n)
        dt = np.asarray(self.times[i:j], np.float64) - self.now
        return {"dt_s": dt, **self.arrival_sizes(i, j)}

    def _units(self, g: int) -> tuple[int, ...]:
        """Arrival ``g``'s prompt as prefix units of the routers' own interning."""
        if self._units_of[0] != g:
            self._units_of = (g, self._route_units.units([self.intake.record(g)[4]])[0])
        return self._units_of[1]

    def mask(self, g: int) -> np.ndarray:
        """The replicas arrival ``g`` may be routed to: those whose ``max_model_len`` its
        prompt fits."""
        p = self.intake.record(g)[0]
        return np.array([p + 1 <= m for m in self._max_len], dtype=bool)

    def route(self, r: int) -> None:
        """Route the pending arrival (:meth:`next_arrival`) to replica ``r``.

        :raises ValueError: no arrival pending, ``r`` out of range, or a replica its
            prompt does not fit (naming them).
        """
        g = self._pending
        if g is None:
            raise ValueError("route: no arrival is pending (call next_arrival() first)")
        if not (isinstance(r, (int, np.integer)) and 0 <= r < self.n):
            raise ValueError(f"route: replica {r!r} is out of range: 0 .. {self.n - 1}")
        r = int(r)
        record = self.intake.record(g)
        if record[0] + 1 > self._max_len[r]:
            raise ValueError(
                f"route: replica {r} is masked for arrival {g}: its prompt of {record[0]} "
                f"tokens does not fit its max_model_len={self._max_len[r]}"
            )
        t = self.times[g]
        if g in self._mark_at and self._n_marks < 2:  # the window's marks, at this instant
            self.flush()
            for rep in self.replicas:
                rep.mark(t)
            self._n_marks += 1
            if self._n_marks == 2:
                self._end_marked()
            if self._window_t0 is None:
                self._window_t0 = t
        self.events.advance(r, t)
        rep = self.replicas[r]
        rep.receive(t, record)
        if self.routed_prefixes is not None:
            self.routed_prefixes.insert(r, self._units(g))
        self.routed.append(r)
        self._pending = None
        if rep.in_flight is None:
            self.events.schedule(r, t)

    def replica_view(self, g: int | None) -> dict[str, np.ndarray]:
        """What a router can know of each replica as arrival ``g`` is routed, an array
        over the replicas per key (``docs/routers.md``: what each router reads):

        * ``waiting``: requests not yet in a batch (its waiting queue and those routed to
          it not yet admitted: vidur's pending requests, llm-d's queue);
        * ``running``: requests in a batch (running, or completing in the iteration in
          progress); ``in_flight``: both (a router's count of its requests not done:
          SGLang's and Dynamo's load);
        * ``kv_usage``: KV blocks in use / blocks; ``kv_blocks_used``: blocks in use;
          ``cached_fraction``: blocks the prefix cache holds (in use or free) / blocks;
          ``cached_blocks``: those blocks;
        * ``prefix_blocks``: the arriving request's leading blocks cached there now, and
          ``request_blocks``: its prompt's blocks (at that replica's block size);
          ``block_size``;
        * ``prefill_tokens``: prompt tokens it has still to prefill (Dynamo's active
          prefill tokens, before any cache hit);
        * ``routed_prefix_tokens``: the arriving prompt's leading tokens among the
          prompts routed to it (what SGLang's router tree holds, whether computed yet or
          not: :mod:`batch_env.llm.router_tree`), and ``routed_tokens``: that tree's
          size there (0 without prefix hashes);
        * ``ttft_recent_s``: the mean TTFT of its last :data:`RECENT_TTFT` first tokens
          (0 before any); ``speed``: its nominal decode rate (``Replica.nominal_speed``,
          tokens/s); ``max_num_seqs``; ``mask`` (:meth:`mask`).

        ``g=None`` (no arrival: the episode's end): the request's columns are 0, no
        replica masked.
        """
        self.flush()
        record = self.intake.record(g) if g is not None else (0, 0, False, 0, None)
        prompt = record[0]
        cols: dict[str, list[float]] = {k: [] for k in _VIEW_KEYS}
        for rep in self.replicas:
            st, kv = rep.state, rep.state.kv
            waiting = len(st.waiting) + rep.unadmitted
            running = rep.in_service_count()
            bs = st.block_size
            rt = rep.recent_ttft
            for k, v in (
                ("waiting", waiting),
                ("running", running),
                ("in_flight", waiting + running),
                ("kv_usage", kv.used / kv.total),
                ("kv_blocks_used", kv.used),
                ("cached_fraction", getattr(kv, "cached_total", 0) / kv.total),
                ("cached_blocks", getattr(kv, "cached_total", 0)),
                ("prefix_blocks", rep.cached_blocks(record) if prompt else 0),
                ("request_blocks", -(-prompt // bs)),
                ("block_size", bs),
                ("prefill_tokens", rep.prefill_tokens()),
                ("ttft_recent_s", sum(rt) / len(rt) if rt else 0.0),
                ("speed", rep.nominal_speed),
                ("max_num_seqs", rep.config.max_num_seqs),
            ):
                cols[k].append(v)
        out = {k: np.asarray(v) for k, v in cols.items()}
        tree = self.routed_prefixes
        if tree is not None and g is not None:
            m = np.asarray(tree.match(self._units(g))) * tree.unit_tokens
            out["routed_prefix_tokens"] = np.minimum(m, prompt)
            out["routed_tokens"] = np.asarray(tree.tokens())
        else:
            out["routed_prefix_tokens"] = out["routed_tokens"] = np.zeros(self.n, dtype=int)
        out["mask"] = self.mask(g) if g is not None else np.ones(self.n, dtype=bool)
        return out

    def run(self, router: Callable[[LLMCluster, int], int]) -> dict[str, Any]:
        """Run the episode to its end, routing each arrival to ``router(self, g)``;
        returns :meth:`summary`."""
        while (g := self.next_arrival()) is not None:
            self.route(router(self, g))
        return self.summary()

    def _end_at(self, t: float) -> None:
        self.now = t
        for rep in self.replicas:
            rep.sync(t)

    # -- accounting ------------------------------------------------------------------------
    def request_counts(self) -> dict[str, int]:
        """Where every arrival is now, over all replicas: ``arrived == completed + waiting
        + in_service + dropped + rejected`` and ``in_system == waiting + in_service``
        (routed arrivals not yet admitted wait, and so does the arrival at the router)."""
        self.flush()
        counts = {k: 0 for k in ("arrived", "completed", "waiting", "in_service", "dropped")}
        for rep in self.replicas:
            c = rep.request_counts()
            inbox = rep.unadmitted
            counts["arrived"] += c["arrived"] + inbox
            counts["completed"] += c["completed"]
            counts["waiting"] += c["waiting"] + inbox
            counts["in_service"] += c["in_service"]
            counts["dropped"] += c["dropped"]
        rejected = self.intake.rejected_by(self.now)
        if self._pending is not None:  # at the router, waiting for its decision
            counts["arrived"] += 1
            counts["waiting"] += 1
        counts["in_system"] = self.in_system
        counts["arrived"] += rejected
        counts["rejected"] = rejected
        return counts

    @property
    def in_system(self) -> int:
        """Requests in the cluster: in the replicas, routed to them, or at the router."""
        self.flush()
        n = sum(rep.in_system + rep.unadmitted for rep in self.replicas)
        return n + (self._pending is not None)

    def costs(self) -> tuple[float, float, float, int]:
        """The cost the replicas have committed so far (each up to its own clock): latency
        integral (s), energy (J), weighted SLA misses, drops."""
        self.flush()
        L = E = M = 0.0
        D = 0
        for rep in self.replicas:
            L += rep.latency_integral_s
            E += rep.energy_j
            M += rep.misses()
            D += rep.drops
        return L, E, M, D

    def accrued_costs(self) -> tuple[float, float, float, int]:
        """:meth:`costs` and what each replica has accrued since its clock up to the
        cluster's (the iteration in progress, or idle time): its requests' latency
        (:meth:`batch_env.core.ServingLoop.pending_latency`) and its power's energy. The
        next commits take it back in, so the two agree once every replica is at the
        cluster's clock (an arrival that is then dropped counts until its drop)."""
        L, E, M, D = self.costs()
        t = self.now
        for rep in self.replicas:
            if t > rep.now:
                L += rep.pending_latency(t)
                E += rep.power_w * (t - rep.now)
        return L, E, M, D

    def summary(self) -> dict[str, Any]:
        """The episode summary, the replicas' at the cluster's clock: the cluster's own
        keys (:func:`batch_env.metrics.llm_episode_summary` over every replica's summary
        requests, energy and misses) and ``"replicas"``, each replica's summary."""
        self.flush()
        for rep in self.replicas:
            rep.sync(self.now)
        per = [rep.summary() for rep in self.replicas]
        out = _pooled_summary(self.replicas, self.intake, self.now)
        out.update(_pooled_prefix(self.replicas, per))
        out["replicas"] = per
        out["routed"] = np.bincount(np.asarray(self.routed, np.int64), minlength=self.n).tolist()
        return out


_VIEW_KEYS = (
    "waiting",
    "running",
    "in_flight",
    "kv_usage",
    "kv_blocks_used",
    "cached_fraction",
    "cached_blocks",
    "prefix_blocks",
    "request_blocks",
    "block_size",
    "prefill_tokens",
    "ttft_recent_s",
    "speed",
    "max_num_seqs",
)


def _pooled_prefix(replicas: list[Replica], per: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's prefix-cache keys over the replicas that cache prefixes: their
    counts summed, the hit rate of the sums, the cached fraction of their blocks."""
    on = [(rep, s) for rep, s in zip(replicas, per, strict=True) if rep.prefix_ratio is not None]
    if not on:
        return {}
    out: dict[str, Any] = {
        k: sum(s[k] for _, s in on)
        for k in ("prefix_hit_tokens", "prefix_prompt_tokens", "prefix_evictions")
    }
    hit, prompt = out["prefix_hit_tokens"], out["prefix_prompt_tokens"]
    out["prefix_hit_rate"] = hit / prompt if prompt else float("nan")
    cached = sum(cast("PrefixKVCache", rep.state.kv).cached_total for rep, _ in on)
    out["kv_cached_fraction_end"] = cached / sum(rep.state.kv.total for rep, _ in on)
    if all("cascade_iterations" in s for _, s in on):
        out["cascade_iterations"] = sum(s["cascade_iterations"] for _, s in on)
    return out


def _child_seed(seed: int, r: int) -> int:
    """Replica ``r``'s seed (r >= 1): a child of the cluster's ``seed``."""
    return int(np.random.SeedSequence([seed, r]).generate_state(1, np.uint64)[0] >> 1)


def _pooled_summary(replicas: list[Replica], intake: RequestIntake, now: float) -> dict:
    """:func:`llm_episode_summary` of the replicas' summary requests pooled (each one's
    window entries), their window counters and totals summed."""
    arrivals: list[float] = []
    finished: list[float | None] = []
    first: list[float] = []
    output: list[int] = []
    cls: list[int] = []
    opened = [rep.window for rep in replicas if rep.window is not None]
    for rep in replicas:
        n = len(rep.arrivals)
        lo = rep.window.entry if rep.window is not None else n
        hi = rep.window_end if rep.window_end is not None else n
        arrivals += rep.arrivals[lo:hi]
        finished += rep.finished_at[lo:hi]
        first += rep.sla_books.first_at[lo:hi]
        output += rep.state.output[lo:hi]
        cls += rep.state.request_class[lo:hi]
    window = None
    if opened:
        ws = opened
        window = replace(
            ws[0],
            latency_integral_s=sum(w.latency_integral_s for w in ws),
            energy_j=sum(w.energy_j for w in ws),
            misses=sum(w.misses for w in ws),
            drops=sum(w.drops for w in ws),
            entry=0,
            n_batches=sum(w.n_batches for w in ws),
            sum_batch=sum(w.sum_batch for w in ws),
        )
    totals = [rep.totals() for rep in replicas]
    total = {k: sum(t[k] for t in totals) for k in totals[0]}
    total["now_s"] = now
    total["arrived_total"] += intake.rejected_by(now)
    books = [rep.window_books() for rep in replicas]
    counters = [b.counters for b in books]
    starts = [b.counters_at_start for b in books if b.counters_at_start is not None]
    first_rep = replicas[0]
    k = len(first_rep.classes)
    drops0 = [b.class_drops_at_start for b in books if b.class_drops_at_start is not None]
    drops1 = [b.class_drops_at_end for b in books if b.class_drops_at_end is not None]
    w = first_rep.config.reward_weights
    return llm_episode_summary(
        arrivals=arrivals,
        finished_at=finished,
        first_token=first,
        output=output,
        request_class=cls,
        window=window,
        entry_hi=len(arrivals),
        weights=(w.latency, w.energy, w.sla, w.drop),
        totals=total,
        counters=tuple(sum(c[i] for c in counters) for i in range(6)),  # type: ignore[arg-type]
        counters_at_start=(
            tuple(sum(c[i] for c in starts) for i in range(6)) if starts else None  # type: ignore[arg-type]
        ),
        kv_total=sum(rep.state.kv_total for rep in replicas),
        rejected_at=intake.rejected_at,
        classes=first_rep.classes if first_rep.multi else None,
        ttft_sla_s=first_rep.sla_books.ttft_s,
        tpot_sla_s=first_rep.sla_books.tpot_s,
        class_drops=(
            [sum(d[c] for d in drops0) for c in range(k)] if drops0 else None,
            [sum(d[c] for d in drops1) for c in range(k)] if drops1 else None,
            [sum(rep.intake.class_drops[c] for rep in replicas) for c in range(k)],
        ),
    )


__all__ = ["MAX_EVENTS_PER_ARRIVAL", "LLMCluster", "Replica"]
