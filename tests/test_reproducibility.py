"""Reproducible training (issue 52, item 4): on one machine, two fresh processes train
bit-identical models from one seed; the thread count changes no initial weight and
training only in the last bits; every run records the machine, the library versions and
the commit it came from (batch_env.provenance)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from batch_env.provenance import provenance, provenance_line, source, versions

ROOT = Path(__file__).resolve().parents[1]


def _train(run: Path, env_id: str, threads: int, steps: int, extra: list[str]) -> None:
    """``batch-env train`` in a fresh Python process."""
    cmd = [
        sys.executable,
        "-c",
        "import sys; from experiments.cli import main; sys.exit(main())",
        "train",
        "--env-id",
        env_id,
        "--n-timesteps",
        str(steps),
        "--seed",
        "3",
        "--threads",
        str(threads),
        "--run-dir",
        str(run),
        "--eval-freq",
        "0",
        "--no-progress",
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _weights(run: Path) -> dict[str, bytes]:
    """The saved policy's tensors, as raw bytes, by name."""
    import io

    import torch

    with zipfile.ZipFile(run / "model.zip") as z:
        state = torch.load(io.BytesIO(z.read("policy.pth")), map_location="cpu")
    return {k: v.numpy().tobytes() for k, v in state.items()}


def _assert_same_weights(a: Path, b: Path) -> None:
    """The two runs' saved policies agree bit for bit (and have more than a few tensors)."""
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and len(wa) > 4
    assert all(wa[k] == wb[k] for k in wa), [k for k in wa if wa[k] != wb[k]]


LLM_SHORT = ["--env-kwargs", "{horizon_requests: 300, warmup_requests: 30}"]


def test_training_is_bit_identical_across_fresh_processes(tmp_path):
    """One seed, two fresh processes on this machine: the two models agree bit for bit,
    and their run folders record the same machine and commit (an LLM env's case, with
    its observation and reward normalization, is ``ppo_crn``'s test below: its entries
    are PPO's on ``LLMClockBursts-v0`` with the input replay added)."""
    a, b = tmp_path / "a", tmp_path / "b"
    _train(a, "batch_env/LowLoadEnergy-v0", 1, 1024, [])
    _train(b, "batch_env/LowLoadEnergy-v0", 1, 1024, [])
    _assert_same_weights(a, b)
    ca = yaml.safe_load((a / "config.yaml").read_text())
    cb = yaml.safe_load((b / "config.yaml").read_text())
    for c in (ca, cb):
        assert c["machine"]["cpu"] and c["machine"]["cpu_count"] >= 1
        assert c["machine"]["cpu_capability"]  # the run imported torch
        assert c["versions"]["torch"] and c["versions"]["stable-baselines3"]
        assert c["source"] == ca["source"] and c["machine"] == ca["machine"]


def test_the_thread_count_changes_no_initial_weight_and_training_only_in_rounding(tmp_path):
    """--threads 1 and 2 start from the same weights bit for bit (the orthogonal
    initialization runs on one thread whatever --threads says; checked after a clone of
    8 samples, as a run of 0 steps keeps its model only with a warm start); after an
    update they
    may differ in the last bits (PyTorch's softmax backward over 256 x 180 logits splits
    its rows by thread: docs/reproducibility.md), by far less than a learning step."""
    runs = {}
    for steps in (0, 1024):
        for t in (1, 2):
            runs[steps, t] = tmp_path / f"s{steps}-t{t}"
            # 0 steps: the initial weights after a clone of 8 samples (too few to split)
            clone = ["--warm-start", "{policy: greedy, steps: 8, epochs: 1}"] if not steps else []
            _train(runs[steps, t], "batch_env/LLMClockBursts-v0", t, steps, LLM_SHORT + clone)
    w1, w2 = _weights(runs[0, 1]), _weights(runs[0, 2])
    assert all(w1[k] == w2[k] for k in w1)
    import numpy as np

    t1, t2 = _weights(runs[1024, 1]), _weights(runs[1024, 2])
    moved = max(
        float(np.abs(np.frombuffer(t1[k], np.float32) - np.frombuffer(w1[k], np.float32)).max())
        for k in t1
    )
    apart = max(
        float(np.abs(np.frombuffer(t1[k], np.float32) - np.frombuffer(t2[k], np.float32)).max())
        for k in t1
    )
    assert moved > 1e-4 and apart < 1e-3 * moved


def test_provenance_names_the_machine_versions_and_commit():
    p = provenance()
    assert set(p) == {"machine", "versions", "source"}
    assert p["machine"]["cpu"] and p["machine"]["cpu_count"] >= 1
    assert p["versions"]["numpy"] and p["versions"]["gymnasium"]
    assert versions(("no-such-package-here",)) == {"no-such-package-here": None}
    if (ROOT / ".git").exists():
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        assert source()["commit"] == head
    line = provenance_line(p)
    assert p["machine"]["cpu"] in line and "batch-env" in line
    unknown = provenance_line({"machine": {"cpu": "X"}, "versions": {}, "source": {}})
    # outside a git checkout (an installed wheel): said once, not "commit unknown commit"
    assert "not from a git checkout" in unknown and "commit unknown commit" not in unknown


@pytest.mark.slow
def test_ppo_crn_training_is_bit_identical_across_fresh_processes(tmp_path):
    """Issue 65's from-scratch method too: its roots' shared uniforms come from the seed
    and the step count, its first actions from the seeded policy (a factored action
    here, so every head's draw is shared). Small rollouts, so that a run is seconds."""
    from agents import hyperparams

    env_id = "batch_env/LLMClockBursts-v0"
    entry = hyperparams.read("ppo_crn")[env_id]
    small = {"n_envs": 1, "n_steps": 16, "batch_size": 16, "branches": 4, "window_s": 1.0}
    hp = tmp_path / "hp.yml"
    hp.write_text(yaml.safe_dump({env_id: {**entry, **small}}))
    extra = [*LLM_SHORT, "--algo", "ppo_crn", "--hyperparams", str(hp)]
    a, b = tmp_path / "a", tmp_path / "b"
    _train(a, env_id, 1, 1024, extra)
    _train(b, env_id, 1, 1024, extra)
    _assert_same_weights(a, b)
