"""Hold the LLM simulator against a published vLLM throughput measurement (issue 40).

Source: vLLM Team, "Notes on vLLM v.s. DeepSpeed-FastGen", vLLM blog, 14 November 2023,
https://blog.vllm.ai/2023/11/14/notes-vllm-vs-deepspeed.html; repository
vllm-project/vllm-project.github.io at commit c3a01c4a5807c8d900ae468897e45263373e534e,
text ``_posts/2023-11-14-notes-vllm-vs-deepspeed.md``, figures
``assets/figures/notes-vllm-vs-deepspeed/s1.png`` ("Scenario 1: Long prompt, short
output") and ``s2.png`` ("Scenario 2: All other cases"), both unchanged since they were
added on 2023-11-14. "We benchmarked the two systems on an NVIDIA A100-80GB GPU with the
LLaMA-7B model"; the post names ``benchmarks/benchmark_throughput.py`` as its benchmark
code. The vLLM bars are labelled with their values, the throughput in requests per second
at six fixed (prompt, output) lengths: :data:`PUBLISHED`.

What ``benchmark_throughput.py`` of that time does (vLLM of November 2023, v0.2.1 or
v0.2.2; the post gives no version): it adds ``--num-prompts`` (default 1,000) identical
requests (a synthetic prompt of ``--input-len`` tokens; ``ignore_eos=True``,
``max_tokens=--output-len``, n = 1) to an offline engine, runs it until every request
has finished and reports requests / elapsed time. The engine's defaults: ``max_num_seqs`` 256, ``max_num_batched_tokens`` =
max(max_model_len, 2048) = 4,096 for Llama-2's 4,096-token context, 16-token KV blocks,
a 1% watermark, ``gpu_memory_utilization`` 0.9, vLLM v0's prefill-first scheduler
without chunked prefill, preemption by recompute for single-sequence requests, no CUDA
graphs (they came in v0.2.6).

How it maps to the env: ``LLMBatching-v2`` with the ``llama-2-7b-a100`` profile,
``scheduler="vllm-v0"``, ``max_num_seqs=256``, ``max_num_batched_tokens=4096``,
``max_model_len=4096``, fixed lengths, the ``static-cap`` policy at 256 (vLLM's fixed
cap), and a workload of ``--num-prompts`` arrivals all at time 0 (:class:`Burst`, a finite
stream), so the summary window runs from the first arrival to the last completion and
the summary's ``throughput_rps`` is exactly the benchmark's requests / elapsed time.
"LLaMA-7B" needs no scaling: a 2,600 + 200-token sequence does not fit LLaMA-1's
2,048-token context, so the model run was presumably Llama-2-7B (4,096 tokens), and
LLaMA-1-7B and Llama-2-7B share every dimension anyway (32 layers, hidden 4,096, 32
heads, FFN 11,008, vocabulary 32,000, fp16). The post does not say SXM or PCIe; the
profile is the SXM4 board's.

It prints a Markdown table: published and simulated throughput and the error, with the
simulated prefill and decode time, preemptions and KV blocks; then (unless ``--no-fit``)
what the simulated run lacks: the measured time minus the simulated time per scenario,
fitted by candidate missing costs (:func:`fit_table`). In a closed batch (every request
present at time 0, a fixed cap) the schedule does not depend on the clock, so a cost
added to every iteration, or to every sequence of every decode step, adds to the elapsed
time exactly; a least-squares fit of the six gaps on those counts is therefore what the
simulator would need. The fits are in-sample (two numbers fitted to six figures): they
locate the missing time, they do not validate anything. ``--add-prefill-ms`` and
``--add-decode-ms-per-seq`` rerun with such costs added to the profile (a what-if).
Runtime: about 2 s.

    python scripts/validate_llm_published.py [--num-prompts 1000] [--profile llama-2-7b-a100]
        [--gpu-memory-utilization 0.9] [--no-fit]
        [--add-prefill-ms 0] [--add-decode-ms-per-seq 0]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

import baselines
import batch_env
from batch_env.profiles.llm_profile import load as load_llm_profile
from batch_env.workload.arrivals import ArrivalChunk, ArrivalStream, Workload

#: The published figures: (prompt tokens, output tokens, vLLM throughput in requests/s,
#: figure). vLLM blog, 2023-11-14 (module docstring), bar labels of s1.png and s2.png.
PUBLISHED: tuple[tuple[int, int, float, str], ...] = (
    (2600, 60, 3.52, "s1.png"),
    (2600, 128, 2.68, "s1.png"),
    (2600, 200, 2.13, "s1.png"),
    (500, 150, 10.03, "s2.png"),
    (500, 500, 3.43, "s2.png"),
    (500, 1024, 1.49, "s2.png"),
)
CITATION = (
    'vLLM Team, "Notes on vLLM v.s. DeepSpeed-FastGen", vLLM blog, 2023-11-14, '
    "https://blog.vllm.ai/2023/11/14/notes-vllm-vs-deepspeed.html "
    "(vllm-project/vllm-project.github.io@c3a01c4, "
    "assets/figures/notes-vllm-vs-deepspeed/s1.png, s2.png)"
)
#: vLLM v0.2's engine defaults that the benchmark ran with (module docstring)
MAX_NUM_SEQS = 256
MAX_NUM_BATCHED_TOKENS = 4096  # max(max_model_len = 4096, 2048)
MAX_MODEL_LEN = 4096


class _BurstStream(ArrivalStream):
    """``n`` arrivals ``gap_s`` apart from time 0 (all at 0 by default), then nothing (a
    finite stream)."""

    def __init__(self, n: int, gap_s: float = 0.0) -> None:
        self._times = np.arange(n, dtype=np.float64) * gap_s
        self._sent = False

    def next_chunk(self) -> ArrivalChunk:
        if self._sent:
            self.exhausted = True
            return ArrivalChunk(np.empty(0, dtype=np.float64))
        self._sent = True
        return ArrivalChunk(self._times)


@dataclass(frozen=True)
class Burst(Workload):
    """An offline benchmark's arrivals: ``n`` requests, all at time 0.

    :param n: number of requests (>= 1).
    """

    kind: ClassVar[str] = "burst"
    n: int = 1000

    @property
    def mean_rate_per_s(self) -> float:
        """Nominal (``n`` per second): only the env's defaults read it, and the script
        sets ``horizon_s``."""
        return float(self.n)

    @property
    def arrival_cv(self) -> float | None:
        """Undefined (all gaps are 0)."""
        return None

    @property
    def total_arrivals(self) -> int:
        """``n``."""
        return self.n

    def with_mean_rate(self, rate_per_s: float) -> Workload:
        """Not defined for a burst."""
        raise ValueError("Burst has no rate to rescale")

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "burst", "n": n}`` (for the record; make_workload does not know it)."""
        return {"kind": self.kind, "n": self.n}

    def stream(self, rng: np.random.Generator, chunk_size: int = 1) -> ArrivalStream:
        """The burst's stream (``rng`` and ``chunk_size`` are not used)."""
        return _BurstStream(self.n)


