"""Loop bounds of non-rectangular domains, derived from the isl domain (as PPCG does).

A root loop whose bounds name another loop of its stage (``j = pt.reduce_axis((0, i))``,
``k`` in ``[0, i + 1)``) makes the stage's iteration domain a polyhedron, not a box.
Lowering then, per stage:

1. ``root_boxes``: gives each such root its *box*, the range it takes over all values
   of the other loops (the domain projected on it), so that split, fuse and skew
   extents never name a loop variable;
2. guards the statement with the root's own bounds, written in the leaf loops (always
   exact, whatever the schedule);
3. ``leaf_bounds``: tightens each leaf loop to the range its iterations take given the
   outer leaves (the domain in leaf coordinates projected on the first k + 1 leaves,
   the outer k as parameters, then isl's dim_min / dim_max), simplified (gist) for the
   outer values the loops actually reach, and empty where those leave no iteration.
   The loop then runs a 0-based counter offset by that lower bound:

       for i in [1, n):                     for i' in [0, n - 1):           (i = i' + 1)
         for j in [0, i):          ->         for j in [0, i' + 1):
           Y[i] += X[j]                          Y[i' + 1] += X[j]

       reorder(j, i):                       for j in [0, n - 1):
                                               for i' in [0, n - j - 1):   (i = i' + j + 1)

The relations (split, fuse, skew) act on leaf coordinates that start at the box's
minimum, or, for a root whose loops all lie inside the loops its minimum names, at
each iteration's own minimum (``own_min_roots``: a split of ``j`` in ``[k + 1, n)``
tiles from ``k + 1``). ``poly`` places its time vectors on the same coordinates
(``StageNest.root_min``); the counters order like them (each shift depends on outer
leaves only), so the dependence analysis sees the loops that run.
"""

from __future__ import annotations

import islpy as isl

from .errors import ScheduleError
from .expr import Binary, Cmp, Const, Expr, Select, Var, map_children, substitute, vars_of
from .isl_expr import IslPrinter, NonAffine, isl_condition
from .loop_ir import Namer
from .relations import root_sources
from .simplify import Lin, simplify


def dependent_roots(roots: list, dom: dict) -> list:
    """The roots whose bounds (``dom[iv] = (min, extent)``) name another root."""
    root_vars = {iv.var for iv in roots}
    return [iv for iv in roots if any(v in root_vars for e in dom[iv] for v in vars_of(e))]


def own_min_roots(stage, dependent: list, dom: dict, shared=()) -> list:
    """The dependent roots whose leaf loops all lie inside the loops of every root their
    minimum names, and whose value no other bound names: their leaf coordinates start at
    each iteration's own minimum (a split of ``j`` in ``[k + 1, n)`` under ``k`` tiles
    ``[k + 1, n)`` from ``k + 1``), the others' at their box's minimum, as do the roots
    in ``shared`` (loops shared with other stages, see ``compute_with``)."""
    leaves = stage.leaf_iter_vars
    roots = stage.root_iter_vars
    srcs = [root_sources(stage.relations, leaf) for leaf in leaves]
    named_by_others = {v for r in roots for e in dom[r] for v in vars_of(e)}
    out = []
    for iv in dependent:
        if iv.var in named_by_others or iv in shared:
            continue
        mine = [k for k, s in enumerate(srcs) if iv in s]
        outer = {r for r in roots if r.var in set(vars_of(dom[iv][0]))}
        theirs = [k for k, s in enumerate(srcs) if s & outer]
        if mine and all(k < min(mine) for k in theirs):
            out.append(iv)
    return out


