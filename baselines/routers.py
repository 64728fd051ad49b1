"""Routers for ``LLMRouting-v0``: which replica takes each request, as shipped routers
decide it. Each reads only ``info["replicas"]`` (:meth:`batch_env.llm.cluster.LLMCluster.
replica_view`: queues, KV and cache occupancy, the arriving request's cached blocks on
each replica) and ``info["prompt_tokens"]``, and never picks a masked replica.

The rules and default parameters are those of the routers' code, read at the commits
that ``docs/routers.md`` names (where its sources and the deviations below are given):

* ``round-robin``, ``random-replica`` and ``least-outstanding``: vidur's global
  schedulers (``round_robin``, ``random``, ``lor``: fewest requests not yet pulled into a
  batch, ties to the lowest index);
* ``least-kv``: the fewest KV blocks in use (a load rule of its own, the KV-occupancy
  half of Dynamo's cost);
* ``power-of-two``: SGLang's ``power_of_two``: two distinct replicas at random, the one
  with fewer requests in flight (ties to the first drawn);
* ``sglang-cache-aware``: SGLang's ``cache_aware`` with its launch defaults
  (``cache_threshold`` 0.3, ``balance_abs_threshold`` 64, ``balance_rel_threshold`` 1.5):
  when the in-flight loads are imbalanced (max - min above the absolute threshold and
  max above min times the relative one) the least loaded; otherwise the replica with
  the longest cached prefix if it covers more than ``cache_threshold`` of the prompt,
  else the least loaded;
* ``dynamo-kv``: NVIDIA Dynamo's KV router cost, ``overlap_score_weight`` 1.0,
  temperature 0: ``weight * prefill_blocks + decode_blocks``, lowest first, ties to the
  smallest cache then at random;
* ``llm-d``: llm-d's default scheduling profile, scorers ``queue`` (weight 2),
  ``kv-cache-utilization`` (2) and ``prefix-cache`` (3), max-score picker (ties at
  random);
* ``sed``: the Linux Virtual Server's shortest expected delay (``ip_vs_sed.c``): the
  fewest ``(requests in flight + 1) / weight``, each replica's weight its nominal decode
  rate (``info["replicas"]["speed"]``: what an operator configures for a GPU; ties to
  the lowest index). Not one of issue 66's list: the load balancers' own rule for
  servers of different speeds, added because on a cluster of A100s and H200s it beats
  every router above by 6-8% (``docs/results/routing-candidates.md``).

Deviations, all documented: the cache-aware rules read each replica's actual prefix
cache (the quantity SGLang's router-side character tree and llm-d's approximate
indexer estimate; Dynamo reads it through KV events); SGLang's and Dynamo's loads are
the requests in flight at the replica, which their router-side counters track.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from batch_env.checks import check_number


def _check_routing(env: gym.Env | None, name: str) -> None:
    """Refuse an env that is not a routing env (its info carries no ``replicas``)."""
    if env is not None and not hasattr(env.unwrapped, "cluster"):
        raise ValueError(
            f"policy {name!r} routes requests between replicas: make it for "
            f"batch_env/LLMRouting-v0 (not {type(env.unwrapped).__name__})"
        )


class _Router:
    """A router: ``act(obs, info)`` picks an unmasked replica from ``info["replicas"]``.

    :param env: the routing env (checked), or ``None``.
    :param seed: the seed of its own draws (random routers and random tie-breaks); each
        episode's draws come from it and the episode's seed when ``reset`` is given one.
    """

    name = "router"

    def __init__(self, env: gym.Env | None = None, seed: int = 0) -> None:
        _check_routing(env, self.name)
        self.seed = int(check_number("seed", seed, low=0, integer=True))
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        """A new episode: its draws from ``seed`` (the episode's) and the router's own."""
        key = [self.seed] if seed is None else [self.seed, int(seed)]
        self._rng = np.random.default_rng(key)
        self._counter = 0

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The replica that takes the arriving request."""
        v = info["replicas"]
        return int(self.choose(v, v["mask"], info))

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        """The rule (each router's own)."""
        raise NotImplementedError

    def _first_min(self, x: np.ndarray, mask: np.ndarray) -> int:
        """The lowest index of the least ``x`` among the unmasked replicas."""
        return int(np.argmin(np.where(mask, x, np.inf)))

    def _random_among(self, best: np.ndarray) -> int:
        """One of the indices ``best`` (a boolean array), uniformly at random."""
        idx = np.flatnonzero(best)
        return int(idx[0] if len(idx) == 1 else idx[self._rng.integers(len(idx))])


class RoundRobinRouter(_Router):
    """vidur's ``round_robin``: the replicas in turn (a masked one is passed over)."""

    name = "round-robin"

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        n = len(mask)
        for k in range(n):
            r = (self._counter + k) % n
            if mask[r]:
                self._counter = r + 1
                return r
        raise ValueError("round-robin: every replica is masked")


class RandomRouter(_Router):
    """vidur's ``random``: a replica uniformly at random (among the unmasked)."""

    name = "random-replica"

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        return self._random_among(mask)


class LeastOutstandingRouter(_Router):
    """vidur's ``lor``: the fewest requests not yet pulled into a batch (its waiting
    queue and those routed to it not yet admitted), ties to the lowest index."""

    name = "least-outstanding"

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        return self._first_min(v["waiting"], mask)


class LeastKVRouter(_Router):
    """The fewest KV blocks in use (as a share of the replica's), ties to the lowest
    index."""

    name = "least-kv"

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        return self._first_min(v["kv_usage"], mask)


class PowerOfTwoRouter(_Router):
    """SGLang's ``power_of_two``: two distinct unmasked replicas uniformly at random, the
    one with fewer requests in flight; a tie goes to the first drawn."""

    name = "power-of-two"

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        ok = np.flatnonzero(mask)
        if len(ok) == 1:
            return int(ok[0])
        n = len(ok)
        i1 = int(self._rng.integers(n))
        i2 = (i1 + 1 + int(self._rng.integers(n - 1))) % n
        w1, w2 = int(ok[i1]), int(ok[i2])
        load = v["in_flight"]
        return w1 if load[w1] <= load[w2] else w2


class SGLangCacheAwareRouter(_Router):
    """SGLang's ``cache_aware`` (module docstring), its launch defaults.

    :param cache_threshold: the prompt share a cached prefix must exceed to be followed.
    :param balance_abs_threshold: in-flight requests between the most and least loaded
        replica above which the load is imbalanced (and ...)
    :param balance_rel_threshold: ... the most loaded above this times the least.
    :param tree: where the cached prefix is read: ``"cache"`` (default), the replica's
        actual prefix cache; ``"router"``, the prompts routed to it, as SGLang's own
        router tree holds them (``routed_prefix_tokens``: a prefix counts from the moment
        it is routed, computed or not; :mod:`batch_env.llm.router_tree`).
    :param on_miss: where a request goes when no prefix passes the threshold:
        ``"least-loaded"`` (default, the code read) or ``"smallest-tree"``, the replica
        holding the fewest cached (or, with ``tree="router"``, routed) tokens, as the
        router of SGLang v0.4 (December 2024) did.

    ``SGLangCacheAwareRouter(tree="router", on_miss="smallest-tree", cache_threshold=0.5,
    balance_abs_threshold=32, balance_rel_threshold=1.0001)`` is the router of SGLang
    v0.4 with its defaults then (``sgl-router`` 0.1's ``RouterArgs``).
    """

    name = "sglang-cache-aware"

    def __init__(
        self,
        env: gym.Env | None = None,
        cache_threshold: float = 0.3,
        balance_abs_threshold: int = 64,
        balance_rel_threshold: float = 1.5,
        seed: int = 0,
        tree: str = "cache",
        on_miss: str = "least-loaded",
    ) -> None:
        if tree not in ("cache", "router"):
            raise ValueError(f"tree={tree!r}: expected 'cache' or 'router'")
        if on_miss not in ("least-loaded", "smallest-tree"):
            raise ValueError(f"on_miss={on_miss!r}: expected 'least-loaded' or 'smallest-tree'")
        self.tree, self.on_miss = tree, on_miss
        self.cache_threshold = check_number("cache_threshold", cache_threshold, low=0.0, high=1.0)
        self.balance_abs_threshold = check_number(
            "balance_abs_threshold", balance_abs_threshold, low=0, integer=True
        )
        self.balance_rel_threshold = check_number(
            "balance_rel_threshold", balance_rel_threshold, low=1.0
        )
        super().__init__(env, seed)

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        load = v["in_flight"]
        hi, lo = int(load.max()), int(load.min())  # over every replica, as SGLang's
        if hi - lo > self.balance_abs_threshold and hi > lo * self.balance_rel_threshold:
            return self._first_min(load, mask)  # imbalanced: the shortest queue
        router = self.tree == "router"
        held = v["routed_prefix_tokens"] if router else v["prefix_blocks"] * v["block_size"]
        matched = np.where(mask, held, -1)
        best = int(np.argmax(matched))
        prompt = info["prompt_tokens"]
        rate = matched[best] / prompt if prompt else 0.0
        if rate > self.cache_threshold:
            return best  # a cache hit: the longest cached prefix
        if self.on_miss == "least-loaded":
            return self._first_min(load, mask)
        size = v["routed_tokens"] if router else v["cached_blocks"] * v["block_size"]
        return self._first_min(size, mask)  # the smallest tree


class DynamoKVRouter(_Router):
    """NVIDIA Dynamo's KV router cost (module docstring): for each replica,
    ``overlap_score_weight * prefill_blocks + decode_blocks``, where ``prefill_blocks``
    is its prompt tokens still to prefill plus the arriving prompt's uncached tokens,
    over the block size, and ``decode_blocks`` its blocks in use plus the arriving
    prompt's uncached blocks; the lowest, ties to the smallest cache, then at random.

    :param overlap_score_weight: the weight of the prefill term (Dynamo's default 1.0).
    """

    name = "dynamo-kv"

    def __init__(
        self, env: gym.Env | None = None, overlap_score_weight: float = 1.0, seed: int = 0
    ) -> None:
        self.overlap_score_weight = check_number(
            "overlap_score_weight", overlap_score_weight, low=0.0
        )
        super().__init__(env, seed)

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        bs = v["block_size"]
        overlap = v["prefix_blocks"]
        new_tokens = np.maximum(info["prompt_tokens"] - overlap * bs, 0)
        prefill_blocks = (new_tokens + v["prefill_tokens"]) / bs
        decode_blocks = v["kv_blocks_used"] + np.maximum(v["request_blocks"] - overlap, 0)
        logit = self.overlap_score_weight * prefill_blocks + decode_blocks
        logit = np.where(mask, logit, np.inf)
        best = logit == logit.min()
        if best.sum() > 1:  # the smallest cache among them, then at random
            tree = np.where(best, v["cached_blocks"], np.inf)
            best = tree == tree.min()
        return self._random_among(best)


class LLMDRouter(_Router):
    """llm-d's default scheduling profile (module docstring): the sum of weighted scores
    in [0, 1], the highest, ties at random.

    :param queue_weight: the queue scorer's weight (``(maxQ - q) / (maxQ - minQ)`` of
        the waiting requests over the candidates, 1 when all are equal).
    :param kv_cache_weight: the KV-utilization scorer's (``1 - KV usage``).
    :param prefix_weight: the prefix-cache scorer's (cached blocks / the prompt's blocks).
    """

    name = "llm-d"

    def __init__(
        self,
        env: gym.Env | None = None,
        queue_weight: float = 2.0,
        kv_cache_weight: float = 2.0,
        prefix_weight: float = 3.0,
        seed: int = 0,
    ) -> None:
        self.queue_weight = check_number("queue_weight", queue_weight, low=0.0)
        self.kv_cache_weight = check_number("kv_cache_weight", kv_cache_weight, low=0.0)
        self.prefix_weight = check_number("prefix_weight", prefix_weight, low=0.0)
        super().__init__(env, seed)

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        q = v["waiting"].astype(np.float64)
        qmin, qmax = q[mask].min(), q[mask].max()
        queue = (qmax - q) / (qmax - qmin) if qmax > qmin else np.ones_like(q)
        kv = 1.0 - v["kv_usage"]
        total = v["request_blocks"]
        prefix = np.where(total > 0, v["prefix_blocks"] / np.maximum(total, 1), 0.0)
        score = (
            self.queue_weight * np.clip(queue, 0, 1)
            + self.kv_cache_weight * np.clip(kv, 0, 1)
            + self.prefix_weight * np.clip(prefix, 0, 1)
        )
        score = np.where(mask, score, -np.inf)
        return self._random_among(score == score.max())


class SEDRouter(_Router):
    """The Linux Virtual Server's ``sed`` (shortest expected delay; module docstring):
    the fewest ``(in_flight + 1) / speed`` among the unmasked replicas."""

    name = "sed"

    def choose(self, v: dict[str, np.ndarray], mask: np.ndarray, info: dict[str, Any]) -> int:
        return self._first_min((v["in_flight"] + 1.0) / np.maximum(v["speed"], 1e-12), mask)


#: the routers by name (``baselines.make``)
ROUTERS: dict[str, type[_Router]] = {
    cls.name: cls
    for cls in (
        RoundRobinRouter,
        RandomRouter,
        LeastOutstandingRouter,
        LeastKVRouter,
        PowerOfTwoRouter,
        SGLangCacheAwareRouter,
        DynamoKVRouter,
        LLMDRouter,
        SEDRouter,
    )
}
