"""Regime maps (``batch-env regimes``): the parametric node-profile family, and the
LazyBatching map run end to end on a tiny grid against a direct run of its cells."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

import baselines
import batch_env
from batch_env.profiles import load
from batch_env.profiles.parametric import node_family, slope_ratio_of_linear
from experiments.regimes import lazybatching as lazy_map
from experiments.regimes import llm as llm_map
from experiments.regimes import smdp as smdp_map


@pytest.mark.parametrize("name", ["resnet50-v100-linear", "resnet50-p4-linear"])
def test_family_reduces_to_a_shipped_linear_profile(name):
    """One node, no overhead, the batch-1 latency and slope ratio of a shipped linear
    profile: the same latency and energy at every batch size."""
    t1, r = slope_ratio_of_linear(name)
    fam = load(
        node_family(slope_ratio=r, overhead_fraction=0.0, n_nodes=1, batch1_ms=t1, base=name)
    )
    ship = load(name)
    assert fam.n_nodes == 1
    for b in range(1, 33):
        assert fam.latency_s(b) == pytest.approx(ship.latency_s(b), rel=1e-12)
        assert fam.energy_j(b) == pytest.approx(ship.energy_j(b), rel=1e-12)
    with pytest.raises(ValueError, match="kind 'table'"):
        slope_ratio_of_linear("resnet50-v100")


def test_family_shape_overhead_and_depth():
    """Node times sum to the model's; T(1) is the anchor; the compute part grows by
    a = r t0 per request; every node carries the fixed overhead f T(1) / n."""
    r, f, n, t1 = 4.0, 0.3, 12, 2.0
    prof = node_family(slope_ratio=r, overhead_fraction=f, n_nodes=n, batch1_ms=t1)
    p = load(prof)
    lat, _ = p.node_tables(32)
    assert p.n_nodes == n and p.latency_s(1) * 1e3 == pytest.approx(t1)
    for b in (1, 7, 32):
        assert lat[:, b].sum() == pytest.approx(p.latency_s(b), rel=1e-9)
    t0 = (1 - f) * t1 / (1 + r)
    assert (p.latency_s(32) - p.latency_s(1)) * 1e3 == pytest.approx(31 * r * t0)
    o = f * t1 / n
    assert lat[0, 1] * 1e3 == pytest.approx(o + t0 * (1 + r) / n)
    flat = load(node_family(slope_ratio=0.0, overhead_fraction=0.0, n_nodes=3))
    assert flat.latency_s(32) == pytest.approx(flat.latency_s(1))  # r = 0: flat in b


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"slope_ratio": -1.0}, "slope_ratio=-1.0"),
        (
            {"slope_ratio": 1.0, "overhead_fraction": 1.0},
            "overhead_fraction=1.0 is invalid: expected < 1",
        ),
        ({"slope_ratio": 1.0, "n_nodes": 0}, "n_nodes=0"),
        ({"slope_ratio": 1.0, "batch1_ms": 0.0}, "batch1_ms=0.0"),
        (
            {"slope_ratio": 1.0, "n_nodes": 2, "weights": [0.5, 0.6]},
            "weights=[0.5, 0.6] is invalid",
        ),
        ({"slope_ratio": float("nan")}, "slope_ratio=nan"),
    ],
)
def test_family_refuses_bad_parameters_by_name(kwargs, needle):
    with pytest.raises(ValueError) as err:
        node_family(**kwargs)
    assert needle in str(err.value)


def test_reproduction_rule_is_direction_and_order_of_magnitude_of_the_gain():
    assert lazy_map.reproduces(15.0, 15.0) and lazy_map.reproduces(5.5, 15.0)
    assert not lazy_map.reproduces(4.0, 15.0) and not lazy_map.reproduces(60.0, 15.0)
    assert lazy_map.reproduces(1.2, 1.5) and not lazy_map.reproduces(1.05, 1.5)
    assert not lazy_map.reproduces(1.5, 1.5, significant=False)  # within the noise
    assert not lazy_map.reproduces(0.5, 1.5)


TINY = {
    "slope_ratio": [0.08, 10.0],
    "overhead_fraction": [0.3],
    "n_nodes": [6],
    "loads": [0.3, 1.2],
    "windows_ms": [0, 50],
    "seeds": 2,
    "horizon_requests": 300,
}


def test_tiny_map_end_to_end_matches_a_direct_run_and_resumes(tmp_path):
    """The map's ratios are those of a direct run of the same cells (same env kwargs,
    policies and seeds); its outputs are written; a rerun recomputes no cell."""
    res = lazy_map.run_lazybatching_map(
        grid=TINY, results_dir=tmp_path, progress=False, name="tiny"
    )
    assert not res["failed"] and res["computed"] == 2 * 2 * 3  # variants x loads x policies
    out = tmp_path / "tiny"
    for f in (
        "map.md",
        "map.json",
        "heat_windows.png",
        "heat_latency_mean_ms_vs_best.png",
        "heat_throughput_rps_vs_best.png",
        "summary.csv",
    ):
        assert (out / f).stat().st_size > 0, f
    data = json.loads((out / "map.json").read_text())
    assert len(data["points"]) == 4 and len(data["claims"]) == 9

    cfg = lazy_map.lazy_config(TINY, "tiny")
    for point in res["points"]:
        v = lazy_map.variant_name(
            point["slope_ratio"], point["overhead_fraction"], point["n_nodes"]
        )
        kw = {
            **cfg["env"],
            **cfg["envs"][v],
            "workload": {"kind": "poisson", "load": point["load"]},
        }
        means = {}
        for label, params in cfg["policies"].items():
            env = gym.make("batch_env/NodeBatching-v0", **kw)
            p = dict(params)
            pol = baselines.make(p.pop("name", label), env=env, **p)
            r = batch_env.evaluate(pol, env, n_episodes=TINY["seeds"], seed=0)
            means[label] = {
                m: r.mean(m)
                for m in ("latency_mean_ms", "latency_p99_ms", "sla_attainment", "throughput_rps")
            }
        assert point["metrics"] == means
        mean = point["ratios"]["latency_mean_ms"]
        assert (
            mean["vs_graph_0"]
            == means["graph-0"]["latency_mean_ms"] / means["lazy"]["latency_mean_ms"]
        )
        best = min(("graph-0", "graph-50"), key=lambda w: means[w]["latency_mean_ms"])
        assert mean["best_window"] == best
        assert ("throughput_rps" in point["ratios"]) == (point["load"] == 1.2)
        row = f"| {point['slope_ratio']:g} | 0.3 | 6 | {point['load']:g} | {lazy_map._fmt_ratio(mean['vs_graph_0'])} |"
        assert row in res["markdown"]

    again = lazy_map.run_lazybatching_map(
        grid=TINY, results_dir=tmp_path, progress=False, name="tiny"
    )
    assert again["computed"] == 0 and again["reused"] == 12 and again["points"] == res["points"]


def test_claims_count_points_and_name_the_closest():
    """The claims table counts the points where lazy wins by more than the paired CI and
    those that reproduce a claim, and names the point closest to the paper's figure."""
    row = {
        "slope_ratio": 10.0,
        "overhead_fraction": 0.3,
        "n_nodes": 18,
        "load": 0.2,
        "ratios": {
            "latency_mean_ms": {
                "vs_graph_0": 0.8,
                "vs_best": 0.8,
                "best_window": "graph-0",
                "vs_window": {"graph-0": 0.8, "graph-50": 12.0, "graph-100": 30.0},
                "significant": {"graph-0": False, "graph-50": True, "graph-100": True},
            },
        },
    }
    claims = {(c["metric"], c["baseline"]): c for c in lazy_map.lazy_claims([row])}
    c = claims[("latency_mean_ms", "vs_window")]
    assert c["points"] == 3 and c["wins"] == 2 and c["reproduced"] == 2
    assert c["closest"]["window"] == "graph-50" and c["largest"]["ratio"] == 30.0
    assert claims[("latency_mean_ms", "vs_graph_0")]["reproduced"] == 0
    assert claims[("sla_attainment", "vs_best")]["points"] == 0
    assert math.isinf(lazy_map._ratio(0.5, 0.0, True))


