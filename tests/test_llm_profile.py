"""Tests for batch_env.llm_profile: shipped LLM profiles, validation, evaluation, generator."""

from __future__ import annotations

import copy
import csv
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from batch_env.profiles import llm_profile as L

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"  # data/README.md: the published tables
VIDUR = DATA / "vidur_llama_linear_ops_ms.csv"
SPLITWISE = DATA / "splitwise_llm_perf_model.csv"
#: the measured profiles (the others are built by the roofline model: tests/test_llm_arch.py)
MEASURED = ["llama-2-70b-tp8-a100", "llama-2-7b-a100", "llama-2-7b-h100"]
ARCH = sorted(
    f"{m}{'' if tp == 1 else f'-tp{tp}'}-{g}"
    for m, tps in (
        ("llama-3.1-8b", (1,)),
        ("qwen2.5-7b", (1,)),
        ("llama-3.1-70b", (4, 8)),
        ("mixtral-8x7b", (2,)),
    )
    for tp in tps
    for g in ("a100", "h100", "h200")
)
SHIPPED = sorted(MEASURED + ARCH)
KIB = 1024


def toy(**over):
    d = {
        "kind": "llm",
        "name": "toy-llm",
        "model": "toy",
        "device": "toy GPU",
        "source": "made up for tests",
        "num_gpus": 2,
        "kv_bytes_per_token": 1000,
        "weights_bytes": 50_000,
        "gpu_memory_bytes": 100_000,
        "gpu_memory_utilization": 0.9,
        "gpu_rated_power_w": 300.0,
        "idle_power_w": 100.0,
        "prefill": {
            "tokens": [1, 100, 200],
            "time_ms": [5.0, 10.0, 30.0],
            "ms_per_token": 0.01,
            "ms_per_sq_token": 0.001,
        },
        "decode": {
            "batch_sizes": [1, 4, 8],
            "time_ms": [5.0, 6.0, 10.0],
            "ms_per_context_token": 0.002,
        },
        "power": {
            "prefill_tokens": [1, 200],
            "prefill_w": [200.0, 600.0],
            "decode_batch_sizes": [1, 8],
            "decode_w": [200.0, 400.0],
        },
    }
    d.update(over)
    return d


def vidur_ms(gpu: str, tokens: int) -> float:
    """Mean linear_ops_ms of Llama-2-7B TP1 at ``tokens`` read straight from the CSV."""
    vals = []
    with VIDUR.open() as f:
        for r in csv.DictReader(ln for ln in f if not ln.startswith("#")):
            if (r["model"], r["gpu"], r["tensor_parallel"], r["num_tokens"]) == (
                "llama-2-7b",
                gpu,
                "1",
                str(tokens),
            ):
                vals.append(float(r["linear_ops_ms"]))
    assert vals, (gpu, tokens)
    return sum(vals) / len(vals)


# ----------------------------------------------------------------- shipped profiles


def test_available_lists_shipped():
    assert L.available() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_loads_and_round_trips(name):
    p = L.load(name)
    assert p.name == name and p.origin == f"shipped LLM profile '{name}'"
    assert p.extrapolation == "none" and p.gpu_memory_utilization == 0.9
    assert p.source and p.citations and "idle_power_w" in p.citations
    again = L.load(p.to_dict())
    assert again.decode_time_s(3, 300) == p.decode_time_s(3, 300)
    assert L.load(p) is p
    path = ROOT / "batch_env" / "profiles" / "llm" / f"{name}.json"
    assert L.load(path).kv_capacity_tokens() == p.kv_capacity_tokens()
    assert L.load(str(path)).name == name


def test_kv_bytes_per_token_and_weights():
    assert L.load("llama-2-7b-a100").kv_bytes_per_token == 512 * KIB
    assert L.load("llama-2-7b-h100").kv_bytes_per_token == 512 * KIB
    p70 = L.load("llama-2-70b-tp8-a100")
    assert p70.kv_bytes_per_token == 320 * KIB
    assert p70.num_gpus == 8 and p70.weights_bytes == 137_960_000_000


