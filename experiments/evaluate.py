"""``batch-env evaluate`` and ``batch-env solve-smdp``: baselines and trained agents on one
env configuration (the env options of :mod:`experiments.harness.options`), and the
SMDP-optimal policy of one, through the one evaluation harness
(:func:`batch_env.evaluate`)."""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from typing import Any

import baselines
import batch_env
from agents import load_policy, parse_policy_spec
from agents.common import env_parameters, make_raw_env
from agents.policy import read_run_config
from baselines import available
from baselines.smdp import SMDPProblem, solve
from batch_env.evaluate import Policy
from batch_env.metrics import HEADLINE_KEYS
from batch_env.tasks import TASKS
from experiments.harness.options import (
    DEFAULT_ENV_ID,
    ENV_DEFAULTS,
    ENV_OPTIONS,
    POLICY_SETTINGS_HELP,
    add_env_args,
    count,
    env_id_arg,
    env_options_kwargs,
    is_agent,
    positive,
)
from experiments.harness.strict_json import dumps

SHOWN_KEYS = HEADLINE_KEYS


def _fmt(x: float) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if float(x).is_integer() and abs(x) < 1e9:  # counts: 20000, not 2e+04
        return str(int(x))
    return f"{x:.4g}"


def format_table(results: list[Any], keys: tuple[str, ...] = SHOWN_KEYS) -> str:
    """Plain-text table: one row per summary key, one column per policy (mean ± 95% CI;
    the mean alone for a policy evaluated on one episode, which has no CI, said below
    the table)."""
    cols = [r.policy for r in results]
    rows = [["metric", *cols]]
    for k in keys:
        rows.append(
            [k]
            + [
                _fmt(r.mean(k)) if len(r.episodes) < 2 else f"{_fmt(r.mean(k))} ± {_fmt(r.ci95(k))}"
                for r in results
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if any(len(r.episodes) < 2 for r in results):
        lines.append("one episode: no confidence interval (--episodes 2 or more gives one)")
    return "\n".join(lines)


def env_options_given(args: argparse.Namespace) -> list[str]:
    """The env options (``--env-id``, ``--env-kwargs`` and the options of ``ENV_OPTIONS``) given."""
    given = [opt for opt, dest, _ in ENV_OPTIONS if getattr(args, dest, None) is not None]
    return given + [
        opt
        for opt in ("--env-id", "--env-kwargs")
        if getattr(args, opt[2:].replace("-", "_"), None) is not None
    ]


def env_differences(
    trained: tuple[str, dict[str, Any]], here: tuple[str, dict[str, Any]]
) -> list[str]:
    """What differs between the env a run was trained on and another, ``(env id, kwargs)``
    each: ``"<kwarg> (trained <value>, here <value>)"`` per differing keyword argument,
    a kwarg left out counting as the env's default (the Poisson load 0.6 for no workload)."""

    (id_a, kw_a), (id_b, kw_b) = trained, here
    if id_a != id_b:
        return [f"env id (trained {id_a}, here {id_b})"]
    defaults = {p.name: p.default for p in env_parameters(id_a)}
    if "max_batch_size" in defaults:
        defaults["workload"] = {"kind": "poisson", "load": ENV_DEFAULTS["load"]}
    out = []
    for key in sorted(set(kw_a) | set(kw_b)):
        a, b = kw_a.get(key, defaults.get(key)), kw_b.get(key, defaults.get(key))
        if a != b:
            out.append(f"{key} (trained {a!r}, here {b!r})")
    return out


def run_policies(args: argparse.Namespace, names: list[str]) -> list[Any]:
    """Evaluate baselines (default parameters) and trained agents (``<algo>:<run_dir>``).

    The env: with an agent among the policies, the env the first agent was trained on
    (its env id and kwargs), changed by the env options given (e.g. ``--horizon-requests``),
    unless ``--env-id`` names another env; else the env the options describe (the default
    env without ``--env-id``). An agent evaluated on an env other than its training env
    gets a one-line notice on stderr naming the differing keyword arguments, and one whose
    observation or actions do not fit the env is refused before the first step.
    """

    runs, specs = {}, {}
    for name in names:
        if not is_agent(name):  # a baseline: name or name:key=value,... (checked here)
            specs[name] = baselines.parse_spec(name)
            continue
        if ":" in name:  # a trained agent: <algo>:<run_dir>
            algo, run_dir = parse_policy_spec(name)
            cfg = read_run_config(run_dir)
            if algo != cfg["algo"]:
                raise ValueError(
                    f"--policy {name!r} names algo {algo!r} but run {run_dir!r} is a {cfg['algo']} run: "
                    f"give {cfg['algo']}:{run_dir}"
                )
            runs[name] = (run_dir, cfg)
    given_id = getattr(args, "env_id", None)
    first = next(iter(runs.values()))[1] if runs else None
    if first is not None and given_id in (None, first["env_id"]):
        # the run's env, with what the env options change (e.g. the episode length)
        env_id = str(first["env_id"])
        env_kwargs = {
            **dict(first["env_kwargs"]),
            **env_options_kwargs(args, env_id, defaults=False),
        }
    else:
        env_id = given_id or DEFAULT_ENV_ID
        env_kwargs = env_options_kwargs(args, env_id)
    env = make_raw_env(env_id, env_kwargs, "--env-kwargs")
    results = []
    for name in names:
        if name in runs:
            run_dir, cfg = runs[name]
            diff = env_differences((cfg["env_id"], cfg["env_kwargs"]), (env_id, env_kwargs))
            if diff:
                print(
                    f"note: {name} is evaluated on another env than it was trained on: {'; '.join(diff)}",
                    file=sys.stderr,
                    flush=True,
                )
            policy: Policy = load_policy(run_dir, name=name)
        else:
            base, params = specs[name]
            policy = baselines.make(base, env=env, **params)
        results.append(
            batch_env.evaluate(policy, env, n_episodes=args.episodes, seed=args.seed, name=name)
        )
    return results


def settings_lines(results: list[Any]) -> list[str]:
    """A line per baseline on the settings it ran with and where they came from (its
    ``settings``, :func:`baselines.make`)."""
    lines = []
    for r in results:
        st = r.settings
        if st is None:
            continue
        params = ", ".join(f"{k}={v}" for k, v in sorted(st["params"].items()))
        lines.append(
            f"{r.policy}: {params} ({st['source']})" if params else f"{r.policy}: {st['source']}"
        )
    return lines


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Evaluate baselines and trained agents on one env configuration.

    A trained agent is <algo>:<run_dir>, a batch-env train run or an rl-zoo3 run folder
    (logs/<algo>/<env name>_<n>). The env is the one the (first) agent was trained on, its
    env id and kwargs, with what the env options change (--horizon-requests, --profile,
    --env-kwargs, ...); --env-id names another env. An agent evaluated on an env other than
    its training env gets a one-line note on stderr naming what differs, and one whose
    observation does not fit the env is refused before the first step.
    """
    with warnings.catch_warnings():  # said once below, not as a warning per policy
        warnings.simplefilter("ignore", batch_env.SeedWarning)
        results = run_policies(args, args.policy)
    if args.json:
        print(dumps([r.to_dict() for r in results], indent=2))
    else:
        print(format_table(results))
        for line in settings_lines(results):
            print(f"settings: {line}")
        notes = [r.note() for r in results if r.note()]
        if notes:
            print(f"note: {notes[0].split(': ', 1)[1]}")
    return 0


def cmd_solve_smdp(args: argparse.Namespace) -> int:
    """Solve the SMDP-optimal batching policy of an env configuration."""

    kw = env_options_kwargs(args)
    if args.rate_per_s is not None:
        if args.load is not None or args.workload is not None:
            raise ValueError(
                f"--rate-per-s={args.rate_per_s!r} sets the workload, as --load and --workload do: "
                "give one of them"
            )
        kw["workload"] = {"kind": "poisson", "rate_per_s": args.rate_per_s}
    env = make_raw_env("batch_env/DynamicBatching-v0", kw, "env options")
    sol = solve(SMDPProblem.from_env(env, max_states=args.max_states), method=args.method)
    out = sol.to_dict()
    out["load"] = getattr(env.unwrapped, "mean_load", None)
    if args.json:
        print(dumps(out, indent=2))
        return 0
    print(f"gain (cost per second): {sol.gain:.6g}   reward rate: {-sol.gain:.6g}/s")
    print(
        f"threshold: {sol.threshold}   iterations: {sol.iterations}   solve time: {sol.solve_time_s:.3f} s   "
        f"states: {sol.problem.n_states}{' (truncated)' if sol.problem.truncated else ''}"
    )
    B = sol.problem.max_batch_size
    shown = sol.policy[: 3 * B + 1].tolist()
    print(f"policy (queue length 0..{len(shown) - 1} -> batch size, 0 = wait): {shown}")
    return 0


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "solve-smdp",
        help="solve the SMDP-optimal policy of an env configuration",
        description=cmd_solve_smdp.__doc__,
    )
    add_env_args(p)
    p.add_argument(
        "--rate-per-s",
        type=positive,
        default=None,
        help="Poisson arrival rate per second (instead of --load/--workload)",
    )
    p.add_argument(
        "--max-states",
        type=count(1),
        default=None,
        help="truncation level (default: the queue capacity, exact)",
    )
    p.add_argument(
        "--method",
        choices=["pi", "rvi"],
        default="pi",
        help="policy iteration (default) or relative value iteration",
    )
    p.set_defaults(func=cmd_solve_smdp)

    p = sub.add_parser(
        "evaluate",
        help="evaluate baselines and trained agents on one env configuration",
        description=cmd_evaluate.__doc__,
    )
    add_env_args(p)

    p.add_argument(
        "--env-id",
        default=None,
        type=env_id_arg,
        metavar="ENV_ID",
        help="an env id or a benchmark task id, with or without batch_env/: "
        + ", ".join([*batch_env.ENV_IDS, *TASKS])
        + " (default: the agent's own env, else batch_env/DynamicBatching-v0); an option above that the env "
        "lacks is refused (LLMBatching-v0 has no --load, --max-batch-size, --sla-ms, "
        "--decision-interval-ms, --service, --service-cv: give its own kwargs, e.g. ttft_sla_ms, "
        "tpot_sla_ms, max_num_seqs, with --env-kwargs)",
    )
    p.add_argument(
        "--env-kwargs",
        default=None,
        help="more env kwargs, a mapping, e.g. '{max_num_seqs: 128, tpot_sla_ms: 40}' (not the ones "
        "the options above give)",
    )

    p.add_argument(
        "--policy",
        nargs="+",
        default=["greedy"],
        help=f"policies to evaluate: baselines ({', '.join(available())}) or trained agents as "
        f"<algo>:<run_dir>; {POLICY_SETTINGS_HELP}",
    )
    p.set_defaults(func=cmd_evaluate)
