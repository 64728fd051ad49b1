"""The routers of LLMRouting-v0 (issue 66) on hand-made states: each one's rule as its
source states it (docs/routers.md), masks respected; and LLMRouting-v0 itself: the env
checker, rewards that add up to the episode's cost, conservation, bad input."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import baselines
from baselines.routers import ROUTERS

ROUTING = "batch_env/LLMRouting-v0"


def view(n=4, **cols):
    """A hand-made ``info`` for ``n`` replicas: idle, empty caches, 16-token blocks, a
    1,600-token prompt (100 blocks); ``cols`` replaces columns."""
    v = {
        "waiting": np.zeros(n, int),
        "running": np.zeros(n, int),
        "in_flight": np.zeros(n, int),
        "kv_usage": np.zeros(n),
        "kv_blocks_used": np.zeros(n, int),
        "cached_fraction": np.zeros(n),
        "cached_blocks": np.zeros(n, int),
        "prefix_blocks": np.zeros(n, int),
        "request_blocks": np.full(n, 100),
        "block_size": np.full(n, 16),
        "prefill_tokens": np.zeros(n, int),
        "ttft_recent_s": np.zeros(n),
        "speed": np.full(n, 1000.0),
        "max_num_seqs": np.full(n, 256),
        "mask": np.ones(n, bool),
    }
    v.update({k: np.asarray(x) for k, x in cols.items()})
    return {"replicas": v, "prompt_tokens": 1600, "request_class": 0}


def router(name, **params):
    r = baselines.make(name, **params)
    r.reset(seed=0)
    return r


def test_round_robin_cycles_and_passes_over_masked_replicas():
    r = router("round-robin")
    assert [r.act(None, view()) for _ in range(6)] == [0, 1, 2, 3, 0, 1]
    mask = view(mask=[True, True, False, True])
    assert [r.act(None, mask) for _ in range(3)] == [3, 0, 1]


def test_least_outstanding_counts_requests_not_yet_in_a_batch():
    """vidur's LOR: the fewest waiting (running ones do not count), ties to the lowest."""
    r = router("least-outstanding")
    assert r.act(None, view(waiting=[3, 1, 1, 2], running=[0, 50, 50, 0])) == 1
    assert r.act(None, view(waiting=[3, 1, 0, 2], mask=[1, 1, 0, 1])) == 1


def test_least_kv_and_power_of_two():
    assert router("least-kv").act(None, view(kv_usage=[0.5, 0.2, 0.2, 0.9])) == 1
    r = router("power-of-two")
    loads = view(in_flight=[10, 0, 10, 10])
    picks = {r.act(None, loads) for _ in range(200)}
    assert 1 in picks and len(picks) == 4  # two distinct draws: 1 wins whenever drawn
    # the least loaded of the pair: never the most loaded replica when paired with 1
    r2 = router("power-of-two")
    picks = [r2.act(None, view(in_flight=[5, 6, 7, 8])) for _ in range(300)]
    assert 3 not in picks and set(picks) == {0, 1, 2}
    only = view(mask=[0, 0, 1, 0])
    assert {r.act(None, only) for _ in range(20)} == {2}


def test_random_replica_is_uniform_over_the_unmasked_and_seeded():
    r = router("random-replica")
    picks = [r.act(None, view(mask=[1, 0, 1, 1])) for _ in range(3000)]
    counts = np.bincount(picks, minlength=4)
    assert counts[1] == 0 and min(counts[[0, 2, 3]]) > 900
    a, b = router("random-replica"), router("random-replica")
    assert [a.act(None, view()) for _ in range(50)] == [b.act(None, view()) for _ in range(50)]


def test_sglang_cache_aware_follows_the_prefix_until_the_imbalance_threshold():
    """SGLang's rule: the longest cached prefix above cache_threshold (0.3) of the prompt;
    below it the least loaded; once max - min load > 64 and max > 1.5 min, the least
    loaded whatever the cache."""
    r = router("sglang-cache-aware")
    # replica 2 holds 60 of the 100 blocks: followed while the load is balanced
    cached = {"prefix_blocks": [0, 10, 60, 0]}
    assert r.act(None, view(**cached, in_flight=[5, 5, 20, 5])) == 2
    # imbalance at the threshold: max - min = 64 is not above 64: still the prefix
    assert r.act(None, view(**cached, in_flight=[10, 10, 74, 10])) == 2
    # one more: imbalanced (65 > 64 and 75 > 1.5 x 10): the least loaded
    assert r.act(None, view(**cached, in_flight=[10, 10, 75, 9])) == 3
    # absolute gap without the relative one (200 vs 150: not above 1.5x): the prefix
    assert r.act(None, view(**cached, in_flight=[150, 150, 220, 150])) == 2
    # a cached share at or below 0.3: a miss, the least loaded
    assert r.act(None, view(prefix_blocks=[0, 0, 30, 0], in_flight=[5, 4, 0, 4])) == 2
    assert r.act(None, view(prefix_blocks=[0, 0, 30, 0], in_flight=[5, 4, 1, 4])) == 2
    miss = view(prefix_blocks=[0, 0, 29, 0], in_flight=[5, 4, 1, 0])
    assert r.act(None, miss) == 3
    # a masked replica is never followed
    masked = view(**cached, in_flight=[5, 5, 5, 5], mask=[1, 1, 0, 1])
    assert r.act(None, masked) == 0  # 10 blocks on 1: a miss, so the least loaded
    # the parameters are its own
    strict = router("sglang-cache-aware", cache_threshold=0.7)
    assert strict.act(None, view(**cached, in_flight=[5, 4, 5, 5])) == 1


