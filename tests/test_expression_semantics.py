"""Scalar expressions computed as numpy computes them, in every schedule and on every
target here: integer operands widened before the operation, narrow sums wrapped before
they widen, an explicit 16-bit cast rounding, float -> int -> float of -0.5 giving +0.0,
``pow(x, 0.5)`` as numpy's ``sqrt``, and comparisons with literals no type holds."""

import numpy as np
import pytest

import pypto as pt
from pypto import emulate

TARGETS = [t for t in ("host", "generic", "x86-avx2") if pt.Target(t).can_run()]
# where the hardware's conversions differ from x86's: aarch64 too, under qemu
CONVERTING = TARGETS + [t for t in ("aarch64-neon",) if not emulate.why_not_runnable(pt.Target(t))]


def _schedules(out):
    """The plain loop, a vectorized one with a tail and an unrolled one with a tail."""
    s = pt.create_schedule(out.op)
    yield "plain", s
    s = pt.create_schedule(out.op)
    _, xi = s[out].split(out.op.axis[0], factor=8)
    s[out].vectorize(xi)
    yield "vectorized", s
    s = pt.create_schedule(out.op)
    _, xi = s[out].split(out.op.axis[0], factor=5)
    s[out].unroll(xi)
    yield "unrolled", s


def _check(out, args, arrays, want, target):
    for name, s in _schedules(out):
        got = pt.build(s, [*args, out], target=target)(*arrays)
        np.testing.assert_array_equal(got, want, err_msg=f"{name} on {target}")
        if got.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)


@pytest.mark.parametrize("target", TARGETS)
def test_an_operand_widens_before_the_operation_also_against_a_constant(target):
    # Y_int32 + int64 1 was C's int32 sum (2147483647 + 1 wrapped to its minimum)
    n = 11
    Y = pt.placeholder((n,), "int32", name="Y")
    U = pt.placeholder((n,), "uint32", name="U")
    y = np.array([2**31 - 1, -5, -(2**31), 7, 0, 1, -1, 3, 2**30, -(2**30), 9], np.int32)
    u = np.array([2**32 - 1, 5, 2**31, 0, 1, 2, 3, 4, 5, 6, 7], np.uint32)
    forms = [
        (lambda i: Y[i] + pt.const(1, "int64"), y.astype(np.int64) + 1),
        (lambda i: pt.const(3, "int64") * Y[i], y.astype(np.int64) * 3),
        (lambda i: U[i] * pt.const(2, "uint64"), u.astype(np.uint64) * 2),
        (lambda i: U[i] + pt.const(-1, "int64"), u.astype(np.int64) - 1),
    ]
    for body, want in forms:
        _check(pt.compute((n,), body, name="C"), [Y, U], [y, u], want, target)


@pytest.mark.parametrize("target", TARGETS)
def test_a_narrow_sum_wraps_before_it_widens(target):
    # the simplifier had merged (A_u8 + 18) + B_i16 into one int16 sum: 272, not 16
    n = 9
    A = pt.placeholder((n,), "uint8", name="A")
    B = pt.placeholder((n,), "int16", name="B")
    S = pt.placeholder((n,), "int16", name="S")
    W = pt.placeholder((n,), "int32", name="W")
    a = np.array([254, 250, 1, 255, 0, 238, 237, 100, 200], np.uint8)
    b = np.array([0, 1, -1, 300, -300, 5, 6, 7, 8], np.int16)
    s = np.array([-(2**15), 20000, 3, 2**15 - 1, -1, 0, 16384, -16385, 12], np.int16)
    w = np.arange(n, dtype=np.int32)
    forms = [
        (lambda i: (A[i] + 18) + B[i], (a + np.uint8(18)).astype(np.int16) + b),
        (lambda i: A[i] * 2 + B[i], (a * np.uint8(2)).astype(np.int16) + b),
        (lambda i: (S[i] + S[i]) + W[i], (s + s).astype(np.int32) + w),
        (lambda i: pt.truncmod(S[i] + S[i], 7) + W[i], np.fmod(s + s, 7).astype(np.int32) + w),
    ]
    for body, want in forms:
        _check(pt.compute((n,), body, name="C"), [A, B, S, W], [a, b, s, w], want, target)


