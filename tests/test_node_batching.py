"""NodeBatching-v0: API checks, semantics, single-node equivalence, node profiles, lazy/graph."""

from __future__ import annotations

import copy
import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import baselines
import batch_env  # noqa: F401
from batch_env import evaluate
from batch_env.profiles.batch_profile import load as load_profile

NODE = "batch_env/NodeBatching-v0"
DYN = "batch_env/DynamicBatching-v0"


def make(**kw):
    kw.setdefault("workload", {"kind": "poisson", "load": 0.5})
    kw.setdefault("horizon_requests", 300)
    return gym.make(NODE, **kw)


class Tracer:
    """Executor wrapper: each handle is the list of request ids in the group."""

    def __init__(self, inner):
        self.inner = inner
        self.energy_source = inner.energy_source
        self.node_names = inner.node_names
        self.n_nodes = inner.n_nodes
        self.visits: dict[int, list[int]] = {}
        self.next_id = 0
        self.max_group = 0

    def reset(self, rng):
        self.inner.reset(rng)
        self.visits = {}
        self.next_id = 0

    def new_group(self, b):
        ids = list(range(self.next_id, self.next_id + b))
        self.next_id += b
        for i in ids:
            self.visits[i] = []
        return ids

    def merge_groups(self, older, newer):
        assert max(older) < min(newer), "merges keep arrival order"
        return older + newer

    def run_node(self, node, b, group):
        assert len(group) == b
        self.max_group = max(self.max_group, b)
        for i in group:
            self.visits[i].append(node)
        return self.inner.run_node(node, b, None)


def test_check_env_and_registration():
    env = make()
    check_env(env.unwrapped, skip_render_check=True)
    assert NODE in batch_env.ENV_IDS
    assert env.action_space.n == 2 * (32 + 1)
    assert env.unwrapped.node_names[0] == "stem" and len(env.unwrapped.node_names) == 18


def run_random(env, seed, policy_seed):
    rng = np.random.default_rng(policy_seed)
    obs, info = env.reset(seed=seed)
    traj = [obs.tobytes()]
    while True:
        a = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, r, term, trunc, info = env.step(a)
        traj.append((obs.tobytes(), r))
        if trunc:
            return traj, info


def test_determinism_same_seed():
    kw = dict(service="lognormal", service_cv=0.3, decision_interval_ms=1.0)
    a, _ = run_random(make(**kw), 7, 1)
    b, _ = run_random(make(**kw), 7, 1)
    c, _ = run_random(make(**kw), 8, 1)
    assert a == b
    assert a != c


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    load=st.sampled_from([0.2, 0.6, 1.3]),
    B=st.sampled_from([1, 3, 8, 32]),
    cap=st.sampled_from([5, 2000]),
    bias=st.floats(0.0, 1.0),
)
def test_properties_random_policy(seed, load, B, cap, bias):
    """Conservation, node order, group limits and ordering under arbitrary (incl. clipped) actions."""
    env = make(
        max_batch_size=B,
        queue_capacity=cap,
        workload={"kind": "poisson", "load": load},
        decision_interval_ms=0.7,
        horizon_requests=120,
        service="lognormal",
        service_cv=0.4,
    )
    core = env.unwrapped
    tracer = Tracer(core.executor)
    core.executor = tracer
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    N = core._N
    while True:
        if rng.random() < bias:
            a = int(rng.integers(env.action_space.n))  # anything in the space, maybe clipped
        else:
            a = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, r, term, trunc, info = env.step(a)
        assert env.observation_space.contains(obs)
        groups = info["groups"]
        assert sum(g[1] for g in groups) == info["in_flight"] <= B
        nodes = [g[0] for g in groups]
        assert nodes == sorted(nodes) and len(set(nodes)) == len(
            nodes
        )  # least-advanced first, strictly
        assert core._arrived == core.completed + info["queue_len"] + info["in_flight"] + core.drops
        m = info["action_mask"]
        assert m[0] and m.sum() >= 2 or trunc  # never a forced move at a decision epoch
        if trunc:
            break
    assert tracer.max_group <= B
    done = core.completed
    for rid, visits in tracer.visits.items():
        if rid < done:
            assert visits == list(range(N)), (rid, visits)
        else:
            assert visits == list(range(len(visits)))


