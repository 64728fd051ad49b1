"""The online sweep of docs/validation.md (scripts/validate_online.py): the simulated
figures it quotes for the shipped profile, and that prefix caching across the
benchmark's runs is what the replay models (the later runs' prompts are cached)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def vo():
    return load_script("validate_online")


def test_the_quoted_figures_of_the_shipped_profile(vo):
    rows = {r["rate"]: r for r in vo.compare(2)}
    # docs: 21.4 / 23.3 ms median TPOT at 1 and 16 requests/s, 185.7 ms TTFT all at once
    assert rows["01"]["median_tpot_ms"][1] == pytest.approx(21.4, rel=0.02)
    assert rows["16"]["median_tpot_ms"][1] == pytest.approx(23.3, rel=0.02)
    assert rows["inf"]["median_ttft_ms"][1] == pytest.approx(185.7, rel=0.02)
    assert rows["01"]["median_tpot_ms"][0] == pytest.approx(24.5413, rel=1e-4)  # published


def test_later_runs_find_their_prompts_cached(vo):
    runs = vo.runs_of()
    alone = vo.simulate(runs[1:2], 0)[0]  # 4 requests/s on a fresh server
    after = vo.simulate(runs[:2], 0)[1]  # after the 1 request/s run, as benchmarked
    assert after["median_ttft_ms"] < 0.9 * alone["median_ttft_ms"]
