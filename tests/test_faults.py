"""Faults: kill ``compare``, ``train``, ``train --sweep``, ``llm``, ``agents`` and the
benchmark's reference runs mid-run, damage the last record they wrote, rerun, and get
what an uninterrupted run gives.

Each scenario starts the real command in a subprocess with a tiny config, SIGKILLs it as
soon as its k-th output file (cell, checkpoint, finished trial, evaluation) appears, or
its episode log holds k lines, damages the newest such file (truncated, ``{}``, garbage
bytes; a log's last line cut mid-way, as a kill in the middle of a write would leave it),
then reruns it: in-process, the same command for ``compare``, the sweep and ``llm``,
``train --resume`` for a training run, and ``resume=True`` for the reference runs; in a
subprocess, the same command for ``agents`` (its warnings come from worker processes).
The killed command's whole process group is killed (its workers too).

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
* ``llm``: the rerun names the damaged evaluation file (``cells/<key>.json``), moves it
  aside and recomputes it, reads the evaluations the killed run finished (their files
  are left as they are), and its ``results.json`` (without the timings) and
  ``summary.md`` (without its run time) equal an uninterrupted run's.
* the benchmark's reference runs (``compute_references(..., cache_dir=...,
  resume=True)``, on a short protocol): the resumed run names the episode log's damaged
  line, copies it to ``<log>.corrupt`` (the log is append-only: the line stays where it
  is), reads the episodes before it (each seed has one whole line in the log
  afterwards), reruns the others, and its per-seed figures equal an uninterrupted run's.
* ``agents`` (a task entry's check): the rerun names the damaged evaluation file of a
  training run (``check.json``), moves it aside and evaluates the run again without
  training it again (its ``model.zip`` is left as it is); its results and ``summary.md``
  equal an uninterrupted run's (a run's training is deterministic given its seed).

:data:`FAULTS` counts the faults injected (each kill and each damaged file or line).
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from helpers import TINY_ENV, TINY_LLM, TINY_PPO

from experiments.cli import main

pytestmark = pytest.mark.slow  # runs killed mid-way in subprocesses, then rerun
ROOT = Path(__file__).resolve().parents[1]
#: the subprocesses' environment: this checkout importable
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
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
#: the LLM experiment's tiny capacity search
LLM = {**TINY_LLM, "name": "fllm"}
LLM_ARGV = ["llm", "--config", "llm.yaml", "--results-dir", "res", "--no-train"]
#: the agents experiment's tiny task entry: one training run of 256 steps (the tiny PPO,
#: on the task's env), evaluated at two check loads, with two check baselines
AGENTS = {
    "name": "fagents",
    "algo": "ppo",
    "n_timesteps": 256,
    "train_seeds": [0],
    "tasks": {
        "any-load": {
            "task": "batch_env/AnyLoad-v0",
            "centering_gain": "greedy",
            "hyperparams": "tiny-any.yml",
            "train_env_kwargs": {"horizon_requests": 200},
            "protocol": False,
            "check": {
                "loads": [0.3, 0.7],
                "seeds": [3000, 3001],
                "horizon_requests": 300,
                "baselines": ["smdp-adaptive", {"serve-at-once": {"policy": "greedy"}}],
            },
        }
    },
}
AGENTS_ARGV = [
    "agents",
    "--config",
    "agents.yaml",
    "--runs-dir",
    "runs",
    "--results-dir",
    "res",
    "--workers",
    "1",
]
#: the benchmark's reference runs of one task's greedy policy, on a short protocol (four
#: seeds of 300 requests, as tests/test_benchmark.py shortens it; the real one is long):
#: ``python refs.py CACHE_DIR [--resume]`` prints the figures as JSON; run from the
#: command line it pauses 1 s after each episode (its line written: an episode takes
#: milliseconds), so that the test sees the episode log grow and kills it between two
#: episodes (0.2 s was too short on a loaded machine: the run finished first)
REFERENCES_SCRIPT = """\
import json
import sys
import time

import experiments.benchmark as bm

TASK = "batch_env/LowLoadEnergy-v0"


def references(cache_dir, resume=False, pause_s=0.0):
    real = bm.run_protocol

    def short(task_id, policy, seeds=None, horizon_requests=None, params=None, cache=None):
        tick = (lambda done, total: time.sleep(pause_s)) if pause_s else None
        return real(task_id, policy, (1000, 1001, 1002, 1003), 300, params, cache, tick=tick)

    bm.run_protocol = short
    try:
        out = bm.compute_references(
            [TASK], f"{cache_dir}/references.json", progress=None, cache_dir=cache_dir,
            labels=["greedy"], resume=resume,
        )
    finally:
        bm.run_protocol = real
    return out["runs"][f"{TASK} greedy"]


