"""Batching policies that act through the same env interface as agents.

Every policy has ``reset()`` and ``act(obs, info) -> action`` and is built with
:func:`make`. A policy may read the env's configuration at construction (profile,
workload, weights, ticks); while acting it reads only ``obs`` and ``info``.

One module per family: ``heuristics`` (greedy, static), ``timeouts`` (Triton's dynamic
batcher, TF-Serving), ``aimd`` (Clipper), ``smdp`` (the SMDP-optimal policy and its
rate-adaptive variant), ``smdp_mmpp`` (the phase-aware optimum under MMPP arrivals,
an oracle and a bound), ``rollout`` (constant actions, and the lookahead planners ``rollout`` and its
clairvoyant twin ``rollout-oracle``, which plan on copies of the env), ``node`` (graph
batching and LazyBatching for
``NodeBatching-v0``), ``llm`` (static caps and Pang et al.'s memory-aware and
SLA-feedback batch sizing for ``LLMBatching-v0``; token budgets for the chunked
scheduler; admission orders for ``LLMBatching-v2``, with the oracle ``oracle-srpt``);
shared pieces in ``common``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from batch_env.evaluate import Policy

from .aimd import AIMDPolicy
from .heuristics import GreedyPolicy, StaticPolicy
from .llm import (
    ClassPriorityPolicy,
    ClockQueuePolicy,
    EDFPolicy,
    LLMGreedyPolicy,
    MemoryAwarePolicy,
    OracleSRPTPolicy,
    Pang2025Policy,
    SarathiBudgetPolicy,
    ShortestPromptPolicy,
    SLAFeedbackPolicy,
    StaticBudgetPolicy,
    StaticCapPolicy,
)
from .node import GraphBatchingPolicy, LazyBatchingPolicy
from .rollout import ConstantPolicy, RolloutPolicy, rollout_oracle
from .smdp import AdaptiveSMDPPolicy, SMDPPolicy
from .smdp_mmpp import MMPPBeliefPolicy, MMPPOraclePolicy
from .timeouts import TFServingPolicy, TritonTimeoutPolicy


def _greedy(env: gym.Env | None = None, **params: Any) -> Policy:
    """``greedy``: serve as much as fits at every decision. On DynamicBatching and
    NodeBatching :class:`GreedyPolicy` (``min(queue, max_batch_size)``); on an LLM env
    :class:`LLMGreedyPolicy`, vLLM's defaults (the largest cap and token budget, first
    come first served), the benchmark's ``greedy`` reference on the LLM tasks."""
    if env is not None and hasattr(getattr(env, "unwrapped", env), "action_parts"):
        return LLMGreedyPolicy(env=env, **params)
    return GreedyPolicy(env=env, **params)


_REGISTRY: dict[str, Callable[..., Any]] = {
    "greedy": _greedy,
    "static": StaticPolicy,
    "timeout": TritonTimeoutPolicy,
    "tfserving": TFServingPolicy,
    "aimd": AIMDPolicy,
    "smdp": SMDPPolicy,
    "smdp-adaptive": AdaptiveSMDPPolicy,
    "smdp-oracle": MMPPOraclePolicy,
    "smdp-belief": MMPPBeliefPolicy,
    "graph": GraphBatchingPolicy,
    "lazy": LazyBatchingPolicy,
    "static-cap": StaticCapPolicy,
    "memory-aware": MemoryAwarePolicy,
    "sla-feedback": SLAFeedbackPolicy,
    "pang2025": Pang2025Policy,
    "static-budget": StaticBudgetPolicy,
    "clock-queue": ClockQueuePolicy,
    "sarathi": SarathiBudgetPolicy,
    "edf": EDFPolicy,
    "shortest-prompt": ShortestPromptPolicy,
    "class-priority": ClassPriorityPolicy,
    "oracle-srpt": OracleSRPTPolicy,
    "constant": ConstantPolicy,
    "rollout": RolloutPolicy,
    "rollout-oracle": rollout_oracle,
}


def available() -> list[str]:
    """Names accepted by :func:`make`."""
    return list(_REGISTRY)


def make(name: str, env: gym.Env | None = None, **params: Any) -> Policy:
    """Build the policy ``name`` for ``env``.

    :param name: one of :func:`available`.
    :param env: the env the policy will act in (wrappers are looked through).
    :param params: the policy's own parameters (see each class).
    """
    if name not in _REGISTRY:
        raise ValueError(f"policy name={name!r} is unknown: available policies are {available()}")
    return _REGISTRY[name](env=env, **params)


__all__ = [
    "AIMDPolicy",
    "AdaptiveSMDPPolicy",
    "ClassPriorityPolicy",
    "ClockQueuePolicy",
    "ConstantPolicy",
    "EDFPolicy",
    "GraphBatchingPolicy",
    "GreedyPolicy",
    "LLMGreedyPolicy",
    "LazyBatchingPolicy",
    "MMPPBeliefPolicy",
    "MMPPOraclePolicy",
    "MemoryAwarePolicy",
    "OracleSRPTPolicy",
    "Pang2025Policy",
    "RolloutPolicy",
    "SLAFeedbackPolicy",
    "StaticCapPolicy",
    "SMDPPolicy",
    "ShortestPromptPolicy",
    "StaticPolicy",
    "TFServingPolicy",
    "TritonTimeoutPolicy",
    "available",
    "make",
]
