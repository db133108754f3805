"""``init=`` that reads tensors (TVM's ``te.sum(..., init=I[i, j])``) wherever the
reduction is computed: at the root, attached (``compute_at``), through ``cache_write``,
in a multi-output stage. The init is read at the output point, once; against numpy."""

import numpy as np
import pytest

import pypto as pt

BOUND_CHECKS = True  # every kernel checks its accesses at run time (conftest.py)

RNG = np.random.default_rng(33)


def row_sum(n, length):
    A = pt.placeholder((n, length), name="A")
    Ini = pt.placeholder((n,), name="I")
    k = pt.reduce_axis((0, length), name="k")
    C = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k, init=Ini[i]), name="C")
    return A, Ini, C


@pytest.mark.parametrize("n", [6, 13])
def test_init_in_an_attached_reduction(n):
    A, Ini, C = row_sum(n, 20)
    D = pt.compute((n,), lambda i: C[i] * 2, name="D")
    s = pt.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=4)
    s[C].compute_at(s[D], ii)
    a, i0 = RNG.random((n, 20), dtype="float32"), RNG.random(n, dtype="float32")
    np.testing.assert_allclose(pt.build(s, [A, Ini, D])(a, i0), 2 * (i0 + a.sum(1)), rtol=1e-5)


@pytest.mark.parametrize("n", [6, 4001])
def test_init_through_cache_write(n):
    """A large n once read far past Ini's end (the tile offset added twice)."""
    A, Ini, C = row_sum(n, 3)
    s = pt.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[CC].compute_at(s[C], io)
    a, i0 = RNG.random((n, 3), dtype="float32"), RNG.random(n, dtype="float32")
    np.testing.assert_allclose(pt.build(s, [A, Ini, C])(a, i0), i0 + a.sum(1), rtol=1e-5)


def test_tiled_matmul_with_init_as_tvm_writes_it():
    M, N, K = 20, 24, 16
    A = pt.placeholder((M, K), name="A")
    B = pt.placeholder((K, N), name="B")
    Ini = pt.placeholder((M, N), name="I")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M, N), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k, init=Ini[i, j]), name="C")
    s = pt.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], x_factor=8, y_factor=8)
    s[CC].compute_at(s[C], jo)
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=4)
    s[CC].reorder(ko, *s[CC].op.axis, ki)
    a, b, i0 = (RNG.random(sh, dtype="float32") for sh in ((M, K), (K, N), (M, N)))
    np.testing.assert_allclose(pt.build(s, [A, B, Ini, C])(a, b, i0), i0 + a @ b, rtol=1e-5)


def _argmax_combine(x, y):
    keep = (x[1] > y[1]) | ((x[1] == y[1]) & (x[0] < y[0]))
    return pt.select(keep, x[0], y[0]), pt.select(keep, x[1], y[1])


def _argmax_identity(t0, t1):
    return pt.const(-1, t0), pt.min_value(t1)


def test_multi_output_init_in_an_attached_reduction():
    n, length = 7, 9
    argmax = pt.comm_reducer(_argmax_combine, _argmax_identity, name="argmax")
    A = pt.placeholder((n, length), name="A")
    I0 = pt.placeholder((n,), "int32", name="I0")
    V0 = pt.placeholder((n,), name="V0")
    k = pt.reduce_axis((0, length), name="k")
    idx, val = pt.compute(
        (n,),
        lambda i: argmax((k.astype("int32"), A[i, k]), axis=k, init=(I0[i], V0[i])),
        name="am",
    )
    D = pt.compute((n,), lambda i: val[i] + pt.cast("float32", idx[i]), name="D")
    s = pt.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=3)
    s[idx].compute_at(s[D], ii)
    a = RNG.random((n, length), dtype="float32")
    i0 = np.arange(100, 100 + n, dtype="int32")
    v0 = np.where(np.arange(n) % 2 == 0, 2.0, 0.0).astype("float32")  # even rows: the init wins
    best = np.where(v0 > a.max(1), v0, a.max(1))
    at = np.where(v0 > a.max(1), i0, a.argmax(1))
    np.testing.assert_allclose(pt.build(s, [A, I0, V0, D])(a, i0, v0), best + at, rtol=1e-6)


def test_a_cache_that_only_the_init_reads_is_refused_inside_the_reduction_loop():
    """Was: accepted at the reduction loop k, then C that did not compile ('x_local'
    undeclared): the starting value is stored before k runs. At i it is right."""
    n = 7
    A = pt.placeholder((n, n), "float32", name="A")
    x = pt.placeholder((n,), "float32", name="x")
    k = pt.reduce_axis((0, n), name="k")
    S = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k, init=x[i]), name="S")
    a, xv = np.random.rand(n, n).astype("f4"), np.random.rand(n).astype("f4")
    s = pt.create_schedule(S.op)
    XL = s.cache_read(x, "local", [S])
    with pytest.raises(pt.ScheduleError, match="'S' reads it in its init=, which runs before "
                                               "its reduction loop k"):  # fmt: skip
        s[XL].compute_at(s[S], k)
        pt.build(s, [A, x, S])
    s = pt.create_schedule(S.op)
    XL = s.cache_read(x, "local", [S])
    s[XL].compute_at(s[S], S.op.axis[0])
    np.testing.assert_allclose(pt.build(s, [A, x, S])(a, xv), a.sum(1) + xv, rtol=1e-5)


