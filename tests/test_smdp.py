"""The SMDP solver: exactness against brute force and pymdptoolbox, and optimality in the env."""

from __future__ import annotations

import itertools
import math

import gymnasium as gym
import numpy as np
import pytest

import batch_env  # noqa: F401
from baselines import make
from baselines.smdp import SMDPPolicy, SMDPProblem, solve, transformed_mdp
from batch_env import evaluate, paired_difference

ENV_ID = "batch_env/DynamicBatching-v0"


def tiny(cap=5, B=3, tick=None, service="deterministic", cv=0.0, we=0.5, rate=900.0, wd=1.0):
    lat = [0.0] + [0.001 + 0.0004 * b for b in range(1, B + 1)]
    en = [0.0] + [0.2 + 0.05 * b for b in range(1, B + 1)]
    return SMDPProblem(
        rate_per_s=rate,
        latency_s=tuple(lat),
        energy_j=tuple(en),
        idle_power_w=20.0,
        w_latency=1.0,
        w_energy=we,
        w_drop=wd,
        queue_capacity=cap,
        decision_interval_ms=tick,
        service=service,
        service_cv=cv,
    )


TINY = [
    {},
    {"tick": 0.5},
    {"service": "lognormal", "cv": 0.5},
    {"we": 2.0},
    {"we": 0.0, "rate": 2000.0},
    {"we": 0.05, "rate": 300.0, "tick": 0.3},
    {"cap": 4, "B": 2, "rate": 3000.0, "wd": 0.01},
]


def _brute_force(pb):
    """Gain of every stationary deterministic policy, from the transformed chain's limit."""
    P, cost, _ = transformed_mdp(pb)
    S = pb.n_states
    choices = [[0]] + [list(range(min(s, pb.max_batch_size) + 1)) for s in range(1, S)]
    gains = {}
    for pol in itertools.product(*choices):
        pol = np.array(pol)
        M = P[pol, np.arange(S)]
        for _ in range(50):  # M^(2^50): the Cesaro limit of an aperiodic chain
            M = M @ M
            M /= M.sum(axis=1, keepdims=True)
        gains[tuple(pol)] = float((M @ cost[np.arange(S), pol]).max())
    return gains


@pytest.mark.parametrize("kw", TINY)
def test_tiny_instances_match_brute_force_and_pymdptoolbox(kw):
    import mdptoolbox.mdp as mdp

    pb = tiny(**kw)
    sol = solve(pb)
    gains = _brute_force(pb)
    assert len(gains) == math.prod(min(s, pb.max_batch_size) + 1 for s in range(1, pb.n_states))
    best = min(gains.values())
    assert sol.gain == pytest.approx(best, rel=1e-9)
    assert gains[tuple(sol.policy.tolist())] == pytest.approx(best, rel=1e-9)
    P, cost, _ = transformed_mdp(pb)
    rvi = mdp.RelativeValueIteration(P, -cost, epsilon=1e-10 * sol.gain, max_iter=100_000)
    rvi.run()
    assert rvi.iter < 100_000
    assert tuple(rvi.policy) == tuple(sol.policy.tolist())
    assert -rvi.average_reward == pytest.approx(sol.gain, rel=1e-6)
    # our own RVI on the transformed MDP agrees too
    sol_rvi = solve(pb, method="rvi", tol=1e-11)
    assert sol_rvi.gain == pytest.approx(sol.gain, rel=1e-8)
    np.testing.assert_array_equal(sol_rvi.policy, sol.policy)


def test_gain_stable_when_truncation_doubles():
    env = gym.make(
        ENV_ID,
        workload={"kind": "poisson", "load": 0.9},
        reward_weights={"sla": 0.0},
        queue_capacity=100_000,
        decision_interval_ms=0.5,
        service="lognormal",
        service_cv=0.3,
    )
    gains = [solve(SMDPProblem.from_env(env, max_states=S)).gain for S in (150, 300, 600)]
    assert SMDPProblem.from_env(env, max_states=150).truncated
    for a, b in zip(gains, gains[1:], strict=False):
        assert abs(b - a) / abs(b) < 1e-3


def test_truncation_refused_when_full_batches_cannot_keep_up():
    env = gym.make(ENV_ID, workload={"kind": "poisson", "load": 1.2}, queue_capacity=10_000)
    with pytest.raises(ValueError, match="max_states=100"):
        solve(SMDPProblem.from_env(env, max_states=100))


