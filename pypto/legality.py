"""Legality of schedules, decided by the dependence analysis in ``poly``.

Two checks, each raising ``ScheduleError`` with the stage, the primitive,
the loop, the dependence in source terms and a witness pair from isl:

- ``check_order``: every dependence stays lexicographically positive under
  the scheduled loop order (split, fuse, reorder, skew);
- ``check_carried``: a loop marked parallel or vectorized carries no
  dependence.

Primitives on stages of tensors with update definitions call ``check_stage``
as they are applied, so the error names the call that broke the schedule;
``check_schedule`` runs at lowering, on the final schedule, for every stage
(annotations of pure definitions are checked there only: their loop order
is free, so nothing earlier can be wrong).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import islpy as isl

from . import regions
from .bounds import Bounds, Nests
from .compute_with import cluster_map, clusters, node_order
from .errors import ScheduleError
from .poly import Dependence, GroupModel, witness
from .poly_cluster import ClusterModel
from .relations import root_sources
from .stage import Stage

if TYPE_CHECKING:  # a type only: the schedule module imports this one
    from .schedule import Schedule

_VERB = {"parallel": "parallel", "vectorized": "vectorize"}


def _pure(stage: Stage) -> Stage:
    return stage.target_stage or stage


def model_of(sch: Schedule, stage: Stage, nests: Nests | None = None) -> GroupModel | None:
    """The polyhedral model checking ``stage``: its tensor's statements, with every tensor
    its statements share loops with (``compute_with``)."""
    pure = _pure(stage)
    if pure.is_placeholder or pure.inline:
        return None
    inferred = nests or Bounds(sch)  # a schedule being built: infer just these stages
    groups = cluster_groups(sch, pure)
    for g in groups or (pure,):
        for st in (g, *g.update_stages):
            inferred.nest(st)
    if groups is None:
        return GroupModel(pure, inferred.nests)
    index = {st: k for k, st in enumerate(sch.stages)}
    return ClusterModel(groups, inferred.nests, node_order(sch, inferred), index)


def cluster_groups(sch: Schedule, pure: Stage) -> list | None:
    """The pure stages of every tensor whose statements interleave with ``pure``'s
    through compute_with (``pure`` included), in schedule order; None without any."""
    cmap = cluster_map(sch)
    if not any(st in cmap for st in (pure, *pure.update_stages)):
        return None
    groups, work = {pure}, [pure]
    while work:
        g = work.pop()
        for st in (g, *g.update_stages):
            for m in cmap[st].members if st in cmap else ():
                if _pure(m) not in groups:
                    groups.add(_pure(m))
                    work.append(_pure(m))
    return sorted(groups, key=sch.stages.index)


def check_stage(sch: Schedule, stage: Stage, call: str, loop=None) -> None:
    """Check one stage right after a primitive (``call`` is how the error names it)."""
    pure = _pure(stage)
    try:
        groups = cluster_groups(sch, pure)
    except ScheduleError as e:  # the primitive broke a compute_with
        raise ScheduleError(f"{call} on '{stage.name}' breaks {e}") from None
    needs_order = bool(pure.update_stages) or groups is not None
    if not needs_order:
        # A pure definition's only dependences are those of a reduction on itself:
        # its loop order is free (they commute) and lowering checks its annotations.
        return
    try:
        m = model_of(sch, stage)
    except ScheduleError:
        return  # an unfinished schedule (compute_at pending, ...): lowering checks it
    if m is None:
        return
    check_order(m, stage, call)
    for iv, kind in stage.attrs.items():  # a reorder can make a marked loop carry a dependence
        if kind in _VERB:
            what = call if iv is loop else f"{call}, with {_VERB[kind]}({iv.name}),"
            check_carried(m, stage, iv, what)


def check_acyclic(sch: Schedule, nests: Nests) -> None:
    """Tensors must not read each other: all definitions of a tensor (its pure definition
    and its updates) run together, producers first, so in a cycle one of them would read
    another's buffer before anything wrote it."""
    if clusters(sch):  # compute_with orders some statements: the order of the root nodes
        node_order(sch, nests)
        return
    edges: dict = {}  # pure stage -> {producer pure stage: the stage that reads it}
    for st in sch.stages:  # the definitions' reads: an inlined stage still reads its inputs
        if st.is_placeholder:
            continue
        for read in st.definition_reads():
            p = _pure(nests.stage_of(read.tensor))
            if p is not _pure(st) and not p.is_placeholder:
                edges.setdefault(_pure(st), {}).setdefault(p, (st, read.tensor))
    state: dict = {}
    for start in sch.stages:
        path = _cycle_from(start, edges, state, [])
        if path:
            first = min(range(len(path)), key=lambda k: sch.stages.index(path[k]))
            path = path[first:] + path[:first]  # in schedule order, for a stable message
            names = [f"'{st.name}'" for st in path]
            who = " and ".join(names) if len(names) == 2 else ", ".join(names)
            reads = ", ".join(
                f"'{edges[a][b][0].name}' reads {edges[a][b][1].name}"
                for a, b in zip(path, path[1:] + path[:1])
            )
            raise ScheduleError(
                f"tensors {who} read each other ({reads}): the definitions of a tensor run "
                "together, producers first, so one of them would read a buffer before it is "
                "written; give their update definitions one loop order with compute_with, "
                "or compute one of them from a copy of the other"
            )


