"""The cluster of LLM replicas (issue 66): one replica reproduces LLMBatching-v2 trajectory
for trajectory; conservation per replica and in total at every arrival; the summary window
shared by the replicas; heterogeneous replicas and their mask; bad input."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest

from batch_env.llm.cluster import LLMCluster

V2 = "batch_env/LLMBatching-v2"
POISSON = {"kind": "poisson", "rate_per_s": 6.0}
SESSIONS = {
    "kind": "sessions",
    "rate_per_s": 5.0,
    "turns_mean": 4.0,
    "think_time_s": 5.0,
    "system_prompts": 3,
    "system_prompt_tokens": 700,
    "user_tokens_mean": 150.0,
    "output_tokens_mean": 120.0,
}
TWO_CLASSES = [
    {"name": "chat", "share": 0.7, "ttft_sla_ms": 500.0, "tpot_sla_ms": 100.0},
    {"name": "batch", "share": 0.3, "ttft_sla_ms": 5000.0, "tpot_sla_ms": 300.0, "weight": 0.2},
]


def run_v2(workload, seed, settings):
    """LLMBatching-v2 at its default action (vLLM's setting) to the episode's end."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(V2, workload=workload, **settings).unwrapped
    action = env.action_of(env.grid[-1])
    env.reset(seed=seed)
    done = False
    while not done:
        _, _, term, trunc, info = env.step(action)
        done = term or trunc
    return env.server, info["serving"]


def requests(server, n):
    """The first ``n`` entries' arrival, prompt, output, class, first token and finish."""
    first = np.asarray(server.sla_books.first_at[:n])
    return (
        server.arrivals[:n],
        server.state.prompt[:n],
        server.state.output[:n],
        server.state.request_class[:n],
        np.where(np.isnan(first), -1.0, first).tolist(),
        [-1.0 if f is None else f for f in server.finished_at[:n]],
    )


CASES = [
    ("poisson", POISSON, {"horizon_requests": 300, "warmup_requests": 40}),
    ("sessions", SESSIONS, {"horizon_requests": 200, "gpu_memory_utilization": 0.3}),
    ("classes", {"kind": "poisson", "rate_per_s": 5.0}, {"classes": TWO_CLASSES,
                                                         "horizon_requests": 200}),
]  # fmt: skip


@pytest.mark.parametrize("name,workload,settings", CASES, ids=[c[0] for c in CASES])
def test_one_replica_reproduces_llm_batching_v2(name, workload, settings):
    """A cluster of one replica whose router always picks it runs LLMBatching-v2's
    trajectory (v2's decode runs included) on the same seed: the same arrivals with their
    lengths and classes, first tokens and completions, to the bit; and where v2's episode
    ends at a completion (not idling to a next arrival), the same summary (the replica's
    own: the same but for the prompts that the cluster, not it, rejected)."""
    same_summary = 0
    for seed in (0, 7):
        server, s2 = run_v2(workload, seed, settings)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cl = LLMCluster.build([settings], workload)
        cl.reset(seed)
        s1 = cl.run(lambda c, g: 0)
        rep = cl.replicas[0]
        n = len(server.arrivals)
        assert n > settings["horizon_requests"] and len(rep.arrivals) >= n
        assert requests(rep, n) == requests(server, n)
        assert rep.iterations >= server.iterations - 1
        if cl.now == server.now:
            same_summary += 1
            assert {k: v for k, v in s1.items() if k not in ("replicas", "routed")} == s2
            # the replica's own summary: the same but for the prompts the cluster rejected
            own, rejected = s1["replicas"][0], cl.intake.rejected_by(cl.now)
            assert own["arrived_total"] == s2["arrived_total"] - rejected and own["rejected"] == 0
            assert {k: v for k, v in own.items() if k not in ("arrived_total", "rejected")} == {
                k: v for k, v in s2.items() if k not in ("arrived_total", "rejected")
            }
    assert same_summary, "no seed ended at a completion: pick another"


def test_conservation_per_replica_and_in_total_at_every_arrival():
    """At every arrival each replica's requests add up (routed = admitted + not yet
    admitted; admitted = completed + waiting + running + dropped) and so do the cluster's
    (with the rejected prompts); at the end every summary request of every replica is
    done and the replicas' summary requests are the cluster's."""
    wl = {"kind": "poisson", "rate_per_s": 60.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cl = LLMCluster.build([{}] * 3, wl, horizon_requests=600, warmup_requests=60,
                              queue_capacity=4, max_num_seqs=16)  # fmt: skip
    rng = np.random.default_rng(0)
    cl.reset(1)
    checked = 0
    while (g := cl.next_arrival()) is not None:
        c = cl.request_counts()
        assert c["arrived"] - c["rejected"] == g + 1  # the pending one at the router
        assert c["arrived"] == (
            c["completed"] + c["waiting"] + c["in_service"] + c["dropped"] + c["rejected"]
        )
        for r, rep in enumerate(cl.replicas):
            rc = rep.request_counts()
            assert rc["arrived"] + rep.unadmitted == cl.routed.count(r)
            assert rc["arrived"] == (
                rc["completed"] + rc["waiting"] + rc["in_service"] + rc["dropped"]
            )
            assert rc["in_system"] == rc["waiting"] + rc["in_service"]
        checked += 1
        cl.route(int(rng.integers(3)))
    s = cl.summary()
    assert checked > 600 and cl.summary_done()
    assert s["completed"] + s["dropped"] == 600 and s["dropped"] > 0  # the queue binds
    assert sum(r["completed"] for r in s["replicas"]) == s["completed"]
    assert sum(r["dropped"] for r in s["replicas"]) == s["dropped"]
    assert math.isclose(sum(r["energy_j"] for r in s["replicas"]), s["energy_j"], rel_tol=1e-12)
    assert {r["elapsed_s"] for r in s["replicas"]} == {s["elapsed_s"]}  # one window


def test_an_idle_replica_burns_idle_power_and_heterogeneous_replicas():
    """A replica the router never uses still draws idle power over the window; replicas
    of different GPUs serve at their own speeds; a prompt is masked where it does not fit
    a replica's ``max_model_len``."""
    wl = {"kind": "poisson", "rate_per_s": 2.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cl = LLMCluster.build(
            [{"profile": "llama-3.1-8b-a100"}, {"profile": "llama-3.1-8b-h100"},
             {"profile": "llama-3.1-8b-h100", "max_model_len": 1024}],
            wl, horizon_requests=200,
        )  # fmt: skip
    cl.reset(0)
    masked = 0
    while (g := cl.next_arrival()) is not None:
        mask = cl.mask(g)
        assert mask[0] and mask[1]
        if not mask[2]:
            masked += 1
            with pytest.raises(ValueError, match="replica 2 is masked"):
                cl.route(2)
        cl.route(g % 2)
    s = cl.summary()
    assert masked > 0
    idle = s["replicas"][2]
    assert idle["completed"] == 0
    assert math.isclose(idle["power_mean_w"], cl.replicas[2].idle_power_w, rel_tol=1e-9)
    a100, h100 = s["replicas"][0], s["replicas"][1]
    assert h100["tpot_mean_ms"] < a100["tpot_mean_ms"]


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: LLMCluster([]), "at least one replica"),
        (lambda: LLMCluster.build([]), "non-empty list"),
        (lambda: LLMCluster.build([{"profile": "no-such-gpu"}]), r"replicas\[0\]"),
        (lambda: LLMCluster.build([{}, {"max_num_seqs": -1}]), r"replicas\[1\].*max_num_seqs"),
        (lambda: LLMCluster.build([{"setting": (999, 2048, "fcfs", None)}]), "cap=999"),
        (lambda: LLMCluster.build([{}, {"horizon_requests": 5}]), "horizon_requests"),
    ],
)
def test_bad_clusters_get_one_line_errors(call, match):
    """Zero replicas, a replica spec that does not load, or replicas that disagree: a
    ValueError naming the replica and field."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=match) as err:
            call()
    assert "\n" not in str(err.value)


def test_bad_routes_are_refused_and_lose_nothing():
    """Routing with no arrival pending, or to a replica out of range, is refused; the
    arrival stays pending and is routed by the next valid call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cl = LLMCluster.build([{}, {}], POISSON, horizon_requests=20)
    cl.reset(0)
    with pytest.raises(ValueError, match="no arrival is pending"):
        cl.route(0)
    g = cl.next_arrival()
    for bad in (2, -1, 1.5, "0"):
        with pytest.raises(ValueError, match="out of range"):
            cl.route(bad)
    assert cl.next_arrival() == g
    cl.route(1)
    assert cl.routed == [1]


