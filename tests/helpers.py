"""Constants and checks that several test modules share (``from helpers import ...``).

Test modules import these from here, never from each other, so that each test module can
be run, moved or marked on its own. ``conftest.py`` keeps the pytest configuration and the
helpers that need no env (hypothesis profiles, TensorBoard scalars, env checkers).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

import batch_env  # noqa: F401  (registers the env ids)
from batch_env import DynamicBatchingVectorEnv

ENV_ID = "batch_env/DynamicBatching-v0"

# -- training runs (test_agents, test_faults, test_vec_env_adapter) ------------------------

#: a small training env: drops only, 300 requests an episode
SMALL_ENV = {
    "profile": "resnet50-v100-linear",
    "workload": {"kind": "poisson", "load": 0.6},
    "idle_power_w": 0.0,
    "reward_weights": {"sla": 0.0, "drop": 1.0},
    "horizon_requests": 300,
}
#: a tiny rl-zoo3 hyperparameter file: a PPO small enough to train a few hundred steps in a
#: second: one env, 64-step rollouts, one epoch, an 8-unit network; normalized observations
#: (so runs have statistics files)
TINY_PPO = {
    ENV_ID: {
        "n_envs": 1,
        "n_timesteps": 256,
        "policy": "MlpPolicy",
        "normalize": "{'norm_obs': True, 'norm_reward': False}",
        "env_wrapper": [
            "batch_env.wrappers.BinaryAction",
            "batch_env.wrappers.QueueFeatures",
            {"batch_env.wrappers.AverageRewardCentering": {"gain": None}},
        ],
        "n_steps": 64,
        "batch_size": 64,
        "n_epochs": 1,
        "policy_kwargs": "dict(net_arch=[8])",
    }
}
#: SMALL_ENV with 50-request episodes
TINY_ENV = {**SMALL_ENV, "horizon_requests": 50}
#: the LLM experiment's tiny capacity search (LLMBatching-v0, 3 policies, 4 rates, 2 seeds)
TINY_LLM = {
    "name": "tiny",
    "reference": "static-256",
    "attainment": 0.9,
    "bisection_steps": 3,
    "seeds": [0, 1],
    "env_kwargs": {
        "horizon_requests": 120,
        "warmup_requests": 20,
        "ttft_sla_ms": 1000.0,
        "tpot_sla_ms": 50.0,
    },
    "profiles": {"llama-2-7b-h100": {"rates": [4.0, 8.0, 12.0, 16.0]}},
    "traffic": {"poisson": {"kind": "poisson", "lengths": {"kind": "lognormal"}}},
    "policies": {
        "static-256": {"policy": "static-cap", "cap": 256},
        "static-16": {"policy": "static-cap", "cap": 16},
        "memory-aware": {"policy": "memory-aware"},
    },
}

# -- comparison and sweep configs (test_compare, test_sweep, test_ray_backend) --------------

#: a small comparison: two loads, two seeds, three policies, a Pareto sweep and the structure
COMPARE_SMALL = {
    "name": "small",
    "env": {
        "profile": "resnet50-v100",
        "decision_interval_ms": 0.5,
        "horizon_requests": 400,
        "reward_weights": {"sla": 0.0},
    },
    "workloads": {"poisson": {"kind": "poisson"}},
    "loads": [0.3, 0.7],
    "seeds": 2,
    "reference": "smdp",
    "policies": {
        "greedy": {},
        "tf-1ms": {"name": "tfserving", "batch_timeout_ms": 1.0},
        "smdp": {},
    },
    "pareto": {"workload": "poisson", "load": 0.3, "energy_weights": [0.0, 2.0]},
    "structure": {"loads": [0.3], "energy_weights": [0.5]},
}

#: a tiny sweep: PPO trials that train in about a second each; the batch_size=1 ones fail
SWEEP_TINY = {
    "name": "tiny",
    "algo": "ppo",
    "env": {"horizon_requests": 150},
    "n_timesteps": 256,
    "seeds": [0],
    "eval_episodes": 1,
    "centering_gain": "online",
    "num_envs": 2,
    "grid": {"learning_rate": [1.0e-3, 3.0e-4], "n_steps": [64], "batch_size": [64, 1]},
}

# -- the vector env against the scalar env, step for step (test_vector_env, test_fuzz) -----


def close(a: Any, b: Any, rel: float = 1e-9) -> bool:
    """``a`` equals ``b`` within ``rel`` relative (at least ``rel`` absolute); NaN equals NaN."""
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b or abs(a - b) <= rel * max(1.0, abs(a))


#: summary rates: a window total divided by ``elapsed_s``
RATES = ("reward_rate_per_s", "power_mean_w")


def check_same_summary(scalar: dict[str, Any], lane: dict[str, Any]) -> None:
    """A lane's summary equals the scalar env's: integers exactly, floats within 1e-9
    relative (at least 1e-9 absolute). A rate is compared as the window total it comes
    from (rate x ``elapsed_s``): over a window of nanoseconds the sums' last-bit
    differences, ulp-sized in the clock, divided by ``elapsed_s``, are far above 1e-9 of
    the rate (the fuzz suite found a 28 ns window at 7.8e-9 relative)."""
    elapsed = scalar["elapsed_s"]
    for key, value in scalar.items():
        other = lane[key]
        if key in RATES and elapsed > 0 and not math.isnan(value):
            value, other = value * elapsed, other * elapsed
        assert close(value, other), (key, scalar[key], lane[key])


def check_cached_state(venv: Any) -> None:
    """What the vector env keeps per lane instead of reading its buffer every step equals
    what the buffer holds: the last buffered arrival."""
    lanes = np.arange(venv.num_envs)
    assert np.array_equal(venv._tail, venv._A[lanes, venv._fill - 1])  # noqa: SLF001


def lane_actions(name: str, masks: np.ndarray, rng: np.random.Generator, B: int) -> np.ndarray:
    """One action per lane from its mask: ``random`` (a uniform valid action, waits
    included), ``greedy`` (the largest valid batch, now and then an oversized action,
    which is clipped) or ``patient`` (wait until 3 requests wait, then greedy)."""
    top = masks.shape[1] - 1 - np.argmax(masks[:, ::-1], axis=1)  # largest valid action
    if name == "random":
        return np.array([rng.integers(0, t + 1) for t in top])
    if name == "greedy":
        return np.where(rng.random(len(top)) < 0.1, B, top)
    assert name == "patient"
    return np.where(top >= 3, top, 0)


def lane_summary(serving: dict[str, Any], n: int) -> dict[str, Any]:
    """Lane ``n``'s summary in a batched ``serving`` dict (arrays and ``_key`` masks)."""
    assert all(serving[f"_{k}"][n] for k in serving if not k.startswith("_"))
    return {k: v[n].item() for k, v in serving.items() if not k.startswith("_")}


