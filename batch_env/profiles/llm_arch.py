"""LLM profiles from a model's architecture and a GPU's specs (a roofline per operator).

``batch-env profile llm --model-config config.json --gpu h100-sxm --tp 2`` (or
:func:`build_profile`) turns a model hub's ``config.json`` and a GPU spec into an LLM
profile (:mod:`batch_env.profiles.llm_profile`) that every LLM env loads: iteration times,
power and KV-cache size, at any supported SM clock (:meth:`LLMProfile.at_clock
<batch_env.profiles.llm_profile.LLMProfile.at_clock>`). ``docs/llm_arch.md`` explains the
model with its sources; this docstring is the reference.

Inputs
    :class:`ModelArch` (:meth:`ModelArch.from_config`): ``num_hidden_layers``,
    ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads`` (default: the
    attention heads), ``intermediate_size``, ``vocab_size``, optional ``head_dim`` (default
    hidden / heads), ``tie_word_embeddings``, ``torch_dtype`` (2-byte types only); mixture
    of experts as Mixtral (``num_local_experts``, ``num_experts_per_tok``; the experts'
    width is ``intermediate_size``) or Qwen-MoE (``num_experts``, ``num_experts_per_tok``,
    ``moe_intermediate_size``, ``shared_expert_intermediate_size``).
    :class:`GPUSpec` (:func:`load_gpu`): a shipped name (:func:`available_gpus`:
    ``a100-80gb``, ``h100-sxm``, ``h200``) or a JSON file/dict with the datasheet figures
    (dense bf16 peak and the clock it is quoted at, HBM bandwidth and size, board power,
    idle power, SM clock range, NVLink and all-reduce figures), the fitted efficiencies and
    the power model, each with its source.

The iteration model
    Per GPU of a tensor-parallel group of ``tp``, every operator of every layer as vLLM
    runs it (fused norms, rotary and SiLU kernels, one attention call):

    * a GEMM of ``m`` tokens through an ``n x k`` weight:
      ``gemm_floor + max(2 m n k / (peak(f) x eta_compute), bytes / (bandwidth x eta_memory))``,
      bytes = 2 (m k + n k + m n);
    * an elementwise kernel: ``kernel_floor + bytes / (bandwidth x eta_memory)``;
    * prefill attention (causal, FlashAttention): ``kernel_floor + flops / (peak(f) x
      eta_attention)``, flops = 2 x heads x head_dim x sum p_i**2 (for a chunk of c tokens
      after x cached: c**2 + 2 c x, as
      :meth:`~batch_env.profiles.llm_profile.LLMProfile.mixed_time_s`);
    * decode attention: ``kernel_floor + KV bytes read / (bandwidth x eta_kv)``;
    * tensor parallel: two all-reduces of ``m x hidden`` values per layer, ``allreduce_us +
      2 (tp - 1) / tp x bytes / bus bandwidth`` (the GPU spec's figures, or
      :func:`build_profile`'s ``allreduce_us`` / ``allreduce_gb_s``: vLLM V0's, fitted on
      published runs, are 18.47 us and 128.1 GB/s on H100s, docs/validation.md);
    * mixture of experts: the router, then each active expert's gate-up and down GEMMs on
      its share of the ``m x top_k`` routed tokens (active experts: the expected number
      under uniform routing, ``E (1 - (1 - k/E)**m)``), in one fused kernel each (one
      floor), plus shared experts;
    * the LM head on one row per prefill iteration and one per decode request.

    The GEMMs and elementwise kernels of ``m`` tokens make the profile's tables; the
    attention terms its coefficients (``ms_per_sq_token``, ``ms_per_context_token``;
    ``ms_per_token`` is 0); the attention floors go into the tables.

The clock (``f`` MHz) and power
    ``peak(f) = peak_tflops x f / peak_tflops_clock_mhz``; bandwidth does not depend on the
    SM clock; floors do not either. Board power of one GPU during an iteration::

        P(f) = idle + clock_w r + mem_w x u_mem (1 - s + s r) + sm_w x u_sm r,  r = (f/f_max)**alpha

    with ``u_sm`` the fraction of the iteration the tensor cores need at clock f (the
    compute terms' sum over the iteration time) and ``u_mem`` the same for HBM traffic;
    ``s`` (the spec's optional ``mem_clock_share``, default 0) is the share of the memory
    traffic's power that scales with the SM clock (the L2, crossbar and load/store units
    that move it run in the SM's clock and voltage domain). At ``f_max`` it drops out.
    Neither ``alpha`` nor ``s`` is pinned by a measurement at several clocks: the shipped
    specs have alpha 2 and s 0, and docs/validation.md ("The clock where it can be
    checked") gives the range the published per-clock figures allow.
    Where P at the requested clock would exceed the board's power limit the GPU lowers its
    clock until it does not (its own power management, as measured on the H200: compute-
    bound prefills ran at 1476-1570 MHz at the 700 W limit, memory-bound decodes at the
    1980 MHz maximum); the iteration runs at that effective clock. The fitted timings are
    taken as measured at the default setting, i.e. at the effective clock the model gives
    for the maximum clock, so at the default every figure is the fitted one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..checks import check_number

__all__ = [
    "GPUSpec",
    "IterationCost",
    "ModelArch",
    "available_gpus",
    "available_models",
    "build_profile",
    "load_gpu",
    "load_model_config",
]

_DTYPES_2B = ("bfloat16", "float16", "bf16", "fp16", "half")


def _cfg_error(origin: str, field_: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{origin}: field '{field_}' = {value!r} is invalid: must be {allowed}")


def _read_json(x: str | os.PathLike[str], what: str) -> dict[str, Any]:
    path = os.fspath(x)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what} file {path!r} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"{what} {path!r} is a folder: give the JSON file")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} file {path!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} file {path!r} must hold a JSON object, not {type(data).__name__}")
    return data


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer's shape, as its ``config.json`` gives it.

    Build it with :meth:`from_config`; every field is a positive integer except the MoE
    ones (0 for a dense model).
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0
    tie_word_embeddings: bool = False
    dtype_bytes: int = 2
    #: fields the config left out that took a default, each a sentence (``num_key_value_heads``
    #: missing: multi-head attention, Hugging Face's default), said by ``batch-env profile
    #: llm`` and kept in a built profile's citations
    assumed: tuple[str, ...] = ()

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | str | os.PathLike[str], name: str | None = None
    ) -> ModelArch:
        """The architecture of a model hub ``config.json`` (a path or the parsed dict).

        :param config: the file or its dict.
        :param name: the model's name (default: ``_name_or_path`` or the file's name).
        :raises ValueError: a missing or invalid field, named with its value.
        """
        if isinstance(config, (str, os.PathLike)):
            origin = f"model config {os.fspath(config)!r}"
            cfg = _read_json(config, "model config")
            name = name or cfg.get("_name_or_path") or os.path.splitext(os.path.basename(config))[0]
        elif isinstance(config, Mapping):
            origin = "model config"
            cfg = dict(config)
        else:
            raise ValueError(
                f"model config={config!r} is invalid: expected a path to a config.json or a dict"
            )
        if cfg.get("model_type") in ("deepseek_v2", "deepseek_v3") or "kv_lora_rank" in cfg:
            raise _cfg_error(
                origin,
                "model_type",
                cfg.get("model_type"),
                "a model with grouped-query or multi-head attention (multi-head latent "
                "attention, as DeepSeek-V2/V3's, is not modelled)",
            )

        def need(key: str, default: Any = None) -> int:
            if key not in cfg or cfg[key] is None:
                if default is not None:
                    return int(default)
                raise ValueError(f"{origin}: missing required field '{key}'")
            v = cfg[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise _cfg_error(origin, key, v, "an integer >= 1")
            return v

        layers = need("num_hidden_layers")
        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        kv_heads = need("num_key_value_heads", heads)
        assumed = []
        if cfg.get("num_key_value_heads") is None:
            assumed.append(
                f"num_key_value_heads is not in the config: taken as num_attention_heads = "
                f"{heads} (multi-head attention, Hugging Face's default); a grouped-query "
                "model must give it, or its KV cache comes out "
                f"{heads} / (its KV heads) times too large"
            )
        if heads % kv_heads:
            raise _cfg_error(
                origin,
                "num_key_value_heads",
                kv_heads,
                f"a divisor of num_attention_heads = {heads}",
            )
        if "head_dim" in cfg and cfg["head_dim"] is not None:
            head_dim = need("head_dim")
        else:
            if hidden % heads:
                raise _cfg_error(
                    origin,
                    "hidden_size",
                    hidden,
                    f"a multiple of num_attention_heads = {heads} (or give head_dim)",
                )
            head_dim = hidden // heads
        vocab = need("vocab_size")
        experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
        top_k = int(cfg.get("num_experts_per_tok") or 0) if experts else 0
        if experts:
            if experts < 1 or not 1 <= top_k <= experts:
                raise _cfg_error(
                    origin,
                    "num_experts_per_tok",
                    cfg.get("num_experts_per_tok"),
                    f"an integer in 1..{experts} (the number of experts)",
                )
            expert_inter = (
                need("moe_intermediate_size")
                if "moe_intermediate_size" in cfg
                else need("intermediate_size")
            )
            shared = int(cfg.get("shared_expert_intermediate_size") or 0)
            inter = expert_inter
        else:
            inter = need("intermediate_size")
            expert_inter, shared = 0, 0
        dtype = cfg.get("torch_dtype", "bfloat16")
        if dtype is not None and str(dtype) not in _DTYPES_2B:
            raise _cfg_error(
                origin, "torch_dtype", dtype, f"one of {list(_DTYPES_2B)} (16-bit weights)"
            )
        tie = cfg.get("tie_word_embeddings", False)
        return cls(
            name=str(name or "model"),
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate=inter,
            vocab=vocab,
            experts=experts,
            experts_per_token=top_k,
            expert_intermediate=expert_inter,
            shared_expert_intermediate=shared,
            tie_word_embeddings=bool(tie),
            assumed=tuple(assumed),
        )

    # ------------------------------------------------------------------ counts

    @property
    def moe(self) -> bool:
        """Whether the MLP is a mixture of experts."""
        return self.experts > 0

    def params(self) -> int:
        """Parameters of the whole model (embeddings, LM head unless tied, every layer)."""
        h, d = self.hidden, self.head_dim
        attn = h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h
        if self.moe:
            mlp = self.experts * 3 * h * self.expert_intermediate + h * self.experts
            mlp += 3 * h * self.shared_expert_intermediate + (
                h if self.shared_expert_intermediate else 0
            )
        else:
            mlp = 3 * h * self.intermediate
        per_layer = attn + mlp + 2 * h
        emb = self.vocab * h * (1 if self.tie_word_embeddings else 2)
        return self.layers * per_layer + emb + h

    def check_tp(self, tp: int) -> None:
        """Raise ``ValueError`` unless ``tp`` GPUs can shard this model (as vLLM requires):
        ``tp`` divides the attention heads and the MLP width, and the KV heads divide
        among the ranks or are replicated on them (``tp`` a multiple of the KV heads)."""
        check_number("tp", tp, low=1, integer=True)
        if self.heads % tp:
            raise ValueError(
                f"--tp={tp} is invalid for {self.name}: it must divide num_attention_heads = "
                f"{self.heads}"
            )
        if self.kv_heads % tp and tp % self.kv_heads:
            raise ValueError(
                f"--tp={tp} is invalid for {self.name}: num_key_value_heads = {self.kv_heads} "
                "must be a multiple or a divisor of it"
            )
        width = self.expert_intermediate if self.moe else self.intermediate
        if width % tp:
            raise ValueError(
                f"--tp={tp} is invalid for {self.name}: it must divide the MLP width "
                f"({'moe_' if self.moe else ''}intermediate_size = {width})"
            )

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads each rank holds (replicated where ``tp`` exceeds the KV heads)."""
        return max(self.kv_heads // tp, 1)

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """KV-cache bytes per token summed over the ``tp`` ranks."""
        return 2 * self.layers * self.kv_heads_per_rank(tp) * tp * self.head_dim * self.dtype_bytes


def load_model_config(x: str | os.PathLike[str] | Mapping[str, Any] | ModelArch) -> ModelArch:
    """A :class:`ModelArch` from a shipped config name (:func:`available_models`), a
    ``config.json`` path, a dict or a :class:`ModelArch`."""
    if isinstance(x, ModelArch):
        return x
    if isinstance(x, str) and x in available_models():
        path = resources.files("batch_env.profiles").joinpath("models").joinpath(f"{x}.json")
        return ModelArch.from_config(json.loads(path.read_text(encoding="utf-8")), name=x)
    if (
        isinstance(x, (str, os.PathLike))
        and not os.path.exists(os.fspath(x))
        and not str(x).endswith(".json")
    ):
        raise ValueError(
            f"--model-config={os.fspath(x)!r} is neither a config.json file nor a shipped model "
            f"config ({', '.join(available_models())})"
        )
    return ModelArch.from_config(x)


def available_models() -> list[str]:
    """Names of the shipped model configs (``batch_env/profiles/models/<name>.json``)."""
    d = resources.files("batch_env.profiles").joinpath("models")
    return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".json"))


