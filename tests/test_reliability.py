"""Failures found by trying to break the environments, each kept fixed by a test.

Every test here failed before its fix: a reset that never returned, silent acceptance of
nonsense, errors that did not name what was wrong (see docs/reliability.md).
"""

from __future__ import annotations

import json
import re
import time
import tracemalloc
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded

import batch_env
from batch_env.config import MAX_BATCH_LIMIT, ArgumentError
from batch_env.envs import DynamicBatchingEnv, LLMBatchingEnv, NodeBatchingEnv

ENVS = {
    "batch_env/DynamicBatching-v0": DynamicBatchingEnv,
    "batch_env/NodeBatching-v0": NodeBatchingEnv,
    "batch_env/LLMBatching-v0": LLMBatchingEnv,
}
SHORT = {
    "batch_env/DynamicBatching-v0": {"horizon_requests": 20},
    "batch_env/NodeBatching-v0": {"horizon_requests": 20},
    "batch_env/LLMBatching-v0": {
        "horizon_requests": 5,
        "lengths": {"kind": "fixed", "prompt_tokens": 20, "output_tokens": 3},
    },
}


def _trace(tmp_path, rows, name="t.csv"):
    path = tmp_path / name
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{t},{p},{o}\n" for t, p, o in rows)
    )
    return str(path)


def _greedy(env) -> int:
    return int(np.flatnonzero(env.action_masks())[-1])


# -- 1. no reset or step loops without bound ------------------------------------------


def test_llm_no_prompt_fits_is_a_config_error_not_a_hang():
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"max_model_len=4096.*lengths.prompt_tokens=5000"):
        gym.make(
            "batch_env/LLMBatching-v0",
            lengths={"kind": "fixed", "prompt_tokens": 5000, "output_tokens": 10},
        )
    with pytest.raises(ValueError, match=r"almost no request.*lognormal"):
        LLMBatchingEnv(lengths={"kind": "lognormal", "prompt_tokens": 50_000, "prompt_cv": 0.1})
    assert time.perf_counter() - t0 < 10


def test_llm_trace_whose_prompts_all_exceed_max_model_len_is_refused(tmp_path):
    path = _trace(tmp_path, [(0.0, 300, 5), (0.5, 200, 5), (1.0, 400, 5)])
    with pytest.raises(ValueError, match=r"shortest prompt of trace .*t\.csv.* 200 tokens"):
        LLMBatchingEnv(workload={"kind": "trace", "path": path}, max_model_len=128)
    env = LLMBatchingEnv(workload={"kind": "trace", "path": path}, max_model_len=256)  # one fits
    env.reset(seed=0)
    assert env.step(0)[4]["rejected_total"] >= 1


def test_llm_empirical_lengths_that_never_fit_are_refused(tmp_path):
    path = _trace(tmp_path, [(0.0, 3000, 5), (1.0, 5000, 5)])
    with pytest.raises(ValueError, match=r"shortest prompt of lengths.path=.* 3000 tokens"):
        LLMBatchingEnv(lengths={"kind": "empirical", "path": path}, max_model_len=2048)


def test_llm_search_for_an_admissible_arrival_is_bounded():
    """Past the construction check (here bypassed), the search still gives up with an error."""
    env = LLMBatchingEnv(lengths={"kind": "fixed", "prompt_tokens": 20, "output_tokens": 3})
    env.server.intake.lengths = batch_env.workload.RequestLengths(
        kind="fixed", prompt_tokens=5000, output_tokens=3
    )
    env.server.intake._max_rejected_run = 10_000
    with pytest.raises(ValueError, match=r"arrivals in a row were rejected.*max_model_len=4096"):
        env.reset(seed=0)


# -- 5. bounded allocation --------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_batch_size"])
@pytest.mark.parametrize("env_id", ["batch_env/DynamicBatching-v0", "batch_env/NodeBatching-v0"])
def test_batch_size_above_the_documented_limit_is_refused(env_id, field):
    lin = {
        "name": "lin",
        "model": "m",
        "device": "d",
        "source": "test",
        "kind": "linear",
        "alpha_ms": 0.1,
        "tau0_ms": 1.0,
        "beta_j": 0.01,
        "c0_j": 0.1,
        "idle_power_w": 10.0,
    }
    tracemalloc.start()
    try:
        with pytest.raises(
            ValueError, match=rf"{field}=10000000000 is out of range.*<= {MAX_BATCH_LIMIT}"
        ):
            gym.make(env_id, profile=lin, **{field: 10**10})
        assert tracemalloc.get_traced_memory()[1] < 50 * 2**20
    finally:
        tracemalloc.stop()


