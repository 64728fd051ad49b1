"""The wheel is self-contained: built from the checkout, installed into a fresh virtual
env outside it (its dependencies borrowed from this interpreter's site-packages through a
``.pth`` path, so nothing is downloaded), ``batch-env train`` and ``batch-env evaluate``
work from a folder where the checkout is not importable: the hyperparameter files ship
as package data, and rl-zoo3 reads them as ``agents.hyperparams.<algo>``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds the wheel and installs it into a fresh venv

ROOT = Path(__file__).resolve().parents[1]


def sh(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_wheel_installs_and_trains_outside_the_checkout(tmp_path):
    src = tmp_path / "src"  # build from a copy: the build writes build/ and *.egg-info
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "runs",
            "results",
            "build",
            "*.egg-info",
            "__pycache__",
            ".pytest_cache",
            ".hypothesis",
        ),
    )
    sh(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            ".",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
        ],
        src,
    )
    (wheel,) = (tmp_path / "dist").glob("batch_env-*.whl")
    venv = tmp_path / "venv"
    sh([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    py = venv / "bin" / "python"
    purelib = Path(
        sh(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
        ).strip()
    )
    (purelib / "zz_deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )  # after the venv's own packages
    sh(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        tmp_path,
    )

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = sh(
        [
            str(py),
            "-c",
            "import agents, batch_env, experiments; "
            "from agents.common import HYPERPARAMS_DIR; "
            "print(batch_env.__file__, agents.__file__, experiments.__file__, HYPERPARAMS_DIR)",
        ],
        work,
        env,
    )
    assert all(p.startswith(str(venv)) for p in where.split()), where
    ymls = sorted(p.name for p in (purelib / "agents" / "hyperparams").glob("*.yml"))
    # the wheel ships every hyperparameter file of the checkout, no more, no fewer, byte
    # for byte (so every id's entries resolve from the wheel as tests/test_train_registry.py
    # sees them in the checkout)
    shipped = sorted(p.name for p in (ROOT / "agents" / "hyperparams").glob("*.yml"))
    assert "ppo.yml" in shipped and ymls == shipped
    for name in shipped:
        wheel_yml = (purelib / "agents" / "hyperparams" / name).read_bytes()
        assert wheel_yml == (ROOT / "agents" / "hyperparams" / name).read_bytes(), name
    sh(
        [
            str(py),
            "-c",
            "import agents.hyperparams.ppo as m; assert 'batch_env/DynamicBatching-v0' in m.hyperparams",
        ],
        work,
        env,
    )

    cli = str(venv / "bin" / "batch-env")
    sh(
        [
            cli,
            "train",
            "--n-timesteps",
            "2048",
            "--run-dir",
            "run",
            "--env-kwargs",
            "{horizon_requests: 100}",
            "--eval-freq",
            "0",
            "--no-progress",
        ],
        work,
        env,
    )
    assert (work / "run" / "model.zip").exists()
    out = sh([cli, "evaluate", "--policy", "ppo:run", "greedy", "--episodes", "1"], work, env)
    assert "ppo:run" in out and "greedy" in out
    # one registered id of each env class trains with the shipped defaults from the wheel
    # (a few hundred steps and short episodes; the files are the checkout's, byte for
    # byte, and tests/test_train_registry.py trains every id with every algorithm there),
    # and a shipped hyperparameter file is found by its name
    script = (
        "import gymnasium as gym, batch_env\n"
        "from agents.train import TrainArgs, train\n"
        f"ids = {_one_id_per_class()!r}\n"
        "for i in ids:\n"
        "    train(TrainArgs(env_id=i, env_kwargs={'horizon_requests': 10, 'warmup_requests': 0},"
        " n_timesteps=200, num_envs=1, eval_episodes=1, run_dir='r-' + i.split('/')[1],"
        " progress=False))\n"
        "print(len(ids))\n"
    )
    assert int(sh([str(py), "-c", script], work, env).split()[-1]) >= 4
    ids = _one_id_per_class()
    assert all((work / f"r-{i.split('/')[1]}" / "final_evaluation.json").exists() for i in ids)
    sh(
        [
            cli,
            "train",
            "--env-id",
            "batch_env/NodeBatching-v0",
            "--hyperparams",
            "ppo-node-fraction",
            "--n-timesteps",
            "64",
            "--env-kwargs",
            "{horizon_requests: 20}",
            "--eval-freq",
            "0",
            "--run-dir",
            "named",
            "--no-progress",
        ],
        work,
        env,
    )
    assert "ppo-node-fraction.yml" in (work / "named" / "config.yaml").read_text()
    _readme_llm_path(cli, work, env)


def _readme_llm_path(cli: str, work: Path, env: dict[str, str]) -> None:
    """The README's LLM path from the wheel, shortened (issue 48's must-hold): ``train``
    ends with a held-out score whatever the short run's agent does, TensorBoard holds the
    same figure as ``eval/normalized_score``, ``benchmark`` scores the run on the task's
    seeds and ``record`` writes the agent's frames."""
    import re

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    task = "batch_env/LLMBurstyLongPrompts-v0"
    out = sh(
        [
            cli,
            "train",
            "--env-id",
            task,
            "--n-timesteps",
            "1024",
            "--env-kwargs",
            "{horizon_requests: 30, warmup_requests: 0}",
            "--eval-episodes",
            "2",
            "--run-dir",
            "bursty",
            "--no-progress",
        ],
        work,
        env,
    )
    assert "evaluation" in out and "greedy on the same held-out episodes" in out
    m = re.search(rf"normalized score on {re.escape(task)} ≈ (-?[0-9.e+-]+) ± ", out)
    assert m is not None, out
    (tb,) = (work / "bursty" / "tb").iterdir()
    acc = EventAccumulator(str(tb))
    acc.Reload()
    assert "rollout/ep_reward_rate_per_s" in acc.Tags()["scalars"]
    (last,) = acc.Scalars("eval/normalized_score")[-1:]
    assert last.value == pytest.approx(float(m.group(1)), rel=6e-3, abs=1e-9)  # printed .3g
    table = sh(
        [cli, "benchmark", "--policy", "ppo:bursty", "--tasks", task, "--horizon-requests", "30"],
        work,
        env,
    )
    row = next(line for line in table.splitlines() if line.startswith(f"| {task} | ppo:bursty |"))
    score = row.split("|")[4].strip()
    assert re.fullmatch(r"-?[0-9.]+( \+- [0-9.]+)?", score), row
    assert "50 x 30 requests" in row
    rec = sh([cli, "record", "bursty", "--out", "bursty.mp4", "--max-frames", "5"], work, env)
    assert f"of ppo:bursty on {task}" in rec
    assert (work / "bursty.mp4").exists() or any((work / "bursty.mp4").glob("episode-1/*.png"))


def _one_id_per_class() -> list[str]:
    """The first registered id (sorted) of each entry point: every env class once."""
    import gymnasium as gym

    import batch_env  # noqa: F401

    first: dict[str, str] = {}
    for i in sorted(i for i in gym.registry if i.startswith("batch_env/")):
        first.setdefault(str(gym.registry[i].entry_point), i)
    return sorted(first.values())
