"""TorchExecutor: real PyTorch execution of whole-model batches and of single nodes.

The real twin of :class:`batch_env.executor.ProfileExecutor`, with the same methods, so an
env runs on either: ``run(b) -> (duration_s, energy_j)`` runs the whole model on a batch
of ``b`` requests; ``new_group`` / ``run_node`` / ``merge_groups`` run it node by node
(NodeBatching), the activations of merged groups concatenated along the batch (dim 0,
older group first). The env's clock advances by the measured duration; arrivals still
come from the workload, so an episode is a reproducible emulation of serving.

Device and threads
    ``torch_device="auto"`` means CUDA when available, else the CPU; ``"cuda"`` without a
    GPU is a ``ValueError``. ``threads`` fixes ``torch.set_num_threads`` (process-wide)
    and is recorded in :meth:`TorchExecutor.metadata`.

Inputs and warm-up
    One random input of ``max_batch_size`` requests is generated at construction; a batch
    of ``b`` is a view of its first ``b`` rows, so the timed path allocates nothing beyond
    the model's own tensors. Warm-up happens up front, at construction: ``warmup`` runs of
    the whole model at every batch size 1..``max_batch_size`` (node runs use the same
    kernels on the same shapes, so they are warm too), so no warm-up lands in a timed
    call. With ``cuda_graphs=True`` one CUDA graph per batch size is captured after the
    warm-up and replayed by :meth:`TorchExecutor.run` (node runs stay eager: a group's
    activations are new tensors each time).

Timing (``clock``, one :class:`DeviceClock` for every real executor and the profiler)
    GPU (``clock="wall"``, the only one there): CUDA events recorded on the current stream
    around the call, then the end event is synchronised (so kernel launch gaps count, host
    bookkeeping does not). CPU, ``clock="wall"`` (the default): ``time.perf_counter_ns``
    around the call, the elapsed wall time, which includes any time the OS gave the core to
    another process. CPU, ``clock="thread_cpu"``: ``time.thread_time_ns`` around the call,
    the CPU time of the calling thread (``CLOCK_THREAD_CPUTIME_ID``), which other processes
    do not inflate by preempting it (they still can through shared caches and cores). It
    counts the calling thread only, so it needs one torch thread (``threads=1``, checked at
    construction and before every call); a GPU call is refused (its work is not the host
    thread's). :meth:`TorchExecutor.metadata` records ``clock`` and ``clock_source``
    (``"cuda_events"``, ``"perf_counter_ns"`` or ``"thread_time_ns"``). Every call returns
    with the device idle.

Energy
    Of a batch (or a node run) of measured duration ``d`` (the rule, in order; one
    :class:`EnergyRule` applies it, here and in :mod:`batch_env.real.llm_torch_executor`):

    1. Counter: where the meter has an energy counter (NVML on Volta+, RAPL) and
       ``d >= 10 x`` its update period (NVML 1 s, RAPL 10 ms), the counter delta across
       the call. The counter is read around a call only when the previous call of that
       batch size (and node) lasted at least half that, so short batches never pay for it.
    2. Power x duration: otherwise, where the meter reports power (NVML's board power;
       RAPL's average over its last 100 ms window), ``power_w() x d``. An estimate: NVML
       updates every 20-100 ms, so window totals over seconds are the honest figure.
    3. Profile: where nothing is measurable (``energy_source == "profile"``), the profile's
       busy power at that batch size times ``d``: ``energy_j(b) / latency_s(b) x d`` for
       ``run``; for ``run_node`` the node's busy power from the profile's node tables
       (:meth:`~batch_env.profile.Profile.node_tables`: energy / latency) where their names
       match the model's nodes, else the whole-model busy power.

:func:`overhead_benchmark` measures what the executor adds outside the timed model call.
"""

from __future__ import annotations

import datetime
import math
import numbers
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch

from ..checks import check_number
from ..profiles import batch_profile as profile_mod
from .device import resolve_device
from .energy import EnergyMeter, cpu_name, open_meter
from .models import Activation, NodeChainModel, cat_activations, slice_activation
from .spec import ModelSpec

