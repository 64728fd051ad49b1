"""Hold the simulator against published ONLINE serving runs: Poisson request-rate sweeps
with TTFT and TPOT percentiles (issue 64, item 6; docs/validation.md, "Online serving").

Two sources, three engines:

* ``llmk8s``: ``data/llmk8s_llama33_70b_tp8_a100_40gb.json`` (``data/README.md``),
  extracted by ``--extract`` from ``github.com/surajssd/llm-k8s`` (Apache-2.0) at commit
  58b61c59: vLLM 0.8.3's ``benchmark_serving.py`` against a vLLM 0.8.3 server (the V1
  engine, chunked prefill with a 2,048-token budget on a GPU under 70 GiB, 256 sequences,
  prefix caching on) of Llama-3.3-70B-Instruct on 8 A100-SXM4-40GB (tensor parallel 8);
  200 ShareGPT requests with each one's prompt and generated token counts, at 1, 4 and 16
  requests/s and all at once, run in that order on one server. Mean, median and p99 of
  TTFT and TPOT per rate. Llama-3.3-70B has Llama-3.1-70B's architecture: the profile is
  ``build_profile("llama-3.1-70b", "a100-40gb", 8)``. The runs are replayed in order on one
  server with the prefix cache on (every prompt's full blocks are cached from the second
  run on, as they were in vLLM).
* ``sglang060``: ``data/sglang_bench_vllm060_online.json``, the online table of SGLang's
  ``benchmark/benchmark_vllm_060/README.md`` (sgl-project/sglang @120affb, Apache-2.0):
  SGLang 0.3.0 and vLLM 0.6.0 (``--num-scheduler-steps 10``, ``--max_model_len 4096``,
  otherwise defaults: no chunked prefill, a 4,096-token budget, 256 sequences) serving
  Llama-3.1-8B-Instruct on one A100-80GB (``llama-3.1-8b-a100``) and Llama-3.1-70B-Instruct
  on four H100s (``llama-3.1-70b-tp4-h100``), ShareGPT at 4 requests/s (1,200 prompts) and
  8 (2,400). Medians only. SGLang 0.3.0 schedules a prefill batch (its
  ``chunked_prefill_size`` 8,192) or a decode batch, as vLLM V0 does: both run here on the
  ``vllm-v0`` scheduler, with their own budgets. The lengths are not published: each
  request's prompt and output are drawn (seeded) from the 200 of ``llmk8s`` (ShareGPT's
  first turns, the Llama 3 tokenizer and the filter that both benchmarks apply: prompts of
  4-1,024 tokens, prompt + output at most 2,048); their means, 213 and 214 tokens, are near
  the 224 and 189 that SGLang's client reported for its 1,200 (sglang issue 2097).

What the profiles do not hold, and is fitted here per engine on named figures, the other
figures being checks (``ENGINES``; ``--fit`` refits, the table says which is which):

* **the engine's host time**: per iteration (``overhead_ms``) and per running request
  (``overhead_ms_per_seq``), the profile's own two terms. The shipped profiles have 0 for
  both (vLLM 0.11's asynchronous scheduling hides them; the served-energy check fits
  0.0325 ms a request for vLLM 0.11.1). Older engines ran the scheduler, the sampler and
  the output processing between GPU steps. Fitted on the median TPOT at two rates.
* **the API server's time** (HTTP, tokenizing, the first token's trip back): the
  simulator's TTFT runs from the request's arrival at the engine; a client's from its
  request. A constant added to each TTFT (a constant delay of every arrival leaves a
  Poisson stream and so the engine's dynamics unchanged), fitted on one median TTFT.

vLLM 0.6.0's TTFT is not compared: with ``--num-scheduler-steps 10`` a new request waits
for the running 10-step group and its first token streams with the group's (its median ITL
is 129-275 ms), which the simulator's engine does not model.

    python scripts/validate_online.py [--seeds 3] [--source llmk8s|sglang060|all]
    python scripts/validate_online.py --fit       # refit the host and API-server times
    python scripts/validate_online.py --extract PATH_TO_LLM_K8S_GIT_DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import batch_env  # noqa: F401 (registers the ids)
from batch_env.profiles import llm_arch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_replay import replay  # noqa: E402 (one offline replay, shared)
from validate_llm_runs import V0_ALLREDUCE_GB_S, V0_ALLREDUCE_US  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data" / "llmk8s_llama33_70b_tp8_a100_40gb.json"
SGLANG_DATA = Path(__file__).resolve().parent.parent / "data" / "sglang_bench_vllm060_online.json"
COMMIT = "58b61c59450e06073120a8ad166c1e9c333851a7"
RUN_DIR = "results_serving_meta-llama-Llama-3.3-70B-Instruct/01_tp8_pp1"
RATES = ("01", "04", "16", "inf")
FIGURES = (
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
)
BUDGET, MAX_SEQS, MAX_MODEL_LEN = 2048, 256, 131_072
BLOCK = 16  # vLLM's KV block (tokens), the unit its prefix cache hashes
GAP_S = 60.0  # between one run's last arrival and the next run's first
#: the issue's targets: |error| within 15% at the median (and mean), 25% at p99
TARGET = {"p99": 0.25, "other": 0.15}


@dataclass(frozen=True)
class Host:
    """An engine's time outside the profile: per iteration and per running request (ms,
    the profile's ``overhead_ms`` / ``overhead_ms_per_seq``), and the API server's (ms,
    added to every TTFT)."""

    ms: float = 0.0
    ms_per_seq: float = 0.0
    api_ms: float = 0.0


@dataclass(frozen=True)
class Engine:
    """One engine's runs and what is fitted on which of them: ``tpot_fit`` the two
    (run, figure) pairs the host times are fitted on (the lower rate first), ``ttft_fit``
    the one the API server's time is fitted on, ``host``
    the fitted values (``--fit`` prints them afresh)."""

    name: str
    source: str
    tpot_fit: tuple[tuple[str, str], tuple[str, str]]
    ttft_fit: tuple[str, str]
    host: Host


#: Fitted by ``--fit`` (3 arrival draws a run), 2026-12-06.
ENGINES = {
    "vllm-0.8.3": Engine(
        "vllm-0.8.3",
        "llmk8s",
        (("01", "median_tpot_ms"), ("16", "median_tpot_ms")),
        ("01", "median_ttft_ms"),
        Host(2.52, 0.09, 10.6),
    ),
    "vllm-0.6.0": Engine(
        "vllm-0.6.0",
        "sglang060",
        (("8B-A100@4", "median_tpot_ms"), ("8B-A100@8", "median_tpot_ms")),
        ("8B-A100@4", "median_ttft_ms"),
        Host(0.33, 0.06, 11.1),
    ),
    "sglang-0.3.0": Engine(
        "sglang-0.3.0",
        "sglang060",
        (("8B-A100@4", "median_tpot_ms"), ("8B-A100@8", "median_tpot_ms")),
        ("8B-A100@4", "median_ttft_ms"),
        Host(0.0, 0.07, 8.8),
    ),
}
#: the sglang060 setups: ``build_profile``'s model, GPU and tensor-parallel degree (the
#: shipped ``llama-3.1-8b-a100`` and ``llama-3.1-70b-tp4-h100``), with vLLM V0's all-reduce
#: at TP > 1 on H100s (both engines ran vLLM's custom all-reduce and NCCL of 2024)
SETUPS = {
    "8B-A100": ("llama-3.1-8b", "a100-80gb", 1),
    "70B-4xH100": ("llama-3.1-70b", "h100-sxm", 4),
}
SCHED = {
    "vllm-0.6.0": {"budget": 4096, "max_seqs": 256, "max_model_len": 4096, "steps": 10},
    "sglang-0.3.0": {"budget": 8192, "max_seqs": 256, "max_model_len": 4096, "steps": 1},
}


def extract(git_dir: str) -> None:
    """Write :data:`DATA` from a git checkout of surajssd/llm-k8s."""
    runs: dict[str, Any] = {}
    for r in RATES:
        name = f"{RUN_DIR}/serving_meta-llama-Llama-3.3-70B-Instruct_tp8_pp1_sharegpt_qps_{r}.json"
        d = json.loads(
            subprocess.run(
                ["git", "-C", git_dir, "show", f"{COMMIT}:{name}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        runs[r] = {
            "request_rate": d["request_rate"],
            "completed": d["completed"],
            "duration_s": d["duration"],
            "output_tokens_per_s": d["output_throughput"],
            **{k: d[k] for k in FIGURES},
            "input_lens": d["input_lens"],
            "output_lens": d["output_lens"],
        }
    out = {
        "source": f"github.com/surajssd/llm-k8s @{COMMIT} {RUN_DIR} (Apache-2.0)",
        "setup": "vLLM 0.8.3 benchmark_serving.py, sharegpt, 200 prompts, seed 0, Poisson "
        "(burstiness 1); server vllm/vllm-openai:v0.8.3, Llama-3.3-70B-Instruct, "
        "--tensor-parallel-size 8 --distributed-executor-backend mp --enable-prefix-caching, "
        "1 x Azure Standard_ND96asr_v4 (8 x A100-SXM4-40GB)",
        "runs": runs,
    }
    DATA.write_text(json.dumps(out, indent=1) + "\n")


def _arrivals(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` arrival times from 0: Poisson at ``rate``, all at once if it is infinite."""
    if not np.isfinite(rate):
        return np.zeros(n)
    return np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / rate, n - 1))])


