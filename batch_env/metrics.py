"""The one metrics recorder: per-request records to the episode summary.

The event loop (:mod:`batch_env.core`) keeps per-request arrival and completion times
and cumulative totals; :func:`summarize` turns them into ``info["serving"]`` at episode
end. Keys (docs/design.md: The environments), latency in milliseconds:

``completed``, ``dropped``, ``in_system_at_end``, ``latency_mean_ms``, ``latency_p50_ms``,
``latency_p95_ms``, ``latency_p99_ms``, ``sla_attainment``, ``throughput_rps``,
``power_mean_w``, ``energy_per_request_j``, ``batch_size_mean``, ``drop_rate``,
``reward_rate_per_s``, ``elapsed_s``, and the window's raw totals
``latency_integral_s``, ``energy_j``, ``sla_misses``, plus ``window_drops`` (drops of any
request during the window, the D in the reward; ``dropped`` counts dropped *summary*
requests), and the whole episode's counts (every request, summary or not):
``arrived_total``, ``completed_total``, ``dropped_total``, ``completed_outside_window``,
``dropped_outside_window`` and ``drop_rate_total``.

Definitions: the window runs from the first summary arrival to the end of the episode;
``elapsed_s``, ``power_mean_w``, ``energy_per_request_j``, ``throughput_rps`` and
``reward_rate_per_s`` use the window's time, energy and reward (so
``reward_rate_per_s * elapsed_s`` is exactly minus the weighted raw totals); latency and
SLA figures use the summary requests; ``sla_attainment`` = completed within SLA /
(completed + dropped). Percentiles use linear interpolation (NumPy's default). With no
completed summary request the latency figures are NaN (nothing was measured) and
``energy_per_request_j`` is NaN; if the window never started (``horizon_s`` ended the
episode before the first summary arrival) the rates are NaN too.

Outside the window. The summary requests are a subset of the episode's arrivals: warm-up
arrivals come before them, and arrivals keep coming after the last one until the episode
ends. The keys above never count those others (``drop_rate`` = dropped summary requests /
summary requests), so a policy that never serves can show ``drop_rate`` 0 while the queue
it filled with summary requests rejects every later arrival. The episode keys say so:
``arrived_total`` counts every arrival of the episode (admitted, dropped, and LLM prompts
rejected for length), ``completed_total`` every completed request, ``dropped_total`` every
drop (the per-step ``info["dropped_total"]`` at the end); ``completed_outside_window`` =
``completed_total - completed`` and ``dropped_outside_window`` = ``dropped_total -
dropped`` are the requests that are not summary requests; ``drop_rate_total`` =
``dropped_total / arrived_total`` (0.0 with no arrival).

Warnings. :func:`summary_warning` flags a summary whose headline figures misdescribe the
episode, and the envs emit it (:class:`SummaryWarning`, once per episode; the vector env
once per step for the lanes that ended in it; :func:`batch_env.evaluate.evaluate` once per
evaluation instead): when no summary request completed (``completed`` 0: the latency
figures are NaN, nothing was measured), and when drops outside the window change the
picture: ``dropped_outside_window > 0`` and ``drop_rate_total > 2 * drop_rate + 0.01``
(drops outside the window at a rate well above the summary's; a rate that merely
fluctuates around the summary's does not warn). Silence them with
``warnings.simplefilter("ignore", batch_env.metrics.SummaryWarning)``.
"""

from __future__ import annotations

import math
import warnings
from bisect import bisect_right
from dataclasses import astuple, dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

_NAN = float("nan")

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
    "arrived_total",
    "completed_total",
    "dropped_total",
    "completed_outside_window",
    "dropped_outside_window",
    "drop_rate_total",
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
    "completed",
    "dropped_outside_window",
)


class SeedWarning(UserWarning):
    """Different seeds give the same episode: the env draws nothing from the seed (a trace
    workload without ``random_offset``, and nothing else drawn), so an evaluation's spread
    over seeds is 0 and says nothing of the figures' noise."""


