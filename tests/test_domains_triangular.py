"""Triangular 3-D nests (LU's trailing update, a Cholesky-like nest) in every loop order
PolyBench tuners use (lu i-k-j and k-i-j, cholesky j-i-k, i-k-j, k-i-j), split and
annotated, against a direct Python loop nest of the unscheduled program."""

import numpy as np
import pytest

import pypto as pt
from pypto.loop_ir import For, walk_stmts

BOUND_CHECKS = True  # every kernel checks its accesses at run time (conftest.py)

RNG = np.random.default_rng(14)


def build_run(s, args, *arrays):
    mod = pt.build(s, args)
    mod(*arrays)
    return arrays[-1]


def schur(n):
    """LU's trailing update: for k, for i > k, for j > k: A[i, j] -= A[i, k] * A[k, j]"""
    T = pt.placeholder((n, n), "float64", name="T")
    A = pt.compute((n, n), lambda i, j: T[i, j], name="A")
    k = pt.reduce_axis((0, n), name="k")
    i = pt.reduce_axis((k + 1, n), name="i")
    j = pt.reduce_axis((k + 1, n), name="j")
    A[i, j] = A[i, j] - A[i, k] * A[k, j]
    return T, A, {"k": k, "i": i, "j": j}


def ref_schur(t):
    a = t.copy()
    n = len(a)
    for k in range(n):
        for i in range(k + 1, n):
            for j in range(k + 1, n):
                a[i, j] -= a[i, k] * a[k, j]
    return a


def cholesky_like(n):
    """for j, for i >= j, for k < j: A[i, j] -= A[i, k] * A[j, k]"""
    T = pt.placeholder((n, n), "float64", name="T")
    A = pt.compute((n, n), lambda i, j: T[i, j], name="A")
    j = pt.reduce_axis((0, n), name="j")
    i = pt.reduce_axis((j, n), name="i")
    k = pt.reduce_axis((0, j), name="k")
    A[i, j] = A[i, j] - A[i, k] * A[j, k]
    return T, A, {"j": j, "i": i, "k": k}


def ref_cholesky_like(t):
    a = t.copy()
    n = len(a)
    for j in range(n):
        for i in range(j, n):
            for k in range(j):
                a[i, j] -= a[i, k] * a[j, k]
    return a


@pytest.mark.parametrize(
    "kernel, order, split, annotate",
    [
        ("schur", "ikj", None, None),  # lu i-k-j
        ("schur", "ikj", "j", "vectorize"),
        ("schur", "kji", "i", None),
        ("schur", "kij", "j", "parallel_i"),
        ("cholesky", "jik", None, None),  # cholesky j-i-k
        ("cholesky", "ijk", "k", None),
        ("cholesky", "jki", "i", None),
        ("cholesky", "ikj", None, None),  # cholesky i-k-j
        ("cholesky", "kij", None, None),  # cholesky k-i-j
        ("schur", "kij", None, None),  # lu k-i-j
    ],
)
def test_triangular_nest_reordered_and_split(kernel, order, split, annotate):
    kernels = {"schur": (schur, ref_schur), "cholesky": (cholesky_like, ref_cholesky_like)}
    make, ref = kernels[kernel]
    n = pt.var("n") if split == "j" else 9
    T, A, ax = make(n)
    s = pt.create_schedule(A.op)
    u = s[A].update(0)
    u.reorder(*[ax[c] for c in order])
    if split is not None:
        outer, inner = u.split(ax[split], factor=4)
        if annotate == "vectorize":
            u.vectorize(inner)
    if annotate == "parallel_i":
        u.parallel(ax["i"])
    for size in (1, 9) if split == "j" else (9,):
        t = RNG.random((size, size))
        a = build_run(s, [T, A], t, np.full((size, size), np.nan))
        np.testing.assert_allclose(a, ref(t), rtol=1e-12)


def test_split_of_a_loop_with_an_outer_dependent_minimum_tiles_from_that_minimum():
    """j in [k + 1, n) split by 4 under k: tiles start at k + 1, so full tiles have a
    constant trip count (vectorized as such), the last one the rest."""
    n = pt.var("n")
    T, A, ax = schur(n)
    s = pt.create_schedule(A.op)
    u = s[A].update(0)
    u.reorder(ax["i"], ax["k"], ax["j"])
    jo, ji = u.split(ax["j"], factor=4)
    u.vectorize(ji)
    body = pt.lower(s, [T, A]).body
    vec = [x for x in walk_stmts(body) if isinstance(x, For) and x.kind == "vectorized"]
    assert any(isinstance(x.extent, pt.expr.Const) and x.extent.value == 4 for x in vec)
    t = RNG.random((10, 10))
    a = build_run(s, [T, A], t, np.full((10, 10), np.nan))
    np.testing.assert_allclose(a, ref_schur(t), rtol=1e-12)
