"""The benchmark protocol's pieces: the per-episode load option, the grouped and paired
confidence intervals, tuning, the reference runs in parallel, and the shipped trace."""

from __future__ import annotations

import gzip
import hashlib
import json
import math

import gymnasium as gym
import numpy as np
import pytest
from scipy.stats import t as student_t

import baselines
import batch_env
import experiments.benchmark as bm
from batch_env import tasks
from batch_env.workload import datasets
from experiments.harness import stats


def test_reset_option_load_fixes_the_episode_load():
    env = gym.make("batch_env/AnyLoad-v0", oracle_info=True, horizon_requests=200)
    try:
        _, info = env.reset(seed=3, options={"load": 0.4})
        assert info["oracle"]["load"] == 0.4
        _, drawn = env.reset(seed=3)  # without the option: the seed's own draw
        assert 0.1 <= drawn["oracle"]["load"] <= 0.95 and drawn["oracle"]["load"] != 0.4
        with pytest.raises(
            ValueError,
            match=r"options\['load'\]=0\.99 is out of range: expected a finite number >= 0.1 and <= 0.95",
        ):
            env.reset(seed=3, options={"load": 0.99})
        with pytest.raises(ValueError, match="the only reset option is 'load'"):
            env.reset(seed=3, options={"rate": 5})
    finally:
        env.close()
    plain = gym.make("batch_env/DynamicBatching-v0")
    with pytest.raises(ValueError, match="the workload has no load_range"):
        plain.reset(seed=0, options={"load": 0.5})


def test_the_load_option_gives_the_fixed_load_episode():
    """An episode at options={"load": x} is statistically the fixed-load env's: the same
    mean rate (measured over a long episode)."""
    env = gym.make("batch_env/AnyLoad-v0", horizon_requests=20_000)
    res = batch_env.evaluate(batch_env_policy("greedy", env), env, 1, seed=5, options={"load": 0.3})
    rate = res.episodes[0]["throughput_rps"]
    assert rate == pytest.approx(0.3 * tasks.RESNET50_V100_MAX_TPUT_B32, rel=0.03)


def batch_env_policy(name, env):
    import baselines

    return baselines.make(name, env)


def test_grouped_half_width_is_the_stratified_estimator():
    x = np.array([1.0, 1.2, 5.0, 5.4, 9.0, 8.0])
    g = (0.1, 0.1, 0.5, 0.5, 0.9, 0.9)
    var = (np.var([1.0, 1.2], ddof=1) / 2 + np.var([5.0, 5.4], ddof=1) / 2 + 0.5 / 2) / 9
    assert stats.ci_half_width(x, g) == pytest.approx(student_t.ppf(0.975, 3) * math.sqrt(var))
    assert stats.grouped_mean(x, g) == pytest.approx((1.1 + 5.2 + 8.5) / 3)
    # without groups: the plain Student-t interval, much wider (the spread between loads)
    assert stats.ci_half_width(x) > 5 * stats.ci_half_width(x, g)
    assert math.isnan(stats.ci_half_width(np.array([1.0])))
    s = bm.summarize_rates(list(x), g)
    assert s["reward_rate_per_s"] == stats.grouped_mean(x, g) and s["per_seed"] == list(x)


def test_paired_score_is_zero_for_greedy_and_narrow():
    task_id = "batch_env/AnyLoad-v0"
    ref = tasks.references()[task_id]
    greedy = ref["policies"]["greedy"]
    out = bm.paired_score(task_id, greedy["per_seed"], greedy["seeds"])
    assert out["normalized_score"] == pytest.approx(0.0, abs=1e-12)
    assert out["normalized_score_ci95"] == 0.0
    at_bound = bm.paired_score(task_id, ref["bound_per_seed"], greedy["seeds"])
    assert at_bound["normalized_score"] == pytest.approx(1.0, abs=1e-12)
    assert at_bound["ratio_to_bound"] == pytest.approx(1.0) and at_bound["ratio_to_bound_ci95"] == 0
    # other seeds: the score of the mean, no paired interval
    other = bm.paired_score(task_id, greedy["per_seed"][:2], [1, 2])
    assert "normalized_score_ci95" not in other and "ratio_to_bound" not in other
    assert bm.paired_score("batch_env/Nope-v0", [1.0], [1]) == {}


