"""How a task's figures are scored against its stored references: ``batch_env`` scores a
task, ``experiments`` runs its protocol and reports (``batch-env benchmark``).

* :func:`paired_score`: a figure's normalized score (:func:`batch_env.tasks.score_span`'s
  0 and 1) with its 95% CI paired per seed against greedy's stored figures on the
  protocol's seeds; on a task whose bound differs per seed, the mean cost ratio to it
  (:func:`ratio_to_bound`); the gain over the task's best constant action
  (:data:`BEST_CONSTANT`), % of its cost, paired per seed; and the score above random
  play (Atari's normalisation: 0 at the stored random valid actions, 1 at the same top),
  paired per seed against random's figures (``docs/benchmark.md``: the zero point);
* :func:`summarize_rates`: a protocol's per-seed rates as a figure (mean and CI, the mean
  of the load cells' means on a load-grid task);
* :func:`protocol_part`, :func:`seed_loads`, :func:`bound_at_seeds`: a figure's part on
  the protocol's seeds, their loads and the bound at them;
* :func:`top_candidates`: the references that may be a task's score's 1.

The statistics are the evaluation harness's (:func:`batch_env.evaluate.ci_half_width`,
:func:`batch_env.evaluate.grouped_mean`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .evaluate import ci_half_width, grouped_mean
from .tasks import Task, references, score_span
from .tasks import get as get_task

__all__ = [
    "BEST_CONSTANT",
    "bound_at_seeds",
    "paired_score",
    "protocol_part",
    "ratio_to_bound",
    "seed_loads",
    "summarize_rates",
    "top_candidates",
]

#: the label of each task's best constant action among its references
BEST_CONSTANT = "best-constant"


def summarize_rates(
    rates: list[float], loads: list[float] | tuple[float, ...] = ()
) -> dict[str, Any]:
    """Mean, Student-t 95% half-width and the per-seed figures (``loads``: each
    episode's load on a load-grid protocol, see :func:`ci_half_width`)."""
    arr = np.asarray(rates, dtype=np.float64)
    return {
        "reward_rate_per_s": grouped_mean(arr, loads),
        "ci95": ci_half_width(arr, loads),
        "per_seed": arr.tolist(),
    }


def ratio_to_bound(
    per_seed: list[float], bound_per_seed: list[float], loads: list[float] | tuple[float, ...] = ()
) -> dict[str, float]:
    """The mean over seeds of the cost ratio to the seed's own bound (1 at the bound,
    1.05 for 5% more cost), with its 95% half-width: for tasks whose bound differs per
    seed (the any-load task)."""
    r = np.asarray(per_seed, dtype=np.float64) / np.asarray(bound_per_seed, dtype=np.float64)
    return {
        "ratio_to_bound": grouped_mean(r, loads),
        "ratio_to_bound_ci95": ci_half_width(r, loads),
    }


def protocol_part(task: Task, fig: dict[str, Any]) -> list[float] | None:
    """A figure's per-seed rates on the task's protocol seeds, in their order (a reference
    may hold extra seeds after them, see :func:`experiments.benchmark.extend_to_precision`); ``None`` when the
    figure is not on the protocol's seeds."""
    seeds = list(fig.get("seeds", []))
    n = len(task.seeds)
    if seeds[:n] != list(task.seeds) or len(fig.get("per_seed", [])) != len(seeds):
        return None
    return list(fig["per_seed"][:n])


def seed_loads(task: Task, seeds: list[int] | tuple[int, ...]) -> tuple[float, ...]:
    """Each seed's load on a load-grid task when ``seeds`` hold the whole protocol (and
    perhaps extra seeds), so that the figure is the grid's mean; ``()`` otherwise."""
    if not task.eval_loads or list(seeds[: len(task.seeds)]) != list(task.seeds):
        return ()
    loads = [task.load_of(s) for s in seeds]
    return tuple(x for x in loads if x is not None) if None not in loads else ()


def bound_at_seeds(ref: dict[str, Any], loads: tuple[float, ...]) -> list[float] | None:
    """The per-seed bound of a task whose bound differs per seed (it depends on the seed's
    load only), at ``loads``; ``None`` when the references have none."""
    if "bound_per_seed" not in ref or not loads:
        return None
    by_load = dict(zip(ref["loads_per_seed"], ref["bound_per_seed"], strict=True))
    return [by_load[x] for x in loads] if all(x in by_load for x in loads) else None


def paired_score(
    task_id: str, per_seed: list[float], seeds: list[int], ref: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The normalized score and its 95% half-width, paired per seed against greedy's
    stored figures on the protocol's seeds (same arrivals: the spread between seeds
    cancels); ``{}`` when the task has no references. Seeds that are not the protocol's
    get the score without a CI; a figure with extra seeds after the protocol's (a
    reference, :func:`experiments.benchmark.extend_to_precision`) is scored on all of them and paired on the
    protocol's.

    :param ref: the task's references (default: the stored ones,
        :func:`batch_env.tasks.references`).
    """
    ref = references().get(task_id) if ref is None else ref
    if ref is None:
        return {}
    task = get_task(task_id)
    try:
        low, top = score_span(ref, task_id)
    except ValueError as e:  # no bound and nothing above greedy: no score
        return {"normalized_score": None, "score_note": str(e)}
    span = top - low
    loads = seed_loads(task, seeds)
    # tasks.normalized_score's formula, against ``ref``
    out: dict[str, Any] = {"normalized_score": (grouped_mean(per_seed, loads) - low) / span}
    fig = {"seeds": list(seeds), "per_seed": list(per_seed)}
    mine, greedy = protocol_part(task, fig), protocol_part(task, ref["policies"]["greedy"])
    if mine is not None and greedy is not None:
        diff = np.asarray(mine) - np.asarray(greedy)
        out["normalized_score_ci95"] = ci_half_width(diff, task.eval_loads) / abs(span)
    bound = bound_at_seeds(ref, loads)
    if bound is not None:
        out.update(ratio_to_bound(per_seed, bound, loads))
    rnd = ref["policies"].get("random")
    rnd_seeds = None if rnd is None else protocol_part(task, rnd)
    if rnd is not None and float(rnd["reward_rate_per_s"]) < top:
        zero = float(rnd["reward_rate_per_s"])
        out["score_vs_random"] = (grouped_mean(per_seed, loads) - zero) / (top - zero)
        if mine is not None and rnd_seeds is not None:
            diff = np.asarray(mine) - np.asarray(rnd_seeds)
            out["score_vs_random_ci95"] = ci_half_width(diff, task.eval_loads) / (top - zero)
    const = ref["policies"].get(BEST_CONSTANT)
    base = None if const is None else protocol_part(task, const)
    if mine is not None and base is not None:
        # the gain over the best constant action, % of its cost, paired per seed
        grid = tuple(task.eval_loads or ())
        cost = abs(grouped_mean(base, grid))
        gain = np.asarray(mine) - np.asarray(base)
        out["gain_over_best_constant_pct"] = 100 * grouped_mean(gain, grid) / cost
        out["gain_over_best_constant_ci95_pct"] = 100 * ci_half_width(gain, grid) / cost
    return out


def top_candidates(entry: dict[str, Any]) -> dict[str, Any]:
    """The references of a task that may be its score's 1 where it has no bound: every
    realizable one but the best constant action, a yardstick (on two LLM tasks it equals
    the tuned static setting ``budget-best`` to 1e-5 of the figure, at another cap)."""
    return {
        k: v for k, v in entry["policies"].items() if not v.get("oracle") and k != BEST_CONSTANT
    }
