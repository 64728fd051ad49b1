"""``DynamicBatchingVectorEnv``: the NumPy-native vector twin of ``DynamicBatching-v0``.

Registered as the id's ``vector_entry_point``; ``docs/vector_envs.md`` says what is
identical to the scalar env (:mod:`.dynamic_batching`) and what agrees in distribution.
"""

from __future__ import annotations

import math
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from ..executor import ProfileExecutor
from ..metrics import WindowStart, latency_stats, summaries_from_totals, warn_summaries
from ..seeding import pcg64_states
from .dynamic_batching import OBS_CLIP, DynamicBatchingEnv
from .features import ObsFeature

# ----------------------------------------------------------------------------------------
# The NumPy-native vector twin
# ----------------------------------------------------------------------------------------

_W0 = 4096  # initial entries per lane in the arrival buffer (grows when a queue needs it)
_COPY = 2048  # arrivals copied from a lane's stream chunk per refill
_G = 32  # window of the linear first pass of the searches (and +inf padding of each row)
_LAT0 = 256  # initial summary-latency columns per lane (grows up to horizon_requests)
_LOG = 256  # batches logged per lane before their latencies are written out
_NOISE = 256  # service-noise factors drawn per lane per refill
_MARGIN = 64  # arrivals drawn at a reset beyond warm-up + horizon (queued at the episode end)
_NO_MARK = 1 << 62
_AHEAD = 64  # lanes whose next episode's seeds are drawn ahead together (_draw_ahead)
# State (N = num_envs lanes; W = buffer width, grows; "entry" = a lane's arrival number).
# Arrival buffer, one row per lane, entries in arrival order (a lane's queue is its entries
# [_served, _admitted); position p of a row holds entry _offset + p):
#   _A (N, W + _G) float64: arrival times; +inf past _fill and in the _G padding columns
#   _A_flat (N * (W + _G),): _A flat, indexed by _row_start + position
#   _A_windows (N, W + 1, _G): read-only windows of _G entries from every position
#   _A_prefix (N, W + 1) float64: prefix sums of _A's rows (the latency integral)
#   _fill, _tail (N,): buffered entries per row, and the last buffered arrival time
#   _chunk, _chunk_pos (lists of N): each lane's stream chunk and the next unread position
# Per-lane counters (N,), int64 unless noted:
#   _served: entries served (the oldest waiting request's position)
#   _admitted: entries admitted into the queue (arrived by now, not dropped)
#   _late_end: positions before it are past their deadline ([_served, _late_end) are late)
#   _offset: served entries removed from the front of the row (refills compact it)
#   _arrived, _drops, _steps: arrivals, drops (full queue) and steps of the episode
#   _served_missed: served requests that missed their SLA
#   _n_batches, _batch_sum: batches run and their summed sizes
#   _last_batch, _last_latency (float64): the last batch's size and latency
#   _now, _energy, _latency_integral, _rate (float64): clock, joules, request-seconds,
#       the arrival-rate estimate
#   _step_latency_integral, _step_energy, _step_time, _step_drops, _step_arrived,
#       _step_misses: the same at the start of the step (reward and info deltas)
#   _noise (N, _NOISE) float64, _noise_pos: service-noise factors drawn ahead, next unused
# Summary window (per lane): _in_window (bool), _next_mark (arrival count that opens or
# closes it), _win_time, _win_latency_integral, _win_energy, _win_misses, _win_drops,
# _win_entry, _win_n_batches, _win_batch_sum (values when it opened), _win_end_entry and
# _win_end_drops (when it closed; -1 while open), the batch log _batch_log (N, _LOG, 2)
# float64 (completion time, end entry) with _n_logged and _lat_pos (the entry where the
# first logged batch starts), and _latency (N, up to horizon_requests) float64.
# Per-lane state a reset zeroes (rows of two 2D arrays, see _alloc_state):
_ZERO_INT = (
    "_served",
    "_admitted",
    "_late_end",
    "_offset",
    "_drops",
    "_served_missed",
    "_n_batches",
    "_batch_sum",
    "_arrived",
    "_last_batch",
    "_steps",
    "_step_misses",
    "_win_misses",
    "_win_drops",
    "_win_entry",
    "_win_n_batches",
    "_win_batch_sum",
    "_n_logged",
    "_lat_pos",
)
_ZERO_FLOAT = ("_latency_integral", "_last_latency", "_win_latency_integral")
_EMPTY = np.empty(0)
_NONE = np.empty(0, dtype=np.int64)  # no lanes
_ARANGE_G = np.arange(_G, dtype=np.int64)
_BYTE_SUM = np.uint64(0x0101010101010101)
#: the scalar env's per-step info keys (DynamicBatchingEnv._info), in its order
_INFO_KEYS = (
    "queue_len",
    "oldest_wait_s",
    "now_s",
    "dt_s",
    "last_batch_size",
    "last_batch_latency_s",
    "reward_components",
    "action_mask",
    "clipped_action",
    "dropped_total",
    "arrived_total",
    "energy_source",
)
#: attributes every lane shares with the scalar env (DynamicBatchingVectorEnv.call)
_SHARED_ATTRS = frozenset(
    {
        "config",
        "get_config",
        "profile",
        "workload",
        "max_throughput_rps",
        "horizon_s",
        "load",
        "mean_rate_per_s",
        "idle_power_w",
        "action_space",
        "observation_space",
        "observation_features",
        "metadata",
    }
)


