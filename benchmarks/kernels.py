"""The kernels of the benchmark suite and their references.

Each entry names a built-in template and its arguments (the shapes the
shipped tuning records cover), how to make inputs, how big the work is
(flop for compute-bound kernels, bytes moved for memory-bound ones) and the
references: numpy where numpy has the operation, PyTorch eager and
``torch.compile`` where torch is installed. Every reference writes into a
preallocated output where its API allows (``out=``), as pypto does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Kernel:
    label: str
    template: str
    args: tuple
    shapes: tuple  # input shapes then the output shape, in the template's order
    work: float  # flop, or bytes moved when unit == "GB/s"
    unit: str = "GFLOP/s"
    numpy: object = None  # (inputs..., out) -> None
    torch: object = None  # torch module -> ((inputs..., out) -> None), eager
    compiled: object = None  # torch module -> a function that torch.compile compiles
    rtol: float = 1e-4


def _mm_np(a, b, c):
    np.matmul(a, b, out=c)


def _mm_torch(torch):
    return lambda a, b, c: torch.matmul(a, b, out=c)


def matmul(m, n, k) -> Kernel:
    return Kernel(
        f"matmul {m}x{n}x{k}" if len({m, n, k}) > 1 else f"matmul {m}^3",
        "matmul",
        (m, n, k),
        ((m, k), (k, n), (m, n)),
        2.0 * m * n * k,
        numpy=_mm_np,
        torch=_mm_torch,
    )


def conv2d(c, hw, k, stride) -> Kernel:
    o = (hw + 2 - 3) // stride + 1

    def torch_fn(torch):
        import torch.nn.functional as F

        def run(x, w, out):
            out.copy_(F.conv2d(x, w, stride=stride, padding=1))

        return run

    return Kernel(
        f"conv2d {c}->{k} {hw}x{hw} s{stride}",
        "conv2d_nchw",
        (1, c, hw, hw, k, 3, 3, stride, 1),
        ((1, c, hw, hw), (k, c, 3, 3), (1, k, o, o)),
        2.0 * k * c * 9 * o * o,
        torch=torch_fn,
        rtol=1e-3,
    )


def _softmax_np(x, y):
    np.subtract(x, x.max(axis=1, keepdims=True), out=y)
    np.exp(y, out=y)
    y /= y.sum(axis=1, keepdims=True)


def _softmax_torch(torch):
    return lambda x, y: torch._softmax(x, -1, False, out=y)


def _softmax_compiled(torch):
    return lambda x, y: y.copy_(torch.softmax(x, -1))


def _layernorm_np(x, g, b, y):
    mean = x.mean(axis=1, keepdims=True)
    np.subtract(x, mean, out=y)
    var = np.einsum("ij,ij->i", y, y)[:, None] / x.shape[1]
    y *= 1.0 / np.sqrt(var + 1e-5)
    y *= g
    y += b


def _layernorm_torch(torch):
    stats = {}  # the mean and rstd outputs, preallocated too

    def run(x, g, b, y):
        if "m" not in stats:
            stats["m"], stats["r"] = x.new_empty(x.shape[0], 1), x.new_empty(x.shape[0], 1)
        torch.ops.aten.native_layer_norm.out(
            x, [x.shape[1]], g, b, 1e-5, out0=y, out1=stats["m"], out2=stats["r"]
        )

    return run


def _layernorm_compiled(torch):
    import torch.nn.functional as F

    return lambda x, g, b, y: y.copy_(F.layer_norm(x, [x.shape[1]], g, b, 1e-5))


def _dense_torch(torch):
    import torch.nn.functional as F

    return lambda x, w, b, y: y.copy_(F.gelu(F.linear(x, w, b)))


def _dense_np(x, w, b, y):
    from scipy.special import erf

    np.matmul(x, w.T, out=y)
    y += b
    y *= 0.5 * (1.0 + erf(y * np.float32(1.0 / math.sqrt(2.0))))


def memory_bound(label, template, shapes, numpy, torch, compiled) -> Kernel:
    rows, cols = shapes[0]
    return Kernel(
        label,
        template,
        (rows, cols),
        shapes,
        2.0 * 4 * rows * cols,  # the input read once and the output written once
        unit="GB/s",
        numpy=numpy,
        torch=torch,
        compiled=compiled,
    )


def all_kernels() -> list[Kernel]:
    n = 4096
    return [
        matmul(512, 512, 512),
        matmul(1024, 1024, 1024),
        matmul(2048, 2048, 2048),
        matmul(128, 3072, 768),
        conv2d(64, 56, 64, 1),
        conv2d(64, 56, 128, 2),
        memory_bound(
            f"softmax {n}x{n}",
            "softmax",
            ((n, n), (n, n)),
            _softmax_np,
            _softmax_torch,
            _softmax_compiled,
        ),
        memory_bound(
            f"layernorm {n}x{n}",
            "layernorm",
            ((n, n), (n,), (n,), (n, n)),
            _layernorm_np,
            _layernorm_torch,
            _layernorm_compiled,
        ),
        Kernel(
            "dense+bias+gelu 128x3072x768",
            "dense_bias_gelu",
            (128, 3072, 768),
            ((128, 768), (3072, 768), (3072,), (128, 3072)),
            2.0 * 128 * 3072 * 768,
            numpy=_dense_np,
            torch=_dense_torch,
            compiled=_dense_torch,
            rtol=1e-3,
        ),
    ]
