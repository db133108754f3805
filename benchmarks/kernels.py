"""The kernels of the benchmark suite and their references.

The workloads are the standard ones (``autotune.workloads``: the shapes the
shipped tuning records and ``pypto-tune all`` cover); this module adds, per
template, how big the work is (flop for compute-bound kernels, bytes moved
for memory-bound ones) and the references: numpy where numpy has the
operation, PyTorch eager and ``torch.compile`` where torch is installed.
Every reference writes into a preallocated output where its API allows
(``out=``), as pypto does. Input and output shapes come from the template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.workloads import Workload, standard_workloads
from benchmarks import mixed


@dataclass(frozen=True)
class Kernel:
    label: str
    template: str
    args: tuple
    work: float  # flop, or bytes moved when unit == "GB/s"
    unit: str = "GFLOP/s"
    numpy: object = None  # (inputs..., out) -> None
    torch: object = None  # torch module -> ((inputs..., out) -> None), eager
    compiled: object = None  # torch module -> a function that torch.compile compiles
    rtol: float = 1e-4
    dtype: str = "float32"  # the inputs' dtype
    target: str | None = None  # a named target (None: the host's, with its tuning records)


def _mm_np(a, b, c):
    np.matmul(a, b, out=c)


def _mm_torch(torch):
    return lambda a, b, c: torch.matmul(a, b, out=c)


def _matmul(w: Workload) -> Kernel:
    m, n, k = w.args[:3]
    return Kernel(w.label, w.template, w.args, 2.0 * m * n * k, numpy=_mm_np, torch=_mm_torch)


def _batch_matmul(w: Workload) -> Kernel:
    b, m, n, k = w.args[:4]
    return Kernel(w.label, w.template, w.args, 2.0 * b * m * n * k, numpy=_mm_np, torch=_mm_torch)


def _conv_torch(stride: int, pad: int, groups: int = 1):
    def torch_fn(torch):
        import torch.nn.functional as F

        def run(x, wt, out):
            out.copy_(F.conv2d(x, wt, stride=stride, padding=pad, groups=groups))

        return run

    return torch_fn


def _conv(groups_of):
    """conv2d_nchw (N, C, H, W, K, R, S, stride, pad) and depthwise (N, C, H, W, R, S, ...)."""

    def make(w: Workload) -> Kernel:
        a = w.args
        depthwise = w.template == "depthwise_conv2d_nchw"
        n, c, h, wd = a[:4]
        k, (r, s, stride, pad) = (c, a[4:8]) if depthwise else (a[4], a[5:9])
        oh, ow = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
        groups = groups_of(c)
        flop = 2.0 * n * k * (c // groups) * r * s * oh * ow
        torch_fn = _conv_torch(stride, pad, groups)
        return Kernel(w.label, w.template, a, flop, torch=torch_fn, rtol=1e-3)

    return make


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


def _rmsnorm_np(x, g, y):
    ms = np.einsum("ij,ij->i", x, x)[:, None] / x.shape[1]
    np.multiply(x, 1.0 / np.sqrt(ms + 1e-6), out=y)
    y *= g


def _rmsnorm_torch(torch):
    import torch.nn.functional as F

    return lambda x, g, y: y.copy_(F.rms_norm(x, [x.shape[1]], g, 1e-6))


def _dense_torch(torch):
    import torch.nn.functional as F

    return lambda x, w, b, y: y.copy_(F.gelu(F.linear(x, w, b)))


def _dense_np(x, w, b, y):
    from scipy.special import erf

    np.matmul(x, w.T, out=y)
    y += b
    y *= 0.5 * (1.0 + erf(y * np.float32(1.0 / math.sqrt(2.0))))


def _dense(w: Workload) -> Kernel:
    m, n, k = w.args[:3]
    return Kernel(w.label, w.template, w.args, 2.0 * m * n * k, numpy=_dense_np,
                  torch=_dense_torch, compiled=_dense_torch, rtol=1e-3)  # fmt: skip


def _memory_bound(numpy, torch, compiled):
    def make(w: Workload) -> Kernel:
        rows, cols = w.args[:2]
        return Kernel(w.label, w.template, w.args, 2.0 * 4 * rows * cols,  # read once, write once
                      unit="GB/s", numpy=numpy, torch=torch, compiled=compiled)  # fmt: skip

    return make


# template -> how its standard workloads are benchmarked
KERNELS = {
    "matmul": _matmul,
    "batch_matmul": _batch_matmul,
    "dense_bias_gelu": _dense,
    "conv2d_nchw": _conv(lambda c: 1),
    "conv2d_nchw_winograd": _conv(lambda c: 1),
    "depthwise_conv2d_nchw": _conv(lambda c: c),
    "softmax": _memory_bound(_softmax_np, _softmax_torch, _softmax_compiled),
    "layernorm": _memory_bound(_layernorm_np, _layernorm_torch, _layernorm_compiled),
    "rmsnorm": _memory_bound(_rmsnorm_np, _rmsnorm_torch, _rmsnorm_torch),
}


def _conv_flop(args: tuple) -> float:
    """2 x the multiply-adds of conv2d_nchw (N, C, H, W, K, R, S, stride, pad)."""
    n, c, h, w, k, r, s, stride, pad = args
    oh, ow = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
    return 2.0 * n * k * c * r * s * oh * ow


def _mixed() -> list[Kernel]:
    m, n, k = mixed.SHAPE
    return [
        Kernel(mixed.label(dt), "matmul", (m, n, k, dt), 2.0 * m * n * k,
               torch=mixed.TORCH[dt], rtol=1e-2, dtype=dt, target=mixed.dot_target(dt))
        for dt in mixed.DTYPES
    ] + [
        Kernel(mixed.CONV_LABEL, "conv2d_nchw", (*mixed.CONV_ARGS, "int8"),
               _conv_flop(mixed.CONV_ARGS), dtype="int8", target=mixed.dot_target("int8")),
        Kernel(mixed.CONV_BF16_LABEL, "conv2d_nchw", (*mixed.CONV_ARGS, "bfloat16"),
               _conv_flop(mixed.CONV_ARGS), torch=_conv_torch(*mixed.CONV_ARGS[7:9]),
               rtol=1e-2, dtype="bfloat16", target=mixed.dot_target("bfloat16")),
    ]  # fmt: skip


# a decoder's step: one row of activations through a 4096 x 4096 layer (the skinny
# form, ``autotune/templates/skinny.py``), and a matrix-vector product (the narrow
# form); each bound by reading the matrix once
DECODE = ((1, 4096, 4096),)
GEMV = ((4096, 1, 4096),)  # a matrix-vector product: matmul's narrow form


def _decode() -> list[Kernel]:
    """The one-row GEMMs and the one-column matmul, in GB/s of the operands read and
    the output written; the matmuls in float16 too (against PyTorch's float16)."""
    out = []
    shapes = [(s, ("matmul", "dense_bias_gelu")) for s in DECODE] + [(s, ("matmul",)) for s in GEMV]
    for (m, n, k), names in shapes:
        moved = 4.0 * (m * k + k * n + m * n)
        for w in (Workload(name, (m, n, k)) for name in names):
            dense = w.template == "dense_bias_gelu"
            out.append(Kernel(
                w.label, w.template, w.args, moved + 4.0 * n * dense, unit="GB/s",
                numpy=_dense_np if dense else _mm_np, torch=_dense_torch if dense else _mm_torch,
                rtol=1e-3 if dense else 1e-4,
            ))  # fmt: skip
    for m, n, k in (*DECODE, *GEMV):  # float16 weights: converted by rows (f16c), vs torch
        w = Workload("matmul", (m, n, k, "float16"), dtype="float16")
        moved = 2.0 * (m * k + k * n + m * n)
        out.append(Kernel(w.label, w.template, w.args, moved, unit="GB/s", torch=_mm_torch,
                          rtol=1e-2, dtype="float16"))  # fmt: skip
    return out


def all_kernels() -> list[Kernel]:
    """One kernel per standard workload of a template this suite knows how to measure,
    then the one-row GEMMs of a decoder's step, a matrix-vector product and the
    mixed-precision rows (``benchmarks/mixed.py``)."""
    std = [KERNELS[w.template](w) for w in standard_workloads() if w.template in KERNELS]
    return std + _decode() + _mixed()
