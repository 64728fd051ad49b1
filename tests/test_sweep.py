"""Training sweeps on the local backend: trials through agents.train, TensorBoard logs under
one root, best trial loadable, failed trials recorded, resume, config and CLI errors."""

from __future__ import annotations

import glob
import json
import shutil
import sys

import pytest
import yaml
from helpers import SWEEP_TINY as TINY

pytest.importorskip("stable_baselines3")

from agents.common import ALGO_NAMES  # noqa: E402
from agents.wrappers import GAIN_MODES  # noqa: E402
from experiments.cli import main  # noqa: E402
from experiments.sweep import load_sweep, run_sweep, trials, validate_sweep  # noqa: E402


def test_local_sweep_trains_every_trial_picks_the_best_and_resumes(tmp_path):
    from agents import load_policy

    res = run_sweep(TINY, runs_dir=tmp_path, progress=False)
    root = tmp_path / "sweeps" / "tiny"
    assert res["dir"] == str(root.resolve()) and res["n_trials"] == 4
    # the batch_size=1 trials raise inside SB3; the sweep goes on and says why
    assert res["n_failed"] == 2 and all("batch_size=1" in f["trial"] for f in res["failed"])
    assert all("AssertionError" in f["error"] for f in res["failed"])
    ok = [t for t in res["trials"] if "error" not in t]
    assert len(ok) == 2 and not any(t["reused"] for t in ok)
    best = res["best"]
    assert best["eval_reward_rate_per_s"] == max(t["eval_reward_rate_per_s"] for t in ok)
    # each trial is a complete run of agents.train with its own hyperparameters and final evaluation
    for t in ok:
        run = root / "trials" / t["trial"]
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["algo_kwargs"]["learning_rate"] == t["params"]["learning_rate"]
        assert (
            cfg["algo_kwargs"]["n_steps"] == 64 and cfg["n_envs"] == 2 and cfg["n_timesteps"] == 256
        )
        final = json.loads((run / "final_evaluation.json").read_text())
        assert final["deterministic"]["reward_rate_per_s"][0] == t["eval_reward_rate_per_s"]
    # one TensorBoard root holds every trial's logs
    events = glob.glob(
        str(root / "trials" / "*" / "tb" / "**" / "events.out.tfevents.*"), recursive=True
    )
    assert {p.split("/trials/")[1].split("/")[0] for p in events} == {t["trial"] for t in ok}
    # the best trial loads as a policy and acts
    policy = load_policy(best["run_dir"])
    import gymnasium as gym

    env = gym.make("batch_env/DynamicBatching-v0", horizon_requests=150)
    obs, info = env.reset(seed=0)
    policy.reset()
    assert env.action_space.contains(policy.act(obs, info))
    # summaries
    summary = json.loads((root / "summary.json").read_text())
    assert summary["best"]["trial"] == best["trial"] and summary["n_failed"] == 2
    md = (root / "summary.md").read_text()
    assert f"Best trial: `{best['trial']}`" in md and "2 trial(s) failed" in md
    assert len((root / "summary.csv").read_text().splitlines()) == 5
    # a rerun reuses the finished trials and retries the failed ones
    again = run_sweep(TINY, runs_dir=tmp_path, progress=False)
    assert all(t["reused"] for t in again["trials"] if "error" not in t) and again["n_failed"] == 2
    assert again["best"]["eval_reward_rate_per_s"] == best["eval_reward_rate_per_s"]


def test_interrupted_trial_is_restarted_and_foreign_dirs_are_kept(tmp_path):
    cfg = validate_sweep({**TINY, "grid": {"n_steps": [64], "batch_size": [64]}})
    (trial,) = trials(cfg, tmp_path / "sweeps" / "tiny")
    from pathlib import Path

    run = Path(trial["run_dir"])
    run.mkdir(parents=True)
    (run / "trial.json").write_text(json.dumps(trial))  # as left by an interrupted run: no model
    res = run_sweep(cfg, runs_dir=tmp_path, progress=False)
    assert res["n_failed"] == 0 and not res["trials"][0]["reused"]
    # a folder that is not this trial is never deleted
    (run / "trial.json").write_text(json.dumps({**trial, "seed": 99}))
    res = run_sweep(cfg, runs_dir=tmp_path, progress=False)
    assert res["n_failed"] == 1 and "FileExistsError" in res["failed"][0]["error"]
    assert (run / "model.zip").exists()


