"""Reductions into a storage type (float16, bfloat16) accumulate in float32 (API.md 9).

Lowering gives such a reduction stage a float32 accumulator, one element per point of
the stage's spatial loops inside its outermost reduce loop, initialised, updated, then
stored once with the rounding cast:

    for i:                              for i:
      C[i] = 0                            float C.acc[1]
      for k:                     ->       C.acc[0] = 0
        C[i] = C[i] + A[i, k]             for k: C.acc[0] = C.acc[0] + (float)A[i, k]
                                          C[i] = (half)C.acc[0]

With spatial loops inside the reduction (``reorder(io, jo, ko, ii, ki, ji)``) the
accumulator is their tile (``C.acc[ii * 8 + ji]``). Where those loops have no constant
extent, or are bounded per outer iteration (a polyhedral domain), it is a float32 copy
of the stage's buffer indexed as the buffer is. A user who asked for something else
keeps it: ``cache_write`` (already a float32 stage) or a reduction cast to float32.
"""

from __future__ import annotations

from .dtypes import INDEX, accumulator_dtype
from .expr import Binary, Cast, Const, Expr, Load, Reduce, substitute
from .intervals import INF
from .loop_ir import Allocate, Buffer, Stmt, Store, seq
from .simplify import simplify, upper_bound
from .structural import skey


def needs_accumulator(body) -> bool:
    """Does this reduction body (a ``Reduce``) accumulate in a wider dtype than its own?"""
    return accumulator_dtype(body.dtype) != body.dtype


def accumulated_reduction(low, n, body, buf: Buffer, idx: Expr, init_idx: Expr, p: int) -> Stmt:
    """The statements of reduction stage ``n`` from its first reduce leaf ``p`` inward
    (init, update, store), accumulating in ``accumulator_dtype(body.dtype)``; ``idx`` and
    ``init_idx`` index ``buf`` in the update and the init nests. ``low`` is the Lowering."""
    st = n.stage
    leaves = st.leaf_iter_vars
    later = [q for q in range(p, len(leaves)) if leaves[q].kind == "spatial"]
    acc_dt = accumulator_dtype(body.dtype)
    sizes = _tile_sizes(low, n, [leaves[q] for q in later])
    if sizes is None:  # a float32 twin of the buffer, indexed as the buffer is
        acc = Buffer(f"{st.name}.acc", acc_dt, buf.shape, "local")
        acc_idx, acc_init = idx, init_idx
    else:
        acc = Buffer(f"{st.name}.acc", acc_dt, tuple(Const(s, INDEX) for s in sizes), "local")
        acc_idx = acc_init = _flat_tile([leaves[q].var for q in later], sizes)
    src = low.lower_expr(n, body.source)
    src = src if src.dtype == acc_dt else Cast(src, acc_dt)
    update = Store(acc, acc_idx, body.combiner.combine(Load(acc, acc_idx, acc_dt), src))
    init = Store(acc, acc_init, reduction_start(low, n, body, acc_dt))
    out = Store(buf, init_idx, Cast(Load(acc, acc_init, acc_dt), body.dtype))
    stmts = seq(
        low.loop_nest(n, later, init, with_reduce=False, attached=False),
        low.loop_nest(n, range(p, len(leaves)), update, with_reduce=True, attached=True),
        low.loop_nest(n, later, out, with_reduce=False, attached=False),
    )
    size: Expr = Const(1, INDEX)
    for d in acc.shape:
        size = Binary("mul", size, d, INDEX)
    return Allocate(acc, simplify(size), stmts)


def reduction_start(low, n, body: Reduce, dtype: str) -> Expr:
    """The value a reduction's accumulator starts from, in its init nest: the reducer's
    identity, or ``init=`` (TVM's) read at the init nest's output point."""
    if not body.init:
        return body.combiner.identity(dtype)
    e = substitute(body.init[0], {iv.var: v for iv, v in n.init_value.items()})
    e = low.lower_expr(n, e, placed=True)  # init_value is the point already
    return e if e.dtype == dtype else Cast(e, dtype)


def _tile_sizes(low, n, inner) -> list | None:
    """Constant extents of the spatial loops inside the reduction, or None where one has
    none or where loops bounded per outer iteration (a polyhedral domain) made the
    leaves mean different output points in the init and the update nests."""
    spatial = [iv for iv in n.stage.root_iter_vars if iv.kind == "spatial"]
    if inner and any(skey(n.init_value[r]) != skey(n.root_value[r]) for r in spatial):
        return None
    sizes = []
    for iv in inner:
        hi = max(upper_bound(n.box_ext[iv], low.ranges), upper_bound(n.leaf_ext[iv], low.ranges))
        if hi == INF:
            return None
        sizes.append(max(int(hi), 1))
    return sizes


def _flat_tile(vars_, sizes) -> Expr:
    out: Expr = Const(0, INDEX)
    for v, s in zip(vars_, sizes):
        out = Binary("add", Binary("mul", out, Const(s, INDEX), INDEX), v, INDEX)
    return simplify(out)
