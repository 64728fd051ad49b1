"""The command-line options that several ``batch-env`` subcommands share, and argparse types.

* :func:`count`, :func:`positive`, :func:`env_id_arg`: argparse types (an integer >= a
  bound; a finite number > 0; an env or task id, with or without ``batch_env/``) whose
  errors name the value and what is allowed;
* :func:`add_env_args`, :func:`env_options_kwargs`: the env options (``--profile``,
  ``--load``, ``--workload``, ``--max-batch-size``, ...) and the env kwargs they give,
  with :data:`ENV_OPTIONS`, :data:`ENV_DEFAULTS` (from :mod:`batch_env.config`, the one
  source of defaults) and the default env :data:`DEFAULT_ENV_ID`;
* :func:`add_backend_args`: ``--backend``, ``--address``, ``--num-cpus``;
* :func:`add_results_dir`, :func:`add_json`, :func:`add_config`: the results folder,
  ``--json`` and ``--config`` options;
* :func:`check_folder`, :func:`stdout_to_stderr`: an output folder that is a file is
  refused before any work; a command's chatter kept off stdout under ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from pathlib import Path
from typing import Any

from agents.common import check_int, env_kwarg_names
from batch_env.config import DEFAULT_PROFILE, DEFAULT_WORKLOAD, ServingConfig, field_default
from batch_env.profiles.batch_profile import available
from batch_env.tasks import TASKS
from experiments.harness.backends import BACKENDS

from .config import parse_mapping


def count(low: int) -> Any:
    """An argparse ``type``: an integer >= ``low`` (argparse names the option on error)."""

    def parse(text: str) -> int:
        try:
            return check_int("value", int(text), low)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is invalid: expected an integer >= {low}"
            ) from None

    parse.__name__ = f"integer >= {low}"
    return parse


def env_id_arg(text: str) -> str:
    """An argparse ``type``: a registered env or benchmark task id, with or without its
    ``batch_env/`` namespace (:func:`batch_env.tasks.resolve_id`: the error gives the
    closest ids and lists the envs and tasks)."""
    from batch_env.tasks import resolve_id

    try:
        return resolve_id(text, field="")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


env_id_arg.__name__ = "env or task id"


def is_agent(spec: str) -> bool:
    """Whether a ``--policy`` spec names a trained agent (``<algo>:<run_dir>``) rather
    than a baseline (``name`` or ``name:key=value,...``, :func:`baselines.parse_spec`)."""
    import baselines

    head, sep, rest = spec.partition(":")
    if not sep or head.strip() in baselines.available():
        return False
    # name:key=value with an unknown name is a mistyped baseline, not a run folder
    return "=" not in rest or Path(rest).exists()


#: what the ``--policy`` options' help says of a baseline's settings
POLICY_SETTINGS_HELP = (
    "a baseline as name or name:key=value,key=value (its settings, e.g. "
    "clock-queue:low_clock=990,threshold=4; values are numbers, words or lists such as "
    "[4,8]); on a benchmark task a baseline with no settings runs with the task's stored "
    "reference settings for it, and the output says which settings ran"
)


def positive(text: str) -> float:
    """An argparse ``type``: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected a finite number > 0")
    return value


#: env options of evaluate and solve-smdp: (option, dest, env keyword argument it sets)
ENV_OPTIONS = (
    ("--profile", "profile", "profile"),
    ("--load", "load", "workload"),
    ("--workload", "workload", "workload"),
    ("--max-batch-size", "max_batch_size", "max_batch_size"),
    ("--sla-ms", "sla_ms", "sla_ms"),
    ("--horizon-requests", "horizon_requests", "horizon_requests"),
    ("--decision-interval-ms", "decision_interval_ms", "decision_interval_ms"),
    ("--service", "service", "service"),
    ("--service-cv", "service_cv", "service_cv"),
    ("--queue-capacity", "queue_capacity", "queue_capacity"),
    ("--warmup-requests", "warmup_requests", "warmup_requests"),
    ("--reward-weights", "reward_weights", "reward_weights"),
)


