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

from dataclasses import astuple, dataclass
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


_Q = np.array([50.0, 95.0, 99.0]) / 100.0


def latency_stats(rows: np.ndarray, counts: np.ndarray, sla_s: float, *, overwrite: bool = False
                  ) -> dict[str, np.ndarray]:
    """Latency figures of ``k`` episodes at once: row ``r`` holds ``counts[r]`` latencies
    (seconds) in its first columns; later columns are ignored.

    The percentiles are NumPy's default (linear interpolation), bit-identical to
    ``np.percentile(row[:n], [50, 95, 99])``: the same order statistics (from one sort of
    the padded rows, which beats a partition per row) and the same interpolation
    formula. The mean is ``row[:n].sum() / n``, as ``ndarray.mean`` computes it.

    :param rows: ``(k, W)`` float64, no NaN in the counted columns.
    :param counts: ``(k,)`` number of latencies per row (0..W).
    :param sla_s: the SLA; a latency meets it when not above it.
    :param overwrite: ``rows`` may be reordered in place (it is a scratch copy).
    :return: ``completed``, ``within`` (int64), ``mean_ms``, ``p50_ms``, ``p95_ms``,
        ``p99_ms`` (float64, NaN for rows without latencies), each ``(k,)``.
    """
    rows = np.asarray(rows, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    k = counts.size
    width = int(counts.max(initial=0))
    lat = rows[:, :width] if overwrite else rows[:, :width].copy()
    for r in np.flatnonzero(counts < width).tolist():
        lat[r, counts[r]:] = np.inf  # (not NaN: sorts last, never within the SLA)
    within = (lat <= sla_s).sum(axis=1)  # no NaN: the same as ~(lat > sla_s)
    mean = np.full(k, np.nan)
    pct = np.full((k, 3), np.nan)
    has = np.flatnonzero(counts)
    if has.size:
        for r in has.tolist():
            mean[r] = rows[r, : counts[r]].sum() / counts[r]
        lat.sort(axis=1)
        if has.size == k:  # (no copy of the sorted rows)
            pct[:] = _sorted_percentiles(lat, counts)
        else:
            pct[has] = _sorted_percentiles(lat[has], counts[has])
    mean *= 1000.0
    pct *= 1000.0
    return {"completed": counts.copy(), "within": within, "mean_ms": mean,
            "p50_ms": pct[:, 0], "p95_ms": pct[:, 1], "p99_ms": pct[:, 2]}


def _sorted_percentiles(srt: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The 50/95/99th percentiles of each row's first ``n[r]`` entries of the row-sorted
    ``srt``: NumPy's order statistics and interpolation formula (``method="linear"``)."""
    n1 = (n - 1)[:, None]
    virtual = n1 * _Q
    prev = np.floor(virtual)
    gamma = virtual - prev
    lo = prev.astype(np.intp)
    hi = np.minimum(lo + 1, n1)  # the top order statistic for q = 1 (and n = 1)
    base = (np.arange(n.size) * srt.shape[1])[:, None]
    flat = srt.reshape(-1)
    a, b = flat[base + lo], flat[base + hi]
    diff = b - a
    out = np.where(gamma >= 0.5, b - diff * (1.0 - gamma), a + diff * gamma)
    return out


def percentiles(values: np.ndarray) -> np.ndarray:
    """The 50th, 95th and 99th percentiles of ``values`` (1-D float64, no NaN, not empty),
    bit-identical to ``np.percentile(values, [50, 95, 99])`` (see :func:`latency_stats`).
    ``values`` is not modified."""
    return _sorted_percentiles(np.sort(values)[None, :], np.array([values.size]))[0]


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
    stats = latency_stats(lat[None, :], np.array([lat.size]), sla_s)
    one = WindowStart(*([v] for v in astuple(window)))
    return summaries_from_totals(
        stats, window=one, n_entries=[entry_hi - lo], drops_summary=[drops_summary],
        now_s=[now_s], latency_integral_s=[latency_integral_s], energy_j=[energy_j],
        misses=[misses], drops=[drops], n_batches=[n_batches], sum_batch=[sum_batch],
        in_system=[in_system], weights=weights,
    )[0]


def summaries_from_totals(
    stats: dict[str, Any],
    *,
    window: WindowStart,
    n_entries: Any,
    drops_summary: Any,
    now_s: Any,
    latency_integral_s: Any,
    energy_j: Any,
    misses: Any,
    drops: Any,
    n_batches: Any,
    sum_batch: Any,
    in_system: Any,
    weights: tuple[float, float, float, float],
) -> list[dict[str, Any]]:
    """The episode summaries of ``k`` episodes from the rows of :func:`latency_stats` and
    the totals at the window start and at the end (the parameters of :func:`summarize`;
    ``n_entries`` counts the admitted summary requests). Every argument but ``weights``
    holds ``k`` values (arrays or sequences; ``window``'s fields too), and the k
    summaries are computed with array operations: :func:`summarize` passes one episode,
    the vector env all lanes ending in a step. The arithmetic is the same IEEE operations
    in the same order for one episode or many, so a lane's summary equals the scalar
    env's bit for bit.
    """
    f64 = lambda v: np.asarray(v, dtype=np.float64)  # noqa: E731
    i64 = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    completed, within = i64(stats["completed"]), i64(stats["within"])
    drops_summary, n_entries = i64(drops_summary), i64(n_entries)
    n_summary = n_entries + drops_summary
    elapsed = f64(now_s) - f64(window.time_s)
    L = f64(latency_integral_s) - f64(window.latency_integral_s)
    E = f64(energy_j) - f64(window.energy_j)
    M = i64(misses) - i64(window.misses)
    D = i64(drops) - i64(window.drops)
    nb = i64(n_batches) - i64(window.n_batches)
    sb = i64(sum_batch) - i64(window.sum_batch)
    wl, we, ws, wd = weights
    reward = -(wl * L + we * E + ws * M + wd * D)
    denom = completed + drops_summary
    timed = elapsed > 0
    nan = np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        cols = {
            "completed": completed,
            "dropped": drops_summary,
            "in_system_at_end": i64(in_system),
            "latency_mean_ms": f64(stats["mean_ms"]),
            "latency_p50_ms": f64(stats["p50_ms"]),
            "latency_p95_ms": f64(stats["p95_ms"]),
            "latency_p99_ms": f64(stats["p99_ms"]),
            "sla_attainment": np.where(denom != 0, within / denom, nan),
            "throughput_rps": np.where(timed, completed / elapsed, nan),
            "power_mean_w": np.where(timed, E / elapsed, nan),
            "energy_per_request_j": np.where(completed != 0, E / completed, nan),
            "batch_size_mean": np.where(nb != 0, sb / nb, 0.0),
            "drop_rate": np.where(n_summary != 0, drops_summary / n_summary, 0.0),
            "reward_rate_per_s": np.where(timed, reward / elapsed, nan),
            "elapsed_s": elapsed,
            "latency_integral_s": L,
            "energy_j": E,
            "sla_misses": M,
            "window_drops": D,
        }
    keys = list(cols)
    return [dict(zip(keys, row, strict=True)) for row in zip(*(c.tolist() for c in cols.values()), strict=True)]


#: the LLM-specific summary keys of ``LLMBatching-v0`` (in addition to :data:`SERVING_KEYS`)
LLM_KEYS: tuple[str, ...] = (
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
    "ttft_attainment",
    "tpot_attainment",
    "output_tokens_per_s",
    "goodput_rps",
    "preemptions",
    "kv_utilization_mean",
    "iterations",
    "prefill_iterations",
    "rejected",
    "clipped",
)


def llm_metrics(
    *,
    arrivals: np.ndarray,
    first_token: np.ndarray,
    completion: np.ndarray,
    output_lengths: np.ndarray,
    ttft_sla_s: float,
    tpot_sla_s: float,
    dropped: int,
    elapsed_s: float,
    output_tokens: int,
    preemptions: int,
    kv_utilization_mean: float,
    iterations: int,
    prefill_iterations: int,
    rejected: int,
    clipped: int,
) -> dict[str, Any]:
    """The LLM keys of the episode summary (``LLMBatching-v0``), and its ``sla_attainment``.

    Per summary request: TTFT = first token - arrival (requests with a first token);
    TPOT = (completion - first token) / (output - 1) (completed requests with >= 2 output
    tokens). A request meets its SLAs when TTFT <= ``ttft_sla_s`` and (output 1 or) TPOT <=
    ``tpot_sla_s``; ``sla_attainment`` = completed requests meeting both / (completed +
    dropped), ``ttft_attainment`` and ``tpot_attainment`` the same for each target alone;
    ``goodput_rps`` = completed requests meeting both per second of the window.
    ``output_tokens_per_s``, ``preemptions``, ``iterations`` (``prefill_iterations`` of
    them prefills) and ``kv_utilization_mean`` (time average of KV blocks in use / KV
    blocks) cover the window; ``rejected`` counts prompts rejected for length during it,
    ``clipped`` summary requests whose output was clipped to ``max_model_len``.

    :param arrivals: arrival times of the summary requests (s).
    :param first_token: their first-token times (NaN: none yet).
    :param completion: their completion times (NaN: not completed).
    :param output_lengths: their output lengths (tokens, after clipping).
    """
    nan = float("nan")
    ttft = first_token - arrivals
    has_first = ~np.isnan(ttft)
    done = ~np.isnan(completion)
    multi = done & (output_lengths >= 2)
    tpot = np.full(arrivals.shape, nan)
    tpot[multi] = (completion[multi] - first_token[multi]) / (output_lengths[multi] - 1)
    ttft_ok = done & ~(ttft > ttft_sla_s)
    tpot_ok = done & ~(tpot > tpot_sla_s)  # NaN (one output token) meets it
    both = int(np.count_nonzero(ttft_ok & tpot_ok))
    denom = int(done.sum()) + int(dropped)

    def pct(x: np.ndarray, prefix: str) -> dict[str, float]:
        if x.size == 0:
            return {f"{prefix}_mean_ms": nan, f"{prefix}_p50_ms": nan, f"{prefix}_p90_ms": nan,
                    f"{prefix}_p99_ms": nan}
        p50, p90, p99 = np.percentile(x, [50.0, 90.0, 99.0]) * 1000.0
        return {f"{prefix}_mean_ms": float(x.mean() * 1000.0), f"{prefix}_p50_ms": float(p50),
                f"{prefix}_p90_ms": float(p90), f"{prefix}_p99_ms": float(p99)}

    return {
        **pct(ttft[has_first], "ttft"),
        **pct(tpot[multi], "tpot"),
        "sla_attainment": both / denom if denom else nan,
        "ttft_attainment": int(np.count_nonzero(ttft_ok)) / denom if denom else nan,
        "tpot_attainment": int(np.count_nonzero(tpot_ok)) / denom if denom else nan,
        "output_tokens_per_s": output_tokens / elapsed_s if elapsed_s > 0 else nan,
        "goodput_rps": both / elapsed_s if elapsed_s > 0 else nan,
        "preemptions": int(preemptions),
        "kv_utilization_mean": float(kv_utilization_mean),
        "iterations": int(iterations),
        "prefill_iterations": int(prefill_iterations),
        "rejected": int(rejected),
        "clipped": int(clipped),
    }
