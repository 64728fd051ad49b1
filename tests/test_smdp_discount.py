"""SemiMarkovDiscount: each step discounted by the time it took (exp(-dt / horizon_s)),
its GAE against SB3's, its errors, and a hyperparameter entry's callbacks in a run."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from stable_baselines3.common.buffers import RolloutBuffer

import batch_env  # noqa: F401
from agents.callbacks import SemiMarkovDiscount
from agents.common import callback_specs, load_hyperparams

TASK = "batch_env/LLMTwoClasses-v0"
SHORT = {"horizon_requests": 120, "warmup_requests": 20}


def _filled_buffer(gamma: float, seed: int) -> RolloutBuffer:
    rng = np.random.default_rng(seed)
    space = gym.spaces.Box(-1.0, 1.0, (3,))
    buf = RolloutBuffer(16, space, gym.spaces.Discrete(4), gamma=gamma, gae_lambda=0.9, n_envs=2)
    for step in range(16):
        buf.add(
            rng.normal(size=(2, 3)).astype(np.float32),
            rng.integers(0, 4, size=(2, 1)),
            rng.normal(size=2).astype(np.float32),
            np.array([step == 0 or rng.random() < 0.1] * 2, dtype=np.float32),
            torch.tensor(rng.normal(size=2), dtype=torch.float32),
            torch.zeros(2),
        )
    return buf


class _Model:
    """What the callback reads of an on-policy algorithm: its rollout buffer."""

    def __init__(self, buf: RolloutBuffer) -> None:
        self.rollout_buffer = buf


def _patched(buf: RolloutBuffer, horizon_s: float, dts: np.ndarray) -> SemiMarkovDiscount:
    cb = SemiMarkovDiscount(horizon_s)
    cb.model = _Model(buf)  # type: ignore[assignment]
    cb._on_training_start()
    assert cb.discounts is not None
    cb.discounts[:] = np.exp(-dts / horizon_s)
    return cb


def test_constant_steps_give_sb3s_gae_and_short_steps_discount_less():
    """With every step lasting dt, exp(-dt / h) = gamma gives SB3's own GAE to float
    precision; steps of half that duration discount less, so the same rewards' returns
    reach further."""
    gamma, h = 0.99, 30.0
    dt = -h * math.log(gamma)
    last, dones = torch.tensor([0.5, -0.2]), np.array([0.0, 1.0])
    ref = _filled_buffer(gamma, seed=1)
    ref.compute_returns_and_advantage(last, dones)
    ours = _filled_buffer(gamma, seed=1)
    _patched(ours, h, np.full((16, 2), dt))
    ours.compute_returns_and_advantage(last, dones)
    np.testing.assert_allclose(ours.advantages, ref.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=1e-5, atol=1e-5)
    # per-step discounts: step t of env e discounted by exp(-dt[t, e] / h), computed here
    dts = np.random.default_rng(2).uniform(0.001, 2.0, size=(16, 2))
    buf = _filled_buffer(gamma, seed=3)
    _patched(buf, h, dts)
    buf.compute_returns_and_advantage(last, dones)
    want = np.zeros((16, 2))
    gae = np.zeros(2)
    for t in reversed(range(16)):
        nxt = last.numpy() if t == 15 else buf.values[t + 1]
        live = 1.0 - (dones if t == 15 else buf.episode_starts[t + 1])
        g = np.exp(-dts[t] / h)
        gae = buf.rewards[t] + g * nxt * live - buf.values[t] + g * 0.9 * live * gae
        want[t] = gae
    np.testing.assert_allclose(buf.advantages, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, "30", True])
def test_bad_horizon_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="horizon_s=.*finite number > 0"):
        SemiMarkovDiscount(bad)


def test_off_policy_and_envs_without_durations_are_refused():
    """DQN has no rollout buffer to discount; an env whose info has no dt_s (CartPole)
    gives no duration: both refused, naming what is missing."""
    from stable_baselines3 import DQN, PPO

    with pytest.raises(ValueError, match="no on-policy rollout buffer"):
        DQN("MlpPolicy", "CartPole-v1").learn(10, callback=SemiMarkovDiscount(10.0))
    with pytest.raises(ValueError, match="dt_s=None"):
        PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16).learn(
            16, callback=SemiMarkovDiscount(10.0)
        )


def test_callback_entries_are_checked_before_a_run():
    """A hyperparameter entry's callback list: the serving callback is the run's own (left
    out), others are imported and built once; a bad path, a class that is not an SB3
    callback, or arguments it refuses are named."""
    got = callback_specs(
        [
            "agents.callbacks.ServingMetricsCallback",
            {"agents.callbacks.SemiMarkovDiscount": {"horizon_s": 5}},
        ]
    )
    assert got == [{"class": "agents.callbacks.SemiMarkovDiscount", "kwargs": {"horizon_s": 5}}]
    assert callback_specs(None) == []
    with pytest.raises(ValueError, match="callback 'agents.nothing.Here' cannot be imported"):
        callback_specs("agents.nothing.Here")
    with pytest.raises(ValueError, match="is not a stable_baselines3 BaseCallback"):
        callback_specs("agents.wrappers.CenteredReward")
    with pytest.raises(ValueError, match="refuses its arguments"):
        callback_specs({"agents.callbacks.SemiMarkovDiscount": {"horizon": 5}})
    with pytest.raises(ValueError, match="horizon_s=-5 is invalid"):
        callback_specs({"agents.callbacks.SemiMarkovDiscount": {"horizon_s": -5}})


def test_a_run_discounts_its_steps_by_their_durations(tmp_path: Path):
    """A PPO run whose entry names SemiMarkovDiscount records it in config.yaml and
    discounts each step by its own duration: the LLM env's steps last from one decode
    iteration to many, so the discounts of one rollout differ."""
    from agents.train import TrainArgs, train

    entry = dict(load_hyperparams("ppo", TASK))
    entry["callback"] = [
        "agents.callbacks.ServingMetricsCallback",
        {"agents.callbacks.SemiMarkovDiscount": {"horizon_s": 10.0}},
    ]
    entry.update(n_envs=1, n_steps=128, batch_size=64, n_epochs=1, env_kwargs=SHORT)
    hp = tmp_path / "ppo.yml"
    hp.write_text(yaml.safe_dump({TASK: entry}))
    seen: list[np.ndarray] = []
    original = SemiMarkovDiscount._on_rollout_end

    def spy(self: SemiMarkovDiscount) -> None:
        assert self.discounts is not None
        seen.append(self.discounts.copy())
        original(self)

    SemiMarkovDiscount._on_rollout_end = spy  # type: ignore[method-assign]
    try:
        run = tmp_path / "run"
        train(
            TrainArgs(
                algo="ppo",
                env_id=TASK,
                n_timesteps=256,
                seed=0,
                run_dir=str(run),
                progress=False,
                eval_freq=0,
                hyperparams=str(hp),
            )
        )
    finally:
        SemiMarkovDiscount._on_rollout_end = original  # type: ignore[method-assign]
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["callbacks"] == [
        {"class": "agents.callbacks.SemiMarkovDiscount", "kwargs": {"horizon_s": 10.0}}
    ]
    assert len(seen) == 2
    d = np.concatenate(seen)
    assert np.all((d > 0) & (d <= 1)) and d.min() < d.max()
