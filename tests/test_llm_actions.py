"""The LLM envs' action and its parts (batch_env/llm/actions.py): one encoding, public."""

from __future__ import annotations

import gymnasium as gym
import pytest

import baselines
import batch_env  # noqa: F401 (registers the ids)
from batch_env.llm.actions import ActionCodec, LLMAction


def test_codec_round_trips_and_names_bad_parts():
    c = ActionCodec((1, 8, 64), (256, 512), ("fcfs", "edf"))
    assert c.n == 12
    seen = set()
    for a in range(c.n):
        p = c.parts(a)
        assert isinstance(p, LLMAction) and c.action(*p) == a
        seen.add(p)
    assert len(seen) == 12
    # the written encoding: (order * len(budgets) + budget) * len(grid) + cap
    assert c.action(cap=64, budget=256, order="edf") == (1 * 2 + 0) * 3 + 2
    assert c.action(cap=8) == (0 * 2 + 1) * 3 + 1  # the largest budget, FCFS
    with pytest.raises(ValueError, match=r"cap=3 is not one of the env's caps: grid=\[1, 8, 64\]"):
        c.action(cap=3)
    with pytest.raises(
        ValueError, match=r"budget=300 is not one of the env's token budgets: \[256, 512\]"
    ):
        c.action(cap=8, budget=300)
    with pytest.raises(ValueError, match="order='srpt' is not one of the env's admission orders"):
        c.action(cap=8, order="srpt")
    with pytest.raises(
        ValueError, match=r"action=12 is out of range: expected an integer in 0\.\.11"
    ):
        c.parts(12)
    assert c.parts(5.0) == c.parts(5)


@pytest.mark.parametrize(
    "env_id",
    ["batch_env/LLMBatching-v0", "batch_env/LLMBatching-v2", "batch_env/LLMTwoClasses-v0"],
)
def test_envs_decode_their_actions_with_it(env_id):
    env = gym.make(env_id, horizon_requests=30)
    u = env.unwrapped
    assert u.action_space.n == u.actions.n
    env.reset(seed=0)
    for a in (0, u.action_space.n // 2, u.action_space.n - 1):
        part = u.action_parts(a)
        assert u.action_of(*part) == a
        env.step(a)
        assert (u.server.cap, u.server.budget, u.server.order, u.server.sm_clock.mhz) == tuple(part)


def test_the_baselines_encode_with_it():
    env = gym.make("batch_env/LLMTwoClasses-v0", horizon_requests=30)
    u = env.unwrapped
    obs, info = env.reset(seed=0)
    pol = baselines.make("static-budget", env, budget=512)
    pol.reset()
    part = u.action_parts(pol.act(obs, info))
    assert part.budget == 512 and part.cap == u.grid[-1]


@pytest.mark.parametrize(
    "task",
    [
        "batch_env/LLMMemoryPressure-v0",
        "batch_env/LLMMemoryPressure-v1",
        "batch_env/LLMBurstyLongPrompts-v0",
        "batch_env/LLMTwoClasses-v0",
    ],
)
def test_greedy_is_the_benchmarks_greedy_on_the_llm_tasks(task):
    """One name, one policy: ``baselines.make("greedy", env)`` on an LLM env is vLLM's
    defaults, the policy the benchmark's ``greedy`` reference runs (score 0)."""
    import warnings

    from experiments.benchmark import REFERENCE_POLICIES

    name, params = REFERENCE_POLICIES[task]["greedy"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(task, horizon_requests=50)
    ref, mine = baselines.make(name, env, **params), baselines.make("greedy", env)
    assert mine.name == "greedy"
    obs, info = env.reset(seed=0)
    ref.reset()
    mine.reset()
    for _ in range(200):
        a = mine.act(obs, info)
        assert a == ref.act(obs, info)
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
