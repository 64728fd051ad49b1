"""Measure LLM operator and iteration times, and power, on a CUDA GPU.

Run from the repository root on a machine with a CUDA GPU::

    python scripts/measure_llm_gpu.py --out results/llm-gpu

It needs only PyTorch (CUDA) and nvidia-ml-py, and writes ``<out>/llm_gpu_ops.json``
(one JSON object, rewritten after every section, so a run cut short keeps what it
measured) and ``<out>/nvidia_smi_q.txt``. What it measures, all in bf16 with random
weights (time depends on shapes, not values):

``meta``
    the GPU (name, memory, driver, SM clock range and supported clocks, power limits), the
    libraries, and the ceilings measured here: the bf16 matrix rate of an
    8192 x 8192 x 8192 product and the device-to-device copy bandwidth.
``gemm``
    ``F.linear`` of M tokens through each weight shape (N x K) of the dense and MoE models
    in :data:`MODELS` at the tensor-parallel degrees in :data:`SHAPES` (the per-rank
    shapes of the QKV, output, gate-up, down and LM-head projections), M = 1 .. 8192. The
    weights rotate through enough copies to exceed the L2 cache, as the next layer's
    weights would in a forward pass.
``attn_prefill`` / ``attn_chunk`` / ``attn_decode``
    ``scaled_dot_product_attention`` (PyTorch's flash / memory-efficient kernels) for one
    layer at the per-rank head counts in :data:`HEADS`: causal prefill of b prompts of p
    tokens; a chunk of c tokens after x tokens already cached (causal, bottom-right
    aligned); a decode step of b requests with c tokens of context each, the query heads
    of a KV head packed into the query length (as flash-decoding kernels do for GQA).
``elementwise``
    RMSNorm, SiLU-and-multiply and the residual add at M tokens.
``e2e``
    whole iterations of the decoders in :data:`E2E` (every layer's norm, QKV, attention,
    output, MLP; the LM head on each sequence's last token; no rotary embedding, no
    sampling, no tensor-parallel all-reduce): prefills of one or several prompts, decode
    steps replayed from CUDA graphs (as vLLM runs decodes) and once eager, and mixed
    iterations (a prompt chunk with decodes).
``power``
    average board power and SM clock over windows of at least ``--power-window-s`` seconds
    of back-to-back repeats of chosen iterations and kernels, from NVML's energy counter
    (mJ) and a 20 ms power/clock sampler, and the idle power.

Times are CUDA-event times of back-to-back repeats (after warm-up), in milliseconds per
call. The script changes no GPU setting (clocks, power limits).
"""

# The closures handed to timeit / power_window run at once, inside the loop that binds
# their variables, so late binding (B023) cannot bite.
# ruff: noqa: B023
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

#: Model architectures as their model hubs' ``config.json`` give them (the fields used).
MODELS: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": dict(
        num_hidden_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=14336,
        vocab_size=128256,
    ),
    "llama-3.1-70b": dict(
        num_hidden_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_key_value_heads=8,
        intermediate_size=28672,
        vocab_size=128256,
    ),
    "llama-2-7b": dict(
        num_hidden_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=32,
        intermediate_size=11008,
        vocab_size=32000,
    ),
    "qwen2.5-7b": dict(
        num_hidden_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_key_value_heads=4,
        intermediate_size=18944,
        vocab_size=152064,
    ),
    "mixtral-8x7b": dict(
        num_hidden_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=14336,
        vocab_size=32000,
        num_local_experts=8,
        num_experts_per_tok=2,
    ),
}
#: (model, tensor-parallel degree) whose per-rank GEMM shapes are measured.
SHAPES = [
    ("llama-3.1-8b", 1),
    ("llama-3.1-8b", 2),
    ("llama-2-7b", 1),
    ("qwen2.5-7b", 1),
    ("llama-3.1-70b", 2),
    ("llama-3.1-70b", 4),
    ("llama-3.1-70b", 8),
    ("mixtral-8x7b", 2),
]
GEMM_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
#: Per-rank (query heads, KV heads) for the attention kernels; head_dim 128.
HEADS = [(32, 8), (32, 32), (28, 4), (8, 1)]
#: (model, tensor-parallel degree) run as whole iterations (one rank's compute).
E2E = [("llama-3.1-8b", 1), ("llama-2-7b", 1), ("llama-3.1-70b", 8)]

