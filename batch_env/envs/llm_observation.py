"""What the LLM envs show a policy: the observation and ``info`` of an LLM server.

The observation is a ``Box(float32)`` with finite bounds: the 13 base features
(:data:`BASE_FEATURES`, named :data:`OBS_FEATURES`), then, with several request classes,
three features per class (:func:`per_class_features`), then, with ``order_features``, two per
admission order (:func:`per_order_features`), then, with a clock grid, the SM clock in force /
the grid's highest (:data:`CLOCK_FEATURE`), then, with prefix caching, the cached share of
the waiting prompts and the free cached blocks (:data:`PREFIX_FEATURES`).
:func:`observation_features` gives a server's
list, in that order, and :func:`observation_space` the space built from it (so the names
and the bounds agree); the env exposes it as ``observation_features``. Everything here
reads the server's state and queries (:class:`batch_env.llm.LLMServer`) and changes
nothing; true output lengths reach only ``info["oracle"]``, and only with
``oracle_info=True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from gymnasium import spaces

from ..llm import Iteration, LLMServer
from ..llm.prefixes import prefix_info, waiting_cached_fraction
from ..llm.views import class_counts, first_admitted, past_ttft_waiting
from .features import ObsFeature, feature_names, features_box

if TYPE_CHECKING:
    from ..llm.prefix_cache import PrefixKVCache

_CLIP = 100.0
_CLIPPED = f"clipped at {_CLIP:g}"

#: The features every LLM env's observation starts with (:func:`observe` computes them,
#: in this order).
BASE_FEATURES: tuple[ObsFeature, ...] = (
    ObsFeature(
        "waiting_over_max_num_seqs",
        "requests waiting (not admitted; a preempted request waits again)",
        "requests",
        f"/ max_num_seqs, {_CLIPPED}",
        0.0,
        _CLIP,
    ),
    ObsFeature(
        "running_over_max_num_seqs",
        "requests running (admitted: prefilling or decoding)",
        "requests",
        "/ max_num_seqs",
        0.0,
        1.0,
    ),
    ObsFeature(
        "kv_utilization",
        "KV-cache blocks in use",
        "blocks",
        "/ KV blocks in all",
        0.0,
        1.0,
    ),
    ObsFeature(
        "oldest_wait_over_ttft_sla",
        "age of the oldest waiting request (0 when none waits)",
        "s",
        f"/ TTFT SLA (ttft_sla_ms, or a single class's own), {_CLIPPED}",
        0.0,
        _CLIP,
    ),
    ObsFeature(
        "past_ttft_deadline_fraction",
        "waiting requests without a first token whose TTFT deadline has passed",
        "requests",
        "/ waiting requests (0 when none waits)",
        0.0,
        1.0,
    ),
    ObsFeature(
        "waiting_prompt_tokens_over_budget",
        "tokens to prefill of the waiting requests (prompt + generated: a preempted "
        "request recomputes its generated tokens)",
        "tokens",
        f"/ max_num_batched_tokens, {_CLIPPED}",
        0.0,
        _CLIP,
    ),
    ObsFeature(
        "decode_latency_recent_over_tpot_sla",
        "mean time of the last recent_iterations decode iterations (0 before the first)",
        "s",
        f"/ TPOT SLA (tpot_sla_ms, or a single class's own), {_CLIPPED}",
        0.0,
        _CLIP,
    ),
    ObsFeature(
        "batch_size_recent_over_max_num_seqs",
        "mean batch size of the last recent_iterations decode iterations (0 before the first)",
        "requests",
        "/ max_num_seqs",
        0.0,
        1.0,
    ),
    ObsFeature(
        "arrival_rate_over_10_per_s",
        "arrival-rate estimate: a time-decayed count of arrivals (time constant "
        "rate_window_s), started at the workload's mean rate",
        "requests/s",
        f"/ 10, {_CLIPPED}",
        0.0,
        _CLIP,
    ),
    ObsFeature(
        "last_cap_over_max_num_seqs",
        "the cap on running requests in force (the last action's)",
        "requests",
        "/ max_num_seqs",
        0.0,
        1.0,
    ),
    ObsFeature(
        "running_context_mean_over_max_model_len",
        "mean context (prompt + generated tokens) of the running requests that decode "
        "(0 when none does)",
        "tokens",
        "/ max_model_len",
        0.0,
        1.0,
    ),
    ObsFeature(
        "preempted_last_step",
        "requests preempted by the step's last iteration",
        "requests",
        "/ 10, clipped at 1",
        0.0,
        1.0,
    ),
    ObsFeature(
        "last_iteration_was_prefill",
        "whether the last iteration computed prompt tokens (a prefill, or a mixed iteration "
        "with prompt chunks)",
        "flag",
        "1 if so, else 0",
        0.0,
        1.0,
    ),
)

#: the names of :data:`BASE_FEATURES`, in order: the whole observation without classes,
#: ``order_features`` or a clock grid (an env's own list: its ``observation_features``)
OBS_FEATURES: tuple[str, ...] = feature_names(BASE_FEATURES)

#: per class (several classes), named ``<class>.<name>``: :func:`per_class_features`
_PER_CLASS: tuple[tuple[ObsFeature, str], ...] = (
    (
        ObsFeature(
            "waiting_over_max_num_seqs", "", "requests", f"/ max_num_seqs, {_CLIPPED}", 0.0, _CLIP
        ),
        "requests of class {} waiting",
    ),
    (
        ObsFeature("running_over_max_num_seqs", "", "requests", "/ max_num_seqs", 0.0, 1.0),
        "requests of class {} running",
    ),
    (
        ObsFeature(
            "oldest_wait_over_ttft_sla",
            "",
            "s",
            f"/ the class's TTFT SLA, {_CLIPPED}",
            0.0,
            _CLIP,
        ),
        "age of the oldest waiting request of class {} (0 when none waits)",
    ),
)

#: per admission order (``order_features=True``), named ``<order>.<name>``:
#: :func:`per_order_features`
_PER_ORDER: tuple[tuple[ObsFeature, str], ...] = (
    (
        ObsFeature(
            "next_tokens_over_budget",
            "",
            "tokens",
            f"/ max_num_batched_tokens, {_CLIPPED}; 0 when none waits",
            0.0,
            _CLIP,
        ),
        "tokens to prefill (prompt + generated) of the first waiting request order {} would admit",
    ),
    (
        ObsFeature(
            "next_wait_over_ttft_sla",
            "",
            "s",
            f"/ its class's TTFT SLA, {_CLIPPED}; 0 when none waits",
            0.0,
            _CLIP,
        ),
        "age of the first waiting request order {} would admit",
    ),
)

#: the features appended with prefix caching (``prefix_caching``)
PREFIX_FEATURES: tuple[ObsFeature, ...] = (
    ObsFeature(
        "waiting_cached_fraction",
        "tokens to prefill of the first 32 waiting requests (queue order) that their cached "
        "prefixes cover now (0 when none waits)",
        "tokens",
        "/ their tokens to prefill",
        0.0,
        1.0,
    ),
    ObsFeature(
        "kv_cached_free_fraction",
        "KV blocks free but holding a cached prefix (evicted least recently used first)",
        "blocks",
        "/ KV blocks in all",
        0.0,
        1.0,
    ),
)

#: the last feature with a clock grid (``clock_grid``)
CLOCK_FEATURE = ObsFeature(
    "sm_clock_over_max_clock",
    "the GPU's SM clock in force (the last action's)",
    "MHz",
    "/ the clock grid's highest",
    0.0,
    1.0,
)


#: with a clock latency (``clock_latency_ms``), after the clock: the clock asked for
CLOCK_TARGET_FEATURE = ObsFeature(
    "sm_clock_requested_over_max_clock",
    "the SM clock last asked for (pending until the clock latency has passed)",
    "MHz",
    "/ the clock grid's highest",
    0.0,
    1.0,
)


def _clock_features(server: LLMServer) -> tuple[float, ...]:
    """The clock in force and, with a clock latency, the clock asked for, each over the
    grid's highest (none without a grid)."""
    clock = server.sm_clock
    if clock.mhz is None:
        return ()
    top = clock.grid[-1]
    if clock.latency_s <= 0.0:
        return (clock.mhz / top,)
    return (clock.mhz / top, (clock.requested_mhz or clock.mhz) / top)


