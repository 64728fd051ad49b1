"""Prefix caching (issue 63): the KV cache's semantics, checked three ways.

* a hand-computed small case;
* :class:`~batch_env.llm.prefix_cache.PrefixKVCache` (segments per prefix unit) against a
  plain per-block model written here (a dict of references and an ordered free queue),
  operation by operation, on random sequences;
* the env's prefix-hit tokens over the first 2,000 requests of the Mooncake conversation
  trace, one request in the system at a time, against an independent LRU replay of the
  trace's block hashes at the same capacity (two capacities; one evicts).
"""

from __future__ import annotations

import gzip
import json
import random
from collections import OrderedDict
from pathlib import Path

import pytest

from batch_env.llm.prefix_cache import PrefixKVCache

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "batch_env/workload/excerpts/mooncake_conversation_trace.jsonl.gz"


# -- a plain per-block model of the same semantics --------------------------------------------
class BlockModel:
    """Per-block prefix cache: keys ``(unit, offset)``; ``refs`` of blocks in use, ``lru``
    of free cached blocks (oldest first); empty blocks first, then LRU eviction."""

    def __init__(self, bs: int, total: int, ratio: int) -> None:
        self.bs, self.total, self.r = bs, total, ratio
        self.refs: dict = {}
        self.lru: OrderedDict = OrderedDict()
        self.used = 0
        self.evictions = 0
        self.blocks: dict[int, int] = {}
        self.held: dict[int, list] = {}
        self.frozen: dict[int, bool] = {}
        self.keys: dict[int, list] = {}

    def add(self, e: int, units: tuple, prompt: int) -> None:
        nfull = min(prompt // self.bs, len(units) * self.r)
        self.keys[e] = [(units[k // self.r], k % self.r) for k in range(nfull)]
        self.blocks[e], self.held[e], self.frozen[e] = 0, [], False

    def lookup(self, e: int, tokens: int) -> tuple[int, int]:
        m = min(len(self.keys[e]), (tokens - 1) // self.bs)
        h = taken = 0
        for key in self.keys[e][:m]:
            if key in self.refs:
                h += 1
            elif key in self.lru:
                h += 1
                taken += 1
            else:
                break
        return h, taken

    def admit(self, e: int, h: int) -> None:
        for key in self.keys[e][:h]:
            if key in self.refs:
                self.refs[key] += 1
            else:
                del self.lru[key]
                self.refs[key] = 1
                self.used += 1
        self.blocks[e] += h
        self.held[e] = list(self.keys[e][:h])

    def take(self, n: int) -> None:
        empty = self.total - self.used - len(self.lru)
        for _ in range(max(0, n - empty)):
            self.lru.popitem(last=False)
            self.evictions += 1
        self.used += n

    def allocate(self, e: int, n: int) -> None:
        self.take(n)
        self.blocks[e] += n

    def register(self, e: int, computed: int) -> None:
        hi = min(computed // self.bs, len(self.keys[e]))
        while not self.frozen[e] and len(self.held[e]) < hi:
            key = self.keys[e][len(self.held[e])]
            if key in self.refs or key in self.lru:
                self.frozen[e] = True
                break
            self.refs[key] = 1
            self.held[e].append(key)

    def free(self, e: int) -> int:
        freed = self.blocks[e] - len(self.held[e])
        for key in reversed(self.held[e]):
            self.refs[key] -= 1
            if not self.refs[key]:
                del self.refs[key]
                self.lru[key] = None
                freed += 1
        self.used -= freed
        self.blocks[e], self.held[e], self.frozen[e] = 0, [], False
        return freed


def _nodes(kv: PrefixKVCache) -> list:
    """Every node of the cache's tree but the root."""
    out, todo = [], list(kv.root.children.values())
    while todo:
        node = todo.pop()
        out.append(node)
        todo += node.children.values()
    return out


def _block_keys(kv: PrefixKVCache, node, lo: int, hi: int) -> list:
    r = kv.ratio
    return [(node.units[k // r], k % r) for k in range(lo, hi)]


def cached_keys(kv: PrefixKVCache) -> set:
    """The tree's cached blocks as ``(unit, offset)`` keys."""
    return {key for node in _nodes(kv) for key in _block_keys(kv, node, node.b0, node.b1)}


def free_queue(kv: PrefixKVCache) -> list:
    """The free queue block by block, evicted first first (stale entries skipped)."""
    out = []
    for stamp, node in kv.lru:
        if node.stamp == stamp:
            out += _block_keys(kv, node, node.b0, node.b1)[::-1]
    return out


def check_tree(kv: PrefixKVCache) -> None:
    """The tree's invariants: a node is non-empty, starts where its parent ends, holds
    no more holders than its parent, and a free node has only free children."""
    for node in _nodes(kv):
        assert node.b0 < node.b1
        if node.parent is not kv.root:
            assert node.b0 == node.parent.b1 and node.holders <= node.parent.holders
        assert (node.stamp >= 0) == (node.holders == 0)
        if not node.holders:
            assert all(not c.holders for c in node.children.values())


def test_a_hand_computed_case():
    """Blocks of 4 tokens, 2 per unit, 8 blocks in all."""
    kv = PrefixKVCache(block_size=4, total=8, watermark=0, ratio=2)
    # A: 17 tokens, units (1, 2, 3): keyed blocks min(17 // 4, 6) = 4: (1,0) (1,1) (2,0) (2,1)
    # B: 13 tokens, units (1, 5): keyed blocks min(3, 4) = 3: (1,0) (1,1) (5,0)
    kv.add(2, [(1, 2, 3), (1, 5)], [17, 13])
    assert kv.lookup(0, 17) == (0, 0)
    kv.admit(0, 0, 17)
    kv.allocate(0, 5)  # ceil(17 / 4): nothing cached yet
    kv.register(0, 17)  # its 4 keyed blocks become cached
    assert kv.held[0] == 4 and kv.used == 5
    # B while A runs: (1,0) (1,1) are cached and in use: 2 blocks, none free
    assert kv.lookup(1, 13) == (2, 0)
    kv.admit(1, 2, 13)
    kv.allocate(1, 2)  # ceil(13 / 4) - 2
    assert kv.used == 7 and kv.hit_tokens == 8 and kv.prompt_tokens == 30
    # A finishes: (2,1) (2,0) become free (cached); (1,*) stay with B; its 5th block is empty
    assert kv.free(0) == 3
    assert kv.used == 4 and kv.free_cached == 2
    assert free_queue(kv) == [(2, 1), (2, 0)]
    # B registers its (5,0) block, then finishes: (5,0), then (1,1), (1,0) join the queue
    kv.register(1, 13)
    assert kv.held[1] == 3
    assert kv.free(1) == 4
    assert kv.used == 0 and kv.free_cached == 5
    assert free_queue(kv) == [(2, 1), (2, 0), (5, 0), (1, 1), (1, 0)]
    # C: 9 tokens on units (1, 2): lookup capped at (9 - 1) // 4 = 2 blocks, both free
    kv.add(1, [(1, 2)], [9])
    assert kv.lookup(2, 9) == (2, 2)
    kv.admit(2, 2, 9)
    # 8 - 2 in use - 3 cached free = 3 empty; 5 more blocks evict 2: (2,1) then (2,0)
    kv.allocate(2, 5)
    assert kv.evictions == 2 and free_queue(kv) == [(5, 0)]
    assert cached_keys(kv) == {(1, 0), (1, 1), (5, 0)}


def _random_run(seed: int, steps: int = 400) -> None:
    """Random admissions, chunks, growth and frees on both models; compared at every step."""
    rnd = random.Random(seed)
    bs, ratio = 4, rnd.choice([1, 2, 3, 4])
    total = rnd.randint(12, 60)
    kv = PrefixKVCache(bs, total, 0, ratio)
    ref = BlockModel(bs, total, ratio)
    trunks = [tuple(rnd.randint(1, 6) for _ in range(6)) for _ in range(3)]
    waiting: list[int] = []
    running: dict[int, list[int]] = {}  # entry -> [prompt tokens, computed]
    prompts: dict[int, int] = {}
    n = 0
    for _ in range(steps):
        op = rnd.random()
        if op < 0.25:  # a new request sharing a random prefix of a trunk
            t = rnd.choice(trunks)
            k = rnd.randint(0, len(t))
            units = t[:k] + tuple(rnd.randint(7, 40) for _ in range(rnd.randint(0, 2)))
            # chained units: a unit stands for its whole prefix (the server interns them)
            chained = tuple(hash(units[: i + 1]) % 10_007 + 1 for i in range(len(units)))
            p = rnd.randint(1, max(1, len(units) * ratio * bs + 3))
            kv.add(1, [chained], [p])
            ref.add(n, chained, p)
            prompts[n] = p
            waiting.append(n)
            n += 1
        elif op < 0.5 and waiting:  # admit one: lookup, share, allocate its first chunk
            e = waiting.pop(rnd.randrange(len(waiting)))
            p = prompts[e]
            got = kv.lookup(e, p)
            assert got == ref.lookup(e, p)
            h, taken = got
            c = rnd.randint(1, p - h * bs)
            nb = -(-(h * bs + c) // bs) - h
            if nb + taken > total - kv.used:
                waiting.append(e)
                continue
            kv.admit(e, h, p)
            ref.admit(e, h)
            kv.allocate(e, nb)
            ref.allocate(e, nb)
            kv.register(e, h * bs + c)
            ref.register(e, h * bs + c)
            running[e] = [p, h * bs + c]
        elif op < 0.7 and running:  # a chunk or a decode block of a running request
            e = rnd.choice(list(running))
            p, done = running[e]
            if total - kv.used < 1:
                continue
            step = rnd.randint(1, bs)
            new = -(-(done + step) // bs) - kv.blocks[e]
            if new > total - kv.used:
                continue
            kv.allocate(e, new)
            ref.allocate(e, new)
            running[e][1] = done + step
            kv.register(e, min(done + step, p))
            ref.register(e, min(done + step, p))
        elif running:  # a finish or a preemption
            e = rnd.choice(list(running))
            assert kv.releasable(e) == _releasable(ref, e)
            assert kv.free(e) == ref.free(e)
            del running[e]
            if rnd.random() < 0.3:
                waiting.append(e)  # preempted: it will be admitted again
        assert kv.used == ref.used
        assert kv.evictions == ref.evictions
        assert kv.free_cached == len(ref.lru)
        assert cached_keys(kv) == set(ref.refs) | set(ref.lru)
        assert kv.cached_total == len(ref.refs) + len(ref.lru)
        check_tree(kv)
        assert free_queue(kv) == list(ref.lru)
        for e in running:
            assert kv.blocks[e] == ref.blocks[e] and kv.held[e] == len(ref.held[e])


def _releasable(ref: BlockModel, e: int) -> int:
    """What freeing ``e`` alone would free, on the per-block model."""
    return ref.blocks[e] - sum(1 for key in ref.held[e] if ref.refs[key] > 1)


@pytest.mark.parametrize("seed", range(40))
def test_the_segments_behave_as_the_per_block_model(seed):
    """Every operation leaves the segment model where the per-block one is: the blocks in
    use, the cached blocks, the free queue block by block, the evictions, each lookup."""
    _random_run(seed)


# -- the env against an independent LRU replay of the Mooncake trace --------------------------
N_REPLAY = 2000
BS = 16


def _spaced_trace(path: Path, gap_ms: int) -> None:
    """The first 2,000 Mooncake requests, ``gap_ms`` apart (so one is in the system at a
    time), lengths and hashes as in the trace."""
    with gzip.open(MOONCAKE, "rt") as fh, path.open("w") as out:
        for k, line in enumerate(fh):
            if k == N_REPLAY:
                break
            rec = json.loads(line)
            rec["timestamp"] = k * gap_ms
            out.write(json.dumps(rec) + "\n")


def lru_replay(capacity: int) -> tuple[int, int]:
    """Hit tokens and evicted blocks of the trace's first 2,000 requests, one after the
    other, in a cache of ``capacity`` blocks of 16 tokens, written from the semantics
    alone: a block's key is its chain of 512-token hashes and its offset; a request
    shares its longest cached run of keys (at most ``(prompt - 1) // 16`` blocks), takes
    the rest of its ``ceil((prompt + output - 1) / 16)`` blocks from the empty ones, then
    from the least recently used cached ones, caches its keyed blocks up to the first
    already cached, and frees them into the queue last block first."""
    lru: OrderedDict = OrderedDict()  # free cached blocks, oldest first (all free between requests)
    hits = evicted = 0
    with gzip.open(MOONCAKE, "rt") as fh:
        for k, line in enumerate(fh):
            if k == N_REPLAY:
                break
            rec = json.loads(line)
            p, o, hashes = rec["input_length"], rec["output_length"], rec["hash_ids"]
            chain, keys = (), []
            for h in hashes:
                chain = (chain, h)
                keys += [(chain, i) for i in range(512 // BS)]
            keys = keys[: p // BS]
            m = (p - 1) // BS
            h = 0
            while h < min(m, len(keys)) and keys[h] in lru:
                h += 1
            for key in keys[:h]:
                del lru[key]
            hits += h * BS
            fresh = -(-(p + o - 1) // BS) - h
            empty = capacity - h - len(lru)
            for _ in range(max(0, fresh - empty)):
                lru.popitem(last=False)
                evicted += 1
            mine = keys[:h]
            for key in keys[h:]:
                if key in lru:
                    break
                mine.append(key)
            for key in reversed(mine):
                lru[key] = None
    return hits, evicted


@pytest.mark.parametrize("utilization", [0.9, 0.45])
def test_the_env_hits_what_an_lru_replay_of_mooncake_hits(tmp_path, utilization):
    """Issue 63's exact check: one request in the system at a time, the env's prefix-hit
    tokens over the first 2,000 Mooncake conversation requests equal the replay's at the
    same capacity (Llama-3.1-8B on an H100: 26,674 blocks at 0.9; 9,507 at 0.45, where
    the cache evicts far more)."""
    import gymnasium as gym

    trace = tmp_path / "spaced.jsonl"
    _spaced_trace(trace, gap_ms=600_000)
    env = gym.make(
        "batch_env/LLMBatching-v2",
        profile="llama-3.1-8b-h100",
        gpu_memory_utilization=utilization,
        max_model_len=124_000,  # the longest of these requests: 123,783 tokens
        max_num_batched_tokens=8192,
        workload={
            "kind": "trace",
            "path": str(trace),
            "timestamp_column": "timestamp",
            "time_unit": "ms",
            "prompt_tokens_column": "input_length",
            "output_tokens_column": "output_length",
            "loop": False,
        },
        horizon_requests=N_REPLAY,
    )
    srv = env.unwrapped.server
    assert srv.state.kv.prefix  # on by default: the trace carries hashes
    env.reset(seed=0)
    most = 0
    while True:
        _, _, term, trunc, _ = env.step(env.action_space.n - 1)
        most = max(most, srv.in_system)
        if term or trunc:
            break
    kv = srv.state.kv
    assert srv.completed == N_REPLAY and most <= 1  # never two requests at once
    hits, evicted = lru_replay(kv.total)
    assert kv.hit_tokens == hits
    assert kv.evictions == evicted
    assert evicted > 0
    env.close()


# -- bad input: one line naming the row and the field ------------------------------------------
def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _trace(path: str, **kw) -> dict:
    return {
        "kind": "trace",
        "path": path,
        "timestamp_column": "timestamp",
        "time_unit": "ms",
        "prompt_tokens_column": "input_length",
        "output_tokens_column": "output_length",
        **kw,
    }


GOOD = [
    {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]},
    {"timestamp": 500, "input_length": 600, "output_length": 3, "hash_ids": [1, 3]},
]


@pytest.mark.parametrize(
    "bad, expect",
    [
        (
            {"hash_ids": [1, 2, 3]},
            r"row 2 \(line 2\): field 'hash_ids' has 3 hashes but the prompt's 600 tokens make 2 block",
        ),
        (
            {"hash_ids": [1, "x"]},
            r"row 2 \(line 2\): field 'hash_ids'\[1\]='x' is invalid: expected an integer hash",
        ),
        ({"hash_ids": [1, 2.5]}, r"row 2 \(line 2\): field 'hash_ids'\[1\]=2.5 is invalid"),
        (
            {"hash_ids": None},
            r"row 2 \(line 2\): field 'hash_ids'=None is invalid: expected a list",
        ),
        ({"hash_ids": ...}, r"row 2 \(line 2\): field 'hash_ids' is missing"),
    ],
)
def test_a_bad_hash_names_the_row_and_the_field(tmp_path, bad, expect):
    from batch_env.workload import make_workload

    row = dict(GOOD[1])
    for k, v in bad.items():
        if v is ...:
            del row[k]
        else:
            row[k] = v
    path = _jsonl(tmp_path / "t.jsonl", [GOOD[0], row])
    with pytest.raises(ValueError, match=expect) as err:
        make_workload(_trace(path))
    assert "\n" not in str(err.value)


def test_a_block_size_that_does_not_divide_the_hashed_block_is_refused(tmp_path):
    import gymnasium as gym

    path = _jsonl(tmp_path / "t.jsonl", GOOD)
    with pytest.raises(
        ValueError,
        match=r"block_size=24 does not divide the workload's prefix blocks of 512 tokens",
    ):
        gym.make("batch_env/LLMBatching-v1", workload=_trace(path), block_size=24)
    env = gym.make(
        "batch_env/LLMBatching-v1", workload=_trace(path, prefix_block_tokens=48), block_size=24
    )
    assert env.unwrapped.server.prefix_ratio == 2  # 48-token hashed blocks: two of 24


def test_caching_asked_for_without_prefix_information_says_how_to_add_it(tmp_path):
    import gymnasium as gym

    with pytest.raises(
        ValueError,
        match=r"prefix_caching=True needs a workload whose prompts carry prefix information.*hash_ids.*prefix_caching=False",
    ):
        gym.make("batch_env/LLMBatching-v1", prefix_caching=True)
    with pytest.raises(
        ValueError, match=r"prefix_caching='yes' is invalid: expected True, False or None"
    ):
        gym.make("batch_env/LLMBatching-v1", prefix_caching="yes")
    # a trace with hashes turns it on by default; False turns it off
    path = _jsonl(tmp_path / "t.jsonl", GOOD)
    assert (
        gym.make("batch_env/LLMBatching-v1", workload=_trace(path)).unwrapped.server.prefix_ratio
        == 32
    )
    off = gym.make("batch_env/LLMBatching-v1", workload=_trace(path), prefix_caching=False)
    assert off.unwrapped.server.prefix_ratio is None
    assert not off.unwrapped.server.state.kv.prefix


def test_the_shipped_mooncake_traces_are_the_upstream_files():
    """The gzipped files decompress to the upstream bytes (SHA-256 of the FAST'25 release)."""
    import hashlib

    upstream = {
        "mooncake_conversation_trace.jsonl.gz": "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
        "mooncake_synthetic_trace.jsonl.gz": "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131",
    }
    for name, sha in upstream.items():
        data = gzip.decompress((MOONCAKE.parent / name).read_bytes())
        assert hashlib.sha256(data).hexdigest() == sha
