"""Polyhedral model of a tensor's statements with isl: domains, accesses, dependences.

A *group* is every statement that writes one tensor: its pure definition
(for a reduction: ``init`` and ``update``) and its update definitions.
Other tensors are only read inside a group, and stages run producers
first, so the dependences that a schedule can break are the ones inside
a group. For each statement:

    domain      [params] -> { S1[i0, i1] : 1 <= i0 < n and ... }   (root variables)
    accesses    { S1[i0, i1] -> T[i0 - 1, i1] }     (non-affine dims: the whole extent)
    original    { S1[i0, i1] -> [1, i0, i1, 0] }     sequential program order
    scheduled   { S1[i0, i1] -> [1, floor(i1/4), i0, i1 mod 4] }   after split/reorder/skew

Dependences are memory-based (RAW, WAR, WAW): pairs of instances touching
the same element, the source first in the original order. A schedule is
legal iff it keeps every dependence lexicographically positive; a loop may
be parallel or vectorized iff no dependence is carried at its depth.
Dependences of a reduction's update on itself are commutative: they may be
reordered, but a loop carrying them still races.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from .expr import Expr, Var, walk
from .isl_expr import IslPrinter, NonAffine, guarded_reads, isl_condition
from .loop_ir import Namer
from .stage import Stage


@dataclass
class Access:
    kind: str  # "read" | "write"
    rel: isl.Map  # statement -> tensor element
    text: str  # how the source spells it, e.g. "Y[r - 1]"


@dataclass
class Statement:
    name: str  # isl tuple name
    stage: Stage
    part: str  # "body" | "init" | "update"
    roots: list  # root IterVars, the instance coordinates
    domain: isl.Set = None
    accesses: list = field(default_factory=list)
    original: isl.Map = None
    scheduled: isl.Map = None  # None when the schedule is not affine
    leaf_dims: dict = field(default_factory=dict)  # leaf IterVar -> (first, stop) time dims
    lhs_text: str = ""
    reduction: bool = False  # the update of a reduction: commutative self-dependence


@dataclass
class Dependence:
    src: Statement
    dst: Statement
    kind: str  # "RAW" | "WAR" | "WAW"
    rel: isl.Map  # src instance -> dst instance
    src_access: Access
    dst_access: Access
    parts: tuple = ()  # for a union of dependences: the ones it merges

    @property
    def commutative(self) -> bool:
        return self.src is self.dst and self.src.reduction


class GroupModel:
    """The statements writing one tensor and the dependences among them."""

    def __init__(self, stage: Stage, nests: dict):
        self.stage = stage  # the pure stage of the tensor
        self.tensor_op = stage.origin_op
        self.nests = nests  # Stage -> bounds.StageNest (extents, regions)
        self.namer = Namer()
        self.params: dict = {}  # Var -> isl name (sizes and enclosing loop variables)
        self.param_ctx: list[str] = []
        self.statements: list[Statement] = []
        self.affine = True
        self._prefix_cache: dict = {}
        self._build()
        self.deps = self._dependences()

    # ------------------------------------------------------------ construction

    def _param(self, v: Var) -> str:
        if v not in self.params:
            self.params[v] = self.namer(v, "p_" + v.name)
        return self.params[v]

    def _pstr(self) -> str:
        return "[" + ", ".join(self.params.values()) + "]"

    def _build(self):
        st = self.stage
        op = st.op
        stages = [st, *st.update_stages]
        body_parts = ["init", "update"] if op.reduce_axis else ["body"]
        n = self.nests[st]
        for part in body_parts:
            roots = list(op.axis) + (list(op.reduce_axis) if part == "update" else [])
            self.statements.append(
                Statement(f"S{len(self.statements)}", st, part, roots, reduction=(part == "update"))
            )
        for ust in st.update_stages:
            self.statements.append(
                Statement(f"S{len(self.statements)}", ust, "body", list(ust.op.axis))
            )
        # parameters: every variable in domains that is not an instance coordinate
        for s in self.statements:
            sn = self.nests[s.stage]
            for iv in s.roots:
                lo, ext = self._root_range(s.stage, sn, iv)
                for x in (lo, ext):
                    for v in walk(x):
                        if isinstance(v, Var) and v not in s.roots:
                            self._param(v)
        for d in self.tensor_op.shape:
            for v in walk(d):
                if isinstance(v, Var):
                    self._param(v)
        for iv, _ in n.prefix:  # enclosing loops of an attached stage: fixed per region
            self._param(iv.var)
            self.param_ctx.append(f"0 <= {self.params[iv.var]}")
        for v in list(self.params):
            if v.axis is None:
                self.param_ctx.append(f"0 <= {self.params[v]}")
        max_len = 0
        for s in self.statements:
            seq = 0 if s.stage is st else stages.index(s.stage)
            self._statement(s, seq)
            max_len = max(max_len, self._time_len(s))
        self.time_len = max_len
        for s in self.statements:
            s.original = self._pad(s, s._orig_exprs)
            s.scheduled = self._pad(s, s._sched_exprs) if s._sched_exprs is not None else None
            if s.scheduled is None:
                self.affine = False

    def _root_range(self, stage: Stage, n, iv):
        if not stage.is_update and iv in stage.op.axis:
            d = list(stage.op.axis).index(iv)
            return n.region[d]
        return iv.dom_min, iv.extent

    def _names(self, s: Statement) -> dict:
        names = dict(self.params)
        for d, iv in enumerate(s.roots):
            names[iv.var] = f"i{d}"
        return names

    def _statement(self, s: Statement, seq: int):
        names = self._names(s)
        pr = IslPrinter(names)
        sn = self.nests[s.stage]
        coords = ", ".join(f"i{d}" for d in range(len(s.roots)))
        cons = list(self.param_ctx)
        for d, iv in enumerate(s.roots):
            lo, ext = self._root_range(s.stage, sn, iv)
            try:
                cons.append(f"{pr(lo)} <= i{d} < {pr(lo)} + {pr(ext)}")
            except NonAffine:
                cons.append(f"0 <= i{d}")  # over-approximate a non-affine domain
        s.domain = isl.Set(f"{self._pstr()} -> {{ {s.name}[{coords}] : {' and '.join(cons)} }}")
        s._coords = coords
        # accesses to this group's tensor
        tensor = self.tensor_op
        shape = tensor.shape
        writes, reads = self._access_exprs(s)
        for kind, idx, text, when in [("write", w, t, ()) for w, t in writes] + [
            ("read", *r) for r in reads
        ]:
            rel = self._access_map(s, idx, shape, pr)
            for cond, holds in when:  # a read in a branch of pt.select happens only there
                rel = rel.intersect_domain(self._condition(s, cond, holds, pr))
            s.accesses.append(Access(kind, rel, text))
        # original order: group sequence, then the definition's own loops
        spatial = [
            f"i{d}" for d, iv in enumerate(s.roots) if iv in s.stage.op.axis or s.stage.is_update
        ]
        if s.part == "init":
            s._orig_exprs = [str(seq), *spatial, "0"]
        elif s.part == "update":
            reduce_ = [f"i{d}" for d, iv in enumerate(s.roots) if iv in s.stage.op.reduce_axis]
            s._orig_exprs = [
                str(seq),
                *[f"i{d}" for d, iv in enumerate(s.roots) if iv in s.stage.op.axis],
                "1",
                *reduce_,
            ]
        else:
            s._orig_exprs = [str(seq), *spatial]
        try:
            s._sched_exprs = [str(seq), *self._scheduled_time(s, pr)]
        except NonAffine:
            s._sched_exprs = None

    def _access_exprs(self, s: Statement):
        tensor_ops = {self.tensor_op, self.stage.op}
        op = s.stage.op
        ndim = len(self.tensor_op.shape)
        spatial = [iv.var for iv in (self.stage.op.axis)]
        if s.part in ("init", "update", "body") and not s.stage.is_update:
            lhs = tuple(spatial)
            text = f"{self.tensor_op.name}[{', '.join(v.name for v in spatial)}]"
            writes = [(lhs, text)]
            reads = [(lhs, text, ())] if s.part == "update" else []
            s.lhs_text = text + (" (init)" if s.part == "init" else "")
            return writes, reads
        lhs = op.lhs
        text = f"{self.tensor_op.name}[{', '.join(str(i) for i in lhs)}]"
        s.lhs_text = text
        reads = []
        for e in (*lhs, op.body):
            for x, when in guarded_reads(e):
                if x.tensor.op in tensor_ops:
                    reads.append((x.indices, str(x), when))
        assert len(lhs) == ndim
        return [(lhs, text)], reads

    def _condition(self, s: Statement, cond: Expr, holds: bool, pr) -> isl.Set:
        """The instances of ``s`` where ``cond`` is ``holds``; all of them when ``cond``
        is not affine (the read is then assumed to happen everywhere)."""
        try:
            text = isl_condition(cond, pr)
        except NonAffine:
            return s.domain
        where = isl.Set(f"{self._pstr()} -> {{ {s.name}[{s._coords}] : {text} }}")
        return s.domain.intersect(where) if holds else s.domain.subtract(where)

    def _access_map(self, s: Statement, idx, shape, pr) -> isl.Map:
        names = self._names(s)
        inner = _inner_axes(idx, s.roots)
        if inner:  # a read inside a reduction of an update: every element it reduces over
            return self._reduced_access(s, idx, shape, inner)
        outs, cons = [], []
        for d, e in enumerate(idx):
            try:
                outs.append(pr(e))
            except NonAffine:  # any element along this dimension
                outs.append(f"o{d}")
                try:
                    cons.append(f"0 <= o{d} < {IslPrinter(names)(shape[d])}")
                except NonAffine:
                    cons.append(f"0 <= o{d}")
        where = (" : " + " and ".join(cons)) if cons else ""
        text = f"{self._pstr()} -> {{ {s.name}[{s._coords}] -> M[{', '.join(outs)}]{where} }}"
        return isl.Map(text).intersect_domain(s.domain)

    def _reduced_access(self, s: Statement, idx, shape, inner: list) -> isl.Map:
        """``{ S[i] -> M[o] : exists e: o = idx(i, e) and e in its bounds }``: the
        elements a reduction inside an update reads (``e``: the reduce axes)."""
        names = self._names(s)
        for k, iv in enumerate(inner):
            names[iv.var] = f"e{k}"
        pr = IslPrinter(names)
        cons = []
        for iv in inner:
            try:
                lo = pr(iv.dom_min)
                cons.append(f"{lo} <= {names[iv.var]} < {lo} + {pr(iv.extent)}")
            except NonAffine:
                pass  # more elements than read: a superset is safe
        for d, e in enumerate(idx):
            try:
                cons.append(f"o{d} = {pr(e)}")
            except NonAffine:
                try:
                    cons.append(f"0 <= o{d} < {pr(shape[d])}")
                except NonAffine:
                    cons.append(f"0 <= o{d}")
        outs = ", ".join(f"o{d}" for d in range(len(idx)))
        ex = ", ".join(f"e{k}" for k in range(len(inner)))
        text = (
            f"{self._pstr()} -> {{ {s.name}[{s._coords}] -> M[{outs}] : "
            f"exists ({ex} : {' and '.join(cons)}) }}"
        )
        return isl.Map(text).intersect_domain(s.domain)

    def _scheduled_time(self, s: Statement, pr: IslPrinter) -> list[str]:
        """The time vector of ``s`` in its stage's loop nest: leaf coordinates in order."""
        st = s.stage
        n = self.nests[st]
        ext = n.ext
        coords: dict = {}
        aliases: dict = {}  # leaf -> the leaf whose time dims it shares
        for d, iv in enumerate(s.roots):  # leaf coordinates start at the box's minimum
            coords[iv] = [f"(i{d} - {pr(n.root_min[iv])})"]
        for rel in st.relations:  # the isl time map of each relation (relations.py)
            made = rel.time(coords, ext, st.leaf_iter_vars)
            if made is not None:
                coords.update(made[0])
                aliases.update(made[1])
        leaves = st.leaf_iter_vars
        out: list[str] = []
        if s.part in ("init", "update"):
            p = next(k for k, iv in enumerate(leaves) if iv.kind == "reduce")
            for iv in leaves[:p]:
                self._place(s, iv, coords[iv], out)
            out.append("0" if s.part == "init" else "1")
            for iv in leaves[p:]:
                if s.part == "update" or iv.kind == "spatial":
                    self._place(s, iv, coords[iv], out)
        else:
            for iv in leaves:
                self._place(s, iv, coords[iv], out)
        for inner, outer in aliases.items():
            if outer in s.leaf_dims:
                s.leaf_dims[inner] = s.leaf_dims[outer]
        return out

    def _place(self, s: Statement, iv, c: list, out: list):
        s.leaf_dims[iv] = (len(out) + 1, len(out) + 1 + len(c))  # +1: the sequence dim
        out.extend(c)

    def _time_len(self, s: Statement) -> int:
        n = len(s._orig_exprs)
        if s._sched_exprs is not None:
            n = max(n, len(s._sched_exprs))
        return n

    def _pad(self, s: Statement, exprs: list) -> isl.Map:
        full = exprs + ["0"] * (self.time_len - len(exprs))
        m = isl.Map(f"{self._pstr()} -> {{ {s.name}[{s._coords}] -> [{', '.join(full)}] }}")
        return m.intersect_domain(s.domain)

    # ------------------------------------------------------------ dependences

    def _dependences(self, related=lambda a1, a2: True) -> list[Dependence]:
        """Every RAW/WAR/WAW pair of accesses whose instances may touch one element, the
        source first in the original order (``related``: which access pairs to test)."""
        deps = []
        kinds = {("write", "read"): "RAW", ("read", "write"): "WAR", ("write", "write"): "WAW"}
        for s1 in self.statements:
            for s2 in self.statements:
                before = s1.original.lex_lt_map(s2.original)
                for a1 in s1.accesses:
                    for a2 in s2.accesses:
                        kind = kinds.get((a1.kind, a2.kind))
                        if kind is None or not related(a1, a2):
                            continue
                        rel = a1.rel.apply_range(a2.rel.reverse()).intersect(before)
                        if not rel.is_empty():
                            deps.append(Dependence(s1, s2, kind, rel, a1, a2))
        return deps

    # ------------------------------------------------------------ queries

    def violation(self):
        """The first dependence the schedule reverses, with a witness pair, or None."""
        for d in self.deps:
            if d.commutative or d.src.scheduled is None or d.dst.scheduled is None:
                continue
            bad = d.rel.intersect(d.src.scheduled.lex_ge_map(d.dst.scheduled))
            if not bad.is_empty():
                return d, bad
        return None

    def carried(self, stage: Stage, leaf) -> tuple | None:
        """A dependence carried by ``leaf`` of ``stage``, with witness pairs, or None."""
        for d in self._pair_deps(stage):
            if d.src.stage is not stage or d.dst.stage is not stage:
                continue
            if leaf not in d.src.leaf_dims or leaf not in d.dst.leaf_dims:
                continue
            if d.src.leaf_dims[leaf] != d.dst.leaf_dims[leaf]:
                continue  # the same variable, but two different loops (init and update nests)
            if d.src.scheduled is None or d.dst.scheduled is None:
                return d, d.rel  # not affine: assume the worst
            first, stop = d.src.leaf_dims[leaf]
            pairs = d.rel.intersect(self._equal_prefix(d.src, d.dst, first)).subtract(
                self._equal_prefix(d.src, d.dst, stop)
            )
            if not pairs.is_empty():
                for part in d.parts or (d,):  # the dependence behind it
                    sub = pairs.intersect(part.rel)
                    if not sub.is_empty():
                        return part, sub
        return None

    def _pair_deps(self, stage: Stage):
        """Dependences within ``stage``, merged per statement pair (fewer isl calls)."""
        merged: dict = {}
        for d in self.deps:
            if d.src.stage is stage and d.dst.stage is stage:
                merged.setdefault((d.src.name, d.dst.name), []).append(d)
        for parts in merged.values():
            if len(parts) == 1:
                yield parts[0]
                continue
            rel = parts[0].rel
            for p in parts[1:]:
                rel = rel.union(p.rel)
            yield Dependence(
                parts[0].src,
                parts[0].dst,
                parts[0].kind,
                rel.coalesce(),
                parts[0].src_access,
                parts[0].dst_access,
                tuple(parts),
            )

    def _equal_prefix(self, a: Statement, b: Statement, n: int) -> isl.Map:
        key = (a.name, b.name, n)
        if key not in self._prefix_cache:
            self._prefix_cache[key] = _equal_prefix(a, b, n)
        return self._prefix_cache[key]


