"""The agents experiment runner, on a tiny config."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

import baselines
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
    # a run of some settings updates them and keeps the others in the summary
    kept = json.loads((out["dir"] / "summary.json").read_text())["settings"]
    assert set(kept) == {"poisson-0.6", "mmpp"}
    assert "| mmpp |" in (out["dir"] / "summary.md").read_text()


TASKS_CFG = {
    "name": "tiny-task-agents",
    "algo": "ppo",
    "n_timesteps": 1024,
    "train_seeds": [0, 1],
    "tasks": {
        "any-load": {
            "task": "batch_env/AnyLoad-v0",
            "centering_gain": "smdp-by-load",
            "train_env_kwargs": {"horizon_requests": 200},
            "protocol": False,
            "check": {
                "loads": [0.3, 0.7],
                "seeds": [3000, 3001],
                "horizon_requests": 300,
                "baselines": ["smdp-adaptive", {"serve-at-once": {"policy": "greedy"}}],
            },
        }
    },
}


@pytest.mark.slow
def test_task_entries_train_check_and_tabulate(tmp_path):
    """A task entry trains its runs on the task, evaluates them and the baselines at the
    check loads (each run and baseline as a direct evaluation would: same seeds, same
    figures), with the exact per-load optimum, and writes the tables and the plot."""
    import gymnasium as gym

    import baselines
    import batch_env
    from agents import load_policy
    from baselines.smdp import gains_at_loads

    path = tmp_path / "tasks.yml"
    path.write_text(yaml.safe_dump(TASKS_CFG))
    out = run_agents_experiment(
        path, runs_dir=tmp_path / "runs", results_dir=tmp_path / "results", workers=2
    )
    row = out["results"]["tasks"]["any-load"]
    assert out["results"]["settings"] == {} and "protocol" not in row
    check = row["check"]
    env = gym.make("batch_env/AnyLoad-v0", horizon_requests=300)
    bounds = gains_at_loads(env, [0.3, 0.7])
    runs = [tmp_path / "runs" / "tiny-task-agents" / f"any-load-s{s}" for s in (0, 1)]
    for i, load in enumerate((0.3, 0.7)):
        lr = check["loads"][i]
        assert lr["load"] == load and lr["bound_cost_per_s"] == pytest.approx(bounds[i])
        direct = []
        for run in runs:
            pol = load_policy(run)
            costs = [
                -batch_env.evaluate(
                    pol, env, n_episodes=1, seed=s, options={"load": load}
                ).episodes[0]["reward_rate_per_s"]
                for s in (3000, 3001)
            ]
            direct.append(sum(costs) / 2)
        assert lr["agent"]["cost_per_s"]["per_run"] == pytest.approx(direct, rel=1e-12)
        gaps = [100 * (c / bounds[i] - 1) for c in direct]
        assert lr["agent"]["gap_percent"]["per_run"] == pytest.approx(gaps, rel=1e-9)
        greedy = [
            -batch_env.evaluate(
                baselines.make("greedy", env), env, n_episodes=1, seed=s, options={"load": load}
            ).episodes[0]["reward_rate_per_s"]
            for s in (3000, 3001)
        ]
        b = lr["baselines"]["serve-at-once"]["cost_per_s"]
        assert b["mean"] == pytest.approx(sum(greedy) / 2, rel=1e-12)
        d = [(direct[0] + direct[1]) / 2 - g for g in greedy]  # runs averaged per seed
        assert b["agent_minus_baseline"]["mean"] == pytest.approx(sum(d) / 2, rel=1e-9)
        assert set(lr["baselines"]) == {"smdp-adaptive", "serve-at-once"}
    md = (out["dir"] / "summary.md").read_text()
    assert "### any-load: at fixed loads" in md and "| | smdp-adaptive |" in md
    assert (out["dir"] / "tasks.png").read_bytes()[:4] == b"\x89PNG"
    # a second run reuses the runs and the cached evaluations, with the same figures
    again = run_agents_experiment(
        path, runs_dir=tmp_path / "runs", results_dir=tmp_path / "results", workers=1
    )
    assert json.dumps(again["results"]["tasks"]["any-load"]["check"]) == json.dumps(check)


def test_protocol_summary_pairs_runs_with_the_stored_references():
    """The protocol figures of runs whose per-seed rates equal a stored reference's are
    that reference's: zero paired difference to it, its normalized score; a run halfway
    between greedy and smdp scores halfway, paired."""
    from batch_env import tasks
    from experiments.agents_tasks import _summarize_protocol

    tid = "batch_env/LowLoadEnergy-v0"
    ref = tasks.references()[tid]["policies"]
    seeds = list(tasks.get(tid).seeds)

    def run(per_seed):
        return {
            "reward_rate_per_s": sum(per_seed) / len(per_seed),
            "ci95": 0.0,
            "wall_s": 1.0,
            "per_seed": list(per_seed),
            "seeds": seeds,
        }

    g, s = ref["greedy"]["per_seed"], ref["smdp"]["per_seed"]
    same = _summarize_protocol(tid, [run(s), run(s)])
    d = same["vs_reference"]["smdp"]["agent_minus_reference_cost_percent"]
    assert d["mean"] == pytest.approx(0.0, abs=1e-12) and d["ci95"] == pytest.approx(0.0, abs=1e-12)
    assert same["normalized_score"]["mean"] == pytest.approx(
        tasks.normalized_score(tid, ref["smdp"]["reward_rate_per_s"]), rel=1e-9
    )
    half = _summarize_protocol(tid, [run([(a + b) / 2 for a, b in zip(g, s, strict=True)])] * 2)
    top = tasks.bound_or_best(tid)
    want = (ref["smdp"]["reward_rate_per_s"] + ref["greedy"]["reward_rate_per_s"]) / 2
    assert half["normalized_score"]["mean"] == pytest.approx(
        (want - ref["greedy"]["reward_rate_per_s"]) / (top - ref["greedy"]["reward_rate_per_s"])
    )
    assert half["vs_reference"]["greedy"]["agent_minus_reference_cost_percent"]["mean"] < 0


def test_protocol_keeps_each_request_class_and_pairs_it(tmp_path):
    """On a task with request classes the protocol keeps each class's figures per seed
    (those of a direct evaluation, also when read back from its episode cache), and the
    per-class summary pairs the runs with a reference per seed: a run equal to the
    reference is 0 from it, and the agent's figure is the mean over runs."""
    import gymnasium as gym

    import baselines
    import batch_env
    from experiments.agents_tasks import _class_lines, _summarize_classes, class_references
    from experiments.benchmark import CLASS_METRICS, run_protocol

    tid = "batch_env/LLMTwoClasses-v0"
    seeds = (7, 8)
    cache = tmp_path / "episodes.jsonl"

    def budget_2048():  # run (first) or read back from the episode cache (again)
        return run_protocol(
            tid,
            "static-budget",
            seeds=seeds,
            horizon_requests=150,
            params={"budget": 2048},
            cache=cache,
        )

    got = budget_2048()
    assert set(got["classes"]) == {"chat", "batch"}
    env = gym.make(tid, horizon_requests=150)
    for i, s in enumerate(seeds):
        ep = batch_env.evaluate(
            baselines.make("static-budget", env, budget=2048), env, n_episodes=1, seed=s
        ).episodes[0]
        for name in ("chat", "batch"):
            for m in CLASS_METRICS:
                assert got["classes"][name][m]["per_seed"][i] == pytest.approx(
                    ep["classes"][name][m], rel=1e-12, nan_ok=True
                )
    again = budget_2048()
    assert json.dumps(again["classes"]) == json.dumps(got["classes"])
    other = run_protocol(
        tid, "static-budget", seeds=seeds, horizon_requests=150, params={"budget": 256}
    )
    summary = _summarize_classes([got, other], {"greedy": got})
    att = summary["chat"]["sla_attainment"]
    runs = [
        got["classes"]["chat"]["sla_attainment"]["mean"],
        other["classes"]["chat"]["sla_attainment"]["mean"],
    ]
    assert att["per_run"] == pytest.approx(runs) and att["mean"] == pytest.approx(sum(runs) / 2)
    same = _summarize_classes([got, got], {"greedy": got})
    d = same["batch"]["ttft_p99_ms"]["vs"]["greedy"]["agent_minus_reference"]
    assert d["mean"] == pytest.approx(0.0, abs=1e-12)
    assert "| chat | SLA attainment |" in "\n".join(_class_lines("x", tid, summary))
    # greedy and the best realizable reference where the env has classes; none where not
    assert class_references(tid) == ["greedy", "budget-best"]
    assert class_references("batch_env/LLMBurstyLongPrompts-v0") == []


