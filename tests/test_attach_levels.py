"""Chains of attached stages at different levels of one consumer's loops.

B feeds C feeds D; C is attached deep in D's loops and B further out, so B's region
per iteration covers what C reads in every iteration of the loops between them, and
C's own loop extents name those loops:

    for io:                              (B at io)
      B[io*4 .. io*4 + 5) = A * 2
      for iio: for iii:                  (C at iio, D's split of the inner part)
        C[..] = B[..] + 1
        D[..] = C[..] + 1
"""

import numpy as np
import pytest

import pypto as pt


def _chain(n, shape=None):
    shape = shape or (n,)
    A = pt.placeholder(shape, "float32", name="A")
    B = pt.compute(shape, lambda *i: A[i] * 2.0, name="B")
    C = pt.compute(shape, lambda *i: B[i] + 1.0, name="C")
    D = pt.compute(shape, lambda *i: C[i] + 1.0, name="D")
    return A, B, C, D


def _run(s, A, D, shape):
    mod = pt.build(s, [A, D])
    a = np.random.default_rng(0).random(shape, dtype=np.float32)
    d = np.full(shape, np.nan, np.float32)
    mod(a, d)
    np.testing.assert_allclose(d, 2 * a + 2, rtol=1e-6)


@pytest.mark.parametrize("n", [11, 12, 1])
def test_a_producer_attached_outside_its_consumers_attach_loop(n):
    A, B, C, D = _chain(n)
    s = pt.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], 4)
    iio, _ = s[D].split(ii, 2)
    s[C].compute_at(s[D], iio)
    s[B].compute_at(s[D], io)
    _run(s, A, D, (n,))


def test_a_fused_consumer_attached_inside_a_split_with_its_producer_outside():
    A, B, C, D = _chain(None, (6, 7))
    s = pt.create_schedule(D.op)
    jo, ji = s[D].split(D.op.axis[1], factor=4)
    s[C].fuse(*C.op.axis)
    s[C].compute_at(s[D], ji)
    s[B].compute_at(s[D], jo)
    _run(s, A, D, (6, 7))


def test_loops_of_one_iteration_between_the_attach_points():
    A, B, C, D = _chain(None, (4, 4))
    s = pt.create_schedule(D.op)
    jo, ji = s[D].split(D.op.axis[1], factor=1)
    _, jii = s[D].split(ji, factor=2)
    s[C].compute_at(s[D], jii)
    s[B].compute_at(s[D], jo)
    _run(s, A, D, (4, 4))


@pytest.mark.parametrize("size", [5, 1])
def test_a_triangular_producer_attached_in_a_fused_loop_of_symbolic_extent(size):
    """S's loop k runs [0, i + 1) and its row i is ``f // n`` in D's fused loop f: not
    affine, so isl takes it as a parameter of the attach iteration."""
    n = pt.var("n")
    A = pt.placeholder((n, n), "float32", name="A")

    def row(i):
        k = pt.reduce_axis((0, i + 1), name="k")
        return pt.sum(A[i, k], axis=k)

    S = pt.compute((n,), row, name="S")
    D = pt.compute((n, n), lambda i, j: S[i] * 2.0, name="D")
    s = pt.create_schedule(D.op)
    s[S].compute_at(s[D], s[D].fuse(*D.op.axis))
    mod = pt.build(s, [A, D])
    a = np.random.default_rng(1).random((size, size), dtype=np.float32)
    d = np.full((size, size), np.nan, np.float32)
    mod(a, d)
    want = 2 * np.tril(a).sum(1)
    np.testing.assert_allclose(d, np.repeat(want[:, None], size, 1), rtol=1e-5)


def test_a_clamped_stencil_with_its_producers_attached_at_two_levels():
    A = pt.placeholder((4, 12), "float32", name="A")
    B = pt.compute((4, 12), lambda i, j: A[i, j] + 1.0, name="B")
    C = pt.compute((4, 12), lambda i, j: B[i, j] * 2.0, name="C")
    D = pt.compute((4, 12), lambda i, j: C[i, j] + C[i, pt.min(j + 1, 11)], name="D")
    s = pt.create_schedule(D.op)
    s[C].compute_at(s[D], D.op.axis[1])  # one or two columns of C per j
    s[B].compute_at(s[D], D.op.axis[0])  # a row of B per i
    a = np.random.default_rng(2).random((4, 12), dtype=np.float32)
    c = (a + 1) * 2
    got = pt.build(s, [A, D])(a)
    np.testing.assert_allclose(got, c + c[:, np.minimum(np.arange(12) + 1, 11)], rtol=1e-6)


