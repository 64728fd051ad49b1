"""Training sweeps: algorithms x hyperparameters x seeds, one SB3 run per trial.

``batch-env train --sweep experiments/configs/sweep-demo.yaml [--backend local|ray]``

Every trial is one :func:`agents.train.train` run (the code path of ``batch-env train``,
not a second trainer) with the trial's hyperparameters written over the base rl-zoo3
file, followed by the run's final evaluation on held-out seeds; its score is the
deterministic evaluation's mean reward rate (per second, the raw env's reward, so
trials with different wrappers or centring compare fairly). The best trial is the
highest score; its run directory loads with ``agents.load_policy``.

Configured by a YAML file::

    name: sweep-demo               # outputs go to <runs_dir>/sweeps/<name>/
    algo: ppo                      # or a list: [ppo, a2c]
    env_id: batch_env/DynamicBatching-v0     # optional (default)
    env: {workload: {kind: poisson, load: 0.6}, horizon_requests: 500}   # env kwargs
    n_timesteps: 4096              # per trial
    seeds: 2                       # seeds 0..1 (or a list of seeds)
    eval_episodes: 3               # episodes of the final evaluation (held-out seeds)
    grid:                          # hyperparameters crossed (rl-zoo3 names), every algo
      learning_rate: [3.0e-4, 1.0e-3]
    algo_grid:                     # optional: more hyperparameters for one algo only
      a2c: {n_steps: [8, 32]}
    hyperparams: null              # optional base rl-zoo3 file (one algo), or {algo: path}
    centering_gain: greedy         # as `batch-env train --centering-gain`
    vectorized: false              # as `batch-env train --vectorized`
    num_envs: null                 # as `batch-env train --num-envs`

Backends: ``local`` runs the trials one after the other in this process; ``ray`` runs
them as Ray Tune trials (``tune.Tuner`` over a function trainable that calls the same
:func:`run_trial`, one CPU each, on a local Ray instance or the cluster at
``address``). On both, a trial that raises is recorded as failed with its error and the
sweep goes on; on Ray a trial whose worker dies is retried (``max_retries``).

Outputs, under ``<runs_dir>/sweeps/<name>/``: ``trials/<trial>/`` (each a complete run
directory: ``model.zip``, ``config.yaml``, ``hyperparams.yml``, ``trial.json``,
``final_evaluation.json`` and TensorBoard logs in ``tb/``, so ``tensorboard --logdir
<root>/trials`` compares every trial), ``summary.json``, ``summary.csv`` and
``summary.md`` (every trial, per-configuration means over seeds, the best trial and its
run directory), and with Ray ``tune/`` (Tune's own experiment records). A rerun reuses
every finished trial (same ``trial.json``) and restarts interrupted ones; a trial folder
with a damaged file is moved aside to ``trials/<trial>.corrupt`` and trained again.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import yaml

import batch_env
from agents.common import ALGO_NAMES, hyperparameter_names, load_hyperparams, model_file_info
from agents.files import atomic_write_text, set_aside
from agents.settings import DEFAULTS
from batch_env.provenance import provenance, provenance_line
from experiments.harness.backends import check_backend, guarded, ray_session, require_ray, run_tasks
from experiments.harness.config import check_mapping, check_name, read_yaml_config
from experiments.harness.report import md_table
from experiments.harness.strict_json import dumps

_KEYS = {
    "name",
    "algo",
    "env_id",
    "env",
    "n_timesteps",
    "seeds",
    "eval_episodes",
    "grid",
    "algo_grid",
    "hyperparams",
    "centering_gain",
    "vectorized",
    "num_envs",
}
METRIC = "eval_reward_rate_per_s"
EVAL_NEVER = 10**15  # eval_freq that never fires: only the final evaluation runs


def load_sweep(path_or_name: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a sweep YAML (a path or a name in ``experiments/configs``)."""
    cfg = read_yaml_config(path_or_name)
    return validate_sweep(cfg, cfg["_path"])


def _hyperparameter_names(algo: str) -> list[str]:

    return [
        k for k in hyperparameter_names(algo) if k != "n_timesteps"
    ]  # n_timesteps is a top-level field


