"""What the LLM envs show a policy: the observation and ``info`` of an LLM server.

The observation is a ``Box(float32)`` with finite bounds: the :data:`OBS_FEATURES` (the
table in :class:`batch_env.envs.llm_batching.LLMBatchingEnv`'s docstring), then, with
several request classes, three features per class, then, with ``order_features``, two per
admission order, then, with a clock grid, the SM clock in force / the grid's highest. Everything here reads the server's state and queries
(:class:`batch_env.llm.LLMServer`) and changes nothing; true output lengths reach only
``info["oracle"]``, and only with ``oracle_info=True``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from ..llm import Iteration, LLMServer

OBS_FEATURES: tuple[str, ...] = (
    "waiting_over_max_num_seqs",
    "running_over_max_num_seqs",
    "kv_utilization",
    "oldest_wait_over_ttft_sla",
    "past_ttft_deadline_fraction",
    "waiting_prompt_tokens_over_budget",
    "decode_latency_recent_over_tpot_sla",
    "batch_size_recent_over_max_num_seqs",
    "arrival_rate_over_10_per_s",
    "last_cap_over_max_num_seqs",
    "running_context_mean_over_max_model_len",
    "preempted_last_step",
    "last_iteration_was_prefill",
)
_CLIP = 100.0


def observation_space(server: LLMServer, order_features: bool) -> spaces.Box:
    """The observation space: :data:`OBS_FEATURES`' bounds, then the classes' and the
    orders' (see :func:`observe`)."""
    n_orders = len(server.orders) if order_features else 0
    high = np.array(
        [_CLIP, 1.0, 1.0, _CLIP, 1.0, _CLIP, _CLIP, 1.0, _CLIP, 1.0, 1.0, 1.0, 1.0]
        + ([_CLIP, 1.0, _CLIP] * len(server.classes) if server.multi else [])
        + [_CLIP, _CLIP] * n_orders
        + ([1.0] if server.clocks else []),
        dtype=np.float32,
    )
    return spaces.Box(np.zeros(high.size, dtype=np.float32), high, dtype=np.float32)


def observe(server: LLMServer, order_features: bool) -> np.ndarray:
    """The observation (:data:`OBS_FEATURES`, then three features per class with several
    classes, then two per admission order with ``order_features``, then the SM clock in
    force / the grid's highest with a clock grid)."""
    srv = server.state
    N = server.config.max_num_seqs
    w = len(srv.waiting)
    n_run = len(srv.running)
    n_dec = n_run - srv.prefilling
    if w:
        oldest = min((server.now - server.arrivals[srv.waiting[0]]) / server.ttft_scale_s, _CLIP)
        past = server.past_ttft_waiting() / w
        ptoks: float = srv.waiting_tokens
    else:
        oldest = past = ptoks = 0.0
    time_sum, batch_sum, n_recent = server.recent_decode()
    return np.array(
        [
            min(w / N, _CLIP),
            n_run / N,
            srv.kv_used / srv.kv_total,
            oldest,
            past,
            min(ptoks / server.max_num_batched_tokens, _CLIP),
            min(time_sum / n_recent / server.tpot_scale_s, _CLIP) if n_recent else 0.0,
            batch_sum / n_recent / N if n_recent else 0.0,
            min(server.rate_per_s / 10.0, _CLIP),
            server.cap / N,
            srv.decode_context / n_dec / server.max_model_len if n_dec > 0 else 0.0,
            min(server.last_preempted / 10.0, 1.0),
            server.last_prefill,
            *(_class_features(server) if server.multi else ()),
            *(_order_features(server) if order_features else ()),
            *((server.clock / server.clocks[-1],) if server.clock is not None else ()),
        ],
        dtype=np.float32,
    )


def _class_features(server: LLMServer) -> list[float]:
    """Three features per class (several classes): waiting / max_num_seqs (clipped at
    100), running / max_num_seqs, and its oldest waiting request's age / its TTFT SLA
    (clipped at 100; 0 when none waits)."""
    waiting, running, oldest = server.class_counts()
    N, now, ttft = server.config.max_num_seqs, server.now, server.sla_books.ttft_s
    out: list[float] = []
    for c in range(len(server.classes)):
        age = (now - oldest[c]) / ttft[c] if waiting[c] else 0.0
        out += [min(waiting[c] / N, _CLIP), running[c] / N, min(age, _CLIP)]
    return out


def _order_features(server: LLMServer) -> list[float]:
    """Two features per admission order (``order_features=True``): the tokens to
    prefill of the first waiting request the order would admit / max_num_batched_tokens
    (clipped at 100), and its age / its class's TTFT SLA (clipped at 100); both 0 when
    none waits."""
    srv, now, ttft = server.state, server.now, server.sla_books.ttft_s
    if not srv.waiting:
        return [0.0, 0.0] * len(server.orders)
    budget = server.max_num_batched_tokens
    out: list[float] = []
    for order in server.orders:
        h = server.first_admitted(order)
        age = (now - server.arrivals[h]) / ttft[srv.request_class[h]]
        out += [min(srv.context(h) / budget, _CLIP), min(age, _CLIP)]
    return out


def step_info(
    server: LLMServer,
    dt: float,
    comps: dict[str, float],
    last: Iteration | None,
    mask: np.ndarray,
    oracle: bool,
    energy_source: str,
) -> dict[str, Any]:
    """The ``info`` of a step (``dt`` seconds, reward components ``comps``, ``last`` the
    last iteration it ran; ``mask``: the action mask; ``oracle``: add ``info["oracle"]``)."""
    srv = server.state
    time_sum, batch_sum, n_recent = server.recent_decode()
    R = srv.running
    info = {
        "kv_blocks_used": srv.kv_used,
        "kv_blocks_total": srv.kv_total,
        "running": len(R),
        "waiting": len(srv.waiting),
        "queue_len": len(srv.waiting),
        "decode_latency_recent_ms": 1000.0 * time_sum / n_recent if n_recent else 0.0,
        "batch_size_recent": batch_sum / n_recent if n_recent else 0.0,
        "cap": server.cap,
        "budget": server.budget,
        **({"order": server.order} if len(server.orders) > 1 else {}),
        **({"clock_mhz": server.clock} if server.clock is not None else {}),
        **({"oracle": _oracle_view(server)} if oracle else {}),
        "chunk_tokens": server.last_chunk_tokens,
        "prefilling": srv.prefilling,
        "decode_context": srv.decode_context,
        # tokens computed of the oldest prefill in progress (the running list's tail)
        "prefill_head_done": srv.prefill_done[R[len(R) - srv.prefilling]] if srv.prefilling else 0,
        "iteration": last.kind if last else "idle",
        "iteration_time_s": last.duration_s if last else 0.0,
        "preempted": server.last_preempted,
        "preemptions_total": srv.preemptions,
        "rejected_total": server.rejected_total(),
        "clipped_total": server.clipped,
        "dropped_total": server.drops,
        "now_s": server.now,
        "dt_s": dt,
        "reward_components": comps,
        "action_mask": mask.copy(),
        "energy_source": energy_source,
    }
    if server.multi:
        waiting, running, _ = server.class_counts()
        info.update(waiting_by_class=waiting, running_by_class=running)
    return info


def _oracle_view(server: LLMServer) -> dict[str, Any]:
    """``info["oracle"]`` (``oracle_info=True``): what no realizable policy knows, the
    true output tokens each waiting request still has to produce, in queue order."""
    srv = server.state
    return {"waiting_remaining_output": [srv.output[e] - srv.generated[e] for e in srv.waiting]}
