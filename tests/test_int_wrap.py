"""Integer arithmetic wraps, as numpy's does: in the type C computes in (int32 for
int8/int16/uint8), never folded or compiled on the assumption that it cannot overflow.
Index arithmetic over loops and sizes is still simplified as exact."""

from __future__ import annotations

import numpy as np
import pytest
from fuzzing import FUZZ
from hypothesis import given
from hypothesis import strategies as st

import pypto as pt

INT32 = np.iinfo(np.int32)


def _build(outs, args, vectorize=True):
    s = pt.create_schedule([t.op for t in outs])
    if vectorize:
        for t in outs:
            s[t].vectorize(t.op.axis[0])
    return pt.build(s, args)


def test_a_comparison_after_an_overflow_is_not_folded():
    A = pt.placeholder((8,), "int32", name="A")
    B = pt.compute((8,), lambda i: pt.cast("int32", A[i] + 1 > A[i]), name="B")
    C = pt.compute((8,), lambda i: A[i] * 65536 * 65536 + A[i] * 3 - 5, name="C")
    mod = _build([B, C], [A, B, C])
    a = np.array([INT32.max, 0, -1, 5, INT32.min, 7, -(2**30), 2**30], np.int32)
    b, c = mod(a)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(b, (a + np.int32(1)) > a)
        np.testing.assert_array_equal(c, a * np.int32(65536) * np.int32(65536) + a * 3 - 5)
    assert "pt_wadd_i32" in mod.source and "A[i] * 3" not in mod.source


