"""A fully connected layer with bias and GELU: ``out = gelu(X @ W^T + bias)``.

``X`` is (M, K), ``W`` is (N, K) (the usual weight layout of a dense layer),
``bias`` is (N,); ``gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))``.

The schedule is the GEMM micro-kernel of ``matmul`` (``schedule_gemm``) with
the epilogue fused: the reduction is ``cache_write``-n into an ``mr x nr``
register tile and the bias + GELU run in the copy-out stage, so no
intermediate M x N buffer exists. Since W is (N, K), the vectorized column
loop would read it with stride K: with ``pack_b`` on, W is packed per
``nr``-column panel into a contiguous ``K x nr`` block (``WP[jo, k, ji] =
W[jo * nr + ji, k]``, computed at the panel loop), the transposition that
TVM's x86 dense schedule does with its packed weight layout.
"""

from __future__ import annotations

import math

import numpy as np

import pypto as pt

from ..task import template
from .matmul import _ceil_div, define_gemm_knobs, schedule_gemm

F32 = "float32"


def _c(v):
    return pt.const(v, F32)


def gelu(x, impl: str = "libm"):
    erf = pt.erf if impl == "libm" else pt.fast_erf
    return _c(0.5) * x * (_c(1.0) + erf(x * _c(1.0 / math.sqrt(2.0))))


_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def _dense_bias_gelu_ref(x, w, bias):
    y = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    return (0.5 * y * (1.0 + _erf64(y / math.sqrt(2.0)))).astype(np.float32)


@template("dense_bias_gelu", reference=_dense_bias_gelu_ref)
def dense_bias_gelu(cfg, M, N, K):
    """out[i, j] = gelu(sum_k X[i, k] * W[j, k] + bias[j]), float32."""
    V = cfg.target.vector_lanes(F32)
    # W is (N, K): unpacked, the vectorized column loop would gather with stride K
    # (two orders of magnitude slower), so the weights are always packed
    define_gemm_knobs(cfg, M, N, V, pack_options=(1,), a_bytes=4 * M * K)
    # erf: libm's erff (a scalar call per output) or the vectorizable rational pt.fast_erf
    cfg.define_knob("erf_impl", ["libm", "rational"], default="rational")
    cfg.add_flop(2.0 * M * N * K)
    X = pt.placeholder((M, K), F32, name="X")
    W = pt.placeholder((N, K), F32, name="W")
    bias = pt.placeholder((N,), F32, name="bias")
    k = pt.reduce_axis((0, K), name="k")
    nr = cfg["tile_j"].size[-1]
    packed = []
    if cfg["pack_b"].val:
        # packed weights: panel jo holds columns jo*nr .. jo*nr+nr-1 as K x nr
        # (the ragged last panel repeats column N-1; those lanes are never stored)
        WP = pt.compute(
            (_ceil_div(N, nr), K, nr),
            lambda jo, kk, ji: W[pt.min(jo * nr + ji, N - 1), kk],
            name="WP",
        )
        packed.append(WP)
        D = pt.compute(
            (M, N), lambda i, j: pt.sum(X[i, k] * WP[j // nr, k, j % nr], axis=k), name="D"
        )
    else:
        D = pt.compute((M, N), lambda i, j: pt.sum(X[i, k] * W[j, k], axis=k), name="D")
    impl = cfg["erf_impl"].val
    out = pt.compute((M, N), lambda i, j: gelu(D[i, j] + bias[j], impl), name="out")
    s = pt.create_schedule(out.op)
    # the accumulator tile: D computed into a local buffer, copied out through the
    # bias + gelu epilogue (the copy stage D is inlined into it)
    DL = s.cache_write(D, "local")
    s[D].compute_inline()
    schedule_gemm(cfg, s, out, DL, M, pack=(lambda: packed[0]) if packed else None)
    return s, [X, W, bias, out]
