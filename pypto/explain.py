"""``s.explain()``: per stage, the loop nest, the dependences and what may run in parallel.

stage 'T.update(0)': T[ri, rj] = max(T[ri - 1, rj], T[ri, rj - 1]) + S[ri, rj]
  loops:
    rj.skew  0 .. m + n - 3   serial    parallel: no (carries RAW)   vectorize: no
    ri       0 .. n - 1       parallel  parallel: yes                vectorize: yes
  dependences (distance over the loops above):
    RAW  T[ri, rj] reads T[ri - 1, rj], written by T[ri, rj]   distance (1, 1)
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .bounds import Bounds
from .compute_with import cluster_map
from .errors import ScheduleError
from .extern import extern_of
from .legality import carried_root_level, describe, model_of
from .poly import GroupModel
from .stage import Stage

if TYPE_CHECKING:  # a type only: the schedule module imports this one
    from .schedule import Schedule


def _definition(st: Stage) -> str:
    op = st.op
    if st.is_update:
        lhs = ", ".join(str(i) for i in op.lhs)
        return f"{op.target.name}[{lhs}] = {op.body}"
    if not hasattr(op, "body"):
        return "placeholder"
    idx = ", ".join(iv.name for iv in op.axis)
    return "; ".join(f"{t.name}[{idx}] = {b}" for t, b in zip(op.outputs, op.bodies))


def _leaf_distance(m: GroupModel, d, st: Stage) -> str:
    if d.src.scheduled is None or d.dst.scheduled is None:
        return "not affine"
    delta = d.rel.apply_domain(d.src.scheduled).apply_range(d.dst.scheduled).deltas()
    out = []
    for iv in st.leaf_iter_vars:
        if iv not in d.src.leaf_dims or d.src.leaf_dims.get(iv) != d.dst.leaf_dims.get(iv):
            out.append("-")
            continue
        first, stop = d.src.leaf_dims[iv]
        parts = []
        for k in range(first, stop):
            lo, hi = delta.dim_min_val(k), delta.dim_max_val(k)
            if lo.is_int() and hi.is_int() and lo.to_python() == hi.to_python():
                parts.append(str(lo.to_python()))
            elif lo.is_int() and lo.to_python() >= 0:
                parts.append("+")
            else:
                parts.append("*")
        out.append(parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")")
    return "(" + ", ".join(out) + ")"


class Explanation(str):
    """The report as text (``str``), returned by ``explain`` after it printed it: at a
    Python prompt its ``repr`` is one line, so the report does not show twice."""

    def __repr__(self) -> str:
        stages = self.count("\nstage '") + self.startswith("stage '")
        return f"<explanation of {stages} stage(s), printed above; str() gives the text>"


def explain(sch: Schedule, file=None) -> Explanation:
    """Print, per stage, the loop nest, the dependences (distance vectors) and which
    loops are legal to parallelize or vectorize, to ``file`` (default: stdout); return
    the report as text."""
    text = report(sch)
    print(text, file=file if file is not None else sys.stdout, end="")
    return text


def report(sch: Schedule) -> Explanation:
    """The text ``explain`` prints."""
    low = Bounds(sch)
    cmap = cluster_map(sch)
    lines = []
    models: dict = {}
    for st in sch.stages:
        if st.is_placeholder:
            continue
        head = f"stage '{st.name}': {_definition(st)}"
        if st.inline:
            lines.append(head + "\n  inlined into its consumers\n")
            continue
        if extern_of(st) is not None:
            reads = ", ".join(t.name for t in st.op.input_tensors)
            lines.append(
                f"stage '{st.name}': pt.extern, one call of {st.op.extern_func}: reads every "
                f"element of {reads}, writes every element of {st.name}\n"
            )
            continue
        try:
            n = low.nest(st)
        except ScheduleError as e:
            lines.append(f"{head}\n  cannot lower yet: {e}\n")
            continue
        if st.attach is not None:
            head += f"\n  computed at {st.attach[0].name}.{st.attach_loop.name}"
        if st.tensorized is not None:
            iv, intrin = st.tensorized
            head += f"\n  loops from {iv.name} inward: the tensor intrinsic {intrin.name}"
        if st.fused_with is not None:
            other, loop = st.fused_with.stage, st.fused_with.loop
            head += f"\n  computed with {other.name} in its loops down to {loop.name}"
        pure = st.target_stage or st
        if pure not in models:  # with the statements of a compute_with group, if any
            models[pure] = model_of(sch, pure, low)
        m = models[pure]
        shared = cmap[st].members if st in cmap else ()
        lines.append(head)
        lines.append("  loops:")
        width = max((len(iv.name) for iv in st.leaf_iter_vars), default=0)
        for iv in st.leaf_iter_vars:
            found = m.carried(st, iv) if m.affine else carried_root_level(m, st, iv)
            ok = "yes" if found is None else f"no (carries {found[0].kind})"
            kind = st.attrs.get(iv, "serial")
            lines.append(
                f"    {iv.name:<{width}}  0 .. {n.leaf_ext[iv]}   {kind:<10}  "
                f"parallel/vectorize: {ok}"
            )
        deps = [d for d in m.deps if d.dst.stage is st]
        if deps:
            lines.append("  dependences (distance over the loops above; - where not shared):")
            for d in deps:
                if d.src.stage is not st and d.src.stage in shared:
                    where = f"from stage '{d.src.stage.name}', in the loops they share"
                elif d.src.stage is not st:
                    where = f"from stage '{d.src.stage.name}', which runs before"
                else:
                    where = "distance " + _leaf_distance(m, d, st)
                lines.append(f"    {d.kind}  {describe(d)}   {where}")
        else:
            lines.append("  dependences: none")
        lines.append("")
    return Explanation("\n".join(lines))
