"""Executors: how a batch is executed and what it costs.

:class:`ProfileExecutor` simulates a batch from a profile: its duration is the profile's
mean latency (``service="deterministic"``) or a lognormal draw with that mean and a
coefficient of variation (``service="lognormal"``), and its energy is the batch's busy
power (``energy(b) / latency(b)``, docs/design.md: Energy) times the actual duration. Draws come
only from the env's service-time stream (docs/design.md: Random streams), in blocks, so that the
hot path is a list lookup.

Node-level execution (``NodeBatching-v0``) uses the same executor through three more
methods: ``new_group(b)`` returns a handle for ``b`` newly admitted requests at node 0,
``run_node(node, b, group)`` runs one node on a group of ``b`` requests and returns
``(duration_s, energy_j)``, and ``merge_groups(older, newer)`` returns the handle of two
groups that met at the same node. The profile executor needs no state (its handles are
``None``) and draws one service factor per node execution from the same stream as whole
batches, so with a one-node profile the node-level env sees exactly the graph-level
env's draws. The real PyTorch executor (:mod:`batch_env.real.torch_executor`) keeps each
group's activations in its handle and concatenates them on a merge. :func:`make_executor`
builds either from an env's ``executor=`` argument (torch is imported only for
``executor="torch"``).

LLM iterations (``LLMBatching-v0``) use :class:`LLMProfileExecutor` or its real twin
:class:`batch_env.real.llm_torch_executor.LLMTorchExecutor`, built by :func:`make_llm_executor`.

The two interfaces are written down as Protocols, :class:`Executor` (whole-model and
node-level batches) and :class:`LLMExecutor` (iterations); each executor implements its
Protocol fully, and ``tests/test_executor_protocol.py`` checks members and signatures. The
envs call these methods and nothing else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from .checks import init_arguments
from .profiles.batch_profile import Profile

if TYPE_CHECKING:
    from .profiles.llm_profile import LLMProfile

_BLOCK = 4096
EXECUTORS = ("profile", "torch")
#: Profile-name prefixes and the model of :mod:`batch_env.real.models` they describe, used
#: when ``executor="torch"`` is given without ``model=``.
_MODEL_OF_PROFILE = (
    ("resnet50", "resnet50"),
    ("bert-base", "bert-base"),
    ("googlenet", "googlenet"),
)


@runtime_checkable
class Executor(Protocol):
    """What ``DynamicBatching-v0`` and ``NodeBatching-v0`` need from an executor.

    Implemented by :class:`ProfileExecutor` and
    :class:`batch_env.real.torch_executor.TorchExecutor`.

    :ivar energy_source: ``"profile"``, ``"nvml"`` or ``"rapl"``: where energy comes from
        (reported in every step's ``info``).
    :ivar node_names: the model's chain of nodes (one name for a one-node profile).
    :ivar max_batch_size: the largest batch the executor accepts.
    """

    energy_source: str
    node_names: tuple[str, ...]
    max_batch_size: int

    def reset(self, rng: np.random.Generator) -> None:
        """Start an episode; service noise, if any, is drawn from ``rng``."""

    def run(self, b: int) -> tuple[float, float]:
        """Execute a whole-model batch of ``b`` requests: ``(duration_s, energy_j)``."""

    def new_group(self, b: int) -> Any:
        """A handle for ``b`` requests newly admitted at node 0."""

    def run_node(self, node: int, b: int, group: Any) -> tuple[float, float]:
        """Run node ``node`` on a group of ``b`` requests: ``(duration_s, energy_j)``."""

    def merge_groups(self, older: Any, newer: Any) -> Any:
        """The handle of two groups that met at the same node (older first)."""

    def metadata(self) -> dict[str, Any]:
        """What executed the batches (for ``get_config``)."""

    def close(self) -> None:
        """Release resources (a model, an energy meter); idempotent."""


@runtime_checkable
class LLMExecutor(Protocol):
    """What ``LLMBatching-v0`` needs from an executor.

    Implemented by :class:`LLMProfileExecutor` and
    :class:`batch_env.real.llm_torch_executor.LLMTorchExecutor`.

    :ivar energy_source: ``"profile"``, ``"nvml"`` or ``"rapl"``.
    :ivar needs_sequences: whether ``prefill`` / ``decode`` / ``release`` need the request
        ids and lengths (a real KV cache does; the simulated one does not, so the env
        builds no lists for it).
    """

    energy_source: str
    needs_sequences: bool

    def reset(self, rng: np.random.Generator) -> None:
        """Start an episode (drop every KV cache)."""

    def prefill(
        self,
        tokens: int,
        sq_sum: float,
        seqs: Sequence[int] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> tuple[float, float]:
        """One prefill iteration of prompts with ``tokens`` in all: ``(duration_s, energy_j)``."""

    def decode(
        self, batch: int, context_tokens: int, seqs: Sequence[int] | None = None
    ) -> tuple[float, float]:
        """One decode step of ``batch`` running requests: ``(duration_s, energy_j)``."""

    def mixed(
        self,
        chunk_tokens: int,
        chunk_attention: float,
        batch: int,
        context_tokens: int,
        chunks: Sequence[tuple[int, int, int]] | None = None,
        decodes: Sequence[int] | None = None,
    ) -> tuple[float, float]:
        """One mixed iteration of the chunked scheduler (``chunks``: ``(request, tokens
        already cached, chunk tokens)``; ``decodes``: the requests decoding, the oldest
        running ones in order): ``(duration_s, energy_j)``."""

    def release(self, seqs: Sequence[int]) -> None:
        """Drop the KV caches of finished or preempted requests."""

    def metadata(self) -> dict[str, Any]:
        """What executed the iterations (for ``get_config``)."""

    def close(self) -> None:
        """Release resources; idempotent."""


def make_executor(
    kind: str,
    profile: Profile,
    max_batch_size: int,
    service: str = "deterministic",
    service_cv: float | None = None,
    model: str | None = None,
    torch_device: str = "auto",
    options: dict | None = None,
) -> Executor:
    """Build the executor an env asked for.

    :param kind: ``"profile"`` (simulated from the profile) or ``"torch"`` (a real PyTorch
        model; its measured duration advances the env clock).
    :param profile: the env's profile (the torch executor uses it for the energy model when
        no NVML/RAPL counter is readable).
    :param max_batch_size: the largest batch.
    :param service: profile executor only: ``"deterministic"`` or ``"lognormal"``.
    :param service_cv: profile executor only: lognormal coefficient of variation.
    :param model: torch executor only: a model of :data:`batch_env.real.models.MODELS`; default
        inferred from the profile's name (``resnet50-*`` -> ``resnet50``, ``bert-base-*`` ->
        ``bert-base``).
    :param torch_device: torch executor only: ``"auto"``, ``"cpu"`` or ``"cuda"``.
    :param options: torch executor only: more keyword arguments of
        :class:`batch_env.real.torch_executor.TorchExecutor` (``width``, ``depth``, ``threads``,
        ``cuda_graphs``, ``weights``, ``warmup``, ``seed``, ``model_kwargs``).
    """
    if _is_profile_kind(kind, model, torch_device, options):
        return ProfileExecutor(profile, max_batch_size, service, service_cv)
    if service != "deterministic":
        raise ValueError(
            f"service={service!r} is invalid with executor='torch': real execution times are "
            "measured, so leave service='deterministic'"
        )
    if model is None:
        model = next(
            (m for prefix, m in _MODEL_OF_PROFILE if profile.name.startswith(prefix)), None
        )
        if model is None:
            raise ValueError(
                f"executor='torch' needs model=<name>: none can be inferred from profile "
                f"{profile.name!r} (known prefixes: {[p for p, _ in _MODEL_OF_PROFILE]})"
            )
    from .real.torch_executor import TorchExecutor

    options = _check_options(
        options, TorchExecutor, ("model", "max_batch_size", "torch_device", "profile")
    )
    return TorchExecutor(
        model, max_batch_size, torch_device=torch_device, profile=profile, **options
    )


_TORCH_DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]+)?")


def _is_profile_kind(kind: str, model: str | None, torch_device: Any, options: dict | None) -> bool:
    """``True`` for ``"profile"`` (whose executor takes no model, device or options),
    ``False`` for ``"torch"``; ``ValueError`` naming the value otherwise."""
    if not isinstance(torch_device, str) or not _TORCH_DEVICE.fullmatch(torch_device):
        raise ValueError(
            f"torch_device={torch_device!r} is invalid: expected 'auto', 'cpu', 'cuda' or "
            "'cuda:<index>'"
        )
    if kind == "profile":
        for name, value, default in (
            ("model", model, None),
            ("torch_device", torch_device, "auto"),
            ("executor_options", options, None),
        ):
            if value != default and not (name == "executor_options" and value == {}):
                raise ValueError(
                    f"{name}={value!r} is only used with executor='torch' (executor='profile' "
                    "simulates from the profile); leave it out"
                )
        return True
    if kind != "torch":
        raise ValueError(f"executor={kind!r} is invalid: allowed values are {list(EXECUTORS)}")
    return False


def make_llm_executor(
    kind: str,
    profile: LLMProfile,
    max_num_seqs: int,
    max_model_len: int,
    model: str | None = None,
    torch_device: str = "auto",
    options: dict | None = None,
) -> LLMExecutor:
    """Build the executor ``LLMBatching-v0`` asked for.

    :param kind: ``"profile"`` (iteration times from the LLM profile) or ``"torch"`` (a real
        GPT decoder with a KV cache; its measured iteration times advance the env clock).
    :param profile: the env's :class:`~batch_env.llm_profile.LLMProfile` (the torch executor
        takes energy from its power model when no NVML/RAPL counter is readable).
    :param max_num_seqs: the largest number of running requests.
    :param max_model_len: the longest context.
    :param model: torch executor only: a model of
        :data:`batch_env.real.llm_torch_executor.LLM_MODELS` (default ``"gpt-small"``).
    :param torch_device: torch executor only: ``"auto"``, ``"cpu"`` or ``"cuda"``.
    :param options: torch executor only: more keyword arguments of
        :class:`batch_env.real.llm_torch_executor.LLMTorchExecutor` (``width``, ``depth``,
        ``threads``, ``warmup``, ``seed``, ``weights``, ``model_kwargs``).
    """
    if _is_profile_kind(kind, model, torch_device, options):
        return LLMProfileExecutor(profile)
    from .real.llm_torch_executor import LLMTorchExecutor

    options = _check_options(
        options,
        LLMTorchExecutor,
        ("model", "max_num_seqs", "max_model_len", "torch_device", "profile"),
    )
    return LLMTorchExecutor(
        "gpt-small" if model is None else model,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        torch_device=torch_device,
        profile=profile,
        **options,
    )


def _check_options(options: Any, cls: type, set_by_env: tuple[str, ...]) -> dict:
    """``executor_options`` as a dict of ``cls``'s keyword arguments that the env does not
    set itself; ``ValueError`` naming the value, or the unknown keys and the allowed ones."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"executor_options={options!r} is invalid: expected a dict of options")
    allowed = sorted(init_arguments(cls) - set(set_by_env))
    unknown = sorted(set(options) - set(allowed), key=str)
    if unknown:
        raise ValueError(
            f"executor_options has unknown key(s) {unknown}: allowed keys are {allowed}"
        )
    return dict(options)


