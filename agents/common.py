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
import importlib.resources
import math
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import yaml

#: the shipped hyperparameter files (package data of ``agents.hyperparams``, found through
#: ``importlib.resources``, so that a wheel install has them too)
HYPERPARAMS_DIR = Path(str(importlib.resources.files("agents.hyperparams")))
ALGO_NAMES = ("ppo", "a2c", "dqn", "ppo_mask", "ppo_lstm", "ppo_input", "ppo_crn")
#: keys of a hyperparameter entry that are not constructor arguments of the algorithm
#: (``callback`` names rl-zoo3's callbacks; ``batch-env train`` adds its own and ignores it;
#: ``env_kwargs``, rl-zoo3's too, are the training env's kwargs, under those a run gives)
ZOO_KEYS = (
    "n_envs",
    "n_timesteps",
    "policy",
    "normalize",
    "env_wrapper",
    "policy_kwargs",
    "callback",
    "env_kwargs",
)
#: the most actions DQN is given: it learns one Q-value per action and explores them
#: uniformly, without action masks (a product space such as LLMBatching-v1's caps x
#: token budgets grows past what it can explore)
DQN_MAX_ACTIONS = 256


def algo_class(algo: str) -> Any:
    """The SB3 / sb3-contrib class of ``algo`` (one of ``ALGO_NAMES``)."""
    if algo == "ppo_mask":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    if algo == "ppo_lstm":  # rl-zoo3's name for sb3-contrib's RecurrentPPO
        from sb3_contrib import RecurrentPPO

        return RecurrentPPO
    if algo == "ppo_input":  # PPO with a critic that sees the coming input
        from .input_critic import InputPPO

        return InputPPO
    if algo == "ppo_crn":  # PPO whose advantages compare actions on one input
        from .crn import CRNPPO

        return CRNPPO
    import stable_baselines3 as sb3

    classes = {"ppo": sb3.PPO, "a2c": sb3.A2C, "dqn": sb3.DQN}
    if algo not in classes:
        raise ValueError(f"algo={algo!r} is unknown: allowed values are {ALGO_NAMES}")
    return classes[algo]


def check_int(field: str, value: Any, low: int) -> int:
    """``value`` when it is an integer >= ``low`` (not a bool), else ``ValueError`` naming
    the field, the value and what is allowed. The one check of every count option."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{field}={value!r} is invalid: expected an integer >= {low}")
    return int(value)


def check_device(field: str, device: Any) -> str:
    """``device`` when torch accepts it (or it is ``auto``), else ``ValueError`` naming the field."""
    if device == "auto":
        return device
    import torch

    try:
        torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"{field}={device!r} is invalid: expected auto, cpu, cuda or cuda:<index>"
        ) from None
    return device


def hyperparameter_names(algo: str) -> list[str]:
    """Keys a hyperparameter entry of ``algo`` may hold: the rl-zoo3 keys (``ZOO_KEYS``)
    and the algorithm's constructor arguments that training does not set itself."""

    return sorted({*(p for p in constructor_params(algo) if p not in _SET_BY_TRAINING), *ZOO_KEYS})


def constructor_params(algo: str) -> dict[str, Any]:
    """The constructor parameters of ``algo``'s class (``inspect.Parameter`` by name); a
    subclass whose ``__init__`` passes ``**kwargs`` on (``ppo_input``'s) has its base's too."""
    import inspect

    params: dict[str, Any] = {}
    for cls in algo_class(algo).__mro__:
        own = inspect.signature(cls.__init__).parameters
        params = {**own, **params}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in own.values()):
            break
    return {k: p for k, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}


#: constructor arguments that training sets itself (not allowed in a hyperparameter entry)
_SET_BY_TRAINING = (
    "self",
    "policy",
    "env",
    "tensorboard_log",
    "verbose",
    "seed",
    "device",
    "_init_setup_model",
)


