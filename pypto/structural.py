"""Structural keys: a hashable key per expression, equal for equal expressions (nodes
compare by identity). An expression's shared parts (an inlined stage read at many taps)
are keyed once: the keys of composite nodes are kept, with the nodes, in a bounded memo.

    skey(i * 8 + 1) == skey(i * 8 + 1)      # two trees, one key
"""

from __future__ import annotations

from .expr import Const, Expr, Load, TensorRead, Var, children

_SKEYS: dict = {}  # id -> (expression, key): the shared parts of a DAG keyed once


def skey(e: Expr):
    """A hashable structural key: equal keys mean equal expressions."""
    if isinstance(e, Var):
        return ("v", id(e))
    if isinstance(e, Const):
        return ("c", e.value, e.dtype)
    hit = _SKEYS.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    if isinstance(e, Load):
        k = ("ld", id(e.buffer), skey(e.index))
    elif isinstance(e, TensorRead):
        k = ("tr", id(e.tensor), tuple(skey(i) for i in e.indices))
    else:
        head = (type(e).__name__, getattr(e, "op", None), getattr(e, "name", None), e.dtype)
        k = head + tuple(skey(c) for c in children(e))
    if len(_SKEYS) >= 1 << 16:  # the entries keep their expressions alive
        _SKEYS.clear()
    _SKEYS[id(e)] = (e, k)
    return k
