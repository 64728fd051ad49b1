"""Batch-size (``max_num_seqs``) policies for ``LLMBatching-v0``; token budgets for the
chunked scheduler (``static-budget``, ``sarathi``); admission orders for
``LLMBatching-v2`` (``edf``, ``shortest-prompt``, ``class-priority`` and the oracle
``oracle-srpt``, each with sarathi's budget rule: :class:`OrderPolicy`); with prefix
caching, vLLM's (``vllm-apc``: FCFS) and SGLang's (``sglang-lpm``: longest prefix match).

From Pang, Li and Wang, "Optimizing LLM Inference Throughput via Memory-aware and
SLA-constrained Dynamic Batching" (arXiv 2503.05248), as described by the authors' vLLM
v0 patch and independent re-implementations (the issue text of this project records
what is known of the two algorithms):

* ``static-cap``: a fixed ``max_num_seqs`` (vLLM's default 256, or smaller), chosen
  offline.
* ``memory-aware`` (Algorithm 1): when requests both wait and run, the cap is the number
  of requests the KV cache could hold at the running requests' mean footprint,
  ``b = floor(eta * kv_blocks_total / (kv_blocks_used / running))``, at least the number
  running, clamped to ``[b_min, b_max]``; otherwise the previous cap is kept. ``eta``
  0.95 leaves headroom for the running requests' growth.
* ``sla-feedback`` (Algorithm 2): a search interval ``[b_low, b_high]`` over caps moved by
  the recent mean decode-iteration latency ``d_avg`` (``info["decode_latency_recent_ms"]``,
  the time per output token of the running requests) against the target ``d_sla_ms`` with
  tolerance ``eps_ms``, around the recent mean batch size ``b_avg``
  (``info["batch_size_recent"]``): too slow shrinks the interval's top to ``max(b_avg,
  b_low + alpha)`` and lowers its bottom by ``delta``; too fast raises its bottom to
  ``min(b_avg, b_high - alpha)`` and its top by ``delta``; within tolerance it recentres on
  ``b_avg +- alpha / 2``. The cap is the interval's midpoint, at least the number running.
* ``pang2025``: both, the cap being the smaller of the two.

Free choices (not fixed by the sources), documented here and in docs/decisions.md:

* Every policy is updated at every decision epoch (every iteration boundary), as the
  patch does once per scheduler step.
* ``memory-aware`` starts at ``b_max`` (vLLM's configured ``max_num_seqs``); ``sla-feedback``
  starts with the interval ``[b_min, b_max]``. Before the first decode iteration
  ``d_avg`` is 0 (``info`` says so), i.e. "too fast": the interval only widens upwards.
* After each update the interval is kept inside ``[b_min, b_max]`` and ordered
  (``b_low <= b_high``), and the final cap is clamped to ``[b_min, b_max]``.
* On an env with a coarser action grid, the action is the largest grid value <= the cap
  (the smallest grid value if the cap is below it).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any

import gymnasium as gym

from batch_env.checks import check_number
from batch_env.llm.actions import ActionCodec

from .common import env_config


def _llm_settings(env: gym.Env | None, policy: str) -> tuple[tuple[int, ...], int, float]:
    """The env's action grid, max_num_seqs and TPOT SLA (ms), refusing other envs (the
    chunked scheduler's budget grid: :func:`_budget_grid`)."""
    if env is None:
        raise ValueError(
            f"policy {policy!r} needs env= (an LLMBatching-v0 env) for its grid of caps"
        )
    cfg = env_config(env)
    if not hasattr(cfg, "max_num_seqs"):
        raise ValueError(
            f"policy {policy!r} acts in batch_env/LLMBatching-v0 (it sets max_num_seqs); "
            f"got an env whose configuration is {type(cfg).__name__}"
        )
    return tuple(cfg.grid), int(cfg.max_num_seqs), float(cfg.tpot_sla_ms)


def _orders(env: gym.Env | None) -> tuple[str, ...]:
    """The admission orders an action may choose (``LLMBatching-v2``'s ``orders``; else
    FCFS alone)."""
    return tuple(getattr(env_config(env), "orders", ("fcfs",)))


