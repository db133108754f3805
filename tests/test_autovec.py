"""Loops the C compiler must not vectorize on its own (``pypto/autovec.py``): a serial
loop whose stores of a buffer a later iteration loads, with its body unrolled, which
gcc 12.2 vectorizes wrongly at -O3, runs one iteration at a time; loops the compiler
vectorizes correctly keep that."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pypto as pt
from benchmarks.polybench import build

F = "float64"
MARK = "#pragma omp simd simdlen(1)"


def _fused(n, read_back):
    """B[i] from A[i], then A[i] from B[i - read_back], in one loop split by 2: the
    loop over pairs stores B[2 io + 2], B[2 io + 3] and loads B[2 io], B[2 io + 1]."""
    A0 = pt.placeholder((n,), F, name="A0")
    A = pt.compute((n,), lambda i: A0[i], name="A")
    B = pt.compute((n,), lambda i: A0[i] * 0.5, name="B")
    t, i = pt.rdom([(0, 1), (2, n - 2)], names="t i")
    B[i] = 0.25 + A[i] * 1.5
    t2, i2 = pt.rdom([(0, 1), (2, n - 2)], names="t2 i2")
    A[i2] = -0.5 + B[i2 - read_back] * 0.5
    s = pt.create_schedule([A.op, B.op])
    ua, ub = s[A].update(0), s[B].update(0)
    inner = []
    for u, ii in ((ub, i), (ua, i2)):
        io, ii = u.split(ii, factor=2)
        inner.append(ii)
    ua.compute_with(ub, inner[1], order=t2)
    return s, [A0, A, B]


def test_a_loop_reading_what_an_earlier_iteration_stored_runs_one_at_a_time():
    n = 10
    s, args = _fused(n, read_back=2)
    mod = pt.build(s, args)
    assert mod.source.count(MARK) == 1
    a0 = np.arange(1.0, n + 1)
    a, b = np.full(n, np.nan), np.full(n, np.nan)
    mod(a0, a, b)
    ra, rb = a0.copy(), a0 * 0.5
    rb[2:-2] = 0.25 + ra[2:-2] * 1.5
    ra[2:-2] = -0.5 + rb[:-4] * 0.5
    np.testing.assert_allclose(a, ra, rtol=1e-15)  # gcc 12.2 -O3 gave 0.25 for a[4]
    np.testing.assert_allclose(b, rb, rtol=1e-15)


@pytest.mark.parametrize(
    "name, tuned",
    [("trmm", False), ("syrk", True), ("gemm", False), ("lu", True), ("adi", True)],
)
def test_loops_the_compiler_vectorizes_correctly_are_not_marked(name, tuned):
    """trmm's reduction into B[i, j] reads rows of B below i (never the one it
    stores), syrk's schedule accumulates eight elements of a row of C, each read
    where it is stored, gemm's C[i, j] +=, lu's row reduction (one store), adi's
    sweeps (p[20 i + 1] from p[20 i]: one store, and 20 i + 1 never meets 20 i'):
    no loop is marked, and the compiler vectorizes them as before."""
    mod, _ = build(name, "MINI", tuned=tuned)
    assert MARK not in mod.source


def test_the_same_element_read_back_is_not_marked():
    s, args = _fused(10, read_back=0)
    assert MARK not in pt.build(s, args, emit_only=True)


def test_a_short_loop_bounded_by_an_outer_loop_is_right_under_a_parallel_loop():
    """gcc 12 -O3 vectorized ``j_outer < pt_floordiv_i64(1 - j_inner, 5) + 2`` (trip
    count 1 or 2) inside a parallel loop into a loop that ran no iteration for j_inner
    2..4: columns 2-4 kept the NaN the output was filled with. A bound that is not a
    constant is now computed once, before its loop."""
    M, N, K = 2, 7, 7
    A = pt.placeholder((M, K), "float32", name="A")
    B = pt.placeholder((K, N), "float32", name="B")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M, N), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=5)
    io, ii = s[C].split(i, factor=2)
    iio, iii = s[C].split(ii, factor=2)
    s[C].reorder(iii, iio, io, ji, jo, k)
    s[C].parallel(iii)
    mod = pt.build(s, [A, B, C], name="bound_once")
    assert "const int64_t j_outer_end = " in mod.source
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (M, K)).astype(np.float32)
    b = rng.integers(-3, 4, (K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    mod(a, b, c)
    np.testing.assert_array_equal(c, a @ b)


def _diagonal_update(n, m, steps=2):
    """T[i, j] = 0.75 T[i, j] + 0.5 T[i - 1, j - 1] over a time loop, in place."""
    S = pt.placeholder((n, m), F, name="S")
    T = pt.compute((n, m), lambda i, j: S[i, j], name="T")
    t, ri, rj = pt.rdom([(0, steps), (1, n - 1), (1, m - 1)], names="t ri rj")
    T[ri, rj] = T[ri, rj] * 0.75 + T[ri - 1, rj - 1] * 0.5
    a = np.random.default_rng(0).standard_normal((n, m))
    want = a.copy()
    for _ in range(steps):
        for i in range(1, n - 1):
            for j in range(1, m - 1):
                want[i, j] = want[i, j] * 0.75 + want[i - 1, j - 1] * 0.5
    return pt.create_schedule(T.op), [S, T], [a], want


def _producer_in_a_reduction():
    """P computed inside C's reduction loop (``compute_at`` at k)."""
    M, N, K = 8, 2, 2
    A = pt.placeholder((M + 2, K), F, name="A")
    B = pt.placeholder((K, N), F, name="B")
    P = pt.compute((M + 2, K), lambda i, k: A[i, k] * 2.0, name="P")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M, N), lambda i, j: pt.sum((P[i, k] + P[i + 2, k]) * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    s[P].compute_at(s[C], k)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M + 2, K)), rng.standard_normal((K, N))
    p = 2 * a
    return s, [A, B, C], [a, b], (p[:-2] + p[2:]) @ b