def test_the_router_tree_holds_what_was_routed_pruned_least_recently_used_leaves_first():
    """``RoutedPrefixes`` (SGLang's router tree): every replica's leading match in one
    pass, sizes in tokens, a replica's part pruned to its bound, the deepest unit of the
    least recently used prompt first; bad sizes refused."""
    from batch_env.llm.router_tree import RoutedPrefixes

    t = RoutedPrefixes(3, unit_tokens=64, max_tokens=4 * 64)
    t.insert(0, (1, 2, 3))
    t.insert(1, (1, 2))
    assert t.match((1, 2, 3, 9)) == [3, 2, 0]
    assert t.match((7, 2, 3)) == [0, 0, 0]  # a unit stands for its whole prefix
    assert t.tokens() == [192, 128, 0]
    t.insert(0, (5, 6))  # five units on replica 0: unit 3 (the old prompt's leaf) goes
    assert t.match((1, 2, 3)) == [2, 2, 0]
    assert t.match((5, 6)) == [2, 0, 0]
    assert t.tokens() == [256, 128, 0]
    t.insert(0, (1, 2))  # used again: now 5 and 6 are the least recently used
    t.insert(0, (8,))
    assert t.match((5, 6)) == [1, 0, 0] and t.match((1, 2)) == [2, 2, 0]
    t.clear()
    assert t.match((1, 2)) == [0, 0, 0] and t.tokens() == [0, 0, 0]
    for kw in ({"n": 0, "unit_tokens": 64}, {"n": 2, "unit_tokens": 0}):
        with pytest.raises(ValueError, match="must be an integer >= 1"):
            RoutedPrefixes(**kw)


