"""LLMBatching-v0: the scheduler, KV accounting, SLAs, metrics and the LLM baselines."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import baselines
import batch_env  # noqa: F401
from batch_env.envs.llm_batching import OBS_FEATURES, LLMBatchingEnv
from batch_env.metrics import LLM_KEYS, SERVING_KEYS

LLM = "batch_env/LLMBatching-v0"
EXCERPT = "azure-conv-2023-excerpt"  # shipped: the first 2,000 requests of the Azure 2023 conversation trace


def small(**kw):
    """A small, fast env: short requests, a few dozen of them."""
    args = dict(
        workload={"kind": "poisson", "rate_per_s": 20.0},
        lengths={"kind": "lognormal", "prompt_tokens": 300, "output_tokens": 40},
        horizon_requests=150,
        max_num_seqs=64,
    )
    args.update(kw)
    return LLMBatchingEnv(**args)


def pressure(**kw):
    """Memory pressure: Azure-conversation lengths (the default lognormal), more traffic
    than the server can take, a KV cache of 30% of the GPU (about 16k tokens), cap 256."""
    args = dict(
        workload={"kind": "poisson", "rate_per_s": 6.0},
        gpu_memory_utilization=0.3,
        horizon_requests=300,
        max_num_seqs=256,
    )
    args.update(kw)
    return LLMBatchingEnv(**args)


def check_invariants(env: LLMBatchingEnv) -> None:
    """Conservation of requests and tokens; KV accounting."""
    u = env
    running, waiting = len(u.server.state.running), len(u.server.state.waiting)
    assert len(u.server.arrivals) == u.server.completed + running + waiting
    assert u.server.in_system == running + waiting
    assert u.server.state.kv_used == sum(u.server.state.kv_blocks)
    assert 0 <= u.server.state.kv_used <= u.server.state.kv_total
    assert sum(u.server.state.generated) == u.server.state.tokens_out
    for e in u.server.state.running:
        assert (
            u.server.state.kv_blocks[e] * u.server.state.block_size
            >= u.server.state.prompt[e] + u.server.state.generated[e] - 1
        )  # every token in the KV has a slot
        assert 1 <= u.server.state.generated[e] < u.server.state.output[e]
    for e in u.server.state.waiting:
        assert u.server.state.kv_blocks[e] == 0
    assert len(set(u.server.state.running) | set(u.server.state.waiting)) == running + waiting
    assert u.server.state.decode_context == sum(
        u.server.state.prompt[e] + u.server.state.generated[e] for e in u.server.state.running
    )
    assert u.server.state.waiting_tokens == sum(
        u.server.state.prompt[e] + u.server.state.generated[e] for e in u.server.state.waiting
    )


def run(env, policy=None, seed=0, check_every=1, max_steps=10**6):
    obs, info = env.reset(seed=seed)
    if policy is not None:
        policy.reset()
    total = 0.0
    comps = {"latency": 0.0, "energy": 0.0, "sla": 0.0, "drop": 0.0}
    for t in range(max_steps):
        a = policy.act(obs, info) if policy is not None else env.action_space.sample()
        obs, r, term, trunc, info = env.step(a)
        assert env.observation_space.contains(obs), obs
        total += r
        for k in comps:
            comps[k] += info["reward_components"][k]
        if check_every and t % check_every == 0:
            check_invariants(env)
        if trunc:
            return total, comps, info
    raise AssertionError("episode did not end")


def test_registered_and_check_env():
    assert LLM in batch_env.ENV_IDS
    env = gym.make(LLM, horizon_requests=20)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.observation_space.shape == (len(OBS_FEATURES),)
    assert env.action_space.n == 256


def test_deterministic_for_a_seed():
    a = small()
    b = small()
    a.action_space.seed(3)
    b.action_space.seed(3)
    ra = run(a, seed=7)
    rb = run(b, seed=7)
    assert ra[0] == rb[0]
    assert ra[2]["serving"] == rb[2]["serving"] or all(
        (x == y) or (math.isnan(x) and math.isnan(y))
        for x, y in zip(ra[2]["serving"].values(), rb[2]["serving"].values(), strict=True)
    )


def test_invariants_and_summary_with_random_caps():
    env = small()
    env.action_space.seed(0)
    total, comps, info = run(env, seed=1)
    s = info["serving"]
    for k in SERVING_KEYS + LLM_KEYS:
        assert k in s, k
    assert s["completed"] == 150
    assert s["in_system_at_end"] == env.server.in_system
    assert s["output_tokens_per_s"] > 0
    assert 0 < s["kv_utilization_mean"] <= 1
    # the reward is minus the weighted components
    w = env.config.reward_weights
    assert total == pytest.approx(
        -(
            w.latency * comps["latency"]
            + w.energy * comps["energy"]
            + w.sla * comps["sla"]
            + w.drop * comps["drop"]
        )
    )
    # latency integral over the episode = total time in system of every request
    fin = [f if f is not None else env.server.now for f in env.server.finished_at]
    assert comps["latency"] == pytest.approx(
        sum(f - a for f, a in zip(fin, env.server.arrivals, strict=True)), rel=1e-9
    )


def test_ttft_below_e2e_and_first_tokens_in_arrival_order():
    env = pressure()
    run(env, baselines.make("static-cap", env=env), seed=2, check_every=50)
    per_entry = env.server.sla_books.first_at  # NaN: no first token yet
    first = [f for f in per_entry if f == f]
    assert all(f != f for f in per_entry[len(first) :])  # FCFS: the first ones have them
    assert all(b >= a for a, b in zip(first, first[1:], strict=False))
    for e, f in enumerate(env.server.finished_at):
        if f is not None:
            assert env.server.arrivals[e] <= first[e] <= f
            assert (
                env.server.state.generated[e] == env.server.state.output[e]
            )  # a completed request has all its tokens


def test_preempted_requests_complete_with_all_their_tokens():
    env = pressure()
    _, _, info = run(env, baselines.make("static-cap", env=env), seed=3, check_every=25)
    s = info["serving"]
    assert s["preemptions"] > 0
    assert s["completed"] == 300  # every summary request completed, preempted ones included
    lo = env.server.window.entry
    assert all(
        env.server.finished_at[e] is not None
        and env.server.state.generated[e] == env.server.state.output[e]
        for e in range(lo, lo + 300)
    )


def test_memory_aware_preempts_at_most_a_fifth_of_static_256():
    counts = {"static-cap": 0, "memory-aware": 0}
    for seed in range(3):
        for name in counts:
            env = pressure()
            _, _, info = run(env, baselines.make(name, env=env), seed=seed, check_every=0)
            counts[name] += info["serving"]["preemptions"]
    assert counts["static-cap"] >= 50, counts
    assert counts["memory-aware"] * 5 <= counts["static-cap"], counts


def test_sla_misses_counted_once_per_request():
    env = small(
        ttft_sla_ms=150.0, tpot_sla_ms=25.0, workload={"kind": "poisson", "rate_per_s": 40.0}
    )
    _, comps, info = run(env, baselines.make("static-cap", env=env), seed=5, check_every=0)
    arr, first, fin, out = (
        env.server.arrivals,
        env.server.sla_books.first_at,
        env.server.finished_at,
        env.server.state.output,
    )
    ttft, tpot = env.server.ttft_scale_s, env.server.tpot_scale_s
    now = env.server.now
    expected = 0
    for e, a in enumerate(arr):
        f = first[e] if first[e] == first[e] else None  # NaN: none yet
        if now - a > ttft and (f is None or f - a > ttft):
            expected += 1
        elif (
            fin[e] is not None
            and f - a <= ttft
            and out[e] >= 2
            and (fin[e] - f) / (out[e] - 1) > tpot
        ):
            expected += 1
    assert 0 < comps["sla"] == expected
    s = info["serving"]
    assert s["sla_attainment"] <= min(s["ttft_attainment"], s["tpot_attainment"])


def test_rejected_and_clipped_are_counted():
    env = small(
        max_model_len=512, lengths={"kind": "lognormal", "prompt_tokens": 400, "output_tokens": 200}
    )
    _, _, info = run(env, baselines.make("static-cap", env=env), seed=6, check_every=0)
    s = info["serving"]
    assert s["rejected"] > 0 and s["clipped"] > 0
    assert info["rejected_total"] >= s["rejected"]
    assert (
        max(p + o for p, o in zip(env.server.state.prompt, env.server.state.output, strict=True))
        <= 512
    )
    assert min(env.server.state.prompt) + 1 <= 512


def test_info_never_shows_output_lengths():
    env = small()
    _, info = env.reset(seed=0)
    for key in (
        "kv_blocks_used",
        "kv_blocks_total",
        "running",
        "waiting",
        "decode_latency_recent_ms",
        "batch_size_recent",
    ):
        assert key in info
    assert not any("output" in k for k in info)
    _, _, _, _, info = env.step(0)
    assert not any("output" in k for k in info)


def test_cap_below_running_stops_admission_without_eviction():
    env = small(workload={"kind": "poisson", "rate_per_s": 200.0})
    obs, info = env.reset(seed=0)
    for _ in range(30):
        obs, r, term, trunc, info = env.step(63)
    running = info["running"]
    assert running > 4
    obs, r, term, trunc, info = env.step(1)  # cap 2 < running: a decode of everyone
    assert info["iteration"] == "decode"
    assert info["running"] >= running - 5  # only completions leave


def test_coarse_grid_and_policy_mapping():
    env = small(grid=[8, 16, 32, 64])
    assert env.action_space.n == 4
    # a static cap the grid cannot set is refused: it would silently run another cap
    for cap in (20, 4):
        with pytest.raises(ValueError, match=rf"cap={cap} is not a cap the env's actions can set"):
            baselines.make("static-cap", env=env, cap=cap)
    assert baselines.make("static-cap", env=env, cap=16).act(None, {}) == 1
    # an adaptive policy's computed cap maps to the largest grid value <= it (the smallest
    # if below the grid)
    p = baselines.make("memory-aware", env=env)
    assert p.action_for(20) == 1 and p.action_for(4) == 0


def test_memory_aware_formula():
    env = small()
    p = baselines.make("memory-aware", env=env, eta=0.95)
    info = {"running": 10, "waiting": 5, "kv_blocks_used": 1000, "kv_blocks_total": 8000}
    assert p.cap(info) == 64  # floor(0.95 * 8000 / 100) = 76, clamped to b_max 64
    info["kv_blocks_used"] = 4000
    assert p.cap(info) == 19
    assert (
        p.cap({"running": 30, "waiting": 1, "kv_blocks_used": 7900, "kv_blocks_total": 8000}) == 30
    )
    assert (
        p.cap({"running": 3, "waiting": 0, "kv_blocks_used": 10, "kv_blocks_total": 8000}) == 30
    )  # kept


def test_sla_feedback_interval():
    env = small(max_num_seqs=200)
    p = baselines.make("sla-feedback", env=env, d_sla_ms=50, eps_ms=10, alpha=20, delta=5)
    # too slow: b_high = max(b_avg, b_low + alpha), b_low = max(b_low - delta, 1)
    c = p.cap({"decode_latency_recent_ms": 80, "batch_size_recent": 100, "running": 0})
    assert (p.b_low, p.b_high) == (1, 100) and c == 50
    # too fast: b_low = min(b_avg, b_high - alpha), b_high = min(b_high + delta, b_max)
    c = p.cap({"decode_latency_recent_ms": 20, "batch_size_recent": 60, "running": 0})
    assert (p.b_low, p.b_high) == (60, 105) and c == 82
    # within tolerance: recentre on b_avg +- alpha / 2
    c = p.cap({"decode_latency_recent_ms": 52, "batch_size_recent": 70, "running": 90})
    assert (p.b_low, p.b_high) == (60, 80) and c == 90  # at least the number running
    both = baselines.make("pang2025", env=env)
    info = {
        "decode_latency_recent_ms": 80,
        "batch_size_recent": 100,
        "running": 10,
        "waiting": 5,
        "kv_blocks_used": 8000,
        "kv_blocks_total": 8000,
    }
    assert both.act(None, info) == min(both.memory.b, 50) - 1


def test_policies_refuse_other_envs():
    env = gym.make("batch_env/DynamicBatching-v0")
    with pytest.raises(ValueError, match="LLMBatching-v0"):
        baselines.make("memory-aware", env=env)


def test_profile_without_table_for_cap_256_is_a_config_error():
    with pytest.raises(ValueError, match="max_num_seqs"):
        LLMBatchingEnv(profile="llama-2-70b-tp8-a100", max_num_seqs=256)
    env = LLMBatchingEnv(
        profile="llama-2-70b-tp8-a100",
        max_num_seqs=64,
        horizon_requests=30,
        workload={"kind": "poisson", "rate_per_s": 2.0},
    )
    run(env, baselines.make("pang2025", env=env), seed=0, check_every=0)
    LLMBatchingEnv(profile="llama-2-7b-h100", max_num_seqs=256)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"grid": [4, 2]}, "grid"),
        ({"grid": [0, 2]}, "grid"),
        ({"max_model_len": 8192, "max_num_batched_tokens": 4096}, "max_num_batched_tokens"),
        ({"ttft_sla_ms": float("nan")}, "ttft_sla_ms"),
        ({"workload": {"kind": "poisson", "load": 0.5}}, "load"),
        ({"executor": "jax"}, "executor="),
        ({"model": "gpt-small"}, "only used with executor=.torch."),
        ({"lengths": {"kind": "zipf"}}, "lengths.kind"),
        ({"lengths": {"kind": "fixed", "prompt_tokens": 0}}, "prompt_tokens"),
        ({"lengths": {"kind": "empirical", "path": "/nonexistent.csv"}}, "lengths.path"),
        ({"lengths": {"kind": "trace"}}, "trace"),
        ({"reward_weights": {"speed": 1}}, "reward_weights"),
        ({"profile": "resnet50-v100"}, "profile"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LLMBatchingEnv(**kwargs)


@pytest.mark.parametrize("action", [-1, 256, 1.5, "a", float("nan")])
def test_bad_action(action):
    env = LLMBatchingEnv(horizon_requests=10)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(action)


def test_azure_trace_lengths_come_from_the_trace():
    from batch_env.workload import datasets as data

    env = LLMBatchingEnv(
        workload={"kind": "trace", "dataset": EXCERPT, "target_rate_per_s": 3.0},
        horizon_requests=100,
    )
    _, _, info = run(env, baselines.make("pang2025", env=env), seed=0, check_every=10)
    import csv

    with open(data.path(EXCERPT)) as fh:
        rows = list(csv.DictReader(fh))
    fits = [
        (int(r["ContextTokens"]), int(r["GeneratedTokens"]))
        for r in rows
        if int(r["ContextTokens"]) + 1 <= 4096
    ]
    assert env.server.state.prompt[:50] == [p for p, _ in fits[:50]]
    assert info["serving"]["completed"] == 100
