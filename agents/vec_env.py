"""Train SB3 agents on native Gymnasium vector envs: the ``VecEnv`` adapter and its helpers.

SB3 steps its own ``VecEnv`` (``DummyVecEnv``: one Python ``step`` per env and a deep copy
of every info dict). A ``gymnasium.vector.VectorEnv``, such as the NumPy twin registered as
an env id's ``vector_entry_point`` (docs/design.md: Vector envs) or Gymnasium's ``SyncVectorEnv``,
steps every lane in one call. :class:`SB3VecEnv` puts the second behind the first::

    venv = make_vec_env("batch_env/DynamicBatching-v0", num_envs=8, env_kwargs={...}, seed=0)
    model = PPO("MlpPolicy", venv)  # venv = VecMonitor(SB3VecEnv(<vector env>))

The vector env must autoreset in ``SAME_STEP`` mode: a lane whose episode ends is reset
inside the step, with its last observation and info in ``info["final_obs"]`` and
``info["final_info"]`` (the layout of Gymnasium's ``SyncVectorEnv``). That is the only mode
that gives SB3 what it expects: the next episode's first observation in the same step, and
the final observation for bootstrapping truncated episodes.

The run's scalar wrappers (``batch_env.wrappers``, from the hyperparameter file's
``env_wrapper``) cannot wrap a native vector env, so each has a vector twin in
``batch_env.wrappers`` (``VectorBinaryAction``, ``VectorQueueFeatures``,
``VectorAverageRewardCentering``, mapped here in :data:`VECTOR_TWINS`) that computes the
same numbers for every lane at once; a trained model is still loaded and evaluated
through the scalar wrappers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from stable_baselines3.common.vec_env import VecEnv, VecMonitor
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from batch_env.wrappers import (
    VectorArrivalFeatures,
    VectorAverageRewardCentering,
    VectorBinaryAction,
    VectorQueueFeatures,
    vector_action_masks,
)

from .common import import_class, make_env

MODES = ("auto", "sync", "vector_entry_point")
#: keys of a Gymnasium vector info that are not per-step info of a lane
_FINAL_KEYS = frozenset({"final_obs", "_final_obs", "final_info", "_final_info"})


# -- per-lane views of a Gymnasium vector info dict -----------------------------------------


def _lane_value(value: Any) -> Any:
    """One lane's entry as the scalar env gives it (Python scalars, arrays copied)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _is_mask(info: dict[str, Any], key: str) -> bool:
    return key.startswith("_") and key[1:] in info


def lane_info(
    info: dict[str, Any], i: int, exclude: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Lane ``i``'s entries of a Gymnasium vector info dict, as the scalar env's info.

    A key is the lane's when its mask ``info["_<key>"]`` is set for the lane (or when it has
    no mask); nested dicts (``reward_components``, ``serving``) are unbatched recursively.

    :param info: the vector env's info (a dict of per-lane arrays and masks).
    :param i: the lane.
    :param exclude: top-level keys to leave out.
    """
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key in exclude or _is_mask(info, key):
            continue
        mask = info.get(f"_{key}")
        if mask is not None and not mask[i]:
            continue
        out[key] = lane_info(value, i) if isinstance(value, dict) else _lane_value(value[i])
    return out


def _lane_values(value: Any) -> list[Any]:
    """Every lane's entry of one batched info value (fast path: ``tolist`` on 1-d arrays)."""
    if isinstance(value, dict):
        keys = [k for k in value if not _is_mask(value, k)]
        columns = [_lane_values(value[k]) for k in keys]
        return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype != object:
        return value.tolist()
    return [_lane_value(v) for v in value]


def autoreset_mode(vector_env: VectorEnv) -> AutoresetMode | None:
    """The vector env's ``metadata["autoreset_mode"]`` (``None`` when it does not say)."""
    mode = vector_env.metadata.get("autoreset_mode")
    if mode is None:
        return None
    try:
        return AutoresetMode(mode)
    except ValueError:
        return None


