"""The dataset registry (batch_env.workload.datasets), ``batch-env data``, and the repository's tables.

No test touches the network: downloads go through ``file://`` URLs (a local copy) into a
temporary cache folder (``BATCH_ENV_DATA_DIR``).
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pytest

from batch_env.workload import datasets as data
from experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXCERPTS = ("azure-conv-2023-excerpt", "azure-code-2023-excerpt")
# whole traces, gzipped (the Trace benchmark task; the chunked-prefill comparison)
SHIPPED_FULL = ("azure-conv-2023-gz", "azure-code-2023-gz")
FULL = ("azure-conv-2023", "azure-code-2023", "azure-conv-2024", "azure-code-2024")
# the Mooncake traces with prefix hashes, gzipped whole (Apache-2.0)
MOONCAKE = {"mooncake-conversation": 12_031, "mooncake-synthetic": 3_993}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache folder (nothing fetched)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("BATCH_ENV_DATA_DIR", str(folder))
    return folder


@pytest.fixture
def fake_conv(tmp_path, monkeypatch) -> tuple[Path, str]:
    """A local stand-in for azure-conv-2023 (the excerpt's bytes) and its SHA-256, in the registry."""
    src = tmp_path / "upstream" / "AzureLLMInferenceTrace_conv.csv"
    src.parent.mkdir()
    src.write_bytes(data.path("azure-conv-2023-excerpt").read_bytes())
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    d = data.DATASETS["azure-conv-2023"]
    monkeypatch.setitem(
        data.DATASETS,
        d.name,
        data.Dataset(**{**d.to_dict(), "sha256": digest, "url": src.as_uri()}),
    )
    return src, digest


# ------------------------------------------------------------------ registry


def test_registry_entries_are_well_formed():
    assert set(data.DATASETS) == {*FULL, *EXCERPTS, *SHIPPED_FULL, *MOONCAKE}
    for name, d in data.DATASETS.items():
        assert d.name == name and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name)
        assert d.license == ("Apache-2.0" if name in MOONCAKE else "CC-BY-4.0")
        assert d.citation and d.source and d.description
        assert d.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", d.sha256)
        if d.shipped:
            whole = {"azure-conv-2023-gz": 19_366, "azure-code-2023-gz": 8_819, **MOONCAKE}
            assert (
                d.url is None
                and d.sha256
                and d.rows == (2_000 if name in EXCERPTS else whole[name])
            )
        else:
            assert d.url.startswith("https://") and d.url.endswith("/" + d.filename)
    for name in ("azure-conv-2023", "azure-code-2023"):  # pinned to a commit, known checksums
        d = data.DATASETS[name]
        assert data.AZURE_2023_COMMIT in d.url and d.sha256
    for name in ("azure-conv-2024", "azure-code-2024"):  # no published checksum: none invented
        assert data.DATASETS[name].sha256 is None
    assert data.DATASETS["azure-conv-2023"].sha256 == (
        "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8"
    )
    assert data.DATASETS["azure-code-2023"].sha256 == (
        "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6"
    )


@pytest.mark.parametrize("name", sorted(MOONCAKE))
def test_the_shipped_mooncake_traces_match_their_checksums(name):
    d = data.DATASETS[name]
    p = data.path(name)
    assert data.is_available(name) and p.stat().st_size == d.size_bytes
    assert data.sha256_of(p) == d.sha256
    readme = (ROOT / "batch_env" / "workload" / "excerpts" / "README.md").read_text()
    assert d.sha256 in readme and d.filename in readme and "Apache License 2.0" in readme


@pytest.mark.parametrize("name", EXCERPTS)
def test_shipped_excerpts_match_their_checksums_and_headers(name):
    d = data.DATASETS[name]
    p = data.path(name)
    assert p.parent == ROOT / "batch_env" / "workload" / "excerpts" and data.is_available(name)
    assert data.sha256_of(p) == d.sha256 and p.stat().st_size == d.size_bytes
    raw = p.read_bytes()
    assert raw.startswith(b"TIMESTAMP,ContextTokens,GeneratedTokens\r\n")
    assert raw.count(b"\r\n") == d.rows + 1
    readme = (ROOT / "batch_env" / "workload" / "excerpts" / "README.md").read_text()
    assert d.sha256 in readme and d.filename in readme and "CC BY 4.0" in readme


