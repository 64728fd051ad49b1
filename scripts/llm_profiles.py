"""Write the shipped LLM iteration-time and power profiles (``batch_env/profiles/llm/``).

Run ``python scripts/llm_profiles.py`` from the repository root. It reads two tables of
the repository's ``data/`` folder (``data/README.md`` gives their sources) and writes
``llama-2-7b-a100.json``, ``llama-2-7b-h100.json`` and ``llama-2-70b-tp8-a100.json``; the
JSON files are self-contained (every number copied, with its citation), so the tables are
not needed at run time. The loader and the evaluation formulas are in
``batch_env/profiles/llm_profile.py``; ``docs/llm_profiles.md`` explains the same rules for readers.
``--out DIR`` writes elsewhere, ``--data DIR`` reads the tables from elsewhere (the test
regenerates into a temporary directory and compares byte for byte).

Iteration time (every profile)::

    prefill(p_1..p_k) = table_prefill(sum p_i) + ms_per_token * sum p_i
                        + ms_per_sq_token * sum p_i**2 + overhead_ms
    decode(b, C)      = table_decode(b) + ms_per_context_token * C + overhead_ms

where ``C`` is the sum of the KV-context lengths of the ``b`` running requests; tables are
interpolated piecewise-linearly between listed points. ``overhead_ms`` = 0 in every
shipped profile (see "Left out" below).

Llama-2-7B on A100-80GB and H100-80GB (tensor parallel 1), from
``vidur_llama_linear_ops_ms.csv`` (microsoft/vidur's ``mlp.csv`` profiles: per-iteration
time of the non-attention operators vs the number of tokens in the batch):

* ``table_prefill(n)`` = linear_ops_ms at num_tokens = n (the prefill's total tokens);
  ``table_decode(b)`` = linear_ops_ms at num_tokens = b (one new token per request). The
  two tables therefore hold the same numbers on the same grid (1, 2, 4, 8, 16, ..., 4096).
* The CSV lists num_tokens 2048 and 4096 twice: the mean of the two rows is used.
* The grid stops at 4096 tokens, so max_batch_size = max_batch_tokens = 4096 and the
  profile declares no extrapolation.
* Attention (vidur's linear ops exclude it) is added analytically:
  - decode reads every context token's K and V once per step:
    ``ms_per_context_token = kv_bytes_per_token / (HBM bandwidth x BANDWIDTH_EFFICIENCY)``;
  - prefill writes each new token's K and V once:
    ``ms_per_token = kv_bytes_per_token / (HBM bandwidth x BANDWIDTH_EFFICIENCY)``,
    and computes causal attention, ``2 (QK^T and PV) x 2 (multiply-add) x layers x hidden
    x p^2 / 2 (causal half)`` FLOPs for a prompt of p tokens:
    ``ms_per_sq_token = 2 x layers x hidden / (fp16 dense tensor peak x ATTENTION_FLOPS_EFFICIENCY)``.
* BANDWIDTH_EFFICIENCY = 0.7 (assumed): decode-attention kernels (vLLM's PagedAttention,
  FlashInfer) reach a large part of peak HBM bandwidth only at long contexts; 70% is a
  middle value, not a measurement.
* ATTENTION_FLOPS_EFFICIENCY: A100 0.5, H100 0.35. FlashAttention-2 reaches 50-73% of the
  A100's peak in its forward pass (Dao 2023, arXiv 2307.08691; low end chosen because
  serving prompts are short) and about 35% of the H100's (Shah et al. 2024,
  FlashAttention-3, arXiv 2407.08608: "FlashAttention-2 achieving only 35% utilization on
  the H100").

Llama-2-70B, tensor parallel 8 on a DGX-A100 (8x A100-SXM4-80GB), from the rows
``llama2-70b, a100-80gb, tensor_parallel = 8`` of ``splitwise_llm_perf_model.csv``
(Mutinifni/splitwise-sim ``data/perf_model.csv``; times in ms, repeated rows averaged):

* Prefill: ``table_prefill`` = mean prompt_time of the batch-1, token_size-128 rows at
  prompt_size 128, 256, ..., 8192 (as a function of total prefill tokens). These measure
  a whole prompt, attention included, so ms_per_token = ms_per_sq_token = 0. The batch-b,
  prompt-512 rows are NOT used: they are 7-34% slower than one prompt of b x 512 tokens
  (e.g. b=16: 2064 ms vs 1544 ms at 8192 tokens), although b separate prompts need less
  attention work than one long one, so the extra time is per-sequence overhead of the
  measured stack, which vLLM's flattened (variable-length) prefill does not have; a
  single prompt of the same total tokens is the closer stand-in. (The batch-1 rows at
  prompt 512 with token_size 256..8192 are also left out: same prompt, power missing.)
  One point is added below the first row: a 1-token prefill takes ``table_decode(1)``
  (a one-token forward pass with an empty context is a decode step of one request).
* Decode: token_time of the prompt-512, token-128 rows at batch_size 1..64. The context
  slope ``ms_per_context_token`` is the least-squares slope of the mean token_time of the
  batch-1, token-128 rows against their mean context ``prompt_size + 64`` (the mean
  context over a 128-token generation) for prompt_size 128..8192 (one point per prompt
  size). The table then holds ``base(b) = token_time(b) - slope x b x CTX_REF`` with
  CTX_REF = 512 + 64, so that decode(b, b x 576) reproduces the measured token_time(b).
* max_batch_size = 64, max_batch_tokens = 8192, no extrapolation (max_num_seqs 256 is a
  configuration error on this profile).

Power (whole server = the sum over the profile's num_gpus GPU boards; the host's CPUs,
NICs and fans are not included):

* splitwise's ``peak_power`` / ``average_power`` columns are fractions of the GPUs'
  rated power (a100-80gb: 400 W; peaks reach 1.0: 1.0000125 in the TP-2 prompt-512 rows,
  1.0024 in the TP-8 prompt-4096 rows). splitwise-sim's own
  code never reads them: ``performance_model.py`` keeps only the time columns, and
  ``power_model.py``'s PowerModel is marked "TODO: unused"; its ConstantPowerModel gives
  per-processor watts (``configs/power_model/constant.yaml``: a100-80gb idle 63, prompt
  400, token 250) and ``get_processors_power`` returns one value per GPU of the instance,
  while ``server.py`` sums processor powers into the server's power. So a fraction f means
  ``f x 400 W`` per GPU and ``f x 400 W x 8`` for the TP-8 instance. ``average_power`` is
  the mean over a whole run (the prompt, then 128 decode steps), mostly decode time (the
  prompt takes 2% of the run at batch 1, 11% at 8, 24% at 16, prompt 512); ``peak_power``
  is the highest reading of the run, reached in the prompt phase (it rises with prompt
  size while the token phase stays the same).
* 70B TP8 decode power at batch b = average_power(b) x 400 W x 8 (prompt-512, token-128
  rows). average_power is 0.0 (missing) at b = 32 and 64: those points are filled with
  the linear least-squares fit of the measured fractions over b = 1..16 (rising with b,
  as the step does more work), capped at 1.0, and marked in ``power.decode_filled``.
* 70B TP8 prefill power at n tokens = min(peak_power, 1.0) x 400 W x 8 of the batch-1
  prompt rows (capped at the rated power: an average over an iteration cannot exceed
  the enforced power limit); at the added 1-token point, the decode power at b = 1.
* Llama-2-7B (no published power; "modelled"): the same fractions at the same point
  (decode batch size b, prefill tokens n) times that GPU's TDP (A100 400 W, H100 700 W).
  Per GPU, a token of Llama-2-70B at TP 8 and of Llama-2-7B at TP 1 cost about the same
  (17.2 vs 13.5 GFLOP and 17.2 vs 13.5 GB of weights per GPU), so equal token counts are
  taken as comparable utilisation. The 70B stack is slow (45 ms per decode step where
  reading the weights takes about 4 ms), so this likely under-states decode power of an
  efficient 7B deployment.
* Power tables are interpolated piecewise-linearly and held flat outside their points.
* Idle power: splitwise-sim's ``configs/power_model/constant.yaml`` (63 W per A100-80GB,
  75 W per H100-80GB) times num_gpus; the project's ResNet-50 A100 profile assumes 60 W
  from an nvidia-smi snapshot, which agrees.

Memory: gpu_memory_bytes = 80e9 per GPU (the datasheets' "80GB"; CUDA reports about
85.0e9 bytes on these boards, and vLLM also subtracts activations and CUDA graphs, so the
decimal figure is the closer estimate of what vLLM gets); weights_bytes = params x 2
(fp16); kv_bytes_per_token = 2 (K, V) x layers x kv_heads x head_dim x 2 bytes;
gpu_memory_utilization 0.9 (vLLM's default).

Left out (times are therefore slightly low): for the vidur-based profiles, the LM head,
embedding, sampling and the CPU-side scheduler (``overhead_ms`` = 0, documented);
tensor-parallel communication does not apply at TP 1. The splitwise rows are end-to-end
measurements and include all of these.

Rounding: table times to 1e-6 ms, coefficients to 6 significant digits, power to 0.01 W.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "batch_env" / "profiles" / "llm"
DATA = ROOT / "data"
VIDUR = "vidur_llama_linear_ops_ms.csv"
SPLITWISE = "splitwise_llm_perf_model.csv"

BANDWIDTH_EFFICIENCY = 0.7
CTX_REF = 512 + 64
GPU_MEMORY_UTILIZATION = 0.9
DTYPE_BYTES = 2

VIDUR_CITE = (
    "microsoft/vidur data/profiling/compute/{gpu}/meta-llama/Llama-2-7b-hf/mlp.csv "
    "(HEAD 7d47513; MIT), summed over the non-attention operators (median per layer x 32 "
    "layers) by batch-env's scripts/llm_profiles.py"
)
SPLITWISE_COMMIT = "378088013a54df6f2052c27ff5ae6ea7619c3ecc"
SPLITWISE_CITE = (
    f"Mutinifni/splitwise-sim data/perf_model.csv @{SPLITWISE_COMMIT[:7]} (MIT; Patel et al., "
    "'Splitwise: Efficient Generative LLM Inference Using Phase Splitting', ISCA 2024), rows "
    "model=llama2-70b, hardware=a100-80gb, tensor_parallel=8"
)
SPLITWISE_POWER_CODE = (
    f"Mutinifni/splitwise-sim @{SPLITWISE_COMMIT[:7]}: performance_model.py reads only the "
    "time columns; power_model.py (PowerModel 'TODO: unused') returns per-processor watts, one "
    "per GPU (ConstantPowerModel, configs/power_model/constant.yaml), and server.py sums the "
    "processors' power into the server's; so a fraction f = f x rated power per GPU, x num_gpus"
)

GPUS: dict[str, dict[str, Any]] = {
    "a100": {
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_bytes": 80_000_000_000,
        "bandwidth_gb_s": 2039.0,
        "fp16_dense_tflops": 312.0,
        "tdp_w": 400.0,
        "idle_w": 63.0,
        "attention_flops_efficiency": 0.5,
        "vidur_gpu": "a100-80gb",
        "datasheet": (
            "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4, "
            "2021), column 'A100 80GB SXM': GPU memory 80GB HBM2e, memory bandwidth 2,039 GB/s, "
            "FP16 Tensor Core 312 TFLOPS (624 with sparsity), max TDP 400W"
        ),
        "efficiency_cite": (
            "FlashAttention-2 forward reaches 50-73% of the A100's peak (Dao 2023, arXiv "
            "2307.08691); 0.5, the low end, because serving prompts are short"
        ),
    },
    "h100": {
        "name": "NVIDIA H100-SXM5-80GB",
        "memory_bytes": 80_000_000_000,
        "bandwidth_gb_s": 3352.0,
        "fp16_dense_tflops": 989.0,
        "tdp_w": 700.0,
        "idle_w": 75.0,
        "attention_flops_efficiency": 0.35,
        "vidur_gpu": "h100-80gb",
        "datasheet": (
            "NVIDIA H100 Tensor Core GPU datasheet (2023), column 'H100 SXM': GPU memory 80GB, "
            "memory bandwidth 3.35TB/s (3352 GB/s), FP16 Tensor Core 1,979 TFLOPS with sparsity "
            "(989 dense), max TDP up to 700W"
        ),
        "efficiency_cite": (
            "FlashAttention-2 reaches about 35% of the H100's peak (Shah et al. 2024, "
            "FlashAttention-3, arXiv 2407.08608: 'FlashAttention-2 achieving only 35% "
            "utilization on the H100 GPU')"
        ),
    },
}

MODELS: dict[str, dict[str, Any]] = {
    "llama-2-7b": {
        "name": "Llama-2-7B (fp16)",
        "layers": 32,
        "hidden": 4096,
        "kv_heads": 32,
        "head_dim": 128,
        "params": 6.74e9,
        "cite": (
            "Touvron et al., 'Llama 2: Open Foundation and Fine-Tuned Chat Models', arXiv "
            "2307.09288 (2023), Table 1 / Section 2.2; meta-llama/Llama-2-7b-hf config.json: "
            "num_hidden_layers 32, hidden_size 4096, num_attention_heads 32, "
            "num_key_value_heads 32 (head_dim 4096/32 = 128); 6,738,415,616 parameters "
            "(6.74e9) in the released fp16 checkpoint"
        ),
    },
    "llama-2-70b": {
        "name": "Llama-2-70B (fp16)",
        "layers": 80,
        "hidden": 8192,
        "kv_heads": 8,
        "head_dim": 128,
        "params": 68.98e9,
        "cite": (
            "Touvron et al., 'Llama 2: Open Foundation and Fine-Tuned Chat Models', arXiv "
            "2307.09288 (2023), Section 2.2 (grouped-query attention for 70B); "
            "meta-llama/Llama-2-70b-hf config.json: num_hidden_layers 80, hidden_size 8192, "
            "num_attention_heads 64, num_key_value_heads 8 (head_dim 8192/64 = 128); "
            "68,976,648,192 parameters (68.98e9) in the released fp16 checkpoint"
        ),
    },
}


# ------------------------------------------------------------------------ helpers


def sig(x: float, digits: int = 6) -> float:
    """``x`` rounded to ``digits`` significant digits."""
    return float(f"{x:.{digits}g}")


def ms(x: float) -> float:
    return round(x, 6)


def watts(x: float) -> float:
    return round(x, 2)


def kv_bytes(m: dict[str, Any]) -> int:
    return 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * DTYPE_BYTES


def weights_bytes(m: dict[str, Any]) -> int:
    return round(m["params"] * DTYPE_BYTES)


def model_shape(m: dict[str, Any]) -> dict[str, Any]:
    shape = {k: m[k] for k in ("layers", "hidden", "kv_heads", "head_dim")}
    return shape | {"params": round(m["params"]), "dtype_bytes": DTYPE_BYTES}


def lstsq_slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line ``y = a + s x``: returns ``(s, a)``."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    s = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return s, my - s * mx


def read_vidur(path: Path, gpu: str) -> tuple[list[int], list[float]]:
    """num_tokens and linear_ops_ms of Llama-2-7B, TP 1 on ``gpu`` (duplicates averaged)."""
    rows: dict[int, list[float]] = defaultdict(list)
    with path.open(newline="") as f:
        lines = (ln for ln in f if not ln.startswith("#"))
        for r in csv.DictReader(lines):
            if r["model"] == "llama-2-7b" and r["gpu"] == gpu and r["tensor_parallel"] == "1":
                rows[int(r["num_tokens"])].append(float(r["linear_ops_ms"]))
    xs = sorted(rows)
    return xs, [ms(statistics.fmean(rows[x])) for x in xs]


def read_splitwise(path: Path) -> list[dict[str, Any]]:
    """The llama2-70b, a100-80gb, tensor_parallel=8 rows with numeric fields."""
    out = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            if (r["model"], r["hardware"], r["tensor_parallel"]) != (
                "llama2-70b",
                "a100-80gb",
                "8",
            ):
                continue
            out.append(
                {
                    k: (int(v) if k in ("prompt_size", "batch_size", "token_size") else float(v))
                    for k, v in r.items()
                    if k not in ("model", "hardware", "tensor_parallel")
                }
            )
    return out


def group_mean(rows: list[dict[str, Any]], key: str, col: str) -> dict[int, float]:
    g: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        g[r[key]].append(r[col])
    return {k: statistics.fmean(v) for k, v in sorted(g.items())}


def common(name: str, m: dict[str, Any], gpu: dict[str, Any], num_gpus: int) -> dict[str, Any]:
    return {
        "kind": "llm",
        "name": name,
        "model": m["name"],
        "device": "",
        "source": "",
        "num_gpus": num_gpus,
        "model_shape": model_shape(m),
        "kv_bytes_per_token": kv_bytes(m),
        "weights_bytes": weights_bytes(m),
        "gpu_memory_bytes": gpu["memory_bytes"],
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
        "gpu_rated_power_w": gpu["tdp_w"],
        "idle_power_w": gpu["idle_w"] * num_gpus,
        "idle_power_source": (
            f"{gpu['idle_w']:g} W per {gpu['name']} x {num_gpus} GPU(s), the idle power of "
            f"splitwise-sim's constant power model (Mutinifni/splitwise-sim "
            f"@{SPLITWISE_COMMIT[:7]} configs/power_model/constant.yaml, idle_power); GPU "
            "boards only, host not included"
        ),
        "hardware": {
            "gpu": gpu["name"],
            "memory_bandwidth_gb_s": gpu["bandwidth_gb_s"],
            "fp16_dense_tflops": gpu["fp16_dense_tflops"],
            "bandwidth_efficiency": BANDWIDTH_EFFICIENCY,
            "attention_flops_efficiency": gpu["attention_flops_efficiency"],
        },
        "overhead_ms": 0.0,
        "extrapolation": "none",
    }


# ------------------------------------------------------------------------ splitwise (70B)


def splitwise_70b(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Tables and fits of the 70B TP8 A100 rows (see the module docstring)."""
    tok128 = [r for r in rows if r["token_size"] == 128]
    b1 = [r for r in tok128 if r["batch_size"] == 1]
    p512 = [r for r in tok128 if r["prompt_size"] == 512]

    prompt_time = group_mean(b1, "prompt_size", "prompt_time")
    prompt_peak = group_mean(b1, "prompt_size", "peak_power")
    b1_token = group_mean(b1, "prompt_size", "token_time")
    token_time = group_mean(p512, "batch_size", "token_time")
    avg_power = group_mean(p512, "batch_size", "average_power")
    batched_prompt = group_mean(p512, "batch_size", "prompt_time")

    ctx = [p + 64 for p in b1_token]
    slope, _ = lstsq_slope(ctx, list(b1_token.values()))
    slope = sig(slope)
    bs = list(token_time)
    base = [ms(token_time[b] - slope * b * CTX_REF) for b in bs]

    measured = [b for b in bs if avg_power[b] > 0.0]
    fs, fa = lstsq_slope([float(b) for b in measured], [avg_power[b] for b in measured])
    frac, filled = [], []
    for b in bs:
        if avg_power[b] > 0.0:
            frac.append(avg_power[b])
            filled.append(False)
        else:
            frac.append(min(1.0, fa + fs * b))
            filled.append(True)

    return {
        "prompt_sizes": list(prompt_time),
        "prompt_time": [ms(v) for v in prompt_time.values()],
        "prompt_peak": [min(1.0, v) for v in prompt_peak.values()],
        "prompt_peak_raw": list(prompt_peak.values()),
        "b1_token_time": {p: ms(v) for p, v in b1_token.items()},
        "slope": slope,
        "batch_sizes": bs,
        "token_time": [ms(token_time[b]) for b in bs],
        "base": base,
        "decode_frac": frac,
        "decode_filled": filled,
        "fill_fit": (sig(fa), sig(fs)),
        "batched_prompt": {b: ms(v) for b, v in batched_prompt.items()},
        "n_rows": len(rows),
    }


