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

The implementation keeps that per-block behaviour at the cost of a *run* of blocks, as
SGLang's radix cache does: the cached blocks form a tree of nodes (:class:`_Node`), each a
run of consecutive blocks of one chain held by the same requests; a request holds a path
from the root. A node whose last holder leaves joins the free queue as one entry (its
blocks were freed together, last first); eviction takes blocks off the oldest free node's
end, and a node emptied so leaves the tree (its descendants, freed no later, left before
it). A hit that ends inside a node splits it. So a request's lookup, admission,
registration and freeing cost a few operations per node on its path (the shared system
prompt, the conversation so far, its own blocks), not per block or per hashed unit.
``tests/test_prefix_cache.py`` holds it equal, operation by operation, to a plain
per-block model, and the env's hit tokens on the Mooncake trace equal an independent LRU
replay.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from typing import Any

from .kv_cache import KVCache


class _Node:
    """A run of cached blocks ``b0..b1 - 1`` of the chain of ``units`` (block ``k``'s key:
    ``units[k // ratio] * ratio + k % ratio``), held by ``holders`` requests (0: free, in
    the free queue under ``stamp``; -1: not queued), below ``parent``; ``children`` by the
    key of their first block."""

    __slots__ = ("parent", "children", "units", "b0", "b1", "holders", "stamp")

    def __init__(
        self, parent: _Node | None, units: tuple[int, ...], b0: int, b1: int, holders: int
    ) -> None:
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.units = units
        self.b0 = b0
        self.b1 = b1
        self.holders = holders
        self.stamp = -1


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
        "leaf",
        "root",
        "lru",
        "free_cached",
        "cached_total",
        "_stamp",
        "_live",
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
        #: blocks that are cached (shared or registered by it), whether its registration
        #: stopped at a block cached by another, and the deepest node it holds
        self.units: list[tuple[int, ...]] = []
        self.nfull: list[int] = []
        self.held: list[int] = []
        self.frozen: list[bool] = []
        self.leaf: list[_Node | None] = []
        #: the tree's root (no block; never freed)
        self.root = _Node(None, (), 0, 0, 1)
        #: the free queue, least recently freed first: ``(stamp, node)``; an entry whose
        #: node was shared again or emptied since is dropped lazily
        self.lru: deque[tuple[int, _Node]] = deque()
        #: cached blocks that are free (evictable), and all cached blocks (in use or free)
        self.free_cached = 0
        self.cached_total = 0
        self._stamp = 0
        self._live = 0  # entries of the free queue still valid
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
        self.leaf += [None] * k

    # -- lookup and sharing ------------------------------------------------------------------
    def lookup(self, e: int, tokens: int) -> tuple[int, int]:
        """Entry ``e``'s cached prefix for a prefill of ``tokens`` tokens: ``(blocks, free
        ones)``: the leading blocks found cached, and how many of them are free (sharing
        those takes them from the free blocks). Changes nothing."""
        return self.match(self.units[e], min(self.nfull[e], (tokens - 1) // self.block_size))

    def match(self, us: tuple[int, ...], m: int) -> tuple[int, int]:
        """The leading blocks, at most ``m``, of a prompt with prefix units ``us`` found
        cached, and how many of them are free (:meth:`lookup`'s walk; a request not
        admitted here is looked up with its units from :meth:`PrefixUnits.known`).
        Changes nothing."""
        r = self.ratio
        node = self.root
        pos = taken = 0
        while pos < m:
            k = pos // r
            child = node.children.get(us[k] * r + pos % r)
            if child is None:
                break
            end = child.b1 if child.b1 < m else m
            q = (end - 1) // r
            cu = child.units
            if cu[q] != us[q]:  # the chains part inside this node: the last unit they share
                lo, hi = k, q - 1
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if cu[mid] == us[mid]:
                        lo = mid
                    else:
                        hi = mid - 1
                end = (lo + 1) * r
            if not child.holders:
                taken += end - pos
            if end < child.b1:
                pos = end
                break
            pos = end
            node = child
        return pos, taken

    def admit(self, e: int, h: int, tokens: int) -> None:
        """Entry ``e`` is admitted for a prefill of ``tokens`` tokens, its first ``h``
        blocks found cached (:meth:`lookup`, at this boundary): they are shared."""
        self.prompt_tokens += tokens
        if not h:
            return
        r, us = self.ratio, self.units[e]
        node = self.root
        pos = taken = 0
        while pos < h:
            child = node.children[us[pos // r] * r + pos % r]
            if child.b1 > h:
                child = self._split(child, h)
            if not child.holders:  # free: its blocks come into use
                taken += child.b1 - child.b0
                if child.stamp >= 0:
                    child.stamp = -1
                    self._live -= 1
            child.holders += 1
            pos = child.b1
            node = child
        self.used += taken
        self.free_cached -= taken
        self.blocks[e] += h
        self.held[e] = h
        self.leaf[e] = node
        self.hit_tokens += h * self.block_size

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut ``node`` at block ``at``: a new node takes its blocks before ``at`` (and its
        place under its parent); ``node`` keeps the rest (and its place in the free
        queue), below the new one. Returns the new node."""
        r = self.ratio
        parent = node.parent
        assert parent is not None
        up = _Node(parent, node.units, node.b0, at, node.holders)
        parent.children[node.units[node.b0 // r] * r + node.b0 % r] = up
        node.b0 = at
        node.parent = up
        up.children[node.units[at // r] * r + at % r] = node
        return up

    def register(self, e: int, computed: int) -> None:
        """Entry ``e`` has computed ``computed`` tokens of its prompt: its keyed blocks
        among them become cached, in order, unless the first is cached already (by
        another): then they, and its later ones, stay its own."""
        k = self.held[e]
        hi = min(computed // self.block_size, self.nfull[e])
        if k >= hi or self.frozen[e]:
            return
        r, us = self.ratio, self.units[e]
        last = self.leaf[e] or self.root
        key = us[k // r] * r + k % r
        if key in last.children:
            self.frozen[e] = True
            return
        if last is not self.root and last.holders == 1 and not last.children:
            last.units = us  # its own run, extended (the same keys up to its end)
            last.b1 = hi
        else:
            node = last.children[key] = _Node(last, us, k, hi, 1)
            self.leaf[e] = node
        self.cached_total += hi - k
        self.held[e] = hi

    # -- allocation and freeing ----------------------------------------------------------------
    def _take(self, n: int) -> None:
        """``n`` free blocks into use: empty ones first, then the least recently used
        cached ones (evicted from the oldest free node's end)."""
        empty = self.total - self.used - self.free_cached
        if n > empty:
            need = n - empty
            self.evictions += need
            self.free_cached -= need
            self.cached_total -= need
            lru, r = self.lru, self.ratio
            while need:
                stamp, node = lru[0]
                if node.stamp != stamp:  # shared again since it was queued
                    lru.popleft()
                    continue
                size = node.b1 - node.b0
                t = need if need < size else size
                need -= t
                node.b1 -= t
                if t == size:  # emptied: it leaves the tree (its children left before it)
                    lru.popleft()
                    self._live -= 1
                    node.stamp = -1
                    parent = node.parent
                    assert parent is not None
                    del parent.children[node.units[node.b0 // r] * r + node.b0 % r]
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

    def grow_and_allocate(self, grown: Collection[int], chunks: Any) -> None:
        """:meth:`grow` for ``grown``, then :meth:`allocate` for each chunk."""
        self.grow(grown)
        for e, _c, _x, nb in chunks:
            self.allocate(e, nb)

    def grow_one(self, e: int) -> None:
        """One new block for entry ``e``."""
        self._take(1)
        self.blocks[e] += 1

    def take(self, n: int) -> None:
        """``n`` new blocks for a decode run's entries (:meth:`KVCache.take`)."""
        self._take(n)

    def free(self, e: int, extra: int = 0) -> int:
        """Entry ``e`` gives its blocks back (and ``extra`` taken for it): the nodes of its
        path lose a holder, and those left with none join the free queue's tail, the
        deepest first; returns the blocks that became free."""
        freed = self.blocks[e] + extra - self.held[e]
        node = self.leaf[e]
        root, lru = self.root, self.lru
        while node is not None and node is not root:
            node.holders -= 1
            if not node.holders:
                size = node.b1 - node.b0
                freed += size
                self.free_cached += size
                self._stamp += 1
                node.stamp = self._stamp
                lru.append((self._stamp, node))
                self._live += 1
            node = node.parent
        if len(lru) > 2 * self._live + 1024:  # drop the stale entries at once
            self.lru = deque(x for x in lru if x[1].stamp == x[0])
        self.used -= freed
        self.blocks[e] = 0
        self.held[e] = 0
        self.frozen[e] = False
        self.leaf[e] = None
        return freed

    def common_prefix(self, e: int, holders: int) -> int:
        """The leading blocks of entry ``e`` that ``holders`` entries hold (with
        ``holders`` the running entries: the prefix they all share, which cascade attention
        reads once; :mod:`batch_env.llm.cascade`). A node's holders never exceed its
        parent's, so it is the end of the deepest node of ``e``'s path held so often."""
        node = self.leaf[e]
        root = self.root
        while node is not None and node is not root:
            if node.holders >= holders:
                return node.b1
            node = node.parent
        return 0

    def releasable(self, e: int) -> int:
        """Blocks that freeing entry ``e`` alone would return: all but its cached blocks
        that others hold too (the nodes of its path with another holder)."""
        n = self.blocks[e] - self.held[e]
        node = self.leaf[e]
        while node is not None and node is not self.root and node.holders == 1:
            n += node.b1 - node.b0
            node = node.parent
        return n
