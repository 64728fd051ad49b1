"""FactoredAction: an LLM env's action as its parts (MultiDiscrete), for agents with one
head per part; its round trip, masks, errors, and the training stack on it (the NumPy
actor, a trained run loaded as a policy, warm starts)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

import batch_env  # noqa: F401
from agents.common import NumpyActor, algo_class, load_hyperparams
from batch_env.wrappers import FactoredAction

CLOCK_TASK = "batch_env/LLMClockBursts-v0"
SHORT = {"horizon_requests": 120, "warmup_requests": 20}


def test_parts_round_trip_every_flat_action():
    """Every flat action of a clock task is one factored action and back, the parts
    being the env's own (action_parts) in the order cap, budget, order, clock."""
    env = FactoredAction(gym.make(CLOCK_TASK, **SHORT))
    core = env.unwrapped
    codec = core.actions
    assert env.parts == ("cap", "budget", "order", "clock")
    assert list(env.action_space.nvec) == [
        len(codec.grid),
        len(codec.budgets),
        len(codec.orders),
        len(codec.clocks),
    ]
    seen = set()
    for a in range(codec.n):
        f = env.unflat(a)
        assert env.flat(f) == a
        want = core.action_parts(a)
        assert (codec.grid[f[0]], codec.budgets[f[1]], codec.orders[f[2]], codec.clocks[f[3]]) == (
            want.cap,
            want.budget,
            want.order,
            want.clock,
        )
        seen.add(tuple(f.tolist()))
    assert len(seen) == codec.n


def test_only_offered_parts_and_the_default_clock():
    """An env without a clock grid (or with one budget and one order) has only the parts
    it offers more than one value of; the absent clock is the GPU's default."""
    two = FactoredAction(gym.make("batch_env/LLMTwoClasses-v0"))
    assert two.parts == ("cap", "budget", "order")
    v0 = FactoredAction(gym.make("batch_env/LLMBatching-v0"))
    assert v0.parts == ("cap",)
    assert v0.flat(np.array([5])) == 5
    assert v0.unflat(7).tolist() == [7]
    clocked = FactoredAction(
        gym.make("batch_env/LLMBatching-v2", grid=[8], clock_grid=[990.0, 1410.0])
    )
    assert clocked.parts == ("clock",)
    assert clocked.unwrapped.action_parts(clocked.flat(np.array([0]))).clock == 990.0
    assert clocked.unwrapped.action_parts(clocked.flat(np.array([1]))).clock == 1410.0


def test_steps_match_the_flat_env():
    """Stepping the wrapper with parts is stepping the env with their flat action."""
    env = FactoredAction(gym.make(CLOCK_TASK, **SHORT))
    raw = gym.make(CLOCK_TASK, **SHORT)
    env.reset(seed=4)
    raw.reset(seed=4)
    for _ in range(200):
        f = env.action_space.sample()
        o, r, te, tr, info = env.step(f)
        o2, r2, te2, tr2, info2 = raw.step(env.flat(f))
        assert r == r2 and np.array_equal(o, o2) and info["clock_mhz"] == info2["clock_mhz"]
        if te or tr:
            break


def test_masks_are_per_part_and_follow_the_flat_mask():
    """The mask is one block per part (SB3-contrib's MultiDiscrete layout); a value is
    allowed where some allowed flat action has it."""
    env = FactoredAction(gym.make(CLOCK_TASK, **SHORT))
    _, info = env.reset(seed=0)
    m = env.action_masks()
    assert m.shape == (int(env.action_space.nvec.sum()),) and m.all()
    assert np.array_equal(env.masks_from_info(info), m)
    flat = np.zeros(env.unwrapped.actions.n, dtype=bool)
    flat[env.flat([1, 2, 0, 4])] = True
    flat[env.flat([2, 2, 0, 5])] = True
    got = np.split(
        env.masks_from_info({"action_mask": flat}), np.cumsum(env.action_space.nvec)[:-1]
    )
    assert [np.flatnonzero(g).tolist() for g in got] == [[1, 2], [2], [0], [4, 5]]


@pytest.mark.parametrize(
    "bad, match",
    [
        ([0, 0, 0], r"must give 4 indices, one per part \['cap', 'budget', 'order', 'clock'\]"),
        ([3, 0, 0, 0], r"action\[0\] \(cap\)=3 is out of range: expected an integer in 0..2"),
        ([0, 0, 0, -1], r"action\[3\] \(clock\)=-1 is out of range: expected an integer in 0..5"),
        ([0, 0.5, 0, 0], r"action\[1\] \(budget\)=0.5 is out of range"),
    ],
)
def test_a_bad_action_names_the_part(bad, match):
    env = FactoredAction(gym.make(CLOCK_TASK, **SHORT))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(np.array(bad, dtype=object) if 0.5 in bad else np.array(bad))


def test_refuses_an_env_that_is_not_an_llm_env():
    with pytest.raises(ValueError, match="FactoredAction needs an LLM env"):
        FactoredAction(gym.make("batch_env/DynamicBatching-v0"))


@pytest.mark.filterwarnings("ignore:.*is different from the unwrapped version")
def test_passes_the_env_checkers():
    from gymnasium.utils.env_checker import check_env

    check_env(FactoredAction(gym.make(CLOCK_TASK, **SHORT).unwrapped), skip_render_check=True)