def _cycle_from(st, edges: dict, state: dict, path: list) -> list | None:
    """A cycle of ``edges`` reachable from ``st`` (iterative depth-first search)."""
    if state.get(st) is not None:
        return None
    stack = [(st, iter(edges.get(st, {})))]
    state[st] = "open"
    path = [st]
    while stack:
        node, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            state[node] = "done"
            stack.pop()
            path.pop()
            continue
        if state.get(nxt) == "open":
            return path[path.index(nxt) :]
        if nxt not in state:
            state[nxt] = "open"
            path.append(nxt)
            stack.append((nxt, iter(edges.get(nxt, {}))))
    return None


def check_schedule(sch: Schedule, nests: Nests) -> None:
    """Check every stage of a finished schedule over its inferred nests (``bounds.infer``;
    called by ``lower``)."""
    check_acyclic(sch, nests)
    check_attached_arguments(nests)
    done = set()
    for st in sch.stages:
        if st.is_placeholder or st.inline or st.is_update or st in done:
            continue
        groups = cluster_groups(sch, st) or [st]
        done.update(groups)
        stages = [s for g in groups for s in (g, *g.update_stages)]
        annotated = [(s, iv, k) for s in stages for iv, k in s.attrs.items() if k in _VERB]
        for g in groups:
            check_shared_regions(sch, g, nests)
        if len(stages) == 1 and not annotated:
            continue
        m = model_of(sch, st, nests)
        if len(stages) > 1:
            check_order(m, st, None)
        for s, iv, kind in annotated:
            check_carried(m, s, iv, f"{_VERB[kind]}({iv.name})")


def check_attached_arguments(nests: Nests) -> None:
    """An argument computed at another stage's loop (``compute_at``) is computed where
    that stage reads it, into the caller's array: those parts must make the whole
    tensor, or the caller would get an array partly written."""
    for t in nests.args:
        st = nests.sch.stage_map.get(t.op)
        if st is None or st.attach is None or regions.covers_whole(nests.nest(st), t.shape):
            continue
        q, _ = st.attach
        raise ScheduleError(
            f"argument {t.name} is computed at {q.name}'s loop {st.attach_loop.var.name} "
            f"(compute_at), only where {q.name} reads it, and {q.name} does not read all "
            f"of it: the caller's array would be partly written; keep {t.name} at the "
            "root to pass it, or leave it out of the arguments"
        )


def check_shared_regions(sch: Schedule, st: Stage, nests: Nests) -> None:
    """A stage attached inside a parallel loop, into a shared full-size buffer, must not
    have two iterations of that loop compute the same element (a write-write race). Such
    a stage gets a buffer per iteration (``Nests.local_shape``) unless it is an argument
    of the kernel: its buffer is then the caller's."""
    if st.attach is None or nests.local_shape(st) is not None:
        return
    n = nests.nest(st)
    k = regions.racing_loop(n, nests.parallel_prefix(n))
    if k is not None:
        loop = n.prefix[k][0]
        q, L = st.attach
        raise ScheduleError(
            f"compute_at({st.name}, {q.name}.{L.name}) inside parallel loop {loop.name} "
            f"would race: different iterations of {loop.name} compute overlapping parts of "
            f"{st.name} into the caller's buffer (it is an argument); attach it where the "
            "iterations' parts do not overlap, or do not parallelize that loop"
        )


