"""PyTorch interop: tensors through pypto modules zero-copy, and user kernels as operators.

This module, ``torch_autograd`` (``register_autograd``: an operator's derivative, under
``torch.func`` too), ``torch_buffers`` (the outputs' buffers) and ``torch_plan`` (an
operator's calls replayed) are the ones of ``pypto`` that import torch (the optional
``torch`` extra).

    import pypto.torch as ptt
    def build(x_shape):                          # shapes of the inputs -> (schedule, tensors)
        X = pt.placeholder(x_shape, "float32", name="X")
        Y = pt.compute(x_shape, lambda i, j: X[i, j] * 2, name="Y")
        s = pt.create_schedule(Y.op); s[Y].parallel(Y.op.axis[0])
        return s, [X, Y]                         # inputs first, then outputs
    double = ptt.custom_op("mylib::double", build, n_inputs=1)
    y = double(torch.randn(4, 8))                # also torch.ops.mylib.double; torch.compile-able
    ptt.register_autograd(double, lambda ctx, dy: dy * 2)   # its derivative (torch.func too)

Tensors are passed as numpy views of their memory (no copy); a non-contiguous
input is first made contiguous (one copy, the only one). Only CPU tensors of the
kernel's dtypes are accepted; anything else raises a ``TypeError`` or ``ValueError``
naming the argument.

Outputs of 1 MiB and more come from ``empty()`` (``torch_buffers``: a pool of recycled
buffers).
"""

from __future__ import annotations

import functools
import inspect
import operator
import re
import threading
from collections.abc import Callable

import numpy as np
import torch
import torch.autograd.forward_ad as _forward_ad

from .arg_checks import as_array, raise_status, repeat_torch_call, torch_key
from .expr import Binary, Const, Var, walk
from .module import CHECKED_SHAPES
from .runtime import build as _build
from .target import as_target
from .tensor import PlaceholderOp, Tensor
from .torch_autograd import register_autograd, tangents_seen  # noqa: F401  (public here)
from .torch_buffers import (  # noqa: F401  (public here)
    POOL_MAX_BYTES,
    POOL_MIN_BYTES,
    BufferPool,
    empty,
    empty_cache,
)
from .torch_plan import forget, note_run, planned

TORCH_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    **{getattr(torch, n): n for n in ("uint32", "uint64") if hasattr(torch, n)},
}
_BY_NAME = {v: k for k, v in TORCH_DTYPES.items()}
_NUMPY_DTYPES = frozenset(t for t in TORCH_DTYPES if t is not torch.bfloat16)  # t.numpy() takes


def dtype_name(t: torch.Tensor, name: str, allowed=("float32", "float64")) -> str:
    """The pypto dtype of tensor ``t``; a ``TypeError`` naming ``name`` if not ``allowed``
    (or not a tensor at all)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {_what(t)}")
    if t.layout != torch.strided:
        raise TypeError(f"{name}: a {t.layout} tensor; pypto takes dense ones (t.to_dense())")
    d = TORCH_DTYPES.get(t.dtype)
    if d not in allowed:
        raise TypeError(f"{name}: dtype {t.dtype} is not supported (expected {', '.join(allowed)})")
    return d


def _what(v) -> str:
    return "None" if v is None else type(v).__name__


def as_numpy(t: torch.Tensor, name: str) -> np.ndarray:
    """A numpy view of CPU tensor ``t`` (made contiguous first if it is not)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{name}: pypto kernels run on the CPU; the tensor is on {t.device}")
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return _numpy_view(t, name)


def fake_kernel(op: str):
    """Decorate an operator's fake kernel with a check that its tensors share a device.

    PyTorch calls the fake kernel, not the CPU one, whenever any argument is on
    ``meta``: with the others on the CPU it would hand back an uninitialized CPU tensor.
    Mixed devices are refused, naming the tensors (all on ``meta``, or all fake under
    ``torch.compile``, is shape inference and goes on)."""

    def wrap(f):
        sig = inspect.signature(f)

        @functools.wraps(f)
        def checked(*args, **kw):
            where = {}
            for n, v in sig.bind(*args, **kw).arguments.items():
                many = isinstance(v, (tuple, list))  # *args, or a list of tensors
                for k, t in enumerate(v if many else (v,)):
                    if isinstance(t, torch.Tensor):
                        where[f"input {k}" if many else n] = t.device
            if len(set(where.values())) > 1:
                said = ", ".join(f"{n} on {d}" for n, d in where.items())
                raise ValueError(
                    f"{op}: the tensors are on different devices ({said}); pypto kernels "
                    "run on the CPU: pass every tensor there"
                )
            return f(*args, **kw)

        return checked

    return wrap