def _serve(rows: list[dict[str, Any]], seed: int, profile: Any, **env: Any) -> Any:
    """The requests of ``rows`` served to the end on ``LLMBatching-v1`` (vLLM's one
    setting, its largest cap): the server."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        hashed = "hash_ids" in rows[0]
        srv, _info = replay(
            path,
            len(rows),
            columns=("t", "prompt", "output"),
            prefix_block_tokens=BLOCK if hashed else None,
            seed=seed,
            profile=profile,
            prefix_caching=hashed,
            **env,
        )
    return srv


def _figures(srv: Any, lo: int, hi: int, api_ms: float) -> dict[str, float]:
    """The benchmark's figures of requests ``lo..hi`` (their order of arrival): TTFT (plus
    the API server's ``api_ms``) and TPOT, the time per output token after the first."""
    arr = np.asarray(srv.arrivals[lo:hi], dtype=np.float64)
    first = np.asarray(srv.sla_books.first_at[lo:hi], dtype=np.float64)
    fin = np.array([np.nan if f is None else f for f in srv.finished_at[lo:hi]], dtype=np.float64)
    out = np.asarray(srv.state.output[lo:hi], dtype=np.int64)
    ttft = (first - arr) * 1e3 + api_ms
    tpot = ((fin - first) / np.maximum(out - 1, 1) * 1e3)[out > 1]
    return {
        "mean_ttft_ms": float(ttft.mean()),
        "median_ttft_ms": float(np.median(ttft)),
        "p99_ttft_ms": float(np.percentile(ttft, 99)),
        "mean_tpot_ms": float(tpot.mean()),
        "median_tpot_ms": float(np.median(tpot)),
        "p99_tpot_ms": float(np.percentile(tpot, 99)),
    }