def load_hyperparams(algo: str, env_id: str, path: str | Path | None = None) -> dict[str, Any]:
    """The hyperparameter entry for ``env_id`` in an rl-zoo3 style YAML file, checked: the
    file reads as YAML, holds a mapping with a mapping for ``env_id``, every key is a
    hyperparameter of ``algo`` (:func:`hyperparameter_names`) and every value has the type
    of the algorithm's default; else ``ValueError`` (``FileNotFoundError`` for a missing
    file) naming the file, the key, the value and what is allowed.

    :param algo: algorithm name (selects ``agents/hyperparams/<algo>.yml`` by default).
    :param env_id: the env id key; a benchmark task without its own entry takes its base
        env's (``batch_env.tasks``).
    :param path: another YAML file.
    """
    if algo not in ALGO_NAMES:
        raise ValueError(f"algo={algo!r} is unknown: allowed values are {list(ALGO_NAMES)}")
    from .hyperparams import DERIVED_ALGOS, derive

    shipped_as = DERIVED_ALGOS.get(algo, algo) if path is None else algo
    file = Path(path) if path is not None else HYPERPARAMS_DIR / f"{shipped_as}.yml"
    if not file.is_file():
        shipped = ", ".join(sorted(p.stem for p in HYPERPARAMS_DIR.glob("*.yml")))
        raise FileNotFoundError(
            f"hyperparameter file {str(file)!r} not found"
            + (" (it is a folder)" if file.is_dir() else "")
            + f": give a YAML file (the shipped ones, per algo: {shipped})"
        )
    where = f"hyperparameter file {str(file)!r}"
    try:
        data = yaml.safe_load(file.read_bytes().decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where} is not valid YAML: {' '.join(str(exc).split())}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(
            f"{where} must hold a mapping of env id -> hyperparameters, got {type(data).__name__}"
        )
    if env_id not in data:
        from batch_env.tasks import TASKS

        base = TASKS[env_id].base if env_id in TASKS else None
        if base is None or base not in data:
            raise ValueError(
                f"{where} has no entry for env {env_id!r}: it has {sorted(map(str, data))}"
            )
        env_id = base  # a benchmark task trains with its base env's hyperparameters
    entry = data[env_id]
    if not isinstance(entry, dict):
        raise ValueError(
            f"{where}: the entry for {env_id!r} must be a mapping of hyperparameters, got {entry!r}"
        )
    if shipped_as != algo:  # a derived algorithm's entry, made from the one it derives from
        entry = derive(algo, entry)
    check_hyperparams(algo, entry, where)
    return dict(entry)


#: the action spaces each algorithm takes (as SB3 and sb3-contrib check them)
_ACTION_SPACES: dict[str, tuple[type, ...]] = {
    "dqn": (gym.spaces.Discrete,),
    "ppo_mask": (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary),
}
_ANY_ACTIONS = (
    gym.spaces.Box,
    gym.spaces.Discrete,
    gym.spaces.MultiDiscrete,
    gym.spaces.MultiBinary,
)


def algo_misfit(algo: str, env: gym.Env) -> str | None:
    """Why ``algo`` cannot train on ``env`` (wrapped as the run wraps it), in a few words;
    None when it fits. DQN needs a ``Discrete`` space of at most :data:`DQN_MAX_ACTIONS`
    actions (it cannot mask), MaskablePPO an env that gives ``action_masks()``; PPO, A2C
    and RecurrentPPO take any of SB3's action spaces (every action of a batch-env env is
    playable: an invalid one is clipped to what can be done, ``info["clipped_action"]``)."""
    space = env.action_space
    allowed = _ACTION_SPACES.get(algo, _ANY_ACTIONS)
    if not isinstance(space, allowed):
        names = ", ".join(c.__name__ for c in allowed)
        return f"its action space is {space} and {algo} takes {names}"
    if algo == "dqn" and isinstance(space, gym.spaces.Discrete) and int(space.n) > DQN_MAX_ACTIONS:
        return (
            f"its {space} has more than DQN's {DQN_MAX_ACTIONS} actions (DQN learns one "
            "Q-value per action and explores them uniformly, without action masks)"
        )
    if algo == "ppo_mask":
        try:
            env.get_wrapper_attr("action_masks")
        except AttributeError:
            return "it gives no action masks (action_masks()), which MaskablePPO needs"
    return None


def check_hyperparams(algo: str, hp: dict[str, Any], where: str) -> None:
    """Raise ``ValueError`` naming ``where``, the key, the value and what is allowed when a
    key of ``hp`` is not a hyperparameter of ``algo``, or a value's type does not match
    the constructor default's (numbers and booleans) or the rl-zoo3 key's."""
    allowed = hyperparameter_names(algo)
    unknown = sorted(k for k in hp if k not in allowed)
    if unknown:
        raise ValueError(
            f"{where}: {unknown} are not hyperparameters of {algo}: allowed are {allowed}"
        )
    _check_zoo_values(hp, where)
    _check_constructor_types(algo, hp, where)


