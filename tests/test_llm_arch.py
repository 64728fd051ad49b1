"""LLM profiles from a model's architecture and a GPU's specs (batch_env/profiles/llm_arch.py).

The figures checked against measurements come with their sources: the H200 measurements in
``data/h200_llm_ops.json`` (scripts/measure_llm_gpu.py, data/README.md), vidur's operator
profiles in ``data/vidur_llama_linear_ops_ms.csv``.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from conftest import load_script

import batch_env  # noqa: F401 (registers the envs)
from batch_env import llm_profile as L
from batch_env.profiles import llm_arch as A

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"

#: a small model whose costs are computed by hand below
TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1000,
}


def toy_gpu(**over):
    """A GPU with round figures: 1 TFLOP/s at its only clock, 1 GB/s, every efficiency 1,
    no floors, no all-reduce latency, power idle 10 + clock 5 + memory 20 + SM 40 W."""
    d = {
        "name": "toy",
        "device": "a toy GPU",
        "peak_tflops": {"bf16": 1.0},
        "peak_tflops_clock_mhz": 1000.0,
        "memory_bandwidth_gb_s": 1.0,
        "memory_bytes": 1_000_000_000,
        "tdp_w": 1000.0,
        "idle_power_w": 10.0,
        "sm_clock_mhz": {"min": 500.0, "max": 1000.0, "step": 10.0},
        "allreduce": {"latency_us": 0.0, "bus_bandwidth_gb_s": 1.0},
        "efficiency": {
            "eta_compute": 1.0,
            "eta_memory": 1.0,
            "gemm_floor_us": 0.0,
            "kernel_floor_us": 0.0,
            "eta_attention": 1.0,
            "eta_kv": 1.0,
        },
        "power_model": {"clock_w": 5.0, "mem_w": 20.0, "sm_w": 40.0, "alpha": 2.0},
        "sources": {"datasheet": "made up for the test"},
    }
    d.update(over)
    return d


# --------------------------------------------------------------------------- one small case by hand


def test_tiny_model_by_hand(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    arch = A.ModelArch.from_config(cfg)
    # per layer: QKV 256 x (4 + 2 x 2) x 64 + output 4 x 64 x 256 + MLP 3 x 256 x 512 + 2 norms
    per_layer = 256 * 8 * 64 + 4 * 64 * 256 + 3 * 256 * 512 + 2 * 256
    assert arch.params() == 2 * per_layer + 2 * 1000 * 256 + 256 == 1_692_928
    assert arch.kv_bytes_per_token() == 2 * 2 * 2 * 64 * 2 == 1024
    prof = L.load(A.build_profile(cfg, toy_gpu(), max_tokens=128, max_batch=16))
    # (1e9 x 0.9 - 1,692,928 x 2) // 1024
    assert prof.kv_capacity_tokens() == 875_599
    # decode of one request: every operator is memory-bound on this GPU (1 TFLOP/s, 1 GB/s),
    # so the time is the bytes moved / 1e9. Per layer: QKV 2 (256 + 512 x 256 + 512) = 263,680;
    # output 2 (256 + 256 x 256 + 256) = 132,096; gate-up 2 (256 + 1024 x 256 + 1024) =
    # 526,848; down 2 (512 + 256 x 512 + 256) = 263,680; norms 4 x 256 x 2 = 2,048; rotary
    # and KV write 2 x 6 x 64 x 2 + 512 = 2,048; SiLU 3 x 512 x 2 = 3,072: 1,193,472 a layer.
    # Final norm 1,024, LM head 2 (256 + 1000 x 256 + 1000) = 514,512: 2,902,480 bytes.
    # KV read: 1,000 tokens x 2 layers x 512 bytes = 1,024,000 bytes.
    assert prof.decode_time_s(1, 1000) == pytest.approx(
        (2 * 1_193_472 + 1_024 + 514_512 + 1_024_000) / 1e9, rel=1e-9
    )
    # a one-token prefill moves the same bytes, no KV read; attention 2 x 4 x 64 x 2 FLOPs
    assert prof.prefill_time_s(1, 1) == pytest.approx(2_902_480 / 1e9 + 1024 / 1e12, rel=1e-9)
    # power: memory-bound through and through, so u_mem = 1: 10 + 5 + 20 W, and the tensor
    # cores' share u_sm = 2,902,480 FLOPs / 1e12 over 3.93 ms = 7.4e-4 adds 40 x 7.4e-4 W
    flops = 2 * (2 * (512 * 256 + 256 * 256 + 1024 * 256 + 256 * 512) + 1000 * 256)
    u_sm = flops / 1e12 / prof.decode_time_s(1, 1000)
    assert prof.decode_power_w(1) == pytest.approx(35.0 + 40 * u_sm, abs=0.002)


def test_tiny_model_compute_bound_by_hand():
    gpu = toy_gpu(memory_bandwidth_gb_s=1e9)  # memory is free: every GEMM is compute-bound
    prof = L.load(A.build_profile(TINY, gpu, max_tokens=128, max_batch=16))
    # FLOPs of 100 tokens: 2 x 100 x (512 x 256 + 256 x 256 + 1024 x 256 + 256 x 512) a layer,
    # 2 layers, the LM head on one row 2 x 1000 x 256; attention 2 x 4 x 64 x 2 x 100^2
    flops = 2 * 2 * 100 * 589_824 + 2 * 1000 * 256 + 2 * 4 * 64 * 2 * 100**2
    assert prof.prefill_time_s(100, 100**2) == pytest.approx(flops / 1e12, rel=1e-6)
    # compute-bound: 10 + 5 + 40 W (u_sm = 1)
    assert prof.prefill_power_w(100) == pytest.approx(55.0, rel=1e-3)
    # at half the clock the compute-bound prefill takes twice as long, at a quarter of the
    # dynamic power (alpha 2)
    half = prof.at_clock(500)
    assert half.prefill_time_s(100, 100**2) == pytest.approx(2 * flops / 1e12, rel=1e-6)
    assert half.prefill_power_w(100) == pytest.approx(10 + 0.25 * (5 + 40), rel=1e-3)


def test_built_profile_loads_in_every_llm_env(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(TINY | {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8})
    )
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(A.build_profile(cfg, "h100-sxm", 2, max_tokens=4096, max_batch=256)))
    for env_id in (
        "batch_env/LLMBatching-v0",
        "batch_env/LLMBatching-v1",
        "batch_env/LLMBatching-v2",
    ):
        for clock in (None, 1005):
            env = gym.make(
                env_id,
                profile=str(path),
                clock_mhz=clock,
                horizon_requests=30,
                workload={"kind": "poisson", "rate_per_s": 20},
            )
            env.reset(seed=0)
            done, steps = False, 0
            while not done and steps < 10_000:
                _, r, term, trunc, info = env.step(env.action_space.n - 1)
                done, steps = term or trunc, steps + 1
            assert done and info["completed_total"] >= 30 if "completed_total" in info else done
            env.close()


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"num_attention_heads": None}, "missing required field 'num_attention_heads'"),
        ({"num_attention_heads": 0}, "'num_attention_heads' = 0 is invalid"),
        (
            {"num_key_value_heads": 3},
            "'num_key_value_heads' = 3 is invalid: must be a divisor of num_attention_heads = 4",
        ),
        ({"hidden_size": 250}, "'hidden_size' = 250 is invalid"),
        ({"vocab_size": -1}, "'vocab_size' = -1 is invalid"),
        ({"torch_dtype": "float32"}, "'torch_dtype' = 'float32' is invalid"),
        (
            {"num_local_experts": 4, "num_experts_per_tok": 9},
            "'num_experts_per_tok' = 9 is invalid",
        ),
        ({"model_type": "deepseek_v3"}, "multi-head latent attention"),
    ],
)
def test_bad_model_config_is_one_line(change, needle):
    cfg = {k: v for k, v in (TINY | change).items() if v is not None}
    with pytest.raises(ValueError) as ei:
        A.ModelArch.from_config(cfg)
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_tp_must_divide_the_model():
    arch = A.load_model_config("llama-3.1-70b")
    with pytest.raises(
        ValueError,
        match=r"--tp=3 is invalid for llama-3.1-70b: it must divide num_attention_heads = 64",
    ):
        arch.check_tp(3)
    q = A.load_model_config("qwen2.5-7b")  # 28 heads, 4 KV heads: TP 8 does not divide 28
    with pytest.raises(ValueError, match="--tp=8"):
        A.build_profile(q, "h100-sxm", 8)
    with pytest.raises(ValueError, match="does not fit on 1 x a100-80gb"):
        A.build_profile("llama-3.1-70b", "a100-80gb", 1)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"peak_tflops": {"fp8": 1}}, "'peak_tflops'"),
        ({"memory_bytes": 0}, "'memory_bytes'"),
        ({"efficiency": {"eta_compute": 0.5}}, "lacks 'efficiency.eta_memory'"),
        ({"sm_clock_mhz": {"min": 500}}, "'sm_clock_mhz'"),
        ({"tdp_w": -1}, "'tdp_w'"),
        ({"idle_power_w": 2000.0}, "'idle_power_w'=2000.0 is out of range"),
        (
            {"power_model": {"clock_w": 5.0, "mem_w": -20.0, "sm_w": 40.0, "alpha": 2.0}},
            "'power_model.mem_w'",
        ),
        (
            {"power_model": {"clock_w": 5.0, "mem_w": 20.0, "alpha": 2.0}},
            "lacks 'power_model.sm_w'",
        ),
        (
            {
                "power_model": {
                    "clock_w": 5.0,
                    "mem_w": 20.0,
                    "sm_w": 40.0,
                    "alpha": 2.0,
                    "mem_clock_share": 1.5,
                }
            },
            "'power_model.mem_clock_share'",
        ),
    ],
)
def test_bad_gpu_spec_is_one_line(change, needle):
    with pytest.raises(ValueError) as ei:
        A.load_gpu(toy_gpu(**change))
    assert needle in str(ei.value) and "\n" not in str(ei.value)
    bad = toy_gpu()
    bad["efficiency"] = dict(bad["efficiency"], eta_compute=1.5)
    with pytest.raises(ValueError, match="efficiency.eta_compute"):
        A.load_gpu(bad)
    d = toy_gpu()
    del d["tdp_w"]
    with pytest.raises(ValueError, match=r"missing required field\(s\) \['tdp_w'\]"):
        A.load_gpu(d)
    with pytest.raises(ValueError, match="--gpu='mi300x' is invalid"):
        A.load_gpu("mi300x")
    assert A.load_gpu("H100").name == "h100-sxm" and A.load_gpu("a100").name == "a100-80gb"


# --------------------------------------------------------------------------- the clock


@pytest.mark.parametrize("name", L.available())
def test_default_clock_changes_nothing(name):
    p = L.load(name)
    assert p.max_clock_mhz in (1410.0, 1980.0)
    q = p.at_clock(p.max_clock_mhz)
    for n in (1, 100, 512, 2048, min(4096, p.max_batch_tokens)):
        assert q.prefill_time_s(n, n * n) == pytest.approx(p.prefill_time_s(n, n * n), rel=1e-9)
        assert q.prefill_power_w(n) == pytest.approx(p.prefill_power_w(n), rel=1e-9)
    for b in (1, 16, min(64, p.max_batch_size)):
        assert q.decode_time_s(b, 1000 * b) == pytest.approx(p.decode_time_s(b, 1000 * b), rel=1e-9)
        assert q.decode_power_w(b) == pytest.approx(p.decode_power_w(b), rel=1e-9)


@pytest.mark.parametrize(
    "name", ["llama-2-7b-a100", "llama-3.1-8b-a100", "llama-3.1-8b-h100", "qwen2.5-7b-h200"]
)
def test_lower_clock_slows_prefill_far_more_than_decode(name):
    p = L.load(name)
    fmax = p.max_clock_mhz
    f = round(fmax * 0.5 / 15) * 15  # half the clock, on the 15 MHz grid
    q = p.at_clock(f)
    pre = q.prefill_time_s(4096, 4096**2) / p.prefill_time_s(4096, 4096**2)
    dec = q.decode_time_s(32, 32 * 1000) / p.decode_time_s(32, 32 * 1000)
    # prefill is compute-bound: close to the ratio of the clock to the clock it runs at by
    # default (the A100 model holds its maximum; the Hoppers sit at their power limit
    # below it, so their ratio is smaller)
    assert 1.3 < pre <= fmax / f + 1e-9
    assert dec - 1 < 0.25 * (pre - 1)  # decode is memory-bound: much less
    assert q.prefill_power_w(4096) < p.prefill_power_w(4096)
    assert q.decode_power_w(32) < p.decode_power_w(32)
    assert q.clock_mhz == f
    with pytest.raises(ValueError, match="already at"):
        q.at_clock(fmax)


def test_a100_prefill_slows_by_the_clock_ratio():
    p = L.load("llama-3.1-8b-a100")
    q = p.at_clock(1005)
    r = q.prefill_time_s(4096, 4096**2) / p.prefill_time_s(4096, 4096**2)
    assert r == pytest.approx(1410 / 1005, rel=0.05)


def test_clock_out_of_range_and_no_clock_model():
    p = L.load("llama-3.1-8b-h200")
    with pytest.raises(
        ValueError, match=r"clock_mhz=100 is out of range.*the SM clock range of h200"
    ):
        p.at_clock(100)
    d = L.load("llama-2-7b-a100").to_dict()
    del d["arch"]
    with pytest.raises(ValueError, match="has no clock model"):
        L.load(d).at_clock(1000)
    assert L.load(d).max_clock_mhz is None
    with pytest.raises(ValueError, match="clock_mhz=5000"):
        gym.make("batch_env/LLMBatching-v1", profile="llama-3.1-8b-h100", clock_mhz=5000)


def test_power_limit_holds_h200_prefill_below_its_maximum_clock():
    """Measured on the H200 (data/h200_llm_ops.json): long prefills ran at 1512-1571 MHz at
    the 700 W limit, decodes of one request at 1980 MHz well under it. The model's
    default clock reproduces both within 6%."""
    g = A.load_gpu("h200")
    cm = A.CostModel(A.load_model_config("llama-3.1-8b"), g, 1)
    pre = cm.token_ops(2048, 1)
    pre.compute_s += cm.attention_flop_s() * 2048**2
    assert A.default_clock(g, pre) == pytest.approx(1518, rel=0.06)
    dec = cm.token_ops(1, 1)
    dec.memory_s += cm.kv_read_s() * 2048
    assert A.default_clock(g, dec) == 1980.0
    assert A.power_w(g, dec, 1980.0, 1.0) == pytest.approx(450.4, rel=0.1)


def test_with_power_model_changes_power_not_timings_and_carries_to_the_clock():
    """The power model's constants at another value: power figures follow the model with
    them (a modelled profile becomes exactly the model's), timings at the default clock do
    not move, and at_clock of the result uses the new constants."""
    p = L.load("llama-3.1-8b-h100")
    pm = A.load_gpu("h100-sxm").power_model
    low = p.with_power_model(mem_w=0.7 * pm["mem_w"])
    spec = dict(A.load_gpu("h100-sxm").raw, power_model={**pm, "mem_w": 0.7 * pm["mem_w"]})
    rebuilt = L.load(A.build_profile("llama-3.1-8b", spec, 1))
    for b in (1, 16, 64):
        assert low.decode_power_w(b) == pytest.approx(rebuilt.decode_power_w(b), rel=1e-9)
        assert low.decode_power_w(b) < p.decode_power_w(b)
        assert low.decode_time_s(b, 1000 * b) == p.decode_time_s(b, 1000 * b)
    assert low.prefill_time_s(2048, 2048**2) == p.prefill_time_s(2048, 2048**2)
    # the exponent only acts below the maximum clock: alpha 3 saves more power at 990 MHz
    a1, a3 = (p.with_power_model(alpha=a) for a in (1.0, 3.0))
    assert a1.decode_power_w(32) == pytest.approx(p.decode_power_w(32), rel=1e-9)
    q1, q2, q3 = (x.at_clock(990.0).decode_power_w(32) for x in (a1, p, a3))
    assert q1 > q2 > q3
    assert p.decode_power_w(32) == L.load("llama-3.1-8b-h100").decode_power_w(32)  # unchanged
    with pytest.raises(ValueError, match=r"beta=1 is not a power-model constant"):
        p.with_power_model(beta=1)
    with pytest.raises(ValueError, match=r"field 'power_model.alpha'=-1"):
        p.with_power_model(alpha=-1)
    with pytest.raises(ValueError, match="at 990"):
        p.at_clock(990.0).with_power_model(alpha=3.0)


# --------------------------------------------------------------------------- against measurements


@pytest.fixture(scope="module")
def fits():
    return load_script("llm_gpu_specs").build(DATA)


def test_gpu_specs_regenerate_byte_for_byte(fits, tmp_path):
    specs, _ = fits
    assert sorted(specs) == A.available_gpus()
    for name, sp in specs.items():
        shipped = (ROOT / "batch_env" / "profiles" / "gpus" / f"{name}.json").read_text()
        assert json.dumps(sp, indent=2) + "\n" == shipped, name


def test_h200_whole_iterations_match_the_operator_model(fits):
    """The roofline model, with its efficiencies fitted on single operators, against whole
    iterations measured on the H200 (the measured decoder's own kernels; decode steps from
    CUDA graphs, prefills and mixed iterations eager): median error at most 4% (decode),
    7% (prefill), 11% (mixed); board power within a median 3%, clock 4%."""
    _, rep = fits
    e = rep["h200 e2e"]
    assert e["decode (cuda_graph), its own kernels"]["median_abs_pct"] <= 4.0
    assert e["prefill (eager), its own kernels"]["median_abs_pct"] <= 7.0
    assert e["mixed (eager), its own kernels"]["median_abs_pct"] <= 11.0
    assert rep["h200 power"]["power"]["median_abs_pct"] <= 3.0
    assert rep["h200 power"]["clock"]["median_abs_pct"] <= 4.0
    assert rep["h200 gemm"]["median_abs_pct"] <= 7.0
    # Mixtral-8x7B's expert layer (the model sums the active experts' GEMMs): median 4.3%
    assert rep["h200 moe"]["moe layer"]["median_abs_pct"] <= 5.0


def test_a100_h100_linear_operators_match_vidur(fits):
    """vidur's measured non-attention operators of Llama-2-7B and -70B at TP 1-8 (2,088
    points per GPU): the fitted model within a median 5% (A100) and 7% (H100)."""
    _, rep = fits
    assert rep["a100-80gb fit"]["vidur_linear_ops"]["median_abs_pct"] <= 5.0
    assert rep["h100-sxm fit"]["vidur_linear_ops"]["median_abs_pct"] <= 7.0


@pytest.mark.parametrize(
    "old, gpu", [("llama-2-7b-a100", "a100-80gb"), ("llama-2-7b-h100", "h100-sxm")]
)
def test_llama2_7b_consistency(old, gpu):
    """The model reproduces the shipped Llama-2-7B profiles' non-attention part (vidur's
    tables) within a median 10% over the batch sizes and token counts they cover (measured
    2.6% on the A100, 8.1% on the H100), nine points in ten within 20% (vidur's medians
    step up and down by up to 37% between neighbouring token counts, GEMM tiling, which a
    roofline does not follow); their attention differs as docs/llm_arch.md says: the old
    profiles assume 70% of the HBM bandwidth for KV reads, the model uses the 93.6%
    measured on the H200."""
    p_old = L.load(old)
    p_new = L.load(A.build_profile("llama-2-7b", gpu, 1, max_tokens=4096, max_batch=4096))
    errs = [
        abs(p_new.prefill_time_s(n, 0) / p_old.prefill_time_s(n, 0) - 1)
        for n in p_old.raw["prefill"]["tokens"]
    ]
    errs += [
        abs(p_new.decode_time_s(b, 0) / p_old.decode_time_s(b, 0) - 1)
        for b in p_old.raw["decode"]["batch_sizes"]
    ]
    errs.sort()
    assert statistics.median(errs) <= 0.10 and errs[int(0.9 * len(errs))] <= 0.20
    ratio = (
        p_old.raw["decode"]["ms_per_context_token"] / p_new.raw["decode"]["ms_per_context_token"]
    )
    assert ratio == pytest.approx(A.load_gpu(gpu).efficiency["eta_kv"] / 0.7, rel=1e-3)


def test_llama2_70b_measured_stack_is_slower_than_the_roofline():
    """splitwise-sim's Llama-2-70B TP8 A100 measurements (the shipped profile) take 45 ms a
    decode step where reading the weights takes about 9 ms at 70% of the HBM bandwidth: a
    stack far from the roofline (docs/llm_profiles.md). The model, of a vLLM-like stack,
    is 2-3x faster there; docs/llm_arch.md says so."""
    old = L.load("llama-2-70b-tp8-a100")
    new = L.load(A.build_profile("llama-2-70b", "a100-80gb", 8))
    r = old.decode_time_s(8, 8 * 576) / new.decode_time_s(8, 8 * 576)
    assert 2.0 < r < 3.5


# --------------------------------------------------------------------------- the command line


def test_cli_writes_a_profile_and_refuses_mistakes(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    out = tmp_path / "p.json"
    cmd = [sys.executable, "-m", "experiments.cli", "profile", "llm"]
    r = subprocess.run(
        cmd + ["--model-config", str(cfg), "--gpu", "h200", "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["path"] == str(out) and res["summary"]["kv_bytes_per_token"] == 1024
    assert L.load(out).name == "config-h200"
    for args, needle in (
        (["--model-config", str(cfg), "--gpu", "h200", "--out", str(out)], "exists"),
        (
            [
                "--model-config",
                str(cfg),
                "--gpu",
                "h200",
                "--tp",
                "3",
                "--out",
                str(tmp_path / "q.json"),
            ],
            "--tp=3",
        ),
        (["--model-config", str(tmp_path / "none.json"), "--gpu", "h200"], "does not exist"),
        (["--model-config", str(cfg), "--gpu", "tpu"], "--gpu='tpu' is invalid"),
        (
            ["--model-config", str(cfg), "--gpu", "h200", "--allreduce-gb-s", "0"]
            + ["--out", str(tmp_path / "r.json")],
            "allreduce_gb_s=0.0",
        ),
    ):
        r = subprocess.run(cmd + args, capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1, r.stderr


# --------------------------------------------------------------------------- published runs


def test_published_vllm_runs_reproduce():
    """``scripts/validate_llm_runs.py`` (docs/validation.md, "Architecture-built profiles
    against published runs"); the sources, with every figure, are in the script:

    * vLLM blog, "The State of FP8 KV-Cache and Attention Quantization in vLLM",
      2026-04-22: Llama-3.1-8B BF16 on one H100, vLLM v0.19.1 (V1); median ITL = 6.44 ms
      + 4.37e-5 ms per input token at concurrency 1; TTFT about 1.3 s at 32k and 3.55 s at
      65k input tokens (chart); Table 4: median ITL 15.18 ms, 672.6 s, 450.3 tokens/s.
    * vLLM's CI latency tests (Buildkite performance-benchmark builds 9523, 9555, 9515,
      late 2024): 8 prompts of 32 tokens, 128 output tokens, mean latency 1579.27 /
      997.542 / 833.421 ms (Llama-3-8B on A100 / H100 / H200), 3990.59 / 2444.47 / 2077.53
      (Llama-3-70B TP4), 3643.84 / 2326.97 / 1917.44 (Mixtral-8x7B TP2).
    * Argonne LLM-Inference-Bench (arXiv 2411.00136, argonne-lcf/LLM-Inference-Bench@4211f5d
      Plots/All_results.csv): vLLM 0.5.x on an H100, Llama-3-8B TP1, Llama-3-70B TP4,
      Qwen2-7B TP1, Llama-2-7B TP1, Qwen2-72B TP4, L/L tokens x b prompts, 100 latencies
      and one TTFT.
    * vLLM blog, "vLLM v0.6.0: 2.7x Throughput Improvement...", 2024-09-05 (chart): 500
      prompts of ~462 tokens, 16 or 256 out: 28.5 / 14.8 req/s (8B A100), 59 / 31 (8B
      H100), 25.3 / 15.4 (70B 4x H100).
    * vLLM blog, "Notes on vLLM v.s. DeepSpeed-FastGen", 2023-11-14: six throughputs.

    The V0-era runs carry vLLM V0's CPU terms, each from a source other than the runs it
    is used on (WukLab's per-sequence time; Argonne's batch-1 step against V1's fit), and,
    at TP > 1 on H100s and H200s, V0's all-reduce fitted on Argonne's Llama-2 runs at TP 2
    and 4 (60 runs, not figures).

    Held (measured): the 122 printed figures' median error 3.5% (at most 5%); 117 of them
    within 10%; every V1 figure within 8%; every 2023 figure within 6%; Llama-3-8B and
    Llama-2-7B at TP 1 on an H100 (39 Argonne runs) within 9%; Llama-3-70B and Qwen2-72B at
    TP 4 (40 runs) within 10.5%. Not held, as docs/validation.md says: Qwen2-7B with long
    outputs up to 14% fast, Mixtral on the A100 13% slow, and vLLM v0.6.0 on an H100
    10-42% slower than simulated."""
    mod = load_script("validate_llm_runs")
    figs = mod.run_all()
    printed = [abs(f.error) for f in figs if not f.chart_read]
    assert len(printed) == 122 and statistics.median(printed) <= 0.05
    assert sum(e <= 0.10 for e in printed) >= 117
    assert all(abs(f.error) <= 0.08 for f in figs if f.run.startswith("fp8"))
    assert all(0 < f.error <= 0.06 for f in figs if f.run == "v02-blog")
    tp1 = [
        f for f in figs if f.run == "argonne" and f.what.startswith(("llama-3.1-8b", "llama-2-7b"))
    ]
    assert len(tp1) == 40 and all(abs(f.error) <= 0.09 for f in tp1)
    tp4 = [f for f in figs if f.run == "argonne" and "TP4" in f.what]
    assert len(tp4) == 40 and all(abs(f.error) <= 0.105 for f in tp4)
    v060 = {f.what.split(":")[0]: f.error for f in figs if f.run == "v060-blog"}
    assert all(abs(e) <= 0.08 for w, e in v060.items() if "A100" in w)
    assert all(0.05 < e < 0.5 for w, e in v060.items() if "H100" in w)
    # the V0 CPU terms: without them the 2023 runs are 6-20% fast (docs/validation.md)
    assert max(f.error for f in mod.run_v02(cpu=False)) > 0.19
    assert mod.V0_MS_PER_ITERATION == pytest.approx(1.2635, abs=1e-3)


def test_v0_allreduce_is_the_fit_on_the_llama2_tp_runs():
    """V0's all-reduce (``V0_ALLREDUCE_US``, ``V0_ALLREDUCE_GB_S``: 18.47 us a call, 128.1
    GB/s) is the minimum of ``fit_v0_allreduce``'s loss on Argonne's Llama-2 runs at TP 2
    and 4 (60 runs that are not figures): a 10% step of either figure raises it; with it
    the runs' median errors are 4.4% / 5.4% / 3.9% (Llama-2-7B TP2 / TP4, Llama-2-70B TP4)
    where the GPU spec's all-reduce (8 us, 367 GB/s) leaves them 8-14% fast."""
    mod = load_script("validate_llm_runs")
    assert sum(len(r) for *_, r in mod.ARGONNE_TP_FIT) == 60

    loss = mod.calibration_loss
    best = (mod.V0_ALLREDUCE_US, mod.V0_ALLREDUCE_GB_S)
    at = loss(best)
    for step in ((1.1, 1.0), (0.9, 1.0), (1.0, 1.1), (1.0, 0.9)):
        assert loss((best[0] * step[0], best[1] * step[1])) > at
    fitted, spec = mod.calibration(), mod.calibration(None)
    for group in ("llama-2-7b TP2", "llama-2-7b TP4", "llama-2-70b TP4"):
        f = statistics.median(abs(x.error) for x in fitted if x.what.startswith(group))
        s = statistics.median(abs(x.error) for x in spec if x.what.startswith(group))
        assert f <= 0.06 and s >= 0.075 and f < s
        # the spec's all-reduce is too cheap: V0 at TP > 1 is slower than it gives
        assert statistics.mean(x.error for x in spec if x.what.startswith(group)) < -0.05


