"""Training stack: wrappers, SB3 runs, TensorBoard tags, resume, reload, rl-zoo3."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml
from conftest import tensorboard_scalars
from helpers import SMALL_ENV, TINY_ENV, TINY_PPO

import baselines
import batch_env  # noqa: F401
from agents import load_policy, parse_policy_spec
from agents.common import literal, load_hyperparams, wrapper_specs
from agents.train import TrainArgs, train
from batch_env import evaluate
from batch_env.wrappers import AverageRewardCentering, BinaryAction, QueueFeatures

ENV_ID = "batch_env/DynamicBatching-v0"
ROOT = Path(__file__).resolve().parents[1]


# -- wrappers ---------------------------------------------------------------------------


def test_wrappers_pass_env_checkers():
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    base = gym.make(ENV_ID, horizon_requests=100).unwrapped
    env = AverageRewardCentering(QueueFeatures(BinaryAction(base)), gain=100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*is different from the unwrapped version")
        check_env(env, skip_render_check=True)
        sb3_check_env(env)


def test_centering_adds_gain_times_dt_and_estimates_online():
    env = AverageRewardCentering(gym.make(ENV_ID), gain=50.0)
    raw = gym.make(ENV_ID)
    env.reset(seed=1)
    raw.reset(seed=1)
    for a in (0, 3, 0, 5):
        _, r, *_, info = env.step(a)
        _, r0, *_ = raw.step(a)
        assert r == pytest.approx(r0 + 50.0 * info["dt_s"])
    online = AverageRewardCentering(gym.make(ENV_ID))
    online.reset(seed=2)
    cost = time = 0.0
    for _ in range(300):
        _, r, _, trunc, info = online.step(1)
        cost -= r - info["centering_gain"] * info["dt_s"]
        time += info["dt_s"]
        if trunc:
            break
    assert online.gain == pytest.approx(cost / time, rel=1e-9)
    online.freeze()
    g = online.gain
    online.step(1)
    assert online.gain == g


def test_centering_by_load_reads_the_curve_at_the_load_estimate():
    """With a gain curve, each step adds the curve's interpolation at the load estimate
    (observation feature 2) of the state the action was taken in, flat beyond the ends;
    bad curves are named errors."""
    curve = [[0.2, 20.0], [0.8, 140.0]]
    env = AverageRewardCentering(
        gym.make("batch_env/AnyLoad-v0", horizon_requests=300), gain_curve=curve
    )
    raw = gym.make("batch_env/AnyLoad-v0", horizon_requests=300)
    obs, _ = env.reset(seed=3, options={"load": 0.3})
    raw.reset(seed=3, options={"load": 0.3})
    gains = []
    for a in (0, 2, 0, 1, 4, 0, 1):
        g = float(np.interp(obs[2], [0.2, 0.8], [20.0, 140.0]))
        obs, r, *_, info = env.step(a)
        _, r0, *_ = raw.step(a)
        assert info["centering_gain"] == pytest.approx(g, rel=1e-12)
        assert r == pytest.approx(r0 + g * info["dt_s"], rel=1e-12)
        gains.append(g)
    assert 20.0 < min(gains) and max(gains) < 140.0 and not env.online
    flat = AverageRewardCentering(gym.make(ENV_ID), gain_curve=[[5.0, 7.0]])
    flat.reset(seed=0)
    assert flat.step(1)[-1]["centering_gain"] == 7.0  # beyond the end: the end's gain
    for bad, needle in (
        ([[0.5, 1.0], [0.4, 2.0]], "must strictly increase"),
        ([[0.5, float("nan")]], "finite numbers"),
        ([], "pairs"),
        ("x", "pairs"),
    ):
        with pytest.raises(ValueError, match=needle):
            AverageRewardCentering(gym.make(ENV_ID), gain_curve=bad)
    with pytest.raises(ValueError, match="exclusive"):
        AverageRewardCentering(gym.make(ENV_ID), gain=1.0, gain_curve=curve)
    with pytest.raises(ValueError, match="curve_index=9 is invalid"):
        AverageRewardCentering(gym.make(ENV_ID), gain_curve=curve, curve_index=9)


def test_relative_centring_divides_by_the_gain():
    """``relative=True``: each reward is ``(r + g dt) / g`` with the step's gain (a fixed
    one, or a curve's at the load the policy sees); it needs a positive, known gain."""
    from agents.wrappers import CenteredReward

    curve = [[0.3, 40.0], [0.6, 90.0], [0.9, 200.0]]
    for ck in ({"gain": 50.0}, {"gain_curve": curve}):
        env = AverageRewardCentering(gym.make(ENV_ID), relative=True, **ck)
        plain = AverageRewardCentering(gym.make(ENV_ID), **ck)
        env.reset(seed=1)
        plain.reset(seed=1)
        for a in (0, 3, 0, 5, 1, 2):
            _, r, *_, info = env.step(a)
            _, r0, *_, info0 = plain.step(a)
            g = info["centering_gain"]
            assert g == info0["centering_gain"] > 0
            assert r == pytest.approx(r0 / g, rel=1e-12)
    with pytest.raises(ValueError, match="relative=True divides by the gain: give a gain"):
        AverageRewardCentering(gym.make(ENV_ID), relative=True)
    with pytest.raises(ValueError, match=r"every gain must be > 0, got \[0.0\]"):
        AverageRewardCentering(gym.make(ENV_ID), gain=0.0, relative=True)
    with pytest.raises(ValueError, match="every gain must be > 0"):
        AverageRewardCentering(
            gym.make(ENV_ID), gain_curve=[[0.1, -1.0], [0.9, 5.0]], relative=True
        )
    with pytest.raises(ValueError, match="relative='yes' is invalid: expected true or false"):
        AverageRewardCentering(gym.make(ENV_ID), gain=5.0, relative="yes")
    with pytest.raises(ValueError, match="not online"):
        CenteredReward(gym.make(ENV_ID), gain="online", relative=True)
    with pytest.raises(ValueError, match="relative=1 is invalid"):
        CenteredReward(gym.make(ENV_ID), gain=5.0, relative=1)
    # a mode resolves at the first step, and the sign of its gain is checked then
    mode = CenteredReward(gym.make(ENV_ID, horizon_requests=50), gain="greedy", relative=True)
    mode.reset(seed=0)
    _, r, *_, info = mode.step(1)
    assert mode.relative and info["centering_gain"] > 0


