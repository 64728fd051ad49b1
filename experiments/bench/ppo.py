"""PPO training steps/s on ``DynamicBatching-v0`` against ``CartPole-v1`` with the same
settings (floor: ratio 0.8), and through the SB3 adapter on the native vector env
against SB3's ``DummyVecEnv`` of the scalar env, 64 lanes each."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from agents.common import algo_kwargs as algo_kwargs_of
from agents.common import literal, load_hyperparams, make_env, wrapper_specs

from .common import median_ratio, rounds


def _ppo_setup() -> tuple[str, dict[str, Any], list, dict[str, Any], dict[str, Any]]:
    """PPO settings shared by the training benchmarks (one torch thread): the env id, the
    hyperparameter file's entry, its wrappers (centring at a fixed gain), the algorithm
    keyword arguments and the policy keyword arguments."""
    import torch

    from agents.wrappers import run_specs

    torch.set_num_threads(1)
    env_id = "batch_env/DynamicBatching-v0"
    hp = load_hyperparams("ppo", env_id)
    specs = run_specs(wrapper_specs(hp["env_wrapper"]), 100.0)
    algo_kwargs = algo_kwargs_of(hp)
    policy_kwargs = dict(literal(hp["policy_kwargs"], "policy_kwargs"))
    return env_id, hp, specs, algo_kwargs, policy_kwargs


def _ppo_steps_per_s(
    venv: Any,
    total_steps: int,
    seed: int,
    algo_kwargs: dict[str, Any],
    policy_kwargs: dict[str, Any],
) -> float:
    """PPO training steps/s on ``venv`` (wrapped in ``VecNormalize``)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    model = PPO(
        "MlpPolicy",
        VecNormalize(venv),
        policy_kwargs=dict(policy_kwargs),
        seed=seed,
        device="cpu",
        **algo_kwargs,
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=total_steps)
    return total_steps / (time.perf_counter() - t0)


def bench_ppo(total_steps: int = 32_768, seed: int = 0, repeats: int = 3) -> dict[str, Any]:
    """PPO training steps/s on DynamicBatching-v0 and on CartPole-v1 with the same settings.

    Both use ``agents/hyperparams/ppo.yml``'s algorithm settings (4 envs in a
    ``DummyVecEnv``, 512-step rollouts, 10 epochs, 64x64 MLP), one torch thread, and
    ``VecNormalize``; DynamicBatching-v0 also carries its training wrappers (binary
    actions, queue features, centring with a fixed gain).

    :param total_steps: environment steps per run.
    :param seed: seed of both runs.
    :param repeats: rounds, each training both back to back (:func:`rounds`): the
        rates are the best round's, the ratio the median of the rounds'.
    """
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    env_id, hp, specs, algo_kwargs, policy_kwargs = _ppo_setup()

    def timed(env_fn: Any) -> float:
        venv = make_vec_env(env_fn, n_envs=int(hp["n_envs"]), seed=seed, vec_env_cls=DummyVecEnv)
        return _ppo_steps_per_s(venv, total_steps, seed, algo_kwargs, policy_kwargs)

    r = rounds(
        {
            "ours": lambda: timed(
                lambda: make_env(env_id, {"workload": {"kind": "poisson", "load": 0.6}}, specs)
            ),
            "cart": lambda: timed(lambda: gym.make("CartPole-v1")),
        },
        repeats,
    )
    return {
        "total_steps": total_steps,
        "repeats": repeats,
        "dynamic_batching_ppo_steps_per_s": max(r["ours"]),
        "cartpole_ppo_steps_per_s": max(r["cart"]),
        "ratio": median_ratio(r["ours"], r["cart"]),
        "round_ratios": [a / b for a, b in zip(r["ours"], r["cart"], strict=True)],
        "floor_ratio": 0.8,
        "settings": {
            "n_envs": hp["n_envs"],
            **algo_kwargs,
            "policy_kwargs": str(policy_kwargs),
            "threads": 1,
        },
    }


def bench_ppo_vector(
    num_envs: int = 64, total_steps: int = 65_536, seed: int = 0
) -> dict[str, Any]:
    """PPO training steps/s through the SB3 adapter on the native vector env against SB3's
    ``DummyVecEnv`` of the scalar env: the same ``num_envs``, wrappers (the hyperparameter
    file's, as vector twins on the native side), PPO settings and one torch thread.

    :param num_envs: lanes on both sides.
    :param total_steps: environment steps per run.
    :param seed: seed of both runs.
    """
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.vec_env import make_vec_env

    env_id, hp, specs, algo_kwargs, policy_kwargs = _ppo_setup()
    env_kwargs = {"workload": {"kind": "poisson", "load": 0.6}}
    # the same rollout size in steps as the file's n_envs x n_steps
    algo_kwargs["n_steps"] = max(
        int(algo_kwargs.get("n_steps", 512)) * int(hp["n_envs"]) // num_envs, 16
    )
    native = _ppo_steps_per_s(
        make_vec_env(
            env_id, num_envs, env_kwargs, seed=seed, mode="vector_entry_point", wrappers=specs
        ),
        total_steps,
        seed,
        algo_kwargs,
        policy_kwargs,
    )
    dummy = _ppo_steps_per_s(
        sb3_make_vec_env(
            lambda: make_env(env_id, env_kwargs, specs),
            n_envs=num_envs,
            seed=seed,
            vec_env_cls=DummyVecEnv,
        ),
        total_steps,
        seed,
        algo_kwargs,
        policy_kwargs,
    )
    return {
        "num_envs": num_envs,
        "total_steps": total_steps,
        "native_vector_ppo_steps_per_s": native,
        "dummy_vec_env_ppo_steps_per_s": dummy,
        "ratio": native / dummy,
        "settings": {**algo_kwargs, "policy_kwargs": str(policy_kwargs), "threads": 1},
    }