DT = torch.bfloat16
OUT: dict[str, Any] = {}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timeit(fn: Callable[[], Any], target_ms: float = 15.0, max_reps: int = 200) -> float:
    """Milliseconds per call of ``fn``: 2 warm-up calls, then back-to-back repeats for about
    ``target_ms`` (at least 3), timed with CUDA events (perf_counter on the CPU)."""
    fn()
    fn()
    _sync()
    t0 = time.perf_counter()
    fn()
    _sync()
    est = max((time.perf_counter() - t0) * 1e3, 1e-3)
    reps = int(min(max_reps, max(3, math.ceil(target_ms / est))))
    if torch.cuda.is_available():
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) * 1e3 / reps


def head_dim(cfg: dict[str, Any]) -> int:
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def rank_shapes(cfg: dict[str, Any], tp: int) -> dict[str, tuple[int, int]]:
    """Per-rank (N, K) of each projection at tensor-parallel degree ``tp``."""
    H, d = cfg["hidden_size"], head_dim(cfg)
    hq, hk = cfg["num_attention_heads"] // tp, max(cfg["num_key_value_heads"] // tp, 1)
    inter = cfg["intermediate_size"] // tp
    return {
        "qkv": ((hq + 2 * hk) * d, H),
        "o": (H, hq * d),
        "gate_up": (2 * inter, H),
        "down": (H, inter),
        "lm_head": (cfg["vocab_size"] // tp, H),
    }


def save(out: Path) -> None:
    tmp = out / "llm_gpu_ops.json.tmp"
    tmp.write_text(json.dumps(OUT, indent=1, default=str))
    tmp.replace(out / "llm_gpu_ops.json")


# --------------------------------------------------------------------------- NVML


class Nvml:
    """NVML's energy counter, power and SM clock, and a background sampler (or nothing)."""

    def __init__(self) -> None:
        self.h: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # no NVML: power is not measured
            self.error = repr(exc)

    def info(self) -> dict[str, Any]:
        if self.h is None:
            return {"nvml": self.error}
        nv, h = self.nv, self.h
        out: dict[str, Any] = {}

        def get(name: str, f: Callable[[], Any]) -> None:
            try:
                v = f()
                out[name] = v.decode() if isinstance(v, bytes) else v
            except Exception as exc:
                out[name] = f"error: {exc!r}"

        get("name", lambda: nv.nvmlDeviceGetName(h))
        get("driver", lambda: nv.nvmlSystemGetDriverVersion())
        get("memory_total_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h).total)
        get("sm_clock_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
        get("mem_clock_max_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM))
        get("sm_clock_now_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        get(
            "sm_clock_default_app_mhz",
            lambda: nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_GRAPHICS),
        )
        get("supported_mem_clocks_mhz", lambda: list(nv.nvmlDeviceGetSupportedMemoryClocks(h)))
        try:
            mem = max(nv.nvmlDeviceGetSupportedMemoryClocks(h))
            sm = sorted(nv.nvmlDeviceGetSupportedGraphicsClocks(h, mem))
            out["supported_sm_clocks_mhz"] = sm
        except Exception as exc:
            out["supported_sm_clocks_mhz"] = f"error: {exc!r}"
        get("power_limit_mw", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))
        get("power_default_limit_mw", lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h))
        get(
            "power_limit_range_mw",
            lambda: list(nv.nvmlDeviceGetPowerManagementLimitConstraints(h)),
        )
        get("power_now_mw", lambda: nv.nvmlDeviceGetPowerUsage(h))
        get("temperature_c", lambda: nv.nvmlDeviceGetTemperature(h, 0))
        return out

    def energy_mj(self) -> float | None:
        if self.h is None:
            return None
        try:
            return float(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.h))
        except Exception:
            return None

    def sample(self) -> tuple[float, float, int]:
        nv, h = self.nv, self.h
        reasons = 0
        try:
            reasons = int(nv.nvmlDeviceGetCurrentClocksEventReasons(h))
        except Exception:
            try:
                reasons = int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
            except Exception:
                reasons = -1
        return (
            nv.nvmlDeviceGetPowerUsage(h) / 1e3,
            float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            reasons,
        )