@pytest.mark.parametrize(
    "name, expected",
    [
        ("llama-2-7b-a100", 111_618),
        ("llama-2-7b-h100", 111_618),
        ("llama-2-70b-tp8-a100", 1_336_791),
    ],
)
def test_kv_capacity_formula(name, expected):
    p = L.load(name)
    cap = p.kv_capacity_tokens()
    assert cap == expected
    assert cap == int(
        (p.num_gpus * p.gpu_memory_bytes * 0.9 - p.weights_bytes) // p.kv_bytes_per_token
    )
    assert p.kv_blocks_total() == expected // 16
    assert p.kv_blocks_total(block_size=32) == expected // 32
    assert p.kv_capacity_tokens(0.5) < cap
    half = int((p.num_gpus * p.gpu_memory_bytes * 0.5 - p.weights_bytes) // p.kv_bytes_per_token)
    assert p.kv_capacity_tokens(0.5) == half


def test_kv_capacity_errors():
    p = L.load("llama-2-70b-tp8-a100")
    with pytest.raises(ValueError, match="weights_bytes"):
        p.kv_capacity_tokens(0.2)  # 8 x 80 GB x 0.2 = 128 GB < 138 GB of weights
    for bad in (0.0, 1.5, float("nan"), "0.9"):
        with pytest.raises(ValueError, match="gpu_memory_utilization"):
            p.kv_capacity_tokens(bad)
    with pytest.raises(ValueError, match="block_size"):
        p.kv_blocks_total(block_size=0)


@pytest.mark.parametrize("name", MEASURED)
def test_decode_time_grows_with_batch_and_context(name):
    p = L.load(name)
    per_req = 1000
    t = [p.decode_time_s(b, b * per_req) for b in (1, 8, 32, 64)]
    assert t == sorted(t) and t[-1] > 1.2 * t[0]
    assert p.decode_time_s(16, 40_000) > p.decode_time_s(16, 10_000) > p.decode_time_s(16, 0)


@pytest.mark.parametrize("name", MEASURED)
def test_prefill_time_grows_with_tokens(name):
    p = L.load(name)
    t = [p.prefill_time_s(n, n * n) for n in (128, 512, 2048, 4096)]
    assert t == sorted(t) and t[-1] > 10 * t[0]
    # several short prompts cost no more than one prompt of the same total length
    assert p.prefill_time_s(2048, 4 * 512**2) <= p.prefill_time_s(2048, 2048**2)


def test_7b_attention_terms():
    p = L.load("llama-2-7b-a100")
    # decode: one read of each context token's K and V at 70% of 2039 GB/s
    per_ctx = p.decode_time_s(8, 10_000) - p.decode_time_s(8, 0)
    assert per_ctx == pytest.approx(10_000 * 512 * KIB / (2039e9 * 0.7), rel=1e-5)
    # prefill: causal attention 2 x 32 layers x 4096 hidden FLOPs per squared token at 50% of 312 TFLOPS
    sq = p.prefill_time_s(1024, 1024**2) - p.prefill_time_s(1024, 0)
    assert sq == pytest.approx(1024**2 * 2 * 32 * 4096 / (312e12 * 0.5), rel=1e-5)
    assert p.decode_time_s(1, 1000) * 1e3 == pytest.approx(
        9.28 + 1000 * 512 * KIB / (2039e9 * 0.7) * 1e3, rel=1e-5
    )


def test_7b_table_points_equal_the_table():
    for name in ("llama-2-7b-a100", "llama-2-7b-h100"):
        p = L.load(name)
        raw = p.raw
        for b, ms in zip(raw["decode"]["batch_sizes"], raw["decode"]["time_ms"], strict=True):
            assert p.decode_time_s(b, 0) == pytest.approx(ms / 1e3, rel=1e-12)
        tok_ms = raw["prefill"]["ms_per_token"]
        for n, ms in zip(raw["prefill"]["tokens"], raw["prefill"]["time_ms"], strict=True):
            assert p.prefill_time_s(n, 0) == pytest.approx((ms + tok_ms * n) / 1e3, rel=1e-12)
    p = L.load("llama-2-7b-a100")
    assert p.decode_time_s(1, 0) == pytest.approx(9.28e-3)
    assert p.decode_time_s(2048, 0) == pytest.approx(
        (133.504 + 133.424) / 2 / 1e3
    )  # duplicate rows: mean
    # between listed points: linear (512 -> 33.36 ms, 520 -> 36.944 ms)
    assert p.decode_time_s(516, 0) == pytest.approx((33.36 + 36.944) / 2 / 1e3)


@pytest.mark.parametrize(
    "gpu, name", [("a100-80gb", "llama-2-7b-a100"), ("h100-80gb", "llama-2-7b-h100")]
)
@pytest.mark.parametrize("tokens", [1, 64, 512, 4096])
def test_7b_decode_matches_vidur_csv(gpu, name, tokens):
    p = L.load(name)
    assert p.decode_time_s(tokens, 0) * 1e3 == pytest.approx(vidur_ms(gpu, tokens), abs=1e-6)


def test_70b_decode_reproduces_splitwise_token_time():
    p = L.load("llama-2-70b-tp8-a100")
    # decode(b, b x 576) reproduces the mean measured token_time at prompt 512 (ms)
    measured = {1: 44.913, 16: 50.440, 64: 71.261}
    for b, ms in measured.items():
        assert p.decode_time_s(b, b * 576) * 1e3 == pytest.approx(ms, abs=0.01)
    assert p.prefill_time_s(8192, 0) * 1e3 == pytest.approx(1544.36, abs=0.01)
    assert p.prefill_time_s(8192, 8192**2) == p.prefill_time_s(8192, 0)  # attention included


def test_70b_matches_splitwise_csv():
    rows = [
        r
        for r in csv.DictReader(SPLITWISE.open())
        if (r["model"], r["hardware"], r["tensor_parallel"], r["token_size"])
        == ("llama2-70b", "a100-80gb", "8", "128")
    ]
    p = L.load("llama-2-70b-tp8-a100")
    for b in (2, 8, 32):
        tt = [
            float(r["token_time"])
            for r in rows
            if r["prompt_size"] == "512" and r["batch_size"] == str(b)
        ]
        assert p.decode_time_s(b, b * 576) * 1e3 == pytest.approx(sum(tt) / len(tt), abs=1e-4)
    for n in (256, 2048):
        pt = [
            float(r["prompt_time"])
            for r in rows
            if r["prompt_size"] == str(n) and r["batch_size"] == "1"
        ]
        assert p.prefill_time_s(n, n * n) * 1e3 == pytest.approx(sum(pt) / len(pt), abs=1e-4)
    avg8 = [
        float(r["average_power"])
        for r in rows
        if r["prompt_size"] == "512" and r["batch_size"] == "8"
    ]
    assert p.decode_power_w(8) == pytest.approx(avg8[0] * 400 * 8, abs=0.01)


def test_max_num_seqs_checks():
    p70 = L.load("llama-2-70b-tp8-a100")
    assert p70.max_batch_size == 64 and p70.max_batch_tokens == 8192
    with pytest.raises(ValueError, match=r"max_num_seqs=256.*up to 64") as e:
        p70.check_max_num_seqs(256)
    assert "no extrapolation" in str(e.value) and "llama-2-70b-tp8-a100" in str(e.value)
    p70.check_max_num_seqs(64)
    p70.check_max_num_batched_tokens(8192)
    with pytest.raises(ValueError, match=r"max_num_batched_tokens=8193.*8192"):
        p70.check_max_num_batched_tokens(8193)
    for bad in (0, 2.5, "8", None):
        with pytest.raises(ValueError, match="max_num_seqs"):
            p70.check_max_num_seqs(bad)
    with pytest.raises(ValueError, match="batch_size=65"):
        p70.decode_time_s(65, 0)
    with pytest.raises(ValueError, match="prompt_tokens_total=8193"):
        p70.prefill_time_s(8193, 0)
    p7 = L.load("llama-2-7b-a100")
    assert p7.max_batch_size == 4096 and p7.max_batch_tokens == 4096
    p7.check_max_num_seqs(256)
    p7.check_max_num_batched_tokens(4096)
    with pytest.raises(ValueError, match="max_num_seqs=4097"):
        p7.check_max_num_seqs(4097)


@pytest.mark.parametrize("name", MEASURED)
def test_power_positive_and_bounded(name):
    p = L.load(name)
    top = p.num_gpus * p.gpu_rated_power_w
    assert 0 < p.idle_power_w < top
    for b in (1, 2, 7, 16, 33, 64):
        assert p.idle_power_w < p.decode_power_w(b) <= top
    for n in (1, 50, 128, 700, 2048, 4096):
        assert p.idle_power_w < p.prefill_power_w(n) <= top
    # prefill of many tokens draws more than a small decode step
    assert p.prefill_power_w(2048) > p.decode_power_w(1)


def test_power_values():
    p70 = L.load("llama-2-70b-tp8-a100")
    assert p70.idle_power_w == 8 * 63 and not p70.power_modelled
    assert p70.decode_power_w(1) == pytest.approx(0.43492500 * 3200, abs=0.01)
    assert p70.prefill_power_w(4096) == 3200.0  # peak fraction 1.0024, capped at the rated power
    filled = p70.raw["power"]["decode_filled"]
    assert filled == [False] * 5 + [True] * 2
    p7 = L.load("llama-2-7b-a100")
    assert p7.power_modelled and p7.idle_power_w == 63
    # the same fraction of its own TDP as the 70B profile per GPU
    assert p7.decode_power_w(8) == pytest.approx(p70.decode_power_w(8) / 8, abs=0.01)
    assert p7.decode_power_w(1000) == p7.decode_power_w(64)  # held flat beyond the last point
    assert L.load("llama-2-7b-h100").decode_power_w(8) == pytest.approx(
        p7.decode_power_w(8) * 700 / 400, abs=0.01
    )


# ----------------------------------------------------------------- toy profile: evaluation rules


def test_toy_interpolation_and_formulas():
    p = L.load(toy())
    assert p.kv_capacity_tokens() == (2 * 100_000 * 0.9 - 50_000) // 1000 == 130
    assert p.kv_blocks_total(16) == 8
    # decode: table + ctx
    assert p.decode_time_s(4, 0) == pytest.approx(6e-3)
    assert p.decode_time_s(6, 500) == pytest.approx((8.0 + 0.002 * 500) / 1e3)
    # prefill: table + per token + per squared token
    assert p.prefill_time_s(150, 150**2) == pytest.approx(
        (20.0 + 0.01 * 150 + 0.001 * 150**2) / 1e3
    )
    # power: interpolated, flat outside
    assert p.prefill_power_w(100) == pytest.approx(200 + 400 * 99 / 199)
    assert p.decode_power_w(4) == pytest.approx(200 + 200 * 3 / 7)
    assert L.load(toy(overhead_ms=2.0)).decode_time_s(4, 0) == pytest.approx(8e-3)
    with pytest.raises(ValueError, match="context_tokens_total"):
        p.decode_time_s(4, -1)
    with pytest.raises(ValueError, match="batch_size=0"):
        p.decode_time_s(0, 0)


def test_toy_below_first_point_is_flat_and_linear_extrapolation():
    d = toy()
    d["decode"] = {"batch_sizes": [2, 4], "time_ms": [4.0, 6.0], "ms_per_context_token": 0.0}
    p = L.load(d)
    assert p.decode_time_s(1, 0) == pytest.approx(4e-3)
    q = L.load(toy(extrapolation="linear"))
    assert q.max_batch_size is None and q.max_batch_tokens is None
    q.check_max_num_seqs(10_000)
    assert q.decode_time_s(12, 0) == pytest.approx(14e-3)  # last slope 1 ms per request
    assert q.prefill_time_s(300, 0) == pytest.approx((50.0 + 3.0) / 1e3)
    assert q.decode_power_w(100) == 400.0  # power never extrapolated


# ----------------------------------------------------------------- validation


def _set(d, path, value):
    keys = path.split(".")
    for k in keys[:-1]:
        d = d[k]
    if value is _DEL:
        del d[keys[-1]]
    else:
        d[keys[-1]] = value


_DEL = object()


@pytest.mark.parametrize(
    "path, value, needle",
    [
        ("num_gpus", 0, "num_gpus"),
        ("num_gpus", 1.5, "num_gpus"),
        ("num_gpus", "8", "num_gpus"),
        ("kv_bytes_per_token", -5, "kv_bytes_per_token"),
        ("weights_bytes", _DEL, "weights_bytes"),
        ("weights_bytes", 10**12, "weights_bytes"),  # leaves no KV cache
        ("gpu_memory_utilization", 0.0, "gpu_memory_utilization"),
        ("gpu_memory_utilization", float("nan"), "gpu_memory_utilization"),
        ("gpu_rated_power_w", -1.0, "gpu_rated_power_w"),
        ("idle_power_w", float("nan"), "idle_power_w"),
        ("idle_power_w", 601.0, "idle_power_w"),  # above 2 GPUs x 300 W
        ("name", "", "name"),
        ("source", 3, "source"),
        ("extrapolation", "cubic", "extrapolation"),
        ("overhead_ms", -1.0, "overhead_ms"),
        ("kind", "transformer", "kind"),
        ("prefill", [1, 2], "prefill"),
        ("prefill.tokens", [1, 100, 100], "prefill.tokens"),
        ("prefill.tokens", [0, 100, 200], "prefill.tokens"),
        ("prefill.tokens", [1, 2.5, 200], "prefill.tokens"),
        ("prefill.time_ms", [5.0, 10.0], "prefill.time_ms"),
        ("prefill.time_ms", [5.0, float("nan"), 30.0], "prefill.time_ms"),
        ("prefill.time_ms", [5.0, -1.0, 30.0], "prefill.time_ms"),
        ("prefill.time_ms", [5.0, "x", 30.0], "prefill.time_ms"),
        ("prefill.ms_per_sq_token", _DEL, "prefill.ms_per_sq_token"),
        ("prefill.ms_per_token", -0.1, "prefill.ms_per_token"),
        ("decode.batch_sizes", [4, 2, 8], "decode.batch_sizes"),
        ("decode.batch_sizes", [1], "decode.batch_sizes"),
        ("decode.ms_per_context_token", float("inf"), "decode.ms_per_context_token"),
        ("power.decode_w", [200.0, 700.0], "power.decode_w"),  # above 2 x 300 W
        ("power.decode_w", [200.0], "power.decode_w"),
        ("power.prefill_w", [0.0, 600.0], "power.prefill_w"),
        ("power.decode_filled", [True], "power.decode_filled"),
        ("power.modelled", "yes", "power.modelled"),
        (
            "model_shape",
            {
                "layers": 2,
                "hidden": 8,
                "kv_heads": 2,
                "head_dim": 4,
                "params": 25_000,
                "dtype_bytes": 2,
            },
            "kv_bytes_per_token",
        ),
        (
            "model_shape",
            {
                "layers": 2,
                "hidden": 8,
                "kv_heads": 125,
                "head_dim": 1,
                "params": 1,
                "dtype_bytes": 2,
            },
            "weights_bytes",
        ),
    ],
)
def test_malformed_field_raises_naming_it(path, value, needle):
    d = copy.deepcopy(toy())
    _set(d, path, value)
    with pytest.raises(ValueError) as e:
        L.load(d)
    assert needle in str(e.value) and "dict" in str(e.value)  # the field and the origin


def test_model_shape_consistent_loads():
    shape = {
        "layers": 2,
        "hidden": 8,
        "kv_heads": 125,
        "head_dim": 1,
        "params": 25_000,
        "dtype_bytes": 2,
    }
    assert L.load(toy(model_shape=shape)).kv_bytes_per_token == 1000


def test_error_message_names_value_and_allowed():
    with pytest.raises(ValueError) as e:
        L.load(toy(num_gpus=0))
    msg = str(e.value)
    assert "num_gpus" in msg and "0" in msg and ">= 1" in msg and msg.startswith("dict:")


def test_missing_fields_listed():
    d = toy()
    del d["decode"], d["power"]
    with pytest.raises(ValueError, match=r"missing required field\(s\) \['decode', 'power'\]"):
        L.load(d)
    d = toy()
    del d["decode"]["time_ms"]
    with pytest.raises(ValueError, match=r"decode\.time_ms"):
        L.load(d)
    d = toy()
    del d["kind"]
    with pytest.raises(ValueError, match="'kind'.*'llm'"):
        L.load(d)


def test_batch_profiles_point_to_batch_loader(tmp_path):
    batch = {
        "name": "t",
        "model": "m",
        "device": "d",
        "source": "s",
        "batch_sizes": [1, 2],
        "latency_ms": [1.0, 2.0],
        "power_w": [1.0, 2.0],
        "idle_power_w": 0.0,
    }
    for d in (batch, {**batch, "kind": "table"}, {"kind": "linear"}):
        with pytest.raises(ValueError, match=r"batch_env\.profile\.load"):
            L.load(d)
    with pytest.raises(ValueError, match=r"batch_env\.profile\.load"):
        L.load("resnet50-v100")
    from batch_env.profiles import batch_profile as P

    with pytest.raises(TypeError, match="LLM profile"):
        L.load(P.load("resnet50-v100"))
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(batch))
    with pytest.raises(ValueError, match=r"batch\.json.*batch_env\.profile\.load"):
        L.load(path)


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(ValueError, match=r"no-such-profile.*llama-2-7b-a100"):
        L.load("no-such-profile")
    with pytest.raises(FileNotFoundError):  # the same error is a FileNotFoundError too
        L.load(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json: invalid JSON"):
        L.load(bad)
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        L.load(arr)
    with pytest.raises(TypeError):
        L.load(42)


def test_unknown_field_warns():
    with pytest.warns(UserWarning, match="colour"):
        L.load(toy(colour="blue"))
    L.load(toy(_comment="fine", notes={"a": 1}, hardware={"gpu": "x"}))


def test_input_dict_not_aliased():
    d = toy()
    p = L.load(d)
    d["decode"]["time_ms"][0] = 999.0
    assert p.decode_time_s(1, 0) == pytest.approx(5e-3)
    out = p.to_dict()
    out["name"] = "changed"
    assert p.name == "toy-llm"


def test_numpy_scalars_accepted_in_calls():
    np = pytest.importorskip("numpy")
    p = L.load("llama-2-7b-a100")
    assert p.decode_time_s(np.int64(8), np.int64(800)) == pytest.approx(p.decode_time_s(8, 800))
    p.check_max_num_seqs(np.int64(64))
    assert math.isfinite(p.prefill_power_w(np.int64(100)))


# ----------------------------------------------------------------- generator


def test_script_regenerates_shipped_json(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "llm_profiles", ROOT / "scripts" / "llm_profiles.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path), "--data", str(DATA)]) == 0
    written = sorted(p.name for p in tmp_path.glob("*.json"))
    assert written == [f"{n}.json" for n in SHIPPED]
    for name in written:
        shipped = (ROOT / "batch_env" / "profiles" / "llm" / name).read_text(encoding="utf-8")
        assert (tmp_path / name).read_text(encoding="utf-8") == shipped, name


def test_the_simulator_holds_the_published_vllm_throughput():
    """``scripts/validate_llm_published.py`` (docs/validation.md): vLLM's published
    offline throughput of Llama-2-7B on an A100 at six fixed lengths, rerun in
    LLMBatching-v2. The figures docs/validation.md states: every error within +6% to
    +21% (the simulator lacks vLLM's per-sequence CPU time), mean |error| about 12%; and
    the two fitted missing costs folded into the profile bring every one within 2%."""
    spec = importlib.util.spec_from_file_location(
        "validate_llm_published", ROOT / "scripts" / "validate_llm_published.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]

    def errors(profile):
        return [
            mod.simulate(
                p, o, pub, fig, profile=profile, num_prompts=1000, gpu_memory_utilization=None
            ).error
            for p, o, pub, fig in mod.PUBLISHED
        ]

    base = errors("llama-2-7b-a100")
    assert all(0.05 < e < 0.21 for e in base), base
    assert 0.10 < sum(abs(e) for e in base) / len(base) < 0.14
    fitted = errors(mod.adjusted_profile("llama-2-7b-a100", 12.65, 0.0863))
    assert max(abs(e) for e in fitted) < 0.02, fitted
