"""Learned agents against the SMDP optimum and the baselines (``batch-env agents``).

For every setting of the config (``experiments/configs/agents.yml``): train the agent
once per training seed (runs in parallel, one torch thread each; finished runs are
reused, interrupted ones resumed), evaluate each run deterministically on held-out seeds, evaluate greedy, the
SMDP policy (solved for the mean arrival rate) and, where ticks are on, a grid of Triton
dynamic-batcher settings on the same seeds, and write ``results/<name>/summary.md``,
``summary.json`` and ``gaps.png``.

Statistics: each training run's cost rate is its mean over the evaluation seeds; the
agent's figure is the mean over training seeds with a Student-t 95% CI over those runs.
Baselines get a CI over evaluation seeds. In the SMDP-exact subset (Poisson, SLA weight
0) the gap is relative to the solver's gain; elsewhere the comparison is against the
best baseline measured on the same seeds, with a paired CI.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import baselines
import batch_env
from agents import load_policy
from agents.common import check_int
from agents.settings import DEFAULTS
from baselines.common import env_config
from baselines.smdp import SMDPPolicy
from batch_env.evaluate import ci95_half_width
from batch_env.provenance import provenance, provenance_line
from batch_env.workload import datasets as data
from experiments.harness.options import add_config, add_json, add_results_dir, count
from experiments.harness.strict_json import dumps

from .harness.backends import process_pool
from .harness.config import check_mapping, check_name, read_yaml_config
from .harness.report import md_table, pm_fixed, pyplot, save_figure

_KEYS = {
    "name",
    "algo",
    "n_timesteps",
    "train_seeds",
    "eval_seeds",
    "env",
    "settings",
    "centering_gain",
    "eval_horizon_requests",
    "triton_grid",
    "tasks",
}


def load_agents_config(path_or_name: str | os.PathLike[str]) -> dict[str, Any]:
    """Read the agents experiment config (a name in ``experiments/configs`` or a path):
    ``settings`` (env configurations, with ``env`` and ``eval_seeds``), ``tasks``
    (benchmark task entries, :mod:`experiments.agents_tasks`), or both."""
    from .agents_tasks import check_entry, check_seeds

    cfg = read_yaml_config(path_or_name)
    where = f"agents config {cfg['_path']}"
    cfg = check_mapping(cfg, where, _KEYS, ("name", "algo", "n_timesteps", "train_seeds"))
    check_name(cfg["name"], where)
    check_int(f"{where}: n_timesteps", cfg["n_timesteps"], 1)
    if "settings" not in cfg and "tasks" not in cfg:
        raise ValueError(f"{where}: give settings (env configurations), tasks, or both")
    if "settings" in cfg:
        for key in ("env", "eval_seeds"):
            if key not in cfg:
                raise ValueError(f"{where}: {key} is required with settings")
    for key in ("train_seeds", "eval_seeds"):
        if key in cfg:
            check_seeds(f"{where}: {key}", cfg[key])
    for key in ("env", "settings", "tasks"):
        if key in cfg and not isinstance(cfg[key], dict):
            raise ValueError(f"{where}: {key}={cfg[key]!r} must be a mapping")
    for name, setting in cfg.get("settings", {}).items():
        if not isinstance(setting, dict) or not isinstance(setting.get("workload"), dict):
            raise ValueError(
                f"{where}: settings.{name}={setting!r} must be a mapping of env kwargs with a workload "
                "mapping"
            )
    config_dir = Path(cfg["_path"]).parent
    cfg["tasks"] = {
        name: check_entry(f"{where}: tasks.{name}", entry, config_dir)
        for name, entry in cfg.get("tasks", {}).items()
    }
    cfg.setdefault("settings", {})
    return cfg


def setting_env(cfg: dict[str, Any], setting: str) -> dict[str, Any]:
    """Env kwargs of one setting (the shared env plus the setting's overrides)."""
    return {**cfg["env"], **cfg["settings"][setting]}


def _train_job(job: tuple[dict[str, Any], str, int, str]) -> str:
    cfg, setting, seed, run_dir = job
    from agents.train import TrainArgs, train_or_reuse

    train_or_reuse(
        TrainArgs(
            algo=cfg["algo"],
            env_kwargs=setting_env(cfg, setting),
            n_timesteps=int(cfg["n_timesteps"]),
            seed=seed,
            run_dir=run_dir,
            centering_gain=str(cfg.get("centering_gain", DEFAULTS["centering_gain"])),
            eval_freq=int(cfg["n_timesteps"]) // 3,
            progress=False,
        )
    )
    return run_dir


def _eval(policy: Any, env: gym.Env, seeds: list[int]) -> np.ndarray:
    """Per-seed cost rates (positive = cost per second)."""
    out = []
    for s in seeds:
        res = batch_env.evaluate(policy, env, n_episodes=1, seed=s)
        out.append(-res.episodes[0]["reward_rate_per_s"])
    return np.array(out)


def run_agents_experiment(
    config: str | os.PathLike[str] = "agents",
    runs_dir: str | os.PathLike[str] = "runs",
    results_dir: str | os.PathLike[str] = "results",
    workers: int = 2,
    settings: list[str] | None = None,
    task_entries: list[str] | None = None,
) -> dict[str, Any]:
    """Train, evaluate and tabulate (see the module docstring).

    :param config: config name or path.
    :param runs_dir: parent of the training runs (``<runs_dir>/<name>/<setting>-s<seed>``).
    :param results_dir: parent of the outputs.
    :param workers: training and evaluation processes in parallel.
    :param settings: only these settings (default: all; none when only ``task_entries``
        is given).
    :param task_entries: only these entries of the config's ``tasks`` (default: all; none
        when only ``settings`` is given).
    """
    from .agents_tasks import aggregates, run_entries

    cfg = load_agents_config(config)
    names = _chosen(settings, task_entries, list(cfg["settings"]), "settings")
    task_names = _chosen(task_entries, settings, list(cfg["tasks"]), "tasks")
    skipped = _skip_missing_traces(cfg, names)
    root = Path(runs_dir) / cfg["name"]
    results: dict[str, Any] = {"config": cfg, "settings": {}, "skipped": skipped}
    if names:
        results["settings"] = _run_settings(cfg, names, root, workers)
    if task_names:
        results["tasks"] = run_entries(cfg, task_names, root, workers)
        results["aggregates"] = aggregates(cfg, results["tasks"])
    out = Path(results_dir) / cfg["name"]
    out.mkdir(parents=True, exist_ok=True)
    _keep_earlier(results, out / "summary.json")
    results["provenance"] = provenance()
    (out / "summary.json").write_text(json.dumps(results, indent=1, default=str))
    md = _markdown(results) + "\n" + provenance_line(results["provenance"]) + "\n"
    (out / "summary.md").write_text(md)
    if results["settings"]:
        _plot(results, out / "gaps.png")
    if task_names:
        from .agents_tasks import plot

        plot(results["tasks"], out / "tasks.png")
    return {"dir": out, "results": results, "markdown": md}


def _keep_earlier(results: dict[str, Any], path: Path) -> None:
    """Add to ``results`` the settings and task entries of an earlier summary in
    ``path`` that this run did not redo and that are still in the config (a run of some
    of them updates those and keeps the rest)."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return
    if not isinstance(earlier, dict):
        return
    cfg = results["config"]
    for part, known in (("settings", cfg["settings"]), ("tasks", cfg["tasks"])):
        old = earlier.get(part)
        if not isinstance(old, dict):
            continue
        mine = results.setdefault(part, {})
        kept = {k: v for k, v in old.items() if k in known and k not in mine}
        results[part] = {k: mine.get(k, kept.get(k)) for k in known if k in mine or k in kept}


def _chosen(
    given: list[str] | None, other: list[str] | None, known: list[str], what: str
) -> list[str]:
    """The names to run: ``given``; all ``known`` when neither list is given; none when
    only the other list is."""
    if given is None:
        return [] if other is not None else list(known)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"{what} {unknown} are not in the config: {known}")
    return list(given)


def _skip_missing_traces(cfg: dict[str, Any], names: list[str]) -> dict[str, str]:
    """Remove from ``names`` the trace settings whose trace is not here; why, per setting."""
    skipped = {}
    for s in list(names):
        wl = cfg["settings"][s]["workload"]
        if wl.get("kind") != "trace":
            continue
        if wl.get("dataset") is not None:  # skipped until fetched (docs/data.md)
            try:
                data.path(wl["dataset"])
            except data.DatasetError as exc:
                skipped[s] = f"trace not found: {exc}"
                names.remove(s)
        elif not Path(wl.get("path") or "").exists():
            skipped[s] = f"trace {wl.get('path')} not found"
            names.remove(s)
    for s, why in skipped.items():
        print(f"skipped setting {s}: {why}", file=sys.stderr)
    return skipped


def _run_settings(
    cfg: dict[str, Any], names: list[str], root: Path, workers: int
) -> dict[str, Any]:
    """Train and evaluate the agents of the settings ``names`` with their baselines."""
    jobs = [
        (cfg, s, seed, str(root / f"{s}-s{seed}")) for s in names for seed in cfg["train_seeds"]
    ]
    with process_pool(workers) as pool:
        list(pool.map(_train_job, jobs))

    eval_seeds = list(cfg["eval_seeds"])
    out: dict[str, Any] = {}
    for s in names:
        env_kwargs = {
            **setting_env(cfg, s),
            "horizon_requests": int(cfg.get("eval_horizon_requests", 20_000)),
        }
        env = gym.make("batch_env/DynamicBatching-v0", **env_kwargs)
        row: dict[str, Any] = {"env_kwargs": env_kwargs}
        agent_runs = [
            _eval(load_policy(root / f"{s}-s{seed}"), env, eval_seeds)
            for seed in cfg["train_seeds"]
        ]
        per_run = np.array([r.mean() for r in agent_runs])
        row["agent"] = {
            "per_training_seed": per_run.tolist(),
            "mean": float(per_run.mean()),
            "ci95": ci95_half_width(per_run),
            "per_eval_seed": np.mean(agent_runs, axis=0).tolist(),
        }
        base: dict[str, np.ndarray] = {
            "greedy": _eval(baselines.make("greedy", env=env), env, eval_seeds),
        }
        smdp = SMDPPolicy(env)
        base["smdp"] = _eval(smdp, env, eval_seeds)
        if smdp.exact:
            row["smdp_gain"] = smdp.solution.gain
        if env_config(env).decision_interval_ms is not None and cfg.get("triton_grid"):
            grid = cfg["triton_grid"]
            best: tuple[np.ndarray, dict[str, Any]] | None = None
            for delay in grid["max_queue_delay_ms"]:
                for bmax in grid["max_batch_size"]:
                    v = _eval(
                        baselines.make(
                            "timeout", env=env, max_batch_size=bmax, max_queue_delay_ms=delay
                        ),
                        env,
                        eval_seeds,
                    )
                    if best is None or v.mean() < best[0].mean():
                        best = (v, {"max_queue_delay_ms": delay, "max_batch_size": bmax})
            assert best is not None  # the grid has at least one setting (checked at load)
            base["triton-best"] = best[0]
            row["triton_best_params"] = best[1]
        row["baselines"] = {
            k: {"mean": float(v.mean()), "ci95": ci95_half_width(v), "per_eval_seed": v.tolist()}
            for k, v in base.items()
        }
        agent_eval = np.mean(agent_runs, axis=0)
        ref_name = min(base, key=lambda k: base[k].mean())
        row["best_baseline"] = ref_name
        d = base[ref_name] - agent_eval  # positive: agent cheaper
        row["agent_vs_best_baseline_percent"] = {
            "mean": float(100 * d.mean() / base[ref_name].mean()),
            "ci95": float(100 * ci95_half_width(d) / base[ref_name].mean()),
        }
        if "smdp_gain" in row:
            g = row["smdp_gain"]
            row["agent_gap_percent"] = {
                "mean": float(100 * (per_run.mean() / g - 1)),
                "ci95": float(100 * ci95_half_width(per_run) / g),
            }
            row["greedy_gap_percent"] = float(100 * (base["greedy"].mean() / g - 1))
        out[s] = row
    return out


def _markdown(results: dict[str, Any]) -> str:
    from .agents_tasks import markdown as tasks_markdown

    cfg = results["config"]
    lines = [f"# Learned agents (`{cfg['name']}`)", ""]
    if results["settings"] or results.get("skipped"):
        lines += _settings_markdown(results)
    lines += tasks_markdown(cfg, results.get("tasks", {}))
    return "\n".join(lines) + "\n"


def _settings_markdown(results: dict[str, Any]) -> list[str]:
    cfg = results["config"]
    lines = [
        f"{cfg['algo'].upper()}, {int(cfg['n_timesteps']):,} steps per run, training seeds {cfg['train_seeds']}, "
        f"evaluated deterministically on held-out seeds {cfg['eval_seeds']} "
        f"({cfg.get('eval_horizon_requests', 20000)} requests each). Cost = minus the reward rate "
        "(per second; lower is better). Agent: mean over training seeds ± 95% CI over them; "
        "baselines: mean ± 95% CI over evaluation seeds.",
        "",
    ]
    rows = []
    for s, row in results["settings"].items():
        b = row["baselines"]
        gain = f"{row['smdp_gain']:.2f}" if "smdp_gain" in row else "n/a"
        agap = (
            pm_fixed(row["agent_gap_percent"]["mean"], row["agent_gap_percent"]["ci95"]) + "%"
            if "agent_gap_percent" in row
            else "n/a"
        )
        ggap = f"{row['greedy_gap_percent']:.2f}%" if "greedy_gap_percent" in row else "n/a"
        tri = (
            f"{pm_fixed(b['triton-best']['mean'], b['triton-best']['ci95'])} {row['triton_best_params']}"
            if "triton-best" in b
            else "n/a"
        )
        vs = row["agent_vs_best_baseline_percent"]
        rows.append(
            (
                s,
                gain,
                pm_fixed(row["agent"]["mean"], row["agent"]["ci95"]),
                agap,
                pm_fixed(b["greedy"]["mean"], b["greedy"]["ci95"]),
                ggap,
                pm_fixed(b["smdp"]["mean"], b["smdp"]["ci95"]),
                tri,
                f"{pm_fixed(vs['mean'], vs['ci95'])}% cheaper than {row['best_baseline']}",
            )
        )
    lines += md_table(
        (
            "setting",
            "SMDP gain",
            "agent",
            "agent gap",
            "greedy",
            "greedy gap",
            "smdp policy",
            "best Triton",
            "agent vs best baseline",
        ),
        rows,
    )
    # written by hand: their empty cells are "| |" (one space); md_table's would be "|  |"
    for s, why in results.get("skipped", {}).items():
        lines.append(f"| {s} | skipped: {why} | | | | | | | |")
    return [*lines, ""]


def _baseline_point(r: dict[str, Any], key: str) -> tuple[float, float]:
    """A row's mean and CI of baseline ``key`` (NaN where the row has none)."""
    if key in r["baselines"]:
        return r["baselines"][key]["mean"], r["baselines"][key]["ci95"]
    return np.nan, 0.0


def _plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    rows = results["settings"]
    names = list(rows)
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 4))
    x = np.arange(len(names))
    series = [("agent", lambda r: (r["agent"]["mean"], r["agent"]["ci95"]))]
    for key in ("greedy", "smdp", "triton-best"):
        series.append(
            (
                key,
                partial(_baseline_point, key=key),
            )
        )
    width = 0.8 / len(series)
    for i, (label, fn) in enumerate(series):
        vals = [fn(rows[n]) for n in names]
        ref = [min(b["mean"] for b in rows[n]["baselines"].values()) for n in names]
        rel = [100 * (v[0] / r - 1) for v, r in zip(vals, ref, strict=True)]
        err = [100 * (v[1] if np.isfinite(v[1]) else 0) / r for v, r in zip(vals, ref, strict=True)]
        ax.bar(
            x + (i - len(series) / 2 + 0.5) * width, rel, width, yerr=err, capsize=2, label=label
        )
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, names, rotation=20, fontsize=8)
    ax.set_ylabel("cost vs best baseline (%)")
    ax.set_title("learned agent vs baselines (lower is better)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_figure(fig, path)


def cmd_agents(args: argparse.Namespace) -> int:
    """Train agents per setting and per benchmark task entry of the config, and compare
    them with the SMDP optimum, the baselines and the tasks' stored references (on each
    task's protocol, and at fixed loads where an entry has a check)."""

    result = run_agents_experiment(
        args.config,
        runs_dir=args.runs_dir,
        results_dir=args.results_dir,
        workers=args.workers,
        settings=args.settings,
        task_entries=args.tasks,
    )
    if args.json:
        print(dumps(result["results"], indent=1))
    else:
        print(result["markdown"])
        print(f"tables and plot in {result['dir']}/")
    return 0


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "agents",
        help="train agents and compare them with the SMDP optimum and baselines",
        description=cmd_agents.__doc__,
    )
    add_config(p, "agents")
    p.add_argument(
        "--settings",
        nargs="+",
        default=None,
        help="only these settings of the config (with --tasks alone: none)",
    )
    p.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        help="only these entries of the config's benchmark tasks (with --settings alone: none)",
    )
    p.add_argument(
        "--runs-dir", default="runs", help="parent folder of the training runs (default runs)"
    )
    add_results_dir(p)
    p.add_argument(
        "--workers",
        type=count(1),
        default=2,
        help="training and evaluation processes in parallel (default 2)",
    )
    add_json(p, "the results")
    p.set_defaults(func=cmd_agents)
