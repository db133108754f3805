"""bfloat16 as a storage type: numpy arrays through ml_dtypes, arithmetic in float32,
every store rounded to nearest even, compared bit for bit with ml_dtypes' conversions;
reductions over float16 and bfloat16 accumulated in float32 by cache_write."""

import numpy as np
import pytest

import pypto as pt
from autotune.templates import f16c
from pypto import dtypes

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    ml_dtypes = BF16 = None
needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="bfloat16 needs ml_dtypes")


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16)


@needs_ml_dtypes
@pytest.mark.parametrize("vectorize", [False, True])
def test_elementwise_matches_numpy_bit_for_bit(vectorize):
    n = pt.var("n")
    A = pt.placeholder((n,), "bfloat16", name="A")
    B = pt.placeholder((n,), "bfloat16", name="B")
    C = pt.compute((n,), lambda i: A[i] * B[i] + 1.0, name="C")
    s = pt.create_schedule(C)
    if vectorize:
        _, xi = s[C].split(C.op.axis[0], factor=16)
        s[C].vectorize(xi)
    mod = pt.build(s, [A, B, C], name="fma16")
    assert "uint16_t* restrict C" in mod.source and "pt_bf16_store(" in mod.source
    rng = np.random.default_rng(0)
    a = rng.standard_normal(1003).astype(BF16)
    b = rng.standard_normal(1003).astype(BF16)
    c = mod(a, b)
    assert c.dtype == BF16
    # a bfloat16 product is exact in float32: one rounding to float32, one to bfloat16
    want = (a.astype(np.float32) * b.astype(np.float32) + np.float32(1)).astype(BF16)
    assert np.array_equal(_bits(c), _bits(want))


@needs_ml_dtypes
def test_rounding_ties_overflow_and_specials():
    X = pt.placeholder((16,), "float32", name="X")
    Y = pt.compute((16,), lambda i: pt.cast("bfloat16", X[i]), name="Y")
    Z = pt.compute((16,), lambda i: pt.cast("float32", pt.cast("bfloat16", X[i])), name="Z")
    mod = pt.build(pt.create_schedule([Y, Z]), [X, Y, Z], name="round16")
    one = np.float32(1.0).view(np.uint32)
    ties = np.array([one + 0x8000, one + 0x18000, one + 0x7FFF, one + 0x8001], np.uint32)
    x = np.concatenate(
        [
            ties.view(np.float32),  # halfway: down to even, up to even; below, above half
            np.float32([3.4e38, -3.4e38, np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-40]),
            np.float32([65504.0, -2.5, 0.1, 1.00390625]),
        ]
    ).astype(np.float32)
    y, z = mod(x)
    want = x.astype(BF16)
    assert np.array_equal(_bits(y)[~np.isnan(x)], _bits(want)[~np.isnan(x)])
    assert np.isnan(y.astype(np.float32)[np.isnan(x)]).all() and np.isnan(z[np.isnan(x)]).all()
    assert np.array_equal(_bits(y)[:4], [0x3F80, 0x3F82, 0x3F80, 0x3F81])
    assert np.isposinf(y[4].astype(np.float32)) and np.isneginf(y[5].astype(np.float32))
    assert np.array_equal(z[~np.isnan(x)], want.astype(np.float32)[~np.isnan(x)])


@needs_ml_dtypes
def test_matmul_accumulated_in_float32_against_float64():
    M, N, K = 24, 40, 4096
    A = pt.placeholder((M, K), "bfloat16", name="A")
    B = pt.placeholder((K, N), "bfloat16", name="B")
    k = pt.reduce_axis((0, K), name="k")
    acc = pt.compute(
        (M, N),
        lambda i, j: pt.sum(pt.cast("float32", A[i, k]) * pt.cast("float32", B[k, j]), axis=k),
        name="acc",
    )
    C = pt.compute((M, N), lambda i, j: pt.cast("bfloat16", acc[i, j]), name="C")
    s = pt.create_schedule(C)
    s[acc].compute_at(s[C], C.op.axis[0])
    mod = pt.build(s, [A, B, C], name="mm16")
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (M, K)).astype(BF16)
    b = rng.uniform(-1, 1, (K, N)).astype(BF16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    r = pt.validate(mod, lambda a, b: ref, [a, b])
    assert r.ok and r.outputs[0].dtype == "bfloat16" and r.outputs[0].rtol == 2e-2
    assert r.max_rel_err < 1e-2 and r.ulp["0"] + r.ulp["1"] == M * N


@needs_ml_dtypes
def test_arguments_are_checked_and_ml_dtypes_is_named_when_missing(monkeypatch):
    A = pt.placeholder((4,), "bfloat16", name="A")
    B = pt.compute((4,), lambda i: A[i] + 1.0, name="B")
    s = pt.create_schedule(B)
    mod = pt.build(s, [A, B], name="plus")
    with pytest.raises(TypeError, match="argument A: dtype float16, expected bfloat16"):
        mod(np.ones(4, np.float16))
    assert dtypes.dtype(BF16).name == "bfloat16" and dtypes.dtype("bfloat16").bytes == 2
    monkeypatch.setattr(dtypes, "ml_dtypes", None)
    with pytest.raises(TypeError, match=r"bfloat16 arrays need ml_dtypes: pip install"):
        pt.build(s, [A, B], name="plus")


@pytest.mark.parametrize("dtype", ["float16", pytest.param("bfloat16", marks=needs_ml_dtypes)])
def test_cache_write_accumulates_16_bit_reductions_in_float32(dtype):
    M, N, K = 16, 24, 4096
    A = pt.placeholder((M, K), dtype, name="A")
    B = pt.placeholder((K, N), dtype, name="B")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M, N), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    s[CL].compute_at(s[C], jo)
    s[C].vectorize(ji)
    assert CL.dtype == "float32" and C.dtype == dtype
    mod = pt.build(s, [A, B, C], name="mm_acc")
    assert "float C_local[32]" in mod.source  # the 4 x 8 accumulator tile
    np_dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (M, K)).astype(np_dt)
    b = rng.uniform(-1, 1, (K, N)).astype(np_dt)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    r = pt.validate(mod, lambda a, b: ref, [a, b])
    assert r.ok, str(r)
    # rounded once: within one step of the output type of the float64 result
    assert r.ulp["0"] + r.ulp["1"] == M * N
    rel = np.linalg.norm(mod(a, b).astype(np.float64) - ref) / np.linalg.norm(ref)
    assert rel < 1e-2


