"""The LLM server that the LLM envs drive: its state and its iteration schedulers.

- :mod:`.state`: :class:`LLMServerState`, the requests, queues and paged KV cache between
  iterations, with names a reader understands;
- :mod:`.scheduler`: the one written interface every scheduler implements
  (:class:`Scheduler`: ``plan`` the next iteration without changing anything, then
  ``run`` it), the records it exchanges (:class:`Plan`, :class:`Iteration`), the
  :class:`Host` it reports to, and the registry that chooses a scheduler by name
  (:func:`make_scheduler`, :data:`SCHEDULERS`);
- :mod:`.sla`: :class:`SLABooks`, the TTFT and TPOT misses per request class (the
  reward's SLA term and the summary's first tokens);
- :mod:`.vllm_v0`: ``"vllm-v0"``, vLLM v0's default scheduler (an iteration is a prefill of
  whole prompts or one decode step of every running request);
- :mod:`.chunked`: ``"chunked"``, vLLM v1's / Sarathi-Serve's chunked prefill (decodes
  first, then prompt chunks filling the token budget, in one mixed iteration);
- :mod:`.actions`: :class:`ActionCodec`, the LLM envs' action encoding (cap, token
  budget, admission order), and :class:`LLMAction`, an action's parts.

The envs (:mod:`batch_env.envs.llm_batching`) keep the MDP: spaces, decision epochs,
reward, observation, the SLA bookkeeping and the summary. A scheduler changes only the
server state, calls the executor, and reports first tokens, completions and the passing
of time to its host (the env).

Imports: ``batch_env.executor`` (the :class:`~batch_env.executor.LLMExecutor` Protocol)
and nothing else of ``batch_env``; never ``batch_env.envs`` (the envs import this).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .actions import ActionCodec, LLMAction
from .chunked import ChunkedScheduler
from .scheduler import Host, Iteration, Plan, Scheduler
from .sla import SLABooks
from .state import LLMServerState
from .vllm_v0 import VLLMV0Scheduler

if TYPE_CHECKING:
    from ..executor import LLMExecutor

#: The schedulers by name.
SCHEDULERS: dict[str, type[VLLMV0Scheduler] | type[ChunkedScheduler]] = {
    VLLMV0Scheduler.name: VLLMV0Scheduler,
    ChunkedScheduler.name: ChunkedScheduler,
}


def make_scheduler(
    name: str, state: LLMServerState, host: Host, executor: LLMExecutor, **options: Any
) -> Scheduler:
    """The scheduler called ``name`` (:data:`SCHEDULERS`) over ``state``, reporting to ``host``.

    :param options: the scheduler's own options (``chunked``: ``decode_first``,
        ``split_prompts``).
    :raises ValueError: for an unknown name.
    """
    if name not in SCHEDULERS:
        raise ValueError(f"scheduler={name!r} is invalid: allowed values are {list(SCHEDULERS)}")
    return SCHEDULERS[name](state, host, executor, **options)


__all__ = [
    "SCHEDULERS",
    "ActionCodec",
    "ChunkedScheduler",
    "Host",
    "Iteration",
    "LLMAction",
    "LLMServerState",
    "Plan",
    "SLABooks",
    "Scheduler",
    "VLLMV0Scheduler",
    "make_scheduler",
]
