"""Simplification of index arithmetic: linear canonical forms and interval bounds.

Integer expressions built from ``+ - *`` by constants are brought to a sum of
``coeff * atom`` terms (largest stride first), so ``(io*32 + ii)*1024 + k``
prints as ``io*32768 + ii*1024 + k``. Floor division and modulo by a
constant use the known ranges of loop variables to vanish where they can:

    (io*32 + ii) // 32  ->  io          when 0 <= ii < 32
    (io*32 + ii) % 32   ->  ii
"""

from __future__ import annotations

import math
import operator

from . import dtypes
from .expr import (
    Binary,
    Cast,
    Cmp,
    Const,
    Expr,
    Not,
    Select,
    Var,
    map_children,
    skey,
)

INF = math.inf


class Ranges(dict):
    """Var -> inclusive (lo, hi) python numbers (+-inf when unknown); ``extents``
    holds the symbolic extent of loop variables whose bound is not a number."""

    def __init__(self, *a, extents=None, **kw):
        super().__init__(*a, **kw)
        self.extents = dict(extents or {})

    def child(self, var=None, extent=None) -> Ranges:
        """A copy with ``var`` ranging over ``[0, extent)``."""
        r = Ranges(self, extents=self.extents)
        if var is not None:
            hi = bounds(extent, self)[1]
            r[var] = (0, hi - 1 if hi != INF else INF)
            if hi == INF:
                r.extents[var] = extent
        return r


def _is_int(e: Expr) -> bool:
    return dtypes.dtype(e.dtype).is_int


# ---------------------------------------------------------------- linear forms


