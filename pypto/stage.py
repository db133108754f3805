"""Stages: the schedule of one operation, and the primitives that reshape its loops.

Every primitive is a Step record (plain JSON data) given to ``Schedule.apply``, which
runs the stage's rule for it (the ``_split``, ``_reorder``, ... methods: private, as
only ``apply`` may call them, keeping the record and putting the schedule back when the
step is refused), so a schedule can be stored, diffed and replayed. Loop variables
created by primitives get their extents at lowering, when the region each stage must
compute is known. A primitive that can break a dependence asks its schedule to check
the stage (``Schedule.check_stage``). Where a stage is computed (``compute_at``,
``compute_inline``, ``compute_root``) is ruled in ``pypto.attach``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from . import dtypes, steps
from .compute_with import FusedWith, check_compute_with, order_depth
from .dtypes import INDEX
from .errors import ScheduleError, tvm_only
from .expr import Const, Reduce, as_expr, tensor_reads, walk
from .extern import refuse_extern
from .intrin import TensorIntrin
from .prefetch import check_prefetch
from .relations import Fuse, Shift, Skew, Split
from .rfactor import loop_to_factor
from .tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor, make_iter_var
from .transform_layout import layout_text

if TYPE_CHECKING:  # the schedule owns its stages; a stage only refers back to it
    from .schedule import Schedule


ANNOTATIONS = {"parallel": "parallel", "vectorize": "vectorized", "unroll": "unrolled"}
PRAGMAS = {"unroll_explicit": "unroll"}  # TVM pragma -> the primitive that does it here
MIXED_SKEW = "spatial loop {} cannot follow reduction loop {}: the reduction's init runs outside it"


def as_op(x) -> Operation:
    """The operation of a tensor (or the operation itself)."""
    if isinstance(x, Tensor):
        return x.op
    if isinstance(x, Operation):
        return x
    raise TypeError(f"expected a Tensor or an operation, got {type(x).__name__}")


class AttachedAt(NamedTuple):
    """Where ``compute_at`` put a stage: inside ``stage``'s loop ``loop``."""

    stage: Any
    loop: IterVar


class PrefetchAt(NamedTuple):
    """A ``prefetch``: ``tensor``'s elements of iteration ``loop + offset``, into the
    cache of ``level``, at ``loop`` or a few lines per iteration of ``spread``."""

    tensor: Tensor
    loop: IterVar
    offset: int
    level: int = 1
    spread: IterVar | None = None


class TensorizedAt(NamedTuple):
    """A ``tensorize``: ``loop`` and the loops inside it replaced by ``intrin``."""

    loop: IterVar
    intrin: TensorIntrin


