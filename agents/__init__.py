"""Learned agents: SB3 training (``agents.train``), TensorBoard callbacks
(``agents.callbacks``), hyperparameters in rl-zoo3 format (``agents/hyperparams``) and
trained runs as policies (:func:`load_policy`).

Importing ``agents`` does not import torch; training and loading do.
"""

from __future__ import annotations

from .policy import load_policy, parse_policy_spec

__all__ = ["load_policy", "parse_policy_spec"]