def test_run_specs_keep_relative_centring():
    """A hyperparameter file's ``CenteredReward: {relative: true}`` reaches the run's
    ``AverageRewardCentering`` (with a number or a curve), and nothing else gains it."""
    from agents.wrappers import run_specs

    curve = [[0.1, 5.0], [0.9, 9.0]]
    for gain in (7.0, curve):
        rel = run_specs([("agents.wrappers.CenteredReward", {"relative": True})], gain)
        plain = run_specs([("agents.wrappers.CenteredReward", {})], gain)
        assert rel[0][0] == "batch_env.wrappers.AverageRewardCentering"
        assert rel[0][1]["relative"] is True and "relative" not in plain[0][1]


def test_gain_curve_modes_resolve_per_load():
    """``smdp-by-load`` is the SMDP optimum at 10 loads over the range (exact there);
    ``greedy-by-load`` greedy's measured cost there; both refuse an env without a drawn
    load, and ``smdp-by-load`` one where the optimum is not exact."""
    from agents.wrappers import CenteredReward, resolve_gain
    from baselines.smdp import gains_at_loads
    from batch_env.tasks import load_grid

    short = {"horizon_requests": 300}
    curve = resolve_gain("smdp-by-load", "batch_env/AnyLoad-v0", short)
    loads = list(load_grid(0.1, 0.95, 10, 1))
    env = gym.make("batch_env/AnyLoad-v0", **short)
    assert [x for x, _ in curve] == loads
    assert [g for _, g in curve] == pytest.approx(gains_at_loads(env, loads), rel=1e-12)
    greedy = resolve_gain("greedy-by-load", "batch_env/NodeAnyLoad-v0", short)
    assert [x for x, _ in greedy] == list(load_grid(0.1, 0.9, 10, 1))
    assert all(g > 0 for _, g in greedy) and greedy[-1][1] > greedy[0][1]
    lazy = resolve_gain("lazy-by-load", "batch_env/NodeAnyLoad-v0", short)
    assert [x for x, _ in lazy] == [x for x, _ in greedy]
    assert all(0 < g < gg for (_, g), (_, gg) in zip(lazy[:6], greedy[:6], strict=True))
    with pytest.raises(ValueError, match="centering_gain='lazy-by-load': .* is not node-level"):
        resolve_gain("lazy-by-load", "batch_env/AnyLoad-v0", short)
    with pytest.raises(ValueError, match="needs an env that draws its load"):
        resolve_gain("smdp-by-load", ENV_ID, short)
    with pytest.raises(ValueError, match="exact only on"):
        resolve_gain("smdp-by-load", "batch_env/NodeAnyLoad-v0", short)
    wrapped = CenteredReward(gym.make("batch_env/AnyLoad-v0", **short), gain="smdp-by-load")
    obs, _ = wrapped.reset(seed=0)
    info = wrapped.step(1)[-1]
    xs, gs = zip(*curve, strict=True)
    assert info["centering_gain"] == pytest.approx(float(np.interp(obs[2], xs, gs)))


def test_smdp_by_rate_centres_a_trace_at_the_observed_rate():
    """smdp-by-rate on a workload whose load is not drawn (the Azure trace): a curve of
    the SMDP optimum at Poisson loads 0.05-1.0 of the env's own configuration,
    increasing with the load, applied at the observation's rate estimate; an env without
    an SMDP is refused, naming the mode."""
    from agents.wrappers import RATE_CURVE_LOADS, CenteredReward, resolve_gain
    from baselines.smdp import SMDPProblem, solve

    kw = {"horizon_requests": 500}
    curve = resolve_gain("smdp-by-rate", "batch_env/Trace-v0", kw)
    assert isinstance(curve, list) and len(curve) == 10
    xs, gs = zip(*curve, strict=True)
    assert RATE_CURVE_LOADS[0] < xs[0] < xs[-1] < RATE_CURVE_LOADS[1]
    assert all(b > a for a, b in zip(gs, gs[1:], strict=False))
    env = gym.make("batch_env/Trace-v0", **kw)
    mu = env.unwrapped.max_throughput_rps
    want = solve(SMDPProblem.from_env(env, rate_per_s=xs[4] * mu)).gain
    assert gs[4] == pytest.approx(want)
    wrapped = CenteredReward(gym.make("batch_env/Trace-v0", **kw), gain="smdp-by-rate")
    obs, _ = wrapped.reset(seed=0)
    info = wrapped.step(1)[-1]
    assert info["centering_gain"] == pytest.approx(float(np.interp(obs[2], xs, gs)))
    with pytest.raises(ValueError, match="smdp-by-rate"):
        resolve_gain("smdp-by-rate", "batch_env/NodeBatching-v0", kw)


