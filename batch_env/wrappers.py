"""Gymnasium wrappers that help RL agents train on the batching envs.

Why they exist (facts from a prototype on DynamicBatching-v0's semantics, V100 linear
fit, B = 32, load 0.6): plain PPO with per-step discounting collapses. Steps last very
different times (a wait lasts one inter-arrival time, a batch several), so a per-step
discount makes short "wait" steps look cheap, and with ``Discrete(B + 1)`` a
deterministic argmax can pick "wait" while the probability of serving is split over many
nearly equivalent batch sizes. The remedies are the ones of semi-Markov average-reward
RL (Tijms; Das, Gosavi et al. 1999, "SMART"):

* :class:`AverageRewardCentering` adds ``g x dt`` to every reward, where ``g`` is a
  reference cost rate (a baseline's measured cost per second, the SMDP gain, or an online
  estimate). The centred reward ``-(cost - g dt)`` is the SMDP's relative-value reward:
  its sum over an episode no longer depends on how the episode's time is cut into steps,
  so discounting per step no longer favours short steps. With it, binary-action PPO came
  within 1% of the SMDP optimum in 300k steps.
* :class:`BinaryAction` reduces the choice to wait / serve ``min(queue, B)``, which is
  enough to express the control-limit policies that are optimal in the SMDP-exact
  subset and removes the split-probability problem. By default it also serves whenever
  a full batch waits (``serve_full=True``): the optimal policies are control limits at
  or below B (Deb and Serfozo 1973 for batch-service queues; every instance our solver
  has solved, tested in ``tests/test_smdp.py``), and without the rule a deterministic
  network can pick "wait" in the long-queue states training rarely visits, and keep
  waiting while a full queue drops arrivals (seen on bursty MMPP traffic).
* :class:`QueueFeatures` appends ``log(1 + queue)`` (scaled) and ``min(queue, B) / B`` to
  the observation: the queue length spans four orders of magnitude (1 .. capacity), and
  thresholds at small queue lengths are hard to represent with the raw ratio alone.

* :class:`ArrivalFeatures` appends load estimates over shorter windows than the env's
  own (time constants of 8 and 64 over the max throughput: 1.6 and 12.7 ms on
  ResNet-50/V100) and the time since the last arrival, from ``info["arrived_total"]``:
  what a policy needs to see a burst start or end, where the env's estimate averages over
  200 arrivals.

* :class:`AdmitFraction` makes the action a fraction of what can be admitted (none, a
  quarter, ..., all) and, on ``NodeBatching-v0``, which group runs next: "all" is one
  action whatever the queue, where the env's ``Discrete(2 (B + 1))`` needs the exact
  ``k``. Graph batching without a window is the constant action "all, most advanced".

* :class:`FactoredAction` offers an LLM env's action as its parts (``MultiDiscrete`` over
  the cap, the token budget, the admission order and the SM clock), so that an agent
  learns one head per part instead of one categorical over their product.

All six preserve ``info`` (including ``info["serving"]``) and the action masks; with a
gain curve the centring reads the load estimate at feature 2, which the others leave in
place (they append).

Vector twins. :class:`VectorBinaryAction`, :class:`VectorQueueFeatures`,
:class:`VectorArrivalFeatures` and :class:`VectorAverageRewardCentering` compute the same numbers for every lane of a
``gymnasium.vector.VectorEnv`` at once (the NumPy ``DynamicBatchingVectorEnv`` or
Gymnasium's ``SyncVectorEnv``/``AsyncVectorEnv`` over the scalar env). Like the scalar
wrappers they read the env's own configuration (:func:`vector_config`), and they work
in every autoreset mode (``NEXT_STEP``, ``SAME_STEP``, ``DISABLED``). Gymnasium's vector
wrappers do not forward ``call`` or any attribute of the env they wrap, so the action
masks of a wrapped vector env come from :func:`vector_action_masks` (the outermost
wrapper that defines ``action_masks`` wins, as ``get_wrapper_attr`` does for scalar
envs); the twins also answer ``call("action_masks")`` themselves, and the per-step
``info["action_mask"]`` passes through every wrapper.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

from .checks import check_number
from .config import ServingConfig
from .llm.actions import ActionCodec

if TYPE_CHECKING:
    from .core import ServingCore


def check_gain_curve(curve: Any, field: str = "gain_curve") -> tuple[np.ndarray, np.ndarray]:
    """``(xs, gains)`` of a centring gain curve: pairs ``[x, gain]`` with finite values
    and strictly increasing ``x``, at least one; ``ValueError`` naming ``field`` otherwise."""
    try:
        arr = np.asarray(curve, dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.empty((0, 0))
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] != 2 or not np.isfinite(arr).all():
        raise ValueError(
            f"{field}={curve!r} is invalid: expected a list of [x, gain] pairs of finite numbers"
        )
    if arr.shape[0] > 1 and not (np.diff(arr[:, 0]) > 0).all():
        raise ValueError(f"{field}={curve!r} is invalid: the x values must strictly increase")
    return arr[:, 0].copy(), arr[:, 1].copy()


def _centring_args(
    gain: Any, initial_gain: Any, gain_curve: Any, curve_index: Any, space: gym.Space
) -> tuple[tuple[np.ndarray, np.ndarray] | None, int]:
    """Check the centring wrappers' arguments (the scalar one's and its vector twin's);
    ``(curve or None, curve_index)``."""
    if gain is not None:
        check_number("gain", gain)
    if initial_gain is not None:
        check_number("initial_gain", initial_gain)
    if gain_curve is None:
        return None, 2
    if gain is not None:
        raise ValueError(f"gain={gain!r} and gain_curve are exclusive: give one gain or a curve")
    shape = getattr(space, "shape", None)
    n = int(shape[-1]) if shape else 0
    if (
        isinstance(curve_index, bool)
        or not isinstance(curve_index, (int, np.integer))
        or not 0 <= curve_index < n
    ):
        raise ValueError(
            f"curve_index={curve_index!r} is invalid: expected an index of the observation's "
            f"{n} features"
        )
    return check_gain_curve(gain_curve), int(curve_index)


def check_relative(relative: Any, gain: Any, gain_curve: Any) -> bool:
    """``relative`` as a bool; ``ValueError`` unless it is one, or where it divides by a
    gain that is not positive (a fixed one, any point of a curve) or not known (online)."""
    if not isinstance(relative, bool | np.bool_):
        raise ValueError(f"relative={relative!r} is invalid: expected true or false")
    if not relative:
        return False
    if gain is None and gain_curve is None:
        raise ValueError(
            "relative=True divides by the gain: give a gain or a gain_curve, not the online estimate"
        )
    values = [gain] if gain is not None else [g for _, g in gain_curve]
    if min(float(v) for v in values) <= 0.0:
        raise ValueError(
            f"relative=True divides by the gain: every gain must be > 0, got {values!r}"
        )
    return True


class AverageRewardCentering(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Add ``gain x info["dt_s"]`` to each reward (average-reward centring for an SMDP).

    :param env: a batching env (its ``info`` must carry ``dt_s``).
    :param gain: reference cost rate per second (positive: the env's rewards are costs
        with a minus sign), e.g. a baseline's ``-reward_rate_per_s`` or the SMDP gain.
        ``None`` estimates it online as total cost / total time over the steps seen so
        far (across episodes), until :meth:`freeze` is called.
    :param initial_gain: starting value of the online estimate (``None``: 0).
    :param gain_curve: instead of one gain, a gain per load: pairs ``[x, gain]``, ``x``
        increasing; each step's gain is the curve's linear interpolation (flat beyond its
        ends) at the observation's feature ``curve_index`` of the state the step's action
        was chosen in. With the default index 2, the arrival-rate estimate over the max
        throughput of ``DynamicBatching-v0`` and ``NodeBatching-v0``, that is the load
        the policy sees: on an env whose load varies by episode (or within one), each
        step is centred by the cost rate of the load it is served at, where one gain
        for all loads would reward long steps at low load and short ones at high load
        (docs/decisions.md). Excludes ``gain``.
    :param curve_index: the observation feature the curve is read at.
    :param relative: divide each centred reward by the step's gain: the cost relative
        to the reference's, in seconds. Where the load is drawn per episode, the gain (a
        curve's, at the load the policy sees) is nearly constant within an episode, so
        each episode's best policy is unchanged, but every load then weighs alike in
        training, where raw costs let the dearest loads' returns drown the cheapest
        loads' (docs/decisions.md). Needs a positive gain.

    ``info["centering_gain"]`` gives the value used at each step.
    """

    def __init__(
        self,
        env: gym.Env,
        gain: float | None = None,
        initial_gain: float | None = None,
        gain_curve: Any = None,
        curve_index: int = 2,
        relative: bool = False,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            gain=gain,
            initial_gain=initial_gain,
            gain_curve=gain_curve,
            curve_index=curve_index,
            relative=relative,
        )
        gym.Wrapper.__init__(self, env)
        self.curve, self.curve_index = _centring_args(
            gain, initial_gain, gain_curve, curve_index, env.observation_space
        )
        self.relative = check_relative(relative, gain, gain_curve)
        self.online = gain is None and self.curve is None
        self.gain = float(gain if gain is not None else (initial_gain or 0.0))
        self._cost = 0.0
        self._time = 0.0
        self._obs: Any = None

    def freeze(self) -> None:
        """Stop updating the online estimate (for evaluation)."""
        self.online = False

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset (keeping the observation a curve is read at)."""
        obs, info = self.env.reset(**kwargs)
        self._obs = obs
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env and return the centred reward."""
        if self.curve is not None:
            if self._obs is None:
                raise gym.error.ResetNeeded("reset the env before stepping it")
            x = float(np.asarray(self._obs).reshape(-1)[self.curve_index])
            self.gain = float(np.interp(x, *self.curve))
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._obs = obs
        dt = float(info["dt_s"])
        if self.online:
            self._cost -= float(reward)
            self._time += dt
            if self._time > 0.0:
                self.gain = self._cost / self._time
        info["centering_gain"] = self.gain
        centred = float(reward) + self.gain * dt
        if self.relative:
            centred /= self.gain
        return obs, centred, terminated, truncated, info


