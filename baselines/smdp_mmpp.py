"""The batching SMDP under MMPP arrivals with the phase observed: an exact bound.

The sibling of :mod:`baselines.smdp` for Markov-modulated Poisson arrivals
(:class:`batch_env.workload.MMPP`), solved for exactly the reward of
``DynamicBatching-v0``. The policy sees the modulating chain's phase, which no policy in
the env sees (the env exposes it only to an oracle, under ``info["oracle"]`` when made
with ``oracle_info=True``), so its gain is a lower bound on the long-run cost of every
phase-blind policy: the bound of the bursty benchmark tasks.

Model
-----
* **State** ``(s, k)``: ``s`` requests waiting at a decision epoch (server idle), ``0..S``
  with ``S`` the env's ``queue_capacity`` (no truncation: the state space is the env's),
  and the phase ``k`` of the modulating chain (generator ``Q``, rate ``lambda_k``).
* **Actions**: ``0`` = wait, ``b`` in ``1..min(s, B)`` = serve the ``b`` oldest; state
  ``(0, k)`` waits (as the env, which folds that wait into the step that emptied the
  queue: the cost per unit time is the same).
* **Wait**: the env's next epoch is the next arrival, or a relative tick ``D`` after the
  epoch (``decision_interval_ms``; never on an empty queue). With ``M = Q - Lambda``
  (the chain with no arrival yet) and ``F = int_0^D e^{Mt} dt = M^{-1}(e^{MD} - I)``
  (``-M^{-1}`` without ticks): the mean sojourn from phase ``k`` is ``(F 1)_k``; the
  epoch is an arrival in phase ``j`` with probability ``(F Lambda)_{kj}`` (next state
  ``(s + 1, j)``; at ``s = S`` the arrival is dropped) and a tick in phase ``j`` with
  probability ``(e^{MD})_{kj}`` (next state ``(s, j)``).
* **Serve b**: the sojourn is the batch time ``H`` (deterministic ``latency(b)``, or
  lognormal with that mean and the env's CV, by Gauss-Hermite quadrature as in
  :mod:`baselines.smdp`). By uniformization at rate ``alpha >= max_k(q_k + lambda_k)``,
  with ``P0 = I + M / alpha`` and ``P1 = Lambda / alpha``, the matrices
  ``V_m[n]`` (``m`` uniformized jumps of which ``n`` are arrivals: ``V_0[0] = I``,
  ``V_{m+1}[n] = V_m[n] P0 + V_m[n-1] P1``) give
  ``P(N(H) = n, phase j | k) = sum_m E[Pois(m; alpha H)] V_m[n]_{kj}`` and, for any
  ``f``, ``E[int_0^H f(N(t)) dt | k] = sum_m E[sf(m; alpha H)] / alpha sum_n f(n)
  (V_m[n] 1)_k`` (the integral over ``t`` of a Poisson weight is its survival function
  over ``alpha``). The next state is ``(min(s - b + n, S), j)``.
* **Cost per decision** = the env's reward terms, same weights and units: ``w_latency``
  x the integral of requests in the system (``s x sojourn``, plus for a batch the
  admitted arrivals' time to its end, ``E[int_0^H min(N(t), R) dt]`` with room
  ``R = S - (s - b)``), ``w_energy`` x (``energy(b)``, or idle power x sojourn), and
  ``w_drop`` x the expected drops (``E[(N(H) - R)^+]``; a wait's arrival at ``s = S``).
  As in :mod:`baselines.smdp`, the SLA term is not modelled: with ``w_sla > 0`` no
  optimality claim is made.

Method: Howard's policy iteration (evaluation: one sparse LU solve with ``h(0, 0) = 0``;
improvement: every ``Q((s, k), b)`` at once through sliding windows of ``h`` and the
kernels). With equal rates in every phase the model is the Poisson SMDP of
:mod:`baselines.smdp`, and the gains agree (tested); on tiny instances the solution
equals the best of every stationary policy, with kernels from a matrix exponential of the
level-truncated counting process (tested).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from numpy.lib.stride_tricks import sliding_window_view
from scipy.stats import poisson

from baselines.smdp import average_cost, env_cost_parameters, service_quadrature
from batch_env.checks import check_number
from batch_env.workload import MMPP

if TYPE_CHECKING:
    from batch_env.envs.dynamic_batching import DynamicBatchingEnv

_TAIL = 1e-15  # Poisson tail left out of a truncated sum (as in baselines.smdp)
#: the largest state space solved (``(queue_capacity + 1) x phases``)
MAX_STATES = 200_000
#: the most uniformized jumps a batch may need (the kernels cost O(jumps^2))
MAX_JUMPS = 4000


@dataclass(frozen=True)
class MMPPProblem:
    """An instance of the batching SMDP with MMPP arrivals, in the env's units.

    :param rates_per_s: arrival rate in each phase (>= 0, not all 0).
    :param generator: the phase chain's generator ``Q`` (rows sum to 0), as nested tuples.
    :param latency_s: mean batch time per batch size, index ``b`` for ``b = 0..B``.
    :param energy_j: batch energy per batch size, same indexing.
    :param idle_power_w: power while idle.
    :param w_latency: cost per request-second.
    :param w_energy: cost per joule.
    :param w_drop: cost per dropped request.
    :param queue_capacity: waiting requests the env admits (drops beyond): ``S``.
    :param decision_interval_ms: relative tick interval, ``None`` for no ticks.
    :param service: ``"deterministic"`` or ``"lognormal"``.
    :param service_cv: coefficient of variation of lognormal service.
    """

    rates_per_s: tuple[float, ...]
    generator: tuple[tuple[float, ...], ...]
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

    def __post_init__(self) -> None:
        lam = np.asarray(self.rates_per_s, dtype=np.float64)
        q = np.asarray(self.generator, dtype=np.float64)
        K = lam.size
        if K < 1 or q.shape != (K, K):
            raise ValueError(
                f"generator must be a {K}x{K} matrix for {K} rates: got shape {q.shape}"
            )
        for k in range(K):
            check_number(f"rates_per_s[{k}]", lam[k], low=0.0)
        if not lam.sum() > 0:
            raise ValueError(f"rates_per_s={self.rates_per_s!r}: at least one rate must be > 0")
        off = q - np.diag(np.diag(q))
        if (off < 0).any() or not np.allclose(q.sum(axis=1), 0.0, atol=1e-9 * (1 + abs(q).max())):
            raise ValueError(
                f"generator={self.generator!r} is not a generator: off-diagonal entries must be "
                ">= 0 and rows must sum to 0"
            )
        if len(self.latency_s) < 2 or len(self.latency_s) != len(self.energy_j):
            raise ValueError(
                "latency_s and energy_j must have the same length B + 1 >= 2 (index = batch "
                f"size): got {len(self.latency_s)} and {len(self.energy_j)}"
            )
        for b in range(1, len(self.latency_s)):
            check_number(f"latency_s[{b}]", self.latency_s[b], low=0.0, low_inclusive=False)
            check_number(f"energy_j[{b}]", self.energy_j[b], low=0.0)
        check_number("idle_power_w", self.idle_power_w, low=0.0)
        for name in ("w_latency", "w_energy", "w_drop"):
            check_number(name, getattr(self, name), low=0.0)
        check_number("queue_capacity", self.queue_capacity, low=1, integer=True)
        if (self.queue_capacity + 1) * K > MAX_STATES:
            raise ValueError(
                f"queue_capacity={self.queue_capacity} with {K} phases gives "
                f"{(self.queue_capacity + 1) * K} states: at most {MAX_STATES} are solved"
            )
        if self.decision_interval_ms is not None:
            check_number(
                "decision_interval_ms", self.decision_interval_ms, low=0.0, low_inclusive=False
            )
        if self.service not in ("deterministic", "lognormal"):
            raise ValueError(
                f"service={self.service!r} is invalid: allowed values are "
                "('deterministic', 'lognormal')"
            )
        check_number("service_cv", self.service_cv, low=0.0)

    @property
    def max_batch_size(self) -> int:
        """B."""
        return len(self.latency_s) - 1

    @property
    def n_phases(self) -> int:
        """K, the phases of the modulating chain."""
        return len(self.rates_per_s)

    @classmethod
    def from_env(cls, env: gym.Env, **overrides: Any) -> MMPPProblem:
        """The SMDP of a ``DynamicBatching-v0`` env with an MMPP workload (through wrappers).

        :param env: the env (``executor="profile"``, an MMPP workload).
        :param overrides: any field of :class:`MMPPProblem`.
        :raises ValueError: when the env's workload is not an MMPP or its executor not the
            profile executor.
        """
        core = cast("DynamicBatchingEnv", env.unwrapped)
        wl = core.workload
        if not isinstance(wl, MMPP):
            raise ValueError(
                f"MMPPProblem.from_env needs an env with an MMPP workload: this env's is "
                f"{type(wl).__name__} (for Poisson arrivals use baselines.smdp)"
            )
        params = env_cost_parameters(env, "MMPPProblem.from_env")
        params["rates_per_s"] = tuple(float(r) for r in wl.rates_per_s)
        params["generator"] = tuple(tuple(float(x) for x in row) for row in wl.generator)
        params.update(overrides)
        return cls(**params)


# -- kernels ---------------------------------------------------------------------------


@dataclass
class Kernels:
    """What a batch does, per batch size ``b`` (row ``b - 1``) and starting phase ``k``.

    :param P: ``P[b-1, k, j, n]`` = P(n arrivals during the batch, phase ``j`` at its end).
    :param U: ``U[b-1, k, n]`` = ``E[int_0^H 1{N(t) = n} dt]``: time spent with ``n``
        arrivals so far.
    """

    P: np.ndarray
    U: np.ndarray


def _count_sums(
    Q: np.ndarray, lam: np.ndarray, alpha: float, w: np.ndarray, u: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """``sum_m w[r, m] V_m[n]`` and ``sum_m u[r, m] V_m[n] 1`` for each row ``r`` of the
    weights (``V_m[n]``: ``m`` uniformized jumps at rate ``alpha``, ``n`` of them arrivals).

    :returns: ``P`` of shape ``(R, K, K, M+1)`` and ``U`` of shape ``(R, K, M+1)`` (zeros
        when ``u`` is None).
    """
    K = lam.size
    R, M1 = w.shape
    P0 = np.eye(K) + (Q - np.diag(lam)) / alpha
    p1 = lam / alpha  # P1 = diag(p1): scales columns
    P = np.zeros((R, K, K, M1))
    U = np.zeros((R, K, M1))
    V = np.zeros((M1, K, K))  # V_m[n], n = 0..m
    V[0] = np.eye(K)
    for mm in range(M1):
        Vm = V[: mm + 1]
        P[:, :, :, : mm + 1] += w[:, mm, None, None, None] * Vm.transpose(1, 2, 0)[None]
        if u is not None:
            U[:, :, : mm + 1] += u[:, mm, None, None] * Vm.sum(axis=2).T[None]
        if mm < M1 - 1:
            nxt = np.zeros((mm + 2, K, K))
            nxt[: mm + 1] = Vm @ P0
            nxt[1 : mm + 2] += Vm * p1[None, None, :]
            V[: mm + 2] = nxt
    return P, U


def count_matrix(rates_per_s: np.ndarray, generator: np.ndarray, d: float, n: int) -> np.ndarray:
    """``P(n arrivals in d seconds, phase j at the end | phase k)`` as a ``K x K`` matrix."""
    lam = np.asarray(rates_per_s, dtype=np.float64)
    Q = np.asarray(generator, dtype=np.float64)
    alpha = float(np.max(-np.diag(Q) + lam))
    if alpha * d <= 0:
        return np.eye(lam.size) if n == 0 else np.zeros((lam.size, lam.size))
    M = max(int(poisson.isf(_TAIL, alpha * d)) + 2, n + 1)
    w = poisson.pmf(np.arange(M + 1), alpha * d)[None, :]
    P, _ = _count_sums(Q, lam, alpha, w, None)
    return P[0, :, :, n]


def batch_kernels(pb: MMPPProblem) -> Kernels:
    """The batch kernels by uniformization (see the module docstring)."""
    lam = np.asarray(pb.rates_per_s, dtype=np.float64)
    Q = np.asarray(pb.generator, dtype=np.float64)
    B = pb.max_batch_size
    alpha = float(np.max(-np.diag(Q) + lam))
    lat = np.asarray(pb.latency_s[1:], dtype=np.float64)
    factors, wts = service_quadrature(pb.service, pb.service_cv)
    means = alpha * lat[:, None] * factors[None, :]  # (B, nodes)
    M = int(poisson.isf(_TAIL, float(means.max()))) + 2
    if M > MAX_JUMPS:
        raise ValueError(
            f"a batch of {B} spans about {means.max():.0f} uniformized jumps (phase switches and "
            f"arrivals): more than the {MAX_JUMPS} this solver expands; lower the rates or the "
            "batch size"
        )
    m = np.arange(M + 1)
    w = np.tensordot(poisson.pmf(m[None, None, :], means[:, :, None]), wts, axes=([1], [0]))
    u = (
        np.tensordot(poisson.sf(m[None, None, :], means[:, :, None]), wts, axes=([1], [0])) / alpha
    )  # (B, M+1): E[int_0^H Pois(m; alpha t) dt] = E[sf(m; alpha H)] / alpha
    P, U = _count_sums(Q, lam, alpha, w, u)
    return Kernels(P=P, U=U)


def _wait_matrices(pb: MMPPProblem, ticks: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, T, tau)`` of a wait: arrival in phase j, tick in phase j, mean sojourn."""
    lam = np.asarray(pb.rates_per_s, dtype=np.float64)
    Mx = np.asarray(pb.generator, dtype=np.float64) - np.diag(lam)
    K = lam.size
    if ticks and pb.decision_interval_ms is not None:
        D = pb.decision_interval_ms / 1000.0
        E = sla.expm(Mx * D)
        F = np.linalg.solve(Mx, E - np.eye(K))
        T = E
    else:
        F = -np.linalg.inv(Mx)
        T = np.zeros((K, K))
    A = F * lam[None, :]
    return A, T, F.sum(axis=1)