def test_llm_max_num_seqs_above_the_limit_is_refused_without_allocating():
    tracemalloc.start()
    try:
        with pytest.raises(
            ValueError, match=rf"max_num_seqs=1000000000000 is out of range.*<= {MAX_BATCH_LIMIT}"
        ):
            LLMBatchingEnv(max_num_seqs=10**12)
        assert tracemalloc.get_traced_memory()[1] < 50 * 2**20
    finally:
        tracemalloc.stop()


def test_ticks_too_short_to_move_the_clock_are_refused():
    with pytest.raises(ValueError, match=r"decision_interval_ms=1e-09 is out of range"):
        DynamicBatchingEnv(decision_interval_ms=1e-9)


# -- 6. silent acceptance -----------------------------------------------------------------


@pytest.mark.parametrize("env_id", list(ENVS))
def test_torch_device_is_checked_and_refused_with_the_profile_executor(env_id):
    with pytest.raises(
        ValueError, match=r"torch_device='tpu' is invalid: expected 'auto', 'cpu', 'cuda'"
    ):
        gym.make(env_id, torch_device="tpu")
    with pytest.raises(ValueError, match=r"torch_device='cpu' is only used with executor='torch'"):
        gym.make(env_id, torch_device="cpu")


@pytest.mark.parametrize("column", ["ContextTokens", "GeneratedTokens"])
def test_zero_token_trace_rows_are_refused(tmp_path, column):
    rows = [(0.0, 10, 5), (0.5, 10, 5), (1.0, 10, 5)]
    rows[1] = (0.5, 0, 5) if column == "ContextTokens" else (0.5, 10, 0)
    path = _trace(tmp_path, rows)
    with pytest.raises(
        ValueError, match=rf"t\.csv.*column '{column}' data row 2: token count 0 is invalid"
    ):
        LLMBatchingEnv(workload={"kind": "trace", "path": path})
    with pytest.raises(
        ValueError, match=rf"lengths.path=.*column '{column}' data row 2: token count 0"
    ):
        LLMBatchingEnv(lengths={"kind": "empirical", "path": path})


@pytest.mark.parametrize("env_id", list(ENVS))
def test_step_after_the_end_raises_until_reset(env_id):
    env = ENVS[env_id](**SHORT[env_id])
    env.reset(seed=0)
    for _ in range(10_000):
        if env.step(_greedy(env))[3]:
            break
    else:
        pytest.fail("the episode did not end")
    with pytest.raises(ResetNeeded, match=r"episode ended \(truncated=True\): call reset\(\)"):
        env.step(_greedy(env))
    env.action_masks()  # still readable
    env.reset(seed=1)
    env.step(_greedy(env))


@pytest.mark.parametrize("env_id", list(ENVS))
def test_calls_before_reset_raise_reset_needed(env_id):
    env = ENVS[env_id](render_mode="ansi")
    for call in (lambda: env.step(0), env.action_masks, env.render):
        with pytest.raises(ResetNeeded, match=r"call reset\(\) before"):
            call()
    with pytest.raises(ResetNeeded, match=r"call reset\(\) before"):  # through gym.make's wrappers
        gym.make(env_id).unwrapped.action_masks()


# -- 7. errors that name the field, the value and what is allowed -----------------------


@pytest.mark.parametrize("env_id", list(ENVS))
def test_unknown_arguments_list_the_allowed_ones(env_id):
    for make in (lambda: gym.make(env_id, bogus_key=1), lambda: ENVS[env_id](bogus_key=1)):
        with pytest.raises(
            ArgumentError,
            match=r"unknown argument\(s\) \['bogus_key'\]: allowed arguments are \[.*'profile'",
        ):
            make()
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, TypeError)