def _clock_pending(server: LLMServer) -> dict[str, float]:
    """``info``'s pending clock change, with a clock latency: the clock asked for and the
    milliseconds until it takes effect (0 when none is pending)."""
    clock = server.sm_clock
    if clock.mhz is None or clock.latency_s <= 0.0:
        return {}
    left = clock.switch_at - server.now if clock.pending >= 0 else 0.0
    return {
        "clock_requested_mhz": clock.requested_mhz or clock.mhz,
        "clock_change_in_ms": 1e3 * max(left, 0.0),
    }


def per_class_features(classes: Sequence[str]) -> tuple[ObsFeature, ...]:
    """The three features of each request class named in ``classes``, in that order
    (appended with several classes): its waiting and running requests and its oldest
    wait, named ``<class>.waiting_over_max_num_seqs``, ...."""
    return tuple(f.prefixed(c, m.format(repr(c))) for c in classes for f, m in _PER_CLASS)


def per_order_features(orders: Sequence[str]) -> tuple[ObsFeature, ...]:
    """The two features of each admission order of ``orders`` (appended with
    ``order_features=True``): the first waiting request it would admit, its tokens to
    prefill and its age, named ``<order>.next_tokens_over_budget``, ...."""
    return tuple(f.prefixed(o, m.format(repr(o))) for o in orders for f, m in _PER_ORDER)