def _check_zoo_values(hp: dict[str, Any], where: str) -> None:
    """The rl-zoo3 keys' values: ``n_envs`` and ``n_timesteps`` integers >= 1, ``policy`` a
    name, ``policy_kwargs`` a mapping, ``normalize`` a mapping or a boolean (the last two
    may be rl-zoo3's strings such as ``"dict(net_arch=[64])"``)."""
    for key in ("n_envs", "n_timesteps"):
        if key in hp:
            value = hp[key]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            check_int(f"{where}: {key}", value, 1)
    for key in ("policy",):
        if key in hp and not isinstance(hp[key], str):
            raise ValueError(
                f"{where}: {key}={hp[key]!r} is invalid: expected a policy name such as 'MlpPolicy'"
            )
    for key in ("policy_kwargs", "normalize", "env_kwargs"):
        if key in hp:
            value = literal(hp[key], f"{where}: {key}")
            ok = (
                isinstance(value, dict)
                or (key == "normalize" and isinstance(value, bool))
                or value is None
            )
            if not ok:
                raise ValueError(
                    f"{where}: {key}={hp[key]!r} is invalid: expected a mapping"
                    + (" or true/false" if key == "normalize" else "")
                )


#: keys that may take rl-zoo3's linear schedule ``"lin_<x>"`` (``x`` at the start, 0 at the end)
SCHEDULE_KEYS = ("learning_rate", "clip_range")


class LinearSchedule:
    """rl-zoo3's ``"lin_<x>"``: ``x`` times the progress remaining (1 at the start of
    training, 0 at the end), as SB3 calls a schedule.

    :param initial: the value at the start (> 0).
    """

    def __init__(self, initial: float) -> None:
        self.initial = float(initial)

    def __call__(self, progress_remaining: float) -> float:
        """The value with ``progress_remaining`` of training left."""
        return progress_remaining * self.initial

    def __repr__(self) -> str:
        return f"lin_{self.initial:g}"


def parse_schedule(key: str, value: Any, where: str) -> Any:
    """``value``, or a :class:`LinearSchedule` for a ``"lin_<x>"`` string of a
    :data:`SCHEDULE_KEYS` key (``x`` a number > 0); ``ValueError`` naming ``where``, the
    key and the value for any other string there."""
    if key not in SCHEDULE_KEYS or not isinstance(value, str):
        return value
    x = math.nan
    if value.startswith("lin_"):
        try:
            x = float(value[4:])
        except ValueError:
            pass
    if not (math.isfinite(x) and x > 0):
        raise ValueError(
            f"{where}: {key}={value!r} is invalid: expected a number or 'lin_<x>' with x > 0 "
            "(rl-zoo3's linear schedule)"
        )
    return LinearSchedule(x)


def algo_kwargs(hp: dict[str, Any], where: str = "hyperparameters") -> dict[str, Any]:
    """The algorithm's keyword arguments of a checked hyperparameter entry, schedules
    (``"lin_<x>"``) as :class:`LinearSchedule`."""
    return {k: parse_schedule(k, v, where) for k, v in hp.items() if k not in ZOO_KEYS}


def _check_constructor_types(algo: str, hp: dict[str, Any], where: str) -> None:
    """The algorithm's own keyword arguments: a value must have the type of the
    constructor's default where that is a boolean, an integer or a float (a
    :data:`SCHEDULE_KEYS` key may also be ``"lin_<x>"``)."""
    params = constructor_params(algo)
    for key, value in hp.items():
        if key in ZOO_KEYS or key not in params:
            continue
        if key in SCHEDULE_KEYS and isinstance(value, str):
            parse_schedule(key, value, where)
            continue
        default = params[key].default
        if isinstance(default, bool):
            ok, kind = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif isinstance(default, float):
            ok, kind = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
        else:
            continue
        if not ok:
            raise ValueError(
                f"{where}: {key}={value!r} is invalid: expected {kind} (the default is {default!r})"
            )


