"""Prefix caching in the LLM envs (issue 63): the KV accounting with shared blocks, the
epoch test of LLMBatching-v2 against trying every action, v2's trajectory (its decode
runs included) against v1's iteration by iteration, the longest-prefix order and its
switch, and the prefix-caching baselines."""

from __future__ import annotations

import json
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from test_llm_v2 import _server_signature, one_iteration

import baselines
from batch_env.llm import make_scheduler

V1, V2 = "batch_env/LLMBatching-v1", "batch_env/LLMBatching-v2"
SESSIONS = {
    "kind": "sessions",
    "rate_per_s": 6.0,
    "turns_mean": 4.0,
    "think_time_s": 5.0,
    "system_prompts": 3,
    "system_prompt_tokens": 700,
    "user_tokens_mean": 150.0,
    "output_tokens_mean": 120.0,
}
MOONCAKE = {
    "kind": "trace",
    "dataset": "mooncake-conversation",
    "target_rate_per_s": 1.0,
}
#: a small cache (evictions, preemptions), a budget grid, two orders
BASE = {
    "profile": "llama-2-7b-a100",
    "gpu_memory_utilization": 0.3,
    "budget_grid": [256, 1024, 2048],
    "grid": [1, 8, 64, 256],
    "horizon_requests": 150,
}


