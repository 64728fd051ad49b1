"""The executor interfaces are written down (``batch_env.executor.Executor`` and
``LLMExecutor``) and every executor implements its Protocol fully: every member, with the
Protocol's parameters in the Protocol's order (extra parameters only with defaults)."""

from __future__ import annotations

import inspect
import warnings

import gymnasium as gym
import numpy as np
import pytest

import batch_env  # noqa: F401
from batch_env.executor import Executor, LLMExecutor, LLMProfileExecutor, ProfileExecutor
from batch_env.profiles.batch_profile import load
from batch_env.profiles.llm_profile import load as load_llm
from batch_env.real.energy import ModelMeter
from batch_env.real.llm_torch_executor import LLMTorchExecutor
from batch_env.real.torch_executor import TorchExecutor


def _members(protocol: type) -> tuple[list[str], list[str]]:
    """The Protocol's methods and its data members."""
    methods = [
        n for n, v in vars(protocol).items() if inspect.isfunction(v) and not n.startswith("_")
    ]
    data = [n for n in getattr(protocol, "__annotations__", {}) if not n.startswith("_")]
    return methods, data


def _params(fn) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def _check_class(cls: type, protocol: type) -> None:
    methods, _ = _members(protocol)
    for name in methods:
        assert callable(getattr(cls, name, None)), (
            f"{cls.__name__} lacks {protocol.__name__}.{name}"
        )
        want, have = _params(getattr(protocol, name)), _params(getattr(cls, name))
        assert [p.name for p in have[: len(want)]] == [p.name for p in want], (cls.__name__, name)
        for p in have[len(want) :]:
            assert p.default is not inspect.Parameter.empty, (
                f"{cls.__name__}.{name}: extra {p.name} needs a default"
            )
        for w, h in zip(want, have, strict=False):
            if w.default is not inspect.Parameter.empty:
                assert h.default == w.default, (
                    f"{cls.__name__}.{name}({h.name}) default {h.default!r}"
                )


def _check_instance(obj: object, protocol: type) -> None:
    _, data = _members(protocol)
    assert isinstance(obj, protocol)
    for name in data:
        assert hasattr(obj, name), f"{type(obj).__name__} has no {name}"


@pytest.mark.parametrize("cls", [ProfileExecutor, TorchExecutor])
def test_batch_executors_implement_executor(cls):
    _check_class(cls, Executor)


@pytest.mark.parametrize("cls", [LLMProfileExecutor, LLMTorchExecutor])
def test_llm_executors_implement_llm_executor(cls):
    _check_class(cls, LLMExecutor)


def test_instances_satisfy_their_protocol():
    prof = load("resnet50-v100-linear")
    ex = ProfileExecutor(prof, 8)
    _check_instance(ex, Executor)
    assert not isinstance(ex, LLMExecutor)
    assert ex.metadata()["executor"] == "profile" and ex.close() is None
    ex.reset(np.random.default_rng(0))
    assert ex.run(4)[0] > 0 and ex.run_node(0, 4, ex.new_group(4))[0] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = TorchExecutor(
            "resnet50",
            4,
            torch_device="cpu",
            profile=prof,
            warmup=0,
            threads=1,
            width=0.125,
            depth=1,
            model_kwargs={"image_size": 32, "num_classes": 10},
            meter=ModelMeter("test: no meter", "cpu"),
        )
    try:
        _check_instance(t, Executor)
        assert t.energy_source == "profile" and isinstance(t.node_names, tuple)
    finally:
        t.close()
    llm = LLMProfileExecutor(load_llm("llama-2-7b-a100"))
    _check_instance(llm, LLMExecutor)
    assert llm.needs_sequences is False


@pytest.mark.parametrize("env_id", ["batch_env/DynamicBatching-v0", "batch_env/NodeBatching-v0"])
def test_envs_hold_an_executor(env_id):
    env = gym.make(env_id)
    assert isinstance(env.unwrapped.executor, Executor)
    env.close()
    env.close()  # idempotent through the executor's close


def test_llm_env_holds_an_llm_executor():
    env = gym.make("batch_env/LLMBatching-v0")
    assert isinstance(env.unwrapped.executor, LLMExecutor)
    env.close()
