"""Non-rectangular domains: loop bounds affine in outer loops (with offsets), triangular
reductions, interchange and split of triangular nests, tensors that read each other.
Every kernel is compared with a direct Python loop nest of the unscheduled program."""

import numpy as np
import pytest

import pypto as pt
from pypto.loop_ir import Allocate, For, walk_stmts

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


def test_cache_write_after_reorder_lays_the_cache_out_in_loop_order():
    # the reorder is kept, as TVM does: the cache is laid out (j, i), computed in that order
    B = pt.placeholder((8, 4), "float32", name="B")
    C = pt.compute((8, 4), lambda i, j: B[i, j] * 2.0, name="C")
    s = pt.create_schedule(C.op)
    s[C].reorder(C.op.axis[1], C.op.axis[0])
    CL = s.cache_write(C, "local")
    assert [str(d) for d in CL.shape] == ["4", "8"]
    assert [st["prim"] for st in s.steps] == ["reorder", "cache_write"]
    b = np.arange(32, dtype="float32").reshape(8, 4)
    np.testing.assert_array_equal(pt.build(s, [B, C])(b), b * 2)
    s2 = pt.create_schedule(C.op)
    s2[C].reorder(C.op.axis[1], C.op.axis[0])
    s2[C].parallel(C.op.axis[1])
    with pytest.raises(
        pt.ScheduleError,
        match=r"cache_write on stage 'C': call it before annotating .*parallel\(j\)",
    ):
        s2.cache_write(C, "local")
    assert [st["prim"] for st in s2.steps] == ["reorder", "parallel"]


# ---------------------------------------------------------------- select: the branch not taken


def guarded_update(lo):
    """Y[r] = r >= 1 ? 2 * Y[r] : Y[r + 1] + X[r], for r in [lo, n)"""
    n = 16
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.compute((n + 1,), lambda i: pt.const(1.0, "float32"), name="Y")
    r = pt.reduce_axis((lo, n), name="r")
    Y[r] = pt.select(r >= 1, Y[r] * 2.0, Y[r + 1] + X[r])
    return X, Y, r


def ref_guarded_update(x, lo):
    y = np.ones(len(x) + 1, np.float32)
    for r in range(lo, len(x)):
        y[r] = y[r] * 2 if r >= 1 else y[r + 1] + x[r]
    return y


def test_read_in_the_branch_not_taken_is_no_dependence():
    X, Y, r = guarded_update(1)  # r >= 1 always: Y[r + 1] is never read
    s = pt.create_schedule(Y.op)
    s[Y].update(0).parallel(r)
    x = RNG.random(16, dtype=np.float32)
    y = build_run(s, [X, Y], x, np.full(17, np.nan, np.float32))
    np.testing.assert_array_equal(y, ref_guarded_update(x, 1))


def test_read_in_the_branch_taken_is_a_dependence():
    X, Y, r = guarded_update(0)  # r = 0 reads Y[1], which r = 1 overwrites
    s = pt.create_schedule(Y.op)
    with pytest.raises(
        pt.ScheduleError,
        match=r"parallel\(r\) on 'Y.update\(0\)' would race: Y\[r\] overwrites the element "
        r"that Y\[r\] reads as Y\[r \+ 1\].*witness: r=0 -> r=1",
    ):
        s[Y].update(0).parallel(r)


# ---------------------------------------------------------------- bound inference


def producer_consumer(shape):
    A = pt.placeholder(shape, "float32", name="A")
    P = pt.compute(shape, lambda *i: A[i] + 1.0, name="P")
    C = pt.compute(shape, lambda *i: P[i] * 2.0, name="C")
    return A, P, C


def local_buffer(func, name):
    found = [
        b for b in _allocations(func.body) if b.buffer.name == name and b.buffer.scope == "local"
    ]
    assert found, f"no local buffer {name}"
    return found[0].size.value


def _allocations(s):
    return [x for x in walk_stmts(s) if isinstance(x, Allocate)]


def test_region_of_a_fused_and_split_consumer_is_exact():
    """(m, 6) fused and split by 3: each outer iteration reads 3 elements of one row."""
    A, P, C = producer_consumer((5, 6))
    s = pt.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    fo, fi = s[C].split(f, factor=3)
    s[P].compute_at(s[C], fo)
    assert local_buffer(pt.lower(s, [A, C]), "P") == 3  # was 6 columns (and 2 rows)
    a = RNG.random((5, 6), dtype=np.float32)
    c = build_run(s, [A, C], a, np.full((5, 6), np.nan, np.float32))
    np.testing.assert_array_equal(c, (a + 1) * 2)


def test_region_of_a_fused_consumer_split_by_4_spans_two_rows():
    A, P, C = producer_consumer((5, 6))
    s = pt.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    fo, fi = s[C].split(f, factor=4)  # iteration 1 reads (0, 4), (0, 5), (1, 0), (1, 1)
    s[P].compute_at(s[C], fo)
    a = RNG.random((5, 6), dtype=np.float32)
    c = build_run(s, [A, C], a, np.full((5, 6), np.nan, np.float32))
    np.testing.assert_array_equal(c, (a + 1) * 2)


def test_split_into_more_parts_than_iterations():
    A, P, C = producer_consumer((8,))
    s = pt.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], nparts=32)
    s[P].compute_at(s[C], o)
    func = pt.lower(s, [A, C])
    loops = _loops(func.body)
    assert loops and loops[0].extent.value == 8  # not 32 iterations, 24 of them idle
    a = RNG.random(8, dtype=np.float32)
    c = build_run(s, [A, C], a, np.full(8, np.nan, np.float32))
    np.testing.assert_array_equal(c, (a + 1) * 2)