def test_a_trial_killed_while_its_folder_was_made_is_restarted(tmp_path):
    """A kill between creating a trial's folder and writing its trial.json (seen once in
    a killed-sweep fault test) leaves an empty folder, or one holding only trial.json.tmp,
    or (since the folder is now staged) a ``<trial>.staging`` folder: each reruns."""
    from pathlib import Path

    cfg = validate_sweep({**TINY, "grid": {"n_steps": [64], "batch_size": [64]}})
    (trial,) = trials(cfg, tmp_path / "sweeps" / "tiny")
    run = Path(trial["run_dir"])
    for leftover in ([], ["trial.json.tmp"]):
        run.mkdir(parents=True)
        for name in leftover:
            (run / name).write_text("{")
        res = run_sweep(cfg, runs_dir=tmp_path, progress=False)
        assert res["n_failed"] == 0 and not res["trials"][0]["reused"], res["failed"]
        shutil.rmtree(run)
    staging = run.with_name(f"{run.name}.staging")
    staging.mkdir()
    (staging / "trial.json.tmp").write_text("{")
    res = run_sweep(cfg, runs_dir=tmp_path, progress=False)
    assert res["n_failed"] == 0 and not staging.exists() and (run / "trial.json").exists()


@pytest.mark.parametrize(
    "patch, needle",
    [
        ({"algo": "sac"}, f"algo='sac' must be one of {list(ALGO_NAMES)}"),
        ({"colour": 1}, "unknown key(s) ['colour']"),
        (
            {"grid": {"learning_rat": [1e-3]}},
            "grid.learning_rat is not a hyperparameter of ppo: allowed are [",
        ),
        ({"grid": {"learning_rate": 1e-3}}, "grid.learning_rate=0.001 must be a non-empty list"),
        ({"grid": {"seed": [1]}}, "grid.seed is not a hyperparameter of ppo"),
        ({"seeds": 0}, "seeds=0 must be a count >= 1 or a list of distinct integers"),
        ({"n_timesteps": "many"}, "n_timesteps='many' must be an integer >= 1"),
        (
            {"algo": ["ppo", "a2c"], "grid": {}, "hyperparams": "x.yml"},
            "is one file for several algorithms",
        ),
        ({"algo_grid": {"dqn": {"n_steps": [8]}}}, "algo_grid={'dqn'"),
        ({"env_id": "CartPole-v1"}, "env_id='CartPole-v1' is not one of"),
        (
            {"centering_gain": "median"},
            f"centering_gain='median' must be one of {', '.join(GAIN_MODES)} or a number",
        ),
        ({"name": "a/b"}, "name='a/b' must be a non-empty folder name"),
    ],
)
def test_bad_sweep_config_names_the_field(patch, needle):
    with pytest.raises(ValueError) as err:
        validate_sweep({**TINY, **patch}, "s.yaml")
    assert needle in str(err.value)


def test_shipped_sweep_config_and_trial_names():
    cfg = load_sweep("sweep-demo")
    names = [t["name"] for t in trials(cfg, "/tmp/x")]
    assert len(names) == len(set(names)) == 8
    assert "ppo-learning_rate=0.0003-ent_coef=0-s0" in names


def test_train_cli_sweep_errors(tmp_path, capsys, monkeypatch):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    assert main(["train", "--sweep", str(path), "--algo", "a2c"]) == 2
    assert (
        "--algo='a2c' cannot be combined with --sweep: the sweep YAML sets it (field algo)"
        in capsys.readouterr().err
    )
    assert main(["train", "--backend", "ray"]) == 2
    assert "--backend='ray' applies to a sweep: give --sweep <yaml> too" in capsys.readouterr().err
    assert main(["train", "--sweep", str(path), "--address", "auto"]) == 2
    assert "address='auto' needs backend='ray'" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the ray extra were not installed
    assert (
        main(["train", "--sweep", str(path), "--backend", "ray", "--runs-dir", str(tmp_path)]) == 2
    )
    assert "pip install 'batch-env[ray]'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--sweep YAML" in out and "--backend {local,ray}" in out and "--runs-dir" in out


def test_train_cli_sweep_json(tmp_path, capsys):
    path = tmp_path / "one.yaml"
    path.write_text(
        yaml.safe_dump({**TINY, "name": "one", "grid": {"n_steps": [64], "batch_size": [64]}})
    )
    assert main(["train", "--sweep", str(path), "--runs-dir", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["n_trials"] == 1 and data["n_failed"] == 0
    assert data["best"]["run_dir"] == str(
        (tmp_path / "sweeps" / "one" / "trials" / "ppo-batch_size=64-n_steps=64-s0").resolve()
    )
