"""``batch_env/DynamicBatching-v0``: whole-model dynamic batching on one accelerator."""

from __future__ import annotations

from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..config import ServingConfig
from ..core import ServingCore
from ..executor import Executor
from ..profiles.batch_profile import Profile
from ..render import QUEUE_BARS, CompletionTimeline, ServerView, batch_panel
from ..workload import Workload
from .features import ObsFeature, feature_names, features_box

#: the largest value of observation features 1 and 2 (they are clipped there)
OBS_CLIP = 100.0


def obs_features(queue_capacity: int, max_batch_size: int) -> tuple[ObsFeature, ...]:
    """The features of ``DynamicBatching-v0``'s observation (``_obs`` computes them, in
    this order), for a queue of ``queue_capacity`` and batches of up to ``max_batch_size``."""
    return (
        ObsFeature(
            "queue_len_over_max_batch",
            "requests waiting in the queue",
            "requests",
            "/ max_batch_size (so at most queue_capacity / max_batch_size)",
            0.0,
            queue_capacity / max_batch_size,
        ),
        ObsFeature(
            "oldest_wait_over_sla",
            "age of the oldest waiting request (0 when none waits)",
            "s",
            f"/ SLA (sla_ms), clipped at {OBS_CLIP:g}",
            0.0,
            OBS_CLIP,
        ),
        ObsFeature(
            "arrival_rate_over_max_throughput",
            "arrival-rate estimate: a time-decayed count of arrivals (time constant "
            "rate_window_s, default 200 mean inter-arrival times), started at the "
            "workload's nominal mean rate",
            "requests/s",
            "/ max throughput (the largest b / latency(b), b = 1..max_batch_size), "
            f"clipped at {OBS_CLIP:g}",
            0.0,
            OBS_CLIP,
        ),
        ObsFeature(
            "past_deadline_fraction",
            "waiting requests already past their deadline (arrival + SLA)",
            "requests",
            "/ waiting requests (0 when none is past)",
            0.0,
            1.0,
        ),
        ObsFeature(
            "last_batch_over_max_batch",
            "size of the batch the last step ran (0 after a wait)",
            "requests",
            "/ max_batch_size",
            0.0,
            1.0,
        ),
    )


#: the names of the observation's features, in order (each instance describes its own:
#: ``DynamicBatchingEnv.observation_features``)
OBS_FEATURES: tuple[str, ...] = feature_names(obs_features(2000, 32))


