"""The comparison experiment: policies x workloads x loads x seeds, paired.

Configured by a YAML file (see ``experiments/configs/default.yaml``)::

    name: default                  # results go to results/<name>/
    env_id: batch_env/DynamicBatching-v0   # optional (default); or batch_env/NodeBatching-v0
    env: {profile: resnet50-v100, decision_interval_ms: 0.5, ...}   # the env's kwargs
    envs: {resnet50: {profile: resnet50-v100}, bert: {profile: bert-base-t4, sla_ms: 130}}
                                   # optional named variants of `env`, crossed with the
                                   # workloads (tables show "<variant>/<workload>")
    workloads: {poisson: {kind: poisson}, mmpp: {kind: mmpp, ...}}  # scaled to each load
    loads: [0.2, 0.4, 0.6, 0.8, 0.95]
    seeds: 5                       # episodes seeded 0..4 (or a list of seeds)
    reference: smdp                # paired differences are taken against this policy
    policies: {greedy: {}, static-8: {name: static, batch_size: 8}, smdp: {}, ...}
                                   # a trained agent: my-ppo: {agent: runs/my-ppo}, or one
                                   # run per env variant: {agent: {resnet50: runs/a, bert: runs/b}}
    load_is_rate: false            # optional; true: each of `loads` is an arrival rate
                                   # (requests/s: `rate_per_s`, or a trace's
                                   # `target_rate_per_s`), for LLMBatching where no load is defined
    load_per_replica: false        # optional, with load_is_rate on LLMRouting-v0: each of
                                   # `loads` is a rate per replica, times the cell's
                                   # `replicas` (a count or a list; the env's or a variant's)
    pareto: {workload: poisson, load: 0.3, energy_weights: [0, 0.1, 0.5, 2]}
    structure: {loads: [0.3, 0.6, 0.9], energy_weights: [0.1, 0.5, 2.0]}

Every cell (workload, load, policy) is evaluated with the same seeds through
:func:`batch_env.evaluate`, so policies are compared on common random numbers. The
comparison enables ticks for every policy alike (``env.decision_interval_ms``). Each
finished cell is written to ``results/<name>/cells/`` under a key that hashes everything
it depends on (config and package version); a rerun skips cells already there
(resumable, and a changed config never reuses stale cells). A damaged cell file (not
JSON, or not a whole record of its cell) is named on stderr, moved aside to
``<file>.corrupt`` and recomputed. After changing the simulator
without bumping ``batch_env.__version__``, delete ``results/<name>/cells/``.

Cells run on a backend (:mod:`experiments.harness.backends`): ``local`` (this process, the
default and the fast path on one machine) or ``ray`` (each cell a Ray task on a local
Ray instance or a cluster, ``batch-env compare --backend ray [--address ...]``). Both
run the same :func:`run_cell` and give the same numbers; on both, a cell that raises is
recorded as failed (``failed.json``, the top of ``summary.md``) and the others go on,
and on Ray a cell whose worker dies is retried. Outputs: ``summary.csv`` (one row per cell), ``summary.md`` (tables
with 95% CIs and paired differences against the reference), and PNG plots: mean and p99
latency vs load, mean power vs load, SLA attainment vs load, the latency-power trade-off
(the SMDP policy swept over the energy weight as a Pareto curve, the others as points)
and the SMDP policy structure (batch size vs queue length for several loads and weights).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import baselines
import batch_env
from agents import load_policy
from agents.common import make_raw_env
from agents.files import require_keys
from baselines.common import env_config
from baselines.smdp import SMDPProblem, solve
from batch_env.evaluate import EvaluationResult, Policy, paired_difference
from batch_env.metrics import HEADLINE_KEYS
from batch_env.provenance import provenance_line
from experiments.harness.options import (
    add_backend_args,
    add_json,
    add_results_dir,
    count,
    stdout_to_stderr,
)
from experiments.harness.strict_json import dumps

from .harness.config import check_mapping, check_name, is_number, read_yaml_config
from .harness.report import md_table, pm, pyplot, save_figure, write_csv
from .harness.runner import check_backend_options, progress_bar, run_keyed, write_failures
from .harness.store import Store

METRICS = HEADLINE_KEYS
_KEYS = {
    "name",
    "env_id",
    "env",
    "envs",
    "workloads",
    "loads",
    "seeds",
    "policies",
    "reference",
    "pareto",
    "structure",
    "load_is_rate",
    "load_per_replica",
}
DEFAULT_ENV_ID = "batch_env/DynamicBatching-v0"


@dataclass(frozen=True)
class Cell:
    """One unit of work: a policy on one workload at one load (all seeds)."""

    group: str  # "main" or "pareto"
    workload: str
    load: float
    policy: str
    policy_params: dict[str, Any]
    env_kwargs: dict[str, Any]
    seeds: tuple[int, ...]
    env_id: str = DEFAULT_ENV_ID

    @property
    def key(self) -> str:
        """Stable file name: readable prefix plus a hash of everything the cell depends on."""
        blob = json.dumps(
            [
                self.group,
                self.workload,
                self.load,
                self.policy,
                self.policy_params,
                self.env_kwargs,
                self.seeds,
                batch_env.__version__,
            ]
            + ([self.env_id] if self.env_id != DEFAULT_ENV_ID else []),
            sort_keys=True,
            default=str,
        )
        digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
        return (
            f"{self.group}-{self.workload.replace('/', '_')}-{self.load:g}-{self.policy}-{digest}"
        )

    def check_record(self, record: Any) -> None:
        """Raise ``ValueError`` saying what is wrong unless ``record`` (read back from this
        cell's file) is a whole record of this cell, as :func:`run_cell` returns it."""
        require_keys(record, ("group", "workload", "load", "policy", "result"), "a cell record")
        require_keys(record["result"], ("policy", "seeds", "episodes"), "a cell result")
        mine = {
            "group": self.group,
            "workload": self.workload,
            "load": self.load,
            "policy": self.policy,
        }
        theirs = {k: record[k] for k in mine}
        if theirs != mine:
            raise ValueError(f"it holds the cell {theirs}, not {mine}")
        episodes = record["result"]["episodes"]
        if (
            not isinstance(episodes, list)
            or len(episodes) != len(self.seeds)
            or record["result"]["seeds"] != list(self.seeds)
        ):
            raise ValueError(f"its result does not hold one episode per seed {list(self.seeds)}")


def load_config(path_or_name: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a comparison config (a path or a name in ``experiments/configs``).

    :param path_or_name: ``"default"``, ``"demo"`` or a YAML path.
    """
    cfg = read_yaml_config(path_or_name)
    return validate_config(cfg, cfg["_path"])


def validate_config(cfg: Any, source: str = "dict") -> dict[str, Any]:
    """Check a comparison config and fill its defaults; raise ``ValueError`` naming the field.

    Idempotent: a validated config passes again unchanged.

    :param cfg: the parsed YAML mapping.
    :param source: where it came from, for messages.
    """
    where = f"config {source}"
    cfg = check_mapping(cfg, where, _KEYS, ("name", "workloads", "loads", "policies"))
    check_name(cfg["name"], where)
    _check_grid_fields(cfg, where)
    _check_pareto_numbers(cfg.get("pareto") or {}, where)
    _check_per_replica(cfg, where)
    env_id = cfg.get("env_id", DEFAULT_ENV_ID)
    if env_id not in batch_env.ENV_IDS:
        raise ValueError(f"{where}: env_id={env_id!r} is not one of {list(batch_env.ENV_IDS)}")
    cfg["env_id"] = env_id
    envs = cfg.get("envs")
    if envs is not None and not cfg.get("_expanded"):
        cfg["workloads"] = _expand_env_variants(envs, cfg["workloads"], where)
        cfg["_expanded"] = True
    cfg["seeds"] = _seed_list(cfg.get("seeds", 5), where)
    policies = {
        label: _check_policy(label, params, envs, where)
        for label, params in cfg["policies"].items()
    }
    cfg["policies"] = policies
    ref = cfg.get("reference", "smdp")
    if ref not in policies:
        raise ValueError(f"{where}: reference={ref!r} is not one of the policies {list(policies)}")
    cfg["reference"] = ref
    pareto = cfg.get("pareto")
    if pareto:
        wname = pareto.get("workload", next(iter(cfg["workloads"])))
        if wname not in cfg["workloads"]:
            raise ValueError(
                f"{where}: pareto.workload={wname!r} is not one of the workloads {list(cfg['workloads'])}"
            )
    cfg.setdefault("env", {})
    cfg.setdefault("_path", source)
    return cfg


def _check_grid_fields(cfg: dict[str, Any], where: str) -> None:
    """The grid's shapes: ``workloads`` and ``policies`` non-empty mappings of mappings,
    ``loads`` a non-empty list of positive numbers, ``env``, ``pareto`` and ``structure``
    mappings when given."""
    if (
        not isinstance(cfg["workloads"], dict)
        or not cfg["workloads"]
        or not all(isinstance(v, dict) for v in cfg["workloads"].values())
    ):
        raise ValueError(
            f"{where}: workloads={cfg['workloads']!r} must be a non-empty mapping of name -> workload "
            "mapping"
        )
    if (
        not isinstance(cfg["policies"], dict)
        or not cfg["policies"]
        or not all(v is None or isinstance(v, dict) for v in cfg["policies"].values())
    ):
        raise ValueError(
            f"{where}: policies={cfg['policies']!r} must be a non-empty mapping of label -> parameters "
            "mapping"
        )
    loads = cfg["loads"]
    if not isinstance(loads, list) or not loads or not all(is_number(x) and x > 0 for x in loads):
        raise ValueError(f"{where}: loads={loads!r} must be a non-empty list of positive numbers")
    for key in ("env", "pareto", "structure"):
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            raise ValueError(f"{where}: {key}={cfg[key]!r} must be a mapping")
    for key in ("load_is_rate", "load_per_replica"):
        if not isinstance(cfg.get(key, False), bool):
            raise ValueError(f"{where}: {key}={cfg[key]!r} must be true or false")


def _check_pareto_numbers(pareto: dict[str, Any], where: str) -> None:
    """The Pareto sweep's ``energy_weights`` (numbers >= 0) and ``load`` (a number > 0)."""
    weights = pareto.get("energy_weights", [])
    if not isinstance(weights, list) or not all(is_number(w) and w >= 0 for w in weights):
        raise ValueError(
            f"{where}: pareto.energy_weights={weights!r} must be a list of numbers >= 0"
        )
    if not (is_number(pareto.get("load", 0.6)) and pareto.get("load", 0.6) > 0):
        raise ValueError(f"{where}: pareto.load={pareto['load']!r} must be a number > 0")


def _expand_env_variants(envs: Any, workloads: dict[str, Any], where: str) -> dict[str, Any]:
    """The workloads crossed with the env variants of ``envs``: ``<variant>/<workload>``."""
    if (
        not isinstance(envs, dict)
        or not envs
        or not all(isinstance(v, dict) for v in envs.values())
    ):
        raise ValueError(
            f"{where}: envs={envs!r} must be a non-empty mapping of variant name -> env kwargs"
        )
    bad = [e for e in envs if "/" in str(e)]
    if bad:
        raise ValueError(f"{where}: envs names {bad} must not contain '/'")
    return {f"{e}/{w}": spec for e in envs for w, spec in workloads.items()}


def _seed_list(seeds: Any, where: str) -> list[int]:
    """``seeds`` as a list: a count ``n`` >= 1 becomes ``[0, ..., n - 1]``; a list of
    integers >= 0 stays as it is."""
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 1:
        return list(range(seeds))
    if not (
        isinstance(seeds, list)
        and seeds
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
    ):
        raise ValueError(
            f"{where}: seeds={seeds!r} must be a count >= 1 or a list of integers >= 0"
        )
    return seeds


def _check_policy(
    label: str, params: dict[str, Any] | None, envs: Any, where: str
) -> dict[str, Any]:
    """A copy of one policy's parameters, checked: a baseline's ``name`` must be known; an
    ``agent`` run (one, or one per env variant) must hold a ``model.zip``, whose mtime is
    added as ``_model_mtime`` so that the cell key changes when the model is retrained."""
    params = dict(params or {})
    if "agent" not in params:
        name = params.get("name", label)
        if name not in baselines.available():
            raise ValueError(
                f"{where}: policies.{label}: name={name!r} is unknown; available: {baselines.available()}"
            )
        return params
    per_variant = isinstance(params["agent"], dict)
    runs = params["agent"] if per_variant else {"": params["agent"]}
    if per_variant and envs is not None:
        missing = sorted(set(envs) - set(runs))
        if missing:
            raise ValueError(
                f"{where}: policies.{label}: agent has no run for env variant(s) {missing}"
            )
    mtimes = {}
    for variant, run in runs.items():
        model = Path(run) / "model.zip"
        if not model.exists():
            raise FileNotFoundError(
                f"{where}: policies.{label}: agent run {run!r} has no model.zip"
            )
        mtimes[variant] = model.stat().st_mtime
    # the cell key must change when the model is retrained
    params["_model_mtime"] = mtimes if per_variant else mtimes[""]
    return params


def _with_weights(env_kwargs: dict[str, Any], energy: float) -> dict[str, Any]:
    kw = json.loads(json.dumps(env_kwargs))
    kw["reward_weights"] = {**kw.get("reward_weights", {}), "energy": energy}
    return kw


def _variant_params(params: dict[str, Any], variant: str | None) -> dict[str, Any]:
    """A policy's parameters for one env variant (picks the variant's agent run)."""
    params = dict(params or {})
    for key in ("agent", "_model_mtime"):
        if isinstance(params.get(key), dict) and variant is not None:
            params[key] = params[key][variant]
    return params


def cells(cfg: dict[str, Any]) -> Iterator[Cell]:
    """Every cell of the config, main grid first, then the Pareto sweep."""
    seeds = tuple(cfg["seeds"])
    env_id = cfg.get("env_id", DEFAULT_ENV_ID)
    envs = cfg.get("envs") or {}
    for wname, wspec in cfg["workloads"].items():
        variant = wname.split("/", 1)[0] if envs else None
        base = {**cfg["env"], **(envs.get(variant) or {})}
        for load in cfg["loads"]:
            rate = load * _replica_count(base) if cfg.get("load_per_replica") else load
            kw = {**base, "workload": {**wspec, _load_key(cfg, wspec): rate}}
            for label, params in cfg["policies"].items():
                yield Cell(
                    "main",
                    wname,
                    float(load),
                    label,
                    _variant_params(params, variant),
                    kw,
                    seeds,
                    env_id,
                )
    pareto = cfg.get("pareto")
    if pareto:
        wname = pareto.get("workload", next(iter(cfg["workloads"])))
        load = float(pareto.get("load", 0.6))
        kw = {**cfg["env"], "workload": {**cfg["workloads"][wname], "load": load}}
        for w in pareto.get("energy_weights", []):
            yield Cell(
                "pareto",
                wname,
                load,
                f"smdp-we{w:g}",
                {"name": "smdp"},
                _with_weights(kw, float(w)),
                seeds,
            )
        for label, params in cfg["policies"].items():  # the other policies as points
            yield Cell("pareto-point", wname, load, label, dict(params or {}), kw, seeds)


def _replica_count(env_kwargs: dict[str, Any]) -> int:
    """The replicas of a routing env's kwargs: ``replicas``, a count or a list of specs
    (checked by :func:`_check_per_replica`)."""
    reps = env_kwargs["replicas"]
    return int(reps) if isinstance(reps, int) else len(reps)


def _check_per_replica(cfg: dict[str, Any], where: str) -> None:
    """``load_per_replica`` needs ``load_is_rate`` and every env variant's ``replicas``."""
    if not cfg.get("load_per_replica"):
        return
    if not cfg.get("load_is_rate"):
        raise ValueError(
            f"{where}: load_per_replica=true needs load_is_rate=true (each load a rate per replica)"
        )
    variants = cfg.get("envs") or {None: {}}
    for name, extra in variants.items():
        reps = {**cfg.get("env", {}), **(extra or {})}.get("replicas")
        ok = (isinstance(reps, int) and not isinstance(reps, bool) and reps >= 1) or (
            isinstance(reps, list) and reps
        )
        if not ok:
            label = "env" if name is None else f"envs.{name}"
            raise ValueError(
                f"{where}: load_per_replica=true needs {label}.replicas (a count >= 1 or a "
                f"non-empty list of replica specs), got {reps!r}"
            )


def _load_key(cfg: dict[str, Any], wspec: dict[str, Any]) -> str:
    """Where a cell's load goes in its workload: ``load`` (a fraction of the max
    throughput), or with ``load_is_rate`` the arrival rate (a trace's
    ``target_rate_per_s``, any other workload's ``rate_per_s``)."""
    if not cfg.get("load_is_rate"):
        return "load"
    return "target_rate_per_s" if wspec.get("kind") == "trace" else "rate_per_s"


def check_envs(cfg: dict[str, Any], every: list[Cell]) -> None:
    """Build the env of each workload's first cell once, so that env kwargs the env refuses
    (an unknown key, a bad value) stop the comparison before anything is written, with a
    ``ValueError`` naming the config, instead of failing every cell."""

    seen = set()
    for cell in every:
        if (cell.group, cell.workload) not in seen:
            seen.add((cell.group, cell.workload))
            where = f"config {cfg['_path']}: env of workload {cell.workload!r}"
            try:
                make_raw_env(cell.env_id, cell.env_kwargs, where).close()
            except ValueError as exc:
                msg = " ".join(str(exc).split())
                raise ValueError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def run_cell(cell: Cell) -> dict[str, Any]:
    """Evaluate one cell and return its JSON-friendly record."""
    env = gym.make(cell.env_id, **cell.env_kwargs)
    params = {k: v for k, v in cell.policy_params.items() if not k.startswith("_")}
    if "agent" in params:  # a trained run: {agent: runs/<name>}
        policy: Policy = load_policy(params["agent"], name=cell.policy)
    else:
        name = params.pop("name", cell.policy)
        policy = baselines.make(name, env=env, **params)
    s0 = cell.seeds[0]
    if list(cell.seeds) == list(range(s0, s0 + len(cell.seeds))):
        res = batch_env.evaluate(policy, env, n_episodes=len(cell.seeds), seed=s0, name=cell.policy)
    else:
        res = _evaluate_seeds(policy, env, cell)
    record = {
        "group": cell.group,
        "workload": cell.workload,
        "load": cell.load,
        "policy": cell.policy,
        "policy_params": cell.policy_params,
        "env_id": cell.env_id,
        "env_kwargs": cell.env_kwargs,
        "result": res.to_dict(),
    }
    solution = getattr(policy, "solution", None)
    if solution is not None:
        record["smdp"] = {"gain_cost_per_s": solution.gain, "threshold": solution.threshold}
    return record


def _evaluate_seeds(policy: Any, env: gym.Env, cell: Cell) -> EvaluationResult:
    out = EvaluationResult(policy=cell.policy, seeds=list(cell.seeds))
    for s in cell.seeds:
        one = batch_env.evaluate(policy, env, n_episodes=1, seed=s, name=cell.policy)
        out.episodes.extend(one.episodes)
    return out


def record_result(record: dict[str, Any]) -> EvaluationResult:
    """The :class:`EvaluationResult` of a cell record (as :func:`run_cell` returns it)."""
    r = record["result"]
    return EvaluationResult(policy=r["policy"], seeds=r["seeds"], episodes=r["episodes"])


def run_compare(
    config: str | os.PathLike[str] | dict[str, Any],
    results_dir: str | os.PathLike[str] = "results",
    progress: bool = True,
    on_cell: Callable[[Cell, bool], None] | None = None,
    backend: str = "local",
    address: str | None = None,
    max_retries: int = 3,
    num_cpus: int | None = None,
    run: Callable[[Cell], dict[str, Any]] | None = None,
    plots: bool = True,
) -> dict[str, Any]:
    """Run (or resume) a comparison and write its tables and plots.

    Cells already on disk are reused; the others run on ``backend`` and each is written
    to ``<results_dir>/<name>/cells/`` as soon as it finishes, so an interrupted run
    loses no finished cell and a rerun recomputes none. Both backends run the same
    :func:`run_cell` with the same seeds, so they give the same numbers. A cell that
    raises is recorded as failed (not written as a cell, so a rerun tries it again) and
    the others go on; the failures are listed in the result, in ``summary.md`` and in
    ``failed.json``.

    :param config: config name, path or an already loaded config dict.
    :param results_dir: parent folder; outputs go to ``<results_dir>/<name>/``.
    :param progress: show a progress bar (tqdm, when installed).
    :param on_cell: called with ``(cell, computed)`` after each finished cell
        (``computed`` is False when the cell was already on disk); not for failed cells.
    :param backend: ``"local"`` (this process, one cell after the other; the default)
        or ``"ray"`` (each cell a Ray task; needs ``pip install 'batch-env[ray]'``).
    :param address: Ray only: the cluster to join (``"auto"``, ``"ray://head:10001"``);
        default: the Ray already initialised in this process, else a new local instance.
    :param max_retries: Ray only: retries of a cell whose worker process died.
    :param num_cpus: Ray only: CPUs of a new local instance (default: all).
    :param run: the function that evaluates a cell (default :func:`run_cell`; tests pass
        a wrapper to inject faults).
    :param plots: write the per-workload plots (callers that draw their own figures of
        many workloads, such as the regime maps, turn them off; the tables stay).
    :returns: ``{"dir", "records", "computed", "reused", "failed", "backend", "markdown"}``;
        ``failed`` lists ``{"key", "group", "workload", "load", "policy", "error",
        "traceback"}`` per failed cell.
    """
    check_backend_options(backend, address, num_cpus)
    run = run_cell if run is None else run
    cfg = validate_config(config) if isinstance(config, dict) else load_config(config)
    every = list(cells(cfg))
    check_envs(cfg, every)
    out = Path(results_dir) / cfg["name"]
    store = Store(out / "cells", then="recomputing the cell")
    store.where.mkdir(parents=True, exist_ok=True)
    bar = progress_bar(len(every), f"compare {cfg['name']} ({backend})") if progress else None
    try:
        by_key, reused, failed = run_keyed(
            every,
            lambda cell: cell.key,
            run,
            store,
            describe=lambda cell: {
                "group": cell.group,
                "workload": cell.workload,
                "load": cell.load,
                "policy": cell.policy,
            },
            check=lambda cell: cell.check_record,
            bar=bar,
            on_item=on_cell,
            backend=backend,
            address=address,
            max_retries=max_retries,
            num_cpus=num_cpus,
        )
    finally:
        if bar is not None:
            bar.close()
    records = [by_key[c.key] for c in every if c.key in by_key]
    write_failures(out, failed)
    markdown = write_outputs(cfg, records, out, failed=failed, plots=plots)
    return {
        "dir": out,
        "records": records,
        "computed": len(by_key) - reused,
        "reused": reused,
        "failed": failed,
        "backend": backend,
        "markdown": markdown,
    }


def write_outputs(
    cfg: dict[str, Any],
    records: list[dict[str, Any]],
    out: Path,
    failed: list[dict[str, Any]] | None = None,
    plots: bool = True,
) -> str:
    """Write ``summary.csv``, ``summary.md`` and (``plots``) the plots; return the Markdown.

    :param failed: cells that failed (see :func:`run_compare`): counted and listed with
        their errors at the top of ``summary.md``; their rows are missing from the tables.
    """
    failed = failed or []
    main = [r for r in records if r["group"] == "main"]
    ref = cfg["reference"]
    by = {(r["workload"], r["load"], r["policy"]): record_result(r) for r in main}
    rows = []
    for r in main:
        res = by[(r["workload"], r["load"], r["policy"])]
        row: dict[str, Any] = {"workload": r["workload"], "load": r["load"], "policy": r["policy"]}
        for k in METRICS:
            row[k] = res.mean(k)
            row[f"{k}_ci95"] = res.ci95(k)
        base = by.get((r["workload"], r["load"], ref))
        d, h = (
            paired_difference(res, base, "reward_rate_per_s")
            if base is not None
            else (np.nan, np.nan)
        )
        row[f"reward_rate_vs_{ref}"] = d
        row[f"reward_rate_vs_{ref}_ci95"] = h
        row["episodes"] = len(res.episodes)
        rows.append(row)
    fields = [
        "workload",
        "load",
        "policy",
        *(x for k in METRICS for x in (k, f"{k}_ci95")),
        f"reward_rate_vs_{ref}",
        f"reward_rate_vs_{ref}_ci95",
        "episodes",
    ]
    write_csv(out / "summary.csv", fields, rows)

    lines = [
        f"# Comparison `{cfg['name']}`",
        "",
        f"Env `{cfg.get('env_id', DEFAULT_ENV_ID)}`: `{json.dumps(cfg['env'], sort_keys=True)}`"
        + "".join(
            f"; `{e}`: `{json.dumps(v, sort_keys=True)}`"
            for e, v in (cfg.get("envs") or {}).items()
        )
        + f"; seeds {cfg['seeds']} (paired: every policy "
        f"sees the same arrivals). Mean ± 95% CI over episodes; Δ = paired difference of the "
        f"reward rate against `{ref}` (positive = better than `{ref}`).",
    ]
    if failed:
        lines += [
            "",
            f"## Failed cells: {len(failed)}",
            "",
            "Not in the tables below; rerun the comparison to retry them (finished cells are reused).",
            "",
            *md_table(
                ("group", "workload", "load", "policy", "error"),
                (
                    (
                        f["group"],
                        f["workload"],
                        f"{f['load']:g}",
                        f["policy"],
                        str(f["error"]).replace("|", "/").splitlines()[0] if f["error"] else "",
                    )
                    for f in failed
                ),
            ),
        ]
    for wname in cfg["workloads"]:
        for load in cfg["loads"]:
            header = ("policy", "reward/s", f"Δ vs {ref}", "latency mean ms", "p99 ms")
            lines += [
                "",
                f"## {wname}, load {load:g}",
                "",
                *md_table(
                    (*header, "power W", "SLA att.", "batch"),
                    (
                        (
                            row["policy"],
                            *(
                                pm(row[k], row[f"{k}_ci95"])
                                for k in (
                                    "reward_rate_per_s",
                                    f"reward_rate_vs_{ref}",
                                    "latency_mean_ms",
                                    "latency_p99_ms",
                                    "power_mean_w",
                                )
                            ),
                            f"{row['sla_attainment']:.4f}",
                            f"{row['batch_size_mean']:.2f}",
                        )
                        for row in rows
                        if row["workload"] == wname and row["load"] == float(load)
                    ),
                ),
            ]
    markdown = "\n".join([*lines, "", provenance_line()]) + "\n"
    (out / "summary.md").write_text(markdown)
    if plots:
        _plots(cfg, rows, records, out)
    return markdown


def _plots(
    cfg: dict[str, Any], rows: list[dict[str, Any]], records: list[dict[str, Any]], out: Path
) -> None:
    plt = pyplot()
    if plt is None:  # core install: tables only
        return
    policies = list(cfg["policies"])
    workloads = list(cfg["workloads"])
    panels = [
        ("latency_mean_ms", "mean latency (ms)", "latency_mean_vs_load.png"),
        ("latency_p99_ms", "p99 latency (ms)", "latency_p99_vs_load.png"),
        ("power_mean_w", "mean power (W)", "power_vs_load.png"),
        ("sla_attainment", "SLA attainment", "sla_attainment_vs_load.png"),
    ]
    for key, ylabel, fname in panels:
        fig, axes = plt.subplots(
            1, len(workloads), figsize=(5.5 * len(workloads), 4), squeeze=False
        )
        for ax, wname in zip(axes[0], workloads, strict=True):
            for pol in policies:
                pts = sorted(
                    (r["load"], r[key], r[f"{key}_ci95"])
                    for r in rows
                    if r["workload"] == wname and r["policy"] == pol
                )
                if pts:
                    x, y, e = map(np.array, zip(*pts, strict=True))
                    ax.errorbar(x, y, yerr=np.nan_to_num(e), marker="o", capsize=2, label=pol)
            ax.set_title(wname)
            ax.set_xlabel("load rho")
            ax.set_ylabel(ylabel)
            if key.startswith("latency"):
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
        axes[0][-1].legend(fontsize=8)
        fig.tight_layout()
        save_figure(fig, out / fname)

    pareto = [r for r in records if r["group"] == "pareto"]
    if pareto:
        p = cfg["pareto"]
        wname = p.get("workload", workloads[0])
        load = float(p.get("load", 0.6))
        fig, ax = plt.subplots(figsize=(6, 4.5))
        pts = sorted(
            (
                float(r["env_kwargs"]["reward_weights"]["energy"]),
                record_result(r).mean("power_mean_w"),
                record_result(r).mean("latency_mean_ms"),
            )
            for r in pareto
        )
        _, pw, lat = zip(*pts, strict=True)
        ax.plot(pw, lat, "-o", color="black", label="smdp, energy weight swept")
        for w, x, y in pts:
            ax.annotate(f"{w:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        for r in records:
            if r["group"] == "pareto-point":
                res = record_result(r)
                ax.plot(
                    res.mean("power_mean_w"), res.mean("latency_mean_ms"), "s", label=r["policy"]
                )
        ax.set_xlabel("mean power (W)")
        ax.set_ylabel("mean latency (ms)")
        ax.set_yscale("log")
        ax.set_title(f"latency-power trade-off ({wname}, load {load:g})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, out / "pareto_latency_power.png")

    st = cfg.get("structure")
    if st:
        loads = st.get("loads", [0.3, 0.6, 0.9])
        weights = st.get("energy_weights", [0.5])
        fig, axes = plt.subplots(1, len(weights), figsize=(5 * len(weights), 4), squeeze=False)
        for ax, w in zip(axes[0], weights, strict=True):
            for load in loads:
                kw = _with_weights(
                    {**cfg["env"], "workload": {"kind": "poisson", "load": load}}, float(w)
                )
                env = gym.make("batch_env/DynamicBatching-v0", **kw)
                sol = solve(SMDPProblem.from_env(env))
                B = env_config(env).max_batch_size
                qmax = min(len(sol.policy), 3 * B)
                ax.step(
                    np.arange(qmax),
                    sol.policy[:qmax],
                    where="post",
                    label=f"load {load:g} (threshold {sol.threshold})",
                )
            ax.set_title(f"SMDP policy, energy weight {w:g}")
            ax.set_xlabel("queue length")
            ax.set_ylabel("batch size served (0 = wait)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, out / "smdp_policy_structure.png")


def cmd_demo(args: argparse.Namespace) -> int:
    """Train a short PPO run, then compare it with every baseline on a small config."""

    cfg = load_config(args.config)
    run = Path(args.runs_dir) / f"{cfg['name']}-ppo"
    if args.train_steps > 0:
        if not (run / "model.zip").exists():
            print(f"training PPO for {args.train_steps} steps -> {run}/", file=sys.stderr)
        from agents.train import TrainArgs, train_or_reuse

        load = float(cfg["loads"][0])
        env_kwargs = {
            **cfg["env"],
            "workload": {**next(iter(cfg["workloads"].values())), "load": load},
        }
        train_or_reuse(
            TrainArgs(
                algo="ppo",
                env_kwargs=env_kwargs,
                n_timesteps=args.train_steps,
                run_dir=str(run),
                eval_freq=0,
                checkpoint_freq=args.train_steps,
                progress=not args.json,
            )
        )
        cfg = load_config(args.config)
        cfg["policies"]["ppo-demo"] = {"agent": str(run)}
    return _print_compare(
        run_compare(cfg, results_dir=args.results_dir, progress=not args.json),
        args,
        tensorboard=run / "tb" if args.train_steps > 0 else None,
    )


def cmd_compare(args: argparse.Namespace) -> int:
    """Run (or resume) a comparison experiment from a YAML config.

    Each finished cell is written to <results-dir>/<name>/cells/ at once, so an
    interrupted run resumes without recomputing finished cells. --backend local (the
    default) runs the cells one after the other in this process; --backend ray runs each
    cell as a Ray task, on a new local Ray instance or on the cluster at --address (needs
    pip install 'batch-env[ray]'). Both give the same numbers. A cell that raises is
    recorded as failed and the others go on; the exit status is then 1 and the summary
    lists the failed cells with their errors (a rerun retries only them).
    """

    with stdout_to_stderr(args.json):
        result = run_compare(
            args.config,
            results_dir=args.results_dir,
            progress=not args.json,
            backend=args.backend,
            address=args.address,
            max_retries=args.max_retries,
            num_cpus=args.num_cpus,
        )
    return _print_compare(result, args)


def _print_compare(
    result: dict[str, Any], args: argparse.Namespace, tensorboard: Any = None
) -> int:
    failed = result.get("failed") or []
    if args.json:
        print(
            dumps(
                {
                    "dir": str(result["dir"]),
                    "records": result["records"],
                    "computed": result["computed"],
                    "reused": result["reused"],
                    "failed": failed,
                }
            )
        )
        return 1 if failed else 0
    print(result["markdown"])
    print(
        f"tables, CSV and plots in {result['dir']}/ ({result['computed']} cells computed, "
        f"{result['reused']} reused, {len(failed)} failed)"
    )
    if failed:
        print(
            f"{len(failed)} cell(s) failed (listed in summary.md and {result['dir']}/failed.json); "
            "rerun to retry them:",
            file=sys.stderr,
        )
        for f in failed:
            print(f"  {f['key']}: {f['error']}", file=sys.stderr)
    if tensorboard is not None:
        print(f"watch the agent's training: tensorboard --logdir {tensorboard}")
    return 1 if failed else 0


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "demo",
        help="compare every baseline on the default env (small) and print the table",
        description=cmd_demo.__doc__,
    )
    p.add_argument(
        "--config", default="demo", help="comparison config name or YAML path (default: demo)"
    )
    add_results_dir(p)
    p.add_argument(
        "--runs-dir", default="runs", help="parent folder of the training run (default runs)"
    )
    p.add_argument(
        "--train-steps",
        type=count(0),
        default=30_000,
        help="PPO steps to train first (0: no agent; default 30000)",
    )
    add_json(p, "the records")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "compare",
        help="run (or resume) a comparison experiment from a YAML config",
        description=cmd_compare.__doc__,
    )
    p.add_argument(
        "--config",
        default="default",
        help="config name in experiments/configs or a YAML path (default: default)",
    )
    add_results_dir(p)
    add_backend_args(p, "cell")
    p.add_argument(
        "--max-retries",
        type=count(0),
        default=3,
        help="ray backend: retries of a cell whose worker process died (default 3); a cell that "
        "raises is not retried but recorded as failed",
    )
    add_json(p, "the records")
    p.set_defaults(func=cmd_compare)
