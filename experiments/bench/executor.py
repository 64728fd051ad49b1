"""The real executor's overhead outside the model call (floor: under 5% of the batch
time at b >= 8; needs the real extra)."""

from __future__ import annotations

from typing import Any


def bench_executor_overhead(repeats: int = 30) -> dict[str, Any]:
    """What the real executor costs outside the model call (floor: < 5% of the batch time
    at batch sizes >= 8), on this machine's CPU with one thread.

    A quarter-width ResNet-50 (all four stages, 64x64 images) in a
    :class:`batch_env.real.torch_executor.TorchExecutor`; see
    :func:`batch_env.real.torch_executor.overhead_benchmark` for what is timed.

    :param repeats: calls per batch size (medians count).
    """
    from batch_env.real.energy import ModelMeter
    from batch_env.real.torch_executor import TorchExecutor, overhead_benchmark

    ex = TorchExecutor(
        "resnet50",
        32,
        torch_device="cpu",
        profile="resnet50-v100-linear",
        threads=1,
        warmup=2,
        width=0.25,
        model_kwargs={"image_size": 64, "num_classes": 100},
        meter=ModelMeter("bench: the profile's power model", "cpu"),
    )
    try:
        result = overhead_benchmark(ex, [1, 8, 16, 32], repeats=repeats)
    finally:
        ex.close()
    result["model"] = "resnet50, width 0.25, 64x64 images, 1 thread, CPU"
    result["floor_overhead_frac_b_ge_8"] = 0.05
    return result
