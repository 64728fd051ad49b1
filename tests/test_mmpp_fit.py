"""``smdp-belief-fit`` (``baselines.mmpp_fit``): the MMPP fitted from observed intervals, and
the phase-aware policy acting on it without reading the workload's parameters."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import baselines
import batch_env
from baselines.mmpp_fit import MMPPFittedBeliefPolicy, fit_mmpp2, step_observations
from batch_env import tasks


def _mmpp_intervals(n: int, seed: int = 0) -> tuple[list[float], list[int], float]:
    """``n`` intervals of 5-20 ms of a two-phase MMPP (25 and 1,500 per s, leaving the
    first phase once a second and the second four times a second on average), cut at the
    switches; and the time they span."""
    rng = np.random.default_rng(seed)
    lam, t, k = (25.0, 1500.0), 0.0, 0
    d: list[float] = []
    a: list[int] = []
    while len(d) < n:
        end = t + rng.exponential(1.0 if k == 0 else 0.25)
        while t < end and len(d) < n:
            x = min(rng.uniform(0.005, 0.02), end - t)
            d.append(x)
            a.append(int(rng.poisson(lam[k] * x)))
            t += x
        k = 1 - k
    return d, a, t


def test_em_recovers_the_rates_and_switching_rates_of_an_mmpp():
    """About 500 s and 800 switches: the rates within 3%, the switching rates within 20%
    (their standard error is about 5% at 400 switches out of each phase)."""
    d, a, span = _mmpp_intervals(40_000)
    assert span > 400
    fit = fit_mmpp2(d, a)
    assert fit.rates_per_s == pytest.approx((25.0, 1500.0), rel=0.03)
    assert fit.switch_rates_per_s == pytest.approx((1.0, 4.0), rel=0.2)
    assert sum(fit.stationary) == pytest.approx(1.0) and sum(fit.belief) == pytest.approx(1.0)
    assert 1 < fit.iterations < 200  # converged, not cut
    # a warm start from the fit stays there
    again = fit_mmpp2(d, a, start=fit)
    assert again.rates_per_s == pytest.approx(fit.rates_per_s, rel=1e-4)
    assert again.iterations <= 3


def test_the_observations_account_for_every_arrival_and_all_the_time():
    """On a Bursty-v0 episode, the intervals one step shows add up to the time now and
    their arrivals to every arrival so far (admitted or dropped)."""
    env = gym.make("batch_env/Bursty-v0", horizon_requests=3_000, warmup_requests=0)
    policy = baselines.make("greedy", env=env.unwrapped)
    _, info = env.reset(seed=5)
    last, t, n, steps = None, 0.0, 0, 0
    done = False
    while not done and steps < 100_000:
        seen, last = step_observations(info, last)
        t += sum(x for x, _ in seen)
        n += sum(k for _, k in seen)
        core = env.unwrapped
        assert t == pytest.approx(float(info["now_s"]), abs=1e-9)
        assert n == core.arrival_index  # every arrival processed by now
        _, _, term, trunc, info = env.step(policy.act(None, info))
        done = term or trunc
        steps += 1
    assert done and n >= 3_000


def test_the_policy_does_not_read_the_workloads_rates():
    """Built on an env whose MMPP has other rates and switching rates than the env it runs
    on, it acts the same, episode for episode: it knows only what it observed."""
    kwargs = dict(tasks.get("batch_env/Bursty-v0").kwargs, horizon_requests=30_000)
    other = dict(
        kwargs,
        workload={"kind": "mmpp", "rates_per_s": [100.0, 900.0], "switch_rates_per_s": [3.0, 0.2]},
    )
    env = gym.make("batch_env/DynamicBatching-v0", **kwargs)
    mine = MMPPFittedBeliefPolicy(env.unwrapped, first_fit=500)
    told = MMPPFittedBeliefPolicy(
        gym.make("batch_env/DynamicBatching-v0", **other).unwrapped, first_fit=500
    )
    a = batch_env.evaluate(mine, env, n_episodes=2, seed=3)
    b = batch_env.evaluate(told, env, n_episodes=2, seed=3)
    assert list(a.values("reward_rate_per_s")) == list(b.values("reward_rate_per_s"))
    assert len(mine.fits) >= 3  # it fitted, and refitted as its observations doubled
    assert mine.fits[-1].rates_per_s == pytest.approx((25.1, 1507.1), rel=0.1)


@pytest.mark.slow
def test_on_bursty_it_comes_within_half_a_percent_of_the_policy_told_the_mmpp():
    """Bursty-v0 (100,000 requests, two seeds): on each, within 0.5% of ``smdp-belief``
    (told the MMPP's parameters) and cheaper than ``smdp-adaptive`` (which does not model
    the phases) by more than 1%."""
    env = gym.make("batch_env/Bursty-v0", horizon_requests=100_000)
    rates = {
        name: batch_env.evaluate(baselines.make(name, env=env.unwrapped), env, 2, seed=1000).values(
            "reward_rate_per_s"
        )
        for name in ("smdp-belief", "smdp-belief-fit", "smdp-adaptive")
    }
    told, fit, blind = rates["smdp-belief"], rates["smdp-belief-fit"], rates["smdp-adaptive"]
    assert (np.abs(fit - told) <= 0.005 * np.abs(told)).all(), rates
    assert (fit - blind > 0.01 * np.abs(blind)).all(), rates


def test_bad_input_is_refused_by_name():
    env = gym.make("batch_env/Bursty-v0")
    with pytest.raises(ValueError, match="smdp-belief-fit needs env="):
        MMPPFittedBeliefPolicy()
    with pytest.raises(ValueError, match="first_fit"):
        MMPPFittedBeliefPolicy(env.unwrapped, first_fit=10)
    with pytest.raises(ValueError, match="window"):
        MMPPFittedBeliefPolicy(env.unwrapped, first_fit=1_000, window=500)
    with pytest.raises(ValueError, match="MMPP workload"):
        MMPPFittedBeliefPolicy(gym.make("batch_env/DynamicBatching-v0").unwrapped)
    with pytest.raises(ValueError, match="one length"):
        fit_mmpp2([0.1, 0.2], [1])
    with pytest.raises(ValueError, match="durations_s"):
        fit_mmpp2([0.1, float("nan")], [1, 0])
    with pytest.raises(ValueError, match="arrivals must be integers"):
        fit_mmpp2([0.1, 0.2], [0, 0])
    with pytest.raises(ValueError, match="arrivals must be integers"):
        fit_mmpp2([0.1, 0.2], [1.5, 0])
