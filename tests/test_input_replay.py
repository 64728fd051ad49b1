"""Input replay (docs/input_replay.md): an episode's seed fixes its input (the arrival
times, and on the LLM envs each request's lengths and class) whatever the actions do;
``upcoming_input`` shows it ahead without changing what follows; several rollouts, or
the lanes of a vector env, can share one input."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded

import batch_env  # noqa: F401

ENVS = {
    "batch_env/DynamicBatching-v0": {"horizon_requests": 400},
    "batch_env/LLMBatching-v0": {"horizon_requests": 150},
    "batch_env/LLMBatching-v1": {"horizon_requests": 150},
    "batch_env/LLMBatching-v2": {
        "horizon_requests": 150,
        "classes": (
            {"name": "chat", "share": 3},
            {
                "name": "batch",
                "share": 1,
                "lengths": {"kind": "lognormal", "prompt_tokens": 900, "output_tokens": 40},
            },
        ),
    },
}


def _make(env_id: str) -> gym.Env:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(env_id, **ENVS[env_id]).unwrapped


def _absolute(env: gym.Env, n: int) -> dict[str, np.ndarray]:
    up = env.upcoming_input(n)
    up["t"] = up.pop("dt_s") + env.engine.now
    return up


def _rollout(env_id: str, seed: int, actions: int, steps: int, look: int = 0):
    """``steps`` steps with actions drawn from ``actions`` (a seed), previewing ``look``
    arrivals before each step where ``look`` > 0; returns the input ahead after them,
    and what the rollout saw."""
    env = _make(env_id)
    env.reset(seed=seed)
    rng = np.random.default_rng(actions)
    seen = []
    for _ in range(steps):
        if look:
            env.upcoming_input(look)
        mask = env.action_masks()
        a = int(rng.choice(np.flatnonzero(mask)))
        obs, r, term, trunc, info = env.step(a)
        counts = {k: v for k, v in info.items() if k.endswith("_total")}
        seen.append((a, obs.tobytes(), r, counts))
        if term or trunc:
            break
    return env, seen


@pytest.mark.parametrize("env_id", list(ENVS))
def test_one_seed_one_input_whatever_the_actions(env_id):
    first = _make(env_id)
    first.reset(seed=7)
    ahead = _absolute(first, 3000)
    assert len(ahead["t"]) == 3000
    for actions in (1, 2):
        env, _ = _rollout(env_id, 7, actions, 60)
        later = _absolute(env, 50)
        k = int(np.searchsorted(ahead["t"], later["t"][0] - 1e-9))
        assert k > 0  # the rollout moved on
        # the same arrivals (to rounding: times are kept from now), lengths and classes
        assert np.allclose(later["t"], ahead["t"][k : k + 50], rtol=0.0, atol=1e-9)
        for key, v in later.items():
            if key != "t":
                assert np.array_equal(v, ahead[key][k : k + len(v)]), key
    other = _make(env_id)
    other.reset(seed=8)
    theirs = _absolute(other, 3000)
    assert not np.allclose(theirs["t"], ahead["t"])
    if "prompt_tokens" in ahead:
        assert set(ahead) == {"t", "prompt_tokens", "output_tokens", "request_class"}
        assert not np.array_equal(theirs["prompt_tokens"], ahead["prompt_tokens"])


@pytest.mark.parametrize("env_id", list(ENVS))
def test_looking_ahead_changes_nothing(env_id):
    _env, plain = _rollout(env_id, 3, 5, 200)
    _env, looked = _rollout(env_id, 3, 5, 200, look=5000)
    assert plain == looked


def test_rollouts_of_one_input_on_a_vector_env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        envs = gym.make_vec(
            "batch_env/LLMBatching-v1", num_envs=4, vectorization_mode="sync", horizon_requests=60
        )
    envs.reset(seed=[11, 11, 12, 12])  # two inputs, two rollouts of each
    ahead = envs.call("upcoming_input", 100)
    assert np.array_equal(ahead[0]["dt_s"], ahead[1]["dt_s"])
    assert np.array_equal(ahead[2]["prompt_tokens"], ahead[3]["prompt_tokens"])
    assert not np.array_equal(ahead[0]["dt_s"], ahead[2]["dt_s"])
    # lanes that started from one seed share the next episode's input too (after an
    # autoreset, at different steps: their actions differ)
    rng = np.random.default_rng(0)
    ended = np.zeros(4, bool)
    second: dict[int, np.ndarray] = {}
    for _ in range(100_000):
        masks = np.stack(envs.call("action_masks"))
        _o, _r, term, trunc, _i = envs.step([rng.choice(np.flatnonzero(m)) for m in masks])
        now = envs.call("upcoming_input", 20)
        for lane in np.flatnonzero(ended):  # reset by this step (autoreset: next step)
            second.setdefault(int(lane), now[lane]["dt_s"])
        ended = term | trunc
        if len(second) == 4:
            break
    assert np.array_equal(second[0], second[1]) and np.array_equal(second[2], second[3])
    assert not np.array_equal(second[0], second[2])
    assert not np.array_equal(second[0][:5], ahead[0]["dt_s"][:5])  # a new input
    envs.close()


def test_bad_calls_are_named():
    env = _make("batch_env/LLMBatching-v1")
    with pytest.raises(ResetNeeded):
        env.upcoming_input(3)
    env.reset(seed=0)
    for bad in (-1, 2.5, float("nan"), 10**7):
        with pytest.raises(ValueError) as e:
            env.upcoming_input(bad)
        assert str(e.value).startswith("n=") and "\n" not in str(e.value)
