"""Tests for batch_env.real.spec.ModelSpec: checks, conversions, the model it builds, and
that the executors and the profiler take their model fields (and metadata) from it."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest
import torch

from batch_env.checks import ArgumentError
from batch_env.real import ModelSpec
from batch_env.real.energy import ModelMeter
from batch_env.real.llm_torch_executor import LLMTorchExecutor
from batch_env.real.models import build_model
from batch_env.real.profiling import measure_profile
from batch_env.real.torch_executor import TorchExecutor

TINY_RESNET = dict(width=0.125, depth=1, model_kwargs={"image_size": 32, "num_classes": 10})
TINY_GPT = dict(
    width=0.125, depth=1, model_kwargs={"heads": 2, "vocab_size": 256, "n_positions": 64}
)
#: TorchExecutor.metadata()'s keys before ModelSpec; "model_spec" is the one added
TORCH_KEYS = {
    "device",
    "device_name",
    "torch_version",
    "cuda_version",
    "cudnn_version",
    "cudnn_benchmark",
    "threads",
    "interop_threads",
    "cpu_count",
    "python",
    "platform",
    "date",
    "executor",
    "model",
    "model_config",
    "parameters",
    "width",
    "depth",
    "nodes",
    "max_batch_size",
    "warmup",
    "warmup_rule",
    "cuda_graphs",
    "energy_source",
    "energy_reason",
    "driver",
    "meter",
    "profile",
}
#: measure_profile's _metadata keys before ModelSpec (the shipped measured profiles have them)
PROFILE_MD_KEYS = {
    "device",
    "device_name",
    "torch_version",
    "cuda_version",
    "cudnn_version",
    "cudnn_benchmark",
    "threads",
    "interop_threads",
    "cpu_count",
    "python",
    "platform",
    "date",
    "driver",
    "model",
    "model_config",
    "parameters",
    "warmup",
    "min_time_s",
    "min_repeats",
    "cuda_graphs",
    "energy_source",
    "energy_reason",
}


@pytest.fixture(scope="module", autouse=True)
def restore_threads():
    """The executors set torch's thread count process-wide; give other tests theirs back."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def meter():
    return ModelMeter("test: no meter", "cpu")


# --------------------------------------------------------------------- checks


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(width=-1), r"^width=-1 is out of range: expected a finite number > 0$"),
        (dict(width=0), r"^width=0 is out of range: expected a finite number > 0$"),
        (dict(width=float("inf")), r"^width=inf is invalid: expected a finite number > 0$"),
        (dict(width="1"), r"^width='1' is invalid: expected a finite number > 0$"),
        (dict(depth=0), r"^depth=0 is out of range: expected an integer >= 1, or None$"),
        (dict(depth=1.5), r"^depth=1\.5 is invalid: expected an integer >= 1, or None$"),
        (dict(depth=True), r"^depth=True is invalid: expected an integer >= 1"),
        (
            dict(depth=[1, 0, 1, 1]),
            r"^depth=\[1, 0, 1, 1\] is invalid: expected None .*integers >= 1",
        ),
        (dict(depth=[]), r"^depth=\[\] is invalid: expected None"),
        (dict(depth="12"), r"^depth='12' is invalid: expected None"),
        (dict(seed=-1), r"^seed=-1 is out of range: expected an integer >= 0$"),
        (dict(seed=0.5), r"^seed=0\.5 is invalid: expected an integer >= 0$"),
        (dict(threads=0), r"^threads=0 is out of range: expected an integer >= 1, or None$"),
        (dict(threads="2"), r"^threads='2' is invalid: expected an integer >= 1, or None$"),
        (dict(warmup=-1), r"^warmup=-1 is out of range: expected an integer >= 0$"),
        (dict(warmup=None), r"^warmup=None is invalid: expected an integer >= 0$"),
        (
            dict(torch_device="gpu"),
            r"^torch_device='gpu' is invalid: expected 'auto', 'cpu', 'cuda' or "
            r"'cuda:<index>'$",
        ),
        (dict(torch_device="cuda:x"), r"^torch_device='cuda:x' is invalid"),
        (dict(weights=3), r"^weights=3 is invalid: expected None or the path"),
        (
            dict(model_kwargs=[("image_size", 32)]),
            r"^model_kwargs=\[\('image_size', 32\)\] is invalid: "
            r"expected a mapping",
        ),
        (dict(model_kwargs={1: 2}), r"^model_kwargs=\{1: 2\} is invalid: expected a mapping"),
        (dict(model_kwargs={"width": 2}), r"\['width'\] are set by ModelSpec's own fields"),
    ],
)
def test_bad_fields_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        ModelSpec("resnet50", **kw)


