"""Update definitions over symbolic sizes at which their domain is empty (or its first
rows are): the loops run nothing there, whatever the schedule.

The tightened bounds were simplified for the sizes at which the box of the loops is not
empty, a fused extent multiplied two negative ones, and the merged loops of
``compute_with`` were bounded only where a member has points: at n = 1, 2 or 3 the
loops ran points outside the domain and wrote before or past the output.

    a in [2, n - 1), b in [n - 3, a + 1)      at n = 2:  for (a, 0, 2): ...   (was)
                                                          for (a, 0, 0): ...   (now)
"""

import numpy as np
import pytest

import pypto as pt


def _update(lo_i, hi_i, lo_j, hi_j, schedule=lambda u, i, j: None, lhs=lambda i, j: (i, j)):
    n = pt.var("n")
    X = pt.placeholder((n, n), "float64", name="X")
    Y = pt.compute((n, n), lambda i, j: X[i, j], name="Y")
    i = pt.reduce_axis((lo_i(n), hi_i(n)), name="i")
    j = pt.reduce_axis((lo_j(n, i), hi_j(n, i)), name="j")
    Y[lhs(i, j)] = Y[lhs(i, j)] * 2.0 + 1.0
    s = pt.create_schedule(Y.op)
    schedule(s[Y].update(0), i, j)
    return pt.build(s, [X, Y])


def _check(mod, points, sizes=range(1, 7)):
    """Run at each size with the output inside sentinels; compare with ``points(n)``,
    the (row, col) cells the update writes."""
    for n in sizes:
        big = np.full(n * n + 16, -7.0)
        y = big[8 : 8 + n * n].reshape(n, n)
        y[:] = 0.0
        mod(np.zeros((n, n)), y)
        want = np.zeros((n, n))
        for r, c in points(n):
            want[r, c] = want[r, c] * 2 + 1
        assert (big[:8] == -7).all() and (big[8 + n * n :] == -7).all(), f"n={n}: wrote outside"
        np.testing.assert_array_equal(y, want, err_msg=f"n={n}")


CASES = {
    "no schedule, band": (
        (lambda n: 2, lambda n: n - 1, lambda n, i: n - 3, lambda n, i: i + 1),
        lambda u, i, j: None,
        lambda i, j: (j, i),
        lambda n: [(b, a) for a in range(2, n - 1) for b in range(n - 3, a + 1)],
    ),
    "split, strict lower": (
        (lambda n: 0, lambda n: n, lambda n, i: 0, lambda n, i: i),
        lambda u, i, j: u.split(i, factor=2),
        lambda i, j: (i, j),
        lambda n: [(a, b) for a in range(n) for b in range(a)],
    ),
    "split, rows from 3": (
        (lambda n: 0, lambda n: n - 3, lambda n, i: 0, lambda n, i: i),
        lambda u, i, j: u.split(i, factor=2),
        lambda i, j: (i + 3, j),
        lambda n: [(a + 3, b) for a in range(n - 3) for b in range(a)],
    ),
    "fuse of two empty ranges": (
        (lambda n: 2, lambda n: n, lambda n, i: 2, lambda n, i: n),
        lambda u, i, j: u.fuse(i, j),
        lambda i, j: (i, j),
        lambda n: [(a, b) for a in range(2, n) for b in range(2, n)],
    ),
    "skew and interchange": (
        (lambda n: 2, lambda n: n, lambda n, i: 0, lambda n, i: i + 1),
        lambda u, i, j: u.reorder(*reversed(u.skew(i, j, 1))),
        lambda i, j: (i, j),
        lambda n: [(a, b) for a in range(2, n) for b in range(a + 1)],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_loops_run_nothing_where_the_domain_is_empty(case):
    (lo_i, hi_i, lo_j, hi_j), schedule, lhs, points = CASES[case]
    _check(_update(lo_i, hi_i, lo_j, hi_j, schedule, lhs), points)


def test_compute_with_of_two_updates_over_a_band_empty_at_small_sizes():
    """B's update (its loops interchanged), then A's reading it, merged in A's outer
    loop; each over i in [1, n), j in [n - 3, n - i), empty at n = 1 (the arrays are padded by one
    on each side, so the reads one past stay inside)."""
    nf = pt.var("n")
    n = nf - 2
    X = pt.placeholder((nf, nf), "float64", name="X")
    A = pt.compute((nf, nf), lambda i, j: X[i, j], name="A")
    B = pt.compute((nf, nf), lambda i, j: X[j, i] * 0.5, name="B")
    ai = pt.reduce_axis((1, n), name="ai")
    aj = pt.reduce_axis((n - 3, n - ai), name="aj")
    A[ai + 1, aj + 1] = (A[ai + 1, aj + 1] * 0.5 + A[ai, aj + 2] * 0.25 + B[ai + 2, aj + 2] * 0.125
                         + X[ai + 1, aj + 1])  # fmt: skip
    bi = pt.reduce_axis((1, n), name="bi")
    bj = pt.reduce_axis((n - 3, n - bi), name="bj")
    B[bi + 1, bj + 1] = B[bi + 1, bj + 1] * 0.5 + B[bi + 1, bj + 2] * 0.25 + X[bi + 1, bj + 1]
    s = pt.create_schedule([A.op, B.op])
    s[B].update(0).reorder(bj, bi)  # B's outer loop is its j, merged with A's i
    s[B].update(0).compute_with(s[A].update(0), ai)
    mod = pt.build(s, [X, A, B])
    for m in range(1, 6):
        size = m + 2
        x = (np.arange(size * size, dtype=np.float64).reshape(size, size) % 7) - 3
        a, b = x.copy(), x.T * 0.5
        for r in range(1, m):  # B first: A reads it
            for c in range(m - 3, m - r):
                b[r + 1, c + 1] = b[r + 1, c + 1] * 0.5 + b[r + 1, c + 2] * 0.25 + x[r + 1, c + 1]
        for r in range(1, m):
            for c in range(m - 3, m - r):
                a[r + 1, c + 1] = (a[r + 1, c + 1] * 0.5 + a[r, c + 2] * 0.25
                                   + b[r + 2, c + 2] * 0.125 + x[r + 1, c + 1])  # fmt: skip
        ga, gb = np.full((size, size), np.nan), np.full((size, size), np.nan)
        mod(x, ga, gb)
        np.testing.assert_array_equal(gb, b, err_msg=f"n={size}")
        np.testing.assert_array_equal(ga, a, err_msg=f"n={size}")


def test_tightened_bounds_have_a_budget_and_fall_back_to_the_box():
    """A 3-deep triangle under min() with a symbolic size kept isl busy for more than 15
    minutes in one reorder; over its budget a stage keeps the box and guards, and the
    illegal reorder is refused at once, as for a constant size."""
    n = pt.var("n")
    X = pt.placeholder((n, n), "float64", name="X")
    Y = pt.compute((n, n), lambda i, j: X[i, j], name="Y")
    a = pt.reduce_axis((1, n), name="a")
    b = pt.reduce_axis((a, pt.min(a + a + 1, n)), name="b")
    c = pt.reduce_axis((0, pt.min(a + b + 1, n)), name="c")
    Y[a, n - 1 - b] = Y[a, n - 1 - b] * 0.5 + Y[a - 1, b - 1] * 0.25 + X[c, a]
    u = pt.create_schedule(Y.op)[Y].update(0)
    ao, ai = u.split(a, factor=2)
    with pytest.raises(pt.ScheduleError, match="would break a dependence"):
        u.reorder(c, b, ai, ao)
