"""Build and run: C source -> shared object (cached on disk) -> a callable Module.

    mod = pt.build(s, [A, B, C], target="host", name="mm")
    mod(a, b, c)                      # checks every argument before C sees it
    mod.time_evaluator(number=10, repeat=5)(a, b, c).median

Objects are cached under ``$PYPTO_CACHE_DIR`` (default ``~/.cache/pypto``)
by the sha256 of compiler, flags and source, so rebuilding a kernel costs
no compiler run; ``pypto/cache.py`` verifies an object before it is loaded.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from . import dtypes
from .cache import Entry, remove_file
from .cache import cache_dir as cache_dir  # public here before pypto.cache existed
from .codegen_c import codegen
from .errors import BuildEnvironmentError, BuildError
from .expr import Const, Var, substitute
from .loop_ir import LoweredFunc, written_buffers
from .lowering import lower
from .schedule import Schedule
from .simplify import simplify
from .target import Target, as_target, can_run


def compiler() -> list[str]:
    return shlex.split(os.environ.get("CC") or "cc")


DEFAULT_TIMEOUT = 300.0  # seconds one compiler run may take
_MAX_TIMEOUT = 1e6  # seconds; poll() cannot wait much longer (2**31 ms)
PROBE_SOURCE = "int pypto_probe(int x) { return x + 1; }\n"
_PROBE_VALID_S = 60.0  # a compiler that worked this recently is taken as working
_probed: dict = {}  # (compiler, flags) -> when a trivial kernel last compiled
_running: dict = {}  # pid -> Popen of the compilers this process is waiting for
_versions: dict = {}  # compiler command -> its --version line


def _compiler_version(cc: tuple, timeout: float) -> str:
    """The compiler's first ``--version`` line (part of every cache key), asked once."""
    if cc not in _versions:
        try:
            r = _run_compiler([*cc, "--version"], min(timeout, 30.0))
        except OSError as e:
            raise BuildEnvironmentError(
                f"cannot run the C compiler {' '.join(cc)!r}: {e}"
            ) from None
        except subprocess.TimeoutExpired:
            raise BuildEnvironmentError(
                f"the C compiler {' '.join(cc)!r} did not answer --version within "
                f"{min(timeout, 30.0):g} s"
            ) from None
        _versions[cc] = r.stdout.splitlines()[0] if r.stdout else ""
    return _versions[cc]


def check_timeout(timeout) -> float:
    """``timeout`` as seconds: a positive finite number, else ``ValueError`` (beyond
    eleven days it means no limit: the waits below cannot be longer)."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return min(float(timeout), _MAX_TIMEOUT)


def compile_source(source: str, flags, timeout: float = DEFAULT_TIMEOUT) -> str:
    """Compile ``source`` to a shared object and return its path (cached, verified).

    ``BuildError``: the compiler rejected this source or outlived ``timeout`` seconds
    (its whole process group is killed). ``BuildEnvironmentError``: the fault is not
    the source's -- the compiler is missing, cannot build even a trivial kernel with
    these flags, or wrote no object; or the cache directory is unusable.
    """
    timeout = check_timeout(timeout)
    cc = tuple(compiler())
    flags = tuple(flags)
    key = hashlib.sha256("\0".join([_compiler_version(cc, timeout), *cc, *flags, source]).encode())
    entry = Entry(key.hexdigest()[:32])
    so = entry.lookup()
    if so is not None:
        return so
    entry.write_source(source)
    tmp = entry.temp_object()
    try:
        r = _run_compiler([*cc, *flags, entry.source, "-o", tmp, "-lm"], timeout)
    except subprocess.TimeoutExpired:
        remove_file(tmp)
        _check_compiler_works(cc, flags, timeout, "", entry.source)
        raise BuildError(
            f"the C compiler timed out after {timeout:g} s and was stopped "
            "(pt.build(..., timeout=seconds) sets the limit)",
            source_path=entry.source,
        ) from None
    except OSError as e:
        remove_file(tmp)
        raise BuildEnvironmentError(
            f"cannot run the C compiler {' '.join(cc)!r}: {e}", source_path=entry.source
        ) from None
    if r.returncode != 0:
        remove_file(tmp)
        _check_compiler_works(cc, flags, timeout, r.stderr, entry.source)
        raise BuildError(
            f"the C compiler failed (exit {r.returncode})",
            stderr=r.stderr,
            source_path=entry.source,
        )
    return entry.store(tmp)


def _check_compiler_works(
    cc: tuple, flags: tuple, timeout: float, stderr: str, source_path: str
) -> None:
    """After a failed compile: ``BuildEnvironmentError`` (with the failed compile's
    ``stderr`` and ``source_path``) unless the same compiler and flags build a trivial
    kernel, so a broken toolchain is never blamed on a source."""
    if time.monotonic() - _probed.get((cc, flags), -math.inf) < _PROBE_VALID_S:
        return
    with tempfile.TemporaryDirectory(prefix="pypto-probe-") as d:
        src, out = os.path.join(d, "probe.c"), os.path.join(d, "probe.so")
        with open(src, "w") as f:
            f.write(PROBE_SOURCE)
        why = ""
        try:
            r = _run_compiler([*cc, *flags, src, "-o", out, "-lm"], min(timeout, 60.0))
            stderr = stderr or r.stderr
            if r.returncode != 0:
                why = f"exit {r.returncode}"
            elif not os.path.exists(out) or os.path.getsize(out) == 0:
                why = "it reported success but wrote no object"
        except subprocess.TimeoutExpired:
            why = "it timed out"
        except OSError as e:
            why = str(e)
    if why:
        raise BuildEnvironmentError(
            f"the C compiler {' '.join(cc)!r} cannot build even a trivial kernel with "
            f"these flags ({why}); check $CC and the toolchain",
            stderr=stderr,
            source_path=source_path,
        )
    _probed[(cc, flags)] = time.monotonic()


def _run_compiler(cmd: list, timeout: float) -> subprocess.CompletedProcess:
    """Run the compiler in its own process group, so that a timeout stops the whole
    driver -> cc1 -> as chain, not only the driver."""
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    _running[p.pid] = p
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(p.pid)
        p.communicate()
        raise
    finally:
        _running.pop(p.pid, None)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_compilers() -> None:
    """Kill every compiler this process is waiting for, with its whole process group
    (for a worker that must end now: on SIGTERM, or when its parent is gone)."""
    for pid in list(_running):
        _killpg(pid)


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
    if status == -2:
        raise IndexError(
            f"{name}: an index read from data (such as X[i] in H[X[i]]) is out of "
            "range; the outputs are incomplete"
        )
    raise RuntimeError(f"{name}: the kernel failed with status {status}")


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


def build(
    sch,
    args=None,
    target="host",
    name: str = "default_function",
    emit_only: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
):
    """``pt.build(s, args, target, name)``: lower, generate C, compile, load.

    With ``emit_only=True`` the C source is returned as a string and nothing
    is compiled (the way to get code for a target other than this host).
    ``timeout``: seconds the C compiler may take; past it, the compiler and its
    children are killed and ``BuildError`` says so.
    """
    timeout = check_timeout(timeout)
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
    so = compile_source(source, tgt.cflags, timeout)
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