def simulate(runs: list[dict[str, Any]], seed: int, host: Host = Host()) -> list[dict[str, float]]:
    """``llmk8s``: the benchmark's sequence replayed on one server (arrivals drawn with
    ``seed``), each run's figures. The runs went one after the other to the same vLLM
    server with prefix caching on, so the prompts of every run after the first were
    cached: so here, each prompt's 16-token blocks hashed by prompt, the runs
    :data:`GAP_S` apart."""
    rng = np.random.default_rng(seed)
    rows, spans, t0 = [], [], 0.0
    for run in runs:
        ts = t0 + _arrivals(float(run["request_rate"]), len(run["input_lens"]), rng)
        lo = len(rows)
        for i, (a, p, o) in enumerate(zip(ts, run["input_lens"], run["output_lens"], strict=True)):
            hashes = [i * 10_000 + j for j in range(p // BLOCK)]
            rows.append({"t": float(a), "prompt": p, "output": o, "hash_ids": hashes})
        spans.append((lo, len(rows)))
        t0 = float(ts[-1]) + GAP_S
    prof = llm_arch.build_profile(
        "llama-3.1-70b", "a100-40gb", 8, overhead_ms=host.ms, overhead_ms_per_seq=host.ms_per_seq
    )
    srv = _serve(
        rows,
        seed,
        prof,
        max_num_seqs=MAX_SEQS,
        max_num_batched_tokens=BUDGET,
        max_model_len=MAX_MODEL_LEN,
    )
    return [_figures(srv, lo, hi, host.api_ms) for lo, hi in spans]


def sharegpt_lengths() -> tuple[np.ndarray, np.ndarray]:
    """The 200 ShareGPT requests' (prompt, output) token counts of ``llmk8s`` (its first
    run's): the length distribution the ``sglang060`` runs are drawn from."""
    run = runs_of()[0]
    return np.asarray(run["input_lens"]), np.asarray(run["output_lens"])


def simulate_run(engine: str, run: dict[str, Any], seed: int, host: Host) -> dict[str, float]:
    """One ``sglang060`` run of ``engine``: its number of requests with lengths drawn from
    :func:`sharegpt_lengths` and Poisson arrivals (both from ``seed``) on a fresh server."""
    rng = np.random.default_rng(seed)
    prompts, outputs = sharegpt_lengths()
    n = int(run["num_prompts"])
    pick = rng.integers(0, len(prompts), n)
    ts = _arrivals(float(run["request_rate"]), n, rng)
    rows = [
        {"t": float(t), "prompt": int(prompts[i]), "output": int(outputs[i])}
        for t, i in zip(ts, pick, strict=True)
    ]
    model, gpu, tp = SETUPS[run["setup"]]
    v0 = {"allreduce_us": V0_ALLREDUCE_US, "allreduce_gb_s": V0_ALLREDUCE_GB_S} if tp > 1 else {}
    prof = llm_arch.build_profile(
        model, gpu, tp, overhead_ms=host.ms, overhead_ms_per_seq=host.ms_per_seq, **v0
    )
    s = SCHED[engine]
    srv = _serve(
        rows,
        seed,
        prof,
        scheduler="vllm-v0",
        max_num_seqs=s["max_seqs"],
        max_num_batched_tokens=s["budget"],
        max_model_len=s["max_model_len"],
        num_scheduler_steps=s["steps"],
    )
    return _figures(srv, 0, n, host.api_ms)


def runs_of() -> list[dict[str, Any]]:
    """``llmk8s``'s published runs, in the order they ran."""
    data = json.loads(DATA.read_text())
    return [data["runs"][r] for r in RATES]


def published(engine: str) -> dict[str, dict[str, Any]]:
    """An engine's published runs by label (``llmk8s``: the rate; ``sglang060``:
    ``setup@rate``)."""
    if ENGINES[engine].source == "llmk8s":
        return dict(zip(RATES, runs_of(), strict=True))
    data = json.loads(SGLANG_DATA.read_text())
    name = {"vllm-0.6.0": "vLLM", "sglang-0.3.0": "SGLang"}[engine]
    return {f"{r['setup']}@{r['request_rate']}": r for r in data["runs"] if r["engine"] == name}


def simulated(
    engine: str, seeds: int, host: Host, labels: list[str] | None = None
) -> dict[str, list[dict[str, float]]]:
    """Each run's simulated figures (one dict per arrival draw ``0..seeds-1``), of the runs
    ``labels`` (default all; ``llmk8s`` replays its sequence up to the last one asked)."""
    pub = published(engine)
    labels = list(pub) if labels is None else labels
    if ENGINES[engine].source == "llmk8s":
        upto = max(RATES.index(x) for x in labels) + 1
        draws = [simulate(runs_of()[:upto], s, host) for s in range(seeds)]
        return {x: [d[RATES.index(x)] for d in draws] for x in labels}
    return {x: [simulate_run(engine, pub[x], s, host) for s in range(seeds)] for x in labels}


def _mean(engine: str, seeds: int, host: Host, label: str, fig: str) -> float:
    return float(np.mean([d[fig] for d in simulated(engine, seeds, host, [label])[label]]))


def fit(engine: str, seeds: int) -> Host:
    """The engine's host times, fitted: for each per-request time of a 0.01-ms grid up to
    0.2, the per-iteration time (0.05-ms bisection up to 10) whose mean simulated figure
    of the first ``tpot_fit`` pair matches the published one; of those pairs, the one
    nearest on the second. Then the API server's time: the published ``ttft_fit`` figure
    less the simulated one."""
    e = ENGINES[engine]
    pub = published(engine)
    (l1, f1), (l2, f2) = e.tpot_fit
    t1, t2 = float(pub[l1][f1]), float(pub[l2][f2])
    best = (np.inf, Host())
    for k in range(21):
        ps = round(0.01 * k, 2)
        lo, hi = 0.0, 10.0
        if _mean(engine, seeds, Host(0.0, ps), l1, f1) >= t1:
            hi = 0.0
        while hi - lo > 0.05:
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _mean(engine, seeds, Host(mid, ps), l1, f1) < t1 else (lo, mid)
        h = Host(round((lo + hi) / 2, 2), ps)
        miss = abs(_mean(engine, seeds, h, l1, f1) - t1) + abs(_mean(engine, seeds, h, l2, f2) - t2)
        if miss < best[0]:
            best = (miss, h)
    h = best[1]
    lt, ft = e.ttft_fit
    return Host(h.ms, h.ms_per_seq, round(float(pub[lt][ft]) - _mean(engine, seeds, h, lt, ft), 1))


def _role(engine: str, label: str, fig: str) -> str:
    e = ENGINES[engine]
    return "fit" if (label, fig) in (*e.tpot_fit, e.ttft_fit) else "check"


def compare(engine: str, seeds: int, host: Host | None = None) -> list[dict[str, Any]]:
    """Every published figure of the engine: ``(run, figure, published, simulated with the
    shipped profile, simulated with the fitted host times, role)``, simulated figures the
    mean over ``seeds`` arrival draws."""
    host = ENGINES[engine].host if host is None else host
    pub = published(engine)
    bare, fitted = simulated(engine, seeds, Host()), simulated(engine, seeds, host)
    rows = []
    for label, run in pub.items():
        for fig in FIGURES:
            if fig not in run:
                continue
            rows.append(
                {
                    "run": label,
                    "figure": fig,
                    "published": float(run[fig]),
                    "shipped": float(np.mean([d[fig] for d in bare[label]])),
                    "fitted": float(np.mean([d[fig] for d in fitted[label]])),
                    "role": _role(engine, label, fig),
                }
            )
    return rows


def within(row: dict[str, Any], key: str = "fitted") -> bool:
    """Whether a row's ``key`` figure is within the issue's target of the published one."""
    tol = TARGET["p99"] if row["figure"].startswith("p99") else TARGET["other"]
    return abs(row[key] / row["published"] - 1.0) <= tol


def main(argv: list[str] | None = None) -> int:
    """Print the comparison tables (markdown), or refit the engines' host times."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="arrival draws per run (default 3)")
    ap.add_argument(
        "--engine",
        default="all",
        choices=[*ENGINES, "all"],
        help="whose runs to compare (default all)",
    )
    ap.add_argument(
        "--fit",
        action="store_true",
        help="refit each engine's host and API-server times on its fit figures and print them",
    )
    ap.add_argument("--extract", metavar="GIT_DIR", help="write the llm-k8s data file from its git")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        print(f"error: --seeds {args.seeds}: expected at least 1", file=sys.stderr)
        return 2
    if args.extract:
        extract(args.extract)
        print(f"wrote {DATA}")
        return 0
    engines = list(ENGINES) if args.engine == "all" else [args.engine]
    if args.fit:
        for name in engines:
            h = fit(name, args.seeds)
            print(
                f"{name}: {h.ms:g} ms an iteration, {h.ms_per_seq:g} ms a running request, "
                f"API server {h.api_ms:g} ms"
            )
        return 0
    for name in engines:
        h = ENGINES[name].host
        print(
            f"\n{name} ({ENGINES[name].source}; host {h.ms:g} ms an iteration, "
            f"{h.ms_per_seq:g} ms a running request, API server {h.api_ms:g} ms)\n"
        )
        print(
            "| run | figure | published ms | shipped profile | error | with the host times | error | role |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        rows = compare(name, args.seeds)
        for r in rows:
            print(
                f"| {r['run']} | {r['figure'].replace('_ms', '')} | {r['published']:.1f} | "
                f"{r['shipped']:.1f} | {r['shipped'] / r['published'] - 1:+.1%} | "
                f"{r['fitted']:.1f} | {r['fitted'] / r['published'] - 1:+.1%} | {r['role']} |"
            )
        checks = [r for r in rows if r["role"] == "check"]
        print(f"\nchecks within target: {sum(map(within, checks))} of {len(checks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
