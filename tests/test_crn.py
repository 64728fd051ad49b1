"""``ppo_crn`` (agents/crn.py): branches of one root share the env's input, so equal first
actions give equal returns to the bit; without the shared input they differ; bad
settings are refused naming the field."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

import batch_env  # noqa: F401  (registers the ids)
from agents.crn import CRNPPO, _shared_sample
from agents.wrappers import CenteredReward

SMALL = {"horizon_requests": 60, "warmup_requests": 0, "grid": [8, 64], "budget_grid": [512, 2048]}


def _model(**kwargs):
    def make():
        return CenteredReward(gym.make("batch_env/LLMBatching-v2", **SMALL), gain=1.0)

    venv = DummyVecEnv([make])
    venv.seed(3)
    return CRNPPO("MlpPolicy", venv, n_steps=16, batch_size=16, seed=0, **kwargs), venv


@pytest.mark.parametrize("shared", [True, False])
def test_branches_with_one_first_action_return_the_same_only_on_a_shared_input(shared):
    model, venv = _model(branches=4, window_s=2.0, shared_input=shared)
    venv.reset()
    for _ in range(5):
        venv.step(np.array([1]))
    lane = venv.envs[0]
    now = lane.unwrapped.engine.now
    rets, steps = model._branch_returns(lane, np.array([2, 2, 2, 0]), np.random.default_rng(1))
    assert steps > 8
    if shared:
        assert rets[0] == rets[1] == rets[2]  # the same input, the same draws: to the bit
    else:  # each branch's own future: the comparison carries the input's noise
        assert len({rets[0], rets[1], rets[2]}) > 1
    assert lane.unwrapped.engine.now == now  # the lane itself did not move
    venv.close()


def test_a_rollout_holds_whole_roots_and_trains():
    model, venv = _model(branches=4, root_every=4, window_s=1.0)
    model.learn(total_timesteps=64)
    assert model.num_timesteps >= 64  # the branches' steps count
    buf = model.rollout_buffer
    adv = buf.advantages.reshape(-1, 4)  # a root's branches are consecutive samples
    assert np.allclose(adv.sum(axis=1), 0.0, atol=1e-4)  # leave-one-out: they sum to 0
    venv.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("branches", 1),
        ("branches", 2.0),
        ("root_every", 0),
        ("window_s", 0.0),
        ("window_s", float("nan")),
        ("shared_input", "yes"),
        ("bootstrap", 1),
    ],
)
def test_bad_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"{field}=.* is invalid"):
        _model(**{field: value})


def test_a_rollout_of_partial_roots_is_refused():
    with pytest.raises(ValueError, match="not a multiple of branches=3"):
        _model(branches=3)


def test_shared_uniforms_give_one_action_per_distribution():
    import torch as th
    from stable_baselines3.common.distributions import CategoricalDistribution

    dist = CategoricalDistribution(3).proba_distribution(th.log(th.tensor([[0.2, 0.5, 0.3]] * 2)))
    assert _shared_sample(dist, np.array([0.1])) == [0, 0]
    assert _shared_sample(dist, np.array([0.6])) == [1, 1]
    assert _shared_sample(dist, np.array([0.95])) == [2, 2]


def test_one_seed_trains_the_same_weights_twice():
    """The roots' shared uniforms come from the seed and the step count, the first
    actions from the seeded policy: one seed, one model, to the bit."""
    weights = []
    for _ in range(2):
        model, venv = _model(branches=4, root_every=4, window_s=1.0)
        model.learn(total_timesteps=64)
        weights.append([p.detach().numpy().tobytes() for p in model.policy.parameters()])
        venv.close()
    assert weights[0] == weights[1]