@pytest.mark.parametrize("task_id", ["batch_env/AnyLoad-v0", "batch_env/LLMClockBursts-v0"])
def test_the_gain_over_the_best_constant_action_is_paired_per_seed(task_id):
    """Beside the score: the gain over the stored best constant action, % of its cost,
    paired seed by seed (by load cell on a load-grid task); 0 +- 0 for the best constant
    itself, and for a policy 1% of its cost cheaper on every seed, +1% +- 0."""
    ref = tasks.references()[task_id]
    const = ref["policies"][bm.BEST_CONSTANT]
    assert bm.REFERENCE_POLICIES[task_id][bm.BEST_CONSTANT] == (
        "constant",
        {"action": ref["best_constant"]["action"]},
    )
    n = len(tasks.get(task_id).seeds)
    seeds, base = const["seeds"][:n], np.asarray(const["per_seed"][:n])
    same = bm.paired_score(task_id, list(base), seeds, ref)
    assert same["gain_over_best_constant_pct"] == pytest.approx(0.0, abs=1e-12)
    assert same["gain_over_best_constant_ci95_pct"] == pytest.approx(0.0, abs=1e-12)
    loads = bm.seed_loads(tasks.get(task_id), seeds)
    cost = abs(stats.grouped_mean(base, tuple(tasks.get(task_id).eval_loads or ())))
    better = bm.paired_score(task_id, list(base + 0.01 * cost), seeds, ref)
    assert better["gain_over_best_constant_pct"] == pytest.approx(1.0)
    assert better["gain_over_best_constant_ci95_pct"] == pytest.approx(0.0, abs=1e-9)
    assert loads or not tasks.get(task_id).eval_loads
    # off the protocol's seeds: no pairing, no gain
    assert "gain_over_best_constant_pct" not in bm.paired_score(task_id, [1.0, 2.0], [1, 2], ref)
    row = {"task": task_id, "policy": "x", "protocol": True, "horizon_requests": 1, **better}
    row.update(reward_rate_per_s=1.0, ci95=0.1, seeds=seeds)
    assert "| +1.00% +- 0.00 |" in bm.format_benchmark([row])


def test_merge_puts_some_figures_into_the_references_and_settles_the_top(tmp_path):
    """``--references --only ... --merge``: the merged figures replace theirs, each with its
    provenance, in the task's order of policies; the others, the bound and the stamp stay;
    the top is settled again (a figure above the old top becomes it)."""
    out = tmp_path / "refs.json"
    stored = tasks.references()
    out.write_text(json.dumps(stored))
    tid = "batch_env/LLMTwoClasses-v0"
    ref = stored[tid]
    top = ref["policies"][ref["best_policy"]]
    better = {**top, "per_seed": [x + 0.5 for x in top["per_seed"]]}
    better["reward_rate_per_s"] = top["reward_rate_per_s"] + 0.5
    data = bm.merge_references({f"{tid} sarathi": better}, out)
    entry = data[tid]
    assert list(entry["policies"]) == list(ref["policies"])  # the task's order kept
    assert entry["policies"]["sarathi"]["per_seed"] == better["per_seed"]
    assert "provenance" in entry["policies"]["sarathi"]
    assert entry["best_policy"] == "sarathi" and entry["stamp"] == ref["stamp"]
    for label, fig in ref["policies"].items():
        if label != "sarathi":
            assert entry["policies"][label] == fig
    assert json.loads(out.read_text())[tid]["best_policy"] == "sarathi"
    with pytest.raises(ValueError, match="'nope' is not a reference policy"):
        bm.merge_references({f"{tid} nope": better}, out)
    with pytest.raises(ValueError, match="has no entry there"):
        bm.merge_references({f"{tid} sarathi": better}, tmp_path / "empty.json")


def test_references_of_an_installed_package_are_not_overwritten(tmp_path, monkeypatch, capsys):
    """Without --out, --references writes the stored references only in a git checkout."""
    from experiments.cli import main

    fake = tmp_path / "site-packages" / "batch_env" / "tasks_references.json"
    monkeypatch.setattr(bm, "REFERENCES_PATH", fake)
    assert main(["benchmark", "--references", "--tasks", "batch_env/LowLoadEnergy-v0"]) == 2
    err = capsys.readouterr().err
    assert "belong to an installed batch_env" in err and "--out FILE" in err
    assert not fake.exists()


