"""Regime maps: where in the space of assumptions each seed paper's claim holds
(``batch-env regimes``).

A regime map varies the assumptions a seed paper's headline claim rests on (the hardware's
batch-time shape, the memory, the workload, the load, the baseline's settings) over a grid,
runs the paper's policy and its baselines at every point, and says at which points the
claim is reproduced in direction and order of magnitude, writing the points, a claims
table and figures to ``results/regimes/<map>/``. One module per map:

* ``lazybatching`` (:mod:`experiments.regimes.lazybatching`): LazyBatching's node-level
  batching against graph batching on NodeBatching-v0 (Choi, Kim and Rhu's 15x / 1.5x /
  5.5x), over the batch-time shape, the per-node overhead, the depth, the load and the
  graph baseline's window; every cell through the comparison harness.
* ``llm`` (:mod:`experiments.regimes.llm`): memory-aware and SLA-constrained LLM batching
  (Pang et al.'s 8-28% / 22%) against static caps on LLMBatching-v0, over the KV
  capacity, the output lengths, the prompt/output ratio and the arrivals; capacity and
  throughput at the SLA.
* ``smdp`` (:mod:`experiments.regimes.smdp`): the SMDP seed's claims (control-limit
  structure, adaptation to the load, the benchmarks beaten, the energy weight's
  power-latency trade) across loads and energy weights, solved exactly.

The maps share the harness (:mod:`experiments.harness`: their cells run through the
comparison and its store; their JSON is written with
:func:`experiments.harness.strict_json.strict`). This package's ``__init__`` holds the
``regimes`` subcommand.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from experiments.harness.options import add_backend_args, add_json, add_results_dir
from experiments.harness.strict_json import dumps

#: the maps, each a module of this package (and a choice of ``batch-env regimes``)
MAPS = ("lazybatching", "llm", "smdp")


def cmd_regimes(args: argparse.Namespace) -> int:
    """Regime maps: where in the space of assumptions a seed paper's claim holds.

    lazybatching: LazyBatching (node-level) against graph batching on NodeBatching-v0 over
    the batch-time shape (GPU-flat to systolic-array-linear), the per-node overhead, the
    model's depth, the load and the graph baseline's window, with the paper's 15x / 1.5x
    / 5.5x; ratios, heatmaps and a claims table in RESULTS_DIR/lazybatching/. Every cell
    runs through the comparison harness (resumable; --backend local or ray).

    llm: memory-aware and SLA-constrained LLM batching (Pang et al.) against static caps on
    LLMBatching-v0 over the KV capacity, the output lengths, the prompt/output ratio, the
    arrivals' burstiness and the static cap: capacity and throughput at the SLA, the
    paper's 8-28% / 22%, preemptions; RESULTS_DIR/llm/ (cells through the comparison
    harness, one comparison per point).

    smdp: the SMDP seed's claims (control-limit structure, adaptation to the load, the
    benchmarks beaten, the energy weight's power-latency trade) across loads and energy
    weights, solved exactly, and the truncation's cost; RESULTS_DIR/smdp/ (seconds)."""
    from experiments.regimes.lazybatching import run_lazybatching_map
    from experiments.regimes.llm import run_llm_map
    from experiments.regimes.smdp import run_smdp_map

    if args.map == "smdp":
        smdp = run_smdp_map(results_dir=args.results_dir)
        if args.json:
            print(dumps(smdp["claims"], indent=1))
        else:
            print(smdp["markdown"].split("## Every point")[0].rstrip())
            print(f"\ntables and figure in {smdp['dir']}/")
        return 0
    run = run_llm_map if args.map == "llm" else run_lazybatching_map
    result = run(
        fine=args.fine,
        results_dir=args.results_dir,
        backend=args.backend,
        address=args.address,
        num_cpus=args.num_cpus,
        progress=not args.json,
    )
    if result["failed"]:
        print(f"{len(result['failed'])} cells failed (rerun to retry them):", file=sys.stderr)
    if args.json:
        print(dumps(result["claims"], indent=1))
    else:
        print(result["markdown"].split("## Every point")[0].rstrip())
        print(f"\nmap, tables and heatmaps in {result['dir']}/")
    return 0 if not result["failed"] else 1


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "regimes",
        help="regime maps: where each seed paper's claim holds (lazybatching, llm, smdp)",
        description=cmd_regimes.__doc__,
    )
    p.add_argument("map", choices=["lazybatching", "llm", "smdp"], help="which map")
    p.add_argument(
        "--fine",
        action="store_true",
        help="the dense grid (hours on 2 cores: for a cluster, with --backend ray)",
    )
    add_results_dir(p, "results/regimes")
    add_backend_args(p, "cell")
    add_json(p, "the claims table")
    p.set_defaults(func=cmd_regimes)
