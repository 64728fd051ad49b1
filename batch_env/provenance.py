"""Where a result came from: the machine, the library versions and the source commit.

Every training run (its ``config.yaml``) and every stored result of the experiments
(their JSON files, and a line of their Markdown pages) records :func:`provenance`, so that
a figure names the machine it was measured on. What that buys, measured
(``docs/reproducibility.md``): on one machine kind, training is bit-identical across fresh
processes and thread counts; on another CPU kind it is not, since PyTorch and MKL pick
their CPU kernels by the instruction sets the CPU has (``cpu_capability``), and kernels
that add in another order round differently. There two runs of one seed agree only
within the protocol's CI, and the record says which kind each figure came from.

``batch_env`` itself depends on none of the libraries it names: a package that is not
installed is recorded as ``None``, and torch's kernel level only where the process
imported torch (training, real execution).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "PACKAGES",
    "cpu_model",
    "machine",
    "provenance",
    "provenance_line",
    "source",
    "versions",
]

#: the libraries whose versions a result records
PACKAGES = ("batch-env", "numpy", "gymnasium", "torch", "stable-baselines3", "sb3-contrib", "scipy")
#: seconds a git query may take before the commit is recorded as unknown
GIT_TIMEOUT_S = 5.0


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``; else
    ``platform.processor()``; ``"unknown"`` where neither says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_capability() -> str | None:
    """The instruction-set level PyTorch's CPU kernels dispatch to (``AVX512``,
    ``AVX2``, ``DEFAULT``; ``ATEN_CPU_CAPABILITY`` can lower it), ``None`` where this
    process has not imported torch (a result that used no torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except AttributeError:  # pragma: no cover - an old torch
        return None


def machine() -> dict[str, Any]:
    """The CPU model and count, torch's kernel level, the OS and Python."""
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_capability": _cpu_capability(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """The installed version of each of ``packages`` (``None`` where not installed)."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


@functools.lru_cache(maxsize=1)
def source() -> dict[str, Any]:
    """The git commit of the source tree this package runs from and whether it has
    uncommitted changes to tracked files (``commit`` ``None`` for an installed wheel, or
    where git is missing or does not answer within :data:`GIT_TIMEOUT_S`). Computed once
    per process."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return {"commit": None, "dirty": None}
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": head or None, "dirty": bool(status.strip())}


def provenance() -> dict[str, Any]:
    """``{"machine": ..., "versions": ..., "source": ...}``: what a stored result
    records of where it came from."""
    return {"machine": machine(), "versions": versions(), "source": dict(source())}


def provenance_line(record: dict[str, Any] | None = None) -> str:
    """One line for a results page: the CPU, its count and torch's kernel level, the
    commit (``+`` where the tree had uncommitted changes) and batch-env's version, of
    ``record`` (a :func:`provenance`) or of this process."""
    p = record if record is not None else provenance()
    m, s = p.get("machine", {}), p.get("source", {})
    commit = s.get("commit")
    # an installed wheel has no git checkout: its version says what ran
    sha = (
        f"commit {commit[:10]}{'+' if s.get('dirty') else ''}, "
        if commit
        else "not from a git checkout, "
    )
    cap = f", {m['cpu_capability']} kernels" if m.get("cpu_capability") else ""
    return (
        f"Measured on {m.get('cpu', 'an unknown CPU')} ({m.get('cpu_count')} CPUs{cap}), "
        f"{sha}batch-env {p.get('versions', {}).get('batch-env')}."
    )
