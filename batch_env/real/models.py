"""Pure-PyTorch models for real execution, each exposed as a chain of nodes.

The models the real executor (:mod:`batch_env.real.torch_executor`) and the profiler
(:mod:`batch_env.real.profiling`) run: no torchvision, no downloads. Weights are random by
default (seeded, so two builds with the same arguments are identical), or loaded from a
``state_dict`` saved with ``torch.save(model.state_dict(), path)`` from a model built here
with the same arguments. Latency depends on the architecture and the tensor shapes, not
on the weights' values, so random weights time like trained ones.

Models (:data:`MODELS`)
    ``resnet50``
        ResNet-50 (v1.5: stride on the 3x3 convolution): stem (conv 7x7/2, BN, ReLU, max
        pool 3x3/2), ``layer1``..``layer4`` of [3, 4, 6, 3] bottleneck blocks (expansion 4),
        head (global average pool, fully connected to 1000 classes). 25,557,032 parameters.
        Nodes: ``stem``, ``layer1.0`` .. ``layer4.2``, ``head`` (18), the stage names of
        the torchvision model. ``depth``: blocks per stage (one int for every stage, or
        four ints); ``image_size`` (224), ``num_classes`` (1000).
    ``googlenet``
        Inception-v1 (Szegedy et al. 2015, with batch norm after every convolution and the
        paper's 5x5 branch; no auxiliary classifiers). Nodes: ``stem`` (up to the second
        max pool), ``inception3a`` .. ``inception5b`` (the max pools between stages are the
        first op of ``inception4a`` and ``inception5a``), ``head``. ``depth``: number of
        inception modules kept (1..9); ``image_size`` (224), ``num_classes`` (1000).
    ``bert-base``
        BERT-base encoder: embedding (token + position + segment-0 embeddings, layer norm),
        12 post-LN encoder layers (hidden 768, 12 heads, FFN 3072, GELU), head (pooler:
        dense + tanh on the first token; classifier to ``num_labels`` = 2). Nodes:
        ``embedding``, ``encoder.0`` .. ``encoder.11``, ``head``. ``depth``: encoder layers;
        ``seq_len`` (128), ``vocab_size`` (30522), ``heads`` (12), ``num_labels`` (2),
        ``max_positions`` (512).
    ``gpt-small``
        GPT-2-small-style decoder: token + position embeddings, 12 pre-LN blocks (hidden
        768, 12 heads, MLP 3072, causal attention), final layer norm and a language-model
        head tied to the token embedding. Nodes: ``embedding``, ``block.0`` ..
        ``block.11``, ``head`` (logits of the last position). Besides the node chain (a
        prefill of fixed-length prompts, no cache) it has a real KV cache for
        iteration-level batching: :meth:`GPTSmall.prefill` and :meth:`GPTSmall.decode_step`
        with :class:`KVCache` (``cat`` joins running sequences, ``select`` drops finished
        ones; :meth:`KVCache.resize` sets the capacity). ``depth``: blocks; ``seq_len``
        (128, at most ``n_positions``), ``vocab_size`` (50257), ``heads`` (12),
        ``n_positions`` (1024).

``width`` multiplies every channel count (CNNs) or the per-head dimension (transformers,
64 x width, so the hidden size stays divisible by the heads); ``width``, ``depth`` and the
input size exist so tests can run tiny models fast on a CPU. The defaults are the real
sizes. Every model also takes ``dtype`` (``"float32"``, the default, ``"float16"`` or
``"bfloat16"``).

Node chain
    ``model.node_names`` (tuple of str) and ``model.nodes`` (``nn.ModuleList``): running
    the nodes in order on ``model.make_input(b, device)`` is exactly ``model(x)``. An
    *activation* (what flows between nodes) is a tensor, or for BERT a tuple
    ``(hidden, attention_mask)``, whose every tensor has the batch on dim 0; activations
    of two groups of requests at the same node merge by concatenation along dim 0
    (:func:`cat_activations`), so every node accepts any batch size and the rows of a
    batch never interact (batch norm runs in eval mode). BERT's attention mask (bool,
    ``True`` = attend, shape ``(b, seq_len)``) travels with the hidden states so that a
    merged group keeps each request's mask. Nodes never modify their input in place, so
    an input can be reused.

Models are returned in eval mode with gradients off; run them under
``torch.inference_mode()``.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_number

__all__ = [
    "MODELS",
    "Activation",
    "BertBase",
    "GPTSmall",
    "GoogLeNet",
    "KVCache",
    "NodeChainModel",
    "ResNet50",
    "activation_batch_size",
    "build_model",
    "cat_activations",
    "slice_activation",
]

#: A node's input / output: a tensor, or a tuple of tensors, batch on dim 0.
Activation = torch.Tensor | tuple[torch.Tensor, ...]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


# --------------------------------------------------------------------- activations


def slice_activation(act: Activation, b: int) -> Activation:
    """The first ``b`` rows of an activation (a tensor or a tuple of tensors), as views."""
    if isinstance(act, torch.Tensor):
        return act[:b]
    return tuple(t[:b] for t in act)


def cat_activations(acts: Sequence[Activation]) -> Activation:
    """Concatenate the activations of groups at the same node along the batch (dim 0).

    :param acts: activations in order (the older group first); all tensors or all tuples
        of the same length.
    :returns: one activation holding every row, in order.
    :raises ValueError: if ``acts`` is empty or mixes tensors and tuples.
    """
    if not acts:
        raise ValueError("cat_activations: acts is empty; pass at least one activation")
    first = acts[0]
    if isinstance(first, torch.Tensor):
        if not all(isinstance(a, torch.Tensor) for a in acts):
            raise ValueError("cat_activations: mixes tensors and tuples; all must be one kind")
        return torch.cat(list(acts), dim=0)  # type: ignore[arg-type]  # all tensors (checked above)
    n = len(first)
    if not all(isinstance(a, tuple) and len(a) == n for a in acts):
        raise ValueError(f"cat_activations: expected every activation to be a tuple of {n} tensors")
    return tuple(torch.cat([a[i] for a in acts], dim=0) for i in range(n))


def activation_batch_size(act: Activation) -> int:
    """The batch size (dim 0) of an activation.

    :param act: a tensor or a tuple of tensors.
    :returns: the size of dim 0 of the (first) tensor.
    """
    t = act if isinstance(act, torch.Tensor) else act[0]
    return int(t.shape[0])


# --------------------------------------------------------------------- base class


class NodeChainModel(nn.Module):
    """A model that is a chain of nodes; ``forward`` runs them in order.

    Subclasses set ``name``, ``node_names``, ``nodes`` and ``config`` and implement
    :meth:`make_input`.
    """

    name: str
    node_names: tuple[str, ...]
    nodes: nn.ModuleList
    config: dict[str, Any]

    def forward(self, x: Activation) -> Activation:
        """Run every node in order.

        :param x: the model input (see :meth:`make_input`).
        :returns: the output of the last node.
        """
        for node in self.nodes:
            x = node(x)
        return x

    @property
    def n_nodes(self) -> int:
        """Number of nodes in the chain."""
        return len(self.nodes)

    def num_parameters(self) -> int:
        """Number of distinct parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())

    @property
    def dtype(self) -> torch.dtype:
        """The floating-point dtype of the parameters."""
        return next(p.dtype for p in self.parameters() if p.is_floating_point())

    @property
    def device(self) -> torch.device:
        """The device of the parameters."""
        return next(self.parameters()).device

    def make_input(
        self, b: int, device: str | torch.device | None = None, *, seed: int = 0
    ) -> Activation:
        """A random input batch of ``b`` requests (deterministic for a given ``seed``).

        :param b: batch size >= 1.
        :param device: where to put it (default: the model's device).
        :param seed: seed of the random values.
        :returns: the activation to feed node 0.
        """
        raise NotImplementedError


