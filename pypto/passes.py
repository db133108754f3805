"""Clean-up passes over loop IR, run at the end of lowering (``finalize`` runs the
list ``PIPELINE`` in order). Each pass is a ``loop_ir.StmtMutator`` that overrides
only the statement kinds it is about.

- ``simplify_stmt``: simplify every expression with the ranges of enclosing
  loops; drop loops of extent 0, unwrap loops of extent 1, fold decided ifs.
- ``guards_to_bounds``: a loop whose whole body is ``if (v < e)`` gets
  ``e`` folded into its extent, and ``if (v >= e)`` starts its counter at ``e``:

      for (v, 0, 32) { if (io*32 + v < n) S }  ->  for (v, 0, min(32, n - io*32)) S
      for (v, 0, 32) { if (v - 2*t >= 0) S(v) }  ->  for (v, 0, 32 - max(0, 2*t))
                                                       S(v + max(0, 2*t))

- ``index_sets`` (``pypto/index_sets.py``): a vectorized loop, or a serial loop around
  one, cut where the floor divisions and moduli of its vector code change value, so
  they vanish in each piece.
- ``partition_loops``: an unrolled or vectorized loop of extent
  ``min(c, e)`` gets a copy with the constant extent ``c``, chosen once where
  ``e`` becomes known, so full tiles run with constant trip counts:

      for (io, 0, 171) {                     for (io, 0, 171) {
        for (k, 0, K)                          if (1024 - io*6 >= 6) { ... for (ic, 0, 6) ... }
          unrolled for (ic, 0, min(6, 1024 - io*6))   else { ... for (ic, 0, 1024 - io*6) ... }

- ``unroll``: a loop marked unrolled with a constant extent becomes copies
  of its body, each with the loop variable replaced by a constant (and only what
  mentions it simplified again: Winograd's 4 x 4 tiles lowered in 0.45 s, not 0.75).
- ``promote_accumulators`` (``pypto/promote.py``): an element a serial loop
  keeps updating is held in a local scalar for the loop's duration.
- ``hoist_checks`` (``pypto/hoist.py``): a run-time checked index a loop does not
  change is computed once before it.
- ``name_rows`` (``pypto/hoist.py``): the start of the row an innermost loop's indices
  share is named once before it (``B[row + j + 12] = A[row + j + 11]``).
"""

from __future__ import annotations

from dataclasses import replace

from .dtypes import INDEX
from .expr import (
    FLIP,
    Binary,
    Cmp,
    Const,
    Expr,
    Not,
    Var,
    children,
    conjunction,
    substitute,
    vars_of,
)
from .hoist import hoist_checks, name_rows
from .index_sets import split_index_sets
from .intervals import INF, Ranges, bounds
from .loop_ir import (
    ExprMapper,
    For,
    IfThenElse,
    Let,
    LoweredFunc,
    Seq,
    StmtMutator,
    seq,
    walk_stmts,
)
from .promote import promote_accumulators
from .simplify import Lin, Simplifier, simplify
from .structural import skey

MAX_UNROLL = 64


def map_exprs(s, f):
    """Rebuild statement ``s`` with ``f`` applied to each of its expressions."""
    return ExprMapper(f)(s)


def subst_stmt(s, mapping: dict):
    return map_exprs(s, lambda e: substitute(e, mapping))


