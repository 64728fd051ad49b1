"""What a cluster of LLM replicas costs the simulator (issue 66, item 6): an
:class:`~batch_env.llm.cluster.LLMCluster` of ``N`` identical replicas behind round robin,
each replica at the same load whatever ``N`` (so the cluster's arrival rate grows with
it), CPU per routed request with the router's view of every replica built at each
arrival (what a router that reads the replicas pays), against one replica in the same
round (the reference: a lone server's cost through the cluster).

The ratio to one replica is what the issue's claim is about: the cost of a cluster
should grow with its requests, not with replicas times requests. With a router that
reads every replica at every arrival it cannot (each arrival runs every replica up to
it); with one that reads nothing, the replicas are run lazily
(:mod:`batch_env.llm.cluster`), so both are timed: ``view`` (the router's view built
at each arrival, as ``LLMRouting-v0`` does) and ``blind`` (round robin alone)
(``docs/speed.md``: LLM clusters)."""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable
from typing import Any

from batch_env.llm.cluster import LLMCluster

from .common import median_ratio, rounds

#: the cluster benchmark's replicas and load: Llama-2-7B on an A100 (the default
#: profile) at 3 requests/s a replica, Poisson arrivals, the default lengths
CLUSTER_BENCH_SETTINGS: dict[str, Any] = {
    "profile": "llama-2-7b-a100",
    "rate_per_replica_per_s": 3.0,
}


def _round_robin(n: int, view: bool) -> Callable[[LLMCluster, int], int]:
    """Round robin over ``n`` replicas for :meth:`LLMCluster.run` (arrival ``g`` to
    replica ``g % n``), building the router's view of every replica first if ``view``."""

    def route(cluster: LLMCluster, g: int) -> int:
        if view:
            cluster.replica_view(g)
        return g % n

    return route


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
    s = cluster.run(_round_robin(n, view))
    return {
        "cpu_s": time.process_time() - t0,
        "routed": float(len(cluster.routed)),
        "completed": float(s["completed"]),
        "latency_mean_ms": float(s["latency_mean_ms"]),
    }


def simulated_minute(n: int, seed: int = 0) -> dict[str, float]:
    """One simulated minute of arrivals on ``n`` replicas (:data:`CLUSTER_BENCH_SETTINGS`:
    3 requests/s a replica, so ``180 n`` summary requests, and the arrivals routed while
    they drain), round robin alone: CPU seconds of the episode and per summary request,
    the simulated seconds, and the process's peak memory (MB). Not in ``batch-env
    bench`` (at 1,024 replicas it takes half a minute): ``docs/speed.md``'s largest
    cluster in a minute."""
    import resource

    rate = CLUSTER_BENCH_SETTINGS["rate_per_replica_per_s"]
    requests = int(60 * rate * n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LLMCluster.build(
            [{"profile": CLUSTER_BENCH_SETTINGS["profile"]}] * n,
            {"kind": "poisson", "rate_per_s": rate * n},
            horizon_requests=requests,
        )
    t0 = time.process_time()
    cluster.reset(seed=seed)
    s = cluster.run(_round_robin(n, False))
    cpu = time.process_time() - t0
    return {
        "replicas": float(n),
        "summary_requests": float(requests),
        "routed": float(len(cluster.routed)),
        "cpu_s": cpu,
        "cpu_us_per_request": 1e6 * cpu / requests,
        "simulated_s": float(s["elapsed_s"]),
        "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def bench_cluster(
    replicas: tuple[int, ...] = (2, 8, 32), requests: int = 2000, repeats: int = 3, seed: int = 0
) -> dict[str, Any]:
    """CPU per routed request of a cluster of each size in ``replicas`` (one episode of
    ``requests`` summary requests, :func:`cluster_cost`) and of one replica, back to back
    in each of ``repeats`` rounds (:func:`rounds`): the best round's CPU per request and
    the median of the rounds' ratios to one replica."""
    runs: dict[str, list[dict[str, float]]] = {}

    def timer(n: int, view: bool) -> float:
        r = cluster_cost(n, requests, seed, view)
        runs.setdefault(f"{n}/{view}", []).append(r)
        return r["cpu_s"] / r["routed"]

    sizes = (1, *[n for n in replicas if n != 1])
    timers: dict[str, Callable[[], float]] = {
        f"{n}/{view}": functools.partial(timer, n, view) for n in sizes for view in (True, False)
    }
    costs = rounds(timers, repeats)
    out: dict[str, Any] = {
        **CLUSTER_BENCH_SETTINGS,
        "router": "round-robin",
        "requests": requests,
        "repeats": repeats,
        "sizes": {},
    }
    for n in sizes:
        row: dict[str, float] = {}
        for view, name in ((True, "view"), (False, "blind")):
            key = f"{n}/{view}"
            best = min(runs[key], key=lambda r: r["cpu_s"] / r["routed"])
            row[f"cpu_us_per_request_{name}"] = 1e6 * best["cpu_s"] / best["routed"]
            row[f"cost_ratio_vs_one_replica_{name}"] = median_ratio(costs[key], costs[f"1/{view}"])
            row["latency_mean_ms"] = best["latency_mean_ms"]
        out["sizes"][str(n)] = row
    return out


def print_cluster(cb: dict[str, Any] | None) -> None:
    """``batch-env bench``'s cluster line: CPU per request at each size, and its ratio to
    one replica's."""
    if cb:
        for name, what in (("view", "every replica read at each arrival"), ("blind", "alone")):
            parts = [
                f"{n}: {v['cpu_us_per_request_' + name]:,.0f} us "
                f"({v['cost_ratio_vs_one_replica_' + name]:.2f}x)"
                for n, v in cb["sizes"].items()
            ]
            print(
                f"LLM cluster, round robin ({what}), CPU a request by replicas "
                "(x one replica's): " + "; ".join(parts)
            )
