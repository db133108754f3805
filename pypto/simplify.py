"""Simplification of integer arithmetic: linear canonical forms, decided from the
interval bounds of ``pypto.intervals``.

Integer expressions built from ``+ - *`` by constants are brought to a sum of
``coeff * atom`` terms (largest stride first), so ``(io*32 + ii)*1024 + k``
prints as ``io*32768 + ii*1024 + k``. Floor division and modulo by a
constant use the known ranges of loop variables to vanish where they can:

    (io*32 + ii) // 32  ->  io          when 0 <= ii < 32
    (io*32 + ii) % 32   ->  ii

Integer arithmetic wraps (two's complement, in its dtype): a linear
form stays right under wrapping (its coefficients wrapped as the type does), but
comparisons, min/max, floor division and modulo are decided from bounds only where
no value can wrap (``intervals.may_wrap``), so ``A[i] + 1 > A[i]`` (int32) stays.
"""

from __future__ import annotations

import operator

from . import dtypes
from .expr import (
    FLIP,
    Binary,
    Cast,
    Cmp,
    Const,
    Expr,
    Not,
    Select,
    Var,
    map_children,
)
from .intervals import INF, Ranges, bounds, may_wrap, reads_data
from .structural import skey


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
            a, b = Lin.part(e.a, e.dtype), Lin.part(e.b, e.dtype)
            return a.plus(b, 1 if e.op == "add" else -1, e.dtype)
        if isinstance(e, Binary) and e.op == "mul":
            a, b = Lin.part(e.a, e.dtype), Lin.part(e.b, e.dtype)
            if not b.terms:
                return a.scale(b.const, e.dtype)
            if not a.terms:
                return b.scale(a.const, e.dtype)
        return Lin({skey(e): [e, 1]}, 0, e.dtype)

    @staticmethod
    def part(x: Expr, dtype: str) -> Lin:
        """An operand of a ``dtype`` sum or product: its own terms where it is computed in
        ``dtype`` too, else one atom. A narrower sum wraps in its own width first
        (``(A_u8 + 18) + B_i16``: not ``A + B + 18``)."""
        if x.dtype == dtype or isinstance(x, Const):
            return Lin.of(x)
        return Lin({skey(x): [x, 1]}, 0, x.dtype)

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

    def to_expr(self, wrap: bool = False) -> Expr:
        """The form as an expression; with ``wrap``, its coefficients as the arithmetic in
        its dtype has them, each the value nearest 0 (``x - 1``, not ``x + 2**32 - 1``):
        the expression to compute. Without, exact: the expression to reason about."""
        dt = self.dtype
        top = INF
        fix = lambda v: v  # noqa: E731
        data = wrap and any(reads_data(a) for a, _ in self.terms.values())
        if data and dtypes.dtype(dt).is_int:  # index arithmetic is exact, never wrapped
            lo, top = dtypes.value_range(dt)
            span = top - lo + 1
            fix = lambda v: (v + span // 2) % span - span // 2  # noqa: E731
        const = fix(self.const)
        terms = [(a, fix(c)) for a, c in self.terms.values()]
        items = sorted((ac for ac in terms if ac[1]), key=lambda ac: (ac[1] < 0, -abs(ac[1])))
        out = None
        if items and items[0][1] < 0 and const > 0:  # 1024 - i*6, not 0 - i*6 + 1024
            out, self_const = Const(const, dt), 0
        else:
            self_const = const
        for atom, c in items:
            if abs(c) > top:  # -2**31 in int32: no positive magnitude
                out = (
                    Binary("mul", atom, Const(c, dt), dt)
                    if out is None
                    else Binary("add", out, Binary("mul", atom, Const(c, dt), dt), dt)
                )
                continue
            mag = abs(c)
            t = atom if mag == 1 else Binary("mul", atom, Const(mag, dt), dt)
            if out is None:
                out = t if c > 0 else Binary("sub", Const(0, dt), t, dt)
            else:
                out = Binary("add" if c > 0 else "sub", out, t, dt)
        if out is None:
            return _const(const, dt)
        if self_const:
            if abs(self_const) > top:
                out = Binary("add", out, Const(self_const, dt), dt)
            else:
                op = "add" if self_const > 0 else "sub"
                out = Binary(op, out, Const(abs(self_const), dt), dt)
        return out


# ---------------------------------------------------------------- simplification

_FOLD = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "min": lambda a, b: _nan_or(a, b, min),  # NaN propagates, as pt.min's C helper
    "max": lambda a, b: _nan_or(a, b, max),
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
    "bitand": operator.and_,  # Python's ints act as two's complement of any width
    "bitor": operator.or_,
    "bitxor": operator.xor,
}


