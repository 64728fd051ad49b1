"""The comparison's backends: cells/s of a small comparison on the local backend and on
Ray (a local Ray instance with every CPU) in the same run, their ratio, Ray's start-up
time, and whether both gave the same numbers."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments.harness.backends import INSTALL_HINT

#: the comparison timed by :func:`bench_backends`: 4 loads x 4 policies = 16 cells of 3
#: episodes of 5000 requests (the demo config's episodes)
BACKEND_BENCH_CONFIG: dict[str, Any] = {
    "name": "bench-backends",
    "env": {
        "profile": "resnet50-v100",
        "decision_interval_ms": 0.5,
        "horizon_requests": 5000,
        "reward_weights": {"sla": 0.0},
    },
    "workloads": {"poisson": {"kind": "poisson"}},
    "loads": [0.3, 0.5, 0.7, 0.9],
    "seeds": 3,
    "reference": "smdp",
    "policies": {
        "greedy": {},
        "static-8": {"name": "static", "batch_size": 8, "timeout_ms": 5},
        "tfserving": {"name": "tfserving", "batch_timeout_ms": 2},
        "smdp": {},
    },
}


def _time_compare(
    config: dict[str, Any], results_dir: Path, **kwargs: Any
) -> tuple[float, dict[str, Any]]:
    """Seconds from the start of ``run_compare`` to its last computed cell (tables and plots excluded)."""
    from experiments.compare import run_compare

    last = [0.0]

    def on_cell(cell: Any, computed: bool) -> None:
        if computed:
            last[0] = time.perf_counter()

    t0 = time.perf_counter()
    res = run_compare(config, results_dir=results_dir, progress=False, on_cell=on_cell, **kwargs)
    if res["failed"] or res["computed"] == 0:
        raise RuntimeError(
            f"bench comparison: {res['computed']} cells computed, failures {res['failed']}"
        )
    return last[0] - t0, res


def bench_backends(
    config: dict[str, Any] | None = None, num_cpus: int | None = None, repeats: int = 3
) -> dict[str, Any]:
    """Cells/s of a small comparison on the local backend and on Ray, in the same run.

    The same config runs from scratch (fresh results folders) twice on each backend:
    locally (cells one after the other in this process), then as Ray tasks on a local
    Ray instance started here with ``num_cpus`` CPUs (default: all). Cells/s count the
    time from the start of a run to its last cell (tables and plots excluded). The first
    run of each backend is cold (Ray's workers import everything, in each worker); the
    next ``repeats`` (``*_warm_*``, the best counts) reuse the warm process or workers:
    ``ratio_ray_vs_local`` compares the first runs, ``ratio_ray_warm_vs_local_warm`` the
    best warm ones. Ray's
    start-up (``ray.init``) is reported apart, and ``ray_cells_per_s_with_startup`` (and
    its ratio) includes it: what one sweep on a fresh Ray costs. Ratios are Ray's cells/s
    over the local backend's (above 1: Ray is faster). ``same_results`` checks that every
    run wrote the same records.
    Skipped (with the reason) when Ray is not installed.

    :param config: a comparison config (default :data:`BACKEND_BENCH_CONFIG`, 16 cells).
    :param num_cpus: CPUs of the Ray instance (default: all of this machine's).
    :param repeats: warm runs per backend (the best counts).
    """

    config = dict(config or BACKEND_BENCH_CONFIG)
    try:
        import ray
    except ImportError as exc:
        return {"skipped": f"ray is not installed ({exc}): {INSTALL_HINT}"}
    cpus = num_cpus or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
        local_s, local = _time_compare(config, Path(tmp) / "local")
        local_warm_s, local_warm = min(
            (_time_compare(config, Path(tmp) / f"local-warm-{i}") for i in range(repeats)),
            key=lambda t: t[0],
        )
        started_here = not ray.is_initialized()
        t0 = time.perf_counter()
        if started_here:
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        startup_s = time.perf_counter() - t0
        try:
            ray_s, remote = _time_compare(config, Path(tmp) / "ray", backend="ray")
            warm_s, warm = min(
                (
                    _time_compare(config, Path(tmp) / f"ray-warm-{i}", backend="ray")
                    for i in range(repeats)
                ),
                key=lambda t: t[0],
            )
        finally:
            if started_here:
                ray.shutdown()
    n = local["computed"]
    return {
        "cells": n,
        "config": config,
        "ray_version": ray.__version__,
        "ray_num_cpus": cpus if started_here else None,
        "local_s": local_s,
        "ray_s": ray_s,
        "ray_startup_s": startup_s,
        "local_cells_per_s": n / local_s,
        "local_warm_s": local_warm_s,
        "local_warm_cells_per_s": n / local_warm_s,
        "ray_cells_per_s": n / ray_s,
        "ray_cells_per_s_with_startup": n / (ray_s + startup_s),
        "warm_repeats": repeats,
        "ray_warm_s": warm_s,
        "ray_warm_cells_per_s": n / warm_s,
        "ratio_ray_vs_local": local_s / ray_s,
        "ratio_ray_with_startup_vs_local": local_s / (ray_s + startup_s),
        "ratio_ray_warm_vs_local_warm": local_warm_s / warm_s,
        "same_results": local["records"]
        == local_warm["records"]
        == remote["records"]
        == warm["records"],
    }
