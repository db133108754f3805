"""Reducers: ``pt.sum``, ``pt.max``, ``pt.min`` and ``pt.comm_reducer`` (TVM's ``te``).

    k = pt.reduce_axis((0, n), name="k")
    C = pt.compute((m,), lambda i: pt.sum(A[i, k], axis=k, where=k != i, init=B[i]))
    prod = pt.comm_reducer(lambda x, y: x * y, lambda dt: pt.const(1, dt), name="prod")

A reducer is commutative and associative by contract: schedules reorder its
combinations (split, reorder, rfactor).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from .dtypes import dtype as dtype_of
from .dtypes import identity_value
from .expr import Const, Expr, Reduce, Select, TensorRead, Var, as_expr, binary, walk
from .tensor import IterVar


class CommReducer:
    """A commutative, associative combiner with an identity element.

    It pickles (with the expressions that use it) when ``fcombine`` and ``fidentity``
    do: module-level functions, not lambdas; the built-in reducers always do, and
    come back as themselves.
    """

    def __init__(self, fcombine: Callable, fidentity: Callable, name: str):
        self.fcombine = fcombine  # (Expr, Expr) -> Expr
        self.fidentity = fidentity  # dtype -> Const
        self.name = name

    def combine(self, x, y) -> Expr:
        return as_expr(self.fcombine(x, y))

    def identity(self, dtype: str) -> Expr:
        return as_expr(self.fidentity(dtype), dtype)

    @property
    def takes_tuples(self) -> bool:
        """Whether it reduces tuples (argmax): its identity takes a dtype per element."""
        if isinstance(self.fidentity, _Identity):
            return isinstance(self.fidentity.value, tuple)
        try:
            params = inspect.signature(self.fidentity).parameters.values()
        except (TypeError, ValueError):  # a builtin: one dtype
            return False
        return (
            len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) > 1
        )

    def combine_tuple(self, xs: tuple, ys: tuple) -> tuple:
        """A tuple reducer's combination of two tuples (an argmax's (index, value))."""
        out = self.fcombine(tuple(xs), tuple(ys))
        if not isinstance(out, (tuple, list)) or len(out) != len(xs):
            raise TypeError(f"{self.name}: fcombine must return a tuple of {len(xs)} values")
        return tuple(as_expr(e, x.dtype) for e, x in zip(out, xs))

    def identity_tuple(self, dtypes: tuple) -> tuple:
        out = self.fidentity(*dtypes)
        if not isinstance(out, (tuple, list)) or len(out) != len(dtypes):
            raise TypeError(f"{self.name}: fidentity must return a tuple of {len(dtypes)} values")
        return tuple(as_expr(e, dt) for e, dt in zip(out, dtypes))

    def _tuple(self, srcs: tuple, axes: tuple, where, init) -> tuple:
        """A tuple reduction: one Reduce per element, to be the bodies of one
        multi-output ``pt.compute`` (``idx, val = pt.compute(..., lambda i: argmax(...))``)."""
        dts = tuple(e.dtype for e in srcs)
        xs, ys = (tuple(Var(f"{v}{k}", dt) for k, dt in enumerate(dts)) for v in "xy")
        for what, es in (("identity", self.identity_tuple(dts)),
                         ("fcombine", self.combine_tuple(xs, ys))):  # fmt: skip
            for e in es:
                self._reads_nothing(what, e)
        if where is not None:
            cond = as_expr(where)
            if cond.dtype != "bool":
                raise TypeError(f"{self.name}: where= must be a condition, got {cond.dtype}")
            ident = self.identity_tuple(dts)
            srcs = tuple(Select(cond, e, z, e.dtype) for e, z in zip(srcs, ident))
        starts = [()] * len(srcs)
        if init is not None:
            if not isinstance(init, (tuple, list)) or len(init) != len(srcs):
                raise TypeError(f"{self.name}: init= of a tuple reduction is a tuple of "
                                f"{len(srcs)} values")  # fmt: skip
            starts = [(as_expr(x, dt),) for x, dt in zip(init, dts)]
        return tuple(Reduce(self, e, axes, e.dtype, s) for e, s in zip(srcs, starts))

    def __reduce__(self):
        if _BUILTIN.get(self.name) is self:
            return (builtin_reducer, (self.name,))
        return (CommReducer, (self.fcombine, self.fidentity, self.name))

    def _check_dtype(self, dtype: str) -> None:
        """The identity and ``fcombine``'s result have the reduction's dtype (no implicit
        conversion on each step: an int32 combine of float32 values would truncate)."""
        x, y = Var("x", dtype), Var("y", dtype)
        for what, e in (("identity", self.identity(dtype)), ("fcombine", self.combine(x, y))):
            self._reads_nothing(what, e)
            if e.dtype != dtype:
                raise TypeError(
                    f"{self.name}: its {what} is {e.dtype}, the reduction {dtype} ({e}); "
                    "use pt.cast or pt.const(value, dtype)"
                )

    def _reads_nothing(self, what: str, e: Expr) -> None:
        """A reducer combines its two operands, constants and scalar arguments; a tensor
        read in it would reach the C code with no bounds proven, no buffer bound."""
        read = next((x for x in walk(e) if isinstance(x, TensorRead)), None)
        if read is not None:
            raise TypeError(f"{self.name}: its {what} reads {read}; a reducer combines its "
                            "operands only: read the tensor in the reduced expression")  # fmt: skip

    def __call__(self, expr, axis, where=None, init=None) -> Reduce:
        """``red(expr, axis=k, where=cond, init=value)``, as TVM's reducers.

        ``where``: only the points where ``cond`` holds take part (the others contribute
        the identity).  ``init``: the value the reduction starts from instead of the
        identity, an expression over the spatial axes (``init=C0[i, j]``: ``C0 + A @ B``).

            C[i] = init(i); for k: if cond(i, k): C[i] = combine(C[i], expr(i, k))
        """
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not isinstance(a, IterVar) or a.kind != "reduce":
                raise TypeError(f"{self.name}: axis must be pt.reduce_axis, got {a!r}")
        if isinstance(expr, (tuple, list)):
            return self._tuple(tuple(as_expr(e) for e in expr), axes, where, init)
        expr = as_expr(expr)
        self._check_dtype(expr.dtype)
        if where is not None:
            cond = as_expr(where)
            if cond.dtype != "bool":
                raise TypeError(f"{self.name}: where= must be a condition, got {cond.dtype}")
            expr = Select(cond, expr, self._filler(expr.dtype), expr.dtype)
        start = ()
        if init is not None:
            start = (as_expr(init, expr.dtype),)
            if start[0].dtype != expr.dtype:
                raise TypeError(
                    f"{self.name}: init= is {start[0].dtype}, the reduction {expr.dtype}; "
                    "use pt.cast"
                )
            if any(isinstance(x, Var) and x.axis in axes for x in walk(start[0])):
                raise ValueError(f"{self.name}: init= may not name the reduce axes")
        return Reduce(self, expr, axes, expr.dtype, start)

    def _filler(self, dtype: str) -> Expr:
        """What a point ``where=`` leaves out contributes: the identity; for a sum of
        floats -0.0, which leaves every value as it is (+0.0 turns -0.0 into +0.0)."""
        if self is _sum and dtype_of(dtype).is_float:
            return Const(-0.0, dtype)
        return self.identity(dtype)

    def __repr__(self):
        return f"CommReducer({self.name})"


class _Identity:
    """An identity given as a constant (``pt.comm_reducer(f, 1.0)``), or a tuple of them
    for a tuple reducer: the same value for every dtype."""

    def __init__(self, value):
        self.value = value

    def __call__(self, *dtypes):
        return self.value

    def __reduce__(self):
        return (_Identity, (self.value,))


def _is_constant(v) -> bool:
    return isinstance(v, (bool, int, float, Const)) and not isinstance(v, type)


def comm_reducer(fcombine: Callable, fidentity, name: str = "reduce") -> CommReducer:
    """``pt.comm_reducer(lambda x, y: ..., lambda dtype: pt.const(...))``, or with the
    identity as a constant (``pt.comm_reducer(lambda x, y: x * y, 1)``; a tuple of
    constants for a tuple reducer).

    Returns a reducer used like ``pt.sum``: ``myred(expr, axis=k)``.
    """
    if not callable(fcombine):
        raise TypeError(
            f"comm_reducer: fcombine must be a function of two values, got {fcombine!r}"
        )
    if not callable(fidentity):
        if isinstance(fidentity, list):
            fidentity = tuple(fidentity)
        parts = fidentity if isinstance(fidentity, tuple) else (fidentity,)
        if not parts or not all(_is_constant(v) for v in parts):
            raise TypeError(
                "comm_reducer: the identity is a function of the dtype (lambda t: "
                f"pt.const(0, t)) or a constant (or a tuple of them), got {fidentity!r}"
            )
        fidentity = _Identity(fidentity)
    return CommReducer(fcombine, fidentity, name)


def _add(x, y):
    return binary("add", x, y)


def _maximum(x, y):
    return binary("max", x, y)


def _minimum(x, y):
    return binary("min", x, y)


def _zero(dtype: str) -> Const:
    return Const(0, dtype)


def _lowest(dtype: str) -> Const:
    return Const(identity_value("min", dtype), dtype)


def _highest(dtype: str) -> Const:
    return Const(identity_value("max", dtype), dtype)


_sum = CommReducer(_add, _zero, "sum")
_max = CommReducer(_maximum, _lowest, "max")
_min = CommReducer(_minimum, _highest, "min")
_BUILTIN = {r.name: r for r in (_sum, _max, _min)}


def builtin_reducer(name: str) -> CommReducer:
    """``pt.sum``'s (``"sum"``, ``"max"``, ``"min"``) reducer: what they unpickle to."""
    return _BUILTIN[name]


