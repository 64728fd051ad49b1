"""Tests for batch_env.workload: arrival processes, traces, specs and validation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from batch_env.workload import (
    DEFAULT_CHUNK_SIZE,
    MMPP,
    ArrivalChunk,
    Gamma,
    Poisson,
    Trace,
    Workload,
    make_workload,
)

EXCERPT = "azure-conv-2023-excerpt"  # shipped: the first 2,000 requests of the Azure 2023 conversation trace

N = 200_000  # arrivals for the statistical tests


def take(wl: Workload, n: int, seed: int = 0, chunk_size: int = DEFAULT_CHUNK_SIZE) -> ArrivalChunk:
    """Concatenate chunks of a fresh stream until ``n`` arrivals (fewer if it ends).

    :param wl: the workload.
    :param n: number of arrivals wanted.
    :param seed: seed of the stream's generator.
    :param chunk_size: chunk size passed to ``stream``.
    :return: the first ``n`` arrivals as one chunk.
    """
    s = wl.stream(np.random.default_rng(seed), chunk_size=chunk_size)
    chunks: list[ArrivalChunk] = []
    k = 0
    while k < n:
        c = s.next_chunk()
        if len(c) == 0:
            break
        chunks.append(c)
        k += len(c)

    def cat(name: str) -> np.ndarray | None:
        parts = [getattr(c, name) for c in chunks]
        return None if parts[0] is None else np.concatenate(parts)[:n]

    return ArrivalChunk(cat("times"), cat("prompt_tokens"), cat("output_tokens"))


def cv_of(times: np.ndarray) -> float:
    """Return the coefficient of variation of the gaps of ``times`` (from 0)."""
    g = np.diff(np.concatenate(([0.0], times)))
    return float(g.std() / g.mean())


# ----------------------------------------------------------------------------------
# Synthetic processes
# ----------------------------------------------------------------------------------


def test_poisson_rate_and_cv() -> None:
    wl = Poisson(300)
    t = take(wl, N, seed=1).times
    assert t.dtype == np.float64 and t[0] > 0
    assert np.all(np.diff(t) > 0)
    rate = N / t[-1]
    assert abs(rate - 300) < 4 * 300 / math.sqrt(N)
    assert abs(cv_of(t) - 1.0) < 0.02
    assert wl.mean_rate_per_s == 300.0 and wl.arrival_cv == 1.0


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_rate_and_cv(cv: float) -> None:
    wl = Gamma(300, cv)
    t = take(wl, N, seed=2).times
    assert t[0] > 0 and np.all(np.diff(t) > 0)
    assert abs(N / t[-1] - 300) < 4 * 300 * cv / math.sqrt(N)
    assert abs(cv_of(t) - cv) < 0.03 * cv
    assert wl.mean_rate_per_s == 300.0 and wl.arrival_cv == cv


def test_gamma_cv1_is_poisson_like() -> None:
    t = take(Gamma(50, 1.0), 50_000, seed=3).times
    assert abs(cv_of(t) - 1.0) < 0.03


def test_high_cv_times_strictly_increase_across_chunks() -> None:
    # gamma shape 0.01: most gaps are below float resolution, ties must be broken
    t = take(Gamma(1000, 10.0), 20_000, seed=4, chunk_size=1000).times
    assert t[0] > 0
    assert np.all(np.diff(t) > 0)


def mmpp2_idc(l0: float, l1: float, r0: float, r1: float) -> float:
    """Asymptotic index of dispersion of counts of a 2-state MMPP (r_i: leaving rate of i)."""
    return 1 + 2 * r0 * r1 * (l0 - l1) ** 2 / ((r0 + r1) ** 2 * (l0 * r1 + l1 * r0))


@pytest.mark.parametrize("chunk_size", [64, DEFAULT_CHUNK_SIZE])
def test_mmpp_two_state_rate_and_cv(chunk_size: int) -> None:
    wl = MMPP((100, 500), (10.0, 20.0))
    np.testing.assert_allclose(wl.stationary_distribution, [2 / 3, 1 / 3])
    mean = 100 * 2 / 3 + 500 / 3
    assert wl.mean_rate_per_s == pytest.approx(mean)
    assert wl.arrival_cv > 1.2
    t = take(wl, N, seed=5, chunk_size=chunk_size).times
    assert t[0] > 0 and np.all(np.diff(t) > 0)
    se = mean * math.sqrt(mmpp2_idc(100, 500, 10, 20) / N)
    assert abs(N / t[-1] - mean) < 4 * se
    assert cv_of(t) == pytest.approx(wl.arrival_cv, rel=0.04)
    assert cv_of(t) > 1.2


def test_mmpp_matrix_form_stationary_and_bursty() -> None:
    q = ((0, 1, 0.5), (2, 0, 1), (0, 3, 0))
    wl = MMPP((0, 50, 400), q)
    pi = wl.stationary_distribution
    assert pi.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(pi @ wl.generator, 0, atol=1e-12)
    assert wl.mean_rate_per_s == pytest.approx(float(pi @ [0, 50, 400]))
    # a generator-style diagonal is accepted and means the same
    gen = ((-1.5, 1, 0.5), (2, -3, 1), (0, 3, -3))
    np.testing.assert_allclose(MMPP((0, 50, 400), gen).generator, wl.generator)
    rates = [N / take(wl, N, seed=s).times[-1] for s in range(3)]
    assert np.mean(rates) == pytest.approx(wl.mean_rate_per_s, rel=0.08)
    t = take(wl, N, seed=6).times
    assert cv_of(t) > 3
    assert cv_of(t) == pytest.approx(wl.arrival_cv, rel=0.1)


def test_mmpp_theoretical_cv_special_cases() -> None:
    # equal rates: Poisson
    assert MMPP((200, 200), (3.0, 5.0)).arrival_cv == pytest.approx(1.0)
    # interrupted Poisson process: hyperexponential, SCV = 1 + 2 lam w / (w + g)^2
    lam, w, g = 300.0, 5.0, 10.0
    assert MMPP((lam, 0), (w, g)).arrival_cv == pytest.approx(
        math.sqrt(1 + 2 * lam * w / (w + g) ** 2)
    )


def test_mmpp_initial_state_and_slow_switching_windows() -> None:
    # long sojourns at a high rate are split into windows across many small chunks
    wl = MMPP((5000, 10), (0.5, 0.5), initial_state=0)
    s = wl.stream(np.random.default_rng(7), chunk_size=32)
    first = s.next_chunk().times
    assert 10 <= len(first) <= 100
    assert first[-1] < 0.1  # started in the busy state
    t = take(wl, 20_000, seed=7, chunk_size=32).times
    assert np.all(np.diff(t) > 0)


def test_same_seed_same_stream_different_seed_differs(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP\n0\n1\n1.5\n4\n")
    wls: list[Workload] = [
        Poisson(100),
        Gamma(100, 2.0),
        MMPP((10, 200), (1.0, 2.0)),
        MMPP((10, 200, 50), ((0, 1, 1), (1, 0, 1), (1, 1, 0))),
        Trace(str(path), random_offset=True),
    ]
    for wl in wls:
        a = take(wl, 10_000, seed=11).times
        b = take(wl, 10_000, seed=11).times
        c = take(wl, 10_000, seed=12).times
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c), wl


# ----------------------------------------------------------------------------------
# Traces
# ----------------------------------------------------------------------------------

AZURE_STYLE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:50.9951690,879,12
2023-11-16 18:15:51.1000000,10,1
2023-11-16 18:16:00.0000000,5,5
"""
AZ_REL = np.array([0.0, 4.314579, 4.314579, 4.41941, 13.31941])
AZ_PERIOD = 13.31941 * 5 / 4


