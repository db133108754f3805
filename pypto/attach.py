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
"""

from __future__ import annotations

from . import steps
from .errors import ScheduleError
from .expr import Reduce
from .extern import refuse_extern, refuse_extern_input
from .stage import AttachedAt, Stage


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