def power_window(nvml: Nvml, fn: Callable[[], Any], seconds: float) -> dict[str, Any]:
    """Average power and SM clock while ``fn`` runs back to back for ``seconds``."""
    if nvml.h is None:
        return {"error": "no NVML"}
    fn()
    _sync()
    samples: list[tuple[float, float, int]] = []
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            try:
                samples.append(nvml.sample())
            except Exception:
                pass
            time.sleep(0.02)

    # warm the board up (power and clocks settle within ~100s of ms)
    t_end = time.perf_counter() + min(0.5, seconds / 2)
    while time.perf_counter() < t_end:
        fn()
        _sync()
    th = threading.Thread(target=sampler, daemon=True)
    e0 = nvml.energy_mj()
    t0 = time.perf_counter()
    th.start()
    calls = 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(4):
            fn()
            calls += 1
        _sync()
    t1 = time.perf_counter()
    e1 = nvml.energy_mj()
    stop.set()
    th.join()
    res: dict[str, Any] = {
        "seconds": t1 - t0,
        "calls": calls,
        "ms_per_call": (t1 - t0) * 1e3 / calls,
    }
    if e0 is not None and e1 is not None:
        res["energy_power_w"] = (e1 - e0) / 1e3 / (t1 - t0)
    if samples:
        res["sampled_power_w"] = sum(s[0] for s in samples) / len(samples)
        res["sm_clock_mhz_mean"] = sum(s[1] for s in samples) / len(samples)
        res["sm_clock_mhz_min"] = min(s[1] for s in samples)
        res["clock_event_reasons"] = sorted({s[2] for s in samples})
        res["n_samples"] = len(samples)
    return res


# --------------------------------------------------------------------------- sections


