"""The LLM server without an env (:class:`batch_env.llm.LLMServer`), and several side by side.

Two servers built from one configuration with different seeds, run interleaved (a decision
on one, then one on the other), give exactly what each gives run alone: every decision
epoch's clock, reward, cost components, queues and KV cache, and the episode summary.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from batch_env.config import LLMConfigV2
from batch_env.executor import make_llm_executor
from batch_env.llm import LLMServer
from batch_env.llm.server import llm_workload, profile_for

SETTINGS = {
    # v2's epochs on the chunked scheduler, a small cache (preemptions), a budget grid
    "chunked": dict(
        grid=(2, 8, 32, 256),
        budget_grid=(256, 1024, 2048),
        gpu_memory_utilization=0.42,
        horizon_requests=80,
        warmup_requests=10,
    ),
    # vLLM v0's scheduler, two request classes with their own SLAs and lengths
    "v0-classes": dict(
        scheduler="vllm-v0",
        classes=(
            {"name": "chat", "share": 3, "ttft_sla_ms": 500},
            {
                "name": "batch",
                "share": 1,
                "lengths": {"kind": "fixed", "prompt_tokens": 700, "output_tokens": 30},
            },
        ),
        horizon_requests=60,
    ),
}
WORKLOAD = {"kind": "poisson", "rate_per_s": 6.0}


def _server(setting: str) -> LLMServer:
    profile, config = profile_for("llama-2-7b-a100", None, SETTINGS[setting], LLMConfigV2)
    executor = make_llm_executor("profile", profile, config.max_num_seqs, config.max_model_len)
    return LLMServer(config, profile, llm_workload(config, WORKLOAD), executor)


class _Run:
    """One server's episode, one decision at a time: a seeded random setting at each
    decision epoch (v2's rule: ``run_to_epoch``), its record kept."""

    def __init__(self, server: LLMServer, seed: int) -> None:
        self.server = server
        self.rng = np.random.default_rng(seed + 100)
        server.reset(seed)
        self.record: list[tuple] = [self._state()]
        self.summary: dict | None = None

    def _state(self) -> tuple:
        s = self.server
        st = s.state
        return (
            s.now,
            s.in_system,
            s.completed,
            s.drops,
            st.kv_used,
            st.tokens_out,
            st.preemptions,
            tuple(st.running),
            tuple(st.waiting),
        )

    def decide(self) -> bool:
        """One decision epoch; False once the episode has ended."""
        s = self.server
        if s.over():
            return False
        cap = s.grid[int(self.rng.integers(len(s.grid)))]
        budget = s.budgets[int(self.rng.integers(len(s.budgets)))]
        s.set(cap, budget, s.orders[0])
        ran, last = s.run_to_epoch(cap, budget)
        reward, costs, dt, arrivals = s.step_accounting()
        self.record.append((ran, last, reward, tuple(costs.values()), dt, arrivals, self._state()))
        if s.over():
            self.summary = s.summary()
            return False
        return True


def _same(a: object, b: object) -> bool:
    """Equal, NaNs included (summaries hold NaN where a figure has no sample)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_two_servers_side_by_side_run_as_each_alone(setting):
    seeds = (3, 11)
    alone = []
    for seed in seeds:
        run = _Run(_server(setting), seed)
        for _ in range(100_000):
            if not run.decide():
                break
        alone.append(run)
    a, b = (_Run(_server(setting), seed) for seed in seeds)
    going = [True, True]
    for _ in range(200_000):
        if not any(going):
            break
        for i, run in enumerate((a, b)):
            if going[i]:
                going[i] = run.decide()
    for together, solo in zip((a, b), alone, strict=True):
        assert len(together.record) == len(solo.record) > 10
        assert together.record == solo.record
        assert together.summary is not None and _same(together.summary, solo.summary)
    # different seeds: different episodes (the comparison above is not of two equal runs)
    assert a.record != b.record
    assert a.server.state is not b.server.state


def test_a_server_runs_one_iteration_at_a_time_without_an_env():
    """``run_one`` (v0/v1's decision: one iteration, then idle while empty) serves every
    summary request, and the books balance."""
    server = _server("chunked")
    server.reset(0)
    steps = 0
    while not server.over() and steps < 100_000:
        server.run_one(server.grid[-1], server.budgets[-1])
        server.step_accounting()
        steps += 1
    counts = server.request_counts()
    assert server.over() and steps > 100
    assert (
        counts["arrived"]
        == (counts["completed"] + counts["waiting"] + counts["in_service"] + counts["dropped"])
        + counts["rejected"]
    )
    summary = server.summary()
    assert summary["completed"] == server.config.horizon_requests
