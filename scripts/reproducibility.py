"""What changes a trained model, and by how much its figure moves: the same seed of the
same command trained in fresh processes under settings that differ as machines do.

Issue 52 saw one seed of one command score 0.591 in one session and 0.434 in another.
PyTorch and MKL choose their CPU kernels by the instruction sets the CPU has (AVX-512,
AVX2 or neither), and kernels that add in a different order round differently; a
different CPU kind is therefore a different sequence of floating-point roundings, which
RL training amplifies. One machine can run the kernels of another kind:
``ATEN_CPU_CAPABILITY`` caps PyTorch's own kernels (``avx2``, ``default``) and
``MKL_CBWR`` pins MKL's code path (``AVX2``, ``COMPATIBLE``). This script trains one
seed under each variant (fresh processes), measures how far each model's weights are
from the native run's, and evaluates each on the task's held-out protocol
(``batch-env benchmark``), paired per seed with the native model:

    python scripts/reproducibility.py [--task batch_env/LowLoadEnergy-v0]
        [--n-timesteps 100000] [--seed 0] [--out docs/results/reproducibility.md]

It writes a Markdown page with the table and the machine it ran on. What it measures is
an emulation: the kernels of another CPU kind run on this one (the same code paths,
not the same chip). The page says so.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: (label, extra environment, torch threads, training seed offset)
VARIANTS: list[tuple[str, dict[str, str], int, int]] = [
    ("native", {}, 1, 0),
    ("native, again", {}, 1, 0),
    ("native, 2 threads", {}, 2, 0),
    (
        "AVX2 kernels (ATEN_CPU_CAPABILITY=avx2, MKL_CBWR=AVX2)",
        {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
        1,
        0,
    ),
    (
        "baseline x86 kernels (ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE)",
        {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
        1,
        0,
    ),
    # the yardstick: other training seeds, native
    ("native, the next training seed", {}, 1, 1),
    ("native, the seed after", {}, 1, 2),
]


def train(
    run: Path, task: str, steps: int, seed: int, threads: int, extra: dict[str, str]
) -> float:
    """``batch-env train`` in a fresh process with ``extra`` in its environment; seconds."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    env.update(extra)
    cmd = [
        sys.executable, "-c", "import sys; from experiments.cli import main; sys.exit(main())",
        "train", "--env-id", task, "--n-timesteps", str(steps), "--seed", str(seed),
        "--threads", str(threads), "--run-dir", str(run), "--eval-freq", "0", "--no-progress",
        "--overwrite",
    ]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=3600)
    return time.perf_counter() - t0


def weights(run: Path) -> dict[str, np.ndarray]:
    """The saved policy's tensors by name."""
    import torch

    with zipfile.ZipFile(run / "model.zip") as z:
        state = torch.load(io.BytesIO(z.read("policy.pth")), map_location="cpu")
    return {k: v.numpy() for k, v in state.items()}


def protocol(run: Path, task: str, horizon: int | None) -> dict:
    """The run's deterministic policy on the task's held-out protocol
    (``batch-env benchmark --policy ppo:<run> --json``, a fresh process with native
    kernels): its reward rate, CI and per-seed figures."""
    cmd = [
        sys.executable, "-c", "import sys; from experiments.cli import main; sys.exit(main())",
        "benchmark", "--policy", f"ppo:{run}", "--tasks", task, "--json",
        *(["--horizon-requests", str(horizon)] if horizon else []),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    out = subprocess.run(
        cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=7200
    )
    return json.loads(out.stdout)[0]


def main(argv: list[str] | None = None) -> int:
    """Train, compare, evaluate, write the page."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--task", default="batch_env/LowLoadEnergy-v0", help="task id [LowLoadEnergy-v0]"
    )
    ap.add_argument("--n-timesteps", type=int, default=100_000, help="training steps [100000]")
    ap.add_argument("--seed", type=int, default=0, help="training seed [0]")
    ap.add_argument(
        "--horizon-requests",
        type=int,
        default=None,
        help="requests per protocol episode (default: the task's)",
    )
    ap.add_argument("--out", default="docs/results/reproducibility.md", help="the page to write")
    args = ap.parse_args(argv)
    from batch_env.provenance import provenance, provenance_line

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for i, (label, extra, threads, offset) in enumerate(VARIANTS):
            run = Path(tmp) / f"v{i}"
            secs = train(run, args.task, args.n_timesteps, args.seed + offset, threads, extra)
            runs.append(run)
            print(f"trained {label} in {secs:.0f} s", flush=True)
        base_w = weights(runs[0])
        figs = [protocol(r, args.task, args.horizon_requests) for r in runs]
        base = np.asarray(figs[0]["per_seed"], dtype=float)
        for (label, _, threads, _), run, fig in zip(VARIANTS, runs, figs, strict=True):
            w = weights(run)
            diff = max(float(np.abs(w[k] - base_w[k]).max()) for k in w)
            per = np.asarray(fig["per_seed"], dtype=float)
            d = per - base
            from scipy import stats

            half = (
                float(stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d)))
                if d.any()
                else 0.0
            )
            rows.append(
                {
                    "variant": label,
                    "threads": threads,
                    "normalized_score": fig.get("normalized_score"),
                    "max_weight_diff": diff,
                    "reward_rate_per_s": fig["reward_rate_per_s"],
                    "ci95": fig["ci95"],
                    "paired_diff": float(d.mean()),
                    "paired_ci95": half,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    where = provenance()
    lines = [
        "# Reproducibility: one seed under the kernels of other CPU kinds",
        "",
        f"Written by `python scripts/reproducibility.py --task {args.task} --n-timesteps "
        f"{args.n_timesteps} --seed {args.seed}"
        + (f" --horizon-requests {args.horizon_requests}" if args.horizon_requests else "")
        + "` (docs/reproducibility.md explains it). Each row "
        "is one fresh `batch-env train` process with the shipped PPO settings; the figure is "
        "its deterministic policy on the task's held-out protocol (reward rate per second, "
        "higher is better), the difference paired per seed with the native run (95% CI).",
        "",
        "| variant | threads | largest weight difference from native | reward rate (/s) | normalized score | paired difference (/s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['threads']} | {r['max_weight_diff']:.3g} | "
            f"{r['reward_rate_per_s']:.4g} ± {r['ci95']:.2g} | "
            f"{r['normalized_score']:.3f} | "
            f"{r['paired_diff']:+.3g} ± {r['paired_ci95']:.2g} |"
        )
    lines += ["", provenance_line(where), ""]
    out = ROOT / args.out
    out.write_text("\n".join(lines))
    (out.with_suffix(".json")).write_text(
        json.dumps({"rows": rows, "provenance": where, "args": vars(args)}, indent=1) + "\n"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
