"""Affine expressions and conditions of pypto in isl's syntax.

``IslPrinter`` prints an index expression (``(i + 1)``, ``floor((i)/4)``, ``min(a, b)``),
``isl_condition`` a comparison or a conjunction of them; anything isl cannot represent
exactly raises ``NonAffine`` and the caller over-approximates. ``guarded_reads`` finds
the reads of an expression with the ``pt.select`` branches they sit in.
"""

from __future__ import annotations

from . import dtypes
from .expr import Binary, Cmp, Const, Expr, Not, Select, TensorRead, Var, children


class NonAffine(Exception):
    """An expression isl cannot represent exactly."""


# the bitwise operations with a power of two isl represents exactly (index arithmetic
# is exact: it never wraps): x << c, x >> c, x & (2**k - 1)
_POWER_OF_TWO = {
    "shl": lambda x, c: f"({x} * {2**c})" if 0 <= c < 63 else _non_affine(x),
    "shr": lambda x, c: f"floor(({x})/{2**c})" if 0 <= c < 63 else _non_affine(x),
    "bitand": lambda x, m: f"(({x}) mod {m + 1})" if m >= 0 and not m & (m + 1) else _non_affine(x),
}


def _non_affine(x):
    raise NonAffine(x)


class IslPrinter:
    """Affine expressions in isl syntax; anything else raises NonAffine."""

    def __init__(self, names: dict):
        self.names = names  # Var -> isl identifier

    def __call__(self, e: Expr) -> str:
        if isinstance(e, Const):
            if not isinstance(e.value, int):
                raise NonAffine(str(e))
            return str(e.value)
        if isinstance(e, Var):
            if e not in self.names:
                raise NonAffine(e.name)
            return self.names[e]
        if isinstance(e, Binary):
            a, b = e.a, e.b
            if e.op in ("add", "sub"):
                return f"({self(a)} {'+' if e.op == 'add' else '-'} {self(b)})"
            if e.op == "mul" and (isinstance(a, Const) or isinstance(b, Const)):
                return f"({self(a)} * {self(b)})"
            if e.op in ("floordiv", "mod") and isinstance(b, Const) and b.value > 0:
                if e.op == "floordiv":
                    return f"floor(({self(a)})/{b.value})"
                return f"(({self(a)}) mod {b.value})"
            if e.op in ("min", "max"):
                return f"{e.op}({self(a)}, {self(b)})"
            if e.op in _POWER_OF_TWO and isinstance(b, Const) and dtypes.dtype(e.dtype).is_int:
                return _POWER_OF_TWO[e.op](self(a), b.value)
        raise NonAffine(str(e))


_ISL_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=", "ne": "!="}


def isl_condition(c: Expr, pr: IslPrinter) -> str:
    """An affine condition in isl syntax (NonAffine otherwise)."""
    if isinstance(c, Cmp) and c.op in _ISL_CMP and dtypes.dtype(c.a.dtype).is_int:
        return f"{pr(c.a)} {_ISL_CMP[c.op]} {pr(c.b)}"
    if isinstance(c, Binary) and c.op in ("and", "or"):
        return f"({isl_condition(c.a, pr)}) {c.op} ({isl_condition(c.b, pr)})"
    if isinstance(c, Not):
        return f"not ({isl_condition(c.a, pr)})"
    if isinstance(c, Const) and c.dtype == "bool":
        return "1 = 1" if c.value else "1 = 0"
    raise NonAffine(str(c))


def guarded_reads(e: Expr, when: tuple = ()):
    """``(read, conditions)`` for every tensor read in ``e``: the conditions
    ``(cond, holds)`` of the ``pt.select`` branches it sits in (the branch not taken
    reads nothing)."""
    if isinstance(e, TensorRead):
        yield e, when
    if isinstance(e, Select):
        yield from guarded_reads(e.cond, when)
        yield from guarded_reads(e.t, (*when, (e.cond, True)))
        yield from guarded_reads(e.f, (*when, (e.cond, False)))
        return
    for c in children(e):
        yield from guarded_reads(c, when)
