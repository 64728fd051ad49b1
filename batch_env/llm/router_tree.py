"""What a router has sent where: the approximate prefix tree of SGLang's cache-aware
router, kept by a cluster for its routers (:class:`RoutedPrefixes`).

SGLang's router (``sgl-router``, ``cache_aware``) does not ask the workers what they have
cached. It keeps one radix tree of the request texts it has routed, each node tagged
with the workers it was sent to, inserts a request's text when it routes it, and prunes
each worker's part least-recently-used to ``max_tree_size`` characters in a background
cycle. A prefix routed a moment ago therefore counts as cached before any worker has
computed it, which is what makes the router sticky when many requests of one prefix
arrive at once (every cache-aware rule that reads the replicas' actual caches sees
nothing cached then).

Here the tree holds prefix units (a trace's hashed blocks, :mod:`batch_env.llm.prefixes`:
unit ``j`` stands for the prompt's first ``j + 1`` blocks, so a set of units is a tree of
prefixes) instead of characters, and tokens instead of characters for its sizes:

* :meth:`RoutedPrefixes.insert` adds a routed prompt's units to its replica's part and
  marks them used now, deepest first, so that a prompt's leading units are the last of
  it to be pruned (SGLang prunes leaves);
* each replica's part is pruned, least recently used first, to ``max_tokens`` tokens at
  every insert (SGLang: every ``eviction_interval_secs``, 60 s, to ``max_tree_size``
  characters, ``2**24``; the default here, :data:`MAX_TREE_TOKENS`, is that at four
  characters a token);
* :meth:`RoutedPrefixes.match` gives, for every replica at once, the leading units of a
  prompt its part holds, in one pass over the prompt's units (a unit's owners are a bit
  mask over the replicas, as the tree's nodes are tagged with their tenants).

Imports: nothing of the package (a leaf).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

#: The default size bound of each replica's part, in tokens: SGLang's ``max_tree_size``
#: of 2**24 characters at four characters a token.
MAX_TREE_TOKENS = 2**24 // 4


class RoutedPrefixes:
    """The prefixes routed to each of ``n`` replicas (module docstring).

    :param n: the replicas.
    :param unit_tokens: tokens per prefix unit (the trace's hashed block).
    :param max_tokens: the bound on each replica's part, in tokens (at least one unit).
    :raises ValueError: a count or size below 1 (naming it).
    """

    __slots__ = ("n", "unit_tokens", "max_units", "_owners", "_lru")

    def __init__(self, n: int, unit_tokens: int, max_tokens: int = MAX_TREE_TOKENS) -> None:
        for name, v in (("n", n), ("unit_tokens", unit_tokens), ("max_tokens", max_tokens)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"RoutedPrefixes: {name}={v!r} must be an integer >= 1")
        self.n = n
        self.unit_tokens = unit_tokens
        #: the units each replica's part may hold
        self.max_units = max(1, max_tokens // unit_tokens)
        self.clear()

    def clear(self) -> None:
        """Forget everything (a new episode)."""
        self._owners: dict[int, int] = {}  # unit -> bit mask of the replicas holding it
        self._lru: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(self.n)]

    def insert(self, r: int, units: Sequence[int]) -> None:
        """Replica ``r`` was sent a prompt of these units: they join its part, used now
        (deepest first), and its part is pruned to its bound, least recently used first."""
        lru, owners, bit = self._lru[r], self._owners, 1 << r
        for u in reversed(units):
            if u in lru:
                lru.move_to_end(u)
            else:
                lru[u] = None
                owners[u] = owners.get(u, 0) | bit
        while len(lru) > self.max_units:
            u, _ = lru.popitem(last=False)
            left = owners[u] & ~bit
            if left:
                owners[u] = left
            else:
                del owners[u]

    def match(self, units: Sequence[int]) -> list[int]:
        """For each replica, how many of these leading units its part holds."""
        out = [len(units)] * self.n
        alive = (1 << self.n) - 1
        owners = self._owners
        for j, u in enumerate(units):
            held = owners.get(u, 0)
            gone = alive & ~held
            if gone:
                alive &= held
                r = 0
                while gone:
                    if gone & 1:
                        out[r] = j
                    gone >>= 1
                    r += 1
                if not alive:
                    break
        return out

    def tokens(self) -> list[int]:
        """Each replica's part's size, in tokens (SGLang's tenant size)."""
        return [len(lru) * self.unit_tokens for lru in self._lru]
