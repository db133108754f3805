"""Non-rectangular domains: loop bounds affine in outer loops (with offsets), triangular
reductions, interchange and split of triangular nests, tensors that read each other.
Every kernel is compared with a direct Python loop nest of the unscheduled program."""

import numpy as np
import pytest

import pypto as pt

RNG = np.random.default_rng(14)


def build_run(s, args, *arrays):
    mod = pt.build(s, args)
    mod(*arrays)
    return arrays[-1]


# ---------------------------------------------------------------- 1. offset outer loop


def offset_triangle(n):
    """Y[i] = Y0[i]; for i in 1..n-1: for j in 0..i-1: Y[i] += X[j]"""
    X = pt.placeholder((n,), "float32", name="X")
    Y0 = pt.placeholder((n,), "float32", name="Y0")
    Y = pt.compute((n,), lambda i: Y0[i], name="Y")
    i = pt.reduce_axis((1, n), name="i")
    j = pt.reduce_axis((0, i), name="j")
    Y[i] = Y[i] + X[j]
    return X, Y0, Y, i, j


def ref_offset_triangle(x, y0):
    y = y0.copy()
    for i in range(1, len(x)):
        for j in range(i):
            y[i] = y[i] + x[j]
    return y


@pytest.mark.parametrize("sched", ["default", "split_j", "split_i", "interchange"])
def test_bound_of_an_offset_loop_uses_its_value_not_its_counter(sched):
    n = 6
    X, Y0, Y, i, j = offset_triangle(n)
    s = pt.create_schedule(Y.op)
    u = s[Y].update(0)
    if sched == "split_j":
        u.split(j, factor=4)
    elif sched == "split_i":
        io, ii = u.split(i, factor=4)
    elif sched == "interchange":
        u.reorder(j, i)
    x, y0 = np.ones(n, np.float32), np.zeros(n, np.float32)
    y = build_run(s, [X, Y0, Y], x, y0, np.full(n, np.nan, np.float32))
    np.testing.assert_array_equal(y, ref_offset_triangle(x, y0))
    np.testing.assert_array_equal(y, [0, 1, 2, 3, 4, 5])


def test_offset_triangle_symbolic_size_random_data():
    n = pt.var("n")
    X, Y0, Y, i, j = offset_triangle(n)
    s = pt.create_schedule(Y.op)
    s[Y].update(0).split(j, factor=3)
    for size in (1, 2, 7, 20):
        x, y0 = RNG.random(size, dtype=np.float32), RNG.random(size, dtype=np.float32)
        y = build_run(s, [X, Y0, Y], x, y0, np.full(size, np.nan, np.float32))
        np.testing.assert_allclose(y, ref_offset_triangle(x, y0), rtol=1e-6)


# ---------------------------------------------------------------- 2. attached triangular reduction


def lower_triangle_sum(m):
    """S[i] = sum(A[i, k] for k <= i); D[i] = 2 * S[i]"""
    A = pt.placeholder((m, m), "float32", name="A")

    def row(i):
        k = pt.reduce_axis((0, i + 1), name="k")
        return pt.sum(A[i, k], axis=k)

    S = pt.compute((m,), row, name="S")
    D = pt.compute((m,), lambda i: S[i] * 2.0, name="D")
    return A, S, D


def ref_lower_triangle_sum(a):
    m = a.shape[0]
    s = np.zeros(m, np.float64)
    for i in range(m):
        for k in range(i + 1):
            s[i] += a[i, k]
    return 2 * s


@pytest.mark.parametrize("factor", [4, 3])
def test_reduction_bounded_by_a_spatial_axis_attached(factor):
    m = 8
    A, S, D = lower_triangle_sum(m)
    s = pt.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=factor)
    s[S].compute_at(s[D], io)
    a = RNG.random((m, m), dtype=np.float32)
    d = build_run(s, [A, D], a, np.full(m, np.nan, np.float32))
    np.testing.assert_allclose(d, ref_lower_triangle_sum(a), rtol=1e-5)


# ---------------------------------------------------------------- 3. tensors reading each other


def test_updates_of_two_tensors_reading_each_other_refused():
    n = 6
    X = pt.placeholder((n,), "float32", name="X")
    B = pt.compute((n,), lambda i: X[i], name="B")
    C = pt.compute((n,), lambda i: X[i] * 2.0, name="C")
    r = pt.reduce_axis((1, n), name="r")
    B[r] = B[r - 1] + C[r]
    r2 = pt.reduce_axis((1, n), name="r2")
    C[r2] = C[r2 - 1] + B[r2]
    s = pt.create_schedule([B.op, C.op])
    with pytest.raises(
        pt.ScheduleError, match=r"'[BC]' and '[CB]' read each other.*'B\.update\(0\)' reads C"
    ):
        pt.lower(s, [X, B, C])
    with pytest.raises(pt.ScheduleError, match=r"read each other"):
        pt.build(s, [X, B, C])


def test_update_reading_a_later_consumer_refused():
    n = 6
    X = pt.placeholder((n,), "float32", name="X")
    B = pt.compute((n,), lambda i: X[i], name="B")
    C = pt.compute((n,), lambda i: B[i] + 1.0, name="C")
    r = pt.reduce_axis((1, n), name="r")
    B[r] = B[r - 1] + C[r]  # C is computed from B, after all of B's updates
    s = pt.create_schedule([B.op, C.op])
    with pytest.raises(
        pt.ScheduleError, match=r"'C' and 'B' read each other.*'B\.update\(0\)' reads C"
    ):
        pt.lower(s, [X, B, C])


# ---------------------------------------------------------------- 4. cache_write, triangular


def test_cache_write_renames_reduce_bounds():
    m = 8
    A = pt.placeholder((m, m), "float32", name="A")

    def row(i):
        k = pt.reduce_axis((0, i + 1), name="k")
        return pt.sum(A[i, k], axis=k)

    S = pt.compute((m,), row, name="S")
    s = pt.create_schedule(S.op)
    s.cache_write(S, "local")
    a = RNG.random((m, m), dtype=np.float32)
    out = build_run(s, [A, S], a, np.full(m, np.nan, np.float32))
    np.testing.assert_allclose(out, ref_lower_triangle_sum(a) / 2, rtol=1e-5)


# ---------------------------------------------------------------- 5. cache_write after reorder


def test_cache_write_after_reorder_refused():
    B = pt.placeholder((8, 4), "float32", name="B")
    C = pt.compute((8, 4), lambda i, j: B[i, j] * 2.0, name="C")
    s = pt.create_schedule(C.op)
    s[C].reorder(C.op.axis[1], C.op.axis[0])
    with pytest.raises(
        pt.ScheduleError, match=r"cache_write on stage 'C': call it before .*reorder\(j, i\)"
    ):
        s.cache_write(C, "local")
    assert [st["prim"] for st in s.steps] == ["reorder"]
