"""Time tiling of stencils whose time step has several statements: ``shift`` lags one
statement behind another, ``compute_with(..., order=t)`` states the program's order
(one time step after another) while the schedule shares the tiles' loops, and shared
loops of different extents run the longest."""

import re

import numpy as np
import pytest
from test_compute_with import _jacobi_1d, _jacobi_1d_ref, _jacobi_2d_ref

import pypto as pt

F = "float64"


def _time_tiles_1d(s, A, B, loops, tile, shift=1, skew=2):
    """B's and A's updates skewed by the time step, tiled, A a row behind B, the
    statements sharing the tile loop, the time loop and the row loop."""
    (t, i), (t2, i2) = loops
    ua, ub = s[A].update(0), s[B].update(0)
    if shift:
        i2 = ua.shift(i2, shift)
    inner = []
    for u, tt, ii in ((ub, t, i), (ua, t2, i2)):
        _, ii = u.skew(tt, ii, skew)
        io, ii = u.split(ii, factor=tile)
        u.reorder(io, tt, ii)
        inner.append(ii)
    ua.compute_with(ub, inner[1], order=t2)


def _run_1d(s, A0, A, B, n, steps):
    mod = pt.build(s, [A0, A, B])
    a0 = np.random.default_rng(1).random(n)
    a, b = np.full(n, np.nan), np.full(n, np.nan)
    mod(a0, a, b)
    return a, b, _jacobi_1d_ref(a0, steps)


@pytest.mark.parametrize("n, steps, tile", [(13, 4, 4), (20, 7, 8), (9, 5, 16)])
def test_jacobi_1d_time_tiles_match_the_time_steps(n, steps, tile):
    A0, A, B, *loops = _jacobi_1d(n, steps)
    s = pt.create_schedule([A.op, B.op])
    _time_tiles_1d(s, A, B, loops, tile)
    a, b, (ra, rb) = _run_1d(s, A0, A, B, n, steps)
    np.testing.assert_allclose(a, ra, rtol=1e-14)
    np.testing.assert_allclose(b, rb, rtol=1e-14)


@pytest.mark.parametrize(
    "shift, skew, message",
    [
        (0, 2, r"A\[i2\] reads B\[i2 \+ 1\], written by B\[i\]"),  # A's row before B's next
        (1, 1, r"B\[i\] reads A\[i \+ 1\], written by A\[i2\]"),  # the tiles' skew too small
    ],
)
def test_time_tiles_that_break_a_dependence_are_refused(shift, skew, message):
    A0, A, B, *loops = _jacobi_1d(12, 4)
    s = pt.create_schedule([A.op, B.op])
    with pytest.raises(pt.ScheduleError, match=r"would break a dependence: " + message):
        _time_tiles_1d(s, A, B, loops, 4, shift=shift, skew=skew)


def test_order_is_the_programs_and_the_schedule_may_share_more():
    """Without ``order`` the fused nest is the program (a sweep that reads this step's
    values); with it, the time steps of the C nest, which the tiles must keep."""
    n, steps = 10, 3
    A0, A, B, (t, i), (t2, i2) = _jacobi_1d(n, steps)
    s = pt.create_schedule([A.op, B.op])
    ua, ub = s[A].update(0), s[B].update(0)
    with pytest.raises(pt.ScheduleError, match=r"A\[i2\] reads B\[i2 \+ 1\]"):
        ua.compute_with(ub, i2, order=t2)  # A's row i before B's row i + 1
    ua.compute_with(ub, ua.shift(i2, 1), order=t)  # a row behind: legal
    a, b, (ra, rb) = _run_1d(s, A0, A, B, n, steps)
    np.testing.assert_allclose(a, ra, rtol=1e-14)
    np.testing.assert_allclose(b, rb, rtol=1e-14)
    assert s.steps[-1]["order"] == 1


