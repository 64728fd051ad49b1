"""The GPU check: measured profiles and real-mode episodes on a CUDA machine.

Run from the repository root on a machine with a CUDA GPU::

    python experiments/gpu_check.py --out results/gpu_check

It (1) profiles ResNet-50 and BERT-base (real architectures, random weights, FP32) for
batch sizes 1, 2, 4, ..., 128 with NVML energy (each batch size repeated back-to-back for
``--min-time-s`` seconds, energy from the counter delta, idle power measured separately),
writing profiles that ``ProfileExecutor`` reads; (2) runs ``DynamicBatching-v0`` and
``NodeBatching-v0`` in real mode (``executor="torch"``, the model on the GPU, measured
durations advancing the clock) for a short episode each, at a moderate load of the
measured profile, next to the same episode in profile mode with the measured profile;
(3) writes everything with its metadata to ``<out>/gpu_check.json``. It needs only
PyTorch (CUDA), numpy, scipy, pyyaml, gymnasium and nvidia-ml-py (no SB3), and is sized to
finish in under 5 minutes on one GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import baselines
import batch_env
from batch_env.provenance import provenance

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _episode(
    env_id: str,
    env_kwargs: dict[str, Any],
    policy_name: str,
    policy_kwargs: dict[str, Any],
    seed: int,
) -> dict[str, Any]:

    t0 = time.perf_counter()
    env = gym.make(env_id, **env_kwargs)
    built = time.perf_counter() - t0
    policy = baselines.make(policy_name, env, **policy_kwargs)
    res = batch_env.evaluate(policy, env, n_episodes=1, seed=seed)
    ep = res.episodes[0]
    out = {
        "env_id": env_id,
        "env_kwargs": {k: v for k, v in env_kwargs.items() if k != "profile"},
        "policy": policy_name,
        "policy_kwargs": policy_kwargs,
        "seed": seed,
        "build_s": built,
        "wall_s": time.perf_counter() - t0 - built,
        "summary": ep,
    }
    unwrapped: Any = env.unwrapped  # a batch-env env: it has an executor
    out["energy_source"] = unwrapped.executor.energy_source
    if hasattr(unwrapped.executor, "metadata"):
        out["executor_metadata"] = unwrapped.executor.metadata()
    env.close()
    return out


def main(argv: list[str] | None = None) -> int:
    """Profile ResNet-50 and BERT-base on CUDA and run both envs in real mode."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--out", default="results/gpu_check", help="output folder")
    p.add_argument(
        "--min-time-s", type=float, default=2.0, help="seconds per batch size (default 2)"
    )
    p.add_argument("--max-batch", type=int, default=128, help="largest batch size (power of two)")
    p.add_argument(
        "--horizon-requests", type=int, default=400, help="summary requests per real-mode episode"
    )
    p.add_argument(
        "--models", nargs="+", default=["resnet50", "bert-base"], help="models to profile"
    )
    args = p.parse_args(argv)

    import torch

    from batch_env.real.profiling import measure_profile, write_profile

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("error: no CUDA device: this check needs a GPU", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    sizes = []
    b = 1
    while b <= args.max_batch:
        sizes.append(b)
        b *= 2
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "batch_sizes": sizes,
        "min_time_s": args.min_time_s,
        "profiles": {},
        "episodes": [],
    }
    profiles = {}
    for model in args.models:
        t0 = time.perf_counter()
        prof = measure_profile(
            model,
            torch_device="cuda",
            batch_sizes=tuple(sizes),
            min_time_s=args.min_time_s,
            nodes=True,
        )
        name = f"{model}-{result['device'].split()[-1].lower()}-measured"
        prof["name"] = name
        path = out / f"{name}.json"
        write_profile(prof, path)
        profiles[model] = path
        result["profiles"][model] = {
            "file": path.name,
            "seconds": time.perf_counter() - t0,
            "latency_ms": prof["latency_ms"],
            "power_w": prof.get("power_w"),
            "idle_power_w": prof.get("idle_power_w"),
            "idle_power_source": prof.get("idle_power_source"),
        }
        print(f"{model}: latency_ms {[round(x, 3) for x in prof['latency_ms']]}", flush=True)
        print(f"{model}: power_w {prof.get('power_w')} idle {prof.get('idle_power_w')}", flush=True)

    # real mode vs profile mode with the profile just measured, moderate load, one seed
    pkw: dict[str, Any]
    for model, env_id, policy, pkw in (
        ("resnet50", "batch_env/DynamicBatching-v0", "greedy", {}),
        ("resnet50", "batch_env/NodeBatching-v0", "lazy", {}),
        ("bert-base", "batch_env/DynamicBatching-v0", "greedy", {}),
    ):
        if model not in profiles:
            continue
        base = {
            "profile": str(profiles[model]),
            "max_batch_size": 32,
            "sla_ms": 15.0 if model == "resnet50" else 78.0,
            "workload": {"kind": "poisson", "load": 0.5},
            "horizon_requests": args.horizon_requests,
        }
        for mode in ("torch", "profile"):
            kw = dict(base, executor=mode)
            if mode == "torch":
                kw.update(model=model, torch_device="cuda")
            try:
                ep = _episode(env_id, kw, policy, pkw, seed=0)
            except Exception as exc:  # record and go on: one failure must not lose the rest
                ep = {"env_id": env_id, "mode": mode, "model": model, "error": repr(exc)}
            ep.update(mode=mode, model=model)
            result["episodes"].append(ep)
            s = ep.get("summary", {})
            print(
                f"{env_id} {model} {mode}: latency {s.get('latency_mean_ms')} ms, batch {s.get('batch_size_mean')}, "
                f"power {s.get('power_mean_w')} W, energy source {ep.get('energy_source')}, wall {ep.get('wall_s')} s"
                + (f" ERROR {ep['error']}" if "error" in ep else ""),
                flush=True,
            )
        (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    result["total_s"] = time.perf_counter() - t_start
    result["provenance"] = provenance()
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {out}/gpu_check.json in {result['total_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
