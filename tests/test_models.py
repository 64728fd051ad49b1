"""Tests for batch_env.real.models: node chains, sizes, weights files and the GPT KV cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from batch_env.real import models as M

DATA = Path(__file__).resolve().parents[1] / "data"

# Tiny versions of every model: same code paths, fast on a CPU.
TINY = {
    "resnet50": dict(width=0.125, depth=1, image_size=32, num_classes=10),
    "googlenet": dict(width=0.125, depth=3, image_size=32, num_classes=10),
    "bert-base": dict(width=0.125, depth=2, seq_len=8, vocab_size=100, heads=2),
    "gpt-small": dict(width=0.125, depth=2, seq_len=8, vocab_size=100, heads=2, n_positions=32),
}

RESNET50_NODES = (
    "stem",
    "layer1.0",
    "layer1.1",
    "layer1.2",
    "layer2.0",
    "layer2.1",
    "layer2.2",
    "layer2.3",
    "layer3.0",
    "layer3.1",
    "layer3.2",
    "layer3.3",
    "layer3.4",
    "layer3.5",
    "layer4.0",
    "layer4.1",
    "layer4.2",
    "head",
)


def tiny(name: str, **over) -> M.NodeChainModel:
    return M.build_model(name, **{**TINY[name], **over})


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    scale = float(b.abs().max()) + 1e-6
    return torch.allclose(a, b, rtol=1e-4, atol=1e-5 * scale)


def test_models_listed():
    assert M.MODELS == ("resnet50", "googlenet", "bert-base", "gpt-small")


@pytest.mark.parametrize("name", M.MODELS)
def test_node_chain_equals_forward(name):
    m = tiny(name)
    assert len(m.node_names) == len(m.nodes) == m.n_nodes
    assert not m.training and not any(p.requires_grad for p in m.parameters())
    x = m.make_input(3, "cpu")
    with torch.inference_mode():
        y = m(x)
        a = x
        for node in m.nodes:
            a = node(a)
    assert torch.equal(a, y)
    assert y.shape[0] == 3 and torch.isfinite(y).all()


@pytest.mark.parametrize("name", M.MODELS)
def test_merged_groups_equal_one_batch(name):
    """Two groups advanced separately, merged at a middle node, give the batch's output."""
    m = tiny(name)
    x = m.make_input(5, "cpu", seed=1)
    older = x[:3] if isinstance(x, torch.Tensor) else tuple(t[:3] for t in x)
    newer = x[3:] if isinstance(x, torch.Tensor) else tuple(t[3:] for t in x)
    k = m.n_nodes // 2
    with torch.inference_mode():
        full = m(x)
        for node in m.nodes[:k]:
            older, newer = node(older), node(newer)
        merged = M.cat_activations([older, newer])
        assert M.activation_batch_size(merged) == 5
        for node in m.nodes[k:]:
            merged = node(merged)
    assert close(merged, full)


def test_make_input_is_seeded_and_shaped():
    m = tiny("resnet50")
    assert torch.equal(m.make_input(2, seed=3), m.make_input(2, seed=3))
    assert not torch.equal(m.make_input(2, seed=3), m.make_input(2, seed=4))
    assert m.make_input(4).shape == (4, 3, 32, 32)
    ids, mask = tiny("bert-base").make_input(4)
    assert ids.shape == mask.shape == (4, 8) and ids.dtype == torch.int64 and mask.all()
    with pytest.raises(ValueError, match="b=0"):
        m.make_input(0)


def test_resnet50_is_the_real_architecture():
    m = M.build_model("resnet50")
    assert m.node_names == RESNET50_NODES
    assert m.num_parameters() == 25_557_032  # torchvision's resnet50
    # the measured stage names of torchvision's model (data/resnet50_cpu_stage_latency.json)
    per = json.loads((DATA / "resnet50_cpu_stage_latency.json").read_text())["1"]["per"]
    assert tuple(per) == m.node_names
    with torch.inference_mode():
        a = m.make_input(1)
        shapes = []
        for node in m.nodes:
            a = node(a)
            shapes.append(tuple(a.shape))
    assert shapes[0] == (1, 64, 56, 56)
    assert shapes[3] == (1, 256, 56, 56) and shapes[7] == (1, 512, 28, 28)
    assert shapes[13] == (1, 1024, 14, 14) and shapes[16] == (1, 2048, 7, 7)
    assert shapes[-1] == (1, 1000)


