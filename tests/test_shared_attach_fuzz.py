"""Fuzzing stages computed at loops that ``compute_with`` shares, against numpy.

Hypothesis draws a norm-backward-like program (per row a sum and a sum of squares,
an elementwise pass reading them, and per block of rows a column sum that reads them
too: an update counting the block's rows from 0, the last block ragged) and a
schedule: the pass's rows split (by the block or another factor), the statistics
computed at the block loop or the row loop, the column sums sharing the block loop,
the row loop or, columns split alike, the column loop too, before or after the pass,
loops parallel or not. A schedule that is refused raises ``ScheduleError`` saying why; every
schedule accepted must compute what numpy computes. PYPTO_FUZZ_EXAMPLES sets the
number of examples (default 25), derandomized.
"""

from __future__ import annotations

import numpy as np
from fuzzing import REPEATABLE as FUZZ
from hypothesis import assume, example, given
from hypothesis import strategies as st

import pypto as pt

BOUND_CHECKS = True  # every kernel checks its accesses at run time (conftest.py)
F = "float64"
# why a schedule here may be refused: the statistics' consumer outside their loop, or
# before the pass they are attached to, or counting the shared loops differently
REFUSALS = ("so the values would not be ready", "so the values computed at",
            "give the shared loops the same extents")  # fmt: skip


def _program(rows, cols, block):
    X = pt.placeholder((rows, cols), F, name="X")
    k, k2 = pt.reduce_axis((0, cols), name="k"), pt.reduce_axis((0, cols), name="k2")
    sm = pt.compute((rows,), lambda i: pt.sum(X[i, k], axis=k), name="sm")
    sq = pt.compute((rows,), lambda i: pt.sum(X[i, k2] * X[i, k2], axis=k2), name="sq")
    Y = pt.compute((rows, cols), lambda i, j: X[i, j] * sq[i] - sm[i], name="Y")
    nb = -(-rows // block)
    S = pt.compute((nb, cols), lambda b, j: pt.const(0.0, F), name="S")
    bo = pt.reduce_axis((0, nb), name="bo")
    r = pt.reduce_axis((0, pt.min(block, rows - bo * block)), name="r")
    bj = pt.reduce_axis((0, cols), name="bj")
    i = bo * block + r
    S[bo, bj] = S[bo, bj] + X[i, bj] * sm[i] + sq[i]
    return X, (sm, sq), Y, S


def _reference(x, block):
    sm, sq = x.sum(1, keepdims=True), (x * x).sum(1, keepdims=True)
    return x * sq - sm, np.add.reduceat(x * sm + sq, range(0, len(x), block))


@FUZZ
@given(
    rows=st.integers(1, 13),
    cols=st.integers(1, 12),
    block=st.integers(1, 5),
    factor=st.one_of(st.none(), st.integers(1, 5)),  # None: the block
    at_row=st.booleans(),
    share=st.sampled_from(["block", "row", "column"]),
    after=st.sampled_from([True, True, True, False]),
    parallel=st.booleans(),
)
@example(rows=10, cols=8, block=4, factor=4, at_row=True, share="column", after=True,
         parallel=True)  # fmt: skip
@example(rows=10, cols=8, block=4, factor=4, at_row=False, share="block", after=True,
         parallel=False)  # fmt: skip
def test_stages_at_shared_loops_compute_what_numpy_does(
    rows, cols, block, factor, at_row, share, after, parallel
):
    X, stats, Y, S = _program(rows, cols, block)
    s = pt.create_schedule([Y.op, S.op])
    u = s[S].update(0)
    bo, r, bj = u.op.axis
    try:
        io, ii = s[Y].split(Y.op.axis[0], factor=factor or block)
        jy = Y.op.axis[1]
        if share == "column":
            jy, _ = s[Y].split(jy, factor=4)
            bj, _ = u.split(bj, factor=4)
        if parallel:
            s[Y].parallel(io)
            u.parallel(bo)
        for T in stats:  # (at the row, read by the block's sums only: refused)
            s[T].compute_at(s[Y], ii if at_row and share != "block" else io)
        loops = {"block": (io, bo), "row": (ii, r), "column": (jy, bj)}[share]
        if after:
            u.compute_with(s[Y], loops[0])
        else:
            s[Y].compute_with(u, loops[1])
        mod = pt.build(s, [X, Y, S])
    except pt.ScheduleError as e:
        assert any(why in str(e) for why in REFUSALS), e
        assume(False)  # refused, saying why: nothing to run
    x = np.random.default_rng(rows * 13 + cols).standard_normal((rows, cols))
    y, sums = np.full((rows, cols), np.nan), np.full((-(-rows // block), cols), np.nan)
    mod(x, y, sums)
    ry, rs = _reference(x, block)
    np.testing.assert_allclose(y, ry, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sums, rs, rtol=1e-12, atol=1e-12)