def test_a_run_that_diverged_in_training_is_named_and_left_out(tmp_path):
    """A run whose final training evaluation scores below DIVERGED_SCORE (paired with
    greedy on the same episodes) is diverged: named with its figures, not evaluated, and
    listed under the table; a run above it, or without a paired record, is not."""
    from experiments.agents_tasks import DIVERGED_SCORE, diverged, markdown

    def run(name, score):
        d = tmp_path / name
        d.mkdir()
        rec = {
            "timesteps": 200704,
            "deterministic": {"reward_rate_per_s": [-986.5, 300.0], "batch_size_mean": [1.25, 0.1]},
        }
        if score is not None:
            rec["reference"] = {"reward_rate_per_s": [-3.56, 0.6], "normalized_score": score}
        (d / "final_evaluation.json").write_text(json.dumps(rec))
        return d

    gone = diverged(run("a", DIVERGED_SCORE - 1))
    assert gone["normalized_score"] == DIVERGED_SCORE - 1 and gone["reward_rate_per_s"] == -986.5
    assert diverged(run("b", DIVERGED_SCORE + 1)) is None
    assert diverged(run("c", None)) is None
    assert diverged(tmp_path / "missing") is None
    # a run that acts by sampling is judged by its draws: its most likely action starving
    # the server (an older record: the reference was the deterministic one's) is not
    # divergence; its draws doing so are
    d = run("s", DIVERGED_SCORE - 1)
    rec = json.loads((d / "final_evaluation.json").read_text())
    rec["stochastic"] = {"reward_rate_per_s": [-3.3, 0.1], "batch_size_mean": [3.0, 0.1]}
    (d / "final_evaluation.json").write_text(json.dumps(rec))
    (d / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "algo": "ppo",
                "env_id": "t",
                "env_kwargs": {},
                "wrappers": [],
                "score_reference": [-3.56, -2.98],
            }
        )
    )
    assert diverged(d) is None
    rec["stochastic"] = {"unfinished": {"seed": 100000, "steps": 10, "max_steps": 10}}
    rec["deterministic"] = dict(rec["stochastic"])
    (d / "final_evaluation.json").write_text(json.dumps(rec))
    assert diverged(d)["unfinished"]["seed"] == 100000
    lines = "\n".join(markdown({"tasks": {}}, {"x": {"task": "t", "diverged": [gone]}}))
    assert "`x`: `a` diverged in training" in lines and "-986.50 per s" in lines


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task": "batch_env/Nope-v0"}, "is not a benchmark task"),
        ({"check": {"loads": [0.3, 1.5], "seeds": [1]}}, "loads=\\[0.3, 1.5\\] must be"),
        ({"check": {"loads": [0.3], "seeds": [1], "baselines": ["nope"]}}, "'nope' is neither"),
        ({"check": {"loads": [0.3], "seeds": []}}, "seeds=\\[\\] must be"),
        ({"protocol": "yes"}, "protocol='yes' must be true or false"),
        ({"protocol": False, "check": None}, "with protocol: false give a check"),
        ({"hyperparams": "missing.yml"}, "hyperparams='missing.yml': no file"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_task_entries_are_named(tmp_path, change, message):
    entry = {"task": "batch_env/AnyLoad-v0", **change}
    if entry.get("check") is None:
        entry.pop("check", None)
    cfg = {
        "name": "bad",
        "algo": "ppo",
        "n_timesteps": 10,
        "train_seeds": [0],
        "tasks": {"e": entry},
    }
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=message):
        load_agents_config(path)