def make(env_id, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(env_id, **kw)


def prefix_signature(kv):
    """The prefix cache's state as plain data: counts, cached blocks, the free queue."""
    nodes, todo = [], list(kv.root.children.values())
    while todo:
        n = todo.pop()
        nodes.append((n.units[n.b0 // kv.ratio], n.b0, n.b1, n.holders))
        todo += n.children.values()
    queue = [
        (node.units[node.b0 // kv.ratio], node.b0, node.b1)
        for st, node in kv.lru
        if node.stamp == st
    ]
    return (
        kv.used,
        kv.free_cached,
        kv.cached_total,
        kv.evictions,
        kv.hit_tokens,
        kv.prompt_tokens,
        list(kv.held),
        sorted(nodes),
        queue,
    )


def check_invariants(u):
    """Requests conserved; KV accounting with shared blocks: the blocks in use are the
    cached ones in use plus every request's own; a running request's blocks hold its
    context (but the token it feeds); a waiting one holds none."""
    srv = u.server.state
    kv = srv.kv
    running, waiting = len(srv.running), len(srv.waiting)
    assert len(u.server.arrivals) == u.server.completed + running + waiting
    own = sum(b - h for b, h in zip(kv.blocks, kv.held, strict=True))
    assert kv.used == kv.cached_total - kv.free_cached + own
    assert 0 <= kv.used and kv.used + kv.free_cached <= kv.total
    for e in srv.decoding():
        assert kv.blocks[e] * srv.block_size >= srv.context(e) - 1
    for e in srv.waiting:
        assert kv.blocks[e] == 0 and kv.held[e] == 0
    assert srv.decode_context == sum(srv.context(e) for e in srv.decoding())


def _outcome(u, cap, budget, order, frozen):
    """One iteration at a setting on a copy of the server: what it did, the server's and
    the cache's state after."""
    srv = pickle.loads(frozen)
    options = {"decode_first": u.config.decode_first, "split_prompts": u.config.split_prompts}
    if u.config.scheduler != "chunked":
        options = {}
    sch = make_scheduler(u.config.scheduler, srv, u.executor.needs_sequences, **options)
    it, events = one_iteration(sch, sch.plan(cap, budget, order), u.executor, u.server.now)
    return it, events, _server_signature(srv), prefix_signature(srv.kv)


@pytest.mark.parametrize("workload", ["sessions", "mooncake"])
def test_the_epoch_test_agrees_with_trying_every_action(workload):
    """With prefix caching and the orders fcfs and longest-prefix: at v2's boundaries the
    cheap test says "no decision" exactly when every (cap, budget, order), run on a copy
    of the server, does the same; planning changes neither the server nor the cache."""
    wl = SESSIONS if workload == "sessions" else MOONCAKE
    kw = {**BASE, "workload": wl, "orders": ["fcfs", "longest-prefix"], "horizon_requests": 60}
    if workload == "mooncake":
        kw.update(
            profile="llama-3.1-8b-h100",
            max_model_len=131_072,
            max_num_batched_tokens=8192,
            budget_grid=[512, 2048, 8192],
            gpu_memory_utilization=0.5,
        )
    env = make(V2, **kw)
    u = env.unwrapped
    assert u.server.state.kv.prefix
    ng, nb, no = len(u.server.grid), len(u.server.budgets), len(u.server.orders)
    rng = np.random.default_rng(1)
    counts = {"epoch": 0, "forced": 0}
    hits = 0
    env.reset(seed=3)
    from batch_env.envs.llm_batching import LLMBatchingV1Env

    for step in range(3000):
        if u.server.in_system and step % 4 == 0:
            before = (_server_signature(u.server.state), prefix_signature(u.server.state.kv))
            forced = u.server.forced_plan(u.server.cap, u.server.budget)
            assert (
                _server_signature(u.server.state),
                prefix_signature(u.server.state.kv),
            ) == before
            frozen = pickle.dumps(u.server.state, protocol=pickle.HIGHEST_PROTOCOL)
            outcomes = []
            for a in range(ng * nb * no):
                cap, budget = u.server.grid[a % ng], u.server.budgets[(a // ng) % nb]
                outcomes.append(_outcome(u, cap, budget, u.server.orders[a // (ng * nb)], frozen))
            same = all(o == outcomes[0] for o in outcomes)
            assert (forced is not None) == same, step
            counts["forced" if same else "epoch"] += 1
        *_, trunc, _ = LLMBatchingV1Env.step(u, int(rng.integers(env.action_space.n)))
        check_invariants(u)
        hits = max(hits, u.server.state.kv.hit_tokens)
        if trunc:
            env.reset(seed=4 + step)
    assert counts["epoch"] > 20 and counts["forced"] > 20, counts
    assert hits > 0


def _run(env_id, kw, seed, epochs=None):
    """An episode at random actions: v2's at its epochs (recorded), v1 replaying them at
    the same iterations and repeating the last elsewhere. Returns the record, the pairs of
    observations at v2's epochs, the summary, the cache's state and the steps."""
    env = make(env_id, **kw)
    u = env.unwrapped
    rng = np.random.default_rng(7)
    obs, info = env.reset(seed=seed)
    record, last, rows, steps = {}, env.action_space.n - 1, [], 0
    while True:
        k = u.server.iterations
        if epochs is None:
            a = int(rng.integers(env.action_space.n))
            record[k] = (a, obs.copy())
        elif k in epochs:
            a, obs2 = epochs[k]
            rows.append((obs, obs2))
            last = a
        else:
            a = last
        obs, _, _, trunc, info = env.step(a)
        steps += 1
        check_invariants(u)
        if trunc:
            return record, rows, info["serving"], prefix_signature(u.server.state.kv), steps


@pytest.mark.parametrize(
    "workload,scheduler",
    [
        ("sessions", "chunked"),
        ("mooncake", "chunked"),
        ("sessions", "vllm-v0"),
        ("cascade", "chunked"),
    ],
)
def test_v2s_trajectory_is_v1s_with_prefix_caching(workload, scheduler):
    """v2 runs decode-only stretches in one loop (the KV cache's take and free, evictions
    included; with cascade attention, the shared prefix found again at each completion);
    v1 runs every iteration through the scheduler. The same actions at v2's epochs,
    repeated in v1 between them, give the same observations there, the same summary and
    the same cache at the end."""
    kw = {**BASE, "workload": SESSIONS, "scheduler": scheduler, "horizon_requests": 200}
    if workload == "cascade":  # one system prompt: every running request may share it
        kw.update(workload={**SESSIONS, "system_prompts": 1}, cascade_attention=True)
    if workload == "mooncake":  # long prompts, chunked: Llama-3.1-8B on an H100
        kw.update(
            workload=MOONCAKE,
            profile="llama-3.1-8b-h100",
            max_model_len=131_072,
            max_num_batched_tokens=8192,
            budget_grid=[512, 2048, 8192],
            gpu_memory_utilization=0.5,
            horizon_requests=100,
        )
    if scheduler == "vllm-v0":
        kw.pop("budget_grid")
    epochs, _, summary2, cache2, steps2 = _run(V2, kw, 5)
    assert make(V2, **kw).unwrapped.server.decode_runs == (scheduler == "chunked")
    _, rows, summary1, cache1, steps1 = _run(V1, kw, 5, epochs)
    assert len(rows) == len(epochs) and all(np.array_equal(a, b) for a, b in rows)
    assert json.dumps(summary1) == json.dumps(summary2)
    assert cache1 == cache2
    assert steps1 > 3 * steps2  # v2 ran many iterations per step
    assert summary2["prefix_hit_tokens"] > 0 and summary2["prefix_evictions"] > 0, summary2
    if workload == "cascade":
        assert summary2["cascade_iterations"] > steps2, summary2  # in decode runs too


def test_decode_stretches_are_exact_where_evictions_reorder_the_longest_prefix_queue():
    """Requests wait on a small cache while the running ones decode: the decodes' blocks
    evict cached ones, which can make another waiting request the longest-prefix order's
    first and let it fit with no completion, so a decode stretch must not run past such a
    boundary (nor begin the iteration that admits the next arrival there). v2 with its
    stretches gives, step for step, what it gives running every iteration through the
    scheduler. Seed 3 found stretches that ran on past such a boundary (6 of 30 seeds
    did, before stretches stopped running while requests wait with prefix caching);
    seed 1, a stretch that began the decode past it (``scripts/llm_outputs.py``'s
    runs)."""
    kw = {
        "workload": {"kind": "sessions", "rate_per_s": 12.0, "system_prompts": 4},
        "orders": ["fcfs", "longest-prefix"],
        "budget_grid": [512, 2048],
        "gpu_memory_utilization": 0.3,
        "horizon_requests": 60,
        "warmup_requests": 10,
    }

    def episode(decode_runs, seed):
        env = make(V2, **kw)
        env.unwrapped.server.decode_runs = decode_runs
        rng = np.random.default_rng(seed)
        obs, _ = env.reset(seed=seed)
        out = [obs.tobytes()]
        while True:
            obs, r, _, trunc, info = env.step(int(rng.integers(env.action_space.n)))
            out.append((obs.tobytes(), repr(r), env.unwrapped.server.iterations))
            if trunc:
                return out, json.dumps(info["serving"])

    for seed in (1, 3):
        runs, stepwise = episode(True, seed), episode(False, seed)
        assert runs == stepwise
        assert json.loads(runs[1])["prefix_evictions"] > 0


def test_longest_prefix_admits_the_longest_cached_prefix_first_and_fcfs_above_its_switch():
    """The order's first candidate has the most cached blocks (ties: the queue's order);
    with more than longest_prefix_fcfs_above waiting it is the queue itself."""
    from batch_env.llm.orders import candidates

    for above, expect_fcfs in ((128, False), (3, True)):
        env = make(
            V2,
            **{**BASE, "workload": {**SESSIONS, "rate_per_s": 40.0}, "grid": [1, 2]},
            orders=["fcfs", "longest-prefix"],
            longest_prefix_fcfs_above=above,
        )
        u = env.unwrapped
        env.reset(seed=0)
        srv = u.server.state
        checked = 0
        for _ in range(400):
            if len(srv.waiting) > 3:
                waiting = list(srv.waiting)
                first = next(iter(candidates(srv, 1, "longest-prefix")))
                if expect_fcfs:
                    assert first == waiting[0]
                else:
                    hit = {e: srv.kv.lookup(e, srv.context(e))[0] for e in waiting}
                    best = max(hit.values())
                    assert first == next(e for e in waiting if hit[e] == best)
                    checked += best > hit[waiting[0]]
            env.step(0)  # the smallest cap: requests queue
        assert expect_fcfs or checked > 5, checked


def test_a_masked_longest_prefix_action_plans_what_its_fcfs_twin_plans():
    """v2's mask hides a longest-prefix action exactly where it would do what its FCFS twin
    (same cap, budget) does: at every epoch of random episodes, masked or not, the two
    orders' plans at every setting agree where the mask hides it; and the mask does hide
    it at some epochs and not at others. Without FCFS offered nothing is masked; without
    prefix caching the longest-prefix actions are always masked."""
    kw = {**BASE, "workload": {**SESSIONS, "rate_per_s": 25.0}, "horizon_requests": 150}
    env = make(V2, **kw, orders=["fcfs", "longest-prefix"])
    u = env.unwrapped
    sch = u.server.scheduler
    rng = np.random.default_rng(0)
    seen = {True: 0, False: 0}
    for seed in (0, 1):
        _, info = env.reset(seed=seed)
        while True:
            mask = env.unwrapped.action_masks()
            assert np.array_equal(mask, info["action_mask"])
            lpm = [a for a in range(u.action_space.n) if u.action_parts(a).order != "fcfs"]
            hidden = not mask[lpm].any()
            assert hidden or mask[lpm].all()  # all or none of them
            seen[hidden] += 1
            if hidden:
                for cap in u.server.grid:
                    for budget in u.server.budgets:
                        a, b = (
                            sch.plan(cap, budget, "fcfs"),
                            sch.plan(cap, budget, "longest-prefix"),
                        )
                        assert a.same_iteration(b) and a.chunks == b.chunks
            valid = np.flatnonzero(mask)
            *_, trunc, info = env.step(int(rng.choice(valid)))
            if trunc:
                break
    assert seen[True] > 10 and seen[False] > 10, seen
    alone = make(V2, **kw, orders=["longest-prefix"])
    alone.reset(seed=0)
    assert alone.unwrapped.action_masks().all()
    off = make(V2, **kw, orders=["fcfs", "longest-prefix"], prefix_caching=False)
    off.reset(seed=0)
    for _ in range(30):
        mask = off.unwrapped.action_masks()
        assert mask.sum() == mask.size // 2  # the fcfs half
        off.step(int(np.flatnonzero(mask)[-1]))


def test_the_prefix_caching_baselines_run_and_refuse_an_env_without_caching():
    kw = {**BASE, "workload": SESSIONS, "horizon_requests": 120}
    env = make(V2, **kw, orders=["fcfs", "longest-prefix"])
    for name in ("vllm-apc", "sglang-lpm"):
        policy = baselines.make(name, env=env)
        obs, info = env.reset(seed=1)
        while True:
            obs, _, _, trunc, info = env.step(policy.act(obs, info))
            if trunc:
                break
        assert info["serving"]["completed"] > 0
    plain = make(V2, **{**kw, "workload": {"kind": "poisson", "rate_per_s": 4.0}})
    for name in ("vllm-apc", "sglang-lpm"):
        with pytest.raises(ValueError, match="runs with prefix caching"):
            baselines.make(name, env=plain)
    with pytest.raises(ValueError, match="orders=\\[..., 'longest-prefix'\\]"):
        baselines.make("sglang-lpm", env=make(V2, **kw))
