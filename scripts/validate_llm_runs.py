"""Hold the architecture-built LLM profiles against published vLLM runs (issue 50).

Run ``python scripts/validate_llm_runs.py`` (about 5 s) from the repository root. Every
run in :data:`RUNS` is a published measurement of vLLM serving a model the shipped
profiles cover, on an A100 or H100, with stated lengths and rates; it is reproduced in
``LLMBatching-v2`` with the profile built by :mod:`batch_env.profiles.llm_arch` and the
serving settings of that vLLM version, and the error (simulated / published - 1) of each
figure is printed. ``docs/validation.md`` ("Architecture-built profiles against
published runs") states the results and what each run does and does not show;
``tests/test_llm_arch.py`` asserts them.

The runs (sources in :data:`RUNS`):

* ``fp8-blog-c1``: vLLM v0.19.1 (its V1 engine), Llama-3.1-8B BF16 on one H100,
  ``vllm bench serve`` at concurrency 1, 128 output tokens, inputs of 256 to 125k tokens:
  the post's fit of the median inter-token latency, 6.44 ms + 4.37e-5 ms per input token,
  at four inputs (printed numbers), and the time to first token read off its chart at two
  (chart-read, about +-5%). Concurrency 1 is one request at a time: arrivals 600 s apart,
  more than any request takes.
* ``fp8-blog-c8``: the same post's Table 4, 150 requests at concurrency 8 with about 20k
  input and 2k output tokens (+-15%): median inter-token latency, total duration and
  output tokens per second (printed). Concurrency 8 is all 150 requests at time 0 with at
  most 8 running (vLLM admits the next as one finishes, as the client sends it); lengths
  lognormal with the mean and the coefficient of variation (0.0866) of a uniform +-15%.
  The median TTFT (763.6 ms) is left out: the client's clock starts when a request is
  sent, after it waited for a slot; the env's starts at arrival, before the wait.
* ``v060-blog``: vLLM v0.6.0's performance post, 500 prompts at QPS inf of about 462
  input and 16 or 256 output tokens, Llama-3-8B on one A100 and one H100 and Llama-3-70B
  on four H100s: throughput read off its bar chart (chart-read, about +-5%). v0.6.0 ran
  without chunked prefill (off by default for an 8k context), 256 sequences, a token
  budget of 8,192, multi-step scheduling (10 steps).
* ``vllm-ci``: vLLM's own CI latency tests (Buildkite ``performance-benchmark`` builds
  9523 on an A100-SXM4-80GB, 9555 on an H100 node, 9515 on an H200; vLLM's main branch of
  late October to late November 2024, between v0.6.3 and v0.6.4, the V0 engine):
  ``benchmark_latency.py``, one batch of 8 prompts of 32 tokens, 128 output tokens,
  dummy weights: the mean end-to-end latency (printed) of Llama-3-8B (TP 1), Llama-3-70B
  (TP 4) and Mixtral-8x7B (TP 2) on each GPU.
* ``argonne``: LLM-Inference-Bench (Argonne, arXiv 2411.00136;
  argonne-lcf/LLM-Inference-Bench@4211f5d, ``Plots/All_results.csv``): vLLM 0.5.1-0.6.1
  offline on H100 80GB HBM3 (SXM), one batch of b prompts of L random tokens and L output
  tokens (ignore EOS), fp16, the mean latency of 30 runs (printed): Llama-3-8B at TP 1,
  Llama-3-70B at TP 4, Qwen2-7B (Qwen2.5-7B's shape) at TP 1, Llama-2-7B at TP 1 and
  Qwen2-72B (Qwen2.5-72B's shape) at TP 4, L = 128..2048, b = 1..64 (:data:`ARGONNE`);
  and one time to first token (1,024 tokens, batch 16, Llama-3-8B).
* ``v02-blog``: the runs of ``scripts/validate_llm_published.py`` (vLLM v0.2, Llama-2-7B
  on an A100, six fixed-length offline runs, printed bar labels), with the measured
  ``llama-2-7b-a100`` profile.

The V0-era runs (``vllm-ci``, ``argonne``, ``v02-blog``) are simulated with the CPU time
vLLM's V0 engine spent per iteration, which its V1 engine overlaps with the GPU and the
profiles leave out (:data:`V0_MS_PER_ITERATION`, :data:`V0_MS_PER_SEQ`; each from a source
other than the runs it is used on: WukLab's scheduling time per running sequence on vLLM
v0.5.4, and Argonne's batch-1 Llama-3-8B step against vLLM V1's published fit), and, at
TP > 1 on H100s and H200s, with V0's all-reduce (:data:`V0_ALLREDUCE_US`,
:data:`V0_ALLREDUCE_GB_S`), fitted by :func:`fit_v0_allreduce` on Argonne's Llama-2 runs at
TP 2 and 4 (:data:`ARGONNE_TP_FIT`), which are then not figures. ``v060-blog`` ran
v0.6.0's multi-step scheduling, which amortizes the CPU time over 10 steps in a way no
published figure quantifies: it runs without any of them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import validate_llm_published as v02  # noqa: E402
from validate_llm_published import Burst  # noqa: E402

import baselines  # noqa: E402
import batch_env  # noqa: E402
from batch_env.profiles import llm_arch  # noqa: E402
from batch_env.profiles.llm_profile import load as load_llm_profile  # noqa: E402
from batch_env.workload.arrivals import ArrivalStream, Workload  # noqa: E402

FP8_BLOG = (
    'vLLM Team, "The State of FP8 KV-Cache and Attention Quantization in vLLM", vLLM blog, '
    "2026-04-22 (vllm-project/vllm-project.github.io@5ffe2dd, _posts/2026-04-22-fp8-kvcache.md, "
    "fig2_llama_8b.png and Table 4)"
)
V060_BLOG = (
    'vLLM Team, "vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency Reduction", vLLM blog, '
    "2024-09-05 (vllm-project/vllm-project.github.io@c3a01c4, _posts/2024-09-05-perf-update.md, "
    "assets/figures/perf-v060/overall_throughput.png, A100_8B.png)"
)


#: vLLM's V0 engine's CPU time per running sequence per iteration: WukLab's measurement on
#: vLLM v0.5.4 (:data:`validate_llm_published.WUKLAB_MS_PER_SEQ`, 14.31 ms at 256 sequences).
V0_MS_PER_SEQ = v02.WUKLAB_MS_PER_SEQ
#: ... and per iteration, the rest of what a V0 decode step of one request on an H100
#: costs beyond the GPU's work: Argonne's vLLM 0.5.x run of Llama-3-8B, one prompt of 128
#: tokens and 128 output tokens, takes 0.9939 s (7.765 ms a token), where vLLM V1's
#: published fit gives 6.44 + 4.37e-5 x 128 = 6.446 ms a token on the same GPU and model;
#: the 1.319 ms difference, less one sequence's share, is taken as V0's CPU time per
#: iteration (that Argonne row is then not used as a figure).
V0_MS_PER_ITERATION = (0.9939 / 128 - (6.44 + 4.37e-5 * 128) / 1e3) * 1e3 - V0_MS_PER_SEQ
#: Argonne's H100 rows (argonne-lcf/LLM-Inference-Bench@4211f5d, Plots/All_results.csv) of
#: the models the shipped configs cover, used as figures: (model config, TP,
#: max_model_len, [(L, b, mean latency s), ...]). A duplicated row enters as its mean.
#: Qwen2-72B has Qwen2.5-72B's shape, Llama-2-7B's the ``llama-2-7b`` config.
ARGONNE: tuple[tuple[str, int, int, list[tuple[int, int, float]]], ...] = (
    (
        "llama-3.1-8b",
        1,
        8192,
        [
            (128, 16, 1.1651),
            (128, 32, 1.3066),
            (128, 64, 1.6883),
            (256, 1, 2.003),
            (256, 16, 2.3995),
            (256, 32, 2.7142),
            (256, 64, 3.6324),
            (512, 1, 4.0268),
            (512, 16, 5.0432),
            (512, 32, 5.8001),
            (512, 64, 7.8964),
            (1024, 1, 8.0978),
            (1024, 16, 11.0247),
            (1024, 32, 13.0567),
            (1024, 64, 18.8087),
            (2048, 1, 16.3022),
            (2048, 16, 25.5299),
            (2048, 32, 31.6744),
            (2048, 64, 48.2152),
        ],
    ),
    (
        "llama-3.1-70b",
        4,
        8192,
        [
            (128, 1, 2.4624),
            (128, 16, 2.7513),
            (128, 32, 3.2808),
            (128, 64, 3.7508),
            (256, 1, 4.876),
            (256, 16, 5.6164),
            (256, 32, 6.7111),
            (256, 64, 7.7545),
            (512, 1, 9.8172),
            (512, 16, 11.7199),
            (512, 32, 14.0381),
            (512, 64, 16.2237),
            (1024, 1, 19.6098),
            (1024, 16, 24.6951),
            (1024, 32, 30.235),
            (1024, 64, 35.0828),
            (2048, 1, 39.2997),
            (2048, 16, 50.3793),
            (2048, 32, 64.3388),
            (2048, 64, 80.2155),
        ],
    ),
    (
        "qwen2.5-7b",
        1,
        32768,
        [
            (128, 1, 1.009),
            (128, 16, 1.1177),
            (128, 32, 1.2986),
            (128, 64, 1.6117),
            (256, 1, 2.0227),
            (256, 16, 2.2902),
            (256, 32, 2.672),
            (256, 64, 3.3493),
            (512, 1, 4.0519),
            (512, 16, 4.8001),
            (512, 32, 5.6202),
            (512, 64, 7.1316),
            (1024, 1, 8.1439),
            (1024, 16, 10.4195),
            (1024, 32, (12.1706 + 12.5483) / 2),
            (1024, 64, 16.0547),
            (2048, 1, 16.3095),
            (2048, 16, 22.2536),
            (2048, 32, 28.2596),
            (2048, 64, 38.6769),
        ],
    ),
    (
        "llama-2-7b",
        1,
        4096,
        [
            (128, 1, 0.9326),
            (128, 16, 1.1352),
            (128, 32, 1.3743),
            (128, 64, 1.8452),
            (256, 1, 1.9009),
            (256, 16, 2.4286),
            (256, 32, 3.0422),
            (256, 64, 4.2693),
            (512, 1, 3.8837),
            (512, 16, 5.4464),
            (512, 32, 7.2427),
            (512, 64, 10.825),
            (1024, 1, 7.8385),
            (1024, 16, 13.1687),
            (1024, 32, (18.9884 + 19.2926) / 2),
            (1024, 64, 32.6412),
            (2048, 1, 15.8406),
            (2048, 16, 35.2977),
            (2048, 32, 59.1316),
            (2048, 64, 117.1345),
        ],
    ),
    (
        "qwen2.5-72b",
        4,
        32768,
        [
            (128, 1, 2.5755),
            (128, 16, 2.8771),
            (128, 32, 3.3613),
            (128, 64, 3.9281),
            (256, 1, 5.1618),
            (256, 16, 5.8589),
            (256, 32, 6.8963),
            (256, 64, 8.0437),
            (512, 1, 10.2907),
            (512, 16, 12.2512),
            (512, 32, 14.3681),
            (512, 64, 16.8196),
            (1024, 1, 20.5232),
            (1024, 16, 25.6913),
            (1024, 32, 30.945),
            (1024, 64, 36.2776),
            (2048, 1, 41.3711),
            (2048, 16, 52.3414),
            (2048, 32, 65.4497),
            (2048, 64, 85.1423),
        ],
    ),
)
#: Argonne's H100 rows of Llama-2 at TP 2 and 4 (the same file): not figures, but the data
#: :func:`fit_v0_allreduce` fits V0's all-reduce on (:data:`V0_ALLREDUCE_US`,
#: :data:`V0_ALLREDUCE_GB_S`); same layout as :data:`ARGONNE`.
ARGONNE_TP_FIT: tuple[tuple[str, int, int, list[tuple[int, int, float]]], ...] = (
    (
        "llama-2-7b",
        2,
        4096,
        [
            (128, 1, 0.7907),
            (128, 16, 0.9418),
            (128, 32, 1.1358),
            (128, 64, 1.5933),
            (256, 1, 1.5562),
            (256, 16, 1.9631),
            (256, 32, 2.4505),
            (256, 64, 3.5219),
            (512, 1, 3.0949),
            (512, 16, 4.2437),
            (512, 32, 5.5705),
            (512, 64, 8.2874),
            (1024, 1, 6.2252),
            (1024, 16, 9.7956),
            (1024, 32, 13.5758),
            (1024, 64, 21.6099),
            (2048, 1, 12.7092),
            (2048, 16, 24.836),
            (2048, 32, 37.196),
            (2048, 64, 64.1294),
        ],
    ),
    (
        "llama-2-7b",
        4,
        4096,
        [
            (128, 1, 0.7545),
            (128, 16, 0.7916),
            (128, 32, 0.945),
            (128, 64, 1.3063),
            (256, 1, 1.5013),
            (256, 16, 1.6056),
            (256, 32, 1.9681),
            (256, 64, 2.8341),
            (512, 1, 3.0084),
            (512, 16, 3.4656),
            (512, 32, 4.3431),
            (512, 64, 6.5661),
            (1024, 1, 5.9561),
            (1024, 16, 7.8739),
            (1024, 32, 10.1705),
            (1024, 64, 15.8691),
            (2048, 1, 11.9279),
            (2048, 16, 18.2117),
            (2048, 32, 26.2812),
            (2048, 64, 43.2212),
        ],
    ),
    (
        "llama-2-70b",
        4,
        4096,
        [
            (128, 1, 2.3703),
            (128, 16, 2.7917),
            (128, 32, 3.2391),
            (128, 64, 3.7581),
            (256, 1, 4.7437),
            (256, 16, 5.7167),
            (256, 32, 6.6717),
            (256, 64, 7.7775),
            (512, 1, 9.5025),
            (512, 16, 11.7661),
            (512, 32, 13.9019),
            (512, 64, 16.1494),
            (1024, 1, 18.9185),
            (1024, 16, 23.8504),
            (1024, 32, 28.8545),
            (1024, 64, 35.1362),
            (2048, 1, 38.0234),
            (2048, 16, 48.6333),
            (2048, 32, 60.2826),
            (2048, 64, 78.653),
        ],
    ),
)
#: vLLM's CI latency tests (module docstring): (profile model, TP, max_model_len, mean ms per GPU)
VLLM_CI: tuple[tuple[str, int, int, dict[str, float]], ...] = (
    ("llama-3.1-8b", 1, 8192, {"a100-80gb": 1579.27, "h100-sxm": 997.542, "h200": 833.421}),
    ("llama-3.1-70b", 4, 8192, {"a100-80gb": 3990.59, "h100-sxm": 2444.47, "h200": 2077.53}),
    ("mixtral-8x7b", 2, 32768, {"a100-80gb": 3643.84, "h100-sxm": 2326.97, "h200": 1917.44}),
)
ARGONNE_CITE = (
    "Argonne LLM-Inference-Bench (arXiv 2411.00136), argonne-lcf/LLM-Inference-Bench@4211f5d "
    "Plots/All_results.csv and Plots/Fig_21/all_results_TTFT.csv"
)
CI_CITE = (
    "vLLM CI performance-benchmark (Buildkite builds 9523 A100-SXM4-80GB, 9555 H100, 9515 H200; "
    "vLLM main, Oct-Nov 2024), latency tests: 8 prompts x 32 tokens, 128 output tokens"
)


#: vLLM V0's all-reduce between tensor-parallel H100s (NVLink 4 through NVSwitch): time per
#: call (us) and bus bandwidth (GB/s), fitted by :func:`fit_v0_allreduce` on
#: :data:`ARGONNE_TP_FIT` (Llama-2-7B at TP 2 and 4, Llama-2-70B at TP 4; 60 runs that are
#: then not used as figures), in place of the GPU spec's 8 us and 367 GB/s (an assumption
#: and nccl-tests' 16 GiB figure). It holds whatever V0 spent per all-reduce of each layer.
V0_ALLREDUCE_US = 18.47
V0_ALLREDUCE_GB_S = 128.1
#: the GPUs it is used on: the H100 it was fitted on and the H200 (the same NVLink 4 and
#: NVSwitch); the A100 (NVLink 3) keeps its spec's figures, nothing here fits it.
V0_ALLREDUCE_GPUS = ("h100-sxm", "h200")


def v0_profile(
    model: str,
    gpu: str,
    tp: int,
    max_tokens: int = 8192,
    allreduce: tuple[float, float] | None = (V0_ALLREDUCE_US, V0_ALLREDUCE_GB_S),
) -> dict[str, Any]:
    """An architecture-built profile with the V0 engine's CPU terms and, at TP > 1 on the
    GPUs of :data:`V0_ALLREDUCE_GPUS`, its all-reduce (``allreduce``: us a call, GB/s;
    None keeps the GPU spec's)."""
    us, gb_s = (
        allreduce if allreduce is not None and tp > 1 and gpu in V0_ALLREDUCE_GPUS else (None, None)
    )
    return llm_arch.build_profile(
        model,
        gpu,
        tp,
        max_tokens=max_tokens,
        overhead_ms=V0_MS_PER_ITERATION,
        overhead_ms_per_seq=V0_MS_PER_SEQ,
        overhead_source="vLLM's V0 engine (scripts/validate_llm_runs.py: V0_MS_PER_ITERATION, V0_MS_PER_SEQ)",
        allreduce_us=us,
        allreduce_gb_s=gb_s,
        allreduce_source=None
        if us is None
        else f"vLLM V0's all-reduce fitted on Argonne's Llama-2 TP runs: {us:g} us a call + "
        f"2 (tp-1)/tp x bytes / {gb_s:g} GB/s (scripts/validate_llm_runs.py)",
    )


@dataclass(frozen=True)
class Spaced(Burst):
    """``n`` requests ``gap_s`` apart: one at a time where each takes less than the gap
    (a benchmark client at concurrency 1); :class:`Burst` otherwise."""

    kind: ClassVar[str] = "spaced"
    n: int = 10
    gap_s: float = 600.0

    @property
    def mean_rate_per_s(self) -> float:
        """``1 / gap_s``."""
        return 1.0 / self.gap_s

    @property
    def arrival_cv(self) -> float | None:
        """0: deterministic gaps."""
        return 0.0

    def to_dict(self) -> dict[str, Any]:
        """For the record."""
        return {"kind": self.kind, "n": self.n, "gap_s": self.gap_s}

    def stream(self, rng: np.random.Generator, chunk_size: int = 1) -> ArrivalStream:
        """The stream (``rng``, ``chunk_size`` unused)."""
        return v02._BurstStream(self.n, self.gap_s)


@dataclass
class Figure:
    """One published figure and its simulated value."""

    run: str
    what: str
    published: float
    simulated: float = float("nan")
    chart_read: bool = False

    @property
    def error(self) -> float:
        """Simulated / published - 1."""
        return self.simulated / self.published - 1.0


@dataclass
class Setting:
    """One simulated configuration of a run and the figures it produces."""

    run: str
    profile: str | dict[str, Any]
    workload: Workload
    lengths: dict[str, Any]
    scheduler: str
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    n: int
    figures: list[tuple[str, str, float, bool]] = field(default_factory=list)
    # (label, summary key, published value, chart-read)


def settings() -> list[Setting]:
    """The published runs as env settings (module docstring)."""
    out = []
    for length in (1024, 8192, 32768, 65536):
        figs = [
            (
                f"median ITL at {length} input tokens (ms)",
                "tpot_p50_ms",
                6.44 + 4.37e-5 * length,
                False,
            )
        ]
        if length == 32768:
            figs.append(("median TTFT at 32k input tokens (ms)", "ttft_p50_ms", 1300.0, True))
        if length == 65536:
            figs.append(("median TTFT at 65k input tokens (ms)", "ttft_p50_ms", 3550.0, True))
        out.append(
            Setting(
                "fp8-blog-c1",
                "llama-3.1-8b-h100",
                Spaced(12, 600.0),
                {"kind": "fixed", "prompt_tokens": length, "output_tokens": 128},
                "chunked",
                1024,
                8192,
                131072,
                12,
                figs,
            )
        )
    out.append(
        Setting(
            "fp8-blog-c8",
            "llama-3.1-8b-h100",
            Burst(150),
            {
                "kind": "lognormal",
                "prompt_tokens": 20000,
                "output_tokens": 2000,
                "prompt_cv": 0.0866,
                "output_cv": 0.0866,
            },
            "chunked",
            8,
            8192,
            32768,
            150,
            [
                ("median ITL (ms)", "tpot_p50_ms", 15.18, False),
                ("total duration (s)", "elapsed_s", 672.6, False),
                ("output tokens per second", "output_tokens_per_s", 450.3, False),
            ],
        )
    )
    for profile, label, pre, dec in (
        ("llama-3.1-8b-a100", "Llama-3-8B, 1x A100", 28.5, 14.8),
        ("llama-3.1-8b-h100", "Llama-3-8B, 1x H100", 59.0, 31.0),
        ("llama-3.1-70b-tp4-h100", "Llama-3-70B, 4x H100", 25.3, 15.4),
    ):
        for out_len, pub in ((16, pre), (256, dec)):
            out.append(
                Setting(
                    "v060-blog",
                    profile,
                    Burst(500),
                    {"kind": "fixed", "prompt_tokens": 462, "output_tokens": out_len},
                    "vllm-v0",
                    256,
                    8192,
                    8192,
                    500,
                    [
                        (
                            f"{label}, 462/{out_len} tokens: throughput (req/s)",
                            "throughput_rps",
                            pub,
                            True,
                        )
                    ],
                )
            )
    for model, tp, model_len, by_gpu in VLLM_CI:
        for gpu, ms in by_gpu.items():
            out.append(
                Setting(
                    "vllm-ci",
                    v0_profile(model, gpu, tp, max_tokens=max(8192, model_len)),
                    Burst(8),
                    {"kind": "fixed", "prompt_tokens": 32, "output_tokens": 128},
                    "vllm-v0",
                    256,
                    max(model_len, 2048),
                    model_len,
                    8,
                    [(f"{model} TP{tp}, {gpu}: mean latency (ms)", "latency_mean_ms", ms, False)],
                )
            )
    out += argonne_settings(ARGONNE, "argonne")
    out.append(
        Setting(
            "argonne",
            v0_profile("llama-3.1-8b", "h100-sxm", 1),
            Burst(16),
            {"kind": "fixed", "prompt_tokens": 1024, "output_tokens": 1},
            "vllm-v0",
            256,
            8192,
            8192,
            16,
            [
                (
                    "llama-3.1-8b TP1, H100, 1024/1 x 16: time to first token (s)",
                    "elapsed_s",
                    0.42567,
                    False,
                )
            ],
        )
    )
    return out


def argonne_settings(
    table: tuple[tuple[str, int, int, list[tuple[int, int, float]]], ...],
    run: str,
    allreduce: tuple[float, float] | None = (V0_ALLREDUCE_US, V0_ALLREDUCE_GB_S),
) -> list[Setting]:
    """Argonne's rows (:data:`ARGONNE` layout) as settings: one batch of ``b`` prompts of
    ``L`` tokens and ``L`` output tokens, vLLM V0's scheduler and token budget."""
    out = []
    for model, tp, model_len, rows in table:
        prof = v0_profile(
            model, "h100-sxm", tp, max_tokens=max(8192, model_len), allreduce=allreduce
        )
        for length, b, lat in rows:
            out.append(
                Setting(
                    run,
                    prof,
                    Burst(b),
                    {"kind": "fixed", "prompt_tokens": length, "output_tokens": length},
                    "vllm-v0",
                    256,
                    max(model_len, 2048),
                    model_len,
                    b,
                    [
                        (
                            f"{model} TP{tp}, H100, {length}/{length} x {b}: latency (s)",
                            "elapsed_s",
                            lat,
                            False,
                        )
                    ],
                )
            )
    return out


def calibration(
    allreduce: tuple[float, float] | None = (V0_ALLREDUCE_US, V0_ALLREDUCE_GB_S),
) -> list[Figure]:
    """The runs V0's all-reduce is fitted on (:data:`ARGONNE_TP_FIT`), simulated with
    ``allreduce`` (us a call, GB/s; None: the GPU spec's): the fit's residuals, not figures."""
    return [
        f for s in argonne_settings(ARGONNE_TP_FIT, "argonne-fit", allreduce) for f in figures(s)
    ]


def calibration_loss(allreduce: tuple[float, float] | None) -> float:
    """Mean squared log error of :func:`calibration` (what :func:`fit_v0_allreduce` minimizes)."""
    return float(np.mean([np.log1p(f.error) ** 2 for f in calibration(allreduce)]))


def fit_v0_allreduce() -> tuple[float, float, float]:
    """Fit V0's all-reduce (us a call, bus GB/s) on :data:`ARGONNE_TP_FIT`: Nelder-Mead from
    (15 us, 100 GB/s) on the mean squared log error of the 60 latencies (about a minute).
    Returns (us, GB/s, root mean squared log error); it gives :data:`V0_ALLREDUCE_US` and
    :data:`V0_ALLREDUCE_GB_S` (rounded)."""
    from scipy.optimize import minimize

    def loss(x: np.ndarray) -> float:
        if x[0] < 0 or x[1] <= 1.0:
            return 1e9
        return calibration_loss((float(x[0]), float(x[1])))

    r = minimize(
        loss,
        np.array([15.0, 100.0]),
        method="Nelder-Mead",
        options={"xatol": 0.01, "fatol": 1e-6, "maxiter": 80},
    )
    return float(r.x[0]), float(r.x[1]), float(np.sqrt(r.fun))


def simulate(s: Setting, profile: dict[str, Any] | str | None = None) -> dict[str, Any]:
    """One setting's episode summary (LLMBatching-v2, vLLM's fixed cap as the policy)."""
    env = gym.make(
        "batch_env/LLMBatching-v2",
        profile=profile or s.profile,
        workload=s.workload,
        lengths=s.lengths,
        scheduler=s.scheduler,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        max_model_len=s.max_model_len,
        horizon_requests=s.n,
        warmup_requests=0,
        queue_capacity=max(4096, s.n),
        horizon_s=1e7,
    )
    policy = baselines.make("static-cap", env, cap=s.max_num_seqs)
    summary = batch_env.evaluate(policy, env, n_episodes=1, seed=0).episodes[0]
    env.close()
    if summary["completed"] != s.n:
        raise RuntimeError(f"{s.run}: {summary['completed']} of {s.n} requests completed")
    return summary


def figures(s: Setting, profile: dict[str, Any] | None = None) -> list[Figure]:
    """The figures of one setting, simulated (with ``profile`` in place of its own)."""
    summary = simulate(s, profile)
    return [
        Figure(s.run, label, pub, float(summary[key]), chart)
        for label, key, pub, chart in s.figures
    ]


def run_v02(cpu: bool = True) -> list[Figure]:
    """The 2023 runs with the measured Llama-2-7B profile and (``cpu``) the V0 CPU terms."""
    d = load_llm_profile("llama-2-7b-a100").to_dict()
    if cpu:
        d["overhead_ms"] = V0_MS_PER_ITERATION
        d["overhead_ms_per_seq"] = V0_MS_PER_SEQ
        d["overhead_source"] = "vLLM's V0 engine (scripts/validate_llm_runs.py)"
    out = []
    for p, o, pub, fig in v02.PUBLISHED:
        r = v02.simulate(p, o, pub, fig, profile=d, num_prompts=1000, gpu_memory_utilization=None)
        out.append(
            Figure(
                "v02-blog", f"Llama-2-7B, 1x A100, {p}/{o} tokens: throughput (req/s)", pub, r.rps
            )
        )
    return out


def run_all(overhead_ms_per_seq: float = 0.0) -> list[Figure]:
    """Every figure of every run, simulated (optionally with a CPU cost per decoded request
    added to the architecture-built profiles)."""
    figs = []
    for s in settings():
        prof: dict[str, Any] | None = None
        if overhead_ms_per_seq and isinstance(s.profile, str):
            prof = llm_arch.build_profile(
                *_profile_parts(s.profile), overhead_ms_per_seq=overhead_ms_per_seq
            )
        figs += figures(s, prof)
    return figs + run_v02()


def _profile_parts(name: str) -> tuple[str, str, int]:
    """(model, GPU, TP) of a shipped architecture-built profile name."""
    model, rest = name.rsplit("-", 1)[0], name.rsplit("-", 1)[1]
    gpu = {"a100": "a100-80gb", "h100": "h100-sxm", "h200": "h200"}[rest]
    tp = 1
    if "-tp" in model:
        model, t = model.rsplit("-tp", 1)
        tp = int(t)
    return model, gpu, tp


def table(figs: list[Figure]) -> str:
    """The comparison as Markdown."""
    lines = [
        "| run | figure | published | simulated | error |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for f in figs:
        lines.append(
            f"| {f.run} | {f.what}{' (chart-read)' if f.chart_read else ''} | {f.published:g} | "
            f"{f.simulated:.4g} | {100 * f.error:+.1f}% |"
        )
    return "\n".join(lines)


def summary_line(figs: list[Figure], label: str) -> str:
    """Median and largest |error| of ``figs``."""
    e = [abs(f.error) for f in figs]
    within = sum(x <= 0.10 for x in e)
    return (
        f"{label}: {len(e)} figures, median |error| {100 * statistics.median(e):.1f}%, "
        f"max {100 * max(e):.1f}%, {within} within 10%"
    )


def main(argv: list[str] | None = None) -> int:
    """Simulate every published run and print the comparison."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument(
        "--overhead-ms-per-seq",
        type=float,
        default=0.0,
        help="what-if: a CPU cost per decoded request per iteration (ms)",
    )
    ap.add_argument(
        "--fit-allreduce",
        action="store_true",
        help="refit V0's all-reduce on Argonne's Llama-2 TP runs (about a minute) and print it",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.fit_allreduce:
        us, gb_s, rmse = fit_v0_allreduce()
        print(
            f"V0 all-reduce fitted on {sum(len(r) for *_, r in ARGONNE_TP_FIT)} runs: "
            f"{us:.2f} us a call, {gb_s:.1f} GB/s (rms log error {rmse:.4f}); shipped: "
            f"{V0_ALLREDUCE_US} us, {V0_ALLREDUCE_GB_S} GB/s"
        )
    figs = run_all(args.overhead_ms_per_seq)
    print(f"Sources: {FP8_BLOG}; {V060_BLOG}; {CI_CITE}; {ARGONNE_CITE}")
    print(
        f"V0 CPU terms: {V0_MS_PER_ITERATION:.4f} ms per iteration, {V0_MS_PER_SEQ:.4f} ms per "
        f"sequence; V0 all-reduce at TP > 1 on {', '.join(V0_ALLREDUCE_GPUS)}: "
        f"{V0_ALLREDUCE_US} us a call, {V0_ALLREDUCE_GB_S} GB/s"
    )
    print()
    print(table(figs))
    print()
    print(summary_line(figs, "all"))
    print(summary_line([f for f in figs if f.run.startswith("fp8")], "vLLM V1 (fp8-blog runs)"))
    for run in ("vllm-ci", "argonne", "v02-blog", "v060-blog"):
        print(summary_line([f for f in figs if f.run == run], run))
    print(summary_line([f for f in figs if not f.chart_read], "printed figures only"))
    print()
    print(
        f"V0 all-reduce ({V0_ALLREDUCE_US} us a call, {V0_ALLREDUCE_GB_S} GB/s) on the runs it "
        "is fitted on (not figures):"
    )
    fit = calibration()
    spec = calibration(None)
    for model, tp, *_ in ARGONNE_TP_FIT:
        group = f"{model} TP{tp}"
        print(summary_line([f for f in fit if f.what.startswith(group)], f"  {group}, fitted"))
        print(summary_line([f for f in spec if f.what.startswith(group)], f"  {group}, GPU spec's"))
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
