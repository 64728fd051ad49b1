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

A mistake in the input (an option, a config or hyperparameter file, a run directory)
ends in one line on stderr, ``error: ...`` naming the option or file, its value and what
is allowed, with exit status 2 (as argparse's own errors), and a refused command writes
nothing. A damaged file that a rerun reads back (a comparison cell, a sweep trial, a
training checkpoint) is named on stderr, moved aside to ``<file>.corrupt`` and redone.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from batch_env.config import DEFAULT_PROFILE, DEFAULT_WORKLOAD, ServingConfig, field_default
from batch_env.evaluate import Policy
from batch_env.metrics import HEADLINE_KEYS
from experiments.harness.strict_json import dumps

SHOWN_KEYS = HEADLINE_KEYS


def _fmt(x: float) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{x:.4g}"


def format_table(results: list[Any], keys: tuple[str, ...] = SHOWN_KEYS) -> str:
    """Plain-text table: one row per summary key, one column per policy (mean ± 95% CI)."""
    cols = [r.policy for r in results]
    rows = [["metric", *cols]]
    for k in keys:
        rows.append([k] + [f"{_fmt(r.mean(k))} ± {_fmt(r.ci95(k))}" for r in results])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _one_line(text: Any) -> str:
    """``text`` on one line (YAML and library messages span several)."""
    return " ".join(str(text).split())


def _parse_mapping(text: str | None, field: str) -> dict[str, Any] | None:
    """The YAML/JSON mapping an option gives (None when the option is not given).

    :raises ValueError: naming the option and its value when the text is not YAML or not a mapping.
    """
    if text is None:
        return None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{field}={text!r} is not valid YAML/JSON: {_one_line(exc)}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{field}={text!r} must be a mapping, e.g. '{{key: value, other: 2}}'")
    return value


def _count(low: int) -> Any:
    """An argparse ``type``: an integer >= ``low`` (argparse names the option on error)."""
    from agents.common import check_int

    def parse(text: str) -> int:
        try:
            return check_int("value", int(text), low)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is invalid: expected an integer >= {low}"
            ) from None

    parse.__name__ = f"integer >= {low}"
    return parse


def _positive(text: str) -> float:
    """An argparse ``type``: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected a finite number > 0")
    return value


#: env options of evaluate and solve-smdp: (option, dest, env keyword argument it sets)
_ENV_OPTIONS = (
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
_ENV_OPTION_HINTS = {
    "--sla-ms": "the LLM env takes its SLAs via --env-kwargs '{ttft_sla_ms: 500, tpot_sla_ms: 50}'",
    "--max-batch-size": "the LLM env's cap on running requests is --env-kwargs '{max_num_seqs: 64}'",
    "--load": "give the LLM env its arrival rate: --workload '{kind: poisson, rate_per_s: 4}'",
    "--decision-interval-ms": "the LLM env decides at every iteration boundary",
}
#: the DynamicBatching-v0 / NodeBatching-v0 defaults of the options that have one here
#: (from batch_env.config, the one source of defaults)
_ENV_DEFAULTS = {
    "profile": DEFAULT_PROFILE,
    "load": DEFAULT_WORKLOAD["load"],
    "max_batch_size": field_default(ServingConfig, "max_batch_size"),
}


def _default(name: str) -> str:
    """``"default <value>"`` for a ServingConfig field, as the help text shows it."""
    return f"default {field_default(ServingConfig, name):g}"


def _env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The env kwargs that evaluate's and solve-smdp's options give.

    An option is refused (``ValueError`` naming it, the env and what it takes) when the
    env has no such keyword argument (LLMBatching-v0 has no --sla-ms, --max-batch-size,
    --load, ...), and when two options give the same setting (--load and --workload,
    an option and a key of --env-kwargs), instead of one silently winning.
    """
    from agents.common import env_kwarg_names

    env_id = getattr(args, "env_id", None) or DEFAULT_ENV_ID
    names = env_kwarg_names(env_id)
    given = [(opt, dest, kw) for opt, dest, kw in _ENV_OPTIONS if getattr(args, dest) is not None]
    for opt, dest, key in given:
        if key not in names or (opt == "--load" and "max_batch_size" not in names):
            hint = _ENV_OPTION_HINTS.get(
                opt, f"its keyword arguments are {names}, given with --env-kwargs"
            )
            raise ValueError(f"{opt}={getattr(args, dest)!r} does not apply to {env_id}: {hint}")
    if args.load is not None and args.workload is not None:
        raise ValueError(
            f"--load={args.load!r} and --workload={args.workload!r} both set the workload: give one"
        )
    kw: dict[str, Any] = {}
    if "max_batch_size" in names:  # DynamicBatching-v0 and NodeBatching-v0: this command's defaults
        kw = {
            "profile": _ENV_DEFAULTS["profile"],
            "max_batch_size": _ENV_DEFAULTS["max_batch_size"],
            "workload": {"kind": "poisson", "load": _ENV_DEFAULTS["load"]},
        }
    for opt, dest, name in given:
        value = getattr(args, dest)
        if opt == "--load":
            value = {"kind": "poisson", "load": value}
        elif opt in ("--workload", "--reward-weights"):
            value = _parse_mapping(value, opt)
        kw[name] = value
    extra = _parse_mapping(getattr(args, "env_kwargs", None), "--env-kwargs") or {}
    both = sorted(k for k in extra if any(k == name for _, _, name in given))
    if both:
        opts = [opt for opt, _, name in given if name in both]
        raise ValueError(
            f"--env-kwargs={args.env_kwargs!r} sets {both}, which {opts} give too: give each once"
        )
    kw.update(extra)
    return kw