def _exact_env(rho, **kw):
    return gym.make(
        ENV_ID,
        profile="resnet50-v100",
        workload={"kind": "poisson", "load": rho},
        reward_weights={"latency": 1.0, "energy": 0.5, "sla": 0.0, "drop": 1.0},
        decision_interval_ms=0.5,
        **kw,
    )


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
def test_gain_equals_env_reward_rate_and_smdp_is_optimal(rho):
    env = _exact_env(rho, horizon_requests=60_000)
    smdp = SMDPPolicy(env)
    sol = smdp.solution
    assert smdp.exact and not smdp.problem.truncated
    # not simply greedy: it waits below a threshold
    assert sol.threshold is not None and sol.threshold > 1
    res = evaluate(smdp, env, n_episodes=6, seed=100)
    measured = -res.mean("reward_rate_per_s")
    assert measured == pytest.approx(sol.gain, rel=0.02)
    assert res.ci95("reward_rate_per_s") < 0.01 * sol.gain
    assert res.mean("drop_rate") == 0.0
    for name, params in [
        ("greedy", {}),
        ("static", {"batch_size": 8, "timeout_ms": 2.0}),
        ("timeout", {"preferred_batch_sizes": (8, 16, 32), "max_queue_delay_ms": 1.0}),
        ("tfserving", {"batch_timeout_ms": 1.0}),
        ("aimd", {}),
    ]:
        other = evaluate(make(name, env=env, **params), env, n_episodes=6, seed=100)
        d, h = paired_difference(other, res, "reward_rate_per_s")
        assert d <= h, f"{name} beats smdp: {d} +- {h}"


@pytest.mark.slow
def test_threshold_non_decreasing_in_energy_weight():
    thresholds = []
    for we in (0.0, 0.1, 0.5, 1.0, 2.0, 4.0):
        env = gym.make(
            ENV_ID,
            profile="resnet50-v100-linear",
            workload={"kind": "poisson", "load": 0.5},
            reward_weights={"energy": we, "sla": 0.0},
            max_batch_size=64,
        )
        sol = solve(SMDPProblem.from_env(env))
        assert sol.threshold is not None
        thresholds.append(sol.threshold)
    assert thresholds == sorted(thresholds)
    assert thresholds[-1] > thresholds[0]


@pytest.mark.slow
def test_adaptive_policy_solves_per_rate_bucket():
    env = gym.make(
        ENV_ID,
        workload={"kind": "mmpp", "rates_per_s": [500.0, 3500.0], "switch_rates_per_s": [5.0, 5.0]},
        reward_weights={"sla": 0.0},
        horizon_requests=20_000,
    )
    pol = make("smdp-adaptive", env=env)
    res = evaluate(pol, env, n_episodes=2, seed=0)
    assert len(pol.solutions) >= 2  # it saw (and solved for) several rate levels
    assert res.mean("completed") == 20_000


def test_bad_problem_fields():
    with pytest.raises(ValueError, match="rate_per_s=-1"):
        tiny(rate=-1.0)
    with pytest.raises(ValueError, match="method='newton'"):
        solve(tiny(), method="newton")
    with pytest.raises(ValueError, match="needs env"):
        SMDPPolicy(None)


def test_adaptive_with_truncation_survives_high_load_estimates():
    env = gym.make(
        ENV_ID,
        max_batch_size=8,
        queue_capacity=5000,
        workload={
            "kind": "mmpp",
            "load": 0.9,
            "rates_per_s": [1.0, 3.0],
            "switch_rates_per_s": [5.0, 5.0],
        },
        reward_weights={"sla": 0.0},
        horizon_requests=3000,
    )
    pol = make("smdp-adaptive", env=env, max_states=100)
    res = evaluate(pol, env, n_episodes=1, seed=0)
    assert res.mean("completed") > 0


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.9, 1.2])
@pytest.mark.parametrize("we", [0.0, 0.5, 4.0])
@pytest.mark.parametrize("profile", ["resnet50-v100-linear", "resnet50-p4", "resnet50-t4-trt"])
def test_optimal_policy_serves_whenever_a_full_batch_waits(rho, we, profile):
    """The fact behind BinaryAction(serve_full=True): the control limit is at most B."""
    env = gym.make(
        ENV_ID,
        profile=profile,
        workload={"kind": "poisson", "load": rho},
        max_batch_size=32,
        reward_weights={"energy": we, "sla": 0.0},
        queue_capacity=400,
        decision_interval_ms=0.5,
    )
    sol = solve(SMDPProblem.from_env(env))
    assert np.all(sol.policy[32:] > 0)


def test_policy_iteration_survives_a_multichain_intermediate_policy():
    """idle 55 W, energy weight 5, load 0.05: from greedy, one improvement step serves in a
    band of queue lengths the queue never leaves and waits above it (two closed classes,
    singular evaluation equations; the gain was NaN). The solver restarts policy iteration
    from relative value iteration's policy and reaches the optimum."""
    from baselines.smdp import SMDPProblem, _build, _evaluate_policy, _policy_iteration, solve
    from batch_env.profiles.batch_profile import load

    prof = load("resnet50-v100")
    lat, en = prof.tables(32)
    pb = SMDPProblem(
        rate_per_s=0.05 * 32 / lat[32],
        latency_s=tuple(lat),
        energy_j=tuple(en),
        idle_power_w=55.0,
        w_energy=5.0,
        queue_capacity=500,
    )
    arr = _build(pb)
    assert _policy_iteration(arr, np.minimum(np.arange(501), 32), 100) is None  # the trap
    sol = solve(pb)
    assert np.isfinite(sol.gain) and sol.threshold is not None
    assert sol.gain == pytest.approx(solve(pb, method="rvi").gain, rel=1e-6)
    limits = [
        _evaluate_policy(arr, np.where(np.arange(501) >= t, np.minimum(np.arange(501), 32), 0))[0]
        for t in range(1, 33)
    ]
    assert sol.gain <= min(limits) + 1e-9