def test_repository_tables_are_present_and_documented():
    readme = (ROOT / "data" / "README.md").read_text()
    for f in (
        "inoue_resnet50_throughput_power.csv",
        "dle_resnet50_latency.csv",
        "dle_bert_base_latency.csv",
        "resnet50_cpu_stage_latency.json",
        "vidur_llama_linear_ops_ms.csv",
        "splitwise_llm_perf_model.csv",
        "h200_llm_ops.json",
        "mlenergy_v3_llm_energy.csv",
        "mlenergy_v3_output_lengths.json",
        "llmk8s_llama33_70b_tp8_a100_40gb.json",
        "sglang_bench_vllm060_online.json",
    ):
        assert (ROOT / "data" / f).is_file() and f"`{f}`" in readme, f


def test_the_sglang_online_table_is_the_committed_one():
    """SGLang's published online table (scripts/validate_online.py's ``sglang060``) is
    what the README's checksum says: two engines, two setups, two rates, a median each."""
    import hashlib
    import json

    f = ROOT / "data" / "sglang_bench_vllm060_online.json"
    assert hashlib.sha256(f.read_bytes()).hexdigest() in (ROOT / "data" / "README.md").read_text()
    runs = json.loads(f.read_text())["runs"]
    assert {(r["engine"], r["setup"], r["request_rate"]) for r in runs} == {
        (e, s, q) for e in ("SGLang", "vLLM") for s in ("8B-A100", "70B-4xH100") for q in (4, 8)
    }
    for r in runs:
        assert r["num_prompts"] == 300 * r["request_rate"]
        assert 0 < r["median_ttft_ms"] < r["median_e2e_latency_ms"]


def test_the_online_runs_are_the_extracted_ones_and_agree_with_themselves():
    """The llm-k8s serving runs (scripts/validate_online.py) are what the README's checksum
    says: four rates of the same 200 prompts, every percentile ordered, and the output
    throughput the generated tokens over the run's duration."""
    import hashlib
    import json

    f = ROOT / "data" / "llmk8s_llama33_70b_tp8_a100_40gb.json"
    assert hashlib.sha256(f.read_bytes()).hexdigest() in (ROOT / "data" / "README.md").read_text()
    runs = json.loads(f.read_text())["runs"]
    assert list(runs) == ["01", "04", "16", "inf"]
    prompts = runs["01"]["input_lens"]
    assert len(prompts) == 200 and sum(prompts) == 42659
    for r in runs.values():
        assert r["input_lens"] == prompts and r["completed"] == 200
        assert len(r["output_lens"]) == 200
        assert r["median_ttft_ms"] <= r["p99_ttft_ms"] and r["median_tpot_ms"] <= r["p99_tpot_ms"]
        assert sum(r["output_lens"]) / r["duration_s"] == pytest.approx(
            r["output_tokens_per_s"], rel=1e-6
        )


