"""Tests for batch_env.queueing: Inoue's greedy batch-service queue."""

from __future__ import annotations

import math

import numpy as np
import pytest

from batch_env import queueing
from batch_env.queueing import (
    inoue_bound_s,
    inoue_latency_given_mean_batch_s,
    inoue_mean_latency_s,
    inoue_phi0_s,
    inoue_phi1_s,
)

# Inoue (2021) Table 1 least-squares fits, converted from ms to s.
FITS = {
    "V100": (0.1438e-3, 1.8874e-3),
    "P4": (0.5833e-3, 1.4284e-3),
}
CASES = [(name, rho) for name in FITS for rho in (0.5, 0.9)]


def _simulate_latencies(rate: float, alpha: float, tau0: float, n: int, seed: int) -> np.ndarray:
    """Event-driven simulation of the greedy 'serve all' queue; per-request latency."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n))
    completion = np.empty(n)
    i = 0
    free_at = 0.0
    while i < n:
        start = max(free_at, arrivals[i])  # idle server starts at the next arrival
        j = int(np.searchsorted(arrivals, start, side="right"))  # everyone waiting
        free_at = start + tau0 + alpha * (j - i)
        completion[i:j] = free_at
        i = j
    return completion - arrivals


@pytest.mark.slow
@pytest.mark.parametrize(("name", "rho"), CASES)
def test_exact_mean_latency_matches_simulation(name: str, rho: float) -> None:
    alpha, tau0 = FITS[name]
    rate = rho / alpha
    n = 2_000_000
    seed = {("V100", 0.5): 11, ("V100", 0.9): 12, ("P4", 0.5): 13, ("P4", 0.9): 14}[(name, rho)]
    lat = _simulate_latencies(rate, alpha, tau0, n, seed=seed)
    # Drop warm-up (empty start) and the final batches (truncated arrival stream).
    lat = lat[n // 50 : n - n // 50]
    # Batch means over 40 contiguous blocks (~48k requests each, far longer than the
    # batch-size autocorrelation time even at rho = 0.9).
    n_blocks = 40
    blocks = lat[: len(lat) // n_blocks * n_blocks].reshape(n_blocks, -1).mean(axis=1)
    mean = float(blocks.mean())
    se = float(blocks.std(ddof=1) / math.sqrt(n_blocks))
    exact = inoue_mean_latency_s(rate, alpha, tau0).mean_latency_s
    assert abs(mean - exact) < 3.0 * se, (name, rho, mean, exact, se)
    # The check has teeth: the SE is small relative to the latency...
    assert se / exact < (2e-3 if rho == 0.5 else 1.5e-2)
    # ...and where exact and bound differ materially (P4, rho = 0.5: 1.4 %), the
    # simulation rejects the bound as the value of the mean latency.
    phi = inoue_bound_s(rate, alpha, tau0)
    if (phi - exact) / exact > 1e-2:
        assert phi - mean > 3.0 * se, (name, rho, mean, phi, se)


@pytest.mark.parametrize(("name", "rho"), CASES)
def test_truncation_robust(name: str, rho: float) -> None:
    alpha, tau0 = FITS[name]
    rate = rho / alpha
    res = inoue_mean_latency_s(rate, alpha, tau0)
    assert res.tail_mass < 1e-14
    assert math.isclose(res.stationary_distribution.sum(), 1.0, rel_tol=1e-12)
    assert res.stationary_distribution.min() >= 0.0
    _, pi2, _ = queueing._stationary(rate, alpha, tau0, 2 * res.truncation)
    b2 = np.arange(1, 2 * res.truncation + 1, dtype=np.float64)
    m2 = float(pi2 @ b2)
    s2 = float(pi2 @ (b2 * b2))
    seen2 = float(pi2 @ (b2 * (tau0 + alpha * b2))) / m2
    w2 = (s2 - m2) / (2.0 * rate * m2) + seen2
    assert abs(w2 - res.mean_latency_s) < 1e-10 * res.mean_latency_s
    assert abs(m2 - res.mean_batch) < 1e-10 * res.mean_batch


@pytest.mark.parametrize(("name", "rho"), CASES)
def test_exact_below_bound_and_identities(name: str, rho: float) -> None:
    alpha, tau0 = FITS[name]
    rate = rho / alpha
    res = inoue_mean_latency_s(rate, alpha, tau0)
    phi = inoue_bound_s(rate, alpha, tau0)
    assert phi == min(inoue_phi0_s(rate, alpha, tau0), inoue_phi1_s(rate, alpha, tau0))
    assert res.mean_latency_s <= phi * (1.0 + 1e-9)
    # Exact stationary identities: m (1 - rho) = lambda tau0 + p0 and
    # E[B^2] (1 - rho^2) = m (1 + 2 rho x) + x^2.
    x = rate * tau0
    m = res.mean_batch
    assert math.isclose(m * (1 - rho), x + res.prob_idle_after_batch, rel_tol=1e-11)
    assert math.isclose(
        res.second_moment_batch * (1 - rho**2), m * (1 + 2 * rho * x) + x * x, rel_tol=1e-11
    )
    assert math.isclose(
        inoue_latency_given_mean_batch_s(rate, alpha, tau0, m), res.mean_latency_s, rel_tol=1e-11
    )
    # Wait + service decomposition.
    assert math.isclose(
        res.mean_wait_s + res.mean_batch_time_seen_s, res.mean_latency_s, rel_tol=1e-14
    )


def test_v100_heavy_load_exact_equals_bound() -> None:
    alpha, tau0 = FITS["V100"]
    rate = 0.9 / alpha
    res = inoue_mean_latency_s(rate, alpha, tau0)
    assert math.isclose(res.mean_latency_s, inoue_bound_s(rate, alpha, tau0), rel_tol=1e-9)


def test_zero_overhead_is_phi0_exactly() -> None:
    # tau0 = 0: E[W] = alpha (2 + rho) / (2 (1 - rho^2)) regardless of p0.
    alpha = 0.1438e-3
    for rho in (0.1, 0.5, 0.9):
        rate = rho / alpha
        exact = inoue_mean_latency_s(rate, alpha, 0.0).mean_latency_s
        expected = alpha * (2 + rho) / (2 * (1 - rho**2))
        assert math.isclose(exact, expected, rel_tol=1e-11)
        assert math.isclose(inoue_phi0_s(rate, alpha, 0.0), expected, rel_tol=1e-15)


def test_tau0_to_zero_is_continuous() -> None:
    alpha, rho = 0.5833e-3, 0.5
    rate = rho / alpha
    w0 = inoue_mean_latency_s(rate, alpha, 0.0).mean_latency_s
    w_small = inoue_mean_latency_s(rate, alpha, 1e-9).mean_latency_s
    assert abs(w_small - w0) < 1e-5 * w0


def test_constant_batch_time_closed_form() -> None:
    # alpha = 0: H = tau0 always, so p0 = exp(-x), E[B] = x + exp(-x) and
    # E[W] = tau0 + lambda tau0^2 / (2 E[B]).
    tau0 = 1.8874e-3
    for x in (0.05, 1.0, 5.0):
        rate = x / tau0
        res = inoue_mean_latency_s(rate, 0.0, tau0)
        m = x + math.exp(-x)
        assert math.isclose(res.mean_batch, m, rel_tol=1e-12)
        assert math.isclose(res.mean_latency_s, tau0 + rate * tau0**2 / (2 * m), rel_tol=1e-12)


def test_light_load_tends_to_single_service_time() -> None:
    alpha, tau0 = FITS["V100"]
    prev = math.inf
    for rate in (1.0, 1e-1, 1e-2, 1e-3):
        w = inoue_mean_latency_s(rate, alpha, tau0).mean_latency_s
        err = w - (tau0 + alpha)
        assert 0.0 <= err < prev  # decreases towards tau(1) from above
        prev = err
    assert prev < 1e-5 * (tau0 + alpha)
    # phi1 (E[B] >= 1) is the tight bound at light load.
    assert math.isclose(inoue_bound_s(1e-3, alpha, tau0), tau0 + alpha, rel_tol=1e-5)


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError):
        inoue_mean_latency_s(1.0 / 0.1438e-3, 0.1438e-3, 1e-3)  # rho = 1
    with pytest.raises(ValueError):
        inoue_mean_latency_s(-1.0, 1e-3, 1e-3)
    with pytest.raises(ValueError):
        inoue_bound_s(1.0, 0.0, 0.0)
