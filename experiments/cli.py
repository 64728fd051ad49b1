"""The ``batch-env`` command: the top layer, the only one that imports all others.

Subcommands: ``demo`` (a small comparison of every baseline on the default env),
``compare`` (the comparison experiment from a YAML config; ``--backend local|ray``),
``evaluate`` (baselines or trained agents on one env configuration), ``train`` (SB3
agents with TensorBoard; ``--sweep`` for a training sweep, locally or on Ray Tune),
``agents`` (agents against the SMDP optimum), ``lazybatching`` (node-level vs graph
batching on NodeBatching-v0, with the paper's ratios), ``llm`` (LLM batching on
LLMBatching-v0: capacity and throughput at the SLA), ``profile`` (measure a real
model's profile), ``roundtrip`` (profile mode vs real mode), ``solve-smdp`` (the
SMDP-optimal policy of an env), ``bench`` (speed against CartPole and pymdptoolbox,
and the comparison's local vs Ray backends).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import yaml

from batch_env.metrics import HEADLINE_KEYS

SHOWN_KEYS = HEADLINE_KEYS


def _finite(obj: Any) -> Any:
    """Replace NaN and infinities by None, recursively, for strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that writes NaN as ``null`` (strict JSON, readable by any parser)."""
    return json.dumps(_finite(obj), allow_nan=False, default=str, **kwargs)


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


def _parse_mapping(text: str | None, field: str) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SystemExit(f"error: {field}={text!r} is not valid YAML/JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SystemExit(f"error: {field}={text!r} must be a mapping such as '{{kind: poisson, load: 0.6}}'")
    return value


def _llm_env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """LLMBatching-v0's kwargs: only the options it has (its own defaults otherwise)."""
    kw: dict[str, Any] = {}
    if args.profile != "resnet50-v100":
        kw["profile"] = args.profile
    workload = _parse_mapping(args.workload, "--workload")
    if workload is not None:
        kw["workload"] = workload
    weights = _parse_mapping(args.reward_weights, "--reward-weights")
    if weights is not None:
        kw["reward_weights"] = weights
    for name in ("horizon_requests", "warmup_requests", "queue_capacity"):
        if getattr(args, name) is not None:
            kw[name] = getattr(args, name)
    kw.update(_parse_mapping(getattr(args, "env_kwargs", None), "--env-kwargs") or {})
    return kw


def _env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    if getattr(args, "env_id", None) == "batch_env/LLMBatching-v0":
        return _llm_env_kwargs(args)
    kw: dict[str, Any] = {"profile": args.profile, "max_batch_size": args.max_batch_size}
    workload = _parse_mapping(args.workload, "--workload")
    kw["workload"] = workload if workload is not None else {"kind": "poisson", "load": args.load}
    weights = _parse_mapping(args.reward_weights, "--reward-weights")
    if weights is not None:
        kw["reward_weights"] = weights
    for name in ("sla_ms", "horizon_requests", "warmup_requests", "queue_capacity", "decision_interval_ms",
                 "service", "service_cv"):
        value = getattr(args, name)
        if value is not None:
            kw[name] = value
    kw.update(_parse_mapping(getattr(args, "env_kwargs", None), "--env-kwargs") or {})
    return kw


