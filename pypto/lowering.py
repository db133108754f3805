"""Lowering: a schedule becomes loop IR.

``lower`` runs the pipeline, each step taking the previous one's data: the
arguments (``check_args``) and the in-bounds proof (``bounds_check``), bound
inference (``bounds.infer``: each stage's loops, extents, guards, region, a
frozen ``Nests``), the legality check (``legality.check_schedule``, over those
nests), the buffers (``layout.plan``), then statements (``Lowering``) -- per
stage ``init`` and ``update`` for reductions, the producers attached at each
loop placed at the top of that loop's body, tensorized regions as calls
(``tensorize.bind``), buffers allocated around their users.

Cleanup passes (simplify, guards into loop bounds, unrolling) follow in
``passes``.
"""

from __future__ import annotations

from dataclasses import replace

from . import passes
from .accumulate import accumulated_reduction, needs_accumulator, reduction_start
from .bounds import Nests, StageNest, infer
from .bounds_check import check_bounds
from .dtypes import INDEX
from .errors import ScheduleError
from .expr import (
    Expr,
    Load,
    Reduce,
    TensorRead,
    Var,
    conjunction,
    map_children,
    substitute,
    vars_of,
)
from .fused_nests import root_stmts
from .layout import Layout, flat_index, plan
from .legality import check_schedule
from .loop_ir import Allocate, Buffer, For, IfThenElse, LoweredFunc, Store, seq, unbound_vars
from .multi_output import multi_output_stmt
from .prefetch import prefetch_stmts
from .scalar_args import check_scalar_var, is_scalar_var, is_size_arg, scalar_params
from .schedule import Schedule, Stage
from .simplify import simplify
from .tensor import IterVar, PlaceholderOp, Tensor
from .tensorize import bind
from .update_reduce import update_store


def check_args(sch: Schedule, args) -> tuple[list, tuple, tuple, tuple]:
    """The argument list of ``lower``: (tensors, scalar parameters, float scalar
    variables, integer ones: sizes the call passes), each tensor part of ``sch``, every
    output and every read placeholder among them."""
    if not isinstance(args, (list, tuple)):
        raise TypeError("args must be a list of tensors")
    scalars = scalar_params(args)
    scalar_vars = tuple(a for a in args if is_scalar_var(a))
    size_args = tuple(a for a in args if is_size_arg(a))
    seen = set()
    for v in scalar_vars:
        check_scalar_var(v)
    passed = (*scalar_vars, *size_args)
    if len({id(v) for v in passed}) < len(passed):
        raise ScheduleError("a scalar argument is passed twice")
    args = [a for a in args if not (is_scalar_var(a) or is_size_arg(a))]
    for a in args:
        if not isinstance(a, Tensor):
            raise TypeError(f"args must be tensors or pt.var scalars, got {a!r}")
        if a.op not in sch.stage_map and not isinstance(a.op, PlaceholderOp):
            raise ScheduleError(f"argument {a.name} is not part of this schedule")
        st = sch.stage_map.get(a.op)  # None: a placeholder nothing reads (passed, unused)
        if st is not None and st.inline:
            raise ScheduleError(
                f"argument {a.name} is inlined (compute_inline) and has no buffer to pass"
            )
        key = st if st is not None else a.op
        if (key, a.value_index) in seen:
            raise ScheduleError(f"argument {a.name} is passed twice")
        seen.update({(key, a.value_index), key})
    for op in sch.outputs:
        if sch.stage_map[op] not in seen:
            raise ScheduleError(f"output {op.name} is not among the arguments")
    for st in sch.stages:
        if st.is_placeholder and st not in seen and _is_read(sch, st):
            raise ScheduleError(f"placeholder {st.name} is read but not among the arguments")
    return list(args), scalars, scalar_vars, size_args


def _is_read(sch: Schedule, st: Stage) -> bool:
    return any(
        t.op in (st.op, st.origin_op)
        for o in sch.stages
        if not o.is_placeholder
        for t in o.op.input_tensors
    )


