"""Whole-tensor arithmetic with numpy broadcasting, as TVM's ``topi`` operators.

``A + B``, ``A * 2.0``, ``alpha * A``, ``-A`` on tensors each define a new tensor
by ``pt.compute`` (named ``T_add``, ``T_multiply``, ... as TVM names them), which a
schedule treats like any other stage (inline it, attach it, ...):

    A: (n, 1, 4)   B: (3, 1)   ->   T_add: (n, 3, 4)
    T_add[i, j, l] = A[i, 0, l] + B[j, 0]

Shapes align from the last dimension; a dimension of extent 1 stretches, equal
dimensions (the same constant or the same size variable) match, and anything else
is a ``ValueError`` naming both shapes. This module holds the shape rules; the
operators themselves are methods of ``pt.Tensor``.
"""

from __future__ import annotations

from .expr import Const, Expr
from .structural import skey

# operator -> the name TVM's topi gives its output
OP_NAMES = {
    "add": "T_add",
    "sub": "T_subtract",
    "mul": "T_multiply",
    "div": "T_divide",
    "floordiv": "T_floor_divide",
    "mod": "T_floor_mod",
    "max": "T_maximum",
    "min": "T_minimum",
    "bitand": "T_bitwise_and",
    "bitor": "T_bitwise_or",
    "bitxor": "T_bitwise_xor",
    "shl": "T_left_shift",
    "shr": "T_right_shift",
}


# operator -> the name of Python's operator method (``__add__``, ``__radd__``)
PY_OPERATORS = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "truediv",
    "floordiv": "floordiv",
    "mod": "mod",
    "bitand": "and",
    "bitor": "or",
    "bitxor": "xor",
    "shl": "lshift",
    "shr": "rshift",
}


def _is_one(d: Expr) -> bool:
    return isinstance(d, Const) and d.value == 1


def _same(a: Expr, b: Expr) -> bool:
    if isinstance(a, Const) and isinstance(b, Const):
        return a.value == b.value
    return skey(a) == skey(b)


def _fmt(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shape(sa: tuple, sb: tuple) -> tuple:
    """The shape of ``a op b`` under numpy's rules, or ValueError naming both shapes."""
    out = []
    for k in range(1, max(len(sa), len(sb)) + 1):
        da = sa[-k] if k <= len(sa) else None
        db = sb[-k] if k <= len(sb) else None
        if da is None or (db is not None and _is_one(da)):
            out.append(db)
        elif db is None or _is_one(db) or _same(da, db):
            out.append(da)
        else:
            raise ValueError(
                f"shapes {_fmt(sa)} and {_fmt(sb)} do not broadcast: dimension "
                f"{-k} is {da} in one and {db} in the other"
            )
    return tuple(reversed(out))


def read_broadcast(t, out_indices: tuple) -> Expr:
    """``t`` read at the element of an output of broadcast shape ``len(out_indices)``:
    its dimensions aligned to the last ones, those of extent 1 read at 0."""
    own = out_indices[len(out_indices) - len(t.shape) :]
    idx = tuple(Const(0, "int64") if _is_one(d) else i for d, i in zip(t.shape, own))
    return t[idx]


def operand(x, out_indices: tuple):
    """A tensor read with broadcasting, or a scalar (a number, typed by the other
    operand, or an expression) as is."""
    if hasattr(x, "op") and hasattr(x, "shape"):
        return read_broadcast(x, out_indices)
    return x


def shape_of(x) -> tuple:
    """The shape an operand contributes: a tensor's, or () for a scalar."""
    return tuple(x.shape) if hasattr(x, "op") and hasattr(x, "shape") else ()
