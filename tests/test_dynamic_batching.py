"""DynamicBatching-v0: event semantics, golden trajectory, properties, queueing theory."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import batch_env  # noqa: F401
from baselines import GreedyPolicy
from batch_env import evaluate
from batch_env.metrics import SERVING_KEYS
from batch_env.queueing import inoue_bound_s, inoue_mean_latency_s

ENV_ID = "batch_env/DynamicBatching-v0"

# -- golden trajectory ------------------------------------------------------------------
# Time unit u = 1/1024 s, so every time below is exact in binary floating point and
# "the same instant" really is the same float.
U = 1.0 / 1024.0
U_MS = 1000.0 * U  # 0.9765625 ms
GOLDEN_PROFILE = {
    "name": "golden",
    "model": "toy",
    "device": "toy",
    "source": "hand-made for the golden test",
    "kind": "linear",
    "tau0_ms": U_MS,  # latency(b) = (1 + b) u
    "alpha_ms": U_MS,
    "c0_j": 0.1,  # energy(b) = 0.1 + 0.1 b
    "beta_j": 0.1,
    "idle_power_w": 10.0,
}
GOLDEN_ARRIVALS_U = [0, 1, 4, 5, 5.5, 9, 14, 20]
WEIGHTS = {"latency": 1.0, "energy": 0.5, "sla": 2.0, "drop": 3.0}


@pytest.fixture
def golden_env(tmp_path):
    path = tmp_path / "golden.csv"
    path.write_text("t\n" + "\n".join(repr(a * U) for a in GOLDEN_ARRIVALS_U) + "\n")
    return gym.make(
        ENV_ID,
        profile=GOLDEN_PROFILE,
        workload={"kind": "trace", "path": str(path), "timestamp_column": "t"},
        max_batch_size=4,
        sla_ms=5.5 * U_MS,
        queue_capacity=2,
        decision_interval_ms=2 * U_MS,
        horizon_requests=6,
        reward_weights=WEIGHTS,
    )


def test_golden_trajectory(golden_env):
    """Hand-worked scenario: arrivals a0..a7 at 0, 1, 4, 5, 5.5, 9, 14, 20 (units u).

    1. t=0, queue [a0]: wait -> next epoch min(a1=1, tick 0+2) = 1: L = 1x1, idle E = 10 W x 1u.
    2. t=1, queue [a0,a1]: wait -> tick at 3 (a2 is at 4): L = 2x2, E = 10 W x 2u.
    3. t=3: serve 2 (a0,a1), duration 3u -> completes at 6. a2 (4) and a3 (5) join (queue
       full at capacity 2), a4 (5.5) is dropped. a0's latency 6u > SLA 5.5u: one miss,
       counted at its deadline 5.5 inside this step; a1's latency 5u meets it.
       L = 2x3 + 2 + 1 = 9, E = energy(2) = 0.3 J, M = 1, D = 1.
    4. t=6, queue [a2,a3]: action 4 is clipped to 2; duration 3u -> completes at 9, the
       instant a5 arrives: a5 joins the queue before the decision. L = 2x3, E = 0.3 J.
    5. t=9, queue [a5]: serve 1, duration 2u -> completes at 11 with an empty queue, so
       the env idles (inside the step) to a6 at 14. L = 1x2, E = 0.2 J + 10 W x 3u.
       All six summary requests (a0..a5) are now completed or dropped: truncated.
    """
    env = golden_env
    obs, info = env.reset(seed=0)
    assert info["now_s"] == 0.0 and info["queue_len"] == 1
    expected = [
        # action, now, dt, queue, L (u), E (J), M, D, clipped
        (0, 1, 1, 2, 1, 10 * U, 0, 0, False),
        (0, 3, 2, 2, 4, 20 * U, 0, 0, False),
        (2, 6, 3, 2, 9, 0.3, 1, 1, False),
        (4, 9, 3, 1, 6, 0.3, 0, 0, True),
        (1, 14, 5, 1, 2, 0.2 + 30 * U, 0, 0, False),
    ]
    total = 0.0
    for k, (a, now, dt, q, L, E, M, D, clipped) in enumerate(expected):
        obs, r, term, trunc, info = env.step(a)
        c = info["reward_components"]
        assert info["now_s"] == now * U, k
        assert info["dt_s"] == dt * U, k
        assert info["queue_len"] == q, k
        assert c["latency"] == pytest.approx(L * U, rel=1e-12), k
        assert c["energy"] == pytest.approx(E, rel=1e-12), k
        assert c["sla"] == M and c["drop"] == D, k
        assert info["clipped_action"] is clipped, k
        want_r = -(L * U + 0.5 * E + 2.0 * M + 3.0 * D)
        assert r == pytest.approx(want_r, rel=1e-12), k
        total += r
        assert not term
        assert trunc is (k == len(expected) - 1), k
    assert info["last_batch_size"] == 1 and info["last_batch_latency_s"] == 2 * U
    s = info["serving"]
    lat_u = [6, 5, 5, 4, 2]  # a0, a1, a2, a3, a5
    assert s["completed"] == 5 and s["dropped"] == 1 and s["in_system_at_end"] == 1
    assert s["elapsed_s"] == 14 * U
    assert s["latency_mean_ms"] == pytest.approx(np.mean(lat_u) * U_MS, rel=1e-12)
    assert s["latency_p50_ms"] == pytest.approx(5 * U_MS, rel=1e-12)
    assert s["latency_p95_ms"] == pytest.approx(5.8 * U_MS, rel=1e-12)
    assert s["latency_p99_ms"] == pytest.approx(5.96 * U_MS, rel=1e-12)
    assert s["sla_attainment"] == pytest.approx(4 / 6)
    assert s["latency_integral_s"] == pytest.approx(22 * U, rel=1e-12)
    energy = 30 * U + 0.3 + 0.3 + 0.2 + 30 * U
    assert s["energy_j"] == pytest.approx(energy, rel=1e-12)
    assert s["sla_misses"] == 1 and s["window_drops"] == 1
    assert s["throughput_rps"] == pytest.approx(5 / (14 * U))
    assert s["power_mean_w"] == pytest.approx(energy / (14 * U))
    assert s["energy_per_request_j"] == pytest.approx(energy / 5)
    assert s["batch_size_mean"] == pytest.approx(5 / 3)
    assert s["drop_rate"] == pytest.approx(1 / 6)
    assert s["reward_rate_per_s"] == pytest.approx(total / (14 * U), rel=1e-12)
    assert set(SERVING_KEYS) <= set(s)


def test_golden_observation(golden_env):
    env = golden_env
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(0)  # t=1, queue [a0, a1], oldest waited 1u
    assert obs[0] == pytest.approx(2 / 4)
    assert obs[1] == pytest.approx(1 / 5.5, rel=1e-6)
    assert obs[3] == 0.0 and obs[4] == 0.0
    env.step(0)  # t=3
    obs, *_ = env.step(2)  # t=6: a2 waited 2u, a3 1u, none past deadline; last batch 2
    assert obs[1] == pytest.approx(2 / 5.5, rel=1e-6)
    assert obs[3] == 0.0 and obs[4] == pytest.approx(2 / 4)


def test_wait_then_past_deadline_fraction(golden_env):
    env = golden_env
    env.reset(seed=0)
    # always wait: epochs at 1 (a1), 3 (tick), 4, 5 (a2, a3 dropped: queue [a0, a1] full)
    for _ in range(4):
        obs, _, _, _, info = env.step(0)
    assert info["now_s"] == 5 * U and info["dropped_total"] == 2
    assert obs[3] == 0.0  # a0's deadline is 5.5
    obs, _, _, _, info = env.step(0)
    assert info["now_s"] == 5.5 * U  # a dropped arrival while idle is still an epoch
    assert info["reward_components"]["drop"] == 1
    assert info["reward_components"]["sla"] == 0  # a0 at exactly its deadline: not a miss yet
    obs, _, _, _, info = env.step(0)  # tick at 7.5: a0 (deadline 5.5) and a1 (6.5) missed
    assert info["now_s"] == 7.5 * U
    assert info["reward_components"]["sla"] == 2
    assert obs[3] == 1.0


# -- random streams, seeds, common random numbers ---------------------------------------


def _arrival_times(env, policy, seed):
    env.reset(seed=seed)
    policy.reset()
    core = env.unwrapped
    info = {"queue_len": 1}
    obs = None
    for _ in range(300):
        obs, _, _, trunc, info = env.step(policy.act(obs, info))
        if trunc:
            break
    return np.array(core._buf[: core.arrival_index])


class _WaitSome:
    name = "wait-some"

    def reset(self):
        self.n = 0

    def act(self, obs, info):
        self.n += 1
        return 0 if self.n % 3 else min(info["queue_len"], 4)


def test_two_policies_see_the_same_arrivals():
    env = gym.make(ENV_ID, service="lognormal", service_cv=0.3)
    a = _arrival_times(env, GreedyPolicy(env), 5)
    b = _arrival_times(env, _WaitSome(), 5)
    n = min(len(a), len(b))
    assert n > 100
    np.testing.assert_array_equal(a[:n], b[:n])
    c = _arrival_times(env, GreedyPolicy(env), 6)
    assert not np.array_equal(a[:n], c[:n])


def test_reset_without_seed_draws_fresh_seeds():
    env = gym.make(ENV_ID)
    env.reset(seed=1)
    t1 = env.step(0)[4]["now_s"]
    env.reset()
    t2 = env.step(0)[4]["now_s"]
    assert t1 != t2


def test_lognormal_service_has_configured_cv():
    env = gym.make(ENV_ID, service="lognormal", service_cv=0.4, horizon_requests=20000)
    env.reset(seed=2)
    lat = []
    while True:
        _, _, _, trunc, info = env.step(1)
        lat.append(info["last_batch_latency_s"])
        if trunc:
            break
    lat = np.array(lat)
    expected = env.unwrapped.profile.latency_s(1)
    assert lat.mean() == pytest.approx(expected, rel=0.02)
    assert lat.std() / lat.mean() == pytest.approx(0.4, rel=0.05)


# -- property tests ---------------------------------------------------------------------

PROFILES = ["resnet50-v100", "resnet50-p4-linear", "resnet50-t4-trt"]


@st.composite
def configs(draw):
    return {
        "profile": draw(st.sampled_from(PROFILES)),
        "workload": draw(
            st.sampled_from(
                [
                    {"kind": "poisson", "load": 0.3},
                    {"kind": "poisson", "load": 1.3},
                    {"kind": "gamma", "load": 0.7, "cv": 2.5},
                    {
                        "kind": "mmpp",
                        "rates_per_s": [200.0, 3000.0],
                        "switch_rates_per_s": [5.0, 20.0],
                    },
                ]
            )
        ),
        "max_batch_size": draw(st.sampled_from([1, 4, 16, 32])),
        "sla_ms": draw(st.floats(1.0, 50.0)),
        "service": draw(st.sampled_from(["deterministic", "lognormal"])),
        "service_cv": 0.5,
        "queue_capacity": draw(st.integers(1, 64)),
        "horizon_requests": draw(st.integers(1, 150)),
        "warmup_requests": draw(st.integers(0, 30)),
        "decision_interval_ms": draw(st.sampled_from([None, 0.5, 3.0])),
    }


@given(
    cfg=configs(),
    actions=st.lists(st.integers(0, 40), min_size=1, max_size=300),
    seed=st.integers(0, 2**31),
)
def test_properties(cfg, actions, seed):
    env = gym.make(ENV_ID, **cfg)
    core = env.unwrapped
    B = cfg["max_batch_size"]
    obs, info = env.reset(seed=seed)
    lo_power = min(core.idle_power_w, min(core.executor.power_w[1:]))
    prev_now = info["now_s"]
    start = prev_now
    energy = 0.0
    ret = 0.0
    comps = np.zeros(4)
    for a in actions:
        a = a % (B + 1)
        ns_before = core.started
        obs, r, term, trunc, info = env.step(a)
        if a:  # every latency >= its batch's (possibly sampled) service time
            lat = np.array(core._comp[ns_before : core.started]) - np.array(
                core.arrivals[ns_before : core.started]
            )
            assert lat.size == info["last_batch_size"] >= 1
            assert np.all(lat >= info["last_batch_latency_s"] * (1 - 1e-12))
        assert env.observation_space.contains(obs)
        assert np.all(np.isfinite(obs)) and math.isfinite(r)
        assert info["now_s"] >= prev_now
        assert info["dt_s"] == pytest.approx(info["now_s"] - prev_now, abs=1e-12)
        prev_now = info["now_s"]
        energy += info["reward_components"]["energy"]
        ret += r
        comps += [info["reward_components"][k] for k in ("latency", "energy", "sla", "drop")]
        # conservation: arrived = completed + waiting + in service + dropped
        assert (
            core.arrival_index
            == core.completed
            + (len(core.arrivals) - core.started)
            + (core.started - core.completed)
            + core.drops
        )
        assert core.in_system == len(core.arrivals) - core.completed
        # energy >= min(idle power, lowest busy power) x elapsed time (with the rounding
        # of the clock: an elapsed time of a few 1e-15 s after 1e-5 s is known to a few
        # 1e-21 s per step; seen failing on 2.0240049e-13 J against 2.0240055e-13 J)
        assert energy >= lo_power * ((prev_now - start) * (1 - 1e-9) - 1e-15)
        if trunc:
            s = info["serving"]
            assert s["completed"] + s["dropped"] <= cfg["horizon_requests"]
            if cfg["warmup_requests"] == 0:  # the window is the whole episode
                assert s["reward_rate_per_s"] * s["elapsed_s"] == pytest.approx(
                    ret, rel=1e-9, abs=1e-12
                )
                np.testing.assert_allclose(
                    [s["latency_integral_s"], s["energy_j"], s["sla_misses"], s["window_drops"]],
                    comps,
                    rtol=1e-9,
                    atol=1e-12,
                )
            obs, info = env.reset()
            prev_now = start = info["now_s"]
            energy = ret = 0.0
            comps[:] = 0.0


@given(cfg=configs())
def test_always_wait_ends(cfg):
    cfg = {**cfg, "horizon_requests": 50}
    env = gym.make(ENV_ID, **cfg)
    env.reset(seed=0)
    for _ in range(200_000):
        *_, trunc, info = env.step(0)
        if trunc:
            break
    assert trunc, "an always-wait episode must end (finite default horizon_s)"
    assert info["now_s"] >= env.unwrapped.horizon_s
    assert info["serving"]["completed"] == 0


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_batch_size": 0}, "max_batch_size=0"),
        ({"max_batch_size": 2.5}, "max_batch_size=2.5"),
        ({"max_batch_size": 4096}, "max_batch_size"),
        ({"sla_ms": -1.0}, "sla_ms=-1.0"),
        ({"sla_ms": float("nan")}, "sla_ms=nan"),
        ({"queue_capacity": 0}, "queue_capacity=0"),
        ({"horizon_requests": 0}, "horizon_requests=0"),
        ({"warmup_requests": -1}, "warmup_requests=-1"),
        ({"horizon_s": 0.0}, "horizon_s=0.0"),
        ({"decision_interval_ms": -2.0}, "decision_interval_ms=-2.0"),
        ({"service": "weibull"}, "service='weibull'"),
        ({"service": "lognormal"}, "service_cv"),
        ({"service_cv": -0.1, "service": "lognormal"}, "service_cv=-0.1"),
        ({"reward_weights": {"latency": -1.0}}, "reward_weights.latency=-1.0"),
        ({"reward_weights": {"speed": 1.0}}, "speed"),
        ({"idle_power_w": float("inf")}, "idle_power_w=inf"),
        ({"render_mode": "video"}, "render_mode='video'"),
        ({"profile": "no-such-profile"}, "no-such-profile"),
        ({"workload": {"kind": "poisson", "rate_per_s": -3.0}}, "rate_per_s"),
        ({"workload": {"kind": "uniform"}}, "uniform"),
    ],
)
@pytest.mark.filterwarnings("ignore:.*render_mode")
def test_bad_config(kwargs, needle):
    with pytest.raises((ValueError, FileNotFoundError)) as exc:
        gym.make(ENV_ID, **kwargs)
    assert needle in str(exc.value)


@pytest.mark.parametrize("action", [-1, 33, 1000, 2.5, float("nan"), "3", [1, 2]])
def test_bad_action(action):
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    with pytest.raises(ValueError) as exc:
        env.step(action)
    assert "action=" in str(exc.value)


def test_numpy_integer_actions_accepted():
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    env.step(np.int64(1))
    env.step(np.array(0))


def test_drop_weight_warning():
    with pytest.warns(UserWarning, match="dropping pays"):
        gym.make(ENV_ID, reward_weights={"drop": 0.001})


# -- queueing theory (Inoue, arXiv 1912.06322) ------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("gpu", "alpha_ms", "tau0_ms", "rho", "n_requests"),
    [
        ("V100", 0.1438, 1.8874, 0.5, 300_000),
        ("V100", 0.1438, 1.8874, 0.9, 2_000_000),
        ("P4", 0.5833, 1.4284, 0.5, 300_000),
        ("P4", 0.5833, 1.4284, 0.9, 2_000_000),
    ],
)
def test_mean_latency_matches_inoue(gpu, alpha_ms, tau0_ms, rho, n_requests):
    """Greedy serve-all with a linear deterministic profile is Inoue's batch queue."""
    rate = rho / (alpha_ms / 1000.0)
    profile = {
        "name": f"{gpu}-fit",
        "model": "resnet50",
        "device": gpu,
        "source": "Inoue Table 1 least-squares fit (data/README.md)",
        "kind": "linear",
        "alpha_ms": alpha_ms,
        "tau0_ms": tau0_ms,
        "beta_j": 0.04,
        "c0_j": 0.1,
        "idle_power_w": 30.0,
    }
    env = gym.make(
        ENV_ID,
        profile=profile,
        workload={"kind": "poisson", "rate_per_s": rate},
        max_batch_size=1024,
        queue_capacity=100_000,
        horizon_requests=n_requests,
    )
    res = evaluate(GreedyPolicy(env), env, n_episodes=1, seed=123)
    assert res.mean("dropped") == 0
    measured_ms = res.mean("latency_mean_ms")
    exact = inoue_mean_latency_s(rate, alpha_ms / 1000.0, tau0_ms / 1000.0)
    assert measured_ms == pytest.approx(exact.mean_latency_s * 1000.0, rel=0.02)
    bound = inoue_bound_s(rate, alpha_ms / 1000.0, tau0_ms / 1000.0)
    assert exact.mean_latency_s <= bound * (1 + 1e-9)
    if gpu == "V100" and rho == 0.9:
        assert exact.mean_latency_s == pytest.approx(bound, rel=1e-9)