def section_meta(out: Path, nvml: Nvml, dev: torch.device, small: bool) -> None:
    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "host_cpu": platform.processor() or platform.machine(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "nvml": nvml.info(),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        meta["sm_count"] = p.multi_processor_count
        meta["total_memory_bytes"] = p.total_memory
        try:
            txt = subprocess.run(
                ["nvidia-smi", "-q"], capture_output=True, text=True, timeout=30
            ).stdout
            (out / "nvidia_smi_q.txt").write_text(txt)
        except Exception as exc:
            meta["nvidia_smi"] = repr(exc)
    n = 1024 if small else 8192
    a = torch.randn(n, n, device=dev, dtype=DT)
    b = torch.randn(n, n, device=dev, dtype=DT)
    ms = timeit(lambda: a @ b, target_ms=100)
    meta["bf16_matmul_tflops"] = 2 * n**3 / ms / 1e9
    x = torch.empty(int((256 if small else 4096) * 2**20), dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    ms = timeit(lambda: y.copy_(x), target_ms=50)
    meta["copy_gbps_read_plus_write"] = 2 * x.numel() / ms / 1e6
    OUT["meta"] = meta
    save(out)


def section_gemm(out: Path, dev: torch.device, small: bool) -> None:
    shapes: dict[tuple[int, int], list[str]] = {}
    for model, tp in SHAPES:
        for op, nk in rank_shapes(MODELS[model], tp).items():
            shapes.setdefault(nk, []).append(f"{model}/tp{tp}/{op}")
    rows = []
    ms_list = [m for m in GEMM_M if not small or m <= 64]
    for (n, k), users in sorted(shapes.items()):
        if small:
            n, k = max(n // 64, 8), max(k // 64, 8)
        wbytes = n * k * 2
        copies = max(1, min(8, math.ceil(200e6 / wbytes)))
        ws = [torch.randn(n, k, device=dev, dtype=DT) * 0.02 for _ in range(copies)]
        for m in ms_list:
            x = torch.randn(m, k, device=dev, dtype=DT)
            i = [0]

            def f() -> Any:
                i[0] = (i[0] + 1) % copies
                return F.linear(x, ws[i[0]])

            ms = timeit(f)
            rows.append({"m": m, "n": n, "k": k, "ms": ms, "users": users, "weight_copies": copies})
        OUT["gemm"] = rows
        save(out)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    section_moe(out, dev, small)


def section_moe(out: Path, dev: torch.device, small: bool) -> None:
    """One MoE layer's experts (Mixtral-8x7B, TP 1): T tokens routed top-2, spread evenly,
    each active expert's gate-up and down projections run on its tokens (a loop of GEMMs,
    the sum a fused MoE kernel approaches)."""
    cfg = MODELS["mixtral-8x7b"]
    H, inter, E, top = cfg["hidden_size"], cfg["intermediate_size"], 8, 2
    if small:
        H, inter = 64, 224
    wgu = [torch.randn(2 * inter, H, device=dev, dtype=DT) * 0.02 for _ in range(E)]
    wd = [torch.randn(H, inter, device=dev, dtype=DT) * 0.02 for _ in range(E)]
    rows = []
    for t in [1, 2, 8, 32, 128, 512, 2048, 8192] if not small else [1, 8]:
        slots = t * top
        per = [slots // E + (1 if e < slots % E else 0) for e in range(E)]
        xs = [torch.randn(n, H, device=dev, dtype=DT) for n in per if n]
        ws = [(wgu[e], wd[e]) for e, n in enumerate(per) if n]

        def f() -> Any:
            for x, (g, dn) in zip(xs, ws, strict=True):
                gu = F.linear(x, g)
                F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], dn)

        rows.append(
            {"tokens": t, "active_experts": len(xs), "tokens_per_expert": per, "ms": timeit(f)}
        )
    OUT["moe"] = rows
    save(out)


def _packed_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q (b, hq, d) one token per request; k, v (b, hk, c, d): GQA packed into query length."""
    b, hq, d = q.shape
    hk = k.shape[1]
    qp = q.view(b, hk, hq // hk, d)
    return F.scaled_dot_product_attention(qp, k, v)


#: How causal GQA prefill attention runs here: "enable_gqa" (SDPA's own grouped heads, on a
#: fused kernel) or "repeat" (K and V repeated to every query head first); set by probe_gqa.
GQA_MODE = ["enable_gqa"]


def probe_gqa(dev: torch.device) -> str:
    """Whether SDPA runs grouped-query causal attention on a fused (flash or memory-
    efficient) kernel here; sets :data:`GQA_MODE` and returns a description."""
    q = torch.randn(1, 8, 256, 128, device=dev, dtype=DT)
    k = torch.randn(1, 2, 256, 128, device=dev, dtype=DT)
    if not torch.cuda.is_available():
        GQA_MODE[0] = "enable_gqa"
        return "cpu"
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel(be):
                F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
            GQA_MODE[0] = "enable_gqa"
            return f"enable_gqa on {be.name}"
        except Exception:
            continue
    GQA_MODE[0] = "repeat"
    return "repeat (no fused kernel takes enable_gqa)"


def _prefill_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention, q (b, hq, p, d), k/v (b, hk, p, d)."""
    if q.shape[1] != k.shape[1]:
        if GQA_MODE[0] == "enable_gqa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def section_attention(out: Path, dev: torch.device, small: bool) -> None:
    d = 128
    OUT["gqa_prefill_mode"] = probe_gqa(dev)
    pre, chunk, dec = [], [], []
    seqs = [64, 128, 256, 512, 1024, 2048, 4096, 8192] if not small else [16, 64]
    for hq, hk in HEADS:
        cases = [(1, p) for p in seqs] + ([(4, 512), (16, 128)] if not small else [(2, 16)])
        for b, p in cases:
            q = torch.randn(b, hq, p, d, device=dev, dtype=DT)
            k = torch.randn(b, hk, p, d, device=dev, dtype=DT)
            v = torch.randn_like(k)
            pre.append(
                {"hq": hq, "hk": hk, "b": b, "p": p, "ms": timeit(lambda: _prefill_attn(q, k, v))}
            )
        OUT["attn_prefill"] = pre
        save(out)
    try:
        from torch.nn.attention.bias import causal_lower_right

        have_lr = True
    except Exception:
        have_lr = False
    for hq, hk in HEADS[:2]:
        for c in [256, 512, 1024, 2048] if not small else [16]:
            for x in [0, 512, 2048, 6144] if not small else [0, 32]:
                q = torch.randn(1, hq, c, d, device=dev, dtype=DT)
                k = torch.randn(1, hk, x + c, d, device=dev, dtype=DT)
                v = torch.randn_like(k)
                g = hq // hk
                kk, vv = (k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)) if g > 1 else (k, v)
                how = "causal_lower_right"
                if have_lr:
                    mask: Any = causal_lower_right(c, x + c)
                else:
                    how = "bool_mask"
                    mask = torch.ones(c, x + c, dtype=torch.bool, device=dev).tril(diagonal=x)
                try:
                    ms = timeit(lambda: F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask))
                except Exception as exc:
                    ms, how = float("nan"), f"error {exc!r}"
                chunk.append({"hq": hq, "hk": hk, "c": c, "x": x, "ms": ms, "how": how})
        OUT["attn_chunk"] = chunk
        save(out)
    for hq, hk in HEADS:
        for b in [1, 4, 16, 64, 256] if not small else [1, 4]:
            for c in [128, 512, 2048, 8192] if not small else [16, 64]:
                if b * c * hk > 256 * 2048 * 32:
                    continue
                q = torch.randn(b, hq, d, device=dev, dtype=DT)
                k = torch.randn(b, hk, c, d, device=dev, dtype=DT)
                v = torch.randn_like(k)
                dec.append(
                    {
                        "hq": hq,
                        "hk": hk,
                        "b": b,
                        "c": c,
                        "ms": timeit(lambda: _packed_decode(q, k, v)),
                    }
                )
        OUT["attn_decode"] = dec
        save(out)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def section_elementwise(out: Path, dev: torch.device, small: bool) -> None:
    rows = []
    H, inter = (4096, 14336) if not small else (64, 224)
    w = torch.ones(H, device=dev, dtype=DT)
    for m in GEMM_M if not small else [1, 16]:
        x = torch.randn(m, H, device=dev, dtype=DT)
        y = torch.randn(m, 2 * inter, device=dev, dtype=DT)
        rows.append(
            {
                "op": "rms_norm",
                "m": m,
                "width": H,
                "ms": timeit(lambda: F.rms_norm(x, (H,), w, 1e-5)),
            }
        )
        rows.append(
            {
                "op": "silu_mul",
                "m": m,
                "width": inter,
                "ms": timeit(lambda: F.silu(y[:, :inter]) * y[:, inter:]),
            }
        )
        rows.append({"op": "add", "m": m, "width": H, "ms": timeit(lambda: x + x)})
    OUT["elementwise"] = rows
    save(out)


