"""Values as numpy computes them, whatever folds them: unsigned division by the largest
value, wrapping on loop indices cast to narrower types, float32 constants, NaN in
folded min/max, -0.0, and float -> int conversions out of range."""

import numpy as np
import pytest

import pypto as pt


def _run(outs, ins=(), *arrays):
    return pt.build(pt.create_schedule([t.op for t in outs]), [*ins, *outs])(*arrays)


@pytest.mark.parametrize("dt", ["uint32", "uint64"])
def test_unsigned_division_by_the_largest_value_is_no_division_by_minus_one(dt):
    A = pt.placeholder((3,), dt, name="A")
    B = pt.placeholder((3,), dt, name="B")
    Q = pt.compute((3,), lambda i: A[i] // B[i], name="Q")
    R = pt.compute((3,), lambda i: A[i] % B[i], name="R")
    top = np.iinfo(dt).max
    a = np.array([1, 7, top - 1], dt)
    b = np.full(3, top, dt)
    q, r = _run([Q, R], [A, B], a, b)
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)


def test_loop_indices_cast_to_narrower_types_wrap_as_numpy():
    n = 64
    one, zero = pt.const(1, "int32"), pt.const(0, "int32")
    Z = pt.compute(
        (n,), lambda i: pt.select(pt.cast("int32", i) + 2147483600 > 0, one, zero), name="Z"
    )
    M = pt.compute(
        (n,), lambda i: pt.max(pt.cast("uint32", i % 3) - 4, pt.const(0, "uint32")), name="M"
    )
    Q = pt.compute((n,), lambda i: (pt.cast("uint32", i) - 3) // 5, name="Q")
    z, m, q = _run([Z, M, Q])
    i = np.arange(n)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(
            z, np.where(i.astype(np.int32) + np.int32(2147483600) > 0, 1, 0)
        )
        np.testing.assert_array_equal(m, (i % 3).astype(np.uint32) - np.uint32(4))
        np.testing.assert_array_equal(q, (i.astype(np.uint32) - np.uint32(3)) // np.uint32(5))


def test_constants_fold_as_the_code_computes():
    """float32 constants round to float32 at each step; NaN propagates through a folded
    max or min in either position, as at run time."""
    f32 = lambda v: pt.const(v, "float32")  # noqa: E731
    nan = float("nan")
    K = pt.compute((1,), lambda i: f32(1e8) + f32(1.0) - f32(1e8), name="K")
    E = pt.compute(
        (1,), lambda i: pt.select(f32(16777217.0) == f32(16777216.0), f32(1.0), f32(0.0)), name="E"
    )
    N = pt.compute(
        (4,),
        lambda i: pt.select(
            i == 0, pt.max(f32(1.0), f32(nan)),
            pt.select(i == 1, pt.min(f32(1.0), f32(nan)),
                      pt.select(i == 2, pt.max(f32(nan), f32(1.0)), pt.min(f32(nan), f32(1.0)))),
        ),
        name="N",
    )  # fmt: skip
    v = 2**60 + 2**36 + 1
    C = pt.compute((1,), lambda i: pt.cast("float32", pt.const(v, "uint64")), name="C")
    k, e, nn, c = _run([K, E, N, C])
    assert k[0] == np.float32(1e8) + np.float32(1) - np.float32(1e8) == 0.0
    assert e[0] == 1.0  # 16777217 is 16777216 in float32
    assert np.isnan(nn).all()
    assert c[0] == np.uint64(v).astype(np.float32)  # rounded once, not through float64


def test_negation_keeps_the_sign_of_zero():
    X = pt.placeholder((2,), "float32", name="X")
    Ng = pt.compute((2,), lambda i: -X[i], name="N")
    Q = pt.compute((2,), lambda i: 1.0 / -X[i], name="Q")
    mod = pt.build(pt.create_schedule([Ng.op, Q.op]), [X, Ng, Q])
    x = np.array([0.0, 2.0], np.float32)
    n, q = mod(x)
    assert np.signbit(n[0]) and n[1] == -2.0
    assert q[0] == -np.inf and q[1] == -0.5
    assert "N[i] = -X[i];" in mod.source  # not 0.0f - X[i]


@pytest.mark.parametrize("vectorize", [False, True])
def test_float_to_int_out_of_range_is_the_same_folded_vectorized_or_round_tripped(vectorize):
    """int32/int64: the type's minimum (x86's conversion, numpy's there); narrower types
    through int32, wrapping. Not what the C compiler makes of C's undefined conversion
    (gcc folds a constant NaN to 0 and (float)(int)x to truncf(x))."""
    vals = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, -0.0, -2.7, 1e10], np.float32)
    n = len(vals)
    X = pt.placeholder((n,), "float32", name="X")
    outs = {
        "I": pt.compute((n,), lambda i: pt.cast("int32", X[i]), name="I"),
        "L": pt.compute((n,), lambda i: pt.cast("int64", X[i]), name="L"),
        "R": pt.compute((n,), lambda i: pt.cast("float32", pt.cast("int32", X[i])), name="R"),
        "B": pt.compute((n,), lambda i: pt.cast("int8", X[i]), name="B"),
        "K": pt.compute((2,), lambda i: pt.cast("int32", pt.select(
            i == 0, pt.const(float("nan"), "float32"), pt.const(3e9, "float32"))), name="K"),
    }  # fmt: skip
    s = pt.create_schedule([t.op for t in outs.values()])
    if vectorize:
        for t in outs.values():
            s[t].vectorize(t.op.axis[0])
    got = dict(zip(outs, pt.build(s, [X, *outs.values()])(vals)))
    i32_min, i64_min = np.iinfo(np.int32).min, np.iinfo(np.int64).min
    fits32 = (vals >= -(2.0**31)) & (vals < 2.0**31)
    fits64 = (vals >= -(2.0**63)) & (vals < 2.0**63)
    with np.errstate(invalid="ignore"):
        i32 = np.where(fits32, np.trunc(np.where(fits32, vals, 0)), i32_min).astype(np.int32)
        i64 = np.where(fits64, np.trunc(np.where(fits64, vals, 0)), i64_min).astype(np.int64)
    np.testing.assert_array_equal(got["I"], i32)
    np.testing.assert_array_equal(got["L"], i64)
    np.testing.assert_array_equal(got["R"], i32.astype(np.float32))
    np.testing.assert_array_equal(got["B"], i32.astype(np.int8))
    np.testing.assert_array_equal(got["K"], [i32_min, i32_min])