def test_best_constant_gain_is_the_tasks_stored_figure():
    """``best-constant`` centres on the task's stored best constant action's cost rate
    (any episode length of the task's problem; a wrapper resolves it at its first step);
    an env that is no task's problem is refused, naming the mode and what to give. A
    wrapper given a mode centres on the resolved number throughout."""
    from agents.wrappers import CenteredReward, resolve_gain
    from batch_env import tasks

    task = "batch_env/LLMClockBursts-v0"
    want = -tasks.references()[task]["policies"]["best-constant"]["reward_rate_per_s"]
    kw = {"horizon_requests": 300, "warmup_requests": 20}
    assert resolve_gain("best-constant", task, kw) == want
    greedy = resolve_gain("greedy", task, kw)
    assert 0 < want < greedy  # the best constant action serves cheaper than vLLM's defaults
    for mode, gain in (("best-constant", want), ("greedy", greedy)):
        wrapped = CenteredReward(gym.make(task, **kw), gain=mode)
        wrapped.reset(seed=0)
        # the resolved number at every step (it once stayed the online estimate, which
        # followed the policy's own cost from the first step on)
        assert [wrapped.step(a)[-1]["centering_gain"] for a in (0, 1, 2)] == [gain] * 3
    with pytest.raises(ValueError, match="centering_gain='best-constant' needs a benchmark task"):
        resolve_gain("best-constant", ENV_ID, {"horizon_requests": 300})


def test_arrival_features_follow_the_arrivals():
    """Load estimates over short windows follow the env's own estimator from the arrivals
    in ``info["arrived_total"]``, starting at the env's estimate; the time since the last
    arrival is 0 after a step with arrivals and grows by ``dt`` otherwise."""
    from batch_env.wrappers import ArrivalFeatures

    env = ArrivalFeatures(gym.make("batch_env/Bursty-v0", horizon_requests=500))
    mu = env.unwrapped.max_throughput_rps
    obs, info = env.reset(seed=4)
    assert obs.shape == (8,) and env.observation_space.contains(obs)
    assert obs[5] == pytest.approx(obs[2]) and obs[6] == pytest.approx(obs[2]) and obs[7] == 0
    r, seen, since = np.full(2, float(obs[2]) * mu), info["arrived_total"], 0.0
    tau = np.array([8.0, 64.0]) / mu
    grew = reset_to_zero = 0
    for t in range(400):
        obs, _, _, trunc, info = env.step(int(t % 3 == 0) * 4)
        n, seen = info["arrived_total"] - seen, info["arrived_total"]
        r = r * np.exp(-info["dt_s"] / tau) + n / tau
        since = 0.0 if n else since + info["dt_s"]
        assert obs[5:7] == pytest.approx(np.minimum(r / mu, 100.0), rel=1e-5)
        s = np.log1p(since * mu) / np.log1p(10.0 * mu)
        assert obs[7] == pytest.approx(min(s, 1.0), rel=1e-5, abs=1e-7)
        grew += since > 0
        reset_to_zero += n > 0
        assert env.observation_space.contains(obs)
        if trunc:
            break
    assert grew and reset_to_zero
    with pytest.raises(ValueError, match="windows=\\[0\\] is invalid"):
        ArrivalFeatures(gym.make(ENV_ID), windows=[0])


def test_phase_belief_is_smdp_belief_filter_and_finds_the_phase():
    """PhaseBelief appends the posterior over the MMPP's phases: a distribution, equal
    step by step to the belief the smdp-belief baseline acts on (one filter), and on
    Bursty-v0 it names the oracle's phase at nearly every epoch."""
    import baselines
    from agents.wrappers import PhaseBelief

    env = PhaseBelief(gym.make("batch_env/Bursty-v0", horizon_requests=3000, oracle_info=True))
    ref = baselines.make("smdp-belief", env=gym.make("batch_env/Bursty-v0", horizon_requests=3000))
    obs, info = env.reset(seed=5)
    ref.reset()
    right = steps = 0
    for _ in range(3000):
        a = ref.act(obs[:5], info)
        belief = obs[5:]
        assert belief.sum() == pytest.approx(1.0, abs=1e-5) and env.observation_space.contains(obs)
        assert belief == pytest.approx(ref.belief, abs=1e-6)
        right += int(np.argmax(belief) == info["oracle"]["phase"]) if "oracle" in info else 0
        steps += "oracle" in info
        obs, _, _, trunc, info = env.step(a)
        if trunc:
            break
    assert steps > 1000 and right / steps > 0.95
    with pytest.raises(ValueError, match="MMPP workload"):
        PhaseBelief(gym.make(ENV_ID))


def test_binary_action_and_queue_features():
    env = QueueFeatures(BinaryAction(gym.make(ENV_ID, max_batch_size=8)))
    obs, _ = env.reset(seed=0)
    assert env.action_space.n == 2 and obs.shape == (7,)
    for _ in range(20):
        obs, *_, info = env.step(0)
    q = info["queue_len"]
    assert obs[5] == pytest.approx(np.log1p(q) / np.log1p(2000), rel=1e-5)
    assert obs[6] == pytest.approx(min(q, 8) / 8)
    obs, *_, info = env.step(1)
    assert info["last_batch_size"] == min(q, 8)
    with pytest.raises(ValueError, match="action=2"):
        env.step(2)