def test_transformer_default_node_names_and_sizes():
    bert = M.build_model("bert-base", width=1 / 64, vocab_size=10)
    assert bert.node_names == ("embedding", *(f"encoder.{i}" for i in range(12)), "head")
    assert bert.config["heads"] == 12 and bert.config["seq_len"] == 128
    gpt = M.build_model("gpt-small", width=1 / 64, vocab_size=10)
    assert gpt.node_names == ("embedding", *(f"block.{i}" for i in range(12)), "head")
    full = M.build_model("bert-base", depth=1, vocab_size=10)
    assert full.config["hidden"] == 768 and full.config["ffn"] == 3072
    g = M.build_model("googlenet", width=0.125)
    assert g.node_names[0] == "stem" and g.node_names[-1] == "head" and len(g.node_names) == 11


def test_sizes_are_selectable():
    assert tiny("resnet50", depth=(1, 2, 1, 1)).n_nodes == 1 + 5 + 1
    assert tiny("bert-base", depth=3).n_nodes == 5
    assert tiny("googlenet", depth=9).n_nodes == 11


def test_seed_sets_the_weights_without_touching_global_rng():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b, c = tiny("resnet50", seed=1), tiny("resnet50", seed=1), tiny("resnet50", seed=2)
    assert torch.equal(torch.rand(1), before)
    w = "nodes.0.conv.weight"
    assert torch.equal(a.state_dict()[w], b.state_dict()[w])
    assert not torch.equal(a.state_dict()[w], c.state_dict()[w])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(name="resnet-50"), r"available models are \['resnet50', 'googlenet'"),
        (dict(name="resnet50", width=0), "width=0"),
        (dict(name="resnet50", depth=(1, 2)), "depth"),
        (dict(name="googlenet", depth=10), "depth=10"),
        (dict(name="bert-base", image_size=32), "does not take"),
        (dict(name="gpt-small", seq_len=2000), "seq_len=2000"),
        (dict(name="resnet50", dtype="int8"), "dtype"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        M.build_model(**kwargs)


def test_weights_round_trip(tmp_path):
    src = tiny("resnet50", seed=7)
    path = tmp_path / "w.pt"
    torch.save(src.state_dict(), path)
    dst = tiny("resnet50", seed=0, weights=path)
    x = src.make_input(2)
    with torch.inference_mode():
        assert torch.equal(src(x), dst(x))
    assert dst.config["weights"] == str(path)


def test_weights_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.pt"
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        tiny("resnet50", weights=missing)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"this is not a torch file")
    with pytest.raises(ValueError, match=r"garbage\.pt.*could not be read"):
        tiny("resnet50", weights=garbage)
    notdict = tmp_path / "list.pt"
    torch.save([torch.zeros(1)], notdict)
    with pytest.raises(ValueError, match=r"list\.pt.*not a state_dict"):
        tiny("resnet50", weights=notdict)
    wider = tmp_path / "wider.pt"
    torch.save(tiny("resnet50", width=0.25).state_dict(), wider)
    with pytest.raises(ValueError, match=r"wider\.pt.*shape mismatches.*nodes\.0\.conv\.weight"):
        tiny("resnet50", weights=wider)
    deeper = tmp_path / "deeper.pt"
    torch.save(tiny("resnet50", depth=2).state_dict(), deeper)
    with pytest.raises(ValueError, match=r"deeper\.pt.*unexpected keys"):
        tiny("resnet50", weights=deeper)
    shallower = tmp_path / "shallower.pt"
    torch.save(tiny("bert-base", depth=1).state_dict(), shallower)
    with pytest.raises(ValueError, match=r"shallower\.pt.*missing keys"):
        tiny("bert-base", weights=shallower)


def test_bert_mask_travels_with_the_activation():
    m = tiny("bert-base")
    ids, mask = m.make_input(2)
    masked = mask.clone()
    masked[0, 4:] = False
    with torch.inference_mode():
        y_full, y_masked = m((ids, mask)), m((ids, masked))
    assert close(y_masked[1], y_full[1])  # row 1 unchanged
    assert not close(y_masked[0], y_full[0])  # row 0 attends to fewer tokens


# ----------------------------------------------------------------- GPT KV cache


def gpt() -> M.GPTSmall:
    return tiny("gpt-small")


def test_prefill_then_decode_equals_full_forward():
    m = gpt()
    tokens = m.make_input(3)  # (3, 8)
    nxt = torch.tensor([5, 6, 7])
    with torch.inference_mode():
        logits, cache = m.prefill(tokens)
        assert close(logits, m(tokens))
        step = m.decode_step(nxt, cache)
        full = m(torch.cat([tokens, nxt[:, None]], dim=1))
    assert close(step, full)
    assert cache.lengths == [9, 9, 9] and cache.capacity >= 9  # grew from 8


