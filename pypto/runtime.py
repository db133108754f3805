"""Build and run: C source -> shared object (cached on disk) -> a callable Module.

    mod = pt.build(s, [A, B, C], target="host", name="mm")
    mod(a, b, c)                      # checks every argument before C sees it
    mod.time_evaluator(number=10, repeat=5)(a, b, c).median

Objects are cached under ``$PYPTO_CACHE_DIR`` (default ``~/.cache/pypto``)
by the sha256 of compiler, flags and source, so rebuilding a kernel costs
no compiler run.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from . import dtypes
from .bounds_check import check_sizes
from .codegen_c import MAX_BYTES, codegen
from .errors import BuildError
from .expr import Const, Var, substitute
from .loop_ir import Allocate, LoweredFunc, walk_stmts, written_buffers
from .lowering import lower
from .schedule import Schedule
from .simplify import simplify
from .target import Target, as_target, can_run


def cache_dir() -> str:
    d = os.environ.get("PYPTO_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "pypto"
    )
    os.makedirs(d, exist_ok=True)
    return d


def compiler() -> list[str]:
    return shlex.split(os.environ.get("CC") or "cc")


@functools.lru_cache(maxsize=8)
def _compiler_version(cc: tuple) -> str:
    try:
        r = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30)
        return r.stdout.splitlines()[0] if r.stdout else ""
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"cannot run the C compiler {' '.join(cc)!r}: {e}") from None


def compile_source(source: str, flags, timeout: float = 300.0) -> str:
    """Compile ``source`` to a shared object and return its path (cached)."""
    cc = tuple(compiler())
    flags = list(flags)
    key = hashlib.sha256("\0".join([_compiler_version(cc), *cc, *flags, source]).encode())
    stem = os.path.join(cache_dir(), key.hexdigest()[:32])
    so = stem + ".so"
    if os.path.exists(so):
        return so
    src = stem + ".c"
    _atomic_write(src, source)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(so))
    os.close(fd)
    try:
        r = _run_compiler([*cc, *flags, src, "-o", tmp, "-lm"], timeout)
    except subprocess.TimeoutExpired:
        os.unlink(tmp)
        raise BuildError(
            f"the C compiler timed out after {timeout:.0f} s", source_path=src
        ) from None
    except OSError as e:
        os.unlink(tmp)
        raise BuildError(
            f"cannot run the C compiler {' '.join(cc)!r}: {e}", source_path=src
        ) from None
    if r.returncode != 0:
        os.unlink(tmp)
        raise BuildError(
            f"the C compiler failed (exit {r.returncode})", stderr=r.stderr, source_path=src
        )
    os.replace(tmp, so)
    return so


def _run_compiler(cmd: list, timeout: float) -> subprocess.CompletedProcess:
    """Run the compiler in its own process group, so that a timeout stops the whole
    driver -> cc1 -> as chain, not only the driver."""
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _atomic_write(path: str, text: str):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


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

    def __init__(self, func: LoweredFunc, source: str, cname: str, lib_path: str, target: Target):
        self.func = func
        self.source = source
        self.name = func.name
        self.lib_path = lib_path
        self.target = target
        lib = ctypes.CDLL(lib_path)
        self._c = getattr(lib, cname)
        self._c.restype = ctypes.c_int32
        self._c.argtypes = [ctypes.c_void_p] * len(func.params) + [ctypes.c_int64] * len(
            func.size_vars
        )
        self._specs = [
            (b.name, np.dtype(dtypes.dtype(b.dtype).numpy), b.shape) for b in func.params
        ]
        written = written_buffers(func.body)
        self._written = [id(b) in written for b in func.params]
        self._size_checks = func.attrs.get("size_checks", ())
        self._temps = [  # heap buffers sized at call time
            a.buffer
            for a in walk_stmts(func.body)
            if isinstance(a, Allocate) and not isinstance(a.size, Const)
        ]

    def __repr__(self):
        return f"Module({self.name}, target={self.target.name})"

    def _prepare(self, args) -> list:
        if len(args) != len(self._specs):
            names = ", ".join(n for n, _, _ in self._specs)
            raise TypeError(
                f"{self.name} takes {len(self._specs)} arguments ({names}), got {len(args)}"
            )
        arrays = []
        bound: dict = {}
        for a, (name, dt, shape), out in zip(args, self._specs, self._written):
            arr = _as_array(a, name)
            if arr.dtype != dt:
                raise TypeError(f"argument {name}: dtype {arr.dtype}, expected {dt}")
            if arr.ndim != len(shape):
                raise ValueError(
                    f"argument {name}: {arr.ndim} dimension(s), expected "
                    f"{len(shape)} (shape {_fmt_shape(shape)})"
                )
            if not arr.flags.c_contiguous:
                raise ValueError(
                    f"argument {name} is not C-contiguous; pass np.ascontiguousarray(...)"
                )
            if out and not arr.flags.writeable:
                raise ValueError(f"argument {name} is written but the array is read-only")
            for d, (want, got) in enumerate(zip(shape, arr.shape)):
                if isinstance(want, Var):
                    if want in bound and bound[want][0] != got:
                        v, src = bound[want]
                        raise ValueError(
                            f"argument {name}: dimension {d} is {got}, but {want.name} = {v} "
                            f"from argument {src}"
                        )
                    bound.setdefault(want, (got, name))
            arrays.append(arr)
        values = {v: Const(val, "int64") for v, (val, _) in bound.items()}
        for arr, (name, _, shape) in zip(arrays, self._specs):
            for d, (want, got) in enumerate(zip(shape, arr.shape)):
                w = simplify(substitute(want, values))
                if not isinstance(w, Const):
                    raise ValueError(f"argument {name}: cannot determine dimension {d} ({want})")
                if w.value != got:
                    raise ValueError(
                        f"argument {name}: dimension {d} is {got}, expected "
                        f"{w.value} (shape {_fmt_shape(shape)})"
                    )
        check_sizes(self.name, self._size_checks, {v: val for v, (val, _) in bound.items()})
        for b in self._temps:
            _check_temporary(self.name, b, values)
        _check_overlap(arrays, self._specs, self._written)
        ptrs = [arr.ctypes.data for arr in arrays]
        sizes = [bound[v][0] for v in self.func.size_vars]
        return [*ptrs, *sizes], arrays

    def __call__(self, *args):
        cargs, keep = self._prepare(args)
        status = self._c(*cargs)
        del keep
        if status != 0:
            _raise_status(self.name, status)

    def time_evaluator(self, number: int = 10, repeat: int = 5, min_repeat_ms: float = 0):
        """A function that times calls: ``.results`` (s per call, per repeat), ``.median``."""
        if number < 1 or repeat < 1:
            raise ValueError("number and repeat must be at least 1")

        def evaluate(*args) -> TimeResult:
            cargs, keep = self._prepare(args)
            fn = self._c
            status = fn(*cargs)  # warm-up
            if status != 0:
                _raise_status(self.name, status)
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


def _raise_status(name: str, status: int):
    if status == -1:
        raise MemoryError(f"{name}: could not allocate its temporary buffers")
    if status == -3:
        raise MemoryError(f"{name}: the byte size of a temporary buffer overflows for these sizes")
    if status == -4:
        raise ZeroDivisionError(
            f"{name}: an integer division by a divisor computed at run time found 0; "
            "the outputs are incomplete"
        )
    if status == -2:
        raise IndexError(
            f"{name}: an index read from data (such as X[i] in H[X[i]]) or not affine "
            "is out of range; the outputs are incomplete"
        )
    raise RuntimeError(f"{name}: the kernel failed with status {status}")


def _check_temporary(name: str, buf, values: dict):
    """MemoryError before the call when a temporary buffer's byte size cannot be had."""
    nbytes = buf.elem_bytes
    for d in buf.shape:
        v = simplify(substitute(d, values))
        nbytes *= max(v.value, 0) if isinstance(v, Const) else 1
    if nbytes > MAX_BYTES:
        raise MemoryError(f"{name}: temporary buffer {buf.name} would need {nbytes} bytes")


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _as_array(a, name: str) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "__dlpack__"):
        try:
            return np.from_dlpack(a)
        except Exception as e:  # noqa: BLE001 - report any exporter failure the same way
            raise TypeError(f"argument {name}: cannot view it through __dlpack__: {e}") from None
    raise TypeError(f"argument {name}: expected a numpy array, got {type(a).__name__}")


