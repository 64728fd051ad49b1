"""Named benchmark tasks: fixed settings, a fixed evaluation protocol, reference scores.

Each task is a registered Gymnasium id (one id per task, versioned, its kwargs fixed in
the registration: ``gymnasium.make("batch_env/Bursty-v0")``), with a protocol (held-out
seeds, episodes, episode length; the reported figure is the mean reward rate per second
with its 95% confidence interval) and reference figures computed by the project
(``batch-env benchmark --references``, stored in ``tasks_references.json`` beside this
module). :func:`normalized_score` maps a reward rate to 0 at greedy and 1 at the bound
(the exact optimum where one exists; otherwise the best known policy, and the reference
says so). ``docs/benchmark.md`` says what makes each task hard and how its bound is
obtained.

This module imports nothing beyond :mod:`batch_env`'s own leaves: the bounds are solved
by :mod:`baselines` and stored with the references, not computed here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any

__all__ = ["TASKS", "Task", "get", "normalized_score", "references"]

#: Max throughput of the tasks' profile (resnet50-v100) at B = 32, requests per second:
#: 32 / latency(32); the tasks' rates are fractions of it (tests check the figure).
RESNET50_V100_MAX_TPUT_B32 = 5023.796561604585


@dataclass(frozen=True)
class Task:
    """A named benchmark task.

    :param id: the registered Gymnasium id.
    :param base: the env id it configures.
    :param kwargs: the env's keyword arguments, fixed (read-only).
    :param summary: one line: what it is.
    :param hard: what makes it hard.
    :param bound: how the bound is obtained (``"smdp"``: the exact SMDP optimum;
        ``"smdp-oracle"``: the phase-aware optimum, a bound for every phase-blind
        policy; ``None``: no bound, the best known policy is the reference).
    :param seeds: the held-out evaluation seeds (one episode each).
    """

    id: str
    base: str
    kwargs: Mapping[str, Any]
    summary: str
    hard: str
    bound: str | None
    seeds: tuple[int, ...] = field(default_factory=lambda: tuple(range(1000, 1010)))

    @property
    def episodes(self) -> int:
        """Evaluation episodes (one per held-out seed)."""
        return len(self.seeds)

    @property
    def horizon_requests(self) -> int:
        """Summary requests per evaluation episode."""
        return int(self.kwargs["horizon_requests"])


def _frozen(d: dict[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(d)


_MU = RESNET50_V100_MAX_TPUT_B32

TASKS: dict[str, Task] = {
    t.id: t
    for t in (
        Task(
            id="batch_env/LowLoadEnergy-v0",
            base="batch_env/DynamicBatching-v0",
            kwargs=_frozen(
                {
                    "profile": "resnet50-v100",
                    "max_batch_size": 32,
                    "workload": {"kind": "poisson", "load": 0.1},
                    "reward_weights": {"latency": 1.0, "energy": 2.0, "sla": 0.0, "drop": 1.0},
                    "queue_capacity": 500,
                    "horizon_requests": 20_000,
                }
            ),
            summary="ResNet-50/V100 at 10% load with an energy weight of 2 per joule.",
            hard=(
                "Serving each request at once (greedy) wastes energy on small batches: the "
                "optimum waits for about 8 requests and costs 27% less. A learner must learn "
                "to wait while the queue looks idle."
            ),
            bound="smdp",
        ),
        Task(
            id="batch_env/Bursty-v0",
            base="batch_env/DynamicBatching-v0",
            kwargs=_frozen(
                {
                    "profile": "resnet50-v100",
                    "max_batch_size": 32,
                    "workload": {
                        "kind": "mmpp",
                        "rates_per_s": [0.005 * _MU, 0.3 * _MU],
                        "switch_rates_per_s": [1.0, 1.0],
                    },
                    "reward_weights": {"latency": 1.0, "energy": 0.5, "sla": 0.0, "drop": 1.0},
                    "idle_power_w": 0.0,
                    "queue_capacity": 300,
                    "horizon_requests": 3_000_000,
                }
            ),
            summary=(
                "ResNet-50/V100 under two-phase MMPP traffic: 25 and 1,507 requests/s, 1 s "
                "mean dwell in each phase."
            ),
            hard=(
                "The best batching differs by phase (wait for about 2 requests when quiet, 10 "
                "when busy), and the phase is hidden: knowing it is worth 4.6% over the best "
                "single control limit, and greedy costs 38% more than the phase-aware optimum."
            ),
            bound="smdp-oracle",
            seeds=tuple(range(1000, 1010)),
        ),
    )
}


def get(task_id: str) -> Task:
    """The task named ``task_id``; ``ValueError`` listing the tasks otherwise."""
    try:
        return TASKS[task_id]
    except KeyError:
        raise ValueError(f"task={task_id!r} is unknown: the tasks are {sorted(TASKS)}") from None


def references() -> dict[str, dict[str, Any]]:
    """The stored reference figures per task id (``tasks_references.json``): for each
    policy, the mean reward rate per second with its 95% CI and the per-seed rates, and
    the bound (``bound_reward_rate_per_s``) where the task has one."""
    text = resources.files("batch_env").joinpath("tasks_references.json").read_text()
    data: dict[str, dict[str, Any]] = json.loads(text)
    return data


def normalized_score(task: str | Task, reward_rate_per_s: float) -> float:
    """``(r - r_greedy) / (r_bound - r_greedy)``: 0 at greedy's stored reward rate, 1 at
    the bound's (reward rates are negative costs, so higher is better).

    :param task: a task or its id.
    :param reward_rate_per_s: the policy's mean reward rate per second on the task's
        protocol.
    :raises ValueError: for an unknown task, a task without stored references, or a
        reward rate that is not a finite number.
    """
    t = get(task) if isinstance(task, str) else task
    ref = references().get(t.id)
    if ref is None:
        raise ValueError(
            f"task {t.id!r} has no stored references: run `batch-env benchmark --references`"
        )
    r = float(reward_rate_per_s)
    if not math.isfinite(r):
        raise ValueError(
            f"reward_rate_per_s={reward_rate_per_s!r} is invalid: expected a finite number"
        )
    top = ref.get("bound_reward_rate_per_s", ref["best_reward_rate_per_s"])
    low = ref["policies"]["greedy"]["reward_rate_per_s"]
    return (r - low) / (top - low)