def test_a_routed_prefix_counts_for_the_router_before_any_replica_computes_it(tmp_path):
    """Three prompts at once, two sharing a 128-token prefix: once the first is routed
    to replica 1 the second sees that prefix there in ``routed_prefix_tokens`` (and in
    ``routed_tokens``) while no replica has cached anything; without prefix hashes the
    columns are 0."""
    import json

    rows = [([1, 2, 3], 0.0), ([1, 2, 4], 0.0), ([7, 8, 9], 1e-3)]
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": ts, "input_length": 192, "output_length": 8, "hash_ids": h})
            + "\n"
            for h, ts in rows
        )
    )
    workload = {
        "kind": "trace",
        "path": str(path),
        "timestamp_column": "timestamp",
        "time_unit": "ms",
        "prompt_tokens_column": "input_length",
        "output_tokens_column": "output_length",
        "prefix_hashes_column": "hash_ids",
        "prefix_block_tokens": 64,
        "loop": False,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = LLMCluster.build([{}] * 3, workload, horizon_requests=3, prefix_caching=True)
    c.reset(seed=0)
    g = c.next_arrival()
    assert list(c.replica_view(g)["routed_prefix_tokens"]) == [0, 0, 0]
    c.route(1)
    v = c.replica_view(c.next_arrival())
    assert list(v["routed_prefix_tokens"]) == [0, 128, 0]
    assert list(v["routed_tokens"]) == [0, 192, 0]
    assert list(v["prefix_blocks"]) == [0, 0, 0]  # nothing computed yet
    c.route(1)
    v = c.replica_view(c.next_arrival())
    assert list(v["routed_prefix_tokens"]) == [0, 0, 0]
    assert list(v["routed_tokens"]) == [0, 256, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = LLMCluster.build([{}] * 2, POISSON, horizon_requests=5)
    plain.reset(seed=0)
    v = plain.replica_view(plain.next_arrival())
    assert list(v["routed_prefix_tokens"]) == [0, 0] and list(v["routed_tokens"]) == [0, 0]


LAZY_CASES = [
    ([{}] * 3, POISSON | {"rate_per_s": 9.0}, {"horizon_requests": 300, "warmup_requests": 30}),
    ([{}] * 3, SESSIONS | {"rate_per_s": 9.0}, {"horizon_requests": 250, "prefix_caching": True}),
    ([{}] * 2, POISSON | {"rate_per_s": 7.0}, {"horizon_requests": 200, "classes": TWO_CLASSES}),
    ([{}] * 3, POISSON | {"rate_per_s": 12.0}, {"horizon_requests": 5000, "horizon_s": 20.0}),
    (
        [{"profile": "llama-2-7b-h100"}, {}],
        POISSON | {"rate_per_s": 14.0},
        {"horizon_requests": 300, "queue_capacity": 32},
    ),
]


@pytest.mark.parametrize("replicas,workload,settings", LAZY_CASES)
def test_lazy_replicas_run_the_episode_a_router_reading_every_replica_sees(
    replicas, workload, settings
):
    """A replica runs only when it is read or routed to (and at the marks and the end):
    the episode of a router that reads nothing is the one a router that reads every
    replica at every arrival (which runs them all up to each arrival) makes, summary for
    summary; the same with random routes, with a summary window, sessions and prefix
    caching, two classes, a horizon that cuts the episode, heterogeneous replicas and
    drops. (Checked against the event-by-event loop before lazy replicas on seven such
    cases, 2026-12-07.)"""

    def run(view, seed, rng):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = LLMCluster.build(replicas, workload, **settings)
        c.reset(seed=seed)
        k = 0
        while (g := c.next_arrival()) is not None:
            if view:
                c.replica_view(g)
            c.route(k % c.n if rng is None else int(rng.integers(c.n)))
            k += 1
        return c.summary()

    for seed in (0, 1):
        for random in (False, True):
            a = run(False, seed, np.random.default_rng(seed) if random else None)
            b = run(True, seed, np.random.default_rng(seed) if random else None)
            assert a == b, (seed, random, [k for k in a if a[k] != b[k]])


@pytest.mark.parametrize("replicas,workload,settings", LAZY_CASES[:3] + LAZY_CASES[4:])
def test_a_clusters_decode_stretches_run_what_its_schedulers_would(replicas, workload, settings):
    """Each replica runs its decode-only stretches in one loop, and begins there the decode
    under way when the next arrival comes (the cluster's event at its end ends it): the
    episode is the one of every iteration run through the replicas' schedulers, summary
    for summary, with routes that read nothing and routes that read every replica."""

    def run(stretches, seed, view):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = LLMCluster.build(replicas, workload, **settings)
        for rep in c.replicas:
            rep.decode_runs = rep.decode_runs and stretches
        c.reset(seed=seed)
        rng = np.random.default_rng(seed)
        while (g := c.next_arrival()) is not None:
            if view:
                c.replica_view(g)
            c.route(int(rng.integers(c.n)))
        return c.summary(), sum(rep.iterations for rep in c.replicas)

    assert LLMCluster.build(replicas, workload, **settings).replicas[0].decode_runs
    for seed, view in ((0, False), (1, True)):
        (a, n), (b, _) = run(True, seed, view), run(False, seed, view)
        assert a == b, (seed, [k for k in a if a[k] != b[k]])
        assert n > 1000  # (many iterations, most of them in stretches)


def test_a_replica_nothing_is_routed_to_is_not_run_until_it_is_read():
    """Laziness itself: with every arrival routed to replica 0, replica 1's clock stays
    where it was until a reader (``flush``, ``replica_view``, ``costs``) brings it up."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = LLMCluster.build([{}] * 2, POISSON, horizon_requests=100)
    c.reset(seed=0)
    assert c.next_arrival() == 0
    c.route(1)
    for _ in range(20):
        c.next_arrival()
        c.route(0)
    lag = c.replicas[1].now
    assert lag <= c.times[1] < c.times[20] <= c.now  # not run since the first arrival
    c.flush()
    assert c.replicas[1].now > c.times[1]


def test_the_vidur_comparison_runs_this_side_and_refuses_bad_input(capsys):
    """``scripts/vidur_compare.py`` (docs/speed.md: against vidur): this project's side
    of each of vidur's twelve configurations, beside vidur's recorded figures; a bad
    ``--requests`` is one line and exit status 2."""
    from conftest import load_script

    mod = load_script("vidur_compare")
    assert mod.main(["--requests", "100"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| ")]
    assert len(rows) == 2 + len(mod.VIDUR) == 14
    for row in rows[2:]:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[6].endswith("x") and float(cells[3]) > 0, row
    assert mod.main(["--requests", "5"]) == 2
    assert "--requests must be >= 100" in capsys.readouterr().err


def test_the_episode_ends_at_its_last_summary_requests_completion(tmp_path):
    """After the end mark no replica runs past the episode's end: on a finite trace,
    where the arrivals end while replicas still hold requests outside the window, the
    cluster's clock stops at the last summary request's completion (a replica whose own
    summary requests are done may not run a decode stretch then)."""
    rng = np.random.default_rng(0)
    rows, t = ["t,ContextTokens,GeneratedTokens"], 0.0
    for _ in range(120):
        t += rng.exponential(0.15)
        rows.append(f"{t:.4f},{int(rng.integers(50, 800))},{int(rng.integers(20, 600))}")
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(rows) + "\n")
    workload = {
        "kind": "trace",
        "path": str(path),
        "timestamp_column": "t",
        "prompt_tokens_column": "ContextTokens",
        "output_tokens_column": "GeneratedTokens",
        "loop": False,
    }
    for n in (1, 3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = LLMCluster.build([{}] * n, workload, horizon_requests=100, warmup_requests=10)
        c.reset(seed=0)
        s = c.run(lambda _c, g, n=n: g % n)
        assert s["completed"] == 100
        last = 0.0
        for rep in c.replicas:
            hi = rep.window_end if rep.window_end is not None else len(rep.arrivals)
            done = [x for x in rep.finished_at[rep.window.entry : hi] if x is not None]
            last = max([last, *done])
        assert c.now == last, (n, c.now, last)