def observation_features(server: LLMServer, with_orders: bool) -> tuple[ObsFeature, ...]:
    """The features of the observation of an env over ``server`` (``with_orders``: the
    env's ``order_features``), in the order :func:`observe` computes them."""
    return (
        *BASE_FEATURES,
        *(per_class_features([c.name for c in server.classes]) if server.multi else ()),
        *(per_order_features(server.orders) if with_orders else ()),
        *((CLOCK_FEATURE,) if server.sm_clock.grid else ()),
        *((CLOCK_TARGET_FEATURE,) if server.sm_clock.grid and server.sm_clock.latency_s else ()),
        *(PREFIX_FEATURES if server.prefix_ratio is not None else ()),
    )


def observation_space(server: LLMServer, order_features: bool) -> spaces.Box:
    """The observation space: the bounds of :func:`observation_features`."""
    return features_box(observation_features(server, order_features))


def observe(server: LLMServer, order_features: bool) -> np.ndarray:
    """The observation, entry by entry the features of :func:`observation_features`
    (:data:`BASE_FEATURES`, then three per class with several classes, then two per
    admission order with ``order_features``, then the SM clock with a clock grid)."""
    srv = server.state
    N = server.config.max_num_seqs
    w = len(srv.waiting)
    n_run = len(srv.running)
    n_dec = n_run - srv.prefilling
    if w:
        oldest = min((server.now - server.arrivals[srv.waiting[0]]) / server.ttft_scale_s, _CLIP)
        past = past_ttft_waiting(server) / w
        ptoks: float = srv.waiting_tokens
    else:
        oldest = past = ptoks = 0.0
    time_sum, batch_sum, n_recent = server.recent_decode()
    return np.array(
        [
            min(w / N, _CLIP),
            n_run / N,
            srv.kv.used / srv.kv.total,
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
            *_clock_features(server),
            *(_prefix_features(server) if server.prefix_ratio is not None else ()),
        ],
        dtype=np.float32,
    )


def _prefix_features(server: LLMServer) -> tuple[float, float]:
    """:data:`PREFIX_FEATURES`: the cached fraction of the waiting prompts' head, and the
    free cached blocks / all blocks."""
    srv = server.state
    kv = cast("PrefixKVCache", srv.kv)
    return waiting_cached_fraction(srv), kv.free_cached / kv.total


def _class_features(server: LLMServer) -> list[float]:
    """Three features per class (several classes): waiting / max_num_seqs (clipped at
    100), running / max_num_seqs, and its oldest waiting request's age / its TTFT SLA
    (clipped at 100; 0 when none waits)."""
    waiting, running, oldest = class_counts(server)
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
        h = first_admitted(server, order)
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
        "kv_blocks_used": srv.kv.used,
        "kv_blocks_total": srv.kv.total,
        "running": len(R),
        "waiting": len(srv.waiting),
        "queue_len": len(srv.waiting),
        "decode_latency_recent_ms": 1000.0 * time_sum / n_recent if n_recent else 0.0,
        "batch_size_recent": batch_sum / n_recent if n_recent else 0.0,
        "cap": server.cap,
        "budget": server.budget,
        **({"order": server.order} if len(server.orders) > 1 else {}),
        **({"clock_mhz": clock} if (clock := server.sm_clock.mhz) is not None else {}),
        **_clock_pending(server),
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
        waiting, running, _ = class_counts(server)
        info.update(waiting_by_class=waiting, running_by_class=running)
    if server.prefix_ratio is not None:
        info.update(prefix_info(cast("PrefixKVCache", srv.kv)))
    return info


def _oracle_view(server: LLMServer) -> dict[str, Any]:
    """``info["oracle"]`` (``oracle_info=True``): what no realizable policy knows, the
    true output tokens each waiting request still has to produce, in queue order."""
    srv = server.state
    return {"waiting_remaining_output": [srv.output[e] - srv.generated[e] for e in srv.waiting]}