def test_a_config_needs_settings_or_tasks(tmp_path):
    path = tmp_path / "empty.yml"
    path.write_text(
        yaml.safe_dump({"name": "e", "algo": "ppo", "n_timesteps": 10, "train_seeds": [0]})
    )
    with pytest.raises(ValueError, match="give settings .* tasks, or both"):
        load_agents_config(path)
    path.write_text(
        yaml.safe_dump({**TINY, "eval_seeds": None} | {"eval_seeds": [1]} | {"env": None})
    )
    with pytest.raises(ValueError, match="env=None must be a mapping"):
        load_agents_config(path)


def test_entry_warm_starts_are_checked(tmp_path):
    """An entry's warm_start gets its defaults or a named error; n_timesteps 0 (the cloned
    policy alone) only with a warm start."""
    from experiments.agents_tasks import check_entry, train_args

    base = {"task": "batch_env/Bursty-v0", "check": {"seeds": [1]}}
    e = check_entry("e", {**base, "n_timesteps": 0, "warm_start": {"policy": "greedy"}}, tmp_path)
    assert e["warm_start"] == {
        "policy": "greedy",
        "params": {},
        "steps": 100000,
        "epochs": 10,
        "dagger": 0,
    }
    cfg = {"algo": "ppo", "n_timesteps": 5, "tasks": {"e": e}}
    args = train_args(cfg, "e", 0, str(tmp_path / "r"))
    assert args.warm_start == e["warm_start"] and args.n_timesteps == 0
    with pytest.raises(ValueError, match="e: n_timesteps"):
        check_entry("e", {**base, "n_timesteps": 0}, tmp_path)
    with pytest.raises(ValueError, match=r"e: warm_start: unknown key\(s\) \['teacher'\]"):
        check_entry("e", {**base, "warm_start": {"policy": "greedy", "teacher": 1}}, tmp_path)