@pytest.mark.parametrize("target", TARGETS)
def test_a_cast_to_the_same_16_bit_type_rounds_there(target):
    # the cast was dropped: (A + B) - B of 60000s was 60000, not inf as numpy's
    n = 6
    A = pt.placeholder((n,), "float16", name="A")
    B = pt.placeholder((n,), "float16", name="B")
    a = np.array([60000, 2049, 1, 0.1, -60000, 3], np.float16)
    b = np.array([60000, 1, 1e-4, 0.2, -60000, 2], np.float16)
    with np.errstate(over="ignore"):
        want = (a + b) - b
    C = pt.compute((n,), lambda i: pt.cast("float16", A[i] + B[i]) - B[i], name="C")
    _check(C, [A, B], [a, b], want, target)


@pytest.mark.parametrize("target", CONVERTING)
@pytest.mark.parametrize("inner", ["int32", "int64"])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_float_to_int_and_back_gives_plus_zero(target, inner, dt):
    # gcc folded (float)(int64_t)x into truncf(x): -0.0 for -0.5 (x86-avx2, unrolled tails;
    # aarch64's vectorized loops, into frintz)
    n = 13
    A = pt.placeholder((n,), dt, name="A")
    a = np.array([-0.5, -0.0, 0.5, -1.5, 2.5, -0.99, 0.99, -3.0, 3.0, -0.25, 7.5, -7.5, 0], dt)
    B = pt.compute((n,), lambda i: pt.cast(dt, pt.cast(inner, A[i])), name="B")
    _check(B, [A], [a], a.astype(inner).astype(dt), target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_pow_of_one_half_is_numpys_sqrt_in_every_schedule(target, dt):
    # unrolled tails called C's pow: pow(-inf, 0.5) = inf, where numpy's is nan
    a = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 2.5, 1e-40, 88.7, 3e38, 1e30])
    a = a.astype(dt)
    A = pt.placeholder((len(a),), dt, name="A")
    B = pt.compute((len(a),), lambda i: pt.pow(A[i], 0.5), name="B")
    with np.errstate(invalid="ignore"):
        want = np.power(a, np.array(0.5, dt))
    _check(B, [A], [a], want, target)


@pytest.mark.parametrize("target", CONVERTING)
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_float_to_uint64_is_x86s_conversion_on_every_target(target, dt):
    # AVX-512's vcvttpd2uqq gave 2^64 - 1 for every negative value, other code wrapped
    a = np.array([-8.7, -1.0, -0.5, 0.0, 1.5, 2.0**63, 1.8e19, 2.0**64, 1e30, -1e30, np.nan,
                  np.inf, -np.inf, -(2.0**63), 2.0**62, 3.0])  # fmt: skip
    a = a.astype(dt)
    A = pt.placeholder((len(a),), dt, name="A")
    B = pt.compute((len(a),), lambda i: pt.cast("uint64", A[i]), name="B")
    want = np.array(
        [18446744073709551608, 18446744073709551615, 0, 0, 1, 2**63, int(a[6]), 0, 0, 2**63,
         2**63, 0, 2**63, 2**63, 2**62, 3], np.uint64,
    )  # fmt: skip
    _check(B, [A], [a], want, target)


@pytest.mark.parametrize("target", TARGETS)
def test_unsigned_constants_compute_in_their_own_type(target):
    # -abs(2) of uint32 printed as 0 - 2, computed in C's int: -2.0, not 2^32 - 2
    n = 3
    U = pt.placeholder((n,), "uint32", name="U")
    c2 = pt.const(2, "uint32")
    u = np.array([3, 5, 100], np.uint32)
    m2 = np.uint32(2**32 - 2)
    forms = [
        (lambda i: pt.cast("float64", -pt.abs(c2)) + pt.cast("float64", U[i]),
         float(m2) + u.astype(np.float64)),
        (lambda i: (-pt.abs(U[i] * 0 + 2)) >> 1, np.full(n, m2 >> np.uint32(1), np.uint32)),
        (lambda i: pt.truncmod(-pt.abs(c2), U[i]), m2 % u),
    ]  # fmt: skip
    for body, want in forms:
        _check(pt.compute((n,), body, name="C"), [U], [u], want, target)


