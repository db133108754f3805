"""Clean-up passes over loop IR, run at the end of lowering.

- ``simplify_stmt``: simplify every expression with the ranges of enclosing
  loops; drop loops of extent 0, unwrap loops of extent 1, fold decided ifs.
- ``guards_to_bounds``: a loop whose whole body is ``if (v < e)`` gets
  ``e`` folded into its extent:

      for (v, 0, 32) { if (io*32 + v < n) S }  ->  for (v, 0, min(32, n - io*32)) S

- ``partition_loops``: an unrolled or vectorized loop of extent
  ``min(c, e)`` gets a copy with the constant extent ``c``, chosen once where
  ``e`` becomes known, so full tiles run with constant trip counts:

      for (io, 0, 171) {                     for (io, 0, 171) {
        for (k, 0, K)                          if (1024 - io*6 >= 6) { ... for (ic, 0, 6) ... }
          unrolled for (ic, 0, min(6, 1024 - io*6))   else { ... for (ic, 0, 1024 - io*6) ... }

- ``unroll``: a loop marked unrolled with a constant extent becomes copies
  of its body, each with the loop variable replaced by a constant.
"""

from __future__ import annotations

from dataclasses import replace

from .expr import Binary, Cmp, Const, Expr, Not, Var, conjunction, skey, substitute, vars_of
from .loop_ir import (
    Allocate,
    For,
    IfThenElse,
    IntrinCall,
    LoweredFunc,
    Prefetch,
    Seq,
    Store,
    seq,
    walk_stmts,
)
from .simplify import FLIP, INF, Lin, Ranges, simplify

MAX_UNROLL = 64


def map_exprs(s, f):
    """Rebuild statement ``s`` with ``f`` applied to each of its expressions."""
    if isinstance(s, Seq):
        return seq(*[map_exprs(x, f) for x in s.stmts])
    if isinstance(s, For):
        return For(s.var, f(s.extent), s.kind, map_exprs(s.body, f))
    if isinstance(s, Store):
        return Store(s.buffer, f(s.index), f(s.value))
    if isinstance(s, Prefetch):
        return Prefetch(s.buffer, f(s.index), s.lines, s.write)
    if isinstance(s, IntrinCall):
        return s.with_indices(f)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, f(s.size), map_exprs(s.body, f))
    if isinstance(s, IfThenElse):
        e = None if s.else_ is None else map_exprs(s.else_, f)
        return IfThenElse(f(s.cond), map_exprs(s.then, f), e)
    raise TypeError(f"unknown statement {type(s).__name__}")


def subst_stmt(s, mapping: dict):
    return map_exprs(s, lambda e: substitute(e, mapping))


def simplify_stmt(s, ranges: dict, facts: dict | None = None):
    """Simplify ``s``; ``facts`` maps conditions of enclosing ifs (by structure) to the
    value they have here, so a repeated test is decided."""
    if s is None:
        return None
    facts = facts or {}
    if isinstance(s, Seq):
        return seq(*[simplify_stmt(x, ranges, facts) for x in s.stmts]) if s.stmts else None
    if isinstance(s, For):
        ext = simplify(s.extent, ranges)
        if isinstance(ext, Const) and ext.value <= 0:
            return None
        if isinstance(ext, Const) and ext.value == 1:
            return simplify_stmt(subst_stmt(s.body, {s.var: Const(0, s.var.dtype)}), ranges, facts)
        body = simplify_stmt(s.body, ranges.child(s.var, ext), facts)
        return None if body is None else For(s.var, ext, s.kind, body)
    if isinstance(s, Store):
        return Store(s.buffer, simplify(s.index, ranges), simplify(s.value, ranges))
    if isinstance(s, Prefetch):
        return Prefetch(s.buffer, simplify(s.index, ranges), s.lines, s.write)
    if isinstance(s, IntrinCall):
        return s.with_indices(lambda e: simplify(e, ranges))
    if isinstance(s, Allocate):
        body = simplify_stmt(s.body, ranges, facts)
        return None if body is None else Allocate(s.buffer, simplify(s.size, ranges), body)
    if isinstance(s, IfThenElse):
        c = simplify(s.cond, ranges)
        known = facts.get(skey(c))
        if known is not None:
            c = Const(known, "bool")
        if isinstance(c, Const):
            return simplify_stmt(s.then if c.value else s.else_, ranges, facts)
        then = simplify_stmt(s.then, ranges, {**facts, skey(c): True})
        els = simplify_stmt(s.else_, ranges, {**facts, skey(c): False})
        if then is None and els is None:
            return None
        if then is None:
            return IfThenElse(Not(c), els)
        return IfThenElse(c, then, els)
    raise TypeError(f"unknown statement {type(s).__name__}")


