"""The admission order as a control of LLMBatching-v2: FCFS keeps v1's semantics, every
order keeps the scheduler's invariants, each admits what it says, the epoch test holds
with orders, and an order that starves a class still ends the episode, visibly."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
from test_llm_v2 import _frozen, _outcome, _server_signature, check_invariants, kwargs

V1, V2 = "batch_env/LLMBatching-v1", "batch_env/LLMBatching-v2"
ORDERS = ["fcfs", "edf", "shortest-prompt", "class-priority"]
CLASSES = [
    {"name": "chat", "share": 0.7},
    {
        "name": "batch",
        "share": 0.3,
        "ttft_sla_ms": 20_000.0,
        "tpot_sla_ms": 200.0,
        "weight": 0.1,
        "lengths": {
            "kind": "lognormal",
            "prompt_tokens": 2500,
            "prompt_cv": 0.3,
            "output_tokens": 300,
        },
    },
]


def make(env_id, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(env_id, **kw)


def _sizes(u):
    return len(u.server.grid), len(u.server.budgets), len(u.server.orders)


@pytest.mark.parametrize("memory", ["roomy", "tight"])
@pytest.mark.parametrize("workload", ["poisson", "trace"])
def test_fcfs_in_a_v2_with_orders_is_v1(memory, workload):
    """In a v2 offering four orders, random caps and budgets with FCFS at its epochs, the
    same caps and budgets in v1 there and random ones elsewhere: the same observation at
    every epoch (but the last cap), the same summary."""
    kw = kwargs(workload=workload, memory=memory, setting="budgets")
    env2 = make(V2, **kw, orders=ORDERS)
    u2 = env2.unwrapped
    ng, nb, _ = _sizes(u2)
    rng = np.random.default_rng(3)
    obs, info = env2.reset(seed=2)
    epochs = {}
    while True:
        a = int(rng.integers(ng * nb))  # order index 0: fcfs
        epochs[u2.server.iterations] = (a, obs.copy())
        obs, _, _, trunc, info2 = env2.step(a)
        if trunc:
            break
    env1 = make(V1, **kw)
    u1 = env1.unwrapped
    obs, _ = env1.reset(seed=2)
    other = np.random.default_rng(5)
    while True:
        k = u1.server.iterations
        if k in epochs:
            a, obs2 = epochs[k]
            keep = np.arange(obs.size) != 9
            assert np.array_equal(obs[keep], obs2[keep]), k
        else:
            a = int(other.integers(env1.action_space.n))
        obs, _, _, trunc, info1 = env1.step(a)
        if trunc:
            break
    assert json.dumps(info1["serving"]) == json.dumps(info2["serving"])


@pytest.mark.parametrize("setting", ["budgets", "v0-rules", "vllm-v0"])
def test_the_epoch_test_agrees_with_trying_every_action_with_orders(setting):
    """As test_llm_v2's, with four orders and two classes: the cheap test says "no
    decision" exactly when every (cap, budget, order), run on a copy of the server, does
    the same."""
    kw = kwargs(workload="poisson", memory="tight", setting=setting, n=60)
    kw["grid"] = [1, 32, 256]  # every (cap, budget, order) is run on a copy: keep them few
    kw["classes"] = CLASSES
    env = make(V2, **kw, orders=ORDERS)
    u = env.unwrapped
    ng, nb, no = _sizes(u)
    rng = np.random.default_rng(1)
    counts = {"epoch": 0, "forced": 0}
    env.reset(seed=3)
    # walk v2's boundaries one iteration at a time (v1's stepping on v2's server)
    for step in range(4000):
        if u.server.in_system and step % 5 == 0:
            before = _server_signature(u.server.state)
            forced = u.server.forced_plan(u.server.cap, u.server.budget)
            assert _server_signature(u.server.state) == before
            outcomes = []
            frozen = _frozen(u)
            for a in range(ng * nb * no):
                cap, budget, order = (
                    u.server.grid[a % ng],
                    u.server.budgets[(a // ng) % nb],
                    u.server.orders[a // (ng * nb)],
                )
                outcomes.append(_outcome(u, cap, budget, order, server=frozen))
            same = all(o == outcomes[0] for o in outcomes)
            assert (forced is not None) == same, step
            counts["forced" if same else "epoch"] += 1
        # one iteration at a random setting (v1's step, which v2 inherits)
        trunc = _one_iteration(u, int(rng.integers(env.action_space.n)))
        if trunc:  # another episode
            env.reset(seed=4 + step)
    assert counts["epoch"] > 30 and counts["forced"] > 30, counts


def _one_iteration(u, a):
    """One iteration of ``u`` at action ``a`` (v1's step, run on the v2 instance)."""
    from batch_env.envs.llm_batching import LLMBatchingV1Env

    *_, trunc, _ = LLMBatchingV1Env.step(u, a)
    return trunc


@pytest.mark.parametrize("order", ORDERS + ["srpt"])
def test_every_order_keeps_the_invariants_and_admits_what_it_says(order):
    """Under each order, at every iteration: the budget (decodes included) and the cap on
    admissions hold, KV in use never exceeds the cache, decodes are never starved (every
    request whose prefill was complete decodes unless preempted), and the waiting requests
    admitted first are the order's first; requests and tokens are conserved."""
    kw = kwargs(workload="poisson", memory="tight", setting="budgets", n=150)
    kw["classes"] = CLASSES
    env = make(V2, **kw, orders=[order], oracle_info=order == "srpt")
    u = env.unwrapped
    srv, sch = u.server.state, u.server.scheduler
    start = sch.start
    seen = {"iterations": 0, "admitted_first": 0}

    def checked_start(plan):
        waiting = list(srv.waiting)
        decoding = srv.decoding()
        running = len(srv.running)
        budget, cap = u.server.budget, u.server.cap
        new = [e for e, _c, x, _nb in plan.chunks if x == 0 and e in waiting]
        if new:  # the first admitted is the order's first waiting request
            key = {
                "fcfs": lambda e: waiting.index(e),
                "edf": lambda e: (srv.ttft_deadline[e], waiting.index(e)),
                "shortest-prompt": lambda e: (srv.context(e), waiting.index(e)),
                "class-priority": lambda e: (srv.request_class[e], waiting.index(e)),
                "srpt": lambda e: (srv.output[e] - srv.generated[e], waiting.index(e)),
            }[order]
            assert new[0] == min(waiting, key=key)
            seen["admitted_first"] += 1
        # decodes first (decode_first): every decoding request decodes unless preempted
        assert plan.decodes == len(set(decoding) - set(plan.victims))
        assert len(new) <= max(cap - (running - len(plan.victims)), 0)  # the cap's room
        work = start(plan)
        assert sum(c for _, c, _, _ in plan.chunks) + len(work.decoding) <= budget
        assert srv.kv_used <= srv.kv_total
        seen["iterations"] += 1
        return work

    sch.start = checked_start
    env.reset(seed=4)
    rng = np.random.default_rng(0)
    while True:
        *_, trunc, info = env.step(int(rng.integers(env.action_space.n)))
        check_invariants(u)
        if trunc:
            break
    assert seen["iterations"] > 500 and seen["admitted_first"] > 50, seen
    # the episode ends on its work, or at its time horizon (shortest-prompt first can
    # starve the long prompts of random actions' small caps)
    assert info["serving"]["completed"] == 150 or info["now_s"] >= u.horizon_s


def test_srpt_needs_the_oracle():
    with pytest.raises(ValueError, match="oracle_info=True"):
        make(V2, orders=["fcfs", "srpt"])
    env = make(
        V2, orders=["srpt"], oracle_info=True, workload={"kind": "poisson", "rate_per_s": 20.0}
    )
    _, info = env.reset(seed=0)
    rem = info["oracle"]["waiting_remaining_output"]
    u = env.unwrapped
    assert rem == [
        u.server.state.output[e] - u.server.state.generated[e] for e in u.server.state.waiting
    ]


@pytest.mark.parametrize(
    "orders,match",
    [(["lifo"], r"orders\[0\]='lifo'"), ([], "non-empty"), (["fcfs", "fcfs"], "distinct")],
)
def test_bad_orders_are_named(orders, match):
    with pytest.raises(ValueError, match=match):
        make(V2, orders=orders)


def test_an_order_that_starves_a_class_ends_the_episode_and_shows_it():
    """Class priority under overload with a small cap: the second class waits behind the
    first; the episode still ends (at its time horizon), and the per-class figures show
    the starved class."""
    env = make(
        V2,
        classes=[{"name": "first", "share": 0.5}, {"name": "second", "share": 0.5}],
        orders=["class-priority"],
        grid=[4],
        workload={"kind": "poisson", "rate_per_s": 12.0},
        horizon_requests=200,
        horizon_s=120.0,
    )
    _, _, _, trunc, info = None, None, None, False, None
    env.reset(seed=1)
    steps = 0
    while not trunc:
        *_, trunc, info = env.step(0)
        steps += 1
        assert steps < 100_000
    by = info["serving"]["classes"]
    assert info["now_s"] >= 120.0 or info["serving"]["completed"] == 200
    first, second = by["first"], by["second"]
    assert second["completed"] < 0.5 * first["completed"], by
    # the starved: its requests still in the system at the end, most of its own
    assert second["in_system_at_end"] == second["requests"] - second["completed"]
    assert second["in_system_at_end"] > 0.5 * second["requests"] > 0, by
    assert first["in_system_at_end"] < second["in_system_at_end"]


@pytest.mark.parametrize(
    "name,order",
    [
        ("edf", "edf"),
        ("shortest-prompt", "shortest-prompt"),
        ("class-priority", "class-priority"),
        ("oracle-srpt", "srpt"),
    ],
)
def test_order_baselines_play_their_order_with_sarathis_budget(name, order):
    import baselines

    kw = {
        "classes": CLASSES,
        "orders": ORDERS + ["srpt"],
        "oracle_info": True,
        "budget_grid": [256, 512, 1024, 2048],
        "workload": {"kind": "poisson", "rate_per_s": 5.0},
        "horizon_requests": 60,
    }
    env = make(V2, **kw)
    policy = baselines.make(name, env)
    sarathi = baselines.make("sarathi", env)
    obs, info = env.reset(seed=0)
    n = 0
    while True:
        a = policy.act(obs, info)
        # sarathi's budget and the largest cap, with its own order
        assert a % (4 * 256) == sarathi.act(obs, info) % (4 * 256)
        obs, _, _, trunc, info = env.step(a)
        assert info["order"] == order
        n += 1
        if trunc:
            break
    assert n > 10
    with pytest.raises(ValueError, match=f"admits in the order '{order}'"):
        baselines.make(name, make(V2, **{**kw, "orders": ["fcfs"]}))
    if name == "oracle-srpt":
        assert policy.realizable is False


def test_fixed_budgets_and_orders_of_the_tuned_llm_references():
    """``static-budget`` takes an order and an order policy a fixed budget (the grids the
    LLM tasks' tuned references search); a budget or an order the env's actions cannot
    select is named."""
    import baselines

    kw = {
        "orders": ["fcfs", "shortest-prompt", "srpt"],
        "oracle_info": True,
        "budget_grid": [256, 512, 1024, 2048],
        "workload": {"kind": "poisson", "rate_per_s": 5.0},
        "horizon_requests": 40,
    }
    env = make(V2, **kw)
    grid = len(env.unwrapped.server.grid)
    obs, info = env.reset(seed=1)
    for name, params, budget, order in (
        ("static-budget", {"budget": 512, "order": "shortest-prompt"}, 512, "shortest-prompt"),
        ("static-budget", {"budget": 2048}, 2048, "fcfs"),
        ("shortest-prompt", {"budget": 256}, 256, "shortest-prompt"),
        ("oracle-srpt", {"budget": 1024}, 1024, "srpt"),
    ):
        a = baselines.make(name, env, **params).act(obs, info)
        cap_i, rest = a % grid, a // grid
        assert env.unwrapped.server.grid[cap_i] == max(env.unwrapped.server.grid)
        assert env.unwrapped.server.budgets[rest % 4] == budget
        assert env.unwrapped.server.orders[rest // 4] == order
    with pytest.raises(ValueError, match="order='edf' is not an order the env's actions"):
        baselines.make("static-budget", env, budget=512, order="edf")
    with pytest.raises(ValueError, match="budget=300 is not a budget the env's actions"):
        baselines.make(
            "edf", make(V2, **{**kw, "orders": ["edf"], "oracle_info": False}), budget=300
        )


@pytest.mark.parametrize("seed", range(3))
def test_the_waiting_queues_indexes_agree_with_sorting_it(seed):
    """Random arrivals, preemptions back to the head and admissions from anywhere (head
    and middle, as the orders admit), in phases that grow and drain the queue: at every
    point, each order's first ``room`` entries are the queue sorted by (key, place in the
    queue), each class's count and first entry are the queue's own, the queue itself is
    the deque it replaces, and no index holds more than twice the queue (stale entries
    are dropped). One order's index is built only halfway, on a queue with a history."""
    from collections import deque

    from batch_env.llm.orders import candidates, leave_queue
    from batch_env.llm.state import LLMServerState

    rng = np.random.default_rng(seed)
    s = LLMServerState(block_size=16, kv_total=1000, kv_watermark=0)
    model: deque[int] = deque()
    outside: list[int] = []  # admitted entries, which may be preempted back
    keys = {
        "edf": lambda e: s.ttft_deadline[e],
        "shortest-prompt": lambda e: s.prompt[e] + s.generated[e],
        "class-priority": lambda e: s.request_class[e],
        "srpt": lambda e: s.output[e] - s.generated[e],
    }
    s.waiting.by_class(3)  # the per-class index from the start
    n_steps = 1600
    for step in range(n_steps):
        asked = [o for o in keys if o != "srpt" or step >= n_steps // 2]
        grow = (step // 200) % 2 == 0
        u = rng.random()
        if u < (0.45 if grow else 0.12) or not model:  # arrivals (a few at once)
            k = int(rng.integers(1, 4))
            n0 = s.admit(
                [int(x) for x in rng.integers(1, 50, k)],
                [int(x) for x in rng.integers(1, 50, k)],
                [int(x) for x in rng.integers(0, 3, k)],
                [float(x) for x in rng.integers(0, 20, k)],  # ties on purpose
            )
            model.extend(range(n0, n0 + k))
        elif u < 0.6 and outside:  # preempted back to the head, having generated some
            k = min(len(outside), int(rng.integers(1, 3)))
            victims = [outside.pop() for _ in range(k)]
            for v in victims:
                s.generated[v] = int(rng.integers(0, s.output[v]))
            s.waiting.extendleft(victims)
            model.extendleft(victims)
        else:  # admissions: the first of some order, or one at random
            order = str(rng.choice(["fcfs", *asked]))
            pick = (
                next(iter(candidates(s, 1, order)))
                if rng.random() < 0.7
                else int(rng.choice(list(model)))
            )
            leave_queue(s, pick)
            model.remove(pick)
            outside.append(pick)
        assert list(s.waiting) == list(model) and len(s.waiting) == len(model)
        if model:
            assert s.waiting[0] == model[0]
        place = {e: i for i, e in enumerate(model)}
        for order in asked:
            key = keys[order]
            room = int(rng.integers(1, len(model) + 3))
            want = sorted(model, key=lambda e, key=key: (key(e), place[e]))[:room]
            assert list(candidates(s, room, order)) == want, (step, order)
        assert list(candidates(s, 5, "fcfs")) == list(model)[:5]
        counts, first = s.waiting.by_class(3)
        for c in range(3):
            mine = [e for e in model if s.request_class[e] == c]
            assert counts[c] == len(mine)
            assert first[c] == (mine[0] if mine else -1)
        for heap in s.waiting._heaps.values():
            assert len(heap) <= 2 * len(model) + 33


def test_order_features_show_what_each_order_would_admit():
    """``order_features=True``: two features per order after the class features, the
    first waiting request in that order (by sorting the queue), its tokens to prefill /
    the budget and its age / its class's TTFT SLA; 0 when none waits. Off, the
    observation is the same without them, and the trajectory does not change."""
    kw = kwargs(workload="poisson", memory="tight", setting="budgets", n=120)
    kw["classes"] = CLASSES
    on = make(V2, **kw, orders=ORDERS, order_features=True)
    off = make(V2, **kw, orders=ORDERS)
    u = on.unwrapped
    n_extra = 2 * len(ORDERS)
    assert on.observation_space.shape[0] == off.observation_space.shape[0] + n_extra
    o1, _ = on.reset(seed=5)
    o0, _ = off.reset(seed=5)
    rng = np.random.default_rng(1)
    seen = 0
    for _ in range(600):
        a = int(rng.integers(on.action_space.n))
        o1, r1, _, t1, _ = on.step(a)
        o0, r0, _, t0, _ = off.step(a)
        assert np.array_equal(o1[:-n_extra], o0) and r1 == r0 and t1 == t0
        srv = u.server.state  # the same object at every step
        waiting = list(srv.waiting)
        keys = {
            "fcfs": lambda e: 0,
            "edf": srv.ttft_deadline.__getitem__,
            "shortest-prompt": srv.context,
            "class-priority": srv.request_class.__getitem__,
        }
        for k, order in enumerate(ORDERS):
            got = o1[-n_extra + 2 * k : len(o1) - n_extra + 2 * k + 2]
            if not waiting:
                assert got.tolist() == [0.0, 0.0]
                continue
            key = keys[order]
            h = min(waiting, key=lambda e, key=key: (key(e), waiting.index(e)))
            ttft = CLASSES[srv.request_class[h]].get("ttft_sla_ms", kw.get("ttft_sla_ms", 1000.0))
            want = [
                min(srv.context(h) / u.server.config.max_num_batched_tokens, 100.0),
                min((u.server.now - u.server.arrivals[h]) / (ttft / 1000.0), 100.0),
            ]
            np.testing.assert_allclose(got, np.float32(want), rtol=1e-6)
            seen += 1
        if t1:
            break
    assert seen > 100
    with pytest.raises(ValueError, match="order_features='yes' is invalid"):
        make(V2, **kw, order_features="yes")
