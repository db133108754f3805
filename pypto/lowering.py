"""Lowering: a schedule becomes a loop nest (bound inference and loop construction).

For each stage, in the order the attach tree needs:

1. its domain: the whole tensor at the root, or, under ``compute_at``, the
   region its consumers read during one iteration of the attach loop
   (indices relaxed over the inner loops by interval arithmetic, or exactly
   by isl where that is tighter, clamped to the tensor; ``regions``);
2. its loops: leaf extents from the split/fuse relations, root indices as
   expressions of the leaves, and a guard for each split that may overrun;
   where a loop's bounds name other loops, bounds from the isl domain
   (``domain``);
3. its statements: ``init`` and ``update`` for reductions, the producers
   attached at each loop placed at the top of that loop's body.

Cleanup passes (simplify, guards into loop bounds, unrolling) follow in
``passes``.
"""

from __future__ import annotations

from dataclasses import replace

from . import domain, passes, regions
from .accumulate import accumulated_reduction, needs_accumulator, reduction_start
from .bounds_check import NO_REPORT, BoundsReport, check_bounds
from .errors import ScheduleError
from .expr import (
    Binary,
    Call,
    Cast,
    Cmp,
    Const,
    Expr,
    Load,
    Reduce,
    TensorRead,
    conjunction,
    map_children,
    substitute,
    tensor_reads,
    vars_of,
    walk,
)
from .legality import check_schedule
from .loop_ir import Allocate, Buffer, For, IfThenElse, LoweredFunc, Store, seq, unbound_vars
from .multi_output import multi_output_stmt
from .prefetch import prefetch_stmts
from .relations import Fuse, Skew, Split
from .scalar_args import check_scalar_var, is_scalar_var, scalar_params
from .schedule import Schedule, Stage
from .simplify import INF, Ranges, bounds, simplify, upper_bound
from .tensor import IterVar, Tensor
from .tensorize import bind


def _ceildiv(a: Expr, b: Expr) -> Expr:
    return Binary(
        "floordiv",
        Binary("add", a, Binary("sub", b, Const(1, "int64"), "int64"), "int64"),
        b,
        "int64",
    )


def _flat(indices, shape) -> Expr:
    out = None
    for i, s in zip(indices, shape):
        out = i if out is None else Binary("add", Binary("mul", out, s, "int64"), i, "int64")
    return out if out is not None else Const(0, "int64")


class StageNest:
    """What lowering learns about one stage: its region, loops and buffer."""

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
        self.init_value = None  # root_value and guards of a reduction's init nest, which
        self.init_conds = None  # keeps the box of its spatial loops (see domain.tighten)
        self.init_guards = {}
        self.guards = {}  # leaf position -> [(cond, is_reduce)]
        self.buffer = None
        self.more_buffers = {}  # value index -> Buffer: the other outputs of a multi-output op
        self.offsets = None  # per dimension, subtracted from indices (local buffers)
        self.local = False

    def buffers(self) -> list:
        return [self.buffer, *self.more_buffers.values()]

    @property
    def context(self):
        """Enclosing and own leaves with their box extents (a superset of each range)."""
        return self.prefix + [(iv, self.box_ext[iv]) for iv in self.stage.leaf_iter_vars]


