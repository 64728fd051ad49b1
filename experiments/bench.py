"""Benchmarks that report speed as ratios against a reference run in the same process.

``batch-env bench`` measures, one after the other in one process:

* ``DynamicBatching-v0`` steps/s through ``gymnasium.make`` (profile ``resnet50-v100``,
  Poisson arrivals at load 0.6, uniformly random *valid* actions, episodes reset as they
  end), and
* ``CartPole-v1`` steps/s through ``gymnasium.make`` (uniformly random actions),

each as the best of ``repeats`` timed rounds (the least disturbed by other load), and
their ratio. Actions are drawn before timing, so both loops cost the same outside
``step``.

It also times the SMDP solver (``baselines.smdp``) on S = 500 states, B = 64, rho = 0.6
(resnet50-v100, queue capacity 499) against pymdptoolbox's ``RelativeValueIteration`` on
the identical Tijms-transformed MDP at the same span tolerance (1e-6 x gain): our
policy iteration (exact), our vectorized RVI at that tolerance, and pymdptoolbox, with
the speed-up of policy iteration over pymdptoolbox (floor 10x) and whether all three
return the same policy. And PPO training steps/s on DynamicBatching-v0 against
CartPole-v1 with the same settings (floor: ratio 0.8). And the NumPy vector env
(``DynamicBatchingVectorEnv`` through ``make_vec``, same profile and load, random valid
actions from ``action_masks()``) against Gymnasium's ``CartPoleVectorEnv`` at num_envs
1, 64, 1024 and 4096 (floor: 1,000,000 env-steps/s at 1024; aim: a third of CartPole's). And the real
executor's overhead outside the model call (floor: under 5% of the batch time at
b >= 8). And PPO training steps/s through the SB3 adapter on the native vector env
against SB3's ``DummyVecEnv`` of the scalar env, 64 lanes each. And the comparison's
backends: cells/s of a small comparison on the local backend and on Ray (a local Ray
instance with every CPU) in the same run, their ratio, Ray's start-up time, and whether
both gave the same numbers. And the cost of one ``render_mode="rgb_array"`` frame against
one step of the same env, for each env (target: a frame well under 1 ms). And
``LLMBatching-v0`` and ``LLMBatching-v1`` (chunked prefill) steps/s against CartPole-v1's
(:func:`bench_llm_steps`). And ``LLMBatching-v2`` against v1 on the same episodes, steps
and CPU per completed request, at v1's defaults and on ``LLMMemoryPressure-v0``'s problem
(:func:`bench_llm_v2`; floors 10x fewer steps, 5x less CPU). And what an admission
order costs a step with 400 requests waiting, against FCFS (:func:`bench_llm_orders`;
floor 1.5x).
Results go to ``results/bench/bench.json`` with a description of
the machine.

Wall-clock to a good agent (:func:`bench_wallclock`; ``batch-env bench --wallclock``, not
in the default run: about 20 minutes on one core, nine tenths of them spent evaluating the
task): how long PPO with the project's defaults (``agents/hyperparams/ppo.yml``, trained
by ``agents.train.train``, one torch thread, CPU) takes to bring ``batch_env/LowLoadEnergy-v0``'s cost rate within 1% of the
SMDP gain, against CartPole-v1's time to an evaluation mean return of 475 with the same
PPO settings, budget and evaluation cadence, seed by seed in the same run. Each run
stops at the first periodic evaluation (every ``eval_freq`` = 10,000 steps: 3
deterministic episodes on the held-out seeds 100000-100002, ``batch_env.evaluate``) that
meets its target; the median over 3 seeds is reported in environment steps and in
training seconds (evaluations excluded; with them too), each seed's figures beside it,
and a run that does not meet the target within its step budget (the file's
``n_timesteps``, 300,000) is reported as not reached with its best figure. The record
also goes to ``results/bench/wallclock.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import yaml

import batch_env
from agents.common import algo_kwargs as algo_kwargs_of
from agents.common import literal, load_hyperparams, make_env, wrapper_specs
from baselines.common import env_config
from baselines.smdp import SMDPProblem, solve, transformed_mdp
from batch_env.provenance import provenance
from batch_env.tasks import TASKS
from batch_env.tasks import make_args as make_task_args
from experiments.harness.backends import INSTALL_HINT
from experiments.harness.options import add_json, check_folder, count
from experiments.harness.strict_json import dumps


def machine_description() -> dict[str, Any]:
    """The machine, library versions and commit (:func:`batch_env.provenance.provenance`),
    flattened as benchmark records have them: ``cpu``, ``cpu_count``, ``python``, ...,
    the versions, and ``source``."""
    p = provenance()
    return {
        **p["machine"],
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
        "batch_env": batch_env.__version__,
        "versions": p["versions"],
        "source": p["source"],
    }


def _time_cartpole(n_steps: int, seed: int) -> float:
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, n_steps).tolist()
    step = env.step
    t0 = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = step(a)
        if terminated or truncated:
            env.reset()
    return n_steps / (time.perf_counter() - t0)


def _rounds(timers: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Each timer's rate in each of ``repeats`` rounds. A round runs every timer back to
    back (the order rotated from round to round), so that a slow spell of a shared
    machine hits a round's reference and env alike; the ratio to report is then the
    median of the rounds' ratios (:func:`_median_ratio`), not the ratio of two best
    rates timed minutes apart."""
    names = list(timers)
    out: dict[str, list[float]] = {k: [] for k in names}
    for r in range(repeats):
        k0 = r % len(names)
        for k in names[k0:] + names[:k0]:
            out[k].append(timers[k]())
    return out


def _median_ratio(num: list[float], den: list[float]) -> float:
    """The median over rounds of ``num[i] / den[i]``."""
    return float(np.median(np.asarray(num, dtype=np.float64) / np.asarray(den, dtype=np.float64)))


def _time_batching(n_steps: int, seed: int, env_kwargs: dict[str, Any]) -> float:

    env = gym.make("batch_env/DynamicBatching-v0", **env_kwargs)
    _, info = env.reset(seed=seed)
    B = env_config(env).max_batch_size
    u = np.random.default_rng(seed).random(n_steps).tolist()
    step = env.step
    t0 = time.perf_counter()
    for x in u:
        q = info["queue_len"]
        valid = (q if q < B else B) + 1  # actions 0..min(q, B)
        _, _, terminated, truncated, info = step(int(x * valid))
        if terminated or truncated:
            _, info = env.reset()
    return n_steps / (time.perf_counter() - t0)


def _time_vector(num_envs: int, n_steps: int, seed: int, env_kwargs: dict[str, Any]) -> float:
    """Env-steps/s of the NumPy vector env (``make_vec``, NEXT_STEP autoreset), random
    valid actions drawn from ``action_masks()`` (their cost included, as an agent pays it)."""

    env = gym.make_vec("batch_env/DynamicBatching-v0", num_envs=num_envs, **env_kwargs)
    env.reset(seed=seed)
    u = np.random.default_rng(seed).random((n_steps, num_envs))
    step, masks = env.step, cast(Any, env).action_masks  # the native vector env has them
    t0 = time.perf_counter()
    for row in u:
        n_valid = masks().sum(axis=1)  # actions 0..min(queue, B)
        step((row * n_valid).astype(np.int64))
    rate = n_steps * num_envs / (time.perf_counter() - t0)
    env.close()
    return rate


def _time_cartpole_vector(num_envs: int, n_steps: int, seed: int) -> float:
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    env = CartPoleVectorEnv(num_envs=num_envs)
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, (n_steps, num_envs))
    step = env.step
    t0 = time.perf_counter()
    for a in actions:
        step(a)
    rate = n_steps * num_envs / (time.perf_counter() - t0)
    env.close()
    return rate


