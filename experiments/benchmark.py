"""The benchmark tasks' protocol and reference figures (``batch-env benchmark``).

:func:`run_protocol` evaluates a policy on a task's protocol: one episode per held-out
seed, the reward rate per second of each (``info["serving"]["reward_rate_per_s"]``), and
their mean with a Student-t 95% confidence interval. :func:`compute_references` runs the
reference policies of each task (random valid actions, greedy, the SMDP policy at the
mean rate, and on the bursty task the phase filter ``smdp-belief``) and solves its bound
(the exact SMDP optimum, or the phase-aware optimum), then writes them to
``batch_env/tasks_references.json``, which :func:`batch_env.tasks.normalized_score` reads.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from scipy.stats import t as student_t

import baselines
import batch_env
from batch_env import tasks

#: the reference policies per task (all tasks: random, greedy, smdp; bursty adds the filter)
REFERENCE_POLICIES = {
    "batch_env/LowLoadEnergy-v0": ("random", "greedy", "smdp"),
    "batch_env/Bursty-v0": ("random", "greedy", "smdp", "smdp-belief"),
}
REFERENCES_PATH = Path(batch_env.__file__).parent / "tasks_references.json"


class RandomValidPolicy:
    """Uniformly random valid actions (from ``info["action_mask"]``), seeded per episode."""

    name = "random"

    def __init__(self, env: gym.Env | None = None, seed: int = 0) -> None:
        self._seed = seed
        self._episode = 0
        self._rng = np.random.default_rng(seed)

    def reset(self) -> None:
        """A new episode: a new, seeded stream."""
        self._rng = np.random.default_rng([self._seed, self._episode])
        self._episode += 1

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """A uniformly random valid action."""
        return int(self._rng.choice(np.flatnonzero(info["action_mask"])))


def _policy(name: str, env: gym.Env) -> Any:
    return RandomValidPolicy(env) if name == "random" else baselines.make(name, env)


def summarize_rates(rates: list[float]) -> dict[str, Any]:
    """Mean, Student-t 95% half-width and the per-seed figures."""
    arr = np.asarray(rates, dtype=np.float64)
    n = arr.size
    half = (
        float(student_t.ppf(0.975, n - 1) * arr.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    )
    return {"reward_rate_per_s": float(arr.mean()), "ci95": half, "per_seed": arr.tolist()}


def run_protocol(
    task_id: str,
    policy: str | Callable[[gym.Env], Any],
    seeds: tuple[int, ...] | None = None,
    horizon_requests: int | None = None,
) -> dict[str, Any]:
    """Evaluate a policy on a task's protocol.

    :param task_id: a task id of :data:`batch_env.tasks.TASKS`.
    :param policy: a baseline name (or ``"random"``), or a factory ``env -> policy``.
    :param seeds: override the held-out seeds (tests use fewer).
    :param horizon_requests: override the episode length (tests use shorter).
    :returns: :func:`summarize_rates`' figures plus ``seeds``, ``horizon_requests`` and
        ``wall_s``.
    """
    task = tasks.get(task_id)
    seeds = task.seeds if seeds is None else tuple(seeds)
    kw: dict[str, Any] = {}
    if horizon_requests is not None:
        kw["horizon_requests"] = horizon_requests
    if policy == "smdp-oracle":
        kw["oracle_info"] = True
    env = gym.make(task.id, **kw)
    t0 = time.perf_counter()
    try:
        pol = _policy(policy, env) if isinstance(policy, str) else policy(env)
        rates = []
        max_steps = env.spec.max_episode_steps if env.spec is not None else None  # the task's net
        for s in seeds:
            res = batch_env.evaluate(pol, env, n_episodes=1, seed=s, max_steps=max_steps)
            rates.append(res.episodes[0]["reward_rate_per_s"])
    finally:
        env.close()
    out = summarize_rates(rates)
    out.update(
        seeds=list(seeds),
        horizon_requests=horizon_requests or task.horizon_requests,
        wall_s=time.perf_counter() - t0,
    )
    return out


def solve_bound(task_id: str) -> dict[str, Any]:
    """The task's bound as a reward rate per second (minus the optimal gain), or ``{}``."""
    from baselines.smdp import SMDPProblem, solve
    from baselines.smdp_mmpp import MMPPProblem, solve_mmpp

    task = tasks.get(task_id)
    env = gym.make(task.id)
    try:
        if task.bound == "smdp":
            sol = solve(SMDPProblem.from_env(env))
            return {
                "bound_reward_rate_per_s": -sol.gain,
                "bound_policy": "smdp",
                "bound_threshold": sol.threshold,
            }
        if task.bound == "smdp-oracle":
            msol = solve_mmpp(MMPPProblem.from_env(env))
            return {
                "bound_reward_rate_per_s": -msol.gain,
                "bound_policy": "smdp-oracle (phase-aware optimum; the phase is hidden from every other policy)",
                "bound_thresholds": msol.thresholds,
            }
    finally:
        env.close()
    return {}


