"""``ppo_crn``: PPO whose advantages compare actions on one input (common random numbers),
for learning from scratch on input-driven serving envs (issue 65, item 2).

In a serving env the return is driven as much by the input (when requests arrive, how
long they are) as by the policy, so an advantage estimated from one trajectory is mostly
noise about the future input (Mao et al., "Variance Reduction for Reinforcement
Learning in Input-Driven Environments", ICLR 2019). Here no critic estimates it. At
states the policy visits (a *root* every ``root_every`` steps of each training env), the
env is copied ``branches`` times with its whole future
(:func:`batch_env.planning.planning_copy` of the lane, wrappers and all: a deep copy that
shares only what nothing changes; the same arrivals, lengths and random streams,
``docs/input_replay.md``); each copy takes its own first action, drawn from the policy,
and then follows the policy, every copy drawing its actions with the same uniform
numbers, until ``window_s`` seconds of simulated time have passed (or the episode ends).
The copies differ only through their first action, so the difference of their returns
over the window is that action's doing: the advantage of branch ``k`` is its return
less the mean of the other branches' (a leave-one-out baseline, unbiased because the
first actions are drawn independently from the policy). This is the "vine" estimator of TRPO (Schulman et al.,
ICML 2015), which also shares random numbers between its rollouts, applied to an input
that the env replays exactly.

The policy is updated with PPO's clipped objective on those samples (``n_steps x
n_envs`` of them a rollout: ``/ branches`` roots). ``gamma`` and ``gae_lambda`` are not
used; the value head is fitted but nothing reads it, unless ``bootstrap`` adds its
estimate of each branch's state at the window's end to that branch's return (and the
head is then fitted to those returns). Every env step counts toward ``n_timesteps``:
the training envs' and the branches'. Where the entry centres the reward
(``agents.wrappers.CenteredReward``), each branch's return is its cost less the gain
times its duration, so the branches that end a little past the window are compared
fairly. What it measured, and the ablation without the shared
input (each branch given a future of its own), is in
``docs/results/agents-llm-scratch.md``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import stable_baselines3
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from batch_env.planning import planning_copy

#: copies of the env compared at each root (the default of ``branches``)
BRANCHES = 8


class CRNPPO(stable_baselines3.PPO):
    """PPO whose advantages come from branches of the env that share its input.

    :param policy: ``MlpPolicy`` (SB3's actor-critic).
    :param env: the training env: SB3's ``DummyVecEnv`` (optionally under
        ``VecNormalize``), whose lanes can be copied; ``None`` on load.
    :param branches: copies of the env compared at each root (>= 2).
    :param root_every: steps of each training env between roots (>= 1).
    :param window_s: simulated seconds each branch runs after its root (> 0).
    :param shared_input: True: the branches replay the env's own future input. False:
        each branch draws a future input of its own (the ablation: the comparison then
        carries the input's noise).
    :param bootstrap: add the value head's estimate of each branch's state at the
        window's end to its return (what the window leaves out: a backlog one action
        left behind), and fit the value head to those returns; False: the window's
        return alone (the value head fitted but unread).
    :param kwargs: PPO's other arguments (``stable_baselines3.PPO``).
    """

    def __init__(
        self,
        policy: Any,
        env: Any,
        branches: int = BRANCHES,
        root_every: int = 16,
        window_s: float = 5.0,
        shared_input: bool = True,
        bootstrap: bool = False,
        **kwargs: Any,
    ) -> None:
        for name, value in (("branches", branches), ("root_every", root_every)):
            low = 2 if name == "branches" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} is invalid: expected an integer >= {low}")
        if isinstance(window_s, bool) or not isinstance(window_s, (int, float)):
            raise ValueError(f"window_s={window_s!r} is invalid: expected a number > 0")
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s={window_s!r} is invalid: expected a number > 0")
        for name, flag in (("shared_input", shared_input), ("bootstrap", bootstrap)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name}={flag!r} is invalid: expected true or false")
        self.branches, self.root_every = int(branches), int(root_every)
        self.window_s, self.shared_input = float(window_s), shared_input
        self.bootstrap = bootstrap
        super().__init__(policy, env, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.env is not None:
            _lanes(self.env)  # refuses an env whose lanes cannot be copied
            if (self.n_steps * self.n_envs) % self.branches:
                raise ValueError(
                    f"n_steps x n_envs = {self.n_steps * self.n_envs} is not a multiple of "
                    f"branches={self.branches}: each rollout holds whole roots"
                )

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
    ) -> bool:
        """Step the training envs with the policy; at every ``root_every``-th step of each,
        compare ``branches`` first actions on copies of it; fill the buffer with the
        roots' samples and their advantages (nothing of the training envs' own steps)."""
        assert self._last_obs is not None, "No previous observation was provided"
        self.policy.set_training_mode(False)
        rollout_buffer.reset()
        callback.on_rollout_start()
        lanes = _lanes(env)
        roots_needed = n_rollout_steps * env.num_envs // self.branches
        samples: list[tuple[np.ndarray, np.ndarray, float, float, float, float]] = []
        since = np.zeros(env.num_envs, dtype=int)
        while len(samples) < roots_needed * self.branches:
            for i in np.flatnonzero(since % self.root_every == 0):
                if len(samples) < roots_needed * self.branches:
                    samples.extend(self._root(lanes[i], self._last_obs[i], int(i)))  # type: ignore[index]
            with th.no_grad():
                actions, _values, _log_probs = self.policy(
                    obs_as_tensor(self._last_obs, self.device)  # type: ignore[arg-type]
                )
            actions = actions.cpu().numpy()
            new_obs, rewards, dones, infos = env.step(actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            since += 1
            since[dones] = 0  # a new episode: a root at its start
            self._last_obs = new_obs  # type: ignore[assignment]
            self._last_episode_starts = dones
        self._fill(rollout_buffer, samples)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _root(self, lane: Any, obs: np.ndarray, i: int) -> list[Any]:
        """The ``branches`` samples of one root: ``(obs, action, value, log_prob,
        advantage, the value head's target)`` each."""
        k = self.branches
        with th.no_grad():
            rep = obs_as_tensor(np.repeat(obs[None], k, axis=0), self.device)
            first, values, log_probs = self.policy(rep)
        first = first.cpu().numpy()
        rng = np.random.default_rng([int(self.seed or 0), self.num_timesteps, i])
        returns, steps = self._branch_returns(lane, first, rng)
        self.num_timesteps += steps
        adv = returns - (returns.sum() - returns) / (k - 1)  # leave-one-out baseline
        v, lp = values.cpu().numpy().ravel(), log_probs.cpu().numpy().ravel()
        target = returns  # the value head's, where it bootstraps
        return [
            (obs, first[j], float(v[j]), float(lp[j]), float(adv[j]), float(target[j]))
            for j in range(k)
        ]

    def _branch_returns(
        self, lane: Any, first: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, int]:
        """Each branch's return over the window (a copy of ``lane``, its first action,
        then the policy with the uniforms every branch shares), and the steps run."""
        copies = [planning_copy(lane) for _ in first]
        if not self.shared_input:
            for c in copies:  # the ablation: a future input of each branch's own
                c.unwrapped.engine.resample_future(np.random.default_rng(rng.integers(1 << 62)))
        t_end = copies[0].unwrapped.engine.now + self.window_s
        ret = np.zeros(len(copies))
        acts: list[Any] = list(first)
        alive = list(range(len(copies)))
        steps = 0
        norm = self._vec_normalize_env
        ends: list[tuple[int, np.ndarray]] = []  # the branches the window ended, at its end
        while alive:
            obs_next = []
            for j in alive:
                o, r, term, trunc, _info = copies[j].step(acts[j])
                ret[j] += float(r)
                steps += 1
                if term or trunc:
                    continue
                if copies[j].unwrapped.engine.now >= t_end:
                    ends.append((j, o))
                    continue
                obs_next.append((j, o))
            alive = [j for j, _ in obs_next]
            if not alive:
                break
            batch = np.stack([o for _, o in obs_next])
            if norm is not None:
                batch = np.asarray(norm.normalize_obs(batch))
            with th.no_grad():
                dist = self.policy.get_distribution(obs_as_tensor(batch, self.device))
            chosen = _shared_sample(dist, rng.random(_heads(self.action_space)))
            for row, j in enumerate(alive):
                acts[j] = chosen[row]
        if self.bootstrap and ends:
            batch = np.stack([o for _, o in ends])
            if norm is not None:
                batch = np.asarray(norm.normalize_obs(batch))
            with th.no_grad():
                tail = self.policy.predict_values(obs_as_tensor(batch, self.device))
            for row, (j, _o) in enumerate(ends):
                ret[j] += float(tail[row, 0])
        return ret, steps

    def _fill(self, buffer: RolloutBuffer, samples: list[Any]) -> None:
        """The roots' samples into the buffer, ``n_envs`` at a time, with their
        advantages and the value head's targets."""
        n = buffer.n_envs
        adv = np.zeros((buffer.buffer_size, n), dtype=np.float32)
        target = np.zeros((buffer.buffer_size, n), dtype=np.float32)
        for t in range(buffer.buffer_size):
            rows = samples[t * n : (t + 1) * n]
            obs = np.stack([r[0] for r in rows])
            act = np.stack([np.asarray(r[1]) for r in rows])
            if isinstance(self.action_space, spaces.Discrete):
                act = act.reshape(-1, 1)
            values = th.as_tensor([r[2] for r in rows], dtype=th.float32)
            log_probs = th.as_tensor([r[3] for r in rows], dtype=th.float32)
            buffer.add(
                obs, act, np.zeros(n, np.float32), np.zeros(n, np.float32), values, log_probs
            )
            adv[t] = [r[4] for r in rows]
            target[t] = [r[5] for r in rows]
        buffer.advantages = adv
        buffer.returns = target if self.bootstrap else adv + buffer.values


def _lanes(env: VecEnv) -> list[Any]:
    """The gym envs of SB3's ``DummyVecEnv`` under any VecEnv wrappers."""
    inner = env
    while hasattr(inner, "venv"):
        inner = inner.venv
    lanes = getattr(inner, "envs", None)
    if not isinstance(lanes, list):
        raise ValueError(
            "ppo_crn copies each training env to compare actions on its input: it needs "
            "SB3's DummyVecEnv (leave vectorized out)"
        )
    return lanes


def _heads(space: spaces.Space) -> int:
    return len(space.nvec) if isinstance(space, spaces.MultiDiscrete) else 1


def _shared_sample(dist: Any, u: np.ndarray) -> list[Any]:
    """Actions drawn from ``dist`` (a batch) by inverse CDF with the uniforms ``u`` (one
    per action head), the same for every row: common random numbers for the policy's own
    draws."""
    inner = dist.distribution
    heads = inner if isinstance(inner, list) else [inner]
    cols = []
    for h, cat in enumerate(heads):
        cdf = th.cumsum(cat.probs, dim=-1).cpu().numpy()
        idx = (cdf < u[h]).sum(axis=-1)
        cols.append(np.minimum(idx, cdf.shape[-1] - 1))
    if isinstance(inner, list):
        return list(np.stack(cols, axis=-1))
    return [int(a) for a in cols[0]]


#: a rollout's roots from each training env (``n_steps`` = this x ``branches``): few, so
#: that the policy is updated often (each update moves it by PPO's clip at most)
ROOTS_PER_ENV = 16


def crn_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """``ppo_crn``'s hyperparameters from PPO's entry for the same env: the same, with
    ``n_steps`` set to :data:`ROOTS_PER_ENV` roots of ``branches`` samples each (the
    samples a rollout holds are the roots' branches), ``batch_size`` at most a rollout,
    and ``n_timesteps`` five times PPO's (every branch's steps count)."""
    out = dict(entry)
    out["n_steps"] = ROOTS_PER_ENV * BRANCHES
    n = int(out.get("n_envs", 1)) * out["n_steps"]
    out["batch_size"] = min(int(out.get("batch_size", 64)), n)
    if "n_timesteps" in out:
        out["n_timesteps"] = 5 * float(out["n_timesteps"])
    return out