#: what to use instead of an env option that an env lacks
ENV_OPTION_HINTS = {
    "--sla-ms": "the LLM env takes its SLAs via --env-kwargs '{ttft_sla_ms: 500, tpot_sla_ms: 50}'",
    "--max-batch-size": "the LLM env's cap on running requests is --env-kwargs '{max_num_seqs: 64}'",
    "--load": "give the LLM env its arrival rate: --workload '{kind: poisson, rate_per_s: 4}'",
    "--decision-interval-ms": "the LLM env decides at every iteration boundary",
}


#: the DynamicBatching-v0 / NodeBatching-v0 defaults of the options that have one here
#: (from batch_env.config, the one source of defaults)
ENV_DEFAULTS = {
    "profile": DEFAULT_PROFILE,
    "load": DEFAULT_WORKLOAD["load"],
    "max_batch_size": field_default(ServingConfig, "max_batch_size"),
}


def config_default(name: str) -> str:
    """``"default <value>"`` for a ServingConfig field, as the help text shows it."""
    return f"default {field_default(ServingConfig, name):g}"


def env_options_kwargs(
    args: argparse.Namespace, env_id: str | None = None, defaults: bool = True
) -> dict[str, Any]:
    """The env kwargs that evaluate's and solve-smdp's options give.

    An option is refused (``ValueError`` naming it, the env and what it takes) when the
    env has no such keyword argument (LLMBatching-v0 has no --sla-ms, --max-batch-size,
    --load, ...), and when two options give the same setting (--load and --workload,
    an option and a key of --env-kwargs), instead of one silently winning.

    :param env_id: the env the options are for (default ``--env-id``, else the default env).
    :param defaults: start from this command's defaults for DynamicBatching-v0 and
        NodeBatching-v0 (``False``: only what the options give, to change a run's kwargs);
        a benchmark task id starts from nothing, since it fixes its own settings.
    """

    env_id = env_id or getattr(args, "env_id", None) or DEFAULT_ENV_ID
    names = env_kwarg_names(env_id)
    given = [(opt, dest, kw) for opt, dest, kw in ENV_OPTIONS if getattr(args, dest) is not None]
    for opt, dest, key in given:
        if key not in names or (opt == "--load" and "max_batch_size" not in names):
            hint = ENV_OPTION_HINTS.get(
                opt, f"its keyword arguments are {names}, given with --env-kwargs"
            )
            raise ValueError(f"{opt}={getattr(args, dest)!r} does not apply to {env_id}: {hint}")
    if args.load is not None and args.workload is not None:
        raise ValueError(
            f"--load={args.load!r} and --workload={args.workload!r} both set the workload: give one"
        )
    kw: dict[str, Any] = {}
    # DynamicBatching-v0 and NodeBatching-v0; a task id fixes its own settings, so it
    # gets none of these (the options given are checked by the task itself)
    if defaults and "max_batch_size" in names and env_id not in TASKS:
        kw = {
            "profile": ENV_DEFAULTS["profile"],
            "max_batch_size": ENV_DEFAULTS["max_batch_size"],
            "workload": {"kind": "poisson", "load": ENV_DEFAULTS["load"]},
        }
    for opt, dest, name in given:
        value = getattr(args, dest)
        if opt == "--load":
            value = {"kind": "poisson", "load": value}
        elif opt in ("--workload", "--reward-weights"):
            value = parse_mapping(value, opt)
        kw[name] = value
    extra = parse_mapping(getattr(args, "env_kwargs", None), "--env-kwargs") or {}
    both = sorted(k for k in extra if any(k == name for _, _, name in given))
    if both:
        opts = [opt for opt, _, name in given if name in both]
        raise ValueError(
            f"--env-kwargs={args.env_kwargs!r} sets {both}, which {opts} give too: give each once"
        )
    kw.update(extra)
    return kw


