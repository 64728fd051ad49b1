"""``batch_env/LLMBatching-v0``, ``-v1`` and ``-v2``: iteration-level (continuous) batching
of an LLM with a paged KV cache, as MDPs.

This module is the MDP: spaces, decision epochs, reward, observation, info, reset, step
and render. The server it drives (:class:`batch_env.llm.LLMServer`: the requests, queues,
KV cache, SLA books and the iteration scheduler chosen by name) lives in
:mod:`batch_env.llm`; the episode summary is :func:`batch_env.metrics.llm_episode_summary`
and the frame :func:`batch_env.render.llm_frame`. The three ids differ by their
configuration's defaults (:class:`batch_env.config.LLMConfig`, ``LLMConfigV1``,
``LLMConfigV2``) and their decision epochs (every iteration boundary; v2: where two
actions differ). Their constructors share one signature: the env's own arguments and
their configuration's fields, each passed by its name to the configuration."""

from __future__ import annotations

import inspect
import types
from dataclasses import MISSING, fields
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..config import LLMConfig, LLMConfigV1, LLMConfigV2
from ..core import ServingEnv
from ..executor import make_llm_executor
from ..llm import Iteration, LLMServer
from ..llm.actions import ActionCodec, LLMAction
from ..llm.server import llm_workload, profile_for
from ..profiles.llm_profile import LLMProfile
from ..render import ServerView, Timeline, llm_frame
from ..workload import Workload
from .features import ObsFeature, features_box
from .llm_observation import OBS_FEATURES, observation_features, observe, step_info

__all__ = ["OBS_FEATURES", "LLMBatchingEnv", "LLMBatchingV1Env", "LLMBatchingV2Env"]

_NO_COSTS = {"latency": 0.0, "energy": 0.0, "sla": 0.0, "drop": 0.0}


