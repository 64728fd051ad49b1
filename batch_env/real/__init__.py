"""Real execution: batches run on a PyTorch model, timed and metered on a real device.

- :mod:`.spec`: :class:`ModelSpec`, the model bundle (model, width, depth, weights, seed,
  model_kwargs, threads, warm-up, device) the executors and the profiler share: checked,
  built, written into metadata, read from a dict (no torch; imported here);
- :mod:`.device`: ``resolve_device``, which torch device a name means (a leaf: the spec,
  the executors and the profiler import it);
- :mod:`.models`: the pure-PyTorch models (node chains, GPT with a KV cache);
- :mod:`.torch_executor`: :class:`TorchExecutor`, the executor of ``executor="torch"``
  for ``DynamicBatching-v0`` and ``NodeBatching-v0`` (plus the shared clock, thread and
  metadata helpers);
- :mod:`.llm_torch_executor`: :class:`LLMTorchExecutor`, the same for ``LLMBatching-v0``;
- :mod:`.energy`: energy meters (NVML, RAPL, a profile's model) and ``open_meter``;
- :mod:`.profiling`: ``measure_profile``, a profile measured on this machine.

This is the only place torch is imported, and only when real execution is asked for:
``batch_env.executor`` imports these modules inside the functions that build a real
executor, and nothing else in ``batch_env`` imports ``batch_env.real`` at module level
(tests/test_layering.py checks both). This ``__init__`` imports only :mod:`.spec`, which
imports no torch, so ``import batch_env.real`` (or ``from batch_env.real import ModelSpec``)
alone does not load torch. Modules here may import the rest of ``batch_env`` (profiles,
checks), never the envs.
"""

from .spec import ModelSpec

__all__ = ["ModelSpec"]
