"""RLlib trains on batch-env's registered ids (issue 65, item 4; docs/rllib.md): PPO with
two env runners on a local Ray instance runs two iterations on an LLM env, the runners
making the env from its registration (``"batch_env:<id>"``: Gymnasium imports batch_env in
each runner process), and every registered id is made that way in a fresh process."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'batch-env[ray]')")
pytest.importorskip("ray.rllib", reason="RLlib's needs are in the ray extra (dm-tree)")

import batch_env  # noqa: E402

pytestmark = pytest.mark.slow  # a real local Ray instance


def test_two_ppo_iterations_with_two_env_runners():
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            algo = (
                PPOConfig()
                .environment(
                    "batch_env:batch_env/LLMBatching-v1", env_config={"horizon_requests": 100}
                )
                .env_runners(num_env_runners=2, rollout_fragment_length=100)
                .training(train_batch_size_per_learner=400, minibatch_size=100, num_epochs=1)
                .debugging(seed=0)
                .build_algo()
            )
            steps = [
                algo.train()["env_runners"]["num_env_steps_sampled_lifetime"] for _ in range(2)
            ]
            algo.stop()
        finally:
            ray.shutdown()
    assert steps[0] >= 400 and steps[1] >= steps[0] + 400


def test_every_registered_id_is_made_from_its_registration_in_a_fresh_process():
    code = (
        "import sys, gymnasium as gym\n"
        "for i in sys.argv[1:]:\n"
        "    env = gym.make('batch_env:' + i)\n"
        "    env.reset(seed=0)\n"
        "    env.close()\n"
        "print('ok', len(sys.argv) - 1)\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, *batch_env.ENV_IDS],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == f"ok {len(batch_env.ENV_IDS)}"