@pytest.mark.parametrize("model", ["", None, 5])
def test_bad_model_name(model):
    with pytest.raises(ValueError, match=r"^model=.* is invalid: expected a model name"):
        ModelSpec(model)


def test_unknown_model_is_refused_by_build():
    spec = ModelSpec("vgg16")  # only build() knows the models (no torch at construction)
    with pytest.raises(
        ValueError, match=r"model 'vgg16' is unknown: available models are \['resnet50'"
    ):
        spec.build("cpu")


def test_from_dict_refuses_unknown_and_missing_keys():
    with pytest.raises(
        ArgumentError,
        match=r"^ModelSpec has unknown key\(s\) \['cuda_graphs', 'device'\]: "
        r"allowed keys are \['model', 'width', 'depth', 'weights', 'seed', "
        r"'model_kwargs', 'threads', 'warmup', 'torch_device'\]$",
    ):
        ModelSpec.from_dict({"model": "resnet50", "device": "cpu", "cuda_graphs": True})
    with pytest.raises(ValueError, match=r"^ModelSpec needs 'model'"):
        ModelSpec.from_dict({"width": 0.5})
    with pytest.raises(ValueError, match=r"expected a mapping"):
        ModelSpec.from_dict([("model", "resnet50")])
    with pytest.raises(ValueError, match=r"^width=0 is out of range"):  # values are checked too
        ModelSpec.from_dict({"model": "resnet50", "width": 0})


# --------------------------------------------------------------------- conversions


def test_defaults_and_normalisation(tmp_path):
    spec = ModelSpec("resnet50")
    assert spec.to_dict() == {
        "model": "resnet50",
        "width": 1.0,
        "depth": None,
        "weights": None,
        "seed": 0,
        "model_kwargs": {},
        "threads": None,
        "warmup": 3,
        "torch_device": "auto",
    }
    import numpy as np

    s = ModelSpec(
        "resnet50",
        width=np.float32(0.5),
        depth=[np.int64(1), 2, 1, 1],
        seed=np.int32(3),
        weights=tmp_path / "w.pt",
        model_kwargs={"dtype": torch.float16},
    )
    assert (
        s.width == 0.5
        and type(s.width) is float
        and s.depth == (1, 2, 1, 1)
        and type(s.seed) is int
    )
    assert s.weights == str(tmp_path / "w.pt") and s.model_kwargs == {"dtype": "float16"}


def test_model_kwargs_are_a_read_only_copy():
    kw = {"image_size": 32}
    spec = ModelSpec("resnet50", model_kwargs=kw)
    kw["image_size"] = 64
    assert spec.model_kwargs == {"image_size": 32}
    with pytest.raises(TypeError):
        spec.model_kwargs["image_size"] = 16  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.width = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "spec",
    [
        ModelSpec("resnet50"),
        ModelSpec(
            "resnet50",
            width=0.125,
            depth=[1, 2, 1, 1],
            seed=4,
            threads=2,
            warmup=0,
            torch_device="cpu",
            model_kwargs={"image_size": 32, "num_classes": 10},
        ),
        ModelSpec("gpt-small", weights="w.pt", torch_device="cuda:1", **TINY_GPT),
    ],
)
def test_dict_round_trip(spec):
    d = spec.to_dict()
    assert json.loads(json.dumps(d)) == d  # JSON-friendly
    back = ModelSpec.from_dict(json.loads(json.dumps(d)))
    assert back == spec and hash(back) == hash(spec)
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert dataclasses.replace(spec) == spec
    assert spec.keywords() == {k: v for k, v in d.items() if k != "model"}
    assert spec.executor_options() == {
        k: v for k, v in d.items() if k not in ("model", "torch_device")
    }
    assert ModelSpec(spec.model, **spec.keywords()) == spec


