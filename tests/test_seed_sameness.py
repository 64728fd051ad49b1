"""Where seeds cannot change an episode, the env says so at construction and an evaluation
notes it, instead of a silent ± 0 (issue 48, item 5)."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import pytest

import baselines
import batch_env
from batch_env import SeedWarning

TRACE = {"kind": "trace", "dataset": "azure-conv-2023-excerpt", "target_rate_per_s": 3.0}


def _seed_warnings(**kw):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        env = gym.make(**kw)
    return env, [x for x in w if issubclass(x.category, SeedWarning)]


@pytest.mark.parametrize(
    "kw, warned",
    [
        ({"id": "batch_env/LLMBatching-v2", "workload": TRACE}, True),
        ({"id": "batch_env/LLMBatching-v2", "workload": {**TRACE, "random_offset": True}}, False),
        # lengths drawn from the seed: episodes differ although the arrivals do not
        (
            {"id": "batch_env/LLMBatching-v2", "workload": TRACE, "lengths": {"kind": "lognormal"}},
            False,
        ),
        ({"id": "batch_env/LLMBatching-v0", "workload": TRACE}, True),
        ({"id": "batch_env/DynamicBatching-v0", "workload": TRACE}, True),
        (
            {
                "id": "batch_env/DynamicBatching-v0",
                "workload": TRACE,
                "service": "lognormal",
                "service_cv": 0.2,
            },
            False,
        ),
        ({"id": "batch_env/DynamicBatching-v0"}, False),
    ],
)
def test_construction_warns_only_where_no_seed_changes_an_episode(kw, warned):
    env, w = _seed_warnings(**kw, horizon_requests=60)
    assert bool(w) == warned and len(w) <= 1
    if w:
        assert "random_offset: true" in str(w[0].message)
    res = batch_env.evaluate(baselines.make("greedy", env=env), env, n_episodes=3, seed=0)
    assert res.seeds_change_nothing == warned
    assert (res.note() is not None) == warned


def test_the_cli_notes_it_once(capsys):
    from experiments.cli import main

    args = [
        "evaluate",
        "--env-id",
        "batch_env/LLMBatching-v2",
        "--episodes",
        "2",
        "--policy",
        "greedy",
        "sarathi",
    ]
    kw = json.dumps({"workload": TRACE, "horizon_requests": 40, "budget_grid": [256, 2048]})
    assert main([*args, "--env-kwargs", kw]) == 0
    out = capsys.readouterr().out
    assert out.count("note: the 2 seeds gave the same episode") == 1
    kw = json.dumps({"workload": {**TRACE, "random_offset": True}, "horizon_requests": 40})
    assert main([*args[:-1], "--env-kwargs", kw]) == 0
    assert "note:" not in capsys.readouterr().out
