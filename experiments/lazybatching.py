"""Node-level batching against graph batching (``batch-env lazybatching``).

Runs the comparison ``experiments/configs/lazybatching.yml`` (NodeBatching-v0, the
resumable comparison harness of :mod:`experiments.compare`: same seeds for every policy,
tables and per-load plots), training first any agent run the config lists under
``train`` that does not exist yet, then writes ``ratios.md``, ``ratios.json`` and
``ratios.png`` to ``results/<name>/``: each policy against the reference (graph batching
with a 10 ms window) as the paper states its claims, next to the paper's figures.

Ratios (our definitions, per model, averaged over the loads below saturation unless
said otherwise):

* mean latency: reference mean latency / policy mean latency (> 1 = the policy is faster),
  per load, then the geometric mean over the non-saturated loads;
* throughput: policy throughput / reference throughput at the saturated load (the
  largest load of the sweep, above the max throughput);
* SLA: the paper does not define its "SLA satisfaction" ratio in the abstract; we report
  two: the SLA-attainment ratio (policy / reference) at the saturated load, and the
  SLA-violation ratio below saturation: the reference's violation rate summed over the
  non-saturated loads divided by the policy's (> 1 = fewer violations; ``inf`` when the
  policy has none and the reference has some, 1 when neither has any).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from agents.settings import DEFAULTS
from batch_env.provenance import provenance, provenance_line
from experiments.harness.options import add_config, add_json, add_results_dir
from experiments.harness.strict_json import dumps

from .compare import record_result, run_compare, validate_config
from .harness.config import read_yaml_config
from .harness.report import md_table, pyplot, save_figure, times

_EXTRA_KEYS = ("train", "paper")
#: keys of a ``train`` entry
_TRAIN_KEYS = {"algo", "load", "seed", "centering_gain", "n_timesteps"}


def load_lazybatching_config(
    path_or_name: str | os.PathLike[str] = "lazybatching",
) -> tuple[dict, dict, dict]:
    """Read the config: ``(comparison config, train section, paper section)``."""
    raw = read_yaml_config(path_or_name)
    train = raw.pop("train", None) or {}
    paper = raw.pop("paper", None) or {}
    return raw, train, paper


def train_missing_agents(
    raw: dict[str, Any], train: dict[str, Any], progress: bool = True
) -> list[str]:
    """Train every agent run named in the config's policies that has no ``model.zip`` yet
    (an interrupted one is resumed, a damaged ``model.zip`` moved aside: see
    :func:`agents.train.train_or_reuse`).

    :param raw: the comparison part of the config (before validation).
    :param train: ``{policy label: {algo, load, seed, centering_gain, n_timesteps?}}``.
    :returns: the run directories trained now.
    """
    from agents.train import TrainArgs, train_or_reuse

    where = f"config {raw.get('_path', 'dict')}"
    if not isinstance(train, dict) or not isinstance(raw.get("policies"), dict):
        raise ValueError(f"{where}: train={train!r} and policies must be mappings")
    trained = []
    for label, spec in train.items():
        params = raw["policies"].get(label) or {}
        runs = params.get("agent") if isinstance(params, dict) else None
        if runs is None:
            raise ValueError(f"{where}: train.{label}: policies.{label} has no agent run to train")
        unknown = sorted(set(spec) - _TRAIN_KEYS) if isinstance(spec, dict) else None
        if unknown is None or unknown:
            raise ValueError(
                f"{where}: train.{label}={spec!r} is invalid: expected a mapping with keys among "
                f"{sorted(_TRAIN_KEYS)}"
            )
        runs = runs if isinstance(runs, dict) else {None: runs}
        for variant, run in runs.items():
            existed = (Path(run) / "model.zip").exists()
            env_kwargs = {**raw.get("env", {}), **((raw.get("envs") or {}).get(variant) or {})}
            env_kwargs["workload"] = {
                **next(iter(raw["workloads"].values())),
                "load": float(spec.get("load", 0.5)),
            }
            train_or_reuse(
                TrainArgs(
                    algo=spec.get("algo", "ppo_mask"),
                    env_id=raw.get("env_id", "batch_env/NodeBatching-v0"),
                    env_kwargs=env_kwargs,
                    n_timesteps=spec.get("n_timesteps"),
                    seed=int(spec.get("seed", DEFAULTS["seed"])),
                    run_dir=str(run),
                    centering_gain=str(spec.get("centering_gain", DEFAULTS["centering_gain"])),
                    eval_freq=0,
                    progress=progress,
                )
            )
            if not existed:
                trained.append(str(run))
    return trained


def _gmean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return float(math.exp(np.mean(np.log(xs)))) if xs else float("nan")


def ratios(cfg: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Every policy against the reference, per env variant (see the module docstring)."""
    ref = cfg["reference"]
    main = [r for r in records if r["group"] == "main"]
    by = {(r["workload"], r["load"], r["policy"]): record_result(r) for r in main}
    loads = sorted({r["load"] for r in main})
    sat = loads[-1]
    below = [x for x in loads if x < 1.0] or loads
    out: dict[str, Any] = {}
    for wname in cfg["workloads"]:
        per: dict[str, Any] = {}
        for pol in cfg["policies"]:
            lat, p99, rows = [], [], []
            va_sum = vb_sum = 0.0
            for load in loads:
                a, b = by.get((wname, load, pol)), by.get((wname, load, ref))
                if a is None or b is None:
                    continue
                row = {
                    "load": load,
                    "latency_mean_ratio": b.mean("latency_mean_ms") / a.mean("latency_mean_ms"),
                    "latency_p99_ratio": b.mean("latency_p99_ms") / a.mean("latency_p99_ms"),
                    "throughput_ratio": a.mean("throughput_rps") / b.mean("throughput_rps"),
                    "sla_attainment": a.mean("sla_attainment"),
                    "sla_attainment_ref": b.mean("sla_attainment"),
                }
                rows.append(row)
                if load in below:
                    lat.append(row["latency_mean_ratio"])
                    p99.append(row["latency_p99_ratio"])
                    va_sum += 1 - row["sla_attainment"]
                    vb_sum += 1 - row["sla_attainment_ref"]
            sat_row = next((x for x in rows if x["load"] == sat), None)
            if va_sum > 1e-12:
                viol = vb_sum / va_sum
            else:
                viol = math.inf if vb_sum > 1e-12 else 1.0
            per[pol] = {
                "latency_mean_ratio_gmean": _gmean(lat),
                "latency_p99_ratio_gmean": _gmean(p99),
                "throughput_ratio_at_saturation": sat_row["throughput_ratio"]
                if sat_row
                else float("nan"),
                "sla_attainment_ratio_at_saturation": (
                    sat_row["sla_attainment"] / sat_row["sla_attainment_ref"]
                    if sat_row and sat_row["sla_attainment_ref"] > 0
                    else float("nan")
                ),
                "sla_violation_ratio_below_saturation": viol,
                "by_load": rows,
            }
        out[wname] = per
    return {
        "reference": ref,
        "saturated_load": sat,
        "loads_below_saturation": below,
        "by_setting": out,
    }


