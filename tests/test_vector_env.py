"""The NumPy-native vector twin of DynamicBatching-v0 (DynamicBatchingVectorEnv).

What holds (docs/vector_envs.md): lane i after ``reset(seed=s)`` is the scalar env after
``reset(seed=s + i)``, step for step: identical observations, actions masks, truncation and
summary counts, rewards and float summaries equal to ~1e-9 relative (the vector env sums
arrival times by prefix sums where the scalar env uses ``math.fsum``).
"""

from __future__ import annotations

import math
import re
import tracemalloc

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from helpers import check_cached_state, close, lockstep

import batch_env  # noqa: F401
from batch_env.envs.dynamic_batching_vector import DynamicBatchingVectorEnv

ENV_ID = "batch_env/DynamicBatching-v0"
SMALL = {"horizon_requests": 150}


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"service": "lognormal", "service_cv": 0.4},
        {"decision_interval_ms": 0.3},
        {"warmup_requests": 40, "horizon_requests": 100},
        {"queue_capacity": 6, "workload": {"kind": "poisson", "load": 1.6}, "warmup_requests": 15},
        {
            "workload": {
                "kind": "mmpp",
                "load": 0.7,
                "rates_per_s": [100.0, 600.0],
                "switch_rates_per_s": [[0.0, 20.0], [20.0, 0.0]],
            }
        },
        {"workload": {"kind": "gamma", "load": 0.8, "cv": 3.0}, "sla_ms": 5.0, "max_batch_size": 8},
        {"warmup_requests": 5000, "horizon_requests": 10, "horizon_s": 0.05},  # window never starts
    ],
    ids=["default", "lognormal", "ticks", "warmup", "drops", "mmpp", "gamma", "no-window"],
)
def test_lanes_match_the_scalar_env_step_for_step(kwargs):
    episodes = lockstep({**SMALL, **kwargs})
    assert episodes >= 3


# A time unit exact in binary (about 0.244 ms). Traces in whole units and the EXACT
# profile (a batch of b takes (2 + b) units) make every event time exact, so completions
# and ticks fall exactly on arrivals.
U = 2.0**-12
U_MS = U * 1000.0
EXACT = {
    "name": "exact",
    "model": "m",
    "device": "d",
    "source": "test",
    "kind": "linear",
    "alpha_ms": U_MS,
    "tau0_ms": 2 * U_MS,
    "beta_j": 0.01,
    "c0_j": 0.1,
    "idle_power_w": 10.0,
}


