"""Expression nodes: small immutable records with Python operators.

Nodes are frozen slotted dataclasses compared by identity (``==`` builds a
comparison node, as in TVM). Structural equality goes through ``structural.skey``.
Python numbers adapt to the dtype of the other operand; two different
dtypes need an explicit ``pt.cast`` unless ``dtypes.promote`` has a rule (an integer
widens to one that holds all its values).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from . import dtypes
from .dtypes import INDEX
from .printer import BITWISE, INFIX, expr_str

# Expressions and loop nests are trees, walked recursively (rewrites, simplification,
# printing); a chain of a few hundred inlined or attached stages nests that deep, a few
# Python frames per level, past Python's default limit of 1000. Raised, never lowered.
MAX_DEPTH_FRAMES = 8000
if sys.getrecursionlimit() < MAX_DEPTH_FRAMES:
    sys.setrecursionlimit(MAX_DEPTH_FRAMES)


def _arith(op: str, reflected: bool = False):
    """The operator method ``op``; a whole tensor on the other side is left to the
    tensor's own operator (broadcasting arithmetic, ``alpha * A``)."""

    def method(self, o):
        if getattr(o, "is_tensor", False):
            return NotImplemented
        return binary(op, o, self) if reflected else binary(op, self, o)

    method.__name__ = f"__{'r' if reflected else ''}{op}__"
    return method


class ExprOp:
    """Operator overloading shared by expressions and iteration variables."""

    __slots__ = ()

    __add__ = _arith("add")
    __radd__ = _arith("add", reflected=True)
    __sub__ = _arith("sub")
    __rsub__ = _arith("sub", reflected=True)
    __mul__ = _arith("mul")
    __rmul__ = _arith("mul", reflected=True)
    __truediv__ = _arith("div")
    __rtruediv__ = _arith("div", reflected=True)
    __floordiv__ = _arith("floordiv")
    __rfloordiv__ = _arith("floordiv", reflected=True)
    __mod__ = _arith("mod")
    __rmod__ = _arith("mod", reflected=True)

    def __neg__(self):
        e = as_expr(self)
        if dtypes.dtype(e.dtype).is_float:  # -0.0 is not 0.0 - 0.0
            return binary("mul", Const(-1.0, e.dtype), e)
        return binary("sub", Const(0, e.dtype), e)

    def __lt__(self, o):
        return compare("lt", self, o)

    def __le__(self, o):
        return compare("le", self, o)

    def __gt__(self, o):
        return compare("gt", self, o)

    def __ge__(self, o):
        return compare("ge", self, o)

    def __eq__(self, o):  # type: ignore[override]
        return compare("eq", self, o)

    def __ne__(self, o):  # type: ignore[override]
        return compare("ne", self, o)

    # bitwise on integers, logical on booleans (as numpy's and TVM's)
    __and__, __rand__ = _arith("bitand"), _arith("bitand", reflected=True)
    __or__, __ror__ = _arith("bitor"), _arith("bitor", reflected=True)
    __xor__, __rxor__ = _arith("bitxor"), _arith("bitxor", reflected=True)
    __lshift__, __rlshift__ = _arith("shl"), _arith("shl", reflected=True)
    __rshift__, __rrshift__ = _arith("shr"), _arith("shr", reflected=True)

    def __invert__(self):
        return bitwise_not(self)

    __hash__ = object.__hash__

    def astype(self, dtype: str) -> Expr:
        """``x.astype("float32")`` is ``pt.cast("float32", x)`` (numpy's and TVM's name)."""
        return cast(dtype, self)

    def __bool__(self):
        raise TypeError(
            f"the truth value of a symbolic expression ({self}) is unknown; "
            "use pt.select(cond, a, b) instead of Python's if/and/or"
        )


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Expr(ExprOp):
    def __str__(self) -> str:
        return expr_str(self)

    __repr__ = __str__


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Var(Expr):
    name: str
    dtype: str = INDEX
    axis: Any = None  # the IterVar this variable iterates, for loop and reduce axes


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Const(Expr):
    value: int | float
    dtype: str

    # a constant is its number, as TVM's IntImm/FloatImm: int(A.shape[0]), range(n)
    def __int__(self):
        return int(self.value)

    def __float__(self):
        return float(self.value)

    def __index__(self):
        if not isinstance(self.value, int):
            raise TypeError(f"{self} is a {self.dtype} constant, not an integer")
        return self.value


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Binary(Expr):
    op: str  # add sub mul div floordiv mod min max and or
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Cmp(Expr):
    op: str  # lt le gt ge eq ne
    a: Expr
    b: Expr
    dtype: str = "bool"

    def __bool__(self):
        # Two constants compare by value (``A.shape[0] == 3``, ``tuple(A.shape) == (3,
        # 4)``); otherwise ``==`` holds on identical nodes (``x in [vars]``), like TVM.
        if isinstance(self.a, Const) and isinstance(self.b, Const):
            return bool(_CMP_VALUES[self.op](self.a.value, self.b.value))
        if self.op == "eq":
            return self.a is self.b
        if self.op == "ne":
            return self.a is not self.b
        return Expr.__bool__(self)


