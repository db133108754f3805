"""Schedule steps: one frozen record per primitive call, what ``Schedule.apply`` takes.

A step holds the objects it names (stage, loops, tensors), so applying it in
memory never goes through names; ``to_json`` writes it as plain data, names
instead of objects, and ``Schedule.from_json`` replays such data on a fresh
schedule::

    s[C].split(i, factor=8)   ==  s.apply(Split(s[C], i, factor=8))
                              ->  {"stage": "C", "prim": "split", "loop": "i",
                                   "factor": 8, "nparts": None}

``tile`` is one step (two splits and a reorder, recorded as the call made).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from .expr import Expr


def _name(x):
    """A field's value as JSON: objects (stage, loop, tensor, intrinsic) by name, sizes
    as numbers or as the text of a symbolic expression."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, np.generic):  # a numpy number given as a factor
        return x.item()
    if isinstance(x, (list, tuple)):
        return [_name(v) for v in x]
    if isinstance(x, Expr):
        return str(x)
    return x.name


class Step:
    """Base of the step records: ``prim`` is the primitive's name; ``optional`` the fields
    written only when set (later additions: older records read the same)."""

    __slots__ = ()
    prim: ClassVar[str] = ""
    optional: ClassVar[tuple] = ()

    def to_json(self) -> dict:
        out = {
            f.name: _name(getattr(self, f.name))
            for f in fields(self)
            if not (f.name in self.optional and getattr(self, f.name) is None)
        }
        head = {"stage": out.pop("stage")} if "stage" in out else {}
        return {**head, "prim": self.prim, **out}


@dataclass(frozen=True, slots=True, eq=False)
class Split(Step):
    prim: ClassVar[str] = "split"
    stage: Any
    loop: Any
    factor: Any = None
    nparts: Any = None


@dataclass(frozen=True, slots=True, eq=False)
class Tile(Step):
    prim: ClassVar[str] = "tile"
    stage: Any
    x_parent: Any
    y_parent: Any
    x_factor: Any
    y_factor: Any


@dataclass(frozen=True, slots=True, eq=False)
class Reorder(Step):
    prim: ClassVar[str] = "reorder"
    stage: Any
    loops: tuple


@dataclass(frozen=True, slots=True, eq=False)
class Fuse(Step):
    prim: ClassVar[str] = "fuse"
    stage: Any
    loops: tuple


@dataclass(frozen=True, slots=True, eq=False)
class Skew(Step):
    prim: ClassVar[str] = "skew"
    stage: Any
    outer: Any
    inner: Any
    factor: int = 1


@dataclass(frozen=True, slots=True, eq=False)
class Shift(Step):
    prim: ClassVar[str] = "shift"
    stage: Any
    loop: Any
    offset: int


@dataclass(frozen=True, slots=True, eq=False)
class Parallel(Step):
    prim: ClassVar[str] = "parallel"
    stage: Any
    loop: Any


@dataclass(frozen=True, slots=True, eq=False)
class Vectorize(Step):
    prim: ClassVar[str] = "vectorize"
    stage: Any
    loop: Any


@dataclass(frozen=True, slots=True, eq=False)
class Unroll(Step):
    prim: ClassVar[str] = "unroll"
    stage: Any
    loop: Any


@dataclass(frozen=True, slots=True, eq=False)
class Prefetch(Step):
    prim: ClassVar[str] = "prefetch"
    optional: ClassVar[tuple] = ("spread",)
    stage: Any
    tensor: Any
    loop: Any
    offset: int
    level: int = 1
    spread: Any = None


@dataclass(frozen=True, slots=True, eq=False)
class Tensorize(Step):
    prim: ClassVar[str] = "tensorize"
    stage: Any
    loop: Any
    intrin: Any


@dataclass(frozen=True, slots=True, eq=False)
class ComputeAt(Step):
    prim: ClassVar[str] = "compute_at"
    stage: Any
    parent: Any
    loop: Any


@dataclass(frozen=True, slots=True, eq=False)
class ComputeWith(Step):
    prim: ClassVar[str] = "compute_with"
    stage: Any
    parent: Any  # the stage it runs with (after it, in their shared loops)
    loop: Any  # the innermost shared loop, a loop of either stage
    order: int | None = None  # root loops shared in the program's order (None: as loop)


@dataclass(frozen=True, slots=True, eq=False)
class ComputeInline(Step):
    prim: ClassVar[str] = "compute_inline"
    stage: Any


@dataclass(frozen=True, slots=True, eq=False)
class ComputeRoot(Step):
    prim: ClassVar[str] = "compute_root"
    stage: Any


@dataclass(frozen=True, slots=True, eq=False)
class CacheRead(Step):
    prim: ClassVar[str] = "cache_read"
    tensor: Any
    scope: str
    readers: tuple


@dataclass(frozen=True, slots=True, eq=False)
class CacheWrite(Step):
    prim: ClassVar[str] = "cache_write"
    tensor: Any
    scope: str


@dataclass(frozen=True, slots=True, eq=False)
class RFactor(Step):
    prim: ClassVar[str] = "rfactor"
    stage: Any
    loop: Any
    factor_axis: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class TransformLayout(Step):
    prim: ClassVar[str] = "transform_layout"
    stage: Any
    layout: str  # the map from the tensor's indices to places, in isl's syntax


# the step of each primitive name (what ``Schedule.from_json`` reads)
STEPS = {
    cls.prim: cls
    for cls in (
        Split, Tile, Reorder, Fuse, Skew, Shift, Parallel, Vectorize, Unroll, Prefetch, Tensorize,
        ComputeAt, ComputeWith, ComputeInline, ComputeRoot, CacheRead, CacheWrite, RFactor,
        TransformLayout,
    )
}  # fmt: skip