def from_numpy(a: np.ndarray) -> torch.Tensor:
    """A tensor on ``a``'s memory (``torch.from_numpy``; ml_dtypes' bfloat16 as torch's,
    through its bits)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _numpy_view(t: torch.Tensor, name: str = "tensor") -> np.ndarray:
    """The numpy array on ``t``'s memory (``arg_checks.as_array``: bfloat16, which numpy
    lacks, as ml_dtypes' bfloat16 through its bits). A plain tensor (no grad, no lazy
    negation or conjugation) goes through ``t.numpy()``, a third of DLPack's time."""
    if t.dtype in _NUMPY_DTYPES and not (t.requires_grad or t.is_neg() or t.is_conj()):
        return t.numpy()
    return as_array(t, name)


class ModuleCache:
    """Built modules by key, each built once (thread-safe)."""

    def __init__(self):
        self._mods: dict = {}
        self._lock = threading.Lock()

    def get(self, key, make: Callable):
        mod = self._mods.get(key)  # (a dict's get is atomic: the lock is for the build)
        if mod is not None:
            return mod
        with self._lock:
            mod = self._mods.get(key)
            if mod is None:
                mod = self._mods[key] = make()
            return mod

    def __len__(self) -> int:
        return len(self._mods)

    def clear(self) -> None:
        with self._lock:
            self._mods.clear()
        forget()  # the operators' plans hold modules of the caches


def refuse_forward_mode(kernel: str) -> None:
    """``NotImplementedError`` inside forward-mode AD (``torch.func.jvp``, ``jacfwd``,
    ``torch.autograd.forward_ad.dual_level``), unless the operator's autograd kernel
    (``register_autograd``) saw the inputs' tangents and handled them. Elsewhere
    PyTorch gives custom operators no forward-mode rule: their outputs would come out
    with zero tangents, silently, and a kernel cannot tell an input with a tangent
    from a constant there (functorch hands it the bare values)."""
    if getattr(_forward_ad, "_current_level", -1) >= 0 and not tangents_seen():
        raise NotImplementedError(
            f"{kernel}: pypto's PyTorch operators have no forward-mode derivative (inside "
            "torch.func.jvp, jacfwd or forward_ad.dual_level() their outputs would have "
            "zero tangents); differentiate in reverse mode: .backward(), "
            "torch.autograd.grad, or torch.autograd.functional.jacobian"
        )


def run(mod, inputs: list, outputs: list) -> None:
    """Call ``mod`` on torch tensors: inputs as (tensor, name) pairs, outputs (fresh,
    contiguous tensors) written in place. Refused inside forward-mode AD
    (``refuse_forward_mode``).

    The first call of each combination of shapes and dtypes goes through the module's
    checks (numpy views of the tensors); its size arguments are kept, and later calls
    of plain tensors (contiguous, no lazy negation or conjugation, none empty) of
    those shapes and dtypes pass the tensors' data pointers straight to the kernel:
    a call of a small tensor costs a third less."""
    refuse_forward_mode(mod.name)
    tensors = [t for t, _ in inputs] + outputs
    calls = _checked_calls(mod)
    # (an operator's kernel runs below autograd: its tensors may require grad)
    cargs = repeat_torch_call(tensors, len(tensors), calls, mod._outs, tracked=True)
    if cargs:
        status = mod._invoke(cargs, tensors)
        if status != 0:
            raise_status(mod.name, status, mod.signature.index_checks)
        note_run(mod, tensors, len(inputs), cargs[len(tensors) :])
        return
    arrays = [as_numpy(t, n) for t, n in inputs] + [_numpy_view(o) for o in outputs]
    mod(*arrays)
    key = mod.TENSOR_POINTERS and torch_key(tensors, tracked=True)
    if key and len(calls) < CHECKED_SHAPES:
        calls[key] = mod._prepare(arrays)[0][len(arrays) :]
    note_run(mod, tensors, len(inputs), calls.get(key) if key else None)


