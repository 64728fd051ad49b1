"""batch-env: dynamic batching for ML inference serving as Gymnasium environments.

Importing the package registers the environment ids (idempotently)::

    import gymnasium as gym
    import batch_env  # noqa: F401

    env = gym.make("batch_env/DynamicBatching-v0", profile="resnet50-v100",
                   workload={"kind": "poisson", "load": 0.6})

Nothing here imports torch.
"""

from __future__ import annotations

import warnings

from gymnasium.envs.registration import register, registry

# LLMBatching-v0 is vLLM v0's prefill-first scheduler, kept beside v1's chunked one as a
# model of its own (docs/decisions.md, "Chunked prefill: LLMBatching-v1"), not an outdated
# version; v1 is the same model as v2, asked at every iteration (v2 asks only where the
# actions differ), and the tasks and results built on it stay. Gymnasium's "is out of date,
# consider upgrading" notice on every make of them would say otherwise, so it is silenced
# for those two ids alone.
warnings.filterwarnings(
    "ignore",
    message=r".*batch_env/LLMBatching-v[01] is out of date.*",
    category=DeprecationWarning,
)

__version__ = "0.1.0"

#: Safety net only: episodes end on a budget of work (docs/design.md: Episodes).
MAX_EPISODE_STEPS = 1_000_000

ENV_IDS: tuple[str, ...] = (
    "batch_env/DynamicBatching-v0",
    "batch_env/NodeBatching-v0",
    "batch_env/LLMBatching-v0",
    "batch_env/LLMBatching-v1",
    "batch_env/LLMBatching-v2",
    "batch_env/LLMRouting-v0",
)

_ENTRY_POINTS = {
    "batch_env/DynamicBatching-v0": "batch_env.envs.dynamic_batching:DynamicBatchingEnv",
    "batch_env/NodeBatching-v0": "batch_env.envs.node_batching:NodeBatchingEnv",
    "batch_env/LLMBatching-v0": "batch_env.envs.llm_batching:LLMBatchingEnv",
    "batch_env/LLMBatching-v1": "batch_env.envs.llm_batching:LLMBatchingV1Env",
    "batch_env/LLMBatching-v2": "batch_env.envs.llm_batching:LLMBatchingV2Env",
    "batch_env/LLMRouting-v0": "batch_env.envs.llm_routing:LLMRoutingEnv",
}


#: NumPy-native vector twins (``gymnasium.make_vec`` uses them by default).
_VECTOR_ENTRY_POINTS = {
    "batch_env/DynamicBatching-v0": "batch_env.envs.dynamic_batching_vector:DynamicBatchingVectorEnv",
}


def register_envs() -> None:
    """Register every ``batch_env/`` id with Gymnasium (idempotent)."""
    for env_id, entry_point in _ENTRY_POINTS.items():
        if env_id not in registry:
            register(
                id=env_id,
                entry_point=entry_point,
                vector_entry_point=_VECTOR_ENTRY_POINTS.get(env_id),
                max_episode_steps=MAX_EPISODE_STEPS,
            )


register_envs()


def register_tasks() -> None:
    """Register every named benchmark task (:mod:`batch_env.tasks`) as its own id (idempotent)."""
    import copy

    from .tasks import TASKS

    for task in TASKS.values():
        if task.id not in registry:
            register(
                id=task.id,
                entry_point=_ENTRY_POINTS[task.base],
                # task=<id>: the env refuses any kwarg that would change the task's
                # problem (batch_env.tasks.check_task_kwargs)
                kwargs={**copy.deepcopy(dict(task.kwargs)), "task": task.id},
                # a safety net as for the base ids, scaled for tasks with long episodes
                max_episode_steps=max(MAX_EPISODE_STEPS, task.safety_steps),
            )


register_tasks()

from . import llm_profile, profile  # noqa: E402, F401 (the loaders' first names, see profiles/)
from .envs import (  # noqa: E402
    DynamicBatchingEnv,
    DynamicBatchingVectorEnv,
    LLMBatchingEnv,
    LLMBatchingV1Env,
    LLMBatchingV2Env,
    NodeBatchingEnv,
)
from .evaluate import (  # noqa: E402
    EpisodeCut,
    EvaluationResult,
    SeedWarning,
    evaluate,
    paired_difference,
)

__all__ = [
    "ENV_IDS",
    "DynamicBatchingEnv",
    "DynamicBatchingVectorEnv",
    "LLMBatchingEnv",
    "LLMBatchingV1Env",
    "LLMBatchingV2Env",
    "NodeBatchingEnv",
    "EpisodeCut",
    "SeedWarning",
    "EvaluationResult",
    "evaluate",
    "paired_difference",
    "register_envs",
    "register_tasks",
]