# --------------------------------------------------------------------------- the GPU


_GPU_REQUIRED = (
    "name",
    "device",
    "peak_tflops",
    "peak_tflops_clock_mhz",
    "memory_bandwidth_gb_s",
    "memory_bytes",
    "tdp_w",
    "idle_power_w",
    "sm_clock_mhz",
    "allreduce",
    "efficiency",
    "power_model",
    "sources",
)
_EFF_FIELDS = (
    "eta_compute",
    "eta_memory",
    "gemm_floor_us",
    "kernel_floor_us",
    "eta_attention",
    "eta_kv",
)
_POWER_FIELDS = ("clock_w", "mem_w", "sm_w", "alpha")
#: optional power-model constants and their defaults (a spec without them has these)
_POWER_OPTIONAL = {"mem_clock_share": 0.0}


@dataclass(frozen=True)
class GPUSpec:
    """One GPU's datasheet figures, fitted efficiencies and power model (see the module
    docstring); build it with :func:`load_gpu`."""

    name: str
    device: str
    peak_tflops: float
    peak_tflops_clock_mhz: float
    memory_bandwidth_gb_s: float
    memory_bytes: int
    tdp_w: float
    idle_power_w: float
    min_clock_mhz: float
    max_clock_mhz: float
    clock_step_mhz: float
    allreduce_us: float
    allreduce_bus_gb_s: float
    efficiency: Mapping[str, float]
    power_model: Mapping[str, float]
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def peak_flops(self, clock_mhz: float) -> float:
        """Dense bf16 tensor FLOP/s at an SM clock."""
        return self.peak_tflops * 1e12 * clock_mhz / self.peak_tflops_clock_mhz

    def check_clock(self, clock_mhz: float, what: str = "clock_mhz") -> float:
        """``clock_mhz`` as a float, or ``ValueError`` naming the GPU's range."""
        try:
            check_number(what, clock_mhz, low=self.min_clock_mhz, high=self.max_clock_mhz)
        except ValueError as exc:
            raise ValueError(f"{exc} (the SM clock range of {self.name})") from None
        return float(clock_mhz)


