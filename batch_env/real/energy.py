"""Energy meters: NVML (GPU), RAPL (CPU) or none ("model": energy comes from a profile).

:func:`open_meter` picks the best meter for a torch device and never fails:

* ``cuda[:N]``: NVML through ``pynvml`` (package ``nvidia-ml-py``). On Volta and newer the
  board's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since
  the driver loaded) is read; where it is not supported, a background thread samples
  ``nvmlDeviceGetPowerUsage`` every 10 ms and integrates it (trapezoids).
* ``cpu``: RAPL through ``/sys/class/powercap/intel-rapl:<n>/energy_uj`` (the package
  domains, summed; sub-domains such as ``intel-rapl:0:0`` are parts of their package and
  are not added again), where readable. The counter wraps at ``max_energy_range_uj``; each
  read adds the delta since the previous read, adding the range once when the raw value
  went down, so read at least once per wrap period (minutes at full load).
* otherwise, or when the above is unavailable: a meter with ``source == "model"`` that
  measures nothing (``read_j()`` and ``power_w()`` return ``None``); the caller takes
  energy from a profile. The reason is reported once per process with
  :func:`warnings.warn` (``RuntimeWarning``) and kept in ``meter.reason``.

Granularity, and what is honest
    NVML's energy counter updates every 20-100 ms (``counter_period_s`` = 0.1 here) and
    RAPL's about every millisecond (0.001). A batch much shorter than that cannot be
    metered by a counter delta: per-batch energy is then an estimate (power x duration,
    or the profile's model), while counter totals over windows of seconds (as
    :mod:`batch_env.real.profiling` measures) are the honest figure. RAPL counts the whole CPU
    package (every process on it), NVML the whole board.

This module does not import torch.
"""

from __future__ import annotations

import glob
import os
import re
import threading
import time
import warnings
import weakref
from typing import Any

__all__ = [
    "EnergyMeter",
    "ModelMeter",
    "NvmlMeter",
    "RaplMeter",
    "open_meter",
    "RAPL_ROOT",
]

#: Where Linux exposes RAPL.
RAPL_ROOT = "/sys/class/powercap"

#: Energy-counter update periods (seconds) assumed for the per-batch energy rule.
NVML_COUNTER_PERIOD_S = 0.1
RAPL_COUNTER_PERIOD_S = 0.001

_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class EnergyMeter:
    """Base class: a cumulative energy counter and, where available, instantaneous power.

    Attributes: ``source`` (``"nvml"``, ``"rapl"`` or ``"model"``), ``reason`` (why this
    source: a human sentence, naming what was missing for a fallback), ``device_name``,
    ``driver`` (NVML driver version, else ``None``), ``counter_period_s`` (how often the
    counter updates; ``None`` when there is no counter).
    """

    source: str = "model"
    reason: str = ""
    device_name: str = ""
    driver: str | None = None
    counter_period_s: float | None = None

    def read_j(self) -> float | None:
        """Cumulative energy in joules since the meter opened (``None``: not measurable).

        Only differences between two reads mean anything.
        """
        return None

    def power_w(self) -> float | None:
        """Current (recent average) power in watts, ``None`` where not measurable."""
        return None

    def metadata(self) -> dict[str, Any]:
        """What a measured profile or an experiment log should record about the meter."""
        return {
            "energy_source": self.source,
            "energy_reason": self.reason,
            "energy_device": self.device_name,
            "driver": self.driver,
            "counter_period_s": self.counter_period_s,
        }

    def close(self) -> None:
        """Release the meter's resources (files, NVML, threads). Idempotent."""

    def __enter__(self) -> EnergyMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source={self.source!r}, reason={self.reason!r})"


class ModelMeter(EnergyMeter):
    """Measures nothing: energy must come from a profile's model.

    :param reason: why no real meter is available.
    :param device_name: the device it stands for.
    """

    source = "model"

    def __init__(self, reason: str, device_name: str = "") -> None:
        self.reason = reason
        self.device_name = device_name


# --------------------------------------------------------------------- RAPL


def _rapl_domains(root: str) -> list[str]:
    """Top-level RAPL package directories under ``root`` (``intel-rapl:<n>``)."""
    dirs = glob.glob(os.path.join(root, "intel-rapl:*"))
    return sorted(d for d in dirs if re.fullmatch(r"intel-rapl:\d+", os.path.basename(d)))


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


