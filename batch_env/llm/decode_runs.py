"""The LLM server's decode-only stretches, run in one loop (:func:`run_decodes`).

Where no prefill is in progress and every setting runs the same decode (nothing waits, or
no setting admits anything), the coming iterations are decode steps of every running
request until the next arrival, a decode that needs a KV block not free, the episode's
end, or (when requests wait) the first completion; the one that ends after the next
arrival is begun too, for the caller to end as it ends the scheduler's (it admits the
arrival). With prefix caching no stretch runs while requests wait: the decodes' blocks
evict cached ones, which can change the request the longest-prefix order offers first,
and let it fit with no completion. :func:`run_decodes` runs them without the scheduler,
to the bit as it would: the same times, energy, latency and KV-use
integrals summed in the same order, the same completions, the rate estimate brought up
to every boundary; each request's tokens and blocks, the recent windows and the counters
are brought up to date once, at the end (:func:`catch_up`), and the loop's clock and
integrals are committed through its public operation
(:meth:`batch_env.core.ServingLoop.commit_stretch`). ``tests/test_llm_v2.py`` and
``tests/test_llm_prefix.py`` hold the result identical to running each iteration
through the scheduler. Each function takes the :class:`~batch_env.llm.LLMServer`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection
from typing import Any

from .orders import candidates
from .scheduler import Iteration, Started, new_iteration, new_outcome


def run_decodes(server: Any) -> tuple[int, Iteration | None, Started | None]:
    """Run the coming decode-only iterations in one loop: those before the next
    arrival, while no decode needs a KV block that is not free, and until the episode
    ends (or, when requests wait, the first completion). Returns how many ran, the last,
    and the decode that ends after the next arrival, begun (``None`` where the stretch
    stopped for another reason, or where its first iteration would end after it).

    That last decode begins before the arrival, where no setting admits a waiting
    request, so it is a decode of every running request, as the scheduler would begin
    it: the caller ends it
    (:meth:`~batch_env.llm.LLMServer.end_iteration`, which admits the arrival) as it
    would end the scheduler's. Begun here, it is planned, started and applied to the
    bit as :meth:`~batch_env.llm.LLMServer.begin_iteration` does: its blocks taken, its
    tokens generated, its completions out of the running list with their blocks held,
    its figures the loop's.

    Called at a boundary where no prefill is in progress and every setting runs the
    same decode (nothing waits, or no setting admits anything), with the profile
    executor. Each iteration is the chunked scheduler's decode to the bit: the same
    time, energy, latency and KV-use integrals, summed in the same order, the same
    completions (:meth:`finish`), the rate estimate brought up to every boundary; what
    no boundary reads in between (each request's tokens and blocks, the recent
    windows, the counters) is brought up to date once, at the end. The requests'
    completions are scheduled from their remaining tokens, and their block growth
    from their block phase (:class:`batch_env.llm.state.LLMServerState`), so an iteration
    costs no pass over the running requests. ``tests/test_llm_v2.py`` holds the
    result identical to running each iteration through the scheduler.
    """
    srv = server.state
    R = srv.running
    kv = srv.kv
    bs, total = srv.block_size, kv.total
    K0 = K = srv.decode_steps
    used = kv.used  # kv.used + the decodes' blocks not yet taken from it
    counts = [len(bucket) for bucket in srv.block_phase]
    b = len(R)
    if not b or counts[(1 - K) % bs] > total - used or (kv.prefix and srv.waiting):
        # a decode must preempt: the scheduler's own path; and with prefix caching while
        # requests wait, the decodes' blocks evict cached ones, which can change the
        # request an order offers first (longest-prefix) and let it fit with no
        # completion: each iteration runs through the scheduler, which checks
        return 0, None, None
    # the next arrival, or a pending clock change (the iteration that would end after it
    # runs at the clock it starts at: batch_env/llm/clock.py)
    t_next = min(server.peek_arrival(), server.sm_clock.switch_at)
    prof = server.profile
    rule = server.scheduler.cascade  # cascade attention: the prefix all hold read once
    base, per_ctx, pw, shared = _step(prof, srv, rule, R, {}, b)
    seg0 = cascades = 0  # the iteration the current step's figures began at; cascade ones
    ctx = srv.decode_context
    if server.now + (base + per_ctx * ctx) >= t_next:
        return 0, None, None  # the first iteration admits an arrival (before any setup)
    # requests wait, but no setting admits any (the plan was forced, without chunks);
    # without a completion none will (the cap's room and the budget left stay, the
    # free blocks only shrink), so after a completion the queue's head is tried (without
    # prefix caching: above)
    blocked = bool(srv.waiting)
    P, out = srv.prompt, srv.output
    finishing = _completions(R, out, srv.generated)
    stops = sorted(finishing)  # the iterations with completions, in turn
    stop, nxt = 0, stops[0]  # (a running request completes: the dict is never empty)
    now, L, E, kv_int = server.now, server.latency_integral_s, server.energy_j, server.kv_integral
    rate, (rate_t, rate_n) = server.rate_per_s, server.rate_since
    tau, horizon = server.rate_window_s, server.horizon_s
    recent: deque[tuple[float, int]] = deque(maxlen=server.config.recent_iterations)
    done: dict[int, int] = {}  # finished request -> its iteration
    j = tokens = 0
    n_sys = server.in_system
    exp = math.exp
    finished_now: list[int] | None = None
    crossing: Started | None = None
    while True:
        if j:  # the boundary before iteration j: what run_to_epoch checks there
            if now >= horizon or not b:
                break
            if finished_now and (
                server.summary_done()
                or (blocked and head_fits(server, b, used + counts[(1 - K) % bs]))
            ):
                break  # the episode's end, or the freed room and blocks admit the head
        need = counts[(1 - K) % bs]
        if need > total - used:
            break  # preemption: the scheduler's own path
        d = base + per_ctx * ctx
        energy = d * pw
        t = now + d
        if t >= t_next:
            # this iteration admits an arrival; it is a decode of every running request (no
            # setting admits a waiting one here): begun here, ended by the caller
            used += need
            ctx += b
            K += 1
            leaving = finishing[j] if j == nxt else []
            for e in leaving:
                ctx -= P[e] + out[e]
            it = new_iteration((d, "decode", False, b, 0, 0, False))
            crossing = Started(new_outcome((it, [], leaving, 0)), energy / d if d > 0.0 else 0.0, t)
            break
        if j:  # the rate estimate at that boundary (update_rate; no arrival came)
            rate = rate * exp(-(now - rate_t) / tau) + 0.0
            rate_t = now
        # the iteration: its blocks, then the clock (advance), then the tokens
        used += need
        dt = t - now
        kv_int += used * dt
        L += n_sys * dt
        E += (energy / d if d > 0.0 else 0.0) * dt
        now = t
        recent.append((d, b))
        tokens += b
        ctx += b
        K += 1
        if j != nxt:
            finished_now = None
        else:
            finished_now = finishing[j]
            stop += 1
            nxt = stops[stop] if stop < len(stops) else -1
            kv.take(used - kv.used)  # the decodes' blocks so far, before any is freed
            for e in finished_now:
                g = out[e]
                ctx -= P[e] + g
                r = (P[e] + g - K) % bs
                counts[r] -= 1
                used -= kv.free(e, _grown(K0, r, j + 1, bs))
                done[e] = j
                server.finish(e, t)
            b -= len(finished_now)
            n_sys -= len(finished_now)  # as finish did to the loop's count
            if b:
                cascades += j + 1 - seg0 if shared else 0
                seg0 = j + 1
                base, per_ctx, pw, shared = _step(prof, srv, rule, R, done, b)
        j += 1
    if not j:
        return 0, None, None
    steps = j + 1 if crossing else j  # the decode steps each running request took
    srv.cascade_iterations += cascades + (steps - seg0 if shared else 0)
    server.kv_integral = kv_int
    server.commit_stretch(now, L, E, rate, (rate_t, rate_n))
    kv.take(used - kv.used)
    srv.decode_context, srv.decode_steps = ctx, K
    srv.tokens_out += tokens + (b if crossing else 0)
    catch_up(
        server, done, j, K0, tokens, recent, steps, crossing.outcome.finished if crossing else ()
    )
    return j, new_iteration((recent[-1][0], "decode", False, recent[-1][1], 0, 0, False)), crossing


def head_fits(server: Any, decodes: int, used: int) -> bool:
    """Whether the largest setting would schedule a chunk of the first waiting request
    of some admission order, with ``decodes`` requests running, all decoding, and
    ``used`` KV blocks in use once their blocks for the next token are given (the
    chunked scheduler's scan, with no prefill in progress, stops at that first
    request). If it would not, no setting would (monotone)."""
    srv = server.state
    cfg = server.config
    if server.grid[-1] - decodes <= 0:
        return False  # no room under the largest cap
    left = server.budgets[-1] - (decodes if cfg.decode_first else 0)
    free = srv.kv.total - used - srv.kv.watermark
    if left <= 0 or free <= 0:
        return False
    if cfg.split_prompts:
        return True  # a chunk of at least one token fits
    kv = srv.kv
    for order in server.orders:  # the first waiting request each order offers
        e = next(iter(candidates(srv, 1, order)))
        p = srv.prompt[e] + srv.generated[e]
        h, taken = kv.lookup(e, p) if kv.prefix else (0, 0)
        if p - h * srv.block_size <= left and -(-p // srv.block_size) - h + taken <= free:
            return True
    return False


def catch_up(
    server: Any,
    done: dict[int, int],
    j: int,
    k0: int,
    tokens: int,
    recent: deque[tuple[float, int]],
    steps: int,
    leaving: Collection[int],
) -> None:
    """After :func:`run_decodes`' ``j`` iterations from decode step ``k0``: each
    request's tokens and blocks (``done``: those that completed), the running list,
    the counters and the recent windows, which no boundary read in between. Each
    running request took ``steps`` decode steps: ``j``, or ``j + 1`` with the decode
    begun after them, whose completions (``leaving``) are out of the running list with
    their blocks held."""
    srv = server.state
    P, G, out, kv, phase, bs = (
        srv.prompt,
        srv.generated,
        srv.output,
        srv.kv,
        srv.block_phase,
        srv.block_size,
    )
    keep = []
    held = []  # the entries given blocks: those kept, and those leaving
    grown = []
    for e in srv.running:
        r = (P[e] + G[e] - k0) % bs
        if e in done:  # (its blocks were freed at its completion)
            G[e] = out[e]
            phase[r].remove(e)
        else:
            G[e] += steps
            j0 = (1 - k0 - r) % bs  # _grown(k0, r, steps, bs), written out (one per request)
            grown.append(0 if j0 >= steps else (steps - 1 - j0) // bs + 1)
            held.append(e)
            if leaving and e in leaving:
                phase[r].remove(e)
            else:
                keep.append(e)
    kv.attach_many(held, grown)
    srv.running = keep
    server.iterations += j
    server.count_batches(j, tokens)
    server.recent.add_many(recent)
    server.last_prefill = 0.0
    server.last_preempted = server.last_chunk_tokens = 0


def _step(
    prof: Any, srv: Any, rule: Any, running: list[int], done: dict[int, int], b: int
) -> tuple[float, float, float, int]:
    """A decode step of the ``b`` entries of ``running`` not in ``done``: the profile's
    ``(base_s, per_context_token_s, power_w)`` and the prefix cascade attention reads once
    in it (``rule``: the scheduler's; as
    :meth:`~batch_env.llm.chunked.ChunkedScheduler.shared_prefix` finds it), or 0."""
    shared = 0
    if rule is not None:
        e = next(e for e in running if e not in done)
        shared = int(rule.shared(srv.kv.common_prefix(e, b) * srv.block_size, b, True))
    if shared:
        return (*prof.cascade_step(b, shared), shared)
    return (*prof.decode_step(b), 0)


def _completions(
    running: list[int], output: list[int], generated: list[int]
) -> dict[int, list[int]]:
    """The decoding requests by the iteration (from 0) in which they complete: request
    ``e`` produces its last token ``output[e] - generated[e]`` decodes from now."""
    out: dict[int, list[int]] = {}
    for e in running:
        j = output[e] - generated[e] - 1
        if j in out:
            out[j].append(e)
        else:
            out[j] = [e]
    return out


def _grown(k0: int, r: int, m: int, bs: int) -> int:
    """KV blocks a decoding request of block phase ``r`` gains over ``m`` decode
    iterations from decode step ``k0``: one at each iteration ``j`` with
    ``(1 - k0 - j) % bs == r`` (:class:`batch_env.llm.state.LLMServerState`: block_phase)."""
    j0 = (1 - k0 - r) % bs
    return 0 if j0 >= m else (m - 1 - j0) // bs + 1
