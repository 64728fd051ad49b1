"""keep_best: a run ends with the model of its best periodic evaluation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium as gym
import pytest
import yaml
from helpers import SMALL_ENV, TINY_PPO

import batch_env  # noqa: F401
from agents import load_policy
from agents.callbacks import eval_score
from agents.train import TrainArgs, train
from batch_env import evaluate

ENV_ID = "batch_env/DynamicBatching-v0"


def _args(tmp_path: Path, **kw) -> TrainArgs:
    path = tmp_path / "wreck.yml"
    # RL that wrecks the clone of smdp: a large step and an entropy bonus that pushes the
    # policy towards coin flips, so that the best evaluation is an early one
    hp = {**TINY_PPO[ENV_ID], "gamma": 0.9, "learning_rate": 0.05, "ent_coef": 5.0, "n_epochs": 10}
    path.write_text(yaml.safe_dump({ENV_ID: hp}))
    return TrainArgs(
        **{
            "algo": "ppo",
            "env_kwargs": SMALL_ENV,
            "hyperparams": str(path),
            "n_timesteps": 256,
            "run_dir": str(tmp_path / "run"),
            "centering_gain": "100",
            "eval_freq": 64,
            "eval_episodes": 2,
            "keep_best": True,
            "progress": False,
            "warm_start": {"policy": "smdp", "steps": 3000, "epochs": 20},
            **kw,
        }
    )


def _direct_score(run: Path) -> float:
    """The saved run's deterministic reward rate on the evaluation seeds, evaluated anew."""
    env = gym.make(ENV_ID, **SMALL_ENV)
    res = evaluate(load_policy(run), env, n_episodes=2, seed=100_000)
    return res.mean("reward_rate_per_s")


def test_keep_best_ends_with_the_best_evaluations_model(tmp_path):
    """The saved model is the best evaluation's (the clone here, evaluated at step 0),
    not the last one's: reloaded and evaluated anew it scores the kept record's figure
    (checked to fail when the restore is skipped: the wrecked last model scores lower)."""
    run = train(_args(tmp_path))
    history = json.loads((run / "evaluations.json").read_text())
    final = json.loads((run / "final_evaluation.json").read_text())
    kb = final["kept_best"]
    assert history[0]["timesteps"] == 0  # the clone was a candidate
    scores = [eval_score(r) for r in history]
    assert kb["evaluations"] == len(history)
    assert kb["score"] == max(scores) == eval_score(final)
    assert kb["timesteps"] == history[scores.index(max(scores))]["timesteps"]
    assert kb["timesteps"] < kb["final_timesteps"] and kb["final_score"] < kb["score"]
    assert _direct_score(run) == pytest.approx(kb["score"], rel=1e-9)
    from stable_baselines3 import PPO

    assert PPO.load(run / "model.zip").num_timesteps == kb["timesteps"]
    # the last model is still there to resume from
    newest = max((run / "checkpoints").glob("*.zip"), key=lambda p: p.stat().st_mtime)
    assert PPO.load(newest).num_timesteps == kb["final_timesteps"]


def test_keep_best_survives_a_resume(tmp_path):
    """A resumed run reads the kept best back: the final choice is over both parts."""
    first = json.loads((train(_args(tmp_path)) / "final_evaluation.json").read_text())
    run = train(_args(tmp_path, n_timesteps=384, resume=True))
    again = json.loads((run / "final_evaluation.json").read_text())["kept_best"]
    assert again["score"] >= first["kept_best"]["score"]
    assert again["final_timesteps"] >= 384
    assert _direct_score(run) == pytest.approx(again["score"], rel=1e-9)


