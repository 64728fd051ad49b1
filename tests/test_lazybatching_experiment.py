"""The node-level comparison: env variants, env_id, per-variant agents, ratio tables."""

from __future__ import annotations

import json

import pytest
import yaml

from experiments.compare import validate_config
from experiments.lazybatching import load_lazybatching_config, run_lazybatching

SMALL = {
    "name": "lazy-small",
    "env_id": "batch_env/NodeBatching-v0",
    "env": {"decision_interval_ms": 0.5, "horizon_requests": 150},
    "envs": {
        "rn": {"profile": "resnet50-v100", "max_batch_size": 16, "sla_ms": 15},
        "bert": {"profile": "bert-base-t4", "max_batch_size": 8, "sla_ms": 78},
    },
    "workloads": {"poisson": {"kind": "poisson"}},
    "loads": [0.05, 1.2],
    "seeds": 2,
    "reference": "graph-10",
    "policies": {"graph-10": {"name": "graph", "window_ms": 10}, "lazy": {}},
    "paper": {"source": "test", "latency_mean": 15.0, "throughput": 1.5, "sla_attainment": 5.5},
}


@pytest.mark.slow
def test_run_writes_ratios_for_every_variant(tmp_path):
    path = tmp_path / "lazy.yml"
    path.write_text(yaml.safe_dump(SMALL))
    res = run_lazybatching(path, results_dir=tmp_path / "results", progress=False)
    out = res["dir"]
    for f in (
        "summary.md",
        "summary.csv",
        "ratios.md",
        "ratios.json",
        "ratios.png",
        "latency_mean_vs_load.png",
    ):
        assert (out / f).stat().st_size > 0, f
    rat = json.loads((out / "ratios.json").read_text())
    assert set(rat["by_setting"]) == {"rn/poisson", "bert/poisson"}
    rn = rat["by_setting"]["rn/poisson"]
    assert rn["graph-10"]["latency_mean_ratio_gmean"] == pytest.approx(1.0)
    assert rn["lazy"]["latency_mean_ratio_gmean"] > 2.0  # light load: no 10 ms window to wait for
    assert rat["saturated_load"] == 1.2
    records = [json.loads(p.read_text()) for p in (out / "cells").glob("*.json")]
    assert {r["env_id"] for r in records} == {"batch_env/NodeBatching-v0"}
    assert {r["env_kwargs"]["profile"] for r in records} == {"resnet50-v100", "bert-base-t4"}
    assert "Paper (test)" in res["markdown"]


def test_config_errors(tmp_path):
    base = {k: v for k, v in SMALL.items() if k != "paper"}
    with pytest.raises(ValueError, match="env_id='batch_env/Nope-v0' is not one of"):
        validate_config(dict(base, env_id="batch_env/Nope-v0"))
    with pytest.raises(ValueError, match="must not contain"):
        validate_config(dict(base, envs={"a/b": {}}))
    bad = dict(base, policies={**base["policies"], "agent": {"agent": {"rn": str(tmp_path)}}})
    with pytest.raises(ValueError, match="no run for env variant"):
        validate_config(bad)
    cfg = validate_config(base)
    assert validate_config(cfg) == cfg  # idempotent: variants are expanded once


def test_shipped_config_loads():
    raw, train, paper = load_lazybatching_config("lazybatching")
    assert train["maskppo"]["algo"] == "ppo_mask"
    assert paper["latency_mean"] == 15.0
    assert raw["env_id"] == "batch_env/NodeBatching-v0"
