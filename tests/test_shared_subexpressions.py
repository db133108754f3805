"""Expressions that share their parts (a stage inlined where it is read many times, the
clamps of its region) are simplified, bounded and keyed once per distinct part: walked
as trees, a Harris pipeline's took a minute to lower."""

import numpy as np

import pypto as pt
from pypto import intervals, simplify
from pypto.expr import Const
from pypto.structural import skey

BOUND_CHECKS = True  # the Harris pipeline runs with its accesses checked


def _dag(depth: int):
    """((i + 1) * 2 ...) doubled ``depth`` times: ``depth`` distinct nodes, a tree of
    2 ** depth leaves."""
    i = pt.var("i")
    e = i + 1
    for _ in range(depth):
        e = e + e
    return i, e


def test_a_shared_part_is_simplified_and_bounded_once(monkeypatch):
    calls = {"binary": 0, "bounds": 0}
    binary, inner = simplify.Simplifier.binary, intervals._bounds

    def count_binary(self, e):
        calls["binary"] += 1
        return binary(self, e)

    def count_bounds(e, ranges, wrapped):
        calls["bounds"] += 1
        return inner(e, ranges, wrapped)

    monkeypatch.setattr(simplify.Simplifier, "binary", count_binary)
    monkeypatch.setattr(intervals, "_bounds", count_bounds)
    i, e = _dag(20)
    r = intervals.Ranges({i: (0, 3)})
    assert intervals.bounds(e, r) == (2**20, 4 * 2**20)
    out = simplify.simplify(e, r)
    assert calls["binary"] < 200 and calls["bounds"] < 200  # a tree: 2 ** 20 of each
    zero = simplify.simplify(out - (i + 1) * 2**20, r)
    assert isinstance(zero, Const) and zero.value == 0


def test_a_chain_of_min_keeps_each_operand_once_and_drops_the_bounded():
    """How a region folds the reads of its taps: min(min(min(max(8i - 1, 0), 8i), 8i),
    8i + 1) is max(8i - 1, 0); max chains alike."""
    i = pt.var("i")
    r = intervals.Ranges({i: (0, 4)})
    low = pt.max(i * 8 - 1, 0)
    chain = pt.min(pt.min(pt.min(low, i * 8), i * 8), i * 8 + 1)
    assert skey(simplify.simplify(chain, r)) == skey(simplify.simplify(low, r))
    top = pt.max(pt.max(pt.min(i * 8 + 8, 36), i * 8 + 7), pt.min(i * 8 + 8, 36))
    assert skey(simplify.simplify(top, r)) == skey(simplify.simplify(top.a, r))
    n = pt.var("n")  # nothing decides min(i, n): both kept, once
    kept = simplify.simplify(pt.min(pt.min(i, n), i), r)
    assert skey(kept) == skey(pt.min(i, n))


def test_structural_keys_of_shared_parts():
    _, a = _dag(16)
    i, b = _dag(16)
    assert skey(a) != skey(b)  # different variables
    c = i + 1
    for _ in range(16):
        c = c + c
    assert skey(b) == skey(c) and hash(skey(b)) == hash(skey(c))


def test_a_harris_pipeline_with_inlined_stencils_lowers_and_computes():
    H, W = 37, 53

    def c(v, hi):
        return pt.min(pt.max(v, 0), hi)

    A = pt.placeholder((H, W), "float32", name="A")
    Ix = pt.compute((H, W), lambda y, x: A[y, c(x + 1, W - 1)] - A[y, c(x - 1, W - 1)], name="Ix")
    Iy = pt.compute((H, W), lambda y, x: A[c(y + 1, H - 1), x] - A[c(y - 1, H - 1), x], name="Iy")
    prods = {
        "xx": pt.compute((H, W), lambda y, x: Ix[y, x] * Ix[y, x], name="Ixx"),
        "xy": pt.compute((H, W), lambda y, x: Ix[y, x] * Iy[y, x], name="Ixy"),
        "yy": pt.compute((H, W), lambda y, x: Iy[y, x] * Iy[y, x], name="Iyy"),
    }

    def box(P, name):
        taps = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
        return pt.compute(
            (H, W),
            lambda y, x: sum(
                (P[c(y + dy, H - 1), c(x + dx, W - 1)] for dy, dx in taps), pt.const(0.0)
            ),
            name=name,
        )

    S = {k: box(P, "S" + k) for k, P in prods.items()}
    R = pt.compute(
        (H, W),
        lambda y, x: S["xx"][y, x] * S["yy"][y, x] - S["xy"][y, x] * S["xy"][y, x]
        - 0.04 * (S["xx"][y, x] + S["yy"][y, x]) * (S["xx"][y, x] + S["yy"][y, x]),
        name="R",
    )  # fmt: skip
    s = pt.create_schedule(R.op)
    for T in [*prods.values(), *S.values()]:
        s[T].compute_inline()
    yo, xo, yi, xi = s[R].tile(R.op.axis[0], R.op.axis[1], 8, 16)
    s[R].vectorize(xi)
    s[R].parallel(yo)
    s[Ix].compute_at(s[R], xo)
    s[Iy].compute_at(s[R], xo)
    mod = pt.build(s, [A, R], name="harris")
    assert len(mod.source) < 400_000  # the region's folds of 90 taps: 3 MB of C

    a = np.random.default_rng(0).random((H, W)).astype(np.float64)
    ys, xs = np.arange(H), np.arange(W)
    ix = a[:, np.minimum(xs + 1, W - 1)] - a[:, np.maximum(xs - 1, 0)]
    iy = a[np.minimum(ys + 1, H - 1), :] - a[np.maximum(ys - 1, 0), :]

    def boxed(p):
        return sum(
            p[np.clip(ys + dy, 0, H - 1)][:, np.clip(xs + dx, 0, W - 1)]
            for dy in (-1, 0, 1)
            for dx in (-1, 0, 1)
        )

    sxx, sxy, syy = boxed(ix * ix), boxed(ix * iy), boxed(iy * iy)
    want = sxx * syy - sxy * sxy - 0.04 * (sxx + syy) ** 2
    np.testing.assert_allclose(mod(a.astype(np.float32)), want, rtol=2e-4, atol=2e-4)


def test_a_float_min_or_max_of_one_expression_with_itself_is_that_expression():
    """``pt.max(x, x)`` was ``pt_max_float(x, x)`` in the C; NaN and -0.0 stay as they are."""
    n = pt.var("n")
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n,), lambda i: pt.max(A[i] * 2, A[i] * 2) + pt.min(A[i], A[i]), name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    assert "pt_max_float" not in mod.source and "pt_min_float" not in mod.source
    a = np.array([1, np.nan, -0.0, 3], np.float32)
    np.testing.assert_array_equal(mod(a), a * 2 + a)
