"""Measure a latency / power profile of a real model on this machine.

:func:`measure_profile` runs a model from :mod:`batch_env.real.models` and returns a profile
dict that :func:`batch_env.profile.load` accepts (``kind: "table"``), with node tables for
NodeBatching; :func:`write_profile` validates and saves it as JSON.

What is measured, and how
    * Latency: for each listed batch size, after ``warmup`` runs, the batch is run back to
      back (each call timed alone by the executors' clock,
      :class:`~batch_env.real.torch_executor.DeviceClock`: CUDA events on a GPU; on a CPU
      ``perf_counter_ns`` with ``clock="wall"``, the calling thread's CPU time,
      ``thread_time_ns``, with ``clock="thread_cpu"``) until at least ``min_time_s`` of
      wall time have passed and at least ``min_repeats`` runs were made. ``latency_ms``
      is the mean; p50 / p95 / p99, the per-size coefficient of variation, the number of
      runs and the window go to ``_latency_stats``.
      ``latency_cv`` (one number, as the profile format has it) is the mean of the
      per-size CVs.
    * Power: the energy meter's counter delta over each repetition window divided by the
      window's wall time (NVML board energy on a GPU, RAPL package energy on a CPU; see
      :mod:`batch_env.real.energy`). Idle power: the same over ``idle_time_s`` with nothing
      running. Where no meter measures (``"model"``), power comes from
      ``fallback_profile`` (its ``power_w(b)``, clamped to its largest listed size, and its
      ``idle_power_w``) or else from the documented constants below, and ``citations`` /
      ``notes`` / ``idle_power_source`` say so.
    * Nodes: the model is run node by node (each node timed: events between nodes on a
      GPU with one synchronisation per pass) back to back for at least ``min_time_s`` per
      batch size; ``nodes.latency_ms`` holds each node's mean. A counter that updates every
      20-100 ms cannot separate nodes, so every node's ``power_w`` at a batch size is the
      average power of that node-by-node window (or the fallback). ``nodes.tolerance`` is
      the largest relative disagreement, over the listed sizes, between the sum of the
      node means and the end-to-end mean, rounded up to 2 decimals, at least 0.01. Tables
      off by 100% or more (possible with ``cuda_graphs=True``, whose whole-batch replays
      skip the launch overhead node runs pay) are not valid profile node tables. A batch
      size whose two windows disagree that much is first measured again, both windows,
      at most :data:`NODE_ATTEMPTS` times in all: on a shared machine another process can
      disturb one window alone (seen on a 2-core VM with two CPU hogs, and while the host
      was busy), and the second measurement usually agrees. ``_latency_stats["attempts"]``
      records the measurements per size. Tables still that far off after the last attempt
      go to ``_nodes_rejected`` with a warning and a note.

The profile records the device, driver, library versions, thread count and date in
``source`` and ``_metadata``, and the clock in ``_metadata["clock"]`` / ``["clock_source"]``
and ``notes["method"]`` (a profile without them was timed by the wall clock).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_number
from ..profiles import batch_profile as profile_mod
from .spec import ModelSpec

__all__ = [
    "ASSUMED_CPU_IDLE_POWER_W",
    "ASSUMED_CPU_POWER_W_PER_THREAD",
    "ASSUMED_GPU_IDLE_POWER_W",
    "ASSUMED_GPU_POWER_W",
    "NODE_ATTEMPTS",
    "measure_profile",
    "write_profile",
]

#: Busy power assumed per torch thread on a CPU nothing measures (W): roughly one server
#: core's share of a CPU's rated power (e.g. a 64-core 280 W EPYC is ~4.4 W a core, an
#: 8-core 65 W desktop part ~8 W). A placeholder: measure with RAPL, or pass a profile.
ASSUMED_CPU_POWER_W_PER_THREAD = 10.0
#: Idle power assumed for a CPU nothing measures (W), a placeholder like the above.
ASSUMED_CPU_IDLE_POWER_W = 5.0
#: Busy power assumed for a GPU nothing measures (W): a V100 PCIe board's 250 W TDP.
ASSUMED_GPU_POWER_W = 250.0
#: Idle power assumed for a GPU nothing measures (W): about a datacenter board at rest.
ASSUMED_GPU_IDLE_POWER_W = 50.0

_DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32)
#: Node tables whose sum disagrees with the end-to-end latency by this much (relative) or
#: more are not valid profile node tables (batch_env.profile requires tolerance < 1).
_MAX_NODE_TOLERANCE = 1.0
#: Measurements of one batch size (its end-to-end and node-by-node windows) at most, when
#: the node sums disagree with the end-to-end mean by :data:`_MAX_NODE_TOLERANCE` or more
#: (module docstring: Nodes).
NODE_ATTEMPTS = 3


def _check_batch_sizes(batch_sizes: Sequence[int]) -> list[int]:
    bs = list(batch_sizes)
    ok = (
        len(bs) >= 2
        and all(isinstance(b, numbers.Integral) and not isinstance(b, bool) and b >= 1 for b in bs)
        and all(b2 > b1 for b1, b2 in zip(bs, bs[1:], strict=False))
    )
    if not ok:
        raise ValueError(
            f"batch_sizes={list(batch_sizes)!r} is invalid: expected at least two strictly "
            "increasing integers >= 1 (a table profile needs two points)"
        )
    return [int(b) for b in bs]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def _ceil2(x: float) -> float:
    return max(0.01, math.ceil(x * 100.0 - 1e-9) / 100.0)


@dataclass
class _Bench:
    """What a timed window needs: the device, its clock, the energy meter and the window size."""

    torch: Any
    device: Any
    meter: Any
    measures: bool
    clock: Any
    min_repeats: int
    min_time_s: float

    def sync(self) -> None:
        """Wait for the device (CUDA only; a CPU call has finished when it returns)."""
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def window(self, call: Callable[[], Any]) -> tuple[float, float | None]:
        """Repeat ``call`` until the window is long enough: (wall seconds, energy J)."""
        self.sync()
        e0 = self.meter.read_j() if self.measures else None
        t0 = time.perf_counter()
        n = 0
        while n < self.min_repeats or time.perf_counter() - t0 < self.min_time_s:
            call()
            n += 1
        wall = time.perf_counter() - t0
        e1 = self.meter.read_j() if self.measures else None
        return wall, (None if e0 is None or e1 is None else e1 - e0)

    def idle_power(self, idle_s: float) -> float | None:
        """Average power over ``idle_s`` seconds with nothing running (``None``: not measured)."""
        if not self.measures:
            return None
        self.sync()
        e0, t0 = self.meter.read_j(), time.perf_counter()
        time.sleep(idle_s)
        e1, t1 = self.meter.read_j(), time.perf_counter()
        if e0 is not None and e1 is not None and t1 > t0 and e1 - e0 >= 0:
            return (e1 - e0) / (t1 - t0)
        return None


@dataclass
class _Runs:
    """The per-batch-size results of the timed windows, in batch-size order."""

    lat_mean: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p95: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    cvs: list[float] = field(default_factory=list)
    reps: list[int] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    wins: list[float] = field(default_factory=list)
    power: list[float | None] = field(default_factory=list)
    node_lat: list[list[float]] = field(default_factory=list)
    node_pw: list[float | None] = field(default_factory=list)

    def add_batch(self, lats_s: Sequence[float], wall: float, de: float | None) -> None:
        """Record one batch size's end-to-end window (per-call seconds, wall s, energy J)."""
        arr = np.asarray(lats_s) * 1e3
        self.lat_mean.append(float(arr.mean()))
        q = np.percentile(arr, [50, 95, 99])
        self.p50.append(float(q[0]))
        self.p95.append(float(q[1]))
        self.p99.append(float(q[2]))
        self.cvs.append(float(arr.std(ddof=1) / arr.mean()) if len(arr) > 1 else 0.0)
        self.reps.append(len(arr))
        self.wins.append(wall)
        self.power.append(_window_power(de, wall))

    def add_nodes(self, per: Sequence[Sequence[float]], wall: float, de: float | None) -> None:
        """Record one batch size's node-by-node window (per-node seconds, wall s, energy J)."""
        for i, lst in enumerate(per):
            self.node_lat[i].append(float(np.mean(lst)) * 1e3)
        self.node_pw.append(_window_power(de, wall))