def _add_env_args(p: argparse.ArgumentParser) -> None:
    from batch_env.profiles.batch_profile import available

    p.add_argument(
        "--profile",
        default=None,
        help=f"profile name or JSON path (default {DEFAULT_PROFILE}; the LLM env: its own); shipped: "
        f"{', '.join(available())}",
    )
    p.add_argument(
        "--load",
        type=_positive,
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
        help=f"largest batch ({_default('max_batch_size')})",
    )
    p.add_argument(
        "--sla-ms", type=float, default=None, help=f"latency SLA in ms ({_default('sla_ms')})"
    )
    p.add_argument(
        "--horizon-requests",
        type=int,
        default=None,
        help=f"summary requests per episode ({_default('horizon_requests')})",
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
        help=f"waiting requests admitted ({_default('queue_capacity')})",
    )
    p.add_argument(
        "--warmup-requests",
        type=int,
        default=None,
        help=f"arrivals before the summary requests ({_default('warmup_requests')})",
    )
    p.add_argument("--reward-weights", default=None, help="weights mapping, e.g. '{energy: 0.1}'")
    p.add_argument("--episodes", type=_count(1), default=5, help="seeded episodes (default 5)")
    p.add_argument("--seed", type=_count(0), default=0, help="first episode seed (default 0)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


#: the env that evaluate and solve-smdp use when no --env-id is given
DEFAULT_ENV_ID = "batch_env/DynamicBatching-v0"


def _env_options_given(args: argparse.Namespace) -> list[str]:
    """The env options (``--env-id``, ``--env-kwargs`` and the options of ``_ENV_OPTIONS``) given."""
    given = [opt for opt, dest, _ in _ENV_OPTIONS if getattr(args, dest, None) is not None]
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
    from agents.common import env_parameters

    (id_a, kw_a), (id_b, kw_b) = trained, here
    if id_a != id_b:
        return [f"env id (trained {id_a}, here {id_b})"]
    defaults = {p.name: p.default for p in env_parameters(id_a)}
    if "max_batch_size" in defaults:
        defaults["workload"] = {"kind": "poisson", "load": _ENV_DEFAULTS["load"]}
    out = []
    for key in sorted(set(kw_a) | set(kw_b)):
        a, b = kw_a.get(key, defaults.get(key)), kw_b.get(key, defaults.get(key))
        if a != b:
            out.append(f"{key} (trained {a!r}, here {b!r})")
    return out


def _run_policies(args: argparse.Namespace, names: list[str]) -> list[Any]:
    """Evaluate baselines (default parameters) and trained agents (``<algo>:<run_dir>``).

    The env: the one the env options describe when any is given; else, with an agent
    among the policies, the env the first agent was trained on (its env id and kwargs);
    else the default env. An agent evaluated on an env other than its training env gets
    a one-line notice on stderr naming the differing keyword arguments.
    """
    import baselines
    import batch_env
    from agents.common import make_raw_env

    runs = {}
    for name in names:
        if ":" in name:  # a trained agent: <algo>:<run_dir>
            from agents import parse_policy_spec
            from agents.policy import read_run_config

            algo, run_dir = parse_policy_spec(name)
            cfg = read_run_config(run_dir)
            if algo != cfg["algo"]:
                raise ValueError(
                    f"--policy {name!r} names algo {algo!r} but run {run_dir!r} is a {cfg['algo']} run: "
                    f"give {cfg['algo']}:{run_dir}"
                )
            runs[name] = (run_dir, cfg)
    if runs and not _env_options_given(args):
        _, first = next(iter(runs.values()))
        env_id, env_kwargs = first["env_id"], dict(first["env_kwargs"])
    else:
        env_id, env_kwargs = getattr(args, "env_id", None) or DEFAULT_ENV_ID, _env_kwargs(args)
    env = make_raw_env(env_id, env_kwargs, "--env-kwargs")
    results = []
    for name in names:
        if name in runs:
            from agents import load_policy

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
            policy = baselines.make(name, env=env)
        results.append(
            batch_env.evaluate(policy, env, n_episodes=args.episodes, seed=args.seed, name=name)
        )
    return results


def cmd_demo(args: argparse.Namespace) -> int:
    """Train a short PPO run, then compare it with every baseline on a small config."""
    from pathlib import Path

    from experiments.compare import load_config, run_compare

    cfg = load_config(args.config)
    run = Path(args.runs_dir) / f"{cfg['name']}-ppo"
    if args.train_steps > 0:
        if not (run / "model.zip").exists():
            print(f"training PPO for {args.train_steps} steps -> {run}/", file=sys.stderr)
        from agents.train import TrainArgs, train_or_reuse

        load = float(cfg["loads"][0])
        env_kwargs = {
            **cfg["env"],
            "workload": {**next(iter(cfg["workloads"].values())), "load": load},
        }
        train_or_reuse(
            TrainArgs(
                algo="ppo",
                env_kwargs=env_kwargs,
                n_timesteps=args.train_steps,
                run_dir=str(run),
                eval_freq=0,
                checkpoint_freq=args.train_steps,
                progress=not args.json,
            )
        )
        cfg = load_config(args.config)
        cfg["policies"]["ppo-demo"] = {"agent": str(run)}
    return _print_compare(
        run_compare(cfg, results_dir=args.results_dir, progress=not args.json),
        args,
        tensorboard=run / "tb" if args.train_steps > 0 else None,
    )


def cmd_compare(args: argparse.Namespace) -> int:
    """Run (or resume) a comparison experiment from a YAML config.

    Each finished cell is written to <results-dir>/<name>/cells/ at once, so an
    interrupted run resumes without recomputing finished cells. --backend local (the
    default) runs the cells one after the other in this process; --backend ray runs each
    cell as a Ray task, on a new local Ray instance or on the cluster at --address (needs
    pip install 'batch-env[ray]'). Both give the same numbers. A cell that raises is
    recorded as failed and the others go on; the exit status is then 1 and the summary
    lists the failed cells with their errors (a rerun retries only them).
    """
    from experiments.compare import run_compare

    with _stdout_to_stderr(args.json):
        result = run_compare(
            args.config,
            results_dir=args.results_dir,
            progress=not args.json,
            backend=args.backend,
            address=args.address,
            max_retries=args.max_retries,
            num_cpus=args.num_cpus,
        )
    return _print_compare(result, args)


def _stdout_to_stderr(active: bool) -> Any:
    """Send what libraries print (Ray's banners and tables) to stderr while ``active``."""
    import contextlib

    return contextlib.redirect_stdout(sys.stderr) if active else contextlib.nullcontext()


def _print_compare(
    result: dict[str, Any], args: argparse.Namespace, tensorboard: Any = None
) -> int:
    failed = result.get("failed") or []
    if args.json:
        print(
            dumps(
                {
                    "dir": str(result["dir"]),
                    "records": result["records"],
                    "computed": result["computed"],
                    "reused": result["reused"],
                    "failed": failed,
                }
            )
        )
        return 1 if failed else 0
    print(result["markdown"])
    print(
        f"tables, CSV and plots in {result['dir']}/ ({result['computed']} cells computed, "
        f"{result['reused']} reused, {len(failed)} failed)"
    )
    if failed:
        print(
            f"{len(failed)} cell(s) failed (listed in summary.md and {result['dir']}/failed.json); "
            "rerun to retry them:",
            file=sys.stderr,
        )
        for f in failed:
            print(f"  {f['key']}: {f['error']}", file=sys.stderr)
    if tensorboard is not None:
        print(f"watch the agent's training: tensorboard --logdir {tensorboard}")
    return 1 if failed else 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Evaluate baselines and trained agents on one env configuration.

    A trained agent is <algo>:<run_dir>, a batch-env train run or an rl-zoo3 run folder
    (logs/<algo>/<env name>_<n>). With no env option (--env-id, --env-kwargs, --profile,
    --load, ...), the env is the one the (first) agent was trained on, its env id and
    kwargs; with env options, it is the env they describe, and an agent trained on another
    env gets a one-line note on stderr naming the differing keyword arguments.
    """
    results = _run_policies(args, args.policy)
    if args.json:
        print(dumps([r.to_dict() for r in results], indent=2))
    else:
        print(format_table(results))
    return 0


def _read_references(path: str) -> dict[str, Any]:
    """A references JSON written by ``--references --out``; ValueError naming the file."""
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"--out={path!r}: cannot read it: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"--out={path!r}: not a references JSON file ({e})") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, dict) and "policies" in v for v in data.values()
    ):
        raise ValueError(
            f"--out={path!r}: not a references JSON file (expected task ids mapping to "
            "their reference figures)"
        )
    return data


def cmd_benchmark(args: argparse.Namespace) -> int:
    """Run the named benchmark tasks' protocol for a policy and print its reward rates
    with their 95% CIs and its normalized scores (0 at greedy, 1 at the bound); with
    --references, recompute the tasks' stored reference figures instead (and write the
    reference table and plot); with --report, only write that table and plot from the
    stored figures."""
    from batch_env import tasks
    from experiments.benchmark import (
        REFERENCES_PATH,
        compute_references,
        format_benchmark,
        run_benchmark,
        write_report,
    )

    ids = (
        [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else list(tasks.TASKS)
    )
    for tid in ids:
        tasks.get(tid)  # ValueError naming the unknown task and the tasks
    if (args.only or args.resume) and not args.references:
        raise ValueError(
            "--only and --resume are for --references (which reference policies to run, "
            "and whether to reuse an interrupted run's episodes)"
        )
    only = [x.strip() for x in args.only.split(",") if x.strip()] if args.only else None
    if only is not None:
        from experiments.benchmark import REFERENCE_POLICIES

        known = {lb for tid in ids for lb in REFERENCE_POLICIES[tid]}
        if not only or set(only) - known:
            raise ValueError(
                f"--only={args.only!r}: {sorted(set(only) - known) or 'no label'} is not a "
                f"reference policy of the tasks {ids}: they are {sorted(known)}"
            )
    if args.references:
        data = compute_references(
            ids,
            out=args.out or REFERENCES_PATH,
            progress=None if args.json else print,
            jobs=args.jobs,
            cache_dir=Path(args.results_dir) / "episodes",
            labels=only,
            resume=args.resume,
        )
        if args.only:  # some policies only: their figures, the stored references untouched
            if args.json:
                print(dumps(data, indent=1))
            return 0
        if args.json:
            print(dumps({t: data[t] for t in ids}, indent=1))
        else:
            for path in write_report(data, args.results_dir):
                print(f"wrote {path}")
        return 0
    if args.report:
        stored = tasks.references() if args.out is None else _read_references(args.out)
        for path in write_report(stored, args.results_dir):
            print(f"wrote {path}")
        return 0
    if not args.policy:
        raise ValueError(
            "--policy is required (a baseline, 'random' or <algo>:<run_dir>), or --references"
        )
    rows = run_benchmark(
        args.policy,
        ids,
        horizon_requests=args.horizon_requests,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(dumps(rows, indent=1) if args.json else format_benchmark(rows))
    return 2 if all("error" in r for r in rows) else 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Measure env speed against CartPole and the SMDP solver against pymdptoolbox, the cost
    of an rgb_array frame against a step, and the comparison's cells/s on the local and the
    Ray backend (--skip-ray to leave it out).

    --wallclock also measures the wall-clock to a good agent (about 20 minutes on one
    core, so not in the default run): PPO with the project's defaults on
    batch_env/LowLoadEnergy-v0 until the deterministic evaluation's mean cost rate (3
    episodes on held-out seeds, every 10,000 steps) is within 1% of the SMDP gain, against
    CartPole-v1 until its mean return is 475, same PPO settings, budget and evaluation
    cadence; the median over --wallclock-seeds seeds in steps and in seconds, and each
    seed's figures (a run that misses within its budget is reported as not reached, with
    its best figure). It goes into bench.json and into wallclock.json beside it;
    --wallclock-only runs that item alone and writes wallclock.json only."""
    from experiments.bench import bench_wallclock, machine_description, run_bench, write_results

    _check_folder("--out", args.out)
    wallclock_kwargs = {
        "seeds": tuple(range(args.wallclock_seeds)),
        "budget_steps": args.wallclock_budget,
        "eval_freq": args.wallclock_eval_freq,
    }
    if args.wallclock_only:
        wc = {**bench_wallclock(**wallclock_kwargs), "machine": machine_description()}
        path = write_results(wc, args.out, "wallclock.json")
        if args.json:
            print(dumps(wc, indent=2))
            return 0
        print(_format_wallclock(wc))
        print(f"written to {path}")
        return 0
    try:
        sizes = tuple(int(x) for x in args.vector_sizes.split(",") if x.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise ValueError(
            f"--vector-sizes={args.vector_sizes!r} is invalid: expected positive integers, e.g. 1,64,1024"
        )
    result = run_bench(
        n_steps=args.steps,
        repeats=args.repeats,
        smdp=not args.skip_smdp,
        ppo=not args.skip_ppo,
        vector=not args.skip_vector,
        vector_sizes=sizes,
        torch_overhead=not args.skip_torch,
        backends=not args.skip_ray,
        render=not args.skip_render,
        wallclock=args.wallclock,
        wallclock_kwargs=wallclock_kwargs,
    )
    path = write_results(result, args.out)
    if "wallclock" in result:
        write_results(
            {**result["wallclock"], "machine": result["machine"]}, args.out, "wallclock.json"
        )
    if args.json:
        print(dumps(result, indent=2))
        return 0
    _print_bench(result)
    print(f"written to {path}")
    return 0


def _print_llm_v2(v2: dict[str, Any] | None) -> None:
    """``batch-env bench``'s LLMBatching-v2 lines: steps and CPU per request against v1."""
    if v2 is None:
        return
    for name, row in v2["settings"].items():
        a, b = (row[f"batch_env/LLMBatching-v{k}"] for k in (1, 2))
        print(
            f"LLMBatching-v2 vs v1 ({name}): {row['steps_ratio']:.1f}x fewer steps "
            f"({b['steps_per_request']:.2f} vs {a['steps_per_request']:.2f} a request), "
            f"{row['cpu_ratio']:.1f}x less CPU ({b['cpu_us_per_request']:,.0f} vs "
            f"{a['cpu_us_per_request']:,.0f} us a request; floors: "
            f"{v2['floor_steps_ratio']:.0f}x, {v2['floor_cpu_ratio']:.0f}x)"
        )


def _print_bench(result: dict[str, Any]) -> None:
    """The figures of ``batch-env bench``, one line each."""
    print(f"DynamicBatching-v0: {result['dynamic_batching_steps_per_s']:,.0f} steps/s")
    print(f"CartPole-v1:        {result['cartpole_steps_per_s']:,.0f} steps/s")
    print(
        f"step cost ratio (ours / CartPole): {result['step_cost_ratio_vs_cartpole']:.2f} "
        f"(floor: <= {result['floor_step_cost_ratio']:.1f})"
    )
    llm = result.get("llm")
    if llm:
        for env_id in ("batch_env/LLMBatching-v0", "batch_env/LLMBatching-v1"):
            r = llm[env_id]
            floor = (
                f" (floor: <= {llm['floor_step_cost_ratio']:.1f})" if env_id.endswith("v1") else ""
            )
            print(
                f"{env_id.split('/')[-1]}: {r['steps_per_s']:,.0f} steps/s, step cost ratio "
                f"(ours / CartPole, median of rounds): {r['step_cost_ratio_vs_cartpole']:.2f}{floor}"
            )
    _print_llm_v2(result.get("llm_v2"))
    rn = result.get("render")
    if rn:
        for r in rn["envs"]:
            print(
                f"{r['env_id'].split('/')[-1]} rgb_array frame: {r['frame_us']:,.0f} us vs step "
                f"{r['step_us']:,.1f} us -> ratio {r['frame_cost_ratio_vs_step']:.1f} "
                f"(target: frame < {rn['target_frame_us']:,.0f} us)"
            )
    vec = result.get("vector")
    if vec:
        for r in vec["sizes"]:
            print(
                f"vector env, {r['num_envs']:5d} lanes: {r['env_steps_per_s']:,.0f} env-steps/s vs "
                f"CartPoleVectorEnv {r['cartpole_vector_env_steps_per_s']:,.0f} -> ratio {r['ratio_vs_cartpole']:.3f}"
            )
        if vec["meets_floor_at_1024"] is not None:
            print(
                f"floor {vec['floor_env_steps_per_s_at_1024']:,} env-steps/s at 1024 lanes met: {vec['meets_floor_at_1024']}"
            )
    ov = result.get("torch_executor_overhead")
    if ov:
        fracs = ", ".join(f"b={b}: {r['overhead_frac']:.1%}" for b, r in ov["run"].items())
        print(
            f"real executor overhead outside the model call ({ov['model']}): {fracs} "
            f"(floor: < {ov['floor_overhead_frac_b_ge_8']:.0%} at b >= 8)"
        )
    sm = result.get("smdp")
    if sm:
        print(
            f"SMDP solve, {sm['n_states']} states, B={sm['max_batch_size']}, rho={sm['load']}: "
            f"policy iteration {sm['pi_s']:.3f} s, our RVI {sm['rvi_s']:.2f} s, "
            f"pymdptoolbox RVI {sm['pymdptoolbox_s']:.2f} s -> {sm['speedup_pi_vs_pymdptoolbox']:.0f}x "
            f"(floor: >= {sm['floor_speedup']:.0f}x); same policy: {sm['same_policy']}"
        )
    pp = result.get("ppo")
    if pp:
        print(
            f"PPO training: {pp['dynamic_batching_ppo_steps_per_s']:,.0f} steps/s vs CartPole-v1 "
            f"{pp['cartpole_ppo_steps_per_s']:,.0f} steps/s -> ratio {pp['ratio']:.2f} (floor: >= {pp['floor_ratio']})"
        )
    pv = result.get("ppo_vector")
    if pv:
        print(
            f"PPO training, {pv['num_envs']} lanes: native vector env {pv['native_vector_ppo_steps_per_s']:,.0f} "
            f"steps/s vs DummyVecEnv {pv['dummy_vec_env_ppo_steps_per_s']:,.0f} -> ratio {pv['ratio']:.2f}"
        )
    cb = result.get("compare_backends")
    if cb and "skipped" in cb:
        print(f"compare backends: skipped ({cb['skipped']})")
    elif cb:
        print(
            f"compare, {cb['cells']} cells, Ray / local cells/s: first run {cb['ray_cells_per_s']:.2f} / "
            f"{cb['local_cells_per_s']:.2f} = {cb['ratio_ray_vs_local']:.2f} (with Ray's {cb['ray_startup_s']:.1f} s "
            f"start-up {cb['ratio_ray_with_startup_vs_local']:.2f}), warm {cb['ray_warm_cells_per_s']:.2f} / "
            f"{cb['local_warm_cells_per_s']:.2f} = {cb['ratio_ray_warm_vs_local_warm']:.2f}; "
            f"same results: {cb['same_results']}"
        )
    if "wallclock" in result:
        print(_format_wallclock(result["wallclock"]))


def _format_wallclock(wc: dict[str, Any]) -> str:
    """The wall-clock item in a few lines: medians, then each seed."""

    def num(x: float | None, fmt: str) -> str:
        return "not reached" if x is None else format(x, fmt)

    lines = []
    for part in (wc["task"], wc["cartpole"]):
        lines.append(
            f"wall-clock to a good agent, {part['env_id']} ({part['target']}): median "
            f"{num(part['median_steps'], ',.0f')} steps, {num(part['median_seconds'], '.1f')} s "
            f"training ({num(part['median_seconds_with_eval'], '.1f')} s with evaluations); "
            f"{part['reached']} of {part['runs']} runs reached it"
        )
        for r in part["seeds"]:
            lines.append(
                f"  seed {r['seed']}: "
                + (
                    f"{r['steps']:,} steps, {r['seconds']:.1f} s ({r['seconds_with_eval']:.1f} s with evaluations)"
                    if r["reached"]
                    else f"not reached in {r['steps_trained']:,} steps, best {r['best_figure']:.3f}"
                )
            )
    lines.append(
        f"ratio to CartPole-v1: steps {num(wc['ratio_steps_vs_cartpole'], '.2f')}, "
        f"seconds {num(wc['ratio_seconds_vs_cartpole'], '.2f')}"
    )
    return "\n".join(lines)


def cmd_train(args: argparse.Namespace) -> int:
    """Train an SB3 agent (PPO, A2C, DQN, MaskablePPO, RecurrentPPO) and print where its logs are.

    With --vectorized the training envs are the lanes of one Gymnasium vector env (the
    env's NumPy vector env when it registers one), stepped through agents.vec_env.SB3VecEnv.

    --resume --run-dir <run> continues a run from its newest usable checkpoint with every
    setting saved in its config.yaml (algorithm, env kwargs, hyperparameters, seed,
    centring gain, --vectorized/--num-envs, --n-timesteps, --checkpoint-freq,
    --eval-freq, --eval-episodes, --device, --threads). An option given with --resume
    must equal the saved value, else the command is refused naming the option, the saved
    and the given value; the one exception is a larger --n-timesteps, which extends the
    run. A damaged checkpoint is named on stderr, moved aside (<file>.corrupt) and the
    previous one is used; with none left, the command is refused. A refused command
    writes nothing.

    With --sweep <yaml> it runs a training sweep instead (algorithms x hyperparameter grid
    x seeds, see experiments/configs/sweep-demo.yaml): every trial is one run of this same
    training code, its TensorBoard logs under <runs-dir>/sweeps/<name>/trials/, and the
    summary names the best trial by evaluation reward (a run directory that
    agents.load_policy loads). --backend local runs the trials one after the other;
    --backend ray runs them as Ray Tune trials (pip install 'batch-env[ray]'), on a local
    Ray instance or the cluster at --address. The exit status is 1 when a trial failed.
    """
    if args.sweep is not None:
        return _cmd_sweep(args)
    for opt, dest, default in _SWEEP_ONLY:
        if getattr(args, dest) != default:
            raise ValueError(
                f"{opt}={getattr(args, dest)!r} applies to a sweep: give --sweep <yaml> too"
            )
    from agents.train import TrainArgs, train

    env_kwargs: dict[str, Any] | None = None
    if args.env_config is not None:
        env_kwargs = _env_config(args.env_config)
    if args.env_kwargs is not None:
        env_kwargs = {
            **(env_kwargs or {}),
            **(_parse_mapping(args.env_kwargs, "--env-kwargs") or {}),
        }
    if args.resume and args.run_dir is None:
        raise ValueError("--resume needs --run-dir <the run to continue>")
    targs = TrainArgs(
        algo=args.algo,
        env_id=args.env_id,
        env_kwargs=env_kwargs,
        hyperparams=hyperparams_file(args.hyperparams),
        n_timesteps=args.n_timesteps,
        seed=args.seed,
        vectorized=True if args.vectorized else None,
        num_envs=args.num_envs,
        run_dir=args.run_dir,
        centering_gain=args.centering_gain,
        device=args.device,
        threads=args.threads,
        checkpoint_freq=args.checkpoint_freq,
        eval_freq=args.eval_freq,
        eval_episodes=args.eval_episodes,
        warm_start=_parse_mapping(args.warm_start, "--warm-start"),
        keep_best=True if args.keep_best else None,
        resume=args.resume,
        progress=not args.no_progress and not args.json,
        announce=not args.json,
        verbose=args.verbose,
    )
    run = train(targs)
    final = run / "final_evaluation.json"
    result = {
        "run_dir": str(run),
        "final_evaluation": json.loads(final.read_text()) if final.exists() else None,
    }
    if args.json:
        print(dumps(result, indent=2))
    else:
        if isinstance(result["final_evaluation"], dict):
            _print_final_evaluation(result["final_evaluation"], run)
        print(f"run saved in {run}/  (model.zip, vecnormalize.pkl, config.yaml, checkpoints/)")
        print(f"watch it: tensorboard --logdir {run / 'tb'}")
    return 0


def _read_algo(run: Any) -> str:
    """The algorithm a ``batch-env train`` run was trained with (its config.yaml)."""
    from agents.policy import read_run_config

    return str(read_run_config(run)["algo"])


def _print_final_evaluation(ev: dict[str, Any], run: Any) -> None:
    """``train``'s lines on its final evaluation: the real reward rate per second (not the
    shaped rewards the algorithm learned from), against greedy on the same held-out
    episodes, and the normalized score on a benchmark task."""
    det = ev["deterministic"]
    m, h = det["reward_rate_per_s"]
    gap = f", {det['gap_percent']:.2f}% above the SMDP optimum" if "gap_percent" in det else ""
    what = "(minus the serving cost per second, not the shaped rewards training sees)"
    if ev.get("loads"):  # one episode per load: the spread is the loads', not noise
        at = ", ".join(f"{x:g}" for x in ev["loads"])
        gap = gap.replace("the SMDP optimum", "the optimum at those loads")
        print(
            f"deterministic evaluation at loads {at}: mean reward rate {m:.4g} per second {what}{gap}"
        )
    else:
        print(f"deterministic evaluation: reward rate {m:.4g} ± {h:.2g} per second {what}{gap}")
    ref = ev.get("reference")
    if ref:
        d, dh = ref["difference"]
        name = ref["policy"]
        verdict = (
            f"better than {name}"
            if d - dh > 0
            else f"worse than {name}"
            if d + dh < 0
            else f"not distinguishable from {name} on these episodes"
        )
        hint = "; train longer (--n-timesteps) or see docs/tutorials/train.md" if d < 0 else ""
        print(
            f"{name} on the same held-out episodes: {ref['reward_rate_per_s'][0]:.4g} per "
            f"second; the agent is {verdict} ({d:+.4g} ± {dh:.2g} per second, paired){hint}"
        )
        if "normalized_score" in ref:
            algo = _read_algo(run)
            print(
                f"normalized score on {ref['task']} ≈ {ref['normalized_score']:.3g} ± "
                f"{ref['normalized_score_ci95']:.2g} (0 = greedy, 1 = the task's bound or best "
                f"reference; paired with greedy on these episodes; the protocol's figure: "
                f"batch-env benchmark --policy {algo}:{run} --tasks {ref['task']})"
            )
    kb = ev.get("kept_best")
    if kb:
        print(
            f"kept the model of the evaluation at step {kb['timesteps']} (best of "
            f"{kb['evaluations']}; the last, at step {kb['final_timesteps']}, scored "
            f"{kb['final_score']:.4g} per second)"
        )


#: train options that only a sweep uses: (option, dest, default)
_SWEEP_ONLY = (
    ("--backend", "backend", "local"),
    ("--address", "address", None),
    ("--num-cpus", "num_cpus", None),
    ("--max-retries", "max_retries", 3),
    ("--runs-dir", "runs_dir", "runs"),
)
#: train options that a sweep's YAML sets instead: (option, dest, YAML field); not given = None (False for flags)
_SET_BY_SWEEP = (
    ("--algo", "algo", "algo"),
    ("--env-id", "env_id", "env_id"),
    ("--env-kwargs", "env_kwargs", "env"),
    ("--env-config", "env_config", "env"),
    ("--hyperparams", "hyperparams", "hyperparams"),
    ("--n-timesteps", "n_timesteps", "n_timesteps"),
    ("--seed", "seed", "seeds"),
    ("--vectorized", "vectorized", "vectorized"),
    ("--num-envs", "num_envs", "num_envs"),
    ("--run-dir", "run_dir", "name (with --runs-dir)"),
    ("--centering-gain", "centering_gain", "centering_gain"),
    ("--eval-episodes", "eval_episodes", "eval_episodes"),
    ("--warm-start", "warm_start", "(trials start from scratch)"),
    ("--keep-best", "keep_best", "(a trial keeps its last model)"),
    ("--resume", "resume", "(a rerun resumes)"),
    ("--device", "device", "(trials train on the CPU)"),
    ("--threads", "threads", "(one thread per trial)"),
    ("--checkpoint-freq", "checkpoint_freq", "(one checkpoint at the end)"),
    ("--eval-freq", "eval_freq", "(one evaluation at the end, eval_episodes)"),
)


def _cmd_sweep(args: argparse.Namespace) -> int:
    """``train --sweep``: run the sweep, print its summary (see cmd_train)."""
    from experiments.sweep import run_sweep

    for opt, dest, field in _SET_BY_SWEEP:
        if getattr(args, dest) is not None and getattr(args, dest) is not False:
            raise ValueError(
                f"{opt}={getattr(args, dest)!r} cannot be combined with --sweep: the sweep YAML "
                f"sets it (field {field})"
            )
    with _stdout_to_stderr(args.json):  # Ray Tune prints its tables: keep --json output pure
        summary = run_sweep(
            args.sweep,
            runs_dir=args.runs_dir,
            backend=args.backend,
            address=args.address,
            max_retries=args.max_retries,
            num_cpus=args.num_cpus,
            progress=not args.json,
        )
    if args.json:
        print(dumps({k: v for k, v in summary.items() if k != "markdown"}, indent=1))
    else:
        print(summary["markdown"])
        print(f"summary.md, summary.csv and summary.json in {summary['dir']}/")
        for f in summary["failed"]:
            print(f"trial {f['trial']} failed: {f['error']}", file=sys.stderr)
    return 1 if summary["failed"] else 0


def hyperparams_file(value: str | None) -> str | None:
    """``--hyperparams``: a YAML file, or the name of a shipped hyperparameter file (with
    or without ``.yml``): one of ``experiments/configs`` (``ppo-node-fraction``, ...) or
    of ``agents/hyperparams`` (``ppo``, ``a2c``, ...), found in the installed package.

    :raises FileNotFoundError: naming the value and listing the shipped names."""
    from pathlib import Path

    if value is None or Path(value).is_file():
        return value
    shipped = shipped_hyperparams()
    name = value.removesuffix(".yml").removesuffix(".yaml")
    if name in shipped and not Path(value).is_dir():
        return str(shipped[name])
    raise FileNotFoundError(
        f"hyperparameter file {value!r} not found"
        + (" (it is a folder)" if Path(value).is_dir() else "")
        + f": give a YAML file, or a shipped name: {', '.join(sorted(shipped))}"
    )


def shipped_hyperparams() -> dict[str, Any]:
    """The shipped hyperparameter files by name: ``agents/hyperparams/<algo>.yml`` and the
    files of ``experiments/configs`` that map env ids to hyperparameters (rl-zoo3 format;
    the other configs there are experiments')."""
    from importlib import resources
    from pathlib import Path

    from agents.common import HYPERPARAMS_DIR

    found: dict[str, Any] = {p.stem: p for p in HYPERPARAMS_DIR.glob("*.yml")}
    configs = Path(str(resources.files("experiments") / "configs"))
    for p in sorted(configs.glob("*.y*ml")):
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            continue
        if isinstance(data, dict) and data and all("/" in str(k) for k in data):
            found.setdefault(p.stem, p)
    return found


def _env_config(value: str) -> dict[str, Any]:
    """``--env-config``: the env kwargs in a YAML file, or a benchmark task's id for its
    kwargs (to change some of them with --env-kwargs on the task's base id, --env-id)."""
    from batch_env import tasks

    if value in tasks.TASKS:
        return tasks.variant(value)
    return _load_yaml_mapping(value, "--env-config")


def _load_yaml_mapping(path: str, field: str) -> dict[str, Any]:
    """The mapping in the YAML file an option names; ``ValueError`` (``FileNotFoundError``)
    naming the option and the file when it is missing, unreadable, not YAML or not a mapping."""
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"{field}={path!r}: file not found" + (" (it is a folder)" if p.is_dir() else "")
        )
    try:
        value = yaml.safe_load(p.read_bytes().decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{field}={path!r} is not valid YAML: {_one_line(exc)}") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{field}={path!r} must hold a mapping of env kwargs, got {type(value).__name__}"
        )
    return value