def _check_grid(grid: Any, field: str, where: str, algos: list[str]) -> dict[str, list[Any]]:
    if grid is None:
        return {}
    if not isinstance(grid, dict):
        raise ValueError(
            f"{where}: {field}={grid!r} must be a mapping of hyperparameter -> list of values"
        )
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ValueError(
                f"{where}: {field}.{key}={values!r} must be a non-empty list of values"
            )
        for algo in algos:
            allowed = _hyperparameter_names(algo)
            if key not in allowed:
                raise ValueError(
                    f"{where}: {field}.{key} is not a hyperparameter of {algo}: allowed are {allowed} "
                    "(n_timesteps and seeds are top-level fields)"
                )
    return {str(k): list(v) for k, v in grid.items()}


def validate_sweep(cfg: Any, source: str = "dict") -> dict[str, Any]:
    """Check a sweep config and fill its defaults; raise ``ValueError`` naming the field,
    its value and what is allowed. Idempotent.

    :param cfg: the parsed YAML mapping.
    :param source: where it came from, for messages.
    """

    where = f"sweep {source}"
    cfg = check_mapping(cfg, where, _KEYS, ("name", "algo", "n_timesteps"))
    check_name(cfg["name"], where)
    cfg["algo"] = _check_algos(cfg["algo"], where)
    env_id = cfg.get("env_id", DEFAULTS["env_id"])
    if env_id not in batch_env.ENV_IDS:
        raise ValueError(f"{where}: env_id={env_id!r} is not one of {list(batch_env.ENV_IDS)}")
    cfg["env_id"] = env_id
    env = cfg.get("env") or {}
    if not isinstance(env, dict):
        raise ValueError(f"{where}: env={env!r} must be a mapping of env kwargs")
    cfg["env"] = env
    for key, low in (("n_timesteps", 1), ("eval_episodes", 1)):
        cfg[key] = _check_count(key, cfg.get(key, 3), low, where)
    cfg["seeds"] = _seed_list(cfg.get("seeds", 1), where)
    _check_grids(cfg, where)
    cfg["hyperparams"] = _hyperparams_files(cfg.get("hyperparams"), cfg["algo"], where)
    _check_run_options(cfg, where)
    cfg.setdefault("_path", source)
    return cfg


def _check_algos(algo: Any, where: str) -> list[str]:
    """``algo`` as a list of distinct known algorithms (one name or a list of them)."""

    algos = algo if isinstance(algo, list) else [algo]
    bad = [a for a in algos if a not in ALGO_NAMES]
    if not algos or bad or len(set(algos)) != len(algos):
        raise ValueError(
            f"{where}: algo={algo!r} must be one of {list(ALGO_NAMES)} or a list of distinct ones"
        )
    return list(algos)