def _trace(tmp_path, name, **fields):
    """A trace workload (CSV in ``tmp_path``):

    * ``exp``: 500 exponential gaps (no ties);
    * ``repro``: the issue's trace, equal timestamps in pairs;
    * ``runs``: 9 records in units, runs of 3 equal timestamps at the first arrival and
      2 at the end (so ties on both sides of the loop seam); ``rate_scale=0.5`` puts the
      arrivals on even units;
    * ``shuffled``: 257 records whose 256 gaps are 0 (half of them), 2, 4 and 8 units,
      shuffled but for 3 zeros first and 2 last (runs of 4 and 3 equal timestamps at the
      start and the end); the loop period (span * 257 / 256) is a whole number of units.
    """
    if name == "exp":
        times = [
            repr(float(t)) for t in np.cumsum(np.random.default_rng(3).exponential(1 / 2000.0, 500))
        ]
    elif name == "repro":
        times = ["0.000", "0.010", "0.010", "0.020", "0.020", "0.030"]
    else:
        if name == "runs":
            units = np.array([0, 0, 0, 1, 3, 3, 5, 8, 8])
            fields = {"rate_scale": 0.5, **fields}
        else:
            inner = np.random.default_rng(5).permutation([0] * 123 + [2] * 64 + [4] * 32 + [8] * 32)
            gaps = np.concatenate(([0, 0, 0], inner, [0, 0]))
            units = np.concatenate(([0], np.cumsum(gaps)))
        times = [repr(float(u * U)) for u in units]
    path = tmp_path / f"{name}.csv"
    path.write_text("t\n" + "\n".join(times) + "\n")
    return {"kind": "trace", "path": str(path), "timestamp_column": "t", **fields}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trace", "kwargs", "policy"),
    [
        ("repro", {}, "greedy"),
        ("repro", {}, "random"),
        ("runs", {"profile": EXACT}, "greedy"),
        ("runs", {"profile": EXACT}, "patient"),
        ("runs", {"profile": EXACT, "decision_interval_ms": 2 * U_MS}, "random"),
        ("shuffled", {"profile": EXACT}, "greedy"),
        ("shuffled", {"profile": EXACT}, "random"),
        ("shuffled", {"profile": EXACT, "decision_interval_ms": 2 * U_MS}, "patient"),
        ("shuffled", {"profile": EXACT, "warmup_requests": 1}, "greedy"),
        ("shuffled", {"profile": EXACT, "warmup_requests": 2, "queue_capacity": 2}, "random"),
        ("shuffled", {"profile": EXACT, "queue_capacity": 2, "horizon_requests": 2}, "greedy"),
    ],
    ids=[
        "repro-greedy",
        "repro-random",
        "runs-greedy",
        "runs-patient",
        "runs-ticks-random",
        "shuffled-greedy",
        "shuffled-random",
        "shuffled-ticks-patient",
        "warmup-1-greedy",
        "warmup-2-drops-random",
        "tiny-horizon-greedy",
    ],
)
def test_lanes_match_on_traces_with_equal_timestamps(tmp_path, trace, kwargs, policy):
    """Equal timestamps all join the queue before the decision, wherever they fall: at
    the first arrival (the reset), after a batch that empties the queue, after waits and
    ticks (which fall on arrivals here), when a batch completes at an arrival, at the loop
    seam, with the summary marks and drops among them."""
    wl = _trace(tmp_path, trace)
    assert lockstep({**SMALL, **kwargs, "workload": wl}, policy=policy) >= 3


def test_lanes_match_on_traces_with_equal_timestamps_and_same_step_autoreset(tmp_path):
    wl = _trace(tmp_path, "shuffled")
    assert (
        lockstep(
            {**SMALL, "profile": EXACT, "workload": wl},
            policy="greedy",
            mode=AutoresetMode.SAME_STEP,
        )
        >= 3
    )


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["greedy", "patient", "random"])
@pytest.mark.parametrize(
    "workload", ["poisson", "gamma", "mmpp", "trace", "trace-offset", "ties-offset"]
)
def test_every_workload_kind_under_several_policies(tmp_path, workload, policy):
    """Every workload kind (the vector env refuses traces with ``loop=False``), under
    greedy, patient and random policies; ``ties-offset`` starts each episode at a random
    position of a trace with equal timestamps (often inside a run of them)."""
    workloads = {
        "poisson": lambda: {"kind": "poisson", "load": 0.7},
        "gamma": lambda: {"kind": "gamma", "load": 0.7, "cv": 2.0},
        "mmpp": lambda: {
            "kind": "mmpp",
            "load": 0.7,
            "rates_per_s": [100.0, 600.0],
            "switch_rates_per_s": [[0.0, 20.0], [20.0, 0.0]],
        },
        "trace": lambda: _trace(tmp_path, "exp"),
        "trace-offset": lambda: _trace(tmp_path, "exp", random_offset=True),
        "ties-offset": lambda: _trace(tmp_path, "shuffled", random_offset=True),
    }
    assert lockstep({**SMALL, "workload": workloads[workload]()}, policy=policy) >= 3


def test_lanes_match_when_latencies_are_written_mid_episode():
    """Latencies move out of the batch log before the summary: when a lane's log fills
    (batches of at most 2, so over 256 batches per episode) and when served arrivals
    leave a buffer that refills (an episode longer than the buffer's first fill)."""
    assert lockstep({"horizon_requests": 700, "max_batch_size": 2}, steps=2500) >= 3
    assert lockstep({"horizon_requests": 4500}, n_envs=2, steps=2500) >= 2


