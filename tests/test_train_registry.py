"""Every registered id trains with ``batch-env train``'s shipped defaults under every
algorithm that fits its action space, and evaluates (MiniGrid's habit: the test is
parametrized over the registry, so an id registered tomorrow is covered the day it lands).

The runs are short (a few hundred steps, one training env, 10-request episodes, one
evaluation episode) but otherwise the defaults: the shipped hyperparameters, wrappers,
centring gain and final evaluation against greedy. An algorithm that does not fit an id
is refused in one line that says why and names the algorithms that fit. An algorithm
whose entries are derived from another's (``ppo_input`` from ``ppo``) trains on one id per
distinct recipe (wrapper chain) and is built on every id.
"""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

import batch_env
from agents import load_policy
from agents.common import ALGO_NAMES, algo_misfit, load_hyperparams, make_raw_env
from agents.hyperparams import DERIVED_ALGOS
from agents.train import TrainArgs, fitting_algos, train

IDS = sorted(i for i in gym.registry if i.startswith("batch_env/"))


def _one_per_recipe(algo: str) -> list[str]:
    """The ids on which a derived algorithm (``ppo_input``: PPO's entries with one more
    wrapper) trains here: the first id of each distinct wrapper chain its entries have.
    Its entries are its base's, changed alike, so the other ids add nothing but time;
    test_every_algo_fits_or_says_why still builds it on every id."""
    seen: dict[str, str] = {}
    for env_id in IDS:
        try:
            key = repr(load_hyperparams(algo, env_id).get("env_wrapper"))
        except ValueError:
            continue
        seen.setdefault(key, env_id)
    return sorted(seen.values())


TRAIN_CASES = [
    (env_id, algo)
    for algo in ALGO_NAMES
    for env_id in (_one_per_recipe(algo) if algo in DERIVED_ALGOS else IDS)
]
#: short episodes (a task lets a run change its episode length, nothing else)
SHORT = {"horizon_requests": 10, "warmup_requests": 0}


def test_the_registry_is_all_here():
    assert len(IDS) >= len(batch_env.ENV_IDS) + len(batch_env.tasks.TASKS)


@pytest.mark.parametrize("env_id", IDS)
def test_every_algo_fits_or_says_why(env_id):
    """Each algorithm either has a shipped entry that fits the id, or does not fit its
    action space at all (then refused): never left out for want of an entry."""
    from agents import hyperparams

    fits = fitting_algos(env_id, {})
    assert fits, f"no shipped hyperparameters fit {env_id}: add its entries to agents/hyperparams"
    for algo in fits:  # rl-zoo3 looks an id up by name: a task needs its own entry
        assert env_id in hyperparams.read(algo), f"agents/hyperparams/{algo}.yml lacks {env_id}"
    for algo in ALGO_NAMES:
        if algo not in fits:
            assert algo_misfit(algo, make_raw_env(env_id, {})) is not None, (
                f"{algo} fits {env_id}'s action space but agents/hyperparams/{algo}.yml has no "
                "entry for it"
            )


@pytest.mark.slow
@pytest.mark.parametrize(("env_id", "algo"), TRAIN_CASES)
def test_every_registered_id_trains_with_the_defaults(env_id, algo, tmp_path):
    args = TrainArgs(
        algo=algo,
        env_id=env_id,
        env_kwargs=dict(SHORT),
        n_timesteps=300,
        num_envs=1,
        eval_episodes=1,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    if algo not in fitting_algos(env_id, {}):
        with pytest.raises(ValueError, match=rf"algo='{algo}' does not fit .*the algos that fit"):
            train(args)
        assert not (tmp_path / "run").exists()
        return
    run = train(args)
    final = json.loads((run / "final_evaluation.json").read_text())
    assert math.isfinite(final["deterministic"]["reward_rate_per_s"][0])
    assert math.isfinite(final["reference"]["reward_rate_per_s"][0])  # greedy, same episodes
    if (
        batch_env.tasks.task_of(env_id, {}) is not None
        and env_id != "batch_env/LLMMemoryPressure-v0"
    ):
        assert math.isfinite(final["reference"]["normalized_score"])  # a task's score
    env = gym.make(env_id, **SHORT)
    res = batch_env.evaluate(load_policy(run), env, n_episodes=1, seed=7)
    assert math.isfinite(res.mean("reward_rate_per_s"))  # the episode ended (a policy may wait)
    env.close()
