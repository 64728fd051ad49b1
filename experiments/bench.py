"""Benchmarks that report speed as ratios against a reference run in the same process.

``batch-env bench`` measures, one after the other in one process:

* ``DynamicBatching-v0`` steps/s through ``gymnasium.make`` (profile ``resnet50-v100``,
  Poisson arrivals at load 0.6, uniformly random *valid* actions, episodes reset as they
  end), and
* ``CartPole-v1`` steps/s through ``gymnasium.make`` (uniformly random actions),

each as the best of ``repeats`` timed rounds (the least disturbed by other load), and
their ratio. Actions are drawn before timing, so both loops cost the same outside
``step``. Results go to ``results/bench/bench.json`` with a description of the machine.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np


def machine_description() -> dict[str, Any]:
    """Python, NumPy, Gymnasium versions, CPU model and count, for benchmark records."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import batch_env

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
        "batch_env": batch_env.__version__,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
    }


def _time_cartpole(n_steps: int, seed: int) -> float:
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, n_steps).tolist()
    step = env.step
    t0 = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = step(a)
        if terminated or truncated:
            env.reset()
    return n_steps / (time.perf_counter() - t0)


def _time_batching(n_steps: int, seed: int, env_kwargs: dict[str, Any]) -> float:
    import batch_env  # noqa: F401  (registers the ids)

    env = gym.make("batch_env/DynamicBatching-v0", **env_kwargs)
    _, info = env.reset(seed=seed)
    B = env.unwrapped.config.max_batch_size
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


def run_bench(n_steps: int = 200_000, repeats: int = 3, seed: int = 0) -> dict[str, Any]:
    """Run the benchmark and return its figures.

    :param n_steps: env steps per timed round.
    :param repeats: timed rounds per env; the best round counts.
    :param seed: seed for envs and actions.
    """
    env_kwargs = {
        "profile": "resnet50-v100",
        "workload": {"kind": "poisson", "load": 0.6},
    }
    ours = max(_time_batching(n_steps, seed, env_kwargs) for _ in range(repeats))
    cart = max(_time_cartpole(n_steps, seed) for _ in range(repeats))
    return {
        "dynamic_batching_steps_per_s": ours,
        "cartpole_steps_per_s": cart,
        "step_cost_ratio_vs_cartpole": cart / ours,
        "floor_step_cost_ratio": 2.0,
        "n_steps": n_steps,
        "repeats": repeats,
        "env_kwargs": env_kwargs,
        "machine": machine_description(),
    }


def write_results(result: dict[str, Any], out_dir: str | Path = "results/bench") -> Path:
    """Write ``bench.json`` under ``out_dir`` and return its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
