"""Benchmarks that report speed as ratios against a reference run in the same process
(``batch-env bench``), one module per benchmark, each found and changed alone:

* :mod:`~experiments.bench.common`: the machine's description, timed rounds, and
  ``DynamicBatching-v0``'s steps/s against ``CartPole-v1``'s (floor: a step at most 1.5x
  CartPole's cost);
* :mod:`~experiments.bench.smdp`: the SMDP solver against pymdptoolbox;
* :mod:`~experiments.bench.ppo`: PPO training steps/s against CartPole's, and through the
  SB3 adapter on the vector env;
* :mod:`~experiments.bench.vector`: the NumPy vector env against ``CartPoleVectorEnv``;
* :mod:`~experiments.bench.executor`: the real executor's overhead;
* :mod:`~experiments.bench.backends`: the comparison on the local backend and on Ray;
* :mod:`~experiments.bench.render`: a frame against a step;
* :mod:`~experiments.bench.llm`: the LLM envs' steps/s, and ``LLMBatching-v2`` against v1;
* :mod:`~experiments.bench.prefix`: what prefix caching costs the simulator;
* :mod:`~experiments.bench.orders`: what an admission order costs a step;
* :mod:`~experiments.bench.wallclock`: wall-clock to a good agent (``--wallclock``);
* :mod:`~experiments.bench.run`: ``batch-env bench`` itself, which runs them and writes
  ``results/bench/bench.json``.
"""

from __future__ import annotations

from .run import add_parser, cmd_bench, run_bench, write_results

__all__ = ["add_parser", "cmd_bench", "run_bench", "write_results"]
