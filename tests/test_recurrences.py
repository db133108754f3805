"""Recurrences and in-place updates: legal schedules match a sequential reference,
illegal ones are refused with a message naming the loop and the dependence."""

import numpy as np
import pytest

import pypto as pt

RNG = np.random.default_rng(7)


def run(s, args, *arrays):
    mod = pt.build(s, args)
    mod(*arrays)
    return arrays[-1]


# ---------------------------------------------------------------- prefix sum


def prefix_sum():
    n = pt.var("n")
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.compute((n,), lambda i: X[i], name="Y")
    r = pt.reduce_axis((1, n), name="r")
    Y[r] = Y[r - 1] + X[r]
    return X, Y, r


def ref_prefix(x):
    y = x.copy()
    for k in range(1, len(x)):
        y[k] = y[k - 1] + x[k]
    return y


@pytest.mark.parametrize("size", [1, 2, 17, 100])
def test_prefix_sum_default_schedule(size):
    X, Y, r = prefix_sum()
    s = pt.create_schedule(Y.op)
    x = RNG.random(size, dtype=np.float32)
    y = run(s, [X, Y], x, np.full(size, np.nan, np.float32))
    np.testing.assert_array_equal(y, ref_prefix(x))


def test_prefix_sum_split_unroll_and_parallel_init():
    X, Y, r = prefix_sum()
    s = pt.create_schedule(Y.op)
    s[Y].parallel(Y.op.axis[0])  # the pure definition has no dependences
    u = s[Y].update(0)
    ro, ri = u.split(r, factor=4)
    u.unroll(ri)
    x = RNG.random(37, dtype=np.float32)
    y = run(s, [X, Y], x, np.empty(37, np.float32))
    np.testing.assert_array_equal(y, ref_prefix(x))


@pytest.mark.parametrize("prim", ["parallel", "vectorize"])
def test_prefix_sum_parallel_refused(prim):
    X, Y, r = prefix_sum()
    s = pt.create_schedule(Y.op)
    with pytest.raises(
        pt.ScheduleError,
        match=rf"{prim}\(r\) on 'Y.update\(0\)' would race: Y\[r\] reads "
        r"Y\[r - 1\], written by Y\[r\].*witness: r=1 -> r=2",
    ):
        getattr(s[Y].update(0), prim)(r)


def test_prefix_sum_reversed_split_refused_and_schedule_kept():
    X, Y, r = prefix_sum()
    s = pt.create_schedule(Y.op)
    u = s[Y].update(0)
    ro, ri = u.split(r, factor=4)
    before = list(u.leaf_iter_vars)
    with pytest.raises(
        pt.ScheduleError,
        match=r"reorder\(r.inner, r.outer\) on 'Y.update\(0\)' would break a "
        r"dependence: Y\[r\] reads Y\[r - 1\]",
    ):
        u.reorder(ri, ro)
    assert u.leaf_iter_vars == before  # a refused primitive changes nothing
    x = RNG.random(10, dtype=np.float32)
    np.testing.assert_array_equal(run(s, [X, Y], x, np.empty(10, np.float32)), ref_prefix(x))


def test_parallel_inner_split_of_recurrence_refused():
    X, Y, r = prefix_sum()
    s = pt.create_schedule(Y.op)
    u = s[Y].update(0)
    ro, ri = u.split(r, factor=4)
    with pytest.raises(pt.ScheduleError, match=r"parallel\(r.inner\) on 'Y.update\(0\)'"):
        u.parallel(ri)
    with pytest.raises(pt.ScheduleError, match=r"parallel\(r.outer\) on 'Y.update\(0\)'"):
        u.parallel(ro)


# ---------------------------------------------------------------- IIR filter


def test_first_order_iir_filter():
    n = pt.var("n")
    X = pt.placeholder((n,), "float64", name="X")
    Y = pt.compute((n,), lambda i: X[i] * 0.5, name="Y")
    r = pt.reduce_axis((1, n), name="r")
    Y[r] = Y[r - 1] * 0.9 + X[r] * 0.5
    s = pt.create_schedule(Y.op)
    ro, ri = s[Y].update(0).split(r, nparts=3)
    x = RNG.random(50)
    y = run(s, [X, Y], x, np.empty(50))
    ref = x * 0.5
    for k in range(1, 50):
        ref[k] = ref[k - 1] * 0.9 + x[k] * 0.5
    np.testing.assert_allclose(y, ref, rtol=1e-13)  # the C may fuse multiply-adds