@pytest.fixture
def azure_style(tmp_path: Path) -> Path:
    p = tmp_path / "azure_style.csv"
    p.write_text(AZURE_STYLE)
    return p


def test_trace_replays_relative_times_and_tokens(azure_style: Path) -> None:
    wl = Trace(str(azure_style))
    assert wl.n_records == 5
    assert wl.period_s == pytest.approx(AZ_PERIOD)
    assert wl.mean_rate_per_s == pytest.approx(5 / AZ_PERIOD)
    c = wl.stream(np.random.default_rng(0)).next_chunk()
    np.testing.assert_allclose(c.times[:5], AZ_REL, rtol=0, atol=1e-9)
    assert c.times[0] == 0.0
    assert c.times[1] == c.times[2]  # equal timestamps stay equal, in file order
    assert c.prompt_tokens is not None and c.output_tokens is not None
    assert c.prompt_tokens.dtype == np.int64
    assert list(c.prompt_tokens[:5]) == [374, 396, 879, 10, 5]
    assert list(c.output_tokens[:5]) == [44, 109, 12, 1, 5]
    gaps = np.append(np.diff(AZ_REL), AZ_PERIOD / 5)
    assert wl.arrival_cv == pytest.approx(gaps.std() / gaps.mean())
    assert wl.total_arrivals is None


def test_trace_loops_with_period(azure_style: Path) -> None:
    wl = Trace(str(azure_style))
    c = take(wl, 17, chunk_size=3)
    assert len(c) == 17
    for k in (1, 2):
        np.testing.assert_allclose(c.times[5 * k : 5 * k + 5], AZ_REL + k * AZ_PERIOD, atol=1e-9)
    assert np.all(np.diff(c.times)[[3, 4, 8, 9]] > 0)  # seams are strict
    assert c.prompt_tokens is not None
    assert list(c.prompt_tokens[5:10]) == [374, 396, 879, 10, 5]