def test_long_queues_grow_the_buffer():
    """An always-wait lane fills a queue longer than the initial buffer allows: it grows."""
    kwargs = {"horizon_requests": 4000, "queue_capacity": 3500}
    venv = DynamicBatchingVectorEnv(num_envs=2, **kwargs)
    env = gym.make(ENV_ID, **kwargs)
    venv.reset(seed=1)
    env.reset(seed=1)
    for _ in range(4200):
        vo, vr, _, _, _ = venv.step(np.zeros(2, dtype=np.int64))
        so, sr, _, _, _ = env.step(0)
        assert np.array_equal(vo[0], so) and close(sr, float(vr[0]))
    assert venv._W > 4096  # the buffer grew
    check_cached_state(venv)
    for _ in range(400):
        vo, vr, _, vt, vi = venv.step(np.full(2, 32))
        check_cached_state(venv)
        so, sr, _, st, si = env.step(32)
        assert np.array_equal(vo[0], so) and close(sr, float(vr[0])) and st == vt[0]
        if st:
            assert si["serving"]["dropped"] == vi["serving"]["dropped"][0] > 0
            assert close(si["serving"]["latency_p99_ms"], float(vi["serving"]["latency_p99_ms"][0]))
            break
    assert st


def test_same_step_autoreset_gives_final_obs_and_summary():
    n = 2
    venv = gym.make_vec(ENV_ID, num_envs=n, autoreset_mode=AutoresetMode.SAME_STEP, **SMALL)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    envs = [gym.make(ENV_ID, **SMALL) for _ in range(n)]
    venv.reset(seed=3)
    for i, e in enumerate(envs):
        e.reset(seed=3 + i)
    ended = 0
    for _ in range(600):
        acts = np.array([int(np.flatnonzero(m)[-1]) for m in venv.action_masks()])
        vobs, _, _, vtrunc, vinfo = venv.step(acts)
        for i, e in enumerate(envs):
            so, _, _, strunc, sinfo = e.step(int(acts[i]))
            assert strunc == bool(vtrunc[i])
            if strunc:
                ended += 1
                assert vinfo["_final_obs"][i] and np.array_equal(vinfo["final_obs"][i], so)
                assert vinfo["final_info"]["_serving"][i]
                assert (
                    vinfo["final_info"]["serving"]["completed"][i] == sinfo["serving"]["completed"]
                )
                so, _ = e.reset()
            assert np.array_equal(vobs[i], so)
        assert "serving" not in vinfo  # SAME_STEP: only in final_info, as SyncVectorEnv
    assert ended >= 2


def test_same_step_info_layout_matches_sync_vector_env():
    kw = {**SMALL, "autoreset_mode": AutoresetMode.SAME_STEP}
    native = gym.make_vec(ENV_ID, num_envs=2, **kw)
    sync = gym.make_vec(
        ENV_ID,
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        **SMALL,
    )
    native.reset(seed=0)
    sync.reset(seed=0)
    for _ in range(400):
        a = np.array([int(np.flatnonzero(m)[-1]) for m in native.action_masks()])
        o1, _, _, t1, i1 = native.step(a)
        o2, _, _, t2, i2 = sync.step(a)
        assert np.array_equal(o1, o2) and np.array_equal(t1, t2)
        if t1.any():
            for key in ("final_obs", "_final_obs", "_final_info"):
                assert key in i1 and key in i2
            assert np.array_equal(i1["final_info"]["_serving"], i2["final_info"]["_serving"])
            return
    pytest.fail("no episode ended")