def cmd_agents(args: argparse.Namespace) -> int:
    """Train agents per setting and per benchmark task entry of the config, and compare
    them with the SMDP optimum, the baselines and the tasks' stored references (on each
    task's protocol, and at fixed loads where an entry has a check)."""
    from experiments.agents import run_agents_experiment

    result = run_agents_experiment(
        args.config,
        runs_dir=args.runs_dir,
        results_dir=args.results_dir,
        workers=args.workers,
        settings=args.settings,
        task_entries=args.tasks,
    )
    if args.json:
        print(dumps(result["results"], indent=1))
    else:
        print(result["markdown"])
        print(f"tables and plot in {result['dir']}/")
    return 0


def cmd_lazybatching(args: argparse.Namespace) -> int:
    """Node-level batching (LazyBatching) vs graph batching on NodeBatching-v0, with ratios."""
    from experiments.lazybatching import run_lazybatching

    result = run_lazybatching(
        args.config, results_dir=args.results_dir, progress=not args.json, train=not args.no_train
    )
    if args.json:
        print(dumps(result["ratios"], indent=1))
    else:
        print(result["markdown"])
        print(f"tables, ratios and plots in {result['dir']}/")
    return 0


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


def cmd_llm(args: argparse.Namespace) -> int:
    """LLM batching on LLMBatching-v0: capacity and throughput at the SLA of static caps,
    Pang et al.'s memory-aware / SLA-feedback / combined policies and a PPO agent."""
    from experiments.compare import check_name
    from experiments.llm import load_llm_config, run_llm

    name = args.name if args.name is not None else load_llm_config(args.config)["name"]
    check_name(name, "--name")
    out = f"{args.results_dir}/{name}"
    result = run_llm(args.config, out_dir=out, progress=not args.json, train=not args.no_train)
    if args.json:
        print(dumps(result["gains"], indent=1))
    else:
        print(result["markdown"])
        print(f"tables and plots in {result['dir']}/")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """Measure a latency/power profile of a real PyTorch model and write it as JSON."""
    from pathlib import Path

    from agents.common import check_device
    from batch_env.real.models import MODELS
    from batch_env.real.profiling import measure_profile, write_profile

    try:
        sizes = tuple(int(x) for x in args.batch_sizes.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1 or list(sizes) != sorted(set(sizes)):
        raise ValueError(
            f"--batch-sizes={args.batch_sizes!r} is invalid: expected increasing integers >= 1 "
            "separated by commas, e.g. 1,2,4,8"
        )
    if args.model not in MODELS:
        raise ValueError(f"--model={args.model!r} is unknown: allowed values are {sorted(MODELS)}")
    check_device("--device", args.device)
    model_kwargs = _parse_mapping(args.model_kwargs, "--model-kwargs")
    if Path(args.out).is_dir():
        raise ValueError(
            f"--out={args.out!r} is a folder: give the JSON file to write, e.g. {args.out}/profile.json"
        )
    prof = measure_profile(
        args.model,
        torch_device=args.device,
        batch_sizes=sizes,
        min_time_s=args.min_time_s,
        nodes=not args.no_nodes,
        width=args.width,
        depth=args.depth,
        threads=args.threads,
        cuda_graphs=args.cuda_graphs,
        model_kwargs=model_kwargs,
        name=args.name,
        progress=None if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True)),
    )
    path = write_profile(prof, args.out)
    if args.json:
        print(dumps({"path": str(path), "profile": prof}, indent=1))
    else:
        print(f"{prof['name']}: {prof['device']}")
        for b, lat, p in zip(prof["batch_sizes"], prof["latency_ms"], prof["power_w"], strict=True):
            print(f"  batch {b:4d}: {lat:9.3f} ms  {p:7.1f} W")
        print(f"idle {prof['idle_power_w']} W ({prof['idle_power_source']})")
        print(f"wrote {path}")
    return 0


