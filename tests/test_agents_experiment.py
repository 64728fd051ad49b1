"""The agents experiment runner, on a tiny config."""

from __future__ import annotations

import json

import pytest
import yaml

from experiments.agents import load_agents_config, run_agents_experiment

TINY = {
    "name": "tiny-agents",
    "algo": "ppo",
    "n_timesteps": 2048,
    "train_seeds": [0, 1],
    "eval_seeds": [500, 501],
    "eval_horizon_requests": 300,
    "centering_gain": "greedy",
    "env": {
        "profile": "resnet50-v100-linear",
        "idle_power_w": 0.0,
        "reward_weights": {"latency": 1.0, "energy": 0.5, "sla": 0.0, "drop": 1.0},
        "horizon_requests": 300,
    },
    "settings": {
        "poisson-0.6": {"workload": {"kind": "poisson", "load": 0.6}},
        "mmpp": {
            "workload": {
                "kind": "mmpp",
                "rates_per_s": [0.2, 1.1],
                "switch_rates_per_s": [20, 20],
                "load": 0.65,
            },
            "decision_interval_ms": 0.5,
        },
        "missing-trace": {"workload": {"kind": "trace", "path": "/nonexistent.csv", "load": 0.5}},
    },
    "triton_grid": {"max_queue_delay_ms": [1, 4], "max_batch_size": [16, 32]},
}


@pytest.mark.slow
def test_runner_trains_evaluates_and_tabulates(tmp_path):
    path = tmp_path / "tiny.yml"
    path.write_text(yaml.safe_dump(TINY))
    cfg = load_agents_config(path)
    assert cfg["name"] == "tiny-agents"
    out = run_agents_experiment(
        path, runs_dir=tmp_path / "runs", results_dir=tmp_path / "results", workers=2
    )
    res = out["results"]["settings"]
    assert set(res) == {"poisson-0.6", "mmpp"}
    assert "not found" in out["results"]["skipped"]["missing-trace"]
    p = res["poisson-0.6"]
    assert len(p["agent"]["per_training_seed"]) == 2 and p["smdp_gain"] > 0
    # the SMDP policy, evaluated, is within a few percent of its own gain here
    assert abs(p["baselines"]["smdp"]["mean"] / p["smdp_gain"] - 1) < 0.1
    assert "triton-best" in res["mmpp"]["baselines"] and "smdp_gain" not in res["mmpp"]
    assert res["mmpp"]["triton_best_params"]["max_batch_size"] in (16, 32)
    md = (out["dir"] / "summary.md").read_text()
    assert "| poisson-0.6 |" in md and "skipped" in md
    assert json.loads((out["dir"] / "summary.json").read_text())["settings"]
    assert (out["dir"] / "gaps.png").read_bytes()[:4] == b"\x89PNG"
    # finished runs are reused, not retrained
    model = tmp_path / "runs" / "tiny-agents" / "poisson-0.6-s0" / "model.zip"
    mtime = model.stat().st_mtime
    run_agents_experiment(
        path,
        runs_dir=tmp_path / "runs",
        results_dir=tmp_path / "results",
        workers=1,
        settings=["poisson-0.6"],
    )
    assert model.stat().st_mtime == mtime
