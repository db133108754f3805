"""NaN propagates through float min and max, as numpy's ``maximum``/``minimum`` and
``max``/``min`` reductions and PyTorch's do: a NaN is never silently dropped."""

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
