"""The environments: graph-level (``DynamicBatching-v0``, with its NumPy vector twin),
node-level (``NodeBatching-v0``) and iteration-level LLM batching (``LLMBatching-v0``).

- :mod:`.dynamic_batching`: :class:`DynamicBatchingEnv`;
- :mod:`.dynamic_batching_vector`: :class:`DynamicBatchingVectorEnv` (``gymnasium.make_vec``);
- :mod:`.node_batching`: :class:`NodeBatchingEnv`;
- :mod:`.features`: :class:`ObsFeature`, what each entry of an observation is (every
  env's ``observation_features``);
- :mod:`.llm_batching`: :class:`LLMBatchingEnv`, :class:`LLMBatchingV1Env` (chunked) and
  :class:`LLMBatchingV2Env` (v1 with decision epochs only where the actions differ):
  the MDP (spaces, epochs, reward, observation, SLA bookkeeping, summary) over the LLM
  server of :mod:`batch_env.llm` (its state and its schedulers);
- :mod:`.llm_routing`: :class:`LLMRoutingEnv` (``LLMRouting-v0``): which replica of a
  cluster of LLM servers (:class:`batch_env.llm.cluster.LLMCluster`) takes each request.

Imports: the core of ``batch_env`` (``core``, ``config``, ``checks``, ``metrics``,
``render``, ``seeding``, ``executor``, ``workload``, ``profiles``, ``llm``); never ``batch_env.real``
at module level (the executor imports it when real execution is asked for). The core
never imports ``envs``.
"""

from .dynamic_batching import DynamicBatchingEnv
from .dynamic_batching_vector import DynamicBatchingVectorEnv
from .features import ObsFeature
from .llm_batching import LLMBatchingEnv, LLMBatchingV1Env, LLMBatchingV2Env
from .llm_routing import LLMRoutingEnv
from .node_batching import NodeBatchingEnv

__all__ = [
    "DynamicBatchingEnv",
    "DynamicBatchingVectorEnv",
    "LLMBatchingEnv",
    "LLMBatchingV1Env",
    "LLMBatchingV2Env",
    "LLMRoutingEnv",
    "NodeBatchingEnv",
    "ObsFeature",
]
