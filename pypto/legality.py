"""Legality of loop annotations.

A loop may run in parallel or as SIMD lanes only if no iteration depends on
another. For the pure tensor expressions of ``pt.compute`` the only loops
that carry a dependence are those derived from reduction axes: every
iteration of ``k`` reads and writes the same ``C[i, j]``.
"""

from __future__ import annotations

from .errors import ScheduleError
from .schedule import Schedule


def check_schedule(sch: Schedule) -> None:
    """Raise ScheduleError for a parallel or vectorized loop that carries a dependence."""
    for st in sch.stages:
        for iv, kind in st.attrs.items():
            if kind in ("parallel", "vectorized") and iv.kind == "reduce":
                prim = "parallel" if kind == "parallel" else "vectorize"
                out = st.op.name
                idx = ", ".join(a.name for a in st.op.axis)
                raise ScheduleError(
                    f"{prim}({iv.name}) on stage '{st.name}' would race: {out}[{idx}] is read "
                    f"and written by every iteration of {iv.name} (a reduction loop); "
                    "parallelize a spatial loop, or use rfactor"
                )
