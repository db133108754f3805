"""Safety of building and tuning (issue 15): a verified build cache, compiler timeouts,
environment faults kept apart from candidates' faults, fresh inputs per candidate,
records that cannot poison a log, cost models that cannot break the tuner, and
tuning processes that leave no orphans."""

import hashlib
import json
import math
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import uuid
import warnings

import numpy as np
import pytest
import safety_templates  # noqa: F401  (registers the test templates)
import tuning_templates  # noqa: F401

import autotune as at
import cost_models as cm
import pypto as pt
from pypto import runtime

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
FAST = at.MeasureOption(number=1, repeat=1, timeout=5, n_parallel=2)


def _kernel(name: str):
    """A small kernel whose C differs by ``name`` (so each test compiles afresh)."""
    A = pt.placeholder((8,), "float32", name="A")
    B = pt.compute((8,), lambda i: A[i] * 2.0 + 1.0, name=name)
    return pt.create_schedule(B.op), [A, B]


def _check_kernel(mod):
    a = np.arange(8, dtype=np.float32)
    b = np.empty(8, np.float32)
    mod(a, b)
    np.testing.assert_allclose(b, a * 2.0 + 1.0)


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(d))
    return d


# ---------------------------------------------------------------- the build cache


def test_cache_dir_is_created_private(private_cache):
    name = _unique("priv")
    _check_kernel(pt.build(*_kernel(name), name=name))
    assert stat.S_IMODE(os.stat(private_cache).st_mode) == 0o700
    objs = [p for p in private_cache.iterdir() if p.suffix == ".so"]
    assert objs and all(stat.S_IMODE(p.stat().st_mode) & 0o022 == 0 for p in objs)
    assert all((p.parent / (p.name + ".sha256")).exists() for p in objs)


def _foreign_library(tmp_path, marker) -> bytes:
    """A shared object whose constructor creates ``marker`` when it is loaded."""
    src = tmp_path / "foreign.c"
    src.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        f'  FILE* f = fopen("{marker}", "w"); if (f) fclose(f);\n'
        "}\n"
    )
    out = tmp_path / "foreign.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    return out.read_bytes()


def _cached_object(name):
    """Compile (but do not load) the kernel ``name``; the path of its cached object."""
    s, args = _kernel(name)
    src = pt.build(s, args, name=name, emit_only=True)
    return runtime.compile_source(src, pt.Target("host").cflags)


@pytest.mark.parametrize("forge", ["plain", "with_hash_group_writable", "with_hash_other_owner"])
def test_foreign_object_in_the_cache_is_never_loaded(private_cache, tmp_path, forge):
    if forge == "with_hash_other_owner" and os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    marker = tmp_path / "constructor_ran"
    foreign = _foreign_library(tmp_path, marker)
    name = _unique("foreign")
    so = _cached_object(name)
    with open(so, "wb") as f:
        f.write(foreign)
    if forge != "plain":  # the hash beside it matches the foreign object
        with open(so + ".sha256", "w") as f:
            f.write(hashlib.sha256(foreign).hexdigest())
        if forge == "with_hash_group_writable":
            os.chmod(so, 0o775)
        else:
            os.chown(so, 12345, -1)
    mod = pt.build(*_kernel(name), name=name)
    _check_kernel(mod)
    assert not marker.exists(), "the foreign object's constructor ran"
    assert open(mod.lib_path, "rb").read() != foreign


def test_empty_or_truncated_object_is_rebuilt(private_cache):
    for cut in (0, 100):
        name = _unique("trunc")
        so = _cached_object(name)
        with open(so, "r+b") as f:
            f.truncate(cut)
        _check_kernel(pt.build(*_kernel(name), name=name))  # was: OSError file too short


def _fake_cc(tmp_path, body: str) -> str:
    path = tmp_path / "fake-cc"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    "cc, match",
    [
        ("/nonexistent/cc", "cannot run the C compiler '/nonexistent/cc'"),
        ("/bin/false", "cannot build even a trivial kernel with these flags \\(exit 1\\)"),
        ("/bin/true", "reported success but wrote no object"),
    ],
)
def test_a_broken_compiler_is_an_environment_error(private_cache, monkeypatch, cc, match):
    name = _unique("envcc")
    monkeypatch.setenv("CC", cc)
    with pytest.raises(pt.BuildEnvironmentError, match=match):
        pt.build(*_kernel(name), name=name)
    monkeypatch.delenv("CC")
    _check_kernel(pt.build(*_kernel(name), name=name))  # nothing bad was cached


def test_a_source_the_compiler_rejects_is_not_an_environment_error(
    private_cache, tmp_path, monkeypatch
):
    cc = _fake_cc(
        tmp_path,
        """\
        for a in "$@"; do case "$a" in *.c) src="$a";; esac; done
        if grep -q reject_me "$src"; then echo "error: rejected" >&2; exit 1; fi
        exec cc "$@"
        """,
    )
    monkeypatch.setenv("CC", cc)
    with pytest.raises(pt.BuildError, match="the C compiler failed \\(exit 1\\)") as e:
        pt.build(*_kernel("reject_me"), name="reject_me")
    assert not isinstance(e.value, pt.BuildEnvironmentError) and "rejected" in e.value.stderr


def test_unusable_cache_dir_is_an_environment_error(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "file" / "cache"))
    with pytest.raises(pt.BuildEnvironmentError, match="cannot create the build cache directory"):
        pt.build(*_kernel("nocache"), name="nocache")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] in "ZX"
    except FileNotFoundError:
        return True


def test_build_timeout_kills_the_whole_compiler(private_cache, tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    cc = _fake_cc(
        tmp_path,
        f"""\
        for a in "$@"; do case "$a" in *.c) src="$a";; esac; done
        if grep -q hang_me "$src"; then sleep 120 & echo $! > {pidfile}; wait; fi
        exec cc "$@"
        """,
    )
    monkeypatch.setenv("CC", cc)
    t0 = time.monotonic()
    with pytest.raises(pt.BuildError, match="timed out after 1 s and was stopped") as e:
        pt.build(*_kernel("hang_me"), name="hang_me", timeout=1)
    assert time.monotonic() - t0 < 20 and not isinstance(e.value, pt.BuildEnvironmentError)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), "the compiler's child outlived the timeout"


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "5", True])
def test_build_timeout_is_validated(bad):
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        pt.build(*_kernel("t"), name="t", timeout=bad)
