"""Tensorize: a region of loops replaced by a call of a tensor intrinsic's C kernel.

``s[C].tensorize(ax, intrin)`` (``intrin`` from ``pt.decl_tensor_intrin`` or
``pt.TensorIntrin.register``, see ``pypto.intrin`` for the calling convention)
replaces loop ``ax`` and every loop inside it by one call, once this module
has proved, over the inferred nests (``bounds.Nests``), that the region
computes exactly what the intrinsic does::

    s[C].tensorize(ji, dot4)           # C[i, j] = sum_k A[i, k] * B[j, k], j split by 4

        for i:                                for i:
          for jo:                               for jo:
            for ji in 0..4:          ->           dot4(A + i*16, 1, B + jo*64, 16, 1,
              C[i, jo*4 + ji] = sum_k ..                 C + i*N + jo*4, 1)

A region matches when:

- it holds every reduce loop of the stage, and no parallel loop, no stage
  computed at one of its loops and no prefetch;
- its loops of extent > 1, taken in the order of the axes they come from
  (the stage's axes, then its reduce axes; the outer part of a split
  first), pair one to one with the intrinsic's axes of extent > 1 (axes
  then reduce axes, as declared): same kind, same extent;
- the stage's body is the intrinsic's (commutative operators in either
  order), each placeholder standing for one tensor of the stage;
- every address the region touches is affine in its loops and equals the
  intrinsic's index times per-dimension strides (solved for here).

Tiles that a non-dividing split cuts short keep the original loops; whole
tiles make the call. A region is pure computation on values computed
before it (its only dependence is the reduction into its own output), so
the order the kernel uses inside it cannot break a dependence.
"""

from __future__ import annotations

from dataclasses import fields

from .dtypes import INDEX
from .errors import ScheduleError
from .expr import (
    Binary,
    Cmp,
    Const,
    Expr,
    Reduce,
    TensorRead,
    Var,
    child_fields,
    conjunction,
    substitute,
)
from .expr import vars_of as _vars_of
from .intervals import INF
from .intrin import TensorIntrin, flat_children
from .loop_ir import IntrinCall, Operand
from .regions import relax
from .relations import Split
from .simplify import Lin, simplify, upper_bound
from .structural import skey
from .tensor import ComputeOp

_COMMUTATIVE = ("add", "mul", "min", "max", "and", "or", "bitand", "bitor", "bitxor")


# ---------------------------------------------------------------- binding


def _err(st, intrin, msg: str) -> ScheduleError:
    return ScheduleError(f"tensorize({intrin.name}) on stage '{st.name}': {msg}")


def _roots(st) -> dict:
    """Leaf -> (root index, path): the axis a loop comes from, and the outer (0) / inner
    (1) choices of the splits on the way; fused and skewed loops are not mapped."""
    up = {}
    for rel in st.relations:
        if isinstance(rel, Split):
            up[rel.outer], up[rel.inner] = (rel.parent, 0), (rel.parent, 1)
    out = {}
    for leaf in st.leaf_iter_vars:
        iv, path = leaf, ()
        while iv in up:
            iv, branch = up[iv]
            path = (branch, *path)
        out[leaf] = (st.root_iter_vars.index(iv), path) if iv in st.root_iter_vars else None
    return out


def _check_region(nests, st, intrin, region):
    leaves = st.leaf_iter_vars
    outside = [iv for iv in leaves[: len(leaves) - len(region)] if iv.kind == "reduce"]
    if outside:
        raise _err(
            st,
            intrin,
            f"reduce loop {outside[0].name} lies outside the tensorized loops; the intrinsic "
            "computes whole reductions (tensorize at a loop outside it)",
        )
    for iv in region:
        if st.attrs.get(iv) == "parallel":
            raise _err(st, intrin, f"loop {iv.name} is parallel; it would run as one call")
        for a in nests.sch.stages:
            if a.attach == (st, iv) and not a.inline:
                raise _err(st, intrin, f"stage '{a.name}' is computed at loop {iv.name}")
        if any(iv is p.loop or iv is p.spread for p in st.prefetches):
            raise _err(st, intrin, f"loop {iv.name} carries a prefetch")


def _pair_loops(nests, n, intrin, region) -> tuple[dict, dict, list]:
    """Pair the region's loops with the intrinsic's axes: (leaf -> axis, leaf -> its
    constant extent, conditions under which the tile is whole)."""
    st = n.stage
    roots = _roots(st)
    consts, whole = {}, []
    for iv in region:
        ext = simplify(n.leaf_ext[iv], nests.ranges)
        c = upper_bound(ext, nests.ranges)
        if c == INF:
            raise _err(st, intrin, f"loop {iv.name} has no constant bound")
        consts[iv] = int(c)
        if not isinstance(ext, Const):  # min(c, e) is c when e >= c
            e = _min_other(ext, int(c))
            whole.append(Cmp("ge", ext if e is None else e, Const(int(c), INDEX)))
    for iv in region:
        if consts[iv] > 1 and roots[iv] is None:
            raise _err(
                st, intrin, f"loop {iv.name} is fused or skewed; tensorize needs split loops"
            )
    # root_iter_vars lists the axes, then the reduce axes
    mine = sorted((iv for iv in region if consts[iv] > 1), key=lambda iv: roots[iv])
    op = intrin.op
    theirs = [a for a in (*op.axis, *op.reduce_axis) if a.extent.value > 1]

    def show(ivs, ext):
        return ", ".join(f"{iv.name}:{ext(iv)}" for iv in ivs) or "none"

    if [(iv.kind, consts[iv]) for iv in mine] != [(a.kind, a.extent.value) for a in theirs]:
        raise _err(
            st,
            intrin,
            f"the tensorized loops ({show(mine, consts.get)}) do not match the axes of "
            f"{op.name} ({show(theirs, lambda a: a.extent.value)}); loops pair with axes "
            "in declared order, spatial then reduce, extent-1 ones left out",
        )
    return dict(zip(mine, theirs)), consts, whole