def test_sglang_v04_reads_its_own_tree_and_takes_the_smallest_tree_on_a_miss():
    """SGLang v0.4's router: the prefix routed to a replica counts, cached or not
    (``tree="router"``), and a miss goes to the smallest tree, not the least loaded."""
    r = router(
        "sglang-cache-aware",
        tree="router",
        on_miss="smallest-tree",
        cache_threshold=0.5,
        balance_abs_threshold=32,
        balance_rel_threshold=1.0001,
    )
    routed = {"routed_prefix_tokens": [0, 900, 0, 0], "routed_tokens": [5000, 900, 100, 0]}
    # 900 of the 1,600 prompt tokens routed to replica 1 (nothing cached anywhere yet)
    assert r.act(None, view(**routed, in_flight=[0, 20, 0, 0])) == 1
    # the actual cache is not read: 100 cached blocks on replica 3 change nothing
    assert r.act(None, view(**routed, prefix_blocks=[0, 0, 0, 100])) == 1
    # 800 tokens: 0.5 of the prompt is not above the threshold: the smallest tree (3),
    # though replica 3 is the most loaded
    miss = dict(routed, routed_prefix_tokens=[0, 800, 0, 0])
    assert r.act(None, view(**miss, in_flight=[1, 1, 1, 2])) == 3
    # imbalanced (33 > 32 and 34 > 1.0001 x 1): the least loaded, whatever the tree
    assert r.act(None, view(**routed, in_flight=[1, 34, 2, 2])) == 0
    # the default rule (threshold 0.3) with the router's tree: 800 tokens are a hit, 400
    # a miss, which goes to the least loaded
    d = router("sglang-cache-aware", tree="router")
    assert d.act(None, view(**miss, in_flight=[3, 2, 1, 2])) == 1
    few = dict(routed, routed_prefix_tokens=[0, 400, 0, 0])
    assert d.act(None, view(**few, in_flight=[3, 2, 1, 2])) == 2
    # the smallest tree of the actual caches (tree="cache"): cached blocks x block size
    c = router("sglang-cache-aware", on_miss="smallest-tree")
    assert c.act(None, view(cached_blocks=[9, 3, 5, 7], in_flight=[0, 9, 0, 0])) == 1
    for bad, match in (({"tree": "radix"}, "tree='radix'"), ({"on_miss": "x"}, "on_miss='x'")):
        with pytest.raises(ValueError, match=match):
            router("sglang-cache-aware", **bad)


def test_dynamo_weighs_prefill_blocks_against_blocks_in_use():
    """Dynamo's cost: overlap_weight x (uncached prompt + queued prefill) / block size +
    blocks in use + the prompt's uncached blocks; lowest wins."""
    r = router("dynamo-kv")
    # replica 1 holds 80 blocks of the prompt: cost 20 + 20 vs 100 + 100 elsewhere
    assert r.act(None, view(prefix_blocks=[0, 80, 0, 0])) == 1
    # ... unless it is loaded: 1,000 blocks in use there
    assert r.act(None, view(prefix_blocks=[0, 80, 0, 0], kv_blocks_used=[0, 1000, 0, 0])) in (
        0,
        2,
        3,
    )
    # ties go to the smallest cache
    assert r.act(None, view(cached_blocks=[50, 40, 10, 60])) == 2
    # the queued prefill counts: replica 1 has none (its cache the largest, so the
    # tie-break alone would never pick it)
    queued = view(prefill_tokens=[16000, 0, 16000, 16000], cached_blocks=[0, 50, 0, 0])
    assert r.act(None, queued) == 1
    # the prefill weight: at 0 only the blocks in use and new blocks count
    w0 = router("dynamo-kv", overlap_score_weight=0.0)
    assert w0.act(None, view(prefill_tokens=[0, 10**6, 0, 0], kv_blocks_used=[9, 0, 9, 9])) == 1


