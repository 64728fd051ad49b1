"""Learned agents: SB3 training (``agents.train``), TensorBoard callbacks
(``agents.callbacks``), hyperparameters in rl-zoo3 format (``agents/hyperparams``), the
SB3 ``VecEnv`` adapter for Gymnasium vector envs (``agents.vec_env``: :class:`SB3VecEnv`,
:func:`make_vec_env`) and trained runs as policies (:func:`load_policy`).

Importing ``agents`` does not import torch; training, loading and the adapter do.
"""

from __future__ import annotations

from typing import Any

from .policy import load_policy, parse_policy_spec

__all__ = ["SB3VecEnv", "load_policy", "make_vec_env", "parse_policy_spec"]


def __getattr__(name: str) -> Any:
    """``SB3VecEnv`` and ``make_vec_env`` on first use (they import SB3, hence torch)."""
    if name in ("SB3VecEnv", "make_vec_env"):
        from . import vec_env

        return getattr(vec_env, name)
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