def test_bad_shift_and_order_arguments():
    A0, A, B, (t, i), (t2, i2) = _jacobi_1d(8, 2)
    s = pt.create_schedule([A.op, B.op])
    ua, ub = s[A].update(0), s[B].update(0)
    with pytest.raises(pt.ScheduleError, match=r"offset must be an integer >= 0, got -1"):
        ua.shift(i2, -1)
    with pytest.raises(pt.ScheduleError, match=r"offset must be an integer >= 0, got 1.5"):
        ua.shift(i2, 1.5)
    with pytest.raises(pt.ScheduleError, match=r"order: k is a root loop of neither stage"):
        ua.compute_with(ub, t2, order=pt.reduce_axis((0, 2), name="k"))
    with pytest.raises(pt.ScheduleError, match=r"order must be a positive int or a root loop"):
        ua.compute_with(ub, t2, order=0)
    ua.vectorize(i2)
    with pytest.raises(pt.ScheduleError, match=r"loop i2 is already annotated vectorized"):
        ua.shift(i2, 1)


def test_order_deeper_than_the_statements_is_refused():
    A0, A, B, (t, i), (t2, i2) = _jacobi_1d(8, 2)
    s = pt.create_schedule([A.op, B.op])
    ua, ub = s[A].update(0), s[B].update(0)
    io, ii = ub.split(i, factor=4)
    i2o, i2i = ua.split(i2, factor=4)
    ua.compute_with(ub, i2i)
    with pytest.raises(pt.ScheduleError, match=r"shares 3 loops with statements whose tensors "
                       r"read each other, but has only 2 loop\(s\).*order="):  # fmt: skip
        pt.lower(s, [A0, A, B])


def test_shift_alone_runs_the_same_iterations_later():
    n = 10
    X = pt.placeholder((n,), F, name="X")
    Y = pt.compute((n,), lambda i: X[i] * 2.0, name="Y")
    s = pt.create_schedule(Y.op)
    (i,) = s[Y].op.axis
    new = s[Y].shift(i, 3)
    assert s[Y].leaf_iter_vars == [new] and new.name == "i.shift"
    text = str(pt.lower(s, [X, Y]))
    assert "for (i_shift, 0, 10)" in text  # its guard i' >= 3 is the loop's start
    x = np.arange(float(n))
    y = np.empty(n)
    pt.build(s, [X, Y])(x, y)
    np.testing.assert_array_equal(y, 2 * x)


def test_shared_loops_of_different_extents_run_the_longest():
    """Two tensors over rows of different counts, in one loop: the shorter stops early."""
    X = pt.placeholder((12,), F, name="X")
    P = pt.compute((8,), lambda i: X[i] + 1.0, name="P")
    Q = pt.compute((12,), lambda i: X[i] * 3.0, name="Q")
    s = pt.create_schedule([P.op, Q.op])
    s[Q].compute_with(s[P], s[Q].op.axis[0])
    text = str(pt.lower(s, [X, P, Q]))
    assert "for (i, 0, 12)" in text and "if (i < 8)" in text
    x = np.random.default_rng(0).random(12)
    p, q = np.empty(8), np.empty(12)
    pt.build(s, [X, P, Q])(x, p, q)
    np.testing.assert_array_equal(p, x[:8] + 1.0)
    np.testing.assert_array_equal(q, x * 3.0)


@pytest.mark.parametrize("n, steps, tile", [(40, 30, 4), (9, 12, 16), (25, 3, 8)])
def test_a_tile_runs_only_the_time_steps_with_points_in_it(n, steps, tile):
    """Skewed tiles hold points for a window of time steps only: the shared time loop
    runs the hull of the statements' windows in each tile (a bound computed once per
    tile, ``let t_lo``), not every step, and every value stays the C nest's."""
    A0, A, B, *loops = _jacobi_1d(n, steps)
    s = pt.create_schedule([A.op, B.op])
    _time_tiles_1d(s, A, B, loops, tile)
    lines = str(pt.lower(s, [A0, A, B])).splitlines()
    at = next(k for k, line in enumerate(lines) if line.strip().startswith("let t_lo = "))
    loop = lines[at + 1].strip()
    assert loop.startswith("for (t, 0, ") and loop.endswith("- t_lo) {")
    a, b, (ra, rb) = _run_1d(s, A0, A, B, n, steps)
    np.testing.assert_allclose(a, ra, rtol=1e-14)
    np.testing.assert_allclose(b, rb, rtol=1e-14)