def test_tune_picks_the_best_setting_on_the_tuning_seeds():
    grid = {"max_queue_delay_ms": [0.5, 8.0], "max_batch_size": [32]}
    out = bm.tune("batch_env/Trace-v0", "timeout", grid)
    rates = {p["max_queue_delay_ms"]: r for p, r in out["tuning_rates"]}
    assert set(rates) == {0.5, 8.0} and out["tuning_seeds"] == list(bm.TUNING_SEEDS)
    best = max(rates, key=rates.get)
    assert out["params"] == {"max_batch_size": 32, "max_queue_delay_ms": best}
    assert not set(bm.TUNING_SEEDS) & {s for t in tasks.TASKS.values() for s in t.seeds}


def test_references_are_the_same_in_parallel(tmp_path, monkeypatch):
    """jobs=2 gives figures identical to jobs=1 (each run is one process's, seeded)."""
    real = bm.run_protocol

    def short(task_id, policy, seeds=None, horizon_requests=None, params=None, cache=None):
        assert cache is None  # no cache_dir given: nothing is kept
        return real(task_id, policy, seeds=(1000, 1001), horizon_requests=300, params=params)

    monkeypatch.setattr(bm, "run_protocol", short)
    one = bm.compute_references(["batch_env/LowLoadEnergy-v0"], tmp_path / "a.json", None, 1)
    two = bm.compute_references(["batch_env/LowLoadEnergy-v0"], tmp_path / "b.json", None, 2)
    a, b = (d["batch_env/LowLoadEnergy-v0"] for d in (one, two))
    for name in ("random", "greedy", "smdp"):
        assert a["policies"][name]["per_seed"] == b["policies"][name]["per_seed"]
    assert a["bound_reward_rate_per_s"] == b["bound_reward_rate_per_s"]
    assert a["best_policy"] == "smdp"
    assert json.loads((tmp_path / "b.json").read_text())["batch_env/LowLoadEnergy-v0"] == b


def test_an_interrupted_protocol_resumes_from_its_episode_cache(tmp_path):
    """Finished episodes are read back instead of rerun (the figure from the file is what
    comes back), a policy's per-episode streams stay as in one uninterrupted run (random's
    second episode after a cached first equals the uninterrupted one's), a line cut by a
    killed run is skipped and rerun, and a changed parameter never reads the old lines."""
    tid, seeds, n = "batch_env/LowLoadEnergy-v0", (1000, 1001), 200
    whole = bm.run_protocol(tid, "random", seeds=seeds, horizon_requests=n)
    cache = tmp_path / "c" / "random.jsonl"
    first = bm.run_protocol(tid, "random", seeds=seeds[:1], horizon_requests=n, cache=cache)
    assert first["per_seed"] == whole["per_seed"][:1]
    with cache.open("a") as f:
        f.write('{"key": "cut mid-wri')  # a killed run's last line
    both = bm.run_protocol(tid, "random", seeds=seeds, horizon_requests=n, cache=cache)
    assert both["per_seed"] == whole["per_seed"]
    lines = cache.read_text().splitlines()
    assert len(lines) == 3 and lines[1].startswith('{"key": "cut')
    # the second run read seed 1000 from the file: rewrite its figure and it comes back
    rec = json.loads(lines[0])
    rec["reward_rate_per_s"] = -1.0
    cache.write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    again = bm.run_protocol(tid, "random", seeds=seeds, horizon_requests=n, cache=cache)
    assert again["per_seed"] == [-1.0, whole["per_seed"][1]]
    assert len(cache.read_text().splitlines()) == 3  # nothing was rerun
    # other parameters (or another task, length or seed) are other episodes
    other = bm.run_protocol(tid, "greedy", seeds=seeds[:1], horizon_requests=n, cache=cache)
    assert other["per_seed"] != [-1.0] and len(cache.read_text().splitlines()) == 4
    with pytest.raises(ValueError, match="cache is only for a named policy"):
        bm.run_protocol(tid, lambda env: None, seeds=seeds, horizon_requests=n, cache=cache)