def test_check_loads_follow_whether_the_task_draws_its_load(tmp_path):
    """A check sets loads on a task that draws its load per episode, and only there."""
    from experiments.agents_tasks import check_entry

    fixed = check_entry("e", {"task": "batch_env/Bursty-v0", "check": {"seeds": [1]}}, tmp_path)
    assert fixed["check"]["loads"] == [None]
    with pytest.raises(ValueError, match="does not draw its load"):
        check_entry(
            "e", {"task": "batch_env/Bursty-v0", "check": {"loads": [0.5], "seeds": [1]}}, tmp_path
        )
    with pytest.raises(ValueError, match="draws its load per episode: give loads"):
        check_entry("e", {"task": "batch_env/AnyLoad-v0", "check": {"seeds": [1]}}, tmp_path)


def test_entry_evaluation_settings_reach_the_run(tmp_path):
    """keep_best, eval_freq and eval_episodes of an entry are checked and reach TrainArgs."""
    from experiments.agents_tasks import check_entry, train_args

    base = {"task": "batch_env/Bursty-v0", "check": {"seeds": [1]}}
    e = check_entry("e", {**base, "keep_best": True, "eval_freq": 7, "eval_episodes": 2}, tmp_path)
    args = train_args({"algo": "ppo", "n_timesteps": 30, "tasks": {"e": e}}, "e", 0, "r")
    assert (args.keep_best, args.eval_freq, args.eval_episodes) == (True, 7, 2)
    plain = train_args({"algo": "ppo", "n_timesteps": 30, "tasks": {"e": base}}, "e", 0, "r")
    assert (plain.keep_best, plain.eval_freq, plain.eval_episodes) == (None, 10, None)
    for bad, match in [
        ({"keep_best": "yes"}, "e: keep_best='yes' must be true or false"),
        ({"eval_freq": 0}, "e: eval_freq"),
        ({"eval_episodes": 1.5}, "e: eval_episodes"),
    ]:
        with pytest.raises(ValueError, match=match):
            check_entry("e", {**base, **bad}, tmp_path)


