"""``promote_accumulators``: an element a serial loop keeps updating lives in a local
scalar for the loop's duration (register promotion), loaded once before it and
stored once after:

    for k in 0..1024:                        int32_t A_rowsum_r[1];
      S[i] = S[i] + (int32_t)A[i, k]    ->   A_rowsum_r[0] = S[i];
                                             for k in 0..1024:
                                               A_rowsum_r[0] = A_rowsum_r[0] + (int32_t)A[i, k];
                                             S[i] = A_rowsum_r[0];

The C compiler cannot always do this itself: a store through a buffer may alias the
other loads of the loop (int8 data are chars, which may alias anything), so it keeps
the element in memory and does not vectorize the reduction; on a Zen 5 the row sums
of a 1024 x 1024 int8 matrix took 14% of an int8 GEMM's time that way.

An element qualifies when every access to its buffer inside the loop (loads, stores,
intrinsic operands, prefetches) has the same index, that index does not change in the
loop (it names no loop variable bound there), at least one access stores, none is
under an ``if`` (which may guard the index) or in an inner loop that may run no
times (``for io < (0 - ii) // 2 + 1``: the element may be out of range where it does
not run), the buffer is not allocated inside the loop, and the loop has a constant
extent of at least 1 (so the element is accessed anyway). The order of the
operations is unchanged. A store of the element just before the loop (a reduction's
``S[i] = 0``) becomes the scalar's first value (``_forward``); C declares the scalar
as ``int32_t A_rowsum_r = 0;`` (``c_expr.scalar_buffers``).
"""

from __future__ import annotations

from .dtypes import INDEX
from .expr import Const, Load, map_children, vars_of, walk
from .loop_ir import (
    Allocate,
    Buffer,
    For,
    IfThenElse,
    IntrinCall,
    Prefetch,
    Seq,
    StmtMutator,
    Store,
    own_exprs,
    seq,
    walk_stmts,
)
from .structural import skey

ZERO = Const(0, INDEX)


def _never(out: dict, buf) -> None:
    """Mark ``buf`` as never promoted (an access with no index)."""
    out.setdefault(id(buf), [buf, set(), None, False])[1].add(None)


def _accesses(body) -> dict:
    """buffer id -> (buffer, {index keys}, an index, stores?) for every access in ``body``;
    a buffer an intrinsic or a prefetch names, that is allocated inside ``body``, or
    that is accessed under an ``if`` (which may guard the index) gets the key None
    (never promoted)."""
    out: dict = {}
    for s in walk_stmts(body):
        if isinstance(s, Allocate):
            _never(out, s.buffer)
        elif isinstance(s, IfThenElse) or (
            isinstance(s, For) and not (isinstance(s.extent, Const) and s.extent.value >= 1)
        ):  # accesses that may not happen: an if, or an inner loop that may run no times
            for x in walk_stmts(s):
                for e in own_exprs(x):
                    for y in walk(e):
                        if isinstance(y, Load):
                            _never(out, y.buffer)
                if isinstance(x, Store):
                    _never(out, x.buffer)

    def note(buf, idx, store=False):
        entry = out.setdefault(id(buf), [buf, set(), None, False])
        entry[1].add(None if idx is None else skey(idx))
        entry[2] = idx if entry[2] is None else entry[2]
        entry[3] = entry[3] or store

    for s in walk_stmts(body):
        if isinstance(s, Store):
            note(s.buffer, s.index, store=True)
        elif isinstance(s, IntrinCall):
            for op in s.operands:
                note(op.buffer, None)
        elif isinstance(s, Prefetch):
            note(s.buffer, None)
        for e in own_exprs(s):
            for x in walk(e):
                if isinstance(x, Load):
                    note(x.buffer, x.index)
    return out


def _bound_here(loop: For) -> set:
    return {id(s.var) for s in walk_stmts(loop) if isinstance(s, For)}