@dataclass
class Run:
    """One simulated scenario: the summary and the iteration counts."""

    prompt: int
    output: int
    published_rps: float
    figure: str
    rps: float = 0.0
    elapsed_s: float = 0.0
    kv_blocks: int = 0
    preemptions: int = 0
    prefills: int = 0
    prefill_s: float = 0.0
    prefill_tokens: int = 0
    decodes: int = 0
    decode_s: float = 0.0
    decode_tokens: int = 0  # sequences summed over decode steps (tokens generated there)
    decode_linear_s: float = 0.0  # the decode time's batch-size part (decode.table)
    decode_context_s: float = 0.0  # and its KV-context part (attention)
    n_requests: int = 1000

    @property
    def error(self) -> float:
        """Simulated / published - 1."""
        return self.rps / self.published_rps - 1.0

    @property
    def gap_s(self) -> float:
        """Measured elapsed time minus simulated elapsed time (s)."""
        return self.n_requests / self.published_rps - self.elapsed_s


#: vLLM's CPU time per running sequence per iteration, measured: WukLab, "Can Scheduling
#: Overhead Dominate LLM Inference Performance? A Study of CPU Scheduling Overhead on Two
#: Popular LLM Inference Systems", 2024-09-10 (WukLab/wuklab_sysml,
#: content/posts/scheduling_overhead.md and static/images/scheduling_overhead/vLLM_A100.svg):
#: vLLM v0.5.4 on an A100, Llama-3-8B, 300 requests at once, 1,024 input and 64 output
#: tokens: a median 14.31 ms of scheduling per iteration ("proportional to the number of
#: sequences in the batch"), with the batch at vLLM's default cap of 256 sequences
#: (the KV cache holds about 390 such requests): 14.31 / 256 = 0.0559 ms per sequence.
#: (Their 1,024/1,024 case gives 21.77 ms, 0.085-0.105 ms per sequence.)
WUKLAB_MS_PER_SEQ = 14.31 / 256


def adjusted_profile(name: str, prefill_ms: float, decode_ms_per_seq: float) -> dict[str, Any]:
    """The profile ``name`` with ``prefill_ms`` added to every prefill and
    ``decode_ms_per_seq`` per sequence to every decode step (the profile's
    ``overhead_ms_per_seq``; a what-if for the costs of :func:`fit_table`).
    """
    d = load_llm_profile(name).to_dict()
    d["prefill"]["time_ms"] = [t + prefill_ms for t in d["prefill"]["time_ms"]]
    d["overhead_ms_per_seq"] = decode_ms_per_seq
    d["overhead_source"] = "what-if (scripts/validate_llm_published.py)"
    return d


