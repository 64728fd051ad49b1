"""Warm start: behaviour cloning from a baseline before reinforcement learning.

``batch-env train --warm-start '{policy: graph, params: {window_ms: 0}}'`` (or
``warm_start:`` in an entry of ``experiments/configs/agents.yml``) runs the named baseline
(:func:`baselines.make`, the teacher) on the run's own training envs for ``steps`` env
steps, then fits the fresh model to it for ``epochs`` passes before PPO starts:

* the actor by maximum likelihood of the teacher's actions, each mapped into the agent's
  action space (through the action wrappers' mappings, ``action_mappers``: the agent action that the
  wrappers turn into the teacher's env action; where none does, the one whose env action
  is nearest, counted in ``labels_exact``);
* the critic by regression on the discounted sums of the (centred, normalized) rewards
  the teacher earned, leaving out the last ``3 / (1 - gamma)`` steps before each episode
  end and the end of the data, where the sum is cut short.

The teacher acts on the raw env's observation and ``info`` (a transparent innermost
wrapper, :class:`TeacherView`, keeps them), so any baseline can teach any agent whatever
its observation wrappers: a phase-aware baseline that reads the workload's model can teach
an agent that sees arrival statistics only (a privileged teacher). The teacher's steps
also set the observation and reward normalization statistics; they are not counted in
``n_timesteps`` (the RL steps). The run directory gets ``warm_start.json``: the teacher,
the share of exact labels, the cloned policy's agreement with the teacher on its own data,
and the losses per epoch; TensorBoard gets them under ``tb/warm_start`` (``warm_start/*``).

**Distillation** (``dagger: K``): after the first cloning, ``K`` rounds of DAgger (Ross,
Gordon and Bagnell 2011): the clone acts (deterministically) for ``steps`` more env steps,
the teacher labels every state the clone visits, and the clone is fitted again to all
labels so far; the critic to the returns of the behaviour that earned them. This is how
an expensive teacher, such as the realizable lookahead planner (``policy: rollout``),
becomes a fast network: ``warm_start.json`` records each round (who acted, the clone's
agreement with the teacher on the states it visited before refitting, after) and the
teacher's CPU seconds per label. ``keep_best`` then keeps the best evaluation of the RL
that follows, the distilled clone at step 0 included.

This is "kickstarting" an RL agent from a hand-written policy: the agent starts where the
teacher is and RL moves it from there; ``docs/decisions.md`` ("Warm starts") says when we
use it and how results are reported (the teacher, the cloned policy before RL and the
final agent side by side).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np

from .common import action_mappers, check_int

#: the keys of a warm-start setting and what each means
WARM_START_KEYS = {
    "policy": "the teacher: a baseline name (batch-env baselines --help lists them)",
    "params": "the teacher's parameters, a mapping [{}]",
    "steps": "env steps of teacher data [100000]",
    "epochs": "passes of behaviour cloning over the data [10] (each round, over all of it)",
    "dagger": "DAgger rounds after the first cloning [0]: the clone acts for as many steps, "
    "the teacher labels the states it visits, the clone is fitted to every label so far",
}
#: defaults of the optional keys
WARM_START_DEFAULTS: dict[str, Any] = {"params": {}, "steps": 100_000, "epochs": 10, "dagger": 0}
#: algorithms whose policies clone (an actor-critic with a distribution over actions)
WARM_START_ALGOS = ("ppo", "a2c", "ppo_mask")
#: the dotted path of :class:`TeacherView` (the innermost wrapper of a warm-started run)
TEACHER_VIEW = "agents.warm_start.TeacherView"
#: minibatch and learning rate of the cloning (Adam)
BATCH_SIZE = 256
LEARNING_RATE = 1e-3
#: the critic's targets leave out this many effective horizons 1 / (1 - gamma) before a cut
VALUE_CUT_HORIZONS = 3.0


def check_warm_start(value: Any, field: str = "warm_start") -> dict[str, Any] | None:
    """``value`` with the defaults filled in (None stays None); else ``ValueError``
    naming ``field``, the value and what is allowed."""
    import baselines

    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(
            f"{field}={value!r} must be a mapping, e.g. {{policy: graph, params: {{window_ms: 0}}}}"
        )
    unknown = sorted(str(k) for k in value if k not in WARM_START_KEYS)
    if unknown:
        raise ValueError(
            f"{field}: unknown key(s) {unknown}: allowed are "
            + "; ".join(f"{k} ({v})" for k, v in WARM_START_KEYS.items())
        )
    out = {**WARM_START_DEFAULTS, **value}
    if "policy" not in value:
        raise ValueError(f"{field}={value!r} needs policy: {WARM_START_KEYS['policy']}")
    if out["policy"] not in baselines.available():
        raise ValueError(
            f"{field}: policy={out['policy']!r} is not a baseline: allowed are {baselines.available()}"
        )
    if not isinstance(out["params"], dict):
        raise ValueError(
            f"{field}: params={out['params']!r} must be a mapping of the teacher's parameters"
        )
    check_int(f"{field}: steps", out["steps"], 1)
    check_int(f"{field}: epochs", out["epochs"], 1)
    check_int(f"{field}: dagger", out["dagger"], 0)
    out["params"] = dict(out["params"])
    return out


def check_teacher(spec: dict[str, Any], env: gym.Env, field: str = "warm_start") -> None:
    """Build the teacher of ``spec`` (checked) on ``env`` (closed after), so that a
    parameter it refuses, or an env whose actions are not discrete, is a ``ValueError``
    naming ``field`` before a run starts."""
    import baselines

    try:
        if not isinstance(env.action_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
            raise ValueError(
                f"{field}: the env's actions are {env.action_space}: behaviour cloning "
                "here needs discrete actions (Discrete or MultiDiscrete)"
            )
        try:
            baselines.make(spec["policy"], env, **spec["params"])
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{field}: the teacher policy={spec['policy']!r} refuses params="
                f"{spec['params']!r} on this env: {' '.join(str(exc).split())}"
            ) from None
    finally:
        env.close()


class TeacherView(gym.Wrapper):
    """Keeps the raw env's latest observation and ``info`` for a teacher policy; changes
    nothing (the innermost wrapper of a warm-started run's training envs)."""

    obs: Any = None
    info: dict[str, Any] = {}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the env and keep what it returned."""
        self.obs, self.info = self.env.reset(**kwargs)
        return self.obs, self.info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env and keep the observation and ``info``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.obs, self.info = obs, info
        return obs, reward, terminated, truncated, info


def _view(env: gym.Env) -> TeacherView:
    """The lane's :class:`TeacherView`."""
    e: Any = env
    while not isinstance(e, TeacherView):
        if not isinstance(e, gym.Wrapper):
            raise ValueError("warm start: the training env has no TeacherView wrapper")
        e = e.env
    return e


def agent_actions(space: gym.Space) -> list[Any]:
    """Every action of a ``Discrete`` (ints) or ``MultiDiscrete`` (index arrays) space."""
    if isinstance(space, gym.spaces.MultiDiscrete):
        return [np.array(i, dtype=np.int64) for i in np.ndindex(*space.nvec.tolist())]
    return list(range(int(cast(Any, space).n)))


def inverse_mapper(env: gym.Env) -> Any:
    """``env_action -> agent action`` where every action wrapper of ``env``'s chain can
    invert itself (``unflat``: :class:`batch_env.wrappers.FactoredAction`), composed;
    ``None`` where one cannot (then :func:`label` searches the agent's actions)."""
    inverses: list[Any] = []
    e: Any = env
    while isinstance(e, gym.Wrapper):
        if isinstance(e, gym.ActionWrapper):
            if not hasattr(e, "unflat"):
                return None
            inverses.append(e.unflat)
        e = e.env
    if not inverses:
        return None

    def inverse(a: int) -> Any:
        x: Any = a
        for f in reversed(inverses):  # innermost first
            x = f(x)
        return x

    return inverse


def label(
    n_actions: int | np.integer | list[Any],
    mappers: list[Any],
    env_action: int,
    info: dict[str, Any],
    effective: Any = None,
) -> tuple[Any, bool]:
    """The agent action (of ``n_actions``, a count or the list of
    :func:`agent_actions`) that ``mappers`` (the action wrappers'
    mappings, outermost first: :func:`agents.common.action_mappers`) turn into an env
    action doing what ``env_action`` does, and True; where none
    does, the one whose env action is nearest (the first on ties), and False.
    ``effective(a)`` (the env's ``effective_action``, identity when None) says what an env
    action does in the current state: serving 32 from a queue of 10 serves 10."""
    eff = effective if effective is not None else int
    want = int(eff(env_action))
    actions = range(int(n_actions)) if isinstance(n_actions, int | np.integer) else n_actions
    best: Any = actions[0]
    best_d = math.inf
    for a in actions:
        x: Any = a
        for m in mappers:
            x = m(x, info)
        d = abs(int(eff(x)) - want)
        if d == 0:
            return a, True
        if d < best_d:
            best, best_d = a, d
    return best, False


def discounted_targets(
    rewards: np.ndarray, cuts: np.ndarray, gamma: float, skip: int
) -> tuple[np.ndarray, np.ndarray]:
    """Discounted sums of ``rewards`` (steps x lanes) cut after every step where ``cuts``
    is True and at the end, and a mask leaving out the ``skip`` steps before each cut
    (where the sum misses what would have followed)."""
    T, n = rewards.shape
    g = np.zeros((T, n))
    valid = np.ones((T, n), dtype=bool)
    acc = np.zeros(n)
    since = np.zeros(n, dtype=int)  # steps from here to the next cut (the end counts)
    for t in range(T - 1, -1, -1):
        cut = cuts[t] | (t == T - 1)
        acc = np.where(cut, 0.0, acc)
        since = np.where(cut, 0, since + 1)
        acc = rewards[t] + gamma * acc
        g[t] = acc
        valid[t] = since >= skip
    return g, valid


def warm_start(
    model: Any, venv: Any, spec: dict[str, Any], run: Path, gamma: float
) -> dict[str, Any]:
    """Collect ``spec['steps']`` env steps of the teacher on ``venv`` (a ``DummyVecEnv``,
    optionally under ``VecNormalize``, whose lanes have a :class:`TeacherView`), clone it
    into ``model``'s policy; then ``spec['dagger']`` rounds of DAgger, each collecting as
    many steps with the clone acting and the teacher labelling the states it visits, and
    fitting the clone to every label so far; write ``warm_start.json`` in ``run`` and
    return its record."""
    import torch
    from stable_baselines3.common.vec_env import VecNormalize

    import baselines

    norm = venv if isinstance(venv, VecNormalize) else None
    lanes = cast(Any, norm.venv if norm is not None else venv).envs  # a DummyVecEnv's lanes
    teachers = [baselines.make(spec["policy"], lane, **spec["params"]) for lane in lanes]
    n = len(lanes)
    T = max(spec["steps"] // n, 1)
    skip = int(math.ceil(VALUE_CUT_HORIZONS / max(1.0 - gamma, 1e-9)))
    gen = torch.Generator().manual_seed(int(model.seed or 0))
    opt = torch.optim.Adam(model.policy.parameters(), lr=LEARNING_RATE)
    o = venv.reset()
    for t in teachers:
        t.reset()
    rounds: list[dict[str, Any]] = []
    data: list[dict[str, Any]] = []
    history: list[dict[str, float]] = []
    for r in range(1 + spec["dagger"]):
        part, o = _collect(model, venv, norm, lanes, teachers, o, T, learner=r > 0)
        data.append(part)
        fit = _fit(model, data, norm, gamma, skip, spec["epochs"], opt, gen)
        history += fit["epochs_log"]
        rounds.append(
            {
                "round": r,
                "acting": "learner" if r else "teacher",
                "samples": int(T * n),
                "labels_exact": part["exact"] / (T * n),
                "teacher_s_per_label": part["teacher_s"] / (T * n),
                "learner_agrees_with_teacher": part.get("agree"),
                "agreement_after_fit": fit["agreement"],
            }
        )
    record = {
        **{k: spec[k] for k in WARM_START_KEYS},
        "samples": int(T * n * len(rounds)),
        "labels_exact": sum(x["labels_exact"] for x in rounds) / len(rounds),
        "agreement": rounds[-1]["agreement_after_fit"],
        "value_samples": fit["value_samples"],
        "teacher_s_per_label": sum(x["teacher_s_per_label"] for x in rounds) / len(rounds),
        "rounds": rounds,
        "epochs_log": history,
    }
    (run / "warm_start.json").write_text(json.dumps(record, indent=1))
    _log(run, record)
    return record


def _collect(
    model: Any,
    venv: Any,
    norm: Any,
    lanes: list[Any],
    teachers: list[Any],
    o: Any,
    T: int,
    learner: bool,
) -> tuple[dict[str, Any], Any]:
    """``T`` steps of every lane with the teacher's labels: the teacher acting, or (with
    ``learner``) the model's deterministic action acting (DAgger). Returns the data and
    the last observation."""
    import time

    candidates = agent_actions(venv.action_space)
    views = [_view(lane) for lane in lanes]
    mappers = [action_mappers(lane) for lane in lanes]
    inverses = [inverse_mapper(lane) for lane in lanes]
    effective = [getattr(lane.unwrapped, "effective_action", None) for lane in lanes]
    n = len(lanes)
    shape = venv.action_space.shape
    obs_raw: list[np.ndarray] = []
    acts = np.zeros((T, n, *shape), dtype=np.int64)
    rews = np.zeros((T, n))
    cuts = np.zeros((T, n), dtype=bool)
    exact, agree, teacher_s = 0, 0, 0.0
    masks_of: Any = None
    if learner and type(model).__name__ == "MaskablePPO":
        from sb3_contrib.common.maskable.utils import get_action_masks as masks_of
    for step in range(T):
        for i in range(n):
            t0 = time.process_time()  # CPU seconds: what the price is on a busy machine too
            env_action = int(teachers[i].act(views[i].obs, views[i].info))
            teacher_s += time.process_time() - t0
            inv = inverses[i]
            if inv is not None and effective[i] is None:  # exact: the wrappers invert
                acts[step, i], ok = inv(env_action), True
            else:
                acts[step, i], ok = label(
                    candidates, mappers[i], env_action, views[i].info, effective[i]
                )
            exact += ok
        obs_raw.append(np.array(norm.get_original_obs() if norm is not None else o))
        played = acts[step]
        if learner:
            kw: dict[str, Any] = {} if masks_of is None else {"action_masks": masks_of(venv)}
            played = np.asarray(model.predict(o, deterministic=True, **kw)[0]).reshape(
                acts[step].shape
            )
            agree += int((played == acts[step]).reshape(n, -1).all(axis=1).sum())
        o, rew, dones, _ = venv.step(played)
        rews[step] = norm.get_original_reward() if norm is not None else rew
        cuts[step] = dones
        for i in np.flatnonzero(dones).tolist():
            teachers[i].reset()
    part: dict[str, Any] = {
        "obs": np.stack(obs_raw),  # steps x lanes x features, raw
        "acts": acts,
        "rews": rews,
        "cuts": cuts,
        "exact": exact,
        "teacher_s": teacher_s,
    }
    if learner:
        part["agree"] = agree / (T * n)
    return part, o


def _fit(
    model: Any,
    data: list[dict[str, Any]],
    norm: Any,
    gamma: float,
    skip: int,
    epochs: int,
    opt: Any,
    gen: Any,
) -> dict[str, Any]:
    """``epochs`` passes over every label of ``data`` (observations normalized with the
    current statistics): the actor by maximum likelihood, the critic by regression on
    each part's discounted (normalized) rewards, as the behaviour that earned them."""
    import torch

    xs, ys, vs, ms = [], [], [], []
    for part in data:
        T, n = part["rews"].shape
        obs = np.asarray(norm.normalize_obs(part["obs"]) if norm is not None else part["obs"])
        r = norm.normalize_reward(part["rews"]) if norm is not None else part["rews"]
        targets, valid = discounted_targets(r, part["cuts"], gamma, skip)
        xs.append(obs.reshape(T * n, -1))
        ys.append(part["acts"].reshape(T * n, *part["acts"].shape[2:]))
        vs.append(targets.reshape(-1))
        ms.append(valid.reshape(-1))
    policy = model.policy
    device = policy.device
    x = torch.as_tensor(np.concatenate(xs), dtype=torch.float32, device=device)
    y = torch.as_tensor(np.concatenate(ys), device=device)
    v = torch.as_tensor(np.concatenate(vs), dtype=torch.float32, device=device)
    m = torch.as_tensor(np.concatenate(ms), device=device)
    history = []
    policy.set_training_mode(True)
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen).to(device)
        pi_sum, v_sum, batches = 0.0, 0.0, 0
        for lo in range(0, len(y), BATCH_SIZE):
            idx = order[lo : lo + BATCH_SIZE]
            dist = policy.get_distribution(x[idx])
            loss_pi = -dist.log_prob(y[idx]).mean()
            sel = idx[m[idx]]
            loss_v = (
                ((policy.predict_values(x[sel]).flatten() - v[sel]) ** 2).mean()
                if len(sel)
                else torch.zeros((), device=device)
            )
            loss = loss_pi + 0.5 * loss_v
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            opt.step()
            pi_sum, v_sum, batches = pi_sum + loss_pi.item(), v_sum + loss_v.item(), batches + 1
        history.append({"policy_loss": pi_sum / batches, "value_loss": v_sum / batches})
    policy.set_training_mode(False)
    with torch.no_grad():
        same = sum(
            int(
                (policy.get_distribution(x[lo : lo + 4096]).mode() == y[lo : lo + 4096])
                .reshape(len(y[lo : lo + 4096]), -1)
                .all(dim=1)
                .sum()
            )
            for lo in range(0, len(y), 4096)
        )
    return {"epochs_log": history, "agreement": same / len(y), "value_samples": int(m.sum())}


def _log(run: Path, record: dict[str, Any]) -> None:
    """The losses per epoch (step = epoch) and the agreement to TensorBoard, under
    ``run/tb/warm_start`` (tags ``warm_start/...``)."""
    from stable_baselines3.common.logger import configure

    logger = configure(str(run / "tb" / "warm_start"), ["tensorboard"])
    for epoch, losses in enumerate(record["epochs_log"], start=1):
        for key, value in losses.items():
            logger.record(f"warm_start/{key}", value)
        if epoch == len(record["epochs_log"]):
            logger.record("warm_start/agreement", record["agreement"])
            logger.record("warm_start/labels_exact", record["labels_exact"])
        logger.dump(step=epoch)
    logger.close()