def _reduction_over_a_local_copy():
    """C's reduction reads a ``cache_read`` copy of its producer, C attached to D."""
    M, N, K = 8, 2, 5
    A = pt.placeholder((M + 2, K), F, name="A")
    W = pt.placeholder((K, N), F, name="W")
    P = pt.compute((M + 2, K), lambda i, k: A[i, k] * 2.0 + 1.0, name="P")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M, N), lambda i, j: pt.sum((P[i, k] + P[i + 2, k]) * W[k, j], axis=k), name="C")
    D = pt.compute((M, N), lambda i, j: C[i, j] * 0.5 + pt.cast(F, j), name="D")
    s = pt.create_schedule(D.op)
    s.cache_read(P, "local", [C])
    s[C].reorder(k, *C.op.axis)
    s[C].compute_at(s[D], D.op.axis[1])
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((M + 2, K)), rng.standard_normal((K, N))
    p = a * 2 + 1
    return s, [A, W, D], [a, w], ((p[:-2] + p[2:]) @ w) * 0.5 + np.arange(N)


CASES = {
    **{f"diagonal_{n}x{m}": (lambda n=n, m=m: _diagonal_update(n, m))
       for n, m in ((9, 9), (10, 8), (12, 13), (16, 17))},
    "producer_in_a_reduction": _producer_in_a_reduction,
    "reduction_over_a_local_copy": _reduction_over_a_local_copy,
}  # fmt: skip


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("target", ["host", "x86-avx2", "generic"])
def test_loops_pypto_did_not_vectorize_are_not_vectorized_wrongly(make, target):
    """Was: gcc 12.2 at -O3 vectorized these plain loops wrongly (errors up to 5.8; the
    diagonal update at 134 of 324 sizes from 3 x 3 to 20 x 20): the compiler now
    vectorizes a loop pypto did not mark only where no alias check, peel or epilogue is
    needed, and straight-line code not at all (``pypto.target.GCC_VECTORIZER_LIMITS``)."""
    if not pt.Target(target).can_run():
        pytest.skip(f"{target} cannot run here")
    s, args, inputs, want = make()
    got = pt.build(s, args, target=target)(*inputs)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@settings(  # 100 by default: with gcc's vectorizer unlimited, 25 missed every failing case
    max_examples=int(os.environ.get("PYPTO_FUZZ_EXAMPLES", "100")),
    deadline=None,
    derandomize=True,  # the same examples on every run
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    n=st.integers(5, 20),
    m=st.integers(5, 20),
    steps=st.integers(1, 3),
    di=st.integers(-1, 1),
    dj=st.integers(-1, 1),
    reverse=st.booleans(),
)
def test_in_place_updates_reading_a_neighbour_are_exact(n, m, steps, di, dj, reverse):
    """T[i, j] = 0.75 T[i, j] + 0.5 T[i + di, j + dj] over a time loop, in place, rows in
    either order, the default schedule, against the loop nest run in numpy (the shape
    gcc 12.2 vectorized wrongly before ``GCC_VECTORIZER_LIMITS``)."""
    S = pt.placeholder((n, m), F, name="S")
    T = pt.compute((n, m), lambda i, j: S[i, j], name="T")
    t, r, rj = pt.rdom([(0, steps), (1, n - 1), (1, m - 1)], names="t r rj")
    ri = n - 1 - r if reverse else r
    T[ri, rj] = T[ri, rj] * 0.75 + T[ri + di, rj + dj] * 0.5
    a = np.random.default_rng(n * 100 + m).standard_normal((n, m))
    want = a.copy()
    rows = range(n - 2, 0, -1) if reverse else range(1, n - 1)
    for _ in range(steps):
        for i in rows:
            for j in range(1, m - 1):
                want[i, j] = want[i, j] * 0.75 + want[i + di, j + dj] * 0.5
    got = pt.build(pt.create_schedule(T.op), [S, T])(a)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