def test_check_baseline_envs_and_the_gap_closed(tmp_path):
    """A check baseline's own env_kwargs reach its env only (greedy's episodes are the
    same with ticks: the arrivals stay paired; a timeout fires only with them), and the
    gap closed is measured from the cheapest 'from' baseline to the 'to' one."""
    from experiments.agents_tasks import check_entry, check_episodes
    from experiments.harness.stats import gap_closed

    ticks = {"decision_interval_ms": 0.5}
    check = {
        "seeds": [5, 6],
        "horizon_requests": 2000,
        "baselines": [
            "greedy",
            {"tick": {"policy": "timeout", "max_queue_delay_ms": 8, "env_kwargs": ticks}},
            "smdp-oracle",
        ],
        "gap": {"from": ["greedy", "tick"], "to": "smdp-oracle"},
    }
    e = check_entry("e", {"task": "batch_env/Bursty-v0", "check": check}, tmp_path)
    tick = e["check"]["baselines"][1]
    assert tick == {
        "label": "tick",
        "policy": "timeout",
        "params": {"max_queue_delay_ms": 8},
        "env_kwargs": ticks,
    }
    c = e["check"]

    def run(name, env_kwargs=None, **params):
        res = check_episodes(
            lambda env: baselines.make(name, env=env, **params),
            "batch_env/Bursty-v0",
            c,
            env_kwargs=env_kwargs,
        )
        return res["None"]["reward_rate_per_s"]

    assert run("greedy") == run("greedy", ticks)
    with pytest.raises(ValueError, match="needs decision epochs between arrivals"):
        run("timeout", None, max_queue_delay_ms=8)  # the check's own env has no ticks
    assert all(np.isfinite(run("timeout", ticks, max_queue_delay_ms=8)))
    row = {
        "agent": {"cost_per_s": {"per_run": [27.5, 28.0, 26.0]}},
        "baselines": {
            k: {"cost_per_s": {"mean": v}}
            for k, v in {"greedy": 30.0, "tick": 28.0, "smdp-oracle": 27.0}.items()
        },
    }
    gc = gap_closed(row, c["gap"])
    assert gc["from"] == "tick" and gc["to"] == "smdp-oracle"
    assert gc["per_run"] == pytest.approx([50.0, 0.0, 200.0])
    assert gc["mean"] == pytest.approx(250 / 3)
    for bad in (
        {"from": ["greedy"], "to": "nope"},
        {"from": [], "to": "smdp-oracle"},
        {"from": ["greedy", "smdp-oracle"], "to": "smdp-oracle"},
        ["greedy"],
    ):
        with pytest.raises(ValueError, match="gap=.* must be"):
            check_entry(
                "e", {"task": "batch_env/Bursty-v0", "check": {**check, "gap": bad}}, tmp_path
            )
    bad_env = {**check, "baselines": [{"t": {"policy": "greedy", "env_kwargs": [1]}}]}
    bad_env.pop("gap")
    with pytest.raises(ValueError, match=r"t: env_kwargs=\[1\] must be a mapping"):
        check_entry("e", {"task": "batch_env/Bursty-v0", "check": bad_env}, tmp_path)