def model_file_info(path: str | Path) -> tuple[str | None, int]:
    """``(algorithm, steps)`` of the SB3 model file ``path``, read from its ``data`` entry
    without loading it: the algorithm is one of ``ALGO_NAMES`` (None when not
    recognised), the steps its ``num_timesteps``.

    :raises ValueError: when ``path`` is not a readable SB3 zip (truncated, garbage, ...).
    """
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read("data"))
    except (zipfile.BadZipFile, KeyError, OSError, EOFError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not a readable SB3 model file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("policy_class"), dict):
        raise ValueError("not a readable SB3 model file (its data entry lacks the policy class)")
    steps = data.get("num_timesteps")
    steps = steps if isinstance(steps, int) else -1
    module = str(data["policy_class"].get("__module__", ""))
    if module.startswith("sb3_contrib.common.maskable"):
        return "ppo_mask", steps
    if module.startswith("sb3_contrib.common.recurrent"):
        return "ppo_lstm", steps
    if module == "stable_baselines3.dqn.policies":
        return "dqn", steps
    if module == "stable_baselines3.common.policies":
        if "window_s" in data and "branches" in data:  # agents.crn.CRNPPO's own settings
            return "ppo_crn", steps
        return ("ppo" if "clip_range" in data else "a2c"), steps
    return None, steps


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
        raise ValueError(
            f"{field}={value!r} is not a literal or dict(...) of literals: {exc}"
        ) from None


def _literal_node(node: ast.AST) -> Any:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and not node.args
    ):
        return {kw.arg: _literal_node(kw.value) for kw in node.keywords}
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("a **mapping inside a dict literal is not a literal")
        return {
            _literal_node(k): _literal_node(v)
            for k, v in zip(node.keys, node.values, strict=True)
            if k is not None
        }
    if isinstance(node, ast.List):
        return [_literal_node(e) for e in node.elts]
    return ast.literal_eval(node)


def wrapper_specs(env_wrapper: Any) -> list[tuple[str, dict[str, Any]]]:
    """Normalize rl-zoo3's ``env_wrapper`` value to ``[(dotted class path, kwargs), ...]``."""
    if env_wrapper is None:
        return []
    items = env_wrapper if isinstance(env_wrapper, list) else [env_wrapper]
    specs: list[tuple[str, dict[str, Any]]] = []
    for item in items:
        if isinstance(item, str):
            specs.append((item, {}))
        elif isinstance(item, dict) and len(item) == 1:
            ((name, kwargs),) = item.items()
            specs.append((name, dict(kwargs or {})))
        else:
            raise ValueError(
                f"env_wrapper entry {item!r} is invalid: expected 'module.Class' or {{'module.Class': {{kwargs}}}}"
            )
    return specs


#: the callback every ``batch-env train`` run has (with the run's own arguments); a
#: hyperparameter entry's ``callback`` may name it for rl-zoo3, and ``batch-env train``
#: builds it itself
SERVING_CALLBACK = "agents.callbacks.ServingMetricsCallback"


def callback_specs(callback: Any) -> list[dict[str, Any]]:
    """The callbacks a hyperparameter entry's ``callback`` (rl-zoo3's key: ``'module.Class'``,
    ``{'module.Class': {kwargs}}`` or a list of them) adds to a ``batch-env train`` run, as
    ``[{"class", "kwargs"}, ...]`` without :data:`SERVING_CALLBACK`; each is imported and
    built once here, so that a bad name or argument is refused before a run starts.

    :raises ValueError: naming the entry and why (not importable, not an SB3 callback,
        arguments refused).
    """
    from stable_baselines3.common.callbacks import BaseCallback

    try:
        specs = wrapper_specs(callback)
    except ValueError:
        raise ValueError(
            f"callback entry {callback!r} is invalid: expected 'module.Class', "
            "{'module.Class': {kwargs}} or a list of them"
        ) from None
    out = []
    for path, kwargs in specs:
        if path == SERVING_CALLBACK:
            continue
        cls = import_class(path, "callback")
        if not (isinstance(cls, type) and issubclass(cls, BaseCallback)):
            raise ValueError(f"callback {path!r} is not a stable_baselines3 BaseCallback")
        try:
            cls(**kwargs)
        except TypeError as exc:
            raise ValueError(f"callback {path!r} refuses its arguments {kwargs!r}: {exc}") from None
        out.append({"class": path, "kwargs": kwargs})
    return out


def build_callbacks(specs: list[dict[str, Any]]) -> list[Any]:
    """The callbacks of :func:`callback_specs`' list (a run's ``config.yaml`` ``callbacks``)."""
    return [import_class(s["class"], "callback")(**(s.get("kwargs") or {})) for s in specs]


