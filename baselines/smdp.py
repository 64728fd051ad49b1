"""The SMDP-optimal batching policy, solved exactly for the env's own cost.

Re-implements "SMDP-Based Dynamic Batching for Efficient Inference on GPU-Based
Platforms" (Y. Xu, J. Sun, S. Zhou, Z. Niu; IEEE ICC 2023, arXiv 2301.12865; extended in
arXiv 2501.02181) for exactly the reward of ``DynamicBatching-v0``.

Model
-----
* **State** ``s``: requests waiting at a decision epoch (server idle), ``0..S``.
* **Actions**: ``0`` = wait, ``b`` in ``1..min(s, B)`` = serve the ``b`` oldest. State 0
  keeps its forced wait (the env folds it into the step that emptied the queue, which
  leaves the average cost per unit time unchanged: docs/design.md, SMDP-exact subset).
* **Wait**: the sojourn is ``Exp(lambda)`` (to the next arrival) or, with relative ticks
  of interval ``D``, ``min(Exp(lambda), D)``: mean ``(1 - exp(-lambda D)) / lambda``;
  the next state is ``s + 1`` with probability ``1 - exp(-lambda D)`` and ``s``
  otherwise. State 0 always waits for the next arrival (the env never ticks on an empty
  queue). At the queue capacity an arrival is dropped.
* **Serve b**: the sojourn is the batch time ``H`` (the env's service law: deterministic
  ``latency(b)``, or lognormal with that mean and the env's CV). The number ``A`` of
  arrivals during it has ``p_n = E[Poisson(n; lambda H)]`` (Gauss-Hermite quadrature
  over the lognormal, 96 nodes). The next state is ``min(s - b + A, S)``.
* **Cost per decision** = the env's reward terms, same weights and units:
  ``w_latency`` x integral of requests in the system (``s x sojourn`` for a wait; for a
  batch ``s x H`` plus, for admitted arrivals, the time from arrival to the end of the
  batch: given ``H`` and ``A = n`` arrivals are uniform order statistics, so the first
  ``m`` admitted contribute ``H m (1 - (m + 1) / (2 (n + 1)))``, and
  ``E[H 1{A = n}] = (n + 1) p_{n+1} / lambda`` for *any* service law), ``w_energy`` x
  (``energy(b)`` for a batch, idle power x sojourn for a wait), ``w_drop`` x expected
  drops. The SLA term is not modelled (the queue length does not see deadlines): with
  ``w_sla > 0`` the policy is a heuristic and no optimality claim is made.

Truncation and the abstract cost
--------------------------------
If the env's ``queue_capacity`` is at most ``max_states`` the state space is the env's,
exactly: no approximation. Otherwise it is truncated at ``S = max_states``, and a request
that would raise the queue beyond ``S`` leaves the state but is charged an *abstract
cost* (the idea of Xu et al.): an analytic estimate of what it costs beyond the
truncation, namely the latency of waiting behind a full queue drained by full batches
at net rate ``B / latency(B) - lambda`` (``w_latency (S + 1) / (B / latency(B) -
lambda)``) plus its share of a full batch's energy (``w_energy energy(B) / B``). The
policy beyond ``S`` serves full batches. The gain changes by less than 0.1% when ``S``
doubles (tested).

Method
------
Howard's policy iteration on the SMDP itself (evaluation: one sparse LU solve of
``h + g tau - P h = c`` with ``h(0) = 0``; improvement: all ``Q(s, b)`` at once). The
transitions of "serve b from s" are the kernel ``p^b`` shifted to ``s - b``, so the
expectations ``E_b[h](s - b)`` for every state and batch size are one matrix product of
sliding windows of ``h`` with the kernels: no Python loop over states. Policy iteration
ends with an exact stationary optimum (the model is unichain: a full queue is reachable
from every state under every policy), typically in 5-15 iterations.

:func:`transformed_mdp` gives Tijms' data transformation of the same SMDP to a
discrete-time MDP (``c / tau`` per step, ``P~ = (eta / tau) P + (1 - eta / tau) I``), on
which :func:`solve` with ``method="rvi"`` runs relative value iteration to a span
tolerance, and which pymdptoolbox's ``RelativeValueIteration`` accepts as is (tests and
``batch-env bench`` compare them).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.lib.stride_tricks import sliding_window_view
from scipy.stats import poisson

from batch_env.checks import check_number
from batch_env.executor import ProfileExecutor
from batch_env.workload import Poisson, RandomLoad

if TYPE_CHECKING:
    from batch_env.envs.dynamic_batching import DynamicBatchingEnv

_TAIL = 1e-15
_GH_NODES = 96


@dataclass(frozen=True)
class SMDPProblem:
    """An instance of the batching SMDP, in the env's units.

    :param rate_per_s: Poisson arrival rate.
    :param latency_s: mean batch time per batch size, index ``b`` for ``b = 0..B``.
    :param energy_j: batch energy per batch size, same indexing.
    :param idle_power_w: power while idle.
    :param w_latency: cost per request-second.
    :param w_energy: cost per joule.
    :param w_drop: cost per dropped request.
    :param queue_capacity: waiting requests the env admits (drops beyond).
    :param decision_interval_ms: relative tick interval, ``None`` for no ticks.
    :param service: ``"deterministic"`` or ``"lognormal"``.
    :param service_cv: coefficient of variation of lognormal service.
    :param max_states: truncation level; ``None`` means the queue capacity (exact).
    """

    rate_per_s: float
    latency_s: tuple[float, ...]
    energy_j: tuple[float, ...]
    idle_power_w: float
    w_latency: float = 1.0
    w_energy: float = 0.5
    w_drop: float = 1.0
    queue_capacity: int = 2000
    decision_interval_ms: float | None = None
    service: str = "deterministic"
    service_cv: float = 0.0
    max_states: int | None = None

    def __post_init__(self) -> None:
        check_number("rate_per_s", self.rate_per_s, low=0.0, low_inclusive=False)
        if len(self.latency_s) < 2 or len(self.latency_s) != len(self.energy_j):
            raise ValueError(
                f"latency_s and energy_j must have the same length B + 1 >= 2 (index = batch size): "
                f"got {len(self.latency_s)} and {len(self.energy_j)}"
            )
        for b in range(1, len(self.latency_s)):
            check_number(f"latency_s[{b}]", self.latency_s[b], low=0.0, low_inclusive=False)
            check_number(f"energy_j[{b}]", self.energy_j[b], low=0.0)
        check_number("idle_power_w", self.idle_power_w, low=0.0)
        for name in ("w_latency", "w_energy", "w_drop"):
            check_number(name, getattr(self, name), low=0.0)
        check_number("queue_capacity", self.queue_capacity, low=1, integer=True)
        if self.decision_interval_ms is not None:
            check_number(
                "decision_interval_ms", self.decision_interval_ms, low=0.0, low_inclusive=False
            )
        if self.service not in ("deterministic", "lognormal"):
            raise ValueError(
                f"service={self.service!r} is invalid: allowed values are ('deterministic', 'lognormal')"
            )
        check_number("service_cv", self.service_cv, low=0.0)
        if self.max_states is not None:
            check_number("max_states", self.max_states, low=1, integer=True)

    @property
    def max_batch_size(self) -> int:
        """B."""
        return len(self.latency_s) - 1

    @property
    def n_states(self) -> int:
        """Number of states ``S + 1``."""
        return self.top_state + 1

    @property
    def top_state(self) -> int:
        """S: the capacity, or the truncation level if lower."""
        cap = self.queue_capacity
        return cap if self.max_states is None else min(cap, self.max_states)

    @property
    def truncated(self) -> bool:
        """Whether the state space is truncated below the queue capacity."""
        return self.top_state < self.queue_capacity

    @classmethod
    def from_env(
        cls, env: gym.Env, rate_per_s: float | None = None, **overrides: Any
    ) -> SMDPProblem:
        """The SMDP of a ``DynamicBatching-v0`` env (looking through wrappers).

        :param env: the env.
        :param rate_per_s: arrival rate (default: the workload's mean rate; exact only for
            Poisson workloads).
        :param overrides: any field of :class:`SMDPProblem` (e.g. ``max_states``).
        """
        core = cast("DynamicBatchingEnv", env.unwrapped)
        params = env_cost_parameters(env, "SMDPProblem.from_env")
        params["rate_per_s"] = float(rate_per_s if rate_per_s is not None else core.mean_rate_per_s)
        params.update(overrides)
        return cls(**params)


def env_cost_parameters(env: gym.Env, owner: str) -> dict[str, Any]:
    """The batching SMDP's parameters that a ``DynamicBatching-v0`` env fixes apart from its
    arrivals: the profile executor's tables, idle power, reward weights, queue capacity,
    ticks and service law (shared by :class:`SMDPProblem` and the MMPP problem).

    :param env: the env (looking through wrappers).
    :param owner: the caller, for the message.
    :raises ValueError: when the env's executor is not the profile executor.
    """
    core = cast("DynamicBatchingEnv", env.unwrapped)
    ex = core.executor
    if not isinstance(ex, ProfileExecutor):
        raise ValueError(
            f"{owner} needs an env with executor='profile' (the SMDP is built from the "
            f"profile executor's tables); this env has {type(ex).__name__}"
        )
    cfg = core.config
    w = cfg.reward_weights
    return {
        "latency_s": tuple(ex.latency_s),
        "energy_j": tuple(ex.energy_j),
        "idle_power_w": core.idle_power_w,
        "w_latency": w.latency,
        "w_energy": w.energy,
        "w_drop": w.drop,
        "queue_capacity": cfg.queue_capacity,
        "decision_interval_ms": cfg.decision_interval_ms,
        "service": cfg.service,
        "service_cv": ex.cv,
    }


def is_exact_for(env: gym.Env) -> bool:
    """Whether the env is in docs/design.md's SMDP-exact subset (Poisson, ``w_sla = 0``)."""
    core = cast("DynamicBatchingEnv", env.unwrapped)
    return isinstance(core.workload, Poisson) and core.config.reward_weights.sla == 0.0