class IslSpace:
    """isl names for set dimensions and parameters (every other variable)."""

    def __init__(self, dims: list, parent: IslSpace | None = None):
        """``parent``: another space whose parameter names this one shares."""
        self.namer = parent.namer if parent else Namer()
        self.params: dict = parent.params if parent else {}
        self.dims = [self.namer(v, f"d_{v.name}") for v in dims]
        self.names = {**self.params, **dict(zip(dims, self.dims))}
        self.signed: set = parent.signed if parent else set()  # params of any sign

    def printer(self, exprs) -> IslPrinter:
        for e in exprs:
            for v in vars_of(e):
                if v not in self.names:
                    self.params[v] = self.names[v] = self.namer(v, f"p_{v.name}")
        return IslPrinter(self.names)

    def set(self, cons: list[str]) -> isl.Set:
        cons = cons + [f"{p} >= 0" for v, p in self.params.items() if v not in self.signed]
        ps = ", ".join(self.params.values())
        return isl.Set(f"[{ps}] -> {{ [{', '.join(self.dims)}] : {' and '.join(cons)} }}")

    def var_of(self, name: str) -> Var:
        return next(v for v, n in (*self.names.items(), *self.params.items()) if n == name)


def _range(pr: IslPrinter, x: str, lo: Expr, ext: Expr) -> str:
    return f"{pr(lo)} <= {x} < {pr(lo)} + {pr(ext)}"


def root_boxes(stage_name: str, roots: list, dom: dict, dependent: list, shared: int = 0) -> dict:
    """``{root: (min, extent)}`` of each dependent root over all values of the others,
    in sizes and enclosing loops only. The first ``shared`` roots (loops shared with
    other stages by ``compute_with``) take the range their own bounds and the outer
    roots' give, whatever the inner loops: the same in every stage sharing them."""
    sp = IslSpace([iv.var for iv in roots])
    dom, atoms = opaque_atoms(dom, {iv.var for iv in roots})
    pr = sp.printer([e for iv in roots for e in dom[iv]])
    sp.signed.update(atoms)
    try:
        cons = [_range(pr, sp.names[iv.var], *dom[iv]) for iv in roots]
    except NonAffine as e:
        bad = next(iv for iv in dependent)
        lo, ext = dom[bad]
        raise ScheduleError(
            f"stage '{stage_name}': the range [{lo}, {simplify(lo + ext)}) of loop {bad.name} "
            f"is not affine in the outer loops and sizes ({e} is not); write it with "
            "+, -, multiplication by constants, // and % by constants, min and max"
        ) from None
    domain = sp.set(cons)
    out = {}
    for iv in dependent:
        d = roots.index(iv)
        if d < shared:
            domain = sp.set(cons[: d + 1] + [f"{x} = 0" for x in sp.dims[d + 1 :]])
        else:
            domain = sp.set(cons)
        line = domain.project_out(isl.dim_type.set, d + 1, len(roots) - d - 1)
        line = line.project_out(isl.dim_type.set, 0, d)
        lo, hi = line.dim_min(0).coalesce(), line.dim_max(0).coalesce()
        ext = hi.sub(lo).add_constant_val(isl.Val.one(hi.get_ctx()))
        out[iv] = tuple(substitute(pw_aff_expr(x, sp), atoms) for x in (lo, ext))
    return out


def opaque_atoms(dom: dict, dims: set) -> tuple:
    """``dom`` (``{root: (min, extent)}``) with each largest sub-expression that isl
    cannot represent but that names none of ``dims`` replaced by a fresh variable, a
    parameter for isl, and ``{variable: sub-expression}``. A stage attached inside a
    fused loop has its region start at ``f // n``: its loop ``k`` in ``[0, i + 1)`` then
    ranges over ``[0, q + 1)`` with ``q = f // n`` fixed per attach iteration."""
    atoms, seen = {}, {}
    check = IslPrinter(_Everything())

    def go(e: Expr) -> Expr:
        if not any(v in dims for v in vars_of(e)):
            try:
                check(e)
                return e
            except NonAffine:
                if id(e) not in seen:  # the same object, the same parameter
                    seen[id(e)] = Var(f"q{len(seen)}", "int64")
                    atoms[seen[id(e)]] = e
                return seen[id(e)]
        return map_children(e, go)

    return {iv: (go(lo), go(ext)) for iv, (lo, ext) in dom.items()}, atoms


