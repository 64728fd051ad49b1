"""``batch_env/NodeBatching-v0``: node-level batching (LazyBatching's decision process)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..config import ServingConfig
from ..core import ServingCore
from ..executor import Executor
from ..profiles.batch_profile import Profile
from ..render import QUEUE_BARS, CompletionTimeline, ServerView, groups_panel
from ..workload import Workload
from .dynamic_batching import obs_features as queue_features
from .features import ObsFeature, feature_names, features_box

_CLIP = 100.0


def obs_features(queue_capacity: int, max_batch_size: int) -> tuple[ObsFeature, ...]:
    """The features of ``NodeBatching-v0``'s observation (``_obs`` computes them, in this
    order): ``DynamicBatching-v0``'s first four (the queue), then eight of the groups in
    flight."""
    unit_range = (0.0, 1.0)
    return (
        *queue_features(queue_capacity, max_batch_size)[:4],
        ObsFeature(
            "in_flight_over_max_batch",
            "requests in flight (admitted, not completed)",
            "requests",
            "/ max_batch_size",
            *unit_range,
        ),
        ObsFeature(
            "groups_over_max_groups",
            "groups in flight",
            "groups",
            "/ min(nodes, max_batch_size)",
            *unit_range,
        ),
        ObsFeature(
            "least_advanced_progress",
            "the least-advanced group's next node (0 when none is in flight)",
            "nodes",
            "/ nodes in the chain",
            *unit_range,
        ),
        ObsFeature(
            "least_advanced_size_over_max_batch",
            "the least-advanced group's size (0 when none is in flight)",
            "requests",
            "/ max_batch_size",
            *unit_range,
        ),
        ObsFeature(
            "most_advanced_progress",
            "the most-advanced group's next node (0 when none is in flight)",
            "nodes",
            "/ nodes in the chain",
            *unit_range,
        ),
        ObsFeature(
            "most_advanced_size_over_max_batch",
            "the most-advanced group's size (0 when none is in flight)",
            "requests",
            "/ max_batch_size",
            *unit_range,
        ),
        ObsFeature(
            "oldest_in_flight_age_over_sla",
            "age of the oldest request in flight (0 when none)",
            "s",
            f"/ SLA (sla_ms), clipped at {_CLIP:g}",
            0.0,
            _CLIP,
        ),
        ObsFeature(
            "oldest_in_flight_slack_over_sla",
            "slack of the oldest request in flight: SLA - its age - the mean time of its "
            "group's remaining nodes at the group's size (negative: it will miss)",
            "s",
            f"/ SLA (sla_ms), clipped to [-{_CLIP:g}, {_CLIP:g}]; 1 when nothing is in flight",
            -_CLIP,
            _CLIP,
        ),
    )


#: the names of the observation's features, in order (each instance describes its own:
#: ``NodeBatchingEnv.observation_features``)
OBS_FEATURES: tuple[str, ...] = feature_names(obs_features(2000, 32))


@dataclass(slots=True)
class Group:
    """Requests admitted together that move through the node chain as one batch.

    :ivar node: the next node to run (``0`` .. ``n_nodes - 1``).
    :ivar size: the number of requests in the group.
    :ivar handle: the executor's handle for the group (``None`` for the profile executor;
        the activations for the torch executor), from ``new_group`` / ``merge_groups``.
    """

    node: int
    size: int
    handle: Any


class NodeBatchingEnv(ServingCore, gym.Env[np.ndarray, int]):
    """Node-level batching: admit waiting requests as groups, advance one node at a time.

    ## Description

    The model is a chain of nodes (layers or stages; the profile's ``nodes`` tables, or one
    node for the whole model when it has none), each with its own latency and power per
    batch size. Admitted requests form *groups*; a group sits at one node index; two groups
    at the same node merge. The device runs one node of one group at a time, so groups
    interleave at node boundaries: a newcomer admitted while an older group is half-way
    through the model can run the first nodes alone, catch up with the older group and
    merge with it (LazyBatching, Choi, Kim and Rhu, HPCA 2021, arXiv 2010.13103). Graph
    batching (Triton) is the special case that admits only when nothing is in flight.

    Everything else (workloads, reward, metrics, event semantics, episode end) is
    ``DynamicBatching-v0``'s: both are thin layers over the one event loop
    (:class:`batch_env.core.ServingCore`). With a one-node profile and the same seed this
    env reproduces ``DynamicBatching-v0``'s trajectory action for action (``k`` = b).

    Groups are kept oldest first; an older group is always strictly further along the
    chain than a newer one (a newcomer starts at node 0 and merges when it reaches the
    node of the group ahead), so requests complete in arrival order and every request
    runs every node exactly once, in order.

    Decision epochs: node completions, arrivals while the device is idle, and (with
    ``decision_interval_ms``) relative ticks while idle with requests waiting; except where
    only one action is valid, which the env takes inside the step: one group in flight and
    nothing admissible (nobody waiting, or ``max_batch_size`` in flight) advances that
    group; an idle device with an empty queue waits for the next arrival.

    ## Action Space

    ``Discrete(2 * (max_batch_size + 1))``, flattened so DQN and MaskablePPO work:
    ``a = d * (B + 1) + k``.

    * ``k`` in ``0..min(queue, B - in_flight)``: the ``k`` oldest waiting requests are
      admitted as a new group at node 0 (merging with a group already at node 0). A
      larger ``k`` admits what is admissible and sets ``info["clipped_action"]``.
    * ``d``: which group then runs its next node: ``0`` = the least-advanced group,
      ``1`` = the most-advanced one. With at most one group after admission only ``d = 0``
      is valid (``d = 1`` would duplicate it; it is run as ``d = 0`` and flagged as
      clipped).
    * Nothing in flight and ``k = 0`` waits (until the next arrival or tick). While groups
      are in flight the device never idles.

    ``action_masks()`` and ``info["action_mask"]`` give the valid actions. An action
    outside the space raises ``ValueError``.

    ## Observation Space

    ``Box(float32)`` with finite bounds: twelve features, each a raw quantity over a scale
    (the queue as in ``DynamicBatching-v0``, then the requests and groups in flight, the
    least- and most-advanced groups, the oldest request in flight and its slack).
    ``env.unwrapped.observation_features`` describes each, in order (an
    :class:`~batch_env.envs.features.ObsFeature`: name, meaning, unit, scale, bounds); the
    space's bounds are built from it, and the env's page lists it in a table generated from
    it.

    ## Rewards

    As ``DynamicBatching-v0``: ``r = -(w_latency * L + w_energy * E + w_sla * M + w_drop *
    D)`` over exactly the simulated time from this decision to the next; each node runs at
    its busy power (node energy / node latency) for its actual duration, idle power
    otherwise. A request's latency is its completion (end of its last node) minus arrival.

    ## Starting State

    Empty system at time 0; ``reset`` advances to the first arrival. Streams as
    ``DynamicBatching-v0`` (arrivals, service noise, request sizes); service noise is drawn
    per node execution.

    ## Episode End

    As ``DynamicBatching-v0`` (truncation on the summary requests' completion or at
    ``horizon_s``; ``info["serving"]`` then holds the summary). ``batch_size_mean`` there
    is the mean group size per node execution.

    ## Arguments

    ``gymnasium.make("batch_env/NodeBatching-v0", **kwargs)`` with the arguments of
    ``DynamicBatching-v0`` (``profile``, ``workload``, ``max_batch_size``, ``sla_ms``,
    ``reward_weights``, ``service``, ``service_cv``, ``queue_capacity``,
    ``horizon_requests``, ``warmup_requests``, ``horizon_s``, ``decision_interval_ms``,
    ``idle_power_w``, ``rate_window_s``, ``render_mode``). The profile's ``nodes`` tables
    define the chain (see :mod:`batch_env.profile`). ``render_mode="rgb_array"`` draws
    the queue, the groups at their node positions and a timeline of group completions
    (``docs/render.md``); ``"human"`` shows it in a window (text without a display).

    * ``task``: set by a benchmark task's registration (its id, e.g. ``batch_env/NodeAnyLoad-v0``);
      the other kwargs must then keep the task's values, except ``render_mode``
      and the episode length (:func:`batch_env.tasks.check_task_kwargs`).

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
        executor: str = "profile",
        model: str | None = None,
        torch_device: str = "auto",
        executor_options: dict | None = None,
        task: str | None = None,
    ) -> None:
        config = ServingConfig.from_arguments(locals())
        self.task = task
        prof = self._init_env(profile, workload, config, render_mode)
        B = config.max_batch_size
        self._init_executor(executor, model, torch_device, executor_options)
        self.node_names = self.executor.node_names
        N = self._N = len(self.node_names)
        self._max_groups = min(N, B)
        # mean remaining time of a group of size s from node n to the end: rem[s][n], from
        # the profile's node tables (in real mode, when the model's chain differs from the
        # profile's, the end-to-end time split evenly over the nodes: an estimate)
        lat, _ = prof.node_tables(B)
        if lat.shape[0] != N:
            lat = np.repeat(prof.tables(B)[0][None, :] / N, N, axis=0)
        rem = np.zeros((B + 1, N + 1))
        rem[:, :N] = np.cumsum(lat[::-1], axis=0)[::-1].T
        self._rem: list[list[float]] = rem.tolist()

        self.action_space = spaces.Discrete(2 * (B + 1))
        self._features = obs_features(config.queue_capacity, B)
        self.observation_space = features_box(self._features)
        self._groups: list[Group] = []  # oldest (most advanced) first
        self._last_node = -1
        self._last_size = 0
        self._last_lat = 0.0
        self._clipped = False

    @property
    def observation_features(self) -> tuple[ObsFeature, ...]:
        """The features of this env's observation, in order, one per entry of
        ``observation_space`` (whose bounds are theirs): name, meaning, unit, scale."""
        return self._features

    # -- state views --------------------------------------------------------------------
    @property
    def groups_in_flight(self) -> int:
        """Batches (groups of requests) part-way through the model now."""
        return len(self._groups)

    def _group_waits(self) -> list[float]:
        """Age of each group's oldest request, oldest group first."""
        arr, now = self.arrivals, self.now
        i = self._nk
        out = []
        for g in self._groups:
            out.append(now - arr[i])
            i += g.size
        return out

    def in_service_count(self) -> int:
        """Requests in the groups in flight."""
        return sum(g.size for g in self._groups)

    def _kmax(self) -> int:
        q = len(self.arrivals) - self.started
        room = self._B - (self.started - self._nk)
        return q if q < room else room

    def effective_action(self, action: int) -> int:
        """What ``step(action)`` would do now, as an action: admitting more than can be
        admitted admits what can (the clip ``info["clipped_action"]`` flags). Two actions
        do the same thing exactly when their effective actions are equal."""
        d, k = divmod(int(action), self._B + 1)
        kmax = self._kmax()
        return d * (self._B + 1) + (kmax if k > kmax else k)

    def _mask(self) -> np.ndarray:
        B = self._B
        kmax = self._kmax()
        m = np.zeros(2 * (B + 1), dtype=bool)
        m[: kmax + 1] = True
        G = len(self._groups)
        if G >= 2:
            m[B + 1 : B + 2 + kmax] = True
        elif G == 1 and self._groups[-1].node != 0:
            m[B + 2 : B + 2 + kmax] = True  # k >= 1 starts a second group
        return m

    def action_masks(self) -> np.ndarray:
        """Valid actions now (``a = d * (B + 1) + k``), as a new boolean array."""
        self._check_started("action_masks")
        return self._mask()

    def _obs(self) -> np.ndarray:
        B, N, sla = self._B, self._N, self._sla
        q = len(self.arrivals) - self.started
        past = self._kd - self.started
        groups = self._groups
        obs = np.zeros(len(OBS_FEATURES), dtype=np.float32)
        obs[0] = q / B
        if q:
            obs[1] = min((self.now - self.arrivals[self.started]) / sla, _CLIP)
        obs[2] = min(self.rate_per_s / self.max_throughput_rps, _CLIP)
        obs[3] = past / q if past > 0 else 0.0
        obs[4] = (self.started - self._nk) / B
        obs[11] = 1.0
        if groups:
            least, most = groups[-1], groups[0]
            obs[5] = len(groups) / self._max_groups
            obs[6] = least.node / N
            obs[7] = least.size / B
            obs[8] = most.node / N
            obs[9] = most.size / B
            age = self.now - self.arrivals[self._nk]
            obs[10] = min(age / sla, _CLIP)
            slack = (sla - age - self._rem[most.size][most.node]) / sla
            obs[11] = min(max(slack, -_CLIP), _CLIP)
        return obs

    def _info(self, dt: float, comps: dict[str, float]) -> dict[str, Any]:
        q = len(self.arrivals) - self.started
        waits = self._group_waits()
        return {
            "queue_len": q,
            "oldest_wait_s": self.now - self.arrivals[self.started] if q else 0.0,
            "now_s": self.now,
            "dt_s": dt,
            "in_flight": self.started - self._nk,
            # (next node, size, oldest request's age in s), least-advanced group first
            "groups": tuple(
                (g.node, g.size, w)
                for g, w in zip(reversed(self._groups), reversed(waits), strict=True)
            ),
            "last_node": self._last_node,
            "last_batch_size": self._last_size,
            "last_batch_latency_s": self._last_lat,
            "reward_components": comps,
            "action_mask": self._mask(),
            "clipped_action": self._clipped,
            "dropped_total": self.drops,
            "energy_source": self.executor.energy_source,
        }

    # -- dynamics -----------------------------------------------------------------------
    def _admit_group(self, k: int) -> None:
        self._admit(k)
        handle = self.executor.new_group(k)
        groups = self._groups
        if groups and groups[-1].node == 0:
            g = groups[-1]
            g.size += k
            g.handle = self.executor.merge_groups(g.handle, handle)
        else:
            groups.append(Group(0, k, handle))

    def _run_node(self, i: int) -> None:
        """Run the next node of group ``i`` (0 = oldest) to completion."""
        groups = self._groups
        g = groups[i]
        node, size = g.node, g.size
        d, e = self.executor.run_node(node, size, g.handle)
        self.advance(self.now + d, e / d if d > 0.0 else 0.0)
        self.batches += 1
        self.batched += size
        self._last_node, self._last_size, self._last_lat = node, size, d
        g.node = node + 1
        if g.node == self._N:  # only the oldest group can finish
            self._record_completions(size, self.now)
            self._finish_batch(size)
            del groups[i]
        elif i > 0 and groups[i - 1].node == g.node:  # caught up with the group ahead: merge
            ahead = groups[i - 1]
            ahead.size += size
            ahead.handle = self.executor.merge_groups(ahead.handle, g.handle)
            del groups[i]

    def _forced_moves(self) -> None:
        """Take every step where only one action is valid, up to the next decision epoch."""
        groups = self._groups
        while True:
            if not groups:
                if self.started < len(self.arrivals) or not self.idle_until_arrival():
                    return
                self._last_node, self._last_size, self._last_lat = -1, 0, 0.0
            elif len(groups) == 1 and self._kmax() == 0:
                self._run_node(0)
            else:
                return

    # -- Gymnasium API ------------------------------------------------------------------
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
        self._groups = []
        self._last_node, self._last_size, self._last_lat = -1, 0, 0.0
        self._clipped = False
        self._deadline_prefix(self.now)
        comps = {"latency": 0.0, "energy": 0.0, "sla": 0.0, "drop": 0.0}
        if self.render_mode == "human":
            self.render()
        return self._obs(), self._info(0.0, comps)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Admit ``k`` waiting requests, then advance group ``d`` one node (or wait).

        :param action: ``a = d * (max_batch_size + 1) + k`` (see the class docstring).
        """
        if self._needs_reset is not None:
            self._refuse("step")
        if type(action) is not int or action < 0 or action >= 2 * (self._B + 1):
            action = self._coerce_action(action)
        d, k = divmod(action, self._B + 1)
        kmax = self._kmax()
        self._clipped = k > kmax
        if self._clipped:
            k = kmax
        if k:
            self._admit_group(k)
        groups = self._groups
        if not groups:
            self._wait()
            self._last_node, self._last_size, self._last_lat = -1, 0, 0.0
        else:
            if d == 1 and len(groups) == 1:
                self._clipped = True
            self._run_node(len(groups) - 1 if d == 0 else 0)
        self._forced_moves()
        reward, comps, dt, _ = self.step_accounting()
        info = self._info(dt, comps)
        truncated = self._episode_over()
        if truncated:
            info["serving"] = self._serving_summary()
        if self.render_mode == "human":
            self.render()
        return self._obs(), reward, False, truncated, info

    # -- rendering (ServingCore.render dispatches on render_mode) ------------------------
    def _render_text(self) -> str:
        """Text view of the queue and the groups in flight (``render_mode="ansi"``)."""
        q = len(self.arrivals) - self.started
        bar = "#" * min(q, 40) + ("+" if q > 40 else "")
        groups = " ".join(f"{g.size}@{g.node}" for g in self._groups) or "-"
        return (
            f"t={self.now * 1000:10.3f} ms  queue={q:5d} [{bar:<41}] groups(size@node)={groups}"
            f"  last node={self._last_node} x{self._last_size}  dropped={self.drops}"
        )

    def _make_view(self) -> ServerView:
        """Frame layout: the service panel shows the groups on the node chain."""
        return ServerView(
            "NODEBATCHING-V0",
            "GROUPS AT THEIR NEXT NODE: SIZE, AGE/SLA",
            "LAST GROUP COMPLETIONS: SIZE/MAX",
            "LAST GROUP COMPLETIONS: LATENCY/SLA",
            CompletionTimeline(),
        )

    def _render_frame(self, view: ServerView) -> np.ndarray:
        """The frame (``render_mode="rgb_array"``), from the queue, the groups and the
        completion record."""
        arr, ns, now, sla, B = self.arrivals, self.started, self.now, self._sla, self._B
        q = len(arr) - ns
        waits = (now - np.array(arr[ns : ns + QUEUE_BARS])) / sla
        groups = self._groups
        positions = np.array([g.node for g in groups], dtype=np.intp)
        sizes = np.array([g.size for g in groups], dtype=np.float64)
        ages = np.array(self._group_waits(), dtype=np.float64) / sla
        last = (
            f"LAST NODE {self._last_node} X{self._last_size}"
            if self._last_size
            else "LAST STEP: WAIT"
        )
        timeline = view.timeline
        assert isinstance(timeline, CompletionTimeline)  # _make_view's
        timeline.sync(arr, self._comp, B, sla)
        header = f"T {now * 1000:.1f} MS  Q {q}  DROP {self.drops}  MISS {self._base[2]}"
        return view.frame(
            header,
            waits,
            q,
            self.queue_capacity,
            groups_panel(positions, sizes, ages, self._N, B, last),
            timeline,
        )

    def get_config(self) -> dict[str, Any]:
        """The env's resolved configuration, with the node chain's names."""
        return {**super().get_config(), "nodes": list(self.node_names)}
