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
* ``v02-blog``: the November 2023 post of ``scripts/validate_llm_published.py`` (vLLM
  v0.2, Llama-2-7B on an A100, six fixed-length offline runs, printed bar labels), with
  the measured ``llama-2-7b-a100`` profile and the CPU term this issue adds, vLLM's
  scheduling time per running sequence measured by WukLab on vLLM v0.5.4
  (:data:`validate_llm_published.WUKLAB_MS_PER_SEQ`, 0.0559 ms), as the profile's
  ``overhead_ms_per_seq``: not fitted to these runs.
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
from batch_env.workload.arrivals import ArrivalChunk, ArrivalStream, Workload  # noqa: E402

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


class _SpacedStream(ArrivalStream):
    """``n`` arrivals ``gap_s`` apart from time 0, then nothing."""

    def __init__(self, n: int, gap_s: float) -> None:
        self._times = np.arange(n, dtype=np.float64) * gap_s
        self._sent = False

    def next_chunk(self) -> ArrivalChunk:
        if self._sent:
            self.exhausted = True
            return ArrivalChunk(np.empty(0, dtype=np.float64))
        self._sent = True
        return ArrivalChunk(self._times)


@dataclass(frozen=True)
class Spaced(Workload):
    """``n`` requests ``gap_s`` apart: one at a time where each takes less than the gap
    (a benchmark client at concurrency 1)."""

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

    @property
    def total_arrivals(self) -> int:
        """``n``."""
        return self.n

    def with_mean_rate(self, rate_per_s: float) -> Workload:
        """Not defined here."""
        raise ValueError("Spaced has no rate to rescale")

    def to_dict(self) -> dict[str, Any]:
        """For the record."""
        return {"kind": self.kind, "n": self.n, "gap_s": self.gap_s}

    def stream(self, rng: np.random.Generator, chunk_size: int = 1) -> ArrivalStream:
        """The stream (``rng``, ``chunk_size`` unused)."""
        return _SpacedStream(self.n, self.gap_s)


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
    profile: str
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
    return out


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


def run_v02(ms_per_seq: float = v02.WUKLAB_MS_PER_SEQ) -> list[Figure]:
    """The 2023 runs with the measured Llama-2-7B profile and vLLM's per-sequence CPU time."""
    d = load_llm_profile("llama-2-7b-a100").to_dict()
    d["overhead_ms_per_seq"] = ms_per_seq
    d["overhead_source"] = "WukLab 2024, vLLM v0.5.4 on an A100 (scripts/validate_llm_published.py)"
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
        if overhead_ms_per_seq:
            prof = llm_arch.build_profile(
                *_profile_parts(s.profile), overhead_ms_per_seq=overhead_ms_per_seq
            )
        summary = simulate(s, prof)
        for label, key, pub, chart in s.figures:
            figs.append(Figure(s.run, label, pub, float(summary[key]), chart))
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
    return f"{label}: {len(e)} figures, median |error| {100 * statistics.median(e):.1f}%, max {100 * max(e):.1f}%"


def main(argv: list[str] | None = None) -> int:
    """Simulate every published run and print the comparison."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument(
        "--overhead-ms-per-seq",
        type=float,
        default=0.0,
        help="what-if: a CPU cost per decoded request per iteration (ms)",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    figs = run_all(args.overhead_ms_per_seq)
    print(f"Sources: {FP8_BLOG}; {V060_BLOG}")
    print()
    print(table(figs))
    print()
    print(summary_line(figs, "all"))
    print(summary_line([f for f in figs if f.run.startswith("fp8")], "vLLM V1 (fp8-blog runs)"))
    print(summary_line([f for f in figs if f.run == "v02-blog"], "vLLM v0.2 with the CPU term"))
    print(summary_line([f for f in figs if not f.chart_read], "printed figures only"))
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
