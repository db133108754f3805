"""TVM's ``s.rfactor`` and ``where=``/``init=`` on reductions, against numpy."""

import pickle

import numpy as np
import pytest

import pypto as pt

RNG = np.random.default_rng(11)


def row_sum(m=13, dtype="float32", **kw):
    n = pt.var("n")
    A = pt.placeholder((n, m), dtype, name="A")
    k = pt.reduce_axis((0, m), name="k")
    C = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k, **kw), name="C")
    return A, C, k


@pytest.mark.parametrize("factor", [4, 13, 5])
def test_rfactor_inner_of_split(factor):
    A, C, k = row_sum()
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=factor)
    CF = s.rfactor(C, ki)
    assert CF.name == "C.rf" and [str(d) for d in CF.shape] == [str(factor), "n"]
    assert [iv.name for iv in s[C].op.reduce_axis] == ["k.inner.v"]
    s[CF].reorder(s[CF].op.axis[1], s[CF].op.reduce_axis[0], s[CF].op.axis[0])
    s[CF].vectorize(s[CF].op.axis[0])  # the lanes of the partial sums are independent
    a = RNG.random((6, 13), "float32")
    np.testing.assert_allclose(pt.build(s, [A, C])(a), a.sum(1), rtol=1e-5)


def test_stage_rfactor_names_the_axis_and_its_loop():
    """API.md §2's ``s[C].rfactor(k, ki)``: the reduce axis and the loop of it to factor."""
    A, C, k = row_sum()
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=4)
    CF = s[C].rfactor(k, ki)
    assert [str(d) for d in CF.shape] == ["4", "n"]
    a = RNG.random((6, 13), "float32")
    np.testing.assert_allclose(pt.build(s, [A, C])(a), a.sum(1), rtol=1e-5)
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=4)
    with pytest.raises(pt.ScheduleError, match=r"rfactor\(k, i\) on stage 'C': i is no loop"):
        s[C].rfactor(k, C.op.axis[0])


def test_rfactor_outer_of_split_parallel_and_attached():
    A, C, k = row_sum(m=64, dtype="float64")
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, nparts=8)
    CF = s.rfactor(C, ko, factor_axis=1)
    assert [str(d) for d in CF.shape] == ["n", "8"]
    s[CF].compute_at(s[C], s[C].op.axis[0])
    a = RNG.random((3, 64))
    np.testing.assert_allclose(pt.build(s, [A, C])(a), a.sum(1))
    s2 = pt.create_schedule(C.op)
    ko, ki = s2[C].split(k, nparts=8)
    CF = s2.rfactor(C, ko)
    s2[CF].parallel(s2[CF].op.axis[0])  # one partial sum per thread
    np.testing.assert_allclose(pt.build(s2, [A, C])(a), a.sum(1))


def test_rfactor_root_axis_with_other_reduce_axes_and_max():
    A = pt.placeholder((4, 5, 6), "float32", name="A")
    k = pt.reduce_axis((0, 5), name="k")
    r = pt.reduce_axis((1, 6), name="r")
    M = pt.compute((4,), lambda i: pt.max(A[i, k, r], axis=[k, r]), name="M")
    s = pt.create_schedule(M.op)
    MF = s.rfactor(M, k)
    assert [str(d) for d in MF.shape] == ["5", "4"]
    a = RNG.standard_normal((4, 5, 6)).astype("float32")
    np.testing.assert_array_equal(pt.build(s, [A, M])(a), a[:, :, 1:].max(axis=(1, 2)))


def test_rfactor_keeps_init_for_the_final_reduction():
    n = pt.var("n")
    A = pt.placeholder((n, 10), "float32", name="A")
    B = pt.placeholder((n,), "float32", name="B")
    k = pt.reduce_axis((0, 10), name="k")
    C = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k, init=B[i]), name="C")
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=3)
    s.rfactor(C, ki)
    a, b = RNG.random((4, 10), "float32"), RNG.random(4, "float32")
    np.testing.assert_allclose(pt.build(s, [A, B, C])(a, b), b + a.sum(1), rtol=1e-5)


