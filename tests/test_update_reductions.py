"""Reductions inside update definitions: Y[i] = Y[i] + pt.sum(A[i, k] * x[k], axis=k)."""

import numpy as np
import pytest

import pypto as pt

F = "float64"
RNG = np.random.default_rng(7)


def _matvec_update(n, m):
    A = pt.placeholder((n, m), F, name="A")
    x = pt.placeholder((m,), F, name="x")
    Y0 = pt.placeholder((n,), F, name="Y0")
    Y = pt.compute((n,), lambda i: Y0[i], name="Y")
    i = pt.reduce_axis((0, n), name="i")
    k = pt.reduce_axis((0, m), name="k")
    Y[i] = Y[i] + pt.sum(A[i, k] * x[k], axis=k)
    return A, x, Y0, Y, i


@pytest.mark.parametrize("schedule", ["plain", "parallel", "split"])
def test_matvec_in_an_update(schedule):
    n, m = 11, 7
    A, x, Y0, Y, i = _matvec_update(n, m)
    s = pt.create_schedule(Y.op)
    if schedule == "parallel":
        s[Y].update(0).parallel(i)
    elif schedule == "split":
        s[Y].update(0).split(i, factor=4)
    mod = pt.build(s, [A, x, Y0, Y])
    a, xv, y0 = RNG.random((n, m)), RNG.random(m), RNG.random(n)
    y = np.full(n, np.nan)
    mod(a, xv, y0, y)
    np.testing.assert_allclose(y, y0 + a @ xv, rtol=1e-13)


def test_the_axis_of_a_reduction_inside_an_update_is_no_loop_to_schedule():
    A, x, Y0, Y, i = _matvec_update(5, 13)
    k = Y.op.updates[0][1].b.axes[0]  # Y[i] + sum(...): the sum's axis
    u = pt.create_schedule(Y.op)[Y].update(0)
    with pytest.raises(
        pt.ScheduleError,
        match=r"split on stage 'Y.update\(0\)': loop k is not a current loop of this stage "
        r"\(it is the axis of a reduction inside this stage's expression; make that "
        r"reduction a stage of its own to schedule it\); current loops: i",
    ):
        u.split(k, factor=4)


def test_forward_substitution_with_a_triangular_reduction():
    n = 10
    L = pt.placeholder((n, n), F, name="L")
    b = pt.placeholder((n,), F, name="b")
    x = pt.compute((n,), lambda i: b[i], name="x")
    i = pt.reduce_axis((0, n), name="i")
    j = pt.reduce_axis((0, i), name="j")
    x[i] = (x[i] - pt.sum(L[i, j] * x[j], axis=j)) / L[i, i]
    s = pt.create_schedule(x.op)
    mod = pt.build(s, [L, b, x])
    lv = np.tril(RNG.random((n, n))) + 2 * np.eye(n)
    bv = RNG.random(n)
    xv = np.empty(n)
    mod(lv, bv, xv)
    np.testing.assert_allclose(xv, np.linalg.solve(lv, bv), rtol=1e-12)
    s = pt.create_schedule(x.op)
    with pytest.raises(pt.ScheduleError, match=r"parallel\(i\) on 'x.update\(0\)' would race"):
        s[x].update(0).parallel(i)


def test_lu_rows_with_reductions_and_compute_with():
    n = 8
    A0 = pt.placeholder((n, n), F, name="A0")
    A = pt.compute((n, n), lambda i, j: A0[i, j], name="A")
    i = pt.reduce_axis((0, n), name="i")
    j = pt.reduce_axis((0, i), name="j")
    k = pt.reduce_axis((0, j), name="k")
    A[i, j] = (A[i, j] - pt.sum(A[i, k] * A[k, j], axis=k)) / A[j, j]
    j2 = pt.reduce_axis((i, n), name="j2")
    k2 = pt.reduce_axis((0, i), name="k2")
    A[i, j2] = A[i, j2] - pt.sum(A[i, k2] * A[k2, j2], axis=k2)
    s = pt.create_schedule(A.op)
    s[A].update(1).compute_with(s[A].update(0), i)
    mod = pt.build(s, [A0, A])
    a0 = RNG.random((n, n)) + n * np.eye(n)
    out = np.empty((n, n))
    mod(a0, out)
    r = a0.copy()
    for p in range(n):
        for q in range(p):
            r[p, q] = (r[p, q] - r[p, :q] @ r[:q, q]) / r[q, q]
        for q in range(p, n):
            r[p, q] -= r[p, :p] @ r[:p, q]
    np.testing.assert_allclose(out, r, rtol=1e-12)


