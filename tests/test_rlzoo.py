"""rl-zoo3 end to end on the shipped hyperparameters, as the README runs it: train (the
hyperparameters as the module ``agents.hyperparams.ppo``, so a pip install needs no
checkout), serving/ tags in its logs, enjoy's serving summary, record_video (through
``python -m agents.zoo``), the plot scripts, and ``batch-env evaluate`` on the run folder.
One tiny run (256 steps, 2 envs, 50-request episodes) serves every test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tensorboard_scalars

import batch_env  # noqa: F401

ENV_ID = "batch_env/DynamicBatching-v0"
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # rl-zoo3 training and its scripts in subprocesses
TINY = ["--hyperparams", "n_envs:2", "n_steps:64", "n_epochs:1", "batch_size:64"]


def run(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``python <args>`` in ``cwd`` with the checkout importable; fail with its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory) -> Path:
    """The folder of one tiny rl-zoo3 PPO run (logs/ and tb/ in it)."""
    work = tmp_path_factory.mktemp("zoo")
    run(
        [
            "-m",
            "rl_zoo3.train",
            "--algo",
            "ppo",
            "--gym-packages",
            "batch_env",
            "--env",
            ENV_ID,
            "--conf-file",
            "agents.hyperparams.ppo",
            "-n",
            "256",
            "--log-folder",
            "logs",
            "-tb",
            "tb",
            "--eval-freq",
            "64",
            "--eval-episodes",
            "1",
            "--env-kwargs",
            "horizon_requests:50",
            "--seed",
            "0",
            *TINY,
        ],
        work,
    )
    return work


def test_train_logs_the_serving_cost(zoo_run):
    folder = zoo_run / "logs/ppo/batch_env-DynamicBatching-v0_1"
    assert (folder / "batch_env-DynamicBatching-v0.zip").exists()
    scalars = tensorboard_scalars(zoo_run)  # zoo_run/tb/<env name>/PPO_1/
    rate = [v for _, v in scalars["serving/reward_rate_per_s"]]
    assert rate and all(-1e4 < v < 0 for v in rate)  # minus a cost per second, not a centred sum
    gains = [v for _, v in scalars["train/centering_gain"]]
    assert gains and all(
        v > 0 for v in gains
    )  # greedy's measured rate, the default, not an online 0


def test_enjoy_prints_the_serving_cost(zoo_run):
    proc = run(
        [
            "-m",
            "rl_zoo3.enjoy",
            "--algo",
            "ppo",
            "--gym-packages",
            "batch_env",
            "--env",
            ENV_ID,
            "-f",
            "logs",
            "-n",
            "200",
            "--no-render",
        ],
        zoo_run,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("serving")]
    assert any("episode 1: reward rate -" in line and "p99" in line for line in lines), proc.stdout[
        -2000:
    ]
    assert "mean reward rate -" in lines[-1]


def test_plot_scripts(zoo_run):
    run(["-m", "rl_zoo3.plots.plot_train", "--algo", "ppo", "--env", ENV_ID, "-f", "logs"], zoo_run)
    run(
        [
            "-m",
            "rl_zoo3.plots.all_plots",
            "--algos",
            "ppo",
            "--env",
            ENV_ID,
            "-f",
            "logs",
            "-o",
            "all",
            "--no-display",
        ],
        zoo_run,
    )
    assert (zoo_run / "all.pkl").exists()


def test_record_video_through_agents_zoo(zoo_run):
    # record_video has no --gym-packages: rl_zoo3.record_video alone cannot find the id
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_zoo3.record_video",
            "--algo",
            "ppo",
            "--env",
            ENV_ID,
            "-f",
            "logs",
            "-n",
            "20",
        ],
        cwd=zoo_run,
        env=env,
        capture_output=True,
        text=True,
    )
    assert plain.returncode != 0 and "batch_env/DynamicBatching-v0" in plain.stderr
    run(
        [
            "-m",
            "agents.zoo",
            "record_video",
            "--algo",
            "ppo",
            "--env",
            ENV_ID,
            "-f",
            "logs",
            "-n",
            "20",
            "-o",
            "videos",
        ],
        zoo_run,
    )
    assert list((zoo_run / "videos").glob("*.mp4"))


def test_agents_zoo_refuses_an_unknown_script(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "agents.zoo", "no_such_script"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: script='no_such_script'")


def test_evaluate_loads_the_rl_zoo3_run_on_its_own_env(zoo_run, capsys):
    from experiments.cli import main

    folder = zoo_run / "logs/ppo/batch_env-DynamicBatching-v0_1"
    assert (
        main(["evaluate", "--policy", f"ppo:{folder}", "greedy", "--episodes", "1", "--json"]) == 0
    )
    out = capsys.readouterr()
    assert "note:" not in out.err  # the run's own env: horizon_requests 50 from its args.yml
    import json

    records = json.loads(out.out)
    assert [r["policy"] for r in records] == [f"ppo:{folder}", "greedy"]
    assert len(records[0]["episodes"]) == 1
    assert (
        main(
            [
                "evaluate",
                "--policy",
                f"ppo:{folder}",
                "--episodes",
                "1",
                "--load",
                "0.3",
                "--horizon-requests",
                "50",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "note:" in err and "workload (trained" in err and "horizon_requests" not in err
