"""Where a stage is computed: the rules of ``compute_at``, ``compute_inline`` and
``compute_root`` (``Schedule.apply`` runs them; ``Stage`` has the public calls).

    root (the default)      for i: B[i] = f(A[i])
                            for i: C[i] = g(B[i])
    compute_at(s[C], i)     for i: B[i] = f(A[i]); C[i] = g(B[i])      (B's region at i)
    compute_inline()        for i: C[i] = g(f(A[i]))                   (no buffer for B)
    compute_root()          back to the first form (TVM's ``compute_root``)

Each rule checks what the stage is (a placeholder, an output, a stage with update
definitions or fused with another is never moved) and records the placement; the
legality of the schedule around it is checked by lowering, as for every stage.
Bound inference asks the last two questions here: which consumers an attached stage
serves through the loops they share (``in_shared_loops``) and whether a reduction's
``init=`` would read it before it is computed (``check_init_reads``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from . import steps
from .compute_with import shared_after
from .dtypes import INDEX
from .errors import ScheduleError
from .expr import Binary, Const, Expr, Reduce, substitute, tensor_reads, walk
from .extern import refuse_extern, refuse_extern_input
from .simplify import simplify
from .stage import AttachedAt, Stage

if TYPE_CHECKING:  # a type only: bound inference imports this module
    from .bounds import StageNest


def compute_at(stage: Stage, step: steps.ComputeAt):
    parent, ivar = step.parent, step.loop
    if not isinstance(parent, Stage):
        raise stage.error("compute_at", f"expected a stage (s[T]), got {parent!r}")
    if parent is stage:
        raise stage.error("compute_at", "cannot attach a stage to itself")
    if stage.is_placeholder:
        raise stage.error("compute_at", "a placeholder is not computed")
    refuse_extern(stage, "compute_at")
    if stage.origin_op in stage.schedule.outputs:
        raise stage.error("compute_at", "an output is computed at the root")
    if stage.fused_with is not None or any(
        st.fused_with is not None and st.fused_with.stage is stage for st in stage.schedule.stages
    ):
        raise stage.error("compute_at", "a stage computed with another runs at the root")
    if stage.update_stages or stage.is_update:
        raise stage.error(
            "compute_at",
            "a tensor with update definitions is computed at "
            "the root, its updates in sequence after it",
        )
    try:
        parent._leaf(ivar, "compute_at")
    except ScheduleError as e:  # name the attached stage too, not only the target's
        where = f"compute_at on stage '{parent.name}'"
        msg = str(e).replace(where, f"compute_at of stage '{stage.name}' at '{parent.name}'", 1)
        raise ScheduleError(msg.replace("this stage", f"'{parent.name}'", 1)) from None
    stage.attach, stage.inline = AttachedAt(parent, ivar), False


def compute_inline(stage: Stage, step: steps.ComputeInline):
    if stage.is_placeholder:
        raise stage.error("compute_inline", "a placeholder cannot be inlined")
    refuse_extern(stage, "compute_inline")
    refuse_extern_input(stage, "compute_inline")
    if isinstance(stage.op.body, Reduce):
        raise stage.error("compute_inline", "a reduction cannot be inlined; use compute_at")
    if stage.op.num_outputs > 1:
        raise stage.error("compute_inline", "a multi-output stage cannot be inlined")
    if stage.update_stages or stage.is_update:
        raise stage.error(
            "compute_inline",
            "a tensor with update definitions has a buffer; it cannot be inlined",
        )
    if stage.origin_op in stage.schedule.outputs:
        raise stage.error("compute_inline", "an output cannot be inlined")
    stage.inline, stage.attach = True, None


def compute_root(stage: Stage, step: steps.ComputeRoot):
    if stage.is_placeholder:
        raise stage.error("compute_root", "a placeholder is not computed")
    if stage.is_update:
        raise stage.error("compute_root", "an update runs where its tensor's definition runs")
    stage.inline, stage.attach = False, None


# ---------------------------------------------------------------- checked by bound inference


def in_shared_loops(st: Stage, cn: StageNest, q: Stage, qn: StageNest, depth: int):
    """Consumer ``cn`` as seen from ``depth`` loops of the root stage ``q`` it shares them
    with (``compute_with``, running after ``q`` in each iteration): ``(cn, its context)``
    with its loops there named by ``q``'s; None where it does not share them. A stage
    computed at one of those loops of ``q`` is then ready for it as well::

        for io: mean.local[..] = ..                       compute_at(s[DX], io)
                for ii: DX[io*B + ii] = f(mean.local[ii])
                for q: DW.rf[io] += g(mean.local[q])      compute_with(s[DX], io)

    The merged loop runs the longest of the shared loops, so they must count alike.
    """
    c = cn.stage
    if q.attach is not None or c.attach is not None or shared_after(q, c) < depth:
        return None
    pairs = list(zip(c.leaf_iter_vars[:depth], q.leaf_iter_vars[:depth]))
    for civ, qiv in pairs:  # the merged loop runs the longer one: count them alike
        diff = simplify(Binary("sub", cn.box_ext[civ], qn.box_ext[qiv], INDEX))
        if not (isinstance(diff, Const) and diff.value == 0):
            raise ScheduleError(
                f"compute_at on stage '{st.name}' at loop {qiv.name} of '{q.name}': "
                f"'{c.name}' reads it in the loops they share (compute_with), but its loop "
                f"{civ.name} runs {cn.box_ext[civ]} iterations where {qiv.name} runs "
                f"{qn.box_ext[qiv]}; give the shared loops the same extents (start "
                f"{civ.name} at 0)"
            )
    names = {civ.var: qiv.var for civ, qiv in pairs}
    root_value = {iv: substitute(v, names) for iv, v in cn.root_value.items()}
    own = [(iv, cn.box_ext[iv]) for iv in c.leaf_iter_vars[depth:]]
    return replace(cn, root_value=root_value), [*qn.context[:depth], *own]


def check_init_reads(st: Stage, c: Stage, body: Expr, prefix, stage_of) -> None:
    """Refuse attaching ``st`` inside a reduction loop of its consumer ``c`` whose
    ``init=`` reads it: the starting value is stored before that loop runs.

        for i: S[i] = x[i]; for k: S[i] += A[i, k]     (x.local at k: not there yet)
    """
    reads = [
        r for e in walk(body) if isinstance(e, Reduce) and e.init for r in tensor_reads(e.init[0])
    ]
    if not any(stage_of(r.tensor) is st for r in reads):
        return
    for iv, _ in prefix:
        if iv.kind == "reduce" and iv in c.leaf_iter_vars:
            raise ScheduleError(
                f"compute_at on stage '{st.name}': '{c.name}' reads it in its init=, which "
                f"runs before its reduction loop {iv.name}; attach it at a loop outside that"
            )