class LLMBatchingEnv(ServingEnv, gym.Env[np.ndarray, int]):
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

    The server is ``env.server``, a :class:`batch_env.llm.LLMServer` (usable without an
    env); the env is the MDP over it.

    ## Action Space

    ``Discrete(len(grid))``: action ``i`` sets the cap on running requests for the next
    iteration to ``grid[i]`` (default grid ``1..max_num_seqs``). With the chunked
    scheduler and a ``budget_grid``, ``Discrete(len(grid) x len(budget_grid))``: action
    ``a`` sets the cap ``grid[a % len(grid)]`` and the iteration's token budget
    ``budget_grid[a // len(grid)]``. A cap below the number
    running stops admission; it never evicts. Every action is valid at every epoch
    (``action_masks()``), but v2's ``longest-prefix`` actions where they would admit as
    their FCFS twins (``batch_env.llm.actions``: Masks). An action outside the space
    raises ``ValueError``.

    ## Observation Space

    ``Box(float32)`` with finite bounds: thirteen features, each a raw quantity over a
    scale (the queue, the running requests, the KV cache, the oldest wait and the requests
    past their TTFT deadline, the waiting prompt tokens, the recent decode time and batch,
    the arrival rate, the cap, the running context, preemptions, the last iteration's
    kind); ``LLMBatching-v2`` appends features per request class, per admission order
    (``order_features=True``) and for the SM clock (``clock_grid``). The env's own
    ``env.unwrapped.observation_features`` describes each entry, in order (an
    :class:`~batch_env.envs.features.ObsFeature`: name, meaning, unit, scale, bounds); the
    space's bounds are built from it, and the env's page lists it in generated tables.

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

    ``kv_blocks_used``, ``kv_blocks_total``, ``running``, ``waiting`` and ``queue_len``
    (the same count, requests waiting to be admitted, not those running; ``queue_len`` is
    the name the whole-model envs give their queue, so code written for them reads the
    LLM envs too; the observation's ``waiting_over_max_num_seqs`` is it / ``max_num_seqs``), ``decode_latency_recent_ms`` and ``batch_size_recent`` (means over the
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
    ``num_scheduler_steps``, ``split_prompts``, ``budget_grid``).

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
    #: the configuration class whose defaults this id takes (``LLMBatching-v1``: chunked)
    _config_class: type[LLMConfig] = LLMConfig
    _title = "LLMBATCHING-V0"  # the frame's heading
    #: v2's own arguments (not configuration fields): ``oracle_info``, ``order_features``
    _flags: tuple[str, ...] = ()
    mean_load = None  # not defined for an LLM server

    def __init__(
        self,
        profile: str | dict | LLMProfile = "llama-2-7b-a100",
        workload: dict | Workload | None = None,
        *,
        render_mode: str | None = None,
        executor: str = "profile",
        model: str | None = None,
        torch_device: str = "auto",
        executor_options: dict | None = None,
        task: str | None = None,
        clock_mhz: float | None = None,
        oracle_info: bool = False,
        order_features: bool = False,
        **settings: Any,
    ) -> None:
        """The env (class docstring: Arguments); ``settings`` are its configuration's
        fields (:class:`batch_env.config.LLMConfig`, ``LLMConfigV1``, ``LLMConfigV2``),
        which each id's signature lists with their defaults."""
        for name, value in (("oracle_info", oracle_info), ("order_features", order_features)):
            if not isinstance(value, bool):
                raise ValueError(f"{name}={value!r} is invalid: expected true or false")
        self.task = task
        self._set_render_mode(render_mode)
        prof, config = profile_for(profile, clock_mhz, settings, self._config_class)
        if "srpt" in getattr(config, "orders", ()) and not oracle_info:
            raise ValueError(
                "orders: 'srpt' admits by the true remaining output lengths, which no "
                "realizable policy knows: make the env with oracle_info=True to offer it"
            )
        self.oracle_info, self.order_features = oracle_info, order_features
        # the iterations' timeline of the frame modes (None otherwise: nothing per iteration)
        frames = render_mode in ("rgb_array", "human")

        build = partial(
            make_llm_executor, executor, prof, config.max_num_seqs, config.max_model_len,
            model=model, torch_device=torch_device, options=executor_options,
        )  # fmt: skip
        self.server = LLMServer(
            config,
            prof,
            llm_workload(config, workload),
            build() if executor == "profile" else build,  # a real one: built last
            Timeline() if frames else None,
            type(self).__name__,
        )
        srv = self.server
        self.workload, self.config, self.executor = srv.workload, srv.config, srv.executor
        self.horizon_s, self.mean_rate_per_s = srv.horizon_s, srv.mean_rate_per_s
        self.idle_power_w, self.kv_blocks_total = srv.idle_power_w, srv.state.kv_total
        #: the action encoding (:mod:`batch_env.llm.actions`): :meth:`action_parts`, :meth:`action_of`
        self.actions = ActionCodec(srv.grid, srv.budgets, srv.orders, srv.sm_clock.grid)
        self.action_space = spaces.Discrete(self.actions.n)
        self._features = observation_features(srv, order_features)
        self.observation_space = features_box(self._features)
        self._mask = np.ones(self.actions.n, dtype=bool)
        self._record_executor(executor, model, torch_device, executor_options)

    @property
    def profile(self) -> LLMProfile:
        """The server's profile now, at the SM clock in force (never a stale copy)."""
        return self.server.profile

    @property
    def observation_features(self) -> tuple[ObsFeature, ...]:
        """Its features (:func:`~batch_env.envs.llm_observation.observation_features`)."""
        return self._features

    @property
    def engine(self) -> LLMServer:
        """The LLM server this env runs (what :meth:`fork` copies with it)."""
        return self.server

    def _setting(self, action: int) -> tuple[int, int, str]:
        """Put ``action``'s cap, budget, order (and SM clock) in force; the first three."""
        c, b, o = self.actions.indices(action)
        srv = self.server
        srv.set(srv.grid[c], srv.budgets[b], srv.orders[o], self.actions.clock_index(action))
        return srv.cap, srv.budget, srv.order

    def action_parts(self, action: int) -> LLMAction:
        """The parts of ``action``: ``LLMAction(cap, budget, order, clock)``
        (:mod:`batch_env.llm.actions`; ``clock`` is ``None`` without a clock grid).

        :raises ValueError: ``action`` is not an action of this env.
        """
        return self.actions.parts(action)

    def action_of(
        self,
        cap: int,
        budget: int | None = None,
        order: str | None = None,
        clock: float | None = None,
    ) -> int:
        """The action that sets this cap (one of :attr:`grid`), token budget (default the
        largest, as vLLM runs), admission order (default ``"fcfs"``) and v2's SM clock
        (default the highest, the GPU's); a part the env does not offer is a
        ``ValueError`` naming those it does."""
        return self.actions.action(cap, budget, order, clock)

    def action_masks(self) -> np.ndarray:
        """The valid actions now (a new array): all of them, but a ``longest-prefix`` action
        where it admits as its FCFS twin (:class:`batch_env.llm.actions.ActionCodec`)."""
        self._check_started("action_masks")
        return self._mask.copy()

    @property
    def grid(self) -> tuple[int, ...]:
        """The caps the actions select (``grid[i]`` for action ``i``)."""
        return self.server.grid

    @property
    def queue_len(self) -> int:
        """Requests waiting now (not counting those running)."""
        return len(self.server.state.waiting)

    def request_counts(self) -> dict[str, int]:
        """Where every request that has arrived is now
        (:meth:`batch_env.core.ServingLoop.request_counts`); refused before ``reset``."""
        self._check_started("request_counts")
        return self.server.request_counts()

    # -- observation / info (batch_env.envs.llm_observation) -----------------------------
    def _obs(self) -> np.ndarray:
        return observe(self.server, self.order_features)

    def _info(self, dt: float, comps: dict[str, float], last: Iteration | None) -> dict[str, Any]:
        energy = self.executor.energy_source
        self._mask = self.actions.mask(self.server.state)
        return step_info(self.server, dt, comps, last, self._mask, self.oracle_info, energy)

    # -- Gymnasium API ----------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: seed the server's streams and advance to the first arrival.

        :param seed: episode seed; ``None`` draws one from the env's ``np_random``.
        :param options: ``{"load": x}`` runs this episode at load ``x`` when the workload
            has a ``load_range`` (evaluators fixing their episodes' loads); nothing else.
        """
        self._start(seed, options)
        if self.render_mode == "human":
            self.render()
        return self._obs(), self._info(0.0, dict(_NO_COSTS), None)

    def _start(self, seed: int | None, options: dict[str, Any] | None) -> None:
        """The episode's start (``step`` refused until it is complete)."""
        super().reset(seed=seed)
        self.server.reset(self._episode_seed(seed), options)
        self._episode_started()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Set the cap (and budget, order) of ``action`` and run one iteration (then idle
        if the system empties).

        :param action: an action of the space (:meth:`action_parts`).
        """
        cap, budget, _order = self._setting(self._checked_action(action))
        return self._outcome(self.server.run_one(cap, budget), None)

    def _outcome(
        self, last: Iteration | None, ran: int | None
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """The step's return: reward and info since the last epoch (``ran``: iterations
        run, v2), the summary if the episode ended."""
        server = self.server
        reward, comps, dt, _ = server.step_accounting()
        info = self._info(dt, comps, last)
        if ran is not None:
            info["iterations"] = ran
        if server.over():
            summary = server.summary()
            self._end_episode(summary, server.now)
            info["serving"] = summary
            truncated = True
        else:
            truncated = False
        if self.render_mode == "human":
            self.render()
        return self._obs(), reward, False, truncated, info

    # -- rendering (ServingEnv.render dispatches on render_mode) -------------------------
    def _render_text(self) -> str:
        """Text view of the server (``render_mode="ansi"``)."""
        server = self.server
        srv = server.state
        return (
            f"t={server.now:10.3f} s  queue={len(srv.waiting):5d}  running={len(srv.running):4d} "
            f"(cap {server.cap})  KV {srv.kv_used}/{srv.kv_total} blocks  "
            f"preempted={srv.preemptions}  dropped={server.drops}"
        )

    def _make_view(self) -> ServerView:
        """Frame layout: the service panel shows the running requests and the KV cache."""
        timeline = self.server.timeline
        assert timeline is not None  # kept in the frame modes, the only ones with a view
        return ServerView(
            self._title,
            "RUNNING: CONTEXT/MAX_MODEL_LEN",
            "LAST ITERATIONS: BATCH/MAX_NUM_SEQS",
            "LAST ITERATIONS: TIME/TPOT SLA",
            timeline,
        )

    def _render_frame(self, view: ServerView) -> np.ndarray:
        """The frame (``render_mode="rgb_array"``): :func:`batch_env.render.llm_frame`."""
        return llm_frame(view, self.server, self.server.cap, self.server.drops)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each id's constructor: the one above, shown with its configuration's defaults."""
        super().__init_subclass__(**kwargs)
        # a copy of the function (the same code: no extra frame, so a warning raised in
        # construction points at the caller), with this id's signature
        base = LLMBatchingEnv.__init__
        init = types.FunctionType(
            base.__code__, base.__globals__, "__init__", base.__defaults__, base.__closure__
        )
        init.__kwdefaults__ = dict(base.__kwdefaults__ or {})
        init.__doc__, init.__qualname__ = base.__doc__, f"{cls.__qualname__}.__init__"
        init.__signature__ = _signature(cls)  # type: ignore[attr-defined]
        cls.__init__ = init  # type: ignore[method-assign]


#: the constructor's own arguments (the others are the configuration's fields)
_OWN = tuple(inspect.signature(LLMBatchingEnv.__init__).parameters.values())[1:-1]


def _signature(cls: type[LLMBatchingEnv]) -> inspect.Signature:
    """An id's constructor signature: ``profile`` and ``workload``, its configuration's
    fields with their defaults (``reward_weights``: ``None``, the configuration's weights),
    then its own other arguments (v2's flags only on v2), keyword-only after ``workload``."""
    own = [
        p for p in _OWN if p.name not in ("oracle_info", "order_features") or p.name in cls._flags
    ]
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = own[:2]
    for f in fields(cls._config_class):
        default = None if f.default is MISSING else f.default
        given = _GIVEN.get(f.name, f.type)
        params.append(inspect.Parameter(f.name, keyword, default=default, annotation=given))
    params += own[2:]
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return inspect.Signature([self_param, *params], return_annotation=None)


#: what a user gives for the configuration fields the configuration turns into objects
_GIVEN = {
    "reward_weights": "dict | None",
    "lengths": "dict | None",
    "grid": "list[int] | None",
    "budget_grid": "list[int] | None",
    "classes": "list[dict] | None",
    "orders": "list[str]",
    "clock_grid": "list[float] | None",
}


LLMBatchingEnv.__init__.__signature__ = _signature(LLMBatchingEnv)  # type: ignore[attr-defined]


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
    mixes classes in the workload: an arrival is of class ``c`` with probability
    ``share_c / sum of shares``, with its class's lengths, SLAs and miss ``weight``; or
    every class has its own ``"workload"`` and the env's arrivals are their
    superposition. With several classes the observation gains three features per class
    (waiting and running / max_num_seqs, its oldest wait / its TTFT SLA), ``info``
    ``waiting_by_class`` and ``running_by_class``, and ``info["serving"]["classes"]`` each
    class's figures against its own SLAs. One class (or none) is v1's behaviour.

    ## What each order would admit

    ``order_features=True`` (default ``False``) appends two features per admission order
    of ``orders``, after the class features: the first waiting request that order would
    admit, its tokens to prefill (prompt + generated) / ``max_num_batched_tokens`` and
    its age / its class's TTFT SLA (both clipped at 100; 0 when none waits). A server
    knows both (no output length is shown). The LLM tasks' agents leave it off; their
    observation ablation turns it on (``docs/results/agents-llm.md``).

    ## The GPU's clock

    ``clock_grid=[...]`` (MHz) makes the SM clock a part of the action (``clock`` in
    :meth:`action_parts`; by default the grid's highest, where each episode starts): the
    iterations after a decision run on ``profile.at_clock`` of its clock, and a boundary
    is also an epoch where prompt work appears or ends. The observation gains the clock /
    the highest, ``info["clock_mhz"]`` names it; with ``clock_latency_ms`` a change lands
    that much later (:mod:`batch_env.llm.clock`; ``docs/decisions.md``: "The SM clock").

    ## Version History

    * v2: decisions only where they matter (v1's scheduler, arguments and observation);
      request classes; admission orders; ``order_features``.
    * v2, later: ``clock_grid`` (the clock in the action), ``clock_latency_ms``; both off.
    """

    _config_class = LLMConfigV2
    _title = "LLMBATCHING-V2"
    _flags = ("oracle_info", "order_features")

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Set the cap, budget and order of ``action``, and run iterations until the next
        decision epoch or the episode's end.

        :param action: an action of the space (:meth:`action_parts`), as in v1.
        """
        cap, budget, _order = self._setting(self._checked_action(action))
        ran, last = self.server.run_to_epoch(cap, budget, chosen=True)
        return self._outcome(last, ran)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: seed the streams, advance to the first arrival, then run the
        iterations every action would run alike up to the first decision epoch (their
        cost is the first step's reward; ``info["iterations"]`` counts them).

        :param seed: episode seed; ``None`` draws one from the env's ``np_random``.
        :param options: as :meth:`LLMBatchingEnv.reset`.
        """
        self._start(seed, options)
        server = self.server
        ran, last = server.run_to_epoch(server.cap, server.budget, chosen=False)
        if ran:  # the observation and info at the epoch, as v1's at that boundary
            server.at_epoch()
        if self.render_mode == "human":
            self.render()
        info = self._info(0.0, dict(_NO_COSTS), last)
        info["iterations"] = ran
        return self._obs(), info
