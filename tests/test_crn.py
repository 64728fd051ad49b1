"""``ppo_crn`` (agents/crn.py): branches of one root share the env's input, so equal first
actions give equal returns to the bit; without the shared input they differ; bad
settings are refused naming the field."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

import batch_env  # noqa: F401  (registers the ids)
from agents.crn import CRNPPO, _shared_sample
from agents.wrappers import CenteredReward

SMALL = {"horizon_requests": 60, "warmup_requests": 0, "grid": [8, 64], "budget_grid": [512, 2048]}


def _model(**kwargs):
    def make():
        return CenteredReward(gym.make("batch_env/LLMBatching-v2", **SMALL), gain=1.0)

    venv = DummyVecEnv([make])
    venv.seed(3)
    settings = {"n_steps": 16, "batch_size": 16, "seed": 0, **kwargs}
    return CRNPPO("MlpPolicy", venv, **settings), venv


@pytest.mark.parametrize("shared", [True, False])
def test_branches_with_one_first_action_return_the_same_only_on_a_shared_input(shared):
    model, venv = _model(branches=4, window_s=2.0, shared_input=shared)
    venv.reset()
    for _ in range(5):
        venv.step(np.array([1]))
    lane = venv.envs[0]
    now = lane.unwrapped.engine.now
    rets, steps = model._branch_returns(lane, np.array([2, 2, 2, 0]), np.random.default_rng(1))
    assert steps > 8
    if shared:
        assert rets[0] == rets[1] == rets[2]  # the same input, the same draws: to the bit
    else:  # each branch's own future: the comparison carries the input's noise
        assert len({rets[0], rets[1], rets[2]}) > 1
    assert lane.unwrapped.engine.now == now  # the lane itself did not move
    venv.close()


def test_a_rollout_holds_whole_roots_and_trains():
    model, venv = _model(branches=4, root_every=4, window_s=1.0)
    own = []  # the training env's own steps
    step = venv.step
    venv.step = lambda actions: (own.append(1), step(actions))[1]  # type: ignore[method-assign]
    model.learn(total_timesteps=64)
    assert model.num_timesteps >= len(own) + 4 * 4  # the branches' steps count (4 roots)
    buf = model.rollout_buffer
    adv = buf.advantages.reshape(-1, 4)  # a root's branches are consecutive samples
    assert np.allclose(adv.sum(axis=1), 0.0, atol=1e-4)  # leave-one-out: they sum to 0
    venv.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("branches", 1),
        ("branches", 2.0),
        ("root_every", 0),
        ("window_s", 0.0),
        ("window_s", float("nan")),
        ("shared_input", "yes"),
        ("bootstrap", 1),
    ],
)
def test_bad_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"{field}=.* is invalid"):
        _model(**{field: value})


def test_a_rollout_of_partial_roots_is_refused():
    with pytest.raises(ValueError, match="not a multiple of branches=3"):
        _model(branches=3)


def test_bootstrap_adds_the_value_heads_estimate_where_the_window_ends():
    """With ``bootstrap``, a branch the window ends gains the value head's estimate of its
    last state, a branch whose episode ends gains nothing, and the value head is fitted to
    those returns; without it the value targets are the advantages plus the values."""
    import torch as th

    model, venv = _model(branches=4, window_s=2.0, bootstrap=True)
    venv.reset()
    lane = venv.envs[0]
    model.policy.predict_values = lambda obs: th.full((len(obs), 1), 7.0)  # type: ignore[method-assign]
    first = np.array([2, 0, 1, 3])

    def returns(bootstrap, window_s=2.0):
        model.bootstrap, model.window_s = bootstrap, window_s
        return model._branch_returns(lane, first, np.random.default_rng(5))[0]

    assert returns(True) - returns(False) == pytest.approx([7.0] * 4)
    # a window past the episode's end: every branch terminates, no estimate is added
    assert returns(True, 1e9) == pytest.approx(returns(False, 1e9))
    # the value targets: the returns with bootstrap; the advantages plus values without
    obs = venv.reset()[0]
    samples = [(obs, j % 4, 0.5, -1.0, float(j) - 7.5, 100.0 + j) for j in range(16)]
    for bootstrap, want in ((True, 100.0 + np.arange(16)), (False, np.arange(16) - 7.0)):
        model.bootstrap = bootstrap
        model.rollout_buffer.reset()
        model._fill(model.rollout_buffer, samples)
        assert model.rollout_buffer.returns.ravel() == pytest.approx(want)
    venv.close()


def test_a_wrapped_lane_copies_as_a_deep_copy_does():
    """``planning_copy`` (what ``ppo_crn`` copies each branch with) goes through the lane's
    wrappers, any library's: the copy steps as ``copy.deepcopy``'s does, shares nothing
    the original changes, and keeps the wrappers' references to each other."""
    import copy

    from stable_baselines3.common.monitor import Monitor

    from batch_env.planning import planning_copy

    class Loops(gym.Wrapper):  # holds the env twice and itself: cycles to keep
        def __init__(self, env):
            super().__init__(env)
            self.me, self.inner_again, self.seen = self, env, []

        def step(self, action):
            self.seen.append(action)
            return self.env.step(action)

    lane = Monitor(Loops(CenteredReward(gym.make("batch_env/LLMBatching-v2", **SMALL), gain=1.0)))
    lane.reset(seed=4)
    for a in (1, 2, 3):
        lane.step(a)
    before = (list(lane.rewards), list(lane.env.seen), lane.unwrapped.engine.now)
    mine, theirs = planning_copy(lane), copy.deepcopy(lane)
    actions = [0, 3, 1, 2] * 5
    got = [mine.step(a)[1] for a in actions]
    assert got == [theirs.step(a)[1] for a in actions]
    assert (list(lane.rewards), list(lane.env.seen), lane.unwrapped.engine.now) == before
    assert mine.env.me is mine.env and mine.env.inner_again is mine.env.env
    assert mine.env.seen is not lane.env.seen and mine.unwrapped is not lane.unwrapped


