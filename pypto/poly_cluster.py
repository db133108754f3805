"""Polyhedral model of several tensors whose statements share loops (``compute_with``).

``poly.GroupModel`` models the statements writing one tensor, as the stages of other
tensors run whole, producers first. Stages computed with each other interleave, so
their tensors are modelled together: every statement of each of those tensors, the
accesses to any of them (one isl array per tensor), and time vectors in which the
members of a cluster share the dims of their shared loops, followed by their position:

    for t:                        A.update(0): [1, t, 0, i]     (1: the cluster's place
      for i: A[i] = f(B)    ->    B.update(0): [1, t, 1, i]      among the root statements)
      for i: B[i] = g(A)

The original (semantic) order: where the fused statements update one tensor or their
tensors read each other (``fixes_order``), the fused order at the root loops, as
written, as a C nest states it; otherwise producers first, as without compute_with, and
the fusion must keep its dependences. A pure definition is a value, computed before it
is read: ``early_read`` finds a read that the fused order would run first.
"""

from __future__ import annotations

import islpy as isl

from .compute_with import Cluster
from .errors import ScheduleError
from .expr import Reduce, Var, walk
from .isl_expr import IslPrinter, guarded_reads
from .poly import Access, Dependence, GroupModel, Statement


class ClusterModel(GroupModel):
    """The statements of ``groups`` (pure stages) and the dependences among them."""

    def __init__(self, groups: list, nests: dict, order: list, stage_index: dict):
        self.groups = list(groups)
        self.node_of = {}
        for k, node in enumerate(order):
            for st in node.members if isinstance(node, Cluster) else (node,):
                self.node_of[st] = (k, node)
        self.stage_index = stage_index  # Stage -> its place in the schedule (producers first)
        self.fused_original = any(
            fixes_order(node) for node in order if isinstance(node, Cluster)
            and any(_pure(m) in self.groups for m in node.members)
        )  # fmt: skip
        super().__init__(self.groups[0], nests)

    def early_read(self):
        """A read of a pure definition's element (a value, not a sequence of updates) that
        the fused order runs before the element is computed: (write, read, pairs) or None."""
        for s1 in self.statements:
            if s1.stage.is_update or s1.part == "init":
                continue
            for s2 in self.statements:
                if s2.group is s1.group:
                    continue
                not_after = s1.original.lex_ge_map(s2.original)
                for a1 in s1.accesses:
                    for a2 in s2.accesses:
                        if a1.kind != "write" or a2.kind != "read" or not _same_array(a1, a2):
                            continue
                        rel = a1.rel.apply_range(a2.rel.reverse()).intersect(not_after)
                        if not rel.is_empty():
                            return Dependence(s1, s2, "RAW", rel, a1, a2), rel
        return None

    def _build(self):
        self.statements = []
        for g in self.groups:
            op = g.op
            for part in ["init", "update"] if op.reduce_axis else ["body"]:
                roots = list(op.axis) + (list(op.reduce_axis) if part == "update" else [])
                s = Statement(
                    f"S{len(self.statements)}", g, part, roots, reduction=part == "update"
                )
                s.group = g
                self.statements.append(s)
            for ust in g.update_stages:
                s = Statement(f"S{len(self.statements)}", ust, "body", list(ust.op.axis))
                s.group = g
                self.statements.append(s)
        for s in self.statements:
            sn = self.nests[s.stage]
            for iv in s.roots:
                for x in self._root_range(s.stage, sn, iv):
                    for v in walk(x):
                        if isinstance(v, Var) and v not in s.roots:
                            self._param(v)
        for g in self.groups:
            for d in g.origin_op.shape:
                for v in walk(d):
                    if isinstance(v, Var):
                        self._param(v)
        for v in list(self.params):
            if v.axis is None:
                self.param_ctx.append(f"0 <= {self.params[v]}")
        arrays = {g: f"M{k}" for k, g in enumerate(self.groups)}
        for s in self.statements:
            self.stage, self.tensor_op = s.group, s.group.origin_op
            self._statement(s, 0)
            for a in s.accesses:
                a.rel = a.rel.set_tuple_name(isl.dim_type.out, arrays[s.group])
            self._other_reads(s, arrays)
            self._place_in_order(s)
        self.stage, self.tensor_op = self.groups[0], self.groups[0].origin_op
        self.time_len = max(self._time_len(s) for s in self.statements)
        for s in self.statements:
            s.original = self._pad(s, s._orig_exprs)
            s.scheduled = self._pad(s, s._sched_exprs) if s._sched_exprs is not None else None
            if s.scheduled is None:
                self.affine = False

    def _other_reads(self, s: Statement, arrays: dict):
        """Reads of the other tensors of the model (``_statement`` adds its own tensor's)."""
        op = s.stage.op
        if s.stage.is_update:
            exprs = [*op.lhs, op.body]
        elif s.part == "init":
            exprs = []
        else:
            exprs = [op.body.source if isinstance(op.body, Reduce) else op.body]
        owner = {}
        for g in self.groups:
            if g is not s.group:
                owner[g.origin_op] = owner[g.op] = g
        pr = IslPrinter(self._names(s))
        for e in exprs:
            for x, when in guarded_reads(e):
                g = owner.get(x.tensor.op)
                if g is None:
                    continue
                rel = self._access_map(s, x.indices, g.origin_op.shape, pr)
                for cond, holds in when:
                    rel = rel.intersect_domain(self._condition(s, cond, holds, pr))
                s.accesses.append(
                    Access("read", rel.set_tuple_name(isl.dim_type.out, arrays[g]), str(x))
                )

    def _place_in_order(self, s: Statement):
        """The statement's place among the root statements, and inside its cluster."""
        k, node = self.node_of[s.stage]
        seq = k if self.fused_original else self.stage_index[s.stage]
        s._orig_exprs = [str(seq), *s._orig_exprs[1:]]
        if s._sched_exprs is not None:
            s._sched_exprs = [str(k), *s._sched_exprs[1:]]
        if not isinstance(node, Cluster):
            return
        k = node.members.index(s.stage)
        pos = node.positions(k)
        m = len(pos)
        if self.fused_original:
            order = node.positions(k, order=True)
            if len(order) > len(s._orig_exprs) - 1:
                raise ScheduleError(
                    f"compute_with: {s.stage.name} shares {len(order)} loops with statements "
                    "whose tensors read each other, but has only "
                    f"{len(s._orig_exprs) - 1} loop(s) of its own; such statements "
                    "fix the program's order in their fused nest, which can share at most "
                    "as many loops as the statements have (order= names the loop that "
                    "fixes it when the schedule shares more)"
                )
            s._orig_exprs = _interleave(s._orig_exprs, order)
        if s._sched_exprs is None:
            return
        leaves = s.stage.leaf_iter_vars
        shared = {s.leaf_dims.get(leaves[j]) for j in range(m)}
        if any(s.leaf_dims.get(leaves[j]) != (1 + j, 2 + j) for j in range(m)) or any(
            s.leaf_dims.get(iv) in shared for iv in leaves[m:]
        ):  # a shared loop that is not one affine dim, or whose dim an unshared loop has
            s._sched_exprs = None  # too (the outer loop of a symbolic split: its parent's)
            return
        s._sched_exprs = _interleave(s._sched_exprs, pos)
        s.leaf_dims = {
            iv: (a + min(m, a - 1), b + min(m, a - 1)) for iv, (a, b) in s.leaf_dims.items()
        }

    def carried(self, stage, leaf) -> tuple | None:
        """Also the dependences between stages that share ``leaf``'s loop (a parallel
        time loop races with a statement of another tensor reading the last step)."""
        found = super().carried(stage, leaf)
        k, node = self.node_of.get(stage, (None, None))
        level = stage.leaf_iter_vars.index(leaf) if leaf in stage.leaf_iter_vars else -1
        if found is not None or not isinstance(node, Cluster):
            return found
        if level >= node.shared(node.members.index(stage)):
            return None
        first, stop = 1 + 2 * level, 2 + 2 * level
        mine = node.positions(node.members.index(stage))[:level]
        for d in self.deps:
            pair = (d.src.stage, d.dst.stage)
            if d.src.scheduled is None or d.dst.scheduled is None or d.commutative:
                continue
            if not all(self._shares(node, st, mine, level) for st in pair):
                continue
            pairs = d.rel.intersect(self._equal_prefix(d.src, d.dst, first)).subtract(
                self._equal_prefix(d.src, d.dst, stop)
            )
            if not pairs.is_empty():
                return d, pairs
        return None

    def _shares(self, node: Cluster, st, positions: list, level: int) -> bool:
        """Does ``st`` run inside the same shared loop at ``level`` as positions say?"""
        if st not in node.members:
            return False
        k = node.members.index(st)
        return node.shared(k) > level and node.positions(k)[:level] == positions

    def _dependences(self) -> list[Dependence]:
        return super()._dependences(_same_array)  # several tensors: pairs on one array