class Lowering:
    def __init__(self, sch: Schedule, args, name: str, checks: BoundsReport = NO_REPORT):
        self.sch = sch
        self.name = name
        self.checks = checks  # accesses isl could not prove get run-time checked indices
        self.ranges = Ranges()
        self.nests: dict[Stage, StageNest] = {}
        self.bodies: dict[Stage, Expr] = {}
        self.more_bodies: dict[Stage, tuple] = {}  # the other outputs' bodies
        self.lhs: dict[Stage, tuple] = {}  # update stages: the indices they write
        self.in_progress: set = set()
        for st in sch.stages:  # sizes are never negative
            for d in st.op.shape:
                for v in vars_of(d):
                    self.ranges[v] = (0, INF)
        self.scalars = scalar_params(args) if args is not None else ()
        self.scalar_vars = tuple(a for a in args or () if is_scalar_var(a))
        self.args = self._check_args(args) if args is not None else []
        self._inline_bodies()
        self.consumers = self._consumers()

    # ------------------------------------------------------------ set-up

    def stage_of(self, t: Tensor) -> Stage:
        return self.sch.stage_map[t.op]

    def _check_args(self, args) -> list:
        if not isinstance(args, (list, tuple)):
            raise TypeError("args must be a list of tensors")
        seen = set()
        for v in self.scalar_vars:
            check_scalar_var(v)
        if len({id(v) for v in self.scalar_vars}) < len(self.scalar_vars):
            raise ScheduleError("a scalar argument is passed twice")
        args = [a for a in args if not is_scalar_var(a)]
        for a in args:
            if not isinstance(a, Tensor):
                raise TypeError(f"args must be tensors, got {a!r}")
            if a.op not in self.sch.stage_map:
                raise ScheduleError(f"argument {a.name} is not part of this schedule")
            st = self.stage_of(a)
            if st.inline:
                raise ScheduleError(
                    f"argument {a.name} is inlined (compute_inline) and has no buffer to pass"
                )
            if (st, a.value_index) in seen:
                raise ScheduleError(f"argument {a.name} is passed twice")
            seen.update({(st, a.value_index), st})
        for op in self.sch.outputs:
            if self.sch.stage_map[op] not in seen:
                raise ScheduleError(f"output {op.name} is not among the arguments")
        for st in self.sch.stages:
            if st.is_placeholder and st not in seen and self._is_read(st):
                raise ScheduleError(f"placeholder {st.name} is read but not among the arguments")
        return list(args)

    def _is_read(self, st: Stage) -> bool:
        return any(
            t.op in (st.op, st.origin_op)
            for o in self.sch.stages
            if not o.is_placeholder
            for t in o.op.input_tensors
        )

    def _inline_bodies(self):
        def expand(e):
            e = map_children(self.checks.guarded(e), expand)
            if isinstance(e, TensorRead):
                st = self.stage_of(e.tensor)
                if st.inline:
                    body = self.bodies[st]
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

    def reads(self, st: Stage) -> list:
        """Every tensor read of a stage, the data-dependent indices of an update included."""
        exprs = [self.bodies[st], *self.more_bodies[st], *self.lhs.get(st, ())]
        return [r for e in exprs for r in tensor_reads(e)]

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
        n = StageNest(st)
        self._domain(n)
        self._loops(n)
        self.in_progress.discard(st)
        self.nests[st] = n
        return n

    def _domain(self, n: StageNest):
        st = n.stage
        shape = st.op.shape
        if st.attach is None:
            n.region = [(Const(0, "int64"), s) for s in shape]
            return
        q, L = st.attach
        if q.inline:
            raise ScheduleError(f"compute_at on stage '{st.name}': target '{q.name}' is inlined")
        qn = self.nest(q)
        if L not in q.leaf_iter_vars:
            raise ScheduleError(
                f"compute_at on stage '{st.name}': loop {L.name} is no longer a "
                f"loop of '{q.name}' (it was split or fused after compute_at)"
            )
        ctx = qn.context
        pos = [iv for iv, _ in ctx].index(L)
        n.prefix = ctx[: pos + 1]
        prefix_ids = [id(iv) for iv, _ in n.prefix]
        lo = [None] * len(shape)
        hi = [None] * len(shape)
        consumers = self.consumers[st]
        accesses, exact = [], False  # exact: intervals may be too wide, ask isl
        if not consumers:
            raise ScheduleError(f"compute_at on stage '{st.name}': nothing reads it")
        for c in consumers:
            cn = self.nest(c)
            cctx = cn.context
            if [id(iv) for iv, _ in cctx[: len(prefix_ids)]] != prefix_ids:
                raise ScheduleError(
                    f"compute_at on stage '{st.name}': its consumer '{c.name}' runs outside "
                    f"loop {L.name} of '{q.name}', so the values would not be ready"
                )
            relaxed = {iv.var: ext for iv, ext in cctx[len(prefix_ids) :]}
            inner = [iv for iv, _ in cctx[len(prefix_ids) :]]
            exact |= cn.tightened  # a consumer whose loops are not a box
            for read in self.reads(c):
                if self.stage_of(read.tensor) is not st:
                    continue
                indices = [simplify(self.in_leaves(cn, i), self.ranges) for i in read.indices]
                accesses.append((cn, inner, indices))
                for d, idx in enumerate(indices):
                    exact |= regions.needs_exact(idx, relaxed)
                    r = regions.relax(idx, relaxed, self.ranges)
                    if r is None:  # not analysable: the whole dimension
                        r = (Const(0, "int64"), Binary("sub", shape[d], Const(1, "int64"), "int64"))
                    lo[d] = r[0] if lo[d] is None else Binary("min", lo[d], r[0], "int64")
                    hi[d] = r[1] if hi[d] is None else Binary("max", hi[d], r[1], "int64")
        region = []
        for d, s in enumerate(shape):
            a = simplify(Binary("max", lo[d], Const(0, "int64"), "int64"), self.ranges)
            b = simplify(
                Binary("min", hi[d], Binary("sub", s, Const(1, "int64"), "int64"), "int64"),
                self.ranges,
            )
            region.append(
                (
                    a,
                    simplify(
                        Binary("add", Binary("sub", b, a, "int64"), Const(1, "int64"), "int64"),
                        self.ranges,
                    ),
                )
            )
        if exact:
            region = self._exact_region(st, region, accesses, n.prefix)
        n.region = region

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

    def _loops(self, n: StageNest):
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
        if dependent:  # a polyhedron: relations work on the box of each such root
            own = domain.own_min_roots(st, dependent, true_dom)
            offsets = {iv: (Const(0, "int64"), true_dom[iv][1]) for iv in own}
            for iv, (m, e) in domain.root_boxes(
                st.name, st.root_iter_vars, {**true_dom, **offsets}, dependent
            ).items():
                dom_min[iv], ext[iv] = (true_dom[iv][0], e) if iv in own else (m, e)
        for rel in st.relations:
            if isinstance(rel, Split):
                pe = ext[rel.parent]
                if rel.factor is not None:
                    ext[rel.outer], ext[rel.inner] = _ceildiv(pe, rel.factor), rel.factor
                else:  # no more parts than it takes to cover the parent (8 in 32 parts: 8)
                    ext[rel.inner] = _ceildiv(pe, rel.nparts)
                    ext[rel.outer] = _ceildiv(pe, ext[rel.inner])
            elif isinstance(rel, Fuse):
                ext[rel.fused] = Binary("mul", ext[rel.outer], ext[rel.inner], "int64")
            else:  # Skew: inner + f*outer spans [0, ext(inner) + f*(ext(outer) - 1))
                ext[rel.skewed] = ext[rel.inner] + (ext[rel.outer] - 1) * rel.factor
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
        for rel in reversed(st.relations):
            if isinstance(rel, Split):
                v = simplify(val[rel.outer] * ext[rel.inner] + val[rel.inner], self.ranges)
                val[rel.parent] = v
                total = simplify(ext[rel.outer] * ext[rel.inner] - ext[rel.parent], self.ranges)
                if not (isinstance(total, Const) and total.value == 0):
                    conds.append((Cmp("lt", v, ext[rel.parent]), rel.parent.kind == "reduce"))
            elif isinstance(rel, Skew):
                v = simplify(val[rel.skewed] - val[rel.outer] * rel.factor, self.ranges)
                val[rel.inner] = v
                red = rel.inner.kind == "reduce"
                conds.append((Cmp("ge", v, Const(0, "int64")), red))
                conds.append((Cmp("lt", v, ext[rel.inner]), red))
            else:
                f, inner_ext = val[rel.fused], ext[rel.inner]
                val[rel.outer] = simplify(Binary("floordiv", f, inner_ext, "int64"), self.ranges)
                val[rel.inner] = simplify(Binary("mod", f, inner_ext, "int64"), self.ranges)
        n.root_min = dom_min
        n.root_value = {}  # a minimum may name roots before it: their values, in leaves
        for iv in st.root_iter_vars:
            m = substitute(dom_min[iv], {r.var: v for r, v in n.root_value.items()})
            n.root_value[iv] = simplify(m + val[iv], self.ranges)
        if dependent:
            conds += domain.bound_guards(dependent, true_dom, n.root_value)
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

    def in_leaves(self, n: StageNest, e: Expr) -> Expr:
        """Express ``e`` (over the stage's root variables) in its leaf loop variables."""
        return substitute(e, {iv.var: v for iv, v in n.root_value.items()})

    # ------------------------------------------------------------ buffers

    def _buffers(self):
        params = []
        for t in self.args:
            st = self.stage_of(t)
            b = Buffer(t.name, t.dtype, tuple(t.shape), "param")
            params.append(b)
            if st.is_placeholder:
                self.placeholder_buf[st] = b
            elif t.value_index:
                self.nest(st).more_buffers[t.value_index] = b
            else:
                self.nest(st).buffer = b
        for st in self.sch.stages:
            if st.is_placeholder or st.inline or st.is_update:
                continue
            n = self.nest(st)
            if n.buffer is not None and len(n.more_buffers) + 1 == st.op.num_outputs:
                continue
            sizes = self.local_shape(st)
            if sizes is not None:
                shape = tuple(Const(max(int(s), 1), "int64") for s in sizes)
                n.local = True
                n.offsets = [m for m, _ in n.region]
            else:
                shape = tuple(st.op.shape)
            scope = "local" if n.local else "global"
            for t in st.op.outputs:
                if t.value_index and t.value_index not in n.more_buffers:
                    n.more_buffers[t.value_index] = Buffer(t.name, t.dtype, shape, scope)
            if n.buffer is None:
                n.buffer = Buffer(st.name, st.op.dtype, shape, scope)
        return params

    def local_shape(self, st: Stage):
        """The constant shape of an attached stage's region (its own small buffer), or None
        when the region is not bounded and the stage writes a shared, full-size buffer."""
        if st.attach is None or st in {self.stage_of(t) for t in self.args}:
            return None
        sizes = [upper_bound(e, self.ranges) for _, e in self.nest(st).region]
        return None if any(x == INF for x in sizes) else sizes

    def buffer_index(self, st: Stage, indices, value_index: int = 0) -> tuple[Buffer, Expr]:
        if st.is_placeholder:
            b = self.placeholder_buf.get(st)
            if b is None:
                raise ScheduleError(f"placeholder {st.name} is read but not among the arguments")
            return b, _flat(_checked(indices, b.shape), b.shape)
        n = self.nests[st]
        if n.offsets is not None:
            indices = [Binary("sub", i, o, "int64") for i, o in zip(indices, n.offsets)]
        buf = n.more_buffers[value_index] if value_index else n.buffer
        return buf, _flat(_checked(indices, buf.shape), buf.shape)

    # ------------------------------------------------------------ statements

    def lower_expr(self, n: StageNest, e: Expr) -> Expr:
        def go(x):
            x = map_children(x, go)
            if isinstance(x, TensorRead):
                st = self.stage_of(x.tensor)
                buf, idx = self.buffer_index(st, x.indices, x.tensor.value_index)
                return Load(buf, idx, x.dtype)
            return x

        return simplify(go(self.in_leaves(n, e)), self.ranges)

    def stage_stmt(self, st: Stage):
        n = self.nests[st]
        body = self.bodies[st]
        if st.is_update:
            buf, idx = self.buffer_index(st.target_stage, self.lhs[st])
            store = Store(buf, self.lower_expr(n, idx), self.lower_expr(n, body))
            return self._nest(
                n, range(len(st.leaf_iter_vars)), store, with_reduce=True, attached=True
            )
        if st.op.num_outputs > 1:
            return multi_output_stmt(self, n)
        buf, flat = self.buffer_index(st, [iv.var for iv in st.op.axis])
        idx = simplify(self.in_leaves(n, flat), self.ranges)
        leaves = st.leaf_iter_vars
        t = len(leaves) if st.tensorized is None else self._tensorized_at(st)
        if not isinstance(body, Reduce):
            store = Store(buf, idx, self.lower_expr(n, body))
            inner = self._nest(n, range(t, len(leaves)), store, with_reduce=True, attached=True)
            return self._nest(n, range(t), self._tensorize(n, inner), True, True)
        init_idx = simplify(
            substitute(flat, {iv.var: v for iv, v in n.init_value.items()}), self.ranges
        )
        p = next(i for i, iv in enumerate(leaves) if iv.kind == "reduce")
        if needs_accumulator(body) and st.tensorized is None:  # float16/bfloat16: in float32
            inner = accumulated_reduction(self, n, body, buf, idx, init_idx, p)
            return self._nest(n, range(p), inner, True, True)
        ident = reduction_start(self, n, body, body.dtype)
        src = self.lower_expr(n, body.source)
        update = Store(buf, idx, body.combiner.combine(Load(buf, idx, body.dtype), src))
        init = Store(buf, init_idx, ident)
        later_spatial = [i for i in range(p, len(leaves)) if leaves[i].kind == "spatial"]
        init_nest = self._nest(n, later_spatial, init, with_reduce=False, attached=False)
        upd_nest = self._nest(n, range(p, len(leaves)), update, with_reduce=True, attached=True)
        t = min(t, p)  # tensorize checks that no reduce loop is outside its region
        inner = self._nest(n, range(t, p), seq(init_nest, upd_nest), True, True)
        return self._nest(n, range(t), self._tensorize(n, inner), True, True)

    def _tensorized_at(self, st: Stage) -> int:
        iv, intrin = st.tensorized
        if iv not in st.leaf_iter_vars:
            raise ScheduleError(
                f"tensorize({intrin.name}) on stage '{st.name}': loop {iv.name} is no longer "
                "a loop of the stage (it was split or fused after tensorize)"
            )
        return st.leaf_iter_vars.index(iv)

    def _tensorize(self, n: StageNest, loops):
        """``loops`` (the tensorized leaves of ``n``), or the tensor intrinsic's call in
        their place: for every tile when all are whole, else when the tile is."""
        if n.stage.tensorized is None:
            return loops
        call, whole = bind(self, n, self._tensorized_at(n.stage), n.stage.tensorized[1])
        return call if whole is None else IfThenElse(whole, call, loops)

    def _nest(self, n: StageNest, positions, inner, with_reduce: bool, attached: bool):
        st = n.stage
        s = inner
        for p in reversed(list(positions)):
            iv = st.leaf_iter_vars[p]
            if attached:
                s = self._with_attached(st, iv, s)
            guards = n.guards if with_reduce else n.init_guards  # init: the box
            conds = [c for c, red in guards.get(p, ()) if with_reduce or not red]
            if conds:
                s = IfThenElse(conjunction(conds), s)
            if attached:
                s = seq(*prefetch_stmts(self, n, p), s)
            ext = n.leaf_ext[iv] if with_reduce else n.box_ext[iv]
            s = For(iv.var, ext, st.attrs.get(iv, "serial"), s)
        return s

    def _with_attached(self, st: Stage, iv: IterVar, body):
        inner = [
            a
            for a in self.sch.stages
            if a.attach is not None and a.attach[0] is st and a.attach[1] is iv and not a.inline
        ]
        if not inner:
            return body
        s = seq(*[self.stage_stmt(a) for a in inner], body)
        for a in reversed(inner):
            n = self.nests[a]
            if n.local:
                for b in n.buffers():
                    s = _allocate(b, s)
        return s

    def run(self) -> LoweredFunc:
        self.placeholder_buf = {}
        for st in self.sch.stages:
            if not st.is_placeholder and not st.inline:
                self.nest(st)
        params = self._buffers()
        roots = [
            st
            for st in self.sch.stages
            if not st.is_placeholder and not st.inline and st.attach is None
        ]
        body = seq(*[self.stage_stmt(st) for st in roots])
        for st in reversed(roots):
            for b in self.nests[st].buffers():
                if b is not None and b.scope != "param":
                    body = _allocate(b, body)
        for st in self.sch.stages:  # attached stages whose region is not bounded
            n = self.nests.get(st)
            if n is not None and st.attach is not None and not n.local:
                for b in n.buffers():
                    if b.scope != "param":
                        body = _allocate(b, body)
        size_vars = []
        for b in params:
            for d in b.shape:
                for v in vars_of(d):
                    if v not in size_vars:
                        size_vars.append(v)
        func = LoweredFunc(
            self.name, tuple(params), tuple(size_vars), body, tensors=tuple(self.args),
            scalars=self.scalars, scalar_vars=self.scalar_vars,
        )  # fmt: skip
        return passes.finalize(func)