_CMP_VALUES = {
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Select(Expr):
    cond: Expr
    t: Expr
    f: Expr
    dtype: str


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Cast(Expr):
    value: Expr
    dtype: str


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Call(Expr):
    name: str  # a key of MATH
    args: tuple
    dtype: str
    note: str = ""  # checked_index: the access it guards, for the error message


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TensorRead(Expr):
    tensor: Any  # pypto.tensor.Tensor
    indices: tuple
    dtype: str


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Reduce(Expr):
    combiner: Any  # pypto.tensor.CommReducer
    source: Expr
    axes: tuple  # IterVars
    dtype: str
    init: tuple = ()  # () or (the starting value, an Expr over the spatial axes): TVM's init=


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Load(Expr):
    """A read of a flat buffer in loop IR (``buffer`` is a loop_ir.Buffer)."""

    buffer: Any
    index: Expr
    dtype: str


# ---------------------------------------------------------------- conversion


def const(value, dtype: str = None) -> Const:
    """``pt.const(v, dtype)``: a typed constant (dtype guessed from ``v`` if omitted)."""
    if dtype is None:
        dtype = "float32" if isinstance(value, float) else "int32"
    d = dtypes.dtype(dtype)
    if d.is_float:
        value = dtypes.as_value(value, d.name)  # 0.1 in float32 is 0.1f
    elif isinstance(value, float) and not value.is_integer():
        raise TypeError(f"constant {value} is not an integer but dtype is {dtype}")
    else:
        value = int(value)
        lo, hi = dtypes.value_range(d.name) if d.is_int else (0, 1)
        if not lo <= value <= hi:  # as numpy's and TVM's: no constant wraps silently
            raise OverflowError(f"the constant {value} does not fit {d.name} ({lo} to {hi})")
    return Const(value, d.name)


def as_expr(x, like: str | None = None) -> Expr:
    """Turn Python numbers and IterVars into expressions; ``like`` types literals."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, np.generic) and not isinstance(x, (np.void, np.str_, np.bytes_)):
        x = x.item()  # numpy scalars (np.int64 from a shape, ...) as Python numbers
    var = getattr(x, "var", None)
    if isinstance(var, Var):  # an IterVar
        return var
    if isinstance(x, bool):
        return Const(int(x), "bool")
    if isinstance(x, int):
        if like is not None and dtypes.dtype(like).kind != "bool":
            return const(x, like)
        if not -(1 << 63) <= x < (1 << 63):  # C would wrap it (a split of 2**64: by 0)
            raise OverflowError(f"integer {x} does not fit int64, the type of sizes and indices")
        return Const(x, INDEX)
    if isinstance(x, float):
        if like is not None and not dtypes.dtype(like).is_float:
            raise TypeError(f"float literal {x} mixed with a {like} expression; use pt.cast")
        return const(x, like or "float32")
    raise TypeError(f"cannot use {type(x).__name__} {x!r} in an expression")


def unify(a, b) -> tuple[Expr, Expr, str]:
    e, lit = (b, a) if not isinstance(a, ExprOp) else (a, b)
    e = as_expr(e)
    try:
        lit = as_expr(lit, e.dtype)
    except OverflowError as err:
        raise OverflowError(f"{err}, the dtype of {e}; pt.cast {e} to a wider dtype") from None
    a, b = (lit, e) if not isinstance(a, ExprOp) else (e, lit)
    if a.dtype == b.dtype:
        return a, b, a.dtype
    wider = dtypes.promote(a.dtype, b.dtype)
    if wider is not None:
        return a, b, wider
    raise TypeError(
        f"mixed dtypes {a.dtype} and {b.dtype} in ({a}, {b}): no rule converts one to the "
        "other; use pt.cast to convert"
    )


# & | ^ of booleans are the logical operators (BITWISE: the bitwise ones, by symbol)
_ON_BOOL = {
    "bitand": lambda a, b: Binary("and", a, b, "bool"),
    "bitor": lambda a, b: Binary("or", a, b, "bool"),
    "bitxor": lambda a, b: Cmp("ne", a, b),
}


def binary(op: str, a, b) -> Expr:
    a, b, dt = unify(a, b)
    kind = dtypes.dtype(dt).kind
    if op == "div" and kind != "float":
        raise TypeError(f"'/' on integer expressions ({a} / {b}); use '//' for floor division")
    if op in BITWISE and kind not in ("int", "uint"):
        if kind == "bool" and op in _ON_BOOL:
            return _ON_BOOL[op](a, b)
        also = " or boolean" if op in _ON_BOOL else ""
        raise TypeError(f"'{BITWISE[op]}' needs integer{also} operands, got {dt} in ({a}, {b})")
    if kind == "bool" and op in ("add", "sub", "mul", "div", "floordiv", "mod"):  # numpy: or
        raise TypeError(
            f"'{INFIX[op][0]}' on booleans ({a}, {b}); use '|', '&' or '^' for logic, or "
            "pt.cast them to an integer type to count"
        )
    if op in ("and", "or"):
        if a.dtype != "bool" or b.dtype != "bool":
            raise TypeError(f"'&' and '|' need boolean operands, got {a.dtype} and {b.dtype}")
    return Binary(op, a, b, dt)


def bitwise_not(x) -> Expr:
    """``~x``: the complement of an integer's bits (``x ^ -1``), or a boolean's negation."""
    e = as_expr(x)
    d = dtypes.dtype(e.dtype)
    if d.kind == "bool":
        return Not(e, "bool")
    if d.kind not in ("int", "uint"):
        raise TypeError(f"'~' needs an integer or boolean operand, got {e.dtype} ({e})")
    ones = Const(-1 if d.kind == "int" else 2**d.bits - 1, e.dtype)
    return Binary("bitxor", e, ones, e.dtype)


# x OP c for a literal c above every value of x's type (below: the answer of FLIP[OP])
_ABOVE_ALL = {"lt": True, "le": True, "ne": True, "gt": False, "ge": False, "eq": False}
FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def compare(op: str, a, b) -> Expr:
    """``a OP b``, numpy's for any Python int: one outside an integer operand's type is
    an int64 constant where int64 holds both (``U < -1`` of a uint32), else the
    comparison is decided by value (``I64[i] < 2**63``: true)."""
    left = type(a) is int and isinstance(b, ExprOp)
    e, lit = (b, a) if left else (a, b)
    if type(lit) is int and isinstance(e, ExprOp) and dtypes.dtype(as_expr(e).dtype).is_int:
        dt = as_expr(e).dtype
        lo, hi = dtypes.value_range(dt)
        if not lo <= lit <= hi:
            if dtypes.promote("int64", dt) != "int64" or not -(2**63) <= lit < 2**63:
                as_if_right = FLIP[op] if left else op  # e OP' lit
                above = _ABOVE_ALL[as_if_right] if lit > hi else _ABOVE_ALL[FLIP[as_if_right]]
                return Const(int(above), "bool")
            lit = Const(lit, "int64")
            a, b = (lit, e) if left else (e, lit)
    a, b, _ = unify(a, b)
    return Cmp(op, a, b)


def select(cond, t, f) -> Expr:
    """``pt.select(cond, a, b)``: ``a`` where ``cond`` holds, else ``b``."""
    cond = as_expr(cond)
    if cond.dtype != "bool":
        raise TypeError(f"select condition must be boolean, got {cond.dtype}")
    if all(isinstance(x, int) and not isinstance(x, bool) for x in (t, f)):
        t, f = const(t), const(f)  # two literals: pt.const's int32, as TVM's
    t, f, dt = unify(t, f)
    return Select(cond, t, f, dt)


if_then_else = select


def cast(dtype: str, x) -> Expr:
    """``pt.cast(dtype, x)``: convert ``x`` to ``dtype`` (also ``x.astype(dtype)``)."""
    if isinstance(dtype, ExprOp):  # pt.cast(x, "float32"): say which argument is which
        fix = f"pt.cast({x!r}, {dtype})" if isinstance(x, str) else "pt.cast(dtype, x)"
        raise TypeError(f"pt.cast takes the dtype first, got the expression {dtype}; write {fix}")
    dt = dtypes.check(dtype)
    x = as_expr(x)
    return stored_as(x, dt) if x.dtype == dt else Cast(x, dt)


def stored_as(e: Expr, dtype: str) -> Expr:
    """``e`` of ``dtype`` as a buffer of it holds it: a value of a storage type (float16,
    bfloat16: computed in float32) rounded to it (a load, a constant of the type or a
    cast to it is already)."""
    if dtype not in dtypes.STORAGE or isinstance(e, (TensorRead, Const, Cast)) and e.dtype == dtype:
        return e
    return Cast(Cast(e, "float32"), dtype)


# ---------------------------------------------------------------- traversal


# the fields of each node type that hold sub-expressions
CHILD_FIELDS: dict[type, tuple[str, ...]] = {
    Var: (),
    Const: (),
    Binary: ("a", "b"),
    Cmp: ("a", "b"),
    Not: ("a",),
    Select: ("cond", "t", "f"),
    Cast: ("value",),
    Call: ("args",),
    TensorRead: ("indices",),
    Reduce: ("source", "init"),
    Load: ("index",),
}


def child_fields(t: type) -> tuple[str, ...]:
    return CHILD_FIELDS[t]


def map_children(e: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """Rebuild ``e`` with ``fn`` applied to each direct sub-expression (``e`` itself when
    ``fn`` changes none of them)."""
    t = type(e)
    new = None
    for name in CHILD_FIELDS[t]:
        v = getattr(e, name)
        if isinstance(v, tuple):
            nv = tuple(fn(x) for x in v)
            if all(x is y for x, y in zip(nv, v)):
                continue
        else:
            nv = fn(v)
            if nv is v:
                continue
        if new is None:
            new = {}
        new[name] = nv
    if new is None:
        return e
    names = _FIELD_NAMES.get(t)
    if names is None:
        names = _FIELD_NAMES[t] = tuple(f.name for f in fields(t))
    return t(**{n: new[n] if n in new else getattr(e, n) for n in names})


_FIELD_NAMES: dict = {}  # node type -> its field names, in order (what map_children rebuilds)


def children(e: Expr):
    for name in child_fields(type(e)):
        v = getattr(e, name)
        if isinstance(v, tuple):
            yield from v
        else:
            yield v


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace Vars (by identity) with expressions."""
    if not mapping:
        return e

    def go(x):
        if isinstance(x, Var):
            return mapping.get(x, x)
        return map_children(x, go)

    return go(e)


def walk(e: Expr):
    """Pre-order iteration over ``e`` and its sub-expressions, left to right (the order
    the expression reads them: ``op.input_tensors`` follows it)."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(tuple(children(x))))


def tensor_reads(e: Expr) -> list:
    """Every TensorRead in ``e`` (pre-order)."""
    return [x for x in walk(e) if isinstance(x, TensorRead)]


def conjunction(conds):
    """``c0 && c1 && ..`` (None for no conditions)."""
    out = None
    for c in conds:
        out = c if out is None else Binary("and", out, c, "bool")
    return out


def vars_of(e: Expr) -> list:
    """The variables of ``e``, each once, in pre-order."""
    out = []
    for x in walk(e):
        if isinstance(x, Var) and all(x is not y for y in out):
            out.append(x)
    return out