def _check_count(key: str, value: Any, low: int, where: str) -> int:
    """An integer setting >= ``low`` (a whole float such as ``1e5`` is taken as an integer)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{where}: {key}={value!r} must be an integer >= {low}")
    return value


def _seed_list(seeds: Any, where: str) -> list[int]:
    """``seeds`` as a list: a count ``n`` >= 1 becomes ``[0, ..., n - 1]``; a list of
    distinct integers stays as it is."""
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 1:
        return list(range(seeds))
    if not (
        isinstance(seeds, list)
        and seeds
        and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
        and len(set(seeds)) == len(seeds)
    ):
        raise ValueError(
            f"{where}: seeds={seeds!r} must be a count >= 1 or a list of distinct integers"
        )
    return seeds


def _check_grids(cfg: dict[str, Any], where: str) -> None:
    """Check ``grid`` (swept for every algorithm) and ``algo_grid`` (per algorithm, no
    hyperparameter of ``grid`` again) and store them as mappings of name -> values."""
    cfg["grid"] = _check_grid(cfg.get("grid"), "grid", where, cfg["algo"])
    algo_grid = cfg.get("algo_grid") or {}
    if not isinstance(algo_grid, dict) or any(a not in cfg["algo"] for a in algo_grid):
        raise ValueError(
            f"{where}: algo_grid={algo_grid!r} must map algorithms of algo={cfg['algo']} to grids"
        )
    cfg["algo_grid"] = {
        a: _check_grid(g, f"algo_grid.{a}", where, [a]) for a, g in algo_grid.items()
    }
    both = {a: sorted(set(cfg["grid"]) & set(g)) for a, g in cfg["algo_grid"].items()}
    if any(both.values()):
        raise ValueError(f"{where}: algo_grid repeats hyperparameters of grid: {both}")


def _hyperparams_files(hp: Any, algos: list[str], where: str) -> dict[str, str]:
    """The base hyperparameter file per algorithm (``{}``: the shipped ones): a path for a
    single algorithm or a mapping of algo -> path; every file must exist."""
    if isinstance(hp, str):
        if len(algos) > 1:
            raise ValueError(
                f"{where}: hyperparams={hp!r} is one file for several algorithms {algos}: "
                "give a mapping {algo: path}"
            )
        hp = {algos[0]: hp}
    if hp is not None and (not isinstance(hp, dict) or any(a not in algos for a in hp)):
        raise ValueError(f"{where}: hyperparams={hp!r} must be a path or a mapping of algo -> path")
    for path in (hp or {}).values():
        if not Path(path).is_file():
            raise FileNotFoundError(f"{where}: hyperparams file {path!r} not found")
    return hp or {}


def _check_run_options(cfg: dict[str, Any], where: str) -> None:
    """Check and fill the training options every trial shares: ``centering_gain``,
    ``vectorized`` and ``num_envs``."""
    from agents.wrappers import GAIN_MODES

    gain = cfg.get("centering_gain", DEFAULTS["centering_gain"])
    if not (gain in GAIN_MODES or (isinstance(gain, (int, float)) and not isinstance(gain, bool))):
        raise ValueError(
            f"{where}: centering_gain={gain!r} must be one of {', '.join(GAIN_MODES)} or a number"
        )
    cfg["centering_gain"] = str(gain)
    if not isinstance(cfg.get("vectorized", DEFAULTS["vectorized"]), bool):
        raise ValueError(f"{where}: vectorized={cfg['vectorized']!r} must be true or false")
    cfg["vectorized"] = cfg.get("vectorized", DEFAULTS["vectorized"])
    num_envs = cfg.get("num_envs")
    if num_envs is not None and (
        isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1
    ):
        raise ValueError(
            f"{where}: num_envs={num_envs!r} must be an integer >= 1 (or null: the file's n_envs)"
        )
    cfg["num_envs"] = num_envs


def _label(value: Any) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return "".join(c if c.isalnum() or c in ".-+" else "_" for c in text)[:24]


def trials(cfg: dict[str, Any], root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every trial of a validated sweep, in a fixed order: algorithm, hyperparameters, seed.

    Each is a JSON-friendly dict: ``name`` (readable and unique: algorithm, the swept
    values, seed), ``algo``, ``params`` (the hyperparameters it sets), ``seed``,
    ``run_dir`` (absolute, under ``<root>/trials/``) and the settings shared by the sweep.
    """
    root = Path(root).resolve()
    out = []
    for algo in cfg["algo"]:
        grid = {**cfg["grid"], **cfg["algo_grid"].get(algo, {})}
        base = cfg["hyperparams"].get(algo)
        base = None if base is None else str(Path(base).resolve())
        keys = list(grid)
        for i, values in enumerate(itertools.product(*(grid[k] for k in keys))):
            params = dict(zip(keys, values, strict=True))
            tag = "-".join(f"{k}={_label(v)}" for k, v in params.items())
            for seed in cfg["seeds"]:
                name = f"{algo}-{tag}-s{seed}" if tag else f"{algo}-s{seed}"
                if len(name) > 120:  # keep folder names sane: index instead of values
                    name = f"{algo}-h{i:03d}-s{seed}"
                out.append(
                    {
                        "name": name,
                        "algo": algo,
                        "params": params,
                        "seed": seed,
                        "run_dir": str(root / "trials" / name),
                        "env_id": cfg["env_id"],
                        "env_kwargs": cfg["env"],
                        "n_timesteps": cfg["n_timesteps"],
                        "eval_episodes": cfg["eval_episodes"],
                        "hyperparams": base,
                        "centering_gain": cfg["centering_gain"],
                        "vectorized": cfg["vectorized"],
                        "num_envs": cfg["num_envs"],
                    }
                )
    return out


