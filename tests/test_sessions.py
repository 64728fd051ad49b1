"""The ``sessions`` workload (issue 63): multi-turn chat sessions with shared system
prompts, whose prompts carry block hashes for prefix caching."""

from __future__ import annotations

import numpy as np
import pytest

from batch_env.workload import Sessions, make_workload

SPEC = {
    "kind": "sessions",
    "rate_per_s": 5.0,
    "turns_mean": 3.0,
    "think_time_s": 20.0,
    "system_prompts": 3,
    "system_prompt_tokens": 300,
    "user_tokens_mean": 100.0,
    "output_tokens_mean": 80.0,
    "prefix_block_tokens": 64,
}


def _arrivals(spec: dict, seed: int, chunks: int = 3):
    stream = make_workload(spec).stream(np.random.default_rng(seed), 2000)
    cs = [stream.next_chunk() for _ in range(chunks)]
    times = np.concatenate([c.times for c in cs])
    prompt = np.concatenate([c.prompt_tokens for c in cs])
    output = np.concatenate([c.output_tokens for c in cs])
    prefix = [h for c in cs for h in c.prefix]
    return times, prompt, output, prefix


def test_a_stream_is_a_function_of_its_seed_and_in_time_order():
    a, b, c = _arrivals(SPEC, 3), _arrivals(SPEC, 3), _arrivals(SPEC, 4)
    assert all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3], strict=True)) and a[3] == b[3]
    assert not np.array_equal(a[0], c[0])
    assert np.all(np.diff(a[0]) >= 0)


def test_its_rate_turns_and_lengths_are_as_asked():
    times, prompt, output, prefix = _arrivals(SPEC, 0, chunks=10)  # 20,000 turns
    rate = len(times) / times[-1]
    assert rate == pytest.approx(5.0, rel=0.05)
    assert output.mean() == pytest.approx(80.0, rel=0.05)
    assert prompt.min() >= 301  # the system prompt and a user token at least
    # each prompt has its blocks' hashes: ceil(prompt / 64)
    assert all(len(h) == -(-p // 64) for h, p in zip(prefix, prompt, strict=True))
    # a session's first block after its system prompt is its own (positive once full):
    # turns per session ~ turns_mean (sessions whose every prompt ends inside that block
    # are not seen: few, with 100-token user messages)
    sys_full = 300 // 64
    sessions = len({h[sys_full] for h in prefix if h[sys_full] > 0})
    assert len(prefix) / sessions == pytest.approx(3.0, rel=0.1)


def test_each_turn_extends_its_session_and_system_prompts_are_shared():
    times, prompt, output, prefix = _arrivals(SPEC, 1)
    sys_full = 300 // 64
    by_session: dict[int, list[int]] = {}
    for k, h in enumerate(prefix):
        if len(h) > sys_full and h[sys_full] > 0:
            by_session.setdefault(h[sys_full], []).append(k)
    multi = [ks for ks in by_session.values() if len(ks) > 1]
    assert multi, "no session with two turns"
    for ks in multi:
        for a, b in zip(ks, ks[1:], strict=False):
            full = prompt[a] // 64
            assert prefix[b][:full] == prefix[a][:full]  # the next prompt extends this one
            assert prompt[b] >= prompt[a] + output[a] + 1
            assert times[b] > times[a]
    heads = {h[:sys_full] for h in prefix}
    assert len(heads) == 3  # three shared system prompts


@pytest.mark.parametrize(
    "field, value, expect",
    [
        ("rate_per_s", 0, r"Sessions: rate_per_s=0"),
        ("turns_mean", 0.5, r"Sessions: turns_mean=0.5"),
        ("system_prompts", 0, r"Sessions: system_prompts=0"),
        ("prefix_block_tokens", 1.5, r"Sessions: prefix_block_tokens=1.5"),
        ("user_tokens_cv", -1, r"Sessions: user_tokens_cv=-1"),
    ],
)
def test_bad_fields_are_named(field, value, expect):
    with pytest.raises(ValueError, match=expect):
        make_workload({**SPEC, field: value})
    with pytest.raises(ValueError, match=r"unknown field|not_a_field"):
        make_workload({**SPEC, "not_a_field": 1})


def test_sessions_run_in_every_llm_env_and_in_a_server_without_an_env():
    import gymnasium as gym

    from batch_env.config import LLMConfigV1
    from batch_env.executor import make_llm_executor
    from batch_env.llm import LLMServer
    from batch_env.llm.server import profile_for

    spec = {**SPEC, "rate_per_s": 3.0}
    for env_id in (
        "batch_env/LLMBatching-v0",
        "batch_env/LLMBatching-v1",
        "batch_env/LLMBatching-v2",
    ):
        env = gym.make(env_id, workload=spec, horizon_requests=150)
        assert env.unwrapped.server.state.kv.prefix  # on by default: prompts carry hashes
        env.reset(seed=0)
        while True:
            *_, term, trunc, info = env.step(env.action_space.n - 1)
            if term or trunc:
                break
        s = info["serving"]
        assert s["completed"] > 0 and s["prefix_hit_rate"] > 0.3, s
    profile, config = profile_for("llama-2-7b-a100", None, {"horizon_requests": 100}, LLMConfigV1)
    ex = make_llm_executor("profile", profile, config.max_num_seqs, config.max_model_len)
    server = LLMServer(
        config, profile, Sessions(**{k: v for k, v in spec.items() if k != "kind"}), ex
    )
    server.reset(seed=0)
    while not server.over():
        server.run_one(server.grid[-1], server.budgets[-1])
    assert server.summary()["prefix_hit_rate"] > 0.3


def test_a_system_prompt_that_never_fits_is_refused():
    import gymnasium as gym

    with pytest.raises(
        ValueError, match=r"max_model_len=4096, and the workload's shortest prompt has 5001 tokens"
    ):
        gym.make("batch_env/LLMBatching-v1", workload={**SPEC, "system_prompt_tokens": 5000})