@pytest.mark.parametrize("service", ["deterministic", "lognormal"])
@pytest.mark.parametrize("profile", ["resnet50-v100-linear", "resnet50-p4-linear"])
def test_single_node_reproduces_dynamic_batching(service, profile):
    kw = dict(
        profile=profile,
        workload={"kind": "poisson", "load": 0.7},
        service=service,
        service_cv=0.3,
        decision_interval_ms=1.0,
        horizon_requests=1000,
        max_batch_size=16,
    )
    e1, e2 = gym.make(DYN, **kw), gym.make(NODE, **kw)
    assert e2.unwrapped.node_names == ("model",)
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        o1, i1 = e1.reset(seed=seed)
        o2, i2 = e2.reset(seed=seed)
        steps = 0
        while True:
            a = int(rng.choice(np.flatnonzero(i1["action_mask"])))
            assert i2["action_mask"][a]
            o1, r1, _, t1, i1 = e1.step(a)
            o2, r2, _, t2, i2 = e2.step(a)
            steps += 1
            assert (r1, t1, i1["now_s"], i1["queue_len"]) == (r2, t2, i2["now_s"], i2["queue_len"])
            assert i1["reward_components"] == i2["reward_components"]
            if t1:
                break
        assert steps > 50
        assert i1["serving"] == i2["serving"]


def test_masks_and_action_errors():
    env = make(max_batch_size=4, decision_interval_ms=1.0)
    core = env.unwrapped
    obs, info = env.reset(seed=0)
    m = info["action_mask"]
    # nothing in flight, one waiting: wait or admit 1, only d = 0 (one group after admission)
    assert np.flatnonzero(m).tolist() == [0, 1]
    with pytest.raises(ValueError, match="out of range"):
        env.step(10)
    with pytest.raises(ValueError, match="invalid"):
        env.step(1.5)
    obs, r, _, _, info = env.step(5 + 1)  # d = 1 with one group: run as d = 0, flagged
    assert info["clipped_action"]
    assert np.array_equal(core.action_masks(), info["action_mask"])


def test_d_chooses_least_or_most_advanced():
    env = make(max_batch_size=8, workload={"kind": "poisson", "load": 0.9}, horizon_requests=2000)
    core = env.unwrapped
    obs, info = env.reset(seed=3)
    B1 = 9
    seen = 0
    for _ in range(3000):
        groups = info["groups"]
        if len(groups) >= 2:
            before = [g[0] for g in groups]
            d = seen % 2
            obs, r, _, trunc, info = env.step(d * B1)
            moved = core._last_node
            assert moved == (before[0] if d == 0 else before[-1])
            seen += 1
        else:
            obs, r, _, trunc, info = env.step(int(np.flatnonzero(info["action_mask"])[-1] % B1))
        if trunc:
            break
    assert seen > 20


def test_lazy_prediction_matches_env_without_admissions():
    """The exact slack prediction equals the time the env takes to finish the groups in flight."""
    env = make(max_batch_size=16, workload={"kind": "poisson", "load": 0.8})
    lazy = baselines.make("lazy", env)
    obs, info = env.reset(seed=2)
    checked = 0
    for _ in range(400):
        if len(info["groups"]) >= 2:
            core = env.unwrapped
            n_target = core.completed + info["in_flight"]
            pred = info["now_s"] + lazy.predict_remaining_s(info["groups"], 0)
            while core.completed < n_target:
                obs, r, _, trunc, info = env.step(0)
            assert core._comp[-1] == pytest.approx(pred, rel=1e-9)
            checked += 1
            if checked >= 5:
                break
        obs, r, _, trunc, info = env.step(lazy.act(obs, info))
    assert checked >= 5


def test_lazy_never_admits_against_its_own_prediction():
    env = make(
        workload={"kind": "poisson", "load": 0.7}, horizon_requests=1500, decision_interval_ms=0.5
    )
    for slack in ("exact", "conservative"):
        lazy = baselines.make("lazy", env, slack=slack)
        lazy.reset()
        obs, info = env.reset(seed=0)
        admitted, refused = 0, 0
        while True:
            a = lazy.act(obs, info)
            kmax = min(info["queue_len"], 32 - info["in_flight"])
            if info["in_flight"] and not lazy.throughput_mode:
                if a > 0:
                    assert lazy.admissible(info["groups"], a)
                    admitted += 1
                if a < kmax:
                    refused += 1
            obs, r, _, trunc, info = env.step(a)
            if trunc:
                break
        assert admitted > 50 and refused > 50, (slack, admitted, refused)


def test_lazy_beats_graph_window_at_light_load():
    """At light load, LazyBatching's mean latency is at least 2x lower than 10 ms graph batching's."""
    env = make(
        workload={"kind": "poisson", "load": 0.05}, decision_interval_ms=0.5, horizon_requests=1000
    )
    lazy = evaluate(baselines.make("lazy", env), env, n_episodes=3)
    graph = evaluate(baselines.make("graph", env, window_ms=10), env, n_episodes=3)
    ratio = graph.mean("latency_mean_ms") / lazy.mean("latency_mean_ms")
    assert ratio >= 2.0, ratio
    assert lazy.mean("sla_attainment") >= graph.mean("sla_attainment") - 1e-9