def test_split_in_parts_of_a_region_that_is_empty_in_some_iterations():
    """B attached inside C's j.inner.inner covers no column where that loop overruns the
    extent: its split in parts then runs no iteration, instead of dividing by a 0 part."""
    A, B, C = producer_consumer((1, 1))
    s = pt.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=3)
    io, ii = s[C].split(i, factor=1)
    jio, jii = s[C].split(ji, factor=2)
    s[C].reorder(io, jii, ii, jio, jo)
    s[B].compute_at(s[C], ii)
    bo, bi = s[B].split(B.op.axis[1], nparts=1)
    s[B].reorder(bo, bi, B.op.axis[0])
    a = RNG.random((1, 1), dtype=np.float32)
    c = build_run(s, [A, C], a, np.full((1, 1), np.nan, np.float32))
    np.testing.assert_array_equal(c, (a + 1) * 2)


def _loops(s):
    return [x for x in walk_stmts(s) if isinstance(x, For)]


def test_producer_attached_inside_a_banded_update():
    """Y[i] += P[j] for j in [i - 1, i + 1): P computed per i, two elements at a time."""
    n = 7
    X = pt.placeholder((n,), "float32", name="X")
    Y0 = pt.placeholder((n,), "float32", name="Y0")
    P = pt.compute((n,), lambda i: X[i] * 2.0, name="P")
    Y = pt.compute((n,), lambda i: Y0[i], name="Y")
    i = pt.reduce_axis((1, n), name="i")
    j = pt.reduce_axis((i - 1, i + 1), name="j")
    Y[i] = Y[i] + P[j]
    s = pt.create_schedule(Y.op)
    s[P].compute_at(s[Y].update(0), i)
    assert local_buffer(pt.lower(s, [X, Y0, Y]), "P") == 2
    x, y0 = RNG.random(n, dtype=np.float32), RNG.random(n, dtype=np.float32)
    y = build_run(s, [X, Y0, Y], x, y0, np.full(n, np.nan, np.float32))
    ref = y0.copy()
    for a in range(1, n):
        for b in range(a - 1, a + 1):
            ref[a] += 2 * x[b]
    np.testing.assert_allclose(y, ref, rtol=1e-6)


# ---------------------------------------------------------------- long chains of stages


def plus_one(t, name):
    return pt.compute(t.shape, lambda i: t[i] + 1.0, name=name)


@pytest.mark.parametrize("how", ["inline", "compute_at"])
def test_chain_of_three_hundred_stages(how):
    n, depth = 16, 300
    X = pt.placeholder((n,), "float32", name="X")
    chain = [X]
    for k in range(depth):
        chain.append(plus_one(chain[-1], f"T{k}"))
    out = chain[-1]
    s = pt.create_schedule(out.op)
    for t, consumer in zip(chain[1:-1], chain[2:]):
        if how == "inline":
            s[t].compute_inline()
        else:
            s[t].compute_at(s[consumer], consumer.op.axis[0])
    x = RNG.random(n, dtype=np.float32)
    y = build_run(s, [X, out], x, np.full(n, np.nan, np.float32))
    ref = x.copy()
    for _ in range(depth):
        ref = ref + np.float32(1)
    np.testing.assert_array_equal(y, ref)


def test_bound_not_affine_in_outer_loops_refused():
    A = pt.placeholder((6, 40), "float32", name="A")

    def row(i):
        k = pt.reduce_axis((0, i * i), name="k")
        return pt.sum(A[i, k], axis=k)

    S = pt.compute((6,), row, name="S")
    s = pt.create_schedule(S.op)
    with pytest.raises(
        pt.ScheduleError,
        match=r"stage 'S': the range \[0, i \* i\) of loop k is not affine in the outer loops",
    ):
        pt.lower(s, [A, S])


# ---------------------------------------------------------------- pure stages, two-sided bounds


@pytest.mark.parametrize(
    "sched", ["k_outer", "ikj_vectorized", "split_i_parallel", "fused_parallel"]
)
def test_band_reduction_in_a_pure_stage(sched):
    """C[i, j] = sum(A[i, k] * A[k, j] for k in [j, i + 1))"""
    n = 7
    A = pt.placeholder((n, n), "float64", name="A")
    ks = []

    def body(i, j):
        ks.append(pt.reduce_axis((j, i + 1), name="k"))
        return pt.sum(A[i, ks[-1]] * A[ks[-1], j], axis=ks[-1])

    C = pt.compute((n, n), body, name="C")
    k, (i, j) = ks[0], C.op.axis
    s = pt.create_schedule(C.op)
    if sched == "k_outer":
        s[C].reorder(k, i, j)
    elif sched == "ikj_vectorized":
        s[C].reorder(i, k, j)
        s[C].vectorize(j)
    elif sched == "split_i_parallel":
        io, ii = s[C].split(i, factor=3)
        s[C].reorder(io, k, ii, j)
        s[C].parallel(io)
    else:
        s[C].parallel(s[C].fuse(i, j))
    a = RNG.random((n, n))
    c = build_run(s, [A, C], a, np.full((n, n), np.nan))
    ref = [[sum(a[x, z] * a[z, y] for z in range(y, x + 1)) for y in range(n)] for x in range(n)]
    np.testing.assert_allclose(c, ref, rtol=1e-12)
