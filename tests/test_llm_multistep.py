"""vLLM 0.6's multi-step scheduling on the ``vllm-v0`` scheduler (``num_scheduler_steps``,
docs/design.md): a decode group runs k steps back to back, no prefill inside a group, a
prefill is one step; k = 1 is the scheduler as before; bad values get one-line errors."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

import batch_env  # noqa: F401


def _env(k: int | None, horizon: int) -> gym.Env:
    """LLMBatching-v1 on vLLM v0's scheduler with ``k`` steps a group (None: the setting
    left out), Poisson arrivals at 8 requests/s."""
    steps = {} if k is None else {"num_scheduler_steps": k}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(
            "batch_env/LLMBatching-v1",
            profile="llama-3.1-8b-a100",
            scheduler="vllm-v0",
            workload={"kind": "poisson", "rate_per_s": 8.0},
            horizon_requests=horizon,
            **steps,
        )


def _run(k: int | None, seed: int = 3) -> tuple[list[tuple[str, int, int]], dict]:
    """Every iteration's (kind, requests waiting before it, running after it) and the
    episode's serving summary, at the largest cap."""
    env = _env(k, 300)
    srv = env.unwrapped.server
    log: list[tuple[str, int, int]] = []
    apply = srv.scheduler.apply

    def record(work, duration_s):
        waiting = len(srv.state.waiting)
        out = apply(work, duration_s)
        log.append((work.kind, waiting, len(srv.state.running)))
        return out

    srv.scheduler.apply = record
    env.reset(seed=seed)
    last = env.action_space.n - 1
    info: dict = {}
    for _ in range(1_000_000):
        _o, _r, term, trunc, info = env.step(last)
        if term or trunc:
            break
    env.close()
    return log, info["serving"]


def test_decode_groups_run_k_steps_before_a_prefill():
    log, _ = _run(4)
    kinds = [k for k, _w, _r in log]
    assert kinds.count("prefill") > 20 and kinds.count("decode") > 200
    run = 0  # decodes since the last prefill
    waited_inside_a_group = 0
    prev_running = 0
    for kind, waiting, running in log:
        if kind == "prefill":
            # a prefill comes after whole groups, or once no request was left running
            assert run % 4 == 0 or prev_running == 0
            run = 0
        else:
            if run % 4 and waiting:
                waited_inside_a_group += 1
            run += 1
        prev_running = running
    assert waited_inside_a_group > 0  # requests did wait for a group to end


def test_one_step_is_the_scheduler_as_before_and_groups_delay_first_tokens():
    log1, one = _run(1)
    _log, default = _run(None)
    assert one == default
    # with k = 1 no decode runs while a request waits (nothing bars admission at this load)
    assert all(w == 0 for kind, w, _r in log1 if kind == "decode")
    _log10, ten = _run(10)
    assert ten["ttft_p50_ms"] > 1.5 * one["ttft_p50_ms"]
    assert ten["completed"] == one["completed"]


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"scheduler": "vllm-v0", "num_scheduler_steps": 0}, ["num_scheduler_steps", "0"]),
        ({"scheduler": "vllm-v0", "num_scheduler_steps": 2.5}, ["num_scheduler_steps", "2.5"]),
        ({"scheduler": "chunked", "num_scheduler_steps": 4}, ["num_scheduler_steps=4", "vllm-v0"]),
    ],
)
def test_bad_step_counts_are_named(kw, words):
    with pytest.raises(ValueError) as e:
        gym.make("batch_env/LLMBatching-v1", profile="llama-3.1-8b-a100", **kw)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_a_group_does_not_outlive_its_episode():
    """Two episodes of one seed on one env are the same with multi-step scheduling: the
    running group's count is the server state's, cleared at reset (the long fuzz profile
    found it leaking when it was the scheduler's)."""
    env = _env(4, 40)

    def episode(seed: int) -> list:
        env.reset(seed=seed)
        seen = []
        for _ in range(100_000):
            obs, r, term, trunc, _info = env.step(env.action_space.n - 1)
            seen.append((obs.tobytes(), r))
            if term or trunc:
                break
        return seen

    first = {s: episode(s) for s in range(6)}  # each after the previous seed's episode
    assert all(episode(s) == first[s] for s in reversed(range(6)))