def write_ratios(cfg: dict[str, Any], rat: dict[str, Any], paper: dict[str, Any], out: Path) -> str:
    """Write ``ratios.md``, ``ratios.json`` and ``ratios.png``; return the Markdown."""
    ref = rat["reference"]
    lines = [
        f"# Node-level vs graph batching (`{cfg['name']}`)",
        "",
        f"Ratios against `{ref}` (> 1 = better than `{ref}`): mean and p99 latency (reference / policy, "
        f"geometric mean over loads {', '.join(f'{x:g}' for x in rat['loads_below_saturation'])}), throughput "
        f"and SLA attainment at load {rat['saturated_load']:g} (saturated; policy / reference), SLA-violation "
        "rate below saturation (reference's summed over those loads / policy's; inf = the policy has none).",
    ]
    if paper:
        lines += [
            "",
            f"Paper ({paper.get('source', '')}): mean latency {paper.get('latency_mean', 'n/a')}x, throughput "
            f"{paper.get('throughput', 'n/a')}x, SLA satisfaction {paper.get('sla_attainment', 'n/a')}x.",
        ]
    for wname, per in rat["by_setting"].items():
        lines += [
            "",
            f"## {wname}",
            "",
            *md_table(
                (
                    "policy",
                    "mean latency",
                    "p99 latency",
                    "throughput (sat.)",
                    "SLA attainment (sat.)",
                    "SLA violations",
                ),
                (
                    (
                        pol,
                        times(v["latency_mean_ratio_gmean"]),
                        times(v["latency_p99_ratio_gmean"]),
                        times(v["throughput_ratio_at_saturation"]),
                        times(v["sla_attainment_ratio_at_saturation"]),
                        times(v["sla_violation_ratio_below_saturation"]),
                    )
                    for pol, v in per.items()
                ),
            ),
            "",
            "Per load (mean-latency ratio / SLA attainment of the policy vs the reference):",
            "",
            *md_table(
                ("policy", *(f"{r['load']:g}" for r in next(iter(per.values()))["by_load"])),
                (
                    (
                        pol,
                        *(
                            f"{r['latency_mean_ratio']:.2f}x / {r['sla_attainment']:.3f} vs {r['sla_attainment_ref']:.3f}"
                            for r in v["by_load"]
                        ),
                    )
                    for pol, v in per.items()
                ),
            ),
        ]
    where = provenance()
    md = "\n".join([*lines, "", provenance_line(where)]) + "\n"
    (out / "ratios.md").write_text(md)
    (out / "ratios.json").write_text(
        json.dumps({"paper": paper, **rat, "provenance": where}, indent=2, default=str)
    )
    plt = pyplot()
    if plt is None:
        return md
    settings = list(rat["by_setting"])
    fig, axes = plt.subplots(1, len(settings), figsize=(5.5 * len(settings), 4), squeeze=False)
    for ax, wname in zip(axes[0], settings, strict=True):
        for pol, v in rat["by_setting"][wname].items():
            if pol == ref:
                continue
            x = [r["load"] for r in v["by_load"]]
            y = [r["latency_mean_ratio"] for r in v["by_load"]]
            ax.plot(x, y, marker="o", label=pol)
        ax.axhline(1.0, color="grey", lw=0.8)
        if paper.get("latency_mean"):
            ax.axhline(
                float(paper["latency_mean"]), color="red", ls="--", lw=0.8, label="paper (mean)"
            )
        ax.set_yscale("log")
        ax.set_xlabel("load rho")
        ax.set_ylabel(f"mean latency of {ref} / policy's")
        ax.set_title(wname)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out / "ratios.png")
    return md


