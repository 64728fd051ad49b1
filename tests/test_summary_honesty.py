"""Summaries say what happened outside the summary window (batch_env.metrics: Outside the
window, Warnings): episode counts in every summary, a SummaryWarning when the headline
figures hide something, once per episode (once per evaluation in ``evaluate``)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import batch_env  # noqa: F401
from batch_env.evaluate import evaluate
from batch_env.metrics import SERVING_KEYS, SummaryWarning

ENV_ID = "batch_env/DynamicBatching-v0"


def _run(env, act, seed=0, max_steps=100_000):
    """One episode; returns the last info and the SummaryWarnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, info = env.reset(seed=seed)
        for _ in range(max_steps):
            _, _, _, truncated, info = env.step(act(info))
            if truncated:
                break
    assert truncated
    return info, [w for w in caught if issubclass(w.category, SummaryWarning)]


def _check_counts(s):
    assert s["arrived_total"] == s["completed_total"] + s["dropped_total"] + s["in_system_at_end"]
    assert s["completed_outside_window"] == s["completed_total"] - s["completed"]
    assert s["dropped_outside_window"] == s["dropped_total"] - s["dropped"]
    assert s["drop_rate_total"] == s["dropped_total"] / s["arrived_total"]


def test_always_wait_with_default_kwargs_shows_the_drops_and_warns_once():
    """The issue's case: action 0 forever. The queue fills with the 2000 summary
    requests, and every later arrival (about 18,000) is dropped outside the window."""
    env = gym.make(ENV_ID)
    info, caught = _run(env, lambda info: 0)
    s = info["serving"]
    assert set(SERVING_KEYS) <= set(s)
    assert s["completed"] == 0 and s["dropped"] == 0 and s["drop_rate"] == 0.0  # meanings kept
    assert s["completed_total"] == 0 and s["in_system_at_end"] == 2000
    assert s["dropped_outside_window"] == s["dropped_total"] > 15_000
    assert s["drop_rate_total"] > 0.85
    _check_counts(s)
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert "no summary request completed" in msg
    assert (
        f"{s['dropped_outside_window']} of the episode's {s['arrived_total']} arrivals were dropped"
        in msg
    )


def test_greedy_episode_emits_no_warning():
    env = gym.make(ENV_ID)
    info, caught = _run(env, lambda info: int(np.flatnonzero(info["action_mask"])[-1]))
    assert caught == []
    s = info["serving"]
    assert s["completed"] == 2000 and s["dropped_outside_window"] == 0
    assert s["completed_outside_window"] == s["completed_total"] - 2000 >= 0
    _check_counts(s)


def test_ordinary_drops_in_and_outside_the_window_do_not_warn():
    """Overload with a small queue: drops everywhere at similar rates; the summary's
    drop_rate describes the episode, so no warning."""
    kw = {
        "queue_capacity": 6,
        "workload": {"kind": "poisson", "load": 1.6},
        "horizon_requests": 300,
    }
    env = gym.make(ENV_ID, **kw)
    info, caught = _run(env, lambda info: int(np.flatnonzero(info["action_mask"])[-1]))
    s = info["serving"]
    assert s["dropped"] > 0 and s["dropped_outside_window"] > 0
    assert caught == []
    _check_counts(s)


def test_never_serving_node_env_warns():
    env = gym.make("batch_env/NodeBatching-v0", horizon_requests=50, queue_capacity=50)
    info, caught = _run(env, lambda info: 0)
    s = info["serving"]
    assert s["completed"] == 0 and s["dropped_outside_window"] > 0
    _check_counts(s)
    assert len(caught) == 1 and "no summary request completed" in str(caught[0].message)
    assert "dropped outside the summary window" in str(caught[0].message)


def test_never_serving_llm_env_warns():
    """The episode ends (horizon_s) before any request has generated its output."""
    env = gym.make("batch_env/LLMBatching-v0", horizon_s=0.05, horizon_requests=50)
    info, caught = _run(env, lambda info: 0)
    s = info["serving"]
    assert s["completed"] == 0 and s["completed_total"] == 0 and s["arrived_total"] > 0
    assert len(caught) == 1 and "no summary request completed" in str(caught[0].message)


def test_vector_env_summaries_and_warning():
    """Lane i of the NumPy vector env: the scalar env's counts; one warning per step for
    the lanes that ended in it."""
    kw = {"horizon_requests": 200, "queue_capacity": 200}
    venv = gym.make_vec(ENV_ID, num_envs=2, **kw)
    env = gym.make(ENV_ID, **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        venv.reset(seed=3)
        env.reset(seed=3)
        for _ in range(100_000):
            _, _, _, vt, vi = venv.step(np.zeros(2, dtype=np.int64))
            _, _, _, st, si = env.step(0)
            assert vt[0] == st
            if st:
                break
    ours = [str(w.message) for w in caught if issubclass(w.category, SummaryWarning)]
    vector = [m for m in ours if m.startswith("DynamicBatchingVectorEnv")]
    assert len(ours) - len(vector) == 1  # the scalar env's episode
    # one per step in which lanes ended (lane 1 may end in an earlier step than lane 0)
    assert 1 <= len(vector) <= 2 and "lane 0: no summary request completed" in vector[-1]
    for key in (
        "arrived_total",
        "completed_total",
        "dropped_total",
        "completed_outside_window",
        "dropped_outside_window",
    ):
        assert vi["serving"][key][0] == si["serving"][key], key
        assert vi["serving"][f"_{key}"][0]
    assert vi["serving"]["drop_rate_total"][0] == pytest.approx(
        si["serving"]["drop_rate_total"], rel=1e-12
    )


class _Wait:
    name = "always-wait"

    def reset(self):
        pass

    def act(self, obs, info):
        return 0


class _Greedy:
    name = "greedy"

    def reset(self):
        pass

    def act(self, obs, info):
        return int(np.flatnonzero(info["action_mask"])[-1])


def test_evaluate_warns_once_per_evaluation_and_keeps_the_counts():
    kw = {"horizon_requests": 100, "queue_capacity": 100}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = evaluate(_Wait(), ENV_ID, n_episodes=3, seed=0, env_kwargs=kw)
    ours = [w for w in caught if issubclass(w.category, SummaryWarning)]
    assert len(ours) == 1
    msg = str(ours[0].message)
    assert "'always-wait'" in msg and "3 of 3 episodes completed no summary request" in msg
    assert "3 of 3 episodes dropped" in msg
    assert len(res.warnings) == 3 and res.warnings[0].startswith("seed 0: ")
    assert res.to_dict()["warnings"] == res.warnings
    summary = res.summary()
    assert summary["completed"][0] == 0 and summary["dropped_outside_window"][0] > 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = evaluate(_Greedy(), ENV_ID, n_episodes=2, seed=0, env_kwargs=kw)
    assert not [w for w in caught if issubclass(w.category, SummaryWarning)]
    assert res.warnings == [] and res.warning() is None
