"""Bound inference: a schedule's per-stage loop nests, before any statement exists.

For each stage, in the order the attach tree needs:

1. its domain: the whole tensor at the root, or, under ``compute_at``, the
   region its consumers read during one iteration of the attach loop
   (indices relaxed over the inner loops by interval arithmetic, or exactly
   by isl where that is tighter, clamped to the tensor; ``regions``);
2. its loops: leaf extents from the split/fuse relations, root indices as
   expressions of the leaves, and a guard for each split that may overrun;
   where a loop's bounds name other loops, bounds from the isl domain
   (``domain``).

``infer(sch, checks, args)`` is the whole answer, a frozen ``Nests`` record
(every stage's ``StageNest``, frozen too) that the legality check, tensorize
and lowering take as data. ``Bounds(sch).nest(stage)`` infers one stage on
demand (a primitive's check needs a few stages of a schedule still being
built; ``explain`` shows what it can). Nothing here builds statements or
changes the schedule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import domain, regions
from .attach import check_init_reads, in_shared_loops
from .bounds_check import NO_REPORT, BoundsReport, unchecked
from .compute_with import shared_after, shared_loops
from .dtypes import INDEX
from .errors import ScheduleError
from .expr import (
    Binary,
    Const,
    Expr,
    Reduce,
    TensorRead,
    Var,
    map_children,
    stored_as,
    substitute,
    tensor_reads,
    vars_of,
    walk,
)
from .intervals import INF, Ranges, bounds
from .simplify import simplify, upper_bound
from .stage import Stage
from .tensor import IterVar, Tensor

if TYPE_CHECKING:  # a type only: the schedule module imports this one
    from .schedule import Schedule


def _zero_if_single(iv: IterVar, ext: Expr) -> Expr:
    return Const(0, iv.var.dtype) if isinstance(ext, Const) and ext.value == 1 else iv.var


class FrozenDict(dict):
    """A dict that refuses every change (read as fast as a dict, unlike a mapping proxy)."""

    __slots__ = ()

    def _refuse(self, *args, **kwargs):
        raise TypeError("the inferred nests are read-only")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse


class _Draft:
    """A stage's nest while it is inferred (``domain.tighten`` refines it in place)."""

    def __init__(self, stage: Stage):
        self.stage = stage
        self.region = None  # [(min, extent)] per output dimension
        self.prefix = []  # enclosing leaves [(IterVar, extent)] of the attach point
        self.leaf_ext = {}  # IterVar -> loop extent (may name outer leaves)
        self.box_ext = {}  # IterVar -> extent of the leaf's box (sizes and enclosing loops)
        self.root_min = {}  # root IterVar -> the value its leaf coordinates start from
        self.root_value = {}  # root IterVar -> Expr of leaves
        self.true_dom = {}  # root IterVar -> (min, extent), possibly naming other roots
        self.tightened = False  # loops bounded per outer iteration (a polyhedral domain)
        self.shared = 0  # outer loops shared with other stages (compute_with): kept whole
        self.shared_domain = None  # the points in them (domain.shared_domain)
        self.init_value = None  # root_value and guards of a reduction's init nest, which
        self.init_conds = None  # keeps the box of its spatial loops (see domain.tighten)
        self.init_guards = {}
        self.guards = {}  # leaf position -> [(cond, is_reduce)]
        self.ext = {}  # every IterVar of the stage (roots, splits' parts) -> extent


@dataclass(frozen=True, slots=True, eq=False)
class StageNest:
    """One stage's loop nest, as bound inference found it (fields as in ``_Draft``)."""

    stage: Stage
    region: tuple
    prefix: tuple
    leaf_ext: Mapping
    box_ext: Mapping
    root_min: Mapping
    root_value: Mapping
    true_dom: Mapping
    tightened: bool
    shared: int
    shared_domain: tuple | None
    init_value: Mapping
    init_conds: list | None
    init_guards: Mapping
    guards: Mapping
    ext: Mapping

    @property
    def context(self) -> list:
        """Enclosing and own leaves with their box extents (a superset of each range)."""
        return [*self.prefix, *((iv, self.box_ext[iv]) for iv in self.stage.leaf_iter_vars)]