def run_lazybatching(
    config: str | os.PathLike[str] = "lazybatching",
    results_dir: str | os.PathLike[str] = "results",
    progress: bool = True,
    train: bool = True,
) -> dict[str, Any]:
    """Train missing agents, run the comparison, write the ratio table and plot.

    :param config: config name in ``experiments/configs`` or a YAML path.
    :param results_dir: outputs go to ``<results_dir>/<name>/``.
    :param progress: progress bars.
    :param train: train agent runs that are missing (else a missing run is an error).
    :returns: ``{"dir", "ratios", "markdown", "trained"}``.
    """
    raw, train_spec, paper = load_lazybatching_config(config)
    trained = train_missing_agents(raw, train_spec, progress=progress) if train else []
    cfg = validate_config(raw, raw["_path"])
    res = run_compare(cfg, results_dir=results_dir, progress=progress)
    rat = ratios(cfg, res["records"])
    md = write_ratios(cfg, rat, paper, res["dir"])
    return {"dir": res["dir"], "ratios": rat, "markdown": md, "trained": trained}


def cmd_lazybatching(args: argparse.Namespace) -> int:
    """Node-level batching (LazyBatching) vs graph batching on NodeBatching-v0, with ratios."""

    result = run_lazybatching(
        args.config, results_dir=args.results_dir, progress=not args.json, train=not args.no_train
    )
    if args.json:
        print(dumps(result["ratios"], indent=1))
    else:
        print(result["markdown"])
        print(f"tables, ratios and plots in {result['dir']}/")
    return 0


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "lazybatching",
        help="node-level (LazyBatching) vs graph batching: sweep, ratios, plots",
        description=cmd_lazybatching.__doc__,
    )
    add_config(p, "lazybatching")
    add_results_dir(p)
    p.add_argument(
        "--no-train", action="store_true", help="do not train missing agent runs (error instead)"
    )
    add_json(p, "the ratios")
    p.set_defaults(func=cmd_lazybatching)
