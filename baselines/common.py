"""Pieces shared by the baseline policies: reading the env's settings, validating parameters.

A policy may read the env's configuration at construction (docs/design.md: Policies). These
helpers look through Gymnasium wrappers (``env.unwrapped``) for the settings the
baselines need (``max_batch_size``, ``sla_ms``, ``decision_interval_ms``), validate a
policy's parameters with errors that name the parameter, its value and what is allowed
(the same wording as :func:`batch_env.checks.check_number`), and refuse an env whose ticks
are off for policies whose timeout would otherwise never fire between arrivals.

Timeouts are compared with :func:`waited_at_least`, which forgives ``TIME_TOLERANCE_S``:
relative ticks are accumulated in floating point (``now + interval``), so the wait at the
tick meant to be exactly ``timeout`` can come out a few ulps short of it; without the
tolerance the timeout would fire one tick late.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym

from batch_env.checks import check_number

#: Slack (seconds) when comparing a measured wait with a timeout: far below any tick or
#: service time (microseconds at least), far above float64 rounding of simulated times.
TIME_TOLERANCE_S = 1e-9


def env_config(env: gym.Env | None) -> Any:
    """The env's configuration (``env.unwrapped.config``), or ``None`` when ``env`` is ``None``.

    :param env: the env (wrappers are looked through), or ``None``.
    """
    if env is None:
        return None
    config = getattr(env.unwrapped, "config", None)
    if config is None:
        raise ValueError(
            f"env={env!r} has no batch_env configuration (env.unwrapped.config): "
            "pass a batch_env environment such as "
            "gymnasium.make('batch_env/DynamicBatching-v0')"
        )
    return config


def max_batch_size_of(env: gym.Env | None, default: int | None = None) -> int:
    """The env's ``max_batch_size`` (looking through wrappers).

    :param env: the env, or ``None``.
    :param default: value used when ``env`` is ``None``.
    """
    if env is None:
        if default is None:
            raise ValueError("env=None: pass the env or max_batch_size=<int >= 1>")
        return int(default)
    config = env_config(env)
    if not hasattr(config, "max_batch_size"):
        raise ValueError(
            f"env {type(env.unwrapped).__name__} has no max_batch_size (an LLM env sets a cap on running "
            "requests instead): this policy needs DynamicBatching-v0 or NodeBatching-v0"
        )
    return int(config.max_batch_size)


def sla_ms_of(env: gym.Env | None, default: float | None = None) -> float:
    """The env's ``sla_ms`` (looking through wrappers).

    :param env: the env, or ``None``.
    :param default: value used when ``env`` is ``None``.
    """
    if env is None:
        if default is None:
            raise ValueError("env=None: pass the env or sla_ms=<number > 0>")
        return float(default)
    return float(env_config(env).sla_ms)


def decision_interval_ms_of(env: gym.Env | None) -> float | None:
    """The env's tick interval ``decision_interval_ms`` (``None``: ticks off or no env).

    :param env: the env (wrappers are looked through), or ``None``.
    """
    if env is None:
        return None
    value = env_config(env).decision_interval_ms
    return None if value is None else float(value)


def require_ticks(env: gym.Env | None, policy: str, param: str, value: Any) -> None:
    """Refuse an env whose ticks are off, for a policy whose ``param`` is a timeout.

    Without ticks, decision epochs happen only at arrivals and batch completions, so a
    timeout could not fire until the next arrival. With ``env=None`` nothing is checked
    (the caller is responsible for running the policy on an env with ticks).

    :param env: the env the policy will act in, or ``None``.
    :param policy: the policy's registry name, for the message.
    :param param: the timeout parameter's name, for the message.
    :param value: the timeout parameter's value, for the message.
    :raises ValueError: when the env's ``decision_interval_ms`` is ``None``.
    """
    if env is None or decision_interval_ms_of(env) is not None:
        return
    raise ValueError(
        f"policy {policy!r} with {param}={value!r} needs decision epochs between arrivals, "
        "but the env's decision_interval_ms is None (ticks off), so the timeout could not "
        "fire until the next arrival: make the env with ticks, e.g. "
        "gymnasium.make('batch_env/DynamicBatching-v0', decision_interval_ms=0.5) "
        "(an interval no longer than the timeout keeps it accurate)"
    )


def resolve_max_batch_size(
    env: gym.Env | None, value: int | None, name: str = "max_batch_size"
) -> int:
    """A batch-size parameter: ``value`` if given, else the env's ``max_batch_size``.

    :param env: the env (its ``max_batch_size`` is the default and the upper bound), or
        ``None`` (then ``value`` is required and only ``>= 1`` is checked).
    :param value: the parameter's value, or ``None`` for the env's.
    :param name: the parameter's name, for error messages.
    :raises ValueError: when ``value`` is not an integer in ``1..env max_batch_size``.
    """
    if value is None:
        if env is None:
            raise ValueError(f"env=None: pass the env or {name}=<int >= 1>")
        return max_batch_size_of(env)
    high = None if env is None else max_batch_size_of(env)
    check_number(name, value, low=1, high=high, integer=True)
    return int(value)


def check_batch_sizes(name: str, value: Iterable[Any], max_batch_size: int) -> tuple[int, ...]:
    """Validate a collection of batch sizes; returns them sorted and deduplicated.

    :param name: the parameter's name, for error messages.
    :param value: an iterable of integers, each in ``1..max_batch_size``.
    :param max_batch_size: the largest allowed size.
    :raises ValueError: naming ``name``, ``value`` and the offending size.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(
            f"{name}={value!r} is invalid: expected a tuple of integers in 1..{max_batch_size}"
        )
    sizes = tuple(value)
    for s in sizes:
        try:
            check_number("size", s, low=1, high=max_batch_size, integer=True)
        except ValueError:
            raise ValueError(
                f"{name}={value!r} is invalid: size {s!r} is not an integer in "
                f"1..{max_batch_size} (max_batch_size)"
            ) from None
    return tuple(sorted({int(s) for s in sizes}))


def check_duration_ms(name: str, value: Any) -> float:
    """Validate a non-negative, finite duration in milliseconds; returns it as float.

    :param name: the parameter's name, for error messages.
    :param value: the duration.
    :raises ValueError: naming ``name`` and ``value``.
    """
    check_number(name, value, low=0.0)
    return float(value)


def waited_at_least(wait_s: float, timeout_ms: float) -> bool:
    """Whether a wait of ``wait_s`` seconds has reached ``timeout_ms`` milliseconds.

    Forgives :data:`TIME_TOLERANCE_S` of floating-point error in accumulated tick times.

    :param wait_s: the measured wait (e.g. ``info["oldest_wait_s"]``).
    :param timeout_ms: the timeout.
    """
    return wait_s >= timeout_ms * 1e-3 - TIME_TOLERANCE_S


__all__ = [
    "TIME_TOLERANCE_S",
    "check_batch_sizes",
    "check_duration_ms",
    "decision_interval_ms_of",
    "env_config",
    "max_batch_size_of",
    "require_ticks",
    "resolve_max_batch_size",
    "sla_ms_of",
    "waited_at_least",
]