def test_disabled_autoreset_with_reset_mask():
    venv = DynamicBatchingVectorEnv(num_envs=3, autoreset_mode=AutoresetMode.DISABLED, **SMALL)
    before, _ = venv.reset(seed=5)
    for _ in range(20):
        stepped, _, _, _, _ = venv.step(np.ones(3, dtype=np.int64))
    obs, _ = venv.reset(options={"reset_mask": np.array([False, True, False])})
    assert np.array_equal(obs[[0, 2]], stepped[[0, 2]])  # the other lanes are untouched
    env = gym.make(ENV_ID, **SMALL)
    env.reset(seed=6)
    assert np.array_equal(obs[1], env.reset()[0])  # the lane's own np_random draws the seed
    with pytest.raises(ValueError, match="reset_mask"):
        venv.reset(options={"reset_mask": np.array([1, 0, 1])})


def test_seeds_drawn_ahead_give_the_scalar_env_episodes():
    """Each lane's next seed is drawn ahead (``_draw_ahead``); the episodes must still be
    the scalar env's: seedless resets after seeded ones, an explicit reseed of some lanes
    (which voids what was drawn ahead), and masked resets. Trajectories are compared, as
    first observations alone hardly depend on the seed."""
    kw = {"horizon_requests": 2000, "service": "lognormal", "service_cv": 0.3}  # no lane ends
    venv = DynamicBatchingVectorEnv(num_envs=3, autoreset_mode=AutoresetMode.DISABLED, **kw)
    envs = [gym.make(ENV_ID, **kw) for _ in range(3)]

    def run(lanes):  # a few greedy steps on every lane; compare the reset lanes
        for _ in range(12):
            acts = venv.action_masks().sum(axis=1) - 1
            vobs, vrew, _, vtrunc, _ = venv.step(acts)
            assert not vtrunc.any()
            for n in lanes:
                so, sr, _, _, _ = envs[n].step(int(acts[n]))
                assert np.array_equal(so, vobs[n]) and close(sr, float(vrew[n]))

    venv.reset(seed=3)
    for n, e in enumerate(envs):
        e.reset(seed=3 + n)
    run([0, 1, 2])
    for _ in range(2):  # seedless: the seeds drawn ahead
        venv.reset()
        for e in envs:
            e.reset()
        run([0, 1, 2])
    mask = np.array([True, False, True])
    venv.reset(seed=[11, None, None], options={"reset_mask": mask})  # lane 0 reseeded
    envs[0].reset(seed=11)
    envs[2].reset()
    run([0, 2])
    venv.reset(options={"reset_mask": np.array([True, True, False])})
    envs[0].reset()  # from the new np_random of seed 11
    envs[1].reset()
    run([0, 1])


def test_seeds_per_lane_and_lists():
    venv = DynamicBatchingVectorEnv(num_envs=3, **SMALL)
    obs_int, _ = venv.reset(seed=20)
    obs_list, _ = venv.reset(seed=[20, 21, 22])
    assert np.array_equal(obs_int, obs_list)
    a, _ = venv.reset(seed=None)
    assert a.shape == (3, 5)
    with pytest.raises(ValueError, match="one per lane"):
        venv.reset(seed=[1, 2])


def test_full_info_matches_the_scalar_info():
    venv = DynamicBatchingVectorEnv(num_envs=2, full_info=True, **SMALL)
    env = gym.make(ENV_ID, **SMALL)
    venv.reset(seed=9)
    env.reset(seed=9)
    for _ in range(50):
        _, _, _, _, vinfo = venv.step(np.array([3, 0]))
        _, _, _, _, sinfo = env.step(3)
        lane = venv._lane_info(vinfo, 0)
        assert lane["energy_source"] == sinfo["energy_source"] == "profile"
        for key in (
            "queue_len",
            "now_s",
            "dt_s",
            "last_batch_size",
            "clipped_action",
            "dropped_total",
            "arrived_total",
        ):
            assert close(float(lane[key]), float(sinfo[key])), key
        assert np.array_equal(lane["action_mask"], sinfo["action_mask"])
        for key, value in sinfo["reward_components"].items():
            assert close(value, float(lane["reward_components"][key]))


