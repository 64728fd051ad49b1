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
    2. *The simulator given the right speed.* Profile mode is run again with the real
       run's speed, in two ways; the shape across batch sizes and nodes, the queueing and
       the batching stay the simulator's own.

       * ``*_matched``: every latency of the profile multiplied by that one scalar, the
         machine's mean speed during the episodes.
       * ``*_tracked``: every call's duration (and energy) multiplied by the real run's
         speed at that moment of that episode (:class:`SpeedTrack`: the speed ratio in
         each of :data:`SPEED_BINS` equal spans of env time). This machine's speed is not
         steady: even with nothing else running, the speed ratio over a sixteenth of an
         episode ranged from 0.64 to 1.40 within single cycles here, and with two ``yes``
         processes and two memory-copying processes switching on and off, from 0.63 to
         1.73. One scalar cannot absorb that (a slow spell queues requests that the mean
         speed would have served), and single cycles' matched latency then ranged from
         -11% to 0% (-78% in one cycle seen on a busy host), while the tracked latency
         stayed within -4.4% to +3.0% over six such cycles. Tracking is the figure that
         tests the simulator; it is still the simulator's, since the profile run makes
         its own batching decisions, at its own times, with the profile's shape.

The whole measure-and-compare cycle is repeated ``repeats`` times (default 3) and the
median of each relative difference is the result. It writes
``results/roundtrip/roundtrip.json`` (with the last measured profile and its metadata)
and ``roundtrip.md``. The issue's targets are 15% (mean latency) and 10% (mean batch
size); the test asserts them on the speed-tracked medians, and only a gross bound (50%)
on the as-measured and speed-matched ones, which depend on the machine's weather.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np

import baselines
import batch_env
from agents.common import check_device
from batch_env.profiles.batch_profile import Profile
from batch_env.provenance import provenance, provenance_line
from batch_env.real.spec import ModelSpec
from experiments.harness.config import parse_mapping
from experiments.harness.options import add_json, check_folder, count, positive
from experiments.harness.report import md_table
from experiments.harness.strict_json import dumps

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
#: What times the model calls, in the profile and in real mode (module docstring: The clock)
CLOCK = "thread_cpu"
ENV_POLICIES = (("batch_env/DynamicBatching-v0", "greedy"), ("batch_env/NodeBatching-v0", "lazy"))
DIFFS = (
    "latency_rel_diff",
    "batch_rel_diff",
    "latency_rel_diff_matched",
    "batch_rel_diff_matched",
    "latency_rel_diff_tracked",
    "batch_rel_diff_tracked",
    "speed_ratio",
)
#: Bins of env time per episode in which the real run's speed is tracked (:class:`SpeedTrack`)
SPEED_BINS = 16


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
    result["provenance"] = provenance()
    md += "\n" + provenance_line(result["provenance"]) + "\n"
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
        "(the simulator given the machine's mean speed during the episodes). *Tracked* = profile mode "
        f"with each call's duration times the real run's speed at that time ({SPEED_BINS} bins of env "
        "time per episode: the simulator given the machine's speed over time).",
        "",
        *md_table(
            (
                "env",
                "policy",
                "speed ratio",
                "mean latency diff",
                "mean batch diff",
                "mean latency diff, matched",
                "mean batch diff, matched",
                "mean latency diff, tracked",
                "mean batch diff, tracked",
            ),
            (
                (
                    r["env_id"],
                    r["policy"],
                    cell(i, "speed_ratio", pct=False),
                    cell(i, "latency_rel_diff"),
                    cell(i, "batch_rel_diff"),
                    cell(i, "latency_rel_diff_matched"),
                    cell(i, "batch_rel_diff_matched"),
                    cell(i, "latency_rel_diff_tracked"),
                    cell(i, "batch_rel_diff_tracked"),
                )
                for i, r in enumerate(result["rows"])
            ),
        ),
    ]
    lines += ["", "Last cycle:", "", cycles[-1]["markdown"].split("\n", 2)[2]]
    return "\n".join(lines) + "\n"