def _check_b(b: Any) -> int:
    return check_number("batch size b", b, low=1, integer=True)


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    return g


def _channels(c: int, width: float) -> int:
    return max(1, int(round(c * width)))


def _init_cnn(module: nn.Module) -> None:
    """He initialisation of convolutions (as torchvision), unit batch norm."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)


def _init_transformer(module: nn.Module) -> None:
    """BERT / GPT-2 initialisation: normal(0, 0.02) weights and embeddings, zero biases."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            bias = getattr(m, "bias", None)  # an Embedding has none
            if bias is not None:
                nn.init.zeros_(bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class _ClassifierHead(nn.Module):
    """Global average pool, flatten, (dropout, a no-op in eval), fully connected."""

    def __init__(self, in_ch: int, num_classes: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(torch.flatten(self.pool(x), 1)))


class _ImageModel(NodeChainModel):
    image_size: int

    def make_input(
        self, b: int, device: str | torch.device | None = None, *, seed: int = 0
    ) -> torch.Tensor:
        """A random image batch, shape ``(b, 3, image_size, image_size)``, the model's dtype.

        :param b: batch size >= 1.
        :param device: where to put it (default: the model's device).
        :param seed: seed of the random values.
        """
        b = _check_b(b)
        s = self.image_size
        x = torch.randn((b, 3, s, s), generator=_generator(seed))
        return x.to(device=device or self.device, dtype=self.dtype)


# --------------------------------------------------------------------- ResNet-50


class _ResNetStem(nn.Module):
    def __init__(self, out_ch: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, out_ch, 7, stride=2, padding=3, bias=False)
        self.bn = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.bn(self.conv(x))))