def test_references_resume_only_when_asked(tmp_path, monkeypatch):
    """``compute_references(resume=True)`` reads a run's finished episodes; without it the
    run starts its cache afresh (episodes of older code are never reused); ``labels``
    runs some policies and leaves the references file alone."""
    real = bm.run_protocol
    tid = "batch_env/LowLoadEnergy-v0"

    def short(task_id, policy, seeds=None, horizon_requests=None, params=None, cache=None):
        return real(task_id, policy, (1000,), 200, params, cache)

    monkeypatch.setattr(bm, "run_protocol", short)
    out = tmp_path / "refs.json"
    kw = {"progress": None, "cache_dir": tmp_path, "labels": ["greedy"]}
    first = bm.compute_references([tid], out, **kw)["runs"][f"{tid} greedy"]
    assert not out.exists()  # some policies only: no references written
    cache = bm.episode_cache(tid, "greedy", tmp_path)
    rec = json.loads(cache.read_text())
    rec["reward_rate_per_s"] = -1.0
    cache.write_text(json.dumps(rec) + "\n")
    resumed = bm.compute_references([tid], out, resume=True, **kw)["runs"][f"{tid} greedy"]
    assert resumed["per_seed"] == [-1.0]
    fresh = bm.compute_references([tid], out, **kw)["runs"][f"{tid} greedy"]
    assert fresh["per_seed"] == first["per_seed"] != [-1.0]
    with pytest.raises(ValueError, match=r"\['lazy'\] is not a reference policy"):
        bm.compute_references([tid], out, progress=None, labels=["lazy"])


