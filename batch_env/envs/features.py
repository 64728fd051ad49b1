"""What each entry of an env's observation is: :class:`ObsFeature`.

Every env describes its observation as a tuple of :class:`ObsFeature`, one per entry and
in order, built next to the code that computes the values (``obs_features`` in
:mod:`.dynamic_batching` and :mod:`.node_batching`, :func:`.llm_observation.observation_features`).
Its ``observation_space`` is built from that tuple (:func:`features_box`), so the names
and the bounds cannot drift apart, and an instance gives the features of its own
observation (classes, admission orders and a clock grid included) as
``env.unwrapped.observation_features``. The env and task pages list them, generated from
the same tuples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

__all__ = ["ObsFeature", "feature_names", "features_box"]


@dataclass(frozen=True, slots=True)
class ObsFeature:
    """One entry of an observation.

    :ivar name: its name, unique in the observation (``snake_case``; a per-class or
        per-order feature is prefixed with the class's or the order's name and a dot,
        e.g. ``chat.waiting_over_max_num_seqs``).
    :ivar meaning: the raw quantity it shows, in words.
    :ivar unit: the raw quantity's unit (``requests``, ``s``, ``tokens``, ``MHz``,
        ``fraction``, ``flag``, ...).
    :ivar scale: how the raw quantity is normalised into the entry (e.g. ``/ max_num_seqs,
        clipped at 100``) and its value where the quantity is undefined.
    :ivar low: the entry's lower bound (the observation space's ``low``).
    :ivar high: the entry's upper bound (the observation space's ``high``).
    """

    name: str
    meaning: str
    unit: str
    scale: str
    low: float
    high: float

    def __post_init__(self) -> None:
        if not self.low <= self.high:
            raise ValueError(f"feature {self.name!r}: low={self.low} > high={self.high}")

    def prefixed(self, prefix: str, meaning: str) -> ObsFeature:
        """The same feature for one class or order: named ``<prefix>.<name>``, with
        ``meaning`` (the rest unchanged)."""
        return ObsFeature(
            f"{prefix}.{self.name}", meaning, self.unit, self.scale, self.low, self.high
        )


def feature_names(features: Sequence[ObsFeature]) -> tuple[str, ...]:
    """The features' names, in order."""
    return tuple(f.name for f in features)


def features_box(features: Sequence[ObsFeature]) -> spaces.Box:
    """The observation space of ``features``: ``Box(float32)`` with each feature's bounds.

    :raises ValueError: two features share a name.
    """
    names = feature_names(features)
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"observation features {dup} appear more than once")
    low = np.array([f.low for f in features], dtype=np.float32)
    high = np.array([f.high for f in features], dtype=np.float32)
    return spaces.Box(low, high, dtype=np.float32)