def _clock_grid(env: gym.Env | None) -> tuple[float, ...]:
    """The SM clocks an action may choose (``LLMBatching-v2``'s ``clock_grid``; else none:
    the env's one clock)."""
    grid = getattr(env_config(env), "clock_grid", None)
    return tuple(grid) if grid is not None else ()


def _budget_grid(env: gym.Env | None) -> tuple[int, ...]:
    """The token budgets an action may choose: the chunked scheduler's ``budget_grid``,
    else the one budget ``max_num_batched_tokens``."""
    cfg = env_config(env)
    grid = getattr(cfg, "budget_grid", None)
    return tuple(grid) if grid is not None else (int(cfg.max_num_batched_tokens),)


class _CapPolicy:
    """Shared by the LLM policies: the grid, ``[b_min, b_max]`` and cap -> action. On an
    env whose actions also pick a token budget (``budget_grid``), a cap policy keeps the
    largest budget (``max_num_batched_tokens``), as vLLM runs with its configured one; on
    one whose actions also pick the admission order (``LLMBatching-v2``'s ``orders``), it
    admits first come first served, vLLM's default (the env's first order if it offers
    no FCFS); on one whose actions also pick the SM clock (``clock_grid``), it runs at the
    grid's highest, the GPU's default."""

    name = "cap"

    def __init__(self, env: gym.Env | None, b_min: int, b_max: int | None) -> None:
        self.grid, n, self.tpot_sla_ms = _llm_settings(env, self.name)
        self.b_max = int(n if b_max is None else b_max)
        check_number("b_max", self.b_max, low=1, high=n, integer=True)
        check_number("b_min", b_min, low=1, high=self.b_max, integer=True)
        self.b_min = int(b_min)
        self.budgets = _budget_grid(env)
        self._budget_index = len(self.budgets) - 1
        self.orders = _orders(env)
        self._order_index = self.orders.index("fcfs") if "fcfs" in self.orders else 0
        self._codec = ActionCodec(self.grid, self.budgets, self.orders, _clock_grid(env))

    def action_for(
        self, cap: int, budget_index: int | None = None, order_index: int | None = None
    ) -> int:
        """The action of the largest grid cap <= ``cap`` (the smallest if ``cap`` is below
        the grid), the budget ``budgets[budget_index]`` (default the largest) and the order
        ``orders[order_index]`` (default FCFS)."""
        i = self._budget_index if budget_index is None else budget_index
        o = self._order_index if order_index is None else order_index
        cap_index = max(bisect_right(self.grid, cap) - 1, 0)
        return self._codec.encode(cap_index, i, o)

    def sarathi_budget_index(self, info: dict[str, Any]) -> int:
        """Sarathi-Serve's rule (:class:`SarathiBudgetPolicy`): the index of the largest
        budget whose mixed iteration, as the profile times it, meets the TPOT SLA (times
        the policy's ``headroom``); the smallest when none does."""
        b = int(info["running"]) - int(info["prefilling"])
        ctx = int(info["decode_context"])
        x = int(info["prefill_head_done"])
        best = 0
        for i, budget in enumerate(self.budgets):
            c = budget - b
            t = self.profile.mixed_time_s(c, float(c * c + 2 * c * x), b, ctx)
            if t > self.limit_s:
                break
            best = i
        return best

    def _sarathi_setup(self, env: gym.Env | None, headroom: float) -> None:
        """What :meth:`sarathi_budget_index` reads: the profile and the time limit."""
        check_number("headroom", headroom, low=0.0, low_inclusive=False)
        self.profile = env.unwrapped.profile  # type: ignore[union-attr]
        self.limit_s = float(headroom) * self.tpot_sla_ms / 1000.0

    def reset(self) -> None:
        """Stateless by default."""


