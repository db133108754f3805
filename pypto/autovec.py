"""Loops the C compiler must not vectorize on its own.

gcc 12.2's loop vectorizer (-O3, x86-64-v3 and v4) misjudges the dependence between
a store and a load of one array when the loop body holds several copies of them (an
inner loop it unrolled whole, or one pypto unrolled): it takes the load of a value the
previous iteration stores for a read of the old value, vectorizes, and the results are
silently wrong:

    for (io = 0; io < 3; ++io) {             vectorized over io by gcc: the load of
      B[2 io + 2] = f(A[2 io + 2]);          B[2 io] runs before the previous
      A[2 io + 2] = g(B[2 io]);              iteration's store to it
      B[2 io + 3] = f(A[2 io + 3]);
      A[2 io + 3] = g(B[2 io + 1]);
    }

pypto's vectorized loops carry ``#pragma omp simd`` (their legality is proven by
isl), so the compiler's dependence test never decides them. A serial loop that
stores a buffer at several places and loads it at several, one of which a store of
another iteration may write, with at most short constant loops inside (those the
compiler unrolls whole and vectorizes around), is marked
``#pragma omp simd simdlen(1)``: one iteration at a time. The compiler still
vectorizes the rest: its results were right with one store or one load of the
buffer per iteration (lu's row reductions, adi's sweeps), loads that meet stores
only in the same iteration (``C[i] +=``) or never (``p[20 i + 1]`` from
``p[20 i]``), and loops holding a long loop.
"""

from __future__ import annotations

import math

from .dtypes import INDEX
from .expr import Binary, Const, Load, Var, substitute, vars_of, walk
from .intervals import Ranges, bounds
from .loop_ir import For, IntrinCall, Store, own_exprs, stmt_children
from .simplify import Lin, simplify
from .structural import skey

WHOLE_UNROLL = 16  # gcc's max-completely-peel-times: shorter constant loops vanish
SERIAL = ("serial", "unrolled")


def autovec_hazard(loop: For) -> bool:
    """Whether the compiler could vectorize serial ``loop`` around a dependence it
    misjudges: a buffer stored at several places and loaded at several (unrolled
    copies, or an index that moves with a short inner loop), one load of which may meet
    a store in another iteration (``_may_meet``), and no loop inside but short constant
    ones (the compiler's results were right with one store or one load per buffer)."""
    if loop.kind != "serial":
        return False
    stores: dict = {}  # buffer -> {index key: (index, places)}
    loads: dict = {}
    loops = [loop]
    if not _collect(loop.body, (), stores, loads, loops):
        return False
    ranges = Ranges()
    fresh = {}
    for lp in loops:  # the loops' variables in two iterations
        fresh[lp.var] = Var(lp.var.name + "_other", lp.var.dtype)
        ranges = ranges.child(lp.var, lp.extent).child(fresh[lp.var], lp.extent)
    for b in stores.keys() & loads.keys():
        if _places(stores[b]) < 2 or _places(loads[b]) < 2:
            continue
        for ks, (st, _) in stores[b].items():
            for kl, (ld, _) in loads[b].items():
                if ks != kl and _may_meet(st, substitute(ld, fresh), ranges):
                    return True
    return False


def _collect(s, inner: tuple, stores: dict, loads: dict, loops: list) -> bool:
    """Gather the stores and loads under ``s`` (``inner``: the short loops around it
    inside the loop examined); False where the compiler would not vectorize around
    (a longer loop, a micro-kernel)."""
    if isinstance(s, IntrinCall):
        return False  # a micro-kernel: vectorized by hand
    if isinstance(s, For):
        if not _short(s):
            return False
        loops.append(s)
        return _collect(s.body, (*inner, s), stores, loads, loops)
    if isinstance(s, Store):
        _add(stores, s.buffer, s.index, inner)
    for e in own_exprs(s):
        for y in walk(e):
            if isinstance(y, Load):
                _add(loads, y.buffer, y.index, inner)
    return all(_collect(c, inner, stores, loads, loops) for c in stmt_children(s))


def _add(table: dict, buf, index, inner: tuple):
    """Record ``index``: as many places as the short loops it moves with run."""
    used = {id(v) for v in vars_of(index)}
    n = 1
    for lp in inner:
        n *= lp.extent.value if id(lp.var) in used else 1
    table.setdefault(id(buf), {})[skey(index)] = (index, n)


def _places(table: dict) -> int:
    return sum(n for _, n in table.values())


def _may_meet(a, b, ranges) -> bool:
    """Whether indices ``a`` and ``b`` may be equal: their difference's range holds 0,
    and the gcd of its variables' coefficients divides its constant."""
    diff = simplify(Binary("sub", a, b, INDEX), ranges)
    d = Lin.of(diff)
    coeffs = [c for _, c in d.terms.values()]
    if not all(isinstance(c, int) for c in (*coeffs, d.const)):
        return True
    g = math.gcd(*coeffs)
    if g == 0:  # no variables: the same place only if the difference is 0
        return d.const == 0
    if d.const % g:
        return False
    lo, hi = bounds(diff, ranges)
    return lo <= 0 <= hi


def _short(loop: For) -> bool:
    return (
        loop.kind in SERIAL and isinstance(loop.extent, Const) and loop.extent.value <= WHOLE_UNROLL
    )