def binary_to_batch(action: Any, queue_len: int, max_batch_size: int, serve_full: bool) -> int:
    """The env action for a binary action: 0 = wait, 1 = serve ``min(queue, B)``.

    With ``serve_full``, a wait while at least ``max_batch_size`` requests wait serves a
    full batch instead.
    """
    a = int(action)
    if a not in (0, 1):
        raise ValueError(f"action={action!r} is out of range: expected 0 (wait) or 1 (serve)")
    if a or (serve_full and queue_len >= max_batch_size):
        return max_batch_size  # the env runs min(queue, B) and flags the clip
    return 0


class BinaryAction(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """Two actions: ``0`` = wait, ``1`` = serve ``min(queue, max_batch_size)``.

    :param env: a ``DynamicBatching-v0`` env.
    :param serve_full: serve a full batch whenever one waits, whatever the action.
    """

    #: every action is valid (a maskable policy acting on the raw env masks nothing)
    always_valid = True

    if TYPE_CHECKING:  # for type checkers only: the env under the wrappers is a batch_env env

        @property
        def unwrapped(self) -> ServingCore: ...

    def __init__(self, env: gym.Env, serve_full: bool = True) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, serve_full=serve_full)
        gym.ActionWrapper.__init__(self, env)
        self._B = int(cast("ServingCore", env.unwrapped).config.max_batch_size)
        self.serve_full = bool(serve_full)
        self.action_space = spaces.Discrete(2)

    def action(self, action: Any) -> int:
        """Map wait/serve to the env's batch-size action (using the env's queue)."""
        return binary_to_batch(action, self.unwrapped.queue_len, self._B, self.serve_full)

    def action_from_info(self, action: Any, info: dict[str, Any]) -> int:
        """The same mapping for a policy acting on another env, from its ``info``."""
        return binary_to_batch(action, info["queue_len"], self._B, self.serve_full)

    def action_masks(self) -> np.ndarray:
        """Both actions are always valid (every epoch has a waiting request)."""
        return np.ones(2, dtype=bool)


#: :class:`AdmitFraction`'s default levels: none, a quarter, half, three quarters, all
ADMIT_LEVELS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)