def test_time_tiles_over_a_symbolic_size_run_each_size_exactly():
    """The tiles' windows are bounds in ``n`` too: one module for every size."""
    steps = 5
    A0, A, B, *loops = _jacobi_1d(pt.var("n"), steps)
    s = pt.create_schedule([A.op, B.op])
    _time_tiles_1d(s, A, B, loops, 8)
    assert "let t_lo = " in str(pt.lower(s, [A0, A, B]))
    for n in (3, 7, 30, 41):
        a, b, (ra, rb) = _run_1d(s, A0, A, B, n, steps)
        np.testing.assert_allclose(a, ra, rtol=1e-14)
        np.testing.assert_allclose(b, rb, rtol=1e-14)


def test_a_skewed_inner_loop_starts_at_its_lower_bound():
    """``guards_to_bounds`` turns ``if (v - t >= 0)`` into the loop's start: the
    innermost loop of a time-tiled sweep holds no condition, so it vectorizes whole."""
    n, steps = 12, 5
    X0 = pt.placeholder((n,), F, name="X0")
    X = pt.compute((n,), lambda i: X0[i], name="X")
    t, i = pt.rdom([(0, steps), (0, n)], names="t i")
    X[i] = X[i] * 0.5 + 1.0
    s = pt.create_schedule(X.op)
    u = s[X].update(0)
    _, isk = u.skew(t, i, 1)
    io, ii = u.split(isk, factor=4)
    u.reorder(io, t, ii)
    text = str(pt.lower(s, [X0, X]))
    loop = next(line for line in text.splitlines() if "for (i_skew_inner" in line)
    assert "max(0, t - i_skew_outer * 4)" in loop
    body = text.splitlines()[text.splitlines().index(loop) + 1]
    assert body.strip().startswith("X[")  # no if left inside
    x0 = np.random.default_rng(3).random(n)
    x = np.empty(n)
    pt.build(s, [X0, X])(x0, x)
    want = x0.copy()
    for _ in range(steps):
        want = want * 0.5 + 1.0
    np.testing.assert_allclose(x, want, rtol=1e-14)


def test_time_tiles_replay_from_json():
    A0, A, B, *loops = _jacobi_1d(14, 3)
    s = pt.create_schedule([A.op, B.op])
    _time_tiles_1d(s, A, B, loops, 4)
    again = pt.Schedule.from_json(s.to_json(), [A0, A, B])
    assert again.steps == s.steps
    assert any(st["prim"] == "shift" and st["offset"] == 1 for st in s.steps)
    assert pt.build(again, [A0, A, B]).source == pt.build(s, [A0, A, B]).source


def test_jacobi_2d_time_tiles_match_the_time_steps():
    n, steps = 11, 4
    A0 = pt.placeholder((n, n), F, name="A0")
    A = pt.compute((n, n), lambda i, j: A0[i, j], name="A")
    B = pt.compute((n, n), lambda i, j: A0[i, j], name="B")

    def five(T, i, j):
        return 0.2 * (T[i, j] + T[i, j - 1] + T[i, j + 1] + T[i + 1, j] + T[i - 1, j])

    t, i, j = pt.rdom([(0, steps), (1, n - 1), (1, n - 1)], names="t i j")
    B[i, j] = five(A, i, j)
    t2, i2, j2 = pt.rdom([(0, steps), (1, n - 1), (1, n - 1)], names="t2 i2 j2")
    A[i2, j2] = five(B, i2, j2)
    s = pt.create_schedule([A.op, B.op])
    ua, ub = s[A].update(0), s[B].update(0)
    i2, j2 = ua.shift(i2, 1), ua.shift(j2, 1)
    rows = []
    for u, tt, ii, jj in ((ub, t, i, j), (ua, t2, i2, j2)):
        _, ii = u.skew(tt, ii, 2)
        _, jj = u.skew(tt, jj, 2)
        io, ii = u.split(ii, factor=4)
        jo, jj = u.split(jj, factor=8)
        u.reorder(io, jo, tt, ii, jj)
        u.vectorize(jj)
        rows.append(ii)
    ua.compute_with(ub, rows[1], order=t2)
    a0 = np.random.default_rng(2).random((n, n))
    a, b = np.full((n, n), np.nan), np.full((n, n), np.nan)
    mod = pt.build(s, [A0, A, B])
    mod(a0, a, b)
    # the row the five points share is named once per row (pypto.hoist.name_rows)
    assert re.search(r"const int64_t (row\w*) = .*\n.*\n.*omp simd\n.*\n *B\[\1 \+ j_skew_inner "
                     r"\+ 12\] = 0\.2 \* \(A\[\1 \+ j_skew_inner \+ 12\]", mod.source)  # fmt: skip
    ra, rb = _jacobi_2d_ref(a0, steps)
    np.testing.assert_allclose(a, ra, rtol=1e-14)
    np.testing.assert_allclose(b, rb, rtol=1e-14)


