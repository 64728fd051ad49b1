"""scripts/protocol_pairs.py: a run's whole protocol paired with the stored references."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from batch_env import tasks

ROOT = Path(__file__).resolve().parents[1]
TASK = "batch_env/LLMClockBursts-v0"


def _run(tmp_path, result, *refs):
    f = tmp_path / "run.json"
    f.write_text(json.dumps([result]))
    out = tmp_path / "pairs.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "protocol_pairs.py"), "--out", str(out)]
    proc = subprocess.run(
        [*cmd, "--references", ",".join(refs), str(f)], capture_output=True, text=True
    )
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_a_reference_against_itself_and_another(tmp_path):
    stored = tasks.references()[TASK]["policies"]
    rule = stored["clock-queue"]
    result = {"task": TASK, "policy": "x", "protocol": True, "seeds": rule["seeds"][:50]}
    result |= {"per_seed": rule["per_seed"][:50], "reward_rate_per_s": rule["reward_rate_per_s"]}
    proc, pairs = _run(tmp_path, result, "clock-queue", "clock-best")
    assert proc.returncode == 0, proc.stderr
    row = pairs["runs"]["run"]
    assert row["vs_clock-queue_pct"] == [0.0, 0.0]
    a, b = -np.asarray(rule["per_seed"][:50]), -np.asarray(stored["clock-best"]["per_seed"][:50])
    assert row["vs_clock-best_pct"][0] == np.float64(100 * (a - b).mean() / b.mean())
    assert row["vs_clock-best_pct"][0] < 0 < row["vs_clock-best_pct"][1]  # the rule is cheaper
    assert "| run | LLMClockBursts-v0 |" in proc.stdout


def test_a_shortened_run_is_refused(tmp_path):
    result = {"task": TASK, "policy": "x", "protocol": False, "horizon_requests": 50}
    result |= {"seeds": [1000], "per_seed": [-1.0], "reward_rate_per_s": -1.0}
    proc, pairs = _run(tmp_path, result, "greedy")
    assert proc.returncode == 2 and pairs is None
    assert "not the protocol" in proc.stderr and "Traceback" not in proc.stderr
