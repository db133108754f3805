"""Fuzzing time tiles of two-statement stencils against a direct interpreter.

Hypothesis draws a jacobi-like program (B from A at some offsets, then A from B at
others, every time step) and a schedule: the second statement shifted, both skewed by
the time step and split, the tile loop outside the time loop, the statements sharing
the time loop or the tiles' loops, with ``order=t``. A schedule that isl refuses is
skipped; every schedule it accepts must compute what the time steps compute.
PYPTO_FUZZ_EXAMPLES sets the number of examples (default 25), derandomized.
"""

from __future__ import annotations

import numpy as np
from fuzzing import REPEATABLE as FUZZ
from hypothesis import assume, example, given
from hypothesis import strategies as st

import pypto as pt

BOUND_CHECKS = True  # every kernel checks its accesses at run time (conftest.py)


OFFSETS = st.lists(st.integers(-2, 2), min_size=1, max_size=3, unique=True)


def _program(n, steps, ob, oa):
    A0 = pt.placeholder((n,), "float64", name="A0")
    A = pt.compute((n,), lambda i: A0[i], name="A")
    B = pt.compute((n,), lambda i: A0[i] * 0.5, name="B")
    t, i = pt.rdom([(0, steps), (2, n - 2)], names="t i")
    B[i] = sum((A[i + o] * (k + 1.5) for k, o in enumerate(ob)), pt.const(0.25, "float64"))
    t2, i2 = pt.rdom([(0, steps), (2, n - 2)], names="t2 i2")
    A[i2] = sum((B[i2 + o] * (0.5 - k) for k, o in enumerate(oa)), pt.const(-0.5, "float64"))
    return A0, A, B, (t, i), (t2, i2)


def _reference(a0, steps, ob, oa):
    a, b = a0.copy(), a0 * 0.5
    n = len(a0)
    for _ in range(steps):
        for i in range(2, n - 2):
            b[i] = 0.25 + sum(a[i + o] * (k + 1.5) for k, o in enumerate(ob))
        for i in range(2, n - 2):
            a[i] = -0.5 + sum(b[i + o] * (0.5 - k) for k, o in enumerate(oa))
    return a, b


@FUZZ
@given(
    n=st.integers(7, 15),
    steps=st.integers(1, 4),
    ob=OFFSETS,
    oa=OFFSETS,
    shift=st.integers(0, 2),
    skew=st.integers(0, 3),
    tile=st.integers(2, 6),
    deep=st.booleans(),
)
# B's tiles end before A's: the merged tile loop runs past B's own, and the time loop's
# window in A's last tile starts later than in the others
@example(n=7, steps=2, ob=[0], oa=[0], shift=1, skew=2, tile=5, deep=True)
# A reads what B stored two iterations earlier, two per iteration: gcc 12.2 vectorized
# that loop wrongly (pypto/autovec.py)
@example(n=10, steps=1, ob=[0], oa=[-2], shift=0, skew=0, tile=2, deep=True)
def test_accepted_time_tiles_compute_the_time_steps(n, steps, ob, oa, shift, skew, tile, deep):
    A0, A, B, (t, i), (t2, i2) = _program(n, steps, ob, oa)
    s = pt.create_schedule([A.op, B.op])
    ua, ub = s[A].update(0), s[B].update(0)
    try:
        if shift:
            i2 = ua.shift(i2, shift)
        inner = []
        for u, tt, ii in ((ub, t, i), (ua, t2, i2)):
            if skew:
                _, ii = u.skew(tt, ii, skew)
            io, ii = u.split(ii, factor=tile)
            u.reorder(io, tt, ii)
            inner.append(ii)
        ua.compute_with(ub, inner[1] if deep else t2, order=t2)
        mod = pt.build(s, [A0, A, B])
    except pt.ScheduleError:
        assume(False)  # refused: nothing to run
    a0 = np.random.default_rng(n * 31 + steps).random(n)
    a, b = np.full(n, np.nan), np.full(n, np.nan)
    mod(a0, a, b)
    ra, rb = _reference(a0, steps, ob, oa)
    np.testing.assert_allclose(a, ra, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b, rb, rtol=1e-12, atol=1e-12)
