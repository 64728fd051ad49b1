"""Write the per-node tables (``nodes``) into the shipped table profiles.

Run ``python scripts/node_tables.py`` from the repository root; it rewrites the ``nodes``
field of ``batch_env/profiles/{resnet50-*,bert-base-*}.json`` (table kind) and nothing
else. The rule, recorded in each profile's ``nodes.rule``:

    node_i(b) = o + w_i * (T(b) - n * o)

* ``T(b)``: the profile's end-to-end latency at listed batch size ``b``; the node latencies
  therefore sum to it exactly (up to rounding to 1e-6 ms), far inside the 1% tolerance.
* ``o``: a fixed per-node overhead (kernel launches, synchronisation between nodes),
  assumed to be ``OVERHEAD_FRACTION`` = 30% of the smallest listed batch's latency, split
  equally over the ``n`` nodes. Public figures for per-kernel launch cost (a few
  microseconds, about ten kernels per ResNet bottleneck) give 0.3-0.9 ms of a V100's
  2.1 ms at batch 1: 30% is the low end; nothing publishes it per node for these GPUs.
* ``w_i``: the node's share of the remaining (compute) time.
  - ResNet-50: the mean of (a) its share of the model's multiply-accumulates (MACs,
    computed below from the architecture at 224x224) and (b) the median over batch sizes
    1..16 of its share of the per-stage latencies measured on a 2-core CPU
    (``data/resnet50_cpu_stage_latency.json``, the project's own, PyTorch eager). The MAC share
    stands for the accelerator's compute-bound time at large batch; the measured share adds
    what FLOPs miss (memory-bound early layers, downsampling blocks).
  - BERT-base (sequence length 128): MAC shares only (no per-layer measurement is
    published); the 12 encoder layers are identical, embedding and head have almost no
    MACs, so their time is essentially the fixed overhead.
* Energy: every node of a batch runs at the batch's busy power (``power_w(b)`` of the
  end-to-end table), so node energies also sum to the end-to-end energy.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "batch_env" / "profiles"
CPU_STAGES = ROOT / "data" / "resnet50_cpu_stage_latency.json"
OVERHEAD_FRACTION = 0.3


def resnet50_macs() -> dict[str, float]:
    """Multiply-accumulates per node of ResNet-50 at 224x224 (convolutions and the fc)."""
    macs = {"stem": 7 * 7 * 3 * 64 * 112 * 112}
    c_in, hw = 64, 56
    for li, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True)):
        c_out = width * 4
        for bi in range(blocks):
            stride = 2 if (bi == 0 and li > 0) else 1
            hw_out = hw // stride
            m = c_in * width * hw * hw
            m += 9 * width * width * hw_out * hw_out  # 3x3
            m += width * c_out * hw_out * hw_out  # 1x1 expand
            if bi == 0:
                m += c_in * c_out * hw_out * hw_out  # downsample projection
            macs[f"layer{li + 1}.{bi}"] = m
            c_in, hw = c_out, hw_out
    macs["head"] = 2048 * 1000 + 2048 * 7 * 7  # fc + average pool (adds)
    return macs


def bert_base_macs(seq: int = 128, hidden: int = 768, ffn: int = 3072) -> dict[str, float]:
    """Multiply-accumulates per node of BERT-base at sequence length ``seq``."""
    layer = 4 * seq * hidden * hidden + 2 * seq * hidden * ffn + 2 * seq * seq * hidden
    macs = {"embedding": 3 * seq * hidden}  # sum of three embeddings (+ layer norm)
    macs.update({f"encoder.{i}": layer for i in range(12)})
    macs["head"] = hidden * hidden + hidden * 2  # pooler + 2-way span classifier
    return macs


def shares(values: dict[str, float]) -> dict[str, float]:
    total = sum(values.values())
    return {k: v / total for k, v in values.items()}


def resnet50_weights() -> dict[str, float]:
    mac = shares(resnet50_macs())
    data = json.loads(CPU_STAGES.read_text())
    per_b = [shares(v["per"]) for v in data.values()]
    measured = shares({k: statistics.median(s[k] for s in per_b) for k in mac})
    return shares({k: 0.5 * mac[k] + 0.5 * measured[k] for k in mac})


def split(profile: dict, weights: dict[str, float], rule: str) -> dict:
    lat = profile["latency_ms"]
    n = len(weights)
    o = OVERHEAD_FRACTION * lat[0] / n
    names = list(weights)
    rows = [[round(o + weights[k] * (t - n * o), 6) for t in lat] for k in names]
    nodes = {
        "names": names,
        "latency_ms": rows,
        "rule": rule.format(o=o),
        "tolerance": 0.01,
    }
    if "power_w" in profile:
        nodes["power_w"] = [list(profile["power_w"]) for _ in names]
    else:
        nodes["energy_j"] = [
            [round(e * r / t, 9) for e, r, t in zip(profile["energy_j"], row, lat, strict=True)]
            for row in rows
        ]
    return nodes


RESNET_RULE = (
    "node_i(b) = o + w_i * (T(b) - 18 o), T = the end-to-end latency_ms; o = {o:.6g} ms = 30% "
    "of the smallest batch's latency over 18 nodes (assumed fixed per-node launch overhead); "
    "w_i = mean of the node's share of ResNet-50's MACs at 224x224 and the median (batch 1..16) "
    "of its share of per-stage latency measured on a 2-core CPU (batch-env's own "
    "measurement, PyTorch eager); power per node = the batch's end-to-end power_w. "
    "Generated by scripts/node_tables.py."
)
BERT_RULE = (
    "node_i(b) = o + w_i * (T(b) - 14 o), T = the end-to-end latency_ms; o = {o:.6g} ms = 30% "
    "of the smallest batch's latency over 14 nodes (assumed fixed per-node launch overhead); "
    "w_i = the node's share of BERT-base's MACs at sequence length 128 (12 identical encoder "
    "layers; embedding and head almost none); power per node = the batch's end-to-end "
    "power_w. Generated by scripts/node_tables.py."
)


def main() -> int:
    rn = resnet50_weights()
    bert = shares(bert_base_macs())
    for path in sorted(PROFILES.glob("*.json")):
        d = json.loads(path.read_text())
        if d.get("kind", "table") != "table":
            continue
        if d["name"].startswith("resnet50"):
            d["nodes"] = split(d, rn, RESNET_RULE)
        elif d["name"].startswith("bert-base"):
            d["nodes"] = split(d, bert, BERT_RULE)
        else:
            continue
        path.write_text(json.dumps(d, indent=2) + "\n")
        print(f"wrote nodes ({len(d['nodes']['names'])}) into {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
