"""The ``batch-env`` command and the package's import hygiene."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from experiments.bench import run_bench, write_results
from experiments.cli import build_parser, main

SUBCOMMANDS = ["demo", "compare", "evaluate", "solve-smdp", "bench"]


@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_every_subcommand_has_help(cmd, capsys):
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"batch-env {cmd}" in out
    assert "--json" in out


def test_top_level_help_lists_subcommands():
    text = build_parser().format_help()
    for cmd in SUBCOMMANDS:
        assert cmd in text


@pytest.mark.slow
def test_demo_prints_the_comparison(capsys, tmp_path):
    assert main(["demo", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for policy in ("greedy", "static-8", "timeout", "tfserving", "aimd", "smdp"):
        assert f"| {policy} |" in out
    assert (tmp_path / "demo" / "summary.csv").exists()


def test_solve_smdp_json(capsys):
    assert (
        main(["solve-smdp", "--rate-per-s", "3000", "--reward-weights", "{sla: 0}", "--json"]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["threshold"] == 8 and data["n_states"] == 2001 and not data["truncated"]
    assert data["policy"][:9] == [0] * 8 + [8]
    assert data["gain_cost_per_s"] > 0


def test_evaluate_json(capsys):
    assert (
        main(
            ["evaluate", "--episodes", "2", "--horizon-requests", "200", "--load", "0.3", "--json"]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data[0]["policy"] == "greedy"
    assert data[0]["seeds"] == [0, 1]
    assert data[0]["summary"]["completed"]["mean"] == 200


def test_evaluate_llm_env_json(capsys):
    args = [
        "evaluate",
        "--env-id",
        "batch_env/LLMBatching-v0",
        "--policy",
        "pang2025",
        "static-cap",
        "--episodes",
        "1",
        "--workload",
        "{kind: poisson, rate_per_s: 4}",
        "--env-kwargs",
        "{horizon_requests: 50, max_num_seqs: 64}",
        "--json",
    ]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["policy"] for d in data] == ["pang2025", "static-cap"]
    assert data[0]["summary"]["completed"]["mean"] == 50
    assert "ttft_p99_ms" in data[0]["summary"]


def test_cli_reports_bad_input_cleanly(capsys):
    assert main(["evaluate", "--episodes", "1", "--max-batch-size", "0"]) == 2
    assert "max_batch_size=0" in capsys.readouterr().err
    assert main(["evaluate", "--episodes", "1", "--profile", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["evaluate", "--episodes", "1", "--policy", "timeout"]) == 2
    assert "decision_interval_ms" in capsys.readouterr().err
    assert main(["compare", "--config", "no-such-config"]) == 2
    assert "no-such-config" in capsys.readouterr().err
    assert main(["evaluate", "--workload", "[1, 2]"]) == 2
    assert "--workload='[1, 2]' must be a mapping" in capsys.readouterr().err


def test_bench_reports_ratio(tmp_path):
    result = run_bench(
        n_steps=2000,
        repeats=1,
        smdp=False,
        ppo=False,
        vector_sizes=(1, 16),
        vector_env_steps=3200,
        torch_overhead=False,
        backends=False,
    )
    assert "compare_backends" not in result
    assert result["dynamic_batching_steps_per_s"] > 0 and result["cartpole_steps_per_s"] > 0
    rows = result["vector"]["sizes"]
    assert [r["num_envs"] for r in rows] == [1, 16]
    for r in rows:
        assert r["ratio_vs_cartpole"] == pytest.approx(
            r["env_steps_per_s"] / r["cartpole_vector_env_steps_per_s"]
        )
    assert result["vector"]["meets_floor_at_1024"] is None  # 1024 lanes were not measured
    # a ratio is the median of the rounds' (env and reference timed back to back)
    assert result["step_cost_ratio_vs_cartpole"] == pytest.approx(
        float(np.median(result["round_ratios"]))
    )
    orders = result["llm_orders"]  # each admission order against FCFS, a long queue waiting
    assert orders["waiting_at_start"] >= 400
    assert list(orders["orders"]) == ["fcfs", "edf", "shortest-prompt", "class-priority"]
    for r in orders["orders"].values():
        assert r["cost_ratio_vs_fcfs"] == pytest.approx(float(np.median(r["round_ratios"])))
    assert len(result["round_ratios"]) == 1
    cl = result["cluster"]  # 1, 2, 8 and 32 replicas behind round robin, 200 requests
    assert list(cl["sizes"]) == ["1", "2", "8", "32"] and cl["requests"] == 200
    for name in ("view", "blind"):  # a router that reads every replica, and one alone
        assert cl["sizes"]["1"][f"cost_ratio_vs_one_replica_{name}"] == 1.0
        for row in cl["sizes"].values():
            assert row[f"cpu_us_per_request_{name}"] > 0 and row["latency_mean_ms"] > 0
    llm = result["llm"]
    for env_id in ("batch_env/LLMBatching-v0", "batch_env/LLMBatching-v1"):
        assert llm[env_id]["step_cost_ratio_vs_cartpole"] == pytest.approx(
            llm["cartpole_steps_per_s"] / llm[env_id]["steps_per_s"]  # one round
        )
    v2 = result["llm_v2"]
    for row in v2["settings"].values():  # steps are counted, not timed: v2 asks far less
        assert row["steps_ratio"] >= 10, row
        assert row["cpu_ratio"] == pytest.approx(float(np.median(row["round_cpu_ratios"])))
    path = write_results(result, tmp_path)
    assert json.loads(path.read_text())["machine"]["cpu_count"] >= 1


def test_import_does_not_load_torch_or_training_stack():
    code = (
        "import sys, gymnasium as gym, batch_env; "
        "env = gym.make('batch_env/DynamicBatching-v0'); env.reset(seed=0); env.step(1); "
        "bad = [m for m in ('torch', 'stable_baselines3', 'baselines', 'agents', 'experiments') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_json_output_is_strict(capsys):
    assert main(["evaluate", "--episodes", "1", "--horizon-requests", "100", "--json"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text
    data = json.loads(text)
    assert data[0]["summary"]["completed"]["ci95"] is None  # one episode: no CI


def test_lognormal_from_the_cli(capsys):
    assert (
        main(
            [
                "evaluate",
                "--episodes",
                "1",
                "--horizon-requests",
                "100",
                "--service",
                "lognormal",
                "--service-cv",
                "0.3",
                "--queue-capacity",
                "50",
                "--warmup-requests",
                "10",
            ]
        )
        == 0
    )
    assert "greedy" in capsys.readouterr().out


def test_train_vectorized_writes_tensorboard_logs(capsys, tmp_path):
    import glob
    from pathlib import Path

    import yaml

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--vectorized" in capsys.readouterr().out
    run = tmp_path / "vec"
    assert (
        main(
            [
                "train",
                "--vectorized",
                "--num-envs",
                "2",
                "--n-timesteps",
                "1024",
                "--env-kwargs",
                "{horizon_requests: 100}",
                "--centering-gain",
                "online",
                "--eval-freq",
                "0",
                "--run-dir",
                str(run),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["run_dir"] == str(run)
    events = glob.glob(str(run / "tb" / "**" / "events.out.tfevents.*"), recursive=True)
    assert events and all(Path(f).stat().st_size > 0 for f in events)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(events[0])
    ea.Reload()
    assert {"rollout/ep_rew_mean", "serving/latency_p99_ms", "reward_components/energy"} <= set(
        ea.Tags()["scalars"]
    )
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["vectorized"] is True and cfg["n_envs"] == 2


def test_evaluate_keeps_an_agent_on_its_own_env(tmp_path, capsys):
    """An agent is evaluated on the env it was trained on (id and kwargs from its run)
    unless env options are given; then a note names every differing kwarg."""
    import yaml

    from agents.train import TrainArgs, train

    env_kwargs = {
        "profile": "resnet50-t4-trt",
        "sla_ms": 20.0,
        "horizon_requests": 40,
        "max_batch_size": 8,
    }
    hp = {
        "batch_env/DynamicBatching-v0": {
            "n_envs": 1,
            "n_timesteps": 64,
            "policy": "MlpPolicy",
            "normalize": False,
            "env_wrapper": ["batch_env.wrappers.BinaryAction", "agents.wrappers.CenteredReward"],
            "n_steps": 64,
            "batch_size": 64,
            "n_epochs": 1,
            "policy_kwargs": "dict(net_arch=[8])",
        }
    }
    (tmp_path / "hp.yml").write_text(yaml.safe_dump(hp))
    run = train(
        TrainArgs(
            env_kwargs=env_kwargs,
            hyperparams=str(tmp_path / "hp.yml"),
            run_dir=str(tmp_path / "run"),
            centering_gain="100",
            eval_freq=0,
            checkpoint_freq=64,
            progress=False,
        )
    )
    capsys.readouterr()
    assert main(["evaluate", "--policy", f"ppo:{run}", "greedy", "--episodes", "1", "--json"]) == 0
    out = capsys.readouterr()
    assert "note:" not in out.err
    records = json.loads(out.out)
    # both policies on the run's env: 40 summary requests per episode, not the default 2000
    assert [r["episodes"][0]["completed"] + r["episodes"][0]["dropped"] for r in records] == [
        40,
        40,
    ]
    # an env option changes the run's env, it does not replace it (issue 48, item 2)
    assert (
        main(["evaluate", "--policy", f"ppo:{run}", "--episodes", "1", "--horizon-requests", "30"])
        == 0
    )
    err = capsys.readouterr().err
    assert err.count("note:") == 1 and err.count("\n") == 1
    assert "horizon_requests (trained 40, here 30)" in err
    for key in ("profile", "sla_ms", "max_batch_size"):
        assert key not in err
    assert (
        main(
            ["evaluate", "--policy", f"ppo:{run}", "--episodes", "1", "--profile", "resnet50-v100"]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "profile (trained 'resnet50-t4-trt', here 'resnet50-v100')" in err
    assert "sla_ms" not in err and "max_batch_size" not in err
    # another env whose observation does not fit: refused before the first step
    assert (
        main(
            [
                "evaluate",
                "--policy",
                f"ppo:{run}",
                "--episodes",
                "1",
                "--env-id",
                "batch_env/LLMBatching-v2",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "does not fit the env: it observes shape (5,)" in err and "batch_env/LLMBatching-v2" in err
    )


def test_bench_rounds_interleave_and_the_ratio_is_the_rounds_median():
    """Each round times every env back to back, the order rotated, so a slow spell of a
    shared machine slows a round's env and reference alike."""
    from experiments.bench.common import median_ratio, rounds

    calls = []
    rates = {"a": iter([10.0, 1.0, 10.0]), "b": iter([5.0, 0.5, 2.0])}  # round 2: slow spell

    def timer(k):
        def f():
            calls.append(k)
            return next(rates[k])

        return f

    r = rounds({"a": timer("a"), "b": timer("b")}, 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert r == {"a": [10.0, 1.0, 10.0], "b": [5.0, 0.5, 2.0]}
    assert median_ratio(r["a"], r["b"]) == 2.0  # the rounds give 2, 2 and 5
