"""Cascade attention: when vLLM V1 reads a prefix shared by every running request once.

vLLM V1 (from PR #11635, January 2025; ``cascade_attention=True`` here, vLLM's
``disable_cascade_attn=False``) splits an iteration's attention in two when every running
request holds the same cached prefix: the prefix's KV is attended once for all the
iteration's queries (one kernel over the shared blocks), each request's own suffix as
usual, and the two results are merged. With many requests and a long shared system
prompt this saves most of a decode's KV reads. vLLM turned it off by default on
2026-03-07 (PR #36318, "to avoid potential numerical issues"), so it is off by default
here; the V1 release of January 2025 ran with it on.

**When** (:class:`CascadeRule`, vLLM's per-iteration rule, ``use_cascade_attention`` of its
FlashAttention backend and ``_compute_cascade_attn_prefix_len`` of its model runner):

* the shared prefix is the run of leading KV blocks that *every* running request holds
  (their reference count equals the running requests': a request that computed the same
  tokens itself, before they were cached, holds its own copies and stops it), capped at
  the smallest number of tokens any scheduled request has computed and cut to whole blocks
  (:meth:`batch_env.llm.kv_cache.KVCache.common_prefix`);
* it is used only with a shared prefix of 256 tokens or more and 8 scheduled requests or
  more;
* where the normal attention would use FlashDecoding (every query is one decode token and
  the model has grouped queries: ``heads / kv_heads > 1``), cascade is used only where
  vLLM's rough cost model prefers it: with 128-token tiles over the shared prefix,
  ``ceil(heads x ceil(n / 128) / SMs)`` waves of its tiles against
  ``ceil(n x kv_heads x ceil((heads / kv_heads) / 128) x tiles / SMs)`` (for Llama-3.1-8B
  on an H100: 17 decodes or more); an iteration with a prompt chunk always uses it.

**What it costs** (:meth:`batch_env.profiles.llm_profile.LLMProfile.cascade_time_s`): the
iteration's time with the decodes' context read less ``(b - 1) x shared`` tokens (the
prefix is read once instead of by each of the ``b`` decodes), plus the prefix pass's
compute, ``b`` queries against ``shared`` keys at the profile's prefill-attention rate
(``ms_per_sq_token x 2 b shared``), plus two kernel floors per layer (the prefix kernel
and the merge; the profile's ``arch`` efficiencies). The chunks' attention is unchanged
(their queries attend to the prefix in either pass, at the same cost); power is the
iteration's as without cascade. Left out: that the prefix kernel, at ``b`` queries per
head, may fill fewer SMs than a prefill does (vLLM's kernel table, PR #44397, finds it
slower than FlashDecoding at a 512-token prefix on newer kernels).

Profile mode only (with prefix caching: without it no block is shared), and the chunked
scheduler (vLLM V1's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: vLLM's thresholds: the shortest shared prefix (tokens) and the fewest scheduled
#: requests for which cascade attention is considered, and its cost model's tile sizes
MIN_SHARED_TOKENS = 256
MIN_REQUESTS = 8
TILE = 128


@dataclass(frozen=True)
class CascadeRule:
    """vLLM's per-iteration choice of cascade attention (module docstring), for a model's
    attention heads per GPU and a GPU's SMs.

    :param heads: query heads per GPU.
    :param kv_heads: KV heads per GPU.
    :param sms: the GPU's streaming multiprocessors.
    """

    heads: int
    kv_heads: int
    sms: int

    @classmethod
    def of_profile(cls, profile: Any) -> CascadeRule:
        """The rule for an LLM profile's model and GPU (its ``arch`` field).

        :raises ValueError: the profile has no ``arch`` (heads and SMs unknown).
        """
        shape = profile.attention_shape()
        if shape is None:
            raise ValueError(
                f"cascade_attention=True needs the profile's attention heads and the GPU's SMs "
                f"(field 'arch'), which profile '{profile.name}' does not have: build it with "
                "`batch-env profile llm`, or set cascade_attention=False"
            )
        return cls(*shape)

    def shared(self, tokens: int, requests: int, all_decode: bool) -> int:
        """The shared prefix the iteration reads once: ``tokens`` (the prefix every running
        request holds, whole blocks) where vLLM would run cascade attention with
        ``requests`` scheduled requests (``all_decode``: one decode token each), else 0."""
        if tokens < MIN_SHARED_TOKENS or requests < MIN_REQUESTS:
            return 0
        per_kv = self.heads // self.kv_heads
        if not all_decode or per_kv <= 1:  # no FlashDecoding to weigh against
            return tokens
        tiles = -(-tokens // TILE)
        cascade = -(-self.heads * -(-requests // TILE) // self.sms) * tiles
        flash = -(-requests * self.kv_heads * -(-per_kv // TILE) * tiles // self.sms)
        return tokens if cascade < flash else 0


def cascade_rule(config: Any, profile: Any, prefix_caching: bool) -> CascadeRule | None:
    """The chunked scheduler's rule for a server's configuration (``cascade_attention``),
    profile and prefix caching; ``None`` where cascade attention is off.

    :raises ValueError: cascade attention without prefix caching (no block is shared), or
        on a profile without ``arch``.
    """
    if not config.cascade_attention:
        return None
    if not prefix_caching:
        raise ValueError(
            "cascade_attention=True needs prefix caching (prefix_caching=True, on a workload "
            "with prefix information): without it no KV block is shared"
        )
    return CascadeRule.of_profile(profile)
