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

The factored loop may be made of several reduce axes (``rfactor(C, fuse(k1, k2))``)
or of a split of a fused loop: every loop made from the same reduce axes (TVM's touch
map) becomes a reduce loop of ``C.rf``, and the reduce axes' values come back up from
the loops (``relations``' ``values``). Splits and fuses of ``C``'s spatial loops stay
with ``C``; a reduce axis transformed but not part of the factored loop is refused.
Bounds may name spatial axes (a triangle ``k < i + 1``, split by 4: ``k.inner`` is a box
and factors, ``C.rf``'s ``k.outer`` loop keeps the triangle) and the factored reduce
axes (``k2 < k1 + 1``); the factored loop's own extent must be the same everywhere.

This reassociates the reduction, which its reducer (``pt.sum``, ``pt.max``,
``pt.comm_reducer``: commutative and associative by contract) allows; ``init=``
stays with the final reduction. A tuple reduction (argmax) factors the same way:
``C.rf`` has one output per value, and the final reduction combines the tuples.
The two new stages are scheduled and checked (isl) like any other. This module
builds the two operations; ``Schedule.rfactor`` puts them in the schedule.
"""

from __future__ import annotations

from .dtypes import INDEX, accumulator_dtype
from .errors import ScheduleError
from .expr import Binary, Cast, Const, Reduce, Select, conjunction, substitute, vars_of
from .relations import derives_from
from .simplify import simplify
from .tensor import ComputeOp, IterVar, make_iter_var


def _err(op, msg: str) -> ScheduleError:
    return ScheduleError(f"rfactor on stage '{op.name}': {msg}")


def _touched(op: ComputeOp, relations: list, axis: IterVar):
    """(reduce roots, relations, loops) that ``axis`` shares: the loops it is made from,
    the loops made from those, up and down until stable (TVM's touch map)."""
    loops, size = {axis}, 0
    while len(loops) != size:
        size = len(loops)
        for r in reversed(relations):
            if any(c in loops for c in r.created):
                loops.update(r.parents)
        for r in relations:
            if any(p in loops for p in r.parents):
                loops.update(r.created)
    roots = [iv for iv in op.reduce_axis if iv in loops]
    if not roots or any(iv.kind != "reduce" for iv in loops):
        raise _err(op, f"loop {axis.name} is not a reduce axis of the stage or a loop made "
                       "from reduce axes only")  # fmt: skip
    return roots, [r for r in relations if any(p in loops for p in r.parents)], loops


def _factored(op: ComputeOp, relations: list, leaves: list, axis: IterVar):
    """(the reduce axes ``axis`` is made from, the relations made from them, every such
    loop's extent, the other loops made from them in leaf order), or ScheduleError for a
    reduce axis transformed apart from them."""
    roots, rels, loops = _touched(op, relations, axis)
    for r in relations:
        if r in rels:
            continue
        bad = [iv for iv in (*r.parents, *r.created) if iv.kind == "reduce"]
        if bad:
            raise _err(op, f"reduce loop {bad[0].name} was split or fused, and factoring "
                           f"{axis.name} leaves it to {op.name}.rf; rfactor first, then schedule "
                           "the two stages")  # fmt: skip
    ext = {iv: simplify(iv.extent) for iv in roots}  # [i, i + 3): 3, not i + 3 - i
    for r in rels:
        ext.update({k: simplify(v) for k, v in r.extents(ext).items()})
    made = [iv for iv in leaves if iv in loops and iv is not axis]
    return roots, rels, ext, made


def _root_values(rels: list, ext: dict, val: dict):
    """Values of the roots from the values of the loops made from them, and the guards
    (relations' ``values`` flowing up)."""
    val, conds = dict(val), []
    for r in reversed(rels):
        up, cs = r.values(val, ext, simplify)
        val.update(up)
        conds += [c for c, _ in cs]
    return val, conds


def rfactor_ops(op: ComputeOp, relations: list, leaves: list, axis: IterVar, factor_axis: int):
    """The partial reduction ``C.rf``, the new operation of ``C`` and the relations of
    ``C``'s spatial loops it keeps (see the module)."""
    body = op.body
    if not isinstance(body, Reduce):
        raise _err(op, "the stage is not a reduction")
    if getattr(op, "updates", None):
        raise _err(op, "the tensor has update definitions")
    if not 0 <= factor_axis <= len(op.axis):
        raise _err(op, f"factor_axis={factor_axis} is not in 0..{len(op.axis)}")
    roots, rels, ext, made = _factored(op, relations, leaves, axis)
    own = {iv.var for iv in (*op.axis, *op.reduce_axis)}
    reduce_vars = {iv.var for iv in op.reduce_axis}
    for iv in roots:  # bounds may name the spatial axes (a triangle), not other reductions
        named = [v for v in vars_of(iv.dom_min) + vars_of(iv.extent) if v in reduce_vars]
        if named:
            raise _err(op, f"the bounds of reduce axis {iv.name} name {named[0].name}; "
                           "rfactor needs the factored loop's axes to range independently "
                           "of the other reduce axes")  # fmt: skip
    named = [v for v in vars_of(simplify(ext[axis])) if v in own]
    if named:
        raise _err(op, f"the extent of loop {axis.name} depends on {named[0].name}; rfactor "
                       "needs the factored loop to have the same extent everywhere (split "
                       "it by a factor and factor the inner loop)")  # fmt: skip
    axes = [make_iter_var(iv.name, Const(0, INDEX), iv.extent, "spatial") for iv in op.axis]
    mapping = {old.var: new.var for old, new in zip(op.axis, axes)}
    fiv = make_iter_var(f"{axis.name}.rf", Const(0, INDEX), ext[axis], "spatial")
    axes.insert(factor_axis, fiv)
    # the other loops made from the roots stand where the first root stood
    rest = [make_iter_var(_rest_name(iv, roots, made), Const(0, INDEX),
                          substitute(ext[iv], mapping), "reduce")
            for iv in made]  # fmt: skip
    val = {axis: fiv.var, **{old: new.var for old, new in zip(made, rest)}}
    val, conds = _root_values(rels, ext, val)
    conds = [substitute(c, mapping) for c in conds]
    for iv in roots:
        start = substitute(iv.dom_min, mapping)
        mapping[iv.var] = simplify(Binary("add", start, substitute(val[iv], mapping), INDEX))
    raxes = []
    for iv in op.reduce_axis:
        if iv in roots:
            raxes += rest if iv is roots[0] else []
            continue
        lo, e = substitute(iv.dom_min, mapping), substitute(iv.extent, mapping)
        raxes.append(make_iter_var(iv.name, lo, e, "reduce"))
        mapping[iv.var] = raxes[-1].var
    red = body.combiner
    # the partials of a 16-bit float reduction stay in its float32 accumulator: rounded
    # once, by the final reduction's store, as without rfactor
    dts = tuple(accumulator_dtype(b.dtype) for b in op.bodies)
    srcs = [_as(substitute(b.source, mapping), d) for b, d in zip(op.bodies, dts)]
    if conds:  # the points past the end contribute the identity
        ident = red.identity_tuple(dts) if len(dts) > 1 else (red.identity(dts[0]),)
        inside = conjunction(conds)
        srcs = [Select(inside, s, z, s.dtype) for s, z in zip(srcs, ident)]
    if raxes:
        parts = [Reduce(red, s, tuple(raxes), s.dtype) for s in srcs]
    else:
        parts = srcs
    rf = ComputeOp(f"{op.name}.rf", axes, parts[0], dts[0], tuple(raxes), tuple(parts[1:]))
    v = make_iter_var(f"{axis.name}.v", Const(0, INDEX), ext[axis], "reduce")
    idx = [iv.var for iv in op.axis]
    idx.insert(factor_axis, v.var)
    finals = [Reduce(red, t[tuple(idx)], (v,), b.dtype, b.init)
              for t, b in zip(rf.outputs, op.bodies)]  # fmt: skip
    new = ComputeOp(op.name, op.axis, finals[0], op.dtype, (v,), tuple(finals[1:]))
    kept = [r for r in relations if r not in rels]
    return rf, new, kept, [iv for iv in leaves if iv.kind != "reduce"] + [v]


def _as(e, dtype: str):
    return e if e.dtype == dtype else Cast(e, dtype)


def _rest_name(iv: IterVar, roots: list, made: list) -> str:
    """``k.r`` for the one other loop of one split root; else the loop's own name."""
    return f"{roots[0].name}.r" if len(roots) == 1 and len(made) == 1 else iv.name


def loop_to_factor(stage, axis, factor_axis):
    """``(loop, factor_axis)`` of ``s[C].rfactor(axis, factor_axis)``, where
    ``factor_axis`` may also be a loop made from the reduce axis ``axis`` (the API's
    ``s[C].rfactor(k, ki)``: factor ``ki`` at position 0)."""
    if not isinstance(factor_axis, IterVar):
        return axis, factor_axis
    if not derives_from(stage.relations, factor_axis, axis):
        raise ScheduleError(
            f"rfactor({axis.name}, {factor_axis.name}) on stage '{stage.name}': "
            f"{factor_axis.name} is no loop made from {axis.name} (give the loop to factor "
            "alone: rfactor(loop), or rfactor(loop, factor_axis: int))"
        )
    return factor_axis, 0