def _nan_or(a, b, pick):
    return a if a != a else b if b != b else pick(a, b)


def _fold_binary(op, a, b, dt):
    if op in _FOLD:
        return _FOLD[op](a, b)
    if op == "div":
        return a / b if b != 0 else None
    if op == "floordiv":
        if b == 0:
            return None
        return a // b  # on floats Python's divmod, as the C helper and numpy
    if op == "mod":
        return (a % b) if b != 0 else None
    if op in ("shl", "shr"):  # as the C helpers: past the width 0 (or the sign)
        if 0 <= b < dtypes.compute_bits(dt):
            return a << b if op == "shl" else a >> b
        return 0 if op == "shl" or a >= 0 else -1
    if op == "and":
        return int(bool(a) and bool(b))
    if op == "or":
        return int(bool(a) or bool(b))
    return None


def _recombine(lin: Lin) -> Lin:
    """``k * c * (x // c) + k * (x % c) -> k * x`` (c > 0; floor division and modulo)."""
    for key, (atom, coeff) in lin.terms.items():
        if not (isinstance(atom, Binary) and atom.op == "mod" and isinstance(atom.b, Const)):
            continue
        c = atom.b.value
        div = skey(Binary("floordiv", atom.a, atom.b, atom.dtype))
        if c > 0 and div in lin.terms and lin.terms[div][1] == coeff * c:
            rest = Lin({k: v for k, v in lin.terms.items() if k not in (key, div)}, lin.const,
                       lin.dtype)  # fmt: skip
            return _recombine(rest.plus(Lin.of(atom.a).scale(coeff, lin.dtype), 1, lin.dtype))
    return lin