def is_exact_per_load(env: gym.Env) -> bool:
    """Whether the env draws a Poisson load per episode (a ``load_range`` workload with a
    Poisson base) with ``w_sla = 0``: then each episode's bound is the exact SMDP optimum
    at its drawn load (:func:`gains_at_loads`)."""
    core = cast("DynamicBatchingEnv", env.unwrapped)
    wl = core.workload
    return (
        isinstance(wl, RandomLoad)
        and isinstance(wl.base, Poisson)
        and core.config.reward_weights.sla == 0.0
    )


def gains_at_loads(env: gym.Env, loads: Sequence[float]) -> list[float]:
    """The exact SMDP optimum's gain at each load (the rate = the base's rate x load) of
    an env whose workload draws its load per episode (:func:`is_exact_per_load`).

    :raises ValueError: for any other env.
    """
    if not is_exact_per_load(env):
        raise ValueError(
            "gains_at_loads needs a DynamicBatching-v0 env with a Poisson 'load_range' "
            "workload and SLA weight 0"
        )
    core = cast("DynamicBatchingEnv", env.unwrapped)
    base_rate = core.workload.base.mean_rate_per_s  # type: ignore[attr-defined]
    cache: dict[float, float] = {}
    for load in loads:
        if float(load) not in cache:
            pb = SMDPProblem.from_env(env, rate_per_s=base_rate * float(load))
            cache[float(load)] = solve(pb).gain
    return [cache[float(x)] for x in loads]