# ---------------------------------------------------------------- 2-D dynamic programming


def dp():
    n, m = pt.var("n"), pt.var("m")
    S = pt.placeholder((n, m), "float32", name="S")
    T = pt.compute((n, m), lambda i, j: S[i, j], name="T")
    ri, rj = pt.reduce_axis((1, n), name="ri"), pt.reduce_axis((1, m), name="rj")
    T[ri, rj] = pt.max(pt.max(T[ri - 1, rj], T[ri, rj - 1]), T[ri - 1, rj - 1]) + S[ri, rj]
    return S, T, ri, rj


def ref_dp(sv):
    t = sv.copy()
    for a in range(1, t.shape[0]):
        for b in range(1, t.shape[1]):
            t[a, b] = max(t[a - 1, b], t[a, b - 1], t[a - 1, b - 1]) + sv[a, b]
    return t


def check_dp(s, S, T, shape=(9, 13)):
    sv = RNG.random(shape, dtype=np.float32)
    np.testing.assert_array_equal(run(s, [S, T], sv, np.empty(shape, np.float32)), ref_dp(sv))


def test_dp_default_and_interchange():
    S, T, ri, rj = dp()
    s = pt.create_schedule(T.op)
    check_dp(s, S, T)
    s[T].update(0).reorder(rj, ri)  # distances (1,0), (0,1), (1,1) stay positive
    check_dp(s, S, T, (7, 4))


@pytest.mark.parametrize("loop", ["ri", "rj"])
def test_dp_parallel_without_skew_refused(loop):
    S, T, ri, rj = dp()
    s = pt.create_schedule(T.op)
    iv = {"ri": ri, "rj": rj}[loop]
    with pytest.raises(
        pt.ScheduleError,
        match=rf"parallel\({loop}\) on 'T.update\(0\)' would race: T\[ri, rj\] "
        r"reads T\[.*\], written by T\[ri, rj\]",
    ):
        s[T].update(0).parallel(iv)


def test_dp_fused_symbolic_loops_split_unrolled_and_parallel_refused():
    """fuse(ri, rj) of symbolic extents, then split by 8: not affine, but the two parts
    stay adjacent and run in the fused loop's order, so it is verified (as the fuse)."""
    S, T, ri, rj = dp()
    s = pt.create_schedule(T.op)
    u = s[T].update(0)
    fo, fi = u.split(u.fuse(ri, rj), factor=8)
    with pytest.raises(pt.ScheduleError, match=r"parallel\(ri.rj.fused.outer\) on 'T.upd"):
        u.parallel(fo)
    with pytest.raises(pt.ScheduleError, match=r"vectorize\(ri.rj.fused.inner\) on 'T.upd"):
        u.vectorize(fi)
    u.unroll(fi)
    for shape in [(9, 13), (2, 2), (1, 5)]:
        check_dp(s, S, T, shape)


def test_dp_skewed_wavefront_is_parallel():
    S, T, ri, rj = dp()
    s = pt.create_schedule(T.op)
    u = s[T].update(0)
    ni, nj = u.skew(ri, rj, factor=1)
    u.reorder(nj, ni)
    u.parallel(ni)
    assert "parallel for (ri" in str(pt.lower(s, [S, T]))
    for shape in [(9, 13), (2, 2), (13, 5)]:
        check_dp(s, S, T, shape)


def test_dp_skew_factor_two_tiled():
    S, T, ri, rj = dp()
    s = pt.create_schedule(T.op)
    u = s[T].update(0)
    ni, nj = u.skew(ri, rj, factor=2)
    u.reorder(nj, ni)
    io, ii = u.split(ni, factor=3)
    u.vectorize(ii)
    check_dp(s, S, T, (11, 6))


def test_dp_reversed_loop_order_via_skew_refused():
    # T[ri, rj] = T[ri - 1, rj + 1]: distance (1, -1) forbids interchange
    n, m = 8, 8
    S = pt.placeholder((n, m), "float32", name="S")
    T = pt.compute((n, m), lambda i, j: S[i, j], name="T")
    ri, rj = pt.reduce_axis((1, n), name="ri"), pt.reduce_axis((0, m - 1), name="rj")
    T[ri, rj] = T[ri - 1, rj + 1] + S[ri, rj]
    s = pt.create_schedule(T.op)
    u = s[T].update(0)
    with pytest.raises(
        pt.ScheduleError,
        match=r"reorder\(rj, ri\) on 'T.update\(0\)' would break a dependence: "
        r"T\[ri, rj\] reads T\[ri - 1, rj \+ 1\]",
    ):
        u.reorder(rj, ri)
    ni, nj = u.skew(ri, rj, factor=1)  # distance becomes (1, 0): now interchange is legal
    u.reorder(nj, ni)
    sv = RNG.random((n, m), dtype=np.float32)
    ref = sv.copy()
    for a in range(1, n):
        for b in range(0, m - 1):
            ref[a, b] = ref[a - 1, b + 1] + sv[a, b]
    np.testing.assert_array_equal(run(s, [S, T], sv, np.empty((n, m), np.float32)), ref)


