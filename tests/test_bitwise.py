"""Bitwise operators on integers (``& | ^ ~ << >>``, TVM's ``bitwise_*`` and
``shift_*``): numpy's results on every integer dtype, shifts past the width
included; logical on booleans; refused on floats."""

import os

import numpy as np
import pytest

import pypto as pt

INT_DTYPES = ["int8", "uint8", "int16", "int32", "int64", "uint32", "uint64"]

_BINARY = {
    "&": (lambda x, y: x & y, np.bitwise_and),
    "|": (lambda x, y: x | y, np.bitwise_or),
    "^": (lambda x, y: x ^ y, np.bitwise_xor),
    "<<": (lambda x, y: x << y, np.left_shift),
    ">>": (lambda x, y: x >> y, np.right_shift),
}


def _build(outs, args):
    return pt.build(pt.create_schedule([t.op for t in outs]), args)


def _elementwise(f, A, B, name):
    return pt.compute(A.shape, lambda i: f(A[i], B[i]), name=name)


def _operands(dtype):
    info = np.iinfo(dtype)
    low = -1 if info.min < 0 else 2
    a = np.array([0, 1, low, info.max, info.min, 5, 100, 7], dtype)
    # shift amounts below, at and past the width, and negative ones for signed types
    amounts = [0, 1, 3, info.bits - 1, info.bits, 33, 2, 64]
    if info.min < 0:
        amounts[5] = -1
    return a, np.array(amounts, dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_operators_agree_with_numpy(dtype):
    a, b = _operands(dtype)
    A = pt.placeholder((8,), dtype, name="A")
    B = pt.placeholder((8,), dtype, name="B")
    outs = [_elementwise(f, A, B, f"C{k}") for k, (f, _) in enumerate(_BINARY.values())]
    outs.append(pt.compute((8,), lambda i: ~A[i], name="N"))
    got = _build(outs, [A, B, *outs])(a, b)
    with np.errstate(all="ignore"):
        want = [g(a, b) for _, g in _BINARY.values()] + [np.invert(a)]
    for sym, x, y in zip([*_BINARY, "~"], got, want):
        np.testing.assert_array_equal(x, y, err_msg=f"{dtype} {sym}")


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint32", "int64"])
@pytest.mark.parametrize("amount", [0, 5, 31, 32, 63])
def test_shifts_by_a_constant(dtype, amount):
    a, _ = _operands(dtype)
    A = pt.placeholder((8,), dtype, name="A")
    L = pt.compute((8,), lambda i: A[i] << amount, name="L")
    R = pt.compute((8,), lambda i: A[i] >> amount, name="R")
    left, right = _build([L, R], [A, L, R])(a)
    c = np.array(amount, dtype)
    np.testing.assert_array_equal(left, np.left_shift(a, c))
    np.testing.assert_array_equal(right, np.right_shift(a, c))


def test_invert_of_an_integer_is_its_complement_not_a_boolean():
    # ~x had been the logical negation, a bool: [True, False, False, False] here
    A = pt.placeholder((4,), "int32", name="A")
    B = pt.compute((4,), lambda i: ~A[i], name="B")
    assert B.dtype == "int32"
    a = np.array([0, 1, 5, -1], np.int32)
    np.testing.assert_array_equal(_build([B], [A, B])(a), [-1, -2, -6, 0])
    assert str(B.op.body) == "~A[i]"


def test_on_booleans_the_operators_are_logical():
    A = pt.placeholder((4,), "int32", name="A")
    B = pt.compute(
        (4,), lambda i: pt.select(((A[i] > 0) & (A[i] < 3)) ^ ~(A[i] != 5), 1, 0), name="B"
    )
    a = np.array([0, 1, 5, 7], np.int32)
    want = np.where(((a > 0) & (a < 3)) ^ ~(a != 5), 1, 0)
    np.testing.assert_array_equal(_build([B], [A, B])(a), want)


def test_non_integer_operands_are_refused_with_the_operator_named():
    F = pt.placeholder((4,), "float32", name="F")
    I8 = pt.placeholder((4,), "int8", name="I8")
    with pytest.raises(TypeError, match=r"'&' needs integer or boolean operands, got float32"):
        pt.compute((4,), lambda i: F[i] & 1, name="X")
    with pytest.raises(TypeError, match=r"'<<' needs integer operands, got bool"):
        pt.compute((4,), lambda i: (F[i] > 0) << (F[i] > 1), name="X")
    with pytest.raises(TypeError, match=r"'~' needs an integer or boolean operand, got float32"):
        pt.compute((4,), lambda i: ~F[i], name="X")
    with pytest.raises(TypeError, match=r"mixed dtypes int8 and uint8"):
        U8 = pt.placeholder((4,), "uint8", name="U8")
        pt.compute((4,), lambda i: I8[i] ^ U8[i], name="X")


def test_tvm_helpers_and_whole_tensor_operators():
    A = pt.placeholder((2, 4), "int32", name="A")
    B = pt.placeholder((4,), "int32", name="B")
    C = pt.compute(
        (2, 4),
        lambda i, j: (
            pt.bitwise_or(pt.shift_left(A[i, j], 2), pt.bitwise_not(B[j]))
            + pt.bitwise_xor(pt.shift_right(A[i, j], 1), pt.bitwise_and(B[j], 6))
        ),
        name="C",
    )
    D = (A & B) | (1 << B) ^ ~A >> 2  # broadcasting, as numpy's and TVM's topi
    assert D.op.name == "T_bitwise_or" and (~A).op.name == "T_bitwise_not"
    a = np.arange(-4, 4, dtype=np.int32).reshape(2, 4)
    b = np.array([1, 2, 3, 30], np.int32)
    c, d = _build([C, D], [A, B, C, D])(a, b)
    np.testing.assert_array_equal(c, ((a << 2) | ~b) + ((a >> 1) ^ (b & 6)))
    np.testing.assert_array_equal(d, (a & b) | (1 << b) ^ ~a >> 2)
    with pytest.raises(TypeError, match=r"pt.shift_left takes int or uint operands, got float32"):
        pt.shift_left(pt.const(1.0, "float32"), 1)
    with pytest.raises(TypeError, match=r"pt.logical_and takes bool operands, got int32"):
        pt.logical_and(A[0, 0], A[0, 1])
    assert str(pt.logical_not(A[0, 0] > 1)) == "!(A[0, 0] > 1)"


def test_constants_fold_as_the_kernel_computes():
    x = pt.var("x", "int32")
    A = pt.placeholder((3,), "int32", name="A")
    five, minus_eight, three = (pt.const(v, "int32") for v in (5, -8, 3))
    B = pt.compute((3,), lambda i: A[i] + (five << 40) + (minus_eight >> 40) + (three << 30))
    mod = _build([B], [A, B])
    # << past the width is 0, >> past it the sign, and 3 << 30 wraps to INT32_MIN + 2**30
    np.testing.assert_array_equal(mod(np.zeros(3, np.int32)), [-1 - 2**30] * 3)
    assert "pt_shl" not in mod.source and "pt_shr" not in mod.source
    assert str((x << 2) + 1 & 3) == "((x << 2) + 1) & 3"  # C and Python parse it alike


def test_shifted_and_masked_indices_are_proved_in_bounds():
    A = pt.placeholder((4,), "float32", name="A")
    B = pt.compute((16,), lambda i: A[i >> 2] + A[i & 3] * A[(i << 1) >> 3], name="B")
    s = pt.create_schedule(B.op)
    _, xi = s[B].split(B.op.axis[0], 8)
    s[B].vectorize(xi)
    mod = pt.build(s, [A, B])
    a, i = np.array([1, 2, 3, 4], np.float32), np.arange(16)
    np.testing.assert_array_equal(mod(a), a[i >> 2] + a[i & 3] * a[(i << 1) >> 3])
    assert "pt_checked_index" not in mod.source and "pt_shl" not in mod.source
    C = pt.compute((16,), lambda i: A[i >> 1], name="C")
    with pytest.raises(pt.ScheduleError, match=r"A\[i >> 1\] reads past dimension 0 of A"):
        pt.build(pt.create_schedule(C.op), [A, C])


def test_a_shape_with_shifts_survives_export(tmp_path):
    n = pt.var("n")
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n >> 1,), lambda i: A[i * 2] + A[i * 2 + 1], name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    path = os.path.join(tmp_path, "pairs.so")
    mod.export_library(path)
    a = np.arange(7, dtype=np.float32)
    np.testing.assert_array_equal(pt.load_module(path)(a), [1, 5, 9])


