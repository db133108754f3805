"""The merged loop nest of the stages ``compute_with`` groups (``Cluster``): their
nests share the loops down to the depth each was given, the longest of the members'
loops at each level, each member's body guarded where its own loop stops::

    for i in [0, 8): A(i)               for i in [0, 8):
    for i in [0, 6): B(i)       ->        A(i)
                                          if (i < 6) B(i)

``root_stmts`` gives the root statements of a schedule in the order they run, each
cluster as its merged nest.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .compute_with import Cluster, clusters, node_order
from .domain import shared_bounds
from .dtypes import INDEX
from .errors import ScheduleError
from .expr import Binary, Cmp, Const, Var, conjunction
from .intervals import bounds
from .loop_ir import Allocate, For, IfThenElse, Let, Seq, seq
from .passes import subst_stmt
from .simplify import simplify


def fused_stmt(low, cluster: Cluster):
    """One loop nest for the members of ``cluster`` (their nests merged down to the
    loops they share), from ``low.stage_stmt`` of each member."""
    items = [
        _Member(low.stage_stmt(m), d, m, low.nests[m].shared_domain)
        for m, d in zip(cluster.members, cluster.depths)
    ]
    return _merge(items, low.ranges, ())


class _Member(NamedTuple):
    """A member's nest below the loops merged so far; ``points``: its points in the
    shared loops (``domain.shared_domain``; None: their boxes)."""

    stmt: Any
    depth: int
    stage: Any
    points: tuple | None


def _merge(items: list, ranges, outer: tuple):
    """``outer``: the values of the shared loops merged so far."""
    out, run = [], []
    for item in items:
        if run and item.depth >= 1:
            run.append(item)
        else:
            if run:
                out.append(_fuse_run(run, ranges, outer))
            run = [item]
    out.append(_fuse_run(run, ranges, outer))
    return seq(*out)


def _fuse_run(run: list, ranges, outer: tuple):
    """One loop for the members of ``run``: the longest of their loops, each member's
    body guarded where its own loop would have stopped (a member shifted behind the
    others runs its last iterations after theirs). Where the members' points do not
    fill the box of the shared loops (skewed tiles), the loop runs only the hull of
    their points (``domain.shared_bounds``), from a lower bound computed once:

        for t in [0, T):                      let t_lo = max(0, lo(io))
          A(t)  (points for t in [a0, a1))  ->  for t' in [0, min(T, hi(io)) - t_lo):
          B(t)  (points for t in [b0, b1))        A(t' + t_lo); B(t' + t_lo)
    """
    if len(run) == 1:
        return run[0].stmt
    peeled = [_peel(m.stmt, m.stage, k == 0) for k, m in enumerate(run)]
    before = peeled[0][2]
    peeled = [(loop, body) for loop, body, _ in peeled]
    lead, lead_stage = peeled[0][0], run[0].stage
    box = lead.extent
    for loop, _ in peeled[1:]:
        if not _same(loop.extent, box, ranges):
            box = simplify(Binary("max", box, loop.extent, INDEX), ranges)
    lo, hi = _hull(run, len(outer), outer, box, ranges)
    start = None if _same(lo, Const(0, INDEX), ranges) else Var(f"{lead.var.name}_lo", INDEX)
    at = lead.var if start is None else Binary("add", lead.var, start, INDEX)
    inner, buffers = [], []
    for k, ((loop, body), m) in enumerate(zip(peeled, run)):
        if k and loop.kind != lead.kind:
            raise ScheduleError(
                f"compute_with on stage '{m.stage.name}': its loop {loop.var.name} is "
                f"{loop.kind}, loop {lead.var.name} of '{lead_stage.name}' {lead.kind}; "
                "shared loops need the same annotation: give it to the loop of every stage "
                "that shares it"
            )
        body = _lift_buffers(subst_stmt(body, {loop.var: at}), buffers)
        if not _same(loop.extent, box, ranges):
            body = IfThenElse(Cmp("lt", at, loop.extent), body)
        inner.append(m._replace(stmt=body, depth=m.depth - 1 if k else 0))
    # the merged counter runs up to the longest loop: bounds inside must know that (the
    # lead's own loop may be shorter)
    body = _merge(inner, ranges.child(lead.var, box), (*outer, at))
    for b in reversed(buffers):
        body = Allocate(b.buffer, b.size, body)
    if start is None:
        return seq(*before, For(lead.var, hi, lead.kind, body))
    ext = simplify(Binary("sub", hi, start, INDEX), ranges)
    return seq(*before, Let(start, lo, For(lead.var, ext, lead.kind, body)))


def _hull(run: list, level: int, outer: tuple, box, ranges) -> tuple:
    """``(lo, hi)`` of the shared loop at ``level``: the hull of the members' points,
    clamped to ``[0, box)`` (outside their points each member's body does nothing, and
    runs correctly anywhere in its box); the box when a member's points are not known."""
    zero = Const(0, INDEX)
    if any(m.points is None for m in run):
        return zero, box
    params = {k: v for m in run for k, v in m.points[1].items()}
    found = shared_bounds([m.points[0] for m in run], level, list(outer), params)
    if found is None:
        return zero, box
    lo, hi = (simplify(e, ranges) for e in found)
    lo = zero if bounds(lo, ranges)[1] <= 0 else simplify(Binary("max", lo, zero, INDEX), ranges)
    hi = box if _same(hi, box, ranges) else simplify(Binary("min", hi, box, INDEX), ranges)
    return lo, hi