# ---------------------------------------------------------------- Gauss-Seidel sweeps


def gauss_seidel(steps=3):
    n = pt.var("n")
    U0 = pt.placeholder((n, n), "float32", name="U0")
    U = pt.compute((n, n), lambda i, j: U0[i, j], name="U")
    t, i, j = pt.rdom([(0, steps), (1, n - 1), (1, n - 1)], names="t i j")
    U[i, j] = (U[i - 1, j] + U[i + 1, j] + U[i, j - 1] + U[i, j + 1]) * 0.25
    return U0, U, (t, i, j)


def ref_gs(u0, steps=3):
    u = u0.copy()
    n = u.shape[0]
    for _ in range(steps):
        for a in range(1, n - 1):
            for b in range(1, n - 1):
                u[a, b] = (u[a - 1, b] + u[a + 1, b] + u[a, b - 1] + u[a, b + 1]) * np.float32(0.25)
    return u


def test_gauss_seidel_sweeps():
    U0, U, (t, i, j) = gauss_seidel()
    s = pt.create_schedule(U.op)
    u = s[U].update(0)
    jo, ji = u.split(j, factor=4)
    u.unroll(ji)
    u0 = RNG.random((10, 10), dtype=np.float32)
    np.testing.assert_array_equal(run(s, [U0, U], u0, np.empty((10, 10), np.float32)), ref_gs(u0))


def test_gauss_seidel_time_axis_inside_refused():
    U0, U, (t, i, j) = gauss_seidel()
    s = pt.create_schedule(U.op)
    with pytest.raises(
        pt.ScheduleError,
        match=r"reorder\(i, t\) on 'U.update\(0\)' would break a dependence: "
        r"U\[i, j\] reads U\[i \+ 1, j\], written by U\[i, j\]",
    ):
        s[U].update(0).reorder(i, t)


@pytest.mark.parametrize("loop", ["t", "i", "j"])
def test_gauss_seidel_parallel_refused(loop):
    U0, U, axes = gauss_seidel()
    s = pt.create_schedule(U.op)
    iv = dict(zip("tij", axes))[loop]
    with pytest.raises(
        pt.ScheduleError, match=rf"parallel\({loop}\) on 'U.update\(0\)' would race"
    ):
        s[U].update(0).parallel(iv)


def test_gauss_seidel_wavefront():
    U0, U, (t, i, j) = gauss_seidel(steps=2)
    s = pt.create_schedule(U.op)
    u = s[U].update(0)
    # within a sweep (t fixed): distances (0,1,0), (0,0,1), and across sweeps (1,-1,0), (1,0,-1)
    ni, nj = u.skew(i, j, factor=1)  # j' = i + j: (0,1,1), (0,0,1), (1,-1,-1), (1,0,-1)
    u.reorder(t, nj, ni)  # (0,1,1)->(0,1,1), (0,1,0), (1,-1,-1), (1,-1,0)
    u.parallel(ni)  # nothing is carried by i inside a wavefront j'
    u0 = RNG.random((9, 9), dtype=np.float32)
    np.testing.assert_array_equal(
        run(s, [U0, U], u0, np.empty((9, 9), np.float32)), ref_gs(u0, steps=2)
    )


# ---------------------------------------------------------------- histogram


def histogram(bins=8):
    n = pt.var("n")
    X = pt.placeholder((n,), "int32", name="X")
    H = pt.compute((bins,), lambda b: pt.const(0, "int32"), name="H")
    r = pt.reduce_axis((0, n), name="r")
    H[X[r]] += 1
    return X, H, r


def test_histogram():
    X, H, r = histogram()
    s = pt.create_schedule(H.op)
    ro, ri = s[H].update(0).split(r, factor=4)
    x = RNG.integers(0, 8, 99).astype(np.int32)
    h = run(s, [X, H], x, np.full(8, -1, np.int32))
    np.testing.assert_array_equal(h, np.bincount(x, minlength=8))


