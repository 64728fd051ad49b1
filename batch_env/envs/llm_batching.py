"""``batch_env/LLMBatching-v0`` and ``-v1``: iteration-level (continuous) batching of an LLM
with a paged KV cache.

This module is the MDP: spaces, decision epochs, reward, observation, the SLA bookkeeping
(first tokens, completions, TTFT and TPOT misses) and the summary. The server it drives,
its requests, queues and KV cache (:class:`batch_env.llm.LLMServerState`) and the
iteration scheduler chosen by name (``scheduler=``; :func:`batch_env.llm.make_scheduler`),
live in :mod:`batch_env.llm`; the scheduler reports first tokens, completions and the
clock's moves back to the env (:class:`_EnvHost`).
"""

from __future__ import annotations

import math
import warnings
from bisect import bisect_right
from collections import deque
from dataclasses import replace
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..config import LLM_DEFAULT_WORKLOAD, LLMConfig, LLMConfigV1, LLMConfigV2, RequestClass
from ..core import ServingCore
from ..executor import LLMExecutor, LLMProfileExecutor, make_llm_executor
from ..llm import ChunkedScheduler, Iteration, LLMServerState, Plan, SLABooks, make_scheduler
from ..llm.actions import ActionCodec, LLMAction
from ..llm.orders import FCFS, candidates
from ..metrics import llm_metrics, summarize
from ..profiles.llm_profile import LLMProfile
from ..profiles.llm_profile import load as load_llm_profile
from ..render import (
    BAR_GAP,
    BAR_W,
    BLUE,
    HEIGHT,
    ORANGE,
    PURPLE,
    QUEUE_BARS,
    QUEUE_BOX,
    TEAL,
    TEXT,
    ServerView,
    Timeline,
    llm_panel,
    sla_colors,
)
from ..workload import Superposition, Workload, check_llm_tokens, make_workload

if TYPE_CHECKING:
    from ..workload import RequestLengths, Trace

#: the request classes' colours on the frame (class k: ``CLASS_COLORS[k % 4]``)
CLASS_COLORS = (TEAL, ORANGE, BLUE, TEXT)
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
_NAN = float("nan")
#: Least fraction of drawn prompts that must fit ``max_model_len`` (see ``_check_admissible``).
_MIN_FIT = 1e-3
#: Rejected arrivals in a row after which ``_more`` gives up (at least this many; a trace's
#: bound is twice its length, so a full loop of it always contains a fitting prompt).
_MAX_REJECTED_RUN = 100_000


