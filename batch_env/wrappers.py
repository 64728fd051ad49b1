"""Gymnasium wrappers that help RL agents train on the batching envs.

Why they exist (facts from a prototype on DynamicBatching-v0's semantics, V100 linear
fit, B = 32, load 0.6): plain PPO with per-step discounting collapses. Steps last very
different times (a wait lasts one inter-arrival time, a batch several), so a per-step
discount makes short "wait" steps look cheap, and with ``Discrete(B + 1)`` a
deterministic argmax can pick "wait" while the probability of serving is split over many
nearly equivalent batch sizes. The remedies are the ones of semi-Markov average-reward
RL (Tijms; Das, Gosavi et al. 1999, "SMART"):

* :class:`AverageRewardCentering` adds ``g x dt`` to every reward, where ``g`` is a
  reference cost rate (a baseline's measured cost per second, the SMDP gain, or an online
  estimate). The centred reward ``-(cost - g dt)`` is the SMDP's relative-value reward:
  its sum over an episode no longer depends on how the episode's time is cut into steps,
  so discounting per step no longer favours short steps. With it, binary-action PPO came
  within 1% of the SMDP optimum in 300k steps.
* :class:`BinaryAction` reduces the choice to wait / serve ``min(queue, B)``, which is
  enough to express the control-limit policies that are optimal in the SMDP-exact
  subset and removes the split-probability problem. By default it also serves whenever
  a full batch waits (``serve_full=True``): the optimal policies are control limits at
  or below B (Deb and Serfozo 1973 for batch-service queues; every instance our solver
  has solved, tested in ``tests/test_smdp.py``), and without the rule a deterministic
  network can pick "wait" in the long-queue states training rarely visits, and keep
  waiting while a full queue drops arrivals (seen on bursty MMPP traffic).
* :class:`QueueFeatures` appends ``log(1 + queue)`` (scaled) and ``min(queue, B) / B`` to
  the observation: the queue length spans four orders of magnitude (1 .. capacity), and
  thresholds at small queue lengths are hard to represent with the raw ratio alone.

All three preserve ``info`` (including ``info["serving"]``) and the action masks.
"""

from __future__ import annotations

import math
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .config import check_number


class AverageRewardCentering(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Add ``gain x info["dt_s"]`` to each reward (average-reward centring for an SMDP).

    :param env: a batching env (its ``info`` must carry ``dt_s``).
    :param gain: reference cost rate per second (positive: the env's rewards are costs
        with a minus sign), e.g. a baseline's ``-reward_rate_per_s`` or the SMDP gain.
        ``None`` estimates it online as total cost / total time over the steps seen so
        far (across episodes), until :meth:`freeze` is called.
    :param initial_gain: starting value of the online estimate (``None``: 0).

    ``info["centering_gain"]`` gives the value used at each step.
    """

    def __init__(self, env: gym.Env, gain: float | None = None, initial_gain: float | None = None) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, gain=gain, initial_gain=initial_gain)
        gym.Wrapper.__init__(self, env)
        if gain is not None:
            check_number("gain", gain)
        if initial_gain is not None:
            check_number("initial_gain", initial_gain)
        self.online = gain is None
        self.gain = float(gain if gain is not None else (initial_gain or 0.0))
        self._cost = 0.0
        self._time = 0.0

    def freeze(self) -> None:
        """Stop updating the online estimate (for evaluation)."""
        self.online = False

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env and return the centred reward."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        dt = float(info["dt_s"])
        if self.online:
            self._cost -= float(reward)
            self._time += dt
            if self._time > 0.0:
                self.gain = self._cost / self._time
        info["centering_gain"] = self.gain
        return obs, float(reward) + self.gain * dt, terminated, truncated, info


def binary_to_batch(action: Any, queue_len: int, max_batch_size: int, serve_full: bool) -> int:
    """The env action for a binary action: 0 = wait, 1 = serve ``min(queue, B)``.

    With ``serve_full``, a wait while at least ``max_batch_size`` requests wait serves a
    full batch instead.
    """
    a = int(action)
    if a not in (0, 1):
        raise ValueError(f"action={action!r} is out of range: expected 0 (wait) or 1 (serve)")
    if a or (serve_full and queue_len >= max_batch_size):
        return max_batch_size  # the env runs min(queue, B) and flags the clip
    return 0


class BinaryAction(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """Two actions: ``0`` = wait, ``1`` = serve ``min(queue, max_batch_size)``.

    :param env: a ``DynamicBatching-v0`` env.
    :param serve_full: serve a full batch whenever one waits, whatever the action.
    """

    def __init__(self, env: gym.Env, serve_full: bool = True) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, serve_full=serve_full)
        gym.ActionWrapper.__init__(self, env)
        self._B = int(env.unwrapped.config.max_batch_size)
        self.serve_full = bool(serve_full)
        self.action_space = spaces.Discrete(2)

    def action(self, action: Any) -> int:
        """Map wait/serve to the env's batch-size action (using the env's queue)."""
        return binary_to_batch(action, self.unwrapped.queue_len, self._B, self.serve_full)

    def action_from_info(self, action: Any, info: dict[str, Any]) -> int:
        """The same mapping for a policy acting on another env, from its ``info``."""
        return binary_to_batch(action, info["queue_len"], self._B, self.serve_full)

    def action_masks(self) -> np.ndarray:
        """Both actions are always valid (every epoch has a waiting request)."""
        return np.ones(2, dtype=bool)


class QueueFeatures(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Append ``log(1 + queue) / log(1 + capacity)`` and ``min(queue, B) / B``.

    :param env: a ``DynamicBatching-v0`` env (feature 0 of its observation is
        queue / max_batch_size).
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        core = env.unwrapped
        self._B = int(core.config.max_batch_size)
        self._log_cap = math.log1p(core.config.queue_capacity)
        base = env.observation_space
        low = np.concatenate([base.low, np.zeros(2, dtype=np.float32)])
        high = np.concatenate([base.high, np.ones(2, dtype=np.float32)])
        self.observation_space = spaces.Box(low, high, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """Add the two queue features."""
        q = float(observation[0]) * self._B
        extra = np.array([math.log1p(q) / self._log_cap, min(q, self._B) / self._B], dtype=np.float32)
        return np.concatenate([observation, np.minimum(extra, 1.0)]).astype(np.float32)


WRAPPERS: dict[str, type[gym.Wrapper]] = {
    "centering": AverageRewardCentering,
    "binary": BinaryAction,
    "queue_features": QueueFeatures,
}
