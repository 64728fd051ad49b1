"""The environments, one module per environment (scalar env and, later, its vector twin)."""

from .dynamic_batching import DynamicBatchingEnv

__all__ = ["DynamicBatchingEnv"]
