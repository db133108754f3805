"""Schedules: how to compute. A Stage per operation (``stage``), the stages of a
whole computation, and the schedule-level primitives (``cache_read``,
``cache_write``) that add stages.

Every primitive is a step (``pypto.steps``) given to ``Schedule.apply``, the
only way a schedule changes. A primitive that can break a dependence is
checked as it is applied (``check_stage``, from ``legality``), so the error
names the call; a refused step leaves the schedule exactly as it was (its
stages, their loops, relations and annotations, the steps list).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import attach, legality, steps
from .dtypes import INDEX, accumulator_dtype
from .errors import ScheduleError
from .explain import explain
from .expr import (
    Const,
    Reduce,
    Select,
    TensorRead,
    cast,
    conjunction,
    map_children,
    substitute,
    tensor_reads,
)
from .extern import extern_of, refuse_extern
from .group import create_group
from .relayout import relayout
from .replay import JSON_VERSION, replay
from .rfactor import rfactor_ops
from .stage import Stage, TensorizedAt, as_op
from .tensor import (
    ComputeOp,
    Operation,
    Tensor,
    UpdateOp,
    collect_ops,
    make_iter_var,
)
from .transform_layout import set_layout


class StageState(NamedTuple):
    """A stage's schedule at one moment: what ``Schedule.apply`` keeps to put back."""

    op: Operation
    roots: tuple
    leaves: tuple
    relations: tuple
    attrs: tuple  # (leaf, kind) pairs
    prefetches: tuple
    tensorized: Any
    attach: Any
    fused_with: Any
    inline: bool
    scope: str
    layout: Any  # transform_layout's StorageLayout, or None


def _stage_state(st: Stage) -> StageState:
    """What the primitives change in a stage, as one frozen record."""
    return StageState(
        st.op, tuple(st.root_iter_vars), tuple(st.leaf_iter_vars), tuple(st.relations),
        tuple(st.attrs.items()), tuple(st.prefetches), st.tensorized, st.attach,
        st.fused_with, st.inline, st.scope, st.layout,
    )  # fmt: skip


def _set_stage_state(st: Stage, x: StageState):
    """Make ``x`` the stage's state (in fresh containers: ``x`` stays as it is)."""
    st.op, st.inline, st.scope, st.layout = x.op, x.inline, x.scope, x.layout
    st.root_iter_vars, st.leaf_iter_vars = list(x.roots), list(x.leaves)
    st.relations, st.attrs, st.prefetches = list(x.relations), dict(x.attrs), list(x.prefetches)
    st.tensorized, st.attach, st.fused_with = x.tensorized, x.attach, x.fused_with


