"""LLMTorchExecutor: real LLM iterations with a KV cache (``LLMBatching-v0``, ``executor="torch"``).

The real twin of :class:`batch_env.executor.LLMProfileExecutor`: every iteration the env
schedules, a prefill of newly admitted requests or one decode step of every running
request, runs a real GPT-style decoder (:class:`batch_env.real.models.GPTSmall`) with a real KV
cache, on CUDA when present, else the CPU, and the env's clock advances by the measured
duration. Arrivals and request lengths still come from the workload, so an episode is a
reproducible emulation of serving (docs/design.md: Executors and energy).

Interface (duck-typed, shared with the profile executor)
    ``needs_sequences = True`` tells the env to say which requests an iteration involves
    (the profile executor has ``False`` and ignores the extra arguments, so the env has
    one code path and the simulated path builds no lists):

    * ``prefill(tokens, sq_sum, seqs, lengths)``: prefill the requests ``seqs`` (the env's
      request ids) with ``lengths[i]`` tokens each: the prompt, or for a preempted
      request's recompute the prompt plus the tokens generated so far. Their KV caches
      join the running batch.
    * ``decode(batch, context_tokens, seqs)``: one decode step of exactly the running
      requests ``seqs`` (every request holding a cache must be in it).
    * ``release(seqs)``: drop the caches of finished or preempted requests.
    * ``reset(rng)`` drops every cache (a new episode numbers its requests from 0 again);
      ``metadata()``, ``close()``, ``energy_source`` as :class:`~batch_env.real.torch_executor.
      TorchExecutor`.

    ``prefill`` and ``decode`` return ``(duration_s, energy_j)``.

The KV cache (choices)
    One batched :class:`~batch_env.real.models.KVCache` holds every running request, one row
    each, in the env's order (a prefill's requests are appended, as the env appends them
    to its running list). Requests with different context lengths share it by padding
    and an attention mask (:meth:`~batch_env.real.models.GPTSmall.decode_step` attends, per
    row, to that row's positions only), the simplest correct layout; grouping by length
    would multiply the kernel launches. Its capacity (positions per row) is set before
    each timed call: when the longest context plus the token being written does not fit,
    or fits in a quarter of it, it becomes the smallest power of two (at most
    ``n_positions``) that holds it, so attention spans under 4x the longest context.

    Bookkeeping is not timed: joining a prefill's cache to the batch (``KVCache.cat``),
    dropping released rows (``KVCache.select``) and resizing copy the cache only because
    it is contiguous; vLLM's paged cache copies nothing there, so timing them would charge
    the emulation for an artefact of this layout. Released rows are dropped lazily, at the
    next iteration, so that the several releases of one iteration cost one copy.

    Timed: a prefill is ``GPTSmall.prefill`` of the prompts right-padded to the longest
    (embeddings, every block, the K/V written into a new cache, the logits of each
    prompt's last token); a decode is ``GPTSmall.decode_step`` of the whole batch
    (embeddings, K/V written at each row's position, masked attention over the capacity,
    the logits). Compared with vLLM, a ragged prefill works on ``k x max(p)`` tokens
    (vLLM packs ``sum p``) and a decode attends over ``batch x capacity`` positions
    (vLLM: the sum of the contexts); with equal lengths both agree.

KV-block accounting
    The env's KV blocks (capacity, watermark, preemptions) stay the LLM profile's: they
    model the GPU memory of the profiled server (e.g. Llama-2-7B on an A100), not this
    process's memory, so the scheduler decides as in profile mode; only the iteration
    times (and, with a meter, energies) are measured. The real cache holds exactly the
    requests the env runs (:attr:`LLMTorchExecutor.live_sequences`).

Inputs
    Token ids are random and seeded: a pool of ``max_num_seqs x max_model_len`` prompt ids
    and one of ``64 x max_num_seqs`` decode ids are drawn at construction, on the device.
    A prefill of ``k`` prompts of at most ``T`` tokens reads a view of the first ``k`` rows
    and ``T`` columns, a decode of ``b`` requests a view of the first ``b`` entries of the
    next decode row (in turn), so no input is allocated in the timed region. Random ids
    time like text: the work depends on the shapes only.

Warm-up
    Up front, at construction: ``warmup`` rounds of a prefill of ``max_num_seqs`` prompts
    of 8 and 4 tokens in turn (the masked path), then decode steps at batch sizes
    ``max_num_seqs``, ``max_num_seqs // 2``, ..., 1, releasing half the batch between them
    (the compaction path); then every cache is dropped.

Timing and energy
    As :class:`~batch_env.real.torch_executor.TorchExecutor` (the same clock and the same
    :class:`~batch_env.real.torch_executor.EnergyRule`): CUDA events on a GPU,
    ``perf_counter_ns`` on the CPU; energy from the NVML / RAPL counter, else power x
    duration, else the LLM profile's busy power (``prefill_power_w(tokens)``,
    ``decode_power_w(batch)``) x the measured duration. ``energy_source`` says which.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, cast

import numpy as np
import torch

from ..checks import check_number
from ..profiles import llm_profile
from .device import resolve_device
from .energy import EnergyMeter, open_meter
from .models import GPTSmall, KVCache
from .spec import ModelSpec
from .torch_executor import (
    DeviceClock,
    EnergyRule,
    environment_metadata,
    set_threads,
)

__all__ = ["LLM_MODELS", "LLMTorchExecutor"]

#: Models of :mod:`batch_env.real.models` with a KV-cache decode path.
LLM_MODELS: tuple[str, ...] = ("gpt-small",)
_DECODE_ROWS = 64  # rows of pre-drawn decode ids, used in turn


def _capacity(need: int, limit: int) -> int:
    """The smallest power of two >= ``need``, at most ``limit``."""
    return min(limit, 1 << max(need - 1, 0).bit_length())


class LLMTorchExecutor:
    """Runs LLM iterations on a real GPT decoder with a KV cache (see the module docstring).

    :param model: a name in :data:`LLM_MODELS`.
    :param max_num_seqs: the largest number of running requests (the env's ``max_num_seqs``).
    :param max_model_len: the longest context (the env's ``max_model_len``); the model's
        ``n_positions`` must be at least this.
    :param torch_device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:<index>"``.
    :param profile: an LLM profile (shipped name, path, dict or
        :class:`~batch_env.llm_profile.LLMProfile`) that supplies busy power where no meter
        measures energy; required then, else only recorded.
    :param width: per-head dimension multiplier (1.0 = GPT-2 small).
    :param depth: decoder blocks (``None`` = 12).
    :param weights: optional state_dict file (see :func:`batch_env.real.models.build_model`).
    :param threads: ``torch.set_num_threads`` value (``None``: leave it).
    :param warmup: warm-up rounds at construction (>= 0).
    :param seed: seed of the random weights and token ids.
    :param model_kwargs: more model arguments (``heads``, ``vocab_size``, ``n_positions``,
        ``dtype``).
    :param meter: an energy meter instead of :func:`batch_env.real.energy.open_meter`'s (tests
        inject fakes); closed by :meth:`close`.
    :raises ValueError: for a bad argument or model name, ``n_positions < max_model_len``,
        a CUDA device that is not there, a weights file that is not a matching state_dict,
        or no measurable energy and no profile.

    The model arguments (``model``, ``width``, ``depth``, ``weights``, ``seed``,
    ``model_kwargs``, ``threads``, ``warmup``, ``torch_device``) become one
    :class:`~batch_env.real.spec.ModelSpec` (``spec``), which checks them and builds the
    model; :meth:`metadata` records it under ``model_spec``. From a spec:
    ``LLMTorchExecutor(spec.model, max_num_seqs=..., max_model_len=..., **spec.keywords())``.

    Attributes: ``spec``, ``energy_source`` (``"nvml"``, ``"rapl"`` or ``"profile"``),
    ``energy_reason``, ``device``, ``model``, ``meter``, ``profile`` (or ``None``),
    ``max_num_seqs``, ``max_model_len``, ``needs_sequences`` (``True``).
    """

    needs_sequences = True
    energy_source: str
    # The batch's state, (re)bound by reset(). _cache is None while no sequence holds a KV
    # cache (after reset(), or once every row is released); the methods that read it run
    # only while one does, so it is declared as a KVCache for them.
    _cache: KVCache
    _rows: list[int]  # the sequence of each row of the batch cache
    _live: set[int]  # the sequences holding a cache (released rows are dead until compacted)
    _n_dead: int
    _k: int

    def __init__(
        self,
        model: str = "gpt-small",
        *,
        max_num_seqs: int,
        max_model_len: int,
        torch_device: str = "auto",
        profile: Any = None,
        width: float = 1.0,
        depth: int | None = None,
        weights: str | os.PathLike[str] | None = None,
        threads: int | None = None,
        warmup: int = 2,
        seed: int = 0,
        model_kwargs: Mapping[str, Any] | None = None,
        clock: str = "wall",
        meter: EnergyMeter | None = None,
    ) -> None:
        if model not in LLM_MODELS:
            raise ValueError(
                f"model={model!r} is invalid for LLMBatching-v0 with executor='torch': allowed "
                f"values are {list(LLM_MODELS)} (the models of batch_env.real.models with a KV-cache "
                "decode path)"
            )
        check_number("max_num_seqs", max_num_seqs, low=1, integer=True)
        check_number("max_model_len", max_model_len, low=2, integer=True)
        #: the model bundle (checked): what runs, its size, weights, threads, warm-up, device
        self.spec = ModelSpec(
            model,
            width=width,
            depth=depth,
            weights=weights,
            seed=seed,
            model_kwargs=model_kwargs or {},
            threads=threads,
            warmup=warmup,
            torch_device=torch_device,
        )
        spec = self.spec
        self.device = resolve_device(spec.torch_device)
        # the clock is checked against the threads before they are set (process-wide)
        self._clock = DeviceClock(self.device, clock, spec.threads)
        self.clock = self._clock.clock
        self.threads = set_threads(spec.threads)
        self.max_num_seqs = int(max_num_seqs)
        self.max_model_len = int(max_model_len)
        self.warmup = spec.warmup
        self.seed = spec.seed
        self.profile = None if profile is None else llm_profile.load(profile)
        # every model of LLM_MODELS is a GPTSmall
        self.model = cast(GPTSmall, spec.build(self.device))
        self.model_name = spec.model
        n_pos = self.model.n_positions
        if n_pos < self.max_model_len:
            raise ValueError(
                f"max_model_len={self.max_model_len} exceeds the model's n_positions={n_pos}: "
                "the position table must cover every context the env schedules; lower "
                f"max_model_len to <= {n_pos} or pass executor_options={{'model_kwargs': "
                f"{{'n_positions': {self.max_model_len}}}}}"
            )
        self.meter = meter if meter is not None else open_meter(str(self.device))
        try:
            self._rule = EnergyRule(
                self.meter,
                owner=f"LLMTorchExecutor on {self.device}",
                profile_name=None if self.profile is None else self.profile.name,
                profile_hint="<an LLM profile: a shipped name of batch_env.llm_profile.available(), "
                "a JSON path or a dict>",
            )
            if not self._rule.measured:  # then EnergyRule made sure there is a profile
                assert self.profile is not None
                self.profile.check_max_num_seqs(self.max_num_seqs)
            self.energy_source = self._rule.source
            self.energy_reason = self._rule.reason
            self._init_inputs(spec.seed)
            self.reset(None)
            with torch.inference_mode():
                self._warm_up()
            self.reset(None)
        except BaseException:
            self.meter.close()
            raise

    # ------------------------------------------------------------- set-up

    def _init_inputs(self, seed: int) -> None:
        g = torch.Generator(device="cpu")
        g.manual_seed(int(seed))
        vocab, N = self.model.vocab_size, self.max_num_seqs
        self._prompt_ids = torch.randint(0, vocab, (N, self.max_model_len), generator=g).to(
            self.device
        )
        self._decode_ids = torch.randint(0, vocab, (_DECODE_ROWS, N), generator=g).to(self.device)
        self._last_prefill = float("inf")  # the first timed call of each shape reads the counter
        self._last_decode = [float("inf")] * (N + 1)

    def _warm_up(self) -> None:
        N = self.max_num_seqs
        L = max(1, min(8, self.max_model_len - 2))
        seqs = list(range(-N, 0))  # never an env request id
        lens = [L if i % 2 == 0 else max(1, L // 2) for i in range(N)]
        for _ in range(self.warmup):
            self.prefill(sum(lens), float(sum(n * n for n in lens)), seqs, lens)
            b = N
            while True:
                self.decode(b, sum(lens[:b]) + b, seqs[:b])
                if b == 1:
                    break
                self.release(seqs[b // 2 : b])
                b //= 2
            self.release(seqs[:1])

    # ------------------------------------------------------------- the cache's bookkeeping

    def _fit(self, need: int) -> None:
        """Give the batch cache room for ``need`` positions per row (untimed)."""
        cache = self._cache
        cap = cache.capacity
        target = _capacity(need, self.model.n_positions)
        if cap < need or cap > 2 * target:
            cache.resize(target)

    def _compact(self) -> None:
        """Drop the released rows (one copy for all of them)."""
        live = self._live
        keep = [i for i, e in enumerate(self._rows) if e in live]
        self._rows = [self._rows[i] for i in keep]
        self._n_dead = 0
        if not keep:
            self._cache = None  # type: ignore[assignment]  # no row left (see _cache)
        else:
            self._cache = self._cache.select(keep)

    def _sync(self, seqs: Sequence[int]) -> None:
        """Make the batch's rows exactly ``seqs``, in that order (untimed)."""
        live = self._live
        pos = {e: i for i, e in enumerate(self._rows) if e in live}
        missing = [e for e in seqs if e not in pos]
        if missing:
            raise ValueError(
                f"decode: sequences {missing[:5]} hold no KV cache (never prefilled, or "
                "released); prefill them first"
            )
        if len(set(seqs)) != len(seqs):
            raise ValueError(f"decode: seqs repeats a sequence: {list(seqs)[:10]}")
        if len(seqs) != len(pos):
            wanted = set(seqs)
            extra = sorted(e for e in pos if e not in wanted)
            raise ValueError(
                f"decode: sequences {extra[:5]} hold a KV cache but are not in this decode; "
                "release finished or preempted sequences first"
            )
        idx = [pos[e] for e in seqs]
        if idx != list(range(len(self._rows))):
            self._cache = self._cache.select(idx)
        self._rows = list(seqs)
        self._n_dead = 0

    def _decode_step(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.decode_step(ids, self._cache)

    # ------------------------------------------------------------- the env's interface

    def reset(self, rng: np.random.Generator | None) -> None:
        """Start an episode: drop every KV cache. ``rng`` is unused (the real timing is the
        service noise; kept for interface parity)."""
        self._cache = None  # type: ignore[assignment]  # no sequence holds a cache (see _cache)
        self._rows = []
        self._live = set()
        self._n_dead = 0
        self._k = 0

    def prefill(
        self,
        tokens: int,
        sq_sum: float,
        seqs: Sequence[int] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> tuple[float, float]:
        """One prefill iteration: build the KV caches of ``seqs`` and add them to the batch.

        :param tokens: ``sum(lengths)``.
        :param sq_sum: ``sum p**2`` (unused: the real attention does that work).
        :param seqs: the requests' ids, none of them holding a cache.
        :param lengths: their token counts (prompt, or prompt + generated for a recompute),
            each in ``1..max_model_len - 1``.
        :returns: ``(duration_s, energy_j)``.
        :raises ValueError: if the sequences or lengths are invalid.
        """
        if seqs is None or lengths is None:
            raise ValueError("LLMTorchExecutor.prefill needs seqs= and lengths= (needs_sequences)")
        k = len(seqs)
        if not 1 <= k <= self.max_num_seqs or len(lengths) != k:
            raise ValueError(
                f"prefill: {k} seqs and {len(lengths)} lengths: expected as many of each, "
                f"1..{self.max_num_seqs} (max_num_seqs)"
            )
        T = max(lengths)
        if min(lengths) < 1 or T > self.max_model_len - 1 or sum(lengths) != tokens:
            raise ValueError(
                f"prefill: lengths={list(lengths)[:10]} (tokens={tokens}) is invalid: expected "
                f"integers in 1..{self.max_model_len - 1} (max_model_len - 1) summing to tokens"
            )
        again = [e for e in seqs if e in self._live]
        if again:
            raise ValueError(
                f"prefill: sequences {again[:5]} already hold a KV cache; release them first"
            )
        if self._n_dead:
            self._compact()
        ids = self._prompt_ids[:k, :T]
        lens = None if min(lengths) == T else list(lengths)
        call = partial(
            self.model.prefill, lengths=lens, capacity=_capacity(T + 1, self.model.n_positions)
        )
        e0 = self._rule.begin(self._last_prefill)
        with torch.inference_mode():
            d, (_, new) = self._clock.time(call, ids)
            self._cache = new if self._cache is None else KVCache.cat([self._cache, new])
        self._rows.extend(seqs)
        self._live.update(seqs)
        self._last_prefill = d
        # not measured: EnergyRule made sure there is a profile
        power = 0.0 if self._rule.measured else self.profile.prefill_power_w(tokens)  # type: ignore[union-attr]
        return d, self._rule.energy(d, e0, power)

    def decode(
        self, batch: int, context_tokens: int, seqs: Sequence[int] | None = None
    ) -> tuple[float, float]:
        """One decode step of every running sequence (one token each, written to its cache).

        :param batch: ``len(seqs)``, 1..max_num_seqs.
        :param context_tokens: the env's KV context of the batch (unused: the caches hold it).
        :param seqs: the running requests, in the env's order; exactly the sequences holding
            a cache (a list, ideally the env's own: the common case is one comparison).
        :returns: ``(duration_s, energy_j)``.
        :raises ValueError: if ``seqs`` is not exactly the live sequences.
        """
        if seqs is None:
            raise ValueError("LLMTorchExecutor.decode needs seqs= (needs_sequences)")
        b = len(seqs)
        if batch != b or not 1 <= b <= self.max_num_seqs:
            raise ValueError(
                f"decode: batch={batch!r} with {b} seqs: expected batch == len(seqs) in "
                f"1..{self.max_num_seqs} (max_num_seqs)"
            )
        if self._n_dead or self._rows != seqs:
            self._sync(seqs)
        self._fit(max(self._cache.lengths) + 1)
        ids = self._decode_ids[self._k % _DECODE_ROWS, :b]
        self._k += 1
        e0 = self._rule.begin(self._last_decode[b])
        with torch.inference_mode():
            d, _ = self._clock.time(self._decode_step, ids)
        self._last_decode[b] = d
        power = 0.0 if self._rule.measured else self.profile.decode_power_w(b)  # type: ignore[union-attr]  # as in prefill
        return d, self._rule.energy(d, e0, power)

    def mixed(
        self,
        chunk_tokens: int,
        chunk_attention: float,
        batch: int,
        context_tokens: int,
        chunks: Sequence[tuple[int, int, int]] | None = None,
        decodes: Sequence[int] | None = None,
    ) -> tuple[float, float]:
        """One mixed iteration of the chunked scheduler: a decode token for each of
        ``decodes`` and the prompt chunks ``chunks``, in one call of
        :meth:`~batch_env.real.models.GPTSmall.extend` (the tokens packed for the linear
        layers, attention per row).

        :param chunk_tokens: the chunks' tokens in all.
        :param chunk_attention: unused (the real attention does that work).
        :param batch: ``len(decodes)``.
        :param context_tokens: unused (the caches hold it).
        :param chunks: ``(sequence, tokens already cached, chunk tokens)`` per chunk: a
            sequence with nothing cached starts a cache; the others continue theirs.
        :param decodes: the sequences that decode, the env's oldest running ones in order
            (every live sequence that is neither decoding nor chunking keeps its cache).
        :returns: ``(duration_s, energy_j)``.
        :raises ValueError: if the sequences or lengths do not match the caches.
        """
        if chunks is None or decodes is None:
            raise ValueError("LLMTorchExecutor.mixed needs chunks= and decodes= (needs_sequences)")
        dec = list(decodes)
        if len(dec) != batch or sum(c for _, _, c in chunks) != chunk_tokens or not (dec or chunks):
            raise ValueError(
                f"mixed: batch={batch}, chunk_tokens={chunk_tokens} with {len(dec)} decodes and "
                f"chunks {list(chunks)[:5]}: the counts must match and something must run"
            )
        if self._n_dead:
            self._compact()
        rows = list(self._rows)
        if rows[: len(dec)] != dec:  # the decodes lead the batch (untimed reorder)
            rest = [e for e in rows if e not in set(dec)]
            missing = [e for e in dec if e not in self._live]
            if missing:
                raise ValueError(
                    f"mixed: decodes {missing[:5]} hold no KV cache; prefill them first"
                )
            self._reorder(dec + rest)
            rows = list(self._rows)
        where = {e: i for i, e in enumerate(rows)}
        fresh = []
        for e, start, c in chunks:
            held = self._cache.lengths[where[e]] if e in where else 0
            if (start == 0) != (e not in where) or held != start or c < 1:
                raise ValueError(
                    f"mixed: chunk ({e}, {start}, {c}) does not continue sequence {e}'s cache "
                    f"({'none' if e not in where else held} positions)"
                )
            if start + c > self.max_model_len - 1:
                raise ValueError(f"mixed: sequence {e} would exceed max_model_len - 1 positions")
            if e not in where:
                fresh.append(e)
        if fresh:  # rows for the prompts that start (untimed)
            if self._cache is None:
                self._cache = self.model.new_cache(len(fresh), 1)
            else:
                self._cache = KVCache.cat([self._cache, KVCache.empty(self._cache, len(fresh))])
            for e in fresh:
                where[e] = len(self._rows)
                self._rows.append(e)
                self._live.add(e)
        need = max(
            [self._cache.lengths[i] + 1 for i in range(len(dec))]
            + [start + c for _, start, c in chunks]
        )
        self._fit(need)
        ids = []
        if dec:
            row = self._decode_ids[self._k % _DECODE_ROWS]
            self._k += 1
            ids = [row[i : i + 1] for i in range(len(dec))]
        n = self.max_num_seqs
        for j, (_e, start, c) in enumerate(chunks):
            ids.append(self._prompt_ids[j % n, start : start + c])
        order = list(range(len(dec))) + [where[e] for e, _, _ in chunks]
        call = partial(self.model.extend, self._cache, order, ids)
        e0 = self._rule.begin(float("inf"))
        with torch.inference_mode():
            d, _ = self._clock.time(call, len(dec))
        # not measured: EnergyRule made sure there is a profile
        power = 0.0 if self._rule.measured else self.profile.mixed_power_w(chunk_tokens, batch)  # type: ignore[union-attr]
        return d, self._rule.energy(d, e0, power)

    def _reorder(self, seqs: list[int]) -> None:
        """Make the batch's rows ``seqs`` (every live sequence), in that order (untimed)."""
        pos = {e: i for i, e in enumerate(self._rows)}
        self._cache = self._cache.select([pos[e] for e in seqs])
        self._rows = list(seqs)

    def release(self, seqs: Sequence[int]) -> None:
        """Drop the KV caches of finished or preempted requests (their rows leave the batch
        at the next iteration, untimed).

        :raises ValueError: if a sequence holds no cache.
        """
        live = self._live
        for e in seqs:
            if e not in live:
                raise ValueError(f"release: sequence {e!r} holds no KV cache")
            live.remove(e)
        self._n_dead += len(seqs)
        if not live:
            self._cache, self._rows, self._n_dead = None, [], 0  # type: ignore[assignment]  # see _cache

    # ------------------------------------------------------------- inspection

    @property
    def live_sequences(self) -> frozenset[int]:
        """The requests that hold a KV cache now."""
        return frozenset(self._live)

    def context_lengths(self) -> dict[int, int]:
        """Positions in each live request's cache (its prompt and generated tokens, but the
        last generated one, which the next decode writes)."""
        if self._cache is None:
            return {}
        live = self._live
        return {e: n for e, n in zip(self._rows, self._cache.lengths, strict=True) if e in live}

    @property
    def cache_nbytes(self) -> int:
        """Bytes held by the batch's keys and values (released rows included until the next
        iteration drops them)."""
        return 0 if self._cache is None else self._cache.nbytes

    def metadata(self) -> dict[str, Any]:
        """Device, versions, threads, model, KV-cache and energy settings of this executor."""
        md = environment_metadata(self.device, torch.get_num_threads())
        cfg = self.model.config
        spec = self.spec.to_dict()
        md.update(
            {
                "executor": "LLMTorchExecutor",
                "model": spec["model"],
                "model_spec": spec,
                "model_config": dict(cfg),
                "parameters": self.model.num_parameters(),
                "width": cfg.get("width"),
                "depth": cfg.get("depth"),
                "n_positions": cfg.get("n_positions"),
                "max_num_seqs": self.max_num_seqs,
                "max_model_len": self.max_model_len,
                "kv_cache": "one batched KVCache, padding + attention mask; capacity a power of two "
                "< 4x the longest context; cat/select/resize untimed",
                "warmup": spec["warmup"],
                "warmup_rule": "up front: warmup rounds of a prefill of max_num_seqs prompts, then "
                "decodes at batch sizes max_num_seqs, max_num_seqs // 2, ..., 1",
                **self._clock.metadata(),
                "energy_source": self.energy_source,
                "energy_reason": self.energy_reason,
                "driver": self.meter.driver,
                "meter": self.meter.metadata(),
                "profile": None if self.profile is None else self.profile.name,
            }
        )
        return md

    def close(self) -> None:
        """Drop the caches and release the energy meter. Idempotent."""
        self.reset(None)
        self.meter.close()

    def __repr__(self) -> str:
        return (
            f"LLMTorchExecutor(model={self.model_name!r}, device={str(self.device)!r}, "
            f"max_num_seqs={self.max_num_seqs}, max_model_len={self.max_model_len}, "
            f"energy_source={self.energy_source!r})"
        )
