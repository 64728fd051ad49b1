"""Clipper's adaptive batching: additive-increase / multiplicative-decrease of the batch cap.

* ``aimd``: Crankshaw et al., "Clipper: A Low-Latency Online Prediction Serving System",
  NSDI 2017, Section 4.3 ("Adaptive Batching"). Clipper keeps a maximum batch size per
  model container and tunes it with AIMD: it grows the cap by a fixed step while the
  measured latency of a batch stays within the latency objective, and backs off
  multiplicatively (by 10%) when a batch exceeds it. Clipper dispatches as soon as the
  container is free, with up to the cap of the queued queries: it never holds a query
  back (its optional "delayed batching" timeout is not part of this policy).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym

from batch_env.checks import check_number

from .common import TIME_TOLERANCE_S, resolve_max_batch_size, sla_ms_of


class AIMDPolicy:
    """Clipper's AIMD adaptive batching (Crankshaw et al., NSDI 2017, Section 4.3).

    State: the batch cap ``c`` (a float, starting at ``initial_batch_size``). At each
    epoch, if the previous step ran a batch (``info["last_batch_size"] > 0``), its measured
    service time ``info["last_batch_latency_s"]`` updates the cap:

    * latency ``<= sla_ms`` (meets the objective): ``c = min(c + additive_step, max_batch_size)``;
    * latency ``> sla_ms``: ``c = max(1, c * decrease_factor)``.

    Then it serves ``min(queue_len, floor(c))``: it never waits.

    Once per batch: ``info["last_batch_size"]`` is the size of the batch run by the
    previous step, and ``0`` after a wait (and at ``reset``). Every step that runs a batch
    ends at the first epoch after that batch completes (an empty queue is idled through
    inside the same step), so the act call that sees ``last_batch_size > 0`` is the only
    one that sees that batch: updating whenever it is positive updates exactly once per
    batch. The latency is the batch's service time, as in Clipper, not the requests'
    queueing-plus-service latency; a latency equal to the objective meets it (as the env
    counts SLA misses), with :data:`~baselines.common.TIME_TOLERANCE_S` of slack.

    :param env: the env (for ``sla_ms`` and ``max_batch_size``); with ``None`` both are
        required.
    :param sla_ms: the latency objective a batch's service time must meet, in milliseconds
        (``> 0``; default: the env's ``sla_ms``).
    :param additive_step: cap increase after a batch within the objective (``> 0``,
        default 1).
    :param decrease_factor: cap multiplier after a batch over the objective, in ``(0, 1)``
        (default 0.9: Clipper's 10% back-off).
    :param initial_batch_size: the cap at the start of every episode, an integer in
        ``1..max_batch_size`` (default 1).
    :param max_batch_size: the largest cap, an integer in ``1..env max_batch_size``
        (default: the env's).
    """

    name = "aimd"

    def __init__(
        self,
        env: gym.Env | None = None,
        sla_ms: float | None = None,
        additive_step: float = 1.0,
        decrease_factor: float = 0.9,
        initial_batch_size: int = 1,
        max_batch_size: int | None = None,
    ) -> None:
        self.max_batch_size = resolve_max_batch_size(env, max_batch_size)
        if sla_ms is not None:
            check_number("sla_ms", sla_ms, low=0.0, low_inclusive=False)
        self.sla_ms = sla_ms_of(env, sla_ms) if sla_ms is None else float(sla_ms)
        check_number("additive_step", additive_step, low=0.0, low_inclusive=False)
        self.additive_step = float(additive_step)
        check_number("decrease_factor", decrease_factor, low=0.0, low_inclusive=False)
        if float(decrease_factor) >= 1.0:
            raise ValueError(
                f"decrease_factor={decrease_factor!r} is out of range: expected a finite "
                "number > 0 and < 1"
            )
        self.decrease_factor = float(decrease_factor)
        check_number(
            "initial_batch_size", initial_batch_size, low=1, high=self.max_batch_size, integer=True
        )
        self.initial_batch_size = int(initial_batch_size)
        self._sla_s = self.sla_ms * 1e-3 + TIME_TOLERANCE_S
        #: The current batch cap ``c``.
        self.batch_cap = float(self.initial_batch_size)

    def reset(self) -> None:
        """Restore the cap to ``initial_batch_size``."""
        self.batch_cap = float(self.initial_batch_size)

    def update(self, batch_latency_s: float) -> None:
        """Apply one AIMD step for a batch whose service time was ``batch_latency_s``.

        :param batch_latency_s: the batch's measured service time in seconds.
        """
        if batch_latency_s <= self._sla_s:
            self.batch_cap = min(self.batch_cap + self.additive_step, float(self.max_batch_size))
        else:
            self.batch_cap = max(1.0, self.batch_cap * self.decrease_factor)

    def current_batch_size(self) -> int:
        """``floor(c)``, forgiving float rounding just below an integer (at least 1)."""
        return max(1, math.floor(self.batch_cap + 1e-9))

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Update the cap with the previous batch's latency (if any), serve up to the cap.

        :param obs: unused.
        :param info: reads ``queue_len``, ``last_batch_size`` and ``last_batch_latency_s``.
        """
        if info["last_batch_size"] > 0:
            self.update(float(info["last_batch_latency_s"]))
        q = info["queue_len"]
        b = self.current_batch_size()
        return q if q < b else b


__all__ = ["AIMDPolicy"]
