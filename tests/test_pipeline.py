"""``lower`` is a straight pipeline over data: check_args -> check_bounds -> infer (frozen
nests) -> check_schedule -> plan (buffers) -> Lowering -> passes. Each step can be run by
hand, and none changes what an earlier one produced."""

import dataclasses

import numpy as np
import pytest

import pypto as pt
from pypto.bounds import Nests, StageNest, infer
from pypto.bounds_check import check_bounds
from pypto.layout import plan
from pypto.legality import check_schedule
from pypto.lowering import Lowering, check_args


def _prefix_sum_after_matmul():
    """A tiled matmul with a producer computed at a tile, then a prefix sum of its rows."""
    A = pt.placeholder((16, 8), "float32", name="A")
    B = pt.placeholder((8, 12), "float32", name="B")
    P = pt.compute((16, 8), lambda i, k: A[i, k] * 2, name="P")
    k = pt.reduce_axis((0, 8), name="k")
    C = pt.compute((16, 12), lambda i, j: pt.sum(P[i, k] * B[k, j], axis=k), name="C")
    Y = pt.compute((16,), lambda i: C[i, 0], name="Y")
    r = pt.reduce_axis((1, 16), name="r")
    q = pt.reduce_axis((0, 12), name="q")
    Y[r] = Y[r - 1] + pt.sum(C[r, q], axis=q)  # a reduction inside an update
    s = pt.create_schedule(Y.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], x_factor=4, y_factor=4)
    s[P].compute_at(s[C], io)
    return s, [A, B, C, Y]


def test_the_pipeline_by_hand_is_lower():
    s, args = _prefix_sum_after_matmul()
    tensors, *scalars = check_args(s, args)
    nests = infer(s, check_bounds(s), tensors)
    check_schedule(s, nests)
    func = Lowering(nests, plan(nests), "f", scalars).run()
    assert str(func) == str(pt.lower(s, args, name="f"))


def test_inferred_nests_are_read_only_and_lowering_leaves_them_so():
    s, args = _prefix_sum_after_matmul()
    nests = infer(s, args=args)
    assert isinstance(nests, Nests)
    C = s[args[2]]
    P = next(st for st in s.stages if st.name == "P")
    n = nests.nest(C)
    assert isinstance(n, StageNest)
    assert [iv.name for iv, _ in nests.nest(P).prefix] == ["i.outer"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        n.region = ()
    with pytest.raises(TypeError):
        n.leaf_ext[C.leaf_iter_vars[0]] = 1
    with pytest.raises(TypeError):
        nests.nests[C] = n
    ranges = dict(nests.ranges)
    low = Lowering(nests, plan(nests), "f")
    low.run()
    assert set(low.ranges) > set(ranges)  # the update's reduction counter, in a copy
    assert dict(nests.ranges) == ranges


def test_the_pipeline_computes_the_reference():
    s, args = _prefix_sum_after_matmul()
    mod = pt.build(s, args, target="generic")
    a = np.random.rand(16, 8).astype("float32")
    b = np.random.rand(8, 12).astype("float32")
    c = np.zeros((16, 12), "float32")
    y = np.zeros(16, "float32")
    mod(a, b, c, y)
    ref = (a * 2) @ b
    np.testing.assert_allclose(c, ref, rtol=1e-5)
    want = np.cumsum(np.concatenate([ref[:1, 0], ref[1:].sum(axis=1)]))
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_check_args_names_a_missing_output():
    s, args = _prefix_sum_after_matmul()
    with pytest.raises(pt.ScheduleError, match="output Y is not among the arguments"):
        check_args(s, args[:3])