def _add_env_args(p: argparse.ArgumentParser) -> None:
    from batch_env.profile import available

    p.add_argument("--profile", default="resnet50-v100", help=f"profile name or JSON path; shipped: {', '.join(available())}")
    p.add_argument("--load", type=float, default=0.6, help="Poisson load rho = rate / max throughput (default 0.6)")
    p.add_argument("--workload", default=None, help="workload mapping, e.g. '{kind: mmpp, rates_per_s: [1000, 4000], switch_rates_per_s: [2, 2]}' (overrides --load)")
    p.add_argument("--max-batch-size", type=int, default=32, help="largest batch (default 32)")
    p.add_argument("--sla-ms", type=float, default=None, help="latency SLA in ms (default 15)")
    p.add_argument("--horizon-requests", type=int, default=None, help="summary requests per episode (default 2000)")
    p.add_argument("--decision-interval-ms", type=float, default=None, help="relative tick interval (default: ticks off)")
    p.add_argument("--service", choices=["deterministic", "lognormal"], default=None, help="service-time law")
    p.add_argument("--service-cv", type=float, default=None, help="coefficient of variation of lognormal service")
    p.add_argument("--queue-capacity", type=int, default=None, help="waiting requests admitted (default 2000)")
    p.add_argument("--warmup-requests", type=int, default=None, help="arrivals before the summary requests (default 0)")
    p.add_argument("--reward-weights", default=None, help="weights mapping, e.g. '{energy: 0.1}'")
    p.add_argument("--episodes", type=int, default=5, help="seeded episodes (default 5)")
    p.add_argument("--seed", type=int, default=0, help="first episode seed (default 0)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _run_policies(args: argparse.Namespace, names: list[str]) -> list[Any]:
    """Evaluate baselines (default parameters) on the env the arguments describe."""
    import gymnasium as gym

    import baselines
    import batch_env

    env = gym.make(getattr(args, "env_id", "batch_env/DynamicBatching-v0"), **_env_kwargs(args))
    results = []
    for name in names:
        if ":" in name:  # a trained agent: <algo>:<run_dir>
            from agents import load_policy, parse_policy_spec

            _, run_dir = parse_policy_spec(name)
            policy = load_policy(run_dir, name=name)
        else:
            policy = baselines.make(name, env=env)
        results.append(batch_env.evaluate(policy, env, n_episodes=args.episodes, seed=args.seed, name=name))
    return results


def cmd_demo(args: argparse.Namespace) -> int:
    """Train a short PPO run, then compare it with every baseline on a small config."""
    from pathlib import Path

    from experiments.compare import load_config, run_compare

    cfg = load_config(args.config)
    run = Path(args.runs_dir) / f"{cfg['name']}-ppo"
    if args.train_steps > 0:
        if not (run / "model.zip").exists():
            from agents.train import TrainArgs, train

            load = float(cfg["loads"][0])
            env_kwargs = {**cfg["env"], "workload": {**next(iter(cfg["workloads"].values())), "load": load}}
            print(f"training PPO for {args.train_steps} steps on load {load:g} -> {run}/", file=sys.stderr)
            train(TrainArgs(algo="ppo", env_kwargs=env_kwargs, n_timesteps=args.train_steps, run_dir=str(run),
                            eval_freq=0, checkpoint_freq=args.train_steps, progress=not args.json))
        cfg = load_config(args.config)
        cfg["policies"]["ppo-demo"] = {"agent": str(run)}
    return _print_compare(run_compare(cfg, results_dir=args.results_dir, progress=not args.json), args,
                          tensorboard=run / "tb" if args.train_steps > 0 else None)


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
        result = run_compare(args.config, results_dir=args.results_dir, progress=not args.json,
                             backend=args.backend, address=args.address, max_retries=args.max_retries,
                             num_cpus=args.num_cpus)
    return _print_compare(result, args)


def _stdout_to_stderr(active: bool) -> Any:
    """Send what libraries print (Ray's banners and tables) to stderr while ``active``."""
    import contextlib

    return contextlib.redirect_stdout(sys.stderr) if active else contextlib.nullcontext()


def _print_compare(result: dict[str, Any], args: argparse.Namespace, tensorboard: Any = None) -> int:
    failed = result.get("failed") or []
    if args.json:
        print(dumps({"dir": str(result["dir"]), "records": result["records"], "computed": result["computed"],
                     "reused": result["reused"], "failed": failed}))
        return 1 if failed else 0
    print(result["markdown"])
    print(f"tables, CSV and plots in {result['dir']}/ ({result['computed']} cells computed, "
          f"{result['reused']} reused, {len(failed)} failed)")
    if failed:
        print(f"{len(failed)} cell(s) failed (listed in summary.md and {result['dir']}/failed.json); "
              "rerun to retry them:", file=sys.stderr)
        for f in failed:
            print(f"  {f['key']}: {f['error']}", file=sys.stderr)
    if tensorboard is not None:
        print(f"watch the agent's training: tensorboard --logdir {tensorboard}")
    return 1 if failed else 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Evaluate baselines on one env configuration."""
    results = _run_policies(args, args.policy)
    if args.json:
        print(dumps([r.to_dict() for r in results], indent=2))
    else:
        print(format_table(results))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Measure env speed against CartPole and the SMDP solver against pymdptoolbox, and the
    comparison's cells/s on the local and the Ray backend (--skip-ray to leave it out)."""
    from experiments.bench import run_bench, write_results

    sizes = tuple(int(x) for x in args.vector_sizes.split(",") if x.strip())
    if not sizes or min(sizes) < 1:
        raise SystemExit(f"--vector-sizes={args.vector_sizes!r} is invalid: expected positive integers, e.g. 1,64,1024")
    result = run_bench(n_steps=args.steps, repeats=args.repeats, smdp=not args.skip_smdp, ppo=not args.skip_ppo,
                       vector=not args.skip_vector, vector_sizes=sizes, torch_overhead=not args.skip_torch,
                       backends=not args.skip_ray)
    path = write_results(result, args.out)
    if args.json:
        print(dumps(result, indent=2))
        return 0
    print(f"DynamicBatching-v0: {result['dynamic_batching_steps_per_s']:,.0f} steps/s")
    print(f"CartPole-v1:        {result['cartpole_steps_per_s']:,.0f} steps/s")
    print(f"step cost ratio (ours / CartPole): {result['step_cost_ratio_vs_cartpole']:.2f} "
          f"(floor: <= {result['floor_step_cost_ratio']:.1f})")
    vec = result.get("vector")
    if vec:
        for r in vec["sizes"]:
            print(f"vector env, {r['num_envs']:5d} lanes: {r['env_steps_per_s']:,.0f} env-steps/s vs "
                  f"CartPoleVectorEnv {r['cartpole_vector_env_steps_per_s']:,.0f} -> ratio {r['ratio_vs_cartpole']:.3f}")
        if vec["meets_floor_at_1024"] is not None:
            print(f"floor {vec['floor_env_steps_per_s_at_1024']:,} env-steps/s at 1024 lanes met: {vec['meets_floor_at_1024']}")
    ov = result.get("torch_executor_overhead")
    if ov:
        fracs = ", ".join(f"b={b}: {r['overhead_frac']:.1%}" for b, r in ov["run"].items())
        print(f"real executor overhead outside the model call ({ov['model']}): {fracs} "
              f"(floor: < {ov['floor_overhead_frac_b_ge_8']:.0%} at b >= 8)")
    sm = result.get("smdp")
    if sm:
        print(f"SMDP solve, {sm['n_states']} states, B={sm['max_batch_size']}, rho={sm['load']}: "
              f"policy iteration {sm['pi_s']:.3f} s, our RVI {sm['rvi_s']:.2f} s, "
              f"pymdptoolbox RVI {sm['pymdptoolbox_s']:.2f} s -> {sm['speedup_pi_vs_pymdptoolbox']:.0f}x "
              f"(floor: >= {sm['floor_speedup']:.0f}x); same policy: {sm['same_policy']}")
    pp = result.get("ppo")
    if pp:
        print(f"PPO training: {pp['dynamic_batching_ppo_steps_per_s']:,.0f} steps/s vs CartPole-v1 "
              f"{pp['cartpole_ppo_steps_per_s']:,.0f} steps/s -> ratio {pp['ratio']:.2f} (floor: >= {pp['floor_ratio']})")
    pv = result.get("ppo_vector")
    if pv:
        print(f"PPO training, {pv['num_envs']} lanes: native vector env {pv['native_vector_ppo_steps_per_s']:,.0f} "
              f"steps/s vs DummyVecEnv {pv['dummy_vec_env_ppo_steps_per_s']:,.0f} -> ratio {pv['ratio']:.2f}")
    cb = result.get("compare_backends")
    if cb and "skipped" in cb:
        print(f"compare backends: skipped ({cb['skipped']})")
    elif cb:
        print(f"compare, {cb['cells']} cells, Ray / local cells/s: first run {cb['ray_cells_per_s']:.2f} / "
              f"{cb['local_cells_per_s']:.2f} = {cb['ratio_ray_vs_local']:.2f} (with Ray's {cb['ray_startup_s']:.1f} s "
              f"start-up {cb['ratio_ray_with_startup_vs_local']:.2f}), warm {cb['ray_warm_cells_per_s']:.2f} / "
              f"{cb['local_warm_cells_per_s']:.2f} = {cb['ratio_ray_warm_vs_local_warm']:.2f}; "
              f"same results: {cb['same_results']}")
    print(f"written to {path}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """Train an SB3 agent (PPO, A2C, DQN, MaskablePPO) and print where its logs are.

    With --vectorized the training envs are the lanes of one Gymnasium vector env (the
    env's NumPy vector env when it registers one), stepped through agents.vec_env.SB3VecEnv.

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
            raise ValueError(f"{opt}={getattr(args, dest)!r} applies to a sweep: give --sweep <yaml> too")
    from agents.train import TrainArgs, train

    env_kwargs: dict[str, Any] = {}
    if args.env_config is not None:
        env_kwargs.update(_load_yaml_mapping(args.env_config, "--env-config"))
    env_kwargs.update(_parse_mapping(args.env_kwargs, "--env-kwargs") or {})
    targs = TrainArgs(
        algo=args.algo,
        env_id=args.env_id,
        env_kwargs=env_kwargs,
        hyperparams=args.hyperparams,
        n_timesteps=args.n_timesteps,
        seed=args.seed,
        vectorized=args.vectorized,
        num_envs=args.num_envs,
        run_dir=args.run_dir,
        centering_gain=args.centering_gain,
        device=args.device,
        threads=args.threads,
        checkpoint_freq=args.checkpoint_freq,
        eval_freq=args.eval_freq,
        eval_episodes=args.eval_episodes,
        resume=args.resume,
        progress=not args.no_progress and not args.json,
    )
    run = train(targs)
    final = run / "final_evaluation.json"
    result = {"run_dir": str(run), "final_evaluation": json.loads(final.read_text()) if final.exists() else None}
    if args.json:
        print(dumps(result, indent=2))
    else:
        ev = result["final_evaluation"]
        if ev:
            det = ev["deterministic"]
            m, h = det["reward_rate_per_s"]
            gap = f", {det['gap_percent']:.2f}% above the SMDP optimum" if "gap_percent" in det else ""
            print(f"deterministic evaluation: reward rate {m:.4g} ± {h:.2g} per second{gap}")
        print(f"run saved in {run}/  (model.zip, vecnormalize.pkl, config.yaml, checkpoints/)")
        print(f"watch it: tensorboard --logdir {run / 'tb'}")
    return 0


#: train options that only a sweep uses: (option, dest, default)
_SWEEP_ONLY = (("--backend", "backend", "local"), ("--address", "address", None), ("--num-cpus", "num_cpus", None),
               ("--max-retries", "max_retries", 3), ("--runs-dir", "runs_dir", "runs"))
#: train options that a sweep's YAML sets instead: (option, dest, default, YAML field)
_SET_BY_SWEEP = (
    ("--algo", "algo", "ppo", "algo"), ("--env-id", "env_id", "batch_env/DynamicBatching-v0", "env_id"),
    ("--env-kwargs", "env_kwargs", None, "env"), ("--env-config", "env_config", None, "env"),
    ("--hyperparams", "hyperparams", None, "hyperparams"), ("--n-timesteps", "n_timesteps", None, "n_timesteps"),
    ("--seed", "seed", 0, "seeds"), ("--vectorized", "vectorized", False, "vectorized"),
    ("--num-envs", "num_envs", None, "num_envs"), ("--run-dir", "run_dir", None, "name (with --runs-dir)"),
    ("--centering-gain", "centering_gain", "greedy", "centering_gain"),
    ("--eval-episodes", "eval_episodes", 3, "eval_episodes"), ("--resume", "resume", False, "(a rerun resumes)"),
    ("--device", "device", "auto", "(trials train on the CPU)"), ("--threads", "threads", 1, "(one thread per trial)"),
    ("--checkpoint-freq", "checkpoint_freq", 50_000, "(one checkpoint at the end)"),
    ("--eval-freq", "eval_freq", 50_000, "(one evaluation at the end, eval_episodes)"),
)


def _cmd_sweep(args: argparse.Namespace) -> int:
    """``train --sweep``: run the sweep, print its summary (see cmd_train)."""
    from experiments.sweep import run_sweep

    for opt, dest, default, field in _SET_BY_SWEEP:
        if getattr(args, dest) != default:
            raise ValueError(f"{opt}={getattr(args, dest)!r} cannot be combined with --sweep: the sweep YAML "
                             f"sets it (field {field})")
    with _stdout_to_stderr(args.json):  # Ray Tune prints its tables: keep --json output pure
        summary = run_sweep(args.sweep, runs_dir=args.runs_dir, backend=args.backend, address=args.address,
                            max_retries=args.max_retries, num_cpus=args.num_cpus, progress=not args.json)
    if args.json:
        print(dumps({k: v for k, v in summary.items() if k != "markdown"}, indent=1))
    else:
        print(summary["markdown"])
        print(f"summary.md, summary.csv and summary.json in {summary['dir']}/")
        for f in summary["failed"]:
            print(f"trial {f['trial']} failed: {f['error']}", file=sys.stderr)
    return 1 if summary["failed"] else 0


def _load_yaml_mapping(path: str, field: str) -> dict[str, Any]:
    from pathlib import Path

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{field}={path!r}: file not found")
    value = yaml.safe_load(p.read_text())
    if not isinstance(value, dict):
        raise ValueError(f"{field}={path!r} must hold a mapping of env kwargs")
    return value


def cmd_agents(args: argparse.Namespace) -> int:
    """Train agents per setting and compare them with the SMDP optimum and the baselines."""
    from experiments.agents import run_agents_experiment

    result = run_agents_experiment(args.config, runs_dir=args.runs_dir, results_dir=args.results_dir,
                                   workers=args.workers, settings=args.settings)
    if args.json:
        print(dumps(result["results"], indent=1))
    else:
        print(result["markdown"])
        print(f"tables and plot in {result['dir']}/")
    return 0


def cmd_lazybatching(args: argparse.Namespace) -> int:
    """Node-level batching (LazyBatching) vs graph batching on NodeBatching-v0, with ratios."""
    from experiments.lazybatching import run_lazybatching

    result = run_lazybatching(args.config, results_dir=args.results_dir, progress=not args.json,
                              train=not args.no_train)
    if args.json:
        print(dumps(result["ratios"], indent=1))
    else:
        print(result["markdown"])
        print(f"tables, ratios and plots in {result['dir']}/")
    return 0


def cmd_llm(args: argparse.Namespace) -> int:
    """LLM batching on LLMBatching-v0: capacity and throughput at the SLA of static caps,
    Pang et al.'s memory-aware / SLA-feedback / combined policies and a PPO agent."""
    from experiments.llm import run_llm

    out = f"{args.results_dir}/{args.name}" if args.name else None
    result = run_llm(args.config, out_dir=out, progress=not args.json, train=not args.no_train)
    if args.json:
        print(dumps(result["gains"], indent=1))
    else:
        print(result["markdown"])
        print(f"tables and plots in {result['dir']}/")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """Measure a latency/power profile of a real PyTorch model and write it as JSON."""
    from batch_env.profiling import measure_profile, write_profile

    try:
        sizes = tuple(int(x) for x in args.batch_sizes.split(","))
    except ValueError:
        raise ValueError(f"--batch-sizes={args.batch_sizes!r} is invalid: expected integers separated by commas") from None
    model_kwargs = yaml.safe_load(args.model_kwargs) if args.model_kwargs else None
    if model_kwargs is not None and not isinstance(model_kwargs, dict):
        raise ValueError(f"--model-kwargs={args.model_kwargs!r} must be a mapping, e.g. '{{image_size: 64}}'")
    prof = measure_profile(
        args.model, torch_device=args.device, batch_sizes=sizes, min_time_s=args.min_time_s, nodes=not args.no_nodes,
        width=args.width, depth=args.depth, threads=args.threads, cuda_graphs=args.cuda_graphs,
        model_kwargs=model_kwargs, name=args.name,
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
    """Measure a small model's profile, then compare profile mode with real mode on the same seeds."""
    from experiments.roundtrip import run_roundtrip

    res = run_roundtrip(args.out, load=args.load, horizon_requests=args.horizon_requests, episodes=args.episodes,
                        repeats=args.repeats)
    if args.json:
        print(dumps({k: v for k, v in res.items() if k != "markdown"}, indent=1))
    else:
        print(res["markdown"])
        print(f"wrote {args.out}/roundtrip.json, roundtrip.md, profile.json")
    return 0


def cmd_solve_smdp(args: argparse.Namespace) -> int:
    """Solve the SMDP-optimal batching policy of an env configuration."""
    import gymnasium as gym

    import batch_env  # noqa: F401
    from baselines.smdp import SMDPProblem, solve

    kw = _env_kwargs(args)
    if args.rate_per_s is not None:
        kw["workload"] = {"kind": "poisson", "rate_per_s": args.rate_per_s}
    env = gym.make("batch_env/DynamicBatching-v0", **kw)
    sol = solve(SMDPProblem.from_env(env, max_states=args.max_states), method=args.method)
    out = sol.to_dict()
    out["load"] = env.unwrapped.load
    if args.json:
        print(dumps(out, indent=2))
        return 0
    print(f"gain (cost per second): {sol.gain:.6g}   reward rate: {-sol.gain:.6g}/s")
    print(f"threshold: {sol.threshold}   iterations: {sol.iterations}   solve time: {sol.solve_time_s:.3f} s   "
          f"states: {sol.problem.n_states}{' (truncated)' if sol.problem.truncated else ''}")
    B = sol.problem.max_batch_size
    shown = sol.policy[: 3 * B + 1].tolist()
    print(f"policy (queue length 0..{len(shown) - 1} -> batch size, 0 = wait): {shown}")
    return 0


def _add_backend_args(p: argparse.ArgumentParser, unit: str) -> None:
    """--backend, --address and --num-cpus (shared by compare and train --sweep)."""
    from experiments.backends import BACKENDS

    p.add_argument("--backend", choices=list(BACKENDS), default="local",
                   help=f"where each {unit} runs: local (this process, one after the other; the default and the "
                        f"fast path on one machine) or ray (each {unit} on Ray; pip install 'batch-env[ray]')")
    p.add_argument("--address", default=None,
                   help="ray backend: the Ray cluster to join, e.g. auto (the cluster this node belongs to) or "
                        "ray://<head>:10001 (default: start a local Ray instance)")
    p.add_argument("--num-cpus", type=int, default=None,
                   help="ray backend without --address: CPUs of the local Ray instance (default: all)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``batch-env`` (every subcommand has ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="batch-env",
        description="Dynamic batching for ML inference serving as RL environments.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="compare every baseline on the default env (small) and print the table",
                       description=cmd_demo.__doc__)
    p.add_argument("--config", default="demo", help="comparison config name or YAML path (default: demo)")
    p.add_argument("--results-dir", default="results", help="parent folder of the outputs (default results)")
    p.add_argument("--runs-dir", default="runs", help="parent folder of the training run (default runs)")
    p.add_argument("--train-steps", type=int, default=30_000, help="PPO steps to train first (0: no agent; default 30000)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("compare", help="run (or resume) a comparison experiment from a YAML config",
                       description=cmd_compare.__doc__)
    p.add_argument("--config", default="default", help="config name in experiments/configs or a YAML path (default: default)")
    p.add_argument("--results-dir", default="results", help="parent folder of the outputs (default results)")
    _add_backend_args(p, "cell")
    p.add_argument("--max-retries", type=int, default=3,
                   help="ray backend: retries of a cell whose worker process died (default 3); a cell that "
                        "raises is not retried but recorded as failed")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("solve-smdp", help="solve the SMDP-optimal policy of an env configuration",
                       description=cmd_solve_smdp.__doc__)
    _add_env_args(p)
    p.add_argument("--rate-per-s", type=float, default=None, help="Poisson arrival rate (overrides --load/--workload)")
    p.add_argument("--max-states", type=int, default=None, help="truncation level (default: the queue capacity, exact)")
    p.add_argument("--method", choices=["pi", "rvi"], default="pi", help="policy iteration (default) or relative value iteration")
    p.set_defaults(func=cmd_solve_smdp)

    p = sub.add_parser("evaluate", help="evaluate baselines on one env configuration",
                       description=cmd_evaluate.__doc__)
    _add_env_args(p)
    import batch_env

    p.add_argument("--env-id", default="batch_env/DynamicBatching-v0", choices=list(batch_env.ENV_IDS),
                   help="registered env id (default batch_env/DynamicBatching-v0); for LLMBatching-v0 the "
                        "options above that it lacks are ignored (give its own with --env-kwargs)")
    p.add_argument("--env-kwargs", default=None,
                   help="more env kwargs, a mapping applied last, e.g. '{max_num_seqs: 128, tpot_sla_ms: 40}'")
    from baselines import available

    p.add_argument("--policy", nargs="+", default=["greedy"],
                   help=f"policies to evaluate: baselines ({', '.join(available())}) or trained agents as <algo>:<run_dir>")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("train", help="train an SB3 agent and log it to TensorBoard",
                       description=cmd_train.__doc__)
    p.add_argument("--algo", choices=["ppo", "a2c", "dqn", "ppo_mask"], default="ppo", help="algorithm (default ppo)")
    p.add_argument("--env-id", default="batch_env/DynamicBatching-v0", help="registered env id")
    p.add_argument("--env-kwargs", default=None, help="env kwargs mapping, e.g. '{workload: {kind: poisson, load: 0.6}}'")
    p.add_argument("--env-config", default=None, help="YAML file of env kwargs (--env-kwargs override it)")
    p.add_argument("--hyperparams", default=None, help="rl-zoo3 style YAML (default agents/hyperparams/<algo>.yml)")
    p.add_argument("--n-timesteps", type=int, default=None, help="total env steps (default: the hyperparameter file's)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--vectorized", action="store_true",
                   help="train on one Gymnasium vector env (the env's NumPy vector env when it registers one, "
                        "else SyncVectorEnv) through agents.vec_env.SB3VecEnv instead of SB3's DummyVecEnv; "
                        "same training otherwise")
    p.add_argument("--num-envs", type=int, default=None, metavar="N",
                   help="training envs (lanes of the vector env with --vectorized); default: the "
                        "hyperparameter file's n_envs")
    p.add_argument("--run-dir", default=None, help="output folder (default runs/<algo>-s<seed>-<time>)")
    p.add_argument("--centering-gain", default="greedy", help="g of average-reward centring: greedy, smdp, online or a number")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--checkpoint-freq", type=int, default=50_000, help="checkpoint every N steps")
    p.add_argument("--eval-freq", type=int, default=50_000, help="evaluate every N steps (0: never)")
    p.add_argument("--eval-episodes", type=int, default=3, help="episodes per evaluation")
    p.add_argument("--resume", action="store_true", help="continue --run-dir from its latest checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--sweep", default=None, metavar="YAML",
                   help="run a training sweep from a YAML file or a config name (e.g. sweep-demo): algorithms x "
                        "hyperparameter grid x seeds, one run per trial, best trial by evaluation reward; the "
                        "options above that the YAML sets are not allowed with it")
    _add_backend_args(p, "trial of --sweep")
    p.add_argument("--max-retries", type=int, default=3,
                   help="--sweep on ray: retries of a trial whose worker process died (default 3)")
    p.add_argument("--runs-dir", default="runs", help="--sweep: outputs go to <runs-dir>/sweeps/<name>/ (default runs)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("agents", help="train agents and compare them with the SMDP optimum and baselines",
                       description=cmd_agents.__doc__)
    p.add_argument("--config", default="agents", help="config name in experiments/configs or a YAML path")
    p.add_argument("--settings", nargs="+", default=None, help="only these settings of the config")
    p.add_argument("--runs-dir", default="runs", help="parent folder of the training runs (default runs)")
    p.add_argument("--results-dir", default="results", help="parent folder of the outputs (default results)")
    p.add_argument("--workers", type=int, default=2, help="training processes in parallel (default 2)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=cmd_agents)

    p = sub.add_parser("lazybatching", help="node-level (LazyBatching) vs graph batching: sweep, ratios, plots",
                       description=cmd_lazybatching.__doc__)
    p.add_argument("--config", default="lazybatching", help="config name in experiments/configs or a YAML path")
    p.add_argument("--results-dir", default="results", help="parent folder of the outputs (default results)")
    p.add_argument("--no-train", action="store_true", help="do not train missing agent runs (error instead)")
    p.add_argument("--json", action="store_true", help="print the ratios as JSON")
    p.set_defaults(func=cmd_lazybatching)

    p = sub.add_parser("llm", help="LLM batching: capacity and throughput at the SLA per policy, plots",
                       description=cmd_llm.__doc__)
    p.add_argument("--config", default="llm", help="config name in experiments/configs or a YAML path")
    p.add_argument("--results-dir", default="results", help="parent folder of the outputs (default results)")
    p.add_argument("--name", default=None, help="output folder name (default: the config's name)")
    p.add_argument("--no-train", action="store_true", help="do not train missing agent runs (error instead)")
    p.add_argument("--json", action="store_true", help="print the gains as JSON")
    p.set_defaults(func=cmd_llm)

    p = sub.add_parser("profile", help="measure a real PyTorch model's latency/power profile (JSON)",
                       description=cmd_profile.__doc__)
    p.add_argument("--model", default="resnet50", help="resnet50, googlenet, bert-base or gpt-small (default resnet50)")
    p.add_argument("--device", default="auto", help="torch device: auto, cpu, cuda (default auto)")
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32,64,128", help="comma-separated, increasing")
    p.add_argument("--min-time-s", type=float, default=2.0, help="back-to-back seconds per batch size (default 2)")
    p.add_argument("--width", type=float, default=1.0, help="model width multiplier (default 1 = the real model)")
    p.add_argument("--depth", type=int, default=None, help="model depth (default: the real model's)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (recorded)")
    p.add_argument("--cuda-graphs", action="store_true", help="time whole-model batches with CUDA graphs")
    p.add_argument("--model-kwargs", default=None, help="more model arguments, e.g. '{image_size: 64}'")
    p.add_argument("--no-nodes", action="store_true", help="skip the per-node tables")
    p.add_argument("--name", default=None, help="profile name (default: model and device)")
    p.add_argument("--out", default="profile.json", help="output JSON path (default profile.json)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("roundtrip", help="profile mode vs real mode on a small CPU model (same seeds)",
                       description=cmd_roundtrip.__doc__)
    p.add_argument("--out", default="results/roundtrip", help="output folder (default results/roundtrip)")
    p.add_argument("--load", type=float, default=0.5, help="load of the measured profile (default 0.5)")
    p.add_argument("--horizon-requests", type=int, default=1000, help="requests per episode (default 1000)")
    p.add_argument("--episodes", type=int, default=3, help="seeded episodes per mode (default 3)")
    p.add_argument("--repeats", type=int, default=3, help="measure-and-compare cycles; the median counts (default 3)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_roundtrip)

    p = sub.add_parser("bench", help="env steps/s vs CartPole-v1 in the same process",
                       description=cmd_bench.__doc__)
    p.add_argument("--steps", type=int, default=200_000, help="steps per timed round (default 200000)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds; the best counts (default 3)")
    p.add_argument("--out", default="results/bench", help="output folder (default results/bench)")
    p.add_argument("--skip-smdp", action="store_true", help="skip the SMDP solver vs pymdptoolbox part")
    p.add_argument("--skip-ppo", action="store_true", help="skip the PPO training speed part")
    p.add_argument("--skip-vector", action="store_true", help="skip the vector env vs CartPoleVectorEnv part")
    p.add_argument("--skip-torch", action="store_true", help="skip the real executor's overhead part")
    p.add_argument("--skip-ray", action="store_true",
                   help="skip the comparison's local vs Ray backend part (cells/s; skipped anyway without Ray)")
    p.add_argument("--vector-sizes", default="1,64,1024,4096",
                   help="num_envs values of the vector part, comma-separated (default 1,64,1024,4096)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``batch-env`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        from experiments.backends import RayUnavailableError

        if not isinstance(exc, RayUnavailableError):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