@dataclass
class _Fallback:
    """Power figures for where no meter measures, and the text that cites them."""

    power: Callable[[int], float]
    text: str
    idle_w: float
    idle_text: str


def _window_power(de: float | None, wall: float) -> float | None:
    """Average power of a window, or ``None`` where the counter did not move."""
    return de / wall if de is not None and de > 0 and wall > 0 else None


def _check_run_args(
    min_time_s: float, idle_time_s: float | None, min_repeats: int
) -> tuple[float, float]:
    """Check the window arguments; returns ``(min_time_s, idle window seconds)``.

    (``warmup`` is a :class:`~batch_env.real.spec.ModelSpec` field, checked there.)
    """
    min_time_s = check_number("min_time_s", min_time_s, low=0.0)
    idle_s = (
        min_time_s if idle_time_s is None else check_number("idle_time_s", idle_time_s, low=0.0)
    )
    if (
        not isinstance(min_repeats, numbers.Integral)
        or isinstance(min_repeats, bool)
        or min_repeats < 1
    ):
        raise ValueError(f"min_repeats={min_repeats!r} is invalid: expected an integer >= 1")
    return min_time_s, idle_s


def _measure_runs(
    bench: _Bench,
    net: Any,
    node_fns: list[Any],
    inputs: Mapping[int, Any],
    bs: list[int],
    *,
    warmup: int,
    cuda_graphs: bool,
    nodes: bool,
    say: Callable[[str], None],
    model: str,
) -> _Runs:
    """Warm up, then time every batch size end to end (and node by node if ``nodes``)."""
    from .torch_executor import capture_cuda_graphs

    runs = _Runs(node_lat=[[] for _ in node_fns])
    e2e_calls: dict[int, Callable[[Any], Any]] = {b: net for b in bs}
    with bench.torch.inference_mode():
        for b in bs:
            for _ in range(warmup):
                net(inputs[b])
        bench.sync()
        if cuda_graphs:
            # the graph outputs must stay alive while the graphs replay
            e2e_calls, _graph_outputs = capture_cuda_graphs(net, inputs, warmup)
        for b in bs:
            x = inputs[b]
            attempt = 0
            while True:  # at most NODE_ATTEMPTS measurements
                attempt += 1
                e2e = _time_batch(bench, e2e_calls[b], x)
                per = _measure_nodes(bench, node_fns, x) if nodes else None
                if (
                    per is None
                    or attempt >= NODE_ATTEMPTS
                    or _node_disagreement(per[0], e2e[0]) < _MAX_NODE_TOLERANCE
                ):
                    break
            runs.add_batch(*e2e)
            runs.attempts.append(attempt)
            if per is not None:
                runs.add_nodes(*per)
            say(
                f"{model} b={b}: {runs.lat_mean[-1]:.3f} ms mean over {runs.reps[-1]} runs"
                + (f", {runs.power[-1]:.1f} W" if runs.power[-1] is not None else "")
                + (f" ({attempt} measurements: node sums disagreed)" if attempt > 1 else "")
            )
    return runs