def llama70b(sw: dict[str, Any]) -> dict[str, Any]:
    m, gpu, n = MODELS["llama-2-70b"], GPUS["a100"], 8
    d = common("llama-2-70b-tp8-a100", m, gpu, n)
    rated = gpu["tdp_w"] * n
    d["device"] = "DGX-A100: 8x NVIDIA A100-SXM4-80GB (NVLink), tensor parallel 8, fp16"
    d["source"] = (
        f"{SPLITWISE_CITE}: prompt_time and token_time (ms) and the power fractions "
        "average_power / peak_power; model shape from the Llama 2 paper / Hugging Face config; "
        "GPU figures from NVIDIA's A100 datasheet. Generated by scripts/llm_profiles.py."
    )
    sizes = sw["prompt_sizes"]
    d["prefill"] = {
        "tokens": [1, *sizes],
        "time_ms": [sw["base"][0], *sw["prompt_time"]],
        "ms_per_token": 0.0,
        "ms_per_sq_token": 0.0,
        "rule": (
            "time_ms at tokens >= 128: mean prompt_time of the batch-1, token_size-128 rows at "
            "prompt_size = tokens (a whole prompt, attention included, hence no attention "
            "terms); at tokens = 1: the decode table at b = 1 (a one-token forward pass with "
            "an empty context). Interpolated linearly in total prefill tokens."
        ),
    }
    d["decode"] = {
        "batch_sizes": sw["batch_sizes"],
        "time_ms": sw["base"],
        "ms_per_context_token": sw["slope"],
        "rule": (
            f"time_ms = base(b) = token_time(b) - ms_per_context_token x b x {CTX_REF}, "
            "token_time(b) = mean token_time of the prompt-512, token-128 rows at batch b; "
            "ms_per_context_token = least-squares slope of the mean token_time of the batch-1, "
            "token-128 rows against context = prompt_size + 64 (mean context over a 128-token "
            f"generation), prompt_size 128..8192; so decode(b, b x {CTX_REF}) = token_time(b)."
        ),
    }
    dw = [watts(f * rated) for f in sw["decode_frac"]]
    d["power"] = {
        "prefill_tokens": [1, *sizes],
        "prefill_w": [dw[0], *(watts(f * rated) for f in sw["prompt_peak"])],
        "decode_batch_sizes": sw["batch_sizes"],
        "decode_w": dw,
        "decode_filled": sw["decode_filled"],
        "modelled": False,
        "rule": (
            "GPU board power summed over the 8 GPUs (host not included). decode_w(b) = "
            "average_power(b) x 400 W x 8 (prompt-512, token-128 rows; the mean over a run "
            "that is mostly decode: the prompt is 2% of it at b = 1, 24% at b = 16). Missing (0.0) at b = 32, 64: filled with the least-squares "
            f"line over b = 1..16, fraction = {sw['fill_fit'][0]:g} + {sw['fill_fit'][1]:g} "
            "x b, capped at 1 (decode_filled). prefill_w(n) = min(peak_power, 1) x 400 W x 8 "
            "of the batch-1 prompt rows (the run's peak is reached in the prompt phase); at "
            "n = 1 the decode power at b = 1. Interpolated linearly, held flat outside."
        ),
    }
    d["citations"] = {
        "prefill.time_ms": SPLITWISE_CITE + ", column prompt_time (batch_size 1, token_size 128)",
        "decode.time_ms": SPLITWISE_CITE + ", column token_time (prompt_size 512, token_size 128)",
        "decode.ms_per_context_token": SPLITWISE_CITE + ", column token_time (batch_size 1, "
        "token_size 128, prompt_size 128..8192); fitted, see decode.rule",
        "power": SPLITWISE_CITE + ", columns average_power and peak_power (fractions of the "
        "GPUs' rated power); meaning from the code: " + SPLITWISE_POWER_CODE,
        "gpu_rated_power_w": GPUS["a100"]["datasheet"],
        "gpu_memory_bytes": GPUS["a100"]["datasheet"],
        "model_shape": m["cite"],
        "kv_bytes_per_token": "2 (K, V) x 80 layers x 8 kv heads x 128 head_dim x 2 bytes = "
        "327680 (320 KiB), summed over the 8 tensor-parallel ranks (one kv head each)",
        "weights_bytes": "68.98e9 parameters x 2 bytes (fp16)",
        "gpu_memory_utilization": "vLLM's default gpu_memory_utilization (0.9)",
        "idle_power_w": d["idle_power_source"],
    }
    d["notes"] = {
        "range": "decode batch sizes 1..64 and prefill tokens 1..8192, as measured; no "
        "extrapolation (max_num_seqs > 64 or max_num_batched_tokens > 8192 is an error)",
        "batched_prompt_rows_not_used": (
            "prompt_time of the batch-b, prompt-512 rows (ms): "
            + ", ".join(f"b={b}: {v:.1f}" for b, v in sw["batched_prompt"].items())
            + "; one prompt of the same total tokens (batch-1 rows): "
            + ", ".join(
                f"{p}: {t:.1f}" for p, t in zip(sw["prompt_sizes"], sw["prompt_time"], strict=True)
            )
            + ". The batched rows are slower although b short prompts need less attention than "
            "one long prompt: per-sequence overhead of the measured stack, absent from vLLM's "
            "flattened prefill; the batch-1 rows are used."
        ),
        "context_fit": (
            "mean token_time of the batch-1 rows by prompt_size: "
            + ", ".join(f"{p}: {t:.3f}" for p, t in sw["b1_token_time"].items())
            + " ms. The rise is small and flattens above 4096; the fitted slope is larger than "
            "the KV-read bound (327680 B / (8 x 2039 GB/s) = 2.0e-5 ms per token) because the "
            "measured stack is far from bandwidth-bound."
        ),
        "prefill_power_peak_raw": "peak_power of the batch-1 prompt rows before the cap at 1: "
        + ", ".join(
            f"{p}: {f:.6g}" for p, f in zip(sw["prompt_sizes"], sw["prompt_peak_raw"], strict=True)
        ),
        "mixed_prompt_lengths": "the prefill table is keyed on total tokens and measured on "
        "single prompts, so a prefill of several prompts gets the attention time of one prompt "
        "of their total length (an over-estimate of up to about 7% at 8192 tokens, where "
        "causal attention is about 7% of one prompt's FLOPs)",
        "host_power": "not included; splitwise-sim's power_model.py adds 1500 W for a "
        "DGX-A100's non-GPU parts",
    }
    return d


