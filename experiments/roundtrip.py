"""Round trip: does profile mode reproduce real mode? (``batch-env roundtrip``)

On this machine, in one run: measure a profile of a small model (ResNet-50 at width
0.25, one bottleneck per stage, 64x64 inputs, one CPU thread) with
:func:`batch_env.real.profiling.measure_profile`, then run the same workload and seeds in real
mode (``executor="torch"``, the model executes and its measured durations advance the
clock) and in profile mode (``ProfileExecutor`` with the profile just measured), for
DynamicBatching-v0 under ``greedy`` and NodeBatching-v0 under ``lazy``, at a moderate
load (0.5 of the measured max throughput).

The clock (:data:`CLOCK`)
    Both the profile and the real-mode calls are timed with ``clock="thread_cpu"``: the
    CPU time of the calling thread (``time.thread_time_ns``; the model runs on that one
    thread), so other processes on the machine do not inflate a measurement by taking the
    core away (a contended CPU does not slow every cycle alike, so one speed-matching
    scalar cannot absorb it: with the wall clock and two other busy processes, one run's
    cycles had speed ratios from 0.78 to 1.34). They still slow the thread's own work
    somewhat, through shared caches, memory and cores (in one measurement about +30% at
    batch 1 and 16 alike with two ``yes`` processes on this 2-core VM): what is uniform,
    the speed-matching absorbs; what varies while other jobs come and go, the median of
    the cycles is for. In real mode the env's clock then advances by the CPU time of each
    model call; arrivals still come from the workload. ``clock="wall"`` measures elapsed
    time instead, as serving would see it on that machine at that moment.

Two sources of disagreement, reported apart
    1. *The profile against the serving run* (``speed_ratio``). Every model call of the
       real-mode episodes is recorded with what the profile predicts for that call (its
       mean at that batch size, and node); ``speed_ratio`` = sum of measured durations /
       sum of predicted ones. Back-to-back profiling (warm caches, one shape at a time)
       and serving (shapes change every batch, the env's own code runs in between) are
       not the same conditions, and a shared machine's speed drifts between the
       profiling window and the episodes: on the thread-CPU clock, single cycles ranged
       from 1.02 to 1.17 here on a quiet machine, and from 0.7 to 1.5 with two ``yes``
       processes running while other jobs came and went (on the wall clock a CI machine
       once ran its episodes 1.3x slower than it had profiled).
    2. *The simulator given the right speed* (``*_matched``). Profile mode is run a
       second time with every latency of the profile multiplied by that one scalar, so
       the shape across batch sizes and nodes, the variability, the queueing and the
       batching are still the simulator's own; only the machine's mean speed during the
       episodes is taken from the real run. This is the figure that tests the simulator.

The whole measure-and-compare cycle is repeated ``repeats`` times (default 3) and the
median of each relative difference is the result. It writes
``results/roundtrip/roundtrip.json`` (with the last measured profile and its metadata)
and ``roundtrip.md``. The issue's targets are 15% (mean latency) and 10% (mean batch
size); the test asserts them on the speed-matched medians, and only a gross bound (50%)
on the as-measured ones, which depend on the machine's weather.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
import warnings
from pathlib import Path
from typing import Any

from batch_env.real.spec import ModelSpec

#: The model of the round trip, written once: the profiler measures it (with its own
#: default warm-up) and the real-mode envs run it (as ``model=``, ``torch_device=`` and
#: ``executor_options``).
SMALL_MODEL = ModelSpec(
    "resnet50",
    width=0.25,
    depth=1,
    model_kwargs={"image_size": 64},
    threads=1,
    warmup=2,
    torch_device="cpu",
)
#: ``measure_profile``'s warm-up runs per batch size before its window (its default)
PROFILE_WARMUP = 3
#: profile measurements per cycle at most: one whose node-by-node windows disagree with
#: the end-to-end ones by 100% or more (a window disturbed by another process; the profile
#: then keeps them in _nodes_rejected) is measured again
PROFILE_ATTEMPTS = 3
#: What times the model calls, in the profile and in real mode (module docstring: The clock)
CLOCK = "thread_cpu"
ENV_POLICIES = (("batch_env/DynamicBatching-v0", "greedy"), ("batch_env/NodeBatching-v0", "lazy"))
DIFFS = (
    "latency_rel_diff",
    "batch_rel_diff",
    "latency_rel_diff_matched",
    "batch_rel_diff_matched",
    "speed_ratio",
)


def _model_text(clock: str) -> str:
    """:data:`SMALL_MODEL` and the clock in words, for the markdown."""
    m, size = SMALL_MODEL, SMALL_MODEL.model_kwargs["image_size"]
    timer = "thread CPU time" if clock == "thread_cpu" else "wall time"
    return (
        f"ResNet-50 width {m.width}, depth {m.depth}, {size}x{size}, {m.torch_device.upper()}, "
        f"{m.threads} thread{'s' if m.threads != 1 else ''}, timed by {timer} (clock={clock!r})"
    )


def run_roundtrip(
    out: str | Path = "results/roundtrip",
    load: float = 0.5,
    horizon_requests: int = 1000,
    episodes: int = 3,
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16),
    min_time_s: float = 1.0,
    repeats: int = 3,
    clock: str = CLOCK,
) -> dict[str, Any]:
    """Measure, then compare profile mode with real mode, ``repeats`` times; see the module docstring.

    :param clock: what times the model calls, in the profile and in real mode: ``"thread_cpu"``
        (the default, :data:`CLOCK`) or ``"wall"``.
    :returns: the last cycle's result, with ``cycles`` (each cycle's figures per env) and,
        in each row, the ``*_median`` of every figure in :data:`DIFFS` over the cycles.
    """
    import numpy as np

    cycles = [
        _cycle(Path(out), load, horizon_requests, episodes, batch_sizes, min_time_s, clock)
        for _ in range(repeats)
    ]
    result = cycles[-1]
    result["cycles"] = [[{k: r[k] for k in ("env_id", *DIFFS)} for r in c["rows"]] for c in cycles]
    for i, row in enumerate(result["rows"]):
        for k in DIFFS:
            row[f"{k}_median"] = float(np.median([c["rows"][i][k] for c in cycles]))
    result["repeats"] = repeats
    md = _summary_markdown(result, cycles, load, horizon_requests, episodes, min_time_s, repeats)
    (Path(out) / "roundtrip.md").write_text(md)
    (Path(out) / "roundtrip.json").write_text(
        json.dumps({k: v for k, v in result.items() if k != "markdown"}, indent=1, default=str)
    )
    result["markdown"] = md
    return result


def _summary_markdown(
    result: dict[str, Any],
    cycles: list[dict[str, Any]],
    load: float,
    horizon_requests: int,
    episodes: int,
    min_time_s: float,
    repeats: int,
) -> str:
    """The ``roundtrip.md`` text: medians with each cycle's figure, then the last cycle's table."""

    def cell(i: int, key: str, pct: bool = True) -> str:
        fmt = (lambda x: f"{100 * x:+.1f}%") if pct else (lambda x: f"{x:.3f}")
        per = ", ".join(fmt(c["rows"][i][key]) for c in cycles)
        return f"{fmt(result['rows'][i][key + '_median'])} ({per})"

    lines = [
        "# Round trip: profile mode vs real mode (same workload and seeds)",
        "",
        f"Model: {_model_text(result['clock'])}; "
        f"a profile measured in each cycle ({min_time_s:g} s per batch size), then {episodes} episodes x "
        f"{horizon_requests} requests per mode at load {load}; {repeats} cycles. Diff = profile / real - 1; "
        "median (per cycle).",
        "",
        "Speed ratio = measured model time in the real-mode episodes / what the profile predicts for "
        "the same calls. *Matched* = profile mode with the profile's latencies times that one ratio "
        "(the simulator given the machine's mean speed during the episodes).",
        "",
        "| env | policy | speed ratio | mean latency diff | mean batch diff | mean latency diff, matched "
        "| mean batch diff, matched |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(result["rows"]):
        lines.append(
            f"| {r['env_id']} | {r['policy']} | {cell(i, 'speed_ratio', pct=False)} | {cell(i, 'latency_rel_diff')} "
            f"| {cell(i, 'batch_rel_diff')} | {cell(i, 'latency_rel_diff_matched')} "
            f"| {cell(i, 'batch_rel_diff_matched')} |"
        )
    lines += ["", "Last cycle:", "", cycles[-1]["markdown"].split("\n", 2)[2]]
    return "\n".join(lines) + "\n"


class _CallTally:
    """Records every model call of an executor next to the profile's prediction for it.

    Wraps the executor's ``run`` and ``run_node`` on the instance (the env calls them
    through ``self.executor``), so the timed path is the executor's own.
    """

    def __init__(self, executor: Any, profile: Any, max_batch_size: int) -> None:
        self.measured_s = 0.0
        self.predicted_s = 0.0
        self.calls = 0
        lat, _ = profile.tables(max_batch_size)
        node_lat, _ = profile.node_tables(max_batch_size)
        run, run_node = executor.run, executor.run_node

        def timed_run(b: int) -> tuple[float, float]:
            d, e = run(b)
            self._add(d, lat[b])
            return d, e

        def timed_run_node(node: int, b: int, group: Any = None) -> tuple[float, float]:
            d, e = run_node(node, b, group)
            self._add(d, node_lat[node, b])
            return d, e

        executor.run, executor.run_node = timed_run, timed_run_node

    def _add(self, measured: float, predicted: float) -> None:
        self.measured_s += float(measured)
        self.predicted_s += float(predicted)
        self.calls += 1

    @property
    def ratio(self) -> float:
        """Measured / predicted model time over the recorded calls (NaN before any call)."""
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else float("nan")


def scaled_profile(prof: dict[str, Any], factor: float) -> dict[str, Any]:
    """A copy of a measured profile dict with every latency (end to end, per node, percentiles) times ``factor``.

    Power is unchanged (so energy scales with time); the name says it was rescaled.
    """
    out = copy.deepcopy(prof)
    out["name"] = f"{prof.get('name', 'profile')} x{factor:.3f}"
    out["latency_ms"] = [x * factor for x in prof["latency_ms"]]
    if isinstance(out.get("nodes"), dict):
        out["nodes"]["latency_ms"] = [
            [x * factor for x in row] for row in prof["nodes"]["latency_ms"]
        ]
    stats = out.get("_latency_stats")
    if isinstance(stats, dict):
        for k, v in stats.items():
            if k.endswith("_ms") and isinstance(v, list):
                stats[k] = [x * factor for x in v]
    return out


def _episodes(
    env_id: str, policy: str, kw: dict[str, Any], episodes: int, tally_profile: Any = None
) -> dict[str, Any]:
    """Evaluate ``policy`` on ``gym.make(env_id, **kw)``; with ``tally_profile``, record the model calls."""
    import gymnasium as gym

    import baselines
    import batch_env

    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", RuntimeWarning
        )  # "no NVML/RAPL here": reported in energy_source
        env = gym.make(env_id, **kw)
    tally = (
        None
        if tally_profile is None
        else _CallTally(env.unwrapped.executor, tally_profile, kw["max_batch_size"])
    )
    t = time.perf_counter()
    try:
        res = batch_env.evaluate(baselines.make(policy, env), env, n_episodes=episodes)
        stats = {
            "latency_mean_ms": res.mean("latency_mean_ms"),
            "latency_p99_ms": res.mean("latency_p99_ms"),
            "batch_size_mean": res.mean("batch_size_mean"),
            "sla_attainment": res.mean("sla_attainment"),
            "wall_s": time.perf_counter() - t,
            "energy_source": env.unwrapped.executor.energy_source,
        }
    finally:
        env.close()
    if tally is not None:
        stats.update(speed_ratio=tally.ratio, model_calls=tally.calls)
    return stats


def _cycle(
    out: Path,
    load: float,
    horizon_requests: int,
    episodes: int,
    batch_sizes: tuple[int, ...],
    min_time_s: float,
    clock: str,
) -> dict[str, Any]:
    """One measure-and-compare cycle."""
    from batch_env.profiles.batch_profile import Profile
    from batch_env.real.profiling import measure_profile, write_profile

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", RuntimeWarning
        )  # "no NVML/RAPL here": reported in the profile
        measured = dataclasses.replace(SMALL_MODEL, warmup=PROFILE_WARMUP)
        for _ in range(PROFILE_ATTEMPTS):
            prof = measure_profile(
                measured.model,
                batch_sizes=batch_sizes,
                min_time_s=min_time_s,
                nodes=True,
                clock=clock,
                **measured.keywords(),
            )
            if "nodes" in prof:  # else a disturbed window: node sums off by 100% or more
                break
    if "nodes" not in prof:
        raise RuntimeError(
            f"roundtrip: {PROFILE_ATTEMPTS} profile measurements in a row had their node "
            f"tables rejected ({prof['notes'].get('nodes', '')}); the machine is too busy to "
            "measure NodeBatching-v0's profile"
        )
    measure_s = time.perf_counter() - t0
    write_profile(prof, out / "profile.json")
    B = batch_sizes[-1]
    opts = {**SMALL_MODEL.executor_options(), "clock": clock}
    lat1 = prof["latency_ms"][0]
    # absolute rate, SLA and tick, so the speed-matched profile sees the same arrivals in seconds
    rate = load * Profile(prof).max_throughput_rps(B)
    base = dict(
        max_batch_size=B,
        sla_ms=20 * lat1,
        decision_interval_ms=lat1 / 4,
        workload={"kind": "poisson", "rate_per_s": rate},
        horizon_requests=horizon_requests,
    )
    rows = []
    for env_id, policy in ENV_POLICIES:
        real = _episodes(
            env_id,
            policy,
            dict(
                base,
                profile=prof,
                executor="torch",
                model=SMALL_MODEL.model,
                torch_device=SMALL_MODEL.torch_device,
                executor_options=opts,
            ),
            episodes,
            tally_profile=Profile(prof),
        )
        sim = _episodes(env_id, policy, dict(base, profile=prof), episodes)
        matched = _episodes(
            env_id, policy, dict(base, profile=scaled_profile(prof, real["speed_ratio"])), episodes
        )
        rows.append(
            {
                "env_id": env_id,
                "policy": policy,
                "torch": real,
                "profile": sim,
                "profile_matched": matched,
                "speed_ratio": real["speed_ratio"],
                "latency_rel_diff": sim["latency_mean_ms"] / real["latency_mean_ms"] - 1,
                "batch_rel_diff": sim["batch_size_mean"] / real["batch_size_mean"] - 1,
                "latency_rel_diff_matched": matched["latency_mean_ms"] / real["latency_mean_ms"]
                - 1,
                "batch_rel_diff_matched": matched["batch_size_mean"] / real["batch_size_mean"] - 1,
            }
        )
    result = {
        "model": SMALL_MODEL.to_dict(),
        "clock": clock,
        "load": load,
        "horizon_requests": horizon_requests,
        "episodes": episodes,
        "measure_s": measure_s,
        "profile_latency_ms": prof["latency_ms"],
        "metadata": prof.get("_metadata"),
        "rows": rows,
    }
    lines = [
        "# Round trip: profile mode vs real mode (same workload and seeds)",
        "",
        f"Model: {_model_text(clock)}; "
        f"profile measured in the same run (latency ms per batch {[round(x, 3) for x in prof['latency_ms']]}); "
        f"load {load}, {episodes} episodes x {horizon_requests} requests.",
        "",
        "| env | policy | speed ratio | mean latency real / profile / matched (ms) | mean batch real / profile / matched |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        t, p, m = r["torch"], r["profile"], r["profile_matched"]
        lines.append(
            f"| {r['env_id']} | {r['policy']} | {r['speed_ratio']:.3f} "
            f"| {t['latency_mean_ms']:.3f} / {p['latency_mean_ms']:.3f} / {m['latency_mean_ms']:.3f} "
            f"| {t['batch_size_mean']:.2f} / {p['batch_size_mean']:.2f} / {m['batch_size_mean']:.2f} |"
        )
    result["markdown"] = "\n".join(lines) + "\n"
    return result