def _time_batch(
    bench: _Bench, call: Callable[[Any], Any], x: Any
) -> tuple[list[float], float, float | None]:
    """Time ``call(x)`` over a window: (per-call seconds, wall seconds, energy J)."""
    lats: list[float] = []

    def timed() -> None:
        lats.append(bench.clock.time(call, x)[0])

    wall, de = bench.window(timed)
    return lats, wall, de


def _measure_nodes(
    bench: _Bench, node_fns: list[Any], x: Any
) -> tuple[list[list[float]], float, float | None]:
    """Time one batch node by node over a window: (per-node seconds, wall seconds, energy J)."""
    per: list[list[float]] = [[] for _ in node_fns]

    def node_pass() -> None:
        ts, _ = bench.clock.time_chain(node_fns, x)
        for lst, t in zip(per, ts, strict=True):
            lst.append(t)

    nwall, nde = bench.window(node_pass)
    return per, nwall, nde


def _node_disagreement(per: Sequence[Sequence[float]], lats_s: Sequence[float]) -> float:
    """|sum of the node means - end-to-end mean| / end-to-end mean, of one batch size's windows."""
    e2e = float(np.mean(lats_s))
    return abs(sum(float(np.mean(lst)) for lst in per) - e2e) / e2e


def _power_fallback(fallback: Any, is_gpu: bool, n_threads: int) -> _Fallback:
    """The power figures used where nothing measured: ``fallback``'s, or the assumed constants."""
    if fallback is not None:
        top = fallback.max_table_batch

        def fb_power(b: int) -> float:
            return fallback.power_w(b if top is None else min(b, top))

        return _Fallback(
            fb_power,
            (
                f"fallback profile {fallback.name!r} ({fallback.source}), its power_w(b)"
                + ("" if top is None else f", clamped to b <= {top}")
            ),
            fallback.idle_power_w,
            f"fallback profile {fallback.name!r}: {fallback.idle_power_source}",
        )
    busy = ASSUMED_GPU_POWER_W if is_gpu else ASSUMED_CPU_POWER_W_PER_THREAD * n_threads

    def const_power(b: int) -> float:
        return busy

    fb_text = (
        f"assumed constant {busy:g} W (batch_env.real.profiling.ASSUMED_GPU_POWER_W)"
        if is_gpu
        else f"assumed constant {busy:g} W = {ASSUMED_CPU_POWER_W_PER_THREAD:g} W x "
        f"{n_threads} threads (batch_env.real.profiling.ASSUMED_CPU_POWER_W_PER_THREAD)"
    )
    fb_idle = ASSUMED_GPU_IDLE_POWER_W if is_gpu else ASSUMED_CPU_IDLE_POWER_W
    fb_idle_text = (
        f"assumed {fb_idle:g} W (batch_env.real.profiling.ASSUMED_"
        f"{'GPU' if is_gpu else 'CPU'}_IDLE_POWER_W): nothing measured idle power"
    )
    return _Fallback(const_power, fb_text, fb_idle, fb_idle_text)