# ------------------------------------------------------------------------ vidur (7B)


def llama7b(gpu_key: str, xs: list[int], ys: list[float], sw: dict[str, Any]) -> dict[str, Any]:
    m, gpu = MODELS["llama-2-7b"], GPUS[gpu_key]
    d = common(f"llama-2-7b-{gpu_key}", m, gpu, 1)
    kvb = d["kv_bytes_per_token"]
    bw = gpu["bandwidth_gb_s"] * 1e9 * BANDWIDTH_EFFICIENCY
    flops = gpu["fp16_dense_tflops"] * 1e12 * gpu["attention_flops_efficiency"]
    per_tok_ms = sig(kvb / bw * 1e3)
    per_sq_ms = sig(2 * m["layers"] * m["hidden"] / flops * 1e3)
    vid = VIDUR_CITE.format(gpu=gpu["vidur_gpu"])
    d["device"] = f"1x {gpu['name']}, tensor parallel 1, fp16"
    d["source"] = (
        f"{vid}: linear (non-attention) operator time per iteration vs batch tokens; attention "
        "added analytically from the model shape and NVIDIA's datasheet figures; power "
        "modelled from the splitwise-sim Llama-2-70B A100 fractions "
        f"({SPLITWISE_CITE}). Generated by scripts/llm_profiles.py."
    )
    d["prefill"] = {
        "tokens": xs,
        "time_ms": ys,
        "ms_per_token": per_tok_ms,
        "ms_per_sq_token": per_sq_ms,
        "rule": (
            "time_ms = vidur linear_ops_ms at num_tokens = total prefill tokens (duplicate rows "
            "at 2048 and 4096 averaged); ms_per_token = KV write = kv_bytes_per_token / "
            f"({gpu['bandwidth_gb_s']:g} GB/s x {BANDWIDTH_EFFICIENCY}); ms_per_sq_token = causal "
            f"attention = 2 x layers x hidden FLOPs per squared prompt token / "
            f"({gpu['fp16_dense_tflops']:g} TFLOPS x {gpu['attention_flops_efficiency']})."
        ),
    }
    d["decode"] = {
        "batch_sizes": xs,
        "time_ms": ys,
        "ms_per_context_token": per_tok_ms,
        "rule": (
            "time_ms = vidur linear_ops_ms at num_tokens = batch size (one new token per "
            "request); ms_per_context_token = reading each context token's K and V once = "
            f"kv_bytes_per_token / ({gpu['bandwidth_gb_s']:g} GB/s x {BANDWIDTH_EFFICIENCY})."
        ),
    }
    tdp = gpu["tdp_w"]
    d["power"] = {
        "prefill_tokens": [1, *sw["prompt_sizes"]],
        "prefill_w": [
            watts(sw["decode_frac"][0] * tdp),
            *(watts(f * tdp) for f in sw["prompt_peak"]),
        ],
        "decode_batch_sizes": sw["batch_sizes"],
        "decode_w": [watts(f * tdp) for f in sw["decode_frac"]],
        "decode_filled": sw["decode_filled"],
        "modelled": True,
        "rule": (
            f"modelled (nothing publishes this power): the llama-2-70b-tp8-a100 profile's "
            f"per-GPU fractions of rated power at the same point (decode batch size, prefill "
            f"tokens) x this GPU's TDP ({tdp:g} W). Per GPU a token of Llama-2-70B at TP 8 and "
            "of Llama-2-7B at TP 1 cost about the same (17.2 vs 13.5 GFLOP and GB of weights), "
            "so equal token counts are taken as comparable utilisation. decode_filled marks "
            "points whose 70B fraction was itself filled. Held flat beyond b = 64 and outside "
            "the prefill points; likely low for decode on an efficient stack."
        ),
    }
    d["citations"] = {
        "prefill.time_ms": vid,
        "decode.time_ms": vid,
        "prefill.ms_per_token": "kv_bytes_per_token / (memory bandwidth x bandwidth_efficiency); "
        + gpu["datasheet"],
        "prefill.ms_per_sq_token": "2 x 2 x layers x hidden x p^2 / 2 FLOPs per prompt of p "
        f"tokens over (fp16 dense peak x attention_flops_efficiency); {gpu['datasheet']}; "
        + gpu["efficiency_cite"],
        "decode.ms_per_context_token": "kv_bytes_per_token / (memory bandwidth x "
        "bandwidth_efficiency); " + gpu["datasheet"],
        "hardware.bandwidth_efficiency": "assumed: decode-attention kernels reach a large part "
        "of peak HBM bandwidth only at long contexts; 0.7 is a middle value, not a measurement",
        "hardware.attention_flops_efficiency": gpu["efficiency_cite"],
        "power": "modelled, see power.rule; fractions from "
        + SPLITWISE_CITE
        + "; meaning from the code: "
        + SPLITWISE_POWER_CODE,
        "gpu_rated_power_w": gpu["datasheet"],
        "gpu_memory_bytes": gpu["datasheet"],
        "model_shape": m["cite"],
        "kv_bytes_per_token": "2 (K, V) x 32 layers x 32 kv heads x 128 head_dim x 2 bytes = "
        "524288 (512 KiB)",
        "weights_bytes": "6.74e9 parameters x 2 bytes (fp16)",
        "gpu_memory_utilization": "vLLM's default gpu_memory_utilization (0.9)",
        "idle_power_w": d["idle_power_source"],
    }
    d["notes"] = {
        "range": f"decode batch sizes and prefill tokens 1..{xs[-1]} (vidur's grid); no "
        "extrapolation",
        "left_out": "vidur's linear ops exclude attention (added here), the LM head, embedding, "
        "sampling and CPU scheduling (overhead_ms = 0): iteration times are slightly low",
        "table_noise": "vidur's medians are not monotone at small token counts (e.g. 9.28 ms at "
        "1 token, 8.96 ms at 2) and step up at multiples of 128 tokens (GEMM tiling); the table "
        "is used as published",
        "power": "modelled, not measured (power.modelled = true)",
    }
    return d