def test_ragged_prefill_cat_and_select():
    m = gpt()
    a = m.make_input(1, seed=1)[:, :5]
    b = m.make_input(1, seed=2)[:, :3]
    padded = torch.cat([a, torch.cat([b, torch.zeros(1, 2, dtype=torch.long)], dim=1)])
    with torch.inference_mode():
        logits, cache = m.prefill(padded, lengths=[5, 3], capacity=16)
        la, ca = m.prefill(a)
        lb, cb = m.prefill(b)
        assert close(logits[0], la[0]) and close(logits[1], lb[0])
        step = m.decode_step(torch.tensor([9, 4]), cache)
        joined = M.KVCache.cat([ca, cb])  # iteration-level batching: join running sequences
        step_joined = m.decode_step(torch.tensor([9, 4]), joined)
        ref_b = m(torch.cat([b, torch.tensor([[4]])], dim=1))
        kept = joined.select([1])  # sequence 0 finished
        step_kept = m.decode_step(torch.tensor([11]), kept)
        ref_kept = m(torch.cat([b, torch.tensor([[4, 11]])], dim=1))
    assert close(step, step_joined)
    assert close(step[1], ref_b[0])
    assert kept.lengths == [5] and close(step_kept[0], ref_kept[0])
    assert cache.nbytes > 0 and cache.batch_size == 2
    with pytest.raises(ValueError, match="lengths"):
        m.prefill(padded, lengths=[5, 0])
    with pytest.raises(ValueError, match="out of range"):
        joined.select([2])


def test_resize_keeps_results_and_refuses_to_cut():
    m = gpt()
    tokens = m.make_input(2)  # (2, 8)
    nxt = torch.tensor([3, 4])
    with torch.inference_mode():
        _, ref = m.prefill(tokens)
        want = m.decode_step(nxt, ref)
        for cap in (9, 32):  # grow to exactly the need, and beyond
            _, cache = m.prefill(tokens)
            cache.resize(cap)
            assert cache.capacity == cap and cache.lengths == [8, 8]
            assert close(m.decode_step(nxt, cache), want)
            assert cache.capacity == cap  # the step did not have to grow it
        cache.resize(9)  # shrink: drops padding only
        assert cache.capacity == 9
        assert close(
            m.decode_step(torch.tensor([5, 6]), cache),
            m(torch.cat([tokens, nxt[:, None], torch.tensor([[5], [6]])], dim=1)),
        )
    with pytest.raises(ValueError, match="capacity=9 is invalid.*>= 10"):
        cache.resize(9)


def test_gpt_seq_len_defaults_within_n_positions():
    assert (
        M.build_model(
            "gpt-small", width=0.125, depth=1, heads=2, vocab_size=50, n_positions=16
        ).seq_len
        == 16
    )
    assert tiny("gpt-small", n_positions=512).seq_len == 8  # given explicitly


def test_gpt_extend_is_prefill_and_decode_in_one_call():
    """A mixed iteration (GPTSmall.extend): the decode rows' logits are decode_step's, and a
    prompt prefilled in chunks (its first chunk alongside the decodes) ends with the logits
    and KV of a whole prefill; lengths advance by each row's tokens."""
    import torch

    from batch_env.real.models import GPTSmall, KVCache

    torch.manual_seed(0)
    m = GPTSmall(width=0.25, depth=2, heads=2, vocab_size=97, n_positions=64).eval()
    g = torch.Generator().manual_seed(1)
    a, b, c = (torch.randint(0, 97, (n,), generator=g) for n in (10, 7, 12))
    with torch.inference_mode():
        _, ca = m.prefill(a[None], capacity=64)
        _, cb = m.prefill(b[None], capacity=64)
        whole, cc = m.prefill(c[None], capacity=64)
        ref = KVCache.cat([ca, cb])
        tok = torch.tensor([3, 4])
        want = m.decode_step(tok, ref)
        _, ca = m.prefill(a[None], capacity=64)
        _, cb = m.prefill(b[None], capacity=64)
        cache = KVCache.cat([ca, cb, m.new_cache(1, 64)])
        got = m.extend(cache, [0, 1, 2], [tok[0:1], tok[1:2], c[:5]], n_decode=2)
        assert torch.allclose(got[:2], want, atol=1e-5)
        last = m.extend(cache, [2], [c[5:]])
        assert torch.allclose(last[0], whole[0], atol=1e-5)
        for layer in range(2):
            assert torch.allclose(cache.k[layer][2, :, :12], cc.k[layer][0, :, :12], atol=1e-5)
        assert cache.lengths == [11, 8, 12] and cache.positions.tolist() == [11, 8, 12]
        with pytest.raises(ValueError, match="decodes must be rows 0..0"):
            m.extend(cache, [1], [tok[0:1]], n_decode=1)
        with pytest.raises(ValueError, match="resize first"):
            m.extend(cache, [2], [torch.zeros(60, dtype=torch.long)])
