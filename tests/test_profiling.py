"""Tests for batch_env.real.profiling: measured profiles load, carry node tables and say where
every number came from."""

from __future__ import annotations

import json
import math
import time
import warnings

import pytest
import torch

from batch_env.profiles import batch_profile as P
from batch_env.real.energy import EnergyMeter, ModelMeter
from batch_env.real.profiling import ASSUMED_CPU_POWER_W_PER_THREAD, measure_profile, write_profile

TINY = dict(width=0.125, depth=1, model_kwargs={"image_size": 32, "num_classes": 10})
BS = (1, 2, 4)


def measure(**kw):
    kw.setdefault("meter", ModelMeter("test: no meter", "cpu"))
    kw.setdefault("min_time_s", 0.02)
    kw.setdefault("min_repeats", 3)
    kw.setdefault("warmup", 1)
    kw.setdefault("threads", 1)
    sizes = {**TINY, **kw.pop("sizes", {})}
    return measure_profile("resnet50", torch_device="cpu", batch_sizes=BS, **sizes, **kw)


@pytest.fixture(scope="module", autouse=True)
def restore_threads():
    """The executor sets torch's thread count process-wide; give other tests theirs back."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


class WattMeter(EnergyMeter):
    """A counter that burns a steady 80 W of wall-clock time."""

    source, reason, device_name, counter_period_s = "rapl", "fake 80 W", "fake cpu", 0.01

    def __init__(self):
        self.t0 = time.perf_counter()

    def read_j(self):
        return 80.0 * (time.perf_counter() - self.t0)


@pytest.fixture(scope="module")
def measured():
    return measure()


def test_profile_loads_with_node_tables_of_the_right_shape(measured):
    d = measured
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no unknown fields
        prof = P.load(d)
    assert prof.kind == "table" and prof.batch_sizes == BS
    assert d["source"].startswith("measured on ") and "torch " in d["source"]
    assert "1 threads" in d["source"]
    nodes = prof.raw["nodes"]
    names = ["stem", "layer1.0", "layer2.0", "layer3.0", "layer4.0", "head"]
    assert nodes["names"] == names
    for key in ("latency_ms", "power_w"):
        assert len(nodes[key]) == len(names) and all(len(row) == len(BS) for row in nodes[key])
    assert nodes["rule"].startswith("measured node by node")
    tol = nodes["tolerance"]
    assert tol >= 0.01 and round(tol, 2) == tol
    sums = [sum(row[i] for row in nodes["latency_ms"]) for i in range(len(BS))]
    worst = max(abs(s - e) / e for s, e in zip(sums, d["latency_ms"], strict=True))
    assert worst <= tol < worst + 0.01 + 1e-9  # rounded up to 2 decimals, at least 0.01


def test_latency_statistics(measured):
    d = measured
    stats = d["_latency_stats"]
    for i in range(len(BS)):
        assert stats["p50_ms"][i] <= stats["p95_ms"][i] <= stats["p99_ms"][i]
        assert stats["repeats"][i] >= 3 and stats["window_s"][i] >= 0.02
        assert d["latency_ms"][i] > 0
    assert d["latency_cv"] == pytest.approx(sum(stats["cv"]) / len(BS))
    md = d["_metadata"]
    for key in ("device_name", "torch_version", "threads", "date", "python", "driver"):
        assert key in md
    assert md["threads"] == 1 and md["energy_source"] == "model"


def test_unmeasured_power_uses_the_documented_constant_and_says_so(measured):
    d = measured
    assert d["power_w"] == [ASSUMED_CPU_POWER_W_PER_THREAD * 1] * len(BS)
    assert "assumed" in d["citations"]["power_w"] and "test: no meter" in d["citations"]["power_w"]
    assert d["idle_power_source"].startswith("assumed")
    assert d["nodes"]["power_w"][0] == d["power_w"]


def test_fallback_profile_supplies_power():
    d = measure(fallback_profile="resnet50-v100", nodes=False)
    ref = P.load("resnet50-v100")
    assert d["power_w"] == pytest.approx([ref.power_w(b) for b in BS])
    assert d["idle_power_w"] == ref.idle_power_w
    assert (
        "resnet50-v100" in d["citations"]["power_w"] and "resnet50-v100" in d["idle_power_source"]
    )
    assert "nodes" not in d
    P.load(d)


def test_measured_power_is_counter_delta_over_window():
    d = measure(meter=WattMeter(), idle_time_s=0.02)
    assert d["power_w"] == pytest.approx([80.0] * len(BS), rel=0.05)
    assert d["idle_power_w"] == pytest.approx(80.0, rel=0.05)
    assert d["idle_power_source"].startswith("measured")
    assert d["citations"]["power_w"].startswith("measured")
    assert d["nodes"]["power_w"][0] == pytest.approx([80.0] * len(BS), rel=0.05)
    assert "power_warning" in d["notes"]  # 20 ms windows < 10 updates of a 10 ms counter


def test_write_profile_round_trip(tmp_path, measured):
    path = write_profile(measured, tmp_path / "sub" / "p.json")
    assert json.loads(path.read_text()) == measured
    assert P.load(path).batch_sizes == BS
    bad = {**measured, "latency_ms": [1.0, math.nan, 2.0]}
    with pytest.raises(ValueError, match="latency_ms"):
        write_profile(bad, tmp_path / "bad.json")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(batch_sizes=(4,)), "at least two strictly increasing"),
        (dict(batch_sizes=(2, 1)), "at least two strictly increasing"),
        (dict(min_time_s=-1), "min_time_s=-1"),
        (dict(cuda_graphs=True), "cuda_graphs=True needs a CUDA device"),
    ],
)
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        measure_profile("resnet50", torch_device="cpu", **{"batch_sizes": BS, **kw})


def test_node_tables_too_far_off_are_kept_aside(monkeypatch):
    import batch_env.real.profiling as prof_mod

    monkeypatch.setattr(prof_mod, "_MAX_NODE_TOLERANCE", 0.0)  # every table is "too far off"
    with pytest.warns(RuntimeWarning, match="_nodes_rejected"):
        d = measure()
    assert "nodes" not in d and d["_nodes_rejected"]["names"][0] == "stem"
    assert "_nodes_rejected" in d["notes"]["nodes"]
    # every size was measured again before its tables were set aside
    assert d["_latency_stats"]["attempts"] == [prof_mod.NODE_ATTEMPTS] * len(BS)
    P.load(d)


def test_a_disturbed_node_window_is_measured_again(monkeypatch):
    """A size whose node sums disagree once is measured again, and its second windows kept."""
    import batch_env.real.profiling as prof_mod

    calls = {"n": 0}
    real = prof_mod._measure_nodes

    def disturbed_once(bench, node_fns, x):
        per, wall, de = real(bench, node_fns, x)
        calls["n"] += 1
        if calls["n"] == 2:  # the second size's first node window: every node 10x slower
            per = [[10 * t for t in lst] for lst in per]
        return per, wall, de

    monkeypatch.setattr(prof_mod, "_measure_nodes", disturbed_once)
    d = measure()
    assert d["_latency_stats"]["attempts"] == [1, 2] + [1] * (len(BS) - 2)
    assert "nodes" in d and d["nodes"]["tolerance"] < 1.0
