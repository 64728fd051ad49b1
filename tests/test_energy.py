"""Tests for batch_env.real.energy: fallbacks, RAPL wraparound (fake sysfs), NVML (fake pynvml)."""

from __future__ import annotations

import os
import sys
import time
import types
import warnings

import pytest

from batch_env.real import energy as E


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test sees the once-per-reason warnings afresh."""
    monkeypatch.setattr(E, "_WARNED", set())


def fake_rapl(root, domains):
    """Write ``{name: (energy_uj, max_energy_range_uj or None)}`` as a powercap tree."""
    for name, (energy, rng) in domains.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "energy_uj").write_text(f"{energy}\n")
        if rng is not None:
            (d / "max_energy_range_uj").write_text(f"{rng}\n")


def set_energy(root, name, energy):
    (root / name / "energy_uj").write_text(f"{energy}\n")


def test_this_machine_reports_its_source():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = E.open_meter("cpu")
    try:
        readable = any(
            os.access(os.path.join(d, "energy_uj"), os.R_OK) for d in E._rapl_domains(E.RAPL_ROOT)
        )
        assert m.source == ("rapl" if readable else "model")
        assert m.reason
        if m.source == "model":
            assert m.read_j() is None and m.power_w() is None
            assert "intel-rapl:*/energy_uj" in m.reason
        else:
            assert m.read_j() >= 0.0
    finally:
        m.close()


def test_missing_rapl_falls_back_with_a_reason_warned_once(tmp_path):
    with pytest.warns(RuntimeWarning, match=r"no readable .*intel-rapl:\*/energy_uj") as rec:
        m = E.open_meter("cpu", rapl_root=str(tmp_path))
        E.open_meter("cpu", rapl_root=str(tmp_path))
    assert len(rec) == 1
    assert m.source == "model" and m.read_j() is None and m.power_w() is None
    assert "no readable" in m.reason and str(tmp_path) in m.reason


def test_unreadable_rapl_counter_names_the_file(tmp_path):
    fake_rapl(tmp_path, {"intel-rapl:0": ("not a number", 100)})
    with pytest.warns(RuntimeWarning):
        m = E.open_meter("cpu", rapl_root=str(tmp_path))
    assert m.source == "model"
    assert os.path.join(str(tmp_path), "intel-rapl:0", "energy_uj") in m.reason


def test_rapl_sums_packages_not_subdomains_and_handles_wraparound(tmp_path):
    fake_rapl(
        tmp_path,
        {
            "intel-rapl:0": (990_000, 1_000_000),
            "intel-rapl:0:0": (5, 1_000_000),  # the cores of package 0: already in its total
            "intel-rapl:1": (100, 1_000_000),
        },
    )
    m = E.open_meter("cpu", rapl_root=str(tmp_path))
    try:
        assert m.source == "rapl" and m.counter_period_s == pytest.approx(0.001)
        assert [os.path.basename(d) for d in m.domains] == ["intel-rapl:0", "intel-rapl:1"]
        assert m.read_j() == 0.0
        set_energy(tmp_path, "intel-rapl:0", 995_000)  # +5_000 uJ
        set_energy(tmp_path, "intel-rapl:0:0", 900_000)  # ignored
        set_energy(tmp_path, "intel-rapl:1", 1_100)  # +1_000 uJ
        assert m.read_j() == pytest.approx(0.006)
        set_energy(tmp_path, "intel-rapl:0", 2_000)  # wrapped: +5_000 to the range, +2_000
        assert m.read_j() == pytest.approx(0.013)
        set_energy(tmp_path, "intel-rapl:0", 3_000)
        assert m.read_j() == pytest.approx(0.014)
        assert m.metadata()["energy_source"] == "rapl"
    finally:
        m.close()


def test_rapl_wrap_without_a_known_range_counts_from_zero(tmp_path):
    fake_rapl(tmp_path, {"intel-rapl:0": (500, None)})
    m = E.open_meter("cpu", rapl_root=str(tmp_path))
    set_energy(tmp_path, "intel-rapl:0", 200)
    assert m.read_j() == pytest.approx(200e-6)
    m.close()
    m.close()  # idempotent


def test_rapl_power_is_the_counter_slope(tmp_path):
    fake_rapl(tmp_path, {"intel-rapl:0": (0, 10**12)})
    m = E.open_meter("cpu", rapl_root=str(tmp_path))
    try:
        assert m.power_w() is None  # the counter has not moved
        t0 = time.perf_counter()
        time.sleep(0.12)
        set_energy(tmp_path, "intel-rapl:0", 2_000_000)  # 2 J
        p = m.power_w()
        elapsed = time.perf_counter() - t0
        assert p == pytest.approx(2.0 / elapsed, rel=0.3)
    finally:
        m.close()


def test_other_devices_get_a_model_meter():
    with pytest.warns(RuntimeWarning, match="mps"):
        m = E.open_meter("mps")
    assert m.source == "model" and "mps" in m.reason


# ----------------------------------------------------------------- NVML


def test_pynvml_absent_is_reported_not_raised(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.warns(RuntimeWarning, match="pynvml not installed"):
        m = E.open_meter("cuda:0")
    assert m.source == "model" and m.reason.startswith("pynvml not installed")
    assert m.read_j() is None


class NVMLError(Exception):
    pass


def fake_pynvml(*, counter=True, power=True, init_ok=True):
    """A stand-in ``pynvml`` module: energy grows 1 J per call, power 150 W."""
    mod = types.ModuleType("pynvml")
    state = {"mj": 10_000, "handles": [], "shutdown": 0}

    def init():
        if not init_ok:
            raise NVMLError("Driver Not Loaded")

    def by_index(i):
        state["handles"].append(("index", i))
        return ("h", i)

    def by_uuid(u):
        state["handles"].append(("uuid", u))
        return ("h", u)

    def total_energy(h):
        if not counter:
            raise NVMLError("Not Supported")
        state["mj"] += 1_000
        return state["mj"]

    def power_usage(h):
        if not power:
            raise NVMLError("Not Supported")
        return 150_000

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: state.__setitem__("shutdown", state["shutdown"] + 1)
    mod.nvmlDeviceGetHandleByIndex = by_index
    mod.nvmlDeviceGetHandleByUUID = by_uuid
    mod.nvmlDeviceGetName = lambda h: b"Fake GPU"
    mod.nvmlSystemGetDriverVersion = lambda: "555.42"
    mod.nvmlDeviceGetTotalEnergyConsumption = total_energy
    mod.nvmlDeviceGetPowerUsage = power_usage
    mod.state = state
    return mod


def test_nvml_energy_counter(monkeypatch):
    fake = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        m = E.open_meter("cuda:1")
    assert fake.state["handles"][-1] == ("index", 1)  # CUDA's cuda:1 is NVML's GPU 1 here
    assert m.source == "nvml" and m.use_counter and m.device_name == "Fake GPU"
    assert m.driver == "555.42" and m.counter_period_s == pytest.approx(0.1)
    a, b = m.read_j(), m.read_j()
    assert b - a == pytest.approx(1.0)  # 1000 mJ per call
    assert m.power_w() == pytest.approx(150.0)
    assert m.metadata()["nvml_mode"] == "total energy counter"
    m.close()
    m.close()
    assert fake.state["shutdown"] == 1


def test_nvml_uuid_in_cuda_visible_devices(monkeypatch):
    fake = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    E.open_meter("cuda").close()
    assert fake.state["handles"][-1] == ("uuid", "GPU-abc")


def test_nvml_without_counter_integrates_sampled_power(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(counter=False))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    m = E.open_meter("cuda")
    try:
        assert m.source == "nvml" and not m.use_counter
        assert "Not Supported" in m.reason
        e0, t0 = m.read_j(), time.perf_counter()
        time.sleep(0.2)
        e1, t1 = m.read_j(), time.perf_counter()
        # 150 W integrated by a 10 ms sampler: within a couple of samples of 150 W x 0.2 s
        assert e1 - e0 == pytest.approx(150.0 * (t1 - t0), abs=150.0 * 0.05)
    finally:
        m.close()
    assert not m._thread.is_alive()


@pytest.mark.parametrize(
    ("fake", "match"),
    [
        (dict(init_ok=False), "NVML could not initialise: Driver Not Loaded"),
        (dict(counter=False, power=False), "neither energy"),
    ],
)
def test_nvml_failures_fall_back_to_model(monkeypatch, fake, match):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(**fake))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.warns(RuntimeWarning, match=match):
        m = E.open_meter("cuda")
    assert m.source == "model" and match.split(":")[0] in m.reason
