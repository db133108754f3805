"""Integer intervals: the inclusive bounds of an index or value expression, and
whether its arithmetic may wrap.

``bounds(e, ranges)`` walks ``e`` with the known ranges of its variables (loop
variables, sizes) and one rule per operator; a value read from a tensor is
bounded by its dtype (int8: -128 .. 127; 64-bit: unbounded), and a cast that
narrows keeps its operand's bounds only where they fit the narrower type.

    bounds(io*32 + ii, {io: (0, 3), ii: (0, 31)})   ->  (0, 127)

Integer arithmetic wraps in its dtype, as numpy's (the C computes int8, int16
and uint8 in int32 and truncates): ``may_wrap`` says where that can happen, so
that the simplifier decides comparisons, min/max, division and modulo from
bounds only where it cannot; ``bounds(..., wrapped=True)`` gives the values the
kernel computes, for code generation. Index arithmetic over loops and sizes
never wraps (a call whose sizes would make it is refused: ``pypto.overflow``);
values read from tensors may.
"""

from __future__ import annotations

import math

from . import dtypes
from .expr import (
    CHILD_FIELDS,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Load,
    Select,
    TensorRead,
    Var,
    children,
)

INF = math.inf


class Ranges(dict):
    """Var -> inclusive (lo, hi) python numbers (+-inf when unknown); ``extents``
    holds the symbolic extent of loop variables whose bound is not a number."""

    def __init__(self, *a, extents=None, **kw):
        super().__init__(*a, **kw)
        self.extents = dict(extents or {})
        self.memo: dict = {}  # (id, wrapped) -> (expression, bounds), while the ranges hold

    def __setitem__(self, var, lo_hi):
        self.memo.clear()
        super().__setitem__(var, lo_hi)

    def __delitem__(self, var):
        self.memo.clear()
        super().__delitem__(var)

    def update(self, *a, **kw):
        self.memo.clear()
        super().update(*a, **kw)

    def setdefault(self, var, lo_hi=None):
        self.memo.clear()
        return super().setdefault(var, lo_hi)

    def pop(self, var, *default):
        self.memo.clear()
        return super().pop(var, *default)

    def popitem(self):
        self.memo.clear()
        return super().popitem()

    def clear(self):
        self.memo.clear()
        super().clear()

    def __ior__(self, other):
        self.memo.clear()
        return super().__ior__(other)

    def child(self, var=None, extent=None) -> Ranges:
        """A copy with ``var`` ranging over ``[0, extent)``."""
        r = Ranges(self, extents=self.extents)
        if var is not None:
            hi = bounds(extent, self)[1]
            r[var] = (0, hi - 1 if hi != INF else INF)
            if hi == INF:
                r.extents[var] = extent
        return r


def bounds(e: Expr, ranges: Ranges, wrapped: bool = False) -> tuple:
    """Inclusive (lo, hi) of an integer expression; +-inf where unknown. Exact (the
    numbers, for reasoning), or with ``wrapped`` the values the kernel computes: an
    operation that may leave its dtype gives anywhere in it. Kept in ``ranges.memo``:
    the shared parts of an expression (inlined stages read many times) are bounded once."""
    if isinstance(e, Const):
        return (e.value, e.value)
    if isinstance(e, Var):
        return ranges.get(e, (-INF, INF))
    memo = getattr(ranges, "memo", None)
    if memo is None:
        return _bounds(e, ranges, wrapped)
    hit = memo.get((id(e), wrapped))
    if hit is None or hit[0] is not e:
        hit = memo[(id(e), wrapped)] = (e, _bounds(e, ranges, wrapped))
    return hit[1]