@pytest.mark.parametrize("algo", ["ppo", "ppo_mask"])
def test_numpy_actor_acts_as_predict_on_parts(algo):
    """The NumPy copy of a MultiDiscrete policy picks each part's argmax as
    ``model.predict`` does (masked per part for MaskablePPO), on random observations with
    the weights scaled up so that the choices vary."""
    import torch

    env = FactoredAction(gym.make(CLOCK_TASK, **SHORT))
    model = algo_class(algo)("MlpPolicy", env, seed=5, device="cpu")
    with torch.no_grad():
        for p in model.policy.parameters():
            p.mul_(4.0)
    actor = NumpyActor.of(model)
    assert actor is not None
    rng = np.random.default_rng(1)
    nvec = env.action_space.nvec
    picked = set()
    for _ in range(1500):
        o = rng.normal(0.0, 2.0, size=env.observation_space.shape).astype(np.float32)
        if algo == "ppo_mask":
            blocks = []
            for n in nvec:
                b = rng.random(n) < 0.5
                b[rng.integers(n)] = True
                blocks.append(b)
            mask = np.concatenate(blocks)
            want = model.predict(o, deterministic=True, action_masks=mask)[0]
            got = actor.action(o, mask)
            assert all(b[g] for b, g in zip(blocks, got, strict=True))
        else:
            want, got = model.predict(o, deterministic=True)[0], actor.action(o)
        assert np.array_equal(np.asarray(want).reshape(-1), got)
        picked.add(tuple(got.tolist()))
    assert len(picked) > 3


def _hyperparams(tmp_path: Path) -> str:
    """The shipped PPO entry of the clock task, through FactoredAction, made tiny."""
    entry = dict(load_hyperparams("ppo", CLOCK_TASK))
    entry["env_wrapper"] = ["batch_env.wrappers.FactoredAction", "agents.wrappers.CenteredReward"]
    entry.update(n_envs=1, n_steps=128, batch_size=64, n_epochs=1, env_kwargs=SHORT)
    path = tmp_path / "ppo-factored.yml"
    path.write_text(yaml.safe_dump({CLOCK_TASK: entry}))
    return str(path)


def _train(tmp_path: Path, steps: int, warm_start: dict) -> Path:
    """A PPO run of ``steps`` on the clock task through FactoredAction, warm-started."""
    from agents.train import TrainArgs, train

    run = tmp_path / "run"
    train(
        TrainArgs(
            algo="ppo",
            env_id=CLOCK_TASK,
            n_timesteps=steps,
            seed=0,
            run_dir=str(run),
            progress=False,
            eval_freq=0,
            hyperparams=_hyperparams(tmp_path),
            warm_start=warm_start,
        )
    )
    return run


def test_a_factored_run_trains_loads_and_acts_on_the_flat_env(tmp_path):
    """A PPO run through FactoredAction, warm-started from the clock rule (labels exact:
    the wrapper inverts itself), loads as a policy on the raw env: it acts there as the
    model's parts mapped to their flat action, and its episode runs to the end."""
    import json

    from agents import load_policy

    run = _train(tmp_path, 256, {"policy": "clock-queue", "steps": 300, "epochs": 2})
    ws = json.loads((run / "warm_start.json").read_text())
    assert ws["labels_exact"] == 1.0 and ws["samples"] == 300
    pol = load_policy(run)
    assert pol._actor is not None
    probe = FactoredAction(gym.make(CLOCK_TASK, **SHORT))
    raw = gym.make(CLOCK_TASK, **SHORT)
    o, info = raw.reset(seed=7)
    pol.reset()
    acted = set()
    for _ in range(100_000):
        a = pol.act(o, info)
        parts = pol.model.predict(pol.observe(o, info), deterministic=True)[0]
        assert a == probe.flat(parts)
        acted.add(a)
        o, _, te, tr, info = raw.step(a)
        if te or tr:
            break
    assert tr and len(acted) > 1


def test_dagger_rounds_label_the_states_the_clone_visits(tmp_path):
    """dagger: 2 after the first cloning: two rounds in which the clone acts and the
    teacher (the clock rule) labels; each round is recorded with who acted, the clone's
    agreement on the states it visited before and after refitting, and the teacher's cost
    per label; the fit is over every label so far (the clone ends agreeing with the rule
    on nearly all of them), and the run's policy is the distilled clone."""
    import json

    from agents import load_policy

    rule = {"low_clock": 810, "high_clock": 1620, "budget": 512}
    ws = {"policy": "clock-queue", "params": rule, "steps": 1500, "epochs": 5, "dagger": 2}
    run = _train(tmp_path, 0, ws)
    rec = json.loads((run / "warm_start.json").read_text())
    assert [r["acting"] for r in rec["rounds"]] == ["teacher", "learner", "learner"]
    assert rec["samples"] == 4500 and rec["labels_exact"] == 1.0
    assert rec["rounds"][0]["learner_agrees_with_teacher"] is None
    for r in rec["rounds"][1:]:
        assert 0.0 <= r["learner_agrees_with_teacher"] <= 1.0
        assert r["teacher_s_per_label"] > 0
    assert len(rec["epochs_log"]) == 15  # 5 epochs a round
    assert rec["agreement"] >= 0.9
    # the distilled clone acts as the rule does on a fresh episode, mostly
    import baselines

    pol = load_policy(run)
    env = gym.make(CLOCK_TASK, **SHORT)
    teacher = baselines.make("clock-queue", env, **rule)
    o, info = env.reset(seed=11)
    pol.reset()
    teacher.reset()
    same = steps = 0
    for _ in range(100_000):
        a = pol.act(o, info)
        same += a == teacher.act(o, info)
        steps += 1
        o, _, te, tr, info = env.step(a)
        if te or tr:
            break
    assert same / steps >= 0.8
