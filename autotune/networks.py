"""Built-in networks: a model's distinct workloads, each weighted by how often it runs.

    network_workloads("resnet18")        # 11 convolutions (2 by Winograd tiles) + the classifier
    network_workloads("bert-base-layer") # one encoder layer: GEMMs, attention, layernorms
    network_workloads("model.json")      # a workload file (``autotune.workloads``)

A network is data, one list per model: ``pypto-tune network NAME|FILE`` tunes it
with one task scheduler, the weights making each workload count by its share of
the model's end-to-end time (``sum weight x latency``). Workloads of a PyTorch
module come from ``autotune.fx_workloads.from_torch_module``.
"""

from __future__ import annotations

import os

from .workloads import Workload, WorkloadError, load_workloads, merge_duplicates


def _conv(c, hw, k, r, stride, pad, times, template="conv2d_nchw") -> Workload:
    return Workload(template, (1, c, hw, hw, k, r, r, stride, pad), weight=float(times))


def _winograd(c, hw, k, times) -> Workload:
    """A 3 x 3 stride-1 layer by Winograd tiles: 1.4-1.9x the direct convolution at
    56 x 56 and 28 x 28 (``conv2d_nchw_winograd``); smaller images stay direct."""
    return _conv(c, hw, k, 3, 1, 1, times, template="conv2d_nchw_winograd")


# ResNet-18, batch 1, 224x224 (torchvision's layout: BasicBlocks, 1x1 stride-2 downsamples)
RESNET18: tuple[Workload, ...] = (
    _conv(3, 224, 64, 7, 2, 3, 1),  # stem
    _winograd(64, 56, 64, 4),  # layer1: 2 blocks x 2 convs
    _conv(64, 56, 128, 3, 2, 1, 1),  # layer2: first conv of its first block
    _winograd(128, 28, 128, 3),
    _conv(64, 56, 128, 1, 2, 0, 1),  # layer2 downsample
    _conv(128, 28, 256, 3, 2, 1, 1),  # layer3
    _conv(256, 14, 256, 3, 1, 1, 3),
    _conv(128, 28, 256, 1, 2, 0, 1),
    _conv(256, 14, 512, 3, 2, 1, 1),  # layer4
    _conv(512, 7, 512, 3, 1, 1, 3),
    _conv(256, 14, 512, 1, 2, 0, 1),
    Workload("matmul", (1, 1000, 512)),  # fc: (1 x 512) @ (512 x 1000)
)

# One BERT-base encoder layer: sequence 128, hidden 768, 12 heads of 64, feed-forward 3072
BERT_BASE_LAYER: tuple[Workload, ...] = (
    Workload("matmul", (128, 768, 768), weight=4.0),  # Q, K, V and the output projection
    Workload("attention", (1, 12, 128, 64)),
    Workload("layernorm", (128, 768), weight=2.0),
    Workload("dense_bias_gelu", (128, 3072, 768)),  # feed-forward up, with its GELU
    Workload("matmul", (128, 768, 3072)),  # feed-forward down
)

# name -> the model's workloads (one home for the built-in networks)
NETWORKS: dict[str, tuple[Workload, ...]] = {
    "resnet18": RESNET18,
    "bert-base-layer": BERT_BASE_LAYER,
}


def network_workloads(name_or_file: str) -> list[Workload]:
    """The workloads of a built-in network (``NETWORKS``) or of a JSON workload file,
    duplicates merged (their weights summed).

    A name that is neither raises ``WorkloadError`` listing the built-in networks."""
    if name_or_file in NETWORKS:
        return list(NETWORKS[name_or_file])
    if not os.path.exists(name_or_file):
        raise WorkloadError(
            f"no network {name_or_file!r}: give a built-in one "
            f"({', '.join(NETWORKS)}) or a JSON workload file"
        )
    return merge_duplicates(load_workloads(name_or_file))
