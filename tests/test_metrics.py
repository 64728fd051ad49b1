"""The metrics recorder's array helpers: bit-identical to NumPy's definitions."""

from __future__ import annotations

import numpy as np
import pytest

from batch_env.metrics import latency_stats, percentiles


@pytest.mark.parametrize("seed", range(4))
def test_percentiles_bit_identical_to_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for size in [1, 2, 3, 7, 100, 101, 1999, 2000]:
        for values in (rng.exponential(1.0, size), np.round(rng.exponential(1.0, size), 1)):
            kept = values.copy()
            assert np.array_equal(percentiles(values), np.percentile(values, [50, 95, 99]))
            assert np.array_equal(values, kept)  # not modified


def test_latency_stats_rows_match_one_row_at_a_time() -> None:
    rng = np.random.default_rng(7)
    rows = np.round(rng.exponential(0.05, (6, 300)), 3)
    rows[:, 250:] = np.nan  # columns past a row's count are ignored, whatever they hold
    counts = np.array([0, 1, 2, 250, 17, 249])
    sla = 0.05
    st = latency_stats(rows, counts, sla)
    for r, n in enumerate(counts):
        x = rows[r, :n]
        assert st["completed"][r] == n
        assert st["within"][r] == np.count_nonzero(~(x > sla))
        if n == 0:
            assert np.isnan([st[k][r] for k in ("mean_ms", "p50_ms", "p95_ms", "p99_ms")]).all()
            continue
        assert st["mean_ms"][r] == x.mean() * 1000.0
        got = [st["p50_ms"][r], st["p95_ms"][r], st["p99_ms"][r]]
        assert np.array_equal(got, np.percentile(x, [50, 95, 99]) * 1000.0)


def test_latency_stats_overwrite_gives_the_same_figures() -> None:
    rng = np.random.default_rng(8)
    rows = rng.exponential(0.05, (3, 400))
    counts = np.array([400, 123, 0])
    kept = latency_stats(rows, counts, 0.05)
    scratch = rows.copy()
    got = latency_stats(scratch, counts, 0.05, overwrite=True)
    for key, value in kept.items():
        assert np.array_equal(value, got[key], equal_nan=True), key
