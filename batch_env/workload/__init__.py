"""Workloads: how requests arrive, how long LLM requests are, and the named datasets.

- :mod:`.arrivals`: arrival streams (:class:`ArrivalStream`, :class:`ArrivalChunk`) and the
  synthetic workloads (:class:`Poisson`, :class:`Gamma`, :class:`MMPP`);
- :mod:`.traces`: :class:`Trace`, the replay of a CSV trace (parsing, validation, cache);
- :mod:`.specs`: :func:`make_workload`, a workload from a dict spec (``{"kind": ...}``);
- :mod:`.random_load`: :class:`RandomLoad`, a load drawn anew for every episode
  (``load_range``);
- :mod:`.superposition`: :class:`Superposition`, several workloads' arrivals merged, each
  tagged with its part (``LLMBatching-v2``'s classes with their own arrivals);
- :mod:`.lengths`: :class:`RequestLengths`, prompt and output lengths of LLM requests;
- :mod:`.datasets`: the registry of named public datasets (``batch-env data``), with the
  shipped trace excerpts in ``excerpts/`` (package data).

Imports: NumPy and :mod:`batch_env.checks` only (``datasets`` may use ``pooch`` when a
download is asked for); nothing here imports the envs, the core, config or torch.
``from batch_env.workload import X`` works for every name in ``__all__``.
"""

from __future__ import annotations

from .arrivals import (
    DEFAULT_CHUNK_SIZE,
    MMPP,
    ArrivalChunk,
    ArrivalStream,
    Gamma,
    Poisson,
    Workload,
)
from .lengths import LENGTH_KINDS, RequestLengths, make_lengths
from .random_load import RandomLoad
from .sessions import Sessions
from .specs import WORKLOAD_KINDS, make_workload
from .superposition import Superposition
from .traces import Trace, check_llm_tokens

__all__ = [
    "Sessions",
    "DEFAULT_CHUNK_SIZE",
    "ArrivalChunk",
    "ArrivalStream",
    "Workload",
    "Poisson",
    "MMPP",
    "Gamma",
    "Trace",
    "RandomLoad",
    "Superposition",
    "WORKLOAD_KINDS",
    "make_workload",
    "LENGTH_KINDS",
    "RequestLengths",
    "make_lengths",
    "check_llm_tokens",
]