class RaplMeter(EnergyMeter):
    """CPU package energy from RAPL's ``energy_uj`` counters, with wraparound handling.

    :param domains: package directories (each with ``energy_uj`` and, ideally,
        ``max_energy_range_uj``); see :func:`open_meter`.
    :param reason: the sentence for ``meter.reason``.
    :param device_name: the CPU's name.
    :raises OSError: if a counter cannot be read.
    """

    source = "rapl"
    counter_period_s = RAPL_COUNTER_PERIOD_S

    def __init__(self, domains: list[str], reason: str = "", device_name: str = "cpu") -> None:
        self.domains = list(domains)
        self.reason = reason or f"RAPL package counters {[os.path.basename(d) for d in domains]}"
        self.device_name = device_name
        self._fds: list[int] = []
        self._finalizer = weakref.finalize(self, _close_fds, self._fds)
        self._ranges: list[int | None] = []
        try:
            for d in self.domains:
                self._fds.append(os.open(os.path.join(d, "energy_uj"), os.O_RDONLY))
                self._ranges.append(_read_int_file(os.path.join(d, "max_energy_range_uj")))
            self._last = [self._raw(i) for i in range(len(self._fds))]
        except OSError:
            self.close()
            raise
        self._total_uj = 0
        self._lock = threading.Lock()
        # recent-average power: (time, joules) of the start of the current averaging window
        self._anchor = (time.perf_counter(), 0.0)
        self._power: float | None = None

    def _raw(self, i: int) -> int:
        return int(os.pread(self._fds[i], 64, 0).strip())

    def read_j(self) -> float:
        """Cumulative package energy (J) since the meter opened, wraparound corrected."""
        with self._lock:
            for i in range(len(self._fds)):
                raw = self._raw(i)
                delta = raw - self._last[i]
                if delta < 0:
                    # wrapped: count up to the range, then from zero (without the range
                    # known, the part before the wrap is lost and only `raw` is counted)
                    rng = self._ranges[i]
                    delta = delta + rng if rng else raw
                self._last[i] = raw
                self._total_uj += delta
            return self._total_uj * 1e-6

    def power_w(self) -> float | None:
        """Average power over the last window of at least 100 ms between reads.

        A meter younger than one window returns the average since it opened (``None``
        before the counter has moved).

        RAPL has no instantaneous power; this is the counter's slope, a smoothed figure
        that includes whatever ran on the package in that window.
        """
        now, e = time.perf_counter(), self.read_j()
        t0, e0 = self._anchor
        if now - t0 >= 0.1:
            self._power = (e - e0) / (now - t0)
            self._anchor = (now, e)
        elif self._power is None and now > t0 and e > e0:
            return (e - e0) / (now - t0)  # the meter is younger than one window
        return self._power

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus the RAPL domain directories."""
        return {**super().metadata(), "rapl_domains": list(self.domains)}

    def close(self) -> None:
        """Close the counter files."""
        self._finalizer()


def _read_int_file(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


def _open_rapl(root: str) -> EnergyMeter:
    pattern = os.path.join(root, "intel-rapl:*", "energy_uj")
    domains = _rapl_domains(root)
    if not domains:
        return ModelMeter(f"no readable {pattern} (no such files)", cpu_name())
    readable, errors = [], []
    for d in domains:
        path = os.path.join(d, "energy_uj")
        try:
            with open(path) as f:
                int(f.read().strip())
            readable.append(d)
        except (OSError, ValueError) as e:
            errors.append(
                f"{path}: {type(e).__name__}: {e.strerror if isinstance(e, OSError) else e}"
            )
    if not readable:
        hint = ""
        if any("PermissionError" in e for e in errors):
            hint = (
                " (since Linux 5.10 energy_uj is readable by root only; "
                "`sudo chmod o+r` the files to allow it)"
            )
        return ModelMeter(f"no readable {pattern}: {'; '.join(errors)}{hint}", cpu_name())
    try:
        return RaplMeter(
            readable,
            reason=f"RAPL {pattern}: {len(readable)} package domain(s)",
            device_name=cpu_name(),
        )
    except OSError as e:
        return ModelMeter(f"no readable {pattern}: {e}", cpu_name())


# --------------------------------------------------------------------- NVML


def _nvml_handle(pynvml: Any, index: int) -> Any:
    """NVML handle of torch's CUDA device ``index``, honouring CUDA_VISIBLE_DEVICES.

    NVML numbers every GPU in the machine; CUDA numbers only the visible ones, in the order
    CUDA_VISIBLE_DEVICES lists them (indices or ``GPU-`` UUIDs).
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if index < len(entries):
            entry = entries[index]
            if entry.isdigit():
                return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
            return pynvml.nvmlDeviceGetHandleByUUID(entry)
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


