"""Train a Stable-Baselines3 agent on a batch_env environment, top to bottom.

``batch-env train --algo ppo --env-kwargs '{workload: {kind: poisson, load: 0.6}}'``

1. Read the hyperparameters (rl-zoo3 format, ``agents/hyperparams/<algo>.yml``).
2. Resolve the centring gain g of :class:`batch_env.wrappers.AverageRewardCentering`
   (``--centering-gain``: ``greedy`` = greedy's measured cost rate, the default
   :data:`agents.wrappers.DEFAULT_CENTERING_GAIN`; ``smdp`` = the SMDP gain, ``online`` =
   estimated while training, or a number; :func:`agents.wrappers.resolve_gain`). The run
   saves the wrapper as ``AverageRewardCentering`` with the resolved gain.
3. Build ``n_envs`` wrapped envs (``DummyVecEnv``, seeded ``seed + i``), or with
   ``--vectorized`` one Gymnasium vector env of ``n_envs`` lanes (the env's native NumPy
   vector env when it registers one, else ``SyncVectorEnv``; the wrappers' vector twins;
   lane i seeded ``seed + i``) behind :class:`agents.vec_env.SB3VecEnv` and ``VecMonitor``;
   optionally under ``VecNormalize``. Everything else is the same in both cases.
4. Train with checkpoints every ``--checkpoint-freq`` steps (model and normalization
   statistics), TensorBoard logs (``serving/``, ``reward_components/``, ``optimality/``,
   ``eval/``; see :mod:`agents.callbacks`) and periodic evaluation on held-out seeds.
5. Save ``model.zip``, ``vecnormalize.pkl`` and ``config.yaml`` in the run directory:
   the folder alone reproduces the run (``--resume`` continues it, ``agents.load_policy``
   loads it as a policy).

Resuming (``resume=True``, ``batch-env train --resume --run-dir <run>``) continues from
the newest usable checkpoint with every setting saved in the run's ``config.yaml``
(:data:`RUN_SETTINGS`: checkpoint and evaluation frequencies, env kwargs,
hyperparameters, algorithm, seed, ...). A setting given again must equal the saved one
(else ``ValueError`` naming it, the saved and the given value); only ``n_timesteps`` may
change, to extend the run. A damaged checkpoint (model or normalization statistics) is
named on stderr, moved aside (``<file>.corrupt``) and the previous one is used; with no
usable checkpoint left, resuming is an error (:class:`NoCheckpointError`). Every setting
is checked before anything is written, and every file is written atomically.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from batch_env.provenance import provenance

from .common import (
    ALGO_NAMES,
    PICKLE_ERRORS,
    ZOO_KEYS,
    algo_class,
    algo_kwargs,
    algo_misfit,
    build_callbacks,
    callback_specs,
    check_device,
    check_int,
    literal,
    load_hyperparams,
    make_env,
    make_raw_env,
    model_file_info,
    wrapper_specs,
)
from .files import atomic_save, atomic_write_text, set_aside
from .settings import DEFAULTS, SETTINGS, settings_doc
from .warm_start import (
    TEACHER_VIEW,
    WARM_START_ALGOS,
    check_teacher,
    check_warm_start,
    warm_start,
)
from .wrappers import (
    CENTERING_WRAPPERS,
    check_gain_mode,
    resolve_gain,
    run_specs,
)

if TYPE_CHECKING:
    from .callbacks import PeriodicEvaluation

CENTERING = CENTERING_WRAPPERS[0]
#: per-step info keys that ServingMetricsCallback reads (a vectorized run copies them to
#: every lane's info; otherwise only lanes whose episode ended report)
STEP_INFO_KEYS = ("reward_components", "centering_gain")


#: the run's settings (fields of :class:`TrainArgs`): saved in ``config.yaml`` under
#: ``args``; a resumed run takes them from there
RUN_SETTINGS = tuple(x.name for x in SETTINGS)
#: the settings a resumed run may change: n_timesteps, to extend the run
RESUME_OVERRIDES = tuple(x.name for x in SETTINGS if x.resumable)
#: counts among the settings and their least allowed value
_COUNTS = {x.name: x.low for x in SETTINGS if x.low is not None}


class NoCheckpointError(FileNotFoundError):
    """``resume=True`` on a run that has no usable checkpoint (none yet, or all damaged)."""


@dataclass
class TrainArgs:
    """Arguments of a training run (each is a ``batch-env train`` option).

    The run's settings (:data:`RUN_SETTINGS`, every field but ``run_dir``, ``resume``,
    ``overwrite``, ``progress``, ``announce`` and ``verbose``) default to None, "not
    given": a new run takes its default from :data:`agents.settings.SETTINGS` (in
    brackets below), a resumed run the value saved in its ``config.yaml``.

    Settings, with their defaults:

    {settings}
    """

    algo: str | None = None
    env_id: str | None = None
    env_kwargs: dict[str, Any] | None = None
    hyperparams: str | None = None
    n_timesteps: int | None = None
    seed: int | None = None
    vectorized: bool | None = None
    num_envs: int | None = None
    vector_mode: str | None = None
    centering_gain: str | None = None
    device: str | None = None
    threads: int | None = None
    checkpoint_freq: int | None = None
    eval_freq: int | None = None
    eval_episodes: int | None = None
    eval_seed: int | None = None
    eval_horizon_requests: int | None = None
    warm_start: dict[str, Any] | None = None
    keep_best: bool | None = None
    run_dir: str | None = None
    """output folder (default runs/<algo>-s<seed>-<time>); with resume, the run to continue."""
    resume: bool = False
    """continue the run in run_dir from its latest usable checkpoint, with its saved settings."""
    overwrite: bool = False
    """start anew in a run_dir that already holds a run, replacing it (the old run's files
    are deleted); without it such a run_dir is refused."""
    progress: bool = True
    """show a progress bar."""
    announce: bool = False
    """print, before training, what the run trains on and through which wrappers, and which
    figure means what (``batch-env train`` does, except with ``--json``)."""
    verbose: int = 0
    """SB3 verbosity."""


TrainArgs.__doc__ = (TrainArgs.__doc__ or "").replace(
    "{settings}", settings_doc().replace("\n", "\n    ")
)


def check_settings(given: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the setting, its value and what is allowed for any
    nonsense value among ``given`` (settings of :data:`RUN_SETTINGS`; None = not given)."""
    for key, low in _COUNTS.items():
        if given.get(key) is not None:
            check_int(key, given[key], low)
    if given.get("algo") is not None and given["algo"] not in ALGO_NAMES:
        raise ValueError(
            f"algo={given['algo']!r} is unknown: allowed values are {list(ALGO_NAMES)}"
        )
    if given.get("env_kwargs") is not None and not isinstance(given["env_kwargs"], dict):
        raise ValueError(
            f"env_kwargs={given['env_kwargs']!r} is invalid: expected a mapping of env kwargs"
        )
    for key in ("vectorized", "keep_best"):
        if given.get(key) is not None and not isinstance(given[key], bool):
            raise ValueError(f"{key}={given[key]!r} is invalid: expected True or False")
    if given.get("keep_best") and given.get("eval_freq", DEFAULTS["eval_freq"]) == 0:
        raise ValueError(
            "keep_best=True needs periodic evaluations to choose from: give eval_freq > 0"
        )
    if given.get("centering_gain") is not None:
        check_gain_mode(given["centering_gain"])
    if given.get("device") is not None:
        check_device("device", given["device"])
    if given.get("n_timesteps") == 0 and given.get("warm_start") is None:
        raise ValueError(
            "n_timesteps=0 trains nothing: give an integer >= 1 (0 only with warm_start, "
            "to keep the cloned policy as it is)"
        )
    if given.get("warm_start") is not None:
        check_warm_start(given["warm_start"])
        algo = given.get("algo", DEFAULTS["algo"])
        if algo not in WARM_START_ALGOS:
            raise ValueError(
                f"warm_start is given with algo={algo!r}: behaviour cloning needs an "
                f"actor-critic with a distribution over actions, one of {list(WARM_START_ALGOS)}"
            )
        if given.get("vectorized"):
            raise ValueError(
                "warm_start is given with vectorized=True: the teacher reads each training "
                "env's raw state, which SB3's DummyVecEnv gives; leave vectorized out"
            )