def compute_references(
    task_ids: list[str] | None = None,
    out: Path | str = REFERENCES_PATH,
    progress: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """Run every task's reference policies and bound; write (merge into) ``out``."""
    path = Path(out)
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    for tid in task_ids or list(tasks.TASKS):
        entry: dict[str, Any] = {"policies": {}}
        for name in REFERENCE_POLICIES[tid]:
            entry["policies"][name] = run_protocol(tid, name)
            if progress:
                r = entry["policies"][name]
                progress(
                    f"{tid} {name}: {r['reward_rate_per_s']:.4f} +- {r['ci95']:.4f} per s ({r['wall_s']:.0f} s)"
                )
        entry.update(solve_bound(tid))
        best = max(entry["policies"].items(), key=lambda kv: kv[1]["reward_rate_per_s"])
        entry["best_policy"], entry["best_reward_rate_per_s"] = (
            best[0],
            best[1]["reward_rate_per_s"],
        )
        entry["protocol"] = {
            "seeds": list(tasks.get(tid).seeds),
            "horizon_requests": tasks.get(tid).horizon_requests,
        }
        data[tid] = entry
        path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def policy_factory(spec: str) -> tuple[str, Callable[[gym.Env], Any]]:
    """``(label, env -> policy)`` for a baseline name, ``"random"``, or a trained agent
    ``<algo>:<run_dir>`` (as ``batch-env evaluate --policy`` takes them)."""
    if ":" in spec:
        from agents import load_policy
        from agents.policy import parse_policy_spec

        _, run_dir = parse_policy_spec(spec)
        return spec, lambda env: load_policy(run_dir, name=spec)
    if spec != "random" and spec not in baselines.available():
        raise ValueError(
            f"--policy={spec!r} is unknown: a baseline ({', '.join(baselines.available())}), "
            "'random', or a trained agent <algo>:<run_dir>"
        )
    return spec, lambda env: _policy(spec, env)


def run_benchmark(
    policy: str, task_ids: list[str] | None = None, horizon_requests: int | None = None
) -> list[dict[str, Any]]:
    """The protocol of each task for one policy, with its normalized score (None where
    the task has no stored references). ``horizon_requests`` shortens the episodes (the
    rows then say they are not the protocol)."""
    label, factory = policy_factory(policy)
    rows = []
    for tid in task_ids or list(tasks.TASKS):
        tasks.get(tid)
        res = run_protocol(tid, factory, horizon_requests=horizon_requests)
        try:
            score: float | None = tasks.normalized_score(tid, res["reward_rate_per_s"])
        except ValueError:
            score = None
        rows.append(
            {
                "task": tid,
                "policy": label,
                **res,
                "normalized_score": score,
                "protocol": horizon_requests is None,
            }
        )
    return rows


def format_benchmark(rows: list[dict[str, Any]]) -> str:
    """A markdown table of :func:`run_benchmark`'s rows."""
    lines = [
        "| task | policy | reward rate per s (95% CI) | normalized score | episodes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        score = (
            "n/a (no references)"
            if r["normalized_score"] is None
            else f"{r['normalized_score']:.3f}"
        )
        eps = f"{len(r['seeds'])} x {r['horizon_requests']:,} requests"
        if not r["protocol"]:
            eps += " (shortened: not the protocol)"
        lines.append(
            f"| {r['task']} | {r['policy']} | {r['reward_rate_per_s']:.3f} +- {r['ci95']:.3f} | {score} | {eps} |"
        )
    return "\n".join(lines)