def _min_other(e: Expr, c: int):
    """``x`` when ``e`` is ``min(c, x)`` or ``min(x, c)``, else None."""
    if isinstance(e, Binary) and e.op == "min":
        for k, other in ((e.a, e.b), (e.b, e.a)):
            if isinstance(k, Const) and k.value == c:
                return other
    return None


def _match(a: Expr, b: Expr, binds: dict):
    """Structural match of the stage's expression ``a`` with the intrinsic's ``b``:
    the new bindings (placeholder id -> (tensor, [(read, intrinsic read)])) or None."""
    if isinstance(b, TensorRead):
        if not isinstance(a, TensorRead) or a.dtype != b.dtype:
            return None
        key = id(b.tensor)
        tensor, pairs = binds.get(key, (a.tensor, ()))
        if tensor is not a.tensor:
            return None
        return {**binds, key: (tensor, (*pairs, (a, b)))}
    if type(a) is not type(b) or isinstance(b, Var):
        return None
    kids = set(child_fields(type(b)))
    for f in fields(b):
        if f.name not in kids and getattr(a, f.name) != getattr(b, f.name):
            return None
    ka, kb = flat_children(a), flat_children(b)
    if len(ka) != len(kb):
        return None
    orders = [ka]
    if isinstance(b, Binary) and b.op in _COMMUTATIVE:
        orders.append(ka[::-1])
    for order in orders:
        out = binds
        for x, y in zip(order, kb):
            out = _match(x, y, out)
            if out is None:
                break
        if out is not None:
            return out
    return None


def _operand(nests, n, intrin, pairs, leaf_of, region: set) -> Operand:
    """The buffer, origin and strides of one intrinsic operand from its accesses:
    ``pairs`` of (flat index over the stage's leaves, buffer, the intrinsic's indices);
    ``region`` the variables of the tensorized loops."""
    st = n.stage
    zero = {v: Const(0, INDEX) for v in region}
    eqs, origins = [], []
    buf = pairs[0][1]
    for flat, b, idx in pairs:
        if b is not buf:
            raise _err(st, intrin, f"one placeholder stands for two buffers ({buf.name}, {b.name})")
        coef = {}
        for atom, c in Lin.of(flat).terms.values():
            if isinstance(atom, Var) and atom in region:
                coef[atom] = c
            elif any(v in region for v in _vars_of(atom)):
                loops = {iv.var for iv in (*st.leaf_iter_vars, *st.root_iter_vars)}
                sizes = sorted({v.name for v in _vars_of(atom) if v not in loops | region})
                why = (
                    f" with constant strides: it moves by {' and '.join(sizes)} (a size) along "
                    "them; an intrinsic's strides must be constants"
                    if sizes
                    else ""
                )
                raise _err(
                    st,
                    intrin,
                    f"the address {buf.name}[{flat}] is not affine in the tensorized loops{why}",
                )
        lins = [Lin.of(i) for i in idx]
        for leaf, axis in leaf_of.items():
            eqs.append(([_coef(li, axis.var) for li in lins], coef.get(leaf.var, 0)))
        origins.append((simplify(substitute(flat, zero), nests.ranges), [li.const for li in lins]))
    strides = _solve(eqs, len(pairs[0][2]))
    if strides is None:
        raise _err(
            st,
            intrin,
            f"the accesses of {buf.name} are not the intrinsic's indices times strides (the "
            "body is matched as written: are its operands in the intrinsic's order?)",
        )
    index = None
    for b0, consts in origins:
        shift = sum(s * c for s, c in zip(strides, consts))
        i = simplify(Binary("sub", b0, Const(shift, INDEX), INDEX), nests.ranges)
        if index is not None:
            diff = simplify(Binary("sub", i, index, INDEX), nests.ranges)
            if not (isinstance(diff, Const) and diff.value == 0):
                raise _err(st, intrin, f"two reads of {buf.name} disagree on its element 0")
        index = i
    return Operand(buf, index, tuple(strides))


def _coef(lin: Lin, v: Var) -> int:
    return lin.terms.get(skey(v), (v, 0))[1]