# ------------------------------------------------------------------------ output


def dumps(obj: Any, indent: int = 0) -> str:
    """JSON with objects indented and lists of scalars kept on one line."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        items = [f"{inner}{dumps(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj)


#: The clock model of the measured profiles: the roofline model of the same model on the
#: same GPU (batch_env/profiles/llm_arch.py), named by its shipped model config and GPU spec.
CLOCK_MODELS = {
    "llama-2-70b-tp8-a100": ("llama-2-70b", "a100-80gb", 8),
    "llama-2-7b-a100": ("llama-2-7b", "a100-80gb", 1),
    "llama-2-7b-h100": ("llama-2-7b", "h100-sxm", 1),
}
#: The profiles built from a model's architecture and a GPU spec (llm_arch.build_profile):
#: name -> (shipped model config, shipped GPU spec, tensor-parallel degree).
ARCH_PROFILES = {
    f"{m}{'' if tp == 1 else f'-tp{tp}'}-{g.split('-')[0]}": (m, g, tp)
    for m, tps in (
        ("llama-3.1-8b", (1,)),
        ("qwen2.5-7b", (1,)),
        ("llama-3.1-70b", (4, 8)),
        ("mixtral-8x7b", (2,)),
    )
    for tp in tps
    for g in ("a100-80gb", "h100-sxm", "h200")
}


def build(data_dir: Path) -> dict[str, dict[str, Any]]:
    """The shipped profiles by name: the measured ones from the two CSV tables in
    ``data_dir``, the others from the roofline model (which reads no table)."""
    from batch_env.profiles import llm_arch

    sw = splitwise_70b(read_splitwise(data_dir / SPLITWISE))
    out = {"llama-2-70b-tp8-a100": llama70b(sw)}
    for key in ("a100", "h100"):
        xs, ys = read_vidur(data_dir / VIDUR, GPUS[key]["vidur_gpu"])
        out[f"llama-2-7b-{key}"] = llama7b(key, xs, ys, sw)
    for name, (model, gpu, tp) in CLOCK_MODELS.items():
        out[name]["arch"] = {
            "model": model,
            "gpu": gpu,
            "tp": tp,
            "_about": "the clock model (LLMProfile.at_clock): the roofline model of this model on "
            "this GPU, whose ratios at another SM clock scale this profile's figures",
        }
    for name, (model, gpu, tp) in ARCH_PROFILES.items():
        out[name] = llm_arch.build_profile(model, gpu, tp, name=name)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data", type=Path, default=DATA, help="folder with the two CSV tables (default: data/)"
    )
    ap.add_argument("--out", type=Path, default=OUT, help="folder to write the JSON profiles to")
    args = ap.parse_args(argv)
    for f in (VIDUR, SPLITWISE):
        if not (args.data / f).is_file():
            print(f"missing {args.data / f}", file=sys.stderr)
            return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for name, d in sorted(build(args.data).items()):
        path = args.out / f"{name}.json"
        path.write_text(dumps(d) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
