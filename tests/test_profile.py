"""Tests for batch_env.profile: loading, validation, interpolation and lookup tables."""

from __future__ import annotations

import copy
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from batch_env.profiles import batch_profile as P

SHIPPED = [
    "bert-base-t4",
    "resnet50-a100-trt",
    "resnet50-p4",
    "resnet50-p4-linear",
    "resnet50-t4-trt",
    "resnet50-v100",
    "resnet50-v100-linear",
]
TABLE_SHIPPED = [n for n in SHIPPED if not n.endswith("-linear")]
LINEAR_SHIPPED = [n for n in SHIPPED if n.endswith("-linear")]
ASSUMED_POWER = ["bert-base-t4", "resnet50-a100-trt", "resnet50-t4-trt"]
DATA = Path(__file__).resolve().parents[1] / "data"  # data/README.md: the published tables


def table_dict(**over):
    d = {
        "name": "toy",
        "model": "toy-model",
        "device": "toy-device",
        "source": "made up for tests",
        "kind": "table",
        "batch_sizes": [1, 2, 4, 8],
        "latency_ms": [2.0, 3.0, 5.0, 9.0],
        "power_w": [100.0, 120.0, 150.0, 200.0],
        "idle_power_w": 30.0,
    }
    d.update(over)
    return d


def linear_dict(**over):
    d = {
        "name": "toy-linear",
        "model": "toy-model",
        "device": "toy-device",
        "source": "made up for tests",
        "kind": "linear",
        "alpha_ms": 0.5,
        "tau0_ms": 2.0,
        "beta_j": 0.04,
        "c0_j": 0.15,
        "idle_power_w": 40.0,
    }
    d.update(over)
    return d


# ------------------------------------------------------------------ shipped profiles


def test_available_lists_all_shipped():
    assert P.available() == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_loads_and_documents_itself(name):
    p = P.load(name)
    assert isinstance(p, P.Profile)
    assert p.name == name
    for field in ("model", "device", "source"):
        assert isinstance(getattr(p, field), str) and getattr(p, field).strip()
    assert p.citations, "every shipped profile cites where its numbers come from"
    assert p.idle_power_w > 0
    # No source publishes idle power for these GPUs: the profile must say so.
    assert "assumed" in p.idle_power_source
    assert "assumed" in p.citations["idle_power_w"]
    if p.kind == "table":
        assert p.max_table_batch == p.batch_sizes[-1]
        for field in ("batch_sizes", "latency_ms", "power_w"):
            assert field in p.citations
    else:
        assert p.max_table_batch is None
        for field in ("alpha_ms", "tau0_ms", "beta_j", "c0_j"):
            assert field in p.citations
    # Round trip through to_dict.
    q = P.load(p.to_dict())
    B = p.max_table_batch or 256
    for a, b in zip(p.tables(B), q.tables(B), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ASSUMED_POWER)
def test_latency_only_sources_mark_power_assumed(name):
    p = P.load(name)
    assert "assumed" in p.citations["power_w"]


def test_inoue_tables_match_published_figures():
    v = P.load("resnet50-v100")
    assert v.batch_sizes == (1, 2, 4, 8, 64, 128)
    thr = [476, 880, 1631, 2685, 5877, 6275]
    pw = [120, 109, 132, 153, 274, 285]
    for b, t, w in zip(v.batch_sizes, thr, pw, strict=True):
        assert v.latency_s(b) == pytest.approx(b / t, rel=1e-12)
        assert v.power_w(b) == pytest.approx(w, rel=1e-12)
    p4 = P.load("resnet50-p4")
    assert p4.batch_sizes == (1, 2, 4, 8, 64, 128)
    assert p4.latency_s(64) == pytest.approx(64 / 1677, rel=1e-12)
    assert p4.power_w(128) == pytest.approx(62, rel=1e-12)


