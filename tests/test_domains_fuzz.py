"""Property-based fuzzing of non-rectangular domains against a direct interpreter.

Hypothesis draws a program whose loop bounds are affine in outer loops, with offsets
(an update definition over two or three reduce axes, each bounded by the ones before
it), and a random schedule of its update stage (splits, reorders, fuses, skews, parallel
and vectorize; a primitive the legality check refuses is skipped, the schedule unchanged).
The built kernel must match a Python loop nest of the unscheduled program exactly.
A second family: a triangular reduction in a pure stage, computed at a split consumer,
its reduce loop split or moved outside the spatial one.

PYPTO_FUZZ_EXAMPLES sets the number of examples per test (default 25). The examples are
derandomized (the same on every run, no example database), so a failure reproduces.
"""

from __future__ import annotations

import numpy as np
from fuzzing import REPEATABLE as FUZZ
from hypothesis import assume, given
from hypothesis import strategies as st

import pypto as pt

BOUND_CHECKS = True  # every kernel checks its accesses at run time (conftest.py)


# bounds of an axis from the axes before it: (lo, hi) as functions of (outer values, N)
# every choice keeps the axis inside [0, N) whenever its range is not empty
LOWER = {
    "0": lambda o, n: 0,
    "1": lambda o, n: 1,
    "o": lambda o, n: o[-1],
    "o+1": lambda o, n: o[-1] + 1,
}
UPPER = {
    "N": lambda o, n: n,
    "N-1": lambda o, n: n - 1,
    "o+1": lambda o, n: o[-1] + 1,
    "o+2": lambda o, n: _min(o[-1] + 2, n),
    "N-o": lambda o, n: n - o[-1],
}


def _min(a, b):
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else pt.min(a, b)


def _bound(form: str, table: dict, outer: list, n):
    return table[form](outer, n)


@st.composite
def programs(draw):
    depth = draw(st.integers(2, 3), label="depth")
    forms = []
    for d in range(depth):
        lo = draw(st.sampled_from(["0", "1"] if d == 0 else sorted(LOWER)), label=f"lo{d}")
        hi = draw(st.sampled_from(["N", "N-1"] if d == 0 else sorted(UPPER)), label=f"hi{d}")
        forms.append((lo, hi))
    reads = draw(st.sampled_from(["self", "transpose", "inner"]), label="reads")
    size = draw(st.integers(1, 7), label="N")
    symbolic = draw(st.booleans(), label="symbolic")
    return forms, reads, size, symbolic


def _kernel(forms, reads, size, symbolic):
    n = pt.var("n") if symbolic else size
    X = pt.placeholder((n, n), "float64", name="X")
    Y = pt.compute((n, n), lambda i, j: X[i, j], name="Y")
    axes = []
    for d, (lo, hi) in enumerate(forms):
        outer = [a.var for a in axes]
        axes.append(
            pt.reduce_axis(
                (_bound(lo, LOWER, outer, n), _bound(hi, UPPER, outer, n)), name="abc"[d]
            )
        )
    a, b = axes[0], axes[1]
    c = axes[2] if len(axes) == 3 else b
    if reads == "self":
        Y[a, b] = Y[a, b] * 0.5 + X[c, a]
    elif reads == "transpose":
        Y[a, b] = Y[a, b] * 0.5 + Y[b, a] + X[c, b]
    else:
        Y[a, b] = Y[a, b] - Y[a, c] * Y[c, b] * 0.25
    return X, Y, axes


def _interpret(forms, reads, x):
    n = x.shape[0]
    y = x.copy()

    def loops(d, outer):
        if d == len(forms):
            yield outer
            return
        lo, hi = forms[d]
        for v in range(LOWER[lo](outer, n), UPPER[hi](outer, n)):
            yield from loops(d + 1, outer + [v])

    for vals in loops(0, []):
        a, b = vals[0], vals[1]
        c = vals[2] if len(vals) == 3 else b
        if reads == "self":
            y[a, b] = y[a, b] * 0.5 + x[c, a]
        elif reads == "transpose":
            y[a, b] = y[a, b] * 0.5 + y[b, a] + x[c, b]
        else:
            y[a, b] = y[a, b] - y[a, c] * y[c, b] * 0.25
    return y


def _try(log, what, fn, *args, **kw):
    try:
        out = fn(*args, **kw)
    except pt.ScheduleError:
        log.append(f"{what}: refused")
        return None
    log.append(what)
    return out


