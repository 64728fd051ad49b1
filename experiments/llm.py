"""LLM batching: throughput at the SLA and capacity (``batch-env llm``).

Runs ``experiments/configs/llm.yml`` on ``LLMBatching-v0``: for every profile, traffic and
policy, a capacity search over request rates, with the same seeds (so the same requests)
for every policy, and writes ``results/<name>/``: ``results.json`` (every evaluation),
``summary.md`` (the tables, next to the paper's figures) and two plots
(``attainment.png``: SLA attainment vs rate; ``capacity.png``: capacity per policy).
Each evaluation (a policy at a rate, all seeds) is kept in ``results/<name>/cells/`` as
it ends (:class:`experiments.harness.store.Store`), so a killed run resumes where it
stopped; a damaged evaluation file is named, moved aside and recomputed.

Definitions (ours; Pang, Li and Wang, arXiv 2503.05248, report 8-28% higher throughput
and 22% more capacity than static batching, without a formal definition in the abstract):

* **SLA attainment** at a rate: the mean over seeds of the fraction of summary requests
  that meet both the TTFT and the TPOT target (``serving["sla_attainment"]``).
* **Capacity**: the highest request rate at which the attainment is at least
  ``attainment`` (0.9). Found by a scan of the configured rates in increasing order,
  stopping at the first rate that fails, then ``bisection_steps`` bisections between the
  last passing and the first failing rate. With a predicate that can only improve as the
  SLA loosens (SLA-agnostic policies: the trajectory does not depend on the SLA), both
  the scan and the bisection give a capacity that is non-decreasing in the SLA, and the
  whole search is a deterministic function of the seeds (reproducible).
* **Throughput at the SLA**: the output tokens per second measured at the capacity rate
  (the last passing rate of the search); 0 when no rate passes.
* Gains are relative to ``reference`` (vLLM's default ``static-cap`` 256) and to the best
  static cap of the sweep.

Each ``profiles`` entry is a label (by default also the profile's name; ``profile:``
names another, so one profile can appear with several ``env_kwargs``, e.g. a smaller KV
cache) with its ``rates`` to scan.

Traffic: ``trace`` (the Azure LLM conversation trace, rescaled to each rate, from a random
offset per seed; lengths from the trace) and ``poisson`` (Poisson arrivals at the rate,
lengths sampled jointly from the same trace's rows: the matching length distribution).
The trace is a dataset (``dataset: azure-conv-2023``, fetched once with ``batch-env data
fetch azure-conv-2023``; an experiment whose dataset is not fetched stops with that
command, see docs/data.md) or a file (``path:``).
An agent (``agent: <run dir>``) is evaluated with its training grid; it is trained first
(``train`` section) when its run does not exist.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

import baselines
import batch_env
from agents.files import require_keys
from agents.policy import load_policy, read_run_config
from batch_env import evaluate
from batch_env.envs.llm_batching import LLMBatchingEnv
from batch_env.evaluate import Policy
from batch_env.provenance import provenance, provenance_line
from batch_env.workload import datasets as data
from experiments.harness.options import add_config, add_json, add_results_dir
from experiments.harness.strict_json import dumps

from .harness.config import check_name, read_yaml_config
from .harness.report import pct, pyplot, save_figure
from .harness.store import Store, digest

PAPER = {"throughput_gain": "8-28%", "capacity_gain": "22%"}
_METRICS = (
    "sla_attainment",
    "ttft_attainment",
    "tpot_attainment",
    "output_tokens_per_s",
    "goodput_rps",
    "ttft_p99_ms",
    "tpot_p99_ms",
    "preemptions",
    "kv_utilization_mean",
    "batch_size_mean",
    "power_mean_w",
)


def load_llm_config(path_or_name: str = "llm") -> dict[str, Any]:
    """Read and check the experiment config (a path or a name in ``experiments/configs``).

    :raises ValueError: naming the field for a missing or invalid entry.
    """
    cfg = read_yaml_config(path_or_name)
    src = cfg["_path"]
    for key in ("profiles", "traffic", "policies", "seeds"):
        if not cfg.get(key):
            raise ValueError(f"config {src}: field {key!r} is missing or empty")
    for key in ("profiles", "traffic", "policies", "train", "env_kwargs"):
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            raise ValueError(f"config {src}: {key}={cfg[key]!r} must be a mapping")
    check_name(cfg.setdefault("name", "llm"), f"config {src}")
    for prof, spec in cfg["profiles"].items():
        if spec is not None and not isinstance(spec, dict):
            raise ValueError(f"config {src}: profiles.{prof}={spec!r} must be a mapping with rates")
        rates = (spec or {}).get("rates")
        if (
            not rates
            or any(not isinstance(r, (int, float)) or r <= 0 for r in rates)
            or sorted(rates) != rates
        ):
            raise ValueError(
                f"config {src}: profiles.{prof}.rates={rates!r} is invalid: expected increasing rates > 0"
            )
    for name, spec in cfg["traffic"].items():
        if not isinstance(spec, dict) or spec.get("kind") not in ("trace", "poisson"):
            raise ValueError(
                f"config {src}: traffic.{name}.kind must be 'trace' or 'poisson', got {spec!r}"
            )
        if ("path" in spec) + ("dataset" in spec) != 1 and not (
            spec["kind"] == "poisson" and spec.get("lengths")
        ):
            raise ValueError(
                f"config {src}: traffic.{name} needs one of 'dataset' (a name of `batch-env data "
                "list`) or 'path' (an Azure-format CSV) or, for poisson, 'lengths'"
            )
    for label, spec in cfg["policies"].items():
        if not isinstance(spec, dict) or ("policy" in spec) == ("agent" in spec):
            raise ValueError(
                f"config {src}: policies.{label} needs exactly one of 'policy' or 'agent'"
            )
    seeds = cfg["seeds"]
    if (
        not isinstance(seeds, list)
        or any(type(x) is not int for x in seeds)
        or seeds != list(range(seeds[0], seeds[0] + len(seeds)))
    ):
        raise ValueError(
            f"config {src}: seeds={seeds!r} is invalid: expected consecutive integers, e.g. [0, 1, 2]"
        )
    if cfg.get("reference") not in cfg["policies"]:
        raise ValueError(
            f"config {src}: reference={cfg.get('reference')!r} is not one of the policies"
        )
    cfg.setdefault("name", "llm")
    cfg.setdefault("attainment", 0.9)
    cfg.setdefault("bisection_steps", 4)
    cfg.setdefault("env_kwargs", {})
    return cfg


def _traffic(spec: dict[str, Any], rate: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The workload and lengths of a traffic entry at ``rate`` requests/s."""
    source: dict[str, Any] = {k: spec[k] for k in ("path", "dataset") if k in spec}
    if spec["kind"] == "trace":
        return {"kind": "trace", **source, "target_rate_per_s": rate, "random_offset": True}, None
    lengths = spec.get("lengths") or {"kind": "empirical", **source}
    return {"kind": "poisson", "rate_per_s": rate}, lengths


