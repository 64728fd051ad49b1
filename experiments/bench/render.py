"""The cost of one ``render_mode="rgb_array"`` frame against one step of the same env, for
each env (target: a frame well under 1 ms)."""

from __future__ import annotations

import time
from typing import Any, cast

import gymnasium as gym
import numpy as np

#: the envs of :func:`bench_render`, with their default profiles and workloads
RENDER_BENCH_ENVS: tuple[str, ...] = (
    "batch_env/DynamicBatching-v0",
    "batch_env/NodeBatching-v0",
    "batch_env/LLMBatching-v0",
    "batch_env/LLMBatching-v1",
    "batch_env/LLMBatching-v2",
    "batch_env/LLMRouting-v0",
)


def _time_render(env_id: str, n_steps: int, seed: int) -> tuple[float, float]:
    """Seconds per ``step()`` and per ``render()`` of one ``render_mode="rgb_array"`` env
    through ``gymnasium.make``, each frame drawn just after its step (the same states)."""

    env = gym.make(env_id, render_mode="rgb_array")
    env.reset(seed=seed)
    env.render()  # builds the frame layout once (static panels and labels)
    n_actions = int(cast(Any, env.action_space).n)  # Discrete
    actions = np.random.default_rng(seed).integers(0, n_actions, n_steps).tolist()
    step, render, clock = env.step, env.render, time.perf_counter
    t_step = t_render = 0.0
    for a in actions:  # uniformly random actions: too large ones are clipped (docstrings)
        t0 = clock()
        _, _, terminated, truncated, _ = step(a)
        t1 = clock()
        render()
        t_render += clock() - t1
        t_step += t1 - t0
        if terminated or truncated:
            env.reset()
    env.close()
    return t_step / n_steps, t_render / n_steps


def bench_render(
    n_steps: int = 5000,
    repeats: int = 3,
    seed: int = 0,
    env_ids: tuple[str, ...] = RENDER_BENCH_ENVS,
) -> dict[str, Any]:
    """What one ``rgb_array`` frame costs against one step of the same env.

    Each env (default arguments, ``render_mode="rgb_array"``, through ``gymnasium.make``)
    takes ``n_steps`` uniformly random actions, rendering a frame after each step; step
    and frame times are summed apart over the same states. The best of ``repeats`` rounds
    counts (each time on its own). ``frame_cost_ratio_vs_step`` is frame time over step
    time (target: a frame well under 1 ms).

    :param n_steps: steps (and frames) per round.
    :param repeats: timed rounds per env.
    :param seed: seed of envs and actions.
    :param env_ids: the envs.
    """
    rows = []
    for env_id in env_ids:
        times = [_time_render(env_id, n_steps, seed) for _ in range(repeats)]
        step_s = min(t[0] for t in times)
        frame_s = min(t[1] for t in times)
        rows.append(
            {
                "env_id": env_id,
                "step_us": step_s * 1e6,
                "frame_us": frame_s * 1e6,
                "frame_cost_ratio_vs_step": frame_s / step_s,
            }
        )
    from batch_env.render import HEIGHT, WIDTH

    return {
        "envs": rows,
        "frame_shape": [HEIGHT, WIDTH, 3],
        "n_steps": n_steps,
        "repeats": repeats,
        "target_frame_us": 1000.0,
    }
