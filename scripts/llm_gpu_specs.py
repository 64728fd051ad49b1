"""Fit the roofline model's efficiencies and write the shipped GPU specs
(``batch_env/profiles/gpus/<name>.json``).

Run ``python scripts/llm_gpu_specs.py`` from the repository root (``--out DIR`` writes
elsewhere, ``--data DIR`` reads the tables from elsewhere; ``--report`` prints each fit's
errors). It reads two tables of ``data/`` (``data/README.md`` gives their sources):

* ``h200_llm_ops.json`` (measured by the developers on an H200): the H200's GEMM,
  attention and kernel-floor efficiencies, and its power model;
* ``vidur_llama_linear_ops_ms.csv`` (microsoft/vidur's operator profiles): the A100's
  and H100's GEMM and elementwise efficiencies (their attention terms are the H200's,
  as nothing measured is shipped for them).

The fitted model is :mod:`batch_env.profiles.llm_arch` (its docstring states it); every
fit is least squares on log times (relative error), with scipy. The JSON files are
self-contained: the data are not needed at run time. ``tests/test_llm_arch.py``
regenerates them and checks they are byte-identical.

Fits, per GPU
    GEMM (``eta_compute``, ``eta_memory``, ``gemm_floor_us``): H200: every measured GEMM
    (35 weight shapes x 14 token counts); A100/H100: vidur's non-attention operators per
    iteration of Llama-2-7B (TP 1, 2, 4, 8) and Llama-2-70B (TP 1, 2, 4, 8), with the
    elementwise kernels' floor (``kernel_floor_us``) fitted jointly.
    Attention (H200): causal prefill ``eta_attention`` on the prefill kernels of 512
    tokens and more (shorter ones are bound by the eager launch floor, which is not the
    GPU's); decode ``eta_kv`` on the decode kernels of at least 8 MB of KV.
    Kernel floor (H200): the whole decode steps replayed from CUDA graphs (three models,
    b = 1..256, contexts 512 and 2048), given every other term; this is the floor of a
    small kernel on the GPU itself, without the host's launch cost.
    Power (H200): ``mem_w`` and ``sm_w`` on the sustained power windows (the GEMM, the
    copy, the prefills, decodes and mixed iterations), matching the measured board power
    and SM clock; ``clock_w`` is measured (:data:`CLOCK_W`), ``alpha`` assumed
    (:data:`ALPHA`). A100: splitwise-sim's constant model read as the spec's sources say;
    H100: the H200's model with its own idle power.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from batch_env.profiles import llm_arch  # noqa: E402

OPS = "h200_llm_ops.json"
VIDUR = "vidur_llama_linear_ops_ms.csv"

#: Datasheet figures and their sources (efficiency and power_model are fitted below).
SPECS: dict[str, dict[str, Any]] = {
    "a100-80gb": {
        "name": "a100-80gb",
        "device": "NVIDIA A100-SXM4-80GB",
        "peak_tflops": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0},
        "peak_tflops_clock_mhz": 1410.0,
        "memory_bandwidth_gb_s": 2039.0,
        "memory_bytes": 80_000_000_000,
        "tdp_w": 400.0,
        "idle_power_w": 63.0,
        "sm_clock_mhz": {"min": 210.0, "max": 1410.0, "step": 15.0},
        "sm_count": 108,
        "allreduce": {"latency_us": 10.0, "bus_bandwidth_gb_s": 235.0},
        "sources": {
            "datasheet": "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web): "
            "A100 80GB SXM: BF16/FP16 Tensor Core 312 TFLOPS dense (624 with sparsity), TF32 156, GPU memory "
            "80GB HBM2e, memory bandwidth 2,039 GB/s, max TDP 400W; NVIDIA Ampere architecture whitepaper: "
            "108 SMs, 1024 dense FP16 FMA/clk/SM, so 312 TFLOPS at the 1410 MHz boost clock",
            "sm_clock_mhz": "nvidia-smi -q -d SUPPORTED_CLOCKS on an A100: 210..1410 MHz in 15 MHz steps",
            "idle_power_w": "63 W: splitwise-sim's constant power model (Mutinifni/splitwise-sim @3780880 "
            "configs/power_model/constant.yaml, idle_power a100-80gb); nvidia-smi idle readings of 54-62 W "
            "are public",
            "allreduce": "modelled: 10 us a call (an assumption for a CUDA-graph-captured custom all-reduce "
            "at TP <= 8; NCCL's eager all-reduce of 32 KB takes 44 us on 8 A100s in nccl-tests) + "
            "2 (tp-1)/tp x bytes / 235 GB/s (nccl-tests bus bandwidth of a 16 GiB all-reduce on 8 "
            "A100-SXM4 over NVSwitch, stas00/ml-engineering network/README.md)",
            "power_model": "modelled, not measured: splitwise-sim's constant model (idle 63 W, token 250 W, "
            "prompt 400 W) read as: a memory-bound decode draws 250 W at 1410 MHz, a compute-bound prefill "
            "the 400 W limit; alpha and the clock term as the H200's (fitted)",
        },
    },
    "a100-40gb": {
        "name": "a100-40gb",
        "device": "NVIDIA A100-SXM4-40GB",
        "peak_tflops": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0},
        "peak_tflops_clock_mhz": 1410.0,
        "memory_bandwidth_gb_s": 1555.0,
        "memory_bytes": 40_000_000_000,
        "tdp_w": 400.0,
        "idle_power_w": 63.0,
        "sm_clock_mhz": {"min": 210.0, "max": 1410.0, "step": 15.0},
        "sm_count": 108,
        "allreduce": {"latency_us": 10.0, "bus_bandwidth_gb_s": 235.0},
        "sources": {
            "datasheet": "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web): "
            "A100 40GB SXM: BF16/FP16 Tensor Core 312 TFLOPS dense (624 with sparsity), TF32 156, GPU memory "
            "40GB HBM2, memory bandwidth 1,555 GB/s, max TDP 400W; the same GA100 die as the A100 80GB (108 "
            "SMs, 312 TFLOPS at the 1410 MHz boost clock)",
            "sm_clock_mhz": "the A100's: 210..1410 MHz in 15 MHz steps (nvidia-smi -q -d SUPPORTED_CLOCKS)",
            "idle_power_w": "assumed the A100 80GB's 63 W (splitwise-sim's constant power model); public "
            "nvidia-smi idle readings of A100-SXM4-40GB boards are 50-60 W",
            "allreduce": "the A100 80GB's (the same NVLink 3 and NVSwitch)",
            "power_model": "the A100 80GB's (the same die and 400 W limit); modelled, not measured on a 40GB "
            "board, whose HBM2 draws somewhat less than the 80GB's HBM2e",
        },
    },
    "h100-sxm": {
        "name": "h100-sxm",
        "device": "NVIDIA H100-SXM5-80GB",
        "peak_tflops": {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7},
        "peak_tflops_clock_mhz": 1830.0,
        "memory_bandwidth_gb_s": 3352.0,
        "memory_bytes": 80_000_000_000,
        "tdp_w": 700.0,
        "idle_power_w": 75.0,
        "sm_clock_mhz": {"min": 345.0, "max": 1980.0, "step": 15.0},
        "sm_count": 132,
        "allreduce": {"latency_us": 8.0, "bus_bandwidth_gb_s": 367.0},
        "sources": {
            "datasheet": "NVIDIA H100 Tensor Core GPU datasheet (2023), H100 SXM: BF16/FP16 Tensor Core 1,979 "
            "TFLOPS with sparsity (989.4 dense), FP8 3,958 with sparsity, GPU memory 80GB, memory "
            "bandwidth 3.35TB/s (2619 MHz x 5120-bit = 3352 GB/s), max TDP up to 700W; the H100 "
            "whitepaper's tensor figures are at 1830 MHz (132 SMs x 4096 FLOP/clk x 1.83 GHz = 989.4)",
            "sm_clock_mhz": "nvidia-smi's supported clocks on an H100 SXM: 345..1980 MHz in 15 MHz steps "
            "(110 values)",
            "idle_power_w": "75 W: splitwise-sim's constant power model (configs/power_model/constant.yaml, "
            "idle_power h100-80gb); nvidia-smi idle readings of 64-73 W are public",
            "allreduce": "modelled: 8 us a call (llm-analysis's intra-node minimum message latency, an "
            "assumption) + 2 (tp-1)/tp x bytes / 367 GB/s (nccl-tests ring bus bandwidth of a 16 GiB "
            "all-reduce on 8 H200s, the same NVLink 4; stas00/ml-engineering network/README.md)",
            "power_model": "the H200's fitted model (the same GH100 die and 700 W limit), with the H100's "
            "idle power; modelled, not measured on an H100",
        },
    },
    "h200": {
        "name": "h200",
        "device": "NVIDIA H200 (SXM, 141 GB HBM3e)",
        "peak_tflops": {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7},
        "peak_tflops_clock_mhz": 1830.0,
        "memory_bandwidth_gb_s": 4800.0,
        "memory_bytes": 141_000_000_000,
        "tdp_w": 700.0,
        "idle_power_w": 82.0,
        "sm_clock_mhz": {"min": 345.0, "max": 1980.0, "step": 15.0},
        "sm_count": 132,
        "allreduce": {"latency_us": 8.0, "bus_bandwidth_gb_s": 367.0},
        "sources": {
            "datasheet": "NVIDIA H200 product page / datasheet: 141GB HBM3e at 4.8TB/s, up to 700W, the H100 "
            "SXM's tensor rates (989.4 dense BF16 TFLOPS at 1830 MHz); measured here (data/h200_llm_ops.json): "
            "132 SMs, 150,109,880,320 bytes as CUDA reports them, 700 W power limit (settable 200-700 W), "
            "an 8192^3 bf16 product at 738 TFLOP/s and a device copy at 4,288 GB/s (read + write)",
            "sm_clock_mhz": "measured here: NVML's supported graphics clocks at the 3201 MHz memory clock, "
            "345..1980 MHz in 15 MHz steps",
            "idle_power_w": "measured here: 82 W at rest (SM clock 345 MHz), NVML; right after load, with the "
            "clock still at 1980 MHz, 125 W (the power model's clock term)",
            "allreduce": "modelled: 8 us a call (an assumption) + 2 (tp-1)/tp x bytes / 367 GB/s (nccl-tests "
            "ring bus bandwidth of a 16 GiB all-reduce on 8 H200s; stas00/ml-engineering network/README.md)",
            "power_model": "fitted on the board power and SM clock measured here over sustained iterations "
            "(data/h200_llm_ops.json 'power')",
        },
    },
    "b200": {
        "name": "b200",
        "device": "NVIDIA B200 (HGX, 1000 W)",
        "peak_tflops": {"bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0, "tf32": 1100.0},
        "peak_tflops_clock_mhz": 1860.0,
        "memory_bandwidth_gb_s": 8000.0,
        "memory_bytes": 192_000_000_000,
        "tdp_w": 1000.0,
        "idle_power_w": 117.0,
        "sm_clock_mhz": {"min": 345.0, "max": 1980.0, "step": 15.0},
        "sm_count": 148,
        "allreduce": {"latency_us": 8.0, "bus_bandwidth_gb_s": 734.0},
        "sources": {
            "datasheet": "NVIDIA DGX B200 datasheet: 8 B200 GPUs, 64 TB/s HBM3e bandwidth (8 TB/s each), FP8 "
            "training 72 PFLOPS (sparse; 4.5 dense per GPU), 1,440 GB of GPU memory (180 GB each, as NVIDIA "
            "rounds it; the 8 HBM3e stacks hold 192 GB, which is what vLLM sizes its cache against); NVIDIA's HGX "
            "B200 figures at 1,000 W (as tabulated by glennklockwood.com/garden/processors/B200): BF16/FP16 "
            "2,250 dense TFLOPS, FP8 4,500, TF32 1,100; 148 SMs, a 1.86 GHz tensor clock for those rates and "
            "a 1.98 GHz boost (hmc-tech.com's B200 page, third-party); ML.ENERGY's B200 servers: 1,000 W a GPU",
            "sm_clock_mhz": "assumed: up to the 1.98 GHz boost in 15 MHz steps from the Hopper GPUs' 345 MHz "
            "minimum (no published supported-clocks list found)",
            "idle_power_w": "assumed: the H200's measured 82 W scaled by the power limit (1000/700); no "
            "published idle reading found",
            "allreduce": "modelled: 8 us a call (as the Hoppers') + 2 (tp-1)/tp x bytes / 734 GB/s (the "
            "H200's nccl-tests bus bandwidth, 367 GB/s, doubled with NVLink 5's 1.8 TB/s against NVLink 4's "
            "900 GB/s; an assumption)",
            "power_model": "modelled, not measured: the H200's fitted model with every constant scaled by the "
            "power limit (1000/700)",
        },
    },
}
#: The power model's clock term, measured on the H200: 125 W at rest with the SM clock at
#: 1980 MHz right after load, against 82 W at rest at 345 MHz.
CLOCK_W = 125.0 - 82.0
#: Dynamic power's exponent in the SM clock: an assumption between CMOS dynamic power's
#: linear (fixed voltage) and cubic (voltage proportional to clock) limits; the measured
#: windows (two clock regimes only) do not determine it.
ALPHA = 2.0
#: GPUs with no operator profile here: the sibling whose fitted efficiencies they take
DERIVED = {"a100-40gb": "a100-80gb", "b200": "h100-sxm"}
LLAMA2 = {
    "llama-2-7b": llm_arch.load_model_config("llama-2-7b"),
    "llama-2-70b": llm_arch.load_model_config("llama-2-70b"),
}


def _spec(name: str, eff: dict[str, float], pm: dict[str, float]) -> llm_arch.GPUSpec:
    d = dict(SPECS[name], efficiency=eff, power_model=pm)
    return llm_arch.load_gpu(d)


def _rel(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    e = pred / meas - 1.0
    return {
        "n": int(len(e)),
        "median_abs_pct": round(float(np.median(np.abs(e))) * 100, 2),
        "p90_abs_pct": round(float(np.percentile(np.abs(e), 90)) * 100, 2),
        "max_abs_pct": round(float(np.max(np.abs(e))) * 100, 2),
    }


# --------------------------------------------------------------------------- H200


def fit_h200_gemm(ops: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    rows = ops["gemm"]
    m = np.array([r["m"] for r in rows], float)
    n = np.array([r["n"] for r in rows], float)
    k = np.array([r["k"] for r in rows], float)
    t = np.array([r["ms"] for r in rows]) * 1e-3
    g = SPECS["h200"]
    peak = g["peak_tflops"]["bf16"] * 1e12 * g["sm_clock_mhz"]["max"] / g["peak_tflops_clock_mhz"]
    bw = g["memory_bandwidth_gb_s"] * 1e9
    F, B = 2 * m * n * k, 2 * (m * k + n * k + m * n)

    def model(p: np.ndarray) -> np.ndarray:
        ec, em, fl = p
        return fl * 1e-6 + np.maximum(F / (peak * ec), B / (bw * em))

    r = least_squares(
        lambda p: np.log(model(p) / t), [0.7, 0.85, 5.0], bounds=([0.05, 0.05, 0], [1, 1, 100])
    )
    ec, em, fl = r.x
    return {"eta_compute": ec, "eta_memory": em, "gemm_floor_us": fl}, _rel(model(r.x), t)


def fit_h200_attention(ops: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    g = SPECS["h200"]
    peak = g["peak_tflops"]["bf16"] * 1e12 * g["sm_clock_mhz"]["max"] / g["peak_tflops_clock_mhz"]
    bw = g["memory_bandwidth_gb_s"] * 1e9
    pre = [r for r in ops["attn_prefill"] if r["p"] >= 512]
    F = np.array([2 * r["hq"] * 128 * r["b"] * r["p"] ** 2 for r in pre], float)
    t = np.array([r["ms"] for r in pre]) * 1e-3
    floor = float(np.median([r["ms"] for r in ops["attn_prefill"] if r["p"] <= 256])) * 1e-3

    def mp(p: np.ndarray) -> np.ndarray:
        return floor + F / (peak * p[0])

    rp = least_squares(lambda p: np.log(mp(p) / t), [0.6], bounds=([0.05], [1]))
    dec = [r for r in ops["attn_decode"] if r["b"] * r["c"] * r["hk"] * 128 * 4 >= 8e6]
    Bk = np.array([r["b"] * r["c"] * r["hk"] * 128 * 4 for r in dec], float)
    td = np.array([r["ms"] for r in dec]) * 1e-3
    floor_d = (
        float(np.median([r["ms"] for r in ops["attn_decode"] if r["b"] * r["c"] <= 512])) * 1e-3
    )

    def md(p: np.ndarray) -> np.ndarray:
        return floor_d + Bk / (bw * p[0])

    rd = least_squares(lambda p: np.log(md(p) / td), [0.9], bounds=([0.05], [1]))
    eff = {"eta_attention": rp.x[0], "eta_kv": rd.x[0]}
    rep = {
        "prefill": _rel(mp(rp.x), t),
        "decode": _rel(md(rd.x), td),
        "eager_floor_prefill_us": round(floor * 1e6, 2),
        "eager_floor_decode_us": round(floor_d * 1e6, 2),
    }
    return eff, rep


def _measured_structure(cm: llm_arch.CostModel, r: dict[str, Any], floor_s: float) -> float:
    """One iteration of the measured script's decoder (scripts/measure_llm_gpu.py's
    Decoder, one rank, no all-reduce, no rotary), in its own kernels: per layer RMSNorm,
    QKV, the K/V (prefill) or cache (decode) copies, attention, the output copy (prefill),
    output projection, add, RMSNorm, gate-up, SiLU, multiply, down, add; the final norm and
    the LM head on one row per sequence. Eight to nine small kernels of ``floor_s`` each."""
    a, w = cm.arch, cm.w
    h, L = a.hidden, a.layers
    kind = r["kind"]
    pre = r["b"] * r["p"] if kind == "prefill" else r.get("chunk", 0)
    dec = r["b"] if kind != "prefill" else 0
    m = pre + dec
    rows = r["b"] if kind != "mixed" else r["b"] + 1
    layer = llm_arch.IterationCost()
    cm._gemm(layer, m, (cm.hq + 2 * cm.hk) * cm.d, h)
    cm._gemm(layer, m, h, cm.hq * cm.d)
    cm._gemm(layer, m, 2 * cm.inter, h)
    cm._gemm(layer, m, h, cm.inter)
    nbytes = (
        2 * 2 * m * h * w + 2 * 3 * m * h * w + 5 * m * cm.inter * w
    )  # norms, adds, SiLU, multiply
    nbytes += 2 * m * cm.kv_layer_token + (2 * pre * cm.hq * cm.d * w)  # K/V copies, output copy
    layer.memory_s += nbytes / (cm.bw * cm.eta_m)
    layer.floor_s += 9 * floor_s + (floor_s if kind == "mixed" else 0.0)
    c = layer.times(L)
    if pre:
        p = r["p"] if kind == "prefill" else pre
        nseq = r["b"] if kind == "prefill" else 1
        c.compute_s += cm.attention_flop_s() * nseq * p * p
    if dec:
        c.memory_s += cm.kv_read_s() * dec * r["c"]
    cm._gemm(c, rows, cm.vocab, h)
    c.floor_s += floor_s
    return c.time_s(1.0)


MODELS = {
    "llama-3.1-8b/tp1": ("llama-3.1-8b", 1),
    "llama-2-7b/tp1": ("llama-2-7b", 1),
    "llama-3.1-70b/tp8": ("llama-3.1-70b", 8),
}


def fit_kernel_floor(
    ops: dict[str, Any], eff: dict[str, float], pm: dict[str, float]
) -> tuple[float, dict[str, Any]]:
    rows = [r for r in ops["e2e"] if r["kind"] == "decode" and r["mode"] == "cuda_graph"]
    t = np.array([r["ms"] for r in rows]) * 1e-3

    def pred(fl: float) -> np.ndarray:
        g = _spec("h200", dict(eff, kernel_floor_us=fl), pm)
        out = []
        for r in rows:
            name, tp = MODELS[r["model"]]
            cm = llm_arch.CostModel(llm_arch.load_model_config(name), g, tp, comm=False)
            out.append(_measured_structure(cm, r, fl * 1e-6))
        return np.array(out)

    res = least_squares(lambda p: np.log(pred(p[0]) / t), [3.0], bounds=([0.0], [50.0]))
    fl = float(res.x[0])
    p = pred(fl)
    return fl, {"decode_cuda_graph": _rel(p, t)}


def fit_power(
    ops: dict[str, Any], eff: dict[str, float]
) -> tuple[dict[str, float], dict[str, Any]]:
    """Board power and clock of the sustained windows against the power model."""
    spec = SPECS["h200"]
    wins = ops["power"]

    def costs(pm: dict[str, float]) -> list[tuple[llm_arch.GPUSpec, llm_arch.IterationCost]]:
        g = _spec("h200", eff, pm)
        out = []
        for wdw in wins:
            if wdw["kind"] == "gemm":
                c = llm_arch.IterationCost()
                c.compute_s = 2 * 8192**3 / (g.peak_flops(g.max_clock_mhz) * eff["eta_compute"])
                c.memory_s = 0.0
            elif wdw["kind"] == "copy":
                c = llm_arch.IterationCost()
                c.memory_s = 2 * wdw["bytes"] / (g.memory_bandwidth_gb_s * 1e9 * eff["eta_memory"])
            else:
                name, tp = MODELS[wdw["model"]]
                cm = llm_arch.CostModel(llm_arch.load_model_config(name), g, tp, comm=False)
                c = _iteration(cm, wdw)
            out.append((g, c))
        return out

    meas_p = np.array([w["energy_power_w"] for w in wins])
    meas_f = np.array([w["sm_clock_mhz_mean"] for w in wins])

    def pm_of(p: np.ndarray) -> dict[str, float]:
        return {"clock_w": CLOCK_W, "mem_w": p[0], "sm_w": p[1], "alpha": ALPHA}

    def resid(p: np.ndarray) -> np.ndarray:
        rp, rf = [], []
        for g, c in costs(pm_of(p)):
            f0 = llm_arch.default_clock(g, c)
            rp.append(llm_arch.power_w(g, c, f0, 1.0))
            rf.append(f0)
        return np.concatenate([np.log(np.array(rp) / meas_p), np.log(np.array(rf) / meas_f)])

    r = least_squares(resid, [350.0, 900.0], bounds=([0, 0], [1000, 3000]))
    pm = pm_of(r.x)
    rp, rf = [], []
    for g, c in costs(pm):
        f0 = llm_arch.default_clock(g, c)
        rp.append(llm_arch.power_w(g, c, f0, 1.0))
        rf.append(f0)
    table = [
        {
            "what": w["what"],
            "power_w": round(w["energy_power_w"], 1),
            "model_w": round(p, 1),
            "clock_mhz": round(w["sm_clock_mhz_mean"]),
            "model_mhz": round(f),
        }
        for w, p, f in zip(wins, rp, rf, strict=True)
    ]
    del spec
    return pm, {
        "power": _rel(np.array(rp), meas_p),
        "clock": _rel(np.array(rf), meas_f),
        "windows": table,
    }


def _iteration(cm: llm_arch.CostModel, r: dict[str, Any]) -> llm_arch.IterationCost:
    """The roofline cost (vLLM's operator structure) of one measured e2e iteration."""
    L = cm.arch.layers
    if r["kind"] == "prefill":
        b, p = r["b"], r["p"]
        c = cm.token_ops(b * p, b)
        c.floor_s += cm.k_floor * L
        c.compute_s += cm.attention_flop_s() * b * p * p
        return c
    if r["kind"] == "decode":
        b, ctx = r["b"], r["c"]
        c = cm.token_ops(b, b)
        c.floor_s += cm.k_floor * L
        c.memory_s += cm.kv_read_s() * b * ctx
        return c
    ch, b, ctx = r["chunk"], r["b"], r["c"]
    c = cm.token_ops(ch + b, b + 1)
    c.floor_s += cm.k_floor * L
    c.compute_s += cm.attention_flop_s() * ch * ch
    c.memory_s += cm.kv_read_s() * b * ctx
    return c


def check_e2e(ops: dict[str, Any], g: llm_arch.GPUSpec) -> dict[str, Any]:
    """Whole measured iterations against the model of the measured decoder's own kernels
    (prefill and mixed eager, with the eager kernel floor; decode from CUDA graphs), and
    against the profile's model (vLLM's fused kernels, one rank, no all-reduce)."""
    eager_floor = (
        float(np.median([r["ms"] for r in ops["elementwise"] if r["m"] <= 64])) * 1e-6 * 1e3
    )
    out: dict[str, Any] = {"eager_kernel_floor_us": round(eager_floor * 1e6, 2)}
    for kind, mode in (("prefill", "eager"), ("decode", "cuda_graph"), ("mixed", "eager")):
        rows = [r for r in ops["e2e"] if r["kind"] == kind and r["mode"] == mode]
        same, prof = [], []
        for r in rows:
            name, tp = MODELS[r["model"]]
            cm = llm_arch.CostModel(llm_arch.load_model_config(name), g, tp, comm=False)
            fl = cm.k_floor if mode == "cuda_graph" else eager_floor
            same.append(_measured_structure(cm, r, fl))
            prof.append(_iteration(cm, r).time_s(1.0))
        t = np.array([r["ms"] * 1e-3 for r in rows])
        out[f"{kind} ({mode}), its own kernels"] = _rel(np.array(same), t)
        out[f"{kind} ({mode}), vLLM's kernels"] = _rel(np.array(prof), t)
        out[f"{kind} rows"] = [
            {k: r[k] for k in r if k in ("model", "b", "p", "c", "chunk")}
            | {"ms": round(r["ms"], 3), "own_ms": round(a * 1e3, 3), "vllm_ms": round(p * 1e3, 3)}
            for r, a, p in zip(rows, same, prof, strict=True)
        ]
    return out


def check_moe(ops: dict[str, Any], g: llm_arch.GPUSpec) -> dict[str, Any]:
    """Mixtral-8x7B's expert layer measured on the H200 (a loop over the active experts:
    gate-up GEMM, SiLU, multiply, down GEMM, eager) against the model's sum over the
    active experts of their GEMMs on their tokens, with the measured number of active
    experts; the host launches the two elementwise kernels while the GPU runs the long
    GEMMs, so they cost the GPU's own kernel floor, not the eager launch's."""
    cm = llm_arch.CostModel(llm_arch.load_model_config("mixtral-8x7b"), g, 1)
    h, inter = cm.arch.hidden, cm.inter
    pred, meas, rows = [], [], []
    for r in ops["moe"]:
        c = llm_arch.IterationCost()
        for n in r["tokens_per_expert"]:
            if n:
                cm._gemm(c, n, 2 * inter, h)
                cm._gemm(c, n, h, inter)
                c.floor_s += 2 * cm.k_floor
                c.memory_s += 5 * n * inter * cm.w / (cm.bw * cm.eta_m)
        t = c.time_s(1.0)
        pred.append(t)
        meas.append(r["ms"] * 1e-3)
        rows.append({"tokens": r["tokens"], "ms": round(r["ms"], 3), "model_ms": round(t * 1e3, 3)})
    return {"moe layer": _rel(np.array(pred), np.array(meas)), "moe rows": rows}


# --------------------------------------------------------------------------- A100, H100


def read_vidur(path: Path) -> list[dict[str, Any]]:
    with path.open() as fh:
        lines = [ln for ln in fh if not ln.startswith("#")]
    return [
        {
            "model": r["model"],
            "gpu": r["gpu"],
            "tp": int(r["tensor_parallel"]),
            "m": int(r["num_tokens"]),
            "ms": float(r["linear_ops_ms"]),
        }
        for r in csv.DictReader(lines)
    ]


def _vidur_model(cm: llm_arch.CostModel, m: int) -> float:
    """vidur's non-attention operators of one iteration of m tokens: per layer input and
    post-attention RMSNorm, QKV, rotary, output, gate-up, SiLU-and-multiply, down and the
    residual adds; no LM head, no all-reduce, no attention."""
    c = llm_arch.IterationCost()
    h, w = cm.arch.hidden, cm.w
    cm._gemm(c, m, (cm.hq + 2 * cm.hk) * cm.d, h)
    cm._gemm(c, m, h, cm.hq * cm.d)
    cm._gemm(c, m, 2 * cm.inter, h)
    cm._gemm(c, m, h, cm.inter)
    cm._elementwise(c, 4 * m * h * w, kernels=2)
    cm._elementwise(c, 2 * m * (cm.hq + cm.hk) * cm.d * w, kernels=1)
    cm._elementwise(c, 3 * m * cm.inter * w, kernels=1)
    cm._elementwise(c, 3 * m * h * w, kernels=2)
    return c.times(cm.arch.layers).time_s(1.0)


def fit_vidur(
    rows: list[dict[str, Any]], gpu: str, base: dict[str, float], pm: dict[str, float]
) -> tuple[dict[str, float], dict[str, Any]]:
    vid = "a100-80gb" if gpu == "a100-80gb" else "h100-80gb"
    sel = [r for r in rows if r["gpu"] == vid]
    t = np.array([r["ms"] for r in sel]) * 1e-3

    def pred(p: np.ndarray) -> np.ndarray:
        eff = dict(
            base, eta_compute=p[0], eta_memory=p[1], gemm_floor_us=p[2], kernel_floor_us=p[3]
        )
        g = _spec(gpu, eff, pm)
        cms = {}
        out = []
        for r in sel:
            key = (r["model"], r["tp"])
            if key not in cms:
                cms[key] = llm_arch.CostModel(LLAMA2[r["model"]], g, r["tp"])
            out.append(_vidur_model(cms[key], r["m"]))
        return np.array(out)

    res = least_squares(
        lambda p: np.log(pred(p) / t),
        [0.7, 0.8, 5.0, 3.0],
        bounds=([0.05, 0.05, 0, 0], [1, 1, 100, 100]),
    )
    eff = dict(
        base,
        eta_compute=res.x[0],
        eta_memory=res.x[1],
        gemm_floor_us=res.x[2],
        kernel_floor_us=res.x[3],
    )
    return eff, {"vidur_linear_ops": _rel(pred(res.x), t)}


# --------------------------------------------------------------------------- main


def _round(d: dict[str, float], digits: int = 4) -> dict[str, float]:
    return {k: float(f"{v:.{digits}g}") for k, v in d.items()}


def build(data: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The GPU specs and the fits' report."""
    ops = json.loads((data / OPS).read_text())
    report: dict[str, Any] = {}
    gemm, report["h200 gemm"] = fit_h200_gemm(ops)
    attn, report["h200 attention"] = fit_h200_attention(ops)
    eff = _round(dict(gemm, **attn, kernel_floor_us=3.0))
    pm0 = {"clock_w": 43.0, "mem_w": 350.0, "sm_w": 900.0, "alpha": 2.5}
    floor, report["h200 kernel floor"] = fit_kernel_floor(ops, eff, pm0)
    eff = _round(dict(eff, kernel_floor_us=floor))
    pm, report["h200 power"] = fit_power(ops, eff)
    pm = _round(pm)
    specs = {"h200": dict(SPECS["h200"], efficiency=eff, power_model=pm)}
    report["h200 e2e"] = check_e2e(ops, llm_arch.load_gpu(specs["h200"]))
    report["h200 moe"] = check_moe(ops, llm_arch.load_gpu(specs["h200"]))

    vid = read_vidur(data / VIDUR)
    for name in ("a100-80gb", "h100-sxm", "a100-40gb", "b200"):
        sp = SPECS[name]
        base = dict(eff)
        if name == "h100-sxm":
            p = dict(pm)
        elif name == "b200":  # the H200's model at the B200's power limit (its sources)
            k = sp["tdp_w"] / SPECS["h200"]["tdp_w"]
            p = {c: (v if c == "alpha" else v * k) for c, v in pm.items()}
        elif name == "a100-40gb":
            p = dict(specs["a100-80gb"]["power_model"])
        else:  # splitwise-sim's constants, read as described in the spec's sources
            clock_w = pm["clock_w"] * sp["tdp_w"] / SPECS["h200"]["tdp_w"]
            p = {
                "clock_w": clock_w,
                "mem_w": 250.0 - sp["idle_power_w"] - clock_w,
                "sm_w": sp["tdp_w"] - sp["idle_power_w"] - clock_w,
                "alpha": pm["alpha"],
            }
        if name in DERIVED:  # no operator profile of this GPU: its sibling's efficiencies
            e = dict(specs[DERIVED[name]]["efficiency"])
        else:
            e, report[f"{name} fit"] = fit_vidur(vid, name, base, p)
        specs[name] = dict(sp, efficiency=_round(e), power_model=_round(p))
    for name, sp in specs.items():
        sp["sources"] = dict(sp["sources"])
        sp["sources"]["efficiency"] = "fitted by scripts/llm_gpu_specs.py on " + (
            "the operators measured on an H200 (data/h200_llm_ops.json)"
            if name == "h200"
            else "vidur's operator profiles of Llama-2-7B and -70B at TP 1-8 (data/vidur_llama_linear_ops_ms.csv; "
            "microsoft/vidur @7d47513, MIT) for the GEMM and elementwise terms; attention efficiencies from the "
            "H200's fit"
        )
        if name in DERIVED:
            sp["sources"]["efficiency"] = (
                f"not fitted (nothing measured on this GPU): {DERIVED[name]}'s efficiencies, assumed"
            )
        sp["fit"] = {
            k: v
            for k, v in report.items()
            if name not in DERIVED and k.startswith(name.split("-")[0]) and "rows" not in str(k)
        }
    return specs, report


def main(argv: list[str] | None = None) -> int:
    """Fit the efficiencies and write the GPU specs (see the module docstring)."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument(
        "--data", default=str(ROOT / "data"), help="folder of the tables (default data/)"
    )
    p.add_argument(
        "--out", default=str(ROOT / "batch_env" / "profiles" / "gpus"), help="output folder"
    )
    p.add_argument("--report", action="store_true", help="print every fit's errors")
    a = p.parse_args(argv)
    specs, report = build(Path(a.data))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, sp in specs.items():
        (out / f"{name}.json").write_text(json.dumps(sp, indent=2) + "\n")
    if a.report:
        print(json.dumps(report, indent=1))
    print(f"wrote {', '.join(sorted(specs))} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
