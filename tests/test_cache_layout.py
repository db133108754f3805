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


def test_cache_write_layout_refusals():
    A, B, C, k = matmul()
    s = pt.create_schedule(C.op)
    s[C].split(C.op.axis[1], factor=3)
    with pytest.raises(pt.ScheduleError, match="split of j does not divide it"):
        s.cache_write(C, "local")
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