# -- the SMDP ----------------------------------------------------------------------------


@dataclass
class _Arrays:
    S: int
    B: int
    K: int
    P: np.ndarray  # (B, K, K, N+1) batch kernel
    c: np.ndarray  # (S+1, K, B+1) cost, +inf where invalid
    tau: np.ndarray  # (S+1, K, B+1) mean sojourn, 1 where invalid
    valid: np.ndarray  # (S+1, K, B+1)
    A: np.ndarray  # (2, K, K) wait -> arrival in phase j (row 0: s = 0, row 1: s >= 1)
    T: np.ndarray  # (2, K, K) wait -> tick in phase j


def _build(pb: MMPPProblem) -> _Arrays:
    S, B, K = pb.queue_capacity, pb.max_batch_size, pb.n_phases
    lat = np.asarray(pb.latency_s, dtype=np.float64)
    en = np.asarray(pb.energy_j, dtype=np.float64)
    ker = batch_kernels(pb)
    N = ker.P.shape[3] - 1
    n = np.arange(N + 1)
    R = np.arange(1, S + 1)[:, None]  # room after serving: 1..S
    admitted = np.minimum(n[None, :], R)  # (S, N+1)
    L_arr = np.einsum("rn,bkn->rbk", admitted, ker.U)  # (S, B, K)
    p_n = ker.P.sum(axis=2)  # (B, K, N+1)
    over = np.einsum("rn,bkn->rbk", np.maximum(n[None, :] - R, 0), p_n)
    s = np.arange(S + 1)[:, None, None]
    b = np.arange(1, B + 1)[None, None, :]
    valid_serve = np.broadcast_to(b <= s, (S + 1, K, B))
    room = np.clip(S - s + b, 1, S) - 1  # (S+1, 1, B) index into R
    kk = np.arange(K)[None, :, None]
    c_serve = (
        pb.w_latency * (s * lat[1:][None, None, :] + L_arr[room, b - 1, kk])
        + pb.w_energy * en[1:][None, None, :]
        + pb.w_drop * over[room, b - 1, kk]
    )
    A0, T0, tau0 = _wait_matrices(pb, ticks=False)
    A1, T1, tau1 = _wait_matrices(pb, ticks=True)
    tau_w = np.where(np.arange(S + 1)[:, None] == 0, tau0[None, :], tau1[None, :])  # (S+1, K)
    p_arrival = np.where(np.arange(S + 1)[:, None] == 0, A0.sum(1)[None, :], A1.sum(1)[None, :])
    c_wait = (pb.w_latency * np.arange(S + 1)[:, None] + pb.w_energy * pb.idle_power_w) * tau_w
    c_wait[S] += pb.w_drop * p_arrival[S]
    c = np.empty((S + 1, K, B + 1))
    c[:, :, 0] = c_wait
    c[:, :, 1:] = np.where(valid_serve, c_serve, np.inf)
    tau = np.ones((S + 1, K, B + 1))
    tau[:, :, 0] = tau_w
    tau[:, :, 1:] = np.where(valid_serve, lat[1:][None, None, :], 1.0)
    valid = np.ones((S + 1, K, B + 1), dtype=bool)
    valid[:, :, 1:] = valid_serve
    return _Arrays(S, B, K, ker.P, c, tau, valid, np.stack([A0, A1]), np.stack([T0, T1]))


