"""SB3 and sb3-contrib straight from the registered ids, as users write them:
``PPO("MlpPolicy", env_id)``, ``make_vec_env(env_id, n_envs=4)``, ``A2C``, ``DQN`` and
``MaskablePPO`` (every batch_env action space is Discrete, with ``action_masks()``).
SB3 makes a string env with ``render_mode="rgb_array"``: these need the render modes."""

from __future__ import annotations

import gymnasium as gym
import pytest

import batch_env

#: keep each one-liner to a few hundred steps: short episodes, small rollouts
SHORT = {
    "batch_env/DynamicBatching-v0": {"horizon_requests": 50},
    "batch_env/NodeBatching-v0": {"horizon_requests": 20},
    "batch_env/LLMBatching-v0": {"horizon_requests": 10},
    "batch_env/LLMBatching-v1": {"horizon_requests": 10},
    "batch_env/LLMBatching-v2": {"horizon_requests": 10},
    "batch_env/LLMRouting-v0": {"horizon_requests": 10},
}


@pytest.mark.parametrize("env_id", batch_env.ENV_IDS)
def test_action_spaces_are_discrete(env_id):
    assert isinstance(gym.make(env_id).action_space, gym.spaces.Discrete)


@pytest.mark.parametrize("env_id", batch_env.ENV_IDS)
def test_ppo_from_the_id(env_id):
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", env_id, n_steps=64, batch_size=64, n_epochs=1).learn(128)
    assert model.num_timesteps >= 128


@pytest.mark.parametrize("env_id", batch_env.ENV_IDS)
def test_make_vec_env_from_the_id(env_id):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env(env_id, n_envs=4, env_kwargs=SHORT[env_id])
    assert venv.num_envs == 4
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1).learn(256)
    assert model.num_timesteps >= 256


@pytest.mark.parametrize("env_id", batch_env.ENV_IDS)
def test_a2c_and_dqn_from_the_id(env_id):
    from stable_baselines3 import A2C, DQN

    assert A2C("MlpPolicy", env_id).learn(200).num_timesteps >= 200
    assert (
        DQN("MlpPolicy", env_id, learning_starts=50, buffer_size=1000).learn(200).num_timesteps
        >= 200
    )


@pytest.mark.parametrize("env_id", batch_env.ENV_IDS)
def test_maskable_ppo_from_the_id(env_id):
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks

    model = MaskablePPO("MlpPolicy", env_id, n_steps=64, batch_size=64, n_epochs=1).learn(128)
    assert model.num_timesteps >= 128
    masks = get_action_masks(model.get_env())
    assert masks.shape == (1, gym.make(env_id).action_space.n) and masks.any()
