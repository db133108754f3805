"""PyTorch interop: tensors through pypto modules zero-copy, and user kernels as operators.

This is the one module of ``pypto`` that imports torch (the optional ``torch`` extra).

    import pypto.torch as ptt
    def build(x_shape):                          # shapes of the inputs -> (schedule, tensors)
        X = pt.placeholder(x_shape, "float32", name="X")
        Y = pt.compute(x_shape, lambda i, j: X[i, j] * 2, name="Y")
        s = pt.create_schedule(Y.op); s[Y].parallel(Y.op.axis[0])
        return s, [X, Y]                         # inputs first, then outputs
    double = ptt.custom_op("mylib::double", build, n_inputs=1)
    y = double(torch.randn(4, 8))                # also torch.ops.mylib.double; torch.compile-able

Tensors are passed as numpy views of their memory (no copy); a non-contiguous
input is first made contiguous (one copy, the only one). Only CPU tensors of the
kernel's dtypes are accepted; anything else raises a ``TypeError`` or ``ValueError``
naming the argument.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import torch

from .runtime import build as _build
from .target import as_target

TORCH_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.int32: "int32",
    torch.int64: "int64",
}
_BY_NAME = {v: k for k, v in TORCH_DTYPES.items()}


def dtype_name(t: torch.Tensor, name: str, allowed=("float32", "float64")) -> str:
    """The pypto dtype of tensor ``t``; a ``TypeError`` naming ``name`` if not ``allowed``."""
    d = TORCH_DTYPES.get(t.dtype)
    if d not in allowed:
        raise TypeError(f"{name}: dtype {t.dtype} is not supported (expected {', '.join(allowed)})")
    return d


def as_numpy(t: torch.Tensor, name: str) -> np.ndarray:
    """A numpy view of CPU tensor ``t`` (made contiguous first if it is not)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{name}: pypto kernels run on the CPU; the tensor is on {t.device}")
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


class ModuleCache:
    """Built modules by key, each built once (thread-safe)."""

    def __init__(self):
        self._mods: dict = {}
        self._lock = threading.Lock()

    def get(self, key, make: Callable):
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


def run(mod, inputs: list, outputs: list) -> None:
    """Call ``mod`` on torch tensors: inputs as (tensor, name) pairs, outputs (fresh,
    contiguous tensors) written in place."""
    arrays = [as_numpy(t, n) for t, n in inputs]
    mod(*arrays, *[o.numpy() for o in outputs])


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
    the outputs (``n_outputs`` of them), all of constant shape. One module is built
    (for ``target``) and cached per combination of input shapes; a fake kernel (the
    outputs' shapes and dtypes from ``build``, nothing compiled) lets
    ``torch.compile(fullgraph=True)``
    trace it. Returns the operator (also ``torch.ops.lib.op``).
    """
    if "::" not in name:
        raise ValueError(f"custom_op: name must be 'namespace::op', got {name!r}")
    tgt = as_target(target)
    graphs: dict = {}
    mods = ModuleCache()

    def graph(shapes):
        if shapes not in graphs:
            s, tensors = build(*shapes)
            if len(tensors) != n_inputs + n_outputs:
                raise ValueError(
                    f"{name}: build returned {len(tensors)} tensor(s); expected the "
                    f"{n_inputs} input(s) followed by {n_outputs} output(s)"
                )
            graphs[shapes] = (s, list(tensors))
        return graphs[shapes]

    def outputs(args, device):
        _, tensors = graph(tuple(tuple(a.shape) for a in args))
        return [
            torch.empty([int(d.value) for d in t.shape], dtype=_BY_NAME[t.dtype], device=device)
            for t in tensors[n_inputs:]
        ]

    def impl(*args):
        shapes = tuple(tuple(a.shape) for a in args)
        s, tensors = graph(shapes)
        for k, (a, t) in enumerate(zip(args, tensors)):
            want = t.dtype
            got = dtype_name(a, f"{name} input {k}", allowed=tuple(TORCH_DTYPES.values()))
            if got != want:
                raise TypeError(f"{name} input {k}: dtype {got}, the kernel takes {want}")
        mod = mods.get(shapes, lambda: _build(s, tensors, target=tgt, name=name.split("::")[1]))
        outs = outputs(args, "cpu")
        run(mod, [(a, f"{name} input {k}") for k, a in enumerate(args)], outs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fake(*args):
        outs = outputs(args, args[0].device if args else "cpu")
        return outs[0] if len(outs) == 1 else tuple(outs)

    params = ", ".join(f"Tensor x{k}" for k in range(n_inputs))
    ret = "Tensor" if n_outputs == 1 else "(" + ", ".join(["Tensor"] * n_outputs) + ")"
    op = torch.library.custom_op(name, impl, mutates_args=(), schema=f"({params}) -> {ret}")
    op.register_fake(fake)
    return op