class SummaryWarning(UserWarning):
    """An episode summary whose headline figures misdescribe the episode (module docstring:
    Warnings)."""


def hides_outside_drops(summary: dict[str, Any]) -> bool:
    """Drops outside the window change the picture (module docstring: Warnings):
    ``dropped_outside_window > 0`` and ``drop_rate_total > 2 * drop_rate + 0.01``."""
    out = summary.get("dropped_outside_window", 0)
    return out > 0 and summary["drop_rate_total"] > 2.0 * summary["drop_rate"] + 0.01


def summary_warning(summary: dict[str, Any]) -> str | None:
    """A sentence on what the summary hides (module docstring: Warnings), or ``None``
    (also for a summary without the keys it reads)."""
    if "completed" not in summary or "dropped_outside_window" not in summary:
        return None
    problems = []
    completed, dropped = int(summary["completed"]), int(summary["dropped"])
    if completed == 0:
        problems.append(
            f"no summary request completed (completed=0, dropped={dropped}, "
            f"in_system_at_end={int(summary['in_system_at_end'])}): the latency figures are NaN"
        )
    if hides_outside_drops(summary):
        out = int(summary["dropped_outside_window"])
        problems.append(
            f"{out} of the episode's {int(summary['arrived_total'])} arrivals were dropped outside "
            f"the summary window (dropped_outside_window={out}; drop_rate={summary['drop_rate']:.4g} "
            f"counts summary requests only, drop_rate_total={summary['drop_rate_total']:.4g})"
        )
    return "; and ".join(problems) if problems else None


def warn_summaries(
    summaries: dict[int, dict[str, Any]] | dict[str, Any], where: str, stacklevel: int = 3
) -> None:
    """Emit one :class:`SummaryWarning` for the summaries that hide something.

    :param summaries: one summary, or ``{lane: summary}`` (the vector env's lanes).
    :param where: what ended, e.g. ``"DynamicBatching-v0 episode"``.
    """
    if "completed" in summaries:
        msg = summary_warning(summaries)  # type: ignore[arg-type]
        text = f"{where}: {msg}" if msg else None
    else:
        lines = [f"lane {n}: {m}" for n, s in summaries.items() if (m := summary_warning(s))]
        text = f"{where}: " + " | ".join(lines) if lines else None
    if text:
        warnings.warn(text, SummaryWarning, stacklevel=stacklevel)


@dataclass(frozen=True)
class WindowStart:
    """Cumulative totals at the instant the first summary request arrives."""

    time_s: float
    latency_integral_s: float
    energy_j: float
    misses: float  # weighted misses where classes weigh them (LLMBatching-v2); else a count
    drops: int
    entry: int
    n_batches: int
    sum_batch: int


_Q = (50.0 / 100.0, 95.0 / 100.0, 99.0 / 100.0)  # the quantiles, as np.percentile's q / 100


@lru_cache(maxsize=4096)
def _order_stats(n: int) -> tuple[tuple[int, int, float], ...]:
    """For ``n`` sorted values, each quantile's NumPy order statistics and weight
    (``method="linear"``: virtual index ``(n - 1) * q``, its floor, the next index capped
    at ``n - 1``, and the fractional part), computed with the same float operations."""
    n1 = n - 1
    out = []
    for q in _Q:
        virtual = n1 * q
        prev = math.floor(virtual)
        out.append((prev, min(prev + 1, n1), virtual - prev))
    return tuple(out)


def _sorted_percentiles(srt: np.ndarray, n: int) -> list[float]:
    """The 50/95/99th percentiles of the first ``n`` (>= 1) entries of the sorted row
    ``srt``: NumPy's order statistics and its interpolation (``_lerp``), as Python float
    operations (the same IEEE operations in the same order)."""
    out = []
    for lo, hi, gamma in _order_stats(n):
        a, b = float(srt[lo]), float(srt[hi])
        diff = b - a
        out.append(b - diff * (1.0 - gamma) if gamma >= 0.5 else a + diff * gamma)
    return out


