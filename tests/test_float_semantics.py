"""Float semantics as numpy's: NaN propagates through min and max (``maximum``,
``minimum``, ``max``/``min`` reductions; PyTorch's too), never silently dropped; ``//``
and ``%`` are numpy's (and Python's) divmod, signed zeros, infinities and NaN included."""

import numpy as np
import pytest

import pypto as pt

_ROWS = np.array(
    [[1.0, np.nan, -1.0, 2.0], [np.nan, 3.0, 0.5, -2.0], [4.0, 1.0, -7.0, np.nan], [1, 2, 3, 4]],
    np.float32,
)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("vectorize", [False, True])
def test_elementwise_min_and_max_propagate_nan(dtype, vectorize):
    A = pt.placeholder((16,), dtype, name="A")
    B = pt.placeholder((16,), dtype, name="B")
    zero = pt.const(0.0, dtype)
    outs = [
        pt.compute((16,), lambda i: pt.max(A[i], B[i]), name="Mx"),
        pt.compute((16,), lambda i: pt.min(A[i], B[i]), name="Mn"),
        pt.compute((16,), lambda i: pt.max(A[i], zero), name="Relu"),
    ]
    s = pt.create_schedule([t.op for t in outs])
    if vectorize:
        for t in outs:
            _, inner = s[t].split(t.op.axis[0], 8)
            s[t].vectorize(inner)
    mod = pt.build(s, [A, B, *outs])
    a = _ROWS.reshape(-1).astype(dtype)
    b = a[::-1].copy()
    mx, mn, relu = mod(a, b)
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, b))
    np.testing.assert_array_equal(relu, np.maximum(a, 0))


@pytest.mark.parametrize("vectorize", [False, True])
def test_min_and_max_reductions_propagate_nan(vectorize):
    A = pt.placeholder((4, 4), "float32", name="A")
    k = pt.reduce_axis((0, 4), name="k")
    Mx = pt.compute((4,), lambda i: pt.max(A[i, k], axis=k), name="Mx")
    k2 = pt.reduce_axis((0, 4), name="k2")
    Mn = pt.compute((4,), lambda i: pt.min(A[i, k2], axis=k2), name="Mn")
    s = pt.create_schedule([Mx.op, Mn.op])
    if vectorize:
        s[Mx].vectorize(Mx.op.axis[0])
    mx, mn = pt.build(s, [A, Mx, Mn])(_ROWS)
    np.testing.assert_array_equal(mx, _ROWS.max(axis=1))
    np.testing.assert_array_equal(mn, _ROWS.min(axis=1))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_floor_division_and_remainder_are_numpys(dtype):
    # floor(a / b) had made 1.0 // 0.1 10.0 (numpy: 9.0) and 1.0 % 0.1 -5.6e-17, a
    # remainder with the wrong sign (numpy: 0.09999999999999995)
    inf, nan = np.inf, np.nan
    a = np.array([1.0, -7.5, 7.5, -1.0, 0.0, -0.0, inf, 3.0, 1.0, -2.0, nan, 5.0], dtype)
    b = np.array([0.1, 2.0, -2.0, inf, 3.0, 3.0, 2.0, 0.0, -inf, 0.0, 1.0, -0.0], dtype)
    A = pt.placeholder((12,), dtype, name="A")
    B = pt.placeholder((12,), dtype, name="B")
    Q = pt.compute((12,), lambda i: A[i] // B[i], name="Q")
    R = pt.compute((12,), lambda i: A[i] % B[i], name="R")
    q, r = pt.build(pt.create_schedule([Q.op, R.op]), [A, B, Q, R])(a, b)
    with np.errstate(all="ignore"):
        want_q, want_r = a // b, a % b
    for got, want in ((q, want_q), (r, want_r)):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 too
    assert q[0] == 9.0 and r[0] > 0


def test_constant_floor_division_folds_as_the_kernel_computes():
    A = pt.placeholder((2,), "float64", name="A")
    one, tenth = pt.const(1.0, "float64"), pt.const(0.1, "float64")
    B = pt.compute((2,), lambda i: A[i] + one // tenth + one % tenth, name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    np.testing.assert_array_equal(mod(np.zeros(2)), [1.0 // 0.1 + 1.0 % 0.1] * 2)
    assert "pt_floordiv" not in mod.source and "pt_mod" not in mod.source