def _candidates(loop: For) -> list:
    """``(buffer, index)`` of the elements ``loop`` may keep in a scalar."""
    bound = _bound_here(loop)
    out = []
    for buf, keys, idx, stores in _accesses(loop.body).values():
        if not stores or len(keys) != 1 or None in keys:
            continue
        if buf.scope == "local" and _is_scalar(buf):
            continue  # already a scalar
        if any(id(v) in bound for v in vars_of(idx)):
            continue
        out.append((buf, idx))
    return out


def _is_scalar(buf: Buffer) -> bool:
    return len(buf.shape) <= 1 and all(isinstance(d, Const) and d.value == 1 for d in buf.shape)


class _Redirect(StmtMutator):
    """Loads and stores of ``buf`` (at the one index the loop uses) redirected to
    ``acc[0]``."""

    def __init__(self, buf: Buffer, acc: Buffer):
        self.buf, self.acc = buf, acc

    def expr(self, e):
        if isinstance(e, Load) and e.buffer is self.buf:
            return Load(self.acc, ZERO, e.dtype)
        return map_children(e, self.expr)

    def mutate_store(self, s: Store):
        if s.buffer is self.buf:
            return Store(self.acc, ZERO, self.expr(s.value))
        return super().mutate_store(s)


class _Promote(StmtMutator):
    def __init__(self):
        self.made: set = set()  # ids of the scalars made here

    def mutate_seq(self, s: Seq):
        out: list = []
        for x in s.stmts:
            x = self.visit(x)
            forwarded = _forward(out[-1], x, self.made) if out else None
            if forwarded is not None:
                out[-1] = forwarded
            elif x is not None:
                out.append(x)
        return seq(*out)

    def mutate_for_(self, s: For):
        if s.kind == "serial" and isinstance(s.extent, Const) and s.extent.value >= 1:
            found = _candidates(s)
            if found:
                return self._promote(s, found)
        return super().mutate_for_(s)

    def _promote(self, loop: For, found: list):
        body = loop.body
        pre, post, accs = [], [], []
        for buf, idx in found:
            acc = Buffer(f"{buf.name}_r", buf.dtype, (Const(1, INDEX),), "local")
            self.made.add(id(acc))
            body = _Redirect(buf, acc).visit(body)
            pre.append(Store(acc, ZERO, Load(buf, idx, buf.dtype)))
            post.append(Store(buf, idx, Load(acc, ZERO, buf.dtype)))
            accs.append(acc)
        body = self.visit(body)  # inner loops may keep other elements
        out = seq(*pre, For(loop.var, loop.extent, loop.kind, body), *post)
        for acc in reversed(accs):
            out = Allocate(acc, Const(1, INDEX), out)
        return out


def _forward(prev, block, made: set):
    """``prev; block`` as one block when ``prev`` stores the value the promoted ``block``
    first loads into its scalar: the scalar starts from that value, and the store goes,
    as ``block`` stores the element after its loop anyway.

        C[i] = 0;                  C_r[0] = 0;
        C_r[0] = C[i];      ->     for k ...
        for k ...                  C[i] = C_r[0];
        C[i] = C_r[0];
    """
    if not isinstance(prev, Store):
        return None
    allocs = []
    while isinstance(block, Allocate) and id(block.buffer) in made:
        allocs.append(block.buffer)
        block = block.body
    if not allocs or not isinstance(block, Seq):
        return None
    stmts = list(block.stmts)
    for n, x in enumerate(stmts[: len(allocs)]):  # the loads into the scalars
        v = x.value
        if isinstance(v, Load) and v.buffer is prev.buffer and skey(v.index) == skey(prev.index):
            stmts[n] = Store(x.buffer, x.index, prev.value)
            out = seq(*stmts)
            for acc in reversed(allocs):
                out = Allocate(acc, Const(1, INDEX), out)
            return out
    return None


def promote_accumulators(s):
    """``s`` with the elements serial loops keep updating held in local scalars."""
    return _Promote().visit(s)
