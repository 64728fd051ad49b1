"""Statistics of every experiment, on one confidence-interval function.

The one CI is :func:`batch_env.evaluate.ci95_half_width`, the Student-t 95% half-width
of a mean over independent observations (NaN for fewer than two) that the evaluation
harness gives every summary. Everything here is built on it or on its quantile (the
grouped forms live beside it in :mod:`batch_env.evaluate`, where a task's score is made,
:mod:`batch_env.scoring`, and are re-exported here):

* :func:`ci_half_width`: that half-width, or over groups (each value's load on a load-grid
  protocol): the mean of the groups' means, whose variance is the sum of the groups'
  sample variances over their sizes over the number of groups squared (degrees of
  freedom: values minus groups; the spread between loads is fixed by the protocol, not
  noise);
* :func:`grouped_mean`: the mean, or the mean of the groups' means;
* :func:`mean_ci`: ``{"mean", "ci95"}`` of values (over training runs, over seeds);
* :func:`paired_difference` (the evaluation harness's): the paired CI of two policies
  on the same seeds;
* :func:`gap_closed`: the share of a gap between baselines that each run closes.

Aggregates over runs and tasks as RL papers report them (Agarwal et al., "Deep
Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS 2021; the
metrics of their ``rliable`` package, which is archived, computed here with NumPy):
:func:`aggregate_scores` gives the interquartile mean (:func:`iqm`: the mean of the
middle 50% of all runs' scores, pooled over tasks), the mean, the median and the
optimality gap, each with a percentile 95% CI from a **stratified bootstrap** (runs
resampled with replacement within each task, every task kept). These are percentile
intervals over resamples, not the Student-t interval above: they say how much the
aggregate would move with other training runs, for few runs per task.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from batch_env.evaluate import (
    by_group,
    ci95_half_width,
    ci_half_width,
    grouped_mean,
    paired_difference,
)

__all__ = [
    "by_group",
    "ci95_half_width",
    "ci_half_width",
    "gap_closed",
    "grouped_mean",
    "aggregate_scores",
    "iqm",
    "mean_ci",
    "paired_difference",
    "stratified_bootstrap",
]

#: resamples of :func:`stratified_bootstrap` (rliable's default is 2,000 too)
BOOTSTRAP_REPS = 2000
#: the aggregates of :func:`aggregate_scores`
AGGREGATES = ("IQM", "mean", "median", "optimality gap")


def mean_ci(x: Any) -> dict[str, float]:
    """Mean and Student-t 95% half-width of ``x`` (NaN half-width for one value)."""
    arr = np.asarray(x, dtype=np.float64)
    return {"mean": float(arr.mean()), "ci95": ci95_half_width(arr)}


def gap_closed(row: dict[str, Any], gap: dict[str, Any]) -> dict[str, Any]:
    """The share (percent) of the gap between the cheapest of ``gap["from"]`` and
    ``gap["to"]`` (mean costs over the seeds) that each run closes, with its mean and CI
    over runs: ``100 * (from_cost - run_cost) / (from_cost - to_cost)``."""
    cost = {label: row["baselines"][label]["cost_per_s"]["mean"] for label in row["baselines"]}
    best = min(gap["from"], key=lambda label: cost[label])
    width = cost[best] - cost[gap["to"]]
    per_run = [
        100 * (cost[best] - c) / width if width != 0 else float("nan")
        for c in row["agent"]["cost_per_s"]["per_run"]
    ]
    return {
        "from": best,
        "from_cost_per_s": cost[best],
        "to": gap["to"],
        "to_cost_per_s": cost[gap["to"]],
        **mean_ci(per_run),
        "per_run": per_run,
    }


def iqm(scores: Any) -> float:
    """The interquartile mean of ``scores`` (all of them pooled): the mean of the middle
    50%, the values below the 25th and above the 75th percentile left out
    (``scipy.stats.trim_mean(x, 0.25)``, as rliable computes it); NaN for none."""
    from scipy import stats

    arr = np.asarray(scores, dtype=np.float64).ravel()
    return float(stats.trim_mean(arr, 0.25)) if arr.size else math.nan


def _aggregates(pooled: np.ndarray) -> np.ndarray:
    """IQM, mean, median and optimality gap (mean shortfall below a normalized score of
    1, scores above 1 counted as 1) of pooled normalized scores."""
    return np.array(
        [
            iqm(pooled),
            float(pooled.mean()),
            float(np.median(pooled)),
            float(np.mean(1.0 - np.minimum(pooled, 1.0))),
        ]
    )


def stratified_bootstrap(
    per_task: dict[str, Any],
    statistic: Any,
    reps: int = BOOTSTRAP_REPS,
    seed: int = 0,
) -> np.ndarray:
    """``statistic`` (pooled scores -> array) of ``reps`` stratified resamples: each
    task's runs drawn with replacement, as many as it has, every task in every resample.
    Returns ``reps x len(statistic(...))``. A task with one run adds that run to every
    resample (no spread from it)."""
    if not per_task:
        raise ValueError("stratified_bootstrap: per_task is empty: give each task's run scores")
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(v, dtype=np.float64).ravel() for v in per_task.values()]
    for name, a in zip(per_task, arrays, strict=True):
        if a.size == 0 or not np.isfinite(a).all():
            raise ValueError(
                f"stratified_bootstrap: task {name!r} has scores {a.tolist()}: expected one "
                "or more finite scores"
            )
    out = []
    for _ in range(reps):
        pooled = np.concatenate([a[rng.integers(0, a.size, a.size)] for a in arrays])
        out.append(np.asarray(statistic(pooled), dtype=np.float64))
    return np.stack(out)


def aggregate_scores(
    per_task: dict[str, Any], reps: int = BOOTSTRAP_REPS, seed: int = 0
) -> dict[str, dict[str, float]]:
    """The IQM, mean, median and optimality gap of normalized scores (``per_task``: task
    -> its runs' scores), each ``{"value", "low", "high"}`` with the stratified-bootstrap
    percentile 95% interval; plus ``runs`` and ``tasks`` counts under ``"n"``."""
    arrays = {k: np.asarray(v, dtype=np.float64).ravel() for k, v in per_task.items()}
    pooled = np.concatenate(list(arrays.values())) if arrays else np.array([])
    point = _aggregates(pooled) if pooled.size else None
    boot = stratified_bootstrap(arrays, _aggregates, reps, seed)
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    out: dict[str, Any] = {
        name: {"value": float(point[i]), "low": float(lo[i]), "high": float(hi[i])}  # type: ignore[index]
        for i, name in enumerate(AGGREGATES)
    }
    out["n"] = {"runs": int(pooled.size), "tasks": len(arrays)}
    return out
