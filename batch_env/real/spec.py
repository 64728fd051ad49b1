"""ModelSpec: the bundle of arguments that says which model runs, and how.

A real executor (:class:`~batch_env.real.torch_executor.TorchExecutor`,
:class:`~batch_env.real.llm_torch_executor.LLMTorchExecutor`) and the profiler
(:func:`~batch_env.real.profiling.measure_profile`) all take the same bundle: the model's
name, its size (``width``, ``depth``, ``model_kwargs``), its weights (``weights`` or
``seed``), the torch threads, the warm-up runs and the device. They keep taking it as
keyword arguments (users and ``executor_options`` pass them so); each turns them into one
:class:`ModelSpec` first, which checks them, builds the model (:meth:`ModelSpec.build`) and
writes them into the metadata (:meth:`ModelSpec.to_dict`). A spec read from JSON / YAML
(:meth:`ModelSpec.from_dict`) goes back to keyword arguments with
:meth:`ModelSpec.keywords` (executors, the profiler) or :meth:`ModelSpec.executor_options`
(an env's ``executor_options``, next to ``model=`` and ``torch_device=``).

This module imports no torch at module level (only :meth:`ModelSpec.build` does), so a
spec can be written, checked and compared on a machine without torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..checks import ArgumentError, check_number

if TYPE_CHECKING:
    import torch

    from .models import NodeChainModel

__all__ = ["ModelSpec"]

_TORCH_DEVICE = re.compile(r"auto|cpu|cuda(?::[0-9]+)?")
#: arguments that are fields of the spec, so never inside ``model_kwargs``
_OWN_ARGUMENTS = ("name", "width", "depth", "seed", "weights")


class _ReadOnlyKwargs(Mapping[str, Any]):
    """A read-only copy of a mapping: hashable when its values are, picklable, and equal
    to any mapping with the same items."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any]) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return repr(self._items)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._items,))


def _or_none(name: str, value: Any, **bounds: Any) -> Any:
    """``check_number`` for a field that may also be ``None`` (the message says so)."""
    if value is None:
        return None
    try:
        return check_number(name, value, **bounds)
    except ValueError as e:
        raise ValueError(f"{e}, or None") from None


def _check_depth(depth: Any) -> int | tuple[int, ...] | None:
    if depth is None or isinstance(depth, (int, float)) or hasattr(depth, "dtype"):
        return _or_none("depth", depth, low=1, integer=True)
    if isinstance(depth, Sequence) and not isinstance(depth, str) and len(depth) > 0:
        try:
            return tuple(check_number("depth", d, low=1, integer=True) for d in depth)
        except ValueError:
            pass
    raise ValueError(
        f"depth={depth!r} is invalid: expected None (the real model), an integer >= 1 or a "
        "non-empty sequence of integers >= 1 (e.g. ResNet-50's blocks per stage)"
    )


def _check_model_kwargs(kw: Any) -> _ReadOnlyKwargs:
    if kw is None:
        return _ReadOnlyKwargs({})
    if not isinstance(kw, Mapping) or not all(isinstance(k, str) for k in kw):
        raise ValueError(
            f"model_kwargs={kw!r} is invalid: expected a mapping of model argument names (str) "
            "to values, e.g. {'image_size': 64}"
        )
    own = [k for k in kw if k in _OWN_ARGUMENTS]
    if own:
        raise ValueError(
            f"model_kwargs={dict(kw)!r} is invalid: {own} are set by ModelSpec's own fields "
            "(model, width, depth, seed, weights), not by model_kwargs"
        )
    out = dict(kw)
    dtype = out.get("dtype")
    if dtype is not None and type(dtype).__module__ == "torch":  # torch.float16 -> "float16"
        out["dtype"] = str(dtype).removeprefix("torch.")
    return _ReadOnlyKwargs(out)