def _power_column(
    bs: list[int], power: list[float | None], meter: Any, measures: bool, fb: _Fallback
) -> tuple[list[float], str]:
    """The profile's ``power_w`` (measured, else the fallback) and its citation."""
    meas_text = f"{meter.source} energy counter delta over each repetition window / window time"
    measured_b = [b for b, p in zip(bs, power, strict=True) if p is not None]
    power_w = [p if p is not None else fb.power(b) for b, p in zip(bs, power, strict=True)]
    if len(measured_b) == len(bs):
        power_cite = f"measured: {meas_text}"
    elif measured_b:
        power_cite = (
            f"measured ({meas_text}) at b in {measured_b}; elsewhere the counter did "
            f"not move within the window, so {fb.text}"
        )
    else:
        why = meter.reason if not measures else "the counter did not move within the windows"
        power_cite = f"not measured ({why}): {fb.text}"
    return power_w, power_cite


def _method_notes(
    min_time_s: float,
    min_repeats: int,
    warmup: int,
    cuda_graphs: bool,
    power_cite: str,
    meter: Any,
    meter_md: Any,
    measures: bool,
    clock_text: str,
) -> dict[str, Any]:
    """The profile's ``notes``: how it was measured, where the power came from, the meter."""
    notes = {
        "method": (
            f"each batch size run back to back for >= {min_time_s:g} s and >= {min_repeats} runs "
            f"after {warmup} warm-up runs, each call timed by {clock_text}; latency_ms = mean, "
            "latency_cv = mean of the per-size coefficients of variation; percentiles in "
            "_latency_stats" + ("; end-to-end runs are CUDA graph replays" if cuda_graphs else "")
        ),
        "power": power_cite,
        "energy_meter": meter_md,
    }
    if measures and meter.counter_period_s and min_time_s < 10 * meter.counter_period_s:
        notes["power_warning"] = (
            f"windows of {min_time_s:g} s are short for a counter that updates every "
            f"{meter.counter_period_s:g} s; power figures are rough"
        )
    return notes


