"""Statistics of every experiment, on one confidence-interval function.

The one CI is :func:`batch_env.evaluate.ci95_half_width`, the Student-t 95% half-width
of a mean over independent observations (NaN for fewer than two) that the evaluation
harness gives every summary. Everything here is built on it or on its quantile:

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
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from batch_env.evaluate import ci95_half_width, paired_difference, t_quantile_95

__all__ = [
    "ci95_half_width",
    "ci_half_width",
    "gap_closed",
    "grouped_mean",
    "mean_ci",
    "paired_difference",
]


def by_group(values: Any, groups: list[float] | tuple[float, ...]) -> list[np.ndarray]:
    """``values`` split by their group (each value's load), in the groups' order."""
    arr = np.asarray(values, dtype=np.float64)
    keys = np.asarray(groups, dtype=np.float64)
    return [arr[keys == k] for k in np.unique(keys)]


def ci_half_width(values: Any, groups: list[float] | tuple[float, ...] = ()) -> float:
    """Student-t 95% half-width of the mean of ``values`` (NaN for fewer than two): over
    all values, or over ``groups`` (two or more values per group; see the module)."""
    values = np.asarray(values, dtype=np.float64)
    if groups:
        parts = by_group(values, groups)
        if min(p.size for p in parts) >= 2:
            var = sum(p.var(ddof=1) / p.size for p in parts) / len(parts) ** 2
            return float(t_quantile_95(values.size - len(parts)) * math.sqrt(var))
    if np.isnan(values).any():  # a NaN observation: no interval (not a smaller sample)
        return math.nan
    return ci95_half_width(values)


def grouped_mean(
    values: np.ndarray | list[float], groups: list[float] | tuple[float, ...] = ()
) -> float:
    """The mean of ``values``, or of their groups' means (equal weight per load)."""
    values = np.asarray(values, dtype=np.float64)
    if not groups:
        return float(np.mean(values))
    return float(np.mean([p.mean() for p in by_group(values, groups)]))


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