class _Reads:
    """What the inference and its result both answer: the stages' expanded bodies, their
    reads, and indices in leaf variables."""

    sch: Schedule
    bodies: dict
    more_bodies: dict
    lhs: dict
    ranges: Ranges
    args: list

    def stage_of(self, t: Tensor) -> Stage:
        return self.sch.stage_map[t.op]

    def reads(self, st: Stage) -> list:
        """Every tensor read of a stage, the data-dependent indices of an update included."""
        exprs = [self.bodies[st], *self.more_bodies[st], *self.lhs.get(st, ())]
        return [r for e in exprs for r in tensor_reads(e)]

    def in_leaves(self, n: StageNest, e: Expr) -> Expr:
        """Express ``e`` (over the stage's root variables) in its leaf loop variables."""
        return substitute(e, {iv.var: v for iv, v in n.root_value.items()})

    def parallel_prefix(self, n: StageNest) -> list:
        """The positions of the parallel loops among those enclosing nest ``n``."""
        owner = {iv: s for s in self.sch.stages for iv in s.leaf_iter_vars}
        return [k for k, (iv, _) in enumerate(n.prefix) if owner[iv].attrs.get(iv) == "parallel"]

    def local_shape(self, st: Stage):
        """The shape of an attached stage's region (its own small buffer): constant, or,
        inside a parallel loop whose iterations compute common elements, in the sizes
        (each iteration's buffer sized at run time, as TVM's; the tensor's where the region
        is not affine); None when the stage writes a shared, full-size buffer."""
        if st.attach is None or st in {self.sch.stage_map.get(t.op) for t in self.args}:
            return None
        n = self.nest(st)
        sizes = [upper_bound(e, self.ranges) for _, e in n.region]
        if not any(x == INF for x in sizes):
            return sizes
        if regions.racing_loop(n, self.parallel_prefix(n)) is None:
            return None  # a shared buffer: no two threads compute one element
        relaxed = {iv.var: ext for iv, ext in n.prefix}  # the most any iteration needs
        out = []
        for (_, e), whole in zip(n.region, st.op.shape):
            r = regions.relax(e, relaxed, self.ranges)
            ok = r is not None and not tensor_reads(r[1])  # else the region's dimension
            out.append(simplify(r[1], self.ranges) if ok else whole)  # is within the tensor's
        return out


@dataclass(frozen=True, eq=False)
class Nests(_Reads):
    """Bound inference's answer (``infer``): every computed stage's ``StageNest`` and
    what they were built from. Legality, tensorize and lowering read it; nothing
    changes it."""

    sch: Schedule
    nests: Mapping  # Stage -> StageNest, every stage that is neither a placeholder nor inlined
    bodies: Mapping  # Stage -> its body, inlined producers expanded
    more_bodies: Mapping  # Stage -> a multi-output stage's other bodies
    lhs: Mapping  # update Stage -> the indices it writes
    consumers: Mapping  # Stage -> the stages that read it
    ranges: Ranges  # every leaf variable's range
    args: tuple  # the argument tensors
    checks: BoundsReport

    def nest(self, st: Stage) -> StageNest:
        return self.nests[st]


def infer(sch: Schedule, checks: BoundsReport = NO_REPORT, args=()) -> Nests:
    """Bound inference as one function: the schedule's nests, each stage's loops, extents,
    guards and region (``args``: the argument tensors, already checked)."""
    b = Bounds(sch, checks, args)
    for st in sch.stages:
        if not st.is_placeholder and not st.inline:
            b.nest(st)
    ro = FrozenDict
    return Nests(
        sch, ro(b.nests), ro(b.bodies), ro(b.more_bodies), ro(b.lhs), ro(b.consumers),
        b.ranges, tuple(b.args), checks,
    )  # fmt: skip