def _node_table(
    net: Any, bs: list[int], runs: _Runs, fb: _Fallback, min_time_s: float, min_repeats: int
) -> dict[str, Any]:
    """The ``nodes`` table of the node-by-node windows, with its tolerance."""
    sums = np.sum(np.asarray(runs.node_lat), axis=0)
    rel = np.abs(sums - np.asarray(runs.lat_mean)) / np.asarray(runs.lat_mean)
    tol = _ceil2(float(rel.max()))
    npw = [p if p is not None else fb.power(b) for b, p in zip(bs, runs.node_pw, strict=True)]
    node_power_text = (
        "power_w: the average power of the node-by-node window at that batch size, the "
        "same for every node (a 20-100 ms energy counter cannot separate nodes)"
        if all(p is not None for p in runs.node_pw)
        else "power_w: the whole-model power_w at that batch size, the same for every node"
    )
    return {
        "names": list(net.node_names),
        "latency_ms": runs.node_lat,
        "power_w": [list(npw) for _ in runs.node_lat],
        "rule": (
            f"measured node by node: each pass runs every node in order on the batch, each "
            f"timed alone; >= {min_time_s:g} s and >= {min_repeats} passes per batch size; "
            f"latency_ms = mean per node; {node_power_text}; tolerance = max relative "
            "|sum of node latencies - end-to-end latency| / end-to-end over the batch "
            "sizes, rounded up to 2 decimals"
        ),
        "tolerance": tol,
    }


def _rejected_nodes_note(tol: float, cuda_graphs: bool) -> str:
    """The note for node tables too far off the end-to-end latency to be a profile's."""
    return (
        f"the node tables disagree with the end-to-end latency by {tol:.0%} (the profile "
        f"format allows < {_MAX_NODE_TOLERANCE:.0%}; a size that far off was measured "
        f"{NODE_ATTEMPTS} times), so they are kept in _nodes_rejected"
        + (
            " (CUDA graphs make whole batches much faster than node-by-node runs: "
            "measure with cuda_graphs=False for node tables)"
            if cuda_graphs
            else ""
        )
    )


