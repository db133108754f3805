"""Float scalar arguments (``pt.var("alpha", "float64")``) and 0-d tensors, against numpy."""

import numpy as np
import pytest

import pypto as pt
from pypto import emulate

RNG = np.random.default_rng(14)


def gemm_like(dtype):
    n = pt.var("n")
    alpha, beta = pt.var("alpha", dtype), pt.var("beta", dtype)
    A = pt.placeholder((n, 8), dtype, name="A")
    B = pt.placeholder((8, n), dtype, name="B")
    C0 = pt.placeholder((n, n), dtype, name="C0")
    k = pt.reduce_axis((0, 8), name="k")
    P = pt.compute((n, n), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="P")
    C = pt.compute((n, n), lambda i, j: alpha * P[i, j] + beta * C0[i, j], name="C")
    return (A, B, C0, C, alpha, beta)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_scalar_arguments_in_expressions(dtype):
    A, B, C0, C, alpha, beta = gemm_like(dtype)
    s = pt.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[P := C.op.input_tensors[0]].compute_at(s[C], io)
    assert P.name == "P"
    mod = pt.build(s, [A, B, alpha, C0, beta, C])
    n = 10
    a, b, c0 = (RNG.standard_normal(sh).astype(dtype) for sh in ((n, 8), (8, n), (n, n)))
    c = np.empty((n, n), dtype)
    mod(a, b, 1.5, c0, -0.25, c)
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(c, 1.5 * (a @ b) + -0.25 * c0, rtol=tol, atol=tol)
    # outputs omitted: the scalars count among the inputs; numpy scalars and ints pass
    c2 = mod(a, b, np.float64(2.0), c0, 3)
    np.testing.assert_allclose(c2, 2.0 * (a @ b) + 3 * c0, rtol=tol, atol=tol)


def test_scalar_arguments_survive_export(tmp_path):
    A, B, C0, C, alpha, beta = gemm_like("float64")
    s = pt.create_schedule(C.op)
    mod = pt.build(s, [alpha, A, B, C0, beta, C])
    path = mod.export_library(str(tmp_path / "gemm.so"))
    loaded = pt.load_module(path)
    a, b, c0 = RNG.standard_normal((4, 8)), RNG.standard_normal((8, 4)), np.ones((4, 4))
    np.testing.assert_allclose(loaded(0.5, a, b, c0, 2.0), 0.5 * (a @ b) + 2.0 * c0)
    with pytest.raises(TypeError, match="argument beta: expected a number"):
        loaded(0.5, a, b, c0, None)


def test_scalar_argument_wrong_type_names_it():
    A, B, C0, C, alpha, beta = gemm_like("float32")
    mod = pt.build(pt.create_schedule(C.op), [A, B, alpha, C0, beta, C])
    a, b, c0 = (np.ones(sh, "float32") for sh in ((2, 8), (8, 2), (2, 2)))
    with pytest.raises(TypeError, match=r"argument alpha: expected a number \(a float32 scalar\)"):
        mod(a, b, "1.0", c0, 1.0)
    with pytest.raises(TypeError, match="argument alpha: expected a number"):
        mod(a, b, np.ones(1, "float32"), c0, 1.0, np.empty((2, 2), "float32"))
    with pytest.raises(TypeError, match=r"takes 6 arguments \(A, B, alpha, C0, beta, C\)"):
        mod(a, b, 1.0)


def test_scalar_argument_missing_from_the_arguments():
    A, B, C0, C, alpha, beta = gemm_like("float64")
    with pytest.raises(pt.ScheduleError, match=r"scalar variable\(s\) beta are used but not"):
        pt.build(pt.create_schedule(C.op), [A, B, alpha, C0, C])


def test_var_dtypes_refused():
    with pytest.raises(TypeError, match="pt.var needs an integer dtype .* got float16"):
        pt.var("h", "float16")
    alpha = pt.var("alpha", "float32")
    with pytest.raises(TypeError, match="a dimension must be an integer"):
        pt.placeholder((alpha,), "float32")


# ---------------------------------------------------------------- 0-d tensors


def test_zero_d_reduction_as_scalar_temporary():
    n = pt.var("n")
    A = pt.placeholder((n,), "float32", name="A")
    k = pt.reduce_axis((0, n), name="k")
    S = pt.compute((), lambda: pt.sum(A[k], axis=k), name="S")
    B = pt.compute((n,), lambda i: A[i] - S[()] / pt.cast("float32", n), name="B")
    s = pt.create_schedule(B.op)
    mod = pt.build(s, [A, B])
    a = RNG.standard_normal(37).astype("float32")
    np.testing.assert_allclose(mod(a), a - a.mean(), rtol=1e-5, atol=1e-5)
    s2 = pt.create_schedule(B.op)
    s2[S].compute_at(s2[B], B.op.axis[0])  # recomputed per element: still right
    np.testing.assert_allclose(pt.build(s2, [A, B])(a), a - a.mean(), rtol=1e-5, atol=1e-5)


