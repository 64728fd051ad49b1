"""``batch-env train``: an SB3 agent on a registered env (:func:`agents.train.train`),
logged to TensorBoard, with its final score against greedy; ``train --sweep`` runs a
training sweep (:mod:`experiments.sweep`). The shipped hyperparameter files are found by
name (:func:`hyperparams_file`)."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

import batch_env
from agents.common import HYPERPARAMS_DIR
from agents.policy import read_run_config
from agents.settings import SETTINGS, Setting
from batch_env import tasks
from batch_env.tasks import TASKS
from experiments.harness.config import load_yaml_mapping, parse_mapping
from experiments.harness.options import (
    add_backend_args,
    add_json,
    count,
    env_id_arg,
    stdout_to_stderr,
)
from experiments.harness.report import pm
from experiments.harness.strict_json import dumps


def cmd_train(args: argparse.Namespace) -> int:
    """Train an SB3 agent (PPO, A2C, DQN, MaskablePPO, RecurrentPPO) and print where its logs are.

    With --vectorized the training envs are the lanes of one Gymnasium vector env (the
    env's NumPy vector env when it registers one), stepped through agents.vec_env.SB3VecEnv.

    --resume --run-dir <run> continues a run from its newest usable checkpoint with every
    setting saved in its config.yaml (algorithm, env kwargs, hyperparameters, seed,
    centring gain, --vectorized/--num-envs, --n-timesteps, --checkpoint-freq,
    --eval-freq, --eval-episodes, --device, --threads). An option given with --resume
    must equal the saved value, else the command is refused naming the option, the saved
    and the given value; the one exception is a larger --n-timesteps, which extends the
    run. A damaged checkpoint is named on stderr, moved aside (<file>.corrupt) and the
    previous one is used; with none left, the command is refused. A refused command
    writes nothing.

    With --sweep <yaml> it runs a training sweep instead (algorithms x hyperparameter grid
    x seeds, see experiments/configs/sweep-demo.yaml): every trial is one run of this same
    training code, its TensorBoard logs under <runs-dir>/sweeps/<name>/trials/, and the
    summary names the best trial by evaluation reward (a run directory that
    agents.load_policy loads). --backend local runs the trials one after the other;
    --backend ray runs them as Ray Tune trials (pip install 'batch-env[ray]'), on a local
    Ray instance or the cluster at --address. The exit status is 1 when a trial failed.
    """
    if args.sweep is not None:
        return _cmd_sweep(args)
    for opt, dest, default in _SWEEP_ONLY:
        if getattr(args, dest) != default:
            raise ValueError(
                f"{opt}={getattr(args, dest)!r} applies to a sweep: give --sweep <yaml> too"
            )
    from agents.train import TrainArgs, train

    env_kwargs: dict[str, Any] | None = None
    if args.env_config is not None:
        env_kwargs = _env_config(args.env_config)
    if args.env_kwargs is not None:
        env_kwargs = {
            **(env_kwargs or {}),
            **(parse_mapping(args.env_kwargs, "--env-kwargs") or {}),
        }
    if args.resume and args.run_dir is None:
        raise ValueError("--resume needs --run-dir <the run to continue>")
    if args.resume and args.overwrite:
        raise ValueError("--resume continues a run and --overwrite replaces it: give one")
    given: dict[str, Any] = {x.name: getattr(args, x.name) for x in SETTINGS}
    for x in SETTINGS:
        if x.flag:  # a flag left out is "not given" (a resumed run keeps its own)
            given[x.name] = True if given[x.name] else None
    given.update(
        env_kwargs=env_kwargs,
        hyperparams=hyperparams_file(args.hyperparams),
        warm_start=parse_mapping(args.warm_start, "--warm-start"),
    )
    targs = TrainArgs(
        **given,
        run_dir=args.run_dir,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.no_progress and not args.json,
        announce=not args.json,
        verbose=args.verbose,
    )
    run = train(targs)
    final = run / "final_evaluation.json"
    result = {
        "run_dir": str(run),
        "final_evaluation": json.loads(final.read_text()) if final.exists() else None,
    }
    if args.json:
        print(dumps(result, indent=2))
    else:
        if isinstance(result["final_evaluation"], dict):
            _print_final_evaluation(result["final_evaluation"], run)
        print(f"run saved in {run}/  (model.zip, vecnormalize.pkl, config.yaml, checkpoints/)")
        print(f"watch it: tensorboard --logdir {run / 'tb'}")
    return 0


def _print_cut(cut: dict[str, Any]) -> None:
    """The deterministic evaluation's line where its episode did not end: how far it got,
    its cost rate over the time it ran and the queue it left."""
    p = cut.get("partial") or {}
    did = ""
    if "elapsed_s" in p:
        did = (
            f" In {p['elapsed_s']:.4g} simulated seconds it completed "
            f"{p.get('completed', '?')} of {p.get('arrived', '?')} requests and left "
            f"{p.get('waiting', '?')} waiting and {p.get('in_service', '?')} in service; "
            f"its reward rate over that time: {p['reward_rate_per_s']:.4g} per second."
        )
    print(
        f"deterministic evaluation: the episode of seed {cut['seed']} had not ended after "
        f"{cut['steps']:,} steps (the evaluation's bound): the model serves too little to "
        f"finish it.{did}"
    )


def _read_algo(run: Any) -> str:
    """The algorithm a ``batch-env train`` run was trained with (its config.yaml)."""

    return str(read_run_config(run)["algo"])


def _print_final_evaluation(ev: dict[str, Any], run: Any) -> None:
    """``train``'s lines on its final evaluation: the real reward rate per second (not the
    shaped rewards the algorithm learned from), against greedy on the same held-out
    episodes, and the normalized score on a benchmark task."""
    from agents.callbacks import unfinished

    det = ev["deterministic"]
    cut = unfinished(ev)
    what = "(minus the serving cost per second, not the shaped rewards training sees)"
    if cut:  # the deterministic policy starves the server: say what it did, then the rest
        _print_cut(cut)
        sto = ev.get("stochastic") or {}
        if "reward_rate_per_s" in sto:
            m, h = sto["reward_rate_per_s"]
            print(
                f"stochastic evaluation (the policy sampling its actions, as in training): "
                f"reward rate {pm(m, h)} per second {what}"
            )
        elif unfinished({"deterministic": sto}):
            print("stochastic evaluation: its episodes were cut too (the same bound)")
    else:
        m, h = det["reward_rate_per_s"]
        gap = f", {det['gap_percent']:.2f}% above the SMDP optimum" if "gap_percent" in det else ""
        if ev.get("loads"):  # one episode per load: the spread is the loads', not noise
            at = ", ".join(f"{x:g}" for x in ev["loads"])
            gap = gap.replace("the SMDP optimum", "the optimum at those loads")
            print(
                f"deterministic evaluation at loads {at}: mean reward rate {m:.4g} per second {what}{gap}"
            )
        else:
            print(f"deterministic evaluation: reward rate {pm(m, h)} per second {what}{gap}")
        sto = ev.get("stochastic") or {}
        if ev.get("acting") == "stochastic" and "reward_rate_per_s" in sto:
            m, h = sto["reward_rate_per_s"]
            print(
                f"stochastic evaluation (the policy sampling its actions, as in training): "
                f"reward rate {pm(m, h)} per second, better on these episodes: the run "
                "acts by sampling (load_policy's default; final_evaluation.json's acting)"
            )
    ref = ev.get("reference")
    if ref:
        d, dh = ref["difference"]
        name = ref["policy"]
        verdict = (
            f"better than {name}"
            if d - dh > 0
            else f"worse than {name}"
            if d + dh < 0
            else f"not distinguishable from {name} on these episodes"
        )
        hint = "; train longer (--n-timesteps) or see docs/tutorials/train.md" if d < 0 else ""
        who = (
            "the agent"
            if ref.get("agent_mode", "deterministic") == "deterministic"
            else ("the agent's stochastic policy")
        )
        print(
            f"{name} on the same held-out episodes: {ref['reward_rate_per_s'][0]:.4g} per "
            f"second; {who} is {verdict} ({pm(d, dh)} per second, paired){hint}"
        )
        if "normalized_score" in ref:
            algo = _read_algo(run)
            print(
                f"normalized score on {ref['task']} ≈ {ref['normalized_score']:.3g} ± "
                f"{ref['normalized_score_ci95']:.2g} ({who}'s, held out: TensorBoard's "
                f"eval/normalized_score; optimality/normalized_score is the training episodes'; "
                f"0 = greedy, 1 = the task's bound or best reference; paired with greedy on "
                f"these episodes; the protocol's figure: batch-env benchmark --policy "
                f"{algo}:{run} --tasks {ref['task']})"
            )
    kb = ev.get("kept_best")
    if kb:
        print(
            f"kept the model of the evaluation at step {kb['timesteps']} (best of "
            f"{kb['evaluations']}; the last, at step {kb['final_timesteps']}, scored "
            f"{kb['final_score']:.4g} per second)"
        )


#: train options that only a sweep uses: (option, dest, default)
_SWEEP_ONLY = (
    ("--backend", "backend", "local"),
    ("--address", "address", None),
    ("--num-cpus", "num_cpus", None),
    ("--max-retries", "max_retries", 3),
    ("--runs-dir", "runs_dir", "runs"),
)


#: train options that a sweep's YAML sets instead, or that do not combine with --sweep:
#: (option, dest, YAML field or why); not given = None (False for flags). The settings'
#: rows come from agents.settings.SETTINGS.
_SET_BY_SWEEP = (
    *((x.option, x.name, x.sweep) for x in SETTINGS),
    ("--env-config", "env_config", "env"),
    ("--run-dir", "run_dir", "name (with --runs-dir)"),
    ("--resume", "resume", "(a rerun resumes)"),
    ("--overwrite", "overwrite", "(a rerun resumes)"),
)


def _cmd_sweep(args: argparse.Namespace) -> int:
    """``train --sweep``: run the sweep, print its summary (see cmd_train)."""
    from experiments.sweep import run_sweep

    for opt, dest, field in _SET_BY_SWEEP:
        if getattr(args, dest) is not None and getattr(args, dest) is not False:
            raise ValueError(
                f"{opt}={getattr(args, dest)!r} cannot be combined with --sweep: the sweep YAML "
                f"sets it (field {field})"
            )
    with stdout_to_stderr(args.json):  # Ray Tune prints its tables: keep --json output pure
        summary = run_sweep(
            args.sweep,
            runs_dir=args.runs_dir,
            backend=args.backend,
            address=args.address,
            max_retries=args.max_retries,
            num_cpus=args.num_cpus,
            progress=not args.json,
        )
    if args.json:
        print(dumps({k: v for k, v in summary.items() if k != "markdown"}, indent=1))
    else:
        print(summary["markdown"])
        print(f"summary.md, summary.csv and summary.json in {summary['dir']}/")
        for f in summary["failed"]:
            print(f"trial {f['trial']} failed: {f['error']}", file=sys.stderr)
    return 1 if summary["failed"] else 0


def hyperparams_file(value: str | None) -> str | None:
    """``--hyperparams``: a YAML file, or the name of a shipped hyperparameter file (with
    or without ``.yml``): one of ``experiments/configs`` (``ppo-node-fraction``, ...) or
    of ``agents/hyperparams`` (``ppo``, ``a2c``, ...), found in the installed package.

    :raises FileNotFoundError: naming the value and listing the shipped names."""

    if value is None or Path(value).is_file():
        return value
    shipped = shipped_hyperparams()
    name = value.removesuffix(".yml").removesuffix(".yaml")
    if name in shipped and not Path(value).is_dir():
        return str(shipped[name])
    raise FileNotFoundError(
        f"hyperparameter file {value!r} not found"
        + (" (it is a folder)" if Path(value).is_dir() else "")
        + f": give a YAML file, or a shipped name: {', '.join(sorted(shipped))}"
    )


def shipped_hyperparams() -> dict[str, Any]:
    """The shipped hyperparameter files by name: ``agents/hyperparams/<algo>.yml`` and the
    files of ``experiments/configs`` that map env ids to hyperparameters (rl-zoo3 format;
    the other configs there are experiments')."""

    found: dict[str, Any] = {p.stem: p for p in HYPERPARAMS_DIR.glob("*.yml")}
    configs = Path(str(resources.files("experiments") / "configs"))
    for p in sorted(configs.glob("*.y*ml")):
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            continue
        if isinstance(data, dict) and data and all("/" in str(k) for k in data):
            found.setdefault(p.stem, p)
    return found


def _env_config(value: str) -> dict[str, Any]:
    """``--env-config``: the env kwargs in a YAML file, or a benchmark task's id for its
    kwargs (to change some of them with --env-kwargs on the task's base id, --env-id)."""

    if value in tasks.TASKS or not Path(value).exists():
        try:  # a task id, with or without batch_env/
            return tasks.variant(tasks.get(value).id)
        except ValueError:
            pass  # not a task: load_yaml_mapping names the missing file
    return load_yaml_mapping(value, "--env-config")


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "train", help="train an SB3 agent and log it to TensorBoard", description=cmd_train.__doc__
    )
    for x in SETTINGS:
        _add_setting(p, x)
    p.add_argument(
        "--env-config",
        default=None,
        help="YAML file of env kwargs, or a benchmark task's id for its kwargs (--env-kwargs "
        "override it): a changed task is its base id with them, e.g. --env-id "
        "batch_env/DynamicBatching-v0 --env-config batch_env/LowLoadEnergy-v0 --env-kwargs "
        "'{workload: {kind: poisson, load: 0.9}}' (a task id refuses the change)",
    )
    p.add_argument(
        "--run-dir", default=None, help="output folder (default runs/<algo>-s<seed>-<time>)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue --run-dir from its newest usable checkpoint with its saved settings; an option "
        "given again must equal the saved value, except a larger --n-timesteps (extends the run)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start anew in a --run-dir that already holds a run, deleting that run",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--verbose",
        type=count(0),
        default=0,
        help="SB3's verbosity: 1 prints its console table after each rollout, where "
        "rollout/ep_reward_rate_per_s (the real reward rate per second) sits beside the "
        "shaped rollout/ep_rew_mean, with serving/ and eval/ (default 0)",
    )
    _add_sweep_args(p)
    add_json(p)
    p.set_defaults(func=cmd_train)


