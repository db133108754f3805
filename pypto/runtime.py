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
import shutil
import signal
import subprocess
import tempfile
import time

from . import emulate
from .align_peel import peel_for_alignment
from .bound_checks import instrument as instrument_bound_checks
from .bound_checks import wanted as bound_checks_wanted
from .cache import Entry, remove_file
from .cache import cache_dir as cache_dir  # public here before pypto.cache existed
from .codegen_c import codegen
from .errors import BuildEnvironmentError, BuildError, CompilerKilled
from .loop_ir import LoweredFunc
from .lowering import lower
from .module import EmulatedModule, Module, TimeResult
from .pch import run_with_prelude
from .profile import Profiler, describe
from .saved import load_module
from .schedule import Schedule
from .target import GCC_VECTORIZER_LIMITS, as_target, can_run, missing_features

__all__ = [
    "EmulatedModule",
    "Module",
    "TimeResult",
    "build",
    "compile_source",
    "get_num_threads",
    "load_module",
    "set_num_threads",
]


def compiler() -> list[str]:
    """``$CC`` as a command line (default ``cc``, also for a blank one)."""
    cc = (os.environ.get("CC") or "").strip() or "cc"
    try:
        return shlex.split(cc)
    except ValueError as e:  # an unbalanced quote
        raise BuildEnvironmentError(f"$CC is not a valid command line ({e}): CC={cc!r}") from None


DEFAULT_TIMEOUT = 300.0  # seconds one compiler run may take
_GCC_ONLY = frozenset(GCC_VECTORIZER_LIMITS)  # flags left out for clang, which refuses them
_MAX_TIMEOUT = 1e6  # seconds; poll() cannot wait much longer (2**31 ms)
PROBE_SOURCE = "int pypto_probe(int x) { return x + 1; }\n"
_PROBE_VALID_S = 60.0  # a compiler that worked this recently is taken as working
_probed: dict = {}  # (compiler, flags) -> when a trivial kernel last compiled
_running: dict = {}  # pid -> Popen of the compilers this process is waiting for
_versions: dict = {}  # compiler command -> its --version output


def _compiler_version(cc: tuple, timeout: float) -> str:
    """The compiler's ``--version`` output (part of every cache key: all of it, since a
    wrapper may print a line of its own first), asked once per binary (the command
    resolved on ``PATH``, with its modification time: a ``PATH`` switched to another
    toolchain asks again)."""
    found = shutil.which(cc[0]) if cc else None
    key = (cc, found, os.stat(found).st_mtime_ns if found and os.path.exists(found) else None)
    if key not in _versions:
        try:
            r = _run_compiler([*cc, "--version"], min(timeout, 30.0))
        except OSError as e:
            raise BuildEnvironmentError(
                f"cannot run the C compiler {' '.join(cc)!r}: {e}"
            ) from None
        except subprocess.TimeoutExpired:
            raise BuildEnvironmentError(
                f"the C compiler {' '.join(cc)!r} did not answer --version within "
                f"{min(timeout, 30.0):g} s (the build's timeout: too short, or check $CC)"
            ) from None
        _versions[key] = r.stdout or ""
    return _versions[key]


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


def compile_source(source: str, flags, timeout: float = DEFAULT_TIMEOUT, cc=None) -> str:
    """Compile ``source`` to a shared object and return its path (cached, verified);
    ``cc``: the compiler command (default ``$CC``, else ``cc``).

    ``BuildError``: the compiler rejected this source or outlived ``timeout`` seconds
    (its whole process group is killed). ``BuildEnvironmentError``: the fault is not
    the source's -- the compiler is missing, cannot build even a trivial kernel with
    these flags, or wrote no object; or the cache directory is unusable.
    """
    timeout = check_timeout(timeout)
    cc = tuple(cc or compiler())
    version = _compiler_version(cc, timeout)
    flags = tuple(f for f in flags if f not in _GCC_ONLY or "clang" not in version)
    key = hashlib.sha256("\0".join([version, *cc, *flags, source]).encode())
    entry = Entry(key.hexdigest()[:32])
    so = entry.lookup()
    if so is not None:
        return so
    entry.write_source(source)
    tmp = entry.temp_object()
    try:
        rest = [entry.source, "-o", tmp, "-lm"]
        r = run_with_prelude(cc, version, flags, rest, timeout, _run_compiler, source)
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
        full = next((m for m in DISK_FULL if m in r.stderr), None)
        if full is not None:
            raise BuildEnvironmentError(
                f"the C compiler could not write its output into the build cache "
                f"{os.path.dirname(entry.source)}: {full}",
                stderr=r.stderr,
                source_path=entry.source,
            )
        _check_compiler_works(cc, flags, timeout, r.stderr, entry.source)
        if r.returncode < 0:  # a signal: the out-of-memory killer, a user
            raise CompilerKilled(
                f"the C compiler was killed by {_signal_name(-r.returncode)} (out of memory?)",
                stderr=r.stderr,
                source_path=entry.source,
            )
        raise BuildError(
            f"the C compiler failed (exit {r.returncode})",
            stderr=r.stderr,
            source_path=entry.source,
        )
    return entry.store(tmp)