def _solve(eqs, ndim: int):
    """Integer strides ``s`` with ``sum_d s[d] * c[d] == rhs`` for every equation
    ``(c, rhs)``, found one unknown at a time (None if there are none)."""
    s = [None] * ndim
    progress = True
    while progress:
        progress = False
        for c, rhs in eqs:
            unknown = [d for d in range(ndim) if c[d] and s[d] is None]
            if len(unknown) != 1:
                continue
            d = unknown[0]
            rest = rhs - sum(c[e] * s[e] for e in range(ndim) if c[e] and e != d)
            if rest % c[d]:
                return None
            s[d] = rest // c[d]
            progress = True
    s = [0 if x is None else x for x in s]  # dimensions no loop moves along
    if any(sum(a * b for a, b in zip(c, s)) != rhs for c, rhs in eqs):
        return None
    return s


def _start(r: Reduce) -> str:
    """Where a reduction starts: its reducer's identity, or a constant ``init=``; one
    that reads tensors is marked: the call never passes them, so it matches nothing."""
    if not r.init:
        return "the identity"
    if all(isinstance(x, Const) for x in r.init):
        return f"init={', '.join(str(x.value) for x in r.init)}"
    return f"init={', '.join(str(x) for x in r.init)} (read per output)"


def bind(nests, layout, n, pos: int, intrin: TensorIntrin):
    """The call replacing the leaves ``pos``.. of nest ``n`` and the condition under
    which a tile is whole (None when every tile is). ``nests`` (``bounds.Nests``) and
    ``layout`` (``layout.Layout``) are the inferred nests and their buffers."""
    st = n.stage
    if st.is_update or not isinstance(st.op, ComputeOp):
        raise _err(st, intrin, "only a stage of pt.compute can be tensorized")
    region = st.leaf_iter_vars[pos:]
    _check_region(nests, st, intrin, region)
    leaf_of, consts, whole = _pair_loops(nests, n, intrin, region)
    region_vars = {iv.var for iv in region}
    mine, theirs = nests.bodies[st], intrin.op.body
    if isinstance(mine, Reduce) != isinstance(theirs, Reduce):
        raise _err(st, intrin, "one of the stage and the intrinsic is a reduction, the other not")
    if isinstance(mine, Reduce):
        if mine.combiner is not theirs.combiner:
            raise _err(
                st,
                intrin,
                f"the stage reduces with {mine.combiner.name}, the intrinsic with "
                f"{theirs.combiner.name}",
            )
        if _start(mine) != _start(theirs) or _start(mine).endswith("(read per output)"):
            raise _err(
                st,
                intrin,
                f"the stage's reduction starts from {_start(mine)}, the intrinsic's from "
                f"{_start(theirs)}: not the same body",
            )
        mine, theirs = mine.source, theirs.source
    if st.op.dtype != intrin.op.dtype:
        raise _err(st, intrin, f"the stage is {st.op.dtype}, the intrinsic {intrin.op.dtype}")
    binds = _match(mine, theirs, {})
    if binds is None:
        raise _err(
            st, intrin, f"the stage computes {mine}, the intrinsic {theirs}: not the same body"
        )
    operands = []
    for t in intrin.inputs:
        tensor, reads = binds[id(t)]
        pairs = []
        for r, ir in reads:
            buf, idx = layout.index(nests.stage_of(tensor), r.indices)
            pairs.append((simplify(nests.in_leaves(n, idx), nests.ranges), buf, ir.indices))
        operands.append(_operand(nests, n, intrin, pairs, leaf_of, region_vars))
    buf, idx = layout.index(st, [iv.var for iv in st.op.axis])
    flat = simplify(nests.in_leaves(n, idx), nests.ranges)
    out_idx = tuple(iv.var for iv in intrin.op.axis)
    operands.append(_operand(nests, n, intrin, [(flat, buf, out_idx)], leaf_of, region_vars))
    if any(o.buffer is operands[-1].buffer for o in operands[:-1]):
        raise _err(st, intrin, "the output is also an input")
    return IntrinCall(intrin, tuple(operands)), _whole(nests, n, pos, intrin, consts, whole)


def _whole(nests, n, pos: int, intrin, consts: dict, conds: list):
    """Conditions under which every guard inside the region holds for the whole tile."""
    relaxed = {iv.var: Const(c, INDEX) for iv, c in consts.items()}
    out = list(conds)
    for p, guards in n.guards.items():
        if p < pos:
            continue
        for cond, _ in guards:
            if not isinstance(cond, Cmp) or cond.op not in ("lt", "le", "gt", "ge"):
                raise _err(n.stage, intrin, f"cannot tell when guard {cond} holds for a tile")
            d = Binary("sub", cond.a, cond.b, INDEX)
            r = relax(d, relaxed, nests.ranges)
            if r is None:
                raise _err(n.stage, intrin, f"guard {cond} is not analysable")
            lo, hi = r
            zero = Const(0, INDEX)
            out.append(Cmp(cond.op, hi if cond.op in ("lt", "le") else lo, zero))
    if not out:
        return None
    cond = simplify(conjunction(out), nests.ranges)
    if isinstance(cond, Const) and cond.value:
        return None
    return cond