class LLMBatchingEnv(ServingCore, gym.Env[np.ndarray, int]):
    """Iteration-level batching of an LLM: the cap on running requests, iteration by iteration.

    ## Description

    A vLLM-style server (vLLM v0's default scheduler, no chunked prefill) runs one LLM on
    one accelerator (or a tensor-parallel group). Requests arrive from a workload with a
    prompt and an output length (from a distribution or from a trace in the Azure LLM
    format), wait in a FCFS queue, and are served by *iterations*:

    * if the request at the head of the queue is admissible, the iteration is a
      **prefill** of the longest admissible prefix of the queue: FCFS, while the number
      running stays within the cap (``max_num_seqs``), the prompts' tokens within
      ``max_num_batched_tokens``, and the KV blocks of their prompts leave a watermark
      (1% of the blocks) free. The prefill produces each request's first token (TTFT ends
      there);
    * otherwise it is one **decode** step of every running request (one token each). A
      request whose next token needs a new KV block (16 tokens a block) and finds none
      preempts the newest running request (recompute: its blocks are freed and it returns
      to the head of the queue with prompt = prompt + tokens generated so far; a victim
      that is the request itself is preempted too).

    KV capacity is ``(GPU memory x utilization - weights) / bytes per token`` from the
    profile; iteration time and power come from the profile (:mod:`batch_env.llm_profile`):
    prefill as a function of the prompts' tokens, decode of the batch size and the KV
    context. A request completes when it has all its output tokens; its blocks are freed.
    In real mode (``executor="torch"``) every iteration instead runs a real GPT decoder
    with a real KV cache and its measured duration advances the clock; the KV blocks stay
    the profile's (see Arguments).

    **Chunked prefill** (``scheduler="chunked"``, the default of ``LLMBatching-v1``; vLLM
    v1, Sarathi-Serve): every iteration first schedules one decode token for each running
    request whose prefill is complete, then fills the rest of the token budget
    (``max_num_batched_tokens``) with prompt chunks, FCFS (prefills in progress first,
    then the queue's head under the cap), in one mixed iteration; KV blocks are allocated
    per chunk, preemption is by recompute as above, and a request's first token comes
    when its last chunk completes. Its iteration time is
    :meth:`batch_env.llm_profile.LLMProfile.mixed_time_s`. ``decode_first=False`` and
    ``split_prompts=False`` give v0's scheduler back (``docs/decisions.md``, "Chunked
    prefill").

    ## Action Space

    ``Discrete(len(grid))``: action ``i`` sets the cap on running requests for the next
    iteration to ``grid[i]`` (default grid ``1..max_num_seqs``). With the chunked
    scheduler and a ``budget_grid``, ``Discrete(len(grid) x len(budget_grid))``: action
    ``a`` sets the cap ``grid[a % len(grid)]`` and the iteration's token budget
    ``budget_grid[a // len(grid)]``. A cap below the number
    running stops admission; it never evicts. Every action is valid at every epoch
    (``action_masks()`` is all true). An action outside the space raises ``ValueError``.

    ## Observation Space

    ``Box(float32)`` with finite bounds (``OBS_FEATURES``):

    | index | feature | range |
    |-------|---------|-------|
    | 0 | waiting requests / max_num_seqs (clipped) | [0, 100] |
    | 1 | running requests / max_num_seqs | [0, 1] |
    | 2 | KV blocks in use / KV blocks | [0, 1] |
    | 3 | oldest waiting request's age / TTFT SLA (clipped) | [0, 100] |
    | 4 | fraction of waiting requests without a first token past their TTFT deadline | [0, 1] |
    | 5 | waiting prompt tokens / max_num_batched_tokens (clipped) | [0, 100] |
    | 6 | recent mean decode-iteration time / TPOT SLA (clipped) | [0, 100] |
    | 7 | recent mean decode batch size / max_num_seqs | [0, 1] |
    | 8 | arrival-rate estimate / (10 requests/s) (clipped) | [0, 100] |
    | 9 | last cap / max_num_seqs | [0, 1] |
    | 10 | mean context (prompt + generated) of the running requests / max_model_len | [0, 1] |
    | 11 | requests preempted in the last step / 10 (clipped) | [0, 1] |
    | 12 | the last iteration was a prefill | {0, 1} |

    True output lengths are never observable (not in the observation, not in ``info``).

    ## Rewards

    As in every batch-env env, ``r = -(w_latency * L + w_energy * E + w_sla * M + w_drop *
    D)`` over the step: L is the integral of the number of requests in the system (so an
    episode's L is the requests' total end-to-end latency), E the joules (the iteration's
    busy power, idle power when the system is empty), M the SLA misses counted in the
    step, D the arrivals dropped by a full queue. A request misses at most once: when its
    TTFT deadline passes without a first token, or, having met TTFT, at completion when its
    TPOT ``(e2e - TTFT) / (output - 1)`` exceeds ``tpot_sla_ms``. Default weights:
    :data:`batch_env.config.LLM_REWARD_WEIGHTS`. Prompts that cannot fit
    (``prompt + 1 > max_model_len``) are rejected at arrival: counted
    (``info["rejected_total"]``, ``serving["rejected"]``), not charged (no policy can
    serve them), and not summary requests.

    ## Starting State, Episode End

    As DynamicBatching-v0: ``reset`` advances to the first arrival; decision epochs are
    every iteration boundary while requests are in the system (an empty system idles to
    the next arrival inside the step); truncation when the summary requests are all done
    or at ``horizon_s``; the summary, with the LLM metrics (TTFT/TPOT percentiles, output
    tokens/s, goodput, preemptions, KV utilization, rejected and clipped counts), is in
    ``info["serving"]`` (:func:`batch_env.metrics.llm_metrics`).

    ## Info

    ``kv_blocks_used``, ``kv_blocks_total``, ``running``, ``waiting`` (also
    ``queue_len``), ``decode_latency_recent_ms`` and ``batch_size_recent`` (means over the
    last ``recent_iterations`` decode iterations; 0 before the first), ``cap``,
    ``iteration`` (``"prefill"``, ``"decode"`` or ``"idle"``), ``iteration_time_s``,
    ``budget``, ``chunk_tokens``, ``prefilling`` and ``prefill_head_done`` (the chunked
    scheduler's token budget, chunk tokens this step, requests whose prefill is in
    progress, tokens computed of the oldest of them), ``decode_context`` (the KV
    context of the requests that decode),
    ``preempted`` (this step), ``preemptions_total``, ``rejected_total``,
    ``clipped_total``, ``dropped_total``, ``now_s``, ``dt_s``, ``reward_components``,
    ``action_mask``, ``energy_source``.

    ## Arguments

    ``gymnasium.make("batch_env/LLMBatching-v0", **kwargs)`` with ``profile`` (an LLM
    profile: a shipped name of :func:`batch_env.llm_profile.available`, default
    ``"llama-2-7b-a100"``, a path or a dict), ``workload`` (a dict with a rate, e.g.
    ``{"kind": "poisson", "rate_per_s": 4}``, or a trace ``{"kind": "trace", "path":
    ..., "target_rate_per_s": 4}``; ``load`` is not defined for LLMs), ``render_mode``
    (``None``, ``"rgb_array"``: an image of the queue, the running requests, the KV cache
    and a timeline of iterations, see ``docs/render.md``; ``"human"``: that image in a
    window, or the text without a display; ``"ansi"``: a line of text), the executor arguments below and the fields of
    :class:`batch_env.config.LLMConfig` (``max_num_seqs``, ``grid``, ``max_model_len``,
    ``max_num_batched_tokens``, ``block_size``, ``watermark``, ``gpu_memory_utilization``,
    ``ttft_sla_ms``, ``tpot_sla_ms``, ``reward_weights``, ``lengths``, ``queue_capacity``,
    ``horizon_requests``, ``warmup_requests``, ``horizon_s``, ``idle_power_w``,
    ``rate_window_s``, ``recent_iterations``, ``scheduler``, ``decode_first``,
    ``split_prompts``, ``budget_grid``).

    * ``clock_mhz``: the GPU's SM clock in MHz, fixed for the episode (``None``: the GPU's
      default, its maximum): the profile becomes ``profile.at_clock(clock_mhz)``
      (:meth:`batch_env.llm_profile.LLMProfile.at_clock`: compute-bound prefills slow
      with the clock, memory-bound decodes barely, power falls). The profile must have a
      clock model (every shipped one has); the clock must be in the GPU's range.
    * ``task``: set by a benchmark task's registration (its id, e.g. ``batch_env/LLMMemoryPressure-v0``);
      the other kwargs must then keep the task's values, except ``render_mode``
      and the episode length (:func:`batch_env.tasks.check_task_kwargs`).
    * ``executor``: ``"profile"`` (default: iteration times and power from the profile) or
      ``"torch"``: every prefill and decode step runs a real GPT-style decoder
      (:class:`batch_env.real.models.GPTSmall`) with a real KV cache per running request, on
      CUDA when present, else the CPU, and the measured duration advances the clock
      (arrivals and lengths still come from the workload). The KV-block accounting
      (capacity, watermark, preemptions) stays the profile's simulated GPU memory; the
      executor is told which requests each iteration prefills (with prompt + generated
      tokens for a preempted request's recompute) or decodes, and drops the cache of a
      finished or preempted request. Energy comes from NVML, RAPL or the profile's power
      model x the measured duration (``info["energy_source"]``). See
      :class:`batch_env.real.llm_torch_executor.LLMTorchExecutor`.
    * With ``"torch"``: ``model`` (``"gpt-small"``, the default and only model with a
      KV-cache decode path), ``torch_device`` (``"auto"``, ``"cpu"``, ``"cuda"``) and
      ``executor_options`` (``width``, ``depth``, ``threads``, ``warmup``, ``seed``,
      ``weights``, ``model_kwargs`` such as ``{"heads": 2, "vocab_size": 256,
      "n_positions": 64, "dtype": "float16"}``). The model's ``n_positions`` (GPT-2's
      1024 by default) must be at least ``max_model_len``, else ``ValueError``. For
      example ``gymnasium.make("batch_env/LLMBatching-v0", executor="torch",
      model="gpt-small", torch_device="cpu", max_model_len=64, executor_options={"width":
      0.125, "depth": 1, "threads": 1, "model_kwargs": {"heads": 2, "n_positions": 64}})``.
      ``get_config()`` records these and the executor's metadata. The determinism of
      profile mode does not hold in real mode (measured times vary).

    ## Version History

    * v0: initial version; real mode (``executor="torch"``) added later, profile mode
      unchanged; the ``scheduler`` option (``"chunked"``) added later, the default
      unchanged.
    * v1: :class:`LLMBatchingV1Env`, the chunked scheduler by default.
    * All, later: ``clock_mhz`` (the GPU's SM clock) added, the default unchanged.
    * Both, later: observation feature 4 no longer counts the chunked scheduler's
      prefills in progress as waiting (it could exceed 1, outside the space, when they
      were past their TTFT deadline); the dynamics, rewards and summaries are unchanged.
    """

    metadata = {"render_modes": ["human", "rgb_array", "ansi"], "render_fps": 10}
    executor: LLMExecutor
    #: the configuration class whose defaults this id takes (``LLMBatching-v1``: chunked)
    _config_class: type[LLMConfig] = LLMConfig
    _title = "LLMBATCHING-V0"  # the frame's heading
    #: constructor arguments of a subclass that the base constructor does not name
    _more_arguments: dict[str, Any] = {}  # noqa: RUF012 (read-only here; set per instance)

    # Per-episode state, (re)bound by reset() (declared here for type checkers, which
    # otherwise meet some of it in methods above reset() before its type is known). The
    # server itself (requests, queues, KV cache) is ``_server``, an LLMServerState.
    _bp: list[int]  # the buffered arrivals' prompt tokens, output tokens and clipped flags
    _bo: list[int]
    _bclip: list[bool]
    _bclass: list[int]  # and classes
    _class_drops: list[int]  # drops per class, and at the window's start and end marks
    _class_drops_w0: list[int] | None
    _class_drops_end: list[int] | None
    _rej_times: list[float]  # arrival times of the rejected prompts
    _finished_at: list[float | None]  # per entry: completion time (None while in the system)
    _kv_integral: float  # integral of the KV blocks in use (block-seconds)
    _clipped: int
    _n_iter: int
    _n_prefill: int
    _done_ptr: int  # entries before it are all finished (for _summary_done)
    _w0: tuple[int, int, float, int, int, int] | None  # the counters when the window opened
    _rd: deque[float]  # recent decode iterations' times and batch sizes
    _rb: deque[int]
    _rd_sum: float  # their sums, kept when they change (read by every step's obs and info)
    _rb_sum: int
    _cap_now: int
    _budget_now: int
    _order_now: str
    _last_chunk: int
    _last_preempted: int
    _last_kind: float

    def __init__(
        self,
        profile: str | dict | LLMProfile = "llama-2-7b-a100",
        workload: dict | Workload | None = None,
        max_num_seqs: int = 256,
        grid: tuple[int, ...] | list[int] | None = None,
        max_model_len: int = 4096,
        max_num_batched_tokens: int | None = None,
        block_size: int = 16,
        watermark: float = 0.01,
        gpu_memory_utilization: float | None = None,
        ttft_sla_ms: float = 1000.0,
        tpot_sla_ms: float = 50.0,
        reward_weights: dict | None = None,
        lengths: dict | None = None,
        queue_capacity: int = 4096,
        horizon_requests: int = 1000,
        warmup_requests: int = 0,
        horizon_s: float | None = None,
        idle_power_w: float | None = None,
        rate_window_s: float | None = None,
        recent_iterations: int = 16,
        scheduler: str = "vllm-v0",
        decode_first: bool = True,
        split_prompts: bool = True,
        budget_grid: tuple[int, ...] | list[int] | None = None,
        render_mode: str | None = None,
        executor: str = "profile",
        model: str | None = None,
        torch_device: str = "auto",
        executor_options: dict | None = None,
        task: str | None = None,
        clock_mhz: float | None = None,
    ) -> None:
        # (a subclass's own arguments, e.g. v2's classes, join the constructor's here)
        config = self._config_class.from_arguments({**locals(), **self._more_arguments})
        self.task = task
        self._set_render_mode(render_mode)
        # the iterations' timeline of the frame modes (None otherwise: nothing per step)
        self._iterations = Timeline() if render_mode in ("rgb_array", "human") else None
        self._iter_tokens = 0
        prof = _profile_at_clock(profile, clock_mhz)
        prof.check_max_num_seqs(config.max_num_seqs)
        budget = config.max_num_batched_tokens
        assert budget is not None  # LLMConfig.__post_init__ fills the default
        limit = prof.max_batch_tokens
        if max_num_batched_tokens is None and limit is not None:
            # the default budget derives from max_model_len: name what the user set
            if config.max_model_len > limit:
                raise ValueError(
                    f"max_model_len={config.max_model_len!r} is out of range: a prompt of up to "
                    f"max_model_len - 1 tokens must fit one prefill, and profile '{prof.name}' "
                    f"covers prefills of up to {limit} tokens (no extrapolation); expected "
                    f"max_model_len <= {limit}"
                )
            if budget > limit:
                config = replace(config, max_num_batched_tokens=limit)
                budget = limit
        prof.check_max_num_batched_tokens(budget)  # the largest (budget_grid's are below it)
        own = [c.workload for c in (getattr(config, "classes", None) or ()) if c.workload]
        if own:  # classes with their own arrivals: the env's are their superposition
            if workload is not None:
                raise ValueError(
                    f"workload={workload!r}: the classes have their own workloads, so the "
                    "env's arrivals are their superposition; give the env no workload (or "
                    "give the classes shares of it instead)"
                )
            workload = Superposition(tuple(own))
        if workload is None:
            workload = dict(LLM_DEFAULT_WORKLOAD)
        if isinstance(workload, dict) and "load" in workload:
            raise ValueError(
                f"workload.load={workload['load']!r} is not defined for LLMBatching-v0 (an LLM "
                "server's request throughput depends on the lengths and the policy): give "
                "rate_per_s (or target_rate_per_s for a trace)"
            )
        wl = make_workload(workload)
        # ServingCore reads only what LLMProfile and LLMConfig share with Profile and ServingConfig
        self._setup_core(prof, wl, config)  # type: ignore[arg-type]
        self.mean_load = None  # not defined for an LLM server

        # lengths: the trace's own token columns, or a distribution
        lens: RequestLengths | None = config.lengths
        trace = cast("Trace", wl) if wl.kind == "trace" else None  # kind "trace" is the Trace class
        data = trace.data() if trace is not None else None
        has_tokens = (
            data is not None and data.prompt_tokens is not None and data.output_tokens is not None
        )
        if lens is not None and lens.kind == "trace" and not has_tokens:
            raise ValueError(
                "lengths.kind='trace' needs a trace workload with prompt and output token columns"
            )
        self._lengths_from_trace = has_tokens and (lens is None or lens.kind == "trace")
        if lens is None and not self._lengths_from_trace:
            from ..workload import RequestLengths

            lens = RequestLengths()
        # None only when the lengths come from the trace, and then it is never read
        self._lengths = cast("RequestLengths", lens)
        self._maxlen = config.max_model_len
        if self._lengths_from_trace:
            # has_tokens: the trace's data has both token columns, so both are named
            assert trace is not None and data is not None
            assert data.prompt_tokens is not None and data.output_tokens is not None
            p_col, o_col = trace.prompt_tokens_column, trace.output_tokens_column
            assert p_col is not None and o_col is not None
            check_llm_tokens(
                data.prompt_tokens, data.output_tokens, f"Trace {trace.path!r}", (p_col, o_col)
            )
        self._setup_classes(config, data)

        # the KV cache
        bs = config.block_size
        total = prof.kv_blocks_total(bs, config.gpu_memory_utilization)
        watermark = int(config.watermark * total)
        need = -(-config.max_model_len // bs)
        if total - watermark < need:
            raise ValueError(
                f"max_model_len={config.max_model_len} needs {need} KV blocks of {bs} tokens but "
                f"profile '{prof.name}' has {total} ({watermark} kept free by the watermark) "
                "at this gpu_memory_utilization: lower max_model_len"
            )
        self.kv_blocks_total = total
        self._server = LLMServerState(bs, total, watermark)
        # the SLA books: each class's SLAs and weight (one class: the env's, weight 1)
        self._sla_books = SLABooks(
            [(c.ttft_sla_ms or config.ttft_sla_ms) / 1000.0 for c in self._classes],
            [(c.tpot_sla_ms or config.tpot_sla_ms) / 1000.0 for c in self._classes],
            [c.weight for c in self._classes],
        )
        if not self._multi:  # one class: its SLAs scale the observation (the env's by default)
            self._sla, self._tpot = self._sla_books.ttft_s[0], self._sla_books.tpot_s[0]
        else:
            self._tpot = config.tpot_sla_ms / 1000.0
        assert config.grid is not None  # LLMConfig.__post_init__ fills the default
        self._grid = config.grid
        self._N = config.max_num_seqs
        self._budget = budget
        self._recent_n = config.recent_iterations
        self._check_llm_drop_weight()

        self._budgets = config.budget_grid if config.budget_grid is not None else (budget,)
        # v2's admission orders (the others: FCFS only); srpt reads the true lengths
        self._orders: tuple[str, ...] = tuple(getattr(config, "orders", (FCFS,)))
        self._oracle = bool(self._more_arguments.get("oracle_info", False))
        if "srpt" in self._orders and not self._oracle:
            raise ValueError(
                "orders: 'srpt' admits by the true remaining output lengths, which no "
                "realizable policy knows: make the env with oracle_info=True to offer it"
            )
        #: the action encoding (:mod:`batch_env.llm.actions`): :meth:`action_parts`,
        #: :meth:`action_of`
        self.actions = ActionCodec(self._grid, self._budgets, self._orders)
        self.action_space = spaces.Discrete(self.actions.n)
        self._order_feats = bool(self._more_arguments.get("order_features", False))
        high = np.array(
            [_CLIP, 1.0, 1.0, _CLIP, 1.0, _CLIP, _CLIP, 1.0, _CLIP, 1.0, 1.0, 1.0, 1.0]
            + ([_CLIP, 1.0, _CLIP] * len(self._classes) if self._multi else [])
            + ([_CLIP, _CLIP] * len(self._orders) if self._order_feats else []),
            dtype=np.float32,
        )
        self.observation_space = spaces.Box(
            np.zeros(high.size, dtype=np.float32), high, dtype=np.float32
        )
        self._mask = np.ones(self.actions.n, dtype=bool)

        # last, once the configuration is valid: a real executor builds a model and a meter
        self.executor = make_llm_executor(
            executor,
            prof,
            config.max_num_seqs,
            config.max_model_len,
            model=model,
            torch_device=torch_device,
            options=executor_options,
        )
        options = (
            {"decode_first": config.decode_first, "split_prompts": config.split_prompts}
            if config.scheduler == "chunked"
            else {}
        )
        self._scheduler = make_scheduler(
            config.scheduler, self._server, _EnvHost(self), self.executor, **options
        )
        self._executor_spec: dict[str, Any] = {"executor": executor}
        if executor != "profile":
            self._executor_spec.update(
                model=model,
                torch_device=torch_device,
                executor_options=dict(executor_options or {}),
                executor_metadata=self.executor.metadata(),
            )
        self._warn_if_seed_invariant(executor)

    def _draws_beyond_arrivals(self) -> bool:
        """Whether an episode draws request lengths or classes from the seed (a trace's
        own token columns and fixed lengths draw nothing)."""
        if self._multi and not self._by_source:
            return True  # each arrival's class, by share
        for own, tokens in zip(self._own_lengths, self._part_tokens, strict=True):
            lens = (
                own
                if own is not None
                else (None if self._lengths_from_trace or tokens else self._lengths)
            )
            if lens is not None and lens.kind != "fixed":
                return True
        return False

    def _check_llm_drop_weight(self) -> None:
        """Warn when a drop costs less than the energy of the cheapest request (one token)."""
        p = cast(LLMProfile, self.profile)  # ServingCore types it as the batch Profile
        cheapest = min(p.decode_time_s(b, b) * p.decode_power_w(b) / b for b in (1, self._N))
        w = self.config.reward_weights
        if w.drop < w.energy * cheapest:
            warnings.warn(
                f"reward_weights.drop={w.drop} is below the cheapest energy cost of serving a "
                f"request (energy weight {w.energy} x {cheapest:.4g} J): dropping pays",
                stacklevel=3,
            )

    def _setup_classes(self, config: LLMConfig, data: Any) -> None:
        """The request classes (``LLMBatching-v2``'s ``classes``; else one class with the
        env's SLAs and lengths), their arrival shares and lengths, and the check that
        requests of each can be admitted."""
        classes = getattr(config, "classes", None)
        self._classes: tuple[RequestClass, ...] = classes or (RequestClass("default"),)
        self._multi = len(self._classes) > 1
        shares = np.array([c.share or 1.0 for c in self._classes], dtype=np.float64)
        self._shares = shares / shares.sum()
        # classes with their own arrivals (a superposition): part c is class c, and a
        # trace part with token columns gives its class's lengths
        self._by_source = self._classes[0].workload is not None
        self._part_tokens = [
            self._by_source and _has_tokens(c.workload) and c.lengths is None for c in self._classes
        ]
        # which classes draw the env's lengths (or the trace's columns), and which their own
        self._own_lengths = [c.lengths for c in self._classes]
        self._max_rejected_run = _MAX_REJECTED_RUN
        if any(
            lens is None and not tokens
            for lens, tokens in zip(self._own_lengths, self._part_tokens, strict=True)
        ):
            self._check_admissible(data)
        for c, tokens in zip(self._classes, self._part_tokens, strict=True):
            if tokens:
                self._check_trace_part(c)
        for i, lens in enumerate(self._own_lengths):
            if lens is None:
                continue
            frac, what = lens.fit_fraction(self._maxlen - 1)
            if frac < _MIN_FIT:
                raise ValueError(
                    f"classes[{i}].lengths: almost no request of class "
                    f"{self._classes[i].name!r} can be admitted: a prompt fits when prompt + 1 "
                    f"<= max_model_len={self._maxlen}, and {what}: a fraction {frac:.3g} of "
                    f"the prompts would fit (at least {_MIN_FIT:g} is needed)"
                )
        self._class_drops = [0] * len(self._classes)

    def _check_trace_part(self, c: RequestClass) -> None:
        """A class whose own trace gives its lengths: some prompt of it must fit (as
        :meth:`_check_admissible` asks of a trace workload)."""
        trace = cast("Trace", c.workload)
        data = trace.data()
        assert data.prompt_tokens is not None and data.output_tokens is not None
        if not np.any(data.prompt_tokens + 1 <= self._maxlen):
            raise ValueError(
                f"class {c.name!r}: no request of its trace {trace.path!r} can ever be admitted: "
                f"a prompt fits when prompt + 1 <= max_model_len={self._maxlen}, and its "
                f"shortest prompt has {int(data.prompt_tokens.min())} tokens; raise max_model_len"
            )
        self._max_rejected_run = max(self._max_rejected_run, 2 * int(data.prompt_tokens.size))

    def _check_admissible(self, data: Any) -> None:
        """Refuse a configuration under which (almost) no prompt fits ``max_model_len``.

        Prompts that do not fit are rejected at arrival, so such a configuration would
        reject arrival after arrival without ever reaching a decision. A trace is refused
        when none of its prompts fits; drawn lengths when fewer than :data:`_MIN_FIT` of
        them would. This bounds the search for an admissible arrival (see :meth:`_more`).
        """
        maxlen = self._maxlen
        if self._lengths_from_trace:
            if not np.any(data.prompt_tokens + 1 <= maxlen):
                raise ValueError(
                    f"no request can ever be admitted: a prompt fits when prompt + 1 <= "
                    f"max_model_len={maxlen}, and the shortest prompt of trace "
                    f"{cast('Trace', self.workload).path!r} has {int(data.prompt_tokens.min())} tokens; raise "
                    "max_model_len or use other lengths"
                )
            self._max_rejected_run = max(_MAX_REJECTED_RUN, 2 * int(data.prompt_tokens.size))
            return
        frac, what = self._lengths.fit_fraction(maxlen - 1)
        if frac < _MIN_FIT:
            raise ValueError(
                f"almost no request can be admitted: a prompt fits when prompt + 1 <= max_model_len="
                f"{maxlen}, and {what}: a fraction {frac:.3g} of the prompts would fit (at "
                f"least {_MIN_FIT:g} is needed); raise max_model_len or shorten the prompts"
            )
        self._max_rejected_run = _MAX_REJECTED_RUN

    # -- arrivals with lengths ----------------------------------------------------------
    def _more(self) -> bool:
        """Next chunk of arrivals with their lengths; rejected prompts leave the stream here.

        Bounded: after ``_max_rejected_run`` rejected arrivals in a row it raises
        ``ValueError`` (the construction-time check makes that practically impossible:
        with at least :data:`_MIN_FIT` of the prompts fitting, its chance is below e**-100).
        """
        rejected_run = 0
        while not self._ended:
            ch = self._stream.next_chunk()
            times = ch.times
            if len(times) == 0:
                self._ended = True
                return False
            if self._multi or self._by_source or self._own_lengths[0] is not None:
                # a class's own lengths win over the env's and a trace's token columns
                # (RequestClass), as the construction-time checks assume
                cls, p, o = self._class_lengths(ch)
            else:
                cls = None
                if self._lengths_from_trace:
                    p = np.asarray(ch.prompt_tokens, np.int64)
                    o = np.asarray(ch.output_tokens, np.int64)
                else:
                    p, o = self._lengths.sample(self._sizes_rng, len(times))
            fit = p + 1 <= self._maxlen
            if not fit.all():
                self._rej_times.extend(times[~fit].tolist())
                times, p, o = times[fit], p[fit], o[fit]
                cls = None if cls is None else cls[fit]
                if not len(times):
                    rejected_run += len(fit)
                    if rejected_run > self._max_rejected_run:
                        raise ValueError(
                            f"{rejected_run} arrivals in a row were rejected: none had prompt + "
                            f"1 <= max_model_len={self._maxlen}; raise max_model_len or shorten "
                            "the prompts"
                        )
            room = self._maxlen - p
            clip = o > room
            if clip.any():
                o = np.where(clip, room, o)
            self._buf.extend(times.tolist())
            self._bp.extend(p.tolist())
            self._bo.extend(o.tolist())
            self._bclip.extend(clip.tolist())
            self._bclass.extend([0] * len(times) if cls is None else cls.tolist())
            if len(times):
                return True
        return False

    def _class_lengths(self, ch: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A chunk's classes, drawn by share, and the lengths each class draws (its own,
        else the env's or the trace's), from the request-size stream in class order."""
        rng = self._sizes_rng
        n = len(ch.times)
        if self._by_source:  # the classes' own arrivals: the part is the class
            cls = np.asarray(ch.source, np.int64)
        elif not self._multi:  # one class: nothing to draw
            cls = np.zeros(n, np.int64)
        else:
            cls = rng.choice(len(self._classes), size=n, p=self._shares)
        p = np.empty(n, np.int64)
        o = np.empty(n, np.int64)
        if self._lengths_from_trace or any(self._part_tokens):
            p[:] = np.asarray(ch.prompt_tokens, np.int64)
            o[:] = np.asarray(ch.output_tokens, np.int64)
        for c, lens in enumerate(self._own_lengths):
            idx = np.flatnonzero(cls == c)
            from_trace = self._part_tokens[c] or (lens is None and self._lengths_from_trace)
            if not idx.size or from_trace:
                continue
            p[idx], o[idx] = (lens or self._lengths).sample(rng, idx.size)
        return cls, p, o

    def _absorb(self, t_end: float, j: int, power_w: float) -> None:
        """The core's admission, plus the new entries' lengths and the KV-use integral."""
        i = self._i
        n0 = len(self._arr)
        self._kv_integral += self._server.kv_used * (t_end - self._now)
        super()._absorb(t_end, j, power_w)
        adm = len(self._arr) - n0
        if adm:
            classes = self._bclass[i : i + adm]
            ttft = self._sla_books.ttft_s
            deadlines = [a + ttft[c] for a, c in zip(self._arr[n0:], classes, strict=True)]
            self._server.admit(self._bp[i : i + adm], self._bo[i : i + adm], classes, deadlines)
            self._sla_books.admit(classes, self._arr[n0:])
            self._clipped += sum(self._bclip[i : i + adm])
            self._finished_at += [None] * adm
        if self._multi and j - i > adm:  # dropped by a full queue: the last of the arrivals
            for c in self._bclass[i + adm : j]:
                self._class_drops[c] += 1

    def _in_service_count(self) -> int:
        """The running requests."""
        return len(self._server.running)

    def _rejected_count(self) -> int:
        """Prompts rejected by now (they never fit ``max_model_len``)."""
        return bisect_right(self._rej_times, self._now)

    def _on_mark(self) -> None:
        first = self._window is None
        super()._on_mark()
        if first:
            self._w0 = self._window_counters()
            self._class_drops_w0 = list(self._class_drops)
        else:
            self._class_drops_end = list(self._class_drops)

    def _window_counters(self) -> tuple[int, int, float, int, int, int]:
        """The counters the summary window takes differences of: output tokens,
        preemptions, the KV-use integral, iterations, prefill iterations, clipped outputs."""
        srv = self._server
        return (
            srv.tokens_out,
            srv.preemptions,
            self._kv_integral,
            self._n_iter,
            self._n_prefill,
            self._clipped,
        )

    # -- SLA bookkeeping (TTFT deadlines in arrival order, TPOT at completion) -----------
    def _misses(self) -> float:
        """Weighted SLA misses counted by now (an ``int`` when every class weighs 1)."""
        return self._sla_books.misses(self._now)

    def _misses_exact(self, t: float) -> float:
        return self._sla_books.misses_exact(t)

    def _summary_done(self) -> bool:
        if self._entry_hi is None:
            return False
        fin, d = self._finished_at, self._done_ptr
        n = len(fin)
        while d < n and fin[d] is not None:
            d += 1
        self._done_ptr = d
        return d >= self._entry_hi

    # -- what the scheduler reports (batch_env.llm.scheduler.Host, through _EnvHost) -----
    def _first_token(self, e: int, t: float) -> None:
        """Entry ``e``'s first token at ``t``."""
        self._sla_books.first_token(e, t)

    def _advance_iteration(self, t: float, power_w: float) -> None:
        """The clock to an iteration's end, the queue as the scheduler left it."""
        self._ns = len(self._arr) - len(self._server.waiting)
        self._advance(t, power_w)

    def _finish(self, e: int, t: float) -> None:
        """Entry ``e`` completed at ``t``; a TPOT miss is counted now (TTFT met)."""
        self._finished_at[e] = t
        self._n_sys -= 1
        self._n_done += 1
        self._sla_books.finish(e, t, self._server.output[e])

    def _setting(self, action: int) -> tuple[int, int, str]:
        """The cap, budget and admission order of ``action``, now in force
        (:class:`batch_env.llm.actions.ActionCodec`)."""
        c, b, o = self.actions.indices(action)
        self._cap_now, self._budget_now, self._order_now = (
            self._grid[c],
            self._budgets[b],
            self._orders[o],
        )
        return self._cap_now, self._budget_now, self._order_now

    def action_parts(self, action: int) -> LLMAction:
        """The parts of ``action``: ``LLMAction(cap, budget, order)``.

        ``action = (order index * len(budgets) + budget index) * len(grid) + cap index``
        over the caps :attr:`grid`, the token budgets (``budget_grid``, else
        ``max_num_batched_tokens``) and the admission orders (v2's ``orders``, else FCFS).

        :raises ValueError: ``action`` is not an action of this env.
        """
        return self.actions.parts(action)

    def action_of(self, cap: int, budget: int | None = None, order: str | None = None) -> int:
        """The action that sets this cap, token budget and admission order.

        :param cap: one of :attr:`grid`.
        :param budget: one of the env's budgets (default: the largest, as vLLM runs).
        :param order: one of the env's admission orders (default ``"fcfs"``).
        :raises ValueError: a part the env does not offer, naming those it does.
        """
        return self.actions.action(cap, budget, order)

    def _run_iteration(self, cap: int, budget: int, plan: Plan | None = None) -> Iteration:
        """One iteration of the scheduler at this setting and the order in force
        (``plan``: its plan, made at this boundary), its counters, and the frame modes'
        timeline."""
        sch = self._scheduler
        self._last_chunk = 0
        it = sch.run(sch.plan(cap, budget, self._order_now) if plan is None else plan)
        self._ns = len(self._arr) - len(self._server.waiting)
        self._n_iter += 1
        if self._iterations is not None:  # frame modes only: (batch, time / TPOT SLA, prefill)
            tokens = self._server.tokens_out
            self._iterations.push(
                (tokens - self._iter_tokens) / self._N, it.duration_s / self._tpot, int(it.prefill)
            )
            self._iter_tokens = tokens
        d, _kind, prefill, b, self._last_preempted, chunk_tokens, empty = it
        if not empty:
            self._last_chunk = chunk_tokens
            if prefill:
                self._n_prefill += 1
            if b:
                self._n_batches += 1
                self._sum_b += b
                self._recent(d, b)
            self._last_kind = 1.0 if prefill else 0.0
        return it

    def _forced_plan(self, cap: int, budget: int) -> Plan | None:
        """The next iteration's plan when every action schedules it alike (this boundary
        is no decision epoch: ``LLMBatching-v2`` runs it inside the step), else ``None``.

        Exact and cheap (``LLMBatchingV2Env``: Decision epochs): with nothing waiting and
        no prefill in progress every action runs the same decode; elsewhere the smallest
        and the largest setting are planned, and admission is monotone in between."""
        sch, srv = self._scheduler, self._server
        if self.action_space.n == 1 or not (srv.waiting or srv.prefilling):
            # nothing to admit or to continue: the same decode
            return sch.plan(cap, budget, self._order_now)
        lo, hi = (self._grid[0], self._budgets[0]), (self._grid[-1], self._budgets[-1])
        first = sch.plan(*hi, self._order_now)
        for order in self._orders:  # monotone in the cap and budget for each order
            for setting in (lo, hi):
                if (setting, order) != (hi, self._order_now):
                    if not first.same_iteration(sch.plan(*setting, order)):
                        return None
        return first

    def _recent_many(self, pairs: deque[tuple[float, int]]) -> None:
        """:meth:`_recent` for each ``(time, batch)`` of ``pairs`` in turn (at most the
        windows' length of them), its sums taken once at the end: the same sums, since
        both are sums of the final windows' contents (exact for the integer one)."""
        rd, rb = self._rd, self._rb
        for d, b in pairs:
            rd.append(d)
            rb.append(b)
        self._rb_sum = sum(rb)
        self._rd_sum = sum(rd)

    def _idle_while_empty(self) -> None:
        """An empty system idles to the next arrival (no decision is needed); a finite
        trace that has ended moves the clock to the horizon (the episode then ends)."""
        while self._n_sys == 0:
            if not self._idle_until_arrival():
                break

    def _recent(self, d: float, b: int) -> None:
        """Record a decode iteration's time and batch size in the recent windows (and
        their sums: the same ``sum`` the observation would take)."""
        rb = self._rb
        if len(rb) == rb.maxlen:
            self._rb_sum -= rb[0]  # integers: the running sum is exact
        rb.append(b)
        self._rb_sum += b
        self._rd.append(d)
        self._rd_sum = sum(self._rd)  # floats: summed afresh, as the observation always was

    # -- observation / info -------------------------------------------------------------
    def _obs(self) -> np.ndarray:
        srv = self._server
        N = self._N
        W = srv.waiting
        w = len(W)
        n_run = len(srv.running)
        n_dec = n_run - srv.prefilling
        sla = self._sla
        if w:
            oldest = min((self._now - self._arr[W[0]]) / sla, _CLIP)
            # the requests past their TTFT deadline (at the step's _misses()) without a
            # first token are waiting, or in their first prefill
            no_first = self._sla_books.past_without_first() - self._first_prefills_late()
            past = min(max(no_first, 0), w) / w
            ptoks: float = srv.waiting_tokens
        else:
            oldest = past = ptoks = 0.0
        rd = self._rd
        return np.array(
            [
                min(w / N, _CLIP),
                n_run / N,
                srv.kv_used / srv.kv_total,
                oldest,
                past,
                min(ptoks / self._budget, _CLIP),
                min(self._rd_sum / len(rd) / self._tpot, _CLIP) if rd else 0.0,
                self._rb_sum / len(self._rb) / N if rd else 0.0,
                min(self._rate / 10.0, _CLIP),
                self._cap_now / N,
                srv.decode_context / n_dec / self._maxlen if n_dec > 0 else 0.0,
                min(self._last_preempted / 10.0, 1.0),
                self._last_kind,
                *(self._class_features() if self._multi else ()),
                *(self._order_features() if self._order_feats else ()),
            ],
            dtype=np.float32,
        )

    def _class_counts(self) -> tuple[list[int], list[int], list[float]]:
        """Per class: waiting and running requests, and its oldest waiting request's
        arrival time (``inf``: none waits). The waiting queue is in arrival order but for
        preempted requests at its head, which are older still, so a class's first entry
        in it is its oldest (the queue keeps both per class: O(1), not O(queue))."""
        srv, n = self._server, len(self._classes)
        cls = srv.request_class
        waiting, first = srv.waiting.by_class(n)
        arr = self._arr
        oldest = [arr[e] if e >= 0 else math.inf for e in first]
        running = [0] * n
        for e in srv.running:
            running[cls[e]] += 1
        return waiting, running, oldest

    def _class_features(self) -> list[float]:
        """Three features per class (``LLMBatching-v2`` with several classes): waiting /
        max_num_seqs (clipped at 100), running / max_num_seqs, and its oldest waiting
        request's age / its TTFT SLA (clipped at 100; 0 when none waits)."""
        waiting, running, oldest = self._class_counts()
        N, now, ttft = self._N, self._now, self._sla_books.ttft_s
        out: list[float] = []
        for c in range(len(self._classes)):
            age = (now - oldest[c]) / ttft[c] if waiting[c] else 0.0
            out += [min(waiting[c] / N, _CLIP), running[c] / N, min(age, _CLIP)]
        return out

    def _order_features(self) -> list[float]:
        """Two features per admission order (``LLMBatching-v2``, ``order_features=True``):
        the tokens to prefill of the first waiting request the order would admit /
        max_num_batched_tokens (clipped at 100), and its age / its class's TTFT SLA
        (clipped at 100); both 0 when none waits."""
        srv, now, ttft = self._server, self._now, self._sla_books.ttft_s
        if not srv.waiting:
            return [0.0, 0.0] * len(self._orders)
        out: list[float] = []
        for order in self._orders:
            h = next(iter(candidates(srv, 1, order)))
            age = (now - self._arr[h]) / ttft[srv.request_class[h]]
            out += [min(srv.context(h) / self._budget, _CLIP), min(age, _CLIP)]
        return out

    def _first_prefills_late(self) -> int:
        """Prefills in progress (chunked) of requests that have no first token yet and
        whose TTFT deadline has passed."""
        srv = self._server
        if not srv.prefilling:
            return 0
        G, R, books = srv.generated, srv.running, self._sla_books
        return sum(1 for e in R[len(R) - srv.prefilling :] if G[e] == 0 and books.past_deadline(e))

    def _info(self, dt: float, comps: dict[str, float], kind: str, it: float) -> dict[str, Any]:
        srv = self._server
        rd = self._rd
        R = srv.running
        return {
            "kv_blocks_used": srv.kv_used,
            "kv_blocks_total": srv.kv_total,
            "running": len(R),
            "waiting": len(srv.waiting),
            "queue_len": len(srv.waiting),
            "decode_latency_recent_ms": 1000.0 * self._rd_sum / len(rd) if rd else 0.0,
            "batch_size_recent": self._rb_sum / len(self._rb) if rd else 0.0,
            "cap": self._cap_now,
            "budget": self._budget_now,
            **({"order": self._order_now} if len(self._orders) > 1 else {}),
            **({"oracle": self._oracle_view()} if self._oracle else {}),
            "chunk_tokens": self._last_chunk,
            "prefilling": srv.prefilling,
            "decode_context": srv.decode_context,
            # tokens computed of the oldest prefill in progress (the running list's tail)
            "prefill_head_done": srv.prefill_done[R[len(R) - srv.prefilling]]
            if srv.prefilling
            else 0,
            "iteration": kind,
            "iteration_time_s": it,
            "preempted": self._last_preempted,
            "preemptions_total": srv.preemptions,
            "rejected_total": bisect_right(self._rej_times, self._now) if self._rej_times else 0,
            "clipped_total": self._clipped,
            "dropped_total": self._drops,
            "now_s": self._now,
            "dt_s": dt,
            "reward_components": comps,
            "action_mask": self._mask.copy(),
            "energy_source": self.executor.energy_source,
            **(self._class_info() if self._multi else {}),
        }

    def _oracle_view(self) -> dict[str, Any]:
        """``info["oracle"]`` (``oracle_info=True``): what no realizable policy knows, the
        true output tokens each waiting request still has to produce, in queue order."""
        srv = self._server
        return {"waiting_remaining_output": [srv.output[e] - srv.generated[e] for e in srv.waiting]}

    def _class_info(self) -> dict[str, Any]:
        """``info``'s per-class keys (several classes): waiting and running per class, in
        the order of ``classes``."""
        waiting, running, _ = self._class_counts()
        return {"waiting_by_class": waiting, "running_by_class": running}

    def action_masks(self) -> np.ndarray:
        """Every cap is valid at every epoch (a copy of an all-true mask)."""
        self._check_started("action_masks")
        return self._mask.copy()

    @property
    def grid(self) -> tuple[int, ...]:
        """The caps the actions select (``grid[i]`` for action ``i``)."""
        return self._grid

    # -- Gymnasium API ----------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: seed the streams and advance to the first arrival.

        :param seed: episode seed; ``None`` draws one from the env's ``np_random``.
        :param options: ``{"load": x}`` runs this episode at load ``x`` when the workload
            has a ``load_range`` (evaluators fixing their episodes' loads); nothing else.
        """
        self._start_episode(seed, options)
        if self.render_mode == "human":
            self.render()
        comps = {"latency": 0.0, "energy": 0.0, "sla": 0.0, "drop": 0.0}
        return self._obs(), self._info(0.0, comps, "idle", 0.0)

    def _start_episode(self, seed: int | None, options: dict[str, Any] | None) -> None:
        """The episode's state, its streams seeded, the clock at the first arrival."""
        super().reset(seed=seed)
        self._bp = []
        self._bo = []
        self._bclip = []
        self._bclass = []
        self._class_drops = [0] * len(self._classes)
        self._class_drops_w0 = None
        self._class_drops_end = None
        self._rej_times = []
        self._server.clear()
        self._finished_at = []
        self._sla_books.clear()
        self._kv_integral = 0.0
        self._clipped = 0
        self._n_iter = 0
        self._n_prefill = 0
        self._done_ptr = 0
        self._w0 = None
        self._rd = deque(maxlen=self._recent_n)
        self._rb = deque(maxlen=self._recent_n)
        self._rd_sum = 0.0
        self._rb_sum = 0
        self._cap_now = self._grid[-1]
        self._budget_now = self._budgets[-1]
        self._order_now = self._orders[0]
        self._last_preempted = 0
        self._last_chunk = 0
        self._last_kind = 0.0
        self._reset_core(seed, options)  # (the SLA books' pointers at the first arrival)
        if self._iterations is not None:
            self._iterations.clear()
            self._iter_tokens = 0

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Set the cap to ``grid[action]`` and run one iteration (then idle if the system empties).

        :param action: index into the grid of caps.
        """
        if self._needs_reset is not None:
            self._refuse("step")
        if type(action) is not int or action < 0 or action >= self.action_space.n:
            action = self._coerce_action(action)
        cap, _budget, _order = self._setting(action)
        self._last_preempted = 0
        self._last_chunk = 0
        kind, it = "idle", 0.0
        if self._n_sys:
            iteration = self._run_iteration(cap, self._budget_now)
            kind, it = iteration.kind, iteration.duration_s
        self._idle_while_empty()
        reward, comps, dt, _ = self._step_accounting()
        info = self._info(dt, comps, kind, it)
        truncated = self._episode_over()
        if truncated:
            info["serving"] = self._serving_summary()
        if self.render_mode == "human":
            self.render()
        return self._obs(), reward, False, truncated, info

    # -- the summary --------------------------------------------------------------------
    def _serving_summary(self) -> dict[str, Any]:
        """The episode summary: the shared keys (latency = end-to-end) plus the LLM metrics."""
        win = self._window
        lo = win.entry if win is not None else len(self._arr)
        hi = self._entry_hi if self._entry_hi is not None else len(self._arr)
        fin = np.array(
            [_NAN if f is None else f for f in self._finished_at[lo:hi]], dtype=np.float64
        )
        arr = np.asarray(self._arr[lo:hi], dtype=np.float64)
        first = np.asarray(self._sla_books.first_at[lo:hi], dtype=np.float64)
        out = np.asarray(self._server.output[lo:hi], dtype=np.int64)
        done = ~np.isnan(fin)
        drops_summary = self._summary_drops()
        base = summarize(
            arrivals=arr[done].tolist(),
            completions=fin[done].tolist(),
            n_done=int(done.sum()),
            window=None if win is None else replace(win, entry=0),
            entry_hi=int(done.sum()),
            drops_summary=drops_summary,
            now_s=self._now,
            latency_integral_s=self._L,
            energy_j=self._E,
            misses=self._misses(),
            drops=self._drops,
            n_batches=self._n_batches,
            sum_batch=self._sum_b,
            in_system=self._n_sys,
            sla_s=math.inf,
            weights=(self._wl, self._we, self._ws, self._wd),
            **self._episode_totals(),
        )
        w0 = self._w0 if self._w0 is not None else self._window_counters()
        srv = self._server
        t0 = win.time_s if win is not None else self._now
        base.update(
            llm_metrics(
                arrivals=arr,
                first_token=first,
                completion=fin,
                output_lengths=out,
                ttft_sla_s=self._request_slas(lo, hi, self._sla_books.ttft_s),
                tpot_sla_s=self._request_slas(lo, hi, self._sla_books.tpot_s),
                dropped=drops_summary,
                elapsed_s=base["elapsed_s"],
                output_tokens=srv.tokens_out - w0[0],
                preemptions=srv.preemptions - w0[1],
                kv_utilization_mean=(
                    (self._kv_integral - w0[2]) / srv.kv_total / (self._now - t0)
                    if self._now > t0
                    else _NAN
                ),
                iterations=self._n_iter - w0[3],
                prefill_iterations=self._n_prefill - w0[4],
                rejected=bisect_right(self._rej_times, self._now)
                - bisect_right(self._rej_times, t0),
                clipped=self._clipped - w0[5],
            )
        )
        if self._multi:
            base["classes"] = self._class_summaries(lo, arr, first, fin, out, base["elapsed_s"])
        self._warn_summary(base)
        return base

    def _request_slas(self, lo: int, hi: int, per_class: list[float]) -> float | np.ndarray:
        """The SLA of each summary request (entries ``lo:hi``): one number for one class."""
        if not self._multi:
            return per_class[0]
        return np.asarray(per_class)[np.asarray(self._server.request_class[lo:hi], dtype=np.intp)]

    def _class_summaries(
        self,
        lo: int,
        arr: np.ndarray,
        first: np.ndarray,
        fin: np.ndarray,
        out: np.ndarray,
        elapsed_s: float,
    ) -> dict[str, dict[str, Any]]:
        """``serving["classes"]``: per class, its summary requests' completions, drops,
        attainment (TTFT, TPOT, both: of completed + dropped), goodput and latency
        percentiles, against its own SLAs."""
        cls = np.asarray(self._server.request_class[lo : lo + len(arr)], dtype=np.intp)
        w0 = self._class_drops_w0 or self._class_drops
        end = self._class_drops_end or self._class_drops
        books = self._sla_books
        keys = (
            "sla_attainment",
            "ttft_attainment",
            "tpot_attainment",
            "goodput_rps",
            "ttft_p50_ms",
            "ttft_p99_ms",
            "tpot_p50_ms",
            "tpot_p99_ms",
        )
        out_d: dict[str, dict[str, Any]] = {}
        for c, rc in enumerate(self._classes):
            m = cls == c
            done = ~np.isnan(fin[m])
            figures = llm_metrics(
                arrivals=arr[m],
                first_token=first[m],
                completion=fin[m],
                output_lengths=out[m],
                ttft_sla_s=books.ttft_s[c],
                tpot_sla_s=books.tpot_s[c],
                dropped=end[c] - w0[c],
                elapsed_s=elapsed_s,
                output_tokens=0,
                preemptions=0,
                kv_utilization_mean=_NAN,
                iterations=0,
                prefill_iterations=0,
                rejected=0,
                clipped=0,
            )
            e2e = (fin[m] - arr[m])[done]
            out_d[rc.name] = {
                "requests": int(m.sum()),
                "completed": int(done.sum()),
                "in_system_at_end": int(m.sum() - done.sum()),
                "dropped": end[c] - w0[c],
                "latency_mean_ms": float(e2e.mean() * 1000.0) if e2e.size else _NAN,
                **{k: figures[k] for k in keys},
                "ttft_sla_ms": books.ttft_s[c] * 1000.0,
                "tpot_sla_ms": books.tpot_s[c] * 1000.0,
                "weight": rc.weight,
            }
        return out_d

    # -- rendering (ServingCore.render dispatches on render_mode) ------------------------
    def _render_text(self) -> str:
        """Text view of the server (``render_mode="ansi"``)."""
        srv = self._server
        return (
            f"t={self._now:10.3f} s  queue={len(srv.waiting):5d}  running={len(srv.running):4d} "
            f"(cap {self._cap_now})  KV {srv.kv_used}/{srv.kv_total} blocks  "
            f"preempted={srv.preemptions}  dropped={self._drops}"
        )

    def _make_view(self) -> ServerView:
        """Frame layout: the service panel shows the running requests and the KV cache."""
        assert self._iterations is not None  # kept in the frame modes, the only ones with a view
        return ServerView(
            self._title,
            "RUNNING: CONTEXT/MAX_MODEL_LEN",
            "LAST ITERATIONS: BATCH/MAX_NUM_SEQS",
            "LAST ITERATIONS: TIME/TPOT SLA",
            self._iterations,
        )

    def _render_frame(self, view: ServerView) -> np.ndarray:
        """The frame (``render_mode="rgb_array"``), from the queue, the running requests,
        the KV cache and the iteration log (kept only in the frame modes)."""
        srv = self._server
        arr, now, P, G = self._arr, self._now, srv.prompt, srv.generated
        waiting = list(islice(srv.waiting, QUEUE_BARS))
        ttft = self._sla_books.ttft_s
        waits = np.array(
            [(now - arr[e]) / ttft[srv.request_class[e]] for e in waiting], dtype=np.float64
        )
        colors = sla_colors(waits)
        colors[np.array([G[e] > 0 for e in waiting], dtype=bool)] = PURPLE  # preempted
        R = srv.running
        ctx = np.array([P[e] + G[e] for e in R[:QUEUE_BARS]], dtype=np.float64) / self._maxlen
        header = (
            f"T {now:.2f} S  WAIT {len(srv.waiting)}  RUN {len(R)}  PREEMPT {srv.preemptions}  "
            f"DROP {self._drops}"
        )
        panel = llm_panel(
            ctx, len(R), self._N, self._cap_now, srv.kv_used, srv.kv_total, srv.kv_watermark
        )
        img = view.frame(
            header, waits, len(srv.waiting), self._cap, panel, view.timeline, queue_colors=colors
        )
        if self._multi:
            self._draw_classes(view, waiting)
        return img

    def _draw_classes(self, view: ServerView, waiting: list[int]) -> None:
        """Request classes on the frame: a stripe in the class's colour under each waiting
        request's bar, and at the bottom left each class's colour, name and requests
        waiting / running."""
        c, cls = view.canvas, self._server.request_class
        x0, _, _, y1 = QUEUE_BOX
        for i, e in enumerate(waiting):
            x = x0 + 2 + i * (BAR_W + BAR_GAP)
            c.fill(x, y1, x + BAR_W, y1 + 2, CLASS_COLORS[cls[e] % len(CLASS_COLORS)])
        waiting_n, running_n, _ = self._class_counts()
        x = 4
        for k, rc in enumerate(self._classes):
            c.fill(x, HEIGHT - 5, x + 4, HEIGHT - 1, CLASS_COLORS[k % len(CLASS_COLORS)])
            label = f"{rc.name.upper()} {waiting_n[k]}/{running_n[k]}"
            c.text(x + 6, HEIGHT - 5, label, TEXT)
            x += 6 + 4 * len(label) + 8


class LLMBatchingV1Env(LLMBatchingEnv):
    """``batch_env/LLMBatching-v1``: :class:`LLMBatchingEnv` with the chunked scheduler by
    default (vLLM v1's engine, Sarathi-Serve): every iteration first schedules one decode
    token for each running request, then fills the rest of the token budget
    (``max_num_batched_tokens``, default 2048) with prompt chunks, FCFS, in one mixed
    iteration. Everything else, and every argument, is v0's (``scheduler="vllm-v0"``
    gives v0's scheduler under this id). See :class:`LLMBatchingEnv` and
    ``docs/decisions.md``, "Chunked prefill".

    ## Version History

    * v1: the chunked scheduler by default (v0 keeps vLLM v0's prefill-first scheduler).
    """

    _config_class = LLMConfigV1
    _title = "LLMBATCHING-V1"

    def __init__(
        self,
        profile: str | dict | LLMProfile = "llama-2-7b-a100",
        workload: dict | Workload | None = None,
        max_num_seqs: int = 256,
        grid: tuple[int, ...] | list[int] | None = None,
        max_model_len: int = 4096,
        max_num_batched_tokens: int | None = None,
        block_size: int = 16,
        watermark: float = 0.01,
        gpu_memory_utilization: float | None = None,
        ttft_sla_ms: float = 1000.0,
        tpot_sla_ms: float = 50.0,
        reward_weights: dict | None = None,
        lengths: dict | None = None,
        queue_capacity: int = 4096,
        horizon_requests: int = 1000,
        warmup_requests: int = 0,
        horizon_s: float | None = None,
        idle_power_w: float | None = None,
        rate_window_s: float | None = None,
        recent_iterations: int = 16,
        scheduler: str = "chunked",
        decode_first: bool = True,
        split_prompts: bool = True,
        budget_grid: tuple[int, ...] | list[int] | None = None,
        render_mode: str | None = None,
        executor: str = "profile",
        model: str | None = None,
        torch_device: str = "auto",
        executor_options: dict | None = None,
        task: str | None = None,
        clock_mhz: float | None = None,
    ) -> None:
        args = dict(locals())
        args.pop("self")
        args.pop("__class__", None)
        super().__init__(**args)


def _profile_at_clock(profile: str | dict | LLMProfile, clock_mhz: float | None) -> LLMProfile:
    """The env's profile, at the GPU's SM clock ``clock_mhz`` (``None``: its default)."""
    prof = load_llm_profile(profile)
    return prof if clock_mhz is None else prof.at_clock(clock_mhz)


#: Iterations one step of ``LLMBatching-v2`` may run at most (a bound, never reached: a
#: step ends at the next boundary where the actions differ or at the episode's end).
MAX_ITERATIONS_PER_STEP = 10_000_000


class LLMBatchingV2Env(LLMBatchingV1Env):
    """LLMBatching-v1 asked only where two actions would schedule different iterations.

    ``batch_env/LLMBatching-v2``: :class:`LLMBatchingV1Env` (the chunked scheduler by
    default), with decision epochs only where the answer matters.

    ## Decision epochs

    A decision epoch is an iteration boundary at which at least two actions would schedule
    different next iterations (other victims, decodes, or prompt chunks). Between epochs
    the iterations run inside the step, under the last action's cap and budget (any action
    would run them alike), and the step's reward covers them all, as DynamicBatching-v0's
    idle advance does; ``info["iterations"]`` says how many ran and ``info["dt_s"]`` how
    much time passed. An episode still ends at the first boundary at which the summary
    requests are done or the horizon is reached, epoch or not.

    The test is cheap and exact. Where nothing waits and no prefill is in progress, every
    action runs the same decode. Elsewhere the smallest setting (the grid's first cap and
    budget) and the largest are planned (:meth:`batch_env.llm.scheduler.Scheduler.plan`,
    which changes nothing); admission is monotone in the cap and the budget
    (:mod:`batch_env.llm.scheduler`: Monotonicity), so if those two plan the same
    iteration, every action does. ``tests/test_llm_v2.py`` checks the test against trying
    every action on many random states, and that a policy acting on v2's epochs has the
    same trajectory and summary in v1 when it plays its actions there.

    The observation and ``info`` at an epoch are v1's at that boundary; ``preempted``,
    ``iteration``, ``iteration_time_s`` and ``chunk_tokens`` describe the step's last
    iteration (the observation's ``preempted_last_step`` too). Real mode
    (``executor="torch"``) runs every iteration.

    ## Request classes

    ``classes=[{"name": ..., "share": ..., "ttft_sla_ms": ..., "tpot_sla_ms": ...,
    "weight": ..., "lengths": {...}}, ...]`` (:class:`batch_env.config.RequestClass`)
    mixes classes in the workload: each arrival of the env's ``workload`` is of class
    ``c`` with probability ``share_c / sum of shares`` (drawn from the request-size
    stream), with its class's lengths (else the env's), TTFT and TPOT SLAs (else the
    env's), and a miss of it counts ``weight`` in the reward's SLA term. Instead of
    shares, every class may have its own ``"workload"`` (an arrival process or a trace,
    whose token columns then give its lengths): the env's arrivals are their
    superposition (:class:`batch_env.workload.Superposition`) and the env takes no
    ``workload``. With several
    classes the observation gains three features per class (waiting / max_num_seqs,
    running / max_num_seqs, its oldest waiting request's age / its TTFT SLA), ``info``
    ``waiting_by_class`` and ``running_by_class``, and ``info["serving"]["classes"]`` each
    class's requests, completions, drops, attainment (TTFT, TPOT, both), goodput and
    latency percentiles against its own SLAs. One class (or none) is v1's behaviour.

    ## What each order would admit

    ``order_features=True`` (default ``False``) appends two features per admission order
    of ``orders``, after the class features: the first waiting request that order would
    admit, its tokens to prefill (prompt + generated) / ``max_num_batched_tokens`` and
    its age / its class's TTFT SLA (both clipped at 100; 0 when none waits). A server
    knows both (no output length is shown). The LLM tasks' agents leave it off; their
    observation ablation turns it on (``docs/results/agents-llm.md``).

    ## Version History

    * v2: decisions only where they matter (v1's scheduler, arguments and observation);
      request classes; admission orders; ``order_features``.
    """

    _config_class = LLMConfigV2
    _title = "LLMBATCHING-V2"
    _decode_runs: bool  # set by reset: whether forced decodes run in one loop
    _llm_profile: LLMProfile

    def __init__(
        self,
        profile: str | dict | LLMProfile = "llama-2-7b-a100",
        workload: dict | Workload | None = None,
        max_num_seqs: int = 256,
        grid: tuple[int, ...] | list[int] | None = None,
        max_model_len: int = 4096,
        max_num_batched_tokens: int | None = None,
        block_size: int = 16,
        watermark: float = 0.01,
        gpu_memory_utilization: float | None = None,
        ttft_sla_ms: float = 1000.0,
        tpot_sla_ms: float = 50.0,
        reward_weights: dict | None = None,
        lengths: dict | None = None,
        queue_capacity: int = 4096,
        horizon_requests: int = 1000,
        warmup_requests: int = 0,
        horizon_s: float | None = None,
        idle_power_w: float | None = None,
        rate_window_s: float | None = None,
        recent_iterations: int = 16,
        scheduler: str = "chunked",
        decode_first: bool = True,
        split_prompts: bool = True,
        budget_grid: tuple[int, ...] | list[int] | None = None,
        render_mode: str | None = None,
        executor: str = "profile",
        model: str | None = None,
        torch_device: str = "auto",
        executor_options: dict | None = None,
        task: str | None = None,
        clock_mhz: float | None = None,
        classes: list[dict] | tuple | None = None,
        orders: list[str] | tuple[str, ...] = ("fcfs",),
        oracle_info: bool = False,
        order_features: bool = False,
    ) -> None:
        args = dict(locals())
        args.pop("self")
        args.pop("__class__", None)
        # v2's own arguments, which v0's and v1's constructors do not name
        for name in ("oracle_info", "order_features"):
            if not isinstance(args[name], bool):
                raise ValueError(f"{name}={args[name]!r} is invalid: expected true or false")
        self._more_arguments = {
            k: args.pop(k) for k in ("classes", "orders", "oracle_info", "order_features")
        }
        super().__init__(**args)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Set the cap and budget of ``action``, and run iterations until the next decision
        epoch or the episode's end.

        :param action: ``budget index * len(grid) + cap index``, as in v1.
        """
        if self._needs_reset is not None:
            self._refuse("step")
        if type(action) is not int or action < 0 or action >= self.action_space.n:
            action = self._coerce_action(action)
        cap, budget, order = self._setting(action)
        ran, last = self._run_to_epoch(cap, budget, chosen=True)
        reward, comps, dt, _ = self._step_accounting()
        info = self._info(dt, comps, *((last.kind, last.duration_s) if last else ("idle", 0.0)))
        info["iterations"] = ran
        truncated = self._episode_over()
        if truncated:
            info["serving"] = self._serving_summary()
        if self.render_mode == "human":
            self.render()
        return self._obs(), reward, False, truncated, info

    def _run_to_epoch(self, cap: int, budget: int, chosen: bool) -> tuple[int, Iteration | None]:
        """Run iterations from this boundary until a decision epoch or the episode's end:
        the first one whatever it is when ``chosen`` (the step's action chose it here),
        then every one that all actions would run alike. Returns how many ran and the
        last. The rate estimate is brought up to each boundary passed, as v1's steps do."""
        ran = 0
        last: Iteration | None = None
        while not (self._now >= self.horizon_s or self._summary_done()):
            plan = None
            if ran or not chosen:
                plan = self._forced_plan(cap, budget)
                if plan is None:
                    break  # the actions differ here: a decision epoch
                if ran:
                    self._update_rate()  # v1 ends a step at this boundary
            if ran >= MAX_ITERATIONS_PER_STEP:
                raise RuntimeError(
                    f"LLMBatching-v2: {ran} iterations in one step without a decision epoch "
                    "or the episode's end (bound MAX_ITERATIONS_PER_STEP)"
                )
            if (
                plan is not None
                and self._decode_runs
                and not plan.chunks
                and not plan.victims
                and not self._server.prefilling
            ):
                k, it = self._run_decodes()
                if k:
                    ran += k
                    last = it
                    self._idle_while_empty()  # the last requests may have completed
                    continue
            self._last_preempted = 0
            last = self._run_iteration(cap, budget, plan)
            ran += 1
            self._idle_while_empty()
        return ran, last

    def _run_decodes(self) -> tuple[int, Iteration | None]:
        """Run the coming decode-only iterations in one loop: those before the next
        arrival, while no decode needs a KV block that is not free, and until the episode
        ends (or, when requests wait, the first completion). Returns how many ran and the
        last.

        Called at a boundary where no prefill is in progress and every action runs the
        same decode (nothing waits, or no action admits anything), with the profile
        executor. Each iteration is the
        chunked scheduler's decode to the bit: the same time, energy, latency and KV-use
        integrals, summed in the same order, the same completions (``_finish``), the
        rate estimate brought up to every boundary; what no boundary reads in between
        (each request's tokens and blocks, the recent windows, the counters) is brought
        up to date once, at the end. The requests' completions are scheduled from their
        remaining tokens, and their block growth from their block phase
        (:class:`batch_env.llm.LLMServerState`), so an iteration costs no pass over the
        running requests. ``tests/test_llm_v2.py`` holds the result identical to v1's.
        """
        srv = self._server
        R = srv.running
        bs, total = srv.block_size, srv.kv_total
        K0 = K = srv.decode_steps
        used = srv.kv_used
        counts = [len(bucket) for bucket in srv.block_phase]
        b = len(R)
        if not b or counts[(1 - K) % bs] > total - used:
            return 0, None  # a decode must preempt: the scheduler's own path
        buf, i = self._buf, self._i
        t_next = buf[i] if i < len(buf) or self._more() else math.inf
        prof = self._llm_profile
        base, per_ctx, pw = prof.decode_step(b)
        ctx = srv.decode_context
        if self._now + (base + per_ctx * ctx) >= t_next:
            return 0, None  # the first iteration admits an arrival (before any setup)
        # requests wait, but no action admits any (the plan was forced, without chunks);
        # without a completion none will (the cap's room and the budget left stay, the
        # free blocks only shrink), so after a completion the queue's head is tried
        blocked = bool(srv.waiting)
        P, out = srv.prompt, srv.output
        finishing = _completions(R, out, srv.generated)
        now, L, E, kv_int = self._now, self._L, self._E, self._kv_integral
        rate, (rate_t, rate_n) = self._rate, self._rate_base
        tau, horizon = self._rate_tau, self.horizon_s
        recent: deque[tuple[float, int]] = deque(maxlen=self._recent_n)
        done: dict[int, int] = {}  # finished request -> its iteration
        j = tokens = 0
        n_sys = self._n_sys
        exp = math.exp
        finished_now: list[int] | None = None
        while True:
            if j:  # the boundary before iteration j: what v2's loop checks there
                if now >= horizon or not b:
                    break
                if finished_now and (
                    self._summary_done()
                    or (blocked and self._head_fits(b, used + counts[(1 - K) % bs]))
                ):
                    break  # the episode's end, or the freed room and blocks admit the head
            need = counts[(1 - K) % bs]
            if need > total - used:
                break  # preemption: the scheduler's own path
            d = base + per_ctx * ctx
            energy = d * pw
            t = now + d
            if t >= t_next:
                break  # this iteration admits an arrival: the usual path
            if j:  # the rate estimate at that boundary (_update_rate; no arrival came)
                rate = rate * exp(-(now - rate_t) / tau) + 0.0
                rate_t = now
            # the iteration: its blocks, then the clock (host.advance), then the tokens
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
            finished_now = finishing.get(j)
            if finished_now:
                for e in finished_now:
                    g = out[e]
                    ctx -= P[e] + g
                    r = (P[e] + g - K) % bs
                    counts[r] -= 1
                    used -= srv.kv_blocks[e] + _grown(K0, r, j + 1, bs)
                    done[e] = j
                    self._finish(e, t)
                b -= len(finished_now)
                n_sys -= len(finished_now)  # as _finish did to self._n_sys
                if b:
                    base, per_ctx, pw = prof.decode_step(b)
            j += 1
        if not j:
            return 0, None
        self._now, self._L, self._E, self._kv_integral = now, L, E, kv_int
        self._rate, self._rate_base = rate, (rate_t, rate_n)
        srv.kv_used, srv.decode_context, srv.decode_steps = used, ctx, K
        srv.tokens_out += tokens
        self._catch_up(done, j, K0, tokens, recent)
        return j, Iteration(recent[-1][0], "decode", False, recent[-1][1], 0, 0, False)

    def _head_fits(self, decodes: int, used: int) -> bool:
        """Whether the largest setting would schedule a chunk of the first waiting request
        of some admission order, with ``decodes`` requests running, all decoding, and
        ``used`` KV blocks in use once their blocks for the next token are given (the
        chunked scheduler's scan, with no prefill in progress, stops at that first
        request). If it would not, no setting would (monotone)."""
        srv = self._server
        cfg = cast(LLMConfig, self.config)  # ServingCore types it as the batch config
        if self._grid[-1] - decodes <= 0:
            return False  # no room under the largest cap
        left = self._budgets[-1] - (decodes if cfg.decode_first else 0)
        free = srv.kv_total - used - srv.kv_watermark
        if left <= 0 or free <= 0:
            return False
        if cfg.split_prompts:
            return True  # a chunk of at least one token fits
        for order in self._orders:  # the first waiting request each order offers
            h = next(iter(candidates(srv, 1, order)))
            p = srv.prompt[h] + srv.generated[h]
            if p <= left and -(-p // srv.block_size) <= free:
                return True
        return False

    def _catch_up(
        self, done: dict[int, int], j: int, k0: int, tokens: int, recent: deque[tuple[float, int]]
    ) -> None:
        """After :meth:`_run_decodes`' ``j`` iterations from decode step ``k0``: each
        request's tokens and blocks (``done``: those that completed), the running list,
        the counters and the recent windows, which no boundary read in between."""
        srv = self._server
        P, G, out, blk, phase, bs = (
            srv.prompt,
            srv.generated,
            srv.output,
            srv.kv_blocks,
            srv.block_phase,
            srv.block_size,
        )
        keep = []
        for e in srv.running:
            r = (P[e] + G[e] - k0) % bs
            if e in done:
                G[e] = out[e]
                blk[e] = 0
                phase[r].remove(e)
            else:
                G[e] += j
                blk[e] += _grown(k0, r, j, bs)
                keep.append(e)
        srv.running = keep
        self._n_iter += j
        self._n_batches += j
        self._sum_b += tokens
        self._recent_many(recent)
        self._last_kind = 0.0
        self._last_preempted = self._last_chunk = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: seed the streams, advance to the first arrival, then run the
        iterations every action would run alike up to the first decision epoch (their
        cost is the first step's reward; ``info["iterations"]`` counts them).

        :param seed: episode seed; ``None`` draws one from the env's ``np_random``.
        :param options: as :meth:`LLMBatchingEnv.reset`.
        """
        # forced decodes run in one loop (_run_decodes) with the chunked scheduler on the
        # profile executor, outside the frame modes (whose timeline records each iteration)
        self._decode_runs = (
            isinstance(self._scheduler, ChunkedScheduler)
            and isinstance(self.executor, LLMProfileExecutor)
            and self._iterations is None
        )
        self._llm_profile = cast(LLMProfile, self.profile)
        self._start_episode(seed, options)
        ran, last = self._run_to_epoch(self._cap_now, self._budget_now, chosen=False)
        if ran:  # the observation and info at the epoch, as v1's at that boundary
            self._update_rate()
            self._misses()  # the SLA books' deadlines at this boundary
        if self.render_mode == "human":
            self.render()
        comps = {"latency": 0.0, "energy": 0.0, "sla": 0.0, "drop": 0.0}
        info = self._info(0.0, comps, *((last.kind, last.duration_s) if last else ("idle", 0.0)))
        info["iterations"] = ran
        return self._obs(), info


def _has_tokens(workload: Any) -> bool:
    """Whether a workload is a trace whose data has prompt and output token columns."""
    if getattr(workload, "kind", None) != "trace":
        return False
    data = cast("Trace", workload).data()
    return data.prompt_tokens is not None and data.output_tokens is not None


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
    ``(1 - k0 - j) % bs == r`` (:class:`batch_env.llm.LLMServerState`: block_phase)."""
    j0 = (1 - k0 - r) % bs
    return 0 if j0 >= m else (m - 1 - j0) // bs + 1


class _EnvHost:
    """What the scheduler reports to (:class:`batch_env.llm.scheduler.Host`): the env's
    clock, first tokens, the clock moving to an iteration's end, completions."""

    __slots__ = ("advance", "env", "finish", "first_token")

    def __init__(self, env: LLMBatchingEnv) -> None:
        self.env = env
        self.first_token = env._first_token
        self.advance = env._advance_iteration
        self.finish = env._finish

    def now_s(self) -> float:
        """The env's simulated time."""
        return self.env._now
