"""The MMPP batching SMDP (phase observed): kernels against a matrix exponential, the
optimum against every stationary policy on tiny instances, and the Poisson solver when
every phase has the same rate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.linalg as sla
from scipy.integrate import quad

from baselines.smdp import SMDPProblem, solve
from baselines.smdp_mmpp import (
    MMPPProblem,
    _build,
    _wait_matrices,
    batch_kernels,
    evaluate_policy,
    policy_gain,
    solve_mmpp,
)
from batch_env.profiles.batch_profile import load

LAT = (0.0, 0.010, 0.013, 0.016)
EN = (0.0, 1.0, 1.2, 1.4)
Q2 = ((-2.0, 2.0), (5.0, -5.0))


def _tiny(**kw):
    base = dict(
        rates_per_s=(30.0, 150.0),
        generator=Q2,
        latency_s=LAT,
        energy_j=EN,
        idle_power_w=20.0,
        w_energy=0.05,
        queue_capacity=12,
    )
    base.update(kw)
    return MMPPProblem(**base)


def _block_generator(pb: MMPPProblem, levels: int) -> np.ndarray:
    """The counting process (arrivals so far, phase) truncated at ``levels`` arrivals."""
    lam = np.asarray(pb.rates_per_s)
    Q = np.asarray(pb.generator)
    K = lam.size
    G = np.zeros(((levels + 1) * K, (levels + 1) * K))
    for n in range(levels + 1):
        i = slice(n * K, (n + 1) * K)
        G[i, i] = Q - np.diag(lam) if n < levels else Q
        if n < levels:
            G[i, slice((n + 1) * K, (n + 2) * K)] = np.diag(lam)
    return G


@pytest.mark.parametrize("rates", [(30.0, 150.0), (0.0, 400.0), (80.0, 80.0)])
def test_batch_kernels_equal_a_matrix_exponential(rates):
    pb = _tiny(rates_per_s=rates)
    ker = batch_kernels(pb)
    K, levels = 2, 40
    G = _block_generator(pb, levels)
    for b in range(1, pb.max_batch_size + 1):
        H = pb.latency_s[b]
        E = sla.expm(G * H)[:K]  # from level 0, phase k
        # Van Loan: the top-right block of expm([[G, I], [0, 0]] H) is int_0^H e^{Gt} dt
        n2 = G.shape[0]
        big = np.zeros((2 * n2, 2 * n2))
        big[:n2, :n2], big[:n2, n2:] = G, np.eye(n2)
        I_int = sla.expm(big * H)[:K, n2:]
        for n in range(min(levels - 1, ker.P.shape[3])):
            np.testing.assert_allclose(
                ker.P[b - 1, :, :, n], E[:, n * K : (n + 1) * K], rtol=1e-9, atol=1e-14
            )
            np.testing.assert_allclose(
                ker.U[b - 1, :, n], I_int[:, n * K : (n + 1) * K].sum(axis=1), rtol=1e-9, atol=1e-16
            )
        assert ker.P[b - 1].sum(axis=(1, 2)) == pytest.approx(np.ones(K), abs=1e-12)
        assert ker.U[b - 1].sum(axis=1) == pytest.approx(np.full(K, H), rel=1e-12)


@pytest.mark.parametrize("tick_ms", [None, 4.0])
def test_wait_matrices_equal_their_integrals(tick_ms):
    pb = _tiny(decision_interval_ms=tick_ms)
    lam = np.asarray(pb.rates_per_s)
    M = np.asarray(pb.generator) - np.diag(lam)
    A, T, tau = _wait_matrices(pb, ticks=True)
    D = np.inf if tick_ms is None else tick_ms / 1000
    for k in range(2):
        no_arrival = lambda t, k=k: sla.expm(M * t)[k].sum()  # noqa: E731
        assert tau[k] == pytest.approx(quad(no_arrival, 0, min(D, 50.0), limit=200)[0], rel=1e-8)
        for j in range(2):
            dens = lambda t, k=k, j=j: sla.expm(M * t)[k, j] * lam[j]  # noqa: E731
            assert A[k, j] == pytest.approx(quad(dens, 0, min(D, 50.0), limit=200)[0], abs=1e-10)
        assert A[k].sum() + T[k].sum() == pytest.approx(1.0, abs=1e-12)


def test_solution_is_the_best_of_every_stationary_policy():
    """S = 3, B = 2, 2 phases: 324 stationary policies, each evaluated exactly."""
    for tick_ms in (None, 5.0):
        pb = _tiny(
            queue_capacity=3, latency_s=LAT[:3], energy_j=EN[:3], decision_interval_ms=tick_ms
        )
        sol = solve_mmpp(pb)
        arr = _build(pb)
        choices = [range(min(s, 2) + 1) for s in range(4)]
        best = np.inf
        for per_phase in itertools.product(itertools.product(*choices), repeat=2):
            policy = np.array(per_phase).T  # (S+1, K)
            best = min(best, evaluate_policy(arr, policy)[0])
        assert sol.gain == pytest.approx(best, rel=1e-10)


@pytest.mark.parametrize(
    "tick_ms,service,cv",
    [(None, "deterministic", 0.0), (2.0, "deterministic", 0.0), (None, "lognormal", 0.3)],
)
def test_equal_rates_reduce_to_the_poisson_solver(tick_ms, service, cv):
    prof = load("resnet50-v100")
    B = 8
    lat, en = prof.tables(B)
    rate = 0.5 * B / lat[B]
    common = dict(
        latency_s=tuple(lat),
        energy_j=tuple(en),
        idle_power_w=prof.idle_power_w,
        queue_capacity=60,
        decision_interval_ms=tick_ms,
        service=service,
        service_cv=cv,
    )
    poisson_gain = solve(SMDPProblem(rate_per_s=rate, **common)).gain
    mmpp = solve_mmpp(MMPPProblem(rates_per_s=(rate, rate), generator=Q2, **common))
    assert mmpp.gain == pytest.approx(poisson_gain, rel=1e-9)
    assert (mmpp.policy[:, 0] == mmpp.policy[:, 1]).all()


def test_the_phase_aware_optimum_bounds_phase_blind_policies():
    pb = _tiny(rates_per_s=(5.0, 250.0), generator=((-1.0, 1.0), (2.0, -2.0)), queue_capacity=30)
    sol = solve_mmpp(pb)
    for t in range(1, 8):
        blind = np.where(np.arange(31) >= t, np.minimum(np.arange(31), 3), 0)
        assert policy_gain(pb, blind) >= sol.gain - 1e-12
    # here the phase is worth something: the best control limit is strictly worse
    best_blind = min(
        policy_gain(pb, np.where(np.arange(31) >= t, np.minimum(np.arange(31), 3), 0))
        for t in range(1, 8)
    )
    assert best_blind > sol.gain * (1 + 1e-4)


def test_bad_instances_are_refused_with_the_field():
    with pytest.raises(ValueError, match="not a generator"):
        _tiny(generator=((-1.0, 2.0), (1.0, -1.0)))
    with pytest.raises(ValueError, match=r"rates_per_s\[0\]"):
        _tiny(rates_per_s=(-1.0, 3.0))
    with pytest.raises(ValueError, match="at least one rate"):
        _tiny(rates_per_s=(0.0, 0.0))
    with pytest.raises(ValueError, match="valid action"):
        policy_gain(_tiny(), np.zeros(5, dtype=int))


def _bursty_env(**kw):
    import gymnasium as gym

    import batch_env  # noqa: F401

    prof = load("resnet50-v100")
    B = 8
    mu = B / prof.tables(B)[0][B]
    args = dict(
        profile="resnet50-v100",
        max_batch_size=B,
        queue_capacity=150,
        reward_weights={"sla": 0.0},
        workload={
            "kind": "mmpp",
            "rates_per_s": [0.05 * mu, 0.75 * mu],
            "switch_rates_per_s": [10.0, 10.0],
        },
        horizon_requests=150_000,
        oracle_info=True,
    )
    args.update(kw)
    return gym.make("batch_env/DynamicBatching-v0", **args)


def test_the_oracle_phase_is_the_streams_and_changes_nothing():
    """``info["oracle"]["phase"]`` is the chain's state at the epoch; asking for it draws
    nothing, so the trajectory equals the env's without the oracle."""
    env, plain = (
        _bursty_env(horizon_requests=3000),
        _bursty_env(horizon_requests=3000, oracle_info=False),
    )
    obs, info = env.reset(seed=5)
    obs2, info2 = plain.reset(seed=5)
    phases = set()
    for t in range(4000):
        a = int(np.flatnonzero(info["action_mask"])[-1]) if t % 3 else 0
        obs, r, _, trunc, info = env.step(a)
        obs2, r2, _, trunc2, info2 = plain.step(a)
        assert r == r2 and np.array_equal(obs, obs2) and "oracle" not in info2
        phases.add(info["oracle"]["phase"])
        if trunc:
            break
    assert phases == {0, 1}
    with pytest.raises(ValueError, match="oracle_info=True needs a workload that hides something"):
        _bursty_env(workload={"kind": "poisson", "load": 0.5})
    import gymnasium as gym

    with pytest.raises(
        ValueError, match="oracle_info=True is not available in the NumPy vector env"
    ):
        gym.make_vec("batch_env/DynamicBatching-v0", num_envs=2, oracle_info=True)
    with pytest.raises(ValueError, match="make the env with oracle_info=True"):
        import baselines

        baselines.make("smdp-oracle", _bursty_env(oracle_info=False))