def _gpu_dir() -> Any:
    return resources.files("batch_env.profiles").joinpath("gpus")


def available_gpus() -> list[str]:
    """Names of the shipped GPU specs (``batch_env/profiles/gpus/<name>.json``)."""
    return sorted(p.name[:-5] for p in _gpu_dir().iterdir() if p.name.endswith(".json"))


#: Other names of the shipped GPU specs (case does not matter).
GPU_ALIASES = {
    "a100": "a100-80gb",
    "a100-sxm": "a100-80gb",
    "a100-sxm4-80gb": "a100-80gb",
    "h100": "h100-sxm",
    "h100-80gb": "h100-sxm",
    "h100-sxm5-80gb": "h100-sxm",
    "h200-sxm": "h200",
}


def load_gpu(x: str | os.PathLike[str] | Mapping[str, Any] | GPUSpec) -> GPUSpec:
    """A :class:`GPUSpec` from a shipped name (or one of :data:`GPU_ALIASES`), a JSON path
    or a dict.

    :raises ValueError: an unknown name, or a missing or invalid field (named).
    """
    if isinstance(x, GPUSpec):
        return x
    if isinstance(x, Mapping):
        return _gpu_from_dict(dict(x), "GPU spec")
    if isinstance(x, str) and not os.path.exists(x):
        x = GPU_ALIASES.get(x.lower(), x.lower())
    if isinstance(x, str) and x in available_gpus():
        data = json.loads(_gpu_dir().joinpath(f"{x}.json").read_text(encoding="utf-8"))
        return _gpu_from_dict(data, f"GPU spec '{x}'")
    if isinstance(x, (str, os.PathLike)) and os.path.exists(os.fspath(x)):
        return _gpu_from_dict(_read_json(x, "GPU spec"), f"GPU spec {os.fspath(x)!r}")
    raise ValueError(
        f"--gpu={x!r} is invalid: expected a shipped GPU ({', '.join(available_gpus())}; also "
        f"{', '.join(sorted(GPU_ALIASES))}) or a path to a GPU spec JSON file"
    )


