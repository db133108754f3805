"""Vectorized loops peeled to their first aligned store.

A vectorized loop whose stores start part-way into a vector (a stencil's row from
column 1) stores every vector across two of them, and half its loads straddle two
cache lines. Where the stores' position within a vector is known at compile time --
each store's index is the loop variable plus terms that are multiples of the vector's
lanes and a constant -- the first iterations up to the first whole vector run as a
loop of their own, and the rest starts on a vector boundary (float64, 8 lanes)::

    #pragma omp simd                          #pragma omp simd
    for (k = 0; k < 118; ++k)                 for (k = 0; k < 7; ++k)
      B[i*14400 + j*120 + k + 1] = f(k)   ->    B[i*14400 + j*120 + k + 1] = f(k)
                                              #pragma omp simd
                                              for (k = 0; k < 111; ++k)
                                                B[i*14400 + j*120 + k + 8] = f(k + 7)

The boundary is counted from the start of each buffer, so the gain assumes buffers
that start on one: pypto's locals and the outputs a module allocates start on cache
lines, and so do PyTorch's tensors. Any other start (numpy's own arrays begin 16 bytes
into a line) computes the same, only without the gain: the iterations and their order
are unchanged. Loops shorter than ``MIN_VECTORS`` vectors are left whole (the peel's
scalar iterations would cost more than the split vectors).
"""

from __future__ import annotations

from dataclasses import replace

from .expr import Binary, Const, substitute
from .loop_ir import For, IntrinCall, LoweredFunc, Prefetch, StmtMutator, Store, seq, walk_stmts
from .passes import map_exprs
from .simplify import Lin, simplify
from .structural import skey
from .target import Target

MIN_VECTORS = 8  # a loop of fewer vectors than this runs whole


def peel_for_alignment(func: LoweredFunc, target: Target) -> LoweredFunc:
    """``func`` with each vectorized innermost loop of constant extent peeled so that its
    stores start on a vector boundary (see the module docstring)."""
    body = _Peel(target).visit(func.body)
    return func if body is func.body else replace(func, body=body)


class _Peel(StmtMutator):
    def __init__(self, target: Target):
        self.target = target

    def mutate_for_(self, s: For):
        s = super().mutate_for_(s)
        if s is None or s.kind != "vectorized" or not isinstance(s.extent, Const):
            return s
        peel = self.peel(s)
        if not peel:
            return s
        shifted = Binary("add", s.var, Const(peel, s.var.dtype), s.var.dtype)
        rest = map_exprs(s.body, lambda e: simplify(substitute(e, {s.var: shifted})))
        rest_extent = Const(s.extent.value - peel, s.extent.dtype)
        return seq(For(s.var, Const(peel, s.extent.dtype), s.kind, s.body),
                   For(s.var, rest_extent, s.kind, rest))  # fmt: skip

    def peel(self, s: For) -> int:
        """The iterations before the stores of ``s`` start on a vector boundary (0: none,
        or not known at compile time, or the loop holds other loops or calls)."""
        stores = []
        for x in walk_stmts(s.body):
            if isinstance(x, (For, IntrinCall, Prefetch)):
                return 0
            if isinstance(x, Store):
                stores.append(x)
        residues = {_residue(x, s, self.target) for x in stores}
        if len(residues) != 1 or None in residues:
            return 0
        ((residue, lanes),) = residues
        peel = -residue % lanes
        return peel if peel and s.extent.value - peel >= MIN_VECTORS * lanes else 0


def _residue(store: Store, loop: For, target: Target):
    """``(r, lanes)``: the position in a vector of the element ``store`` writes in the
    loop's first iteration, when every other term of its index is a multiple of the
    vector's lanes (and the loop's variable counts once); else None."""
    lanes = target.vector_lanes(store.buffer.elem_bytes)
    if lanes < 2:
        return None
    lin = Lin.of(simplify(store.index))
    coeffs = {k: t[1] for k, t in lin.terms.items()}
    if coeffs.pop(skey(loop.var), 0) != 1 or any(c % lanes for c in coeffs.values()):
        return None
    return lin.const % lanes, lanes
