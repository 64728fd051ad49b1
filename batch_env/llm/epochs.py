"""The LLM server's decision epochs (``LLMBatching-v2``): where the settings would differ.

:func:`forced_plan` tells whether every setting schedules the next iteration alike (this
boundary is then no decision epoch), and :func:`run_to_epoch` runs iterations from a
boundary until the next epoch or the episode's end, running the decode-only stretches
that no setting can change in one loop (:func:`batch_env.llm.decode_runs.run_decodes`).
Each function takes the :class:`~batch_env.llm.LLMServer`, whose methods of the same
names call them.
"""

from __future__ import annotations

from typing import Any

from .decode_runs import run_decodes
from .scheduler import Iteration, Plan

#: Iterations :func:`run_to_epoch` may run at most (a bound, never reached: it returns at
#: the next boundary where the settings differ or at the episode's end).
MAX_ITERATIONS_PER_STEP = 10_000_000


def forced_plan(server: Any, cap: int, budget: int) -> Plan | None:
    """The next iteration's plan when every setting schedules it alike (this boundary is
    no decision epoch), else ``None``.

    Exact and cheap (``LLMBatchingV2Env``: Decision epochs): with nothing waiting and no
    prefill in progress every setting runs the same decode; elsewhere the smallest and the
    largest setting are planned, and admission is monotone in between."""
    sch, srv = server.scheduler, server.state
    if server.one_setting or not (srv.waiting or srv.prefilling):
        # nothing to admit or to continue: the same decode
        return sch.plan(cap, budget, server.order)
    lo, hi = (server.grid[0], server.budgets[0]), (server.grid[-1], server.budgets[-1])
    first = sch.plan(*hi, server.order)
    for order in server.orders:  # monotone in the cap and budget for each order
        for setting in (lo, hi):
            if (setting, order) != (hi, server.order):
                if not first.same_iteration(sch.plan(*setting, order)):
                    return None
    return first


def run_to_epoch(
    server: Any, cap: int, budget: int, chosen: bool = True
) -> tuple[int, Iteration | None]:
    """Run iterations from this boundary until a decision epoch or the episode's end: the
    first one whatever it is when ``chosen`` (a decision chose it here), then every one
    that all settings would run alike. Returns how many ran and the last. The rate
    estimate is brought up to each boundary passed, as a step per iteration would.

    With several clocks (``clock_grid``) every setting schedules the same iterations at
    every clock, but times and powers them differently, so the clock adds epochs of its
    own: a boundary is also an epoch where prompt work appears or ends
    (:meth:`~batch_env.llm.LLMServer.prefill_phase` differs from the previous boundary's;
    an episode starts empty). A clock chosen at an epoch holds until the next.
    """
    ran = 0
    last: Iteration | None = None
    phase = server.prefill_phase() if chosen else False
    while not (server.now >= server.horizon_s or server.summary_done()):
        plan = None
        if server.now >= server.sm_clock.switch_at:  # a pending clock change has landed
            server.run_at(server.sm_clock.due(server.now))
        if server.clocked and (ran or not chosen) and server.prefill_phase() != phase:
            break  # prompt work appeared or ended: the clock's epoch
        if ran or not chosen:
            plan = forced_plan(server, cap, budget)
            if plan is None:
                break  # the settings differ here: a decision epoch
            if ran:
                server.update_rate()  # a step per iteration ends at this boundary
        if ran >= MAX_ITERATIONS_PER_STEP:
            raise RuntimeError(
                f"LLMServer: {ran} iterations without a decision epoch or the episode's "
                "end (bound MAX_ITERATIONS_PER_STEP)"
            )
        if (
            plan is not None
            and server.decode_runs
            and not plan.chunks
            and not plan.victims
            and not server.state.prefilling
        ):
            k, it, crossing = run_decodes(server)
            if k:
                ran += k
                last = it
                if crossing is not None:  # the decode that admits the arrival, begun
                    server.update_rate()  # at its boundary, as below
                    last = server.end_iteration(crossing)
                    ran += 1
                server.idle_while_empty()  # the last requests may have completed
                continue
        server.last_preempted = 0
        last = server.run_iteration(cap, budget, plan)
        ran += 1
        server.idle_while_empty()
    return ran, last