# what a compiler or linker says when the disk, not the source, is at fault
DISK_FULL = ("No space left on device", "Disk quota exceeded", "Read-only file system")


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


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
            if r.returncode < 0:
                why = f"killed by {_signal_name(-r.returncode)}"
            elif r.returncode != 0:
                why = f"exit {r.returncode}"
            elif not os.path.exists(out) or os.path.getsize(out) == 0:
                why = "it reported success but wrote no object"
        except subprocess.TimeoutExpired:
            why = f"it timed out after {min(timeout, 60.0):g} s, the build's timeout: too short?"
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
    p = subprocess.Popen(  # its messages in any encoding (a localized gcc's Latin-1)
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
        start_new_session=True,
    )  # fmt: skip
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
    (for a worker that must end now: on SIGTERM, or when its parent is gone). A compiler
    started a moment before the signal, not yet registered, is found among this
    process's children (each compiler leads its own session)."""
    for pid in {*_running, *_children()}:
        _killpg(pid)


def _children() -> list:
    """This process's children that lead their own process group (Linux /proc)."""
    me, out = os.getpid(), []
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return out
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me and int(fields[2]) == pid:  # ppid, pgrp
            out.append(pid)
    return out


def build(
    sch,
    args=None,
    target="host",
    name: str = "default_function",
    emit_only: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    bound_checks: bool | None = None,
):
    """``pt.build(s, args, target, name)``: lower, generate C, compile, load.

    With ``emit_only=True`` the C source is returned as a string and nothing
    is compiled (the way to get code for a target other than this host).
    ``timeout``: seconds the C compiler may take; past it, the compiler and its
    children are killed and ``BuildError`` says so. ``bound_checks=True`` (or
    ``$PYPTO_BOUND_CHECKS=1``): every load and store checks its index at run time
    (``pypto.bound_checks``; slower, for debugging).
    """
    timeout = check_timeout(timeout)
    checks = bound_checks_wanted(bound_checks)
    tgt = as_target(target)
    if isinstance(sch, LoweredFunc):
        func = sch
    elif isinstance(sch, Schedule):
        if args is None:
            raise TypeError("build needs the argument tensors: pt.build(s, [A, B, C])")
        func = lower(sch, args, name=name)
    else:
        raise TypeError(f"build expects a Schedule or a lowered function, got {type(sch).__name__}")
    if checks:
        func = instrument_bound_checks(func)
    func = peel_for_alignment(func, tgt)
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
        prog = emulate.compile_program(source, driver, tgt, timeout)
        return EmulatedModule(func, source, cname, prog, tgt)
    so = compile_source(source, tgt.cflags, timeout)
    profiler = Profiler(describe(sch), compile_source) if isinstance(sch, Schedule) else None
    return Module(func, source, cname, so, tgt, profiler=profiler)


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
    if n > 1 and _forked_child:
        raise RuntimeError(
            "this process was fork()ed: OpenMP's thread pool does not survive fork, and a "
            "parallel loop with more than one thread would wait forever; start workers "
            'with multiprocessing.get_context("spawn") to use threads there'
        )
    lib = _gomp()
    if lib is not None:
        lib.omp_set_num_threads(int(n))


def get_num_threads() -> int:
    """The number of threads parallel loops use (OpenMP's ``omp_get_max_threads``:
    ``set_num_threads``, else ``OMP_NUM_THREADS``, else the cores; at most
    ``OMP_THREAD_LIMIT``, which caps the regions whatever the count asked; 1 without
    OpenMP)."""
    lib = _gomp()
    if lib is None:
        return 1
    return max(1, min(int(lib.omp_get_max_threads()), int(lib.omp_get_thread_limit())))


def _one_thread_after_fork() -> None:
    """A fork()ed child inherits libgomp's state but not its thread pool: its first
    parallel loop would wait forever for threads that do not exist. As PyTorch does for
    its own pool, a forked child runs parallel loops on one thread (``set_num_threads``
    refuses more there); workers started by "spawn" or "forkserver" keep every thread."""
    global _forked_child
    _forked_child = True
    lib = _gomp()
    if lib is not None:
        lib.omp_set_num_threads(1)


_forked_child = False
os.register_at_fork(after_in_child=_one_thread_after_fork)

# The CPUs this process may run on, read before OpenMP starts here: with OMP_PROC_BIND
# set, libgomp binds the thread that loads it to one of them.
_START_AFFINITY: frozenset[int] | None = (
    frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
)


def cpus_for_workers() -> frozenset[int] | None:
    """The CPUs a process started now should run on (None: as it inherits). Under
    ``OMP_PROC_BIND`` OpenMP has bound this thread to one CPU, which a child would
    inherit, and its own threads would all share: it gets the CPUs this process had when
    pypto was imported (``taskset`` narrows those too)."""
    lib = _gomp()
    if lib is None or _START_AFFINITY is None or not int(lib.omp_get_proc_bind()):
        return None
    return _START_AFFINITY