@pytest.mark.parametrize("value", [123, None, 1.5, ["resnet50-v100"]])
@pytest.mark.parametrize("env_id", list(ENVS))
def test_profile_of_the_wrong_type_names_the_field(env_id, value):
    with pytest.raises(
        ValueError,
        match=rf"profile={re.escape(repr(value))} is invalid: expected a shipped .*profile name",
    ):
        ENVS[env_id](profile=value)


def test_binary_files_are_named(tmp_path):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(ValueError, match=r"Trace '.*blob\.bin': not a UTF-8 text CSV file"):
        DynamicBatchingEnv(workload={"kind": "trace", "path": str(blob)})
    with pytest.raises(ValueError, match=r"profile '.*blob\.bin': not a UTF-8 text file"):
        DynamicBatchingEnv(profile=str(blob))
    with pytest.raises(ValueError, match=r"LLM profile '.*blob\.bin': not a UTF-8 text file"):
        LLMBatchingEnv(profile=str(blob))
    with pytest.raises(ValueError, match=r"blob\.bin.*not a UTF-8 text CSV file"):
        LLMBatchingEnv(lengths={"kind": "empirical", "path": str(blob)})


def test_profile_json_with_a_bom_still_loads(tmp_path):
    prof = batch_env.profile.load("resnet50-v100").to_dict()
    path = tmp_path / "p.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(prof).encode())
    DynamicBatchingEnv(profile=str(path)).reset(seed=0)


def test_max_model_len_beyond_the_profile_names_max_model_len():
    with pytest.raises(
        ValueError,
        match=r"^max_model_len=1000000000 is out of range.*expected max_model_len <= 4096",
    ):
        LLMBatchingEnv(max_model_len=10**9)
    with pytest.raises(
        ValueError, match=r"^max_num_batched_tokens=10000 exceeds"
    ):  # set by the user: named
        LLMBatchingEnv(max_num_batched_tokens=10_000)


def test_warnings_do_not_hide_errors():
    """The drop-weight warning and an error in one construction: the error still surfaces."""
    with warnings.catch_warnings(), pytest.raises(ValueError, match="torch_device"):
        warnings.simplefilter("ignore")
        DynamicBatchingEnv(reward_weights={"drop": 0.0}, torch_device="x")


def test_llm_finite_trace_whose_every_prompt_is_rejected_ends_cleanly(tmp_path):
    """Found by the fuzz suite: the clock went to infinity and the reward turned NaN."""
    path = _trace(tmp_path, [(0.0, 100, 1)] * 4 + [(0.5, 30, 1)])
    lengths = {"kind": "lognormal", "prompt_tokens": 1000, "prompt_cv": 1.0}  # 0.2% fit
    env = LLMBatchingEnv(
        workload={"kind": "trace", "path": path, "loop": False}, max_model_len=64, lengths=lengths
    )
    _, info = env.reset(seed=0)
    assert info["now_s"] == 0.0
    _, reward, _, truncated, info = env.step(0)
    assert truncated and reward == 0.0 and info["serving"]["completed"] == 0
    assert env.request_counts()["rejected"] == 4


@pytest.mark.parametrize("env_id", ["batch_env/DynamicBatching-v0", "batch_env/LLMBatching-v0"])
def test_executor_options_are_checked_before_a_model_is_built(env_id):
    pytest.importorskip("torch")
    kw = {"executor": "torch", "torch_device": "cpu"}
    with pytest.raises(ValueError, match=r"executor_options='x' is invalid: expected a dict"):
        ENVS[env_id](executor_options="x", **kw)
    with pytest.raises(
        ValueError,
        match=r"executor_options has unknown key\(s\) \['bogus'\]: allowed keys are \[.*'width'\]",
    ):
        ENVS[env_id](executor_options={"bogus": 1}, **kw)


def test_evaluate_bounds_an_episode_even_without_the_time_limit():
    """An always-wait policy on an unwrapped env with ticks ends within max_steps."""
    from batch_env.evaluate import evaluate

    class Wait:
        def reset(self):
            pass

        def act(self, obs, info):
            return 0

    env = DynamicBatchingEnv(decision_interval_ms=1e-3, horizon_s=1e6)
    with pytest.raises(
        RuntimeError, match=r"ended after 500 steps without info\['serving'\].*max_steps=500"
    ):
        evaluate(Wait(), env, n_episodes=1, max_steps=500)