def test_trace_rate_scale_and_target_rate(azure_style: Path) -> None:
    fast = Trace(str(azure_style), rate_scale=2.0)
    c = fast.stream(np.random.default_rng(0)).next_chunk()
    np.testing.assert_allclose(c.times[:5], AZ_REL / 2, atol=1e-9)
    assert fast.period_s == pytest.approx(AZ_PERIOD / 2)
    assert fast.mean_rate_per_s == pytest.approx(2 * 5 / AZ_PERIOD)
    target = Trace(str(azure_style), target_rate_per_s=10.0)
    assert target.mean_rate_per_s == pytest.approx(10.0)
    t = take(target, 5 * 40 + 1).times
    assert 5 * 40 / t[-1] == pytest.approx(10.0)  # 40 whole periods
    np.testing.assert_allclose(t[:5], AZ_REL * (5 / AZ_PERIOD) / 10, atol=1e-9)


def test_trace_seconds_and_custom_columns(tmp_path: Path) -> None:
    p = tmp_path / "secs.csv"
    p.write_text("# a comment line\nt,prompt,other\n100.5,7,x\n101,8,y\n101,9,z\n103.25,10,w\n")
    wl = Trace(
        str(p), timestamp_column="t", prompt_tokens_column="prompt", output_tokens_column=None
    )
    c = wl.stream(np.random.default_rng(0)).next_chunk()
    np.testing.assert_allclose(c.times[:4], [0, 0.5, 0.5, 2.75])
    assert c.prompt_tokens is not None and list(c.prompt_tokens[:4]) == [7, 8, 9, 10]
    assert c.output_tokens is None
    # default token columns absent from the file: no tokens
    c2 = Trace(str(p), timestamp_column="t").stream(np.random.default_rng(0)).next_chunk()
    assert c2.prompt_tokens is None and c2.output_tokens is None


def test_trace_iso_t_nanoseconds_and_zones(tmp_path: Path) -> None:
    p = tmp_path / "iso.csv"
    p.write_text(
        "TIMESTAMP\n2024-01-01T00:00:00.000000000Z\n2024-01-01T01:00:00.500000001+01:00\n"
        "2024-01-01T00:00:02.000000002\n"
    )
    c = Trace(str(p)).stream(np.random.default_rng(0)).next_chunk()
    assert c.times[1] == pytest.approx(0.500000001, abs=1e-12)
    assert c.times[2] == pytest.approx(2.000000002, abs=1e-12)


def test_trace_random_offset(azure_style: Path) -> None:
    wl = Trace(str(azure_style), random_offset=True)
    base = {374: 0, 396: 1, 879: 2, 10: 3, 5: 4}
    offsets = []
    for seed in range(300):
        c = take(wl, 12, seed=seed)
        assert c.prompt_tokens is not None
        r = base[int(c.prompt_tokens[0])]
        idx = (r + np.arange(12)) % 5
        assert [base[int(v)] for v in c.prompt_tokens] == list(idx)
        u = AZ_REL[r] - c.times[0]  # the offset
        assert 0 <= c.times[0] < AZ_PERIOD
        laps = (r + np.arange(12)) // 5
        np.testing.assert_allclose(c.times, AZ_REL[idx] + laps * AZ_PERIOD - u, atol=1e-9)
        if r > 0:
            assert AZ_REL[r - 1] < u <= AZ_REL[r] + 1e-9
        elif c.times[0] > 0:  # wrapped: offset after the last record
            u += AZ_PERIOD
            assert AZ_REL[-1] < u < AZ_PERIOD
        offsets.append(u)
    frac = np.array(offsets) / AZ_PERIOD
    assert abs(frac.mean() - 0.5) < 0.07  # uniform on [0, period)
    assert frac.min() >= 0 and frac.max() < 1


def test_trace_no_loop_ends(azure_style: Path) -> None:
    wl = Trace(str(azure_style), loop=False)
    assert wl.total_arrivals == 5
    s = wl.stream(np.random.default_rng(0), chunk_size=3)
    assert len(s.next_chunk()) == 3 and not s.exhausted
    assert len(s.next_chunk()) == 2 and s.exhausted
    end = s.next_chunk()
    assert len(end) == 0 and end.prompt_tokens is not None and len(end.prompt_tokens) == 0
    assert len(s.next_chunk()) == 0
    # with a random offset: every record exactly once, wrapping once
    for seed in range(20):
        c = take(Trace(str(azure_style), loop=False, random_offset=True), 100, seed=seed)
        assert len(c) == 5 and c.prompt_tokens is not None
        assert sorted(c.prompt_tokens) == [5, 10, 374, 396, 879]
        assert np.all(np.diff(c.times) >= 0) and c.times[0] >= 0