def _expectations(arr: _Arrays, h: np.ndarray) -> np.ndarray:
    """``E[h(next) | (s, k), a]`` for every state and action, shape (S+1, K, B+1)."""
    S, K, B = arr.S, arr.K, arr.B
    N = arr.P.shape[3] - 1
    h2 = h.reshape(S + 1, K)
    out = np.empty((S + 1, K, B + 1))
    up = np.minimum(np.arange(S + 1) + 1, S)
    out[:, :, 0] = h2[up] @ arr.A[1].T + h2 @ arr.T[1].T
    out[0, :, 0] = arr.A[0] @ h2[1 if S >= 1 else 0] + arr.T[0] @ h2[0]
    E = np.zeros((S, B, K))  # indexed by r = s - b in 0..S-1
    for j in range(K):
        pad = np.concatenate([h2[:, j], np.full(N, h2[S, j])])
        windows = sliding_window_view(pad, N + 1)[:S]  # (S, N+1): h(min(r + n, S), j)
        E += np.einsum("rn,bkn->rbk", windows, arr.P[:, :, j, :])
    s = np.arange(S + 1)[:, None, None]
    b = np.arange(1, B + 1)[None, None, :]
    r = np.clip(s - b, 0, S - 1)
    out[:, :, 1:] = E[r, b - 1, np.arange(K)[None, :, None]]
    return out