def add_env_args(p: argparse.ArgumentParser) -> None:
    """The env options of :data:`ENV_OPTIONS` (with their defaults from
    :mod:`batch_env.config` in the help), ``--episodes``, ``--seed`` and ``--json``; read
    them back with :func:`env_options_kwargs`."""

    p.add_argument(
        "--profile",
        default=None,
        help=f"profile name or JSON path (default {DEFAULT_PROFILE}; the LLM env: its own); shipped: "
        f"{', '.join(available())}",
    )
    p.add_argument(
        "--load",
        type=positive,
        default=None,
        help=f"Poisson load rho = rate / max throughput (default {DEFAULT_WORKLOAD['load']:g}; "
        "not with --workload)",
    )
    p.add_argument(
        "--workload",
        default=None,
        help="workload mapping, e.g. '{kind: mmpp, rates_per_s: [1000, 4000], "
        "switch_rates_per_s: [2, 2]}' (not with --load)",
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        help=f"largest batch ({config_default('max_batch_size')})",
    )
    p.add_argument(
        "--sla-ms", type=float, default=None, help=f"latency SLA in ms ({config_default('sla_ms')})"
    )
    p.add_argument(
        "--horizon-requests",
        type=int,
        default=None,
        help=f"summary requests per episode ({config_default('horizon_requests')})",
    )
    p.add_argument(
        "--decision-interval-ms",
        type=float,
        default=None,
        help="relative tick interval (default: ticks off)",
    )
    p.add_argument(
        "--service",
        choices=["deterministic", "lognormal"],
        default=None,
        help=f"service-time law (default {field_default(ServingConfig, 'service')})",
    )
    p.add_argument(
        "--service-cv",
        type=float,
        default=None,
        help="coefficient of variation of lognormal service",
    )
    p.add_argument(
        "--queue-capacity",
        type=int,
        default=None,
        help=f"waiting requests admitted ({config_default('queue_capacity')})",
    )
    p.add_argument(
        "--warmup-requests",
        type=int,
        default=None,
        help=f"arrivals before the summary requests ({config_default('warmup_requests')})",
    )
    p.add_argument("--reward-weights", default=None, help="weights mapping, e.g. '{energy: 0.1}'")
    p.add_argument("--episodes", type=count(1), default=5, help="seeded episodes (default 5)")
    p.add_argument("--seed", type=count(0), default=0, help="first episode seed (default 0)")
    add_json(p)


#: the env that evaluate and solve-smdp use when no --env-id is given
DEFAULT_ENV_ID = "batch_env/DynamicBatching-v0"


def add_backend_args(p: argparse.ArgumentParser, unit: str) -> None:
    """--backend, --address and --num-cpus (shared by compare and train --sweep)."""

    p.add_argument(
        "--backend",
        choices=list(BACKENDS),
        default="local",
        help=f"where each {unit} runs: local (this process, one after the other; the default and the "
        f"fast path on one machine) or ray (each {unit} on Ray; pip install 'batch-env[ray]')",
    )
    p.add_argument(
        "--address",
        default=None,
        help="ray backend: the Ray cluster to join, e.g. auto (the cluster this node belongs to) or "
        "ray://<head>:10001 (default: start a local Ray instance)",
    )
    p.add_argument(
        "--num-cpus",
        type=count(1),
        default=None,
        help="ray backend without --address: CPUs of the local Ray instance (default: all)",
    )


def stdout_to_stderr(active: bool) -> Any:
    """Send what libraries print (Ray's banners and tables) to stderr while ``active``."""

    return contextlib.redirect_stdout(sys.stderr) if active else contextlib.nullcontext()


def check_folder(option: str, path: Any) -> None:
    """Refuse an output folder option that names an existing file (before any work)."""

    if Path(path).exists() and not Path(path).is_dir():
        raise ValueError(f"{option}={str(path)!r} is a file: give a folder")


def add_json(p: argparse.ArgumentParser, what: str = "the result") -> None:
    """``--json``: print ``what`` as JSON (strict: NaN as null) instead of the tables."""
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def add_results_dir(
    p: argparse.ArgumentParser, default: str = "results", help: str | None = None
) -> None:
    """``--results-dir``: the parent folder of the outputs (a file there is refused by
    ``main`` before any work)."""
    p.add_argument(
        "--results-dir",
        default=default,
        help=help or f"parent folder of the outputs (default {default})",
    )


def add_config(p: argparse.ArgumentParser, default: str, help: str | None = None) -> None:
    """``--config``: a config name in ``experiments/configs`` or a YAML path."""
    p.add_argument(
        "--config",
        default=default,
        help=help or "config name in experiments/configs or a YAML path",
    )
