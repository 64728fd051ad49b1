"""Pieces shared by training, callbacks and loading: algorithms, hyperparameter files,
wrapper specs, and the adapter that makes a trained model a policy.

Hyperparameter files follow rl-zoo3's format (``agents/hyperparams/<algo>.yml``, one key
per env id; ``n_envs``, ``n_timesteps``, ``policy``, ``normalize``, ``env_wrapper``,
``policy_kwargs``; everything else goes to the algorithm's constructor), so the same file
drives ``batch-env train`` and ``python -m rl_zoo3.train``.
"""

from __future__ import annotations

import ast
import importlib
import pickle
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml

HYPERPARAMS_DIR = Path(__file__).resolve().parent / "hyperparams"
ALGO_NAMES = ("ppo", "a2c", "dqn", "ppo_mask")
#: keys of a hyperparameter entry that are not constructor arguments of the algorithm
ZOO_KEYS = ("n_envs", "n_timesteps", "policy", "normalize", "env_wrapper", "policy_kwargs")


def algo_class(algo: str) -> Any:
    """The SB3 / sb3-contrib class of ``algo`` (one of ``ALGO_NAMES``)."""
    if algo == "ppo_mask":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    import stable_baselines3 as sb3

    classes = {"ppo": sb3.PPO, "a2c": sb3.A2C, "dqn": sb3.DQN}
    if algo not in classes:
        raise ValueError(f"algo={algo!r} is unknown: allowed values are {ALGO_NAMES}")
    return classes[algo]


def load_hyperparams(algo: str, env_id: str, path: str | Path | None = None) -> dict[str, Any]:
    """The hyperparameter entry for ``env_id`` in an rl-zoo3 style YAML file.

    :param algo: algorithm name (selects ``agents/hyperparams/<algo>.yml`` by default).
    :param env_id: the env id key.
    :param path: another YAML file.
    """
    if algo not in ALGO_NAMES:
        raise ValueError(f"algo={algo!r} is unknown: allowed values are {ALGO_NAMES}")
    file = Path(path) if path is not None else HYPERPARAMS_DIR / f"{algo}.yml"
    if not file.exists():
        raise FileNotFoundError(f"hyperparameter file {str(file)!r} not found")
    data = yaml.safe_load(file.read_text()) or {}
    if env_id not in data:
        raise ValueError(f"hyperparameter file {file} has no entry for env {env_id!r}: it has {sorted(data)}")
    return dict(data[env_id])


def literal(value: Any, field: str) -> Any:
    """Parse rl-zoo3's string-valued settings (``"dict(net_arch=[64, 64])"``, ``"{'a': 1}"``).

    Only literals and ``dict(...)`` calls with literal arguments are accepted (no eval).
    """
    if not isinstance(value, str):
        return value
    try:
        node = ast.parse(value, mode="eval").body
        return _literal_node(node)
    except (SyntaxError, ValueError) as exc:
        raise ValueError(f"{field}={value!r} is not a literal or dict(...) of literals: {exc}") from None


def _literal_node(node: ast.AST) -> Any:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {kw.arg: _literal_node(kw.value) for kw in node.keywords}
    if isinstance(node, ast.Dict):
        return {_literal_node(k): _literal_node(v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.List):
        return [_literal_node(e) for e in node.elts]
    return ast.literal_eval(node)


def wrapper_specs(env_wrapper: Any) -> list[tuple[str, dict[str, Any]]]:
    """Normalize rl-zoo3's ``env_wrapper`` value to ``[(dotted class path, kwargs), ...]``."""
    if env_wrapper is None:
        return []
    items = env_wrapper if isinstance(env_wrapper, list) else [env_wrapper]
    specs = []
    for item in items:
        if isinstance(item, str):
            specs.append((item, {}))
        elif isinstance(item, dict) and len(item) == 1:
            (name, kwargs), = item.items()
            specs.append((name, dict(kwargs or {})))
        else:
            raise ValueError(f"env_wrapper entry {item!r} is invalid: expected 'module.Class' or {{'module.Class': {{kwargs}}}}")
    return specs


def import_class(path: str) -> Any:
    """Import ``module.Class`` from its dotted path."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"env_wrapper {path!r} cannot be imported: {exc}") from None


def make_env(env_id: str, env_kwargs: dict[str, Any], specs: list[tuple[str, dict[str, Any]]]) -> gym.Env:
    """``gymnasium.make(env_id, **env_kwargs)`` wrapped by ``specs`` (innermost first)."""
    import batch_env  # noqa: F401  (registers the ids)

    env = gym.make(env_id, **env_kwargs)
    for path, kwargs in specs:
        env = import_class(path)(env, **kwargs)
    return env


class AgentPolicy:
    """A trained SB3 model as a batching policy (``reset()`` / ``act(obs, info)``).

    It acts on the *raw* env: the observation goes through the run's observation
    wrappers and its ``VecNormalize`` statistics, the model's action back through the
    action wrappers; masks come from ``info["action_mask"]`` for MaskablePPO.

    :param model: the SB3 model.
    :param env_id: the env id the model was trained on.
    :param env_kwargs: its env kwargs.
    :param specs: the run's wrapper specs.
    :param obs_normalizer: a ``VecNormalize`` (statistics only) or ``None``.
    :param deterministic: greedy actions (default) or sampled ones.
    :param name: label in evaluations.
    """

    def __init__(
        self,
        model: Any,
        env_id: str,
        env_kwargs: dict[str, Any],
        specs: list[tuple[str, dict[str, Any]]],
        obs_normalizer: Any = None,
        deterministic: bool = True,
        name: str = "agent",
    ) -> None:
        self.model = model
        self.name = name
        self.deterministic = deterministic
        self.obs_normalizer = obs_normalizer
        template = make_env(env_id, env_kwargs, specs)
        chain = []
        env = template
        while isinstance(env, gym.Wrapper):
            chain.append(env)
            env = env.env
        chain.reverse()  # innermost first
        self._obs_fns = [w.observation for w in chain if isinstance(w, gym.ObservationWrapper)]
        # action wrappers that need the state map from the acting env's info instead
        self._act_fns = [
            getattr(w, "action_from_info", None) or (lambda a, info, w=w: w.action(a))
            for w in reversed(chain)
            if isinstance(w, gym.ActionWrapper)
        ]
        self._maskable = type(model).__name__ == "MaskablePPO"
        self._binary = any(type(w).__name__ == "BinaryAction" for w in chain)

    def reset(self) -> None:
        """The policy is stateless (MLP)."""

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Map the raw observation to the env's action."""
        o = obs
        for fn in self._obs_fns:
            o = fn(o)
        if self.obs_normalizer is not None:
            o = self.obs_normalizer.normalize_obs(o)
        if self._maskable:
            mask = np.ones(2, dtype=bool) if self._binary else info["action_mask"]
            a, _ = self.model.predict(o, deterministic=self.deterministic, action_masks=mask)
        else:
            a, _ = self.model.predict(o, deterministic=self.deterministic)
        a = int(a)
        for fn in self._act_fns:
            a = int(fn(a, info))
        return a


def load_normalizer(path: Path) -> Any:
    """Load ``VecNormalize`` statistics saved with ``VecNormalize.save`` (no env needed)."""
    with open(path, "rb") as f:
        vn = pickle.load(f)
    vn.training = False
    vn.norm_reward = False
    return vn