# -- hyperparameter files -----------------------------------------------------------------


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn", "ppo_mask", "ppo_lstm"])
def test_hyperparameter_files_parse(algo):
    hp = load_hyperparams(algo, ENV_ID)
    assert {"n_envs", "n_timesteps", "policy", "env_wrapper", "policy_kwargs"} <= set(hp)
    assert isinstance(literal(hp["policy_kwargs"], "policy_kwargs"), dict)
    specs = wrapper_specs(hp["env_wrapper"])
    # the default centring (no gain: agents.wrappers.DEFAULT_CENTERING_GAIN) and the enjoy summary
    assert ("agents.wrappers.CenteredReward", {}) in specs and specs[-1][
        0
    ] == "agents.wrappers.ServingSummary"
    assert hp["callback"] == "agents.callbacks.ServingMetricsCallback"


def test_literal_refuses_code():
    with pytest.raises(ValueError, match="policy_kwargs"):
        literal("__import__('os').system('true')", "policy_kwargs")


# -- training runs --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algo", "steps"),
    [("ppo", 2048), ("a2c", 2048), ("dqn", 2000), ("ppo_mask", 2048), ("ppo_lstm", 2048)],
)
def test_short_run_writes_serving_tags_and_reloads(algo, steps, tmp_path):
    run = train(
        TrainArgs(
            algo=algo,
            env_kwargs=SMALL_ENV,
            n_timesteps=steps,
            run_dir=str(tmp_path / algo),
            centering_gain="online",
            eval_freq=1000,
            eval_episodes=2,
            checkpoint_freq=1000,
            progress=False,
        )
    )
    tags = tensorboard_scalars(run)
    for tag in (
        "serving/latency_p99_ms",
        "serving/power_mean_w",
        "serving/sla_attainment",
        "serving/reward_rate_per_s",
        "reward_components/energy",
        "optimality/gap",
        "optimality/smdp_gain",
        "eval/deterministic/reward_rate_per_s",
        "eval/stochastic/latency_mean_ms",
        "rollout/ep_reward_rate_per_s",  # the real figure, beside SB3's shaped ep_rew_mean
        "eval/greedy/reward_rate_per_s",  # the final evaluation's reference
    ):
        assert tag in tags, tag
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["algo"] == algo and cfg["smdp_gain"] > 0 and cfg["threads"] == 1
    # the reloaded run acts exactly like the in-memory model did at its final evaluation
    import json

    final = json.loads((run / "final_evaluation.json").read_text())
    env = gym.make(ENV_ID, **SMALL_ENV)
    policy = load_policy(run)
    res = evaluate(policy, env, n_episodes=2, seed=100_000)
    # (in the mode the final evaluation scored better: its draws are seeded per episode)
    assert final["acting"] in ("deterministic", "stochastic")
    assert policy.deterministic == (final["acting"] == "deterministic")
    assert res.mean("reward_rate_per_s") == final[final["acting"]]["reward_rate_per_s"][0]
    # greedy on the same two episodes, and the paired difference from it
    greedy = evaluate(baselines.make("greedy", env=env), env, n_episodes=2, seed=100_000)
    ref = final["reference"]
    assert ref["policy"] == "greedy" and ref["reward_rate_per_s"][0] == greedy.mean(
        "reward_rate_per_s"
    )
    assert ref["difference"][0] == pytest.approx(
        res.mean("reward_rate_per_s") - greedy.mean("reward_rate_per_s")
    )
    # a recurrent policy acts through predict with its LSTM state, the others in NumPy
    assert (policy._actor is None) == (algo == "ppo_lstm")


def test_resume_continues_the_step_count(tmp_path):
    run = tmp_path / "ppo"
    args = TrainArgs(
        algo="ppo",
        env_kwargs=SMALL_ENV,
        n_timesteps=2048,
        run_dir=str(run),
        centering_gain="100",
        eval_freq=0,
        checkpoint_freq=2048,
        progress=False,
    )
    train(args)
    assert (run / "checkpoints" / "model_2048_steps.zip").exists()
    train(TrainArgs(**{**args.__dict__, "n_timesteps": 4096, "resume": True}))
    from stable_baselines3 import PPO

    assert PPO.load(run / "model.zip").num_timesteps == 4096
    steps = [s for s, _ in tensorboard_scalars(run)["time/fps"]]
    assert max(steps) == 4096 and min(steps) <= 2048
    with pytest.raises(FileExistsError, match="already holds a run"):
        train(args)


def test_evaluation_episodes_take_their_own_length(tmp_path):
    """``eval_horizon_requests``: the run's evaluations (here the final one) run episodes of
    that many requests on the held-out seeds, whatever the training episodes' length; the
    run records the setting."""
    run = train(
        TrainArgs(
            env_kwargs=SMALL_ENV,  # 300-request training episodes
            n_timesteps=512,
            run_dir=str(tmp_path / "run"),
            centering_gain="100",
            eval_freq=100_000,  # the final evaluation only
            eval_episodes=2,
            eval_horizon_requests=120,
            progress=False,
        )
    )
    final = json.loads((run / "final_evaluation.json").read_text())
    policy = load_policy(run, deterministic=True)
    rates = {
        n: evaluate(policy, gym.make(ENV_ID, **{**SMALL_ENV, "horizon_requests": n}), 2, 100_000)
        for n in (120, 300)
    }
    got = final["deterministic"]["reward_rate_per_s"][0]
    assert got == rates[120].mean("reward_rate_per_s") != rates[300].mean("reward_rate_per_s")
    assert yaml.safe_load((run / "config.yaml").read_text())["args"]["eval_horizon_requests"] == 120


