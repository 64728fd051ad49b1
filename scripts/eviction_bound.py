"""How much could an eviction policy raise the prefix hit rate on the Mooncake traces?

Issue 63's item 4 asks for the eviction policy in v2's action "where it helps". This
script bounds what any eviction rule could gain over the cache's own (vLLM's: the least
recently freed block first) by replaying a trace's block hashes one request after the
other (no two requests in the system at once, the load of ``tests/test_prefix_cache.py``'s
exact check) in a cache of ``capacity`` 16-token blocks, under three rules:

* ``lru``: vLLM's free queue, as the env runs it (the replay of the test: a request shares
  its longest cached run of keys, takes its other blocks from the empty ones, then from
  the least recently freed cached ones, and frees its own last block first);
* ``protect-hits``: a realizable alternative (segmented LRU): blocks that were hit at least
  once are evicted only when no block that was never hit is left, each group least
  recently freed first (shared system prompts and conversations that came back are kept
  over one-off prompts);
* ``deepest``: another realizable alternative: the free cached block deepest in its
  prompt (its offset from the prompt's start) first, ties least recently freed first (the
  fronts of many prompts, where shared system prompts and early turns lie, are kept over
  the tails of a few);
* ``furthest``: the clairvoyant rule, evict the free cached block whose next use (by a
  later request of the trace) is furthest away, never-used-again first (Belady's rule, the
  offline optimum of the number of block hits for unit pages; not realizable);
* ``unbounded``: no eviction (the hit rate's ceiling at any capacity).

It reports each rule's prefix hit rate (hit tokens over prompt tokens) and, for
``furthest``, also its block hits wherever they lie in the prompt. A prefix hit needs its
whole prefix cached, so block hits bound prefix hits from above under any rule, and
Belady's rule maximises block hits: ``furthest``'s block-hit rate bounds what any
eviction rule can reach at that capacity (at this load). The gap to ``lru`` is the most
an eviction choice in the action could add, and ``protect-hits`` and ``deepest`` what two
realizable alternatives add.

    python scripts/eviction_bound.py [--trace conversation|synthetic] [--requests 12031]
        [--capacity 26674,9507]

Capacities: Llama-3.1-8B on one H100 at ``gpu_memory_utilization`` 0.9 holds 26,674
blocks, at 0.45 9,507 (``tests/test_prefix_cache.py``).
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import sys
import time
from collections import OrderedDict
from pathlib import Path

BS = 16  # tokens a block
HASHED = 512  # tokens a trace hash covers
TRACES = Path(__file__).resolve().parent.parent / "batch_env" / "workload" / "excerpts"
INF = 1 << 60


def load(trace: str, n: int) -> list[tuple[int, int, list]]:
    """The first ``n`` requests of the shipped trace: (prompt, output, block keys), a key
    a block's chain of hashes and its offset in the hashed block (as the env keys it)."""
    rows = []
    with gzip.open(TRACES / f"mooncake_{trace}_trace.jsonl.gz", "rt") as fh:
        for k, line in enumerate(fh):
            if k == n:
                break
            rec = json.loads(line)
            p, o = int(rec["input_length"]), int(rec["output_length"])
            chain: tuple = ()
            keys: list = []
            for h in rec["hash_ids"]:
                chain = (chain, h)
                keys += [(chain, i) for i in range(HASHED // BS)]
            rows.append((p, o, keys[: p // BS]))
    return rows


def lru(rows: list, capacity: int, protect: bool = False) -> tuple[int, int]:
    """Prefix hit tokens and evictions under vLLM's free queue, or with ``protect`` under
    ``protect-hits`` (the module docstring): blocks hit at least once wait in a second
    queue, evicted from only when the first is empty."""
    fresh_q: OrderedDict = OrderedDict()  # free cached blocks (never hit, with protect)
    hit_q: OrderedDict = OrderedDict() if protect else fresh_q
    hits = evicted = 0
    for p, o, keys in rows:
        m = (p - 1) // BS
        h = 0
        while h < min(m, len(keys)) and (keys[h] in fresh_q or keys[h] in hit_q):
            h += 1
        for key in keys[:h]:
            fresh_q.pop(key, None)
            hit_q.pop(key, None)
        hits += h * BS
        fresh = -(-(p + o - 1) // BS) - h
        free = len(fresh_q) + (len(hit_q) if protect else 0)
        for _ in range(max(0, fresh - (capacity - h - free))):
            (fresh_q if fresh_q else hit_q).popitem(last=False)
            evicted += 1
        new = []
        for key in keys[h:]:
            if key in fresh_q or key in hit_q:
                break
            new.append(key)
        for key in reversed(new):  # freed last block first: the request's new blocks,
            fresh_q[key] = None
        for key in reversed(keys[:h]):  # then the prefix it shared
            hit_q[key] = None
    return hits, evicted


def deepest(rows: list, capacity: int) -> tuple[int, int]:
    """Prefix hit tokens and evictions under ``deepest`` (the module docstring)."""
    free: dict = {}  # free cached key -> its heap entry's stamp
    heap: list[tuple[int, int, object]] = []  # (-depth, stamp, key); stale entries skipped
    hits = evicted = stamp = 0
    for p, o, keys in rows:
        m = (p - 1) // BS
        h = 0
        while h < min(m, len(keys)) and keys[h] in free:
            h += 1
        for key in keys[:h]:
            del free[key]
        hits += h * BS
        fresh = -(-(p + o - 1) // BS) - h
        for _ in range(max(0, fresh - (capacity - h - len(free)))):
            while True:
                _, st, key = heapq.heappop(heap)
                if free.get(key) == st:
                    break
            del free[key]
            evicted += 1
        mine = keys[:h]
        for key in keys[h:]:
            if key in free:
                break
            mine.append(key)
        for depth in range(len(mine) - 1, -1, -1):  # freed last block first
            stamp += 1
            free[mine[depth]] = stamp
            heapq.heappush(heap, (-depth, stamp, mine[depth]))
    return hits, evicted


def furthest(rows: list, capacity: int | None) -> tuple[int, int, int]:
    """Prefix hit tokens, block hit tokens and evictions when the evicted block is the one
    used again furthest ahead (``capacity`` None: never evict). Every block a request
    computes is kept (a key already cached is a hit, wherever it lies)."""
    nxt: list[list[int]] = []  # per request, per key: the next request that uses the key
    last: dict = {}
    for k in range(len(rows) - 1, -1, -1):
        keys = rows[k][2]
        nxt.append([last.get(key, INF) for key in keys])
        for key in keys:
            last[key] = k
    nxt.reverse()
    cached: dict = {}  # key -> its next use (the heap's live entry)
    heap: list[tuple[int, int, object]] = []  # (-next use, tie, key), stale entries skipped
    prefix = block = evicted = 0
    tie = 0
    for k, (p, o, keys) in enumerate(rows):
        m = (p - 1) // BS
        h = 0
        while h < min(m, len(keys)) and keys[h] in cached:
            h += 1
        prefix += h * BS
        hit = sum(1 for key in keys[: max(m, 0)] if key in cached)
        block += hit * BS
        new = [key for key in keys if key not in cached]
        # the request's own blocks in use: all its keyed ones and its unkeyed ones
        need = -(-(p + o - 1) // BS)
        if capacity is not None:
            # free cached blocks that are not this request's may be evicted
            room = capacity - need - (len(cached) - (len(keys) - len(new)))
            mine = set(keys)
            skipped = []
            while room < 0 and heap:
                neg, t, key = heapq.heappop(heap)
                if cached.get(key) != -neg:
                    continue  # stale
                if key in mine:
                    skipped.append((neg, t, key))
                    continue
                del cached[key]
                evicted += 1
                room += 1
            for item in skipped:
                heapq.heappush(heap, item)
        for j, key in enumerate(keys):
            cached[key] = nxt[k][j]
            tie += 1
            heapq.heappush(heap, (-nxt[k][j], tie, key))
        if capacity is not None and len(cached) > capacity:
            # a prompt larger than the cache: keep the blocks used soonest
            while len(cached) > capacity:
                neg, t, key = heapq.heappop(heap)
                if cached.get(key) == -neg:
                    del cached[key]
                    evicted += 1
    return prefix, block, evicted


def main(argv: list[str] | None = None) -> int:
    """Print a markdown table of the hit rates of each rule at each capacity."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", choices=["conversation", "synthetic"], default="conversation")
    ap.add_argument("--requests", type=int, default=12_031, help="first N requests")
    ap.add_argument(
        "--capacity", default="26674,9507", help="cache sizes in 16-token blocks, comma-separated"
    )
    args = ap.parse_args(argv)
    try:
        caps = [int(c) for c in args.capacity.split(",")]
        if args.requests < 1 or min(caps) < 1:
            raise ValueError
    except ValueError:
        print(
            f"error: --capacity {args.capacity!r} / --requests {args.requests}: give positive "
            "integers",
            file=sys.stderr,
        )
        return 2
    t0 = time.perf_counter()
    rows = load(args.trace, args.requests)
    tokens = sum(p for p, _, _ in rows)
    print(
        f"Mooncake {args.trace} trace, first {len(rows)} requests one after the other, "
        f"{tokens:,} prompt tokens; hit rates over prompt tokens.\n"
    )
    print(
        "| capacity (16-token blocks) | lru: prefix hits (evictions) | protect-hits: prefix "
        "hits | deepest: prefix hits | furthest (clairvoyant): prefix hits | furthest: block hits, the bound "
        "(evictions) | unbounded: prefix hits |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    unb = furthest(rows, None)[0] / tokens
    for c in caps:
        h, e = lru(rows, c)
        ph = lru(rows, c, protect=True)[0]
        dh = deepest(rows, c)[0]
        fp, fb, fe = furthest(rows, c)
        print(
            f"| {c:,} | {h / tokens:.2%} ({e:,}) | {ph / tokens:.2%} | {dh / tokens:.2%} | "
            f"{fp / tokens:.2%} | "
            f"{fb / tokens:.2%} "
            f"({fe:,}) | {unb:.2%} |"
        )
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
