"""Register promotion of loop-carried elements (``pypto/promote.py``): an element a
serial loop keeps updating lives in a local scalar, the results unchanged."""

from __future__ import annotations

import numpy as np
import pytest

import pypto as pt


def _row_sums(n, k_extent):
    A = pt.placeholder((n, 64), "int8", name="A")
    k = pt.reduce_axis((0, k_extent), name="k")
    S = pt.compute((n,), lambda i: pt.sum(A[i, k].astype("int32"), axis=k), name="S")
    return A, S


def test_a_reduction_into_memory_accumulates_in_a_scalar():
    A, S = _row_sums(32, 64)
    s = pt.create_schedule(S.op)
    s[S].parallel(S.op.axis[0])
    mod = pt.build(s, [A, S])
    # the scalar starts from the reduction's identity: S[i] is not stored, then reloaded
    assert "int32_t S_r = 0;" in mod.source and "S[i] = 0;" not in mod.source
    # an int32 sum may overflow: it wraps (pypto.intervals.may_wrap)
    assert "S_r = pt_wadd_i32(S_r, (int32_t)(A[i * 64 + k]))" in mod.source.replace("((", "(")
    assert "S[i] = S_r;" in mod.source
    a = np.random.default_rng(0).integers(-128, 128, (32, 64), dtype=np.int8)
    np.testing.assert_array_equal(mod(a), a.astype(np.int32).sum(1))


def test_a_loop_of_symbolic_extent_keeps_the_element_in_memory():
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((n, m), "float32", name="A")
    k = pt.reduce_axis((0, m), name="k")
    S = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k), name="S")
    mod = pt.build(pt.create_schedule(S.op), [A, S])
    assert "S_r" not in mod.source  # m may be 0: S[i] must not be read then
    a = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(mod(a), a.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(mod(np.zeros((3, 0), np.float32)), np.zeros(3, np.float32))


def test_an_element_whose_index_moves_in_the_loop_is_not_promoted():
    A = pt.placeholder((16, 8), "float32", name="A")
    k = pt.reduce_axis((0, 16), name="k")
    C = pt.compute((8,), lambda j: pt.sum(A[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    s[C].reorder(k, C.op.axis[0])  # the column loop inside the reduction: C[j] moves
    mod = pt.build(s, [A, C])
    assert "C_r" not in mod.source
    a = np.random.default_rng(2).standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_allclose(mod(a), a.sum(0), rtol=1e-5)


def _matmul(k_extent):
    A = pt.placeholder((6, k_extent), name="A")
    B = pt.placeholder((k_extent, 5), name="B")
    k = pt.reduce_axis((0, k_extent), name="k")
    C = pt.compute((6, 5), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return pt.build(pt.create_schedule(C.op), [A, B, C])


def test_a_promoted_float_reduction_matches_the_unpromoted_one():
    promoted, kept = _matmul(300), _matmul(pt.var("K"))  # the same additions, in order
    assert "float C_r = 0.0f;" in promoted.source and "C_r" not in kept.source
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 300)).astype(np.float32)
    b = rng.standard_normal((300, 5)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    # not bit for bit: the C compiler may fuse a multiply-add in one and not the other
    np.testing.assert_allclose(promoted(a, b), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(kept(a, b), want, rtol=1e-4, atol=1e-4)


def test_a_guarded_element_is_not_promoted():
    n = pt.var("n")
    A = pt.placeholder((n, 16), "float32", name="A")
    k = pt.reduce_axis((0, 16), name="k")
    S = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k), name="S")
    s = pt.create_schedule(S.op)
    io, ii = s[S].split(S.op.axis[0], factor=4)  # ragged: S[io * 4 + ii] under i < n
    s[S].reorder(io, k, ii)
    mod = pt.build(s, [A, S])
    a = np.random.default_rng(4).standard_normal((6, 16)).astype(np.float32)
    np.testing.assert_allclose(mod(a), a.sum(1), rtol=1e-5)


@pytest.mark.parametrize("checks", [True, False])
def test_an_element_updated_only_in_an_inner_loop_that_may_not_run_stays_in_memory(checks):
    """Found by the schedule fuzzer: splits leave ``for io < (0 - ii) // 2 + 1`` inside
    ``for k``, running no times for ii = 1, where C[ii] is past C's one element. The
    element was promoted around ``for k``, loaded and stored for ii = 1 too."""
    A = pt.placeholder((1, 2), "float32", name="A")
    B = pt.placeholder((2, 1), "float32", name="B")
    k = pt.reduce_axis((0, 2), name="k")
    C = pt.compute((1, 1), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=2)
    iio, iii = s[C].split(ii, nparts=1)
    iioo, iioi = s[C].split(iio, factor=2)
    s[C].reorder(iii, k, iioo, io, j, iioi)
    mod = pt.build(s, [A, B, C], bound_checks=checks)
    assert "C_r" not in mod.source
    a, b = np.array([[2.0, 3.0]], np.float32), np.array([[5.0], [7.0]], np.float32)
    out = np.full((1, 1), np.nan, np.float32)
    mod(a, b, out)
    np.testing.assert_array_equal(out, a @ b)
