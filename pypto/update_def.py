"""What an update definition (``T[r] = ...``, ``Tensor.__setitem__``) ranges over: the
rdoms its axes belong to, and the axes of the reductions inside its value.

    Y[i] = Y[i] + pt.sum(A[i, k] * x[k], axis=k)   # update axes {i}, reduced over {k}
"""

from __future__ import annotations

from .expr import Const, Expr, Reduce, Var, map_children, walk


def bound_rdoms(groups: dict):
    """Add to ``groups`` the rdoms whose axes the bounds of its axes name (an update over
    ``i`` in ``[0, k)`` runs for every ``k``), transitively."""
    todo = list(groups.values())
    while todo:
        for a in todo.pop().axes:
            for e in a.dom:
                for x in walk(e):
                    if isinstance(x, Var) and x.axis is not None and x.axis.kind == "reduce":
                        r = x.axis.rdom
                        if id(r) not in groups:
                            groups[id(r)] = r
                            todo.append(r)


def reduction_axes(name: str, lhs: tuple, val: Expr) -> set:
    """The axes of the reductions in an update's value (each instance reduces over them:
    they are not axes of the update); refuses reductions in indices or nested ones."""
    for e in lhs:
        if any(isinstance(x, Reduce) for x in walk(e)):
            raise TypeError(f"update of {name}: a reduction in an index of the left side")
    reds = [x for x in walk(val) if isinstance(x, Reduce)]
    inner = {a for r in reds for a in r.axes}
    for r in reds:
        if any(isinstance(x, Reduce) for x in walk(r.source)):
            raise TypeError(f"update of {name}: a reduction inside a reduction")
        if r.combiner.takes_tuples:
            raise TypeError(
                f"update of {name}: a tuple reduction ({r.combiner.name}) inside an update "
                "definition is not supported; compute it in a multi-output pt.compute and "
                "read that"
            )
    outside = set()
    for e in (*lhs, _without_reductions(val)):
        outside.update(x.axis for x in walk(e) if isinstance(x, Var) and x.axis is not None)
    both = inner & outside
    if both:
        raise TypeError(
            f"update of {name}: {', '.join(sorted(a.name for a in both))} is reduced over "
            "inside the update and also an axis of the update; use another reduce_axis"
        )
    return inner


def _without_reductions(e: Expr) -> Expr:
    return Const(0, e.dtype) if isinstance(e, Reduce) else map_children(e, _without_reductions)
