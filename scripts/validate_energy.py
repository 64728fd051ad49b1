"""Hold the simulator's served energy against ML.ENERGY's published vLLM runs (issue 64).

Source: ``data/mlenergy_v3_llm_energy.csv`` and ``data/mlenergy_v3_output_lengths.json``
(the ML.ENERGY Leaderboard v3 data: ``data/README.md``; what a row means:
``scripts/extract_mlenergy.py``). Each row is a vLLM 0.11.1 server with ``max_num_seqs``
= the row's batch size, a token budget of 8,192, ``max_model_len`` 20,480, sent every
request of the LMArena chat task at once; its GPU energy over the steady state (from
``max_num_seqs`` requests having their first token until all but ``max_num_seqs + 1``
have finished) over the output tokens generated in it is the energy per output token.

The simulation (``LLMBatching-v1`` at its largest cap, the row's profile: Llama-3.1-8B on
one H100, ``llama-3.1-8b-h100``; Llama-3.1-70B on four, ``llama-3.1-70b-tp4-h100``) runs
the same: as many requests as the row's histogram counts, at once, outputs drawn from the
row's histogram (uniform within a bin, seeded), and the same window; energy per token,
average power and output throughput over it are compared with the row's.

**Assumed, not published: the prompt lengths.** ML.ENERGY publishes none (the raw runs
with each request's ``input_len`` are in a gated dataset). The prompt of a request is the
conversation so far (every earlier turn of one side) and the current user message, with
Llama 3.1's chat template added by the server. The closest published statistics are per
message (Chatbot Arena, arXiv 2403.04132, Table 1: 1.3 turns a conversation, 94.9 tokens a
user prompt, 269.0 a response, Llama 2's tokenizer), which give about 145 Llama 3 tokens a
prompt and some 30 of template: here prompts are log-normal with mean ``--input-mean``
(default 300, below) and ``--input-sigma`` (default 1.0, heavy-tailed as chat prompts are),
clipped to 16,384 (vLLM refuses a prompt whose prompt plus 4,096 output tokens exceed
20,480). The mean is pinned by what the rows publish beside energy: at the largest
``max_num_seqs`` the KV cache, not the cap, limits the running batch (Llama-3.1-8B at 768:
690.9 on average; Llama-3.1-70B at 1,024: 898.5), and how many requests fit depends on
their contexts. A mean of 300 gives 689.7 and 886.6 (200: 764.2 and 1,005.1; 400: 603.0
and 722.2), both models alike, so 300 is the default; ``--input-mean`` shows how far the
figures hang on it. Prefix caching (on in vLLM 0.11.1) is left off: the chat template's
shared system block is under two blocks.

    python scripts/validate_energy.py [--input-mean 300] [--input-sigma 1.0] [--rows 8B|70B|all]
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import batch_env  # noqa: F401 (registers the ids)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_replay import replay  # noqa: E402 (one offline replay, shared)

DATA = Path(__file__).resolve().parent.parent / "data"
PROFILES: dict[tuple[str, str, int], str | tuple[str, str, int]] = {
    ("meta-llama/Llama-3.1-8B-Instruct", "H100", 1): "llama-3.1-8b-h100",
    ("meta-llama/Llama-3.1-70B-Instruct", "H100", 4): "llama-3.1-70b-tp4-h100",
    # no shipped B200 profile: built from the model's config on the B200 spec (its power
    # model and efficiencies are assumed, not fitted: batch_env/profiles/gpus/b200.json)
    ("meta-llama/Llama-3.1-8B-Instruct", "B200", 1): ("llama-3.1-8b", "b200", 1),
    ("meta-llama/Llama-3.1-70B-Instruct", "B200", 2): ("llama-3.1-70b", "b200", 2),
}
BUDGET, MAX_MODEL_LEN, MAX_OUTPUT, MAX_PROMPT = 8192, 20_480, 4096, 16_384


def rows(which: str, gpus: tuple[str, ...] = ("H100",)) -> list[dict[str, Any]]:
    """The published rows that a profile covers (``which``: "8B", "70B" or "all") on
    ``gpus`` (the H100's by default: the B200 has no fitted spec)."""
    out = []
    hists = json.loads((DATA / "mlenergy_v3_output_lengths.json").read_text())["histograms"]
    with (DATA / "mlenergy_v3_llm_energy.csv").open() as fh:
        for r in csv.DictReader(fh):
            key = (r["model"], r["gpu"], int(r["num_gpus"]))
            if key not in PROFILES or (which != "all" and f"-{which}-" not in r["model"]):
                continue
            if r["gpu"] not in gpus:
                continue
            h = hists[f"{r['model']}|{r['gpu']}|{r['num_gpus']}|{r['max_num_seqs']}"]
            out.append({**r, "profile": PROFILES[key], "hist": h})
    return out


def lengths(
    row: dict[str, Any], mean_in: float, sigma: float, seed: int
) -> tuple[list[int], list[int]]:
    """Prompt and output lengths of the row's requests (the module docstring)."""
    rng = np.random.default_rng(seed)
    edges, counts = row["hist"]["bins"], row["hist"]["counts"]
    outs = []
    for lo, hi, c in zip(edges, edges[1:], counts, strict=False):
        outs += rng.uniform(lo, hi, int(c)).tolist()
    rng.shuffle(outs)
    n = len(outs)
    mu = math.log(mean_in) - sigma**2 / 2
    ins = np.clip(np.round(rng.lognormal(mu, sigma, n)), 1, MAX_PROMPT).astype(int).tolist()
    return ins, [int(min(max(1, round(o)), MAX_OUTPUT)) for o in outs]


def window_batch(series: list[tuple[float, int]], t0: float, t1: float) -> float:
    """The running requests averaged over ``[t0, t1]`` (a step function of time: each
    entry's count holds from its time to the next entry's)."""
    total = 0.0
    for (a, n), (b, _) in zip(series, series[1:], strict=False):
        lo, hi = max(a, t0), min(b, t1)
        if hi > lo:
            total += n * (hi - lo)
    return total / (t1 - t0)


def profile_of(row: dict[str, Any], per_seq_ms: float) -> Any:
    """The row's profile, with ``overhead_ms_per_seq`` set to ``per_seq_ms`` where > 0."""
    if isinstance(row["profile"], tuple):
        from batch_env.profiles import llm_arch

        d = llm_arch.build_profile(*row["profile"], max_batch=2048)
    elif per_seq_ms <= 0:
        return row["profile"]
    else:
        path = DATA.parent / "batch_env" / "profiles" / "llm" / f"{row['profile']}.json"
        d = json.loads(path.read_text())
    if per_seq_ms <= 0:
        return d
    d["overhead_ms_per_seq"] = per_seq_ms
    d["overhead_source"] = "scripts/validate_energy.py --per-seq-ms (exploratory)"
    return d


def simulate(
    row: dict[str, Any], ins: list[int], outs: list[int], per_seq_ms: float = 0.0
) -> dict[str, float]:
    """One run: energy per token, power and throughput over ML.ENERGY's window
    (``per_seq_ms``: a per-sequence overhead a decode step, :func:`profile_of`)."""
    b, n = int(row["max_num_seqs"]), len(ins)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        with path.open("w") as fh:
            fh.write("t,prompt,output\n")
            for i, (p, o) in enumerate(zip(ins, outs, strict=True)):
                fh.write(f"{1e-3 if i == n - 1 else 0.0},{p},{o}\n")
        series = [(0.0, 0.0, 0, 0)]  # (time, energy J, output tokens, completed)
        series_b = [(0.0, 0)]  # (time, running requests from then on)

        def record(server: Any) -> None:
            series_b.append((server.now, len(server.state.running)))
            series.append((server.now, server.energy_j, server.state.tokens_out, server.completed))

        server, _info = replay(
            path,
            n,
            columns=("t", "prompt", "output"),
            time_unit="ms",
            on_step=record,
            profile=profile_of(row, per_seq_ms),
            max_num_seqs=b,
            max_num_batched_tokens=BUDGET,
            max_model_len=MAX_MODEL_LEN,
        )
        first = sorted(t for t in server.sla_books.first_at if not math.isnan(t))
    t_start = first[b - 1]
    done = [s[3] for s in series]
    k_end = bisect.bisect_left(done, n - b - 1)
    if k_end >= len(series):
        raise RuntimeError(f"empty steady state for max_num_seqs={b}: the run ended first")
    t_end = series[k_end][0]
    k_start = bisect.bisect_left([s[0] for s in series], t_start)

    def at(k: int) -> tuple[float, float, int, int]:
        return series[min(k, len(series) - 1)]

    _, e0, tok0, _ = at(k_start)
    _, e1, tok1, _ = at(k_end)
    dt = t_end - at(k_start)[0]
    if dt <= 0 or tok1 <= tok0:
        raise RuntimeError(f"empty steady state for max_num_seqs={b}: {t_start=}, {t_end=}")
    return {
        "j_per_token": (e1 - e0) / (tok1 - tok0),
        "power_w": (e1 - e0) / dt,
        "tokens_per_s": (tok1 - tok0) / dt,
        "window_s": dt,
        "avg_batch": window_batch(series_b, t_start, t_end),
    }


#: the per-sequence costs ``--per-seq-ms fit`` tries (ms a running request a decode step)
FIT_GRID = tuple(round(0.0025 * k, 4) for k in range(33))


def fit_per_seq(which: str, mean_in: float, sigma: float, seed: int) -> tuple[float, float]:
    """The per-sequence cost of :data:`FIT_GRID` whose simulated output throughputs of
    ``which``'s rows are nearest the published ones (least mean squared log ratio), and
    that mean's root (the typical relative error)."""
    data = [(r, *lengths(r, mean_in, sigma, seed)) for r in rows(which)]
    best = (math.inf, 0.0)
    for x in FIT_GRID:
        logs = [
            math.log(simulate(r, i, o, x)["tokens_per_s"] / float(r["output_tokens_per_s"]))
            for r, i, o in data
        ]
        best = min(best, (float(np.mean(np.square(logs))), x))
    return best[1], math.sqrt(best[0])


def main(argv: list[str] | None = None) -> int:
    """Print the comparison table (markdown)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input-mean", type=float, default=300.0, help="mean prompt tokens")
    ap.add_argument("--input-sigma", type=float, default=1.0, help="log-normal sigma")
    ap.add_argument("--rows", choices=["8B", "70B", "all"], default="all")
    ap.add_argument(
        "--gpus",
        default="H100",
        help="comma-separated GPUs of the rows: H100 (default), B200 (its spec's power model "
        "is assumed, not fitted)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--per-seq-ms",
        default="0",
        help="a per-sequence cost (ms) added to every iteration of the profile, or 'fit': "
        "fitted on the 70B rows' output throughputs, then every row run with it",
    )
    args = ap.parse_args(argv)
    try:
        fit = args.per_seq_ms == "fit"
        args.per_seq_ms = 0.0 if fit else float(args.per_seq_ms)
    except ValueError:
        args.per_seq_ms = -1.0
    if not (args.input_mean >= 1 and args.input_sigma >= 0 and args.per_seq_ms >= 0):
        print(
            f"error: --input-mean {args.input_mean} / --input-sigma {args.input_sigma} / "
            "--per-seq-ms: expected a mean >= 1, a sigma >= 0, a cost >= 0 or 'fit'",
            file=sys.stderr,
        )
        return 2
    t0 = time.perf_counter()
    print(
        f"Prompts log-normal, mean {args.input_mean:g}, sigma {args.input_sigma:g} (assumed); "
        "outputs from each row's histogram."
    )
    if fit:
        args.per_seq_ms, rms = fit_per_seq("70B", args.input_mean, args.input_sigma, args.seed)
        print(
            f"Per-sequence cost fitted on the 70B rows' output throughputs: "
            f"{args.per_seq_ms:g} ms (their rms log error {rms:.1%}); every row runs with it."
        )
    elif args.per_seq_ms:
        print(f"Per-sequence cost {args.per_seq_ms:g} ms a decode step (given).")
    print()
    print(
        "| model, GPUs | max_num_seqs | J/token published | simulated | error | power W "
        "published / simulated | error | tokens/s published / simulated | error | "
        "average batch published / simulated |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    errs: dict[str, list[float]] = {}
    for row in rows(args.rows, tuple(g.strip() for g in args.gpus.split(","))):
        ins, outs = lengths(row, args.input_mean, args.input_sigma, args.seed)
        try:
            sim = simulate(row, ins, outs, args.per_seq_ms)
        except RuntimeError as exc:  # the KV cache holds fewer than max_num_seqs
            print(
                f"| {row['model']}, {row['num_gpus']}x{row['gpu']} | {row['max_num_seqs']} | {exc} |"
            )
            continue
        pub = {
            "j_per_token": float(row["energy_per_token_j"]),
            "power_w": float(row["avg_power_w"]),
            "tokens_per_s": float(row["output_tokens_per_s"]),
        }
        e = {k: sim[k] / pub[k] - 1 for k in pub}
        name = row["model"].split("/")[1].replace("-Instruct", "")
        errs.setdefault(f"{name}, {row['num_gpus']}x{row['gpu']}", []).append(e["j_per_token"])
        print(
            f"| {name}, {row['num_gpus']}x{row['gpu']} | {row['max_num_seqs']} | "
            f"{pub['j_per_token']:.4f} | {sim['j_per_token']:.4f} | {e['j_per_token']:+.1%} | "
            f"{pub['power_w']:.0f} / {sim['power_w']:.0f} | {e['power_w']:+.1%} | "
            f"{pub['tokens_per_s']:.0f} / {sim['tokens_per_s']:.0f} | {e['tokens_per_s']:+.1%} | "
            f"{float(row['avg_batch_size']):.1f} / {sim['avg_batch']:.1f} |"
        )
    print()
    for name, err in [*errs.items(), ("all", [x for v in errs.values() for x in v])]:
        a = np.abs(err)
        print(
            f"Energy per token, {name}: median |error| {np.median(a):.1%}, max {a.max():.1%}, "
            f"within 15%: {int((a <= 0.15).sum())} of {a.size}"
        )
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
