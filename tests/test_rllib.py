"""RLlib trains on batch-env's registered ids (issue 65, item 4; docs/rllib.md): the page's
example (PPO with two env runners on a local Ray instance, two iterations on an LLM env,
the runners making the env from its registration, ``"batch_env:<id>"``: Gymnasium imports
batch_env in each runner process), and every registered id made that way in a fresh
process."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'batch-env[ray]')")
pytest.importorskip("ray.rllib", reason="RLlib's needs are in the ray extra (dm-tree)")

import batch_env  # noqa: E402

pytestmark = pytest.mark.slow  # a real local Ray instance


def test_the_docs_example_runs_two_ppo_iterations_with_two_env_runners(capsys):
    """docs/rllib.md's example, run as written (tests/test_docs.py leaves it to this
    test, so that one Ray instance starts for it): PPO with two env runners making
    LLMBatching-v1 from its registration, two iterations of 1,024 env steps each."""
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs" / "rllib.md"
    (code,) = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)
    assert "num_env_runners=2" in code and 'environment("batch_env:batch_env/' in code
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, str(page), "exec"), {"__name__": "__docs__"})
    lines = [ln.split() for ln in capsys.readouterr().out.strip().splitlines()]
    steps = [float(ln[0]) for ln in lines[-2:]]
    assert steps[0] >= 1024 and steps[1] >= steps[0] + 1024


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
