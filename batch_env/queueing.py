"""Exact queueing results for a greedy batch-service queue (Inoue, 2021).

What it is for: the reference the simulator is validated against. No env or policy uses
it; ``tests/test_dynamic_batching.py`` holds ``DynamicBatching-v0`` under greedy to
:func:`inoue_mean_latency_s` (docs/validation.md: within 0.04% at load 0.5), and a user who
changes the event loop can check it the same way. It stays in the library, not in the
tests, so that this check is one import away for anyone.

Model
-----
This is the model of Y. Inoue, "Queueing analysis of GPU-based inference servers
with dynamic batching: A closed-form characterization", *Performance Evaluation*
147 (2021), arXiv:1912.06322:

* requests arrive as a Poisson process with rate ``lambda`` (per second);
* one server; greedy "serve all" dynamic batching with unlimited batch size:
  whenever the server becomes free and requests are waiting, *all* of them are
  served together as one batch; if nobody is waiting when a batch completes, the
  server idles and the next arrival immediately starts a batch of size 1;
* the service time of a batch of size ``b`` is deterministic,
  ``tau(b) = tau0 + alpha * b``; the load is ``rho = lambda * alpha < 1``.

Exact mean latency
------------------
Let ``B_n`` be the size of the n-th batch and ``A_n ~ Poisson(lambda tau(B_n))`` the
number of arrivals during its service. Then ``B_{n+1} = A_n`` if ``A_n >= 1`` and
``B_{n+1} = 1`` otherwise, so ``(B_n)`` is a Markov chain on ``{1, 2, ...}``
(embedded at batch-start epochs). Its stationary law ``pi`` is computed numerically
on an adaptively chosen truncation ``{1, ..., N}``.

The mean latency (sojourn time: waiting plus service) of an arbitrary request is

    E[W] = (E[B^2] - E[B]) / (2 lambda E[B])  +  E[B tau(B)] / E[B].        (1)

Derivation (renewal-reward over batches, exact including idle periods). Give every
request to the batch that serves it. The requests of batch ``n+1`` are

* if ``A_n >= 1``: the ``A_n`` arrivals during the service of batch ``n``. Given
  ``H_n = tau(B_n)`` and ``A_n``, they are i.i.d. uniform on that service interval,
  so their total waiting time until batch ``n+1`` starts has mean
  ``A_n H_n / 2``;
* if ``A_n = 0``: a single request that starts service on arrival (wait 0), which
  also equals ``A_n H_n / 2 = 0``.

Hence the expected total pre-service wait attributed to a batch is
``E[A H / 2] = lambda E[H^2] / 2``, and ``E[A^2] - E[A] = lambda^2 E[H^2]``
(Poisson factorial moment). Since ``B' = A`` when ``A >= 1`` and ``B' = 1`` when
``A = 0`` (where ``B'^2 - B' = 0 = A^2 - A``), stationarity gives
``E[B^2] - E[B] = E[A^2] - E[A] = lambda^2 E[H^2]`` *exactly*. Dividing the per-batch
reward by the mean number of requests per batch ``E[B]`` (renewal-reward) gives the
first term of (1); the second term is the service time ``E[B tau(B)] / E[B]`` of the
batch seen by a random request (size-biased batch). So Inoue's formula (1) is exact
with idling; no correction term is needed.

Closed-form structure and upper bound
-------------------------------------
With ``x = lambda tau0`` and ``m = E[B]``, the stationary equations give exactly::

    m (1 - rho) = x + p0,           p0 = P(A = 0) = E[exp(-lambda tau(B))],
    E[B^2] (1 - rho^2) = m (1 + 2 rho x) + x^2,

and substituting in (1)::

    E[W] = a (1 + 2 rho x) / (1 - rho^2) + tau0 (1 + rho)
           + [a x^2 / (1 - rho^2) + lambda tau0^2 / 2] / m,   a = alpha (2 + rho) / 2,

which is non-increasing in ``m``. Every lower bound on ``m`` therefore gives an
upper bound on ``E[W]``. Two closed-form lower bounds are ``m >= x / (1 - rho)``
(from ``p0 >= 0``) and ``m >= 1`` (batches are non-empty), giving::

    phi0 = alpha (2 + rho) / (2 (1 - rho^2)) + 3 tau0 / (2 (1 - rho)),
    phi1 = alpha (2 + rho) (1 + 2 rho x + x^2) / (2 (1 - rho^2))
           + tau0 (1 + rho) + x tau0 / 2,

and ``E[W] <= phi = min(phi0, phi1)``. The bound is tight when ``p0`` is negligible
(heavy traffic, ``x`` large: then ``E[W] = phi0`` up to ``O(p0)``), and for
``tau0 = 0`` where ``E[W] = phi0`` exactly. These closed forms are *derived here* from
the stationary equations; they have the min-of-two structure of Inoue's theorem but
were not transcribed from the paper.

All times are in seconds and rates in 1/second (any consistent unit works).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from numpy.typing import NDArray
from scipy.stats import poisson

__all__ = [
    "InoueResult",
    "inoue_bound_s",
    "inoue_latency_given_mean_batch_s",
    "inoue_mean_latency_s",
    "inoue_phi0_s",
    "inoue_phi1_s",
]

_MAX_TRUNCATION = 1 << 15


@dataclass(frozen=True)
class InoueResult:
    """Exact stationary quantities of the greedy batch-service queue.

    Attributes:
        mean_latency_s: Mean latency ``E[W]`` (waiting plus service) of a request, s.
        mean_wait_s: Mean pre-service wait ``(E[B^2] - E[B]) / (2 lambda E[B])``, s.
        mean_batch: Mean batch size ``E[B]`` (per batch, not size-biased).
        second_moment_batch: ``E[B^2]``.
        mean_batch_time_seen_s: ``E[B tau(B)] / E[B]``, the service time of the batch
            that serves a randomly chosen request, s.
        prob_idle_after_batch: ``p0 = P(no arrival during a batch service)``, the
            fraction of batches followed by an idle period.
        truncation: Largest batch size ``N`` kept in the truncated chain.
        tail_mass: Error indicator: stationary mass in the top quarter of the
            truncated state space plus the per-step probability mass that the
            untruncated chain would jump above ``N``.
        batch_sizes: States ``1..N`` of the chain, shape ``(N,)``.
        stationary_distribution: ``pi[k] = P(B = batch_sizes[k])``, shape ``(N,)``.
    """

    mean_latency_s: float
    mean_wait_s: float
    mean_batch: float
    second_moment_batch: float
    mean_batch_time_seen_s: float
    prob_idle_after_batch: float
    truncation: int
    tail_mass: float
    batch_sizes: NDArray[np.int64]
    stationary_distribution: NDArray[np.float64]


def _check_params(rate_per_s: float, alpha_s: float, tau0_s: float) -> float:
    """Validate parameters and return the load ``rho = rate * alpha``."""
    if not (math.isfinite(rate_per_s) and rate_per_s > 0.0):
        raise ValueError(f"rate_per_s must be finite and > 0, got {rate_per_s}")
    if not (math.isfinite(alpha_s) and alpha_s >= 0.0):
        raise ValueError(f"alpha_s must be finite and >= 0, got {alpha_s}")
    if not (math.isfinite(tau0_s) and tau0_s >= 0.0):
        raise ValueError(f"tau0_s must be finite and >= 0, got {tau0_s}")
    if alpha_s + tau0_s <= 0.0:
        raise ValueError("alpha_s + tau0_s must be > 0")
    rho = rate_per_s * alpha_s
    if rho >= 1.0:
        raise ValueError(f"unstable: rho = rate * alpha = {rho} >= 1")
    return rho


def inoue_latency_given_mean_batch_s(
    rate_per_s: float, alpha_s: float, tau0_s: float, mean_batch: float
) -> float:
    """Mean latency as an exact function of the mean batch size ``m = E[B]``.

    ``E[W] = a (1 + 2 rho x)/(1 - rho^2) + tau0 (1 + rho)
    + [a x^2/(1 - rho^2) + lambda tau0^2/2] / m`` with ``x = lambda tau0`` and
    ``a = alpha (2 + rho)/2`` (see the module docstring). Evaluated at the true
    ``E[B]`` this equals formula (1); it is non-increasing in ``m``, so lower bounds
    on ``m`` give upper bounds on the latency.

    Args:
        rate_per_s: Poisson arrival rate ``lambda``.
        alpha_s: Per-request service-time slope ``alpha``.
        tau0_s: Fixed per-batch service-time overhead ``tau0``.
        mean_batch: Mean batch size ``m > 0``.

    Returns:
        The mean latency in seconds.
    """
    rho = _check_params(rate_per_s, alpha_s, tau0_s)
    if not mean_batch > 0.0:
        raise ValueError(f"mean_batch must be > 0, got {mean_batch}")
    x = rate_per_s * tau0_s
    a = alpha_s * (2.0 + rho) / 2.0
    one_m_rho2 = 1.0 - rho * rho
    const = a * (1.0 + 2.0 * rho * x) / one_m_rho2 + tau0_s * (1.0 + rho)
    coef = a * x * x / one_m_rho2 + 0.5 * rate_per_s * tau0_s * tau0_s
    return const + coef / mean_batch


def inoue_phi0_s(rate_per_s: float, alpha_s: float, tau0_s: float) -> float:
    """Upper bound from ``E[B] >= lambda tau0 / (1 - rho)`` (i.e. ``p0 >= 0``).

    ``phi0 = alpha (2 + rho) / (2 (1 - rho^2)) + 3 tau0 / (2 (1 - rho))``. Exact when
    ``tau0 = 0``; asymptotically exact when ``p0 -> 0`` (heavy traffic).
    """
    rho = _check_params(rate_per_s, alpha_s, tau0_s)
    return alpha_s * (2.0 + rho) / (2.0 * (1.0 - rho * rho)) + 1.5 * tau0_s / (1.0 - rho)


def inoue_phi1_s(rate_per_s: float, alpha_s: float, tau0_s: float) -> float:
    """Upper bound from ``E[B] >= 1``.

    ``phi1 = alpha (2 + rho)(1 + 2 rho x + x^2) / (2 (1 - rho^2)) + tau0 (1 + rho)
    + x tau0 / 2`` with ``x = lambda tau0``. Tight as ``lambda -> 0`` (both sides tend
    to ``tau(1) = tau0 + alpha``).
    """
    return inoue_latency_given_mean_batch_s(rate_per_s, alpha_s, tau0_s, 1.0)


def inoue_bound_s(rate_per_s: float, alpha_s: float, tau0_s: float) -> float:
    """Closed-form upper bound ``phi = min(phi0, phi1)`` on the mean latency, s."""
    return min(
        inoue_phi0_s(rate_per_s, alpha_s, tau0_s),
        inoue_phi1_s(rate_per_s, alpha_s, tau0_s),
    )


def _initial_truncation(rate_per_s: float, alpha_s: float, tau0_s: float, rho: float) -> int:
    """Truncation guess: upper mean estimate plus many standard deviations."""
    x = rate_per_s * tau0_s
    m_hi = (x + 1.0) / (1.0 - rho)  # p0 <= 1
    m_lo = max(1.0, x / (1.0 - rho))
    second_hi = (m_hi * (1.0 + 2.0 * rho * x) + x * x) / (1.0 - rho * rho)
    sd = math.sqrt(max(second_hi - m_lo * m_lo, 1.0))
    return max(32, int(math.ceil(m_hi + 12.0 * sd + 16.0)))


def _stationary(
    rate_per_s: float, alpha_s: float, tau0_s: float, n_states: int
) -> tuple[NDArray[np.int64], NDArray[np.float64], float]:
    """Stationary law of the batch-size chain truncated to ``{1..n_states}``.

    Rows are renormalised after truncation (conditioning on staying below the
    cut). Returns the states, ``pi`` and the leaked mass ``sum_b pi_b P(A > N | b)``.
    """
    b = np.arange(1, n_states + 1, dtype=np.int64)
    mu = rate_per_s * (tau0_s + alpha_s * b)  # Poisson means, one per row
    # P[i, j] = P(A = b_j | B = b_i) for b_j >= 2; column for b = 1 gets A in {0, 1}.
    p = poisson.pmf(b[None, :], mu[:, None])
    p[:, 0] += np.exp(-mu)
    leak_rows = poisson.sf(n_states, mu)
    p /= p.sum(axis=1, keepdims=True)
    # Solve pi (P - I) = 0 with sum(pi) = 1 (replace one balance equation).
    a = p.T - np.eye(n_states)
    a[-1, :] = 1.0
    rhs = np.zeros(n_states)
    rhs[-1] = 1.0
    pi = scipy.linalg.solve(a, rhs)
    # One power-iteration step as refinement; removes rounding-level negatives.
    pi = np.clip(pi, 0.0, None) @ p
    pi /= pi.sum()
    return b, pi, float(pi @ leak_rows)


def inoue_mean_latency_s(
    rate_per_s: float, alpha_s: float, tau0_s: float, tol: float = 1e-14
) -> InoueResult:
    """Exact mean latency of the greedy batch-service queue via the embedded chain.

    The truncation ``N`` starts from a moment-based guess and is doubled until the
    stationary mass in the top quarter of ``{1..N}`` plus the mass leaking above
    ``N`` in one step is below ``tol``.

    Args:
        rate_per_s: Poisson arrival rate ``lambda`` (1/s).
        alpha_s: Per-request service-time slope ``alpha`` (s).
        tau0_s: Per-batch service-time overhead ``tau0`` (s).
        tol: Tail-mass tolerance for the truncation.

    Returns:
        An :class:`InoueResult`.

    Raises:
        ValueError: For invalid parameters or ``rho >= 1``.
        RuntimeError: If no truncation up to ``2**15`` states meets ``tol``.
    """
    rho = _check_params(rate_per_s, alpha_s, tau0_s)
    n = _initial_truncation(rate_per_s, alpha_s, tau0_s, rho)
    while True:
        b, pi, leak = _stationary(rate_per_s, alpha_s, tau0_s, n)
        tail = float(pi[(3 * n) // 4 :].sum()) + leak
        if tail < tol:
            break
        if 2 * n > _MAX_TRUNCATION:
            raise RuntimeError(
                f"truncation {n} leaves tail mass {tail:.3e} >= tol={tol:.1e}; load too close to 1"
            )
        n *= 2
    bf = b.astype(np.float64)
    tau = tau0_s + alpha_s * bf
    mean_b = float(pi @ bf)
    second_b = float(pi @ (bf * bf))
    seen = float(pi @ (bf * tau)) / mean_b
    wait = (second_b - mean_b) / (2.0 * rate_per_s * mean_b)
    p0 = float(pi @ np.exp(-rate_per_s * tau))
    return InoueResult(
        mean_latency_s=wait + seen,
        mean_wait_s=wait,
        mean_batch=mean_b,
        second_moment_batch=second_b,
        mean_batch_time_seen_s=seen,
        prob_idle_after_batch=p0,
        truncation=n,
        tail_mass=tail,
        batch_sizes=b,
        stationary_distribution=pi,
    )