@pytest.mark.parametrize("index_name", ["Idx", "I", None])
def test_a_producer_attached_at_a_gather_computes_what_the_gather_reads(index_name):
    """B[Idx[i, 1]] bounds nothing before the read: B's region is its whole extent (the
    region's bound was printed as C text, where Idx[i, 1] is a comma expression and a
    renamed or default-named tensor another buffer)."""
    n = 7
    A = pt.placeholder((n,), "float32", name="A") if index_name else pt.placeholder((n,))
    Idx = pt.placeholder((n, 2), "int32", **({"name": index_name} if index_name else {}))
    B = pt.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = pt.compute((n,), lambda i: B[Idx[i, 1]], name="C")
    s = pt.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    a = np.arange(n, dtype=np.float32) + 1
    idx = np.zeros((n, 2), np.int32)
    idx[:, 1] = [0, 3, 5, 2, 6, 1, 4]
    c = np.full(n, np.nan, np.float32)
    pt.build(s, [A, Idx, C])(a, idx, c)
    np.testing.assert_array_equal(c, 2 * a[idx[:, 1]])


def test_a_gather_through_a_computed_index_attached_at_the_same_loop():
    n = 7
    A = pt.placeholder((n,), "float32", name="A")
    Idx = pt.placeholder((n,), "int32", name="Idx")
    K = pt.compute((n,), lambda i: Idx[i] + 0, name="K")
    B = pt.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = pt.compute((n,), lambda i: B[K[i]] + B[i], name="C")
    s = pt.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], 4)
    s[K].compute_at(s[C], io)
    s[B].compute_at(s[C], ii)
    a = np.arange(n, dtype=np.float32) + 1
    idx = np.array([6, 0, 3, 3, 1, 6, 2], np.int32)
    c = np.full(n, np.nan, np.float32)
    pt.build(s, [A, Idx, C])(a, idx, c)
    np.testing.assert_array_equal(c, 2 * a[idx] + 2 * a)


@pytest.mark.parametrize("size", [(9, 10), (4, 1), (1, 3), (12, 7)])
def test_overlapping_regions_in_a_parallel_loop_get_a_buffer_per_iteration(size):
    """B's rows per io are 5 x n (one overlapping the next tile's): a shared buffer would
    race, so each thread gets its own, sized at run time, at the first iteration it runs
    (was refused for symbolic n; then a malloc and a free in every iteration)."""
    m, n = pt.var("m"), pt.var("n")
    A = pt.placeholder((m, n), "float32", name="A")
    B = pt.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = pt.compute((m - 1, n), lambda i, j: B[i, j] + B[i + 1, j], name="C")
    s = pt.create_schedule(C.op)
    io, _ = s[C].split(C.op.axis[0], 4)
    s[B].compute_at(s[C], io)
    s[C].parallel(io)
    mod = pt.build(s, [A, C])
    body = mod.source[mod.source.index("#pragma omp parallel") :]
    assert body.index("float* restrict B = NULL;") < body.index("#pragma omp for")
    assert body.count("if (!B) {") == 1 and body.count("free(B);") == 1
    a = np.random.default_rng(4).random(size, dtype=np.float32)
    c = np.full((size[0] - 1, size[1]), np.nan, np.float32)
    mod(a, c)
    np.testing.assert_allclose(c, 2 * a[:-1] + 2 * a[1:], rtol=1e-6)


def test_a_region_isl_cannot_analyse_in_a_parallel_loop_gets_a_buffer_per_iteration():
    """split(nparts=2) of a symbolic extent: the region is not affine, so which
    iterations overlap is unknown. It was taken as a shared buffer, and two threads
    reset and summed C's halo row together (wrong in 680 of 1000 calls)."""
    m = pt.var("m")
    A = pt.placeholder((m, 300), "float64", name="A")
    k = pt.reduce_axis((0, 300), name="k")
    C = pt.compute((m,), lambda i: pt.sum(A[i, k], axis=k), name="C")
    D = pt.compute((m - 2,), lambda i: C[i] + C[i + 2], name="D")
    s = pt.create_schedule(D.op)
    o, _ = s[D].split(D.op.axis[0], nparts=2)
    s[C].compute_at(s[D], o)
    s[D].parallel(o)
    mod = pt.build(s, [A, D])
    assert "pt_alloc_or_die" in mod.source  # each iteration its own C
    rng = np.random.default_rng(5)
    for _ in range(50):
        a = rng.random((9, 300))
        c = a.sum(1)
        np.testing.assert_allclose(mod(a), c[:-2] + c[2:], rtol=1e-12)


def _pair_sums_attached(n):
    """C[i] = B[i] + B[i + 1], B = 2 A attached at C's split loop of 4."""
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = pt.compute((n - 1,), lambda i: B[i] + B[i + 1], name="C")
    s = pt.create_schedule(C.op)
    io, _ = s[C].split(C.op.axis[0], 4)
    s[B].compute_at(s[C], io)
    return s, [A, B, C], io


def test_an_argument_attached_in_a_parallel_loop_with_overlapping_parts_is_refused():
    """Its buffer is the caller's: no buffer per iteration can stand in for it."""
    s, args, io = _pair_sums_attached(10)  # symbolic: n = 1 leaves B unwritten (below)
    s[args[2]].parallel(io)
    with pytest.raises(pt.ScheduleError, match="would race: .* into the caller's buffer"):
        pt.build(s, args)


