"""``"chunked"``: chunked prefill, as vLLM v1's engine and Sarathi-Serve schedule.

Every iteration first schedules one decode token for each running request whose prefill
is complete, then fills the rest of the token budget with prompt chunks, FCFS: the
prefills in progress (in admission order), then the waiting queue's head while the cap
allows, in one mixed iteration. KV blocks are allocated per chunk (within the blocks free
above the watermark); a decode whose next token needs a block and finds none preempts the
newest running request (recompute, as ``vllm-v0``: its blocks are freed and it returns to
the head of the queue; a prefill in progress loses its computed tokens). A request's first
token comes when its last chunk completes. Options (``docs/decisions.md``, "Chunked
prefill"):

* ``decode_first=False``: an iteration with prompt chunks runs no decode (v0's
  prefill-first rule);
* ``split_prompts=False``: a prompt is scheduled whole or waits. Both off give v0's
  scheduler back.

The decoding entries that need a block at the next decode are one bucket of
``state.block_phase`` (:mod:`batch_env.llm.state`), so a decode-only iteration without
preemption costs no scan of the running requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import TYPE_CHECKING, Any

from .orders import FCFS, candidates, leave_queue
from .scheduler import (
    Outcome,
    Plan,
    Work,
    new_iteration,
    new_outcome,
    new_plan,
    new_work,
    nothing_ran,
)

if TYPE_CHECKING:
    from .cascade import CascadeRule
    from .state import LLMServerState


class ChunkedScheduler:
    """Chunked prefill (module docstring), behind :class:`~batch_env.llm.scheduler.Scheduler`.

    :param state: the server state.
    :param sequences: the executor is told which requests run (it keeps their KV
        caches: ``LLMExecutor.needs_sequences``).
    :param decode_first: decodes before prompt chunks (default); ``False``: an iteration
        with chunks runs no decode.
    :param split_prompts: a prompt may be split across iterations (default).
    :param cascade: with prefix caching, vLLM's rule for cascade attention
        (:class:`~batch_env.llm.cascade.CascadeRule`): an iteration it chooses is a
        ``"cascade"`` work, which reads the prefix every running request holds once;
        ``None`` (default): never.
    """

    name = "chunked"

    def __init__(
        self,
        state: LLMServerState,
        sequences: bool = False,
        decode_first: bool = True,
        split_prompts: bool = True,
        cascade: CascadeRule | None = None,
    ) -> None:
        self.state = state
        self.decode_first = decode_first
        self.split_prompts = split_prompts
        self.cascade = cascade
        self._seqs = sequences  # tell the executor which requests run

    # -- plan: what the next iteration would be, changing nothing --------------------------
    def plan(self, cap: int, budget: int, order: str = FCFS) -> Plan:
        """The next iteration with at most ``cap`` running requests and ``budget`` tokens
        (decode tokens included). Where nothing at all can run (every running request is
        a prefill in progress and no chunk fits), the newest is preempted to free its
        blocks, at most once per running request. Waiting requests are offered in
        ``order`` (:mod:`batch_env.llm.orders`)."""
        s = self.state
        n_run, npart, used = len(s.running), s.prefilling, s.kv.used
        victims: list[int] = []
        grown: Any = ()
        decodes = 0
        chunks: tuple[tuple[int, int, int, int], ...] = ()
        for _ in range(n_run + 2):  # each retry preempts one entry: bounded
            if self.decode_first:
                grown, decodes, n_run, npart, used = self._plan_grow(victims, n_run, npart, used)
                chunks = self._plan_chunks(
                    cap, budget - decodes, not victims, n_run, npart, used, order
                )
            else:
                chunks = self._plan_chunks(cap, budget, True, n_run, npart, used, order)
                if chunks:  # prefill first: no decode in an iteration with chunks
                    grown, decodes = (), 0
                else:
                    grown, decodes, n_run, npart, used = self._plan_grow(
                        victims, n_run, npart, used
                    )
            if decodes or chunks or victims:
                break
            if not n_run:  # cannot happen: an empty cache fits the head's first chunk
                raise RuntimeError("LLMBatching: requests wait, none runs, none admissible")
            # prefills in progress hold the blocks the next chunk needs: free the newest
            v = s.running[n_run - 1]
            n_run -= 1
            victims.append(v)
            used -= s.kv.releasable(v)
            if s.prefill_left[v]:
                npart -= 1
        return new_plan((tuple(victims), grown, decodes, chunks, False))

    def _plan_grow(
        self, victims: list[int], n_run: int, npart: int, used: int
    ) -> tuple[Any, int, int, int, int]:
        """The decodes' KV blocks: ``(grown, decodes, running, prefilling, kv used)`` after
        them, the victims appended to ``victims``. As ``vllm-v0``'s decode, a missing block
        preempts the newest running entry (a prefill in progress or not), the entry
        itself last."""
        s = self.state
        n = n_run - npart  # the decoding entries are the leading run of running
        # an entry's blocks hold exactly its prompt + generated - 1 tokens, so the token it
        # feeds needs a block when prompt + generated = 1 (mod block size)
        kv = s.kv
        need = s.block_phase[(1 - s.decode_steps) % s.block_size]
        if len(need) <= kv.total - used:  # blocks for all: no preemption
            return need, n, n_run, npart, used + len(need)
        R, P, G, blk, bs = s.running, s.prompt, s.generated, kv.blocks, s.block_size
        total, left = kv.total, s.prefill_left
        grown: list[int] = []
        i = 0
        while i < n:
            e = R[i]
            if P[e] + G[e] > blk[e] * bs:
                while used >= total:
                    v = R[n_run - 1]  # the newest (never one grown: those come before e)
                    n_run -= 1
                    victims.append(v)
                    used -= kv.releasable(v)
                    if left[v]:
                        npart -= 1
                    if v == e:
                        break
                n = min(n, n_run)
                if victims and victims[-1] == e:
                    break
                grown.append(e)
                used += 1
            i += 1
        return grown, n_run - npart, n_run, npart, used

    def _plan_chunks(
        self,
        cap: int,
        left: int,
        admit: bool,
        n_run: int,
        npart: int,
        used: int,
        order: str = FCFS,
    ) -> tuple[tuple[int, int, int, int], ...]:
        """``(entry, chunk tokens, tokens already computed, new blocks)`` of the prompt
        chunks, FCFS: the prefills in progress (in admission order), then (``admit``) the
        queue's head while the cap allows, within ``left`` tokens and the KV blocks free
        above the watermark. A prompt that cannot progress stops the scan; with
        ``split_prompts=False`` only whole prompts are scheduled. With prefix caching a
        waiting entry's cached prefix counts as computed (``tokens already computed``), and
        its free cached blocks count against the free ones."""
        s = self.state
        if not npart and not (admit and s.waiting):  # nothing to prefill (most decodes)
            return ()
        kv = s.kv
        P, G, blk, bs = s.prompt, s.generated, kv.blocks, s.block_size
        todo, done, split = s.prefill_left, s.prefill_done, self.split_prompts
        free = kv.total - used - kv.watermark
        pfx = kv.prefix
        out: list[tuple[int, int, int, int]] = []
        # the prefills in progress, in admission order, then (admit) the waiting entries
        # in the order, read lazily (the scan stops early); waiting ones have nothing computed
        cands: Iterable[int] = s.running[n_run - npart : n_run]
        room = cap - n_run
        if admit and room > 0:
            cands = chain(cands, candidates(s, room, order))
        for e in cands:
            if left <= 0:
                break
            new = not todo[e]
            x = 0 if new else done[e]
            need = P[e] + G[e] if new else todo[e]
            base, avail = blk[e], free  # blocks it holds; free blocks it may take
            if new and pfx:  # its cached prefix is computed; its free blocks are taken
                h, taken = kv.lookup(e, need)
                x, need, base, avail = h * bs, need - h * bs, h, free - taken
            c = min(need, left)
            if not split and c < need:
                break
            nb = -(-(x + c) // bs) - base
            if nb > avail:
                if not split:
                    break
                c = min(c, (base + avail) * bs - x)
                if c <= 0:
                    break
                nb = -(-(x + c) // bs) - base
            free -= nb + (free - avail)
            left -= c
            out.append((e, c, x, nb))
            if c < need:
                break  # the budget or the memory ends inside this prompt
        return tuple(out)

    # -- start and apply: carry a plan out -------------------------------------------------
    def start(self, plan: Plan) -> Work:
        """Preempt the plan's victims and allocate its blocks; the work of its decodes and
        chunks."""
        s = self.state
        victims = plan.victims
        for v in victims:  # newest first: each is the last running entry when it goes
            self._preempt(v)
        kv = s.kv
        if kv.prefix:  # the admitted prompts share their cached prefixes before any eviction
            for e, _c, x, _nb in plan.chunks:
                if not s.prefill_left[e]:
                    kv.admit(e, x // s.block_size, s.prompt[e] + s.generated[e])
        kv.grow_and_allocate(plan.grown, plan.chunks)
        if victims:
            s.waiting.extendleft(victims)  # the oldest victim ends up at the head
            s.preemptions += len(victims)
        if not plan.decodes and not plan.chunks:  # every decoder preempted: an empty iteration
            return new_work(("empty", (), victims, plan, []))
        dec = s.running[: plan.decodes]
        n = 0
        att = 0.0
        for _e, c, x, _nb in plan.chunks:
            n += c
            att += c * c + 2 * c * x
        args: tuple[Any, ...] = (n, att, len(dec), s.decode_context)
        if self._seqs:
            args += ([(e, x, c) for e, c, x, _ in plan.chunks], dec)
        if self.cascade is not None:
            shared = self.shared_prefix(plan.chunks, len(dec))
            if shared:
                s.cascade_iterations += 1
                return new_work(("cascade", (*args, shared), victims, plan, dec))
        return new_work(("mixed", args, victims, plan, dec))

    def shared_prefix(self, chunks: tuple[tuple[int, int, int, int], ...], decodes: int) -> int:
        """The tokens cascade attention reads once in an iteration of ``decodes`` decodes
        and ``chunks`` (started: their entries hold their cached prefixes), or 0: the
        blocks every running entry holds, where the rule chooses cascade
        (:mod:`batch_env.llm.cascade`). Every holder has computed those blocks (a hit or
        its own prefill), so vLLM's cap at the least computed request never binds."""
        s = self.state
        assert self.cascade is not None
        todo = s.prefill_left
        holders = len(s.running) + sum(1 for e, _c, _x, _nb in chunks if not todo[e])
        e = s.running[0] if s.running else chunks[0][0]
        tokens = s.kv.common_prefix(e, holders) * s.block_size
        return self.cascade.shared(tokens, decodes + len(chunks), not chunks)

    def apply(self, work: Work, duration_s: float) -> Outcome:
        """The chunks' and decodes' tokens computed: first tokens, completions."""
        d, chunks, dec = duration_s, work.plan.chunks, work.decoding
        if work.kind == "empty":
            return nothing_ran(work)
        s = self.state
        P, G, R, out = s.prompt, s.generated, s.running, s.output
        done = s.prefill_done
        b = len(dec)
        ready = self._chunks_done(chunks)  # prefills completed by this iteration
        first: list[int] = []
        for e in ready:
            s.prefilling -= 1
            done[e] = 0
            if G[e] == 0:  # a first prefill: first tokens come in arrival order (FCFS)
                first.append(e)
            G[e] += 1
        s.tokens_out += len(ready) + b
        finished: list[int] = []
        ctx = s.decode_context + b  # one token more for each decode, until it finishes
        phase, bs = s.block_phase, s.block_size
        if dec:
            s.decode_steps += 1  # every decoding entry gains a token: the phases stay
        K = s.decode_steps
        for e in dec:
            g = G[e] + 1
            G[e] = g
            if g >= out[e]:
                ctx -= P[e] + g
                phase[(P[e] + g - K) % bs].remove(e)
                finished.append(e)
        s.decode_context = ctx
        for e in ready:
            if G[e] >= out[e]:  # a one-token request ends with its prefill
                finished.append(e)
            else:
                s.decode_context += P[e] + G[e]
                phase[(P[e] + G[e] - K) % bs].add(e)  # it decodes from the next iteration
        if finished:  # (in running order: the decodes lead it, the chunks' entries follow)
            gone = set(finished)
            s.running = [e for e in R if e not in gone]
        kind = "mixed" if chunks and dec else "prefill" if chunks else "decode"
        n = sum(c for _, c, _, _ in chunks) if chunks else 0
        it = new_iteration((d, kind, bool(chunks), b, len(work.victims), n, False))
        return new_outcome((it, first, finished, 0))

    def _preempt(self, v: int) -> None:
        """Preempt running entry ``v``, the newest (recompute): its blocks freed; the caller
        puts it back at the head of the queue."""
        s = self.state
        s.running.pop()
        s.kv.free(v)
        if s.prefill_left[v]:  # a prefill in progress: its computed tokens are lost
            s.prefilling -= 1
            s.waiting_tokens += s.prefill_done[v]
        else:
            ctx = s.prompt[v] + s.generated[v]
            s.block_phase[(ctx - s.decode_steps) % s.block_size].discard(v)
            s.decode_context -= ctx
            s.waiting_tokens += ctx
        s.prefill_done[v] = s.prefill_left[v] = 0

    def _chunks_done(self, chunks: tuple[tuple[int, int, int, int], ...]) -> list[int]:
        """The chunks' bookkeeping once computed (the admitted entries join the running
        ones); returns the entries whose prefill they completed."""
        s = self.state
        P, G, R, kv = s.prompt, s.generated, s.running, s.kv
        todo, done = s.prefill_left, s.prefill_done
        ready: list[int] = []
        for e, c, x, _nb in chunks:
            if not todo[e]:  # admitted now: it joins the running entries
                leave_queue(s, e)  # (FCFS: the queue's head, in order)
                R.append(e)
                todo[e] = P[e] + G[e] - x  # x: its cached prefix (prefix caching), else 0
                s.waiting_tokens -= x
                s.prefilling += 1
            done[e] = x + c
            todo[e] -= c
            s.waiting_tokens -= c
            if kv.prefix:  # the full blocks it computed become cached
                kv.register(e, x + c)
            if not todo[e]:
                ready.append(e)
        return ready