@pytest.mark.slow
def test_the_oracle_policy_earns_its_solved_gain_in_the_env():
    """The env's measured cost rate under the phase-aware optimum equals the solved gain:
    the model (waits, batches, the phase, drops) is the env's."""
    import baselines

    env = _bursty_env()
    pol = baselines.make("smdp-oracle", env)
    rates = []
    for seed in range(8):
        obs, info = env.reset(seed=seed)
        total, elapsed = 0.0, 0.0
        for _ in range(10**6):
            obs, r, _, trunc, info = env.step(pol.act(obs, info))
            total += r
            elapsed += info["dt_s"]
            if trunc:
                break
        rates.append(-total / elapsed)
    mean = float(np.mean(rates))
    half = 2.365 * float(np.std(rates, ddof=1)) / np.sqrt(len(rates))  # t(7) 95%
    gain = pol.solution.gain
    print(f"measured {mean:.4f} +- {half:.4f} per s, solved gain {gain:.4f}")
    assert abs(mean - gain) <= max(half, 0.01 * gain), (mean, half, gain)
    assert half < 0.01 * gain, (mean, half, gain)


def _cost_rate(env, pol, seed):
    pol.reset()
    obs, info = env.reset(seed=seed)
    total = elapsed = 0.0
    for _ in range(10**7):
        obs, r, _, trunc, info = env.step(pol.act(obs, info))
        total += r
        elapsed += info["dt_s"]
        if trunc:
            return -total / elapsed
    raise AssertionError("the episode did not end")


