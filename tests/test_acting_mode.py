"""How a trained run acts: its most likely action or a draw from its policy, chosen on
its own evaluation episodes; the NumPy actor's draws (SB3's distribution, seeded per
episode) and the evaluation harness passing each episode's seed."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import batch_env
from agents.callbacks import acting_mode, eval_score
from agents.common import NumpyActor, algo_class
from agents.policy import run_acting_mode
from batch_env.wrappers import FactoredAction


def _record(det, sto):
    rec = {"timesteps": 1}
    for mode, v in (("deterministic", det), ("stochastic", sto)):
        if v == "cut":
            rec[mode] = {"unfinished": {"seed": 1, "steps": 10, "max_steps": 10}}
        elif v is not None:
            rec[mode] = {"reward_rate_per_s": [v, 0.1]}
    return rec


@pytest.mark.parametrize(
    "det, sto, want, score",
    [
        (-3.0, -3.5, "deterministic", -3.0),
        (-3.0, -3.0, "deterministic", -3.0),  # a tie keeps the most likely action
        (-6.4, -3.2, "stochastic", -3.2),
        ("cut", -3.2, "stochastic", -3.2),
        (-3.0, None, "deterministic", -3.0),
        (-3.0, "cut", "deterministic", -3.0),
        ("cut", "cut", "deterministic", -np.inf),
    ],
)
def test_the_better_mode_on_the_runs_own_episodes(det, sto, want, score):
    rec = _record(det, sto)
    assert acting_mode(rec) == want
    assert eval_score(rec) == score


def test_a_run_acts_as_its_final_evaluation_says(tmp_path):
    """final_evaluation.json's acting key, derived from the two modes for an older run,
    deterministic without a final evaluation and for DQN (epsilon-greedy is exploration,
    not a policy); a wrong value or a broken file is named."""
    import yaml

    def config(algo):
        cfg = {
            "algo": algo,
            "env_id": "batch_env/LLMTwoClasses-v0",
            "env_kwargs": {},
            "wrappers": [],
        }
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))

    config("ppo")
    assert run_acting_mode(tmp_path) == "deterministic"
    f = tmp_path / "final_evaluation.json"
    f.write_text(json.dumps(_record(-6.4, -3.2)))
    assert run_acting_mode(tmp_path) == "stochastic"
    config("dqn")
    assert run_acting_mode(tmp_path) == "deterministic"
    config("ppo")
    f.write_text(json.dumps({**_record(-6.4, -3.2), "acting": "deterministic"}))
    assert run_acting_mode(tmp_path) == "deterministic"
    f.write_text(json.dumps({"acting": "sometimes"}))
    with pytest.raises(ValueError, match="acting='sometimes' is invalid"):
        run_acting_mode(tmp_path)
    f.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable or not JSON"):
        run_acting_mode(tmp_path)


@pytest.mark.parametrize("factored", [False, True])
def test_numpy_draws_follow_the_policys_distribution(factored):
    """The NumPy actor's draws have SB3's probabilities (flat, and per part of a
    MultiDiscrete policy), never a masked action, and repeat with the generator's seed."""
    env = gym.make("batch_env/LLMTwoClasses-v0")
    if factored:
        env = FactoredAction(env)
    model = algo_class("ppo")("MlpPolicy", env, seed=1, device="cpu")
    with torch.no_grad():
        for p in model.policy.action_net.parameters():
            p.mul_(30.0)  # a distribution far from uniform
    actor = NumpyActor.of(model)
    assert actor is not None
    o = np.random.default_rng(4).normal(size=env.observation_space.shape).astype(np.float32)
    with torch.no_grad():
        dist = model.policy.get_distribution(torch.as_tensor(o[None]))
    n = 20_000
    draws = [actor.sample(o, np.random.default_rng(k)) for k in range(n)]
    if factored:
        probs = [d.probs[0].numpy() for d in dist.distribution]
        draws_by_part = np.array(draws).T
    else:
        probs = [dist.distribution.probs[0].numpy()]
        draws_by_part = np.array([draws])
    for p, got in zip(probs, draws_by_part, strict=True):
        freq = np.bincount(got, minlength=len(p)) / n
        assert np.abs(freq - p).max() < 0.015
    assert [actor.sample(o, np.random.default_rng(7)) for _ in range(2)][0] == pytest.approx(
        actor.sample(o, np.random.default_rng(7))
    )
    if not factored:
        mask = np.zeros(env.action_space.n, dtype=bool)
        mask[[3, 5]] = True
        assert {actor.sample(o, np.random.default_rng(k), mask) for k in range(200)} <= {3, 5}


class _SeedRecorder:
    def __init__(self):
        self.seeds = []

    def reset(self, seed=None):
        self.seeds.append(seed)

    def act(self, obs, info):
        return 1


def test_the_harness_gives_each_episode_its_seed_and_a_sampling_agent_repeats(tmp_path):
    rec = _SeedRecorder()
    batch_env.evaluate(
        rec,
        "batch_env/DynamicBatching-v0",
        n_episodes=3,
        seed=40,
        env_kwargs={"horizon_requests": 50},
    )
    assert rec.seeds == [40, 41, 42]
    from agents.common import AgentPolicy

    model = algo_class("ppo")("MlpPolicy", gym.make("batch_env/LLMTwoClasses-v0"), seed=2)
    pol = AgentPolicy(
        model, "batch_env/LLMTwoClasses-v0", {"horizon_requests": 60}, [], deterministic=False
    )
    a = batch_env.evaluate(
        pol, "batch_env/LLMTwoClasses-v0", n_episodes=2, seed=5, env_kwargs={"horizon_requests": 60}
    )
    b = batch_env.evaluate(
        pol, "batch_env/LLMTwoClasses-v0", n_episodes=2, seed=5, env_kwargs={"horizon_requests": 60}
    )
    assert [e["reward_rate_per_s"] for e in a.episodes] == [
        e["reward_rate_per_s"] for e in b.episodes
    ]