def test_graph_policy_is_triton_in_dynamic_env_and_never_interleaves():
    kw = dict(
        workload={"kind": "poisson", "load": 0.4}, decision_interval_ms=0.5, horizon_requests=400
    )
    dyn = gym.make(DYN, **kw)
    g = baselines.make("graph", dyn, window_ms=3)
    t = baselines.make("timeout", dyn, max_queue_delay_ms=3)
    a = evaluate(g, dyn, n_episodes=2)
    b = evaluate(t, dyn, n_episodes=2)
    assert a.episodes == b.episodes or [e["reward_rate_per_s"] for e in a.episodes] == [
        e["reward_rate_per_s"] for e in b.episodes
    ]
    env = make(**kw)
    g = baselines.make("graph", env, window_ms=3)
    obs, info = env.reset(seed=0)
    while True:
        a = g.act(obs, info)
        assert len(info["groups"]) <= 1
        if info["in_flight"]:
            assert a == 0
        obs, r, _, trunc, info = env.step(a)
        if trunc:
            break
    with pytest.raises(ValueError, match="decision_interval_ms"):
        baselines.make("graph", make(), window_ms=3)


def test_lazy_errors():
    with pytest.raises(ValueError, match="slack"):
        baselines.make("lazy", make(), slack="loose")
    with pytest.raises(ValueError, match="node-level"):
        baselines.make("lazy", gym.make(DYN))


# -- node tables in profiles --------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["resnet50-v100", "resnet50-p4", "resnet50-t4-trt", "resnet50-a100-trt", "bert-base-t4"]
)
def test_shipped_node_tables_sum_to_end_to_end(name):
    p = load_profile(name)
    assert p.n_nodes == (18 if name.startswith("resnet") else 14)
    B = p.batch_sizes[-1]
    lat, en = p.node_tables(B)
    e2e_lat, e2e_en = p.tables(B)
    assert lat.shape == (p.n_nodes, B + 1)
    np.testing.assert_allclose(lat.sum(0)[1:], e2e_lat[1:], rtol=0.01)
    np.testing.assert_allclose(en.sum(0)[1:], e2e_en[1:], rtol=0.01)
    assert p.node_rule


def _resnet_dict():
    return copy.deepcopy(load_profile("resnet50-v100").raw)


def test_node_table_validation_errors():
    d = _resnet_dict()
    d["nodes"]["latency_ms"][0] = [x * 3 for x in d["nodes"]["latency_ms"][0]]
    with pytest.raises(ValueError, match="nodes.latency_ms.*disagrees.*batch size 1"):
        load_profile(d)
    d = _resnet_dict()
    d["nodes"]["latency_ms"] = d["nodes"]["latency_ms"][:-1]
    with pytest.raises(ValueError, match="nodes.latency_ms"):
        load_profile(d)
    d = _resnet_dict()
    d["nodes"]["names"][1] = "stem"
    with pytest.raises(ValueError, match="nodes.names"):
        load_profile(d)
    d = _resnet_dict()
    d["nodes"]["latency_ms"][2][3] = float("nan")
    with pytest.raises(ValueError, match="latency_ms.*3"):
        load_profile(d)
    d = _resnet_dict()
    del d["nodes"]["rule"]
    with pytest.raises(ValueError, match="nodes.rule"):
        load_profile(d)
    d = _resnet_dict()
    d["nodes"]["latency_ms"][0] = [x * 1.5 for x in d["nodes"]["latency_ms"][0]]
    d["nodes"]["tolerance"] = 0.2  # a measured profile may declare a looser tolerance
    assert load_profile(d).n_nodes == 18
    lin = json.loads(json.dumps(load_profile("resnet50-v100-linear").raw))
    lin["nodes"] = _resnet_dict()["nodes"]
    with pytest.raises(ValueError, match="nodes"):
        load_profile(lin)


# -- AdmitFraction: fractions of what can be admitted ------------------------------------


