"""Reductions inside update definitions: ``Y[i] = Y[i] + pt.sum(A[i, k] * x[k], axis=k)``.

Each instance of the update computes its reductions into a one-element accumulator
(in ``accumulator_dtype``: float32 for float16/bfloat16), then stores its value, so a
reduction sees the tensor as it is when that instance runs (lu's row updates read
rows earlier instances wrote):

    for i:                                     for i:
      Y[i] = Y[i] + sum(A[i, k] * x[k], k)  ->   acc[0] = 0
                                                 for k: acc[0] = acc[0] + A[i, k] * x[k]
                                                 Y[i] = Y[i] + acc[0]

The reduce axes' bounds may name the update's axes (``k < i``) and reduce axes before
them. For the dependence analysis (``poly``) an instance reads every element its
reductions touch (the reduce axes existentially quantified); the reduction loop itself
is not a loop of the stage's schedule.
"""

from __future__ import annotations

from .dtypes import INDEX, accumulator_dtype
from .expr import Binary, Cast, Const, Expr, Load, Reduce, Var, map_children, substitute
from .intervals import INF, bounds
from .loop_ir import Allocate, Buffer, For, Stmt, Store, seq
from .simplify import simplify


def update_store(low, n, buf: Buffer, idx: Expr, body: Expr) -> Stmt:
    """``buf[idx] = body`` for update stage ``n`` (a ``bounds.StageNest``), each
    reduction in ``body`` computed first into its accumulator. ``low`` is the Lowering."""
    found: list = []

    def take(e):
        if isinstance(e, Reduce):
            name = f"{n.stage.op.target.name}.red{len(found)}"
            acc = Buffer(name, accumulator_dtype(e.dtype), (Const(1, INDEX),), "local")
            found.append((e, acc))
            value = Load(acc, Const(0, INDEX), acc.dtype)
            return value if acc.dtype == e.dtype else Cast(value, e.dtype)
        return map_children(e, take)

    value = take(body)
    out = Store(buf, low.lower_expr(n, idx), low.lower_expr(n, value))
    for red, acc in reversed(found):
        out = Allocate(acc, Const(1, INDEX), seq(*_reduction(low, n, red, acc), out))
    return out


def _reduction(low, n, red: Reduce, acc: Buffer) -> list:
    """``acc[0] = identity (or init=); for k...: acc[0] = combine(acc[0], source)``, the
    loops' counters from 0 and each axis' value ``min + counter`` (mins may name earlier axes)."""
    zero = Const(0, INDEX)
    src = red.source if acc.dtype == red.dtype else Cast(red.source, acc.dtype)
    value = {}
    loops = []
    for iv in red.axes:
        lo = substitute(iv.dom_min, value)
        ext = substitute(iv.extent, value)
        counter = Var(iv.name)
        value[iv.var] = Binary("add", lo, counter, INDEX) if not _is_zero(lo) else counter
        loops.append((counter, ext))
    for counter, ext in loops:
        hi = bounds(low.lower_expr(n, ext), low.ranges)[1]
        low.ranges[counter] = (0, hi - 1 if hi != INF else INF)
    step = Store(
        acc,
        zero,
        red.combiner.combine(Load(acc, zero, acc.dtype), substitute(src, value)),
    )
    body = Store(acc, zero, low.lower_expr(n, step.value))
    for counter, ext in reversed(loops):
        body = For(counter, simplify(low.lower_expr(n, ext), low.ranges), "serial", body)
    if red.init:  # init=: the value the reduction starts from (over the update's axes)
        start = red.init[0] if acc.dtype == red.dtype else Cast(red.init[0], acc.dtype)
        start = low.lower_expr(n, start)
    else:
        start = red.combiner.identity(acc.dtype)
    return [Store(acc, zero, start), body]


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0
