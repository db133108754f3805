"""Numerical tests: every built kernel is compared against numpy.

Each test defines a computation, schedules it, builds it for the host and
checks the output. Output buffers start filled with a sentinel (NaN for
floats) so that elements a kernel forgets to write are caught too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pypto as pt

F32 = dict(rtol=1e-5, atol=1e-5)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _out(shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.full(shape, np.nan, dtype=dt)
    return np.full(shape, 77, dtype=dt)


def _shape(t):
    return tuple(int(d.value) for d in t.shape)


def _run(s, args, inputs, out_shapes=None, name="kernel"):
    """Build ``s`` over ``args`` (inputs first, then outputs), call it, return the outputs."""
    mod = pt.build(s, args, target="host", name=name)
    outs_t = args[len(inputs) :]
    if out_shapes is None:
        out_shapes = [_shape(t) for t in outs_t]
    outs = [_out(shp, np.dtype(t.dtype)) for t, shp in zip(outs_t, out_shapes)]
    mod(*inputs, *outs)
    return outs if len(outs) > 1 else outs[0]


# ---------------------------------------------------------------- matmul


def _matmul(M, N, K, dtype="float32"):
    A = pt.placeholder((M, K), dtype, name="A")
    B = pt.placeholder((K, N), dtype, name="B")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M, N), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def _mm_inputs(M, N, K, seed=0):
    r = _rng(seed)
    a = r.uniform(-1, 1, (M, K)).astype("float32")
    b = r.uniform(-1, 1, (K, N)).astype("float32")
    return a, b


def _mm_ref(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def s_default(s, C, k):
    pass


def s_tile8(s, C, k):
    s[C].tile(C.op.axis[0], C.op.axis[1], x_factor=8, y_factor=8)


def s_tile_odd(s, C, k):
    s[C].tile(C.op.axis[0], C.op.axis[1], x_factor=5, y_factor=7)


def s_split_factor(s, C, k):
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=6)
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(io, jo, ii, ji)


def s_split_nparts(s, C, k):
    i, j = C.op.axis
    io, ii = s[C].split(i, nparts=3)
    jo, ji = s[C].split(j, nparts=5)
    s[C].reorder(jo, io, ii, ji)


def s_reduce_outermost(s, C, k):
    i, j = C.op.axis
    s[C].reorder(k, i, j)


def s_reduce_split_middle(s, C, k):
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(ko, xo, yo, xi, ki, yi)


def s_split_k_odd(s, C, k):
    ko, ki = s[C].split(k, factor=7)
    i, j = C.op.axis
    s[C].reorder(ko, i, ki, j)


def s_split_k_nparts(s, C, k):
    ko, ki = s[C].split(k, nparts=4)
    i, j = C.op.axis
    s[C].reorder(i, ko, j, ki)


def s_fuse_parallel(s, C, k):
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    f = s[C].fuse(xo, yo)
    s[C].parallel(f)


def s_fuse_all_split(s, C, k):
    i, j = C.op.axis
    f = s[C].fuse(i, j)
    fo, fi = s[C].split(f, factor=16)
    s[C].reorder(fo, k, fi)
    s[C].parallel(fo)
    s[C].vectorize(fi)


def s_par_vec_unroll(s, C, k):
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(xo, yo, ko, xi, ki, yi)
    f = s[C].fuse(xo, yo)
    s[C].parallel(f)
    s[C].unroll(ki)
    s[C].unroll(xi)
    s[C].vectorize(yi)


def s_double_split(s, C, k):
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=16)
    iio, iii = s[C].split(ii, factor=3)
    jo, ji = s[C].split(j, nparts=2)
    s[C].reorder(jo, io, iio, k, iii, ji)
    s[C].parallel(jo)
    s[C].vectorize(ji)


MM_SCHEDULES = [
    s_default,
    s_tile8,
    s_tile_odd,
    s_split_factor,
    s_split_nparts,
    s_reduce_outermost,
    s_reduce_split_middle,
    s_split_k_odd,
    s_split_k_nparts,
    s_fuse_parallel,
    s_fuse_all_split,
    s_par_vec_unroll,
    s_double_split,
]
MM_SIZES = [(64, 48, 40), (67, 45, 33), (3, 5, 1)]


@pytest.mark.parametrize("size", MM_SIZES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("sched", MM_SCHEDULES, ids=lambda f: f.__name__[2:])
def test_matmul_schedules(sched, size):
    M, N, K = size
    A, B, C, k = _matmul(M, N, K)
    s = pt.create_schedule(C.op)
    sched(s, C, k)
    a, b = _mm_inputs(M, N, K)
    c = _run(s, [A, B, C], [a, b], name="mm_" + sched.__name__)
    np.testing.assert_allclose(c, _mm_ref(a, b), **F32)


# ---------------------------------------------------------------- cache_write / cache_read


def cw_register_tile(s, A, B, C, CL):
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[CL].compute_at(s[C], yo)
    ci, cj = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kk, factor=4)
    s[CL].reorder(ko, ci, ki, cj)
    s[CL].unroll(ki)
    s[CL].vectorize(cj)


def cw_pack_b(s, A, B, C, CL):
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    s[CL].compute_at(s[C], yo)
    ci, cj = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    s[CL].reorder(kk, ci, cj)
    s[CL].vectorize(cj)
    BP = s.cache_read(B, "local", [CL])
    s[BP].compute_at(s[C], yo)


def cw_pack_both_parallel(s, A, B, C, CL):
    # B packed per column block (outer loop jo), A packed per row tile.
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=16)
    io, ii = s[C].split(i, factor=4)
    s[C].reorder(jo, io, ii, ji)
    s[C].parallel(jo)
    s[CL].compute_at(s[C], io)
    ci, cj = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kk, factor=8)
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)
    BP = s.cache_read(B, "local", [CL])
    s[BP].compute_at(s[C], jo)
    AP = s.cache_read(A, "local", [CL])
    s[AP].compute_at(s[CL], ko)


def cw_split_inside(s, A, B, C, CL):
    # CL attached at the outer row loop; its own axes split again (non-divisible).
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=12)
    s[CL].compute_at(s[C], io)
    ci, cj = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    cio, cii = s[CL].split(ci, factor=5)
    cjo, cji = s[CL].split(cj, factor=8)
    s[CL].reorder(cio, cjo, kk, cii, cji)
    s[CL].vectorize(cji)
    s[C].vectorize(j)


def cw_fused_outer(s, A, B, C, CL):
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    f = s[C].fuse(xo, yo)
    s[C].parallel(f)
    s[CL].compute_at(s[C], f)
    BP = s.cache_read(B, "local", [CL])
    s[BP].compute_at(s[CL], s[CL].op.reduce_axis[0])


CW_SCHEDULES = [cw_register_tile, cw_pack_b, cw_pack_both_parallel, cw_split_inside, cw_fused_outer]


@pytest.mark.parametrize("size", MM_SIZES[:2], ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("sched", CW_SCHEDULES, ids=lambda f: f.__name__[3:])
def test_matmul_cache(sched, size):
    M, N, K = size
    A, B, C, k = _matmul(M, N, K)
    s = pt.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    sched(s, A, B, C, CL)
    a, b = _mm_inputs(M, N, K, seed=1)
    c = _run(s, [A, B, C], [a, b], name="mmc_" + sched.__name__)
    np.testing.assert_allclose(c, _mm_ref(a, b), **F32)


# ---------------------------------------------------------------- conv2d NCHW


def _conv_ref(data, weight, stride, pad):
    n, c, h, w = data.shape
    f, _, kh, kw = weight.shape
    d = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (w + 2 * pad - kw) // stride + 1
    out = np.zeros((n, f, oh, ow))
    for ry in range(kh):
        for rx in range(kw):
            patch = d[:, :, ry : ry + stride * oh : stride, rx : rx + stride * ow : stride]
            out += np.einsum("nchw,fc->nfhw", patch[:, :, :oh, :ow], weight[:, :, ry, rx])
    return out.astype(np.float32)


def _conv(Nb, Ci, H, W, F, KS, stride, pad):
    data = pt.placeholder((Nb, Ci, H, W), "float32", name="data")
    weight = pt.placeholder((F, Ci, KS, KS), "float32", name="weight")
    P = pt.compute(
        (Nb, Ci, H + 2 * pad, W + 2 * pad),
        lambda n, c, y, x: pt.select(
            (y >= pad) & (y < H + pad) & (x >= pad) & (x < W + pad),
            data[n, c, y - pad, x - pad],
            pt.const(0.0, "float32"),
        ),
        name="pad",
    )
    OH = (H + 2 * pad - KS) // stride + 1
    OW = (W + 2 * pad - KS) // stride + 1
    rc = pt.reduce_axis((0, Ci), name="rc")
    ry = pt.reduce_axis((0, KS), name="ry")
    rx = pt.reduce_axis((0, KS), name="rx")
    Out = pt.compute(
        (Nb, F, OH, OW),
        lambda n, f, y, x: pt.sum(
            P[n, rc, y * stride + ry, x * stride + rx] * weight[f, rc, ry, rx], axis=[rc, ry, rx]
        ),
        name="conv",
    )
    return data, weight, P, Out


def conv_inline(s, P, Out):
    s[P].compute_inline()


def conv_inline_tiled(s, P, Out):
    s[P].compute_inline()
    n, f, y, x = Out.op.axis
    rc, ry, rx = Out.op.reduce_axis
    xo, xi = s[Out].split(x, factor=4)
    s[Out].reorder(n, f, y, xo, rc, ry, rx, xi)
    nf = s[Out].fuse(n, f)
    s[Out].parallel(nf)
    s[Out].unroll(rx)
    s[Out].vectorize(xi)


def conv_pad_at_row(s, P, Out):
    n, f, y, x = Out.op.axis
    s[P].compute_at(s[Out], y)


def conv_pad_at_tile(s, P, Out):
    n, f, y, x = Out.op.axis
    yo, xo, yi, xi = s[Out].tile(y, x, 3, 2)
    s[P].compute_at(s[Out], xo)


def conv_pad_at_channel(s, P, Out):
    n, f, y, x = Out.op.axis
    rc, ry, rx = Out.op.reduce_axis
    s[Out].reorder(n, rc, f, y, x)
    s[P].compute_at(s[Out], rc)


CONV_SCHEDULES = [
    conv_inline,
    conv_inline_tiled,
    conv_pad_at_row,
    conv_pad_at_tile,
    conv_pad_at_channel,
]


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1), (2, 0)], ids=["s1p1", "s2p1", "s2p0"])
@pytest.mark.parametrize("sched", CONV_SCHEDULES, ids=lambda f: f.__name__[5:])
def test_conv2d_nchw(sched, stride, pad):
    Nb, Ci, H, W, F, KS = 2, 3, 9, 10, 4, 3
    data, weight, P, Out = _conv(Nb, Ci, H, W, F, KS, stride, pad)
    s = pt.create_schedule(Out.op)
    sched(s, P, Out)
    r = _rng(2)
    d = r.uniform(-1, 1, (Nb, Ci, H, W)).astype("float32")
    w = r.uniform(-1, 1, (F, Ci, KS, KS)).astype("float32")
    o = _run(s, [data, weight, Out], [d, w], name="conv_" + sched.__name__)
    np.testing.assert_allclose(o, _conv_ref(d, w, stride, pad), **F32)


# ---------------------------------------------------------------- softmax (symbolic)


def _softmax(split_inner: bool):
    n, m = pt.var("n"), pt.var("m")
    X = pt.placeholder((n, m), "float32", name="X")
    k1 = pt.reduce_axis((0, m), name="k1")
    Mx = pt.compute((n,), lambda i: pt.max(X[i, k1], axis=k1), name="rowmax")
    E = pt.compute((n, m), lambda i, j: pt.exp(X[i, j] - Mx[i]), name="E")
    k2 = pt.reduce_axis((0, m), name="k2")
    S = pt.compute((n,), lambda i: pt.sum(E[i, k2], axis=k2), name="rowsum")
    Y = pt.compute((n, m), lambda i, j: E[i, j] / S[i], name="Y")
    s = pt.create_schedule(Y.op)
    i, j = Y.op.axis
    for T in (Mx, E, S):
        s[T].compute_at(s[Y], i)
    s[Y].parallel(i)
    if split_inner:
        jo, ji = s[Y].split(j, factor=8)
        s[Y].vectorize(ji)
        eo, ei = s[E].split(E.op.axis[1], factor=4)
        s[E].vectorize(ei)
    return s, X, Y


def _softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("split_inner", [False, True], ids=["plain", "split"])
def test_softmax_compute_at_symbolic(split_inner):
    s, X, Y = _softmax(split_inner)
    mod = pt.build(s, [X, Y], name="softmax")
    r = _rng(3)
    for n, m in [(1, 1), (1, 7), (7, 1), (7, 33), (33, 7), (4, 64)]:
        x = r.uniform(-5, 5, (n, m)).astype("float32")
        y = _out((n, m), "float32")
        mod(x, y)
        np.testing.assert_allclose(y, _softmax_ref(x), rtol=1e-5, atol=1e-6, err_msg=f"{n}x{m}")


# ---------------------------------------------------------------- dense + bias + relu


@pytest.mark.parametrize("dense_at", [None, "row", "tile"])
def test_dense_bias_relu_inline(dense_at):
    M, N, K = 13, 20, 9
    A, B, C, k = _matmul(M, N, K)
    bias = pt.placeholder((N,), "float32", name="bias")
    T = pt.compute((M, N), lambda i, j: C[i, j] + bias[j], name="T")
    D = pt.compute((M, N), lambda i, j: pt.max(T[i, j], pt.const(0, "float32")), name="D")
    s = pt.create_schedule(D.op)
    s[T].compute_inline()
    i, j = D.op.axis
    if dense_at == "row":
        s[C].compute_at(s[D], i)
    elif dense_at == "tile":
        io, jo, ii, ji = s[D].tile(i, j, 4, 8)
        s[C].compute_at(s[D], jo)
        s[D].vectorize(ji)
    a, b = _mm_inputs(M, N, K, seed=4)
    bb = _rng(5).uniform(-1, 1, N).astype("float32")
    d = _run(s, [A, B, bias, D], [a, b, bb], name="dense_relu")
    np.testing.assert_allclose(d, np.maximum(_mm_ref(a, b) + bb, 0), **F32)


# ---------------------------------------------------------------- symbolic extents


def test_symbolic_elementwise_split():
    n = pt.var("n")
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = pt.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].parallel(io)
    s[B].vectorize(ii)
    mod = pt.build(s, [A, B], name="sym_ew")
    for size in [1, 7, 8, 9, 17, 64, 100]:
        a = np.arange(size, dtype="float32")
        b = _out((size,), "float32")
        mod(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=0, atol=0, err_msg=f"n={size}")


@pytest.mark.parametrize("variant", ["tile", "split_k_nparts", "cache_write"])
def test_symbolic_matmul(variant):
    n, m, kk = pt.var("n"), pt.var("m"), pt.var("kk")
    A, B, C, k = _matmul(n, m, kk)
    s = pt.create_schedule(C.op)
    if variant == "tile":
        xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
        ko, ki = s[C].split(k, factor=3)
        s[C].reorder(xo, yo, ko, xi, ki, yi)
        s[C].parallel(xo)
        s[C].vectorize(yi)
    elif variant == "split_k_nparts":
        ko, ki = s[C].split(k, nparts=3)
        i, j = C.op.axis
        s[C].reorder(ko, i, ki, j)
    else:
        CL = s.cache_write(C, "local")
        xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
        s[CL].compute_at(s[C], yo)
        ci, cj = s[CL].op.axis
        (kr,) = s[CL].op.reduce_axis
        s[CL].reorder(kr, ci, cj)
        s[CL].vectorize(cj)
        BP = s.cache_read(B, "local", [CL])
        s[BP].compute_at(s[C], yo)
    mod = pt.build(s, [A, B, C], name="sym_mm_" + variant)
    for M, N, K in [(1, 1, 1), (4, 8, 3), (5, 9, 7), (13, 3, 10), (1, 17, 2)]:
        a, b = _mm_inputs(M, N, K, seed=M * 100 + N)
        c = _out((M, N), "float32")
        mod(a, b, c)
        np.testing.assert_allclose(c, _mm_ref(a, b), err_msg=f"{M}x{N}x{K}", **F32)


def test_symbolic_compute_at_2d():
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((n, m), "float32", name="A")
    B = pt.compute((n, m), lambda i, j: A[i, j] * 3.0, name="B")
    C = pt.compute((n, m), lambda i, j: B[i, j] - 1.0, name="C")
    s = pt.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 3, 5)
    s[B].compute_at(s[C], jo)
    mod = pt.build(s, [A, C], name="sym_ca2d")
    for shp in [(1, 1), (3, 5), (4, 6), (10, 2), (2, 11)]:
        a = _rng(6).uniform(-1, 1, shp).astype("float32")
        c = _out(shp, "float32")
        mod(a, c)
        np.testing.assert_allclose(c, a * 3 - 1, **F32)


# ---------------------------------------------------------------- dtypes

ALL_DTYPES = ["float32", "float64", "int8", "int32", "int64", "uint8", "float16"]


def _small_ints(shape, dtype, seed=7, lo=-6, hi=7):
    if np.dtype(dtype).kind == "u":
        lo = 0
    return _rng(seed).integers(lo, hi, shape).astype(dtype)


def _assert_same(got, want, dtype):
    assert got.dtype == np.dtype(dtype)
    if np.dtype(dtype).kind == "f":
        tol = 1e-3 if dtype == "float16" else 1e-6
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dtype_elementwise(dtype):
    shp = (5, 11)
    A = pt.placeholder(shp, dtype, name="A")
    B = pt.placeholder(shp, dtype, name="B")
    C = pt.compute(shp, lambda i, j: A[i, j] * 2 + B[i, j] - 3, name="C")
    s = pt.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].vectorize(ji)
    a, b = _small_ints(shp, dtype, 1), _small_ints(shp, dtype, 2)
    if dtype == "uint8":
        b = b + 3  # keep the result non-negative
    c = _run(s, [A, B, C], [a, b], name="ew_" + dtype)
    want = (a.astype(np.float64) * 2 + b - 3).astype(dtype)
    _assert_same(c, want, dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("red", ["sum", "max", "min"])
def test_dtype_reduction(dtype, red):
    shp = (6, 9)
    A = pt.placeholder(shp, dtype, name="A")
    k = pt.reduce_axis((0, shp[1]), name="k")
    fn = {"sum": pt.sum, "max": pt.max, "min": pt.min}[red]
    R = pt.compute((shp[0],), lambda i: fn(A[i, k], axis=k), name="R")
    s = pt.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=4)
    a = _small_ints(shp, dtype, 3)
    r = _run(s, [A, R], [a], name=f"red_{red}_{dtype}")
    want = {"sum": np.sum, "max": np.max, "min": np.min}[red](a.astype(np.float64), axis=1)
    _assert_same(r, want.astype(dtype), dtype)


def test_float16_arithmetic_in_float32():
    # 2048 + 1 is not representable in float16, but (2048 + 1) - 2048 computed in
    # float32 before the final rounding is exactly 1.
    A = pt.placeholder((4,), "float16", name="A")
    B = pt.compute((4,), lambda i: (A[i] + 1.0) - 2048.0, name="B")
    s = pt.create_schedule(B.op)
    a = np.full(4, 2048, dtype="float16")
    b = _run(s, [A, B], [a], name="f16_f32")
    np.testing.assert_array_equal(b, np.ones(4, "float16"))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_int_floordiv_mod(dtype):
    # '//' and '%' follow Python/numpy floor semantics (negative operands included).
    A = pt.placeholder((13,), dtype, name="A")
    Q = pt.compute((13,), lambda i: A[i] // 3, name="Q")
    R = pt.compute((13,), lambda i: A[i] % 3, name="R")
    s = pt.create_schedule([Q.op, R.op])
    a = np.arange(-6, 7).astype(dtype)
    q, r = _run(s, [A, Q, R], [a], name="floordiv_" + dtype)
    np.testing.assert_array_equal(q, a // 3)
    np.testing.assert_array_equal(r, a % 3)


CASTS = [
    ("int32", "float32"),
    ("float32", "int32"),
    ("float32", "float16"),
    ("float16", "float32"),
    ("uint8", "int32"),
    ("int8", "float64"),
    ("float64", "float32"),
    ("int64", "int8"),
    ("int32", "uint8"),
    ("float32", "int64"),
]


@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{a}-{b}" for a, b in CASTS])
def test_cast(src, dst):
    A = pt.placeholder((12,), src, name="A")
    B = pt.compute((12,), lambda i: pt.cast(dst, A[i]), name="B")
    s = pt.create_schedule(B.op)
    if np.dtype(src).kind == "f":
        a = np.array([-5.75, -3.5, -1.25, -0.5, 0, 0.25, 1, 1.5, 2.75, 3, 7.5, 100], src)
        if np.dtype(dst).kind == "u":
            a = np.abs(a)
    else:
        a = (
            np.array([-5, -3, -1, 0, 1, 2, 3, 7, 11, 50, 100, 120], src)
            if np.dtype(src).kind == "i"
            else np.arange(0, 240, 20).astype(src)
        )
        if np.dtype(dst).kind == "u":
            a = np.abs(a).astype(src)
    b = _run(s, [A, B], [a], name=f"cast_{src}_{dst}")
    _assert_same(b, a.astype(dst), dst)


def test_cast_index_unsplit():
    C = pt.compute((5,), lambda i: pt.cast("float32", i) * 2.0, name="C")
    s = pt.create_schedule(C.op)
    c = _run(s, [C], [], name="cast_index")
    np.testing.assert_array_equal(c, np.arange(5, dtype="float32") * 2)


def test_cast_index_after_split():
    # the loop variable inside the cast is not substituted when the loop is split
    C = pt.compute((5,), lambda i: pt.cast("float32", i) * 2.0, name="C")
    s = pt.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=2)
    c = _run(s, [C], [], name="cast_index_split")
    np.testing.assert_array_equal(c, np.arange(5, dtype="float32") * 2)


# ---------------------------------------------------------------- reductions


def test_sum_over_two_axes():
    A = pt.placeholder((5, 6, 7), "float32", name="A")
    k1 = pt.reduce_axis((0, 6), name="k1")
    k2 = pt.reduce_axis((0, 7), name="k2")
    R = pt.compute((5,), lambda i: pt.sum(A[i, k1, k2], axis=[k1, k2]), name="R")
    s = pt.create_schedule(R.op)
    s[R].reorder(k2, R.op.axis[0], k1)
    a = _rng(8).uniform(-1, 1, (5, 6, 7)).astype("float32")
    r = _run(s, [A, R], [a], name="sum2")
    np.testing.assert_allclose(r, a.astype(np.float64).sum(axis=(1, 2)), **F32)


def test_sum_nonzero_reduce_min():
    A = pt.placeholder((4, 10), "float32", name="A")
    k = pt.reduce_axis((3, 9), name="k")
    R = pt.compute((4,), lambda i: pt.sum(A[i, k], axis=k), name="R")
    s = pt.create_schedule(R.op)
    ko, ki = s[R].split(k, factor=4)
    a = _rng(9).uniform(-1, 1, (4, 10)).astype("float32")
    r = _run(s, [A, R], [a], name="sum_lo")
    np.testing.assert_allclose(r, a[:, 3:9].astype(np.float64).sum(axis=1), **F32)


@pytest.mark.parametrize("red", ["max", "min"])
def test_max_min_reduction_two_axes(red):
    A = pt.placeholder((4, 5, 3), "float32", name="A")
    k1 = pt.reduce_axis((0, 5), name="k1")
    k2 = pt.reduce_axis((0, 3), name="k2")
    fn = pt.max if red == "max" else pt.min
    R = pt.compute((4,), lambda i: fn(A[i, k1, k2], axis=[k1, k2]), name="R")
    s = pt.create_schedule(R.op)
    a = _rng(10).uniform(-10, -1, (4, 5, 3)).astype("float32")  # all negative for max
    if red == "min":
        a = -a
    r = _run(s, [A, R], [a], name="red2_" + red)
    np.testing.assert_array_equal(r, getattr(a, red)(axis=(1, 2)))


def test_comm_reducer_product():
    prod = pt.comm_reducer(lambda x, y: x * y, lambda dt: pt.const(1, dt), name="prod")
    A = pt.placeholder((6, 5), "float32", name="A")
    k = pt.reduce_axis((0, 5), name="k")
    P = pt.compute((6,), lambda i: prod(A[i, k], axis=k), name="P")
    s = pt.create_schedule(P.op)
    ko, ki = s[P].split(k, factor=2)
    a = _rng(11).uniform(0.5, 2, (6, 5)).astype("float32")
    p = _run(s, [A, P], [a], name="prod")
    np.testing.assert_allclose(p, a.astype(np.float64).prod(axis=1), **F32)


def test_comm_reducer_int_or_like():
    # a user reducer on ints: sum of squares accumulator, combine(x, y) = x + y
    ssq = pt.comm_reducer(lambda x, y: x + y, lambda dt: pt.const(0, dt), name="ssq")
    A = pt.placeholder((3, 7), "int32", name="A")
    k = pt.reduce_axis((0, 7), name="k")
    R = pt.compute((3,), lambda i: ssq(A[i, k] * A[i, k], axis=k), name="R")
    s = pt.create_schedule(R.op)
    a = _small_ints((3, 7), "int32", 12)
    r = _run(s, [A, R], [a], name="ssq")
    np.testing.assert_array_equal(r, (a.astype(np.int64) ** 2).sum(axis=1))


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_elementwise_max_min(dtype):
    A = pt.placeholder((10,), dtype, name="A")
    B = pt.placeholder((10,), dtype, name="B")
    Mx = pt.compute((10,), lambda i: pt.max(A[i], B[i]), name="Mx")
    Mn = pt.compute((10,), lambda i: pt.min(A[i], B[i]), name="Mn")
    s = pt.create_schedule([Mx.op, Mn.op])
    a, b = _small_ints((10,), dtype, 13), _small_ints((10,), dtype, 14)
    mx, mn = _run(s, [A, B, Mx, Mn], [a, b], name="maxmin_" + dtype)
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, b))


# ---------------------------------------------------------------- math functions

_erf = np.vectorize(math.erf)

MATH = {
    "exp": (lambda x: pt.exp(x), np.exp, (-3, 3)),
    "log": (lambda x: pt.log(x), np.log, (0.1, 10)),
    "sqrt": (lambda x: pt.sqrt(x), np.sqrt, (0, 10)),
    "rsqrt": (lambda x: pt.rsqrt(x), lambda x: 1 / np.sqrt(x), (0.1, 10)),
    "tanh": (lambda x: pt.tanh(x), np.tanh, (-3, 3)),
    "erf": (lambda x: pt.erf(x), _erf, (-2, 2)),
    "sigmoid": (lambda x: pt.sigmoid(x), lambda x: 1 / (1 + np.exp(-x)), (-6, 6)),
    "abs": (lambda x: pt.abs(x), np.abs, (-5, 5)),
    "floor": (lambda x: pt.floor(x), np.floor, (-5, 5)),
    "ceil": (lambda x: pt.ceil(x), np.ceil, (-5, 5)),
    "round": (lambda x: pt.round(x), np.rint, (-5, 5)),
    "pow": (lambda x: pt.pow(x, x * 0.5), lambda x: np.power(x, x * 0.5), (0.1, 4)),
    "neg_div": (lambda x: -x / (x * x + 1.0), lambda x: -x / (x * x + 1), (-3, 3)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fname", list(MATH))
def test_math(fname, dtype):
    f, ref, (lo, hi) = MATH[fname]
    A = pt.placeholder((37,), dtype, name="A")
    B = pt.compute((37,), lambda i: f(A[i]), name="B")
    s = pt.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(ii)
    a = _rng(15).uniform(lo, hi, 37).astype(dtype)
    b = _run(s, [A, B], [a], name=f"math_{fname}_{dtype}")
    want = ref(a.astype(np.float64))
    tol = 2e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(b, want, rtol=tol, atol=tol)


def test_math_float16():
    A = pt.placeholder((16,), "float16", name="A")
    B = pt.compute((16,), lambda i: pt.exp(A[i]) + pt.sqrt(pt.abs(A[i])), name="B")
    s = pt.create_schedule(B.op)
    a = _rng(16).uniform(-2, 2, 16).astype("float16")
    b = _run(s, [A, B], [a], name="math_f16")
    af = a.astype(np.float32)
    np.testing.assert_allclose(b, (np.exp(af) + np.sqrt(np.abs(af))).astype("float16"), rtol=1e-3)


def test_abs_int():
    A = pt.placeholder((9,), "int32", name="A")
    B = pt.compute((9,), lambda i: pt.abs(A[i]), name="B")
    s = pt.create_schedule(B.op)
    a = np.arange(-4, 5).astype("int32")
    np.testing.assert_array_equal(_run(s, [A, B], [a], name="abs_i32"), np.abs(a))


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
def test_select(dtype):
    A = pt.placeholder((4, 9), dtype, name="A")
    B = pt.placeholder((4, 9), dtype, name="B")
    C = pt.compute(
        (4, 9),
        lambda i, j: pt.select(
            (A[i, j] > B[i, j]) | (j == 0),
            A[i, j] - B[i, j],
            pt.if_then_else(i < 2, B[i, j], A[i, j]),
        ),
        name="C",
    )
    s = pt.create_schedule(C.op)
    s[C].vectorize(C.op.axis[1])
    a, b = _small_ints((4, 9), dtype, 17), _small_ints((4, 9), dtype, 18)
    c = _run(s, [A, B, C], [a, b], name="select_" + dtype)
    ii, jj = np.meshgrid(np.arange(4), np.arange(9), indexing="ij")
    want = np.where((a > b) | (jj == 0), a - b, np.where(ii < 2, b, a)).astype(dtype)
    _assert_same(c, want, dtype)


# ---------------------------------------------------------------- compute_at with clamping


@pytest.mark.parametrize("factor", [4, 5, 7])
def test_compute_at_stencil_nondivisible(factor):
    # C[i] = B[i] + B[i + 1] + B[i + 2] reads past the tile; at the last tile the
    # producer region must be clamped to B's extent.
    n = 23
    A = pt.placeholder((n + 2,), "float32", name="A")
    B = pt.compute((n + 2,), lambda i: A[i] * 2.0 + 1.0, name="B")
    C = pt.compute((n,), lambda i: B[i] + B[i + 1] + B[i + 2], name="C")
    s = pt.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=factor)
    s[B].compute_at(s[C], io)
    a = _rng(19).uniform(-1, 1, n + 2).astype("float32")
    c = _run(s, [A, C], [a], name=f"stencil_{factor}")
    b = a * 2 + 1
    np.testing.assert_allclose(c, b[:-2] + b[1:-1] + b[2:], **F32)


def test_compute_at_stencil_symbolic():
    n = pt.var("n")
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n,), lambda i: A[i] * 2.0, name="B")
    # reads B[i - 1] and B[i + 1], clamped with select at the borders
    C = pt.compute(
        (n,),
        lambda i: (
            B[i]
            + pt.select(i > 0, B[pt.max(i - 1, 0)], pt.const(0.0, "float32"))
            + pt.select(i < n - 1, B[pt.min(i + 1, n - 1)], pt.const(0.0, "float32"))
        ),
        name="C",
    )
    s = pt.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    mod = pt.build(s, [A, C], name="stencil_sym")
    for size in [1, 2, 4, 5, 9, 16]:
        a = _rng(size).uniform(-1, 1, size).astype("float32")
        c = _out((size,), "float32")
        mod(a, c)
        b = np.pad(a * 2, 1)
        np.testing.assert_allclose(c, b[:-2] + b[1:-1] + b[2:], err_msg=f"n={size}", **F32)


@pytest.mark.parametrize("factors", [(4, 4), (5, 7), (3, 16)])
def test_compute_at_matmul_into_consumer_tile(factors):
    # the reduction C is computed per tile of D = C + 1; the tiles overrun at the edges.
    M, N, K = 13, 17, 6
    A, B, C, k = _matmul(M, N, K)
    D = pt.compute((M, N), lambda i, j: C[i, j] + 1.0, name="D")
    s = pt.create_schedule(D.op)
    io, jo, ii, ji = s[D].tile(D.op.axis[0], D.op.axis[1], *factors)
    s[C].compute_at(s[D], jo)
    ci, cj = C.op.axis
    s[C].reorder(k, ci, cj)
    a, b = _mm_inputs(M, N, K, seed=20)
    d = _run(s, [A, B, D], [a, b], name="ca_tile")
    np.testing.assert_allclose(d, _mm_ref(a, b) + 1, **F32)


def test_compute_at_2d_transposed_read():
    # the consumer reads the producer transposed, so its tile maps to a different region.
    A = pt.placeholder((11, 7), "float32", name="A")
    B = pt.compute((11, 7), lambda i, j: A[i, j] + 0.5, name="B")
    C = pt.compute((7, 11), lambda i, j: B[j, i] * 2.0, name="C")
    s = pt.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 3, 4)
    s[B].compute_at(s[C], jo)
    a = _rng(21).uniform(-1, 1, (11, 7)).astype("float32")
    c = _run(s, [A, C], [a], name="ca_transpose")
    np.testing.assert_allclose(c, ((a + 0.5) * 2).T, **F32)


def test_compute_at_chain_two_levels():
    # A -> B -> C -> D, B attached in C, C attached in D, all split non-divisibly.
    n = 19
    A = pt.placeholder((n + 2,), "float32", name="A")
    B = pt.compute((n + 2,), lambda i: A[i] * A[i], name="B")
    C = pt.compute((n + 1,), lambda i: B[i] + B[i + 1], name="C")
    D = pt.compute((n,), lambda i: C[i] - C[i + 1], name="D")
    s = pt.create_schedule(D.op)
    do, di = s[D].split(D.op.axis[0], factor=6)
    s[C].compute_at(s[D], do)
    co, ci = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], co)
    a = _rng(22).uniform(-1, 1, n + 2).astype("float32")
    d = _run(s, [A, D], [a], name="ca_chain")
    b = a * a
    c = b[:-1] + b[1:]
    np.testing.assert_allclose(d, c[:-1] - c[1:], **F32)
