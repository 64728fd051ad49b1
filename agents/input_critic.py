"""``ppo_input``: PPO whose critic sees the episode's coming input (an input-dependent
baseline), for learning from scratch on input-driven serving envs (issue 65, item 2).

In a serving env the return is driven as much by the input (when requests arrive, how
long they are) as by the policy. A critic that sees only the state estimates an
advantage that is mostly noise about the future input (Mao et al., "Variance Reduction
for Reinforcement Learning in Input-Driven Environments", ICLR 2019). Here the critic is
also given what the input will be: :class:`batch_env.wrappers.InputPreview` appends the
time to the next 1 .. 256 arrivals and their token sums to the observation, and
:class:`InputCriticPolicy` shows them to the value network only. The actor's input has
zeros in their place, so the policy that acts reads nothing of the future: it acts
exactly as it would on an env without the preview (``agents.load_policy`` replays the
observation with zeros there), and its results compare with every other policy's.

The baseline ``V(s, z)`` of a state ``s`` under the coming input ``z`` leaves the policy
gradient unbiased because the input does not depend on the actions (an episode's seed
fixes it, ``docs/input_replay.md``). Everything else is PPO as shipped (``ppo.yml``'s
entry for the env); what the method changes, and what it measured, is in
``docs/results/agents-llm-scratch.md``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import stable_baselines3
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import VecEnv

#: the wrapper that makes the critic's input (prepended to an entry's wrappers)
PREVIEW_WRAPPER = "batch_env.wrappers.InputPreview"


class HideTail(BaseFeaturesExtractor):
    """The flat observation with its last ``hidden`` features set to zero: the actor's
    view of an observation whose tail is the critic's alone."""

    mask: th.Tensor  # a buffer: 1 for each feature the actor sees, 0 for the hidden ones

    def __init__(self, observation_space: gym.spaces.Box, hidden: int) -> None:
        dim = int(observation_space.shape[0])
        super().__init__(observation_space, dim)
        mask = th.ones(dim)
        if hidden:
            mask[dim - hidden :] = 0.0
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, observations: th.Tensor) -> th.Tensor:  # noqa: D102
        return th.flatten(observations, start_dim=1) * self.mask


class InputCriticPolicy(ActorCriticPolicy):
    """SB3's actor-critic MLP with separate feature extractors: the value network sees
    the whole observation, the actor all but its last ``input_features`` (zeros there).

    :param input_features: how many features at the end of the observation the actor
        does not see (``InputPreview.input_dims``; 0 is SB3's policy with unshared
        extractors). :class:`InputPPO` sets it from the env.
    """

    def __init__(self, *args: Any, input_features: int = 0, **kwargs: Any) -> None:
        kwargs["share_features_extractor"] = False
        super().__init__(*args, **kwargs)
        dim = int(self.observation_space.shape[0])  # type: ignore[index]
        if isinstance(input_features, bool) or not 0 <= int(input_features) < dim:
            raise ValueError(
                f"input_features={input_features!r} is invalid: expected an integer in "
                f"0..{dim - 1} (features at the end of a {dim}-feature observation)"
            )
        self.input_features = int(input_features)
        self.pi_features_extractor = HideTail(self.observation_space, self.input_features)  # type: ignore[arg-type]

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["input_features"] = self.input_features
        return data


class InputPPO(stable_baselines3.PPO):
    """PPO with :class:`InputCriticPolicy` (``MlpPolicy`` names it), the number of hidden
    features taken from the env's :class:`batch_env.wrappers.InputPreview`.

    :raises ValueError: when the env has no ``InputPreview`` (the critic would have no
        input to see: give the entry's ``env_wrapper`` the wrapper, as ``ppo.yml``'s
        entries are given it by :func:`input_entry`).
    """

    policy_aliases = {"MlpPolicy": InputCriticPolicy}  # noqa: RUF012 (SB3's class attribute)

    def __init__(self, policy: str | type[InputCriticPolicy], env: Any, **kwargs: Any) -> None:
        """:param policy: ``MlpPolicy`` (:class:`InputCriticPolicy`) or that class.
        :param env: the training env, wrapped in ``InputPreview`` (``None`` on load).
        :param kwargs: PPO's other arguments (``stable_baselines3.PPO``)."""
        super().__init__(policy, env, **kwargs)

    def _setup_model(self) -> None:
        if self.env is not None:  # None: a saved model's load, with its own policy_kwargs
            self.policy_kwargs = {**self.policy_kwargs, "input_features": _input_dims(self.env)}
        super()._setup_model()


def _input_dims(env: VecEnv) -> int:
    try:
        dims = env.get_attr("input_dims")[0]
    except AttributeError:
        dims = None
    if not isinstance(dims, int):
        raise ValueError(
            "ppo_input needs the env wrapped in batch_env.wrappers.InputPreview (its critic's "
            "input): add it to the hyperparameters' env_wrapper"
        )
    return dims


def input_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """``ppo_input``'s hyperparameters from PPO's entry for the same env: the same, with
    :class:`batch_env.wrappers.InputPreview` last among the wrappers (outermost, so that
    its features end the observation, after any another wrapper appends)."""
    out = dict(entry)
    wrappers = out.get("env_wrapper") or []
    wrappers = [wrappers] if isinstance(wrappers, (str, dict)) else list(wrappers)
    names = [w if isinstance(w, str) else next(iter(w)) for w in wrappers]
    if PREVIEW_WRAPPER not in names:
        wrappers = [*wrappers, PREVIEW_WRAPPER]
    out["env_wrapper"] = wrappers
    return out