class Bottleneck(nn.Module):
    """ResNet bottleneck block: 1x1 reduce, 3x3 (carrying the stride), 1x1 expand (x4)."""

    expansion = 4

    def __init__(self, in_ch: int, mid_ch: int, stride: int) -> None:
        super().__init__()
        out_ch = mid_ch * self.expansion
        self.conv1 = nn.Conv2d(in_ch, mid_ch, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid_ch)
        self.conv2 = nn.Conv2d(mid_ch, mid_ch, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid_ch)
        self.conv3 = nn.Conv2d(mid_ch, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity  # `out` is a fresh tensor: the block's input stays untouched
        return self.relu(out)


class ResNet50(_ImageModel):
    """ResNet-50 as an 18-node chain (see the module docstring).

    :param width: channel multiplier (> 0).
    :param depth: bottleneck blocks per stage: an int for every stage or four ints
        (default ``(3, 4, 6, 3)``).
    :param image_size: input height and width in pixels (>= 32).
    :param num_classes: outputs of the final fully connected layer.
    """

    name = "resnet50"

    def __init__(
        self,
        width: float = 1.0,
        depth: int | Sequence[int] | None = None,
        image_size: int = 224,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        blocks = _stage_depths(depth)
        base = _channels(64, width)
        self.image_size = _check_int("image_size", image_size, low=32)
        num_classes = _check_int("num_classes", num_classes, low=1)
        names: list[str] = ["stem"]
        nodes: list[nn.Module] = [_ResNetStem(base)]
        in_ch = base
        for stage, n in enumerate(blocks):
            mid = base * 2**stage
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                nodes.append(Bottleneck(in_ch, mid, stride))
                names.append(f"layer{stage + 1}.{i}")
                in_ch = mid * Bottleneck.expansion
        nodes.append(_ClassifierHead(in_ch, num_classes))
        names.append("head")
        self.nodes = nn.ModuleList(nodes)
        self.node_names = tuple(names)
        self.config = {
            "width": float(width),
            "depth": list(blocks),
            "image_size": self.image_size,
            "num_classes": num_classes,
        }
        _init_cnn(self)


def _stage_depths(depth: int | Sequence[int] | None) -> tuple[int, ...]:
    if depth is None:
        return (3, 4, 6, 3)
    if isinstance(depth, numbers.Integral) and not isinstance(depth, bool):
        d = _check_int("depth", depth, low=1)
        return (d, d, d, d)
    if (
        isinstance(depth, Sequence)
        and len(depth) == 4
        and all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1 for d in depth
        )
    ):
        return tuple(int(d) for d in depth)
    raise ValueError(
        f"depth={depth!r} is invalid for resnet50: expected None (3, 4, 6, 3), an integer >= 1 "
        "(blocks in every stage) or four integers >= 1 (blocks per stage)"
    )


# --------------------------------------------------------------------- GoogLeNet

# (name, c1x1, c3x3 reduce, c3x3, c5x5 reduce, c5x5, pool proj, max pool before it)
_INCEPTION = (
    ("inception3a", 64, 96, 128, 16, 32, 32, False),
    ("inception3b", 128, 128, 192, 32, 96, 64, False),
    ("inception4a", 192, 96, 208, 16, 48, 64, True),
    ("inception4b", 160, 112, 224, 24, 64, 64, False),
    ("inception4c", 128, 128, 256, 24, 64, 64, False),
    ("inception4d", 112, 144, 288, 32, 64, 64, False),
    ("inception4e", 256, 160, 320, 32, 128, 128, False),
    ("inception5a", 256, 160, 320, 32, 128, 128, True),
    ("inception5b", 384, 192, 384, 48, 128, 128, False),
)


class _ConvBN(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, k: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, k, stride=stride, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class Inception(nn.Module):
    """Inception-v1 module: 1x1, 1x1->3x3, 1x1->5x5 and maxpool->1x1 branches, concatenated."""

    def __init__(
        self,
        in_ch: int,
        c1: int,
        c3r: int,
        c3: int,
        c5r: int,
        c5: int,
        pp: int,
        pool_first: bool = False,
    ) -> None:
        super().__init__()
        self.pool_first = nn.MaxPool2d(3, 2, ceil_mode=True) if pool_first else nn.Identity()
        self.b1 = _ConvBN(in_ch, c1, 1)
        self.b2 = nn.Sequential(_ConvBN(in_ch, c3r, 1), _ConvBN(c3r, c3, 3))
        self.b3 = nn.Sequential(_ConvBN(in_ch, c5r, 1), _ConvBN(c5r, c5, 5))
        self.b4 = nn.Sequential(
            nn.MaxPool2d(3, 1, padding=1, ceil_mode=True), _ConvBN(in_ch, pp, 1)
        )
        self.out_channels = c1 + c3 + c5 + pp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool_first(x)
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], dim=1)


class GoogLeNet(_ImageModel):
    """Inception-v1 (GoogLeNet) as a node chain (see the module docstring).

    :param width: channel multiplier (> 0).
    :param depth: number of inception modules kept, 1..9 (default 9).
    :param image_size: input height and width in pixels (>= 32).
    :param num_classes: outputs of the final fully connected layer.
    """

    name = "googlenet"

    def __init__(
        self,
        width: float = 1.0,
        depth: int | None = None,
        image_size: int = 224,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        n = 9 if depth is None else _check_int("depth", depth, low=1, high=9)
        self.image_size = _check_int("image_size", image_size, low=32)
        num_classes = _check_int("num_classes", num_classes, low=1)
        c = lambda k: _channels(k, width)  # noqa: E731
        stem = nn.Sequential(
            _ConvBN(3, c(64), 7, stride=2),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            _ConvBN(c(64), c(64), 1),
            _ConvBN(c(64), c(192), 3),
            nn.MaxPool2d(3, 2, ceil_mode=True),
        )
        nodes: list[nn.Module]
        names, nodes, in_ch = ["stem"], [stem], c(192)
        for name, c1, c3r, c3, c5r, c5, pp, pool in _INCEPTION[:n]:
            m = Inception(in_ch, c(c1), c(c3r), c(c3), c(c5r), c(c5), c(pp), pool)
            names.append(name)
            nodes.append(m)
            in_ch = m.out_channels
        nodes.append(_ClassifierHead(in_ch, num_classes, dropout=0.2))
        names.append("head")
        self.nodes = nn.ModuleList(nodes)
        self.node_names = tuple(names)
        self.config = {
            "width": float(width),
            "depth": n,
            "image_size": self.image_size,
            "num_classes": num_classes,
        }
        _init_cnn(self)


# --------------------------------------------------------------------- BERT-base


class _BertEmbedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, max_positions: int) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = x
        t = ids.shape[1]
        # every token is segment 0: row 0 of the segment table is added to all positions
        h = self.word(ids) + (self.position.weight[:t] + self.token_type.weight[0])
        return self.ln(h), mask


