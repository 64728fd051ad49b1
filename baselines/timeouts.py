"""Timeout-based dynamic batchers of production inference servers.

* ``timeout``: NVIDIA Triton Inference Server's dynamic batcher (Triton user guide,
  "Batchers: Dynamic Batcher",
  https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/batcher.html;
  model-configuration fields ``max_batch_size``, ``dynamic_batching.preferred_batch_size``
  and ``dynamic_batching.max_queue_delay_microseconds``).
* ``tfserving``: TensorFlow Serving's batching (TensorFlow Serving Batching Guide,
  https://github.com/tensorflow/serving/blob/master/tensorflow_serving/batching/README.md;
  ``BatchingParameters.max_batch_size`` and ``batch_timeout_micros``).

Both hold requests back until a batch is full or the oldest request has waited a timeout.
The env has decision epochs only at arrivals, batch completions and ticks, so a timeout
fires at the first epoch at or after it: both policies refuse an env whose ticks are off
(``decision_interval_ms=None``), where the timeout could not fire until the next arrival.
Timeouts are in milliseconds here (the servers use microseconds: divide by 1000).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym

from .common import (
    check_batch_sizes,
    check_duration_ms,
    require_ticks,
    resolve_max_batch_size,
    waited_at_least,
)


class TritonTimeoutPolicy:
    """Triton's dynamic batcher: full or preferred batches at once, else wait up to a delay.

    Source: Triton Inference Server user guide, "Dynamic Batcher": the batcher runs a batch
    of the largest preferred size it can form; if it can form none it delays the oldest
    request at most ``max_queue_delay_microseconds`` for others to join, then sends the
    largest batch possible (at most ``max_batch_size``). At an epoch with ``q`` requests
    waiting and the oldest waiting ``w``:

    * ``q >= max_batch_size``: run ``max_batch_size``;
    * else if some preferred size is ``<= q``: run the largest such size;
    * else if ``w >= max_queue_delay_ms``: run ``q`` (everything waiting);
    * else wait (action 0).

    With ``max_queue_delay_ms=0`` and no preferred sizes it is exactly greedy. The env
    must have ticks (``decision_interval_ms`` set); the delay then fires at the first
    epoch at or after it (up to one interval late).

    :param env: the env (for ``max_batch_size`` and the tick check); with ``None``,
        ``max_batch_size`` is required and ticks are not checked.
    :param max_batch_size: largest batch, an integer in ``1..env max_batch_size`` (default:
        the env's).
    :param preferred_batch_sizes: sizes run as soon as they can be formed, each an integer
        in ``1..max_batch_size`` (default: none).
    :param max_queue_delay_ms: how long the oldest request may be held back for a larger
        batch, in milliseconds (``>= 0``, default 1.0).
    """

    name = "timeout"

    def __init__(
        self,
        env: gym.Env | None = None,
        max_batch_size: int | None = None,
        preferred_batch_sizes: Iterable[int] = (),
        max_queue_delay_ms: float = 1.0,
    ) -> None:
        self.max_batch_size = resolve_max_batch_size(env, max_batch_size)
        self.preferred_batch_sizes = check_batch_sizes(
            "preferred_batch_sizes", preferred_batch_sizes, self.max_batch_size
        )
        self.max_queue_delay_ms = check_duration_ms("max_queue_delay_ms", max_queue_delay_ms)
        require_ticks(env, self.name, "max_queue_delay_ms", max_queue_delay_ms)
        # Largest preferred size <= q, for every q < max_batch_size (0: none).
        table = [0] * self.max_batch_size
        for q in range(self.max_batch_size):
            fits = [s for s in self.preferred_batch_sizes if s <= q]
            table[q] = fits[-1] if fits else 0
        self._preferred_for = table

    def reset(self) -> None:
        """The dynamic batcher is stateless."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Full batch, else largest preferred batch, else everything after the delay, else wait.

        :param obs: unused.
        :param info: reads ``queue_len`` and ``oldest_wait_s``.
        """
        q = info["queue_len"]
        if q >= self.max_batch_size:
            return self.max_batch_size
        preferred = self._preferred_for[q]
        if preferred:
            return preferred
        if q > 0 and waited_at_least(info["oldest_wait_s"], self.max_queue_delay_ms):
            return q
        return 0


class TFServingPolicy(TritonTimeoutPolicy):
    """TensorFlow Serving's batcher: a full batch at once, else everything after a timeout.

    Source: TensorFlow Serving Batching Guide ("Batch Scheduling Parameters and Tuning"):
    a batch is processed when it reaches ``max_batch_size`` or when its oldest task has
    waited ``batch_timeout_micros``, whichever comes first. At an epoch with ``q`` requests
    waiting and the oldest waiting ``w``:

    * ``q >= max_batch_size``: run ``max_batch_size``;
    * else if ``w >= batch_timeout_ms``: run ``q`` (everything waiting);
    * else wait (action 0).

    (``allowed_batch_sizes`` pads batches to fixed sizes and changes no timing here;
    ``num_batch_threads`` > 1 needs several accelerators: the env has one.) The env must
    have ticks (``decision_interval_ms`` set); the timeout then fires at the first epoch
    at or after it (up to one interval late).

    :param env: the env (for ``max_batch_size`` and the tick check); with ``None``,
        ``max_batch_size`` is required and ticks are not checked.
    :param max_batch_size: largest batch, an integer in ``1..env max_batch_size`` (default:
        the env's).
    :param batch_timeout_ms: how long the oldest request may wait for a full batch, in
        milliseconds (``>= 0``, default 1.0).
    """

    name = "tfserving"

    def __init__(
        self,
        env: gym.Env | None = None,
        max_batch_size: int | None = None,
        batch_timeout_ms: float = 1.0,
    ) -> None:
        self.max_batch_size = resolve_max_batch_size(env, max_batch_size)
        self.batch_timeout_ms = check_duration_ms("batch_timeout_ms", batch_timeout_ms)
        require_ticks(env, self.name, "batch_timeout_ms", batch_timeout_ms)
        # Triton's rule without preferred sizes, with the timeout as the queue delay
        self.preferred_batch_sizes = ()
        self._preferred_for = [0] * self.max_batch_size
        self.max_queue_delay_ms = self.batch_timeout_ms