class _Everything(dict):
    """Every variable has an isl name (only whether the expression is affine matters)."""

    def __contains__(self, v):
        return True

    def __getitem__(self, v):
        return "x"


def _leaf_constraints(leaves: list, box_ext: dict, root_value: dict, dom: dict, guards: list):
    """``(space, domain, box)``: the isl constraints over the leaves of the domain (the
    roots' true bounds and the relations' ``guards``) and of each leaf's box; None when
    one is not affine. Arguments as in ``leaf_bounds``."""
    sp = IslSpace([iv.var for iv in leaves])
    to_leaves = {iv.var: v for iv, v in root_value.items()}
    bounds = [
        (root_value[iv], substitute(lo, to_leaves), substitute(ext, to_leaves))
        for iv, (lo, ext) in dom.items()
    ]
    pr = sp.printer([e for b in bounds for e in b] + list(box_ext.values()) + guards)
    try:
        cons = [_range(pr, pr(v), lo, ext) for v, lo, ext in bounds]
        cons += [isl_condition(g, pr) for g in guards]
    except NonAffine:
        return None
    box_cons = []
    for iv in leaves:
        box_cons.append(f"0 <= {sp.names[iv.var]}")
        try:
            box_cons.append(f"{sp.names[iv.var]} < {pr(box_ext[iv])}")
        except NonAffine:
            pass  # the roots' bounds bound it
    return sp, cons, box_cons


def leaf_bounds(
    leaves: list, tighten: set, box_ext: dict, root_value: dict, dom: dict, guards: list
):
    """``({leaf: (min, extent)}, exact)`` for the leaves in ``tighten``: the exact range
    of each given the outer leaves (in the outer leaves' own values and the sizes), and
    whether the loops so bounded run exactly the domain (no point outside it: then no
    guard is needed); None when a leaf's relation to the roots is not affine (the box
    and guards then stay).

    ``root_value[root]`` is the root in leaf variables, ``dom[root]`` its true
    ``(min, extent)`` in root variables, ``box_ext[leaf]`` the leaf's box extent,
    ``guards`` the conditions the relations put on the leaves (the range of a split's
    inner loop that was skewed or fused since, ...)."""
    found = _leaf_constraints(leaves, box_ext, root_value, dom, guards)
    if found is None:
        return None
    ctx = isl.DEFAULT_CONTEXT  # a budget: symbolic sizes under min() can take isl minutes
    before = ctx.get_max_operations()
    ctx.reset_operations()
    ctx.set_max_operations(LEAF_BOUNDS_OPERATIONS)
    try:
        return _leaf_bounds(leaves, tighten, *found)
    except isl.Error:  # over budget: the box and guards stay (right, a little slower)
        return None
    finally:
        ctx.set_max_operations(before)


# isl operations for one stage's tightened bounds (about a second); every PolyBench
# kernel and template needs far fewer
LEAF_BOUNDS_OPERATIONS = 2_000_000


def _leaf_bounds(leaves: list, tighten: set, sp, cons: list, box_cons: list):
    domain, box = sp.set(cons + box_cons), sp.set(box_cons)
    # the outermost loop runs for every value of the sizes and enclosing loops (its bound
    # must be right where the box is empty too: not positive); inner ones where outer run
    reach = sp.set([]).params()
    out = {}
    for k, iv in enumerate(leaves):
        if iv in tighten:
            line = _slice(domain, k).intersect_params(reach)
            out[iv] = slice_bounds(line, reach, sp)
            le = isl.Map.lex_le(line.get_space())  # the slice's hull: what the loop runs
            line = line.apply(le).intersect(line.apply(le.reverse()))
        else:
            line = _slice(box, k).intersect_params(reach)
        reach = line.move_dims(isl.dim_type.param, line.dim(isl.dim_type.param), *_SET0).params()
    every = domain.move_dims(isl.dim_type.param, len(sp.params), isl.dim_type.set, 0, len(leaves))
    return out, reach.is_subset(every.params())