def test_evaluate_summary_and_paired_difference():
    env = gym.make(ENV_ID, horizon_requests=300)
    g = evaluate(GreedyPolicy(env), env, n_episodes=4, seed=10)
    w = evaluate(_WaitSome(), env, n_episodes=4, seed=10)
    assert g.seeds == w.seeds == [10, 11, 12, 13]
    m, h = g.summary()["latency_mean_ms"]
    assert m > 0 and h > 0
    from batch_env import paired_difference

    d, hw = paired_difference(w, g, "latency_mean_ms")
    assert d == pytest.approx(w.mean("latency_mean_ms") - g.mean("latency_mean_ms"))
    assert math.isfinite(hw)
    with pytest.raises(ValueError, match="n_episodes=0"):
        evaluate(GreedyPolicy(env), env, n_episodes=0)


@pytest.mark.parametrize("n_records", [200, 201])
def test_finite_trace_ends_when_summary_requests_are_served(tmp_path, n_records):
    path = tmp_path / "short.csv"
    times = np.cumsum(np.random.default_rng(0).exponential(1 / 300.0, n_records))
    path.write_text("t\n" + "\n".join(repr(float(t)) for t in times) + "\n")
    env = gym.make(
        ENV_ID,
        workload={"kind": "trace", "path": str(path), "timestamp_column": "t", "loop": False},
        max_batch_size=8,
        horizon_requests=200,
    )
    res = evaluate(GreedyPolicy(env), env, n_episodes=1, seed=0)
    ep = res.episodes[0]
    assert ep["completed"] == 200
    # the episode ends right after the last summary request, not at the 10x horizon
    assert ep["elapsed_s"] < times[-1] + 0.05
    assert ep["throughput_rps"] > 200


def test_window_never_started_gives_nan_rates():
    env = gym.make(ENV_ID, warmup_requests=5000, horizon_requests=10, horizon_s=0.05)
    res = evaluate(GreedyPolicy(env), env, n_episodes=1, seed=0)
    ep = res.episodes[0]
    assert ep["completed"] == 0
    assert math.isnan(ep["reward_rate_per_s"]) and math.isnan(ep["power_mean_w"])
