"""LLMBatching-v0 in real mode: every iteration runs a GPT decoder with a real KV cache (tiny, CPU)."""

from __future__ import annotations

import json
import statistics
import warnings
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import check_env_except_determinism

import batch_env  # noqa: F401
from batch_env.executor import LLMProfileExecutor
from batch_env.metrics import LLM_KEYS, SERVING_KEYS
from batch_env.profiles.llm_profile import load as load_llm_profile
from batch_env.real.energy import EnergyMeter, ModelMeter
from batch_env.real.llm_torch_executor import LLMTorchExecutor

LLM = "batch_env/LLMBatching-v0"
PROFILE = "llama-2-7b-a100"
TINY = {
    "width": 0.125,
    "depth": 1,
    "threads": 1,
    "warmup": 1,
    "model_kwargs": {"heads": 2, "vocab_size": 256, "n_positions": 64},
}
# hidden 128, a 4096-token vocabulary: big enough that a decode's work shows in its time
SMALL = {
    "width": 0.5,
    "depth": 2,
    "threads": 1,
    "warmup": 1,
    "model_kwargs": {"heads": 4, "vocab_size": 4096, "n_positions": 128},
}


@pytest.fixture(scope="module", autouse=True)
def restore_threads():
    """The executor sets torch's thread count process-wide; give other tests theirs back."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def make(**kw):
    """A real-mode env under KV pressure: 40 requests of 16 + 16 tokens arrive at once
    (1e5 per second), 8 may run, and the profile's cache at 17% of the A100 holds 14 blocks
    of 16 tokens, so 8 requests needing 2 blocks each must preempt."""
    args = dict(
        executor="torch",
        model="gpt-small",
        torch_device="cpu",
        executor_options=TINY,
        max_model_len=64,
        max_num_seqs=8,
        horizon_requests=40,
        horizon_s=60.0,
        lengths={"kind": "fixed", "prompt_tokens": 16, "output_tokens": 16},
        workload={"kind": "poisson", "rate_per_s": 1e5},
        gpu_memory_utilization=0.17,
    )
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no NVML/RAPL here" is reported once, not an error
        return gym.make(LLM, **args)


def executor(cfg=TINY, max_num_seqs=16, max_model_len=64, **kw):
    kw.setdefault("meter", ModelMeter("test: no meter", "cpu"))
    kw.setdefault("profile", PROFILE)
    return LLMTorchExecutor(
        max_num_seqs=max_num_seqs, max_model_len=max_model_len, torch_device="cpu", **{**cfg, **kw}
    )


def spy(ex, name, log):
    """Record what ``ex.<name>`` returns, calling through."""
    real = getattr(ex, name)

    def call(*args):
        out = real(*args)
        log.append((name, out[0]))
        return out

    setattr(ex, name, call)


def test_episode_runs_real_iterations_with_one_cache_per_running_request():
    env = make()
    u = env.unwrapped
    ex = u.executor
    assert isinstance(ex, LLMTorchExecutor) and ex.device == torch.device("cpu")
    log: list[tuple[str, float]] = []
    spy(ex, "prefill", log)
    spy(ex, "decode", log)
    obs, info = env.reset(seed=0)
    kinds: Counter[str] = Counter()
    for _ in range(10_000):
        now, n_calls = info["now_s"], len(log)
        obs, r, term, trunc, info = env.step(7)  # cap 8
        assert env.observation_space.contains(obs) and np.isfinite(r) and not term
        kind = info["iteration"]
        kinds[kind] += 1
        if kind != "idle":
            # the measured duration is the iteration's time and advances the clock
            assert len(log) == n_calls + 1 and log[-1][0] == kind
            assert info["iteration_time_s"] == log[-1][1] > 0
            assert info["now_s"] >= now + info["iteration_time_s"] - 1e-12
        # exactly the running requests hold a cache, each with its prompt + generated tokens
        # but the last one (which the next decode writes)
        assert (
            ex.live_sequences == set(u.server.state.running)
            and len(ex.live_sequences) == info["running"]
        )
        assert ex.context_lengths() == {
            e: u.server.state.prompt[e] + u.server.state.generated[e] - 1
            for e in u.server.state.running
        }
        if trunc:
            break
    s = info["serving"]
    assert set(SERVING_KEYS) | set(LLM_KEYS) <= set(s)
    assert s["completed"] == 40 and s["preemptions"] > 0 and info["preemptions_total"] > 0
    assert s["latency_mean_ms"] > 0 and s["power_mean_w"] > 0 and s["output_tokens_per_s"] > 0
    assert kinds["prefill"] > 0 and kinds["decode"] > 0
    # no cache for a finished or a preempted (waiting) request
    assert all(u.server.finished_at[e] is None for e in ex.live_sequences)
    assert not ex.live_sequences & set(u.server.state.waiting)
    assert info["energy_source"] == ex.energy_source in ("nvml", "rapl", "profile")
    env.reset(seed=1)  # a new episode starts with no cache
    assert not ex.live_sequences and ex.cache_nbytes == 0
    env.close()
    env.close()  # idempotent


def test_get_config_records_the_executor():
    env = make()
    cfg = env.unwrapped.get_config()
    assert cfg["executor"] == "torch" and cfg["model"] == "gpt-small"
    assert cfg["torch_device"] == "cpu" and cfg["executor_options"] == TINY
    md = cfg["executor_metadata"]
    assert md["executor"] == "LLMTorchExecutor" and md["threads"] == 1
    assert md["torch_version"] == torch.__version__ and md["device"] == "cpu"
    assert md["n_positions"] == 64 and md["max_model_len"] == 64 and md["max_num_seqs"] == 8
    assert md["energy_source"] in ("nvml", "rapl", "profile") and md["profile"] == PROFILE
    json.dumps(cfg)
    env.close()


def test_env_checks_other_than_determinism():
    """Real timings vary, so check_env's determinism checks do not apply; every other one must pass."""
    env = make().unwrapped
    check_env_except_determinism(env)
    env.close()


