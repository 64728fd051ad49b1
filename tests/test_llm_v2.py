"""LLMBatching-v2: decisions only where they matter, and the same env as v1 otherwise.

* The cheap test of a decision epoch (``_forced_plan``: nothing to admit, or the smallest
  and the largest setting plan the same iteration) agrees with trying every action, each
  run on a copy of the server, on many states of many configurations.
* ``Scheduler.plan`` changes nothing, and ``start``/``apply`` carry out the plan given.
* A policy that acts on v2's epochs has, in v1, the same trajectory (the observation at
  every epoch), reward total and summary when it plays its actions at those boundaries and
  anything elsewhere; static baselines and sarathi give identical summaries in both ids.
* v2 takes at least 10x fewer steps per completed request than v1 (the CPU ratio is
  ``batch-env bench``'s).
"""

from __future__ import annotations

import json
import math
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest

import baselines
import batch_env
from batch_env.llm import execute, make_scheduler

V1, V2 = "batch_env/LLMBatching-v1", "batch_env/LLMBatching-v2"
PROFILES = ["llama-2-7b-a100", "llama-2-7b-h100", "llama-2-70b-tp8-a100"]
WORKLOADS = {
    "poisson": {"kind": "poisson", "rate_per_s": 4.0},
    "gamma": {"kind": "gamma", "rate_per_s": 3.0, "cv": 3.0},
    "trace": {"kind": "trace", "dataset": "azure-code-2023-excerpt", "target_rate_per_s": 2.0},
}
MEMORY = {"roomy": {}, "tight": {"gpu_memory_utilization": 0.25}}
#: scheduler settings: v1's default, a budget grid, prefill-first whole prompts, vllm-v0
SETTINGS = {
    "default": {},
    "budgets": {"budget_grid": [256, 512, 1024, 2048], "grid": [1, 4, 16, 64, 256]},
    "v0-rules": {"decode_first": False, "split_prompts": False, "max_model_len": 2048},
    "vllm-v0": {"scheduler": "vllm-v0", "grid": [1, 2, 8, 32, 256]},
}


def kwargs(profile="llama-2-7b-a100", workload="poisson", memory="roomy", setting="default", n=150):
    kw = {
        "profile": profile,
        "workload": WORKLOADS[workload],
        "horizon_requests": n,
        **MEMORY[memory],
        **SETTINGS[setting],
    }
    if "70b" in profile:  # its decode table ends at batch 64
        kw["max_num_seqs"] = 64
        if "grid" in kw:
            kw["grid"] = [g for g in kw["grid"] if g <= 64] or [64]
    return kw