@pytest.mark.parametrize("env_id", [NODE, DYN])
def test_admit_fraction_maps_to_valid_actions(env_id):
    """Every fraction action maps to a valid env action: ``ceil(f x kmax)`` admitted,
    ``kmax`` the largest valid ``k``; ``d = 1`` kept only where the env allows it."""
    import math

    from batch_env.wrappers import ADMIT_LEVELS, AdmitFraction

    B = 8
    env = AdmitFraction(
        gym.make(
            env_id,
            max_batch_size=B,
            workload={"kind": "poisson", "load": 0.8},
            horizon_requests=1500,
            decision_interval_ms=0.5,
        )
    )
    L = len(ADMIT_LEVELS)
    assert env.action_space.n == (2 * L if env_id == NODE else L)
    core = env.unwrapped
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=4)
    kinds = set()
    for _ in range(4000):
        mask = core.action_masks()
        kmax = int(np.flatnonzero(mask[: B + 1])[-1])
        a = int(rng.integers(env.action_space.n))
        d, i = divmod(a, L)
        env_a = env.action(a)
        assert mask[env_a]
        assert env_a % (B + 1) == math.ceil(ADMIT_LEVELS[i] * kmax - 1e-9)
        assert env_a // (B + 1) == (d if mask[(B + 1) * d + env_a % (B + 1)] else 0)
        kinds.add((d, env_a // (B + 1)))
        assert env.action_from_info(a, info) == env_a
        _, _, _, trunc, info = env.step(a)
        assert not info["clipped_action"]
        if trunc:
            _, info = env.reset(seed=int(rng.integers(1000)))
    if env_id == NODE:  # both choices of d, and d = 1 falling back to 0, were exercised
        assert kinds == {(0, 0), (1, 1), (1, 0)}
    assert env.action_masks().all() and len(env.action_masks()) == env.action_space.n


def test_admit_fraction_all_then_most_advanced_is_graph_batching_without_window():
    """ "Admit all, advance the most advanced group", one fixed action, runs exactly the
    schedule of graph batching with no window (the same latency for every request)."""
    from batch_env.wrappers import ADMIT_LEVELS, AdmitFraction

    L = len(ADMIT_LEVELS)

    class AllMostAdvanced:
        name = "all-d1"

        def reset(self):
            pass

        def act(self, obs, info):
            return wrapper.action_from_info(2 * L - 1, info)

    kw = dict(
        workload={"kind": "poisson", "load": 0.7}, horizon_requests=3000, decision_interval_ms=0.5
    )
    env = make(**kw)
    wrapper = AdmitFraction(make(**kw))
    graph0 = baselines.make("graph", env=env, window_ms=0)
    a = evaluate(AllMostAdvanced(), env, n_episodes=2, seed=11).episodes
    b = evaluate(graph0, env, n_episodes=2, seed=11).episodes
    for x, y in zip(a, b, strict=True):  # every measured request's latency is the same
        for key in ("latency_mean_ms", "latency_p50_ms", "latency_p99_ms", "sla_attainment"):
            assert x[key] == pytest.approx(y[key], rel=1e-12), key
        # the episode ends at the first decision epoch after its last measured completion;
        # admitting during a run makes epochs the graph policy does not have, so the
        # clock stops up to a node's time apart (energy, cost rate: within 0.1%)
        for key in ("energy_per_request_j", "reward_rate_per_s"):
            assert x[key] == pytest.approx(y[key], rel=1e-3), key


def test_admit_fraction_errors():
    from batch_env.wrappers import AdmitFraction

    for bad in ([0.5], [0, 1.5], [0.5, 0.2], "ab", [0, float("nan")]):
        with pytest.raises(
            ValueError, match="levels=.* is invalid: expected at least two increasing"
        ):
            AdmitFraction(make(), levels=bad)
    env = AdmitFraction(make())
    env.reset(seed=0)
    for bad in (10, -1, 1.5, True):
        with pytest.raises(
            ValueError, match=r"action=.* is out of range: expected an integer in 0\.\.9"
        ):
            env.step(bad)
    with pytest.raises(
        ValueError, match="AdmitFraction needs a DynamicBatching-v0 or NodeBatching-v0"
    ):
        AdmitFraction(gym.make("CartPole-v1"))


def test_the_public_views_of_the_queue_and_the_groups():
    """past_sla_waiting counts the waiting requests already older than the SLA, and
    groups_in_flight the batches part-way through the model (what scripts/render_frames
    reads instead of the env's private state)."""
    import numpy as np

    from batch_env.envs.dynamic_batching import DynamicBatchingEnv
    from batch_env.envs.node_batching import NodeBatchingEnv

    env = DynamicBatchingEnv(workload={"kind": "poisson", "load": 0.8})
    env.reset(seed=7)
    seen = set()
    for _ in range(3000):
        if env.step(16 if env.queue_len >= 16 else 0)[3]:
            break
        ages = env.unwrapped.now - np.asarray(env.arrivals[env.started :])
        assert env.past_sla_waiting() == int(np.sum(ages > env.get_config()["sla_ms"] / 1000))
        seen.add(env.past_sla_waiting() > 0)
    assert seen == {True, False}
    node = NodeBatchingEnv(workload={"kind": "poisson", "load": 0.8})
    node.reset(seed=3)
    rng = np.random.default_rng(3)
    counts = set()
    for _ in range(800):
        if node.step(int(rng.choice(np.flatnonzero(node.action_masks()))))[3]:
            break
        counts.add(node.groups_in_flight)
        assert node.groups_in_flight == len(node._groups)
    assert max(counts) >= 2
