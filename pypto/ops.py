"""The elementwise functions (``pt.exp``, ``pt.sqrt``, ...) and TVM's ``tir`` helpers
under their TVM names, for code written against TE.

- math: ``pt.exp log sqrt rsqrt tanh erf sigmoid floor ceil round abs fast_exp
  fast_erf`` and ``pt.sin cos tan asin acos atan sinh cosh asinh acosh atanh exp2 expm1
  log2 log10 log1p trunc nearbyint atan2 fmod hypot copysign nextafter`` (float
  operands; the rows of ``pypto.mathfuncs``), ``pt.isnan isinf isfinite`` (a
  ``bool``), ``pt.power`` (``pt.pow``);
- ``pt.max_value(dtype)`` / ``pt.min_value(dtype)``: the largest and smallest
  finite values (the identities of a max / min reduction written by hand,
  ``pt.comm_reducer(..., lambda t: pt.min_value(t))``);
- ``pt.all(*conds)`` / ``pt.any(*conds)``: the conjunction / disjunction;
- ``pt.floordiv floormod indexdiv indexmod``: ``//`` and ``%`` (rounding down,
  the remainder takes the divisor's sign); ``pt.truncdiv truncmod``: C's
  integer division and remainder (rounding toward zero);
- ``pt.bitwise_and bitwise_or bitwise_xor bitwise_not shift_left shift_right``:
  ``& | ^ ~ << >>`` on integers (numpy's results: a shift by the type's width or
  more gives 0, or the sign); ``pt.logical_and logical_or logical_not``: ``& | ~``
  on booleans; ``pt.popcount clz``: set bits, leading zero bits (TVM's);
- ``pt.size_var(name)``: ``pt.var(name)``, a size.

    pt.compute((n,), lambda i: pt.select(pt.all(i >= 1, i < n - 1), A[i], 0.0))
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import dtypes
from .expr import BITWISE, Call, Const, as_expr, binary, bitwise_not, select, unify
from .mathfuncs import FUNCS
from .scalar_args import var


def call(name: str, *args) -> Call:
    """The elementwise math function ``name`` (a row of ``pypto.mathfuncs.FUNCS``)."""
    f = FUNCS[name]
    nargs, needs_float = f.nargs, f.needs_float
    if len(args) != nargs:
        raise TypeError(f"pt.{name} takes {nargs} argument(s), got {len(args)}")
    if nargs == 2:
        a, b, dt = unify(args[0], args[1])
        ops = (a, b)
    else:
        ops = (as_expr(args[0], "float32" if isinstance(args[0], float) else None),)
        dt = ops[0].dtype
    if needs_float and not dtypes.dtype(dt).is_float:
        raise TypeError(f"pt.{name} needs a float operand, got {dt}; use pt.cast")
    if f.c_int and not dtypes.dtype(dt).is_int:
        raise TypeError(f"pt.{name} needs an integer operand, got {dt}")
    return Call(name, ops, f.returns or ("bool" if f.predicate else dt))


def math_function(name: str) -> Callable:
    """``pt.<name>``: the function that builds a call of math function ``name``."""

    def fn(*args):
        return call(name, *args)

    fn.__name__ = name
    fn.__doc__ = f"``pt.{name}``: elementwise {name}."
    return fn


_NAMES = "exp log sqrt rsqrt tanh erf sigmoid floor ceil round abs fast_exp fast_erf"
exp, log, sqrt, rsqrt, tanh, erf, sigmoid, floor, ceil, round_, abs, fast_exp, fast_erf = (
    math_function(n) for n in _NAMES.split()
)
fast_exp.__doc__ = (
    "``pt.fast_exp``: elementwise exp as vectorizable float32 arithmetic (relative error "
    "below 3e-7; see pypto/fastmath.py). float64 uses libm."
)
fast_erf.__doc__ = (
    "``pt.fast_erf``: elementwise erf as a vectorizable float32 rational function "
    "(absolute error below 1e-6). float64 uses libm."
)

(
    sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh,
    exp2, expm1, log2, log10, log1p, trunc, nearbyint,
    atan2, fmod, hypot, copysign, nextafter, isnan, isinf, isfinite, power,
) = (
    math_function(n)
    for n in (
        "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
        "exp2", "expm1", "log2", "log10", "log1p", "trunc", "nearbyint",
        "atan2", "fmod", "hypot", "copysign", "nextafter", "isnan", "isinf", "isfinite", "pow",
    )
)  # fmt: skip
popcount, clz = math_function("popcount"), math_function("clz")
popcount.__doc__ = (
    "TVM's ``tir.popcount``: the number of set bits of an integer (as its unsigned bits: "
    "8 for an int8 -1; numpy's ``bitwise_count`` counts the absolute value's), in the "
    "operand's dtype."
)
clz.__doc__ = (
    "TVM's ``tir.clz``: the leading zero bits of an integer (as its unsigned bits), an "
    "int32; of 0, the dtype's width (TVM leaves that undefined)."
)

# the largest finite value of each float dtype numpy has no finfo for
_FLOAT_MAX = {"bfloat16": 3.3895313892515355e38}


def max_value(dtype: str) -> Const:
    """TVM's ``te.max_value``: the largest finite value of ``dtype``."""
    d = dtypes.dtype(dtypes.check(dtype))
    if d.is_float:
        top = _FLOAT_MAX.get(d.name) or float(np.finfo(d.name).max)
        return Const(top, d.name)
    return Const(int(np.iinfo(d.name).max), d.name)


