"""``batch-env bench``: every benchmark of this package, one after the other in one process
(:func:`run_bench`), each as the best of ``repeats`` timed rounds (the least disturbed
by other load) and the median of its rounds' ratios; the results go to
``results/bench/bench.json`` with a description of the machine (:func:`write_results`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from batch_env.tasks import TASKS
from experiments.harness.options import add_json, check_folder, count
from experiments.harness.strict_json import dumps

from .backends import bench_backends
from .cluster import bench_cluster, print_cluster
from .common import machine_description, median_ratio, rounds, time_batching, time_cartpole
from .executor import bench_executor_overhead
from .llm import bench_llm_steps, bench_llm_v2, print_llm_v2
from .orders import bench_llm_orders
from .ppo import bench_ppo, bench_ppo_vector
from .prefix import bench_prefix_caching, print_prefix_caching
from .render import bench_render
from .smdp import bench_smdp
from .vector import bench_vector
from .wallclock import WALLCLOCK_TASK, bench_wallclock, format_wallclock


def run_bench(
    n_steps: int = 200_000,
    repeats: int = 3,
    seed: int = 0,
    smdp: bool = True,
    ppo: bool = True,
    vector: bool = True,
    vector_sizes: tuple[int, ...] = (1, 64, 1024, 4096),
    vector_env_steps: int = 2_000_000,
    torch_overhead: bool = True,
    backends: bool = True,
    render: bool = True,
    render_steps: int | None = None,
    cluster: bool = True,
    wallclock: bool = False,
    wallclock_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the benchmark and return its figures.

    :param n_steps: env steps per timed round.
    :param repeats: timed rounds; each runs the env and its reference back to back, the
        rates reported are the best round's and each ratio the median of the rounds'.
    :param seed: seed for envs and actions.
    :param smdp: also time the SMDP solver against pymdptoolbox (about 20 s).
    :param ppo: also time PPO training against CartPole (needs the train extra; about 40 s).
    :param vector: also time the NumPy vector env against CartPoleVectorEnv.
    :param vector_sizes: the ``num_envs`` of the vector part.
    :param vector_env_steps: env-steps per timed round of the vector part.
    :param torch_overhead: also time the real executor's overhead (needs the real extra).
    :param backends: also time the comparison's local and Ray backends (skipped, with the
        reason, when Ray is not installed).
    :param render: also time an ``rgb_array`` frame against a step, for each env.
    :param render_steps: steps (and frames) per timed round of the render part (default
        ``n_steps // 40``, at least 50: 5000 at the default ``n_steps``).
    :param cluster: also time an LLM cluster of 2, 8 and 32 replicas against one
        (``n_steps // 100`` requests, at least 200: 2,000 at the default ``n_steps``).
    :param wallclock: also measure the wall-clock to a good agent (:func:`bench_wallclock`;
        about half an hour on one core, so off by default).
    :param wallclock_kwargs: keyword arguments of :func:`bench_wallclock`.
    """
    env_kwargs = {
        "profile": "resnet50-v100",
        "workload": {"kind": "poisson", "load": 0.6},
    }
    r = rounds(
        {
            "ours": lambda: time_batching(n_steps, seed, env_kwargs),
            "cart": lambda: time_cartpole(n_steps, seed),
        },
        repeats,
    )
    result = {
        "dynamic_batching_steps_per_s": max(r["ours"]),
        "cartpole_steps_per_s": max(r["cart"]),
        "step_cost_ratio_vs_cartpole": median_ratio(r["cart"], r["ours"]),
        "round_ratios": [a / b for a, b in zip(r["cart"], r["ours"], strict=True)],
        "floor_step_cost_ratio": 1.5,
        "n_steps": n_steps,
        "repeats": repeats,
        "env_kwargs": env_kwargs,
        "machine": machine_description(),
    }
    result["llm"] = bench_llm_steps(max(n_steps // 4, 1000), repeats, seed)
    result["llm_v2"] = bench_llm_v2(max(n_steps // 100, 100), repeats, seed)
    result["llm_orders"] = bench_llm_orders(n_steps=max(n_steps // 100, 200), repeats=repeats)
    result["prefix_caching"] = bench_prefix_caching(max(n_steps // 100, 100), repeats, seed)
    if cluster:
        result["cluster"] = bench_cluster(requests=max(n_steps // 100, 200), repeats=repeats)
    if render:
        result["render"] = bench_render(render_steps or max(n_steps // 40, 50), repeats, seed)
    if vector:
        result["vector"] = bench_vector(vector_sizes, vector_env_steps, repeats, seed)
    if torch_overhead:
        result["torch_executor_overhead"] = bench_executor_overhead()
    if smdp:
        result["smdp"] = bench_smdp()
    if ppo:
        result["ppo"] = bench_ppo(seed=seed, repeats=min(repeats, 3))
        result["ppo_vector"] = bench_ppo_vector(seed=seed)
    if backends:
        result["compare_backends"] = bench_backends()
    if wallclock:
        result["wallclock"] = bench_wallclock(**(wallclock_kwargs or {}))
    return result


def write_results(
    result: dict[str, Any], out_dir: str | Path = "results/bench", name: str = "bench.json"
) -> Path:
    """Write ``result`` as ``name`` (``bench.json``; ``wallclock.json`` for the wall-clock
    item alone) under ``out_dir`` and return its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


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
    --wallclock-only runs that item alone and writes wallclock.json only.

    --wallclock-task picks another task: one with an exact SMDP bound (target: within 1%
    of it), or one without, such as the LLM tasks, whose target is the normalized score
    --wallclock-score (default 0.5) paired on the evaluation episodes (greedy and the
    task's best realizable reference play the same episodes first; the runs' episodes
    are the shipped training episodes, e.g. 2,000 requests on the LLM tasks). Its figures
    go to wallclock-<task name>.json (e.g. wallclock-LLMBurstyLongPrompts-v0.json)."""

    check_folder("--out", args.out)
    if args.wallclock_task not in TASKS:
        raise ValueError(
            f"--wallclock-task={args.wallclock_task!r} is not a benchmark task: allowed are "
            + ", ".join(TASKS)
        )
    if not 0.0 < args.wallclock_score <= 1.0:
        raise ValueError(
            f"--wallclock-score={args.wallclock_score!r} is invalid: expected a number in (0, 1]"
        )
    wallclock_kwargs = {
        "seeds": tuple(range(args.wallclock_seeds)),
        "budget_steps": args.wallclock_budget,
        "eval_freq": args.wallclock_eval_freq,
        "eval_episodes": args.wallclock_eval_episodes,
        "task": args.wallclock_task,
        "score_target": args.wallclock_score,
    }
    wc_name = (
        "wallclock.json"
        if args.wallclock_task == WALLCLOCK_TASK
        else f"wallclock-{args.wallclock_task.split('/')[-1]}.json"
    )
    if args.wallclock_only:
        wc = {**bench_wallclock(**wallclock_kwargs), "machine": machine_description()}
        path = write_results(wc, args.out, wc_name)
        if args.json:
            print(dumps(wc, indent=2))
            return 0
        print(format_wallclock(wc))
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
        cluster=not args.skip_cluster,
        wallclock=args.wallclock,
        wallclock_kwargs=wallclock_kwargs,
    )
    path = write_results(result, args.out)
    if "wallclock" in result:
        write_results({**result["wallclock"], "machine": result["machine"]}, args.out, wc_name)
    if args.json:
        print(dumps(result, indent=2))
        return 0
    _print_bench(result)
    print(f"written to {path}")
    return 0


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
    print_llm_v2(result.get("llm_v2"))
    print_prefix_caching(result.get("prefix_caching"))
    print_cluster(result.get("cluster"))
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
        print(format_wallclock(result["wallclock"]))


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "bench",
        help="env steps/s vs CartPole-v1 in the same process",
        description=cmd_bench.__doc__,
    )
    p.add_argument(
        "--steps", type=count(1), default=200_000, help="steps per timed round (default 200000)"
    )
    p.add_argument(
        "--repeats",
        type=count(1),
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
        "--skip-cluster",
        action="store_true",
        help="skip the LLM cluster part (2, 8 and 32 replicas against one)",
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
        type=count(1),
        default=3,
        help="training seeds of the wall-clock item, 0..N-1 (default 3)",
    )
    p.add_argument(
        "--wallclock-budget",
        type=count(1),
        default=None,
        help="step budget of each wall-clock run (default: the hyperparameter file's n_timesteps, 300000)",
    )
    p.add_argument(
        "--wallclock-eval-freq",
        type=count(1),
        default=10_000,
        help="steps between the wall-clock runs' evaluations (default 10000)",
    )
    p.add_argument(
        "--wallclock-task",
        default=WALLCLOCK_TASK,
        help=f"task of the wall-clock item (default {WALLCLOCK_TASK}); one without an exact "
        "SMDP bound (e.g. batch_env/LLMBurstyLongPrompts-v0) is timed to --wallclock-score",
    )
    p.add_argument(
        "--wallclock-score",
        type=float,
        default=0.5,
        help="normalized score the wall-clock runs must reach on a task without an exact "
        "bound, paired with greedy and the best realizable reference on the evaluation "
        "episodes (default 0.5)",
    )
    p.add_argument(
        "--wallclock-eval-episodes",
        type=count(1),
        default=3,
        help="episodes per evaluation of the wall-clock runs (default 3)",
    )
    p.add_argument(
        "--vector-sizes",
        default="1,64,1024,4096",
        help="num_envs values of the vector part, comma-separated (default 1,64,1024,4096)",
    )
    add_json(p)
    p.set_defaults(func=cmd_bench)