def test_a_checkpoint_loads_with_its_own_observation_statistics(tmp_path):
    """``load_policy(run, model_file=<checkpoint>)`` normalizes observations with the
    statistics saved beside that checkpoint, not the run's final ones (which a model of
    an earlier step never saw); a model file without them beside it takes the run's."""
    import shutil

    from agents.common import load_normalizer

    run = train(
        TrainArgs(
            env_id="batch_env/LLMClockBursts-v0",  # its entry normalizes observations
            env_kwargs={"horizon_requests": 30, "warmup_requests": 0},
            n_timesteps=2048,
            num_envs=1,
            run_dir=str(tmp_path / "run"),
            eval_freq=0,
            checkpoint_freq=1024,
            progress=False,
        )
    )
    ck = run / "checkpoints"
    early = load_normalizer(ck / "model_vecnormalize_1024_steps.pkl").obs_rms.mean
    final = load_normalizer(run / "vecnormalize.pkl").obs_rms.mean
    assert not np.array_equal(early, final)  # the statistics moved after step 1,024
    pol = load_policy(run, model_file=ck / "model_1024_steps.zip")
    assert np.array_equal(pol.obs_normalizer.obs_rms.mean, early)
    alone = tmp_path / "model-copy.zip"
    shutil.copy(ck / "model_1024_steps.zip", alone)
    assert np.array_equal(load_policy(run, model_file=alone).obs_normalizer.obs_rms.mean, final)


@pytest.mark.slow
def test_binary_ppo_beats_random_policy(tmp_path):
    """On a fixed seed and one thread, a short binary-mode PPO run beats random valid actions
    (cost per second 101.7 vs 113.8 when written) and stays within 5% of greedy."""
    env_kwargs = {**SMALL_ENV, "horizon_requests": 2000}
    run = train(
        TrainArgs(
            algo="ppo",
            env_kwargs=env_kwargs,
            n_timesteps=30_000,
            run_dir=str(tmp_path / "ppo"),
            seed=3,
            eval_freq=0,
            progress=False,
            centering_gain="greedy",
        )
    )
    env = gym.make(ENV_ID, **env_kwargs)

    class RandomValid:
        def reset(self):
            self.rng = np.random.default_rng(0)

        def act(self, obs, info):
            return int(self.rng.choice(np.flatnonzero(info["action_mask"])))

    agent = evaluate(load_policy(run), env, n_episodes=3, seed=900)
    rand = evaluate(RandomValid(), env, n_episodes=3, seed=900)
    greedy_cost = yaml.safe_load((run / "config.yaml").read_text())["centering_gain"]
    agent_cost, rand_cost = -agent.mean("reward_rate_per_s"), -rand.mean("reward_rate_per_s")
    print(
        f"cost per second: agent {agent_cost:.2f}, random valid {rand_cost:.2f}, greedy {greedy_cost:.2f}"
    )
    assert rand_cost > 1.05 * agent_cost  # costs are positive: the agent is clearly cheaper
    assert -agent.mean("reward_rate_per_s") < 1.05 * greedy_cost


def test_missing_and_corrupt_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_policy(tmp_path / "nope")
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(FileNotFoundError, match="config.yaml"):
        load_policy(bad)
    (bad / "config.yaml").write_text(
        yaml.safe_dump({"algo": "ppo", "env_id": ENV_ID, "env_kwargs": {}, "wrappers": []})
    )
    with pytest.raises(FileNotFoundError, match="model.zip"):
        load_policy(bad)
    (bad / "model.zip").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="corrupt"):
        load_policy(bad)
    (bad / "config.yaml").write_text("algo: [unclosed")
    with pytest.raises(ValueError, match="corrupt"):
        load_policy(bad)
    with pytest.raises(ValueError, match="agent spec"):
        parse_policy_spec("ppo")