class Lowering:
    """Statements from inferred nests (``bounds.Nests``) and their buffers
    (``layout.Layout``): stores, reductions, attached stages in place, allocations."""

    def __init__(self, nests: Nests, layout: Layout, name: str, args=((), (), ())):
        self.inferred, self.layout, self.name = nests, layout, name
        # ``check_args``'s scalar parameters, float scalar Vars, sizes passed as arguments
        self.scalars, self.scalar_vars, self.size_args = args
        self.sch, self.nests, self.args = nests.sch, nests.nests, nests.args
        self.bodies, self.more_bodies, self.lhs = nests.bodies, nests.more_bodies, nests.lhs
        self.ranges = nests.ranges.child()  # lowering adds counters of its own
        self.nest, self.stage_of, self.reads = nests.nest, nests.stage_of, nests.reads
        self.in_leaves, self.buffer_index = nests.in_leaves, layout.index

    # ------------------------------------------------------------ statements

    def lower_expr(self, n: StageNest, e: Expr, placed: bool = False) -> Expr:
        """``e`` (over the stage's root variables; ``placed``: over its loops already, as
        an ``init=`` at the init nest's point) with its tensor reads as buffer loads."""

        def go(x):
            x = map_children(x, go)
            if isinstance(x, TensorRead):
                st = self.stage_of(x.tensor)
                buf, idx = self.buffer_index(st, x.indices, x.tensor.value_index)
                return Load(buf, idx, x.dtype)
            return x

        return simplify(go(e if placed else self.in_leaves(n, e)), self.ranges)

    def stage_stmt(self, st: Stage):
        n = self.nests[st]
        body = self.bodies[st]
        if st.is_update:
            buf, idx = self.buffer_index(st.target_stage, self.lhs[st])
            store = update_store(self, n, buf, idx, body)
            return self.loop_nest(
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
            inner = self.loop_nest(n, range(t, len(leaves)), store, with_reduce=True, attached=True)
            return self.loop_nest(n, range(t), self._tensorize(n, inner), True, True)
        init_idx = simplify(
            substitute(flat, {iv.var: v for iv, v in n.init_value.items()}), self.ranges
        )
        p = next(i for i, iv in enumerate(leaves) if iv.kind == "reduce")
        t = min(t, p)  # tensorize checks that no reduce loop is outside its region
        if needs_accumulator(body):  # float16/bfloat16: in float32 (also where tiles are ragged)
            inner = accumulated_reduction(self, n, body, buf, idx, init_idx, p)
            inner = self.loop_nest(n, range(t, p), inner, True, True)
            return self.loop_nest(n, range(t), self._tensorize(n, inner), True, True)
        ident = reduction_start(self, n, body, body.dtype)
        src = self.lower_expr(n, body.source)
        update = Store(buf, idx, body.combiner.combine(Load(buf, idx, body.dtype), src))
        init = Store(buf, init_idx, ident)
        later_spatial = [i for i in range(p, len(leaves)) if leaves[i].kind == "spatial"]
        init_nest = self.loop_nest(n, later_spatial, init, with_reduce=False, attached=False)
        upd_nest = self.loop_nest(n, range(p, len(leaves)), update, with_reduce=True, attached=True)
        inner = self.loop_nest(n, range(t, p), seq(init_nest, upd_nest), True, True)
        return self.loop_nest(n, range(t), self._tensorize(n, inner), True, True)

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
        at, intrin = self._tensorized_at(n.stage), n.stage.tensorized[1]
        call, whole = bind(self.inferred, self.layout, n, at, intrin)
        return call if whole is None else IfThenElse(whole, call, loops)

    def loop_nest(self, n: StageNest, positions, inner, with_reduce: bool, attached: bool):
        """The loops of ``n`` at leaf ``positions`` (outermost first) around ``inner``: each
        with its guards, prefetches and (``attached``) the stages computed at it; the
        reduce loops' guards only ``with_reduce`` (an init nest runs over the box)."""
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
            if a.attach is not None and a.attach[0] is st and a.attach_loop is iv and not a.inline
        ]
        if not inner:
            return body
        s = seq(*[self.stage_stmt(a) for a in inner], body)
        for a in reversed(inner):
            sb = self.layout.stages[a]
            if sb.local:
                for b in sb.all():
                    s = _allocate(b, s)
        return s

    def copy_out(self, st: Stage, arg: Buffer):
        """The argument of a stage computed in another layout (``transform_layout``),
        copied from that buffer: ``for i: A[i] = A.layout[f(i)]``."""
        loops = [Var(f"{st.name}_copy{k}", INDEX) for k in range(len(arg.shape))]
        buf, idx = self.buffer_index(st, loops)
        s = Store(arg, flat_index(loops, arg.shape), Load(buf, idx, buf.dtype))
        for v, d in reversed(list(zip(loops, arg.shape))):
            s = For(v, d, "serial", s)
        return s

    def run(self, pipeline=passes.PIPELINE) -> LoweredFunc:
        params = self.layout.params
        roots = [
            st
            for st in self.sch.stages
            if not st.is_placeholder and not st.inline and st.attach is None
        ]
        body = seq(*root_stmts(self, roots), *(self.copy_out(*c) for c in self.layout.copies))
        for st in reversed(roots):  # an update stage writes its tensor's buffer
            sb = self.layout.stages.get(st)
            for b in sb.all() if sb is not None else ():
                if b.scope != "param":
                    body = _allocate(b, body)
        for st in self.sch.stages:  # attached stages whose region is not bounded
            sb = self.layout.stages.get(st)
            if sb is not None and st.attach is not None and not sb.local:
                for b in sb.all():
                    if b.scope != "param":
                        body = _allocate(b, body)
        size_vars = []
        for v in [*(v for b in params for d in b.shape for v in vars_of(d)), *self.size_args]:
            if all(v is not w for w in size_vars):
                size_vars.append(v)
        # the arguments a stage defines are outputs even where their loops run nothing
        defined = tuple(k for k, t in enumerate(self.args) if not isinstance(t.op, PlaceholderOp))
        func = LoweredFunc(
            self.name, tuple(params), tuple(size_vars), body, attrs={"defined": defined},
            tensors=tuple(self.args), scalars=self.scalars, scalar_vars=self.scalar_vars,
        )  # fmt: skip
        return passes.finalize(func, pipeline)


