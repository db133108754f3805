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

from . import emulate
from .codegen_c import codegen
from .errors import BuildError
from .loop_ir import LoweredFunc
from .lowering import lower
from .module import EmulatedModule, Module, TimeResult, load_module
from .schedule import Schedule
from .target import as_target, can_run, missing_features

__all__ = [
    "EmulatedModule",
    "Module",
    "TimeResult",
    "build",
    "compile_source",
    "load_module",
    "set_num_threads",
]


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


def compile_source(source: str, flags, timeout: float = 300.0, cc=None) -> str:
    """Compile ``source`` to a shared object and return its path (cached); ``cc``: the
    compiler command (default ``$CC``, else ``cc``)."""
    cc = tuple(cc or compiler())
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
        if tgt.compiler_prefix is None:  # same architecture, missing ISA extensions
            raise BuildError(
                f"target {tgt.name} cannot run on this machine (it lacks "
                f"{', '.join(missing_features(tgt))}); "
                "use pt.build(..., emit_only=True) to get its C source"
            )
        driver = emulate.driver_source(func, cname)
        prog = emulate.compile_program(source, driver, tgt, cache_dir(), timeout=300.0)
        return EmulatedModule(func, source, cname, prog, tgt)
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
