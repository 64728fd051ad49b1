"""The one interface of the LLM iteration schedulers, and the registry that picks one by name.

A scheduler decides, at an iteration boundary, what the next iteration computes, and
then runs it. The two halves are apart on purpose:

``plan(cap, budget, order)``
    What the next iteration would be under a setting: the cap on running requests, the
    token budget and the admission order (:mod:`batch_env.llm.orders`). It changes nothing (the state, the executor and the host are left
    as they were), so an env can ask what several settings would do (``LLMBatching-v2``
    asks at every boundary whether its actions differ there). Two plans are equal
    (``==``) exactly when they schedule the same iteration.
``run(plan)``
    Carry the plan out: change the server state, call the executor, and report to the
    host (:class:`Host`: first tokens, completions, the clock moving to the iteration's
    end). Returns what happened (:class:`Iteration`). ``run(plan(cap, budget))`` is one
    iteration of the scheduler at that setting.

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

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from .state import LLMServerState


class Host(Protocol):
    """What a scheduler reports to (the env): the clock and the requests' milestones."""

    def now_s(self) -> float:
        """The simulated time now (the iteration starts then)."""

    def first_token(self, e: int, t: float) -> None:
        """Entry ``e`` produced its first output token at ``t`` (its prefill ended)."""

    def advance(self, t: float, power_w: float) -> None:
        """Move the clock to ``t`` (the iteration's end) at ``power_w``, admitting the
        arrivals until then; called after the queues reflect the iteration's start."""

    def finish(self, e: int, t: float) -> None:
        """Entry ``e`` completed at ``t`` (the scheduler has freed its blocks)."""


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


class Scheduler(Protocol):
    """An LLM iteration scheduler (module docstring): ``plan`` then ``run``.

    :ivar name: its registry name.
    :ivar state: the server state it schedules (shared with the env).
    """

    name: str
    state: LLMServerState

    def plan(self, cap: int, budget: int, order: str = "fcfs") -> Plan:
        """The next iteration with at most ``cap`` running requests and ``budget`` tokens,
        admitting waiting requests in ``order`` (:mod:`batch_env.llm.orders`); changes
        nothing."""

    def run(self, plan: Plan) -> Iteration:
        """Run a plan from :meth:`plan` (made at this boundary); returns what it did."""