def test_without_keep_best_the_last_model_stays(tmp_path):
    run = train(_args(tmp_path, keep_best=None))
    final = json.loads((run / "final_evaluation.json").read_text())
    assert "kept_best" not in final and not (run / "best").exists()
    assert _direct_score(run) == pytest.approx(eval_score(final), rel=1e-9)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"eval_freq": 0}, "keep_best=True needs periodic evaluations"),
        ({"keep_best": "yes"}, "keep_best='yes' is invalid: expected True or False"),
    ],
)
def test_refused_keep_best_writes_nothing(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        train(_args(tmp_path, **kw))
    assert not (tmp_path / "run").exists()


def test_a_model_that_does_not_finish_its_episodes_is_cut_not_fatal(tmp_path, monkeypatch):
    """Evaluation episodes are cut at EVAL_STEPS_FACTOR x the reference baseline's longest
    one: with the bound made shorter than any episode, every evaluation is recorded as
    unfinished (the stochastic mode skipped), none is kept as the best, the run still
    ends, and its final evaluation says where it was cut, which marks it diverged."""
    import baselines
    from agents import callbacks
    from experiments.agents_tasks import diverged

    monkeypatch.setattr(callbacks, "EVAL_STEPS_FACTOR", 0.5)
    monkeypatch.setattr(callbacks, "EVAL_MIN_STEPS", 1)
    env = gym.make(ENV_ID, **SMALL_ENV)
    ref = evaluate(baselines.make("greedy", env=env), env, n_episodes=2, seed=100_000)
    bound = int(0.5 * max(ep["steps"] for ep in ref.episodes))
    run = train(_args(tmp_path))
    history = json.loads((run / "evaluations.json").read_text())
    assert len(history) >= 3
    for r in history:
        cut = r["deterministic"]["unfinished"]
        assert cut["max_steps"] == bound and cut["steps"] == bound and cut["seed"] == 100_000
        # what the cut episode did: simulated time, its reward rate over it, the requests
        part = cut["partial"]
        assert part["elapsed_s"] > 0 and math.isfinite(part["reward_rate_per_s"])
        assert part["arrived"] == (
            part["completed"]
            + part["waiting"]
            + part["in_service"]
            + part["dropped"]
            + part["rejected"]
        )
        assert eval_score(r) == float("-inf")
    # periodic evaluations skip the stochastic policy (training goes on); the final one
    # evaluates it too, so that the run ends with its figures (issue 48, item 1)
    assert all(r["stochastic"] == {"unfinished": {"skipped": True}} for r in history[:-1])
    assert history[-1]["stochastic"]["unfinished"]["seed"] == 100_000
    assert not (run / "best").exists()
    final = json.loads((run / "final_evaluation.json").read_text())
    assert "reference" not in final and final["deterministic"]["unfinished"]["max_steps"] == bound
    gone = diverged(run)
    assert gone is not None and gone["unfinished"]["seed"] == 100_000


def test_train_prints_figures_when_the_deterministic_policy_starves(tmp_path, capsys, monkeypatch):
    """``batch-env train``'s last lines when the deterministic policy's episode was cut:
    how far it got, its cost rate over that time and the queue it left; the stochastic
    policy's figures; the comparison with greedy and the normalized score, named as the
    stochastic policy's and as TensorBoard's eval/normalized_score (issue 48, item 1)."""
    from experiments.train import _print_final_evaluation

    monkeypatch.setattr("experiments.train._read_algo", lambda run: "ppo")
    ev = {
        "deterministic": {
            "unfinished": {
                "seed": 100000,
                "steps": 251700,
                "max_steps": 251700,
                "partial": {
                    "elapsed_s": 2806.0,
                    "reward_rate_per_s": -758.0,
                    "arrived": 5560,
                    "completed": 3653,
                    "waiting": 1462,
                    "in_service": 2,
                },
            }
        },
        "stochastic": {"reward_rate_per_s": [-3.376, 0.37]},
        "reference": {
            "policy": "greedy",
            "agent_mode": "stochastic",
            "reward_rate_per_s": [-3.557, 0.3],
            "difference": [0.18, 0.37],
            "normalized_score": 0.479,
            "normalized_score_ci95": 0.99,
            "task": "batch_env/LLMTwoClasses-v0",
        },
    }
    _print_final_evaluation(ev, tmp_path)
    out = capsys.readouterr().out
    assert (
        "In 2806 simulated seconds it completed 3653 of 5560 requests and left 1462 waiting" in out
    )
    assert "its reward rate over that time: -758 per second" in out
    assert (
        "stochastic evaluation (the policy sampling its actions, as in training): reward rate -3.376"
        in out
    )
    assert (
        "greedy on the same held-out episodes: -3.557 per second; the agent's stochastic policy is"
        in out
    )
    assert "normalized score on batch_env/LLMTwoClasses-v0 ≈ 0.479" in out
    assert "eval/normalized_score" in out and "no reward rate" not in out


def test_llm_evaluations_are_bounded_and_cut_episodes_say_what_they_did():
    """The evaluation bound holds on the LLM envs too (they are ``ServingEnv``s over an
    ``LLMServer``, not ``ServingCore``s: the bound and a cut episode's request counts had
    been left out for them since the LLM server became an object of its own)."""
    import baselines
    from agents.callbacks import MAX_EPISODE_STEPS, PeriodicEvaluation
    from agents.wrappers import reference_baseline
    from batch_env import EpisodeCut

    kw = {"horizon_requests": 50}
    cb = PeriodicEvaluation(
        "batch_env/LLMBatching-v1", kw, [], 1000, 2, 100_000, Path("/nonexistent-run")
    )
    env = gym.make("batch_env/LLMBatching-v1", **kw)
    ref = evaluate(baselines.make(reference_baseline(env), env=env), env, 2, seed=100_000)
    steps = max(int(ep["steps"]) for ep in ref.episodes)
    assert cb.step_bound() == max(100 * steps, 10_000) < MAX_EPISODE_STEPS
    with pytest.raises(EpisodeCut) as cut:
        evaluate(baselines.make("static-cap", env=env, cap=1), env, 1, seed=0, max_steps=5)
    part = cut.value.partial
    assert part["arrived"] == sum(
        part[k] for k in ("completed", "waiting", "in_service", "dropped", "rejected")
    )
