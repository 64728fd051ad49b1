"""Simple heuristic batching policies.

* ``greedy``: run ``min(queue, max_batch_size)`` whenever the server is idle. With an
  unlimited ``max_batch_size`` this is the "serve all waiting requests" dynamic batching
  analysed by Inoue (Performance Evaluation 147, 2021, arXiv 1912.06322); it never waits,
  so it minimises the time requests spend queued at low load and wastes accelerator
  efficiency (small batches) at moderate load.
* ``static``: a fixed batch size ``b``: wait until ``b`` requests are queued, then run
  ``b`` (optionally run what is queued once the oldest request has waited ``timeout_ms``).
  This is the "static batching" baseline of LazyBatching (Choi, Kim and Rhu, "LazyBatching:
  An SLA-aware Batching System for Cloud Machine Learning Inference", HPCA 2021) and of
  Pang, Li and Wang ("Optimizing LLM Inference Throughput via Memory-aware and
  SLA-constrained Dynamic Batching", arXiv 2503.05248): a batch size chosen offline,
  independent of the load.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from .common import (
    check_duration_ms,
    max_batch_size_of,
    require_ticks,
    resolve_max_batch_size,
    waited_at_least,
)


class GreedyPolicy:
    """Serve ``min(queue_len, max_batch_size)`` at every epoch.

    In ``NodeBatching-v0`` (``info["in_flight"]`` present) it admits every waiting request
    that fits (``min(queue_len, max_batch_size - in_flight)``) at every node boundary and
    advances the least-advanced group: LazyBatching without its SLA check.

    :param env: the env (for ``max_batch_size``).
    :param max_batch_size: override (required when ``env`` is ``None``).
    """

    name = "greedy"

    def __init__(self, env: gym.Env | None = None, max_batch_size: int | None = None) -> None:
        self.max_batch_size = (
            int(max_batch_size) if max_batch_size is not None else max_batch_size_of(env)
        )
        if self.max_batch_size < 1:
            raise ValueError(
                f"max_batch_size={max_batch_size!r} is invalid: expected an integer >= 1"
            )

    def reset(self) -> None:
        """Greedy is stateless."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Serve everything waiting, up to the max batch size (minus requests in flight)."""
        q = info["queue_len"]
        room = self.max_batch_size - info.get("in_flight", 0)
        return q if q < room else (room if room > 0 else 0)


class StaticPolicy:
    """Static batching: a fixed batch size ``b``, with an optional timeout.

    Source: the "static batching" baseline of LazyBatching (Choi, Kim and Rhu, HPCA 2021)
    and of Pang et al. (arXiv 2503.05248): the server always runs batches of one size chosen offline. At an epoch
    with ``q`` requests waiting and the oldest waiting ``w``:

    * ``q >= b``: run ``b``;
    * else, with ``timeout_ms`` set and ``w >= timeout_ms``: run ``q`` (everything queued);
    * else wait (action 0).

    Without a timeout a static policy with ``b > 1`` needs no ticks: every arrival is an
    epoch, and arrivals never run dry, so the ``b``-th request always comes. A timeout
    can only fire at an epoch, so it needs ticks: the env must have
    ``decision_interval_ms`` set (the timeout then fires at the first epoch at or after
    it, i.e. up to one interval late).

    :param env: the env (for ``max_batch_size`` and the tick check); with ``None``,
        ``batch_size`` is required and ticks are not checked.
    :param batch_size: the fixed batch size ``b``, an integer in ``1..max_batch_size``
        (default: the env's ``max_batch_size``).
    :param timeout_ms: run a partial batch once the oldest request has waited this long
        (milliseconds, ``>= 0``); ``None`` (default) never runs a partial batch.
    """

    name = "static"

    def __init__(
        self,
        env: gym.Env | None = None,
        batch_size: int | None = None,
        timeout_ms: float | None = None,
    ) -> None:
        self.batch_size = resolve_max_batch_size(env, batch_size, "batch_size")
        self.timeout_ms = (
            None if timeout_ms is None else check_duration_ms("timeout_ms", timeout_ms)
        )
        if timeout_ms is not None:
            require_ticks(env, self.name, "timeout_ms", timeout_ms)

    def reset(self) -> None:
        """Static batching is stateless."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Run ``b`` once ``b`` wait; on timeout run what is queued; else wait.

        :param obs: unused.
        :param info: reads ``queue_len`` and ``oldest_wait_s``.
        """
        q = info["queue_len"]
        b = self.batch_size
        if q >= b:
            return b
        if (
            self.timeout_ms is not None
            and q > 0
            and waited_at_least(info["oldest_wait_s"], self.timeout_ms)
        ):
            return q
        return 0


__all__ = ["GreedyPolicy", "StaticPolicy", "max_batch_size_of"]
