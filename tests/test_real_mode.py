"""Real mode: both envs run a real PyTorch model (tiny, CPU) with executor='torch'.

The profile and the envs here time the model by the thread's CPU clock
(``clock="thread_cpu"``), which other processes on the machine do not inflate; one test
checks that the default stays the wall clock and that the clock is recorded.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import check_env_except_determinism

import baselines
import batch_env
from batch_env.real.profiling import measure_profile

TINY = {
    "width": 0.125,
    "depth": 1,
    "threads": 1,
    "warmup": 1,
    "model_kwargs": {"image_size": 32},
    "clock": "thread_cpu",
}
ENVS = ["batch_env/DynamicBatching-v0", "batch_env/NodeBatching-v0"]


@pytest.fixture(scope="module")
def tiny_profile():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return measure_profile(
            "resnet50",
            torch_device="cpu",
            batch_sizes=(1, 2, 4, 8),
            min_time_s=0.05,
            nodes=True,
            width=0.125,
            depth=1,
            threads=1,
            model_kwargs={"image_size": 32},
            clock="thread_cpu",
        )


def make(env_id, profile, **kw):
    kw.setdefault("workload", {"kind": "poisson", "load": 0.4})
    kw.setdefault("horizon_requests", 150)
    kw.setdefault("executor_options", TINY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no NVML/RAPL here" is reported once, not an error
        return gym.make(
            env_id,
            profile=profile,
            max_batch_size=8,
            sla_ms=50 * profile["latency_ms"][0],
            decision_interval_ms=profile["latency_ms"][0] / 2,
            executor="torch",
            torch_device="cpu",
            **kw,
        )


def test_measured_latency_grows_with_batch_size(tiny_profile):
    """Batch 8 costs more than batch 1, on medians of thread CPU time taken in alternation.

    The profile times each batch size in its own window, one after the other, so a busy
    spell of other processes that lands on one window moves that batch size alone (seen
    with two CPU hogs, even on the thread CPU clock, which removes preemption but not the
    caches other work shares: b=1's p50 4.2 ms above b=8's 3.2 ms). Alternating the two
    sizes call by call puts every spell on both."""
    from batch_env.real.energy import ModelMeter
    from batch_env.real.torch_executor import TorchExecutor

    md = tiny_profile["_metadata"]
    assert (md["clock"], md["clock_source"]) == ("thread_cpu", "thread_time_ns")
    assert "time.thread_time_ns" in tiny_profile["notes"]["method"]
    assert all(x > 0 for x in tiny_profile["latency_ms"])
    opts = {k: v for k, v in TINY.items() if k != "warmup"}
    ex = TorchExecutor(
        "resnet50",
        8,
        torch_device="cpu",
        warmup=1,
        meter=ModelMeter("test: no meter", "cpu"),
        profile="resnet50-v100-linear",
        **opts,
    )
    times: dict[int, list[float]] = {1: [], 8: []}
    for _ in range(41):
        for b in times:
            times[b].append(ex.run(b)[0])
    ex.close()
    assert np.median(times[8]) > np.median(times[1]), {b: np.median(t) for b, t in times.items()}


@pytest.mark.parametrize(
    "env_id,policy", [(ENVS[0], "greedy"), (ENVS[1], "lazy"), (ENVS[1], "graph")]
)
def test_real_mode_runs_an_episode(tiny_profile, env_id, policy):
    env = make(env_id, tiny_profile)
    u = env.unwrapped
    pol = baselines.make(policy, env, **({"window_ms": 0.5} if policy == "graph" else {}))
    res = batch_env.evaluate(pol, env, n_episodes=1)
    ep = res.episodes[0]
    assert ep["completed"] == 150
    assert ep["latency_mean_ms"] > 0 and ep["power_mean_w"] > 0
    obs, info = env.reset(seed=1)
    assert info["energy_source"] == u.executor.energy_source in ("nvml", "rapl", "profile")
    assert u.get_config()["executor"] == "torch"
    md = u.get_config()["executor_metadata"]
    assert md["threads"] == 1 and md["torch_version"] == torch.__version__
    assert md["clock"] == "thread_cpu" and md["clock_source"] == "thread_time_ns"
    if env_id == ENVS[1]:
        assert u.node_names == u.executor.node_names == tuple(tiny_profile["nodes"]["names"])
    env.close()
    env.close()  # idempotent


@pytest.mark.parametrize("env_id", ENVS)
def test_env_checks_other_than_determinism(tiny_profile, env_id):
    """Real timings vary, so check_env's determinism checks do not apply; every other one must pass."""
    env = make(env_id, tiny_profile).unwrapped
    check_env_except_determinism(env)
    env.close()