class NvmlMeter(EnergyMeter):
    """GPU board energy through NVML: the total-energy counter, else sampled power.

    :param pynvml: the imported, initialised ``pynvml`` module.
    :param handle: the NVML device handle.
    :param use_counter: read ``nvmlDeviceGetTotalEnergyConsumption`` (True) or integrate
        ``nvmlDeviceGetPowerUsage`` sampled every ``sample_period_s`` (False).
    :param reason: the sentence for ``meter.reason``.
    :param sample_period_s: sampling period of the power integrator.
    """

    source = "nvml"

    def __init__(
        self,
        pynvml: Any,
        handle: Any,
        use_counter: bool,
        reason: str,
        sample_period_s: float = 0.01,
    ) -> None:
        self._nvml = pynvml
        self._handle = handle
        self.use_counter = bool(use_counter)
        self.reason = reason
        self.device_name = _text(pynvml.nvmlDeviceGetName(handle))
        try:
            self.driver = _text(pynvml.nvmlSystemGetDriverVersion())
        except Exception:
            self.driver = None
        self.counter_period_s = NVML_COUNTER_PERIOD_S
        self._power_t = -1.0
        self._power: float | None = None
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.use_counter:
            self._mj0 = int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        else:
            self._integral_j = 0.0
            self._last_sample = (time.perf_counter(), self._query_power())
            self._period = float(sample_period_s)
            self._thread = threading.Thread(
                target=self._sample_loop, name="nvml-power", daemon=True
            )
            self._thread.start()

    def _query_power(self) -> float:
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0

    def _sample(self) -> None:
        t, p = time.perf_counter(), self._query_power()
        t0, p0 = self._last_sample
        self._integral_j += 0.5 * (p + p0) * (t - t0)
        self._last_sample = (t, p)

    def _sample_loop(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self._sample()
            except Exception:  # a transient NVML error must not kill the integrator
                continue

    def read_j(self) -> float:
        """Cumulative board energy (J) since the meter opened."""
        if self.use_counter:
            mj = int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
            return (mj - self._mj0) * 1e-3
        return self._integral_j

    def power_w(self) -> float | None:
        """Board power (W) from ``nvmlDeviceGetPowerUsage`` (cached for 20 ms: NVML's own
        update rate), ``None`` if NVML cannot say."""
        now = time.perf_counter()
        if now - self._power_t >= 0.02:
            try:
                self._power = self._query_power()
            except Exception:
                self._power = None
            self._power_t = now
        return self._power

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus how energy is read."""
        mode = "total energy counter" if self.use_counter else "power sampled every 10 ms"
        return {**super().metadata(), "nvml_mode": mode}

    def close(self) -> None:
        """Stop the sampler and shut NVML down."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


def _open_nvml(index: int) -> EnergyMeter:
    name = f"cuda:{index}"
    try:
        import pynvml
    except ImportError:
        return ModelMeter("pynvml not installed (pip install nvidia-ml-py)", name)
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return ModelMeter(f"NVML could not initialise: {e}", name)
    try:
        handle = _nvml_handle(pynvml, index)
    except Exception as e:
        _shutdown(pynvml)
        return ModelMeter(f"NVML has no handle for {name}: {e}", name)
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return NvmlMeter(pynvml, handle, True, "NVML total energy counter (Volta or newer)")
    except Exception as e:
        counter_error = str(e)
    try:
        pynvml.nvmlDeviceGetPowerUsage(handle)
    except Exception as e:
        _shutdown(pynvml)
        return ModelMeter(
            f"NVML measures neither energy ({counter_error}) nor power ({e}) on {name}", name
        )
    return NvmlMeter(
        pynvml,
        handle,
        False,
        f"NVML power sampling: the total energy counter is not supported ({counter_error})",
    )


def _shutdown(pynvml: Any) -> None:
    try:
        pynvml.nvmlShutdown()
    except Exception:
        pass


# --------------------------------------------------------------------- entry point


def open_meter(torch_device: str, *, rapl_root: str = RAPL_ROOT) -> EnergyMeter:
    """The best available energy meter for a torch device; never raises for a missing meter.

    :param torch_device: ``"cpu"``, ``"cuda"`` or ``"cuda:<index>"`` (anything else gets a
        ``"model"`` meter).
    :param rapl_root: the powercap directory to look in (tests point it at a fake tree).
    :returns: an :class:`NvmlMeter`, :class:`RaplMeter` or :class:`ModelMeter`; a fallback is
        reported once per reason with ``warnings.warn`` (``RuntimeWarning``).
    """
    dev = str(torch_device)
    m = re.fullmatch(r"cuda(?::(\d+))?", dev)
    if m:
        meter = _open_nvml(int(m.group(1) or 0))
    elif dev == "cpu":
        meter = _open_rapl(rapl_root)
    else:
        meter = ModelMeter(f"no energy meter for torch device {dev!r} (NVML: cuda, RAPL: cpu)", dev)
    if meter.source == "model":
        _warn_once(
            f"batch_env.real.energy: no energy measurement on {dev}: {meter.reason}; "
            "energy figures will come from a profile's model (or stated assumptions), not a meter"
        )
    return meter
