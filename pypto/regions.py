"""The region of a tensor its consumers read in one iteration of an attach loop.

Bound inference (``lowering``) first relaxes each read index over the inner loops by
interval arithmetic (``relax``), which is exact for indices linear in loops that sweep a box. Where
an index wraps (``floordiv``/``mod`` of a fused loop) or the consumer's loops are not a
box (non-rectangular domains), the intervals over-approximate: a (m, 6) stage fused and
split by 3 reads 3 columns per outer iteration, but ``j = f % 6`` relaxes to all 6.
``read_region`` computes the exact hull instead: the consumers' iterations below the
attach loop (the outer loops as parameters, the guards and bounds of every root), mapped
through each read's index, unioned, clamped to the tensor and projected per dimension.

    for f.outer in 0..8:                     for f.outer in 0..8:
      P[rows, 0..6] = ...          ->          P[f.outer // 2, (f.outer % 2) * 3 .. + 3] = ...
      for f.inner in 0..3: C[..] = P[..]       for f.inner in 0..3: C[..] = P[..]
"""

from __future__ import annotations

import islpy as isl

from .domain import IslSpace, slice_bounds
from .expr import Binary, Const, Expr, Load, Select, TensorRead, Var, substitute, vars_of, walk
from .isl_expr import IslPrinter, NonAffine
from .loop_ir import Namer
from .simplify import Lin, simplify


def relax(e: Expr, relaxed: dict, ranges) -> tuple | None:
    """Symbolic (lo, hi) of ``e`` as the ``relaxed`` variables sweep ``[0, extent)``.

    An extent may name relaxed variables further out (a stage attached inside another
    attached stage's loops: its loops' extents name the loops it is attached in); the
    bounds are then relaxed again, the low one down and the high one up, until they
    name none."""
    out = _relax_once(e, relaxed, ranges)
    for _ in range(len(relaxed)):  # extents name only loops further out: this ends
        if out is None or not any(v in relaxed for b in out for v in vars_of(b)):
            return out
        lo, hi = _relax_once(out[0], relaxed, ranges), _relax_once(out[1], relaxed, ranges)
        out = None if lo is None or hi is None else (lo[0], hi[1])
    return None if out is None or any(v in relaxed for b in out for v in vars_of(b)) else out


def _relax_once(e: Expr, relaxed: dict, ranges) -> tuple | None:
    """(lo, hi) of ``e`` with each relaxed variable replaced by 0 or its extent - 1."""
    if not any(v in relaxed for v in vars_of(e)):
        return (e, e)
    if isinstance(e, (Load, TensorRead)):
        return None
    lin = Lin.of(e)
    lo = Lin({}, lin.const, "int64")
    hi = Lin({}, lin.const, "int64")
    for atom, c in lin.terms.values():
        if not any(v in relaxed for v in vars_of(atom)):
            a = (atom, atom)
        elif isinstance(atom, Var):
            a = (Const(0, "int64"), Binary("sub", relaxed[atom], Const(1, "int64"), "int64"))
        elif isinstance(atom, Binary) and atom.op in ("floordiv", "min", "max"):
            ra = _relax_once(atom.a, relaxed, ranges)
            rb = _relax_once(atom.b, relaxed, ranges)
            if ra is None or rb is None:
                return None
            if atom.op == "floordiv":
                if not (isinstance(atom.b, Const) and atom.b.value > 0):
                    return None
                a = (
                    Binary("floordiv", ra[0], atom.b, "int64"),
                    Binary("floordiv", ra[1], atom.b, "int64"),
                )
            else:
                a = (Binary(atom.op, ra[0], rb[0], "int64"), Binary(atom.op, ra[1], rb[1], "int64"))
        elif (
            isinstance(atom, Binary)
            and atom.op == "mod"
            and isinstance(atom.b, Const)
            and atom.b.value > 0
        ):
            a = (Const(0, "int64"), Const(atom.b.value - 1, "int64"))
        else:
            return None
        if c > 0:
            lo = lo.plus(Lin.of(a[0]).scale(c, "int64"), 1, "int64")
            hi = hi.plus(Lin.of(a[1]).scale(c, "int64"), 1, "int64")
        else:
            lo = lo.plus(Lin.of(a[1]).scale(c, "int64"), 1, "int64")
            hi = hi.plus(Lin.of(a[0]).scale(c, "int64"), 1, "int64")
    return simplify(lo.to_expr(), ranges), simplify(hi.to_expr(), ranges)


def needs_exact(idx: Expr, relaxed: dict) -> bool:
    """Whether interval relaxation of ``idx`` may be wider than the true region."""
    return any(
        isinstance(x, Select) or (isinstance(x, Binary) and x.op in ("floordiv", "mod"))
        for x in walk(idx)
        if any(v in relaxed for v in walk(x))
    )


