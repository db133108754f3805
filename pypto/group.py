"""``s.create_group(outputs, inputs)``: stages scheduled together (TVM's ``create_group``).

The group holds the stages that compute ``outputs`` from ``inputs`` (the outputs
included, the inputs only with ``include_inputs``), producers first. Attaching the
group attaches each member that is not already attached inside it, so a chain of
producers moves into a consumer's loop in one call:

    for i: T1[i] = A[i] + 1                  for io:
    for i: T2[i] = T1[i] * 2          ->       for i in region(io): T1[i] = A[i] + 1
    for io: for ii: C[..] = T2[..]             for i in region(io): T2[i] = T1[i] * 2
                                               for ii: C[..] = T2[..]
    g = s.create_group(outputs=T2, inputs=A); g.compute_at(s[C], io)

Each member's attachment is an ordinary ``compute_at`` (or ``compute_inline``) step,
checked and recorded as such: the schedule's JSON replays without the group.
"""

from __future__ import annotations

from .errors import ScheduleError
from .tensor import Tensor


class StageGroup:
    """Stages of one schedule treated as a unit by ``compute_at`` and ``compute_inline``."""

    def __init__(self, sch, members: list):
        self.schedule = sch
        self.members = tuple(members)

    def __repr__(self):
        return f"StageGroup({', '.join(m.name for m in self.members)})"

    def __contains__(self, stage) -> bool:
        return stage in self.members

    @property
    def num_child_stages(self) -> int:
        return len(self.members)

    def compute_at(self, parent, loop) -> None:
        """Attach every member not attached to another member at ``parent``'s ``loop``,
        producers first."""
        if parent in self.members:
            raise ScheduleError(
                f"create_group: cannot attach the group to its own member '{parent.name}'"
            )
        for st in self.members:
            if st.attach is None or st.attach[0] not in self.members:
                st.compute_at(parent, loop)

    def compute_inline(self) -> None:
        """Inline every member (each must be inlinable, as ``Stage.compute_inline``)."""
        for st in self.members:
            st.compute_inline()


def create_group(sch, outputs, inputs=(), include_inputs: bool = False) -> StageGroup:
    """The stages on the paths from ``inputs`` to ``outputs`` (tensors of ``sch``):
    ``outputs`` and every stage they read, stopping at ``inputs`` (included only with
    ``include_inputs``) and at placeholders."""
    outs = _tensors(outputs, "outputs")
    ins = _tensors(inputs, "inputs")
    for t in (*outs, *ins):
        if t.op not in sch.stage_map:
            raise ScheduleError(f"create_group: {t.name} is not part of this schedule")
    stop = {t.op for t in ins}
    found, todo = set(), [t.op for t in outs]
    while todo:
        op = todo.pop()
        if op in found:
            continue
        found.add(op)
        if op not in stop:
            todo.extend(t.op for t in op.input_tensors)
    members = [
        st
        for st in sch.stages
        if st.op in found
        and not st.is_placeholder
        and not st.is_update
        and (include_inputs or st.op not in stop)
    ]
    if not members:
        raise ScheduleError("create_group: no stage between the inputs and the outputs")
    return StageGroup(sch, members)


def _tensors(x, what: str) -> list:
    items = list(x) if isinstance(x, (list, tuple)) else [x]
    for t in items:
        if not isinstance(t, Tensor):
            raise TypeError(f"create_group: {what} must be tensors, got {t!r}")
    return items
