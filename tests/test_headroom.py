"""``batch-env headroom`` (experiments/headroom.py) on a tiny protocol: the best constant
is the tuning's best, the per-episode best is at least as good seed by seed, the
planners run on the first held-out seeds and report their CPU per decision."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import headroom
from experiments.cli import main


def test_headroom_figures_on_a_tiny_protocol():
    r = headroom.measure(
        "batch_env/LowLoadEnergy-v0",
        horizon=60,
        eval_seeds=3,
        planner_seeds=2,
        planner_horizon=40,
        top=3,
        samples=2,
    )
    rates = r["tuning"]["rates"]
    assert len(rates) == r["actions"] == 33
    assert r["best_constant"] == max(rates, key=rates.get)
    assert r["top"][0] == r["best_constant"] and len(r["top"]) == 3
    runs = r["runs"]
    best = np.array(runs[f"constant {r['best_constant']}"]["per_seed"])
    per_episode = np.max([runs[f"constant {a}"]["per_seed"] for a in r["top"]], axis=0)
    assert (per_episode >= best).all()
    assert r["figures"]["best constant per episode"]["diff"] >= 0
    held = r["held_out"]["seeds"]
    assert runs["rollout"]["seeds"] == [held[0], held[-1]]  # spread over the held-out ones
    assert runs["rollout"]["cpu_s_per_decision"] > 0
    assert runs["rollout-oracle"]["cpu_s_per_decision"] > 0
    assert set(r["figures"]) == {
        "greedy",
        "best constant per episode",
        "rollout",
        "rollout-oracle",
    }
    table = headroom.format_table([r])
    assert "LowLoadEnergy-v0" in table and "rollout" in table


def test_spread_seeds_covers_a_load_grid():
    from batch_env import tasks

    t = tasks.get("batch_env/AnyLoad-v0")
    seeds = headroom.spread_seeds(t, 4)
    loads = [t.load_of(s) for s in seeds]
    assert loads[0] == min(t.eval_loads) and loads[-1] == max(t.eval_loads)


def test_the_command_writes_its_files_and_refuses_an_unknown_task(tmp_path, capsys):
    out = tmp_path / "h"
    args = ["headroom", "--tasks", "LowLoadEnergy-v0", "--horizon-requests", "40"]
    args += ["--seeds", "2", "--no-planners", "--results-dir", str(out)]
    assert main(args) == 0
    data = json.loads((out / "LowLoadEnergy-v0.json").read_text())
    assert "rollout" not in data["figures"]
    assert "LowLoadEnergy-v0" in (out / "headroom.md").read_text()
    with pytest.raises(SystemExit):
        main(["headroom", "--seeds", "0"])
    assert main(["headroom", "--tasks", "NoSuchTask-v0", "--results-dir", str(out)]) == 2
    assert "NoSuchTask" in capsys.readouterr().err


def test_a_changed_problem_runs_on_the_base_env_with_the_tasks_kwargs():
    """``env_kwargs`` (batch-env clock-sensitivity's power models): the protocol runs the
    task's base env with the task's kwargs and the change, under the task's step net; a
    higher memory power costs more on the same episodes; the reference and oracle
    options of measure() hold."""
    from batch_env import llm_profile
    from experiments.benchmark import run_protocol

    task = "batch_env/LLMClockQwenH200-v0"
    base = llm_profile.load("qwen2.5-7b-h200")
    mem = base._arch_gpu().power_model["mem_w"]
    kw = dict(seeds=(0,), horizon_requests=60, warmup_requests=20, params={"budget": 512})
    same = run_protocol(task, "static-budget", env_kwargs={"profile": base.to_dict()}, **kw)
    plain = run_protocol(task, "static-budget", **kw)
    assert same["per_seed"] == plain["per_seed"]
    hot = base.with_power_model(mem_w=1.3 * mem).to_dict()
    costly = run_protocol(task, "static-budget", env_kwargs={"profile": hot}, **kw)
    assert costly["per_seed"][0] < plain["per_seed"][0]
    with pytest.raises(ValueError, match="env_kwargs is not for a cached run"):
        run_protocol(task, "greedy", cache="x.jsonl", env_kwargs={"profile": hot})
    # measure() on a changed problem (a cheap task: every LLM env builds its clocks'
    # profiles), with a reference of its own and no clairvoyant planner
    low = "batch_env/LowLoadEnergy-v0"
    r = headroom.measure(
        low,
        horizon=40,
        eval_seeds=2,
        planner_seeds=1,
        planner_horizon=30,
        top=2,
        samples=1,
        tuning=1,
        env_kwargs={"reward_weights": {"latency": 1.0, "energy": 4.0, "sla": 0.0, "drop": 1.0}},
        reference=("greedy", {}),
        oracle=False,
    )
    assert r["reference"] == {"policy": "greedy", "params": {}}
    plain = headroom.measure(
        low,
        horizon=40,
        eval_seeds=2,
        planner_seeds=1,
        planner_horizon=30,
        planners=False,
        tuning=1,
        top=2,
    )
    assert r["tuning"]["rates"] != plain["tuning"]["rates"]  # the energy weight changed them
    assert set(r["figures"]) == {"greedy", "best constant per episode", "reference", "rollout"}
