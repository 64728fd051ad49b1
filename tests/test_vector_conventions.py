"""The NumPy vector env follows ``SyncVectorEnv``'s conventions (docs/vector_envs.md: Info):
per-step info and episode summaries as dicts of arrays with ``_key`` masks, equal to what
``SyncVectorEnv`` over the scalar env gives on the same seeds; action masks reachable
through vector wrappers; the vector twins of ``batch_env.wrappers`` in every autoreset mode.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import batch_env  # noqa: F401
from batch_env.envs.dynamic_batching_vector import DynamicBatchingVectorEnv
from batch_env.wrappers import (
    ArrivalFeatures,
    AverageRewardCentering,
    BinaryAction,
    QueueFeatures,
    VectorArrivalFeatures,
    VectorAverageRewardCentering,
    VectorBinaryAction,
    VectorQueueFeatures,
    vector_action_masks,
    vector_config,
)

ENV_ID = "batch_env/DynamicBatching-v0"
KW = {"horizon_requests": 60}
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
#: summary rates (a window total / elapsed_s): compared looser, see test_vector_env
_RATES = ("reward_rate_per_s", "power_mean_w", "throughput_rps")


def _native(n, mode, **kw):
    return gym.make_vec(ENV_ID, num_envs=n, autoreset_mode=mode, **{**KW, **kw})


def _sync(n, mode, **kw):
    return gym.make_vec(
        ENV_ID,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        **{**KW, **kw},
    )


def _same(a, b, path=""):
    """``a`` (native) equals ``b`` (SyncVectorEnv): the same keys and masks, arrays of the
    same shape and dtype, equal values (floats within 1e-9 relative, NaN equal)."""
    assert set(a) == set(b), (path, sorted(set(a) ^ set(b)))
    for k in b:
        x, y = a[k], b[k]
        where = f"{path}/{k}"
        if isinstance(y, dict):
            _same(x, y, where)
            continue
        assert isinstance(x, np.ndarray) and x.shape == y.shape, where
        comps = path.endswith("reward_components") and k in ("sla", "drop")
        # (SyncVectorEnv takes a key's dtype from its first lane: a lane's reset info has
        # 0.0 where a step has ints; the native env keeps a step's dtype)
        assert x.dtype == y.dtype or comps and x.dtype.kind in "if" and y.dtype.kind in "if", (
            where,
            x.dtype,
            y.dtype,
        )
        if y.dtype == object:
            for u, v in zip(x, y, strict=True):
                assert (u is None and v is None) or np.array_equal(u, v) or u == v, where
        elif y.dtype.kind == "f":
            rtol = 1e-6 if k in _RATES else 1e-9
            assert np.allclose(x, y, rtol=rtol, atol=1e-9, equal_nan=True), (where, x, y)
        else:
            assert np.array_equal(x, y), (where, x, y)


def _greedy_or_wait(masks, t):
    """The largest valid batch, but every 5th step a wait (queues and waits vary)."""
    top = masks.shape[1] - 1 - np.argmax(masks[:, ::-1], axis=1)
    return np.zeros_like(top) if t % 5 == 4 else top


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_info_and_summaries_equal_sync_vector_envs(mode):
    n = 3
    native, sync = _native(n, mode), _sync(n, mode)
    assert isinstance(native, DynamicBatchingVectorEnv)
    o1, i1 = native.reset(seed=4)
    o2, i2 = sync.reset(seed=4)
    assert np.array_equal(o1, o2)
    _same(i1, i2)
    assert {"queue_len", "now_s", "dt_s", "action_mask", "reward_components", "_queue_len"} <= set(
        i1
    )
    ended = 0
    for t in range(500):
        a = _greedy_or_wait(native.action_masks(), t)
        o1, r1, _, t1, i1 = native.step(a)
        o2, r2, _, t2, i2 = sync.step(a)
        assert np.array_equal(o1, o2) and np.array_equal(t1, t2)
        assert np.allclose(r1, r2, rtol=1e-9, atol=1e-12)
        _same(i1, i2)
        if t1.any():
            ended += int(t1.sum())
            key = "final_info" if mode == AutoresetMode.SAME_STEP else None
            serving = (i1[key] if key else i1)["serving"]
            assert set(np.flatnonzero(serving["_completed"])) == set(np.flatnonzero(t1))
            if mode == AutoresetMode.DISABLED:
                o1, i1 = native.reset(options={"reset_mask": t1.copy()})
                o2, i2 = sync.reset(options={"reset_mask": t1.copy()})
                assert np.array_equal(o1, o2)
                _same(i1, i2)
    assert ended >= 4


def test_fast_path_without_per_step_info_keeps_the_summary_layout():
    venv = _native(2, AutoresetMode.NEXT_STEP, full_info=False)
    _, info = venv.reset(seed=0)
    assert info == {}
    for _ in range(400):
        _, _, _, trunc, info = venv.step(venv.action_masks().sum(axis=1) - 1)
        if trunc.any():
            assert set(info) == {"serving", "_serving"}
            assert info["serving"]["completed"].dtype == np.int64
            assert np.array_equal(info["serving"]["_completed"], trunc)
            return
        assert info == {}
    pytest.fail("no episode ended")


@pytest.mark.parametrize("base", ["native", "sync"])
def test_action_masks_through_vector_wrappers(base):
    n = 3
    env = (_native if base == "native" else _sync)(n, AutoresetMode.NEXT_STEP)
    env.reset(seed=1)
    for _ in range(4):
        env.step(np.zeros(n, dtype=np.int64))  # queues grow: the masks differ from the first
    masks = np.stack(env.call("action_masks"))
    assert masks.shape == (n, 33) and masks.dtype == bool and masks.sum() > n * 2
    if base == "native":
        assert np.array_equal(masks, env.action_masks())
        assert env.call("queue_len") == tuple((masks.sum(axis=1) - 1).tolist())
        with pytest.raises(AttributeError, match="render"):
            env.call("render")
    assert vector_config(env) == env.get_attr("config")[0]
    # Gymnasium's wrappers forward nothing: vector_action_masks walks through them
    rec = RecordEpisodeStatistics(env)
    assert not hasattr(rec, "call")
    assert np.array_equal(vector_action_masks(rec), masks)
    assert np.array_equal(np.stack(rec.unwrapped.call("action_masks")), masks)
    # the twins answer call() themselves, through Gymnasium's wrappers
    feats = VectorQueueFeatures(rec)
    assert np.array_equal(np.stack(feats.call("action_masks")), masks)
    assert feats.get_attr("config")[0] == vector_config(env)
    binary = VectorBinaryAction(feats)
    assert np.array_equal(np.stack(binary.call("action_masks")), np.ones((n, 2), dtype=bool))
    outer = RecordEpisodeStatistics(binary)
    assert np.array_equal(vector_action_masks(outer), np.ones((n, 2), dtype=bool))
    # and the per-step info carries every lane's mask through any wrapper
    _, _, _, _, info = outer.step(np.zeros(n, dtype=np.int64))
    assert np.array_equal(info["action_mask"], np.stack(env.call("action_masks")))


def _scalar_chain(kw, arrivals=False, **centring):
    env = QueueFeatures(BinaryAction(gym.make(ENV_ID, **kw)))
    return AverageRewardCentering(ArrivalFeatures(env) if arrivals else env, **centring)


#: a gain per load, read at the load estimate (observation feature 2)
CURVE = [[0.3, 40.0], [0.6, 90.0], [0.9, 200.0]]


@pytest.mark.parametrize("centring", ["online", "curve+arrivals", "relative"])
@pytest.mark.parametrize("base", ["native", "sync"])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_vector_twins_equal_scalar_wrappers_in_every_autoreset_mode(mode, base, centring):
    """BinaryAction, QueueFeatures, (ArrivalFeatures) and AverageRewardCentering (innermost
    first; online, or a gain curve over the load estimate) on each lane of a vector env
    equal the scalar wrappers on the scalar env, in lockstep: observations, centred
    rewards (relative to the gain, too) and gains, through ``RecordEpisodeStatistics``."""
    n, seed = 3, 11
    curve = centring != "online"
    ck: dict = {"gain_curve": CURVE} if curve else {}
    if centring == "relative":
        ck["relative"] = True
    env = (_native if base == "native" else _sync)(n, mode)
    inner = VectorQueueFeatures(VectorBinaryAction(env))
    venv = RecordEpisodeStatistics(
        VectorAverageRewardCentering(VectorArrivalFeatures(inner) if curve else inner, **ck)
    )
    envs = [_scalar_chain(KW, arrivals=curve, **ck) for _ in range(n)]
    vobs, _ = venv.reset(seed=seed)
    sobs = [e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]
    assert np.array_equal(vobs, np.stack(sobs))
    rng = np.random.default_rng(0)
    pending = np.zeros(n, dtype=bool)
    ended = 0
    for _ in range(600):
        acts = (rng.random(n) < 0.4).astype(np.int64)
        vobs, vrew, _, vtrunc, vinfo = venv.step(acts)
        for i, e in enumerate(envs):
            if pending[i]:  # NEXT_STEP: this step resets the lane
                so, _ = e.reset()
                sr, strunc, gain = 0.0, False, None
                assert not vinfo["_centering_gain"][i]
            else:
                so, sr, _, strunc, sinfo = e.step(int(acts[i]))
                gain = sinfo["centering_gain"]
            assert strunc == bool(vtrunc[i])
            assert math.isclose(sr, float(vrew[i]), rel_tol=1e-9, abs_tol=1e-9), (i, sr, vrew[i])
            if strunc and mode == AutoresetMode.SAME_STEP:
                assert np.array_equal(vinfo["final_obs"][i], so)
                assert math.isclose(vinfo["final_info"]["centering_gain"][i], gain, rel_tol=1e-9)
                so, _ = e.reset()
            elif gain is not None:
                assert vinfo["_centering_gain"][i]
                assert math.isclose(vinfo["centering_gain"][i], gain, rel_tol=1e-9)
            assert np.array_equal(vobs[i], so)
        ended += int(vtrunc.sum())
        if mode == AutoresetMode.NEXT_STEP:
            pending = vtrunc.copy()
        elif mode == AutoresetMode.DISABLED and vtrunc.any():
            vobs, _ = venv.reset(options={"reset_mask": vtrunc.copy()})
            for i in np.flatnonzero(vtrunc):
                assert np.array_equal(vobs[i], envs[i].reset()[0])
    assert ended >= 3
    assert len(venv.return_queue) >= 1  # RecordEpisodeStatistics saw episodes end
