"""Hold the cluster's prefix caching and SGLang's cache-aware router against a published
run (issue 63, item 5: the second run; issue 66's cluster and routers).

Source: The SGLang Team, "SGLang v0.4: Zero-Overhead Batch Scheduler, Cache-Aware Load
Balancer, Faster Structured Outputs", LMSYS blog, 2024-12-04, section "Cache-Aware
Load Balancer" (repository lm-sys/lm-sys.github.io at commit
d99b493ac96b7f87a4c0f9ab171ac92ee2bb8b2d, ``blog/2024-12-04-sglang-v0-4.md``): on 8 x
A100 80GB, Llama-3.1-8B-Instruct at data parallelism 8, the workload of SGLang PR #1990
(``bench_serving.py --dataset-name generated-shared-prefix``), throughput 158,596
token/s and a cache hit rate of 75% with the cache-aware router against 82,665 token/s
and 20% without it (``sglang.launch_server --dp-size 8``: round robin, the table's
"SGLang v0.3"). The same figures are the table of SGLang PR #2170 (2024-11-25), whose
command is ``bench_serving.py --dataset-name generated-shared-prefix
--generated-input-path ~/.cache/gen.json --generated-input-save-path ~/.cache/gen.json``.
What is checked is the ratio of the two throughputs (1.92, the post's "up to 1.9x") and
each throughput; the hit rates are printed beside them.

The workload, as ``bench_serving.py``'s defaults then: 64 groups of 16 prompts, each
prompt a group's 2,048-token system prompt and a 128-token question of its own, 256
output tokens (``ignore_eos``), all sent at once (``--request-rate inf``). **In group
order** (``--arrival groups``, the default): every prompt of group 0, then group 1, and
so on. That is the order of the benchmark from PR #1990 (2024-11-10) until PR #2170
(merged 2024-11-24): its generator appended the prompts group by group and sent the list
as it stood (PR #2093's ``random.shuffle(questions)`` only drew which question went to
which group), and the ``--generated-input-path`` file of #2170's command was that list,
pickled; #2170 itself removed those two options and began to shuffle single prompts
(``random.shuffle(input_requests)``, what ``--arrival shuffled`` draws from ``--seeds``
seeds; the table then gives the mean over them and the range). Read from the history of
``python/sglang/bench_serving.py`` (commits 8169c6f4, 55bd97f3, cbedd1db, 4b0a1c93 of
sgl-project/sglang). Here each prompt is 2,176 tokens with 64-token block hashes (the
system prompt's 32 blocks shared by its group, two of its own), written to a temporary
trace.

The servers, as SGLang v0.4's defaults: each replica ``llama-3.1-8b-a100`` with prefix
caching (16-token blocks: SGLang matches single tokens, and every shared prefix here is
whole blocks), a chunked-prefill budget of 8,192 tokens, the admission order
``longest-prefix`` (SGLang's ``lpm``, which turns to FCFS above 128 waiting requests),
512 running requests at most (SGLang's bound is larger; no replica holds more than 170
here). The routers: ``round-robin`` (SGLang's data-parallel controller) and SGLang v0.4's
``cache_aware`` with its defaults then (``sgl-router`` 0.1: ``cache_threshold`` 0.5,
``balance_abs_threshold`` 32, ``balance_rel_threshold`` 1.0001, the router's own tree of
what it routed, the smallest tree on a miss:
:class:`baselines.routers.SGLangCacheAwareRouter`). Throughput in tokens per second is
the prompt tokens over the time to the last completion (the benchmark printed its input
and output token throughputs then; "token/s" is read as the input's: the output's
cannot reach 158,596 here, 262,144 tokens in 1.65 s); the total (input and output) is
printed too. Not modelled: the HTTP server, the tokenizer (one process for the 1,024
prompts of about 2,200 tokens) and SGLang's own engine overheads.

Two hit rates are printed. The cache's (``prefix_hit_rate``: prompt tokens found cached
at admission over all prompt tokens) and **SGLang's logged one**, which the post quotes:
SGLang v0.3-v0.4's scheduler added, at every prefill batch, each request's
``len(req.prefix_indices)`` as hit tokens and its new tokens as the rest
(``schedule_policy.PrefillAdder``, ``scheduler.log_prefill_stats``), and a chunked
prompt's ``prefix_indices`` hold its earlier chunks (``cache_unfinished_req``), so every
continuation chunk counts the prompt's tokens computed so far as hits. Here that is the
``tokens already computed`` of every chunk the replicas' schedulers start over the tokens
already computed plus the chunk's (counted by wrapping
:meth:`batch_env.llm.chunked.ChunkedScheduler.start` for the run: a measurement, nothing
it returns changes).

Runtime: about a second a run.

    python scripts/validate_cache_aware_routing.py [--arrival shuffled --seeds 5] [--order fcfs]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from baselines.routers import RoundRobinRouter, SGLangCacheAwareRouter
from batch_env.llm.chunked import ChunkedScheduler
from batch_env.llm.cluster import LLMCluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_replay import trace_workload  # noqa: E402 (one trace workload, shared)

CITATION = (
    'The SGLang Team, "SGLang v0.4: Zero-Overhead Batch Scheduler, Cache-Aware Load '
    'Balancer, Faster Structured Outputs", LMSYS blog, 2024-12-04 '
    "(lm-sys/lm-sys.github.io@d99b493, blog/2024-12-04-sglang-v0-4.md); SGLang PR #2170"
)
#: (router, published token/s, published cache hit rate)
PUBLISHED = (("cache-aware (v0.4)", 158_596, 0.75), ("round robin (v0.3)", 82_665, 0.20))
GROUPS, PER_GROUP, SYSTEM, QUESTION, OUTPUT, HASH_BLOCK = 64, 16, 2048, 128, 256, 64
REPLICAS, PROFILE, BUDGET = 8, "llama-3.1-8b-a100", 8192
ARRIVALS = ("groups", "shuffled")


def arrival_order(arrival: str, seed: int) -> list[int]:
    """The prompts (``group * 16 + question``) in the order they are sent: group by
    group (``groups``), or shuffled one by one with ``seed`` (``shuffled``)."""
    n = GROUPS * PER_GROUP
    if arrival == "groups":
        return list(range(n))
    return np.random.default_rng(seed).permutation(n).tolist()


def write_trace(path: Path, order: list[int]) -> None:
    """The generated-shared-prefix workload, its prompts in ``order``, every prompt at
    time 0 (the last 1 us later: a trace needs two distinct times)."""
    shared, own = SYSTEM // HASH_BLOCK, QUESTION // HASH_BLOCK
    with path.open("w") as f:
        for k, i in enumerate(order):
            g = i // PER_GROUP
            row = {
                "timestamp": 1e-3 if k == len(order) - 1 else 0.0,
                "input_length": SYSTEM + QUESTION,
                "output_length": OUTPUT,
                "hash_ids": [g * shared + j for j in range(shared)]
                + [GROUPS * shared + i * own + j for j in range(own)],
            }
            f.write(json.dumps(row) + "\n")


def router_v04() -> SGLangCacheAwareRouter:
    """SGLang v0.4's cache-aware router with its defaults then."""
    return SGLangCacheAwareRouter(
        cache_threshold=0.5,
        balance_abs_threshold=32,
        balance_rel_threshold=1.0001,
        tree="router",
        on_miss="smallest-tree",
    )


