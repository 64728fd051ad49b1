"""``smdp-belief-fit``: the phase-aware policy of ``smdp-belief``, with the MMPP fitted from
what the policy has observed instead of read from the env's configuration.

``smdp-belief`` (:class:`baselines.smdp_mmpp.MMPPBeliefPolicy`) is realizable in that it
never sees the phase, but it is told the workload's model: each phase's arrival rate and
the switching rates. A server operator knows neither. This policy is told only that the
arrivals are a two-phase MMPP, and the service side the other SMDP policies read (the
profile, the reward weights, the queue capacity). Within each episode it

1. turns every step's ``info`` into observations of the arrival process
   (:func:`step_observations`: a wait that ended with an arrival, a tick, the arrivals
   counted during a batch, the idle time after one), exactly what :class:`PhaseFilter`
   reads;
2. acts as ``smdp-adaptive`` (the Poisson SMDP at its rate estimate) until it has
   ``first_fit`` observations;
3. then fits the two phases' rates and switching rates by expectation-maximization
   (:func:`fit_mmpp2`, a hidden Markov model whose intervals have their own durations), on
   the last ``window`` observations, solves the phase-aware SMDP for the fit, and acts as
   ``smdp-belief`` does on it: the forward filter on the phase, then QMDP; it refits each
   time its observations double (warm-started from the last fit), up to ``window``, then
   every ``window`` observations.

Nothing carries over between episodes: each starts knowing nothing of the workload.

The fit's approximation: the phase is taken as constant within an observed interval and
switching at its end (an interval of a batch is milliseconds; the phases last seconds
on ``Bursty-v0``); the filter that acts on the fit is exact.
"""

from __future__ import annotations

import math
from typing import Any, cast

import gymnasium as gym
import numpy as np

from batch_env.checks import check_number

from .smdp import AdaptiveSMDPPolicy, env_cost_parameters
from .smdp_mmpp import MMPPBeliefPolicy, MMPPProblem

__all__ = ["MMPPFit", "MMPPFittedBeliefPolicy", "fit_mmpp2", "step_observations"]

#: EM iterations of one fit at most, and the relative change of the log-likelihood per
#: observation under which it stops
MAX_EM_ITERATIONS = 200
EM_TOLERANCE = 1e-9


def step_observations(
    info: dict[str, Any], last: tuple[int, int] | None
) -> tuple[list[tuple[float, int]], tuple[int, int]]:
    """What one step of ``DynamicBatching-v0`` shows of the arrival process, as
    :class:`baselines.smdp_mmpp.PhaseFilter` reads it: intervals ``(duration_s, arrivals)``.

    * the first epoch (``last`` is None): the time to the first arrival, which ends it;
    * a wait: ended by an arrival (the queue grew, or a drop at a full queue), ``(dt, 1)``;
      ended by a tick, ``(dt, 0)``;
    * a batch of duration ``d``: the arrivals during it (none where the server then went
      idle), then the idle part, ended by an arrival.

    :returns: the intervals and the ``(queue, drops)`` the next step is counted from.
    """
    q, drops = int(info["queue_len"]), int(info["dropped_total"])
    if last is None:
        return [(float(info["now_s"]), 1)], (q, drops)
    q0, d0 = last
    dt = float(info["dt_s"])
    size = int(info["last_batch_size"])
    if size == 0:
        return [(dt, 1 if (q - q0) + (drops - d0) > 0 else 0)], (q, drops)
    d = float(info["last_batch_latency_s"])
    idle = dt - d
    if idle > 1e-12:
        return [(d, 0), (idle, 1)], (q, drops)
    return [(d, max(q - (q0 - size) + (drops - d0), 0))], (q, drops)