def _csv_rows(path):
    with open(path) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def test_shipped_tables_match_reference_data():
    rows = _csv_rows(DATA / "inoue_resnet50_throughput_power.csv")
    for name, gpu in (("resnet50-v100", "V100"), ("resnet50-p4", "P4")):
        p = P.load(name)
        rs = [r for r in rows if r["gpu"] == gpu]
        assert list(p.batch_sizes) == [int(r["batch"]) for r in rs]
        for r in rs:
            b = int(r["batch"])
            assert p.latency_s(b) == pytest.approx(b / float(r["throughput_img_s"]), rel=1e-12)
            assert p.power_w(b) == pytest.approx(float(r["power_w"]), rel=1e-12)
    rows = _csv_rows(DATA / "dle_resnet50_latency.csv")
    for name, gpu in (("resnet50-t4-trt", "T4"), ("resnet50-a100-trt", "A100-80GB")):
        p = P.load(name)
        (r,) = [r for r in rows if r["gpu"] == gpu and r["framework"] == "triton-ort-trt"]
        for b in p.batch_sizes:
            assert p.latency_s(b) * 1000 == pytest.approx(float(r[f"b{b}"]), rel=1e-12)
    rows = _csv_rows(DATA / "dle_bert_base_latency.csv")
    p = P.load("bert-base-t4")
    rs = [r for r in rows if r["gpu"] == "T4" and r["seq"] == "128" and r["precision"] == "fp16"]
    assert list(p.batch_sizes) == [int(r["batch"]) for r in rs]
    for r in rs:
        assert p.latency_s(int(r["batch"])) * 1000 == pytest.approx(
            float(r["lat_avg_ms"]), rel=1e-12
        )


# ------------------------------------------------------------------ interpolation


@pytest.mark.parametrize("name", TABLE_SHIPPED)
def test_listed_sizes_exact_and_piecewise_linear_between(name):
    p = P.load(name)
    raw = p.raw
    lat_s = [x / 1000.0 for x in raw["latency_ms"]]
    en_j = [w * t for w, t in zip(raw["power_w"], lat_s, strict=True)]
    for b, lt, e in zip(p.batch_sizes, lat_s, en_j, strict=True):
        assert p.latency_s(b) == lt  # exactly
        assert p.energy_j(b) == e
        assert p.power_w(b) == pytest.approx(e / lt, rel=1e-15)
    bs = p.batch_sizes
    for i in range(len(bs) - 1):
        b0, b1 = bs[i], bs[i + 1]
        for b in range(b0 + 1, b1):
            f = (b - b0) / (b1 - b0)
            lt = lat_s[i] + f * (lat_s[i + 1] - lat_s[i])
            e = en_j[i] + f * (en_j[i + 1] - en_j[i])
            assert p.latency_s(b) == pytest.approx(lt, rel=1e-12)
            assert p.energy_j(b) == pytest.approx(e, rel=1e-12)
            assert p.power_w(b) == pytest.approx(e / lt, rel=1e-12)


def test_power_is_derived_not_interpolated():
    p = P.load("resnet50-v100")
    interp_power = 153 + (32 - 8) / (64 - 8) * (274 - 153)
    assert p.power_w(32) == pytest.approx(p.energy_j(32) / p.latency_s(32), rel=1e-15)
    assert abs(p.power_w(32) - interp_power) > 1.0


def test_energy_j_field_instead_of_power():
    d = table_dict(energy_j=[0.2, 0.3, 0.5, 0.9])
    del d["power_w"]
    p = P.load(d)
    assert p.energy_j(4) == 0.5
    assert p.energy_j(3) == pytest.approx(0.4)
    assert p.power_w(3) == pytest.approx(0.4 / 0.004)


def test_below_smallest_size_extends_first_segment():
    d = table_dict(batch_sizes=[2, 4, 8], latency_ms=[4.0, 6.0, 10.0])
    del d["power_w"]
    d["energy_j"] = [1.0, 1.5, 3.0]
    p = P.load(d)
    assert p.max_table_batch == 8
    assert p.latency_s(1) == pytest.approx(0.003)
    assert p.energy_j(1) == pytest.approx(0.75)
    lat, en = p.tables(8)
    assert lat[1] == pytest.approx(0.003) and en[1] == pytest.approx(0.75)