class Lin:
    """``sum(coeff * atom) + const`` over integer atoms (keyed structurally)."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, terms=None, const=0, dtype="int64"):
        self.terms = terms or {}  # key -> [atom, coeff]
        self.const = const
        self.dtype = dtype

    @staticmethod
    def of(e: Expr) -> Lin:
        if isinstance(e, Const):
            return Lin({}, e.value, e.dtype)
        if isinstance(e, Binary) and e.op in ("add", "sub"):
            a, b = Lin.of(e.a), Lin.of(e.b)
            return a.plus(b, 1 if e.op == "add" else -1, e.dtype)
        if isinstance(e, Binary) and e.op == "mul":
            a, b = Lin.of(e.a), Lin.of(e.b)
            if not b.terms:
                return a.scale(b.const, e.dtype)
            if not a.terms:
                return b.scale(a.const, e.dtype)
        return Lin({skey(e): [e, 1]}, 0, e.dtype)

    def plus(self, o: Lin, sign: int, dtype: str) -> Lin:
        terms = {k: [a, c] for k, (a, c) in self.terms.items()}
        for k, (a, c) in o.terms.items():
            if k in terms:
                terms[k][1] += sign * c
            else:
                terms[k] = [a, sign * c]
        return Lin(
            {k: v for k, v in terms.items() if v[1] != 0}, self.const + sign * o.const, dtype
        )

    def scale(self, s: int, dtype: str) -> Lin:
        if s == 0:
            return Lin({}, 0, dtype)
        return Lin({k: [a, c * s] for k, (a, c) in self.terms.items()}, self.const * s, dtype)

    def to_expr(self) -> Expr:
        dt = self.dtype
        items = sorted(self.terms.values(), key=lambda ac: (ac[1] < 0, -abs(ac[1])))
        out = None
        if items and items[0][1] < 0 and self.const > 0:  # 1024 - i*6, not 0 - i*6 + 1024
            out, self_const = Const(self.const, dt), 0
        else:
            self_const = self.const
        for atom, c in items:
            mag = abs(c)
            t = atom if mag == 1 else Binary("mul", atom, Const(mag, dt), dt)
            if out is None:
                out = t if c > 0 else Binary("sub", Const(0, dt), t, dt)
            else:
                out = Binary("add" if c > 0 else "sub", out, t, dt)
        if out is None:
            return Const(self.const, dt)
        if self_const:
            out = Binary("add" if self_const > 0 else "sub", out, Const(abs(self_const), dt), dt)
        return out


# ---------------------------------------------------------------- bounds


def bounds(e: Expr, ranges: Ranges) -> tuple:
    """Inclusive (lo, hi) of an integer expression; +-inf where unknown."""
    if isinstance(e, Const):
        return (e.value, e.value)
    if isinstance(e, Var):
        return ranges.get(e, (-INF, INF))
    if isinstance(e, Binary):
        rule = _BOUND_RULES.get(e.op)
        if rule is not None:
            return rule(e, ranges)
    if isinstance(e, Select):
        (a, b), (c, d) = bounds(e.t, ranges), bounds(e.f, ranges)
        return (min(a, c), max(b, d))
    if isinstance(e, Cast) and _is_int(e.value):
        return bounds(e.value, ranges)
    d = dtypes.dtype(e.dtype)
    if d.kind == "uint" or d.kind == "bool":
        return (0, INF)
    return (-INF, INF)


def _b_add(e, r):
    (a, b), (c, d) = bounds(e.a, r), bounds(e.b, r)
    return (a + c, b + d)


def _b_sub(e, r):
    (a, b), (c, d) = bounds(e.a, r), bounds(e.b, r)
    return (a - d, b - c)


def _mul(x, y):
    if x == 0 or y == 0:
        return 0
    return x * y


def _b_mul(e, r):
    (a, b), (c, d) = bounds(e.a, r), bounds(e.b, r)
    ps = [_mul(a, c), _mul(a, d), _mul(b, c), _mul(b, d)]
    return (min(ps), max(ps))


def _b_floordiv(e, r):
    (a, b), (c, d) = bounds(e.a, r), bounds(e.b, r)
    if c == d and c > 0:
        return (a if a == -INF else a // c, b if b == INF else b // c)
    if c > 0 and a >= 0:
        return (0, b)
    return (-INF, INF)


def _b_mod(e, r):
    (a, b), (c, d) = bounds(e.a, r), bounds(e.b, r)
    if c == d and c > 0:
        if a >= 0 and b < c:
            return (a, b)
        return (0, c - 1)
    if c > 0:
        return (0, d - 1)
    return (-INF, INF)


def _b_min(e, r):
    (a, b), (c, d) = bounds(e.a, r), bounds(e.b, r)
    return (min(a, c), min(b, d))


def _b_max(e, r):
    (a, b), (c, d) = bounds(e.a, r), bounds(e.b, r)
    return (max(a, c), max(b, d))


_BOUND_RULES = {
    "add": _b_add,
    "sub": _b_sub,
    "mul": _b_mul,
    "floordiv": _b_floordiv,
    "mod": _b_mod,
    "min": _b_min,
    "max": _b_max,
}


# ---------------------------------------------------------------- simplification

_FOLD = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "min": min,
    "max": max,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
}


def _fold_binary(op, a, b, dt):
    if op in _FOLD:
        return _FOLD[op](a, b)
    if op == "div":
        return a / b if b != 0 else None
    if op == "floordiv":
        if b == 0:
            return None
        return a // b if not isinstance(a, float) else math.floor(a / b)
    if op == "mod":
        return (a % b) if b != 0 else None
    if op == "and":
        return int(bool(a) and bool(b))
    if op == "or":
        return int(bool(a) or bool(b))
    return None


def _const(v, dt):
    if dtypes.dtype(dt).is_float:
        return Const(float(v), dt)
    return Const(int(v), dt)


class Simplifier:
    def __init__(self, ranges: Ranges | None = None):
        self.ranges = ranges or {}
        self.rules = {
            Binary: self.binary,
            Cmp: self.cmp,
            Select: self.select,
            Not: self.not_,
            Cast: self.cast,
        }

    def __call__(self, e: Expr) -> Expr:
        e = map_children(e, self)
        rule = self.rules.get(type(e))
        return rule(e) if rule else e

    def bounds(self, e):
        lo, hi = bounds(e, self.ranges)
        extents = getattr(self.ranges, "extents", None)
        if extents and (lo == -INF or hi == INF):
            slo, shi = self.symbolic_bounds(Lin.of(e), extents)
            lo, hi = max(lo, slo), min(hi, shi)
        return lo, hi

    def symbolic_bounds(self, lin: Lin, extents: dict) -> tuple:
        """Bounds found by putting loop variables at 0 or ``extent - 1`` symbolically,
        so that ``n - i`` is at least 1 inside ``for (i, 0, n)``."""
        out = []
        for want_low in (True, False):
            acc = Lin({}, lin.const, lin.dtype)
            for atom, c in lin.terms.values():
                ext = extents.get(atom) if isinstance(atom, Var) else None
                if ext is not None and (c > 0) != want_low:
                    acc = acc.plus(Lin.of(ext).scale(c, lin.dtype), 1, lin.dtype)
                    acc = acc.plus(Lin({}, -c, lin.dtype), 1, lin.dtype)
                elif ext is None:
                    acc = acc.plus(Lin({skey(atom): [atom, c]}, 0, lin.dtype), 1, lin.dtype)
            b = bounds(acc.to_expr(), self.ranges)
            out.append(b[0] if want_low else b[1])
        return tuple(out)

    def binary(self, e: Binary) -> Expr:
        a, b, op, dt = e.a, e.b, e.op, e.dtype
        if isinstance(a, Const) and isinstance(b, Const):
            v = _fold_binary(op, a.value, b.value, dt)
            if v is not None:
                return _const(v, dt) if dt != "bool" else Const(int(v), "bool")
        if op in ("and", "or"):
            return self.logic(op, a, b)
        if not _is_int(e):
            return self.float_identity(e)
        if op in ("add", "sub", "mul"):
            return self.linear(Lin.of(e))
        if op == "floordiv" and isinstance(b, Const) and b.value > 0:
            return self.divmod_(a, b.value, dt, want_div=True)
        if op == "mod" and isinstance(b, Const) and b.value > 0:
            return self.divmod_(a, b.value, dt, want_div=False)
        if op in ("min", "max"):
            lo, hi = self.bounds(Lin.of(a).plus(Lin.of(b), -1, dt).to_expr())
            if hi <= 0:
                return a if op == "min" else b
            if lo >= 0:
                return b if op == "min" else a
        return e

    def linear(self, lin: Lin) -> Expr:
        """Rebuild a linear form; ``min(x, y) + r`` becomes ``min(x + r, y + r)``
        when that makes a side constant (``min(i*8 + 7, n - 1) - i*8 + 1 -> min(8, n - i*8)``)."""
        mm = [
            (k, a, c)
            for k, (a, c) in lin.terms.items()
            if isinstance(a, Binary) and a.op in ("min", "max") and c in (1, -1)
        ]
        if len(mm) == 1 and (len(lin.terms) > 1 or lin.const):
            k, atom, c = mm[0]
            rest = Lin({kk: v for kk, v in lin.terms.items() if kk != k}, lin.const, lin.dtype)
            op = atom.op if c == 1 else ("max" if atom.op == "min" else "min")
            sides = [
                Lin.of(atom.a).scale(c, lin.dtype).plus(rest, 1, lin.dtype),
                Lin.of(atom.b).scale(c, lin.dtype).plus(rest, 1, lin.dtype),
            ]
            if any(not s.terms for s in sides):
                return self.binary(
                    Binary(op, self.linear(sides[0]), self.linear(sides[1]), lin.dtype)
                )
        return lin.to_expr()

    def float_identity(self, e: Binary) -> Expr:
        if e.op == "mul" and isinstance(e.b, Const) and e.b.value == 1:
            return e.a
        if e.op == "mul" and isinstance(e.a, Const) and e.a.value == 1:
            return e.b
        if e.op == "div" and isinstance(e.b, Const) and e.b.value == 1:
            return e.a
        return e

    def divmod_(self, a: Expr, c: int, dt: str, want_div: bool) -> Expr:
        if c == 1:
            return a if want_div else Const(0, dt)
        if (
            isinstance(a, Binary)
            and a.op == "floordiv"
            and want_div
            and isinstance(a.b, Const)
            and a.b.value > 0
        ):
            return self.divmod_(a.a, a.b.value * c, dt, want_div)
        lin = Lin.of(a)
        q = Lin({}, lin.const // c, dt)
        r = Lin({}, lin.const % c, dt)
        for k, (atom, coeff) in lin.terms.items():
            if coeff % c == 0:
                q.terms[k] = [atom, coeff // c]
            else:
                r.terms[k] = [atom, coeff]
        rexpr = r.to_expr()
        lo, hi = self.bounds(rexpr)
        if lo >= 0 and hi < c:
            return q.to_expr() if want_div else rexpr
        if lo != -INF and hi != INF and lo // c == hi // c:
            k = lo // c
            if want_div:
                return q.plus(Lin({}, k, dt), 1, dt).to_expr()
            return r.plus(Lin({}, k * c, dt), -1, dt).to_expr()
        if want_div:
            if not q.terms and q.const == 0:
                return Binary("floordiv", rexpr, Const(c, dt), dt)
            return q.plus(Lin.of(Binary("floordiv", rexpr, Const(c, dt), dt)), 1, dt).to_expr()
        return Binary("mod", rexpr, Const(c, dt), dt)

    def logic(self, op, a, b):
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Const):
                if op == "and":
                    return y if x.value else Const(0, "bool")
                return Const(1, "bool") if x.value else y
        return Binary(op, a, b, "bool")

    def cmp(self, e: Cmp) -> Expr:
        a, b = e.a, e.b
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(int(_FOLD[e.op](a.value, b.value)), "bool")
        if _is_int(a) and _is_int(b):
            diff = Lin.of(a).plus(Lin.of(b), -1, "int64")
            lo, hi = self.bounds(diff.to_expr())
            truth = _CMP_PROOF[e.op](lo, hi)
            if truth is not None:
                return Const(int(truth), "bool")
            # keep comparisons in the canonical form: terms on the left
            rhs = -diff.const
            diff.const = 0
            op = e.op
            if diff.terms and all(c < 0 for _, c in diff.terms.values()):
                diff, rhs, op = diff.scale(-1, diff.dtype), -rhs, FLIP[op]
            return Cmp(op, diff.to_expr(), Const(rhs, diff.dtype))
        return e

    def select(self, e: Select) -> Expr:
        if isinstance(e.cond, Const):
            return e.t if e.cond.value else e.f
        return e

    def not_(self, e: Not) -> Expr:
        if isinstance(e.a, Const):
            return Const(int(not e.a.value), "bool")
        return e

    def cast(self, e: Cast) -> Expr:
        v = e.value
        if isinstance(v, Const) and dtypes.dtype(e.dtype).kind != "bool":
            if dtypes.dtype(e.dtype).is_float or not isinstance(v.value, float):
                return _const(v.value, e.dtype)
        if v.dtype == e.dtype:
            return v
        return e


FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}

# (lo, hi) of a - b  ->  True/False when the comparison is decided, else None
_CMP_PROOF = {
    "lt": lambda lo, hi: True if hi < 0 else (False if lo >= 0 else None),
    "le": lambda lo, hi: True if hi <= 0 else (False if lo > 0 else None),
    "gt": lambda lo, hi: True if lo > 0 else (False if hi <= 0 else None),
    "ge": lambda lo, hi: True if lo >= 0 else (False if hi < 0 else None),
    "eq": lambda lo, hi: True if lo == hi == 0 else (False if lo > 0 or hi < 0 else None),
    "ne": lambda lo, hi: False if lo == hi == 0 else (True if lo > 0 or hi < 0 else None),
}


def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    """Simplify ``e`` given inclusive integer ranges of some variables."""
    return Simplifier(ranges)(e)


def upper_bound(e: Expr, ranges: Ranges) -> float:
    """A numeric upper bound of ``e`` (inf when unknown)."""
    sim = Simplifier(ranges)
    return sim.bounds(sim(e))[1]