def _gpu_from_dict(d: dict[str, Any], origin: str) -> GPUSpec:
    missing = [k for k in _GPU_REQUIRED if k not in d]
    if missing:
        raise ValueError(
            f"{origin}: missing required field(s) {missing} (required: {list(_GPU_REQUIRED)})"
        )

    def num(key: str, v: Any, **bounds: Any) -> float:
        check_number(f"{origin}: field '{key}'", v, **bounds)
        return float(v)

    peak = d["peak_tflops"]
    if not isinstance(peak, Mapping) or "bf16" not in peak:
        raise _cfg_error(
            origin, "peak_tflops", peak, "an object with at least 'bf16' (dense TFLOP/s)"
        )
    clocks = d["sm_clock_mhz"]
    if not isinstance(clocks, Mapping) or not {"min", "max"} <= set(clocks):
        raise _cfg_error(origin, "sm_clock_mhz", clocks, "an object with 'min' and 'max' (MHz)")
    cmin = num("sm_clock_mhz.min", clocks["min"], low=1)
    cmax = num("sm_clock_mhz.max", clocks["max"], low=cmin)
    ar = d["allreduce"]
    if not isinstance(ar, Mapping) or not {"latency_us", "bus_bandwidth_gb_s"} <= set(ar):
        raise _cfg_error(
            origin, "allreduce", ar, "an object with 'latency_us' and 'bus_bandwidth_gb_s'"
        )
    eff, pm = d["efficiency"], d["power_model"]
    for key, sec, fields in (("efficiency", eff, _EFF_FIELDS), ("power_model", pm, _POWER_FIELDS)):
        if not isinstance(sec, Mapping):
            raise _cfg_error(origin, key, sec, f"an object with {list(fields)}")
        for f in fields:
            if f not in sec:
                raise ValueError(f"{origin}: field '{key}' lacks '{key}.{f}'")
            high = 1.0 if f.startswith("eta_") else None
            num(f"{key}.{f}", sec[f], low=0.0, low_inclusive=not f.startswith("eta_"), high=high)
    for f, default in _POWER_OPTIONAL.items():
        num(f"power_model.{f}", pm.get(f, default), low=0.0, high=1.0)
    tdp = num("tdp_w", d["tdp_w"], low=0.0, low_inclusive=False)
    mem = d["memory_bytes"]
    check_number(f"{origin}: field 'memory_bytes'", mem, low=1, integer=True)
    return GPUSpec(
        name=str(d["name"]),
        device=str(d["device"]),
        peak_tflops=num("peak_tflops.bf16", peak["bf16"], low=0.0, low_inclusive=False),
        peak_tflops_clock_mhz=num("peak_tflops_clock_mhz", d["peak_tflops_clock_mhz"], low=1),
        memory_bandwidth_gb_s=num(
            "memory_bandwidth_gb_s", d["memory_bandwidth_gb_s"], low=0.0, low_inclusive=False
        ),
        memory_bytes=int(mem),
        tdp_w=tdp,
        idle_power_w=num("idle_power_w", d["idle_power_w"], low=0.0, high=tdp),
        min_clock_mhz=cmin,
        max_clock_mhz=cmax,
        clock_step_mhz=float(clocks.get("step", 1)),
        allreduce_us=num("allreduce.latency_us", ar["latency_us"], low=0.0),
        allreduce_bus_gb_s=num(
            "allreduce.bus_bandwidth_gb_s", ar["bus_bandwidth_gb_s"], low=0.0, low_inclusive=False
        ),
        efficiency={f: float(eff[f]) for f in _EFF_FIELDS},
        power_model={
            **{f: float(pm[f]) for f in _POWER_FIELDS},
            **{f: float(pm.get(f, d)) for f, d in _POWER_OPTIONAL.items()},
        },
        raw=d,
    )


# --------------------------------------------------------------------------- costs