def test_histogram_parallel_refused_conservatively():
    X, H, r = histogram()
    s = pt.create_schedule(H.op)
    with pytest.raises(
        pt.ScheduleError,
        match=r"parallel\(r\) on 'H.update\(0\)' would race: H\[X\[r\]\] and "
        r"H\[X\[r\]\] write the same element",
    ):
        s[H].update(0).parallel(r)


def test_histogram_out_of_range_data_raises(tmp_path):
    X, H, r = histogram()
    mod = pt.build(pt.create_schedule(H.op), [X, H])
    x = np.array([1, 2, 8], np.int32)
    msg = r"an index into H computed from data \(dimension 0 of size 8\) is out of range"
    with pytest.raises(IndexError, match=msg):
        mod(x, np.zeros(8, np.int32))
    loaded = pt.load_module(mod.export_library(str(tmp_path / "h.so")))  # the note is kept
    with pytest.raises(IndexError, match=msg):
        loaded(x, np.zeros(8, np.int32))


# ---------------------------------------------------------------- several updates, consumers


def test_two_updates_and_a_consumer():
    n = 12
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.compute((n,), lambda i: X[i], name="Y")
    r1 = pt.reduce_axis((1, n), name="r1")
    Y[r1] = Y[r1 - 1] + X[r1]  # prefix sum
    r2 = pt.reduce_axis((0, n - 1), name="r2")
    Y[n - 2 - r2] = Y[n - 2 - r2] + Y[n - 1 - r2]  # then a suffix sum over it
    Z = pt.compute((n,), lambda i: Y[i] * 2.0, name="Z")
    s = pt.create_schedule(Z.op)
    s[Z].vectorize(Z.op.axis[0])
    x = RNG.integers(0, 9, n).astype(np.float32)
    z = run(s, [X, Z], x, np.empty(n, np.float32))
    y = np.cumsum(x)
    y = np.cumsum(y[::-1])[::-1]
    np.testing.assert_array_equal(z, y * 2)
    with pytest.raises(pt.ScheduleError, match=r"parallel\(r2\) on 'Y.update\(1\)' would race"):
        s[Y].update(1).parallel(r2)


def test_update_definition_errors():
    X, Y, r = prefix_sum()
    with pytest.raises(TypeError, match="needs at least one reduce axis"):
        Y[0] = Y[0] + 1.0
    with pytest.raises(TypeError, match="value is float64, tensor is float32"):
        Y[r] = pt.cast("float64", Y[r - 1])
    with pytest.raises(TypeError, match="only a tensor defined by pt.compute"):
        X[r] = X[r - 1]
    with pytest.raises(TypeError, match="is a loop variable of a compute"):
        Y[r] = Y[Y.op.axis[0].var]
    s = pt.create_schedule(Y.op)
    with pytest.raises(IndexError, match=r"Y has 1 update definition\(s\), asked for update\(1\)"):
        s[Y].update(1)


@pytest.mark.parametrize("inline", [False, True])
def test_an_update_reading_a_producer_of_its_own_final_values_is_refused(inline):
    """P reads Y's final values and Y's update reads P: a cycle in the definitions,
    inlining P does not make it an in-place recurrence (that would read Y mid-update)."""
    X = pt.placeholder((16,), "float64", name="X")
    Y = pt.compute((16,), lambda i: X[i], name="Y")
    P = pt.compute((16,), lambda i: Y[pt.max(i - 1, 0)], name="P")
    r = pt.reduce_axis((1, 16), name="r")
    Y[r] = P[r] + X[r]
    s = pt.create_schedule(Y.op)
    if inline:
        s[P].compute_inline()
    with pytest.raises(pt.ScheduleError, match=r"tensors 'P' and 'Y' read each other \('P' r"):
        pt.build(s, [X, Y])


def test_compute_at_of_updated_tensor_refused():
    X, Y, r = prefix_sum()
    Z = pt.compute(Y.shape, lambda i: Y[i] + 1.0, name="Z")
    s = pt.create_schedule(Z.op)
    with pytest.raises(
        pt.ScheduleError, match="a tensor with update definitions is computed at the root"
    ):
        s[Y].compute_at(s[Z], Z.op.axis[0])


