"""The SMDP solver (``baselines.smdp``) against pymdptoolbox: S = 500 states, B = 64,
rho = 0.6 (resnet50-v100, queue capacity 499), pymdptoolbox's ``RelativeValueIteration``
on the identical Tijms-transformed MDP at the same span tolerance (1e-6 x gain): our
policy iteration (exact), our vectorized RVI at that tolerance, and pymdptoolbox, with
the speed-up of policy iteration over pymdptoolbox (floor 10x) and whether all three
return the same policy."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

from baselines.smdp import SMDPProblem, solve, transformed_mdp


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