class _BertLayer(nn.Module):
    """Post-LN transformer encoder layer (BERT): attention, add & norm, FFN, add & norm."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in = nn.Linear(hidden, 4 * hidden)
        self.ffn_out = nn.Linear(4 * hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        h, mask = x
        b, t, d = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        a = a.transpose(1, 2).reshape(b, t, d)
        h = self.ln1(h + self.attn_out(a))
        h = self.ln2(h + self.ffn_out(F.gelu(self.ffn_in(h))))
        return h, mask


class _BertHead(nn.Module):
    def __init__(self, hidden: int, num_labels: int) -> None:
        super().__init__()
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, num_labels)

    def forward(self, x: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        h, _ = x
        return self.classifier(torch.tanh(self.pooler(h[:, 0])))


class BertBase(NodeChainModel):
    """BERT-base encoder with a sequence-classification head (see the module docstring).

    The activation between nodes is ``(hidden, attention_mask)``; the input is
    ``(token_ids, attention_mask)``: ``int64`` ids of shape ``(b, seq_len)`` and a bool mask
    of the same shape (``True`` = a real token).

    :param width: per-head dimension multiplier (head dim = round(64 x width)).
    :param depth: encoder layers (default 12).
    :param seq_len: tokens per request of :meth:`make_input` (<= ``max_positions``).
    :param vocab_size: token vocabulary.
    :param heads: attention heads.
    :param num_labels: classifier outputs.
    :param max_positions: size of the position embedding table.
    """

    name = "bert-base"

    def __init__(
        self,
        width: float = 1.0,
        depth: int | None = None,
        seq_len: int = 128,
        vocab_size: int = 30522,
        heads: int = 12,
        num_labels: int = 2,
        max_positions: int = 512,
    ) -> None:
        super().__init__()
        layers = 12 if depth is None else _check_int("depth", depth, low=1)
        heads = _check_int("heads", heads, low=1)
        hidden = heads * _channels(64, width)
        max_positions = _check_int("max_positions", max_positions, low=1)
        self.seq_len = _check_int("seq_len", seq_len, low=1, high=max_positions)
        self.vocab_size = _check_int("vocab_size", vocab_size, low=1)
        num_labels = _check_int("num_labels", num_labels, low=1)
        nodes: list[nn.Module] = [_BertEmbedding(self.vocab_size, hidden, max_positions)]
        nodes += [_BertLayer(hidden, heads) for _ in range(layers)]
        nodes.append(_BertHead(hidden, num_labels))
        self.nodes = nn.ModuleList(nodes)
        self.node_names = ("embedding", *(f"encoder.{i}" for i in range(layers)), "head")
        self.config = {
            "width": float(width),
            "depth": layers,
            "hidden": hidden,
            "heads": heads,
            "ffn": 4 * hidden,
            "seq_len": self.seq_len,
            "vocab_size": self.vocab_size,
            "num_labels": num_labels,
            "max_positions": max_positions,
        }
        _init_transformer(self)

    def make_input(
        self, b: int, device: str | torch.device | None = None, *, seed: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random token ids and an all-true mask, each of shape ``(b, seq_len)``.

        :param b: batch size >= 1.
        :param device: where to put them (default: the model's device).
        :param seed: seed of the token ids.
        """
        b = _check_b(b)
        dev = device or self.device
        ids = torch.randint(0, self.vocab_size, (b, self.seq_len), generator=_generator(seed))
        mask = torch.ones((b, self.seq_len), dtype=torch.bool)
        return ids.to(dev), mask.to(dev)


# --------------------------------------------------------------------- GPT (small)