def test_below_smallest_size_clamps_non_positive():
    d = table_dict(batch_sizes=[2, 4], latency_ms=[1.0, 10.0])
    del d["power_w"]
    d["energy_j"] = [0.1, 5.0]
    p = P.load(d)
    # The first segment's line would give -3.5 ms and -2.35 J at b=1: clamp to b=2's values.
    assert p.latency_s(1) == 0.001
    assert p.energy_j(1) == 0.1


def test_linear_extrapolation_above_table():
    d = table_dict(extrapolation="linear")
    p = P.load(d)
    assert p.max_table_batch is None and p.extrapolation == "linear"
    # last segment: 5 ms @4 -> 9 ms @8 = 1 ms per request; energy 0.75 J -> 1.8 J.
    assert p.latency_s(16) == pytest.approx(0.017)
    assert p.energy_j(16) == pytest.approx(1.8 + 8 * (1.8 - 0.75) / 4)
    p.check_max_batch_size(1000)
    lat, en = p.tables(16)
    assert lat[16] == pytest.approx(0.017)


def test_linear_extrapolation_never_decreases_below_last_value():
    d = table_dict(latency_ms=[2.0, 3.0, 9.0, 8.0], extrapolation="linear")
    p = P.load(d)
    assert p.latency_s(100) == pytest.approx(0.008)
    assert p.latency_s(100) > 0


def test_linear_kind_formula():
    p = P.load(linear_dict())
    assert p.kind == "linear" and p.max_table_batch is None and p.batch_sizes is None
    for b in (1, 2, 7, 128, 10_000):
        assert p.latency_s(b) == pytest.approx((2.0 + 0.5 * b) / 1000.0, rel=1e-12)
        assert p.energy_j(b) == pytest.approx(0.15 + 0.04 * b, rel=1e-12)
        assert p.power_w(b) == pytest.approx(
            (0.15 + 0.04 * b) / ((2.0 + 0.5 * b) / 1000), rel=1e-12
        )


@pytest.mark.parametrize("name", LINEAR_SHIPPED)
def test_shipped_linear_fits(name):
    p = P.load(name)
    fits = {
        "resnet50-v100-linear": (0.1438, 1.8874, 0.04419, 0.15503),
        "resnet50-p4-linear": (0.5833, 1.4284, 0.03663, 0.05144),
    }[name]
    alpha, tau0, beta, c0 = fits
    assert p.latency_s(64) == pytest.approx((tau0 + alpha * 64) / 1000, rel=1e-12)
    assert p.energy_j(64) == pytest.approx(c0 + beta * 64, rel=1e-12)
    assert p.max_throughput_rps(128) == pytest.approx(
        128 / ((tau0 + alpha * 128) / 1000), rel=1e-12
    )


# ------------------------------------------------------------------ tables / throughput


@pytest.mark.parametrize("name", SHIPPED)
def test_tables_shape_and_values(name):
    p = P.load(name)
    B = min(p.max_table_batch or 64, 64)
    lat, en = p.tables(B)
    for arr in (lat, en):
        assert arr.shape == (B + 1,) and arr.dtype == np.float64
        assert arr[0] == 0.0
        assert np.all(arr[1:] > 0)
    for b in range(1, B + 1):
        assert lat[b] == p.latency_s(b)
        assert en[b] == p.energy_j(b)


def test_max_throughput_v100():
    p = P.load("resnet50-v100")
    # Interpolated latency between 64 and 128 has a positive intercept, so b / latency(b)
    # increases along that segment: the max at B=128 is the published 6275 img/s.
    assert p.max_throughput_rps(128) == pytest.approx(6275.0, rel=1e-9)
    assert p.max_throughput_rps(8) == pytest.approx(2685.0, rel=1e-9)
    assert p.max_throughput_rps(1) == pytest.approx(476.0, rel=1e-9)


@pytest.mark.parametrize("name", SHIPPED)
def test_max_throughput_is_brute_force_max(name):
    p = P.load(name)
    B = p.max_table_batch or 128
    assert p.max_throughput_rps(B) == pytest.approx(
        max(b / p.latency_s(b) for b in range(1, B + 1)), rel=1e-12
    )


