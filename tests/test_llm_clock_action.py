"""The GPU's SM clock as a part of LLMBatching-v2's action (``clock_grid``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import baselines
import batch_env  # noqa: F401 (registers the ids)
from batch_env.llm.actions import ActionCodec

PROFILE = "llama-3.1-8b-h100"  # H100-SXM: 1980 MHz by default
V2 = "batch_env/LLMBatching-v2"


def _episode(env, act, seed=3):
    """Play ``act(env, obs, info)`` for one episode; the summary, the steps, the reward."""
    obs, info = env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        obs, r, term, trunc, info = env.step(act(env.unwrapped, obs, info))
        total += r
        steps += 1
        if term or trunc:
            return info["serving"], steps, total


def test_codec_with_clocks_round_trips_and_names_bad_clocks():
    c = ActionCodec((8, 64), (256, 512), ("fcfs", "edf"), (990.0, 1410.0, 1980.0))
    assert c.n == 24 and c.n_clocks == 3
    assert {c.parts(a) for a in range(c.n)} == {
        (cap, b, o, f)
        for cap in (8, 64)
        for b in (256, 512)
        for o in ("fcfs", "edf")
        for f in (990.0, 1410.0, 1980.0)
    }
    for a in range(c.n):
        assert c.action(*c.parts(a)) == a
    # the clock is the outermost part; the default clock is the highest
    assert c.action(cap=64, budget=256, order="edf", clock=990.0) == (1 * 2 + 0) * 2 + 1
    assert c.action(cap=8) == c.action(cap=8, clock=1980.0) == 2 * 8 + (0 * 2 + 1) * 2 + 0
    with pytest.raises(ValueError, match=r"clock=1000 is not one of the env's SM clocks"):
        c.action(cap=8, clock=1000)
    with pytest.raises(ValueError, match=r"clock_index=3 is out of range"):
        c.encode(0, 0, 0, 3)
    # without clocks: one index, the three-part encoding, clock None
    plain = ActionCodec((8, 64), (256,), ("fcfs",))
    assert plain.n == 2 and plain.parts(1).clock is None and plain.encode(1) == 1
    with pytest.raises(ValueError, match=r"clock_grid=None"):
        plain.action(cap=8, clock=990.0)


def test_a_constant_clock_from_the_grid_is_the_fixed_clock():
    """Playing one clock of the grid throughout is the env made at that clock (its
    summary to the bit), though the grid adds decision epochs; the grid's default clock
    alone is the env without a grid, epochs included."""

    def at(clock):
        return lambda u, obs, info: u.action_of(u.grid[-1], clock=clock)

    grid = gym.make(V2, profile=PROFILE, clock_grid=[990, 1980], horizon_requests=200)
    fixed = gym.make(V2, profile=PROFILE, clock_mhz=990, horizon_requests=200)
    s_grid, n_grid, r_grid = _episode(grid, at(990.0))
    s_fixed, n_fixed, r_fixed = _episode(fixed, at(None))
    assert s_grid == s_fixed
    assert r_grid == pytest.approx(r_fixed, rel=1e-9)
    assert n_grid > n_fixed  # the clock's own epochs
    # the default clock, without a grid and with a grid of only it
    plain = gym.make(V2, profile=PROFILE, horizon_requests=200)
    only = gym.make(V2, profile=PROFILE, clock_grid=[1980], horizon_requests=200)
    s_plain, n_plain, _ = _episode(plain, at(None))
    s_only, n_only, _ = _episode(only, at(1980.0))
    assert s_plain == s_only and n_plain == n_only
    # and the default clock is faster, and dearer in energy, than 990 MHz
    assert s_plain["energy_j"] > s_fixed["energy_j"]


def test_clock_epochs_come_where_prompt_work_appears_or_ends():
    """With two clocks, consecutive epochs either differ in prompt work pending or are
    v2's own epochs (where two settings would schedule differently); a rule on the phase
    then runs prefills fast and decodes slow: less energy than the highest clock, a
    shorter time to first token than the lowest."""
    env = gym.make(V2, profile=PROFILE, clock_grid=[990, 1980], grid=[256], horizon_requests=300)
    u = env.unwrapped
    phases = []

    def rule(u, obs, info):
        phase = u.server.prefill_phase()
        phases.append(phase)
        return u.action_of(256, clock=1980.0 if phase else 990.0)

    s_rule, n_rule, _ = _episode(env, rule)
    # one setting (cap 256, one budget, FCFS): every epoch is the clock's, so the phase
    # alternates from epoch to epoch (an episode starts empty: the first epoch has work)
    assert phases[0] and all(a != b for a, b in zip(phases, phases[1:], strict=False))
    assert obs_clock_feature(u) in (990.0 / 1980.0, 1.0)
    s_hi, _, _ = _episode(env, lambda u, o, i: u.action_of(256, clock=1980.0))
    s_lo, _, _ = _episode(env, lambda u, o, i: u.action_of(256, clock=990.0))
    assert s_rule["energy_j"] < s_hi["energy_j"]
    assert s_rule["ttft_mean_ms"] < s_lo["ttft_mean_ms"]


def obs_clock_feature(u) -> float:
    """The observation's last feature: the clock in force / the grid's highest."""
    return float(np.float32(u._obs()[-1]))


def test_clock_in_info_observation_and_greedy_runs_at_the_default():
    env = gym.make(V2, profile=PROFILE, clock_grid=[990, 1410, 1980], horizon_requests=40)
    u = env.unwrapped
    assert u.observation_space.shape == (14,)  # v2's 13 features and the clock
    obs, info = env.reset(seed=0)
    assert info["clock_mhz"] == 1980.0 and obs[-1] == 1.0
    obs, _, _, _, info = env.step(u.action_of(u.grid[-1], clock=1410.0))
    assert info["clock_mhz"] == 1410.0 and obs[-1] == pytest.approx(1410 / 1980)
    assert u.action_parts(u.action_of(u.grid[-1], clock=1410.0)).clock == 1410.0
    greedy = baselines.make("greedy", env)
    assert u.action_parts(greedy.act(obs, info)).clock == 1980.0
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clock_grid": [990, 5000]}, r"clock_grid\[1\]=5000: .*clock"),
        ({"clock_grid": [1410, 990]}, r"clock_grid=\[1410, 990\] is invalid: .*increasing"),
        ({"clock_grid": "fast"}, r"clock_grid='fast' is invalid"),
        ({"clock_grid": [float("nan")]}, r"clock_grid\[0\]"),
        ({"clock_grid": [990, 1980], "clock_mhz": 1410}, r"clock_grid=.* and clock_mhz=1410"),
        ({"clock_grid": [990, 1980], "executor": "torch"}, r"executor='profile'"),
    ],
)
def test_bad_clock_grids_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make(V2, profile=PROFILE, **kwargs)


def test_a_realizable_copy_keeps_its_own_clock():
    env = gym.make(V2, profile=PROFILE, clock_grid=[990, 1980], horizon_requests=100)
    u = env.unwrapped
    env.reset(seed=0)
    for _ in range(20):
        env.step(u.action_of(u.grid[-1], clock=990.0))
    copy = u.fork(np.random.default_rng(0))
    assert copy.server.sm_clock.profiles is u.server.sm_clock.profiles  # shared, not copied
    copy.step(copy.action_of(copy.grid[-1], clock=1980.0))
    assert copy.server.sm_clock.mhz == 1980.0 and u.server.sm_clock.mhz == 990.0
    assert u.server.executor.profile is u.server.sm_clock.profiles[0]


def test_clock_queue_sets_the_clock_by_the_queue_and_static_budget_holds_one():
    env = gym.make(
        V2,
        profile=PROFILE,
        clock_grid=[990, 1410, 1980],
        budget_grid=[512, 2048],
        horizon_requests=100,
        workload={"kind": "poisson", "rate_per_s": 60.0},
    )
    u = env.unwrapped
    pol = baselines.make("clock-queue", env, threshold=2, budget=512)
    assert (pol.low_clock, pol.high_clock) == (990.0, 1980.0)  # the grid's ends by default
    for waiting, clock in ((0, 990.0), (2, 990.0), (3, 1980.0), (40, 1980.0)):
        part = u.action_parts(pol.act(None, {"waiting": waiting}))
        assert (part.clock, part.budget, part.cap, part.order) == (clock, 512, 256, "fcfs")
    # on an episode it plays both clocks, and the info's clock is the one it chose
    obs, info = env.reset(seed=0)
    seen = set()
    while True:
        a = pol.act(obs, info)
        obs, _, term, trunc, info = env.step(a)
        assert info["clock_mhz"] == u.action_parts(a).clock
        seen.add(info["clock_mhz"])
        if term or trunc:
            break
    assert seen == {990.0, 1980.0}
    fixed = baselines.make("static-budget", env, budget=2048, clock=1410.0)
    assert u.action_parts(fixed.act(None, {})) == (256, 2048, "fcfs", 1410.0)
    default = baselines.make("static-budget", env, budget=512)
    assert u.action_parts(default.act(None, {})).clock == 1980.0
    with pytest.raises(ValueError, match=r"low_clock=1000 is not one of the env's SM clocks"):
        baselines.make("clock-queue", env, low_clock=1000, budget=512)
    with pytest.raises(ValueError, match=r"threshold=-1"):
        baselines.make("clock-queue", env, threshold=-1, budget=512)
    with pytest.raises(ValueError, match=r"clock=1000 is not one of the env's SM clocks"):
        baselines.make("static-budget", env, clock=1000, budget=512)
    plain = gym.make(V2, profile=PROFILE, max_num_batched_tokens=8192)
    with pytest.raises(ValueError, match="make the env .* with a clock_grid"):
        baselines.make("clock-queue", plain)


def test_a_clock_change_takes_effect_after_its_latency_and_the_env_says_so():
    """``clock_latency_ms``: the clock asked for is pending (info and the observation say
    which, info how long is left) and the iterations before the latency has passed run
    at the old clock; asking for the clock in force cancels a pending change."""
    env = gym.make(
        V2, profile=PROFILE, clock_grid=[990, 1980], clock_latency_ms=50.0, horizon_requests=200
    )
    u = env.unwrapped
    assert u.observation_space.shape == (15,)  # the clock in force and the clock asked for
    obs, info = env.reset(seed=0)
    assert info["clock_mhz"] == 1980.0 and info["clock_change_in_ms"] == 0.0
    t0 = u.server.now
    obs, _, _, _, info = env.step(u.action_of(u.grid[-1], clock=990.0))
    left = info["clock_change_in_ms"]
    assert info["clock_mhz"] == 1980.0 and info["clock_requested_mhz"] == 990.0
    assert left == pytest.approx(50.0 - 1e3 * (u.server.now - t0)) and 0 < left <= 50.0
    assert obs[-2] == 1.0 and obs[-1] == pytest.approx(990 / 1980)
    # asking for the clock in force cancels the change
    obs, _, _, _, info = env.step(u.action_of(u.grid[-1], clock=1980.0))
    assert info["clock_change_in_ms"] == 0.0 and info["clock_requested_mhz"] == 1980.0
    assert u.server.sm_clock.pending == -1
    # held long enough, the change lands: from then on the iterations run at 990 MHz
    seen = []
    for _ in range(200):
        obs, _, term, trunc, info = env.step(u.action_of(u.grid[-1], clock=990.0))
        seen.append((u.server.now, info["clock_mhz"]))
        if info["clock_mhz"] == 990.0 or term or trunc:
            break
    assert seen[-1][1] == 990.0 and u.server.executor.profile is u.server.sm_clock.profiles[0]
    assert info["clock_change_in_ms"] == 0.0 and obs[-2] == obs[-1]


def test_clock_latency_zero_is_the_immediate_clock_and_stretches_stop_at_a_change():
    """A latency of 0 is the env without one (to the bit); with one, the decode-only
    stretches end where a pending change lands, so running every iteration through the
    scheduler gives the same episode."""

    def alternate(u, obs, info):
        return u.action_of(u.grid[-1], clock=(1980.0, 990.0)[u.server.sm_clock.index == 1])

    kw = dict(
        profile=PROFILE,
        clock_grid=[990, 1980],
        horizon_requests=150,
        workload={"kind": "poisson", "rate_per_s": 10.0},
    )
    plain = _episode(gym.make(V2, **kw), alternate)
    zero = _episode(gym.make(V2, clock_latency_ms=0.0, **kw), alternate)
    assert plain == zero
    runs = gym.make(V2, clock_latency_ms=30.0, **kw)
    stepwise = gym.make(V2, clock_latency_ms=30.0, **kw)
    stepwise.unwrapped.server.decode_runs = False
    a, b = _episode(runs, alternate), _episode(stepwise, alternate)
    assert a[0] == b[0] and a[2] == pytest.approx(b[2], rel=1e-12)
    assert a[0] != plain[0]  # the latency changes the episode


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clock_grid": [990, 1980], "clock_latency_ms": -1}, r"clock_latency_ms"),
        ({"clock_grid": [990, 1980], "clock_latency_ms": float("nan")}, r"clock_latency_ms"),
        ({"clock_latency_ms": 10.0}, r"clock_latency_ms=10.0 is invalid without a clock_grid"),
    ],
)
def test_bad_clock_latencies_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make(V2, profile=PROFILE, **kwargs)


def test_envs_of_one_problem_share_their_clocks_profiles():
    """The profiles at each clock are built once per profile content and grid (an env's
    construction's most: about 0.1 s) and shared, as a planner's copies share them;
    another grid or another profile builds its own."""
    a = gym.make(V2, profile=PROFILE, clock_grid=[990, 1980]).unwrapped.server.sm_clock
    b = gym.make(V2, profile=PROFILE, clock_grid=[990, 1980]).unwrapped.server.sm_clock
    c = gym.make(V2, profile=PROFILE, clock_grid=[990, 1410, 1980]).unwrapped.server.sm_clock
    d = gym.make(V2, profile="llama-3.1-8b-h200", clock_grid=[990, 1980]).unwrapped.server.sm_clock
    assert a.profiles is b.profiles
    assert c.profiles is not a.profiles and d.profiles is not a.profiles
    assert [p.clock_mhz for p in c.profiles] == [990.0, 1410.0, 1980.0]
    assert d.profiles[0].raw["arch"]["gpu"]["name"] == "h200"