class Stage:
    """The schedule of one operation: its loop nest and where it is computed."""

    def __init__(self, sch: Schedule, op: Operation):
        self.schedule, self.op, self.origin_op = sch, op, op
        self.relations: list = []
        self.attrs: dict[IterVar, str] = {}  # leaf -> loop kind
        self.prefetches: list[PrefetchAt] = []  # see prefetch()
        self.tensorized: TensorizedAt | None = None  # see tensorize()
        self.attach: AttachedAt | None = None  # see compute_at()
        self.fused_with: FusedWith | None = None  # see compute_with()
        self.inline = False
        self.scope, self.layout = "global", None  # layout: see transform_layout
        self.update_stages: list[Stage] = []  # stages of the update definitions
        self.target_stage: Stage | None = None  # for an update stage: the pure stage
        self.n_updates = len(getattr(op, "updates", ()))
        self.reset_leaves()

    def reset_leaves(self):
        """Loops afresh from the stage's operation (after cache_write or rfactor gave it one)."""
        op = self.op
        roots = list(op.axis) + list(op.reduce_axis) if isinstance(op, ComputeOp) else []
        self.root_iter_vars, self.leaf_iter_vars = roots, list(roots)

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def attach_loop(self) -> IterVar | None:
        """The loop of ``compute_at``, followed through the later splits and fuses of the
        parent's loops, as TVM does: a split loop's inner part, a fused loop's result."""
        if self.attach is None:
            return None
        q, loop = self.attach
        for r in q.relations:  # in the order they were made
            if isinstance(r, Split) and r.parent is loop:
                loop = r.inner
            elif isinstance(r, Fuse) and loop in (r.outer, r.inner):
                loop = r.fused
        return loop

    def definition_reads(self) -> list:
        """The tensor reads of the stage's own definition (an update's indices included),
        not expanded through inlined producers: what it reads, whatever the schedule."""
        op = self.op
        if isinstance(op, PlaceholderOp):
            return []
        exprs = [*op.lhs, op.body] if self.is_update else list(op.bodies)
        return [r for e in exprs for r in tensor_reads(e)]

    def update(self, k: int) -> Stage:
        """The stage of update definition ``k`` (its loops: ``.op.axis``)."""
        if not 0 <= k < len(self.update_stages):
            n = len(self.update_stages)
            raise IndexError(f"{self.name} has {n} update definition(s), asked for update({k})")
        return self.update_stages[k]

    @property
    def is_update(self) -> bool:
        return self.target_stage is not None

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    def __repr__(self):
        return f"stage({self.name})"

    def __getattr__(self, name):  # only for names a Stage lacks: TVM's GPU primitives
        raise tvm_only("Stage", name, "'Stage' object")

    # ------------------------------------------------------------ helpers

    def error(self, prim: str, msg: str) -> ScheduleError:
        """The error of primitive ``prim`` on this stage: ``prim on stage 'C': msg``."""
        return ScheduleError(f"{prim} on stage '{self.name}': {msg}")

    def _leaf(self, iv, prim: str) -> IterVar:
        if self.is_placeholder:
            raise self.error(prim, "a placeholder has no loops to schedule")
        refuse_extern(self, prim)
        if not isinstance(iv, IterVar):
            raise self.error(prim, f"expected a loop variable (IterVar), got {iv!r}")
        if iv not in self.leaf_iter_vars:
            known, body = self._known(iv), getattr(self.op, "body", None)
            where = "was split or fused already" if known else "belongs to another stage"
            if not known and any(isinstance(e, Reduce) and iv in e.axes for e in walk(body)):
                where = "it is the axis of a reduction inside this stage's expression; make that "
                where += "reduction a stage of its own to schedule it"
            raise self.error(
                prim,
                f"loop {iv.name} is not a current loop of this stage ({where}); "
                f"current loops: {', '.join(v.name for v in self.leaf_iter_vars)}",
            )
        return iv

    def _known(self, iv) -> bool:
        return iv in self.root_iter_vars or any(iv in r.created for r in self.relations)

    def _new_iv(self, name: str, kind: str) -> IterVar:
        taken = {v.name for v in self.root_iter_vars}
        for r in self.relations:
            taken.update(v.name for v in r.created)
        base, n = name, 1
        while name in taken:
            name = f"{base}{n}"
            n += 1
        return make_iter_var(name, Const(0, INDEX), None, kind)

    def _not_prefetched(self, iv: IterVar, prim: str):
        if any(iv is p.loop or iv is p.spread for p in self.prefetches):
            raise self.error(prim, f"loop {iv.name} carries a prefetch; {prim} before prefetching")

    # ------------------------------------------------------------ primitives

    def split(self, parent: IterVar, factor=None, nparts=None) -> tuple[IterVar, IterVar]:
        """Split a loop in two.

            for i in 0..n:                for i.outer in 0..ceil(n/f):
              body(i)          ->           for i.inner in 0..f:
                                              if i.outer*f + i.inner < n: body(...)

        With ``nparts`` the outer loop gets that extent instead. Guards vanish
        when ``f`` provably divides ``n``.
        """
        return self.schedule.apply(steps.Split(self, parent, factor, nparts))

    def _split(self, step: steps.Split) -> tuple[IterVar, IterVar]:
        parent, factor, nparts = step.loop, step.factor, step.nparts
        self._leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise self.error("split", "give exactly one of factor= or nparts=")
        given, what = (factor, "factor") if factor is not None else (nparts, "nparts")
        try:
            amount = as_expr(given)
        except (OverflowError, TypeError) as e:
            raise self.error("split", f"{what}: {e}") from None
        if amount.dtype == "bool" or not dtypes.dtype(amount.dtype).is_int:
            raise self.error("split", f"{what} must be an integer, got {given!r}")
        if isinstance(amount, Const) and amount.value <= 0:
            raise self.error("split", f"factor/nparts must be positive, got {amount.value}")
        outer = self._new_iv(parent.name + ".outer", parent.kind)
        inner = self._new_iv(parent.name + ".inner", parent.kind)
        rel = Split(
            parent,
            outer,
            inner,
            amount if factor is not None else None,
            amount if nparts is not None else None,
        )
        if parent in self.attrs:
            raise self.error(
                "split",
                f"loop {parent.name} is already annotated "
                f"{self.attrs[parent]}; split before annotating",
            )
        self._not_prefetched(parent, "split")
        self.relations.append(rel)
        pos = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[pos : pos + 1] = [outer, inner]
        return outer, inner

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two loops and order them ``x.outer, y.outer, x.inner, y.inner``.

        for i: for j:   ->   for i.outer: for j.outer: for i.inner: for j.inner:
        """
        return self.schedule.apply(steps.Tile(self, x_parent, y_parent, x_factor, y_factor))

    def _tile(self, step: steps.Tile):
        xo, xi = self._split(steps.Split(self, step.x_parent, step.x_factor))
        yo, yi = self._split(steps.Split(self, step.y_parent, step.y_factor))
        self._reorder(steps.Reorder(self, (xo, yo, xi, yi)))
        return xo, yo, xi, yi

    def reorder(self, *ivars):
        """Put the given loops in this order, in the positions they occupy.

        for i: for j: for k:   reorder(k, i)  ->  for k: for j: for i:
        """
        if len(ivars) == 1 and isinstance(ivars[0], (list, tuple)):
            ivars = tuple(ivars[0])
        self.schedule.apply(steps.Reorder(self, tuple(ivars)))

    def _reorder(self, step: steps.Reorder):
        ivars = step.loops
        for iv in ivars:
            self._leaf(iv, "reorder")
        if len(set(map(id, ivars))) != len(ivars):
            raise self.error("reorder", "a loop is named twice")
        pos = sorted(self.leaf_iter_vars.index(iv) for iv in ivars)
        for p, iv in zip(pos, ivars):
            self.leaf_iter_vars[p] = iv
        self._check(f"reorder({', '.join(iv.name for iv in ivars)})")

    def fuse(self, *ivars) -> IterVar:
        """Fuse adjacent loops into one.

        for i in 0..n: for j in 0..m:   ->   for f in 0..n*m: i = f // m; j = f % m
        """
        if len(ivars) == 1 and isinstance(ivars[0], (list, tuple)):
            ivars = tuple(ivars[0])
        if len(ivars) < 2:
            if len(ivars) == 1:
                return self._leaf(ivars[0], "fuse")
            raise self.error("fuse", "needs at least one loop")
        return self.schedule.apply(steps.Fuse(self, tuple(ivars)))

    def _fuse(self, step: steps.Fuse) -> IterVar:
        ivars = step.loops
        for iv in ivars:
            self._leaf(iv, "fuse")
        pos = [self.leaf_iter_vars.index(iv) for iv in ivars]
        if pos != list(range(pos[0], pos[0] + len(pos))):
            raise self.error(
                "fuse",
                "loops "
                + ", ".join(iv.name for iv in ivars)
                + " are not adjacent and in order (outer first)",
            )
        kinds = {iv.kind for iv in ivars}
        if len(kinds) > 1:
            raise self.error("fuse", "cannot fuse a reduction loop with a spatial loop")
        for iv in ivars:
            if iv in self.attrs:
                raise self.error("fuse", f"loop {iv.name} is already annotated {self.attrs[iv]}")
            self._not_prefetched(iv, "fuse")
        fused = ivars[0]
        for iv in ivars[1:]:
            new = self._new_iv(f"{fused.name}.{iv.name}.fused", iv.kind)
            self.relations.append(Fuse(fused, iv, new))
            fused = new
        self.leaf_iter_vars[pos[0] : pos[-1] + 1] = [fused]
        return fused

    def skew(self, outer: IterVar, inner: IterVar, factor: int = 1) -> tuple[IterVar, IterVar]:
        """Skew ``inner`` by ``factor`` times ``outer``: ``inner' = inner + factor * outer``.

            for i in 0..n:                 for i in 0..n:
              for j in 0..m:        ->       for j' in 0..m + f*(n-1):
                body(i, j)                     if 0 <= j' - f*i < m: body(i, j' - f*i)

        After ``reorder(j', i)`` each j' is a wavefront whose i iterations may be
        independent (then ``parallel(i)`` is legal). Returns ``(outer, inner')``.
        """
        return self.schedule.apply(steps.Skew(self, outer, inner, factor))

    def _skew(self, step: steps.Skew) -> tuple[IterVar, IterVar]:
        outer, inner, factor = step.outer, step.inner, step.factor
        for iv in (outer, inner):
            if self._leaf(iv, "skew") in self.attrs:
                raise self.error("skew", f"loop {iv.name} is already annotated {self.attrs[iv]}")
        if outer is inner:
            raise self.error("skew", "needs two different loops")
        if not isinstance(factor, int) or isinstance(factor, bool) or factor < 1:
            raise self.error("skew", f"factor must be a positive integer, got {factor!r}")
        if self.leaf_iter_vars.index(outer) > self.leaf_iter_vars.index(inner):
            raise self.error("skew", f"loop {outer.name} must enclose {inner.name}")
        if outer.kind == "reduce" and inner.kind == "spatial":
            raise self.error("skew", MIXED_SKEW.format(inner.name, outer.name))
        new = self._new_iv(inner.name + ".skew", inner.kind)
        self.relations.append(Skew(outer, inner, new, factor))
        self.leaf_iter_vars[self.leaf_iter_vars.index(inner)] = new
        self._check(f"skew({outer.name}, {inner.name})")
        return outer, new

    def shift(self, iv: IterVar, offset: int) -> IterVar:
        """Run loop ``iv`` ``offset >= 0`` iterations later (Tiramisu's ``shift``): alone
        it changes nothing; with ``compute_with`` this stage lags behind the other in
        their shared loops (jacobi's second statement a row behind its first).

            for i in 0..n:         shift(i, 1)     for i' in 0..n + 1:
              body(i)                  ->            if i' >= 1: body(i' - 1)
        """
        return self.schedule.apply(steps.Shift(self, iv, offset))

    def _shift(self, step: steps.Shift) -> IterVar:
        iv, offset = self._leaf(step.loop, "shift"), step.offset
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise self.error("shift", f"offset must be an integer >= 0, got {offset!r} "
                             "(shift the other stage to move this one earlier)")  # fmt: skip
        if iv in self.attrs:
            raise self.error("shift", f"loop {iv.name} is already annotated {self.attrs[iv]}")
        new = self._new_iv(iv.name + ".shift", iv.kind)
        self.relations.append(Shift(iv, new, offset))
        self.leaf_iter_vars[self.leaf_iter_vars.index(iv)] = new
        self._check(f"shift({iv.name}, {offset})")
        return new

    def _check(self, call: str, loop: IterVar | None = None):
        """Check the stage now, so that an error names the primitive that broke it
        (``Schedule.apply`` then puts the schedule back as it was)."""
        self.schedule.check_stage(self, call, loop)

    def _annotate(self, step):
        iv, prim = step.loop, step.prim
        self._leaf(iv, prim)
        kind = ANNOTATIONS[prim]
        if iv in self.attrs and self.attrs[iv] != kind:
            raise self.error(prim, f"loop {iv.name} is already {self.attrs[iv]}")
        self.attrs[iv] = kind
        if prim != "unroll":
            self._check(f"{prim}({iv.name})", iv)

    def parallel(self, iv):
        """Run a loop's iterations on several threads (OpenMP, static schedule)."""
        self.schedule.apply(steps.Parallel(self, iv))

    def vectorize(self, iv):
        """Run a loop's iterations as SIMD lanes (best on an inner loop of constant extent)."""
        self.schedule.apply(steps.Vectorize(self, iv))

    def unroll(self, iv):
        """Unroll a loop: constant extents are expanded in the IR, others by the compiler."""
        self.schedule.apply(steps.Unroll(self, iv))

    def rfactor(self, axis, factor_axis=0):
        """TVM's ``s.rfactor(C, k)``; ``rfactor(k, ki)`` factors ``ki``, a loop of ``k``."""
        axis, factor_axis = loop_to_factor(self, axis, factor_axis)
        return self.schedule.rfactor(self.op.output(0), axis, factor_axis)

    def pragma(self, iv, name: str, value=None):
        """TVM's ``s[C].pragma(loop, name)`` for the pragmas that are loop annotations here
        (``PRAGMAS``: ``unroll_explicit`` is ``unroll``, recorded as that step); any other
        is refused by name."""
        prim = PRAGMAS.get(name)
        if prim is None:
            raise self.error("pragma", f"unknown pragma {name!r}; known: {', '.join(PRAGMAS)}")
        getattr(self, prim)(iv)

    def prefetch(self, tensor, iv, offset: int, level: int = 1, spread=None):
        """At the start of each iteration of loop ``iv``, prefetch into cache the elements
        of ``tensor`` that this stage reads in iteration ``iv + offset`` (as TVM's
        prefetch), or, for the stage's own output, those it writes there (prefetched
        for writing). A hint only: results are unchanged, addresses past the end are fine.

            for j:                         for j:
              for k:              ->         prefetch A[f(j + 2, 0)] .. A[f(j + 2, K-1)]
                B[j] += A[f(j, k)]            for k: B[j] += A[f(j, k)]

        ``tensor`` may also be an elementwise consumer of this stage computed at the root,
        its elements at this stage's indices prefetched for writing (``offset`` may be 0).
        The elements read in one iteration must span at most 4 KiB (prefetch at an inner
        loop otherwise). ``level`` is the cache the lines go to: 1 (L1, as TVM's) or 2 (L2
        only, for data needed after other work). ``spread`` (a loop of this stage inside
        ``iv``; ``iv`` may then be an enclosing stage's): what the stages computed at ``iv``
        read in iteration ``iv + offset``, a few lines per iteration of the loops down to
        ``spread``, e.g. the next panel of B during a GEMM (see ``pypto.prefetch``).
        """
        self.schedule.apply(steps.Prefetch(self, tensor, iv, offset, level, spread))

    def _prefetch(self, step: steps.Prefetch):
        spread = step.spread
        self._leaf(step.loop if spread is None else spread, "prefetch")
        check_prefetch(self, step.tensor, step.offset, step.level, spread is not None)
        self.prefetches.append(PrefetchAt(*(getattr(step, f) for f in PrefetchAt._fields)))

    def tensorize(self, iv, intrin):
        """Replace loop ``iv`` and the loops inside it by a call of ``intrin``'s C kernel
        (``pt.decl_tensor_intrin``); checked when lowered, see ``pypto.tensorize``.

            for xo:                               for xo:
              for k, xi: C[xo*4 + xi] += ..  ->     kernel(A + .., strides, C + xo*4, 1)
        """
        self.schedule.apply(steps.Tensorize(self, iv, intrin))

    def _tensorize(self, step: steps.Tensorize):
        iv, intrin = step.loop, step.intrin
        self._leaf(iv, "tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise self.error("tensorize", f"expected pt.decl_tensor_intrin(...), got {intrin!r}")
        if self.is_update or self.inline:
            raise self.error("tensorize", "only a stage of pt.compute with a buffer is tensorized")
        self.tensorized = TensorizedAt(iv, intrin)

    def compute_with(self, other: Stage, loop: IterVar, order=None):
        """Run this stage inside ``other``'s loops down to ``loop`` (a loop of either),
        after ``other``'s statement in each of their iterations (Halide's
        ``compute_with``); see ``pypto.compute_with`` for chains and imperfect nests.

            for t: for i: A[i] = f(B)          for t:
            for t: for i: B[i] = g(A)    ->      for i: A[i] = f(B)
                                                 for i: B[i] = g(A)

        A shared loop runs the longest of the stages' loops. The order is checked by
        isl. Where the tensors read each other the fused order is the program's;
        ``order`` (a root loop of either stage, or how many root loops) states that
        order when the schedule shares more loops than it (time tiling).
        """
        order = order_depth(self, other, order)
        self.schedule.apply(steps.ComputeWith(self, other, loop, order))

    def _compute_with(self, step: steps.ComputeWith):
        other, loop, order = step.parent, step.loop, step.order
        check_compute_with(self, other, loop, order)
        self.fused_with = FusedWith(other, loop, order)
        self._check(f"{self.name}.compute_with({other.name}, {loop.name})")

    def compute_at(self, parent: Stage, ivar: IterVar):
        """Compute this stage inside ``parent``'s loop ``ivar``, only the region needed there.

        for i: B[i] = f(A[i])          for io:
        for io: for ii:          ->       for i in region(io): B[i] = f(A[i])
          C[..] = g(B[..])                for ii: C[..] = g(B[..])
        """
        self.schedule.apply(steps.ComputeAt(self, parent, ivar))

    def compute_inline(self):
        """Substitute this elementwise stage into its consumers; it gets no buffer.

        B[i] = A[i] + 1; C[i] = B[i] * 2   ->   C[i] = (A[i] + 1) * 2
        """
        self.schedule.apply(steps.ComputeInline(self))

    def compute_root(self):
        """Compute this stage at the root again, whole (TVM's ``compute_root``): undoes
        ``compute_at`` and ``compute_inline``.

        for io: B[region(io)] = ..; C[..]   ->   for i: B[i] = ..;  for io: C[..]
        """
        self.schedule.apply(steps.ComputeRoot(self))

    def transform_layout(self, mapping):
        """Store element ``T[i]`` at ``mapping(i)`` (TVM's ``transform_layout``, storage
        only: the loops stay as scheduled), ``pypto.transform_layout``:
        ``s[B].transform_layout(lambda i: [i % 250, i // 250])``."""
        self.schedule.apply(steps.TransformLayout(self, layout_text(self, mapping)))