def import_class(path: str, what: str = "env_wrapper") -> Any:
    """Import ``module.Class`` from its dotted path."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{what} {path!r} cannot be imported: {exc}") from None


def env_parameters(env_id: str) -> list[Any]:
    """The ``inspect.Parameter`` list of the registered env's constructor (entry point)."""
    import inspect

    import batch_env  # noqa: F401  (registers the ids)

    creator = gym.spec(env_id).entry_point
    if isinstance(creator, str):
        module, _, name = creator.partition(":")
        creator = getattr(importlib.import_module(module), name)
    params = inspect.signature(cast(Callable[..., Any], creator)).parameters.values()
    return [p for p in params if p.name != "self"]


def env_kwarg_names(env_id: str) -> list[str]:
    """The keyword arguments that the registered env ``env_id`` takes (its constructor's)."""
    return [
        p.name for p in env_parameters(env_id) if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def make_raw_env(env_id: str, env_kwargs: dict[str, Any], field: str = "env_kwargs") -> gym.Env:
    """``gymnasium.make(env_id, **env_kwargs)`` for user-given kwargs: an id that is not
    registered, kwargs that are not a mapping or that the env refuses give a one-line
    ``ValueError`` naming ``field`` (Gymnasium raises ``TypeError`` for unknown kwargs)."""
    from batch_env.tasks import resolve_id

    # with or without batch_env/; else the closest ids and the envs and tasks there are
    env_id = resolve_id(env_id)
    if not isinstance(env_kwargs, dict):
        raise ValueError(f"{field}={env_kwargs!r} must be a mapping of env keyword arguments")
    allowed = env_kwarg_names(env_id)
    unknown = sorted(str(k) for k in env_kwargs if k not in allowed)
    if unknown and not any(p.kind == p.VAR_KEYWORD for p in env_parameters(env_id)):
        raise ValueError(f"{field}: unknown key(s) {unknown} for {env_id}: it takes {allowed}")
    try:
        return gym.make(env_id, **env_kwargs)
    except (
        TypeError
    ) as exc:  # Gymnasium re-raises the constructor's TypeError with all the kwargs appended
        cause = exc.__cause__ if isinstance(exc.__cause__, TypeError) else exc
        raise ValueError(
            f"{field}={env_kwargs!r} is refused by {env_id}: {' '.join(str(cause).split())}"
        ) from None


def make_env(
    env_id: str, env_kwargs: dict[str, Any], specs: list[tuple[str, dict[str, Any]]]
) -> gym.Env:
    """``gymnasium.make(env_id, **env_kwargs)`` wrapped by ``specs`` (innermost first);
    kwargs the env refuses give a ``ValueError`` (see :func:`make_raw_env`)."""
    env = make_raw_env(env_id, env_kwargs)
    for path, kwargs in specs:
        env = import_class(path)(env, **kwargs)
    return env


def action_mappers(env: gym.Env) -> list[Callable[[Any, dict[str, Any]], Any]]:
    """The action wrappers of ``env``'s chain, outermost first, as functions
    ``(action, info) -> the wrapped env's action``: a wrapper's ``action_from_info``
    where it has one (the mapping from another env's ``info``), else its ``action``."""
    out: list[Callable[[Any, dict[str, Any]], Any]] = []
    e: Any = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, gym.ActionWrapper):
            out.append(getattr(e, "action_from_info", None) or (lambda a, info, w=e: w.action(a)))
        e = e.env
    return out


