"""The comparison experiment: outputs, pairing, resumability, config errors."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from helpers import COMPARE_SMALL as SMALL

from experiments.compare import load_config, run_compare


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


@pytest.mark.slow
def test_outputs_and_resume(config_file, tmp_path):
    out_root = tmp_path / "results"
    first = run_compare(config_file, results_dir=out_root, progress=False)
    n_cells = 2 * 3 + 2 + 3  # main grid, Pareto sweep, Pareto points
    assert first["computed"] == n_cells and first["reused"] == 0
    out = first["dir"]
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert len(rows) == 6
    assert {r["policy"] for r in rows} == {"greedy", "tf-1ms", "smdp"}
    for r in rows:
        assert int(r["episodes"]) == 2
        if r["policy"] == "smdp":
            assert float(r["reward_rate_vs_smdp"]) == 0.0
    md = (out / "summary.md").read_text()
    assert "## poisson, load 0.3" in md and "Δ vs smdp" in md
    for png in (
        "latency_mean_vs_load.png",
        "latency_p99_vs_load.png",
        "power_vs_load.png",
        "sla_attainment_vs_load.png",
        "pareto_latency_power.png",
        "smdp_policy_structure.png",
    ):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png

    # resume: nothing recomputed, identical numbers
    second = run_compare(config_file, results_dir=out_root, progress=False)
    assert second["computed"] == 0 and second["reused"] == n_cells
    assert list(csv.DictReader(open(out / "summary.csv"))) == rows

    # an interrupted sweep: a missing cell is recomputed, and only that one, identically
    victim = sorted((out / "cells").glob("main-poisson-0.7-greedy-*.json"))[0]
    before = json.loads(victim.read_text())
    victim.unlink()
    third = run_compare(config_file, results_dir=out_root, progress=False)
    assert third["computed"] == 1
    assert json.loads(victim.read_text())["result"] == before["result"]

    # a changed config never reuses stale cells
    changed = dict(SMALL, env={**SMALL["env"], "horizon_requests": 300})
    fourth = run_compare(
        changed | {"_path": "x", "seeds": [0, 1]}, results_dir=out_root, progress=False
    )
    assert fourth["computed"] == n_cells


@pytest.mark.slow
def test_policies_are_paired_on_the_same_seeds(config_file, tmp_path):
    res = run_compare(config_file, results_dir=tmp_path, progress=False)
    seeds = {json.dumps(r["result"]["seeds"]) for r in res["records"]}
    assert seeds == {json.dumps([0, 1])}


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"colour": 1}, "colour"),
        ({"loads": []}, "loads"),
        ({"loads": [0.5, -1]}, "loads"),
        ({"seeds": 0}, "seeds=0"),
        ({"policies": {"magic": {}}}, "magic"),
        ({"reference": "oracle"}, "reference='oracle'"),
    ],
)
def test_bad_config(tmp_path, patch, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**SMALL, **patch}))
    with pytest.raises(ValueError) as exc:
        load_config(path)
    assert needle in str(exc.value)


def test_missing_config_lists_shipped(tmp_path):
    with pytest.raises(FileNotFoundError, match="default"):
        load_config(tmp_path / "nope.yaml")


def test_shipped_configs_load():
    for name in ("default", "demo"):
        cfg = load_config(name)
        assert cfg["reference"] in cfg["policies"]


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"seeds": "two"}, "seeds"),
        ({"workloads": {}}, "workloads"),
        ({"policies": ["greedy"]}, "policies"),
        ({"pareto": {"workload": "nope", "energy_weights": [0.1]}}, "pareto.workload='nope'"),
    ],
)
def test_dict_configs_are_validated_too(tmp_path, patch, needle):
    with pytest.raises(ValueError) as exc:
        run_compare({**SMALL, **patch}, results_dir=tmp_path, progress=False)
    assert needle in str(exc.value)


#: ways a cell file gets damaged: truncated mid-write, emptied, garbage, another cell's record
DAMAGE = {
    "truncated": lambda path, other: path.write_bytes(
        path.read_bytes()[: len(path.read_bytes()) // 2]
    ),
    "empty-object": lambda path, other: path.write_text("{}"),
    "garbage": lambda path, other: path.write_bytes(b"\x00\xff\x13garbage"),
    "empty-file": lambda path, other: path.write_bytes(b""),
    "other-cell": lambda path, other: path.write_bytes(other.read_bytes()),
    "no-episodes": lambda path, other: path.write_text(
        json.dumps(
            {
                **json.loads(path.read_text()),
                "result": {"policy": "greedy", "seeds": [0, 1], "episodes": []},
            }
        )
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_cell_is_named_moved_aside_and_recomputed(tmp_path, capsys, damage):
    cfg = {
        **SMALL,
        "env": {**SMALL["env"], "horizon_requests": 100},
        "policies": {"greedy": {}, "smdp": {}},
    }
    cfg.pop("pareto")
    cfg.pop("structure")
    first = run_compare(dict(cfg), results_dir=tmp_path, progress=False)
    cells = sorted((first["dir"] / "cells").glob("*.json"))
    victim, other = cells[0], cells[1]
    DAMAGE[damage](victim, other)
    capsys.readouterr()
    again = run_compare(dict(cfg), results_dir=tmp_path, progress=False)
    err = capsys.readouterr().err
    assert f"warning: {victim} is damaged" in err and "recomputing the cell" in err
    assert (victim.parent / f"{victim.name}.corrupt").exists()
    assert again["computed"] == 1 and again["reused"] == len(cells) - 1
    assert again["records"] == first["records"]
    assert json.loads(victim.read_text()) == json.loads(json.dumps(first["records"][0]))


def test_routing_sweep_loads_are_rates_per_replica_and_runs_on_the_harness(tmp_path):
    """``load_per_replica`` (issue 66, item 6: sweeps over replica counts and routers on
    the comparison harness, whose cells run on the local or the Ray backend): each load
    is a rate per replica, times each variant's replicas; the shipped sweep loads; a
    tiny one runs; a bad setting is one line naming the field."""
    from experiments.compare import cells, validate_config

    shipped = validate_config(load_config("routing-sweep"))
    rates = {(c.workload, c.load): c.env_kwargs["workload"]["rate_per_s"] for c in cells(shipped)}
    assert rates[("r2/poisson", 2.0)] == 4.0 and rates[("r32/poisson", 3.5)] == 112.0
    tiny = {
        "name": "tiny-routing",
        "env_id": "batch_env/LLMRouting-v0",
        "env": {"horizon_requests": 40},
        "envs": {"r1": {"replicas": 1}, "r3": {"replicas": [{}, {}, {}]}},
        "workloads": {"poisson": {"kind": "poisson"}},
        "load_is_rate": True,
        "load_per_replica": True,
        "loads": [2.0],
        "seeds": 1,
        "reference": "round-robin",
        "policies": {"round-robin": {}, "power-of-two": {}},
    }
    out = run_compare(tiny, results_dir=tmp_path, progress=False)
    assert out["computed"] == 4 and out["reused"] == 0
    rows = (out["dir"] / "summary.csv").read_text().splitlines()
    assert len(rows) == 1 + 4
    for patch, needle in (
        ({"load_is_rate": False}, "load_per_replica=true needs load_is_rate=true"),
        ({"envs": {"r1": {}}}, "needs envs.r1.replicas"),
        ({"load_per_replica": "yes"}, "load_per_replica='yes' must be true or false"),
    ):
        with pytest.raises(ValueError, match=needle):
            validate_config({**tiny, **patch})
