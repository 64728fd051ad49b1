"""``batch-env profile llm``: an LLM profile from a model's ``config.json`` and a GPU spec.

The roofline model is :mod:`batch_env.profiles.llm_arch`; this module is its command line
(``batch-env profile llm --model-config config.json --gpu h100-sxm --tp 2``), added under
``batch-env profile`` by :mod:`experiments.roundtrip`. It writes the profile (JSON) that
every LLM env loads (``gymnasium.make("batch_env/LLMBatching-v2", profile="out.json")``)
and prints its key figures: KV capacity, iteration times and power, at the default clock
and, with ``--clock-mhz``, at that clock.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from experiments.harness.options import add_json, count, positive


def summary(profile: Any) -> dict[str, Any]:
    """The figures a user checks first, of a loaded :class:`~batch_env.llm_profile.LLMProfile`."""
    p = profile
    out: dict[str, Any] = {
        "name": p.name,
        "device": p.device,
        "kv_bytes_per_token": p.kv_bytes_per_token,
        "kv_capacity_tokens": p.kv_capacity_tokens(),
        "max_clock_mhz": p.max_clock_mhz,
        "clock_mhz": p.clock_mhz,
    }
    rows = []
    for label, t, w in (
        (
            "decode, 1 request, 1000 tokens of context",
            p.decode_time_s(1, 1000),
            p.decode_power_w(1),
        ),
        ("decode, 64 requests, 1000 tokens each", p.decode_time_s(64, 64000), p.decode_power_w(64)),
        ("prefill, one 512-token prompt", p.prefill_time_s(512, 512**2), p.prefill_power_w(512)),
        (
            "prefill, one 2048-token prompt",
            p.prefill_time_s(2048, 2048**2),
            p.prefill_power_w(2048),
        ),
    ):
        rows.append({"iteration": label, "ms": round(t * 1e3, 3), "power_w": round(w, 1)})
    out["iterations"] = rows
    out["idle_power_w"] = p.idle_power_w
    return out


def cmd_profile_llm(args: argparse.Namespace) -> int:
    """Build an LLM profile from a model's config.json and a GPU spec, and write it as JSON.

    The model: a model hub's config.json (or a shipped name: llama-3.1-8b, llama-3.1-70b,
    llama-2-7b, llama-2-70b, qwen2.5-7b, qwen2.5-72b, mixtral-8x7b). The GPU: a shipped spec (a100-80gb,
    h100-sxm, h200) or a spec JSON file. Iteration times come from a roofline per operator
    with efficiencies fitted on measured operator data, power from the GPU's power model
    (docs/llm_arch.md); the profile is modelled, not measured, and says so.
    """
    from batch_env.profiles import llm_arch, llm_profile

    out = Path(args.out) if args.out else None
    if out is not None and out.is_dir():
        raise ValueError(
            f"--out={args.out!r} is a folder: give the JSON file to write, e.g. {args.out}/profile.json"
        )
    arch = llm_arch.load_model_config(args.model_config)
    d = llm_arch.build_profile(
        arch,
        args.gpu,
        args.tp,
        clock_mhz=args.clock_mhz,
        name=args.name,
        max_tokens=args.max_tokens,
        max_batch=args.max_batch,
        overhead_ms=args.overhead_ms,
        overhead_ms_per_seq=args.overhead_ms_per_seq,
        allreduce_us=args.allreduce_us,
        allreduce_gb_s=args.allreduce_gb_s,
    )
    prof = llm_profile.load(d)
    path = out or Path(f"{d['name']}.json")
    if path.exists() and not args.force:
        raise FileExistsError(
            f"--out={str(path)!r} exists: give another file or --force to overwrite it"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
    s = summary(prof)
    if args.json:
        print(
            json.dumps({"path": str(path), "summary": s, "assumed": list(arch.assumed)}, indent=1)
        )
        return 0
    print(f"{s['name']}: {s['device']}")
    for line in arch.assumed:  # a default taken for a field the config left out
        print(f"  note: {line}")
    print(
        f"  KV cache: {s['kv_bytes_per_token'] / 1024:g} KiB per token, "
        f"{s['kv_capacity_tokens']:,} tokens at gpu_memory_utilization 0.9"
    )
    for r in s["iterations"]:
        print(f"  {r['iteration']:<44s} {r['ms']:9.3f} ms  {r['power_w']:7.1f} W")
    print(f"  idle {s['idle_power_w']:g} W; SM clock {s['clock_mhz'] or s['max_clock_mhz']:g} MHz")
    print(f"wrote {path}")
    return 0


def add_llm_subparser(profile_parser: argparse.ArgumentParser) -> None:
    """Add ``llm`` under ``batch-env profile``."""
    sub = profile_parser.add_subparsers(
        dest="profile_kind", metavar="{llm}", help="llm: an LLM profile from a config.json"
    )
    p = sub.add_parser(
        "llm",
        help="an LLM profile from a model's config.json and a GPU spec (roofline model)",
        description=cmd_profile_llm.__doc__,
    )
    p.add_argument(
        "--model-config",
        required=True,
        help="a model hub config.json, or a shipped name (llama-3.1-8b, qwen2.5-7b, ...)",
    )
    p.add_argument(
        "--gpu",
        required=True,
        help="a100-80gb (or a100), h100-sxm (or h100), h200, or a GPU spec JSON file",
    )
    p.add_argument("--tp", type=count(1), default=1, help="tensor-parallel degree (default 1)")
    p.add_argument(
        "--clock-mhz", type=positive, default=None, help="SM clock (default: the GPU's maximum)"
    )
    p.add_argument("--name", default=None, help="profile name (default <model>-<gpu>[-tp<N>])")
    p.add_argument("--out", default=None, help="output JSON path (default <name>.json)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument(
        "--max-tokens", type=count(2), default=8192, help="prefill tokens covered (default 8192)"
    )
    p.add_argument(
        "--max-batch", type=count(2), default=1024, help="decode batch covered (default 1024)"
    )
    p.add_argument(
        "--overhead-ms",
        type=float,
        default=0.0,
        help="CPU time per iteration the GPU waits for, ms (default 0: overlapped, as vLLM V1)",
    )
    p.add_argument(
        "--overhead-ms-per-seq",
        type=float,
        default=0.0,
        help="CPU time per decoded request per iteration, ms (default 0; vLLM <= 0.5: ~0.06-0.09)",
    )
    p.add_argument(
        "--allreduce-us",
        type=float,
        default=None,
        help="all-reduce time per call, us (default: the GPU spec's; vLLM <= 0.6 on H100s: "
        "18.47, docs/validation.md)",
    )
    p.add_argument(
        "--allreduce-gb-s",
        type=float,
        default=None,
        help="all-reduce bus bandwidth, GB/s (default: the GPU spec's; vLLM <= 0.6 on H100s: "
        "128.1)",
    )
    add_json(p, "the profile's path and key figures")
    p.set_defaults(func=cmd_profile_llm)


if __name__ == "__main__":  # pragma: no cover
    print("run it as: batch-env profile llm --help", file=sys.stderr)