@pytest.mark.parametrize("split", [False, True])
def test_a_spatial_loop_cannot_be_skewed_by_a_reduction_loop(split):
    """Was: accepted, then C using k where the init runs outside it (or a KeyError with
    parallel); fuse refuses mixing the two kinds the same way. The other way is right."""
    n = 7
    A = pt.placeholder((n, n), "float32", name="A")
    k = pt.reduce_axis((0, n), name="k")
    S = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k), name="S")
    s = pt.create_schedule(S.op)
    i = S.op.axis[0]
    outer = s[S].split(k, factor=2)[1] if split else k
    s[S].reorder(outer, i)
    with pytest.raises(pt.ScheduleError, match=f"skew on stage 'S': spatial loop i cannot "
                                               f"follow reduction loop {outer.name}"):  # fmt: skip
        s[S].skew(outer, i, 1)
    s = pt.create_schedule(S.op)
    s[S].skew(S.op.axis[0], k, 1)
    a = np.random.rand(n, n).astype("f4")
    np.testing.assert_allclose(pt.build(s, [A, S])(a), a.sum(1), rtol=1e-5)


def test_the_reads_of_init_are_proven_in_bounds_or_checked():
    """Was: never looked at: init=Z[i + 4] read past Z, init=Z[i * i] unchecked."""
    A = pt.placeholder((4, 8), "float32", name="A")
    Z = pt.placeholder((4,), "float32", name="Z")
    k = pt.reduce_axis((0, 8), name="k")
    C = pt.compute((4,), lambda i: pt.sum(A[i, k], axis=k, init=Z[i + 4]), name="C")
    with pytest.raises(pt.ScheduleError, match=r"Z\[i \+ 4\] reads past dimension 0 of Z"):
        pt.build(pt.create_schedule(C.op), [A, Z, C])
    k = pt.reduce_axis((0, 8), name="k")
    D = pt.compute((4,), lambda i: pt.sum(A[i, k], axis=k, init=Z[i * i]), name="D")
    mod = pt.build(pt.create_schedule(D.op), [A, Z, D])
    with pytest.raises(IndexError, match=r"the index of Z\[i \* i\] in dimension 0"):
        mod(np.ones((4, 8), np.float32), np.ones(4, np.float32))


def test_a_reducer_that_reads_a_tensor_is_refused():
    """Was: accepted by lower, then an internal AssertionError at build (the read
    reached the C code unlowered, its bounds never proven)."""
    W = pt.placeholder((4,), "float32", name="W")
    A = pt.placeholder((4, 8), "float32", name="A")
    wsum = pt.comm_reducer(lambda x, y: x + y * W[3], lambda dt: pt.const(0, dt), name="wsum")
    k = pt.reduce_axis((0, 8), name="k")
    with pytest.raises(TypeError, match=r"wsum: its fcombine reads W\[3\]; a reducer"):
        pt.compute((4,), lambda i: wsum(A[i, k], axis=k), name="C")
    argm = pt.comm_reducer(lambda x, y: (x[0], x[1] + W[0]),
                           lambda a, b: (pt.const(-1, a), pt.const(0, b)))  # fmt: skip
    with pytest.raises(TypeError, match=r"its fcombine reads W\[0\]"):
        pt.compute((4,), lambda i: argm((k, A[i, k]), axis=k), name="D")


@pytest.mark.parametrize("vectorize", [False, True])
def test_where_keeps_a_negative_zero_init(vectorize):
    """The points ``where=`` leaves out add -0.0, which changes no value: a sum of -0.0
    from ``init=-0.0`` stays -0.0, as numpy's ``np.sum(..., where=, initial=)`` (+0.0
    for each left-out point made it +0.0)."""
    n = 16
    A = pt.placeholder((n, n), name="A")
    Ini = pt.placeholder((n,), name="I")
    k = pt.reduce_axis((0, n), name="k")
    C = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k, where=k < i, init=Ini[i]), name="C")
    s = pt.create_schedule(C.op)
    if vectorize:
        s[C].reorder(k, C.op.axis[0])
        s[C].vectorize(C.op.axis[0])
    a = np.full((n, n), -0.0, np.float32)
    a[5, :3] = [1.0, -1.0, 2.0]  # a row with values: they add as before
    c = pt.build(s, [A, Ini, C])(a, np.full(n, -0.0, np.float32))
    mask = np.arange(n)[None, :] < np.arange(n)[:, None]
    want = np.array([np.sum(a[i], where=mask[i], initial=-0.0) for i in range(n)])
    np.testing.assert_array_equal(c, want)
    assert np.array_equal(np.signbit(c), np.signbit(want)) and np.signbit(c).sum() == n - 1
