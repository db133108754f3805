"""cache_write after split/fuse/reorder: the cache laid out as the loops run (TVM's
relayout), against numpy; refusals name the stage and the reason."""

import numpy as np
import pytest

import pypto as pt

RNG = np.random.default_rng(21)


def matmul(m=12):
    n = pt.var("n")
    A = pt.placeholder((n, m), "float32", name="A")
    B = pt.placeholder((m, 8), "float32", name="B")
    k = pt.reduce_axis((0, m), name="k")
    C = pt.compute((n, 8), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def test_split_and_reorder_give_the_cache_their_layout():
    A, B, C, k = matmul()
    s = pt.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=4)
    s[C].reorder(jo, i, ji)
    CL = s.cache_write(C, "local")
    assert [str(d) for d in CL.shape] == ["2", "n", "4"]
    assert [iv.name for iv in s[CL].op.axis] == ["j.outer.c", "i.c", "j.inner.c"]
    assert s[C].leaf_iter_vars == [i, j]  # the copy's loops start afresh
    s[CL].vectorize(s[CL].op.axis[2])
    a, b = RNG.random((5, 12), "float32"), RNG.random((12, 8), "float32")
    np.testing.assert_allclose(pt.build(s, [A, B, C])(a, b), a @ b, rtol=1e-5)


def test_fuse_gives_a_flat_cache_and_replays_from_json():
    A, B, C, k = matmul()
    s = pt.create_schedule(C.op)
    s[C].fuse(*C.op.axis)
    CL = s.cache_write(C, "local")
    assert [str(d) for d in CL.shape] == ["n * 8"]
    io, ii = s[CL].split(s[CL].op.axis[0], factor=8)
    s[CL].parallel(io)
    a, b = RNG.random((3, 12), "float32"), RNG.random((12, 8), "float32")
    np.testing.assert_allclose(pt.build(s, [A, B, C])(a, b), a @ b, rtol=1e-5)
    s2 = pt.Schedule.from_json(s.to_json(), [A, B, C])
    assert str(pt.lower(s2, [A, B, C])) == str(pt.lower(s, [A, B, C]))


@pytest.mark.parametrize("factor", [3, 5, 16])
def test_a_split_that_does_not_divide_pads_and_guards_the_cache(factor):
    # TVM's test_schedule_cache_relayout: split (symbolic n, or 8 columns by 3), reorder,
    # cache_write; the padded points compute nothing and read nothing
    A, B, C, k = matmul()
    s = pt.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=factor)
    jo, ji = s[C].split(j, factor=3)
    s[C].reorder(jo, io, ii, ji)
    CL = s.cache_write(C, "local")
    assert [str(d) for d in CL.shape] == ["3", f"(n + {factor - 1}) // {factor}", str(factor), "3"]
    s[CL].parallel(s[CL].op.axis[1])
    mod = pt.build(s, [A, B, C])
    for rows in (1, 7, 17):
        a, b = RNG.random((rows, 12), "float32"), RNG.random((12, 8), "float32")
        np.testing.assert_allclose(mod(a, b), a @ b, rtol=1e-5)


def test_a_padded_cache_keeps_where_init_and_triangular_bounds():
    n = 10
    A = pt.placeholder((n, n), "float32", name="A")
    C0 = pt.placeholder((n,), "float32", name="C0")
    k = pt.reduce_axis((0, n), name="k")
    r = pt.reduce_axis((0, n), name="r")
    # from C0, without the diagonal
    C = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k, where=k != i, init=C0[i]), name="C")
    T = pt.compute((n,), lambda i: pt.max(A[i, r] * 2, axis=r), name="T")
    D = pt.compute((n,), lambda i: C[i] + T[i], name="D")
    s = pt.create_schedule(D.op)
    s[C].split(C.op.axis[0], factor=4)
    s[T].split(T.op.axis[0], nparts=3)
    CL, TL = s.cache_write(C, "local"), s.cache_write(T, "local")
    assert [str(d) for d in CL.shape] == ["3", "4"] and [str(d) for d in TL.shape] == ["3", "4"]
    a, c0 = RNG.random((n, n), "float32") - 0.5, RNG.random(n, "float32")
    want = c0 + a.sum(1) - np.diag(a) + 2 * a.max(1)
    np.testing.assert_allclose(pt.build(s, [A, C0, D])(a, c0), want, rtol=1e-5)

    def lower_sum(i):  # a reduce bound that names the split axis: q <= i
        q = pt.reduce_axis((0, i + 1), name="q")
        return pt.sum(A[i, q], axis=q)

    L = pt.compute((n,), lower_sum, name="L")
    s = pt.create_schedule(L.op)
    s[L].split(L.op.axis[0], factor=3)
    LL = s.cache_write(L, "local")
    s[LL].vectorize(s[LL].op.axis[1])
    np.testing.assert_allclose(pt.build(s, [A, L])(a), np.tril(a).sum(1), rtol=1e-5)


def test_cache_write_layout_refusals():
    A, B, C, k = matmul()
    s = pt.create_schedule(C.op)
    s[C].split(k, factor=4)
    with pytest.raises(pt.ScheduleError, match="call it before transforming the reduce loops"):
        s.cache_write(C, "local")
    s = pt.create_schedule(C.op)
    s[C].reorder(k, C.op.axis[1])
    with pytest.raises(pt.ScheduleError, match="before moving reduce loops among the spatial"):
        s.cache_write(C, "local")
    s = pt.create_schedule(C.op)
    i, j = C.op.axis
    s[C].skew(i, j, factor=1)
    with pytest.raises(pt.ScheduleError, match="a skew of its loops cannot be laid out"):
        s.cache_write(C, "local")


def test_cache_read_for_a_stage_that_reads_only_in_its_updates_is_refused():
    """The copy serves the pure definition's reads: for reads in updates only, it was
    made, never read, and compute_at of it then said 'nothing reads it'."""
    P = pt.placeholder((8,), "float32", name="P")
    Y = pt.compute((8,), lambda i: pt.const(0.0, "float32"), name="Y")
    r = pt.reduce_axis((1, 8), name="r")
    Y[r] = Y[r - 1] + P[r]
    s = pt.create_schedule(Y.op)
    with pytest.raises(pt.ScheduleError, match="'Y' reads P only in its update definitions"):
        s.cache_read(P, "local", [Y])


def test_cache_read_for_a_stage_that_no_longer_reads_names_the_one_that_does():
    """After cache_write the reads of A are the local stage's: the refusal says so."""
    A = pt.placeholder((8, 8), "float32", name="A")
    B = pt.placeholder((8, 8), "float32", name="B")
    k = pt.reduce_axis((0, 8), name="k")
    C = pt.compute((8, 8), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    with pytest.raises(pt.ScheduleError, match=r"stage 'C' does not read A \(C.local reads it\)"):
        s.cache_read(A, "local", [C])
    AL = s.cache_read(A, "local", [CL])  # the stage that reads it
    s[AL].compute_at(s[CL], s[CL].op.axis[0])
    a, b = np.random.rand(8, 8).astype("f4"), np.random.rand(8, 8).astype("f4")
    np.testing.assert_allclose(pt.build(s, [A, B, C])(a, b), a @ b, rtol=1e-5)