@pytest.mark.parametrize("split", ["fuse", "nparts"])
def test_producer_attached_in_a_padded_cache_stage_over_symbolic_sizes(split):
    """cache_write of a stage whose loops overrun its extent (a fused loop split by 8, an
    nparts split): the padded points read nothing (a select), and the producer attached
    inside computes a clamped region there instead of failing its index check."""
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((n, m), "float32", name="A")
    B = pt.compute((n, m), lambda i, j: A[i, j] * 2, name="B")
    if split == "fuse":
        C = pt.compute((n, m), lambda i, j: B[i, j] + 1, name="C")
    else:
        C = pt.compute((n, m - 2), lambda i, j: B[i, j] + B[i, j + 2], name="C")
    s = pt.create_schedule(C.op)
    if split == "fuse":
        s[C].split(s[C].fuse(*C.op.axis), factor=8)
    else:
        s[C].split(C.op.axis[1], nparts=2)
    CL = s.cache_write(C, "local")
    s[B].compute_at(s[CL], s[CL].op.axis[-1])
    mod = pt.build(s, [A, C])
    for shape in [(1, 3), (2, 3), (3, 5), (4, 4), (2, 9)]:
        a = np.random.rand(*shape).astype("float32")
        want = 2 * a + 1 if split == "fuse" else 2 * (a[:, :-2] + a[:, 2:])
        np.testing.assert_allclose(mod(a), want, rtol=1e-6)


def test_an_attached_producer_read_out_of_range_still_raises():
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((n, m), "float32", name="A")
    B = pt.compute((n, m), lambda i, j: A[i, j] * 2, name="B")
    C = pt.compute((n, m), lambda i, j: B[(i * m + j + 1) // m, (i * m + j + 1) % m], name="C")
    s = pt.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[1])
    mod = pt.build(s, [A, C])
    with pytest.raises(IndexError, match=r"the index of B\[\(i \* m \+ j \+ 1\) // m, .*out of"):
        mod(np.ones((3, 4), "float32"))


def _partly_read(n, split_at):
    A = pt.placeholder((n, 5), "float32", name="A")
    B = pt.compute((n, 5), lambda i, j: A[i, j] * 2, name="B")
    C = pt.compute((n, 3), lambda i, j: B[i, j + split_at] + 1, name="C")
    s = pt.create_schedule(C.op)
    o, _ = s[C].split(C.op.axis[0], factor=3)
    s[B].compute_at(s[C], o)
    return s, [A, B, C]


@pytest.mark.parametrize("n", [7, pt.var("n")])
def test_an_argument_attached_where_its_consumer_reads_a_part_of_it_is_refused(n):
    """C reads columns 1..3 of B: the caller's B would keep columns 0 and 4 as they were."""
    s, args = _partly_read(n, 1)
    with pytest.raises(
        pt.ScheduleError,
        match=r"argument B is computed at C's loop i.outer \(compute_at\), only where C "
        "reads it, and C does not read all of it: the caller's array would be partly written",
    ):
        pt.build(s, args)
    s, args = _partly_read(n, 1)
    pt.build(s, [args[0], args[2]])  # B as a temporary: fine


def test_an_argument_attached_where_it_is_read_whole_is_computed_whole():
    A = pt.placeholder((7, 5), "float32", name="A")
    B = pt.compute((7, 5), lambda i, j: A[i, j] * 2, name="B")
    C = pt.compute((7, 5), lambda i, j: B[i, j] + 1, name="C")
    s = pt.create_schedule(C.op)
    o, _ = s[C].split(C.op.axis[0], factor=3)  # a tail: the last iteration's part is short
    s[B].compute_at(s[C], o)
    mod = pt.build(s, [A, B, C])
    a = np.random.default_rng(0).random((7, 5), dtype=np.float32)
    b, c = np.full((7, 5), np.nan, np.float32), np.zeros((7, 5), np.float32)
    mod(a, b, c)
    np.testing.assert_array_equal(b, a * 2)
    np.testing.assert_array_equal(c, a * 2 + 1)


def test_an_argument_attached_in_a_loop_that_may_not_run_is_refused():
    """Symbolic n: at n = 1, C has no element, its loop no iteration, and B's one element
    would not be written."""
    s, args, _ = _pair_sums_attached(pt.var("n"))
    with pytest.raises(pt.ScheduleError, match="argument B is computed at C's loop i.outer"):
        pt.build(s, args)


def test_an_attach_loop_that_is_not_the_targets_names_both_stages():
    A = pt.placeholder((8, 8), name="A")
    B = pt.compute((8, 8), lambda i, j: A[i, j] * 2, name="B")
    C = pt.compute((8, 8), lambda i, j: B[i, j] + 1, name="C")
    s = pt.create_schedule(C.op)
    jo, _ = s[C].split(C.op.axis[1], 4)
    s.cache_write(C, "local")  # C's loops start afresh
    with pytest.raises(
        pt.ScheduleError,
        match=r"compute_at of stage 'B' at 'C': loop j.outer is not a current loop of 'C' "
        r"\(belongs to another stage\); current loops: i, j",
    ):
        s[B].compute_at(s[C], jo)