@dataclass
class _Arrays:
    S: int
    B: int
    kernel: np.ndarray  # (B, K+1): P(A = n) for batch size b = row + 1 (tail folded into n = K)
    c: np.ndarray  # (S+1, B+1) cost, +inf where invalid
    tau: np.ndarray  # (S+1, B+1) mean sojourn, 1 where invalid
    valid: np.ndarray  # (S+1, B+1) bool
    q_arrival: np.ndarray  # (S+1,) P(next epoch of a wait is an arrival)
    r_index: np.ndarray  # (S+1, B) clipped s - b
    K: int = 0


def _arrival_kernels(pb: SMDPProblem) -> np.ndarray:
    """``p[b - 1, n] = P(n arrivals during a batch of b)``, n = 0..K+1."""
    lam = pb.rate_per_s
    lat = np.asarray(pb.latency_s[1:], dtype=np.float64)
    factors, wts = service_quadrature(pb.service, pb.service_cv)
    means = lam * lat[:, None] * factors[None, :]  # (B, nodes)
    mmax = float(means.max())
    K = int(poisson.isf(_TAIL, mmax)) + 2
    n = np.arange(K + 2)
    pmf = poisson.pmf(n[None, None, :], means[:, :, None])  # (B, nodes, K+2)
    return np.tensordot(pmf, wts, axes=([1], [0]))  # (B, K+2)