def test_rfactor_refusals():
    A, C, k = row_sum()
    s = pt.create_schedule(C.op)
    with pytest.raises(pt.ScheduleError, match="rfactor on stage 'C': loop i is not a reduce"):
        s.rfactor(C, C.op.axis[0])
    A3 = pt.placeholder((4, 6, 8), "float32", name="A3")
    k1, k2 = pt.reduce_axis((0, 6), name="k1"), pt.reduce_axis((0, 8), name="k2")
    C3 = pt.compute((4,), lambda i: pt.sum(A3[i, k1, k2], axis=[k1, k2]), name="C3")
    s3 = pt.create_schedule(C3.op)
    s3[C3].split(k1, factor=4)
    with pytest.raises(pt.ScheduleError, match="reduce loop k1 was split or fused, and factor"):
        s3.rfactor(C3, k2)
    io, ii = s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(pt.ScheduleError, match="loop i.outer is not a reduce axis of the stage"):
        s.rfactor(C, io)
    D = pt.compute((3,), lambda i: A[i, 0] * 2, name="D")
    with pytest.raises(pt.ScheduleError, match="rfactor on stage 'D': the stage is not a red"):
        pt.create_schedule(D.op).rfactor(D, k)
    A2, C2, k2 = row_sum()
    s2 = pt.create_schedule(C2.op)
    s2[C2].parallel(C2.op.axis[0])
    with pytest.raises(pt.ScheduleError, match="call it before annotating or attaching"):
        s2.rfactor(C2, k2)
    n = pt.var("n")
    T = pt.placeholder((n, n), "float32", name="T")
    j = pt.reduce_axis((0, n), name="j")
    tri = pt.reduce_axis((0, j + 1), name="tri")
    S = pt.compute((n,), lambda i: pt.sum(T[i, tri] + T[i, j], axis=[j, tri]), name="S")
    with pytest.raises(pt.ScheduleError, match="bounds of reduce axis tri name j; rfactor needs"):
        pt.create_schedule(S.op).rfactor(S, tri)


def test_parallel_final_reduction_of_rfactor_is_refused():
    A, C, k = row_sum()
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=4)
    s.rfactor(C, ki)
    v = s[C].op.reduce_axis[0]
    with pytest.raises(pt.ScheduleError, match=r"parallel\(k.inner.v\) on stage 'C'"):
        s[C].parallel(v)
        pt.lower(s, [A, C])


# ---------------------------------------------------------------- where= and init=


def test_where_and_init_on_reductions():
    n = 7
    A = pt.placeholder((n, n), "float64", name="A")
    C0 = pt.placeholder((n,), "float64", name="C0")
    k = pt.reduce_axis((0, n), name="k")
    T = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k, where=k <= i, init=C0[i] * 2), name="T")
    M = pt.compute((n,), lambda i: pt.max(A[i, k], axis=k, where=k > i), name="M")
    s = pt.create_schedule([T.op, M.op])
    a, c0 = RNG.random((n, n)), RNG.random(n)
    t, m = pt.build(s, [A, C0, T, M])(a, c0)
    np.testing.assert_allclose(t, np.tril(a).sum(1) + 2 * c0)
    np.testing.assert_array_equal(m, [a[i, i + 1 :].max(initial=-np.inf) for i in range(n)])
    s2 = pt.create_schedule(T.op)
    s2.cache_write(T, "local")  # init= follows the reduction into the cache
    np.testing.assert_allclose(pt.build(s2, [A, C0, T])(a, c0), np.tril(a).sum(1) + 2 * c0)


def test_where_and_init_refusals():
    A = pt.placeholder((4, 4), "float32", name="A")
    k = pt.reduce_axis((0, 4), name="k")
    with pytest.raises(TypeError, match="sum: where= must be a condition, got float32"):
        pt.compute((4,), lambda i: pt.sum(A[i, k], axis=k, where=A[i, k]))
    with pytest.raises(TypeError, match="sum: init= is float64, the reduction float32"):
        pt.compute((4,), lambda i: pt.sum(A[i, k], axis=k, init=pt.const(1, "float64")))
    with pytest.raises(ValueError, match="sum: init= may not name the reduce axes"):
        pt.compute((4,), lambda i: pt.sum(A[i, k], axis=k, init=A[i, k]))


# ---------------------------------------------------------------- picklable reducers


def _mul(x, y):
    return x * y


def _one(dtype):
    return pt.const(1, dtype)


def test_reducers_pickle_with_their_expressions():
    prod = pt.comm_reducer(_mul, _one, name="prod")
    A = pt.placeholder((3, 4), "float64", name="A")
    k = pt.reduce_axis((0, 4), name="k")
    C = pt.compute((3,), lambda i: prod(A[i, k], axis=k, where=k > 0), name="C")
    C2 = pickle.loads(pickle.dumps(C))
    assert C2.op.body.combiner.fcombine is _mul
    s = pt.create_schedule(C2.op)
    a = RNG.random((3, 4))
    np.testing.assert_allclose(pt.build(s, [C2.op.input_tensors[0], C2])(a), a[:, 1:].prod(1))
    red = pickle.loads(pickle.dumps(pt.sum(A[0, k], axis=k))).combiner
    assert red is pt.sum(A[1, k], axis=k).combiner  # built-ins come back as themselves


