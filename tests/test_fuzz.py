"""Fuzz suite: random configurations and action sequences for every environment.

Hypothesis draws a configuration from each env's constructor space (profiles, every
workload kind including traces with equal timestamps, service laws, capacities, horizons,
ticks, weights; for LLMBatching-v0 lengths, caps, grids, KV memory) and a policy (greedy,
uniformly random valid actions, wait-heavy, oversized actions), then runs an episode and
checks at every step:

* conservation: ``arrived == completed + waiting + in_service + dropped + rejected`` and
  ``in_system == waiting + in_service`` (:meth:`ServingCore.request_counts`), and in the
  episode summary;
* a finite float32 observation inside the observation space, a finite reward equal to
  ``-(w . components)``, components that are never negative, a clock that never goes back;
* bounded work: each ``reset`` and ``step`` draws at most one arrival chunk more than the
  arrivals it processes or rejects (so no call loops without bound), within a wall-clock
  alarm that turns a hang into a failure;
* determinism: the same seed and actions give the same trajectory, on a fresh env and on
  the same env reset again; an out-of-range action raises ``ValueError`` and changes
  nothing (the trajectory with it equals the one without);
* for the routing env (a cluster of LLM replicas): conservation per replica as well
  (routed = admitted + not yet admitted; admitted = completed + waiting + running +
  dropped), over 1-4 replicas of random v2 settings;
* for the NumPy vector env: lockstep identity with the scalar env on every workload kind,
  ties included (``tests/helpers.py``'s ``lockstep``).

``make test`` runs a short, derandomized profile (a few dozen examples per test);
``make fuzz`` runs the long one (``BATCH_ENV_FUZZ=long``: thousands of examples, minutes).
The number of examples is ``BATCH_ENV_FUZZ_EXAMPLES`` when set.
"""

from __future__ import annotations

import json
import math
import os
import signal
import warnings
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from helpers import lockstep
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import batch_env  # noqa: F401
from batch_env.envs import (
    DynamicBatchingEnv,
    LLMBatchingEnv,
    LLMBatchingV2Env,
    LLMRoutingEnv,
    NodeBatchingEnv,
)

LONG = os.environ.get("BATCH_ENV_FUZZ") == "long"
EXAMPLES = int(os.environ.get("BATCH_ENV_FUZZ_EXAMPLES", 1500 if LONG else 25))
MAX_STEPS = 1500 if LONG else 400
#: vector lockstep steps (each steps up to 3 lanes and 3 scalar envs)
VECTOR_STEPS = 600 if LONG else 300
#: seconds one reset or step may take before it counts as a hang
CALL_ALARM_S = 30

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not LONG,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
LINEAR = {
    "name": "lin",
    "model": "m",
    "device": "d",
    "source": "fuzz",
    "kind": "linear",
    "alpha_ms": 0.25,
    "tau0_ms": 1.0,
    "beta_j": 0.5,
    "c0_j": 2.0,
    "idle_power_w": 30.0,
}
BATCH_PROFILES = {
    "resnet50-v100": 128,
    "resnet50-p4": 128,
    "bert-base-t4": 8,
    "resnet50-v100-linear": 256,
    "linear": 256,
}
LLM_PROFILES = ("llama-2-7b-a100", "llama-2-7b-h100", "llama-2-70b-tp8-a100")
TRACE_DIR: Path | None = None


# -- strategies ---------------------------------------------------------------------------


def _trace_rows(draw, tokens: bool) -> list[tuple]:
    """Timestamps with many ties (runs of equal times), and token columns for LLM traces."""
    gaps = draw(
        st.lists(
            st.one_of(
                st.just(0.0), st.sampled_from([0.00025, 0.0005, 0.001, 0.01]), st.floats(1e-5, 0.05)
            ),
            min_size=2,
            max_size=40,
        )
    )
    times = np.concatenate(([0.0], np.cumsum(gaps)))
    assume(times[-1] > 0.0)
    if not tokens:
        return [(repr(float(t)),) for t in times]
    prompts = draw(st.lists(st.integers(1, 1500), min_size=len(times), max_size=len(times)))
    outputs = draw(st.lists(st.integers(1, 200), min_size=len(times), max_size=len(times)))
    return [(repr(float(t)), p, o) for t, p, o in zip(times, prompts, outputs, strict=True)]


