"""``pt.var``: sizes (``pt.var("n")``, bound from shapes) and scalar arguments passed by
value (``pt.var("alpha", "float64")``), as TVM's ``te.var``.

    alpha = pt.var("alpha", "float64")
    C = pt.compute((n,), lambda i: alpha * A[i] + B[i], name="C")
    mod = pt.build(s, [A, B, alpha, C])     # alpha's place among the arguments is its own
    mod(a, b, 1.5, c)                       # a Python float (or int, or numpy scalar)
    c = mod(a, b, 1.5)                      # outputs omitted: scalars count as inputs

An integer size (``pt.var("n")``) is bound from the arrays' shapes; a floating-point
variable cannot be, so it is an argument. In C it is a ``double`` or ``float`` parameter
after the buffers and sizes:

    int32_t axpy(const double* restrict A, ..., int64_t n, double alpha)

An integer ``pt.var`` in the argument list is an argument too, as in TVM (a count that no
shape carries: a number of time steps). It is one of the sizes (``int64_t`` after the
buffers), a count of at least 0 as every size is; a call passing a negative one, or
one that differs from the size a shape binds it to, is refused:

    steps = pt.var("steps")
    t, i = pt.rdom([(0, steps), (1, n - 1)], names="t i")
    mod = pt.build(s, [U0, U, steps])       # int32_t gs(..., int64_t n, int64_t steps)
    mod(u0, u, 10)

This module says which arguments are scalars and turns a call's Python values into
the C values, refusing anything else with a ``TypeError`` naming the argument.
"""

from __future__ import annotations

import ctypes
import math
import numbers
from dataclasses import dataclass

import numpy as np

from . import dtypes
from .dtypes import INDEX
from .expr import Var

# the dtypes a scalar argument may have -> the ctypes type it is passed as
SCALAR_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double}
FLOAT32_MAX = float(np.finfo(np.float32).max)


def var(name: str = "n", dtype: str = INDEX) -> Var:
    """``pt.var(name)``: a symbolic size, bound at call time from array shapes.

    ``pt.var("alpha", "float64")`` (or ``"float32"``) is a scalar argument instead:
    it goes in the argument list of ``pt.build`` and is passed as a Python float at
    call (``pypto.scalar_args``).
    """
    d = dtypes.dtype(dtype)
    if d.kind not in ("int", "uint") and d.name not in SCALAR_CTYPES:
        raise TypeError(
            f"pt.var needs an integer dtype (a size) or one of "
            f"{', '.join(SCALAR_CTYPES)} (a scalar argument), got {dtype}"
        )
    return Var(str(name), d.name)


@dataclass(frozen=True, slots=True)
class ScalarParam:
    """A scalar argument: its name, dtype and position in the full argument list."""

    name: str
    dtype: str
    position: int

    @property
    def is_size(self) -> bool:
        """An integer: passed among the sizes, not after them."""
        return dtypes.dtype(self.dtype).is_int

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "position": self.position}

    @staticmethod
    def from_json(d: dict) -> ScalarParam:
        dt = dtypes.check(d["dtype"])
        if dt not in SCALAR_CTYPES and dt != INDEX:
            raise ValueError(f"scalar argument {d['name']!r}: unsupported dtype {dt}")
        return ScalarParam(str(d["name"]), dt, int(d["position"]))


def is_scalar_var(x) -> bool:
    """A floating-point ``pt.var``: an argument passed by value."""
    return isinstance(x, Var) and x.axis is None and dtypes.dtype(x.dtype).is_float


def is_size_arg(x) -> bool:
    """An integer ``pt.var`` in an argument list: a size the call passes."""
    return isinstance(x, Var) and x.axis is None and dtypes.dtype(x.dtype).is_int


def check_scalar_var(v: Var):
    if v.dtype not in SCALAR_CTYPES:
        raise TypeError(
            f"scalar argument {v.name}: dtype {v.dtype} is not passed by value; "
            f"use one of {', '.join(SCALAR_CTYPES)}"
        )


