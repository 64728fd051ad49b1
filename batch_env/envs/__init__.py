"""The environments: graph-level (``DynamicBatching-v0``), node-level (``NodeBatching-v0``)
and iteration-level LLM batching (``LLMBatching-v0``)."""

from .dynamic_batching import DynamicBatchingEnv, DynamicBatchingVectorEnv
from .llm_batching import LLMBatchingEnv
from .node_batching import NodeBatchingEnv

__all__ = ["DynamicBatchingEnv", "DynamicBatchingVectorEnv", "LLMBatchingEnv", "NodeBatchingEnv"]