def _policy_matrix(arr: _Arrays, policy: np.ndarray) -> sp.csr_matrix:
    """Sparse transition matrix of a stationary policy over states ``x = s K + k``."""
    S, K = arr.S, arr.K
    N = arr.P.shape[3] - 1
    X = (S + 1) * K
    s_of = np.repeat(np.arange(S + 1), K)
    k_of = np.tile(np.arange(K), S + 1)
    act = policy.reshape(-1)
    rows, cols, data = [], [], []
    wait = np.flatnonzero(act == 0)
    if wait.size:
        sw, kw = s_of[wait], k_of[wait]
        row = np.minimum(sw, 1)  # 0 at s = 0, else 1
        up = np.minimum(sw + 1, S)
        j = np.arange(K)
        rows += [np.repeat(wait, K)] * 2
        cols += [(up[:, None] * K + j).ravel(), (sw[:, None] * K + j).ravel()]
        data += [arr.A[row, kw].ravel(), arr.T[row, kw].ravel()]
    serve = np.flatnonzero(act > 0)
    if serve.size:
        ss, ks, bs = s_of[serve], k_of[serve], act[serve]
        r = ss - bs
        nn = np.arange(N + 1)
        nxt = np.minimum(r[:, None] + nn[None, :], S)  # (n_serve, N+1)
        j = np.arange(K)
        rows.append(np.repeat(serve, K * (N + 1)))
        cols.append((nxt[:, None, :] * K + j[None, :, None]).ravel())
        data.append(arr.P[bs - 1, ks].ravel())  # (n_serve, K, N+1)
    return sp.csr_matrix(
        (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(X, X)
    )


def evaluate_policy(arr: _Arrays, policy: np.ndarray) -> tuple[float, np.ndarray]:
    """Gain and bias (``h(0, 0) = 0``, flat over ``x = s K + k``) of a stationary policy
    given as an ``(S+1, K)`` array of actions."""
    s_idx = np.repeat(np.arange(arr.S + 1), arr.K)
    k_idx = np.tile(np.arange(arr.K), arr.S + 1)
    act = policy.reshape(-1)
    return average_cost(
        _policy_matrix(arr, policy), arr.c[s_idx, k_idx, act], arr.tau[s_idx, k_idx, act]
    )


@dataclass
class MMPPSolution:
    """The solved SMDP.

    :param policy: action per state, ``(S+1, K)`` (0 = wait, b = serve b).
    :param gain: optimal long-run average cost per second (minus the env's reward rate).
    :param bias: relative values, ``(S+1, K)`` (``h(0, 0) = 0``).
    :param thresholds: per phase, the smallest queue length at which the policy serves
        if it is a control limit in that phase, else ``None``.
    :param iterations: policy-iteration steps.
    :param solve_time_s: wall time of the solve.
    :param problem: the instance.
    """

    policy: np.ndarray
    gain: float
    bias: np.ndarray
    thresholds: list[int | None]
    iterations: int
    solve_time_s: float
    problem: MMPPProblem

    def action(self, queue_len: int, phase: int) -> int:
        """The optimal action in state ``(queue_len, phase)``."""
        return int(self.policy[min(queue_len, self.problem.queue_capacity), phase])

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (not the bias)."""
        return {
            "gain": self.gain,
            "thresholds": self.thresholds,
            "iterations": self.iterations,
            "solve_time_s": self.solve_time_s,
            "policy": self.policy.tolist(),
        }


def _threshold(col: np.ndarray) -> int | None:
    serving = np.flatnonzero(col > 0)
    if serving.size == 0:
        return None
    t = int(serving[0])
    return t if bool(np.all(col[t:] > 0)) else None


def _policy_iteration(
    arr: _Arrays, policy: np.ndarray, max_iter: int
) -> tuple[np.ndarray, float, np.ndarray, int] | None:
    """Howard's policy iteration from ``policy``: ``(policy, gain, bias, iterations)``,
    or ``None`` when a policy on the way is multichain (its evaluation is singular)."""
    s_idx, k_idx = np.indices((arr.S + 1, arr.K))
    for it in range(1, max_iter + 1):
        gain, h = evaluate_policy(arr, policy)
        if not (math.isfinite(gain) and np.isfinite(h).all()):
            return None
        Q = arr.c - gain * arr.tau + _expectations(arr, h)
        Q[~arr.valid] = np.inf
        best = Q.argmin(axis=2)
        cur = Q[s_idx, k_idx, policy]
        improve = Q[s_idx, k_idx, best] < cur - 1e-12 * (np.abs(cur) + 1.0)
        if not improve.any():
            return policy, gain, h, it
        policy = np.where(improve, best, policy)
    raise RuntimeError(f"policy iteration did not converge in {max_iter} iterations")


def _value_iteration_policy(arr: _Arrays, tol: float = 1e-9, max_iter: int = 200_000) -> np.ndarray:
    """The greedy policy of relative value iteration on Tijms' transformed MDP (step
    ``eta`` = 0.95 x the shortest sojourn, valid whatever the self-loops), to a span
    tolerance: the start of policy iteration when greedy's start runs into a multichain
    policy."""
    eta = 0.95 * float(arr.tau[arr.valid].min())
    c_rate = np.where(arr.valid, arr.c / arr.tau, np.inf)
    v = np.zeros((arr.S + 1) * arr.K)
    Qt = c_rate
    for _ in range(max_iter):
        E = _expectations(arr, v)
        v2 = v.reshape(arr.S + 1, arr.K)[:, :, None]
        Qt = c_rate + (eta / arr.tau) * (E - v2) + v2
        Qt[~arr.valid] = np.inf
        v_new = Qt.min(axis=2).reshape(-1)
        diff = v_new - v
        lo, hi = float(diff.min()), float(diff.max())
        v = v_new - v_new[0]
        if hi - lo < tol * max(abs(0.5 * (lo + hi)), 1e-300):
            break
    return Qt.argmin(axis=2)


def solve_mmpp(problem: MMPPProblem, max_iter: int = 500) -> MMPPSolution:
    """Solve the phase-observed batching SMDP for its average-cost optimal policy.

    Policy iteration from greedy; if a policy on the way is multichain (it can happen
    with high energy weights, as in :func:`baselines.smdp.solve`), policy iteration
    restarts from relative value iteration's policy.

    :param problem: the instance (see :meth:`MMPPProblem.from_env`).
    :param max_iter: policy-iteration cap (``RuntimeError`` if reached without converging).
    """
    t0 = time.perf_counter()
    arr = _build(problem)
    S, K = arr.S, arr.K
    greedy = np.broadcast_to(np.minimum(np.arange(S + 1), arr.B)[:, None], (S + 1, K)).copy()
    out = _policy_iteration(arr, greedy, max_iter)
    if out is None:
        out = _policy_iteration(arr, _value_iteration_policy(arr), max_iter)
        if out is None:
            raise RuntimeError(
                "policy iteration met a multichain policy from greedy's and from value "
                "iteration's start: the instance has no unichain optimum this solver can find"
            )
    policy, gain, h, it = out
    return MMPPSolution(
        policy=policy.astype(np.int64),
        gain=gain,
        bias=h.reshape(S + 1, K),
        thresholds=[_threshold(policy[:, k]) for k in range(K)],
        iterations=it,
        solve_time_s=time.perf_counter() - t0,
        problem=problem,
    )


def policy_gain(problem: MMPPProblem, policy: np.ndarray) -> float:
    """Long-run average cost per second of a stationary policy (``(S+1, K)`` actions, or
    ``(S+1,)`` for a phase-blind one)."""
    arr = _build(problem)
    pol = np.asarray(policy, dtype=np.int64)
    if pol.ndim == 1 and pol.shape[0] == arr.S + 1:
        pol = np.broadcast_to(pol[:, None], (arr.S + 1, arr.K)).copy()
    ok = pol.shape == (arr.S + 1, arr.K) and bool(((pol >= 0) & (pol <= arr.B)).all())
    if ok:
        s_idx, k_idx = np.indices(pol.shape)
        ok = bool(arr.valid[s_idx, k_idx, pol].all())
    if not ok:
        raise ValueError(
            f"policy must give a valid action (0..min(s, B)) in each of the {arr.S + 1} x "
            f"{arr.K} states"
        )
    return evaluate_policy(arr, pol)[0]


class MMPPOraclePolicy:
    """The phase-aware SMDP-optimal policy, acting on the true phase (an oracle).

    Needs an env made with an MMPP workload and ``oracle_info=True``: it reads the phase
    from ``info["oracle"]["phase"]``, which no realizable policy sees. Its long-run cost is
    the solved gain (:attr:`solution`), a bound for every phase-blind policy.

    :param env: the ``DynamicBatching-v0`` env (configuration read at construction).
    """

    name = "smdp-oracle"

    def __init__(self, env: gym.Env | None = None) -> None:
        if env is None:
            raise ValueError(
                "smdp-oracle needs env=<a DynamicBatching-v0 env with an MMPP workload and "
                "oracle_info=True>: it solves the SMDP of that env"
            )
        if not getattr(env.unwrapped, "_oracle", False):
            raise ValueError(
                "smdp-oracle acts on the true phase: make the env with oracle_info=True"
            )
        self.problem = MMPPProblem.from_env(env)
        self.solution = solve_mmpp(self.problem)
        self._table = self.solution.policy.tolist()
        self._top = self.problem.queue_capacity

    def reset(self) -> None:
        """Stateless."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The optimal action for the queue length and the true phase."""
        return self._table[min(info["queue_len"], self._top)][info["oracle"]["phase"]]