def simulate(
    prompt: int,
    output: int,
    published: float,
    figure: str,
    *,
    profile: str | dict[str, Any],
    num_prompts: int,
    gpu_memory_utilization: float | None,
) -> Run:
    """Run one scenario of the benchmark in ``LLMBatching-v2`` (module docstring)."""
    kwargs: dict[str, Any] = {}
    if gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    env = gym.make(
        "batch_env/LLMBatching-v2",
        profile=profile,
        workload=Burst(num_prompts),
        lengths={"kind": "fixed", "prompt_tokens": prompt, "output_tokens": output},
        max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
        max_model_len=MAX_MODEL_LEN,
        scheduler="vllm-v0",
        horizon_requests=num_prompts,
        warmup_requests=0,
        queue_capacity=max(4096, num_prompts),
        horizon_s=1e6,
        **kwargs,
    )
    run = Run(prompt, output, published, figure, n_requests=num_prompts)
    # count the iterations as the profile executor runs them (a step of the env can
    # hold several decode iterations)
    ex = env.unwrapped.executor  # type: ignore[attr-defined]
    prefill, decode = ex.prefill, ex.decode
    prof = load_llm_profile(profile)

    def counted_prefill(tokens: int, *args: Any, **kw: Any) -> tuple[float, float]:
        d, e = prefill(tokens, *args, **kw)
        run.prefills += 1
        run.prefill_s += d
        run.prefill_tokens += tokens
        return d, e

    def counted_decode(batch: int, *args: Any, **kw: Any) -> tuple[float, float]:
        d, e = decode(batch, *args, **kw)
        run.decodes += 1
        run.decode_s += d
        run.decode_tokens += batch
        linear = prof.decode_time_s(batch, 0)
        run.decode_linear_s += linear
        run.decode_context_s += d - linear
        return d, e

    ex.prefill, ex.decode = counted_prefill, counted_decode
    policy = baselines.make("static-cap", env, cap=MAX_NUM_SEQS)
    res = batch_env.evaluate(policy, env, n_episodes=1, seed=0)
    s = res.episodes[0]
    if s["completed"] != num_prompts:
        raise RuntimeError(f"{prompt}/{output}: {s['completed']} of {num_prompts} completed")
    run.rps = float(s["throughput_rps"])
    run.elapsed_s = float(s["elapsed_s"])
    run.preemptions = int(s["preemptions"])
    run.kv_blocks = int(env.unwrapped.kv_blocks_total)  # type: ignore[attr-defined]
    env.close()
    return run


def results_table(runs: list[Run]) -> str:
    """The comparison, as Markdown."""
    lines = [
        "| prompt | output | published (req/s) | simulated (req/s) | error | "
        "sim. prefill (s) | sim. decode (s) | preemptions | KV blocks |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        lines.append(
            f"| {r.prompt} | {r.output} | {r.published_rps:.2f} | {r.rps:.2f} | "
            f"{100 * r.error:+.1f}% | {r.prefill_s:.1f} | {r.decode_s:.1f} | "
            f"{r.preemptions} | {r.kv_blocks} |"
        )
    return "\n".join(lines)


