"""Tensor intrinsics: what a hand-written C kernel computes, declared and registered.

As TVM's ``decl_tensor_intrin`` and ``TensorIntrin.register``: an intrinsic says
*what* a C function computes, as a ``pt.compute`` over placeholders, and gives its C
definition; ``s[C].tensorize(ax, intrin)`` replaces loop ``ax`` and the loops inside
it by one call (``pypto.tensorize`` proves the region computes what the intrinsic
does). A registered intrinsic is found by its name, so a stored schedule that
tensorizes replays from the tensors alone (``Schedule.from_json``)::

    a = pt.placeholder((16,)); b = pt.placeholder((4, 16))
    k = pt.reduce_axis((0, 16))
    dot4 = pt.TensorIntrin.register(
        "dot4", pt.compute((4,), lambda i: pt.sum(a[k] * b[i, k], axis=k)).op, C_SOURCE)
    pt.TensorIntrin.get("dot4") is dot4

Calling convention (``intrin.signature`` prints the prototype): the inputs in
``intrin.inputs`` order, then the output; each a pointer to the operand's
element (0, .., 0) followed by one ``int64_t`` stride, in elements, per
dimension. The function computes the whole of the compute into the output,
a reduction's initial value included. The strides are constants in the
call, so a ``static inline`` kernel is specialized by the C compiler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from . import dtypes
from .c_names import RESERVED
from .expr import Const, Expr, Reduce, TensorRead, Var, child_fields, tensor_reads
from .loop_ir import For, IntrinCall, c_identifier, walk_stmts
from .simplify import Lin
from .tensor import ComputeOp, PlaceholderOp, Tensor, UpdateOp

_C_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """What a C kernel computes (``op``) and its definition (``source``, defining ``name``)."""

    op: ComputeOp
    name: str
    source: str
    inputs: tuple  # placeholder Tensors, in argument order
    # C statement(s) that make the call's stores visible (``_mm_sfence();`` after
    # streaming stores): run once at the end of each iteration of the outermost
    # parallel loop around the calls (or once at the end of the function for calls
    # outside any parallel loop)
    fence: str = ""

    @property
    def output(self) -> Tensor:
        return self.op.output(0)

    @property
    def signature(self) -> str:
        """The C prototype the source must define."""
        args = []
        for t in (*self.inputs, self.output):
            const = "" if t is self.output else "const "
            ctype = dtypes.dtype(t.dtype).c_storage
            p = c_identifier(t.name)
            args.append(f"{const}{ctype}* {p}")
            args.extend(f"int64_t {p}_s{d}" for d in range(len(t.shape)))
        return f"void {self.name}({', '.join(args)})"

    def __repr__(self):
        return f"TensorIntrin({self.name}: {self.op.name})"

    registry: ClassVar[dict] = {}  # name -> TensorIntrin (``register``)

    @classmethod
    def register(
        cls, name: str, op, source: str, inputs=None, override: bool = False, fence: str = ""
    ):
        """Declare an intrinsic (``decl_tensor_intrin``) and register it by ``name``, as TVM's
        ``TensorIntrin.register``. Declaring the same name again with the same C source
        replaces it (templates declare their micro-kernels per call); another source is
        refused unless ``override``."""
        intrin = decl_tensor_intrin(op, name, source, inputs, fence)
        old = cls.registry.get(name)
        if old is not None and (old.source, old.fence) != (source, fence) and not override:
            raise ValueError(
                f"TensorIntrin.register: {name!r} is registered with another C source "
                "(pass override=True to replace it)"
            )
        cls.registry[name] = intrin
        return intrin

    @classmethod
    def get(cls, name: str) -> TensorIntrin:
        """The intrinsic registered as ``name``."""
        intrin = cls.registry.get(name)
        if intrin is None:
            known = ", ".join(sorted(cls.registry)) or "none"
            raise KeyError(f"no tensor intrinsic registered as {name!r} (registered: {known})")
        return intrin


def check_c_function(name: str, source: str, what: str) -> None:
    """``name`` is a C identifier free for a user's function, defined in ``source``;
    ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(name, str) or not _C_NAME.match(name):
        raise ValueError(f"{what}: {name!r} is not a C identifier")
    if name in RESERVED or name.startswith(("pt_", "_")):
        raise ValueError(f"{what}: {name!r} is reserved (C keywords, libc, pt_*)")
    if not isinstance(source, str) or not re.search(rf"\b{name}\s*\(", source):
        raise ValueError(f"{what}: the C source does not define {name}(...)")