@contextlib.contextmanager
def sglang_logged_hits() -> Iterator[dict[str, int]]:
    """Count, while open, SGLang's logged cache hits over the chunks every chunked
    scheduler starts: ``hit`` the tokens computed before each chunk (its cached prefix or
    its prompt's earlier chunks), ``total`` those plus the chunk's own."""
    counts = {"hit": 0, "total": 0}
    start = ChunkedScheduler.start

    def counted(self: ChunkedScheduler, plan: Any) -> Any:
        for _e, c, x, _nb in plan.chunks:
            counts["hit"] += x
            counts["total"] += x + c
        return start(self, plan)

    ChunkedScheduler.start = counted  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        ChunkedScheduler.start = start  # type: ignore[method-assign]


def simulate(trace: Path, router: Any, order: str = "longest-prefix") -> dict[str, Any]:
    """One run of the 1,024 prompts on the eight replicas at the admission ``order``: the
    cluster's summary, with SGLang's logged hit rate as ``sglang_hit_rate``."""
    workload = trace_workload(
        trace, ("timestamp", "input_length", "output_length"), "ms", HASH_BLOCK
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a trace draws nothing from the seed)
        cluster = LLMCluster.build(
            [{"profile": PROFILE}] * REPLICAS,
            workload,
            horizon_requests=GROUPS * PER_GROUP,
            horizon_s=1e6,
            prefix_caching=True,
            max_num_batched_tokens=BUDGET,
            max_num_seqs=512,
            max_model_len=4096,
            orders=(order,),
        )
    cluster.reset(seed=0)
    router.reset()
    with sglang_logged_hits() as counts:
        while (g := cluster.next_arrival()) is not None:
            v = cluster.replica_view(g)
            info = {"prompt_tokens": cluster.intake.record(g)[0]}
            cluster.route(router.choose(v, v["mask"], info))
    return {**cluster.summary(), "sglang_hit_rate": counts["hit"] / counts["total"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--arrival",
        default="groups",
        help="the order the prompts are sent: groups (default; the benchmark until SGLang "
        "PR #2170) or shuffled (one by one, as bench_serving.py since #2170)",
    )
    ap.add_argument(
        "--seeds", type=int, default=5, help="shuffled orders with --arrival shuffled (default 5)"
    )
    ap.add_argument(
        "--order",
        default="longest-prefix",
        help="the replicas' admission order (default longest-prefix, SGLang's lpm; fcfs: vLLM's)",
    )
    args = ap.parse_args(argv)
    if args.arrival not in ARRIVALS:
        print(f"error: --arrival={args.arrival!r}: groups or shuffled", file=sys.stderr)
        return 2
    if args.seeds < 1:
        print(f"error: --seeds={args.seeds}: must be >= 1", file=sys.stderr)
        return 2
    if args.order not in ("longest-prefix", "fcfs"):
        print(f"error: --order={args.order!r}: longest-prefix or fcfs", file=sys.stderr)
        return 2
    seeds = range(args.seeds if args.arrival == "shuffled" else 1)
    print(f"Source: {CITATION}")
    arrival = "in group order" if args.arrival == "groups" else f"in {len(seeds)} shuffled orders"
    print(
        f"{REPLICAS} x {PROFILE}, {GROUPS} x {PER_GROUP} prompts at once {arrival}, "
        f"admission order {args.order}\n"
    )
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in PUBLISHED}
    own: list[dict[str, Any]] = []  # this project's default rule, reading the caches
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            trace = Path(tmp) / f"gsp{seed}.jsonl"
            write_trace(trace, arrival_order(args.arrival, seed))
            for (name, _, _), router in zip(
                PUBLISHED, (router_v04(), RoundRobinRouter()), strict=True
            ):
                runs[name].append(simulate(trace, router, args.order))
            own.append(simulate(trace, SGLangCacheAwareRouter(), args.order))
    print_table(runs, own)
    return 0


