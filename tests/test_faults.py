"""Faults: kill ``compare``, ``train`` and ``train --sweep`` mid-run, damage the last file
they wrote, rerun, and get what an uninterrupted run gives.

Each scenario starts the real command in a subprocess with a tiny config, SIGKILLs it as
soon as its k-th output file (cell, checkpoint, finished trial) appears, damages the
newest such file (truncated, ``{}``, garbage bytes), then reruns the command in-process:
the same command for ``compare`` and the sweep, ``train --resume`` for a training run.

What is promised, and checked:

* ``compare``: the rerun names the damaged cell on stderr, moves it aside and recomputes
  it; its records, ``summary.md`` and ``summary.csv`` equal an uninterrupted run's
  (cells are deterministic functions of their seeds).
* ``train --resume``: the rerun names the damaged checkpoint file, moves it aside,
  continues from the previous checkpoint, and completes to the same total number of
  steps with the same ``config.yaml`` as an uninterrupted run (the README promises that
  --resume continues a run from its latest checkpoint, not identical weights: PPO's
  rollouts restart at a resume).
* the sweep: a trial whose files are damaged is moved aside and trained again from
  scratch, so every trial's score equals an uninterrupted sweep's.

:data:`FAULTS` counts the faults injected (each kill and each damaged file).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import TINY_ENV, TINY_PPO

from experiments.cli import main

pytestmark = pytest.mark.slow  # runs killed mid-way in subprocesses, then rerun
ROOT = Path(__file__).resolve().parents[1]
COMPARE = {
    "name": "faults",
    "env": {
        "profile": "resnet50-v100",
        "decision_interval_ms": 0.5,
        "horizon_requests": 8000,
        "reward_weights": {"sla": 0.0},
    },
    "workloads": {"poisson": {"kind": "poisson"}},
    "loads": [0.3, 0.6, 0.9],
    "seeds": 2,
    "reference": "greedy",
    "policies": {
        "greedy": {},
        "static-8": {"name": "static", "batch_size": 8, "timeout_ms": 5},
        "tf": {"name": "tfserving", "batch_timeout_ms": 1.0},
    },
}
TRAIN = [
    "--hyperparams",
    "tiny.yml",
    "--n-timesteps",
    "1024",
    "--checkpoint-freq",
    "256",
    "--eval-freq",
    "0",
    "--centering-gain",
    "100",
    "--env-kwargs",
    json.dumps(TINY_ENV),
    "--no-progress",
]
SWEEP = {
    "name": "fsweep",
    "algo": "ppo",
    "env": TINY_ENV,
    "n_timesteps": 256,
    "seeds": 2,
    "eval_episodes": 1,
    "hyperparams": "tiny.yml",
    "centering_gain": 100,
}


def damage_truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def damage_empty_object(path: Path) -> None:
    path.write_text("{}")


def damage_garbage(path: Path) -> None:
    path.write_bytes(b"\x00\xff\x13 garbage \x80")


#: (name, command, what to wait for, kill after the k-th such file, damage of the newest one)
SCENARIOS = [
    (
        "compare-2",
        ["compare", "--config", "cmp.yaml", "--results-dir", "res"],
        "res/faults/cells/*.json",
        2,
        damage_truncate,
    ),
    (
        "compare-5",
        ["compare", "--config", "cmp.yaml", "--results-dir", "res"],
        "res/faults/cells/*.json",
        5,
        damage_empty_object,
    ),
    # the newest checkpoint's model file; its statistics file
    (
        "train-2",
        ["train", *TRAIN, "--run-dir", "run"],
        "run/checkpoints/model_*_steps.zip",
        2,
        damage_truncate,
    ),
    (
        "train-3",
        ["train", *TRAIN, "--run-dir", "run"],
        "run/checkpoints/model_*_steps.zip",
        3,
        damage_garbage,
    ),
    # the first finished trial's final_evaluation.json
    (
        "sweep-1",
        ["train", "--sweep", "sweep.yaml", "--runs-dir", "runs"],
        "runs/sweeps/fsweep/trials/*/final_evaluation.json",
        1,
        damage_empty_object,
    ),
]
#: faults injected: a kill and a damaged file per scenario
FAULTS = 2 * len(SCENARIOS)


def inputs(folder: Path) -> Path:
    """The tiny configs, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.yml").write_text(yaml.safe_dump(TINY_PPO))
    (folder / "cmp.yaml").write_text(yaml.safe_dump(COMPARE))
    (folder / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    return folder


def kill_at(argv: list[str], cwd: Path, pattern: str, k: int, timeout_s: float = 300) -> None:
    """Start ``batch-env <argv>`` and SIGKILL it once ``k`` files match ``pattern`` under ``cwd``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.cli", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout_s
    try:
        while len(written(cwd, pattern)) < k:
            if proc.poll() is not None:
                raise AssertionError(
                    f"batch-env {' '.join(argv)} ended ({proc.returncode}) before {k} x {pattern}: "
                    f"{proc.stderr.read().decode()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {k} x {pattern} after {timeout_s} s")
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, "the command finished before it was killed"


#: the uninterrupted runs: output file -> command
REFERENCE = {
    "compare.json": ["compare", "--config", "cmp.yaml", "--results-dir", "res", "--json"],
    "train.txt": ["train", *TRAIN, "--run-dir", "run"],
    "sweep.json": ["train", "--sweep", "sweep.yaml", "--runs-dir", "runs", "--json"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict[str, tuple[Path, Path]], Path]:
    """Every scenario's command killed at its point and its newest file damaged, and the
    uninterrupted runs: ``({name: (its working folder, the damaged file)}, the folder of
    the uninterrupted runs)``. The killed commands run at once, in parallel processes,
    while the uninterrupted ones run here."""
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path_factory.mktemp("faults")
    folders = {name: inputs(root / name) for name, *_ in SCENARIOS}
    reference = inputs(root / "reference")
    with ThreadPoolExecutor(len(SCENARIOS)) as pool:
        futures = [
            pool.submit(kill_at, argv, folders[name], pattern, k)
            for name, argv, pattern, k, _ in SCENARIOS
        ]
        cwd = Path.cwd()
        os.chdir(reference)
        try:
            for out, argv in REFERENCE.items():
                with open(reference / out, "w") as f, contextlib.redirect_stdout(f):
                    assert main(argv) == 0
        finally:
            os.chdir(cwd)
        for f in futures:
            f.result()
    killed = {}
    for name, _, pattern, _, damage in SCENARIOS:
        victim = newest(folders[name], pattern)
        if (
            name.startswith("train") and damage is not damage_truncate
        ):  # the statistics of that checkpoint
            victim = victim.with_name(
                victim.name.replace("model_", "model_vecnormalize_").replace(".zip", ".pkl")
            )
        damage(victim)
        killed[name] = (folders[name], victim)
    return killed, reference


def written(cwd: Path, pattern: str) -> list[Path]:
    """The files matching ``pattern``, without temporary files of an atomic write (a
    kill between the write and the rename leaves one, which nothing reads back)."""
    return [p for p in cwd.glob(pattern) if ".tmp" not in p.name]


def newest(cwd: Path, pattern: str) -> Path:
    return max(written(cwd, pattern), key=lambda p: (p.stat().st_mtime_ns, p.name))


def rerun(argv: list[str], capsys) -> tuple[str, str]:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr()


def outputs(folder: Path) -> tuple[str, list[dict[str, str]]]:
    return (folder / "summary.md").read_text(), list(csv.DictReader(open(folder / "summary.csv")))


@pytest.mark.parametrize("name", [s[0] for s in SCENARIOS if s[0].startswith("compare")])
def test_killed_compare_with_a_damaged_cell_reruns_to_the_same_results(
    runs, monkeypatch, capsys, name
):
    (folder, victim), reference = runs[0][name], runs[1]
    monkeypatch.chdir(folder)
    out, err = rerun(["compare", "--config", "cmp.yaml", "--results-dir", "res", "--json"], capsys)
    assert f"warning: {victim.relative_to(folder)} is damaged" in err
    assert (victim.parent / f"{victim.name}.corrupt").exists()
    result = json.loads(out)
    ref = json.loads((reference / "compare.json").read_text())
    assert ref["computed"] == 9 and 1 <= result["computed"] < 9
    assert result["records"] == ref["records"]
    assert outputs(folder / "res/faults") == outputs(reference / "res/faults")


@pytest.mark.parametrize("name", [s[0] for s in SCENARIOS if s[0].startswith("train")])
def test_killed_training_with_a_damaged_checkpoint_resumes_to_the_same_run(
    runs, monkeypatch, capsys, name
):
    from stable_baselines3 import PPO

    (folder, victim), reference = runs[0][name], runs[1]
    monkeypatch.chdir(folder)
    _, err = rerun(["train", "--resume", "--run-dir", "run", "--no-progress"], capsys)
    assert f"warning: {victim.relative_to(folder)} is damaged" in err
    assert (victim.parent / f"{victim.name}.corrupt").exists()
    assert (
        PPO.load(folder / "run/model.zip").num_timesteps
        == PPO.load(reference / "run/model.zip").num_timesteps
    )
    assert yaml.safe_load((folder / "run/config.yaml").read_text()) == yaml.safe_load(
        (reference / "run/config.yaml").read_text()
    )
    ckpts = sorted(
        int(p.name.split("_")[1]) for p in (folder / "run/checkpoints").glob("model_*_steps.zip")
    )
    assert ckpts == [256, 512, 768, 1024]


def test_killed_sweep_with_a_damaged_trial_reruns_to_the_same_scores(runs, monkeypatch, capsys):
    def scores(out: str) -> dict[str, float]:
        return {t["trial"]: t["eval_reward_rate_per_s"] for t in json.loads(out)["trials"]}

    (folder, victim), reference = runs[0]["sweep-1"], runs[1]
    monkeypatch.chdir(folder)
    out, err = rerun(["train", "--sweep", "sweep.yaml", "--runs-dir", "runs", "--json"], capsys)
    assert f"warning: {victim.parent.resolve()} is damaged" in err
    assert victim.parent.with_name(f"{victim.parent.name}.corrupt").is_dir()
    assert json.loads(out)["n_failed"] == 0
    ref = (reference / "sweep.json").read_text()
    assert scores(out) == scores(ref) and len(scores(out)) == 2