def test_zero_d_placeholders_in_and_out():
    x = pt.placeholder((), "float64", name="x")
    A = pt.placeholder((5,), "float64", name="A")
    k = pt.reduce_axis((0, 5), name="k")
    D = pt.compute((), lambda: pt.sum(A[k] * x[()], axis=k), name="D")
    E = pt.compute((), lambda: D[()] + 1.0, name="E")
    s = pt.create_schedule(E.op)
    mod = pt.build(s, [A, x, E])
    a = np.arange(5.0)
    out = mod(a, np.array(3.0))
    assert out.shape == ()
    assert out == pytest.approx(31.0)
    with pytest.raises(ValueError, match="argument x: 1 dimension"):
        mod(a, np.array([3.0]))


def test_zero_d_with_scalar_argument():
    alpha = pt.var("alpha", "float64")
    A = pt.placeholder((4,), "float64", name="A")
    k = pt.reduce_axis((0, 4), name="k")
    D = pt.compute((), lambda: pt.max(alpha * A[k], axis=k), name="D")
    mod = pt.build(pt.create_schedule(D.op), [A, alpha, D])
    a = np.array([1.0, -4.0, 2.0, 0.5])
    assert mod(a, -1.0) == 4.0
    assert mod(a, 2.0) == 4.0


def test_zero_d_call_form_and_input_tensor_order():
    A = pt.placeholder((3,), "float32", name="A")
    B = pt.placeholder((3,), "float32", name="B")
    z = pt.placeholder((), "float32", name="z")
    C = pt.compute((3,), lambda i: z() * B[i] + A[i] * B[i] + z[()], name="C")
    assert [t.name for t in C.op.input_tensors] == ["z", "B", "A"]
    mod = pt.build(pt.create_schedule(C.op), [A, B, z, C])
    a, b = np.arange(3, dtype="float32"), np.full(3, 2.0, "float32")
    np.testing.assert_allclose(mod(a, b, np.array(0.5, "float32")), 0.5 * b + a * b + 0.5)


# ---------------------------------------------------------------- uint32 / uint64


@pytest.mark.parametrize("dt", ["uint32", "uint64"])
def test_unsigned_wide_dtypes(dt):
    A, B = pt.placeholder((6,), dt, name="A"), pt.placeholder((6,), dt, name="B")
    k = pt.reduce_axis((0, 6), name="k")
    C = pt.compute((6,), lambda i: (A[i] * B[i] + 7) // 3 % 1000 - A[i], name="C")
    M = pt.compute((), lambda: pt.max(A[k], axis=k), name="M")
    L = pt.compute((), lambda: pt.min(A[k], axis=k), name="L")
    mod = pt.build(pt.create_schedule([C.op, M.op, L.op]), [A, B, C, M, L])
    top = np.iinfo(dt).max
    a = np.array([1, 2, top, 5, 0, 2**31 + 3], dt)
    b = np.array([3, 4, 1, 2, 9, 2], dt)
    c, m, low = mod(a, b)
    with np.errstate(over="ignore"):  # unsigned arithmetic wraps, in C as in numpy
        ref = (a * b + np.array(7, dt)) // np.array(3, dt) % np.array(1000, dt) - a
    np.testing.assert_array_equal(c, ref)
    assert (m, low) == (top, 0)
    with pytest.raises(TypeError, match=f"argument A: dtype int64, expected {dt}"):
        mod(a.astype("int64"), b)


def test_validate_and_profile_take_scalar_arguments():
    alpha = pt.var("alpha", "float64")
    B = pt.placeholder((5,), "float64", name="B")
    C = pt.compute((5,), lambda i: alpha * B[i], name="C")
    mod = pt.build(pt.create_schedule(C.op), [B, alpha, C])
    b = np.arange(5.0)
    assert pt.validate(mod, lambda x, al: al * x, [b, 2.0]).ok
    assert not pt.validate(mod, lambda x, al: al * x + 1, [b, 2.0]).ok
    with pytest.raises(TypeError, match=r"takes 2 input\(s\) \(B, alpha\), got 1"):
        pt.validate(mod, lambda x: x, [b])
    assert [e.stage for e in mod.profile(b, 2.0, repeat=2).entries] == ["C"]


def test_scalar_arguments_under_emulation():
    t = pt.Target("aarch64-neon")
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    alpha, beta = pt.var("alpha", "float64"), pt.var("beta", "float32")
    n = pt.var("n")
    B = pt.placeholder((n,), "float32", name="B")
    C = pt.compute((n,), lambda i: pt.cast("float32", alpha) * B[i] + beta, name="C")
    mod = pt.build(pt.create_schedule(C.op), [alpha, B, beta, C], target=t)
    b = np.arange(7, dtype="float32")
    np.testing.assert_allclose(mod(0.5, b, -1.0), 0.5 * b - 1.0)


def test_tuple_reduction_into_float16_is_refused():
    def combine(x, y):
        return x[0] + y[0], x[1] + y[1]

    def identity(t0, t1):
        return pt.const(0, t0), pt.const(0, t1)

    pair_sum = pt.comm_reducer(combine, identity, name="pair_sum")
    A = pt.placeholder((3, 4), "float16", name="A")
    k = pt.reduce_axis((0, 4), name="k")
    S, T = pt.compute((3,), lambda i: pair_sum((A[i, k], A[i, k] * A[i, k]), axis=k), name="S")
    with pytest.raises(pt.ScheduleError, match="a tuple reduction into float16/bfloat16"):
        pt.build(pt.create_schedule(S.op), [A, S, T])