@dataclass
class KVCache:
    """Per-layer key / value cache of a batch of running sequences.

    ``k[l]`` and ``v[l]`` have shape ``(batch, heads, capacity, head_dim)``; sequence ``i``
    holds ``lengths[i]`` valid positions (the rest is padding, masked out). ``positions``
    is ``lengths`` as a tensor on the model's device (where the next token is written).

    Iteration-level batching: :meth:`cat` joins caches (new requests after their prefill
    join the running batch), :meth:`select` keeps a subset (finished requests leave),
    :meth:`resize` sets the capacity. Sequences of different context lengths share one
    batch by padding: :meth:`GPTSmall.decode_step` attends, for sequence ``i``, to positions
    ``0..lengths[i]`` only (a boolean attention mask), so the padding never changes a
    result, while the attention's work is ``batch x capacity`` positions.
    """

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    lengths: list[int]
    positions: torch.Tensor

    @property
    def batch_size(self) -> int:
        """Number of sequences."""
        return len(self.lengths)

    @property
    def capacity(self) -> int:
        """Positions allocated per sequence."""
        return int(self.k[0].shape[2])

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))

    def _grow(self, capacity: int) -> None:
        extra = capacity - self.capacity
        if extra <= 0:
            return
        for cache in (self.k, self.v):
            for i, t in enumerate(cache):
                pad = t.new_zeros((t.shape[0], t.shape[1], extra, t.shape[3]))
                cache[i] = torch.cat([t, pad], dim=2)

    def resize(self, capacity: int) -> None:
        """Reallocate every sequence's positions to ``capacity``, in place.

        Growing pads with zeros (masked out); shrinking drops padding only. A caller that
        resizes before :meth:`GPTSmall.decode_step` keeps the copy out of the step (the step
        itself grows a full cache by doubling).

        :param capacity: positions per sequence, at least the longest sequence's length
            (and >= 1).
        :raises ValueError: if ``capacity`` would cut a sequence.
        """
        longest = max(self.lengths, default=0)
        if not isinstance(capacity, numbers.Integral) or capacity < max(longest, 1):
            raise ValueError(
                f"KVCache.resize: capacity={capacity!r} is invalid: expected an integer >= "
                f"{max(longest, 1)} (the longest sequence holds {longest} positions)"
            )
        capacity = int(capacity)
        if capacity > self.capacity:
            self._grow(capacity)
        elif capacity < self.capacity:
            for cache in (self.k, self.v):
                for i, t in enumerate(cache):
                    cache[i] = t[:, :, :capacity].contiguous()

    @staticmethod
    def cat(caches: Sequence[KVCache]) -> KVCache:
        """Join caches along the batch (padding each to the largest capacity).

        :param caches: caches of the same model, in order.
        :returns: a new cache holding every sequence in order.
        """
        if not caches:
            raise ValueError("KVCache.cat: caches is empty; pass at least one cache")
        cap = max(c.capacity for c in caches)
        padded = []
        for c in caches:
            c2 = KVCache(list(c.k), list(c.v), list(c.lengths), c.positions)
            c2._grow(cap)
            padded.append(c2)
        n_layers = len(caches[0].k)
        return KVCache(
            k=[torch.cat([c.k[i] for c in padded], dim=0) for i in range(n_layers)],
            v=[torch.cat([c.v[i] for c in padded], dim=0) for i in range(n_layers)],
            lengths=[n for c in padded for n in c.lengths],
            positions=torch.cat([c.positions for c in padded]),
        )

    @staticmethod
    def empty(like: KVCache, n: int) -> KVCache:
        """``n`` sequences holding no position yet, shaped as ``like`` (its capacity, on
        its device): rows for prompts whose first chunk :meth:`GPTSmall.extend` writes."""
        k = [t.new_zeros((n, *t.shape[1:])) for t in like.k]
        v = [t.new_zeros((n, *t.shape[1:])) for t in like.v]
        return KVCache(k, v, [0] * n, like.positions.new_zeros(n))

    def select(self, indices: Sequence[int]) -> KVCache:
        """The sub-batch of the given sequences.

        :param indices: positions in this batch, in the order wanted.
        :returns: a new cache (same capacity).
        """
        idx = [int(i) for i in indices]
        bad = [i for i in idx if not 0 <= i < self.batch_size]
        if bad:
            raise ValueError(
                f"KVCache.select: indices {bad} out of range: allowed 0..{self.batch_size - 1}"
            )
        ti = torch.tensor(idx, dtype=torch.long, device=self.positions.device)
        return KVCache(
            k=[t.index_select(0, ti) for t in self.k],
            v=[t.index_select(0, ti) for t in self.v],
            lengths=[self.lengths[i] for i in idx],
            positions=self.positions.index_select(0, ti),
        )


