"""Property-based fuzzing of ``transform_layout``: random one-to-one layouts of an
intermediate and of an output, under random schedules of the consumer, against numpy.

A two-stage pipeline ``Y = 3 X + i`` (an intermediate), ``Z = Y[i, j] + 2 Y[i, j + 1]``
(the output, copied into the caller's array from its own layout) gets a layout for
each from ``LAYOUTS`` (transposes, tiles, strips, reversals, a flattening, a skew),
then a schedule of ``Z`` (a split of either loop, a reorder, a vectorized or parallel
loop). The sizes are constants or the kernel's symbolic sizes ``m`` and ``n`` (then
only the layouts quasi-affine in them: a strip of ``ceil(m / c)`` divides by a size).
The results must equal numpy's to a few ulps (the same operations in the same
order; the C compiler fuses a multiply and an add), with every access checked at run
time (``conftest.py``), and the index-set splitting of ``pypto.index_sets`` must leave
them so.

PYPTO_FUZZ_EXAMPLES sets the number of examples (default 25), derandomized.
"""

from __future__ import annotations

import numpy as np
from fuzzing import REPEATABLE as FUZZ
from hypothesis import given
from hypothesis import strategies as st

import pypto as pt

BOUND_CHECKS = True  # every kernel checks its accesses at run time (conftest.py)


# name -> (m, n, c) -> mapping of (i, j); each one to one over [0, m) x [0, n)
LAYOUTS = {
    "identity": lambda m, n, c: lambda i, j: [i, j],
    "transpose": lambda m, n, c: lambda i, j: [j, i],
    "column tiles": lambda m, n, c: lambda i, j: [j // c, i, j % c],
    "row strips": lambda m, n, c: lambda i, j: [i % -(-m // c), i // -(-m // c), j],
    "column strips": lambda m, n, c: lambda i, j: [i, j % -(-n // c), j // -(-n // c)],
    "reversed rows": lambda m, n, c: lambda i, j: [m - 1 - i, j],
    "flat": lambda m, n, c: lambda i, j: [i * n + j],
    "skewed": lambda m, n, c: lambda i, j: [i, j + i],
}
SYMBOLIC = ["identity", "transpose", "column tiles", "reversed rows", "skewed"]


@st.composite
def cases(draw):
    m = draw(st.integers(2, 9))
    n = draw(st.integers(3, 19))
    c = draw(st.integers(1, 5))
    symbolic = draw(st.booleans())
    layouts = [draw(st.sampled_from(SYMBOLIC if symbolic else sorted(LAYOUTS))) for _ in range(2)]
    loop = draw(st.sampled_from(["i", "j"]))
    factor = draw(st.integers(1, 8))
    reorder = draw(st.booleans())
    kind = draw(st.sampled_from(["vectorize", "parallel", "none"]))
    return m, n, c, symbolic, layouts, loop, factor, reorder, kind


def _build(m, n, c, symbolic, layouts, loop, factor, reorder, kind):
    if symbolic:
        m, n = pt.var("m"), pt.var("n")
    X = pt.placeholder((m, n), "float64", name="X")
    Y = pt.compute((m, n), lambda i, j: X[i, j] * 3.0 + pt.cast("float64", i), name="Y")
    Z = pt.compute((m, n - 1), lambda i, j: Y[i, j] + Y[i, j + 1] * 2.0, name="Z")
    s = pt.create_schedule(Z.op)
    s[Y].transform_layout(LAYOUTS[layouts[0]](m, n, c))
    s[Z].transform_layout(LAYOUTS[layouts[1]](m, n - 1, c))
    i, j = Z.op.axis
    outer, inner = s[Z].split(i if loop == "i" else j, factor=factor)
    order = [outer, j, inner] if loop == "i" else [i, outer, inner]
    if reorder:
        order = [order[1], order[0], order[2]]
    s[Z].reorder(*order)
    if kind == "vectorize":
        s[Z].vectorize(inner)
    elif kind == "parallel":
        s[Z].parallel(order[0])
    return s, [X, Z]


@FUZZ
@given(cases())
def test_random_layouts_and_schedules_compute_what_numpy_does(case):
    m, n = case[0], case[1]
    s, args = _build(*case)
    x = np.random.default_rng(m * 100 + n).random((m, n))
    z = np.full((m, n - 1), np.nan)
    pt.build(s, args)(x, z)
    y = x * 3.0 + np.arange(m)[:, None]
    # a few ulps: the C compiler contracts a * b + c into one rounding (-ffp-contract)
    np.testing.assert_allclose(z, y[:, :-1] + y[:, 1:] * 2.0, rtol=1e-14, atol=0, err_msg=str(case))