def cmd_roundtrip(args: argparse.Namespace) -> int:
    """Measure a small model's profile, then compare profile mode with real mode on the same seeds.

    Reports, per env, the speed ratio (model time measured in the real-mode episodes over
    what the profile predicts for the same calls), the as-measured differences, the
    speed-matched ones (the profile scaled by that ratio: the simulator given the
    machine's mean speed) and the speed-tracked ones (each call scaled by the real run's
    speed at that moment: the simulator given the machine's speed over time), each as the
    median over the cycles.
    """
    from experiments.roundtrip import run_roundtrip

    _check_folder("--out", args.out)
    res = run_roundtrip(
        args.out,
        load=args.load,
        horizon_requests=args.horizon_requests,
        episodes=args.episodes,
        repeats=args.repeats,
    )
    if args.json:
        print(dumps({k: v for k, v in res.items() if k != "markdown"}, indent=1))
    else:
        print(res["markdown"])
        print(f"wrote {args.out}/roundtrip.json, roundtrip.md, profile.json")
    return 0


def cmd_solve_smdp(args: argparse.Namespace) -> int:
    """Solve the SMDP-optimal batching policy of an env configuration."""
    from agents.common import make_raw_env
    from baselines.smdp import SMDPProblem, solve

    kw = _env_kwargs(args)
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


