"""Reductions over float16/bfloat16 accumulate in float32 without being told (API.md 9):
a plain ``pt.sum`` into a 16-bit tensor, whatever its schedule, rounds once at the end,
so a K=4096 matmul stays within 1e-2 of float64; int8 products summed as int32 are exact."""

import numpy as np
import pytest

import pypto as pt

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    ml_dtypes = BF16 = None

M, N, K = 8, 16, 4096
DTYPES = [
    "float16",
    pytest.param("bfloat16", marks=pytest.mark.skipif(ml_dtypes is None, reason="needs ml_dtypes")),
]


def _np(dtype: str) -> np.dtype:
    return BF16 if dtype == "bfloat16" else np.dtype(dtype)


def _plain(s, C, D):
    pass


def _split_reorder_vectorize(s, C, D):
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)  # spatial loops inside the reduction
    s[C].vectorize(ji)


def _compute_at(s, C, D):
    s[C].compute_at(s[D], D.op.axis[0])


SCHEDULES = {"plain": _plain, "split_vec": _split_reorder_vectorize, "compute_at": _compute_at}


def _matmul(dtype: str, schedule: str):
    A = pt.placeholder((M, K), dtype, name="A")
    B = pt.placeholder((K, N), dtype, name="B")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M, N), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = pt.compute((M, N), lambda i, j: C[i, j] * 0.5, name="D")
    s = pt.create_schedule(D if schedule == "compute_at" else C)
    SCHEDULES[schedule](s, C, D)
    args = [A, B, D] if schedule == "compute_at" else [A, B, C]
    return pt.build(s, args, name=f"mm_{dtype}_{schedule}"), 0.5 if schedule == "compute_at" else 1


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_16_bit_matmul_accumulates_in_float32(dtype, schedule):
    mod, scale = _matmul(dtype, schedule)
    rng = np.random.default_rng(7)
    # all positive: the sums grow to ~K/4, where a 16-bit accumulator loses every step
    a = rng.uniform(0, 1, (M, K)).astype(_np(dtype))
    b = rng.uniform(0, 1, (K, N)).astype(_np(dtype))
    ref = scale * (a.astype(np.float64) @ b.astype(np.float64))
    out = mod(a, b)
    assert out.dtype == _np(dtype)
    rel = np.max(np.abs(out.astype(np.float64) - ref) / np.abs(ref))
    assert rel < 1e-2, f"max relative error {rel:.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_16_bit_accumulation_would_be_measurably_worse(dtype):
    """What the fix avoids: the same sums accumulated in the 16-bit type (numpy
    emulation, rounding after every addition) are far outside 1e-2."""
    rng = np.random.default_rng(7)
    a = rng.uniform(0, 1, (2, K)).astype(_np(dtype))
    b = rng.uniform(0, 1, (K, 2)).astype(_np(dtype))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    acc = np.zeros((2, 2), _np(dtype))
    for kk in range(K):
        prod = a[:, kk : kk + 1].astype(np.float32) * b[kk : kk + 1, :].astype(np.float32)
        acc = (acc.astype(np.float32) + prod).astype(_np(dtype))
    rel = np.max(np.abs(acc.astype(np.float64) - ref) / np.abs(ref))
    assert rel > 2e-2, f"16-bit accumulation unexpectedly accurate: {rel:.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_reduction_over_16_bit_is_exact(dtype):
    A = pt.placeholder((M, K), dtype, name="A")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M,), lambda i: pt.max(A[i, k], axis=k), name="C")
    s = pt.create_schedule(C)
    ko, ki = s[C].split(k, factor=16)
    mod = pt.build(s, [A, C], name=f"rowmax_{dtype}")
    a = np.random.default_rng(3).uniform(-4, 4, (M, K)).astype(_np(dtype))
    np.testing.assert_array_equal(mod(a), a.max(axis=1))