def test_pragma_unroll_explicit_and_unknown_pragmas():
    A, C, k = row_sum(m=8)
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=4)
    s[C].pragma(ki, "unroll_explicit")
    assert s[C].attrs[ki] == "unrolled"
    a = RNG.random((3, 8), "float32")
    np.testing.assert_allclose(pt.build(s, [A, C])(a), a.sum(1), rtol=1e-5)
    with pytest.raises(pt.ScheduleError, match="pragma on stage 'C': unknown pragma 'debug_skip"):
        s[C].pragma(ko, "debug_skip_region")


def test_rfactor_replays_from_json():
    A, C, k = row_sum()
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=4)
    CF = s.rfactor(C, ki, factor_axis=1)
    s[CF].vectorize(s[CF].op.axis[1])
    doc = s.to_json()
    assert doc["steps"][1] == {"stage": "C", "prim": "rfactor", "loop": "k.inner",
                               "factor_axis": 1}  # fmt: skip
    s2 = pt.Schedule.from_json(doc, [A, C])
    a = RNG.random((5, 13), "float32")
    np.testing.assert_allclose(pt.build(s2, [A, C])(a), a.sum(1), rtol=1e-5)
    assert pt.lower(s2, [A, C]).__str__() == pt.lower(s, [A, C]).__str__()


def test_rfactor_of_a_split_into_more_parts_than_points():
    A, C, k = row_sum(m=13)
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, nparts=32)  # 13 parts of 1, as the split itself makes
    CF = s.rfactor(C, ko)
    assert [str(d) for d in CF.shape] == ["13", "n"]
    a = RNG.random((4, 13), "float32")
    np.testing.assert_allclose(pt.build(s, [A, C])(a), a.sum(1), rtol=1e-5)


def test_stage_rfactor_is_the_schedule_primitive():
    A, C, k = row_sum(m=12)
    s = pt.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=4)
    CF = s[C].rfactor(ki)
    assert CF.name == "C.rf" and s.steps[-1]["prim"] == "rfactor"
    with pytest.raises(pt.ScheduleError, match="k.inner is no loop made from k.r"):
        s[CF].rfactor(s[CF].op.reduce_axis[0], factor_axis=ki)  # a loop of another stage
    with pytest.raises(TypeError, match="rfactor: factor_axis must be an int"):
        s[CF].rfactor(s[CF].op.reduce_axis[0], factor_axis="0")
    a = RNG.random((3, 12), "float32")
    np.testing.assert_allclose(pt.build(s, [A, C])(a), a.sum(1), rtol=1e-5)


def three_d(n=16):
    A = pt.placeholder((n, n, n), "float32", name="A")
    k1, k2 = pt.reduce_axis((0, n), name="k1"), pt.reduce_axis((0, n), name="k2")
    B = pt.compute((n,), lambda i: pt.sum(A[i, k1, k2], axis=[k1, k2]), name="B")
    return A, B, k1, k2


def test_rfactor_after_a_spatial_split_keeps_it():
    """TVM's test_rfactor: split the reduce and the spatial axis, then rfactor; the
    spatial split stays with B (its loops stay usable)."""
    A, B, k1, k2 = three_d()
    s = pt.create_schedule(B.op)
    ko, ki = s[B].split(k1, factor=4)
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    BF = s.rfactor(B, ki)
    assert [str(d) for d in BF.shape] == ["4", "16"]
    assert [iv.name for iv in s[BF].op.reduce_axis] == ["k1.r", "k2"]
    assert [iv.name for iv in s[B].leaf_iter_vars] == ["i.outer", "i.inner", "k1.inner.v"]
    s[B].parallel(xo)
    a = RNG.random((16, 16, 16), "float32")
    np.testing.assert_allclose(pt.build(s, [A, B])(a), a.sum((1, 2)), rtol=1e-5)


@pytest.mark.parametrize("then_split", [None, 5, 64])
def test_rfactor_of_fused_reduce_loops(then_split):
    """``rfactor(B, fuse(k1, k2))`` (TVM's), and of a loop split from the fused one
    (past the end at 5: those points add the identity)."""
    A, B, k1, k2 = three_d()
    s = pt.create_schedule(B.op)
    kf = s[B].fuse(k1, k2)
    if then_split:
        _, kf = s[B].split(kf, factor=then_split)
    BF = s.rfactor(B, kf)
    assert BF.shape[0].value == (then_split or 256)
    s[BF].parallel(s[BF].op.axis[0])
    a = RNG.random((16, 16, 16), "float32")
    np.testing.assert_allclose(pt.build(s, [A, B])(a), a.sum((1, 2)), rtol=1e-4)