def _inner_axes(idx, roots) -> list:
    """The reduce axes an access's indices name that are not instance coordinates (those
    of a reduction inside an update), with the axes their bounds name, outer first."""
    out: list = []

    def add(e):
        for v in walk(e):
            iv = getattr(v, "axis", None)
            if isinstance(v, Var) and iv is not None and iv.kind == "reduce":
                if iv not in roots and iv not in out:
                    add(iv.dom_min)
                    add(iv.extent)
                    out.append(iv)

    for e in idx:
        add(e)
    return out


def _equal_prefix(a: Statement, b: Statement, n: int) -> isl.Map:
    """Pairs of instances of ``a`` and ``b`` whose scheduled times agree on the first n dims."""
    ta, tb = a.scheduled, b.scheduled
    total = ta.dim(isl.dim_type.out)
    ta = ta.project_out(isl.dim_type.out, n, total - n)
    tb = tb.project_out(isl.dim_type.out, n, total - n)
    return ta.apply_range(tb.reverse())


def witness(rel: isl.Map, d: Dependence, params: dict) -> str:
    """``r=1 -> r=2`` (plus parameter values) from a sample of ``rel``."""
    pt = rel.wrap().sample_point()
    n_in = len(d.src.roots)
    vals = [
        pt.get_coordinate_val(isl.dim_type.set, k).to_python()
        for k in range(n_in + len(d.dst.roots))
    ]

    def fmt(roots, vs):
        items = [f"{iv.name}={v}" for iv, v in zip(roots, vs)]
        return items[0] if len(items) == 1 else "(" + ", ".join(items) + ")"

    text = f"{fmt(d.src.roots, vals[:n_in])} -> {fmt(d.dst.roots, vals[n_in:])}"
    pvals = []
    for k, v in enumerate(params):
        if v.axis is None:  # sizes, not enclosing loop variables
            pvals.append(f"{v.name}={pt.get_coordinate_val(isl.dim_type.param, k).to_python()}")
    return text + (f", with {', '.join(pvals)}" if pvals else "")