class Bounds(_Reads):
    """The loop nests of a schedule's stages (``nest``), and what they are built from: the
    stages' bodies with inlined producers expanded, their reads, their consumers.

    ``args``: the argument tensors, already checked (their stages keep full-size buffers).
    """

    def __init__(self, sch: Schedule, checks: BoundsReport = NO_REPORT, args=()):
        self.sch = sch
        self.checks = checks  # accesses isl could not prove get run-time checked indices
        self.ranges = Ranges()
        self.nests: dict[Stage, StageNest] = {}
        self.bodies: dict[Stage, Expr] = {}
        self.more_bodies: dict[Stage, tuple] = {}  # a multi-output stage's other bodies
        self.lhs: dict[Stage, tuple] = {}  # update stages: the indices they write
        self.in_progress: set = set()
        for st in sch.stages:  # sizes are never negative
            for d in st.op.shape:
                for v in vars_of(d):
                    self.ranges[v] = (0, INF)
        self.args = list(args)
        self._inline_bodies()
        self.consumers = self._consumers()

    # ------------------------------------------------------------ set-up

    def _inline_bodies(self):
        def expand(e):
            e = map_children(self.checks.guarded(e), expand)
            if isinstance(e, TensorRead):
                st = self.stage_of(e.tensor)
                if st.inline:  # rounded to a 16-bit float stage's type, as its buffer does
                    body = stored_as(self.bodies[st], st.op.dtype)  # rounded as stored
                    return substitute(body, {iv.var: i for iv, i in zip(st.op.axis, e.indices)})
            return e

        for st in self.sch.stages:
            if st.is_placeholder:
                continue
            if not st.is_update and len(st.origin_op.updates) != st.n_updates:
                raise ScheduleError(
                    f"{st.name} was given update definitions after create_schedule; create the "
                    "schedule once all updates are defined"
                )
            body, *more = (map_children(b, expand) if isinstance(b, Reduce) else expand(b)
                           for b in st.op.bodies)  # fmt: skip
            self.bodies[st] = body
            self.more_bodies[st] = tuple(more)
            if st.is_update:
                self.lhs[st] = tuple(expand(i) for i in self.checks.guarded_lhs(st.op))

    def _consumers(self) -> dict:
        cons = {st: [] for st in self.sch.stages}
        for st in self.sch.stages:
            if st.is_placeholder or st.inline:
                continue
            for e in self.reads(st):
                p = self.stage_of(e.tensor)
                if st not in cons[p]:
                    cons[p].append(st)
        return cons

    # ------------------------------------------------------------ domains and loops

    def nest(self, st: Stage) -> StageNest:
        n = self.nests.get(st)
        if n is not None:
            return n
        if st in self.in_progress:
            raise ScheduleError(
                f"compute_at: stage '{st.name}' is attached inside its own consumer chain (a cycle)"
            )
        self.in_progress.add(st)
        d = _Draft(st)
        self._domain(d)
        self._loops(d)
        self.in_progress.discard(st)
        ro = FrozenDict  # a nest is data once inferred
        n = self.nests[st] = StageNest(
            st, tuple(d.region), tuple(d.prefix), ro(d.leaf_ext), ro(d.box_ext),
            ro(d.root_min), ro(d.root_value), ro(d.true_dom), d.tightened,
            d.shared, d.shared_domain,
            ro(d.init_value), d.init_conds, ro(d.init_guards), ro(d.guards), ro(d.ext),
        )  # fmt: skip
        return n

    def _domain(self, n: _Draft):
        st = n.stage
        shape = st.op.shape
        if st.attach is None:
            n.region = [(Const(0, INDEX), s) for s in shape]
            return
        q, L = st.attach[0], st.attach_loop
        if q.inline:
            raise ScheduleError(f"compute_at on stage '{st.name}': target '{q.name}' is inlined")
        qn = self.nest(q)
        if L not in q.leaf_iter_vars:
            raise ScheduleError(
                f"compute_at on stage '{st.name}': loop {st.attach[1].name} is no longer a "
                f"loop of '{q.name}' (it was skewed or shifted after compute_at)"
            )
        ctx = qn.context
        pos = [iv for iv, _ in ctx].index(L)
        n.prefix = ctx[: pos + 1]
        prefix_ids = [id(iv) for iv, _ in n.prefix]
        lo = [None] * len(shape)
        hi = [None] * len(shape)
        consumers = self.consumers[st]
        accesses, exact = [], False  # exact: intervals may be too wide, ask isl
        boxed = False  # a read inside an update's reduction: intervals only
        if not consumers:
            raise ScheduleError(f"compute_at on stage '{st.name}': nothing reads it")
        for c in consumers:
            cn = self.nest(c)
            cn, cctx = in_shared_loops(st, cn, q, qn, len(prefix_ids)) or (cn, cn.context)
            if [id(iv) for iv, _ in cctx[: len(prefix_ids)]] != prefix_ids:
                what = f"the pure definition of '{c.name}'" if c.n_updates else f"'{c.name}'"
                if shared_after(c, q) >= len(prefix_ids):
                    raise ScheduleError(
                        f"compute_at on stage '{st.name}': its consumer '{c.name}' runs "
                        f"before '{q.name}' in the loops they share (compute_with), so the "
                        f"values computed at {L.name} would not be ready; compute "
                        f"'{c.name}' with '{q.name}', after it"
                    )
                raise ScheduleError(
                    f"compute_at on stage '{st.name}': its consumer {what} runs outside "
                    f"loop {L.name} of '{q.name}', so the values would not be ready"
                )
            check_init_reads(st, c, self.bodies[c], n.prefix, self.stage_of)
            relaxed = {iv.var: ext for iv, ext in cctx[len(prefix_ids) :]}
            inner = cctx[len(prefix_ids) :]
            exact |= cn.tightened  # a consumer whose loops are not a box
            within = self._inner_reductions(c, cn, relaxed)
            boxed |= bool(within)
            for read in self.reads(c):
                if self.stage_of(read.tensor) is not st:
                    continue
                indices = [  # unchecked: the region is clamped into the shape below
                    simplify(unchecked(substitute(self.in_leaves(cn, i), within)), self.ranges)
                    for i in read.indices
                ]
                accesses.append((cn, inner, indices))
                for d, idx in enumerate(indices):
                    exact |= regions.needs_exact(idx, relaxed)
                    # an index read from data (a gather) bounds nothing the loops can use
                    # before the read: the whole dimension
                    r = None if tensor_reads(idx) else regions.relax(idx, relaxed, self.ranges)
                    if r is None:  # not analysable: the whole dimension
                        r = (Const(0, INDEX), Binary("sub", shape[d], Const(1, INDEX), INDEX))
                    lo[d] = r[0] if lo[d] is None else Binary("min", lo[d], r[0], INDEX)
                    hi[d] = r[1] if hi[d] is None else Binary("max", hi[d], r[1], INDEX)
        region = []
        for d, s in enumerate(shape):
            a = simplify(Binary("max", lo[d], Const(0, INDEX), INDEX), self.ranges)
            b = simplify(
                Binary("min", hi[d], Binary("sub", s, Const(1, INDEX), INDEX), INDEX),
                self.ranges,
            )
            region.append(
                (
                    a,
                    simplify(
                        Binary("add", Binary("sub", b, a, INDEX), Const(1, INDEX), INDEX),
                        self.ranges,
                    ),
                )
            )
        if exact and not boxed:
            region = self._exact_region(st, region, accesses, n.prefix)
        n.region = region

    def _inner_reductions(self, c: Stage, cn: StageNest, relaxed: dict) -> dict:
        """The axes of the reductions inside update ``c``'s value (``update_reduce``: no
        loops of its schedule) as counters from 0 that ``relaxed`` sweeps: ``{axis var:
        counter + minimum}``, bounds in ``c``'s leaves."""
        within: dict = {}
        if not c.is_update:
            return within
        for red in (x for x in walk(self.bodies[c]) if isinstance(x, Reduce)):
            for iv in red.axes:
                k = Var(f"{iv.name}.all", INDEX)
                lo, ext = (self.in_leaves(cn, substitute(e, within)) for e in iv.dom)
                relaxed[k] = simplify(ext, self.ranges)
                within[iv.var] = Binary("add", k, lo, INDEX)
        return within

    def _exact_region(self, st: Stage, region: list, accesses: list, prefix: list) -> list:
        """Per dimension, the exact hull (``regions.read_region``) where it is smaller."""
        better = regions.read_region(st.op.shape, accesses, prefix)
        if better is None:
            return region
        out = []
        for (lo, ext), (xlo, xext) in zip(region, better):
            xext = simplify(xext, self.ranges)
            if upper_bound(xext, self.ranges) < upper_bound(ext, self.ranges):
                lo, ext = simplify(xlo, self.ranges), xext
            out.append((lo, ext))
        return out

    def _loops(self, n: _Draft):
        st = n.stage
        ext = {}
        dom_min = {}
        if st.is_update:  # an update iterates its whole reduction domain
            for iv in st.op.axis:
                ext[iv], dom_min[iv] = iv.extent, iv.dom_min
        else:
            for iv, (m, e) in zip(st.op.axis, n.region):
                ext[iv], dom_min[iv] = e, m
        for iv in st.op.reduce_axis:
            ext[iv], dom_min[iv] = iv.extent, iv.dom_min
        true_dom = n.true_dom = {iv: (dom_min[iv], ext[iv]) for iv in st.root_iter_vars}
        dependent = domain.dependent_roots(st.root_iter_vars, true_dom)
        n.shared = shared_loops(st)  # shared loops count alike in every stage
        if dependent:  # a polyhedron: relations work on the box of each such root
            own = domain.own_min_roots(st, dependent, true_dom, st.root_iter_vars[: n.shared])
            offsets = {iv: (Const(0, INDEX), true_dom[iv][1]) for iv in own}
            for iv, (m, e) in domain.root_boxes(
                st.name, st.root_iter_vars, {**true_dom, **offsets}, dependent, n.shared
            ).items():
                dom_min[iv], ext[iv] = (true_dom[iv][0], e) if iv in own else (m, e)
        for rel in st.relations:  # extents flow down (relations.py)
            ext.update(rel.extents(ext))
        for iv in list(ext):
            ext[iv] = simplify(ext[iv], self.ranges)
        for iv in st.leaf_iter_vars:
            hi = bounds(ext[iv], self.ranges)[1]
            self.ranges[iv.var] = (0, hi - 1 if hi != INF else INF)
            if hi == INF:
                self.ranges.extents[iv.var] = ext[iv]
        n.leaf_ext = {iv: ext[iv] for iv in st.leaf_iter_vars}
        n.box_ext = dict(n.leaf_ext)
        n.ext = ext
        # values of every iteration variable in terms of the leaves
        # a loop of one iteration is 0 (so chains of attached stages do not drag a
        # variable per level through every region expression)
        val = {iv: _zero_if_single(iv, ext[iv]) for iv in st.leaf_iter_vars}
        conds = []

        def simp(e):
            return simplify(e, self.ranges)

        for rel in reversed(st.relations):  # values flow up, guards where parts overrun
            up, guards = rel.values(val, ext, simp)
            val.update(up)
            conds += guards
        n.root_min = dom_min
        n.root_value = {}  # a minimum may name roots before it: their values, in leaves
        for iv in st.root_iter_vars:
            m = substitute(dom_min[iv], {r.var: v for r, v in n.root_value.items()})
            n.root_value[iv] = simplify(m + val[iv], self.ranges)
        if dependent:
            conds += domain.bound_guards(dependent, true_dom, n.root_value)
        if n.shared and conds:  # a member of a compute_with group, not a box
            n.shared_domain = domain.shared_domain(n, true_dom, conds)
        if dependent:
            conds = domain.tighten(n, true_dom, conds, self.ranges)
        n.guards = self._place_guards(st, conds)
        if n.init_conds is None:
            n.init_value, n.init_guards = n.root_value, n.guards
        else:
            n.init_guards = self._place_guards(st, n.init_conds)

    def _place_guards(self, st: Stage, conds: list) -> dict:
        """Each condition at the innermost leaf it names: {position: [(cond, is_reduce)]}."""
        pos = {iv.var: p for p, iv in enumerate(st.leaf_iter_vars)}
        out: dict = {}
        for cond, is_red in conds:
            c = simplify(cond, self.ranges)
            if isinstance(c, Const) and c.value:
                continue
            deepest = max((pos[v] for v in vars_of(c) if v in pos), default=0)
            out.setdefault(deepest, []).append((c, is_red))
        return out
