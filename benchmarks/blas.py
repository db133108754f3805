"""numpy's BLAS in the benchmarks: its best kernel, and a record of which one ran.

Some machines set ``OPENBLAS_CORETYPE`` (and ``OPENBLAS_L2_SIZE``) because old
OpenBLAS builds crash or compute wrong results on their CPU; a current
numpy then runs an older core's kernels (on an AVX-512 Zen 5: Haswell's,
matmul 1024^3 at 119 GFLOP/s instead of 221). A benchmark compares against
numpy at its best, so the benchmark's own worker processes -- and only
they: never tests or CI -- run without both variables, and report the
kernel OpenBLAS picked (threadpoolctl, the ``bench`` extra).

This module imports nothing heavy: a script calls ``unforce()`` before it
imports numpy.
"""

from __future__ import annotations

import os

FORCING = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def free_env(env) -> dict:
    """A copy of ``env`` without the variables that force an OpenBLAS kernel."""
    return {k: v for k, v in env.items() if k not in FORCING}


def unforce() -> dict:
    """Remove the forcing variables from this process's environment (call it before
    numpy is imported); returns what was removed."""
    return {k: os.environ.pop(k) for k in FORCING if k in os.environ}


def _owner(path: str) -> str:
    """The package that ships a library: ``.../site-packages/numpy.libs/x.so`` -> numpy."""
    parts = os.path.normpath(path or "").split(os.sep)
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages"):
            return parts[i + 1].removesuffix(".libs")
    return os.path.basename(path or "?")


def info() -> list[dict]:
    """The BLAS libraries loaded in this process: the package that ships it, API,
    version, kernel (architecture), threads; ``[]`` when threadpoolctl is missing."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keep = ("internal_api", "version", "architecture", "num_threads")
    return [
        {"package": _owner(lib.get("filepath", "")), **{k: lib.get(k) for k in keep}}
        for lib in threadpool_info()
        if lib.get("user_api") == "blas"
    ]


def describe(libs: list[dict]) -> str:
    """One line: ``numpy's openblas 0.3.31 (SkylakeX kernels, 2 threads)``."""
    if not libs:
        return "BLAS kernel unknown (pip install threadpoolctl, or the 'bench' extra)"
    return "; ".join(
        f"{lib['package']}'s {lib['internal_api']} {lib['version']} "
        f"({lib.get('architecture') or '?'} kernels, {lib['num_threads']} threads)"
        for lib in libs
    )
