"""``pt.cast`` gives numpy's ``astype`` for every value numpy defines: to bool any
nonzero value (NaN too) is true, integers narrow by wrapping, floats truncate
toward zero, integers round to the nearest float."""

import numpy as np
import pytest

import pypto as pt


def _cast_kernel(src, dst, n, vectorize):
    A = pt.placeholder((n,), src, name="A")
    B = pt.compute((n,), lambda i: pt.cast(dst, A[i]), name="B")
    s = pt.create_schedule(B.op)
    if vectorize:
        _, inner = s[B].split(B.op.axis[0], 8)
        s[B].vectorize(inner)
    return pt.build(s, [A, B])


_VALUES = {
    "int32": [0, 1, 256, -1, 512, 2**31 - 1, -(2**31), 7],
    "int8": [0, 1, -128, 2, 127, -1, 16, 0],
    "int64": [0, 2**40, -(2**40), 1, 2**53 + 1, -7, 255, 256],
    "uint32": [0, 1, 2**32 - 1, 255, 256, 65536, 2**31, 3],
    "float32": [0.0, 0.5, -0.25, 256.0, np.nan, -np.inf, -3.75, 1e-30],
    "float64": [0.0, 0.5, -0.25, 2.0**40 + 0.5, np.nan, np.inf, -3.75, 1e-300],
}
_TARGETS = ["bool", "int8", "uint8", "int32", "int64", "float32", "float64"]


def _defined(values: np.ndarray, dst: str) -> np.ndarray:
    """Where numpy defines ``values.astype(dst)``: a float fits the integer range."""
    if values.dtype.kind != "f" or dst in ("bool", "float32", "float64"):
        return np.ones(values.shape, bool)
    info = np.iinfo(dst)
    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (values > info.min - 1) & (values < info.max + 1)


@pytest.mark.parametrize("vectorize", [False, True])
@pytest.mark.parametrize("src", sorted(_VALUES))
def test_casts_agree_with_numpy_astype(src, vectorize):
    a = np.array(_VALUES[src], src)
    for dst in _TARGETS:
        got = _cast_kernel(src, dst, len(a), vectorize)(a)
        with np.errstate(all="ignore"):
            want = a.astype(dst)
        ok = _defined(a, dst)
        np.testing.assert_array_equal(got[ok], want[ok], err_msg=f"{src} -> {dst}")


def test_a_cast_to_bool_is_normalized_before_it_widens_again():
    # (int32)(bool)256 had been 256: the cast to bool did nothing in the C
    A = pt.placeholder((4,), "float32", name="A")
    B = pt.compute(
        (4,),
        lambda i: (
            pt.cast("int32", pt.cast("bool", A[i]))
            + pt.cast("int32", pt.cast("bool", pt.const(256, "int32")))
        ),
        name="B",
    )
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    a = np.array([0.0, 0.5, np.nan, -2.0], np.float32)
    np.testing.assert_array_equal(mod(a), a.astype(bool).astype(np.int32) + 1)
    assert "(A[i] != 0)" in mod.source


def test_a_literal_outside_the_dtype_is_refused_in_arithmetic():
    # as numpy's (OverflowError) and TVM's: 300 had become an int8 constant that the C
    # added in int32 and the store then wrapped
    I8 = pt.placeholder((4,), "int8", name="I8")
    with pytest.raises(
        OverflowError, match=r"300 does not fit int8 \(-128 to 127\), the dtype of I8\[i\]"
    ):
        pt.compute((4,), lambda i: I8[i] + 300, name="B")
    with pytest.raises(OverflowError, match=r"18446744073709551616 does not fit uint64"):
        pt.const(2**64, "uint64")
    with pytest.raises(OverflowError, match=r"the constant 2 does not fit bool"):
        pt.const(2, "bool")


def _as_int(cond):
    return lambda i: pt.select(cond(i), 1, 0)


def test_a_comparison_with_any_literal_is_numpys():
    # numpy compares an integer with a Python int by value: every uint32 is > -1
    U = pt.placeholder((3,), "uint32", name="U")
    I8 = pt.placeholder((3,), "int8", name="I8")
    B = pt.compute(
        (3,), lambda i: pt.select((U[i] > -1) & (I8[i] < 200) & (-5 < U[i]), 1, 0), name="B"
    )
    C = pt.compute((3,), lambda i: pt.select((U[i] < -1) | (I8[i] >= 128), 1, 0), name="C")
    mod = pt.build(pt.create_schedule([B.op, C.op]), [U, I8, B, C])
    u = np.array([0, 5, 2**32 - 1], np.uint32)
    i8 = np.array([1, -128, 127], np.int8)
    b, c = mod(u, i8)
    np.testing.assert_array_equal(b, np.where((u > -1) & (i8 < 200) & (-5 < u), 1, 0))
    np.testing.assert_array_equal(c, [0, 0, 0])
    # no integer type holds a uint64 and -1, or an int64 and 2**63: decided by value
    W = pt.placeholder((3,), "uint64", name="W")
    P = pt.placeholder((3,), "int64", name="P")
    tests = {
        "W > -1": (lambda i: W[i] > -1, lambda w, p: w > -1),
        "-1 == W": (lambda i: -1 == W[i], lambda w, p: -1 == w),
        "W < 2**64": (lambda i: W[i] < 2**64, lambda w, p: w < 2**64),
        "P < 2**63": (lambda i: P[i] < 2**63, lambda w, p: p < 2**63),
        "P >= -(2**64)": (lambda i: P[i] >= -(2**64), lambda w, p: p >= -(2**64)),
        "2**63 <= P": (lambda i: 2**63 <= P[i], lambda w, p: 2**63 <= p),
    }
    w = np.array([0, 5, 2**64 - 1], np.uint64)
    p = np.array([-(2**63), 0, 2**63 - 1], np.int64)
    for text, (body, ref) in tests.items():
        D = pt.compute((3,), _as_int(body), name="D")
        got = pt.build(pt.create_schedule(D.op), [W, P, D])(w, p)
        np.testing.assert_array_equal(got, np.where(ref(w, p), 1, 0), err_msg=text)