def _bounds(e: Expr, ranges: Ranges, wrapped: bool) -> tuple:
    if isinstance(e, Binary):
        rule = _BOUND_RULES.get(e.op)
        if rule is not None:
            lo, hi = rule(e, ranges, wrapped)
            if wrapped and _is_int(e):  # (infinite: sizes, checked by pypto.overflow)
                vlo, vhi = dtypes.value_range(e.dtype)
                if (-INF < lo < vlo) or (vhi < hi < INF):
                    return (vlo, vhi)
            return (lo, hi)
    if isinstance(e, Select):
        (a, b), (c, d) = bounds(e.t, ranges, wrapped), bounds(e.f, ranges, wrapped)
        return (min(a, c), max(b, d))
    d = dtypes.dtype(e.dtype)
    if isinstance(e, Cast) and _is_int(e.value):
        lo, hi = bounds(e.value, ranges, wrapped)
        vlo, vhi = dtypes.value_range(e.dtype) if d.is_int else (-INF, INF)
        return (lo, hi) if vlo <= lo and hi <= vhi else (vlo, vhi)  # a narrowing cast wraps
    if isinstance(e, (TensorRead, Load)) and d.is_int and (d.bits < 64 or wrapped):
        return dtypes.value_range(e.dtype)
    if _is_index(e):  # an index checked in [0, n)
        return (0, bounds(e.args[1], ranges)[1] - 1)
    if d.kind == "uint" or d.kind == "bool":
        return (0, INF)
    return (-INF, INF)


def may_wrap(e: Expr, ranges: Ranges) -> bool:
    """Whether an integer ``+ - * <<`` in ``e`` may leave the range of its dtype (and
    wrap), where values read from tensors take part; the indices of reads
    are index arithmetic and are not looked into."""
    if not reads_data(e):  # index arithmetic: the common case, one walk
        return False
    return any(leaves_type(x, ranges) and reads_data(x) for x in _value_nodes(e))


def leaves_type(e: Expr, ranges: Ranges) -> bool:
    """Whether the integer ``+ - * << //`` ``e`` (its operands within their bounds as
    computed) may give a value outside its dtype's range, which then wraps
    (``//``: ``INT8_MIN // -1``)."""
    if not (isinstance(e, Binary) and e.op in _WRAPS and _is_int(e)):
        return False
    lo, hi = _BOUND_RULES[e.op](e, ranges, True)
    vlo, vhi = dtypes.value_range(e.dtype)
    return lo < vlo or hi > vhi


_WRAPS = ("add", "sub", "mul", "shl", "floordiv")


# integer dtypes that are never an index's (int64): their arithmetic is on values, and
# wraps, even where no tensor is read (``pt.cast("int32", i) + 2147483600``)
_VALUES = frozenset(n for n in dtypes.DTYPES if dtypes.dtype(n).is_int and n != dtypes.INDEX)


def reads_data(e: Expr) -> bool:
    """Whether values, not index arithmetic, take part in ``e``: one read from a tensor
    (not as an index), or anything of an integer type other than the index's int64
    (``abs(int8(-128))``, ``pt.cast("uint32", i) - 3``).
    Asked of every integer operation the simplifier meets (bottom up), so a plain loop
    that stops at the parts it was asked of before."""
    hit = _READS.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    out, stack, walked = False, [e], 0
    while stack and not out:
        x = stack.pop()
        t = type(x)
        walked += 1
        if t is TensorRead or t is Load or x.dtype in _VALUES:
            out = True
        elif t is Var or t is Const or (t is Call and x.name in INDEX_CALLS):
            continue
        elif (seen := _READS.get(id(x))) is not None and seen[0] is x:
            out = seen[1]
        else:
            for name in CHILD_FIELDS[t]:
                v = getattr(x, name)
                if isinstance(v, tuple):
                    stack.extend(v)
                else:
                    stack.append(v)
    if walked > 32:  # worth keeping (small ones are walked again faster than kept)
        if len(_READS) >= 1 << 16:  # the entries keep their expressions alive
            _READS.clear()
        _READS[id(e)] = (e, out)
    return out


_READS: dict = {}  # id -> (expression, reads_data's answer)


