"""Profiles: what serving a batch costs, loaded from the JSON files shipped beside them.

- :mod:`.batch_profile`: latency and energy of one model on one device by batch size
  (``DynamicBatching-v0``, ``NodeBatching-v0``): :class:`Profile`, :func:`load`,
  :func:`available`; shipped files ``<name>.json`` here and ``measured/<name>.json``;
- :mod:`.llm_profile`: LLM iteration time, power and KV-cache size (``LLMBatching-v0``):
  :class:`LLMProfile`, :func:`load_llm`, :func:`available_llm`; shipped files in ``llm/``.

The first names stay: ``batch_env.profile`` is :mod:`.batch_profile` and
``batch_env.llm_profile`` is :mod:`.llm_profile` (the same module objects).

Imports: NumPy and :mod:`batch_env.checks` only (no torch, no envs, no core).
"""

from __future__ import annotations

from .batch_profile import Profile, available, load
from .llm_profile import LLMProfile
from .llm_profile import available as available_llm
from .llm_profile import load as load_llm

__all__ = ["LLMProfile", "Profile", "available", "available_llm", "load", "load_llm"]
