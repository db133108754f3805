"""Index arithmetic that stays in int64: the sizes a kernel may be called with.

The bounds of every access are proved in exact integers (``pypto.bounds_check``), and
the simplifier decides ``//``, ``%`` and comparisons of index arithmetic (loops, sizes,
constants: int64, no value read from a tensor) from exact bounds. The C computes that
arithmetic in int64, so both hold only where no intermediate value leaves int64. A
size passed as an integer argument can be anything up to 2^63 - 1, and ``seed * 10``
then wraps (``A[(seed*10 + i) % 4]`` would read before ``A``). This module finds the
first such operation of a lowered function for given ranges of its sizes:

    for i in [0, 4):                    seed = 10**18:  seed * 10 + i  reaches 10**19 + 3
      C[i] = A[(seed * 10 + i) % 4]     -> the call is refused (ValueError naming it)

``safe_size`` is the largest size (2^k - 1) for which no operation can leave int64
whatever the sizes up to it; a call with a larger size is checked exactly, once per
combination of sizes (``pypto.module``).
"""

from __future__ import annotations

from . import dtypes
from .errors import ScheduleError
from .expr import Binary, Expr, walk
from .intervals import INF, Ranges, bounds, reads_data
from .loop_ir import Allocate, For, Let, LoweredFunc, own_exprs, stmt_children

_OPS = ("add", "sub", "mul", "shl")
LO, HI = dtypes.value_range(dtypes.INDEX)
SMALLEST, LARGEST = 15, 62  # the exponents safe_size tries: 2^15 - 1 .. 2^62 - 1
SAVED_SAFE_SIZE = (1 << 31) - 1  # of a saved module whose signature does not say


def first_overflow(func: LoweredFunc, sizes: dict, unknown: bool = False) -> tuple | None:
    """``(operation, (lo, hi))``: the first int64 ``+ - * <<`` of index arithmetic in
    ``func`` whose exact bounds leave int64 when each size ``v`` lies in ``sizes[v]``
    (inclusive ``(lo, hi)``); None when none can. Bounds not known (a division by a
    size that may be 0, a loop bound read from data) count as leaving it with
    ``unknown``, and as not leaving it without."""
    return _stmt(func.body, Ranges(sizes), unknown)


def _stmt(s, ranges: Ranges, unknown: bool):
    # (a temporary's size is counted exactly before the call: arg_checks.check_temporary)
    for e in () if isinstance(s, Allocate) else own_exprs(s):
        hit = _expr(e, ranges, unknown)
        if hit is not None:
            return hit
    inner = ranges
    if isinstance(s, For):
        if bounds(s.extent, ranges)[1] <= 0:
            return None  # the loop runs no iteration
        inner = ranges.child(s.var, s.extent)
    elif isinstance(s, Let):
        inner = Ranges(ranges, extents=ranges.extents)
        inner[s.var] = bounds(s.value, ranges)
    for c in stmt_children(s):
        hit = _stmt(c, inner, unknown)
        if hit is not None:
            return hit
    return None


def _expr(e: Expr, ranges: Ranges, unknown: bool):
    for x in walk(e):
        if (
            type(x) is Binary
            and x.op in _OPS
            and x.dtype == dtypes.INDEX
            and not reads_data(x)  # a value: wraps as numpy's (pypto.intervals.may_wrap)
        ):
            lo, hi = bounds(x, ranges)
            if ((unknown or lo > -INF) and lo < LO) or ((unknown or hi < INF) and hi > HI):
                return x, (lo, hi)
    return None


def safe_size(func: LoweredFunc) -> int:
    """The largest ``2^k - 1`` (k from 15 to 62) such that no index arithmetic of
    ``func`` leaves int64 with every size from 0 to it; 0 when even 2^15 - 1 is too
    large or a bound is not known (a division by ``n - 2``): each call's sizes are then
    checked. ``ScheduleError`` when a kernel without sizes overflows (at every call)."""
    if not func.size_vars:
        hit = first_overflow(func, {})
        if hit is not None:
            raise ScheduleError(f"{func.name}: {overflow_text(hit)}")
        return (1 << LARGEST) - 1
    lo, hi = SMALLEST - 1, LARGEST  # lo: the largest k known safe (SMALLEST - 1: none)
    while lo < hi:
        k = (lo + hi + 1) // 2
        if first_overflow(func, {v: (0, (1 << k) - 1) for v in func.size_vars}, True) is None:
            lo = k
        else:
            hi = k - 1
    return (1 << lo) - 1 if lo >= SMALLEST else 0


def overflow_text(hit: tuple) -> str:
    op, (lo, hi) = hit
    reach = hi if hi > HI else lo
    return (
        f"the int64 arithmetic {op} (of loop variables, sizes and constants) reaches "
        f"{reach}, outside int64: C's arithmetic would wrap there, and the bounds proved for the "
        "kernel's accesses would not hold"
    )


def check_overflow(kernel: str, safe: int, func: LoweredFunc | None, bound: dict) -> None:
    """ValueError when a call's sizes (``bound``: Var -> (value, argument)) make index
    arithmetic leave int64: checked exactly where a size exceeds ``safe``."""
    big = [(v, x, src) for v, (x, src) in bound.items() if x > safe]
    if not big:
        return
    said = ", ".join(f"{v.name} = {x} (from argument {src})" for v, x, src in big)
    if func is None:
        raise ValueError(
            f"{kernel}: {said} exceeds {safe}, the largest size for which this saved "
            "kernel's int64 index arithmetic is known to stay in int64 (a module built by "
            "pt.build checks larger sizes exactly)"
        )
    hit = first_overflow(func, {v: (x, x) for v, (x, _) in bound.items()})
    if hit is not None:
        raise ValueError(f"{kernel}: with {said}, {overflow_text(hit)}")
