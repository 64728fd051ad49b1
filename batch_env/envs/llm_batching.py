"""``batch_env/LLMBatching-v0``: iteration-level (continuous) batching of an LLM with a paged KV cache."""

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

from ..config import LLM_DEFAULT_WORKLOAD, LLMConfig, LLMConfigV1
from ..core import ServingCore
from ..executor import LLMExecutor, make_llm_executor
from ..metrics import llm_metrics, summarize
from ..profiles.llm_profile import LLMProfile
from ..profiles.llm_profile import load as load_llm_profile
from ..render import PURPLE, QUEUE_BARS, ServerView, Timeline, llm_panel, sla_colors
from ..workload import Workload, check_llm_tokens, make_workload

if TYPE_CHECKING:
    from ..workload import RequestLengths, Trace

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
    """

    metadata = {"render_modes": ["human", "rgb_array", "ansi"], "render_fps": 10}
    executor: LLMExecutor
    #: the configuration class whose defaults this id takes (``LLMBatching-v1``: chunked)
    _config_class: type[LLMConfig] = LLMConfig
    _title = "LLMBATCHING-V0"  # the frame's heading

    # Per-episode state, (re)bound by reset() (declared here for type checkers, which
    # otherwise meet some of it in methods above reset() before its type is known).
    _bp: list[int]  # the buffered arrivals' prompt tokens, output tokens and clipped flags
    _bo: list[int]
    _bclip: list[bool]
    _rej_times: list[float]  # arrival times of the rejected prompts
    _P: list[int]  # per entry: prompt tokens, output tokens, generated tokens, KV blocks held
    _O: list[int]
    _G: list[int]
    _blk: list[int]
    _fin: list[float | None]  # per entry: completion time (None while in the system)
    _first: list[float]  # first-token times, in arrival order
    _met: list[int]  # prefix counts of the first tokens within the TTFT SLA
    _W: deque[int]  # the waiting entries (FCFS)
    _wtok: int
    _R: list[int]  # the running entries
    _used: int  # KV blocks in use
    _ctx: int  # context tokens of the running requests
    _kvI: float  # integral of the KV blocks in use (block-seconds)
    _tokens: int
    _preempt: int
    _clipped: int
    _n_iter: int
    _n_prefill: int
    _tpot_missed: int
    _dptr: int
    _w0: tuple[int, int, float, int, int, int] | None  # the counters when the window opened
    _rd: deque[float]  # recent decode iterations' times and batch sizes
    _rb: deque[int]
    _rd_sum: float  # their sums, kept when they change (read by every step's obs and info)
    _rb_sum: int
    # chunked: the decoding entries by block phase, ``(P + G - K) % block_size`` with ``K``
    # the decode iterations so far; invariant while an entry decodes (each decode
    # iteration adds one token to every decoding entry), so the entries whose blocks are
    # full this iteration are one bucket (``_grow_decodes``)
    _phase: list[set[int]]
    _K: int
    _cap_now: int
    _budget_now: int
    _last_chunk: int
    _done: list[int]  # per entry (chunked): its current prefill's tokens computed, and to do
    _todo: list[int]
    _npart: int  # running entries whose prefill is in progress (chunked)
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
    ) -> None:
        config = self._config_class.from_arguments(locals())
        self.task = task
        self._set_render_mode(render_mode)
        # the iterations' timeline of the frame modes (None otherwise: nothing per step)
        self._iterations = Timeline() if render_mode in ("rgb_array", "human") else None
        self._iter_tokens = 0
        prof = load_llm_profile(profile)
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
        data = trace._data() if trace is not None else None
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
        self._check_admissible(data)

        # the KV cache
        bs = config.block_size
        self._bs = bs
        self._total = prof.kv_blocks_total(bs, config.gpu_memory_utilization)
        self._wm = int(config.watermark * self._total)
        need = -(-config.max_model_len // bs)
        if self._total - self._wm < need:
            raise ValueError(
                f"max_model_len={config.max_model_len} needs {need} KV blocks of {bs} tokens but "
                f"profile '{prof.name}' has {self._total} ({self._wm} kept free by the watermark) "
                "at this gpu_memory_utilization: lower max_model_len"
            )
        self.kv_blocks_total = self._total
        assert config.grid is not None  # LLMConfig.__post_init__ fills the default
        self._grid = config.grid
        self._N = config.max_num_seqs
        self._budget = budget
        self._tpot = config.tpot_sla_ms / 1000.0
        self._recent_n = config.recent_iterations
        self._check_llm_drop_weight()

        self._chunked = config.scheduler == "chunked"
        self._decode_first = config.decode_first
        self._split = config.split_prompts
        self._budgets = config.budget_grid if config.budget_grid is not None else (budget,)
        n = len(self._grid) * len(self._budgets)
        self.action_space = spaces.Discrete(n)
        high = np.array(
            [_CLIP, 1.0, 1.0, _CLIP, 1.0, _CLIP, _CLIP, 1.0, _CLIP, 1.0, 1.0, 1.0, 1.0],
            dtype=np.float32,
        )
        self.observation_space = spaces.Box(
            np.zeros(high.size, dtype=np.float32), high, dtype=np.float32
        )
        self._mask = np.ones(n, dtype=bool)

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
        self._seqs = self.executor.needs_sequences  # tell the executor which requests run
        self._executor_spec: dict[str, Any] = {"executor": executor}
        if executor != "profile":
            self._executor_spec.update(
                model=model,
                torch_device=torch_device,
                executor_options=dict(executor_options or {}),
                executor_metadata=self.executor.metadata(),
            )

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
            if self._lengths_from_trace:
                p = np.asarray(ch.prompt_tokens, np.int64)
                o = np.asarray(ch.output_tokens, np.int64)
            else:
                p, o = self._lengths.sample(self._sizes_rng, len(times))
            fit = p + 1 <= self._maxlen
            if not fit.all():
                self._rej_times.extend(times[~fit].tolist())
                times, p, o = times[fit], p[fit], o[fit]
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
            if len(times):
                return True
        return False

    def _absorb(self, t_end: float, j: int, power_w: float) -> None:
        """The core's admission, plus the new entries' lengths and the KV-use integral."""
        i = self._i
        n0 = len(self._arr)
        self._kvI += self._used * (t_end - self._now)
        super()._absorb(t_end, j, power_w)
        adm = len(self._arr) - n0
        if adm:
            self._P += self._bp[i : i + adm]
            self._O += self._bo[i : i + adm]
            self._clipped += sum(self._bclip[i : i + adm])
            self._G += [0] * adm
            self._blk += [0] * adm
            self._fin += [None] * adm
            if self._chunked:
                self._done += [0] * adm
                self._todo += [0] * adm
            self._W.extend(range(n0, n0 + adm))
            self._wtok += sum(self._bp[i : i + adm])

    def _in_service_count(self) -> int:
        """The running requests."""
        return len(self._R)

    def _rejected_count(self) -> int:
        """Prompts rejected by now (they never fit ``max_model_len``)."""
        return bisect_right(self._rej_times, self._now)

    def _on_mark(self) -> None:
        first = self._window is None
        super()._on_mark()
        if first:
            self._w0 = (
                self._tokens,
                self._preempt,
                self._kvI,
                self._n_iter,
                self._n_prefill,
                self._clipped,
            )

    # -- SLA bookkeeping (TTFT deadlines in arrival order, TPOT at completion) -----------
    def _misses(self) -> int:
        k = self._deadline_prefix(self._now)
        return k - self._met[min(k, len(self._first))] + self._tpot_missed

    def _misses_exact(self, t: float) -> int:
        k = bisect_right(self._arr, t - self._sla)
        while k < len(self._arr) and t - self._arr[k] > self._sla:
            k += 1
        while k > 0 and not t - self._arr[k - 1] > self._sla:
            k -= 1
        return k - self._met[min(k, len(self._first))] + self._tpot_missed

    def _summary_done(self) -> bool:
        if self._entry_hi is None:
            return False
        fin, d = self._fin, self._dptr
        n = len(fin)
        while d < n and fin[d] is not None:
            d += 1
        self._dptr = d
        return d >= self._entry_hi

    # -- the scheduler --------------------------------------------------------------------
    def _prefill_set(self, cap: int) -> tuple[int, int, float]:
        """How many waiting requests (from the head) the next prefill admits, their tokens
        and the sum of their squared prompt lengths (FCFS: stop at the first that fails)."""
        W, P, G, bs = self._W, self._P, self._G, self._bs
        room = cap - len(self._R)
        free = self._total - self._used - self._wm
        budget = self._budget
        k = tokens = 0
        sq = 0.0
        for e in W:
            if k >= room:
                break
            p = P[e] + G[e]
            if tokens + p > budget:
                break
            nb = -(-p // bs)
            if nb > free:
                break
            free -= nb
            tokens += p
            sq += p * p
            k += 1
        return k, tokens, sq

    def _finish(self, e: int, c: float) -> None:
        self._fin[e] = c
        self._n_sys -= 1
        self._n_done += 1
        self._used -= self._blk[e]
        self._blk[e] = 0
        first = self._first[e]
        a = self._arr[e]
        out = self._O[e]
        if first - a <= self._sla and out >= 2 and (c - first) / (out - 1) > self._tpot:
            self._tpot_missed += 1

    def _run_prefill(self, k: int, tokens: int, sq: float) -> float:
        W, P, G, R, blk, bs = self._W, self._P, self._G, self._R, self._blk, self._bs
        sel = [W.popleft() for _ in range(k)]
        d, energy = self.executor.prefill(
            tokens, sq, sel, [P[e] + G[e] for e in sel] if self._seqs else None
        )
        c = self._now + d
        arr, first, met, sla = self._arr, self._first, self._met, self._sla
        for e in sel:
            nb = -(-(P[e] + G[e]) // bs)
            blk[e] = nb
            self._used += nb
            if G[e] == 0:  # a first prefill: first tokens come in arrival order (FCFS)
                first.append(c)
                met.append(met[-1] + (1 if c - arr[e] <= sla else 0))
            self._wtok -= P[e] + G[e]
            G[e] += 1
            self._ctx += P[e] + G[e]
        self._ns = len(arr) - len(W)
        self._tokens += k
        self._advance(c, energy / d if d > 0.0 else 0.0)
        for e in sel:
            if G[e] >= self._O[e]:
                self._ctx -= P[e] + G[e]
                self._finish(e, c)
            else:
                R.append(e)
        if self._seqs:  # one-token requests finish in their prefill
            done = [e for e in sel if self._fin[e] is not None]
            if done:
                self.executor.release(done)
        self._n_prefill += 1
        self._last_kind = 1.0
        return d

    def _run_decode(self) -> float:
        R, P, G, blk, bs = self._R, self._P, self._G, self._blk, self._bs
        victims: list[int] = []
        i = 0
        while i < len(R):
            e = R[i]
            if P[e] + G[e] > blk[e] * bs:  # the token fed this step needs a new block
                while self._used >= self._total:
                    v = R.pop()
                    victims.append(v)
                    self._used -= blk[v]
                    blk[v] = 0
                    self._ctx -= P[v] + G[v]
                    if v == e:
                        break
                if victims and victims[-1] == e:
                    break
                blk[e] += 1
                self._used += 1
            i += 1
        if victims:
            if self._seqs:
                self.executor.release(victims)  # recompute: the KV cache is dropped
            self._W.extendleft(victims)  # the oldest victim ends up at the head
            self._wtok += sum(P[v] + G[v] for v in victims)
            self._preempt += len(victims)
            self._ns = len(self._arr) - len(self._W)
        self._last_preempted = len(victims)
        b = len(R)
        if b == 0:
            return 0.0
        d, energy = self.executor.decode(b, self._ctx, R)
        c = self._now + d
        self._advance(c, energy / d if d > 0.0 else 0.0)
        out = self._O
        keep = []
        for e in R:
            g = G[e] + 1
            G[e] = g
            if g >= out[e]:
                self._ctx -= P[e] + g - 1
                self._finish(e, c)
            else:
                keep.append(e)
        self._ctx += len(keep)
        if self._seqs and len(keep) < b:
            self.executor.release([e for e in R if self._fin[e] is not None])
        self._R = keep
        self._tokens += b
        self._n_batches += 1
        self._sum_b += b
        self._recent(d, b)
        self._last_kind = 0.0
        return d

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

    # -- the chunked scheduler (vLLM v1 / Sarathi-Serve) ---------------------------------
    def _preempt_newest(self, victims: list[int]) -> int:
        """Preempt the newest running entry (recompute): its blocks freed, back to the
        head of the queue later (the caller puts the victims there); returns it."""
        R, P, G, blk = self._R, self._P, self._G, self._blk
        v = R.pop()
        victims.append(v)
        self._used -= blk[v]
        blk[v] = 0
        if self._todo[v]:  # a prefill in progress: its computed tokens are lost
            self._npart -= 1
            self._wtok += self._done[v]
        else:
            self._phase[(P[v] + G[v] - self._K) % self._bs].discard(v)
            self._ctx -= P[v] + G[v]
            self._wtok += P[v] + G[v]
        self._done[v] = self._todo[v] = 0
        return v

    def _grow_decodes(self, victims: list[int]) -> list[int]:
        """The running entries that decode this iteration (prefill complete), each with a
        KV block for the token it feeds; as v0's decode, a missing block preempts the
        newest running entry (a prefill in progress or not), the entry itself last."""
        R, P, G, blk, bs = self._R, self._P, self._G, self._blk, self._bs
        # the decoding entries are the leading run of R (FCFS chunks complete in
        # admission order, admissions append, preemption pops the newest)
        i, n = 0, len(R) - self._npart
        # an entry's blocks hold exactly its P + G - 1 tokens, so the token it feeds needs
        # a block when P + G = 1 (mod block size): the phase bucket of 1 - K
        need = self._phase[(1 - self._K) % bs]
        if len(need) <= self._total - self._used:  # blocks for all: no preemption
            for e in need:
                blk[e] += 1
            self._used += len(need)
            return R[:n]
        while i < n:
            e = R[i]
            if P[e] + G[e] > blk[e] * bs:
                while self._used >= self._total:
                    if self._preempt_newest(victims) == e:
                        break
                n = min(n, len(R))
                if victims and victims[-1] == e:
                    break
                blk[e] += 1
                self._used += 1
            i += 1
        return R[: len(R) - self._npart]

    def _plan_chunks(self, cap: int, left: int, admit: bool) -> list[tuple[int, int, int]]:
        """``(entry, chunk tokens, tokens already computed)`` of this iteration's prompt
        chunks, FCFS: the prefills in progress (in admission order), then (``admit``) the
        queue's head while the cap allows, within ``left`` tokens and the KV blocks free
        above the watermark (blocks are allocated here, per chunk). A prompt that cannot
        progress stops the scan (FCFS); with ``split_prompts=False`` only whole prompts
        are scheduled."""
        if not self._npart and not (admit and self._W):  # nothing to prefill (most decodes)
            return []
        P, G, blk, bs, todo, done = self._P, self._G, self._blk, self._bs, self._todo, self._done
        free = self._total - self._used - self._wm
        out: list[tuple[int, int, int]] = []
        R = self._R
        cands = R[len(R) - self._npart :]  # prefills in progress: R's tail, in admission order
        room = cap - len(self._R)
        if admit and room > 0:
            cands += islice(self._W, room)  # waiting entries have nothing computed
        for e in cands:
            if left <= 0:
                break
            new = not todo[e]
            x = 0 if new else done[e]
            need = P[e] + G[e] if new else todo[e]
            c = min(need, left)
            if not self._split and c < need:
                break
            nb = -(-(x + c) // bs) - blk[e]
            if nb > free:
                if not self._split:
                    break
                c = min(c, (blk[e] + free) * bs - x)
                if c <= 0:
                    break
                nb = -(-(x + c) // bs) - blk[e]
            free -= nb
            blk[e] += nb
            self._used += nb
            left -= c
            out.append((e, c, x))
            if c < need:
                break  # the budget or the memory ends inside this prompt
        return out

    def _run_chunked(self, cap: int, budget: int) -> tuple[float, str]:
        """One iteration of the chunked scheduler: ``(duration, kind)``, kind ``"decode"``,
        ``"prefill"`` (chunks only) or ``"mixed"``."""
        victims: list[int] = []
        for _ in range(len(self._R) + 2):  # each retry preempts one entry: bounded
            if self._decode_first:
                dec = self._grow_decodes(victims)
                chunks = self._plan_chunks(cap, budget - len(dec), admit=not victims)
            else:
                chunks = self._plan_chunks(cap, budget, admit=True)
                dec = [] if chunks else self._grow_decodes(victims)
            if dec or chunks or victims:
                break
            if not self._R:  # cannot happen: an empty cache fits the head's first chunk
                raise RuntimeError("LLMBatching: requests wait, none runs, none admissible")
            # prefills in progress hold the blocks the next chunk needs: free the newest
            self._preempt_newest(victims)
        if victims:
            if self._seqs:
                self.executor.release(victims)  # recompute: the KV cache is dropped
            self._W.extendleft(victims)  # the oldest victim ends up at the head
            self._preempt += len(victims)
            self._ns = len(self._arr) - len(self._W)
        self._last_preempted = len(victims)
        if not dec and not chunks:  # every decoder was preempted: an empty iteration (as v0)
            return 0.0, "decode"
        return self._run_mixed(chunks, dec), (
            "mixed" if chunks and dec else "prefill" if chunks else "decode"
        )

    def _run_mixed(self, chunks: list[tuple[int, int, int]], dec: list[int]) -> float:
        """Run one iteration of prompt ``chunks`` and decodes ``dec``; the bookkeeping."""
        W, P, G, R, out = self._W, self._P, self._G, self._R, self._O
        todo, done = self._todo, self._done
        n = 0
        att = 0.0
        for _e, c, x in chunks:
            n += c
            att += c * c + 2 * c * x
        b = len(dec)
        if self._seqs:
            d, energy = self.executor.mixed(
                n, att, b, self._ctx, [(e, x, c) for e, c, x in chunks], dec
            )
        else:
            d, energy = self.executor.mixed(n, att, b, self._ctx)
        t = self._now + d
        arr, first, met, sla = self._arr, self._first, self._met, self._sla
        ready: list[int] = []  # prefills completed by this iteration
        for e, c, x in chunks:
            if x == 0 and not todo[e]:  # admitted now: it joins the running entries
                W.popleft()  # FCFS: the admitted entries are the queue's head, in order
                R.append(e)
                todo[e] = P[e] + G[e]
                self._npart += 1
            done[e] = x + c
            todo[e] -= c
            self._wtok -= c
            if not todo[e]:
                ready.append(e)
        for e in ready:
            self._npart -= 1
            done[e] = 0
            if G[e] == 0:  # a first prefill: first tokens come in arrival order (FCFS)
                first.append(t)
                met.append(met[-1] + (1 if t - arr[e] <= sla else 0))
            G[e] += 1
        self._ns = len(arr) - len(W)
        self._tokens += len(ready) + b
        self._last_chunk = n
        self._advance(t, energy / d if d > 0.0 else 0.0)
        finished = False
        ctx = self._ctx + len(dec)  # one token more for each decode, until it finishes
        phase, bs = self._phase, self._bs
        if dec:
            self._K += 1  # every decoding entry gains a token: the phases stay
        K = self._K
        for e in dec:
            g = G[e] + 1
            G[e] = g
            if g >= out[e]:
                ctx -= P[e] + g
                phase[(P[e] + g - K) % bs].remove(e)
                self._finish(e, t)
                finished = True
        self._ctx = ctx
        for e in ready:
            if G[e] >= out[e]:  # a one-token request ends with its prefill
                self._finish(e, t)
                finished = True
            else:
                self._ctx += P[e] + G[e]
                phase[(P[e] + G[e] - K) % bs].add(e)  # it decodes from the next iteration
        if finished:
            if self._seqs:
                self.executor.release([e for e in R if self._fin[e] is not None])
            self._R = [e for e in R if self._fin[e] is None]
        self._count_iteration(bool(chunks), b, d)
        return d

    def _count_iteration(self, prefill: bool, b: int, d: float) -> None:
        """The iteration counters: prefill iterations, decode batches, the recent decode
        times and sizes, the last kind."""
        if prefill:
            self._n_prefill += 1
        if b:
            self._n_batches += 1
            self._sum_b += b
            self._recent(d, b)
        self._last_kind = 1.0 if prefill else 0.0

    # -- observation / info -------------------------------------------------------------
    def _obs(self) -> np.ndarray:
        N = self._N
        W = self._W
        w = len(W)
        R = self._R
        sla = self._sla
        if w:
            oldest = min((self._now - self._arr[W[0]]) / sla, _CLIP)
            # the waiting requests without a first token are exactly the entries from
            # len(_first) on (first tokens come in arrival order), and the entries whose
            # deadline has passed are the prefix [0, _kd) (the step's _misses() set _kd)
            past = max(self._kd - len(self._first), 0) / w
            ptoks: float = self._wtok
        else:
            oldest = past = ptoks = 0.0
        rd = self._rd
        return np.array(
            [
                min(w / N, _CLIP),
                len(R) / N,
                self._used / self._total,
                oldest,
                past,
                min(ptoks / self._budget, _CLIP),
                min(self._rd_sum / len(rd) / self._tpot, _CLIP) if rd else 0.0,
                self._rb_sum / len(self._rb) / N if rd else 0.0,
                min(self._rate / 10.0, _CLIP),
                self._cap_now / N,
                self._ctx / (len(R) - self._npart) / self._maxlen if len(R) > self._npart else 0.0,
                min(self._last_preempted / 10.0, 1.0),
                self._last_kind,
            ],
            dtype=np.float32,
        )

    def _info(self, dt: float, comps: dict[str, float], kind: str, it: float) -> dict[str, Any]:
        rd = self._rd
        return {
            "kv_blocks_used": self._used,
            "kv_blocks_total": self._total,
            "running": len(self._R),
            "waiting": len(self._W),
            "queue_len": len(self._W),
            "decode_latency_recent_ms": 1000.0 * self._rd_sum / len(rd) if rd else 0.0,
            "batch_size_recent": self._rb_sum / len(self._rb) if rd else 0.0,
            "cap": self._cap_now,
            "budget": self._budget_now,
            "chunk_tokens": self._last_chunk,
            "prefilling": self._npart,
            "decode_context": self._ctx,
            # tokens computed of the oldest prefill in progress (the running list's tail)
            "prefill_head_done": self._done[self._R[len(self._R) - self._npart]]
            if self._npart
            else 0,
            "iteration": kind,
            "iteration_time_s": it,
            "preempted": self._last_preempted,
            "preemptions_total": self._preempt,
            "rejected_total": bisect_right(self._rej_times, self._now) if self._rej_times else 0,
            "clipped_total": self._clipped,
            "dropped_total": self._drops,
            "now_s": self._now,
            "dt_s": dt,
            "reward_components": comps,
            "action_mask": self._mask.copy(),
            "energy_source": self.executor.energy_source,
        }

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
        super().reset(seed=seed)
        self._bp = []
        self._bo = []
        self._bclip = []
        self._rej_times = []
        self._P = []
        self._O = []
        self._G = []
        self._blk = []
        self._fin = []
        self._first = []
        self._met = [0]
        self._W = deque()
        self._wtok = 0  # prompt + generated tokens of the waiting requests
        self._R = []
        self._used = 0
        self._ctx = 0
        self._kvI = 0.0
        self._tokens = 0
        self._preempt = 0
        self._clipped = 0
        self._n_iter = 0
        self._n_prefill = 0
        self._tpot_missed = 0
        self._dptr = 0
        self._w0 = None
        self._rd = deque(maxlen=self._recent_n)
        self._rb = deque(maxlen=self._recent_n)
        self._rd_sum = 0.0
        self._rb_sum = 0
        self._cap_now = self._grid[-1]
        self._budget_now = self._budgets[-1]
        self._last_preempted = 0
        self._last_chunk = 0
        self._last_kind = 0.0
        self._done = []
        self._todo = []
        self._npart = 0
        self._phase = [set() for _ in range(self._bs)]
        self._K = 0
        self._reset_core(seed, options)
        self._deadline_prefix(self._now)
        comps = {"latency": 0.0, "energy": 0.0, "sla": 0.0, "drop": 0.0}
        if self._iterations is not None:
            self._iterations.clear()
            self._iter_tokens = 0
            if self.render_mode == "human":
                self.render()
        return self._obs(), self._info(0.0, comps, "idle", 0.0)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Set the cap to ``grid[action]`` and run one iteration (then idle if the system empties).

        :param action: index into the grid of caps.
        """
        if self._needs_reset is not None:
            self._refuse("step")
        if type(action) is not int or action < 0 or action >= self.action_space.n:
            action = self._coerce_action(action)
        ng = len(self._grid)
        cap = self._grid[action % ng]
        self._cap_now = cap
        self._budget_now = self._budgets[action // ng]
        self._last_preempted = 0
        self._last_chunk = 0
        kind, it = "idle", 0.0
        if self._n_sys:
            if self._chunked:
                it, kind = self._run_chunked(cap, self._budget_now)
                k = int(kind != "decode")
            else:
                k, tokens, sq = self._prefill_set(cap) if self._W else (0, 0, 0.0)
                if k:
                    it, kind = self._run_prefill(k, tokens, sq), "prefill"
                elif self._R:
                    it, kind = self._run_decode(), "decode"
                else:  # cannot happen: config validation makes the head admissible when idle
                    raise RuntimeError("LLMBatching-v0: requests wait, none runs, none admissible")
            self._n_iter += 1
            if self._iterations is not None:  # frame modes only: (batch, time / TPOT SLA, prefill)
                self._iterations.push(
                    (self._tokens - self._iter_tokens) / self._N, it / self._tpot, 1 if k else 0
                )
                self._iter_tokens = self._tokens
        while self._n_sys == 0:  # empty system: idle to the next arrival
            if not self._idle_until_arrival():
                break
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
        fin = np.array([_NAN if f is None else f for f in self._fin[lo:hi]], dtype=np.float64)
        arr = np.asarray(self._arr[lo:hi], dtype=np.float64)
        nf = len(self._first)
        first = np.full(hi - lo, _NAN)
        if nf > lo:
            first[: min(nf, hi) - lo] = self._first[lo : min(nf, hi)]
        out = np.asarray(self._O[lo:hi], dtype=np.int64)
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
        w0 = (
            self._w0
            if self._w0 is not None
            else (
                self._tokens,
                self._preempt,
                self._kvI,
                self._n_iter,
                self._n_prefill,
                self._clipped,
            )
        )
        t0 = win.time_s if win is not None else self._now
        base.update(
            llm_metrics(
                arrivals=arr,
                first_token=first,
                completion=fin,
                output_lengths=out,
                ttft_sla_s=self._sla,
                tpot_sla_s=self._tpot,
                dropped=drops_summary,
                elapsed_s=base["elapsed_s"],
                output_tokens=self._tokens - w0[0],
                preemptions=self._preempt - w0[1],
                kv_utilization_mean=(
                    (self._kvI - w0[2]) / self._total / (self._now - t0) if self._now > t0 else _NAN
                ),
                iterations=self._n_iter - w0[3],
                prefill_iterations=self._n_prefill - w0[4],
                rejected=bisect_right(self._rej_times, self._now)
                - bisect_right(self._rej_times, t0),
                clipped=self._clipped - w0[5],
            )
        )
        self._warn_summary(base)
        return base

    # -- rendering (ServingCore.render dispatches on render_mode) ------------------------
    def _render_text(self) -> str:
        """Text view of the server (``render_mode="ansi"``)."""
        return (
            f"t={self._now:10.3f} s  queue={len(self._W):5d}  running={len(self._R):4d} "
            f"(cap {self._cap_now})  KV {self._used}/{self._total} blocks  "
            f"preempted={self._preempt}  dropped={self._drops}"
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
        arr, now, P, G = self._arr, self._now, self._P, self._G
        waiting = list(islice(self._W, QUEUE_BARS))
        waits = (now - np.array([arr[e] for e in waiting], dtype=np.float64)) / self._sla
        colors = sla_colors(waits)
        colors[np.array([G[e] > 0 for e in waiting], dtype=bool)] = PURPLE  # preempted
        R = self._R
        ctx = np.array([P[e] + G[e] for e in R[:QUEUE_BARS]], dtype=np.float64) / self._maxlen
        header = (
            f"T {now:.2f} S  WAIT {len(self._W)}  RUN {len(R)}  PREEMPT {self._preempt}  "
            f"DROP {self._drops}"
        )
        panel = llm_panel(ctx, len(R), self._N, self._cap_now, self._used, self._total, self._wm)
        return view.frame(
            header, waits, len(self._W), self._cap, panel, view.timeline, queue_colors=colors
        )


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
    ) -> None:
        args = dict(locals())
        args.pop("self")
        args.pop("__class__", None)
        super().__init__(**args)