def _zero_if_single(iv: IterVar, ext: Expr) -> Expr:
    return Const(0, iv.var.dtype) if isinstance(ext, Const) and ext.value == 1 else iv.var


def _checked(indices, shape) -> list:
    """Indices computed from data (``H[X[i]]``) are checked at run time: out of range,
    the kernel touches element 0 instead and reports an error to the caller."""
    out = []
    for i, d in zip(indices, shape):
        if any(isinstance(x, (TensorRead, Load)) for x in walk(i)):
            i = Call("checked_index", (Cast(i, "int64") if i.dtype != "int64" else i, d), "int64")
        out.append(i)
    return out


def _allocate(buf: Buffer, body):
    size = Const(1, "int64")
    for d in buf.shape:
        size = Binary("mul", size, d, "int64")
    return Allocate(buf, simplify(size), body)


def lower(sch: Schedule, args, name: str = "main") -> LoweredFunc:
    """``pt.lower(s, args, name)``: the loop IR of a schedule (``print`` it to read it)."""
    if not isinstance(sch, Schedule):
        raise TypeError(f"lower expects a Schedule, got {type(sch).__name__}")
    report = check_bounds(sch)
    low = Lowering(sch, args, name, report)
    check_schedule(sch, low)
    func = low.run()
    unbound = unbound_vars(func)
    floats = [v.name for v in unbound if is_scalar_var(v)]
    if floats:
        raise ScheduleError(
            f"{func.name}: the scalar variable(s) {', '.join(floats)} are used but not among "
            "the arguments; pass them in the argument list (as TVM: [A, alpha, B])"
        )
    if unbound:  # e.g. a symbolic split factor that no argument's shape carries
        names = ", ".join(v.name for v in unbound)
        raise ScheduleError(
            f"{func.name}: the size variable(s) {names} appear in the schedule but in no "
            "argument's shape, so no call can bind them; pass a tensor whose shape has "
            "them, or use constants"
        )
    if report.size_checks:  # sizes that must hold at call time (pypto.runtime checks them)
        func = replace(func, attrs={**func.attrs, "size_checks": report.size_checks})
    return func
