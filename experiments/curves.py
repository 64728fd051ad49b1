"""``batch-env curves``: the learning curves of training runs, as a PNG (issue 65, item 3).

Each run's ``evaluations.json`` (written by ``batch-env train`` at every periodic
evaluation) holds, per evaluation, the held-out reward rate of the mode the run would act
in and, on the same held-out episodes, its reference lines: the reference baseline
(greedy; vLLM's default cap on an LLM env), and on a benchmark task the best constant
action and the task's best stored reference (``agents.callbacks.PeriodicEvaluation``).
The figure has two panels, the reward rate against env steps and against the CPU
seconds of training, one line per run and a dashed line per reference (its mean over
the runs): the same curves TensorBoard shows as ``curve/`` and ``curve_cpu_s/``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from batch_env.provenance import provenance_line

#: the reference lines' labels in the legend
LABELS = {
    "best_constant": "best constant action",
    "task_reference": "task's best reference",
}


def read_curve(run: Path | str) -> list[dict[str, Any]]:
    """A run's learning-curve points: ``{"steps", "cpu_s", "agent", <reference>: rate}``
    per evaluation that has them.

    :raises ValueError: when the run has no ``evaluations.json`` with learning-curve
        points (a run without periodic evaluations, or from before they were recorded).
    """
    path = Path(run) / "evaluations.json"
    if not path.is_file():
        raise ValueError(
            f"{str(run)!r} has no evaluations.json: give the folder of a `batch-env train` "
            "run with periodic evaluations (--eval-freq > 0)"
        )
    try:
        history = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable evaluation history ({exc})") from None
    points = [
        {"steps": r["timesteps"], "cpu_s": r["cpu_s"], **r["curve"]}
        for r in history
        if isinstance(r, dict) and isinstance(r.get("curve"), dict) and "cpu_s" in r
    ]
    if not points:
        raise ValueError(
            f"{path} has no learning-curve points: they are recorded by batch-env train's "
            "periodic evaluations on an env with a serving summary"
        )
    return points


def plot_curves(runs: list[Path | str], out: Path | str, title: str | None = None) -> Path:
    """The learning curves of ``runs`` (module docstring) as a PNG at ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [(Path(r).name, read_curve(r)) for r in runs]
    refs = sorted({k for _n, pts in curves for p in pts for k in p} - {"steps", "cpu_s", "agent"})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, x, xlabel in (
        (axes[0], "steps", "env steps"),
        (axes[1], "cpu_s", "CPU seconds of training (this process)"),
    ):
        for name, pts in curves:
            ax.plot([p[x] for p in pts], [p["agent"] for p in pts], marker="o", label=name)
        for k, ref in enumerate(refs):
            vals = [p[ref] for _n, pts in curves for p in pts if ref in p]
            ax.axhline(
                sum(vals) / len(vals),
                linestyle="--",
                color=f"C{len(curves) + k}",
                label=LABELS.get(ref, ref),
            )
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out reward rate per second (higher is better)")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(title or "learning curves")
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cmd_curves(args: argparse.Namespace) -> int:
    """Plot the learning curves of training runs (their evaluations.json): the held-out
    reward rate against env steps and against CPU seconds, beside the reference baseline,
    and on a benchmark task the best constant action and the task's best reference."""
    path = plot_curves(args.runs, args.out, args.title)
    print(f"wrote {path}")
    print(provenance_line())
    return 0


def add_parser(sub: Any) -> None:
    """Add ``batch-env curves`` to the subparsers."""
    p = sub.add_parser(
        "curves",
        help="plot training runs' learning curves (held-out rate vs steps and CPU seconds)",
        description=cmd_curves.__doc__,
    )
    p.add_argument("runs", nargs="+", help="folders of batch-env train runs")
    p.add_argument("--out", default="curves.png", help="the PNG to write (default curves.png)")
    p.add_argument("--title", default=None, help="the figure's title")
    p.set_defaults(func=cmd_curves)
