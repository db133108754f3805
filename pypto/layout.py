"""Buffer layout: the buffer each stage writes and the flat index of every access.

A pure function of the inferred nests (``bounds.Nests``): an argument tensor
writes its parameter; a stage attached where its region has a constant size
gets a small local buffer of that size, indexed from the region's corner; any
other stage a full-size buffer::

    B[i, j] at io (region 4 x 64)    ->   B.local[(i - io*4)*64 + j]   (4*64 elements)
    C[i, j] (an argument)            ->   C[i*N + j]                    (the parameter)

Lowering and tensorize both ask ``Layout.index``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bounds import Nests
from .dtypes import INDEX
from .errors import ScheduleError
from .expr import Binary, Call, Cast, Const, Expr, Load, TensorRead, walk
from .loop_ir import Buffer
from .simplify import simplify
from .stage import Stage


@dataclass(frozen=True, slots=True, eq=False)
class StageBuffers:
    """A computed stage's buffers: output 0's, the others' by value index, and the
    offsets subtracted from indices (a local buffer holds just the stage's region)."""

    buffer: Buffer
    more: dict
    offsets: tuple | None
    local: bool
    layout: object = None  # transform_layout's StorageLayout: indices -> places

    def all(self) -> list:
        return [self.buffer, *self.more.values()]


@dataclass(frozen=True, slots=True, eq=False)
class Layout:
    """Every stage's buffers (``plan``): the parameters, in argument order, first."""

    params: tuple
    placeholders: dict  # Stage -> Buffer
    stages: dict  # Stage -> StageBuffers
    copies: tuple = ()  # (stage, argument buffer): computed in another layout, copied out

    def index(self, st: Stage, indices, value_index: int = 0) -> tuple[Buffer, Expr]:
        """The buffer that holds ``st``'s output ``value_index`` and the flat index of
        element ``indices`` in it."""
        if st.is_placeholder:
            b = self.placeholders.get(st)
            if b is None:
                raise ScheduleError(f"placeholder {st.name} is read but not among the arguments")
            return b, flat_index(_checked(indices, b.shape, b.name), b.shape)
        sb = self.stages[st]
        if sb.offsets is not None:
            indices = [Binary("sub", i, o, INDEX) for i, o in zip(indices, sb.offsets)]
        if sb.layout is not None:
            indices = [simplify(i) for i in sb.layout.index(indices)]
        buf = sb.more[value_index] if value_index else sb.buffer
        return buf, flat_index(_checked(indices, buf.shape, buf.name), buf.shape)


def plan(nests: Nests) -> Layout:
    """The buffers of the inferred nests ``nests``."""
    params, placeholders, given, more = [], {}, {}, {}
    for t in nests.args:
        st = nests.sch.stage_map.get(t.op)
        b = Buffer(t.name, t.dtype, tuple(t.shape), "param")
        params.append(b)
        if st is None:  # an unused placeholder argument
            continue
        if st.is_placeholder:
            placeholders[st] = b
        elif t.value_index:
            more.setdefault(st, {})[t.value_index] = b
        else:
            given[st] = b
    stages, copies = {}, []
    for st in nests.sch.stages:
        if st.is_placeholder or st.inline or st.is_update:
            continue
        if st.layout is not None:
            stages[st] = _transformed(st, nests, given.get(st), copies)
            continue
        buf, extra, offsets, local = given.get(st), more.get(st, {}), None, False
        if buf is None or len(extra) + 1 != st.op.num_outputs:
            sizes = nests.local_shape(st)
            if sizes is not None:
                shape = tuple(
                    Const(max(int(s), 1), INDEX)
                    if isinstance(s, (int, float))
                    else simplify(Binary("max", s, Const(1, INDEX), INDEX))  # at run time
                    for s in sizes
                )
                local, offsets = True, tuple(m for m, _ in nests.nest(st).region)
            else:
                shape = tuple(st.op.shape)
            scope = "local" if local else "global"
            for t in st.op.outputs:
                if t.value_index and t.value_index not in extra:
                    extra[t.value_index] = Buffer(t.name, t.dtype, shape, scope)
            if buf is None:
                buf = Buffer(st.op.output(0).name, st.op.dtype, shape, scope)
        stages[st] = StageBuffers(buf, extra, offsets, local)
    return Layout(tuple(params), placeholders, stages, tuple(copies))


def _transformed(st: Stage, nests: Nests, arg: Buffer | None, copies: list) -> StageBuffers:
    """The buffer of a stage stored as ``transform_layout`` says: the whole tensor in the
    new layout; an argument is copied out of it at the end (``copies``)."""
    if nests.local_shape(st) is not None:
        raise ScheduleError(
            f"transform_layout on stage '{st.name}': it is computed at a loop of another "
            "stage (compute_at) and holds only the region used there; store it at the root"
        )
    t = st.op.output(0)
    name = t.name if arg is None else f"{t.name}.layout"
    if arg is not None:
        copies.append((st, arg))
    return StageBuffers(
        Buffer(name, t.dtype, st.layout.shape, "global"), {}, None, False, st.layout
    )


def flat_index(indices, shape) -> Expr:
    out = None
    for i, s in zip(indices, shape):
        out = i if out is None else Binary("add", Binary("mul", out, s, INDEX), i, INDEX)
    return out if out is not None else Const(0, INDEX)


def _checked(indices, shape, name: str) -> list:
    """Indices computed from data (``H[X[i]]``) are checked at run time: out of range,
    the kernel touches element 0 instead and reports an error to the caller, naming
    the tensor and the dimension."""
    out = []
    for dim, (i, d) in enumerate(zip(indices, shape)):
        if any(isinstance(x, (TensorRead, Load)) for x in walk(i)):
            note = f"an index into {name} computed from data (dimension {dim} of size {d})"
            i = Call("checked_index", (Cast(i, INDEX) if i.dtype != INDEX else i, d), INDEX, note)
        out.append(i)
    return out
