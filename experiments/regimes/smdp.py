"""The SMDP regime map (``batch-env regimes smdp``): the SMDP seed's qualitative claims
checked across loads and energy weights, solved exactly.

The claims: the optimal policy has a control-limit structure (it waits below a threshold
and serves at and above it); it adapts to the load; it beats the benchmark policies
(greedy, static batch sizes, the SMDP policy planned for one load); the energy weight
trades power for latency. Each point is the batching SMDP of DynamicBatching-v0's
defaults with a profile, a load and an energy weight (:func:`baselines.smdp.solve`), every
benchmark's cost its exact average cost in the same SMDP
(:func:`baselines.smdp.policy_gain`); a truncation sweep gives the cost of bounding the
state space. It takes seconds.

Outputs in ``results/regimes/smdp/``: ``smdp.json`` (every point, the truncation sweep
and the claims), ``smdp.md`` (the claims table, every point's costs, the truncation) and
``smdp.png``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from baselines.smdp import SMDPProblem, policy_gain, solve
from batch_env.provenance import provenance, provenance_line
from experiments.harness.report import md_table, pyplot, save_figure
from experiments.harness.strict_json import strict

#: the SMDP map's grid: loads, energy weights, the benchmark static batch sizes, the load
#: the fixed (non-adaptive) SMDP policy is planned for, and the truncation levels
SMDP_GRID: dict[str, Any] = {
    # Inoue's affine fit (batch cost linear in b), and the table it fits (batch time nearly
    # flat to b = 8, then 0.14 ms a request)
    "profiles": ["resnet50-v100-linear", "resnet50-v100"],
    "loads": [0.1, 0.3, 0.5, 0.7, 0.9],
    "energy_weights": [0.0, 0.1, 0.5, 2.0],
    "static_sizes": [8, 16, 32],
    "planned_load": 0.5,
    "truncation_load": 0.9,
    "truncation_weight": 0.5,
    "max_states": [33, 40, 50, 70, 100, 150, 250, 500, 1000],
}
SMDP_SOURCE = (
    "the SMDP seed (batching as a semi-Markov decision process solved for the average cost, "
    "against fixed benchmark policies)"
)


def _smdp_problem(profile: str, load: float, w: float, **overrides: Any) -> Any:
    """The SMDP of DynamicBatching-v0's defaults (B = 32, no ticks) with ``profile`` at
    ``load`` and energy weight ``w`` (SLA weight 0, as the SMDP has no SLA)."""

    env = gym.make(
        "batch_env/DynamicBatching-v0",
        profile=profile,
        workload={"kind": "poisson", "load": load},
        reward_weights={"latency": 1.0, "energy": w, "sla": 0.0, "drop": 1.0},
    )
    try:
        return SMDPProblem.from_env(env, **overrides)
    finally:
        env.close()


def _is_control_limit(policy: np.ndarray, B: int) -> bool:
    """A control limit on when to serve: wait below a threshold, serve at and above it."""
    serving = np.flatnonzero(policy[1:] > 0)
    if serving.size == 0:
        return False
    t = int(serving[0]) + 1
    return bool(np.all(policy[t:] > 0) and np.all(policy[:t] == 0))


def _first_partial(policy: np.ndarray, B: int) -> int | None:
    """The smallest queue length at which the policy serves, but less than everything
    waiting (up to B); ``None`` when it always serves everything."""
    q = np.arange(policy.size)
    bad = np.flatnonzero((policy > 0) & (policy != np.minimum(q, B)))
    return int(bad[0]) if bad.size else None


def smdp_points(grid: dict[str, Any]) -> dict[str, Any]:
    """Per (load, energy weight): the optimal policy's threshold and whether it is a
    control limit, its exact cost and that of greedy, static batch sizes and the SMDP
    policy planned for one load, and the optimum's mean latency and power; and the
    truncation sweep (solve time and gain against the number of states)."""

    rows = []
    for prof in grid["profiles"]:
        planned = {
            w: solve(_smdp_problem(prof, grid["planned_load"], w)).policy
            for w in grid["energy_weights"]
        }
        for load in grid["loads"]:
            for w in grid["energy_weights"]:
                pb = _smdp_problem(prof, load, w)
                sol = solve(pb)
                B, q = pb.max_batch_size, np.arange(pb.n_states)
                costs = {"smdp": sol.gain, "greedy": policy_gain(pb, np.minimum(q, B))}
                for b in grid["static_sizes"]:
                    costs[f"static-{b}"] = policy_gain(pb, np.where(q >= b, np.minimum(q, B), 0))
                costs[f"smdp@{grid['planned_load']:g}"] = policy_gain(pb, planned[w])
                lat = policy_gain(replace(pb, w_latency=1.0, w_energy=0.0, w_drop=0.0), sol.policy)
                power = policy_gain(
                    replace(pb, w_latency=0.0, w_energy=1.0, w_drop=0.0), sol.policy
                )
                rows.append(
                    {
                        "profile": prof,
                        "load": load,
                        "energy_weight": w,
                        "threshold": sol.threshold,
                        "control_limit": _is_control_limit(sol.policy, B),
                        "serves_all": _first_partial(sol.policy, B) is None,
                        "first_partial_queue": _first_partial(sol.policy, B),
                        "cost_per_s": costs,
                        "latency_mean_ms": 1e3 * lat / pb.rate_per_s,
                        "power_mean_w": power,
                        "solve_time_s": sol.solve_time_s,
                    }
                )
    trunc = []
    prof = grid["profiles"][0]
    full = solve(_smdp_problem(prof, grid["truncation_load"], grid["truncation_weight"]))
    for m in [*grid["max_states"], None]:
        pb = _smdp_problem(prof, grid["truncation_load"], grid["truncation_weight"], max_states=m)
        sol = full if m is None else solve(pb)
        trunc.append(
            {
                "n_states": pb.n_states,
                "truncated": pb.truncated,
                "gain": sol.gain,
                "gain_error": sol.gain / full.gain - 1.0,
                "solve_time_s": sol.solve_time_s,
                "threshold": sol.threshold,
            }
        )
    return {"grid": grid, "points": rows, "truncation": trunc}


def smdp_claims(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The seed's claims, checked on every point of the grid, per profile."""
    out = []
    planned = f"smdp@{data['grid']['planned_load']:g}"
    for prof in data["grid"]["profiles"]:
        pts = [p for p in data["points"] if p["profile"] == prof]
        limit = sum(p["control_limit"] for p in pts)
        whole = sum(p["control_limit"] and p["serves_all"] for p in pts)
        margins = []  # the best benchmark's cost over the optimum's, per point
        for p in pts:
            c = p["cost_per_s"]
            margins.append(min(v for k, v in c.items() if k != "smdp") / c["smdp"] - 1.0)
        # the energy weight trades power for latency: at each load, as the weight grows,
        # power never rises and latency never falls
        loads = sorted({p["load"] for p in pts})
        trade = 0
        for ld in loads:
            seq = sorted((p for p in pts if p["load"] == ld), key=lambda p: p["energy_weight"])
            pw = [p["power_mean_w"] for p in seq]
            lt = [p["latency_mean_ms"] for p in seq]
            trade += all(b <= a + 1e-9 for a, b in zip(pw, pw[1:], strict=False)) and all(
                b >= a - 1e-9 for a, b in zip(lt, lt[1:], strict=False)
            )
        adapt = [p["cost_per_s"][planned] / p["cost_per_s"]["smdp"] - 1 for p in pts]
        moved = sum(
            len({p["threshold"] for p in pts if p["energy_weight"] == w}) > 1
            for w in data["grid"]["energy_weights"]
        )
        partial = [
            f"load {p['load']:g}/weight {p['energy_weight']:g} from queue "
            f"{p['first_partial_queue']}"
            for p in pts
            if p["control_limit"] and not p["serves_all"]
        ]
        out += [
            {
                "profile": prof,
                "claim": "the optimal policy has a control-limit structure (waits below a "
                "threshold, serves at and above it)",
                "holds_at": f"{limit} of {len(pts)} points",
                "detail": f"and serves everything waiting (up to B) at {whole}"
                + (
                    f"; elsewhere it serves part of the queue from some queue length on "
                    f"({', '.join(partial)})"
                    if partial
                    else ""
                ),
            },
            {
                "profile": prof,
                "claim": "SMDP policies beat the benchmark policies",
                "holds_at": f"{sum(m >= -1e-9 for m in margins)} of {len(pts)} points",
                "detail": f"the best of greedy and static batching costs {min(margins):.2%} to "
                f"{max(margins):.2%} more (0% where it is optimal too)",
            },
            {
                "profile": prof,
                "claim": "SMDP policies adapt to traffic intensity",
                "holds_at": f"thresholds move with the load at {moved} of "
                f"{len(data['grid']['energy_weights'])} energy weights",
                "detail": f"the policy planned for load {data['grid']['planned_load']:g} costs "
                f"up to {max(adapt):.1%} more than the one re-solved at the load",
            },
            {
                "profile": prof,
                "claim": "the energy weight trades power for latency",
                "holds_at": f"{trade} of {len(loads)} loads",
                "detail": "as the weight grows, power never rises and latency never falls",
            },
        ]
    return out


