"""What prefix caching costs the simulator: ``LLMBatching-v2`` on the Mooncake conversation
trace with ``prefix_caching`` on and off, CPU per completed request (ceiling: 1.5x)."""

from __future__ import annotations

from typing import Any

from .common import median_ratio, rounds
from .llm import llm_episode_cost

#: the prefix-caching benchmark's problem: the Mooncake conversation trace (prompts of
#: 12,035 tokens on average, 37% of their blocks a prefix hit with an unbounded cache) on
#: Llama-3.1-8B / H100, scaled to 0.5 requests/s
PREFIX_BENCH_SETTINGS: dict[str, Any] = {
    "profile": "llama-3.1-8b-h100",
    "max_model_len": 131_072,
    "max_num_batched_tokens": 8192,
    "workload": {"kind": "trace", "dataset": "mooncake-conversation", "target_rate_per_s": 0.5},
}


def bench_prefix_caching(
    horizon_requests: int = 1000, repeats: int = 3, seed: int = 0
) -> dict[str, Any]:
    """What prefix caching costs the simulator: ``LLMBatching-v2`` on the Mooncake
    conversation trace (:data:`PREFIX_BENCH_SETTINGS`) with ``prefix_caching`` on and off,
    one episode of ``horizon_requests`` each, back to back in each of ``repeats`` rounds
    (:func:`rounds`): CPU per completed request (the best round's) and the ratio on / off
    (the median of the rounds'). Issue 63's ceiling: 1.5."""
    env_id = "batch_env/LLMBatching-v2"
    runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}

    def timer(side: str) -> float:
        kw = {**PREFIX_BENCH_SETTINGS, "horizon_requests": horizon_requests}
        r = llm_episode_cost(env_id, {**kw, "prefix_caching": side == "on"}, seed)
        runs[side].append(r)
        return r["cpu_s"] / r["completed"]  # CPU seconds per completed request

    costs = rounds({"on": lambda: timer("on"), "off": lambda: timer("off")}, repeats)
    out: dict[str, Any] = {
        "env_id": env_id,
        "env_kwargs": {**PREFIX_BENCH_SETTINGS, "horizon_requests": horizon_requests},
        "repeats": repeats,
        "ceiling_cpu_ratio": 1.5,
    }
    for side in ("on", "off"):
        best = min(runs[side], key=lambda r: r["cpu_s"] / r["completed"])
        out[f"cpu_us_per_request_{side}"] = 1e6 * best["cpu_s"] / best["completed"]
    out["cpu_ratio_on_vs_off"] = median_ratio(costs["on"], costs["off"])
    out["round_ratios"] = [a / b for a, b in zip(costs["on"], costs["off"], strict=True)]
    out["within_ceiling"] = out["cpu_ratio_on_vs_off"] <= out["ceiling_cpu_ratio"]
    return out


def print_prefix_caching(pc: dict[str, Any] | None) -> None:
    """``batch-env bench``'s prefix-caching line: CPU per request on against off."""
    if pc:
        print(
            f"prefix caching on the Mooncake trace (v2): {pc['cpu_ratio_on_vs_off']:.2f}x the CPU "
            f"of caching off ({pc['cpu_us_per_request_on']:,.0f} vs "
            f"{pc['cpu_us_per_request_off']:,.0f} us a request; ceiling "
            f"{pc['ceiling_cpu_ratio']:.1f}x)"
        )