def _check_overlap(arrays, specs, written):
    spans = []
    for arr, (name, _, _), w in zip(arrays, specs, written):
        if arr.nbytes:
            spans.append((arr.ctypes.data, arr.ctypes.data + arr.nbytes, name, w))
    for i, (a0, a1, an, aw) in enumerate(spans):
        for b0, b1, bn, bw in spans[i + 1 :]:
            if (aw or bw) and a0 < b1 and b0 < a1:
                raise ValueError(
                    f"arguments {an} and {bn} overlap in memory; a kernel's "
                    "outputs must not alias its other arguments"
                )


def build(sch, args=None, target="host", name: str = "default_function", emit_only: bool = False):
    """``pt.build(s, args, target, name)``: lower, generate C, compile, load.

    With ``emit_only=True`` the C source is returned as a string and nothing
    is compiled (the way to get code for a target other than this host).
    """
    tgt = as_target(target)
    if isinstance(sch, LoweredFunc):
        func = sch
    elif isinstance(sch, Schedule):
        if args is None:
            raise TypeError("build needs the argument tensors: pt.build(s, [A, B, C])")
        func = lower(sch, args, name=name)
    else:
        raise TypeError(f"build expects a Schedule or a lowered function, got {type(sch).__name__}")
    source, cname = codegen(func, tgt)
    if emit_only:
        return source
    if not can_run(tgt):
        raise BuildError(
            f"target {tgt.name} cannot run on this machine; "
            "use pt.build(..., emit_only=True) to get its C source"
        )
    so = compile_source(source, tgt.cflags)
    return Module(func, source, cname, so, tgt)


@functools.lru_cache(maxsize=1)
def _gomp():
    for lib in ("libgomp.so.1", "libgomp.so"):
        try:
            return ctypes.CDLL(lib)
        except OSError:
            continue
    return None


def set_num_threads(n: int) -> None:
    """Set the number of threads that parallel loops use from now on."""
    if n < 1:
        raise ValueError("the number of threads must be at least 1")
    lib = _gomp()
    if lib is not None:
        lib.omp_set_num_threads(int(n))
