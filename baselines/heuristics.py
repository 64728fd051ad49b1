"""Simple heuristic batching policies.

* ``greedy``: run ``min(queue, max_batch_size)`` whenever the server is idle. With an
  unlimited ``max_batch_size`` this is the "serve all waiting requests" dynamic batching
  analysed by Inoue (Performance Evaluation 147, 2021, arXiv 1912.06322); it never waits,
  so it minimises the time requests spend queued at low load and wastes accelerator
  efficiency (small batches) at moderate load.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym


def max_batch_size_of(env: gym.Env | None, default: int | None = None) -> int:
    """The env's ``max_batch_size`` (looking through wrappers).

    :param env: the env, or ``None``.
    :param default: value used when ``env`` is ``None``.
    """
    if env is None:
        if default is None:
            raise ValueError("env=None: pass the env or max_batch_size=<int >= 1>")
        return int(default)
    return int(env.unwrapped.config.max_batch_size)


class GreedyPolicy:
    """Serve ``min(queue_len, max_batch_size)`` at every epoch.

    :param env: the env (for ``max_batch_size``).
    :param max_batch_size: override (required when ``env`` is ``None``).
    """

    name = "greedy"

    def __init__(self, env: gym.Env | None = None, max_batch_size: int | None = None) -> None:
        self.max_batch_size = (
            int(max_batch_size) if max_batch_size is not None else max_batch_size_of(env)
        )
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size!r} is invalid: expected an integer >= 1")

    def reset(self) -> None:
        """Greedy is stateless."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Serve everything waiting, up to the max batch size."""
        q = info["queue_len"]
        return q if q < self.max_batch_size else self.max_batch_size