def make(env_id, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(env_id, **kw)


def check_invariants(u):
    """Requests and tokens conserved, KV accounting (both schedulers; a prefill in
    progress holds blocks for the tokens it has computed)."""
    srv = u.server.state
    running, waiting = len(srv.running), len(srv.waiting)
    assert len(u.server.arrivals) == u.server.completed + running + waiting
    assert u.server.in_system == running + waiting
    assert srv.kv_used == sum(srv.kv_blocks) and 0 <= srv.kv_used <= srv.kv_total
    assert sum(srv.generated) == srv.tokens_out
    assert len(set(srv.running) | set(srv.waiting)) == running + waiting
    for e in srv.decoding():
        assert srv.kv_blocks[e] * srv.block_size >= srv.context(e) - 1
        assert 1 <= srv.generated[e] < srv.output[e]
    for e in srv.running[len(srv.running) - srv.prefilling :]:
        assert srv.prefill_left[e] > 0 and srv.kv_blocks[e] * srv.block_size >= srv.prefill_done[e]
    for e in srv.waiting:
        assert srv.kv_blocks[e] == 0 and srv.prefill_left[e] == 0
    assert srv.decode_context == sum(srv.context(e) for e in srv.decoding())


# -- the test of a decision epoch against every action --------------------------------------


def one_iteration(sch, plan, executor, now):
    """One iteration of ``plan`` as the engine runs it (``LLMServer.run_iteration``: start,
    execute, apply, then the clock, first tokens and completions), on the scheduler's
    state alone: what it did, and the events the engine would record, in order."""
    work = sch.start(plan)
    d, energy = execute(executor, work)
    it, first, finished, tokens_at_end = sch.apply(work, d)
    events = []
    if not it.empty:
        t = now + d
        events += [("first", e, t) for e in first]
        events.append(("advance", t, energy / d if d > 0.0 else 0.0))
        sch.state.tokens_out += tokens_at_end
        for e in finished:
            sch.state.kv.free(e)
            events.append(("finish", e, t))
    return it, events


def _server_signature(srv):
    """Everything a scheduler can change, as plain data."""
    return (
        list(srv.waiting),
        list(srv.running),
        list(srv.kv_blocks),
        list(srv.generated),
        list(srv.prefill_done),
        list(srv.prefill_left),
        srv.kv_used,
        srv.waiting_tokens,
        srv.decode_context,
        srv.prefilling,
        [sorted(b) for b in srv.block_phase],
        srv.decode_steps,
        srv.tokens_out,
        srv.preemptions,
    )


def _outcome(u, cap, budget, order="fcfs", server=None):
    """Run one iteration at ``(cap, budget, order)`` on a copy of the env's server: what
    it did. ``server``: the server pickled (:func:`_frozen`), made once for the many
    settings tried at one epoch (a pickle round trip copies as deepcopy does, 20x faster)."""
    srv = pickle.loads(server if server is not None else _frozen(u))
    options = (
        {"decode_first": u.config.decode_first, "split_prompts": u.config.split_prompts}
        if u.config.scheduler == "chunked"
        else {}
    )
    sch = make_scheduler(u.config.scheduler, srv, u.executor.needs_sequences, **options)
    it, events = one_iteration(sch, sch.plan(cap, budget, order), u.executor, u.server.now)
    return it, events, _server_signature(srv)


def _frozen(u):
    """The env's server, pickled: :func:`_outcome` runs each setting on a copy of it."""
    return pickle.dumps(u.server.state, protocol=pickle.HIGHEST_PROTOCOL)


def _settings(u):
    return [(c, b) for b in u.server.budgets for c in u.server.grid]


@pytest.mark.parametrize(
    "memory,setting",
    [
        ("roomy", "default"),
        ("tight", "budgets"),
        ("tight", "v0-rules"),
        ("tight", "vllm-v0"),
        ("roomy", "budgets"),
    ],
)
def test_the_epoch_test_agrees_with_trying_every_action(memory, setting):
    """At every boundary of v1 episodes under random actions, the cheap test says "no
    decision" exactly when every action, run on a copy of the server, does the same."""
    kw = kwargs(workload="trace", memory=memory, setting=setting, n=120)
    kw["grid"] = kw.get("grid", [1, 2, 8, 32, 256])  # every cap of 1..256 would be slow
    env = make(V1, kw)
    u = env.unwrapped
    rng = np.random.default_rng(0)
    counts = {"epoch": 0, "forced": 0}
    for seed in (1, 2):
        env.reset(seed=seed)
        for step in range(20_000):
            if u.server.in_system and step % 3 == 0:
                srv = u.server.state
                before = _server_signature(srv)
                forced = u.server.forced_plan(u.server.cap, u.server.budget)
                assert _server_signature(srv) == before  # planning changed nothing
                frozen = _frozen(u)
                outcomes = [_outcome(u, c, b, server=frozen) for c, b in _settings(u)]
                same = all(o == outcomes[0] for o in outcomes)
                assert (forced is not None) == same, (seed, step, forced)
                counts["forced" if same else "epoch"] += 1
                if forced is not None:  # and the plan it returns is that iteration
                    sch = u.server.scheduler
                    assert forced.same_iteration(sch.plan(u.server.cap, u.server.budget))
            *_, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
            if trunc:
                break
    assert counts["epoch"] > 50 and counts["forced"] > 50, counts


# -- the same env as v1 ----------------------------------------------------------------------


def _random_on_epochs(seed):
    rng = np.random.default_rng(seed)

    def policy(obs, info, env):
        return int(rng.integers(env.action_space.n))

    return policy


def _run_v2(kw, seed, policy):
    """v2's episode: the action, observation and info at each epoch (by iterations run)."""
    env = make(V2, kw)
    u = env.unwrapped
    obs, info = env.reset(seed=seed)
    epochs, total, steps = {}, 0.0, 0
    while True:
        a = policy(obs, info, env)
        epochs[u.server.iterations] = (a, obs.copy(), info)
        obs, r, _, trunc, info = env.step(a)
        check_invariants(u)
        total += r
        steps += 1
        if trunc:
            return epochs, total, steps, info["serving"]


def _run_v1(kw, seed, epochs, policy, elsewhere):
    """v1's episode, the policy asked at v2's epochs only (it must choose as in v2, on the
    same observation), ``elsewhere`` playing every other boundary."""
    env = make(V1, kw)
    u = env.unwrapped
    obs, info = env.reset(seed=seed)
    total, steps, last = 0.0, 0, None
    while True:
        k = u.server.iterations
        if k in epochs:
            a2, obs2, info2 = epochs[k]
            a = last = policy(obs, info, env)
            assert a == a2, k
            yield k, obs, obs2, info, info2
        else:
            a = elsewhere(last, env)
        obs, r, _, trunc, info = env.step(a)
        total += r
        steps += 1
        if trunc:
            yield total, steps, info["serving"]
            return


def _elsewhere(kind):
    """What v1 plays where v2 asks nothing: random actions, or the last epoch's again."""
    other = np.random.default_rng(11)

    def play(last, env):
        if kind == "random":
            return int(other.integers(env.action_space.n))
        # before v2's first epoch its setting is the default: the largest cap and budget
        return env.action_space.n - 1 if last is None else last

    return play


def _state_info(info):
    """The info keys that describe the state at a boundary (not the step that led there)."""
    per_step = {"dt_s", "reward_components", "iterations", "serving"}
    return {k: v for k, v in info.items() if k not in per_step and k != "action_mask"}


@pytest.mark.parametrize("setting", ["budgets", "v0-rules"])  # decodes first, or prefills first
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("memory", list(MEMORY))
def test_a_policy_on_v2s_epochs_has_the_same_trajectory_in_v1(profile, workload, memory, setting):
    """Random actions at v2's epochs, the same actions in v1 there and random ones
    elsewhere: the observation at every epoch equal (but feature 9, the last cap, which
    v1's other actions set), the same reward total and an identical summary. Playing the
    epoch's action again elsewhere instead makes the observations and info identical."""
    kw = kwargs(profile, workload, memory, setting)
    for elsewhere_kind in ("random", "repeat"):
        epochs, total2, steps2, summary2 = _run_v2(kw, 3, _random_on_epochs(7))
        elsewhere = _elsewhere(elsewhere_kind)

        *rows, (total1, steps1, summary1) = _run_v1(kw, 3, epochs, _random_on_epochs(7), elsewhere)
        assert len(rows) == len(epochs) == steps2
        for _k, obs1, obs2, info1, info2 in rows:
            if elsewhere_kind == "random":
                keep = np.arange(obs1.size) != 9
                assert np.array_equal(obs1[keep], obs2[keep])
            else:
                assert np.array_equal(obs1, obs2)
                assert _state_info(info1) == _state_info(info2)
        assert json.dumps(summary1) == json.dumps(summary2)
        assert math.isclose(total1, total2, rel_tol=1e-9)
        assert steps1 > steps2


@pytest.mark.parametrize(
    "setting,policies",
    [
        ("default", [("static-cap", {}), ("static-cap", {"cap": 8})]),
        ("budgets", [("static-budget", {"budget": 512}), ("sarathi", {}), ("static-cap", {})]),
        ("v0-rules", [("static-cap", {}), ("static-cap", {"cap": 4})]),
        ("vllm-v0", [("static-cap", {"cap": 32})]),
    ],
)
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("memory", list(MEMORY))
def test_static_baselines_give_identical_summaries(setting, policies, profile, memory):
    """A fixed cap, a fixed budget and sarathi (whose action at a boundary where none
    matters changes nothing) give the same summaries in v1 and v2, on the same seeds."""
    kw = kwargs(profile, "trace", memory, setting)
    for name, params in policies:
        if name == "static-cap" and "cap" in params and params["cap"] > kw.get("max_num_seqs", 256):
            continue
        res = {}
        for env_id in (V1, V2):
            env = make(env_id, kw)
            res[env_id] = batch_env.evaluate(
                baselines.make(name, env, **params), env, n_episodes=2, seed=5
            )
        # every figure of every episode but the number of steps (v2's point) and the
        # return, a sum of fewer, larger rewards (equal up to rounding)
        e1, e2 = ([{**e, "steps": 0, "return": 0} for e in res[i].episodes] for i in (V1, V2))
        assert json.dumps(e1, default=str) == json.dumps(e2, default=str), name
        for a, b in zip(res[V1].episodes, res[V2].episodes, strict=True):
            assert math.isclose(a["return"], b["return"], rel_tol=1e-9)
        assert sum(e["steps"] for e in res[V2].episodes) < sum(e["steps"] for e in res[V1].episodes)


# -- fewer steps ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {},  # v1's defaults
        {  # LLMMemoryPressure-v0's problem, shorter
            "profile": "llama-2-7b-h100",
            "gpu_memory_utilization": 0.25,
            "workload": {"kind": "poisson", "rate_per_s": 3.0},
            "lengths": {"kind": "empirical", "dataset": "azure-conv-2023-gz"},
            "reward_weights": {"latency": 1.0, "energy": 0.0, "sla": 20.0, "drop": 20.0},
        },
    ],
    ids=["v1-defaults", "memory-pressure"],
)
def test_v2_takes_at_least_10x_fewer_steps_per_completed_request(kw):
    steps = {}
    for env_id in (V1, V2):
        env = make(env_id, {**kw, "horizon_requests": 400})
        env.reset(seed=1)
        n = 0
        a = env.action_space.n - 1
        while True:
            n += 1
            *_, trunc, info = env.step(a)
            if trunc:
                break
        steps[env_id] = n / info["serving"]["completed"]
    assert steps[V1] >= 10 * steps[V2], steps


def test_info_counts_the_iterations_and_reset_starts_at_an_epoch():
    """``info["iterations"]`` sums to v1's steps; reset runs the forced iterations before
    the first epoch (their cost is the first step's reward), so reset's state is one where
    the actions differ."""
    kw = kwargs(setting="default", n=100)
    env = make(V2, kw)
    u = env.unwrapped
    obs, info = env.reset(seed=4)
    assert u.server.forced_plan(u.server.cap, u.server.budget) is None
    ran = info["iterations"]
    while True:
        obs, r, _, trunc, info = env.step(0)
        ran += info["iterations"]
        assert info["iterations"] >= 1 and info["dt_s"] >= 0.0
        if trunc:
            break
        assert (
            u.server.forced_plan(u.server.cap, u.server.budget) is None
        )  # every step ends at an epoch
    assert ran == u.server.iterations
