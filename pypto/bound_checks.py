"""Run-time bound checkers: every load and store checks its index (TVM's
``tir.instrument_bound_checkers``), a debugging aid.

``pypto.bounds_check`` proves the accesses of the compute definitions in bounds before
anything is lowered. This pass checks the lowered kernel itself, at run time: every
``Load`` and ``Store`` of a buffer checks its flat index against the buffer's size.
An index out of range is not used (it is moved into the buffer) and the call raises
``IndexError`` naming the access; nothing is read or written outside the arrays. What
it catches is a defect of the lowering, so it is off by default and costs speed:
``pt.build(..., bound_checks=True)``, or ``PYPTO_BOUND_CHECKS=1`` for every build.

    for (i, 0, 4)                          for (i, 0, 4)
      C[i * 8 + j] = A[i + 4]        ->      C[checked(i * 8 + j, 32)] = A[checked(i + 4, 8)]

Prefetches (hints that never fault) and tensor intrinsics' operands (their reach is
the intrinsic's) are left alone.
"""

from __future__ import annotations

import os
from dataclasses import replace

from .dtypes import INDEX
from .expr import Call, Cast, Expr, Load, map_children
from .loop_ir import Buffer, IntrinCall, LoweredFunc, Prefetch, StmtMutator, Store
from .printer import Printer
from .simplify import simplify

ENV = "PYPTO_BOUND_CHECKS"


def wanted(bound_checks: bool | None) -> bool:
    """``build``'s ``bound_checks``; None: whether ``$PYPTO_BOUND_CHECKS`` is set (not 0)."""
    if bound_checks is None:
        return os.environ.get(ENV, "0") not in ("", "0")
    if not isinstance(bound_checks, bool):
        raise TypeError(f"bound_checks must be True, False or None, got {bound_checks!r}")
    return bound_checks


def _checked(buf: Buffer, index: Expr) -> Expr:
    if isinstance(index, Call) and index.name == "checked_index":
        return index
    size = simplify(buf.elements)
    note = f"{buf.name}[{Printer()(index)}] (of {Printer()(size)} elements)"
    i = index if index.dtype == INDEX else Cast(index, INDEX)
    return Call("checked_index", (i, size), INDEX, note)


def _loads(e: Expr) -> Expr:
    def go(x):
        x = map_children(x, go)
        if isinstance(x, Load):
            return Load(x.buffer, _checked(x.buffer, x.index), x.dtype)
        return x

    return go(e)


class _Instrument(StmtMutator):
    def expr(self, e: Expr) -> Expr:
        return _loads(e)

    def mutate_store(self, s: Store):
        return Store(s.buffer, _checked(s.buffer, _loads(s.index)), _loads(s.value))

    def mutate_prefetch(self, s: Prefetch):
        return s

    def mutate_intrin_call(self, s: IntrinCall):
        return s


def instrument(func: LoweredFunc) -> LoweredFunc:
    """``func`` with every load and store checking its index (see the module doc)."""
    return replace(func, body=_Instrument()(func.body))