def test_p4_throughput_peaks_at_64():
    p = P.load("resnet50-p4")
    assert p.max_throughput_rps(128) == pytest.approx(1677.0, rel=1e-9)


# ------------------------------------------------------------------ batch-size range


@pytest.mark.parametrize("name", TABLE_SHIPPED)
def test_check_max_batch_size_beyond_table(name):
    p = P.load(name)
    top = p.max_table_batch
    p.check_max_batch_size(top)
    with pytest.raises(ValueError) as e:
        p.check_max_batch_size(top + 1)
    msg = str(e.value)
    assert name in msg and "max_batch_size" in msg and str(top + 1) in msg and f"1..{top}" in msg
    with pytest.raises(ValueError, match="max_batch_size"):
        p.tables(top + 1)
    with pytest.raises(ValueError, match="max_batch_size"):
        p.max_throughput_rps(top + 1)
    with pytest.raises(ValueError, match=str(top + 1)):
        p.latency_s(top + 1)


@pytest.mark.parametrize("name", LINEAR_SHIPPED)
def test_check_max_batch_size_unbounded_for_linear(name):
    p = P.load(name)
    p.check_max_batch_size(100_000)
    assert p.tables(1024)[0].shape == (1025,)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "8", True])
def test_invalid_batch_size_values(bad):
    p = P.load("resnet50-v100")
    with pytest.raises(ValueError, match="max_batch_size"):
        p.check_max_batch_size(bad)
    with pytest.raises(ValueError):
        p.latency_s(bad)


def test_integer_like_batch_sizes_accepted():
    p = P.load("resnet50-v100")
    assert p.latency_s(np.int64(8)) == p.latency_s(8) == p.latency_s(8.0)
    p.check_max_batch_size(np.int32(128))


# ------------------------------------------------------------------ validation


def _drop(key):
    def f(d):
        del d[key]

    return f


def _set(key, value):
    def f(d):
        d[key] = value

    return f


def _both(d):
    d["energy_j"] = [0.1, 0.2, 0.3, 0.4]


