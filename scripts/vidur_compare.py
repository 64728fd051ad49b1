"""The cluster against vidur's on the same workload (issue 66, item 6): this project's side.

vidur (microsoft/vidur; PyPI ``vidur`` 0.0.26) simulates a cluster of LLM replicas
behind a global scheduler. The comparison's workload, as vidur's command line states
it: Llama-2-7B on A100s at TP 1, the ``round_robin`` global scheduler, Poisson arrivals,
every request 512 prompt and 128 output tokens, 4,000 requests, at 2, 8 and 32 replicas
with 3 and 8 requests/s per replica; two replica schedulers, each against its
counterpart here (:data:`SETTINGS`): vidur's ``vllm`` (vLLM V0: prefill first, no
chunking, a batch cap of 128, 4,096 tokens a batch, 16-token blocks) against
``vllm-v0``, and its ``sarathi`` (chunked prefill, 512-token chunks, cap 128) against
``chunked`` at a 512-token budget. Here: an :class:`~batch_env.llm.cluster.LLMCluster`
of ``llama-2-7b-a100`` replicas, round robin reading nothing (so the replicas run
lazily), one episode of 4,000 summary requests (and the arrivals routed while they
drain, whose work counts too); CPU is the process's for the episode (the build
excluded), per summary request. ``vllm-v0`` runs every iteration through its scheduler
(the decode-only stretches in one loop exist for ``chunked`` only), so it is the slower
of the two here.

vidur's figures (:data:`VIDUR`) were measured on this machine on 2026-12-07 in a
separate environment (vidur 0.0.26 and its dependencies, 1.3 GB; its event loop's CPU
only, its execution-time predictor trained and cached before), with two departures
from a plain run that ``docs/speed.md`` states: vidur fetches its profiling data from
HuggingFace, which this machine cannot reach, so its MLP profile is the one in the
microsoft/vidur repository (``data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/
mlp.csv``) and its attention profile is synthetic (the repository's ``attention.csv``
could not be fetched; decode times fitted to the rows that could be read, prefill from
FLOPs at 150 TFLOP/s): vidur's speed is its own, its latencies are not A100 figures.

Runtime: about a minute.

    python scripts/vidur_compare.py [--requests 4000]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Any

from batch_env.llm.cluster import LLMCluster

#: vidur 0.0.26 on this machine (2026-12-07, both schedulers timed in one sitting, the
#: lower of two runs): (scheduler, replicas, requests/s per replica) -> (event-loop CPU s
#: for 4,000 requests, e2e mean s, TTFT mean ms, TPOT mean ms: ``request_e2e_time``,
#: ``prefill_e2e_time``, ``decode_time_execution_plus_preemption_normalized`` of its
#: ``request_metrics.csv``)
VIDUR: dict[tuple[str, int, float], tuple[float, float, float, float]] = {
    ("vllm", 2, 3.0): (8.81, 1.558, 40.7, 11.85),
    ("vllm", 8, 3.0): (8.82, 1.527, 40.5, 11.61),
    ("vllm", 32, 3.0): (9.32, 1.519, 40.5, 11.55),
    ("vllm", 2, 8.0): (3.00, 3.290, 46.2, 25.35),
    ("vllm", 8, 8.0): (3.34, 3.166, 43.9, 24.39),
    ("vllm", 32, 8.0): (3.64, 2.872, 43.2, 22.10),
    ("sarathi", 2, 3.0): (9.05, 1.521, 53.6, 11.47),
    ("sarathi", 8, 3.0): (9.11, 1.496, 52.6, 11.28),
    ("sarathi", 32, 3.0): (9.91, 1.493, 52.7, 11.25),
    ("sarathi", 2, 8.0): (3.64, 2.795, 76.1, 21.24),
    ("sarathi", 8, 8.0): (3.41, 2.679, 66.9, 20.41),
    ("sarathi", 32, 8.0): (3.95, 2.583, 65.3, 19.67),
}
#: each vidur replica scheduler's counterpart here: vidur's ``vllm`` (vLLM V0, batch
#: cap 128, 4,096 tokens a batch) is ``vllm-v0``; its ``sarathi`` (chunked prefill,
#: chunk 512, cap 128) is ``chunked`` with a 512-token budget
SETTINGS: dict[str, dict[str, Any]] = {
    "vllm": {"scheduler": "vllm-v0", "max_num_batched_tokens": 4096},
    "sarathi": {"scheduler": "chunked", "max_num_batched_tokens": 512},
}
COMMON: dict[str, Any] = {
    "max_num_seqs": 128,
    "max_model_len": 4096,
    "lengths": {"kind": "fixed", "prompt_tokens": 512, "output_tokens": 128},
}


def ours(scheduler: str, n: int, rate: float, requests: int, seed: int = 0) -> dict[str, float]:
    """One episode on ``n`` replicas at ``rate`` requests/s each, round robin, at the
    counterpart of vidur's ``scheduler``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LLMCluster.build(
            [{"profile": "llama-2-7b-a100"}] * n,
            {"kind": "poisson", "rate_per_s": rate * n},
            horizon_requests=requests,
            **COMMON,
            **SETTINGS[scheduler],
        )
    t0 = time.process_time()
    cluster.reset(seed=seed)
    s = cluster.run(lambda _cluster, g: g % n)  # round robin
    cpu = time.process_time() - t0
    return {
        "cpu_s": cpu,
        "e2e_s": s["latency_mean_ms"] / 1e3,
        "ttft_ms": s["ttft_mean_ms"],
        "tpot_ms": s["tpot_mean_ms"],
        "routed": len(cluster.routed),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=4000, help="summary requests (4000)")
    args = ap.parse_args(argv)
    if args.requests < 100:
        print("error: --requests must be >= 100", file=sys.stderr)
        return 2
    print(
        "| vidur's scheduler (ours) | replicas | req/s a replica | ours: CPU s | ours: "
        "requests per CPU s | vidur: requests per CPU s | ratio | ours: e2e mean s, TTFT "
        "ms, TPOT ms | vidur's (synthetic attention) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (sched, n, rate), (v_cpu, v_e2e, v_ttft, v_tpot) in VIDUR.items():
        r = ours(sched, n, rate, args.requests)
        mine, theirs = args.requests / r["cpu_s"], 4000 / v_cpu
        print(
            f"| {sched} ({SETTINGS[sched]['scheduler']}) | {n} | {rate:g} | {r['cpu_s']:.2f} | "
            f"{mine:,.0f} | {theirs:,.0f} | {mine / theirs:.0f}x | {r['e2e_s']:.3f}, "
            f"{r['ttft_ms']:.1f}, {r['tpot_ms']:.2f} | {v_e2e:.3f}, {v_ttft:.1f}, {v_tpot:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