class ProfileExecutor:
    """Profile-backed simulated execution of whole-model batches.

    :param profile: the latency/energy profile.
    :param max_batch_size: largest batch size that will be requested.
    :param service: ``"deterministic"`` or ``"lognormal"``.
    :param service_cv: coefficient of variation for lognormal service (``None``: the
        profile's ``latency_cv``).
    """

    energy_source = "profile"

    def __init__(
        self,
        profile: Profile,
        max_batch_size: int,
        service: str = "deterministic",
        service_cv: float | None = None,
    ) -> None:
        self.profile = profile
        self.max_batch_size = int(max_batch_size)
        self.service = service
        lat, energy = profile.tables(self.max_batch_size)
        self.latency_s: list[float] = lat.tolist()
        self.energy_j: list[float] = energy.tolist()
        self.power_w: list[float] = [0.0] + [
            e / t for e, t in zip(energy[1:], lat[1:], strict=True)
        ]
        nlat, nen = profile.node_tables(self.max_batch_size)
        self.node_names: tuple[str, ...] = profile.node_names
        self.n_nodes = len(self.node_names)
        self.node_latency_s: list[list[float]] = nlat.tolist()
        self.node_energy_j: list[list[float]] = nen.tolist()
        if service == "lognormal":
            cv = service_cv if service_cv is not None else profile.latency_cv
            if cv is None:
                raise ValueError(
                    f"service='lognormal' needs service_cv: profile {profile.name!r} has no "
                    "latency_cv, so pass service_cv=<coefficient of variation >= 0>"
                )
            self.cv = float(cv)
        else:
            self.cv = 0.0
        self._sigma = math.sqrt(math.log1p(self.cv * self.cv))
        self._rng: np.random.Generator | None = None
        self._factors: list[float] = []
        self._k = 0

    def reset(self, rng: np.random.Generator) -> None:
        """Start a new episode drawing service noise from ``rng``.

        :param rng: the env's service-time stream.
        """
        self._rng = rng
        self._factors = []
        self._k = 0

    def _refill(self) -> None:
        s = self._sigma
        rng = self._rng
        if rng is None:
            raise RuntimeError("ProfileExecutor: call reset(rng) before running batches")
        z = rng.standard_normal(_BLOCK)
        # multiplicative factor with mean exactly 1: exp(s z - s^2 / 2)
        self._factors = np.exp(s * z - 0.5 * s * s).tolist()
        self._k = 0

    def run(self, b: int) -> tuple[float, float]:
        """Execute a batch of ``b`` requests.

        :param b: batch size, 1 <= b <= max_batch_size.
        :returns: ``(duration_s, energy_j)``.
        """
        if self._sigma == 0.0:
            return self.latency_s[b], self.energy_j[b]
        if self._k >= len(self._factors):
            self._refill()
        d = self.latency_s[b] * self._factors[self._k]
        self._k += 1
        return d, self.power_w[b] * d

    def new_group(self, b: int) -> None:
        """Handle for ``b`` requests admitted at node 0 (the profile executor keeps none)."""
        return None

    def merge_groups(self, older: None, newer: None) -> None:
        """Handle of two groups merged at a node (the profile executor keeps none)."""
        return None

    def metadata(self) -> dict[str, Any]:
        """What executed the batches (for ``get_config``)."""
        return {
            "executor": "profile",
            "profile": self.profile.name,
            "service": self.service,
            "service_cv": self.cv,
        }

    def close(self) -> None:
        """Nothing to release."""

    def run_node(self, node: int, b: int, group: None = None) -> tuple[float, float]:
        """Execute node ``node`` for a group of ``b`` requests.

        :param node: node index, ``0 <= node < n_nodes``.
        :param b: group size, 1 <= b <= max_batch_size.
        :param group: the group's handle (unused here).
        :returns: ``(duration_s, energy_j)``: the node table's mean (deterministic service)
            or a lognormal draw with that mean, at the node's busy power.
        """
        lat = self.node_latency_s[node][b]
        if self._sigma == 0.0:
            return lat, self.node_energy_j[node][b]
        if self._k >= len(self._factors):
            self._refill()
        d = lat * self._factors[self._k]
        self._k += 1
        return d, self.node_energy_j[node][b] / lat * d