@pytest.mark.parametrize(
    ("name", "rows"), [("azure-conv-2023", 19_366), ("azure-code-2023", 8_819)]
)
def test_the_whole_traces_are_shipped_unchanged(name, rows):
    """``<trace>-gz`` decompresses to the upstream file (its registry SHA-256)."""
    d = datasets.get(f"{name}-gz")
    p = datasets.path(f"{name}-gz")
    assert d.shipped and datasets.sha256_of(p) == d.sha256 and p.stat().st_size == d.size_bytes
    raw = gzip.decompress(p.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == datasets.get(name).sha256
    from batch_env.workload import Trace

    assert Trace(dataset=f"{name}-gz").n_records == rows == d.rows


def test_a_corrupt_gzip_trace_is_a_clear_error(tmp_path):
    from batch_env.workload import Trace

    bad = tmp_path / "t.csv.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(ValueError, match="t.csv.gz.*not a readable CSV file"):
        _ = Trace(path=str(bad)).n_records


def test_benchmark_maps_reference_labels_and_reports_what_does_not_apply(capsys, monkeypatch):
    from experiments.cli import main

    # what is checked is the mapping, not the figures: two of each protocol's seeds
    full = bm.run_protocol
    monkeypatch.setattr(
        bm,
        "run_protocol",
        lambda tid, *a, **k: full(tid, *a, **{**k, "seeds": tasks.get(tid).seeds[:2]}),
    )
    rows = bm.run_benchmark(
        "greedy", ["batch_env/LLMMemoryPressure-v0", "batch_env/Trace-v0"], horizon_requests=60
    )
    assert rows[0]["params"] == {"cap": 256}  # greedy on an LLM server: the largest cap
    assert len(rows[0]["seeds"]) == 2 and math.isfinite(rows[0]["reward_rate_per_s"])
    assert "params" not in rows[1] and rows[1]["protocol"] is False
    lazy = bm.run_benchmark("lazy", ["batch_env/Trace-v0"], horizon_requests=60)
    assert "is not node-level" in lazy[0]["error"]
    assert "does not apply" in bm.format_benchmark(lazy)
    args = ["benchmark", "--policy", "lazy", "--tasks", "batch_env/Trace-v0"]
    assert main([*args, "--horizon-requests", "60"]) == 2
    assert "does not apply" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--policy='nope' is unknown"):
        bm.policy_factory("nope")


def test_report_writes_the_reference_table_and_plot(tmp_path, capsys):
    from experiments.cli import main

    assert main(["benchmark", "--report", "--results-dir", str(tmp_path)]) == 0
    md, png = tmp_path / "references.md", tmp_path / "references.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = md.read_text()
    refs = tasks.references()
    for tid, ref in refs.items():
        assert f"`{tid}`: {len(ref['protocol']['seeds'])} held-out seeds" in text
        greedy = ref["policies"]["greedy"]["reward_rate_per_s"]
        assert f"| {tid.removeprefix('batch_env/')} | greedy |" in text and f"{greedy:.3f}" in text
    rows = bm.reference_rows(refs)
    for r in rows:
        if r["policy"] == "greedy" and "score_undefined" in refs[r["task"]]:
            assert r["normalized_score"] is None and "no known policy" in r["score_note"]
        elif r["policy"] == "greedy":
            assert r["normalized_score"] == pytest.approx(0.0, abs=1e-12)
    assert "undefined (no bound; no known policy beats greedy)" in text
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    assert main(["benchmark", "--report", "--out", str(bad)]) == 2
    assert "not a references JSON file" in capsys.readouterr().err


def test_a_task_without_a_bound_needs_a_policy_clearly_above_greedy():
    """No bound and a best reference within the paired CI of greedy: no score."""
    seeds = [1000, 1001, 1002]

    def entry(best):
        return {
            "policies": {
                "greedy": {
                    "reward_rate_per_s": -10.0,
                    "per_seed": [-10.0, -11.0, -9.0],
                    "seeds": seeds,
                },
                "other": {
                    "reward_rate_per_s": float(np.mean(best)),
                    "per_seed": best,
                    "seeds": seeds,
                },
            },
            "best_policy": "other",
            "best_reward_rate_per_s": float(np.mean(best)),
        }

    task = tasks.Task(
        id="t", base="b", kwargs={}, summary="", hard="", bound=None, seeds=tuple(seeds)
    )
    clear = entry([-9.0, -10.1, -7.9])
    assert bm._best_beats_greedy(clear, task) == {}
    assert tasks.score_span(clear, "t") == (-10.0, pytest.approx(-9.0))
    noise = entry([-9.5, -11.2, -9.1])
    noise.update(bm._best_beats_greedy(noise, task))
    assert "other is +0.0667" in noise["score_undefined"]
    with pytest.raises(ValueError, match="no known policy beats greedy"):
        tasks.score_span(noise, "t")
    assert (
        bm.paired_score(
            "batch_env/Trace-v0", [-1.0], [1], ref={**noise, "protocol": {"seeds": seeds}}
        )["normalized_score"]
        is None
    )


def test_overridden_seeds_on_a_load_grid_keep_or_spread_their_loads():
    """On a load-grid task a protocol seed keeps its grid load, and other seeds (the
    tuning seeds) spread over the grid's loads, low and high alike."""
    from batch_env import tasks
    from experiments.benchmark import TUNING_SEEDS, run_protocol

    tid = "batch_env/NodeAnyLoad-v0"
    task = tasks.get(tid)
    mine = run_protocol(tid, "greedy", seeds=(task.seeds[17], task.seeds[3]), horizon_requests=30)
    assert mine["loads"] == [task.eval_loads[17], task.eval_loads[3]]
    tuning = run_protocol(tid, "greedy", seeds=TUNING_SEEDS, horizon_requests=30)["loads"]
    levels = sorted(set(task.eval_loads))
    assert tuning == [levels[0], levels[2], levels[4], levels[6], levels[8]]


def test_extra_seeds_are_disjoint_blocks_at_their_cells_loads():
    task = tasks.get("batch_env/NodeAnyLoad-v0")
    cells = task.grid_loads
    assert len(cells) == tasks.LOAD_GRID_CELLS and list(cells) == sorted(set(task.eval_loads))
    seeds = {task.extra_seed(j, c) for c in range(len(cells)) for j in range(50)}
    assert len(seeds) == 50 * len(cells) and not seeds & set(task.seeds)
    assert min(seeds) >= tasks.EXTRA_SEED_BASE
    assert all(task.load_of(task.extra_seed(j, c)) == cells[c] for c in range(10) for j in (0, 7))
    assert [task.load_of(s) for s in task.seeds] == list(task.eval_loads)
    assert task.load_of(3) is None and task.load_of(tasks.EXTRA_SEED_BASE - 1) is None
    with pytest.raises(ValueError, match="cell=10 is out of range"):
        task.extra_seed(0, 10)
    flat = tasks.get("batch_env/Trace-v0")  # no grid: one block, no loads
    assert (
        flat.extra_seed(4) == tasks.EXTRA_SEED_BASE + 4 and flat.load_of(flat.extra_seed(4)) is None
    )


def test_extra_allocation_is_neyman_and_reaches_the_target():
    rng = np.random.default_rng(0)
    loads = (0.1,) * 4 + (0.5,) * 4 + (0.9,) * 4
    x = np.concatenate([rng.normal(10, 0.1, 4), rng.normal(20, 1.0, 4), rng.normal(30, 10, 4)])
    want = bm.extra_allocation(list(x), loads, 0.5)
    sd = np.array([x[i : i + 4].std(ddof=1) for i in (0, 4, 8)])
    need = sd * sd.sum() / (9 * (0.5 / 1.96) ** 2)
    assert want == [max(0, math.ceil(n) - 4) for n in need]
    assert want[2] > want[1] >= want[0] == 0  # the noisy cell gets the episodes
    # with that many per cell, the stratified variance is at the target
    var = sum(s * s / max(4 + w, 1) for s, w in zip(sd, want, strict=True)) / 9
    assert 1.96 * math.sqrt(var) <= 0.5 + 1e-9
    flat = bm.extra_allocation([1.0, 3.0], (), 0.1)  # one cell: n = (s t / h)^2
    assert flat == [math.ceil((np.std([1.0, 3.0], ddof=1) * 1.96 / 0.1) ** 2) - 2]
    with pytest.raises(ValueError, match="target_half=0"):
        bm.extra_allocation([1.0, 3.0], (), 0.0)


def test_extend_to_precision_adds_protocol_episodes_on_extra_seeds():
    """A figure above its precision target gains extra held-out episodes, at the grid
    cells that scatter most, until it is under the target (or at the cap); the protocol's
    part is untouched, each extra episode reruns alike, and a figure under its target comes
    back as it was."""
    tid, h = "batch_env/NodeAnyLoad-v0", 200
    task = tasks.get(tid)
    fig = bm.run_protocol(tid, "random", horizon_requests=h)
    assert bm.extend_to_precision(tid, "random", {}, fig, target=1.0, horizon_requests=h) is fig
    target = 0.5 * fig["ci95"] / abs(fig["reward_rate_per_s"])
    out = bm.extend_to_precision(tid, "random", {}, fig, target=target, horizon_requests=h)
    n = task.episodes
    assert out["seeds"][:n] == fig["seeds"] and out["per_seed"][:n] == fig["per_seed"]
    extra = out["seeds"][n:]
    assert 0 < out["extra_episodes"] == len(extra) <= bm.MAX_EXTRA_FACTOR * n
    assert out["loads"] == [task.load_of(s) for s in out["seeds"]]
    again = bm.summarize_rates(out["per_seed"], tuple(out["loads"]))
    assert out["reward_rate_per_s"] == again["reward_rate_per_s"] and out["ci95"] == again["ci95"]
    assert out["precision_target_met"] == (out["ci95"] < target * abs(out["reward_rate_per_s"]))
    assert out["protocol_ci95"] == fig["ci95"]
    rerun = bm.run_protocol(tid, "random", seeds=extra[-1:], horizon_requests=h)
    assert rerun["per_seed"] == out["per_seed"][-1:] and rerun["loads"] == out["loads"][-1:]
    # the figure is scored on all its seeds and paired on the protocol's
    ref = {**tasks.references()[tid]}
    score = bm.paired_score(tid, out["per_seed"], out["seeds"], ref)
    assert score["normalized_score"] == pytest.approx(
        (out["reward_rate_per_s"] - ref["policies"]["greedy"]["reward_rate_per_s"])
        / (ref["best_reward_rate_per_s"] - ref["policies"]["greedy"]["reward_rate_per_s"])
    )
    assert "normalized_score_ci95" in score


def _tiny_run(env_id, tmp_path):
    """A 64-step PPO run on ``env_id`` with 30-request episodes: the agent the tests score."""
    from agents.train import TrainArgs, train

    return train(
        TrainArgs(
            env_id=env_id,
            env_kwargs={"horizon_requests": 30},
            n_timesteps=64,
            num_envs=1,
            eval_freq=0,
            run_dir=str(tmp_path / "run"),
            progress=False,
        )
    )


def test_benchmark_says_what_a_run_was_trained_on_and_shows_progress(tmp_path):
    """A run is scored on each task's protocol whatever it trained on; the row and the
    table say how its env differs from the task's (another problem, or the task's
    problem in other episodes), and the progress callback gets the plan and episodes."""
    from experiments.benchmark import format_benchmark, run_benchmark, trained_on

    low = "batch_env/LowLoadEnergy-v0"
    run = _tiny_run(low, tmp_path)
    spec = f"ppo:{run}"
    same = trained_on(spec, low)
    assert same == {
        "env_id": low,
        "kwargs": {"horizon_requests": [30, 20000]},
        "same_problem": True,
    }
    other = trained_on(spec, "batch_env/AnyLoad-v0")
    assert not other["same_problem"] and "workload" in other["kwargs"]
    lines: list[str] = []
    rows = run_benchmark(spec, [low], horizon_requests=40, progress=lines.append)
    assert rows[0]["trained_on"] == same
    assert lines[0].startswith("benchmark: 1 task(s): batch_env/LowLoadEnergy-v0 (10 x 40 requests")
    assert lines[1].startswith("[1/1] batch_env/LowLoadEnergy-v0: episode 1/10")
    assert lines[-1].endswith("done") and "episode 10/10" in lines[-1]
    table = format_benchmark(rows)
    assert "trained on batch_env/LowLoadEnergy-v0 with horizon_requests=30" in table
    assert "the task's problem, other episodes" in table
    # its sample budget: 64 env steps, on no track; a run of exactly 1M is on the 1M track
    assert (rows[0]["training_steps"], rows[0]["track"]) == (64, None)
    assert "Trained for 64 env steps: on no sample-budget track (1M (1,000,000)" in table
    assert tasks.sample_track(1_000_000) == "1M" and tasks.sample_track(999_999) is None
    on_track = format_benchmark([{**rows[0], "training_steps": 10_000_000, "track": "10M"}])
    assert "Trained for 10,000,000 env steps: the 10M sample-budget track." in on_track


def test_benchmark_names_an_agent_that_does_not_finish_its_episodes(tmp_path, monkeypatch):
    """A trained agent's protocol episode is cut at training's evaluation bound
    (EVAL_STEPS_FACTOR x greedy's steps): an agent that serves too little gets a row that
    says so, with what it did, instead of running to the task's million-step net on every
    seed. Here the bound is made shorter than any episode, so every agent is cut."""
    from agents import callbacks
    from experiments.benchmark import agent_step_bound, format_benchmark, run_benchmark

    low = "batch_env/LowLoadEnergy-v0"
    run = _tiny_run(low, tmp_path)
    env = gym.make(low, horizon_requests=40)
    greedy = batch_env.evaluate(baselines.make("greedy", env=env), env, n_episodes=1, seed=0)
    steps = int(greedy.episodes[0]["steps"])
    assert agent_step_bound(env, 0, None) == max(100 * steps, 10_000)
    monkeypatch.setattr(callbacks, "EVAL_STEPS_FACTOR", 0.5)
    monkeypatch.setattr(callbacks, "EVAL_MIN_STEPS", 1)
    assert agent_step_bound(env, 0, None) == int(0.5 * steps)
    env.close()
    (row,) = run_benchmark(f"ppo:{run}", [low], horizon_requests=40)
    assert row["error"].startswith("the episode of seed ")
    assert "the agent serves too little to finish it" in row["error"]
    assert "simulated s it completed" in row["error"]
    part = row["unfinished"]
    assert part["elapsed_s"] > 0 and part["arrived"] >= part["completed"]
    assert "serves too little" in format_benchmark([row])


def test_the_score_above_random_puts_random_play_at_zero_and_the_top_at_one():
    """``score_vs_random`` (issue 65's zero point): random valid actions' stored figures
    score 0 with a paired CI of 0 on every task that stores them, the top 1, and a
    figure between them in proportion; a task whose top is not above random has none."""
    from batch_env.scoring import paired_score
    from batch_env.tasks import references

    refs = references()
    checked = 0
    for tid, ref in refs.items():
        rnd = ref["policies"].get("random")
        if rnd is None:
            continue
        out = paired_score(tid, rnd["per_seed"], rnd["seeds"], ref)
        if "score_vs_random" not in out:
            continue
        assert abs(out["score_vs_random"]) < 1e-9 and out["score_vs_random_ci95"] == 0.0
        top = float(ref.get("bound_reward_rate_per_s", ref["best_reward_rate_per_s"]))
        zero = float(rnd["reward_rate_per_s"])
        g = ref["policies"]["greedy"]
        got = paired_score(tid, g["per_seed"], g["seeds"], ref)["score_vs_random"]
        assert got == pytest.approx((float(g["reward_rate_per_s"]) - zero) / (top - zero))
        checked += 1
    assert checked >= 9
    low = {**refs["batch_env/Trace-v0"]}
    low["policies"] = {**low["policies"], "random": {**low["policies"]["random"]}}
    low["policies"]["random"]["reward_rate_per_s"] = 1e9  # above the top: no such score
    g = low["policies"]["greedy"]
    assert "score_vs_random" not in paired_score(
        "batch_env/Trace-v0", g["per_seed"], g["seeds"], low
    )