@pytest.mark.slow
def test_rl_zoo3_trains_with_our_hyperparameters(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "rl_zoo3.train",
        "--algo",
        "ppo",
        "--gym-packages",
        "batch_env",
        "--env",
        ENV_ID,
        "--conf-file",
        str(ROOT / "agents/hyperparams/ppo.yml"),
        "-n",
        "600",
        "--log-folder",
        str(tmp_path),
        "--eval-freq",
        "-1",
        "--env-kwargs",
        "horizon_requests:100",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert list(tmp_path.glob("ppo/*/batch_env-DynamicBatching-v0.zip"))


def test_binary_action_serves_full_batches():
    env = BinaryAction(gym.make(ENV_ID, max_batch_size=4, decision_interval_ms=0.2))
    _, info = env.reset(seed=0)
    while info["queue_len"] < 4:
        _, _, _, _, info = env.step(0)
    _, _, _, _, info = env.step(0)  # a wait with a full batch waiting serves it
    assert info["last_batch_size"] == 4
    raw = BinaryAction(
        gym.make(ENV_ID, max_batch_size=4, decision_interval_ms=0.2), serve_full=False
    )
    _, info = raw.reset(seed=0)
    for _ in range(50):
        _, _, _, _, info = raw.step(0)
    assert info["queue_len"] > 4 and info["last_batch_size"] == 0


# -- resuming, damaged checkpoints, refused settings ------------------------------------------


def tiny_hyperparams(folder: Path) -> str:
    """Write TINY_PPO to ``folder/tiny.yml`` and return its path."""
    path = folder / "tiny.yml"
    path.write_text(yaml.safe_dump(TINY_PPO))
    return str(path)


def tiny_args(tmp_path: Path, **kw) -> TrainArgs:
    """A tiny run: 128 steps, a checkpoint every 64, no periodic evaluation."""
    return TrainArgs(
        **{
            "algo": "ppo",
            "env_kwargs": TINY_ENV,
            "hyperparams": tiny_hyperparams(tmp_path),
            "n_timesteps": 128,
            "run_dir": str(tmp_path / "run"),
            "centering_gain": "100",
            "checkpoint_freq": 64,
            "eval_freq": 0,
            "progress": False,
            **kw,
        }
    )


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_resume_keeps_every_setting_of_the_run(tmp_path):
    from stable_baselines3 import PPO

    run = train(tiny_args(tmp_path, eval_freq=64, eval_episodes=1, seed=3))
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["args"]["checkpoint_freq"] == 64 and saved["args"]["eval_episodes"] == 1
    # only the run and a larger n_timesteps: every other setting comes from config.yaml
    train(TrainArgs(run_dir=str(run), resume=True, n_timesteps=256, progress=False))
    assert PPO.load(run / "model.zip").num_timesteps == 256
    ckpts = sorted(
        int(p.name.split("_")[1]) for p in (run / "checkpoints").glob("model_*_steps.zip")
    )
    assert ckpts == [64, 128, 192, 256]  # the run's own --checkpoint-freq, not the default 50,000
    evals = json.loads((run / "evaluations.json").read_text())
    assert [e["timesteps"] for e in evals] == [
        64,
        128,
        128,
        192,
        256,
        256,
    ]  # periodic + final, each part
    resumed = yaml.safe_load((run / "config.yaml").read_text())
    assert resumed["args"] == {**saved["args"], "n_timesteps": 256}
    assert {k: v for k, v in resumed.items() if k not in ("args", "n_timesteps")} == {
        k: v for k, v in saved.items() if k not in ("args", "n_timesteps")
    }


def test_resume_takes_the_same_kwargs_under_an_entry_that_gives_env_kwargs(tmp_path):
    """A run whose hyperparameter entry gives env kwargs (a task's training episodes)
    keeps them with the given ones over them; giving the same kwargs again resumes it
    (``batch-env agents`` resumes an interrupted run so), other kwargs are refused."""
    from stable_baselines3 import PPO

    hp = tmp_path / "entry.yml"
    hp.write_text(yaml.safe_dump({ENV_ID: {**TINY_PPO[ENV_ID], "env_kwargs": TINY_ENV}}))
    run = train(tiny_args(tmp_path, env_kwargs={}, hyperparams=str(hp)))
    assert yaml.safe_load((run / "config.yaml").read_text())["env_kwargs"] == TINY_ENV
    again = TrainArgs(run_dir=str(run), resume=True, env_kwargs={}, hyperparams=str(hp))
    train(replace(again, n_timesteps=192, progress=False))
    assert PPO.load(run / "model.zip").num_timesteps == 192
    with pytest.raises(ValueError, match="env_kwargs=.* was given"):
        train(replace(again, env_kwargs={"horizon_requests": 60}, n_timesteps=256))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"checkpoint_freq": 100},
            "checkpoint_freq=100 was given but run .* was trained with checkpoint_freq=64",
        ),
        ({"eval_freq": 10}, "eval_freq=10 was given .* eval_freq=0"),
        ({"algo": "a2c"}, "algo='a2c' was given .* algo='ppo'"),
        ({"seed": 1}, "seed=1 was given .* seed=0"),
        ({"env_kwargs": {**TINY_ENV, "horizon_requests": 60}}, "env_kwargs=.* was given"),
        ({"threads": 2}, "threads=2 was given .* threads=1"),
        ({"n_timesteps": 64}, "n_timesteps=64 is below the 128 steps"),
        ({"checkpoint_freq": 0}, "checkpoint_freq=0 is invalid: expected an integer >= 1"),
    ],
)
def test_resume_refuses_a_changed_setting_and_writes_nothing(tmp_path, change, message):
    run = train(tiny_args(tmp_path))
    before = files(run)
    with pytest.raises(ValueError, match=message):
        train(TrainArgs(run_dir=str(run), resume=True, progress=False, **change))
    assert files(run) == before


@pytest.mark.parametrize(
    "bad",
    [
        {"n_timesteps": -5},
        {"n_timesteps": 0},
        {"checkpoint_freq": 0},
        {"eval_freq": -1},
        {"eval_episodes": 0},
        {"num_envs": 0},
        {"threads": 0},
        {"seed": -1},
        {"n_timesteps": 2.5},
        {"algo": "nope"},
        {"centering_gain": "x"},
        {"device": "nope"},
        {"env_kwargs": {"bogus_key": 1}},
        {"env_kwargs": [1]},
    ],
)
def test_nonsense_settings_are_refused_before_anything_is_written(tmp_path, bad):
    ((key, value),) = bad.items()
    with pytest.raises(ValueError, match=f"{key}"):
        train(tiny_args(tmp_path, **bad))
    assert not (tmp_path / "run").exists()