def print_table(runs: dict[str, list[dict[str, Any]]], own: list[dict[str, Any]]) -> None:
    """The table of simulated against published figures, the ratio's row, and the line
    on this project's default rule."""
    prompt_tokens = GROUPS * PER_GROUP * (SYSTEM + QUESTION)
    all_tokens = GROUPS * PER_GROUP * (SYSTEM + QUESTION + OUTPUT)
    print(
        "| router | published token/s | simulated prompt token/s (range) | error | "
        "simulated total token/s | published hit rate (SGLang's log) | simulated, "
        "as SGLang logged it | simulated, the cache's |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    means = {}
    for name, pub, hit in PUBLISHED:
        t = np.array([s["elapsed_s"] for s in runs[name]])
        tps = prompt_tokens / t
        means[name] = tps.mean()
        spread = f" ({tps.min():,.0f} .. {tps.max():,.0f})" if len(t) > 1 else ""
        logged = np.mean([s["sglang_hit_rate"] for s in runs[name]])
        hits = np.mean([s["prefix_hit_rate"] for s in runs[name]])
        print(
            f"| {name} | {pub:,} | {tps.mean():,.0f}{spread} | "
            f"{tps.mean() / pub - 1:+.1%} | {(all_tokens / t).mean():,.0f} | {hit:.0%} | "
            f"{logged:.1%} | {hits:.1%} |"
        )
    (a, pa, _), (b, pb, _) = PUBLISHED
    ratio, pub_ratio = means[a] / means[b], pa / pb
    ratios = [r0["elapsed_s"] / r1["elapsed_s"] for r0, r1 in zip(runs[b], runs[a], strict=True)]
    spread = f" ({min(ratios):.3f} .. {max(ratios):.3f})" if len(ratios) > 1 else ""
    print(
        f"| ratio | {pub_ratio:.3f} | {ratio:.3f}{spread} | {ratio / pub_ratio - 1:+.1%} | | | | |"
    )
    t_own = np.array([s["elapsed_s"] for s in own])
    t_rr = np.array([s["elapsed_s"] for s in runs[b]])
    print(
        f"\nSGLang's rule reading the replicas' caches (sglang-cache-aware's default): "
        f"{(prompt_tokens / t_own).mean():,.0f} prompt token/s, {np.mean(t_rr / t_own) - 1:+.1%} "
        "against round robin"
    )


if __name__ == "__main__":
    sys.exit(main())