def test_specs_compare_by_value():
    a = ModelSpec(
        "resnet50", depth=[1, 1, 1, 1], model_kwargs={"image_size": 32, "num_classes": 10}
    )
    b = ModelSpec(
        "resnet50", depth=(1, 1, 1, 1), model_kwargs={"num_classes": 10, "image_size": 32}
    )
    assert a == b and len({a, b}) == 1
    assert a != dataclasses.replace(a, seed=1)


# --------------------------------------------------------------------- build


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.mark.parametrize(("model", "sizes"), [("resnet50", TINY_RESNET), ("gpt-small", TINY_GPT)])
def test_build_gives_build_models_weights(model, sizes):
    spec = ModelSpec(model, seed=3, **sizes)
    built = spec.build("cpu")
    want = build_model(
        model, width=sizes["width"], depth=sizes["depth"], seed=3, **sizes["model_kwargs"]
    )
    _same_weights(built, want)
    assert built.config == want.config
    assert next(built.parameters()).device == torch.device("cpu")
    assert not built.training
    _same_weights(spec.build(), want)  # None: torch_device resolved ("auto")
    other = dataclasses.replace(spec, seed=4).build("cpu")
    assert any(
        not torch.equal(x, y)
        for x, y in zip(other.state_dict().values(), want.state_dict().values(), strict=True)
    )


def test_build_loads_weights(tmp_path):
    path = tmp_path / "w.pt"
    torch.save(
        build_model(
            "resnet50", width=0.125, depth=1, seed=9, image_size=32, num_classes=10
        ).state_dict(),
        path,
    )
    spec = ModelSpec("resnet50", weights=path, **TINY_RESNET)  # seed 0, weights from seed 9
    _same_weights(
        spec.build("cpu"),
        build_model("resnet50", width=0.125, depth=1, seed=9, image_size=32, num_classes=10),
    )
    assert spec.build("cpu").config["weights"] == str(path)


# --------------------------------------------------------------------- executors and profiler


def _torch_executor(**kw):
    return TorchExecutor(
        "resnet50",
        2,
        torch_device="cpu",
        profile="resnet50-v100-linear",
        threads=1,
        warmup=1,
        seed=2,
        meter=meter(),
        **kw,
    )


def test_torch_executor_keeps_its_spec_and_metadata():
    ex = _torch_executor(**TINY_RESNET)
    try:
        spec = ModelSpec("resnet50", torch_device="cpu", threads=1, warmup=1, seed=2, **TINY_RESNET)
        assert ex.spec == spec
        md = ex.metadata()
        # every key of before, the spec and the clock (docs/real.md: Clocks) more
        assert set(md) == TORCH_KEYS | {"model_spec", "clock", "clock_source"}
        d = spec.to_dict()
        assert md["model_spec"] == d
        # the model fields of before, as they were, agree with the spec
        assert (
            md["model"] == d["model"] == ex.model_name
            and md["warmup"] == d["warmup"] == ex.warmup == 1
        )
        assert md["width"] == d["width"] == 0.125 and md["depth"] == [
            1,
            1,
            1,
            1,
        ]  # the model's depth
        assert md["threads"] == d["threads"] == 1 and md["device"] == "cpu"
        cfg = md["model_config"]
        assert cfg["seed"] == d["seed"] == ex.seed == 2 and cfg["weights"] == d["weights"] is None
        assert {k: cfg[k] for k in d["model_kwargs"]} == d["model_kwargs"]
        json.dumps(md)
        _same_weights(ex.model, spec.build("cpu"))
    finally:
        ex.close()


def test_torch_executor_from_a_spec_matches_keywords():
    spec = ModelSpec("resnet50", torch_device="cpu", threads=1, warmup=1, seed=2, **TINY_RESNET)
    a = _torch_executor(**TINY_RESNET)
    b = TorchExecutor(
        spec.model, 2, profile="resnet50-v100-linear", meter=meter(), **spec.keywords()
    )
    try:
        ma, mb = a.metadata(), b.metadata()
        ma.pop("date"), mb.pop("date")
        assert ma == mb and a.spec == b.spec == spec
    finally:
        a.close()
        b.close()


