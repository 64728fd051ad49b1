"""The simulator against ML.ENERGY's served vLLM runs (issue 64; ``scripts/validate_energy.py``,
``docs/validation.md``, "Served energy against ML.ENERGY"): what holds today.

* The KV cache limits the running batch where the published runs show it limited: at the
  largest ``max_num_seqs`` of each model the window's average batch is within 3% of the
  published one, with the one prompt-length mean the script assumes (300 tokens).
* Llama-3.1-8B on one H100: the modelled power is within 10% of the published average
  power at every batch size (8-768).
* The served engine's per-request cost fitted on Llama-3.1-70B's throughputs (0.0325 ms,
  the best of its grid, checked here against its neighbours) brings Llama-3.1-8B's 11
  published energies per token within 15% each, with a median error within 8% (issue 64's
  target): figures the fit never saw.

What does not hold yet is stated in the docs: Llama-3.1-70B's modelled power on four
H100s is 6-31% above the published.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _script() -> Any:
    return load_script("validate_energy")


V = _script()
#: the served per-request cost of docs/validation.md (``--per-seq-ms fit``)
FITTED_MS = 0.0325


def _run(model: str, seqs: int, per_seq_ms: float = 0.0) -> tuple[dict[str, Any], dict]:
    (row,) = [r for r in V.rows(model) if int(r["max_num_seqs"]) == seqs]
    ins, outs = V.lengths(row, 300.0, 1.0, 0)
    return row, V.simulate(row, ins, outs, per_seq_ms)


@pytest.mark.parametrize(("model", "seqs"), [("8B", 768), ("70B", 1024)])
def test_the_kv_cache_limits_the_batch_where_the_published_runs_show_it(model, seqs):
    row, sim = _run(model, seqs)
    assert int(row["max_num_seqs"]) - float(row["avg_batch_size"]) > 50  # memory-bound there
    assert sim["avg_batch"] == pytest.approx(float(row["avg_batch_size"]), rel=0.03)


def test_the_8b_h100_power_and_energy_match_the_served_runs():
    errors = []
    for row in V.rows("8B"):
        _, sim = _run("8B", int(row["max_num_seqs"]), FITTED_MS)
        assert sim["power_w"] == pytest.approx(float(row["avg_power_w"]), rel=0.10), row
        errors.append(abs(sim["j_per_token"] / float(row["energy_per_token_j"]) - 1))
    assert len(errors) == 11 and max(errors) <= 0.15 and statistics.median(errors) <= 0.08


def test_the_served_cost_is_the_best_fit_on_the_70b_throughputs():
    """The fit's objective (mean squared log error of the 70B rows' throughputs) is lower
    at the stated cost than at the grid's neighbours on either side."""
    data = [(r, *V.lengths(r, 300.0, 1.0, 0)) for r in V.rows("70B")]

    def loss(x: float) -> float:
        return statistics.fmean(
            math.log(V.simulate(r, i, o, x)["tokens_per_s"] / float(r["output_tokens_per_s"])) ** 2
            for r, i, o in data
        )

    assert FITTED_MS in V.FIT_GRID
    assert loss(FITTED_MS) < min(loss(FITTED_MS - 0.0025), loss(FITTED_MS + 0.0025))


def test_bad_arguments_are_one_line_errors(capsys):
    for bad in (["--input-mean", "0"], ["--per-seq-ms", "x"], ["--per-seq-ms", "-1"]):
        assert V.main(bad) == 2
        err = capsys.readouterr().err
        assert "--per-seq-ms: expected" in err and err.count("\n") == 1, err
