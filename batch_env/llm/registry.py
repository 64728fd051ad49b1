"""The schedulers by name: :data:`SCHEDULERS` and :func:`make_scheduler`.

A module of its own, below the server and above the schedulers, so that the server
imports the registry at its head (no import back into the package it belongs to).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .chunked import ChunkedScheduler
from .scheduler import Scheduler
from .vllm_v0 import VLLMV0Scheduler

if TYPE_CHECKING:
    from .state import LLMServerState

#: The schedulers by name.
SCHEDULERS: dict[str, type[VLLMV0Scheduler] | type[ChunkedScheduler]] = {
    VLLMV0Scheduler.name: VLLMV0Scheduler,
    ChunkedScheduler.name: ChunkedScheduler,
}


def make_scheduler(
    name: str, state: LLMServerState, sequences: bool = False, **options: Any
) -> Scheduler:
    """The scheduler called ``name`` (:data:`SCHEDULERS`) over ``state``.

    :param sequences: the executor is told which requests run
        (``LLMExecutor.needs_sequences``: it keeps their KV caches).
    :param options: the scheduler's own options (``chunked``: ``decode_first``,
        ``split_prompts``).
    :raises ValueError: for an unknown name.
    """
    if name not in SCHEDULERS:
        raise ValueError(f"scheduler={name!r} is invalid: allowed values are {list(SCHEDULERS)}")
    return SCHEDULERS[name](state, sequences, **options)