@st.composite
def workloads(draw, llm: bool = False, finite_traces: bool = True) -> dict:
    """Every workload kind; rates as a load (batch envs) or in requests/s (LLM)."""
    kind = draw(st.sampled_from(["poisson", "gamma", "mmpp", "trace"]))
    rate = (
        {"rate_per_s": draw(st.floats(0.2, 30.0))} if llm else {"load": draw(st.floats(0.05, 1.5))}
    )
    if kind == "poisson":
        return {"kind": kind, **rate}
    if kind == "gamma":
        return {"kind": kind, "cv": draw(st.floats(0.05, 4.0)), **rate}
    if kind == "mmpp":
        m = draw(st.integers(2, 3))
        rates = draw(st.lists(st.floats(0.0, 10.0), min_size=m, max_size=m))
        assume(max(rates) > 0.1)
        switch = draw(st.lists(st.floats(0.5, 200.0), min_size=m, max_size=m))
        wl = {"kind": kind, "rates_per_s": rates, "switch_rates_per_s": switch}
        return wl if llm else {**wl, "load": rate["load"]}
    wl = {
        "kind": "trace",
        "rows": _trace_rows(draw, tokens=llm),
        "loop": True,
        "random_offset": draw(st.booleans()),
    }
    if finite_traces:
        wl["loop"] = draw(st.booleans())
    if llm:
        wl["target_rate_per_s"] = rate["rate_per_s"]
    elif draw(st.booleans()):
        wl["load"] = rate["load"]
    return wl


@st.composite
def batch_kwargs(draw, node: bool = False, finite_traces: bool = True) -> dict:
    """DynamicBatching-v0 / NodeBatching-v0 constructor arguments."""
    name = draw(st.sampled_from(sorted(BATCH_PROFILES)))
    kw = {
        "profile": LINEAR if name == "linear" else name,
        "max_batch_size": draw(st.integers(1, min(64 if not node else 32, BATCH_PROFILES[name]))),
        "workload": draw(workloads(finite_traces=finite_traces)),
        "sla_ms": draw(st.floats(0.5, 200.0)),
        "queue_capacity": draw(st.sampled_from([1, 2, 5, 30, 300, 2000])),
        "horizon_requests": draw(st.integers(1, 120)),
        "warmup_requests": draw(st.sampled_from([0, 0, 3, 30])),
    }
    if draw(st.booleans()):
        kw["service"] = "lognormal"
        kw["service_cv"] = draw(st.floats(0.0, 2.0))
    if draw(st.booleans()):
        kw["decision_interval_ms"] = draw(st.floats(0.01, 50.0))
    if draw(st.booleans()):
        kw["horizon_s"] = draw(st.floats(1e-3, 5.0))
    if draw(st.booleans()):
        kw["reward_weights"] = {
            k: draw(st.floats(0.0, 10.0)) for k in ("latency", "energy", "sla", "drop")
        }
    if draw(st.booleans()):
        kw["idle_power_w"] = draw(st.floats(0.0, 500.0))
    if draw(st.booleans()):
        kw["rate_window_s"] = draw(st.floats(1e-3, 10.0))
    return kw


