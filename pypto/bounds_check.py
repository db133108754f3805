"""In-bounds proofs: every affine tensor access lies inside its tensor, proven with isl.

Each definition of the *unscheduled* program is checked on its own: a pure
definition over its axes (and reduce axes), an update definition over its
rdoms, every read (and an update's write) against the declared shape of the
tensor it touches, for every size the call may bind. A ``pt.select`` limits
the reads of each branch to the instances where that branch is taken.

    accesses of  D[i] = C[i] * 2   with C: float32[4], D: float32[8]
    bad          { S[i] : 0 <= i < 8 and (i < 0 or i >= 4) }      -> i = 4
    refused:     compute 'D': C[i] reads past dimension 0 of C (size 4) at i=4

Three outcomes per access:

- proven (by interval arithmetic, or isl finds no bad instance): nothing to do;
- refused at ``lower`` (``ScheduleError`` with a witness) when the sizes are
  constants, or when every binding of the sizes that runs the statement at all
  goes out of bounds (``Y[r + 2] = X[r]`` over ``r < n`` with ``Y`` of size ``n``);
- otherwise a ``SizeCheck``: the set of size values that go out of bounds,
  tested when the module is called, before the kernel runs (``ValueError``).

Indices isl cannot represent exactly (read from data, ``i * j``, a symbolic
divisor) and accesses under conditions it cannot represent are checked at run
time instead (``checked_index``: ``IndexError``).

Why the scheduled program needs no second proof: a schedule only reorders
the instances of each definition (guards keep split loops inside the domain),
``compute_at`` computes a sub-region of the tensor's domain (bound inference
clamps it to the shape), and ``compute_inline`` evaluates a body at indices
its consumers read, which are proven inside the shape. An attached stage's
shrunk buffer holds the region its consumers read in one iteration of the
attach loop; since those reads are proven inside the tensor, the clamped
region covers them, and the offsets map them into the small buffer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import islpy as isl

from . import dtypes
from .dtypes import INDEX
from .errors import ScheduleError
from .expr import (
    Binary,
    Call,
    Cast,
    Cmp,
    Const,
    Expr,
    Not,
    Reduce,
    Select,
    TensorRead,
    Var,
    map_children,
    walk,
)
from .intervals import INF, Ranges, bounds, leaves_type
from .loop_ir import Namer
from .poly import IslPrinter, NonAffine
from .relations import Split
from .tensor import UpdateOp

if TYPE_CHECKING:  # a type only: the schedule module imports this one
    from .schedule import Schedule

_HUGE = 2**32  # index constants from here on are refused: (i * 2**62 + i) // 2**62


def _huge(e: Expr) -> bool:
    return any(isinstance(x, Const) and isinstance(x.value, int) and abs(x.value) >= _HUGE
               for x in walk(e))  # fmt: skip


_NARROW = frozenset({"int8", "int16", "int32", "uint8", "uint16", "uint32", "uint64"})
_NEGATE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}
_ISL_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=", "ne": "!="}


class _Printer(IslPrinter):
    """isl syntax for index arithmetic; integer casts that keep every value (to as many
    bits or more, signed, or unsigned from unsigned) are transparent, narrowing ones
    wrap in C: not affine, so checked at run time (``A[pt.cast("int8", i)]``)."""

    def __init__(self, names: dict, sizes=()):
        super().__init__(names)
        # sizes are in [0, their dtype's max]: arithmetic of them alone may be exact
        self.sizes = Ranges({v: (0, dtypes.value_range(v.dtype)[1]) for v in sizes})

    def __call__(self, e: Expr) -> str:
        if isinstance(e, Binary) and e.dtype in _NARROW and not self._exact(e):
            raise NonAffine(str(e))  # it may wrap in C, where isl's arithmetic does not
        if isinstance(e, Cast) and dtypes.dtype(e.dtype).is_int:
            if dtypes.dtype(e.value.dtype).is_int:
                (lo, hi), (a, b) = (dtypes.value_range(x.dtype) for x in (e, e.value))
                if not lo <= a <= b <= hi:
                    raise NonAffine(str(e))
                return self(e.value)
        return super().__call__(e)

    def _exact(self, e: Expr) -> bool:
        """Whether narrow integer ``e`` computes its exact value: it reads only sizes and
        constants, and none of its operations can leave its type (``m - 1`` of an int32
        size ``m``: at least -1; of a uint32 one it may wrap)."""
        xs = list(walk(e))
        if any(isinstance(x, Var) and x not in self.sizes for x in xs):
            return False
        return not any(leaves_type(x, self.sizes) for x in xs if isinstance(x, Binary))

    def cond(self, e: Expr, negate: bool = False) -> str:
        """A boolean expression as an isl constraint (De Morgan for negations)."""
        if isinstance(e, Not):
            return self.cond(e.a, not negate)
        if isinstance(e, Cmp):
            if not dtypes.dtype(e.a.dtype).is_int:
                raise NonAffine(str(e))
            op = _NEGATE[e.op] if negate else e.op
            return f"({self(e.a)} {_ISL_CMP[op]} {self(e.b)})"
        if isinstance(e, Binary) and e.op in ("and", "or"):
            op = {"and": "or", "or": "and"}[e.op] if negate else e.op
            return f"({self.cond(e.a, negate)} {op} {self.cond(e.b, negate)})"
        raise NonAffine(str(e))


@dataclass(frozen=True)
class SizeCheck:
    """An access that stays in bounds only for some sizes: ``bad`` is the isl set of
    instances (with the sizes as parameters, in the order of ``params``) that leave
    the tensor; the call is refused when it is not empty for the bound sizes."""

    message: str  # "compute 'Y': X[r + 1] reads past dimension 0 of X (size m)"
    params: tuple  # the size Vars, in isl parameter order
    bad: str  # isl set text
    coords: tuple  # the instance coordinates' names, in order

    def violation(self, values: dict) -> str | None:
        """A witness text (``r=3``) when the sizes ``values`` (Var -> int) go out of bounds."""
        return _violation(self.bad, tuple(int(values[v]) for v in self.params), self.coords)


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> isl.Set:
    return isl.Set(text)


@functools.lru_cache(maxsize=1024)  # a module is called again and again at the same sizes
def _violation(bad: str, values: tuple, coords: tuple) -> str | None:
    s = _parsed(bad)
    for k, v in enumerate(values):
        s = s.fix_val(isl.dim_type.param, k, isl.Val(v))
    if s.is_empty():
        return None
    return _point_text(s.lexmin().sample_point(), coords, ())


def check_sizes(name: str, checks, values: dict) -> None:
    """Refuse a call whose bound sizes (Var -> int) would take an access out of bounds."""
    for c in checks:
        if any(v not in values for v in c.params):
            continue  # a size no argument binds: the call is refused elsewhere
        w = c.violation(values)
        if w is not None:
            sizes = ", ".join(f"{v.name}={values[v]}" for v in c.params)
            at = f" at {w}" if w else ""
            raise ValueError(f"{name}: with {sizes}, {c.message}{at}; nothing was run")


@dataclass(frozen=True)
class BoundsReport:
    """What ``check_bounds`` leaves to later: call-time size checks, and the accesses
    (by identity of their TensorRead, or of an update op for its write) whose indices
    the kernel must check at run time."""

    size_checks: tuple = ()
    runtime_reads: frozenset = frozenset()  # id(TensorRead)
    runtime_writes: frozenset = frozenset()  # id(UpdateOp)

    def guarded(self, e: Expr) -> Expr:
        """``e`` with run-time checked indices if it is a read isl could not prove."""
        if isinstance(e, TensorRead) and id(e) in self.runtime_reads:
            return TensorRead(e.tensor, _checked(e.indices, e.tensor, str(e)), e.dtype)
        return e

    def guarded_lhs(self, op) -> tuple:
        """The indices an update writes, run-time checked if isl could not prove them."""
        if id(op) in self.runtime_writes:
            lhs = f"{op.target.name}[{', '.join(str(i) for i in op.lhs)}]"
            return _checked(op.lhs, op.target, lhs)
        return tuple(op.lhs)


NO_REPORT = BoundsReport()


def unchecked(e: Expr) -> Expr:
    """``e`` with its run-time index checks clamped instead (``checked_index(i, n)`` ->
    ``clamped_index(i, n)``, ``i`` moved into ``[0, n)``): for the region of a producer
    attached under a read that may not run (a ``select`` branch); the read itself stays
    checked."""

    def go(x):
        x = map_children(x, go)
        if isinstance(x, Call) and x.name == "checked_index":
            return Call("clamped_index", x.args, INDEX)
        return x

    return go(e)


def _checked(indices, tensor, access: str) -> tuple:
    out = []
    for dim, (i, d) in enumerate(zip(indices, tensor.shape)):
        if not any(isinstance(x, TensorRead) for x in walk(i)):  # data: checked by lowering
            note = f"the index of {access} in dimension {dim} (size {d})"
            i = i if i.dtype == "int64" else Cast(i, "int64")
            i = Call("checked_index", (i, d), "int64", note)
        out.append(i)
    return tuple(out)


@dataclass
class _Access:
    node: object  # the TensorRead, or the update op for its write
    tensor: object
    indices: tuple
    conds: list  # (condition, negated) of the enclosing selects, outermost first

    @property
    def verb(self) -> str:
        return "reads" if isinstance(self.node, TensorRead) else "writes"

    @property
    def text(self) -> str:  # printed only for a message: printing is not free
        if isinstance(self.node, TensorRead):
            return str(self.node)
        return f"{self.tensor.name}[{', '.join(str(i) for i in self.indices)}]"


def check_bounds(sch: Schedule) -> BoundsReport:
    """Prove every affine access of every definition in ``sch`` inside its tensor.

    Raises ``ScheduleError`` (tensor, dimension, access, witness) for an access
    out of bounds for every size binding that runs it; returns the call-time
    size checks and the accesses left to run-time checks.
    """
    checks, reads, writes = [], set(), set()
    seen = set()
    for st in sch.stages:
        op = st.op
        if st.is_placeholder or id(op) in seen:
            continue
        seen.add(id(op))
        _check_op(st.name, op, checks, reads, writes)
    checks += _split_amount_checks(sch)
    return BoundsReport(tuple(checks), frozenset(reads), frozenset(writes))


SPLIT_MOST = 2**62


def _split_amount_checks(sch: Schedule) -> list:
    """A call-time check per symbolic split factor or part count: at least 1, and at most
    ``SPLIT_MOST`` (``(n + f - 1) / f`` wraps in C's int64 past it: the loop ran no
    iteration and left the output as it was).

    s[B].split(i, factor=f)     mod(a, b, 0)
    ValueError: default_function: with f=0, the split factor f of stage 'B' (loop i)
                must be at least 1; nothing was run
    """
    checks = []
    for st in sch.stages:
        for rel in st.relations:
            if not isinstance(rel, Split):
                continue
            amount, what = (
                (rel.factor, "factor") if rel.factor is not None else (rel.nparts, "nparts")
            )
            if isinstance(amount, Const):
                continue
            params = sorted({x for x in walk(amount) if isinstance(x, Var)}, key=lambda v: v.name)
            names = Namer()
            pr = _Printer({v: names(v, "p_" + v.name) for v in params}, params)
            try:
                cond = f"{pr(amount)} <= 0 or {pr(amount)} > {SPLIT_MOST}"
            except NonAffine:
                continue  # a product of sizes: the kernel's own division check remains
            pstr = ", ".join(pr.names[v] for v in params)
            checks.append(
                SizeCheck(
                    f"the split {what} {amount} of stage '{st.name}' (loop "
                    f"{rel.parent.name}) must be at least 1 and at most 2**62 (a trip "
                    "count past it wraps in C)",
                    tuple(params),
                    f"[{pstr}] -> {{ [] : {cond} }}",
                    (),
                )
            )
    return checks


def _check_op(stage_name: str, op, checks: list, reads: set, writes: set):
    is_update = isinstance(op, UpdateOp)
    axes = list(op.axis)
    accesses: list[_Access] = []
    accessed = []
    body_exprs = list(op.bodies)
    if is_update:
        body_exprs = [*op.lhs, op.body]
        accesses.append(_Access(op, op.target, op.lhs, []))
        accessed.append(op.target)
    for e in body_exprs:
        for x in walk(e):
            if isinstance(x, Reduce):
                axes += [a for a in x.axes if a not in axes]
            elif isinstance(x, TensorRead):
                accessed.append(x.tensor)
            elif _divides_by_zero(x):  # an integer division by 0 traps (SIGFPE)
                raise ScheduleError(f"{_kind(op)} '{stage_name}': {x} divides by zero")
    names = Namer()
    coord = {iv.var: names(iv.var, f"i{d}_{iv.name}") for d, iv in enumerate(axes)}
    params = _size_vars([*body_exprs, *(e for iv in axes for e in iv.dom)], accessed)
    pr = _Printer({**coord, **{v: names(v, "p_" + v.name) for v in params}}, params)
    ranges = Ranges({v: (0, INF) for v in params})
    for iv in axes:
        lo, hi = bounds(iv.dom_min, ranges)[0], bounds(iv.dom_min + iv.extent, ranges)[1]
        ranges[iv.var] = (lo, hi - 1 if hi != INF else INF)
    for e in body_exprs:
        _collect(e, [], accesses)
    todo = []
    for a in accesses:
        dims = []
        for d, (idx, size) in enumerate(zip(a.indices, a.tensor.shape)):
            if any(isinstance(x, TensorRead) for x in walk(idx)):
                continue  # read from data: checked at run time by lowering
            if _huge(idx):  # C's int64 arithmetic overflows (undefined) where isl's does not
                raise ScheduleError(
                    f"{_kind(op)} '{stage_name}': {a.text}: an index constant of 2**32 or "
                    "more may overflow the int64 arithmetic of the C"
                )
            lo, hi = bounds(idx, ranges)
            if lo >= 0 and hi < bounds(size, ranges)[0]:
                continue  # proven by intervals
            dims.append(d)
        if dims:
            todo.append((a, dims))
    if not todo:
        return
    pstr = "[" + ", ".join(pr.names[v] for v in params) + "]"
    tup = f"S[{', '.join(coord[iv.var] for iv in axes)}]"
    dom, exact_dom = [f"{pr.names[v]} >= 0" for v in params], True
    for iv in axes:
        try:
            lo = pr(iv.dom_min)
            dom.append(f"{lo} <= {coord[iv.var]} < {lo} + {pr(iv.extent)}")
        except NonAffine:
            exact_dom = False
    where = " and ".join(dom) or "true"
    domain = None
    for a, dims in todo:
        try:
            sides = _sides(a, dims, pr)
        except NonAffine:
            _runtime(a, reads, writes)
            continue
        guards, exact = [], exact_dom
        for c, neg in a.conds:  # a condition isl cannot represent is dropped (more instances)
            try:
                guards.append(pr.cond(c, neg))
            except NonAffine:
                exact = False
        conds = " and ".join([where, *guards])
        any_bad = " or ".join(c for _, _, c in sides)
        if isl.Set(f"{pstr} -> {{ {tup} : {conds} and ({any_bad}) }}").is_empty():
            continue
        if not exact:
            _runtime(a, reads, writes)
            continue
        for d, side, c in sides:
            bad = isl.Set(f"{pstr} -> {{ {tup} : {conds} and {c} }}")
            if bad.is_empty():
                continue
            where_txt = "past" if side == "hi" else "before the start of"
            size = a.tensor.shape[d]
            msg = (
                f"{_kind(op)} '{stage_name}': {a.text} {a.verb} {where_txt} dimension {d} of "
                f"{a.tensor.name} (size {size})"
            )
            if domain is None:
                domain = isl.Set(f"{pstr} -> {{ {tup} : {where} }}").params()
            if not params or domain.is_subset(bad.params()):
                w = _point_text(bad.lexmin().sample_point(), [iv.name for iv in axes], params)
                raise ScheduleError(f"{msg} at {w}")
            checks.append(SizeCheck(msg, tuple(params), str(bad), tuple(iv.name for iv in axes)))


def _divides_by_zero(e: Expr) -> bool:
    return (
        isinstance(e, Binary)
        and e.op in ("floordiv", "mod")
        and isinstance(e.b, Const)
        and e.b.value == 0
        and dtypes.dtype(e.dtype).is_int
    )


def _kind(op) -> str:
    return "update" if isinstance(op, UpdateOp) else "compute"


def _runtime(a: _Access, reads: set, writes: set):
    (writes if a.verb == "writes" else reads).add(id(a.node))


def _sides(a: _Access, dims, pr: _Printer) -> list:
    """(dim, side, isl constraint) of each way an index may leave its dimension."""
    out = []
    for d in dims:
        idx, size = pr(a.indices[d]), pr(a.tensor.shape[d])
        out.append((d, "lo", f"{idx} < 0"))
        out.append((d, "hi", f"{idx} >= {size}"))
    return out


def _size_vars(exprs, tensors) -> list:
    """The free integer Vars (sizes) of ``exprs`` and of the shapes of ``tensors``."""
    out = []
    for e in [*exprs, *(d for t in tensors for d in t.shape)]:
        for x in walk(e):
            if isinstance(x, Var) and x.axis is None and dtypes.dtype(x.dtype).is_int:
                if all(x is not y for y in out):
                    out.append(x)
    return out


def _collect(e: Expr, conds: list, out: list):
    """Every TensorRead under ``e``, with the select conditions that guard it."""
    if isinstance(e, Select):
        _collect(e.cond, conds, out)
        _collect(e.t, [*conds, (e.cond, False)], out)
        _collect(e.f, [*conds, (e.cond, True)], out)
        return
    if isinstance(e, TensorRead):
        out.append(_Access(e, e.tensor, e.indices, conds))
    for name in _CHILDREN.get(type(e), ()):
        v = getattr(e, name)
        for x in v if isinstance(v, tuple) else (v,):
            _collect(x, conds, out)


_CHILDREN = {
    Binary: ("a", "b"),
    Cmp: ("a", "b"),
    Not: ("a",),
    Cast: ("value",),
    Call: ("args",),
    TensorRead: ("indices",),
    Reduce: ("source", "init"),  # init: () or (the starting value,)
}


def _point_text(pt: isl.Point, coords, params) -> str:
    vals = [pt.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(len(coords))]
    text = ", ".join(f"{n}={v}" for n, v in zip(coords, vals))
    pvals = [
        f"{v.name}={pt.get_coordinate_val(isl.dim_type.param, k).to_python()}"
        for k, v in enumerate(params)
    ]
    return text + (f", with {', '.join(pvals)}" if pvals else "")