def scalar_params(args) -> tuple:
    """The scalars among a build's arguments, with their positions (integers as
    ``INDEX``, the sizes' type)."""
    return tuple(
        ScalarParam(a.name, INDEX if is_size_arg(a) else a.dtype, i)
        for i, a in enumerate(args)
        if is_scalar_var(a) or is_size_arg(a)
    )


def _size_value(p: ScalarParam, value) -> int:
    """A call's integer for the size argument ``p``: an int of 0 to 2^63 - 1."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(
            f"argument {p.name}: expected an integer (a size), got {type(value).__name__} {value!r}"
        )
    value = int(value)
    if not 0 <= value < 1 << 63:
        raise ValueError(
            f"argument {p.name}: {value} is not a size (an integer argument counts "
            "something: 0 to 2^63 - 1)"
        )
    return value


def c_value(p: ScalarParam, value) -> float | int:
    """The value of a call's argument for ``p`` (ctypes narrows a float32), or
    TypeError naming it."""
    if p.is_size:
        return _size_value(p, value)
    ok = isinstance(value, (numbers.Real, np.floating, np.integer)) and not isinstance(
        value, (bool, np.bool_)
    )
    if not ok:
        raise TypeError(
            f"argument {p.name}: expected a number (a {p.dtype} scalar), "
            f"got {type(value).__name__} {value!r}"
        )
    try:
        x = float(value)
    except OverflowError:  # an int beyond every float
        digits = len(str(abs(int(value))))
        raise ValueError(
            f"argument {p.name}: an integer of {digits} digits is too large for a {p.dtype}"
        ) from None
    if p.dtype == "float32" and math.isfinite(x) and abs(x) > FLOAT32_MAX:
        raise ValueError(f"argument {p.name}: {value!r} is beyond a float32's range (inf in C)")
    return x


class ScalarSlots:
    """Where a call's scalar values sit among its arguments: in the full list, or in the
    list without the outputs (``names``, ``written``: per buffer argument, in order)."""

    def __init__(self, kernel: str, scalars: tuple, names: list, written: list):
        self.kernel, self.scalars = kernel, scalars
        n = len(written) + len(scalars)
        at = {p.position: p.name for p in scalars}
        it, nit = iter(written), iter(names)
        kinds = ["scalar" if i in at else ("out" if next(it) else "in") for i in range(n)]
        self.names = [at[i] if i in at else next(nit) for i in range(n)]
        self.outs = [x for x, k in zip(self.names, kinds) if k == "out"]
        self.full = [i for i, k in enumerate(kinds) if k == "scalar"]
        short = [k for k in kinds if k != "out"]
        self.short = [i for i, k in enumerate(short) if k == "scalar"]
        self.n_full, self.n_short = n, len(short)

    def split(self, args) -> tuple[list, list]:
        """The non-scalar arguments, and the C values of the scalars."""
        if not self.scalars:
            return list(args), []
        if len(args) == self.n_full:
            at = self.full
        elif len(args) == self.n_short:
            at = self.short
        else:
            raise TypeError(
                f"{self.kernel} takes {self.n_full} arguments ({', '.join(self.names)}), or "
                f"{self.n_short} without the outputs ({', '.join(self.outs)}); got {len(args)}"
            )
        values = [c_value(p, args[i]) for p, i in zip(self.scalars, at)]
        rest = [a for i, a in enumerate(args) if i not in at]
        return rest, values

    def sizes(self, values: list) -> dict:
        """The sizes among ``split``'s values: name -> value."""
        return {p.name: x for p, x in zip(self.scalars, values) if p.is_size}

    def floats(self, values: list) -> list:
        """The floats among ``split``'s values (C parameters after the sizes)."""
        return [x for p, x in zip(self.scalars, values) if not p.is_size]

    def join(self, buffers: list, values: list) -> list:
        """The full argument list from the buffer arguments and the scalar values."""
        if not self.scalars:
            return list(buffers)
        out, it = [], iter(buffers)
        vals = iter(values)
        for i in range(self.n_full):
            out.append(next(vals) if i in self.full else next(it))
        return out