class StaticCapPolicy(_CapPolicy):
    """A fixed cap on running requests (vLLM's ``max_num_seqs``).

    :param env: the LLMBatching-v0 env.
    :param cap: the cap (default: the env's ``max_num_seqs``, 256 by default as in vLLM),
        one of the env's ``grid`` (else ``ValueError``: the actions could not set it).
    """

    name = "static-cap"

    def __init__(self, env: gym.Env | None = None, cap: int | None = None) -> None:
        super().__init__(env, 1, None)
        self.cap = self.b_max if cap is None else cap
        check_number("cap", self.cap, low=1, high=self.b_max, integer=True)
        if int(self.cap) not in self.grid:  # a fixed cap that the actions cannot set
            raise ValueError(
                f"policy 'static-cap': cap={self.cap!r} is not a cap the env's actions can "
                f"set: its grid is {list(self.grid)}; give a cap of the grid, or make the env "
                "with a grid that holds it"
            )
        self._action = self.action_for(int(self.cap))

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Always the same cap."""
        return self._action


class LLMGreedyPolicy(StaticCapPolicy):
    """``greedy`` on an LLM env: vLLM's defaults, as much as fits at every iteration: the
    largest cap (the env's ``max_num_seqs``), the largest token budget
    (``max_num_batched_tokens``) and first come first served. What the benchmark's
    ``greedy`` reference runs on the LLM tasks (score 0); ``baselines.make("greedy", env)``
    builds it on an LLM env (:class:`~baselines.heuristics.GreedyPolicy` on the others).

    :param env: an LLMBatching env.
    """

    name = "greedy"

    def __init__(self, env: gym.Env | None = None) -> None:
        super().__init__(env)


class MemoryAwarePolicy(_CapPolicy):
    """Algorithm 1 of Pang et al.: the cap the KV cache can hold at the current footprint.

    :param env: the LLMBatching-v0 env.
    :param eta: target fraction of the KV blocks (0.95).
    :param b_min: smallest cap (1).
    :param b_max: largest cap (default the env's ``max_num_seqs``).
    """

    name = "memory-aware"

    def __init__(
        self,
        env: gym.Env | None = None,
        eta: float = 0.95,
        b_min: int = 1,
        b_max: int | None = None,
    ) -> None:
        super().__init__(env, b_min, b_max)
        check_number("eta", eta, low=0.0, low_inclusive=False, high=1.0)
        self.eta = float(eta)
        self.reset()

    def reset(self) -> None:
        """Start from ``b_max``."""
        self.b = self.b_max

    def cap(self, info: dict[str, Any]) -> int:
        """Update and return the memory-aware cap from ``info``."""
        running, waiting, used = info["running"], info["waiting"], info["kv_blocks_used"]
        if running > 0 and waiting > 0 and used > 0:
            b = math.floor(self.eta * info["kv_blocks_total"] / (used / running))
            self.b = min(max(b, running, self.b_min), self.b_max)
        return self.b

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The grid action of :meth:`cap`."""
        return self.action_for(self.cap(info))


class SLAFeedbackPolicy(_CapPolicy):
    """Algorithm 2 of Pang et al.: a search interval steered by decode latency vs its target.

    :param env: the LLMBatching-v0 env.
    :param d_sla_ms: decode-latency (time per output token) target; default the env's
        ``tpot_sla_ms`` (50 ms, the paper's D_SLA).
    :param eps_ms: tolerance around the target (10 ms).
    :param alpha: interval width kept around the mean batch size (20).
    :param delta: step by which the interval's far end moves (5).
    :param b_min: smallest cap (1).
    :param b_max: largest cap (default the env's ``max_num_seqs``).
    """

    name = "sla-feedback"

    def __init__(
        self,
        env: gym.Env | None = None,
        d_sla_ms: float | None = None,
        eps_ms: float = 10.0,
        alpha: float = 20.0,
        delta: float = 5.0,
        b_min: int = 1,
        b_max: int | None = None,
    ) -> None:
        super().__init__(env, b_min, b_max)
        self.d_sla_ms = self.tpot_sla_ms if d_sla_ms is None else d_sla_ms
        check_number("d_sla_ms", self.d_sla_ms, low=0.0, low_inclusive=False)
        check_number("eps_ms", eps_ms, low=0.0)
        check_number("alpha", alpha, low=0.0)
        check_number("delta", delta, low=0.0)
        self.eps_ms, self.alpha, self.delta = float(eps_ms), float(alpha), float(delta)
        self.reset()

    def reset(self) -> None:
        """Start with the interval ``[b_min, b_max]``."""
        self.b_low, self.b_high = float(self.b_min), float(self.b_max)

    def cap(self, info: dict[str, Any]) -> int:
        """Update the interval from ``info`` and return its midpoint cap."""
        d = info["decode_latency_recent_ms"]
        b_avg = info["batch_size_recent"]
        lo, hi, a = self.b_low, self.b_high, self.alpha
        bmin, bmax = self.b_min, self.b_max
        if d > self.d_sla_ms + self.eps_ms:
            hi = max(b_avg, lo + a)
            lo = max(lo - self.delta, bmin)
        elif d < self.d_sla_ms - self.eps_ms:
            lo = min(b_avg, hi - a)
            hi = min(hi + self.delta, bmax)
        else:
            hi = min(b_avg + a / 2.0, bmax)
            lo = max(b_avg - a / 2.0, bmin)
        lo = min(max(lo, bmin), bmax)
        hi = min(max(hi, lo), bmax)
        self.b_low, self.b_high = lo, hi
        b = math.floor((lo + hi) / 2.0)
        return min(max(b, info["running"], bmin), bmax)

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The grid action of :meth:`cap`."""
        return self.action_for(self.cap(info))


class Pang2025Policy(_CapPolicy):
    """Pang et al.'s combined policy: ``min(memory-aware cap, sla-feedback cap)``.

    :param env: the LLMBatching-v0 env.
    :param eta: see :class:`MemoryAwarePolicy`.
    :param d_sla_ms, eps_ms, alpha, delta: see :class:`SLAFeedbackPolicy`.
    :param b_min: smallest cap (1).
    :param b_max: largest cap (default the env's ``max_num_seqs``).
    """

    name = "pang2025"

    def __init__(
        self,
        env: gym.Env | None = None,
        eta: float = 0.95,
        d_sla_ms: float | None = None,
        eps_ms: float = 10.0,
        alpha: float = 20.0,
        delta: float = 5.0,
        b_min: int = 1,
        b_max: int | None = None,
    ) -> None:
        super().__init__(env, b_min, b_max)
        self.memory = MemoryAwarePolicy(env, eta=eta, b_min=b_min, b_max=b_max)
        self.sla = SLAFeedbackPolicy(
            env,
            d_sla_ms=d_sla_ms,
            eps_ms=eps_ms,
            alpha=alpha,
            delta=delta,
            b_min=b_min,
            b_max=b_max,
        )

    def reset(self) -> None:
        """Reset both parts."""
        self.memory.reset()
        self.sla.reset()

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The grid action of the smaller cap."""
        return self.action_for(min(self.memory.cap(info), self.sla.cap(info)))


def _vllm_default_budget(env: gym.Env | None) -> int:
    """vLLM v1's default ``max_num_batched_tokens`` for the API server on the profile's
    device: 8192 on GPUs of 70 GiB or more other than the A100, else 2048
    (``EngineArgs.get_batch_defaults``)."""
    profile = env.unwrapped.profile  # type: ignore[union-attr]
    big = profile.gpu_memory_bytes >= 70 * 2**30 and "a100" not in profile.device.lower()
    return 8192 if big else 2048


class StaticBudgetPolicy(_CapPolicy):
    """Chunked prefill with a fixed token budget and the largest cap (vLLM v1 as
    configured).

    :param env: an LLMBatching env with the chunked scheduler.
    :param budget: the token budget, one of the env's budgets (``budget_grid``, or
        ``max_num_batched_tokens``); default vLLM v1's default for the profile's device
        (2048 on an A100, 8192 on an H100).
    :param order: the admission order, one of the env's ``orders`` (``LLMBatching-v2``);
        default first come first served, vLLM's.
    :param clock: the SM clock (MHz), one of the env's ``clock_grid`` (``LLMBatching-v2``);
        default the grid's highest, the GPU's default.
    """

    name = "static-budget"

    def __init__(
        self,
        env: gym.Env | None = None,
        budget: int | None = None,
        order: str = "fcfs",
        clock: float | None = None,
    ) -> None:
        super().__init__(env, 1, None)
        _need_chunked(env, self.name)
        want = _vllm_default_budget(env) if budget is None else budget
        if want not in self.budgets:
            raise ValueError(
                f"budget={want!r} is not a budget the env's actions can select: "
                f"{list(self.budgets)} (budget_grid, or max_num_batched_tokens)"
            )
        if order not in self.orders:
            raise ValueError(
                f"order={order!r} is not an order the env's actions can select: "
                f"{list(self.orders)} (LLMBatching-v2's orders)"
            )
        self.budget = int(want)
        self.order = order
        clocks = _clock_grid(env)
        if clock is not None and clock not in clocks:
            raise ValueError(
                f"clock={clock!r} is not one of the env's SM clocks: clock_grid="
                f"{list(clocks) if clocks else None}"
            )
        self.clock = clock
        self._action = self._codec.encode(
            max(bisect_right(self.grid, self.b_max) - 1, 0),
            self.budgets.index(self.budget),
            self.orders.index(order),
            None if clock is None else clocks.index(float(clock)),
        )

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Always the same cap and budget."""
        return self._action


def _need_prefix(env: gym.Env | None, policy: str) -> None:
    """``ValueError`` unless ``env`` runs with prefix caching (where an env is given)."""
    server = getattr(getattr(env, "unwrapped", None), "server", None)
    if env is not None and getattr(server, "prefix_ratio", None) is None:
        raise ValueError(
            f"policy {policy!r} runs with prefix caching: make the env with a workload whose "
            "prompts carry prefix information (e.g. {'kind': 'trace', 'dataset': "
            "'mooncake-conversation'}, or {'kind': 'sessions', ...}) and prefix_caching left on"
        )


class VLLMPrefixCachingPolicy(StaticBudgetPolicy):
    """vLLM's automatic prefix caching (on by default in vLLM V1) with its first come
    first served scheduler: :class:`StaticBudgetPolicy`'s settings (the largest cap,
    vLLM's default token budget, FCFS) on an env with prefix caching. The same settings on
    the env made with ``prefix_caching=False`` are vLLM without caching.

    :param env: an LLMBatching env with the chunked scheduler and prefix caching.
    :param budget: as :class:`StaticBudgetPolicy`.
    :param clock: as :class:`StaticBudgetPolicy`.
    """

    name = "vllm-apc"
    #: the admission order it runs (one of the env's ``orders``)
    order = "fcfs"

    def __init__(
        self, env: gym.Env | None = None, budget: int | None = None, clock: float | None = None
    ) -> None:
        _need_prefix(env, self.name)
        if env is not None and self.order not in _orders(env):
            raise ValueError(
                f"policy {self.name!r} admits in the order {self.order!r}, which the env's "
                f"actions cannot choose (its orders are {list(_orders(env))}); make "
                f"batch_env/LLMBatching-v2 with orders=[..., {self.order!r}]"
            )
        super().__init__(env, budget, self.order, clock)


class LongestPrefixPolicy(VLLMPrefixCachingPolicy):
    """SGLang's longest prefix match: the waiting requests with the most prompt blocks in
    the prefix cache first, first come first served while more than
    ``longest_prefix_fcfs_above`` (128) wait (the env's ``longest-prefix`` order), at the
    largest cap and vLLM's default token budget for the device (SGLang's
    ``chunked_prefill_size`` defaults alike: 8192 on large GPUs, 2048 on small ones).

    :param env: an LLMBatching-v2 env with prefix caching and ``"longest-prefix"`` among
        its ``orders``.
    :param budget: as :class:`StaticBudgetPolicy`.
    :param clock: as :class:`StaticBudgetPolicy`.
    """

    name = "sglang-lpm"
    order = "longest-prefix"


class ClockQueuePolicy(StaticBudgetPolicy):
    """The GPU's SM clock set by the queue: low while at most ``threshold`` requests wait,
    high above (``LLMBatching-v2`` with a ``clock_grid``); the cap, token budget and order
    fixed (:class:`StaticBudgetPolicy`'s).

    Prefill is compute-bound and slows with the clock while decode, memory-bound, barely
    does, and power falls with the clock either way; so a server saves energy at a low
    clock until prompts queue, and raises it to drain them before their TTFT: the rule
    of queue- or load-driven DVFS controllers (DynamoLLM, throttLL'eM, GreenLLM set the
    clock from the load and the queue; this is the simplest such rule, with one
    threshold). Reads ``info["waiting"]`` only.

    :param env: an LLMBatching-v2 env with a ``clock_grid``.
    :param low_clock: the clock (MHz) while at most ``threshold`` wait; one of the grid's
        (default its lowest).
    :param high_clock: the clock above it; one of the grid's (default its highest, the
        GPU's default).
    :param threshold: requests waiting (not yet admitted) at or below which the clock is
        low (default 1).
    :param budget: the token budget (as ``static-budget``; default vLLM v1's for the GPU).
    :param order: the admission order (default FCFS).
    """

    name = "clock-queue"

    def __init__(
        self,
        env: gym.Env | None = None,
        low_clock: float | None = None,
        high_clock: float | None = None,
        threshold: int = 1,
        budget: int | None = None,
        order: str = "fcfs",
    ) -> None:
        super().__init__(env, budget, order)
        clocks = _clock_grid(env)
        if not clocks:
            raise ValueError(
                "policy 'clock-queue' sets the SM clock: make the env (LLMBatching-v2) with a "
                "clock_grid"
            )
        lo = clocks[0] if low_clock is None else low_clock
        hi = clocks[-1] if high_clock is None else high_clock
        for name, f in (("low_clock", lo), ("high_clock", hi)):
            if f not in clocks:
                raise ValueError(
                    f"{name}={f!r} is not one of the env's SM clocks: clock_grid={list(clocks)}"
                )
        check_number("threshold", threshold, low=0, integer=True)
        self.low_clock, self.high_clock, self.threshold = float(lo), float(hi), int(threshold)
        b, o = self.budgets.index(self.budget), self.orders.index(self.order)
        cap = max(bisect_right(self.grid, self.b_max) - 1, 0)
        self._low = self._codec.encode(cap, b, o, clocks.index(self.low_clock))
        self._high = self._codec.encode(cap, b, o, clocks.index(self.high_clock))

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The high clock while more than ``threshold`` requests wait, else the low one."""
        return self._high if int(info["waiting"]) > self.threshold else self._low


class SarathiBudgetPolicy(_CapPolicy):
    """Sarathi-Serve's rule: a token budget sized to the TPOT SLA from the profile.

    Each iteration it picks the largest budget of the env's grid whose mixed iteration,
    as the profile times it (:meth:`batch_env.llm_profile.LLMProfile.mixed_time_s`: the
    running requests' decodes, ``info["decode_context"]``, plus chunks filling the rest
    of the budget, the first continuing ``info["prefill_head_done"]`` cached tokens),
    stays within ``tpot_sla_ms`` (times ``headroom``); the smallest budget when none
    does. The cap is the largest. Sarathi-Serve fixes its budget once from profiling;
    applying the rule at every iteration, to the batch at hand, is this project's
    reading (docs/decisions.md, "Chunked prefill").

    :param env: an LLMBatching env with the chunked scheduler and a ``budget_grid`` of at
        least two budgets (else ``ValueError``: with one budget it could not adapt).
    :param headroom: fraction of the TPOT SLA an iteration may take (1.0).
    """

    name = "sarathi"

    def __init__(self, env: gym.Env | None = None, headroom: float = 1.0) -> None:
        super().__init__(env, 1, None)
        _need_chunked(env, self.name)
        if len(self.budgets) < 2:  # one budget: sarathi would be a static budget
            has = getattr(env_config(env), "budget_grid", None)
            one = (
                f"budget_grid={list(has)}"
                if has
                else f"no budget_grid, so max_num_batched_tokens={self.budgets[0]}"
            )
            raise ValueError(
                f"policy 'sarathi' chooses each iteration's token budget from the env's "
                f"budget_grid, but this env offers one budget ({one}): it would run as the "
                f"static budget {self.budgets[0]} and miss its TPOT SLA where that budget is "
                "too large; make the env with budget_grid=[256, 512, 1024, 2048, ...] (or use "
                "static-budget for one budget)"
            )
        self._sarathi_setup(env, headroom)

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The largest budget whose predicted iteration meets the TPOT SLA."""
        return self.action_for(self.b_max, self.sarathi_budget_index(info))


class OrderPolicy(_CapPolicy):
    """An admission order with Sarathi-Serve's budget rule and the largest cap
    (``LLMBatching-v2``, whose actions choose the order; ``orders`` must offer it).

    The budget is :meth:`_CapPolicy.sarathi_budget_index`'s (with one budget, that one:
    the name promises the order, not an adaptive budget), or a fixed one (``budget``).
    Subclasses name the order.

    :param env: an LLMBatching-v2 env whose ``orders`` hold this policy's order.
    :param headroom: fraction of the TPOT SLA an iteration may take (1.0).
    :param budget: a fixed token budget, one of the env's budgets, instead of sarathi's
        rule (``None``: the rule).
    """

    name = "order"
    order = "fcfs"

    def __init__(
        self, env: gym.Env | None = None, headroom: float = 1.0, budget: int | None = None
    ) -> None:
        super().__init__(env, 1, None)
        _need_chunked(env, self.name)
        if self.order not in self.orders:
            raise ValueError(
                f"policy {self.name!r} admits in the order {self.order!r}, which the env's "
                f"actions cannot choose (its orders are {list(self.orders)}); make "
                f"batch_env/LLMBatching-v2 with orders=[..., {self.order!r}]"
            )
        if budget is not None and budget not in self.budgets:
            raise ValueError(
                f"budget={budget!r} is not a budget the env's actions can select: "
                f"{list(self.budgets)} (budget_grid, or max_num_batched_tokens); or None "
                "for sarathi's rule"
            )
        self._order = self.orders.index(self.order)
        self._fixed = None if budget is None else self.budgets.index(budget)
        self._sarathi_setup(env, headroom)

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """The largest cap, sarathi's budget (or the fixed one), this policy's order."""
        i = self.sarathi_budget_index(info) if self._fixed is None else self._fixed
        return self.action_for(self.b_max, i, self._order)


class EDFPolicy(OrderPolicy):
    """Earliest TTFT deadline first (``edf``), with sarathi's budget rule."""

    name = "edf"
    order = "edf"


class ShortestPromptPolicy(OrderPolicy):
    """Shortest prompt first (``shortest-prompt``), with sarathi's budget rule."""

    name = "shortest-prompt"
    order = "shortest-prompt"


class ClassPriorityPolicy(OrderPolicy):
    """The first class of ``classes`` first (``class-priority``), with sarathi's budget rule."""

    name = "class-priority"
    order = "class-priority"


class OracleSRPTPolicy(OrderPolicy):
    """Shortest true remaining output first (``oracle-srpt``), with sarathi's budget rule:
    **not realizable**. No serving system knows a request's output length before it ends;
    this policy's env does (``oracle_info=True``, whose ``orders`` may then offer
    ``srpt``). What it gains over the realizable orders is what knowing the lengths is
    worth: the headroom that output-length predictors are after.

    :param env: an LLMBatching-v2 env made with ``oracle_info=True`` and ``"srpt"`` in
        its ``orders``.
    :param headroom: as :class:`OrderPolicy`.
    """

    name = "oracle-srpt"
    order = "srpt"
    realizable = False

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """As :class:`OrderPolicy`; the lengths it acts on are in ``info["oracle"]``."""
        if "oracle" not in info:
            raise ValueError(
                "policy 'oracle-srpt' needs info['oracle']: make the env with oracle_info=True"
            )
        return super().act(obs, info)


def _need_chunked(env: gym.Env | None, policy: str) -> None:
    if getattr(env_config(env), "scheduler", "vllm-v0") != "chunked":
        raise ValueError(
            f"policy {policy!r} sets the chunked scheduler's token budget: make the env with "
            "scheduler='chunked' (batch_env/LLMBatching-v1)"
        )