def _count_rows(p: np.ndarray) -> np.ndarray:
    """True entries per row of a C-contiguous ``(k, _G)`` bool array, as int64.

    Summing along a short last axis is slow in NumPy; instead each row's bytes (0 or 1)
    are read as ``_G // 8`` uint64 words, the words are added (each byte then holds at
    most ``_G // 8``) and a multiply by 0x0101... gathers all eight byte sums into the top
    byte, whatever the byte order.
    """
    w = p.view(np.uint64)
    s = w[:, 0].copy()
    for c in range(1, _G // 8):
        s += w[:, c]
    return ((s * _BYTE_SUM) >> np.uint64(56)).astype(np.int64)


class DynamicBatchingVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` independent lanes of ``DynamicBatching-v0``, stepped together in NumPy.

    ## Description

    The NumPy-native twin of :class:`DynamicBatchingEnv`, registered as the id's
    ``vector_entry_point`` (as Gymnasium's CartPole does), so
    ``gymnasium.make_vec("batch_env/DynamicBatching-v0", num_envs=N)`` builds it. Every
    lane follows the scalar env's event semantics exactly (docs/design.md: Event semantics):
    lane ``i`` after ``reset(seed=s)`` is the scalar env after ``reset(seed=s + i)``.

    The hot path is array code over all lanes: per-lane queues are rows of an arrival
    buffer (``(num_envs, W)`` float64, entries in arrival order, with prefix sums for the
    latency integral), and the arrival counts, served SLA misses and deadline prefixes
    are vectorized binary searches with the scalar env's exact float comparisons. Rare
    per-lane events take a per-lane path with the scalar semantics: refilling a lane's
    buffer from its arrival stream, drops (a full queue), the summary-window marks, and
    resets. See ``docs/vector_envs.md`` for what is identical to the scalar env and what
    only agrees in distribution.

    ## Action Space

    ``MultiDiscrete([max_batch_size + 1] * num_envs)``: one scalar action per lane, as in
    the scalar env (0 waits, b >= 1 runs the b oldest requests, a b above the queue runs
    the whole queue). ``action_masks()`` gives the valid actions of every lane,
    ``(num_envs, max_batch_size + 1)`` bool (a new array); ``call("action_masks")`` gives
    them one row per lane, as ``SyncVectorEnv.call`` does (through wrappers:
    :func:`batch_env.wrappers.vector_action_masks`). An action outside
    ``0..max_batch_size`` raises ``ValueError`` naming the lane. Before the first
    ``reset()``, ``step()`` and ``action_masks()`` raise ``gymnasium.error.ResetNeeded``.

    ## Observation Space

    ``(num_envs, 5)`` float32: each row the scalar env's five features, which
    ``observation_features`` describes (the scalar env's, whose bounds are
    ``single_observation_space``'s).

    ## Rewards

    As the scalar env, per lane.

    ## Starting State

    As the scalar env, per lane. ``reset(seed=s)`` seeds lane ``i`` with ``s + i`` (a
    list of seeds gives each lane its own); ``reset()`` without a seed draws fresh seeds.
    Autoresets draw the next seed from the lane's own ``np_random``, as the scalar env's
    ``reset()`` does, so a lane's sequence of episodes equals the scalar env's.

    ## Episode End

    As the scalar env, per lane (truncation only). ``max_episode_steps`` (set by
    ``make_vec`` from the registration) truncates a lane after that many steps. The
    episode summaries of lanes that ended are in ``info["serving"]``, a dict of arrays
    with ``_key`` masks and the mask ``info["_serving"]``, as ``SyncVectorEnv`` batches
    them (a :class:`batch_env.metrics.SummaryWarning` per step flags summaries that hide
    something). Autoreset modes (``autoreset_mode=``): ``NEXT_STEP`` (default:
    the next step resets the lane and ignores its action), ``SAME_STEP`` (the lane is
    reset inside the step; the final observation and info are in ``info["final_obs"]``
    and ``info["final_info"]``, as Gymnasium's ``SyncVectorEnv`` gives them; the mode
    the SB3 adapter needs) and ``DISABLED`` (the user resets ended lanes with
    ``reset(options={"reset_mask": mask})``; stepping before that raises
    ``gymnasium.error.ResetNeeded`` naming the lanes, as the scalar env refuses a step
    after its episode ended).

    ## Arguments

    ``num_envs``, ``autoreset_mode``, ``max_episode_steps``, ``full_info`` (default
    ``True``: every step and reset returns the scalar env's per-step info keys,
    ``queue_len``, ``oldest_wait_s``, ``now_s``, ``dt_s``, ``last_batch_size``,
    ``last_batch_latency_s``, ``reward_components``, ``action_mask``, ``clipped_action``,
    ``dropped_total``, ``arrived_total``, ``energy_source``, in ``SyncVectorEnv``'s layout and dtypes;
    ``False``: none, for speed, only the episode-end keys), and every keyword argument of :class:`DynamicBatchingEnv`
    except the real executor (``executor="torch"`` needs one model per lane: use
    ``vectorization_mode="sync"``) and non-looping traces (a lane whose stream ends
    would need the scalar env's end-of-trace path: use the scalar env or ``loop=True``).

    ## Vectorized environment

    This is it.

    ## Version History

    * v0: initial version.
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    # Per-lane state that a reset zeroes: each name is a row of _zero_i (int64) or _zero_f
    # (float64), bound with setattr in _alloc_state from _ZERO_INT and _ZERO_FLOAT. These
    # declarations only tell type checkers about them (keep them in step with the tuples).
    _served: np.ndarray
    _admitted: np.ndarray
    _late_end: np.ndarray
    _offset: np.ndarray
    _drops: np.ndarray
    _served_missed: np.ndarray
    _n_batches: np.ndarray
    _batch_sum: np.ndarray
    _arrived: np.ndarray
    _last_batch: np.ndarray
    _steps: np.ndarray
    _step_misses: np.ndarray
    _win_misses: np.ndarray
    _win_drops: np.ndarray
    _win_entry: np.ndarray
    _win_n_batches: np.ndarray
    _win_batch_sum: np.ndarray
    _n_logged: np.ndarray
    _lat_pos: np.ndarray
    _latency_integral: np.ndarray
    _last_latency: np.ndarray
    _win_latency_integral: np.ndarray

    def __init__(
        self,
        num_envs: int = 1,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_episode_steps: int | None = None,
        full_info: bool = True,
        **kwargs: Any,
    ) -> None:
        from ..checks import check_number

        check_number("num_envs", num_envs, low=1, integer=True)
        if max_episode_steps is not None:
            check_number("max_episode_steps", max_episode_steps, low=1, integer=True)
        try:
            mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(
                f"autoreset_mode={autoreset_mode!r} is invalid: allowed values are "
                f"{[m.value for m in AutoresetMode]}"
            ) from None
        if kwargs.get("executor", "profile") != "profile":
            raise ValueError(
                f"executor={kwargs['executor']!r} is not available in the NumPy vector env: it "
                "simulates from the profile only; for real execution use "
                "gymnasium.make_vec(..., vectorization_mode='sync')"
            )
        if kwargs.get("oracle_info"):
            raise ValueError(
                "oracle_info=True is not available in the NumPy vector env: use the scalar env "
                "(or gymnasium.make_vec(..., vectorization_mode='sync'))"
            )
        if kwargs.get("render_mode") is not None:
            raise ValueError(
                f"render_mode={kwargs['render_mode']!r} is invalid for the vector env: allowed "
                "values are [None]"
            )
        env = DynamicBatchingEnv(**kwargs)  # validates everything, resolves the config
        if env.workload.total_arrivals is not None:
            raise ValueError(
                "workload is a trace with loop=False: the NumPy vector env needs infinite "
                "arrival streams; use loop=True or the scalar env (vectorization_mode='sync')"
            )
        self._template = env
        self.num_envs = N = int(num_envs)
        self.single_observation_space = env.observation_space
        self.single_action_space = env.action_space
        self.observation_space = gym.vector.utils.batch_space(env.observation_space, N)
        self.action_space = gym.vector.utils.batch_space(env.action_space, N)
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self.render_mode = None
        self.autoreset_mode = mode
        self.max_episode_steps = max_episode_steps
        self.full_info = bool(full_info)

        cfg = env.config
        self.config = cfg
        self.profile = env.profile
        self.workload = env.workload
        self.max_throughput_rps = env.max_throughput_rps
        self.horizon_s = env.horizon_s
        self.mean_load = env.mean_load
        ex = env.executor
        assert isinstance(ex, ProfileExecutor)  # executor="profile" was checked above
        self._latency_table = np.asarray(ex.latency_s, dtype=np.float64)
        self._energy_table = np.asarray(ex.energy_j, dtype=np.float64)
        self._power_table = np.asarray(ex.power_w, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):  # a batch's power, e / d
            self._run_power = np.where(
                self._latency_table > 0.0, self._energy_table / self._latency_table, 0.0
            )
        self._sigma = math.sqrt(math.log1p(ex.cv * ex.cv))
        self._max_batch = cfg.max_batch_size
        self._horizon = cfg.horizon_requests
        self._cap = cfg.queue_capacity
        shared = env.lane_constants()
        self._sla = shared["sla_s"]
        self._tick = shared["tick_s"]
        self._idle = env.idle_power_w
        self._rate_tau = shared["rate_tau_s"]
        self._weights = shared["reward_weights"]
        self._first_mark = cfg.warmup_requests
        # arrivals drawn at a reset (Poisson streams split their chunks exactly): about what
        # an episode uses, so most episodes need no refill
        self._first_draw = min(
            cfg.warmup_requests + cfg.horizon_requests + max(_MARGIN, cfg.horizon_requests // 16),
            _W0,
        )
        self._end_mark = cfg.warmup_requests + cfg.horizon_requests
        self._mask_table = shared["mask_table"]
        self._energy_source = np.full(N, ex.energy_source, dtype=object)  # "profile"
        self._obs_high = shared["obs_high"]
        self._lane_rngs: list[np.random.Generator | None] = [None] * N
        # each lane's next seedless episode's generator states, drawn ahead (_draw_ahead)
        self._ahead: list[tuple[Any, Any] | None] = [None] * N
        self._behind: list[int] = []  # lanes reset since the last _draw_ahead
        self._lanes = np.arange(N, dtype=np.int64)
        self._alloc_state()
        self._alloc_buffers(_W0)
        self._autoreset = np.zeros(N, dtype=bool)
        self._started = False

    # -- state ------------------------------------------------------------------------
    def _alloc_buffers(self, width: int) -> None:
        """The per-lane arrival buffers, ``width`` entries each (``_grow`` calls it again)."""
        N = self.num_envs
        self._W = width
        # entries + future arrivals per lane, then _G columns of +inf padding for the
        # windowed searches; positions past a lane's fill are +inf too
        self._A = np.full((N, width + _G), np.inf, dtype=np.float64)
        self._A_flat = self._A.reshape(-1)
        self._A_prefix = np.zeros((N, width + 1), dtype=np.float64)  # prefix sums of _A's rows
        self._row_start = np.arange(N, dtype=np.int64) * (width + _G)
        self._prefix_row_start = np.arange(N, dtype=np.int64) * (width + 1)
        # windows of _G entries starting at each position 0..width of each row (a view)
        self._A_windows = np.lib.stride_tricks.as_strided(
            self._A, shape=(N, width + 1, _G), strides=(self._A.strides[0], 8, 8), writeable=False
        )

    def _alloc_state(self) -> None:
        """The per-lane state arrays (allocated once)."""
        N = self.num_envs
        z = lambda dt: np.zeros(N, dtype=dt)  # noqa: E731
        # the state a reset zeroes, as rows of two arrays: a reset is two operations
        self._zero_i = np.zeros((len(_ZERO_INT), N), dtype=np.int64)
        self._zero_f = np.zeros((len(_ZERO_FLOAT), N), dtype=np.float64)
        for rows, names in ((self._zero_i, _ZERO_INT), (self._zero_f, _ZERO_FLOAT)):
            for row, name in zip(rows, names, strict=True):
                setattr(self, name, row)
        self._fill = z(np.int64)
        self._tail = z(np.float64)  # each lane's last buffered arrival (A at fill - 1)
        self._now, self._energy, self._rate = (z(np.float64) for _ in range(3))
        self._clipped = z(bool)
        self._head = z(np.float64)  # each lane's entry at ws (its oldest request) at the last _obs
        self._step_latency_integral, self._step_energy, self._step_time = (
            z(np.float64) for _ in range(3)
        )
        self._step_drops, self._step_arrived = z(np.int64), z(np.int64)
        # summary window (per lane): started?, snapshot, end mark
        self._in_window: np.ndarray = z(bool)
        self._win_time, self._win_energy = z(np.float64), z(np.float64)
        self._win_end_entry, self._win_end_drops = (
            np.full(N, -1, dtype=np.int64),
            np.full(N, -1, dtype=np.int64),
        )
        self._next_mark = z(np.int64)
        self._latency = np.zeros(
            (N, min(self._horizon, _LAT0)), dtype=np.float64
        )  # summary latencies
        # the batch log: completion time and end entry (absolute) of each batch started in
        # the summary window since the last flush, which writes their requests' latencies;
        # _lat_pos is the absolute entry where the first logged batch starts
        # (completion, end entry) pairs side by side: a lane's log write touches one line
        # (entries are exact in float64 below 2**53)
        self._batch_log = np.zeros((N, _LOG, 2), dtype=np.float64)
        self._batch_log_flat = self._batch_log.reshape(-1)
        self._log_row_start = np.arange(N, dtype=np.int64) * _LOG
        # service noise
        self._noise = np.ones((N, _NOISE), dtype=np.float64)
        self._noise_pos = np.full(N, _NOISE, dtype=np.int64)
        self._streams: list[Any] = [None] * N
        # each lane's arrival and service generators, reseeded at every reset
        self._arrival_rng = [np.random.Generator(np.random.PCG64(0)) for _ in range(N)]
        noise = self._sigma > 0.0  # (without service noise no lane draws service numbers)
        self._service_rng = [
            np.random.Generator(np.random.PCG64(0)) for _ in range(N if noise else 0)
        ]
        self._chunk: list[np.ndarray] = [_EMPTY] * N
        self._chunk_pos = [0] * N

    def _grow(self) -> None:
        """Double the buffer width of every lane (a queue outgrew it)."""
        A, P, W = self._A, self._A_prefix, self._W
        self._alloc_buffers(2 * W)
        self._A[:, :W] = A[:, :W]
        self._A_prefix[:, : W + 1] = P

    # -- per-lane paths (rare events, the scalar env's semantics) -----------------------
    def _refill(self, n: int, t_need: float) -> None:
        """Extend lane ``n``'s buffer until it holds an arrival after ``t_need``."""
        while True:
            fill = int(self._fill[n])
            if fill > int(self._admitted[n]) and self._A[n, fill - 1] > t_need:
                return
            res, rp = self._chunk[n], self._chunk_pos[n]
            if rp >= len(res):
                res = self._chunk[n] = self._draw(n, _COPY)
                rp = self._chunk_pos[n] = 0
            if self._W - fill < _COPY:
                s = int(self._served[n])  # served entries are no longer needed
                if s:
                    self._flush_latencies(n)  # (their latencies need their arrival times)
                    A, P = self._A[n], self._A_prefix[n]
                    A[: fill - s] = A[s:fill]
                    A[fill - s : fill] = np.inf
                    np.subtract(P[s : fill + 1], P[s], out=P[: fill + 1 - s])
                    fill -= s
                    self._fill[n] = fill
                    self._served[n] -= s
                    self._admitted[n] -= s
                    self._late_end[n] = max(int(self._late_end[n]) - s, 0)
                    self._offset[n] += s
                if self._W - fill < _COPY:
                    self._grow()
            m = min(_COPY, len(res) - rp)
            A, P = self._A[n], self._A_prefix[n]
            A[fill : fill + m] = res[rp : rp + m]
            np.add.accumulate(A[fill : fill + m], out=P[fill + 1 : fill + m + 1])
            P[fill + 1 : fill + m + 1] += P[fill]
            self._fill[n] = fill + m
            self._tail[n] = A[fill + m - 1]
            self._chunk_pos[n] = rp + m
            if rp + m == len(res):
                self._chunk[n], self._chunk_pos[n] = _EMPTY, 0

    def _draw(self, n: int, max_n: int) -> np.ndarray:
        """Lane ``n``'s next arrivals: a piece of at most ``max_n`` where the stream can split
        its chunks exactly (Poisson), else its next whole chunk."""
        stream = self._streams[n]
        piece = getattr(stream, "next_piece", None)
        return (piece(max_n) if piece is not None else stream.next_chunk()).times

    def _lane_noise(self, n: int) -> None:
        s = self._sigma
        z = self._service_rng[n].standard_normal(_NOISE)
        self._noise[n] = np.exp(s * z - 0.5 * s * s)  # the scalar executor's factors, in order
        self._noise_pos[n] = 0

    def _lane_absorb(self, n: int, t_end: float, pos: int, power: float, ws_from: int) -> None:
        """The scalar ``_absorb`` for lane ``n``: arrivals before buffer position ``pos``."""
        i = int(self._admitted[n])
        now = float(self._now[n])
        L = (i - ws_from) * (t_end - now)
        k = pos - i
        if k:
            room = self._cap - (i - int(self._served[n]))
            adm = k if k <= room else (room if room > 0 else 0)
            A, P = self._A[n], self._A_prefix[n]
            if adm:
                L += adm * t_end - math.fsum(A[i : i + adm].tolist())
            if k > adm:  # drop the rejected arrivals from the buffer
                fill = int(self._fill[n])
                cut = k - adm
                A[i + adm : fill - cut] = A[pos:fill]
                A[fill - cut : fill] = np.inf
                fill -= cut
                np.cumsum(A[i + adm : fill], out=P[i + adm + 1 : fill + 1])
                P[i + adm + 1 : fill + 1] += P[i + adm]
                self._fill[n] = fill  # (_tail stays: _ensure left an arrival after t_end)
                self._drops[n] += cut
            self._admitted[n] = i + adm
            self._arrived[n] += k
        self._latency_integral[n] += L
        self._energy[n] += power * (t_end - now)
        self._now[n] = t_end

    def _lane_advance(self, n: int, t_end: float, power: float, ws_from: int, sm_prev: int) -> None:
        """The scalar ``_advance`` for lane ``n`` (summary marks and drops included)."""
        i, fill = int(self._admitted[n]), int(self._fill[n])
        target = int(self._arrived[n]) + int(np.searchsorted(self._A[n, i:fill], t_end, "right"))
        while self._next_mark[n] < target:
            pos = int(self._admitted[n]) + int(self._next_mark[n] - self._arrived[n])
            self._lane_absorb(n, float(self._A[n, pos]), pos, power, ws_from)
            self._lane_on_mark(n, ws_from, sm_prev)
        self._lane_absorb(
            n, t_end, int(self._admitted[n]) + target - int(self._arrived[n]), power, ws_from
        )

    def _lane_on_mark(self, n: int, ws_from: int, sm_prev: int) -> None:
        if not self._in_window[n]:
            now, i = float(self._now[n]), int(self._admitted[n])
            past = sum(1 for a in self._A[n, ws_from:i].tolist() if now - a > self._sla)
            self._in_window[n] = True
            self._win_time[n], self._win_latency_integral[n], self._win_energy[n] = (
                now,
                self._latency_integral[n],
                self._energy[n],
            )
            self._win_misses[n] = sm_prev + past
            self._win_drops[n], self._win_entry[n] = self._drops[n], self._offset[n] + i
            self._lat_pos[n] = self._offset[n] + self._served[n]  # batches start here from now on
            self._win_n_batches[n], self._win_batch_sum[n] = self._n_batches[n], self._batch_sum[n]
            self._next_mark[n] = self._end_mark
        else:
            self._win_end_entry[n] = self._offset[n] + self._admitted[n]
            self._win_end_drops[n] = self._drops[n]
            self._next_mark[n] = _NO_MARK

    def _reset_lanes(self, lanes: np.ndarray, seeds: list[int | None]) -> None:
        """Start the next episode of ``lanes``: the scalar env's ``reset(seed)``, per lane.
        A seedless reset takes the generator states drawn ahead for the lane
        (``_draw_ahead``) when there are some.

        :param lanes: lane indices.
        :param seeds: one seed or ``None`` (draw from the lane's ``np_random``) per lane.
        """
        A, P, W = self._A, self._A_prefix, self._W
        noise = self._sigma > 0.0
        todo = lanes.tolist()
        # in phases over the lanes (seeds, streams, draws, buffers): each phase's code and
        # data stay in cache across the lanes reset in this step
        states: list[Any] = [None] * len(todo)
        need, need_seeds = [], []
        for r, (n, seed) in enumerate(zip(todo, seeds, strict=True)):
            if seed is not None:
                self._lane_rngs[n] = gym.utils.seeding.np_random(seed)[0]
                self._ahead[n] = None  # (drawn from the generator just replaced)
            elif self._ahead[n] is not None:  # computed ahead (_draw_ahead)
                states[r], self._ahead[n] = self._ahead[n], None
                continue
            else:
                if self._lane_rngs[n] is None:
                    self._lane_rngs[n] = gym.utils.seeding.np_random(None)[0]
                seed = int(self._lane_rngs[n].integers(0, 2**63 - 1))
            need.append(r)
            need_seeds.append(seed)
        for r, state in zip(need, self._seed_states(need_seeds), strict=True):
            states[r] = state
        for n, (arrival, service) in zip(todo, states, strict=True):
            self._arrival_rng[n].bit_generator.state = arrival
            self._streams[n] = self.workload.stream(self._arrival_rng[n])
            if noise:
                self._service_rng[n].bit_generator.state = service
                self._lane_noise(n)
        draws = [self._draw(n, self._first_draw) for n in todo]
        for n, res in zip(todo, draws, strict=True):
            m = min(len(res), W)
            old = int(self._fill[n])
            A[n, :m] = res[:m]
            if old > m:
                A[n, m:old] = np.inf
            np.add.accumulate(res[:m], out=P[n, 1 : m + 1])  # (np.cumsum, without its wrapper)
            self._fill[n] = m
            self._tail[n] = res[m - 1]
            # keep the draw only while part of it is unused (freed, its memory is reused hot)
            self._chunk[n], self._chunk_pos[n] = (res, m) if m < len(res) else (_EMPTY, 0)
        self._zero_i[:, lanes] = 0
        self._zero_f[:, lanes] = 0.0
        self._clipped[lanes] = False
        self._win_end_entry[lanes] = self._win_end_drops[lanes] = -1
        self._rate[lanes] = self.workload.mean_rate_per_s
        if not noise:
            self._noise_pos[lanes] = _NOISE
        t = self._A_flat[self._row_start[lanes]]  # the first arrival
        self._ensure(lanes, t)
        self._now[lanes] = t
        self._energy[lanes] = self._idle * t  # idle from time 0 to the first arrival
        if self._first_mark == 0:  # the window opens at the first arrival
            self._in_window[lanes] = True
            self._win_time[lanes] = t
            self._win_energy[lanes] = self._energy[lanes]
            self._next_mark[lanes] = self._end_mark
        else:
            self._in_window[lanes] = False
            self._win_time[lanes] = self._win_energy[lanes] = 0.0
            self._next_mark[lanes] = self._first_mark
        # admit the first arrival at its own time (the scalar env's _advance to it): its
        # wait and the idle time until it are 0, no mark is reached (marks count arrivals
        # from 1) and the queue has room; where equal trace timestamps bring more at that
        # instant, the general advance admits the rest (past a mark or a full queue too)
        self._admitted[lanes] = self._arrived[lanes] = 1
        tied = self._A_flat[self._row_start[lanes] + 1] <= t
        if np.count_nonzero(tied):
            self._advance(lanes[tied], t[tied], self._idle, self._served[lanes[tied]], None)
        self._step_latency_integral[lanes], self._step_energy[lanes], self._step_drops[lanes] = (
            self._latency_integral[lanes],
            self._energy[lanes],
            self._drops[lanes],
        )
        self._step_time[lanes], self._step_arrived[lanes] = self._now[lanes], self._arrived[lanes]
        self._behind += todo
        if len(self._behind) >= min(_AHEAD, self.num_envs):
            self._draw_ahead()

    def _seed_states(self, seeds: list[int]) -> list[tuple[Any, Any]]:
        """The generator states of episodes seeded with ``seeds``: the arrival and service
        children of ``SeedSequence(seed).spawn(3)`` (sizes unused), as PCG64 states (the
        service one ``None`` without service noise)."""
        arrival = pcg64_states(seeds, 0)
        service = pcg64_states(seeds, 1) if self._sigma > 0.0 else [None] * len(seeds)
        return list(zip(arrival, service, strict=True))

    def _draw_ahead(self) -> None:
        """Draw the next episode's seed of every lane reset since the last call, from its
        own ``np_random`` (the draw its next seedless reset would make), and compute the
        generator states of all of them at once (``seeding.pcg64_states`` pays from about
        6 lanes; about 5 of 1024 lanes reset in a step). A reset with an explicit seed
        voids the lane's drawn-ahead states, so every lane's sequence of episodes is the
        scalar env's."""
        lanes = [n for n in dict.fromkeys(self._behind) if self._ahead[n] is None]
        self._behind = []
        # every lane in _behind was reset, which set its generator (never None here)
        seeds = [int(self._lane_rngs[n].integers(0, 2**63 - 1)) for n in lanes]  # type: ignore[union-attr]
        for n, state in zip(lanes, self._seed_states(seeds), strict=True):
            self._ahead[n] = state

    def _lane_summaries(self, lanes: list[int]) -> dict[int, dict[str, Any]]:
        """The episode summaries of ``lanes``, from the one metrics recorder: the latency
        figures (``latency_stats``) and the summaries (``summaries_from_totals``) of all of
        them at once. Their state is gathered in a few array reads; the handful of lanes
        ending in a step is then cheaper per lane in Python than in array code."""
        idx = np.asarray(lanes, dtype=np.int64)
        st = dict(zip(_ZERO_INT, self._zero_i[:, idx].tolist(), strict=True))
        st.update(zip(_ZERO_FLOAT, self._zero_f[:, idx].tolist(), strict=True))
        for name in (
            "_in_window",
            "_now",
            "_energy",
            "_win_time",
            "_win_energy",
            "_win_end_entry",
            "_win_end_drops",
        ):
            st[name] = getattr(self, name)[idx].tolist()
        # the end entry of each lane's last logged batch
        last_end = self._batch_log[idx, np.maximum(self._n_logged[idx] - 1, 0), 1].tolist()
        H = self._horizon
        n_lat, need, flushed, rows = [], [], [], []
        for r in range(len(lanes)):
            ws, i, off, drops = (
                st["_served"][r],
                st["_admitted"][r],
                st["_offset"][r],
                st["_drops"][r],
            )
            if st["_in_window"][r]:
                lo = st["_win_entry"][r]
                top = lo + H
                last = int(last_end[r]) if st["_n_logged"][r] else st["_lat_pos"][r]
                need.append(min(max(last, lo), top) - lo)  # latency columns the log writes
                flushed.append(min(max(st["_lat_pos"][r], lo), top) - lo)  # written earlier
                ehi = st["_win_end_entry"][r] if st["_win_end_entry"][r] >= 0 else off + i
                n_lat.append(max(min(ehi, off + ws) - lo, 0))
                dend = st["_win_end_drops"][r] if st["_win_end_drops"][r] >= 0 else drops
                window = (
                    st["_win_time"][r],
                    st["_win_latency_integral"][r],
                    st["_win_energy"][r],
                    st["_win_misses"][r],
                    st["_win_drops"][r],
                    0,
                    st["_win_n_batches"][r],
                    st["_win_batch_sum"][r],
                )
                d_sum, n_ent = dend - st["_win_drops"][r], ehi - lo
            else:  # the window never started (no summary request arrived): it is the end
                need.append(0)
                flushed.append(0)
                n_lat.append(0)
                window = (
                    st["_now"][r],
                    st["_latency_integral"][r],
                    st["_energy"][r],
                    st["_step_misses"][r],
                    drops,
                    0,
                    st["_n_batches"][r],
                    st["_batch_sum"][r],
                )
                d_sum = n_ent = 0
            rows.append((window, n_ent, d_sum, i - ws, st["_arrived"][r], off + ws))
        # the latencies go straight into a scratch array (flushed earlier ones copied first)
        scratch = np.empty((len(lanes), max(max(n_lat), max(need))))
        for r, (n, p) in enumerate(zip(lanes, flushed, strict=True)):
            if st["_in_window"][r]:
                scratch[r, :p] = self._latency[n, :p]
                self._flush_latencies(n, scratch[r])
        stats = latency_stats(scratch, np.array(n_lat), self._sla, overwrite=True)
        windows, n_entries, drops_summary, in_system, arrived, completed = zip(*rows, strict=True)
        # a WindowStart of per-lane columns (summaries_from_totals takes sequences)
        columns = WindowStart(*zip(*windows, strict=True))  # type: ignore[arg-type]
        out = summaries_from_totals(
            stats,
            window=columns,
            n_entries=n_entries,
            drops_summary=drops_summary,
            now_s=st["_now"],
            latency_integral_s=st["_latency_integral"],
            energy_j=st["_energy"],
            misses=st["_step_misses"],
            drops=st["_drops"],
            n_batches=st["_n_batches"],
            sum_batch=st["_batch_sum"],
            in_system=in_system,
            weights=self._weights,
            arrived_total=arrived,
            completed_total=completed,
        )
        return dict(zip(lanes, out, strict=True))

    # -- vectorized helpers -------------------------------------------------------------
    def _search(
        self,
        idx: np.ndarray | slice,
        lo: np.ndarray,
        hi: np.ndarray,
        key: np.ndarray,
        late: bool,
        first: np.ndarray | None = None,
    ) -> np.ndarray:
        """Per lane of ``idx``, the first index in ``[lo, hi)`` whose entry ``a`` fails the
        predicate (else ``hi``): ``a <= key`` (arrivals by ``key``; ``hi`` must be the lanes'
        fill), or with ``late``, ``key - a > sla`` (deadline passed by ``key``). The
        predicate is the scalar env's exact float comparison and monotone along a row
        (true, then false), so the counts are identical to its bisections.

        Arrivals: a window of ``_G`` entries from ``lo`` is counted at once (a step admits
        about 9 at load 0.6; entries past the fill are +inf, so the window needs no bound),
        then a binary search runs for the lanes that filled the window. Deadlines: most
        lanes stop at their first entry, so the first and second entries are tested alone
        (each pass on the lanes the previous one left open), then the window, bounded by
        ``hi``, and the binary search. ``first``: the entries at ``lo``, when the caller has
        them (deadline searches only).
        """
        Af = self._A_flat
        sla = self._sla
        lanes = self._lanes[idx]
        if late:
            rb = self._row_start[idx]
            res = lo.copy()
            v = Af[rb + lo] if first is None else first
            p = key - v > sla
            p &= lo < hi
            if not np.count_nonzero(p):
                return res
            sub = p.nonzero()[0]
            res[sub] += 1
            lo1 = res[sub]
            hi1 = hi[sub]
            k1 = key[sub]
            v = Af[rb[sub] + lo1]  # the second entry: most waits stop there
            p = k1 - v > sla
            p &= lo1 < hi1
            if not np.count_nonzero(p):
                return res
            keep = p.nonzero()[0]
            sub = sub[keep]
            lo1 = lo1[keep] + 1
            hi1 = hi1[keep]
            k1 = k1[keep]
            lanes = lanes[sub]
            pw = k1[:, None] - self._A_windows[lanes, lo1] > sla
            pw &= _ARANGE_G < (hi1 - lo1)[:, None]
        else:
            res = sub = None
            lo1, hi1, k1 = lo, hi, key
            pw = self._A_windows[lanes, lo1] <= k1[:, None]
        cnt = _count_rows(pw)
        out = lo1 + cnt
        more = cnt == _G
        if np.count_nonzero(more):  # binary search past the window
            m = more.nonzero()[0]
            a, z, kk, rbm = out[m], hi1[m], k1[m], self._row_start[lanes[m]]
            act = a < z
            while np.count_nonzero(act):
                mid = (a + z) >> 1
                vm = Af[rbm + mid]
                pm = (kk - vm > sla) if late else (vm <= kk)
                a = np.where(act & pm, mid + 1, a)
                z = np.where(act & ~pm, mid, z)
                act = a < z
            out[m] = a
        if res is None:
            return out
        res[sub] = out
        return res

    def _ensure(self, idx: np.ndarray | slice, t_end: np.ndarray) -> None:
        """Refill the lanes whose buffer does not reach past ``t_end``."""
        need = ~(self._tail[idx] > t_end)
        if np.count_nonzero(need):
            lanes = np.arange(self.num_envs)[idx][need]
            for n, t in zip(lanes.tolist(), t_end[need].tolist(), strict=True):
                self._refill(n, t)

    def _advance(
        self,
        idx: np.ndarray | slice,
        t_end: np.ndarray,
        power: np.ndarray | float,
        ws_from: np.ndarray,
        sm_prev: np.ndarray | None,
        next_arrival: bool = False,
    ) -> None:
        """Move lanes ``idx`` to ``t_end``, admitting arrivals (the scalar ``_advance``):
        every arrival at or before ``t_end`` joins, those at exactly ``t_end`` included.
        ``next_arrival``: ``t_end`` is each lane's next arrival (its entry at ``_admitted``), so
        that one joins without a search; only the lanes whose following entry is at the
        same instant (equal trace timestamps) search for the rest of the tie."""
        i = self._admitted[idx]
        now = self._now[idx]
        if next_arrival:
            j = i + 1
            tied = self._A_flat[self._row_start[idx] + j] <= t_end
            if np.count_nonzero(tied):
                j[tied] = self._search(
                    self._lanes[idx][tied], j[tied], self._fill[idx][tied], t_end[tied], False
                )
        else:
            j = self._search(idx, i, self._fill[idx], t_end, False)
        k = j - i
        arrived = self._arrived[idx]
        room = self._cap - (i - self._served[idx])
        mark = self._next_mark[idx]
        hit = mark < arrived + k  # a summary-window mark among the arrivals
        drop = k > room
        slow = drop | (hit & ~self._in_window[idx])  # drops and the window's start: per lane
        end = hit & ~slow
        if np.count_nonzero(
            end
        ):  # the window's end mark, without drops: where the scalar env stops
            lanes = self._lanes[idx][end]  # at the mark, only the end entry is recorded
            self._win_end_entry[lanes] = self._offset[lanes] + (i + mark - arrived)[end]
            self._win_end_drops[lanes] = self._drops[lanes]
            self._next_mark[lanes] = _NO_MARK
        n_sys = i - ws_from
        Pf = self._A_prefix.reshape(-1)
        rb1 = self._prefix_row_start[idx]
        L = n_sys * (t_end - now)
        L += k * t_end - (Pf[rb1 + j] - Pf[rb1 + i])
        dE = power * (t_end - now)
        if np.count_nonzero(slow):
            fast = ~slow
            self._latency_integral[idx] += np.where(fast, L, 0.0)
            self._energy[idx] += np.where(fast, dE, 0.0)
            self._admitted[idx] = np.where(fast, j, i)
            self._arrived[idx] = np.where(fast, arrived + k, arrived)
            self._now[idx] = np.where(fast, t_end, now)
            lanes = np.arange(self.num_envs)[idx][slow]
            pw = np.broadcast_to(power, t_end.shape)[slow].tolist()
            wsf = ws_from[slow].tolist()
            smp = (
                sm_prev[slow] if sm_prev is not None else self._served_missed[idx][slow]
            ).tolist()
            for n, t, p, w, s in zip(
                lanes.tolist(), t_end[slow].tolist(), pw, wsf, smp, strict=True
            ):
                self._lane_advance(n, t, p, w, s)
        else:
            self._latency_integral[idx] += L
            self._energy[idx] += dE
            self._admitted[idx] = j
            self._arrived[idx] = arrived + k
            self._now[idx] = t_end

    def _obs(self, idx: np.ndarray | slice, head: np.ndarray | None = None) -> np.ndarray:
        """Observations of lanes ``idx`` (the scalar env's features, float64 then float32).

        :param head: the lanes' entries at the head of the queue, when the caller has them.
            They are kept (``_head``): the next step's search for missed deadlines in its
            batch starts there.
        """
        B = self._max_batch
        ws = self._served[idx]
        q = self._admitted[idx] - ws
        past = self._late_end[idx] - ws
        if head is None:
            head = self._A_flat[self._row_start[idx] + ws]
        self._head[idx] = head
        oldest = (self._now[idx] - head) / self._sla
        obs = np.empty((q.shape[0], 5), dtype=np.float32)
        obs[:, 0] = q / B
        obs[:, 1] = np.where(q > 0, np.minimum(oldest, OBS_CLIP), 0.0)
        obs[:, 2] = np.minimum(self._rate[idx] / self.max_throughput_rps, OBS_CLIP)
        obs[:, 3] = np.where(past > 0, past / np.maximum(q, 1), 0.0)
        obs[:, 4] = self._last_batch[idx] / B
        return obs

    def _info_arrays(self, dt: np.ndarray, comps: dict[str, np.ndarray]) -> dict[str, Any]:
        """The scalar env's per-step info keys as per-lane arrays with their masks, in the
        layout, dtypes and values ``SyncVectorEnv`` gives (``full_info=True``). ``comps``
        are the reward components (float64 latency and energy; sla and drop int64 at a
        step, float64 at a reset, as the scalar env's Python types make them)."""
        q = self._admitted - self._served
        oldest = self._now - self._A_flat[self._row_start + self._served]
        N = self.num_envs
        # (the arrays are rows of three 2D arrays: three allocations instead of thirty
        # keep the cost per step low with few lanes; rows never overlap)
        ints = np.array([q, self._last_batch, self._drops, self._arrived], dtype=np.int64)
        floats = np.array(
            [np.where(q > 0, oldest, 0.0), self._now, dt, self._last_latency], dtype=np.float64
        )
        ones = np.ones((len(_INFO_KEYS) + len(comps), N), dtype=bool)
        rc: dict[str, Any] = {}
        for r, (k, v) in enumerate(comps.items()):
            rc[k] = v.copy()
            rc[f"_{k}"] = ones[len(_INFO_KEYS) + r]
        info: dict[str, Any] = {
            "queue_len": ints[0],
            "oldest_wait_s": floats[0],
            "now_s": floats[1],
            "dt_s": floats[2],
            "last_batch_size": ints[1],
            "last_batch_latency_s": floats[3],
            "reward_components": rc,
            "action_mask": self._mask_table[np.minimum(q, self._max_batch)],
            "clipped_action": self._clipped.copy(),
            "dropped_total": ints[2],
            "arrived_total": ints[3],
            "energy_source": self._energy_source.copy(),
        }
        for r, k in enumerate(_INFO_KEYS):
            info[f"_{k}"] = ones[r]
        return info

    def _reset_info(self) -> dict[str, Any]:
        """Every lane's reset info (the scalar env's: dt 0, reward components 0.0)."""
        z = np.zeros(self.num_envs)
        return self._info_arrays(z, dict.fromkeys(("latency", "energy", "sla", "drop"), z))

    def _serving_arrays(self, serving: dict[int, dict[str, Any]]) -> dict[str, Any]:
        """Summaries ``{lane: summary}`` as ``SyncVectorEnv``'s ``_add_info`` batches them:
        per key an array (dtype of the value's Python type, zeros for the other lanes) and
        its mask ``_key``."""
        N = self.num_envs
        lanes = list(serving)
        mask = np.zeros(N, dtype=bool)
        mask[lanes] = True
        rows = list(serving.values())
        out: dict[str, Any] = {}
        for key, v0 in rows[0].items():
            arr = np.zeros(N, dtype=type(v0))
            arr[lanes] = [r[key] for r in rows]
            out[key] = arr
            out[f"_{key}"] = mask.copy()
        return out

    def _final_info(
        self, info: dict[str, Any], ended: np.ndarray, serving: dict[int, dict[str, Any]]
    ) -> dict[str, Any]:
        """``info["final_info"]`` (``SAME_STEP``): the ended lanes' last per-step info and
        summaries, as ``SyncVectorEnv`` batches them (other lanes zero, masks the lanes)."""
        N = self.num_envs
        mask = np.zeros(N, dtype=bool)
        mask[ended] = True

        def sub(d: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for k, v in d.items():
                if k.startswith("_"):
                    continue
                if isinstance(v, dict):
                    out[k] = sub(v)
                else:
                    arr = np.zeros_like(v) if v.dtype != object else np.full(N, None, dtype=object)
                    arr[ended] = v[ended]
                    out[k] = arr
                out[f"_{k}"] = mask.copy()
            return out

        final = sub(info)
        if serving:
            final["serving"] = self._serving_arrays(serving)
            final["_serving"] = final["serving"]["_completed"].copy()
        return final

    def _lane_info(self, info: dict[str, Any], n: int) -> dict[str, Any]:
        """Lane ``n``'s entries of a vector info dict, as the scalar env's info."""
        out: dict[str, Any] = {}
        for k, v in info.items():
            if k.startswith("_"):
                continue
            if isinstance(v, dict):
                out[k] = self._lane_info(v, n)
            elif info.get(f"_{k}") is not None and info[f"_{k}"][n]:
                out[k] = v[n].item() if isinstance(v[n], np.generic) else v[n]
        return out

    # -- SyncVectorEnv's call / get_attr / set_attr -------------------------------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """One result per lane, as ``SyncVectorEnv.call`` gives them (a method is called,
        an attribute read): ``call("action_masks")`` gives each lane's mask (rows of
        :meth:`action_masks`), ``call("queue_len")`` each lane's queue, and the attributes
        every lane shares (:data:`_SHARED_ATTRS`: ``config``, ``get_config``, ``profile``,
        ``workload``, ...) the scalar env's value for each lane."""
        if name == "action_masks":
            return tuple(self.action_masks(*args, **kwargs))
        if name == "queue_len":
            self._check_reset("queue_len")
            return tuple((self._admitted - self._served).tolist())
        if name in _SHARED_ATTRS:
            value = getattr(self._template, name)
            value = value(*args, **kwargs) if callable(value) else value
            return tuple(value for _ in range(self.num_envs))
        raise AttributeError(
            f"DynamicBatchingVectorEnv.call({name!r}): the NumPy vector env has no sub-envs; "
            f"per lane it gives 'action_masks', 'queue_len' and the shared attributes "
            f"{sorted(_SHARED_ATTRS)}"
        )

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``call(name)``, as ``SyncVectorEnv.get_attr``."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Refused: the lanes have no sub-env objects, and they share one configuration."""
        raise AttributeError(
            f"DynamicBatchingVectorEnv.set_attr({name!r}): the lanes share one configuration; "
            "build a new vector env with the arguments you need"
        )

    def _check_reset(self, call: str) -> None:
        if not self._started:
            raise gym.error.ResetNeeded(f"DynamicBatchingVectorEnv: call reset() before {call}()")

    def _actions(self, actions: Any) -> np.ndarray:
        N, B = self.num_envs, self._max_batch
        a = np.asarray(actions)
        if a.shape != (N,):
            raise ValueError(
                f"actions has shape {a.shape}: expected ({N},), one integer in 0..{B} per lane"
            )
        if a.dtype.kind not in "iu":
            ok = (
                a.dtype.kind == "f"
                and bool(np.isfinite(a).all())
                and bool((a == np.round(a)).all())
            )
            if not ok:
                lane = (
                    int(np.flatnonzero(~(np.isfinite(a) & (a == np.round(a))))[0])
                    if a.dtype.kind == "f"
                    else 0
                )
                raise ValueError(
                    f"actions[{lane}]={a[lane]!r} is invalid: expected an integer in 0..{B}"
                )
            a = a.astype(np.int64)
        if a.min() < 0 or a.max() > B:
            lane = int(np.flatnonzero((a < 0) | (a > B))[0])
            raise ValueError(
                f"actions[{lane}]={a[lane]!r} is out of range: expected an integer in 0..{B}"
            )
        return a.astype(np.int64, copy=False)

    # -- Gymnasium API ----------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every lane (or those of ``options["reset_mask"]``).

        :param seed: an int (lane ``i`` gets ``seed + i``), a list of per-lane seeds, or
            ``None`` (fresh seeds; lanes seeded before draw from their own ``np_random``).
        :param options: ``{"reset_mask": bool array}`` resets only the masked lanes.
        """
        N = self.num_envs
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            super().reset(seed=int(seed))
            seeds: list[int | None] = [int(seed) + n for n in range(N)]
        elif seed is None:
            seeds = [None] * N
        else:  # a list (a bool seed also lands here, and list() rejects it)
            seeds = list(cast("list[int | None]", seed))
            if len(seeds) != N:
                raise ValueError(f"seed has {len(seeds)} entries: expected one per lane ({N})")
        mask = np.ones(N, dtype=bool)
        if options and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"])
            if mask.shape != (N,) or mask.dtype != bool:
                raise ValueError(
                    f"options['reset_mask'] has shape {mask.shape} and dtype {mask.dtype}: "
                    f"expected a ({N},) bool array"
                )
        if not self._started and not mask.all():
            raise ValueError("options['reset_mask']: the first reset must reset every lane")
        lanes = mask.nonzero()[0]
        self._reset_lanes(lanes, [seeds[n] for n in lanes.tolist()])
        self._started = True
        self._autoreset[mask] = False
        info: dict[str, Any] = {}
        if self.full_info:
            info = self._reset_info()
            if not mask.all():  # as SyncVectorEnv: only the reset lanes' info
                info = self._final_info(info, lanes, {})
        return self._obs(slice(None)), info

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Apply one action per lane and run every lane to its next decision epoch.

        :param actions: ``(num_envs,)`` integers, each in ``0..max_batch_size``.
        """
        self._check_steppable()
        a = self._actions(actions)
        q = self._admitted - self._served
        run = a > 0
        clipped = a > q
        b = np.where(clipped, q, a)
        d, power = self._batch_durations_power(run, b)
        now = self._now
        nxt = self._A_flat[self._row_start + self._admitted]
        if self._tick is not None:
            tick = now + self._tick
            nxt = np.where(tick < nxt, tick, nxt)
        c = now + d
        t_end = np.where(run, c, nxt)
        self._ensure(slice(None), t_end)
        ws_old = self._served.copy()
        sm_prev = self._served_missed.copy()
        if np.count_nonzero(run):
            hi = ws_old + b
            served_missed = self._search(slice(None), ws_old, hi, c, True, self._head) - ws_old
            self._served_missed += served_missed
            self._served += b
            self._n_batches += run
            self._batch_sum += b
            self._log_batches(run, c)
        self._advance(slice(None), t_end, power, ws_old, sm_prev)
        empty = run & (self._admitted == self._served)
        if np.count_nonzero(empty):  # the batch emptied the queue: idle to the next arrival
            idx = empty.nonzero()[0]
            t2 = self._A_flat[self._row_start[idx] + self._admitted[idx]]
            self._ensure(idx, t2)
            self._advance(idx, t2, self._idle, self._served[idx], None, next_arrival=True)
        self._last_batch[:] = b
        self._last_latency[:] = np.where(run, d, 0.0)
        self._clipped[:] = clipped
        reward, head, dt, parts = self._step_reward()
        return self._step_outcome(reward, head, dt, parts)

    def _check_steppable(self) -> None:
        """Refuse a step before the first reset, or (autoreset DISABLED) with ended lanes.

        :raises gym.error.ResetNeeded: naming what to reset.
        """
        if not self._started:
            raise gym.error.ResetNeeded("DynamicBatchingVectorEnv: call reset() before step()")
        if self.autoreset_mode == AutoresetMode.DISABLED and np.count_nonzero(self._autoreset):
            ended = self._autoreset.nonzero()[0].tolist()
            raise gym.error.ResetNeeded(
                f"DynamicBatchingVectorEnv: lane(s) {ended} ended (truncated=True) and autoreset "
                "is DISABLED: reset them with reset(options={'reset_mask': mask}) before step()"
            )

    def _batch_durations_power(
        self, run: np.ndarray, b: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return every lane's batch duration (noisy when ``sigma > 0``; advancing the
        running lanes' noise positions) and its power over the step (idle power where
        no batch runs).

        :param run: lanes that start a batch.
        :param b: the (clipped) batch size per lane.
        """
        d = self._latency_table[b]
        if self._sigma > 0.0:
            lanes = run.nonzero()[0]
            for n in lanes[self._noise_pos[lanes] >= _NOISE].tolist():
                self._lane_noise(n)
            fk = self._noise_pos[lanes]
            d[lanes] *= self._noise[lanes, fk]
            self._noise_pos[lanes] = fk + 1
            with np.errstate(divide="ignore", invalid="ignore"):
                e = self._power_table[b] * d
                power = np.where(run, np.where(d > 0.0, e / d, 0.0), self._idle)
        else:  # the same division, looked up
            power = np.where(run, self._run_power[b], self._idle)
        return d, power

    def _step_reward(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Account the step's reward (the scalar ``_step_accounting``): count the requests
        now past their deadline, take the cost increments since the last step, update the
        arrival-rate estimate and the step baselines.

        :return: the reward, each lane's head arrival time, the step's duration and the
            reward components (``latency``, ``energy``, ``sla``, ``drop``).
        """
        now = self._now
        ws = self._served
        head = self._A_flat[self._row_start + ws]
        kd0 = np.maximum(self._late_end, ws)
        first = head
        behind = (self._late_end > ws).nonzero()[0]  # lanes with requests already past deadline
        if behind.size:
            first = head.copy()
            first[behind] = self._A_flat[self._row_start[behind] + kd0[behind]]
        kd = self._search(slice(None), kd0, self._admitted, now, True, first)
        self._late_end[:] = kd
        M = self._served_missed + (kd - ws)
        dL, dE = (
            self._latency_integral - self._step_latency_integral,
            self._energy - self._step_energy,
        )
        dM, dD = M - self._step_misses, self._drops - self._step_drops
        wl, we, wsla, wd = self._weights
        reward = -(wl * dL + we * dE + wsla * dM + wd * dD)
        dt = now - self._step_time
        dn = self._arrived - self._step_arrived
        self._rate = self._rate * np.exp(-dt / self._rate_tau) + dn / self._rate_tau
        np.copyto(self._step_latency_integral, self._latency_integral)
        np.copyto(self._step_energy, self._energy)
        np.copyto(self._step_time, now)
        np.copyto(self._step_misses, M)
        np.copyto(self._step_drops, self._drops)
        np.copyto(self._step_arrived, self._arrived)
        self._steps += 1
        return reward, head, dt, {"latency": dL, "energy": dE, "sla": dM, "drop": dD}

    def _step_outcome(
        self, reward: np.ndarray, head: np.ndarray, dt: np.ndarray, parts: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Finish a step: restart the lanes that ended last step (NEXT_STEP), build the
        observations, the truncation flags and the info (with episode summaries of the
        lanes that ended), and apply the autoreset mode.

        :param reward: the step's reward (zeroed here for restarted lanes).
        :param head: each lane's head arrival time (set here for restarted lanes).
        :param dt: the step's duration per lane.
        :param parts: the reward components, for the info.
        :return: ``step``'s result.
        """
        N = self.num_envs
        now = self._now
        ws = self._served
        mode = self.autoreset_mode
        redo = self._autoreset.nonzero()[0] if mode == AutoresetMode.NEXT_STEP else _NONE
        if redo.size:  # lanes that ended last step start over; their step here is discarded
            self._reset_lanes(redo, [None] * redo.size)
            reward[redo] = 0.0
            head[redo] = self._A_flat[self._row_start[redo]]  # their first arrival
        obs = self._obs(slice(None), head)
        over = (now >= self.horizon_s) | (
            (self._win_end_entry >= 0) & (self._offset + ws >= self._win_end_entry)
        )
        over[redo] = False
        truncated = over
        if self.max_episode_steps is not None:
            truncated = over | (self._steps >= self.max_episode_steps)
        terminated = np.zeros(N, dtype=bool)
        info: dict[str, Any] = {}
        if self.full_info:
            info = self._info_arrays(dt, parts)
            if redo.size:
                self._reset_info_lanes(info, redo)
        serving: dict[int, dict[str, Any]] = {}
        if np.count_nonzero(over):
            serving = self._lane_summaries(over.nonzero()[0].tolist())
            # stacklevel 4: warn_summaries, this method, step, step's caller
            warn_summaries(serving, "DynamicBatchingVectorEnv: episode summaries", stacklevel=4)
            if mode != AutoresetMode.SAME_STEP:
                info["serving"] = self._serving_arrays(serving)
                info["_serving"] = over.copy()
        if mode != AutoresetMode.SAME_STEP:  # NEXT_STEP: reset next step; DISABLED: refuse it
            self._autoreset[:] = truncated
        elif mode == AutoresetMode.SAME_STEP and truncated.any():
            self._same_step_reset(obs, info, truncated, serving)
        return obs, reward, terminated, truncated, info

    def _same_step_reset(
        self,
        obs: np.ndarray,
        info: dict[str, Any],
        truncated: np.ndarray,
        serving: dict[int, dict[str, Any]],
    ) -> None:
        """SAME_STEP autoreset: keep the ended lanes' final observations and info under
        ``final_obs``/``final_info``, reset those lanes and put their first observation
        (and reset info) in ``obs`` and ``info``, in place.

        :param obs: the step's observations (updated in place).
        :param info: the step's info (updated in place).
        :param truncated: the lanes that ended.
        :param serving: the ended lanes' episode summaries.
        """
        N = self.num_envs
        ended = truncated.nonzero()[0]
        final_obs = np.full(N, None, dtype=object)
        for n in ended.tolist():
            final_obs[n] = obs[n].copy()
        final_info = self._final_info(info, ended, serving)
        self._reset_lanes(ended, [None] * ended.size)
        obs[ended] = self._obs(ended)
        if self.full_info:
            self._reset_info_lanes(info, ended)
        info["final_obs"], info["_final_obs"] = final_obs, truncated.copy()
        info["final_info"], info["_final_info"] = final_info, truncated.copy()

    def _reset_info_lanes(self, info: dict[str, Any], lanes: np.ndarray) -> None:
        """Overwrite ``lanes``' per-step info with their reset info (``full_info=True``).
        The reward components keep the step's dtypes (``SyncVectorEnv`` takes a key's dtype
        from the first lane that gives it; the values are equal)."""
        sub = self._reset_info()
        for k, v in sub.items():
            if k.startswith("_"):
                continue
            if isinstance(v, dict):
                for kk, vv in v.items():
                    if not kk.startswith("_"):
                        info[k][kk][lanes] = vv[lanes]
            else:
                info[k][lanes] = v[lanes]

    def _log_batches(self, run: np.ndarray, c: np.ndarray) -> None:
        """Log the batches that started now in lanes whose summary window is open (one
        completion time and end entry per lane; ``_flush_latencies`` writes the latencies).
        Every lane writes its next free slot, which costs less than selecting lanes; only
        the logging lanes count theirs."""
        flat = self._log_row_start + self._n_logged
        self._batch_log_flat[2 * flat] = c
        self._batch_log_flat[2 * flat + 1] = self._offset + self._served
        self._n_logged += run & self._in_window
        full = self._n_logged == _LOG
        if np.count_nonzero(full):
            for n in full.nonzero()[0].tolist():
                self._flush_latencies(n)

    def _flush_latencies(self, n: int, dest: np.ndarray | None = None) -> None:
        """Write the latencies of lane ``n``'s logged batches' summary requests (completion
        minus arrival, the scalar env's float operation) and empty its log. Called before
        served arrivals leave the buffer and when the log is full (into the lane's
        ``_latency`` row), and at the summary (into ``dest``, a row of the summary's
        scratch array, indexed like ``_latency``'s rows)."""
        m = int(self._n_logged[n])
        if not m:
            return
        ends = self._batch_log[n, :m, 1].astype(np.int64)
        lo = int(self._win_entry[n])
        hi = lo + self._horizon
        first = min(max(int(self._lat_pos[n]), lo), hi)
        e = np.minimum(np.maximum(ends, lo), hi)  # (ufuncs: np.clip and np.diff are slower)
        cnt = e.copy()
        cnt[1:] -= e[:-1]
        cnt[0] -= first
        last = int(e[-1])
        if last > first:  # the batches' requests are contiguous entries first..last-1
            if dest is None:
                if last - lo > self._latency.shape[1]:
                    width = self._latency.shape[1]
                    grown = np.zeros((self.num_envs, min(self._horizon, max(2 * width, last - lo))))
                    grown[:, :width] = self._latency
                    self._latency = grown
                dest = self._latency[n]
            off = int(self._offset[n])
            np.subtract(
                self._batch_log[n, :m, 0].repeat(cnt),
                self._A[n, first - off : last - off],
                out=dest[first - lo : last - lo],
            )
        self._lat_pos[n] = int(ends[-1])
        self._n_logged[n] = 0

    def action_masks(self) -> np.ndarray:
        """Valid actions of every lane, ``(num_envs, max_batch_size + 1)`` bool (a new array).

        :raises gymnasium.error.ResetNeeded: before the first ``reset()``.
        """
        if not self._started:
            raise gym.error.ResetNeeded(
                "DynamicBatchingVectorEnv: call reset() before action_masks()"
            )
        # (fancy indexing copies the rows; ndarray.take would copy the whole strided view)
        return self._mask_table[np.minimum(self._admitted - self._served, self._max_batch)]

    @property
    def observation_features(self) -> tuple[ObsFeature, ...]:
        """The features of each row of the observation, in order: the scalar env's
        (:attr:`DynamicBatchingEnv.observation_features`), whose bounds are
        ``single_observation_space``'s."""
        return self._template.observation_features

    def get_config(self) -> dict[str, Any]:
        """The resolved configuration of every lane, and ``num_envs``."""
        return {**self._template.get_config(), "num_envs": self.num_envs}

    def close_extras(self, **kwargs: Any) -> None:
        """Release the template env."""
        self._template.close()
