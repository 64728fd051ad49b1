"""Request classes of LLMBatching-v2: shares, lengths, SLAs and weights per class, their
features and summaries, and one class being exactly the env without classes."""

from __future__ import annotations

import json
import math
import warnings

import gymnasium as gym
import numpy as np
import pytest

import batch_env  # noqa: F401 (registers the ids)

V2 = "batch_env/LLMBatching-v2"
CHAT = {
    "name": "chat",
    "share": 0.8,
    "lengths": {"kind": "empirical", "dataset": "azure-conv-2023-gz"},
}
BATCH = {
    "name": "batch",
    "share": 0.2,
    "ttft_sla_ms": 30_000.0,
    "tpot_sla_ms": 200.0,
    "weight": 0.1,
    "lengths": {"kind": "lognormal", "prompt_tokens": 2000, "prompt_cv": 0.3, "output_tokens": 300},
}
TWO = {"classes": [CHAT, BATCH], "workload": {"kind": "poisson", "rate_per_s": 5.0}}


def make(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(V2, **kw)


def episode(env, seed, action=None):
    obs, info = env.reset(seed=seed)
    total, comps = 0.0, {"latency": 0.0, "energy": 0.0, "sla": 0.0, "drop": 0.0}
    a = env.action_space.n - 1 if action is None else action
    while True:
        obs, r, _, trunc, info = env.step(a)
        total += r
        for k in comps:
            comps[k] += info["reward_components"][k]
        if trunc:
            return obs, total, comps, info


def test_one_class_is_the_env_without_classes():
    """A single class with the env's SLAs and lengths: the same episode, to the bit."""
    kw = {"horizon_requests": 200, "workload": {"kind": "poisson", "rate_per_s": 4.0}}
    plain = episode(make(**kw), 3)
    one = episode(make(**kw, classes=[{"name": "everyone"}]), 3)
    assert np.array_equal(plain[0], one[0]) and plain[1] == one[1]
    assert json.dumps(plain[3]["serving"]) == json.dumps(one[3]["serving"])
    assert "classes" not in one[3]["serving"] and "waiting_by_class" not in one[3]


def test_shares_lengths_and_features_per_class():
    env = make(**TWO, horizon_requests=1500)
    u = env.unwrapped
    assert env.observation_space.shape == (13 + 3 * 2,)
    obs, info = env.reset(seed=1)
    steps = 0
    while True:
        obs, _, _, trunc, info = env.step(env.action_space.n - 1)
        steps += 1
        if steps % 25 == 0 or trunc:  # the features are the per-class queue at this epoch
            srv = u.server.state
            waiting = [sum(1 for e in srv.waiting if srv.request_class[e] == c) for c in (0, 1)]
            running = [sum(1 for e in srv.running if srv.request_class[e] == c) for c in (0, 1)]
            assert info["waiting_by_class"] == waiting and info["running_by_class"] == running
            for c in (0, 1):
                assert obs[13 + 3 * c] == np.float32(min(waiting[c] / 256, 100.0))
                assert obs[14 + 3 * c] == np.float32(running[c] / 256)
        if trunc:
            break
    cls = np.asarray(u.server.state.request_class)
    share = float((cls == 0).mean())
    assert abs(share - 0.8) < 0.03, share  # 1500+ arrivals: 3 standard errors ~ 0.03
    prompts = np.asarray(u.server.state.prompt)
    # the batch class's lognormal prompts (mean 2000, CV 0.3; 0.5% above max_model_len and
    # rejected) against the chat trace's (about 1k)
    assert abs(prompts[cls == 1].mean() - 2000) < 150
    assert prompts[cls == 0].mean() < 1500
    by = info["serving"]["classes"]
    assert set(by) == {"chat", "batch"}
    assert by["chat"]["completed"] + by["batch"]["completed"] == info["serving"]["completed"]
    assert by["batch"]["ttft_sla_ms"] == 30_000.0 and by["chat"]["tpot_sla_ms"] == 50.0


def test_weighted_misses_and_per_class_attainment_by_brute_force():
    """The reward's SLA term is the sum over requests of the class weight for each miss
    (TTFT missed by the end, or TPOT over its class's target), and each class's summary
    attainment counts its own requests against its own SLAs."""
    env = make(**TWO, horizon_requests=300)
    _, _, comps, info = episode(env, 2)
    u = env.unwrapped
    books, srv = u.server.sla_books, u.server.state
    now = u.server.now
    expected = 0.0
    for e, a in enumerate(u.server.arrivals):
        c = srv.request_class[e]
        ttft, tpot, w = books.ttft_s[c], books.tpot_s[c], books.weights[c]
        f = books.first_at[e]
        fin = u.server.finished_at[e]
        out = srv.output[e]
        if now - a > ttft and (math.isnan(f) or f - a > ttft):
            expected += w
        elif fin is not None and f - a <= ttft and out >= 2 and (fin - f) / (out - 1) > tpot:
            expected += w
    assert comps["sla"] == pytest.approx(expected, rel=1e-12) and expected > 0
    lo = u.server.window.entry
    for c, name in enumerate(("chat", "batch")):
        idx = [e for e in range(lo, lo + 300) if srv.request_class[e] == c]
        ok = 0
        for e in idx:
            fin, f, a, out = (
                u.server.finished_at[e],
                books.first_at[e],
                u.server.arrivals[e],
                srv.output[e],
            )
            if fin is None:
                continue
            tpot_ok = out < 2 or (fin - f) / (out - 1) <= books.tpot_s[c]
            ok += (f - a <= books.ttft_s[c]) and tpot_ok
        figures = info["serving"]["classes"][name]
        assert figures["requests"] == len(idx)
        assert figures["sla_attainment"] == pytest.approx(
            ok / (figures["completed"] + figures["dropped"])
        )


@pytest.mark.parametrize(
    "classes,match",
    [
        ([{"name": "a"}, {"name": "a"}], r"names \['a'\] are used more than once"),
        ([{"name": "a", "share": -1}], r"classes\[0\]\.share=-1"),
        ([{"name": "a", "colour": "red"}], r"classes\[0\] has unknown field\(s\) \['colour'\]"),
        (
            [{"name": "a", "lengths": {"kind": "fixed", "prompt_tokens": 9000}}],
            r"classes\[0\]\.lengths",
        ),
        ([], r"classes=\[\] is invalid"),
    ],
)
def test_bad_classes_are_named(classes, match):
    with pytest.raises(ValueError, match=match):
        make(classes=classes)


def test_v0_and_v1_have_no_classes():
    for env_id in ("batch_env/LLMBatching-v0", "batch_env/LLMBatching-v1"):
        with pytest.raises(ValueError, match="unknown argument"):
            gym.make(env_id, classes=[CHAT])


def test_the_frame_shows_each_waiting_requests_class():
    """Under each drawn waiting request's bar, a stripe in its class's colour."""
    from batch_env import render as R
    from batch_env.render import CLASS_COLORS

    env = make(**TWO, horizon_requests=300, render_mode="rgb_array")
    u = env.unwrapped
    env.reset(seed=0)
    checked = 0
    for _ in range(400):
        *_, trunc, _ = env.step(0)  # cap 1: a queue builds
        frame = env.render()
        waiting = list(u.server.state.waiting)[: R.QUEUE_BARS]
        x0, y1 = R.QUEUE_BOX[0], R.QUEUE_BOX[3]
        for i, e in enumerate(waiting):
            x = x0 + 2 + i * (R.BAR_W + R.BAR_GAP)
            assert np.array_equal(frame[y1, x], CLASS_COLORS[u.server.state.request_class[e]])
            checked += 1
        if trunc:
            break
    assert checked > 100


OWN = [
    {
        "name": "chat",
        "workload": {
            "kind": "trace",
            "dataset": "azure-conv-2023-excerpt",
            "target_rate_per_s": 3.0,
        },
    },
    {
        "name": "batch",
        "workload": {"kind": "gamma", "rate_per_s": 1.0, "cv": 3.0},
        "ttft_sla_ms": 30_000.0,
        "lengths": {
            "kind": "lognormal",
            "prompt_tokens": 2000,
            "prompt_cv": 0.3,
            "output_tokens": 300,
        },
    },
]


def test_classes_with_their_own_arrivals():
    """Each class its own arrival process: the env's arrivals are their superposition, an
    arrival's class is the part it came from, a trace class's lengths are its rows'."""
    from batch_env import data

    env = make(classes=OWN, horizon_requests=600)
    u = env.unwrapped
    assert u.workload.kind == "superposition" and u.workload.mean_rate_per_s == pytest.approx(4.0)
    episode(env, 0)
    cls = np.asarray(u.server.state.request_class)
    assert abs((cls == 0).mean() - 0.75) < 0.06  # rates 3 and 1
    # the chat class's prompts are the trace's rows (those that fit), in order
    import csv

    with open(data.path("azure-conv-2023-excerpt")) as fh:
        rows = [int(r["ContextTokens"]) for r in csv.DictReader(fh)]
    fits = [p for p in rows if p + 1 <= 4096]
    chat = [p for p, c in zip(u.server.state.prompt, cls, strict=True) if c == 0]
    assert chat == fits[: len(chat)] and len(chat) > 100
    assert (
        abs(np.mean([p for p, c in zip(u.server.state.prompt, cls, strict=True) if c == 1]) - 2000)
        < 200
    )


def test_own_arrivals_and_shares_do_not_mix():
    with pytest.raises(ValueError, match="either every class has its own workload"):
        make(classes=[OWN[0], {"name": "x", "share": 0.5}])
    with pytest.raises(ValueError, match="the classes have their own workloads"):
        make(classes=OWN, workload={"kind": "poisson", "rate_per_s": 2.0})
    with pytest.raises(ValueError, match=r"classes\[0\]: give either share=0.5"):
        make(classes=[{**OWN[0], "share": 0.5}, OWN[1]])
    with pytest.raises(ValueError, match=r"classes\[1\]\.workload"):
        make(classes=[OWN[0], {**OWN[1], "workload": {"kind": "poisson"}}])


def test_one_class_with_its_own_lengths_beats_the_trace_columns(tmp_path):
    """Lengths given twice (a trace's token columns and the only class's ``lengths``): the
    class's win, in the episode as in the construction-time check. The long fuzz profile
    found the episode drawing the trace's 64-token prompts under max_model_len 64 while
    the check had passed the class's 30-token ones (issue 48, item 8)."""
    path = tmp_path / "t.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"{0.1 * i:.1f},64,8\n" for i in range(50))
    )
    cls = {"name": "only", "lengths": {"kind": "fixed", "prompt_tokens": 30, "output_tokens": 8}}
    env = make(
        workload={"kind": "trace", "path": str(path)},
        classes=[cls],
        max_model_len=64,
        max_num_seqs=8,
        horizon_requests=40,
    )
    episode(env, 0)
    u = env.unwrapped
    assert set(u.server.state.prompt) == {30} and len(u.server.state.prompt) >= 40
    # the same with the env's own (drawn) lengths: the class's win there too
    env = make(
        workload={"kind": "poisson", "rate_per_s": 5.0},
        lengths={"kind": "fixed", "prompt_tokens": 100, "output_tokens": 8},
        classes=[cls],
        max_model_len=64,
        horizon_requests=40,
    )
    episode(env, 0)
    assert set(env.unwrapped.server.state.prompt) == {30}
    # and a class whose lengths never fit is refused when the env is made, named
    with pytest.raises(ValueError, match=r"classes\[0\]\.lengths"):
        make(
            workload={"kind": "trace", "path": str(path)},
            classes=[
                {**cls, "lengths": {"kind": "fixed", "prompt_tokens": 70, "output_tokens": 8}}
            ],
            max_model_len=64,
        )