class _CallTally:
    """Records every model call of an executor next to the profile's prediction for it.

    Wraps the executor's ``reset``, ``run`` and ``run_node`` on the instance (the env calls
    them through ``self.executor``), so the timed path is the executor's own. Each call is
    logged with its episode (counted by ``reset``) and the env's clock at the step that
    made it (``clock.now_s``). With ``speed``, every call's duration and energy are
    multiplied by the speed of that episode at that time (profile mode given the real
    run's speed over time, :class:`SpeedTrack`).
    """

    def __init__(
        self,
        executor: Any,
        profile: Any,
        max_batch_size: int,
        clock: Any,
        speed: SpeedTrack | None = None,
    ) -> None:
        self.measured_s = 0.0
        self.predicted_s = 0.0
        self.calls = 0
        #: (episode, env time of the step, measured s, predicted s) per call
        self.log: list[tuple[int, float, float, float]] = []
        self.episode = -1
        lat, _ = profile.tables(max_batch_size)
        node_lat, _ = profile.node_tables(max_batch_size)
        reset, run, run_node = executor.reset, executor.run, executor.run_node

        def counted_reset(rng: Any) -> None:
            self.episode += 1
            reset(rng)

        def timed_run(b: int) -> tuple[float, float]:
            d, e = run(b)
            return self._add(d, e, lat[b], clock.now_s, speed)

        def timed_run_node(node: int, b: int, group: Any = None) -> tuple[float, float]:
            d, e = run_node(node, b, group)
            return self._add(d, e, node_lat[node, b], clock.now_s, speed)

        executor.reset, executor.run, executor.run_node = counted_reset, timed_run, timed_run_node

    def _add(
        self, d: float, e: float, predicted: float, t: float, speed: SpeedTrack | None
    ) -> tuple[float, float]:
        if speed is not None:
            f = speed.at(self.episode, t)
            d, e = d * f, e * f
        self.measured_s += float(d)
        self.predicted_s += float(predicted)
        self.calls += 1
        self.log.append((self.episode, float(t), float(d), float(predicted)))
        return d, e

    @property
    def ratio(self) -> float:
        """Measured / predicted model time over the recorded calls (NaN before any call)."""
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else float("nan")


@dataclasses.dataclass
class SpeedTrack:
    """The machine's speed over each episode of a real-mode run, in :data:`SPEED_BINS` bins.

    In bin ``k`` of episode ``e`` (equal spans of env time from 0 to the episode's last
    model call), the speed is the sum of the measured durations of the calls made in it
    over the sum of the profile's predictions for them (an empty bin takes the nearest
    earlier one's, else the episode's). ``at(e, t)`` is that speed at env time ``t``
    (past the end: the last bin's).
    """

    ends: list[float]
    ratios: list[list[float]]

    @classmethod
    def of(cls, log: list[tuple[int, float, float, float]], bins: int) -> SpeedTrack:
        """The track of a :class:`_CallTally`'s log."""

        arr = np.asarray(log, dtype=float).reshape(-1, 4)
        ends: list[float] = []
        ratios: list[list[float]] = []
        for e in range(int(arr[:, 0].max()) + 1 if len(arr) else 0):
            ep = arr[arr[:, 0] == e]
            end = float(ep[:, 1].max()) if len(ep) else 0.0
            whole = float(ep[:, 2].sum() / ep[:, 3].sum()) if len(ep) else 1.0
            k = np.minimum((ep[:, 1] / end * bins).astype(int), bins - 1) if end > 0 else 0
            meas = np.bincount(np.atleast_1d(k), ep[:, 2], minlength=bins)
            pred = np.bincount(np.atleast_1d(k), ep[:, 3], minlength=bins)
            row: list[float] = []
            for m, p in zip(meas, pred, strict=True):
                row.append(float(m / p) if p > 0 else (row[-1] if row else whole))
            ends.append(end)
            ratios.append(row)
        return cls(ends, ratios)

    def at(self, episode: int, t: float) -> float:
        """The speed of ``episode`` at env time ``t``."""
        row, end = self.ratios[episode], self.ends[episode]
        k = int(t / end * len(row)) if end > 0 else 0
        return row[min(max(k, 0), len(row) - 1)]


class _Clock:
    """The env's clock as of its last reset or step (``info["now_s"]``), for :class:`_CallTally`."""

    def __init__(self) -> None:
        self.now_s = 0.0


