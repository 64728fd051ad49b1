"""Latency / energy profiles of one model on one device: load, validate, interpolate.

A profile says how long a batch of ``b`` requests takes and how much energy it uses.
Profiles are JSON files (or dicts) of two kinds; every number a shipped profile holds
cites its source in the file's ``citations``.

``kind: "table"`` (the default)
    ``batch_sizes`` (strictly increasing positive integers, at least two), ``latency_ms``
    (mean batch time, > 0), either ``power_w`` (average power while running that batch,
    > 0; energy = power x latency) or ``energy_j`` (> 0), ``idle_power_w`` (>= 0), optional
    ``latency_cv`` (>= 0) and optional ``extrapolation`` (``"none"``, the default, or
    ``"linear"``).

``kind: "linear"``
    ``alpha_ms``, ``tau0_ms`` (batch time = tau0 + alpha * b), ``beta_j``, ``c0_j``
    (batch energy = c0 + beta * b), ``idle_power_w``, optional ``latency_cv``; defined for
    every b >= 1.

Both kinds also need ``name``, ``model``, ``device`` and ``source`` (a citation, or
"measured on ... with ..."), and may carry ``idle_power_source`` (where the idle figure
comes from; "assumed ..." where nothing publishes one). Fields that start with ``_`` and
the fields ``notes`` and ``citations`` are free-form documentation; any other field is
ignored with a warning.

``nodes`` (optional, table kind only): per-node tables for ``NodeBatching-v0``::

    "nodes": {"names": ["stem", "layer1.0", ...],
              "latency_ms": [[...], ...],     # one row per node, one entry per batch size
              "power_w": [[...], ...],        # or "energy_j"; same shape
              "rule": "how the split was made or measured",
              "tolerance": 0.01}              # optional, default 0.01

The rows use the profile's ``batch_sizes`` and are interpolated by the same rule as the
end-to-end table (so a node table is valid exactly where the profile is). At every listed
batch size the node latencies must sum to the end-to-end ``latency_ms`` within
``tolerance`` (relative), else loading fails: the node-level env and the graph-level env
must describe the same model. A profile without ``nodes`` is one node named ``"model"``
(its end-to-end table), which makes ``NodeBatching-v0`` reproduce ``DynamicBatching-v0``.

Interpolation rule (table kind)
    Latency and energy are interpolated piecewise-linearly in ``b`` between listed sizes;
    power is derived as energy / latency, never interpolated. At a listed size the table
    value is returned exactly.

    *Below the smallest listed size* ``b0`` (tables that start above 1): each of latency and
    energy continues the straight line through the first two points; where that line gives
    a value <= 0, the value at ``b0`` is used instead (clamp). So a table starting at b=2
    still serves b=1.

    *Above the largest listed size* ``bN``: an error (``ValueError``) unless the profile
    declares ``"extrapolation": "linear"``; then each of latency and energy continues the
    line through the last two points, but never drops below its value at ``bN`` (a last
    segment that decreases is continued flat), so values stay positive.

Units: profiles store milliseconds; this module returns seconds, joules and watts.
:meth:`Profile.tables` precomputes per-batch-size lookups so a simulator's hot path never
interpolates.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import os
import warnings
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..checks import ArgumentError, is_real_number

__all__ = ["Profile", "available", "load"]

Kind = Literal["table", "linear"]
Extrapolation = Literal["none", "linear"]

_KINDS = ("table", "linear")
_EXTRAPOLATIONS = ("none", "linear")
_COMMON_REQUIRED = ("name", "model", "device", "source", "idle_power_w")
_TABLE_ONLY = ("batch_sizes", "latency_ms", "power_w", "energy_j")
_LINEAR_ONLY = ("alpha_ms", "tau0_ms", "beta_j", "c0_j")
_OPTIONAL = (
    "kind",
    "idle_power_source",
    "latency_cv",
    "extrapolation",
    "nodes",
    "notes",
    "citations",
)


class Profile:
    """A validated latency / energy profile of one model on one device.

    Build one with :func:`load` (a shipped name, a JSON path, a dict or a Profile) or
    ``Profile(data, origin=...)``. Treat the attributes as read-only.

    Attributes: ``name``, ``model``, ``device``, ``source`` (citation), ``kind``
    (``"table"`` or ``"linear"``), ``idle_power_w``, ``idle_power_source``, ``latency_cv``
    (``None`` when the profile gives none), ``extrapolation`` (``"none"`` or ``"linear"``;
    always ``"linear"`` for the linear kind), ``max_table_batch`` (largest valid batch size,
    ``None`` when unbounded), ``batch_sizes`` (tuple for the table kind, ``None`` for the
    linear kind), ``notes``, ``citations``, ``raw`` (a copy of the dict it was loaded from)
    and ``origin`` (where it was loaded from; named in error messages).

    :param data: the profile's fields (see the module docstring).
    :param origin: where ``data`` came from (a file path, ``"dict"`` or ``"shipped profile
        'name'"``).
    :raises ValueError: if a field is missing or invalid; the message names the origin,
        the field, the bad value and what is allowed.
    """

    name: str
    model: str
    device: str
    source: str
    kind: Kind
    idle_power_w: float
    idle_power_source: str
    latency_cv: float | None
    extrapolation: Extrapolation
    max_table_batch: int | None
    batch_sizes: tuple[int, ...] | None
    notes: dict[str, Any]
    citations: dict[str, Any]
    raw: dict[str, Any]
    origin: str

    def __init__(self, data: Mapping[str, Any], origin: str = "dict") -> None:
        if not isinstance(data, Mapping):
            raise ValueError(
                f"{origin}: a profile must be a JSON object / dict, got {type(data).__name__}"
            )
        self.origin = origin
        self.raw = copy.deepcopy(dict(data))
        d = self.raw

        kind = d.get("kind", "table")
        if kind == "llm":  # an LLM profile (iteration times, KV cache), not a batch one
            raise ValueError(
                f"{origin}: field 'kind' = 'llm' is an LLM profile, for the LLM envs: load it "
                "with batch_env.profiles.load_llm (batch_env.llm_profile.load); "
                f"batch_env.profiles.load takes a batch-latency profile (kind {list(_KINDS)})"
            )
        if kind not in _KINDS:
            raise self._err("kind", kind, f"one of {list(_KINDS)}")
        self.kind = kind

        foreign = _LINEAR_ONLY if kind == "table" else _TABLE_ONLY
        for key in foreign:
            if key in d:
                other = "linear" if kind == "table" else "table"
                raise ValueError(
                    f"{origin}: field '{key}' belongs to kind '{other}' but this profile's kind "
                    f"is '{kind}' (set \"kind\": \"{other}\" or remove '{key}')"
                )
        known = _COMMON_REQUIRED + _OPTIONAL + (_TABLE_ONLY if kind == "table" else _LINEAR_ONLY)
        unknown = [k for k in d if not (str(k).startswith("_") or k in known)]
        if unknown:
            warnings.warn(f"{origin}: ignoring unknown profile field(s) {unknown}", stacklevel=3)

        required = _COMMON_REQUIRED + (
            ("batch_sizes", "latency_ms") if kind == "table" else _LINEAR_ONLY
        )
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(
                f"{origin}: missing required field(s) {missing} for kind '{kind}' "
                f"(required: {list(required)})"
            )

        for key in ("name", "model", "device", "source"):
            v = d[key]
            if not isinstance(v, str) or not v.strip():
                raise self._err(key, v, "a non-empty string")
        self.name, self.model, self.device, self.source = (
            d["name"],
            d["model"],
            d["device"],
            d["source"],
        )

        self.idle_power_w = self._scalar("idle_power_w")
        ips = d.get("idle_power_source", "not stated")
        if not isinstance(ips, str):
            raise self._err("idle_power_source", ips, "a string")
        self.idle_power_source = ips

        cv = d.get("latency_cv")
        if cv is not None:
            if not is_real_number(cv) or not math.isfinite(cv) or cv < 0:
                raise self._err("latency_cv", cv, "null or a finite number >= 0")
            cv = float(cv)
        self.latency_cv = cv

        notes = d.get("notes", {})
        self.notes = dict(notes) if isinstance(notes, Mapping) else {"text": notes}
        cit = d.get("citations", {})
        self.citations = dict(cit) if isinstance(cit, Mapping) else {"text": cit}

        if kind == "table":
            self._init_table()
        else:
            self._init_linear()
        self._init_nodes()

    # ----------------------------------------------------------------- validation

    def _err(self, field: str, value: Any, allowed: str) -> ValueError:
        return ValueError(
            f"{self.origin}: field '{field}' = {value!r} is invalid: must be {allowed}"
        )

    def _scalar(self, field: str) -> float:
        """A finite number >= 0 from ``raw[field]``."""
        v = self.raw[field]
        if not is_real_number(v) or not math.isfinite(v) or v < 0:
            raise self._err(field, v, "a finite number >= 0")
        return float(v)

    def _positive_list(self, field: str, n: int) -> np.ndarray:
        v = self.raw[field]
        if not isinstance(v, (list, tuple)):
            raise self._err(field, v, f"a list of {n} finite numbers > 0 (one per batch size)")
        if len(v) != n:
            raise ValueError(
                f"{self.origin}: field '{field}' has {len(v)} entries but 'batch_sizes' has {n}; "
                "they must have the same length"
            )
        for i, x in enumerate(v):
            if not is_real_number(x) or not math.isfinite(x) or x <= 0:
                raise ValueError(
                    f"{self.origin}: field '{field}'[{i}] = {x!r} is invalid: "
                    "must be a finite number > 0"
                )
        return np.asarray(v, dtype=np.float64)

    def _init_table(self) -> None:
        d = self.raw
        bs = d["batch_sizes"]
        if not isinstance(bs, (list, tuple)) or len(bs) < 2:
            raise self._err(
                "batch_sizes", bs, "a list of at least two strictly increasing positive integers"
            )
        for i, b in enumerate(bs):
            if not isinstance(b, numbers.Integral) or isinstance(b, bool) or b < 1:
                raise ValueError(
                    f"{self.origin}: field 'batch_sizes'[{i}] = {b!r} is invalid: "
                    "must be a positive integer"
                )
            if i and b <= bs[i - 1]:
                raise ValueError(
                    f"{self.origin}: field 'batch_sizes' = {list(bs)!r} is invalid: must be "
                    f"strictly increasing (entry {i} = {b!r} follows {bs[i - 1]!r})"
                )
        n = len(bs)
        self.batch_sizes = tuple(int(b) for b in bs)
        self._b = np.asarray(self.batch_sizes, dtype=np.float64)
        self._lat = self._positive_list("latency_ms", n) / 1000.0
        has_p, has_e = "power_w" in d, "energy_j" in d
        if has_p == has_e:
            raise ValueError(
                f"{self.origin}: give exactly one of the fields 'power_w' (W) or 'energy_j' (J) "
                f"in a table profile (found {'both' if has_p else 'neither'})"
            )
        if has_p:
            self._en = self._positive_list("power_w", n) * self._lat
        else:
            self._en = self._positive_list("energy_j", n)
        for arr in (self._b, self._lat, self._en):
            arr.flags.writeable = False

        ex = d.get("extrapolation", "none")
        if ex is None:
            ex = "none"
        if ex not in _EXTRAPOLATIONS:
            raise self._err("extrapolation", ex, f"one of {list(_EXTRAPOLATIONS)}")
        self.extrapolation = ex
        self.max_table_batch = None if ex == "linear" else self.batch_sizes[-1]

        # Slopes (per unit of b) used below the first and above the last listed size.
        db0, dbn = self._b[1] - self._b[0], self._b[-1] - self._b[-2]
        self._lo_slope = (
            (self._lat[1] - self._lat[0]) / db0,
            (self._en[1] - self._en[0]) / db0,
        )
        self._hi_slope = (
            max(0.0, (self._lat[-1] - self._lat[-2]) / dbn),
            max(0.0, (self._en[-1] - self._en[-2]) / dbn),
        )

    def _init_linear(self) -> None:
        d = self.raw
        self.batch_sizes = None
        self._alpha_s = self._scalar("alpha_ms") / 1000.0
        self._tau0_s = self._scalar("tau0_ms") / 1000.0
        self._beta = self._scalar("beta_j")
        self._c0 = self._scalar("c0_j")
        if self._alpha_s + self._tau0_s <= 0:
            raise ValueError(
                f"{self.origin}: fields 'alpha_ms' = {d['alpha_ms']!r} and 'tau0_ms' = "
                f"{d['tau0_ms']!r} give a zero batch time; at least one must be > 0"
            )
        if self._beta + self._c0 <= 0:
            raise ValueError(
                f"{self.origin}: fields 'beta_j' = {d['beta_j']!r} and 'c0_j' = {d['c0_j']!r} "
                "give a zero batch energy; at least one must be > 0"
            )
        ex = d.get("extrapolation", "linear")
        if ex != "linear":
            raise self._err(
                "extrapolation",
                ex,
                "'linear' or absent (a linear profile is defined for every batch size)",
            )
        self.extrapolation = "linear"
        self.max_table_batch = None

    def _init_nodes(self) -> None:
        """Validate the optional per-node tables (see the module docstring)."""
        self.node_rule = None
        self.node_tolerance = None
        self._node_profiles: list[Profile] | None = None
        nodes = self.raw.get("nodes")
        if nodes is None:
            self.node_names = ("model",)
            return
        if self.kind != "table":
            raise self._err(
                "nodes", "...", "absent: per-node tables need a profile of kind 'table'"
            )
        assert self.batch_sizes is not None  # a table profile has them
        if not isinstance(nodes, Mapping):
            raise self._err(
                "nodes", nodes, "an object with names, latency_ms, power_w or energy_j, rule"
            )
        names = nodes.get("names")
        if (
            not isinstance(names, (list, tuple))
            or not names
            or not all(isinstance(x, str) and x.strip() for x in names)
            or len(set(names)) != len(names)
        ):
            raise self._err("nodes.names", names, "a non-empty list of distinct non-empty strings")
        rule = nodes.get("rule")
        if not isinstance(rule, str) or not rule.strip():
            raise self._err("nodes.rule", rule, "a non-empty string saying how the split was made")
        tol = nodes.get("tolerance", 0.01)
        if not is_real_number(tol) or not math.isfinite(tol) or not 0 < tol < 1:
            raise self._err("nodes.tolerance", tol, "a number in (0, 1)")
        has_p, has_e = "power_w" in nodes, "energy_j" in nodes
        if has_p == has_e:
            raise ValueError(
                f"{self.origin}: give exactly one of 'nodes.power_w' or 'nodes.energy_j' "
                f"(found {'both' if has_p else 'neither'})"
            )
        ekey = "power_w" if has_p else "energy_j"
        n = len(names)
        for key in ("latency_ms", ekey):
            rows = nodes.get(key)
            if not isinstance(rows, (list, tuple)) or len(rows) != n:
                raise self._err(
                    f"nodes.{key}", rows, f"a list of {n} rows (one per node in nodes.names)"
                )
        subs = []
        for i, name in enumerate(names):
            sub = {
                "name": f"{self.name}/{name}",
                "model": self.model,
                "device": self.device,
                "source": self.source,
                "idle_power_w": 0.0,
                "batch_sizes": list(self.batch_sizes),
                "latency_ms": nodes["latency_ms"][i],
                ekey: nodes[ekey][i],
                "extrapolation": self.extrapolation,
            }
            subs.append(Profile(sub, origin=f"{self.origin}, node {i} ({name!r})"))
        total = np.sum([p._lat for p in subs], axis=0)
        rel = np.abs(total - self._lat) / self._lat
        worst = int(np.argmax(rel))
        if rel[worst] > tol:
            raise ValueError(
                f"{self.origin}: field 'nodes.latency_ms' disagrees with 'latency_ms': at batch "
                f"size {self.batch_sizes[worst]} the nodes sum to {total[worst] * 1e3:.6g} ms but "
                f"the end-to-end latency is {self._lat[worst] * 1e3:.6g} ms ({rel[worst]:.2%} "
                f"off, allowed nodes.tolerance = {tol:.2%})"
            )
        self.node_names = tuple(names)
        self.node_rule = rule
        self.node_tolerance = float(tol)
        self._node_profiles = subs

    @property
    def n_nodes(self) -> int:
        """Number of nodes in the model's chain (1 when the profile has no ``nodes``)."""
        return len(self.node_names)

    def node_tables(self, max_batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-node lookup tables for the node-level env's hot path.

        :param max_batch_size: the largest batch size B (checked as in :meth:`tables`).
        :returns: ``(latency_s, energy_j)``: float64 arrays of shape ``(n_nodes, B + 1)``;
            entry ``[i, b]`` is node ``i``'s mean latency / busy energy at batch ``b``
            (column 0 is 0.0). Without ``nodes`` the one row is the end-to-end table.
        """
        if self._node_profiles is None:
            lat, en = self.tables(max_batch_size)
            return lat[None, :], en[None, :]
        self.check_max_batch_size(max_batch_size)
        pairs = [p.tables(max_batch_size) for p in self._node_profiles]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])

    # ----------------------------------------------------------------- evaluation

    def _check_b(self, b: Any, field: str) -> int:
        ok = isinstance(b, numbers.Integral) and not isinstance(b, bool)
        if not ok and is_real_number(b) and math.isfinite(b) and float(b).is_integer():
            ok = True
        if not ok or int(b) < 1:
            raise ValueError(
                f"profile '{self.name}' ({self.origin}): {field} = {b!r} is invalid: "
                "must be an integer >= 1"
            )
        return int(b)

    def _range_error(self, field: str, b: int) -> ValueError:
        m = self.max_table_batch
        return ValueError(
            f"profile '{self.name}' ({self.origin}): {field} = {b} is out of range: allowed "
            f"1..{m} (the largest listed batch size is {m} and the profile declares no "
            'extrapolation; add "extrapolation": "linear" to the profile to extend it)'
        )

    def _eval(self, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Latency (s) and energy (J) at batch sizes ``b`` (float array, >= 1, in range)."""
        if self.kind == "linear":
            return self._tau0_s + self._alpha_s * b, self._c0 + self._beta * b
        xs = self._b
        lat = np.interp(b, xs, self._lat)
        en = np.interp(b, xs, self._en)
        lo = b < xs[0]
        if lo.any():
            for out, ys, slope in (
                (lat, self._lat, self._lo_slope[0]),
                (en, self._en, self._lo_slope[1]),
            ):
                v = ys[0] + (b[lo] - xs[0]) * slope
                out[lo] = np.where(v > 0, v, ys[0])
        hi = b > xs[-1]
        if hi.any():
            lat[hi] = self._lat[-1] + (b[hi] - xs[-1]) * self._hi_slope[0]
            en[hi] = self._en[-1] + (b[hi] - xs[-1]) * self._hi_slope[1]
        return lat, en

    def _point(self, b: Any) -> tuple[float, float]:
        bi = self._check_b(b, "batch size")
        if self.max_table_batch is not None and bi > self.max_table_batch:
            raise self._range_error("batch size", bi)
        lat, en = self._eval(np.array([bi], dtype=np.float64))
        return float(lat[0]), float(en[0])

    def latency_s(self, b: int) -> float:
        """Mean time to run one batch of ``b`` requests.

        :param b: batch size, an integer >= 1 (and <= ``max_table_batch`` when that is set).
        :returns: seconds.
        :raises ValueError: if ``b`` is not a valid batch size for this profile.
        """
        return self._point(b)[0]

    def energy_j(self, b: int) -> float:
        """Busy energy of one batch of ``b`` requests (idle energy is separate).

        :param b: batch size, an integer >= 1 (and <= ``max_table_batch`` when that is set).
        :returns: joules.
        :raises ValueError: if ``b`` is not a valid batch size for this profile.
        """
        return self._point(b)[1]

    def power_w(self, b: int) -> float:
        """Average power while running a batch of ``b``: ``energy_j(b) / latency_s(b)``.

        :param b: batch size, an integer >= 1 (and <= ``max_table_batch`` when that is set).
        :returns: watts, derived from the interpolated energy and latency (never interpolated).
        :raises ValueError: if ``b`` is not a valid batch size for this profile.
        """
        lat, en = self._point(b)
        return en / lat

    def check_max_batch_size(self, max_batch_size: int) -> None:
        """Check that the profile covers every batch size 1..``max_batch_size``.

        :param max_batch_size: the largest batch the env may run.
        :raises ValueError: naming the profile, the field ``max_batch_size``, the value and the
            allowed range, if it is not an integer >= 1 or exceeds the largest listed batch
            size of a table that declares no extrapolation.
        """
        b = self._check_b(max_batch_size, "max_batch_size")
        if self.max_table_batch is not None and b > self.max_table_batch:
            raise self._range_error("max_batch_size", b)

    def tables(self, max_batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-batch-size lookup tables for a simulator's hot path.

        :param max_batch_size: the largest batch size B (checked with
            :meth:`check_max_batch_size`).
        :returns: ``(latency_s, energy_j)``: two new float64 arrays of length B + 1 whose entry
            ``b`` holds ``latency_s(b)`` and ``energy_j(b)``; entry 0 is 0.0.
        """
        self.check_max_batch_size(max_batch_size)
        b = np.arange(1, int(max_batch_size) + 1, dtype=np.float64)
        lat, en = self._eval(b)
        return np.concatenate(([0.0], lat)), np.concatenate(([0.0], en))

    def max_throughput_rps(self, max_batch_size: int) -> float:
        """Max over integer 1 <= b <= B of ``b / latency_s(b)`` (docs/design.md: Load).

        :param max_batch_size: B (checked with :meth:`check_max_batch_size`).
        :returns: requests per second.
        """
        self.check_max_batch_size(max_batch_size)
        b = np.arange(1, int(max_batch_size) + 1, dtype=np.float64)
        lat, _ = self._eval(b)
        return float(np.max(b / lat))

    def to_dict(self) -> dict[str, Any]:
        """The profile as a JSON-ready dict: a copy of its input with ``kind`` filled in.

        :returns: a new dict that :func:`load` turns back into an equivalent profile.
        """
        d = copy.deepcopy(self.raw)
        d.setdefault("kind", self.kind)
        return d

    def __repr__(self) -> str:
        rng = "unbounded" if self.max_table_batch is None else f"1..{self.max_table_batch}"
        return (
            f"Profile(name={self.name!r}, kind={self.kind!r}, model={self.model!r}, "
            f"device={self.device!r}, batch sizes {rng})"
        )


# --------------------------------------------------------------------- loading


def _profile_dir() -> Any:
    return resources.files("batch_env.profiles")


def shipped_names(directory: Any) -> list[str]:
    """Names of the ``<name>.json`` files in a package resource directory (sorted)."""
    try:
        entries = list(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(e.name[: -len(".json")] for e in entries if e.name.endswith(".json"))


def available() -> list[str]:
    """Names of the shipped profiles (the files ``batch_env/profiles/<name>.json``).

    :returns: the sorted names that :func:`load` accepts.
    """
    return shipped_names(_profile_dir())


def read_text(path: str | os.PathLike[str], what: str) -> str:
    """The UTF-8 text of a user's file, or ``ValueError`` naming the file (binary or
    unreadable) instead of a bare ``UnicodeDecodeError`` or ``OSError``.

    :param path: the file.
    :param what: what the file should be, for the message (``"profile"``, ``"trace"``).
    """
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return fh.read()
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{what} {os.fspath(path)!r}: not a UTF-8 text file (byte {e.start}: {e.reason}); "
            "expected a text file"
        ) from None
    except OSError as e:
        raise ValueError(f"{what} {os.fspath(path)!r}: cannot read it: {e.strerror or e}") from None


def read_json_object(
    x: str | os.PathLike[str],
    directory: Any,
    what: str,
    hint: str = "",
    not_found: type[Exception] = FileNotFoundError,
) -> tuple[dict[str, Any], str]:
    """The JSON object named by ``x``: a shipped name in ``directory`` or a file path.

    Shared by the batch and the LLM profile loaders.

    :param x: a shipped name or a path.
    :param directory: the package resource directory of the shipped files.
    :param what: what the file is, for messages (``"profile"``, ``"LLM profile"``).
    :param hint: text added to the not-found message.
    :param not_found: the exception class raised when ``x`` is neither a name nor a file.
    :returns: ``(data, origin)``, origin naming where it came from (used in later errors).
    :raises ValueError: for invalid JSON or a top level that is not an object.
    """
    names = shipped_names(directory)
    if isinstance(x, str) and x in names:
        text = directory.joinpath(f"{x}.json").read_text(encoding="utf-8")
        origin = f"shipped {what} '{x}'"
    else:
        path = Path(x)
        if not path.is_file():
            raise not_found(
                f"{what} {os.fspath(x)!r}: no shipped {what} of that name and no file at "
                f"{str(path.resolve())!r}{hint}; shipped {what}s: {', '.join(names) or '(none)'}"
            )
        text, origin = read_text(path, what), str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{origin}: invalid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{origin}: a {what} must be a JSON object, got {type(data).__name__}")
    return data, origin


def load(x: str | os.PathLike[str] | Mapping[str, Any] | Profile) -> Profile:
    """Load and validate a profile.

    :param x: a shipped profile name (see :func:`available`), a path to a JSON file
        (``str`` or ``Path``), a dict of profile fields, or a :class:`Profile` (returned as is).
    :returns: the validated :class:`Profile`.
    :raises FileNotFoundError: if ``x`` is neither a shipped name nor an existing file; the
        message names the path and lists the shipped profiles.
    :raises ValueError: if the file is not valid JSON or the profile is invalid.
    :raises ArgumentError: (a ``TypeError`` and a ``ValueError``) for any other type of ``x``.
    """
    if isinstance(x, Profile):
        return x
    if isinstance(x, Mapping):
        return Profile(x, origin="dict")
    if isinstance(x, (str, os.PathLike)):
        hint = ""
        if isinstance(x, str):
            llm_dir = resources.files("batch_env.profiles").joinpath("llm")
            if x in shipped_names(llm_dir):
                hint = (
                    f" ('{x}' is a shipped LLM profile, for the LLM envs: load it with "
                    "batch_env.profiles.load_llm instead)"
                )
        data, origin = read_json_object(x, _profile_dir(), "profile", hint)
        return Profile(data, origin=origin)
    raise ArgumentError(
        f"profile={x!r} is invalid: expected a shipped profile name ({', '.join(available())}), "
        f"a path to a JSON file, a dict or a Profile, not a {type(x).__name__}"
    )