def test_policy_gain_is_the_solved_gain_and_splits_into_latency_and_power():
    """The exact cost of a stationary policy: the optimum's equals the solver's gain, the
    unit-weight costs add up to the weighted one, and a bad policy is named."""
    from dataclasses import replace

    import numpy as np

    from baselines.smdp import policy_gain, solve

    pb = smdp_map._smdp_problem("resnet50-v100-linear", 0.4, 0.5)
    sol = solve(pb)
    assert policy_gain(pb, sol.policy) == pytest.approx(sol.gain, rel=1e-10)
    q = np.arange(pb.n_states)
    greedy = policy_gain(pb, np.minimum(q, pb.max_batch_size))
    assert greedy > sol.gain
    lat = policy_gain(replace(pb, w_energy=0.0, w_drop=0.0), sol.policy)
    power = policy_gain(replace(pb, w_latency=0.0, w_drop=0.0, w_energy=1.0), sol.policy)
    assert lat + 0.5 * power == pytest.approx(sol.gain, rel=1e-9)
    with pytest.raises(ValueError, match=r"policy\[1\]=2 is invalid"):
        policy_gain(pb, np.where(q == 1, 2, np.minimum(q, pb.max_batch_size)))
    with pytest.raises(ValueError, match="expected one per state"):
        policy_gain(pb, [0, 1])


