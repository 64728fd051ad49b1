"""Round trip: does profile mode reproduce real mode? (``batch-env roundtrip``)

On this machine, in one run: measure a profile of a small model (ResNet-50 at width
0.25, one bottleneck per stage, 64x64 inputs, one CPU thread) with
:func:`batch_env.real.profiling.measure_profile`, then run the same workload and seeds in real
mode (``executor="torch"``, the model executes and its measured durations advance the
clock) and in profile mode (``ProfileExecutor`` with the profile just measured), for
DynamicBatching-v0 under ``greedy`` and NodeBatching-v0 under ``lazy``, at a moderate
load (0.5 of the measured max throughput). The whole measure-and-compare cycle is
repeated ``repeats`` times (default 3) and the median relative difference is the result:
on a shared 2-core machine the machine's speed drifts between the profiling window and
the episodes (single cycles ranged from -28% to -1% in mean latency here). It writes
``results/roundtrip/roundtrip.json`` (with the last measured profile and its metadata)
and ``roundtrip.md``: the relative difference of mean latency and mean batch size
between the two modes, per cycle and the median. The issue's targets are 15% and 10%
(the tests assert 25% and 15% on the median).
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

SMALL_MODEL = {"model": "resnet50", "width": 0.25, "depth": 1, "model_kwargs": {"image_size": 64}}


def run_roundtrip(
    out: str | Path = "results/roundtrip", load: float = 0.5, horizon_requests: int = 1000,
    episodes: int = 3, batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16), min_time_s: float = 1.0,
    repeats: int = 3,
) -> dict[str, Any]:
    """Measure, then compare profile mode with real mode, ``repeats`` times; see the module docstring."""
    import numpy as np

    cycles = [_cycle(Path(out), load, horizon_requests, episodes, batch_sizes, min_time_s) for _ in range(repeats)]
    result = cycles[-1]
    result["cycles"] = [[{k: r[k] for k in ("env_id", "latency_rel_diff", "batch_rel_diff")} for r in c["rows"]]
                        for c in cycles]
    for i, row in enumerate(result["rows"]):
        row["latency_rel_diff_median"] = float(np.median([c["rows"][i]["latency_rel_diff"] for c in cycles]))
        row["batch_rel_diff_median"] = float(np.median([c["rows"][i]["batch_rel_diff"] for c in cycles]))
    result["repeats"] = repeats
    lines = [
        "# Round trip: profile mode vs real mode (same workload and seeds)",
        "",
        f"Model: ResNet-50 width {SMALL_MODEL['width']}, depth {SMALL_MODEL['depth']}, 64x64, CPU, 1 thread; "
        f"a profile measured in each cycle ({min_time_s:g} s per batch size), then {episodes} episodes x "
        f"{horizon_requests} requests per mode at load {load}; {repeats} cycles. Diff = profile / real - 1.",
        "",
        "| env | policy | mean latency diff, median (per cycle) | mean batch diff, median (per cycle) |",
        "| --- | --- | --- | --- |",
    ]
    for i, r in enumerate(result["rows"]):
        lat = ", ".join(f"{100 * c['rows'][i]['latency_rel_diff']:+.1f}%" for c in cycles)
        bat = ", ".join(f"{100 * c['rows'][i]['batch_rel_diff']:+.1f}%" for c in cycles)
        lines.append(
            f"| {r['env_id']} | {r['policy']} | {100 * r['latency_rel_diff_median']:+.1f}% ({lat}) "
            f"| {100 * r['batch_rel_diff_median']:+.1f}% ({bat}) |"
        )
    lines += ["", "Last cycle:", "", cycles[-1]["markdown"].split("\n", 2)[2]]
    md = "\n".join(lines) + "\n"
    (Path(out) / "roundtrip.md").write_text(md)
    (Path(out) / "roundtrip.json").write_text(json.dumps({k: v for k, v in result.items() if k != "markdown"},
                                                        indent=1, default=str))
    result["markdown"] = md
    return result


def _cycle(
    out: Path, load: float, horizon_requests: int, episodes: int, batch_sizes: tuple[int, ...], min_time_s: float,
) -> dict[str, Any]:
    """One measure-and-compare cycle."""
    import gymnasium as gym

    import baselines
    import batch_env
    from batch_env.real.profiling import measure_profile, write_profile

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "no NVML/RAPL here": reported in the profile
        prof = measure_profile(
            SMALL_MODEL["model"], torch_device="cpu", batch_sizes=batch_sizes, min_time_s=min_time_s,
            nodes=True, width=SMALL_MODEL["width"], depth=SMALL_MODEL["depth"], threads=1,
            model_kwargs=SMALL_MODEL["model_kwargs"],
        )
    measure_s = time.perf_counter() - t0
    write_profile(prof, out / "profile.json")
    B = batch_sizes[-1]
    opts = {"width": SMALL_MODEL["width"], "depth": SMALL_MODEL["depth"], "threads": 1, "warmup": 2,
            "model_kwargs": SMALL_MODEL["model_kwargs"]}
    lat1 = prof["latency_ms"][0]
    rows = []
    for env_id, policy in (("batch_env/DynamicBatching-v0", "greedy"), ("batch_env/NodeBatching-v0", "lazy")):
        row: dict[str, Any] = {"env_id": env_id, "policy": policy}
        for mode in ("torch", "profile"):
            kw = dict(profile=prof, max_batch_size=B, sla_ms=20 * lat1, decision_interval_ms=lat1 / 4,
                      workload={"kind": "poisson", "load": load}, horizon_requests=horizon_requests)
            if mode == "torch":
                kw.update(executor="torch", model=SMALL_MODEL["model"], torch_device="cpu", executor_options=opts)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                env = gym.make(env_id, **kw)
            t = time.perf_counter()
            res = batch_env.evaluate(baselines.make(policy, env), env, n_episodes=episodes)
            row[mode] = {
                "latency_mean_ms": res.mean("latency_mean_ms"), "latency_p99_ms": res.mean("latency_p99_ms"),
                "batch_size_mean": res.mean("batch_size_mean"), "sla_attainment": res.mean("sla_attainment"),
                "wall_s": time.perf_counter() - t, "energy_source": env.unwrapped.executor.energy_source,
            }
            env.close()
        row["latency_rel_diff"] = row["profile"]["latency_mean_ms"] / row["torch"]["latency_mean_ms"] - 1
        row["batch_rel_diff"] = row["profile"]["batch_size_mean"] / row["torch"]["batch_size_mean"] - 1
        rows.append(row)
    result = {
        "model": SMALL_MODEL, "load": load, "horizon_requests": horizon_requests, "episodes": episodes,
        "measure_s": measure_s, "profile_latency_ms": prof["latency_ms"], "metadata": prof.get("_metadata"),
        "rows": rows,
    }
    lines = [
        "# Round trip: profile mode vs real mode (same workload and seeds)",
        "",
        f"Model: ResNet-50 width {SMALL_MODEL['width']}, depth {SMALL_MODEL['depth']}, 64x64, CPU, 1 thread; "
        f"profile measured in the same run (latency ms per batch {[round(x, 3) for x in prof['latency_ms']]}); "
        f"load {load}, {episodes} episodes x {horizon_requests} requests.",
        "",
        "| env | policy | mean latency real / profile (ms) | diff | mean batch real / profile | diff |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['env_id']} | {r['policy']} | {r['torch']['latency_mean_ms']:.3f} / {r['profile']['latency_mean_ms']:.3f} "
            f"| {100 * r['latency_rel_diff']:+.1f}% | {r['torch']['batch_size_mean']:.2f} / {r['profile']['batch_size_mean']:.2f} "
            f"| {100 * r['batch_rel_diff']:+.1f}% |"
        )
    result["markdown"] = "\n".join(lines) + "\n"
    return result