def test_int8_products_summed_as_int32_are_exact():
    A = pt.placeholder((M, K), "int8", name="A")
    B = pt.placeholder((K, N), "int8", name="B")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute(
        (M, N),
        lambda i, j: pt.sum(pt.cast("int32", A[i, k]) * pt.cast("int32", B[k, j]), axis=k),
        name="C",
    )
    s = pt.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].vectorize(ji)
    mod = pt.build(s, [A, B, C], name="mm_int8")
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    out = mod(a, b)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("dtype", DTYPES)
def test_symbolic_and_triangular_reductions_accumulate_in_float32(dtype):
    """Spatial loops inside the reduction with no constant extent (symbolic n): a float32
    twin of the buffer is the accumulator; a reduction bounded by an outer loop (a
    triangle) keeps the tile of the spatial loops inside it."""
    n = pt.var("n")
    A = pt.placeholder((K, n), dtype, name="A")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((4, n), lambda i, j: pt.sum(A[k, j] * pt.cast(dtype, i + 1), axis=k), name="C")
    s = pt.create_schedule(C)
    s[C].reorder(C.op.axis[0], k, C.op.axis[1])  # j (extent n) inside k
    mod = pt.build(s, [A, C], name=f"colsum_{dtype}")
    assert "float* restrict C_acc" in mod.source  # sized at call time: on the heap
    a = np.random.default_rng(1).uniform(0, 1, (K, 12)).astype(_np(dtype))
    ref = np.arange(1, 5)[:, None] * a.astype(np.float64).sum(axis=0)
    out = mod(a).astype(np.float64)
    assert np.max(np.abs(out - ref) / ref) < 1e-2

    # S[i, j] = sum of B[k, j] for k < 64 * (i + 1): the bound of k names the loop i
    B = pt.placeholder((K, 8), dtype, name="B")

    def prefix(i, j):
        kk = pt.reduce_axis((0, i * 64 + 64), name="kk")
        return pt.sum(B[kk, j], axis=kk)

    S = pt.compute((K // 64, 8), prefix, name="S")
    s2 = pt.create_schedule(S)
    s2[S].reorder(S.op.axis[0], S.op.reduce_axis[0], S.op.axis[1])
    mod2 = pt.build(s2, [B, S], name=f"tri_{dtype}")
    assert "float S_acc[8]" in mod2.source
    b = np.random.default_rng(2).uniform(0, 1, (K, 8)).astype(_np(dtype))
    ref2 = np.cumsum(b.astype(np.float64), axis=0)[63::64]
    out2 = mod2(b).astype(np.float64)
    assert np.max(np.abs(out2 - ref2) / ref2) < 1e-2


def test_what_the_user_wrote_is_kept():
    """Told otherwise: a cache_write stage (already float32) and a reduction cast to
    float32 by the user get no second accumulator; float32 kernels are unchanged."""
    A = pt.placeholder((M, K), "float16", name="A")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M,), lambda i: pt.sum(A[i, k], axis=k), name="C")
    s = pt.create_schedule(C)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], C.op.axis[0])
    src = pt.build(s, [A, C], name="rowsum_cw").source
    assert "C_local" in src and "_acc" not in src
    F = pt.compute((M,), lambda i: pt.sum(pt.cast("float32", A[i, k]), axis=k), name="F")
    src = pt.build(pt.create_schedule(F), [A, F], name="rowsum_f32").source
    assert "float* restrict F" in src and "_acc" not in src
    a = np.random.default_rng(4).uniform(0, 1, (M, K)).astype(np.float16)
    ref = a.astype(np.float64).sum(axis=1)
    out = pt.build(pt.create_schedule(F), [A, F], name="rowsum_f32")(a)
    np.testing.assert_allclose(out, ref, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_inlined_16_bit_stage_rounds_as_its_buffer_would(dtype):
    """T = A + B stored in 16 bits, U = T - A: inlining T keeps T's rounding (else U
    would be B exactly: a result that depends on the schedule)."""
    A = pt.placeholder((4,), dtype, name="A")
    B = pt.placeholder((4,), dtype, name="B")
    T = pt.compute((4,), lambda i: A[i] + B[i], name="T")
    U = pt.compute((4,), lambda i: T[i] - A[i], name="U")
    a = np.array([1000, 256, 2048, 100], _np(dtype))
    b = np.array([0.1, 1, 1, 0.01], _np(dtype))
    want = ((a.astype("f4") + b.astype("f4")).astype(_np(dtype)).astype("f4") - a).astype(
        _np(dtype)
    )
    for inline in (False, True):
        s = pt.create_schedule(U.op)
        if inline:
            s[T].compute_inline()
        got = pt.build(s, [A, B, U])(a, b)
        np.testing.assert_array_equal(got.astype("f4"), want.astype("f4"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rfactor_of_a_16_bit_sum_keeps_float32_partials(dtype):
    A = pt.placeholder((4096,), dtype, name="A")
    k = pt.reduce_axis((0, 4096), name="k")
    C = pt.compute((1,), lambda i: pt.sum(A[k], axis=k), name="C")
    s = pt.create_schedule(C.op)
    _, ki = s[C].split(k, factor=16)
    CF = s.rfactor(C, ki)
    s[CF].vectorize(s[CF].op.axis[0])
    assert CF.dtype == "float32"
    a = (np.random.default_rng(1).random(4096) * 3).astype(_np(dtype))
    want = a.astype("f4").sum(dtype="f4").astype(_np(dtype))
    np.testing.assert_array_equal(pt.build(s, [A, C])(a).astype("f4"), want.astype("f4"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_16_bit_constants_and_folded_casts_hold_values_of_the_type(dtype):
    """pt.const(0.1, dt), a literal compared with a 16-bit tensor, and a cast of a
    constant folded at build: each the value the type holds (numpy's, ml_dtypes')."""
    X = pt.placeholder((3,), dtype, name="X")
    Y = pt.compute((3,), lambda i: X[i] + pt.const(0.1, dtype), name="Y")
    x = np.array([0.2, 0.3, 1.0], _np(dtype))
    want = (x.astype("f4") + np.float32(_np(dtype).type(0.1))).astype(_np(dtype))
    np.testing.assert_array_equal(pt.build(pt.create_schedule(Y.op), [X, Y])(x), want)
    Z = pt.compute((3,), lambda i: pt.select(X[i] == 2049, 1.0, 0.0), name="Z")
    z = pt.build(pt.create_schedule(Z.op), [X, Z])(np.array([2048, 2064, 1], _np(dtype)))
    np.testing.assert_array_equal(z.astype("f4"), [1, 0, 0])  # 2049 is 2048 in either type
    big = {"float16": np.inf, "bfloat16": 70144.0}[dtype]
    W = pt.compute(
        (3,),
        lambda i: pt.select(
            i == 0,
            pt.cast("float32", pt.cast(dtype, pt.const(2049, "int32"))),
            pt.select(i == 1, pt.cast("float32", pt.cast(dtype, pt.const(70000.0))), 0.0),
        ),
        name="W",
    )
    np.testing.assert_array_equal(pt.build(pt.create_schedule(W.op), [W])(), [2048, big, 0])