def latency_stats(
    rows: np.ndarray, counts: np.ndarray, sla_s: float, *, overwrite: bool = False
) -> dict[str, np.ndarray]:
    """Latency figures of ``k`` episodes at once: row ``r`` holds ``counts[r]`` latencies
    (seconds) in its first columns; later columns are ignored.

    The percentiles are NumPy's default (linear interpolation), bit-identical to
    ``np.percentile(row[:n], [50, 95, 99])``: the same order statistics (from one sort of
    the padded rows, which beats a partition per row) and the same interpolation
    formula. The mean is ``row[:n].sum() / n``, as ``ndarray.mean`` computes it. Past the
    sort, the work per row is a few scalar reads: the vector env calls this with the
    handful of lanes ending in a step, where array code's fixed costs would dominate.

    :param rows: ``(k, W)`` float64, no NaN in the counted columns.
    :param counts: ``(k,)`` number of latencies per row (0..W).
    :param sla_s: the SLA; a latency meets it when not above it.
    :param overwrite: ``rows`` may be reordered in place (it is a scratch copy).
    :return: ``completed``, ``within`` (int64), ``mean_ms``, ``p50_ms``, ``p95_ms``,
        ``p99_ms`` (float64, NaN for rows without latencies), each ``(k,)``.
    """
    rows = np.asarray(rows, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    ns = counts.tolist()
    width = max(ns, default=0)
    lat = rows[:, :width] if overwrite else rows[:, :width].copy()
    mean = np.full(len(ns), np.nan)
    pct = np.full((len(ns), 3), np.nan)
    within = np.zeros(len(ns), dtype=np.int64)
    for r, n in enumerate(ns):
        if n:
            mean[r] = np.add.reduce(lat[r, :n]) / n  # (ndarray.sum, without its wrapper)
        if n < width:
            lat[r, n:] = np.inf  # (not NaN: sorts last, never within the SLA)
    lat.sort(axis=1)
    for r, n in enumerate(ns):
        if n:
            row = lat[r]
            within[r] = row.searchsorted(sla_s, "right")  # (sorted, no NaN: the count <= sla)
            pct[r] = _sorted_percentiles(row, n)
    mean *= 1000.0
    pct *= 1000.0
    return {
        "completed": counts.copy(),
        "within": within,
        "mean_ms": mean,
        "p50_ms": pct[:, 0],
        "p95_ms": pct[:, 1],
        "p99_ms": pct[:, 2],
    }


def percentiles(values: np.ndarray) -> np.ndarray:
    """The 50th, 95th and 99th percentiles of ``values`` (1-D float64, no NaN, not empty),
    bit-identical to ``np.percentile(values, [50, 95, 99])`` (see :func:`latency_stats`).
    ``values`` is not modified."""
    return np.array(_sorted_percentiles(np.sort(values), values.size))


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
    misses: float,
    drops: int,
    n_batches: int,
    sum_batch: int,
    in_system: int,
    sla_s: float,
    weights: tuple[float, float, float, float],
    arrived_total: int,
    completed_total: int,
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
    :param misses: cumulative SLA misses at the end (weighted, where request classes weigh
        them).
    :param drops: cumulative drops at the end.
    :param n_batches: cumulative number of batches started.
    :param sum_batch: cumulative sum of batch sizes.
    :param in_system: requests still in the system at the end.
    :param sla_s: the SLA in seconds.
    :param weights: reward weights (latency, energy, sla, drop).
    :param arrived_total: every arrival of the episode (admitted, dropped or rejected).
    :param completed_total: every request completed in the episode.
    """
    if window is None:
        window = WindowStart(
            now_s, latency_integral_s, energy_j, misses, drops, len(arrivals), n_batches, sum_batch
        )
        entry_hi = window.entry
    lo = window.entry
    hi = min(entry_hi, n_done)
    comp = np.asarray(completions[lo:hi], dtype=np.float64)
    arr = np.asarray(arrivals[lo:hi], dtype=np.float64)
    lat = comp - arr
    stats = latency_stats(lat[None, :], np.array([lat.size]), sla_s)
    # a WindowStart of one-element columns (summaries_from_totals takes per-episode sequences)
    one = WindowStart(*([v] for v in astuple(window)))  # type: ignore[arg-type]
    return summaries_from_totals(
        stats,
        window=one,
        n_entries=[entry_hi - lo],
        drops_summary=[drops_summary],
        now_s=[now_s],
        latency_integral_s=[latency_integral_s],
        energy_j=[energy_j],
        misses=[misses],
        drops=[drops],
        n_batches=[n_batches],
        sum_batch=[sum_batch],
        in_system=[in_system],
        weights=weights,
        arrived_total=[arrived_total],
        completed_total=[completed_total],
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
    arrived_total: Any,
    completed_total: Any,
) -> list[dict[str, Any]]:
    """The episode summaries of ``k`` episodes from the rows of :func:`latency_stats` and
    the totals at the window start and at the end (the parameters of :func:`summarize`;
    ``n_entries`` counts the admitted summary requests). Every argument but ``weights``
    holds ``k`` values (arrays or sequences; ``window``'s fields too): :func:`summarize`
    passes one episode, the vector env all lanes ending in a step (a handful: plain
    Python per episode costs less there than array code's fixed costs). The arithmetic
    is the same for both: given equal totals, a lane's summary equals the scalar env's.
    """
    col = lambda v: v.tolist() if isinstance(v, np.ndarray) else list(v)  # noqa: E731
    columns = [
        col(stats[k]) for k in ("completed", "within", "mean_ms", "p50_ms", "p95_ms", "p99_ms")
    ]
    columns += [
        col(getattr(window, f))
        for f in (
            "time_s",
            "latency_integral_s",
            "energy_j",
            "misses",
            "drops",
            "n_batches",
            "sum_batch",
        )
    ]
    columns += [
        col(v)
        for v in (
            n_entries,
            drops_summary,
            now_s,
            latency_integral_s,
            energy_j,
            misses,
            drops,
            n_batches,
            sum_batch,
            in_system,
            arrived_total,
            completed_total,
        )
    ]
    wl, we, ws, wd = weights
    nan = float("nan")
    out = []
    for (
        completed,
        within,
        mean,
        p50,
        p95,
        p99,
        w_time,
        w_L,
        w_E,
        w_M,
        w_D,
        w_nb,
        w_sb,
        n_ent,
        d_sum,
        now,
        L_end,
        E_end,
        M_end,
        D_end,
        nb_end,
        sb_end,
        in_sys,
        arr_tot,
        comp_tot,
    ) in zip(*columns, strict=True):
        completed, within, d_sum = int(completed), int(within), int(d_sum)
        n_summary = int(n_ent) + d_sum
        elapsed = float(now) - float(w_time)
        L = float(L_end) - float(w_L)
        E = float(E_end) - float(w_E)
        M = int(M_end) - int(w_M)
        D = int(D_end) - int(w_D)
        nb = int(nb_end) - int(w_nb)
        reward = -(wl * L + we * E + ws * M + wd * D)
        denom = completed + d_sum
        out.append(
            {
                "completed": completed,
                "dropped": d_sum,
                "in_system_at_end": int(in_sys),
                "latency_mean_ms": float(mean),
                "latency_p50_ms": float(p50),
                "latency_p95_ms": float(p95),
                "latency_p99_ms": float(p99),
                "sla_attainment": within / denom if denom else nan,
                "throughput_rps": completed / elapsed if elapsed > 0 else nan,
                "power_mean_w": E / elapsed if elapsed > 0 else nan,
                "energy_per_request_j": E / completed if completed else nan,
                "batch_size_mean": (int(sb_end) - int(w_sb)) / nb if nb else 0.0,
                "drop_rate": d_sum / n_summary if n_summary else 0.0,
                "reward_rate_per_s": reward / elapsed if elapsed > 0 else nan,
                "elapsed_s": elapsed,
                "latency_integral_s": L,
                "energy_j": E,
                "sla_misses": M,
                "window_drops": D,
                "arrived_total": int(arr_tot),
                "completed_total": int(comp_tot),
                "dropped_total": int(D_end),
                "completed_outside_window": int(comp_tot) - completed,
                "dropped_outside_window": int(D_end) - d_sum,
                "drop_rate_total": int(D_end) / int(arr_tot) if int(arr_tot) else 0.0,
            }
        )
    return out


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
    ttft_sla_s: float | np.ndarray,
    tpot_sla_s: float | np.ndarray,
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
    :param ttft_sla_s: the TTFT target: one, or one per request (request classes).
    :param tpot_sla_s: the TPOT target: one, or one per request.
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
            return {
                f"{prefix}_mean_ms": nan,
                f"{prefix}_p50_ms": nan,
                f"{prefix}_p90_ms": nan,
                f"{prefix}_p99_ms": nan,
            }
        p50, p90, p99 = np.percentile(x, [50.0, 90.0, 99.0]) * 1000.0
        return {
            f"{prefix}_mean_ms": float(x.mean() * 1000.0),
            f"{prefix}_p50_ms": float(p50),
            f"{prefix}_p90_ms": float(p90),
            f"{prefix}_p99_ms": float(p99),
        }

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


#: the keys of each class's summary (``serving["classes"]``) taken from :func:`llm_metrics`
_CLASS_KEYS = (
    "sla_attainment",
    "ttft_attainment",
    "tpot_attainment",
    "goodput_rps",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
)


def llm_episode_summary(
    *,
    arrivals: list[float],
    finished_at: list[float | None],
    first_token: list[float],
    output: list[int],
    request_class: list[int],
    window: WindowStart | None,
    entry_hi: int | None,
    weights: tuple[float, float, float, float],
    totals: dict[str, Any],
    counters: tuple[int, int, float, int, int, int],
    counters_at_start: tuple[int, int, float, int, int, int] | None,
    kv_total: int,
    rejected_at: list[float],
    classes: tuple[Any, ...] | None,
    ttft_sla_s: list[float],
    tpot_sla_s: list[float],
    class_drops: tuple[list[int] | None, list[int] | None, list[int]],
) -> dict[str, Any]:
    """An LLM server's episode summary (``info["serving"]`` of the LLM envs): the keys of
    :func:`summarize` (latency = end-to-end) over the summary requests that completed, and
    :func:`llm_metrics`' LLM keys; with several request classes, ``"classes"``: each one's
    figures against its own SLAs.

    :param arrivals: each entry's arrival time (entries in admission order); with
        ``finished_at`` (completion, ``None`` while in the system), ``first_token`` (``nan``
        before it), ``output`` (true output tokens) and ``request_class``.
    :param window: the summary window's start (``None``: it never opened); ``entry_hi``
        the entry count at its end mark (``None``: not reached).
    :param totals: the loop's totals, :func:`summarize`'s keyword arguments from
        ``drops_summary`` to ``completed_total`` (:meth:`batch_env.core.ServingLoop.totals`).
    :param counters: output tokens, preemptions, KV-use integral (block-seconds),
        iterations, prefill iterations and clipped outputs now; ``counters_at_start``
        the same when the window opened (``None``: it never did).
    :param rejected_at: arrival times of the rejected prompts (sorted).
    :param classes: the request classes when there are several, else ``None``.
    :param ttft_sla_s: each class's TTFT SLA, and ``tpot_sla_s`` its TPOT SLA.
    :param class_drops: drops per class at the window's start, at its end mark and now.
    :param weights: the reward weights (latency, energy, sla, drop).
    """
    n = len(arrivals)
    lo = window.entry if window is not None else n
    hi = entry_hi if entry_hi is not None else n
    fin = np.array([_NAN if f is None else f for f in finished_at[lo:hi]], dtype=np.float64)
    arr = np.asarray(arrivals[lo:hi], dtype=np.float64)
    first = np.asarray(first_token[lo:hi], dtype=np.float64)
    out = np.asarray(output[lo:hi], dtype=np.int64)
    done = ~np.isnan(fin)
    base = summarize(
        arrivals=arr[done].tolist(),
        completions=fin[done].tolist(),
        n_done=int(done.sum()),
        window=None if window is None else replace(window, entry=0),
        entry_hi=int(done.sum()),
        sla_s=math.inf,
        weights=weights,
        **totals,
    )
    now_s, drops_summary = totals["now_s"], totals["drops_summary"]
    w0 = counters_at_start if counters_at_start is not None else counters
    t0 = window.time_s if window is not None else now_s
    cls = np.asarray(request_class[lo:hi], dtype=np.intp)

    def per_request(per_class: list[float]) -> float | np.ndarray:
        return per_class[0] if classes is None else np.asarray(per_class)[cls]

    base.update(
        llm_metrics(
            arrivals=arr,
            first_token=first,
            completion=fin,
            output_lengths=out,
            ttft_sla_s=per_request(ttft_sla_s),
            tpot_sla_s=per_request(tpot_sla_s),
            dropped=drops_summary,
            elapsed_s=base["elapsed_s"],
            output_tokens=counters[0] - w0[0],
            preemptions=counters[1] - w0[1],
            kv_utilization_mean=(
                (counters[2] - w0[2]) / kv_total / (now_s - t0) if now_s > t0 else _NAN
            ),
            iterations=counters[3] - w0[3],
            prefill_iterations=counters[4] - w0[4],
            rejected=bisect_right(rejected_at, now_s) - bisect_right(rejected_at, t0),
            clipped=counters[5] - w0[5],
        )
    )
    if classes is not None:
        drops_w0, drops_end, drops_now = class_drops
        base["classes"] = _class_summaries(
            classes,
            cls,
            (arr, first, fin, out),
            (drops_w0 or drops_now, drops_end or drops_now),
            (ttft_sla_s, tpot_sla_s),
            base["elapsed_s"],
        )
    return base


def _class_summaries(
    classes: tuple[Any, ...],
    cls: np.ndarray,
    requests: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    drops: tuple[list[int], list[int]],
    slas: tuple[list[float], list[float]],
    elapsed_s: float,
) -> dict[str, dict[str, Any]]:
    """``serving["classes"]``: per class, its summary requests' completions, drops,
    attainment (TTFT, TPOT, both: of completed + dropped), goodput and latency
    percentiles, against its own SLAs. ``requests``: the summary requests' arrival, first
    token, completion and output tokens; ``drops``: per class at the window's start and
    end mark; ``slas``: per class TTFT and TPOT SLAs (s)."""
    arr, first, fin, out = requests
    w0, end = drops
    ttft, tpot = slas
    out_d: dict[str, dict[str, Any]] = {}
    for c, rc in enumerate(classes):
        m = cls == c
        done = ~np.isnan(fin[m])
        figures = llm_metrics(
            arrivals=arr[m],
            first_token=first[m],
            completion=fin[m],
            output_lengths=out[m],
            ttft_sla_s=ttft[c],
            tpot_sla_s=tpot[c],
            dropped=end[c] - w0[c],
            elapsed_s=elapsed_s,
            output_tokens=0,
            preemptions=0,
            kv_utilization_mean=_NAN,
            iterations=0,
            prefill_iterations=0,
            rejected=0,
            clipped=0,
        )
        e2e = (fin[m] - arr[m])[done]
        out_d[rc.name] = {
            "requests": int(m.sum()),
            "completed": int(done.sum()),
            "in_system_at_end": int(m.sum() - done.sum()),
            "dropped": end[c] - w0[c],
            "latency_mean_ms": float(e2e.mean() * 1000.0) if e2e.size else _NAN,
            **{k: figures[k] for k in _CLASS_KEYS},
            "ttft_sla_ms": ttft[c] * 1000.0,
            "tpot_sla_ms": tpot[c] * 1000.0,
            "weight": rc.weight,
        }
    return out_d
