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

With at most 16 rows (a decoder's step) the space also holds the ``skinny`` form
(on by default, but where a dot kernel wins; ``skinny.py``): each output a vector
dot product of a row of X and a row of W, read in place; with at most 4 outputs a
row and more rows, the ``narrow`` form, the same dot products with rows in parallel.
"""

from __future__ import annotations

import math

import numpy as np

import pypto as pt

from ..task import template
from . import dot_knobs, dot_ukernels, precision, skinny
from .matmul import _ceil_div, define_dot_knobs, schedule_gemm

F32 = "float32"


def _c(v):
    return pt.const(v, F32)


def gelu(x, impl: str = "libm"):
    erf = pt.erf if impl == "libm" else pt.fast_erf
    return _c(0.5) * x * (_c(1.0) + erf(x * _c(1.0 / math.sqrt(2.0))))


_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def _dense_bias_gelu_ref(x, w, bias):
    y = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    return precision.reference(0.5 * y * (1.0 + _erf64(y / math.sqrt(2.0))), x.dtype)


def _dense_product(cfg, X, W, p, M: int, N: int, K: int):
    """``D[i, j] = sum_k X[i, k] * W[j, k]`` (products as ``p`` multiplies), W packed per
    column panel when ``pack_b`` is on; returns (D, [the packed weights] or [], the
    dot-product kernel's ``DotGemm`` or None)."""
    k = pt.reduce_axis((0, K), name="k")
    isa = dot_ukernels.usable(cfg.target, p.name, K, M, N)
    nr = cfg["tile_j"].size[-1]
    if dot_knobs.ukernel_on(cfg, isa, M, N):
        g = dot_ukernels.dot_gemm(
            isa, X, lambda kk, n: W[n, kk], (M, N, K), cfg["tile_i"].size[-1], nr,
            lambda a, b: precision.product(p, a, b), names=("D", "W"),
        )  # fmt: skip
        return g.C, [g.BP], g
    if not cfg["pack_b"].val:
        return (
            pt.compute(
                (M, N),
                lambda i, j: pt.sum(precision.product(p, X[i, k], W[j, k]), axis=k),
                name="D",
            ),
            [],
            None,
        )
    # packed weights: panel jo holds columns jo*nr .. jo*nr+nr-1 as K x nr
    # (the ragged last panel repeats column N-1; those lanes are never stored); a 16-bit
    # float widened once, there and in a float32 copy of X, so the tile is float32's
    wide = str(W.dtype) in precision.STORAGE_FLOATS

    def packed(jo, kk, ji):
        w = W[pt.min(jo * nr + ji, N - 1), kk]
        return pt.cast(F32, w) if wide else w

    WP = pt.compute((_ceil_div(N, nr), K, nr), packed, name="WP")
    Xw = precision.widen(X)
    D = pt.compute(
        (M, N),
        lambda i, j: pt.sum(precision.product(p, Xw[i, k], WP[j // nr, k, j % nr]), axis=k),
        name="D",
    )
    return D, [WP, *([Xw] if wide else [])], None


def _schedule_dense(cfg, out, D, M, packed, dot=None):
    """The accumulator tile: D computed into a local buffer, copied out through the
    epilogue ``out`` (the copy stage D is inlined into it); ``dot``: the dot-product
    kernel's ``DotGemm``, whose accumulator and intrinsic the tile then is.
    ``packed``: the packed weights, then a widened X (``_dense_product``)."""
    s = pt.create_schedule(out.op)
    for T in packed[1:]:  # a widened X: once, rows in parallel
        s[T].parallel(s[T].op.axis[0])
        s[T].vectorize(s[T].op.axis[-1])
    DL = dot.accumulator(s) if dot is not None else s.cache_write(D, "local")
    s[D].compute_inline()
    pack = (lambda: packed[0]) if packed else None
    tile = dot.intrin if dot is not None else None
    schedule_gemm(cfg, s, out, DL, M, pack=pack, tile_intrin=tile, pack_k_inner=True)
    return s


def _gemm_knobs(cfg, p, M, N, K):
    # W is (N, K): unpacked, the vectorized column loop would gather with stride K
    # (two orders of magnitude slower), so the weights are always packed
    V = cfg.target.vector_lanes(p.out)
    isa = dot_ukernels.usable(cfg.target, p.name, K, M, N)
    define_dot_knobs(
        cfg, isa, M, N, V, K, pack_options=(1,), a_bytes=precision.elem_bytes(p) * M * K
    )
    skinny.define_dot_knobs(cfg, M, K, p, isa)
    skinny.define_narrow_knobs(cfg, M, N, K, p)
    cfg.add_flop(2.0 * M * N * K)


def _build(cfg, p, X, W, M, N, K, epilogue):
    """The schedule of ``out[i, j] = epilogue(D[i, j], i, j)`` for ``D = X @ W.T`` (products
    as ``p`` multiplies): the skinny dot-product form when its knob is on, else the
    GEMM's tile; returns ``(schedule, out)``."""
    if skinny.on(cfg) or skinny.narrow_on(cfg):
        form = "skinny" if skinny.on(cfg) else "narrow"  # narrow: X read in place
        Ww = precision.widen(W) if form == "narrow" else W  # its few rows: once
        D, P, Xw, converted = skinny.dot_product(
            cfg, p, X, Ww, M, N, K, widen_x=form == "skinny", partials=skinny.lane_partials(p)
        )
        out = pt.compute((M, N), lambda i, j: epilogue(D[i, j], i, j), name="out")
        s = skinny.schedule_dot(cfg, out, D, P, Xw, form, converted)
        if Ww is not W:
            s[Ww].vectorize(s[Ww].op.axis[-1])
        return s, out
    D, packed, dot = _dense_product(cfg, X, W, p, M, N, K)
    out = pt.compute((M, N), lambda i, j: epilogue(D[i, j], i, j), name="out")
    return _schedule_dense(cfg, out, D, M, packed, dot), out


@template("dense_bias_gelu", reference=_dense_bias_gelu_ref)
def dense_bias_gelu(cfg, M, N, K, dtype="float32"):
    """out[i, j] = gelu(sum_k X[i, k] * W[j, k] + bias[j]); ``dtype`` float32, float16 or
    bfloat16 (X, W, bias and out; the sum and the epilogue in float32)."""
    p = precision.precision(dtype, "dense_bias_gelu")
    if p.widen is not None or p.name == "float64":
        raise ValueError(
            f"dense_bias_gelu: dtype must be float32, float16 or bfloat16, got {dtype!r}"
        )
    _gemm_knobs(cfg, p, M, N, K)
    # erf: libm's erff (a scalar call per output) or the vectorizable rational pt.fast_erf
    cfg.define_knob("erf_impl", ["libm", "rational"], default="rational")
    X = pt.placeholder((M, K), dtype, name="X")
    W = pt.placeholder((N, K), dtype, name="W")
    bias = pt.placeholder((N,), dtype, name="bias")
    # the sum stays float32 into the epilogue (16-bit floats: products of the widened
    # operands, exact, as the hardware's), rounded once, at the output
    wide = precision.Precision(p.name, F32, None if p.name == F32 else F32)
    impl = cfg["erf_impl"].val

    def epilogue(d, i, j):
        y = pt.cast(F32, d) + pt.cast(F32, bias[j])
        return pt.cast(dtype, gelu(y, impl))

    s, out = _build(cfg, wide, X, W, M, N, K, epilogue)
    return s, [X, W, bias, out]


def _dense_ref(x, w):
    return precision.reference(precision.widened(x) @ precision.widened(w).T, x.dtype)


@template("dense", reference=_dense_ref)
def dense(cfg, M, N, K, dtype="float32"):
    """out[i, j] = sum_k X[i, k] * W[j, k] (X is M x K, W is N x K: ``X @ W.T``);
    ``dtype`` as ``matmul``'s (int8: an int32 output)."""
    p = precision.precision(dtype, "dense")
    _gemm_knobs(cfg, p, M, N, K)
    X = pt.placeholder((M, K), dtype, name="X")
    W = pt.placeholder((N, K), dtype, name="W")
    s, out = _build(cfg, p, X, W, M, N, K, lambda d, i, j: precision.rounded(d, p.out))
    return s, [X, W, out]


def requantize_reference(acc, scale) -> np.ndarray:
    """int8 of ``acc`` (int32) times a per-column float32 ``scale``: the product in float32,
    clamped to [-128, 127], rounded to nearest with ties to even."""
    y = acc.astype(np.float32) * scale.astype(np.float32)[None, :]
    return np.rint(np.clip(y, np.float32(-128), np.float32(127))).astype(np.int8)


def _dense_requant_ref(x, w, scale):
    acc = (x.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
    return requantize_reference(acc, scale)


def requantize(acc, scale):
    """The epilogue of ``requantize_reference`` as an expression (clamped before rounding:
    the clamp keeps the compiler from fusing the scale into an addition)."""
    y = pt.cast(F32, acc) * scale
    return pt.cast("int8", pt.round(pt.min(pt.max(y, _c(-128.0)), _c(127.0))))


@template("dense_requant", reference=_dense_requant_ref)
def dense_requant(cfg, M, N, K, dtype="int8"):
    """out[i, j] = int8(round(clamp(float(sum_k X[i, k] * W[j, k]) * scale[j], -128, 127))):
    an int8 dense layer (int32 accumulation) with a requantizing epilogue, per output
    channel ``scale`` (float32, N), rounding to nearest even, saturating."""
    p = precision.precision(dtype, "dense_requant")
    if p.name != "int8":
        raise ValueError(f"dense_requant: dtype must be int8, got {dtype!r}")
    _gemm_knobs(cfg, p, M, N, K)
    X = pt.placeholder((M, K), dtype, name="X")
    W = pt.placeholder((N, K), dtype, name="W")
    scale = pt.placeholder((N,), F32, name="scale")
    s, out = _build(cfg, p, X, W, M, N, K, lambda d, i, j: requantize(d, scale[j]))
    return s, [X, W, scale, out]
