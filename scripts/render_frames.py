"""Write one example ``rgb_array`` frame of each env to ``docs/img/`` (PNG).

Run ``python scripts/render_frames.py`` from the repository root. Each env runs a fixed,
seeded policy to a state that shows its panels (a queue with requests past the SLA, a
batch or groups in service, a timeline of batches), then its frame is written as
``docs/img/render_{dynamic,node,llm,llm_v1}.png`` (:func:`batch_env.render.write_png`: the
standard library's ``zlib``, no imaging package needed); the same seeds give the same files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batch_env.envs import (  # noqa: E402
    DynamicBatchingEnv,
    LLMBatchingEnv,
    LLMBatchingV1Env,
    LLMBatchingV2Env,
    LLMRoutingEnv,
    NodeBatchingEnv,
)
from batch_env.render import write_png  # noqa: E402


def dynamic_frame() -> np.ndarray:
    """DynamicBatching-v0 at load 0.8 under "run 16 when 16 wait, else wait": stopped at
    the first state whose queue holds requests both past the SLA and within it."""
    env = DynamicBatchingEnv(render_mode="rgb_array", workload={"kind": "poisson", "load": 0.8})
    env.reset(seed=7)
    for _ in range(4000):
        if env.step(16 if env.queue_len >= 16 else 0)[3]:
            break
        past = env.past_sla_waiting()
        if past >= 3 and 5 <= env.queue_len - past and env.queue_len <= 48:
            break
    return env.render()


def node_frame() -> np.ndarray:
    """NodeBatching-v0 at load 0.8 under seeded random valid actions: several groups in flight."""
    env = NodeBatchingEnv(render_mode="rgb_array", workload={"kind": "poisson", "load": 0.8})
    env.reset(seed=3)
    rng = np.random.default_rng(3)
    for i in range(2000):
        if env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))[3]:
            break
        if i > 600 and env.groups_in_flight >= 3 and env.queue_len >= 5:
            break
    return env.render()


def llm_frame(cls: type[LLMBatchingEnv] = LLMBatchingEnv) -> np.ndarray:
    """LLMBatching-v0 (or ``cls``: v1) with a small KV cache at 16 requests/s, cap = max:
    the cache fills, requests are preempted (purple in the queue)."""
    env = cls(
        render_mode="rgb_array",
        gpu_memory_utilization=0.2,
        max_model_len=512,
        max_num_seqs=64,
        lengths={"kind": "lognormal", "prompt_tokens": 180, "output_tokens": 120},
        workload={"kind": "poisson", "rate_per_s": 16},
        horizon_requests=2000,
    )
    env.reset(seed=1)
    for i in range(3000):
        *_, truncated, info = env.step(len(env.grid) - 1)
        if truncated:
            break
        # the cache nearly full, and requests just preempted: they wait at the queue's head
        full = info["kv_blocks_used"] > 0.95 * info["kv_blocks_total"]
        if i > 800 and full and info["preempted"] > 0:
            break
    return env.render()


def llm_v2_frame() -> np.ndarray:
    """LLMBatching-v2 with two request classes (interactive chat beside batch work with
    long prompts and loose SLAs) on a small KV cache at 16 requests/s, cap = max: a
    stripe under each waiting request's bar shows its class, the legend each class's
    requests waiting / running."""
    env = LLMBatchingV2Env(
        render_mode="rgb_array",
        gpu_memory_utilization=0.2,
        max_model_len=512,
        max_num_seqs=64,
        lengths={"kind": "lognormal", "prompt_tokens": 180, "output_tokens": 120},
        workload={"kind": "poisson", "rate_per_s": 16},
        classes=[
            {"name": "chat", "share": 0.7},
            {
                "name": "batch",
                "share": 0.3,
                "ttft_sla_ms": 30_000.0,
                "tpot_sla_ms": 200.0,
                "weight": 0.1,
                "lengths": {"kind": "lognormal", "prompt_tokens": 400, "output_tokens": 60},
            },
        ],
        horizon_requests=2000,
    )
    env.reset(seed=1)
    for i in range(3000):
        *_, truncated, info = env.step(len(env.grid) - 1)
        if truncated:
            break
        if i > 200 and min(info["waiting_by_class"]) >= 3:  # both classes wait
            break
    return env.render()


def routing_frame() -> np.ndarray:
    """LLMRouting-v0: four replicas, two A100s and two H100s, at 60 requests/s routed by
    SGLang's cache-aware rule; a frame once a queue has formed."""
    import baselines

    env = LLMRoutingEnv(
        replicas=[{"profile": "llama-3.1-8b-a100"}] * 2 + [{"profile": "llama-3.1-8b-h100"}] * 2,
        render_mode="rgb_array",
        workload={"kind": "poisson", "rate_per_s": 60},
        horizon_requests=2000,
    )
    policy = baselines.make("sglang-cache-aware", env)
    obs, info = env.reset(seed=1)
    for i in range(3000):
        obs, _r, _t, truncated, info = env.step(policy.act(obs, info))
        if truncated or (i > 300 and info["replicas"]["waiting"].sum() >= 6):
            break
    return env.render()


def main() -> None:
    """Write the six frames to ``docs/img/``."""
    out = Path(__file__).resolve().parents[1] / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    frames = (
        ("dynamic", dynamic_frame),
        ("node", node_frame),
        ("llm", llm_frame),
        ("llm_v1", lambda: llm_frame(LLMBatchingV1Env)),
        ("llm_v2", llm_v2_frame),
        ("routing", routing_frame),
    )
    for name, make in frames:
        path = out / f"render_{name}.png"
        write_png(path, make())
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