def _score(final: dict[str, Any]) -> tuple[float, float]:
    from agents.callbacks import unfinished

    if unfinished(final):  # no episode ended within the evaluation's bound
        return -math.inf, float("nan")
    mean, ci = final["deterministic"]["reward_rate_per_s"]
    return float(mean), float("nan") if ci is None else float(ci)


def run_trial(trial: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one trial through :func:`agents.train.train` (or reuse it when
    its run directory already holds this finished trial); return its result.

    The trial's hyperparameters are written over the base rl-zoo3 file into
    ``<run_dir>/hyperparams.yml``, which ``train`` reads. A run directory left by an
    interrupted run of the same trial is cleared and trained again; one whose files are
    damaged is moved aside (``<trial>.corrupt``, named on stderr) and trained again; one
    that holds something else is an error (it is never deleted).

    :returns: ``{"trial", "algo", "params", "seed", "run_dir", "eval_reward_rate_per_s",
        "eval_reward_rate_ci95", "train_s", "reused"}``.
    """
    from agents.train import TrainArgs, train

    run = Path(trial["run_dir"])
    spec_path, final_path = run / "trial.json", run / "final_evaluation.json"
    reused = False
    t0 = time.perf_counter()
    if run.exists():
        state = _trial_state(run, trial)
        if state == "finished":
            reused = True
        elif state == "interrupted":  # an interrupted run of this trial: start it again
            shutil.rmtree(run)
    if not reused:
        # the folder appears with its trial.json or not at all: a kill between creating
        # it and writing trial.json would leave a folder the next run could not claim
        staging = run.with_name(f"{run.name}.staging")
        if staging.exists():
            shutil.rmtree(staging)  # left by a run killed while staging: ours
        staging.mkdir(parents=True)
        atomic_write_text(staging / spec_path.name, json.dumps(trial, indent=1) + "\n")
        os.replace(staging, run)
        hp = load_hyperparams(trial["algo"], trial["env_id"], trial["hyperparams"])
        hp.update(trial["params"])
        hp_path = run / "hyperparams.yml"
        atomic_write_text(hp_path, yaml.safe_dump({trial["env_id"]: hp}, sort_keys=False))
        train(
            TrainArgs(
                algo=trial["algo"],
                env_id=trial["env_id"],
                env_kwargs=trial["env_kwargs"],
                hyperparams=str(hp_path),
                n_timesteps=trial["n_timesteps"],
                seed=trial["seed"],
                vectorized=trial["vectorized"],
                num_envs=trial["num_envs"],
                run_dir=str(run),
                centering_gain=trial["centering_gain"],
                device="cpu",
                threads=1,
                checkpoint_freq=trial["n_timesteps"],
                eval_freq=EVAL_NEVER,
                eval_episodes=trial["eval_episodes"],
                progress=False,
            )
        )
    mean, ci = _score(json.loads(final_path.read_text()))
    return {
        "trial": trial["name"],
        "algo": trial["algo"],
        "params": trial["params"],
        "seed": trial["seed"],
        "run_dir": trial["run_dir"],
        METRIC: mean,
        "eval_reward_rate_ci95": ci,
        "train_s": time.perf_counter() - t0,
        "reused": reused,
    }


def _trial_state(run: Path, trial: dict[str, Any]) -> str:
    """What the existing run directory of ``trial`` holds: ``"finished"`` (its result can
    be reused), ``"interrupted"`` (this trial, unfinished) or ``"damaged"`` (a file of this
    trial cannot be read: the folder is moved aside to ``<name>.corrupt``, named on
    stderr, and the trial runs again).

    :raises FileExistsError: when the folder holds something other than this trial.
    """

    spec_path, final_path, model = (
        run / "trial.json",
        run / "final_evaluation.json",
        run / "model.zip",
    )
    then = "training the trial again"
    try:
        old = json.loads(spec_path.read_bytes().decode("utf-8")) if spec_path.exists() else None
    except (UnicodeDecodeError, ValueError) as exc:
        set_aside(run, f"{spec_path.name}: {exc}", then)
        return "damaged"
    if old is None and {p.name for p in run.iterdir()} <= {f"{spec_path.name}.tmp"}:
        return "interrupted"  # killed before trial.json was in place (an older layout)
    if old != trial:
        raise FileExistsError(
            f"run directory {str(run)!r} holds something other than trial {trial['name']!r} "
            f"({'no trial.json' if old is None else 'another trial.json'}): delete it or rename the sweep"
        )
    if not (final_path.exists() and model.exists()):
        return "interrupted"
    try:
        _score(json.loads(final_path.read_bytes().decode("utf-8")))
        model_file_info(model)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError) as exc:
        set_aside(run, f"{final_path.name} or {model.name}: {type(exc).__name__}: {exc}", then)
        return "damaged"
    return "finished"


def run_sweep(
    config: str | os.PathLike[str] | dict[str, Any],
    runs_dir: str | os.PathLike[str] = "runs",
    backend: str = "local",
    address: str | None = None,
    max_retries: int = 3,
    num_cpus: int | None = None,
    progress: bool = True,
    run: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run (or resume) a training sweep and write its summary.

    :param config: sweep YAML name or path, or a config dict.
    :param runs_dir: outputs go to ``<runs_dir>/sweeps/<name>/``.
    :param backend: ``"local"`` (trials one after the other here) or ``"ray"`` (Ray Tune).
    :param address: Ray only: the cluster to join (default: Ray already initialised in this
        process, else a new local instance).
    :param max_retries: Ray only: retries of a trial whose worker died (Tune's ``max_failures``).
    :param num_cpus: Ray only: CPUs of a new local instance (default: all).
    :param progress: print one line per finished trial (stderr).
    :param run: the function that runs a trial (default :func:`run_trial`; tests pass a
        wrapper to inject faults).
    :returns: the summary (also in ``summary.json``): ``dir``, ``trials`` (one record per
        trial: result, or ``error``), ``failed``, ``best`` (the best trial's record, with
        its ``run_dir``), ``configs`` (means over seeds), ``elapsed_s``, ``tensorboard``.
    """

    check_backend(backend, address)
    if backend != "ray" and num_cpus is not None:
        raise ValueError(f"num_cpus={num_cpus!r} needs backend='ray' (--backend ray)")
    if backend == "ray":
        require_ray()
    cfg = validate_sweep(config) if isinstance(config, dict) else load_sweep(config)
    root = (Path(runs_dir) / "sweeps" / cfg["name"]).resolve()
    root.mkdir(parents=True, exist_ok=True)
    todo = trials(cfg, root)
    t0 = time.perf_counter()

    def report(rec: dict[str, Any]) -> None:
        if progress:
            what = f"{rec[METRIC]:.4g}/s" if "error" not in rec else f"FAILED {rec['error']}"
            print(f"trial {rec['trial']}: {what}", flush=True, file=sys.stderr)

    if backend == "local":
        records = _run_local(todo, report, run or run_trial)
    else:
        with ray_session(address, num_cpus):
            records = _run_tune(todo, root, max_retries, report, run or run_trial)
    summary = summarize(cfg, todo, records, root, backend, time.perf_counter() - t0)
    return summary


def _failed(trial: dict[str, Any], error: str | None, tb: str | None) -> dict[str, Any]:
    return {
        "trial": trial["name"],
        "algo": trial["algo"],
        "params": trial["params"],
        "seed": trial["seed"],
        "run_dir": trial["run_dir"],
        "error": error,
        "traceback": tb,
    }


def _run_local(
    todo: list[dict[str, Any]], report: Any, run: Callable[..., Any]
) -> dict[str, dict[str, Any]]:

    records = {}
    with run_tasks(run, todo, "local") as stream:
        for outcome in stream:
            trial = todo[outcome.index]
            rec = outcome.value if outcome.ok else _failed(trial, outcome.error, outcome.traceback)
            records[trial["name"]] = rec
            report(rec)
    return records


def _tune_trainable(config: dict[str, Any], run: Callable[..., Any] = run_trial) -> None:
    """Ray Tune function trainable: one trial through ``run`` (:func:`run_trial`); reports
    the evaluation reward (NaN and the error when the trial raised)."""
    from ray import tune

    if os.path.isdir(config["cwd"]):  # Tune starts trials in their own folder: relative paths
        os.chdir(config["cwd"])  # in the env kwargs are the driver's
    value, error, tb = guarded(run, config["trial"])
    if error is None:
        tune.report({**value, "failed": False, "params": json.dumps(value["params"])})
    else:
        tune.report({METRIC: float("nan"), "failed": True, "error": error, "traceback": tb})


def _run_tune(
    todo: list[dict[str, Any]], root: Path, max_retries: int, report: Any, run: Callable[..., Any]
) -> dict[str, dict[str, Any]]:
    from ray import tune

    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries={max_retries!r} is invalid: expected an integer >= 0")

    def trial_name(t: Any) -> str:
        return t.config["trial"]["name"]

    class Reporter(tune.Callback):
        def on_trial_result(
            self, iteration: int, trials: Any, trial: Any, result: dict[str, Any], **info: Any
        ) -> None:
            if "trial" in result or "error" in result:
                report(_record_from_result(trial.config["trial"], result))

    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(_tune_trainable, run=run), {"cpu": 1}),
        param_space={"trial": tune.grid_search(todo), "cwd": os.getcwd()},
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode="max",
            trial_name_creator=trial_name,
            reuse_actors=True,
            trial_dirname_creator=trial_name,
        ),
        run_config=tune.RunConfig(
            name="tune",
            storage_path=str(root),
            verbose=0,
            callbacks=[Reporter()],
            failure_config=tune.FailureConfig(max_failures=max_retries),
        ),
    )
    grid = tuner.fit()
    records = {}
    for result in cast(Any, grid):  # a ResultGrid is iterable (Ray's stubs do not say so)
        trial = result.config["trial"]
        if result.error is not None:  # the worker died more often than max_retries allows
            records[trial["name"]] = _failed(
                trial,
                f"{type(result.error).__name__}: {result.error}".splitlines()[0],
                str(result.error),
            )
        else:
            records[trial["name"]] = _record_from_result(trial, result.metrics)
    return records


