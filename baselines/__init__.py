"""Batching policies that act through the same env interface as agents.

Every policy has ``reset()`` and ``act(obs, info) -> action`` and is built with
:func:`make`. A policy may read the env's configuration at construction (profile,
workload, weights, ticks); while acting it reads only ``obs`` and ``info``.

One module per family: ``heuristics`` (greedy, static), ``timeouts`` (Triton's dynamic
batcher, TF-Serving), ``aimd`` (Clipper), ``smdp`` (the SMDP-optimal policy and its
rate-adaptive variant), ``smdp_mmpp`` (the phase-aware optimum under MMPP arrivals,
an oracle and a bound), ``mmpp_fit`` (the phase-aware policy on an MMPP it fits from what it observes), ``rollout`` (constant actions, and the lookahead planners ``rollout`` and its
clairvoyant twin ``rollout-oracle``, which plan on copies of the env), ``node`` (graph
batching and LazyBatching for
``NodeBatching-v0``), ``llm`` (static caps and Pang et al.'s memory-aware and
SLA-feedback batch sizing for ``LLMBatching-v0``; token budgets for the chunked
scheduler; admission orders for ``LLMBatching-v2``, with the oracle ``oracle-srpt``),
``routers`` (which replica takes each request on ``LLMRouting-v0``: vidur's, SGLang's,
Dynamo's, llm-d's and LVS's rules); shared pieces in ``common``.
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
    LongestPrefixPolicy,
    MemoryAwarePolicy,
    OracleSRPTPolicy,
    Pang2025Policy,
    SarathiBudgetPolicy,
    ShortestPromptPolicy,
    SLAFeedbackPolicy,
    StaticBudgetPolicy,
    StaticCapPolicy,
    VLLMPrefixCachingPolicy,
)
from .mmpp_fit import MMPPFittedBeliefPolicy
from .node import GraphBatchingPolicy, LazyBatchingPolicy
from .rollout import ConstantPolicy, RolloutPolicy, rollout_oracle
from .routers import ROUTERS
from .smdp import AdaptiveSMDPPolicy, SMDPPolicy
from .smdp_mmpp import MMPPBeliefPolicy, MMPPOraclePolicy
from .timeouts import TFServingPolicy, TritonTimeoutPolicy


def _greedy(env: gym.Env | None = None, **params: Any) -> Policy:
    """``greedy``: serve as much as fits at every decision. On DynamicBatching and
    NodeBatching :class:`GreedyPolicy` (``min(queue, max_batch_size)``); on an LLM env
    :class:`LLMGreedyPolicy`, vLLM's defaults (the largest cap and token budget, first
    come first served), the benchmark's ``greedy`` reference on the LLM tasks; on
    ``LLMRouting-v0`` round robin, the default router of vidur (and of a plain load
    balancer)."""
    if env is not None and hasattr(getattr(env, "unwrapped", env), "action_parts"):
        return LLMGreedyPolicy(env=env, **params)
    if env is not None and hasattr(getattr(env, "unwrapped", env), "cluster"):
        return ROUTERS["round-robin"](env=env, **params)
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
    "smdp-belief-fit": MMPPFittedBeliefPolicy,
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
    "vllm-apc": VLLMPrefixCachingPolicy,
    "sglang-lpm": LongestPrefixPolicy,
    "constant": ConstantPolicy,
    "rollout": RolloutPolicy,
    "rollout-oracle": rollout_oracle,
    **ROUTERS,
}


def available() -> list[str]:
    """Names accepted by :func:`make`."""
    return list(_REGISTRY)


def _task_id(env: gym.Env | None) -> str | None:
    """The benchmark task ``env`` was made as (``env.unwrapped.task``), or ``None``."""
    return getattr(getattr(env, "unwrapped", env), "task", None)


def _check_name(name: str) -> None:
    """``ValueError`` for a name that is no baseline, with the closest names."""
    if name in _REGISTRY:
        return
    import difflib

    close = difflib.get_close_matches(name, available(), n=2)
    hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
    raise ValueError(f"policy name={name!r} is unknown: {hint}available policies are {available()}")


def task_settings(name: str, env: gym.Env | str | None) -> tuple[dict[str, Any], str] | None:
    """The settings of the baseline ``name`` among the stored reference figures of a
    benchmark task (:func:`batch_env.tasks.references`), as ``(params, label)``, or
    ``None`` (no env, not a task, or no realizable reference of the task runs this
    baseline: an oracle's runs on another env). The
    reference labelled ``name`` where there is one (``clock-queue`` on the clock tasks:
    its tuned thresholds and clocks), else the best-scoring reference that runs it
    (``static-budget`` on LLMClockBursts-v0: ``clock-best``, the best constant clock and
    budget; ``timeout`` on Trace-v0: ``triton-best``).

    :param name: a baseline name.
    :param env: the task's env (``env.unwrapped.task`` names the task) or the task's id.
    """
    task_id = env if isinstance(env, str) else _task_id(env)
    if not task_id:
        return None
    from batch_env.tasks import references

    figures = references().get(task_id, {}).get("policies", {})
    # an oracle's reference runs on another env than the task's (its own orders, what it
    # sees): not a setting for the task's env
    runs = {
        label: fig
        for label, fig in figures.items()
        if fig.get("policy") == name and not fig.get("oracle")
    }
    if not runs:
        return None
    label = name if name in runs else max(runs, key=lambda lb: float(runs[lb]["reward_rate_per_s"]))
    return dict(runs[label].get("params", {})), label


def make(
    name: str, env: gym.Env | None = None, *, task_defaults: bool = True, **params: Any
) -> Policy:
    """Build the policy ``name`` for ``env``.

    On a benchmark task's env (``gymnasium.make("batch_env/LLMClockBursts-v0")``), a
    baseline made with no parameters takes the task's stored reference settings for it
    (:func:`task_settings`), so that it is the tuned policy the task's reference table
    shows and not the baseline's generic defaults; parameters given replace them all
    (the baseline's own defaults fill the rest). The policy's ``settings`` attribute
    says what it runs with: ``{"params": {...}, "source": "..."}`` (``source``: the
    stored reference of the task, given, or the baseline's defaults).

    :param name: one of :func:`available`.
    :param env: the env the policy will act in (wrappers are looked through).
    :param task_defaults: on a task's env with no ``params``, take the task's stored
        settings (``False``: the baseline's own defaults).
    :param params: the policy's own parameters (see each class).
    """
    _check_name(name)
    source = "given; the rest the baseline's defaults" if params else "the baseline's defaults"
    found = task_settings(name, env) if task_defaults and not params else None
    if found is not None and found[0]:
        params = found[0]
        source = f"the stored reference {found[1]!r} of {_task_id(env)}"
    try:
        policy = _REGISTRY[name](env=env, **params)
    except TypeError as exc:  # an unknown or missing setting: name it, and what it takes
        if "keyword argument" not in str(exc):
            raise
        raise ValueError(
            f"policy {name!r} with settings {params!r}: {exc}; its settings are "
            f"{_setting_names(name) or 'none'}"
        ) from None
    try:
        policy.settings = {"params": dict(params), "source": source}
    except AttributeError:  # a policy without instance attributes says nothing
        pass
    return policy


def _setting_names(name: str) -> list[str]:
    """The keyword settings the baseline ``name`` takes (its constructor's, ``env`` aside)."""
    import inspect

    factory = _REGISTRY[name]
    if name == "greedy":
        factory = GreedyPolicy
    elif name == "rollout-oracle":
        factory = RolloutPolicy
    params = inspect.signature(factory).parameters
    return [p for p in params if p not in ("env", "params", "clairvoyant")]


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``(name, params)`` of a baseline written as ``name`` or ``name:key=value,...``,
    the form ``batch-env evaluate --policy`` and ``batch-env benchmark --policy`` take
    (``clock-queue:low_clock=990,threshold=4``; values are YAML scalars or flow
    sequences: ``static:sizes=[4,8]``). ``ValueError`` naming the spec and what is
    allowed for an unknown name or a malformed setting."""
    import yaml

    name, _, rest = spec.partition(":")
    name = name.strip()
    _check_name(name)
    params: dict[str, Any] = {}
    for item in _split_top(rest) if rest.strip() else []:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise ValueError(
                f"policy {spec!r}: setting {item.strip()!r} is not key=value (the form is "
                f"{name}:key=value,key=value)"
            )
        try:
            params[key] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            raise ValueError(
                f"policy {spec!r}: {key}={value!r} is not a value (a number, a word or a "
                "list such as [4,8])"
            ) from None
        if params[key] is None:
            raise ValueError(f"policy {spec!r}: {key} has no value (the form is {key}=<value>)")
    return name, params


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets (``a=1,b=[2,3]``: two items)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [it for it in items if it.strip()]


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
    "LongestPrefixPolicy",
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
    "VLLMPrefixCachingPolicy",
    "available",
    "make",
    "parse_spec",
    "task_settings",
]