def test_update_added_after_create_schedule_refused():
    n = 8
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.compute((n,), lambda i: X[i], name="Y")
    s = pt.create_schedule(Y.op)
    r = pt.reduce_axis((1, n), name="r")
    Y[r] = Y[r - 1] + X[r]
    with pytest.raises(pt.ScheduleError, match="given update definitions after create_schedule"):
        pt.lower(s, [X, Y])


# ---------------------------------------------------------------- explain


def test_explain_reports_dependences_and_parallel_loops(capsys):
    S, T, ri, rj = dp()
    s = pt.create_schedule(T.op)
    u = s[T].update(0)
    ni, nj = u.skew(ri, rj, factor=1)
    u.reorder(nj, ni)
    text = s.explain()
    assert "stage 'T.update(0)'" in text
    lines = text.splitlines()
    skew_line = next(x for x in lines if x.strip().startswith("rj.skew"))
    ri_line = next(x for x in lines if x.strip().startswith("ri "))
    assert "parallel/vectorize: no (carries RAW)" in skew_line
    assert "parallel/vectorize: yes" in ri_line
    assert "RAW  T[ri, rj] reads T[ri - 1, rj - 1], written by T[ri, rj]   distance (2, 1)" in text
    assert pt.explain(s) == text
    # printed (API.md: s.explain() prints), and at a Python prompt not shown again
    assert capsys.readouterr().out == text + text
    assert repr(text) == "<explanation of 2 stage(s), printed above; str() gives the text>"


# ---------------------------------------------------------------- compute_at inside parallel loops


def _halo(overlap: bool):
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((n, m), "float32", name="A")
    B = pt.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    if overlap:  # row i needs rows i - 1 and i of B
        C = pt.compute((n, m), lambda i, j: B[i, j] + B[pt.max(i - 1, 0), j], name="C")
    else:
        C = pt.compute((n, m), lambda i, j: B[i, j] + 1.0, name="C")
    s = pt.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].parallel(C.op.axis[0])
    return s, A, C


def test_overlapping_regions_of_symbolic_size_get_a_buffer_per_iteration():
    """A shared buffer would race (rows i - 1 and i per iteration of the parallel i):
    each iteration computes its rows into its own buffer, sized at run time."""
    s, A, C = _halo(overlap=True)
    assert "pt_alloc_or_die" in pt.build(s, [A, C]).source
    a = RNG.random((5, 7), dtype=np.float32)
    b = a * 2
    want = b + b[np.maximum(np.arange(5) - 1, 0)]
    np.testing.assert_allclose(run(s, [A, C], a, np.empty((5, 7), np.float32)), want, rtol=1e-6)


def test_disjoint_regions_in_a_shared_buffer_accepted():
    s, A, C = _halo(overlap=False)
    a = RNG.random((5, 7), dtype=np.float32)
    np.testing.assert_array_equal(run(s, [A, C], a, np.empty((5, 7), np.float32)), a * 2 + 1)


def test_overlapping_regions_with_private_buffers_accepted():
    n, m = 6, 8
    A = pt.placeholder((n, m), "float32", name="A")
    B = pt.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = pt.compute((n, m), lambda i, j: B[i, j] + B[pt.max(i - 1, 0), j], name="C")
    s = pt.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])  # constant 2 x 8 region: a private buffer
    s[C].parallel(C.op.axis[0])
    a = RNG.random((n, m), dtype=np.float32)
    b = a * 2
    ref = b + b[np.maximum(np.arange(n) - 1, 0)]
    np.testing.assert_array_equal(run(s, [A, C], a, np.empty((n, m), np.float32)), ref)


def test_a_producer_attached_in_an_update_that_the_pure_definition_reads_is_refused():
    """S's pure definition reads P too, outside the update's loop: it names that one."""
    A = pt.placeholder((11, 7), "float32", name="A")
    P = pt.compute((11, 7), lambda y, x: A[y, x] * 2.0, name="P")
    S = pt.compute((11, 7), lambda y, x: P[y, x], name="S")
    r, c = pt.reduce_axis((1, 11), name="r"), pt.reduce_axis((0, 7), name="c")
    S[r, c] = S[r - 1, c] + P[r, c]
    s = pt.create_schedule(S.op)
    s[P].compute_at(s[S].update(0), s[S].update(0).op.axis[0])
    with pytest.raises(
        pt.ScheduleError,
        match=r"compute_at on stage 'P': its consumer the pure definition of 'S' runs "
        r"outside loop r of 'S.update\(0\)', so the values would not be ready",
    ):
        pt.build(s, [A, S])