def test_explain_agrees_with_the_check_on_shared_loops():
    """The tiles' inner loop carries B's values to A's statement in the same loop: both
    ``explain`` and ``vectorize`` say so."""
    A0, A, B, *loops = _jacobi_1d(12, 3)
    s = pt.create_schedule([A.op, B.op])
    _time_tiles_1d(s, A, B, loops, 4)
    text = s.explain()
    assert "computed with B.update(0) in its loops down to i2.shift.skew.inner" in text
    assert "i2.shift.skew.inner  0 .. 4   serial      parallel/vectorize: no (carries RAW)" in text
    assert "from stage 'B.update(0)', in the loops they share" in text
    inner = s[A].update(0).leaf_iter_vars[-1]
    with pytest.raises(pt.ScheduleError, match=r"vectorize\(i2.shift.skew.inner\).*would race"):
        s[A].update(0).vectorize(inner)


def test_a_lower_bound_another_exceeds_by_a_constant_is_dropped():
    """A's shifted rows start at max(0, x + 1), not max(max(0, x), x + 1)."""
    n, steps = 12, 3
    A0 = pt.placeholder((n, n), F, name="A0")
    A = pt.compute((n, n), lambda i, j: A0[i, j], name="A")
    B = pt.compute((n, n), lambda i, j: A0[i, j], name="B")
    t, i, j = pt.rdom([(0, steps), (1, n - 1), (1, n - 1)], names="t i j")
    B[i, j] = 0.5 * (A[i, j - 1] + A[i, j + 1])
    t2, i2, j2 = pt.rdom([(0, steps), (1, n - 1), (1, n - 1)], names="t2 i2 j2")
    A[i2, j2] = 0.5 * (B[i2, j2 - 1] + B[i2, j2 + 1])
    s = pt.create_schedule([A.op, B.op])
    ua, ub = s[A].update(0), s[B].update(0)
    j2 = ua.shift(j2, 1)
    rows = []
    for u, tt, jj in ((ub, t, j), (ua, t2, j2)):
        _, jj = u.skew(tt, jj, 2)
        jo, jj = u.split(jj, factor=4)
        u.reorder(jo, tt, u.op.axis[1], jj)
        rows.append(u.op.axis[1])
    ua.compute_with(ub, rows[1], order=t2)
    text = str(pt.lower(s, [A0, A, B]))
    loop = next(line for line in text.splitlines() if "for (j2_shift_skew_inner" in line)
    assert "- max(0, t * 2 + t_lo * 2 - j_skew_outer * 4 + 1))" in loop and "max(max(" not in loop
    a0 = np.random.default_rng(4).random((n, n))
    a, b = np.full((n, n), np.nan), np.full((n, n), np.nan)
    pt.build(s, [A0, A, B])(a0, a, b)
    ra, rb = a0.copy(), a0.copy()
    for _ in range(steps):
        rb[1:-1, 1:-1] = 0.5 * (ra[1:-1, :-2] + ra[1:-1, 2:])
        ra[1:-1, 1:-1] = 0.5 * (rb[1:-1, :-2] + rb[1:-1, 2:])
    np.testing.assert_allclose(a, ra, rtol=1e-14)
    np.testing.assert_allclose(b, rb, rtol=1e-14)
