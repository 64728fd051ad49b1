"""Named benchmark tasks: fixed settings, a fixed evaluation protocol, reference scores.

Each task is a registered Gymnasium id (one id per task, versioned, its kwargs fixed in
the registration: ``gymnasium.make("batch_env/Bursty-v0")``), with a protocol (held-out
seeds, episodes, episode length; the reported figure is the mean reward rate per second
with its 95% confidence interval) and reference figures computed by the project
(``batch-env benchmark --references``, stored in ``tasks_references.json`` beside this
module). :func:`normalized_score` maps a reward rate to 0 at greedy and 1 at the bound
(the exact optimum where one exists; otherwise the best known policy, and the reference
says so). ``docs/benchmark.md`` says what makes each task hard and how its bound is
obtained.

A task id pins its problem: its registration passes ``task=<id>`` with its kwargs, and
the env refuses any other kwarg than :data:`FREE_KWARGS` (display and episode length)
unless it keeps the task's value (:func:`check_task_kwargs`, :class:`TaskOverrideError`).
A changed problem is made on purpose from the base id with :func:`variant`;
:func:`make_args` and :func:`task_of` map between the two.

This module imports nothing beyond :mod:`batch_env`'s own leaves (and Gymnasium's
registry): the bounds are solved by :mod:`baselines` and stored with the references, not
computed here.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any

__all__ = [
    "DISPLAY_KWARGS",
    "EPISODE_KWARGS",
    "FREE_KWARGS",
    "HEADLINE_SEEDS",
    "SAMPLE_TRACKS",
    "TASKS",
    "Task",
    "TaskOverrideError",
    "bound_or_best",
    "check_task_kwargs",
    "current",
    "differences",
    "get",
    "load_grid",
    "normalized_score",
    "references",
    "resolve_id",
    "sample_track",
    "score_span",
    "make_args",
    "task_of",
    "variant",
]

#: kwargs a task id lets a caller give besides its own: they change what the env shows,
#: not the decision process (a frame, or ``info["oracle"]`` for oracle policies)
DISPLAY_KWARGS = ("render_mode", "oracle_info")
#: kwargs that set how much work an episode holds (episodes end on a budget of work, so
#: the per-step law and reward stay the task's, and so does the figure reported, a
#: reward rate per second); ``batch-env benchmark`` always runs the protocol's length and
#: states a run's training length when it differs
EPISODE_KWARGS = ("horizon_requests", "warmup_requests", "horizon_s")
#: every kwarg a task id accepts beyond its fixed ones at their fixed values
FREE_KWARGS = DISPLAY_KWARGS + EPISODE_KWARGS

#: The sample-budget tracks a trained agent's result is reported under: its training's
#: env steps (``n_timesteps``, every env of a vector counted). Results compare within a
#: track; a run of another budget is reported as off the tracks (docs/benchmark.md).
SAMPLE_TRACKS: dict[str, int] = {"1M": 1_000_000, "10M": 10_000_000}
#: training seeds per task a headline result needs (aggregated as rliable does:
#: ``batch-env agents``' IQM, mean, median and optimality gap with bootstrap intervals)
HEADLINE_SEEDS = 10


def sample_track(env_steps: int | None) -> str | None:
    """The track (:data:`SAMPLE_TRACKS`) whose budget is ``env_steps``, else ``None``."""
    return next((k for k, v in SAMPLE_TRACKS.items() if env_steps == v), None)


#: Max throughput of the tasks' profile (resnet50-v100) at B = 32, requests per second:
#: 32 / latency(32); the tasks' rates are fractions of it (tests check the figure).
RESNET50_V100_MAX_TPUT_B32 = 5023.796561604585

#: first of the extra seeds a reference figure may add to the protocol's
#: (:meth:`Task.extra_seed`), far from every protocol, tuning, training and check seed
EXTRA_SEED_BASE = 1_000_000
#: extra seeds per cell of a load grid (the cell's block of seeds)
EXTRA_SEEDS_PER_CELL = 100_000


@dataclass(frozen=True)
class Task:
    """A named benchmark task.

    :param id: the registered Gymnasium id.
    :param base: the env id it configures.
    :param kwargs: the env's keyword arguments, fixed (read-only).
    :param summary: one line: what it is.
    :param hard: what makes it hard.
    :param bound: how the bound is obtained (``"smdp"``: the exact SMDP optimum;
        ``"smdp-oracle"``: the phase-aware optimum, a bound for every phase-blind
        policy; ``"smdp-per-seed"``: the exact SMDP optimum at each seed's drawn load,
        known to the evaluator only, averaged over the protocol's seeds; ``None``: no
        bound, the best known policy is the reference).
    :param seeds: the held-out evaluation seeds (one episode each).
    :param eval_loads: for a task whose load is drawn per episode: the load of each
        seed's evaluation episode (``reset(options={"load": x})``), a fixed grid with two
        episodes per load, so that the figure is a quadrature of the load's distribution
        and its CI is the estimation noise, not the spread of drawn loads; empty for
        other tasks.
    :param superseded_by: the id of the task that replaces this one (its problem on a
        newer env); making a superseded task warns (``DeprecationWarning``), as Gymnasium
        does for an old version, and it stays registered so that old results rerun.
    :param oracle_kwargs: what an oracle reference's env changes (the orders an oracle
        may choose, e.g. ``srpt``): oracle references run the base env with the task's
        kwargs and these, with ``oracle_info=True`` (not the task: no realizable policy
        can act so).
    """

    id: str
    base: str
    kwargs: Mapping[str, Any]
    summary: str
    hard: str
    bound: str | None
    seeds: tuple[int, ...] = field(default_factory=lambda: tuple(range(1000, 1010)))
    eval_loads: tuple[float, ...] = ()
    superseded_by: str | None = None
    oracle_kwargs: Mapping[str, Any] = field(default_factory=lambda: _frozen({}))

    def __post_init__(self) -> None:
        """Check that ``eval_loads`` gives every seed a load."""
        if self.eval_loads and len(self.eval_loads) != len(self.seeds):
            raise ValueError(
                f"Task {self.id}: eval_loads has {len(self.eval_loads)} loads for "
                f"{len(self.seeds)} seeds: expected one per seed"
            )

    @property
    def episodes(self) -> int:
        """Evaluation episodes (one per held-out seed)."""
        return len(self.seeds)

    @property
    def grid_loads(self) -> tuple[float, ...]:
        """The distinct loads of a load-grid task's evaluation grid, in order (empty for
        other tasks): the cells of its figure."""
        return tuple(sorted(set(self.eval_loads)))

    def extra_seed(self, j: int, cell: int = 0) -> int:
        """The ``j``-th extra held-out seed (of grid cell ``cell`` on a load-grid task):
        the seeds a reference figure adds to the protocol's when the protocol alone
        leaves its CI above the target (``batch-env benchmark --references``; see
        ``docs/benchmark.md``, "Precision of the reference figures"). They run the
        protocol's episodes (same length; on a load-grid task at the cell's load) and
        never meet a protocol, tuning or training seed."""
        cells = max(1, len(self.grid_loads))
        if not (0 <= cell < cells and 0 <= j < EXTRA_SEEDS_PER_CELL):
            raise ValueError(
                f"extra seed j={j}, cell={cell} is out of range: j in 0..{EXTRA_SEEDS_PER_CELL - 1}, "
                f"cell in 0..{cells - 1}"
            )
        return EXTRA_SEED_BASE + cell * EXTRA_SEEDS_PER_CELL + j

    def load_of(self, seed: int) -> float | None:
        """The load of ``seed``'s evaluation episode on a load-grid task: a protocol
        seed's grid load, an extra seed's cell load (:meth:`extra_seed`); ``None`` for any
        other seed, and on a task without a load grid."""
        if not self.eval_loads:
            return None
        if seed in self.seeds:
            return self.eval_loads[self.seeds.index(seed)]
        cell, j = divmod(seed - EXTRA_SEED_BASE, EXTRA_SEEDS_PER_CELL)
        if seed >= EXTRA_SEED_BASE and cell < len(self.grid_loads):
            return self.grid_loads[cell]
        return None

    @property
    def horizon_requests(self) -> int:
        """Summary requests per evaluation episode."""
        return int(self.kwargs["horizon_requests"])

    @property
    def safety_steps(self) -> int:
        """Steps an episode may take before the registration's ``TimeLimit`` cuts it (a
        net far above what an episode takes: 10 steps per request of the episode, 100 in
        the LLM envs, where an iteration may be a step)."""
        per = 100 if self.base.startswith("batch_env/LLMBatching") else 10
        return per * (self.horizon_requests + int(self.kwargs.get("warmup_requests", 0)))


def _frozen(d: dict[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(d)


_MU = RESNET50_V100_MAX_TPUT_B32


#: the caps the LLM tasks' actions choose from (powers of two up to vLLM's 256)
LLM_CAP_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: the token budgets the LLM tasks' actions choose from (chunked prefill; Sarathi-Serve's
#: and vLLM's usual settings, up to the profiles' largest prefill)
LLM_BUDGET_GRID = (256, 512, 1024, 2048, 4096)

#: the SM clocks (MHz) the clock tasks' actions choose from: H100/H200 clocks from a low
#: one to the default (maximum), 15-MHz steps as the GPUs accept them
LLM_CLOCK_GRID = (810.0, 990.0, 1200.0, 1410.0, 1620.0, 1980.0)


def _clock_task_kwargs(
    profile: str, rates: tuple[float, float], ttft_ms: float, tpot_ms: float
) -> Mapping[str, Any]:
    """The clock tasks' problem (``scripts/llm_clock_task_settings.py`` chose it): a model
    on an H100/H200 serving the Azure coding trace's long prompts in two load phases (an
    MMPP: a quiet phase of 30 s on average, a busy one of 10 s), with the SM clock
    in the action and energy in the reward (0.05 per joule). Prompts beyond the 4,096-token
    context (about 14% of the trace's) are rejected at arrival, as vLLM rejects them."""
    return _frozen(
        {
            "profile": profile,
            "workload": {
                "kind": "mmpp",
                "rates_per_s": list(rates),
                "switch_rates_per_s": [1.0 / 30.0, 1.0 / 10.0],
            },
            "lengths": {"kind": "empirical", "dataset": "azure-code-2023-gz"},
            "max_model_len": 4096,
            "ttft_sla_ms": ttft_ms,
            "tpot_sla_ms": tpot_ms,
            "reward_weights": {"latency": 1.0, "energy": 0.05, "sla": 20.0, "drop": 20.0},
            "scheduler": "chunked",
            "grid": [16, 64, 256],
            # vLLM v1's default budget on an H100/H200 is the largest (greedy's)
            "max_num_batched_tokens": 8192,
            "budget_grid": [256, 512, 1024, 2048, 8192],
            "orders": ["fcfs", "shortest-prompt"],
            "clock_grid": list(LLM_CLOCK_GRID),
            "horizon_requests": 20_000,
            "warmup_requests": 1_000,
        }
    )


#: cells of the load grid drawn-load tasks evaluate on (and their bound averages over)
LOAD_GRID_CELLS = 10


def load_grid(lo: float, hi: float, k: int, reps: int) -> tuple[float, ...]:
    """The midpoints of ``k`` equal cells of ``[lo, hi]``, each ``reps`` times in a row."""
    step = (hi - lo) / k
    return tuple(round(lo + (i + 0.5) * step, 10) for i in range(k) for _ in range(reps))


TASKS: dict[str, Task] = {
    t.id: t
    for t in (
        Task(
            id="batch_env/LowLoadEnergy-v0",
            base="batch_env/DynamicBatching-v0",
            kwargs=_frozen(
                {
                    "profile": "resnet50-v100",
                    "max_batch_size": 32,
                    "workload": {"kind": "poisson", "load": 0.1},
                    "reward_weights": {"latency": 1.0, "energy": 2.0, "sla": 0.0, "drop": 1.0},
                    "queue_capacity": 500,
                    "horizon_requests": 20_000,
                }
            ),
            summary="ResNet-50/V100 at 10% load with an energy weight of 2 per joule.",
            hard=(
                "Serving each request at once (greedy) wastes energy on small batches: the "
                "optimum waits for about 8 requests and costs 27% less. A learner must learn "
                "to wait while the queue looks idle."
            ),
            bound="smdp",
        ),
        Task(
            id="batch_env/AnyLoad-v0",
            base="batch_env/DynamicBatching-v0",
            kwargs=_frozen(
                {
                    "profile": "resnet50-v100",
                    "max_batch_size": 32,
                    "workload": {"kind": "poisson", "load_range": [0.1, 0.95]},
                    "reward_weights": {"latency": 1.0, "energy": 0.5, "sla": 0.0, "drop": 1.0},
                    "idle_power_w": 0.0,
                    "queue_capacity": 500,
                    # long enough for random valid actions, which overload the server at
                    # the top loads, to have a CI under 1% (with 50,000: 2.2%)
                    "horizon_requests": 250_000,
                }
            ),
            summary=(
                "ResNet-50/V100, Poisson traffic at a load drawn per episode, uniform on "
                "0.1-0.95 of the max throughput; energy weight 0.5, idle power 0 W."
            ),
            hard=(
                "The load is not in the observation beyond what the env always gives (the "
                "queue, the oldest wait, the recent arrival rate): one policy must serve "
                "every load. Greedy costs 11% more than the per-load optimum on average; "
                "one control limit planned for the mean load is within 0.5% of it."
            ),
            bound="smdp-per-seed",
            seeds=tuple(range(1000, 1020)),
            eval_loads=load_grid(0.1, 0.95, LOAD_GRID_CELLS, 2),
        ),
        Task(
            id="batch_env/Trace-v0",
            base="batch_env/DynamicBatching-v0",
            kwargs=_frozen(
                {
                    "profile": "resnet50-v100",
                    "max_batch_size": 32,
                    "workload": {
                        "kind": "trace",
                        "dataset": "azure-conv-2023-gz",
                        "load": 0.6,
                        "random_offset": True,
                    },
                    "decision_interval_ms": 0.5,
                    "reward_weights": {"latency": 1.0, "energy": 0.5, "sla": 0.0, "drop": 1.0},
                    "idle_power_w": 0.0,
                    "queue_capacity": 500,
                    "horizon_requests": 19_366,
                }
            ),
            summary=(
                "ResNet-50/V100 replaying the Azure LLM conversation trace (Nov 2023, 19,366 "
                "requests) rescaled to 60% load, from a random offset, once round per episode."
            ),
            hard=(
                "Real traffic: the rate drifts and bunches (rescaled, the trace's hour passes "
                "in 6.4 s), so no stationary model fits it; there is no exact bound, and the "
                "reference is the best known policy."
            ),
            bound=None,
            # 300 episodes: every policy sees the same trace, so the fixed policies' figures
            # barely vary, but random valid actions scatter by 6% an episode (4.5% CI with
            # 10 episodes; docs/benchmark.md)
            seeds=tuple(range(1000, 1300)),
        ),
        Task(
            id="batch_env/NodeAnyLoad-v0",
            base="batch_env/NodeBatching-v0",
            kwargs=_frozen(
                {
                    "profile": "resnet50-v100",
                    "max_batch_size": 32,
                    "sla_ms": 15.0,
                    "decision_interval_ms": 0.5,
                    "workload": {"kind": "poisson", "load_range": [0.1, 0.9]},
                    "reward_weights": {"latency": 1.0, "energy": 0.5, "sla": 1.0, "drop": 1.0},
                    "horizon_requests": 40_000,
                }
            ),
            summary=(
                "ResNet-50/V100 batched node by node (LazyBatching's setting), MLPerf's 15 ms "
                "SLA, Poisson traffic at a load drawn per episode from 0.1-0.9."
            ),
            hard=(
                "Each decision picks a node and a batch among the groups in flight; an SLA "
                "miss costs as much as a second of waiting, and the load is hidden. Greedy "
                "misses the SLA for 15-18% of the requests at load 0.5; no exact bound is "
                "known, the reference is the best known policy."
            ),
            bound=None,
            seeds=tuple(range(1000, 1020)),
            eval_loads=load_grid(0.1, 0.9, LOAD_GRID_CELLS, 2),
        ),
        Task(
            id="batch_env/LLMMemoryPressure-v0",
            base="batch_env/LLMBatching-v0",
            kwargs=_frozen(
                {
                    "profile": "llama-2-7b-h100",
                    "gpu_memory_utilization": 0.25,
                    "workload": {"kind": "poisson", "rate_per_s": 3.0},
                    "lengths": {"kind": "empirical", "dataset": "azure-conv-2023-gz"},
                    "reward_weights": {"latency": 1.0, "energy": 0.0, "sla": 20.0, "drop": 20.0},
                    "horizon_requests": 40_000,
                    "warmup_requests": 1_000,
                }
            ),
            summary=(
                "Llama-2-7B on an H100 with a quarter of its memory for the KV cache (about "
                "9k tokens), Poisson arrivals at 3 requests/s with the Azure conversation "
                "trace's prompt and output lengths; TTFT 1 s and TPOT 50 ms SLAs."
            ),
            hard=(
                "Memory binds before the cap does: admitting too much preempts running "
                "requests, admitting too little queues them past their TTFT. A missed SLA "
                "costs as much as 20 s of a request's latency, so goodput is what pays. No "
                "exact bound is known; the reference is the best known policy."
            ),
            bound=None,
            # 50 x 40,000 requests: an episode's figure scatters by about 3% (memory near
            # full: congestion comes and goes slowly); docs/benchmark.md, "Protocol"
            seeds=tuple(range(1000, 1050)),
            superseded_by="batch_env/LLMMemoryPressure-v1",
        ),
        Task(
            id="batch_env/LLMMemoryPressure-v1",
            base="batch_env/LLMBatching-v2",
            kwargs=_frozen(
                {
                    "profile": "llama-2-7b-h100",
                    "gpu_memory_utilization": 0.25,
                    "workload": {"kind": "poisson", "rate_per_s": 3.0},
                    "lengths": {"kind": "empirical", "dataset": "azure-conv-2023-gz"},
                    "reward_weights": {"latency": 1.0, "energy": 0.0, "sla": 20.0, "drop": 20.0},
                    "scheduler": "chunked",
                    "grid": list(LLM_CAP_GRID),
                    # the profile's table ends at 4,096 prompt tokens (vLLM v1's H100
                    # default budget, 8,192, is beyond what it measured)
                    "max_num_batched_tokens": 4096,
                    "budget_grid": list(LLM_BUDGET_GRID),
                    # one class: EDF would admit as FCFS does (one TTFT SLA)
                    "orders": ["fcfs", "shortest-prompt"],
                    "horizon_requests": 40_000,
                    "warmup_requests": 1_000,
                }
            ),
            summary=(
                "LLMMemoryPressure-v0's problem on LLMBatching-v2: Llama-2-7B/H100 with a "
                "quarter of its memory for the KV cache (about 9k tokens), Poisson arrivals "
                "at 3 requests/s with the Azure conversation trace's lengths, TTFT 1 s and "
                "TPOT 50 ms SLAs; chunked prefill, each decision sets the cap, the token "
                "budget and the admission order."
            ),
            hard=(
                "Memory binds before the cap does: admitting a long prompt preempts running "
                "requests, and a large chunk stalls every decode. vLLM's defaults (the "
                "largest cap and budget, FCFS) pay for both and cost 17% more than a "
                "512-token budget with the shortest prompts first; neither lever alone gets "
                "there. No exact bound is known: the reference is the best realizable policy."
            ),
            bound=None,
            seeds=tuple(range(1000, 1050)),
            oracle_kwargs=_frozen({"orders": ["fcfs", "shortest-prompt", "srpt"]}),
        ),
        Task(
            id="batch_env/LLMBurstyLongPrompts-v0",
            base="batch_env/LLMBatching-v2",
            kwargs=_frozen(
                {
                    "profile": "llama-2-7b-a100",
                    "workload": {"kind": "gamma", "rate_per_s": 0.9, "cv": 2.0},
                    "lengths": {"kind": "empirical", "dataset": "azure-code-2023-gz"},
                    "ttft_sla_ms": 2000.0,
                    "tpot_sla_ms": 50.0,
                    "reward_weights": {
                        "latency": 1.0,
                        "energy": 0.005,
                        "sla": 20.0,
                        "drop": 20.0,
                    },
                    "scheduler": "chunked",
                    "grid": list(LLM_CAP_GRID),
                    # vLLM v1's default budget on an A100 is the largest (greedy's)
                    "max_num_batched_tokens": 2048,
                    "budget_grid": [256, 512, 1024, 2048],
                    "orders": ["fcfs", "edf", "shortest-prompt"],
                    "horizon_requests": 20_000,
                    "warmup_requests": 1_000,
                }
            ),
            summary=(
                "Llama-2-7B on an A100 serving the Azure coding trace's long prompts (2,055 "
                "tokens on average, outputs of 28) in bursts (gamma gaps, CV 2, 0.9 "
                "requests/s); chunked prefill, TTFT 2 s and TPOT 50 ms SLAs, energy in the "
                "reward (0.005 per joule); each decision sets the cap, the token budget and "
                "the admission order."
            ),
            hard=(
                "A burst of long prompts either stalls every running decode (large chunks: "
                "TPOT misses) or queues past its TTFT (small chunks, first come first "
                "served). vLLM's defaults (budget 2,048, FCFS) cost about 80% more than "
                "small chunks with the shortest prompts first; what to run depends on "
                "what waits. No exact bound is known: the reference is the best realizable "
                "policy."
            ),
            bound=None,
            seeds=tuple(range(1000, 1050)),
            oracle_kwargs=_frozen({"orders": ["fcfs", "edf", "shortest-prompt", "srpt"]}),
        ),
        Task(
            id="batch_env/LLMTwoClasses-v0",
            base="batch_env/LLMBatching-v2",
            kwargs=_frozen(
                {
                    "profile": "llama-2-7b-a100",
                    "gpu_memory_utilization": 0.25,
                    "workload": {"kind": "poisson", "rate_per_s": 2.0},
                    "classes": [
                        {
                            "name": "chat",
                            "share": 0.5,
                            "ttft_sla_ms": 1000.0,
                            "tpot_sla_ms": 50.0,
                            "weight": 1.0,
                            "lengths": {"kind": "empirical", "dataset": "azure-conv-2023-gz"},
                        },
                        {
                            "name": "batch",
                            "share": 0.5,
                            "ttft_sla_ms": 10000.0,
                            "tpot_sla_ms": 200.0,
                            "weight": 0.25,
                            "lengths": {"kind": "empirical", "dataset": "azure-code-2023-gz"},
                        },
                    ],
                    "reward_weights": {"latency": 1.0, "energy": 0.0, "sla": 20.0, "drop": 20.0},
                    "scheduler": "chunked",
                    "grid": list(LLM_CAP_GRID),
                    "max_num_batched_tokens": 2048,
                    "budget_grid": [256, 512, 1024, 2048],
                    "orders": ["fcfs", "edf", "shortest-prompt", "class-priority"],
                    "horizon_requests": 20_000,
                    "warmup_requests": 1_000,
                }
            ),
            summary=(
                "Llama-2-7B on an A100 with a quarter of its memory for the KV cache, "
                "serving interactive chat (the Azure conversation trace's lengths; TTFT 1 s, "
                "TPOT 50 ms, a miss costs 20) beside batch work (the coding trace's long "
                "prompts; TTFT 10 s, TPOT 200 ms, a miss costs 5), half of the 2 "
                "requests/s each; each decision sets the cap, the token budget and the "
                "admission order."
            ),
            hard=(
                "The two classes compete for the KV cache and for each iteration's tokens: "
                "a batch prompt of 2,000 tokens admitted first delays the chat behind it "
                "past its TTFT, or preempts it when memory runs out. FCFS with vLLM's "
                "defaults costs 13% more than small chunks with the shortest prompts first, "
                "and every order with Sarathi-Serve's budget falls between. Prompts of the "
                "batch class beyond the 4,096-token context (about 12%) are rejected at "
                "arrival. No exact bound is known: the reference is the best realizable "
                "policy."
            ),
            bound=None,
            seeds=tuple(range(1000, 1050)),
            oracle_kwargs=_frozen(
                {"orders": ["fcfs", "edf", "shortest-prompt", "class-priority", "srpt"]}
            ),
        ),
        Task(
            id="batch_env/LLMClockBursts-v0",
            base="batch_env/LLMBatching-v2",
            kwargs=_clock_task_kwargs("llama-3.1-8b-h100", (3.0, 15.0), 500.0, 25.0),
            summary=(
                "Llama-3.1-8B on an H100-SXM serving the Azure coding trace's long prompts "
                "(up to the 4,096-token context, short outputs) in two load phases (3 and 15 "
                "requests/s, 30 and 10 s on average), TTFT 500 ms and TPOT 25 ms SLAs, "
                "energy in the reward (0.05 per joule); each decision sets the cap, the "
                "token budget, the admission order and the GPU's SM clock."
            ),
            hard=(
                "Prefill is compute-bound: a low clock saves a quarter of its energy but "
                "slows it by half, which the quiet phase absorbs and the busy phase does "
                "not. The best clock depends on what waits: the best constant action "
                "settles on a middle clock, while a rule that runs at the lowest clock "
                "until prompts queue is about 7% cheaper. No exact bound is known: the "
                "reference is the best realizable policy. The gain rests on power falling "
                "faster than the clock (an exponent of 2, which published per-clock figures "
                "support): 7-12% at the ends of the range they allow, 1.5% at an exponent "
                "of 1, which they rule out (docs/headroom.md)."
            ),
            bound=None,
            seeds=tuple(range(1000, 1050)),
        ),
        Task(
            id="batch_env/LLMClockQwenH200-v0",
            base="batch_env/LLMBatching-v2",
            kwargs=_clock_task_kwargs("qwen2.5-7b-h200", (3.5, 18.0), 300.0, 20.0),
            summary=(
                "Qwen2.5-7B on an H200 serving the Azure coding trace's long prompts in two "
                "load phases (3.5 and 18 requests/s, 30 and 10 s on average) under "
                "tight interactive SLAs (TTFT 300 ms, TPOT 20 ms), energy in the reward "
                "(0.05 per joule); each decision sets the cap, the token budget, the "
                "admission order and the GPU's SM clock."
            ),
            hard=(
                "As LLMClockBursts-v0, on a faster GPU with a model of four KV heads and a "
                "tighter TTFT: prefill at a low clock saves energy until the queue builds, "
                "and a burst at a low clock misses 300 ms within seconds. The best constant "
                "action is a middle clock; a queue rule beats it by about 7%. No exact "
                "bound is known: the reference is the best realizable policy. As on "
                "LLMClockBursts-v0 the gain rests on the power model's clock exponent: "
                "8-17% at the ends of the range published figures allow, 1.1% at an "
                "exponent of 1 (docs/headroom.md)."
            ),
            bound=None,
            seeds=tuple(range(1000, 1050)),
        ),
        Task(
            id="batch_env/Bursty-v0",
            base="batch_env/DynamicBatching-v0",
            kwargs=_frozen(
                {
                    "profile": "resnet50-v100",
                    "max_batch_size": 32,
                    "workload": {
                        "kind": "mmpp",
                        "rates_per_s": [0.005 * _MU, 0.3 * _MU],
                        "switch_rates_per_s": [1.0, 1.0],
                    },
                    "reward_weights": {"latency": 1.0, "energy": 0.5, "sla": 0.0, "drop": 1.0},
                    "idle_power_w": 0.0,
                    "queue_capacity": 300,
                    "horizon_requests": 3_000_000,
                }
            ),
            summary=(
                "ResNet-50/V100 under two-phase MMPP traffic: 25 and 1,507 requests/s, 1 s "
                "mean dwell in each phase."
            ),
            hard=(
                "The best batching differs by phase (wait for about 2 requests when quiet, 10 "
                "when busy), and the phase is hidden: knowing it is worth 4.6% over the best "
                "single control limit, and greedy costs 38% more than the phase-aware optimum."
            ),
            bound="smdp-oracle",
            # 20 seeds: with 10, the CIs were 1.03-1.12% of the values (docs/benchmark.md)
            seeds=tuple(range(1000, 1020)),
        ),
    )
}


class TaskOverrideError(ValueError):
    """A kwarg given to a task id would change its problem (:func:`check_task_kwargs`)."""


def _plain(value: Any) -> Any:
    """``value`` as plain JSON data (tuples as lists, mappings as dicts), for comparing
    a given kwarg with a fixed one; non-JSON values (a Workload object) stay as they are."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value


def _same(value: Any, fixed: Any) -> bool:
    """Whether a given kwarg equals a task's fixed one (as plain data; an array or an
    object that does not compare to plain data is not the same)."""
    try:
        return bool(_plain(value) == fixed)
    except (TypeError, ValueError):
        return False


class _NotGiven:
    def __repr__(self) -> str:
        return "<not given>"


#: a kwarg's side in :func:`differences` where it is not given
NOT_GIVEN: Any = _NotGiven()


def differences(
    task_id: str, env_id: str, kwargs: Mapping[str, Any]
) -> tuple[str, dict[str, tuple[Any, Any]]]:
    """How the env ``env_id`` made with ``kwargs`` differs from the task ``task_id``'s:
    ``(its base env id, {key: (its value, the task's)})``, with :data:`NOT_GIVEN` on the
    side that lacks the key. A task's id stands for its base env with its fixed kwargs
    under ``kwargs``; ``task`` itself is left aside. The one comparison behind
    :func:`check_task_kwargs`, :func:`task_of` and ``batch-env benchmark``'s notes on what
    a run was trained on."""
    t = get(task_id)
    base, given = env_id, {k: v for k, v in kwargs.items() if k != "task"}
    if env_id in TASKS:
        base, given = TASKS[env_id].base, {**TASKS[env_id].kwargs, **given}
    fixed = {k: _plain(v) for k, v in t.kwargs.items()}
    diff = {
        k: (v, fixed.get(k, NOT_GIVEN))
        for k, v in given.items()
        if not (k in fixed and _same(v, fixed[k]))
    }
    diff.update({k: (NOT_GIVEN, v) for k, v in fixed.items() if k not in given})
    return base, diff


def check_task_kwargs(
    task_id: str, kwargs: Mapping[str, Any], env_class: str | None = None
) -> None:
    """Refuse kwargs that would change the problem of the task ``task_id``: every fixed
    kwarg of the task must be given at its value (``gymnasium.make`` merges them in), and
    nothing else may be given but :data:`FREE_KWARGS` (display and episode length).
    The envs call it when made with ``task=<id>``, which every task's registration
    passes; so it holds for ``gymnasium.make``, ``make_vec``, rl-zoo3 and the CLI alike.

    :param task_id: a task id.
    :param kwargs: the env's keyword arguments (``task`` itself is ignored).
    :param env_class: the class name of the env being made, checked against the task's
        base env.
    :raises TaskOverrideError: naming the task and the kwarg, and saying how to make the
        changed problem instead (the base id with the task's kwargs).
    """
    t = get(task_id)
    if env_class is not None:
        from gymnasium.envs.registration import registry

        base_cls = str(registry[t.base].entry_point).rsplit(":", 1)[-1]
        if env_class != base_cls:
            raise TaskOverrideError(
                f"task={task_id!r} is a task on {t.base} ({base_cls}), not on {env_class}"
            )
    if t.superseded_by is not None:
        warnings.warn(
            f"{t.id} is superseded by {t.superseded_by} (the same problem on a newer env; "
            f"see docs/tasks/{t.superseded_by.split('/')[-1]}.md): {t.id} stays registered "
            "so that old results rerun, and its figures do not compare with the new id's",
            DeprecationWarning,
            stacklevel=4,
        )
    for key, (value, fixed) in differences(task_id, t.base, kwargs)[1].items():
        if key in FREE_KWARGS and value is not NOT_GIVEN:
            continue
        was = (
            f"fixes {key}={fixed!r}"
            if fixed is not NOT_GIVEN
            else f"keeps {key} at {t.base}'s default"
        )
        raise TaskOverrideError(_override_message(t, key, value, was))


def _override_message(t: Task, key: str, value: Any, was: str) -> str:
    return (
        f"{t.id} {was}: {key}={value!r} would change the task's problem, which its id pins "
        f"(so that results on it compare). Make the base id with the task's kwargs "
        f"instead: gymnasium.make({t.base!r}, **batch_env.tasks.variant({t.id!r}, {key}=...)) "
        f"(batch-env train: --env-id {t.base} --env-config {t.id} --env-kwargs ...). "
        f"Besides its own kwargs a task id takes only {', '.join(DISPLAY_KWARGS)} (display) "
        f"and {', '.join(EPISODE_KWARGS)} (episode length)"
    )


def variant(task_id: str, **overrides: Any) -> dict[str, Any]:
    """The kwargs of the task ``task_id``'s base env with ``overrides`` applied: what
    ``gymnasium.make(get(task_id).base, **variant(task_id, workload=...))`` needs to make
    a changed problem on purpose (it is then not the task, and no longer says so)."""
    import copy

    return {**copy.deepcopy(dict(get(task_id).kwargs)), **overrides}


def make_args(task_id: str, **overrides: Any) -> tuple[str, dict[str, Any]]:
    """``(env id, kwargs)`` that ``gymnasium.make`` needs for the task ``task_id`` with
    ``overrides``: the task's own id when every override is one of :data:`FREE_KWARGS`
    (it is then still the task), else its base id with the task's kwargs and the
    overrides (:func:`variant`: a changed problem, made on purpose, e.g. by an experiment
    that checks an agent beyond the task's load range)."""
    if set(overrides) <= set(FREE_KWARGS):
        return task_id, dict(overrides)
    return get(task_id).base, variant(task_id, **overrides)


def task_of(env_id: str, kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """``(task id, the kwargs that differ from the task's)`` when ``env_id`` made with
    ``kwargs`` is a benchmark task's problem: the task's own id (its kwargs may then
    differ only in :data:`FREE_KWARGS`), or its base id made with every fixed kwarg of
    the task (and nothing else but :data:`FREE_KWARGS`); ``None`` otherwise. What
    ``batch-env benchmark`` and training's normalized score use to tell which task a run
    was trained on, and how its episodes differ."""
    for t in TASKS.values():
        if env_id != t.id and not (env_id == t.base and kwargs.get("task", t.id) == t.id):
            continue
        diff = differences(t.id, env_id, kwargs)[1]
        if set(diff) <= set(FREE_KWARGS):
            return t.id, {k: v for k, (v, _) in diff.items() if v is not NOT_GIVEN}
    return None


def current() -> tuple[str, ...]:
    """The ids of the tasks that no newer task supersedes, in :data:`TASKS`' order: what
    ``batch-env benchmark`` runs when no task is named (a superseded task, kept
    registered so that old results rerun, runs only when named)."""
    return tuple(tid for tid, t in TASKS.items() if t.superseded_by is None)


def resolve_id(name: str, field: str = "env_id", tasks_only: bool = False) -> str:
    """The registered id that ``name`` stands for: an env or task id as registered
    (``batch_env/LLMClockBursts-v0``), or the same without its ``batch_env/`` namespace
    (``LLMClockBursts-v0``), so that every command takes both. Any other id Gymnasium
    has registered (``CartPole-v1``) is returned as it is, unless ``tasks_only``.

    :param name: the id as given.
    :param field: the option or argument it came from, for the error (empty: the value
        alone, where the caller names the option, as argparse does).
    :param tasks_only: accept benchmark task ids only.
    :raises ValueError: naming ``field`` and ``name``, with the closest ids ("did you
        mean") and the tasks (and, unless ``tasks_only``, the envs) there are.
    """
    import difflib

    from gymnasium.envs.registration import registry

    from . import ENV_IDS

    known = list(TASKS) if tasks_only else [*ENV_IDS, *TASKS]
    text = str(name).strip()
    for candidate in (text, f"batch_env/{text}"):
        if candidate in known:
            return candidate
    if not tasks_only and text in registry:
        return text
    short = {k.split("/", 1)[1].lower(): k for k in known}
    close = difflib.get_close_matches(text.split("/")[-1].lower(), list(short), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(short[c]) for c in close)}? " if close else ""
    listing = f"the tasks are {', '.join(TASKS)}"
    if not tasks_only:
        listing = f"the envs are {', '.join(ENV_IDS)}; {listing}"
    given = f"{field}={name!r}" if field else repr(name)
    raise ValueError(f"{given} is unknown: {hint}{listing} (with or without 'batch_env/')")


def get(task_id: str) -> Task:
    """The task named ``task_id`` (with or without its ``batch_env/`` namespace,
    :func:`resolve_id`); ``ValueError`` with the closest ids and the tasks otherwise."""
    if task_id in TASKS:
        return TASKS[task_id]
    return TASKS[resolve_id(task_id, field="task", tasks_only=True)]


def references() -> dict[str, dict[str, Any]]:
    """The stored reference figures per task id (``tasks_references.json``): for each
    policy, the mean reward rate per second with its 95% CI and the per-seed rates, and
    the bound (``bound_reward_rate_per_s``) where the task has one."""
    text = resources.files("batch_env").joinpath("tasks_references.json").read_text()
    data: dict[str, dict[str, Any]] = json.loads(text)
    return data


_PROFILE_STAMPS: dict[str, str] = {}


def profile_stamp(task: str | Task) -> str:
    """The SHA-256 of the profile a task's env runs on, as loaded (every table and
    constant), and for an LLM profile built from a model and a GPU spec (``arch``), of
    that GPU spec too (its power model sets the energy at every clock). Stored with the
    task's references (``stamp.profile_sha256``); a task whose profile no longer has the
    stamp of its references cannot be scored against them (:func:`normalized_score`):
    its references are recomputed and its version bumped (``docs/benchmark.md``). Builds
    the task's env once per process (Gymnasium's ``make``, imported here only)."""
    t = get(task) if isinstance(task, str) else task
    if t.id not in _PROFILE_STAMPS:
        import dataclasses
        import hashlib

        import gymnasium as gym

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make(t.id)
        prof = env.unwrapped.profile  # type: ignore[attr-defined]
        content: dict[str, Any] = {"profile": prof.to_dict()}
        arch = content["profile"].get("arch")
        if isinstance(arch, Mapping) and "gpu" in arch:
            from .profiles import llm_arch

            content["gpu"] = dataclasses.asdict(llm_arch.load_gpu(arch["gpu"]))
        env.close()
        text = json.dumps(content, sort_keys=True, default=str)
        _PROFILE_STAMPS[t.id] = hashlib.sha256(text.encode()).hexdigest()
    return _PROFILE_STAMPS[t.id]


def _stored(t: Task) -> dict[str, Any]:
    ref = references().get(t.id)
    if ref is None:
        raise ValueError(
            f"task {t.id!r} has no stored references: run `batch-env benchmark --references`"
        )
    return ref


def _check_stamp(ref: Mapping[str, Any], task_id: str) -> None:
    """Refuse references whose profile stamp is not the task's profile's now."""
    stamp = ref.get("stamp", {}).get("profile_sha256")
    if stamp is None or task_id not in TASKS:
        return
    now = profile_stamp(task_id)
    if stamp != now:
        raise ValueError(
            f"task {task_id!r}: its stored references were measured on another profile "
            f"(stamp {stamp[:12]}, now {now[:12]}): scores against them would compare "
            "different problems; recompute them (`batch-env benchmark --references`) and "
            "bump the task's version (docs/benchmark.md)"
        )


def score_span(ref: Mapping[str, Any], task_id: str = "this task") -> tuple[float, float]:
    """``(greedy's reward rate, the top's)`` of a task's references, the normalized
    score's 0 and 1; the top is the bound, else the best realizable reference.

    :raises ValueError: when the task has no bound and no reference beats greedy by more
        than the paired 95% CI (``score_undefined`` in the references, set by
        ``batch-env benchmark --references``): the score is then undefined; and when the
        references' profile stamp is not the task's profile's now (:func:`profile_stamp`).
    """
    _check_stamp(ref, task_id)
    low = float(ref["policies"]["greedy"]["reward_rate_per_s"])
    top = float(ref.get("bound_reward_rate_per_s", ref["best_reward_rate_per_s"]))
    if top <= low or "score_undefined" in ref:
        why = ref.get("score_undefined", f"the best reference is {ref['best_policy']}")
        raise ValueError(
            f"{task_id} has no bound and no known policy beats greedy ({why}): its "
            "normalized score is undefined; compare reward rates instead"
        )
    return low, top


def bound_or_best(task: str | Task) -> float:
    """The reward rate per second a normalized score of 1 stands for: the stored bound
    where the task has one, else the best stored realizable policy's figure
    (:func:`score_span`'s ``ValueError`` where none beats greedy)."""
    t = get(task) if isinstance(task, str) else task
    return score_span(_stored(t), t.id)[1]


def normalized_score(task: str | Task, reward_rate_per_s: float) -> float:
    """``(r - r_greedy) / (r_bound - r_greedy)``: 0 at greedy's stored reward rate, 1 at
    the bound's (reward rates are negative costs, so higher is better).

    :param task: a task or its id.
    :param reward_rate_per_s: the policy's mean reward rate per second on the task's
        protocol.
    :raises ValueError: for an unknown task, a task without stored references, a task
        whose score is undefined (no bound and no known policy above greedy), or a
        reward rate that is not a finite number.
    """
    t = get(task) if isinstance(task, str) else task
    ref = _stored(t)
    r = float(reward_rate_per_s)
    if not math.isfinite(r):
        raise ValueError(
            f"reward_rate_per_s={reward_rate_per_s!r} is invalid: expected a finite number"
        )
    low, top = score_span(ref, t.id)
    return (r - low) / (top - low)