def smdp_markdown(data: dict[str, Any], claims: list[dict[str, Any]]) -> str:
    """The claims table, every point's costs, and the truncation sweep."""
    g = data["grid"]
    names = list(data["points"][0]["cost_per_s"])
    lines = [
        "# The SMDP seed's claims, across loads and energy weights",
        "",
        "`batch-env regimes smdp`: the batching SMDP of DynamicBatching-v0's defaults "
        f"(B = 32, idle 55 W, Poisson arrivals, latency weight 1, SLA weight 0) with the "
        f"profiles {g['profiles']} (Inoue's affine fit of ResNet-50 on a V100, and the table "
        f"it fits) at loads {g['loads']} and energy weights {g['energy_weights']}, solved "
        "exactly (`baselines.smdp.solve`); every benchmark policy's cost is its exact "
        "average cost in the same SMDP (`baselines.smdp.policy_gain`). Triton's timeout "
        "policy is not in the table: it depends on how long the oldest request has waited, "
        "which the SMDP's state does not hold.",
        "",
        *md_table(
            ("profile", "claim", "holds at", "detail"),
            ((c["profile"], c["claim"], c["holds_at"], c["detail"]) for c in claims),
        ),
        "",
        "## Every point (cost per second; the benchmarks' relative to the optimum)",
        "",
    ]
    rows = []
    for p in data["points"]:
        c = p["cost_per_s"]
        rows.append(
            (
                p["profile"],
                f"{p['load']:g}",
                f"{p['energy_weight']:g}",
                p["threshold"],
                "yes" if p["serves_all"] else "no",
                f"{p['latency_mean_ms']:.3f}",
                f"{p['power_mean_w']:.1f}",
                f"{c['smdp']:.3f}",
                *(f"{c[k] / c['smdp'] - 1:+.2%}" for k in names[1:]),
            )
        )
    header = (
        "profile",
        "load",
        "energy weight",
        "threshold",
        "serves all",
        "mean latency ms",
        "power W",
        *names,
    )
    lines += md_table(header, rows)
    lines += [
        "",
        f"## Truncation ({g['profiles'][0]}, load {g['truncation_load']:g}, energy weight "
        f"{g['truncation_weight']:g})",
        "",
        "The state space stops at `max_states`; a request beyond it is charged the abstract "
        "cost of draining at full batches (`baselines.smdp`).",
        "",
        *md_table(
            (
                "states",
                "truncated",
                "gain (cost per s)",
                "gain error",
                "solve time s",
                "threshold",
            ),
            (
                (
                    t["n_states"],
                    "yes" if t["truncated"] else "no",
                    f"{t['gain']:.6f}",
                    f"{t['gain_error']:+.2e}",
                    f"{t['solve_time_s']:.3f}",
                    t["threshold"],
                )
                for t in data["truncation"]
            ),
        ),
    ]
    return "\n".join(lines) + "\n"


