"""The NumPy vector env against Gymnasium's ``CartPoleVectorEnv``: ``DynamicBatchingVectorEnv``
through ``make_vec`` (profile ``resnet50-v100``, load 0.6, random valid actions from
``action_masks()``) at ``num_envs`` 1, 64, 1024 and 4096 (floor: 1,000,000 env-steps/s at
1024; aim: a third of CartPole's)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any, cast

import gymnasium as gym
import numpy as np

from .common import median_ratio, rounds


def _time_vector(num_envs: int, n_steps: int, seed: int, env_kwargs: dict[str, Any]) -> float:
    """Env-steps/s of the NumPy vector env (``make_vec``, NEXT_STEP autoreset), random
    valid actions drawn from ``action_masks()`` (their cost included, as an agent pays it)."""

    env = gym.make_vec("batch_env/DynamicBatching-v0", num_envs=num_envs, **env_kwargs)
    env.reset(seed=seed)
    u = np.random.default_rng(seed).random((n_steps, num_envs))
    step, masks = env.step, cast(Any, env).action_masks  # the native vector env has them
    t0 = time.perf_counter()
    for row in u:
        n_valid = masks().sum(axis=1)  # actions 0..min(queue, B)
        step((row * n_valid).astype(np.int64))
    rate = n_steps * num_envs / (time.perf_counter() - t0)
    env.close()
    return rate


def _time_cartpole_vector(num_envs: int, n_steps: int, seed: int) -> float:
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    env = CartPoleVectorEnv(num_envs=num_envs)
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, (n_steps, num_envs))
    step = env.step
    t0 = time.perf_counter()
    for a in actions:
        step(a)
    rate = n_steps * num_envs / (time.perf_counter() - t0)
    env.close()
    return rate


def bench_vector(
    sizes: tuple[int, ...] = (1, 64, 1024, 4096),
    env_steps: int = 2_000_000,
    repeats: int = 3,
    seed: int = 0,
) -> dict[str, Any]:
    """Vector env-steps/s against Gymnasium's ``CartPoleVectorEnv`` at each ``num_envs``.

    Profile ``resnet50-v100``, Poisson at load 0.6, uniformly random valid actions,
    episodes autoreset (NEXT_STEP; a reset step counts as an env-step, as in CartPole's).
    Each size runs about ``env_steps`` env-steps per round (200 to 30,000 vector steps),
    both envs in every round (:func:`rounds`): the rates are the best round's, the ratio
    the median of the rounds' ratios. Floor: 1,000,000 env-steps/s at 1024 lanes;
    aim: a third of CartPoleVectorEnv's.

    :param sizes: the ``num_envs`` values.
    :param env_steps: env-steps per timed round.
    :param repeats: timed rounds per size and env.
    :param seed: seed of envs and actions.
    """
    env_kwargs = {"profile": "resnet50-v100", "workload": {"kind": "poisson", "load": 0.6}}
    rows = []
    for n in sizes:
        steps = min(max(env_steps // n, 200), 30_000)
        r = rounds(
            {
                "ours": partial(_time_vector, n, steps, seed, env_kwargs),
                "cart": partial(_time_cartpole_vector, n, steps, seed),
            },
            repeats,
        )
        rows.append(
            {
                "num_envs": n,
                "vector_steps": steps,
                "env_steps_per_s": max(r["ours"]),
                "cartpole_vector_env_steps_per_s": max(r["cart"]),
                "ratio_vs_cartpole": median_ratio(r["ours"], r["cart"]),
                "round_ratios": [a / b for a, b in zip(r["ours"], r["cart"], strict=True)],
            }
        )
    at_1024: dict[str, Any] | None = next((r for r in rows if r["num_envs"] == 1024), None)
    return {
        "env_kwargs": env_kwargs,
        "sizes": rows,
        "floor_env_steps_per_s_at_1024": 1_000_000,
        "meets_floor_at_1024": None if at_1024 is None else at_1024["env_steps_per_s"] >= 1_000_000,
        "aim_ratio_vs_cartpole": 1 / 3,
    }
