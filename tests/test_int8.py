"""Integer products and the casting rules (API.md 9): int8/uint8 products summed as
int32 are exact against numpy in int64; mixed dtypes without a rule are refused with a
message naming both operands."""

import numpy as np
import pytest

import pypto as pt
from pypto.dtypes import promote


@pytest.mark.parametrize(
    "a, b, out",
    [
        ("int64", "int32", "int64"),
        ("int32", "int8", "int32"),
        ("int32", "uint8", "int32"),
        ("uint8", "int64", "int64"),
        ("int8", "uint8", None),
        ("float32", "float16", None),
        ("float32", "int32", None),
        ("bfloat16", "float16", None),
    ],
)
def test_promotion_rules(a, b, out):
    assert promote(a, b) == out and promote(b, a) == out


@pytest.mark.parametrize(
    "da, db",
    [("int8", "uint8"), ("float32", "float16"), ("int32", "float32"), ("float16", "bfloat16")],
)
def test_mixed_dtypes_without_a_rule_are_refused_naming_the_operands(da, db):
    A = pt.placeholder((4,), da, name="A")
    B = pt.placeholder((4,), db, name="B")
    msg = rf"mixed dtypes {da} and {db} in \(A\[1\], B\[2\]\): no rule .*use pt.cast"
    with pytest.raises(TypeError, match=msg):
        pt.compute((4,), lambda i: A[1] * B[2], name="C")


@pytest.mark.parametrize("da, db", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")])
def test_8_bit_products_accumulate_exactly_in_int32(da, db):
    M, N, K = 5, 24, 1000  # |sum| up to 1000 * 255 * 128: far beyond 16 bits
    A = pt.placeholder((M, K), da, name="A")
    B = pt.placeholder((K, N), db, name="B")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute(
        (M, N),
        lambda i, j: pt.sum(pt.cast("int32", A[i, k]) * pt.cast("int32", B[k, j]), axis=k),
        name="C",
    )
    s = pt.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].vectorize(ji)
    mod = pt.build(s, [A, B, C], name=f"mm_{da}_{db}")
    rng = np.random.default_rng(0)
    info_a, info_b = np.iinfo(da), np.iinfo(db)
    a = rng.integers(info_a.min, info_a.max + 1, (M, K)).astype(da)
    b = rng.integers(info_b.min, info_b.max + 1, (K, N)).astype(db)
    a[0, :] = info_a.max  # the extremes of each type
    b[:, 0] = info_b.min
    out = mod(a, b)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_round_is_to_nearest_ties_to_even(dtype):
    A = pt.placeholder((16,), dtype, name="A")
    B = pt.compute((16,), lambda i: pt.round(A[i]), name="B")
    s = pt.create_schedule(B)
    s[B].vectorize(B.op.axis[0])
    a = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, -0.49999997, 126.5, 127.5,
                  -128.5, 1e9 + 0.5, 2.4, -2.6, 7.0], dtype)  # fmt: skip
    b = pt.build(s, [A, B], name=f"round_{dtype}")(a)
    np.testing.assert_array_equal(b, np.rint(a))
    assert (b[:7] == [-2, -2, -0, 0, 2, 2, 4]).all()
