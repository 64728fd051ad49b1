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

What two or more maps share is in :mod:`experiments.regimes.common`.
"""

#: the maps, each a module of this package (and a choice of ``batch-env regimes``)
MAPS = ("lazybatching", "llm", "smdp")
