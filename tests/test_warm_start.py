"""Warm starts (agents.warm_start): behaviour cloning of a baseline before RL."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml
from conftest import tensorboard_scalars
from helpers import SMALL_ENV, TINY_PPO

import baselines
import batch_env  # noqa: F401
from agents import load_policy
from agents.train import TrainArgs, train
from agents.warm_start import check_warm_start, discounted_targets, label
from batch_env import evaluate
from batch_env.wrappers import AdmitFraction, BinaryAction

ENV_ID = "batch_env/DynamicBatching-v0"


def _args(tmp_path: Path, **kw) -> TrainArgs:
    path = tmp_path / "tiny.yml"
    # gamma 0.9: the critic's targets skip 30 steps before each episode end (300-request
    # episodes would leave nothing at 0.99's 300)
    path.write_text(yaml.safe_dump({ENV_ID: {**TINY_PPO[ENV_ID], "gamma": 0.9}}))
    return TrainArgs(
        **{
            "algo": "ppo",
            "env_kwargs": SMALL_ENV,
            "hyperparams": str(path),
            "n_timesteps": 0,
            "run_dir": str(tmp_path / "run"),
            "centering_gain": "100",
            "eval_freq": 0,
            "progress": False,
            "warm_start": {"policy": "smdp", "steps": 3000, "epochs": 20},
            **kw,
        }
    )


def test_check_warm_start_fills_defaults_and_names_bad_values():
    assert check_warm_start(None) is None
    assert check_warm_start({"policy": "greedy"}) == {
        "policy": "greedy",
        "params": {},
        "steps": 100_000,
        "epochs": 10,
        "dagger": 0,
    }
    for bad, match in [
        ("graph", "must be a mapping"),
        ({"params": {}}, "needs policy"),
        ({"policy": "oracle-of-delphi"}, "policy='oracle-of-delphi' is not a baseline"),
        ({"policy": "graph", "params": [1]}, r"params=\[1\] must be a mapping"),
        ({"policy": "graph", "steps": 0}, "steps"),
        ({"policy": "graph", "epochs": 1.5}, "epochs"),
        ({"policy": "graph", "dagger": -1}, "dagger"),
        ({"policy": "graph", "teacher": 1}, r"unknown key\(s\) \['teacher'\]"),
    ]:
        with pytest.raises(ValueError, match=match):
            check_warm_start(bad, "warm_start")


def test_effective_actions_clip_to_what_the_env_can_do():
    env = gym.make(ENV_ID, **SMALL_ENV)
    env.reset(seed=0)
    core = env.unwrapped
    for _ in range(5):  # let requests queue up
        env.step(0)
    q = env.unwrapped.queue_len
    assert q >= 1
    assert core.effective_action(0) == 0
    assert core.effective_action(q) == q
    assert core.effective_action(32) == q if q < 32 else 32
    node = gym.make("batch_env/NodeBatching-v0")
    node.reset(seed=0)
    n = node.unwrapped
    B = n.config.max_batch_size
    kmax = n._kmax()
    assert n.effective_action(B) == kmax
    assert n.effective_action(B + 1 + B) == B + 1 + kmax
    assert n.effective_action(0) == 0


def test_label_maps_a_teacher_action_to_the_agent_action_doing_the_same():
    env = BinaryAction(gym.make(ENV_ID, **SMALL_ENV))
    env.reset(seed=0)
    for _ in range(5):
        env.step(0)
    core = env.unwrapped
    q = core.queue_len
    info = {"queue_len": q}
    # serving the whole queue is "serve" (the wrapper asks for B, the env runs q)
    assert label(2, [env.action_from_info], q, info, core.effective_action) == (1, True)
    assert label(2, [env.action_from_info], 0, info, core.effective_action) == (0, True)
    # without the env's clip, B and q look different: the nearest is taken and flagged
    assert label(2, [env.action_from_info], q, info)[1] is (q == 32)
    # a partial batch no agent action runs: the nearest, not exact
    if q >= 3:
        a, exact = label(2, [env.action_from_info], 1, info, core.effective_action)
        assert (a, exact) == (0, False)
    node = AdmitFraction(gym.make("batch_env/NodeBatching-v0"))
    _, ninfo = node.reset(seed=0)
    n = node.unwrapped
    B = n.config.max_batch_size
    a, exact = label(node.action_space.n, [node.action_from_info], B, ninfo, n.effective_action)
    assert exact and node.action_from_info(a, ninfo) in (B, n._kmax())


def test_discounted_targets_cut_at_episode_ends_and_skip_the_tail():
    r = np.array([[1.0], [1.0], [1.0], [1.0]])
    cuts = np.array([[False], [True], [False], [False]])
    g, valid = discounted_targets(r, cuts, 0.5, skip=1)
    assert g[:, 0].tolist() == [1.5, 1.0, 1.5, 1.0]
    # the step just before each cut (and the last step) misses what follows
    assert valid[:, 0].tolist() == [True, False, True, False]


def test_warm_start_clones_the_teacher(tmp_path):
    """n_timesteps 0: the run's policy is the cloned one, and acts like the teacher
    (checked to fail when the cloning step is skipped: agreement is then the random
    network's)."""
    run = train(_args(tmp_path))
    rec = json.loads((run / "warm_start.json").read_text())
    assert rec["samples"] == 3000 and rec["labels_exact"] == 1.0
    assert rec["agreement"] >= 0.95
    assert rec["value_samples"] > 0
    assert len(rec["epochs_log"]) == 20
    assert rec["epochs_log"][-1]["policy_loss"] < rec["epochs_log"][0]["policy_loss"]
    tags = tensorboard_scalars(run)
    assert [s for s, _ in tags["warm_start/policy_loss"]] == list(range(1, 21))
    assert tags["warm_start/agreement"] == [(20, pytest.approx(rec["agreement"]))]
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["warm_start"]["policy"] == "smdp" and cfg["args"]["warm_start"]["steps"] == 3000
    assert not any("TeacherView" in w["class"] for w in cfg["wrappers"])  # training only
    env = gym.make(ENV_ID, **SMALL_ENV)
    agent = evaluate(load_policy(run), env, n_episodes=3, seed=7)
    teacher = evaluate(baselines.make("smdp", env), env, n_episodes=3, seed=7)
    greedy = evaluate(baselines.make("greedy", env), env, n_episodes=3, seed=7)
    a, t, g = (
        np.mean([e["latency_mean_ms"] for e in r.episodes]) for r in (agent, teacher, greedy)
    )
    assert abs(a - t) < 0.05 * t < abs(g - t)  # the teacher's, not greedy's


def test_warm_start_then_rl_and_resume(tmp_path):
    run = train(_args(tmp_path, n_timesteps=128, checkpoint_freq=64))
    assert (run / "warm_start.json").exists()
    from stable_baselines3 import PPO

    assert PPO.load(run / "model.zip").num_timesteps == 128
    # a resumed run keeps its warm start (given again it must be equal) and does not clone again
    (run / "warm_start.json").unlink()
    train(_args(tmp_path, n_timesteps=256, resume=True))
    assert not (run / "warm_start.json").exists()
    with pytest.raises(ValueError, match="warm_start"):
        train(_args(tmp_path, n_timesteps=256, resume=True, warm_start={"policy": "greedy"}))


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"warm_start": None}, "n_timesteps=0 trains nothing"),
        ({"algo": "dqn"}, "algo='dqn'"),
        ({"vectorized": True}, "vectorized=True"),
        ({"warm_start": {"policy": "static", "params": {"batch_sizes": "x"}}}, "refuses params"),
        ({"warm_start": {"policy": "graph", "steps": -1}}, "steps"),
    ],
)
def test_refused_warm_starts_write_nothing(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        train(_args(tmp_path, **kw))
    assert not (tmp_path / "run").exists()
