"""What knowing the MMPP phase is worth: the numbers behind the bursty benchmark task.

For each setting (rates of the quiet and busy phase as fractions of the max throughput,
mean dwell per phase, energy weight, idle power) on the ResNet-50/V100 profile with
B = 32, it solves the phase-aware SMDP (:func:`baselines.smdp_mmpp.solve_mmpp`: the
oracle's gain, a bound for every phase-blind policy) and evaluates, exactly, the
phase-blind references: the best single control limit (serve ``min(s, B)`` once
``s >= t``, the best ``t``), the Poisson SMDP solved for the mean rate, and greedy.
"Phase value" = best control limit / oracle - 1.

    python scripts/phase_value.py [--out results/benchmark/phase_value.md]

Every figure is an exact long-run cost per second (policy evaluation by a linear solve),
so the table has no confidence intervals.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

from baselines.smdp import SMDPProblem, solve
from baselines.smdp_mmpp import MMPPProblem, policy_gain, solve_mmpp
from batch_env.profiles.batch_profile import load

PROFILE = "resnet50-v100"
B = 32
CAPACITY = 300
#: (quiet, busy) rates as fractions of the max throughput B / latency(B)
RATE_PAIRS = ((0.2, 1.1), (0.02, 0.6), (0.01, 0.5), (0.005, 0.3), (0.002, 0.3))
DWELLS_S = (0.05, 1.0, 3.0)
ENERGY_WEIGHTS = (0.5, 2.0)
IDLE_W = (None, 0.0)  # None: the profile's idle power


def row(lo: float, hi: float, dwell: float, w_energy: float, idle: float | None) -> dict:
    """Every figure of one setting."""
    prof = load(PROFILE)
    lat, en = prof.tables(B)
    mu = B / lat[B]
    idle_w = prof.idle_power_w if idle is None else idle
    q = 1.0 / dwell
    common = dict(
        latency_s=tuple(lat),
        energy_j=tuple(en),
        idle_power_w=idle_w,
        w_energy=w_energy,
        queue_capacity=CAPACITY,
    )
    pb = MMPPProblem(rates_per_s=(lo * mu, hi * mu), generator=((-q, q), (q, -q)), **common)
    t0 = time.perf_counter()
    sol = solve_mmpp(pb)
    s = np.arange(CAPACITY + 1)
    limits = [(policy_gain(pb, np.where(s >= t, np.minimum(s, B), 0)), t) for t in range(1, B + 1)]
    best_cl, best_t = min(limits)
    mean_rate = 0.5 * (lo + hi) * mu  # equal dwells: the stationary mean
    poisson = solve(SMDPProblem(rate_per_s=mean_rate, **common)).policy
    return {
        "rates": (lo, hi),
        "dwell_s": dwell,
        "w_energy": w_energy,
        "idle_w": idle_w,
        "oracle": sol.gain,
        "thresholds": sol.thresholds,
        "best_cl": best_cl,
        "best_t": best_t,
        "smdp_mean": policy_gain(pb, poisson),
        "greedy": policy_gain(pb, np.minimum(s, B)),
        "solve_s": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    """Compute the table and write it (markdown)."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--out", default="results/benchmark/phase_value.md", help="markdown output file"
    )
    args = ap.parse_args(argv)
    lines = [
        "# What knowing the MMPP phase is worth (`scripts/phase_value.py`)",
        "",
        f"Profile {PROFILE}, B = {B}, queue capacity {CAPACITY}, SLA weight 0, drop weight 1; "
        "two phases with equal mean dwell. Costs are exact long-run costs per second "
        "(lower is better). Phase value = best control limit / oracle - 1.",
        "",
        "| rates (x max tput) | dwell s | w_energy | idle W | oracle (phase-aware) | oracle thresholds "
        "| best control limit | phase value | Poisson SMDP at the mean rate | greedy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (lo, hi), dwell, we, idle in itertools.product(
        RATE_PAIRS, DWELLS_S, ENERGY_WEIGHTS, IDLE_W
    ):
        r = row(lo, hi, dwell, we, idle)
        o = r["oracle"]
        lines.append(
            f"| {lo:g} / {hi:g} | {dwell:g} | {we:g} | {r['idle_w']:g} | {o:.3f} | {r['thresholds']} "
            f"| {r['best_cl']:.3f} (t={r['best_t']}) | {100 * (r['best_cl'] / o - 1):.2f}% "
            f"| {r['smdp_mean']:.3f} ({100 * (r['smdp_mean'] / o - 1):+.2f}%) "
            f"| {r['greedy']:.3f} ({100 * (r['greedy'] / o - 1):+.2f}%) |"
        )
        print(lines[-1], flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