def _pure(st):
    return st.target_stage or st


def fixes_order(cluster: Cluster) -> bool:
    """Whether ``cluster``'s fused order is the program's order: two of its statements
    update one tensor (trisolv's subtract and divide), or its tensors read each other
    (jacobi's A and B). Otherwise its tensors have an order, producers first, and the
    fusion is a schedule that must keep that order's dependences."""
    groups = [_pure(m) for m in cluster.members]
    if len(set(groups)) < len(groups):
        return True
    reads = {g: set() for g in groups}
    ops = {g.origin_op: g for g in groups}
    for g in groups:
        for st in (g, *g.update_stages):
            for t in st.op.input_tensors:
                h = ops.get(t.op)
                if h is not None and h is not g:
                    reads[g].add(h)
    state: dict = {}

    def cyclic(g) -> bool:
        state[g] = "open"
        for h in reads[g]:
            if state.get(h) == "open" or (h not in state and cyclic(h)):
                return True
        state[g] = "done"
        return False

    return any(g not in state and cyclic(g) for g in groups)


def _interleave(exprs: list, pos: list) -> list:
    """``[seq, c0, c1, ...]`` -> ``[seq, c0, pos0, c1, pos1, ...]`` for the shared loops."""
    out = [exprs[0]]
    for j, p in enumerate(pos):
        out += [exprs[1 + j], str(p)]
    return out + exprs[1 + len(pos) :]


def _same_array(a: Access, b: Access) -> bool:
    return a.rel.get_tuple_name(isl.dim_type.out) == b.rel.get_tuple_name(isl.dim_type.out)
