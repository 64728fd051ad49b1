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
256 running sequences, chunked prefill, 16-token blocks, ``gpu_memory_utilization`` 0.9,
and cascade attention on: PR #11635, merged in January 2025; vLLM
turned it off by default only in March 2026, PR #36318), 2,048-token prompts and 128
output tokens. The post does not say how the hit rate was made, nor how many prompts
ran. Here each prompt's first ``h x 2048`` tokens are one prefix shared by every prompt,
the rest its own (a trace with 512-token block hashes, written to a temporary file), and
1,000 prompts are given at once (vLLM's ``benchmark_throughput.py`` default; the last
one a microsecond later, as a trace needs two distinct times). So the first iteration's
four prompts each compute the shared prefix for themselves, as vLLM's would (nothing is
cached yet), and their own copies keep cascade attention off until they finish. The env
is ``LLMBatching-v1`` with the ``llama-3.1-8b-h100`` profile, always at its largest cap
(vLLM's fixed cap and budget); throughput is the summary's ``throughput_rps`` over every
request. Each hit rate runs three times: caching off; caching on with cascade attention
(``cascade_attention=True``, :mod:`batch_env.llm.cascade`: the run as vLLM V1 of that
release made it); caching on without it (vLLM's default today). The table gives both
ratios to caching off, and the simulated hit rate.

Also run: ``--budget`` and ``--num-prompts`` to see how much the unstated settings move
the ratio. Runtime: a few seconds.

    python scripts/validate_prefix_caching.py [--num-prompts 1000] [--budget 8192]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import batch_env  # noqa: F401 (registers the ids)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_replay import replay  # noqa: E402 (one offline replay, shared)

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
    """``n`` prompts at time 0 (the last 1 us later: a trace needs two distinct times),
    whose first ``hit x PROMPT`` tokens are one shared prefix."""
    blocks = PROMPT // HASH_BLOCK
    shared = round(hit * blocks)
    with path.open("w") as f:
        for i in range(n):
            own = [1_000_000 + i * blocks + j for j in range(blocks - shared)]
            row = {
                "timestamp": 1e-3 if i == n - 1 else 0.0,
                "input_length": PROMPT,
                "output_length": OUTPUT,
                "hash_ids": list(range(shared)) + own,
            }
            f.write(json.dumps(row) + "\n")


def simulate(
    trace: Path, n: int, caching: bool, budget: int, cascade: bool = False
) -> dict[str, Any]:
    """One offline run: the summary of every request."""
    _server, info = replay(
        trace,
        n,
        columns=("timestamp", "input_length", "output_length"),
        time_unit="ms",
        horizon_s=1e6,
        profile="llama-3.1-8b-h100",
        max_num_seqs=256,  # its largest cap, at the one budget
        max_num_batched_tokens=budget,
        max_model_len=4096,
        prefix_caching=caching,
        cascade_attention=cascade,
    )
    return dict(info["serving"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-prompts", type=int, default=1000, help="prompts (default 1000)")
    ap.add_argument("--budget", type=int, default=8192, help="token budget (default 8192)")
    args = ap.parse_args(argv)
    if args.num_prompts < 2 or args.budget < 256:
        print("error: --num-prompts must be >= 2 and --budget >= 256", file=sys.stderr)
        return 2
    print(f"Source: {CITATION}")
    print(f"Prompts: {args.num_prompts} at once, token budget {args.budget}, 256 sequences\n")
    print(
        "| hit rate | published on/off | simulated on/off, cascade attention on (as vLLM V1 "
        "then) | error | without cascade attention | error | simulated hit rate |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for hit, pixels in PUBLISHED:
            trace = Path(tmp) / f"hit{hit}.jsonl"
            write_trace(trace, args.num_prompts, hit)
            off = simulate(trace, args.num_prompts, False, args.budget)
            on = simulate(trace, args.num_prompts, True, args.budget, cascade=True)
            plain = simulate(trace, args.num_prompts, True, args.budget)
            pub = pixels / OFF_PIXELS
            ratio = on["throughput_rps"] / off["throughput_rps"]
            ratio0 = plain["throughput_rps"] / off["throughput_rps"]
            err, err0 = ratio / pub - 1.0, ratio0 / pub - 1.0
            worst = max(worst, abs(err))
            print(
                f"| {hit:.0%} | {pub:.3f} | {ratio:.3f} ({on['throughput_rps']:.2f} / "
                f"{off['throughput_rps']:.2f} req/s; cascade in {on['cascade_iterations']} of "
                f"{on['iterations']} iterations) | {err:+.1%} | {ratio0:.3f} | {err0:+.1%} | "
                f"{on['prefix_hit_rate']:.1%} |"
            )
    print(f"\nLargest error (cascade attention on, as in the published run): {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