def given_settings(args: TrainArgs) -> dict[str, Any]:
    """The settings ``args`` gives (not None), checked (:func:`check_settings`); a numeric
    centring gain as text, as the CLI gives it and ``config.yaml`` keeps it."""
    given = {k: getattr(args, k) for k in RUN_SETTINGS if getattr(args, k) is not None}
    check_settings(given)
    if "centering_gain" in given:
        given["centering_gain"] = str(given["centering_gain"])
    if "warm_start" in given:  # with its defaults, as config.yaml keeps it
        given["warm_start"] = check_warm_start(given["warm_start"])
    return given


def _saved_settings(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """The settings a run was trained with: its config's ``args``, checked against the
    config's own top-level fields (a mismatch means the file was edited)."""
    args: dict[str, Any] = cfg["args"] if isinstance(cfg.get("args"), dict) else {}
    top = {
        "algo": cfg.get("algo"),
        "env_id": cfg.get("env_id"),
        "env_kwargs": cfg.get("env_kwargs"),
        "seed": cfg.get("seed"),
        "n_timesteps": cfg.get("n_timesteps"),
        "vectorized": cfg.get("vectorized"),
        "num_envs": cfg.get("n_envs"),
        "threads": cfg.get("threads"),
        "device": cfg.get("device"),
    }
    for key, value in top.items():
        if value is not None and args.get(key) is not None and args[key] != value:
            raise ValueError(
                f"{where} is inconsistent: {key}={value!r} but args.{key}={args[key]!r} (was it edited? "
                f"a run's settings cannot change; restore {key}: {args[key]!r})"
            )
    saved = {
        **DEFAULTS,
        **{k: v for k, v in top.items() if v is not None},
        **{k: args[k] for k in RUN_SETTINGS if args.get(k) is not None},
    }
    check_settings(saved)
    return saved


def resume_settings(args: TrainArgs, cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """The settings of a resumed run: the saved ones, with ``n_timesteps`` when given.

    :raises ValueError: when a given setting differs from the saved one (naming both).
    """
    saved = _saved_settings(cfg, where)
    given = given_settings(args)
    if "env_kwargs" in given and given["env_kwargs"] != saved["env_kwargs"]:
        # a new run's env kwargs are its hyperparameter entry's with the given ones over
        # them (e.g. a task's training episodes): the same given kwargs resume it
        merged = entry_env_kwargs(_hyperparams_that_fit(saved), given["env_kwargs"])
        if merged == saved["env_kwargs"]:
            given["env_kwargs"] = merged
    for key, value in given.items():
        if key not in RESUME_OVERRIDES and value != saved[key]:
            raise ValueError(
                f"resume: {key}={value!r} was given but run {str(args.run_dir)!r} was trained with {key}="
                f"{saved[key]!r} ({where}); a resumed run keeps every setting of the original (only n_timesteps "
                f"may change, to extend it): leave the option out, or start a new run with another run_dir"
            )
    return {**saved, **{k: given[k] for k in RESUME_OVERRIDES if k in given}}


def smdp_gain_if_exact(env_id: str, env_kwargs: dict[str, Any]) -> float | None:
    """The cost rate of the exact bound for a ``DynamicBatching-v0`` env (its own id or a
    benchmark task built on it) with SLA weight 0, else None: with Poisson arrivals the
    SMDP optimum (``baselines.smdp``), with MMPP arrivals the phase-aware optimum
    (``baselines.smdp_mmpp``: a bound no phase-blind policy reaches), with a Poisson load
    drawn per episode the mean of the optimum over the load range (the optimum at the
    midpoints of 10 equal cells, the any-load task's evaluation grid): an episode's gap
    then scatters with its drawn load, and the mean over episodes is the gap of the mean
    cost."""
    import gymnasium as gym

    from baselines.smdp import SMDPProblem, gains_at_loads, is_exact_for, is_exact_per_load, solve
    from baselines.smdp_mmpp import MMPPProblem, solve_mmpp
    from batch_env.envs.dynamic_batching import DynamicBatchingEnv
    from batch_env.executor import ProfileExecutor
    from batch_env.workload import MMPP

    env = gym.make(env_id, **env_kwargs)
    try:
        core = env.unwrapped
        if not isinstance(core, DynamicBatchingEnv) or not isinstance(
            core.executor, ProfileExecutor
        ):
            return None
        if is_exact_for(env):
            return float(solve(SMDPProblem.from_env(env)).gain)
        if is_exact_per_load(env):
            from batch_env.tasks import LOAD_GRID_CELLS, load_grid

            lo, hi = core.workload.load_range  # type: ignore[attr-defined]  # a RandomLoad's
            gains = gains_at_loads(env, load_grid(lo, hi, LOAD_GRID_CELLS, 1))
            return float(sum(gains) / len(gains))
        if isinstance(core.workload, MMPP) and core.config.reward_weights.sla == 0.0:
            try:
                return float(solve_mmpp(MMPPProblem.from_env(env)).gain)
            except ValueError:  # too many states for the exact solver
                return None
        return None
    finally:
        env.close()


def score_reference(env_id: str, env_kwargs: dict[str, Any]) -> list[float] | None:
    """``[greedy's reward rate, the bound's]`` stored for the benchmark task whose problem
    ``env_id`` with ``env_kwargs`` is (``batch_env.tasks.task_of``: the task's id, or its
    base id with the task's kwargs; the episode length may differ: training usually runs
    shorter episodes than the protocol, and a reward rate per second stays comparable),
    for ``optimality/normalized_score``; None for other problems, or a task whose score
    is undefined."""
    from batch_env import tasks

    found = tasks.task_of(env_id, env_kwargs)
    ref = tasks.references().get(found[0]) if found is not None else None
    if found is None or ref is None:
        return None
    try:
        return list(tasks.score_span(ref, found[0]))
    except ValueError:  # no bound and nothing above greedy: no score to log
        return None


def _candidates(run: Path) -> list[tuple[int, Path, Path | None]]:
    """The run's checkpoints, newest first: ``(steps, model file, statistics file)``;
    ``model.zip`` (and ``vecnormalize.pkl``) only in a run that has no checkpoint files."""
    from .callbacks import checkpoint_paths

    found = []
    for p in (run / "checkpoints").glob("model_*_steps.zip"):
        m = re.fullmatch(r"model_(\d+)_steps\.zip", p.name)
        if m:
            found.append(
                (int(m.group(1)), p, checkpoint_paths(run / "checkpoints", int(m.group(1)))[1])
            )
    if not found and (run / "model.zip").exists():
        found.append((-1, run / "model.zip", run / "vecnormalize.pkl"))
    return sorted(found, key=lambda c: -c[0])


def _load_latest(run: Path, cfg: dict[str, Any], venv: Any, device: str) -> Any:
    """The model of the newest usable checkpoint, on ``venv`` (under its statistics when
    the run normalizes). Damaged files are named, moved aside and the previous checkpoint
    is tried; a checkpoint of another algorithm than the config's is an error.

    :raises NoCheckpointError: when no usable checkpoint is left.
    """
    from .common import read_normalizer

    cls = algo_class(cfg["algo"])
    damaged = []
    for _, path, vn_path in _candidates(run):
        then = "trying the previous checkpoint"
        try:
            algo, _ = model_file_info(path)
        except ValueError as exc:
            damaged.append(set_aside(path, str(exc), then).name)
            continue
        if algo is not None and algo != cfg["algo"]:
            raise ValueError(
                f"{run / 'config.yaml'} says algo={cfg['algo']!r} but checkpoint {path} holds a {algo} "
                f"model: was config.yaml edited? restore algo: {algo}"
            )
        env = venv
        if cfg["normalize"]:
            if vn_path is None or not vn_path.exists():
                print(
                    f"warning: checkpoint {path} has no normalization statistics beside it ({vn_path} is missing); "
                    f"{then}",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            try:
                env = read_normalizer(vn_path)
            except ValueError as exc:
                damaged.append(set_aside(vn_path, str(exc), then).name)
                continue
            env.set_venv(venv)
            env.training = True
        try:
            return cls.load(path, env=env, device=device, tensorboard_log=str(run / "tb"))
        except ValueError as exc:  # a readable model that does not fit the config's env
            raise ValueError(
                f"checkpoint {path} does not fit the run's {run / 'config.yaml'} (was it edited?): "
                f"{' '.join(str(exc).split())}"
            ) from None
        except (KeyError, RuntimeError, EOFError, OSError, *PICKLE_ERRORS) as exc:
            damaged.append(set_aside(path, f"{type(exc).__name__}: {exc}", then).name)
    extra = f" (damaged, moved aside: {', '.join(damaged)})" if damaged else ""
    raise NoCheckpointError(
        f"run {str(run)!r} has no usable checkpoint to resume from{extra}: delete the run "
        "directory (or give another run_dir) to start it again"
    )


def _resumed_config(args: TrainArgs) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """``(run, settings, config)`` of the run ``args.run_dir`` to resume: its saved
    ``config.yaml``, with the settings ``args`` may change (``resume_settings``) applied."""
    if args.run_dir is None:
        raise ValueError("resume=True needs run_dir=<the run to continue>")
    run = Path(args.run_dir)
    from .policy import read_run_config

    cfg = read_run_config(run)
    if cfg.get("layout") == "rl-zoo3":
        raise ValueError(
            f"run_dir={str(run)!r} is an rl-zoo3 run: continue it with rl-zoo3 "
            "(python -m rl_zoo3.train --trained-agent ...), not with resume"
        )
    st = resume_settings(args, cfg, str(run / "config.yaml"))
    cfg["n_timesteps"] = st["n_timesteps"]
    return run, st, cfg


def _new_config(args: TrainArgs) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """``(run, settings, config)`` of a new run: the settings checked, the hyperparameters
    read, the env kwargs tried on a throwaway env and the centering gain resolved, before
    anything is written. Refuses a run directory that is a file or already holds a run."""
    from batch_env.tasks import resolve_id

    from .vec_env import resolve_mode

    st = {**DEFAULTS, **given_settings(args)}
    st["env_id"] = resolve_id(str(st["env_id"]))  # with or without batch_env/
    run = Path(args.run_dir or f"runs/{st['algo']}-s{st['seed']}-{time.strftime('%Y%m%d-%H%M%S')}")
    if run.exists() and not run.is_dir():
        raise ValueError(f"run_dir={str(run)!r} is a file: give a folder")
    if (run / "config.yaml").exists():
        if not args.overwrite:
            raise FileExistsError(
                f"run directory {str(run)!r} already holds a run: use --resume to continue it, "
                "--overwrite to replace it, or another --run-dir"
            )
        shutil.rmtree(run)
    hp = _hyperparams_that_fit(st)
    specs = wrapper_specs(hp.get("env_wrapper"))
    # the entry's env kwargs (rl-zoo3's key: e.g. a task's training episodes), the run's over them
    st["env_kwargs"] = entry_env_kwargs(hp, st["env_kwargs"])
    env = make_env(st["env_id"], st["env_kwargs"], run_specs(specs, 1.0))  # bad kwargs first
    misfit = algo_misfit(st["algo"], env)
    env.close()
    if misfit is not None:
        raise ValueError(_misfit_message(st, misfit))
    if st["warm_start"] is not None:  # the teacher's parameters, on a throwaway env
        check_teacher(st["warm_start"], make_raw_env(st["env_id"], st["env_kwargs"]))
    gain = _centering_gain(args, st, specs)
    specs = run_specs(specs, gain)
    normalize = literal(hp.get("normalize", False), "normalize")
    st["num_envs"] = int(st["num_envs"] if st["num_envs"] is not None else hp.get("n_envs", 1))
    st["n_timesteps"] = int(
        st["n_timesteps"] if st["n_timesteps"] is not None else float(hp["n_timesteps"])
    )
    cfg = {
        "algo": st["algo"],
        "env_id": st["env_id"],
        "env_kwargs": st["env_kwargs"],
        "wrappers": [{"class": p, "kwargs": kw} for p, kw in specs],
        "n_envs": st["num_envs"],
        "vectorized": bool(st["vectorized"]),
        "vector_mode": resolve_mode(st["env_id"], st["vector_mode"]) if st["vectorized"] else None,
        "n_timesteps": st["n_timesteps"],
        "policy": hp.get("policy", "MlpPolicy"),
        "normalize": normalize if isinstance(normalize, dict) else bool(normalize),
        "policy_kwargs": literal(hp.get("policy_kwargs"), "policy_kwargs") or {},
        "algo_kwargs": {k: v for k, v in hp.items() if k not in ZOO_KEYS},
        "centering_gain": gain,
        "centering_mode": str(st["centering_gain"]),
        # the entry's callbacks beside the ones every run has (e.g. SemiMarkovDiscount)
        "callbacks": callback_specs(hp.get("callback")),
        "warm_start": st["warm_start"],
        "smdp_gain": smdp_gain_if_exact(st["env_id"], st["env_kwargs"]),
        "score_reference": score_reference(st["env_id"], st["env_kwargs"]),
        "seed": st["seed"],
        "threads": st["threads"],
        "device": st["device"],
        "args": {},
        # the machine, library versions and commit this run was created on
        # (batch_env.provenance; docs/reproducibility.md)
        **provenance(),
    }
    return run, st, cfg


def describe_run(cfg: dict[str, Any]) -> str:
    """What a new run trains on, in two lines: the env and its episodes, the wrappers
    (which change the actions, the observation and the rewards the algorithm sees), and
    which figure means what (``batch-env train`` prints it before training)."""
    kw = cfg["env_kwargs"]
    names = []
    for w in cfg["wrappers"]:
        name = w["class"].rsplit(".", 1)[-1]
        if w["class"] == CENTERING and cfg.get("centering_gain") is not None:
            g = cfg["centering_gain"]
            name += (
                f"(g = {g:.4g} per s, {cfg['centering_mode']})"
                if isinstance(g, float)
                else (f"(a gain per load, {cfg['centering_mode']})")
            )
        names.append(name)
    return (
        f"training {cfg['algo']} on {cfg['env_id']}"
        + (f" with {kw}" if kw else "")
        + f" for {cfg['n_timesteps']:,} steps, through {', '.join(names) or 'no wrapper'}.\n"
        "The rewards it learns from (rollout/ep_rew_mean) are shaped (centred: r + g dt"
        + ("; normalized" if _normalizes_rewards(cfg) else "")
        + "): they rank policies but are not the serving cost. The figure results "
        "report is the reward rate per second (minus the cost per second): "
        "rollout/ep_reward_rate_per_s, serving/ and eval/ in TensorBoard, and the final "
        "evaluation against greedy."
    )


def _normalizes_rewards(cfg: dict[str, Any]) -> bool:
    norm = cfg.get("normalize")
    return bool(norm.get("norm_reward", True)) if isinstance(norm, dict) else bool(norm)


def _hyperparams_that_fit(st: dict[str, Any]) -> dict[str, Any]:
    """The run's hyperparameter entry (:func:`agents.common.load_hyperparams`); where the
    shipped file of the algorithm has no entry for the env, because the algorithm does
    not fit it, the refusal says why and names the algorithms that fit."""
    try:
        return load_hyperparams(st["algo"], st["env_id"], st["hyperparams"])
    except ValueError as exc:
        if st["hyperparams"] is not None or "has no entry" not in str(exc):
            raise
        misfit = algo_misfit(st["algo"], make_raw_env(st["env_id"], st["env_kwargs"]))
        if misfit is None:
            raise
        raise ValueError(_misfit_message(st, misfit)) from None


def entry_env_kwargs(hp: dict[str, Any], env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A run's env kwargs: its hyperparameter entry's ``env_kwargs`` with the run's over them."""
    return {**(literal(hp.get("env_kwargs"), "env_kwargs") or {}), **env_kwargs}


def fitting_algos(env_id: str, env_kwargs: dict[str, Any]) -> list[str]:
    """The algorithms whose shipped hyperparameters have an entry for ``env_id`` and fit
    the env it makes with ``env_kwargs`` (:func:`agents.common.algo_misfit`)."""
    fits = []
    for algo in ALGO_NAMES:
        try:
            hp = load_hyperparams(algo, env_id)
            kwargs = entry_env_kwargs(hp, env_kwargs)
            env = make_env(env_id, kwargs, run_specs(wrapper_specs(hp.get("env_wrapper")), 1.0))
        except ValueError:
            continue
        if algo_misfit(algo, env) is None:
            fits.append(algo)
        env.close()
    return fits


def _misfit_message(st: dict[str, Any], why: str) -> str:
    fits = fitting_algos(st["env_id"], st["env_kwargs"])
    return (
        f"algo={st['algo']!r} does not fit {st['env_id']}"
        + (" with these env kwargs" if st["env_kwargs"] else "")
        + f": {why}; the algos that fit it are {', '.join(fits) if fits else 'none'}"
    )


def _centering_gain(
    args: TrainArgs, st: dict[str, Any], specs: list[tuple[str, dict[str, Any]]]
) -> float | list[list[float]] | None:
    """The reward-centering gain of a new run whose wrappers center rewards (None when
    none does): ``--centering-gain`` when given, else the file's CenteredReward gain, else
    the default; ``st["centering_gain"]`` is set to the mode used."""
    if not any(path in CENTERING_WRAPPERS for path, _ in specs):
        return None
    file_gain = [kw["gain"] for p, kw in specs if p == CENTERING_WRAPPERS[1] and "gain" in kw]
    if args.centering_gain is None and file_gain:
        check_gain_mode(file_gain[0], "env_wrapper: agents.wrappers.CenteredReward: gain")
        st["centering_gain"] = "online" if file_gain[0] is None else str(file_gain[0])
    return resolve_gain(str(st["centering_gain"]), st["env_id"], st["env_kwargs"], st["seed"])


def train(args: TrainArgs, *, stop_when: Callable[[dict[str, Any]], bool] | None = None) -> Path:
    """Run (or resume) one training run and return its directory.

    Every setting is checked, the hyperparameters read and the env and model built
    before anything is written, so a refused run leaves nothing on disk.

    :param args: the run's arguments.
    :param stop_when: called with each periodic evaluation's record (``evaluations.json``'s
        format, :class:`agents.callbacks.PeriodicEvaluation`); training stops at the first
        it accepts, and that record is the final evaluation. Needs ``eval_freq`` > 0.
        ``batch-env bench --wallclock`` uses it to stop at a target.
    """
    import torch
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from .callbacks import Checkpoints, PeriodicEvaluation, ServingMetricsCallback
    from .vec_env import make_vec_env as make_lane_vec_env

    # 1. the run's configuration: fresh, or the saved one when resuming
    run, st, cfg = _resumed_config(args) if args.resume else _new_config(args)
    if stop_when is not None and st["eval_freq"] == 0:
        raise ValueError("stop_when needs periodic evaluations: give eval_freq > 0")
    cfg["args"] = {k: st[k] for k in RUN_SETTINGS}
    torch.set_num_threads(st["threads"])
    specs = [(w["class"], dict(w.get("kwargs") or {})) for w in cfg["wrappers"]]
    if args.announce and not args.resume:
        print(describe_run(cfg), flush=True)

    # 2. vectorized, wrapped, optionally normalized training envs
    # a warm start's teacher reads the raw env through an innermost TeacherView
    teach = st["warm_start"] if not args.resume else None
    lane_specs = ([(TEACHER_VIEW, {})] if teach is not None else []) + specs

    def env_fn() -> Any:
        return make_env(cfg["env_id"], cfg["env_kwargs"], lane_specs)

    if cfg.get("vectorized", DEFAULTS["vectorized"]):
        venv = make_lane_vec_env(
            cfg["env_id"],
            cfg["n_envs"],
            cfg["env_kwargs"],
            seed=cfg["seed"],
            mode=cfg["vector_mode"],
            wrappers=specs,
            step_info_keys=STEP_INFO_KEYS,
        )
    else:
        venv = make_vec_env(env_fn, n_envs=cfg["n_envs"], seed=cfg["seed"], vec_env_cls=DummyVecEnv)
    norm = cfg["normalize"]
    norm_kwargs = norm if isinstance(norm, dict) else {}
    gamma = float(cfg["algo_kwargs"].get("gamma", 0.99))

    # 3. the model: new, or the newest usable checkpoint
    if args.resume:
        model = _load_latest(run, cfg, venv, st["device"])
        done = int(model.num_timesteps)
        if args.n_timesteps is not None and args.n_timesteps < done:
            raise ValueError(
                f"resume: n_timesteps={args.n_timesteps} is below the {done} steps run {str(run)!r} "
                "has already trained: give a larger value to extend it, or leave it out"
            )
    else:
        done = 0
        if norm:
            venv = VecNormalize(venv, gamma=gamma, **norm_kwargs)
        where = f"hyperparameters of {st['algo']} ({st['hyperparams'] or 'agents/hyperparams/' + st['algo'] + '.yml'})"
        # the initial weights on one thread: SB3's orthogonal initialization is a QR
        # factorization (LAPACK), whose rounding depends on the thread count; with it on
        # one thread, a seed trains the same model on any --threads (docs/reproducibility.md)
        torch.set_num_threads(1)
        try:
            model = algo_class(cfg["algo"])(
                cfg["policy"],
                venv,
                policy_kwargs=dict(cfg["policy_kwargs"])
                or None,  # a copy: A2C adds its optimizer to it
                tensorboard_log=str(run / "tb"),
                seed=cfg["seed"],
                device=st["device"],
                verbose=args.verbose,
                **algo_kwargs(cfg["algo_kwargs"], where),
            )
        except (
            TypeError,
            ValueError,
            KeyError,
            AssertionError,
        ) as exc:  # what the algorithm refuses
            venv.close()
            raise ValueError(
                f"{where} are refused by {st['algo']}: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())}"
            ) from None
        torch.set_num_threads(st["threads"])
        run.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
        if teach is not None:
            warm_start(model, venv, teach, run, gamma)

    # 4. callbacks: checkpoints, serving metrics, periodic evaluation
    checkpoints = Checkpoints(max(st["checkpoint_freq"] // cfg["n_envs"], 1), run / "checkpoints")
    callbacks = [
        checkpoints,
        ServingMetricsCallback(
            smdp_gain=cfg["smdp_gain"],
            score_reference=cfg.get("score_reference"),
            hparams={
                "algo": cfg["algo"],
                **cfg["algo_kwargs"],
                "n_envs": cfg["n_envs"],
                "seed": cfg["seed"],
                "centering_gain": cfg["centering_gain"],
                "vectorized": bool(cfg.get("vectorized", DEFAULTS["vectorized"])),
            },
        ),
    ]
    evaluator = None
    if st["eval_freq"] > 0:
        horizon = st["eval_horizon_requests"]
        evaluator = PeriodicEvaluation(
            cfg["env_id"],
            cfg["env_kwargs"]
            if horizon is None
            else {**cfg["env_kwargs"], "horizon_requests": horizon},
            specs,
            st["eval_freq"],
            st["eval_episodes"],
            st["eval_seed"],
            run,
            smdp_gain=cfg["smdp_gain"],
            stop_when=stop_when,
            keep_best=run / "best" if st["keep_best"] else None,
        )
        callbacks.append(evaluator)
    callbacks += build_callbacks(cfg.get("callbacks") or [])

    # 5. train (nothing left to train still sets the callbacks up), then save everything the
    # folder needs to reproduce and reload the run: a final checkpoint first, so that a
    # kill while the final files are written leaves a checkpoint to resume from
    model.learn(
        total_timesteps=max(cfg["n_timesteps"] - done, 0),
        callback=CallbackList(callbacks),
        tb_log_name="run",
        log_interval=1,  # dump every rollout (A2C's default, 100, would hide short runs)
        reset_num_timesteps=not args.resume,
        progress_bar=args.progress,
    )
    checkpoints.save_now()
    if norm:
        vn = model.get_vec_normalize_env()
        atomic_save(run / "vecnormalize.pkl", lambda tmp: vn.save(str(tmp)))
    atomic_save(run / "model.zip", model.save)
    atomic_write_text(run / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
    if evaluator is not None:
        final = _final_evaluation(run, evaluator, cfg, bool(st["keep_best"]), bool(norm))
        atomic_write_text(run / "final_evaluation.json", json.dumps(final, indent=1))
    venv.close()
    return run


def _final_evaluation(
    run: Path, evaluator: PeriodicEvaluation, cfg: dict[str, Any], keep_best: bool, norm: bool
) -> dict[str, Any]:
    """The run's final evaluation record: the saved model on the evaluation seeds, set
    against greedy on the same episodes (``reference``, with the normalized score on a
    benchmark task's problem); with ``keep_best`` the best evaluation's model."""
    # stopped at a target: the model is the one that evaluation saw (a periodic
    # evaluation at the last step ran before that rollout's update: evaluate again)
    from .callbacks import acting_mode
    from .policy import sampling_algo

    final = evaluator.history[-1] if evaluator.stopped else evaluator.evaluate_now(final=True)
    if keep_best:
        final = _keep_best(run, evaluator, final, norm)
    # how the run acts from now on (load_policy's default): the better mode on these episodes
    final = {
        **final,
        "acting": acting_mode(final) if sampling_algo(cfg["algo"]) else "deterministic",
    }
    kb = final.get("kept_best")
    if kb is None or (kb["timesteps"], kb["score"]) == (kb["final_timesteps"], kb["final_score"]):
        # the model evaluated last is the one saved: set it against greedy
        reference = evaluator.compare_with_reference(cfg.get("score_reference"), final["acting"])
        if reference is not None:
            if "normalized_score" in reference:
                from batch_env.tasks import task_of

                reference["task"] = (task_of(cfg["env_id"], cfg["env_kwargs"]) or ("",))[0]
            final = {**final, "reference": reference}
    return final


def _keep_best(
    run: Path, evaluator: PeriodicEvaluation, final: dict[str, Any], normalized: bool
) -> dict[str, Any]:
    """The final evaluation record of a ``keep_best`` run: when an earlier evaluation was
    strictly better than the last, its saved model (and statistics) replace ``model.zip``
    (and ``vecnormalize.pkl``) and its record is returned; either way with ``kept_best``
    saying which evaluation was kept, out of how many, at which score."""
    from .callbacks import eval_score

    best = evaluator.best
    # by score, not step: a periodic evaluation at the last step saw the model before
    # that rollout's update, so the final one may share its step and not its model
    if best is not None and best["score"] > eval_score(final):
        src = run / "best"
        if normalized:
            atomic_save(
                run / "vecnormalize.pkl", lambda tmp: shutil.copyfile(src / "vecnormalize.pkl", tmp)
            )
        atomic_save(run / "model.zip", lambda tmp: shutil.copyfile(src / "model.zip", tmp))
        kept = evaluator.best_record()
        assert kept is not None  # saved in this run, or checked against the history on resume
    else:
        kept = final
    return {
        **kept,
        "kept_best": {
            "timesteps": int(kept["timesteps"]),
            "final_timesteps": int(final["timesteps"]),
            "evaluations": len(evaluator.history),
            "score": eval_score(kept),
            "final_score": eval_score(final),
        },
    }


def train_or_reuse(args: TrainArgs) -> Path:
    """The finished run in ``args.run_dir``, trained first when needed; for experiments
    that own their run directories (``demo``, ``agents``, ``lazybatching``, ``llm``).

    A run with a readable ``model.zip`` is reused as it is. An interrupted one (a
    ``config.yaml`` but no ``model.zip``; or a damaged ``model.zip``, moved aside) is
    resumed from its newest usable checkpoint with the same settings, or, with none,
    removed and trained again. A missing one is trained.
    """
    if args.run_dir is None:
        raise ValueError("train_or_reuse needs run_dir")
    run = Path(args.run_dir)
    model = run / "model.zip"
    if model.exists():
        try:
            model_file_info(model)
            return run
        except ValueError as exc:
            set_aside(model, str(exc), "resuming the run")
    if (run / "config.yaml").exists():
        try:
            return train(replace(args, resume=True))
        except NoCheckpointError as exc:
            print(
                f"warning: {exc}; training {run} again from the start", file=sys.stderr, flush=True
            )
            shutil.rmtree(run)
    return train(args)