__all__ = [
    "CLOCKS",
    "DeviceClock",
    "EnergyRule",
    "NodeGroup",
    "TorchExecutor",
    "capture_cuda_graphs",
    "device_name",
    "environment_metadata",
    "overhead_benchmark",
    "set_threads",
]

_COUNTER_PERIODS = 10.0  # a counter delta is trusted over >= this many update periods
#: The clocks a call can be timed with (``clock=``; module docstring: Timing).
CLOCKS = ("wall", "thread_cpu")


# --------------------------------------------------------------------- helpers


def set_threads(threads: int | None) -> int:
    """Fix torch's intra-op thread count (process-wide) and return the count in force.

    :param threads: an integer >= 1, or ``None`` to keep the current setting.
    :raises ValueError: if ``threads`` is not ``None`` or an integer >= 1.
    """
    if threads is not None:
        if not isinstance(threads, numbers.Integral) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"threads={threads!r} is invalid: expected None or an integer >= 1")
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def device_name(device: torch.device) -> str:
    """A human name for the device: the GPU's name, or the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name()


def environment_metadata(device: torch.device, threads: int) -> dict[str, Any]:
    """Versions and settings a measurement depends on (for metadata and profiles)."""
    return {
        "device": str(device),
        "device_name": device_name(device),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "threads": int(threads),
        "interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _check_clock(clock: Any, device: torch.device, threads: int | None) -> str:
    """``clock`` if it can time calls on ``device`` with ``threads`` torch threads (``None``:
    the count in force); ``ValueError`` naming the field, the value and what is allowed."""
    if not isinstance(clock, str) or clock not in CLOCKS:
        raise ValueError(f"clock={clock!r} is invalid: allowed values are {list(CLOCKS)}")
    if clock == "wall":
        return clock
    if device.type == "cuda":
        raise ValueError(
            f"clock={clock!r} is invalid on {device}: a GPU call is timed with CUDA events "
            "(clock='wall'), its work is not the host thread's CPU time; allowed there: "
            "clock='wall'"
        )
    n = torch.get_num_threads() if threads is None else threads
    if n != 1:
        given = f"threads={threads!r}" if threads is not None else f"threads=None ({n} in force)"
        raise ValueError(
            f"{given} is invalid with clock={clock!r}: the calling thread's CPU clock does not "
            "count other threads' work; allowed: threads=1 (or clock='wall')"
        )
    return clock


class DeviceClock:
    """Times one call on the executor's device (module docstring: Timing).

    :param device: where the calls run.
    :param clock: ``"wall"`` (CUDA events on a GPU, ``time.perf_counter_ns`` on a CPU) or
        ``"thread_cpu"`` (CPU only: ``time.thread_time_ns``, the calling thread's CPU time).
    :param threads: the torch threads the calls will run with (``None``: the count in
        force); ``"thread_cpu"`` needs exactly one.
    :raises ValueError: for another clock, ``"thread_cpu"`` on a GPU or with threads != 1.

    Attributes: ``clock``, ``source`` (``"cuda_events"``, ``"perf_counter_ns"`` or
    ``"thread_time_ns"``), ``cuda``, ``now`` (the host timer in ns that times CPU calls).
    """

    def __init__(self, device: torch.device, clock: str = "wall", threads: int | None = None):
        self.clock = _check_clock(clock, device, threads)
        self.cuda = device.type == "cuda"
        self._one_thread = self.clock == "thread_cpu"
        self.now: Callable[[], int] = (
            time.thread_time_ns if self._one_thread else time.perf_counter_ns
        )
        if self.cuda:
            self.source = "cuda_events"
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
        else:
            self.source = "thread_time_ns" if self._one_thread else "perf_counter_ns"

    def metadata(self) -> dict[str, str]:
        """``{"clock": ..., "clock_source": ...}``: what timed the calls."""
        return {"clock": self.clock, "clock_source": self.source}

    def describe(self) -> str:
        """What timed the calls, in words (for notes and reports)."""
        return {
            "cuda_events": "CUDA events (device time)",
            "perf_counter_ns": "time.perf_counter_ns (wall time)",
            "thread_time_ns": "time.thread_time_ns (the calling thread's CPU time)",
        }[self.source] + f", clock={self.clock!r}"

    def _t0(self) -> int:
        """The CPU timer's start; with ``thread_cpu``, first checks that torch still runs one
        thread (threads are process-wide: something may have changed them since)."""
        if self._one_thread and torch.get_num_threads() != 1:
            raise RuntimeError(
                f"clock='thread_cpu' times one thread, but torch now runs "
                f"{torch.get_num_threads()} (torch.set_num_threads was called since): the "
                "calling thread's CPU time would miss the others' work; set it back to 1"
            )
        return self.now()

    def time(self, fn: Callable[[Any], Any], x: Any) -> tuple[float, Any]:
        """``(seconds, fn(x))``; the device is idle when this returns."""
        if self.cuda:
            self._start.record()
            y = fn(x)
            self._end.record()
            self._end.synchronize()
            return self._start.elapsed_time(self._end) * 1e-3, y
        t0 = self._t0()
        y = fn(x)
        return (self.now() - t0) * 1e-9, y

    def time_consume(self, fn: Callable[[Any], Any], holder: list[Any]) -> tuple[float, Any]:
        """Like :meth:`time`, on ``holder.pop()``: no reference to the input outlives the
        call, so freeing the input (if nothing else holds it) is timed with it."""
        if self.cuda:
            self._start.record()
            y = fn(holder.pop())
            self._end.record()
            self._end.synchronize()
            return self._start.elapsed_time(self._end) * 1e-3, y
        t0 = self._t0()
        y = fn(holder.pop())
        return (self.now() - t0) * 1e-9, y

    def time_chain(self, fns: Sequence[Callable[[Any], Any]], x: Any) -> tuple[list[float], Any]:
        """Run ``fns`` in order on ``x``, timing each: ``([seconds per fn], output)``.

        On a GPU the stages are timed by events between them and synchronised once at the
        end, so no host synchronisation separates consecutive nodes.
        """
        if self.cuda:
            events = [torch.cuda.Event(enable_timing=True) for _ in range(len(fns) + 1)]
            events[0].record()
            for fn, ev in zip(fns, events[1:], strict=True):
                x = fn(x)
                ev.record()
            events[-1].synchronize()
            return [a.elapsed_time(b) * 1e-3 for a, b in zip(events, events[1:], strict=False)], x
        out = []
        now = self.now
        for fn in fns:
            t0 = self._t0()
            x = fn(x)
            out.append((now() - t0) * 1e-9)
        return out, x


class EnergyRule:
    """The energy of one timed call (the rule in the module docstring), for every real executor.

    Built once per executor around its meter: it decides where energy comes from
    (``source``: the meter's ``"nvml"`` / ``"rapl"``, or ``"profile"`` when the meter measures
    nothing) and, per call, whether the counter is read around it (:meth:`begin`) and what
    the call cost (:meth:`energy`). The caller supplies the profile's busy power for the
    call's shape (used only when the meter measures nothing).

    :param meter: the executor's energy meter.
    :param owner: who measures, for the error message (``"TorchExecutor on cpu"``).
    :param profile_name: the profile that supplies busy power when the meter measures
        nothing (``None``: no profile).
    :param profile_hint: what ``profile=`` should be, for the error message.
    :raises ValueError: when the meter measures nothing and there is no profile.

    Attributes: ``meter``, ``measured`` (the meter measures energy or power), ``source``,
    ``reason`` (a sentence), ``counter_min_s`` (shortest call whose counter delta is trusted;
    ``inf`` without a counter).
    """

    __slots__ = ("meter", "measured", "source", "reason", "counter_min_s")

    def __init__(
        self, meter: EnergyMeter, *, owner: str, profile_name: str | None, profile_hint: str
    ) -> None:
        self.meter = meter
        self.counter_min_s = (
            _COUNTER_PERIODS * meter.counter_period_s if meter.counter_period_s else math.inf
        )
        self.measured = meter.source != "model"
        if self.measured:
            self.source, self.reason = meter.source, meter.reason
        elif profile_name is None:
            raise ValueError(
                f"{owner}: no energy measurement ({meter.reason}), so energy must come from a "
                f"profile: pass profile={profile_hint}"
            )
        else:
            self.source = "profile"
            self.reason = (
                f"{meter.reason}; energy = profile {profile_name!r} busy power x measured duration"
            )

    def begin(self, last_s: float) -> float | None:
        """The counter before a call, read only when the previous call of the same shape
        lasted ``last_s >= counter_min_s / 2`` (short calls never pay for a read)."""
        return self.meter.read_j() if last_s >= 0.5 * self.counter_min_s else None

    def energy(self, d: float, e0: float | None, profile_power_w: float) -> float:
        """Joules of a call of measured duration ``d`` (counter, else power x d, else the
        profile's busy power ``profile_power_w`` x d).

        :param d: the call's measured duration (seconds).
        :param e0: what :meth:`begin` returned before the call.
        :param profile_power_w: the profile's busy power for this call (0 without a profile).
        """
        if e0 is not None:
            # e0 is a counter read (begin), so the meter reads a float again
            de = self.meter.read_j() - e0  # type: ignore[operator]
            if d >= self.counter_min_s and de > 0:
                return de
        if self.measured:
            p = self.meter.power_w()
            if p is not None:
                return p * d
            return 0.0  # a real meter that cannot say yet (a RAPL meter not yet moved)
        return profile_power_w * d


class NodeGroup:
    """A group of requests in flight: its activation, size and the next node to run.

    Returned by :meth:`TorchExecutor.new_group` and :meth:`TorchExecutor.merge_groups`;
    ``node`` is the index of the next node (``n_nodes`` once the head has run, when
    ``activation`` is the model's output).
    """

    __slots__ = ("activation", "size", "node")

    def __init__(self, activation: Activation, size: int, node: int = 0) -> None:
        self.activation = activation
        self.size = size
        self.node = node

    def __repr__(self) -> str:
        return f"NodeGroup(size={self.size}, node={self.node})"


# --------------------------------------------------------------------- executor


class TorchExecutor:
    """Runs a real PyTorch model (CUDA if present, else CPU); see the module docstring.

    :param model: a name in :data:`batch_env.real.models.MODELS`.
    :param max_batch_size: the largest batch (and group) size, >= 1.
    :param torch_device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:<index>"``.
    :param profile: a profile (name, path, dict or :class:`~batch_env.profile.Profile`)
        that supplies energy where no meter measures it; required then, else unused.
    :param width: model size multiplier (1.0 = the real model).
    :param depth: model depth (``None`` = the real model).
    :param weights: optional state_dict file (see :func:`batch_env.real.models.build_model`).
    :param threads: ``torch.set_num_threads`` value (``None``: leave it).
    :param warmup: warm-up runs per batch size at construction (>= 0).
    :param cuda_graphs: capture one CUDA graph per batch size for :meth:`run` (GPU only).
    :param seed: seed of the random weights and inputs.
    :param model_kwargs: extra model arguments (``image_size``, ``seq_len``, ``dtype``...).
    :param clock: what times a call (module docstring: Timing): ``"wall"`` (CUDA events on
        a GPU, elapsed wall time on a CPU) or ``"thread_cpu"`` (CPU with ``threads=1``
        only: the calling thread's CPU time, which other processes do not inflate).
    :param meter: an energy meter to use instead of :func:`batch_env.real.energy.open_meter`'s
        (tests inject fakes); the executor closes it in :meth:`close`.
    :raises ValueError: for a bad argument, a CUDA device that is not there, or no
        measurable energy and no profile.

    The model arguments (``model``, ``width``, ``depth``, ``weights``, ``seed``,
    ``model_kwargs``, ``threads``, ``warmup``, ``torch_device``) become one
    :class:`~batch_env.real.spec.ModelSpec` (``spec``), which checks them and builds the
    model; :meth:`metadata` records it under ``model_spec``. From a spec:
    ``TorchExecutor(spec.model, max_batch_size, **spec.keywords())``.

    Attributes: ``spec``, ``clock`` (``"wall"`` or ``"thread_cpu"``), ``energy_source``
    (``"nvml"``, ``"rapl"`` or ``"profile"``), ``energy_reason``, ``node_names``, ``n_nodes``,
    ``max_batch_size``, ``device``, ``model``, ``meter``, ``profile`` (or ``None``).
    """

    energy_source: str
    node_names: tuple[str, ...]
    n_nodes: int

    def __init__(
        self,
        model: str,
        max_batch_size: int,
        *,
        torch_device: str = "auto",
        profile: Any = None,
        width: float = 1.0,
        depth: int | Sequence[int] | None = None,
        weights: str | os.PathLike[str] | None = None,
        threads: int | None = None,
        warmup: int = 3,
        cuda_graphs: bool = False,
        seed: int = 0,
        model_kwargs: Mapping[str, Any] | None = None,
        clock: str = "wall",
        meter: EnergyMeter | None = None,
    ) -> None:
        check_number("max_batch_size", max_batch_size, low=1, integer=True)
        #: the model bundle (checked): what runs, its size, weights, threads, warm-up, device
        self.spec = ModelSpec(
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
        spec = self.spec
        self.device = resolve_device(spec.torch_device)
        if cuda_graphs and self.device.type != "cuda":
            raise ValueError(
                f"cuda_graphs=True needs a CUDA device, but torch_device={torch_device!r} "
                f"resolved to {self.device}; pass cuda_graphs=False"
            )
        self.max_batch_size = int(max_batch_size)
        # the clock is checked against the threads before they are set (process-wide)
        self._clock = DeviceClock(self.device, clock, spec.threads)
        self.clock = self._clock.clock
        self.threads = set_threads(spec.threads)
        self.cuda_graphs = bool(cuda_graphs)
        self.warmup = spec.warmup
        self.seed = spec.seed
        self.profile = None if profile is None else profile_mod.load(profile)

        self.model: NodeChainModel = spec.build(self.device)
        self.model_name = spec.model
        self.node_names = self.model.node_names
        self.n_nodes = len(self.node_names)
        self._nodes = list(self.model.nodes)

        self.meter = meter if meter is not None else open_meter(str(self.device))
        try:
            self._init_energy()
            self._init_inputs(spec.seed)
        except BaseException:
            self.meter.close()
            raise

    # ------------------------------------------------------------- set-up

    def _init_inputs(self, seed: int) -> None:
        B = self.max_batch_size
        full = self.model.make_input(B, self.device, seed=seed)
        # indexed by batch size 1..B (entry 0 is an unused placeholder)
        self._inputs: list[Activation] = [cast("Activation", None)] + [
            slice_activation(full, b) for b in range(1, B + 1)
        ]
        self._graph_outputs: list[Any] = [None] * (B + 1)
        self._calls: list[Callable[[Any], Any]] = [self.model] * (B + 1)
        self._last_run = [math.inf] * (B + 1)
        self._last_node = [[math.inf] * (B + 1) for _ in range(self.n_nodes)]
        self._rng: np.random.Generator | None = None
        with torch.inference_mode():
            self._warm_up()
            if self.cuda_graphs:
                self._capture_graphs()
        for b in range(1, B + 1):  # the first timed run of each size decides counter reads
            self._last_run[b] = self.run(b)[0]

    # ------------------------------------------------------------- set-up

    def _init_energy(self) -> None:
        B = self.max_batch_size
        self._rule = EnergyRule(
            self.meter,
            owner=f"TorchExecutor on {self.device}",
            profile_name=None if self.profile is None else self.profile.name,
            profile_hint="<shipped name, JSON path, dict or Profile> (e.g. one measured with "
            "batch_env.real.profiling.measure_profile)",
        )
        self.energy_source = self._rule.source
        self.energy_reason = self._rule.reason
        self._profile_power_run: list[float] | None = None
        self._profile_power_node: list[list[float]] | None = None
        if self._rule.measured:
            return
        p = self.profile
        assert p is not None  # EnergyRule refused a meter that measures nothing without a profile
        lat, en = p.tables(B)  # raises, naming the profile, if it does not cover B
        self._profile_power_run = [0.0] + [
            float(e / t) for e, t in zip(en[1:], lat[1:], strict=True)
        ]
        self._profile_power_node = _node_power_tables(p, self.node_names, B)
        if self._profile_power_node is not None:
            self.energy_reason += " (node runs: the profile's node tables)"

    def _warm_up(self) -> None:
        for b in range(1, self.max_batch_size + 1):
            for _ in range(self.warmup):
                self.model(self._inputs[b])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _capture_graphs(self) -> None:
        sizes = range(1, self.max_batch_size + 1)
        calls, outs = capture_cuda_graphs(
            self.model, {b: self._inputs[b] for b in sizes}, self.warmup
        )
        for b in sizes:
            self._calls[b] = calls[b]
            self._graph_outputs[b] = outs[b]

    # ------------------------------------------------------------- the env's interface

    def reset(self, rng: np.random.Generator) -> None:
        """Start an episode. ``rng`` is unused: the real timing is the service noise.

        :param rng: the env's service-time stream (kept for interface parity).
        """
        self._rng = rng

    def _check_b(self, b: int) -> None:
        if not 1 <= b <= self.max_batch_size:
            raise ValueError(
                f"batch size b={b!r} is out of range: allowed 1..{self.max_batch_size} "
                "(max_batch_size)"
            )

    def _energy(
        self, d: float, e0: float | None, profile_power: list[float] | None, b: int
    ) -> float:
        if profile_power is None:
            profile_power = self._profile_power_run
        return self._rule.energy(d, e0, profile_power[b] if profile_power is not None else 0.0)

    def run(self, b: int) -> tuple[float, float]:
        """Run the whole model on a batch of ``b`` requests.

        :param b: batch size, 1 <= b <= max_batch_size.
        :returns: ``(duration_s, energy_j)``: the measured time and its energy (module
            docstring: the energy rule).
        """
        self._check_b(b)
        e0 = self._rule.begin(self._last_run[b])
        with torch.inference_mode():
            d, _ = self._clock.time(self._calls[b], self._inputs[b])
        self._last_run[b] = d
        return d, self._energy(d, e0, self._profile_power_run, b)

    def new_group(self, b: int) -> NodeGroup:
        """A group of ``b`` new requests at node 0 (its input activation; nothing runs).

        :param b: group size, 1 <= b <= max_batch_size.
        """
        self._check_b(b)
        return NodeGroup(self._inputs[b], b, 0)

    def run_node(self, node: int, b: int, group: NodeGroup) -> tuple[float, float]:
        """Run node ``node`` on the group's activation, replacing it with the node's output.

        :param node: the group's next node (``group.node``), 0..n_nodes-1.
        :param b: the group's size (``group.size``).
        :param group: a handle from :meth:`new_group` or :meth:`merge_groups`.
        :returns: ``(duration_s, energy_j)`` of this node execution.
        :raises ValueError: if the node or the size does not match the group.
        """
        if group.node != node or not 0 <= node < self.n_nodes:
            raise ValueError(
                f"run_node: node={node!r} is invalid for {group!r}: the group's next node is "
                f"{group.node} (nodes 0..{self.n_nodes - 1})"
            )
        if group.size != b:
            raise ValueError(f"run_node: b={b!r} but the group holds {group.size} requests")
        e0 = self._rule.begin(self._last_node[node][b])
        # the handle lets go of its input before the call, so that freeing it (as a whole
        # forward pass frees its intermediates) counts in the node's time, as in run()
        holder = [group.activation]
        group.activation = None  # type: ignore[assignment]  # only while the node runs
        with torch.inference_mode():
            d, out = self._clock.time_consume(self._nodes[node], holder)
        group.activation = out
        group.node = node + 1
        self._last_node[node][b] = d
        table = self._profile_power_node[node] if self._profile_power_node is not None else None
        return d, self._energy(d, e0, table, b)

    def merge_groups(self, older: NodeGroup, newer: NodeGroup) -> NodeGroup:
        """One group holding both groups' requests (older first), at their common node.

        The concatenation is not timed (it is bookkeeping, not model work).

        :raises ValueError: if the groups sit at different nodes or exceed max_batch_size.
        """
        if older.node != newer.node:
            raise ValueError(
                f"merge_groups: groups at different nodes cannot merge ({older!r}, {newer!r})"
            )
        size = older.size + newer.size
        if size > self.max_batch_size:
            raise ValueError(
                f"merge_groups: merged size {size} exceeds max_batch_size={self.max_batch_size}"
            )
        with torch.inference_mode():
            act = cat_activations([older.activation, newer.activation])
        return NodeGroup(act, size, older.node)

    def output(self, group: NodeGroup) -> Activation:
        """The group's current activation (the model output once ``group.node == n_nodes``)."""
        return group.activation

    def metadata(self) -> dict[str, Any]:
        """Device, versions, threads, model and energy settings of this executor."""
        md = environment_metadata(self.device, torch.get_num_threads())
        spec = self.spec.to_dict()
        md.update(
            {
                "executor": "TorchExecutor",
                "model": spec["model"],
                "model_spec": spec,
                "model_config": dict(self.model.config),
                "parameters": self.model.num_parameters(),
                "width": self.model.config.get("width"),
                "depth": self.model.config.get("depth"),
                "nodes": list(self.node_names),
                "max_batch_size": self.max_batch_size,
                "warmup": spec["warmup"],
                "warmup_rule": "up front: warmup runs at every batch size 1..max_batch_size",
                "cuda_graphs": self.cuda_graphs,
                **self._clock.metadata(),
                "energy_source": self.energy_source,
                "energy_reason": self.energy_reason,
                "driver": self.meter.driver,
                "meter": self.meter.metadata(),
                "profile": None if self.profile is None else self.profile.name,
            }
        )
        return md

    def close(self) -> None:
        """Release the energy meter (NVML handle, RAPL files). Idempotent."""
        self.meter.close()

    def __repr__(self) -> str:
        return (
            f"TorchExecutor(model={self.model_name!r}, device={str(self.device)!r}, "
            f"max_batch_size={self.max_batch_size}, clock={self.clock!r}, "
            f"energy_source={self.energy_source!r})"
        )


def _replay(graph: Any) -> Callable[[Any], None]:
    def call(_x: Any) -> None:
        graph.replay()

    return call


def capture_cuda_graphs(
    model: Callable[[Any], Any], inputs: Mapping[int, Activation], warmup: int = 3
) -> tuple[dict[int, Callable[[Any], None]], dict[int, Any]]:
    """Capture one CUDA graph of ``model(inputs[b])`` per batch size (inference mode).

    The graphs share one memory pool (they never run concurrently), captured from the
    largest batch down. Each input must stay alive and unchanged: a graph replays on the
    same memory.

    :param model: the module to capture (on a CUDA device).
    :param inputs: batch size -> its input activation.
    :param warmup: eager runs per size on a side stream before capture (at least 2).
    :returns: ``(calls, outputs)``: per b, a callable ``call(x)`` that replays the graph
        (``x`` is ignored) and the graph's static output.
    """
    calls: dict[int, Callable[[Any], None]] = {}
    outputs: dict[int, Any] = {}
    first = next(iter(inputs.values()))
    device = (first if isinstance(first, torch.Tensor) else first[0]).device
    with torch.inference_mode(), torch.cuda.device(device):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # capture needs warm-up on a side stream
            for x in inputs.values():
                for _ in range(max(int(warmup), 2)):
                    model(x)
        torch.cuda.current_stream().wait_stream(stream)
        pool = None
        for b in sorted(inputs, reverse=True):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                outputs[b] = model(inputs[b])
            pool = g.pool()
            calls[b] = _replay(g)
        torch.cuda.synchronize()
    return calls, outputs


def _node_power_tables(
    p: profile_mod.Profile, names: tuple[str, ...], max_batch_size: int
) -> list[list[float]] | None:
    """Per node, busy power at b = 0..B from a profile's node tables, or ``None``.

    Uses :meth:`Profile.node_tables` (latency and energy interpolated by the profile's own
    rule; power = energy / latency), where the profile's node names are the model's.
    """
    node_names = getattr(p, "node_names", None)
    if node_names is None or not p.raw.get("nodes") or not hasattr(p, "node_tables"):
        return None
    if tuple(node_names) != tuple(names):
        warnings.warn(
            f"profile {p.name!r}: its node tables name {list(node_names)[:4]}... but the "
            f"model's nodes are {list(names)[:4]}...; node energy uses the whole-model busy "
            "power",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    lat, en = p.node_tables(max_batch_size)
    power = np.zeros_like(en)
    np.divide(en, lat, out=power, where=lat > 0)
    return power.tolist()


# --------------------------------------------------------------------- overhead


def overhead_benchmark(
    executor: TorchExecutor, batch_sizes: Sequence[int], *, repeats: int = 30, nodes: bool = True
) -> dict[str, Any]:
    """What the executor costs outside the timed model call, as a fraction of the batch time.

    For each batch size, ``repeats`` calls of :meth:`TorchExecutor.run` are timed around
    the call by the executor's host timer (the wall clock, or with ``clock="thread_cpu"``
    the calling thread's CPU time, so that both figures are on one clock); overhead = that
    time (``wall_ms``) - the duration ``run`` reports (the argument check, inference mode,
    energy bookkeeping, the return). With ``nodes``, the same for a whole node-by-node pass
    (``new_group`` + ``run_node`` for every node), against the sum of the node durations.
    Medians over the repeats.

    :param executor: a constructed (warm) executor.
    :param batch_sizes: the sizes to measure, each in 1..max_batch_size.
    :param repeats: calls per batch size (>= 1).
    :param nodes: also measure the node path.
    :returns: ``{"clock", "device", "batch_sizes", "run": {b: {...}}, "nodes": {b: {...}},
        "max_overhead_frac_run_b_ge_8", "max_overhead_frac_nodes_b_ge_8"}``, where each
        ``{...}`` holds ``duration_ms``, ``wall_ms``, ``overhead_ms`` and ``overhead_frac``
        (= overhead / duration) and the keys b are strings (JSON-ready).
    """
    check_number("repeats", repeats, low=1, integer=True)
    pc = executor._clock.now
    out: dict[str, Any] = {
        "clock": executor.clock,
        "device": str(executor.device),
        "device_name": device_name(executor.device),
        "model": executor.model_name,
        "model_config": dict(executor.model.config),
        "threads": torch.get_num_threads(),
        "repeats": int(repeats),
        "batch_sizes": [int(b) for b in batch_sizes],
        "run": {},
        "nodes": {},
    }

    def summary(walls: list[float], durs: list[float]) -> dict[str, float]:
        over = [w - d for w, d in zip(walls, durs, strict=True)]
        dm = statistics.median(durs)
        return {
            "duration_ms": dm * 1e3,
            "wall_ms": statistics.median(walls) * 1e3,
            "overhead_ms": statistics.median(over) * 1e3,
            "overhead_frac": statistics.median(over) / dm,
        }

    for b in batch_sizes:
        b = int(b)
        executor.run(b)
        walls, durs = [], []
        for _ in range(repeats):
            t0 = pc()
            d, _ = executor.run(b)
            walls.append((pc() - t0) * 1e-9)
            durs.append(d)
        out["run"][str(b)] = summary(walls, durs)
        if nodes:
            walls, durs = [], []
            for _ in range(repeats):
                t0 = pc()
                g = executor.new_group(b)
                total = 0.0
                for n in range(executor.n_nodes):
                    total += executor.run_node(n, b, g)[0]
                walls.append((pc() - t0) * 1e-9)
                durs.append(total)
            out["nodes"][str(b)] = summary(walls, durs)
    for kind in ("run", "nodes"):
        fr = [v["overhead_frac"] for k, v in out[kind].items() if int(k) >= 8]
        out[f"max_overhead_frac_{kind}_b_ge_8"] = max(fr) if fr else None
    return out
