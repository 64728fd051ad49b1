"""The harness every experiment stands on.

``batch-env compare``, ``benchmark``, ``agents``, ``lazybatching``, ``llm``,
``regimes``, ``bench`` and ``train --sweep`` share what is here, and nothing here
imports an experiment (``tests/test_layering.py`` checks it):

* :mod:`~experiments.harness.config`: config files and YAML options, read and checked
  (errors name the field, the value and what is allowed);
* :mod:`~experiments.harness.store`: the one keyed, atomic store of cells, episodes,
  evaluations and trial scores, with one damage policy (named, set aside, recomputed);
* :mod:`~experiments.harness.runner`: running keyed work items through the store on a
  backend, resumably (finished items reused, each written as it ends, failures listed);
* :mod:`~experiments.harness.backends`: where work runs (this process, a process pool,
  or Ray);
* :mod:`~experiments.harness.stats`: means, 95% CIs (one CI function), grouped and
  paired CIs, the gap closed;
* :mod:`~experiments.harness.report`: number formats, Markdown and text tables, CSV,
  plots;
* :mod:`~experiments.harness.options`: the command-line options shared by the
  subcommands (env options, backend options, the results folder, ``--json``) and the
  argparse types;
* :mod:`~experiments.harness.strict_json`: JSON without NaN or infinity.
"""