def fit_table(runs: list[Run]) -> str:
    """The time the simulated runs lack, against candidate missing costs (Markdown).

    Each candidate is a least-squares fit, through 0, of the six gaps (measured minus
    simulated elapsed time) on iteration counts or simulated times; (b)-(e) pair one
    decode-side term with a prefill-side one.
    """
    gap = np.array([r.gap_s for r in runs])
    measured = np.array([r.n_requests / r.published_rps for r in runs])
    iters = np.array([r.prefills + r.decodes for r in runs], dtype=float)
    prefills = np.array([r.prefills for r in runs], dtype=float)
    candidates = {
        "(a) a constant per iteration (`overhead_ms`)": (iters,),
        "(b) per prefill iteration + per sequence per decode step": (
            prefills,
            np.array([r.decode_tokens for r in runs], dtype=float),
        ),
        "(c) per prompt token prefilled + per sequence per decode step": (
            np.array([r.prefill_tokens for r in runs], dtype=float),
            np.array([r.decode_tokens for r in runs], dtype=float),
        ),
        "(d) per prefill iteration + decode.table (batch-size part) scaled": (
            prefills,
            np.array([r.decode_linear_s for r in runs]),
        ),
        "(e) per prefill iteration + decode attention (KV-read part) scaled": (
            prefills,
            np.array([r.decode_context_s for r in runs]),
        ),
    }
    units = {
        "(a)": ("ms per iteration",),
        "(b)": ("ms per prefill", "ms per sequence-step"),
        "(c)": ("us per prompt token", "ms per sequence-step"),
        "(d)": ("ms per prefill", "x the decode.table time, added"),
        "(e)": ("ms per prefill", "x the decode attention time, added"),
    }
    scale = {
        "ms per iteration": 1e3,
        "ms per prefill": 1e3,
        "ms per sequence-step": 1e3,
        "us per prompt token": 1e6,
    }
    lines = [
        "| missing cost | fitted | residual RMS (s) | max residual (% of measured) |",
        "| --- | --- | ---: | ---: |",
    ]
    pred_b = np.zeros_like(gap)
    for name, cols in candidates.items():
        x = np.column_stack(cols)
        coef, *_ = np.linalg.lstsq(x, gap, rcond=None)
        pred = x @ coef
        if name.startswith("(b)"):
            pred_b = pred
        fitted = ", ".join(
            f"{c * scale.get(u, 1.0):.4g} {u}" for c, u in zip(coef, units[name[:3]], strict=True)
        )
        rms = float(np.sqrt(np.mean((gap - pred) ** 2)))
        worst = float(np.max(np.abs(gap - pred) / measured))
        lines.append(f"| {name} | {fitted} | {rms:.1f} | {100 * worst:.1f}% |")
    lines += [
        "",
        "| prompt | output | measured - simulated (s) | iterations | (a) needs (ms/iter.) "
        "| decode sequence-steps | (b) predicts (s) | (b) residual (% of measured) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r, g, n, p, m in zip(runs, gap, iters, pred_b, measured, strict=True):
        lines.append(
            f"| {r.prompt} | {r.output} | {g:.1f} | {int(n)} | {1e3 * g / n:.1f} | "
            f"{r.decode_tokens} | {p:.1f} | {100 * (g - p) / m:+.1f}% |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the six scenarios and print the tables."""
    ap = argparse.ArgumentParser(
        description="Simulate vLLM's published LLaMA-7B / A100-80GB offline throughput "
        "(vLLM blog, 2023-11-14) and print published vs simulated with the error."
    )
    ap.add_argument(
        "--num-prompts",
        type=int,
        default=1000,
        help="requests per scenario (benchmark_throughput.py's default, 1000; the post "
        "does not say)",
    )
    ap.add_argument("--profile", default="llama-2-7b-a100", help="LLM profile")
    ap.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="KV sizing (default: the profile's, 0.9 as vLLM's)",
    )
    ap.add_argument("--no-fit", action="store_true", help="skip the missing-cost table")
    ap.add_argument(
        "--add-prefill-ms",
        type=float,
        default=0.0,
        help="what-if: add this to every prefill's time (ms)",
    )
    ap.add_argument(
        "--add-decode-ms-per-seq",
        type=float,
        default=0.0,
        help="what-if: add this x batch size to every decode step's time (ms)",
    )
    args = ap.parse_args(argv)
    if args.num_prompts < 1:
        ap.error("--num-prompts must be >= 1")
    profile: str | dict[str, Any] = args.profile
    if args.add_prefill_ms or args.add_decode_ms_per_seq:
        profile = adjusted_profile(args.profile, args.add_prefill_ms, args.add_decode_ms_per_seq)

    t0 = time.perf_counter()
    runs = [
        simulate(
            p,
            o,
            pub,
            fig,
            profile=profile,
            num_prompts=args.num_prompts,
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
        for p, o, pub, fig in PUBLISHED
    ]
    wall = time.perf_counter() - t0
    print(f"Source: {CITATION}")
    print(
        f"Simulated: profile {args.profile}, vllm-v0 scheduler, max_num_seqs {MAX_NUM_SEQS}, "
        f"max_num_batched_tokens {MAX_NUM_BATCHED_TOKENS}, {args.num_prompts} requests at "
        f"time 0 per scenario, gpu_memory_utilization "
        f"{args.gpu_memory_utilization if args.gpu_memory_utilization is not None else 'profile'}"
        + (
            f"; what-if: +{args.add_prefill_ms} ms per prefill, "
            f"+{args.add_decode_ms_per_seq} ms per sequence per decode step"
            if args.add_prefill_ms or args.add_decode_ms_per_seq
            else ""
        )
    )
    print()
    print(results_table(runs))
    errs = np.array([abs(r.error) for r in runs])
    print()
    print(f"Mean |error| {100 * errs.mean():.1f}%, max {100 * errs.max():.1f}%.")
    if not args.no_fit:
        print()
        print(fit_table(runs))
    print()
    print(f"({wall:.1f} s)")


if __name__ == "__main__":
    main()