def test_iqm_and_the_stratified_bootstrap_follow_rliables_definitions():
    """IQM is the mean of the middle half (rliable: scipy's trim_mean at 0.25); the
    optimality gap the mean shortfall below 1; the stratified bootstrap keeps every task
    in every resample with its own number of runs, so a task whose runs agree adds no
    spread, and identical runs everywhere give a zero-width interval."""
    from experiments.harness.stats import aggregate_scores, iqm, stratified_bootstrap

    assert iqm([1, 2, 3, 4, 5, 6, 7, 8]) == pytest.approx(4.5)
    assert iqm([0.0, 10.0, 1.0, 1.0]) == pytest.approx(1.0)
    agg = aggregate_scores({"a": [0.5, 0.5, 0.5], "b": [1.2, 1.2, 1.2]})
    assert agg["IQM"] == {
        "value": pytest.approx(0.85),
        "low": pytest.approx(0.85),
        "high": pytest.approx(0.85),
    }
    assert agg["optimality gap"]["value"] == pytest.approx(0.25)  # (0.5 + 0) / 2
    assert agg["n"] == {"runs": 6, "tasks": 2}
    # each resample has task a's 2 runs and task b's 3: the pooled count is fixed, and
    # every resample's mean lies between what a's and b's runs allow
    boot = stratified_bootstrap(
        {"a": [0.0, 1.0], "b": [5.0, 5.0, 5.0]}, lambda x: [x.size, x.mean()], 500
    )
    assert set(boot[:, 0]) == {5.0}
    assert boot[:, 1].min() >= 15 / 5 and boot[:, 1].max() <= 17 / 5
    assert len(set(boot[:, 1].round(9))) == 3  # a contributes 0, 1 or 2
    wide = aggregate_scores({"a": [0.1, 0.9, 0.2, 0.8], "b": [0.5, 0.6]})
    assert wide["mean"]["low"] < wide["mean"]["value"] < wide["mean"]["high"]
    with pytest.raises(ValueError, match=r"task 'b' has scores \[nan\]"):
        aggregate_scores({"a": [0.1], "b": [float("nan")]})


def test_aggregates_group_entries_by_method_over_tasks():
    """Entries with the same method (the algorithm and what else they change, or their
    ``method``) pool their runs' protocol scores over tasks; ablations without a protocol
    and diverged runs are counted apart; the table follows the tasks' table."""
    from experiments.agents_tasks import _aggregate_lines, aggregates, method_of

    cfg = {
        "algo": "ppo",
        "tasks": {
            "x": {"task": "batch_env/LLMTwoClasses-v0"},
            "y": {"task": "batch_env/LLMClockBursts-v0"},
            "y-warm": {
                "task": "batch_env/LLMClockBursts-v0",
                "warm_start": {"policy": "clock-queue"},
            },
            "z": {"task": "batch_env/LLMClockBursts-v0", "protocol": False, "method": "abl"},
        },
    }

    def row(task, scores, diverged=0):
        return {
            "task": task,
            "protocol": {"per_run": [{"normalized_score": s} for s in scores]},
            "diverged": [{}] * diverged,
        }

    rows = {
        "x": row("batch_env/LLMTwoClasses-v0", [0.2, 0.4, 0.6], diverged=1),
        "y": row("batch_env/LLMClockBursts-v0", [0.8, 1.0]),
        "y-warm": row("batch_env/LLMClockBursts-v0", [0.9, 0.95, 1.0]),
        "z": {"task": "batch_env/LLMClockBursts-v0", "check": {}},
    }
    assert method_of(cfg, "x") == method_of(cfg, "y") == "ppo"
    assert method_of(cfg, "y-warm") == "ppo, warm start from clock-queue"
    assert method_of(cfg, "z") == "abl"
    agg = aggregates(cfg, rows)
    assert set(agg) == {"ppo", "ppo, warm start from clock-queue"}
    assert agg["ppo"]["n"] == {"runs": 5, "tasks": 2} and agg["ppo"]["diverged"] == 1
    assert agg["ppo"]["mean"]["value"] == pytest.approx(0.6)
    lines = _aggregate_lines(agg)
    assert any(line.startswith("| ppo |") and "5 (+1 diverged)" in line for line in lines)