# -- the adapter ----------------------------------------------------------------------------


class SB3VecEnv(VecEnv):
    """A ``gymnasium.vector.VectorEnv`` (``SAME_STEP`` autoreset) as an SB3 ``VecEnv``.

    ``step`` returns SB3's ``(obs, rewards float32, dones bool, infos)``, where ``dones`` =
    terminated or truncated and ``infos`` is one dict per lane. To keep the per-step cost
    low, a lane's dict is empty unless the lane has something to report:

    * a lane whose episode ended gets the scalar env's last info (``final_info``, e.g.
      ``serving``, the episode summary), ``terminal_observation`` (``final_obs``) and
      ``TimeLimit.truncated`` (truncated and not terminated), as ``DummyVecEnv`` gives them;
    * ``step_info_keys`` names per-step info keys copied into every lane's dict at every
      step (e.g. ``("reward_components",)`` for callbacks that average them).

    Wrap it in SB3's ``VecMonitor`` for episode statistics (``info["episode"]``, hence
    ``rollout/ep_rew_mean``); :func:`make_vec_env` does.

    Seeding follows SB3: ``seed(s)`` makes the next ``reset()`` seed lane ``i`` with
    ``s + i`` (Gymnasium's convention); later resets and autoresets draw fresh seeds.
    ``env_method("action_masks")`` gives each lane's mask (sb3-contrib's ``MaskablePPO``
    calls it), from the vector env's own ``action_masks()`` when it has one (the outermost
    wrapper that defines it wins), else from each sub-env (``call("action_masks")``).

    :param vector_env: the vector env; its ``metadata["autoreset_mode"]`` must be
        ``AutoresetMode.SAME_STEP``.
    :param step_info_keys: per-step info keys given to every lane at every step.
    """

    def __init__(self, vector_env: VectorEnv, step_info_keys: Sequence[str] = ()) -> None:
        if not isinstance(vector_env, VectorEnv):
            raise TypeError(
                f"vector_env is a {type(vector_env).__name__}: expected a gymnasium.vector.VectorEnv"
            )
        mode = autoreset_mode(vector_env)
        if mode != AutoresetMode.SAME_STEP:
            found = (
                f"AutoresetMode.{mode.name}"
                if mode is not None
                else (
                    f"{vector_env.metadata.get('autoreset_mode', 'an unset mode')!r} (metadata['autoreset_mode'])"
                )
            )
            raise ValueError(
                f"vector env {vector_env} autoresets in {found}: SB3VecEnv needs "
                f"AutoresetMode.SAME_STEP (the final observation and info in info['final_obs'] "
                f"and info['final_info'], the next episode's first observation in the same "
                f"step); build it with autoreset_mode=AutoresetMode.SAME_STEP, e.g. "
                f"gymnasium.make_vec(id, n, vectorization_mode='sync', "
                f"vector_kwargs={{'autoreset_mode': AutoresetMode.SAME_STEP}}) or "
                f"agents.vec_env.make_vec_env"
            )
        self.vector_env = vector_env
        self.step_info_keys = tuple(step_info_keys)
        self.spec = getattr(vector_env, "spec", None)
        self._actions: np.ndarray | None = None
        super().__init__(
            vector_env.num_envs, vector_env.single_observation_space, vector_env.single_action_space
        )
        self.metadata: dict[str, Any] = {**self.metadata, "autoreset_mode": mode}

    # -- stepping -------------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        """Reset every lane (with the seeds and options set since the last reset)."""
        n = self.num_envs
        seeds = self._seeds
        seed: Any  # None, one int, or one per lane (what Gymnasium's vector envs take)
        first = seeds[0]
        if all(s is None for s in seeds):
            seed = None
        elif first is not None and list(seeds) == list(range(first, first + n)):
            seed = int(first)  # the form every vector env accepts
        else:
            seed = list(seeds)
        options = self._options[0] or None
        if any(o != self._options[0] for o in self._options):
            raise ValueError(
                "SB3VecEnv: per-lane reset options differ, but a vector env takes one options dict for all lanes"
            )
        obs, info = self.vector_env.reset(seed=seed, options=options)
        self.reset_infos = [lane_info(info, i) for i in range(n)]
        self._reset_seeds()
        self._reset_options()
        return _copy_obs(obs)

    def step_async(self, actions: np.ndarray) -> None:
        """Keep the actions for :meth:`step_wait`."""
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step every lane; ended lanes are already reset (``SAME_STEP``)."""
        obs, rewards, terminated, truncated, info = self.vector_env.step(self._actions)
        dones = np.logical_or(terminated, truncated)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for key in self.step_info_keys:
            if key in info:
                mask = info.get(f"_{key}")
                for i, value in enumerate(_lane_values(info[key])):
                    if mask is None or mask[i]:
                        infos[i][key] = value
        if dones.any():
            final_obs = info["final_obs"]
            final_info = info.get("final_info", {})
            has_final_info = info.get("_final_info")
            for i in np.flatnonzero(dones).tolist():
                lane = (
                    lane_info(final_info, i)
                    if has_final_info is not None and has_final_info[i]
                    else {}
                )
                lane["terminal_observation"] = _copy_obs(final_obs[i])
                lane["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
                infos[i] = lane
                self.reset_infos[i] = lane_info(info, i, exclude=_FINAL_KEYS)
        return _copy_obs(obs), np.array(rewards, dtype=np.float32), dones, infos  # copies

    def close(self) -> None:
        """Close the vector env."""
        self.vector_env.close()

    # -- masks, attributes, methods -------------------------------------------------------
    def _holder(self, name: str) -> Any:
        """The outermost vector wrapper that defines ``name``, else the base vector env."""
        env: Any = self.vector_env
        while isinstance(env, VectorWrapper):
            if name in vars(env) or hasattr(type(env), name):
                return env
            env = env.env
        return env

    def _per_lane(self, holder: Any) -> bool:
        """Whether ``holder`` is a vector env of sub-envs (``SyncVectorEnv``)."""
        return not isinstance(holder, VectorWrapper) and hasattr(holder, "envs")

    def action_masks(self) -> np.ndarray:
        """Valid actions of every lane, ``(num_envs, n_actions)`` bool
        (:func:`batch_env.wrappers.vector_action_masks`)."""
        return vector_action_masks(self.vector_env)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """An attribute per lane: each sub-env's (``SyncVectorEnv``), or the vector env's
        own (a vector wrapper's or a native vector env's), shared by every lane."""
        idx = list(self._get_indices(indices))
        holder = self._holder(attr_name)
        if self._per_lane(holder):
            values = holder.get_attr(attr_name)
            return [values[i] for i in idx]
        value = getattr(holder, attr_name)
        return [value for _ in idx]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set an attribute on the sub-envs (``SyncVectorEnv``), or on the vector env itself
        (then ``indices`` must be every lane: its attributes are shared)."""
        idx = list(self._get_indices(indices))
        holder = self._holder(attr_name)
        if self._per_lane(holder):
            for i in idx:
                setattr(holder.envs[i], attr_name, value)
        elif sorted(idx) == list(range(self.num_envs)):
            setattr(holder, attr_name, value)
        else:
            raise ValueError(
                f"set_attr({attr_name!r}, indices={indices!r}): the attributes of a vector env "
                f"are shared by all lanes; set them for every lane (indices=None)"
            )

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        """Call a method per lane: ``action_masks`` as :meth:`action_masks`; others on each
        requested sub-env (``SyncVectorEnv``), or once on the vector env itself, whose
        method must then return one result per lane."""
        idx = list(self._get_indices(indices))
        if method_name == "action_masks" and not method_args and not method_kwargs:
            masks = self.action_masks()
            return [masks[i] for i in idx]
        holder = self._holder(method_name)
        if self._per_lane(holder):
            return [
                holder.envs[i].get_wrapper_attr(method_name)(*method_args, **method_kwargs)
                for i in idx
            ]
        results = getattr(holder, method_name)(*method_args, **method_kwargs)
        return [results[i] for i in idx]

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        """No lane is a wrapped ``gym.Env`` (SB3's ``Monitor`` check)."""
        return [False for _ in self._get_indices(indices)]