def test_resume_falls_back_over_damaged_checkpoints(tmp_path, capsys):
    from stable_baselines3 import PPO

    run = train(tiny_args(tmp_path, n_timesteps=256))
    ck = run / "checkpoints"
    (ck / "model_256_steps.zip").write_bytes(
        (ck / "model_256_steps.zip").read_bytes()[:300]
    )  # truncated
    (ck / "model_vecnormalize_192_steps.pkl").write_text("{}")  # not a pickle
    capsys.readouterr()
    train(TrainArgs(run_dir=str(run), resume=True, n_timesteps=320, progress=False))
    err = capsys.readouterr().err
    assert f"warning: {ck / 'model_256_steps.zip'} is damaged" in err
    assert f"warning: {ck / 'model_vecnormalize_192_steps.pkl'} is damaged" in err
    assert (ck / "model_256_steps.zip.corrupt").exists() and (
        ck / "model_vecnormalize_192_steps.pkl.corrupt"
    ).exists()
    # resumed from step 128: the 192 and 256 checkpoints are written again on the way to 320
    assert PPO.load(run / "model.zip").num_timesteps == 320
    assert PPO.load(ck / "model_256_steps.zip").num_timesteps == 256
    for p in ck.glob("model_*_steps.zip"):
        p.write_bytes(b"garbage")
    with pytest.raises(
        FileNotFoundError, match="no usable checkpoint .*model_64_steps.zip.corrupt"
    ):
        train(TrainArgs(run_dir=str(run), resume=True, progress=False))


def test_an_edited_algo_in_config_yaml_is_named(tmp_path, capsys):
    from experiments.cli import main

    run = train(tiny_args(tmp_path))
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    capsys.readouterr()
    assert main(["evaluate", "--policy", f"dqn:{run}", "--episodes", "1"]) == 2
    assert (
        f"--policy 'dqn:{run}' names algo 'dqn' but run '{run}' is a ppo run"
        in capsys.readouterr().err
    )
    (run / "config.yaml").write_text(yaml.safe_dump({**cfg, "algo": "dqn"}))
    with pytest.raises(ValueError, match="says algo='dqn' but .*model.zip' holds a ppo model"):
        load_policy(run)
    with pytest.raises(ValueError, match="inconsistent: algo='dqn' but args.algo='ppo'"):
        train(TrainArgs(run_dir=str(run), resume=True, progress=False))
    (run / "config.yaml").write_text(
        yaml.safe_dump({**cfg, "algo": "dqn", "args": {**cfg["args"], "algo": "dqn"}})
    )
    with pytest.raises(ValueError, match="says algo='dqn' but checkpoint .* holds a ppo model"):
        train(TrainArgs(run_dir=str(run), resume=True, progress=False))
    (run / "config.yaml").write_text(
        yaml.safe_dump({**cfg, "algo": "a2c", "args": {**cfg["args"], "algo": "a2c"}})
    )
    with pytest.raises(ValueError, match="says algo='a2c' but checkpoint .* holds a ppo model"):
        train(TrainArgs(run_dir=str(run), resume=True, progress=False))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"bogus_param": 1}, r"\['bogus_param'\] are not hyperparameters of ppo"),
        ({"gamma": "high"}, "gamma='high' is invalid: expected a number"),
        ({"n_steps": 6.5}, "n_steps=6.5 is invalid: expected an integer"),
        ({"normalize": "[1]"}, "normalize='\\[1\\]' is invalid"),
        ({"n_timesteps": "lots"}, "n_timesteps='lots' is invalid"),
        ({"policy": 3}, "policy=3 is invalid"),
        (
            {"learning_rate": "lin_x"},
            "learning_rate='lin_x' is invalid: expected a number or 'lin_<x>'",
        ),
        (
            {"clip_range": "lin_-0.2"},
            "clip_range='lin_-0.2' is invalid: expected a number or 'lin_<x>'",
        ),
        ({"gamma": "lin_0.9"}, "gamma='lin_0.9' is invalid: expected a number"),
    ],
)
def test_bad_hyperparameter_files_are_named(tmp_path, entry, message):
    path = tmp_path / "hp.yml"
    path.write_text(yaml.safe_dump({ENV_ID: {**TINY_PPO[ENV_ID], **entry}}))
    with pytest.raises(ValueError, match=f"hp.yml.*{message}"):
        load_hyperparams("ppo", ENV_ID, path)