def _build(pb: SMDPProblem) -> _Arrays:
    S, B = pb.top_state, pb.max_batch_size
    lam = pb.rate_per_s
    lat = np.asarray(pb.latency_s, dtype=np.float64)
    en = np.asarray(pb.energy_j, dtype=np.float64)
    p = _arrival_kernels(pb)  # (B, K+2)
    K = p.shape[1] - 2
    # drop or abstract cost of one request beyond S
    if pb.truncated:
        drain = B / lat[B] - lam
        if drain <= 0:
            raise ValueError(
                f"max_states={pb.max_states} truncates queue_capacity={pb.queue_capacity}, but the "
                f"load exceeds full-batch throughput ({lam:.4g}/s >= {B / lat[B]:.4g}/s): the "
                "abstract cost is unbounded; use max_states >= queue_capacity"
            )
        beyond = pb.w_latency * (S + 1) / drain + pb.w_energy * en[B] / B
    else:
        beyond = pb.w_drop

    # -- serve actions: room R = S - (s - b) in 1..S --------------------------------------
    n = np.arange(K + 1)
    R = np.arange(1, S + 1)[:, None]  # (S, 1)
    m = np.minimum(n[None, :], R)  # admitted arrivals
    f = m * (1.0 - (m + 1.0) / (2.0 * (n[None, :] + 1.0)))  # (S, K+1)
    g = (n + 1.0)[None, :] / lam * p[:, 1 : K + 2]  # E[H 1{A=n}] (B, K+1)
    L_arr = f @ g.T  # (S, B): latency integral of admitted arrivals, by room
    over = np.maximum(n[None, :] - R, 0) @ p[:, : K + 1].T  # (S, B): expected overflow
    kernel = p[:, : K + 1].copy()
    # fold the (< 1e-15) tail into n = K, so that every row sums to 1 and stays >= 0
    kernel[:, K] = np.maximum(1.0 - kernel[:, :K].sum(axis=1), 0.0)
    kernel /= kernel.sum(axis=1, keepdims=True)

    s = np.arange(S + 1)[:, None]
    b = np.arange(1, B + 1)[None, :]
    valid_serve = b <= s
    room_idx = np.clip(S - s + b, 1, S) - 1  # index into R
    cols = np.broadcast_to(b - 1, room_idx.shape)
    c_serve = (
        pb.w_latency * (s * lat[1:][None, :] + L_arr[room_idx, cols])
        + pb.w_energy * en[1:][None, :]
        + beyond * over[room_idx, cols]
    )
    # -- wait ---------------------------------------------------------------------------
    states = np.arange(S + 1)
    if pb.decision_interval_ms is None:
        q = np.ones(S + 1)
    else:
        q = np.full(S + 1, -math.expm1(-lam * pb.decision_interval_ms / 1000.0))
        q[0] = 1.0
    tau_w = q / lam
    c_wait = pb.w_latency * states * tau_w + pb.w_energy * pb.idle_power_w * tau_w
    c_wait[S] += beyond * q[S]

    c = np.empty((S + 1, B + 1))
    c[:, 0] = c_wait
    c[:, 1:] = np.where(valid_serve, c_serve, np.inf)
    tau = np.ones((S + 1, B + 1))
    tau[:, 0] = tau_w
    tau[:, 1:] = np.where(valid_serve, lat[1:][None, :], 1.0)
    valid = np.ones((S + 1, B + 1), dtype=bool)
    valid[:, 1:] = valid_serve
    valid[0, 0] = True
    r_index = np.clip(s - b, 0, S - 1)
    return _Arrays(S, B, kernel, c, tau, valid, q, r_index, K)


def _expectations(arr: _Arrays, h: np.ndarray) -> np.ndarray:
    """``E[h(next) | s, a]`` for every state and action, shape (S+1, B+1)."""
    S, K = arr.S, arr.K
    h_pad = np.concatenate([h, np.full(K, h[S])])
    windows = sliding_window_view(h_pad, K + 1)[:S]  # (S, K+1): h(min(r + n, S))
    E_serve = windows @ arr.kernel.T  # (S, B) indexed by r = s - b
    out = np.empty((S + 1, arr.B + 1))
    up = np.minimum(np.arange(S + 1) + 1, S)
    out[:, 0] = arr.q_arrival * h[up] + (1.0 - arr.q_arrival) * h
    out[:, 1:] = E_serve[arr.r_index, np.arange(arr.B)[None, :]]
    return out