def test_real_mode_errors(tiny_profile):
    with pytest.raises(ValueError, match="model"):
        gym.make(ENVS[0], executor="torch", model="alexnet", torch_device="cpu")
    with pytest.raises(ValueError, match="executor="):
        gym.make(ENVS[0], executor="jax")
    with pytest.raises(ValueError, match="service"):
        gym.make(ENVS[0], executor="torch", service="lognormal", service_cv=0.2)
    with pytest.raises(ValueError, match="only used with executor='torch'"):
        gym.make(ENVS[0], model="resnet50")
    with pytest.raises(ValueError, match="model=<name>"):
        gym.make(
            ENVS[0],
            profile={**tiny_profile, "name": "mystery"},
            max_batch_size=8,
            executor="torch",
            torch_device="cpu",
        )
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="(?i)cuda"):
            gym.make(ENVS[0], executor="torch", torch_device="cuda", executor_options=TINY)


def test_clock_default_is_wall_and_bad_clocks_are_refused(tiny_profile):
    """executor_options' clock reaches the executor; the default (wall) is recorded too."""
    wall = {k: v for k, v in TINY.items() if k != "clock"}
    env = make(ENVS[0], tiny_profile, executor_options=wall)
    md = env.unwrapped.get_config()["executor_metadata"]
    assert (md["clock"], md["clock_source"]) == ("wall", "perf_counter_ns")
    env.close()
    with pytest.raises(ValueError, match=r"clock='cycles' is invalid: allowed values are"):
        make(ENVS[1], tiny_profile, executor_options={**TINY, "clock": "cycles"})
    n = torch.get_num_threads()
    try:
        with pytest.raises(ValueError, match=r"threads=2 is invalid with clock='thread_cpu'"):
            make(ENVS[0], tiny_profile, executor_options={**TINY, "threads": 2})
        assert torch.get_num_threads() == n  # refused before the threads were set
    finally:
        torch.set_num_threads(n)


def test_speed_track_bins_the_real_runs_speed_over_env_time():
    """SpeedTrack: the measured / predicted ratio of the calls in each span of an episode."""
    from experiments.roundtrip import SpeedTrack

    # episode 0 runs to t=1.0: calls in its first half twice the prediction, second half
    # as predicted; episode 1 has one call at t=0 (and empty bins after it)
    log = [(0, 0.1, 2.0, 1.0), (0, 0.4, 4.0, 2.0), (0, 0.6, 1.0, 1.0), (0, 1.0, 3.0, 3.0)]
    log += [(1, 0.0, 1.5, 1.0)]
    track = SpeedTrack.of(log, bins=2)
    assert track.ends == [1.0, 0.0]
    assert track.ratios == [[2.0, 1.0], [1.5, 1.5]]
    assert track.at(0, 0.2) == 2.0 and track.at(0, 0.7) == 1.0
    assert track.at(0, 5.0) == 1.0 and track.at(1, 3.0) == 1.5  # past the end: the last bin
    gap = SpeedTrack.of([(0, 0.0, 3.0, 1.0), (0, 1.0, 1.0, 1.0)], bins=4)
    assert gap.ratios == [[3.0, 3.0, 3.0, 1.0]]  # an empty bin takes the earlier one's


def test_scaled_profile_scales_every_latency():
    """The speed-matched profile multiplies end-to-end, node and percentile latencies, not power."""
    from importlib import resources

    from batch_env.profiles.batch_profile import Profile, load
    from experiments.roundtrip import scaled_profile

    path = resources.files("batch_env").joinpath("profiles/measured/resnet50-small-cpu.json")
    raw = load(str(path)).raw
    s = scaled_profile(raw, 1.25)
    assert s["latency_ms"] == pytest.approx([1.25 * x for x in raw["latency_ms"]])
    assert s["nodes"]["latency_ms"][2] == pytest.approx(
        [1.25 * x for x in raw["nodes"]["latency_ms"][2]]
    )
    assert s["power_w"] == raw["power_w"] and raw["latency_ms"][0] != s["latency_ms"][0]
    p, q = Profile(raw), Profile(s)
    assert q.latency_s(3) == pytest.approx(1.25 * p.latency_s(3))
    assert q.node_tables(8)[0] == pytest.approx(1.25 * p.node_tables(8)[0])


@pytest.mark.parametrize("name", ["resnet50-small-cpu", "bert-base-small-cpu"])
def test_shipped_measured_cpu_profiles_load_with_metadata(name):
    from importlib import resources

    from batch_env.profiles.batch_profile import load

    path = resources.files("batch_env").joinpath(f"profiles/measured/{name}.json")
    p = load(str(path))
    md = p.raw["_metadata"]
    assert md["threads"] == 1 and md["torch_version"] and md["device_name"]
    assert p.source.startswith("measured on") and p.n_nodes > 1
