"""Automatic prefix caching: :class:`PrefixKVCache`, the KV cache whose prompt blocks are
shared and stay cached after their request (vLLM v1's APC, SGLang's RadixAttention).

Semantics (``docs/design.md``, "The KV cache and prefix caching"), block by block as
vLLM v1's ``KVCacheManager``:

* **Keys.** A request's ``k``-th full prompt block (``block_size`` tokens) has a key that
  stands for its tokens and every token before it. Keys come from the workload's
  *prefix units*: hashed blocks of ``ratio * block_size`` tokens (Mooncake's 512-token
  ``hash_ids``), interned in a chain by the server, so that equal units mean equal
  prefixes. Block ``k`` is the ``k % ratio``-th block of unit ``k // ratio``. Only full
  blocks of the original prompt have keys: not a partial last block, not generated tokens.
* **Lookup.** At admission a request's cached prefix is the longest run of its leading
  keys found in the cache, at most ``(tokens - 1) // block_size`` blocks (a prefill
  computes one token at least, as vLLM's). Those blocks are *shared* (their references
  go up; free ones leave the free queue); prefill runs only the other tokens, attending
  to the whole context.
* **Registration.** As a prefill computes full prompt blocks, they become cached, in
  order. A block already cached meanwhile (two requests computed the same prefix at
  once) stays the request's own, and so do the request's blocks after it.
* **Freeing.** When a request finishes (or is preempted) its cached blocks lose a
  reference; those with none left join the free queue's tail, last block first. Its
  other blocks become free and empty.
* **Eviction.** A cached free block still counts as free: an allocation takes empty
  blocks first, then evicts from the free queue's head (least recently used first).

Hence the cached blocks are prefix-closed (block ``k`` is cached only with every block
before it: a request holds a prefix of its keys, so every holder of block ``k`` holds
block ``k - 1``, which becomes free no earlier and is queued after it), and within a
unit the free blocks are a run above the blocks in use, older the higher.

The implementation keeps that per-block behaviour at the cost of a unit, not a block:
per prefix unit (:class:`_Unit`) the count of its cached leading blocks, the extents its
holders hold, and its free run cut into *segments* (blocks freed together), each one
entry of the free queue. Evicting takes blocks off the oldest segment's top. A request's
admission, registration and freeing cost a few operations per unit (32 blocks of 16
tokens for Mooncake's 512-token hashes), not per block. ``tests/test_prefix_cache.py``
holds it equal, operation by operation, to a plain per-block model, and the env's hit
tokens on the Mooncake trace equal an independent LRU replay.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from typing import Any

from .kv_cache import KVCache


class _Unit:
    """One prefix unit in the cache: its cached leading blocks (``cached``), the extents
    (leading blocks) its holders hold, counted (``holders``), the largest of them
    (``top``: blocks ``top..cached - 1`` are free), and its free segments from the lowest
    (``segs``: each ``[unit, lo, hi]``, also in the free queue; the most recently freed
    first)."""

    __slots__ = ("cached", "top", "holders", "segs")

    def __init__(self) -> None:
        self.cached = 0
        self.top = 0
        self.holders: dict[int, int] = {}
        self.segs: list[list[int]] = []


class PrefixKVCache(KVCache):
    """A :class:`~batch_env.llm.kv_cache.KVCache` with automatic prefix caching (module
    docstring).

    :param block_size: tokens per block.
    :param total: blocks in the cache.
    :param watermark: blocks kept free when admitting a prompt.
    :param ratio: blocks per prefix unit (the workload's hashed block over ``block_size``).
    """

    prefix = True
    __slots__ = (
        "ratio",
        "units",
        "nfull",
        "held",
        "frozen",
        "cache",
        "lru",
        "free_cached",
        "cached_total",
        "_dead",
        "hit_tokens",
        "prompt_tokens",
        "evictions",
    )

    def __init__(self, block_size: int, total: int, watermark: int, ratio: int) -> None:
        self.ratio = ratio
        super().__init__(block_size, total, watermark)

    def clear(self) -> None:
        """An empty cache (nothing cached), no entry, the counters at 0."""
        super().clear()
        #: per entry: its prompt's prefix units, its keyed (full prompt) blocks, its leading
        #: blocks that are cached (shared or registered by it), and whether its registration
        #: stopped at a block cached by another
        self.units: list[tuple[int, ...]] = []
        self.nfull: list[int] = []
        self.held: list[int] = []
        self.frozen: list[bool] = []
        #: the units with cached blocks
        self.cache: dict[int, _Unit] = {}
        #: the free segments ``[unit, lo, hi]``, least recently freed first; a segment shared
        #: whole leaves it lazily (emptied: ``lo == hi``; dropped at the head, or all at
        #: once when they outnumber the others)
        self.lru: deque[list[int]] = deque()
        #: cached blocks that are free (evictable), and all cached blocks (in use or free)
        self.free_cached = 0
        self.cached_total = 0
        self._dead = 0  # emptied segments still in the queue
        #: prompt tokens found cached at admission, prompt tokens admitted, blocks evicted
        self.hit_tokens = 0
        self.prompt_tokens = 0
        self.evictions = 0

    def add(self, k: int, units: Any = None, prompts: Any = ()) -> None:
        """``k`` new entries holding no block; ``units``: their prefix units (``None``:
        none), ``prompts``: their prompt tokens (which bound their keyed blocks)."""
        super().add(k)
        r, bs = self.ratio, self.block_size
        us = units if units is not None else [()] * k
        self.units += us
        self.nfull += [min(p // bs, len(u) * r) for u, p in zip(us, prompts, strict=True)]
        self.held += [0] * k
        self.frozen += [False] * k

    # -- lookup and sharing ------------------------------------------------------------------
    def lookup(self, e: int, tokens: int) -> tuple[int, int]:
        """Entry ``e``'s cached prefix for a prefill of ``tokens`` tokens: ``(blocks, free
        ones)``: the leading blocks found cached, and how many of them are free (sharing
        those takes them from the free blocks). Changes nothing."""
        m = min(self.nfull[e], (tokens - 1) // self.block_size)
        r, cache = self.ratio, self.cache
        h = taken = 0
        for u in self.units[e]:
            w = m - h if m - h < r else r
            if w <= 0:
                break
            unit = cache.get(u)
            if unit is None:
                break
            k = w if unit.cached >= w else unit.cached
            if k > unit.top:
                taken += k - unit.top
            h += k
            if k < r:
                break
        return h, taken

    def admit(self, e: int, h: int, tokens: int) -> None:
        """Entry ``e`` is admitted for a prefill of ``tokens`` tokens, its first ``h``
        blocks found cached (:meth:`lookup`, at this boundary): they are shared."""
        self.prompt_tokens += tokens
        if not h:
            return
        r, cache = self.ratio, self.cache
        taken = 0
        left = h
        for u in self.units[e]:
            if left <= 0:
                break
            w = left if left < r else r
            left -= w
            unit = cache[u]
            if w > unit.top:  # its free blocks top..w - 1 come into use
                taken += w - unit.top
                self._unfree(unit, w)
                unit.top = w
            unit.holders[w] = unit.holders.get(w, 0) + 1
        self.used += taken
        self.free_cached -= taken
        self.blocks[e] += h
        self.held[e] = h
        self.hit_tokens += h * self.block_size

    def _unfree(self, unit: _Unit, w: int) -> None:
        """The free blocks of ``unit`` below ``w`` leave the free queue (the lowest
        segments, or the low part of one)."""
        segs = unit.segs
        while segs:
            seg = segs[0]
            if seg[2] <= w:
                seg[1] = seg[2]  # emptied: the queue drops it lazily
                self._dead += 1
                segs.pop(0)
            else:
                if seg[1] < w:
                    seg[1] = w
                break
        if self._dead > 1024 and self._dead > len(self.lru) // 2:
            self.lru = deque(g for g in self.lru if g[1] < g[2])
            self._dead = 0

    def register(self, e: int, computed: int) -> None:
        """Entry ``e`` has computed ``computed`` tokens of its prompt: its keyed blocks
        among them become cached, in order, up to the first cached by another."""
        k = self.held[e]
        hi = min(computed // self.block_size, self.nfull[e])
        if k >= hi or self.frozen[e]:
            return
        r, us, cache = self.ratio, self.units[e], self.cache
        while k < hi:
            j = k // r
            a = k - j * r  # e holds blocks 0..a - 1 of this unit
            b = hi - j * r if hi - j * r < r else r
            unit = cache.get(us[j])
            if unit is None:
                unit = cache[us[j]] = _Unit()
            if unit.cached != a:  # its block a is cached already: e's stays its own
                self.frozen[e] = True
                break
            unit.cached = unit.top = b
            self.cached_total += b - a
            if a:
                _drop(unit.holders, a)
            unit.holders[b] = unit.holders.get(b, 0) + 1
            k = j * r + b
        self.held[e] = k

    # -- allocation and freeing ----------------------------------------------------------------
    def _take(self, n: int) -> None:
        """``n`` free blocks into use: empty ones first, then the least recently used
        cached ones (evicted from the oldest segment's top)."""
        empty = self.total - self.used - self.free_cached
        if n > empty:
            need = n - empty
            self.evictions += need
            self.free_cached -= need
            self.cached_total -= need
            lru, cache = self.lru, self.cache
            while need:
                seg = lru[0]
                u, lo, hi = seg
                if lo == hi:  # emptied by a share
                    lru.popleft()
                    self._dead -= 1
                    continue
                t = need if need < hi - lo else hi - lo
                need -= t
                hi -= t
                unit = cache[u]
                unit.cached = hi  # the oldest segment of a unit is its highest
                if hi == lo:
                    lru.popleft()
                    unit.segs.pop()
                    if not hi:
                        del cache[u]
                else:
                    seg[2] = hi
        self.used += n

    def allocate(self, e: int, n: int) -> None:
        """``n`` new blocks for entry ``e``."""
        self._take(n)
        self.blocks[e] += n

    def grow(self, entries: Collection[int]) -> None:
        """One new block for each of ``entries``."""
        self._take(len(entries))
        blk = self.blocks
        for e in entries:
            blk[e] += 1

    def grow_one(self, e: int) -> None:
        """One new block for entry ``e``."""
        self._take(1)
        self.blocks[e] += 1

    def take(self, n: int) -> None:
        """``n`` new blocks for a decode run's entries (:meth:`KVCache.take`)."""
        self._take(n)

    def free(self, e: int, extra: int = 0) -> int:
        """Entry ``e`` gives its blocks back (and ``extra`` taken for it): its cached ones
        lose a reference, and those left with none join the free queue's tail, its last
        unit first; returns the blocks that became free."""
        h = self.held[e]
        freed = self.blocks[e] + extra - h
        if h:
            r, us, cache, lru = self.ratio, self.units[e], self.cache, self.lru
            for j in range((h - 1) // r, -1, -1):
                w = h - j * r if h - j * r < r else r
                unit = cache[us[j]]
                holders = unit.holders
                _drop(holders, w)
                if w == unit.top and w not in holders:
                    top = max(holders) if holders else 0
                    seg = [us[j], top, w]
                    lru.append(seg)
                    unit.segs.insert(0, seg)
                    freed += w - top
                    self.free_cached += w - top
                    unit.top = top
        self.used -= freed
        self.blocks[e] = 0
        self.held[e] = 0
        self.frozen[e] = False
        return freed

    def releasable(self, e: int) -> int:
        """Blocks that freeing entry ``e`` alone would return: all but its cached blocks
        that others hold too."""
        h = self.held[e]
        n = self.blocks[e] - h
        r, us, cache = self.ratio, self.units[e], self.cache
        for j in range(-(-h // r)):
            w = h - j * r if h - j * r < r else r
            unit = cache[us[j]]
            if w == unit.top and unit.holders[w] == 1:
                others = [x for x in unit.holders if x != w]
                n += w - (max(others) if others else 0)
        return n


def _drop(holders: dict[int, int], w: int) -> None:
    """One holder of extent ``w`` fewer."""
    n = holders[w] - 1
    if n:
        holders[w] = n
    else:
        del holders[w]