TARGETS_HERE = [t for t in ("host", "generic", "x86-avx2") if pt.Target(t).can_run()]


@pytest.mark.parametrize("target", TARGETS_HERE)
def test_a_vectorized_loop_whose_rows_overwrite_each_other_keeps_the_last_row(target):
    """gcc 12 let the inner loop's omp simd hide the outer loop's output dependence and
    vectorized that loop too: an earlier row's value survived. Such a loop is marked
    GCC ivdep instead."""
    n, m = 20, 8
    X = pt.placeholder((n + m,), "float64", name="X")
    Y = pt.compute((n + m,), lambda i: pt.const(-7.0, "float64"), name="Y")
    a, b = pt.rdom([(0, n), (0, m)], names="a b")
    Y[a + b] = X[a + b] * pt.cast("float64", a)  # rows overlap: the last to write wins
    s = pt.create_schedule(Y.op)
    s[Y].update(0).vectorize(b)
    mod = pt.build(s, [X, Y], target=target)
    x = np.arange(n + m, dtype="f8")
    want = np.full(n + m, -7.0)
    for i in range(n):
        want[i : i + m] = x[i : i + m] * i
    np.testing.assert_array_equal(mod(x), want)
    assert "#pragma GCC ivdep" in mod.source


@pytest.mark.parametrize("target", TARGETS_HERE)
def test_a_vectorized_triangular_loop_writing_backwards_keeps_the_last_write(target):
    M = pt.placeholder((4, 4), "float64", name="M")
    A = pt.compute((4,), lambda i: pt.const(-7.0, "float64"), name="A")
    r0 = pt.reduce_axis((1, 4), name="r0")
    r1 = pt.reduce_axis((r0, r0 + 2), name="r1")
    A[4 - r1] = M[0, r0]
    s = pt.create_schedule(A.op)
    s[A].update(0).vectorize(r1)
    m = np.arange(16, dtype="f8").reshape(4, 4)
    want = np.full(4, -7.0)
    for i in range(1, 4):
        for j in range(i, i + 2):
            want[4 - j] = m[0, i]
    np.testing.assert_array_equal(pt.build(s, [M, A], target=target)(m), want)


def test_a_vectorized_read_modify_write_keeps_omp_simd():
    """Only overwrites change the pragma: a loop that reads what it stores (an
    accumulation over the outer loop) stays omp simd."""
    X = pt.placeholder((6, 8), "float32", name="X")
    Y = pt.compute((8,), lambda j: pt.const(0.0, "float32"), name="Y")
    k, j = pt.rdom([(0, 6), (0, 8)], names="k j")
    Y[j] = Y[j] + X[k, j]
    s = pt.create_schedule(Y.op)
    s[Y].update(0).vectorize(j)
    mod = pt.build(s, [X, Y])
    x = np.arange(48, dtype="f4").reshape(6, 8)
    np.testing.assert_array_equal(mod(x), x.sum(0))
    assert "#pragma omp simd" in mod.source and "ivdep" not in mod.source


@pytest.mark.parametrize("target", TARGETS_HERE)
@pytest.mark.parametrize("n", [2, 5, 8])
def test_a_vectorized_loop_over_an_inner_recurrence_keeps_its_order(target, n):
    """Y[a, a] -= Y[a, c] Y[c, a] / 4 over c, vectorized over a: a = c reads, as
    Y[a, c], what c's earlier step stored as Y[a, a]. Under omp simd gcc 12 vectorized
    the a loop around c as if that did not hold (Y[1, 1] off at n = 2, found by the
    domains fuzzer); the loop gets no pragma now, and the compiler's own dependence
    test decides it."""
    Y0 = pt.placeholder((n, n), "float64", name="Y0")
    Y = pt.compute((n, n), lambda i, j: Y0[i, j], name="Y")
    a, c = pt.rdom([(0, n), (0, n)], names="a c")
    Y[a, a] = Y[a, a] - Y[a, c] * Y[c, a] * 0.25
    s = pt.create_schedule(Y.op)
    s[Y].update(0).vectorize(a)
    mod = pt.build(s, [Y0, Y], target=target)
    y0 = np.random.default_rng(n).integers(-3, 4, (n, n)).astype("f8")
    want = y0.copy()
    for i in range(n):
        for k in range(n):
            want[i, i] -= want[i, k] * want[k, i] * 0.25
    np.testing.assert_array_equal(mod(y0), want)
    assert "not omp simd: pypto/autovec.py */\n  for (int64_t a" in mod.source