class PhaseFilter:
    """The exact forward filter on an MMPP's hidden phase, from what ``info`` shows.

    It knows the MMPP's parameters from the env's configuration, never the phase. After
    every step (:meth:`update`) it updates its belief over the phase:

    * a wait of ``dt`` (``info["last_batch_size"] == 0``) that ended with an arrival (the
      queue grew, or a drop at a full queue): ``belief <- belief e^{M dt} Lambda``; one
      that ended at a tick: ``belief <- belief e^{M dt}`` (``M = Q - Lambda``);
    * a batch of duration ``d`` (``last_batch_latency_s``) with ``n`` arrivals during it
      (queue growth plus drops): ``belief <- belief P(n arrivals in d)``; if the step
      went on idle (``dt > d``: the batch emptied the queue, so ``n = 0``), the idle part
      ended with an arrival.

    The first belief is the chain's stationary distribution carried to the first arrival
    (the epoch ``reset`` returns). Used by :class:`MMPPBeliefPolicy` and, as a feature,
    by ``agents.wrappers.PhaseBelief``.

    :param env: the ``DynamicBatching-v0`` env with an MMPP workload.
    :param problem: its :class:`MMPPProblem`, where the caller has built it already (or
        another MMPP's: a fitted one, ``baselines.mmpp_fit``).
    :param stationary: the phase chain's stationary distribution (``None``: the env's
        workload's; give it with a ``problem`` that is not the env's).
    """

    def __init__(
        self,
        env: gym.Env,
        problem: MMPPProblem | None = None,
        stationary: Any = None,
    ) -> None:
        pb = problem if problem is not None else MMPPProblem.from_env(env)
        self._lam = np.asarray(pb.rates_per_s, dtype=np.float64)
        self._gen = np.asarray(pb.generator, dtype=np.float64)
        self._M = self._gen - np.diag(self._lam)
        if stationary is None:
            wl = cast("DynamicBatchingEnv", env.unwrapped).workload
            stationary = cast(MMPP, wl).stationary_distribution
        self._pi = np.asarray(stationary, dtype=np.float64)
        deterministic = pb.service == "deterministic" or pb.service_cv == 0
        self._kernel = batch_kernels(pb).P if deterministic else None
        # e^{Mt} by an eigendecomposition of M, computed once (a step needs one or two)
        w, V = np.linalg.eig(self._M)
        self._eig: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if np.linalg.cond(V) < 1e8:
            self._eig = (w, V, np.linalg.inv(V))
        self.reset()

    @property
    def phases(self) -> int:
        """The number of phases ``K`` (the belief's length)."""
        return len(self._lam)

    def reset(self) -> None:
        """Forget the belief (a new episode starts from the stationary distribution)."""
        self.belief: np.ndarray | None = None
        self._last: tuple[int, int] | None = None  # queue, drops after the last update

    def start_from(self, belief: Any, info: dict[str, Any]) -> None:
        """Take ``belief`` as the belief after the step that returned ``info`` (a filter
        taking over mid-episode from another estimate of the phase)."""
        self.belief = self._normalize(np.asarray(belief, dtype=np.float64))
        self._last = (int(info["queue_len"]), int(info["dropped_total"]))

    def _normalize(self, b: np.ndarray) -> np.ndarray:
        total = float(b.sum())
        return b / total if total > 0 else self._pi.copy()

    def update(self, info: dict[str, Any]) -> np.ndarray:
        """The belief after the step that returned ``info`` (the first call of an
        episode: at the epoch ``reset`` returned)."""
        q, drops = int(info["queue_len"]), int(info["dropped_total"])
        if self._last is None or self.belief is None:  # the first epoch: at the first arrival
            b = self._pi @ self._expm(float(info["now_s"])) * self._lam
        else:
            q0, d0 = self._last
            dt = float(info["dt_s"])
            b = self.belief
            size = int(info["last_batch_size"])
            if size == 0:  # a wait: ended by an arrival, or by a tick
                E = self._expm(dt)
                b = b @ E * self._lam if (q - q0) + (drops - d0) > 0 else b @ E
            else:
                d = float(info["last_batch_latency_s"])
                idle = dt - d
                n = 0 if idle > 1e-12 else max(q - (q0 - size) + (drops - d0), 0)
                b = b @ self._count(size, d, n)
                if idle > 1e-12:
                    b = b @ self._expm(idle) * self._lam
        self.belief = self._normalize(b)
        self._last = (q, drops)
        return self.belief

    def _expm(self, t: float) -> np.ndarray:
        """``e^{Mt}``."""
        if self._eig is None:
            return sla.expm(self._M * t)
        w, V, Vi = self._eig
        return np.real((V * np.exp(w * t)) @ Vi)

    def _count(self, size: int, d: float, n: int) -> np.ndarray:
        if self._kernel is not None and n < self._kernel.shape[3]:
            return self._kernel[size - 1, :, :, n]
        return count_matrix(self._lam, self._gen, d, n)