class _Cell:
    """One (profile, traffic, policy): evaluates rates on the config's seeds. Each rate's
    evaluation is kept in ``store`` (the harness's store: a killed run resumes from the
    evaluations it finished) under a key that hashes everything it depends on, and in
    :attr:`cache` for this run."""

    def __init__(
        self,
        cfg: dict[str, Any],
        profile: str,
        traffic: str,
        label: str,
        store: Store | None = None,
    ) -> None:
        self.cfg, self.profile, self.traffic, self.label = cfg, profile, traffic, label
        self.spec = dict(cfg["policies"][label])
        self.cache: dict[float, dict[str, float]] = {}
        self.store = store
        self.env_kwargs = {
            **cfg["env_kwargs"],
            **(cfg["profiles"][profile].get("env_kwargs") or {}),
        }
        self._agent = None
        if "agent" in self.spec:
            run_cfg = read_run_config(self.spec["agent"])
            # the action space the agent was trained on: its caps (and budgets)
            for key in ("grid", "budget_grid", "scheduler"):
                if run_cfg["env_kwargs"].get(key) is not None:
                    self.env_kwargs[key] = run_cfg["env_kwargs"][key]
            self._agent = load_policy(self.spec["agent"], name=label)

    def key(self, rate: float) -> str:
        """The store key of the evaluation at ``rate``: readable, plus a hash of the
        profile, traffic, policy (an agent's model bytes), env kwargs, seeds, rate and
        the package version."""

        model = Path(self.spec["agent"]) / "model.zip" if "agent" in self.spec else None
        blob = digest(
            self.cfg["profiles"][self.profile],
            self.cfg["traffic"][self.traffic],
            self.spec,
            model.read_bytes() if model is not None and model.is_file() else None,
            self.env_kwargs,
            list(self.cfg["seeds"]),
            rate,
            batch_env.__version__,
            length=10,
        )
        return f"{self.profile}-{self.traffic}-{self.label}-{rate:g}-{blob}"

    def evaluate(self, rate: float) -> dict[str, float]:
        """Means over the seeds of the summary metrics at ``rate`` (kept)."""
        if rate in self.cache:
            return self.cache[rate]
        if self.store is not None:
            self.cache[rate] = self.store.cached(
                self.key(rate), lambda: self._evaluate(rate), _check_evaluation
            )
            return self.cache[rate]
        self.cache[rate] = self._evaluate(rate)
        return self.cache[rate]

    def _evaluate(self, rate: float) -> dict[str, float]:

        workload, lengths = _traffic(self.cfg["traffic"][self.traffic], rate)
        prof = self.cfg["profiles"][self.profile].get("profile", self.profile)
        env = LLMBatchingEnv(profile=prof, workload=workload, lengths=lengths, **self.env_kwargs)
        policy: Policy
        if self._agent is not None:
            policy = self._agent
        else:
            params = {k: v for k, v in self.spec.items() if k != "policy"}
            policy = baselines.make(self.spec["policy"], env=env, **params)
        seeds = self.cfg["seeds"]
        res = evaluate(policy, env, n_episodes=len(seeds), seed=int(seeds[0]), name=self.label)
        out = {k: float(np.nanmean(res.values(k))) for k in _METRICS}
        out["rate_per_s"] = rate
        return out


