"""Strict JSON for what the experiments print and write: NaN and infinities become ``null``
(:func:`finite`, :func:`dumps`), or, for the regime maps' ratios, an infinite ratio the
string ``"inf"`` (:func:`strict`). Standard library only.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(obj: Any) -> Any:
    """Replace NaN and infinities by None, recursively, for strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that writes NaN as ``null`` (strict JSON, readable by any parser)."""
    return json.dumps(finite(obj), allow_nan=False, default=str, **kwargs)


def strict(obj: Any) -> Any:
    """Strict JSON for ratios: an infinite ratio (one policy meets the SLA, the other never
    does) as the string ``"inf"``, an undefined one (NaN) as ``null``, NumPy scalars as
    numbers (anything with ``item()``)."""
    if type(obj).__module__ == "numpy" and getattr(obj, "ndim", None) == 0:
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else ("inf" if obj == math.inf else None)
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj
