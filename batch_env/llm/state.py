"""The LLM server's state between iterations: requests, the two queues and the paged KV cache.

The KV cache is an object of its own (:attr:`LLMServerState.kv`, a
:class:`~batch_env.llm.kv_cache.KVCache`), the only writer of block state;
``kv_used``, ``kv_blocks``, ``kv_total`` and ``kv_watermark`` read it.

Requests are *entries*, numbered in admission (arrival) order; every per-request column
below is indexed by entry. The columns and counters are plain lists and integers, read
and changed by the schedulers in their hot loops.

Invariants (``tests/test_llm_batching.py`` checks them at every step):

* every entry is waiting, running or finished; ``waiting`` and ``running`` are disjoint;
* ``kv_used == sum(kv_blocks) <= kv_total`` (without prefix caching); a waiting entry
  holds no block;
* a running entry's blocks hold every token of its context but the one it feeds next:
  ``kv_blocks[e] * block_size >= prompt[e] + generated[e] - 1``;
* ``waiting_tokens`` is the prompt + generated tokens of the waiting entries (a
  preempted entry recomputes its generated tokens too);
* ``decode_context`` is the context (prompt + generated) of the running entries whose
  prefill is complete;
* chunked: ``prefilling`` running entries have a prefill in progress, and they are the
  tail of ``running`` (chunks complete in admission order, admissions append,
  preemption pops the newest); ``block_phase[(prompt + generated - decode_steps) %
  block_size]`` holds each decoding entry, so that the entries whose blocks are full at
  the next decode are one bucket, ``block_phase[(1 - decode_steps) % block_size]``.
"""

from __future__ import annotations

from .kv_cache import KVCache
from .orders import WaitingQueue
from .prefix_cache import PrefixKVCache


class LLMServerState:
    """The requests, queues and KV cache of one LLM server (one episode at a time).

    :param block_size: tokens per KV block.
    :param kv_total: KV blocks of the cache.
    :param kv_watermark: blocks kept free when admitting a prompt.
    :param prefix_ratio: with prefix caching, the KV blocks per hashed prefix unit of the
        workload (:class:`~batch_env.llm.prefix_cache.PrefixKVCache`); None: no prefix caching.
    """

    __slots__ = (
        "block_size",
        "kv",
        "prompt",
        "output",
        "generated",
        "prefill_done",
        "prefill_left",
        "request_class",
        "ttft_deadline",
        "waiting",
        "waiting_tokens",
        "running",
        "decode_context",
        "prefilling",
        "block_phase",
        "decode_steps",
        "group_left",
        "tokens_out",
        "preemptions",
        "cascade_iterations",
        "fcfs_above",
    )

    def __init__(
        self, block_size: int, kv_total: int, kv_watermark: int, prefix_ratio: int | None = None
    ) -> None:
        #: tokens per KV block
        self.block_size = block_size
        #: ``longest-prefix`` admits FCFS while more than this many wait (None: never;
        #: the server sets its configuration's ``longest_prefix_fcfs_above``)
        self.fcfs_above: int | None = None
        #: the KV cache: the only writer of block state
        self.kv = (
            KVCache(block_size, kv_total, kv_watermark)
            if prefix_ratio is None
            else PrefixKVCache(block_size, kv_total, kv_watermark, prefix_ratio)
        )
        self.clear()

    @property
    def kv_total(self) -> int:
        """KV blocks of the cache."""
        return self.kv.total

    @property
    def kv_watermark(self) -> int:
        """KV blocks kept free when admitting a prompt."""
        return self.kv.watermark

    @property
    def kv_used(self) -> int:
        """KV blocks in use."""
        return self.kv.used

    @property
    def kv_blocks(self) -> list[int]:
        """Per entry: the KV blocks it holds (read only: :class:`KVCache` writes them)."""
        return self.kv.blocks

    def clear(self) -> None:
        """An empty server: no request, an empty cache, the counters at 0."""
        # per entry
        #: prompt tokens
        self.prompt: list[int] = []
        #: true output tokens (the request completes with that many; never shown to policies)
        self.output: list[int] = []
        #: output tokens generated so far
        self.generated: list[int] = []
        #: chunked: tokens of the current prefill computed so far
        self.prefill_done: list[int] = []
        #: chunked: tokens of the current prefill still to compute (0: no prefill in progress)
        self.prefill_left: list[int] = []
        #: its request class (0: the only one, where the workload has none)
        self.request_class: list[int] = []
        #: its TTFT deadline: arrival + its class's TTFT SLA (the ``edf`` order's key)
        self.ttft_deadline: list[float] = []
        # the queues
        #: entries waiting for admission, in admission order (preempted ones at the head),
        #: with an index per admission order (:class:`batch_env.llm.orders.WaitingQueue`)
        self.waiting = WaitingQueue(self)
        #: prompt + generated tokens of the waiting entries
        self.waiting_tokens = 0
        #: entries admitted and not finished, in admission order
        self.running: list[int] = []
        # the cache and the decodes
        self.kv.clear()
        #: context tokens (prompt + generated) of the running entries that decode
        self.decode_context = 0
        #: chunked: running entries whose prefill is in progress (``running``'s tail)
        self.prefilling = 0
        #: chunked: the decoding entries by block phase (module docstring)
        self.block_phase: list[set[int]] = [set() for _ in range(self.block_size)]
        #: chunked: decode iterations so far (the phase's origin)
        self.decode_steps = 0
        #: vllm-v0 with multi-step scheduling: decode steps the running group still runs
        self.group_left = 0
        # counters
        #: output tokens produced (first tokens of prefills and decode tokens)
        self.tokens_out = 0
        #: preemptions (recompute)
        self.preemptions = 0
        #: iterations that ran cascade attention (:mod:`batch_env.llm.cascade`)
        self.cascade_iterations = 0

    def admit(
        self,
        prompts: list[int],
        outputs: list[int],
        classes: list[int],
        deadlines: list[float],
        units: list[tuple[int, ...]] | None = None,
    ) -> int:
        """New entries join the waiting queue's tail; returns the first new entry's number.

        :param units: their prompts' prefix units (prefix caching,
            :class:`~batch_env.llm.prefix_cache.PrefixKVCache`), or None."""
        n0 = len(self.prompt)
        k = len(prompts)
        self.request_class += classes
        self.ttft_deadline += deadlines
        self.prompt += prompts
        self.output += outputs
        self.generated += [0] * k
        self.kv.add(k, units, prompts)
        self.prefill_done += [0] * k
        self.prefill_left += [0] * k
        self.waiting.extend(range(n0, n0 + k))
        self.waiting_tokens += sum(prompts)
        return n0

    def context(self, e: int) -> int:
        """Entry ``e``'s context: prompt + generated tokens."""
        return self.prompt[e] + self.generated[e]

    def decoding(self) -> list[int]:
        """The running entries whose prefill is complete (``running``'s leading run)."""
        return self.running[: len(self.running) - self.prefilling]
