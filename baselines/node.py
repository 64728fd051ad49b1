"""Node-level batching policies for ``NodeBatching-v0``: graph batching and LazyBatching.

Actions are ``a = d * (B + 1) + k`` (admit ``k`` waiting requests, then advance group
``d``: 0 = least advanced); both policies here always use ``d = 0``, so their action is
just ``k``.

* ``graph``: graph (whole-model) batching as Triton's dynamic batcher does it: collect
  requests until ``max_batch_size`` wait or the oldest has waited ``window_ms``, then run
  the whole graph uninterrupted (nothing is admitted while a group is in flight). It is
  :class:`~baselines.timeouts.TritonTimeoutPolicy` (no preferred sizes) restricted to an
  idle device, so in ``DynamicBatching-v0`` it is exactly that policy.
* ``lazy``: LazyBatching (Choi, Kim and Rhu, "LazyBatching: An SLA-aware Batching System
  for Cloud Machine Learning Inference", HPCA 2021, arXiv 2010.13103), as far as the
  paper's abstract and a co-author's prototype describe it. At every node boundary it
  admits the largest number of waiting requests ``k`` for which the predicted finish time
  of every in-flight request still meets its deadline, and advances the least-advanced
  group, which therefore catches up with the group ahead and merges with it.

Free choices for ``lazy`` (documented here, the paper leaves them open):

* **Prediction.** Under the policy's own schedule (always the least-advanced group) all
  groups in flight finish together: the newest group runs alone to the node of the group
  ahead, merges, the merged group runs to the next group's node, and so on to the end.
  The predicted finish time is ``now +`` the sum of those node times, each at the size of
  the merged group running it. ``slack="exact"`` takes node times from the env profile's
  node tables at that size; ``slack="conservative"`` (the paper's assumption that batched
  latency is at most ``b`` times single latency) takes ``b x`` the batch-1 node time. An
  in-flight request meets its deadline when its age plus the predicted remaining time is
  ``<= sla_ms`` (the env's rule: latency equal to the SLA meets it). Service noise is
  not modelled (mean times). Node times come from the env's profile (in real mode, the
  profile measured for that model).
* **Only in-flight requests are protected.** The newcomers' own deadlines do not block
  their admission (they gain nothing from waiting longer).
* **Nothing in flight:** admit everything that fits (``min(queue, B)``).
* **Throughput mode.** When the oldest waiting request is already past its deadline, admit
  everything that fits at every boundary, until the system drains: the mode is
  re-decided only at an epoch with nothing in flight (then it stays on if the oldest
  waiting request is still past its deadline).
* If even ``k = 0`` misses (an in-flight request is late whatever happens), nothing is
  admitted outside throughput mode.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from .common import check_duration_ms, env_config, sla_ms_of
from .timeouts import TritonTimeoutPolicy

_SLACK_MODES = ("exact", "conservative")


class GraphBatchingPolicy(TritonTimeoutPolicy):
    """Graph batching: a full batch or the window's end, then the whole graph uninterrupted.

    At an epoch with nothing in flight, ``q`` waiting and the oldest waiting ``w``: run
    ``max_batch_size`` if ``q >= max_batch_size``, else ``q`` if ``w >= window_ms``, else
    wait. With a group in flight it admits nothing (action 0 advances that group). The env
    must have ticks (``decision_interval_ms``) for the window to fire between arrivals.

    :param env: the env (for ``max_batch_size`` and the tick check).
    :param max_batch_size: largest batch (default: the env's).
    :param window_ms: the batching window, in milliseconds (``>= 0``, default 10).
    """

    name = "graph"

    def __init__(
        self,
        env: gym.Env | None = None,
        max_batch_size: int | None = None,
        window_ms: float = 10.0,
    ) -> None:
        super().__init__(env, max_batch_size=max_batch_size, max_queue_delay_ms=window_ms)
        self.window_ms = self.max_queue_delay_ms

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Nothing in flight: Triton's rule; else 0 (let the running group go on).

        :param obs: unused.
        :param info: reads ``in_flight`` (absent in graph-level envs), ``queue_len`` and
            ``oldest_wait_s``.
        """
        if info.get("in_flight", 0):
            return 0
        return super().act(obs, info)


class LazyBatchingPolicy:
    """LazyBatching: SLA-aware admission at node boundaries, least-advanced group first.

    See the module docstring for the rule and every free choice.

    :param env: a ``NodeBatching-v0`` env (its profile's node tables, ``max_batch_size``
        and ``sla_ms`` are read at construction).
    :param slack: ``"exact"`` (profile node times at the merged size) or
        ``"conservative"`` (``b x`` the batch-1 node time).
    :param sla_ms: the deadline to protect (default: the env's ``sla_ms``).
    """

    name = "lazy"

    def __init__(
        self, env: gym.Env | None = None, slack: str = "exact", sla_ms: float | None = None
    ) -> None:
        if env is None:
            raise ValueError("env=None: policy 'lazy' needs the NodeBatching-v0 env it acts in")
        if slack not in _SLACK_MODES:
            raise ValueError(f"slack={slack!r} is invalid: allowed values are {list(_SLACK_MODES)}")
        self.slack = slack
        config = env_config(env)
        self.max_batch_size = B = int(config.max_batch_size)
        self.sla_s = (
            check_duration_ms("sla_ms", sla_ms) if sla_ms is not None else sla_ms_of(env)
        ) / 1000.0
        unwrapped: Any = env.unwrapped  # a NodeBatching-v0 env, checked by its attributes
        if not hasattr(unwrapped, "node_names"):
            raise ValueError(
                f"env={env!r} is not node-level: policy 'lazy' needs "
                "gymnasium.make('batch_env/NodeBatching-v0', ...)"
            )
        lat, _ = unwrapped.profile.node_tables(B)
        if lat.shape[0] != len(unwrapped.node_names):
            raise ValueError(
                f"policy 'lazy': the env's profile has {lat.shape[0]} node tables but its model "
                f"has {len(unwrapped.node_names)} nodes; use a profile measured for that model"
            )
        if slack == "conservative":
            sizes = np.arange(B + 1, dtype=np.float64)
            lat = lat[:, 1:2] * sizes[None, :]
        self.n_nodes = N = lat.shape[0]
        cum = np.zeros((B + 1, N + 1))
        cum[:, 1:] = np.cumsum(lat, axis=0).T
        self._cum: list[list[float]] = cum.tolist()  # cum[s][n]: nodes 0..n-1 at size s
        self.throughput_mode = False

    def reset(self) -> None:
        """Leave throughput mode."""
        self.throughput_mode = False

    def predict_remaining_s(self, groups: tuple[tuple[int, int, float], ...], k: int) -> float:
        """Predicted time until every in-flight request finishes if ``k`` are admitted now.

        :param groups: ``info["groups"]``: ``(next node, size, oldest age s)``,
            least-advanced first.
        :param k: newcomers admitted as a group at node 0.
        :returns: seconds from now, under the least-advanced-first schedule.
        """
        cum = self._cum
        i = 0
        if k > 0:
            node, size = 0, k
        else:
            node, size = groups[0][0], groups[0][1]
            i = 1
        t = 0.0
        for g_node, g_size, _ in groups[i:]:
            row = cum[size]
            t += row[g_node] - row[node]
            node, size = g_node, size + g_size
        row = cum[size]
        return t + row[self.n_nodes] - row[node]

    def admissible(self, groups: tuple[tuple[int, int, float], ...], k: int) -> bool:
        """Whether admitting ``k`` keeps every in-flight request within its deadline."""
        if not groups:
            return True
        oldest_age = groups[-1][2]
        return oldest_age + self.predict_remaining_s(groups, k) <= self.sla_s + 1e-12

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Admit the most newcomers the slack allows (all, in throughput mode); ``d = 0``.

        :param obs: unused.
        :param info: reads ``queue_len``, ``oldest_wait_s``, ``in_flight`` and ``groups``.
        """
        q = info["queue_len"]
        in_flight = info["in_flight"]
        late = q > 0 and info["oldest_wait_s"] > self.sla_s
        if in_flight == 0:
            self.throughput_mode = late
        elif late:
            self.throughput_mode = True
        kmax = min(q, self.max_batch_size - in_flight)
        if self.throughput_mode or in_flight == 0 or kmax == 0:
            return kmax
        groups = info["groups"]
        if self.admissible(groups, kmax):
            return kmax
        lo, hi = 0, kmax  # admissible(lo) unknown for lo = 0; find the largest admissible k
        if not self.admissible(groups, 0):
            return 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.admissible(groups, mid):
                lo = mid
            else:
                hi = mid
        return lo


__all__ = ["GraphBatchingPolicy", "LazyBatchingPolicy"]
