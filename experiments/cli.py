"""The ``batch-env`` command: the top layer, the only one that imports all others.

Subcommands: ``demo`` (a small comparison of every baseline on the default env),
``compare`` (the comparison experiment from a YAML config; ``--backend local|ray``),
``evaluate`` (baselines or trained agents on one env configuration), ``train`` (SB3
agents with TensorBoard; ``--sweep`` for a training sweep, locally or on Ray Tune),
``agents`` (agents against the SMDP optimum), ``lazybatching`` (node-level vs graph
batching on NodeBatching-v0, with the paper's ratios), ``regimes`` (regime maps: where
a seed paper's claim holds), ``llm`` (LLM batching on
LLMBatching-v0: capacity and throughput at the SLA), ``profile`` (measure a real
model's profile), ``roundtrip`` (profile mode vs real mode), ``solve-smdp`` (the
SMDP-optimal policy of an env), ``bench`` (speed against CartPole and pymdptoolbox,
and the comparison's local vs Ray backends; ``--wallclock``: PPO's wall-clock to a good
agent against CartPole's), ``data`` (list and fetch the public
datasets that traces can name, see docs/data.md).

Each subcommand's parser and ``cmd_*`` function sit beside its experiment (the module
named in :data:`COMMANDS`, whose ``add_parser`` adds them); this module keeps ``main``,
the error handling and the registry, the way ``baselines/__init__.py`` keeps its
policies. The options several subcommands share are in
:mod:`experiments.harness.options`.

A mistake in the input (an option, a config or hyperparameter file, a run directory)
ends in one line on stderr, ``error: ...`` naming the option or file, its value and what
is allowed, with exit status 2 (as argparse's own errors), and a refused command writes
nothing. A damaged file that a rerun reads back (a comparison cell, a sweep trial, a
training checkpoint) is named on stderr, moved aside to ``<file>.corrupt`` and redone.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

import yaml

from experiments.harness.backends import RayUnavailableError
from experiments.harness.config import one_line
from experiments.harness.options import check_folder

#: the modules whose ``add_parser(sub)`` adds the subcommands, in ``--help``'s order
COMMANDS = (
    "experiments.record",  # record
    "experiments.compare",  # demo, compare
    "experiments.evaluate",  # solve-smdp, evaluate
    "experiments.train",  # train (and train --sweep)
    "experiments.agents",  # agents
    "experiments.curves",  # curves
    "experiments.lazybatching",  # lazybatching
    "experiments.regimes",  # regimes
    "experiments.llm",  # llm
    "experiments.roundtrip",  # profile, roundtrip
    "experiments.benchmark",  # benchmark
    "experiments.headroom",  # headroom
    "experiments.clock_robustness",  # clock-sensitivity, clock-latency
    "experiments.bench",  # bench
    "experiments.data",  # data
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``batch-env`` (every subcommand has ``--help``)."""
    parser = _Parser(
        prog="batch-env",
        description="Dynamic batching for ML inference serving as RL environments.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        importlib.import_module(module).add_parser(sub)
    return parser


#: what a user's input can raise besides ValueError and FileNotFoundError: a path that is
#: a folder or not readable, a damaged file read by a library. Reported as one line.
_USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    yaml.YAMLError,
)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``batch-env`` console script.

    A mistake in the user's input (options, config files, run directories) ends in one
    line on stderr, ``error: ...`` naming the option or file, its value and what is
    allowed, and exit status 2, like argparse's own errors; nothing is written before
    the input is checked.
    """
    args = build_parser().parse_args(argv)
    try:
        for dest in ("results_dir", "runs_dir"):
            if getattr(args, dest, None) is not None:
                check_folder(f"--{dest.replace('_', '-')}", getattr(args, dest))
        return args.func(args)
    except _USER_ERRORS as exc:
        print(f"error: {one_line(exc) or type(exc).__name__}", file=sys.stderr)
        return 2
    except ImportError as exc:
        if not isinstance(exc, RayUnavailableError):
            raise
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2


class _Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one line, ``error: ...``, exit status 2."""

    def error(self, message: str) -> Any:
        self.exit(2, f"error: {self.prog}: {one_line(message)} (see {self.prog} --help)\n")


if __name__ == "__main__":
    sys.exit(main())
