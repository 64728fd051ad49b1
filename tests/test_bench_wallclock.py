"""``batch-env bench --wallclock``: time to a good agent, reached or not, against CartPole."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

from batch_env import evaluate
from experiments.bench.wallclock import _median_or_none, bench_wallclock, format_wallclock

#: tiny runs: one rollout of the file's PPO (4 envs x 512 steps), evaluated every 1024
#: steps on one short episode
TINY = {
    "seeds": (0,),
    "budget_steps": 2048,
    "eval_freq": 1024,
    "eval_episodes": 1,
    "task_kwargs": {"horizon_requests": 300},
}


def _history(run_dir) -> list[dict]:
    return json.loads((run_dir / "evaluations.json").read_text())


def test_median_counts_a_miss_as_infinite():
    assert _median_or_none([30.0, 10.0, 20.0]) == 20.0
    assert _median_or_none([10.0, None, 30.0]) == 30.0  # one miss: the median is reached
    assert _median_or_none([10.0, None, None]) is None  # most missed: not reached
    assert _median_or_none([10.0, None]) is None


def test_evaluate_on_an_env_without_serving_summary():
    class Left:
        def reset(self):
            pass

        def act(self, obs, info):
            return 0

    res = evaluate(Left(), gym.make("CartPole-v1"), n_episodes=2, seed=5)
    assert res.seeds == [5, 6] and set(res.episodes[0]) == {"return", "steps", "seed"}
    assert res.mean("return") == res.mean("steps") > 0  # CartPole pays 1 per step
    # a foreign env must still end within the bound
    with pytest.raises(RuntimeError, match="ended after 3 steps"):
        evaluate(Left(), gym.make("CartPole-v1"), n_episodes=1, max_steps=3)


def test_unreachable_task_target_is_reported_not_reached(tmp_path):
    """The task's target below the optimum (cost <= 0.5 x the gain) cannot be met: the run
    trains its whole budget and says so; CartPole's target of 1 is met at once, and that
    run stops at its first evaluation."""
    wc = bench_wallclock(**TINY, gap_tolerance=-0.5, cartpole_target=1.0, run_root=tmp_path)
    task, cart = wc["task"], wc["cartpole"]
    assert task["env_id"] == "batch_env/LowLoadEnergy-v0" and cart["env_id"] == "CartPole-v1"
    assert wc["smdp_gain"] == pytest.approx(151.67, abs=0.01)
    (miss,) = task["seeds"]
    assert miss["reached"] is False and task["reached"] == 0 and task["runs"] == 1
    assert miss["steps"] is miss["seconds"] is miss["seconds_with_eval"] is None
    assert task["median_steps"] is task["median_seconds"] is None
    assert miss["steps_trained"] == 2048  # the whole budget
    hist = _history(tmp_path / "task-s0")
    # evaluations at 1024 and 2048 steps, then the final one
    assert [r["timesteps"] for r in hist] == [1024, 2048, 2048] and miss["evaluations"] == 3
    gaps = [r["deterministic"]["gap_percent"] for r in hist]
    assert miss["best_figure"] == pytest.approx(min(gaps)) and miss["best_figure"] > -50
    (hit,) = cart["seeds"]
    assert hit["reached"] is True and cart["reached"] == 1
    assert hit["steps"] == 1024 and cart["median_steps"] == 1024
    assert 0 < hit["seconds"] <= hit["seconds_with_eval"] <= hit["run_s"]
    assert cart["median_seconds"] == hit["seconds"]
    chist = _history(tmp_path / "cartpole-s0")
    assert len(chist) == 1 and chist[0]["timesteps"] == 1024  # stopped; no second evaluation
    assert hit["figure_at_target"] == chist[0]["deterministic"]["return"][0] >= 1.0
    assert hit["seconds"] == chist[0]["train_s"] < chist[0]["wall_s"] + chist[0]["eval_s"]
    assert wc["ratio_steps_vs_cartpole"] is None and wc["ratio_seconds_vs_cartpole"] is None
    # the same PPO settings for both
    assert wc["settings"]["n_envs"] == 4 and wc["settings"]["n_steps"] == 512
    assert wc["settings"]["budget_steps"] == 2048 and wc["settings"]["eval_freq"] == 1024
    text = format_wallclock(wc)
    assert "seed 0: not reached in 2,048 steps" in text and "seed 0: 1,024 steps" in text
    assert json.loads(json.dumps(wc)) == wc  # plain JSON


def test_reachable_task_target_stops_early_and_cartpole_miss_is_kept(tmp_path):
    """A target any policy meets (cost <= 11 x the gain) is met at the first evaluation;
    CartPole's return cannot exceed 500, so a target of 501 is not reached."""
    wc = bench_wallclock(**TINY, gap_tolerance=10.0, cartpole_target=501.0, run_root=tmp_path)
    (hit,) = wc["task"]["seeds"]
    assert hit["reached"] is True and hit["steps"] == 1024 and hit["steps_trained"] == 1024
    assert math.isfinite(hit["figure_at_target"]) and hit["figure_at_target"] <= 1000.0
    (miss,) = wc["cartpole"]["seeds"]
    assert miss["reached"] is False and miss["steps"] is None and miss["steps_trained"] == 2048
    assert 0 < miss["best_figure"] <= 500.0
    assert wc["cartpole"]["median_steps"] is None and wc["ratio_steps_vs_cartpole"] is None