_SET0 = (isl.dim_type.set, 0, 1)


def shared_domain(n, true_dom: dict, conds: list):
    """``(set, params)``: the points of nest ``n`` (a ``lowering.StageNest``) in the loops
    it shares with other stages (``compute_with``), an isl set over ``s0, s1, ...`` (the
    shared leaves, whose counters are the same in every member), ``params`` its
    parameters' names -> variables; None when a relation is not affine. The merged loops
    run the hull of the members' sets (``shared_bounds``), not the box."""
    leaves = n.stage.leaf_iter_vars
    guards = [c for c, _ in conds]
    found = _leaf_constraints(leaves, n.box_ext, n.root_value, true_dom, guards)
    if found is None:
        return None
    sp, cons, box_cons = found
    k = n.shared
    points = sp.set(cons + box_cons).project_out(isl.dim_type.set, k, len(leaves) - k)
    params = {}
    for d in range(points.dim(isl.dim_type.param)):
        v = sp.var_of(points.get_dim_name(isl.dim_type.param, d))
        params[name := f"p{id(v)}"] = v
        points = points.set_dim_name(isl.dim_type.param, d, name)
    for d in range(k):
        points = points.set_dim_name(isl.dim_type.set, d, f"s{d}")
    return points.coalesce(), params


def shared_bounds(sets: list, level: int, outer: list, params: dict):
    """``(lo, hi)``: the range of shared loop ``level`` over the union of the members'
    ``sets`` (``shared_domain``), given the outer shared loops' values ``outer`` (Exprs);
    None when the members give none."""
    union = None
    for s in sets:
        s = s.project_out(isl.dim_type.set, level + 1, s.dim(isl.dim_type.set) - level - 1)
        if union is not None:  # both with every parameter, in one order
            s = s.align_params(union.get_space())
            union = union.align_params(s.get_space()).union(s)
        else:
            union = s
    line = union.move_dims(isl.dim_type.param, union.dim(isl.dim_type.param),
                           isl.dim_type.set, 0, level).coalesce()  # fmt: skip
    if line.is_empty():
        return None
    where = line.params()
    lo, hi = line.dim_min(0), line.dim_max(0).add_constant_val(isl.Val.one(line.get_ctx()))
    # the loop is reached for every size and outer value (all >= 0), also where no
    # member has a point (symbolic sizes too small): it must run nothing there
    reach = isl.Set.universe(where.get_space())
    for d in range(reach.dim(isl.dim_type.param)):
        reach = reach.lower_bound_val(isl.dim_type.param, d, 0)
    outside = reach.subtract(where)
    if not outside.is_empty():
        zero = isl.PwAff.val_on_domain(outside, isl.Val.zero(line.get_ctx()))
        lo, hi = lo.union_add(zero), hi.union_add(zero)
    names = {**params, **{f"s{d}": e for d, e in enumerate(outer)}}
    build = isl.AstBuild.from_context(reach)
    return tuple(
        _from_ast(build.expr_from_pw_aff(pa.gist(reach).coalesce()), names.__getitem__)
        for pa in (lo, hi)
    )


