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

The ``omp simd`` of a vectorized loop misleads it too: where two iterations of an
enclosing loop store the same element and the vectorized loop does not read it there,
gcc vectorizes the enclosing loop as if that dependence did not exist, and an earlier
iteration's value survives (``overwritten_across``)::

    for (a = 0; a < 20; ++a)                 Y[a + b] of a = 0 stored after that
      #pragma omp simd                       of a = 1: Y[1] holds X[1] * 0, not X[1] * 1
      for (b = 0; b < 8; ++b) Y[a + b] = X[a + b] * a;

Such a loop is marked ``#pragma GCC ivdep`` instead: its iterations are independent
(isl proved it), and the enclosing loop keeps its order.

Nor does gcc keep, under a vectorized loop's ``omp simd``, the order of one
iteration's accesses to an element through different indices across a loop inside
(``inner_meet``)::

    #pragma omp simd                         a = 1, c = 1 reads Y[3] as Y[a * 2 + c]
    for (a = 0; a < 2; ++a)                  without c = 0's store to it as Y[a * 3]
      for (c = 0; c < 2; ++c) Y[a * 3] -= Y[a * 2 + c] * Y[c * 2 + a];

Such a loop gets no pragma: the compiler's own dependence test decides it.
"""

from __future__ import annotations

import math

import islpy as isl

from .dtypes import INDEX
from .expr import Binary, Const, Load, Var, substitute, vars_of, walk
from .intervals import Ranges, bounds
from .isl_expr import IslPrinter, NonAffine
from .loop_ir import For, IntrinCall, Store, own_exprs, stmt_children, walk_stmts
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


def overwritten_across(loop: For, enclosing: tuple, sizes) -> bool:
    """Whether vectorized ``loop`` is where gcc 12 lets its ``omp simd`` hide a
    dependence: the only loop in the body of the loop around it (which gcc then
    vectorizes as an outer loop), storing an element that another iteration of that
    loop stores too, without loading it at that index. ``enclosing``: the loops around
    ``loop``, outermost first; ``sizes``: the kernel's size variables."""
    if not enclosing or any(isinstance(x, For) for x in walk_stmts(loop.body)):
        return False
    outer = enclosing[-1]
    if sum(isinstance(x, For) for x in walk_stmts(outer.body)) != 1:
        return False  # gcc vectorizes an outer loop around one inner loop only
    read = {
        (id(y.buffer), skey(y.index))
        for x in walk_stmts(loop.body)
        for e in own_exprs(x)
        for y in walk(e)
        if isinstance(y, Load)
    }
    for st in walk_stmts(loop.body):
        if isinstance(st, Store) and (id(st.buffer), skey(st.index)) not in read:
            if _two_writers(st.index, (*enclosing, loop), len(enclosing) - 1, sizes):
                return True
    return False


def _two_writers(index, loops: tuple, k: int, sizes) -> bool:
    """Whether ``index`` takes one value at two points of ``loops`` that differ in
    loop ``k`` (the loops before it the same; isl; True where it cannot tell)."""
    return _coincide(index, index, loops, k, sizes, differ=True)


def _coincide(a, b, loops: tuple, same: int, sizes, differ: bool = False) -> bool:
    """Whether index ``a`` at a point x of ``loops`` and ``b`` at a point y take one
    value, x and y equal in the first ``same`` loops (and, ``differ``, not in the next
    one); isl, True where it cannot tell."""
    mine = {lp.var for lp in loops}
    params = [v for v in {*sizes} if v not in mine]
    free = {v for lp in loops for v in vars_of(lp.extent)} | set(vars_of(a)) | set(vars_of(b))
    if any(v not in mine and v not in params for v in free):
        return True
    pnames = {v: f"p{n}" for n, v in enumerate(params)}
    sides = [
        IslPrinter({**pnames, **{lp.var: f"{c}{n}" for n, lp in enumerate(loops)}}) for c in "xy"
    ]
    try:
        cons = [f"{sides[0](a)} = {sides[1](b)}"] + [f"x{n} = y{n}" for n in range(same)]
        cons += [f"x{same} != y{same}"] if differ else []
        for pr in sides:
            for lp in loops:
                cons.append(f"0 <= {pr(lp.var)} < {pr(lp.extent)}")
    except NonAffine:
        return True
    xs, ys = (", ".join(f"{c}{n}" for n in range(len(loops))) for c in "xy")
    text = f"[{', '.join(pnames.values())}] -> {{ [{xs}] -> [{ys}] : {' and '.join(cons)} }}"
    return not isl.Map(text).is_empty()


def inner_meet(loop: For, enclosing: tuple, sizes) -> bool:
    """Whether vectorized ``loop`` holds a loop, and one of its iterations may reach an
    element of a buffer it stores through two different indices (a store and a load
    or two stores; isl, with ``enclosing`` and ``loop`` at the same values and the
    loops inside free; True where it cannot tell)."""
    inner = [x for x in walk_stmts(loop.body) if isinstance(x, For)]
    if not inner:
        return False
    stored: dict = {}
    reached: dict = {}  # buffer -> {index key: index}, stores and loads
    for st in walk_stmts(loop.body):
        if isinstance(st, Store):
            stored.setdefault(id(st.buffer), {})[skey(st.index)] = st.index
            reached.setdefault(id(st.buffer), {})[skey(st.index)] = st.index
        for e in own_exprs(st):
            for y in walk(e):
                if isinstance(y, Load):
                    reached.setdefault(id(y.buffer), {})[skey(y.index)] = y.index
    shared = (*enclosing, loop)
    for b, stores in stored.items():
        for ks, a in stores.items():
            for kb, other in reached[b].items():
                if ks != kb and _coincide(a, other, (*shared, *inner), len(shared), sizes):
                    return True
    return False