def test_decode_time_grows_with_batch_size():
    """Median of 15 decode steps at batch 1 and 16, every context 32 tokens, on the
    calling thread's CPU clock (other processes on a loaded machine do not inflate it).

    The two sizes run in alternation, so that a spell of contention through shared caches
    (which the thread CPU clock does not remove) lands on both sizes, not on one."""
    ex = executor(SMALL, max_model_len=128, clock="thread_cpu")
    assert ex.metadata()["clock_source"] == "thread_time_ns"
    times: dict[int, list[float]] = {1: [], 16: []}
    for _ in range(15):
        for b in times:
            seqs = list(range(b))
            ex.prefill(32 * b, 0.0, seqs, [32] * b)
            times[b].append(ex.decode(b, 33 * b, seqs)[0])
            ex.release(seqs)
    med = {b: statistics.median(t) for b, t in times.items()}
    assert med[16] > 1.3 * med[1], med


def test_batched_cache_holds_each_sequence_as_if_run_alone():
    """A ragged prefill, a join, a release and two batched decodes leave each row's keys and
    values equal to those of a prefill of that sequence's own tokens, run alone."""
    ex = executor()
    prompts, steps = ex._prompt_ids, ex._decode_ids  # the seeded token ids, row by row
    ex.prefill(20, 0.0, [0, 1], [12, 8])  # ragged: the masked path
    ex.decode(2, 22, [0, 1])  # decode ids row 0
    ex.prefill(30, 0.0, [2], [30])  # e.g. a recompute of prompt 20 + 10 generated tokens
    ex.release([0])  # finished
    ex.decode(2, 43, [1, 2])  # decode ids row 1; sequence 0's row is dropped first
    assert ex.context_lengths() == {1: 10, 2: 31} and ex.live_sequences == {1, 2}
    history = {
        1: torch.cat([prompts[1, :8], steps[0, 1:2], steps[1, 0:1]]),
        2: torch.cat([prompts[0, :30], steps[1, 1:2]]),
    }
    cache = ex._cache
    assert ex._rows == [1, 2] and cache.capacity == 32
    for row, e in enumerate(ex._rows):
        n = len(history[e])
        with torch.inference_mode():
            _, alone = ex.model.prefill(history[e][None])
        for layer in range(len(cache.k)):
            for got, want in ((cache.k[layer], alone.k[layer]), (cache.v[layer], alone.v[layer])):
                assert torch.allclose(got[row, :, :n], want[0, :, :n], rtol=1e-4, atol=1e-5)
    ex.release([1, 2])
    assert ex.cache_nbytes == 0 and not ex.context_lengths()


