"""The paged KV cache of one LLM server: the only writer of block state.

vLLM v1's ``KVCacheManager`` is the model. :class:`KVCache` owns, per request entry, the
number of KV blocks in its block table (:attr:`KVCache.blocks`) and the count of blocks in
use (:attr:`KVCache.used`); the schedulers and the server read them and change them only
through its operations:

* :meth:`~KVCache.allocate` ``n`` blocks to an entry (a prompt or a chunk of it);
* :meth:`~KVCache.grow` one block for each of some entries (the decodes whose next token
  starts a block), :meth:`~KVCache.grow_one` for one;
* :meth:`~KVCache.free` an entry's blocks (finished or preempted);
* :meth:`~KVCache.take` / :meth:`~KVCache.attach_many`: blocks of a run of decode-only
  iterations (:func:`batch_env.llm.decode_runs.run_decodes`), taken as counts while the run goes and given to
  their entries once at its end;
* :meth:`~KVCache.free_above_watermark` / :meth:`~KVCache.fits`: how many blocks an
  admission may still take.

With prefix caching (:class:`batch_env.llm.prefix_cache.PrefixKVCache`) the blocks of a prompt's leading
full blocks are shared and reference-counted, and freed ones stay cached until evicted;
without it (the default where a workload has no prefix information) this class is the
plain block counter it always was, and behaviour is unchanged byte for byte.

Invariants (``tests/test_llm_batching.py`` and ``tests/test_llm_v2.py`` check them at
every step): without prefix caching ``used == sum(blocks) <= total``; a waiting entry holds
no block. ``tests/test_layering.py`` checks that nothing outside this package's cache
modules (this one and :mod:`batch_env.llm.prefix_cache`) writes block state.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


class KVCache:
    """The KV blocks of one server (module docstring).

    :param block_size: tokens per block.
    :param total: blocks in the cache.
    :param watermark: blocks kept free when admitting a prompt.
    """

    __slots__ = ("block_size", "total", "watermark", "blocks", "used")

    def __init__(self, block_size: int, total: int, watermark: int) -> None:
        #: tokens per block, blocks in the cache, blocks kept free at admission
        self.block_size = block_size
        self.total = total
        self.watermark = watermark
        self.clear()

    def clear(self) -> None:
        """An empty cache and no entry."""
        #: per entry: the blocks in its block table (read only outside this class)
        self.blocks: list[int] = []
        #: blocks in use (read only outside this class)
        self.used = 0

    def add(self, k: int, units: Any = None, prompts: Any = ()) -> None:
        """``k`` new entries, holding no block (``units``, ``prompts``: what
        :class:`PrefixKVCache` keys their blocks by; unused here)."""
        self.blocks += [0] * k

    # -- what an admission may take --------------------------------------------------------
    def free_above_watermark(self) -> int:
        """Blocks an admission may still take: those free above the watermark."""
        return self.total - self.used - self.watermark

    def fits(self, n: int) -> bool:
        """Whether ``n`` more blocks fit above the watermark."""
        return n <= self.total - self.used - self.watermark

    # -- allocation --------------------------------------------------------------------------
    def allocate(self, e: int, n: int) -> None:
        """``n`` more blocks for entry ``e`` (a prompt, or a chunk of it)."""
        self.blocks[e] += n
        self.used += n

    def grow(self, entries: Collection[int]) -> None:
        """One more block for each of ``entries`` (decodes whose token starts a block)."""
        blk = self.blocks
        for e in entries:
            blk[e] += 1
        self.used += len(entries)

    def grow_and_allocate(self, grown: Collection[int], chunks: Any) -> None:
        """An iteration's blocks: :meth:`grow` for ``grown``, then :meth:`allocate` each
        chunk's new blocks (``(entry, tokens, computed, new blocks)``), in one call."""
        blk = self.blocks
        for e in grown:
            blk[e] += 1
        self.used += len(grown)
        for e, _c, _x, nb in chunks:
            blk[e] += nb
            self.used += nb

    def grow_one(self, e: int) -> None:
        """One more block for entry ``e``."""
        self.blocks[e] += 1
        self.used += 1

    def free(self, e: int, extra: int = 0) -> int:
        """Entry ``e`` gives its blocks back (finished or preempted), and ``extra`` blocks
        taken for it by :meth:`take` and not yet attached; returns the blocks freed."""
        n = self.blocks[e] + extra
        self.used -= n
        self.blocks[e] = 0
        return n

    # -- a run of decode-only iterations -----------------------------------------------------
    def take(self, n: int) -> None:
        """``n`` blocks for decodes of a run whose entries get them at its end
        (:meth:`attach_many`, or :meth:`free` with ``extra``)."""
        self.used += n

    def attach_many(self, entries: list[int], counts: list[int]) -> None:
        """Each entry of ``entries`` gets its count of blocks taken for it by :meth:`take`."""
        blk = self.blocks
        for e, n in zip(entries, counts, strict=True):
            blk[e] += n

    # -- what only prefix caching does (:class:`PrefixKVCache`); here, nothing ------------
    #: whether prompts share cached blocks (the schedulers ask before any lookup)
    prefix = False

    def releasable(self, e: int) -> int:
        """Blocks that freeing entry ``e`` alone would return (all of them here)."""
        return self.blocks[e]

    def lookup(self, e: int, tokens: int) -> tuple[int, int]:
        """Entry ``e``'s cached prefix: none here (:meth:`~batch_env.llm.prefix_cache.PrefixKVCache.lookup`)."""
        return 0, 0

    def admit(self, e: int, h: int, tokens: int) -> None:
        """Entry ``e`` admitted: nothing is shared here (:meth:`~batch_env.llm.prefix_cache.PrefixKVCache.admit`)."""

    def common_prefix(self, e: int, holders: int) -> int:
        """The leading blocks of entry ``e`` that ``holders`` entries hold (cascade
        attention's shared prefix): none here, as nothing is shared."""
        return 0

    def register(self, e: int, computed: int) -> None:
        """Entry ``e``'s computed blocks: none is cached here (:meth:`~batch_env.llm.prefix_cache.PrefixKVCache.register`)."""
