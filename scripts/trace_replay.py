"""One offline replay of a request trace on ``LLMBatching-v1``, shared by the validation
scripts (``validate_energy.py``, ``validate_prefix_caching.py``, ``validate_online.py``):
the trace file's requests served at the env's largest cap (vLLM's ``max_num_seqs``, its
one budget), to the end of the trace.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

import batch_env  # noqa: F401 (registers the ids)

#: a bound on the steps of one replay (an episode of a few thousand requests takes a few
#: hundred thousand)
MAX_STEPS = 100_000_000


def trace_workload(
    path: Path,
    columns: tuple[str, str, str],
    time_unit: str = "s",
    prefix_block_tokens: int | None = None,
) -> dict[str, Any]:
    """The workload of the trace file at ``path``, played once: its timestamp,
    prompt-tokens and output-tokens ``columns``, the timestamps' ``time_unit``, and with
    ``prefix_block_tokens`` a JSONL trace's ``hash_ids`` at that many tokens a block."""
    ts, prompt, output = columns
    workload: dict[str, Any] = {
        "kind": "trace",
        "path": str(path),
        "timestamp_column": ts,
        "time_unit": time_unit,
        "prompt_tokens_column": prompt,
        "output_tokens_column": output,
        "loop": False,
    }
    if prefix_block_tokens is not None:
        workload.update(prefix_hashes_column="hash_ids", prefix_block_tokens=prefix_block_tokens)
    return workload


def replay(
    path: Path,
    n: int,
    *,
    columns: tuple[str, str, str],
    time_unit: str = "s",
    prefix_block_tokens: int | None = None,
    seed: int = 0,
    horizon_s: float = 1e7,
    on_step: Callable[[Any], None] | None = None,
    **env_kwargs: Any,
) -> tuple[Any, dict[str, Any]]:
    """Serve the ``n`` requests of the trace at ``path`` and return ``(the server, the
    last step's info)``.

    :param columns: the trace's timestamp, prompt-tokens and output-tokens columns.
    :param time_unit: the timestamps' unit (``"s"`` or ``"ms"``).
    :param prefix_block_tokens: with a JSONL trace's ``hash_ids``: tokens per hashed block
        (``None``: no prefix information).
    :param seed: the episode's seed.
    :param horizon_s: the episode's time bound (far beyond the trace's end).
    :param on_step: called with the server after every step (e.g. to record a series).
    :param env_kwargs: ``LLMBatching-v1``'s other arguments (``profile``, ``max_num_seqs``,
        ``max_num_batched_tokens``, ``max_model_len``, ``prefix_caching``, ...).
    """
    workload = trace_workload(path, columns, time_unit, prefix_block_tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(
            "batch_env/LLMBatching-v1",
            workload=workload,
            horizon_requests=n,
            horizon_s=horizon_s,
            **env_kwargs,
        )
        last = int(env.action_space.n) - 1  # type: ignore[attr-defined]  # Discrete
        _obs, info = env.reset(seed=seed)
        server = env.unwrapped.server  # type: ignore[attr-defined]
        for _ in range(MAX_STEPS):
            _obs, _r, term, trunc, info = env.step(last)
            if on_step is not None:
                on_step(server)
            if term or trunc:
                break
        env.close()
    return server, info