def test_real_azure_trace_excerpt() -> None:
    """The shipped excerpt of the Azure 2023 conversation trace, by dataset name."""
    from batch_env.workload import datasets as data

    wl = Trace(dataset=EXCERPT)
    assert wl.path == str(data.path(EXCERPT)) and wl.dataset == EXCERPT
    assert wl.n_records == 2_000
    assert wl.mean_rate_per_s == pytest.approx(4.71, abs=0.01)
    assert wl.arrival_cv == pytest.approx(1.14, abs=0.01)
    c = wl.stream(np.random.default_rng(0)).next_chunk()
    assert c.times[0] == 0.0 and c.times[1] == pytest.approx(4.314579)
    assert c.prompt_tokens is not None and c.output_tokens is not None
    assert (c.prompt_tokens[0], c.output_tokens[0]) == (374, 44)
    t = take(wl, 2 * 2_000 + 1).times
    assert np.all(np.diff(t) >= 0)
    assert t[2_000] == pytest.approx(wl.period_s)
    assert Trace(dataset=EXCERPT, target_rate_per_s=50).mean_rate_per_s == pytest.approx(50)
    # the same file by path: the same arrivals
    by_path = Trace(str(data.path(EXCERPT)))
    assert np.array_equal(take(by_path, 500).times, take(wl, 500).times)


def test_trace_dataset_spec_round_trip_and_load() -> None:
    wl = make_workload(
        {"kind": "trace", "dataset": EXCERPT, "load": 0.5, "random_offset": True},
        max_throughput_rps=100.0,
    )
    assert isinstance(wl, Trace) and wl.mean_rate_per_s == pytest.approx(50)
    d = wl.to_dict()
    assert d["dataset"] == EXCERPT and d["path"] is None  # portable: no machine-specific path
    assert make_workload(d) == wl
    assert wl.with_mean_rate(7.0).dataset == EXCERPT
    code = Trace(dataset="azure-code-2023-excerpt")
    assert code.n_records == 2_000 and code.arrival_cv > 5  # the bursty coding trace


def test_trace_dataset_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCH_ENV_DATA_DIR", str(tmp_path))  # an empty cache: nothing fetched
    with pytest.raises(ValueError, match="not downloaded.*batch-env data fetch azure-conv-2023"):
        Trace(dataset="azure-conv-2023")
    with pytest.raises(ValueError, match="not downloaded.*batch-env data fetch azure-code-2024"):
        make_workload(
            {"kind": "trace", "dataset": "azure-code-2024", "load": 0.5}, max_throughput_rps=10
        )
    with pytest.raises(ValueError, match="'nope' is unknown; known datasets: azure-conv-2023"):
        Trace(dataset="nope")
    with pytest.raises(ValueError, match="either path='x.csv' or dataset"):
        Trace("x.csv", dataset=EXCERPT)
    with pytest.raises(ValueError, match="give a CSV file"):
        make_workload({"kind": "trace"})
    with pytest.raises(ValueError, match="dataset=3 is invalid"):
        Trace(dataset=3)  # type: ignore[arg-type]