class NumpyActor:
    """The deterministic action of an SB3 MLP policy, computed in NumPy.

    ``model.predict`` costs about 0.4-0.8 ms a call on this project's CPUs (tensor
    conversion, checks, a small network through torch's dispatcher), twenty times the
    env's own step; evaluation protocols of millions of steps made it most of their cost.
    This is the same network (a copy of its weights, float32 as in torch) applied with
    NumPy: ``argmax`` of the actor's logits (PPO, A2C, MaskablePPO, with masked logits
    at SB3-contrib's ``-1e8``) or of the Q-values (DQN). It agrees with ``model.predict``
    except where two logits lie within float32 rounding of each other (tested on random
    observations). :meth:`of` returns ``None`` for what it does not cover (another
    feature extractor, a recurrent or continuous policy); the caller then uses
    ``model.predict``. It copies the weights it is built with: build it again after
    further training.
    """

    _ACTIVATIONS = {"Tanh": np.tanh, "ReLU": lambda x: np.maximum(x, 0), "Identity": None}

    def __init__(
        self, layers: list[Any], sizes: tuple[int, ...] | None = None, q_values: bool = False
    ) -> None:
        self._layers = layers
        #: a ``MultiDiscrete`` policy's part sizes (its logits are one block per part)
        self._splits = None if sizes is None else np.cumsum(sizes)[:-1]
        #: the network gives Q-values (DQN), not an actor's logits: nothing to sample
        self.q_values = q_values

    @classmethod
    def of(cls, model: Any) -> NumpyActor | None:
        """The NumPy actor of ``model``, or ``None`` where it does not apply."""
        try:
            import torch
            from stable_baselines3.common.torch_layers import FlattenExtractor
        except ImportError:  # pragma: no cover - SB3 is what loaded the model
            return None
        obs_space, act_space = model.observation_space, model.action_space
        if isinstance(act_space, gym.spaces.MultiDiscrete) and act_space.nvec.ndim == 1:
            sizes: tuple[int, ...] | None = tuple(int(n) for n in act_space.nvec)
        elif isinstance(act_space, gym.spaces.Discrete):
            sizes = None
        else:
            return None
        if not isinstance(obs_space, gym.spaces.Box):
            return None
        if len(obs_space.shape) != 1:
            return None
        policy = model.policy
        if hasattr(policy, "lstm_actor"):  # recurrent: the state is not ours to copy
            return None
        q_values = hasattr(policy, "q_net") and hasattr(policy.q_net, "q_net")
        if q_values:  # DQN
            extractor = policy.q_net.features_extractor
            modules = list(policy.q_net.q_net)
        elif hasattr(policy, "mlp_extractor") and hasattr(policy, "action_net"):
            if type(policy.action_dist).__name__ not in (
                "CategoricalDistribution",
                "MaskableCategoricalDistribution",
                "MultiCategoricalDistribution",
                "MaskableMultiCategoricalDistribution",
            ):
                return None
            extractor = policy.pi_features_extractor
            modules = [*policy.mlp_extractor.policy_net, policy.action_net]
        else:
            return None
        if type(extractor) is not FlattenExtractor:
            return None
        layers: list[Any] = []
        for m in modules:
            if isinstance(m, torch.nn.Linear):
                w = m.weight.detach().cpu().numpy().astype(np.float32)
                b = m.bias.detach().cpu().numpy().astype(np.float32) if m.bias is not None else None
                layers.append((w, b))
            elif type(m).__name__ in cls._ACTIVATIONS:
                fn = cls._ACTIVATIONS[type(m).__name__]
                if fn is not None:
                    layers.append(fn)
            else:
                return None
        return cls(layers, sizes, q_values)

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The network's output (logits or Q-values) for one observation."""
        x = np.asarray(obs, dtype=np.float32).reshape(-1)
        for layer in self._layers:
            if isinstance(layer, tuple):
                w, b = layer
                x = w @ x if b is None else w @ x + b
            else:
                x = layer(x)
        return x

    def action(self, obs: np.ndarray, mask: np.ndarray | None = None) -> Any:
        """The deterministic action (``mask``: the valid actions, MaskablePPO; for a
        ``MultiDiscrete`` policy, one mask per part concatenated, and the action is the
        array of each part's argmax)."""
        z = self.logits(obs)
        if mask is not None:
            z = np.where(np.asarray(mask, dtype=bool), z, np.float32(-1e8))
        if self._splits is None:
            return int(np.argmax(z))
        return np.array([int(np.argmax(b)) for b in np.split(z, self._splits)], dtype=np.int64)

    def sample(
        self, obs: np.ndarray, rng: np.random.Generator, mask: np.ndarray | None = None
    ) -> Any:
        """An action drawn from the actor's categorical distribution (one per part of a
        ``MultiDiscrete`` policy) with ``rng``: the policy SB3 samples in training, drawn
        from a generator the caller seeds (masked actions have probability 0)."""
        if self.q_values:
            raise ValueError(
                "a Q-network (DQN) has no distribution to sample: act deterministically"
            )
        z = self.logits(obs).astype(np.float64)
        if mask is not None:
            z = np.where(np.asarray(mask, dtype=bool), z, -np.inf)
        blocks = [z] if self._splits is None else np.split(z, self._splits)
        picks = []
        for b in blocks:
            p = np.exp(b - b.max())
            c = np.cumsum(p)
            picks.append(
                min(int(np.searchsorted(c, rng.random() * c[-1], side="right")), len(b) - 1)
            )
        return picks[0] if self._splits is None else np.array(picks, dtype=np.int64)


