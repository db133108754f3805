"""Sizes that would take index arithmetic out of int64 (``pypto/overflow.py``): a call
with one is refused before the kernel runs, not left to C's wrapping arithmetic, where
the bounds proved for the accesses no longer hold."""

import numpy as np
import pytest

import pypto as pt
from pypto.errors import ScheduleError


def _gather():
    seed = pt.var("seed")
    A = pt.placeholder((4,), "float32", name="A")
    C = pt.compute((4,), lambda i: A[(seed * 10 + i) % 4], name="C")
    return pt.build(pt.create_schedule(C.op), [A, seed, C])


def test_a_size_that_would_push_a_read_out_of_bounds_is_refused():
    f = _gather()
    a = np.array([1, 2, 3, 4], "float32")
    with pytest.raises(ValueError, match=r"seed = 10{18} \(from argument seed\).*" + "seed"):
        f(a, 10**18)
    for seed in (0, 3, 10**17, (2**63 - 4) // 10):  # the largest: seed * 10 + 3 < 2**63
        np.testing.assert_array_equal(f(a, seed), a[[(seed * 10 + i) % 4 for i in range(4)]])


def test_a_size_that_would_push_a_write_out_of_bounds_is_refused_and_nothing_written():
    seed = pt.var("seed")
    X = pt.placeholder((4,), "float32", name="X")
    Y = pt.compute((4,), lambda i: X[i], name="Y")
    r = pt.reduce_axis((0, 4), name="r")
    Y[(seed * 10 + r) % 4] = X[r] * 100.0
    f = pt.build(pt.create_schedule(Y), [X, seed, Y])
    memory = np.full(64, 7.0, "float32")
    y = memory[16:20]
    with pytest.raises(ValueError, match="outside int64"):
        f(np.arange(4, dtype="float32"), 10**18, y)
    assert (memory == 7.0).all()
    f(np.arange(4, dtype="float32"), 10**17, y)
    np.testing.assert_array_equal(y, [0.0, 100.0, 200.0, 300.0])  # seed * 10 % 4 == 0


def test_values_of_sizes_and_loops_are_refused_where_they_leave_int64():
    seed = pt.var("seed")
    C = pt.compute((4,), lambda i: (seed * 10 + i) % 1000, name="C")
    f = pt.build(pt.create_schedule(C.op), [seed, C])
    with pytest.raises(ValueError, match=r"seed \* 10 \+ i .* outside int64"):
        f(10**18, np.empty(4, "int64"))
    c = np.empty(4, "int64")
    f(10**17, c)
    np.testing.assert_array_equal(c, [(10**18 + i) % 1000 for i in range(4)])


def test_a_kernel_without_sizes_that_leaves_int64_is_refused_when_built():
    Y = pt.compute((6,), lambda i: i + pt.const(2**63 - 1, "int64"), name="Y")
    with pytest.raises(
        ScheduleError, match=r"i \+ 9223372036854775807 .* reaches 9223372036854775812"
    ):
        pt.build(pt.create_schedule(Y.op), [Y])


def _strided():
    n = pt.var("n")
    A = pt.placeholder((4,), "float32", name="A")
    C = pt.compute((4,), lambda i: A[(i * n) % 4] * 2.0, name="C")
    return pt.build(pt.create_schedule(C.op), [A, n, C])


def test_sizes_past_the_proven_bound_are_checked_exactly():
    """``i * n`` stays in int64 for every i < 4 while n < 2**63 / 3: the build proves
    it up to 2**61 - 1; above that, each call's n is checked itself."""
    f = _strided()
    assert f.signature.safe_size == 2**61 - 1
    a = np.array([1, 2, 3, 4], "float32")
    for n in (2**61 + 1, 2**61 + 3):  # above the proven bound, still in int64
        np.testing.assert_array_equal(f(a, n), a[[(i * n) % 4 for i in range(4)]] * 2)
    with pytest.raises(ValueError, match=r"i \* n .* outside int64"):
        f(a, 2**62)


def test_a_saved_module_refuses_sizes_past_its_proven_bound(tmp_path):
    path = str(tmp_path / "strided.so")
    _strided().export_library(path)
    f = pt.load_module(path)
    assert f.signature.safe_size == 2**61 - 1
    a = np.array([1, 2, 3, 4], "float32")
    np.testing.assert_array_equal(f(a, 2**61 - 1), a[[(i * (2**61 - 1)) % 4 for i in range(4)]] * 2)
    with pytest.raises(ValueError, match=r"n = 2305843009213693953 .* exceeds 2305843009213693951"):
        f(a, 2**61 + 1)


def test_bounds_not_known_when_built_are_checked_at_each_call():
    """A fused loop over ``n x n`` indexes by ``f // n`` and ``f % n``: their bounds are
    not known while ``n`` may be 0, so nothing is proved for all sizes, and each call's
    ``n`` is checked (``safe_size`` 0) -- and runs."""
    n = pt.var("n")
    A = pt.placeholder((n, n), "float64", name="A")
    B = pt.compute((n, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = pt.create_schedule(B.op)
    s[B].fuse(*B.op.axis)
    f = pt.build(s, [A, B])
    assert "//" in str(pt.lower(s, [A, B])) and f.signature.safe_size == 0
    for size in (0, 1, 3, 5):
        a = np.random.default_rng(size).random((size, size))
        np.testing.assert_array_equal(f(a), a * 2.0 + 1.0)