def _allocate(buf: Buffer, body):
    return Allocate(buf, simplify(buf.elements), body)


def lower(sch: Schedule, args, name: str = "main", simple_mode: bool = True) -> LoweredFunc:
    """``pt.lower(s, args, name)``: the loop IR of a schedule (``print`` it to read it).
    ``simple_mode`` is accepted for TVM code (``tvm.lower(..., simple_mode=True)``): the
    loop IR is always the simple form."""
    return _lower(sch, args, name, passes.PIPELINE)


def lower_nest(sch: Schedule, args, name: str = "main") -> LoweredFunc:
    """The loop IR as scheduled: ``lower``'s checks and clean-up, its loops marked
    unrolled still loops (``passes.SCHEDULED``: no copies, no accumulators in
    registers). What the cost model reads, without the time unrolling takes (Winograd's
    4 x 4 tiles: 0.18 s, against 0.49 s lowered whole)."""
    return _lower(sch, args, name, passes.SCHEDULED)


def _lower(sch: Schedule, args, name: str, pipeline) -> LoweredFunc:
    if not isinstance(sch, Schedule):
        raise TypeError(f"lower expects a Schedule, got {type(sch).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"the kernel's name must be a string, got {name!r}")
    tensors, *scalars = check_args(sch, args)
    report = check_bounds(sch)
    nests = infer(sch, report, tensors)
    check_schedule(sch, nests)
    func = Lowering(nests, plan(nests), name, scalars).run(pipeline)
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
            "argument's shape, so no call can bind them; pass them as arguments (as TVM: "
            "[A, n, B]), or a tensor whose shape has them, or use constants"
        )
    names = [v.name for v in func.size_vars]
    clash = sorted({v.name for v in scalars[2] if names.count(v.name) > 1})
    if clash:  # a call binds a passed size by its name
        raise ScheduleError(
            f"{func.name}: the size argument(s) {', '.join(clash)} share a name with another "
            "size variable; give each pt.var its own name"
        )
    whole = {id(d) for b in func.params for d in b.shape if isinstance(d, Var)}
    whole |= {id(v) for v in scalars[2]}
    inside = [v.name for v in func.size_vars if id(v) not in whole]
    if inside:  # a call binds a size from a dimension that is the variable itself
        raise ScheduleError(
            f"{func.name}: the size variable(s) {', '.join(inside)} appear in argument shapes "
            "only inside expressions (such as m * 4), so no call can bind them; give an "
            "argument a dimension that is the variable itself"
        )
    if report.size_checks:  # sizes that must hold at call time (pypto.runtime checks them)
        func = replace(func, attrs={**func.attrs, "size_checks": report.size_checks})
    return func
