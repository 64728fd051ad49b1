"""What a cluster of LLM replicas costs the simulator (issue 66, item 6): an
:class:`~batch_env.llm.cluster.LLMCluster` of ``N`` identical replicas behind round robin,
each replica at the same load whatever ``N`` (so the cluster's arrival rate grows with
it), CPU per routed request with the router's view of every replica built at each
arrival (what a router that reads the replicas pays), against one replica in the same
round (the reference: a lone server's cost through the cluster).

The ratio to one replica is what the issue's claim is about: the cost of a cluster
should grow with its requests, not with replicas times requests. Today it does not
quite: each arrival ends every replica's decode-only stretch (the stretch must stop
where the router reads the replica), so the iterations a replica starts in Python grow
with the cluster's arrival rate (``docs/speed.md``: LLM clusters)."""

from __future__ import annotations

import functools
import time
import warnings
from typing import Any

from batch_env.llm.cluster import LLMCluster

from .common import median_ratio, rounds

#: the cluster benchmark's replicas and load: Llama-2-7B on an A100 (the default
#: profile) at 3 requests/s a replica, Poisson arrivals, the default lengths
CLUSTER_BENCH_SETTINGS: dict[str, Any] = {
    "profile": "llama-2-7b-a100",
    "rate_per_replica_per_s": 3.0,
}


def cluster_cost(n: int, requests: int, seed: int = 0, view: bool = True) -> dict[str, float]:
    """One episode of ``requests`` summary requests on ``n`` replicas behind round robin
    (:data:`CLUSTER_BENCH_SETTINGS`): CPU seconds, requests routed, the summary's mean
    latency and completions. ``view``: build the router's view at each arrival."""
    rate = CLUSTER_BENCH_SETTINGS["rate_per_replica_per_s"] * n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LLMCluster.build(
            [{"profile": CLUSTER_BENCH_SETTINGS["profile"]}] * n,
            {"kind": "poisson", "rate_per_s": rate},
            horizon_requests=requests,
        )
    t0 = time.process_time()
    cluster.reset(seed=seed)
    k = 0
    while (g := cluster.next_arrival()) is not None:
        if view:
            cluster.replica_view(g)
        cluster.route(k % n)
        k += 1
    s = cluster.summary()
    return {
        "cpu_s": time.process_time() - t0,
        "routed": float(k),
        "completed": float(s["completed"]),
        "latency_mean_ms": float(s["latency_mean_ms"]),
    }


def bench_cluster(
    replicas: tuple[int, ...] = (2, 8, 32), requests: int = 2000, repeats: int = 3, seed: int = 0
) -> dict[str, Any]:
    """CPU per routed request of a cluster of each size in ``replicas`` (one episode of
    ``requests`` summary requests, :func:`cluster_cost`) and of one replica, back to back
    in each of ``repeats`` rounds (:func:`rounds`): the best round's CPU per request and
    the median of the rounds' ratios to one replica."""
    runs: dict[str, list[dict[str, float]]] = {}

    def timer(n: int) -> float:
        r = cluster_cost(n, requests, seed)
        runs.setdefault(str(n), []).append(r)
        return r["cpu_s"] / r["routed"]

    sizes = (1, *[n for n in replicas if n != 1])
    costs = rounds({str(n): functools.partial(timer, n) for n in sizes}, repeats)
    out: dict[str, Any] = {
        **CLUSTER_BENCH_SETTINGS,
        "router": "round-robin",
        "requests": requests,
        "repeats": repeats,
        "sizes": {},
    }
    for n in sizes:
        best = min(runs[str(n)], key=lambda r: r["cpu_s"] / r["routed"])
        out["sizes"][str(n)] = {
            "cpu_us_per_request": 1e6 * best["cpu_s"] / best["routed"],
            "cost_ratio_vs_one_replica": median_ratio(costs[str(n)], costs["1"]),
            "latency_mean_ms": best["latency_mean_ms"],
        }
    return out


def print_cluster(cb: dict[str, Any] | None) -> None:
    """``batch-env bench``'s cluster line: CPU per request at each size, and its ratio to
    one replica's."""
    if cb:
        parts = [
            f"{n}: {v['cpu_us_per_request']:,.0f} us ({v['cost_ratio_vs_one_replica']:.2f}x)"
            for n, v in cb["sizes"].items()
        ]
        print(
            "LLM cluster, round robin, CPU a request by replicas (x one replica's): "
            + "; ".join(parts)
        )