@pytest.mark.parametrize("target", CONVERTING)
def test_a_float_made_integer_stays_an_integer_and_stores_as_plus_zero(target):
    """int8 of int32 of a float wraps as integers do (no float detour), and a float16
    output of it is +0.0 for -0.5 (the store converted the integer itself)."""
    n = 6
    A = pt.placeholder((n,), "float32", name="A")
    a = np.array([300.5, -200.7, 1.5, -0.5, 127.9, 1000.0], np.float32)
    B = pt.compute((n,), lambda i: pt.cast("int8", pt.cast("int32", A[i])), name="B")
    _check(B, [A], [a], a.astype(np.int32).astype(np.int8), target)
    C = pt.compute((n,), lambda i: pt.cast("float16", pt.cast("int32", A[i])), name="C")
    _check(C, [A], [a], a.astype(np.int32).astype(np.float16), target)


@pytest.mark.parametrize("dt", ["float32", "bfloat16", "float64"])
def test_a_python_int_past_int64_scales_a_float_as_numpy_does(dt):
    """``x * 10**20`` of a float32 x is 1e20 in numpy; pypto refused any int past int64
    with "cast to a wider dtype". Rounded once (2**64 + 2**40 + 1 is not a tie in float32
    the way its float64 rounding would make it), inf past the type's range."""
    from pypto.dtypes import as_computed, numpy_dtype

    A = pt.placeholder((3,), dt, name="A")
    ints = (10**20, 2**64 + 2**40 + 1, -(10**400))
    C = pt.compute((3,), lambda i: pt.select(i == 0, A[i] * ints[0], pt.select(
        i == 1, A[i] * ints[1], A[i] * ints[2])), name="C")  # fmt: skip
    got = pt.build(pt.create_schedule(C.op), [A, C])(np.ones(3, numpy_dtype(dt)))
    # float32: one rounding, up to 2**64 + 2**41; through float64 (2**64 + 2**40, a
    # tie) it would round to even, 2**64
    middle = 2.0**64 + 2.0**41 if dt == "float32" else float(ints[1])
    want = np.array([1e20, middle, -np.inf]).astype(numpy_dtype(dt))
    np.testing.assert_array_equal(got, want)
    assert as_computed(ints[1], "float32") == 2.0**64 + 2.0**41


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_nextafter_steps_in_the_16_bit_type(dt):
    """float32's nextafterf moved 1.0 by 2^-23, which the store rounded away: 170 of 256
    special pairs came back unchanged. It steps in the type's own bits now, scalar and
    vectorized, as numpy (ml_dtypes for bfloat16) does."""
    from pypto.dtypes import numpy_dtype

    npdt = numpy_dtype(dt)
    n = pt.var("n")
    A, B = pt.placeholder((n,), dt, name="A"), pt.placeholder((n,), dt, name="B")
    C = pt.compute((n,), lambda i: pt.nextafter(A[i], B[i]), name="C")
    vals = [0.0, -0.0, 1.0, -1.0, 3.0, 65504.0, -65504.0, np.inf, -np.inf, np.nan, 6e-8, 2.0**-14]
    a = np.repeat(np.array(vals, np.float32), len(vals)).astype(npdt)
    b = np.tile(np.array(vals, np.float32), len(vals)).astype(npdt)
    # equal operands give y, as C, PyTorch and numpy's float32 do (numpy's float16: x)
    with np.errstate(over="ignore"):  # 65504 towards inf is inf
        want = np.where(a == b, b, np.nextafter(a, b))
    for vectorized in (False, True):
        s = pt.create_schedule(C.op)
        if vectorized:
            s[C].vectorize(s[C].split(C.op.axis[0], factor=16)[1])
        got = pt.build(s, [A, B, C])(a, b)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