def test_lane_metrics_agree_in_distribution_with_independent_scalar_runs():
    """Different seeds (independent runs): mean latency per episode agrees within 4 SEs."""
    kw = {"horizon_requests": 300, "workload": {"kind": "poisson", "load": 0.7}}
    n = 16
    venv = DynamicBatchingVectorEnv(num_envs=n, **kw)
    venv.reset(seed=1000)
    vec_lat: list[float] = []
    while len(vec_lat) < n:
        acts = np.array([int(np.flatnonzero(m)[-1]) for m in venv.action_masks()])
        _, _, _, trunc, info = venv.step(acts)
        vec_lat += [info["serving"]["latency_mean_ms"][i] for i in np.flatnonzero(trunc)]
    env = gym.make(ENV_ID, **kw)
    sc_lat = []
    for s in range(n):
        _, info = env.reset(seed=5000 + s)
        trunc = False
        while not trunc:
            _, _, _, trunc, info = env.step(int(np.flatnonzero(info["action_mask"])[-1]))
        sc_lat.append(info["serving"]["latency_mean_ms"])
    a, b = np.array(vec_lat[:n]), np.array(sc_lat)
    se = math.sqrt(a.var(ddof=1) / n + b.var(ddof=1) / n)
    assert abs(a.mean() - b.mean()) < 4 * se


def test_step_and_action_masks_before_reset_raise_reset_needed():
    venv = DynamicBatchingVectorEnv(num_envs=2, **SMALL)
    with pytest.raises(
        gym.error.ResetNeeded, match=r"DynamicBatchingVectorEnv: call reset\(\) before action_masks"
    ):
        venv.action_masks()
    with pytest.raises(
        gym.error.ResetNeeded, match=r"DynamicBatchingVectorEnv: call reset\(\) before step"
    ):
        venv.step(np.zeros(2, dtype=np.int64))
    venv.reset(seed=0)
    assert venv.action_masks().shape == (2, 33)
    venv.step(np.zeros(2, dtype=np.int64))


def test_action_masks_are_new_arrays_of_the_valid_actions():
    """Both envs (and their ``info["action_mask"]``): entry ``a`` is ``a <= min(queue, B)``,
    bool, in a new array at every call (a caller may write into it), for queues from 1 to
    past ``B``."""
    B = 8
    kw = {**SMALL, "max_batch_size": B, "workload": {"kind": "poisson", "load": 1.5}}
    venv = DynamicBatchingVectorEnv(num_envs=3, full_info=True, **kw)
    env = gym.make(ENV_ID, **kw).unwrapped
    _, vinfo = venv.reset(seed=0)
    _, sinfo = env.reset(seed=0)
    queues = set()
    for _ in range(40):  # waits only: the queues grow
        q = vinfo["queue_len"]
        assert q[0] == sinfo["queue_len"] == env.queue_len
        expected = np.arange(B + 1) <= np.minimum(q, B)[:, None]
        for vm, sm in (
            (venv.action_masks(), env.action_masks()),
            (vinfo["action_mask"], sinfo["action_mask"]),
        ):
            assert vm.dtype == sm.dtype == bool
            assert np.array_equal(vm, expected) and np.array_equal(sm, expected[0])
            vm[:] = ~vm
            sm[:] = ~sm
        assert np.array_equal(venv.action_masks(), expected) and np.array_equal(
            env.action_masks(), expected[0]
        )
        queues.update(q.tolist())
        _, _, _, _, vinfo = venv.step(np.zeros(3, dtype=np.int64))
        _, _, _, _, sinfo = env.step(0)
    assert min(queues) == 1 and max(queues) > B