@st.composite
def llm_kwargs(draw) -> dict:
    """LLMBatching-v0 constructor arguments."""
    n = draw(st.integers(1, 48))
    kw = {
        "profile": draw(st.sampled_from(LLM_PROFILES)),
        "workload": draw(workloads(llm=True)),
        "max_num_seqs": n,
        "max_model_len": draw(st.sampled_from([64, 256, 1024, 4096])),
        "block_size": draw(st.sampled_from([8, 16, 32])),
        "watermark": draw(st.floats(0.0, 0.1)),
        "ttft_sla_ms": draw(st.floats(10.0, 5000.0)),
        "tpot_sla_ms": draw(st.floats(5.0, 200.0)),
        "queue_capacity": draw(st.sampled_from([1, 4, 64, 4096])),
        "horizon_requests": draw(st.integers(1, 40)),
        "warmup_requests": draw(st.sampled_from([0, 0, 5])),
        "recent_iterations": draw(st.integers(1, 32)),
    }
    if draw(st.booleans()):
        kw["grid"] = sorted(draw(st.sets(st.integers(1, n), min_size=1, max_size=6)))
    if draw(st.booleans()):  # tight KV memory: preemptions
        kw["gpu_memory_utilization"] = draw(st.floats(0.15, 0.95))
    lengths = draw(st.sampled_from(["default", "fixed", "lognormal"]))
    if lengths == "fixed":
        kw["lengths"] = {
            "kind": "fixed",
            "prompt_tokens": draw(st.integers(1, kw["max_model_len"] + 20)),
            "output_tokens": draw(st.integers(1, 300)),
        }
    elif lengths == "lognormal":
        kw["lengths"] = {
            "kind": "lognormal",
            "prompt_tokens": draw(st.floats(1.0, 1.5 * kw["max_model_len"])),
            "prompt_cv": draw(st.floats(0.0, 2.0)),
            "output_tokens": draw(st.floats(1.0, 300.0)),
            "output_cv": draw(st.floats(0.0, 2.0)),
        }
    if draw(st.booleans()):
        kw["horizon_s"] = draw(st.floats(0.1, 200.0))
    return kw


@st.composite
def llm_v2_kwargs(draw) -> dict:
    """LLMBatching-v2 constructor arguments: v0's, with the chunked scheduler's options."""
    kw = draw(llm_kwargs())
    n = kw["max_num_seqs"]
    if draw(st.booleans()):  # request classes: shares, SLAs, weights, own lengths
        kw["classes"] = [
            {
                "name": f"c{i}",
                "share": draw(st.floats(0.05, 1.0)),
                "ttft_sla_ms": draw(st.sampled_from([None, 50.0, 1000.0, 30_000.0])),
                "tpot_sla_ms": draw(st.sampled_from([None, 10.0, 200.0])),
                "weight": draw(st.sampled_from([0.0, 0.1, 1.0, 3.0])),
                "lengths": draw(
                    st.sampled_from(
                        [None, {"kind": "fixed", "prompt_tokens": 30, "output_tokens": 5}]
                    )
                ),
            }
            for i in range(draw(st.integers(1, 3)))
        ]
        if draw(st.booleans()):  # each class its own arrivals (their superposition)
            for c in kw["classes"]:
                c.pop("share")
                c["workload"] = {"kind": "poisson", "rate_per_s": draw(st.floats(0.5, 20.0))}
            kw.pop("workload", None)
    if draw(st.booleans()):  # the admission order as a control
        orders = ["fcfs", "edf", "shortest-prompt", "class-priority", "srpt"]
        kw["orders"] = draw(st.lists(st.sampled_from(orders), min_size=1, max_size=5, unique=True))
        kw["oracle_info"] = "srpt" in kw["orders"] or draw(st.booleans())
    if draw(st.booleans()):  # the SM clock as a control (clocks every LLM_PROFILES' GPU has)
        clocks = draw(st.sets(st.sampled_from([705.0, 1005.0, 1410.0]), min_size=1, max_size=3))
        kw["clock_grid"] = sorted(clocks)
    if draw(st.booleans()):
        kw["scheduler"] = "vllm-v0"
        kw["num_scheduler_steps"] = draw(st.sampled_from([1, 1, 4, 10]))  # vLLM 0.6 multi-step
        return kw
    budget = draw(st.sampled_from([max(n, 64), 512, 2048, 8192]))
    if kw["max_model_len"] > budget:
        kw["split_prompts"] = True
    else:
        kw["split_prompts"] = draw(st.booleans())
    kw["max_num_batched_tokens"] = budget
    kw["decode_first"] = draw(st.booleans())
    if draw(st.booleans()):
        lows = sorted(draw(st.sets(st.integers(n, budget), min_size=1, max_size=3)) | {budget})
        kw["budget_grid"] = lows
    return kw