def tighten(n, true_dom: dict, conds: list, ranges) -> list:
    """Leaf loops of the non-rectangular stage of nest ``n`` (a ``lowering.StageNest``)
    run over their exact range given the outer leaves (``leaf_bounds``), as counters
    from its lower bound; its root values and the guards ``conds`` are rewritten in
    those counters. A pure stage's spatial loops outside its first reduce loop keep
    their box (its init statement runs over all of them); the init nest keeps the box
    of the spatial loops inside too (``n.init_value``, ``n.init_conds``); so do the
    ``n.shared`` outer loops a stage shares with others (``compute_with``)."""
    st = n.stage
    leaves = st.leaf_iter_vars
    first = next((k for k, iv in enumerate(leaves) if iv.kind == "reduce"), len(leaves))
    chosen = set(leaves if st.is_update else leaves[first:]) - set(leaves[: n.shared])
    guards = [c for c, _ in conds]
    found = leaf_bounds(leaves, chosen, n.box_ext, n.root_value, true_dom, guards)
    if found is None:
        return conds
    tight, exact = found
    n.init_value, n.init_conds = dict(n.root_value), conds  # the init nest keeps the box
    if exact:  # the loops run exactly the domain: the update nest needs no guard
        conds = [(c, red) for c, red in conds if not red]
    n.tightened = True
    shift = {}
    for iv in leaves:
        if iv not in tight:
            continue
        lo, ext = (simplify(substitute(e, shift), ranges) for e in tight[iv])
        n.leaf_ext[iv] = ext
        if not (isinstance(lo, Const) and lo.value == 0):
            shift[iv.var] = Binary("add", iv.var, lo, "int64")
    n.root_value = {iv: simplify(substitute(v, shift), ranges) for iv, v in n.root_value.items()}
    return [(substitute(c, shift), red) for c, red in conds]


def _slice(s: isl.Set, k: int) -> isl.Set:
    """Dimension k of ``s`` alone, the dimensions before it made parameters."""
    s = s.project_out(isl.dim_type.set, k + 1, s.dim(isl.dim_type.set) - k - 1)
    return s.move_dims(isl.dim_type.param, s.dim(isl.dim_type.param), isl.dim_type.set, 0, k)


def slice_bounds(line: isl.Set, reach: isl.Set, sp: IslSpace) -> tuple:
    """(min, extent) of a slice for the outer values in ``reach``: exact where the slice
    is not empty; where it is empty the extent is not positive. The minimum matters only
    where the extent is positive. One affine extent is kept when it is not positive
    wherever the slice is empty (``n - j - 1``), else the extent gets a piece 0 there."""
    lo, hi = line.dim_min(0), line.dim_max(0)
    where = lo.domain()
    ext = hi.sub(lo).add_constant_val(isl.Val.one(lo.get_ctx()))
    outside = reach.subtract(where)
    simple = ext.gist(where).coalesce()
    if simple.n_piece() == 1:  # one affine function: check it where the slice is empty
        aff = simple.get_pieces()[0][1]
        simple = isl.PwAff.from_aff(aff).intersect_domain(reach)
        if simple.pos_set().intersect(outside).is_empty():
            return pw_aff_expr(lo, sp, where), pw_aff_expr(simple, sp, reach)
    if not outside.is_empty():
        zero = isl.PwAff.val_on_domain(outside, isl.Val.zero(lo.get_ctx()))
        ext = ext.union_add(zero)
    return pw_aff_expr(lo, sp, where), pw_aff_expr(ext.coalesce(), sp, reach)


def pw_aff_expr(pa: isl.PwAff, sp: IslSpace, context: isl.Set | None = None) -> Expr:
    """A pypto expression equal to ``pa`` wherever ``context`` holds (through isl's AST
    builder); 0 where it is defined nowhere (the bounds of an empty domain)."""
    if pa.domain().is_empty():
        return Const(0, "int64")
    if context is None:
        context = isl.Set.universe(pa.domain().get_space())
    build = isl.AstBuild.from_context(context)
    return _from_ast(build.expr_from_pw_aff(pa.gist(context)), sp.var_of)


def _int(a: Expr, b: Expr, op: str) -> Expr:
    return Binary(op, a, b, "int64")


