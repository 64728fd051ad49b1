"""Env steps per second of a PPO training on RLlib's env runners (1, 2 and 4) beside
Stable-Baselines3's PPO, on this machine (issue 65, item 4; docs/rllib.md).

Both train PPO with the same batch (``--batch`` env steps an iteration, minibatches of
256, one epoch) on one env id, made from its registration (RLlib: ``"batch_env:<id>"``);
after one warm-up iteration, the env steps of ``--iterations`` iterations over their wall
time. RLlib's figure includes its runners' sampling, the learner's update and the weights'
broadcast; SB3's its one env's stepping and the update, in one process.

    python scripts/rllib_throughput.py [--env-id batch_env/LLMBatching-v1] [--runners 1 2 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from typing import Any

import gymnasium as gym

import batch_env  # noqa: F401 (registers the ids)

MINIBATCH = 256


def rllib_steps_per_s(
    env_id: str, kwargs: dict[str, Any], runners: int, batch: int, iters: int
) -> float:
    """RLlib PPO's env steps per second with ``runners`` env runners (a local Ray)."""
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    ray.init(num_cpus=max(runners, 1) + 1, include_dashboard=False, log_to_driver=False)
    try:
        algo = (
            PPOConfig()
            .environment("batch_env:" + env_id, env_config=kwargs)
            .env_runners(num_env_runners=runners, rollout_fragment_length="auto")
            .training(train_batch_size_per_learner=batch, minibatch_size=MINIBATCH, num_epochs=1)
            .debugging(seed=0)
            .build_algo()
        )
        algo.train()  # warm-up
        n0 = algo.train()["env_runners"]["num_env_steps_sampled_lifetime"]
        t0 = time.perf_counter()
        for _ in range(iters):
            n1 = algo.train()["env_runners"]["num_env_steps_sampled_lifetime"]
        dt = time.perf_counter() - t0
        algo.stop()
    finally:
        ray.shutdown()
    return (n1 - n0) / dt


def sb3_steps_per_s(env_id: str, kwargs: dict[str, Any], batch: int, iters: int) -> float:
    """SB3 PPO's env steps per second on one env (``DummyVecEnv``), the same batch."""
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    env = gym.make(env_id, **kwargs)
    model = PPO(
        "MlpPolicy", env, n_steps=batch, batch_size=MINIBATCH, n_epochs=1, seed=0, device="cpu"
    )
    model.learn(batch)  # warm-up
    t0 = time.perf_counter()
    model.learn(batch * iters, reset_num_timesteps=False)
    return batch * iters / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    """Print the table (markdown)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env-id", default="batch_env/LLMBatching-v1", help="a registered id")
    ap.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4], help="env runner counts")
    ap.add_argument("--batch", type=int, default=2048, help="env steps an iteration (default 2048)")
    ap.add_argument("--iterations", type=int, default=3, help="timed iterations (default 3)")
    args = ap.parse_args(argv)
    if (
        args.env_id not in batch_env.ENV_IDS
        or min(args.runners) < 1
        or args.batch < MINIBATCH
        or args.iterations < 1
    ):
        print(
            f"error: --env-id {args.env_id!r} (one of {list(batch_env.ENV_IDS)}), --runners "
            f"{args.runners} (>= 1), --batch {args.batch} (>= {MINIBATCH}), --iterations "
            f"{args.iterations} (>= 1)",
            file=sys.stderr,
        )
        return 2
    kwargs: dict[str, Any] = {}
    warnings.simplefilter("ignore")
    rows = [("SB3 PPO, one env", sb3_steps_per_s(args.env_id, kwargs, args.batch, args.iterations))]
    for n in args.runners:
        rows.append(
            (
                f"RLlib PPO, {n} env runner(s)",
                rllib_steps_per_s(args.env_id, kwargs, n, args.batch, args.iterations),
            )
        )
    base = rows[0][1]
    print(
        f"{args.env_id}, PPO, {args.batch} env steps an iteration, {args.iterations} timed iterations"
    )
    print(f"on {platform.processor() or platform.machine()} ({os.cpu_count()} CPUs)\n")
    print("| trainer | env steps per second | vs SB3 |")
    print("| --- | --- | --- |")
    for name, v in rows:
        print(f"| {name} | {v:,.0f} | {v / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