@st.composite
def routing_kwargs(draw) -> dict:
    """LLMRouting-v0 constructor arguments: v2's settings shared by 1-4 replicas, each
    with its own profile and, sometimes, its own ``max_model_len`` (masks) or cap."""
    kw = draw(llm_v2_kwargs())
    for flag in ("oracle_info", "order_features"):
        kw.pop(flag, None)
    n = draw(st.integers(1, 4))
    replicas = []
    for _ in range(n):
        spec = {"profile": draw(st.sampled_from(LLM_PROFILES))}
        if draw(st.booleans()):
            spec["max_model_len"] = draw(st.sampled_from([kw["max_model_len"], 512]))
        replicas.append(spec)
    kw["replicas"] = replicas
    kw.pop("profile", None)
    return kw


def _check_cluster(env) -> None:
    """Every replica's requests add up, and the routed ones to the arrivals."""
    cl = env.cluster
    for r, rep in enumerate(cl.replicas):
        c = rep.request_counts()
        assert c["arrived"] + rep.unadmitted == cl.routed.count(r), (r, c)
        assert c["arrived"] == c["completed"] + c["waiting"] + c["in_service"] + c["dropped"]


def _check_llm_server(env) -> None:
    """The LLM server's books: requests in one place each, tokens and KV blocks conserved."""
    srv = env.server.state
    running, waiting = srv.running, srv.waiting
    assert len(set(running) | set(waiting)) == len(running) + len(waiting)
    assert env.server.in_system == len(running) + len(waiting)
    assert srv.kv_used == sum(srv.kv_blocks) <= srv.kv_total
    assert sum(srv.generated) == srv.tokens_out  # every output token produced once
    for e, t in enumerate(env.server.finished_at):
        if t is not None:
            assert srv.generated[e] == srv.output[e] and srv.kv_blocks[e] == 0
    for e in waiting:
        assert srv.kv_blocks[e] == 0
    # prompt tokens: what waits (whole prompts) and what prefills in progress have left;
    # the decoding requests' context
    partial = running[len(running) - srv.prefilling :]
    assert srv.waiting_tokens == sum(srv.context(e) for e in waiting) + sum(
        srv.prefill_left[e] for e in partial
    )
    assert srv.decode_context == sum(srv.context(e) for e in srv.decoding())
    # per class: every admitted request finished, waiting or running, once
    done = [t is not None for t in env.server.finished_at]
    for c in set(srv.request_class):
        mine = [e for e, k in enumerate(srv.request_class) if k == c]
        placed = sum(done[e] for e in mine)
        placed += sum(1 for e in waiting if srv.request_class[e] == c)
        placed += sum(1 for e in running if srv.request_class[e] == c)
        assert placed == len(mine), c


# -- the harness ---------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _trace_dir(tmp_path_factory):
    global TRACE_DIR
    TRACE_DIR = tmp_path_factory.mktemp("fuzz_traces")
    yield
    TRACE_DIR = None


def materialize(kw: dict) -> dict:
    """Write a drawn trace (``rows``) to a CSV file and point the workload at it."""
    wl = kw.get("workload")
    if not (isinstance(wl, dict) and "rows" in wl):
        return kw
    rows = wl["rows"]
    header = "t,ContextTokens,GeneratedTokens" if len(rows[0]) == 3 else "t"
    text = header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows)
    path = TRACE_DIR / f"trace{abs(hash(text))}.csv"
    path.write_text(text)
    wl = {k: v for k, v in wl.items() if k != "rows"}
    return {**kw, "workload": {**wl, "path": str(path), "timestamp_column": "t"}}