class MMPPFit:
    """A two-phase MMPP fitted to observed intervals (:func:`fit_mmpp2`).

    :param rates_per_s: each phase's arrival rate, the lower first.
    :param switch_rates_per_s: the rate of leaving each phase.
    :param belief: the filtered probability of each phase at the end of the observations.
    :param log_likelihood: of the observations under the fit (up to a constant).
    :param iterations: EM iterations run.
    """

    __slots__ = ("belief", "iterations", "log_likelihood", "rates_per_s", "switch_rates_per_s")

    def __init__(
        self,
        rates_per_s: tuple[float, float],
        switch_rates_per_s: tuple[float, float],
        belief: tuple[float, float],
        log_likelihood: float,
        iterations: int,
    ) -> None:
        self.rates_per_s = rates_per_s
        self.switch_rates_per_s = switch_rates_per_s
        self.belief = belief
        self.log_likelihood = log_likelihood
        self.iterations = iterations

    @property
    def generator(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """The phase chain's generator ``Q``."""
        a, b = self.switch_rates_per_s
        return ((-a, a), (b, -b))

    @property
    def stationary(self) -> tuple[float, float]:
        """The phase chain's stationary distribution."""
        a, b = self.switch_rates_per_s
        return (b / (a + b), a / (a + b))

    def __repr__(self) -> str:
        r, s = self.rates_per_s, self.switch_rates_per_s
        return (
            f"MMPPFit(rates_per_s=({r[0]:.4g}, {r[1]:.4g}), "
            f"switch_rates_per_s=({s[0]:.4g}, {s[1]:.4g}), iterations={self.iterations})"
        )


def _initial(d: np.ndarray, n: np.ndarray) -> tuple[list[float], list[float]]:
    """A start for EM: the 10th and 90th percentiles of the rate over runs of about 1/50
    of the time, and a switch every tenth of the time span."""
    total_t, total_n = float(d.sum()), float(n.sum())
    k = max(len(d) // 50, 1)
    cut = len(d) // k * k
    rates = n[:cut].reshape(-1, k).sum(1) / np.maximum(d[:cut].reshape(-1, k).sum(1), 1e-300)
    lo, hi = (float(x) for x in np.percentile(rates, [10, 90]))
    mean = total_n / max(total_t, 1e-300)
    if not hi > lo:
        lo, hi = 0.5 * mean, 2.0 * mean
    switch = 10.0 / max(total_t, 1e-300)
    return [max(lo, 1e-3 * mean, 1e-9), max(hi, 1e-9)], [switch, switch]


def fit_mmpp2(
    durations_s: Any,
    arrivals: Any,
    start: MMPPFit | None = None,
    max_iterations: int = MAX_EM_ITERATIONS,
) -> MMPPFit:
    """Fit a two-phase MMPP to observed intervals by expectation-maximization.

    A hidden Markov model whose ``t``-th interval lasts ``d_t`` and holds ``n_t`` arrivals:
    the phase is constant within an interval and moves between intervals by ``e^{Q d_t}``
    (``Q`` the generator), and the arrivals are Poisson at the phase's rate. The E-step is
    the scaled forward-backward pass; the M-step sets each rate to the expected arrivals
    over the expected time in the phase, and each switching rate to the expected
    switches out of a phase over the expected time in it.

    :param durations_s: the intervals' durations (s, >= 0, finite).
    :param arrivals: the arrivals in each (integers >= 0).
    :param start: a fit to start from (warm start); ``None``: from the data's spread.
    :param max_iterations: EM iterations at most (>= 1).
    :raises ValueError: on mismatched or invalid observations, or fewer than two intervals
        or no arrival.
    """
    d = np.asarray(durations_s, dtype=np.float64)
    n = np.asarray(arrivals, dtype=np.float64)
    if d.ndim != 1 or d.shape != n.shape:
        raise ValueError(
            f"durations_s and arrivals must be 1-d and of one length: got shapes {d.shape} "
            f"and {n.shape}"
        )
    if len(d) < 2 or not np.isfinite(d).all() or (d < 0).any():
        raise ValueError("durations_s must hold at least 2 finite durations >= 0")
    if not np.isfinite(n).all() or (n < 0).any() or (n != np.round(n)).any() or n.sum() == 0:
        raise ValueError("arrivals must be integers >= 0, not all 0")
    check_number("max_iterations", max_iterations, low=1, integer=True)
    if start is None:
        lam, sw = _initial(d, n)
    else:
        lam, sw = list(start.rates_per_s), list(start.switch_rates_per_s)
    D, N = d.tolist(), n.tolist()
    T = len(D)
    prev = -math.inf
    ll = -math.inf
    it = 0
    b_end = (0.5, 0.5)
    for it in range(1, max_iterations + 1):  # noqa: B007  (the count is reported)
        l0, l1 = math.log(lam[0]), math.log(lam[1])
        # emissions, scaled per interval by the larger (the scale drops out of posteriors)
        e0, e1, shift = [0.0] * T, [0.0] * T, 0.0
        for t in range(T):
            a, b = N[t] * l0 - lam[0] * D[t], N[t] * l1 - lam[1] * D[t]
            m = a if a > b else b
            shift += m
            e0[t], e1[t] = math.exp(a - m), math.exp(b - m)
        s01, s10 = sw
        s = s01 + s10
        # transitions into interval t over its duration: e^{Q d_t}, row by row
        pt = [math.exp(-s * x) for x in D]
        tr = [
            ((s10 + s01 * p) / s, s01 * (1.0 - p) / s, s10 * (1.0 - p) / s, (s01 + s10 * p) / s)
            for p in pt
        ]
        # forward (scaled)
        f0, f1, c = [0.0] * T, [0.0] * T, [0.0] * T
        a0, a1 = s10 / s * e0[0], s01 / s * e1[0]
        c[0] = a0 + a1
        f0[0], f1[0] = a0 / c[0], a1 / c[0]
        for t in range(1, T):
            t00, t01, t10, t11 = tr[t]
            a0 = (f0[t - 1] * t00 + f1[t - 1] * t10) * e0[t]
            a1 = (f0[t - 1] * t01 + f1[t - 1] * t11) * e1[t]
            ct = a0 + a1
            if not ct > 0.0:
                ct = 1e-300
            c[t] = ct
            f0[t], f1[t] = a0 / ct, a1 / ct
        ll = shift + sum(math.log(x) for x in c)
        b_end = (f0[-1], f1[-1])
        # backward, with the expected counts of the M-step
        g0 = f0[-1]
        num0, num1 = g0 * N[-1], (1.0 - g0) * N[-1]
        time0, time1 = g0 * D[-1], (1.0 - g0) * D[-1]
        x01 = x10 = 0.0
        stay0 = stay1 = 0.0  # time in a phase at the interval before a transition
        r0 = r1 = 1.0
        for t in range(T - 1, 0, -1):
            t00, t01, t10, t11 = tr[t]
            w0, w1 = e0[t] * r0 / c[t], e1[t] * r1 / c[t]
            x01 += f0[t - 1] * t01 * w1
            x10 += f1[t - 1] * t10 * w0
            r0, r1 = t00 * w0 + t01 * w1, t10 * w0 + t11 * w1
            g0 = f0[t - 1] * r0
            g1 = f1[t - 1] * r1
            gs = g0 + g1
            g0, g1 = g0 / gs, g1 / gs
            num0 += g0 * N[t - 1]
            num1 += g1 * N[t - 1]
            time0 += g0 * D[t - 1]
            time1 += g1 * D[t - 1]
            stay0 += g0 * D[t]
            stay1 += g1 * D[t]
        lam = [max(num0 / max(time0, 1e-300), 1e-9), max(num1 / max(time1, 1e-300), 1e-9)]
        sw = [max(x01 / max(stay0, 1e-300), 1e-9), max(x10 / max(stay1, 1e-300), 1e-9)]
        if abs(ll - prev) <= EM_TOLERANCE * T * max(1.0, abs(ll) / T):
            break
        prev = ll
    if lam[0] > lam[1]:  # the lower phase first
        lam, sw, b_end = lam[::-1], sw[::-1], b_end[::-1]
    return MMPPFit(
        (float(lam[0]), float(lam[1])),
        (float(sw[0]), float(sw[1])),
        (float(b_end[0]), float(b_end[1])),
        float(ll),
        it,
    )


class MMPPFittedBeliefPolicy:
    """``smdp-belief`` on an MMPP it fits itself, episode by episode (module docstring).

    :param env: the ``DynamicBatching-v0`` env; its workload must be an MMPP (the task's
        premise), whose parameters the policy does not read.
    :param first_fit: observations before the first fit (>= 100).
    :param window: the most recent observations a fit uses (>= ``first_fit``).
    """

    name = "smdp-belief-fit"

    def __init__(
        self, env: gym.Env | None = None, first_fit: int = 2_000, window: int = 20_000
    ) -> None:
        if env is None:
            raise ValueError(
                "smdp-belief-fit needs env=<a DynamicBatching-v0 env with an MMPP workload>: "
                "it solves the SMDP of that env's service for the MMPP it fits"
            )
        check_number("first_fit", first_fit, low=100, integer=True)
        check_number("window", window, low=first_fit, integer=True)
        MMPPProblem.from_env(env)  # the premise: an MMPP workload (ValueError otherwise)
        self._env = env
        self._cost = env_cost_parameters(env, "smdp-belief-fit")
        self.first_fit, self.window = int(first_fit), int(window)
        self._fallback = AdaptiveSMDPPolicy(env)
        self.reset()

    def reset(self) -> None:
        """Forget the episode: its observations, its fit and the belief."""
        self._d: list[float] = []
        self._n: list[int] = []
        self._last: tuple[int, int] | None = None
        self._next_fit = self.first_fit
        #: the current fit (None before the first) and every fit of the episode
        self.fit: MMPPFit | None = None
        self.fits: list[MMPPFit] = []
        self._belief: MMPPBeliefPolicy | None = None
        self._fallback.reset()

    def _refit(self, info: dict[str, Any]) -> None:
        lo = max(len(self._d) - self.window, 0)
        fit = fit_mmpp2(self._d[lo:], self._n[lo:], start=self.fit)
        self.fit = fit
        self.fits.append(fit)
        problem = MMPPProblem(
            **self._cost,
            rates_per_s=fit.rates_per_s,
            generator=fit.generator,
        )
        policy = MMPPBeliefPolicy.for_problem(self._env, problem, fit.stationary)
        policy.filter.start_from(fit.belief, info)  # the fit's filter ends at this step
        self._belief = policy
        self._next_fit = (
            2 * len(self._d) if len(self._d) < self.window else len(self._d) + self.window
        )

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Record what the step showed; refit when due; act on the fit (before the first
        fit, as ``smdp-adaptive``)."""
        seen, self._last = step_observations(info, self._last)
        for d, k in seen:
            self._d.append(d)
            self._n.append(k)
        if len(self._d) >= self._next_fit:
            self._refit(info)  # its belief has this step's observations
            return cast(MMPPBeliefPolicy, self._belief).qmdp_action(info)
        if self._belief is None:
            return self._fallback.act(obs, info)
        return self._belief.act(obs, info)
