"""``batch-env curves`` (experiments/curves.py) refuses, in one line, a folder that is not
a run with learning-curve points (the plot itself is checked on a real training run in
tests/test_tasks.py)."""

from __future__ import annotations

import json

import pytest

from experiments.curves import read_curve


def test_runs_without_curve_points_are_named(tmp_path):
    with pytest.raises(ValueError, match="no evaluations.json"):
        read_curve(tmp_path / "nothing")
    (tmp_path / "evaluations.json").write_text("[{")
    with pytest.raises(ValueError, match="not a readable evaluation history"):
        read_curve(tmp_path)
    (tmp_path / "evaluations.json").write_text(json.dumps([{"timesteps": 5}]))
    with pytest.raises(ValueError, match="no learning-curve points") as e:
        read_curve(tmp_path)
    assert "\n" not in str(e.value)
