"""Hold the simulator's prefix caching against a published vLLM run (issue 63, item 5).

Source: vLLM Team, "vLLM V1: A Major Upgrade to vLLM's Core Architecture", vLLM blog,
2025-01-27, section 3 "Zero-Overhead Prefix Caching"; repository
vllm-project/vllm-project.github.io at commit c3a01c4a5807c8d900ae468897e45263373e534e,
text ``_posts/2025-01-27-v1-alpha-release.md``, figure
``assets/figures/v1/v1_prefix_caching.png`` ("Prefix Caching Benchmark. Llama 3.1 8B,
1xH100 | Input length 2048, output length 128"; throughput without and with prefix
caching at cache hit rates 0, 25, 50 and 75%). The bars carry no values and the axis no
ticks: :data:`PUBLISHED` holds their heights in pixels, measured on the 3000 x 1500
image (the bars' common base at row 1289; every "No Prefix Caching" bar is 368 pixels
high), so what is checked is the ratio of throughput with caching to without at each
hit rate. The axis is taken to start at 0 (matplotlib's default for bars; the
gridlines are evenly spaced from the base).

What the run was, as far as the post says: vLLM V1 (alpha, January 2025), offline
(the benchmark's ``LLM`` class: vLLM V1's defaults then were a token budget of 8,192 and
256 running sequences, chunked prefill, 16-token blocks, ``gpu_memory_utilization`` 0.9),
2,048-token prompts and 128 output tokens. The post does not say how the hit rate was
made, nor how many prompts ran. Here each prompt's first ``h x 2048`` tokens are one
prefix shared by every prompt, the rest its own (a trace with 512-token block hashes,
written to a temporary file), and 1,000 prompts arrive at once (vLLM's
``benchmark_throughput.py`` default; 1 microsecond apart, as a trace needs distinct
times); the simulated hit rate is reported (the first
iteration's prompts cannot hit: nothing is cached yet). The env is ``LLMBatching-v1``
with the ``llama-3.1-8b-h100`` profile, always at its largest cap (vLLM's fixed cap and
budget); throughput is the summary's ``throughput_rps`` over every request.

Also run: ``--budget`` and ``--num-prompts`` to see how much the unstated settings move
the ratio. ``--cascade-bound`` is a what-if, not the simulator: vLLM V1 of that release
runs *cascade attention* when every running request shares a cached prefix of 256
tokens or more (vLLM PR #11635; a heuristic decides per step), reading the shared
prefix's KV once for the whole batch instead of once per request. The simulator does
not model it; with the flag, every iteration of 8 decodes or more attends as if it ran
(the decode context counts the shared prefix once), which bounds its effect from above.
Runtime: a few seconds.

    python scripts/validate_prefix_caching.py [--num-prompts 1000] [--budget 8192]
        [--cascade-bound]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym

import batch_env

#: (hit rate, height of the "Prefix Caching" bar in pixels); "No Prefix Caching": 368
PUBLISHED: tuple[tuple[float, int], ...] = ((0.0, 367), (0.25, 452), (0.50, 626), (0.75, 1063))
OFF_PIXELS = 368
CITATION = (
    'vLLM Team, "vLLM V1: A Major Upgrade to vLLM\'s Core Architecture", vLLM blog, '
    "2025-01-27 (vllm-project/vllm-project.github.io@c3a01c4, "
    "assets/figures/v1/v1_prefix_caching.png)"
)
PROMPT, OUTPUT, HASH_BLOCK = 2048, 128, 512


def write_trace(path: Path, n: int, hit: float) -> None:
    """``n`` prompts from time 0, 1 us apart, whose first ``hit x PROMPT`` tokens are one shared prefix."""
    blocks = PROMPT // HASH_BLOCK
    shared = round(hit * blocks)
    with path.open("w") as f:
        for i in range(n):
            own = [1_000_000 + i * blocks + j for j in range(blocks - shared)]
            row = {
                "timestamp": i * 1e-3,  # 1 us apart: a trace needs distinct times
                "input_length": PROMPT,
                "output_length": OUTPUT,
                "hash_ids": list(range(shared)) + own,
            }
            f.write(json.dumps(row) + "\n")


def cascade_bound(shared_tokens: int) -> None:
    """The ``--cascade-bound`` what-if: every mixed iteration with 8 decodes or more reads
    the ``shared_tokens`` prefix once (``LLMProfileExecutor.mixed`` wrapped for this
    process; see the module docstring)."""
    from batch_env.executor import LLMProfileExecutor

    plain = getattr(LLMProfileExecutor, "_plain_mixed", LLMProfileExecutor.mixed)
    LLMProfileExecutor._plain_mixed = plain  # type: ignore[attr-defined]

    def mixed(self: Any, n: int, att: float, b: int, ctx: int, *rest: Any) -> Any:
        if b >= 8 and shared_tokens >= 256:
            ctx -= (b - 1) * shared_tokens
        return plain(self, n, att, b, ctx, *rest)

    LLMProfileExecutor.mixed = mixed  # type: ignore[method-assign]


def simulate(trace: Path, n: int, caching: bool, budget: int) -> dict[str, Any]:
    """One offline run: the summary of every request."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(
            "batch_env/LLMBatching-v1",
            profile="llama-3.1-8b-h100",
            max_num_seqs=256,
            max_num_batched_tokens=budget,
            max_model_len=4096,
            prefix_caching=caching,
            workload={
                "kind": "trace",
                "path": str(trace),
                "timestamp_column": "timestamp",
                "time_unit": "ms",
                "prompt_tokens_column": "input_length",
                "output_tokens_column": "output_length",
                "loop": False,
            },
            horizon_requests=n,
            horizon_s=1e6,
        )
        last = int(env.action_space.n) - 1  # the largest cap (256) at the one budget
        obs, info = env.reset(seed=0)
        for _ in range(10_000_000):
            obs, _r, term, trunc, info = env.step(last)
            if term or trunc:
                break
        env.close()
    return dict(info["serving"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-prompts", type=int, default=1000, help="prompts (default 1000)")
    ap.add_argument("--budget", type=int, default=8192, help="token budget (default 8192)")
    ap.add_argument(
        "--cascade-bound",
        action="store_true",
        help="what-if: the shared prefix read once per decode batch (module docstring)",
    )
    args = ap.parse_args(argv)
    if args.num_prompts < 1 or args.budget < 256:
        print("error: --num-prompts must be >= 1 and --budget >= 256", file=sys.stderr)
        return 2
    batch_env.register_envs() if hasattr(batch_env, "register_envs") else None
    print(f"Source: {CITATION}")
    what = ", cascade-attention bound (a what-if)" if args.cascade_bound else ""
    print(f"Prompts: {args.num_prompts}, token budget {args.budget}, 256 sequences{what}\n")
    print("| hit rate | published on/off | simulated on/off | error | simulated hit rate |")
    print("| --- | --- | --- | --- | --- |")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for hit, pixels in PUBLISHED:
            trace = Path(tmp) / f"hit{hit}.jsonl"
            write_trace(trace, args.num_prompts, hit)
            off = simulate(trace, args.num_prompts, False, args.budget)
            if args.cascade_bound:
                cascade_bound(round(hit * PROMPT / HASH_BLOCK) * HASH_BLOCK)
            on = simulate(trace, args.num_prompts, True, args.budget)
            if args.cascade_bound:
                cascade_bound(0)
            ratio = on["throughput_rps"] / off["throughput_rps"]
            pub = pixels / OFF_PIXELS
            err = ratio / pub - 1.0
            worst = max(worst, abs(err))
            print(
                f"| {hit:.0%} | {pub:.3f} | {ratio:.3f} ({on['throughput_rps']:.2f} / "
                f"{off['throughput_rps']:.2f} req/s) | {err:+.1%} | "
                f"{on.get('prefix_hit_rate', 0.0):.1%} |"
            )
    print(f"\nLargest error: {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
