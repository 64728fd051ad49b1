"""Extract ML.ENERGY's published vLLM energy measurements for the models the LLM profiles
cover into ``data/mlenergy_v3_llm_energy.csv`` and ``data/mlenergy_v3_output_lengths.json``
(issue 64: served energy checked against published runs).

Source: the ML.ENERGY Leaderboard v3 data (vLLM 0.11.1, the LMArena chat task), the
per-model files ``public/data/models/<org>__<model>__lm-arena-chat.json`` of
``github.com/ml-energy/leaderboard``, read from a git checkout at ``--commit`` (the
figures of ``data/README.md`` come from commit 0cd52dab, 2026-02-27, after the
2026-01-01 fix of the throughput column; the ``v3.0`` tag has the old throughputs).

What a row means (ML.ENERGY's benchmark, ``ml-energy/benchmark`` ``mlenergy/benchmark``
and ``ml-energy/data``): all 1,024 LMArena requests (repeated for large batches) are sent
at once to a vLLM 0.11.1 server with ``max_num_seqs`` = the row's batch size,
``max_num_batched_tokens`` 8,192, ``max_model_len`` 20,480, bf16, async scheduling, GPUs
at their default power limit and clocks; GPU energy (NVML through Zeus, summed over the
GPUs, no host) over the steady state (from ``max_num_seqs`` requests having their first
token until ``num_requests - max_num_seqs - 1`` have finished) over the output tokens
generated in it gives ``energy_per_token_j``; ``avg_power_w`` is that energy over the
window's length, ``output_tokens_per_s`` the tokens over it; ``avg_batch_size`` the
running requests averaged over it (runs below 0.85 of ``max_num_seqs`` are not published).
Output lengths are free generation (at most 4,096 tokens; histograms per row in the JSON
file); input lengths are not published (the prompts are LMArena conversations, every turn
with the earlier ones before it).

    python scripts/extract_mlenergy.py --repo PATH_TO_GIT_DIR [--commit 0cd52dab...]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

MODELS = (
    "meta-llama__Llama-3.1-8B-Instruct__lm-arena-chat.json",
    "meta-llama__Llama-3.1-70B-Instruct__lm-arena-chat.json",
)
COLUMNS = (
    ("model", "model_id"),
    ("gpu", "gpu_model"),
    ("num_gpus", "num_gpus"),
    ("max_num_seqs", "max_num_seqs"),
    ("avg_batch_size", "avg_batch_size"),
    ("avg_output_len", "avg_output_len"),
    ("energy_per_token_j", "energy_per_token_joules"),
    ("energy_per_request_j", "energy_per_request_joules"),
    ("avg_power_w", "avg_power_watts"),
    ("output_tokens_per_s", "output_throughput_tokens_per_sec"),
    ("median_itl_ms", "median_itl_ms"),
    ("p90_itl_ms", "p90_itl_ms"),
    ("p99_itl_ms", "p99_itl_ms"),
)
OUT = Path(__file__).resolve().parent.parent / "data"


def main(argv: list[str] | None = None) -> int:
    """Write the CSV and the histograms from the leaderboard's git directory."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="git directory of ml-energy/leaderboard")
    ap.add_argument("--commit", default="0cd52dab897c5d91a45f4d413038f3b8b4251b0f")
    args = ap.parse_args(argv)
    rows, hists = [], {}
    for name in MODELS:
        proc = subprocess.run(
            ["git", "-C", args.repo, "show", f"{args.commit}:public/data/models/{name}"],
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            print(f"error: {name} at {args.commit}: {proc.stderr.strip()}", file=sys.stderr)
            return 2
        doc = json.loads(proc.stdout)
        for c in doc["configurations"]:
            row = {out: (doc if key == "model_id" else c)[key] for out, key in COLUMNS}
            rows.append(row)
            key = f"{row['model']}|{row['gpu']}|{row['num_gpus']}|{row['max_num_seqs']}"
            hists[key] = c["output_length_distribution"]
    rows.sort(key=lambda r: (r["model"], r["gpu"], r["max_num_seqs"]))
    with open(OUT / "mlenergy_v3_llm_energy.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[c for c, _ in COLUMNS], lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    meta = {
        "_about": (
            "Output-length histograms (bins: edges in tokens, counts: requests) of each "
            "row of mlenergy_v3_llm_energy.csv, key 'model|gpu|num_gpus|max_num_seqs', "
            f"from ml-energy/leaderboard at {args.commit} (scripts/extract_mlenergy.py)"
        ),
        "histograms": dict(sorted(hists.items())),
    }
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in meta["histograms"].items()]
    text = '{"_about": ' + json.dumps(meta["_about"]) + ',\n"histograms": {\n'
    (OUT / "mlenergy_v3_output_lengths.json").write_text(text + ",\n".join(lines) + "\n}}\n")
    print(f"{len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