def final_serving(info: dict[str, Any], n: int) -> dict[str, Any]:
    """Lane ``n``'s summary in a SAME_STEP step's ``info["final_info"]`` (a dict of arrays)."""
    return lane_summary(info["final_info"]["serving"], n)


def lockstep(
    kwargs: dict[str, Any],
    n_envs: int = 3,
    steps: int = 1500,
    seed: int = 7,
    policy: str = "random",
    mode: AutoresetMode = AutoresetMode.NEXT_STEP,
) -> int:
    """Step the vector env and n scalar envs in lockstep and compare (autoreset ``mode``:
    NEXT_STEP or SAME_STEP; the scalar envs are reset where the vector env resets).

    :returns: the number of episodes that ended, over all lanes.
    """
    venv = gym.make_vec(ENV_ID, num_envs=n_envs, autoreset_mode=mode, **kwargs)
    assert isinstance(venv, DynamicBatchingVectorEnv)
    envs = [gym.make(ENV_ID, **kwargs) for _ in range(n_envs)]
    vobs, _ = venv.reset(seed=seed)
    sobs = np.array([e.reset(seed=seed + n)[0] for n, e in enumerate(envs)])
    assert np.array_equal(vobs, sobs)
    rng = np.random.default_rng(seed)
    B = venv.single_action_space.n - 1
    pending = [False] * n_envs
    episodes = 0
    for _ in range(steps):
        masks = venv.action_masks()
        for n, e in enumerate(envs):
            assert np.array_equal(masks[n], e.unwrapped.action_masks())
        acts = lane_actions(policy, masks, rng, B)
        vobs, vrew, vterm, vtrunc, vinfo = venv.step(acts)
        check_cached_state(venv)
        assert venv.observation_space.contains(vobs)
        assert not vterm.any()
        for n, e in enumerate(envs):
            if pending[n]:
                so, _ = e.reset()
                sr, strunc, sinfo = 0.0, False, {}
                pending[n] = False
            else:
                so, sr, _, strunc, sinfo = e.step(int(acts[n]))
            assert close(sr, float(vrew[n]))
            assert strunc == bool(vtrunc[n])
            if strunc:
                episodes += 1
                if mode == AutoresetMode.SAME_STEP:
                    assert np.array_equal(so, vinfo["final_obs"][n])
                    serving = final_serving(vinfo, n)
                    so, _ = e.reset()
                else:
                    pending[n] = True
                    assert vinfo["_serving"][n]
                    serving = lane_summary(vinfo["serving"], n)
                check_same_summary(sinfo["serving"], serving)
            assert np.array_equal(so, vobs[n])
    venv.close()
    return episodes