def _add_setting(p: argparse.ArgumentParser, x: Setting) -> None:
    """The option of one training setting, made from its definition (agents.settings):
    not given is None (a flag: not given), the help ends with its default."""
    help_text = x.cli_help()
    kw: dict[str, Any] = {"default": None, "help": help_text}
    if x.flag:
        kw = {"action": "store_true", "help": help_text}
    elif x.low is not None:
        kw["type"] = count(x.low)
    elif x.name == "env_id":
        kw["type"] = env_id_arg
        kw["help"] = help_text.replace(
            " (default", ": " + ", ".join([*batch_env.ENV_IDS, *TASKS]) + " (default", 1
        )
    if x.choices is not None:
        kw["choices"] = list(x.choices)
    if x.metavar is not None:
        kw["metavar"] = x.metavar
    p.add_argument(x.option, **kw)


def _add_sweep_args(p: argparse.ArgumentParser) -> None:
    """``train``'s options of ``--sweep``."""
    p.add_argument(
        "--sweep",
        default=None,
        metavar="YAML",
        help="run a training sweep from a YAML file or a config name (e.g. sweep-demo): algorithms x "
        "hyperparameter grid x seeds, one run per trial, best trial by evaluation reward; the "
        "options above that the YAML sets are not allowed with it",
    )
    add_backend_args(p, "trial of --sweep")
    p.add_argument(
        "--max-retries",
        type=count(0),
        default=3,
        help="--sweep on ray: retries of a trial whose worker process died (default 3)",
    )
    p.add_argument(
        "--runs-dir",
        default="runs",
        help="--sweep: outputs go to <runs-dir>/sweeps/<name>/ (default runs)",
    )