class LLMProfileExecutor:
    """Simulated LLM iterations (``LLMBatching-v0``) from an LLM profile.

    ``prefill(tokens, sq_sum, seqs, lengths)`` and ``decode(batch, context_tokens, seqs)``
    return the iteration's ``(duration_s, energy_j)``: the profile's iteration time
    (deterministic: vLLM iteration times vary little at a fixed batch composition) and its
    busy power times that duration. See :mod:`batch_env.llm_profile` for the model behind
    each. The interface is the real executor's
    (:class:`batch_env.real.llm_torch_executor.LLMTorchExecutor`); ``needs_sequences = False``
    tells the env that the request ids (``seqs``), their ``lengths`` and :meth:`release`
    are not needed here, so the simulated path builds no lists for them.
    """

    energy_source = "profile"
    needs_sequences = False

    def __init__(self, profile: LLMProfile) -> None:
        """:param profile: a :class:`batch_env.llm_profile.LLMProfile`."""
        self.profile = profile

    def use_profile(self, profile: LLMProfile) -> None:
        """Time and power the coming iterations by ``profile`` (the server's profile at
        the SM clock it sets: :meth:`batch_env.llm.LLMServer.set`)."""
        self.profile = profile

    def reset(self, rng: np.random.Generator) -> None:
        """Start an episode (no randomness: iteration times are deterministic)."""

    def prefill(
        self,
        tokens: int,
        sq_sum: float,
        seqs: Sequence[int] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> tuple[float, float]:
        """One prefill iteration of prompts with ``tokens`` in all (``sq_sum`` = sum p^2);
        ``seqs`` and ``lengths`` (the requests and their token counts) are ignored."""
        p = self.profile
        d = p.prefill_time_s(tokens, sq_sum)
        return d, d * p.prefill_power_w(tokens)

    def decode(
        self, batch: int, context_tokens: int, seqs: Sequence[int] | None = None
    ) -> tuple[float, float]:
        """One decode step of ``batch`` requests whose KV contexts hold ``context_tokens``;
        ``seqs`` (the running requests) is ignored."""
        p = self.profile
        d = p.decode_time_s(batch, context_tokens)
        return d, d * p.decode_power_w(batch)

    def mixed(
        self,
        chunk_tokens: int,
        chunk_attention: float,
        batch: int,
        context_tokens: int,
        chunks: Sequence[tuple[int, int, int]] | None = None,
        decodes: Sequence[int] | None = None,
    ) -> tuple[float, float]:
        """One mixed iteration of the chunked scheduler: prompt chunks of ``chunk_tokens``
        in all (``chunk_attention`` = sum of ``c**2 + 2 c x`` over chunks of ``c`` tokens
        after ``x`` already cached) with one decode token for each of ``batch`` running
        requests whose KV contexts hold ``context_tokens``
        (:meth:`batch_env.llm_profile.LLMProfile.mixed_time_s`; the profile's power at the
        batch's total tokens). With no chunk it is :meth:`decode`, with no decode
        :meth:`prefill`, exactly. ``chunks`` and ``decodes`` (the requests) are ignored."""
        p = self.profile
        if chunk_tokens == 0:  # a decode iteration (most of them): the same figures, directly
            d = p.decode_time_s(batch, context_tokens)
            return d, d * p.decode_power_w(batch)
        d = p.mixed_time_s(chunk_tokens, chunk_attention, batch, context_tokens)
        return d, d * p.mixed_power_w(chunk_tokens, batch)

    def cascade(
        self,
        chunk_tokens: int,
        chunk_attention: float,
        batch: int,
        context_tokens: int,
        shared: int,
    ) -> tuple[float, float]:
        """:meth:`mixed` with cascade attention: a prefix of ``shared`` tokens that every
        request holds is read once (:meth:`batch_env.llm_profile.LLMProfile.cascade_time_s`;
        the power is :meth:`mixed`'s)."""
        p = self.profile
        d = p.cascade_time_s(chunk_tokens, chunk_attention, batch, context_tokens, shared)
        return d, d * p.mixed_power_w(chunk_tokens, batch)

    def release(self, seqs: Sequence[int]) -> None:
        """Nothing to release (no cache is kept)."""

    def metadata(self) -> dict[str, Any]:
        """What executed the iterations (for ``get_config``)."""
        return {"executor": "profile", "profile": self.profile.name}

    def close(self) -> None:
        """Nothing to release."""
