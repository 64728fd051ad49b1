"""``"vllm-v0"``: vLLM v0's default scheduler (no chunked prefill, no swapping).

An iteration is either a **prefill** or a **decode**:

* a prefill of the longest admissible run of the waiting queue from its head, FCFS (or
  of the waiting requests in another admission order, :mod:`batch_env.llm.orders`):
  while the running requests stay within the cap, the prompts' tokens within the token
  budget, and their KV blocks leave the watermark free; a recomputed (preempted) entry's
  prompt is its prompt + the tokens it had generated. The prefill produces each entry's
  first token (TTFT ends there);
* otherwise one decode step of every running request: a request whose next token needs a
  new KV block and finds none preempts the newest running request (recompute: its blocks
  are freed and it returns to the head of the queue; a victim that is the request itself
  is preempted too).

With ``num_scheduler_steps`` k > 1 (vLLM 0.6's multi-step scheduling) a decode step that
follows a prefill, or ends a group, starts a group of k decode steps run back to back: the
next k - 1 iterations are decodes whatever waits (a group ends early when no request is
left running). A prefill is one step, as in vLLM 0.6 (no lookahead slots for prompts). A
request that completes within a group leaves at its step; vLLM computes the group's
remaining steps for it and discards their tokens, a row more in those steps' batches.

A decode's preemptions do not depend on the setting, so :meth:`VLLMV0Scheduler.plan`
leaves them to :meth:`~VLLMV0Scheduler.start`: two decode plans are the same iteration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .orders import FCFS, candidates, leave_queue
from .scheduler import Iteration, Outcome, Plan, Work, nothing_ran

if TYPE_CHECKING:
    from .state import LLMServerState


class VLLMV0Scheduler:
    """vLLM v0's prefill-or-decode scheduler (module docstring), behind
    :class:`~batch_env.llm.scheduler.Scheduler`.

    :param state: the server state.
    :param sequences: the executor is told which requests run (it keeps their KV
        caches: ``LLMExecutor.needs_sequences``).
    :param num_scheduler_steps: decode steps a group runs back to back (module docstring).
    """

    name = "vllm-v0"

    def __init__(
        self, state: LLMServerState, sequences: bool = False, num_scheduler_steps: int = 1
    ) -> None:
        self.state = state
        self._seqs = sequences  # tell the executor which requests run
        self.steps = num_scheduler_steps  # (the running group's count is the state's)

    def plan(self, cap: int, budget: int, order: str = FCFS) -> Plan:
        """A prefill of the longest admissible run of the waiting requests in ``order``
        (FCFS: the queue's head), else a decode."""
        s = self.state
        W, P, G, bs = s.waiting, s.prompt, s.generated, s.block_size
        if W and not (s.group_left and s.running):
            room = cap - len(s.running)
            kv = s.kv
            free = kv.free_above_watermark()
            chunks: list[tuple[int, int, int, int]] = []
            tokens = 0
            h = taken = 0
            for e in candidates(s, room, order):
                p = P[e] + G[e]
                if kv.prefix:  # its cached prefix is not computed; its free blocks are taken
                    h, taken = kv.lookup(e, p)
                u = p - h * bs  # the tokens to compute
                if tokens + u > budget:
                    break
                nb = -(-p // bs) - h
                if nb + taken > free:
                    break
                free -= nb + taken
                tokens += u
                chunks.append((e, u, h * bs, nb))
            if chunks:
                return Plan((), (), 0, tuple(chunks), True)
        if not s.running:  # cannot happen: config validation makes the head admissible when idle
            raise RuntimeError("LLMBatching: requests wait, none runs, none admissible")
        return Plan((), (), len(s.running), (), False)

    def start(self, plan: Plan) -> Work:
        """The prefill's KV blocks (its prompts share their cached prefixes, and their
        full blocks become cached, as vLLM v1 caches at scheduling), or the decode's, with
        its preemptions."""
        s = self.state
        if not plan.prefill:
            return self._start_decode(plan)
        P, G, kv = s.prompt, s.generated, s.kv
        sel = [e for e, _p, _x, _nb in plan.chunks]
        tokens = 0
        sq = 0.0
        for _e, p, x, _nb in plan.chunks:  # p tokens computed after x cached ones
            tokens += p
            sq += p * p + 2 * p * x
        if kv.prefix:  # the prompts share their cached prefixes before any eviction
            for e, p, x, _nb in plan.chunks:
                kv.admit(e, x // s.block_size, p + x)
        for e, p, x, nb in plan.chunks:
            kv.allocate(e, nb)  # a waiting entry holds no block
            if kv.prefix:  # its full prompt blocks become cached
                kv.register(e, p + x)
        lens = [P[e] + G[e] for e in sel] if self._seqs else None
        return Work("prefill", (tokens, sq, sel, lens), (), plan, [])

    def apply(self, work: Work, duration_s: float) -> Outcome:
        """The prefill's first tokens (its entries join the running ones), or the
        decode's tokens; the completions."""
        if work.kind == "empty":
            return nothing_ran(work)
        if work.kind == "decode":
            return self._apply_decode(work, duration_s)
        s = self.state
        G, R = s.generated, s.running
        sel = work.args[2]
        for e in sel:
            leave_queue(s, e)
        first: list[int] = []
        for e, p, x, _nb in work.plan.chunks:
            if G[e] == 0:  # a first prefill: first tokens come in arrival order (FCFS)
                first.append(e)
            s.waiting_tokens -= p + x
            G[e] += 1
            s.decode_context += p + x + 1
        s.tokens_out += len(sel)
        done = []
        for e in sel:
            if G[e] >= s.output[e]:  # a one-token request ends with its prefill
                s.decode_context -= s.prompt[e] + G[e]
                done.append(e)
            else:
                R.append(e)
        # chunk_tokens: the chunked scheduler's
        return Outcome(Iteration(duration_s, "prefill", True, 0, 0), first, done)

    def _grow(self) -> list[int]:
        """A KV block for each running entry whose next token needs one, preempting the
        newest running entries where none is free; returns the victims, newest first."""
        s = self.state
        kv = s.kv
        R, P, G, blk, bs = s.running, s.prompt, s.generated, kv.blocks, s.block_size
        victims: list[int] = []
        i = 0
        while i < len(R):
            e = R[i]
            if P[e] + G[e] > blk[e] * bs:  # the token fed this step needs a new block
                while kv.used >= kv.total:
                    v = R.pop()
                    victims.append(v)
                    kv.free(v)
                    s.decode_context -= P[v] + G[v]
                    if v == e:
                        break
                if victims and victims[-1] == e:
                    break
                kv.grow_one(e)
            i += 1
        return victims

    def _start_decode(self, plan: Plan) -> Work:
        s = self.state
        P, G = s.prompt, s.generated
        victims = tuple(self._grow())
        if victims:
            s.waiting.extendleft(victims)  # the oldest victim ends up at the head
            s.waiting_tokens += sum(P[v] + G[v] for v in victims)
            s.preemptions += len(victims)
        R = s.running
        if not R:
            return Work("empty", (), victims, plan, [])
        return Work("decode", (len(R), s.decode_context, R), victims, plan, R)

    def _apply_decode(self, work: Work, duration_s: float) -> Outcome:
        s = self.state
        P, G, R, out = s.prompt, s.generated, s.running, s.output
        keep = []
        done = []
        for e in R:
            g = G[e] + 1
            G[e] = g
            if g >= out[e]:
                s.decode_context -= P[e] + g - 1
                done.append(e)
            else:
                keep.append(e)
        s.decode_context += len(keep)
        s.running = keep
        s.group_left = (s.group_left or self.steps) - 1 if keep else 0
        b = len(R)  # (its tokens count once the clock has passed: tokens_at_end)
        return Outcome(Iteration(duration_s, "decode", False, b, len(work.victims)), [], done, b)