def _add_backend_args(p: argparse.ArgumentParser, unit: str) -> None:
    """--backend, --address and --num-cpus (shared by compare and train --sweep)."""
    from experiments.harness.backends import BACKENDS

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
        type=_count(1),
        default=None,
        help="ray backend without --address: CPUs of the local Ray instance (default: all)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``batch-env`` (every subcommand has ``--help``)."""
    parser = _Parser(
        prog="batch-env",
        description="Dynamic batching for ML inference serving as RL environments.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    from experiments import record

    record.add_parser(sub, _count, _parse_mapping)

    p = sub.add_parser(
        "demo",
        help="compare every baseline on the default env (small) and print the table",
        description=cmd_demo.__doc__,
    )
    p.add_argument(
        "--config", default="demo", help="comparison config name or YAML path (default: demo)"
    )
    p.add_argument(
        "--results-dir", default="results", help="parent folder of the outputs (default results)"
    )
    p.add_argument(
        "--runs-dir", default="runs", help="parent folder of the training run (default runs)"
    )
    p.add_argument(
        "--train-steps",
        type=_count(0),
        default=30_000,
        help="PPO steps to train first (0: no agent; default 30000)",
    )
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "compare",
        help="run (or resume) a comparison experiment from a YAML config",
        description=cmd_compare.__doc__,
    )
    p.add_argument(
        "--config",
        default="default",
        help="config name in experiments/configs or a YAML path (default: default)",
    )
    p.add_argument(
        "--results-dir", default="results", help="parent folder of the outputs (default results)"
    )
    _add_backend_args(p, "cell")
    p.add_argument(
        "--max-retries",
        type=_count(0),
        default=3,
        help="ray backend: retries of a cell whose worker process died (default 3); a cell that "
        "raises is not retried but recorded as failed",
    )
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "solve-smdp",
        help="solve the SMDP-optimal policy of an env configuration",
        description=cmd_solve_smdp.__doc__,
    )
    _add_env_args(p)
    p.add_argument(
        "--rate-per-s",
        type=_positive,
        default=None,
        help="Poisson arrival rate per second (instead of --load/--workload)",
    )
    p.add_argument(
        "--max-states",
        type=_count(1),
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
    _add_env_args(p)
    import batch_env

    p.add_argument(
        "--env-id",
        default=None,
        choices=list(batch_env.ENV_IDS),
        help="registered env id (default batch_env/DynamicBatching-v0; with an agent and no env option, "
        "the agent's own env); an option above that the env "
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
    from baselines import available

    p.add_argument(
        "--policy",
        nargs="+",
        default=["greedy"],
        help=f"policies to evaluate: baselines ({', '.join(available())}) or trained agents as <algo>:<run_dir>",
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "train", help="train an SB3 agent and log it to TensorBoard", description=cmd_train.__doc__
    )
    kept = "; --resume keeps the run's own"
    p.add_argument(
        "--algo",
        choices=["ppo", "a2c", "dqn", "ppo_mask", "ppo_lstm"],
        default=None,
        help=f"algorithm (default ppo{kept})",
    )
    p.add_argument(
        "--env-id",
        default=None,
        help=f"registered env id (default batch_env/DynamicBatching-v0{kept})",
    )
    p.add_argument(
        "--env-kwargs",
        default=None,
        help=f"env kwargs mapping, e.g. '{{workload: {{kind: poisson, load: 0.6}}}}' (default {{}}{kept})",
    )
    p.add_argument(
        "--env-config",
        default=None,
        help="YAML file of env kwargs, or a benchmark task's id for its kwargs (--env-kwargs "
        "override it): a changed task is its base id with them, e.g. --env-id "
        "batch_env/DynamicBatching-v0 --env-config batch_env/LowLoadEnergy-v0 --env-kwargs "
        "'{workload: {kind: poisson, load: 0.9}}' (a task id refuses the change)",
    )
    p.add_argument(
        "--hyperparams",
        default=None,
        help="rl-zoo3 style YAML, or the name of a shipped one (ppo-node-fraction, ... of "
        f"experiments/configs; ppo, a2c, ... of agents/hyperparams; default "
        f"agents/hyperparams/<algo>.yml{kept})",
    )
    p.add_argument(
        "--n-timesteps",
        type=_count(0),
        default=None,
        help="total env steps (default: the hyperparameter file's; with --resume: the run's own, or a "
        "larger value to extend it; 0 only with --warm-start: the cloned policy, no RL)",
    )
    p.add_argument("--seed", type=_count(0), default=None, help=f"seed (default 0{kept})")
    p.add_argument(
        "--vectorized",
        action="store_true",
        help="train on one Gymnasium vector env (the env's NumPy vector env when it registers one, "
        "else SyncVectorEnv) through agents.vec_env.SB3VecEnv instead of SB3's DummyVecEnv; "
        f"same training otherwise{kept}",
    )
    p.add_argument(
        "--num-envs",
        type=_count(1),
        default=None,
        metavar="N",
        help="training envs (lanes of the vector env with --vectorized); default: the "
        f"hyperparameter file's n_envs{kept}",
    )
    p.add_argument(
        "--run-dir", default=None, help="output folder (default runs/<algo>-s<seed>-<time>)"
    )
    from agents.wrappers import DEFAULT_CENTERING_GAIN

    p.add_argument(
        "--centering-gain",
        default=None,
        help=f"g of average-reward centring: greedy (greedy's measured cost rate), smdp, online or a "
        f"number; on an env that draws its load per episode (batch_env/AnyLoad-v0, "
        f"NodeAnyLoad-v0) also greedy-by-load, lazy-by-load (node-level) or smdp-by-load, a "
        f"gain per load read at the "
        f"policy's load estimate each step; on any DynamicBatching workload (traces, bursts) "
        f"smdp-by-rate, the SMDP gain at the observed rate as if Poisson; "
        f"default {DEFAULT_CENTERING_GAIN}, or the gain the "
        f"hyperparameter file gives agents.wrappers.CenteredReward{kept}",
    )
    p.add_argument("--device", default=None, help=f"auto, cpu or cuda (default auto{kept})")
    p.add_argument(
        "--threads", type=_count(1), default=None, help=f"torch threads (default 1{kept})"
    )
    p.add_argument(
        "--checkpoint-freq",
        type=_count(1),
        default=None,
        help=f"checkpoint every N steps (default 50000{kept})",
    )
    p.add_argument(
        "--eval-freq",
        type=_count(0),
        default=None,
        help=f"evaluate every N steps, 0: never (default 50000{kept})",
    )
    p.add_argument(
        "--eval-episodes",
        type=_count(1),
        default=None,
        help=f"episodes per evaluation (default 3{kept})",
    )
    p.add_argument(
        "--warm-start",
        default=None,
        metavar="YAML",
        help="clone a baseline before RL (agents.warm_start): '{policy: <baseline>, params: "
        "{...}, steps: 100000, epochs: 10}' runs the baseline on the training envs for steps "
        "env steps and fits the actor to its actions and the critic to its discounted "
        f"rewards for epochs passes; writes warm_start.json in the run (default none{kept})",
    )
    p.add_argument(
        "--keep-best",
        action="store_true",
        help="end with the model of the best periodic evaluation (deterministic reward rate on "
        "the held-out evaluation seeds; the starting model, e.g. a --warm-start clone, included) "
        "instead of the last; needs --eval-freq > 0; final_evaluation.json's kept_best says "
        f"which was kept (default off{kept})",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue --run-dir from its newest usable checkpoint with its saved settings; an option "
        "given again must equal the saved value, except a larger --n-timesteps (extends the run)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--verbose",
        type=_count(0),
        default=0,
        help="SB3's verbosity: 1 prints its console table after each rollout, where "
        "rollout/ep_reward_rate_per_s (the real reward rate per second) sits beside the "
        "shaped rollout/ep_rew_mean, with serving/ and eval/ (default 0)",
    )
    p.add_argument(
        "--sweep",
        default=None,
        metavar="YAML",
        help="run a training sweep from a YAML file or a config name (e.g. sweep-demo): algorithms x "
        "hyperparameter grid x seeds, one run per trial, best trial by evaluation reward; the "
        "options above that the YAML sets are not allowed with it",
    )
    _add_backend_args(p, "trial of --sweep")
    p.add_argument(
        "--max-retries",
        type=_count(0),
        default=3,
        help="--sweep on ray: retries of a trial whose worker process died (default 3)",
    )
    p.add_argument(
        "--runs-dir",
        default="runs",
        help="--sweep: outputs go to <runs-dir>/sweeps/<name>/ (default runs)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "agents",
        help="train agents and compare them with the SMDP optimum and baselines",
        description=cmd_agents.__doc__,
    )
    p.add_argument(
        "--config", default="agents", help="config name in experiments/configs or a YAML path"
    )
    p.add_argument(
        "--settings",
        nargs="+",
        default=None,
        help="only these settings of the config (with --tasks alone: none)",
    )
    p.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        help="only these entries of the config's benchmark tasks (with --settings alone: none)",
    )
    p.add_argument(
        "--runs-dir", default="runs", help="parent folder of the training runs (default runs)"
    )
    p.add_argument(
        "--results-dir", default="results", help="parent folder of the outputs (default results)"
    )
    p.add_argument(
        "--workers",
        type=_count(1),
        default=2,
        help="training and evaluation processes in parallel (default 2)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=cmd_agents)

    p = sub.add_parser(
        "lazybatching",
        help="node-level (LazyBatching) vs graph batching: sweep, ratios, plots",
        description=cmd_lazybatching.__doc__,
    )
    p.add_argument(
        "--config", default="lazybatching", help="config name in experiments/configs or a YAML path"
    )
    p.add_argument(
        "--results-dir", default="results", help="parent folder of the outputs (default results)"
    )
    p.add_argument(
        "--no-train", action="store_true", help="do not train missing agent runs (error instead)"
    )
    p.add_argument("--json", action="store_true", help="print the ratios as JSON")
    p.set_defaults(func=cmd_lazybatching)

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
    p.add_argument(
        "--results-dir",
        default="results/regimes",
        help="parent folder of the outputs (default results/regimes)",
    )
    _add_backend_args(p, "cell")
    p.add_argument("--json", action="store_true", help="print the claims table as JSON")
    p.set_defaults(func=cmd_regimes)

    p = sub.add_parser(
        "llm",
        help="LLM batching: capacity and throughput at the SLA per policy, plots",
        description=cmd_llm.__doc__,
    )
    p.add_argument(
        "--config", default="llm", help="config name in experiments/configs or a YAML path"
    )
    p.add_argument(
        "--results-dir", default="results", help="parent folder of the outputs (default results)"
    )
    p.add_argument("--name", default=None, help="output folder name (default: the config's name)")
    p.add_argument(
        "--no-train", action="store_true", help="do not train missing agent runs (error instead)"
    )
    p.add_argument("--json", action="store_true", help="print the gains as JSON")
    p.set_defaults(func=cmd_llm)

    p = sub.add_parser(
        "profile",
        help="measure a real PyTorch model's latency/power profile (JSON)",
        description=cmd_profile.__doc__,
    )
    p.add_argument(
        "--model",
        default="resnet50",
        help="resnet50, googlenet, bert-base or gpt-small (default resnet50)",
    )
    p.add_argument("--device", default="auto", help="torch device: auto, cpu, cuda (default auto)")
    p.add_argument(
        "--batch-sizes", default="1,2,4,8,16,32,64,128", help="comma-separated, increasing"
    )
    p.add_argument(
        "--min-time-s",
        type=_positive,
        default=2.0,
        help="back-to-back seconds per batch size (default 2)",
    )
    p.add_argument(
        "--width",
        type=_positive,
        default=1.0,
        help="model width multiplier (default 1 = the real model)",
    )
    p.add_argument(
        "--depth", type=_count(1), default=None, help="model depth (default: the real model's)"
    )
    p.add_argument(
        "--threads", type=_count(1), default=None, help="torch.set_num_threads (recorded)"
    )
    p.add_argument(
        "--cuda-graphs", action="store_true", help="time whole-model batches with CUDA graphs"
    )
    p.add_argument(
        "--model-kwargs", default=None, help="more model arguments, e.g. '{image_size: 64}'"
    )
    p.add_argument("--no-nodes", action="store_true", help="skip the per-node tables")
    p.add_argument("--name", default=None, help="profile name (default: model and device)")
    p.add_argument("--out", default="profile.json", help="output JSON path (default profile.json)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser(
        "roundtrip",
        help="profile mode vs real mode on a small CPU model (same seeds)",
        description=cmd_roundtrip.__doc__,
    )
    p.add_argument(
        "--out", default="results/roundtrip", help="output folder (default results/roundtrip)"
    )
    p.add_argument(
        "--load", type=_positive, default=0.5, help="load of the measured profile (default 0.5)"
    )
    p.add_argument(
        "--horizon-requests",
        type=_count(1),
        default=1000,
        help="requests per episode (default 1000)",
    )
    p.add_argument(
        "--episodes", type=_count(1), default=3, help="seeded episodes per mode (default 3)"
    )
    p.add_argument(
        "--repeats",
        type=_count(1),
        default=3,
        help="measure-and-compare cycles; the median counts (default 3)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_roundtrip)

    p = sub.add_parser(
        "benchmark",
        help="a policy on the named benchmark tasks: reward rates, CIs, normalized scores",
        description=cmd_benchmark.__doc__,
    )
    p.add_argument(
        "--policy",
        default=None,
        help="a baseline name, 'random', or a trained agent <algo>:<run_dir>",
    )
    p.add_argument(
        "--tasks",
        default=None,
        help="comma-separated task ids (default: every task of batch_env.tasks)",
    )
    p.add_argument(
        "--horizon-requests",
        type=_count(1),
        default=None,
        help="shorten the episodes (the table then says it is not the protocol)",
    )
    p.add_argument(
        "--references",
        action="store_true",
        help="recompute the tasks' reference figures (random, greedy, smdp, ...) and bounds",
    )
    p.add_argument(
        "--out",
        default=None,
        help="with --references: the JSON file to write (default: batch_env/tasks_references.json)",
    )
    p.add_argument(
        "--jobs",
        type=_count(1),
        default=1,
        help="with --references: reference runs in parallel processes (default 1; the "
        "figures are the same whatever it is)",
    )
    p.add_argument(
        "--only",
        default=None,
        help="with --references: run only these reference policies (comma-separated "
        "labels, e.g. random,greedy), filling their episode caches; the references file "
        "is left as it is",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="with --references: reuse the finished episodes of an interrupted run (each "
        "run appends them to RESULTS_DIR/episodes/<task>/<policy>.jsonl as they end; "
        "without --resume a run starts that file afresh). Only with the same code: the "
        "file records the task, policy, seed and length, not the code's version",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="write the reference table (references.md) and plot (references.png) from the "
        "stored figures (or from --out's JSON) without running anything",
    )
    p.add_argument(
        "--results-dir",
        default="results/benchmark",
        help="with --references or --report: where the table and plot go (default "
        "results/benchmark)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_benchmark)

    p = sub.add_parser(
        "bench",
        help="env steps/s vs CartPole-v1 in the same process",
        description=cmd_bench.__doc__,
    )
    p.add_argument(
        "--steps", type=_count(1), default=200_000, help="steps per timed round (default 200000)"
    )
    p.add_argument(
        "--repeats",
        type=_count(1),
        default=5,
        help="timed rounds (default 5); each round runs an env and its reference back to "
        "back, the rates shown are the best round's and each ratio the median of the rounds'",
    )
    p.add_argument("--out", default="results/bench", help="output folder (default results/bench)")
    p.add_argument(
        "--skip-smdp", action="store_true", help="skip the SMDP solver vs pymdptoolbox part"
    )
    p.add_argument("--skip-ppo", action="store_true", help="skip the PPO training speed part")
    p.add_argument(
        "--skip-vector", action="store_true", help="skip the vector env vs CartPoleVectorEnv part"
    )
    p.add_argument(
        "--skip-torch", action="store_true", help="skip the real executor's overhead part"
    )
    p.add_argument(
        "--skip-ray",
        action="store_true",
        help="skip the comparison's local vs Ray backend part (cells/s; skipped anyway without Ray)",
    )
    p.add_argument(
        "--skip-render", action="store_true", help="skip the rgb_array frame cost vs step part"
    )
    p.add_argument(
        "--wallclock",
        action="store_true",
        help="also measure PPO's wall-clock to within 1%% of the SMDP gain on "
        "batch_env/LowLoadEnergy-v0 against CartPole-v1's to a mean return of 475, same "
        "settings (median over seeds, steps and seconds; about 20 minutes on one core, so "
        "not in the default run); also written to wallclock.json",
    )
    p.add_argument(
        "--wallclock-only",
        action="store_true",
        help="run only the --wallclock item and write only wallclock.json",
    )
    p.add_argument(
        "--wallclock-seeds",
        type=_count(1),
        default=3,
        help="training seeds of the wall-clock item, 0..N-1 (default 3)",
    )
    p.add_argument(
        "--wallclock-budget",
        type=_count(1),
        default=None,
        help="step budget of each wall-clock run (default: the hyperparameter file's n_timesteps, 300000)",
    )
    p.add_argument(
        "--wallclock-eval-freq",
        type=_count(1),
        default=10_000,
        help="steps between the wall-clock runs' evaluations (default 10000)",
    )
    p.add_argument(
        "--vector-sizes",
        default="1,64,1024,4096",
        help="num_envs values of the vector part, comma-separated (default 1,64,1024,4096)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "data",
        help="list and fetch the public datasets traces can name (docs/data.md)",
        description=cmd_data.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dsub = p.add_subparsers(dest="data_command", metavar="{list,fetch}", required=True)
    q = dsub.add_parser(
        "list",
        help="the known datasets, and which are shipped or fetched",
        description="The known datasets: shipped (no download), fetched (in the "
        "cache) or not fetched; the cache folder on stderr.",
    )
    q.add_argument("--json", action="store_true", help="print the registry as JSON")
    q.set_defaults(func=cmd_data)
    q = dsub.add_parser(
        "fetch",
        help="download a dataset into the cache and check its SHA-256",
        description="Download dataset NAME into the cache folder ($BATCH_ENV_DATA_DIR "
        "or the user's cache) and check its SHA-256; needs pip install 'batch-env[data]'. "
        "A shipped dataset or one already fetched is not downloaded again.",
    )
    q.add_argument("name", help="a dataset name (see batch-env data list)")
    q.add_argument(
        "--url",
        default=None,
        help="download from here instead: a mirror, or file:///path of a local copy",
    )
    q.add_argument(
        "--sha256",
        default=None,
        help="the SHA-256 the file must have (for a dataset whose registry entry has none)",
    )
    q.add_argument(
        "--force", action="store_true", help="download again even when the file is in the cache"
    )
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.set_defaults(func=cmd_data)
    return parser


def cmd_data(args: argparse.Namespace) -> int:
    """List the known datasets or fetch one (``batch-env data list``, ``batch-env data fetch NAME``).

    Traces name a dataset instead of a file: ``{kind: trace, dataset: azure-conv-2023}``.
    Shipped excerpts (``azure-conv-2023-excerpt``, ``azure-code-2023-excerpt``) need no
    download; the full traces are fetched once into the cache folder ($BATCH_ENV_DATA_DIR,
    else the user's cache folder) and checked against their SHA-256 (docs/data.md).
    An unknown name is exit status 2; a failed download or a checksum mismatch, 1.
    """
    from batch_env.workload import datasets as data

    if args.data_command == "list":
        data.print_list(args.json)
        return 0
    d = data.get(args.name)  # an unknown name: DatasetError (a ValueError), exit status 2
    data.check_sha256(d.name, args.sha256)  # a malformed or contradicting --sha256: the same
    if not d.shipped and not args.force and data.is_available(d.name):
        print(f"{d.name}: already in the cache", file=sys.stderr)
    elif not d.shipped:
        print(f"{d.name}: downloading {args.url or d.url}", file=sys.stderr)
    try:
        path, digest = data.fetch(
            d.name,
            url=args.url,
            sha256=args.sha256,
            force=args.force,
            progress=not args.no_progress,
        )
    except data.DatasetError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 1
    if d.shipped:
        print(f"{d.name}: shipped with the package, no download needed", file=sys.stderr)
    if d.sha256 is not None:
        print(f"{d.name}: SHA-256 {digest} (matches the registry)", file=sys.stderr)
    elif args.sha256 is not None:
        print(f"{d.name}: SHA-256 {digest} (matches --sha256)", file=sys.stderr)
    else:
        print(
            f"warning: {d.name} has no published checksum; SHA-256 of this download: {digest} "
            f"(recorded in {path}.sha256: later fetches must match it)",
            file=sys.stderr,
        )
    print(path)
    return 0


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
                _check_folder(f"--{dest.replace('_', '-')}", getattr(args, dest))
        return args.func(args)
    except _USER_ERRORS as exc:
        print(f"error: {_one_line(exc) or type(exc).__name__}", file=sys.stderr)
        return 2
    except ImportError as exc:
        from experiments.harness.backends import RayUnavailableError

        if not isinstance(exc, RayUnavailableError):
            raise
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2


class _Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one line, ``error: ...``, exit status 2."""

    def error(self, message: str) -> Any:
        self.exit(2, f"error: {self.prog}: {_one_line(message)} (see {self.prog} --help)\n")


def _check_folder(option: str, path: Any) -> None:
    """Refuse an output folder option that names an existing file (before any work)."""
    from pathlib import Path

    if Path(path).exists() and not Path(path).is_dir():
        raise ValueError(f"{option}={str(path)!r} is a file: give a folder")


if __name__ == "__main__":
    sys.exit(main())
