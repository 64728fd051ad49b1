"""The SB3 ``VecEnv`` adapter over Gymnasium vector envs (``agents.vec_env``) and
``train --vectorized``.

Tests run on ``SyncVectorEnv`` (mode ``sync``) and, once the env id registers a native
vector env (``vector_entry_point``), on that one too: lane ``i`` must act like the scalar env
seeded ``seed + i``. Sync lanes are the scalar envs themselves (exact equality); the native
twin may differ in the last bits of float sums, so it is compared with tolerances.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import yaml
from conftest import tensorboard_scalars
from gymnasium.vector import AutoresetMode
from helpers import SMALL_ENV as TRAIN_ENV  # the agents tests' small training env

import batch_env  # noqa: F401  (registers the ids)
from agents import load_policy
from agents.common import load_hyperparams, make_env
from agents.train import STEP_INFO_KEYS, TrainArgs, train
from agents.vec_env import SB3VecEnv, make_vec_env, make_vector_env
from batch_env import evaluate

ENV_ID = "batch_env/DynamicBatching-v0"
SHORT = {"horizon_requests": 30}  # episodes of a few dozen steps: many autoresets
TWINNED = [
    ("batch_env.wrappers.BinaryAction", {}),
    ("batch_env.wrappers.QueueFeatures", {}),
    ("batch_env.wrappers.AverageRewardCentering", {"gain": None}),
]


def has_native(env_id: str = ENV_ID) -> bool:
    return gym.spec(env_id).vector_entry_point is not None


def preferred_mode() -> str:
    """The native vector env once the id registers one, else SyncVectorEnv."""
    return "vector_entry_point" if has_native() else "sync"


MODES = ["sync", *(["vector_entry_point"] if has_native() else [])]


def assert_same(a, b, mode, rtol=1e-9):
    """Exact on sync lanes (they are the scalar envs); close on the native twin."""
    if mode == "sync":
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(
            a, b, rtol=rtol, atol=1e-6 if np.asarray(a).dtype == np.float32 else 1e-12
        )


def assert_same_summary(a: dict, b: dict, mode: str) -> None:
    assert set(a) == set(b)
    for k in b:
        assert_same(a[k], b[k], mode)


def random_valid(venv, rng):
    return np.array([rng.choice(np.flatnonzero(m)) for m in venv.env_method("action_masks")])


# -- the step contract -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_step_contract_matches_scalar_envs(mode):
    """Spaces, dtypes and shapes as SB3 checks them; dones, terminal observations, episode
    summaries and the autoreset observation lane by lane against scalar envs."""
    n, seed = 3, 11
    venv = SB3VecEnv(make_vector_env(ENV_ID, n, SHORT, mode=mode))
    envs = [gym.make(ENV_ID, **SHORT) for _ in range(n)]
    assert venv.num_envs == n
    assert venv.observation_space == envs[0].observation_space
    assert venv.action_space == envs[0].action_space
    assert venv.seed(seed) == [seed, seed + 1, seed + 2]
    obs = venv.reset()
    assert obs.shape == (n, 5) and obs.dtype == np.float32
    for i, env in enumerate(envs):
        assert_same(obs[i], env.reset(seed=seed + i)[0], mode)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(300):
        actions = random_valid(venv, rng)
        obs, rewards, dones, infos = venv.step(actions)
        assert obs.shape == (n, 5) and obs.dtype == np.float32
        assert rewards.shape == (n,) and rewards.dtype == np.float32
        assert dones.shape == (n,) and dones.dtype == bool
        assert isinstance(infos, list) and len(infos) == n
        for i, env in enumerate(envs):
            assert venv.observation_space.contains(obs[i])
            o, r, term, trunc, info = env.step(int(actions[i]))
            assert_same(rewards[i], np.float32(r), mode)
            assert dones[i] == (term or trunc)
            if dones[i]:
                ended += 1
                assert_same(infos[i]["terminal_observation"], o, mode)
                assert infos[i]["TimeLimit.truncated"] == (trunc and not term)
                assert_same_summary(infos[i]["serving"], info["serving"], mode)
                o, _ = env.reset()  # the autoreset: a fresh seed from the lane's np_random
            else:
                assert infos[i] == {}  # nothing to report: no per-lane info is built
            assert_same(obs[i], o, mode)
    assert ended >= 2 * n


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="sync", **SHORT),
            id="sync-next-step",
        ),
        pytest.param(
            lambda: gym.make_vec(
                ENV_ID,
                num_envs=2,
                vectorization_mode="sync",
                vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED},
                **SHORT,
            ),
            id="sync-disabled",
        ),
        *(
            [
                pytest.param(
                    lambda: gym.make_vec(
                        ENV_ID, num_envs=2, vectorization_mode="vector_entry_point", **SHORT
                    ),
                    id="native-default",
                )
            ]
            if has_native()
            else []
        ),
    ],
)
def test_refuses_other_autoreset_modes(make):
    vector_env = make()
    mode = vector_env.metadata["autoreset_mode"]
    assert mode != AutoresetMode.SAME_STEP
    with pytest.raises(
        ValueError,
        match=f"autoresets in AutoresetMode.{mode.name}: SB3VecEnv needs AutoresetMode.SAME_STEP",
    ):
        SB3VecEnv(vector_env)
    with pytest.raises(TypeError, match="gymnasium.vector.VectorEnv"):
        SB3VecEnv(gym.make(ENV_ID))


@pytest.mark.parametrize("mode", MODES)
def test_seeding_is_reproducible(mode):
    """seed(s): lane i runs the scalar env's episode of seed s + i; a seed is used once.
    (Trajectories, not first observations: every episode starts at its first arrival.)"""
    kw = {"horizon_requests": 500}  # no episode ends within the 40 steps
    actions = np.ones((40, 3), dtype=np.int64) * np.array([1, 4, 32])

    def trajectory(venv, actions):
        return np.stack([venv.reset()] + [venv.step(a)[0] for a in actions])

    venv = make_vec_env(ENV_ID, 3, kw, seed=5, mode=mode)
    a = trajectory(venv, actions)
    np.testing.assert_array_equal(
        trajectory(make_vec_env(ENV_ID, 3, kw, seed=5, mode=mode), actions), a
    )
    for i in range(3):
        env = gym.make(ENV_ID, **kw)
        ref = [env.reset(seed=5 + i)[0]] + [env.step(int(x))[0] for x in actions[:, i]]
        assert_same(a[:, i], np.stack(ref), mode)
    c = trajectory(make_vec_env(ENV_ID, 3, kw, seed=6, mode=mode), actions[:, [1, 2, 0]])
    assert_same(c[:, 0], a[:, 1], mode)  # seed 6's lane 0 is seed 5's lane 1
    assert not np.array_equal(trajectory(venv, actions), a)  # the seed was used: fresh episodes


@pytest.mark.parametrize("mode", MODES)
def test_action_masks_attributes_and_maskable_ppo(mode):
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks

    venv = make_vec_env(ENV_ID, 2, {**SHORT, "max_batch_size": 8}, seed=0, mode=mode)
    venv.reset()
    masks = venv.env_method("action_masks")
    assert len(masks) == 2 and all(m.shape == (9,) and m.dtype == bool for m in masks)
    for _ in range(5):
        obs = venv.step(np.zeros(2, dtype=np.int64))[0]  # wait: the queues grow
    masks = venv.env_method("action_masks")
    queues = np.rint(obs[:, 0] * 8)  # feature 0: queue / max_batch_size
    assert queues.max() > 1
    for m, q in zip(masks, queues, strict=True):  # wait, and 1..min(queue, B)
        np.testing.assert_array_equal(m, np.arange(9) <= min(q, 8))
    assert len(venv.env_method("action_masks", indices=[1])) == 1
    assert get_action_masks(venv).shape == (2, 9)
    assert venv.has_attr("action_masks")
    assert venv.get_attr("render_mode") == [None, None]
    assert venv.env_is_wrapped(gym.Wrapper) == [False, False]
    binary = make_vec_env(ENV_ID, 2, SHORT, seed=0, mode=mode, wrappers=TWINNED)
    binary.reset()
    np.testing.assert_array_equal(
        np.stack(binary.env_method("action_masks")), np.ones((2, 2), dtype=bool)
    )
    model = MaskablePPO(
        "MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu"
    )
    model.learn(128)
    assert model.num_timesteps >= 128 and len(model.ep_info_buffer) > 0


@pytest.mark.parametrize("mode", MODES)
def test_vecmonitor_records_episodes(mode):
    from stable_baselines3 import PPO

    venv = make_vec_env(ENV_ID, 2, SHORT, seed=3, mode=mode)
    venv.reset()
    returns, lengths = np.zeros(2), np.zeros(2, dtype=int)
    episodes = []
    rng = np.random.default_rng(1)
    while len(episodes) < 4:
        _, rewards, dones, infos = venv.step(random_valid(venv, rng))
        returns += rewards
        lengths += 1
        for i in np.flatnonzero(dones):
            ep = infos[i]["episode"]
            assert ep["l"] == lengths[i]
            assert ep["r"] == pytest.approx(returns[i], rel=1e-5)
            assert ep["t"] >= 0.0 and "serving" in infos[i]
            episodes.append(ep)
            returns[i], lengths[i] = 0.0, 0
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(256)
    assert len(model.ep_info_buffer) > 0  # what rollout/ep_rew_mean is computed from


OTHER_TWINNED = [
    ("batch_env.wrappers.BinaryAction", {"serve_full": False}),
    ("batch_env.wrappers.AverageRewardCentering", {"gain": 100.0}),
]


@pytest.mark.parametrize("specs", [TWINNED, OTHER_TWINNED], ids=["ppo.yml", "fixed-gain"])
@pytest.mark.parametrize("mode", MODES)
def test_vector_twins_match_the_scalar_wrappers(mode, specs):
    """The training wrappers' vector twins give what DummyVecEnv over the scalar wrappers
    gives: observations, (centred) rewards, dones, terminal observations, per-step info."""
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    n, kw = 3, {"horizon_requests": 60}
    ours = make_vec_env(
        ENV_ID, n, kw, seed=3, mode=mode, wrappers=specs, step_info_keys=STEP_INFO_KEYS
    )
    ref = sb3_make_vec_env(
        lambda: make_env(ENV_ID, kw, specs), n_envs=n, seed=3, vec_env_cls=DummyVecEnv
    )
    assert ours.observation_space == ref.observation_space and ours.action_space == ref.action_space
    assert_same(ours.reset(), ref.reset(), mode)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(600):
        actions = rng.integers(0, 2, n)
        o1, r1, d1, i1 = ours.step(actions)
        o2, r2, d2, i2 = ref.step(actions)
        assert_same(o1, o2, mode)
        assert_same(r1, r2, mode, rtol=1e-6)
        np.testing.assert_array_equal(d1, d2)
        for a, b in zip(i1, i2, strict=True):
            assert_same(a["centering_gain"], b["centering_gain"], mode)
            assert_same_summary(a["reward_components"], b["reward_components"], mode)
            if "terminal_observation" in b:
                ended += 1
                assert_same(a["terminal_observation"], b["terminal_observation"], mode)
                assert_same_summary(a["serving"], b["serving"], mode)
                assert a["episode"]["l"] == b["episode"]["l"]
                assert a["TimeLimit.truncated"] == b["TimeLimit.truncated"]
    assert ended >= 2 * n
    with pytest.raises(ValueError, match=r"actions\[1\]=2 is out of range"):
        ours.step(np.array([0, 2, 1]))


def test_wrappers_without_twin_wrap_each_sync_lane():
    clip = [
        ("batch_env.wrappers.QueueFeatures", {}),
        ("gymnasium.wrappers.ClipReward", {"min_reward": -0.05, "max_reward": 0.0}),
    ]
    venv = make_vec_env(ENV_ID, 2, SHORT, seed=0, mode="sync", wrappers=clip)
    assert venv.reset().shape == (2, 7)
    rewards = np.concatenate([venv.step(np.array([0, 1]))[1] for _ in range(20)])
    assert rewards.min() >= -0.05 and rewards.max() <= 0.0
    if has_native():
        with pytest.raises(ValueError, match=r"ClipReward'\] have no vector twin"):
            make_vec_env(ENV_ID, 2, SHORT, mode="vector_entry_point", wrappers=clip)
    with pytest.raises(ValueError, match="mode='nope' is invalid"):
        make_vec_env(ENV_ID, 2, SHORT, mode="nope")
    with pytest.raises(ValueError, match="num_envs=0 is invalid"):
        make_vec_env(ENV_ID, 0, SHORT)


# -- train --vectorized -----------------------------------------------------------------------


@pytest.mark.slow
def test_vectorized_training_on_sync_lanes_equals_dummyvecenv_training(tmp_path):
    """Same code path: on SyncVectorEnv lanes, the run is the DummyVecEnv run, bit for bit."""
    import torch
    from stable_baselines3 import PPO

    common = dict(
        algo="ppo",
        env_kwargs=TRAIN_ENV,
        n_timesteps=2048,
        centering_gain="online",
        eval_freq=0,
        checkpoint_freq=2048,
        progress=False,
    )
    plain = train(TrainArgs(run_dir=str(tmp_path / "plain"), **common))
    vec = train(
        TrainArgs(run_dir=str(tmp_path / "vec"), vectorized=True, vector_mode="sync", **common)
    )
    cfg = yaml.safe_load((vec / "config.yaml").read_text())
    assert (
        cfg["vectorized"] is True
        and cfg["vector_mode"] == "sync"
        and cfg["args"]["vectorized"] is True
    )
    assert yaml.safe_load((plain / "config.yaml").read_text())["vectorized"] is False
    p1, p2 = (
        PPO.load(plain / "model.zip").policy.state_dict(),
        PPO.load(vec / "model.zip").policy.state_dict(),
    )
    assert all(torch.equal(p1[k], p2[k]) for k in p1)
    t1, t2 = tensorboard_scalars(plain), tensorboard_scalars(vec)
    assert set(t1) == set(t2) and "rollout/ep_rew_mean" in t2 and "reward_components/energy" in t2
    for tag in (
        "rollout/ep_len_mean",
        "serving/latency_p99_ms",
        "reward_components/latency",
        "train/centering_gain",
    ):
        assert t1[tag] == t2[tag], tag


@pytest.mark.slow
def test_vectorized_run_resumes_with_its_lanes(tmp_path):
    from stable_baselines3 import PPO

    run = tmp_path / "vec"
    args = TrainArgs(
        algo="ppo",
        env_kwargs=TRAIN_ENV,
        n_timesteps=1024,
        run_dir=str(run),
        vectorized=True,
        num_envs=2,
        centering_gain="100",
        eval_freq=0,
        checkpoint_freq=1024,
        progress=False,
    )
    train(args)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert (
        cfg["n_envs"] == 2 and cfg["vectorized"] is True and cfg["vector_mode"] == preferred_mode()
    )
    train(TrainArgs(**{**args.__dict__, "n_timesteps": 2048, "resume": True}))
    assert PPO.load(run / "model.zip").num_timesteps == 2048
    with pytest.raises(ValueError, match="num_envs=0 is invalid"):
        train(TrainArgs(**{**args.__dict__, "run_dir": str(tmp_path / "x"), "num_envs": 0}))


@pytest.mark.slow
def test_ppo_through_the_adapter_beats_random_valid_actions(tmp_path):
    """PPO on the full action space Discrete(B + 1) (no binary wrapper, so the policy must be
    learned: the untrained network of this seed costs 1.5x what random costs), trained
    through the adapter at load 0.9, costs far less than uniformly random valid actions.

    Measured (seeds 0-4, 20k steps, 4 lanes): random / agent cost = 1.75-1.85; the greedy
    policy's ratio is 1.85.
    """
    hp = load_hyperparams("ppo", ENV_ID)
    hp["env_wrapper"] = [w for w in hp["env_wrapper"] if w != "batch_env.wrappers.BinaryAction"]
    hp_file = tmp_path / "ppo_full_actions.yml"
    hp_file.write_text(yaml.safe_dump({ENV_ID: hp}))
    env_kwargs = {
        **TRAIN_ENV,
        "workload": {"kind": "poisson", "load": 0.9},
        "horizon_requests": 2000,
    }
    run = train(
        TrainArgs(
            algo="ppo",
            env_kwargs=env_kwargs,
            hyperparams=str(hp_file),
            n_timesteps=20_000,
            run_dir=str(tmp_path / "ppo"),
            seed=0,
            vectorized=True,
            centering_gain="online",
            eval_freq=0,
            progress=False,
            threads=1,
        )
    )
    env = gym.make(ENV_ID, **env_kwargs)

    class RandomValid:
        name = "random"

        def reset(self):
            self.rng = np.random.default_rng(0)

        def act(self, obs, info):
            return int(self.rng.choice(np.flatnonzero(info["action_mask"])))

    agent = -evaluate(load_policy(run), env, n_episodes=3, seed=900).mean("reward_rate_per_s")
    random = -evaluate(RandomValid(), env, n_episodes=3, seed=900).mean("reward_rate_per_s")
    assert random > 1.6 * agent, (agent, random)  # costs (per second)