def _same(a, b, ranges) -> bool:
    diff = simplify(Binary("sub", a, b, INDEX), ranges)
    return isinstance(diff, Const) and diff.value == 0


def _lift_buffers(body, out: list):
    """``body`` without the buffers allocated around it (under its guards too), which
    go to ``out``: a stage computed at a shared loop (``compute_at``) is read by the
    members after the one it is attached to, so its buffer holds for all of them::

        for io: {alloc mean: mean = ..; DX = f(mean)}     for io: alloc mean:
        for io: {DW += g(mean)}                       ->    {mean = ..; DX = f(mean)}; DW += g(mean)
    """
    conds = []
    while True:
        if isinstance(body, Allocate):
            out.append(body)
            body = body.body
        elif isinstance(body, IfThenElse) and body.else_ is None:
            conds.append(body.cond)
            body = body.then
        else:
            break
    return IfThenElse(conjunction(conds), body) if conds else body


def _peel(s, stage, lead: bool):
    """``s`` as its outer loop, that loop's body and the statements before it; guards on
    outer loops move inside. Only the first member of a run (``lead``) may have
    statements before its loop (the stages computed at the loop outside, its
    prefetches): they run before the shared loop, as they ran before its own."""
    conds = []
    while isinstance(s, IfThenElse) and s.else_ is None:
        conds.append(s.cond)
        s = s.then
    before = ()
    if lead and isinstance(s, Seq) and isinstance(s.stmts[-1], For):
        before, s = s.stmts[:-1], s.stmts[-1]
    if not isinstance(s, For):
        raise ScheduleError(
            f"compute_with on stage '{stage.name}': a shared loop level holds more than "
            "one loop (a reduction's init and update nests, a stage attached with "
            "compute_at, or a prefetch); share fewer loops"
        )
    body = IfThenElse(conjunction(conds), s.body) if conds else s.body
    if conds and before:
        before = (IfThenElse(conjunction(conds), seq(*before)),)
    return s, body, before


def root_stmts(low, roots: list) -> list:
    """The statements of the root stages, each cluster's members as one merged nest."""
    if not clusters(low.sch):
        return [low.stage_stmt(st) for st in roots]
    out = []
    for node in node_order(low.sch, low):
        if isinstance(node, Cluster):
            out.append(fused_stmt(low, node))
        elif node in roots:
            out.append(low.stage_stmt(node))
    return out