@needs_ml_dtypes
@pytest.mark.parametrize("target", ["generic", "x86-avx2", "aarch64-neon"])
def test_every_target_rounds_the_same(target):
    from pypto import emulate

    t = pt.Target(target)
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    A = pt.placeholder((64,), "bfloat16", name="A")
    C = pt.compute((64,), lambda i: A[i] * 3.0 + 0.5, name="C")
    s = pt.create_schedule(C)
    s[C].vectorize(C.op.axis[0])
    a = np.linspace(-3, 3, 64).astype(BF16)
    c = pt.build(s, [A, C], target=t, name="tri")(a)
    want = (a.astype(np.float32) * np.float32(3) + np.float32(0.5)).astype(BF16)
    assert np.array_equal(c.view(np.uint16), want.view(np.uint16))


@needs_ml_dtypes
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_value_cast_to_its_store_is_rounded_once(dtype):
    """``Y = cast(bfloat16, f(float(X)))``: the store rounds, the cast adds no second
    rounding (one conversion in the C), and the bits are numpy's rounding of the
    float32 value."""
    X = pt.placeholder((64,), dtype, name="X")
    Y = pt.compute((64,), lambda i: pt.cast(dtype, pt.cast("float32", X[i]) * 1.37), name="Y")
    s = pt.create_schedule(Y.op)
    s[Y].vectorize(Y.op.axis[0])
    mod = pt.build(s, [X, Y])
    store = next(line for line in mod.source.splitlines() if "Y[" in line and "=" in line)
    narrow = "pt_bf16_store(" if dtype == "bfloat16" else "pt_f16_store("
    assert store.count(narrow) == 1, store
    nd = dtypes.numpy_dtype(dtype)
    x = np.random.default_rng(0).standard_normal(64).astype(nd)
    y = np.zeros(64, nd)
    mod(x, y)
    want = (x.astype(np.float32) * np.float32(1.37)).astype(nd)
    assert np.array_equal(_bits(y), _bits(want))


def _converted(s, T, how: str, t):
    """``T``'s conversion vectorized by the compiler (``pt_f16_load`` / ``pt_f16_store``),
    or by the target's conversion instructions (``f16c``: rows of 40, whole vectors and a
    short one)."""
    xo, xi = s[T].split(T.op.axis[0], factor=40 if how == "f16c" else 16)
    if how == "f16c":
        s[T].tensorize(xi, f16c.intrin(t, 40, widen=str(T.dtype) == "float32"))
    else:
        s[T].vectorize(xi)


def _conversion_target(target: str, how: str):
    """``pt.Target(target)``; skips where it does not run here or has no ``how``."""
    from pypto import emulate

    t = pt.Target(target)
    why = emulate.why_not_runnable(t) or (
        how == "f16c" and f16c.conversion(t) is None and f"{t.name} has no F16C"
    )
    if why:
        pytest.skip(why)
    return t


