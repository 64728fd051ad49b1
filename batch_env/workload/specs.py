"""Workloads from dict specs: :func:`make_workload` and the kinds it knows.

:func:`make_workload` builds a workload from a dict such as
``{"kind": "poisson", "rate_per_s": 300}`` (or ``{"kind": "gamma", "cv": 2, "load": 0.8}``
together with a reference throughput), with clear errors for bad specs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..checks import positive
from .arrivals import MMPP, Gamma, Poisson, Workload
from .random_load import RandomLoad
from .sessions import Sessions
from .superposition import Superposition
from .traces import Trace

__all__ = ["WORKLOAD_KINDS", "make_workload"]

# ----------------------------------------------------------------------------------
# Factory
# ----------------------------------------------------------------------------------

#: Workload classes by ``kind``.
WORKLOAD_KINDS: dict[str, type[Workload]] = {
    "poisson": Poisson,
    "mmpp": MMPP,
    "gamma": Gamma,
    "trace": Trace,
    "random-load": RandomLoad,
    "superposition": Superposition,
    "sessions": Sessions,
}

# which field "load" replaces (None: "load" rescales the shape given by other fields)
_RATE_FIELD: dict[str, str | None] = {
    "poisson": "rate_per_s",
    "gamma": "rate_per_s",
    "mmpp": None,
    "trace": "target_rate_per_s",
    "random-load": None,
    "superposition": None,
    "sessions": "rate_per_s",
}


def make_workload(
    spec: Workload | Mapping[str, Any], max_throughput_rps: float | None = None
) -> Workload:
    """Build a workload from a spec.

    ``spec`` is a :class:`Workload` (returned as is) or a dict with a ``"kind"`` in
    ``poisson``, ``mmpp``, ``gamma``, ``trace`` and that kind's fields, e.g.
    ``{"kind": "gamma", "rate_per_s": 300, "cv": 2.0}``. Instead of a rate the dict may
    give ``"load": rho`` (> 0): the workload is then rescaled with
    :meth:`Workload.with_mean_rate` to ``rho * max_throughput_rps``. ``load`` replaces
    ``rate_per_s`` for poisson and gamma, and ``target_rate_per_s`` (and ``rate_scale``)
    for a trace; for mmpp ``rates_per_s`` is still required and gives the shape.

    :param spec: a workload or a dict spec.
    :param max_throughput_rps: the reference throughput (requests per second) that
        ``load`` is relative to; required when the spec has ``load``.
    :return: the workload.
    :raises ValueError: on an unknown kind or field, a missing field, a wrong type, a
        NaN or non-positive rate, ``load`` together with a rate, or ``load`` without
        ``max_throughput_rps``; the message names the field, the value and what is allowed.
    """
    if isinstance(spec, Workload):
        return spec
    kind = _spec_kind(spec)
    if kind == "superposition":
        return _superposition(spec, max_throughput_rps)
    if "load_range" in spec and kind != "random-load":
        return _with_load_range(spec, kind, max_throughput_rps)
    cls = WORKLOAD_KINDS[kind]
    flds = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in flds]
    allowed = ["kind", *names, "load"]
    for key in spec:
        if key not in allowed:
            raise ValueError(
                f"make_workload: field {key!r} (value {spec[key]!r}) is not a field of kind "
                f"{kind!r}; allowed fields: {allowed}"
            )
    kwargs = {k: v for k, v in spec.items() if k not in ("kind", "load")}
    if kind == "random-load" and isinstance(kwargs.get("base"), Mapping):
        kwargs["base"] = make_workload(kwargs["base"], max_throughput_rps)  # built first
    load: Any = spec.get("load")  # a positive float once checked (below)
    has_load = "load" in spec
    rate_field = _RATE_FIELD[kind]
    if has_load:
        load = positive(load, "load", f"make_workload({kind})")
        if max_throughput_rps is None:
            raise ValueError(
                f"make_workload({kind}): load={load!r} needs max_throughput_rps (the reference "
                "throughput the load is relative to); pass it or give a rate instead"
            )
        mt = positive(max_throughput_rps, "max_throughput_rps", f"make_workload({kind})")
        if rate_field is not None and kwargs.get(rate_field) is not None:
            raise ValueError(
                f"make_workload({kind}): give either load={load!r} or "
                f"{rate_field}={kwargs[rate_field]!r}, not both"
            )
        if kind == "trace" and kwargs.get("rate_scale", 1.0) != 1.0:
            raise ValueError(
                f"make_workload(trace): give either load={load!r} or "
                f"rate_scale={kwargs['rate_scale']!r}, not both"
            )
        if rate_field == "rate_per_s":
            kwargs[rate_field] = 1.0
    for f in flds:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in kwargs:
            extra = " (or 'load' with max_throughput_rps)" if f.name == rate_field else ""
            raise ValueError(
                f"make_workload({kind}): missing field {f.name!r}{extra}; fields: {names}"
            )
    wl = cls(**kwargs)
    if has_load:
        wl = wl.with_mean_rate(load * mt)
    return wl


def _superposition(spec: Mapping[str, Any], max_throughput_rps: float | None) -> Workload:
    """``{"kind": "superposition", "parts": [spec, ...]}``: each part built first."""
    extra = sorted(set(spec) - {"kind", "parts"})
    if extra:
        raise ValueError(
            f"make_workload(superposition): field(s) {extra} are not fields of kind "
            "'superposition'; allowed fields: ['kind', 'parts']"
        )
    parts = spec.get("parts")
    if isinstance(parts, (str, bytes, Mapping)) or not hasattr(parts, "__iter__") or not parts:
        raise ValueError(
            f"make_workload(superposition): parts={parts!r} is invalid: expected a non-empty "
            "list of workload specs"
        )
    return Superposition(tuple(make_workload(p, max_throughput_rps) for p in parts))


def _spec_kind(spec: Any) -> str:
    """The lower-cased ``kind`` of a dict spec; ``ValueError`` naming what is wrong."""
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"make_workload: spec={spec!r} is invalid; expected a Workload or a dict with a "
            f"'kind' in {sorted(WORKLOAD_KINDS)}"
        )
    if "kind" not in spec:
        raise ValueError(
            f"make_workload: spec {dict(spec)!r} has no 'kind'; expected one of {sorted(WORKLOAD_KINDS)}"
        )
    kind = spec["kind"]
    if not isinstance(kind, str) or kind.lower() not in WORKLOAD_KINDS:
        raise ValueError(
            f"make_workload: kind={kind!r} is unknown; expected one of {sorted(WORKLOAD_KINDS)}"
        )
    return kind.lower()


def _with_load_range(
    spec: Mapping[str, Any], kind: str, max_throughput_rps: float | None
) -> Workload:
    """``{"kind": ..., "load_range": [lo, hi], ...}``: the kind at the max throughput
    (load 1), its rate times a factor drawn per episode (:class:`RandomLoad`)."""
    rate_field = _RATE_FIELD.get(kind)
    clash = [k for k in ("load", rate_field) if k is not None and spec.get(k) is not None]
    if clash:
        raise ValueError(
            f"make_workload({kind}): give either load_range={spec['load_range']!r} or {clash[0]}="
            f"{spec[clash[0]]!r}, not both"
        )
    if max_throughput_rps is None:
        raise ValueError(
            f"make_workload({kind}): load_range={spec['load_range']!r} needs max_throughput_rps (the "
            "reference throughput the load is relative to)"
        )
    base = make_workload(
        {**{k: v for k, v in spec.items() if k != "load_range"}, "load": 1.0}, max_throughput_rps
    )
    return RandomLoad(base, spec["load_range"])
