"""The one interface of the LLM iteration schedulers: plan, start, apply.

A scheduler decides, at an iteration boundary, what the next iteration computes; the
engine (:class:`batch_env.llm.LLMServer`, as vLLM v1's engine core) runs the executor in
between and moves the clock. The scheduler never calls the engine or the executor:

``plan(cap, budget, order)``
    What the next iteration would be under a setting: the cap on running requests, the
    token budget and the admission order (:mod:`batch_env.llm.orders`). It changes
    nothing, so an env can ask what several settings would do (``LLMBatching-v2`` asks
    at every boundary whether its actions differ there). Two plans schedule the same
    iteration exactly when :meth:`Plan.same_iteration` says so.
``start(plan)``
    Begin the plan's iteration: preempt its victims and give out its KV blocks (through
    the KV cache, :mod:`batch_env.llm.kv_cache`). Returns the :class:`Work`: what the
    executor computes (:func:`execute`), and the victims (an executor that keeps
    sequences drops their KV cache).
``apply(work, duration_s)``
    The executor's result applied: the admitted requests leave the queue and join the
    running ones; each request's computed tokens, first tokens and completions. Returns the :class:`Outcome`: what the iteration did, whose first
    token came at its end, and who completed. The completed requests' blocks are still
    held: the engine frees them (``state.kv.free``) once the clock has reached the
    iteration's end, so the KV-use integral counts them over the iteration.

One iteration is therefore ``work = start(plan(...))``, ``d, energy = execute(executor,
work)``, ``apply(work, d)``, then the engine's clock and the completions
(:meth:`batch_env.llm.LLMServer.run_iteration`).

Monotonicity (what makes ``LLMBatching-v2``'s test of its epochs cheap and exact). Under
both schedulers, the next iteration's admissions are a greedy scan of one candidate list
in a fixed order: the prefills in progress first, then the waiting queue from its head.
The cap only bounds how many waiting entries the list holds (``cap - running``), and the
budget only bounds the tokens the scan may give out; KV memory, the order and everything
else do not depend on the setting; an admission order fixes the list's order, so the
argument holds for each order apart. The scan gives each candidate, in turn, as many
tokens as it needs and the budget and memory allow, and stops at the first it cannot
serve in full. So the plan under a smaller cap or budget is the plan under a larger one
cut short: the same candidates in the same order, fewer of them, or fewer tokens for
the last. Hence if the smallest and the largest setting plan the same iteration, every
setting between them does too (``tests/test_llm_v2.py`` checks this against trying every
action, on many random states).

The registry that picks a scheduler by name is :mod:`batch_env.llm.registry` (:data:`batch_env.llm.SCHEDULERS`,
:func:`batch_env.llm.make_scheduler`).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from ..executor import LLMExecutor
    from .state import LLMServerState


class Plan(NamedTuple):
    """The next iteration under one setting, computed without changing anything (a
    named tuple: made at every iteration boundary, so it is cheap).

    :ivar victims: entries preempted before the iteration, newest first (each the last of
        ``running`` when it goes).
    :ivar grown: decoding entries that get one more KV block for the token they feed.
    :ivar decodes: how many running entries decode (``running``'s first ``decodes`` after
        the victims leave).
    :ivar chunks: ``(entry, tokens, tokens already computed, new KV blocks)`` of each
        prompt chunk (``vllm-v0``: whole prompts, nothing computed before).
    :ivar prefill: the iteration is a prefill (``vllm-v0``); else decodes and chunks.
    """

    victims: tuple[int, ...] = ()
    grown: Any = ()  # a collection of entries (the chunked scheduler passes its phase bucket)
    decodes: int = 0
    chunks: tuple[tuple[int, int, int, int], ...] = ()
    prefill: bool = False

    def same_iteration(self, other: Plan) -> bool:
        """Whether ``other`` schedules the same iteration (who is preempted, who decodes,
        which chunks of which prompts)."""
        return (
            self.chunks == other.chunks
            and self.decodes == other.decodes
            and self.victims == other.victims
            and self.prefill == other.prefill
        )


class Iteration(NamedTuple):
    """What an iteration did.

    :ivar duration_s: its time (0 for an empty iteration: every decode was preempted).
    :ivar kind: ``"prefill"``, ``"decode"`` or ``"mixed"`` (chunks and decodes).
    :ivar prefill: it computed prompt tokens (counted as a prefill iteration).
    :ivar decode_batch: requests that decoded a token.
    :ivar preempted: requests preempted before it.
    :ivar chunk_tokens: prompt tokens of its chunks (``chunked``; ``vllm-v0`` reports 0,
        as ``LLMBatching-v0``'s ``info["chunk_tokens"]`` always has).
    :ivar empty: nothing ran (the clock did not move).
    """

    duration_s: float
    kind: str
    prefill: bool
    decode_batch: int
    preempted: int
    chunk_tokens: int = 0
    empty: bool = False


class Work(NamedTuple):
    """An iteration begun (:meth:`Scheduler.start`): what the executor computes, and what
    the scheduler needs to apply its result.

    :ivar kind: the executor's call: ``"prefill"``, ``"decode"`` or ``"mixed"``
        (:class:`batch_env.executor.LLMExecutor`); ``"cascade"``: a mixed iteration with
        cascade attention (:meth:`batch_env.executor.LLMProfileExecutor.cascade`, the
        shared prefix's tokens last); ``"empty"``: nothing runs (every decode was
        preempted).
    :ivar args: that call's arguments.
    :ivar victims: the entries preempted before it, newest first (back in the queue,
        their blocks freed).
    :ivar plan: the plan it carries out.
    :ivar decoding: the entries that decode a token in it.
    """

    kind: str
    args: tuple[Any, ...]
    victims: tuple[int, ...]
    plan: Plan
    decoding: list[int]


class Outcome(NamedTuple):
    """What :meth:`Scheduler.apply` reports of an iteration.

    :ivar iteration: what it did.
    :ivar first_tokens: the entries whose first output token came at its end (their
        prefill ended), in order.
    :ivar finished: the entries it completed, in order: out of the running list, their
        blocks still held for the engine to free at the iteration's end.
    :ivar tokens_at_end: output tokens the engine adds to ``state.tokens_out`` once the
        clock has reached the iteration's end (``vllm-v0``'s decode, whose tokens a
        summary window opening inside the iteration counts; the other iterations count
        theirs in ``apply``, before: ``docs/decisions.md``, issue 63).
    """

    iteration: Iteration
    first_tokens: list[int]
    finished: list[int]
    tokens_at_end: int = 0


class Started(NamedTuple):
    """An iteration begun (:meth:`batch_env.llm.LLMServer.begin_iteration`, or the
    decode that ends a stretch, :func:`batch_env.llm.decode_runs.run_decodes`): its
    :class:`Outcome`, the power it runs at (W; 0 for an empty one) and when it ends (s)."""

    outcome: Outcome
    power_w: float
    end_s: float


#: Constructors of the records from one tuple of all their fields, in one C call:
#: ``new_plan((victims, grown, decodes, chunks, prefill))`` is ``Plan(victims, grown,
#: decodes, chunks, prefill)`` without the named tuple's Python-level ``__new__`` (the
#: chunked scheduler makes several of these an iteration: its hot path).
new_plan = partial(tuple.__new__, Plan)
new_iteration = partial(tuple.__new__, Iteration)
new_work = partial(tuple.__new__, Work)
new_outcome = partial(tuple.__new__, Outcome)


def nothing_ran(work: Work) -> Outcome:
    """The outcome of empty work (every decode was preempted): no time, no token."""
    return Outcome(Iteration(0.0, "decode", False, 0, len(work.victims), empty=True), [], [])


def execute(executor: LLMExecutor, work: Work) -> tuple[float, float]:
    """Run ``work`` on ``executor``: ``(duration_s, energy_j)`` (``(0, 0)`` for empty work)."""
    if work.kind == "mixed":
        return executor.mixed(*work.args)
    if work.kind == "decode":
        return executor.decode(*work.args)
    if work.kind == "prefill":
        return executor.prefill(*work.args)
    if work.kind == "cascade":  # profile mode only (the server refuses it otherwise)
        return executor.cascade(*work.args)  # type: ignore[attr-defined]
    return 0.0, 0.0


class Scheduler(Protocol):
    """An LLM iteration scheduler (module docstring): ``plan``, ``start``, ``apply``.

    :ivar name: its registry name.
    :ivar state: the server state it schedules (shared with the env).
    """

    name: str
    state: LLMServerState

    def plan(self, cap: int, budget: int, order: str = "fcfs") -> Plan:
        """The next iteration with at most ``cap`` running requests and ``budget`` tokens,
        admitting waiting requests in ``order`` (:mod:`batch_env.llm.orders`); changes
        nothing."""

    def start(self, plan: Plan) -> Work:
        """Begin the iteration of a plan from :meth:`plan` (made at this boundary):
        preemptions, KV blocks, admissions; returns what the executor computes."""

    def apply(self, work: Work, duration_s: float) -> Outcome:
        """The executor's result of ``work`` (it took ``duration_s``) applied to the
        requests; returns what the iteration did."""