def _check_evaluation(record: Any) -> None:
    """Raise ``ValueError`` unless ``record`` is a whole evaluation (every metric)."""
    require_keys(record, (*_METRICS, "rate_per_s"), "an LLM evaluation")


def capacity_search(
    evaluate_at, rates: list[float], attainment: float, steps: int
) -> dict[str, Any]:
    """The highest rate whose attainment is >= ``attainment`` (scan, then bisection).

    :param evaluate_at: ``rate -> metrics`` (a dict with ``sla_attainment``).
    :param rates: increasing rates to scan.
    :param attainment: the target fraction of requests meeting both SLAs.
    :param steps: bisections between the last passing and the first failing rate.
    :returns: ``capacity_rps`` (0 if the first rate fails; the last rate if none fails,
        flagged ``capped``), ``throughput_at_sla_tokens_per_s`` and the metrics there.
    """
    lo, hi = None, None
    for r in rates:
        if evaluate_at(r)["sla_attainment"] >= attainment:
            lo = r
        else:
            hi = r
            break
    if lo is not None and hi is not None:
        for _ in range(steps):
            mid = round((lo + hi) / 2.0, 6)
            if evaluate_at(mid)["sla_attainment"] >= attainment:
                lo = mid
            else:
                hi = mid
    at = evaluate_at(lo) if lo is not None else None
    return {
        "capacity_rps": lo if lo is not None else 0.0,
        "capped": hi is None,
        "throughput_at_sla_tokens_per_s": at["output_tokens_per_s"] if at else 0.0,
        "at_capacity": at,
    }


def train_missing_agents(cfg: dict[str, Any], progress: bool = False) -> list[str]:
    """Train the agents of the config's ``train`` section whose run has no ``model.zip``
    (an interrupted one is resumed: see :func:`agents.train.train_or_reuse`)."""

    from agents.train import RUN_SETTINGS, TrainArgs, train_or_reuse

    done = []
    for label, spec in (cfg.get("train") or {}).items():
        where = f"config {cfg['_path']}: train.{label}"
        if label not in cfg["policies"] or "agent" not in cfg["policies"][label]:
            raise ValueError(f"{where}: policies.{label} has no agent run to train")
        unknown = sorted(set(spec or {}) - set(RUN_SETTINGS)) if isinstance(spec, dict) else None
        if unknown is None or unknown:
            raise ValueError(
                f"{where}={spec!r} is invalid: expected a mapping of training settings "
                f"{list(RUN_SETTINGS)}" + (f"; unknown: {unknown}" if unknown else "")
            )
        run = cfg["policies"][label]["agent"]
        existed = (Path(run) / "model.zip").exists()
        train_or_reuse(dataclasses.replace(TrainArgs(**spec), run_dir=run, progress=progress))
        if not existed:
            done.append(run)
    return done


