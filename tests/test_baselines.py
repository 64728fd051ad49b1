"""Baseline policies: exact decision rules, parameter validation, and full episodes.

Unit tests feed hand-made ``info`` dicts (the policies read only ``info``); episode tests
run each policy through :func:`batch_env.evaluate` with a wrapper that checks every action
against ``info["action_mask"]`` and records what the policy saw and did.
"""

from __future__ import annotations

import math
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import batch_env
from baselines.aimd import AIMDPolicy
from baselines.common import TIME_TOLERANCE_S, max_batch_size_of, waited_at_least
from baselines.heuristics import GreedyPolicy, StaticPolicy
from baselines.heuristics import max_batch_size_of as heuristics_max_batch_size_of
from baselines.timeouts import TFServingPolicy, TritonTimeoutPolicy

ENV_ID = "batch_env/DynamicBatching-v0"
TICK_MS = 0.5


def make_env(load: float = 0.6, **kwargs: Any) -> gym.Env:
    """The env the episode tests use: ticks every 0.5 ms, 500 summary requests."""
    kwargs.setdefault("decision_interval_ms", TICK_MS)
    return gym.make(
        ENV_ID, horizon_requests=500, workload={"kind": "poisson", "load": load}, **kwargs
    )


def info(q: int, wait_ms: float = 0.0, last_b: int = 0, last_lat_ms: float = 0.0) -> dict:
    """A hand-made ``info`` with the fields the baselines read."""
    return {
        "queue_len": q,
        "oldest_wait_s": wait_ms * 1e-3,
        "last_batch_size": last_b,
        "last_batch_latency_s": last_lat_ms * 1e-3,
    }


OBS = np.zeros(5, dtype=np.float32)


