"""The simulator against ML.ENERGY's served vLLM runs (issue 64; ``scripts/validate_energy.py``,
``docs/validation.md``): what holds today.

* The KV cache limits the running batch where the published runs show it limited: at the
  largest ``max_num_seqs`` of each model the window's average batch is within 3% of the
  published one, with the one prompt-length mean the script assumes (300 tokens).
* Llama-3.1-8B on one H100: the modelled power is within 10% of the published average
  power at every batch size (8-768), and the energy per token within 15% at 8 and 16.

What does not hold yet is stated in ``docs/validation.md`` ("Served energy against
ML.ENERGY"): the served throughput of Llama-3.1-8B at 64 requests and more is below the simulator's (the energy per
token 19-35% below the published), and Llama-3.1-70B's power on four H100s is above the
published by 10-31%.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "validate_energy", ROOT / "scripts" / "validate_energy.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["validate_energy"] = mod
    spec.loader.exec_module(mod)
    return mod


V = _script()


def _run(model: str, seqs: int) -> tuple[dict[str, Any], dict[str, float]]:
    (row,) = [r for r in V.rows(model) if int(r["max_num_seqs"]) == seqs]
    ins, outs = V.lengths(row, 300.0, 1.0, 0)
    return row, V.simulate(row, ins, outs)


@pytest.mark.parametrize(("model", "seqs"), [("8B", 768), ("70B", 1024)])
def test_the_kv_cache_limits_the_batch_where_the_published_runs_show_it(model, seqs):
    row, sim = _run(model, seqs)
    assert int(row["max_num_seqs"]) - float(row["avg_batch_size"]) > 50  # memory-bound there
    assert sim["avg_batch"] == pytest.approx(float(row["avg_batch_size"]), rel=0.03)


@pytest.mark.parametrize("seqs", [8, 16, 64, 128, 768])
def test_the_8b_h100_power_is_within_10_percent_of_the_served_runs(seqs):
    row, sim = _run("8B", seqs)
    assert sim["power_w"] == pytest.approx(float(row["avg_power_w"]), rel=0.10)
    if seqs <= 16:
        assert sim["j_per_token"] == pytest.approx(float(row["energy_per_token_j"]), rel=0.15)


def test_bad_arguments_are_one_line_errors(capsys):
    assert V.main(["--input-mean", "0"]) == 2
    err = capsys.readouterr().err
    assert "--input-mean 0" in err and "\n" == err[-1] and err.count("\n") == 1