def test_max_reduction_and_two_reductions_in_one_update():
    n, m = 5, 6
    A = pt.placeholder((n, m), F, name="A")
    Y = pt.compute((n,), lambda i: pt.const(0.0, F), name="Y")
    i = pt.reduce_axis((0, n), name="i")
    k = pt.reduce_axis((0, m), name="k")
    k2 = pt.reduce_axis((0, m), name="k2")
    Y[i] = pt.max(A[i, k], axis=k) - pt.sum(A[i, k2], axis=k2) * 0.5
    mod = pt.build(pt.create_schedule(Y.op), [A, Y])
    a = RNG.random((n, m))
    y = np.empty(n)
    mod(a, y)
    np.testing.assert_allclose(y, a.max(1) - a.sum(1) * 0.5, rtol=1e-13)


def test_bad_reductions_in_updates_are_refused():
    n = 4
    A = pt.placeholder((n, n), F, name="A")
    Y = pt.compute((n,), lambda i: pt.const(0.0, F), name="Y")
    i = pt.reduce_axis((0, n), name="i")
    k = pt.reduce_axis((0, n), name="k")
    k2 = pt.reduce_axis((0, n), name="k2")
    with pytest.raises(TypeError, match=r"a reduction inside a reduction"):
        Y[i] = pt.sum(pt.sum(A[k2, k], axis=k2), axis=k)
    with pytest.raises(TypeError, match=r"k is reduced over inside the update and also an axis"):
        Y[k] = pt.sum(A[i, k], axis=k)


def test_init_of_a_reduction_inside_an_update_is_where_it_starts():
    """``init=`` in an update was dropped: the accumulator started from 0."""
    n = 5
    A = pt.placeholder((n, n), "float64", name="A")
    X = pt.placeholder((n,), "float64", name="X")
    Y = pt.compute((n,), lambda i: X[i], name="Y")
    r = pt.reduce_axis((1, n), name="r")
    k = pt.reduce_axis((0, r), name="k")
    Y[r] = pt.sum(A[r, k] * Y[k], axis=k, init=X[r] * 3.0 + Y[r - 1])
    mod = pt.build(pt.create_schedule(Y.op), [A, X, Y])
    a = np.random.default_rng(3).random((n, n))
    x = np.arange(1.0, n + 1)
    y = np.full(n, np.nan)
    mod(a, x, y)
    want = x.copy()
    for i in range(1, n):
        want[i] = x[i] * 3.0 + want[i - 1] + sum(a[i, j] * want[j] for j in range(i))
    np.testing.assert_allclose(y, want, rtol=1e-12)


def test_a_tuple_reduction_inside_an_update_is_refused_when_defined():
    """It lost the reads of its other elements (build: 'A is not part of this
    schedule'; lower: an internal TypeError)."""

    def combine(x, y):
        keep = x[1] > y[1]
        return pt.select(keep, x[0], y[0]), pt.select(keep, x[1], y[1])

    argmax = pt.comm_reducer(
        combine, lambda it, vt: (pt.const(-1, it), pt.const(-np.inf, vt)), name="argmax"
    )
    A = pt.placeholder((6, 6), "float64", name="A")
    Z = pt.compute((6,), lambda i: pt.const(0, "int32"), name="Z")
    r = pt.reduce_axis((1, 6), name="r")
    k = pt.reduce_axis((0, r), name="k")
    with pytest.raises(TypeError, match=r"update of Z: a tuple reduction \(argmax\) inside"):
        Z[r] = argmax((k.astype("int32"), A[r, k]), axis=k)[0]


@pytest.mark.parametrize("triangular", [False, True])
def test_a_producer_read_in_an_updates_reduction_attached_at_its_loop(triangular):
    """X2's region per r spans the reduction's axis k, which is no loop of the update's
    schedule (k leaked into X2's bounds: 'size variable k appears in no argument')."""
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((n, m), "float64", name="A")
    x = pt.placeholder((m,), "float64", name="x")
    X2 = pt.compute((m,), lambda j: x[j] * 2.0, name="X2")
    Y = pt.compute((n,), lambda i: pt.const(1.0, "float64"), name="Y")
    r = pt.reduce_axis((0, n), name="r")
    k = pt.reduce_axis((0, pt.min(r + 1, m)) if triangular else (0, m), name="k")
    Y[r] = Y[r] + pt.sum(A[r, k] * X2[k], axis=k)
    s = pt.create_schedule(Y.op)
    s[X2].compute_at(s[Y].update(0), r)
    mod = pt.build(s, [A, x, Y])
    rng = np.random.default_rng(6)
    a, xx = rng.random((4, 7)), rng.random(7)
    y = np.full(4, np.nan)
    mod(a, xx, y)
    mask = np.tril(np.ones((4, 7))) if triangular else np.ones((4, 7))
    np.testing.assert_allclose(y, 1 + (a * mask) @ (2 * xx), rtol=1e-12)