def test_the_mlenergy_tables_are_the_extracted_ones_and_agree_with_themselves():
    """The ML.ENERGY rows are what the README's checksums say, and each row's figures are
    consistent: energy per token is power over throughput (the steady state's energy over
    its tokens), energy per request is energy per token times the average output, and
    every row has its output-length histogram, whose mean is near the average output."""
    import csv
    import hashlib
    import json

    readme = (ROOT / "data" / "README.md").read_text()
    for f in ("mlenergy_v3_llm_energy.csv", "mlenergy_v3_output_lengths.json"):
        assert hashlib.sha256((ROOT / "data" / f).read_bytes()).hexdigest() in readme, f
    rows = list(csv.DictReader((ROOT / "data" / "mlenergy_v3_llm_energy.csv").open()))
    hists = json.loads((ROOT / "data" / "mlenergy_v3_output_lengths.json").read_text())
    assert len(rows) == 42
    for r in rows:
        e, w, tps = (
            float(r[k]) for k in ("energy_per_token_j", "avg_power_w", "output_tokens_per_s")
        )
        assert w / tps == pytest.approx(e, rel=0.01), r
        assert e * float(r["avg_output_len"]) == pytest.approx(
            float(r["energy_per_request_j"]), rel=1e-4
        )
        h = hists["histograms"][f"{r['model']}|{r['gpu']}|{r['num_gpus']}|{r['max_num_seqs']}"]
        edges, counts = h["bins"], h["counts"]
        assert len(edges) == len(counts) + 1, r
        mids = [(a + b) / 2 for a, b in zip(edges, edges[1:], strict=False)]
        mean = sum(m * c for m, c in zip(mids, counts, strict=True)) / sum(counts)
        assert mean == pytest.approx(float(r["avg_output_len"]), rel=0.1), r


def test_missing_full_dataset_is_a_clear_error(cache):
    assert not data.is_available("azure-conv-2023")
    with pytest.raises(data.DatasetError) as ei:
        data.path("azure-conv-2023")
    msg = str(ei.value)
    assert "`batch-env data fetch azure-conv-2023`" in msg and str(cache) in msg
    assert "azure-conv-2023-excerpt" in msg and "\n" not in msg
    with pytest.raises(data.DatasetError, match="unknown; known datasets: azure-conv-2023, "):
        data.get("azure-conv-2025")


def test_cache_folder_default_and_override(monkeypatch, tmp_path):
    monkeypatch.setenv("BATCH_ENV_DATA_DIR", str(tmp_path / "x"))
    assert data.data_dir() == tmp_path / "x"
    monkeypatch.delenv("BATCH_ENV_DATA_DIR")
    import pooch

    assert data.data_dir() == Path(pooch.os_cache("batch-env")).expanduser()


# ------------------------------------------------------------------ fetch


def test_fetch_verifies_the_checksum_and_caches(cache, fake_conv):
    src, digest = fake_conv
    path, got = data.fetch("azure-conv-2023")
    assert path == cache / "AzureLLMInferenceTrace_conv.csv" and got == digest
    assert path.read_bytes() == src.read_bytes() and data.is_available("azure-conv-2023")
    assert not (
        cache / "AzureLLMInferenceTrace_conv.csv.sha256"
    ).exists()  # a known hash needs no record
    src.unlink()  # cached: no second download
    assert data.fetch("azure-conv-2023") == (path, digest)
    # the dataset by name, now fetched
    from batch_env.workload import Trace

    assert Trace(dataset="azure-conv-2023").n_records == 2_000


def test_fetch_refuses_a_mismatching_download(cache, fake_conv):
    src, _ = fake_conv
    src.write_bytes(src.read_bytes() + b"\r\n2023-11-16 19:00:00.0000000,1,1")
    with pytest.raises(data.DatasetError, match="SHA-256 mismatch, the download was refused") as ei:
        data.fetch("azure-conv-2023")
    assert "\n" not in str(ei.value)
    assert not (cache / "AzureLLMInferenceTrace_conv.csv").exists()
    assert not data.is_available("azure-conv-2023")


def test_fetch_a_corrupted_cached_file_is_downloaded_again(cache, fake_conv):
    src, digest = fake_conv
    path, _ = data.fetch("azure-conv-2023")
    path.write_text("damaged")
    assert data.fetch("azure-conv-2023") == (path, digest)
    assert data.sha256_of(path) == digest


