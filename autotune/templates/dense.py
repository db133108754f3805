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
from .matmul import _ceil_div, define_gemm_knobs, schedule_gemm, vector_lanes

F32 = "float32"
_ERF_NUM = (
    -1.60960333262415e-02,
    -2.95459980854025e-03,
    -7.34990630326855e-04,
    -5.69250639462346e-05,
    -2.10102402082508e-06,
    2.77068142495902e-08,
    -2.72614225801306e-10,
)  # odd powers x^1 .. x^13
_ERF_DEN = (
    -1.42647390514189e-02,
    -7.37332916720468e-03,
    -1.68282697438203e-03,
    -2.13374055278905e-04,
    -1.45660718464996e-05,
)  # even powers x^0 .. x^8


def _c(v):
    return pt.const(v, F32)


def erf_rational(x):
    """``erf(x)`` as a rational function of ``x`` clamped to [-4, 4] (the float32
    form used by Eigen and XLA; absolute error below 5e-7). Unlike libm's ``erff``
    it is plain arithmetic, so gcc vectorizes it."""
    x = pt.min(pt.max(x, _c(-4.0)), _c(4.0))
    x2 = x * x
    p = _c(_ERF_NUM[-1])
    for a in reversed(_ERF_NUM[:-1]):
        p = p * x2 + _c(a)
    q = _c(_ERF_DEN[-1])
    for b in reversed(_ERF_DEN[:-1]):
        q = q * x2 + _c(b)
    return x * p / q


def gelu(x, impl: str = "libm"):
    erf = pt.erf if impl == "libm" else erf_rational
    return _c(0.5) * x * (_c(1.0) + erf(x * _c(1.0 / math.sqrt(2.0))))


_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def _dense_bias_gelu_ref(x, w, bias):
    y = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    return (0.5 * y * (1.0 + _erf64(y / math.sqrt(2.0)))).astype(np.float32)


@template("dense_bias_gelu", reference=_dense_bias_gelu_ref)
def dense_bias_gelu(cfg, M, N, K):
    """out[i, j] = gelu(sum_k X[i, k] * W[j, k] + bias[j]), float32."""
    V = vector_lanes(F32)
    # W is (N, K): unpacked, the vectorized column loop would gather with stride K
    # (two orders of magnitude slower), so the weights are always packed
    define_gemm_knobs(cfg, M, N, V, pack_options=(1,), a_bytes=4 * M * K)
    # erf: libm's erff (a scalar call per output) or a vectorizable rational form
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
