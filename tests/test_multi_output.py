"""Multi-output ``pt.compute`` and tuple reductions (argmax), against numpy."""

import numpy as np
import pytest

import pypto as pt

RNG = np.random.default_rng(5)


def argmax_combine(x, y):
    # commutative: on equal values the smaller index wins (numpy's first occurrence)
    take_x = (x[1] > y[1]) | ((x[1] == y[1]) & (x[0] < y[0]))
    return pt.select(take_x, x[0], y[0]), pt.select(take_x, x[1], y[1])


def argmax_identity(t_index, t_value):
    return pt.const(-1, t_index), pt.const(-np.inf, t_value)


argmax = pt.comm_reducer(argmax_combine, argmax_identity, name="argmax")


def row_argmax(m=7):
    n = pt.var("n")
    A = pt.placeholder((n, m), "float32", name="A")
    k = pt.reduce_axis((0, m), name="k")
    idx, val = pt.compute((n,), lambda i: argmax((k.astype("int32"), A[i, k]), axis=k), name="am")
    return A, idx, val, k


def test_argmax_tuple_reduction():
    A, idx, val, k = row_argmax()
    assert (idx.name, val.name, idx.dtype, val.dtype) == ("am.v0", "am.v1", "int32", "float32")
    assert idx.op is val.op and idx.op.num_outputs == 2
    s = pt.create_schedule(idx.op)
    assert s[idx] is s[val]  # one stage
    io, ii = s[idx].split(idx.op.axis[0], factor=3)
    s[idx].parallel(io)
    mod = pt.build(s, [A, idx, val])
    a = RNG.standard_normal((10, 7)).astype("float32")
    i_, v_ = mod(a)
    np.testing.assert_array_equal(i_, a.argmax(1))
    np.testing.assert_array_equal(v_, a.max(1))
    only_index = pt.build(pt.create_schedule(idx.op), [A, idx])  # the value: a temporary
    np.testing.assert_array_equal(only_index(a), a.argmax(1))


@pytest.mark.parametrize("factor", [16, 5])
def test_argmax_rfactor_vectorized_lanes_with_ties(factor):
    A, idx, val, k = row_argmax(m=37)
    s = pt.create_schedule(idx.op)
    ko, ki = s[idx].split(k, factor=factor)
    RF, RF_val = s.rfactor(idx, ki, factor_axis=1)  # TVM's: a list for a tuple reduction
    assert [t.name for t in (RF, RF_val)] == ["am.rf.v0", "am.rf.v1"] and RF.op is RF_val.op
    i, lane = s[RF].op.axis
    s[RF].reorder(i, s[RF].op.reduce_axis[0], lane)
    s[RF].vectorize(lane)
    s[RF].compute_at(s[idx], s[idx].op.axis[0])
    a = RNG.integers(0, 4, (9, 37)).astype("float32")  # many ties
    i_, v_ = pt.build(s, [A, idx, val])(a)
    np.testing.assert_array_equal(i_, a.argmax(1))
    np.testing.assert_array_equal(v_, a.max(1))


def test_argmax_with_where_and_a_consumer_attached():
    n = pt.var("n")
    A = pt.placeholder((n, 6), "float64", name="A")
    k = pt.reduce_axis((0, 6), name="k")
    idx, val = pt.compute(
        (n,), lambda i: argmax((k.astype("int32"), A[i, k]), axis=k, where=k != i), name="am"
    )
    D = pt.compute((n,), lambda i: val[i] * 10 + pt.cast("float64", idx[i]), name="D")
    s = pt.create_schedule(D.op)
    s[idx].compute_at(s[D], D.op.axis[0])
    mod = pt.build(s, [A, D])
    a = RNG.standard_normal((5, 6))
    masked = a.copy()
    for r in range(5):
        masked[r, r] = -np.inf
    np.testing.assert_allclose(mod(a), masked.max(1) * 10 + masked.argmax(1))


def test_multi_output_elementwise_shares_one_nest():
    A = pt.placeholder((8, 16), "float32", name="A")
    X, Y = pt.compute((8, 16), lambda i, j: (A[i, j] * 2, A[i, j] + A[j % 8, i]), name="XY")
    assert X.op.input_tensors == [A]
    s = pt.create_schedule(X.op)
    jo, ji = s[X].split(X.op.axis[1], factor=8)
    s[Y].vectorize(ji)  # s[Y] is the same stage
    text = str(pt.lower(s, [A, X, Y]))
    assert text.count("vectorized for") == 1  # one nest writes both
    x, y = pt.build(s, [A, X, Y])(a := RNG.random((8, 16), "float32"))
    np.testing.assert_allclose(x, a * 2)
    np.testing.assert_allclose(y, a + a[np.arange(16) % 8, :8].T)


def test_parallel_reduction_loop_of_a_tuple_reduction_is_refused():
    A, idx, val, k = row_argmax()
    s = pt.create_schedule(idx.op)
    with pytest.raises(pt.ScheduleError, match=r"parallel\(k\) on stage 'am' would race"):
        s[idx].parallel(k)
        pt.lower(s, [A, idx, val])