def run_llm(
    config: str = "llm", out_dir: str | None = None, progress: bool = True, train: bool = True
) -> dict[str, Any]:
    """Run the experiment and write its results.

    :param config: a config name in ``experiments/configs`` or a YAML path.
    :param out_dir: output folder (default ``results/<name>``).
    :param progress: print a line per finished cell.
    :param train: train missing agent runs first (else a missing run is an error).
    :returns: the results (``cells``, ``gains``, ``markdown``, ``dir``, ``seconds``).
    """
    cfg = load_llm_config(config)
    for name, spec in cfg["traffic"].items():
        if "dataset" in spec:  # not fetched: an error naming `batch-env data fetch NAME`
            try:
                data.path(spec["dataset"])
            except data.DatasetError as exc:
                raise FileNotFoundError(f"traffic.{name}: {exc}") from None
        if "path" in spec and not Path(spec["path"]).is_file():
            raise FileNotFoundError(
                f"traffic.{name}: path {spec['path']!r} not found (name a dataset instead, e.g. "
                "dataset: azure-conv-2023, see `batch-env data list`)"
            )
    if train:
        train_missing_agents(cfg, progress=progress)
    out = Path(out_dir or Path("results") / cfg["name"])
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out / "cells", then="recomputing the evaluation")
    t0 = time.time()
    results: dict[str, Any] = {
        "config": {k: v for k, v in cfg.items() if k != "_path"},
        "cells": [],
    }
    for prof, pspec in cfg["profiles"].items():
        for traffic in cfg["traffic"]:
            for label in cfg["policies"]:
                only = cfg["policies"][label].get("profiles")
                if only is not None and prof not in only:
                    continue
                params = {k: v for k, v in cfg["policies"][label].items() if k != "profiles"}
                cell = _Cell(
                    {**cfg, "policies": {**cfg["policies"], label: params}},
                    prof,
                    traffic,
                    label,
                    store,
                )
                t = time.time()
                cap = capacity_search(
                    cell.evaluate, pspec["rates"], cfg["attainment"], cfg["bisection_steps"]
                )
                rec = {
                    "profile": prof,
                    "traffic": traffic,
                    "policy": label,
                    **cap,
                    "evaluations": [cell.cache[r] for r in sorted(cell.cache)],
                    "seconds": time.time() - t,
                }
                results["cells"].append(rec)
                if progress:
                    print(
                        f"{prof:18s} {traffic:8s} {label:14s} capacity {cap['capacity_rps']:.3f} req/s "
                        f"throughput@SLA {cap['throughput_at_sla_tokens_per_s']:.0f} tok/s "
                        f"({rec['seconds']:.1f} s)",
                        flush=True,
                    )
    results["seconds"] = time.time() - t0
    results["gains"] = gains(cfg, results["cells"])
    results["provenance"] = provenance()
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    md = markdown(cfg, results) + "\n" + provenance_line(results["provenance"]) + "\n"
    (out / "summary.md").write_text(md)
    plots(cfg, results, out)
    return {**results, "markdown": md, "dir": str(out)}


