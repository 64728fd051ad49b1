"""The LLM envs' speed: ``LLMBatching-v0`` and ``LLMBatching-v1`` (chunked prefill) steps/s
against CartPole-v1's (:func:`bench_llm_steps`), and ``LLMBatching-v2`` against v1 on the
same episodes, steps and CPU per completed request, at v1's defaults and on
``LLMMemoryPressure-v0``'s problem (:func:`bench_llm_v2`; floors 10x fewer steps, 5x
less CPU)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import gymnasium as gym

from batch_env.tasks import TASKS

from .common import median_ratio, rounds, time_cartpole, time_discrete


def _time_llm(env_id: str, n_steps: int, seed: int, env_kwargs: dict[str, Any]) -> float:
    """Steps/s of an LLM env through ``gymnasium.make``, uniformly random caps (actions
    drawn before timing), episodes reset as they end (:func:`time_discrete`)."""
    return time_discrete(env_id, n_steps, seed, env_kwargs)


#: the LLM step-cost bench's setting: the default A100 profile, Poisson at 4 requests/s
#: with the default lengths (the Azure conversation trace's fit)
LLM_BENCH_KWARGS: dict[str, Any] = {"workload": {"kind": "poisson", "rate_per_s": 4.0}}


def bench_llm_steps(n_steps: int = 50_000, repeats: int = 3, seed: int = 0) -> dict[str, Any]:
    """LLMBatching-v0 (vLLM v0's scheduler) and LLMBatching-v1 (chunked prefill, default
    budget) steps/s against CartPole-v1's in the same rounds (:func:`rounds`; the best
    round's rates), and their step-cost ratios, the median of the rounds' (issue 23's
    floor for the chunked scheduler: 2)."""
    ids = ("batch_env/LLMBatching-v0", "batch_env/LLMBatching-v1")
    timers: dict[str, Callable[[], float]] = {"cart": lambda: time_cartpole(n_steps, seed)}
    for env_id in ids:
        timers[env_id] = partial(_time_llm, env_id, n_steps, seed, LLM_BENCH_KWARGS)
    r = rounds(timers, repeats)
    out: dict[str, Any] = {
        "cartpole_steps_per_s": max(r["cart"]),
        "n_steps": n_steps,
        "repeats": repeats,
    }
    for env_id in ids:
        out[env_id] = {
            "steps_per_s": max(r[env_id]),
            "step_cost_ratio_vs_cartpole": median_ratio(r["cart"], r[env_id]),
            "round_ratios": [a / b for a, b in zip(r["cart"], r[env_id], strict=True)],
        }
    out["env_kwargs"] = LLM_BENCH_KWARGS
    out["floor_step_cost_ratio"] = 2.0
    return out


def llm_episode_cost(env_id: str, env_kwargs: dict[str, Any], seed: int) -> dict[str, float]:
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
    (:func:`rounds`). Steps per completed request are the same in every round; the CPU
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
            r = llm_episode_cost(env_id, kw, seed)
            runs[env_id].append(r)
            return r["completed"] / r["cpu_s"]  # completed requests per CPU second

        rates = rounds({v1: lambda: timer(v1), v2: lambda: timer(v2)}, repeats)
        row: dict[str, Any] = {"env_kwargs": kw}
        for env_id in (v1, v2):
            best = min(runs[env_id], key=lambda r: r["cpu_s"])
            row[env_id] = {
                "steps_per_request": best["steps"] / best["completed"],
                "cpu_us_per_request": 1e6 * best["cpu_s"] / best["completed"],
                "completed": best["completed"],
            }
        row["steps_ratio"] = row[v1]["steps_per_request"] / row[v2]["steps_per_request"]
        row["cpu_ratio"] = median_ratio(rates[v2], rates[v1])
        row["round_cpu_ratios"] = [a / b for a, b in zip(rates[v2], rates[v1], strict=True)]
        row["meets_floors"] = (
            row["steps_ratio"] >= out["floor_steps_ratio"]
            and row["cpu_ratio"] >= out["floor_cpu_ratio"]
        )
        out["settings"][name] = row
    return out


def print_llm_v2(v2: dict[str, Any] | None) -> None:
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