class MMPPBeliefPolicy:
    """A realizable phase-aware policy: a forward filter on the phase, then QMDP.

    It knows the MMPP's parameters from the env's configuration (as ``smdp`` knows the
    profile), never the phase. After every step it updates its belief over the phase
    exactly from what ``info`` shows (:class:`PhaseFilter`), then takes the action that
    minimizes the belief-weighted Q-values of the phase-aware solution (QMDP:
    ``argmin_a sum_k b_k Q((s, k), a)``), which on a certain phase is the oracle's
    action.

    :param env: the ``DynamicBatching-v0`` env with an MMPP workload.
    """

    name = "smdp-belief"

    def __init__(self, env: gym.Env | None = None) -> None:
        if env is None:
            raise ValueError(
                "smdp-belief needs env=<a DynamicBatching-v0 env with an MMPP workload>: it "
                "solves the SMDP of that env and filters the phase with its parameters"
            )
        self._install(env, MMPPProblem.from_env(env), None)

    @classmethod
    def for_problem(cls, env: gym.Env, problem: MMPPProblem, stationary: Any) -> MMPPBeliefPolicy:
        """The same policy for another MMPP than the env's (a fitted one,
        ``baselines.mmpp_fit``): solved, and filtering, with ``problem``'s parameters and
        the ``stationary`` distribution of its phase chain."""
        policy = cls.__new__(cls)
        policy._install(env, problem, stationary)
        return policy

    def _install(self, env: gym.Env, pb: MMPPProblem, stationary: Any) -> None:
        self.problem = pb
        self.solution = solve_mmpp(pb)
        arr = _build(pb)
        Qv = (
            arr.c
            - self.solution.gain * arr.tau
            + _expectations(arr, self.solution.bias.reshape(-1))
        )
        Qv[~arr.valid] = np.inf
        self._Q = Qv  # (S+1, K, B+1)
        self.filter = PhaseFilter(env, pb, stationary)
        self._S = pb.queue_capacity
        self.reset()

    @property
    def belief(self) -> np.ndarray | None:
        """The current belief over the phases (None before the episode's first act)."""
        return self.filter.belief

    def reset(self) -> None:
        """Forget the belief (a new episode starts from the stationary distribution)."""
        self.filter.reset()

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Update the belief from ``info``, then the QMDP action."""
        self.filter.update(info)
        return self.qmdp_action(info)

    def qmdp_action(self, info: dict[str, Any]) -> int:
        """The QMDP action for the filter's current belief at ``info``'s queue."""
        s = min(int(info["queue_len"]), self._S)
        return int(np.argmin(cast(np.ndarray, self.filter.belief) @ self._Q[s]))