def _const(v, dt):
    if dtypes.dtype(dt).is_float:
        return Const(dtypes.as_computed(v, dt), dt)
    return Const(dtypes.wrap(int(v), dt) if dtypes.dtype(dt).is_int else int(v), dt)


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

        self.done: dict = {}  # id -> (expression, simplified): shared parts once

    def __call__(self, e: Expr) -> Expr:
        if type(e) is Var or type(e) is Const:  # leaves: as they are
            return e
        hit = self.done.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        x = map_children(e, self)
        rule = self.rules.get(type(x))
        out = rule(x) if rule else x
        self.done[id(e)] = (e, out)
        return out

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
        if op in ("floordiv", "mod") and isinstance(b, Const) and b.value == -1:
            # C's INT_MIN / -1 traps; the quotient is the negation (wrapping), the rest 0
            if op == "mod":
                return Const(0, dt)
            return self.binary(Binary("sub", Const(0, dt), a, dt))
        data = reads_data(e)  # else index arithmetic: exact
        wraps = data and may_wrap(e, self.ranges)  # then only the ring's identities hold
        if op in ("add", "sub", "mul"):
            return Lin.of(e).to_expr(wrap=True) if wraps else self.linear(Lin.of(e), data)
        if wraps:
            return e
        if op in ("floordiv", "mod") and isinstance(b, Const) and b.value > 0:
            out = self.divmod_(a, b.value, dt, want_div=op == "floordiv")
            # (x - 1) % 3 -> (x + 2) % 3 holds for numbers, not where x + 2 wraps
            return e if data and may_wrap(out, self.ranges) else out
        if op in ("min", "max"):
            return self.minmax(e)
        return e

    def minmax(self, e: Binary) -> Expr:
        """A chain of ``min`` (``max``): its operands each once, without those another
        one bounds (``min(min(x, y), x + 1) -> min(x, y)``), as regions that fold the
        reads of many inlined taps build them."""
        terms, stack = [], [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Binary) and x.op == e.op and x.dtype == e.dtype:
                stack += [x.b, x.a]
            else:
                terms.append(x)
        keep: list = []
        for t in {skey(t): t for t in terms}.values():
            if not any(self.bounds_first(u, t, e.op) for u in keep):
                keep = [u for u in keep if not self.bounds_first(t, u, e.op)] + [t]
        out = keep[0]
        for t in keep[1:]:
            out = Binary(e.op, out, t, e.dtype)
        return out

    def bounds_first(self, u: Expr, t: Expr, op: str) -> bool:
        """Whether ``u`` is never above (``min``; below: ``max``) ``t``."""
        lo, hi = self.diff_bounds(u, t, 3)
        return hi <= 0 if op == "min" else lo >= 0

    def diff_bounds(self, u: Expr, t: Expr, depth: int) -> tuple:
        """Bounds of ``u - t``, a ``min`` or ``max`` on either side split into its
        operands (``max(8i - 1, 0) - 8i`` is ``max(-1, -8i)``: at most 0), ``depth``
        levels deep."""
        for x, sign in ((u, 1), (t, -1)):
            if depth and isinstance(x, Binary) and x.op in ("min", "max"):
                pairs = [self.diff_bounds(*((y, t) if sign == 1 else (u, y)), depth - 1)
                         for y in (x.a, x.b)]  # fmt: skip
                lows, highs = [p[0] for p in pairs], [p[1] for p in pairs]
                if (x.op == "max") == (sign == 1):  # a max of the differences
                    return max(lows), max(highs)
                return min(lows), min(highs)
        return self.bounds(Lin.of(u).plus(Lin.of(t), -1, u.dtype).to_expr())

    def linear(self, lin: Lin, data: bool = True) -> Expr:
        """Rebuild a linear form; ``min(x, y) + r`` becomes ``min(x + r, y + r)``
        when that makes a side constant (``min(i*8 + 7, n - 1) - i*8 + 1 -> min(8, n - i*8)``),
        and a quotient and remainder of one division recombine (``e // 16 * 16 + e % 16
        -> e``)."""
        lin = _recombine(lin)
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
                out = Binary(
                    op, self.linear(sides[0], data), self.linear(sides[1], data), lin.dtype
                )
                if not data or not may_wrap(out, self.ranges):  # x + r may wrap, min(..) + r not
                    return self.binary(out)
        return lin.to_expr(wrap=data)

    def float_identity(self, e: Binary) -> Expr:
        if e.op == "mul" and isinstance(e.b, Const) and e.b.value == 1:
            return e.a
        if e.op == "mul" and isinstance(e.a, Const) and e.a.value == 1:
            return e.b
        if e.op == "div" and isinstance(e.b, Const) and e.b.value == 1:
            return e.a
        if e.op in ("min", "max") and skey(e.a) == skey(e.b):  # NaN either way
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
            and a.b.value * c <= dtypes.value_range(dt)[1]  # a divisor the type holds
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
        if _is_int(a) and _is_int(b) and not may_wrap(e, self.ranges):
            diff = Lin.of(a).plus(Lin.of(b), -1, "int64")
            lo, hi = self.bounds(diff.to_expr())
            truth = _CMP_PROOF[e.op](lo, hi)
            if truth is not None:
                return Const(int(truth), "bool")
            # keep comparisons in the canonical form: terms on the left, in the type C
            # computes them in, unless moving them across could make them wrap there
            dt = a.dtype if a.dtype == b.dtype else "int64"
            diff.dtype, rhs, op = dt, -diff.const, e.op
            diff.const = 0
            if diff.terms and all(c < 0 for _, c in diff.terms.values()):
                diff, rhs, op = diff.scale(-1, dt), -rhs, FLIP[op]
            out = Cmp(op, diff.to_expr(wrap=True), _const(rhs, dt))
            return e if may_wrap(out, self.ranges) else out
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
        if isinstance(v, Const) and e.dtype == "bool":
            return Const(int(bool(v.value)), "bool")  # NaN is true, as in numpy
        if isinstance(v, Const):
            if dtypes.dtype(e.dtype).is_float:  # rounded as the cast rounds (16-bit too)
                return Const(dtypes.as_value(v.value, e.dtype), e.dtype)
            if not isinstance(v.value, float):
                return _const(v.value, e.dtype)
        if v.dtype == e.dtype:
            return v
        return e


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