class _GPTEmbedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, n_positions: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(n_positions, hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.wte(ids) + self.wpe.weight[: ids.shape[1]]


class _GPTBlock(nn.Module):
    """Pre-LN decoder block (GPT-2): x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.proj = nn.Linear(4 * hidden, hidden)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _finish(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        x = x + self.attn_out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        return self._finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))


class _GPTHead(nn.Module):
    """Final layer norm and the LM head (tied to the token embedding) at the last position."""

    def __init__(self, embedding: _GPTEmbedding, hidden: int) -> None:
        super().__init__()
        self.ln_f = nn.LayerNorm(hidden)
        # a plain attribute list, so the tied weight is registered (and saved) only once
        self._tied = [embedding]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln_f(x), self._tied[0].wte.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(x[:, -1])


class GPTSmall(NodeChainModel):
    """GPT-2-small-style decoder (see the module docstring) with a KV cache.

    Node chain: token ids ``(b, seq_len)`` -> hidden ``(b, seq_len, hidden)`` -> ... ->
    next-token logits ``(b, vocab_size)`` (a prefill of equal-length prompts, no cache).

    :param width: per-head dimension multiplier (head dim = round(64 x width)).
    :param depth: decoder blocks (default 12).
    :param seq_len: prompt length of :meth:`make_input` (<= ``n_positions``; ``None``:
        128, or ``n_positions`` if smaller).
    :param vocab_size: token vocabulary.
    :param heads: attention heads.
    :param n_positions: context length (size of the position table).
    """

    name = "gpt-small"
    # [embedding, *blocks, head]: a ModuleList types its items as Module, so the properties
    # _embedding, _blocks and _head below give the typed views
    nodes: Any

    def __init__(
        self,
        width: float = 1.0,
        depth: int | None = None,
        seq_len: int | None = None,
        vocab_size: int = 50257,
        heads: int = 12,
        n_positions: int = 1024,
    ) -> None:
        super().__init__()
        layers = 12 if depth is None else _check_int("depth", depth, low=1)
        heads = _check_int("heads", heads, low=1)
        hidden = heads * _channels(64, width)
        self.n_positions = _check_int("n_positions", n_positions, low=1)
        if seq_len is None:
            seq_len = min(128, self.n_positions)
        self.seq_len = _check_int("seq_len", seq_len, low=1, high=self.n_positions)
        self.vocab_size = _check_int("vocab_size", vocab_size, low=1)
        emb = _GPTEmbedding(self.vocab_size, hidden, self.n_positions)
        blocks = [_GPTBlock(hidden, heads) for _ in range(layers)]
        self.nodes = nn.ModuleList([emb, *blocks, _GPTHead(emb, hidden)])
        self.node_names = ("embedding", *(f"block.{i}" for i in range(layers)), "head")
        self.config = {
            "width": float(width),
            "depth": layers,
            "hidden": hidden,
            "heads": heads,
            "seq_len": self.seq_len,
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
        }
        _init_transformer(self)

    @property
    def _embedding(self) -> _GPTEmbedding:
        return self.nodes[0]

    @property
    def _blocks(self) -> list[_GPTBlock]:
        return list(self.nodes[1:-1])

    @property
    def _head(self) -> _GPTHead:
        return self.nodes[-1]

    def make_input(
        self, b: int, device: str | torch.device | None = None, *, seed: int = 0
    ) -> torch.Tensor:
        """Random prompt token ids, shape ``(b, seq_len)``, int64.

        :param b: batch size >= 1.
        :param device: where to put them (default: the model's device).
        :param seed: seed of the token ids.
        """
        b = _check_b(b)
        ids = torch.randint(0, self.vocab_size, (b, self.seq_len), generator=_generator(seed))
        return ids.to(device or self.device)

    def prefill(
        self,
        tokens: torch.Tensor,
        lengths: Sequence[int] | None = None,
        capacity: int | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """Run the prompts and build their KV cache.

        :param tokens: int64 ids ``(b, T)``, right-padded where prompts are shorter.
        :param lengths: each prompt's true length, 1..T (default: all T).
        :param capacity: positions to allocate per sequence (default T; grown as needed
            by :meth:`decode_step`).
        :returns: ``(logits, cache)``: the next-token logits of each prompt's last real
            token, ``(b, vocab_size)``, and the cache.
        """
        if tokens.dim() != 2 or tokens.shape[1] < 1:
            raise ValueError(
                f"prefill: tokens must have shape (b, T) with T >= 1, got {tuple(tokens.shape)}"
            )
        b, t = tokens.shape
        if t > self.n_positions:
            raise ValueError(f"prefill: prompt length {t} exceeds n_positions={self.n_positions}")
        lens = [t] * b if lengths is None else [int(n) for n in lengths]
        if len(lens) != b or any(not 1 <= n <= t for n in lens):
            raise ValueError(
                f"prefill: lengths={list(lens)!r} is invalid: expected {b} integers in 1..{t}"
            )
        cap = max(t, int(capacity or t))
        dev = tokens.device
        mask = None
        if any(n != t for n in lens):
            pos = torch.arange(t, device=dev)
            valid = pos[None, :] < torch.tensor(lens, device=dev)[:, None]  # (b, T) keys
            mask = (pos[None, :] <= pos[:, None])[None, None] & valid[:, None, None, :]
        x = self._embedding(tokens)
        ks, vs = [], []
        for blk in self._blocks:
            q, k, v = blk._qkv(x)
            if mask is None:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = blk._finish(x, a)
            kc = k.new_zeros((b, k.shape[1], cap, k.shape[3]))
            vc = torch.zeros_like(kc)
            kc[:, :, :t] = k
            vc[:, :, :t] = v
            ks.append(kc)
            vs.append(vc)
        last = torch.tensor([n - 1 for n in lens], device=dev)
        logits = self._head.logits(x[torch.arange(b, device=dev), last])
        positions = torch.tensor(lens, dtype=torch.long, device=dev)
        return logits, KVCache(ks, vs, lens, positions)

    def decode_step(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One decode iteration of every sequence in ``cache``: append one token each.

        The cache is updated in place (keys and values written at each sequence's
        position, lengths + 1; the capacity doubles when full).

        :param tokens: int64 ids ``(b,)``, one new token per sequence.
        :param cache: the batch's cache (``cache.batch_size == b``).
        :returns: next-token logits ``(b, vocab_size)``.
        """
        b = cache.batch_size
        if tokens.shape != (b,):
            raise ValueError(
                f"decode_step: tokens must have shape ({b},), got {tuple(tokens.shape)}"
            )
        if max(cache.lengths) >= self.n_positions:
            raise ValueError(
                f"decode_step: a sequence reached the context length n_positions={self.n_positions}"
            )
        if max(cache.lengths) >= cache.capacity:
            cache._grow(min(self.n_positions, 2 * cache.capacity))
        pos = cache.positions
        x = (self._embedding.wte(tokens) + self._embedding.wpe(pos))[:, None, :]
        rows = torch.arange(b, device=pos.device)
        attend = torch.arange(cache.capacity, device=pos.device)[None, :] <= pos[:, None]
        attend = attend[:, None, None, :]
        for i, blk in enumerate(self._blocks):
            q, k, v = blk._qkv(x)
            cache.k[i][rows, :, pos] = k[:, :, 0]
            cache.v[i][rows, :, pos] = v[:, :, 0]
            a = F.scaled_dot_product_attention(q, cache.k[i], cache.v[i], attn_mask=attend)
            x = blk._finish(x, a)
        cache.lengths = [n + 1 for n in cache.lengths]
        cache.positions = pos + 1
        return self._head.logits(x[:, 0])

    def new_cache(self, n: int, capacity: int) -> KVCache:
        """A cache of ``n`` sequences holding no position yet, ``capacity`` positions each
        (on the model's device, in its dtype)."""
        heads = self.config["heads"]
        shape = (int(n), heads, int(capacity), self.config["hidden"] // heads)
        k = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self._blocks]
        v = [torch.zeros_like(t) for t in k]
        return KVCache(
            k, v, [0] * int(n), torch.zeros(int(n), dtype=torch.long, device=self.device)
        )

    def extend(
        self,
        cache: KVCache,
        rows: Sequence[int],
        ids: Sequence[torch.Tensor],
        n_decode: int = 0,
    ) -> torch.Tensor:
        """One mixed iteration (chunked prefill): append ``ids[i]`` (one token for a
        decode, a prompt chunk for a prefill) to the sequence in row ``rows[i]`` of
        ``cache``, every row's tokens attending causally to its cached positions and to
        one another. As vLLM packs a mixed batch, the tokens of every row are one flat
        batch for the embeddings and every linear layer; attention runs per row (the
        decode rows, a leading run of the cache, in one masked call; each chunk in one
        call). The cache is updated in place (its capacity must hold every row's new
        length: :meth:`KVCache.resize` first, outside a timed region).

        :param cache: the batch's cache.
        :param rows: distinct row indices: first the ``n_decode`` decodes, rows
            ``0..n_decode - 1`` with one token each, then the chunks.
        :param ids: int64 token ids, one 1-D tensor per row.
        :param n_decode: how many of the rows are decodes (the leading run).
        :returns: the next-token logits of each row's last new token ``(len(rows), vocab)``.
        :raises ValueError: for rows or lengths the cache cannot take.
        """
        counts = [int(t.numel()) for t in ids]
        if len(rows) != len(ids) or not rows or min(counts) < 1 or len(set(rows)) != len(rows):
            raise ValueError(
                f"extend: rows={list(rows)[:8]} and {len(ids)} id tensors: expected as many "
                "distinct rows as non-empty tensors"
            )
        b = int(n_decode)
        if list(rows[:b]) != list(range(b)) or any(c != 1 for c in counts[:b]):
            raise ValueError(
                f"extend: the {b} decodes must be rows 0..{b - 1} with one token each, got "
                f"rows {list(rows[:b])[:8]}"
            )
        lens = [cache.lengths[r] for r in rows]
        ends = [n + c for n, c in zip(lens, counts, strict=True)]
        if max(ends) > min(cache.capacity, self.n_positions):
            raise ValueError(
                f"extend: a sequence would hold {max(ends)} positions, above the cache's "
                f"capacity {cache.capacity} (or n_positions={self.n_positions}); resize first"
            )
        dev = cache.positions.device
        flat = torch.cat([t.reshape(-1) for t in ids]).to(dev)
        pos = torch.cat(
            [torch.arange(n, n + c, device=dev) for n, c in zip(lens, counts, strict=True)]
        )
        row_of = torch.cat(
            [torch.full((c,), r, device=dev) for r, c in zip(rows, counts, strict=True)]
        )
        x = (self._embedding.wte(flat) + self._embedding.wpe(pos))[None]  # (1, N, d)
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        cap = cache.capacity
        keys = torch.arange(cap, device=dev)
        dec_mask = (keys[None, :] <= pos[:b, None])[:, None, None, :] if b else None
        for li, blk in enumerate(self._blocks):
            q, k, v = blk._qkv(x)  # (1, heads, N, head_dim)
            cache.k[li][row_of, :, pos] = k[0].transpose(0, 1)
            cache.v[li][row_of, :, pos] = v[0].transpose(0, 1)
            parts = []
            if b:
                qd = q[0, :, :b].transpose(0, 1)[:, :, None]  # (b, heads, 1, head_dim)
                kd, vd = cache.k[li][:b], cache.v[li][:b]
                ad = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=dec_mask)
                parts.append(ad[:, :, 0].transpose(0, 1)[None])  # (1, heads, b, head_dim)
            for i in range(b, len(rows)):
                r, n, c, s0 = rows[i], lens[i], counts[i], starts[i]
                qc = q[:, :, s0 : s0 + c]
                kc = cache.k[li][r : r + 1, :, : n + c]
                vc = cache.v[li][r : r + 1, :, : n + c]
                m = (
                    torch.arange(n + c, device=dev)[None, :]
                    <= torch.arange(n, n + c, device=dev)[:, None]
                )
                parts.append(F.scaled_dot_product_attention(qc, kc, vc, attn_mask=m[None, None]))
            x = blk._finish(x, torch.cat(parts, dim=2))
        for r, e in zip(rows, ends, strict=True):
            cache.lengths[r] = e
        cache.positions = torch.tensor(cache.lengths, dtype=torch.long, device=dev)
        last = torch.tensor([s - 1 for s in starts[1:]], device=dev)
        return self._head.logits(x[0, last])


# --------------------------------------------------------------------- factory


_BUILDERS: dict[str, Callable[..., NodeChainModel]] = {
    "resnet50": ResNet50,
    "googlenet": GoogLeNet,
    "bert-base": BertBase,
    "gpt-small": GPTSmall,
}
_EXTRA_KWARGS = {
    "resnet50": ("image_size", "num_classes"),
    "googlenet": ("image_size", "num_classes"),
    "bert-base": ("seq_len", "vocab_size", "heads", "num_labels", "max_positions"),
    "gpt-small": ("seq_len", "vocab_size", "heads", "n_positions"),
}

#: Names :func:`build_model` accepts.
MODELS: tuple[str, ...] = tuple(_BUILDERS)


def _check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    return check_number(name, value, low=low, high=high, integer=True)


def _load_weights(model: nn.Module, weights: str | os.PathLike[str]) -> None:
    path = os.fspath(weights)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"weights file {path!r} does not exist (expected a state_dict saved with "
            "torch.save(model.state_dict(), path) from a model built with the same arguments)"
        )
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for a bad file
        raise ValueError(
            f"weights file {path!r} could not be read as a state_dict saved with torch.save: "
            f"{type(e).__name__}: {e}"
        ) from e
    if not isinstance(sd, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in sd.items()
    ):
        raise ValueError(
            f"weights file {path!r} holds a {type(sd).__name__}, not a state_dict (a mapping of "
            "parameter names to tensors, as model.state_dict() returns)"
        )
    own = model.state_dict()
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    shapes = [
        f"{k}: file {tuple(sd[k].shape)} vs model {tuple(own[k].shape)}"
        for k in own
        if k in sd and sd[k].shape != own[k].shape
    ]
    if missing or unexpected or shapes:
        parts = []
        for label, items in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("shape mismatches", shapes),
        ):
            if items:
                more = f" (+{len(items) - 5} more)" if len(items) > 5 else ""
                parts.append(f"{label} {items[:5]}{more}")
        raise ValueError(
            f"weights file {path!r} does not match the {getattr(model, 'name', 'model')} built "
            f"with these arguments ({getattr(model, 'config', {})}): " + "; ".join(parts)
        )
    model.load_state_dict(sd, strict=True)