def test_stop_when_needs_evaluations_and_writes_nothing(tmp_path):
    from agents.train import TrainArgs, train

    args = TrainArgs(
        env_id="batch_env/LowLoadEnergy-v0", run_dir=str(tmp_path / "run"), eval_freq=0
    )
    with pytest.raises(ValueError, match="stop_when needs periodic evaluations"):
        train(args, stop_when=lambda record: True)
    assert not (tmp_path / "run").exists()


def test_llm_task_target_is_a_score_paired_on_the_evaluation_episodes(tmp_path):
    """On a task without an exact bound (an LLM task) the target is a normalized score:
    greedy and the best realizable reference play the evaluation episodes first, with
    the policies their stored references name, and each evaluation's score is the
    agent's rate placed between theirs on those very episodes."""
    import baselines
    from batch_env import tasks
    from experiments.bench.wallclock import score_span_on_episodes

    tid = "batch_env/LLMBurstyLongPrompts-v0"
    kw = {"horizon_requests": 300, "warmup_requests": 20}
    wc = bench_wallclock(
        **{**TINY, "task_kwargs": kw}, task=tid, score_target=1.0, run_root=tmp_path
    )
    span = wc["score_span"]
    ref = tasks.references()[tid]
    assert span["best"]["label"] == ref["best_policy"] == "budget-best"
    assert span["best"]["params"] == ref["policies"]["budget-best"]["params"]
    env = gym.make(tid, **kw)  # the run's env kwargs: the shipped entry's, then these
    direct = evaluate(
        baselines.make("static-budget", env, **span["greedy"]["params"]),
        env,
        n_episodes=1,
        seed=100_000,
    ).mean("reward_rate_per_s")
    assert span["greedy"]["reward_rate_per_s"] == pytest.approx(direct, rel=1e-12)
    low, top = span["greedy"]["reward_rate_per_s"], span["best"]["reward_rate_per_s"]
    assert top > low
    (run,) = wc["task"]["seeds"]
    hist = _history(tmp_path / "task-s0")
    scores = [(r["deterministic"]["reward_rate_per_s"][0] - low) / (top - low) for r in hist]
    assert run["best_figure"] == pytest.approx(max(scores))
    assert run["reached"] == any(s >= 1.0 for s in scores)
    assert "normalized score >= 1" in wc["task"]["target"] and wc["smdp_gain"] is None
    assert json.loads(json.dumps(wc)) == wc
    # a task with neither an exact bound nor a defined score, and a bad target, are named
    with pytest.raises(ValueError, match="no defined normalized score"):
        score_span_on_episodes("batch_env/LLMMemoryPressure-v0", {}, 1, 0)
    with pytest.raises(ValueError, match="score_target=1.5 is invalid"):
        bench_wallclock(**{**TINY, "task_kwargs": kw}, task=tid, score_target=1.5)


def test_bench_cli_names_a_bad_wallclock_task_or_score(tmp_path, capsys):
    from experiments.cli import main

    out = ["--out", str(tmp_path)]
    assert main(["bench", "--wallclock-only", "--wallclock-task", "nope", *out]) == 2
    assert "--wallclock-task='nope' is not a benchmark task" in capsys.readouterr().err
    assert main(["bench", "--wallclock-only", "--wallclock-score", "0", *out]) == 2
    assert "--wallclock-score=0.0 is invalid" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written