def test_index_arithmetic_is_still_simplified_as_exact():
    n = pt.var("n")
    A = pt.placeholder((n,), "int32", name="A")
    B = pt.compute((n,), lambda i: pt.select(i + 1 > i, A[i] + 1, A[i]), name="B")
    text = str(pt.lower(pt.create_schedule(B.op), [A, B]))
    assert "select" not in text and "i + 1 > i" not in text  # folded: loop counters
    a = np.array([INT32.max, 3], np.int32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(_build([B], [A, B])(a), a + np.int32(1))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_constants_fold_with_wrapping(dtype):
    # found by the fuzz for int64: 1 + INT64_MAX folded to a literal C cannot hold
    info = np.iinfo(dtype)
    A = pt.placeholder((4,), dtype, name="A")
    top = pt.const(int(info.max), dtype)
    B = pt.compute((4,), lambda i: A[i] * 0 + top + 1, name="B")
    C = pt.compute((4,), lambda i: pt.select(A[i] > 1 + top, A[i], 1 + top - 1), name="C")
    b, c = _build([B, C], [A, B, C])(np.array([0, 5, -1, info.min], dtype))
    np.testing.assert_array_equal(b, [info.min] * 4)
    np.testing.assert_array_equal(c, [0, 5, -1, info.max])


@pytest.mark.parametrize("dtype", ["int64", "uint32", "uint64"])
def test_wide_and_unsigned_types_wrap(dtype):
    info = np.iinfo(dtype)
    A = pt.placeholder((6,), dtype, name="A")
    B = pt.compute((6,), lambda i: A[i] * 3 - 7, name="B")
    C = pt.compute((6,), lambda i: pt.cast("int32", A[i] - 1 < A[i]), name="C")
    a = np.array([info.max, info.min, 0, 1, info.max // 2 + 1, 12345], dtype)
    b, c = _build([B, C], [A, B, C])(a)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(b, a * a.dtype.type(3) - a.dtype.type(7))
        np.testing.assert_array_equal(c, (a - a.dtype.type(1)) < a)


def test_narrow_types_compute_in_int32_and_wrap_there():
    A = pt.placeholder((5,), "int8", name="A")
    # int8 values widen to int32 (C's promotion): this product cannot overflow ...
    P = pt.compute((5,), lambda i: pt.cast("int32", A[i]) * pt.cast("int32", A[i]), name="P")
    # ... this one can, and wraps in int32
    Q = pt.compute((5,), lambda i: pt.cast("int32", A[i]) * (1 << 25), name="Q")
    mod = _build([P, Q], [A, P, Q])
    a = np.array([-128, 127, 3, -1, 64], np.int8)
    p, q = mod(a)
    wide = a.astype(np.int64)
    np.testing.assert_array_equal(p, wide * wide)
    np.testing.assert_array_equal(q, ((wide << 25) + 2**31) % 2**32 - 2**31)
    assert "pt_wmul_i32(((int32_t)(A[" in mod.source  # only where it can wrap
    assert "pt_wmul" not in mod.source.split("Q[")[0].split("P[")[-1]


# every integer dtype: int8, int16 and uint8 wrap in their own width, as numpy's
# (the C computes them in int32 and truncates)
WRAPPING = ["int8", "uint8", "int16", "int32", "int64", "uint32"]
_OPS = {
    "add": (lambda x, y: x + y, np.add),
    "sub": (lambda x, y: x - y, np.subtract),
    "mul": (lambda x, y: x * y, np.multiply),
    "min": (lambda x, y: pt.min(x, y), np.minimum),
    "max": (lambda x, y: pt.max(x, y), np.maximum),
    "and": (lambda x, y: x & y, np.bitwise_and),
    "or": (lambda x, y: x | y, np.bitwise_or),
    "xor": (lambda x, y: x ^ y, np.bitwise_xor),
    # shifts by any amount, the type's width and more included (numpy gives 0 or the sign)
    "shl": (lambda x, y: x << y, np.left_shift),
    "shr": (lambda x, y: x >> y, np.right_shift),
}


def _edges(dtype: str) -> list:
    info = np.iinfo(dtype)
    small = [0, 1, 7, 65536] + ([-1, -7] if info.min < 0 else [3, 2**20])
    small = [v for v in small if info.min <= v <= info.max]  # a literal must fit
    return small + [int(info.max), int(info.min), int(info.max) // 2 + 1]


@st.composite
def _expr_tree(draw, dtype, depth=3):
    """(pt builder, numpy evaluator, text) over the inputs A, B and some constants."""
    kinds = ["op", "cmp", "div", "not", "shift", "abs"] if depth else []
    kind = draw(st.sampled_from(["A", "B", "const", *kinds]))
    one = np.dtype(dtype).type(1)
    if kind in ("A", "B"):
        k = 0 if kind == "A" else 1
        return (lambda ins, i, k=k: ins[k][i]), (lambda arrs, k=k: arrs[k]), kind
    if kind == "const":
        v = draw(st.sampled_from(_edges(dtype)))
        return (
            (lambda ins, i, v=v: pt.const(v, dtype)),
            (lambda arrs, v=v: np.dtype(dtype).type(v)),
            str(v),
        )
    fa, na, ta = draw(_expr_tree(dtype, depth - 1))
    if kind == "not":
        return (lambda ins, i: ~fa(ins, i)), (lambda arrs: np.invert(na(arrs))), f"~{ta}"
    if kind == "abs":  # abs(INT_MIN) wraps to INT_MIN, as numpy's
        return (lambda ins, i: pt.abs(fa(ins, i))), (lambda arrs: np.abs(na(arrs))), f"abs({ta})"
    if kind == "shift":  # by a constant: the plain C operator where it cannot overflow
        c = draw(st.sampled_from([0, 1, 3, 31, 32, 63]))
        op = draw(st.sampled_from(["shl", "shr"]))
        f, g = _OPS[op]
        text = f"{op}({ta}, {c})"
        return (lambda ins, i: f(fa(ins, i), c)), (lambda arrs: g(na(arrs), one * c)), text
    if kind == "div":  # floor division and modulo by a positive constant
        c = draw(st.sampled_from([c for c in (1, 3, 7, 65536) if c <= np.iinfo(dtype).max]))
        if draw(st.booleans()):
            return (lambda ins, i: fa(ins, i) // c), (lambda arrs: na(arrs) // c), f"{ta} // {c}"
        return (lambda ins, i: fa(ins, i) % c), (lambda arrs: na(arrs) % c), f"{ta} % {c}"
    fb, nb, tb = draw(_expr_tree(dtype, depth - 1))
    if kind == "cmp":  # x > y ? x : y - 1, a comparison after arithmetic
        return (
            lambda ins, i: pt.select(fa(ins, i) > fb(ins, i), fa(ins, i), fb(ins, i) - 1),
            lambda arrs: np.where(na(arrs) > nb(arrs), na(arrs), nb(arrs) - one),
            f"({ta} > {tb} ? {ta} : {tb} - 1)",
        )
    op = draw(st.sampled_from(sorted(_OPS)))
    f, g = _OPS[op]
    return (
        (lambda ins, i: f(fa(ins, i), fb(ins, i))),
        (lambda arrs: g(na(arrs), nb(arrs))),
        f"{op}({ta}, {tb})",
    )


@FUZZ
@given(data=st.data(), dtype=st.sampled_from(WRAPPING), vec=st.booleans())
def test_fuzz_integer_expressions_agree_with_numpy(data, dtype, vec):
    build, ref, text = data.draw(_expr_tree(dtype), label="tree")
    A = pt.placeholder((16,), dtype, name="A")
    B = pt.placeholder((16,), dtype, name="B")
    C = pt.compute((16,), lambda i: pt.cast(dtype, build((A, B), i)), name="C")
    info, rng = np.iinfo(dtype), np.random.default_rng(0)
    edge = np.resize(np.array(_edges(dtype), dtype), 8)
    a = np.concatenate([edge, rng.integers(info.min, info.max, 8, dtype=dtype)])
    b = np.concatenate([edge[::-1], rng.integers(info.min, info.max, 8, dtype=dtype)])
    with np.errstate(over="ignore"):
        want = np.broadcast_to(ref((a, b)), (16,)).astype(dtype)
    used = [t for t in (A, B) if t in C.op.input_tensors]  # an expression may read one
    got = _build([C], [*used, C], vec)(*[x for t, x in ((A, a), (B, b)) if t in used])
    np.testing.assert_array_equal(got, want, err_msg=f"{dtype}: {text}")


def test_nested_divisions_combine_only_into_a_divisor_the_type_holds():
    # found by the fuzz above: (B // 65536) // 65536 had become B // 2**32, a divisor of 0
    # in int32 (the kernel died of an illegal instruction)
    B = pt.placeholder((6,), "int32", name="B")
    C = pt.compute((6,), lambda i: B[i] // 65536 // 65536 + B[i] // 4 // 8, name="C")
    mod = _build([C], [B, C])
    b = np.array([INT32.max, INT32.min, 0, -1, 65536 * 3, -(2**20)], np.int32)
    np.testing.assert_array_equal(mod(b), b // 65536 // 65536 + b // 32)
    assert "4294967296" not in mod.source and "pt_floordiv_i32(B[i], 32)" in mod.source


def test_division_by_minus_one_negates_without_trapping():
    # C's INT_MIN / -1 overflows (x86 traps); numpy's wraps to INT_MIN
    A = pt.placeholder((4,), "int32", name="A")
    B = pt.compute((4,), lambda i: A[i] // -1, name="B")
    C = pt.compute((4,), lambda i: A[i] % -1, name="C")
    mod = _build([B, C], [A, B, C])
    a = np.array([INT32.min, 5, -7, 0], np.int32)
    b, c = mod(a)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(b, a // np.int32(-1))
    np.testing.assert_array_equal(c, a % np.int32(-1))
    assert "pt_floordiv" not in mod.source and "pt_wsub_i32(0, A[i])" in mod.source


def test_a_remainder_is_not_rewritten_into_a_sum_that_wraps():
    # found by the fuzz: (max(A, 1) - 1) % 3 had become (max(A, 1) + 2) % 3, which
    # wraps at INT32_MAX (and then takes C's remainder of a negative number)
    A = pt.placeholder((3,), "int32", name="A")
    B = pt.compute((3,), lambda i: (pt.max(A[i], 1) - 1) % 3, name="B")
    a = np.array([INT32.max, INT32.min, 7], np.int32)
    np.testing.assert_array_equal(_build([B], [A, B])(a), (np.maximum(a, 1) - 1) % 3)


def test_narrow_types_wrap_in_their_own_width_as_numpy():
    # int8, int16 and uint8 had computed in int32 without wrapping until the store:
    # (100 + 100) // 2 was 100 (numpy: -28), int32(int8(200)) was 200 (numpy: -56)
    I8 = pt.placeholder((4,), "int8", name="I8")
    U8 = pt.placeholder((4,), "uint8", name="U8")
    A = pt.placeholder((4,), "int32", name="A")
    outs = [
        pt.compute((4,), lambda i: (I8[i] + I8[i]) // 2 + pt.abs(I8[i]), name="P"),
        pt.compute((4,), lambda i: pt.cast("int32", pt.cast("int8", A[i])), name="Q"),
        pt.compute((4,), lambda i: pt.select(U8[i] - 1 > 0, 1, 0), name="R"),
        pt.compute((4,), lambda i: (I8[i] << I8[i]) // 3, name="S"),
        pt.compute((4,), lambda i: pt.cast("int16", I8[i]) * 300 // 7, name="T"),
    ]
    mod = _build(outs, [I8, U8, A, *outs])
    i8 = np.array([100, -100, -128, 7], np.int8)
    u8 = np.array([0, 1, 2, 255], np.uint8)
    a = np.array([200, -1, 300, -129], np.int32)
    p, q, r, s, t = mod(i8, u8, a)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(p, (i8 + i8) // 2 + np.abs(i8))
        np.testing.assert_array_equal(q, a.astype(np.int8).astype(np.int32))
        np.testing.assert_array_equal(r, np.where(u8 - np.uint8(1) > 0, 1, 0))
        np.testing.assert_array_equal(s, np.left_shift(i8, i8) // np.int8(3))
        np.testing.assert_array_equal(t, i8.astype(np.int16) * np.int16(300) // np.int16(7))
    assert "pt_wadd" not in mod.source  # truncated instead: the int32 sum cannot overflow


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_abs_of_the_most_negative_value_wraps(dtype):
    # C's abs(INT_MIN) is undefined: gcc took abs(x) < 1 as false and abs(x) % 3 as
    # C's remainder of a non-negative number
    A = pt.placeholder((4,), dtype, name="A")
    B = pt.compute((4,), lambda i: pt.abs(A[i]) % 3 + pt.select(pt.abs(A[i]) < 1, 100, 0))
    info = np.iinfo(dtype)
    a = np.array([info.min, -5, 7, info.max], dtype)
    with np.errstate(over="ignore"):
        want = np.abs(a) % 3 + np.where(np.abs(a) < 1, 100, 0)
    np.testing.assert_array_equal(_build([B], [A, B])(a), want)


def test_a_quotient_and_remainder_recombine():
    """``f // 16 * 16 + f % 16`` is ``f``: a fused loop's index of a row-major tensor is
    the fused counter itself (no division left for the compiler to keep)."""
    A = pt.placeholder((4, 16), "float32", name="A")
    B = pt.compute((4, 16), lambda i, j: A[i, j] * 2, name="B")
    s = pt.create_schedule(B.op)
    s[B].fuse(*B.op.axis)
    mod = pt.build(s, [A, B])
    assert "/ 16" not in mod.source and "% 16" not in mod.source
    a = np.arange(64, dtype=np.float32).reshape(4, 16)
    np.testing.assert_array_equal(mod(a), a * 2)
    # values of data (floor division, negative operands): equal to x where nothing wraps
    X = pt.placeholder((6,), "int64", name="X")
    Y = pt.compute((6,), lambda i: X[i] // 4 * 4 + X[i] % 4, name="Y")
    x = np.array([-9, -4, -1, 0, 7, 2**40 + 3], np.int64)
    np.testing.assert_array_equal(_build([Y], [X, Y])(x), x)
