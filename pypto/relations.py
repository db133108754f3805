"""Relations between a stage's loops: how split, fuse and skew make new loops from old.

Each primitive records one immutable relation; lowering reads extents down and values
up through them, the polyhedral model reads the time map.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expr import Expr
from .tensor import IterVar


@dataclass(frozen=True, slots=True, eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: Expr | None
    nparts: Expr | None


@dataclass(frozen=True, slots=True, eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(frozen=True, slots=True, eq=False)
class Skew:
    """``skewed = inner + factor * outer``; ``inner`` is ``skewed - factor * outer``."""

    outer: IterVar
    inner: IterVar
    skewed: IterVar
    factor: int


def created(r) -> tuple:
    """The loop variables a relation creates."""
    if isinstance(r, Split):
        return (r.outer, r.inner)
    if isinstance(r, Fuse):
        return (r.fused,)
    return (r.skewed,)


def root_sources(relations: list, leaf: IterVar) -> set:
    """The root loop variables a leaf loop is computed from."""
    parents: dict = {}
    for r in relations:
        if isinstance(r, Split):
            parents[r.outer] = parents[r.inner] = (r.parent,)
        elif isinstance(r, Fuse):
            parents[r.fused] = (r.outer, r.inner)
        elif isinstance(r, Skew):
            parents[r.skewed] = (r.inner, r.outer)
    out, todo = set(), [leaf]
    while todo:
        iv = todo.pop()
        if iv in parents:
            todo.extend(parents[iv])
        else:
            out.add(iv)
    return out