def _clocked(env: Any, clock: _Clock) -> Any:
    """``env`` with a wrapper that keeps ``clock.now_s`` at the env's ``info["now_s"]``."""

    class ClockWrapper(gym.Wrapper):
        def reset(self, **kw: Any) -> Any:
            obs, info = self.env.reset(**kw)
            clock.now_s = float(info["now_s"])
            return obs, info

        def step(self, action: Any) -> Any:
            out = self.env.step(action)
            clock.now_s = float(out[4]["now_s"])
            return out

    return ClockWrapper(env)


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
    env_id: str,
    policy: str,
    kw: dict[str, Any],
    episodes: int,
    tally_profile: Any = None,
    speed: SpeedTrack | None = None,
) -> dict[str, Any]:
    """Evaluate ``policy`` on ``gym.make(env_id, **kw)``; with ``tally_profile``, record the
    model calls (``speed_ratio``, ``model_calls`` and the run's ``speed_track``), and with
    ``speed`` also run them at that speed over time."""

    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", RuntimeWarning
        )  # "no NVML/RAPL here": reported in energy_source
        env = gym.make(env_id, **kw)
    clock = _Clock()
    tally = (
        None
        if tally_profile is None
        else _CallTally(
            cast(Any, env.unwrapped).executor,  # a batch-env env: it has one
            tally_profile,
            kw["max_batch_size"],
            clock,
            speed=speed,
        )
    )
    env = _clocked(env, clock)
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
        if speed is None:
            stats["speed_track"] = SpeedTrack.of(tally.log, SPEED_BINS)
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
    from batch_env.real.profiling import measure_profile, write_profile

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", RuntimeWarning
        )  # "no NVML/RAPL here": reported in the profile
        measured = dataclasses.replace(SMALL_MODEL, warmup=PROFILE_WARMUP)
        # a batch size whose node windows were disturbed is measured again (NODE_ATTEMPTS)
        prof = measure_profile(
            measured.model,
            batch_sizes=batch_sizes,
            min_time_s=min_time_s,
            nodes=True,
            clock=clock,
            **measured.keywords(),
        )
    if "nodes" not in prof:
        raise RuntimeError(
            f"roundtrip: the profile's node tables were rejected ({prof['notes'].get('nodes', '')}); "
            "the machine is too busy to measure NodeBatching-v0's profile"
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
        track = real.pop("speed_track")
        tracked = _episodes(
            env_id,
            policy,
            dict(base, profile=prof),
            episodes,
            tally_profile=Profile(prof),
            speed=track,
        )
        rows.append(
            {
                "env_id": env_id,
                "policy": policy,
                "torch": real,
                "profile": sim,
                "profile_matched": matched,
                "profile_tracked": tracked,
                "speed_track": dataclasses.asdict(track),
                "speed_ratio": real["speed_ratio"],
                "latency_rel_diff": sim["latency_mean_ms"] / real["latency_mean_ms"] - 1,
                "batch_rel_diff": sim["batch_size_mean"] / real["batch_size_mean"] - 1,
                "latency_rel_diff_matched": matched["latency_mean_ms"] / real["latency_mean_ms"]
                - 1,
                "batch_rel_diff_matched": matched["batch_size_mean"] / real["batch_size_mean"] - 1,
                "latency_rel_diff_tracked": tracked["latency_mean_ms"] / real["latency_mean_ms"]
                - 1,
                "batch_rel_diff_tracked": tracked["batch_size_mean"] / real["batch_size_mean"] - 1,
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
    ]
    table = []
    for r in rows:
        t, p, m, k = r["torch"], r["profile"], r["profile_matched"], r["profile_tracked"]
        bins = [x for row in r["speed_track"]["ratios"] for x in row]
        table.append(
            (
                r["env_id"],
                r["policy"],
                f"{r['speed_ratio']:.3f} ({min(bins):.2f}-{max(bins):.2f})",
                f"{t['latency_mean_ms']:.3f} / {p['latency_mean_ms']:.3f} / {m['latency_mean_ms']:.3f} "
                f"/ {k['latency_mean_ms']:.3f}",
                f"{t['batch_size_mean']:.2f} / {p['batch_size_mean']:.2f} / {m['batch_size_mean']:.2f} "
                f"/ {k['batch_size_mean']:.2f}",
            )
        )
    lines += md_table(
        (
            "env",
            "policy",
            "speed ratio (bins: min-max)",
            "mean latency real / profile / matched / tracked (ms)",
            "mean batch real / profile / matched / tracked",
        ),
        table,
    )
    result["markdown"] = "\n".join(lines) + "\n"
    return result


def cmd_profile(args: argparse.Namespace) -> int:
    """Measure a latency/power profile of a real PyTorch model and write it as JSON."""

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
    model_kwargs = parse_mapping(args.model_kwargs, "--model-kwargs")
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

    check_folder("--out", args.out)
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


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "profile",
        help="measure a real PyTorch model's latency/power profile (JSON); "
        "`profile llm`: an LLM profile from a config.json and a GPU spec",
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
        type=positive,
        default=2.0,
        help="back-to-back seconds per batch size (default 2)",
    )
    p.add_argument(
        "--width",
        type=positive,
        default=1.0,
        help="model width multiplier (default 1 = the real model)",
    )
    p.add_argument(
        "--depth", type=count(1), default=None, help="model depth (default: the real model's)"
    )
    p.add_argument(
        "--threads", type=count(1), default=None, help="torch.set_num_threads (recorded)"
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
    add_json(p, "the profile")
    p.set_defaults(func=cmd_profile)
    # batch-env profile llm: an LLM profile from a config.json and a GPU spec
    from experiments.profile_llm import add_llm_subparser

    add_llm_subparser(p)

    p = sub.add_parser(
        "roundtrip",
        help="profile mode vs real mode on a small CPU model (same seeds)",
        description=cmd_roundtrip.__doc__,
    )
    p.add_argument(
        "--out", default="results/roundtrip", help="output folder (default results/roundtrip)"
    )
    p.add_argument(
        "--load", type=positive, default=0.5, help="load of the measured profile (default 0.5)"
    )
    p.add_argument(
        "--horizon-requests",
        type=count(1),
        default=1000,
        help="requests per episode (default 1000)",
    )
    p.add_argument(
        "--episodes", type=count(1), default=3, help="seeded episodes per mode (default 3)"
    )
    p.add_argument(
        "--repeats",
        type=count(1),
        default=3,
        help="measure-and-compare cycles; the median counts (default 3)",
    )
    add_json(p)
    p.set_defaults(func=cmd_roundtrip)