@dataclass(frozen=True)
class ModelSpec:
    """Which model runs, and how: the arguments every real executor and the profiler share.

    :param model: a name in :data:`batch_env.real.models.MODELS` (checked by :meth:`build`,
        which knows the models; here only that it is a non-empty string).
    :param width: size multiplier > 0 (1.0 = the real model).
    :param depth: ``None`` (the real model), an integer >= 1 or a sequence of integers >= 1
        (kept as a tuple); which of them a model takes is checked by :meth:`build`.
    :param weights: a state_dict file (kept as a ``str``), or ``None`` for random weights.
    :param seed: seed of the random weights and inputs, an integer >= 0.
    :param model_kwargs: more model arguments (``image_size``, ``seq_len``, ``heads``,
        ``dtype``...). Kept as a read-only mapping (a copy: changing the caller's dict
        later changes nothing; hashable when its values are); a torch dtype is kept as its
        name (``"float16"``).
    :param threads: ``torch.set_num_threads`` value, an integer >= 1, or ``None`` to leave
        torch's setting (the executor sets it: threads are process-wide).
    :param warmup: warm-up runs, an integer >= 0 (what a run is, is the user's: see each
        executor and :func:`~batch_env.real.profiling.measure_profile`).
    :param torch_device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:<index>"`` (whether
        the device is there is checked when it is resolved, not here).
    :raises ValueError: naming the field, the value and what is allowed.

    Frozen: two specs with the same fields are equal (and hash alike).
    """

    model: str
    width: float = 1.0
    depth: int | Sequence[int] | None = None
    weights: str | os.PathLike[str] | None = None
    seed: int = 0
    model_kwargs: Mapping[str, Any] = field(default_factory=dict)
    threads: int | None = None
    warmup: int = 3
    torch_device: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(
                f"model={self.model!r} is invalid: expected a model name (a non-empty str), "
                "e.g. 'resnet50'"
            )
        if not isinstance(self.torch_device, str) or not _TORCH_DEVICE.fullmatch(self.torch_device):
            raise ValueError(
                f"torch_device={self.torch_device!r} is invalid: expected 'auto', 'cpu', 'cuda' "
                "or 'cuda:<index>'"
            )
        if self.weights is not None and not isinstance(self.weights, (str, os.PathLike)):
            raise ValueError(
                f"weights={self.weights!r} is invalid: expected None or the path of a "
                "state_dict file"
            )
        checked = {
            "width": check_number("width", self.width, low=0.0, low_inclusive=False),
            "depth": _check_depth(self.depth),
            "weights": None if self.weights is None else os.fspath(self.weights),
            "seed": check_number("seed", self.seed, low=0, integer=True),
            "model_kwargs": _check_model_kwargs(self.model_kwargs),
            "threads": _or_none("threads", self.threads, low=1, integer=True),
            "warmup": check_number("warmup", self.warmup, low=0, integer=True),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    # ------------------------------------------------------------- conversions

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-friendly (``depth`` a list or int, ``model_kwargs`` a dict), in
        field order; :meth:`from_dict` takes it back."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["depth"] = list(self.depth) if isinstance(self.depth, tuple) else self.depth
        d["model_kwargs"] = dict(self.model_kwargs)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelSpec:
        """A spec from a mapping of its fields (JSON, YAML, an executor's keywords plus
        ``model``); ``model`` is required, the other fields take their defaults.

        :raises ValueError: for a non-mapping, a missing ``model``, or a bad value.
        :raises ArgumentError: (a ``ValueError`` and a ``TypeError``) for unknown keys,
            naming them and the allowed ones.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"ModelSpec.from_dict: {d!r} is invalid: expected a mapping of fields")
        allowed = [f.name for f in fields(cls)]
        unknown = sorted((k for k in d if k not in allowed), key=str)
        if unknown:
            raise ArgumentError(
                f"ModelSpec has unknown key(s) {unknown}: allowed keys are {allowed}"
            )
        if "model" not in d:
            raise ValueError(
                f"ModelSpec needs 'model' (a model name); got keys {sorted(d, key=str)}"
            )
        return cls(**d)

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~batch_env.real.torch_executor.TorchExecutor`,
        :class:`~batch_env.real.llm_torch_executor.LLMTorchExecutor` and
        :func:`~batch_env.real.profiling.measure_profile` that this spec fills: every
        field but ``model`` (their first argument)."""
        d = self.to_dict()
        del d["model"]
        return d

    def executor_options(self) -> dict[str, Any]:
        """An env's ``executor_options`` for this spec: :meth:`keywords` less
        ``torch_device`` (the env takes ``model=`` and ``torch_device=`` itself)."""
        d = self.keywords()
        del d["torch_device"]
        return d

    # ------------------------------------------------------------- the model

    def build(self, device: torch.device | str | None = None) -> NodeChainModel:
        """The model (:func:`batch_env.real.models.build_model`), moved to ``device``.

        :param device: where to put it (``None``: ``torch_device`` resolved by
            :func:`~batch_env.real.device.resolve_device`). Threads and warm-up are
            not applied here: they belong to whoever runs the model.
        :raises ValueError: for an unknown model, a size it does not take, or a weights
            file that is not a matching state_dict.
        :raises FileNotFoundError: if ``weights`` does not exist.
        """
        from .models import build_model

        if device is None:
            from .device import resolve_device

            device = resolve_device(self.torch_device)
        model = build_model(
            self.model,
            width=self.width,
            depth=self.depth,
            seed=self.seed,
            weights=self.weights,
            **self.model_kwargs,
        )
        return model.to(device)
