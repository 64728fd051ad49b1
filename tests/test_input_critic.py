"""``ppo_input`` (agents.input_critic): the critic's input (batch_env.wrappers.InputPreview)
is what the episode's input will be, and only the critic sees it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import batch_env  # noqa: F401  (registers the ids)
from batch_env.wrappers import PREVIEW_COUNTS, InputPreview

pytest.importorskip("stable_baselines3")


def _manual(env: gym.Env, counts: tuple[int, ...]) -> np.ndarray:
    ahead = env.unwrapped.upcoming_input(counts[-1])
    dt = ahead["dt_s"]
    t = [np.log1p(min(dt[k - 1], 1e4)) if k <= len(dt) else np.log1p(1e4) for k in counts]
    out = list(t)
    for key in ("prompt_tokens", "output_tokens"):
        out += [np.log1p(float(np.sum(ahead[key][:k]))) for k in counts]
    return np.asarray(out, np.float32)


def test_the_preview_is_the_coming_input_and_changes_nothing_else():
    kw = {"horizon_requests": 60, "warmup_requests": 0}
    plain = gym.make("batch_env/LLMClockBursts-v0", **kw)
    env = InputPreview(gym.make("batch_env/LLMClockBursts-v0", **kw), counts=(1, 8, 64))
    assert env.input_dims == 9 and env.observation_space.shape == (
        plain.observation_space.shape[0] + 9,
    )
    obs, _ = env.reset(seed=4)
    ref, _ = plain.reset(seed=4)
    rng = np.random.default_rng(0)
    tail_seen = []
    for _ in range(10_000):
        np.testing.assert_allclose(obs[-9:], _manual(env, (1, 8, 64)), rtol=1e-6)
        assert np.array_equal(obs[:-9], ref)  # the env's own observation, untouched
        tail_seen.append(obs[-9:].copy())
        a = int(rng.integers(env.action_space.n))
        obs, r, term, trunc, _ = env.step(a)
        ref, r_ref, term_ref, trunc_ref, _ = plain.step(a)
        assert (r, term, trunc) == (r_ref, term_ref, trunc_ref)
        if term or trunc:
            break
    assert term or trunc
    assert len({t.tobytes() for t in tail_seen}) > 5


def test_the_preview_on_a_whole_model_env_is_the_arrival_times():
    env = InputPreview(gym.make("batch_env/DynamicBatching-v0"))
    obs, _ = env.reset(seed=1)
    assert env.input_dims == len(PREVIEW_COUNTS)
    dt = env.unwrapped.upcoming_input(PREVIEW_COUNTS[-1])["dt_s"]
    np.testing.assert_allclose(obs[-5:], np.log1p(dt[np.array(PREVIEW_COUNTS) - 1]), rtol=1e-6)
    # where the input ends before the k-th arrival, its time saturates at 10,000 s
    env.unwrapped.upcoming_input = lambda n: {"dt_s": np.array([0.5, 2.0])}
    np.testing.assert_allclose(env.preview(), np.log1p([0.5, 1e4, 1e4, 1e4, 1e4]), rtol=1e-6)
    # an acting policy replays the observation without the env's future: zeros there
    assert np.all(env.observe_reset(obs[:-5], {})[-5:] == 0.0)
    assert np.all(env.observe_step(obs[:-5], {})[-5:] == 0.0)


@pytest.mark.parametrize(
    "counts", [(), (0, 4), (4, 4), (8, 2), (1.5,), "many", (1, 200_000), (1, float("nan"))]
)
def test_bad_counts_are_refused_by_name(counts):
    with pytest.raises(ValueError, match=r"counts=.* is invalid: expected one or more increasing"):
        InputPreview(gym.make("batch_env/LLMBatching-v2"), counts=counts)


def test_the_preview_needs_a_serving_env():
    with pytest.raises(ValueError, match="expected a batch-env serving env"):
        InputPreview(gym.make("CartPole-v1"))


def test_only_the_critic_sees_the_preview(tmp_path):
    """The actor's distribution is the same whatever the preview holds; the value is not."""
    import torch as th
    from stable_baselines3.common.env_util import make_vec_env

    from agents.input_critic import InputPPO

    def make():
        return InputPreview(gym.make("batch_env/LLMClockBursts-v0", horizon_requests=50))

    venv = make_vec_env(make, n_envs=1, seed=0)
    model = InputPPO("MlpPolicy", venv, n_steps=64, batch_size=32, seed=0, device="cpu")
    assert model.policy.input_features == 15
    model.learn(128)  # weights that are not their initial ones
    obs = th.as_tensor(venv.reset())  # a batch of one (SB3 VecEnv: no info)
    other = obs.clone()
    other[0, -15:] = other[0, -15:] * 3.0 + 1.0
    with th.no_grad():  # one call each: a batch's rows may round differently
        dist = [model.policy.get_distribution(o).distribution.probs for o in (obs, other)]
        values = [model.policy.predict_values(o) for o in (obs, other)]
    assert th.equal(dist[0], dist[1])
    assert values[0] != values[1]
    # saved and loaded, it keeps the number of hidden features
    model.save(tmp_path / "model")
    loaded = InputPPO.load(tmp_path / "model", device="cpu")
    assert loaded.policy.input_features == 15


def test_ppo_input_without_the_preview_says_what_is_missing():
    from stable_baselines3.common.env_util import make_vec_env

    from agents.input_critic import InputPPO

    venv = make_vec_env(lambda: gym.make("batch_env/LLMBatching-v2"), n_envs=1)
    with pytest.raises(
        ValueError, match="ppo_input needs the env wrapped in batch_env.wrappers.InputPreview"
    ):
        InputPPO("MlpPolicy", venv)