def decl_tensor_intrin(op, name: str, source: str, inputs=None, fence: str = "") -> TensorIntrin:
    """``pt.decl_tensor_intrin(out.op, "kernel", C_SOURCE)``: declare that the C function
    ``kernel`` (defined in ``C_SOURCE``) computes ``out`` from its placeholders.

    ``inputs`` fixes the order of the input arguments (default: the order in which the
    body first reads them). See the module docstring for the calling convention.
    ``fence``: C statements run after the calls, once per iteration of the outermost
    parallel loop around them (else once at the end of the function), e.g.
    ``_mm_sfence();`` for a kernel with non-temporal stores: a fence per call would
    wait for every chunk's stores to reach memory.
    """
    if not isinstance(fence, str) or fence.count("{") != fence.count("}"):
        raise ValueError(f"decl_tensor_intrin: fence must be C statements, got {fence!r}")
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp) or isinstance(op, UpdateOp) or op.updates:
        raise TypeError("decl_tensor_intrin: op must be a pt.compute without update definitions")
    check_c_function(name, source, "decl_tensor_intrin")
    for iv in (*op.axis, *op.reduce_axis):
        if not isinstance(iv.extent, Const) or not isinstance(iv.dom_min, Const):
            raise ValueError(
                f"decl_tensor_intrin: axis {iv.name} of {op.name} needs a constant range"
            )
        if iv.dom_min.value != 0:
            raise ValueError(f"decl_tensor_intrin: axis {iv.name} of {op.name} must start at 0")
    reads = _in_order(op.body)
    for t in reads:
        if not isinstance(t.op, PlaceholderOp):
            raise ValueError(
                f"decl_tensor_intrin: {op.name} reads {t.name}, which is not a placeholder"
            )
    if inputs is None:
        inputs = reads
    inputs = tuple(inputs)
    if sorted(map(id, inputs)) != sorted(map(id, reads)):
        raise ValueError(
            f"decl_tensor_intrin: inputs must be the placeholders {op.name} reads: "
            f"{', '.join(t.name for t in reads)}"
        )
    axes = {iv.var for iv in (*op.axis, *op.reduce_axis)}
    for r in tensor_reads(op.body):
        for i in r.indices:
            if _lin_over(i, axes) is None:
                raise ValueError(
                    f"decl_tensor_intrin: index {i} of {r.tensor.name} is not affine in the "
                    "axes of the intrinsic"
                )
    if isinstance(op.body, Reduce) and set(map(id, op.body.axes)) != set(map(id, op.reduce_axis)):
        raise ValueError("decl_tensor_intrin: the reduction must run over all reduce axes")
    return TensorIntrin(op, name, source, inputs, fence)


def _in_order(e) -> list:
    """The tensors ``e`` reads, in the order they first appear, left to right."""
    out = []

    def go(x):
        if isinstance(x, TensorRead) and all(x.tensor is not t for t in out):
            out.append(x.tensor)
        for y in flat_children(x):
            if isinstance(y, Expr):
                go(y)

    go(e)
    return out


def _lin_over(e: Expr, allowed) -> Lin | None:
    """``e`` as a Lin whose variable atoms are all in ``allowed`` (None if it is not)."""
    lin = Lin.of(e)
    for atom, _ in lin.terms.values():
        if not isinstance(atom, Var) or atom not in allowed:
            return None
    return lin


def flat_children(e: Expr) -> list:
    """The expression children of ``e``, tuples of them flattened, in field order."""
    out = []
    for k in child_fields(type(e)):
        v = getattr(e, k)
        out.extend(v if isinstance(v, tuple) else (v,))
    return out


def intrin_fences(body, outside_parallel: bool = False) -> list:
    """The distinct fences of the tensor intrinsics called in the loop IR ``body``, in
    call order; with ``outside_parallel``, only of calls outside every parallel loop
    (the code generator runs the others' at the end of each parallel iteration)."""
    skip = set()
    if outside_parallel:
        for loop in walk_stmts(body):
            if isinstance(loop, For) and loop.kind == "parallel":
                skip.update(id(c) for c in walk_stmts(loop.body))
    out = []
    for c in walk_stmts(body):
        if isinstance(c, IntrinCall) and id(c) not in skip and c.intrin.fence not in ("", *out):
            out.append(c.intrin.fence)
    return out