def build_model(
    name: str,
    *,
    width: float = 1.0,
    depth: int | Sequence[int] | None = None,
    seed: int = 0,
    weights: str | os.PathLike[str] | None = None,
    dtype: str | torch.dtype = "float32",
    **kw: Any,
) -> NodeChainModel:
    """Build one of :data:`MODELS` on the CPU, in eval mode, gradients off.

    :param name: the model (``resnet50``, ``googlenet``, ``bert-base``, ``gpt-small``).
    :param width: size multiplier > 0 (channels, or the per-head dimension); 1.0 = real size.
    :param depth: blocks / layers (see the module docstring); ``None`` = real size.
    :param seed: seed of the random weights (the global torch RNG is left untouched).
    :param weights: optional path to a state_dict saved with ``torch.save`` from a model
        built with the same arguments.
    :param dtype: ``"float32"``, ``"float16"``, ``"bfloat16"`` or the torch dtype.
    :param kw: model-specific sizes (``image_size``, ``num_classes``; ``seq_len``,
        ``vocab_size``, ``heads``, ...; see the module docstring).
    :returns: the model; move it with ``.to(device)``.
    :raises ValueError: for an unknown name, a bad size, an unknown keyword or a weights
        file that is not a matching state_dict.
    :raises FileNotFoundError: if ``weights`` does not exist.
    """
    if name not in _BUILDERS:
        raise ValueError(f"model {name!r} is unknown: available models are {list(MODELS)}")
    if not (
        isinstance(width, numbers.Real)
        and not isinstance(width, bool)
        and math.isfinite(width)
        and width > 0
    ):
        raise ValueError(f"width={width!r} is invalid: expected a finite number > 0")
    seed = _check_int("seed", seed, low=0)
    unknown = [k for k in kw if k not in _EXTRA_KWARGS[name]]
    if unknown:
        raise ValueError(
            f"model {name!r} does not take {unknown}: its size arguments are width, depth and "
            f"{list(_EXTRA_KWARGS[name])}"
        )
    if isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype={dtype!r} is invalid: expected one of {list(_DTYPES)}")
        dtype = _DTYPES[dtype]
    elif dtype not in _DTYPES.values():
        raise ValueError(f"dtype={dtype!r} is invalid: expected one of {list(_DTYPES)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _BUILDERS[name](width=width, depth=depth, **kw)
    if weights is not None:
        _load_weights(model, weights)
    model.config["seed"] = seed
    model.config["dtype"] = str(dtype).removeprefix("torch.")
    model.config["weights"] = None if weights is None else os.fspath(weights)
    model.to(dtype=dtype)
    model.eval()
    model.requires_grad_(False)
    return model