def test_multi_output_refusals():
    A = pt.placeholder((4, 4), "float32", name="A")
    k = pt.reduce_axis((0, 4), name="k")
    with pytest.raises(TypeError, match="must be the whole tuple of one reducer's call"):
        pt.compute((4,), lambda i: (pt.sum(A[i, k], axis=k), A[i, 0]))
    with pytest.raises(TypeError, match="argmax: fcombine must return a tuple of 2 values"):
        bad = pt.comm_reducer(lambda x, y: x[0], argmax_identity, name="argmax")
        T = pt.compute((4,), lambda i: bad((k.astype("int32"), A[i, k]), axis=k))
        pt.build(pt.create_schedule(T[0].op), [A, *T])
    X, Y = pt.compute((4,), lambda i: (A[i, 0], A[i, 1]), name="XY")
    s = pt.create_schedule(X.op)
    for bad in (Y, [X], [Y, X]):  # a multi-output stage's outputs: all, in order
        with pytest.raises(pt.ScheduleError, match=r"pass all of them, in order \(s.cache_wr"):
            s.cache_write(bad, "local")
    Z = pt.compute((4,), lambda i: X[i] + Y[i], name="Z")
    s = pt.create_schedule(Z.op)
    with pytest.raises(pt.ScheduleError, match="a multi-output stage cannot be inlined"):
        s[X].compute_inline()
    with pytest.raises(TypeError, match="XY.v1: an output of a multi-output compute takes no"):
        r = pt.reduce_axis((1, 4), name="r")
        Y[r] = Y[r - 1]


def test_tuple_reduction_with_init_continues_from_given_values():
    A = pt.placeholder((3, 5), "float32", name="A")
    I0 = pt.placeholder((3,), "int32", name="I0")
    V0 = pt.placeholder((3,), "float32", name="V0")
    k = pt.reduce_axis((0, 5), name="k")
    idx, val = pt.compute(
        (3,),
        lambda i: argmax((k.astype("int32"), A[i, k]), axis=k, init=(I0[i], V0[i])),
        name="am",
    )
    mod = pt.build(pt.create_schedule(idx.op), [A, I0, V0, idx, val])
    a = np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1], [0, 0, 9, 0, 0]], "float32")
    i0, v0 = np.array([-7, -7, -7], "int32"), np.array([10, 4.5, 1], "float32")
    i_, v_ = mod(a, i0, v0)
    np.testing.assert_array_equal(i_, [-7, 0, 2])  # the start wins where it is larger
    np.testing.assert_array_equal(v_, [10, 5, 9])


def test_multi_output_schedule_replays_from_json():
    A, idx, val, k = row_argmax(m=32)
    s = pt.create_schedule(idx.op)
    ko, ki = s[idx].split(k, factor=8)
    RF, _ = s.rfactor(idx, ki, factor_axis=1)
    s[RF].vectorize(s[RF].op.axis[1])
    Y = pt.compute((4,), lambda i: A[i, 0] * 2, name="Y")
    s_cache = pt.create_schedule([idx.op, Y.op])
    s_cache.cache_read(A, "local", [idx])
    for sch, outs in ((s, [A, idx, val]), (s_cache, [A, idx, val, Y])):
        again = pt.Schedule.from_json(sch.to_json(), outs)
        assert str(pt.lower(again, outs)) == str(pt.lower(sch, outs))


def test_cache_read_into_a_multi_output_stage_keeps_every_output():
    A, idx, val, k = row_argmax(m=11)
    s = pt.create_schedule(idx.op)
    AL = s.cache_read(A, "local", [idx])
    s[AL].compute_at(s[idx], idx.op.axis[0])
    a = RNG.standard_normal((6, 11)).astype("float32")
    i_, v_ = pt.build(s, [A, idx, val])(a)
    np.testing.assert_array_equal(i_, a.argmax(1))
    np.testing.assert_array_equal(v_, a.max(1))


def test_cache_write_of_every_output_of_an_argmax_as_tvm():
    """TVM's ``s.cache_write([Ix, V], "local")``: one cache stage computes both outputs
    (attached, the consumer split and parallel, a symbolic extent), and replays."""
    n = pt.var("n")
    A = pt.placeholder((n, 9), "float32", name="A")
    k = pt.reduce_axis((0, 9), name="k")
    Ix, V = pt.compute((n,), lambda i: argmax((k.astype("int32"), A[i, k]), axis=k), name="am")
    s = pt.create_schedule(Ix.op)
    IL, VL = s.cache_write([Ix, V], "local")
    assert s[IL] is s[VL] and IL.name == "am.local.v0"
    io, _ = s[Ix].split(s[Ix].op.axis[0], factor=4)
    s[IL].compute_at(s[Ix], io)
    s[Ix].parallel(io)
    again = pt.Schedule.from_json(s.to_json(), [A, Ix, V])
    for sch in (s, again):
        mod = pt.build(sch, [A, Ix, V])
        for rows in (1, 5, 8):
            a = RNG.random((rows, 9), dtype=np.float32)
            a[0, 3] = a[0, 5] = 2.0  # a tie: the first index
            i, v = mod(a)
            np.testing.assert_array_equal(i, a.argmax(1))
            np.testing.assert_array_equal(v, a.max(1))


def test_a_tensor_is_not_iterable():
    """Python would otherwise iterate A[0], A[1], ... without end (or unpack a 2-D tensor
    into nothing); several outputs come as a list."""
    A = pt.placeholder((4,), name="A")
    with pytest.raises(TypeError, match=r"tensor A is not iterable: index it \(A\[i, \.\.\.\]\)"):
        list(A)
    with pytest.raises(TypeError, match="tensor B is not iterable"):
        x, y = pt.placeholder((4, 5), name="B")
