"""Request prefixes: what the LLM server keeps of its requests' prompt hashes, and what it
reports of its prefix cache.

* :class:`PrefixUnits` turns a request's block hashes (a workload's, such as Mooncake's
  ``hash_ids`` of 512-token blocks) into *prefix units*: interned ids, each standing for
  its hash and every hash before it, so that equal units mean equal prefixes whatever
  the workload's hashes are (position-dependent or not). The KV cache
  (:class:`~batch_env.llm.prefix_cache.PrefixKVCache`) keys its blocks by them.
* :func:`prefix_info` and :func:`prefix_summary` give the cache's counters for ``info``
  and the episode summary; :func:`waiting_cached_fraction` is an observation feature.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from .prefix_cache import PrefixKVCache
    from .state import LLMServerState

#: waiting requests (from the queue's head) whose cached prefixes the observation reads
HEAD_LOOKUPS = 32


class PrefixUnits:
    """The interning of prefix units, for one episode (cleared with the cache)."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[tuple[int, int], int] = {}

    def clear(self) -> None:
        """Forget every unit (a new episode: the cache is empty)."""
        self._ids = {}

    def known(self, hashes: Any) -> tuple[int, ...]:
        """A prompt's leading prefix units that this episode has seen, from its block
        hashes (``None``: none), up to the first unseen one (no unit after it can be
        cached); interns nothing."""
        ids = self._ids
        u = 0
        us = []
        for h in hashes or ():
            v = ids.get((u, h))
            if v is None:
                break
            us.append(v)
            u = v
        return tuple(us)

    def units(self, hashes: Iterable[Any]) -> list[tuple[int, ...]]:
        """The prefix units of requests from their block hashes (``None``: none): unit
        ``j`` is the id of ``(unit j - 1, hash j)``."""
        ids = self._ids
        out = []
        for hs in hashes:
            u = 0
            us = []
            for h in hs or ():
                key = (u, h)
                v = ids.get(key)
                if v is None:
                    v = ids[key] = len(ids) + 1
                us.append(v)
                u = v
            out.append(tuple(us))
        return out


def counters(state: LLMServerState) -> tuple[int, int, int, int]:
    """The counters a summary window takes differences of: hit tokens, prompt tokens
    admitted, blocks evicted (of its :class:`PrefixKVCache`), iterations with cascade
    attention."""
    kv = cast("PrefixKVCache", state.kv)
    return kv.hit_tokens, kv.prompt_tokens, kv.evictions, state.cascade_iterations


def prefix_info(kv: PrefixKVCache) -> dict[str, Any]:
    """``info``'s prefix-cache keys (with prefix caching): the totals since the episode
    began and the cache's occupancy now."""
    return {
        "prefix_hit_tokens_total": kv.hit_tokens,
        "prefix_prompt_tokens_total": kv.prompt_tokens,
        "prefix_hit_rate": kv.hit_tokens / kv.prompt_tokens if kv.prompt_tokens else 0.0,
        "prefix_evictions_total": kv.evictions,
        "kv_cached_blocks": kv.cached_total,
        "kv_cached_free_blocks": kv.free_cached,
    }


def prefix_summary(
    state: LLMServerState, at_start: tuple[int, int, int, int] | None, cascade: bool = False
) -> dict[str, Any]:
    """The summary's prefix-cache keys, over the summary window (``at_start``: the
    counters when it opened; ``None``: it never did, and the counts are 0); with
    ``cascade`` (cascade attention on) also the window's iterations that ran it."""
    now = counters(state)
    hit, prompt, evicted, casc = now
    h0, p0, e0, c0 = at_start if at_start is not None else now
    hit, prompt = hit - h0, prompt - p0
    kv = cast("PrefixKVCache", state.kv)
    out = {
        "prefix_hit_tokens": hit,
        "prefix_prompt_tokens": prompt,
        "prefix_hit_rate": hit / prompt if prompt else float("nan"),
        "prefix_evictions": evicted - e0,
        "kv_cached_fraction_end": kv.cached_total / kv.total,
    }
    if cascade:
        out["cascade_iterations"] = casc - c0
    return out


def waiting_cached_fraction(state: LLMServerState) -> float:
    """The fraction of the prefill tokens of the first :data:`HEAD_LOOKUPS` waiting
    requests (queue order) that their cached prefixes cover now (0 when none waits)."""
    kv, bs = state.kv, state.block_size
    hit = tokens = 0
    for k, e in enumerate(state.waiting):
        if k == HEAD_LOOKUPS:
            break
        p = state.prompt[e] + state.generated[e]
        hit += kv.lookup(e, p)[0] * bs
        tokens += p
    return hit / tokens if tokens else 0.0
