"""Cascade attention (batch_env.llm.cascade): vLLM's rule by hand, the prefix every
running request holds on a hand-built cache, the cost by hand, v2's decode runs against
v1's iterations with it on, and its errors."""

from __future__ import annotations

import pytest
from test_llm_prefix import make

from batch_env.llm.cascade import CascadeRule
from batch_env.llm.prefix_cache import PrefixKVCache
from batch_env.profiles.llm_profile import load

V1 = "batch_env/LLMBatching-v1"
ONE_SYSTEM_PROMPT = {
    "kind": "sessions",
    "rate_per_s": 8.0,
    "turns_mean": 2.0,
    "think_time_s": 3.0,
    "system_prompts": 1,
    "system_prompt_tokens": 1200,
    "user_tokens_mean": 100.0,
    "output_tokens_mean": 150.0,
}


def test_vllms_rule_by_hand():
    """Llama-3.1-8B on an H100: 32 query heads, 8 KV heads, 132 SMs. A decode-only step
    weighs FlashDecoding: over a 1,536-token prefix (12 tiles of 128), cascade takes
    ceil(32 x ceil(n / 128) / 132) = 1 wave x 12 tiles = 12 against
    ceil(n x 8 x 1 x 12 / 132): 12 at n = 16 (not less), 13 at n = 17. A step with a
    prompt chunk takes it from 8 requests; below 256 shared tokens, never. A model
    without grouped queries (Llama-2-7B: 32 and 32) has no FlashDecoding to weigh."""
    rule = CascadeRule.of_profile(load("llama-3.1-8b-h100"))
    assert rule == CascadeRule(32, 8, 132)
    assert rule.shared(1536, 16, True) == 0
    assert rule.shared(1536, 17, True) == 1536
    assert rule.shared(1536, 8, False) == 1536
    assert rule.shared(1536, 7, False) == 0
    assert rule.shared(255, 256, False) == 0
    assert rule.shared(256, 256, True) == 256
    mha = CascadeRule.of_profile(load("llama-2-7b-h100"))
    assert mha == CascadeRule(32, 32, 132)
    assert mha.shared(512, 8, True) == 512 and mha.shared(512, 7, True) == 0
    # tensor parallel: heads per GPU (Llama-3.1-70B on 8 GPUs: 64 / 8 and 8 / 8)
    assert CascadeRule.of_profile(load("llama-3.1-70b-tp8-h100")) == CascadeRule(8, 1, 132)


def test_the_prefix_every_holder_shares_on_a_hand_built_cache():
    """Blocks of 4 tokens, one block per unit. Entry 0 computes units 1-4 (cached); entry
    1 hits its first two; entry 2 computed units 1-4 for itself before finding them
    cached (its own copies): while it runs, no block is held by all three; once it has
    gone, the two share two blocks."""
    kv = PrefixKVCache(block_size=4, total=100, watermark=0, ratio=1)
    kv.add(3, [(1, 2, 3, 4), (1, 2, 9, 8), (1, 2, 3, 4)], [17, 17, 17])
    kv.allocate(0, 5)
    kv.register(0, 17)  # its 4 full blocks become cached
    assert kv.lookup(1, 17) == (2, 0)
    kv.admit(1, 2, 17)
    kv.allocate(1, 3)
    kv.register(1, 17)
    kv.allocate(2, 5)  # admitted without a hit (computed alongside entry 0)
    kv.register(2, 17)  # its blocks were cached meanwhile: they stay its own
    assert kv.common_prefix(0, 2) == 2 and kv.common_prefix(1, 2) == 2
    assert kv.common_prefix(0, 3) == 0 and kv.common_prefix(2, 3) == 0
    assert kv.common_prefix(0, 1) == 4  # entry 0 alone holds all four of its blocks
    kv.free(2)
    assert kv.common_prefix(1, 2) == 2
    kv.free(1)
    assert kv.common_prefix(0, 1) == 4


def test_the_cost_by_hand():
    """A decode step of b requests over a shared prefix of S tokens: the plain step with
    the context read less (b - 1) S tokens, plus b queries against S keys at the
    prefill attention's rate (2 b S squared tokens) and two kernel floors per layer
    (32 layers x 4.059 us on the H100's fit); with a prompt chunk, the same change to
    the mixed iteration."""
    p = load("llama-3.1-8b-h100")
    b, ctx, s = 256, 256 * 2100, 1536
    extra = float(p.raw["prefill"]["ms_per_sq_token"]) / 1000 * 2 * b * s + 2 * 32 * 4.059e-6
    want = p.decode_time_s(b, ctx - (b - 1) * s) + extra
    assert p.cascade_time_s(0, 0.0, b, ctx, s) == pytest.approx(want, rel=1e-12)
    base, per_ctx, pw = p.cascade_step(b, s)
    assert p.cascade_time_s(0, 0.0, b, ctx, s) == base + per_ctx * ctx  # bit for bit
    assert pw == p.decode_power_w(b)
    got = p.cascade_time_s(1000, 1e6, 200, 200 * 2100, s)
    extra = float(p.raw["prefill"]["ms_per_sq_token"]) / 1000 * 2 * 200 * s + 2 * 32 * 4.059e-6
    want = p.mixed_time_s(1000, 1e6, 200, 200 * 2100 - 199 * s) + extra
    assert got == pytest.approx(want, rel=1e-12)
    assert got < p.mixed_time_s(1000, 1e6, 200, 200 * 2100)  # it pays at this size


def _episode(**kw):
    env = make(V1, **kw)
    u = env.unwrapped
    env.reset(seed=3)
    last = int(env.action_space.n) - 1
    for _ in range(1_000_000):
        _obs, _r, term, trunc, info = env.step(last)
        if term or trunc:
            return u, info["serving"]
    raise AssertionError("no end")


def test_cascade_runs_where_every_running_request_shares_the_system_prompt():
    """One system prompt of 1,200 tokens for every session, at a load that keeps many
    requests running: with cascade attention on, most iterations read it once (counted
    in the summary), and the tokens come faster than without it."""
    kw = {
        "profile": "llama-3.1-8b-h100",
        "workload": {**ONE_SYSTEM_PROMPT, "rate_per_s": 40.0},
        "horizon_requests": 300,
        "max_num_seqs": 128,
    }
    _u, on = _episode(**kw, cascade_attention=True)
    _u, off = _episode(**kw)
    assert "cascade_iterations" not in off
    assert on["iterations"] / 2 < on["cascade_iterations"] <= on["iterations"]
    assert on["prefix_hit_rate"] > 0.5
    assert on["tpot_mean_ms"] < 0.9 * off["tpot_mean_ms"]


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"scheduler": "vllm-v0"}, "cascade_attention are options of scheduler='chunked'"),
        ({"prefix_caching": False}, "cascade_attention=True needs prefix caching"),
        ({"workload": {"kind": "poisson", "rate_per_s": 2.0}}, "needs prefix caching"),
    ],
)
def test_cascade_attention_errors_name_the_setting(kw, match):
    args = {"profile": "llama-3.1-8b-h100", "workload": ONE_SYSTEM_PROMPT, **kw}
    with pytest.raises(ValueError, match=match):
        make(V1, cascade_attention=True, **args)


def test_cascade_attention_must_be_a_bool():
    with pytest.raises(ValueError, match="cascade_attention='yes' is invalid"):
        make(V1, profile="llama-3.1-8b-h100", workload=ONE_SYSTEM_PROMPT, cascade_attention="yes")