class AgentPolicy:
    """A trained SB3 model as a batching policy (``reset()`` / ``act(obs, info)``).

    It acts on the *raw* env: the observation goes through the run's observation
    wrappers and its ``VecNormalize`` statistics, the model's action back through the
    action wrappers; masks come from ``info["action_mask"]`` for MaskablePPO; a recurrent
    policy (RecurrentPPO) keeps its LSTM state through the episode. A wrapper
    that keeps state across steps (e.g. ``batch_env.wrappers.ArrivalFeatures``) is
    replayed through its ``observe_reset(obs, info)`` / ``observe_step(obs, info)``: the
    policy holds its own copy of the wrapper, restarted by :meth:`reset` (which the
    evaluation harness calls at every episode's start). Deterministic actions of an MLP
    policy are computed by :class:`NumpyActor`; the statistics and weights are those of
    the moment the policy is built.

    :param model: the SB3 model.
    :param env_id: the env id the model was trained on.
    :param env_kwargs: its env kwargs.
    :param specs: the run's wrapper specs.
    :param obs_normalizer: a ``VecNormalize`` (statistics only) or ``None``.
    :param deterministic: greedy actions (default) or sampled ones.
    :param name: label in evaluations.
    :raises ValueError: when a wrapper changes the observation in a way the policy
        cannot replay (neither an ``ObservationWrapper`` nor ``observe_reset`` /
        ``observe_step``).
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
        #: the raw env the policy acts on: its spaces and id (batch_env.evaluate checks
        #: an env against them before the first step)
        self.env_id = env_id
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self._obs_steps: list[tuple[bool, Any]] = []  # (stateful, wrapper or function)
        for w in chain:
            if isinstance(w, gym.ObservationWrapper):
                self._obs_steps.append((False, w.observation))
            elif hasattr(w, "observe_reset") and hasattr(w, "observe_step"):
                self._obs_steps.append((True, w))
            elif w.observation_space != w.env.observation_space:
                raise ValueError(
                    f"wrapper {type(w).__name__} changes the observation but a policy cannot "
                    "replay it: give it observe_reset(obs, info) and observe_step(obs, info), "
                    "or make it a gymnasium.ObservationWrapper"
                )
        self._first = True
        self._recurrent = type(model).__name__ == "RecurrentPPO"
        self._episode_start = True
        self._state: Any = None
        # action wrappers that need the state map from the acting env's info instead
        self._act_fns = action_mappers(template)
        self._maskable = type(model).__name__ == "MaskablePPO"
        # the model's mask from the acting env's info: the outermost action wrapper's
        # (all ones where its actions are all valid: BinaryAction, AdmitFraction; its own
        # mapping where it has one: FactoredAction), else the env's info mask
        self._mask_of: Callable[[dict[str, Any]], np.ndarray] = lambda info: info["action_mask"]
        outer = next((w for w in reversed(chain) if isinstance(w, gym.ActionWrapper)), None)
        if outer is not None and getattr(type(outer), "always_valid", False):
            ones = np.ones(int(cast(Any, outer.action_space).n), dtype=bool)
            self._mask_of = lambda info: ones
        elif outer is not None and hasattr(outer, "masks_from_info"):
            self._mask_of = outer.masks_from_info
        self._norm = _obs_scaling(obs_normalizer)
        actor = NumpyActor.of(model)
        # sampled actions from the NumPy actor where it has a distribution (else SB3's
        # predict, which samples with torch's global generator)
        self._actor = actor if actor is not None and (deterministic or not actor.q_values) else None
        self._torch_state: Any = None
        self._seed_draws(0)

    def reset(self, seed: int | None = None) -> None:
        """A new episode: the stateful observation wrappers (and a recurrent policy's
        state) restart at its first step; ``seed`` (the episode's, which
        :func:`batch_env.evaluate` passes) seeds a sampling policy's draws, so that a
        stochastic agent's episode is reproducible (with the NumPy actor: MLP policies)."""
        self._first = True
        self._episode_start = True
        self._state = None
        if seed is not None:
            self._seed_draws(seed)

    def _seed_draws(self, seed: int) -> None:
        """Seed a sampling policy's draws: the NumPy actor's generator, or the private
        torch generator state that ``model.predict`` samples with."""
        self._rng = np.random.default_rng(seed)
        if not self.deterministic and self._actor is None:
            import torch

            self._torch_state = torch.Generator().manual_seed(seed).get_state()

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """Map the raw observation to the env's action."""
        o = self.observe(obs, info)
        mask = self._mask_of(info) if self._maskable else None
        a: Any
        if self._actor is not None:
            a = (
                self._actor.action(o, mask)
                if self.deterministic
                else self._actor.sample(o, self._rng, mask)
            )
        else:
            a = self._predict(o, mask)
        for fn in self._act_fns:
            a = fn(a, info)
        return int(a)

    def _predict(self, o: Any, mask: np.ndarray | None) -> Any:
        """The action of ``model.predict`` (a recurrent policy carrying its LSTM state
        from step to step); a sampling policy draws with its own torch generator state,
        seeded by :meth:`reset`, leaving torch's global one as it was."""
        import torch

        kw: dict[str, Any] = {"deterministic": self.deterministic}
        if mask is not None:
            kw["action_masks"] = mask
        if self._recurrent:
            kw.update(state=self._state, episode_start=np.array([self._episode_start]))
        if self.deterministic:
            out = self.model.predict(o, **kw)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.set_rng_state(self._torch_state)
                out = self.model.predict(o, **kw)
                self._torch_state = torch.get_rng_state()
        if self._recurrent:
            self._state = out[1]
            self._episode_start = False
        return self._model_action(out[0])

    def _model_action(self, act: Any) -> Any:
        """One action of ``model.predict``'s output: an int, or a ``MultiDiscrete``
        model's array of part indices."""
        flat = np.asarray(act).reshape(-1)
        if isinstance(self.model.action_space, gym.spaces.MultiDiscrete):
            return flat.astype(np.int64)
        return int(flat[0])

    def observe(self, obs: Any, info: dict[str, Any]) -> Any:
        """What the model is shown for the raw ``(obs, info)``: the run's observation
        wrappers (advancing the stateful ones: call it once per step, as :meth:`act`
        does), then the normalization."""
        o = obs
        first, self._first = self._first, False
        for stateful, step in self._obs_steps:
            if stateful:
                o = (step.observe_reset if first else step.observe_step)(o, info)
            else:
                o = step(o)
        if self._norm is not None:
            mean, scale, clip = self._norm
            o = np.clip((o - mean) / scale, -clip, clip).astype(np.float32)
        elif self.obs_normalizer is not None:
            o = self.obs_normalizer.normalize_obs(o)
        return o