def _copy_obs(obs: Any) -> Any:
    """A copy (vector envs may return, and later overwrite, their own buffers)."""
    if isinstance(obs, dict):
        return {k: np.array(v, copy=True) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(np.array(v, copy=True) for v in obs)
    return np.array(obs, copy=True)


# -- vector twins of batch_env.wrappers ---------------------------------------------------------


def _binary_twin(env: VectorEnv, wrapper: Any) -> VectorWrapper:
    return VectorBinaryAction(env, serve_full=wrapper.serve_full)


def _features_twin(env: VectorEnv, wrapper: Any) -> VectorWrapper:
    return VectorQueueFeatures(env)


def _arrival_twin(env: VectorEnv, wrapper: Any) -> VectorWrapper:
    return VectorArrivalFeatures(env, windows=wrapper.windows)


def _centering_twin(env: VectorEnv, wrapper: Any) -> VectorWrapper:
    if wrapper.curve is not None:
        curve = np.column_stack(wrapper.curve).tolist()
        return VectorAverageRewardCentering(
            env, gain_curve=curve, curve_index=wrapper.curve_index, relative=wrapper.relative
        )
    if wrapper.online:  # its gain is the resolved initial_gain
        return VectorAverageRewardCentering(env, gain=None, initial_gain=wrapper.gain)
    return VectorAverageRewardCentering(env, gain=wrapper.gain, relative=wrapper.relative)


#: scalar wrapper (dotted path, as in hyperparameter files) -> (twin class, builder from
#: the vector env and a scalar wrapper instance that holds the resolved parameters)
VECTOR_TWINS: dict[str, tuple[type[VectorWrapper], Callable[[VectorEnv, Any], VectorWrapper]]] = {
    "batch_env.wrappers.BinaryAction": (VectorBinaryAction, _binary_twin),
    "batch_env.wrappers.QueueFeatures": (VectorQueueFeatures, _features_twin),
    "batch_env.wrappers.ArrivalFeatures": (VectorArrivalFeatures, _arrival_twin),
    "batch_env.wrappers.AverageRewardCentering": (VectorAverageRewardCentering, _centering_twin),
}


# -- building ---------------------------------------------------------------------------------


def resolve_mode(env_id: str, mode: str = "auto") -> str:
    """``"vector_entry_point"`` or ``"sync"``: ``auto`` takes the first when ``env_id``
    registers a ``vector_entry_point`` (its native vector env)."""
    import batch_env  # noqa: F401  (registers the ids)

    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is invalid: allowed values are {MODES}")
    has_native = gym.spec(env_id).vector_entry_point is not None
    if mode == "auto":
        return "vector_entry_point" if has_native else "sync"
    if mode == "vector_entry_point" and not has_native:
        raise ValueError(
            f"mode='vector_entry_point': {env_id} registers no vector_entry_point; use mode='sync'"
        )
    return mode


def _accepts(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def make_vector_env(
    env_id: str,
    num_envs: int,
    env_kwargs: dict[str, Any] | None = None,
    mode: str = "auto",
    wrappers: Sequence[tuple[str, dict[str, Any]]] = (),
    step_info: bool = False,
) -> VectorEnv:
    """A Gymnasium vector env in ``SAME_STEP`` autoreset mode, wrapped by ``wrappers``.

    Wrappers with a vector twin (:data:`VECTOR_TWINS`) are applied as twins in every mode;
    otherwise, in ``sync`` mode, every wrapper wraps each sub-env (the native vector env
    cannot take scalar wrappers: a clear error).

    :param env_id: registered env id.
    :param num_envs: lanes.
    :param env_kwargs: keyword arguments of the env.
    :param mode: ``auto``, ``sync`` or ``vector_entry_point`` (see :func:`resolve_mode`).
    :param wrappers: ``[(dotted class path, kwargs), ...]``, innermost first.
    :param step_info: the caller reads per-step info keys (a native vector env with a
        ``full_info`` argument is built with ``full_info=False`` unless they or a twin need them).
    """
    import batch_env  # noqa: F401  (registers the ids)

    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs={num_envs!r} is invalid: expected an integer >= 1")
    env_kwargs = dict(env_kwargs or {})
    specs = [(p, dict(kw or {})) for p, kw in wrappers]
    mode = resolve_mode(env_id, mode)
    twins = all(p in VECTOR_TWINS for p, _ in specs)
    if mode == "vector_entry_point":
        if not twins:
            missing = [p for p, _ in specs if p not in VECTOR_TWINS]
            raise ValueError(
                f"wrappers {missing} have no vector twin (agents.vec_env.VECTOR_TWINS): a native "
                f"vector env cannot take scalar wrappers; use mode='sync'"
            )
        needs_info = step_info or any(
            getattr(VECTOR_TWINS[p][0], "needs_step_info", False) for p, _ in specs
        )
        entry = gym.spec(env_id).vector_entry_point
        creator = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        kwargs = dict(env_kwargs)
        if _accepts(creator, "full_info"):  # per-step info only when read (it costs time)
            kwargs.setdefault("full_info", needs_info)
        # make_vec refuses vector_kwargs in this mode: the autoreset mode is an env argument
        venv = gym.make_vec(
            env_id,
            num_envs=int(num_envs),
            vectorization_mode=mode,
            autoreset_mode=AutoresetMode.SAME_STEP,
            **kwargs,
        )
    else:
        scalar = [] if twins else [partial(import_class(p), **kw) for p, kw in specs]
        venv = gym.make_vec(
            env_id,
            num_envs=int(num_envs),
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP, "copy": False},
            wrappers=scalar,
            **env_kwargs,
        )
    if twins and specs:
        # the scalar wrappers validate their arguments and resolve the twins' parameters
        template = make_env(env_id, env_kwargs, specs)
        chain: list[Any] = []
        w: Any = template
        for _ in specs:
            chain.append(w)
            w = w.env
        for (path, _), scalar_wrapper in zip(specs, reversed(chain), strict=True):
            venv = VECTOR_TWINS[path][1](venv, scalar_wrapper)
        template.close()
    return venv


def make_vec_env(
    env_id: str,
    num_envs: int,
    env_kwargs: dict[str, Any] | None = None,
    seed: int | None = None,
    mode: str = "auto",
    wrappers: Sequence[tuple[str, dict[str, Any]]] = (),
    step_info_keys: Sequence[str] = (),
    monitor: bool = True,
) -> VecEnv:
    """An SB3-ready ``VecEnv`` over a Gymnasium vector env: ``VecMonitor(SB3VecEnv(...))``.

    :param env_id: registered env id.
    :param num_envs: lanes.
    :param env_kwargs: keyword arguments of the env.
    :param seed: the first ``reset()`` seeds lane ``i`` with ``seed + i`` (``None``: fresh).
    :param mode: ``auto`` (the native ``vector_entry_point`` env when registered, else
        ``sync``), ``sync`` (Gymnasium's ``SyncVectorEnv``) or ``vector_entry_point``.
    :param wrappers: the run's scalar wrapper specs, innermost first (see :func:`make_vector_env`).
    :param step_info_keys: per-step info keys every lane's info gets at every step.
    :param monitor: wrap in ``VecMonitor`` (episode return, length and time in ``info["episode"]``).
    """
    vector_env = make_vector_env(
        env_id, num_envs, env_kwargs, mode, wrappers, step_info=bool(step_info_keys)
    )
    venv: VecEnv = SB3VecEnv(vector_env, step_info_keys=step_info_keys)
    if seed is not None:
        venv.seed(seed)
    if monitor:
        venv = VecMonitor(venv)
    return venv