def make(cls, kw: dict):
    """Build an env; a configuration error must be a ``ValueError`` that names a field."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return cls(**materialize(kw))
        except ValueError as e:
            assert "=" in str(e) or "'" in str(e), f"unclear error: {e}"
            event(f"refused: {str(e).split('=')[0][:40]}")
            assume(False)


@contextmanager
def alarm(seconds: int):
    """Fail instead of hanging: SIGALRM after ``seconds``."""

    def on_alarm(signum, frame):
        raise AssertionError(f"a reset or step ran for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class _CountingStream:
    """An arrival stream that counts the chunks it hands out."""

    def __init__(self, stream, counter):
        self._stream, self._counter = stream, counter

    def next_chunk(self):
        self._counter[0] += 1
        return self._stream.next_chunk()

    def __getattr__(self, name):
        return getattr(self._stream, name)


class _CountingWorkload:
    """A workload whose streams count their chunks (the env's only unbounded source)."""

    def __init__(self, workload):
        self._workload = workload
        self.chunks = [0]

    def stream(self, *args, **kwargs):
        return _CountingStream(self._workload.stream(*args, **kwargs), self.chunks)

    def __getattr__(self, name):
        return getattr(self._workload, name)


def _policy(kind: str, mask: np.ndarray, rng: np.random.Generator, n: int) -> int:
    valid = np.flatnonzero(mask)
    if kind == "greedy":
        return int(valid[-1])
    if kind == "random":
        return int(rng.choice(valid))
    if kind == "wait-heavy":
        return 0 if rng.random() < 0.7 else int(rng.choice(valid))
    return int(rng.integers(0, n))  # "oversized": any action in the space (clipped when too big)


def _moved(env) -> int:
    """Arrivals processed or rejected so far (the work that justifies drawing chunks)."""
    c = env.request_counts()
    return c["arrived"] + len(getattr(env, "_rej_times", ()))


def _check_counts(env, where: str) -> dict:
    c = env.request_counts()
    assert (
        c["arrived"]
        == c["completed"] + c["waiting"] + c["in_service"] + c["dropped"] + c["rejected"]
    ), (where, c)
    assert c["in_system"] == c["waiting"] + c["in_service"], (where, c)
    assert min(c.values()) >= 0, (where, c)
    return c


def _check_step(env, obs, reward, info, t_prev: float) -> None:
    assert obs.dtype == np.float32 and np.all(np.isfinite(obs)), obs
    assert env.observation_space.contains(obs), (obs, env.observation_space)
    comps = info["reward_components"]
    w = env.config.reward_weights
    assert all(math.isfinite(v) and v >= 0.0 for v in comps.values()), comps
    expect = -(
        w.latency * comps["latency"]
        + w.energy * comps["energy"]
        + w.sla * comps["sla"]
        + w.drop * comps["drop"]
    )
    assert math.isfinite(reward) and math.isclose(reward, expect, rel_tol=1e-12, abs_tol=1e-12), (
        reward,
        expect,
    )
    assert info["now_s"] >= t_prev and info["dt_s"] >= 0.0


def _check_summary(env, summary: dict) -> None:
    for key, value in summary.items():
        if isinstance(value, float):
            assert not math.isinf(value), (key, value)
    H = env.config.horizon_requests
    done = summary["completed"] + summary["dropped"]
    assert done <= H, summary
    if (
        env.workload.total_arrivals is None
        and env.request_counts()["in_system"] == 0
        and summary["in_system_at_end"] == 0
    ):
        now = (
            env.server.now
            if hasattr(env, "server")
            else env.cluster.now
            if hasattr(env, "cluster")
            else env.now
        )
        assert done == H or now >= env.horizon_s, summary


def run_episode(env, seed: int, kind: str, policy_seed: int, invalid_every: int = 0) -> list:
    """One episode with every per-step check; returns the trajectory (for determinism)."""
    counter = env.workload.chunks if isinstance(env.workload, _CountingWorkload) else None
    n = int(env.action_space.n)
    rng = np.random.default_rng(policy_seed)
    with alarm(CALL_ALARM_S):
        before = counter[0] if counter else 0
        obs, info = env.reset(seed=seed)
    if counter:
        assert counter[0] - before <= 1 + _moved(env), (
            "reset drew more chunks than it processed arrivals"
        )
    assert env.observation_space.contains(obs)
    _check_counts(env, "reset")
    traj = [obs.tobytes()]
    t_prev = info["now_s"]
    for step in range(MAX_STEPS):
        mask = env.action_masks()
        assert mask.dtype == bool and mask.shape == (n,) and mask.any()
        if invalid_every and step % invalid_every == 0:
            counts = env.request_counts()
            bad = [n, -1, 0.5, math.nan, "x", None, [0]][step // invalid_every % 7]
            with pytest.raises(ValueError, match="action="):
                env.step(bad)
            assert env.request_counts() == counts  # nothing lost, nothing changed
        a = _policy(kind, mask, rng, n)
        if hasattr(env, "cluster") and not mask[a]:  # a masked replica: refused, no change
            counts = env.request_counts()
            with pytest.raises(ValueError, match="masked"):
                env.step(a)
            assert env.request_counts() == counts
            a = int(np.flatnonzero(mask)[0])
        moved = _moved(env)
        before = counter[0] if counter else 0
        with alarm(CALL_ALARM_S):
            obs, reward, term, trunc, info = env.step(a)
        if counter:
            assert counter[0] - before <= 1 + _moved(env) - moved, (
                "a step drew more chunks than it processed arrivals"
            )
        assert term is False
        _check_step(env, obs, reward, info, t_prev)
        _check_counts(env, f"step {step}")
        if hasattr(env, "_server"):
            _check_llm_server(env)
        if hasattr(env, "cluster"):
            _check_cluster(env)
        t_prev = info["now_s"]
        traj.append((a, obs.tobytes(), reward))
        if trunc:
            _check_summary(env, info["serving"])
            traj.append(sorted((k, repr(v)) for k, v in info["serving"].items()))
            break
    event("episode ended" if trunc else f"stopped after {MAX_STEPS} steps")
    return traj


def fuzz_env(cls, kw: dict, seed: int, kind: str) -> None:
    env = make(cls, kw)
    if cls is LLMRoutingEnv:  # a routing episode needs an arrival to route: refused at reset
        try:
            env.reset(seed=seed)
        except ValueError as e:
            assert "ended before its first arrival" in str(e), e
            event("refused at reset: no arrival")
            assume(False)
    event(f"workload {env.workload.kind}")
    env.workload = _CountingWorkload(env.workload)
    if hasattr(env, "cluster"):  # the cluster draws its arrivals from replica 0's workload
        env.cluster.replicas[0].workload = env.workload
    first = run_episode(env, seed, kind, seed, invalid_every=17)
    again = run_episode(env, seed, kind, seed)  # the same env, reset again
    fresh = run_episode(make(cls, kw), seed, kind, seed)  # a new env
    assert first == again == fresh


POLICIES = st.sampled_from(["greedy", "random", "wait-heavy", "oversized"])
SEEDS = st.integers(0, 2**31 - 1)


@FUZZ
@given(kw=batch_kwargs(), seed=SEEDS, kind=POLICIES)
def test_fuzz_dynamic_batching(kw, seed, kind):
    fuzz_env(DynamicBatchingEnv, kw, seed, kind)


@FUZZ
@given(kw=batch_kwargs(node=True), seed=SEEDS, kind=POLICIES)
def test_fuzz_node_batching(kw, seed, kind):
    fuzz_env(NodeBatchingEnv, kw, seed, kind)


@FUZZ
@given(kw=llm_kwargs(), seed=SEEDS, kind=POLICIES)
def test_fuzz_llm_batching(kw, seed, kind):
    fuzz_env(LLMBatchingEnv, kw, seed, kind)


@FUZZ
@given(kw=llm_v2_kwargs(), seed=SEEDS, kind=POLICIES)
def test_fuzz_llm_batching_v2(kw, seed, kind):
    fuzz_env(LLMBatchingV2Env, kw, seed, kind)


@FUZZ
@given(kw=routing_kwargs(), seed=SEEDS, kind=POLICIES)
def test_fuzz_llm_routing(kw, seed, kind):
    fuzz_env(LLMRoutingEnv, kw, seed, kind)


def _lazy_run(kw: dict, seed: int, read_all: bool) -> tuple:
    """A cluster's episode at random unmasked routes, its replicas read at every arrival
    (all brought up to it) or never (lazy): the summary, the routes, the end."""
    env = make(LLMRoutingEnv, kw)  # (the kwargs are valid; the env is not used)
    cluster = env.cluster
    rng = np.random.default_rng(seed)
    cluster.reset(seed=seed)
    for _ in range(MAX_FUZZ_ARRIVALS):
        g = cluster.next_arrival()
        if g is None:
            break
        if read_all:
            cluster.flush()
        ok = np.flatnonzero(cluster.mask(g))
        cluster.route(int(ok[rng.integers(len(ok))]))
    else:
        raise AssertionError(f"no end after {MAX_FUZZ_ARRIVALS} arrivals")
    return cluster.summary(), tuple(cluster.routed), cluster.now


#: arrivals a lazy-cluster fuzz episode may route (a bound: its episodes are short)
MAX_FUZZ_ARRIVALS = 100_000


@FUZZ
@given(kw=routing_kwargs(), seed=SEEDS)
def test_fuzz_lazy_replicas_give_the_episode_of_replicas_read_at_every_arrival(kw, seed):
    """Lazy replicas (``batch_env.llm.cluster``: each runs only when routed to, read or
    marked; the end found replica by replica) give the episode that bringing every
    replica up to every arrival gives: summary, routes and end time, on any settings
    (horizons, windows, classes, prefix caching, masks, heterogeneous replicas)."""
    lazy = _lazy_run(kw, seed, read_all=False)
    read = _lazy_run(kw, seed, read_all=True)
    assert lazy[1:] == read[1:]
    a, b = (json.dumps(x[0], sort_keys=True, default=repr) for x in (lazy, read))  # (NaNs)
    assert a == b, [
        k
        for k in lazy[0]
        if json.dumps(lazy[0][k], default=repr) != json.dumps(read[0][k], default=repr)
    ]


@pytest.mark.slow
@FUZZ
@given(
    kw=batch_kwargs(finite_traces=False),
    seed=st.integers(0, 2**20),
    n_envs=st.integers(1, 3),
    policy=st.sampled_from(["random", "greedy", "patient"]),
    mode=st.sampled_from([AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]),
)
def test_fuzz_vector_env_lockstep(kw, seed, n_envs, policy, mode):
    """Every lane equals the scalar env on the same seed, step for step, ties included."""
    kw = materialize(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            DynamicBatchingEnv(**kw)
        except ValueError:
            assume(False)
        event(f"workload {kw['workload']['kind']}")
        lockstep(kw, n_envs=n_envs, steps=VECTOR_STEPS, seed=seed, policy=policy, mode=mode)


def test_gym_make_passes_the_same_checks():
    """The registered ids build the same envs (wrappers included) the fuzz suite checks."""
    for env_id in batch_env.ENV_IDS:
        env = gym.make(env_id)
        env.reset(seed=0)
        assert env.unwrapped.request_counts()["arrived"] >= 1