def smdp_figure(data: dict[str, Any], path: Path) -> Path:
    """Four panels: the optimum's threshold by load and weight (solid: the first profile;
    dashed: the second; hollow markers where it serves partial batches); the benchmarks'
    cost over the optimum by load; the latency-power trade-off as the weight grows; the
    truncation's gain error and solve time by the number of states."""
    plt = pyplot()

    g, pts = data["grid"], data["points"]
    profs, loads, ws = g["profiles"], g["loads"], g["energy_weights"]

    def at(prof: str, ld: float, w: float) -> dict[str, Any]:
        return next(
            p for p in pts if p["profile"] == prof and p["load"] == ld and p["energy_weight"] == w
        )

    fig, ax = plt.subplots(2, 2, figsize=(10, 7.5))
    for i, w in enumerate(ws):
        for k, prof in enumerate(profs):
            rows = [at(prof, ld, w) for ld in loads]
            ax[0, 0].plot(
                loads,
                [r["threshold"] if r["threshold"] is not None else np.nan for r in rows],
                color=f"C{i}",
                ls="-" if k == 0 else "--",
                label=f"weight {w:g}" if k == 0 else None,
            )
            for ld, r in zip(loads, rows, strict=True):
                ax[0, 0].plot(
                    ld, r["threshold"], "o", color=f"C{i}", mfc=f"C{i}" if r["serves_all"] else "w"
                )
    ax[0, 0].set(
        xlabel="load",
        ylabel="threshold (serve at queue >= it)",
        title=f"control limit (solid {profs[0]}, dashed {profs[-1]};\nhollow: partial batches)",
    )
    ax[0, 0].title.set_fontsize(9)
    ax[0, 0].legend(fontsize=8)
    w_mid = g["truncation_weight"] if g["truncation_weight"] in ws else ws[len(ws) // 2]
    prof = profs[-1]
    for k in [k for k in pts[0]["cost_per_s"] if k != "smdp"]:
        rel = [
            100
            * (at(prof, ld, w_mid)["cost_per_s"][k] / at(prof, ld, w_mid)["cost_per_s"]["smdp"] - 1)
            for ld in loads
        ]
        ax[0, 1].plot(loads, rel, marker="o", label=k)
    ax[0, 1].set_yscale("symlog", linthresh=1.0)
    ax[0, 1].set(xlabel="load", ylabel="cost over the optimum (%)")
    ax[0, 1].set_title(f"benchmarks against the optimum ({prof}, weight {w_mid:g})", fontsize=9)
    ax[0, 1].legend(fontsize=8)
    for ld in loads:
        seq = [at(prof, ld, w) for w in ws]
        ax[1, 0].plot(
            [p["power_mean_w"] for p in seq],
            [p["latency_mean_ms"] for p in seq],
            marker="o",
            label=f"load {ld:g}",
        )
    ax[1, 0].set(xlabel="mean power (W)", ylabel="mean latency (ms)")
    ax[1, 0].set_title(
        f"energy weight {ws[0]:g} -> {ws[-1]:g}: power for latency ({prof})", fontsize=9
    )
    ax[1, 0].legend(fontsize=8)
    tr = data["truncation"]
    n = [t["n_states"] for t in tr]
    ax[1, 1].plot(n, [max(abs(t["gain_error"]), 1e-16) for t in tr], marker="o", color="C0")
    ax[1, 1].set(xscale="log", yscale="log", xlabel="states", ylabel="|gain error| (blue)")
    ax[1, 1].set_title(
        f"truncation ({profs[0]}, load {g['truncation_load']:g}, weight {g['truncation_weight']:g})",
        fontsize=9,
    )
    twin = ax[1, 1].twinx()
    twin.plot(n, [t["solve_time_s"] for t in tr], marker="s", color="C3")
    twin.set_ylabel("solve time (s, red)", color="C3")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    return path


def run_smdp_map(
    results_dir: str | Path = "results/regimes",
    grid: dict[str, Any] | None = None,
    name: str = "smdp",
) -> dict[str, Any]:
    """Check the SMDP seed's claims across loads and energy weights, exactly; write
    ``smdp.json``, ``smdp.md`` and ``smdp.png`` to ``<results_dir>/<name>/``."""
    g = dict(grid if grid is not None else SMDP_GRID)
    data = smdp_points(g)
    claims = smdp_claims(data)
    out = Path(results_dir) / name
    out.mkdir(parents=True, exist_ok=True)
    where = provenance()
    md = smdp_markdown(data, claims) + "\n" + provenance_line(where) + "\n"
    (out / "smdp.md").write_text(md)
    (out / "smdp.json").write_text(
        json.dumps(strict({**data, "claims": claims, "provenance": where}), allow_nan=False)
    )
    smdp_figure(data, out / "smdp.png")
    return {"dir": str(out), "claims": claims, "markdown": md, **data}