def gains(cfg: dict[str, Any], cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (profile, traffic, policy): capacity and throughput at the SLA relative to the
    reference and to the best static cap (``policy: static-cap``) of the sweep."""
    rows = []
    static = {label for label, s in cfg["policies"].items() if s.get("policy") == "static-cap"}
    for c in cells:
        group = [d for d in cells if d["profile"] == c["profile"] and d["traffic"] == c["traffic"]]
        ref = next(d for d in group if d["policy"] == cfg["reference"])
        best = max((d for d in group if d["policy"] in static), key=lambda d: d["capacity_rps"])

        def rel(a: float, b: float) -> float:
            return a / b - 1.0 if b > 0 else math.nan

        rows.append(
            {
                "profile": c["profile"],
                "traffic": c["traffic"],
                "policy": c["policy"],
                "capacity_rps": c["capacity_rps"],
                "capped": c["capped"],
                "throughput_at_sla_tokens_per_s": c["throughput_at_sla_tokens_per_s"],
                "capacity_gain_vs_reference": rel(c["capacity_rps"], ref["capacity_rps"]),
                "throughput_gain_vs_reference": rel(
                    c["throughput_at_sla_tokens_per_s"], ref["throughput_at_sla_tokens_per_s"]
                ),
                "capacity_gain_vs_best_static": rel(c["capacity_rps"], best["capacity_rps"]),
                "best_static": best["policy"],
            }
        )
    return rows


def markdown(cfg: dict[str, Any], results: dict[str, Any]) -> str:
    """The summary tables."""
    # tables written by hand (here and in _common_rate_table): their rule is "|---|---|",
    # md_table's "| --- | --- |", and a cell without a rate passing is "| |", md_table's "|  |"
    lines = [
        f"# LLM batching: capacity and throughput at the SLA ({cfg['name']})",
        "",
        f"TTFT <= {cfg['env_kwargs'].get('ttft_sla_ms', 1000)} ms and TPOT <= "
        f"{cfg['env_kwargs'].get('tpot_sla_ms', 50)} ms; capacity = highest rate with >= "
        f"{100 * cfg['attainment']:.0f}% of requests meeting both (mean of seeds {cfg['seeds']}); "
        f"throughput at the SLA = output tokens/s at that rate. Gains vs `{cfg['reference']}` "
        f"(vLLM's default cap) and vs the best static cap. The paper reports "
        f"{PAPER['throughput_gain']} throughput and {PAPER['capacity_gain']} capacity over static batching.",
        "",
        "| profile | traffic | policy | capacity (req/s) | throughput at SLA (tok/s) | capacity vs ref | "
        "throughput vs ref | capacity vs best static |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in results["gains"]:
        cap = f"{g['capacity_rps']:.3f}" + (" (>= the largest rate)" if g["capped"] else "")
        lines.append(
            f"| {g['profile']} | {g['traffic']} | {g['policy']} | {cap} | "
            f"{g['throughput_at_sla_tokens_per_s']:.0f} | {pct(g['capacity_gain_vs_reference'])} | "
            f"{pct(g['throughput_gain_vs_reference'])} | {pct(g['capacity_gain_vs_best_static'])} |"
        )
    lines += [
        "",
        "At the capacity rate (means over seeds):",
        "",
        "| profile | traffic | policy | attainment | goodput (req/s) | TTFT p99 (ms) | "
        "TPOT p99 (ms) | preemptions | KV util | mean batch |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in results["cells"]:
        a = c["at_capacity"]
        if a is None:
            lines.append(
                f"| {c['profile']} | {c['traffic']} | {c['policy']} | (no rate passes) | | | | | | |"
            )
            continue
        lines.append(
            f"| {c['profile']} | {c['traffic']} | {c['policy']} | {a['sla_attainment']:.3f} | "
            f"{a['goodput_rps']:.3f} | {a['ttft_p99_ms']:.0f} | {a['tpot_p99_ms']:.1f} | "
            f"{a['preemptions']:.1f} | "
            f"{a['kv_utilization_mean']:.2f} | {a['batch_size_mean']:.1f} |"
        )
    lines += _common_rate_table(results["cells"], cfg["attainment"])
    lines += ["", f"Run time: {results['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def common_rates(cells: list[dict[str, Any]], attainment: float) -> dict[str, dict[str, float]]:
    """Per traffic, rates at which every cell of that traffic (every profile and policy)
    was evaluated, where prefill-first and chunked scheduling and each budget rule meet
    the same load: ``"all meet"``, the highest at which every cell's attainment is at
    least ``attainment``, and ``"overload"``, the highest of all (when higher). A traffic
    without a shared rate is left out."""
    out: dict[str, dict[str, float]] = {}
    for traffic in dict.fromkeys(c["traffic"] for c in cells):
        evs = [
            {e["rate_per_s"]: e for e in c["evaluations"]} for c in cells if c["traffic"] == traffic
        ]
        shared = sorted(set.intersection(*(set(e) for e in evs)))
        if not shared:
            continue
        rates: dict[str, float] = {}
        meet = [r for r in shared if all(e[r]["sla_attainment"] >= attainment for e in evs)]
        if meet:
            rates["all meet"] = meet[-1]
        if not meet or shared[-1] > meet[-1]:
            rates["overload"] = shared[-1]
        out[traffic] = rates
    return out


def _common_rate_table(cells: list[dict[str, Any]], attainment: float) -> list[str]:
    """The metrics of every cell at its traffic's :func:`common_rates`."""
    rates = common_rates(cells, attainment)
    if not rates:
        return []
    lines = [
        "",
        "At common rates per traffic (means over seeds): 'all meet', the highest rate at "
        f"which every policy still meets {100 * attainment:.0f}% attainment; 'overload', the "
        "highest rate every policy was evaluated at:",
        "",
        "| traffic | rate (req/s) | profile | policy | attainment | goodput (req/s) | "
        "TTFT p99 (ms) | TPOT p99 (ms) | preemptions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for traffic, at in rates.items():
        for kind, rate in at.items():
            for c in cells:
                if c["traffic"] != traffic:
                    continue
                (a,) = [e for e in c["evaluations"] if e["rate_per_s"] == rate]
                lines.append(
                    f"| {traffic} | {rate:g} ({kind}) | {c['profile']} | {c['policy']} | "
                    f"{a['sla_attainment']:.3f} | {a['goodput_rps']:.3f} | "
                    f"{a['ttft_p99_ms']:.0f} | {a['tpot_p99_ms']:.1f} | {a['preemptions']:.1f} |"
                )
    return lines


def plots(cfg: dict[str, Any], results: dict[str, Any], out: Path) -> None:
    """``attainment.png`` (attainment vs rate) and ``capacity.png`` (capacity per policy)."""
    plt = pyplot()

    panels = [(p, t) for p in cfg["profiles"] for t in cfg["traffic"]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (p, t) in zip(axes[0], panels, strict=True):
        for c in results["cells"]:
            if c["profile"] == p and c["traffic"] == t:
                ev = c["evaluations"]
                ax.plot(
                    [e["rate_per_s"] for e in ev],
                    [e["sla_attainment"] for e in ev],
                    marker=".",
                    label=c["policy"],
                )
        ax.axhline(cfg["attainment"], color="grey", lw=0.8, ls="--")
        ax.set_title(f"{p} / {t}", fontsize=9)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel("SLA attainment")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out / "attainment.png")

    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (p, t) in zip(axes[0], panels, strict=True):
        cs = [c for c in results["cells"] if c["profile"] == p and c["traffic"] == t]
        ax.bar(range(len(cs)), [c["capacity_rps"] for c in cs])
        ax.set_xticks(range(len(cs)), [c["policy"] for c in cs], rotation=60, fontsize=7)
        ax.set_title(f"{p} / {t}", fontsize=9)
        ax.set_ylabel(f"capacity (req/s, {100 * cfg['attainment']:.0f}% attainment)")
    fig.tight_layout()
    save_figure(fig, out / "capacity.png")


def cmd_llm(args: argparse.Namespace) -> int:
    """LLM batching on LLMBatching-v0: capacity and throughput at the SLA of static caps,
    Pang et al.'s memory-aware / SLA-feedback / combined policies and a PPO agent."""

    name = args.name if args.name is not None else load_llm_config(args.config)["name"]
    check_name(name, "--name")
    out = f"{args.results_dir}/{name}"
    result = run_llm(args.config, out_dir=out, progress=not args.json, train=not args.no_train)
    if args.json:
        print(dumps(result["gains"], indent=1))
    else:
        print(result["markdown"])
        print(f"tables and plots in {result['dir']}/")
    return 0


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "llm",
        help="LLM batching: capacity and throughput at the SLA per policy, plots",
        description=cmd_llm.__doc__,
    )
    add_config(p, "llm")
    add_results_dir(p)
    p.add_argument("--name", default=None, help="output folder name (default: the config's name)")
    p.add_argument(
        "--no-train", action="store_true", help="do not train missing agent runs (error instead)"
    )
    add_json(p, "the gains")
    p.set_defaults(func=cmd_llm)
