"""Frozen, validated configuration for the environments.

Every field names its unit (``sla_ms``, ``rate_per_s``, ``idle_power_w``). A config is
validated once, at construction; an invalid field raises :class:`ValueError` naming the
field, the bad value and what is allowed, so nothing is silently coerced or lost.

Defaults (and why):

* ``reward_weights``: latency 1.0 per request-second, energy 0.5 per joule, SLA 0.01 per
  miss, drop 1.0 per drop. Latency and energy are of the same order on the default
  ResNet-50/V100 profile (about 10-20 request-seconds and 80-130 joules per simulated
  second at moderate load), so the optimal policy genuinely trades them off (it is not
  simply greedy) and per-step rewards are O(0.01-1), a scale PPO's default
  hyperparameters handle. An SLA miss costs as much as 10 ms of extra latency; set it to 0
  for the SMDP-exact subset. A drop costs 1.0, about 40x the cheapest energy cost of
  serving a request (0.5 x 0.045 J) and far above any latency a request can save by being
  dropped at the default queue capacity, so dropping never pays (docs/design.md: "Dropping must
  not pay").
* ``sla_ms`` 15: MLPerf Inference server-scenario p99 target for ResNet-50.
* ``max_batch_size`` 32, ``queue_capacity`` 2000, ``horizon_requests`` 2000.
* ``horizon_s``: ``None`` means 10 x (warm-up + horizon requests) / mean arrival rate, a
  generous multiple that still ends an always-wait episode.
* Profile and workload: :data:`DEFAULT_PROFILE` and :data:`DEFAULT_WORKLOAD` (Poisson at
  load 0.6); for ``LLMBatching-v0``, :data:`LLM_DEFAULT_PROFILE` and
  :data:`LLM_DEFAULT_WORKLOAD` (Poisson at 2 requests/s).

One source of defaults: the dataclasses here and these constants hold them. The env
constructors repeat them as literals (so ``help(env)`` and an IDE show numbers), the CLI's
help text is built from them, and ``tests/test_defaults.py`` checks that the signatures,
the CLI and the sweep table agree with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, InitVar, asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any

# re-exported: the validation helpers lived here before batch_env.checks
from .checks import ArgumentError as ArgumentError
from .checks import check_number as check_number
from .checks import init_arguments as init_arguments
from .checks import is_real_number as is_real_number
from .workload.lengths import make_lengths
from .workload.specs import make_workload

SERVICE_LAWS = ("deterministic", "lognormal")

#: Upper bound of ``max_batch_size`` and ``max_num_seqs`` (2**17 = 131072). Per-batch-size
#: tables and action masks are O(B); the bound keeps one of them under 1 MiB, and is far above
#: any batch in the published profiles (a few thousand requests at most).
MAX_BATCH_LIMIT = 1 << 17

#: Smallest ``decision_interval_ms`` (1 ns): a tick must move the clock, and a 1 ns tick
#: still does for the first 100 days of simulated time (float64 seconds); a shorter one
#: would round ``now + tick`` back to ``now`` much sooner.
MIN_TICK_MS = 1e-6

#: The profile of ``DynamicBatching-v0`` and ``NodeBatching-v0`` when none is given.
DEFAULT_PROFILE = "resnet50-v100"
#: Their workload when none is given: Poisson arrivals at 0.6 of the profile's max throughput.
DEFAULT_WORKLOAD: Mapping[str, Any] = MappingProxyType({"kind": "poisson", "load": 0.6})
#: The profile of ``LLMBatching-v0`` when none is given.
LLM_DEFAULT_PROFILE = "llama-2-7b-a100"
#: Its workload when none is given: Poisson arrivals at 2 requests per second.
LLM_DEFAULT_WORKLOAD: Mapping[str, Any] = MappingProxyType({"kind": "poisson", "rate_per_s": 2.0})


def field_default(cls: type, name: str) -> Any:
    """The default of field ``name`` of config dataclass ``cls`` (a factory's value for
    ``reward_weights``); ``KeyError`` if there is no such field or it has no default."""
    for f in fields(cls):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            break
    raise KeyError(f"{cls.__name__} has no default for {name!r}")


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the reward components: ``r = -(latency*L + energy*E + sla*M + drop*D)``.

    :param latency: cost per request-second in the system (L is the integral of the number
        of requests in the system over the step, in seconds).
    :param energy: cost per joule consumed (busy and idle).
    :param sla: cost per SLA miss, charged when the deadline passes.
    :param drop: cost per request rejected by a full queue.
    """

    latency: float = 1.0
    energy: float = 0.5
    sla: float = 0.01
    drop: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            check_number(f"reward_weights.{f.name}", getattr(self, f.name), low=0.0)

    @classmethod
    def from_any(
        cls, value: RewardWeights | dict | None, base: RewardWeights | None = None
    ) -> RewardWeights:
        """Build from a ``RewardWeights``, a dict of overrides, or ``None`` (defaults).

        :param value: weights or a partial dict such as ``{"energy": 0.1}``.
        :param base: the defaults that a dict overrides (``None``: this class's defaults).
        """
        base = cls() if base is None else base
        if value is None:
            return base
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(
                    f"reward_weights has unknown key(s) {unknown}: allowed keys are {sorted(known)}"
                )
            return cls(**{**asdict(base), **value})
        raise ValueError(
            f"reward_weights={value!r} is invalid: expected a dict with keys "
            f"{[f.name for f in fields(cls)]} or a RewardWeights"
        )

    def to_dict(self) -> dict[str, float]:
        """Plain dict of the weights."""
        return asdict(self)