def test_a_huge_max_batch_size_needs_memory_linear_in_it():
    """``max_batch_size=10**5``: constructing, resetting and stepping both envs and their
    masks take O(B) memory (a (B + 1) ** 2 mask table would take 10 GB)."""
    B = 10**5
    profile = {
        "name": "lin",
        "model": "m",
        "device": "d",
        "source": "test",
        "kind": "linear",
        "alpha_ms": 0.1,
        "tau0_ms": 1.0,
        "beta_j": 0.01,
        "c0_j": 0.1,
        "idle_power_w": 10,
    }
    kw = {**SMALL, "profile": profile, "max_batch_size": B}
    tracemalloc.start()
    try:
        env = gym.make(ENV_ID, **kw)
        venv = DynamicBatchingVectorEnv(num_envs=2, **kw)
        env.reset(seed=0)
        venv.reset(seed=0)
        for a in (0, 0, B, 0, 1):
            _, _, _, _, info = env.step(a)
            venv.step(np.full(2, a))
            assert (
                info["action_mask"].sum()
                == env.unwrapped.action_masks().sum()
                == 1 + info["queue_len"]
            )
            assert np.array_equal(venv.action_masks()[0], env.unwrapped.action_masks())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_bad_input_gives_clear_errors(tmp_path):
    venv = DynamicBatchingVectorEnv(num_envs=2, **SMALL)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions\[1\]=.*out of range.*0\.\.32"):
        venv.step(np.array([0, 33]))
    with pytest.raises(ValueError, match="shape"):
        venv.step(np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match=r"actions\[0\]"):
        venv.step(np.array([0.5, 1.0]))
    venv.step(np.array([1.0, 0.0]))  # integral floats are accepted
    with pytest.raises(ValueError, match="num_envs"):
        DynamicBatchingVectorEnv(num_envs=0)
    with pytest.raises(ValueError, match="autoreset_mode"):
        DynamicBatchingVectorEnv(num_envs=1, autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="executor='torch'.*sync"):
        DynamicBatchingVectorEnv(num_envs=1, executor="torch")
    with pytest.raises(ValueError, match="sla_ms"):
        DynamicBatchingVectorEnv(num_envs=1, sla_ms=-1)
    path = tmp_path / "t.csv"
    path.write_text("t\n0.1\n0.2\n")
    with pytest.raises(ValueError, match="loop=False"):
        DynamicBatchingVectorEnv(
            num_envs=1,
            workload={"kind": "trace", "path": str(path), "timestamp_column": "t", "loop": False},
        )


@pytest.mark.parametrize("mode", ["sync", "async", "vector_entry_point"])
def test_make_vec_in_every_mode(mode):
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode=mode, **SMALL)
    obs, _ = envs.reset(seed=1)
    assert envs.observation_space.contains(obs)
    for _ in range(30):
        obs, rew, term, trunc, _ = envs.step(np.ones(2, dtype=np.int64))
        assert envs.observation_space.contains(obs) and rew.dtype == np.float64
    envs.close()


def test_max_episode_steps_truncates_lanes():
    venv = gym.make_vec(ENV_ID, num_envs=2, max_episode_steps=5, **SMALL)
    venv.reset(seed=0)
    for _ in range(4):
        _, _, _, trunc, _ = venv.step(np.ones(2, dtype=np.int64))
        assert not trunc.any()
    _, _, _, trunc, _ = venv.step(np.ones(2, dtype=np.int64))
    assert trunc.all()


def test_disabled_autoreset_refuses_to_step_an_ended_lane_until_it_is_reset():
    """As the scalar env refuses a step after its episode ended, so does a lane."""
    venv = DynamicBatchingVectorEnv(
        num_envs=2, autoreset_mode=AutoresetMode.DISABLED, horizon_requests=5
    )
    venv.reset(seed=0)
    for _ in range(1000):
        _, _, _, trunc, _ = venv.step(venv.action_masks().sum(axis=1) - 1)
        if trunc.any():
            break
    ended = trunc.nonzero()[0].tolist()
    assert ended
    with pytest.raises(gym.error.ResetNeeded, match=rf"lane\(s\) {re.escape(str(ended))} ended"):
        venv.step(np.ones(2, dtype=np.int64))
    venv.reset(options={"reset_mask": trunc.copy()})
    venv.step(venv.action_masks().sum(axis=1) - 1)