def test_rfactor_of_split_fused_loops_over_symbolic_extents():
    n = pt.var("n")
    A = pt.placeholder((3, n, 5), "float32", name="A")
    k1, k2 = pt.reduce_axis((0, n), name="k1"), pt.reduce_axis((1, 5), name="k2")
    B = pt.compute((3,), lambda i: pt.max(A[i, k1, k2], axis=[k1, k2]), name="B")
    s = pt.create_schedule(B.op)
    k1o, k1i = s[B].split(k1, nparts=3)
    s[B].fuse(k1i, k2)
    s.rfactor(B, k1o, factor_axis=1)
    mod = pt.build(s, [A, B])
    for nv in (1, 2, 7, 12):
        a = RNG.random((3, nv, 5), "float32")
        np.testing.assert_array_equal(mod(a), a[:, :, 1:].max((1, 2)))


@pytest.mark.parametrize("factor", [None, 4])
def test_rfactor_of_triangular_reductions(factor):
    """A reduce axis bounded by a spatial axis (k < i + 1), split by a factor: the inner
    loop is a box and factors; and a reduction whose second axis is bounded by the
    first (k2 < k1 + 1) factors the first, or the inner loop of its split."""
    n = pt.var("n")
    A = pt.placeholder((n, n), "float64", name="A")

    def body(i):
        k = pt.reduce_axis((1, i + 1), name="k")
        return pt.sum(A[i, k], axis=k)

    C = pt.compute((n,), body, name="C")
    s = pt.create_schedule(C.op)
    _, ki = s[C].split(C.op.reduce_axis[0], factor=factor or 3)
    CF = s.rfactor(C, ki)
    s[CF].parallel(s[CF].op.axis[0])
    mod = pt.build(s, [A, C])
    for nv in (1, 2, 9):
        a = RNG.random((nv, nv))
        np.testing.assert_allclose(mod(a), [a[i, 1 : i + 1].sum() for i in range(nv)])
    s = pt.create_schedule(C.op)
    _, ki = s[C].split(C.op.reduce_axis[0], nparts=2)
    with pytest.raises(pt.ScheduleError, match="the extent of loop k.inner depends on i; rfac"):
        s.rfactor(C, ki)
    B = pt.placeholder((3, 6, 6), "float64", name="B")
    k1 = pt.reduce_axis((0, 6), name="k1")
    k2 = pt.reduce_axis((0, k1 + 1), name="k2")
    D = pt.compute((3,), lambda i: pt.sum(B[i, k1, k2], axis=[k1, k2]), name="D")
    s = pt.create_schedule(D.op)
    loop = s[D].split(k1, factor=factor)[1] if factor else k1
    DF = s.rfactor(D, loop)
    s[DF].vectorize(s[DF].op.axis[0])
    b = RNG.random((3, 6, 6))
    np.testing.assert_allclose(pt.build(s, [B, D])(b), np.tril(b).sum((1, 2)))


def test_rfactor_of_a_reduce_axis_offset_by_a_spatial_axis():
    """k in [i, i + 3): a box of extent 3 at an offset; C.rf's new axis has extent 3
    (not ``i + 3 - i``, which names a loop C.rf does not have), and a read past the
    tensor is refused at build as without rfactor."""
    n = pt.var("n")
    A = pt.placeholder((n, n + 3), "float32", name="A")

    def window(T):
        def body(i):
            k = pt.reduce_axis((i, i + 3), name="k")
            return pt.sum(T[i, k], axis=k)

        return body

    C = pt.compute((n,), window(A), name="C")
    s = pt.create_schedule(C.op)
    s.rfactor(C, C.op.reduce_axis[0])
    mod = pt.build(s, [A, C])
    for rows in (1, 4):
        a = RNG.random((rows, rows + 3), dtype=np.float32)
        np.testing.assert_allclose(mod(a), [a[i, i : i + 3].sum() for i in range(rows)], rtol=1e-6)
    B = pt.placeholder((4, 4), "float32", name="B")
    D = pt.compute((4,), window(B), name="D")
    s = pt.create_schedule(D.op)
    s.rfactor(D, D.op.reduce_axis[0])
    with pytest.raises(pt.ScheduleError, match=r"compute 'D.rf': B\[i, i \+ k.rf\] reads past"):
        pt.build(s, [B, D])
