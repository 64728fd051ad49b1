"""A parametric family of node-level profiles, from GPU-flat to systolic-array-linear.

LazyBatching's headline gains (Choi, Kim and Rhu, HPCA 2021) were measured on an NPU whose
batch time grows about linearly with the batch, where the shipped GPU tables are nearly
flat at small batches. :func:`node_family` spans that range with four numbers, so that a
regime map (``batch-env regimes lazybatching``) can say where each claim holds:

* the compute part of a batch of ``b`` requests takes ``C(b) = t0 + a b``; the **slope
  ratio** ``r = a / t0`` sets the shape: ``r`` near 0.08 is a V100 running ResNet-50
  (Inoue's linear fit, ``resnet50-v100-linear``: 1.887 ms + 0.144 ms per request), about
  0.23 a T4 running BERT-base (a least-squares line through ``bert-base-t4``), and ``r``
  of 10 and more a systolic array kept full, whose time is proportional to the batch;
* every node adds a fixed **overhead** ``o`` (kernel launches, synchronisation), a
  fraction ``f`` of the batch-1 time split equally over the nodes, as the shipped node
  tables assume with ``f = 0.3`` (``scripts/node_tables.py``);
* the model has ``n`` nodes (its **depth**), node ``i`` taking a share ``w_i`` of the
  compute (equal shares by default);
* the batch-1 latency ``T(1)`` anchors the scale (default: the V100 ResNet-50 fit's).

So node ``i`` takes ``node_i(b) = o + w_i (t0 + a b)`` and the model
``T(b) = n o + t0 + a b``, with ``o = f T(1) / n`` and ``t0 = (1 - f) T(1) / (1 + r)``.
Power at batch ``b`` is the ``base`` profile's (its energy over its latency), so energy
scales with the time. With ``n = 1``, ``f = 0``, ``T(1) = tau0 + alpha`` and
``r = alpha / tau0`` of a shipped linear profile, the family gives that profile's latency
and energy at every batch size (``tests/test_regimes.py``).

The result is a profile dict of the table kind (one entry per batch size 1..B, so the
piecewise-linear interpolation is exact) with a ``nodes`` section, for
:func:`batch_env.profiles.load` or any env's ``profile=`` argument.

Imports: :mod:`batch_env.checks` and the profile loader only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..checks import check_number
from .batch_profile import Profile, load

__all__ = ["node_family", "slope_ratio_of_linear"]

#: the default batch-1 latency: Inoue's linear fit of ResNet-50 on a V100, tau0 + alpha
DEFAULT_BATCH1_MS = 1.8874 + 0.1438


def slope_ratio_of_linear(profile: str | Mapping[str, Any] | Profile) -> tuple[float, float]:
    """``(batch-1 latency in ms, slope ratio alpha / tau0)`` of a linear-kind profile: the
    family's parameters that reproduce it with one node and no overhead."""
    p = load(profile)
    if p.kind != "linear":
        raise ValueError(
            f"profile={p.name!r} is of kind {p.kind!r}: the slope ratio is read off a "
            "'linear' profile (latency tau0 + alpha b)"
        )
    tau0, alpha = float(p.raw["tau0_ms"]), float(p.raw["alpha_ms"])
    return tau0 + alpha, alpha / tau0


def node_family(
    *,
    slope_ratio: float,
    overhead_fraction: float = 0.3,
    n_nodes: int = 18,
    batch1_ms: float = DEFAULT_BATCH1_MS,
    max_batch_size: int = 32,
    base: str | Mapping[str, Any] | Profile = "resnet50-v100-linear",
    weights: Sequence[float] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """A profile of the family (see the module docstring) as a dict.

    :param slope_ratio: ``r = a / t0`` of the compute part, >= 0 (0: flat in the batch).
    :param overhead_fraction: ``f``, the fixed per-node overheads' share of the batch-1
        time, in [0, 1).
    :param n_nodes: the model's depth, >= 1.
    :param batch1_ms: the end-to-end latency of a batch of one, > 0.
    :param max_batch_size: the largest batch the table covers, >= 1.
    :param base: the profile whose power (energy over latency) at each batch size the
        family takes, and its idle power.
    :param weights: each node's share of the compute (positive, summing to 1); default
        equal shares.
    :param name: the profile's name (default: one built from the parameters).
    :raises ValueError: naming the parameter, its value and what is allowed.
    """
    check_number("slope_ratio", slope_ratio, low=0.0)
    check_number("overhead_fraction", overhead_fraction, low=0.0)
    if not overhead_fraction < 1.0:
        raise ValueError(f"overhead_fraction={overhead_fraction!r} is invalid: expected < 1")
    check_number("n_nodes", n_nodes, low=1, integer=True)
    check_number("batch1_ms", batch1_ms, low=0.0, low_inclusive=False)
    check_number("max_batch_size", max_batch_size, low=1, integer=True)
    if weights is None:
        w = [1.0 / n_nodes] * n_nodes
    else:
        w = [float(x) for x in weights]
        if (
            len(w) != n_nodes
            or not all(math.isfinite(x) and x > 0 for x in w)
            or abs(sum(w) - 1.0) > 1e-9
        ):
            raise ValueError(
                f"weights={list(weights)!r} is invalid: expected {n_nodes} positive shares "
                "summing to 1"
            )
    bp = load(base)
    o = overhead_fraction * batch1_ms / n_nodes
    t0 = (1.0 - overhead_fraction) * batch1_ms / (1.0 + slope_ratio)
    a = slope_ratio * t0
    sizes = list(range(1, max_batch_size + 1))
    compute = [t0 + a * b for b in sizes]
    total = [n_nodes * o + c for c in compute]
    power = [bp.power_w(b) for b in sizes]
    label = name or (f"family-r{slope_ratio:g}-f{overhead_fraction:g}-n{n_nodes}-t{batch1_ms:g}")
    return {
        "name": label,
        "model": f"{n_nodes}-node chain of the parametric family",
        "device": f"modelled (power of {bp.name})",
        "source": (
            "batch_env.profiles.parametric.node_family: per node o + w_i (t0 + a b), "
            f"r = a / t0 = {slope_ratio:g}, f = {overhead_fraction:g}, n = {n_nodes}, "
            f"T(1) = {batch1_ms:g} ms, power of {bp.name}"
        ),
        "kind": "table",
        "batch_sizes": sizes,
        "latency_ms": total,
        "power_w": power,
        "idle_power_w": bp.idle_power_w,
        "extrapolation": "none",
        "nodes": {
            "names": [f"node{i}" for i in range(n_nodes)],
            "latency_ms": [[o + wi * c for c in compute] for wi in w],
            "power_w": [list(power) for _ in w],
            "rule": (
                f"node_i(b) = o + w_i (t0 + a b): o = {o:.6g} ms = {overhead_fraction:g} of "
                f"T(1) over {n_nodes} nodes, t0 = {t0:.6g} ms, a = {a:.6g} ms per request, "
                f"w_i = {'equal shares' if weights is None else 'given'}"
            ),
        },
    }