def measure_profile(
    model: str,
    *,
    torch_device: str = "auto",
    batch_sizes: Sequence[int] = _DEFAULT_BATCH_SIZES,
    min_time_s: float = 2.0,
    min_repeats: int = 5,
    nodes: bool = True,
    width: float = 1.0,
    depth: int | Sequence[int] | None = None,
    weights: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    warmup: int = 3,
    cuda_graphs: bool = False,
    seed: int = 0,
    model_kwargs: Mapping[str, Any] | None = None,
    clock: str = "wall",
    fallback_profile: Any = None,
    idle_time_s: float | None = None,
    name: str | None = None,
    meter: Any = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure latency (and power where measurable) of a model per batch size.

    :param model: a name in :data:`batch_env.real.models.MODELS`.
    :param torch_device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:<index>"``.
    :param batch_sizes: the sizes to measure: at least two, strictly increasing.
    :param min_time_s: minimum back-to-back window per batch size (and per node pass).
    :param min_repeats: minimum runs per batch size, whatever the window.
    :param nodes: also measure the node-by-node tables (``nodes`` field).
    :param width: model size multiplier (1.0 = the real model).
    :param depth: model depth (``None`` = the real model).
    :param weights: optional state_dict file (see :func:`batch_env.real.models.build_model`).
    :param threads: ``torch.set_num_threads`` value (``None``: leave it); recorded.
    :param warmup: untimed runs per batch size before its window.
    :param cuda_graphs: time end-to-end batches as CUDA graph replays (GPU only; the
        node tables stay eager).
    :param seed: seed of the random weights and inputs.
    :param model_kwargs: extra model arguments (``image_size``, ``seq_len``, ``dtype``...).
    :param clock: what times a call, as for the executors: ``"wall"`` or ``"thread_cpu"``
        (CPU with ``threads=1`` only; see :class:`~batch_env.real.torch_executor.DeviceClock`).
        A profile meant for real mode under ``clock="thread_cpu"`` is measured with it too.
    :param fallback_profile: a profile (name, path, dict or Profile) whose power figures
        are used where no meter measures power.
    :param idle_time_s: idle-power window (default: ``min_time_s``).
    :param name: the profile's ``name`` (default ``<model>-<device>-measured``).
    :param meter: an energy meter to use instead of :func:`batch_env.real.energy.open_meter`'s.
    :param progress: called with a short line as each batch size completes.
    :returns: the profile dict (see the module docstring).
    :raises ValueError: for a bad argument.

    The model arguments (``model``, ``width``, ``depth``, ``weights``, ``seed``,
    ``model_kwargs``, ``threads``, ``warmup``, ``torch_device``) become one
    :class:`~batch_env.real.spec.ModelSpec`, which checks them and builds the model;
    ``_metadata["model_spec"]`` records it. From a spec:
    ``measure_profile(spec.model, **spec.keywords())``.
    """
    import torch

    from .device import resolve_device
    from .energy import open_meter
    from .models import slice_activation
    from .torch_executor import (
        DeviceClock,
        device_name,
        environment_metadata,
        set_threads,
    )

    bs = _check_batch_sizes(batch_sizes)
    min_time_s, idle_s = _check_run_args(min_time_s, idle_time_s, min_repeats)
    spec = ModelSpec(
        model,
        width=width,
        depth=depth,
        weights=weights,
        seed=seed,
        model_kwargs=model_kwargs or {},
        threads=threads,
        warmup=warmup,
        torch_device=torch_device,
    )
    device = resolve_device(spec.torch_device)
    if cuda_graphs and device.type != "cuda":
        raise ValueError(
            f"cuda_graphs=True needs a CUDA device, but torch_device={torch_device!r} resolved "
            f"to {device}; pass cuda_graphs=False"
        )
    fallback = None if fallback_profile is None else profile_mod.load(fallback_profile)
    timer = DeviceClock(device, clock, spec.threads)  # checked before threads are set
    n_threads = set_threads(spec.threads)
    say = progress or (lambda _line: None)

    net = spec.build(device)
    own_meter = meter is None
    meter = open_meter(str(device)) if own_meter else meter
    measures = meter.source != "model"
    bench = _Bench(torch, device, meter, measures, timer, min_repeats, min_time_s)
    full = net.make_input(bs[-1], device, seed=spec.seed)
    inputs = {b: slice_activation(full, b) for b in bs}
    node_fns = list(net.nodes)

    try:
        # idle power first, before anything heats up
        idle_w = bench.idle_power(idle_s)
        runs = _measure_runs(
            bench,
            net,
            node_fns,
            inputs,
            bs,
            warmup=spec.warmup,
            cuda_graphs=cuda_graphs,
            nodes=nodes,
            say=say,
            model=spec.model,
        )
    finally:
        meter_md = meter.metadata()
        if own_meter:
            meter.close()

    fb = _power_fallback(fallback, device.type == "cuda", n_threads)
    power_w, power_cite = _power_column(bs, runs.power, meter, measures, fb)
    if idle_w is not None:
        idle_power_w = idle_w
        idle_source = f"measured: {meter.source} energy over {idle_s:g} s idle / time"
    else:
        idle_power_w = fb.idle_w
        idle_source = fb.idle_text

    dev_name = device_name(device)
    env = environment_metadata(device, n_threads)
    src = (
        f"measured on {dev_name} with torch {env['torch_version']}, {n_threads} threads, "
        f"{env['date']}"
    )
    cfg = dict(net.config)
    desc = (
        spec.model
        if _is_default(spec)
        else (
            f"{spec.model} ({', '.join(f'{k}={v}' for k, v in cfg.items() if k not in ('seed', 'weights'))})"
        )
    )
    md = spec.to_dict()
    d: dict[str, Any] = {
        "name": name or f"{spec.model}-{_slug(dev_name)}-measured",
        "model": desc,
        "device": dev_name,
        "source": src,
        "kind": "table",
        "batch_sizes": bs,
        "latency_ms": runs.lat_mean,
        "latency_cv": float(np.mean(runs.cvs)),
        "power_w": power_w,
        "idle_power_w": float(idle_power_w),
        "idle_power_source": idle_source,
        "citations": {
            "latency_ms": src,
            "power_w": power_cite,
            "idle_power_w": idle_source,
        },
        "notes": _method_notes(
            min_time_s,
            min_repeats,
            spec.warmup,
            cuda_graphs,
            power_cite,
            meter,
            meter_md,
            measures,
            timer.describe(),
        ),
        "_latency_stats": {
            "p50_ms": runs.p50,
            "p95_ms": runs.p95,
            "p99_ms": runs.p99,
            "cv": runs.cvs,
            "repeats": runs.reps,
            "attempts": runs.attempts,
            "window_s": runs.wins,
        },
        "_metadata": {
            **env,
            "driver": meter_md.get("driver"),
            "model": md["model"],
            "model_spec": md,
            "model_config": cfg,
            "parameters": net.num_parameters(),
            "warmup": md["warmup"],
            "min_time_s": min_time_s,
            "min_repeats": int(min_repeats),
            "cuda_graphs": bool(cuda_graphs),
            **timer.metadata(),
            "energy_source": meter.source,
            "energy_reason": meter.reason,
        },
    }
    if nodes:
        table = _node_table(net, bs, runs, fb, min_time_s, min_repeats)
        if table["tolerance"] < _MAX_NODE_TOLERANCE:
            d["nodes"] = table
            d["citations"]["nodes"] = table["rule"]
        else:
            # a profile's node tables must roughly sum to the end-to-end latency; keep the
            # measurement, but where the loader will not take it
            d["_nodes_rejected"] = table
            d["notes"]["nodes"] = _rejected_nodes_note(table["tolerance"], cuda_graphs)
            warnings.warn(f"measure_profile: {d['notes']['nodes']}", RuntimeWarning, stacklevel=2)
    return d


def _is_default(spec: ModelSpec) -> bool:
    """Whether a :class:`~batch_env.real.spec.ModelSpec` is the real model (its name says it all)."""
    return (
        spec.width == 1.0 and spec.depth is None and not spec.model_kwargs and spec.weights is None
    )


def write_profile(d: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate a profile dict with :func:`batch_env.profile.load` and write it as JSON.

    :param d: a profile dict (e.g. from :func:`measure_profile`).
    :param path: the file to write (parent directories are created).
    :returns: the path written.
    :raises ValueError: if the profile is invalid or holds a non-finite number.
    """
    profile_mod.load(dict(d))
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        text = json.dumps(d, indent=1, allow_nan=False)
    except ValueError as e:
        raise ValueError(
            f"write_profile: profile {d.get('name')!r} holds a NaN or infinity: {e}"
        ) from e
    p.write_text(text + "\n", encoding="utf-8")
    return p