def _conjuncts(c: Expr):
    if isinstance(c, Binary) and c.op == "and":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _bound_on(cond: Expr, v: Var):
    """If ``cond`` bounds ``v`` from above (``a*v + rest < c``, a > 0, rest free of v,
    or the same with both sides negated), the exclusive bound ``e`` in ``v < e``."""
    if not (isinstance(cond, Cmp) and isinstance(cond.b, Const)):
        return None
    lin = Lin.of(cond.a)
    term = lin.terms.get(("v", id(v)))
    if term is None or cond.op in ("eq", "ne"):
        return None
    op, limit = cond.op, cond.b.value
    if term[1] < 0:  # -a*v + rest >= c  is  a*v - rest <= -c
        lin, limit, op = lin.scale(-1, lin.dtype), -limit, FLIP[op]
    if op not in ("lt", "le"):
        return None
    a = lin.terms[("v", id(v))][1]
    rest = Lin({k: t for k, t in lin.terms.items() if t[0] is not v}, lin.const, "int64")
    if any(v is x for x in vars_of(rest.to_expr())):
        return None
    limit += 1 if op == "le" else 0
    num = Lin({}, limit, "int64").plus(rest, -1, "int64").to_expr()
    if a == 1:
        return num
    return Binary(
        "floordiv", Binary("add", num, Const(a - 1, "int64"), "int64"), Const(a, "int64"), "int64"
    )


def guards_to_bounds(s):
    if s is None:
        return None
    if isinstance(s, Seq):
        return seq(*[guards_to_bounds(x) for x in s.stmts])
    if isinstance(s, For):
        body = guards_to_bounds(s.body)
        ext = s.extent
        if isinstance(body, IfThenElse) and body.else_ is None:
            keep = []
            for c in _conjuncts(body.cond):
                b = _bound_on(c, s.var)
                if b is None:
                    keep.append(c)
                else:
                    ext = Binary("min", ext, b, "int64")
            if len(keep) < len(_conjuncts(body.cond)):
                cond = conjunction(keep)
                body = body.then if cond is None else IfThenElse(cond, body.then)
        return For(s.var, ext, s.kind, body)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, s.size, guards_to_bounds(s.body))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, guards_to_bounds(s.then), guards_to_bounds(s.else_))
    return s


def unroll(s, ranges: dict):
    if s is None:
        return None
    if isinstance(s, Seq):
        return seq(*[unroll(x, ranges) for x in s.stmts])
    if isinstance(s, For):
        body = unroll(s.body, ranges)
        if s.kind == "unrolled" and isinstance(s.extent, Const) and s.extent.value <= MAX_UNROLL:
            copies = [
                simplify_stmt(subst_stmt(body, {s.var: Const(i, s.var.dtype)}), ranges)
                for i in range(s.extent.value)
            ]
            return seq(*copies)
        return For(s.var, s.extent, s.kind, body)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, s.size, unroll(s.body, ranges))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, unroll(s.then, ranges), unroll(s.else_, ranges))
    return s


MAX_PARTITIONS = 3  # nested versions per path: code size grows as 2**n


def _min_const(e):
    """``(c, other)`` if ``e`` is ``min(c, other)`` with a constant ``c``."""
    if isinstance(e, Binary) and e.op == "min":
        if isinstance(e.a, Const):
            return e.a.value, e.b
        if isinstance(e.b, Const):
            return e.b.value, e.a
    return None


def _partition_candidate(s, bound: set):
    for x in walk_stmts(s):
        if not isinstance(x, For):
            continue
        mc = _min_const(x.extent)
        if mc is None or not set(vars_of(mc[1])) <= bound:
            continue
        hot = x.kind in ("unrolled", "vectorized") or any(
            isinstance(y, For) and y.kind in ("unrolled", "vectorized") for y in walk_stmts(x.body)
        )
        if hot:
            return x.extent, mc
    return None


def _replace_extent(s, key, new: Expr):
    def go(x):
        if isinstance(x, Seq):
            return seq(*[go(y) for y in x.stmts])
        if isinstance(x, For):
            ext = new if skey(x.extent) == key else x.extent
            return For(x.var, ext, x.kind, go(x.body))
        if isinstance(x, Allocate):
            return Allocate(x.buffer, x.size, go(x.body))
        if isinstance(x, IfThenElse):
            return IfThenElse(x.cond, go(x.then), None if x.else_ is None else go(x.else_))
        return x

    return go(s)


def partition_loops(s, bound: set, budget: int = MAX_PARTITIONS):
    if s is None:
        return None
    if budget > 0:
        cand = _partition_candidate(s, bound)
        if cand is not None:
            ext, (c, e) = cand
            key = skey(ext)
            full = partition_loops(_replace_extent(s, key, Const(c, "int64")), bound, budget - 1)
            rest = partition_loops(_replace_extent(s, key, e), bound, budget - 1)
            return IfThenElse(Cmp("ge", e, Const(c, "int64")), full, rest)
    if isinstance(s, Seq):
        return seq(*[partition_loops(x, bound, budget) for x in s.stmts])
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, partition_loops(s.body, bound | {s.var}, budget))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, s.size, partition_loops(s.body, bound, budget))
    if isinstance(s, IfThenElse):
        return IfThenElse(
            s.cond, partition_loops(s.then, bound, budget), partition_loops(s.else_, bound, budget)
        )
    return s


def finalize(func: LoweredFunc) -> LoweredFunc:
    ranges = Ranges({v: (0, INF) for v in func.size_vars})
    body = simplify_stmt(func.body, ranges)
    body = simplify_stmt(guards_to_bounds(body), ranges)
    body = simplify_stmt(partition_loops(body, set(func.size_vars)), ranges)
    body = unroll(body, ranges)
    if body is None:
        body = Seq(())
    return replace(func, body=body)