def test_smdp_map_checks_the_claims_on_a_small_grid(tmp_path):
    grid = {
        **smdp_map.SMDP_GRID,
        "profiles": ["resnet50-v100-linear"],
        "loads": [0.2, 0.8],
        "energy_weights": [0.0, 2.0],
        "max_states": [40, 100],
    }
    res = smdp_map.run_smdp_map(results_dir=tmp_path, grid=grid)
    for f in ("smdp.md", "smdp.json", "smdp.png"):
        assert (tmp_path / "smdp" / f).stat().st_size > 0
    pts = res["points"]
    assert len(pts) == 4 and all(p["control_limit"] for p in pts)
    for p in pts:  # the optimum is never beaten by a benchmark
        assert all(v >= p["cost_per_s"]["smdp"] * (1 - 1e-9) for v in p["cost_per_s"].values())
    by = {(p["load"], p["energy_weight"]): p for p in pts}
    for ld in (0.2, 0.8):  # more weight on energy: less power, more latency
        assert by[(ld, 2.0)]["power_mean_w"] <= by[(ld, 0.0)]["power_mean_w"]
        assert by[(ld, 2.0)]["latency_mean_ms"] >= by[(ld, 0.0)]["latency_mean_ms"]
    assert by[(0.2, 2.0)]["threshold"] > by[(0.2, 0.0)]["threshold"]
    tr = res["truncation"]
    assert [t["truncated"] for t in tr] == [True, True, False] and tr[-1]["gain_error"] == 0
    assert abs(tr[1]["gain_error"]) < abs(tr[0]["gain_error"])
    claims = {c["claim"].split(" (")[0]: c for c in res["claims"]}
    assert claims["the energy weight trades power for latency"]["holds_at"] == "2 of 2 loads"


def test_capacity_on_a_rate_grid_is_interpolated_where_attainment_crosses():
    f = llm_map._interp_capacity
    assert f([1, 2, 3], [0.99, 0.95, 0.85], [10, 20, 30], 0.9) == {
        "capacity_rps": pytest.approx(2.5),
        "throughput_at_sla_tokens_per_s": pytest.approx(25.0),
        "capped": False,
    }
    assert f([1, 2], [0.5, 0.4], [1, 2], 0.9)["capacity_rps"] == 0.0
    assert f([1, 2], [0.95, 0.93], [1, 2], 0.9) == {
        "capacity_rps": 2,
        "throughput_at_sla_tokens_per_s": 2,
        "capped": True,
    }
    assert llm_map.llm_reproduces(0.2, (0.22, 0.22)) and llm_map.llm_reproduces(0.03, (0.08, 0.28))
    assert not llm_map.llm_reproduces(0.0, (0.22, 0.22)) and not llm_map.llm_reproduces(
        0.8, (0.22, 0.22)
    )


def test_compare_takes_loads_as_rates_for_llm_envs():
    from experiments.compare import cells, validate_config

    cfg = validate_config(
        {
            "name": "r",
            "env_id": "batch_env/LLMBatching-v0",
            "workloads": {
                "p": {"kind": "poisson"},
                "t": {"kind": "trace", "dataset": "azure-conv-2023-gz"},
            },
            "loads": [2.0],
            "load_is_rate": True,
            "reference": "a",
            "policies": {"a": {"name": "static-cap", "cap": 8}},
        }
    )
    kws = {c.workload: c.env_kwargs["workload"] for c in cells(cfg)}
    assert kws == {
        "p": {"kind": "poisson", "rate_per_s": 2.0},
        "t": {"kind": "trace", "dataset": "azure-conv-2023-gz", "target_rate_per_s": 2.0},
    }
    with pytest.raises(ValueError, match="load_is_rate='yes' must be true or false"):
        validate_config({**cfg, "load_is_rate": "yes", "_expanded": False})


def test_tiny_llm_map_matches_a_direct_run(tmp_path):
    """The LLM map's capacities come from its cells, which are a direct run's episodes:
    one policy's attainment at one rate equals batch_env.evaluate on the same env."""
    g = {
        **llm_map.LLM_GRIDS["coarse"],
        "base": {**llm_map.LLM_GRIDS["coarse"]["base"], "kv": 0.25},
        "kv": [0.25],
        "cross_kv": [0.25],
        "lengths": {"conversation": {}},
        "ratio": [],
        "arrivals": {"poisson": {"kind": "poisson"}},
        "caps": [32, 256],
        "rates_rel": [0.7, 1.3],
        "seeds": 1,
        "horizon_requests": 60,
        "warmup_requests": 10,
    }
    res = llm_map.run_llm_map(grid=g, results_dir=tmp_path, progress=False, name="tiny")
    assert not res["failed"] and len(res["points"]) == 1
    (pt,) = res["points"]
    for f in ("map.md", "map.json", "heat_kv_lengths.png", "axes.png"):
        assert (tmp_path / "tiny" / f).stat().st_size > 0
    v = llm_map.llm_variants(g)[pt["name"]]
    env_kw, arrivals = llm_map._llm_env_kwargs(g, v)
    rate = round(pt["probe_static_256_rps"] * 0.7, 4)
    env = gym.make("batch_env/LLMBatching-v0", **env_kw, workload={**arrivals, "rate_per_s": rate})
    direct = batch_env.evaluate(baselines.make("pang2025", env=env), env, n_episodes=1, seed=0)
    assert pt["policies"]["pang2025"]["attainment"][str(rate)] == direct.mean("sla_attainment")
    again = llm_map.run_llm_map(grid=g, results_dir=tmp_path, progress=False, name="tiny")
    assert again["computed"] == 0 and again["points"] == res["points"]