def test_llm_d_adds_weighted_scores():
    """llm-d's default profile: 2 x queue + 2 x (1 - KV usage) + 3 x prefix share."""
    r = router("llm-d")
    # a full prefix hit (3) beats an empty queue (2) and free KV (2) elsewhere
    v = view(prefix_blocks=[0, 100, 0, 0], waiting=[0, 4, 0, 0], kv_usage=[0, 0.0, 0, 0])
    assert r.act(None, v) == 1
    # half a hit (1.5) does not beat the queue score (2)
    v = view(prefix_blocks=[0, 50, 0, 0], waiting=[0, 4, 4, 4])
    assert r.act(None, v) == 0


def test_sed_weighs_the_requests_in_flight_by_speed():
    """LVS's shortest expected delay: (in flight + 1) / weight, the weight the replica's
    nominal decode rate; ties to the lowest index."""
    r = router("sed")
    speed = [1000.0, 1000.0, 2400.0, 2400.0]
    # (3+1)/1000 = 0.004 against (10+1)/2400 = 0.0046: the slow idle-ish replica
    assert r.act(None, view(in_flight=[3, 5, 10, 10], speed=speed)) == 0
    # (3+1)/1000 = 0.004 against (8+1)/2400 = 0.00375: the fast one, busier
    assert r.act(None, view(in_flight=[3, 5, 8, 10], speed=speed)) == 2
    # equal speeds: the shortest queue, ties to the lowest index; the mask holds
    assert r.act(None, view(in_flight=[2, 1, 1, 5])) == 1
    assert r.act(None, view(in_flight=[2, 1, 1, 5], mask=[1, 0, 1, 1])) == 2


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_every_router_respects_the_mask(name):
    r = router(name)
    rng = np.random.default_rng(0)
    for _ in range(100):
        mask = rng.random(4) < 0.5
        mask[rng.integers(4)] = True
        v = view(
            waiting=rng.integers(0, 100, 4),
            in_flight=rng.integers(0, 300, 4),
            kv_usage=rng.random(4),
            prefix_blocks=rng.integers(0, 100, 4),
            mask=mask,
        )
        assert mask[r.act(None, v)]