def _value_nodes(e: Expr):
    """``e`` and its sub-expressions, but not the indices of the tensors it reads."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        if not isinstance(x, (TensorRead, Load)) and not _is_index(x):
            stack.extend(children(x))


# indices kept in [0, n): checked (IndexError past the call) or clamped (region bounds)
INDEX_CALLS = ("checked_index", "clamped_index")


def _is_index(e: Expr) -> bool:
    """An index checked or clamped in range (``checked_index``, ``clamped_index``)."""
    return isinstance(e, Call) and e.name in INDEX_CALLS


def _b_add(e, r, w=False):
    (a, b), (c, d) = bounds(e.a, r, w), bounds(e.b, r, w)
    return (a + c, b + d)


def _b_sub(e, r, w=False):
    (a, b), (c, d) = bounds(e.a, r, w), bounds(e.b, r, w)
    return (a - d, b - c)


def _mul(x, y):
    if x == 0 or y == 0:
        return 0
    return x * y


def _b_mul(e, r, w=False):
    (a, b), (c, d) = bounds(e.a, r, w), bounds(e.b, r, w)
    ps = [_mul(a, c), _mul(a, d), _mul(b, c), _mul(b, d)]
    return (min(ps), max(ps))


def _b_floordiv(e, r, w=False):
    (a, b), (c, d) = bounds(e.a, r, w), bounds(e.b, r, w)
    if c == d and c > 0:
        return (a if a == -INF else a // c, b if b == INF else b // c)
    if c > 0 and a >= 0:
        return (0, b)
    return (-INF, INF)


def _b_mod(e, r, w=False):
    (a, b), (c, d) = bounds(e.a, r, w), bounds(e.b, r, w)
    if c == d and c > 0:
        if a >= 0 and b < c:
            return (a, b)
        return (0, c - 1)
    if c > 0:
        return (0, d - 1)
    return (-INF, INF)


def _b_min(e, r, w=False):
    (a, b), (c, d) = bounds(e.a, r, w), bounds(e.b, r, w)
    return (min(a, c), min(b, d))


def _b_max(e, r, w=False):
    (a, b), (c, d) = bounds(e.a, r, w), bounds(e.b, r, w)
    return (max(a, c), max(b, d))


def _b_bitand(e, r, w=False):
    (a, b), (c, d) = bounds(e.a, r, w), bounds(e.b, r, w)
    his = [h for lo, h in ((a, b), (c, d)) if lo >= 0]  # x & m lies in [0, m] for m >= 0
    return (0, min(his)) if his else _type_range(e)


def _b_bitor(e, r, w=False):  # also ^: both operands in [0, 2**k) keep the result there
    (a, b), (c, d) = bounds(e.a, r, w), bounds(e.b, r, w)
    if a >= 0 and c >= 0 and max(b, d) != INF:
        return (0, 2 ** int(max(b, d)).bit_length() - 1)
    return _type_range(e)


def _shift_by(e, r, w):
    """The constant amount of a shift within the computing type's width, or None."""
    (c, d), bits = bounds(e.b, r, w), dtypes.compute_bits(e.dtype)
    return c if c == d and 0 <= c < bits else None


def _b_shl(e, r, w=False):  # the exact product, as for *: may_wrap says where it wraps
    c = _shift_by(e, r, w)
    a, b = bounds(e.a, r, w)
    return (a * 2**c, b * 2**c) if c is not None else (-INF, INF)


def _b_shr(e, r, w=False):  # floor division by 2**c
    c = _shift_by(e, r, w)
    a, b = bounds(e.a, r, w)
    if c is None:  # toward 0 (or -1): between the operand and 0
        return (min(a, 0), max(b, 0))
    return (a if a == -INF else int(a) >> c, b if b == INF else int(b) >> c)


def _type_range(e) -> tuple:
    return dtypes.value_range(e.dtype)


_BOUND_RULES = {
    "bitand": _b_bitand,
    "bitor": _b_bitor,
    "bitxor": _b_bitor,
    "shl": _b_shl,
    "shr": _b_shr,
    "add": _b_add,
    "sub": _b_sub,
    "mul": _b_mul,
    "floordiv": _b_floordiv,
    "mod": _b_mod,
    "min": _b_min,
    "max": _b_max,
}


def _is_int(e: Expr) -> bool:
    return dtypes.dtype(e.dtype).is_int
