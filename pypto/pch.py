"""The precompiled prelude: the system headers generated C includes, parsed once.

Every generated source includes ``stdint.h``, ``stdio.h``, ``stdlib.h``, ``math.h``
and ``omp.h``, and a kernel written with x86 intrinsics (a micro-kernel, a dot
kernel) ``immintrin.h`` too, whose parsing is most of such a kernel's compile (0.55
of 0.8 s with gcc 12 on a Zen 3). gcc compiles them once per compiler and flags into
``<cache>/pch/<key>/pt_prelude.h.gch``, and each compile of a source including
``immintrin.h`` takes them from there::

    cc -O3 -march=x86-64-v3 ... kernel.c -o kernel.so                          0.8 s
    cc -O3 -march=x86-64-v3 ... -include <cache>/pch/<key>/pt_prelude.h ...    0.24 s

A source without it compiles as it is: the other headers take 0.08 s, and loading
the 26 MB prelude would cost more (0.27-0.33 s -> 0.29-0.38 s for a small matmul).

The object is the same either way (the prelude only declares). gcc uses the
``.gch`` only where it was built with matching options, and otherwise reads the
header's text, so a stale one costs time, never correctness (a damaged one, which
gcc stops on, is removed and the source compiled without it). Without gcc (clang),
where the prelude cannot be built, or with ``PYPTO_PCH=0``, sources compile as
they are.
"""

from __future__ import annotations

import hashlib
import os
import subprocess

from .cache import atomic_write, cache_dir, own_dir, remove_file
from .errors import BuildEnvironmentError

PRELUDE = """/* pypto's precompiled prelude: the headers generated C includes */
#if defined(__STRICT_ANSI__) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200112L  /* posix_memalign under -std=c99 */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
"""

_failed: set = set()  # the keys whose prelude did not build in this process


def prelude_args(cc: tuple, version: str, flags: tuple, timeout: float, run) -> list:
    """``["-include", header]`` for a compile by ``cc`` (``version``: its
    ``--version``) with ``flags``, the header's ``.gch`` built on first use by
    ``run(cmd, timeout)`` (a ``subprocess.CompletedProcess``); ``[]`` where there is none."""
    gcc = "Free Software Foundation" in version and "clang" not in version
    if not gcc or os.environ.get("PYPTO_PCH") == "0":
        return []
    cflags = tuple(f for f in flags if f != "-shared")
    key = hashlib.sha256("\0".join([version, *cc, *cflags, PRELUDE]).encode()).hexdigest()[:24]
    if key in _failed:
        return []
    try:
        d = own_dir(os.path.join(cache_dir(), "pch", key), "the precompiled prelude directory")
        header = os.path.join(d, "pt_prelude.h")
        if not os.path.exists(header + ".gch"):
            _build(cc, cflags, header, timeout, run)
    except (OSError, subprocess.SubprocessError, BuildEnvironmentError):
        _failed.add(key)
        return []
    return ["-include", header]


def wanted(source: str) -> bool:
    """Whether compiling ``source`` gains from the prelude: it includes ``immintrin.h``."""
    return "#include <immintrin.h>" in source


def run_with_prelude(
    cc: tuple, version: str, flags: tuple, rest: list, timeout: float, run, source: str
):
    """``run([*cc, *flags, *prelude, *rest], timeout)``, the prelude where ``source``
    wants it; where that fails, once more without the prelude, and a prelude the retry
    shows at fault (a damaged ``.gch``: gcc stops on one it cannot read) is removed, to
    be built again by the next compile."""
    prelude = prelude_args(cc, version, flags, timeout, run) if wanted(source) else []
    r = run([*cc, *flags, *prelude, *rest], timeout)
    if r.returncode == 0 or not prelude:
        return r
    again = run([*cc, *flags, *rest], timeout)
    if again.returncode == 0:
        remove_file(prelude[1] + ".gch")
    return again


def _build(cc: tuple, cflags: tuple, header: str, timeout: float, run) -> None:
    """Write the prelude to ``header`` and compile it beside it, through a temporary
    file and a rename (a process killed midway leaves no partial ``.gch``)."""
    atomic_write(header, PRELUDE.encode())
    tmp = f"{header}.gch.{os.getpid()}.tmp"
    try:
        r = run([*cc, *cflags, "-x", "c-header", header, "-o", tmp], timeout)
        if r.returncode != 0:
            raise OSError(f"the prelude did not compile: {r.stderr[-500:]}")
        os.replace(tmp, header + ".gch")
    finally:
        remove_file(tmp)