def test_tvm_named_integer_functions_type_a_literal_as_the_operators_do():
    A = pt.placeholder((3,), "int8", name="A")
    a = np.array([-128, 100, -7], np.int8)
    fns = {
        "truncdiv": (lambda i: pt.truncdiv(A[i], -1), -a.astype(np.int32)),
        "shift_left": (lambda i: pt.shift_left(A[i], 1), a.astype(np.int32) << 1),
        "bitwise_and": (lambda i: pt.bitwise_and(A[i], 3), a & 3),
        "truncmod": (lambda i: pt.truncmod(A[i], 3), np.fmod(a, 3)),
    }
    for name, (f, want) in fns.items():
        T = pt.compute((3,), f, name="T")
        assert T.dtype == "int8", name
        got = pt.build(pt.create_schedule(T.op), [A, T])(a)
        np.testing.assert_array_equal(got, want.astype(np.int8), err_msg=name)  # wraps


def test_arithmetic_on_booleans_is_refused_naming_the_logic_operators():
    A = pt.placeholder((2,), "int32", name="A")
    with pytest.raises(TypeError, match=r"'\+' on booleans .* use '\|'"):
        (A[0] > 0) + (A[0] > 1)
    with pytest.raises(TypeError, match="'-' on booleans"):
        -(A[0] > 0)


def test_a_reducer_whose_identity_or_combine_changes_the_dtype_is_refused():
    A = pt.placeholder((4,), "float32", name="A")
    k = pt.reduce_axis((0, 4), name="k")
    r = pt.comm_reducer(lambda x, y: x + y, lambda t: pt.const(1000, "int32"), name="r")
    with pytest.raises(TypeError, match="r: its identity is int32, the reduction float32"):
        r(A[k], axis=k)
    c = pt.comm_reducer(lambda x, y: pt.cast("int32", x + y), lambda t: pt.const(0, t), name="c")
    with pytest.raises(TypeError, match="c: its fcombine is int32, the reduction float32"):
        c(A[k], axis=k)
    with pytest.raises(TypeError, match=r"pt.max\(a\) needs a second operand"):
        pt.max(A[0])


def test_clear_refusals_at_the_boundary():
    """A size only inside an expression, a cache_read without readers, a float scalar
    beyond every float, an output that is not C-contiguous: each refused naming what to
    do (they built and then failed every call, raised a bare ValueError from min(), a
    bare OverflowError, or pointed to a copy that would take the results)."""
    m = pt.var("m")
    A = pt.placeholder((m * 4,), "float32", name="A")
    B = pt.compute((m * 4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(pt.ScheduleError, match="size variable.* m appear in argument shapes only"):
        pt.build(pt.create_schedule(B.op), [A, B])
    X = pt.placeholder((8,), "float32", name="X")
    Y = pt.compute((8,), lambda i: X[i] + 1.0, name="Y")
    with pytest.raises(pt.ScheduleError, match="cache_read: no readers given"):
        pt.create_schedule(Y.op).cache_read(X, "local", [])
    alpha = pt.var("alpha", "float64")
    Z = pt.compute((8,), lambda i: X[i] * pt.cast("float32", alpha), name="Z")
    mod = pt.build(pt.create_schedule(Z.op), [X, alpha, Z])
    with pytest.raises(ValueError, match="argument alpha: an integer of 401 digits is too large"):
        mod(np.ones(8, np.float32), 10**400)
    P = pt.placeholder((4, 4), "float32", name="P")
    Q = pt.compute((4, 4), lambda i, j: P[i, j] + 1.0, name="Q")
    mod = pt.build(pt.create_schedule(Q.op), [P, Q])
    with pytest.raises(
        ValueError, match="argument Q is not C-contiguous; pass a C-contiguous array it"
    ):
        mod(np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32, order="F"))