def _is_axis(a) -> bool:
    if isinstance(a, IterVar):
        return True
    return isinstance(a, (list, tuple)) and len(a) > 0 and all(isinstance(x, IterVar) for x in a)


def sum(expr, axis, where=None, init=None) -> Reduce:  # noqa: A001 - mirrors te.sum
    """``pt.sum(expr, axis=k)`` (``axis`` may be a list of reduce axes); ``where=`` and
    ``init=`` as TVM's (see ``CommReducer.__call__``)."""
    return _sum(expr, axis, where, init)


def max(a, b=None, axis=None, where=None, init=None) -> Expr:  # noqa: A001
    """``pt.max(a, b)`` elementwise, or ``pt.max(expr, axis=k)`` a reduction."""
    if axis is None and b is not None and _is_axis(b):
        axis, b = b, None
    if axis is not None:
        return _max(a, axis, where, init)
    _two_operands("max", b)
    return binary("max", a, b)


def min(a, b=None, axis=None, where=None, init=None) -> Expr:  # noqa: A001
    """``pt.min(a, b)`` elementwise, or ``pt.min(expr, axis=k)`` a reduction."""
    if axis is None and b is not None and _is_axis(b):
        axis, b = b, None
    if axis is not None:
        return _min(a, axis, where, init)
    _two_operands("min", b)
    return binary("min", a, b)


def _two_operands(name: str, b) -> None:
    if b is None:
        raise TypeError(
            f"pt.{name}(a) needs a second operand (pt.{name}(a, b), elementwise) or a reduce "
            f"axis (pt.{name}(a, axis=k))"
        )