def test_fetch_without_a_known_checksum_records_it(cache, tmp_path, monkeypatch):
    src = tmp_path / "code_1week.csv"
    src.write_bytes(data.path("azure-code-2023-excerpt").read_bytes())
    digest = data.sha256_of(src)
    d = data.DATASETS["azure-code-2024"]
    monkeypatch.setitem(data.DATASETS, d.name, data.Dataset(**{**d.to_dict(), "url": src.as_uri()}))
    path, got = data.fetch("azure-code-2024")
    assert got == digest
    record = cache / (d.filename + ".sha256")
    assert record.read_text().split()[0] == digest
    # the upstream file changes: a new download must match the recorded value
    src.write_bytes(src.read_bytes()[:-40])
    with pytest.raises(data.DatasetError, match="recorded at the first fetch"):
        data.fetch("azure-code-2024", force=True)
    assert not path.exists()
    record.unlink()  # accept the new file
    _, new = data.fetch("azure-code-2024")
    assert new == data.sha256_of(src) != digest
    # a user-given checksum must match too
    with pytest.raises(data.DatasetError, match="SHA-256 mismatch"):
        data.fetch("azure-code-2024", sha256="0" * 64, force=True)


def test_fetch_sha256_argument_is_checked():
    with pytest.raises(data.DatasetError, match="64 hexadecimal digits"):
        data.fetch("azure-conv-2023", sha256="abc")
    with pytest.raises(data.DatasetError, match="differs from the registry"):
        data.fetch("azure-conv-2023", sha256="0" * 64)


def test_fetch_a_shipped_dataset_needs_no_download(cache):
    path, digest = data.fetch("azure-code-2023-excerpt")
    assert path == data.path("azure-code-2023-excerpt")
    assert digest == data.DATASETS["azure-code-2023-excerpt"].sha256
    assert not cache.exists()


def test_fetch_without_pooch_says_what_to_install(cache, monkeypatch):
    monkeypatch.setitem(sys.modules, "pooch", None)  # import pooch -> ImportError
    with pytest.raises(
        data.DatasetError, match=r"needs pooch: run pip install 'batch-env\[data\]'"
    ):
        data.fetch("azure-conv-2023")
    assert data.data_dir() == cache  # the cache folder is known without pooch


def test_fetch_network_failure_is_one_line(cache, monkeypatch):
    import pooch

    def offline(*args, **kwargs):
        raise ConnectionError("Max retries exceeded\nwith url: ...")

    monkeypatch.setattr(pooch, "retrieve", offline)
    with pytest.raises(
        data.DatasetError, match="could not download dataset 'azure-conv-2023' from https://"
    ) as ei:
        data.fetch("azure-conv-2023")
    assert "\n" not in str(ei.value)


# ------------------------------------------------------------------ CLI


def test_cli_data_list(cache, capsys):
    assert main(["data", "list"]) == 0
    out, err = capsys.readouterr()
    for name in data.DATASETS:
        assert name in out
    assert re.search(r"azure-conv-2023 +not fetched", out)
    assert re.search(r"azure-conv-2023-excerpt +shipped", out)
    assert str(cache) in err
    assert main(["data", "list", "--json"]) == 0
    import json

    listed = json.loads(capsys.readouterr().out)
    assert listed["data_dir"] == str(cache)
    assert {r["name"]: r["available"] for r in listed["datasets"]}["azure-code-2023-excerpt"]


