"""The one metrics recorder: per-request records to the episode summary.

The event loop (:mod:`batch_env.core`) keeps per-request arrival and completion times
and cumulative totals; :func:`summarize` turns them into ``info["serving"]`` at episode
end. Keys (DESIGN: The environments), latency in milliseconds:

``completed``, ``dropped``, ``in_system_at_end``, ``latency_mean_ms``, ``latency_p50_ms``,
``latency_p95_ms``, ``latency_p99_ms``, ``sla_attainment``, ``throughput_rps``,
``power_mean_w``, ``energy_per_request_j``, ``batch_size_mean``, ``drop_rate``,
``reward_rate_per_s``, ``elapsed_s``, and the window's raw totals
``latency_integral_s``, ``energy_j``, ``sla_misses``, plus ``window_drops`` (drops of any
request during the window, the D in the reward; ``dropped`` counts dropped *summary*
requests).

Definitions: the window runs from the first summary arrival to the end of the episode;
``elapsed_s``, ``power_mean_w``, ``energy_per_request_j``, ``throughput_rps`` and
``reward_rate_per_s`` use the window's time, energy and reward (so
``reward_rate_per_s * elapsed_s`` is exactly minus the weighted raw totals); latency and
SLA figures use the summary requests; ``sla_attainment`` = completed within SLA /
(completed + dropped). Percentiles use linear interpolation (NumPy's default). With no
completed summary request the latency figures are NaN (nothing was measured) and
``energy_per_request_j`` is NaN; if the window never started (``horizon_s`` ended the
episode before the first summary arrival) the rates are NaN too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

SERVING_KEYS: tuple[str, ...] = (
    "completed",
    "dropped",
    "in_system_at_end",
    "latency_mean_ms",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "sla_attainment",
    "throughput_rps",
    "power_mean_w",
    "energy_per_request_j",
    "batch_size_mean",
    "drop_rate",
    "reward_rate_per_s",
    "elapsed_s",
    "latency_integral_s",
    "energy_j",
    "sla_misses",
    "window_drops",
)


#: the summary keys that tables, TensorBoard evaluations and comparisons show
HEADLINE_KEYS: tuple[str, ...] = (
    "reward_rate_per_s",
    "latency_mean_ms",
    "latency_p50_ms",
    "latency_p99_ms",
    "power_mean_w",
    "energy_per_request_j",
    "sla_attainment",
    "throughput_rps",
    "batch_size_mean",
    "drop_rate",
)


@dataclass(frozen=True)
class WindowStart:
    """Cumulative totals at the instant the first summary request arrives."""

    time_s: float
    latency_integral_s: float
    energy_j: float
    misses: int
    drops: int
    entry: int
    n_batches: int
    sum_batch: int


def summarize(
    *,
    arrivals: list[float],
    completions: list[float],
    n_done: int,
    window: WindowStart | None,
    entry_hi: int,
    drops_summary: int,
    now_s: float,
    latency_integral_s: float,
    energy_j: float,
    misses: int,
    drops: int,
    n_batches: int,
    sum_batch: int,
    in_system: int,
    sla_s: float,
    weights: tuple[float, float, float, float],
) -> dict[str, Any]:
    """Build the episode summary from the event loop's records.

    :param arrivals: arrival time of every admitted request, in arrival order.
    :param completions: completion time of every started request (same indexing).
    :param n_done: number of admitted requests completed (a prefix: service is FIFO).
    :param window: totals at the window start (``None``: no summary request arrived).
    :param entry_hi: index one past the last admitted summary request.
    :param drops_summary: dropped summary requests.
    :param now_s: the episode's end time.
    :param latency_integral_s: cumulative latency integral at the end.
    :param energy_j: cumulative energy at the end.
    :param misses: cumulative SLA misses at the end.
    :param drops: cumulative drops at the end.
    :param n_batches: cumulative number of batches started.
    :param sum_batch: cumulative sum of batch sizes.
    :param in_system: requests still in the system at the end.
    :param sla_s: the SLA in seconds.
    :param weights: reward weights (latency, energy, sla, drop).
    """
    if window is None:
        window = WindowStart(now_s, latency_integral_s, energy_j, misses, drops, len(arrivals), n_batches, sum_batch)
        entry_hi = window.entry
    lo = window.entry
    hi = min(entry_hi, n_done)
    comp = np.asarray(completions[lo:hi], dtype=np.float64)
    arr = np.asarray(arrivals[lo:hi], dtype=np.float64)
    lat = comp - arr
    completed = int(lat.size)
    within = int(np.count_nonzero(~(lat > sla_s)))
    n_summary = (entry_hi - lo) + drops_summary
    elapsed = now_s - window.time_s
    L = latency_integral_s - window.latency_integral_s
    E = energy_j - window.energy_j
    M = misses - window.misses
    D = drops - window.drops
    nb = n_batches - window.n_batches
    wl, we, ws, wd = weights
    reward = -(wl * L + we * E + ws * M + wd * D)
    nan = float("nan")
    if completed:
        p50, p95, p99 = np.percentile(lat, [50.0, 95.0, 99.0]) * 1000.0
        mean_ms = float(lat.mean() * 1000.0)
    else:
        p50 = p95 = p99 = mean_ms = nan
    denom = completed + drops_summary
    return {
        "completed": completed,
        "dropped": int(drops_summary),
        "in_system_at_end": int(in_system),
        "latency_mean_ms": mean_ms,
        "latency_p50_ms": float(p50),
        "latency_p95_ms": float(p95),
        "latency_p99_ms": float(p99),
        "sla_attainment": within / denom if denom else nan,
        "throughput_rps": completed / elapsed if elapsed > 0 else nan,
        "power_mean_w": E / elapsed if elapsed > 0 else nan,
        "energy_per_request_j": E / completed if completed else nan,
        "batch_size_mean": (sum_batch - window.sum_batch) / nb if nb else 0.0,
        "drop_rate": drops_summary / n_summary if n_summary else 0.0,
        "reward_rate_per_s": reward / elapsed if elapsed > 0 else nan,
        "elapsed_s": elapsed,
        "latency_integral_s": L,
        "energy_j": E,
        "sla_misses": int(M),
        "window_drops": int(D),
    }
