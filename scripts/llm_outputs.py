"""Fingerprint every LLM env id and LLM task on fixed seeds, so that two versions of the
code can be compared run by run (issue 49: "behaviour unchanged, byte for byte").

Each run makes one env, plays one policy for a few episodes on fixed seeds and feeds
everything the env hands out into one SHA-256: each step's observation (its bytes),
reward (``repr``, exact), ``terminated``/``truncated``, ``info`` (every key, floats by
``repr``, arrays by their bytes), ``request_counts()`` and, at the end of each episode,
``info["serving"]`` (the summary). Frames are hashed too in the runs made with
``render_mode="rgb_array"``. What runs:

* ``LLMBatching-v0``, ``-v1``, ``-v2`` with their defaults, and with the other
  scheduler, a budget grid, a small KV cache (preemptions), a trace with token columns,
  request classes (shares, and each its own workload), admission orders (the oracle's
  ``srpt`` included), ``order_features``, a clock and the frame mode;
* every registered LLM task, as its protocol makes it, at a short episode length;
* prefix caching: chat sessions with two orders and a small cache, and the Mooncake
  trace's hashes;
* each with several policies: random actions (seeded), the first and the last action,
  and the baselines that act there (greedy, static-cap, memory-aware, sla-feedback,
  sarathi, edf, shortest-prompt, class-priority, oracle-srpt, vllm-apc, sglang-lpm).

Usage::

    python scripts/llm_outputs.py OUT.json            # write the fingerprints
    python scripts/llm_outputs.py OUT.json --check OLD.json   # and compare with OLD

Run it at the commit before a refactor and at the commit after; ``--check`` lists every
run whose fingerprint differs and exits 1 if any does. Two to three minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import batch_env
from batch_env import tasks

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(ROOT / "batch_env" / "workload" / "excerpts" / "azure_llm_2023_conv_excerpt.csv")
SEEDS = (0, 1, 7)
SHORT = {"horizon_requests": 60, "warmup_requests": 10}

#: (name, id, kwargs, policies) of the env runs
ENVS: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = [
    ("v0", "batch_env/LLMBatching-v0", {}, ("random", "first", "last", "greedy", "memory-aware")),
    (
        "v0-small-kv",
        "batch_env/LLMBatching-v0",
        {
            "gpu_memory_utilization": 0.42,
            "workload": {"kind": "poisson", "rate_per_s": 6.0},
            "grid": [4, 16, 64, 256],
        },
        ("random", "last", "sla-feedback"),
    ),
    (
        "v0-chunked",
        "batch_env/LLMBatching-v0",
        {"scheduler": "chunked", "budget_grid": [256, 1024, 2048]},
        ("random", "last", "sarathi"),
    ),
    ("v1", "batch_env/LLMBatching-v1", {}, ("random", "first", "last", "greedy")),
    (
        "v1-v0sched",
        "batch_env/LLMBatching-v1",
        {"scheduler": "vllm-v0", "workload": {"kind": "poisson", "rate_per_s": 5.0}},
        ("random", "last"),
    ),
    (
        "v1-budgets-smallkv",
        "batch_env/LLMBatching-v1",
        {
            "budget_grid": [256, 512, 2048],
            "gpu_memory_utilization": 0.42,
            "workload": {"kind": "poisson", "rate_per_s": 6.0},
        },
        ("random", "last", "static-budget", "sarathi"),
    ),
    (
        "v1-nosplit",
        "batch_env/LLMBatching-v1",
        {"decode_first": False, "split_prompts": False},
        ("random", "last"),
    ),
    (
        "v1-trace",
        "batch_env/LLMBatching-v1",
        {"workload": {"kind": "trace", "path": TRACE, "target_rate_per_s": 3.0}},
        ("random", "last"),
    ),
    ("v2", "batch_env/LLMBatching-v2", {}, ("random", "first", "last", "greedy")),
    (
        "v2-trace-clock",
        "batch_env/LLMBatching-v2",
        {
            "workload": {"kind": "trace", "path": TRACE, "random_offset": True},
            "clock_mhz": 1200.0,
        },
        ("random", "last"),
    ),
    (
        "v2-smallkv-budgets",
        "batch_env/LLMBatching-v2",
        {
            "budget_grid": [256, 512, 2048],
            "grid": [2, 8, 32, 256],
            "gpu_memory_utilization": 0.42,
            "workload": {"kind": "poisson", "rate_per_s": 7.0},
        },
        ("random", "first", "last", "sarathi"),
    ),
    (
        "v2-v0sched",
        "batch_env/LLMBatching-v2",
        {"scheduler": "vllm-v0", "workload": {"kind": "poisson", "rate_per_s": 5.0}},
        ("random", "last"),
    ),
    (
        "v2-classes-orders",
        "batch_env/LLMBatching-v2",
        {
            "classes": [
                {"name": "chat", "share": 3, "ttft_sla_ms": 500, "tpot_sla_ms": 40},
                {
                    "name": "batch",
                    "share": 1,
                    "ttft_sla_ms": 5000,
                    "weight": 0.5,
                    "lengths": {"kind": "fixed", "prompt_tokens": 900, "output_tokens": 40},
                },
            ],
            "orders": ["fcfs", "edf", "shortest-prompt", "class-priority", "srpt"],
            "oracle_info": True,
            "order_features": True,
            "workload": {"kind": "poisson", "rate_per_s": 6.0},
            "gpu_memory_utilization": 0.45,
        },
        ("random", "last", "edf", "shortest-prompt", "class-priority", "oracle-srpt"),
    ),
    (
        "v2-class-workloads",
        "batch_env/LLMBatching-v2",
        {
            "classes": [
                {"name": "a", "workload": {"kind": "poisson", "rate_per_s": 2.0}},
                {
                    "name": "b",
                    "workload": {"kind": "trace", "path": TRACE, "random_offset": True},
                    "ttft_sla_ms": 3000,
                },
            ],
        },
        ("random", "last"),
    ),
    (  # prefix caching (issue 63): chat sessions, two orders, a small cache (evictions)
        "v2-sessions-prefix",
        "batch_env/LLMBatching-v2",
        {
            "workload": {"kind": "sessions", "rate_per_s": 12.0, "system_prompts": 4},
            "orders": ["fcfs", "longest-prefix"],
            "budget_grid": [512, 2048],
            "gpu_memory_utilization": 0.3,
        },
        ("random", "last", "vllm-apc", "sglang-lpm"),
    ),
    (  # the Mooncake trace's hashes on Llama-3.1-8B / H100
        "v1-mooncake-prefix",
        "batch_env/LLMBatching-v1",
        {
            "profile": "llama-3.1-8b-h100",
            "max_model_len": 131_072,
            "max_num_batched_tokens": 8192,
            "gpu_memory_utilization": 0.5,
            "workload": {
                "kind": "trace",
                "dataset": "mooncake-conversation",
                "target_rate_per_s": 1.0,
            },
        },
        ("random", "last"),
    ),
    (
        "v2-frames",
        "batch_env/LLMBatching-v2",
        {"render_mode": "rgb_array", "horizon_requests": 15, "warmup_requests": 2},
        ("random",),
    ),
    (
        "v0-frames",
        "batch_env/LLMBatching-v0",
        {"render_mode": "rgb_array", "horizon_requests": 10, "warmup_requests": 2},
        ("random",),
    ),
]

#: each policy's parameters where the baseline needs some
PARAMS: dict[str, dict[str, Any]] = {"static-cap": {"cap": 32}, "static-budget": {}}


def _llm_tasks() -> list[str]:
    return [t for t, spec in tasks.TASKS.items() if spec.base.startswith("batch_env/LLMBatching")]


def _feed(h: Any, x: Any) -> None:
    """Feed ``x`` into the hash ``h``, exactly (floats by repr, arrays by bytes)."""
    if isinstance(x, dict):
        h.update(b"{")
        for k in sorted(x, key=str):
            h.update(str(k).encode())
            h.update(b":")
            _feed(h, x[k])
        h.update(b"}")
    elif isinstance(x, list | tuple):
        h.update(b"[")
        for v in x:
            _feed(h, v)
            h.update(b",")
        h.update(b"]")
    elif isinstance(x, np.ndarray):
        h.update(f"{x.dtype}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    elif isinstance(x, float | np.floating):
        h.update(repr(float(x)).encode())
    else:
        h.update(repr(x).encode())


def _policy(name: str, env: gym.Env, rng: np.random.Generator) -> Any:
    n = int(env.action_space.n)
    if name == "random":
        return lambda obs, info: int(rng.integers(n))
    if name == "first":
        return lambda obs, info: 0
    if name == "last":
        return lambda obs, info: n - 1
    import baselines

    pol = baselines.make(name, env=env, **PARAMS.get(name, {}))
    return pol.act


def run(env_id: str, kwargs: dict[str, Any], policy: str) -> dict[str, Any]:
    """One run's fingerprint: the hash, the steps and the episodes' summed reward."""
    h = hashlib.sha256()
    steps = 0
    total = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id, **kwargs)
        frames = kwargs.get("render_mode") == "rgb_array"
        for seed in SEEDS:
            rng = np.random.default_rng(seed)
            act = _policy(policy, env, rng)
            obs, info = env.reset(seed=seed)
            _feed(h, (obs, info, env.unwrapped.request_counts()))
            for _ in range(200_000):
                obs, r, term, trunc, info = env.step(act(obs, info))
                steps += 1
                total += r
                _feed(h, (obs, r, term, trunc, info, env.unwrapped.request_counts()))
                if frames:
                    _feed(h, env.render())
                if term or trunc:
                    break
            else:
                raise RuntimeError(f"{env_id} {kwargs} {policy}: no end in 200,000 steps")
        env.close()
    return {"sha256": h.hexdigest(), "steps": steps, "reward": total}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="where to write the fingerprints (JSON)")
    ap.add_argument("--check", type=Path, help="fingerprints of another version to compare with")
    ap.add_argument("--only", help="run only the runs whose name contains this")
    args = ap.parse_args(argv)
    batch_env.register_envs() if hasattr(batch_env, "register_envs") else None
    runs: list[tuple[str, str, dict[str, Any], str]] = []
    for name, env_id, kw, policies in ENVS:
        kw = {**SHORT, **kw}
        runs += [(f"{name}/{p}", env_id, kw, p) for p in policies]
    for task in _llm_tasks():
        short = task.split("/")[-1]
        pols = ["random", "first", "last", "greedy"]
        if "TwoClasses" in task:
            pols += ["edf", "class-priority"]
        runs += [(f"{short}/{p}", task, dict(SHORT), p) for p in pols]
    out: dict[str, Any] = {}
    for name, env_id, kw, pol in runs:
        if args.only and args.only not in name:
            continue
        out[name] = run(env_id, kw, pol)
        print(f"{name:40s} {out[name]['steps']:7d} steps  {out[name]['sha256'][:16]}", flush=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    if args.check is None:
        return 0
    old = json.loads(args.check.read_text())
    bad = [k for k in out if k in old and old[k]["sha256"] != out[k]["sha256"]]
    new = [k for k in out if k not in old]
    for k in bad:
        print(f"DIFFERS: {k}: {old.get(k)} -> {out[k]}")
    for k in new:
        print(f"NEW (not in {args.check}): {k}")
    print(f"{len(out) - len(bad) - len(new)} of {len(out) - len(new)} runs identical", end="")
    print(f" ({len(new)} new)" if new else "")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
