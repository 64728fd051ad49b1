"""Measure a latency / power profile of a real model on this machine.

:func:`measure_profile` runs a model from :mod:`batch_env.real.models` and returns a profile
dict that :func:`batch_env.profile.load` accepts (``kind: "table"``), with node tables for
NodeBatching; :func:`write_profile` validates and saves it as JSON.

What is measured, and how
    * Latency: for each listed batch size, after ``warmup`` runs, the batch is run back to
      back (each call timed alone: CUDA events on a GPU, ``perf_counter_ns`` on a CPU)
      until at least ``min_time_s`` have passed and at least ``min_repeats`` runs were
      made. ``latency_ms`` is the mean; p50 / p95 / p99, the per-size coefficient of
      variation, the number of runs and the window go to ``_latency_stats``.
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
      skip the launch overhead node runs pay) are not valid profile node tables: they go
      to ``_nodes_rejected`` with a warning and a note.

The profile records the device, driver, library versions, thread count and date in
``source`` and ``_metadata``.
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
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_number
from ..profiles import batch_profile as profile_mod

__all__ = [
    "ASSUMED_CPU_IDLE_POWER_W",
    "ASSUMED_CPU_POWER_W_PER_THREAD",
    "ASSUMED_GPU_IDLE_POWER_W",
    "ASSUMED_GPU_POWER_W",
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


def _check_batch_sizes(batch_sizes: Sequence[int]) -> list[int]:
    bs = list(batch_sizes)
    ok = len(bs) >= 2 and all(
        isinstance(b, numbers.Integral) and not isinstance(b, bool) and b >= 1 for b in bs
    ) and all(b2 > b1 for b1, b2 in zip(bs, bs[1:], strict=False))
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


def measure_profile(  # noqa: C901 -- over 15; issue 19 splits it
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
    :param fallback_profile: a profile (name, path, dict or Profile) whose power figures
        are used where no meter measures power.
    :param idle_time_s: idle-power window (default: ``min_time_s``).
    :param name: the profile's ``name`` (default ``<model>-<device>-measured``).
    :param meter: an energy meter to use instead of :func:`batch_env.real.energy.open_meter`'s.
    :param progress: called with a short line as each batch size completes.
    :returns: the profile dict (see the module docstring).
    :raises ValueError: for a bad argument.
    """
    import torch

    from .energy import open_meter
    from .models import build_model, slice_activation
    from .torch_executor import (
        DeviceClock,
        capture_cuda_graphs,
        device_name,
        environment_metadata,
        resolve_device,
        set_threads,
    )

    bs = _check_batch_sizes(batch_sizes)
    min_time_s = check_number("min_time_s", min_time_s, low=0.0)
    idle_s = min_time_s if idle_time_s is None else check_number("idle_time_s", idle_time_s, low=0.0)
    if not isinstance(min_repeats, numbers.Integral) or isinstance(min_repeats, bool) or min_repeats < 1:
        raise ValueError(f"min_repeats={min_repeats!r} is invalid: expected an integer >= 1")
    if not isinstance(warmup, numbers.Integral) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} is invalid: expected an integer >= 0")
    device = resolve_device(torch_device)
    if cuda_graphs and device.type != "cuda":
        raise ValueError(
            f"cuda_graphs=True needs a CUDA device, but torch_device={torch_device!r} resolved "
            f"to {device}; pass cuda_graphs=False"
        )
    fallback = None if fallback_profile is None else profile_mod.load(fallback_profile)
    n_threads = set_threads(threads)
    say = progress or (lambda _line: None)

    net = build_model(model, width=width, depth=depth, seed=seed, weights=weights,
                      **dict(model_kwargs or {})).to(device)
    own_meter = meter is None
    meter = open_meter(str(device)) if own_meter else meter
    measures = meter.source != "model"
    clock = DeviceClock(device)
    full = net.make_input(bs[-1], device, seed=seed)
    inputs = {b: slice_activation(full, b) for b in bs}
    node_fns = list(net.nodes)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def window(call: Callable[[], Any]) -> tuple[float, float | None]:
        """Repeat ``call`` until the window is long enough: (wall seconds, energy J)."""
        sync()
        e0 = meter.read_j() if measures else None
        t0 = time.perf_counter()
        n = 0
        while n < min_repeats or time.perf_counter() - t0 < min_time_s:
            call()
            n += 1
        wall = time.perf_counter() - t0
        e1 = meter.read_j() if measures else None
        return wall, (None if e0 is None or e1 is None else e1 - e0)

    try:
        # idle power first, before anything heats up
        idle_w = None
        if measures:
            sync()
            e0, t0 = meter.read_j(), time.perf_counter()
            time.sleep(idle_s)
            e1, t1 = meter.read_j(), time.perf_counter()
            if e0 is not None and e1 is not None and t1 > t0 and e1 - e0 >= 0:
                idle_w = (e1 - e0) / (t1 - t0)

        lat_mean, p50, p95, p99, cvs, reps, wins, power = [], [], [], [], [], [], [], []
        node_lat: list[list[float]] = [[] for _ in node_fns]
        node_pw: list[float | None] = []
        e2e_calls: dict[int, Callable[[Any], Any]] = {b: net for b in bs}
        with torch.inference_mode():
            for b in bs:
                for _ in range(warmup):
                    net(inputs[b])
            sync()
            if cuda_graphs:
                e2e_calls, _graph_outputs = capture_cuda_graphs(net, inputs, warmup)
            for b in bs:
                x, call = inputs[b], e2e_calls[b]
                lats: list[float] = []
                wall, de = window(lambda x=x, call=call, lats=lats: lats.append(clock.time(call, x)[0]))
                arr = np.asarray(lats) * 1e3
                lat_mean.append(float(arr.mean()))
                q = np.percentile(arr, [50, 95, 99])
                p50.append(float(q[0]))
                p95.append(float(q[1]))
                p99.append(float(q[2]))
                cvs.append(float(arr.std(ddof=1) / arr.mean()) if len(arr) > 1 else 0.0)
                reps.append(len(arr))
                wins.append(wall)
                power.append(de / wall if de is not None and de > 0 and wall > 0 else None)
                if nodes:
                    per: list[list[float]] = [[] for _ in node_fns]

                    def node_pass(x: Any = x, per: list[list[float]] = per) -> None:
                        ts, _ = clock.time_chain(node_fns, x)
                        for lst, t in zip(per, ts, strict=True):
                            lst.append(t)

                    nwall, nde = window(node_pass)
                    for i, lst in enumerate(per):
                        node_lat[i].append(float(np.mean(lst)) * 1e3)
                    node_pw.append(nde / nwall if nde is not None and nde > 0 and nwall > 0 else None)
                say(f"{model} b={b}: {lat_mean[-1]:.3f} ms mean over {len(arr)} runs"
                    + (f", {power[-1]:.1f} W" if power[-1] is not None else ""))
    finally:
        if own_meter:
            meter_md = meter.metadata()
            meter.close()
        else:
            meter_md = meter.metadata()

    # ---------------------------------------------------------------- power fallbacks
    is_gpu = device.type == "cuda"
    if fallback is not None:
        top = fallback.max_table_batch

        def fb_power(b: int) -> float:
            return fallback.power_w(b if top is None else min(b, top))

        fb_text = (f"fallback profile {fallback.name!r} ({fallback.source}), its power_w(b)"
                   + ("" if top is None else f", clamped to b <= {top}"))
        fb_idle = fallback.idle_power_w
        fb_idle_text = f"fallback profile {fallback.name!r}: {fallback.idle_power_source}"
    else:
        busy = ASSUMED_GPU_POWER_W if is_gpu else ASSUMED_CPU_POWER_W_PER_THREAD * n_threads

        def fb_power(b: int) -> float:
            return busy

        fb_text = (
            f"assumed constant {busy:g} W (batch_env.real.profiling.ASSUMED_GPU_POWER_W)" if is_gpu
            else f"assumed constant {busy:g} W = {ASSUMED_CPU_POWER_W_PER_THREAD:g} W x "
                 f"{n_threads} threads (batch_env.real.profiling.ASSUMED_CPU_POWER_W_PER_THREAD)"
        )
        fb_idle = ASSUMED_GPU_IDLE_POWER_W if is_gpu else ASSUMED_CPU_IDLE_POWER_W
        fb_idle_text = (
            f"assumed {fb_idle:g} W (batch_env.real.profiling.ASSUMED_"
            f"{'GPU' if is_gpu else 'CPU'}_IDLE_POWER_W): nothing measured idle power"
        )

    meas_text = f"{meter.source} energy counter delta over each repetition window / window time"
    measured_b = [b for b, p in zip(bs, power, strict=True) if p is not None]
    power_w = [p if p is not None else fb_power(b) for b, p in zip(bs, power, strict=True)]
    if len(measured_b) == len(bs):
        power_cite = f"measured: {meas_text}"
    elif measured_b:
        power_cite = (f"measured ({meas_text}) at b in {measured_b}; elsewhere the counter did "
                      f"not move within the window, so {fb_text}")
    else:
        why = meter.reason if not measures else "the counter did not move within the windows"
        power_cite = f"not measured ({why}): {fb_text}"
    if idle_w is not None:
        idle_power_w = idle_w
        idle_source = f"measured: {meter.source} energy over {idle_s:g} s idle / time"
    else:
        idle_power_w = fb_idle
        idle_source = fb_idle_text

    dev_name = device_name(device)
    env = environment_metadata(device, n_threads)
    src = (f"measured on {dev_name} with torch {env['torch_version']}, {n_threads} threads, "
           f"{env['date']}")
    cfg = dict(net.config)
    desc = model if _is_default(cfg, width, depth, model_kwargs) else (
        f"{model} ({', '.join(f'{k}={v}' for k, v in cfg.items() if k not in ('seed', 'weights'))})"
    )
    notes = {
        "method": (
            f"each batch size run back to back for >= {min_time_s:g} s and >= {min_repeats} runs "
            f"after {warmup} warm-up runs; latency_ms = mean, latency_cv = mean of the per-size "
            "coefficients of variation; percentiles in _latency_stats"
            + ("; end-to-end runs are CUDA graph replays" if cuda_graphs else "")
        ),
        "power": power_cite,
        "energy_meter": meter_md,
    }
    if measures and meter.counter_period_s and min_time_s < 10 * meter.counter_period_s:
        notes["power_warning"] = (
            f"windows of {min_time_s:g} s are short for a counter that updates every "
            f"{meter.counter_period_s:g} s; power figures are rough"
        )
    d: dict[str, Any] = {
        "name": name or f"{model}-{_slug(dev_name)}-measured",
        "model": desc,
        "device": dev_name,
        "source": src,
        "kind": "table",
        "batch_sizes": bs,
        "latency_ms": lat_mean,
        "latency_cv": float(np.mean(cvs)),
        "power_w": power_w,
        "idle_power_w": float(idle_power_w),
        "idle_power_source": idle_source,
        "citations": {
            "latency_ms": src,
            "power_w": power_cite,
            "idle_power_w": idle_source,
        },
        "notes": notes,
        "_latency_stats": {
            "p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "cv": cvs,
            "repeats": reps, "window_s": wins,
        },
        "_metadata": {
            **env,
            "driver": meter_md.get("driver"),
            "model": model,
            "model_config": cfg,
            "parameters": net.num_parameters(),
            "warmup": int(warmup),
            "min_time_s": min_time_s,
            "min_repeats": int(min_repeats),
            "cuda_graphs": bool(cuda_graphs),
            "energy_source": meter.source,
            "energy_reason": meter.reason,
        },
    }
    if nodes:
        sums = np.sum(np.asarray(node_lat), axis=0)
        rel = np.abs(sums - np.asarray(lat_mean)) / np.asarray(lat_mean)
        tol = _ceil2(float(rel.max()))
        npw = [p if p is not None else fb_power(b) for b, p in zip(bs, node_pw, strict=True)]
        node_power_text = (
            "power_w: the average power of the node-by-node window at that batch size, the "
            "same for every node (a 20-100 ms energy counter cannot separate nodes)"
            if all(p is not None for p in node_pw)
            else "power_w: the whole-model power_w at that batch size, the same for every node"
        )
        table = {
            "names": list(net.node_names),
            "latency_ms": node_lat,
            "power_w": [list(npw) for _ in node_fns],
            "rule": (
                f"measured node by node: each pass runs every node in order on the batch, each "
                f"timed alone; >= {min_time_s:g} s and >= {min_repeats} passes per batch size; "
                f"latency_ms = mean per node; {node_power_text}; tolerance = max relative "
                "|sum of node latencies - end-to-end latency| / end-to-end over the batch "
                "sizes, rounded up to 2 decimals"
            ),
            "tolerance": tol,
        }
        if tol < _MAX_NODE_TOLERANCE:
            d["nodes"] = table
            d["citations"]["nodes"] = table["rule"]
        else:
            # a profile's node tables must roughly sum to the end-to-end latency; keep the
            # measurement, but where the loader will not take it
            d["_nodes_rejected"] = table
            d["notes"]["nodes"] = (
                f"the node tables disagree with the end-to-end latency by {tol:.0%} (the profile "
                f"format allows < {_MAX_NODE_TOLERANCE:.0%}), so they are kept in _nodes_rejected"
                + (" (CUDA graphs make whole batches much faster than node-by-node runs: "
                   "measure with cuda_graphs=False for node tables)" if cuda_graphs else "")
            )
            warnings.warn(f"measure_profile: {d['notes']['nodes']}", RuntimeWarning, stacklevel=2)
    return d


def _is_default(cfg: Mapping[str, Any], width: float, depth: Any, kw: Mapping[str, Any] | None) -> bool:
    return width == 1.0 and depth is None and not kw and cfg.get("weights") is None


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
        raise ValueError(f"write_profile: profile {d.get('name')!r} holds a NaN or infinity: {e}") from e
    p.write_text(text + "\n", encoding="utf-8")
    return p