def test_executor_errors_name_the_field():
    with pytest.raises(ValueError, match=r"^width=-1 is out of range"):
        _torch_executor(width=-1, depth=1)
    with pytest.raises(ValueError, match=r"^depth=0 is out of range"):
        _torch_executor(width=0.125, depth=0)
    with pytest.raises(ValueError, match=r"^warmup=-1 is out of range"):
        TorchExecutor("resnet50", 2, torch_device="cpu", warmup=-1, meter=meter(), **TINY_RESNET)


def test_llm_executor_keeps_its_spec_and_metadata():
    ex = LLMTorchExecutor(
        "gpt-small",
        max_num_seqs=2,
        max_model_len=32,
        torch_device="cpu",
        profile="llama-2-7b-a100",
        threads=1,
        warmup=0,
        meter=meter(),
        **TINY_GPT,
    )
    try:
        spec = ModelSpec("gpt-small", torch_device="cpu", threads=1, warmup=0, **TINY_GPT)
        assert ex.spec == spec
        md = ex.metadata()
        d = spec.to_dict()
        assert (
            md["model_spec"] == d and md["model"] == d["model"] and md["warmup"] == d["warmup"] == 0
        )
        assert (
            md["width"] == d["width"] and md["depth"] == d["depth"] == 1 and md["n_positions"] == 64
        )
        assert md["model_config"]["seed"] == d["seed"] and md["threads"] == 1
        assert (md["clock"], md["clock_source"]) == ("wall", "perf_counter_ns")
        json.dumps(md)
        _same_weights(ex.model, spec.build("cpu"))
    finally:
        ex.close()
    with pytest.raises(ValueError, match=r"^seed=-1 is out of range"):
        LLMTorchExecutor(
            "gpt-small",
            max_num_seqs=2,
            max_model_len=32,
            torch_device="cpu",
            seed=-1,
            meter=meter(),
            **TINY_GPT,
        )


def test_profile_metadata_from_the_spec():
    spec = ModelSpec("resnet50", torch_device="cpu", threads=1, warmup=1, **TINY_RESNET)
    d = measure_profile(
        spec.model,
        batch_sizes=(1, 2),
        min_time_s=0.0,
        min_repeats=2,
        nodes=False,
        meter=meter(),
        **spec.keywords(),
    )
    md = d["_metadata"]
    assert set(md) == PROFILE_MD_KEYS | {"model_spec", "clock", "clock_source"}
    assert (md["clock"], md["clock_source"]) == ("wall", "perf_counter_ns")
    assert md["model_spec"] == spec.to_dict()
    assert md["model"] == "resnet50" and md["warmup"] == 1 and md["threads"] == 1
    assert md["model_config"]["depth"] == [1, 1, 1, 1] and md["model_config"]["image_size"] == 32
    assert d["model"].startswith("resnet50 (width=0.125, depth=[1, 1, 1, 1], image_size=32")
    assert "after 1 warm-up runs" in d["notes"]["method"]
    with pytest.raises(ValueError, match=r"^threads=0 is out of range"):
        measure_profile(
            "resnet50",
            torch_device="cpu",
            batch_sizes=(1, 2),
            threads=0,
            meter=meter(),
            **TINY_RESNET,
        )


def test_shipped_profiles_metadata_keys_are_kept():
    """The keys the shipped measured profiles carry are the ones measure_profile still writes."""
    from importlib import resources

    for name in ("resnet50-small-cpu", "bert-base-small-cpu"):
        path = resources.files("batch_env").joinpath(f"profiles/measured/{name}.json")
        assert set(json.loads(path.read_text(encoding="utf-8"))["_metadata"]) == PROFILE_MD_KEYS


def test_roundtrip_model_is_one_spec():
    from experiments.roundtrip import SMALL_MODEL

    assert isinstance(SMALL_MODEL, ModelSpec)
    assert SMALL_MODEL.executor_options() == {
        "width": 0.25,
        "depth": 1,
        "weights": None,
        "seed": 0,
        "model_kwargs": {"image_size": 64},
        "threads": 1,
        "warmup": 2,
    }