def _obs_scaling(vn: Any) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``(mean, sqrt(var + eps), clip)`` of a ``VecNormalize`` that normalizes a Box
    observation (``VecNormalize.normalize_obs``'s formula, applied without its deep
    copy); ``None`` for none, or where its statistics are not a single array."""
    if vn is None or not getattr(vn, "norm_obs", False):
        return None
    rms = getattr(vn, "obs_rms", None)
    if isinstance(rms, dict) or rms is None:
        return None
    return (
        np.array(rms.mean, dtype=np.float64),
        np.sqrt(np.array(rms.var, dtype=np.float64) + vn.epsilon),
        float(vn.clip_obs),
    )


#: what ``pickle.load`` raises on a damaged file (truncated, garbage, another object)
PICKLE_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    AttributeError,
    ImportError,
    IndexError,
    KeyError,
    TypeError,
    ValueError,
    OverflowError,
    MemoryError,
    UnicodeDecodeError,
)


def read_normalizer(path: Path) -> Any:
    """``VecNormalize`` statistics saved with ``VecNormalize.save`` (no env attached).

    :raises ValueError: naming the file when it is damaged or holds something else.
    """
    from stable_baselines3.common.vec_env import VecNormalize

    try:
        with open(path, "rb") as f:
            vn = pickle.load(f)
    except PICKLE_ERRORS as exc:
        raise ValueError(
            f"{str(path)!r} is not readable normalization statistics "
            f"({type(exc).__name__}: {' '.join(str(exc).split())})"
        ) from None
    if not isinstance(vn, VecNormalize):
        raise ValueError(f"{str(path)!r} holds a {type(vn).__name__}, not VecNormalize statistics")
    return vn


def load_normalizer(path: Path) -> Any:
    """Load ``VecNormalize`` statistics for acting (not training, no reward scaling).

    :raises ValueError: naming the file when it is damaged (see :func:`read_normalizer`).
    """
    vn = read_normalizer(path)
    vn.training = False
    vn.norm_reward = False
    return vn