def test_energy_from_the_profile_power_model():
    ex = executor()
    prof = load_llm_profile(PROFILE)
    assert ex.energy_source == "profile" and "llama-2-7b-a100" in ex.energy_reason
    d, e = ex.prefill(24, 0.0, [0, 1], [12, 12])
    assert e == pytest.approx(prof.prefill_power_w(24) * d)
    d, e = ex.decode(2, 26, [0, 1])
    assert e == pytest.approx(prof.decode_power_w(2) * d)


class FakeMeter(EnergyMeter):
    """A counter that moves 2 J per read and reports 100 W."""

    def __init__(self, period):
        self.source, self.reason, self.device_name = "rapl", "fake rapl", "fake"
        self.counter_period_s, self.j, self.closed = period, 0.0, False

    def read_j(self):
        self.j += 2.0
        return self.j

    def power_w(self):
        return 100.0

    def close(self):
        self.closed = True


def test_energy_from_a_meter():
    meter = FakeMeter(period=1e-9)  # every iteration is long enough for the counter
    ex = executor(meter=meter, profile=None, warmup=0)
    assert ex.energy_source == "rapl" and ex.metadata()["profile"] is None
    assert ex.prefill(10, 0.0, [0], [10])[1] == pytest.approx(2.0)  # one read before, one after
    assert ex.decode(1, 11, [0])[1] == pytest.approx(2.0)
    ex.close()
    assert meter.closed
    meter = FakeMeter(period=1e3)  # too short for the counter: power x duration
    ex = executor(meter=meter, profile=None, warmup=0)
    ex.prefill(10, 0.0, [0], [10])
    d, e = ex.decode(1, 11, [0])
    assert e == pytest.approx(100.0 * d)
    with pytest.raises(ValueError, match=r"test: no meter.*pass profile="):
        executor(profile=None)


def test_sequence_bookkeeping_errors():
    ex = executor(warmup=0)
    ex.prefill(20, 0.0, [0, 1], [10, 10])
    with pytest.raises(ValueError, match=r"\[0\] already hold a KV cache"):
        ex.prefill(10, 0.0, [0], [10])
    with pytest.raises(ValueError, match=r"\[1\] hold a KV cache but are not in this decode"):
        ex.decode(1, 11, [0])
    ex.release([1])
    with pytest.raises(ValueError, match=r"\[1\] hold no KV cache"):
        ex.decode(2, 22, [0, 1])
    with pytest.raises(ValueError, match="release: sequence 1 holds no KV cache"):
        ex.release([1])
    with pytest.raises(ValueError, match="batch=3"):
        ex.decode(3, 11, [0])
    with pytest.raises(ValueError, match=r"1\.\.63 \(max_model_len - 1\)"):
        ex.prefill(64, 0.0, [5], [64])
    assert ex.decode(1, 11, [0])[0] > 0


def test_profile_executor_has_the_same_interface():
    prof = load_llm_profile(PROFILE)
    ex = LLMProfileExecutor(prof)
    assert ex.needs_sequences is False and LLMTorchExecutor.needs_sequences is True
    assert ex.prefill(300, 300.0**2, [0], [300]) == ex.prefill(300, 300.0**2)
    assert ex.decode(4, 1000, [0, 1, 2, 3]) == ex.decode(4, 1000)
    ex.release([0])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"model": "resnet50"}, ValueError, r"model='resnet50' is invalid.*\['gpt-small'\]"),
        ({"model": "alexnet"}, ValueError, r"model='alexnet' is invalid"),
        (
            {"max_model_len": 128},
            ValueError,
            r"max_model_len=128 exceeds the model's n_positions=64",
        ),
        ({"executor_options": {**TINY, "threads": 0}}, ValueError, "threads=0"),
        (
            {"executor_options": {**TINY, "weights": "/nonexistent/w.pt"}},
            FileNotFoundError,
            "does not exist",
        ),
        ({"executor": "jax"}, ValueError, "executor='jax' is invalid"),
        ({"torch_device": "gpu"}, ValueError, "expected 'auto', 'cpu', 'cuda'"),
    ],
)
def test_real_mode_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        make(**kwargs)