def test_cli_data_fetch(cache, fake_conv, capsys):
    src, digest = fake_conv
    assert main(["data", "fetch", "bogus"]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "'bogus' is unknown; known datasets: azure-conv-2023" in err
    assert main(["data", "fetch", "azure-conv-2023", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(cache / "AzureLLMInferenceTrace_conv.csv")
    assert f"SHA-256 {digest} (matches the registry)" in err
    assert main(["data", "fetch", "azure-conv-2023"]) == 0
    assert "already in the cache" in capsys.readouterr().err
    # a mismatch (via --url, a mirror) and a network failure: one line, exit status 1
    bad = src.with_name("other.csv")
    bad.write_text("TIMESTAMP\n0\n1\n")
    assert main(["data", "fetch", "azure-conv-2023", "--force", "--url", bad.as_uri()]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("error: ") and "SHA-256 mismatch" in err
    assert (
        main(["data", "fetch", "azure-conv-2023", "--url", (src.parent / "missing.csv").as_uri()])
        == 1
    )
    assert "could not download" in capsys.readouterr().err
    assert main(["data", "fetch", "azure-conv-2023", "--sha256", "xyz"]) == 2
    assert "64 hexadecimal digits" in capsys.readouterr().err


def test_cli_data_fetch_unknown_checksum_warns(cache, tmp_path, monkeypatch, capsys):
    src = tmp_path / "conv_1week.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,1\n1,2,2\n")
    d = data.DATASETS["azure-conv-2024"]
    monkeypatch.setitem(data.DATASETS, d.name, data.Dataset(**{**d.to_dict(), "url": src.as_uri()}))
    assert main(["data", "fetch", "azure-conv-2024"]) == 0
    err = capsys.readouterr().err
    assert (
        f"warning: azure-conv-2024 has no published checksum; SHA-256 of this download: {data.sha256_of(src)}"
        in err
    )


def test_cli_data_help(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["data", "--help"])
    assert ei.value.code == 0
    out = capsys.readouterr().out
    assert "list" in out and "fetch" in out
    with pytest.raises(SystemExit) as ei:
        main(["data"])
    assert ei.value.code == 2 and "error:" in capsys.readouterr().err


# ------------------------------------------------------------------ configs


def test_shipped_configs_name_datasets_not_paths():
    import yaml

    from experiments.agents import load_agents_config
    from experiments.llm import load_llm_config

    llm = load_llm_config("llm")
    assert {s.get("dataset") for s in llm["traffic"].values()} == {"azure-conv-2023-gz"}
    assert all("path" not in s for s in llm["traffic"].values())
    agents = load_agents_config("agents")
    assert agents["settings"]["azure-conv"]["workload"]["dataset"] == "azure-conv-2023"
    for f in (ROOT / "experiments" / "configs").iterdir():
        assert "shared" not in yaml.safe_dump(yaml.safe_load(f.read_text())), f


def test_llm_experiment_without_the_dataset_names_the_command(cache, tmp_path):
    import yaml

    from experiments.llm import run_llm

    cfg = {
        "name": "tiny",
        "reference": "static-256",
        "seeds": [0],
        "env_kwargs": {"horizon_requests": 60, "warmup_requests": 10},
        "profiles": {"llama-2-7b-h100": {"rates": [4.0]}},
        "traffic": {"trace": {"kind": "trace", "dataset": "azure-conv-2023"}},
        "policies": {"static-256": {"policy": "static-cap", "cap": 256}},
    }
    path = tmp_path / "tiny.yml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(
        FileNotFoundError, match="traffic.trace: .*`batch-env data fetch azure-conv-2023`"
    ):
        run_llm(str(path), out_dir=str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()
    # the shipped excerpt runs without a download
    cfg["traffic"] = {
        "trace": {"kind": "trace", "dataset": "azure-conv-2023-excerpt"},
        "poisson": {"kind": "poisson", "dataset": "azure-conv-2023-excerpt"},
    }
    path.write_text(yaml.safe_dump(cfg))
    r = run_llm(str(path), out_dir=str(tmp_path / "out"), progress=False)
    assert {c["traffic"] for c in r["cells"]} == {"trace", "poisson"}


@pytest.mark.parametrize("env_id", ["batch_env/DynamicBatching-v0", "batch_env/NodeBatching-v0"])
def test_envs_replay_a_dataset_by_name(env_id, cache):
    import gymnasium as gym

    import batch_env  # noqa: F401

    wl = {"kind": "trace", "dataset": "azure-code-2023-excerpt", "load": 0.5, "random_offset": True}
    env = gym.make(env_id, workload=wl, horizon_requests=50)
    env.reset(seed=0)
    done, steps = False, 0
    while not done:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        done, steps = term or trunc, steps + 1
    assert steps > 1
    env.close()
    with pytest.raises(ValueError, match="batch-env data fetch azure-code-2023"):
        gym.make(env_id, workload={**wl, "dataset": "azure-code-2023"})