def test_linear_schedules_decay_to_zero(tmp_path):
    """rl-zoo3's ``lin_<x>`` learning rate and clip range: the run's config keeps the
    string, the model's schedules start at ``x`` and reach 0 at the end of training, and
    the optimizer's learning rate after the last update is below the first's."""
    from agents.common import LinearSchedule

    entry = {**TINY_PPO[ENV_ID], "learning_rate": "lin_1e-3", "clip_range": "lin_0.2"}
    path = tmp_path / "lin.yml"
    path.write_text(yaml.safe_dump({ENV_ID: entry}))
    run = train(tiny_args(tmp_path, hyperparams=str(path), n_timesteps=256))
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["algo_kwargs"]["learning_rate"] == "lin_1e-3"
    model = load_policy(run).model
    assert isinstance(model.learning_rate, LinearSchedule)
    assert model.lr_schedule(1.0) == pytest.approx(1e-3)
    assert model.lr_schedule(0.0) == 0.0
    assert model.clip_range(1.0) == pytest.approx(0.2) and model.clip_range(0.25) == pytest.approx(
        0.05
    )
    assert model.policy.optimizer.param_groups[0]["lr"] == 0.0  # a constant 1e-3 would stay


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn", "ppo_mask"])
def test_numpy_actor_acts_as_predict(algo):
    """The NumPy copy of a policy network picks ``model.predict``'s deterministic action
    (masked for MaskablePPO) on thousands of observations, the network's weights scaled
    up so that the logits differ widely and the argmax is not trivially constant."""
    import torch

    from agents.common import NumpyActor, algo_class

    env = QueueFeatures(gym.make(ENV_ID, max_batch_size=8))
    model = algo_class(algo)("MlpPolicy", env, seed=3, device="cpu")
    with torch.no_grad():
        for p in model.policy.parameters():
            p.mul_(4.0)
    actor = NumpyActor.of(model)
    assert actor is not None
    rng = np.random.default_rng(0)
    n_actions = env.action_space.n
    picked = set()
    for _ in range(3000):
        o = rng.normal(0.0, 2.0, size=env.observation_space.shape).astype(np.float32)
        if algo == "ppo_mask":
            mask = rng.random(n_actions) < 0.5
            mask[rng.integers(n_actions)] = True
            want = int(model.predict(o, deterministic=True, action_masks=mask)[0])
            got = actor.action(o, mask)
            assert mask[got]
        else:
            want, got = int(model.predict(o, deterministic=True)[0]), actor.action(o)
        assert got == want
        picked.add(got)
    assert len(picked) > 2  # the check covers more than one action


@pytest.mark.parametrize(
    "feature", ["batch_env.wrappers.ArrivalFeatures", "agents.wrappers.PhaseBelief"]
)
def test_policy_replays_stateful_observation_wrappers(tmp_path, feature):
    """A run trained with ArrivalFeatures or PhaseBelief (state kept from step to step)
    loads as a policy on the raw env: the policy shows its model exactly what the wrapped
    env showed it during training, over two episodes (the wrapper state restarts with the
    episode), and acts as ``model.predict`` does on the wrapped env."""
    specs = [
        ("batch_env.wrappers.BinaryAction", {}),
        ("batch_env.wrappers.QueueFeatures", {}),
        (feature, {}),
    ]
    from agents.common import AgentPolicy, load_normalizer, make_env

    kw = {"horizon_requests": 300}
    run = tmp_path / "run"
    train(
        TrainArgs(
            algo="ppo",
            env_id="batch_env/Bursty-v0",
            env_kwargs=kw,
            n_timesteps=256,
            seed=0,
            run_dir=str(run),
            progress=False,
            eval_freq=0,
            hyperparams=_arrival_hyperparams(tmp_path, feature),
        )
    )
    pol = load_policy(run)
    assert isinstance(pol, AgentPolicy) and pol._actor is not None
    norm = load_normalizer(run / "vecnormalize.pkl")
    wrapped = make_env("batch_env/Bursty-v0", kw, specs)
    raw = gym.make("batch_env/Bursty-v0", **kw)
    for ep in range(2):
        pol.reset()
        wo, _ = wrapped.reset(seed=10 + ep)
        ro, rinfo = raw.reset(seed=10 + ep)
        for _ in range(500):
            seen = pol.observe(ro, rinfo)
            want = norm.normalize_obs(wo)
            assert seen == pytest.approx(want, rel=1e-6, abs=1e-6)
            a_model = int(pol.model.predict(want, deterministic=True)[0])
            a_env = wrapped.get_wrapper_attr("action_from_info")(a_model, rinfo)
            wo, _, _, trunc, _ = wrapped.step(a_model)
            ro, _, _, rtrunc, rinfo = raw.step(a_env)
            assert trunc == rtrunc
            if trunc:
                break
    # act() = observe() + the network + the action wrappers, from a fresh episode
    pol.reset()
    ro, rinfo = raw.reset(seed=99)
    probe = load_policy(run)
    probe.reset()
    for _ in range(50):
        a = pol.act(ro, rinfo)
        o = probe.observe(ro, rinfo)
        assert a == probe._act_fns[0](int(probe.model.predict(o, deterministic=True)[0]), rinfo)
        ro, *_, rinfo = raw.step(a)


def _arrival_hyperparams(
    tmp_path: Path, feature: str = "batch_env.wrappers.ArrivalFeatures"
) -> str:
    """A PPO hyperparameter file for Bursty-v0 with the arrival features (or ``feature``)."""
    entry = dict(load_hyperparams("ppo", "batch_env/DynamicBatching-v0"))
    entry["env_wrapper"] = [
        "batch_env.wrappers.BinaryAction",
        "batch_env.wrappers.QueueFeatures",
        feature,
        "agents.wrappers.CenteredReward",
    ]
    entry.update(n_envs=1, n_steps=128, batch_size=64, n_epochs=1)
    path = tmp_path / "ppo-arrivals.yml"
    path.write_text(yaml.safe_dump({"batch_env/Bursty-v0": entry}))
    return str(path)


def test_a_wrapper_a_policy_cannot_replay_is_named():
    """A wrapper that changes the observation outside ObservationWrapper and without the
    replay methods is refused when the policy is built, naming it."""
    from agents.common import AgentPolicy

    class Opaque(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Box(-1, 1, (9,), np.float32)

    gym.register("test/OpaqueObs-v0", lambda: Opaque(gym.make(ENV_ID)))
    with pytest.raises(ValueError, match="wrapper Opaque changes the observation"):
        AgentPolicy(None, "test/OpaqueObs-v0", {}, [])