def test_allreduce_figures_can_be_replaced():
    base = A.build_profile("llama-3.1-70b", "h100-sxm", 4)
    slow = A.build_profile("llama-3.1-70b", "h100-sxm", 4, allreduce_us=18.47, allreduce_gb_s=128.1)
    # 2 all-reduces a layer x 80 layers: +10.47 us each at batch 1 (plus the bandwidth term)
    d0, d1 = base["decode"]["time_ms"][0], slow["decode"]["time_ms"][0]
    assert d1 - d0 == pytest.approx(160 * 10.47e-3, rel=0.05)
    assert slow["arch"]["gpu"]["allreduce"] == {"latency_us": 18.47, "bus_bandwidth_gb_s": 128.1}
    assert "18.47 us" in slow["citations"]["allreduce"]
    # TP 1 has no all-reduce: nothing changes
    one = A.build_profile("llama-3.1-8b", "h100-sxm", allreduce_us=50.0)
    assert (
        one["decode"]["time_ms"] == A.build_profile("llama-3.1-8b", "h100-sxm")["decode"]["time_ms"]
    )
    for kw, needle in (
        ({"allreduce_us": -1.0}, "allreduce_us=-1.0"),
        ({"allreduce_gb_s": 0.0}, "allreduce_gb_s=0.0"),
        ({"allreduce_gb_s": float("nan")}, "allreduce_gb_s=nan"),
    ):
        with pytest.raises(ValueError, match=re.escape(needle)):
            A.build_profile("llama-3.1-70b", "h100-sxm", 4, **kw)
