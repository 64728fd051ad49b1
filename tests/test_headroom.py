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