if __name__ == "__main__":
    print(json.dumps(references(sys.argv[1], "--resume" in sys.argv, pause_s=1.0)))
"""
REFERENCES_LOG = "eps/LowLoadEnergy-v0/greedy.jsonl"


def damage_truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def damage_empty_object(path: Path) -> None:
    path.write_text("{}")


def damage_garbage(path: Path) -> None:
    path.write_bytes(b"\x00\xff\x13 garbage \x80")


def damage_cut_last_line(path: Path) -> None:
    """Cut a JSON-lines log's last line mid-way, without its newline (a torn write)."""
    data = path.read_bytes()
    last = data.splitlines(keepends=True)[-1]
    path.write_bytes(data[: len(data) - len(last)] + last[: len(last) // 2])


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
    # the sixth evaluation (a policy at a rate) of the capacity searches
    ("llm-6", LLM_ARGV, "res/fllm/cells/*.json", 6, damage_empty_object),
    # the episode log once it holds two episodes (a script, not a batch-env command)
    ("references-2", ["refs.py", "eps"], REFERENCES_LOG, 2, damage_cut_last_line),
    # the training run's check evaluation (written after its training)
    ("agents-1", AGENTS_ARGV, "runs/fagents/*/check.json", 1, damage_garbage),
]
#: faults injected: a kill and a damaged file (or log line) per scenario
FAULTS = 2 * len(SCENARIOS)


def inputs(folder: Path) -> Path:
    """The tiny configs, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.yml").write_text(yaml.safe_dump(TINY_PPO))
    (folder / "cmp.yaml").write_text(yaml.safe_dump(COMPARE))
    (folder / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    (folder / "llm.yaml").write_text(yaml.safe_dump(LLM))
    (folder / "agents.yaml").write_text(yaml.safe_dump(AGENTS))
    (folder / "tiny-any.yml").write_text(
        yaml.safe_dump({AGENTS["tasks"]["any-load"]["task"]: next(iter(TINY_PPO.values()))})
    )
    (folder / "refs.py").write_text(REFERENCES_SCRIPT)
    return folder


def references_script(folder: Path) -> ModuleType:
    """``refs.py`` of ``folder``, imported (its :func:`references` for an in-process run)."""
    spec = importlib.util.spec_from_file_location("faults_refs", folder / "refs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kill_at(argv: list[str], cwd: Path, pattern: str, k: int, timeout_s: float = 300) -> None:
    """Start ``batch-env <argv>`` (``python <argv>`` where ``argv`` starts with a script
    ``*.py`` of ``cwd``) and SIGKILL it once ``k`` files match ``pattern`` under ``cwd``
    (once the log ``pattern``, a ``*.jsonl``, holds ``k`` lines).

    The command runs in a process group of its own, and the whole group is killed: its
    worker processes (``agents``' process pool, with its forkserver) die with it, as in a
    job killed by its scheduler, instead of living on, orphaned, blocked on a queue that
    no one writes, or finishing a queued job and writing its file after the kill."""
    script = argv[0].endswith(".py")
    proc = subprocess.Popen(
        [sys.executable, *([] if script else ["-m", "experiments.cli"]), *argv],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    try:
        while progress(cwd, pattern) < k:
            if proc.poll() is not None:
                raise AssertionError(
                    f"{'python' if script else 'batch-env'} {' '.join(argv)} ended "
                    f"({proc.returncode}) before {k} x {pattern}: "
                    f"{proc.stderr.read().decode()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {k} x {pattern} after {timeout_s} s")
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        with contextlib.suppress(ProcessLookupError):  # what is left of the group
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, "the command finished before it was killed"


#: the uninterrupted runs: output file -> command
REFERENCE = {
    "compare.json": ["compare", "--config", "cmp.yaml", "--results-dir", "res", "--json"],
    "train.txt": ["train", *TRAIN, "--run-dir", "run"],
    "sweep.json": ["train", "--sweep", "sweep.yaml", "--runs-dir", "runs", "--json"],
    "llm.json": [*LLM_ARGV, "--json"],
    "agents.json": [*AGENTS_ARGV, "--json"],
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
            figures = references_script(reference).references("eps")
            (reference / "references.json").write_text(json.dumps(figures))
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


def progress(cwd: Path, pattern: str) -> int:
    """The files matching ``pattern``, or the whole lines of the log ``pattern`` (``*.jsonl``)."""
    if not pattern.endswith(".jsonl"):
        return len(written(cwd, pattern))
    log = cwd / pattern
    return log.read_bytes().count(b"\n") if log.exists() else 0


def newest(cwd: Path, pattern: str) -> Path:
    return max(written(cwd, pattern), key=lambda p: (p.stat().st_mtime_ns, p.name))


def rerun(argv: list[str], capsys) -> tuple[str, str]:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr()


def rerun_apart(argv: list[str], cwd: Path) -> tuple[str, str]:
    """``rerun`` in a subprocess: for a command whose warnings come from its worker
    processes (a worker of this process's forkserver writes to the file descriptors it
    had when it started, which no capture of a later test sees)."""
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.cli", *argv],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


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


def llm_outputs(folder: Path) -> tuple[dict, str]:
    """``results.json`` without its timings and ``summary.md`` without its run time."""
    out = folder / "res/fllm"
    results = json.loads((out / "results.json").read_text())
    del results["seconds"]
    for cell in results["cells"]:
        del cell["seconds"]
    md = re.sub(r"Run time: \d+ s\.", "Run time: - s.", (out / "summary.md").read_text())
    return results, md


def test_killed_llm_run_with_a_damaged_evaluation_resumes_to_the_same_results(
    runs, monkeypatch, capsys
):
    (folder, victim), reference = runs[0]["llm-6"], runs[1]
    monkeypatch.chdir(folder)
    kept = {p: p.stat().st_mtime_ns for p in written(folder, "res/fllm/cells/*.json")}
    del kept[victim]
    out, err = rerun([*LLM_ARGV, "--json"], capsys)
    assert f"warning: {victim.relative_to(folder)} is damaged" in err
    assert (victim.parent / f"{victim.name}.corrupt").exists()
    assert victim.exists()  # recomputed
    assert len(kept) >= 5 and {p: p.stat().st_mtime_ns for p in kept} == kept  # read, not redone
    assert json.loads(out) == json.loads((reference / "llm.json").read_text())
    assert llm_outputs(folder) == llm_outputs(reference)


def test_killed_reference_run_with_a_torn_episode_line_resumes_to_the_same_figures(
    runs, monkeypatch, capsys
):
    (folder, log), reference = runs[0]["references-2"], runs[1]
    monkeypatch.chdir(folder)
    lines = log.read_text().splitlines()
    assert len(lines) >= 2 and not log.read_text().endswith("\n")  # the last line cut
    capsys.readouterr()
    resumed = references_script(folder).references("eps", resume=True)
    err = capsys.readouterr().err
    assert f"warning: {REFERENCES_LOG} line {len(lines)} is damaged" in err
    assert log.with_name(f"{log.name}.corrupt").read_text().splitlines() == [lines[-1]]
    ref = json.loads((reference / "references.json").read_text())
    for key in ("seeds", "per_seed", "reward_rate_per_s", "ci95", "horizon_requests"):
        assert resumed[key] == ref[key], key
    # append-only: the damaged line left in place; the episodes before it read, not run
    # again: one whole line a seed
    after = log.read_text().splitlines()
    assert after[: len(lines)] == lines
    seeds = [json.loads(json.loads(line)["key"])["seed"] for line in after if line != lines[-1]]
    assert sorted(seeds) == [1000, 1001, 1002, 1003]


def test_killed_agents_run_with_a_damaged_evaluation_reruns_to_the_same_results(runs):
    (folder, victim), reference = runs[0]["agents-1"], runs[1]
    model = victim.parent / "model.zip"
    trained = model.stat().st_mtime_ns
    out, err = rerun_apart([*AGENTS_ARGV, "--json"], folder)  # evaluated in worker processes
    assert f"warning: {victim.relative_to(folder)} is damaged" in err
    assert (victim.parent / f"{victim.name}.corrupt").exists()
    assert model.stat().st_mtime_ns == trained  # evaluated again, not trained again
    assert json.loads(out) == json.loads((reference / "agents.json").read_text())
    assert (folder / "res/fagents/summary.md").read_text() == (
        reference / "res/fagents/summary.md"
    ).read_text()
