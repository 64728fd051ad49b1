"""Learned agents on the benchmark tasks (the ``tasks`` part of ``batch-env agents``).

Each entry of an agents config's ``tasks`` mapping names a registered benchmark task
(:mod:`batch_env.tasks`) and how to train on it::

    tasks:
      any-load:
        task: batch_env/AnyLoad-v0
        centering_gain: smdp-by-load          # overrides the config's
        train_env_kwargs: {horizon_requests: 2000}
        hyperparams: ppo-arrivals.yml         # optional; relative to the config's folder
        protocol: true                        # evaluate on the task's protocol (default)
        check:                                # optional: fixed loads, other seeds
          loads: [0.1, 0.3, 0.5, 0.7, 0.9]
          seeds: [3000, 3001, 3002, 3003]
          horizon_requests: 100000
          env_kwargs: {}                      # e.g. a wider load_range
          baselines: [smdp-adaptive, {graph-0: {policy: graph, window_ms: 0}},
                      {triton: {policy: timeout, max_queue_delay_ms: 32,
                                env_kwargs: {decision_interval_ms: 0.5}}}]
          gap: {from: [smdp-adaptive, triton], to: smdp-oracle}   # optional

Every training seed's run is trained once (``<runs_dir>/<config name>/<entry>-s<seed>``;
finished runs are reused, interrupted ones resumed) and evaluated deterministically:

* on the task's **protocol** (:func:`experiments.benchmark.run_protocol`, the harness
  ``batch-env benchmark`` uses), the result kept in the run's folder
  (``benchmark_protocol.json``, reused while the model file and protocol are the same).
  The agent's figure is the mean over training runs with a Student-t CI over them; it
  is compared with every stored reference of the task (``tasks_references.json``)
  paired per held-out seed (same arrivals; the run-averaged figure per seed against the
  reference's, with the protocol's stratified CI on load-grid tasks), and scored with
  the paired normalized score. On a task whose env has request classes (``classes`` in
  its kwargs, e.g. ``LLMTwoClasses-v0``) each class's figures are kept too (SLA
  attainment, TTFT and TPOT p99, mean latency, goodput; ``run_protocol``'s ``classes``)
  and set against greedy's and the best realizable reference's, whose protocols are run
  again for them (cached under ``_baselines/``), paired per seed;
* at the **check** loads, where given: one episode per (load, seed), every summary
  metric kept, the same for each check baseline (cached under
  ``<runs_dir>/<config name>/_baselines/``; an oracle baseline, ``smdp-oracle``, is the
  only one whose env shows the hidden phase), with the exact SMDP optimum at each load
  where the task's bound is per load (``smdp-per-seed``). The agent's per-load figure
  is the mean over runs of each run's mean over the seeds, against each baseline paired
  per seed. A baseline's own ``env_kwargs`` are added to its env only (e.g. ticks, so
  that a timeout can fire on a task without them; the arrivals and service times do not
  depend on the decision epochs, so the episodes stay paired per seed). With ``gap``,
  each load also gets the share of the gap between the cheapest of the ``from``
  baselines and the ``to`` baseline (a bound) that each run closes, in percent
  (``gap_closed``: 100 = at ``to``, 0 = no better than the best of ``from``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import baselines
import batch_env
from agents import load_policy
from agents.common import check_int
from agents.files import read_json
from agents.settings import DEFAULTS
from baselines.smdp import gains_at_loads
from batch_env import tasks

from .harness.backends import process_pool
from .harness.config import check_mapping
from .harness.report import md_table, pm_fixed, pyplot, save_figure
from .harness.stats import aggregate_scores, ci_half_width, gap_closed, grouped_mean, mean_ci
from .harness.store import Store, digest

#: what happens to a damaged evaluation file (the store's damage policy)
THEN = "recomputing the evaluation"

ENTRY_KEYS = {
    "task",
    "algo",
    "n_timesteps",
    "train_seeds",
    "train_env_kwargs",
    "centering_gain",
    "hyperparams",
    "protocol",
    "check",
    "warm_start",
    "keep_best",
    "eval_freq",
    "eval_episodes",
    "method",
}
CHECK_KEYS = {"loads", "seeds", "horizon_requests", "env_kwargs", "baselines", "gap"}
#: the check keys that say which episodes run (the rest, baselines and gap, only what is
#: compared): an agent's or a baseline's cached episodes depend on these alone
EPISODE_KEYS = ("loads", "seeds", "horizon_requests", "env_kwargs")
#: the summary metrics a check keeps per episode (those an episode's summary has)
CHECK_METRICS = (
    "reward_rate_per_s",
    "latency_mean_ms",
    "latency_p99_ms",
    "sla_attainment",
    "drop_rate",
    "power_mean_w",
    "batch_size_mean",
)
DEFAULT_CHECK_HORIZON = 20_000
#: a run whose final training evaluation scores below this (normalized, paired with the
#: task's greedy and best reference on the same episodes) has diverged: see
#: :func:`diverged`
DIVERGED_SCORE = -10.0


def diverged(run: str | Path) -> dict[str, Any] | None:
    """The figures of a run that diverged in training, or None.

    A run has diverged when its final evaluation (``final_evaluation.json``: the last
    model, in the mode the run acts in (:func:`agents.policy.run_acting_mode`), on the
    training's evaluation episodes, paired with the task's greedy and best reference
    there) has a normalized score below :data:`DIVERGED_SCORE`: it costs more than
    greedy by ten times what separates greedy from the best reference, e.g. a policy that
    holds the LLM cap at 1 and lets the queue grow without bound. Such a run is not
    evaluated (neither on the protocol nor on a check): its episodes would run to the
    task's step net, each step slower as the queue grows (hours for a protocol); it is
    reported with these figures instead. A run whose acting mode's episodes did not even
    end within the evaluation's step bound (``agents.callbacks.unfinished``) has diverged
    too (``unfinished`` says where it was cut). A run without that record (a task
    without a score) is never counted as diverged.
    """
    from agents.policy import read_run_config, run_acting_mode

    path = Path(run) / "final_evaluation.json"
    if not path.exists():
        return None
    rec = read_json(path, "evaluating the run as usual")
    if not isinstance(rec, dict):
        return None
    mode = run_acting_mode(run)
    figures = rec.get(mode)
    if not isinstance(figures, dict):
        return None
    if figures.get("unfinished"):
        return {
            "run": str(run),
            "timesteps": rec.get("timesteps"),
            "acting": mode,
            "unfinished": figures["unfinished"],
        }
    ref = rec.get("reference") or {}
    score = ref.get("normalized_score")
    if not isinstance(score, (int, float)) or "reward_rate_per_s" not in figures:
        return None
    compared = ref.get("agent_mode", "deterministic")
    if compared != mode:  # a run written before the acting mode: its reference is the other's
        low, top = read_run_config(run).get("score_reference") or (0.0, 0.0)
        if top == low:
            return None
        other = rec[compared]["reward_rate_per_s"][0]
        score = score + (figures["reward_rate_per_s"][0] - other) / (top - low)
    if not score < DIVERGED_SCORE:
        return None
    return {
        "run": str(run),
        "timesteps": rec.get("timesteps"),
        "acting": mode,
        "normalized_score": float(score),
        "reward_rate_per_s": figures["reward_rate_per_s"][0],
        "reference_reward_rate_per_s": ref["reward_rate_per_s"][0],
        "batch_size_mean": figures.get("batch_size_mean", [math.nan])[0],
    }


def check_seeds(where: str, seeds: Any) -> list[int]:
    """``seeds`` when it is a non-empty list of integers >= 0, else ``ValueError``."""
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)
    ):
        raise ValueError(f"{where}={seeds!r} must be a non-empty list of integers >= 0")
    return seeds


def check_entry(where: str, entry: Any, config_dir: Path) -> dict[str, Any]:
    """One ``tasks`` entry, checked (``ValueError`` naming the field, the value and what
    is allowed); ``hyperparams`` is resolved against ``config_dir``."""

    entry = dict(check_mapping(entry, where, ENTRY_KEYS, ("task",)))
    if entry["task"] not in tasks.TASKS:
        raise ValueError(
            f"{where}: task={entry['task']!r} is not a benchmark task: {', '.join(tasks.TASKS)}"
        )
    if "n_timesteps" in entry:
        # 0: a warm start's cloned policy, before any RL
        check_int(f"{where}: n_timesteps", entry["n_timesteps"], 0 if "warm_start" in entry else 1)
    if "train_seeds" in entry:
        check_seeds(f"{where}: train_seeds", entry["train_seeds"])
    if not isinstance(entry.get("train_env_kwargs", {}), dict):
        raise ValueError(
            f"{where}: train_env_kwargs={entry['train_env_kwargs']!r} must be a mapping"
        )
    if not isinstance(entry.get("protocol", True), bool):
        raise ValueError(f"{where}: protocol={entry['protocol']!r} must be true or false")
    if "hyperparams" in entry:
        path = Path(str(entry["hyperparams"]))
        path = path if path.is_absolute() else config_dir / path
        if not path.is_file():
            raise ValueError(f"{where}: hyperparams={entry['hyperparams']!r}: no file {path}")
        try:  # as the run records it: relative to here where it can be
            path = path.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            pass
        entry["hyperparams"] = str(path)
    for key in ("eval_freq", "eval_episodes"):
        if key in entry:
            check_int(f"{where}: {key}", entry[key], 1)
    if not isinstance(entry.get("keep_best", DEFAULTS["keep_best"]), bool):
        raise ValueError(f"{where}: keep_best={entry['keep_best']!r} must be true or false")
    if "warm_start" in entry:
        from agents.warm_start import check_warm_start

        entry["warm_start"] = check_warm_start(entry["warm_start"], f"{where}: warm_start")
    if "check" in entry:
        entry["check"] = _check_check(f"{where}: check", entry["check"], entry["task"])
    if not entry.get("protocol", True) and "check" not in entry:
        raise ValueError(f"{where}: with protocol: false give a check, or nothing is evaluated")
    return entry


def _check_check(where: str, check: Any, task_id: str) -> dict[str, Any]:

    check = dict(check_mapping(check, where, CHECK_KEYS, ("seeds",)))
    drawn = bool(tasks.get(task_id).eval_loads)
    if "loads" not in check:
        if drawn:
            raise ValueError(f"{where}: {task_id} draws its load per episode: give loads")
        check["loads"] = [None]  # the task's own traffic
        loads = None
    else:
        loads = check["loads"]
        if not drawn:
            raise ValueError(
                f"{where}: loads={loads!r}: {task_id} does not draw its load (no "
                "load_range), so it has no loads to set; leave loads out"
            )
    if loads is not None and (
        not isinstance(loads, list)
        or not loads
        or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1 for x in loads
        )
    ):
        raise ValueError(f"{where}: loads={loads!r} must be a non-empty list of loads in (0, 1)")
    check_seeds(f"{where}: seeds", check["seeds"])
    if "horizon_requests" in check:
        check_int(f"{where}: horizon_requests", check["horizon_requests"], 1)
    if not isinstance(check.get("env_kwargs", {}), dict):
        raise ValueError(f"{where}: env_kwargs={check['env_kwargs']!r} must be a mapping")
    check["baselines"] = [
        _baseline_spec(f"{where}: baselines", b, task_id) for b in check.get("baselines", [])
    ]
    if "gap" in check:
        labels = [b["label"] for b in check["baselines"]]
        gap = check["gap"]
        ok = (
            isinstance(gap, dict)
            and set(gap) == {"from", "to"}
            and isinstance(gap["from"], list)
            and gap["from"]
            and all(x in labels for x in gap["from"])
            and gap["to"] in labels
            and gap["to"] not in gap["from"]
        )
        if not ok:
            raise ValueError(
                f"{where}: gap={gap!r} must be {{from: [<baseline label>, ...], to: <another "
                f"baseline label>}}, labels among the check's baselines {labels}"
            )
    return check


def _baseline_spec(where: str, spec: Any, task_id: str) -> dict[str, Any]:
    """``{"label", "policy", "params"}`` of a check baseline: a baseline name or a task's
    reference label (its stored tuned parameters), or ``{label: {policy: name, **params}}``."""
    from .benchmark import task_policy

    if isinstance(spec, str):
        if spec not in baselines.available():
            from .benchmark import REFERENCE_POLICIES

            if spec not in REFERENCE_POLICIES.get(task_id, {}):
                raise ValueError(
                    f"{where}: {spec!r} is neither a baseline ({', '.join(baselines.available())}) "
                    f"nor a reference label of {task_id}"
                )
        name, params = task_policy(task_id, spec)
        return {"label": spec, "policy": name, "params": params}
    if isinstance(spec, dict) and len(spec) == 1:
        ((label, body),) = spec.items()
        if isinstance(body, dict) and body.get("policy") in baselines.available():
            params = {k: v for k, v in body.items() if k not in ("policy", "env_kwargs")}
            out = {"label": str(label), "policy": body["policy"], "params": params}
            if "env_kwargs" in body:
                if not isinstance(body["env_kwargs"], dict):
                    raise ValueError(
                        f"{where}: {label}: env_kwargs={body['env_kwargs']!r} must be a mapping "
                        "of env kwargs added to this baseline's env"
                    )
                out["env_kwargs"] = dict(body["env_kwargs"])
            return out
    raise ValueError(
        f"{where}: {spec!r} must be a baseline name, a reference label, or "
        "{label: {policy: <baseline>, <parameter>: <value>, ..., env_kwargs: {...}}}"
    )


def train_args(cfg: dict[str, Any], name: str, seed: int, run_dir: str) -> Any:
    """The training run of entry ``name`` and ``seed`` (the entry's keys override the
    config's ``algo``, ``n_timesteps`` and ``centering_gain``)."""
    from agents.train import TrainArgs

    e = cfg["tasks"][name]
    n = int(e.get("n_timesteps", cfg["n_timesteps"]))
    # the task's own id, or its base id where the entry changes the problem on purpose
    env_id, env_kwargs = tasks.make_args(e["task"], **e.get("train_env_kwargs", {}))
    return TrainArgs(
        algo=e.get("algo", cfg["algo"]),
        env_id=env_id,
        env_kwargs=env_kwargs,
        hyperparams=e.get("hyperparams"),
        n_timesteps=n,
        seed=seed,
        run_dir=run_dir,
        centering_gain=str(
            e.get("centering_gain", cfg.get("centering_gain", DEFAULTS["centering_gain"]))
        ),
        eval_freq=int(e.get("eval_freq", n // 3)),
        eval_episodes=e.get("eval_episodes"),
        keep_best=e.get("keep_best"),
        warm_start=e.get("warm_start"),
        progress=False,
    )


def _train_job(job: tuple[dict[str, Any], str, int, str]) -> str:
    from agents.train import train_or_reuse

    cfg, name, seed, run_dir = job
    train_or_reuse(train_args(cfg, name, seed, run_dir))
    return run_dir


def check_episodes(
    make_policy: Any,
    task_id: str,
    check: dict[str, Any],
    oracle: bool = False,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{load: {metric: [per seed]}}`` of ``make_policy(env)`` at each check load
    (``oracle``: the env shows what the task hides, for an oracle baseline only;
    ``env_kwargs``: added to the check's, for one baseline's env)."""

    env_id, kw = tasks.make_args(
        task_id,
        horizon_requests=int(check.get("horizon_requests", DEFAULT_CHECK_HORIZON)),
        **{**check.get("env_kwargs", {}), **(env_kwargs or {})},
        **({"oracle_info": True} if oracle else {}),
    )
    env = gym.make(env_id, **kw)
    try:
        policy = make_policy(env)
        out: dict[str, Any] = {}
        for load in check["loads"]:
            per: dict[str, list[float]] = {m: [] for m in CHECK_METRICS}
            opts = None if load is None else {"load": load}
            for s in check["seeds"]:
                res = batch_env.evaluate(policy, env, n_episodes=1, seed=s, options=opts)
                ep = res.episodes[0]
                for m in CHECK_METRICS:
                    per[m].append(float(ep.get(m, np.nan)))
            out[str(load)] = per
        return out
    finally:
        env.close()


def _episodes_part(check: dict[str, Any] | None) -> dict[str, Any]:
    """The part of a check that says which episodes run (:data:`EPISODE_KEYS`)."""
    return {k: v for k, v in (check or {}).items() if k in EPISODE_KEYS}


def _model_digest(run: Path) -> str:
    """The run's model, and how it acts where it samples (agents.policy.run_acting_mode):
    a cached evaluation of its most likely actions is not one of its draws."""
    from agents.policy import run_acting_mode

    model = digest((run / "model.zip").read_bytes())
    mode = run_acting_mode(run)
    return model if mode == "deterministic" else digest(model, mode)


def _eval_job(job: tuple[str, str, Any, dict[str, Any] | None, str]) -> Any:
    """One evaluation: ``("protocol", task, run_dir, None, _)``, ``("check", task,
    run_dir, check, _)`` or ``("baseline", task, spec, check, cache_file)``."""

    from .benchmark import ORACLE_POLICIES, run_protocol

    kind, task_id, arg, check, cache = job
    check = check or {}
    kwargs = dict(tasks.get(task_id).kwargs)
    if kind == "reference":  # a stored reference again, for its per-class figures
        fig = tasks.references()[task_id]["policies"][arg]
        key = digest(task_id, kwargs, list(tasks.get(task_id).seeds), fig["policy"], fig["params"])
        return Store(Path(cache).parent, then=THEN).cached_for(
            Path(cache).stem,
            key,
            lambda: run_protocol(task_id, fig["policy"], params=fig["params"]),
        )
    if kind == "baseline":
        key = digest(task_id, kwargs, arg, _episodes_part(check))
        return Store(Path(cache).parent, then=THEN).cached_for(
            Path(cache).stem,
            key,
            lambda: check_episodes(
                lambda env: baselines.make(arg["policy"], env=env, **arg["params"]),
                task_id,
                check,
                oracle=arg["policy"] in ORACLE_POLICIES,
                env_kwargs=arg.get("env_kwargs"),
            ),
        )

    run = Path(arg)
    task = tasks.get(task_id)
    if kind == "protocol":
        key = digest(task_id, kwargs, list(task.seeds), _model_digest(run))
        return Store(run, then=THEN).cached_for(
            "benchmark_protocol",
            key,
            lambda: run_protocol(task_id, lambda env: load_policy(run)),
        )
    key = digest(task_id, kwargs, _episodes_part(check), _model_digest(run))
    return Store(run, then=THEN).cached_for(
        "check",
        key,
        lambda: check_episodes(lambda env: load_policy(run), task_id, check),
    )


def run_entries(
    cfg: dict[str, Any], names: list[str], root: Path, workers: int
) -> dict[str, dict[str, Any]]:
    """Train every entry's runs, evaluate them (protocol and check) and the check
    baselines, and summarize each entry (:func:`summarize_entry`)."""
    jobs = [
        (cfg, n, seed, str(root / f"{n}-s{seed}"))
        for n in names
        for seed in cfg["tasks"][n].get("train_seeds", cfg["train_seeds"])
    ]
    with process_pool(workers) as pool:
        list(pool.map(_train_job, jobs))
    evals: list[tuple[str, str, Any, dict[str, Any] | None, str]] = []
    base_dir = root / "_baselines"
    base_dir.mkdir(parents=True, exist_ok=True)

    def cache_of(e: dict[str, Any], b: dict[str, Any]) -> str:
        return str(
            base_dir
            / f"{e['task'].split('/')[-1]}-{b['label']}-{digest(b, _episodes_part(e['check']))}.json"
        )

    gone = {
        r: d
        for n in names
        for s in cfg["tasks"][n].get("train_seeds", cfg["train_seeds"])
        if (d := diverged(r := str(root / f"{n}-s{s}"))) is not None
    }
    for n in names:
        e = cfg["tasks"][n]
        runs = [
            r
            for s in e.get("train_seeds", cfg["train_seeds"])
            if (r := str(root / f"{n}-s{s}")) not in gone
        ]
        if e.get("protocol", True):
            evals += [("protocol", e["task"], r, None, "") for r in runs]
            for label in class_references(e["task"]):
                cache = str(base_dir / f"{e['task'].split('/')[-1]}-{label}-protocol.json")
                if all(job[4] != cache for job in evals):
                    evals.append(("reference", e["task"], label, None, cache))
        check = e.get("check")
        if check:
            evals += [("check", e["task"], r, check, "") for r in runs]
            for b in check["baselines"]:  # once for the entries that share a check
                if all(job[4] != cache_of(e, b) for job in evals):
                    evals.append(("baseline", e["task"], b, check, cache_of(e, b)))
    # the longest first, so that the pool's last minutes are not one long job alone
    order = sorted(range(len(evals)), key=lambda i: evals[i][0] != "protocol")
    with process_pool(workers) as pool:
        done_sorted = list(pool.map(_eval_job, [evals[i] for i in order]))
    done: list[Any] = [None] * len(evals)
    for i, r in zip(order, done_sorted, strict=True):
        done[i] = r
    by_run = {
        (job[0], job[2]): r for job, r in zip(evals, done, strict=True) if job[0] != "baseline"
    }
    by_cache = {
        job[4]: r for job, r in zip(evals, done, strict=True) if job[0] in ("baseline", "reference")
    }
    out = {}
    for n in names:
        e = cfg["tasks"][n]
        runs = [str(root / f"{n}-s{s}") for s in e.get("train_seeds", cfg["train_seeds"])]
        check = e.get("check") or {"baselines": []}
        out[n] = summarize_entry(
            e,
            [r for r in runs if r not in gone],
            protocol=[by_run[("protocol", r)] for r in runs if ("protocol", r) in by_run],
            checks=[by_run[("check", r)] for r in runs if ("check", r) in by_run],
            base={b["label"]: by_cache[cache_of(e, b)] for b in check["baselines"]},
            class_refs={
                label: by_cache[str(base_dir / f"{e['task'].split('/')[-1]}-{label}-protocol.json")]
                for label in (class_references(e["task"]) if e.get("protocol", True) else [])
            },
        )
        out[n]["diverged"] = [gone[r] for r in runs if r in gone]
    return out


def class_references(task_id: str) -> list[str]:
    """The stored references a task's agents are compared with per request class: greedy
    and the best realizable reference, on a task whose env has request classes (none
    otherwise)."""
    task = tasks.get(task_id)
    if not task.kwargs.get("classes"):
        return []
    ref = tasks.references().get(task_id, {})
    labels = ["greedy", str(ref.get("best_policy"))]
    return [lb for lb in dict.fromkeys(labels) if lb in ref.get("policies", {})]


def summarize_entry(
    entry: dict[str, Any],
    runs: list[str],
    protocol: list[dict[str, Any]],
    checks: list[dict[str, Any]],
    base: dict[str, Any],
    class_refs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The figures of one entry (see the module docstring)."""
    row: dict[str, Any] = {"task": entry["task"], "runs": runs}
    if protocol:
        row["protocol"] = _summarize_protocol(entry["task"], protocol)
        if class_refs is not None and all("classes" in r for r in protocol):
            row["protocol"]["classes"] = _summarize_classes(protocol, class_refs)
    if checks:
        row["check"] = _summarize_check(entry["task"], entry["check"], checks, base)
    return row


def _summarize_protocol(tid: str, per_run: list[dict[str, Any]]) -> dict[str, Any]:

    from .benchmark import paired_score, protocol_part

    task = tasks.get(tid)
    loads = list(task.eval_loads)
    ref = tasks.references().get(tid, {})
    rows = []
    for r in per_run:
        rows.append(
            {
                "reward_rate_per_s": r["reward_rate_per_s"],
                "ci95": r["ci95"],
                "wall_s": r["wall_s"],
                **paired_score(tid, r["per_seed"], r["seeds"]),
            }
        )
    seed_mean = np.mean([r["per_seed"] for r in per_run], axis=0)  # per held-out seed
    out: dict[str, Any] = {
        "seeds": list(task.seeds),
        "horizon_requests": task.horizon_requests,
        "per_run": rows,
        "agent": mean_ci([r["reward_rate_per_s"] for r in per_run]),
        "per_seed": seed_mean.tolist(),
    }
    scores = [r.get("normalized_score") for r in rows]
    if all(s is not None for s in scores):
        out["normalized_score"] = mean_ci(scores)
    if all("ratio_to_bound" in r for r in rows):
        out["ratio_to_bound"] = mean_ci([r["ratio_to_bound"] for r in rows])
    vs = {}
    for label, fig in ref.get("policies", {}).items():
        part = protocol_part(task, fig)  # a reference may hold extra seeds after these
        if part is None:
            continue
        ref_cost = -np.asarray(part, dtype=np.float64)
        d = 100 * (-seed_mean - ref_cost) / abs(grouped_mean(ref_cost, loads))
        vs[label] = {
            "reward_rate_per_s": fig["reward_rate_per_s"],
            "ci95": fig["ci95"],
            "agent_minus_reference_cost_percent": {
                "mean": grouped_mean(d, loads),
                "ci95": ci_half_width(d, loads),
            },
        }
    out["vs_reference"] = vs
    if "bound_reward_rate_per_s" in ref:
        out["bound_reward_rate_per_s"] = ref["bound_reward_rate_per_s"]
    out["best_reference"] = ref.get("best_policy")
    return out


def _summarize_classes(
    per_run: list[dict[str, Any]], refs: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Per request class and metric (:data:`experiments.benchmark.CLASS_METRICS`): the
    agent's mean over runs ± a CI over them, and against each reference (its protocol
    run again, ``refs``) the agent (runs averaged per seed) minus the reference, paired
    per held-out seed."""
    out: dict[str, Any] = {}
    for name, figs in per_run[0]["classes"].items():
        out[name] = {}
        for m in figs:
            per = np.array([r["classes"][name][m]["per_seed"] for r in per_run], dtype=np.float64)
            seed_mean = per.mean(axis=0)
            row: dict[str, Any] = {
                **mean_ci(per.mean(axis=1)),
                "per_run": per.mean(axis=1).tolist(),
            }
            row["vs"] = {}
            for label, ref in refs.items():
                v = np.asarray(ref.get("classes", {}).get(name, {}).get(m, {}).get("per_seed", []))
                if v.shape != seed_mean.shape:
                    continue
                row["vs"][label] = {
                    "reference": float(v.mean()),
                    "agent_minus_reference": mean_ci(seed_mean - v),
                }
            out[name][m] = row
    return out


def _summarize_check(
    tid: str, check: dict[str, Any], per_run: list[dict[str, Any]], base: dict[str, Any]
) -> dict[str, Any]:
    """Per load: the agent's metrics (each run's mean over the seeds; mean and CI over
    runs), the gap to the exact per-load bound where the task has one, each baseline's
    metrics (mean and CI over seeds), and the agent (runs averaged per seed) against
    each baseline, paired per seed."""

    bounds: list[float] | None = None
    task = tasks.get(tid)
    if task.bound == "smdp-per-seed":
        env_id, kw = tasks.make_args(tid, **check.get("env_kwargs", {}))
        env = gym.make(env_id, **kw)
        try:
            bounds = gains_at_loads(env, [float(x) for x in check["loads"]])
        finally:
            env.close()
    rows = []
    for i, load in enumerate(check["loads"]):
        key = str(load)
        row: dict[str, Any] = {
            "load": None if load is None else float(load),
            "agent": {},
            "baselines": {},
        }
        agent_seed = {}
        for m in CHECK_METRICS:
            per = np.array([r[key][m] for r in per_run], dtype=np.float64)  # runs x seeds
            if m == "reward_rate_per_s":
                per = -per  # cost per second
                m = "cost_per_s"
            row["agent"][m] = {**mean_ci(per.mean(axis=1)), "per_run": per.mean(axis=1).tolist()}
            agent_seed[m] = per.mean(axis=0)
        if bounds is not None:
            g = bounds[i]
            gaps = 100 * (np.asarray(row["agent"]["cost_per_s"]["per_run"]) / g - 1)
            row["bound_cost_per_s"] = g
            row["agent"]["gap_percent"] = {**mean_ci(gaps), "per_run": gaps.tolist()}
        for label, res in base.items():
            b: dict[str, Any] = {}
            for m in CHECK_METRICS:
                v = np.asarray(res[key][m], dtype=np.float64)
                name = m
                if m == "reward_rate_per_s":
                    v, name = -v, "cost_per_s"
                d = agent_seed[name] - v
                b[name] = {
                    **mean_ci(v),
                    "agent_minus_baseline": mean_ci(d),
                    "agent_minus_baseline_percent": mean_ci(100 * d / abs(v.mean()))
                    if v.mean() != 0
                    else {"mean": float("nan"), "ci95": float("nan")},
                }
            if bounds is not None:
                b["gap_percent"] = float(100 * (b["cost_per_s"]["mean"] / bounds[i] - 1))
            row["baselines"][label] = b
        if "gap" in check:
            row["gap_closed"] = gap_closed(row, check["gap"])
        rows.append(row)
    return {
        "seeds": check["seeds"],
        "horizon_requests": int(check.get("horizon_requests", DEFAULT_CHECK_HORIZON)),
        "env_kwargs": check.get("env_kwargs", {}),
        **({"gap": check["gap"]} if "gap" in check else {}),
        "loads": rows,
    }


def _warm_note(entry: dict[str, Any], cfg: dict[str, Any]) -> str:
    """The sentence naming an entry's warm start (its teacher and RL steps), or ''."""
    ws = entry.get("warm_start")
    if not ws:
        return ""
    params = ", ".join(f"{k}={v}" for k, v in ws["params"].items())
    rl = int(entry.get("n_timesteps", cfg.get("n_timesteps", 0)))
    after = f"then {rl:,} steps of RL" if rl else "no RL after (the clone alone)"
    return (
        f"Warm start: a clone of `{ws['policy']}`"
        + (f" ({params})" if params else "")
        + f" on {ws['steps']:,} env steps, {ws['epochs']} epochs; {after}. "
    )


def method_of(cfg: dict[str, Any], name: str) -> str:
    """The training method entry ``name``'s runs are aggregated under across tasks: its
    ``method`` where given, else the algorithm with what else the entry changes (warm
    start, hyperparameter file, training env kwargs, steps)."""
    e = cfg["tasks"][name]
    if "method" in e:
        return str(e["method"])
    label = str(e.get("algo", cfg.get("algo", DEFAULTS["algo"])))
    if e.get("warm_start"):
        label += f", warm start from {e['warm_start']['policy']}"
    if "hyperparams" in e:
        label += f", {Path(str(e['hyperparams'])).name}"
    if e.get("train_env_kwargs"):
        label += f", train env {e['train_env_kwargs']}"
    if "n_timesteps" in e:
        label += f", {int(e['n_timesteps']):,} steps"
    return label


def aggregates(cfg: dict[str, Any], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per training method (:func:`method_of`), the aggregates of its runs' normalized
    scores over the tasks it ran on (:func:`experiments.harness.stats.aggregate_scores`:
    IQM, mean, median, optimality gap with stratified-bootstrap CIs), from each entry's
    protocol; runs that diverged in training are not among them and are counted."""
    groups: dict[str, dict[str, list[float]]] = {}
    gone: dict[str, int] = {}
    for n, row in rows.items():
        per_run = (row.get("protocol") or {}).get("per_run", [])
        scores = [r.get("normalized_score") for r in per_run]
        if not scores or any(x is None for x in scores):
            continue
        m = method_of(cfg, n)
        groups.setdefault(m, {}).setdefault(row["task"], []).extend(float(x) for x in scores)
        gone[m] = gone.get(m, 0) + len(row.get("diverged", []))
    return {
        m: {**aggregate_scores(per_task), "tasks": sorted(per_task), "diverged": gone[m]}
        for m, per_task in groups.items()
    }


def _aggregate_lines(agg: dict[str, Any]) -> list[str]:
    """The aggregate table under the tasks' table."""
    if not agg:
        return []

    def cell(a: dict[str, float]) -> str:
        return f"{a['value']:.3f} [{a['low']:.3f}, {a['high']:.3f}]"

    table = [
        (
            m,
            ", ".join(f"`{t.removeprefix('batch_env/')}`" for t in a["tasks"]),
            f"{a['n']['runs']}" + (f" (+{a['diverged']} diverged)" if a["diverged"] else ""),
            cell(a["IQM"]),
            cell(a["mean"]),
            cell(a["median"]),
            cell(a["optimality gap"]),
        )
        for m, a in agg.items()
    ]
    return [
        "",
        "### Aggregates over tasks",
        "",
        "Each training method's runs pooled over the tasks it ran on, as RL papers report "
        "them (Agarwal et al. 2021, rliable's metrics): the interquartile mean, mean and "
        "median of the runs' normalized scores on the protocols, and the optimality gap "
        "(mean shortfall below 1), each with a 95% percentile interval from 2,000 "
        "stratified bootstrap resamples (runs drawn with replacement within each task). "
        "Runs that diverged in training are not among the runs.",
        "",
        *md_table(("method", "tasks", "runs", "IQM", "mean", "median", "optimality gap"), table),
    ]


def markdown(cfg: dict[str, Any], rows: dict[str, dict[str, Any]]) -> list[str]:
    """The tasks' tables: the protocol figures, then each check."""
    if not rows:
        return []
    lines = [
        "## Benchmark tasks",
        "",
        "Reward rates per second (higher is better; minus the cost rate) on each task's "
        "protocol (`docs/benchmark.md`): the agent's figure is the mean over training runs "
        "± a 95% CI over them; 'vs' is the agent's cost against the reference's, paired per "
        "held-out seed (negative: the agent is cheaper).",
        "",
    ]
    table = []
    gone_lines = []
    for n, row in rows.items():
        for d in row.get("diverged", []):
            if "unfinished" in d:
                cut = d["unfinished"]
                gone_lines.append(
                    f"- `{n}`: `{Path(d['run']).name}` diverged in training (its final "
                    f"evaluation's episode of seed {cut['seed']} had not ended after "
                    f"{cut['steps']:,} steps, the evaluation's bound); not evaluated further"
                )
                continue
            gone_lines.append(
                f"- `{n}`: `{Path(d['run']).name}` diverged in training (normalized score "
                f"{d['normalized_score']:,.0f} on its final evaluation's episodes: "
                f"{d['reward_rate_per_s']:,.2f} per s against greedy's "
                f"{d['reference_reward_rate_per_s']:.2f}, mean batch {d['batch_size_mean']:.2f}); "
                "not evaluated further"
            )
        p = row.get("protocol")
        if not p:
            continue
        score = (
            pm_fixed(p["normalized_score"]["mean"], p["normalized_score"]["ci95"], 3)
            if "normalized_score" in p
            else "undefined"
        )
        per = ", ".join(f"{r['reward_rate_per_s']:.2f}" for r in p["per_run"])
        vs = "; ".join(
            f"{k} {v['agent_minus_reference_cost_percent']['mean']:+.2f} ± "
            f"{v['agent_minus_reference_cost_percent']['ci95']:.2f}"
            for k, v in p["vs_reference"].items()
            if k != "random"
        )
        n_gone = len(row.get("diverged", []))
        table.append(
            (
                n,
                f"`{row['task']}`",
                f"{len(p['per_run'])}" + (f" (+{n_gone} diverged)" if n_gone else ""),
                pm_fixed(p["agent"]["mean"], p["agent"]["ci95"]),
                score,
                per,
                vs,
            )
        )
    lines += md_table(
        (
            "entry",
            "task",
            "runs",
            "agent",
            "normalized score",
            "per run",
            "vs references (cost %)",
        ),
        table,
    )
    lines += _aggregate_lines(aggregates(cfg, rows))
    if gone_lines:
        lines += [
            "",
            "Runs that diverged in training (`experiments.agents_tasks.diverged`) are left "
            "out of the figures above; a mean over the rest overstates the entry:",
            "",
            *gone_lines,
        ]
    for n, row in rows.items():
        classes = (row.get("protocol") or {}).get("classes")
        if classes:
            lines += _class_lines(n, row["task"], classes)
    for n, row in rows.items():
        c = row.get("check")
        if not c:
            continue
        lines += [
            "",
            f"### {n}: "
            + ("on the task's traffic" if c["loads"][0]["load"] is None else "at fixed loads")
            + f" (`{row['task']}`, seeds {c['seeds']}, "
            f"{c['horizon_requests']:,} requests each"
            + (f", env {c['env_kwargs']}" if c["env_kwargs"] else "")
            + ")",
            "",
            _warm_note(cfg["tasks"].get(n, {}), cfg)
            + "Cost per second (lower is better); the agent's ± is over training runs, a "
            "baseline's over seeds; 'agent - it' is paired per seed.",
            "",
            # written by hand: the agent's row ends in an empty cell and each baseline's
            # starts with one, "| |" (one space); md_table's would be "|  |"
            "| load | policy | cost per s | gap to the optimum | latency mean ms | p99 ms "
            "| SLA attainment | agent - it (cost %) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for lr in c["loads"]:
            a = lr["agent"]
            gap = (
                pm_fixed(a["gap_percent"]["mean"], a["gap_percent"]["ci95"]) + "%"
                if "gap_percent" in a
                else "n/a"
            )
            lines.append(
                f"| {'-' if lr['load'] is None else format(lr['load'], 'g')} | agent | {pm_fixed(a['cost_per_s']['mean'], a['cost_per_s']['ci95'])} "
                f"| {gap} | {a['latency_mean_ms']['mean']:.3f} | {a['latency_p99_ms']['mean']:.3f} "
                f"| {a['sla_attainment']['mean']:.4f} | |"
            )
            for label, b in lr["baselines"].items():
                gap = f"{b['gap_percent']:.2f}%" if "gap_percent" in b else "n/a"
                d = b["cost_per_s"]["agent_minus_baseline_percent"]
                lines.append(
                    f"| | {label} | {pm_fixed(b['cost_per_s']['mean'], b['cost_per_s']['ci95'])} "
                    f"| {gap} | {b['latency_mean_ms']['mean']:.3f} | {b['latency_p99_ms']['mean']:.3f} "
                    f"| {b['sla_attainment']['mean']:.4f} | {pm_fixed(d['mean'], d['ci95'])} |"
                )
        for lr in c["loads"]:
            gc = lr.get("gap_closed")
            if gc:
                at = "" if lr["load"] is None else f" at load {lr['load']:g}"
                runs = ", ".join(f"{x:.0f}%" for x in gc["per_run"])
                lines += [
                    "",
                    f"Gap closed{at}: {pm_fixed(gc['mean'], gc['ci95'], 0)}% (runs {runs}) of the gap "
                    f"between `{gc['from']}` ({gc['from_cost_per_s']:.3f} per s, the cheapest "
                    f"of {', '.join(f'`{x}`' for x in c['gap']['from'])}) and "
                    f"`{gc['to']}` ({gc['to_cost_per_s']:.3f} per s).",
                ]
    return lines


#: the per-class metrics shown in the tables (all are kept in the summary)
CLASS_TABLE_METRICS = (
    ("sla_attainment", "SLA attainment", 4),
    ("ttft_p99_ms", "TTFT p99 ms", 0),
    ("tpot_p99_ms", "TPOT p99 ms", 1),
)


def _class_lines(name: str, task_id: str, classes: dict[str, Any]) -> list[str]:
    """An entry's per-class table on the protocol: the agent (± over runs), each
    reference, and the agent minus the reference paired per seed."""
    refs = list(next(iter(next(iter(classes.values())).values()))["vs"])
    lines = [
        "",
        f"### {name}: per request class (`{task_id}`, the protocol)",
        "",
        "Each class against its own SLAs; the agent's ± is over training runs, "
        "'agent - it' is paired per held-out seed.",
        "",
    ]
    table = []
    for cls, figs in classes.items():
        for m, label, digits in CLASS_TABLE_METRICS:
            f = figs.get(m)
            if f is None:
                continue
            cells = [cls, label, pm_fixed(f["mean"], f["ci95"], digits)]
            for r in refs:
                v = f["vs"].get(r)
                cells.append(
                    "n/a"
                    if v is None
                    else f"{v['reference']:.{digits}f} "
                    f"({pm_fixed(v['agent_minus_reference']['mean'], v['agent_minus_reference']['ci95'], digits)})"
                )
            table.append(tuple(cells))
    lines += md_table(("class", "metric", "agent", *(f"{r} (agent - it)" for r in refs)), table)
    return lines


def plot(rows: dict[str, dict[str, Any]], path: Path) -> bool:
    """One panel per entry with a check: cost per second against load, the agent's and
    every baseline's, relative to the best policy at each load (and the bound where
    there is one). ``False`` when there is nothing to plot or no matplotlib."""
    checks = {n: r["check"] for n, r in rows.items() if r.get("check")}
    if not checks:
        return False
    plt = pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(1, len(checks), figsize=(5 * len(checks), 3.8), squeeze=False)
    for ax, (n, c) in zip(axes[0], checks.items(), strict=True):
        loads = [lr["load"] for lr in c["loads"]]
        ref = []
        for lr in c["loads"]:
            cands = [lr["agent"]["cost_per_s"]["mean"]]
            cands += [b["cost_per_s"]["mean"] for b in lr["baselines"].values()]
            ref.append(lr.get("bound_cost_per_s", min(cands)))
        labels = ["agent", *c["loads"][0]["baselines"]]
        if loads == [None]:  # the task's own traffic: one bar per policy
            lr, r0 = c["loads"][0], ref[0]
            vals, errs = [], []
            for label in labels:
                f = lr["agent"] if label == "agent" else lr["baselines"][label]
                h = f["cost_per_s"]["ci95"]
                vals.append(100 * (f["cost_per_s"]["mean"] / r0 - 1))
                errs.append(100 * h / r0 if np.isfinite(h) else 0.0)
            ax.bar(range(len(labels)), vals, yerr=errs, capsize=3, color="tab:blue")
            ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
            what = "the bound" if "bound_cost_per_s" in lr else "the best policy"
            ax.set_title(n, fontsize=10)
            ax.set_ylabel(f"cost above {what} (%)")
            ax.axhline(0, color="black", lw=0.8)
            ax.grid(alpha=0.3, axis="y")
            continue
        for label in labels:
            ys, es = [], []
            for lr, r0 in zip(c["loads"], ref, strict=True):
                f = lr["agent"] if label == "agent" else lr["baselines"][label]
                ys.append(100 * (f["cost_per_s"]["mean"] / r0 - 1))
                h = f["cost_per_s"]["ci95"]
                es.append(100 * h / r0 if np.isfinite(h) else 0.0)
            ax.errorbar(
                loads,
                ys,
                yerr=es,
                marker="o",
                capsize=3,
                label=label,
                lw=2 if label == "agent" else 1,
            )
        ax.axhline(0, color="black", lw=0.8)
        what = "the per-load optimum" if "bound_cost_per_s" in c["loads"][0] else "the best policy"
        ax.set_title(f"{n}", fontsize=10)
        ax.set_xlabel("load (fraction of max throughput)")
        ax.set_ylabel(f"cost above {what} (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return True