@dataclass
class IterationCost:
    """One iteration's cost, timed at the default setting: ``floor_s`` (kernel floors and
    all-reduce latency: no clock), ``parts`` = ``[(compute_s, memory_s), ...]`` one per
    roofline operator (which takes the larger), ``compute_s`` (work that adds up and
    scales with the clock, e.g. attention FLOPs) and ``memory_s`` (memory streams that add
    up, e.g. KV reads and elementwise kernels)."""

    floor_s: float = 0.0
    parts: list[tuple[float, float]] = field(default_factory=list)
    compute_s: float = 0.0
    memory_s: float = 0.0

    def add_roofline(self, compute_s: float, memory_s: float) -> None:
        """One operator that takes the larger of its compute and memory times."""
        self.parts.append((compute_s, memory_s))

    def times(self, k: float) -> IterationCost:
        """This cost repeated ``k`` times (e.g. one layer's, for every layer)."""
        return IterationCost(
            self.floor_s * k,
            [(c * k, m * k) for c, m in self.parts],
            self.compute_s * k,
            self.memory_s * k,
        )

    def add(self, other: IterationCost) -> None:
        """Add another cost's terms to this one."""
        self.floor_s += other.floor_s
        self.parts.extend(other.parts)
        self.compute_s += other.compute_s
        self.memory_s += other.memory_s

    def time_s(self, scale: float = 1.0) -> float:
        """Seconds with every compute term multiplied by ``scale`` (``f_ref / f``)."""
        return (
            self.floor_s
            + sum(max(c * scale, m) for c, m in self.parts)
            + self.compute_s * scale
            + self.memory_s
        )

    def utilization(self, scale: float = 1.0) -> tuple[float, float]:
        """``(u_sm, u_mem)``: tensor-core and HBM busy fractions of the iteration."""
        t = self.time_s(scale)
        if t <= 0:
            return 0.0, 0.0
        c = sum(p[0] for p in self.parts) * scale + self.compute_s * scale
        m = sum(p[1] for p in self.parts) + self.memory_s
        return min(c / t, 1.0), min(m / t, 1.0)