@pytest.mark.parametrize(
    "target, how",
    [("host", "compiler"), ("generic", "compiler"), ("aarch64-neon", "compiler"),
     ("host", "f16c"), ("x86-avx2", "f16c")],
)  # fmt: skip
def test_float16_conversions_are_numpy_s_bit_for_bit(target, how):
    """float16's loads and stores (``pt_f16_load`` / ``pt_f16_store``, vectorized; or the
    F16C / AVX-512F instructions, ``autotune.templates.f16c``): every one of the 65536
    halves widened exactly; float32 values narrowed as numpy
    rounds them, to nearest even: the halfway points between neighbouring halves (ties,
    in the subnormal range too), their neighbours one float32 ulp away, overflow to
    infinity from 65520 on, underflow to zero, signed zeros, infinities, and random bit
    patterns. NaN stays NaN."""
    t = _conversion_target(target, how)
    n = 1 << 16
    H = pt.placeholder((n,), "float16", name="H")
    W = pt.compute((n,), lambda i: pt.cast("float32", H[i]), name="W")
    s = pt.create_schedule(W.op)
    _converted(s, W, how, t)
    halves = np.arange(n, dtype=np.uint16).view(np.float16)
    wide = pt.build(s, [H, W], target=t, name="widen")(halves)
    want = halves.astype(np.float32)
    same = (wide.view(np.uint32) == want.view(np.uint32)) | (np.isnan(wide) & np.isnan(want))
    assert same.all(), halves[~same][:8]

    finite = np.unique(want[np.isfinite(want)].astype(np.float64))
    mid = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)  # exact: the ties
    rng = np.random.default_rng(7)
    noise = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    edges = [65504, 65519.996, 65520, 65536, 1e30, 2.0**-24, 2.0**-25, 2.0**-26, 0.0, -0.0]
    x = np.concatenate([
        mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf)),
        want, noise.view(np.float32), np.array(edges + [np.inf, -np.inf], np.float32),
    ]).astype(np.float32)  # fmt: skip
    x = np.concatenate([x, -x])
    m = x.size
    F = pt.placeholder((m,), "float32", name="F")
    N = pt.compute((m,), lambda i: pt.cast("float16", F[i]), name="N")
    s = pt.create_schedule(N.op)
    _converted(s, N, how, t)
    got = pt.build(s, [F, N], target=t, name="narrow")(x)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = x.astype(np.float16)
    nan = np.isnan(x)
    assert np.isnan(got[nan]).all()
    bad = got[~nan].view(np.uint16) != ref[~nan].view(np.uint16)
    assert not bad.any(), x[~nan][bad][:8]


@pytest.mark.parametrize("how", ["compiler", "f16c"])
def test_float16_subnormals_survive_flush_to_zero(how):
    """Under flush-to-zero and denormals-are-zero (``torch.set_flush_denormal(True)``
    sets both for the calling thread on x86) float16's subnormals still widen exactly,
    as numpy and PyTorch widen them (the load never goes through a float32 subnormal),
    and float32 values in their range still narrow to them."""
    torch = pytest.importorskip("torch")
    t = _conversion_target("host", how)
    H = pt.placeholder((1024,), "float16", name="H")
    W = pt.compute((1024,), lambda i: pt.cast("float32", H[i]), name="W")
    N = pt.compute((1024,), lambda i: pt.cast("float16", W[i]), name="N")
    s = pt.create_schedule(N.op)
    _converted(s, W, how, t)
    _converted(s, N, how, t)
    mod = pt.build(s, [H, W, N], target=t, name="subnormals")
    halves = np.arange(1024, dtype=np.uint16).view(np.float16)  # 0 and every subnormal
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode")
    try:
        wide, back = mod(halves)
    finally:
        torch.set_flush_denormal(False)
    np.testing.assert_array_equal(wide, halves.astype(np.float32))
    assert np.array_equal(_bits(back), _bits(halves))


@pytest.mark.parametrize("target", ["host", "generic"])
@pytest.mark.parametrize("vectorize", [False, True])
def test_float64_narrowed_to_float16_rounds_once(target, vectorize):
    """A double cast to float16 rounds once, as numpy does: through float32 it would
    round twice (a value just above a float16 tie becomes the tie in float32, and the
    tie goes to even: the wrong way). Stored (Y) and computed on (Z)."""
    halves = np.arange(1 << 15, dtype=np.uint16).view(np.float16)
    finite = np.unique(halves[np.isfinite(halves)].astype(np.float64))
    mid = (finite[1:] + finite[:-1]) / 2  # the ties
    near = np.concatenate([mid * (1 + 2.0**-30), mid * (1 - 2.0**-30), mid])
    edges = [65519.99, 65520.0, 65520.01, 2.0**-25 * (1 + 2.0**-40), 2.0**-25, 1e-300, 1e300]
    rng = np.random.default_rng(3)
    x = np.concatenate([near, edges, [np.inf], rng.standard_normal(4096) * 100])
    x = np.concatenate([x, -x])
    n = x.size
    A = pt.placeholder((n,), "float64", name="A")
    Y = pt.compute((n,), lambda i: pt.cast("float16", A[i]), name="Y")
    Z = pt.compute((n,), lambda i: pt.cast("float32", pt.cast("float16", A[i])) * 2.0, name="Z")
    s = pt.create_schedule([Y.op, Z.op])
    if vectorize:
        for T in (Y, Z):
            s[T].vectorize(s[T].split(T.op.axis[0], factor=16)[1])
    y, z = pt.build(s, [A, Y, Z], target=target, name="narrow64")(x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    assert np.array_equal(_bits(y), _bits(want)), x[_bits(y) != _bits(want)][:4]
    np.testing.assert_array_equal(z, want.astype(np.float32) * 2)
