"""The environments: graph-level (``DynamicBatching-v0``) and node-level (``NodeBatching-v0``)."""

from .dynamic_batching import DynamicBatchingEnv
from .node_batching import NodeBatchingEnv

__all__ = ["DynamicBatchingEnv", "NodeBatchingEnv"]
