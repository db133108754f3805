"""Relations between a stage's loops: how split, fuse, skew and shift make new loops
from old.

Each primitive records one immutable relation, and each relation states here, once,
everything the compiler asks of it (as TVM's ``message_passing``):

- ``created``: the loops it makes; ``parents``: the loops it makes them from;
- ``extents``: extents flowing down, parents' to the created loops';
- ``values``: index values flowing up, the created loops' to the parents' (with the
  guards a non-dividing split or a skew needs);
- ``time``: the isl time coordinates of the created loops from the parents'.

Bound inference (``bounds``) walks ``extents`` forward and ``values`` backward over a
stage's relations; the polyhedral model (``poly``) walks ``time``; ``schedule``,
``legality`` and ``domain`` ask ``created`` and ``parents``.

    for i in 0..n:                   split(i, 8)     for i.outer in 0..ceil(n/8):
      body(i)                            ->            for i.inner in 0..8:
                                                         i = i.outer*8 + i.inner  (if < n)
"""

from __future__ import annotations

from dataclasses import dataclass

from .dtypes import INDEX
from .expr import Binary, Cmp, Const, Expr
from .isl_expr import NonAffine
from .tensor import IterVar


def _ceildiv(a: Expr, b: Expr) -> Expr:
    return Binary(
        "floordiv", Binary("add", a, Binary("sub", b, Const(1, INDEX), INDEX), INDEX), b, INDEX
    )