def test_empirical_lengths_from_a_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from batch_env.workload import datasets as data
    from batch_env.workload import make_lengths

    lengths = make_lengths({"kind": "empirical", "dataset": EXCERPT})
    assert lengths.path == str(data.path(EXCERPT))
    p, o = lengths.sample(np.random.default_rng(0), 1000)
    assert p.min() >= 1 and o.min() >= 1 and 500 < p.mean() < 2000
    assert make_lengths(lengths.to_dict()) == lengths and lengths.to_dict()["path"] is None
    with pytest.raises(ValueError, match="only allowed with kind 'empirical'"):
        make_lengths({"kind": "lognormal", "dataset": EXCERPT})
    monkeypatch.setenv("BATCH_ENV_DATA_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="batch-env data fetch azure-conv-2023"):
        make_lengths({"kind": "empirical", "dataset": "azure-conv-2023"})


# ----------------------------------------------------------------------------------
# Specs, rescaling, load
# ----------------------------------------------------------------------------------


def test_make_workload_kinds_and_round_trip(azure_style: Path) -> None:
    specs: list[dict[str, Any]] = [
        {"kind": "poisson", "rate_per_s": 300},
        {"kind": "mmpp", "rates_per_s": [100, 500], "switch_rates_per_s": [1.0, 2.0]},
        {"kind": "mmpp", "rates_per_s": [1, 5], "switch_rates_per_s": [[0, 1], [2, 0]]},
        {"kind": "gamma", "rate_per_s": 300, "cv": 2.0},
        {"kind": "trace", "path": str(azure_style), "target_rate_per_s": 50},
    ]
    types = [Poisson, MMPP, MMPP, Gamma, Trace]
    for spec, typ in zip(specs, types, strict=True):
        wl = make_workload(spec)
        assert isinstance(wl, typ)
        assert make_workload(wl) is wl
        d = wl.to_dict()
        assert d["kind"] == spec["kind"]
        assert make_workload(d) == wl
    assert make_workload(specs[0]) == Poisson(300.0)
    assert make_workload(specs[4]).mean_rate_per_s == pytest.approx(50)


def test_with_mean_rate(azure_style: Path) -> None:
    assert Poisson(10).with_mean_rate(50) == Poisson(50)
    g = Gamma(10, 3.0).with_mean_rate(40)
    assert g == Gamma(40, 3.0)
    m = MMPP((100, 500), (1.0, 2.0)).with_mean_rate(700)
    assert m.mean_rate_per_s == pytest.approx(700)
    assert m.rates_per_s[1] / m.rates_per_s[0] == pytest.approx(5)
    assert m.switch_rates_per_s == (1.0, 2.0)
    tr = Trace(str(azure_style), rate_scale=3.0).with_mean_rate(2.5)
    assert isinstance(tr, Trace)
    assert tr.rate_scale == 1.0 and tr.target_rate_per_s == 2.5
    assert tr.mean_rate_per_s == pytest.approx(2.5)


def test_load(azure_style: Path) -> None:
    assert make_workload({"kind": "poisson", "load": 0.5}, max_throughput_rps=200) == Poisson(100)
    g = make_workload({"kind": "gamma", "cv": 2.0, "load": 0.8}, max_throughput_rps=1000)
    assert g == Gamma(800, 2.0)
    m = make_workload(
        {"kind": "mmpp", "rates_per_s": [1, 5], "switch_rates_per_s": [1, 1], "load": 0.6},
        max_throughput_rps=500,
    )
    assert isinstance(m, MMPP) and m.mean_rate_per_s == pytest.approx(300)
    assert m.rates_per_s[1] == pytest.approx(5 * m.rates_per_s[0])
    tr = make_workload({"kind": "trace", "path": str(azure_style), "load": 0.1}, 100)
    assert isinstance(tr, Trace) and tr.mean_rate_per_s == pytest.approx(10)


# ----------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------

BAD_SPECS: list[tuple[Any, dict[str, Any], list[str]]] = [
    # (spec, make_workload kwargs, substrings of the message)
    ({"kind": "poisson", "rate_per_s": 0}, {}, ["rate_per_s", "0"]),
    ({"kind": "poisson", "rate_per_s": -5}, {}, ["rate_per_s", "-5"]),
    ({"kind": "poisson", "rate_per_s": float("nan")}, {}, ["rate_per_s", "nan"]),
    ({"kind": "poisson", "rate_per_s": float("inf")}, {}, ["rate_per_s", "inf"]),
    ({"kind": "poisson", "rate_per_s": "300"}, {}, ["rate_per_s", "'300'", "number"]),
    ({"kind": "poisson", "rate_per_s": True}, {}, ["rate_per_s", "True"]),
    ({"kind": "poisson"}, {}, ["rate_per_s", "missing"]),
    ({"kind": "poisson", "rate": 3}, {}, ["'rate'", "3", "rate_per_s"]),
    ({"kind": "weibull", "rate_per_s": 3}, {}, ["weibull", "poisson", "mmpp", "gamma", "trace"]),
    ({"rate_per_s": 3}, {}, ["kind", "poisson"]),
    ("poisson", {}, ["spec", "'poisson'"]),
    ({"kind": 3}, {}, ["kind", "3"]),
    ({"kind": "gamma", "rate_per_s": 3}, {}, ["cv", "missing"]),
    ({"kind": "gamma", "rate_per_s": 3, "cv": 0}, {}, ["cv", "0"]),
    ({"kind": "gamma", "rate_per_s": 3, "cv": float("nan")}, {}, ["cv", "nan"]),
    ({"kind": "poisson", "load": 0.5}, {}, ["load", "0.5", "max_throughput_rps"]),
    ({"kind": "poisson", "load": -0.5}, {"max_throughput_rps": 10}, ["load", "-0.5"]),
    ({"kind": "poisson", "load": 0.5}, {"max_throughput_rps": 0}, ["max_throughput_rps", "0"]),
    (
        {"kind": "poisson", "load": 0.5, "rate_per_s": 3},
        {"max_throughput_rps": 10},
        ["load", "0.5", "rate_per_s", "3"],
    ),
    ({"kind": "mmpp", "rates_per_s": [100], "switch_rates_per_s": [1]}, {}, ["rates_per_s", "100"]),
    ({"kind": "mmpp", "rates_per_s": 100, "switch_rates_per_s": [1]}, {}, ["rates_per_s", "100"]),
    (
        {"kind": "mmpp", "rates_per_s": [100, -1], "switch_rates_per_s": [1, 1]},
        {},
        ["rates_per_s[1]", "-1"],
    ),
    (
        {"kind": "mmpp", "rates_per_s": [0, 0], "switch_rates_per_s": [1, 1]},
        {},
        ["rates_per_s", "0"],
    ),
    (
        {"kind": "mmpp", "rates_per_s": [1, 2], "switch_rates_per_s": [1, 0]},
        {},
        ["switch_rates_per_s[1]", "0"],
    ),
    (
        {"kind": "mmpp", "rates_per_s": [1, 2], "switch_rates_per_s": [1]},
        {},
        ["switch_rates_per_s", "[1]"],
    ),
    (
        {
            "kind": "mmpp",
            "rates_per_s": [1, 2, 3],
            "switch_rates_per_s": [[0, 1, 0], [1, 0, 0], [0, 1, 0]],
        },
        {},
        ["switch_rates_per_s", "reducible"],
    ),
    (
        {"kind": "mmpp", "rates_per_s": [1, 2], "switch_rates_per_s": [[5, 1], [1, 0]]},
        {},
        ["switch_rates_per_s[0][0]", "5"],
    ),
    (
        {"kind": "mmpp", "rates_per_s": [1, 2], "switch_rates_per_s": [[0, -1], [1, 0]]},
        {},
        ["switch_rates_per_s[0][1]", "-1"],
    ),
    (
        {"kind": "mmpp", "rates_per_s": [1, 2], "switch_rates_per_s": [1, 1], "initial_state": 2},
        {},
        ["initial_state", "2"],
    ),
    (
        {"kind": "mmpp", "switch_rates_per_s": [1, 1], "load": 0.5},
        {"max_throughput_rps": 9},
        ["rates_per_s", "missing"],
    ),
]


@pytest.mark.parametrize(("spec", "kwargs", "parts"), BAD_SPECS)
def test_bad_specs(spec: Any, kwargs: dict[str, Any], parts: list[str]) -> None:
    with pytest.raises(ValueError) as ei:
        make_workload(spec, **kwargs)
    for part in parts:
        assert part in str(ei.value)


def test_bad_direct_arguments() -> None:
    for call, parts in [
        (lambda: Poisson(0), ["rate_per_s", "0"]),
        (lambda: Gamma(1, -2), ["cv", "-2"]),
        (lambda: MMPP((1, 2), (1, 1), initial_state=-1), ["initial_state", "-1"]),
        (lambda: Poisson(5).with_mean_rate(0), ["rate_per_s", "0"]),
        (lambda: MMPP((1, 2), (1, 1)).with_mean_rate(float("nan")), ["rate_per_s", "nan"]),
        (lambda: Poisson(5).stream(np.random.default_rng(0), chunk_size=0), ["chunk_size", "0"]),
        (lambda: Poisson(5).stream(42), ["rng", "42"]),  # type: ignore[arg-type]
    ]:
        with pytest.raises(ValueError) as ei:
            call()
        for part in parts:
            assert part in str(ei.value)


BAD_TRACES: list[tuple[str | None, dict[str, Any], list[str]]] = [
    # (file content or None for a missing file, Trace kwargs, substrings of the message)
    (None, {}, ["path", "bad.csv", "not found"]),
    ("", {}, ["bad.csv", "empty"]),
    ("# only a comment\n", {}, ["bad.csv", "empty"]),
    ("TIMESTAMP,ContextTokens\n", {}, ["bad.csv", "no data rows"]),
    ("time,x\n1,2\n3,4\n", {}, ["bad.csv", "TIMESTAMP", "'time'", "'x'"]),
    (
        "TIMESTAMP\n2023-11-16 18:15:46.68\nyesterday\n",
        {},
        ["bad.csv", "TIMESTAMP", "row 2", "'yesterday'"],
    ),
    ("TIMESTAMP\n2023-11-16 18:15:46.68\nNaT\n", {}, ["TIMESTAMP", "row 2", "'NaT'"]),
    ("TIMESTAMP\n1.0\n2.0\nabc\n", {}, ["bad.csv", "TIMESTAMP", "row 3", "'abc'"]),
    ("TIMESTAMP\n1.0\nnan\n", {}, ["TIMESTAMP", "row 2", "'nan'"]),
    ("TIMESTAMP\n1\n3\n2\n", {}, ["bad.csv", "TIMESTAMP", "row 3", "'2'", "non-decreasing"]),
    (
        "TIMESTAMP\n2023-11-16 18:15:46.6805900\n2023-11-16 18:15:45.0000000\n",
        {},
        ["TIMESTAMP", "row 2", "'2023-11-16 18:15:45.0000000'"],
    ),
    ("TIMESTAMP\n5\n", {}, ["bad.csv", "TIMESTAMP", "two distinct"]),
    ("TIMESTAMP\n5\n5\n", {}, ["TIMESTAMP", "two distinct"]),
    ("TIMESTAMP,ContextTokens\n0,5\n1,-3\n", {}, ["bad.csv", "ContextTokens", "row 2", "'-3'"]),
    ("TIMESTAMP,GeneratedTokens\n0,5\n1,nan\n", {}, ["GeneratedTokens", "row 2", "'nan'"]),
    ("TIMESTAMP,ContextTokens\n0,5\n1,\n", {}, ["ContextTokens", "row 2", "''"]),
    ("TIMESTAMP,ContextTokens\n0,5\n1,2.5\n", {}, ["ContextTokens", "row 2", "'2.5'"]),
    ("TIMESTAMP\n0\n1\n", {"rate_scale": 0}, ["rate_scale", "0"]),
    ("TIMESTAMP\n0\n1\n", {"rate_scale": -2.0}, ["rate_scale", "-2.0"]),
    ("TIMESTAMP\n0\n1\n", {"target_rate_per_s": 0}, ["target_rate_per_s", "0"]),
    ("TIMESTAMP\n0\n1\n", {"target_rate_per_s": float("nan")}, ["target_rate_per_s", "nan"]),
    (
        "TIMESTAMP\n0\n1\n",
        {"rate_scale": 2.0, "target_rate_per_s": 5.0},
        ["rate_scale", "2.0", "target_rate_per_s", "5.0"],
    ),
    ("TIMESTAMP\n0\n1\n", {"loop": "yes"}, ["loop", "'yes'"]),
]


@pytest.mark.parametrize(("content", "kwargs", "parts"), BAD_TRACES)
def test_bad_traces(
    tmp_path: Path, content: str | None, kwargs: dict[str, Any], parts: list[str]
) -> None:
    p = tmp_path / "bad.csv"
    if content is not None:
        p.write_text(content)
    with pytest.raises(ValueError) as ei:
        Trace(str(p), **kwargs)
    for part in parts:
        assert part in str(ei.value), str(ei.value)
    # the same through a spec
    with pytest.raises(ValueError):
        make_workload({"kind": "trace", "path": str(p), **kwargs})


def test_poisson_pieces_concatenate_to_the_chunks_bit_for_bit() -> None:
    """``next_piece`` (the vector env draws only what a reset needs) hands out exact
    pieces of the chunks ``next_chunk`` returns from the same generator."""
    from batch_env.workload import Poisson

    wl = Poisson(rate_per_s=123.0)
    whole = wl.stream(np.random.default_rng(5), chunk_size=1000)
    split = wl.stream(np.random.default_rng(5), chunk_size=1000)
    sizes = np.random.default_rng(6)
    expected = np.concatenate([whole.next_chunk().times for _ in range(5)])
    got = []
    while sum(len(g) for g in got) < expected.size:
        got.append(split.next_piece(int(sizes.integers(1, 700))).times)
    got = np.concatenate(got)[: expected.size]
    assert np.array_equal(got, expected)
    assert np.all(np.diff(got) > 0)


def test_poisson_pieces_strictly_increase_where_gaps_round_away() -> None:
    """A huge rate: the gaps round away once the times grow, and the exact fix-up of
    ``_strictly_increasing`` still makes the piece strictly increasing."""
    from batch_env.workload import Poisson

    stream = Poisson(rate_per_s=1e17).stream(np.random.default_rng(3), chunk_size=64)
    stream._t = stream._base = 1e3  # noqa: SLF001 (start late, where the gaps round away)
    times = stream.next_piece(64).times
    assert np.all(np.diff(times) > 0)


# ------------------------------------------------------------------ a load drawn per episode


def test_load_range_draws_a_load_per_stream_and_round_trips() -> None:
    from batch_env.workload import RandomLoad, make_workload

    wl = make_workload({"kind": "poisson", "load_range": [0.2, 0.8]}, max_throughput_rps=1000.0)
    assert isinstance(wl, RandomLoad) and wl.base.mean_rate_per_s == pytest.approx(1000.0)
    assert wl.mean_rate_per_s == pytest.approx(500.0) and wl.has_oracle
    assert make_workload(wl.to_dict()) == wl
    factors = []
    for seed in range(40):
        st = wl.stream(np.random.default_rng(seed))
        times = np.concatenate([st.next_chunk().times for _ in range(20)])
        f = st.oracle(0.0)["load"]
        assert 0.2 <= f <= 0.8 and st.oracle(1.0)["rate_per_s"] == pytest.approx(1000.0 * f)
        # the episode runs at the drawn rate (about 40,000 arrivals: within 2%)
        assert times.size / times[-1] == pytest.approx(1000.0 * f, rel=0.02)
        factors.append(f)
    assert min(factors) < 0.35 and max(factors) > 0.65  # the range is used
    mm = make_workload(
        {
            "kind": "mmpp",
            "rates_per_s": [1.0, 3.0],
            "switch_rates_per_s": [1.0, 1.0],
            "load_range": [0.5, 0.5],
        },
        max_throughput_rps=100.0,
    )
    st = mm.stream(np.random.default_rng(0))
    st.next_chunk()
    assert set(st.oracle(0.0)) == {"load", "rate_per_s", "phase"}
    assert mm.mean_rate_per_s == pytest.approx(50.0)


@pytest.mark.parametrize(
    "spec,match",
    [
        ({"kind": "poisson", "load_range": [0.2, 0.8], "load": 0.5}, "either load_range"),
        ({"kind": "poisson", "load_range": [0.2, 0.8], "rate_per_s": 5}, "either load_range"),
        ({"kind": "poisson", "load_range": [0.8, 0.2]}, "low <= high"),
        ({"kind": "poisson", "load_range": [0.0, 0.2]}, r"load_range\[0\]"),
        ({"kind": "poisson", "load_range": [0.2]}, "expected \\[low, high\\]"),
        (
            {
                "kind": "random-load",
                "base": {"kind": "poisson", "rate_per_s": 5},
                "load_range": "x",
            },
            "load_range",
        ),
    ],
)
def test_load_range_errors_name_the_field(spec, match) -> None:
    from batch_env.workload import make_workload

    with pytest.raises(ValueError, match=match):
        make_workload(spec, max_throughput_rps=100.0)


def test_the_env_hides_the_drawn_load_except_from_an_oracle() -> None:
    import gymnasium as gym

    import batch_env  # noqa: F401

    kw = {"workload": {"kind": "poisson", "load_range": [0.1, 0.9]}, "horizon_requests": 200}
    env = gym.make("batch_env/DynamicBatching-v0", oracle_info=True, **kw)
    plain = gym.make("batch_env/DynamicBatching-v0", **kw)
    loads = set()
    for seed in range(5):
        _, info = env.reset(seed=seed)
        _, info2 = plain.reset(seed=seed)
        first = info["oracle"]["load"]
        assert 0.1 <= first <= 0.9 and "oracle" not in info2
        for _ in range(50):
            _, r, _, _, info = env.step(1)
            _, r2, _, _, info2 = plain.step(1)
            assert r == r2 and info["oracle"]["load"] == first  # one load per episode
        loads.add(first)
    assert len(loads) == 5
    assert env.unwrapped.mean_load == pytest.approx(0.5)  # the configured mean
    with pytest.warns(UserWarning, match="not the load this episode drew"):
        assert env.unwrapped.load == pytest.approx(0.5)  # the old name, which says so


def test_the_vector_env_draws_each_lanes_load_as_the_scalar_env() -> None:
    from helpers import lockstep

    ended = lockstep(
        {"workload": {"kind": "poisson", "load_range": [0.1, 0.9]}, "horizon_requests": 150},
        n_envs=3,
        steps=1500,
    )
    assert ended >= 3


def test_superposition_merges_its_parts_as_each_would_arrive_alone():
    """Each part's arrivals are exactly its own stream's (from the k-th child of the
    generator), merged in time order, tagged with their part; a finite part ends and the
    rest go on; the rates add up and the spec round-trips."""
    from batch_env.workload import Superposition, make_workload

    spec = {
        "kind": "superposition",
        "parts": [
            {"kind": "poisson", "rate_per_s": 5.0},
            {"kind": "gamma", "rate_per_s": 2.0, "cv": 3.0},
        ],
    }
    w = make_workload(spec)
    assert isinstance(w, Superposition) and w.mean_rate_per_s == pytest.approx(7.0)
    assert make_workload(w.to_dict()) == w
    stream = w.stream(np.random.default_rng(4), chunk_size=500)
    chunks = [stream.next_chunk() for _ in range(6)]
    times = np.concatenate([c.times for c in chunks])
    src = np.concatenate([c.source for c in chunks])
    assert np.all(np.diff(times) >= 0)
    children = np.random.default_rng(4).spawn(2)
    for k, part in enumerate(w.parts):
        alone = part.stream(children[k], 500)
        mine = times[src == k]
        ref = np.concatenate([alone.next_chunk().times for _ in range(10)])
        assert np.array_equal(mine, ref[: mine.size]) and mine.size > 100
    # a finite part ends, the other goes on
    finite = Superposition(
        (
            make_workload({"kind": "trace", "dataset": "azure-conv-2023-excerpt", "loop": False}),
            make_workload({"kind": "poisson", "rate_per_s": 1.0}),
        )
    )
    s = finite.stream(np.random.default_rng(0))
    n0 = 0
    for _ in range(20):
        c = s.next_chunk()
        n0 += int((c.source == 0).sum())
    assert n0 == finite.parts[0].total_arrivals and finite.total_arrivals is None
    with pytest.raises(ValueError, match="parts=.*non-empty"):
        make_workload({"kind": "superposition", "parts": []})