def check_levels(levels: Any, field: str = "levels") -> tuple[float, ...]:
    """``levels`` as a tuple of distinct fractions in ``[0, 1]``, increasing; else
    ``ValueError`` naming ``field``, the value and what is allowed."""
    try:
        out = tuple(float(x) for x in levels)
    except (TypeError, ValueError):
        out = ()
    if (
        len(out) < 2
        or not all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in out)
        or any(b <= a for a, b in zip(out, out[1:], strict=False))
    ):
        raise ValueError(
            f"{field}={levels!r} is invalid: expected at least two increasing fractions in [0, 1]"
        )
    return out


def fraction_to_action(action: Any, levels: tuple[float, ...], mask: np.ndarray, B: int) -> int:
    """The env action for an :class:`AdmitFraction` action, from the env's action mask.

    ``action = d * len(levels) + i`` admits ``ceil(levels[i] * kmax)`` of the ``kmax``
    requests that can be admitted now (the largest valid ``k`` of ``mask``); ``d`` is
    NodeBatching-v0's group choice (0: least advanced, 1: most advanced) and falls back
    to ``0`` where ``d = 1`` is not valid for that ``k``. In DynamicBatching-v0
    (``len(mask) == B + 1``) only ``d = 0`` exists and ``k = 0`` waits.
    """
    L = len(levels)
    n = L if len(mask) == B + 1 else 2 * L
    a = action.item() if isinstance(action, np.generic | np.ndarray) else action
    if isinstance(a, bool) or not isinstance(a, int | np.integer) or not 0 <= a < n:
        raise ValueError(f"action={action!r} is out of range: expected an integer in 0..{n - 1}")
    d, i = divmod(int(a), L)
    valid = np.flatnonzero(mask[: B + 1])
    kmax = int(valid[-1]) if len(valid) else 0
    k = math.ceil(levels[i] * kmax - 1e-9)
    if d == 1 and mask[B + 1 + k]:
        return B + 1 + k
    return k


