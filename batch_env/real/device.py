"""Which torch device a name means: :func:`resolve_device`, a leaf that every part of
:mod:`batch_env.real` may import (the model spec, the executors, the profiler)."""

from __future__ import annotations

import re

import torch

__all__ = ["resolve_device"]


def resolve_device(torch_device: str = "auto") -> torch.device:
    """The torch device for ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:<index>"``.

    :param torch_device: ``"auto"`` = CUDA if available, else the CPU.
    :returns: the device (CUDA devices always carry their index; a CUDA device also
        becomes the process's current device, which events, streams and graphs use).
    :raises ValueError: for another string, or a CUDA device that is not there.
    """
    dev = str(torch_device)
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        return torch.device("cpu")
    m = re.fullmatch(r"cuda(?::(\d+))?", dev)
    if not m:
        raise ValueError(
            f"torch_device={torch_device!r} is invalid: expected 'auto', 'cpu', 'cuda' or "
            "'cuda:<index>'"
        )
    if not torch.cuda.is_available():
        raise ValueError(
            f"torch_device={torch_device!r} but no CUDA GPU is available here "
            f"(torch {torch.__version__}: torch.cuda.is_available() is False); "
            "use torch_device='cpu' or 'auto'"
        )
    index = int(m.group(1) or torch.cuda.current_device())
    n = torch.cuda.device_count()
    if index >= n:
        raise ValueError(
            f"torch_device={torch_device!r} is out of range: this machine has {n} CUDA "
            f"device(s), allowed cuda:0..cuda:{n - 1}"
        )
    # events, streams and graphs use the current device: make it this one (process-wide)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)
