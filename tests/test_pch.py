"""The precompiled prelude (``pypto/pch.py``): built once per compiler and flags into
the build cache, the same object as a compile without it, and never the reason a
build fails (one that does not build is left out; a damaged one is removed)."""

from __future__ import annotations

import ctypes
import glob
import os
import platform

import numpy as np
import pytest

import pypto as pt
from pypto import pch, runtime

VERSION = runtime._compiler_version(tuple(runtime.compiler()), 60)
needs_gcc = pytest.mark.skipif(
    "Free Software Foundation" not in VERSION
    or "clang" in VERSION
    or platform.machine() not in ("x86_64", "AMD64"),
    reason="the prelude is precompiled by gcc, for sources with x86 intrinsics",
)


def _source(factor: float, intrinsics: bool = True) -> str:
    """A kernel's C, including ``immintrin.h`` as a micro-kernel's does."""
    A = pt.placeholder((37,), "float32", name="A")
    B = pt.compute((37,), lambda i: A[i] * factor, name="B")
    src = pt.build(pt.create_schedule(B.op), [A, B], emit_only=True)
    return "#include <immintrin.h>\n" + src if intrinsics else src


def _call(so: str) -> np.ndarray:
    lib = ctypes.CDLL(so)
    a, b = np.arange(37, dtype=np.float32), np.zeros(37, np.float32)
    fn = lib.default_function
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int32
    assert fn(a.ctypes.data, b.ctypes.data) == 0
    return b


def _gch(cache: str) -> list:
    return glob.glob(os.path.join(cache, "pch", "*", "pt_prelude.h.gch"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(pch, "_failed", set())
    return str(tmp_path / "cache")


@needs_gcc
def test_built_once_and_the_object_is_the_same_as_without(cache, tmp_path, monkeypatch):
    flags = pt.Target("host").cflags
    so = runtime.compile_source(_source(2.0), flags)
    (gch,) = _gch(cache)
    built = os.stat(gch).st_mtime_ns
    assert runtime.compile_source(_source(3.0), flags) != so
    assert os.stat(gch).st_mtime_ns == built  # the second compile used it as it was
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "plain"))
    monkeypatch.setenv("PYPTO_PCH", "0")
    plain = runtime.compile_source(_source(2.0), flags)
    assert not _gch(str(tmp_path / "plain"))
    with open(so, "rb") as f, open(plain, "rb") as g:
        assert f.read() == g.read()
    np.testing.assert_array_equal(_call(so), np.arange(37, dtype=np.float32) * 2)


@needs_gcc
def test_a_prelude_that_does_not_build_is_left_out(cache, monkeypatch):
    monkeypatch.setattr(pch, "PRELUDE", "#error this prelude does not compile\n")
    so = runtime.compile_source(_source(5.0), pt.Target("host").cflags)
    np.testing.assert_array_equal(_call(so), np.arange(37, dtype=np.float32) * 5)
    assert not _gch(cache) and len(pch._failed) == 1


@needs_gcc
def test_a_damaged_prelude_is_removed_and_the_source_still_builds(cache):
    flags = pt.Target("host").cflags
    runtime.compile_source(_source(2.0), flags)
    (gch,) = _gch(cache)
    with open(gch, "r+b") as f:  # cut short: gcc stops on it ("cannot read PCH file")
        f.truncate(100_000)
    so = runtime.compile_source(_source(7.0), flags)
    np.testing.assert_array_equal(_call(so), np.arange(37, dtype=np.float32) * 7)
    assert not os.path.exists(gch)  # removed; the next compile builds it again
    runtime.compile_source(_source(8.0), flags)
    assert os.path.getsize(gch) > 100_000


@needs_gcc
def test_a_source_without_intrinsics_compiles_as_it_is(cache):
    so = runtime.compile_source(_source(4.0, intrinsics=False), pt.Target("host").cflags)
    np.testing.assert_array_equal(_call(so), np.arange(37, dtype=np.float32) * 4)
    assert not os.path.exists(os.path.join(cache, "pch"))


def test_other_compilers_and_the_switch_take_no_prelude(cache, monkeypatch):
    def run(cmd, timeout):
        raise AssertionError(f"nothing is compiled: {cmd}")

    flags = ("-O2",)
    assert pch.prelude_args(("clang",), "clang version 17.0.6", flags, 60, run) == []
    monkeypatch.setenv("PYPTO_PCH", "0")
    gcc = "gcc (GCC) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc."
    assert pch.prelude_args(("gcc",), gcc, flags, 60, run) == []