# (mutation, base, text the message must contain: field name and bad value)
MALFORMED = {
    "missing name": (_drop("name"), table_dict, ["name"]),
    "missing source": (_drop("source"), table_dict, ["source"]),
    "missing idle power": (_drop("idle_power_w"), table_dict, ["idle_power_w"]),
    "missing batch sizes": (_drop("batch_sizes"), table_dict, ["batch_sizes"]),
    "missing latency": (_drop("latency_ms"), table_dict, ["latency_ms"]),
    "empty name": (_set("name", ""), table_dict, ["name", "''"]),
    "unknown kind": (_set("kind", "tabel"), table_dict, ["kind", "tabel"]),
    "non-monotone sizes": (
        _set("batch_sizes", [1, 4, 2, 8]),
        table_dict,
        ["batch_sizes", "[1, 4, 2, 8]"],
    ),
    "repeated sizes": (
        _set("batch_sizes", [1, 2, 2, 8]),
        table_dict,
        ["batch_sizes", "[1, 2, 2, 8]"],
    ),
    "non-integer size": (_set("batch_sizes", [1, 2.5, 4, 8]), table_dict, ["batch_sizes", "2.5"]),
    "string size": (_set("batch_sizes", [1, "2", 4, 8]), table_dict, ["batch_sizes", "'2'"]),
    "zero size": (_set("batch_sizes", [0, 2, 4, 8]), table_dict, ["batch_sizes", "0"]),
    "negative size": (_set("batch_sizes", [-1, 2, 4, 8]), table_dict, ["batch_sizes", "-1"]),
    "single size": (
        lambda d: d.update(batch_sizes=[1], latency_ms=[1.0], power_w=[1.0]),
        table_dict,
        ["batch_sizes", "[1]"],
    ),
    "sizes not a list": (_set("batch_sizes", 8), table_dict, ["batch_sizes", "8"]),
    "length mismatch": (_set("latency_ms", [2.0, 3.0, 5.0]), table_dict, ["latency_ms", "3"]),
    "power length mismatch": (_set("power_w", [1.0] * 5), table_dict, ["power_w", "5"]),
    "negative latency": (
        _set("latency_ms", [2.0, -3.0, 5.0, 9.0]),
        table_dict,
        ["latency_ms", "-3.0"],
    ),
    "zero latency": (_set("latency_ms", [0.0, 3.0, 5.0, 9.0]), table_dict, ["latency_ms", "0.0"]),
    "nan latency": (
        _set("latency_ms", [2.0, float("nan"), 5.0, 9.0]),
        table_dict,
        ["latency_ms", "nan"],
    ),
    "inf latency": (
        _set("latency_ms", [2.0, 3.0, float("inf"), 9.0]),
        table_dict,
        ["latency_ms", "inf"],
    ),
    "string latency": (_set("latency_ms", ["2", 3.0, 5.0, 9.0]), table_dict, ["latency_ms", "'2'"]),
    "negative power": (_set("power_w", [100.0, -1.0, 1.0, 1.0]), table_dict, ["power_w", "-1.0"]),
    "zero power": (_set("power_w", [100.0, 0.0, 1.0, 1.0]), table_dict, ["power_w", "0.0"]),
    "nan power": (_set("power_w", [float("nan"), 1.0, 1.0, 1.0]), table_dict, ["power_w", "nan"]),
    "negative energy": (
        lambda d: (d.pop("power_w"), d.update(energy_j=[0.1, 0.2, -0.3, 0.4])),
        table_dict,
        ["energy_j", "-0.3"],
    ),
    "inf energy": (
        lambda d: (d.pop("power_w"), d.update(energy_j=[0.1, 0.2, float("inf"), 0.4])),
        table_dict,
        ["energy_j", "inf"],
    ),
    "power and energy": (_both, table_dict, ["power_w", "energy_j", "both"]),
    "neither power nor energy": (_drop("power_w"), table_dict, ["power_w", "energy_j", "neither"]),
    "negative idle": (_set("idle_power_w", -5.0), table_dict, ["idle_power_w", "-5.0"]),
    "nan idle": (_set("idle_power_w", float("nan")), table_dict, ["idle_power_w", "nan"]),
    "string idle": (_set("idle_power_w", "40 W"), table_dict, ["idle_power_w", "'40 W'"]),
    "negative cv": (_set("latency_cv", -0.1), table_dict, ["latency_cv", "-0.1"]),
    "unknown extrapolation": (
        _set("extrapolation", "cubic"),
        table_dict,
        ["extrapolation", "cubic"],
    ),
    "linear field in table": (_set("alpha_ms", 0.1), table_dict, ["alpha_ms", "linear"]),
    "linear missing beta": (_drop("beta_j"), linear_dict, ["beta_j"]),
    "linear negative alpha": (_set("alpha_ms", -0.5), linear_dict, ["alpha_ms", "-0.5"]),
    "linear nan tau0": (_set("tau0_ms", float("nan")), linear_dict, ["tau0_ms", "nan"]),
    "linear inf c0": (_set("c0_j", float("inf")), linear_dict, ["c0_j", "inf"]),
    "linear zero time": (
        lambda d: d.update(alpha_ms=0.0, tau0_ms=0.0),
        linear_dict,
        ["alpha_ms", "tau0_ms", "0.0"],
    ),
    "linear zero energy": (
        lambda d: d.update(beta_j=0.0, c0_j=0.0),
        linear_dict,
        ["beta_j", "c0_j", "0.0"],
    ),
    "linear negative idle": (_set("idle_power_w", -1), linear_dict, ["idle_power_w", "-1"]),
    "linear negative cv": (_set("latency_cv", -2.0), linear_dict, ["latency_cv", "-2.0"]),
    "table field in linear": (_set("batch_sizes", [1, 2]), linear_dict, ["batch_sizes", "table"]),
    "linear extrapolation none": (
        _set("extrapolation", "none"),
        linear_dict,
        ["extrapolation", "none"],
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_profile_raises_with_field_and_value(case):
    mutate, base, expected = MALFORMED[case]
    d = base()
    mutate(d)
    with pytest.raises(ValueError) as e:
        P.load(d)
    msg = str(e.value)
    assert msg.startswith("dict"), msg
    for text in expected:
        assert text in msg, (text, msg)


def test_error_names_file_path(tmp_path):
    d = table_dict(latency_ms=[2.0, -3.0, 5.0, 9.0])
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    with pytest.raises(ValueError) as e:
        P.load(f)
    assert str(f) in str(e.value) and "latency_ms" in str(e.value) and "-3.0" in str(e.value)


def test_json_nan_literal_rejected(tmp_path):
    f = tmp_path / "nan.json"
    f.write_text(json.dumps(table_dict()).replace("30.0", "NaN"))
    with pytest.raises(ValueError, match="idle_power_w.*nan"):
        P.load(f)


def test_invalid_json(tmp_path):
    f = tmp_path / "broken.json"
    f.write_text('{"name": "x", ')
    with pytest.raises(ValueError) as e:
        P.load(str(f))
    assert str(f) in str(e.value) and "invalid JSON" in str(e.value)
    g = tmp_path / "list.json"
    g.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        P.load(g)


def test_unknown_field_warns_but_doc_fields_do_not():
    import warnings

    with pytest.warns(UserWarning, match="latency_mss"):
        P.load(table_dict(latency_mss=[1, 2]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P.load(
            table_dict(
                _comment="free text",
                notes={"a": 1},
                citations={"x": "y"},
                idle_power_source="assumed",
                latency_cv=0.1,
            )
        )


# ------------------------------------------------------------------ load() inputs


def test_load_accepts_name_path_dict_and_profile(tmp_path):
    by_name = P.load("resnet50-v100")
    f = tmp_path / "v100.json"
    f.write_text(json.dumps(by_name.to_dict()))
    by_path = P.load(f)
    by_str = P.load(str(f))
    by_dict = P.load(copy.deepcopy(by_name.raw))
    assert P.load(by_name) is by_name
    assert by_name.origin == "shipped profile 'resnet50-v100'"
    assert by_path.origin == str(f) and by_dict.origin == "dict"
    for q in (by_path, by_str, by_dict):
        assert q.name == "resnet50-v100"
        np.testing.assert_array_equal(q.tables(128)[0], by_name.tables(128)[0])
        np.testing.assert_array_equal(q.tables(128)[1], by_name.tables(128)[1])


def test_load_does_not_alias_input_dict():
    d = table_dict()
    p = P.load(d)
    d["latency_ms"][0] = 100.0
    assert p.latency_s(1) == 0.002
    assert p.raw["latency_ms"][0] == 2.0


def test_missing_file_lists_shipped_names(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError) as e:
        P.load(missing)
    msg = str(e.value)
    assert "nope.json" in msg
    for name in SHIPPED:
        assert name in msg
    with pytest.raises(FileNotFoundError, match="resnet50-v100-linear"):
        P.load("resnet50-v1000")


def test_load_rejects_other_types():
    with pytest.raises(TypeError):
        P.load(42)  # type: ignore[arg-type]


def test_defaults():
    p = P.load(table_dict())
    assert p.kind == "table" and p.extrapolation == "none" and p.latency_cv is None
    assert p.max_table_batch == 8 and p.batch_sizes == (1, 2, 4, 8)
    assert p.idle_power_w == 30.0 and isinstance(p.idle_power_source, str)
    assert p.notes == {} and p.raw["name"] == "toy"
    d = table_dict()
    del d["kind"]
    assert P.load(d).kind == "table"
    assert P.load(d).to_dict()["kind"] == "table"
    q = P.load(linear_dict(latency_cv=0.2))
    assert q.latency_cv == 0.2 and q.extrapolation == "linear"
    assert math.isclose(q.power_w(1), q.energy_j(1) / q.latency_s(1))