_OPS = isl.ast_expr_op_type
_AST_RULES = {
    _OPS.add: lambda a: _int(a[0], a[1], "add"),
    _OPS.sub: lambda a: _int(a[0], a[1], "sub"),
    _OPS.mul: lambda a: _int(a[0], a[1], "mul"),
    _OPS.minus: lambda a: _int(Const(0, "int64"), a[0], "sub"),
    _OPS.min: lambda a: _fold(a, "min"),
    _OPS.max: lambda a: _fold(a, "max"),
    _OPS.fdiv_q: lambda a: _int(a[0], a[1], "floordiv"),
    _OPS.pdiv_q: lambda a: _int(a[0], a[1], "floordiv"),
    _OPS.div: lambda a: _int(a[0], a[1], "floordiv"),
    _OPS.pdiv_r: lambda a: _int(a[0], a[1], "mod"),
    _OPS.zdiv_r: lambda a: _int(a[0], a[1], "mod"),  # only ever compared with 0
    _OPS.cond: lambda a: _select(*a),
    _OPS.select: lambda a: _select(*a),
    _OPS.eq: lambda a: Cmp("eq", a[0], a[1]),
    _OPS.le: lambda a: Cmp("le", a[0], a[1]),
    _OPS.lt: lambda a: Cmp("lt", a[0], a[1]),
    _OPS.ge: lambda a: Cmp("ge", a[0], a[1]),
    _OPS.gt: lambda a: Cmp("gt", a[0], a[1]),
    _OPS.and_: lambda a: Binary("and", a[0], a[1], "bool"),
    _OPS.and_then: lambda a: Binary("and", a[0], a[1], "bool"),
    _OPS.or_: lambda a: Binary("or", a[0], a[1], "bool"),
    _OPS.or_else: lambda a: Binary("or", a[0], a[1], "bool"),
}


# a condition ``d >= 0`` as d - (f - t): -1 or 0 means ``f > t`` or ``f >= t``, so
# ``t`` is the smaller (min); d + (f - t) of -1 or 0 means ``t`` is the larger (max)
def _select(cond: Expr, t: Expr, f: Expr) -> Expr:
    """``cond ? t : f``, as ``min(t, f)`` or ``max(t, f)`` when that is what it says (isl's
    AST writes minima as selects; loop partitioning and the simplifier know min)."""
    if isinstance(cond, Cmp) and cond.op in _NONNEG:
        d = _NONNEG[cond.op](Lin.of(cond.a), Lin.of(cond.b))
        g = Lin.of(f).plus(Lin.of(t), -1, "int64")
        for op, sign in (("min", -1), ("max", 1)):
            diff = d.plus(g, sign, "int64")
            if not diff.terms and diff.const in (-1, 0):
                return _int(t, f, op)
    return Select(cond, t, f, "int64")


_NONNEG = {  # Cmp(op, a, b) as ``d >= 0``
    "ge": lambda a, b: a.plus(b, -1, "int64"),
    "gt": lambda a, b: a.plus(b, -1, "int64").plus(Lin({}, 1, "int64"), -1, "int64"),
    "le": lambda a, b: b.plus(a, -1, "int64"),
    "lt": lambda a, b: b.plus(a, -1, "int64").plus(Lin({}, 1, "int64"), -1, "int64"),
}


def _fold(args: list, op: str) -> Expr:
    out = args[0]
    for a in args[1:]:
        out = _int(out, a, op)
    return out


def _from_ast(e: isl.AstExpr, var_of) -> Expr:
    """An isl AST expression as a pypto one; ``var_of(name)``: the variable of a name."""
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return Const(e.get_val().to_python(), "int64")
    if t == isl.ast_expr_type.id:
        return var_of(e.get_id().get_name())
    args = [_from_ast(e.get_op_arg(k), var_of) for k in range(e.get_op_n_arg())]
    return _AST_RULES[e.get_op_type()](args)


def bound_guards(dependent: list, dom: dict, root_value: dict) -> list:
    """``[(cond, is_reduce)]``: each dependent root within its own bounds, in leaves."""
    to_leaves = {iv.var: v for iv, v in root_value.items()}
    out = []
    for iv in dependent:
        lo, ext = (substitute(e, to_leaves) for e in dom[iv])
        v = root_value[iv]
        red = iv.kind == "reduce"
        out.append((Cmp("ge", v, lo), red))
        out.append((Cmp("lt", v, Binary("add", lo, ext, "int64")), red))
    return out