class Decoder:
    """One rank of a Llama-style decoder (random bf16 weights), for timing whole iterations."""

    def __init__(self, cfg: dict[str, Any], tp: int, dev: torch.device, layers: int | None = None):
        self.L = layers or cfg["num_hidden_layers"]
        self.H, self.d = cfg["hidden_size"], head_dim(cfg)
        self.hq = cfg["num_attention_heads"] // tp
        self.hk = max(cfg["num_key_value_heads"] // tp, 1)
        self.inter = cfg["intermediate_size"] // tp
        sh = rank_shapes(cfg, tp)

        def w(nk: tuple[int, int]) -> torch.Tensor:
            return torch.empty(nk, device=dev, dtype=DT).normal_(0, 0.02)

        self.layers = [
            {k: w(sh[k]) for k in ("qkv", "o", "gate_up", "down")}
            | {
                "n1": torch.ones(self.H, device=dev, dtype=DT),
                "n2": torch.ones(self.H, device=dev, dtype=DT),
            }
            for _ in range(self.L)
        ]
        self.lm_head = w(sh["lm_head"])
        self.dev = dev
        self.params = (
            sum(t.numel() for lay in self.layers for t in lay.values()) + self.lm_head.numel() * 2
        )

    def _mlp_and_proj(
        self, x: torch.Tensor, lay: dict[str, torch.Tensor], attn: torch.Tensor
    ) -> torch.Tensor:
        x = x + F.linear(attn, lay["o"])
        h = F.rms_norm(x, (self.H,), lay["n2"], 1e-5)
        gu = F.linear(h, lay["gate_up"])
        return x + F.linear(F.silu(gu[:, : self.inter]) * gu[:, self.inter :], lay["down"])

    def _qkv(self, x: torch.Tensor, lay: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        h = F.rms_norm(x, (self.H,), lay["n1"], 1e-5)
        qkv = F.linear(h, lay["qkv"])
        a, b = self.hq * self.d, self.hk * self.d
        return qkv[:, :a], qkv[:, a : a + b], qkv[:, a + b :]

    def prefill(self, x: torch.Tensor, b: int, p: int) -> torch.Tensor:
        """b prompts of p tokens, x (b*p, H); returns the last-token logits."""
        for lay in self.layers:
            q, k, v = self._qkv(x, lay)
            q = q.view(b, p, self.hq, self.d).transpose(1, 2)
            k = k.reshape(b, p, self.hk, self.d).transpose(1, 2)
            v = v.reshape(b, p, self.hk, self.d).transpose(1, 2)
            o = _prefill_attn(q, k, v).transpose(1, 2).reshape(b * p, self.hq * self.d)
            x = self._mlp_and_proj(x, lay, o)
        last = x.view(b, p, self.H)[:, -1]
        return F.linear(F.rms_norm(last, (self.H,), self.layers[-1]["n2"], 1e-5), self.lm_head)

    def decode(
        self, x: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]], c: int
    ) -> torch.Tensor:
        """b requests with c cached tokens each, x (b, H); cache[l] = (K, V) (b, hk, >c, d)."""
        bsz = x.shape[0]
        for lay, (kc, vc) in zip(self.layers, cache, strict=True):
            q, k, v = self._qkv(x, lay)
            kc[:, :, c] = k.view(bsz, self.hk, self.d)
            vc[:, :, c] = v.view(bsz, self.hk, self.d)
            o = _packed_decode(q.view(bsz, self.hq, self.d), kc[:, :, : c + 1], vc[:, :, : c + 1])
            x = self._mlp_and_proj(x, lay, o.reshape(bsz, self.hq * self.d))
        return F.linear(F.rms_norm(x, (self.H,), self.layers[-1]["n2"], 1e-5), self.lm_head)

    def mixed(
        self, x: torch.Tensor, chunk: int, cache: list[tuple[torch.Tensor, torch.Tensor]], c: int
    ) -> torch.Tensor:
        """A prompt chunk of ``chunk`` tokens (nothing cached before it) and decodes of the
        cache's b requests, x (chunk + b, H)."""
        bsz = x.shape[0] - chunk
        for lay, (kc, vc) in zip(self.layers, cache, strict=True):
            q, k, v = self._qkv(x, lay)
            qa = q[:chunk].reshape(1, chunk, self.hq, self.d).transpose(1, 2)
            ka = k[:chunk].reshape(1, chunk, self.hk, self.d).transpose(1, 2)
            va = v[:chunk].reshape(1, chunk, self.hk, self.d).transpose(1, 2)
            oa = _prefill_attn(qa, ka, va).transpose(1, 2).reshape(chunk, self.hq * self.d)
            kc[:, :, c] = k[chunk:].reshape(bsz, self.hk, self.d)
            vc[:, :, c] = v[chunk:].reshape(bsz, self.hk, self.d)
            ob = _packed_decode(
                q[chunk:].reshape(bsz, self.hq, self.d), kc[:, :, : c + 1], vc[:, :, : c + 1]
            )
            x = self._mlp_and_proj(x, lay, torch.cat([oa, ob.reshape(bsz, self.hq * self.d)]))
        return F.linear(F.rms_norm(x[-1:], (self.H,), self.layers[-1]["n2"], 1e-5), self.lm_head)