def _unsigned_bits(a):
    return a.view("u" + a.dtype.name.removeprefix("u")).astype(object)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_popcount_and_clz_count_the_bits_as_tvm(dtype):
    """``pt.popcount`` (in the operand's dtype) and ``pt.clz`` (an int32; of 0, the
    width) of an integer's bits as unsigned: 8 set bits and no leading zero for an
    int8 -1 (numpy's bitwise_count counts |x|). Vectorized and scalar, and of a sum
    that wraps."""
    info = np.iinfo(dtype)
    a = np.random.default_rng(5).integers(info.min, info.max, 40, dtype=dtype, endpoint=True)
    a[:6] = [0, 1, info.max, info.min, info.max // 2, 2 if info.min == 0 else -1]
    A = pt.placeholder((40,), dtype, name="A")
    P = pt.compute((40,), lambda i: pt.popcount(A[i]), name="P")
    Z = pt.compute((40,), lambda i: pt.clz(A[i]), name="Z")
    W = pt.compute((40,), lambda i: pt.popcount(A[i] + A[i]), name="W")
    s = pt.create_schedule([P.op, Z.op, W.op])
    for T in (P, Z):
        s[T].vectorize(s[T].split(T.op.axis[0], 8)[1])
    p, w, z = np.zeros(40, dtype), np.zeros(40, dtype), np.zeros(40, "int32")
    pt.build(s, [A, P, Z, W])(a, p, z, w)
    assert (P.dtype, Z.dtype) == (dtype, "int32")
    assert p.tolist() == [bin(x).count("1") for x in _unsigned_bits(a)]
    assert z.tolist() == [info.bits - x.bit_length() for x in _unsigned_bits(a)]
    with np.errstate(over="ignore"):
        assert w.tolist() == [bin(x).count("1") for x in _unsigned_bits(a + a)]


def test_bit_counts_refuse_floats_and_booleans():
    F, Bo = pt.placeholder((4,), "float32", name="F"), pt.placeholder((4,), "bool", name="Bo")
    with pytest.raises(TypeError, match="pt.popcount needs an integer operand, got float32"):
        pt.popcount(F[0])
    with pytest.raises(TypeError, match="pt.clz needs an integer operand, got bool"):
        pt.clz(Bo[0])