def check_order(m: GroupModel, stage: Stage, call: str | None) -> None:
    if not m.affine:
        strict = [d for d in m.deps if not d.commutative]
        if strict:
            where = call or "the schedule"
            raise ScheduleError(
                f"{where} on '{stage.name}' cannot be verified: its loop transformations are "
                "not affine (a split by a symbolic factor?), and the statements of "
                f"'{m.stage.name}' depend on each other ({describe(strict[0])}); "
                "use constant split factors"
            )
    if isinstance(m, ClusterModel):
        early = m.early_read()
        if early is not None:
            d, pairs = early
            raise ScheduleError(
                f"{call or 'compute_with'} on '{d.dst.stage.name}': {d.dst.lhs_text} would read "
                f"{d.dst_access.text} before {d.src.lhs_text} computes it "
                f"(witness: {witness(pairs, d, m.params)})"
            )
    found = m.violation()
    if found is None:
        return
    d, pairs = found
    st = stage if call else d.dst.stage  # the stage the primitive was called on
    what = call or f"the loop order ({', '.join(iv.name for iv in st.leaf_iter_vars)})"
    hint = ""
    if call and ".compute_with(" in call:  # loops that start apart pair iterations by count
        hint = ("; shared loops pair their iterations in order, each from its own first "
                "value: shift(loop, k) offsets one")  # fmt: skip
    elif call and isinstance(m, ClusterModel):  # one member's loops moved, not the others'
        hint = (f"; '{stage.name}' shares loops with other stages (compute_with): transform "
                "every member alike, before compute_with")  # fmt: skip
    between = {d.src.stage.name: 0, d.dst.stage.name: 0}
    if list(between) != [st.name]:  # the dependence is another statement's, or two
        hint = f" (statements of {' and '.join(repr(x) for x in between)}){hint}"
    raise ScheduleError(
        f"{what} on '{st.name}' would break a dependence: {describe(d)}; the source "
        f"would no longer run first (witness: {witness(pairs, d, m.params)}){hint}"
    )


def check_carried(m: GroupModel, stage: Stage, loop, call: str) -> None:
    if not m.affine:
        found = carried_root_level(m, stage, loop)
    else:
        found = m.carried(stage, loop)
    if found is None:
        return
    d, pairs = found
    if d.commutative:
        out = m.tensor_op.name
        idx = ", ".join(iv.name for iv in m.stage.op.axis)
        raise ScheduleError(
            f"{call} on stage '{stage.name}' would race: {out}[{idx}] is read and written by "
            f"every iteration of {loop.name} (a reduction; witness: {witness(pairs, d, m.params)})"
        )
    raise ScheduleError(
        f"{call} on '{stage.name}' would race: {describe(d)}, in another iteration of "
        f"{loop.name} (witness: {witness(pairs, d, m.params)})"
    )


def describe(d: Dependence) -> str:
    """A dependence in source terms: ``Y[r] reads Y[r - 1], written by Y[r]``."""
    src, dst = d.src_access.text, d.dst_access.text
    if d.kind == "RAW":
        if (
            d.dst_access.text == d.dst.lhs_text
            and d.src_access.text == d.src.lhs_text
            and d.src is d.dst
            and d.src.reduction
        ):
            return f"{dst} accumulates into itself"
        return f"{d.dst.lhs_text} reads {dst}, written by {d.src.lhs_text}"
    if d.kind == "WAR":
        return f"{d.dst.lhs_text} overwrites the element that {d.src.lhs_text} reads as {src}"
    return f"{d.dst.lhs_text} and {d.src.lhs_text} write the same element"


def carried_root_level(m: GroupModel, stage: Stage, leaf):
    """Without an affine schedule: a loop carries every dependence whose distance may be
    non-zero along one of the root variables it is computed from (conservative)."""
    roots = root_sources(stage.relations, leaf)
    for d in m.deps:
        if d.src is not d.dst or d.src.stage is not stage:
            continue
        delta = d.rel.deltas()
        for k, iv in enumerate(d.src.roots):
            if iv in roots:
                nonzero = delta.intersect(_dim_nonzero(delta, k))
                if not nonzero.is_empty():
                    return d, d.rel
    return None


def _dim_nonzero(s: isl.Set, k: int) -> isl.Set:
    space = s.get_space()
    zero = isl.Set.universe(space).fix_val(isl.dim_type.set, k, isl.Val.zero(s.get_ctx()))
    return isl.Set.universe(space).subtract(zero)