class _Simplify(StmtMutator):
    """Every expression simplified with the ranges of the enclosing loops; ``facts`` maps
    conditions of enclosing ifs (by structure) to the value they have here."""

    def __init__(self, ranges, facts: dict):
        self.ranges, self.facts = ranges, facts

    def expr(self, e: Expr) -> Expr:
        return simplify(e, self.ranges)

    def child(self, ranges, facts: dict):
        """The pass inside a loop, a let or a branch (``ranges``, ``facts`` there)."""
        return _Simplify(ranges, facts)

    def mutate_seq(self, s: Seq):
        return super().mutate_seq(s) if s.stmts else None

    def mutate_for_(self, s: For):
        ext = self.expr(s.extent)
        if isinstance(ext, Const) and ext.value <= 0:
            return None
        if isinstance(ext, Const) and ext.value == 1:
            return self.visit(subst_stmt(s.body, {s.var: Const(0, s.var.dtype)}))
        body = self.child(self.ranges.child(s.var, ext), self.facts).visit(s.body)
        return None if body is None else For(s.var, ext, s.kind, body)

    def mutate_let(self, s: Let):
        value = self.expr(s.value)
        if isinstance(value, (Const, Var)):  # nothing to compute once
            return self.visit(subst_stmt(s.body, {s.var: value}))
        inner = Ranges(self.ranges, extents=self.ranges.extents)
        inner[s.var] = bounds(value, self.ranges)
        body = self.child(inner, self.facts).visit(s.body)
        return None if body is None else Let(s.var, value, body)

    def mutate_if_(self, s: IfThenElse):
        c = self.expr(s.cond)
        known = self.facts.get(skey(c))
        if known is not None:
            c = Const(known, "bool")
        if isinstance(c, Const):
            return self.visit(s.then if c.value else s.else_)
        neg = [Cmp(_NEGATE[c.op], c.a, c.b, c.dtype)] if isinstance(c, Cmp) else []
        then, els = (
            self.branch(conds, {**self.facts, skey(c): holds}, body)
            for conds, holds, body in ((_conjuncts(c), True, s.then), (neg, False, s.else_))
        )
        if then is None and els is None:
            return None
        if then is None:
            return IfThenElse(Not(c), els)
        return IfThenElse(c, then, els)

    def branch(self, conds: list, facts: dict, body):
        """``body`` simplified where ``conds`` hold; a variable they leave one value is
        that constant there."""
        if body is None:
            return None
        ranges = self.narrowed(conds)
        fixed = {
            v: Const(lo, v.dtype)
            for v, (lo, hi) in ranges.items()
            if lo == hi and lo != INF and self.ranges.get(v) != (lo, hi)
        }
        return self.child(ranges, facts).visit(subst_stmt(body, fixed) if fixed else body)

    def narrowed(self, conds: list) -> Ranges:
        """The ranges where ``conds`` hold: an integer variable compared with constants
        alone (``x_outer * 32 <= 24``) gets its bound (``x_outer <= 0``), so the
        branch's bounds and extents fold (a partial tile's trip count becomes a
        constant)."""
        out = self.ranges
        for c in conds:
            found = _var_bound(c) if isinstance(c, Cmp) and c.a.dtype == INDEX else None
            if found is None or found[0] not in out:
                continue
            v, lo, hi = found
            lo, hi = max(lo, out[v][0]), min(hi, out[v][1])
            if lo > hi:  # a branch that never runs: left to the other rules
                continue
            if out is self.ranges:
                out = Ranges(self.ranges, extents=self.ranges.extents)
            out[v] = (lo, hi)
        return out


