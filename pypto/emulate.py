"""Kernels for another architecture, run under user-mode emulation (qemu).

``pt.build(s, args, target="aarch64-neon")`` on an x86-64 machine that has the
cross compiler (``aarch64-linux-gnu-gcc``) compiles the kernel, with a small
driver, into a static program for the target. Each call of the module writes
the checked arguments to a file, runs the program under ``qemu-aarch64`` and
copies the written arrays back, so the code the target would run is checked
against a reference here. It is slow, and timing it would mean nothing:
``time_evaluator`` refuses.

    driver:  read sizes and arrays  ->  status = kernel(arrays..., sizes...)
             ->  write status and the arrays the kernel writes
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

from . import dtypes
from .cache import Entry, remove_file
from .errors import BuildError
from .loop_ir import LoweredFunc, output_flags
from .target import CACHE_LINE, Target, cross_compiler, missing_features

# the user-mode emulator of each architecture
QEMU = {"aarch64": ("qemu-aarch64", "qemu-aarch64-static"), "x86_64": ("qemu-x86_64",)}
# flags of a shared object that a static program does not take
_SO_ONLY = ("-shared", "-fPIC")
ALIGN = CACHE_LINE  # as the generated code aligns its buffers


def emulator(t: Target) -> str | None:
    """The qemu user-mode emulator on PATH for ``t``'s architecture, or None."""
    for name in QEMU.get(t.arch, ()):
        path = shutil.which(name)
        if path:
            return path
    return None


def why_not_runnable(t: Target) -> str | None:
    """None when this machine executes code for ``t``, natively or under qemu with the
    cross compiler; otherwise the reason, in words."""
    if t.can_run():
        return None
    if t.compiler_prefix is None:
        return f"this CPU lacks {', '.join(missing_features(t))} for {t.name}"
    if cross_compiler(t) is None:
        return f"no cross compiler {t.compiler_prefix} for {t.name}"
    if emulator(t) is None:
        return f"no qemu user-mode emulator for {t.arch}"
    return None


def driver_source(func: LoweredFunc, cname: str) -> str:
    """A C program that runs ``cname`` on arguments read from a file (see the module doc)."""
    npar, nsz, nsc = len(func.params), len(func.size_vars), len(func.scalar_vars)
    ctypes_ = [dtypes.dtype(v.dtype).c_storage for v in func.scalar_vars]  # float or double
    decl = ", ".join(["void*"] * npar + ["int64_t"] * nsz + ctypes_)
    call = ", ".join([f"buf[{i}]" for i in range(npar)] + [f"sizes[{i}]" for i in range(nsz)]
                     + [f"({t})scal[{i}]" for i, t in enumerate(ctypes_)])  # fmt: skip
    written = [i for i, w in enumerate(output_flags(func)) if w]
    return "\n".join(
        [
            "#include <stdint.h>",
            "#include <stdio.h>",
            "#include <stdlib.h>",
            f"int32_t {cname}({decl});",
            "static int get(FILE* f, void* p, size_t n) { return fread(p, 1, n, f) == n; }",
            "int main(int argc, char** argv) {",
            "  if (argc != 3) return 2;",
            '  FILE* f = fopen(argv[1], "rb");',
            "  if (!f) return 3;",
            f"  int64_t nbytes[{npar}], sizes[{nsz + 1}];",
            f"  void* buf[{npar}];",
            "  if (!get(f, nbytes, sizeof nbytes)) return 4;",
            f"  if (!get(f, sizes, {nsz} * sizeof(int64_t))) return 4;",
            f"  double scal[{nsc + 1}];",
            f"  if (!get(f, scal, {nsc} * sizeof(double))) return 4;",
            f"  for (int i = 0; i < {npar}; ++i) {{",
            f"    size_t n = ((size_t)nbytes[i] + {ALIGN - 1}) / {ALIGN} * {ALIGN};",
            f"    buf[i] = aligned_alloc({ALIGN}, n ? n : {ALIGN});",
            "    if (!buf[i] || !get(f, buf[i], (size_t)nbytes[i])) return 5;",
            "  }",
            "  fclose(f);",
            f"  int32_t status = {cname}({call});",
            '  FILE* o = fopen(argv[2], "wb");',
            "  if (!o) return 6;",
            "  fwrite(&status, sizeof status, 1, o);",
            *[f"  fwrite(buf[{i}], 1, (size_t)nbytes[{i}], o);" for i in written],
            "  return fclose(o) ? 7 : 0;",
            "}",
            "",
        ]
    )


def compile_program(source: str, driver: str, target: Target, timeout: float) -> str:
    """The static program of ``source`` + ``driver`` for ``target``, cached and verified
    as the build cache's objects are (``pypto.cache``)."""
    cc = cross_compiler(target) or _missing_compiler(target)
    flags = [f for f in target.cflags if f not in _SO_ONLY]
    key = hashlib.sha256("\0".join([cc, *flags, source, driver]).encode()).hexdigest()[:32]
    entry = Entry(f"{key}-{target.name}")
    prog = entry.lookup()
    if prog is not None:
        return prog
    entry.write_source(source)
    tmp = entry.temp_object()
    with tempfile.TemporaryDirectory(dir=os.path.dirname(tmp)) as d:
        dc = os.path.join(d, "driver.c")
        with open(dc, "w") as f:
            f.write(driver)
        cmd = [cc, *flags, "-static", entry.source, dc, "-o", tmp, "-lm"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            remove_file(tmp)
            raise BuildError(f"the cross compiler timed out after {timeout:g} s") from None
    if r.returncode != 0:
        remove_file(tmp)
        raise BuildError(
            f"the cross compiler failed (exit {r.returncode})",
            stderr=r.stderr,
            source_path=entry.source,
        )
    return entry.store(tmp)


def _missing_compiler(target: Target):
    raise BuildError(
        f"target {target.name} cannot run on this machine and its cross compiler "
        f"{target.compiler_prefix} is not on PATH; install it (Debian: "
        f"gcc-{target.arch}-linux-gnu) or use pt.build(..., emit_only=True) for the C source"
    )


def run_program(
    prog: str, target: Target, arrays: list, sizes: list, written: list, scalars=()
) -> int:
    """Run ``prog`` under qemu on ``arrays`` (copying back the written ones) with the size
    and scalar arguments; its status."""
    qemu = emulator(target)
    if qemu is None:
        raise RuntimeError(
            f"code for {target.name} needs the qemu user-mode emulator "
            f"({QEMU.get(target.arch, ('qemu',))[0]}) to run here; install qemu-user"
        )
    with tempfile.TemporaryDirectory(prefix="pypto-emu-") as tmp:
        inp, outp = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        with open(inp, "wb") as f:
            f.write(np.array([a.nbytes for a in arrays], np.int64).tobytes())
            f.write(np.array(sizes, np.int64).tobytes())
            f.write(np.array(scalars, np.float64).tobytes())
            for a in arrays:
                f.write(a.tobytes())
        r = subprocess.run([qemu, prog, inp, outp], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(
                f"the kernel's program under {os.path.basename(qemu)} failed "
                f"(exit {r.returncode}): {r.stderr.strip()[:500]}"
            )
        with open(outp, "rb") as f:
            status = int(np.frombuffer(f.read(4), np.int32)[0])
            for a, w in zip(arrays, written):
                if w:
                    a[...] = np.frombuffer(f.read(a.nbytes), a.dtype).reshape(a.shape)
    return status