@dataclass(frozen=True, slots=True, eq=False)
class Split:
    """``parent = outer * extent(inner) + inner``; guarded where the parts overrun it."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: Expr | None
    nparts: Expr | None

    @property
    def created(self) -> tuple:
        return (self.outer, self.inner)

    @property
    def parents(self) -> tuple:
        return (self.parent,)

    def extents(self, ext: dict) -> dict:
        pe = ext[self.parent]
        if self.factor is not None:
            return {self.outer: _ceildiv(pe, self.factor), self.inner: self.factor}
        # no more parts than cover the parent (8 in 32: 8), and never an empty part: a
        # parent whose extent is 0 here (an attached region) then runs no iteration
        inner = Binary("max", _ceildiv(pe, self.nparts), Const(1, INDEX), INDEX)
        return {self.inner: inner, self.outer: _ceildiv(pe, inner)}

    def values(self, val: dict, ext: dict, simp) -> tuple[dict, list]:
        v = simp(val[self.outer] * ext[self.inner] + val[self.inner])
        total = simp(ext[self.outer] * ext[self.inner] - ext[self.parent])
        conds = []
        if not (isinstance(total, Const) and total.value == 0):
            conds.append((Cmp("lt", v, ext[self.parent]), self.parent.kind == "reduce"))
        return {self.parent: v}, conds

    def time(self, coords: dict, ext: dict, leaves: list):
        """``(coordinates of the created loops, aliases)``, or None when the parent has no
        coordinates here (a reduce axis split, seen from the init statement)."""
        if self.parent not in coords:
            return None
        f, pc = ext[self.inner], coords[self.parent]
        if len(pc) != 1 or not isinstance(f, Const):
            # a symbolic factor, or a parent of several coordinates (a fused loop of
            # symbolic extents), is not affine; but while outer and inner stay adjacent
            # loops they order exactly like the parent: its coordinates for both
            if (
                self.outer in leaves
                and self.inner in leaves
                and leaves.index(self.inner) == leaves.index(self.outer) + 1
            ):
                return {self.outer: list(pc), self.inner: []}, {self.inner: self.outer}
            raise NonAffine(f"split of {self.parent.name} by {f}")
        p = pc[0]
        return {
            self.outer: [f"floor(({p})/{f.value})"],
            self.inner: [f"(({p}) mod {f.value})"],
        }, {}


@dataclass(frozen=True, slots=True, eq=False)
class Fuse:
    """``fused = outer * extent(inner) + inner``."""

    outer: IterVar
    inner: IterVar
    fused: IterVar

    @property
    def created(self) -> tuple:
        return (self.fused,)

    @property
    def parents(self) -> tuple:
        return (self.outer, self.inner)

    def extents(self, ext: dict) -> dict:
        # a loop of no iterations may have a negative extent ([2, n) at n = 1): the
        # product of two must not turn positive (simplified away where sizes allow)
        zero = Const(0, INDEX)
        outer, inner = (Binary("max", ext[x], zero, INDEX) for x in (self.outer, self.inner))
        return {self.fused: Binary("mul", outer, inner, INDEX)}

    def values(self, val: dict, ext: dict, simp) -> tuple[dict, list]:
        f, inner_ext = val[self.fused], ext[self.inner]
        return {
            self.outer: simp(Binary("floordiv", f, inner_ext, INDEX)),
            self.inner: simp(Binary("mod", f, inner_ext, INDEX)),
        }, []

    def time(self, coords: dict, ext: dict, leaves: list):
        if self.outer not in coords:
            return None
        e = ext[self.inner]
        o, i = coords[self.outer], coords[self.inner]
        if isinstance(e, Const) and len(o) == len(i) == 1:
            return {self.fused: [f"({o[0]}) * {e.value} + ({i[0]})"]}, {}
        return {self.fused: o + i}, {}  # (outer, inner) orders like outer*e + inner


@dataclass(frozen=True, slots=True, eq=False)
class Skew:
    """``skewed = inner + factor * outer``; ``inner`` is ``skewed - factor * outer``."""

    outer: IterVar
    inner: IterVar
    skewed: IterVar
    factor: int

    @property
    def created(self) -> tuple:
        return (self.skewed,)

    @property
    def parents(self) -> tuple:
        return (self.inner, self.outer)

    def extents(self, ext: dict) -> dict:
        # inner + f*outer spans [0, ext(inner) + f*(ext(outer) - 1))
        return {self.skewed: ext[self.inner] + (ext[self.outer] - 1) * self.factor}

    def values(self, val: dict, ext: dict, simp) -> tuple[dict, list]:
        v = simp(val[self.skewed] - val[self.outer] * self.factor)
        red = self.inner.kind == "reduce"
        conds = [(Cmp("ge", v, Const(0, INDEX)), red), (Cmp("lt", v, ext[self.inner]), red)]
        return {self.inner: v}, conds

    def time(self, coords: dict, ext: dict, leaves: list):
        if self.inner not in coords:
            return None
        a, b = coords[self.outer], coords[self.inner]
        if len(a) != 1 or len(b) != 1:
            raise NonAffine(f"skew of a fused loop {self.inner.name}")
        return {self.skewed: [f"({b[0]}) + {self.factor} * ({a[0]})"]}, {}


@dataclass(frozen=True, slots=True, eq=False)
class Shift:
    """``shifted = parent + offset`` (a constant ``offset >= 0``): the loop runs
    ``offset`` iterations later, with nothing to do in its first ``offset``."""

    parent: IterVar
    shifted: IterVar
    offset: int

    @property
    def created(self) -> tuple:
        return (self.shifted,)

    @property
    def parents(self) -> tuple:
        return (self.parent,)

    def extents(self, ext: dict) -> dict:
        return {self.shifted: ext[self.parent] + self.offset}

    def values(self, val: dict, ext: dict, simp) -> tuple[dict, list]:
        v = simp(val[self.shifted] - self.offset)
        return {self.parent: v}, [(Cmp("ge", v, Const(0, INDEX)), self.parent.kind == "reduce")]

    def time(self, coords: dict, ext: dict, leaves: list):
        if self.parent not in coords:
            return None
        if len(coords[self.parent]) != 1:
            raise NonAffine(f"shift of a fused loop {self.parent.name}")
        return {self.shifted: [f"({coords[self.parent][0]}) + {self.offset}"]}, {}


def root_sources(relations: list, leaf: IterVar) -> set:
    """The root loop variables a leaf loop is computed from."""
    parents = {iv: r.parents for r in relations for iv in r.created}
    out, todo = set(), [leaf]
    while todo:
        iv = todo.pop()
        if iv in parents:
            todo.extend(parents[iv])
        else:
            out.add(iv)
    return out


def derives_from(relations, loop, axis) -> bool:
    """Whether ``loop`` is ``axis`` or made from it by ``relations`` (splits, fuses...)."""
    seen, todo = set(), [loop]
    while todo:
        iv = todo.pop()
        if iv is axis:
            return True
        if iv not in seen:
            seen.add(iv)
            todo.extend(p for rel in relations if iv in rel.created for p in rel.parents)
    return False
