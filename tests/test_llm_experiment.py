"""The LLM experiment's capacity search: reproducible, monotone in the SLA for SLA-agnostic policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import TINY_LLM

from experiments.llm import capacity_search, common_rates, load_llm_config, run_llm


def tiny_config(tmp_path: Path, ttft_sla_ms: float = 1000.0, tpot_sla_ms: float = 50.0) -> Path:
    cfg = {
        **TINY_LLM,
        "env_kwargs": {
            **TINY_LLM["env_kwargs"],
            "ttft_sla_ms": ttft_sla_ms,
            "tpot_sla_ms": tpot_sla_ms,
        },
    }
    path = tmp_path / f"tiny-{ttft_sla_ms}-{tpot_sla_ms}.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def capacities(result) -> dict[str, float]:
    return {c["policy"]: c["capacity_rps"] for c in result["cells"]}


@pytest.mark.slow
def test_capacity_reproducible_and_outputs_written(tmp_path):
    a = run_llm(str(tiny_config(tmp_path)), out_dir=str(tmp_path / "a"), progress=False)
    b = run_llm(str(tiny_config(tmp_path)), out_dir=str(tmp_path / "b"), progress=False)
    assert capacities(a) == capacities(b)
    assert [c["evaluations"] for c in a["cells"]] == [c["evaluations"] for c in b["cells"]]
    assert any(c > 0 for c in capacities(a).values())
    for f in ("results.json", "summary.md", "attainment.png", "capacity.png"):
        assert (tmp_path / "a" / f).stat().st_size > 0
    data = json.loads((tmp_path / "a" / "results.json").read_text())
    assert {g["policy"] for g in data["gains"]} == {"static-256", "static-16", "memory-aware"}
    # a cap of 16 starves a server that can run ~100 requests: lower capacity
    assert capacities(a)["static-16"] < capacities(a)["static-256"]


@pytest.mark.slow
def test_capacity_non_decreasing_as_the_sla_loosens(tmp_path):
    caps = []
    for ttft, tpot in ((500.0, 30.0), (1000.0, 50.0), (4000.0, 100.0)):
        r = run_llm(
            str(tiny_config(tmp_path, ttft, tpot)),
            out_dir=str(tmp_path / f"{ttft}"),
            progress=False,
        )
        caps.append(capacities(r))
    for policy in ("static-256", "static-16", "memory-aware"):
        seq = [c[policy] for c in caps]
        assert seq == sorted(seq), (policy, seq)
    assert caps[-1]["static-256"] > caps[0]["static-256"]


def test_capacity_search_logic():
    # attainment falls with the rate; threshold crossing at 5.3
    calls = []

    def at(rate):
        calls.append(rate)
        return {"sla_attainment": 1.0 if rate <= 5.3 else 0.5, "output_tokens_per_s": 100 * rate}

    r = capacity_search(at, [1.0, 2.0, 4.0, 8.0], 0.9, 4)
    assert 5.0 <= r["capacity_rps"] <= 5.3 and not r["capped"]
    assert r["throughput_at_sla_tokens_per_s"] == pytest.approx(100 * r["capacity_rps"])
    assert calls[:4] == [1.0, 2.0, 4.0, 8.0]
    r = capacity_search(
        lambda rate: {"sla_attainment": 0.0, "output_tokens_per_s": 1.0}, [1.0, 2.0], 0.9, 4
    )
    assert r["capacity_rps"] == 0.0 and r["throughput_at_sla_tokens_per_s"] == 0.0


def test_shipped_config_is_valid():
    cfg = load_llm_config("llm")
    assert cfg["reference"] == "static-256"
    assert "llama-2-7b-a100" in cfg["profiles"]


@pytest.mark.parametrize(
    "patch, match",
    [
        ({"reference": "nope"}, "reference"),
        ({"seeds": [0, 2]}, "seeds"),
        ({"profiles": {"llama-2-7b-h100": {"rates": [3.0, 1.0]}}}, "rates"),
        ({"traffic": {"x": {"kind": "gamma"}}}, "traffic"),
        ({"policies": {"static-256": {}}}, "policies"),
    ],
)
def test_bad_config(tmp_path, patch, match):
    cfg = yaml.safe_load(tiny_config(tmp_path).read_text())
    cfg.update(patch)
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=match):
        load_llm_config(str(path))


@pytest.mark.slow
def test_chunked_profiles_and_budget_policies_run_in_the_experiment(tmp_path):
    """A profile entry with the chunked scheduler's env kwargs runs the budget policies
    (restricted to it); on the coding trace's long prompts the SLA-sized budget keeps the
    TPOT tail under the SLA where v0's prefill-first scheduler does not."""
    cfg = yaml.safe_load(tiny_config(tmp_path).read_text())
    cfg["profiles"] = {
        "v0": {"profile": "llama-2-7b-a100", "rates": [0.5, 1.0]},
        "chunked": {
            "profile": "llama-2-7b-a100",
            "env_kwargs": {"scheduler": "chunked", "budget_grid": [256, 1024, 4096]},
            "rates": [0.5, 1.0],
        },
    }
    cfg["traffic"] = {"code": {"kind": "trace", "dataset": "azure-code-2023-excerpt"}}
    cfg["policies"] = {
        "static-256": {"policy": "static-cap", "cap": 256},
        "sarathi": {"policy": "sarathi", "profiles": ["chunked"]},
    }
    cfg["env_kwargs"]["horizon_requests"] = 150
    path = tmp_path / "chunked.yml"
    path.write_text(yaml.safe_dump(cfg))
    r = run_llm(str(path), out_dir=str(tmp_path / "out"), progress=False)
    cells = {(c["profile"], c["policy"]): c for c in r["cells"]}
    assert set(cells) == {("v0", "static-256"), ("chunked", "static-256"), ("chunked", "sarathi")}
    tail = {k: c["evaluations"][0]["tpot_p99_ms"] for k, c in cells.items()}  # at 0.5 req/s
    assert tail[("chunked", "sarathi")] < 50 < tail[("v0", "static-256")]
    # the summary compares them at rates they share, with goodput and both tails
    rates = common_rates(r["cells"], 0.9)["code"]
    assert set(rates) <= {"all meet", "overload"} and rates
    assert all(x in (0.5, 1.0) for x in rates.values())
    assert "goodput (req/s)" in r["markdown"]
    assert any(f"({kind})" in r["markdown"] for kind in rates)


def test_common_rates_pick_shared_rates_where_all_meet_and_beyond():
    def cell(traffic, rates_att):
        return {
            "traffic": traffic,
            "evaluations": [{"rate_per_s": r, "sla_attainment": a} for r, a in rates_att],
        }

    cells = [
        cell("t", [(1.0, 0.99), (2.0, 0.95), (3.0, 0.5)]),
        cell("t", [(1.0, 0.97), (2.0, 0.80), (3.0, 0.2), (4.0, 0.1)]),
        cell("u", [(1.0, 0.99)]),
        cell("u", [(2.0, 0.99)]),  # nothing shared: left out
        cell("v", [(1.0, 0.5)]),
    ]
    assert common_rates(cells, 0.9) == {
        "t": {"all meet": 1.0, "overload": 3.0},
        "v": {"overload": 1.0},
    }