def _checked_calls(mod) -> dict:
    """The size arguments of the shapes and dtypes ``mod`` was called with through
    ``run``, by ``(shape, dtype)`` of each tensor (at most ``CHECKED_SHAPES`` of them,
    as the module's own cache of checked shapes)."""
    calls = getattr(mod, "_torch_calls", None)
    if calls is None:
        calls = mod._torch_calls = {}
    return calls


_SIZE_OPS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "min": torch.sym_min,
    "max": torch.sym_max,
}


def _size_value(e, env: dict):
    """Shape expression ``e`` with its size variables' values from ``env``: ints, or
    the SymInts of ``torch.compile``'s dynamic shapes (the arithmetic of a size)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Binary) and e.op in _SIZE_OPS:
        return _SIZE_OPS[e.op](_size_value(e.a, env), _size_value(e.b, env))
    raise ValueError(f"{e} is not a size's arithmetic (+ - * // % min max)")


def _output_shapes(name: str, inputs: list, shapes: tuple, outputs: list) -> list:
    """The outputs' shapes, their size variables bound from the inputs' ``shapes`` (the
    first input that has one as a dimension binds it, as a module call does), ints or
    SymInts as those are."""
    bound: dict = {}
    for k, (t, shape) in enumerate(zip(inputs, shapes)):
        if len(t.shape) != len(shape):
            raise ValueError(
                f"{name} input {k}: {len(shape)}-D, the kernel takes {len(t.shape)}-D "
                f"(shape {tuple(shape)})"
            )
        for want, got in zip(t.shape, shape):
            if isinstance(want, Var):
                bound.setdefault(want, got)
    out = []
    for t in outputs:
        used = {v for d in t.shape for v in walk(d) if isinstance(v, Var)}
        unknown = sorted(v.name for v in used if v not in bound)
        if unknown:
            raise ValueError(
                f"{name}: the shape of output {t.name} depends on {', '.join(unknown)}, "
                "which no input's shape binds"
            )
        try:
            out.append([_size_value(d, bound) for d in t.shape])
        except ValueError as e:
            raise ValueError(f"{name}: output {t.name}'s shape: {e}") from None
    return out


_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*")
_TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "quantized", "_quantized", "torch"})


def custom_op(
    name: str,
    build: Callable,
    *,
    n_inputs: int,
    n_outputs: int = 1,
    target="host",
):
    """Register a pypto kernel as the PyTorch operator ``name`` (``"lib::op"``).

    ``build(*shapes)`` gets the input tensors' shapes (tuples) and returns
    ``(schedule, tensors)``: the first ``n_inputs`` tensors are the inputs, the rest
    the outputs (``n_outputs`` of them), of constant shapes or of sizes (``pt.var``)
    that the inputs' shapes bind. One module is built
    (for ``target``) and cached per combination of input shapes; a fake kernel (the
    outputs' shapes and dtypes from ``build``, nothing compiled) lets
    ``torch.compile(fullgraph=True)``
    trace it. A ``build()`` of no parameters is shape-generic: called once, its
    ``pt.var`` sizes bound at each call, one module for every shape, and under
    ``torch.compile`` its sizes stay symbolic (``dynamic=True``, ``mark_dynamic``:
    no recompile per shape). Returns the operator (also ``torch.ops.lib.op``).
    """
    if not isinstance(name, str) or not _OP_NAME.fullmatch(name):
        raise ValueError(
            f"custom_op: name must be 'namespace::op', each an identifier of ASCII letters, "
            f"digits and _, got {name!r}"
        )
    ns, op_name = name.split("::")
    if ns in _TORCH_NAMESPACES:
        raise ValueError(f"custom_op: the namespace {ns!r} is PyTorch's own; choose another")
    for what, n, least in (("n_inputs", n_inputs, 0), ("n_outputs", n_outputs, 1)):
        if isinstance(n, bool) or not isinstance(n, int) or n < least:
            raise ValueError(f"custom_op: {what} must be an integer of at least {least}, got {n!r}")
    if hasattr(getattr(torch.ops, ns), op_name):  # PyTorch would replace it without a word
        raise ValueError(f"custom_op: {name} is already a PyTorch operator; choose another name")
    tgt = as_target(target)
    graphs: dict = {}
    mods = ModuleCache()

    generic = not inspect.signature(build).parameters  # build(): one graph for all shapes

    def key_of(shapes):  # what a graph and its module are built for
        return () if generic else shapes

    def graph(key):
        if key not in graphs:
            got = build(*key)
            ok = isinstance(got, (tuple, list)) and len(got) == 2
            if not (
                ok
                and isinstance(got[1], (list, tuple))
                and all(isinstance(t, Tensor) for t in got[1])
            ):
                raise TypeError(f"{name}: build must return (schedule, [pypto tensors]), "
                                f"got {got!r:.80}")  # fmt: skip
            s, tensors = got
            if len(tensors) != n_inputs + n_outputs:
                raise ValueError(
                    f"{name}: build returned {len(tensors)} tensor(s); expected the "
                    f"{n_inputs} input(s) followed by {n_outputs} output(s)"
                )
            for k, t in enumerate(tensors):  # a miscount would write an input, or return
                given = isinstance(t.op, PlaceholderOp)  # a buffer nothing wrote
                if given != (k < n_inputs):
                    role = f"input {k}" if k < n_inputs else f"output {k - n_inputs}"
                    what = "a placeholder" if given else "a computed tensor"
                    raise ValueError(
                        f"{name}: build's tensor {k} ({t.name}) is {what}, but with "
                        f"n_inputs={n_inputs} it is {role}; the placeholders come first, "
                        "then the computed outputs"
                    )
                if not given and t.dtype not in _BY_NAME:
                    raise TypeError(
                        f"{name}: output {t.name} is {t.dtype}, which PyTorch operators "
                        f"here do not return (they return {', '.join(sorted(_BY_NAME))})"
                    )
            graphs[key] = (s, list(tensors))
        return graphs[key]

    def outputs(args, new):
        # a shape-specialized build under torch.compile: ints, so a symbolic size is
        # specialized (a guard) and the graph recompiles for another shape rather than
        # hashing a SymInt; a generic build keeps the SymInts
        shapes = tuple(tuple(a.shape if generic else (int(d) for d in a.shape)) for a in args)
        _, tensors = graph(key_of(shapes))
        sizes = _output_shapes(name, tensors[:n_inputs], shapes, tensors[n_inputs:])
        return [new(sh, _BY_NAME[t.dtype]) for sh, t in zip(sizes, tensors[n_inputs:])]

    @planned  # (its choices follow from the inputs' shapes and dtypes)
    def impl(*args):
        key = key_of(tuple(tuple(a.shape) for a in args))
        s, tensors = graph(key)
        for k, (a, t) in enumerate(zip(args, tensors)):
            want = t.dtype
            got = dtype_name(a, f"{name} input {k}", allowed=tuple(TORCH_DTYPES.values()))
            if got != want:
                raise TypeError(f"{name} input {k}: dtype {got}, the kernel takes {want}")
        mod = mods.get(key, lambda: _build(s, tensors, target=tgt, name=name.split("::")[1]))
        outs = outputs(args, empty)
        run(mod, [(a, f"{name} input {k}") for k, a in enumerate(args)], outs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @fake_kernel(name)
    def fake(*args):
        device = args[0].device if args else "cpu"
        outs = outputs(args, lambda shape, dt: torch.empty(shape, dtype=dt, device=device))
        return outs[0] if len(outs) == 1 else tuple(outs)

    params = ", ".join(f"Tensor x{k}" for k in range(n_inputs))
    ret = "Tensor" if n_outputs == 1 else "(" + ", ".join(["Tensor"] * n_outputs) + ")"
    op = torch.library.custom_op(name, impl, mutates_args=(), schema=f"({params}) -> {ret}")
    op.register_fake(fake)
    return op