def _record_from_result(trial: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    if metrics.get("failed", True) or "trial" not in metrics:
        return _failed(trial, metrics.get("error", "no result reported"), metrics.get("traceback"))
    keys = (
        "trial",
        "algo",
        "seed",
        "run_dir",
        METRIC,
        "eval_reward_rate_ci95",
        "train_s",
        "reused",
    )
    return {**{k: metrics[k] for k in keys}, "params": trial["params"]}


def summarize(
    cfg: dict[str, Any],
    todo: list[dict[str, Any]],
    records: dict[str, dict[str, Any]],
    root: Path,
    backend: str,
    elapsed_s: float,
) -> dict[str, Any]:
    """Write ``summary.json``, ``summary.csv`` and ``summary.md`` under ``root``; return the summary.

    :param cfg: the validated sweep.
    :param todo: its trials (:func:`trials`), giving the order.
    :param records: trial name -> result of :func:`run_trial` or a failure record.
    :param root: the sweep's folder.
    :param backend: the backend that ran it.
    :param elapsed_s: wall-clock seconds of the sweep.
    """
    rows = [records.get(t["name"]) or _failed(t, "no result (interrupted?)", None) for t in todo]
    ok = [r for r in rows if "error" not in r and math.isfinite(r[METRIC])]
    failed = [r for r in rows if "error" in r]
    best = max(ok, key=lambda r: r[METRIC]) if ok else None
    configs: dict[str, dict[str, Any]] = {}
    for r in ok:
        key = json.dumps([r["algo"], r["params"]], sort_keys=True)
        c = configs.setdefault(key, {"algo": r["algo"], "params": r["params"], "scores": []})
        c["scores"].append(r[METRIC])
    config_rows = [
        {
            "algo": c["algo"],
            "params": c["params"],
            "seeds": len(c["scores"]),
            "mean_" + METRIC: sum(c["scores"]) / len(c["scores"]),
        }
        for c in configs.values()
    ]
    config_rows.sort(key=lambda c: -c["mean_" + METRIC])
    summary = {
        "name": cfg["name"],
        "dir": str(root),
        "backend": backend,
        "elapsed_s": elapsed_s,
        "metric": f"{METRIC}: mean reward rate per second of the deterministic final evaluation "
        f"({cfg['eval_episodes']} held-out episodes)",
        "n_trials": len(rows),
        "n_failed": len(failed),
        "best": best,
        "configs": config_rows,
        "trials": rows,
        "failed": [{"trial": r["trial"], "error": r["error"]} for r in failed],
        "tensorboard": f"tensorboard --logdir {root / 'trials'}",
    } | {"provenance": provenance()}
    (root / "summary.json").write_text(dumps(summary, indent=1) + "\n")
    with open(root / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "trial",
                "algo",
                "seed",
                "params",
                METRIC,
                "eval_reward_rate_ci95",
                "status",
                "error",
                "run_dir",
            ]
        )
        for r in rows:
            w.writerow(
                [
                    r["trial"],
                    r["algo"],
                    r["seed"],
                    json.dumps(r["params"], sort_keys=True),
                    r.get(METRIC, ""),
                    r.get("eval_reward_rate_ci95", ""),
                    "failed" if "error" in r else "ok",
                    r.get("error", ""),
                    r["run_dir"],
                ]
            )
    lines = [
        f"# Sweep `{cfg['name']}` ({backend} backend, {elapsed_s:.1f} s)",
        "",
        f"{len(rows)} trials ({len(rows) // len(cfg['seeds'])} configurations of {', '.join(cfg['algo'])} "
        f"x {len(cfg['seeds'])} seeds), {cfg['n_timesteps']} steps each, env "
        f"`{cfg['env_id']}` `{json.dumps(cfg['env'], sort_keys=True)}`. Score: {summary['metric']}.",
        "",
    ]
    if best is not None:
        lines += [
            f"**Best trial: `{best['trial']}`** ({best[METRIC]:.4g}/s), run directory `{best['run_dir']}` "
            f"(`agents.load_policy('{best['run_dir']}')`, or `batch-env evaluate --policy "
            f"{best['algo']}:{best['run_dir']}`).",
            "",
        ]
    if failed:
        lines += [
            f"**{len(failed)} trial(s) failed** (rerun the sweep to retry them; finished trials are reused):",
            "",
        ] + [
            f"- `{r['trial']}`: {str(r['error']).splitlines()[0] if r['error'] else ''}"
            for r in failed
        ]
        lines.append("")
    table = []
    for r in rows:
        if "error" in r:
            table.append((r["trial"], "-", "-", "failed"))
        else:
            tag = " (best)" if best is not None and r["trial"] == best["trial"] else ""
            ci = r["eval_reward_rate_ci95"]
            ci = f" ± {ci:.2g}" if ci is not None and math.isfinite(ci) else ""
            table.append(
                (
                    f"{r['trial']}{tag}",
                    f"{r[METRIC]:.4g}{ci}",
                    f"{r['train_s']:.1f}",
                    "reused" if r["reused"] else "trained",
                )
            )
    lines += md_table(("trial", "reward rate /s (± 95% CI)", "train s", "status"), table)
    if len(cfg["seeds"]) > 1 and config_rows:
        lines += [
            "",
            "Means over seeds:",
            "",
            *md_table(
                ("algo", "hyperparameters", "seeds", "mean reward rate /s"),
                (
                    (
                        c["algo"],
                        f"`{json.dumps(c['params'], sort_keys=True)}`",
                        c["seeds"],
                        f"{c['mean_' + METRIC]:.4g}",
                    )
                    for c in config_rows
                ),
            ),
        ]
    lines += [
        "",
        f"TensorBoard: `{summary['tensorboard']}`",
        "",
        provenance_line(summary["provenance"]),
    ]
    summary["markdown"] = "\n".join(lines) + "\n"
    (root / "summary.md").write_text(summary["markdown"])
    return summary