class Checked:
    """Wraps a policy: asserts each action is valid under ``info["action_mask"]``, records.

    ``log`` holds ``(queue_len, oldest_wait_s, last_batch_size, last_batch_latency_s,
    action)`` for every decision of every episode.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.name = getattr(policy, "name", type(policy).__name__)
        self.log: list[tuple[int, float, int, float, int]] = []
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1
        self.policy.reset()

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        a = self.policy.act(obs, info)
        assert isinstance(a, (int, np.integer)), a
        mask = info["action_mask"]
        assert 0 <= a < len(mask) and mask[a], (a, info["queue_len"], mask)
        self.log.append(
            (
                info["queue_len"],
                info["oldest_wait_s"],
                info["last_batch_size"],
                info["last_batch_latency_s"],
                int(a),
            )
        )
        return int(a)


def run(policy: Any, env: gym.Env, n: int = 2, seed: int = 0) -> tuple[Checked, Any]:
    """Evaluate ``policy`` (mask-checked) for ``n`` episodes."""
    checked = Checked(policy)
    result = batch_env.evaluate(checked, env, n_episodes=n, seed=seed)
    assert checked.resets == n
    return checked, result


def message(name: str, value: Any) -> str:
    """Regex matching ``name=value!r`` in an error message."""
    return re.escape(f"{name}={value!r}")


# -- shared pieces --------------------------------------------------------------------


def test_max_batch_size_of_still_importable_from_heuristics() -> None:
    assert heuristics_max_batch_size_of is max_batch_size_of
    env = make_env(max_batch_size=16)
    assert max_batch_size_of(env) == 16  # through gym.make's wrappers
    assert max_batch_size_of(None, default=8) == 8


def test_waited_at_least_forgives_float_rounding_only() -> None:
    # Ticks accumulate as now + interval: a wait meant to be 1 ms can be a few ulps short.
    t0 = 0.123456789
    t = (t0 + 0.0005) + 0.0005
    assert waited_at_least(t - t0, 1.0)
    assert waited_at_least(0.001 - TIME_TOLERANCE_S / 2, 1.0)
    assert not waited_at_least(0.001 - 1e-7, 1.0)
    assert waited_at_least(0.0, 0.0)


# -- static ---------------------------------------------------------------------------


def test_static_rule_without_timeout() -> None:
    p = StaticPolicy(make_env(max_batch_size=16), batch_size=8)
    assert p.name == "static"
    for q, wait_ms in [(1, 0.0), (7, 0.0), (7, 1000.0)]:
        assert p.act(OBS, info(q, wait_ms)) == 0
    for q in (8, 9, 100):
        assert p.act(OBS, info(q, 0.0)) == 8


def test_static_rule_with_timeout() -> None:
    p = StaticPolicy(make_env(max_batch_size=16), batch_size=8, timeout_ms=2.0)
    assert p.act(OBS, info(3, 1.9)) == 0
    assert p.act(OBS, info(3, 2.0)) == 3
    assert p.act(OBS, info(3, 2.5)) == 3
    assert p.act(OBS, info(8, 0.0)) == 8
    assert p.act(OBS, info(12, 5.0)) == 8  # min(q, b)


def test_static_default_batch_size_is_env_max() -> None:
    assert StaticPolicy(make_env(max_batch_size=12)).batch_size == 12


@pytest.mark.parametrize("batch_size", [0, 33, -1, 2.5, True])
def test_static_rejects_bad_batch_size(batch_size: Any) -> None:
    with pytest.raises(ValueError, match=message("batch_size", batch_size)):
        StaticPolicy(make_env(max_batch_size=32), batch_size=batch_size)


@pytest.mark.parametrize("timeout_ms", [-1.0, math.nan, math.inf, "1"])
def test_static_rejects_bad_timeout(timeout_ms: Any) -> None:
    with pytest.raises(ValueError, match=message("timeout_ms", timeout_ms)):
        StaticPolicy(make_env(), batch_size=4, timeout_ms=timeout_ms)


def test_static_timeout_needs_ticks_but_plain_static_does_not() -> None:
    env = make_env(decision_interval_ms=None)
    with pytest.raises(ValueError, match="timeout_ms=2.0") as err:
        StaticPolicy(env, batch_size=8, timeout_ms=2.0)
    assert "decision_interval_ms" in str(err.value)
    assert "ticks off" in str(err.value)
    # Without a timeout, arrivals are epochs: b > 1 works without ticks.
    checked, result = run(StaticPolicy(env, batch_size=4), env)
    assert result.mean("batch_size_mean") == 4.0
    assert all(a in (0, 4) for *_, a in checked.log)


def test_static_episode_runs_full_batches_only() -> None:
    env = make_env(load=0.6)
    checked, result = run(StaticPolicy(env, batch_size=8), env)
    assert result.mean("batch_size_mean") == pytest.approx(8.0)
    served = [a for *_, a in checked.log if a]
    assert served and set(served) == {8}
    assert all((a == 8) == (q >= 8) for q, _, _, _, a in checked.log)
    assert result.mean("dropped") == 0


def test_static_timeout_episode_at_low_load() -> None:
    env = make_env(load=0.05)
    timeout_ms = 2.0
    checked, result = run(StaticPolicy(env, batch_size=8, timeout_ms=timeout_ms), env)
    # At 5% load 8 requests rarely gather within 2 ms: most batches are partial.
    assert 1.0 < result.mean("batch_size_mean") < 3.0
    for q, w, _, _, a in checked.log:
        if a == 0:
            assert q < 8 and w < timeout_ms * 1e-3
        else:
            assert a == min(q, 8)
            assert q >= 8 or w >= timeout_ms * 1e-3 - TIME_TOLERANCE_S


# -- Triton ---------------------------------------------------------------------------


def test_triton_rule_with_preferred_sizes() -> None:
    p = TritonTimeoutPolicy(
        make_env(max_batch_size=16), preferred_batch_sizes=(8, 4), max_queue_delay_ms=1.0
    )
    assert p.name == "timeout"
    assert p.preferred_batch_sizes == (4, 8)
    assert p.act(OBS, info(5, 0.0)) == 4
    assert p.act(OBS, info(4, 0.0)) == 4
    assert p.act(OBS, info(9, 0.0)) == 8
    assert p.act(OBS, info(15, 0.0)) == 8
    assert p.act(OBS, info(3, 0.5)) == 0
    assert p.act(OBS, info(3, 1.2)) == 3
    assert p.act(OBS, info(3, 1.0)) == 3
    assert p.act(OBS, info(16, 0.0)) == 16
    assert p.act(OBS, info(20, 0.0)) == 16
    # A preferred size that fits beats the timeout: the largest fitting one runs.
    assert p.act(OBS, info(7, 50.0)) == 4


def test_triton_rule_without_preferred_sizes() -> None:
    p = TritonTimeoutPolicy(make_env(max_batch_size=16), max_queue_delay_ms=2.0)
    assert p.act(OBS, info(15, 1.9)) == 0
    assert p.act(OBS, info(15, 2.0)) == 15
    assert p.act(OBS, info(1, 2.1)) == 1
    assert p.act(OBS, info(16, 0.0)) == 16


def test_triton_max_batch_size_override() -> None:
    p = TritonTimeoutPolicy(make_env(max_batch_size=32), max_batch_size=10)
    assert p.act(OBS, info(25, 0.0)) == 10
    assert p.act(OBS, info(9, 0.0)) == 0


def test_triton_refuses_env_without_ticks() -> None:
    env = make_env(decision_interval_ms=None)
    with pytest.raises(ValueError, match="max_queue_delay_ms=1.0") as err:
        TritonTimeoutPolicy(env)
    text = str(err.value)
    assert "decision_interval_ms is None" in text
    assert "decision_interval_ms=0.5" in text  # how to set it


@pytest.mark.parametrize(
    ("params", "name", "value"),
    [
        ({"max_batch_size": 0}, "max_batch_size", 0),
        ({"max_batch_size": 17}, "max_batch_size", 17),
        ({"preferred_batch_sizes": (0, 4)}, "preferred_batch_sizes", (0, 4)),
        ({"preferred_batch_sizes": (4, 17)}, "preferred_batch_sizes", (4, 17)),
        ({"preferred_batch_sizes": [2.5]}, "preferred_batch_sizes", [2.5]),
        ({"preferred_batch_sizes": 4}, "preferred_batch_sizes", 4),
        ({"max_batch_size": 8, "preferred_batch_sizes": (12,)}, "preferred_batch_sizes", (12,)),
        ({"max_queue_delay_ms": -0.5}, "max_queue_delay_ms", -0.5),
        ({"max_queue_delay_ms": math.nan}, "max_queue_delay_ms", math.nan),
    ],
)
def test_triton_rejects_bad_params(params: dict, name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=message(name, value)):
        TritonTimeoutPolicy(make_env(max_batch_size=16), **params)


def test_triton_preferred_size_error_names_the_bad_size() -> None:
    with pytest.raises(ValueError, match=r"size 17 is not an integer in 1\.\.16"):
        TritonTimeoutPolicy(make_env(max_batch_size=16), preferred_batch_sizes=(4, 17))


def test_triton_without_env_needs_max_batch_size() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        TritonTimeoutPolicy(None)
    p = TritonTimeoutPolicy(None, max_batch_size=16, preferred_batch_sizes=(4, 8))
    assert p.act(OBS, info(5)) == 4


def test_triton_zero_delay_is_greedy() -> None:
    env = make_env(load=0.6)
    _, greedy = run(GreedyPolicy(env), env, n=3)
    checked, triton = run(TritonTimeoutPolicy(env, max_queue_delay_ms=0.0), env, n=3)
    np.testing.assert_array_equal(triton.values("return"), greedy.values("return"))
    np.testing.assert_array_equal(triton.values("steps"), greedy.values("steps"))
    assert all(a > 0 for *_, a in checked.log)


def test_triton_episode_follows_its_rule() -> None:
    env = make_env(load=0.3)
    delay_ms = 2.0
    policy = TritonTimeoutPolicy(env, preferred_batch_sizes=(4, 8), max_queue_delay_ms=delay_ms)
    checked, result = run(policy, env)
    served = [a for *_, a in checked.log if a]
    assert 4 in served and 8 in served
    assert any(a not in (4, 8, 32) for a in served)  # some batches left on the delay
    for q, w, _, _, a in checked.log:
        if a == 0:
            assert q < 4 and w < delay_ms * 1e-3
        elif a not in (4, 8, 32):
            assert a == q < 4 and w >= delay_ms * 1e-3 - TIME_TOLERANCE_S
        else:
            assert a == (32 if q >= 32 else 8 if q >= 8 else 4)
    assert result.mean("dropped") == 0


# -- TF Serving -----------------------------------------------------------------------


def test_tfserving_rule() -> None:
    p = TFServingPolicy(make_env(max_batch_size=16), batch_timeout_ms=1.0)
    assert p.name == "tfserving"
    assert p.act(OBS, info(3, 0.5)) == 0
    assert p.act(OBS, info(15, 0.99)) == 0
    assert p.act(OBS, info(3, 1.2)) == 3
    assert p.act(OBS, info(15, 1.0)) == 15
    assert p.act(OBS, info(16, 0.0)) == 16
    assert p.act(OBS, info(20, 0.0)) == 16
    assert p.act(OBS, info(20, 5.0)) == 16
    q = TFServingPolicy(make_env(max_batch_size=16), max_batch_size=4, batch_timeout_ms=3.0)
    assert q.act(OBS, info(4, 0.0)) == 4
    assert q.act(OBS, info(3, 2.9)) == 0


def test_tfserving_refuses_env_without_ticks() -> None:
    env = make_env(decision_interval_ms=None)
    with pytest.raises(ValueError, match="batch_timeout_ms=2.0") as err:
        TFServingPolicy(env, batch_timeout_ms=2.0)
    assert "'tfserving'" in str(err.value)
    assert "decision_interval_ms" in str(err.value)


@pytest.mark.parametrize(
    ("params", "name", "value"),
    [
        ({"max_batch_size": 0}, "max_batch_size", 0),
        ({"max_batch_size": 64}, "max_batch_size", 64),
        ({"batch_timeout_ms": -1.0}, "batch_timeout_ms", -1.0),
        ({"batch_timeout_ms": None}, "batch_timeout_ms", None),
    ],
)
def test_tfserving_rejects_bad_params(params: dict, name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=message(name, value)):
        TFServingPolicy(make_env(max_batch_size=32), **params)


def test_tfserving_large_timeout_at_low_load_holds_requests() -> None:
    env = make_env(load=0.05)
    timeout_ms = 5.0
    checked, result = run(TFServingPolicy(env, batch_timeout_ms=timeout_ms), env)
    _, greedy = run(GreedyPolicy(env), env)
    # Nearly every batch waits out the timeout: mean latency >= the timeout.
    assert result.mean("latency_mean_ms") >= timeout_ms
    assert result.mean("latency_mean_ms") >= greedy.mean("latency_mean_ms") + 2.5
    assert result.mean("batch_size_mean") > greedy.mean("batch_size_mean") + 0.5
    for q, w, _, _, a in checked.log:
        if a == 0:
            assert w < timeout_ms * 1e-3
        else:
            assert a == min(q, 32)
            assert q >= 32 or w >= timeout_ms * 1e-3 - TIME_TOLERANCE_S


def test_tfserving_timeout_fires_at_the_first_epoch_after_it() -> None:
    # Relative ticks every 0.5 ms: a timeout of 1 ms fires within one tick of expiring,
    # never a tick late because of accumulated floating-point tick times.
    env = make_env(load=0.05)
    timeout_ms = 1.0
    checked, _ = run(TFServingPolicy(env, batch_timeout_ms=timeout_ms), env, n=3)
    fired_after_wait = [
        cur[1]
        for prev, cur in zip(checked.log, checked.log[1:], strict=False)
        if prev[4] == 0 and cur[4] > 0
    ]
    assert len(fired_after_wait) > 100
    assert min(fired_after_wait) >= timeout_ms * 1e-3 - TIME_TOLERANCE_S
    assert max(fired_after_wait) < (timeout_ms + TICK_MS) * 1e-3 - 1e-7


# -- AIMD -----------------------------------------------------------------------------


def test_aimd_additive_increase_multiplicative_decrease_sequence() -> None:
    p = AIMDPolicy(
        None,
        sla_ms=10.0,
        additive_step=1,
        decrease_factor=0.5,
        initial_batch_size=2,
        max_batch_size=8,
    )
    assert p.name == "aimd"
    q = 100
    assert p.act(OBS, info(q)) == 2  # first epoch: no batch yet, no update
    caps = []
    # Within the SLA (equal meets it) six times, then over it four times, then within.
    for lat_ms in [5, 10, 9, 9, 9, 9, 10.5, 20, 11, 11, 3]:
        caps.append(p.act(OBS, info(q, last_b=p.current_batch_size(), last_lat_ms=lat_ms)))
    assert caps == [3, 4, 5, 6, 7, 8, 4, 2, 1, 1, 2]
    assert p.batch_cap == 2.0


def test_aimd_fractional_cap_and_small_queue() -> None:
    p = AIMDPolicy(None, sla_ms=5.0, initial_batch_size=10, max_batch_size=32)
    assert p.decrease_factor == 0.9 and p.additive_step == 1.0
    assert p.act(OBS, info(100, last_b=10, last_lat_ms=6.0)) == 9  # 10 * 0.9 = 9
    assert p.act(OBS, info(100, last_b=9, last_lat_ms=6.0)) == 8  # 8.1
    assert p.batch_cap == pytest.approx(8.1)
    assert p.act(OBS, info(100, last_b=8, last_lat_ms=4.0)) == 9  # 9.1
    assert p.act(OBS, info(3, last_b=9, last_lat_ms=4.0)) == 3  # min(q, floor(c))
    assert p.batch_cap == pytest.approx(10.1)


def test_aimd_ignores_steps_without_a_batch_and_reset_restores_cap() -> None:
    p = AIMDPolicy(None, sla_ms=5.0, initial_batch_size=4, max_batch_size=16)
    # last_batch_size 0 (after a wait or at reset): the latency field is not a batch's.
    for _ in range(3):
        assert p.act(OBS, info(20, last_b=0, last_lat_ms=100.0)) == 4
    assert p.act(OBS, info(20, last_b=4, last_lat_ms=1.0)) == 5
    assert p.act(OBS, info(20, last_b=5, last_lat_ms=1.0)) == 6
    p.reset()
    assert p.batch_cap == 4.0
    assert p.act(OBS, info(20)) == 4


def test_aimd_defaults_from_env() -> None:
    env = make_env(max_batch_size=24, sla_ms=12.0)
    p = AIMDPolicy(env)
    assert (p.sla_ms, p.max_batch_size, p.batch_cap) == (12.0, 24, 1.0)
    # The cap never exceeds max_batch_size.
    for _ in range(40):
        p.act(OBS, info(100, last_b=1, last_lat_ms=1.0))
    assert p.batch_cap == 24.0 and p.act(OBS, info(100)) == 24


@pytest.mark.parametrize(
    ("params", "name", "value"),
    [
        ({"decrease_factor": 1.5}, "decrease_factor", 1.5),
        ({"decrease_factor": 1.0}, "decrease_factor", 1.0),
        ({"decrease_factor": 0.0}, "decrease_factor", 0.0),
        ({"additive_step": 0}, "additive_step", 0),
        ({"additive_step": -1.0}, "additive_step", -1.0),
        ({"initial_batch_size": 0}, "initial_batch_size", 0),
        ({"initial_batch_size": 17}, "initial_batch_size", 17),
        ({"max_batch_size": 4, "initial_batch_size": 5}, "initial_batch_size", 5),
        ({"max_batch_size": 40}, "max_batch_size", 40),
        ({"sla_ms": 0.0}, "sla_ms", 0.0),
        ({"sla_ms": -5}, "sla_ms", -5),
    ],
)
def test_aimd_rejects_bad_params(params: dict, name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=message(name, value)):
        AIMDPolicy(make_env(max_batch_size=16), **params)


def test_aimd_episode_backs_off_at_the_sla() -> None:
    # resnet50-v100: latency(15) = 3.97 ms <= 4 ms < latency(16) = 4.11 ms. The cap grows
    # only after a batch of at most 15, so no batch exceeds 16, and every batch of 16 is
    # followed by a 10% back-off (floor(0.9 * c) <= 15).
    env = make_env(load=0.9)
    checked, result = run(AIMDPolicy(env, sla_ms=4.0), env)
    served = [a for *_, a in checked.log]
    assert 0 not in served  # AIMD never waits
    assert max(served) == 16
    for (_, _, _, _, a), nxt in zip(checked.log, checked.log[1:], strict=False):
        if nxt[2] > 0:  # the next epoch reports this batch (unless an episode ended)
            assert nxt[2] == a
            assert (nxt[3] <= 4e-3) == (a <= 15)
        if a == 16 and nxt[2] == 16:
            assert nxt[4] <= 15
    # With the env's 15 ms SLA every batch meets it: the cap only grows.
    checked15, result15 = run(AIMDPolicy(env), env)
    assert max(a for *_, a in checked15.log) > 16
    assert result15.mean("batch_size_mean") > result.mean("batch_size_mean")


def test_aimd_episode_starts_small_each_episode() -> None:
    env = make_env(load=0.9)
    checked, _ = run(AIMDPolicy(env, initial_batch_size=1), env, n=2)
    starts = [i for i, rec in enumerate(checked.log) if rec[2] == 0]
    assert len(starts) == 2  # last_batch_size 0 only at each reset: AIMD never waits
    for i in starts:
        assert checked.log[i][4] == 1
        assert checked.log[i + 1][4] == min(2, checked.log[i + 1][0])