def test_shared_uniforms_give_one_action_per_distribution():
    import torch as th
    from stable_baselines3.common.distributions import CategoricalDistribution

    dist = CategoricalDistribution(3).proba_distribution(th.log(th.tensor([[0.2, 0.5, 0.3]] * 2)))
    assert _shared_sample(dist, np.array([0.1])) == [0, 0]
    assert _shared_sample(dist, np.array([0.6])) == [1, 1]
    assert _shared_sample(dist, np.array([0.95])) == [2, 2]


# issue 65's must-hold learning test: a small LLM task where a state-dependent rule beats
# every constant action (LLMClockBursts-v0's problem with 4 actions: the SM clock at 810
# or 1,620 MHz x a token budget of 256 or 512; episodes of 200 + 2,000 requests). Raising
# the clock while prompts wait (baselines' `clock-queue`, threshold 1) is about 11%
# cheaper than the best constant action (1,620 MHz, 512) on held-out seeds.
SMALL_CLOCK = {
    "profile": "llama-3.1-8b-h100",
    "workload": {"kind": "mmpp", "rates_per_s": [3.0, 15.0], "switch_rates_per_s": [1 / 30, 0.1]},
    "lengths": {"kind": "empirical", "dataset": "azure-code-2023-gz"},
    "max_model_len": 4096,
    "ttft_sla_ms": 500.0,
    "tpot_sla_ms": 25.0,
    "reward_weights": {"latency": 1.0, "energy": 0.05, "sla": 20.0, "drop": 20.0},
    "scheduler": "chunked",
    "grid": [256],
    "max_num_batched_tokens": 8192,
    "budget_grid": [256, 512],
    "orders": ["fcfs"],
    "clock_grid": [810.0, 1620.0],
    "horizon_requests": 2000,
    "warmup_requests": 200,
}
#: ppo_crn's settings for a task this small: rollouts of 8 roots of 4 branches, small steps
SMALL_RECIPE = {
    "branches": 4,
    "window_s": 5.0,
    "n_steps": 32,
    "batch_size": 32,
    "n_epochs": 4,
    "learning_rate": 1e-3,
    "ent_coef": 0.01,
    "policy_kwargs": {"net_arch": {"pi": [64, 64], "vf": [64, 64]}},
}


def _train_small_clock(seed, steps, **changes):
    import torch as th
    from stable_baselines3.common.vec_env import VecNormalize

    def make():
        return CenteredReward(gym.make("batch_env/LLMBatching-v2", **SMALL_CLOCK), gain=19.7)

    venv = VecNormalize(DummyVecEnv([make]), norm_obs=True, norm_reward=True)
    venv.seed(seed)
    threads = th.get_num_threads()
    th.set_num_threads(1)  # one thread, as `batch-env train --threads 1`: the same rounding
    try:
        model = CRNPPO("MlpPolicy", venv, seed=seed, **{**SMALL_RECIPE, **changes})
        model.learn(total_timesteps=steps)
    finally:
        th.set_num_threads(threads)
    venv.training = False
    return model, venv


def _cost_per_s(act, seeds):
    """Each seed's cost per second on the small clock task (episodes of 200 + 1,000
    requests) under ``act`` (a batch of observations to their actions), the episodes run
    side by side."""
    held_out = {**SMALL_CLOCK, "horizon_requests": 1000}  # shorter than training's 2,000
    envs = [gym.make("batch_env/LLMBatching-v2", **held_out) for _ in seeds]
    obs = [e.reset(seed=s)[0] for e, s in zip(envs, seeds, strict=True)]
    cost = np.full(len(envs), np.nan)
    alive = list(range(len(envs)))
    while alive:
        actions = act(np.stack([obs[i] for i in alive]))
        for i, a in zip(list(alive), actions, strict=True):
            obs[i], _r, term, trunc, info = envs[i].step(int(a))
            if term or trunc:
                cost[i] = -info["serving"]["reward_rate_per_s"]
                alive.remove(i)
    return cost


HELD_OUT = range(5000, 5003)


@pytest.mark.slow
def test_a_short_run_beats_every_constant_action_on_a_small_clock_task():
    """50,000 steps (the branches' included; about 6 CPU s) learn to raise the clock when
    prompts wait: cheaper than every constant action on held-out seeds. Without the shared
    input (`shared_input=False`, each branch drawing its own future) the same run does not
    (docs/results/agents-llm-scratch.md: the sweep of seeds and the ablation).

    It trains one seed and is a pin of that seed's run: 4 of 6 training seeds learn in
    this budget (the sweep), and training is bit-identical only for the same numerics (one
    thread, the same torch and BLAS). A failure after a change of those, with nothing in
    ``agents/crn.py`` or the env changed, calls for the sweep before a verdict on the
    method."""
    model, venv = _train_small_clock(seed=0, steps=50_000)

    learned = _cost_per_s(
        lambda obs: model.predict(venv.normalize_obs(obs), deterministic=True)[0], HELD_OUT
    )
    constants = [_cost_per_s(lambda obs, a=a: [a] * len(obs), HELD_OUT) for a in range(4)]
    best = min(constants, key=np.mean)
    assert learned.mean() < 0.97 * best.mean(), (learned.mean(), [c.mean() for c in constants])
    assert (learned < best).all()  # paired: cheaper on every seed