class Schedule:
    """Stages of all operations reachable from the outputs, producers first."""

    def __init__(self, outputs):
        outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        self.outputs = [as_op(o) for o in outs]
        self.stages: list[Stage] = []
        self.stage_map: dict[Operation, Stage] = {}
        self.records: list[steps.Step] = []  # every step applied, in order
        for op in collect_ops(self.outputs):
            st = Stage(self, op)
            if extern_of(st) is not None:  # one call, whole: tensorized at its root
                st.tensorized = TensorizedAt(st.leaf_iter_vars[0], extern_of(st))
            self.stages.append(st)
            self.stage_map[op] = st
            for k in range(len(getattr(op, "updates", ()))):
                ust = Stage(self, UpdateOp(op.output(0), k))
                ust.target_stage = st
                st.update_stages.append(ust)
                self.stages.append(ust)

    def __getitem__(self, x) -> Stage:
        op = as_op(x)
        try:
            return self.stage_map[op]
        except KeyError:
            raise KeyError(f"{op.name} is not part of this schedule") from None

    def __repr__(self):
        return f"Schedule({', '.join(st.name for st in self.stages)})"

    def create_group(self, outputs, inputs=(), include_inputs: bool = False):
        """TVM's ``create_group``: the stages computing ``outputs`` from ``inputs``, to
        attach (``g.compute_at(s[C], loop)``) or inline together (``pypto.group``)."""
        return create_group(self, outputs, inputs, include_inputs)

    def explain(self, file=None) -> str:
        """Print, per stage, the loop nest, the dependences with their distance vectors,
        and which loops may be parallelized or vectorized (to ``file``, default stdout);
        return the report as text."""
        return explain(self, file)

    @property
    def steps(self) -> list[dict]:
        """The steps applied so far, as JSON data (``Step.to_json``)."""
        return [x.to_json() for x in self.records]

    def apply(self, step: steps.Step):
        """Apply one step (``pypto.steps``), checked; the only way a schedule changes.
        Returns what the primitive returns (new loops, a new tensor). A refused step
        raises and leaves the schedule as it was."""
        rule = _RULES.get(type(step))
        if rule is None:
            raise TypeError(f"not a schedule step: {step!r}")
        stage = getattr(step, "stage", None)
        if stage is not None and (not isinstance(stage, Stage) or stage.schedule is not self):
            raise ScheduleError(f"{step.prim}: {stage!r} is not a stage of this schedule")
        before = self._state(None if type(step) in _ADDS_STAGES else stage)
        try:
            out = rule(self, step)
        except Exception:
            self._set_state(before)  # refused: the schedule exactly as it was
            raise
        self.records.append(step)
        return out

    def _state(self, stage: Stage | None) -> tuple:
        """What a step may change, as frozen data: ``stage``'s ``StageState`` (a stage's
        rule changes that stage only), or, for a step that adds stages, every stage's
        with the stage list and map. ``apply`` keeps it to put back a refused step."""
        if stage is not None:
            return ((stage, _stage_state(stage)),), None
        return tuple((st, _stage_state(st)) for st in self.stages), tuple(self.stage_map.items())

    def _set_state(self, state: tuple):
        stages, stage_map = state
        for st, x in stages:
            _set_stage_state(st, x)
        if stage_map is not None:
            self.stages = [st for st, _ in stages]
            self.stage_map = dict(stage_map)

    def to_json(self) -> dict:
        """The schedule as plain data: its outputs and its steps, objects by name.
        ``pt.Schedule.from_json(doc, tensors)`` replays it."""
        return {
            "version": JSON_VERSION,
            "outputs": [op.name for op in self.outputs],
            "steps": self.steps,
        }

    @classmethod
    def from_json(cls, doc, tensors, intrinsics=()) -> Schedule:
        """Replay ``s.to_json()`` (a dict or its JSON text) on the computation of
        ``tensors`` (the tensors the schedule was built for, e.g. ``[A, B, C]``).
        A tensorize step names its intrinsic: one of ``intrinsics`` (``TensorIntrin``
        objects), else one registered by that name (``pt.TensorIntrin.register``)."""
        return replay(cls, doc, tensors, intrinsics)

    def check_stage(self, stage: Stage, call: str, loop=None) -> None:
        """Check ``stage`` right after primitive ``call`` (``legality.check_stage``)."""
        legality.check_stage(self, stage, call, loop)

    def _insert_before(self, new: Stage, before: list[Stage]):
        pos = min(self.stages.index(b) for b in before)
        self.stages.insert(pos, new)
        self.stage_map[new.op] = new

    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """Copy ``tensor`` into a new stage read by ``readers`` instead (packing).

            C = f(A[i, k])   ->   A.local[i, k] = A[i, k];  C = f(A.local[i, k])

        Attach the copy with compute_at to copy just the tile a loop needs,
        laid out contiguously.
        """
        readers = readers if isinstance(readers, (list, tuple)) else [readers]
        return self.apply(steps.CacheRead(tensor, scope, tuple(readers)))

    def _cache_read(self, step: steps.CacheRead) -> Tensor:
        tensor, scope, readers = step.tensor, step.scope, step.readers
        if not isinstance(tensor, Tensor):
            raise ScheduleError(f"cache_read: expected a Tensor, got {tensor!r}")
        rstages = [self[r] for r in readers]
        if not rstages:
            raise ScheduleError(
                f"cache_read: no readers given; pass the stages that should read the copy of "
                f"{tensor.name}"
            )
        for st in rstages:
            if tensor not in {t for t in st.op.input_tensors}:
                now = [x.name for x in self.stages if tensor in x.op.input_tensors]
                who = f" ({' and '.join(now)} read{'s' * (len(now) == 1)} it)" if now else ""
                raise ScheduleError(
                    f"cache_read: stage '{st.name}' does not read {tensor.name}{who}"
                )
            if not any(r.tensor is tensor for b in st.op.bodies for r in tensor_reads(b)):
                raise ScheduleError(
                    f"cache_read: '{st.name}' reads {tensor.name} only in its update "
                    "definitions, and a copy serves the pure definition's reads"
                )
        name = f"{tensor.name}.{scope}"
        if any(st.name == name for st in self.stages):
            name = f"{name}{len(self.stages)}"
        cache = _copy_op(name, tensor)
        for st in rstages:  # axes are kept, so earlier steps on readers stay valid
            st.op = _replace_reads(st.op, {tensor: cache})
            self.stage_map[st.op] = st
        cst = Stage(self, cache.op)
        cst.scope = scope
        self._insert_before(cst, rstages)
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into a new stage, then copy it out (accumulate locally).

            C[i, j] = sum(..., k)   ->   C.local[i, j] = sum(..., k);  C[i, j] = C.local[i, j]

        ``s[C]`` keeps ``C.op.axis`` (its loops start afresh); the new stage has fresh
        axes (``s[CL].op.axis``, ``s[CL].op.reduce_axis``). After ``split``, ``fuse`` or
        ``reorder`` of ``C``'s spatial loops, the cache is laid out as those loops run,
        one axis per loop (TVM's relayout, ``pypto.relayout``).
        """
        ts = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
        if not ts:
            raise ScheduleError("cache_write: no tensor given")
        st = self[ts[0]]
        n = getattr(st.op, "num_outputs", 1)
        if len(ts) != n or any(self[t] is not st or t.value_index != k for k, t in enumerate(ts)):
            names = ", ".join(t.name for t in getattr(st.op, "outputs", ts))
            raise ScheduleError(
                f"cache_write of {', '.join(getattr(t, 'name', repr(t)) for t in ts)}: "
                f"the outputs of stage '{st.name}' are computed together: pass all "
                f"of them, in order (s.cache_write([{names}], ...))"
            )
        return self.apply(steps.CacheWrite(ts[0], scope))

    def _cache_write(self, step: steps.CacheWrite) -> Tensor:
        tensor, scope = step.tensor, step.scope
        st = self[tensor]
        if st.is_placeholder:
            raise ScheduleError(f"cache_write: {tensor.name} is a placeholder")
        refuse_extern(st, "cache_write")
        if st.update_stages or st.is_update:
            raise ScheduleError(f"cache_write: {tensor.name} has update definitions")
        applied = [x for x in self.steps if x.get("stage") == st.name]
        if st.attrs or st.attach or st.inline or st.prefetches or st.tensorized:
            done = ", ".join(_step_text(x) for x in applied)
            raise ScheduleError(
                f"cache_write on stage '{st.name}': call it before annotating or attaching "
                "the stage" + (f" ({done} was applied)" if done else "")
            )
        op = st.op
        # split/fuse/reorder: the cache's layout; padded points (splits that do not
        # divide) are guarded by ``inside``
        axis, mapping, read_at, inside = relayout(st, op)
        guard = conjunction(inside)
        raxis = []
        for iv in op.reduce_axis:  # bounds may name the axes renamed before them
            lo, ext = substitute(iv.dom_min, mapping), substitute(iv.extent, mapping)
            raxis.append(make_iter_var(iv.name, lo, ext, "reduce"))
            mapping[iv.var] = raxis[-1].var
        raxis = tuple(raxis)
        dts = [b.dtype for b in op.bodies]
        red = op.body.combiner if isinstance(op.body, Reduce) else None
        accs = [accumulator_dtype(d) if red else d for d in dts]
        if red:
            srcs = [substitute(b.source, mapping) for b in op.bodies]
            srcs = [s if a == d else cast(a, s) for s, a, d in zip(srcs, accs, dts)]
            inits = [tuple(cast(a, substitute(x, mapping)) for x in b.init)
                     for b, a in zip(op.bodies, accs)]  # fmt: skip
            if guard is not None:  # padded points: the identity
                nothing = red.identity_tuple(accs) if len(accs) > 1 else (red.identity(accs[0]),)
                srcs = [Select(guard, s, z, a) for s, z, a in zip(srcs, nothing, accs)]
                inits = [tuple(Select(guard, x, z, a) for x in i)
                         for i, z, a in zip(inits, nothing, accs)]  # fmt: skip
            bodies = [Reduce(red, s, raxis, a, i) for s, a, i in zip(srcs, accs, inits)]
        else:
            bodies = [substitute(b, mapping) for b in op.bodies]
            if guard is not None:
                bodies = [Select(guard, b, Const(0, d), d) for b, d in zip(bodies, dts)]
        name = f"{op.name}.{scope}"
        cache = ComputeOp(
            name, axis, bodies[0], accs[0], raxis if op.reduce_axis else (), tuple(bodies[1:])
        )
        reads = [c[read_at] if a == d else cast(d, c[read_at])
                 for c, a, d in zip(cache.outputs, accs, dts)]  # fmt: skip
        copy = ComputeOp(op.name, op.axis, reads[0], dts[0], (), tuple(reads[1:]))
        st.op = copy
        st.reset_leaves()
        st.relations = []
        self.stage_map[copy] = st
        cst = Stage(self, cache)
        cst.scope = scope
        self._insert_before(cst, [st])
        return cache.output(0) if len(bodies) == 1 else list(cache.outputs)

    def rfactor(self, tensor: Tensor, axis, factor_axis: int = 0):
        """TVM's ``s.rfactor(C, k)``: a partial reduction ``C.rf`` with loop ``k`` (a reduce
        axis of ``C``, or a loop of its split) as a spatial axis at ``factor_axis``; ``C``
        becomes a reduction over it. Returns ``C.rf`` (as TVM, a list of its tensors for a
        tuple reduction such as argmax); see ``pypto.rfactor``.

            for i: for ko: for ki: C[i] += A[i, ko*4 + ki]
              ->  for ki: for i: for ko: C.rf[ki, i] += A[i, ko*4 + ki]
                  for i: for v: C[i] += C.rf[v, i]
        """
        return self.apply(steps.RFactor(self[tensor], axis, factor_axis))

    def _rfactor(self, step: steps.RFactor) -> Tensor:
        st = step.stage
        if st.is_placeholder or st.is_update or not isinstance(st.op, ComputeOp):
            raise ScheduleError(f"rfactor: {st.name} is not computed by pt.compute")
        refuse_extern(st, "rfactor")
        if st.attrs or st.attach or st.inline or st.prefetches or st.tensorized:
            raise ScheduleError(
                f"rfactor on stage '{st.name}': call it before annotating or attaching the stage"
            )
        fa = step.factor_axis
        if not isinstance(fa, int) or isinstance(fa, bool):
            raise TypeError(
                f"rfactor: factor_axis must be an int (the factored loop's position among "
                f"the partial stage's axes), got {fa!r}; the loop to factor is one argument"
            )
        rf, new, kept, leaves = rfactor_ops(st.op, st.relations, st.leaf_iter_vars, step.loop, fa)
        st.op = new
        st.reset_leaves()
        st.relations, st.leaf_iter_vars = kept, leaves
        self.stage_map[new] = st
        self._insert_before(Stage(self, rf), [st])
        if rf.num_outputs > 1:  # a tuple reduction (argmax): one partial tensor per output
            return [rf.output(k) for k in range(rf.num_outputs)]
        return rf.output(0)


# the steps that add stages (and change their readers); any other changes its own stage only
_ADDS_STAGES = (steps.CacheRead, steps.CacheWrite, steps.RFactor)

# step type -> its rule: the stage's (or the schedule's) method that applies it
_RULES = {
    steps.Split: lambda sch, x: x.stage._split(x),
    steps.Tile: lambda sch, x: x.stage._tile(x),
    steps.Reorder: lambda sch, x: x.stage._reorder(x),
    steps.Fuse: lambda sch, x: x.stage._fuse(x),
    steps.Skew: lambda sch, x: x.stage._skew(x),
    steps.Shift: lambda sch, x: x.stage._shift(x),
    steps.Parallel: lambda sch, x: x.stage._annotate(x),
    steps.Vectorize: lambda sch, x: x.stage._annotate(x),
    steps.Unroll: lambda sch, x: x.stage._annotate(x),
    steps.Prefetch: lambda sch, x: x.stage._prefetch(x),
    steps.Tensorize: lambda sch, x: x.stage._tensorize(x),
    steps.ComputeAt: lambda sch, x: attach.compute_at(x.stage, x),
    steps.ComputeWith: lambda sch, x: x.stage._compute_with(x),
    steps.ComputeInline: lambda sch, x: attach.compute_inline(x.stage, x),
    steps.ComputeRoot: lambda sch, x: attach.compute_root(x.stage, x),
    steps.CacheRead: lambda sch, x: sch._cache_read(x),
    steps.CacheWrite: lambda sch, x: sch._cache_write(x),
    steps.RFactor: lambda sch, x: sch._rfactor(x),
    steps.TransformLayout: lambda sch, x: set_layout(x.stage, x),
}


def _step_text(step: dict) -> str:
    """``reorder(j, i)``: a step record as the call that made it."""
    loops = step.get("loops") or [step[k] for k in ("loop", "x_parent", "y_parent") if k in step]
    return f"{step['prim']}({', '.join(loops)})"


def _copy_op(name: str, tensor: Tensor) -> Tensor:
    axis = tuple(
        make_iter_var(f"ax{d}", Const(0, INDEX), ext, "spatial")
        for d, ext in enumerate(tensor.shape)
    )
    body = tensor[tuple(iv.var for iv in axis)]
    return ComputeOp(name, axis, body, tensor.dtype).output(0)


def _replace_reads(op: ComputeOp, mapping: dict) -> ComputeOp:
    def go(e):
        e = map_children(e, go)
        if isinstance(e, TensorRead) and e.tensor in mapping:
            return mapping[e.tensor][e.indices]
        return e

    body, *more = (map_children(b, go) if isinstance(b, Reduce) else go(b) for b in op.bodies)
    new = ComputeOp(op.name, op.axis, body, op.dtype, op.reduce_axis, tuple(more))
    new.updates = op.updates
    return new


def create_schedule(outputs) -> Schedule:
    """``pt.create_schedule(op_or_tensor_or_list)``: the default (naive) schedule."""
    return Schedule(outputs)
