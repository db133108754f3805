"""A compiled kernel as a Python callable: argument checks, timing, saving and loading.

    mod = pt.build(s, [A, B, C])       # a Module
    mod(a, b, c)                       # every argument checked before C sees it
    c = mod(a, b)                      # outputs omitted: allocated and returned
    mod.export_library("k.so")         # k.so + k.so.json (its signature)
    mod = pt.load_module("k.so")       # no compiler needed; the same checks

A call's arguments are numpy arrays or any object with ``__dlpack__`` (a PyTorch CPU
tensor, ...), viewed without copying.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import time
from dataclasses import dataclass

import numpy as np

from . import dtypes, emulate, shared_libs
from .arg_checks import (
    aligned_empty,
    as_array,
    bind_passed,
    bind_sizes,
    bump_versions,
    check_overlap,
    check_temporary,
    check_tensor_writes,
    data_pointer,
    expected_dim,
    fmt_shape,
    index_checks,
    output_shapes,
    provenance,
    raise_status,
    repeat_call,
    repeat_torch_call,
    returned,
    stand_in,
    torch_key,
)
from .bounds_check import SizeCheck, check_sizes
from .cache import atomic_write_all
from .expr import Const, Var
from .loop_ir import Allocate, LoweredFunc, output_flags, walk_stmts
from .overflow import SAVED_SAFE_SIZE, check_overflow, safe_size
from .scalar_args import SCALAR_CTYPES, ScalarParam, ScalarSlots
from .shape_text import shape_expr
from .target import Target

SIGNATURE_FORMAT = 2  # 2: the sha256 covers the signature file's fields too
_BOUND = ("format", "target", "signature", "source")  # what the sha256 binds to the object


def saved_digest(data: bytes, meta: dict) -> str:
    """The sha256 of an exported module: its object and the fields of its signature file
    that decide how it is called, so that neither is used with an edited other."""
    fields = json.dumps({k: meta.get(k) for k in _BOUND}, sort_keys=True).encode()
    return hashlib.sha256(data + b"\0" + fields).hexdigest()


@dataclass(frozen=True, slots=True)
class Param:
    """One buffer argument: its name, dtype, shape (Exprs over the size variables) and
    whether the kernel writes it (an output)."""

    name: str
    dtype: str
    shape: tuple
    written: bool


@dataclass(frozen=True, slots=True)
class Temp:
    """A heap temporary sized at call time: its byte size is checked before the call."""

    name: str
    elem_bytes: int
    shape: tuple  # Exprs over the size variables


@dataclass(frozen=True, slots=True)
class Signature:
    """What a call is checked against: the buffer arguments, then the sizes bound from
    their shapes (passed to C after the buffers); the conditions on those sizes that
    keep every access in bounds (``pypto.bounds_check``); the heap temporaries they size."""

    name: str
    cname: str
    params: tuple  # of Param
    size_vars: tuple  # of Var
    size_checks: tuple = ()  # of bounds_check.SizeCheck
    temps: tuple = ()  # of Temp
    scalars: tuple = ()  # of scalar_args.ScalarParam, passed after the sizes
    index_checks: tuple = ()  # the accesses checked at run time (arg_checks.index_checks)
    safe_size: int = SAVED_SAFE_SIZE  # sizes up to it keep index arithmetic in int64

    @staticmethod
    def of(func: LoweredFunc, cname: str) -> Signature:
        params = tuple(
            Param(b.name, b.dtype, tuple(b.shape), w)
            for b, w in zip(func.params, output_flags(func))
        )
        temps = tuple(
            Temp(a.buffer.name, a.buffer.elem_bytes, tuple(a.buffer.shape))
            for a in walk_stmts(func.body)
            if isinstance(a, Allocate) and not isinstance(a.size, Const)
        )
        seen: dict = {}
        for v in func.size_vars:
            if seen.setdefault(v.name, v) is not v:
                raise ValueError(
                    f"two different size variables are named {v.name!r}; give them "
                    "different names (pt.var(...)): a module calls its sizes by name"
                )
        checks = tuple(func.attrs.get("size_checks", ()))
        return Signature(
            func.name, cname, params, tuple(func.size_vars), checks, temps, func.scalars,
            index_checks(func.body), safe_size(func),
        )  # fmt: skip

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "cname": self.cname,
            "params": [
                {"name": p.name, "dtype": p.dtype, "shape": [str(d) for d in p.shape],
                 "written": p.written}
                for p in self.params
            ],
            "size_vars": [{"name": v.name, "dtype": v.dtype} for v in self.size_vars],
            "size_checks": [
                {"message": c.message, "params": [v.name for v in c.params], "bad": c.bad,
                 "coords": list(c.coords)}
                for c in self.size_checks
            ],
            "temps": [
                {"name": t.name, "elem_bytes": t.elem_bytes, "shape": [str(d) for d in t.shape]}
                for t in self.temps
            ],
            "scalars": [p.to_json() for p in self.scalars],
            "index_checks": list(self.index_checks),
            "safe_size": self.safe_size,
        }  # fmt: skip

    @staticmethod
    def from_json(d: dict) -> Signature:
        sizes = {}
        for v in d["size_vars"]:  # {"name", "dtype"}; a name alone: int64 (format 2)
            name, dt = (v, "int64") if isinstance(v, str) else (v["name"], v["dtype"])
            sizes[name] = Var(name, dtypes.check(dt))
        params = tuple(
            Param(p["name"], dtypes.check(p["dtype"]),
                  tuple(shape_expr(s, sizes) for s in p["shape"]), bool(p["written"]))
            for p in d["params"]
        )  # fmt: skip
        var = lambda n: sizes[n] if n in sizes else Var(n)  # noqa: E731
        checks = tuple(
            SizeCheck(str(c["message"]), tuple(var(n) for n in c["params"]), str(c["bad"]),
                      tuple(c["coords"]))
            for c in d.get("size_checks", [])
        )  # fmt: skip
        temps = tuple(
            Temp(str(t["name"]), int(t["elem_bytes"]),
                 tuple(shape_expr(x, sizes) for x in t["shape"]))
            for t in d.get("temps", [])
        )  # fmt: skip
        scalars = tuple(ScalarParam.from_json(p) for p in d.get("scalars", []))
        notes = tuple(str(n) for n in d.get("index_checks", []))
        safe = int(d.get("safe_size", SAVED_SAFE_SIZE))
        return Signature(
            d["name"], d["cname"], params, tuple(sizes.values()), checks, temps, scalars, notes,
            safe,
        )  # fmt: skip


CHECKED_SHAPES = 64  # shape signatures a module remembers as checked


@dataclass(frozen=True)
class TimeResult:
    """Seconds per call for each repeat (each the mean over ``number`` calls)."""

    results: tuple

    @property
    def mean(self) -> float:
        return float(np.mean(self.results))

    @property
    def median(self) -> float:
        return float(np.median(self.results))

    @property
    def min(self) -> float:
        return float(np.min(self.results))

    def __repr__(self):
        return (
            f"TimeResult(median={self.median:.6g}s, mean={self.mean:.6g}s, n={len(self.results)})"
        )


class Module:
    """A compiled kernel: call it on numpy arrays (or objects with ``__dlpack__``)."""

    def __init__(
        self,
        func: LoweredFunc | None,
        source: str,
        cname: str,
        lib_path: str,
        target: Target,
        signature: Signature | None = None,
        profiler=None,
    ):
        self._describe(func, source, cname, lib_path, target, signature)
        self.profiler = profiler  # pypto.profile.Profiler, given by pt.build
        lib = self._lib = shared_libs.load(lib_path)
        self._c = getattr(lib, cname)
        self._c.restype = ctypes.c_int32
        # the blocks its temporaries keep between calls (c_helpers.WORKSPACE_MAX)
        self._release = getattr(lib, "pt_release_workspace", None)
        sig = self.signature
        self._c.argtypes = (
            [ctypes.c_void_p] * len(sig.params)
            + [ctypes.c_int64] * len(sig.size_vars)
            + [SCALAR_CTYPES[p.dtype] for p in sig.scalars if not p.is_size]
        )

    def _describe(self, func, source, cname, lib_path, target, signature=None):
        """What every module knows of its kernel: the signature its calls are checked by."""
        self.func = func  # None for a module loaded from a file
        self.profiler = None
        self.signature = signature or Signature.of(func, cname)
        self.source = source
        self.name = self.signature.name
        self.lib_path = lib_path
        self.target = target
        sig = self.signature
        self._specs = [(p.name, dtypes.numpy_dtype(p.dtype), p.shape) for p in sig.params]
        self._written = [p.written for p in sig.params]
        # the shapes as ints where every dimension is a constant (checked without simplify)
        self._fixed = [
            tuple(d.value for d in shape) if all(isinstance(d, Const) for d in shape) else None
            for _, _, shape in self._specs
        ]
        self._slots = ScalarSlots(
            sig.name, sig.scalars, [p.name for p in sig.params], self._written
        )
        # shapes (and dtypes) of earlier calls whose checks passed -> the call's sizes:
        # a call with the same shapes repeats only the checks of its arrays themselves
        self._checked: dict = {}
        self._torch_checked: dict = {}  # the same for calls of PyTorch tensors
        self._out_shapes: dict = {}  # the same for the outputs a call allocates
        self._plain = not sig.scalars  # calls may take the fast path (``repeat_call``)
        self._outs = tuple(i for i, w in enumerate(self._written) if w)

    def __repr__(self):
        return f"Module({self.name}, target={self.target.name})"

    def _with_outputs(self, args) -> tuple[list, list]:
        """The arguments with omitted outputs allocated (when exactly the inputs are given),
        and the allocated outputs."""
        args, scalars = self._slots.split(args)
        inputs = [s for s, w in zip(self._specs, self._written) if not w]
        if (
            len(args) == len(self._specs)
            or len(args) != len(inputs)
            or len(inputs) == len(self._specs)
        ):
            return self._slots.join(args, scalars), []
        arrays = [as_array(a, name) for a, (name, _, _) in zip(args, inputs)]
        passed = self._slots.sizes(scalars)
        key = (tuple((arr.shape, arr.dtype) for arr in arrays), tuple(passed.values()))
        shapes = self._out_shapes.get(key)
        if shapes is None:
            shapes = output_shapes(
                self.name,
                arrays,
                inputs,
                self._specs,
                self._written,
                self.signature.size_vars,
                passed,
            )
            if len(self._out_shapes) < CHECKED_SHAPES:
                self._out_shapes[key] = shapes
        full, made, it, out = [], [], iter(arrays), iter(shapes)
        for (_, dt, _), w in zip(self._specs, self._written):
            if w:
                made.append(aligned_empty(next(out), dt))
            full.append(made[-1] if w else next(it))
        return self._slots.join(full, scalars), made

    def _prepare(self, args) -> list:
        args, scalars = self._slots.split(args)
        if len(args) != len(self._specs):
            names = ", ".join(n for n, _, _ in self._specs)
            outs = [n for (n, _, _), w in zip(self._specs, self._written) if w]
            raise TypeError(
                f"{self.name} takes {len(self._specs)} arguments ({names}), or "
                f"{len(self._specs) - len(outs)} without the outputs ({', '.join(outs)}); "
                f"got {len(args)}"
            )
        arrays = [as_array(a, name) for a, (name, _, _) in zip(args, self._specs)]
        passed = self._slots.sizes(scalars)
        key = (tuple((arr.shape, arr.dtype) for arr in arrays), tuple(passed.values()))
        sizes = self._checked.get(key)
        if sizes is None:
            sizes = self._check_shapes(arrays, passed)
            if len(self._checked) < CHECKED_SHAPES:
                self._checked[key] = sizes
        for arr, (name, _, _), out in zip(arrays, self._specs, self._written):
            if not arr.flags.c_contiguous:
                fix = (
                    "np.ascontiguousarray(x) (or t.contiguous())"
                    if not out
                    else "a C-contiguous array it can write (a copy would take the results)"
                )
                raise ValueError(f"argument {name} is not C-contiguous; pass {fix}")
            if out and not arr.flags.writeable:
                raise ValueError(f"argument {name} is written but the array is read-only")
        checked = bool(self.signature.index_checks)
        arrays = [
            a if a.size else stand_in(a, spec[0], checked) for a, spec in zip(arrays, self._specs)
        ]
        addresses = [data_pointer(a) for a in arrays]
        check_overlap(arrays, self._specs, self._written, addresses)
        check_tensor_writes(args, self._specs, self._written)
        return [*addresses, *sizes, *self._slots.floats(scalars)], arrays

    def _check_shapes(self, arrays, passed: dict) -> list:
        """Dtypes, ranks, dimensions, sizes and temporaries of a call's arrays (and the
        sizes it ``passed``: name -> value); returns the size arguments."""
        bound = bind_passed(bind_sizes(arrays, self._specs), self.signature.size_vars, passed)
        values = {v: Const(val, "int64") for v, (val, _) in bound.items()}
        for arr, (name, _, shape), fixed in zip(arrays, self._specs, self._fixed):
            if fixed is not None and fixed == arr.shape:
                continue
            for d, (want, got) in enumerate(zip(shape, arr.shape)):
                w = expected_dim(name, d, want, values, bound)
                if w != got:
                    raise ValueError(
                        f"argument {name}: dimension {d} is {got}, expected "
                        f"{w} (shape {fmt_shape(shape)}{provenance(want, bound)})"
                    )
        check_sizes(self.name, self.signature.size_checks, {v: x for v, (x, _) in bound.items()})
        for t in self.signature.temps:
            check_temporary(self.name, t, values)
        check_overflow(self.name, self.signature.safe_size, self.func, bound)
        return [bound[v][0] for v in self.signature.size_vars]

    def __reduce__(self):  # (a loaded library cannot travel)
        raise TypeError(f"{self.name}: a module cannot be pickled; use mod.export_library(path)"
                        ", then pt.load_module(path)")  # fmt: skip

    def release_workspace(self) -> bool:
        """Free the blocks that the kernel's temporaries keep from one call to the next
        (the next call allocates them again). False while a call is using them; a
        collected module releases them itself."""
        release = getattr(self, "_release", None)
        return release is None or release() == 0

    def __del__(self):  # the workspace freed, the library unloaded (pypto.shared_libs)
        try:
            lib = getattr(self, "_lib", None)
            if self.release_workspace() and lib is not None:
                shared_libs.unload(lib)
        except Exception:  # noqa: BLE001  (interpreter shutdown: ctypes may be gone)
            pass

    TENSOR_POINTERS = True  # the kernel may take PyTorch tensors' data pointers

    def __call__(self, *args):
        """Run the kernel. With every argument given, returns None; with only the inputs,
        allocates the outputs and returns them (tensors when an input is a tensor)."""
        n = len(self._specs)
        cargs = self._plain and repeat_call(args, n, self._checked, self._outs)
        tensors = not cargs and self._plain and self._torch_checked
        if tensors:
            cargs = repeat_torch_call(args, n, self._torch_checked, self._outs)
        if cargs:
            status = self._invoke(cargs, args)
            if tensors:
                bump_versions(args, self._written)
            if status != 0:
                raise_status(self.name, status, self.signature.index_checks)
            return None
        given, (args, made) = args, self._with_outputs(args)
        cargs, keep = self._prepare(args)
        status = self._invoke(cargs, keep)
        del keep
        bump_versions(self._slots.split(args)[0], self._written)
        if status != 0:
            raise_status(self.name, status, self.signature.index_checks)
        key = self._plain and self.TENSOR_POINTERS and not made and torch_key(args)
        if key and len(self._torch_checked) < CHECKED_SHAPES:  # its shapes passed the checks
            self._torch_checked[key] = cargs[n:]
        return returned(made, given) if made else None

    def _invoke(self, cargs: list, arrays: list) -> int:
        """Run the kernel on checked arguments (pointers and sizes; the arrays behind them)."""
        return self._c(*cargs)

    def time_evaluator(self, number: int = 10, repeat: int = 5, min_repeat_ms: float = 0):
        """A function that times calls: ``.results`` (s per call, per repeat), ``.median``."""
        for what, v in (("number", number), ("repeat", repeat)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{what} must be an integer of at least 1, got {v!r}")
        if not 0 <= min_repeat_ms < float("inf"):
            raise ValueError(f"min_repeat_ms must be a finite number >= 0, got {min_repeat_ms!r}")

        def evaluate(*args) -> TimeResult:
            args = self._with_outputs(args)[0]
            cargs, keep = self._prepare(args)
            bump_versions(self._slots.split(args)[0], self._written)  # (before: a call fails)
            fn = self._c
            status = fn(*cargs)  # warm-up
            if status != 0:
                raise_status(self.name, status, self.signature.index_checks)
            n = number
            results = []
            for _ in range(repeat):
                while True:
                    t0 = time.perf_counter()
                    for _ in range(n):
                        fn(*cargs)
                    dt = time.perf_counter() - t0
                    if dt * 1000 >= min_repeat_ms or n >= 1 << 30:
                        break
                    n = max(n * 2, int(n * min_repeat_ms / max(dt * 1000, 1e-3)) + 1)
                results.append(dt / n)
            del keep
            return TimeResult(tuple(results))

        return evaluate

    def profile(self, *args, repeat: int = 10):
        """Each root stage timed over ``repeat`` calls of a build with timers: a
        ``pypto.profile.Profile`` (print it; ``.plot(png)``), see ``pypto.profile``."""
        if self.profiler is None:
            raise RuntimeError(f"{self.name} cannot be profiled: only a module pt.build made "
                               "from a schedule, run on this machine, has its stages")  # fmt: skip
        return self.profiler(self, args, repeat)

    def export_library(self, path: str) -> str:
        """Save the compiled kernel: the shared object at ``path`` and its signature, target
        and C source beside it in ``path + ".json"``; ``pt.load_module(path)`` loads them
        (in any process, without a compiler). Returns ``path``."""
        path = os.fspath(path)
        with open(self.lib_path, "rb") as f:
            data = f.read()
        meta = {
            "format": SIGNATURE_FORMAT,
            "target": self.target.name,
            "signature": self.signature.to_json(),
            "source": self.source,
        }
        meta["sha256"] = saved_digest(data, meta)
        side = json.dumps(meta, indent=1).encode()
        atomic_write_all([(path, data, 0o644), (path + ".json", side, 0o644)])
        return path


class EmulatedModule(Module):
    """A kernel for another architecture, run under qemu (see ``pypto.emulate``): calls
    are checked and computed as on the target; timing and export are refused."""

    def __init__(self, func: LoweredFunc, source: str, cname: str, prog: str, target: Target):
        self._describe(func, source, cname, prog, target)

    def __repr__(self):
        return f"EmulatedModule({self.name}, target={self.target.name}, under qemu)"

    TENSOR_POINTERS = False  # the emulator copies numpy arrays in and out

    def _invoke(self, cargs: list, arrays: list) -> int:
        sizes = cargs[len(arrays) : len(arrays) + len(self.signature.size_vars)]
        scalars = cargs[len(arrays) + len(sizes) :]
        return emulate.run_program(
            self.lib_path, self.target, arrays, sizes, self._written, scalars
        )

    def time_evaluator(self, *a, **kw):
        raise RuntimeError(
            f"{self.name} runs under emulation: its timing says nothing about "
            f"{self.target.name}; time it on such a machine"
        )

    def export_library(self, path: str) -> str:
        raise RuntimeError(
            f"{self.name} was built as a program for emulation; export its C source "
            f"(mod.source) and build it on a {self.target.name} machine"
        )