def make(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(ROUTING, **kw)


def test_routing_env_passes_the_checker_and_its_rewards_add_up():
    """Gymnasium's checker; the rewards of an episode add up to the cluster's cost; every
    router runs an episode to its end."""
    env = make(replicas=3, workload={"kind": "poisson", "rate_per_s": 9.0},
               horizon_requests=150)  # fmt: skip
    check_env(env.unwrapped, skip_render_check=True)
    for name in sorted(ROUTERS):
        pol = baselines.make(name, env)
        pol.reset(seed=1)
        obs, info = env.reset(seed=1)
        total, done = 0.0, False
        while not done:
            assert env.observation_space.contains(obs)
            obs, r, term, trunc, info = env.step(pol.act(obs, info))
            total += r
            done = term or trunc
        cl = env.unwrapped.cluster
        L, E, M, D = cl.costs()
        w = env.unwrapped.config.reward_weights
        cost = w.latency * L + w.energy * E + w.sla * M + w.drop * D
        assert total == pytest.approx(-cost, rel=1e-9)
        s = info["serving"]
        assert s["completed"] + s["dropped"] == 150 and sum(s["routed"]) == len(cl.routed)


def test_routing_env_bad_input_is_one_line():
    for kw, match in (
        ({"replicas": 0}, "replicas=0"),
        ({"replicas": []}, "non-empty"),
        ({"replicas": [{"profile": "nope"}]}, r"replicas\[0\]"),
        ({"replicas": "x"}, "replicas='x'"),
    ):
        with pytest.raises(ValueError, match=match) as err:
            make(**kw)
        assert "\n" not in str(err.value)
    env = make(replicas=[{}, {"max_model_len": 512}], horizon_requests=50)
    obs, info = env.reset(seed=0)
    with pytest.raises(ValueError, match="out of range"):
        env.step(2)
    done, masked = False, 0
    while not done:
        if not info["replicas"]["mask"][1]:
            masked += 1
            with pytest.raises(ValueError, match="masked"):
                env.step(1)
        obs, _, t1, t2, info = env.step(0)
        done = t1 or t2
    assert masked
    with pytest.raises(ValueError, match="LLMRouting-v0"):
        baselines.make("round-robin", make_llm_v2())


def make_llm_v2():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make("batch_env/LLMBatching-v2")


def test_a_clairvoyant_fork_replays_the_same_future():
    """``fork()`` copies the cluster with its future: the copy and the env, routed alike
    from there, earn the same rewards; stepping the copy leaves the env as it was."""
    env = make(workload={"kind": "poisson", "rate_per_s": 12.0}, horizon_requests=200).unwrapped
    pol = baselines.make("llm-d", env)
    obs, info = env.reset(seed=0)
    for _ in range(60):
        obs, _r, _t, _tr, info = env.step(pol.act(obs, info))
    twin = env.fork()
    rewards = []
    for e in (twin, env):
        rr = baselines.make("round-robin", e)
        rr.reset(seed=0)
        o, i, done, out = obs, info, False, []
        while not done:
            o, r, t1, t2, i = e.step(rr.act(o, i))
            out.append(r)
            done = t1 or t2
        rewards.append(out)
    assert rewards[0] == rewards[1] and len(rewards[0]) > 50


def test_a_realizable_fork_keeps_what_has_come_and_redraws_the_rest():
    """``fork(rng)``: the arrivals routed so far and the pending one stay (times, prompts,
    classes), every output length a router cannot know is redrawn, the arrivals after
    now come from the model; different generators give different futures; the env is
    left as it was."""
    env = make(workload={"kind": "poisson", "rate_per_s": 12.0}, horizon_requests=300).unwrapped
    pol = baselines.make("llm-d", env)
    obs, info = env.reset(seed=0)
    for _ in range(80):
        obs, _r, _t, _tr, info = env.step(pol.act(obs, info))
    cl = env.cluster
    n = len(cl.routed) + 1
    before = (list(cl.times[:n]), cl.intake.sizes(0, n), cl.request_counts())
    twins = [env.fork(np.random.default_rng(k)) for k in (1, 2)]
    futures = []
    live = [[e for e, f in enumerate(rep.finished_at) if f is None] for rep in env.cluster.replicas]
    assert sum(map(len, live)) > 10
    outputs = [
        [
            [rep.state.output[e] for e in idx]
            for rep, idx in zip(t.cluster.replicas, live, strict=True)
        ]
        for t in twins
    ]
    assert outputs[0] != outputs[1]  # the requests in the system: outputs redrawn
    for twin in twins:
        tc = twin.cluster
        assert tc.times[:n] == before[0]
        sizes = tc.intake.sizes(0, n)
        assert np.array_equal(sizes["prompt_tokens"], before[1]["prompt_tokens"])
        assert tc.request_counts() == before[2]
        tc.upcoming(50)
        futures.append(tuple(tc.times[n : n + 50]))
        rr = baselines.make("round-robin", twin)
        o, i, done = obs, info, False
        while not done:
            o, _r, t1, t2, i = twin.step(rr.act(o, i))
            done = t1 or t2
    assert futures[0] != futures[1]
    assert env.cluster.times[:n] == before[0] and env.request_counts() == before[2]


def test_accrued_rewards_add_up_to_the_same_cost_charged_as_it_is_incurred():
    """``reward_timing="accrue"``: each step is charged the latency and energy accrued in
    its span (the iterations in progress included), so the energy a step is charged is
    its span times the cluster's power, never negative; the episode's rewards add up to
    the committed cost, as with the default; the two differ step by step."""
    kw = dict(replicas=3, workload={"kind": "poisson", "rate_per_s": 9.0}, horizon_requests=150)
    runs = {}
    for timing in ("commit", "accrue"):
        env = make(reward_timing=timing, **kw)
        pol = baselines.make("power-of-two", env)
        pol.reset(seed=2)
        obs, info = env.reset(seed=2)
        rewards, energy, latency, done = [], [], [], False
        while not done:
            obs, r, term, trunc, info = env.step(pol.act(obs, info))
            rewards.append(r)
            energy.append(info["reward_components"]["energy"])
            latency.append(info["reward_components"]["latency"])
            done = term or trunc
        cl = env.unwrapped.cluster
        L, E, M, D = cl.costs()
        w = env.unwrapped.config.reward_weights
        assert sum(rewards) == pytest.approx(
            -(w.latency * L + w.energy * E + w.sla * M + w.drop * D), rel=1e-9
        )
        runs[timing] = (rewards, energy, latency, info["serving"])
    (rc, ec, lc, sc), (ra, ea, la, sa) = runs["commit"], runs["accrue"]
    assert sc == sa  # the same episode
    assert min(ea) >= 0.0 and ea != ec and ra != rc
    zero_c = sum(e == 0.0 for e in ec)
    assert sum(e == 0.0 for e in ea) < zero_c  # committed: steps with no iteration end
    # the requests' latency accrues at every step they are in the system (no drops here)
    assert min(la) >= 0.0 and sum(x == 0.0 for x in la) < sum(x == 0.0 for x in lc)
    with pytest.raises(ValueError, match="reward_timing='soon'"):
        make(reward_timing="soon", **kw)