def _graph(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` captured as a CUDA graph (replayed per call), or ``fn`` itself on the CPU."""
    if not torch.cuda.is_available():
        return fn
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def section_e2e(out: Path, nvml: Nvml, dev: torch.device, small: bool, window_s: float) -> None:
    OUT.setdefault("e2e", [])
    OUT.setdefault("power", [])
    import gc

    for model, tp in E2E:
        _e2e_model(out, nvml, dev, small, window_s, model, tp)
        gc.collect()  # the model, its cache and its CUDA graphs' pools go before the next
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _e2e_model(
    out: Path, nvml: Nvml, dev: torch.device, small: bool, window_s: float, model: str, tp: int
) -> None:
    if True:
        cfg = dict(MODELS[model])
        if small:
            cfg.update(
                hidden_size=256,
                intermediate_size=512,
                vocab_size=1000,
                num_attention_heads=8,
                num_key_value_heads=min(8, cfg["num_key_value_heads"]),
            )
        t0 = time.perf_counter()
        dec = Decoder(cfg, tp, dev, layers=2 if small else None)
        tag = f"{model}/tp{tp}"
        build_s = time.perf_counter() - t0
        rows = OUT["e2e"]
        kv_per_tok = dec.L * dec.hk * dec.d * 2 * 2
        big = kv_per_tok > 200_000
        prefills = [(1, p) for p in ([128, 512, 1024, 2048, 4096, 8192] if not small else [16, 64])]
        prefills += [(4, 512), (16, 128)] if not small else [(2, 16)]
        with torch.inference_mode():
            for b, p in prefills:
                x = torch.randn(b * p, dec.H, device=dev, dtype=DT)
                ms = timeit(lambda: dec.prefill(x, b, p), target_ms=60)
                rows.append(
                    {"model": tag, "kind": "prefill", "b": b, "p": p, "ms": ms, "mode": "eager"}
                )
                if (b, p) in [(1, 512), (1, 2048), (1, 8192)] and not small:
                    OUT["power"].append(
                        {
                            "what": f"{tag} prefill b={b} p={p}",
                            "model": tag,
                            "kind": "prefill",
                            "b": b,
                            "p": p,
                        }
                        | power_window(nvml, lambda: dec.prefill(x, b, p), window_s)
                    )
            save(out)
            bmax = 64 if big else 256
            cmax = 2048 if not small else 64
            cache = [
                (
                    torch.zeros(bmax, dec.hk, cmax + 1, dec.d, device=dev, dtype=DT),
                    torch.zeros(bmax, dec.hk, cmax + 1, dec.d, device=dev, dtype=DT),
                )
                for _ in range(dec.L)
            ]
            bs = [1, 8, 32, 64, 128, 256] if not small else [1, 4]
            for c in [512, 2048] if not small else [16, 64]:
                for b in bs:
                    if b > bmax:
                        continue
                    view = [(k[:b], v[:b]) for k, v in cache]
                    x = torch.randn(b, dec.H, device=dev, dtype=DT)
                    mode = "cuda_graph" if torch.cuda.is_available() else "eager"
                    try:
                        run = _graph(lambda: dec.decode(x, view, c))
                    except Exception as exc:  # capture failed: time it eager, say so
                        mode = f"eager (graph capture failed: {exc!r})"
                        run = lambda: dec.decode(x, view, c)  # noqa: E731
                    ms = timeit(run, target_ms=60)
                    rows.append(
                        {"model": tag, "kind": "decode", "b": b, "c": c, "ms": ms, "mode": mode}
                    )
                    if c == cmax and b in (1, 64, bmax):
                        rows.append(
                            {
                                "model": tag,
                                "kind": "decode",
                                "b": b,
                                "c": c,
                                "mode": "eager",
                                "ms": timeit(lambda: dec.decode(x, view, c), target_ms=60),
                            }
                        )
                        if not small:
                            OUT["power"].append(
                                {
                                    "what": f"{tag} decode b={b} c={c}",
                                    "model": tag,
                                    "kind": "decode",
                                    "b": b,
                                    "c": c,
                                }
                                | power_window(nvml, run, window_s)
                            )
                    del run
                save(out)
            for chunk, b, c in (
                [(512, 32, 1024), (512, 64, 2048), (2048, 64, 2048), (256, 128, 1024)]
                if not small
                else [(16, 4, 32)]
            ):
                if b > bmax:
                    continue
                view = [(k[:b], v[:b]) for k, v in cache]
                x = torch.randn(chunk + b, dec.H, device=dev, dtype=DT)
                ms = timeit(lambda: dec.mixed(x, chunk, view, c), target_ms=60)
                rows.append(
                    {
                        "model": tag,
                        "kind": "mixed",
                        "chunk": chunk,
                        "b": b,
                        "c": c,
                        "ms": ms,
                        "mode": "eager",
                    }
                )
                if (chunk, b) == (512, 64) and not small:
                    OUT["power"].append(
                        {
                            "what": f"{tag} mixed chunk={chunk} b={b} c={c}",
                            "model": tag,
                            "kind": "mixed",
                            "chunk": chunk,
                            "b": b,
                            "c": c,
                        }
                        | power_window(nvml, lambda: dec.mixed(x, chunk, view, c), window_s)
                    )
        OUT.setdefault("e2e_models", []).append(
            {
                "model": tag,
                "layers": dec.L,
                "params_rank": dec.params,
                "kv_bytes_per_token_rank": kv_per_tok,
                "build_s": build_s,
            }
        )
        save(out)


def section_power_kernels(
    out: Path, nvml: Nvml, dev: torch.device, small: bool, window_s: float
) -> None:
    n = 8192 if not small else 256
    a = torch.randn(n, n, device=dev, dtype=DT)
    b = torch.randn(n, n, device=dev, dtype=DT)
    OUT.setdefault("power", []).append(
        {"what": f"bf16 matmul {n}^3", "kind": "gemm"} | power_window(nvml, lambda: a @ b, window_s)
    )
    x = torch.empty(int((256 if small else 4096) * 2**20), dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    OUT["power"].append(
        {"what": f"copy {x.numel()} bytes", "kind": "copy", "bytes": x.numel()}
        | power_window(nvml, lambda: y.copy_(x), window_s)
    )
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if nvml.h is not None:
        time.sleep(2.0)
        e0, t0 = nvml.energy_mj(), time.perf_counter()
        samples = []
        while time.perf_counter() - t0 < 2.0:
            samples.append(nvml.sample())
            time.sleep(0.05)
        e1, t1 = nvml.energy_mj(), time.perf_counter()
        OUT["idle"] = {
            "seconds": t1 - t0,
            "energy_power_w": None if e0 is None or e1 is None else (e1 - e0) / 1e3 / (t1 - t0),
            "sampled_power_w": sum(s[0] for s in samples) / len(samples),
            "sm_clock_mhz_mean": sum(s[1] for s in samples) / len(samples),
        }
    save(out)


def main(argv: list[str] | None = None) -> int:
    """Measure LLM operators, whole iterations and power on a CUDA GPU (see the module docstring)."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--out", default="results/llm-gpu", help="output folder")
    p.add_argument(
        "--small", action="store_true", help="tiny shapes (a smoke test, also on the CPU)"
    )
    p.add_argument("--power-window-s", type=float, default=1.5, help="seconds per power window")
    p.add_argument(
        "--sections",
        default="meta,gemm,attention,elementwise,e2e,power",
        help="comma-separated sections to run",
    )
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available() and not args.small:
        print("error: no CUDA device (use --small for a CPU smoke test)", file=sys.stderr)
        return 2
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    nvml = Nvml()
    torch.backends.cuda.matmul.allow_tf32 = False
    secs = args.sections.split(",")
    t_all = time.perf_counter()
    OUT["timings_s"] = {}
    for name, fn in [
        ("meta", lambda: section_meta(out, nvml, dev, args.small)),
        ("gemm", lambda: section_gemm(out, dev, args.small)),
        ("attention", lambda: section_attention(out, dev, args.small)),
        ("elementwise", lambda: section_elementwise(out, dev, args.small)),
        ("power", lambda: section_power_kernels(out, nvml, dev, args.small, args.power_window_s)),
        ("e2e", lambda: section_e2e(out, nvml, dev, args.small, args.power_window_s)),
    ]:
        if name not in secs:
            continue
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # record and go on: one failure must not lose the rest
            import traceback

            OUT.setdefault("errors", {})[name] = traceback.format_exc()
            print(f"section {name} failed: {exc!r}", flush=True)
        OUT["timings_s"][name] = time.perf_counter() - t0
        print(f"section {name}: {OUT['timings_s'][name]:.1f} s", flush=True)
        save(out)
    OUT["total_s"] = time.perf_counter() - t_all
    save(out)
    print(f"wrote {out / 'llm_gpu_ops.json'} in {OUT['total_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