def _random_schedule(data, u):
    log = []
    for _ in range(data.draw(st.integers(0, 4), label="steps")):
        leaves = list(u.leaf_iter_vars)
        kind = data.draw(
            st.sampled_from(["split", "reorder", "fuse", "skew", "annotate"]), label="op"
        )
        if kind == "split":
            iv = data.draw(st.sampled_from(leaves), label="split_loop")
            f = data.draw(st.integers(2, 3), label="factor")
            _try(log, f"split({iv.name}, {f})", u.split, iv, factor=f)
        elif kind == "reorder":
            order = data.draw(st.permutations(leaves), label="order")
            _try(log, f"reorder({', '.join(v.name for v in order)})", u.reorder, *order)
        elif kind == "fuse" and len(leaves) >= 2:
            k = data.draw(st.integers(0, len(leaves) - 2), label="fuse_at")
            _try(log, f"fuse({leaves[k].name}, {leaves[k + 1].name})", u.fuse, *leaves[k : k + 2])
        elif kind == "skew" and len(leaves) >= 2:
            k = data.draw(st.integers(0, len(leaves) - 2), label="skew_at")
            f = data.draw(st.integers(1, 2), label="skew_factor")
            what = f"skew({leaves[k].name}, {leaves[k + 1].name}, {f})"
            _try(log, what, u.skew, leaves[k], leaves[k + 1], factor=f)
        elif kind == "annotate":
            iv = data.draw(st.sampled_from(leaves), label="annotated")
            how = data.draw(st.sampled_from(["parallel", "vectorize"]), label="how")
            if iv not in u.attrs:
                _try(log, f"{how}({iv.name})", getattr(u, how), iv)
    return log


@FUZZ
@given(prog=programs(), data=st.data())
def test_random_domain_and_schedule_match_the_interpreter(prog, data):
    forms, reads, size, symbolic = prog
    try:
        X, Y, axes = _kernel(forms, reads, size, symbolic)
    except ValueError as e:  # a constant range that is empty is refused when declared
        assert "empty range" in str(e)
        assume(False)
    s = pt.create_schedule(Y.op)
    log = _random_schedule(data, s[Y].update(0))
    x = np.random.default_rng(size).integers(-3, 4, (size, size)).astype(np.float64)
    try:
        mod = pt.build(s, [X, Y])
    except pt.ScheduleError as e:  # split of a loop fused from symbolic extents
        assert "cannot be verified" in str(e), str(e)
        assume(False)
    y = np.full((size, size), np.nan)
    mod(x, y)
    want = _interpret(forms, reads, x)
    np.testing.assert_array_equal(y, want, err_msg=f"{forms} {reads} N={size}: {log}")


@FUZZ
@given(
    size=st.integers(1, 9),
    lo=st.sampled_from(["0", "i"]),
    hi=st.sampled_from(["i+1", "N", "N-i"]),
    factor=st.integers(1, 4),
    split_k=st.booleans(),
    k_outside=st.booleans(),
)
def test_random_triangular_reduction_attached_matches_the_interpreter(
    size, lo, hi, factor, split_k, k_outside
):
    n = size
    A = pt.placeholder((n, n), "float64", name="A")
    lo_f = {"0": lambda i: 0, "i": lambda i: i}[lo]
    hi_f = {"i+1": lambda i: i + 1, "N": lambda i: n, "N-i": lambda i: n - i}[hi]
    ks = []

    def row(i):
        ks.append(pt.reduce_axis((lo_f(i), hi_f(i)), name="k"))
        return pt.sum(A[i, ks[-1]], axis=ks[-1])

    S = pt.compute((n,), row, name="S")
    D = pt.compute((n,), lambda i: S[i] * 2.0, name="D")
    s = pt.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=factor)
    s[S].compute_at(s[D], io)
    k = ks[-1]
    if split_k:
        k, ki = s[S].split(k, factor=2)
    if k_outside:  # the reduce loop outside the spatial one
        s[S].reorder(k, S.op.axis[0])
    a = np.random.default_rng(size).integers(-3, 4, (n, n)).astype(np.float64)
    d = np.full(n, np.nan)
    pt.build(s, [A, D])(a, d)
    want = [2 * sum(a[i, k] for k in range(lo_f(i), hi_f(i))) for i in range(n)]
    np.testing.assert_array_equal(d, want)