class DynamicBatchingEnv(ServingCore, gym.Env[np.ndarray, int]):
    """Graph-level dynamic batching: when to run a batch, and how large.

    ## Description

    One server (one accelerator) runs whole-model batches non-preemptively. Requests
    arrive from a workload (Poisson, MMPP, gamma renewal or a trace), wait in a FIFO queue
    of finite capacity, and are served in batches whose duration and energy come from a
    latency/power profile (published figures or measurements). This is exactly the
    decision process of the SMDP model of Xu et al. (ICC 2023): the agent decides at
    every epoch where the server is idle and requests wait.

    Decision epochs (docs/design.md: Event semantics): after a batch completes with a non-empty
    queue, at an arrival while idle, and, with ``decision_interval_ms`` set, at relative
    ticks (after a wait the next epoch is ``min(next arrival, now + interval)``). A batch
    that completes with an empty queue is followed, inside the same step, by idling to the
    next arrival; ``reset`` likewise advances to the first arrival. So every epoch has at
    least one waiting request and the server idle.

    ## Action Space

    ``Discrete(max_batch_size + 1)``. ``0`` waits until the next epoch; ``b >= 1`` runs the
    ``b`` oldest requests now. Valid actions are ``0`` and ``1..min(queue, max_batch_size)``:
    ``action_masks()`` and ``info["action_mask"]`` give them (sb3-contrib convention), each a
    new bool array built from one array of ``2 * max_batch_size + 1`` entries (memory is
    linear in ``max_batch_size``). A ``b`` larger than the queue runs the whole queue and
    sets ``info["clipped_action"]``. An action outside the space raises ``ValueError``.

    ## Observation Space

    ``Box(float32)`` with finite bounds: five features, each a raw quantity over a scale
    (the queue, the oldest wait, the arrival rate, the requests past their deadline, the
    last batch). ``env.unwrapped.observation_features`` describes each, in order (an
    :class:`~batch_env.envs.features.ObsFeature`: name, meaning, unit, scale, bounds); the
    space's bounds are built from it, and the env's page lists it in a table generated from
    it.

    ## Rewards

    ``r = -(w_latency * L + w_energy * E + w_sla * M + w_drop * D)`` over exactly the
    simulated time from this decision to the next (``info["dt_s"]``): L is the integral of
    the number of requests in the system (waiting + in service, arrivals during the step
    included), E the joules consumed (busy power ``energy(b) / latency(b)`` for the batch's
    actual duration, idle power otherwise), M the SLA misses whose deadline passed in the
    step (latency > SLA; equal meets it), D the arrivals rejected by a full queue. The raw
    L, E, M, D are in ``info["reward_components"]``. The long-run average reward per second
    is minus (w_latency x arrival rate x mean latency + w_energy x mean power + ...), the
    SMDP objective.

    ## Starting State

    Empty system at time 0; ``reset`` advances to the first arrival, so the first
    observation has one request waiting. ``reset(seed)`` derives three independent
    streams (arrivals, service noise, request sizes) with ``SeedSequence(seed).spawn(3)``:
    two policies on the same seed see the same arrivals.

    ## Episode End

    Never terminates. Truncates at the first decision epoch at which the summary requests
    (arrivals ``warmup_requests + 1 .. warmup_requests + horizon_requests``) are all
    completed or dropped, or at the first epoch at or after ``horizon_s``. The episode
    summary is then in ``info["serving"]`` (see :mod:`batch_env.metrics`).

    ## Arguments

    ``gymnasium.make("batch_env/DynamicBatching-v0", **kwargs)`` with:

    * ``profile``: shipped profile name (default ``"resnet50-v100"``), path, dict or Profile.
    * ``workload``: dict (``{"kind": "poisson", "rate_per_s": 300}``; a ``"load"`` key
      instead of a rate means that fraction of the max throughput) or Workload; default
      Poisson at load 0.6.
    * ``max_batch_size`` (32), ``sla_ms`` (15), ``reward_weights`` (dict of overrides),
      ``service`` (``"deterministic"`` | ``"lognormal"``), ``service_cv``,
      ``queue_capacity`` (2000), ``horizon_requests`` (2000), ``warmup_requests`` (0),
      ``horizon_s``, ``decision_interval_ms`` (ticks; off), ``idle_power_w`` (override),
      ``rate_window_s``: see :class:`batch_env.config.ServingConfig`.
    * ``task``: set by a benchmark task's registration (its id, e.g. ``batch_env/Bursty-v0``);
      the other kwargs must then keep the task's values, except ``render_mode``, ``oracle_info``
      and the episode length (:func:`batch_env.tasks.check_task_kwargs`).
    * ``oracle_info`` (``False``): put what the workload hides in ``info["oracle"]``, for
      oracle policies and bounds: an MMPP's current phase (``"phase"``,
      :mod:`baselines.smdp_mmpp`), a ``load_range`` workload's drawn load and rate
      (``"load"``, ``"rate_per_s"``); never in the observation, and asking draws nothing.
    * ``render_mode``: ``None``, ``"rgb_array"`` (an image of the queue, the last batch
      and a timeline of recent batches: ``docs/render.md``), ``"human"`` (that image in a
      window, or the text when there is no display) or ``"ansi"`` (a line of text).
    * ``executor``: ``"profile"`` (default: durations and energy simulated from the
      profile) or ``"torch"`` (each batch runs a real PyTorch model, CUDA when present else
      CPU, and its measured duration advances the clock; arrivals still come from the
      workload). With ``"torch"``: ``model`` (a name of :data:`batch_env.real.models.MODELS`;
      default inferred from the profile's name), ``torch_device`` (``"auto"``, ``"cpu"``,
      ``"cuda"``) and ``executor_options`` (``width``, ``depth``, ``threads``,
      ``cuda_graphs``, ...: see :class:`batch_env.real.torch_executor.TorchExecutor`).
      ``info["energy_source"]`` says where energy figures come from (``"profile"``,
      ``"nvml"`` or ``"rapl"``). Real timings vary, so ``check_env``'s determinism checks
      do not apply in real mode.

    ## Vectorized environment

    :class:`DynamicBatchingVectorEnv`, the NumPy-native twin, is the registered
    ``vector_entry_point``: ``gymnasium.make_vec("batch_env/DynamicBatching-v0",
    num_envs=N, **kwargs)`` builds it (lane i behaves exactly like this env reset with
    seed + i). ``vectorization_mode="sync"``/``"async"`` still give Gymnasium's wrappers
    around this class (the real executor needs them).

    ## Version History

    * v0: initial version.
    """

    metadata = {"render_modes": ["human", "rgb_array", "ansi"], "render_fps": 10}
    executor: Executor

    def __init__(
        self,
        profile: str | dict | Profile = "resnet50-v100",
        workload: dict | Workload | None = None,
        max_batch_size: int = 32,
        sla_ms: float = 15.0,
        reward_weights: dict | None = None,
        service: str = "deterministic",
        service_cv: float | None = None,
        queue_capacity: int = 2000,
        horizon_requests: int = 2000,
        warmup_requests: int = 0,
        horizon_s: float | None = None,
        decision_interval_ms: float | None = None,
        idle_power_w: float | None = None,
        rate_window_s: float | None = None,
        render_mode: str | None = None,
        oracle_info: bool = False,
        executor: str = "profile",
        model: str | None = None,
        torch_device: str = "auto",
        executor_options: dict | None = None,
        task: str | None = None,
    ) -> None:
        config = ServingConfig.from_arguments(locals())
        self.task = task
        self._init_env(profile, workload, config, render_mode)
        B = config.max_batch_size
        self._oracle = bool(oracle_info)
        if self._oracle and not self.workload.has_oracle:
            raise ValueError(
                "oracle_info=True needs a workload that hides something: an MMPP (its phase) "
                f"or a load_range (the episode's load); this env's workload is {self.workload.kind!r}"
            )
        self._init_executor(executor, model, torch_device, executor_options)

        self.action_space = spaces.Discrete(B + 1)
        self._features = obs_features(config.queue_capacity, B)
        self.observation_space = features_box(self._features)
        self._obs_high = self.observation_space.high.copy()
        # row m: actions 0..m valid, as a read-only view of one array of B + 1 trues then B
        # falses (row m is its window from B - m), so memory is O(B), not (B + 1) ** 2
        valid = np.arange(2 * B + 1) <= B
        self._mask_table = np.lib.stride_tricks.sliding_window_view(valid, B + 1)[::-1]
        self._last_b = 0
        self._last_lat = 0.0
        self._clipped = False

    @property
    def observation_features(self) -> tuple[ObsFeature, ...]:
        """The features of this env's observation, in order, one per entry of
        ``observation_space`` (whose bounds are theirs): name, meaning, unit, scale."""
        return self._features

    # -- helpers ----------------------------------------------------------------------
    def lane_constants(self) -> dict[str, Any]:
        """What every lane of the NumPy vector twin shares with this env, read once by
        :class:`~batch_env.envs.dynamic_batching_vector.DynamicBatchingVectorEnv`.

        :returns: ``sla_s``, ``tick_s`` (None: no ticks), ``rate_tau_s`` (the arrival-rate
            estimate's time constant), ``reward_weights`` (latency, energy, SLA, drop),
            ``mask_table`` (row ``q``: the action mask at queue length ``q``, read-only) and
            ``obs_high`` (the observation's upper bounds).
        """
        return {
            "sla_s": self._sla,
            "tick_s": self._tick,
            "rate_tau_s": self.rate_window_s,
            "reward_weights": (self._wl, self._we, self._ws, self._wd),
            "mask_table": self._mask_table,
            "obs_high": self._obs_high,
        }

    def _obs(self) -> np.ndarray:
        B = self._B
        q = len(self.arrivals) - self.started
        past = self._kd - self.started
        return np.array(
            [
                q / B,
                min((self.now - self.arrivals[self.started]) / self._sla, OBS_CLIP) if q else 0.0,
                min(self.rate_per_s / self.max_throughput_rps, OBS_CLIP),
                past / q if past > 0 else 0.0,
                self._last_b / B,
            ],
            dtype=np.float32,
        )

    def _info(self, q: int, dt: float, comps: dict[str, float]) -> dict[str, Any]:
        info = {
            "queue_len": q,
            "oldest_wait_s": self.now - self.arrivals[self.started] if q else 0.0,
            "now_s": self.now,
            "dt_s": dt,
            "last_batch_size": self._last_b,
            "last_batch_latency_s": self._last_lat,
            "reward_components": comps,
            "action_mask": self._mask_table[q if q < self._B else self._B].copy(),
            "clipped_action": self._clipped,
            "dropped_total": self.drops,
            "arrived_total": self._arrived,
            "energy_source": self.executor.energy_source,
        }
        if self._oracle:
            info["oracle"] = self._stream.oracle(self.now)
        return info

    def action_masks(self) -> np.ndarray:
        """Valid actions now: ``0`` and ``1..min(queue, max_batch_size)`` (a new bool array)."""
        self._check_started("action_masks")
        q = len(self.arrivals) - self.started
        return self._mask_table[min(q, self._B)].copy()

    # -- Gymnasium API ----------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: seed the streams and advance to the first arrival.

        :param seed: episode seed; ``None`` draws one from the env's ``np_random``.
        :param options: ``{"load": x}`` runs this episode at load ``x`` when the workload
            has a ``load_range`` (evaluators fixing their episodes' loads); nothing else.
        """
        super().reset(seed=seed)
        self._reset_core(seed, options)
        self._last_b = 0
        self._last_lat = 0.0
        self._clipped = False
        q = len(self.arrivals) - self.started
        self._deadline_prefix(self.now)  # for the past-deadline feature
        comps = {"latency": 0.0, "energy": 0.0, "sla": 0.0, "drop": 0.0}
        if self.render_mode == "human":
            self.render()
        return self._obs(), self._info(q, 0.0, comps)

    def effective_action(self, action: int) -> int:
        """What ``step(action)`` would do now, as an action: a batch larger than the
        queue runs the queue (the clip ``info["clipped_action"]`` flags). Two actions do
        the same thing exactly when their effective actions are equal."""
        a = int(action)
        q = len(self.arrivals) - self.started
        return q if a > q else a

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Apply ``action`` at the current epoch and run to the next one.

        :param action: 0 = wait, b >= 1 = run the b oldest requests.
        """
        if self._needs_reset is not None:
            self._refuse("step")
        if type(action) is not int or action < 0 or action > self._B:
            action = self._coerce_action(action)
        if action == 0:
            self._wait()
            self._last_b = 0
            self._last_lat = 0.0
            self._clipped = False
        else:
            q = len(self.arrivals) - self.started
            self._clipped = action > q
            b = q if self._clipped else action
            d, e = self.executor.run(b)
            c = self.now + d
            self._start_batch(b, c)
            self.advance(c, e / d if d > 0.0 else 0.0)
            self._finish_batch(b)
            self._last_b = b
            self._last_lat = d
            while self.started == len(self.arrivals):  # empty queue: idle to the next arrival
                if not self.idle_until_arrival():
                    break
        reward, comps, dt, _ = self.step_accounting()
        q = len(self.arrivals) - self.started
        info = self._info(q, dt, comps)
        truncated = self._episode_over()
        if truncated:
            info["serving"] = self._serving_summary()
        if self.render_mode == "human":
            self.render()
        return self._obs(), reward, False, truncated, info

    # -- rendering (ServingCore.render dispatches on render_mode) ------------------------
    def _render_text(self) -> str:
        """Text view of the queue (``render_mode="ansi"``)."""
        q = len(self.arrivals) - self.started
        bar = "#" * min(q, 40) + ("+" if q > 40 else "")
        return (
            f"t={self.now * 1000:10.3f} ms  queue={q:5d} [{bar:<41}] "
            f"last batch={self._last_b:3d} ({self._last_lat * 1000:.3f} ms)  dropped={self.drops}"
        )

    def _make_view(self) -> ServerView:
        """Frame layout: the service panel shows the last batch."""
        return ServerView(
            "DYNAMICBATCHING-V0",
            "LAST BATCH: LATENCY/SLA",
            "LAST BATCHES: SIZE/MAX",
            "LAST BATCHES: LATENCY/SLA OF THE OLDEST REQUEST",
            CompletionTimeline(),
        )

    def _render_frame(self, view: ServerView) -> np.ndarray:
        """The frame (``render_mode="rgb_array"``), from the queue and the completion record."""
        arr, ns, now, sla, B = self.arrivals, self.started, self.now, self._sla, self._B
        q = len(arr) - ns
        waits = (now - np.array(arr[ns : ns + QUEUE_BARS])) / sla
        b = self._last_b
        batch = (self._comp[ns - 1] - np.array(arr[ns - b : ns])) / sla if b else np.empty(0)
        # _make_view gave this view a CompletionTimeline (ServerView.timeline is a Timeline)
        cast(CompletionTimeline, view.timeline).sync(arr, self._comp, B, sla)
        header = f"T {now * 1000:.1f} MS  Q {q}  DROP {self.drops}  MISS {self._base[2]}"
        return view.frame(
            header,
            waits,
            q,
            self.queue_capacity,
            batch_panel(batch, b, B, self._last_lat, sla),
            view.timeline,
        )
