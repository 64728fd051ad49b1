"""The LLM server that the LLM envs drive: the engine, its state and its iteration schedulers.

- :mod:`.server`: :class:`LLMServer`, one simulated LLM server usable without an env:
  built from a configuration, a profile, a workload and an executor, it admits requests,
  runs iterations through its scheduler to the next decision point, and keeps the KV
  cache, the SLA books and the summary's counters;
- :mod:`.state`: :class:`~batch_env.llm.state.LLMServerState`, the requests and queues
  between iterations, with names a reader understands;
- :mod:`.kv_cache`: :class:`KVCache`, the paged KV cache, the only writer of block state;
  :mod:`.prefix_cache`: :class:`PrefixKVCache`, the same with automatic prefix caching;
  :mod:`.prefixes`: the requests' prefix units and the cache's counters;
- :mod:`.scheduler`: the one written interface every scheduler implements
  (:class:`Scheduler`: ``plan`` the next iteration without changing anything, ``start``
  it, then ``apply`` the executor's result), the records it exchanges (:class:`Plan`,
  :class:`Work`, :class:`Outcome`, :class:`Iteration`) and :func:`execute`, which runs a
  work on an executor; :mod:`.registry`, the registry that chooses a scheduler
  by name (:func:`make_scheduler`, :data:`SCHEDULERS`);
- :mod:`.intake`: the request intake (lengths, classes, prefix hashes, rejected prompts);
  :mod:`.clock`: the SM clock; :mod:`.epochs`: ``LLMBatching-v2``'s decision epochs;
  :mod:`.decode_runs`: the decode-only stretches in one loop; :mod:`.views`: what the
  observation and frames read of a server;
- :mod:`.cluster`: :class:`LLMCluster`, ``N`` replicas (:class:`Replica`, a server whose
  arrivals are routed to it) behind a router on one clock, usable without an env;
- :mod:`.sla`: :class:`SLABooks`, the TTFT and TPOT misses per request class (the
  reward's SLA term and the summary's first tokens);
- :mod:`.vllm_v0`: ``"vllm-v0"``, vLLM v0's default scheduler (an iteration is a prefill of
  whole prompts or one decode step of every running request);
- :mod:`.chunked`: ``"chunked"``, vLLM v1's / Sarathi-Serve's chunked prefill (decodes
  first, then prompt chunks filling the token budget, in one mixed iteration);
- :mod:`.actions`: :class:`ActionCodec`, the LLM envs' action encoding (cap, token
  budget, admission order), and :class:`LLMAction`, an action's parts.

The envs (:mod:`batch_env.envs.llm_batching`) are thin MDPs over a server: spaces,
decision epochs, reward, observation, info, reset, step, render. A scheduler changes only
the server state (its KV cache through the cache's operations); the server, as an engine
core, runs the executor between ``start`` and ``apply`` and then moves the clock,
records first tokens and frees the completed requests. No scheduler calls the server.

Imports: the schedulers, ``batch_env.executor`` (the
:class:`~batch_env.executor.LLMExecutor` Protocol) and nothing else of ``batch_env``; the
server also the loop (``batch_env.core``), ``batch_env.config``, ``batch_env.metrics``,
``batch_env.profiles`` and ``batch_env.workload``; the cluster also ``batch_env.planning``
(its realizable copies); never ``batch_env.envs`` (the envs
import this).
"""

from __future__ import annotations

from .actions import ActionCodec, LLMAction
from .chunked import ChunkedScheduler
from .cluster import LLMCluster, Replica
from .kv_cache import KVCache
from .prefix_cache import PrefixKVCache
from .registry import SCHEDULERS, make_scheduler
from .scheduler import Iteration, Outcome, Plan, Scheduler, Work, execute
from .server import LLMServer
from .sla import SLABooks
from .state import LLMServerState
from .vllm_v0 import VLLMV0Scheduler

__all__ = [
    "SCHEDULERS",
    "ActionCodec",
    "ChunkedScheduler",
    "Iteration",
    "KVCache",
    "LLMCluster",
    "LLMAction",
    "LLMServer",
    "LLMServerState",
    "Outcome",
    "Plan",
    "PrefixKVCache",
    "Replica",
    "SLABooks",
    "Scheduler",
    "VLLMV0Scheduler",
    "Work",
    "execute",
    "make_scheduler",
]