def min_value(dtype: str) -> Const:
    """TVM's ``te.min_value``: the smallest (most negative) finite value of ``dtype``."""
    d = dtypes.dtype(dtypes.check(dtype))
    if d.is_float:
        return Const(-max_value(d.name).value, d.name)
    return Const(int(np.iinfo(d.name).min), d.name)


def _conditions(name: str, conds) -> list:
    if not conds:
        raise TypeError(f"pt.{name} needs at least one condition")
    out = [as_expr(c) for c in conds]
    for c in out:
        if c.dtype != "bool":
            raise TypeError(f"pt.{name} takes conditions, got {c} of type {c.dtype}")
    return out


def all(*conds):  # noqa: A001 - mirrors te.all
    """TVM's ``te.all``: true where every condition holds."""
    out = _conditions("all", conds)
    acc = out[0]
    for c in out[1:]:
        acc = acc & c
    return acc


def any(*conds):  # noqa: A001 - mirrors te.any
    """TVM's ``te.any``: true where at least one condition holds."""
    out = _conditions("any", conds)
    acc = out[0]
    for c in out[1:]:
        acc = acc | c
    return acc


def floordiv(a, b):
    """``a // b``: the quotient rounded down (TVM's ``tir.floordiv``)."""
    return as_expr(a) // b


def floormod(a, b):
    """``a % b``: the remainder with the divisor's sign (TVM's ``tir.floormod``)."""
    return as_expr(a) % b


indexdiv, indexmod = floordiv, floormod


def _typed(a, b) -> tuple:
    """Both operands as expressions, a Python number taking the other's dtype, as with the
    operators (``pt.shift_left(A_int8, 1)`` is int8, as ``A << 1``)."""
    number = (int, float)
    if isinstance(a, number) and not isinstance(b, number):
        b = as_expr(b)
        return as_expr(a, b.dtype), b
    if isinstance(b, number) and not isinstance(a, number):
        a = as_expr(a)
        return a, as_expr(b, a.dtype)
    return as_expr(a), as_expr(b)


def _integers(name: str, a, b):
    a, b = _typed(a, b)
    for x in (a, b):
        if dtypes.dtype(x.dtype).is_float:
            raise TypeError(
                f"pt.{name} divides integers, got {x.dtype}; for floats use pt.trunc(a / b) "
                "or pt.fmod(a, b)"
            )
    return a, b


def truncdiv(a, b):
    """C's ``a / b`` on integers: the quotient rounded toward zero."""
    a, b = _integers("truncdiv", a, b)
    q = a // b
    # floor and truncation differ when the division is inexact and the signs differ
    off = (a % b != 0) & (((a < 0) & (b > 0)) | ((a > 0) & (b < 0)))
    return select(off, q + 1, q)


def truncmod(a, b):
    """C's ``a % b`` on integers: the remainder with the dividend's sign."""
    a, b = _integers("truncmod", a, b)
    return a - truncdiv(a, b) * b


def size_var(name: str = "n", dtype: str = "int64"):
    """TVM's ``te.size_var``: a symbolic size (``pt.var``)."""
    return var(name, dtype)


def _binary(op: str, name: str, kinds: tuple):
    def fn(a, b):
        a, b = _typed(a, b)
        for x in (a, b):
            if dtypes.dtype(x.dtype).kind not in kinds:
                want = " or ".join(kinds)
                raise TypeError(f"pt.{name} takes {want} operands, got {x.dtype} ({x})")
        return binary(op, a, b)

    fn.__name__ = name
    fn.__doc__ = f"TVM's ``tir.{name}``: elementwise ``{BITWISE[op]}``."
    return fn


_INTS, _BOOLS = ("int", "uint"), ("bool",)
bitwise_and = _binary("bitand", "bitwise_and", _INTS)
bitwise_or = _binary("bitor", "bitwise_or", _INTS)
bitwise_xor = _binary("bitxor", "bitwise_xor", _INTS)
shift_left = _binary("shl", "shift_left", _INTS)
shift_right = _binary("shr", "shift_right", _INTS)
logical_and = _binary("bitand", "logical_and", _BOOLS)
logical_or = _binary("bitor", "logical_or", _BOOLS)


def logical_not(x):
    """TVM's ``tir.logical_not``: ``~`` of a boolean."""
    _conditions("logical_not", (x,))
    return bitwise_not(x)