def bench_vector(
    sizes: tuple[int, ...] = (1, 64, 1024, 4096),
    env_steps: int = 2_000_000,
    repeats: int = 3,
    seed: int = 0,
) -> dict[str, Any]:
    """Vector env-steps/s against Gymnasium's ``CartPoleVectorEnv`` at each ``num_envs``.

    Profile ``resnet50-v100``, Poisson at load 0.6, uniformly random valid actions,
    episodes autoreset (NEXT_STEP; a reset step counts as an env-step, as in CartPole's).
    Each size runs about ``env_steps`` env-steps per round (200 to 30,000 vector steps),
    both envs in every round (:func:`_rounds`): the rates are the best round's, the ratio
    the median of the rounds' ratios. Floor: 1,000,000 env-steps/s at 1024 lanes;
    aim: a third of CartPoleVectorEnv's.

    :param sizes: the ``num_envs`` values.
    :param env_steps: env-steps per timed round.
    :param repeats: timed rounds per size and env.
    :param seed: seed of envs and actions.
    """
    env_kwargs = {"profile": "resnet50-v100", "workload": {"kind": "poisson", "load": 0.6}}
    rows = []
    for n in sizes:
        steps = min(max(env_steps // n, 200), 30_000)
        r = _rounds(
            {
                "ours": partial(_time_vector, n, steps, seed, env_kwargs),
                "cart": partial(_time_cartpole_vector, n, steps, seed),
            },
            repeats,
        )
        rows.append(
            {
                "num_envs": n,
                "vector_steps": steps,
                "env_steps_per_s": max(r["ours"]),
                "cartpole_vector_env_steps_per_s": max(r["cart"]),
                "ratio_vs_cartpole": _median_ratio(r["ours"], r["cart"]),
                "round_ratios": [a / b for a, b in zip(r["ours"], r["cart"], strict=True)],
            }
        )
    at_1024: dict[str, Any] | None = next((r for r in rows if r["num_envs"] == 1024), None)
    return {
        "env_kwargs": env_kwargs,
        "sizes": rows,
        "floor_env_steps_per_s_at_1024": 1_000_000,
        "meets_floor_at_1024": None if at_1024 is None else at_1024["env_steps_per_s"] >= 1_000_000,
        "aim_ratio_vs_cartpole": 1 / 3,
    }


def bench_smdp(tol: float = 1e-6) -> dict[str, Any]:
    """SMDP solve time against pymdptoolbox on S=500, B=64, rho=0.6 (see module docstring).

    :param tol: span tolerance relative to the gain, for both RVI implementations.
    """
    import mdptoolbox.mdp as mdp

    env = gym.make(
        "batch_env/DynamicBatching-v0",
        workload={"kind": "poisson", "load": 0.6},
        max_batch_size=64,
        queue_capacity=499,
        reward_weights={"sla": 0.0},
    )
    problem = SMDPProblem.from_env(env)
    t0 = time.perf_counter()
    pi = solve(problem, method="pi")
    pi_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    rvi = solve(problem, method="rvi", tol=tol)
    rvi_s = time.perf_counter() - t0
    P, cost, _ = transformed_mdp(problem)
    ref = mdp.RelativeValueIteration(P, -cost, epsilon=tol * pi.gain, max_iter=1_000_000)
    t0 = time.perf_counter()
    ref.run()
    ref_s = time.perf_counter() - t0
    return {
        "n_states": problem.n_states,
        "max_batch_size": problem.max_batch_size,
        "load": 0.6,
        "tolerance_relative": tol,
        "pi_s": pi_s,
        "pi_iterations": pi.iterations,
        "rvi_s": rvi_s,
        "rvi_iterations": rvi.iterations,
        "pymdptoolbox_s": ref_s,
        "pymdptoolbox_iterations": ref.iter,
        "gain_pi": pi.gain,
        "gain_rvi": rvi.gain,
        "gain_pymdptoolbox": -ref.average_reward,
        "same_policy": bool(
            np.array_equal(pi.policy, rvi.policy)
            and np.array_equal(pi.policy, np.array(ref.policy))
        ),
        "speedup_pi_vs_pymdptoolbox": ref_s / pi_s,
        "speedup_rvi_vs_pymdptoolbox": ref_s / rvi_s,
        "floor_speedup": 10.0,
    }


def _ppo_setup() -> tuple[str, dict[str, Any], list, dict[str, Any], dict[str, Any]]:
    """PPO settings shared by the training benchmarks (one torch thread): the env id, the
    hyperparameter file's entry, its wrappers (centring at a fixed gain), the algorithm
    keyword arguments and the policy keyword arguments."""
    import torch

    from agents.wrappers import run_specs

    torch.set_num_threads(1)
    env_id = "batch_env/DynamicBatching-v0"
    hp = load_hyperparams("ppo", env_id)
    specs = run_specs(wrapper_specs(hp["env_wrapper"]), 100.0)
    algo_kwargs = algo_kwargs_of(hp)
    policy_kwargs = dict(literal(hp["policy_kwargs"], "policy_kwargs"))
    return env_id, hp, specs, algo_kwargs, policy_kwargs


def _ppo_steps_per_s(
    venv: Any,
    total_steps: int,
    seed: int,
    algo_kwargs: dict[str, Any],
    policy_kwargs: dict[str, Any],
) -> float:
    """PPO training steps/s on ``venv`` (wrapped in ``VecNormalize``)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    model = PPO(
        "MlpPolicy",
        VecNormalize(venv),
        policy_kwargs=dict(policy_kwargs),
        seed=seed,
        device="cpu",
        **algo_kwargs,
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=total_steps)
    return total_steps / (time.perf_counter() - t0)


def bench_ppo(total_steps: int = 32_768, seed: int = 0, repeats: int = 3) -> dict[str, Any]:
    """PPO training steps/s on DynamicBatching-v0 and on CartPole-v1 with the same settings.

    Both use ``agents/hyperparams/ppo.yml``'s algorithm settings (4 envs in a
    ``DummyVecEnv``, 512-step rollouts, 10 epochs, 64x64 MLP), one torch thread, and
    ``VecNormalize``; DynamicBatching-v0 also carries its training wrappers (binary
    actions, queue features, centring with a fixed gain).

    :param total_steps: environment steps per run.
    :param seed: seed of both runs.
    :param repeats: rounds, each training both back to back (:func:`_rounds`): the
        rates are the best round's, the ratio the median of the rounds'.
    """
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    env_id, hp, specs, algo_kwargs, policy_kwargs = _ppo_setup()

    def timed(env_fn: Any) -> float:
        venv = make_vec_env(env_fn, n_envs=int(hp["n_envs"]), seed=seed, vec_env_cls=DummyVecEnv)
        return _ppo_steps_per_s(venv, total_steps, seed, algo_kwargs, policy_kwargs)

    r = _rounds(
        {
            "ours": lambda: timed(
                lambda: make_env(env_id, {"workload": {"kind": "poisson", "load": 0.6}}, specs)
            ),
            "cart": lambda: timed(lambda: gym.make("CartPole-v1")),
        },
        repeats,
    )
    return {
        "total_steps": total_steps,
        "repeats": repeats,
        "dynamic_batching_ppo_steps_per_s": max(r["ours"]),
        "cartpole_ppo_steps_per_s": max(r["cart"]),
        "ratio": _median_ratio(r["ours"], r["cart"]),
        "round_ratios": [a / b for a, b in zip(r["ours"], r["cart"], strict=True)],
        "floor_ratio": 0.8,
        "settings": {
            "n_envs": hp["n_envs"],
            **algo_kwargs,
            "policy_kwargs": str(policy_kwargs),
            "threads": 1,
        },
    }


def bench_ppo_vector(
    num_envs: int = 64, total_steps: int = 65_536, seed: int = 0
) -> dict[str, Any]:
    """PPO training steps/s through the SB3 adapter on the native vector env against SB3's
    ``DummyVecEnv`` of the scalar env: the same ``num_envs``, wrappers (the hyperparameter
    file's, as vector twins on the native side), PPO settings and one torch thread.

    :param num_envs: lanes on both sides.
    :param total_steps: environment steps per run.
    :param seed: seed of both runs.
    """
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.vec_env import make_vec_env

    env_id, hp, specs, algo_kwargs, policy_kwargs = _ppo_setup()
    env_kwargs = {"workload": {"kind": "poisson", "load": 0.6}}
    # the same rollout size in steps as the file's n_envs x n_steps
    algo_kwargs["n_steps"] = max(
        int(algo_kwargs.get("n_steps", 512)) * int(hp["n_envs"]) // num_envs, 16
    )
    native = _ppo_steps_per_s(
        make_vec_env(
            env_id, num_envs, env_kwargs, seed=seed, mode="vector_entry_point", wrappers=specs
        ),
        total_steps,
        seed,
        algo_kwargs,
        policy_kwargs,
    )
    dummy = _ppo_steps_per_s(
        sb3_make_vec_env(
            lambda: make_env(env_id, env_kwargs, specs),
            n_envs=num_envs,
            seed=seed,
            vec_env_cls=DummyVecEnv,
        ),
        total_steps,
        seed,
        algo_kwargs,
        policy_kwargs,
    )
    return {
        "num_envs": num_envs,
        "total_steps": total_steps,
        "native_vector_ppo_steps_per_s": native,
        "dummy_vec_env_ppo_steps_per_s": dummy,
        "ratio": native / dummy,
        "settings": {**algo_kwargs, "policy_kwargs": str(policy_kwargs), "threads": 1},
    }


#: the envs of :func:`bench_render`, with their default profiles and workloads
RENDER_BENCH_ENVS: tuple[str, ...] = (
    "batch_env/DynamicBatching-v0",
    "batch_env/NodeBatching-v0",
    "batch_env/LLMBatching-v0",
    "batch_env/LLMBatching-v1",
    "batch_env/LLMBatching-v2",
)


def _time_render(env_id: str, n_steps: int, seed: int) -> tuple[float, float]:
    """Seconds per ``step()`` and per ``render()`` of one ``render_mode="rgb_array"`` env
    through ``gymnasium.make``, each frame drawn just after its step (the same states)."""

    env = gym.make(env_id, render_mode="rgb_array")
    env.reset(seed=seed)
    env.render()  # builds the frame layout once (static panels and labels)
    n_actions = int(cast(Any, env.action_space).n)  # Discrete
    actions = np.random.default_rng(seed).integers(0, n_actions, n_steps).tolist()
    step, render, clock = env.step, env.render, time.perf_counter
    t_step = t_render = 0.0
    for a in actions:  # uniformly random actions: too large ones are clipped (docstrings)
        t0 = clock()
        _, _, terminated, truncated, _ = step(a)
        t1 = clock()
        render()
        t_render += clock() - t1
        t_step += t1 - t0
        if terminated or truncated:
            env.reset()
    env.close()
    return t_step / n_steps, t_render / n_steps


def bench_render(
    n_steps: int = 5000,
    repeats: int = 3,
    seed: int = 0,
    env_ids: tuple[str, ...] = RENDER_BENCH_ENVS,
) -> dict[str, Any]:
    """What one ``rgb_array`` frame costs against one step of the same env.

    Each env (default arguments, ``render_mode="rgb_array"``, through ``gymnasium.make``)
    takes ``n_steps`` uniformly random actions, rendering a frame after each step; step
    and frame times are summed apart over the same states. The best of ``repeats`` rounds
    counts (each time on its own). ``frame_cost_ratio_vs_step`` is frame time over step
    time (target: a frame well under 1 ms).

    :param n_steps: steps (and frames) per round.
    :param repeats: timed rounds per env.
    :param seed: seed of envs and actions.
    :param env_ids: the envs.
    """
    rows = []
    for env_id in env_ids:
        times = [_time_render(env_id, n_steps, seed) for _ in range(repeats)]
        step_s = min(t[0] for t in times)
        frame_s = min(t[1] for t in times)
        rows.append(
            {
                "env_id": env_id,
                "step_us": step_s * 1e6,
                "frame_us": frame_s * 1e6,
                "frame_cost_ratio_vs_step": frame_s / step_s,
            }
        )
    from batch_env.render import HEIGHT, WIDTH

    return {
        "envs": rows,
        "frame_shape": [HEIGHT, WIDTH, 3],
        "n_steps": n_steps,
        "repeats": repeats,
        "target_frame_us": 1000.0,
    }


def bench_executor_overhead(repeats: int = 30) -> dict[str, Any]:
    """What the real executor costs outside the model call (floor: < 5% of the batch time
    at batch sizes >= 8), on this machine's CPU with one thread.

    A quarter-width ResNet-50 (all four stages, 64x64 images) in a
    :class:`batch_env.real.torch_executor.TorchExecutor`; see
    :func:`batch_env.real.torch_executor.overhead_benchmark` for what is timed.

    :param repeats: calls per batch size (medians count).
    """
    from batch_env.real.energy import ModelMeter
    from batch_env.real.torch_executor import TorchExecutor, overhead_benchmark

    ex = TorchExecutor(
        "resnet50",
        32,
        torch_device="cpu",
        profile="resnet50-v100-linear",
        threads=1,
        warmup=2,
        width=0.25,
        model_kwargs={"image_size": 64, "num_classes": 100},
        meter=ModelMeter("bench: the profile's power model", "cpu"),
    )
    try:
        result = overhead_benchmark(ex, [1, 8, 16, 32], repeats=repeats)
    finally:
        ex.close()
    result["model"] = "resnet50, width 0.25, 64x64 images, 1 thread, CPU"
    result["floor_overhead_frac_b_ge_8"] = 0.05
    return result


#: the comparison timed by :func:`bench_backends`: 4 loads x 4 policies = 16 cells of 3
#: episodes of 5000 requests (the demo config's episodes)
BACKEND_BENCH_CONFIG: dict[str, Any] = {
    "name": "bench-backends",
    "env": {
        "profile": "resnet50-v100",
        "decision_interval_ms": 0.5,
        "horizon_requests": 5000,
        "reward_weights": {"sla": 0.0},
    },
    "workloads": {"poisson": {"kind": "poisson"}},
    "loads": [0.3, 0.5, 0.7, 0.9],
    "seeds": 3,
    "reference": "smdp",
    "policies": {
        "greedy": {},
        "static-8": {"name": "static", "batch_size": 8, "timeout_ms": 5},
        "tfserving": {"name": "tfserving", "batch_timeout_ms": 2},
        "smdp": {},
    },
}


def _time_compare(
    config: dict[str, Any], results_dir: Path, **kwargs: Any
) -> tuple[float, dict[str, Any]]:
    """Seconds from the start of ``run_compare`` to its last computed cell (tables and plots excluded)."""
    from experiments.compare import run_compare

    last = [0.0]

    def on_cell(cell: Any, computed: bool) -> None:
        if computed:
            last[0] = time.perf_counter()

    t0 = time.perf_counter()
    res = run_compare(config, results_dir=results_dir, progress=False, on_cell=on_cell, **kwargs)
    if res["failed"] or res["computed"] == 0:
        raise RuntimeError(
            f"bench comparison: {res['computed']} cells computed, failures {res['failed']}"
        )
    return last[0] - t0, res


def bench_backends(
    config: dict[str, Any] | None = None, num_cpus: int | None = None, repeats: int = 3
) -> dict[str, Any]:
    """Cells/s of a small comparison on the local backend and on Ray, in the same run.

    The same config runs from scratch (fresh results folders) twice on each backend:
    locally (cells one after the other in this process), then as Ray tasks on a local
    Ray instance started here with ``num_cpus`` CPUs (default: all). Cells/s count the
    time from the start of a run to its last cell (tables and plots excluded). The first
    run of each backend is cold (Ray's workers import everything, in each worker); the
    next ``repeats`` (``*_warm_*``, the best counts) reuse the warm process or workers:
    ``ratio_ray_vs_local`` compares the first runs, ``ratio_ray_warm_vs_local_warm`` the
    best warm ones. Ray's
    start-up (``ray.init``) is reported apart, and ``ray_cells_per_s_with_startup`` (and
    its ratio) includes it: what one sweep on a fresh Ray costs. Ratios are Ray's cells/s
    over the local backend's (above 1: Ray is faster). ``same_results`` checks that every
    run wrote the same records.
    Skipped (with the reason) when Ray is not installed.

    :param config: a comparison config (default :data:`BACKEND_BENCH_CONFIG`, 16 cells).
    :param num_cpus: CPUs of the Ray instance (default: all of this machine's).
    :param repeats: warm runs per backend (the best counts).
    """

    config = dict(config or BACKEND_BENCH_CONFIG)
    try:
        import ray
    except ImportError as exc:
        return {"skipped": f"ray is not installed ({exc}): {INSTALL_HINT}"}
    cpus = num_cpus or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
        local_s, local = _time_compare(config, Path(tmp) / "local")
        local_warm_s, local_warm = min(
            (_time_compare(config, Path(tmp) / f"local-warm-{i}") for i in range(repeats)),
            key=lambda t: t[0],
        )
        started_here = not ray.is_initialized()
        t0 = time.perf_counter()
        if started_here:
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        startup_s = time.perf_counter() - t0
        try:
            ray_s, remote = _time_compare(config, Path(tmp) / "ray", backend="ray")
            warm_s, warm = min(
                (
                    _time_compare(config, Path(tmp) / f"ray-warm-{i}", backend="ray")
                    for i in range(repeats)
                ),
                key=lambda t: t[0],
            )
        finally:
            if started_here:
                ray.shutdown()
    n = local["computed"]
    return {
        "cells": n,
        "config": config,
        "ray_version": ray.__version__,
        "ray_num_cpus": cpus if started_here else None,
        "local_s": local_s,
        "ray_s": ray_s,
        "ray_startup_s": startup_s,
        "local_cells_per_s": n / local_s,
        "local_warm_s": local_warm_s,
        "local_warm_cells_per_s": n / local_warm_s,
        "ray_cells_per_s": n / ray_s,
        "ray_cells_per_s_with_startup": n / (ray_s + startup_s),
        "warm_repeats": repeats,
        "ray_warm_s": warm_s,
        "ray_warm_cells_per_s": n / warm_s,
        "ratio_ray_vs_local": local_s / ray_s,
        "ratio_ray_with_startup_vs_local": local_s / (ray_s + startup_s),
        "ratio_ray_warm_vs_local_warm": local_warm_s / warm_s,
        "same_results": local["records"]
        == local_warm["records"]
        == remote["records"]
        == warm["records"],
    }


#: the task of :func:`bench_wallclock` and the reference it is timed against
WALLCLOCK_TASK = "batch_env/LowLoadEnergy-v0"
WALLCLOCK_REFERENCE = "CartPole-v1"
#: CartPole-v1's target: the evaluation's mean return (the env's reward threshold, 475)
CARTPOLE_TARGET_RETURN = 475.0


def _median_or_none(values: list[float | None]) -> float | None:
    """Median with ``None`` (not reached) counted as infinite; ``None`` when the median
    itself is not reached (at least half the runs missed the target)."""
    m = statistics.median([math.inf if v is None else float(v) for v in values])
    return None if math.isinf(m) else m


def _time_to_target(
    env_id: str,
    env_kwargs: dict[str, Any],
    hyperparams: str | None,
    seed: int,
    settings: dict[str, Any],
    reached: Callable[[dict[str, Any]], bool],
    figure: Callable[[dict[str, Any]], float],
    best: Callable[[list[float]], float],
    run_dir: Path,
) -> dict[str, Any]:
    """One training run (``agents.train.train``) stopped at the first evaluation that
    meets ``reached``, and its figures: the step and the seconds of that evaluation, or
    not reached with the best ``figure`` of its evaluations (the final one included)."""
    from agents.train import TrainArgs, train

    t0 = time.perf_counter()
    run = train(
        TrainArgs(
            algo="ppo",
            env_id=env_id,
            env_kwargs=env_kwargs,
            hyperparams=hyperparams,
            n_timesteps=settings["budget_steps"],
            seed=seed,
            run_dir=str(run_dir),
            device="cpu",
            threads=1,
            eval_freq=settings["eval_freq"],
            eval_episodes=settings["eval_episodes"],
            eval_seed=settings["eval_seed"],
            progress=False,
        ),
        stop_when=reached,
    )
    run_s = time.perf_counter() - t0
    history = json.loads((run / "evaluations.json").read_text())
    hit = next((r for r in history if reached(r)), None)
    figures = [figure(r) for r in history]
    return {
        "seed": seed,
        "reached": hit is not None,
        "steps": None if hit is None else int(hit["timesteps"]),
        "seconds": None if hit is None else hit["train_s"],
        "seconds_with_eval": None if hit is None else hit["wall_s"] + hit["eval_s"],
        "figure_at_target": None if hit is None else figure(hit),
        "best_figure": best(figures),
        "steps_trained": int(history[-1]["timesteps"]),
        "evaluations": len(history),
        "eval_s": sum(r["eval_s"] for r in history),
        "run_s": run_s,
    }


def _summary(env_id: str, target: str, figure: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "env_id": env_id,
        "target": target,
        "figure": figure,
        "reached": sum(r["reached"] for r in runs),
        "runs": len(runs),
        "median_steps": _median_or_none([r["steps"] for r in runs]),
        "median_seconds": _median_or_none([r["seconds"] for r in runs]),
        "median_seconds_with_eval": _median_or_none([r["seconds_with_eval"] for r in runs]),
        "seeds": runs,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def score_span_on_episodes(
    task: str, env_kwargs: dict[str, Any], n_episodes: int, seed: int
) -> dict[str, Any]:
    """Greedy's and the best realizable reference's mean reward rates on the evaluation
    episodes of a training run (``env_kwargs``: the run's, e.g. the shipped episode
    length; seeds ``seed`` ... ``seed + n_episodes - 1``, the loads a periodic
    evaluation plays), deterministic, each with the policy and parameters its stored
    reference of ``task`` names: the span of a normalized score paired on those very
    episodes (0 at greedy, 1 at the best).

    :raises ValueError: when ``task`` has no defined score (no stored reference above
        greedy), or when on these episodes the best reference is no better than greedy.
    """
    from agents.callbacks import eval_load_grid
    from baselines import make as make_baseline
    from batch_env import tasks

    ref = tasks.references().get(task, {})
    best = ref.get("best_policy")
    pols = ref.get("policies", {})
    if (
        best in (None, "greedy")
        or "greedy" not in pols
        or best not in pols
        or ref.get("score_undefined")
    ):
        raise ValueError(
            f"task={task!r} has no defined normalized score (no stored reference above greedy): "
            "pick a task with an exact SMDP bound or a defined score (docs/benchmark.md)"
        )
    env = gym.make(task, **env_kwargs)
    try:
        loads = eval_load_grid(env, n_episodes)
        rates = {}
        for label in ("greedy", best):
            fig = pols[label]
            res = batch_env.evaluate(
                make_baseline(fig["policy"], env, **fig["params"]),
                env,
                n_episodes=n_episodes,
                seed=seed,
                options=None if loads is None else [{"load": x} for x in loads],
            )
            rates[label] = {
                "policy": fig["policy"],
                "params": fig["params"],
                "reward_rate_per_s": res.mean("reward_rate_per_s"),
            }
    finally:
        env.close()
    low, top = rates["greedy"]["reward_rate_per_s"], rates[best]["reward_rate_per_s"]
    if top <= low:
        raise ValueError(
            f"task={task!r}: on these evaluation episodes {best} ({top:.4f} per s) is no better "
            f"than greedy ({low:.4f} per s): no score span; evaluate on more episodes"
        )
    return {"greedy": rates["greedy"], "best": {"label": best, **rates[best]}}


def bench_wallclock(
    seeds: tuple[int, ...] = (0, 1, 2),
    budget_steps: int | None = None,
    eval_freq: int = 10_000,
    eval_episodes: int = 3,
    eval_seed: int = 100_000,
    gap_tolerance: float = 0.01,
    cartpole_target: float = CARTPOLE_TARGET_RETURN,
    task: str = WALLCLOCK_TASK,
    task_kwargs: dict[str, Any] | None = None,
    run_root: str | Path | None = None,
    score_target: float = 0.5,
) -> dict[str, Any]:
    """Wall-clock to a good agent: PPO on ``task`` to within ``gap_tolerance`` of the SMDP
    gain (a task with an exact bound) or to a normalized score of ``score_target`` (a task
    without one, e.g. the LLM tasks), against CartPole-v1 to a mean return of
    ``cartpole_target``, same PPO settings.

    Both train with ``agents.train.train``: the task with the shipped
    ``agents/hyperparams/ppo.yml`` (its base env's entry: 4 envs, 512-step rollouts, 10
    epochs, gamma 0.999, 64x64 MLP, ``VecNormalize``, the task's wrappers and greedy's
    centring gain), CartPole-v1 with the same entry less the batching wrappers; CPU, one
    torch thread, the same step budget (default: the entry's ``n_timesteps``, 300,000)
    and evaluation cadence. For each seed, the task's run, then CartPole's (interleaved, so
    that load on the machine falls on both alike).

    How the target is measured: every ``eval_freq`` environment steps (all envs
    together) the run's periodic evaluation (``agents.callbacks.PeriodicEvaluation``,
    ``batch_env.evaluate``) plays ``eval_episodes`` episodes with seeds ``eval_seed``,
    ``eval_seed + 1``, ... (the same for every run), deterministic actions, with the
    run's current observation statistics (and the same number of stochastic ones, which
    the project's evaluation logs and the target ignores). The task's target is met when
    the deterministic episodes' mean cost rate (``-reward_rate_per_s``, each episode the
    task's 20,000 requests) is at most ``(1 + gap_tolerance)`` x the SMDP gain
    (``baselines.smdp.solve``); CartPole's when their mean return is at least
    ``cartpole_target``. Training stops at the first evaluation that meets it, and that
    evaluation's step count is the run's ``steps`` (a multiple of ``eval_freq``: the
    resolution). On a task without an exact bound the target is a normalized score
    paired on the evaluation episodes: greedy and the task's best realizable reference
    play the same episodes first (:func:`score_span_on_episodes`, with the run's env
    kwargs: the shipped episode length, not the protocol's), and the target is met when
    ``(r - r_greedy) / (r_best - r_greedy) >= score_target`` for the deterministic mean
    reward rate ``r``; the run's figure is that score. ``seconds`` is the training's
    wall-clock up to that evaluation without
    the time spent in evaluations; ``seconds_with_eval`` includes every evaluation up to
    and including that one (when the run knew it had reached the target); ``run_s`` is the
    whole ``train`` call (set-up, greedy's centring gain, saving). A run that does not meet
    its target within the budget (the final evaluation at the budget counts) is
    ``reached: false``, with ``steps`` and ``seconds`` None and its best figure (smallest
    gap in percent, or largest mean return) in ``best_figure``. Medians count a run not
    reached as infinite, and are None when at least half the runs missed.

    :param seeds: training seeds (each env, each seed: one run).
    :param budget_steps: step budget of every run (default: the hyperparameter file's).
    :param eval_freq: environment steps between evaluations.
    :param eval_episodes: episodes per evaluation (and mode).
    :param eval_seed: seed of the first evaluation episode.
    :param gap_tolerance: the task's target, relative to the SMDP gain.
    :param cartpole_target: CartPole-v1's target mean return.
    :param task: a task with an exact SMDP bound, or one with a defined normalized score.
    :param task_kwargs: env kwargs over the task's (tests shorten its episodes).
    :param run_root: keep the runs under this folder (default: a temporary one, removed).
    :param score_target: the normalized score to reach on a task without an exact bound.
    """

    from agents.train import entry_env_kwargs, smdp_gain_if_exact

    t_start = time.perf_counter()
    if task not in TASKS:
        raise ValueError(f"task={task!r} is not a benchmark task: allowed are {', '.join(TASKS)}")
    task_kwargs = dict(task_kwargs or {})
    hp = load_hyperparams("ppo", task)
    gain = smdp_gain_if_exact(task, task_kwargs)
    span = None
    if gain is None:
        if not (isinstance(score_target, (int, float)) and 0.0 < score_target <= 1.0):
            raise ValueError(
                f"score_target={score_target!r} is invalid: expected a number in (0, 1]"
            )
        span = score_span_on_episodes(
            task, entry_env_kwargs(hp, task_kwargs), eval_episodes, eval_seed
        )
    budget = int(budget_steps if budget_steps is not None else float(hp["n_timesteps"]))
    settings = {
        "budget_steps": budget,
        "eval_freq": eval_freq,
        "eval_episodes": eval_episodes,
        "eval_seed": eval_seed,
    }
    task_reached, task_gap, best_of, target, figure = _task_target(
        gain, span, gap_tolerance, score_target
    )

    # the task entry less what is the task's own (its wrappers, callback and env kwargs)
    cart_hp = {k: v for k, v in hp.items() if k not in ("env_wrapper", "callback", "env_kwargs")}
    task_runs, cart_runs = _interleaved_runs(
        task,
        task_kwargs,
        seeds,
        settings,
        (task_reached, task_gap, best_of),
        cart_hp,
        cartpole_target,
        run_root,
    )
    ours = _summary(task, target, figure, task_runs)
    ref = _summary(
        WALLCLOCK_REFERENCE,
        f"deterministic mean return >= {cartpole_target:g}",
        "return (deterministic mean episode return)",
        cart_runs,
    )
    return {
        "task": ours,
        "cartpole": ref,
        "smdp_gain": gain,
        "gap_tolerance": gap_tolerance,
        **({} if span is None else {"score_target": score_target, "score_span": span}),
        "cartpole_target_return": cartpole_target,
        "ratio_steps_vs_cartpole": _ratio(ours["median_steps"], ref["median_steps"]),
        "ratio_seconds_vs_cartpole": _ratio(ours["median_seconds"], ref["median_seconds"]),
        "task_kwargs_override": task_kwargs,
        "settings": {
            **settings,
            "seeds": list(seeds),
            "n_envs": hp["n_envs"],
            "algo": "ppo",
            **{k: v for k, v in cart_hp.items() if k not in ("n_envs", "n_timesteps")},
            "device": "cpu",
            "threads": 1,
        },
        "measured_s": time.perf_counter() - t_start,
    }


def _task_target(
    gain: float | None, span: dict[str, Any] | None, gap_tolerance: float, score_target: float
) -> tuple[Callable[[dict[str, Any]], bool], Callable[[dict[str, Any]], float], Any, str, str]:
    """The task's target for :func:`bench_wallclock`: ``(reached(record), figure(record),
    best_of, target text, figure text)``, within ``gap_tolerance`` of the SMDP gain (a
    task with an exact bound) or a paired normalized score of ``score_target`` (``span``)."""
    from agents.callbacks import eval_score

    if span is None:
        assert gain is not None
        target_cost = (1.0 + gap_tolerance) * gain

        def reached(rec: dict[str, Any]) -> bool:
            return -eval_score(rec) <= target_cost

        def gap(rec: dict[str, Any]) -> float:
            return 100.0 * (-eval_score(rec) - gain) / gain

        target = (
            f"deterministic mean cost rate <= {1 + gap_tolerance:g} x SMDP gain "
            f"({target_cost:.4f} per s)"
        )
        return (
            reached,
            gap,
            min,
            target,
            "gap_percent (deterministic cost rate above the SMDP gain, %)",
        )
    low = span["greedy"]["reward_rate_per_s"]
    top = span["best"]["reward_rate_per_s"]

    def score(rec: dict[str, Any]) -> float:
        return float((eval_score(rec) - low) / (top - low))

    def reached_score(rec: dict[str, Any]) -> bool:
        return score(rec) >= score_target

    target = (
        f"deterministic normalized score >= {score_target:g}, paired on the evaluation "
        f"episodes (greedy {low:.4f}, {span['best']['label']} {top:.4f} per s there)"
    )
    figure = "normalized score (0 at greedy, 1 at the best realizable reference, same episodes)"
    return reached_score, score, max, target, figure


def _interleaved_runs(
    task: str,
    task_kwargs: dict[str, Any],
    seeds: tuple[int, ...],
    settings: dict[str, Any],
    task_target: tuple[Any, Any, Any],
    cart_hp: dict[str, Any],
    cartpole_target: float,
    run_root: str | Path | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`bench_wallclock`'s runs: for each seed the task's, then CartPole's."""

    def cart_reached(rec: dict[str, Any]) -> bool:
        return rec["deterministic"]["return"][0] >= cartpole_target

    def cart_return(rec: dict[str, Any]) -> float:
        return float(rec["deterministic"]["return"][0])

    task_reached, task_gap, best_of = task_target
    task_runs, cart_runs = [], []
    with tempfile.TemporaryDirectory(prefix="bench-wallclock-") as tmp:
        root = Path(run_root) if run_root is not None else Path(tmp)
        cart_file = Path(tmp) / "ppo-cartpole.yml"
        cart_file.write_text(yaml.safe_dump({WALLCLOCK_REFERENCE: cart_hp}))
        for seed in seeds:
            task_runs.append(
                _time_to_target(
                    task,
                    task_kwargs,
                    None,
                    seed,
                    settings,
                    task_reached,
                    task_gap,
                    best_of,
                    root / f"task-s{seed}",
                )
            )
            cart_runs.append(
                _time_to_target(
                    WALLCLOCK_REFERENCE,
                    {},
                    str(cart_file),
                    seed,
                    settings,
                    cart_reached,
                    cart_return,
                    max,
                    root / f"cartpole-s{seed}",
                )
            )
    return task_runs, cart_runs


def _time_llm(env_id: str, n_steps: int, seed: int, env_kwargs: dict[str, Any]) -> float:
    """Steps/s of an LLM env through ``gymnasium.make``, uniformly random caps (actions
    drawn before timing), episodes reset as they end."""

    env = gym.make(env_id, **env_kwargs)
    env.reset(seed=seed)
    n_actions = int(cast(Any, env.action_space).n)  # Discrete
    actions = np.random.default_rng(seed).integers(0, n_actions, n_steps).tolist()
    step = env.step
    t0 = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = step(a)
        if terminated or truncated:
            env.reset()
    return n_steps / (time.perf_counter() - t0)


#: the LLM step-cost bench's setting: the default A100 profile, Poisson at 4 requests/s
#: with the default lengths (the Azure conversation trace's fit)
LLM_BENCH_KWARGS: dict[str, Any] = {"workload": {"kind": "poisson", "rate_per_s": 4.0}}


def bench_llm_steps(n_steps: int = 50_000, repeats: int = 3, seed: int = 0) -> dict[str, Any]:
    """LLMBatching-v0 (vLLM v0's scheduler) and LLMBatching-v1 (chunked prefill, default
    budget) steps/s against CartPole-v1's in the same rounds (:func:`_rounds`; the best
    round's rates), and their step-cost ratios, the median of the rounds' (issue 23's
    floor for the chunked scheduler: 2)."""
    ids = ("batch_env/LLMBatching-v0", "batch_env/LLMBatching-v1")
    timers: dict[str, Callable[[], float]] = {"cart": lambda: _time_cartpole(n_steps, seed)}
    for env_id in ids:
        timers[env_id] = partial(_time_llm, env_id, n_steps, seed, LLM_BENCH_KWARGS)
    r = _rounds(timers, repeats)
    out: dict[str, Any] = {
        "cartpole_steps_per_s": max(r["cart"]),
        "n_steps": n_steps,
        "repeats": repeats,
    }
    for env_id in ids:
        out[env_id] = {
            "steps_per_s": max(r[env_id]),
            "step_cost_ratio_vs_cartpole": _median_ratio(r["cart"], r[env_id]),
            "round_ratios": [a / b for a, b in zip(r["cart"], r[env_id], strict=True)],
        }
    out["env_kwargs"] = LLM_BENCH_KWARGS
    out["floor_step_cost_ratio"] = 2.0
    return out


def _llm_episode_cost(env_id: str, env_kwargs: dict[str, Any], seed: int) -> dict[str, float]:
    """One episode of an LLM env at its largest action (vLLM's default cap and budget):
    its steps and process CPU seconds, and the requests it completed."""

    env = gym.make(env_id, **env_kwargs)
    a = int(cast(Any, env.action_space).n) - 1  # Discrete: its largest action
    step = env.step
    t0 = time.process_time()
    env.reset(seed=seed)
    n = 0
    while True:
        n += 1
        _, _, _, truncated, info = step(a)
        if truncated:
            break
    cpu = time.process_time() - t0
    env.close()
    return {"steps": n, "cpu_s": cpu, "completed": info["serving"]["completed_total"]}


def llm_v2_settings() -> dict[str, dict[str, Any]]:
    """The settings of :func:`bench_llm_v2`: v1's defaults, and ``LLMMemoryPressure-v0``'s
    problem (its kwargs but the episode length)."""

    task = dict(TASKS["batch_env/LLMMemoryPressure-v0"].kwargs)
    for k in ("horizon_requests", "warmup_requests"):
        task.pop(k, None)
    return {"v1-defaults": {}, "LLMMemoryPressure-v0": task}


def bench_llm_v2(horizon_requests: int = 2000, repeats: int = 3, seed: int = 0) -> dict[str, Any]:
    """LLMBatching-v2 against v1 on the same episodes: steps and CPU per completed request.

    For each setting of :func:`llm_v2_settings`, one episode of ``horizon_requests``
    requests of each id at the largest action, back to back in each of ``repeats`` rounds
    (:func:`_rounds`). Steps per completed request are the same in every round; the CPU
    (process time, so other processes do not count) is the best round's, and the CPU ratio
    the median of the rounds'. Issue 38's floors: at least 10x fewer steps and 5x less
    CPU per completed request."""
    v1, v2 = "batch_env/LLMBatching-v1", "batch_env/LLMBatching-v2"
    out: dict[str, Any] = {
        "horizon_requests": horizon_requests,
        "repeats": repeats,
        "floor_steps_ratio": 10.0,
        "floor_cpu_ratio": 5.0,
        "settings": {},
    }
    for name, kw in llm_v2_settings().items():
        kw = {**kw, "horizon_requests": horizon_requests}
        runs: dict[str, list[dict[str, float]]] = {v1: [], v2: []}

        def timer(env_id: str, kw: dict[str, Any] = kw, runs: Any = runs) -> float:
            r = _llm_episode_cost(env_id, kw, seed)
            runs[env_id].append(r)
            return r["completed"] / r["cpu_s"]  # completed requests per CPU second

        rates = _rounds({v1: lambda: timer(v1), v2: lambda: timer(v2)}, repeats)
        row: dict[str, Any] = {"env_kwargs": kw}
        for env_id in (v1, v2):
            best = min(runs[env_id], key=lambda r: r["cpu_s"])
            row[env_id] = {
                "steps_per_request": best["steps"] / best["completed"],
                "cpu_us_per_request": 1e6 * best["cpu_s"] / best["completed"],
                "completed": best["completed"],
            }
        row["steps_ratio"] = row[v1]["steps_per_request"] / row[v2]["steps_per_request"]
        row["cpu_ratio"] = _median_ratio(rates[v2], rates[v1])
        row["round_cpu_ratios"] = [a / b for a, b in zip(rates[v2], rates[v1], strict=True)]
        row["meets_floors"] = (
            row["steps_ratio"] >= out["floor_steps_ratio"]
            and row["cpu_ratio"] >= out["floor_cpu_ratio"]
        )
        out["settings"][name] = row
    return out


#: the prefix-caching benchmark's problem: the Mooncake conversation trace (prompts of
#: 12,035 tokens on average, 37% of their blocks a prefix hit with an unbounded cache) on
#: Llama-3.1-8B / H100, scaled to 0.5 requests/s
PREFIX_BENCH_SETTINGS: dict[str, Any] = {
    "profile": "llama-3.1-8b-h100",
    "max_model_len": 131_072,
    "max_num_batched_tokens": 8192,
    "workload": {"kind": "trace", "dataset": "mooncake-conversation", "target_rate_per_s": 0.5},
}


def bench_prefix_caching(
    horizon_requests: int = 1000, repeats: int = 3, seed: int = 0
) -> dict[str, Any]:
    """What prefix caching costs the simulator: ``LLMBatching-v2`` on the Mooncake
    conversation trace (:data:`PREFIX_BENCH_SETTINGS`) with ``prefix_caching`` on and off,
    one episode of ``horizon_requests`` each, back to back in each of ``repeats`` rounds
    (:func:`_rounds`): CPU per completed request (the best round's) and the ratio on / off
    (the median of the rounds'). Issue 63's ceiling: 1.5."""
    env_id = "batch_env/LLMBatching-v2"
    runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}

    def timer(side: str) -> float:
        kw = {**PREFIX_BENCH_SETTINGS, "horizon_requests": horizon_requests}
        r = _llm_episode_cost(env_id, {**kw, "prefix_caching": side == "on"}, seed)
        runs[side].append(r)
        return r["cpu_s"] / r["completed"]  # CPU seconds per completed request

    costs = _rounds({"on": lambda: timer("on"), "off": lambda: timer("off")}, repeats)
    out: dict[str, Any] = {
        "env_id": env_id,
        "env_kwargs": {**PREFIX_BENCH_SETTINGS, "horizon_requests": horizon_requests},
        "repeats": repeats,
        "ceiling_cpu_ratio": 1.5,
    }
    for side in ("on", "off"):
        best = min(runs[side], key=lambda r: r["cpu_s"] / r["completed"])
        out[f"cpu_us_per_request_{side}"] = 1e6 * best["cpu_s"] / best["completed"]
    out["cpu_ratio_on_vs_off"] = _median_ratio(costs["on"], costs["off"])
    out["round_ratios"] = [a / b for a, b in zip(costs["on"], costs["off"], strict=True)]
    out["within_ceiling"] = out["cpu_ratio_on_vs_off"] <= out["ceiling_cpu_ratio"]
    return out


def _order_action(task_id: str, k: int) -> int:
    """The action of ``task_id``'s LLM env that sets the grid's second cap (2), the
    largest budget and the ``k``-th admission order."""
    kw = TASKS[task_id].kwargs
    ng, nb = len(kw["grid"]), len(kw["budget_grid"])
    return (k * nb + nb - 1) * ng + 1


def _queued_llm_env(task_id: str, queue: int, seed: int) -> tuple[Any, int]:
    """An env of ``task_id``'s problem with at least ``queue`` requests waiting: played
    from ``seed`` at the grid's second cap (2) and the largest budget, FCFS, until the
    queue holds that many (``RuntimeError`` if a million steps do not get there); the
    env and the requests waiting."""

    env_id, kw = make_task_args(task_id)
    env = gym.make(env_id, **kw)
    env.reset(seed=seed)
    fill = _order_action(task_id, 0)
    for _ in range(1_000_000):
        *_, truncated, info = env.step(fill)
        if info["waiting"] >= queue:
            return env, int(info["waiting"])
        if truncated:
            env.reset()
    raise RuntimeError(f"no {queue} waiting on {task_id} after 1,000,000 steps")


def bench_llm_orders(
    queue: int = 400, n_steps: int = 2000, repeats: int = 3, seed: int = 0
) -> dict[str, Any]:
    """What an admission order costs a step with a long waiting queue, against FCFS.

    On ``LLMTwoClasses-v0``'s problem a queue of ``queue`` requests is built (cap 2,
    FCFS), and copies of that env (a pickle round trip) step ``n_steps`` times at cap 2
    and the largest budget under each order, in each of ``repeats`` rounds
    (:func:`_rounds`): steps per CPU second (process time) and each order's step cost
    against FCFS's, the median of the rounds'. The waiting queue's indexes
    (``batch_env.llm.orders.WaitingQueue``) keep an order's step O(log queue); a scan of
    the queue made it O(queue) (issue 40's note). Floor: 1.5x FCFS's step cost."""
    import pickle

    task = "batch_env/LLMTwoClasses-v0"
    base, start_waiting = _queued_llm_env(task, queue, seed)
    orders = list(TASKS[task].kwargs["orders"])
    frozen = pickle.dumps(base)

    def timer(k: int) -> float:
        env = pickle.loads(frozen)
        a = _order_action(task, k)
        step = env.step
        t0 = time.process_time()
        for _ in range(n_steps):
            *_, truncated, _ = step(a)
            if truncated:
                raise RuntimeError("bench_llm_orders: the episode ended: lower n_steps")
        return n_steps / (time.process_time() - t0)

    rates = _rounds({o: partial(timer, k) for k, o in enumerate(orders)}, repeats)
    out: dict[str, Any] = {
        "task": task,
        "waiting_at_start": start_waiting,
        "n_steps": n_steps,
        "repeats": repeats,
        "floor_cost_ratio": 1.5,
        "orders": {},
    }
    for o in orders:
        out["orders"][o] = {
            "steps_per_cpu_s": max(rates[o]),
            "cost_ratio_vs_fcfs": _median_ratio(rates["fcfs"], rates[o]),
            "round_ratios": [a / b for a, b in zip(rates["fcfs"], rates[o], strict=True)],
        }
    out["meets_floor"] = all(
        r["cost_ratio_vs_fcfs"] <= out["floor_cost_ratio"] for r in out["orders"].values()
    )
    return out


def run_bench(
    n_steps: int = 200_000,
    repeats: int = 3,
    seed: int = 0,
    smdp: bool = True,
    ppo: bool = True,
    vector: bool = True,
    vector_sizes: tuple[int, ...] = (1, 64, 1024, 4096),
    vector_env_steps: int = 2_000_000,
    torch_overhead: bool = True,
    backends: bool = True,
    render: bool = True,
    render_steps: int | None = None,
    wallclock: bool = False,
    wallclock_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the benchmark and return its figures.

    :param n_steps: env steps per timed round.
    :param repeats: timed rounds; each runs the env and its reference back to back, the
        rates reported are the best round's and each ratio the median of the rounds'.
    :param seed: seed for envs and actions.
    :param smdp: also time the SMDP solver against pymdptoolbox (about 20 s).
    :param ppo: also time PPO training against CartPole (needs the train extra; about 40 s).
    :param vector: also time the NumPy vector env against CartPoleVectorEnv.
    :param vector_sizes: the ``num_envs`` of the vector part.
    :param vector_env_steps: env-steps per timed round of the vector part.
    :param torch_overhead: also time the real executor's overhead (needs the real extra).
    :param backends: also time the comparison's local and Ray backends (skipped, with the
        reason, when Ray is not installed).
    :param render: also time an ``rgb_array`` frame against a step, for each env.
    :param render_steps: steps (and frames) per timed round of the render part (default
        ``n_steps // 40``, at least 50: 5000 at the default ``n_steps``).
    :param wallclock: also measure the wall-clock to a good agent (:func:`bench_wallclock`;
        about half an hour on one core, so off by default).
    :param wallclock_kwargs: keyword arguments of :func:`bench_wallclock`.
    """
    env_kwargs = {
        "profile": "resnet50-v100",
        "workload": {"kind": "poisson", "load": 0.6},
    }
    r = _rounds(
        {
            "ours": lambda: _time_batching(n_steps, seed, env_kwargs),
            "cart": lambda: _time_cartpole(n_steps, seed),
        },
        repeats,
    )
    result = {
        "dynamic_batching_steps_per_s": max(r["ours"]),
        "cartpole_steps_per_s": max(r["cart"]),
        "step_cost_ratio_vs_cartpole": _median_ratio(r["cart"], r["ours"]),
        "round_ratios": [a / b for a, b in zip(r["cart"], r["ours"], strict=True)],
        "floor_step_cost_ratio": 1.5,
        "n_steps": n_steps,
        "repeats": repeats,
        "env_kwargs": env_kwargs,
        "machine": machine_description(),
    }
    result["llm"] = bench_llm_steps(max(n_steps // 4, 1000), repeats, seed)
    result["llm_v2"] = bench_llm_v2(max(n_steps // 100, 100), repeats, seed)
    result["llm_orders"] = bench_llm_orders(n_steps=max(n_steps // 100, 200), repeats=repeats)
    result["prefix_caching"] = bench_prefix_caching(max(n_steps // 100, 100), repeats, seed)
    if render:
        result["render"] = bench_render(render_steps or max(n_steps // 40, 50), repeats, seed)
    if vector:
        result["vector"] = bench_vector(vector_sizes, vector_env_steps, repeats, seed)
    if torch_overhead:
        result["torch_executor_overhead"] = bench_executor_overhead()
    if smdp:
        result["smdp"] = bench_smdp()
    if ppo:
        result["ppo"] = bench_ppo(seed=seed, repeats=min(repeats, 3))
        result["ppo_vector"] = bench_ppo_vector(seed=seed)
    if backends:
        result["compare_backends"] = bench_backends()
    if wallclock:
        result["wallclock"] = bench_wallclock(**(wallclock_kwargs or {}))
    return result


def write_results(
    result: dict[str, Any], out_dir: str | Path = "results/bench", name: str = "bench.json"
) -> Path:
    """Write ``result`` as ``name`` (``bench.json``; ``wallclock.json`` for the wall-clock
    item alone) under ``out_dir`` and return its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def cmd_bench(args: argparse.Namespace) -> int:
    """Measure env speed against CartPole and the SMDP solver against pymdptoolbox, the cost
    of an rgb_array frame against a step, and the comparison's cells/s on the local and the
    Ray backend (--skip-ray to leave it out).

    --wallclock also measures the wall-clock to a good agent (about 20 minutes on one
    core, so not in the default run): PPO with the project's defaults on
    batch_env/LowLoadEnergy-v0 until the deterministic evaluation's mean cost rate (3
    episodes on held-out seeds, every 10,000 steps) is within 1% of the SMDP gain, against
    CartPole-v1 until its mean return is 475, same PPO settings, budget and evaluation
    cadence; the median over --wallclock-seeds seeds in steps and in seconds, and each
    seed's figures (a run that misses within its budget is reported as not reached, with
    its best figure). It goes into bench.json and into wallclock.json beside it;
    --wallclock-only runs that item alone and writes wallclock.json only.

    --wallclock-task picks another task: one with an exact SMDP bound (target: within 1%
    of it), or one without, such as the LLM tasks, whose target is the normalized score
    --wallclock-score (default 0.5) paired on the evaluation episodes (greedy and the
    task's best realizable reference play the same episodes first; the runs' episodes
    are the shipped training episodes, e.g. 2,000 requests on the LLM tasks). Its figures
    go to wallclock-<task name>.json (e.g. wallclock-LLMBurstyLongPrompts-v0.json)."""

    check_folder("--out", args.out)
    if args.wallclock_task not in TASKS:
        raise ValueError(
            f"--wallclock-task={args.wallclock_task!r} is not a benchmark task: allowed are "
            + ", ".join(TASKS)
        )
    if not 0.0 < args.wallclock_score <= 1.0:
        raise ValueError(
            f"--wallclock-score={args.wallclock_score!r} is invalid: expected a number in (0, 1]"
        )
    wallclock_kwargs = {
        "seeds": tuple(range(args.wallclock_seeds)),
        "budget_steps": args.wallclock_budget,
        "eval_freq": args.wallclock_eval_freq,
        "eval_episodes": args.wallclock_eval_episodes,
        "task": args.wallclock_task,
        "score_target": args.wallclock_score,
    }
    wc_name = (
        "wallclock.json"
        if args.wallclock_task == WALLCLOCK_TASK
        else f"wallclock-{args.wallclock_task.split('/')[-1]}.json"
    )
    if args.wallclock_only:
        wc = {**bench_wallclock(**wallclock_kwargs), "machine": machine_description()}
        path = write_results(wc, args.out, wc_name)
        if args.json:
            print(dumps(wc, indent=2))
            return 0
        print(_format_wallclock(wc))
        print(f"written to {path}")
        return 0
    try:
        sizes = tuple(int(x) for x in args.vector_sizes.split(",") if x.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise ValueError(
            f"--vector-sizes={args.vector_sizes!r} is invalid: expected positive integers, e.g. 1,64,1024"
        )
    result = run_bench(
        n_steps=args.steps,
        repeats=args.repeats,
        smdp=not args.skip_smdp,
        ppo=not args.skip_ppo,
        vector=not args.skip_vector,
        vector_sizes=sizes,
        torch_overhead=not args.skip_torch,
        backends=not args.skip_ray,
        render=not args.skip_render,
        wallclock=args.wallclock,
        wallclock_kwargs=wallclock_kwargs,
    )
    path = write_results(result, args.out)
    if "wallclock" in result:
        write_results({**result["wallclock"], "machine": result["machine"]}, args.out, wc_name)
    if args.json:
        print(dumps(result, indent=2))
        return 0
    _print_bench(result)
    print(f"written to {path}")
    return 0


def _print_llm_v2(v2: dict[str, Any] | None) -> None:
    """``batch-env bench``'s LLMBatching-v2 lines: steps and CPU per request against v1."""
    if v2 is None:
        return
    for name, row in v2["settings"].items():
        a, b = (row[f"batch_env/LLMBatching-v{k}"] for k in (1, 2))
        print(
            f"LLMBatching-v2 vs v1 ({name}): {row['steps_ratio']:.1f}x fewer steps "
            f"({b['steps_per_request']:.2f} vs {a['steps_per_request']:.2f} a request), "
            f"{row['cpu_ratio']:.1f}x less CPU ({b['cpu_us_per_request']:,.0f} vs "
            f"{a['cpu_us_per_request']:,.0f} us a request; floors: "
            f"{v2['floor_steps_ratio']:.0f}x, {v2['floor_cpu_ratio']:.0f}x)"
        )


def _print_prefix_caching(pc: dict[str, Any] | None) -> None:
    """``batch-env bench``'s prefix-caching line: CPU per request on against off."""
    if pc:
        print(
            f"prefix caching on the Mooncake trace (v2): {pc['cpu_ratio_on_vs_off']:.2f}x the CPU "
            f"of caching off ({pc['cpu_us_per_request_on']:,.0f} vs "
            f"{pc['cpu_us_per_request_off']:,.0f} us a request; ceiling "
            f"{pc['ceiling_cpu_ratio']:.1f}x)"
        )


def _print_bench(result: dict[str, Any]) -> None:
    """The figures of ``batch-env bench``, one line each."""
    print(f"DynamicBatching-v0: {result['dynamic_batching_steps_per_s']:,.0f} steps/s")
    print(f"CartPole-v1:        {result['cartpole_steps_per_s']:,.0f} steps/s")
    print(
        f"step cost ratio (ours / CartPole): {result['step_cost_ratio_vs_cartpole']:.2f} "
        f"(floor: <= {result['floor_step_cost_ratio']:.1f})"
    )
    llm = result.get("llm")
    if llm:
        for env_id in ("batch_env/LLMBatching-v0", "batch_env/LLMBatching-v1"):
            r = llm[env_id]
            floor = (
                f" (floor: <= {llm['floor_step_cost_ratio']:.1f})" if env_id.endswith("v1") else ""
            )
            print(
                f"{env_id.split('/')[-1]}: {r['steps_per_s']:,.0f} steps/s, step cost ratio "
                f"(ours / CartPole, median of rounds): {r['step_cost_ratio_vs_cartpole']:.2f}{floor}"
            )
    _print_llm_v2(result.get("llm_v2"))
    _print_prefix_caching(result.get("prefix_caching"))
    rn = result.get("render")
    if rn:
        for r in rn["envs"]:
            print(
                f"{r['env_id'].split('/')[-1]} rgb_array frame: {r['frame_us']:,.0f} us vs step "
                f"{r['step_us']:,.1f} us -> ratio {r['frame_cost_ratio_vs_step']:.1f} "
                f"(target: frame < {rn['target_frame_us']:,.0f} us)"
            )
    vec = result.get("vector")
    if vec:
        for r in vec["sizes"]:
            print(
                f"vector env, {r['num_envs']:5d} lanes: {r['env_steps_per_s']:,.0f} env-steps/s vs "
                f"CartPoleVectorEnv {r['cartpole_vector_env_steps_per_s']:,.0f} -> ratio {r['ratio_vs_cartpole']:.3f}"
            )
        if vec["meets_floor_at_1024"] is not None:
            print(
                f"floor {vec['floor_env_steps_per_s_at_1024']:,} env-steps/s at 1024 lanes met: {vec['meets_floor_at_1024']}"
            )
    ov = result.get("torch_executor_overhead")
    if ov:
        fracs = ", ".join(f"b={b}: {r['overhead_frac']:.1%}" for b, r in ov["run"].items())
        print(
            f"real executor overhead outside the model call ({ov['model']}): {fracs} "
            f"(floor: < {ov['floor_overhead_frac_b_ge_8']:.0%} at b >= 8)"
        )
    sm = result.get("smdp")
    if sm:
        print(
            f"SMDP solve, {sm['n_states']} states, B={sm['max_batch_size']}, rho={sm['load']}: "
            f"policy iteration {sm['pi_s']:.3f} s, our RVI {sm['rvi_s']:.2f} s, "
            f"pymdptoolbox RVI {sm['pymdptoolbox_s']:.2f} s -> {sm['speedup_pi_vs_pymdptoolbox']:.0f}x "
            f"(floor: >= {sm['floor_speedup']:.0f}x); same policy: {sm['same_policy']}"
        )
    pp = result.get("ppo")
    if pp:
        print(
            f"PPO training: {pp['dynamic_batching_ppo_steps_per_s']:,.0f} steps/s vs CartPole-v1 "
            f"{pp['cartpole_ppo_steps_per_s']:,.0f} steps/s -> ratio {pp['ratio']:.2f} (floor: >= {pp['floor_ratio']})"
        )
    pv = result.get("ppo_vector")
    if pv:
        print(
            f"PPO training, {pv['num_envs']} lanes: native vector env {pv['native_vector_ppo_steps_per_s']:,.0f} "
            f"steps/s vs DummyVecEnv {pv['dummy_vec_env_ppo_steps_per_s']:,.0f} -> ratio {pv['ratio']:.2f}"
        )
    cb = result.get("compare_backends")
    if cb and "skipped" in cb:
        print(f"compare backends: skipped ({cb['skipped']})")
    elif cb:
        print(
            f"compare, {cb['cells']} cells, Ray / local cells/s: first run {cb['ray_cells_per_s']:.2f} / "
            f"{cb['local_cells_per_s']:.2f} = {cb['ratio_ray_vs_local']:.2f} (with Ray's {cb['ray_startup_s']:.1f} s "
            f"start-up {cb['ratio_ray_with_startup_vs_local']:.2f}), warm {cb['ray_warm_cells_per_s']:.2f} / "
            f"{cb['local_warm_cells_per_s']:.2f} = {cb['ratio_ray_warm_vs_local_warm']:.2f}; "
            f"same results: {cb['same_results']}"
        )
    if "wallclock" in result:
        print(_format_wallclock(result["wallclock"]))


def _format_wallclock(wc: dict[str, Any]) -> str:
    """The wall-clock item in a few lines: medians, then each seed."""

    def num(x: float | None, fmt: str) -> str:
        return "not reached" if x is None else format(x, fmt)

    lines = []
    for part in (wc["task"], wc["cartpole"]):
        lines.append(
            f"wall-clock to a good agent, {part['env_id']} ({part['target']}): median "
            f"{num(part['median_steps'], ',.0f')} steps, {num(part['median_seconds'], '.1f')} s "
            f"training ({num(part['median_seconds_with_eval'], '.1f')} s with evaluations); "
            f"{part['reached']} of {part['runs']} runs reached it"
        )
        for r in part["seeds"]:
            lines.append(
                f"  seed {r['seed']}: "
                + (
                    f"{r['steps']:,} steps, {r['seconds']:.1f} s ({r['seconds_with_eval']:.1f} s with evaluations)"
                    if r["reached"]
                    else f"not reached in {r['steps_trained']:,} steps, best {r['best_figure']:.3f}"
                )
            )
    lines.append(
        f"ratio to CartPole-v1: steps {num(wc['ratio_steps_vs_cartpole'], '.2f')}, "
        f"seconds {num(wc['ratio_seconds_vs_cartpole'], '.2f')}"
    )
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "bench",
        help="env steps/s vs CartPole-v1 in the same process",
        description=cmd_bench.__doc__,
    )
    p.add_argument(
        "--steps", type=count(1), default=200_000, help="steps per timed round (default 200000)"
    )
    p.add_argument(
        "--repeats",
        type=count(1),
        default=5,
        help="timed rounds (default 5); each round runs an env and its reference back to "
        "back, the rates shown are the best round's and each ratio the median of the rounds'",
    )
    p.add_argument("--out", default="results/bench", help="output folder (default results/bench)")
    p.add_argument(
        "--skip-smdp", action="store_true", help="skip the SMDP solver vs pymdptoolbox part"
    )
    p.add_argument("--skip-ppo", action="store_true", help="skip the PPO training speed part")
    p.add_argument(
        "--skip-vector", action="store_true", help="skip the vector env vs CartPoleVectorEnv part"
    )
    p.add_argument(
        "--skip-torch", action="store_true", help="skip the real executor's overhead part"
    )
    p.add_argument(
        "--skip-ray",
        action="store_true",
        help="skip the comparison's local vs Ray backend part (cells/s; skipped anyway without Ray)",
    )
    p.add_argument(
        "--skip-render", action="store_true", help="skip the rgb_array frame cost vs step part"
    )
    p.add_argument(
        "--wallclock",
        action="store_true",
        help="also measure PPO's wall-clock to within 1%% of the SMDP gain on "
        "batch_env/LowLoadEnergy-v0 against CartPole-v1's to a mean return of 475, same "
        "settings (median over seeds, steps and seconds; about 20 minutes on one core, so "
        "not in the default run); also written to wallclock.json",
    )
    p.add_argument(
        "--wallclock-only",
        action="store_true",
        help="run only the --wallclock item and write only wallclock.json",
    )
    p.add_argument(
        "--wallclock-seeds",
        type=count(1),
        default=3,
        help="training seeds of the wall-clock item, 0..N-1 (default 3)",
    )
    p.add_argument(
        "--wallclock-budget",
        type=count(1),
        default=None,
        help="step budget of each wall-clock run (default: the hyperparameter file's n_timesteps, 300000)",
    )
    p.add_argument(
        "--wallclock-eval-freq",
        type=count(1),
        default=10_000,
        help="steps between the wall-clock runs' evaluations (default 10000)",
    )
    p.add_argument(
        "--wallclock-task",
        default=WALLCLOCK_TASK,
        help=f"task of the wall-clock item (default {WALLCLOCK_TASK}); one without an exact "
        "SMDP bound (e.g. batch_env/LLMBurstyLongPrompts-v0) is timed to --wallclock-score",
    )
    p.add_argument(
        "--wallclock-score",
        type=float,
        default=0.5,
        help="normalized score the wall-clock runs must reach on a task without an exact "
        "bound, paired with greedy and the best realizable reference on the evaluation "
        "episodes (default 0.5)",
    )
    p.add_argument(
        "--wallclock-eval-episodes",
        type=count(1),
        default=3,
        help="episodes per evaluation of the wall-clock runs (default 3)",
    )
    p.add_argument(
        "--vector-sizes",
        default="1,64,1024,4096",
        help="num_envs values of the vector part, comma-separated (default 1,64,1024,4096)",
    )
    add_json(p)
    p.set_defaults(func=cmd_bench)