def read_region(shape, accesses: list, prefix: list) -> list | None:
    """Per dimension ``(min, extent)`` of the elements read, in the attach loop's
    enclosing leaves and the sizes; None when an index or bound is not affine.

    ``accesses``: ``(nest, inner, indices)`` per read, the indices in the leaf
    variables of the consumer's nest, ``inner`` the ``[(leaf, box_extent)]`` of its loops
    inside the attach point (the consumer's own, and those of the stages it is attached
    in); ``prefix``: ``[(leaf, box_extent)]`` of the loops enclosing the attach point
    (parameters here)."""
    top = IslSpace([])
    images = None
    try:
        for n, inner, indices in accesses:
            sp = IslSpace([iv.var for iv, _ in inner], top)
            to_leaves = {iv.var: v for iv, v in n.root_value.items()}
            bounds = [
                (n.root_value[iv], substitute(lo, to_leaves), substitute(ext, to_leaves))
                for iv, (lo, ext) in n.true_dom.items()
            ]
            exprs = [e for b in bounds for e in b] + list(indices)
            exprs += [ext for _, ext in inner]
            pr = sp.printer(exprs)
            cons = [f"{pr(lo)} <= {pr(v)} < {pr(lo)} + {pr(ext)}" for v, lo, ext in bounds]
            cons += [f"0 <= {sp.names[iv.var]} < {pr(ext)}" for iv, ext in inner]
            idx = ", ".join(pr(i) for i in indices)
            rel = isl.Map(
                f"[{', '.join(sp.params.values())}] -> {{ [{', '.join(sp.dims)}] -> [{idx}] : "
                f"{' and '.join(cons + [f'{p} >= 0' for p in sp.params.values()])} }}"
            )
            images = rel.range() if images is None else images.union(rel.range())
        out = IslSpace([], top)
        pr = out.printer(list(shape) + [e for iv, ext in prefix for e in (iv.var, ext)])
        dims = [f"e{d}" for d in range(len(shape))]
        clamp = " and ".join(f"0 <= {e} < {pr(s)}" for e, s in zip(dims, shape))
        ps = ", ".join(top.params.values())
        images = images.intersect(isl.Set(f"[{ps}] -> {{ [{', '.join(dims)}] : {clamp} }}"))
        reach = isl.Set(
            f"[{ps}] -> {{ : "
            + " and ".join(
                [f"0 <= {pr(iv.var)} < {pr(ext)}" for iv, ext in prefix]
                + [f"{p} >= 0" for p in top.params.values()]
            )
            + " }"
        )
    except NonAffine:
        return None
    region = []
    for d in range(len(shape)):
        line = images.project_out(isl.dim_type.set, d + 1, len(shape) - d - 1)
        line = line.project_out(isl.dim_type.set, 0, d)
        region.append(slice_bounds(line.intersect_params(reach), reach, out))
    return region


def _region_map(n, extra=()):
    """The map from the iterations of the loops enclosing an attached stage's nest ``n``
    to the elements it computes there, with the names of those loops' dimensions and the
    parameters' string and its printer (which knows the variables of ``extra`` too); None
    when the region is not affine."""
    names = Namer()
    pvars = [names(iv.var, "l_" + iv.name) for iv, _ in n.prefix]
    printer_names = {iv.var: nm for (iv, _), nm in zip(n.prefix, pvars)}
    params = {}
    exprs = [e for lo_ext in n.region for e in lo_ext] + [ext for _, ext in n.prefix]
    for v in (x for e in [*exprs, *extra] for x in walk(e)):
        if isinstance(v, Var) and v not in printer_names:
            params[v] = printer_names[v] = names(v, "p_" + v.name)
    pr = IslPrinter(printer_names)
    try:
        cons = [f"0 <= {p} < {pr(ext)}" for p, (_, ext) in zip(pvars, n.prefix)]
        outs = [f"e{d}" for d in range(len(n.region))]
        cons += [f"{pr(lo)} <= e{d} < {pr(lo)} + {pr(ext)}" for d, (lo, ext) in enumerate(n.region)]
        cons += [f"{p} >= 0" for p in params.values()]  # sizes
    except NonAffine:
        return None
    ps = "[" + ", ".join(params.values()) + "]"
    region = isl.Map(
        f"{ps} -> {{ [{', '.join(pvars)}] -> [{', '.join(outs)}] : {' and '.join(cons)} }}"
    )
    return region, pvars, ps, pr


def racing_loop(n, parallel: list) -> int | None:
    """The position in ``n.prefix`` (``n``: an attached stage's nest) of the first of
    the ``parallel`` loops whose different iterations compute a common element of the
    stage's region (a shared buffer would be written by two threads), or None; the
    first parallel loop when isl cannot tell (the region is not affine)."""
    if not parallel:
        return None
    made = _region_map(n)
    if made is None:  # not analysable (a split by nparts of a symbolic size): may race
        return parallel[0]
    region, pvars, ps, _ = made
    same = region.apply_range(region.reverse())  # iterations computing a common element
    for k in parallel:
        eq = ", ".join(f"{p} = {q}" for p, q in zip(pvars[:k], [v + "'" for v in pvars[:k]]))
        prime = ", ".join(v + "'" for v in pvars)
        cond = (eq + " and " if eq else "") + f"{pvars[k]} != {pvars[k]}'"
        other = isl.Map(f"{ps} -> {{ [{', '.join(pvars)}] -> [{prime}] : {cond} }}")
        if not same.intersect(other).is_empty():
            return k
    return None


def covers_whole(n, shape) -> bool:
    """Whether the iterations of the loops enclosing an attached stage's nest ``n``
    compute, together, every element of a tensor of ``shape`` (for every size; False
    when isl cannot tell)."""
    made = _region_map(n, shape)
    if made is None:
        return False
    region, _, ps, pr = made
    try:
        dims = [f"e{d}" for d in range(len(shape))]
        box = " and ".join(f"0 <= {e} < {pr(s)}" for e, s in zip(dims, shape)) or "true"
        whole = isl.Set(f"{ps} -> {{ [{', '.join(dims)}] : {box} }}")
    except NonAffine:
        return False
    sizes = " and ".join(f"{p} >= 0" for p in ps[1:-1].split(", ") if p) or "true"
    whole = whole.intersect_params(isl.Set(f"{ps} -> {{ : {sizes} }}"))
    return whole.is_subset(region.range())