class AdmitFraction(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """Actions as fractions of what can be admitted: ``a = d * len(levels) + i`` admits
    ``ceil(levels[i] x kmax)`` requests, ``kmax`` being what the env allows now (the
    waiting requests, up to ``max_batch_size`` less those in flight).

    On ``NodeBatching-v0`` the action space is ``Discrete(2 * len(levels))`` and ``d``
    picks the group that then runs a node (0: least advanced, 1: most advanced; ``d = 1``
    runs as 0 where it is not valid). On ``DynamicBatching-v0`` it is
    ``Discrete(len(levels))`` and level 0 waits. "All" and "none" are one action each
    whatever the queue holds: graph batching without a window (all when idle, none while
    a group is in flight) and LazyBatching's throughput mode (all, always) are two fixed
    choices, where the env's own ``Discrete(2 (B + 1))`` needs the exact ``k`` for each
    queue length. Every action is valid (:meth:`action_masks`).

    :param env: a ``NodeBatching-v0`` or ``DynamicBatching-v0`` env.
    :param levels: increasing fractions in ``[0, 1]`` (default :data:`ADMIT_LEVELS`).
    """

    if TYPE_CHECKING:

        @property
        def unwrapped(self) -> ServingCore: ...

    #: every action is valid (a maskable policy acting on the raw env masks nothing)
    always_valid = True

    def __init__(self, env: gym.Env, levels: Any = ADMIT_LEVELS) -> None:
        self.levels = check_levels(levels)
        gym.utils.RecordConstructorArgs.__init__(self, levels=list(self.levels))
        gym.ActionWrapper.__init__(self, env)
        core: Any = env.unwrapped
        if not hasattr(core, "action_masks") or not hasattr(core.config, "max_batch_size"):
            raise ValueError(
                f"env={env!r}: AdmitFraction needs a DynamicBatching-v0 or NodeBatching-v0 env"
            )
        self._B = int(core.config.max_batch_size)
        n = int(env.action_space.n)  # type: ignore[attr-defined]
        self._n = len(self.levels) * (n // (self._B + 1))
        self.action_space = spaces.Discrete(self._n)

    def action(self, action: Any) -> int:
        """Map a fraction action to the env's action (from the env's current mask)."""
        mask = cast("Any", self.unwrapped).action_masks()
        return fraction_to_action(action, self.levels, mask, self._B)

    def action_from_info(self, action: Any, info: dict[str, Any]) -> int:
        """The same mapping for a policy acting on another env, from its ``info``."""
        return fraction_to_action(action, self.levels, info["action_mask"], self._B)

    def action_masks(self) -> np.ndarray:
        """Every action is valid."""
        return np.ones(self._n, dtype=bool)


#: the parts of an LLM action, in :class:`FactoredAction`'s order
ACTION_PARTS = ("cap", "budget", "order", "clock")


class FactoredAction(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """An LLM env's action as its parts: ``MultiDiscrete`` over the cap, the token
    budget, the admission order and the SM clock, each part with its own index.

    The LLM envs (``LLMBatching-v0/v1/v2`` and their tasks) offer one flat ``Discrete``
    action that is the product of these parts (:mod:`batch_env.llm.actions`); an agent
    with one categorical head over it must learn 180 probabilities where four small heads
    would do, and cannot tell a dangerous part (a cap of 1 starves the server) from a
    harmless one. Here ``action[j]`` is the index of part :attr:`parts` ``[j]`` in the env's
    lists (``grid``, ``budgets``, ``orders``, ``clocks``), so PPO and MaskablePPO learn
    one head per part. Only the parts the env offers more than one value of are in the
    space (``parts`` names them; the others stay at their only value, the clock at the
    GPU's default where there is no clock grid). DQN needs the flat action: leave it
    unwrapped.

    :meth:`action_masks` is one mask per part, concatenated (SB3-contrib's layout for
    ``MultiDiscrete``): a value is allowed where some allowed flat action has it (the LLM
    envs allow every action, so every mask is all true).

    :param env: an LLM env (its ``unwrapped.actions`` is an
        :class:`~batch_env.llm.actions.ActionCodec`).
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)
        codec = getattr(env.unwrapped, "actions", None)
        if not isinstance(codec, ActionCodec):
            raise ValueError(
                f"env={env.unwrapped!r}: FactoredAction needs an LLM env (LLMBatching-v0/v1/v2 "
                "or an LLM task), whose actions are a cap, a budget, an order and a clock"
            )
        self.codec = codec
        sizes = (len(codec.grid), len(codec.budgets), len(codec.orders), codec.n_clocks)
        #: the parts in the action, in order (those with more than one value)
        self.parts: tuple[str, ...] = tuple(
            p for p, n in zip(ACTION_PARTS, sizes, strict=True) if n > 1
        ) or ("cap",)
        self._where = [ACTION_PARTS.index(p) for p in self.parts]
        self._sizes = sizes
        self.action_space = spaces.MultiDiscrete([sizes[j] for j in self._where])

    def flat(self, action: Any) -> int:
        """The env's flat action of a factored ``action`` (one index per part of
        :attr:`parts`); ``ValueError`` naming the part, its value and the allowed range."""
        a = np.asarray(action)
        if a.shape != (len(self.parts),):
            raise ValueError(
                f"action={action!r} must give {len(self.parts)} indices, one per part "
                f"{list(self.parts)}"
            )
        idx = [0, 0, 0, self._sizes[3] - 1]  # the only value of each absent part
        for name, j, x in zip(self.parts, self._where, a.tolist(), strict=True):
            if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < self._sizes[j]:
                raise ValueError(
                    f"action[{self.parts.index(name)}] ({name})={x!r} is out of range: "
                    f"expected an integer in 0..{self._sizes[j] - 1}"
                )
            idx[j] = x
        return self.codec.encode(idx[0], idx[1], idx[2], idx[3])

    def unflat(self, flat: int) -> np.ndarray:
        """The factored action of the env's flat action ``flat``."""
        c, b, o = self.codec.indices(int(flat))
        idx = (c, b, o, self.codec.clock_index(int(flat)))
        return np.array([idx[j] for j in self._where], dtype=np.int64)

    def action(self, action: Any) -> int:
        """The env's flat action of a factored one (:meth:`flat`)."""
        return self.flat(action)

    def action_masks(self) -> np.ndarray:
        """One mask per part, concatenated: a value is allowed where some allowed flat
        action of the env has it."""
        return self._part_masks(cast("Any", self.env.unwrapped).action_masks())

    def masks_from_info(self, info: dict[str, Any]) -> np.ndarray:
        """:meth:`action_masks` for a policy acting on another env, from its ``info``
        (``info["action_mask"]``, the flat mask)."""
        return self._part_masks(info["action_mask"])

    def _part_masks(self, flat_mask: Any) -> np.ndarray:
        """The per-part masks of a flat mask, concatenated."""
        a = np.flatnonzero(np.asarray(flat_mask, dtype=bool))
        ng, nb, no, _ = self._sizes
        of_part = (a % ng, (a // ng) % nb, (a // (ng * nb)) % no, a // (ng * nb * no))
        return np.concatenate(
            [np.bincount(of_part[j], minlength=self._sizes[j]) > 0 for j in self._where]
        )


class QueueFeatures(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Append ``log(1 + queue) / log(1 + capacity)`` and ``min(queue, B) / B``.

    :param env: a ``DynamicBatching-v0`` env (feature 0 of its observation is
        queue / max_batch_size).
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        core = cast("ServingCore", env.unwrapped)
        self._B = int(core.config.max_batch_size)
        self._log_cap = math.log1p(core.config.queue_capacity)
        base = cast(spaces.Box, env.observation_space)
        low = np.concatenate([base.low, np.zeros(2, dtype=np.float32)])
        high = np.concatenate([base.high, np.ones(2, dtype=np.float32)])
        self.observation_space = spaces.Box(low, high, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """Add the two queue features."""
        q = float(observation[0]) * self._B
        extra = np.array(
            [math.log1p(q) / self._log_cap, min(q, self._B) / self._B], dtype=np.float32
        )
        return np.concatenate([observation, np.minimum(extra, 1.0)]).astype(np.float32)


#: time constants of :class:`ArrivalFeatures`' load estimates, in units of 1 / max
#: throughput (ResNet-50/V100 at B = 32: 1.6 ms and 12.7 ms), against the env's own
#: estimate's 200 mean inter-arrival times
ARRIVAL_WINDOWS = (8.0, 64.0)
#: the time since the last arrival saturates its feature at this many seconds
_SINCE_MAX_S = 10.0


def _arrival_space(base: spaces.Box, k: int) -> spaces.Box:
    low = np.concatenate([base.low, np.zeros(k + 1, dtype=np.float32)])
    high = np.concatenate([base.high, np.full(k, _CLIP_RATE, np.float32), np.ones(1, np.float32)])
    return spaces.Box(low, high, dtype=np.float32)


#: the load estimates' clip (as the env's own: 100 x the max throughput)
_CLIP_RATE = 100.0


class StatefulFeatures(gym.Wrapper):
    """An observation wrapper whose features keep state from step to step, written as
    :meth:`observe_reset` / :meth:`observe_step` from ``(obs, info)`` alone, so that a
    policy acting on another env (``agents.load_policy``) replays them exactly.
    Subclasses implement those two; ``reset`` and ``step`` call them."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset, and the features of the episode's first observation."""
        obs, info = self.env.reset(**kwargs)
        return self.observe_reset(obs, info), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, and the features after it."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.observe_step(obs, info), reward, terminated, truncated, info

    def observe_reset(self, obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        """The features of an episode's first observation (restarting the state)."""
        raise NotImplementedError

    def observe_step(self, obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        """The features after a step, from its ``info``."""
        raise NotImplementedError


class ArrivalFeatures(StatefulFeatures, gym.utils.RecordConstructorArgs):
    """Append what the arrivals show beyond the env's one rate estimate: load estimates
    over shorter windows, and the time since the last arrival (the burst state, issue 21).

    The arrivals of a step are the change of ``info["arrived_total"]`` (those a full queue
    dropped included). For each window ``w`` the estimate follows the env's own estimator
    with time constant ``tau = w / max throughput``: ``r <- r exp(-dt / tau) + arrivals /
    tau``, started at the env's estimate at reset; the feature is ``r / max throughput``
    (the load it indicates; clipped at 100). The time since the last arrival ``s`` counts
    from the end of the last step in which requests arrived (exact after a wait, which an
    arrival ends unless a tick does first; after a batch, from the batch's end); its
    feature is ``log1p(s x mu) / log1p(10 s x mu)`` (``mu`` the max throughput), clipped
    at 1.

    :param env: a ``DynamicBatching-v0`` env (observation feature 2 is its rate estimate
        over the max throughput; ``info["arrived_total"]`` every step).
    :param windows: the estimates' time constants in units of ``1 / max throughput``.
    """

    def __init__(self, env: gym.Env, windows: Any = ARRIVAL_WINDOWS) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, windows=windows)
        gym.Wrapper.__init__(self, env)
        core = cast("ServingCore", env.unwrapped)
        self._mu = float(core.max_throughput_rps)
        self._tau = _arrival_taus(windows, self._mu)
        self.windows = [float(w) for w in np.asarray(windows, dtype=np.float64).reshape(-1)]
        self.observation_space = _arrival_space(
            cast(spaces.Box, env.observation_space), len(self._tau)
        )
        self._r = np.zeros(len(self._tau))
        self._seen = 0
        self._since = 0.0

    def _features(self, obs: np.ndarray) -> np.ndarray:
        since = math.log1p(self._since * self._mu) / math.log1p(_SINCE_MAX_S * self._mu)
        extra = np.concatenate([np.minimum(self._r / self._mu, _CLIP_RATE), [min(since, 1.0)]])
        return np.concatenate([obs, extra.astype(np.float32)]).astype(np.float32)

    def observe_reset(self, obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        """The features of an episode's first observation (restarting the estimates at
        the env's own): what :meth:`reset` returns. With :meth:`observe_step`, a policy
        acting on another env (``agents.load_policy``) keeps the same state from the
        ``(obs, info)`` it is shown."""
        self._r[:] = float(obs[2]) * self._mu
        self._seen = int(info["arrived_total"])
        self._since = 0.0
        return self._features(obs)

    def observe_step(self, obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        """The features after a step, from its ``info`` (``dt_s``, ``arrived_total``):
        what :meth:`step` returns."""
        dt = float(info["dt_s"])
        total = int(info["arrived_total"])
        n, self._seen = total - self._seen, total
        self._r = self._r * np.exp(-dt / self._tau) + n / self._tau
        self._since = 0.0 if n else self._since + dt
        return self._features(obs)


#: :class:`InputPreview`'s look-ahead: the next 1, 4, 16, 64 and 256 arrivals
PREVIEW_COUNTS = (1, 4, 16, 64, 256)
#: the time to an arrival beyond the episode's input saturates at this many seconds
_PREVIEW_MAX_S = 1.0e4
#: the features' upper bound (a token sum's log1p stays far below it)
_PREVIEW_HIGH = float(np.log1p(1.0e12))


class InputPreview(StatefulFeatures, gym.utils.RecordConstructorArgs):
    """Append what the episode's input will be: for each ``k`` of ``counts``, the time to
    the ``k``-th next arrival (``log1p`` of seconds, saturated at 10,000 s where the input
    ends first) and, on the LLM envs, the prompt and output tokens of the next ``k``
    arrivals (``log1p`` of their sums), from ``env.unwrapped.upcoming_input``
    (``docs/input_replay.md``).

    This is the input of an input-dependent baseline, for a critic only: a policy that
    reads it is clairvoyant. ``agents``' ``ppo_input`` hides it from the actor; a policy
    acting without the env's future (``agents.load_policy``, which replays observations
    from ``(obs, info)``) is shown zeros in its place. The features sit after the
    observation (``input_dims`` of them): wrap it last among the observation wrappers to
    keep them at the end.

    :param env: a batch-env serving env.
    :param counts: how many arrivals ahead each group of features looks (positive
        integers, increasing, at most 100,000).
    """

    def __init__(self, env: gym.Env, counts: Any = PREVIEW_COUNTS) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, counts=counts)
        gym.Wrapper.__init__(self, env)
        from .core import is_serving_env

        self.counts = _preview_counts(counts)
        if not is_serving_env(env):
            raise ValueError(
                f"env={env!r} is invalid for InputPreview: expected a batch-env serving env "
                "(it reads upcoming_input)"
            )
        base = cast(spaces.Box, env.observation_space)
        self._core = env.unwrapped
        # the sizes the env knows of its arrivals (the LLM envs: their token counts)
        sizes = self._core.engine.arrival_sizes(0, 0)  # type: ignore[attr-defined]
        self._llm = "prompt_tokens" in sizes and "output_tokens" in sizes
        #: how many features this wrapper appends (per count: a time, and on an LLM env
        #: two token sums)
        self.input_dims = len(self.counts) * (3 if self._llm else 1)
        n = self.input_dims
        self.observation_space = spaces.Box(
            np.concatenate([base.low, np.zeros(n, np.float32)]),
            np.concatenate([base.high, np.full(n, _PREVIEW_HIGH, np.float32)]),
            dtype=np.float32,
        )
        self._idx = np.asarray(self.counts) - 1  # the k-th next arrival's index, per count
        self._zeros = np.zeros(n, np.float32)  # an acting policy's view of the preview

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset, and the first observation with the episode's coming input."""
        obs, info = self.env.reset(**kwargs)
        return self._with(obs, self.preview()), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, and the observation with the input still to come."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with(obs, self.preview()), reward, terminated, truncated, info

    def preview(self) -> np.ndarray:
        """The features of the input to come, from the env this wrapper wraps."""
        ahead = self._core.upcoming_input(self.counts[-1])  # type: ignore[attr-defined]
        dt = ahead["dt_s"]
        idx = self._idx
        t = np.full(len(idx), _PREVIEW_MAX_S)
        inside = idx < len(dt)
        t[inside] = np.minimum(dt[idx[inside]], _PREVIEW_MAX_S)
        parts = [np.log1p(np.maximum(t, 0.0))]
        if self._llm:
            for key in ("prompt_tokens", "output_tokens"):
                csum = np.concatenate([[0.0], np.cumsum(ahead[key], dtype=np.float64)])
                parts.append(np.log1p(csum[np.minimum(idx + 1, len(dt))]))
        return np.concatenate(parts).astype(np.float32)

    def _with(self, obs: np.ndarray, extra: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, extra]).astype(np.float32)

    def observe_reset(self, obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        """An acting policy's observation (``agents.load_policy``): zeros in place of the
        input, which only the env being stepped knows."""
        return self._with(obs, self._zeros)

    def observe_step(self, obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
        """As :meth:`observe_reset`."""
        return self._with(obs, self._zeros)


def _preview_counts(counts: Any) -> tuple[int, ...]:
    try:
        c = np.asarray(counts, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        c = np.empty(0)
    ok = (
        c.size >= 1
        and np.isfinite(c).all()
        and (c == np.round(c)).all()
        and (c >= 1).all()
        and (c <= 100_000).all()
        and (np.diff(c) > 0).all()
    )
    if not ok:
        raise ValueError(
            f"counts={counts!r} is invalid: expected one or more increasing integers in "
            "1..100000 (how many arrivals ahead each group of features looks)"
        )
    return tuple(int(x) for x in c)


def _arrival_taus(windows: Any, mu: float) -> np.ndarray:
    try:
        w = np.asarray(windows, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        w = np.empty(0)
    if w.size < 1 or not np.isfinite(w).all() or (w <= 0).any():
        raise ValueError(
            f"windows={windows!r} is invalid: expected one or more positive numbers (time "
            "constants in units of 1 / max throughput)"
        )
    return w / mu


# -- vector twins ------------------------------------------------------------------------------


def vector_config(env: VectorEnv) -> ServingConfig:
    """The serving configuration every lane of ``env`` shares: the native vector env's
    ``config``, else the sub-envs' (``get_attr("config")``, e.g. ``SyncVectorEnv``).

    :raises TypeError: ``env`` is not a vector env of batching lanes.
    """
    base = env.unwrapped
    config = getattr(base, "config", None)
    if config is None and hasattr(base, "get_attr"):
        try:
            configs = base.get_attr("config")
        except AttributeError:
            configs = ()
        if configs and all(c == configs[0] for c in configs):
            config = configs[0]
    if not isinstance(config, ServingConfig):
        raise TypeError(
            f"{env} is not a vector env of batch_env lanes with one shared configuration "
            "(its .config or get_attr('config'))"
        )
    return config


def _defines(obj: Any, name: str) -> bool:
    """Whether ``obj``'s class itself (not ``VectorWrapper`` or ``VectorEnv``) defines ``name``."""
    return any(
        name in vars(c) for c in type(obj).__mro__ if c not in (VectorWrapper, VectorEnv, object)
    )


def vector_action_masks(env: VectorEnv) -> np.ndarray:
    """Valid actions of every lane, ``(num_envs, n_actions)`` bool, through any wrappers.

    The outermost wrapper whose class defines ``action_masks`` gives them (a twin such as
    :class:`VectorBinaryAction` changes the actions); Gymnasium's own vector wrappers
    (``RecordEpisodeStatistics``, ...) forward nothing, so they are passed through. At the
    base: the native vector env's ``action_masks()``, or the sub-envs' (``call``).
    """
    e: Any = env
    while isinstance(e, VectorWrapper):
        if _defines(e, "action_masks"):  # its class defines action_masks (VectorWrapper does not)
            return np.asarray(e.action_masks(), dtype=bool)  # type: ignore[attr-defined]
        e = e.env
    if hasattr(e, "action_masks"):
        return np.asarray(e.action_masks(), dtype=bool)
    if hasattr(e, "call"):
        return np.stack(e.call("action_masks")).astype(bool, copy=False)
    raise AttributeError(f"{env} has no action masks")


class _BatchingVectorWrapper(VectorWrapper):
    """Base of the twins: ``SyncVectorEnv``'s ``call``/``get_attr`` through the wrapper
    chain, with ``call("action_masks")`` from :func:`vector_action_masks`."""

    #: the twin reads per-step info keys (``dt_s``): a native vector env must give them
    needs_step_info = False

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """One result per lane (as ``SyncVectorEnv.call``): ``action_masks`` as
        :func:`vector_action_masks` gives them, anything else from the first env inside
        that has ``call`` (Gymnasium's wrappers have none)."""
        if name == "action_masks" and not args and not kwargs:
            return tuple(vector_action_masks(self))
        e: Any = self.env
        while not hasattr(e, "call") and isinstance(e, VectorWrapper):
            e = e.env
        if not hasattr(e, "call"):
            raise AttributeError(f"{self}: no env inside has call({name!r})")
        return e.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """``call(name)``, as ``SyncVectorEnv.get_attr``."""
        return self.call(name)

    def _mode(self) -> AutoresetMode:
        mode = self.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        return AutoresetMode(mode)


class VectorBinaryAction(_BatchingVectorWrapper):
    """Vector twin of :class:`BinaryAction`: per lane, ``0`` = wait, ``1`` = serve
    ``min(queue, max_batch_size)``; with ``serve_full``, a wait while a full batch waits
    serves it. ``max_batch_size`` is the env's (:func:`vector_config`).

    The queue comes from observation feature 0 (queue / max_batch_size, exact), so the
    vector env need not return per-step info; ``reset`` (a masked one too) and every step
    return every lane's observation, so this holds in every autoreset mode.

    :param env: a vector env of ``DynamicBatching-v0`` lanes.
    :param serve_full: as the scalar wrapper's.
    """

    def __init__(self, env: VectorEnv, serve_full: bool = True) -> None:
        super().__init__(env)
        self._B = int(vector_config(env).max_batch_size)
        self.serve_full = bool(serve_full)
        self.single_action_space = spaces.Discrete(2)
        self.action_space = batch_space(self.single_action_space, env.num_envs)
        self._queue = np.zeros(env.num_envs, dtype=np.int64)

    def _observe(self, obs: np.ndarray) -> None:
        self._queue = np.rint(obs[:, 0].astype(np.float64) * self._B).astype(np.int64)

    def reset(
        self, *, seed: Any = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset and read every lane's queue."""
        obs, info = self.env.reset(seed=seed, options=options)
        self._observe(obs)
        return obs, info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Map wait/serve to batch sizes, step, and read every lane's new queue."""
        out = self.env.step(self.actions(actions))
        self._observe(out[0])
        return out

    def actions(self, actions: Any) -> np.ndarray:
        """The env's batch-size actions for binary ones (one per lane)."""
        a = np.asarray(actions)
        bad = (a != 0) & (a != 1)
        if bad.any():
            lane = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"actions[{lane}]={a[lane].item()!r} is out of range: expected 0 (wait) or 1 (serve)"
            )
        serve = a.astype(bool)
        if self.serve_full:
            serve = serve | (self._queue >= self._B)
        return np.where(serve, self._B, 0)

    def action_masks(self) -> np.ndarray:
        """Both actions are always valid."""
        return np.ones((self.num_envs, 2), dtype=bool)


class VectorQueueFeatures(_BatchingVectorWrapper):
    """Vector twin of :class:`QueueFeatures`: append ``log(1 + queue) / log(1 + capacity)``
    and ``min(queue, B) / B`` to every lane's observation (and to ``info["final_obs"]``
    of lanes that ended, ``SAME_STEP``). ``B`` and the capacity are the env's
    (:func:`vector_config`).

    :param env: a vector env of ``DynamicBatching-v0`` lanes.
    """

    def __init__(self, env: VectorEnv) -> None:
        super().__init__(env)
        config = vector_config(env)
        self._B = int(config.max_batch_size)
        self._log_cap = math.log1p(config.queue_capacity)
        base = cast(spaces.Box, env.single_observation_space)
        low = np.concatenate([base.low, np.zeros(2, dtype=np.float32)])
        high = np.concatenate([base.high, np.ones(2, dtype=np.float32)])
        self.single_observation_space = spaces.Box(low, high, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)

    def observations(self, obs: np.ndarray) -> np.ndarray:
        """Add the two queue features to a ``(lanes, features)`` array."""
        q = obs[:, 0].astype(np.float64) * self._B
        extra = np.stack([np.log1p(q) / self._log_cap, np.minimum(q, self._B) / self._B], axis=1)
        return np.concatenate([obs, np.minimum(extra.astype(np.float32), 1.0)], axis=1).astype(
            np.float32
        )

    def reset(
        self, *, seed: Any = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset with the features added."""
        obs, info = self.env.reset(seed=seed, options=options)
        return self.observations(obs), info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step with the features added, final observations included."""
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        if "final_obs" in info:
            final = info["final_obs"]
            for i in np.flatnonzero(info["_final_obs"]).tolist():
                final[i] = self.observations(np.asarray(final[i])[None])[0]
        return self.observations(obs), rewards, terminated, truncated, info


class VectorArrivalFeatures(_BatchingVectorWrapper):
    """Vector twin of :class:`ArrivalFeatures`: the same features for every lane (and for
    ``info["final_obs"]`` of lanes that ended, ``SAME_STEP``), from the per-step
    ``info["arrived_total"]`` and ``info["dt_s"]``, which the native vector env gives
    unless built with ``full_info=False``.

    :param env: a vector env of ``DynamicBatching-v0`` lanes.
    :param windows: as the scalar wrapper's.
    """

    needs_step_info = True

    def __init__(self, env: VectorEnv, windows: Any = ARRIVAL_WINDOWS) -> None:
        super().__init__(env)
        base: Any = env.unwrapped  # the native vector env's, else the sub-envs' (sync)
        mu = getattr(base, "max_throughput_rps", None)
        self._mu = float(mu if mu is not None else base.get_attr("max_throughput_rps")[0])
        self._tau = _arrival_taus(windows, self._mu)
        self.single_observation_space = _arrival_space(
            cast(spaces.Box, env.single_observation_space), len(self._tau)
        )
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)
        n = env.num_envs
        self._r = np.zeros((n, len(self._tau)))
        self._seen = np.zeros(n, dtype=np.int64)
        self._since = np.zeros(n)
        self._resetting = np.zeros(n, dtype=bool)  # NEXT_STEP: lanes this step resets

    def _features(self, obs: np.ndarray, lanes: Any = slice(None)) -> np.ndarray:
        since = np.log1p(self._since[lanes] * self._mu) / math.log1p(_SINCE_MAX_S * self._mu)
        extra = np.column_stack(
            [np.minimum(self._r[lanes] / self._mu, _CLIP_RATE), np.minimum(since, 1.0)]
        )
        return np.concatenate([obs, extra.astype(np.float32)], axis=1).astype(np.float32)

    def _start(self, lanes: np.ndarray, obs: np.ndarray, arrived: Any) -> None:
        """Lanes that (re)start an episode: the estimates at the env's own."""
        self._r[lanes] = obs[lanes, 2:3].astype(np.float64) * self._mu
        self._seen[lanes] = np.asarray(arrived, dtype=np.int64)[lanes]
        self._since[lanes] = 0.0

    def _update(self, lanes: np.ndarray, arrived: Any, dt: Any) -> None:
        total = np.asarray(arrived, dtype=np.int64)[lanes]
        n = total - self._seen[lanes]
        self._seen[lanes] = total
        d = np.asarray(dt, dtype=np.float64)[lanes][:, None]
        self._r[lanes] = self._r[lanes] * np.exp(-d / self._tau) + n[:, None] / self._tau
        self._since[lanes] = np.where(n > 0, 0.0, self._since[lanes] + d[:, 0])

    def _need(self, info: dict[str, Any], where: str) -> None:
        if "arrived_total" not in info or "dt_s" not in info:
            raise ValueError(
                f"VectorArrivalFeatures needs {where}['arrived_total'] and ['dt_s'] of every "
                "lane: build the vector env with its per-step info (a native batch_env vector "
                "env gives them unless built with full_info=False)"
            )

    def reset(
        self, *, seed: Any = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset (every lane, or the masked ones) with the features added."""
        mask = (options or {}).get("reset_mask")  # before the reset: SyncVectorEnv pops it
        mask = None if mask is None else np.array(mask, dtype=bool)
        obs, info = self.env.reset(seed=seed, options=options)
        self._need(info, "info")
        lanes = np.ones(self.num_envs, bool) if mask is None else mask
        self._resetting[lanes] = False
        self._start(lanes, np.asarray(obs), info["arrived_total"])
        return self._features(np.asarray(obs)), info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step with the features added, final observations included."""
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        self._need(info, "info")
        obs = np.asarray(obs)
        ended = np.logical_or(terminated, truncated)
        mode = self._mode()
        if mode == AutoresetMode.NEXT_STEP:
            reset = self._resetting.copy()
            self._update(~reset, info["arrived_total"], info["dt_s"])
            self._start(reset, obs, info["arrived_total"])
            self._resetting = ended.copy()
        elif mode == AutoresetMode.SAME_STEP and ended.any():
            final = info["final_info"]
            self._need(final, "final_info")
            lanes = np.flatnonzero(ended)
            self._update(~ended, info["arrived_total"], info["dt_s"])
            self._update(ended, final["arrived_total"], final["dt_s"])
            finals = info["final_obs"]
            for i in lanes.tolist():
                finals[i] = self._features(np.asarray(finals[i])[None], [i])[0]
            self._start(ended, obs, info["arrived_total"])
        else:
            self._update(np.ones(self.num_envs, bool), info["arrived_total"], info["dt_s"])
        return self._features(obs), rewards, terminated, truncated, info


class VectorAverageRewardCentering(_BatchingVectorWrapper):
    """Vector twin of :class:`AverageRewardCentering`: add ``gain x dt_s`` to every lane's
    reward, with one gain per lane (a fixed one, or each lane's online estimate total
    cost / total time, as the scalar wrapper on that lane).

    ``info["centering_gain"]`` gives the gains, masked (``_centering_gain``) to the lanes
    that stepped: in ``NEXT_STEP`` mode a lane that is reset by the step gets its reset
    info, without a gain, as the scalar wrapper's ``reset`` gives none; in ``SAME_STEP``
    mode lanes that ended also get it in ``final_info``. Needs the per-step
    ``info["dt_s"]`` (lanes that ended in ``SAME_STEP`` mode: ``final_info["dt_s"]``), which
    the native vector env gives unless built with ``full_info=False``.

    :param env: a vector env of batching lanes.
    :param gain: reference cost rate per second, or ``None`` for the online estimate.
    :param initial_gain: starting value of the online estimate (``None``: 0).
    :param gain_curve: a gain per load, read per lane at the observation feature
        ``curve_index`` of the state its action was chosen in (as the scalar wrapper).
    :param curve_index: the observation feature the curve is read at.
    :param relative: divide each centred reward by its lane's gain (as the scalar wrapper).
    """

    needs_step_info = True

    def __init__(
        self,
        env: VectorEnv,
        gain: float | None = None,
        initial_gain: float | None = None,
        gain_curve: Any = None,
        curve_index: int = 2,
        relative: bool = False,
    ) -> None:
        super().__init__(env)
        self.curve, self.curve_index = _centring_args(
            gain, initial_gain, gain_curve, curve_index, env.single_observation_space
        )
        self.relative = check_relative(relative, gain, gain_curve)
        self.online = gain is None and self.curve is None
        self.gain = np.full(
            env.num_envs, float(gain if gain is not None else (initial_gain or 0.0))
        )
        self._cost = np.zeros(env.num_envs)
        self._time = np.zeros(env.num_envs)
        self._resetting = np.zeros(env.num_envs, dtype=bool)  # NEXT_STEP: lanes this step resets
        self._obs: np.ndarray | None = None  # each lane's latest observation (curve)

    def freeze(self) -> None:
        """Stop updating the online estimates."""
        self.online = False

    def reset(
        self, *, seed: Any = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset (the gains and online estimates carry over, as the scalar wrapper's)."""
        mask = (options or {}).get("reset_mask")  # before the reset: SyncVectorEnv pops it
        mask = None if mask is None else np.array(mask, dtype=bool)
        out = self.env.reset(seed=seed, options=options)
        if mask is None:
            self._resetting[:] = False
        else:
            self._resetting[mask] = False
        if self.curve is not None:
            obs = np.asarray(out[0], dtype=np.float64)
            if self._obs is None or mask is None:
                self._obs = obs.copy()
            else:  # a masked reset: the other lanes' observations are not new
                self._obs[mask] = obs[mask]
        return out

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step and return the centred rewards."""
        if self.curve is not None:
            if self._obs is None:
                raise gym.error.ResetNeeded("reset the vector env before stepping it")
            np.copyto(self.gain, np.interp(self._obs[:, self.curve_index], *self.curve))
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        if self.curve is not None:
            self._obs = np.array(obs, dtype=np.float64)
        if "dt_s" not in info:
            raise ValueError(
                "VectorAverageRewardCentering needs info['dt_s'] at every step: build the vector "
                "env with its per-step info (a native batch_env vector env gives it unless "
                "built with full_info=False)"
            )
        dt = np.asarray(info["dt_s"], dtype=np.float64)
        ended = np.logical_or(terminated, truncated)
        same_step = self._mode() == AutoresetMode.SAME_STEP
        stepped = np.ones(self.num_envs, dtype=bool)
        if same_step and ended.any():  # the ended lanes' last step is in final_info
            final = info["final_info"]
            if "dt_s" not in final:
                raise ValueError(
                    "VectorAverageRewardCentering needs final_info['dt_s'] of the lanes that ended"
                )
            lanes = np.flatnonzero(ended)
            dt = dt.copy()
            dt[lanes] = np.asarray(final["dt_s"], dtype=np.float64)[lanes]
        elif self._mode() == AutoresetMode.NEXT_STEP:
            stepped = ~self._resetting  # reset lanes: reward 0, dt 0, no step
            dt = np.where(stepped, dt, 0.0)
            self._resetting = ended.copy()
        rewards = np.asarray(rewards, dtype=np.float64)
        if self.online:
            self._cost -= np.where(stepped, rewards, 0.0)
            self._time += dt
            np.divide(self._cost, self._time, out=self.gain, where=self._time > 0.0)
        info["centering_gain"] = np.where(stepped, self.gain, 0.0)
        info["_centering_gain"] = stepped
        if same_step and ended.any():
            final["centering_gain"] = np.where(ended, self.gain, 0.0)
            final["_centering_gain"] = ended.copy()
        centred = rewards + self.gain * dt
        if self.relative:
            centred = centred / self.gain
        return (
            obs,
            np.where(stepped, centred, rewards),
            terminated,
            truncated,
            info,
        )


WRAPPERS: dict[str, type[gym.Wrapper]] = {
    "centering": AverageRewardCentering,
    "binary": BinaryAction,
    "queue_features": QueueFeatures,
    "arrival_features": ArrivalFeatures,
}