@dataclass(frozen=True)
class ServingConfig:
    """Configuration shared by every batching environment.

    :param max_batch_size: largest batch the server runs (B), at most :data:`MAX_BATCH_LIMIT`.
    :param sla_ms: latency target per request; a request misses it when its latency
        exceeds it (equal meets it).
    :param reward_weights: see :class:`RewardWeights`.
    :param service: ``"deterministic"`` (profile mean) or ``"lognormal"``.
    :param service_cv: coefficient of variation of lognormal service times; ``None`` takes
        the profile's ``latency_cv`` (an error if the profile has none).
    :param queue_capacity: most requests that may wait (not counting those in service);
        an arrival to a full queue is dropped.
    :param horizon_requests: number of summary requests per episode.
    :param warmup_requests: arrivals before the summary requests (they still take part).
    :param horizon_s: episode time limit in simulated seconds; ``None`` derives a generous
        default from the workload's mean rate.
    :param decision_interval_ms: relative tick interval (``None``: ticks off), at least
        :data:`MIN_TICK_MS`.
    :param idle_power_w: override of the profile's idle power.
    :param rate_window_s: time constant of the observation's arrival-rate estimate;
        ``None`` means 200 mean inter-arrival times.
    """

    max_batch_size: int = 32
    sla_ms: float = 15.0
    reward_weights: RewardWeights = field(default_factory=RewardWeights)
    service: str = "deterministic"
    service_cv: float | None = None
    queue_capacity: int = 2000
    horizon_requests: int = 2000
    warmup_requests: int = 0
    horizon_s: float | None = None
    decision_interval_ms: float | None = None
    idle_power_w: float | None = None
    rate_window_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "reward_weights", RewardWeights.from_any(self.reward_weights))
        check_number(
            "max_batch_size", self.max_batch_size, low=1, high=MAX_BATCH_LIMIT, integer=True
        )
        check_number("sla_ms", self.sla_ms, low=0.0, low_inclusive=False)
        if self.service not in SERVICE_LAWS:
            raise ValueError(
                f"service={self.service!r} is invalid: allowed values are {SERVICE_LAWS}"
            )
        if self.service_cv is not None:
            check_number("service_cv", self.service_cv, low=0.0)
        check_number("queue_capacity", self.queue_capacity, low=1, integer=True)
        check_number("horizon_requests", self.horizon_requests, low=1, integer=True)
        check_number("warmup_requests", self.warmup_requests, low=0, integer=True)
        if self.horizon_s is not None:
            check_number("horizon_s", self.horizon_s, low=0.0, low_inclusive=False)
        if self.decision_interval_ms is not None:
            check_number("decision_interval_ms", self.decision_interval_ms, low=MIN_TICK_MS)
        if self.idle_power_w is not None:
            check_number("idle_power_w", self.idle_power_w, low=0.0)
        if self.rate_window_s is not None:
            check_number("rate_window_s", self.rate_window_s, low=0.0, low_inclusive=False)

    @classmethod
    def from_arguments(cls, arguments: dict[str, Any]) -> ServingConfig:
        """The configuration from an env constructor's arguments (``locals()``): the
        entries named like a field are taken, the others (profile, workload, ...) ignored."""
        return cls(**{f.name: arguments[f.name] for f in fields(cls) if f.name in arguments})

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-friendly dict of the configuration."""
        d = asdict(self)
        d["reward_weights"] = self.reward_weights.to_dict()
        return d


#: LLMBatching-v0's default reward weights (docs/decisions.md, "LLMBatching-v0"): a
#: request-second in the system costs 1, a joule 0.001 (a 400 W GPU costs 0.4 per second,
#: so latency dominates but energy still separates equally fast policies), an SLA miss 1
#: (as much as one second of extra latency), a drop 10.
LLM_REWARD_WEIGHTS = RewardWeights(latency=1.0, energy=0.001, sla=1.0, drop=10.0)
#: the LLM schedulers (``LLMConfig.scheduler``)
SCHEDULERS = ("vllm-v0", "chunked")


@dataclass(frozen=True)
class LLMConfig:
    """Configuration of ``batch_env/LLMBatching-v0`` (vLLM v0's scheduler knobs, SLAs, episode).

    :param max_num_seqs: the largest cap on running requests (vLLM's ``max_num_seqs``,
        default 256, at most :data:`MAX_BATCH_LIMIT`); the default action grid is
        ``1..max_num_seqs``.
    :param grid: the caps the actions select (increasing integers in ``1..max_num_seqs``);
        ``None``: ``1..max_num_seqs``.
    :param max_model_len: context limit: a prompt fits when ``prompt + 1 <= max_model_len``
        (others are rejected and counted); outputs are clipped to ``max_model_len - prompt``.
    :param max_num_batched_tokens: token budget of one iteration: of a prefill with the
        ``vllm-v0`` scheduler (``None``: ``max(max_model_len, 2048)``, vLLM v0's default
        without chunked prefill; at least ``max_model_len``), of the decode tokens and
        prompt chunks together with ``chunked`` (``None``: 2048, vLLM v1's API-server
        default on an A100; at least ``max_num_seqs``, as vLLM v1 requires, and at least
        ``max_model_len`` when prompts are not split).
    :param scheduler: ``"vllm-v0"`` (an iteration is a prefill of whole prompts or one
        decode step of every running request) or ``"chunked"`` (vLLM v1 / Sarathi-Serve:
        one decode token for every running request, then prompt chunks filling the rest
        of the token budget, in one mixed iteration; ``docs/decisions.md``, "Chunked
        prefill").
    :param decode_first: ``chunked`` only: schedule the running requests' decode tokens
        first (default); ``False``: an iteration with prompt chunks runs no decode, as
        v0's prefill-first rule.
    :param num_scheduler_steps: ``vllm-v0`` only: vLLM 0.6's multi-step scheduling
        (``--num-scheduler-steps``): a decode step starts a group of this many decode
        steps run back to back, with no prefill between them; a prefill is one step
        (default 1: every iteration is scheduled).
    :param split_prompts: ``chunked`` only: a prompt may be split across iterations
        (default); ``False``: a prompt is scheduled whole or waits (with
        ``decode_first=False`` the scheduler is then v0's).
    :param budget_grid: ``chunked`` only: the token budgets an action may select
        (strictly increasing, each in ``max_num_seqs..max_num_batched_tokens``); the
        action then picks a cap and a budget (``Discrete(len(grid) x len(budget_grid))``);
        ``None``: the budget is ``max_num_batched_tokens`` at every iteration.
    :param block_size: tokens per KV-cache block (16).
    :param watermark: fraction of KV blocks kept free when admitting a prefill (0.01).
    :param gpu_memory_utilization: fraction of GPU memory vLLM may use; ``None``: the
        profile's (0.9).
    :param ttft_sla_ms: time-to-first-token target; a miss is counted when it passes.
    :param tpot_sla_ms: time-per-output-token target, ``(e2e - ttft) / (output - 1)``;
        checked at completion.
    :param reward_weights: overrides of :data:`LLM_REWARD_WEIGHTS`.
    :param lengths: request lengths (:class:`batch_env.workload.RequestLengths` or a dict);
        ``None``: the trace's token columns for a trace workload that has them, else the
        lognormal fit of the Azure conversation trace.
    :param queue_capacity: most requests that may wait; an arrival to a full queue is dropped.
    :param horizon_requests: summary requests per episode (rejected prompts excluded).
    :param warmup_requests: arrivals before the summary requests.
    :param horizon_s: episode time limit; ``None``: 10 x requests / mean rate.
    :param idle_power_w: override of the profile's idle power.
    :param rate_window_s: time constant of the arrival-rate estimate; ``None``: 200 mean
        inter-arrival times.
    :param recent_iterations: decode iterations averaged by ``decode_latency_recent_ms``
        and ``batch_size_recent`` (16).
    :param prefix_caching: automatic prefix caching, as vLLM's ``enable_prefix_caching``:
        a prompt's cached leading blocks are shared and not recomputed, and a finished
        request's blocks stay cached until evicted (``docs/design.md``, "The KV cache and
        prefix caching"). ``None`` (default): on where the workload carries prefix
        information (a trace with block hashes, the ``sessions`` workload), else off;
        ``True`` on a workload without it is an error.
    :param cascade_attention: ``chunked`` only, with prefix caching: vLLM V1's cascade
        attention (``disable_cascade_attn=False``), which reads a prefix that every running
        request holds once per iteration where its rule chooses to
        (:mod:`batch_env.llm.cascade`). Default ``False``, as vLLM's since March 2026 (its
        V1 release of January 2025 ran with it on).
    :param profile_max_batch_tokens: the largest prefill (tokens) the server's profile
        covers (``LLMProfile.max_batch_tokens``; not a field: the env passes its
        profile's). The default ``max_num_batched_tokens`` is settled here alone, cut to
        it; ``None``: no cut.
    """

    max_num_seqs: int = 256
    grid: tuple[int, ...] | None = None
    max_model_len: int = 4096
    max_num_batched_tokens: int | None = None
    block_size: int = 16
    watermark: float = 0.01
    gpu_memory_utilization: float | None = None
    ttft_sla_ms: float = 1000.0
    tpot_sla_ms: float = 50.0
    reward_weights: RewardWeights = field(default_factory=lambda: LLM_REWARD_WEIGHTS)
    lengths: Any = None
    queue_capacity: int = 4096
    horizon_requests: int = 1000
    warmup_requests: int = 0
    horizon_s: float | None = None
    idle_power_w: float | None = None
    rate_window_s: float | None = None
    recent_iterations: int = 16
    scheduler: str = "vllm-v0"
    decode_first: bool = True
    num_scheduler_steps: int = 1
    split_prompts: bool = True
    budget_grid: tuple[int, ...] | None = None
    prefix_caching: bool | None = None
    cascade_attention: bool = False
    profile_max_batch_tokens: InitVar[int | None] = None

    def __post_init__(self, profile_max_batch_tokens: int | None = None) -> None:
        object.__setattr__(
            self, "reward_weights", RewardWeights.from_any(self.reward_weights, LLM_REWARD_WEIGHTS)
        )
        if self.prefix_caching is not None and not isinstance(self.prefix_caching, bool):
            raise ValueError(
                f"prefix_caching={self.prefix_caching!r} is invalid: expected True, False or "
                "None (on where the workload carries prefix information)"
            )
        check_number("max_num_seqs", self.max_num_seqs, low=1, high=MAX_BATCH_LIMIT, integer=True)
        check_number("max_model_len", self.max_model_len, low=2, integer=True)
        self._check_scheduler(profile_max_batch_tokens)
        check_number("block_size", self.block_size, low=1, integer=True)
        check_number("watermark", self.watermark, low=0.0, high=0.5)
        if self.gpu_memory_utilization is not None:
            check_number(
                "gpu_memory_utilization",
                self.gpu_memory_utilization,
                low=0.0,
                low_inclusive=False,
                high=1.0,
            )
        check_number("ttft_sla_ms", self.ttft_sla_ms, low=0.0, low_inclusive=False)
        check_number("tpot_sla_ms", self.tpot_sla_ms, low=0.0, low_inclusive=False)
        grid = self.grid
        if grid is None:
            grid = tuple(range(1, int(self.max_num_seqs) + 1))
        else:
            if isinstance(grid, (str, bytes)) or not hasattr(grid, "__iter__"):
                raise ValueError(
                    f"grid={grid!r} is invalid: expected a list of increasing integers"
                )
            grid = tuple(grid)
            for i, g in enumerate(grid):
                check_number(f"grid[{i}]", g, low=1, high=self.max_num_seqs, integer=True)
            if not grid or any(b <= a for a, b in zip(grid, grid[1:], strict=False)):
                raise ValueError(
                    f"grid={list(grid)!r} is invalid: expected a non-empty list of strictly "
                    f"increasing integers in 1..max_num_seqs={self.max_num_seqs}"
                )
            grid = tuple(int(g) for g in grid)
        object.__setattr__(self, "grid", grid)
        object.__setattr__(
            self, "lengths", make_lengths(self.lengths) if self.lengths is not None else None
        )
        check_number("queue_capacity", self.queue_capacity, low=1, integer=True)
        check_number("horizon_requests", self.horizon_requests, low=1, integer=True)
        check_number("warmup_requests", self.warmup_requests, low=0, integer=True)
        if self.horizon_s is not None:
            check_number("horizon_s", self.horizon_s, low=0.0, low_inclusive=False)
        if self.idle_power_w is not None:
            check_number("idle_power_w", self.idle_power_w, low=0.0)
        if self.rate_window_s is not None:
            check_number("rate_window_s", self.rate_window_s, low=0.0, low_inclusive=False)
        check_number("recent_iterations", self.recent_iterations, low=1, integer=True)

    def _check_scheduler(self, limit: int | None) -> None:
        """The scheduler's options and the token budget (its default filled in, within the
        profile's largest prefill ``limit``)."""
        if self.scheduler not in SCHEDULERS:
            raise ValueError(
                f"scheduler={self.scheduler!r} is unknown: allowed values are {list(SCHEDULERS)}"
            )
        chunked = self.scheduler == "chunked"
        for name in ("decode_first", "split_prompts", "cascade_attention"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is invalid: expected true or false"
                )
        check_number("num_scheduler_steps", self.num_scheduler_steps, low=1, integer=True)
        if chunked and self.num_scheduler_steps != 1:
            raise ValueError(
                f"num_scheduler_steps={self.num_scheduler_steps!r} is an option of "
                "scheduler='vllm-v0' (vLLM 0.6's multi-step scheduling; scheduler='chunked' "
                "here): expected 1"
            )
        if not chunked and (
            not self.decode_first
            or not self.split_prompts
            or self.budget_grid is not None
            or self.cascade_attention
        ):
            raise ValueError(
                "decode_first, split_prompts, budget_grid and cascade_attention are options of "
                f"scheduler='chunked' (scheduler={self.scheduler!r} here)"
            )
        tokens = self.max_num_batched_tokens
        if tokens is None:
            tokens = self._default_budget(chunked, limit)
            object.__setattr__(self, "max_num_batched_tokens", tokens)
        check_number("max_num_batched_tokens", tokens, low=1, integer=True)
        if tokens < self.max_model_len and not (chunked and self.split_prompts):
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens!r} is out of range: it must be "
                f">= max_model_len={self.max_model_len} (prompts are not split: the longest "
                "prompt must fit one prefill)"
            )
        if chunked and tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens={tokens!r} is out of range: with the chunked "
                f"scheduler it must be >= max_num_seqs={self.max_num_seqs} (every running "
                "request's decode token fits the budget, as vLLM v1 requires)"
            )
        if self.budget_grid is not None:
            object.__setattr__(self, "budget_grid", self._budgets(self.budget_grid, int(tokens)))

    def _default_budget(self, chunked: bool, limit: int | None) -> int:
        """The default token budget (``max_num_batched_tokens=None``): vLLM's (2048;
        ``vllm-v0``: at least ``max_model_len``; chunked with a ``budget_grid``: its
        largest; whole prompts: at least ``max_model_len``), cut to the profile's largest
        prefill ``limit``."""
        tokens = 2048 if chunked else max(int(self.max_model_len), 2048)
        if chunked and self.budget_grid is not None:  # the grid's largest budget
            try:
                tokens = int(max(self.budget_grid))
            except (TypeError, ValueError):
                pass  # _budgets names what is wrong with the grid
        if chunked and not self.split_prompts:
            tokens = max(tokens, int(self.max_model_len))
        if limit is None:
            return tokens
        if self.max_model_len > limit:  # the default derives from it: name what was set
            raise ValueError(
                f"max_model_len={self.max_model_len!r} is out of range: a prompt of up to "
                f"max_model_len - 1 tokens must fit one prefill, and the profile covers "
                f"prefills of up to {limit} tokens (no extrapolation); expected "
                f"max_model_len <= {limit}"
            )
        return min(tokens, limit)

    def _budgets(self, grid: Any, tokens: int) -> tuple[int, ...]:
        if isinstance(grid, (str, bytes)) or not hasattr(grid, "__iter__"):
            raise ValueError(
                f"budget_grid={grid!r} is invalid: expected a list of increasing integers"
            )
        out = tuple(grid)
        lo = self.max_num_seqs if self.split_prompts else max(self.max_num_seqs, self.max_model_len)
        for i, g in enumerate(out):
            check_number(f"budget_grid[{i}]", g, low=lo, high=tokens, integer=True)
        if not out or any(b <= a for a, b in zip(out, out[1:], strict=False)):
            raise ValueError(
                f"budget_grid={list(out)!r} is invalid: expected a non-empty list of strictly "
                f"increasing integers in {lo}..max_num_batched_tokens={tokens}"
            )
        return tuple(int(g) for g in out)

    # what the shared event loop (batch_env.core) reads
    @property
    def sla_ms(self) -> float:
        """The deadline the event loop tracks per request: the TTFT target."""
        return self.ttft_sla_ms

    decision_interval_ms = None  # no ticks: every iteration boundary is an epoch

    @classmethod
    def from_arguments(cls, arguments: dict[str, Any]) -> LLMConfig:
        """The configuration from an env constructor's ``locals()`` (other entries ignored)."""
        return cls(**{f.name: arguments[f.name] for f in fields(cls) if f.name in arguments})

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-friendly dict of the configuration."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["reward_weights"] = self.reward_weights.to_dict()
        d["grid"] = None if self.grid is None else list(self.grid)
        d["lengths"] = None if self.lengths is None else self.lengths.to_dict()
        d["budget_grid"] = None if self.budget_grid is None else list(self.budget_grid)
        return d