@pytest.mark.slow
def test_the_belief_policy_sits_between_the_oracle_and_phase_blind_smdp():
    """On the bursty task's setting (rates 0.005 / 0.3 of max throughput, 1 s dwell, idle
    0 W), on the same seeds: the oracle <= smdp-belief < the Poisson SMDP at the mean rate."""
    import gymnasium as gym

    import baselines
    import batch_env  # noqa: F401

    prof = load("resnet50-v100")
    mu = 32 / prof.tables(32)[0][32]
    env = gym.make(
        "batch_env/DynamicBatching-v0",
        queue_capacity=300,
        idle_power_w=0.0,
        reward_weights={"sla": 0.0},
        horizon_requests=25_000,
        oracle_info=True,
        workload={
            "kind": "mmpp",
            "rates_per_s": [0.005 * mu, 0.3 * mu],
            "switch_rates_per_s": [1.0, 1.0],
        },
    )
    costs = {
        name: np.array([_cost_rate(env, baselines.make(name, env), seed) for seed in range(3)])
        for name in ("smdp-oracle", "smdp-belief", "smdp")
    }
    oracle, belief, blind = costs["smdp-oracle"], costs["smdp-belief"], costs["smdp"]
    assert (belief >= oracle * (1 - 0.005)).all(), costs  # the oracle is the bound (same arrivals)
    assert (belief < blind).all(), costs
    # the filter recovers most of what the phase is worth
    assert ((blind - belief) / (blind - oracle)).mean() > 0.5, costs


def test_a_multichain_trap_is_escaped_as_in_the_poisson_solver():
    prof = load("resnet50-v100")
    lat, en = prof.tables(32)
    rate = 0.05 * 32 / lat[32]
    common = dict(
        latency_s=tuple(lat),
        energy_j=tuple(en),
        idle_power_w=55.0,
        w_energy=5.0,
        queue_capacity=500,
    )
    want = solve(SMDPProblem(rate_per_s=rate, **common)).gain
    got = solve_mmpp(MMPPProblem(rates_per_s=(rate, rate), generator=Q2, **common))
    assert np.isfinite(got.gain) and got.gain == pytest.approx(want, rel=1e-9)