def test_malformed_weights_file(tmp_path):
    bad = tmp_path / "garbage.pt"
    bad.write_bytes(b"not a state dict")
    with pytest.raises(ValueError, match="could not be read as a state_dict"):
        make(executor_options={**TINY, "weights": str(bad)})
    other = tmp_path / "other.pt"
    torch.save(executor(warmup=0, width=0.25).model.state_dict(), other)  # another width
    with pytest.raises(ValueError, match="shape mismatches"):
        make(executor_options={**TINY, "weights": str(other)})


def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU is available"):
        make(torch_device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (runs on GPU machines)")
def test_cuda_episode():
    env = make(torch_device="cuda", executor_options={**TINY, "threads": None})
    u = env.unwrapped
    assert u.executor.device.type == "cuda" and u.executor.energy_source in ("nvml", "profile")
    env.reset(seed=0)
    for _ in range(10_000):
        _, _, _, trunc, info = env.step(7)
        assert u.executor.live_sequences == set(u.server.state.running)
        if trunc:
            break
    assert info["serving"]["completed"] == 40 and info["serving"]["preemptions"] > 0
    env.close()


def test_chunked_scheduler_runs_real_mixed_batches():
    """With the chunked scheduler the GPT runs mixed batches (decodes plus prompt chunks
    continuing their caches, in one call): exactly the requests holding KV in the env hold
    a real cache, each with the tokens the env has computed for it (a prefill in progress:
    its chunks so far; a decoding request: prompt + generated but the last); prompts are
    split (a budget of 12 tokens, prompts of 16) and preemptions happen."""
    env = make(
        scheduler="chunked",
        max_num_batched_tokens=12,
        max_num_seqs=8,
        lengths={"kind": "fixed", "prompt_tokens": 16, "output_tokens": 16},
    )
    u = env.unwrapped
    ex = u.executor
    log: list[tuple[str, float]] = []
    spy(ex, "mixed", log)
    obs, info = env.reset(seed=0)
    kinds: Counter[str] = Counter()
    for _ in range(20_000):
        obs, r, term, trunc, info = env.step(7)
        assert env.observation_space.contains(obs) and np.isfinite(r)
        kinds[info["iteration"]] += 1
        if info["iteration"] != "idle" and info["iteration_time_s"] > 0:
            assert info["iteration_time_s"] == log[-1][1] > 0
        assert ex.live_sequences == set(u.server.state.running)
        want = {
            e: (
                u.server.state.prefill_done[e]
                if u.server.state.prefill_left[e]
                else u.server.state.prompt[e] + u.server.state.generated[e] - 1
            )
            for e in u.server.state.running
        }
        assert ex.context_lengths() == want
        if trunc:
            break
    s = info["serving"]
    assert s["completed"] == 40 and s["preemptions"] > 0
    assert kinds["mixed"] > 0 and kinds["prefill"] > 0 and kinds["decode"] > 0
    assert not ex.live_sequences & set(u.server.state.waiting)
    env.close()


def test_v2_in_real_mode_runs_every_iteration_on_the_model():
    """LLMBatching-v2 with executor="torch": fewer steps than iterations, and every
    iteration (forced ones included) is a call of the real model, whose caches follow the
    running requests."""
    args = dict(
        executor="torch",
        model="gpt-small",
        torch_device="cpu",
        executor_options=TINY,
        max_model_len=64,
        max_num_seqs=8,
        horizon_requests=30,
        horizon_s=60.0,
        lengths={"kind": "fixed", "prompt_tokens": 16, "output_tokens": 16},
        workload={"kind": "poisson", "rate_per_s": 1e5},
        gpu_memory_utilization=0.17,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make("batch_env/LLMBatching-v2", **args)
    u = env.unwrapped
    calls = Counter()
    ex = u.executor
    for name in ("prefill", "decode", "mixed"):
        real = getattr(ex, name)

        def counted(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)

        setattr(ex, name, counted)
    env.reset(seed=0)
    assert u.server.decode_runs is False  # no decode loop around the model
    steps = 0
    while True:
        *_, trunc, info = env.step(env.action_space.n - 1)
        steps += 1
        assert ex.live_sequences == set(u.server.state.running)
        if trunc:
            break
    assert info["serving"]["completed"] == 30
    assert sum(calls.values()) == u.server.iterations > steps  # every iteration on the model
    env.close()
