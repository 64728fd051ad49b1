"""What the benchmarks share: the machine's description, timed rounds that alternate an
env and its reference (:func:`rounds`, :func:`median_ratio`), and the first pair of
reference loops: ``DynamicBatching-v0`` steps/s through ``gymnasium.make`` (uniformly
random *valid* actions) and ``CartPole-v1``'s (uniformly random actions), actions drawn
before timing so that both loops cost the same outside ``step``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np

import batch_env
from baselines.common import env_config
from batch_env.provenance import provenance


def machine_description() -> dict[str, Any]:
    """The machine, library versions and commit (:func:`batch_env.provenance.provenance`),
    flattened as benchmark records have them: ``cpu``, ``cpu_count``, ``python``, ...,
    the versions, and ``source``."""
    p = provenance()
    return {
        **p["machine"],
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
        "batch_env": batch_env.__version__,
        "versions": p["versions"],
        "source": p["source"],
    }


def time_cartpole(n_steps: int, seed: int) -> float:
    """CartPole-v1's steps per second through ``gymnasium.make``, uniformly random actions
    drawn before timing, episodes reset as they end."""
    return time_discrete("CartPole-v1", n_steps, seed)


def time_discrete(
    env_id: str, n_steps: int, seed: int, env_kwargs: dict[str, Any] | None = None
) -> float:
    """Steps per second of an env with a ``Discrete`` action space through
    ``gymnasium.make`` (with ``env_kwargs``), uniformly random actions drawn before timing,
    episodes reset as they end."""
    env = gym.make(env_id, **(env_kwargs or {}))
    env.reset(seed=seed)
    n_actions = int(cast(Any, env.action_space).n)
    actions = np.random.default_rng(seed).integers(0, n_actions, n_steps).tolist()
    step = env.step
    t0 = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = step(a)
        if terminated or truncated:
            env.reset()
    return n_steps / (time.perf_counter() - t0)


def rounds(timers: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Each timer's rate in each of ``repeats`` rounds. A round runs every timer back to
    back (the order rotated from round to round), so that a slow spell of a shared
    machine hits a round's reference and env alike; the ratio to report is then the
    median of the rounds' ratios (:func:`median_ratio`), not the ratio of two best
    rates timed minutes apart."""
    names = list(timers)
    out: dict[str, list[float]] = {k: [] for k in names}
    for r in range(repeats):
        k0 = r % len(names)
        for k in names[k0:] + names[:k0]:
            out[k].append(timers[k]())
    return out


def median_ratio(num: list[float], den: list[float]) -> float:
    """The median over rounds of ``num[i] / den[i]``."""
    return float(np.median(np.asarray(num, dtype=np.float64) / np.asarray(den, dtype=np.float64)))


def time_batching(n_steps: int, seed: int, env_kwargs: dict[str, Any]) -> float:
    """``DynamicBatching-v0``'s steps per second through ``gymnasium.make`` with
    ``env_kwargs``, uniformly random valid actions drawn before timing, episodes reset as
    they end."""
    env = gym.make("batch_env/DynamicBatching-v0", **env_kwargs)
    _, info = env.reset(seed=seed)
    B = env_config(env).max_batch_size
    u = np.random.default_rng(seed).random(n_steps).tolist()
    step = env.step
    t0 = time.perf_counter()
    for x in u:
        q = info["queue_len"]
        valid = (q if q < B else B) + 1  # actions 0..min(q, B)
        _, _, terminated, truncated, info = step(int(x * valid))
        if terminated or truncated:
            _, info = env.reset()
    return n_steps / (time.perf_counter() - t0)
