"""``s.rfactor(C, k)``: factor a reduction into a partial one and a final one (TVM's).

The partial reduction ``C.rf`` keeps the factored loop ``k`` as a spatial axis (at
position ``factor_axis``) and reduces over the other reduce loops; ``C`` becomes a
reduction over ``k`` of ``C.rf``. With ``k`` the inner loop of a split, each of the
``f`` lanes of ``C.rf`` holds an independent partial sum, which vectorizes or
parallelizes where the single accumulator of ``C`` could not:

    ko, ki = s[C].split(k, factor=4)        C.rf = s.rfactor(C, ki)
    for i:                                  for ki' in 0..4: for i:
      C[i] = 0                                C.rf[ki', i] = 0
      for ko: for ki:                  ->     for ko': if ko'*4 + ki' < n:
        C[i] += A[i, ko*4 + ki]                 C.rf[ki', i] += A[i, ko'*4 + ki']
                                            for i:
                                              C[i] = init;  for v in 0..4: C[i] += C.rf[v, i]

This reassociates the reduction, which its reducer (``pt.sum``, ``pt.max``,
``pt.comm_reducer``: commutative and associative by contract) allows; ``init=``
stays with the final reduction. A tuple reduction (argmax) factors the same way:
``C.rf`` has one output per value, and the final reduction combines the tuples.
The two new stages are scheduled and checked (isl) like any other. This module
builds the two operations; ``Schedule.rfactor`` puts them in the schedule.
"""

from __future__ import annotations

from .dtypes import INDEX
from .errors import ScheduleError
from .expr import Binary, Cmp, Const, Reduce, Select, substitute, vars_of
from .relations import Split
from .simplify import simplify
from .tensor import ComputeOp, IterVar, make_iter_var


def _err(op, msg: str) -> ScheduleError:
    return ScheduleError(f"rfactor on stage '{op.name}': {msg}")


def _factored(op: ComputeOp, relations: list, axis: IterVar):
    """(root reduce axis, factor extent, rest extent, value of the root from (factor,
    rest), whether the two may overrun the root's extent), or ScheduleError."""
    split = next((r for r in relations if axis in r.created), None)
    others = [r for r in relations if r is not split]
    if others:
        made = ", ".join(v.name for r in others for v in r.created)
        raise _err(op, f"the stage's other loops were transformed already (into {made}); "
                       "rfactor first, then schedule the two stages")  # fmt: skip
    if axis in op.reduce_axis and split is None:
        return axis, axis.extent, None, lambda f, r: f, False
    if not isinstance(split, Split) or split.parent not in op.reduce_axis:
        raise _err(op, f"loop {axis.name} is not a reduce axis of the stage or a loop of "
                       "one split of a reduce axis")  # fmt: skip
    ext = split.parent.extent
    parts = split.extents({split.parent: ext})  # the relation's own extents (one home)
    inner, outer = simplify(parts[split.inner]), simplify(parts[split.outer])
    value = lambda o, i: Binary("add", Binary("mul", o, inner, INDEX), i, INDEX)  # noqa: E731
    rem = simplify(Binary("mod", ext, inner, INDEX))
    overrun = not (isinstance(rem, Const) and rem.value == 0)
    if axis is split.inner:
        return split.parent, inner, outer, (lambda f, r: value(r, f)), overrun
    return split.parent, outer, inner, value, overrun


def rfactor_ops(op: ComputeOp, relations: list, axis: IterVar, factor_axis: int):
    """The partial reduction ``C.rf`` and the new operation of ``C`` (see the module)."""
    body = op.body
    if not isinstance(body, Reduce):
        raise _err(op, "the stage is not a reduction")
    if getattr(op, "updates", None):
        raise _err(op, "the tensor has update definitions")
    if not 0 <= factor_axis <= len(op.axis):
        raise _err(op, f"factor_axis={factor_axis} is not in 0..{len(op.axis)}")
    root, f_ext, r_ext, value, overrun = _factored(op, relations, axis)
    own = {iv.var for iv in (*op.axis, *op.reduce_axis)}
    for iv in op.reduce_axis:
        named = [v for v in vars_of(iv.dom_min) + vars_of(iv.extent) if v in own]
        if named and (iv is root or root.var in named):
            raise _err(op, f"the bounds of reduce axis {iv.name} name {named[0].name}; "
                           "rfactor needs the factored axis to range over a box")  # fmt: skip
    axes = [make_iter_var(iv.name, Const(0, INDEX), iv.extent, "spatial") for iv in op.axis]
    mapping = {old.var: new.var for old, new in zip(op.axis, axes)}
    fiv = make_iter_var(f"{axis.name}.rf", Const(0, INDEX), f_ext, "spatial")
    axes.insert(factor_axis, fiv)
    raxes = []
    for iv in op.reduce_axis:
        if iv is root:
            if r_ext is not None:
                raxes.append(make_iter_var(f"{root.name}.r", Const(0, INDEX), r_ext, "reduce"))
            continue
        lo, ext = substitute(iv.dom_min, mapping), substitute(iv.extent, mapping)
        raxes.append(make_iter_var(iv.name, lo, ext, "reduce"))
        mapping[iv.var] = raxes[-1].var
    rest = next((v for v in raxes if v.name == f"{root.name}.r"), None)
    k = value(fiv.var, rest.var if rest is not None else None)
    mapping[root.var] = simplify(Binary("add", root.dom_min, k, INDEX))
    red = body.combiner
    dts = tuple(b.dtype for b in op.bodies)
    srcs = [substitute(b.source, mapping) for b in op.bodies]
    if overrun:  # the points past the end contribute the identity
        ident = red.identity_tuple(dts) if len(dts) > 1 else (red.identity(dts[0]),)
        inside = Cmp("lt", k, root.extent)
        srcs = [Select(inside, s, z, s.dtype) for s, z in zip(srcs, ident)]
    if raxes:
        parts = [Reduce(red, s, tuple(raxes), s.dtype) for s in srcs]
    else:
        parts = srcs
    rf = ComputeOp(f"{op.name}.rf", axes, parts[0], dts[0], tuple(raxes), tuple(parts[1:]))
    v = make_iter_var(f"{axis.name}.v", Const(0, INDEX), f_ext, "reduce")
    idx = [iv.var for iv in op.axis]
    idx.insert(factor_axis, v.var)
    finals = [Reduce(red, t[tuple(idx)], (v,), b.dtype, b.init)
              for t, b in zip(rf.outputs, op.bodies)]  # fmt: skip
    return rf, ComputeOp(op.name, op.axis, finals[0], op.dtype, (v,), tuple(finals[1:]))
