"""Validation helpers shared by the whole package: numbers and argument names.

One implementation of each check, so every module words the same error the same way:
``name=value is invalid: expected ...`` (wrong type, NaN, infinity) or ``name=value is out
of range: expected ...`` (a number outside the bounds).

This is a leaf module: it imports nothing from ``batch_env`` (``config``, ``workload`` and
the real-execution stack all import it).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from typing import Any

import numpy as np

__all__ = [
    "ArgumentError",
    "check_number",
    "init_arguments",
    "is_real_number",
    "nonnegative",
    "positive",
]


@functools.cache
def init_arguments(cls: type[Any]) -> frozenset[str]:
    """The keyword arguments ``cls.__init__`` takes (for messages listing what is allowed)."""
    return frozenset(p for p in inspect.signature(cls.__init__).parameters if p != "self")


class ArgumentError(TypeError, ValueError):
    """A bad argument: an unknown name, or a value of a type that is not allowed.

    Both a ``TypeError`` (what Python raises for these) and a ``ValueError`` (what
    batch-env raises for every bad input, and what the CLI turns into a one-line error).
    """


def is_real_number(value: Any) -> bool:
    """Whether ``value`` is a real number: ints, floats, NumPy real scalars (not bools).

    :param value: any object.
    """
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    integer: bool = False,
) -> Any:
    """Raise ``ValueError`` naming ``name`` and ``value`` unless it is an allowed number.

    :param name: the field name used in the message.
    :param value: the value to check.
    :param low: lower bound (``None``: unbounded).
    :param high: upper bound, inclusive (``None``: unbounded).
    :param low_inclusive: whether ``low`` itself is allowed.
    :param integer: require an integer (Python or NumPy, not a bool).
    :return: the value as ``int`` (``integer=True``) or ``float``.
    """
    kind = "an integer" if integer else "a finite number"
    if integer:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:
            ok = value.dtype.kind in "iu"
    else:
        ok = is_real_number(value) or (hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0)
    if ok and not integer:
        ok = math.isfinite(float(value))
    rng = []
    if low is not None:
        rng.append(f"{'>=' if low_inclusive else '>'} {low:g}")
    if high is not None:
        rng.append(f"<= {high:g}")
    allowed = kind + (" " + " and ".join(rng) if rng else "")
    if not ok:
        raise ValueError(f"{name}={value!r} is invalid: expected {allowed}")
    v = float(value)
    if low is not None and (v < low or (not low_inclusive and v == low)):
        raise ValueError(f"{name}={value!r} is out of range: expected {allowed}")
    if high is not None and v > high:
        raise ValueError(f"{name}={value!r} is out of range: expected {allowed}")
    return int(value) if integer else v


def positive(value: Any, name: str, owner: str | None = None) -> float:
    """A finite number > 0 as float (:func:`check_number`; ``owner`` prefixes the name, followed by a colon).

    :raises ValueError: naming ``owner``, ``name`` and ``value``.
    """
    return check_number(f"{owner}: {name}" if owner else name, value, low=0.0, low_inclusive=False)


def nonnegative(value: Any, name: str, owner: str | None = None) -> float:
    """A finite number >= 0 as float (:func:`check_number`; ``owner`` prefixes the name, followed by a colon).

    :raises ValueError: naming ``owner``, ``name`` and ``value``.
    """
    return check_number(f"{owner}: {name}" if owner else name, value, low=0.0)