def _var_bound(c: Cmp):
    """``(v, lo, hi)`` when ``c`` is ``a*v + r OP k`` of constants ``a != 0``, ``r``, ``k``
    (the integers v it admits: ``lo <= v <= hi``, either may be infinite), else None."""
    if not isinstance(c.b, Const) or c.op in ("eq", "ne"):
        return None
    lin = Lin.of(c.a)
    if len(lin.terms) != 1:
        return None
    ((v, a),) = lin.terms.values()
    if not isinstance(v, Var) or not isinstance(a, int) or a == 0:
        return None
    t = c.b.value - lin.const  # a*v OP t
    if c.op in ("lt", "le"):  # a*v <= u
        u = t - 1 if c.op == "lt" else t
        return (v, -INF, u // a) if a > 0 else (v, -((-u) // a), INF)
    u = t + 1 if c.op == "gt" else t  # a*v >= u
    return (v, -((-u) // a), INF) if a > 0 else (v, -INF, u // a)


_NEGATE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def simplify_stmt(s, ranges: dict, facts: dict | None = None):
    """Simplify ``s``; drop loops of extent 0, unwrap loops of extent 1, fold decided ifs
    (``facts``: conditions of enclosing ifs, by structure, and their value here)."""
    return _Simplify(ranges, facts or {}).visit(s)


def _conjuncts(c: Expr):
    if isinstance(c, Binary) and c.op == "and":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _bound_on(cond: Expr, v: Var):
    """If ``cond`` bounds ``v`` (``a*v + rest < c``, rest free of v, or any comparison
    that says so), ``("upper", e)`` for ``v < e``, or ``("lower", e)`` for ``v >= e``
    when ``a`` is 1; else None."""
    if not (isinstance(cond, Cmp) and isinstance(cond.b, Const)):
        return None
    lin = Lin.of(cond.a)
    term = lin.terms.get(("v", id(v)))
    if term is None or cond.op in ("eq", "ne"):
        return None
    op, limit = cond.op, cond.b.value
    if term[1] < 0:  # -a*v + rest >= c  is  a*v - rest <= -c
        lin, limit, op = lin.scale(-1, lin.dtype), -limit, FLIP[op]
    a = lin.terms[("v", id(v))][1]
    rest = Lin({k: t for k, t in lin.terms.items() if t[0] is not v}, lin.const, INDEX)
    if any(v is x for x in vars_of(rest.to_expr())):
        return None
    limit += 1 if op in ("le", "gt") else 0  # v < e, or v >= e
    num = Lin({}, limit, INDEX).plus(rest, -1, INDEX).to_expr()
    if op in ("gt", "ge"):
        return ("lower", num) if a == 1 else None
    if a == 1:
        return "upper", num
    return "upper", Binary(
        "floordiv", Binary("add", num, Const(a - 1, INDEX), INDEX), Const(a, INDEX), INDEX
    )


class _GuardsToBounds(StmtMutator):
    def mutate_for_(self, s: For):
        body = self.visit(s.body)
        ext, lows = s.extent, []
        if isinstance(body, IfThenElse) and body.else_ is None:
            keep = []
            for c in _conjuncts(body.cond):
                b = _bound_on(c, s.var)
                if b is None:
                    keep.append(c)
                elif b[0] == "upper":
                    ext = Binary("min", ext, b[1], INDEX)
                else:
                    lows.append(b[1])
            if len(keep) < len(_conjuncts(body.cond)):
                cond = conjunction(keep)
                body = body.then if cond is None else IfThenElse(cond, body.then)
        if lows:  # the counter starts at the largest lower bound: v = v' + lo
            lo = None
            for e in _undominated([Const(0, INDEX), *lows]):
                lo = e if lo is None else Binary("max", lo, e, INDEX)
            body = subst_stmt(body, {s.var: Binary("add", s.var, lo, INDEX)})
            ext = Binary("sub", ext, lo, INDEX)
        return For(s.var, ext, s.kind, body)


def _undominated(bounds: list) -> list:
    """The lower bounds that another one, by a constant, does not exceed or equal
    (``max(0, x, x + 1)`` is ``max(0, x + 1)``)."""
    out: list = []
    for e in bounds:
        lin = Lin.of(e)
        diffs = [lin.plus(Lin.of(k), -1, INDEX) for k in out]
        if any(not d.terms and d.const <= 0 for d in diffs):
            continue  # another bound is at least as large
        out = [k for k, d in zip(out, diffs) if d.terms or d.const < 0] + [e]
    return out


def guards_to_bounds(s):
    return _GuardsToBounds()(s)


class _Instantiate(_Simplify):
    """``simplify_stmt(subst_stmt(s, {var: value}))`` of a statement already simplified:
    only what mentions ``var`` changes, so only that is simplified again (a loop, a let
    or an if whose header mentions it, whose structure may change, the old way, whole).
    An unrolled copy of a nest with unrolled loops inside took most of lowering's time
    re-simplifying the inner copies' every expression."""

    def __init__(self, ranges, facts: dict, var: Var, value: Const, seen: dict):
        super().__init__(ranges, facts)
        self.var, self.value, self.seen = var, value, seen  # id(e) -> (e, mentions var)

    def mentions(self, e: Expr) -> bool:
        """Whether ``e`` mentions the variable; every sub-expression is marked too."""
        known = self.seen.get(id(e))
        if known is not None and known[0] is e:
            return known[1]
        if type(e) is Var or type(e) is Const:
            found = e is self.var
        else:
            found = False
            for c in children(e):
                found = self.mentions(c) or found
        self.seen[id(e)] = (e, found)  # e kept too: its id is not reused meanwhile
        return found

    def expr(self, e: Expr) -> Expr:
        if self.mentions(e):
            return _Settled(self.ranges, self.seen)(substitute(e, {self.var: self.value}))
        return e

    def child(self, ranges, facts: dict):
        return _Instantiate(ranges, facts, self.var, self.value, self.seen)

    def whole(self, s):
        return _Simplify(self.ranges, self.facts).visit(subst_stmt(s, {self.var: self.value}))

    def mutate_for_(self, s: For):
        return self.whole(s) if self.mentions(s.extent) else super().mutate_for_(s)

    def mutate_let(self, s: Let):
        return self.whole(s) if self.mentions(s.value) else super().mutate_let(s)

    def mutate_if_(self, s: IfThenElse):
        return self.whole(s) if self.mentions(s.cond) else super().mutate_if_(s)


class _Settled(Simplifier):
    """A simplifier that takes the parts of an already simplified expression that a
    substitution left alone (``seen``: id -> (part, changed)) as they are."""

    def __init__(self, ranges, seen: dict):
        super().__init__(ranges)
        self.seen = seen

    def __call__(self, e: Expr) -> Expr:
        known = self.seen.get(id(e))
        if known is not None and known[0] is e and not known[1]:
            return e
        return super().__call__(e)


class _Unroll(StmtMutator):
    def __init__(self, ranges):
        self.ranges = ranges

    def mutate_for_(self, s: For):
        body = self.visit(s.body)
        if s.kind == "unrolled" and isinstance(s.extent, Const) and s.extent.value <= MAX_UNROLL:
            seen: dict = {}  # the copies share the body's expressions
            copies = [
                _Instantiate(self.ranges, {}, s.var, Const(i, s.var.dtype), seen).visit(body)
                for i in range(s.extent.value)
            ]
            return seq(*copies)
        return For(s.var, s.extent, s.kind, body)


def unroll(s, ranges: dict):
    return _Unroll(ranges)(s)


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


class _ReplaceExtent(StmtMutator):
    """Every loop whose extent is ``key`` (by structure) gets extent ``new``."""

    def __init__(self, key, new: Expr):
        self.key, self.new = key, new

    def mutate_for_(self, s: For):
        ext = self.new if skey(s.extent) == self.key else s.extent
        return For(s.var, ext, s.kind, self.visit(s.body))


def _replace_extent(s, key, new: Expr):
    return _ReplaceExtent(key, new)(s)


class _PartitionLoops(StmtMutator):
    def __init__(self, bound: set, budget: int):
        self.bound, self.budget = bound, budget

    def visit(self, s):
        if s is not None and self.budget > 0:
            cand = _partition_candidate(s, self.bound)
            if cand is not None:
                ext, (c, e) = cand
                key = skey(ext)
                inner = _PartitionLoops(self.bound, self.budget - 1)
                full = inner(_replace_extent(s, key, Const(c, INDEX)))
                rest = inner(_replace_extent(s, key, e))
                return IfThenElse(Cmp("ge", e, Const(c, INDEX)), full, rest)
        return super().visit(s)

    def mutate_for_(self, s: For):
        body = _PartitionLoops(self.bound | {s.var}, self.budget)(s.body)
        return For(s.var, s.extent, s.kind, body)


def partition_loops(s, bound: set, budget: int = MAX_PARTITIONS):
    return _PartitionLoops(bound, budget)(s)


# the clean-up pipeline, in order: each a function of (statement, ranges, size variables)
PIPELINE = (
    ("simplify", lambda s, ranges, sizes: simplify_stmt(s, ranges)),
    ("guards_to_bounds", lambda s, ranges, sizes: simplify_stmt(guards_to_bounds(s), ranges)),
    ("index_sets", lambda s, ranges, sizes: simplify_stmt(split_index_sets(s), ranges)),
    (
        "partition_loops",
        lambda s, ranges, sizes: simplify_stmt(partition_loops(s, set(sizes)), ranges),
    ),
    ("unroll", lambda s, ranges, sizes: unroll(s, ranges)),
    ("promote_accumulators", lambda s, ranges, sizes: promote_accumulators(s)),
    ("hoist_checks", lambda s, ranges, sizes: hoist_checks(s)),
    ("name_rows", lambda s, ranges, sizes: name_rows(s)),
)


# the passes that keep the scheduled loops (before any copies): what the cost model reads
SCHEDULED = PIPELINE[: [name for name, _ in PIPELINE].index("unroll")]


def finalize(func: LoweredFunc, pipeline=PIPELINE) -> LoweredFunc:
    """``func`` with its body through every pass of ``pipeline``."""
    ranges = Ranges({v: (0, INF) for v in func.size_vars})
    body = func.body
    for _name, run in pipeline:
        body = run(body, ranges, func.size_vars)
    if body is None:
        body = Seq(())
    return replace(func, body=body)
