"""Tensors and the operations that define them: placeholder, compute, reductions.

    A = pt.placeholder((n, 64), "float32", name="A")
    k = pt.reduce_axis((0, 64), name="k")
    C = pt.compute((n, 32), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")

A Tensor is the output of an operation; ``C.op.axis`` and ``C.op.reduce_axis``
are the iteration variables a schedule transforms.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from . import dtypes
from .broadcast import OP_NAMES, PY_OPERATORS, broadcast_shape, operand, shape_of
from .dtypes import INDEX
from .expr import (
    Const,
    Expr,
    ExprOp,
    Reduce,
    TensorRead,
    Var,
    as_expr,
    binary,
    const,
    walk,
)
from .update_def import bound_rdoms, reduction_axes


class Range(NamedTuple):
    """A loop's domain ``[min, min + extent)``, a pair as TVM's Range."""

    min: Expr
    extent: Expr


@dataclass(frozen=True, slots=True, eq=False)
class IterVar(ExprOp):
    """A loop variable with its domain ``[dom_min, dom_min + extent)``."""

    var: Var
    dom_min: Expr
    extent: Expr
    kind: str  # "spatial" | "reduce"
    rdom: Any = None  # the RDom a reduce axis belongs to

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def dtype(self) -> str:
        return self.var.dtype

    @property
    def dom(self) -> Range:
        """``(min, extent)``, also as ``dom.min`` and ``dom.extent`` (TVM's Range)."""
        return Range(self.dom_min, self.extent)

    @property
    def iter_type(self) -> str:
        """``"spatial"`` or ``"reduce"`` (TVM's ``iter_type``: DataPar or CommReduce)."""
        return self.kind

    def __str__(self):
        return self.var.name

    __repr__ = __str__


def _extent(x, what: str) -> Expr:
    e = as_expr(x)
    if not dtypes.dtype(e.dtype).is_int:
        raise TypeError(f"{what} must be an integer, got {e} of dtype {e.dtype}")
    if isinstance(e, Const) and e.value < 0:
        raise ValueError(f"{what} must be non-negative, got {e.value}")
    return e


def make_iter_var(name: str, dom_min, extent, kind: str) -> IterVar:
    """An IterVar whose Var knows it (``var.axis``), so expressions lead back to axes."""
    v = Var(str(name))
    iv = IterVar(v, dom_min, extent, kind)
    object.__setattr__(v, "axis", iv)
    return iv


class RDom:
    """Reduce axes iterated together, first outermost; creation order orders RDoms."""

    _count = itertools.count()

    def __init__(self, axes):
        self.axes = tuple(axes)
        self.order = next(RDom._count)
        for a in self.axes:
            object.__setattr__(a, "rdom", self)

    def __repr__(self):
        return f"RDom({', '.join(a.name for a in self.axes)})"


def rdom(doms, names="r") -> tuple:
    """``pt.rdom([(lo, hi), ...], names="t i j")``: one multi-dimensional reduction domain.

    An update definition that mentions any of its axes iterates over all of
    them, in this order (first outermost).
    """
    if isinstance(names, str):
        names = names.replace(",", " ").split()
    names = list(names)
    if len(names) == 1 and len(doms) > 1:
        names = [f"{names[0]}{d}" for d in range(len(doms))]
    if len(names) != len(doms):
        raise TypeError(f"rdom: {len(doms)} ranges but {len(names)} names")
    axes = tuple(_reduce_iv(d, n) for d, n in zip(doms, names))
    RDom(axes)
    return axes


def reduce_axis(dom, name: str = "k") -> IterVar:
    """``pt.reduce_axis((lo, hi), name)``: a reduction variable over ``[lo, hi)``.

    ``lo`` and ``hi`` may be affine in the sizes and in the loops outside this one: the
    spatial axes of its ``pt.compute`` or reduce axes declared before it, with offsets.
    Every schedule of such a domain runs exactly its points (loop bounds from isl):

        i = pt.reduce_axis((1, n), name="i")
        j = pt.reduce_axis((0, i), name="j")          # for i in [1, n): for j in [0, i):
        Y[i] = Y[i] + X[j]

        S = pt.compute((n,), lambda i: pt.sum(A[i, k], axis=k))   # k = reduce_axis((0, i + 1))
    """
    iv = _reduce_iv(dom, name)
    RDom((iv,))
    return iv


def _reduce_iv(dom, name: str) -> IterVar:
    if not isinstance(dom, (tuple, list)) or len(dom) != 2:
        raise TypeError(f"reduce_axis takes a (min, max) pair, got {dom!r}")
    lo, hi = _extent(dom[0], "reduce_axis min"), _extent(dom[1], "reduce_axis max")
    ext = binary("sub", hi, lo) if not (isinstance(lo, Const) and lo.value == 0) else hi
    if isinstance(lo, Const) and isinstance(hi, Const):
        if hi.value < lo.value:
            raise ValueError(f"reduce_axis {name!r}: empty range ({lo.value}, {hi.value})")
        ext = Const(hi.value - lo.value, INDEX)
    return make_iter_var(name, lo, ext, "reduce")


class Operation:
    """Base of operations; ``op.output(0)`` is the tensor it defines."""

    name: str
    shape: tuple
    dtype: str
    tag: str = ""  # TVM's op.tag and op.attrs: labels for the user's own passes
    attrs: Mapping = MappingProxyType({})

    def output(self, index: int = 0) -> Tensor:
        if index != 0:
            raise IndexError(f"operation {self.name!r} has a single output")
        return self._out

    @property
    def input_tensors(self) -> list[Tensor]:
        return []

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"


class PlaceholderOp(Operation):
    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, shape, dtype
        self._out = Tensor(self)


class ComputeOp(Operation):
    """``out[axis] = body``; ``body`` may be a Reduce over ``reduce_axis``.

    A multi-output operation (``pt.compute`` of a lambda returning a tuple) has one
    body per output (``bodies``; ``body`` is the first), all over the same loops.
    """

    def __init__(self, name, axis, body, dtype, reduce_axis=(), more_bodies=()):
        self.name = name
        self.axis = tuple(axis)
        self.reduce_axis = tuple(reduce_axis)
        self.body = body
        self.bodies = (body, *more_bodies)
        self.dtype = dtype
        self.shape = tuple(iv.extent for iv in self.axis)
        self.updates: list = []  # (lhs indices, value, axes) appended by Tensor.__setitem__
        self.outputs = tuple(Tensor(self, j) for j in range(len(self.bodies)))
        self._out = self.outputs[0]

    @property
    def num_outputs(self) -> int:
        return len(self.bodies)

    def output(self, index: int = 0) -> Tensor:
        if not 0 <= index < len(self.bodies):
            raise IndexError(f"operation {self.name!r} has {len(self.bodies)} output(s)")
        return self.outputs[index] if index else self._out

    def output_dtype(self, index: int) -> str:
        return self.dtype if index == 0 else self.bodies[index].dtype

    @property
    def input_tensors(self) -> list[Tensor]:
        """Tensors read by the definition and by its updates (this one included, if read),
        in the order the definition first reads them (TVM's argument order)."""
        exprs = [*self.bodies] + [e for lhs, val, _ in self.updates for e in (*lhs, val)]
        return _reads_of(exprs)


def _reads_of(exprs) -> list[Tensor]:
    seen, out = set(), []
    for root in exprs:
        for e in walk(root):
            if isinstance(e, TensorRead) and id(e.tensor) not in seen:
                seen.add(id(e.tensor))
                out.append(e.tensor)
    return out


class UpdateOp(ComputeOp):
    """Update definition ``k`` of ``target``: ``target[lhs] = body`` over ``axis``."""

    def __init__(self, target: Tensor, k: int):
        lhs, body, axes = target.op.updates[k]
        self.name = f"{target.name}.update({k})"
        self.target = target
        self.index = k
        self.lhs = lhs
        self.axis = axes
        self.reduce_axis = ()
        self.body = body
        self.bodies = (body,)
        self.dtype = target.dtype
        self.shape = target.shape
        self.updates = []
        self._out = target

    @property
    def input_tensors(self) -> list[Tensor]:
        return _reads_of([*self.lhs, self.body])


def _elementwise_op(op: str, reflected: bool):
    """The operator method of whole tensors for ``op``: ``__add__`` (or ``__radd__``)."""

    def method(self, o):
        return elementwise(op, o, self) if reflected else elementwise(op, self, o)

    return method


class Tensor:
    """A multi-dimensional array value; index it to read: ``A[i, k]``."""

    __slots__ = ("op", "value_index")
    is_tensor = True  # expressions leave arithmetic with a tensor to the tensor

    def __init__(self, op: Operation, value_index: int = 0):
        self.op = op
        self.value_index = value_index  # which output of a multi-output operation

    @property
    def shape(self) -> tuple:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.output_dtype(self.value_index) if self.value_index else self.op.dtype

    @property
    def name(self) -> str:
        several = getattr(self.op, "num_outputs", 1) > 1  # TVM's names: op.v0, op.v1, ...
        return f"{self.op.name}.v{self.value_index}" if several else self.op.name

    @property
    def ndim(self) -> int:
        return len(self.op.shape)

    def __getitem__(self, idx) -> TensorRead:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != self.ndim:
            raise IndexError(f"{self.name} has {self.ndim} dimension(s), indexed with {len(idx)}")
        ind = tuple(as_expr(i) for i in idx)
        for i in ind:
            if not dtypes.dtype(i.dtype).is_int:
                raise TypeError(f"index {i} of {self.name} is {i.dtype}, not an integer")
        return TensorRead(self, ind, self.dtype)

    def __iter__(self):
        # without it Python would iterate A[0], A[1], ... without end
        raise TypeError(
            f"tensor {self.name} is not iterable: index it ({self.name}[i, ...]); a "
            "pt.compute or rfactor with several outputs returns a list of tensors"
        )

    def __call__(self, *idx) -> TensorRead:
        """``A(i, k)`` is ``A[i, k]`` (TVM's call form; ``S()`` reads a 0-d tensor)."""
        return self[idx]

    def __setitem__(self, idx, value):
        """An update definition: ``T[r] = T[r - 1] + X[r]`` over reduce axes / rdoms.

        Updates run after the pure definition, one after another, each over
        the full domain of every rdom it mentions (first axis outermost).
        """
        op = self.op
        if not isinstance(op, ComputeOp) or isinstance(op, UpdateOp):
            raise TypeError(f"{self.name}: only a tensor defined by pt.compute takes updates")
        if op.num_outputs > 1:
            raise TypeError(f"{self.name}: an output of a multi-output compute takes no updates")
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != self.ndim:
            raise IndexError(f"{self.name} has {self.ndim} dimension(s), indexed with {len(idx)}")
        lhs = tuple(as_expr(i) for i in idx)
        val = as_expr(value, self.dtype)
        if val.dtype != self.dtype:
            raise TypeError(
                f"update of {self.name}: value is {val.dtype}, tensor is {self.dtype}; use pt.cast"
            )
        inner = reduction_axes(self.name, lhs, val)
        groups = {}
        for e in (*lhs, val):
            for x in walk(e):
                if isinstance(x, Var) and x.axis is not None and x.axis not in inner:
                    if x.axis.kind != "reduce":
                        raise TypeError(
                            f"update of {self.name}: {x.name} is a loop variable of "
                            "a compute; updates range over pt.reduce_axis/pt.rdom"
                        )
                    groups[id(x.axis.rdom)] = x.axis.rdom
        if not groups:
            raise TypeError(
                f"update of {self.name}: it needs at least one reduce axis "
                "(pt.reduce_axis or pt.rdom) to range over"
            )
        bound_rdoms(groups)
        axes = tuple(a for g in sorted(groups.values(), key=lambda g: g.order) for a in g.axes)
        op.updates.append((lhs, val, axes))

    def __neg__(self):
        return compute(self.shape, lambda *i: -self[i], name="T_negative")

    def __invert__(self):
        return compute(self.shape, lambda *i: ~self[i], name="T_bitwise_not")

    def __repr__(self):
        dims = ", ".join(str(d) for d in self.shape)
        return f"Tensor({self.name}, ({dims}), {self.dtype})"


# whole-tensor arithmetic with numpy broadcasting (A + B, 2 * A, A >> 4), as TVM's topi
for (_op, _py), _r in ((x, r) for x in PY_OPERATORS.items() for r in ("", "r")):
    setattr(Tensor, f"__{_r}{_py}__", _elementwise_op(_op, reflected=bool(_r)))


MAX_ELEMENTS = 1 << 60  # with 8-byte elements, byte offsets still fit int64


def _shape(shape) -> tuple:
    if isinstance(shape, (int, Expr)):
        shape = (shape,)
    dims = tuple(_extent(s, "a dimension") for s in shape)
    count = 1
    for d in dims:
        count *= d.value if isinstance(d, Const) else 1
    if count > MAX_ELEMENTS:
        raise ValueError(
            f"shape ({', '.join(str(d) for d in dims)}) has {count} elements, more than "
            f"2**60: their byte offsets would not fit int64"
        )
    return dims


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """``pt.placeholder(shape, dtype, name)``: an input buffer."""
    return PlaceholderOp(str(name), _shape(shape), dtypes.check(dtype)).output(0)


def compute(shape, fcompute: Callable, name="compute", dtype=None, tag="", attrs=None):
    """``pt.compute(shape, lambda i, j: ..., name)``: define each element (``tag=``, ``attrs=``).

    The body may be a reduction (``pt.sum(..., axis=k)``) at its top level. A lambda
    returning a tuple defines several tensors at once (a list of them, the first named
    ``name.v0``, ``name.v1``, ... as TVM names them): one stage, one loop nest, as TVM's
    multi-output compute; a tuple reduction (``pt.comm_reducer`` over tuples, argmax)
    is such a body.

        for i: for j: T0[i, j] = e0(i, j); T1[i, j] = e1(i, j)
    """
    shape = _shape(shape)
    params = list(inspect.signature(fcompute).parameters.values())
    if len(params) == 1 and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        names = [f"i{d}" for d in range(len(shape))]
    else:
        names = [p.name for p in params]
        if len(names) != len(shape):
            raise TypeError(
                f"compute {name!r}: lambda takes {len(names)} argument(s) but shape has "
                f"{len(shape)} dimension(s)"
            )
    axis = tuple(make_iter_var(n, Const(0, INDEX), s, "spatial") for n, s in zip(names, shape))
    result = fcompute(*[iv.var for iv in axis])
    if isinstance(result, (tuple, list)):
        outs = multi_compute(str(name), axis, [as_expr(e) for e in result])
        outs[0].op.tag, outs[0].op.attrs = str(tag), dict(attrs or {})
        return outs
    # a Python number as the whole body: of ``dtype``, else pt.const's (int32, float32)
    literal = isinstance(result, (int, float)) and not isinstance(result, bool)
    body = const(result, dtype) if literal else as_expr(result)
    if dtype is not None:
        body_dtype = dtypes.check(dtype)
        if body.dtype != body_dtype:
            raise TypeError(f"compute {name!r}: body is {body.dtype}, not {body_dtype}")
    reduce_axes = ()
    for e in walk(body):
        if isinstance(e, Reduce) and e is not body:
            raise TypeError(
                f"compute {name!r}: a reduction must be the whole body; "
                "compute it as its own tensor first"
            )
    if isinstance(body, Reduce):
        reduce_axes = body.axes
    op = ComputeOp(str(name), axis, body, body.dtype, reduce_axes)
    op.tag, op.attrs = str(tag), dict(attrs or {})
    return op.output(0)


def multi_compute(name: str, axis: tuple, bodies: list) -> list:
    """The tensors of a multi-output compute (see ``compute``)."""
    if not bodies:
        raise TypeError(f"compute {name!r}: the lambda returned an empty tuple")
    reds = [b for b in bodies if isinstance(b, Reduce)]
    for b in bodies:
        if any(isinstance(e, Reduce) for e in walk(b) if e is not b):
            raise TypeError(f"compute {name!r}: a reduction must be a whole body")
    if reds:
        first = reds[0]
        same = all(
            isinstance(b, Reduce)
            and b.combiner is first.combiner
            and len(b.axes) == len(first.axes)
            and all(x is y for x, y in zip(b.axes, first.axes))
            for b in bodies
        )
        if not same:
            raise TypeError(
                f"compute {name!r}: outputs that reduce must be the whole tuple of one "
                "reducer's call (one tuple reduction over the same axes)"
            )
    op = ComputeOp(name, axis, bodies[0], bodies[0].dtype,
                   reds[0].axes if reds else (), tuple(bodies[1:]))  # fmt: skip
    return list(op.outputs)


def elementwise(op: str, a, b) -> Tensor:
    """``a op b`` for tensors (and scalars) of broadcastable shapes: a new tensor."""
    shape = broadcast_shape(shape_of(a), shape_of(b))
    return compute(shape, lambda *i: binary(op, operand(a, i), operand(b, i)), name=OP_NAMES[op])


def collect_ops(outputs: Sequence) -> list[Operation]:
    """All operations reachable from ``outputs``, producers before consumers."""
    order, seen = [], set()

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for o in outputs:
        visit(o)
    return order
