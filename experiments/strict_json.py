"""Strict JSON for what the experiments print and write: NaN and infinities become ``null``.

A leaf module (standard library only), so that the command line (``experiments.cli``) and
the experiments it runs (``experiments.sweep``) share it without importing each other.
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
