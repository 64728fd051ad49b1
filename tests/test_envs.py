"""Tests over every registered ``batch_env/`` id (Minigrid's template): a new env is
tested the day it is registered."""

from __future__ import annotations

import json
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env

import batch_env

ENV_IDS = sorted(k for k in gym.registry if k.startswith("batch_env/"))
# small, fast episodes for the generic checks
SMALL = {"horizon_requests": 60, "warmup_requests": 0}


def test_every_declared_id_is_registered():
    assert set(batch_env.ENV_IDS) | set(batch_env.tasks.TASKS) == set(ENV_IDS)
    assert ENV_IDS, "no batch_env/ id registered"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id):
    env = gym.make(env_id, **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # a superseded task says so each time it is made (the checker makes it again)
        warnings.filterwarnings("ignore", ".* is superseded by ", DeprecationWarning)
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_check_env(env_id):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make(env_id, **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb3_check_env(env.unwrapped, warn=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_with_module_prefix(env_id):
    env = gym.make(f"batch_env:{env_id}", **SMALL)
    assert env.spec.id == env_id


def _rollout(env, seed, n_steps=400):
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out = [obs]
    rewards = []
    for _ in range(n_steps):
        mask = info["action_mask"]
        a = int(rng.choice(np.flatnonzero(mask)))
        obs, r, term, trunc, info = env.step(a)
        out.append(obs)
        rewards.append(r)
        if term or trunc:
            obs, info = env.reset()
            out.append(obs)
    return np.array(out), np.array(rewards)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeded_determinism(env_id):
    o1, r1 = _rollout(gym.make(env_id, **SMALL), 7)
    o2, r2 = _rollout(gym.make(env_id, **SMALL), 7)
    o3, r3 = _rollout(gym.make(env_id, **SMALL), 8)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(r1, r2)
    assert not np.array_equal(r1[: len(r3)], r3[: len(r1)])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickle_roundtrip_mid_episode(env_id):
    env = gym.make(env_id, **SMALL)
    env.reset(seed=3)
    env.step(1)
    clone = pickle.loads(pickle.dumps(env))
    for a in (0, 2, 1, 3, 0, 5):
        a %= env.action_space.n  # (LLMRouting-v0: 4 replicas)
        o1, r1, *_ = env.step(a)
        o2, r2, *_ = clone.step(a)
        np.testing.assert_array_equal(o1, o2)
        assert r1 == r2


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_spec_json_roundtrip(env_id):
    env = gym.make(env_id, **SMALL)
    spec = EnvSpec.from_json(env.spec.to_json())
    assert spec == env.spec
    assert json.loads(env.spec.to_json())["id"] == env_id
    env2 = gym.make(spec)
    assert env2.unwrapped.config == env.unwrapped.config


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_max_episode_steps_is_a_safety_net(env_id):
    env = gym.make(env_id, **SMALL)
    # the base ids' net; a benchmark task with long episodes scales it (10 steps a
    # request, 100 in the LLM envs)
    net = batch_env.MAX_EPISODE_STEPS
    if env_id in batch_env.tasks.TASKS:
        task = batch_env.tasks.TASKS[env_id]
        per = 100 if task.base.startswith("batch_env/LLMBatching-v") else 10
        warm = task.kwargs.get("warmup_requests", 0)
        net = max(net, per * (task.horizon_requests + warm))
        assert net == max(batch_env.MAX_EPISODE_STEPS, task.safety_steps)
    assert env.spec.max_episode_steps == net
    # the env ends by itself long before the safety net
    _, info = env.reset(seed=0)
    for _ in range(10_000):
        _, _, term, trunc, info = env.step(int(np.flatnonzero(info["action_mask"])[-1]))
        if term or trunc:
            break
    assert trunc and "serving" in info


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sync_vector_env(env_id):
    envs = gym.make_vec(env_id, num_envs=3, vectorization_mode="sync", **SMALL)
    obs, infos = envs.reset(seed=11)
    assert obs.shape == (3, *envs.single_observation_space.shape)
    for _ in range(50):
        obs, rew, term, trunc, infos = envs.step(np.ones(3, dtype=np.int64))
        assert envs.observation_space.contains(obs)
    envs.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render_ansi(env_id):
    env = gym.make(env_id, render_mode="ansi", **SMALL)
    env.reset(seed=0)
    text = env.render()
    assert "queue=" in text