class CostModel:
    """The per-operator roofline of one model on ``tp`` GPUs of one kind at a reference
    clock (the GPU's maximum unless given); see the module docstring."""

    def __init__(self, arch: ModelArch, gpu: GPUSpec, tp: int = 1, comm: bool = True) -> None:
        """:param comm: include the tensor-parallel all-reduces (False: one rank's compute)."""
        arch.check_tp(tp)
        self.arch, self.gpu, self.tp, self.comm = arch, gpu, tp, comm
        e = gpu.efficiency
        self.flops = gpu.peak_flops(gpu.max_clock_mhz)
        self.bw = gpu.memory_bandwidth_gb_s * 1e9
        self.eta_c, self.eta_m = e["eta_compute"], e["eta_memory"]
        self.g_floor, self.k_floor = e["gemm_floor_us"] * 1e-6, e["kernel_floor_us"] * 1e-6
        self.eta_a, self.eta_kv = e["eta_attention"], e["eta_kv"]
        a = arch
        self.hq = a.heads // tp
        self.hk = a.kv_heads_per_rank(tp)
        self.d = a.head_dim
        self.inter = (a.expert_intermediate if a.moe else a.intermediate) // tp
        self.shared = a.shared_expert_intermediate // tp
        self.vocab = -(-a.vocab // tp)
        self.w = a.dtype_bytes
        self.kv_layer_token = 2 * self.hk * self.d * self.w  # K and V of one token, one layer

    # ---- operators

    def _gemm(
        self,
        c: IterationCost,
        m: float,
        n: int,
        k: int,
        times: float = 1.0,
        kernels: float | None = None,
    ) -> None:
        """``times`` GEMMs of ``m`` tokens through an ``n x k`` weight, in ``kernels``
        launches (default one each; a fused MoE kernel runs every expert in one)."""
        if m <= 0:
            return
        comp = 2.0 * m * n * k / (self.flops * self.eta_c)
        mem = self.w * (m * k + n * k + m * n) / (self.bw * self.eta_m)
        c.floor_s += self.g_floor * (times if kernels is None else kernels)
        for _ in range(int(times)):
            c.add_roofline(comp, mem)
        frac = times - int(times)
        if frac:
            c.add_roofline(comp * frac, mem * frac)

    def _elementwise(self, c: IterationCost, nbytes: float, kernels: int = 1) -> None:
        c.floor_s += self.k_floor * kernels
        c.memory_s += nbytes / (self.bw * self.eta_m)

    def _allreduce(self, c: IterationCost, nbytes: float) -> None:
        if self.tp == 1:
            return
        g = self.gpu
        c.floor_s += g.allreduce_us * 1e-6
        c.memory_s += 2.0 * (self.tp - 1) / self.tp * nbytes / (g.allreduce_bus_gb_s * 1e9)

    def _mlp(self, c: IterationCost, m: int) -> None:
        a, h = self.arch, self.arch.hidden
        if not a.moe:
            self._gemm(c, m, 2 * self.inter, h)
            self._elementwise(c, 3 * m * self.inter * self.w)
            self._gemm(c, m, h, self.inter)
            return
        self._gemm(c, m, a.experts, h)  # router
        routed = m * a.experts_per_token
        active = a.experts * (1.0 - (1.0 - a.experts_per_token / a.experts) ** m)
        per = routed / active
        # vLLM's fused MoE kernel: every active expert's GEMM in one launch
        self._gemm(c, per, 2 * self.inter, h, times=active, kernels=1)
        self._elementwise(c, 3 * routed * self.inter * self.w)
        self._gemm(c, per, h, self.inter, times=active, kernels=1)
        if self.shared:
            self._gemm(c, m, 2 * self.shared, h)
            self._elementwise(c, 3 * m * self.shared * self.w)
            self._gemm(c, m, h, self.shared)

    def token_ops(self, m: int, logit_rows: int) -> IterationCost:
        """Everything but attention for an iteration of ``m`` tokens (``logit_rows`` of
        them get logits): per layer two fused add-norms, QKV, rotary and KV-cache write,
        output projection, MLP, two all-reduces; then the final norm and the LM head."""
        layer = IterationCost()
        h, w = self.arch.hidden, self.w
        self._elementwise(layer, 4 * m * h * w, kernels=2)  # fused residual add + RMSNorm, x2
        self._gemm(layer, m, (self.hq + 2 * self.hk) * self.d, h)
        kv_write = m * self.kv_layer_token
        self._elementwise(layer, 2 * m * (self.hq + self.hk) * self.d * w + kv_write, kernels=2)
        self._gemm(layer, m, h, self.hq * self.d)
        self._mlp(layer, m)
        if self.comm:
            self._allreduce(layer, m * h * w)
            self._allreduce(layer, m * h * w)
        c = layer.times(self.arch.layers)
        self._elementwise(c, 2 * logit_rows * h * w)
        self._gemm(c, logit_rows, self.vocab, h)
        return c

    # ---- attention, per layer summed over layers

    def attention_flop_s(self) -> float:
        """Seconds per unit of ``sum p_i**2`` (causal prefill attention, all layers)."""
        return 2.0 * self.hq * self.d * self.arch.layers / (self.flops * self.eta_a)

    def kv_read_s(self) -> float:
        """Seconds per context token read by a decode step (all layers)."""
        return self.kv_layer_token * self.arch.layers / (self.bw * self.eta_kv)


# --------------------------------------------------------------------------- profile building


def _grid(limit: int) -> list[int]:
    """Table points 1..limit: 1, 2, 4, 8, then every 8 to 256, every 32 to 2048, every 128
    after (every point where GEMM time changes slope is within a few percent)."""
    pts = [1, 2, 4]
    x = 8
    while x <= limit:
        pts.append(x)
        x += 8 if x < 256 else 32 if x < 2048 else 128
    if pts[-1] != limit:
        pts.append(limit)
    return pts


def default_clock(gpu: GPUSpec, cost: IterationCost) -> float:
    """The clock an iteration runs at with the GPU's maximum requested: the maximum, or
    lower where the power model puts it over the board's power limit there. ``cost`` is
    timed at that effective clock (the fitted, measured timings), so its utilizations are
    the ones at the answer ``f0``, which solves ``P(f0) = tdp`` in closed form."""
    pm = gpu.power_model
    u_sm, u_mem = cost.utilization(1.0)
    fmax = gpu.max_clock_mhz
    if power_w(gpu, cost, fmax, 1.0) <= gpu.tdp_w:
        return fmax
    share = pm["mem_clock_share"]
    room = gpu.tdp_w - gpu.idle_power_w - pm["mem_w"] * u_mem * (1.0 - share)
    per = pm["clock_w"] + pm["sm_w"] * u_sm + pm["mem_w"] * u_mem * share
    if room <= 0 or per <= 0:
        return gpu.min_clock_mhz
    return max(gpu.min_clock_mhz, min(fmax, fmax * (room / per) ** (1.0 / pm["alpha"])))


def power_w(gpu: GPUSpec, cost: IterationCost, f: float, scale: float) -> float:
    """One GPU's board power (W) while it runs the iteration at clock ``f`` MHz, its
    compute terms ``scale`` times their fitted time (module docstring)."""
    pm = gpu.power_model
    u_sm, u_mem = cost.utilization(scale)
    r = (f / gpu.max_clock_mhz) ** pm["alpha"]
    mem = pm["mem_w"] * u_mem * (1.0 - pm["mem_clock_share"] * (1.0 - r))
    return gpu.idle_power_w + pm["clock_w"] * r + mem + pm["sm_w"] * u_sm * r


def at_clock(gpu: GPUSpec, cost: IterationCost, f_req: float) -> tuple[float, float, float]:
    """``(seconds, watts, effective MHz)`` of one iteration when the SM clock is set to
    ``f_req``: compute terms slow down by ``f0 / f`` below the default's effective clock
    ``f0`` (:func:`default_clock`) and do not change above it (the power limit holds the
    clock there)."""
    f0 = default_clock(gpu, cost)
    f1 = min(f_req, f0)
    s = f0 / f1
    return cost.time_s(s), power_w(gpu, cost, f1, s), f1


def build_profile(
    model: str | os.PathLike[str] | Mapping[str, Any] | ModelArch,
    gpu: str | os.PathLike[str] | Mapping[str, Any] | GPUSpec,
    tp: int = 1,
    *,
    clock_mhz: float | None = None,
    name: str | None = None,
    max_tokens: int = 8192,
    max_batch: int = 1024,
    power_context_tokens: int = 1024,
    gpu_memory_utilization: float = 0.9,
    overhead_ms: float = 0.0,
    overhead_ms_per_seq: float = 0.0,
    overhead_source: str | None = None,
    allreduce_us: float | None = None,
    allreduce_gb_s: float | None = None,
    allreduce_source: str | None = None,
) -> dict[str, Any]:
    """An LLM profile (the dict :func:`batch_env.llm_profile.load` reads) of ``model`` on
    ``tp`` GPUs of kind ``gpu`` with the SM clock set to ``clock_mhz``.

    :param model: a shipped model config name, a ``config.json`` path, a dict or a
        :class:`ModelArch`.
    :param gpu: a shipped GPU name, a spec JSON path, a dict or a :class:`GPUSpec`.
    :param tp: tensor-parallel degree.
    :param clock_mhz: the SM clock set (within the GPU's range), default its maximum.
    :param name: the profile's name (default ``<model>-<gpu>[-tp<N>]``).
    :param max_tokens: the prefill table's last point (tokens of one iteration).
    :param max_batch: the decode table's last point (requests of one step).
    :param power_context_tokens: the context per request at which decode time and power
        are split into table and coefficient (exact there) and decode power tabulated.
    :param gpu_memory_utilization: vLLM's fraction of GPU memory for weights and cache.
    :param overhead_ms: the serving stack's CPU time per iteration that the GPU waits for
        (the profile's ``overhead_ms``; 0: none, as vLLM's V1 engine overlaps it).
    :param overhead_ms_per_seq: the same per request decoded in an iteration (vLLM <= 0.5's
        scheduling and output processing: 0.056-0.085 ms, docs/validation.md).
    :param overhead_source: where the overhead figures come from (the profile's
        ``overhead_source``).
    :param allreduce_us: replaces the GPU spec's all-reduce time per call (us), e.g. the
        figure fitted for vLLM <= 0.6's engine (docs/validation.md); None keeps the spec's.
    :param allreduce_gb_s: replaces the GPU spec's all-reduce bus bandwidth (GB/s).
    :param allreduce_source: where those two come from (the profile's
        ``citations.allreduce``).
    :raises ValueError: invalid inputs, named.
    """
    arch = load_model_config(model)
    g = _with_allreduce(load_gpu(gpu), allreduce_us, allreduce_gb_s, allreduce_source)
    check_number("tp", tp, low=1, integer=True)
    tp = int(tp)
    arch.check_tp(tp)
    check_number("max_tokens", max_tokens, low=2, integer=True)
    check_number("max_batch", max_batch, low=2, integer=True)
    check_number("power_context_tokens", power_context_tokens, low=0, integer=True)
    check_number(
        "gpu_memory_utilization", gpu_memory_utilization, low=0.0, low_inclusive=False, high=1.0
    )
    check_number("overhead_ms", overhead_ms, low=0.0)
    check_number("overhead_ms_per_seq", overhead_ms_per_seq, low=0.0)
    f_req = g.max_clock_mhz if clock_mhz is None else g.check_clock(clock_mhz)
    cm = CostModel(arch, g, tp)
    weights = arch.params() * arch.dtype_bytes
    usable = g.memory_bytes * gpu_memory_utilization
    if weights / tp >= usable:
        raise ValueError(
            f"{arch.name} does not fit on {tp} x {g.name}: {weights / tp / 1e9:.1f} GB of weights "
            f"per GPU against {usable / 1e9:.1f} GB usable (gpu_memory_utilization "
            f"{gpu_memory_utilization}); use a larger --tp"
        )
    sq_s, kv_s = cm.attention_flop_s(), cm.kv_read_s()
    a_floor = cm.k_floor * arch.layers
    p_pts, d_pts = _grid(int(max_tokens)), _grid(int(max_batch))

    def prefill_cost(n: int) -> IterationCost:
        c = cm.token_ops(n, 1)
        c.floor_s += a_floor
        c.compute_s += sq_s * n * n
        return c

    # attention's FLOP coefficient scales as a long prompt's compute does (one number)
    _, _, f_long = at_clock(g, prefill_cost(p_pts[-1]), f_req)
    sq_at = sq_s * default_clock(g, prefill_cost(p_pts[-1])) / f_long
    pre_t, pre_w, dec_t, dec_w = [], [], [], []
    for n in p_pts:
        t, w, _ = at_clock(g, prefill_cost(n), f_req)
        pre_t.append(t - sq_at * n * n)  # exact for one prompt of n tokens
        pre_w.append(w * tp)
    for b in d_pts:
        c = cm.token_ops(b, b)
        c.floor_s += a_floor
        c.memory_s += kv_s * b * power_context_tokens
        t, w, _ = at_clock(g, c, f_req)
        dec_t.append(t - kv_s * b * power_context_tokens)  # exact at the reference context
        dec_w.append(w * tp)
    if min(pre_t) <= 0 or min(dec_t) <= 0:  # pragma: no cover - a spec with absurd figures
        raise ValueError(f"GPU spec '{g.name}': the model gives a non-positive iteration time")

    label = g.device if tp == 1 else f"{tp}x {g.device}, tensor parallel {tp}"
    pname = name or f"{arch.name}-{g.name}" + (f"-tp{tp}" if tp > 1 else "")
    return {
        "kind": "llm",
        "name": pname,
        "model": f"{arch.name} (bf16)",
        "device": label + ("" if clock_mhz is None else f", SM clock set to {f_req:g} MHz"),
        "source": (
            "batch-env's roofline model (batch_env/profiles/llm_arch.py) of the model's "
            f"config.json on the GPU spec '{g.name}' (efficiencies: "
            f"{g.raw.get('sources', {}).get('efficiency', 'see the GPU spec')}); modelled, not measured"
        ),
        "num_gpus": tp,
        "kv_bytes_per_token": arch.kv_bytes_per_token(tp),
        "weights_bytes": int(weights),
        "gpu_memory_bytes": int(g.memory_bytes),
        "gpu_memory_utilization": gpu_memory_utilization,
        "gpu_rated_power_w": g.tdp_w,
        "idle_power_w": g.idle_power_w * tp,
        "idle_power_source": str(g.raw.get("sources", {}).get("idle_power_w", "the GPU spec")),
        "overhead_ms": float(overhead_ms),
        "overhead_ms_per_seq": float(overhead_ms_per_seq),
        "overhead_source": overhead_source
        or (
            "none: the CPU's scheduling is taken as overlapped with the GPU, as vLLM's V1 engine "
            "does (docs/validation.md)"
            if not (overhead_ms or overhead_ms_per_seq)
            else "given by the user"
        ),
        "extrapolation": "none",
        "prefill": {
            "tokens": p_pts,
            "time_ms": [round(t * 1e3, 6) for t in pre_t],
            "ms_per_token": 0.0,
            "ms_per_sq_token": round(sq_at * 1e3, 15),
            "rule": "roofline per operator (batch_env/profiles/llm_arch.py): the table holds the "
            "token operators (GEMMs, norms, rotary, KV write, MLP, all-reduces, the LM head on "
            "one row) and the attention floor; ms_per_sq_token the causal attention FLOPs "
            "(the KV write is in the table)",
        },
        "decode": {
            "batch_sizes": d_pts,
            "time_ms": [round(t * 1e3, 6) for t in dec_t],
            "ms_per_context_token": round(kv_s * 1e3, 12),
            "rule": "roofline per operator: the table holds the token operators of b tokens (LM "
            "head on b rows) and the decode attention's floor; ms_per_context_token the KV "
            "bytes each context token's read costs",
        },
        "power": {
            "prefill_tokens": p_pts,
            "prefill_w": [round(min(w, g.tdp_w * tp), 3) for w in pre_w],
            "decode_batch_sizes": d_pts,
            "decode_w": [round(min(w, g.tdp_w * tp), 3) for w in dec_w],
            "modelled": True,
            "rule": "the GPU spec's power model (llm_arch docstring), x num_gpus: a prefill of one "
            f"prompt of n tokens; a decode step at {power_context_tokens} context tokens per request",
        },
        "arch": {
            "model": _arch_dict(arch),
            "gpu": {k: v for k, v in g.raw.items() if k != "fit"},
            "tp": tp,
            "clock_mhz": None if clock_mhz is None else f_req,
            "max_tokens": int(max_tokens),
            "max_batch": int(max_batch),
            "power_context_tokens": int(power_context_tokens),
            "gpu_memory_utilization": gpu_memory_utilization,
        },
        "citations": _citations(arch, g, tp),
        "notes": {
            "left_out": "sampling and the CPU's scheduling (overhead_ms); the LM head runs on one "
            "row per prefill iteration; MoE routing is taken as uniform",
            "clock": f"SM clock set to {f_req:g} MHz (the GPU's range {g.min_clock_mhz:g}-"
            f"{g.max_clock_mhz:g}); compute-bound iterations run lower where the power model "
            "reaches the board's limit",
        },
    }


def _with_allreduce(
    g: GPUSpec, us: float | None, gb_s: float | None, source: str | None
) -> GPUSpec:
    """``g`` with its all-reduce figures replaced where given (checked as the spec's are)."""
    if us is None and gb_s is None:
        return g
    raw = dict(g.raw)
    ar = dict(raw.get("allreduce", {}))
    if us is not None:
        check_number("allreduce_us", us, low=0.0)
        ar["latency_us"] = float(us)
    if gb_s is not None:
        check_number("allreduce_gb_s", gb_s, low=0.0, low_inclusive=False)
        ar["bus_bandwidth_gb_s"] = float(gb_s)
    raw["allreduce"] = ar
    raw["sources"] = {
        **dict(raw.get("sources", {})),
        "allreduce": source
        or f"given by the user: {ar['latency_us']:g} us a call + 2 (tp-1)/tp x bytes / "
        f"{ar['bus_bandwidth_gb_s']:g} GB/s",
    }
    return _gpu_from_dict(raw, f"GPU spec '{g.name}'")


def _citations(arch: ModelArch, g: GPUSpec, tp: int) -> dict[str, str]:
    """Where each number of a built profile comes from."""
    src = g.raw.get("sources", {}) if isinstance(g.raw, Mapping) else {}
    sheet = str(src.get("datasheet", f"the GPU spec '{g.name}'"))
    d = arch.head_dim
    return {
        "model": f"the model's config.json ({arch.name}): {arch.layers} layers, hidden {arch.hidden}, "
        f"{arch.heads} attention heads, {arch.kv_heads} KV heads, head_dim {d}, intermediate "
        f"{arch.intermediate}, vocabulary {arch.vocab}"
        + (f", {arch.experts} experts, top {arch.experts_per_token}" if arch.moe else "")
        + "".join(f"; assumed: {a}" for a in arch.assumed),
        "kv_bytes_per_token": f"2 (K, V) x {arch.layers} layers x {arch.kv_heads_per_rank(tp)} KV heads per "
        f"GPU x {tp} GPU(s) x {d} head_dim x 2 bytes = {arch.kv_bytes_per_token(tp)}",
        "weights_bytes": f"{arch.params():,} parameters (embeddings, LM head, every layer) x 2 bytes",
        "gpu_memory_bytes": sheet,
        "gpu_rated_power_w": sheet,
        "idle_power_w": str(src.get("idle_power_w", sheet)),
        "prefill.time_ms": "the roofline model (batch_env/profiles/llm_arch.py), efficiencies: "
        + str(src.get("efficiency", "the GPU spec")),
        "decode.time_ms": "the roofline model, as prefill.time_ms",
        "power": str(src.get("power_model", "the GPU spec's power model")),
        "allreduce": str(src.get("allreduce", "the GPU spec")),
    }


def _arch_dict(a: ModelArch) -> dict[str, Any]:
    out: dict[str, Any] = {
        "num_hidden_layers": a.layers,
        "hidden_size": a.hidden,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "intermediate_size": a.intermediate,
        "vocab_size": a.vocab,
        "tie_word_embeddings": a.tie_word_embeddings,
    }
    if a.moe:
        out.update(
            num_local_experts=a.experts,
            num_experts_per_tok=a.experts_per_token,
            moe_intermediate_size=a.expert_intermediate,
            shared_expert_intermediate_size=a.shared_expert_intermediate,
        )
    out["_name_or_path"] = a.name
    return out


def grid(limit: int) -> Sequence[int]:
    """The table points :func:`build_profile` uses up to ``limit`` (public for tests)."""
    return _grid(limit)