def _policy_matrix(arr: _Arrays, policy: np.ndarray) -> sp.csr_matrix:
    """Sparse transition matrix of a stationary policy."""
    S, K = arr.S, arr.K
    states = np.arange(S + 1)
    serve = policy > 0
    rows, cols, data = [], [], []
    w_states = states[~serve]
    up = np.minimum(w_states + 1, S)
    qa = arr.q_arrival[w_states]
    rows += [w_states, w_states]
    cols += [up, w_states]
    data += [qa, 1.0 - qa]
    s_states = states[serve]
    if s_states.size:
        bsz = policy[serve]
        r = s_states - bsz
        nn = np.arange(K + 1)
        rows.append(np.repeat(s_states, K + 1))
        cols.append(np.minimum(r[:, None] + nn[None, :], S).ravel())
        data.append(arr.kernel[bsz - 1].ravel())
    return sp.csr_matrix(
        (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(S + 1, S + 1)
    )


def service_quadrature(service: str, service_cv: float) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite quadrature of the service law: multiplicative factors of the mean
    batch time and their weights (one node of factor 1 for deterministic service)."""
    if service == "lognormal" and service_cv > 0:
        sigma = math.sqrt(math.log1p(service_cv**2))
        z, wts = np.polynomial.hermite.hermgauss(_GH_NODES)
        factors = np.exp(sigma * math.sqrt(2.0) * z - 0.5 * sigma * sigma)
        wts = wts / math.sqrt(math.pi)
        keep = wts > _TAIL  # far nodes carry no mass but would inflate the support
        return factors[keep], wts[keep] / wts[keep].sum()
    return np.ones(1), np.ones(1)


def average_cost(P: sp.spmatrix, c: np.ndarray, tau: np.ndarray) -> tuple[float, np.ndarray]:
    """Gain and bias (``h(0) = 0``) of an SMDP under a stationary policy: transition
    matrix ``P``, cost ``c`` and mean sojourn ``tau`` per state. NaN for a multichain
    policy (singular equations), which the callers handle."""
    n = P.shape[0]
    # unknowns (g, h(1..n-1)) with h(0) = 0: column 0 of (I - P) is replaced by tau
    IP = (sp.identity(n, format="csc") - P.tocsc()).tocsc()
    M = sp.hstack([sp.csc_matrix(tau[:, None]), IP[:, 1:]], format="csc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", spla.MatrixRankWarning)
        x = spla.spsolve(M, c)
    # a multichain policy makes M singular: older SciPy returned NaN, SciPy 1.17 returns
    # a finite vector that does not solve the equations (residual 1e18 seen), so the
    # residual decides
    if not (np.isfinite(x).all() and np.abs(M @ x - c).max() <= 1e-6 * (np.abs(c).max() + 1.0)):
        return math.nan, np.full(n, math.nan)
    h = x.copy()
    h[0] = 0.0
    return float(x[0]), h


def _evaluate_policy(arr: _Arrays, policy: np.ndarray) -> tuple[float, np.ndarray]:
    """Gain and bias (``h(0) = 0``) of a stationary policy."""
    idx = np.arange(arr.S + 1)
    return average_cost(_policy_matrix(arr, policy), arr.c[idx, policy], arr.tau[idx, policy])


def policy_gain(problem: SMDPProblem, policy: Sequence[int] | np.ndarray) -> float:
    """The exact long-run average cost per second of a stationary ``policy`` (an action per
    state ``0..S``: 0 = wait, ``b`` = serve ``b``) in ``problem``; NaN when the policy is
    multichain. With weight 1 on one cost term and 0 on the others it is that term's rate:
    ``w_latency`` alone gives request-seconds per second (the mean number in the system,
    so the mean latency is it over the arrival rate when nothing is dropped), ``w_energy``
    alone the mean power in watts.

    :raises ValueError: when the policy has the wrong length or an action that is not
        allowed in its state (serving more than wait, or more than ``B``).
    """
    arr = _build(problem)
    pol = np.asarray(policy, dtype=np.int64)
    if pol.shape != (arr.S + 1,):
        raise ValueError(
            f"policy has {pol.size} actions: expected one per state 0..{arr.S} ({arr.S + 1})"
        )
    idx = np.arange(arr.S + 1)
    if pol.min() < 0 or pol.max() > arr.B or not bool(np.all(arr.valid[idx, pol])):
        bad = int(
            np.flatnonzero((pol < 0) | (pol > arr.B) | ~arr.valid[idx, np.clip(pol, 0, arr.B)])[0]
        )
        raise ValueError(
            f"policy[{bad}]={int(pol[bad])} is invalid: in state {bad} the allowed actions "
            f"are 0 (wait) and 1..{min(bad, arr.B)} (serve)"
        )
    return _evaluate_policy(arr, pol)[0]


@dataclass
class SMDPSolution:
    """The solved SMDP.

    :param policy: action per state ``0..S`` (0 = wait, b = serve b).
    :param gain: optimal long-run average cost per second (= minus the env's reward rate).
    :param bias: relative values ``h`` (``h(0) = 0``).
    :param threshold: smallest queue length at which the policy serves, if it is a control
        limit (waits below, serves at and above), else ``None``.
    :param iterations: policy-iteration (or value-iteration) steps.
    :param solve_time_s: wall time of the solve.
    :param method: ``"pi"`` or ``"rvi"``.
    :param problem: the instance.
    """

    policy: np.ndarray
    gain: float
    bias: np.ndarray
    threshold: int | None
    iterations: int
    solve_time_s: float
    method: str
    problem: SMDPProblem = field(repr=False)

    def action(self, queue_len: int) -> int:
        """The optimal action for ``queue_len`` waiting requests (full batches beyond S)."""
        if queue_len > self.problem.top_state:
            return self.problem.max_batch_size
        return int(self.policy[queue_len])

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (policy as a list)."""
        pb = self.problem
        return {
            "gain_cost_per_s": self.gain,
            "reward_rate_per_s": -self.gain,
            "threshold": self.threshold,
            "iterations": self.iterations,
            "solve_time_s": self.solve_time_s,
            "method": self.method,
            "n_states": pb.n_states,
            "truncated": pb.truncated,
            "max_batch_size": pb.max_batch_size,
            "rate_per_s": pb.rate_per_s,
            "policy": self.policy.tolist(),
        }


def _threshold(policy: np.ndarray) -> int | None:
    serving = np.flatnonzero(policy[1:] > 0)
    if serving.size == 0:
        return None
    t = int(serving[0]) + 1
    return t if bool(np.all(policy[t:] > 0)) else None


def solve(
    problem: SMDPProblem,
    method: str = "pi",
    tol: float = 1e-10,
    max_iter: int = 100_000,
) -> SMDPSolution:
    """Solve the batching SMDP for its average-cost optimal policy.

    :param problem: the instance (see :meth:`SMDPProblem.from_env`).
    :param method: ``"pi"`` (policy iteration, exact; default) or ``"rvi"`` (relative
        value iteration on Tijms' transformed MDP, to a span tolerance).
    :param tol: RVI: stop when ``span(v_{n+1} - v_n) < tol x |gain|``.
    :param max_iter: iteration cap.
    """
    t0 = time.perf_counter()
    arr = _build(problem)
    if method == "pi":
        greedy = np.minimum(np.arange(arr.S + 1), arr.B)
        out = _policy_iteration(arr, greedy, max_iter)
        if out is None:  # an intermediate policy was multichain: start from RVI's policy
            rvi_policy, rvi_gain, rvi_bias, rvi_it = _relative_value_iteration(arr, tol, max_iter)
            out = _policy_iteration(arr, rvi_policy, max_iter)
            if out is None:
                out = (rvi_policy, rvi_gain, rvi_bias, 0)
            policy, gain, bias, it = out[0], out[1], out[2], out[3] + rvi_it
        else:
            policy, gain, bias, it = out
    elif method == "rvi":
        policy, gain, bias, it = _relative_value_iteration(arr, tol, max_iter)
    else:
        raise ValueError(f"method={method!r} is invalid: allowed values are ('pi', 'rvi')")
    return SMDPSolution(
        policy=policy.astype(np.int64),
        gain=float(gain),
        bias=bias,
        threshold=_threshold(policy),
        iterations=it,
        solve_time_s=time.perf_counter() - t0,
        method=method,
        problem=problem,
    )


def _policy_iteration(
    arr: _Arrays, policy: np.ndarray, max_iter: int
) -> tuple[np.ndarray, float, np.ndarray, int] | None:
    """Howard's policy iteration from ``policy``: ``(policy, gain, bias, iterations)``, or
    ``None`` when a policy on the way is multichain (two closed classes of states: its
    evaluation equations are singular). That happens: with a high energy weight an
    improvement step can serve in a band of queue lengths that the queue then never
    leaves, while above the band it waits."""
    S = arr.S
    it = 0
    while True:
        it += 1
        gain, h = _evaluate_policy(arr, policy)
        if not (math.isfinite(gain) and np.isfinite(h).all()):
            return None
        Q = arr.c - gain * arr.tau + _expectations(arr, h)
        Q[~arr.valid] = np.inf
        best = Q.argmin(axis=1)
        cur = Q[np.arange(S + 1), policy]
        scale = 1e-12 * (np.abs(cur) + 1.0)
        improve = Q[np.arange(S + 1), best] < cur - scale
        if not improve.any() or it >= max_iter:
            return policy, gain, h, it
        policy = np.where(improve, best, policy)


def _relative_value_iteration(
    arr: _Arrays, tol: float, max_iter: int
) -> tuple[np.ndarray, float, np.ndarray, int]:
    """Relative value iteration on Tijms' transformed MDP, to a span tolerance:
    ``(policy, gain, relative values, iterations)``."""
    eta, c_rate = _tijms(arr)
    v = np.zeros(arr.S + 1)
    it = 0
    gain = math.nan
    Qt = c_rate
    while it < max_iter:
        it += 1
        E = _expectations(arr, v)
        Qt = c_rate + (eta / arr.tau) * (E - v[:, None]) + v[:, None]
        Qt[~arr.valid] = np.inf
        v_new = Qt.min(axis=1)
        diff = v_new - v
        lo, hi = diff.min(), diff.max()
        gain = 0.5 * (lo + hi)
        v = v_new - v_new[0]
        if hi - lo < tol * max(abs(gain), 1e-300):
            break
    return Qt.argmin(axis=1), float(gain), v, it


def _tijms(arr: _Arrays) -> tuple[float, np.ndarray]:
    """Tijms' step ``eta`` and the transformed cost rates ``c / tau``."""
    E_self = _self_loop_prob(arr)
    eta = 0.95 * float(np.min((arr.tau / np.maximum(1.0 - E_self, 1e-300))[arr.valid]))
    c_rate = np.where(arr.valid, arr.c / arr.tau, np.inf)
    return eta, c_rate


def _self_loop_prob(arr: _Arrays) -> np.ndarray:
    """``P(next = s | s, a)`` for every state and action."""
    S = arr.S
    out = np.zeros((S + 1, arr.B + 1))
    for_s = np.arange(S + 1)
    out[:, 0] = np.where(for_s == S, 1.0, 1.0 - arr.q_arrival)
    out[0, 0] = 0.0 if S > 0 else 1.0
    # serve b from s: next = min(s - b + A, S) == s  <=>  A == b (s < S) or s - b + A >= S (s = S)
    b = np.arange(1, arr.B + 1)
    K = arr.K
    pb = np.where(b <= K, arr.kernel[b - 1, np.minimum(b, K)], 0.0)
    out[:S, 1:] = pb[None, :]
    tail = np.cumsum(arr.kernel[:, ::-1], axis=1)[:, ::-1]  # P(A >= n)
    out[S, 1:] = np.where(b <= K, tail[b - 1, np.minimum(b, K)], 0.0)
    return out


def transformed_mdp(
    problem: SMDPProblem, invalid_cost: float | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Tijms' discrete-time MDP of the SMDP, as dense arrays (for pymdptoolbox and tests).

    Every state has the actions ``0..B``; an invalid action (serve more than waits) has
    the wait action's transitions and a prohibitive cost rate.

    :param problem: the instance (small: the arrays are ``(B + 1) x (S + 1)^2``).
    :param invalid_cost: cost rate of invalid actions (default: 1e3 x the largest valid).
    :returns: ``(P, cost_rate, eta)`` with ``P[a, s, j]`` and ``cost_rate[s, a]``.
    """
    arr = _build(problem)
    S, B = arr.S, arr.B
    eta, c_rate = _tijms(arr)
    big = invalid_cost if invalid_cost is not None else 1e3 * float(np.max(c_rate[arr.valid]))
    P = np.zeros((B + 1, S + 1, S + 1))
    for a in range(B + 1):
        pol = np.where(arr.valid[:, a], a, 0)
        Pa = _policy_matrix(arr, pol).toarray()
        tau = arr.tau[np.arange(S + 1), pol]
        P[a] = (eta / tau)[:, None] * Pa
        P[a][np.diag_indices(S + 1)] += 1.0 - eta / tau
    cost = np.where(arr.valid, c_rate, big)
    return P, cost, eta


def _env_of(env: gym.Env | None, name: str) -> gym.Env:
    if env is None or not hasattr(env.unwrapped, "max_throughput_rps"):
        got = "None" if env is None else type(env.unwrapped).__name__
        raise ValueError(
            f"{name} needs env=<a DynamicBatching-v0 env>: it solves the SMDP of that env "
            f"(got {got})"
        )
    return env


class SMDPPolicy:
    """The SMDP-optimal policy of the env (Xu et al., ICC 2023), solved at construction.

    Optimal for the env's own reward in docs/design.md's SMDP-exact subset (Poisson arrivals,
    ``w_sla = 0``); elsewhere a heuristic built on the workload's mean rate.

    :param env: the ``DynamicBatching-v0`` env (configuration read at construction).
    :param rate_per_s: arrival rate to plan for (default: the workload's mean rate).
    :param max_states: truncation level (default: the queue capacity, exact).
    :param method: solver method, ``"pi"`` or ``"rvi"``.
    """

    name = "smdp"

    def __init__(
        self,
        env: gym.Env | None = None,
        rate_per_s: float | None = None,
        max_states: int | None = None,
        method: str = "pi",
    ) -> None:
        env = _env_of(env, "smdp")
        self.problem = SMDPProblem.from_env(env, rate_per_s=rate_per_s, max_states=max_states)
        self.solution = solve(self.problem, method=method)
        self.exact = is_exact_for(env) and not self.problem.truncated
        self._table = self.solution.policy.tolist()
        self._top = self.problem.top_state
        self._B = self.problem.max_batch_size

    def reset(self) -> None:
        """Stateless."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Look up the optimal action for the queue length."""
        q = info["queue_len"]
        return self._table[q] if q <= self._top else self._B


class AdaptiveSMDPPolicy:
    """SMDP policy re-solved for an online estimate of the arrival rate.

    Going beyond the paper, for non-stationary traffic: at each decision the rate
    estimate in the observation (feature 2, arrival rate / max throughput, a time-decayed
    count) picks a geometric rate bucket (``bucket_ratio`` apart); the SMDP is solved for
    the bucket's centre rate the first time the bucket is seen and cached.

    :param env: the ``DynamicBatching-v0`` env.
    :param bucket_ratio: ratio between neighbouring bucket rates (> 1).
    :param max_states: truncation level for each solve (default: the queue capacity).
    :param min_load: lowest load planned for (the estimate is clipped to it).
    """

    name = "smdp-adaptive"

    def __init__(
        self,
        env: gym.Env | None = None,
        bucket_ratio: float = 1.1,
        max_states: int | None = None,
        min_load: float = 0.02,
    ) -> None:
        env = _env_of(env, "smdp-adaptive")
        check_number("bucket_ratio", bucket_ratio, low=1.0, low_inclusive=False)
        check_number("min_load", min_load, low=0.0, low_inclusive=False)
        self._env = cast("DynamicBatchingEnv", env.unwrapped)
        self._mu = float(self._env.max_throughput_rps)
        self._log_ratio = math.log(bucket_ratio)
        self._max_states = max_states
        self._min_load = min_load
        self._cache: dict[int, list[int]] = {}
        self.solutions: dict[int, SMDPSolution] = {}

    def _table(self, bucket: int) -> list[int]:
        table = self._cache.get(bucket)
        if table is None:
            rate = self._mu * math.exp(bucket * self._log_ratio)
            problem = SMDPProblem.from_env(self._env, rate_per_s=rate, max_states=self._max_states)
            if problem.truncated:  # the abstract cost needs full batches to keep up
                B = problem.max_batch_size
                rate = min(rate, 0.99 * B / problem.latency_s[B])
                problem = SMDPProblem.from_env(
                    self._env, rate_per_s=rate, max_states=self._max_states
                )
            sol = solve(problem)
            self.solutions[bucket] = sol
            table = self._cache[bucket] = sol.policy.tolist()
        return table

    def reset(self) -> None:
        """Keeps the cache of solved buckets (it depends only on the env)."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Serve per the SMDP policy of the current rate bucket."""
        load = max(float(obs[2]), self._min_load)
        table = self._table(round(math.log(load) / self._log_ratio))
        q = info["queue_len"]
        return table[q] if q < len(table) else self._env.config.max_batch_size