@dataclass(frozen=True)
class LLMConfigV1(LLMConfig):
    """Configuration of ``batch_env/LLMBatching-v1``: :class:`LLMConfig` with the chunked
    scheduler by default (vLLM v1's engine)."""

    scheduler: str = "chunked"


@dataclass(frozen=True)
class RequestClass:
    """One class of requests of an ``LLMBatching-v2`` workload (``classes=[...]``).

    :param name: the class's name (unique; the summary's ``classes`` keys).
    :param share: its share of the arrivals of the env's ``workload`` (> 0; the shares
        are normalized; ``None``: 1): each arrival is of class ``c`` with probability
        ``share_c / sum of shares``, drawn from the request-size stream.
    :param workload: instead of a share, its own arrival process or trace (a workload
        dict or :class:`batch_env.workload.Workload`); either every class has one (the
        env's arrivals are their superposition, and the env takes no ``workload``) or
        none has. A trace's token columns give the class's lengths unless ``lengths``
        is set.
    :param ttft_sla_ms: its TTFT target (``None``: the env's ``ttft_sla_ms``).
    :param tpot_sla_ms: its TPOT target (``None``: the env's ``tpot_sla_ms``).
    :param weight: what one of its SLA misses counts in the reward's SLA term (>= 0; 1:
        as one miss of the env's ``reward_weights.sla``).
    :param lengths: its prompt and output lengths (a :class:`batch_env.workload.RequestLengths`
        or its dict; ``None``: the env's lengths, or a trace workload's token columns).
    """

    name: str
    share: float | None = None
    ttft_sla_ms: float | None = None
    tpot_sla_ms: float | None = None
    weight: float = 1.0
    lengths: Any = None
    workload: Any = None

    @classmethod
    def from_any(cls, spec: Any, index: int) -> RequestClass:
        """A class from itself or a dict of its fields; errors name ``classes[index]``."""
        where = f"classes[{index}]"
        if isinstance(spec, RequestClass):
            spec = asdict(spec) | {"lengths": spec.lengths, "workload": spec.workload}
        if not isinstance(spec, Mapping):
            raise ValueError(
                f"{where}={spec!r} is invalid: expected a dict with 'name' and any of "
                f"{[f.name for f in fields(cls)][1:]}"
            )
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(spec) - set(names))
        if unknown:
            raise ValueError(f"{where} has unknown field(s) {unknown}: allowed fields are {names}")
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.name={name!r} is invalid: expected a non-empty string")
        if spec.get("share") is not None:
            check_number(f"{where}.share", spec["share"], low=0.0, low_inclusive=False)
        workload = spec.get("workload")
        if workload is not None:
            if spec.get("share") is not None:
                raise ValueError(
                    f"{where}: give either share={spec['share']!r} (of the env's workload) or "
                    "its own workload, not both"
                )
            try:
                workload = make_workload(workload)
            except ValueError as e:
                raise ValueError(f"{where}.workload: {e}") from e
        for key in ("ttft_sla_ms", "tpot_sla_ms"):
            if spec.get(key) is not None:
                check_number(f"{where}.{key}", spec[key], low=0.0, low_inclusive=False)
        check_number(f"{where}.weight", spec.get("weight", 1.0), low=0.0)
        lengths = spec.get("lengths")
        try:
            lengths = make_lengths(lengths) if lengths is not None else None
        except ValueError as e:
            raise ValueError(f"{where}.{e}") from e
        return cls(
            name=name,
            share=None if spec.get("share") is None else float(spec["share"]),
            workload=workload,
            ttft_sla_ms=None if spec.get("ttft_sla_ms") is None else float(spec["ttft_sla_ms"]),
            tpot_sla_ms=None if spec.get("tpot_sla_ms") is None else float(spec["tpot_sla_ms"]),
            weight=float(spec.get("weight", 1.0)),
            lengths=lengths,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-friendly dict."""
        d = asdict(self)
        d["lengths"] = None if self.lengths is None else self.lengths.to_dict()
        d["workload"] = None if self.workload is None else self.workload.to_dict()
        return d


#: The admission orders of ``LLMBatching-v2`` (``orders``): first come first served,
#: earliest TTFT deadline first, shortest prompt (prompt + generated tokens) first, class
#: priority (the first class of ``classes`` first), and shortest remaining output first,
#: an oracle (it reads the true output lengths: only on an env made with
#: ``oracle_info=True``). Ties, and the order within a class, are first come first served.
ADMISSION_ORDERS = (
    "fcfs",
    "edf",
    "shortest-prompt",
    "class-priority",
    "srpt",
    "longest-prefix",
)


@dataclass(frozen=True)
class LLMConfigV2(LLMConfigV1):
    """Configuration of ``batch_env/LLMBatching-v2``: :class:`LLMConfigV1` (the chunked
    scheduler by default), the request classes and the admission orders.

    :param classes: the workload's request classes (a list of :class:`RequestClass` or
        their dicts, at least one; their names unique); ``None``: one class with the env's
        SLAs and lengths, v1's behaviour.
    :param orders: the admission orders the action chooses from (:data:`ADMISSION_ORDERS`,
        distinct; default ``("fcfs",)``: v1's action space). With more than one, the action
        is a product: ``a = (order index * len(budget_grid) + budget index) * len(grid) +
        cap index``.
    :param clock_grid: the GPU SM clocks (MHz) the action chooses from (strictly
        increasing, each within the profile's GPU's range; the env checks that), or
        ``None`` (default): no clock in the action, the episode runs at the env's
        ``clock_mhz``. With clocks the action is ``a = ((clock index * len(orders) +
        order index) * len(budget_grid) + budget index) * len(grid) + cap index``; each
        episode starts at the grid's highest clock.
    :param clock_latency_ms: how long a clock change takes to take effect (ms, >= 0; with
        a ``clock_grid`` only): the clock asked for is pending until then, and the
        iterations that start before it run at the clock in force
        (:mod:`batch_env.llm.clock`); 0 (default): at once.
    :param longest_prefix_fcfs_above: the ``longest-prefix`` order (SGLang's longest prefix
        match) admits first come first served while more than this many requests wait
        (SGLang's switch: 128); ``None``: never.
    """

    classes: tuple[RequestClass, ...] | None = None
    orders: tuple[str, ...] = ("fcfs",)
    clock_grid: tuple[float, ...] | None = None
    clock_latency_ms: float = 0.0
    longest_prefix_fcfs_above: int | None = 128

    def __post_init__(self, profile_max_batch_tokens: int | None = None) -> None:
        super().__post_init__(profile_max_batch_tokens)
        self._check_orders()
        if self.longest_prefix_fcfs_above is not None:
            check_number(
                "longest_prefix_fcfs_above", self.longest_prefix_fcfs_above, low=0, integer=True
            )
        self._check_clocks()
        if self.classes is None:
            return
        if isinstance(self.classes, (str, bytes, Mapping)) or not hasattr(self.classes, "__iter__"):
            raise ValueError(
                f"classes={self.classes!r} is invalid: expected a list of classes (dicts "
                "with a 'name')"
            )
        classes = tuple(RequestClass.from_any(c, i) for i, c in enumerate(self.classes))
        if not classes:
            raise ValueError("classes=[] is invalid: expected at least one class (or None)")
        own = [c.workload is not None for c in classes]
        if any(own) and not all(own):
            raise ValueError(
                "classes: either every class has its own workload (the arrivals are their "
                f"superposition) or none has (shares of the env's workload); here "
                f"{[c.name for c in classes if c.workload is not None]} have one and "
                f"{[c.name for c in classes if c.workload is None]} do not"
            )
        names = [c.name for c in classes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"classes: the names {dup} are used more than once; names are unique")
        object.__setattr__(self, "classes", classes)

    def _check_orders(self) -> None:
        orders = self.orders
        if isinstance(orders, (str, bytes)) or not hasattr(orders, "__iter__"):
            raise ValueError(
                f"orders={orders!r} is invalid: expected a list of admission orders from "
                f"{list(ADMISSION_ORDERS)}"
            )
        orders = tuple(orders)
        for i, o in enumerate(orders):
            if o not in ADMISSION_ORDERS:
                raise ValueError(
                    f"orders[{i}]={o!r} is invalid: allowed values are {list(ADMISSION_ORDERS)}"
                )
        if not orders or len(set(orders)) != len(orders):
            raise ValueError(
                f"orders={list(orders)!r} is invalid: expected a non-empty list of distinct "
                f"orders from {list(ADMISSION_ORDERS)}"
            )
        object.__setattr__(self, "orders", orders)

    def _check_clocks(self) -> None:
        grid = self.clock_grid
        check_number("clock_latency_ms", self.clock_latency_ms, low=0.0, high=1e6)
        if grid is None:
            if self.clock_latency_ms:
                raise ValueError(
                    f"clock_latency_ms={self.clock_latency_ms!r} is invalid without a "
                    "clock_grid: only a clock the action sets can change (give clock_grid)"
                )
            return
        if isinstance(grid, (str, bytes)) or not hasattr(grid, "__iter__"):
            raise ValueError(
                f"clock_grid={grid!r} is invalid: expected a list of increasing SM clocks in MHz"
            )
        out = tuple(grid)
        for i, f in enumerate(out):
            check_number(f"clock_grid[{i}]", f, low=1.0, high=1e5)
        if not out or any(b <= a for a, b in zip(out, out[1:], strict=False)):
            raise ValueError(
                f"clock_grid={list(out)!r} is invalid: expected a non-empty list of strictly "
                "increasing SM clocks in MHz"
            )
        object.__setattr__(self, "clock_grid", tuple(float(f) for f in out))

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-friendly dict of the configuration."""
        d = super().to_dict()
        d["classes"] = None if self.classes is None else [c.to_dict() for c in self.classes]
        d["orders"] = list(self.orders)
        d["clock_grid"] = None if self.clock_grid is None else list(self.clock_grid)
        return d
