"""Building and calling kernels: argument checks, names, the compile cache, targets."""

import os
import pickle
import platform
import re
import subprocess
import sys

import numpy as np
import pytest

import pypto as pt
from pypto import emulate, runtime
from pypto.target import KNOWN, cross_compiler


def _add_one(n=None, name="B", in_name="A", dtype="float32"):
    n = n if n is not None else pt.var("n")
    A = pt.placeholder((n, 4), dtype, name=in_name)
    B = pt.compute((n, 4), lambda i, j: A[i, j] + 1, name=name)
    s = pt.create_schedule(B.op)
    return s, A, B


@pytest.fixture(scope="module")
def add_one():
    s, A, B = _add_one()
    return pt.build(s, [A, B], name="add_one")


def test_runs_on_several_sizes(add_one):
    for n in (1, 5, 64):
        a = np.random.rand(n, 4).astype(np.float32)
        b = np.empty_like(a)
        add_one(a, b)
        np.testing.assert_allclose(b, a + 1)


def test_wrong_argument_count(add_one):
    a = np.zeros((3, 4), np.float32)
    msg = r"add_one takes 2 arguments \(A, B\), or 1 without the outputs \(B\); got 3"
    with pytest.raises(TypeError, match=msg):
        add_one(a, a, a)


def test_an_output_with_no_elements_may_be_omitted_too():
    """An output of constant shape (0, 4) has no loops left, yet is still an output."""
    A = pt.placeholder((0, 4), name="A")
    C = pt.compute((0, 4), lambda i, j: A[i, j] + 1, name="C")
    mod = pt.build(pt.create_schedule(C.op), [A, C], name="empty")
    c = mod(np.zeros((0, 4), np.float32))
    assert c.shape == (0, 4) and c.dtype == np.float32
    msg = r"empty takes 2 arguments \(A, C\), or 1 without the outputs \(C\); got 3"
    with pytest.raises(TypeError, match=msg):
        mod(c, c, c)


def test_wrong_dtype_names_argument(add_one):
    a = np.zeros((3, 4), np.float64)
    with pytest.raises(TypeError, match="argument A: dtype float64, expected float32"):
        add_one(a, np.zeros((3, 4), np.float32))


def test_wrong_ndim(add_one):
    with pytest.raises(ValueError, match=r"argument A: 1 dimension\(s\), expected 2"):
        add_one(np.zeros(3, np.float32), np.zeros((3, 4), np.float32))


def test_wrong_constant_dimension(add_one):
    with pytest.raises(ValueError, match="argument B: dimension 1 is 5, expected 4"):
        add_one(np.zeros((3, 4), np.float32), np.zeros((3, 5), np.float32))


def test_symbolic_extent_disagrees(add_one):
    with pytest.raises(ValueError, match="argument B: dimension 0 is 2, but n = 3 from argument A"):
        add_one(np.zeros((3, 4), np.float32), np.zeros((2, 4), np.float32))


def test_sizes_that_make_a_dimension_negative_are_named():
    """``n - 2`` with ``n = 1``: said so, whether the output is passed or allocated (an
    allocated one was made empty, then reported as 'dimension 0 is 0, expected -1')."""
    n = pt.var("n")
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n - 2,), lambda i: A[i] + A[i + 2], name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B], name="pairs")
    msg = r"argument B: dimension 0 \(n - 2\) would be -1 with n = 1 \(from argument A\)"
    for outs in ([], [np.zeros(0, np.float32)]):
        with pytest.raises(ValueError, match=msg):
            mod(np.ones(1, np.float32), *outs)
    np.testing.assert_array_equal(mod(np.arange(5, dtype=np.float32)), [2, 4, 6])


def test_non_contiguous(add_one):
    a = np.zeros((4, 8), np.float32)[:, ::2]
    with pytest.raises(ValueError, match="argument A is not C-contiguous"):
        add_one(a, np.zeros((4, 4), np.float32))


def test_read_only_output(add_one):
    b = np.zeros((3, 4), np.float32)
    b.flags.writeable = False
    with pytest.raises(ValueError, match="argument B is written but the array is read-only"):
        add_one(np.zeros((3, 4), np.float32), b)


def test_output_aliasing_input(add_one):
    a = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match="arguments A and B overlap in memory"):
        add_one(a, a)


def test_a_shape_seen_before_still_checks_each_call_s_arrays():
    """Calls repeat only the checks of their arrays once their shapes were checked: a
    non-contiguous, read-only, overlapping or differently typed array of a shape that
    passed before is still refused."""
    s, A, B = _add_one()
    mod = pt.build(s, [A, B], name="add_one_seen")
    a, b = np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32)
    mod(a, b)  # (4, 4) and (4, 4): checked
    np.testing.assert_array_equal(b, a + 1)
    with pytest.raises(ValueError, match="argument A is not C-contiguous"):
        mod(np.zeros((4, 8), np.float32)[:, ::2], b)
    ro = np.zeros((4, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="argument B is written but the array is read-only"):
        mod(a, ro)
    with pytest.raises(ValueError, match="arguments A and B overlap in memory"):
        mod(a, a)
    buf = np.zeros(20, np.float32)  # contiguous views sharing 12 elements
    with pytest.raises(ValueError, match="arguments A and B overlap in memory"):
        mod(buf[:16].reshape(4, 4), buf[4:].reshape(4, 4))
    with pytest.raises(TypeError, match="argument A: dtype float64, expected float32"):
        mod(np.zeros((4, 4), np.float64), b)
    with pytest.raises(ValueError, match="dimension 0 is 3, but n = 4 from argument A"):
        mod(a, np.zeros((3, 4), np.float32))


def test_a_repeat_call_of_checked_shapes_takes_the_short_path(monkeypatch):
    """A call like one checked before skips the full checks (2.5 us a call, not 7),
    and computes the same."""
    s, A, B = _add_one()
    mod = pt.build(s, [A, B], name="add_one_again")
    a, b = np.arange(16, dtype=np.float32).reshape(4, 4), np.zeros((4, 4), np.float32)
    mod(a, b)
    full, checks = [], type(mod)._prepare
    monkeypatch.setattr(type(mod), "_prepare", lambda m, args: full.append(1) or checks(m, args))
    b2 = np.zeros((4, 4), np.float32)
    mod(a + 1, b2)
    assert full == [] and np.array_equal(b2, a + 2)
    mod(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32))  # empty: the full checks
    assert full == [1]


def test_not_an_array(add_one):
    with pytest.raises(TypeError, match="argument A: expected a numpy array, got list"):
        add_one([[0.0] * 4], np.zeros((1, 4), np.float32))


def test_unused_placeholder_argument_is_passed_and_checked():
    """As TVM: an input no stage reads may be among the arguments (a template's bias it
    does not use); it is checked like any other, and binds its own sizes."""
    s, A, B = _add_one()
    m = pt.var("m")
    Z = pt.placeholder((m, 2), "float32", name="Z")
    mod = pt.build(s, [A, Z, B])
    a = np.random.rand(3, 4).astype(np.float32)
    np.testing.assert_allclose(mod(a, np.zeros((5, 2), np.float32)), a + 1)
    with pytest.raises(TypeError, match="argument Z: dtype float64, expected float32"):
        mod(a, np.zeros((5, 2)))
    with pytest.raises(pt.ScheduleError, match="argument Z is passed twice"):
        pt.build(s, [A, Z, Z, B])
    other = pt.compute((4,), lambda i: Z[i, 0], name="other")
    with pytest.raises(pt.ScheduleError, match="argument other is not part of this schedule"):
        pt.build(s, [A, other, B])


def test_dlpack_objects(add_one):
    class Wrapped:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, *args, **kw):
            return self.arr.__dlpack__(*args, **kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    a = np.random.rand(3, 4).astype(np.float32)
    b = np.zeros((3, 4), np.float32)
    add_one(Wrapped(a), Wrapped(b))
    np.testing.assert_allclose(b, a + 1)


def test_hostile_names_are_sanitized(tmp_path):
    marker = tmp_path / "pwned"
    evil = f'A"); system("touch {marker}"); ("'
    s, A, B = _add_one(n=3, name="int", in_name=evil)
    mod = pt.build(s, [A, B], name='f"); system("id')
    assert "system(" not in mod.source
    a = np.random.rand(3, 4).astype(np.float32)
    b = np.empty_like(a)
    mod(a, b)
    np.testing.assert_allclose(b, a + 1)
    assert not marker.exists()


def test_same_names_get_distinct_identifiers():
    A = pt.placeholder((4,), "float32", name="x")
    B = pt.placeholder((4,), "float32", name="x")
    C = pt.compute((4,), lambda i: A[i] - B[i], name="x")
    mod = pt.build(pt.create_schedule(C.op), [A, B, C], name="x")
    a, b, c = np.arange(4, dtype=np.float32), np.ones(4, np.float32), np.empty(4, np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a - b)


def test_build_error_carries_stderr_and_source(monkeypatch):
    monkeypatch.setenv("CC", "cc -include /nonexistent/pypto_missing.h")
    s, A, B = _add_one(n=2)
    with pytest.raises(pt.BuildError) as exc:
        pt.build(s, [A, B], name="broken")
    err = exc.value
    assert "pypto_missing.h" in err.stderr
    assert err.source_path and os.path.exists(err.source_path)
    assert "int32_t broken(" in open(err.source_path).read()


def test_second_build_costs_no_compiler_run(monkeypatch):
    s, A, B = _add_one(n=6, name="cached")
    pt.build(s, [A, B], name="cached")
    calls = []

    def no_compiler(*a, **kw):
        calls.append(a)
        raise AssertionError("the compiler ran again")

    monkeypatch.setattr(runtime, "_run_compiler", no_compiler)
    s, A, B = _add_one(n=6, name="cached")
    mod = pt.build(s, [A, B], name="cached")
    a = np.ones((6, 4), np.float32)
    b = np.empty_like(a)
    mod(a, b)
    assert calls == [] and (b == 2).all()


@pytest.mark.parametrize("target", sorted(KNOWN))
def test_emit_only_for_every_target(target):
    s, A, B = _add_one()
    src = pt.build(s, [A, B], target=target, name="k", emit_only=True)
    assert isinstance(src, str) and "int32_t k(const float* restrict A" in src


def test_target_missing_cpu_features_refuses_to_run():
    if platform.machine() != "x86_64":
        pytest.skip("an x86-64 target with a feature no CPU has")
    t = pt.Target("x86-avx2", features=("avx2", "fma", "no_such_feature"))
    assert not t.can_run()
    s, A, B = _add_one()
    with pytest.raises(pt.BuildError, match="cannot run on this machine .*no_such_feature"):
        pt.build(s, [A, B], target=t)
    assert "int32_t k(" in pt.build(s, [A, B], target=t, name="k", emit_only=True)


def test_foreign_architecture_without_cross_compiler(monkeypatch, tmp_path):
    if platform.machine() == "aarch64":
        pytest.skip("this host is aarch64")
    monkeypatch.setenv("PATH", str(tmp_path))  # no aarch64-linux-gnu-gcc on it
    s, A, B = _add_one()
    with pytest.raises(pt.BuildError, match="aarch64-linux-gnu-gcc is not on PATH"):
        pt.build(s, [A, B], target="aarch64-neon")


def test_foreign_architecture_runs_under_qemu():
    t = pt.Target("aarch64-neon")
    if t.can_run():
        pytest.skip("this host runs aarch64 natively")
    if cross_compiler(t) is None or emulate.emulator(t) is None:
        pytest.skip("no aarch64-linux-gnu-gcc or qemu-aarch64 here")
    s, A, B = _add_one()
    mod = pt.build(s, [A, B], target=t, name="k")
    a = np.random.rand(6, 4).astype(np.float32)
    b = np.full_like(a, np.nan)
    mod(a, b)
    np.testing.assert_allclose(b, a + 1)
    with pytest.raises(TypeError, match="dtype float64, expected float32"):
        mod(a.astype(np.float64), b)
    with pytest.raises(RuntimeError, match="runs under emulation"):
        mod.time_evaluator()(a, b)


def test_host_target_detection():
    t = pt.Target("host")
    assert t.name in KNOWN and t.is_host and t.can_run()
    assert t.vector_bits == KNOWN[t.name].vector_bits
    assert t.cores >= 1 and t.l1d_bytes > 0
    assert set(t.cache_sizes) == {"L1", "L2", "L3"} and t.cache_sizes["L1"] == t.l1d_bytes
    with pytest.raises(ValueError, match="unknown target 'riscv'"):
        pt.Target("riscv")


@pytest.mark.parametrize(
    "name, f32, f64, i8, regs",
    [
        ("x86-avx512", 16, 8, 64, 32),
        ("x86-avx2", 8, 4, 32, 16),
        ("aarch64-neon", 4, 2, 16, 32),
        ("generic", 4, 2, 16, 16),
    ],
)
def test_named_targets_have_fixed_parameters(name, f32, f64, i8, regs):
    t = pt.Target(name)
    assert (t.vector_lanes("float32"), t.vector_lanes("float64"), t.vector_lanes("int8")) == (
        f32,
        f64,
        i8,
    )
    assert t.vector_lanes("float16") == t.vector_lanes("bfloat16") == f32  # computed in float32
    assert t.vector_registers == regs and not t.is_host
    assert t == pt.Target(name)  # the same on any host
    assert t.cache_sizes == dict(zip(("L1", "L2", "L3"), KNOWN[name].caches))


def test_pypto_target_overrides_the_host(monkeypatch):
    monkeypatch.setenv("PYPTO_TARGET", "generic")
    t = pt.Target("host")
    assert t.name == "generic" and t.is_host and t.can_run()
    assert t.vector_lanes("float32") == 4
    monkeypatch.setenv("PYPTO_TARGET", "sparc")
    with pytest.raises(ValueError, match="PYPTO_TARGET='sparc' is not a known target"):
        pt.Target("host")


def test_pypto_target_of_another_architecture_runs_its_code_there(monkeypatch):
    """``PYPTO_TARGET=aarch64-neon`` on x86: the host is that target, of its own
    architecture (it had taken this machine's, and ran aarch64 code under qemu-x86_64)."""
    from pypto import emulate

    monkeypatch.setenv("PYPTO_TARGET", "aarch64-neon")
    t = pt.Target("host")
    assert t.name == "aarch64-neon" and t.arch == "aarch64" and t.is_host
    if platform.machine() == "aarch64":
        pytest.skip("this machine is an aarch64 one")
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    A = pt.placeholder((8,), "float32", name="A")
    B = pt.compute((8,), lambda i: A[i] * 2, name="B")
    a = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(pt.build(pt.create_schedule(B.op), [A, B])(a), a * 2)


@pytest.mark.parametrize(
    "name, got", [(None, "None"), (3, "3"), (pt.Target("generic"), r"a Target \(use it as it is\)")]
)
def test_a_target_is_named_by_a_string(name, got):
    with pytest.raises(TypeError, match=f"a target is named by a string such as 'host', got {got}"):
        pt.Target(name)


def test_time_evaluator(add_one):
    a = np.random.rand(100, 4).astype(np.float32)
    b = np.empty_like(a)
    res = add_one.time_evaluator(number=3, repeat=4)(a, b)
    assert len(res.results) == 4 and all(t > 0 for t in res.results)
    assert res.median > 0 and res.mean > 0
    res = add_one.time_evaluator(number=1, repeat=2, min_repeat_ms=5)(a, b)
    assert len(res.results) == 2
    np.testing.assert_allclose(b, a + 1)
    for kw, message in [
        ({"number": 1.5}, "number must be an integer of at least 1, got 1.5"),
        ({"repeat": True}, "repeat must be an integer of at least 1, got True"),
        ({"min_repeat_ms": float("nan")}, "min_repeat_ms must be a finite"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            add_one.time_evaluator(**kw)


def test_unusable_build_arguments_are_named(add_one, tmp_path, monkeypatch):
    A = pt.placeholder((4,), "float32", name="A")
    B = pt.compute((4,), lambda i: A[i] + 1, name="B")
    with pytest.raises(TypeError, match="the kernel's name must be a string, got 5"):
        pt.build(pt.create_schedule(B.op), [A, B], name=5)
    with pytest.raises(IsADirectoryError, match=f"{tmp_path} is a directory; give a file name"):
        add_one.export_library(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("CC", 'gcc -DX="')
    with pytest.raises(pt.BuildEnvironmentError, match=r"\$CC is not a valid command line"):
        pt.build(pt.create_schedule(B.op), [A, B], name="unbalanced_cc")


def test_a_failed_export_leaves_the_previous_one_whole(add_one, tmp_path, monkeypatch):
    """The object is renamed into place before the signature file: when the second
    rename fails (a file the user may not replace), the first is put back."""
    path = str(tmp_path / "k.so")
    add_one.export_library(path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    A = pt.placeholder((4,), "float32", name="A")
    B = pt.compute((4,), lambda i: A[i] * 2, name="B")
    double = pt.build(pt.create_schedule(B.op), [A, B], name="double")
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith(".json"):
            raise PermissionError(1, "Operation not permitted", dst)
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(PermissionError):
        double.export_library(path)
    monkeypatch.setattr(os, "replace", real)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.empty_like(a)
    pt.load_module(path)(a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_num_threads_setting_keeps_results():
    n = 64
    A = pt.placeholder((n, n), "float32", name="A")
    B = pt.compute((n, n), lambda i, j: A[i, j] * 3, name="B")
    s = pt.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    mod = pt.build(s, [A, B])
    a = np.random.rand(n, n).astype(np.float32)
    for t in (1, 2):
        pt.set_num_threads(t)
        b = np.empty_like(a)
        mod(a, b)
        np.testing.assert_allclose(b, a * 3)
    with pytest.raises(ValueError):
        pt.set_num_threads(0)


def _vector_kernel():
    n = 1024
    A = pt.placeholder((n, n), "float32", name="A")
    B = pt.placeholder((n, n), "float32", name="B")
    C = pt.compute((n, n), lambda i, j: A[i, j] * B[i, j] + A[i, j], name="C")
    s = pt.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    s[C].vectorize(ji)
    return pt.build(s, [A, B, C], name="vec_fma")


def test_vectorize_is_honoured_by_the_compiler(tmp_path):
    """The compiler's own report says the loop marked vectorized was vectorized."""
    mod = _vector_kernel()
    lines = mod.source.splitlines()
    simd = [i for i, line in enumerate(lines, 1) if "#pragma omp simd" in line]
    assert simd, "no SIMD loop emitted"
    loop_line = simd[0] + 1
    src = tmp_path / "k.c"
    src.write_text(mod.source)
    flags = [f for f in mod.target.cflags if f != "-shared"]
    r = subprocess.run(
        [
            *runtime.compiler(),
            *flags,
            "-c",
            str(src),
            "-o",
            str(tmp_path / "k.o"),
            "-fopt-info-vec-optimized",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    # gcc reports the loop header or the statement in its body
    reported = {int(m) for m in re.findall(r"k\.c:(\d+):\d+: optimized: loop vectorized", r.stderr)}
    assert reported & {loop_line, loop_line + 1}, r.stderr


def test_vectorized_object_uses_simd_instructions():
    """The loaded object holds packed single-precision vector arithmetic."""
    mod = _vector_kernel()
    r = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", mod.lib_path], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip("objdump is not available")
    bits = mod.target.vector_bits
    reg = {512: "zmm", 256: "ymm", 128: "xmm"}[bits] if mod.target.arch == "x86_64" else "v"
    packed = [
        line
        for line in r.stdout.splitlines()
        if re.search(r"\bv?(fmadd\w*ps|mulps|addps)\b", line) and reg in line
    ]
    assert packed, f"no packed {reg} arithmetic in {mod.lib_path}"


def test_a_masked_array_is_refused():
    A = pt.placeholder((4,), "float32", name="A")
    B = pt.compute((4,), lambda i: A[i] * 2, name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    masked = np.ma.masked_array(np.ones(4, np.float32), mask=[0, 1, 0, 0])
    with pytest.raises(TypeError, match="argument A: a masked array .* x.filled"):
        mod(masked)


_FORK = """
import multiprocessing as mp
import numpy as np
import pypto as pt

n = 256
A = pt.placeholder((n, n), "float32", name="A")
B = pt.compute((n, n), lambda i, j: A[i, j] * 3, name="B")
s = pt.create_schedule(B.op)
s[B].parallel(B.op.axis[0])
mod = pt.build(s, [A, B])
pt.set_num_threads(2)
a = np.random.rand(n, n).astype(np.float32)
mod(a)  # the parent's thread pool exists from here

def child(q):
    ok = bool(np.allclose(mod(a), a * 3))
    try:
        pt.set_num_threads(2)  # would hang the next parallel loop: refused
        ok = False
    except RuntimeError as e:
        ok = ok and "was fork()ed" in str(e)
    q.put(ok)

q = mp.get_context("fork").Queue()
p = mp.get_context("fork").Process(target=child, args=(q,))
p.start()
p.join(60)
assert p.exitcode == 0, "the child hung or failed"
assert q.get(timeout=5)
print("ok")
"""


def test_a_forked_child_runs_parallel_kernels():
    """Was: once the parent had run a parallel loop, a fork()ed child's first one waited
    forever (libgomp's pool does not survive fork); the child now runs them on one
    thread, as PyTorch's own pool does, and refuses more (which would hang)."""
    r = subprocess.run([sys.executable, "-c", _FORK], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_call_boundary_messages_name_the_cause():
    """Was: the right input blamed for a wrong output's size; numpy's "cannot reshape
    array of size 0" for an output too large to allocate; a ctypes ValueError on
    pickling; 1e300 turned into inf for a float32 scalar; validate iterating an array."""
    n = pt.var("n")
    A2 = pt.placeholder((n + 1,), "float32", name="A2")
    C2 = pt.compute((n,), lambda i: A2[i] + A2[i + 1], name="C2")
    mod = pt.build(pt.create_schedule(C2.op), [A2, C2], name="pairs")
    with pytest.raises(ValueError, match=r"A2: .* expected 5 \(shape \(n \+ 1\), with n = 4 "
                                         "from argument C2\\)"):  # fmt: skip
        mod(np.ones(6, np.float32), np.empty(4, np.float32))
    with pytest.raises(TypeError, match=r"pairs: a module cannot be pickled; use "
                                        r"mod.export_library\(path\)"):  # fmt: skip
        pickle.dumps(mod)
    m = pt.var("m")
    F = pt.compute((m, m), lambda i, j: pt.cast("float32", i + j), name="F")
    mf = pt.build(pt.create_schedule(F.op), [m, F], name="grid")
    np.testing.assert_array_equal(mf(2), [[0, 1], [1, 2]])
    with pytest.raises(MemoryError, match=r"grid: output F of shape \(4294967296, 4294967296\)"):
        mf(2**32)
    al = pt.var("al", "float32")
    X = pt.placeholder((4,), "float32", name="X")
    Y = pt.compute((4,), lambda i: X[i] * al, name="Y")
    my = pt.build(pt.create_schedule(Y.op), [X, al, Y])
    with pytest.raises(ValueError, match="argument al: 1e\\+300 is beyond a float32's range"):
        my(np.ones(4, np.float32), 1e300)
    with pytest.raises(TypeError, match="validate: inputs is a list .* got one array; pass"):
        pt.validate(my, lambda x, a: x * a, np.ones(4, np.float32))


def test_a_failed_data_index_into_an_empty_tensor_touches_nothing():
    """Was: the failed index fell back to element 0 of an array of no elements, a read
    or a write outside it before the IndexError. The kernel gets a stand-in now: the
    caller's neighbouring memory (here a canary after a 0-element view) is untouched."""
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((m,), "float32", name="A")
    X = pt.placeholder((n,), "int64", name="X")
    B = pt.compute((n,), lambda i: A[X[i]], name="B")
    gather = pt.build(pt.create_schedule(B.op), [A, X, B])
    H = pt.placeholder((m,), "float32", name="H")
    Hs = pt.compute((m,), lambda i: H[i], name="Hs")
    (r,) = pt.rdom([(0, n)], names="r")
    Hs[X[r]] = Hs[X[r]] + 1.0
    scatter = pt.build(pt.create_schedule(Hs.op), [H, X, Hs])
    buf = np.full(8, 7.0, np.float32)
    empty = buf[4:4]  # no elements, followed by canaries in the same buffer
    x = np.array([0, 2, -1], np.int64)
    with pytest.raises(IndexError, match="an index into A computed from data"):
        gather(empty, x, np.zeros(3, np.float32))
    with pytest.raises(IndexError, match="an index into H"):
        scatter(np.zeros(0, np.float32), x, empty)
    assert (buf == 7.0).all()
    np.testing.assert_array_equal(gather(np.zeros(0, np.float32), x[:0]), [])  # no access


def test_an_empty_array_with_a_huge_other_dimension_is_a_call_that_does_nothing():
    """Was: its stand-in had the shape with each 0 made 1, 4 TiB for (0, 2**40): a
    MemoryError for a call with nothing to compute. A kernel without run-time index
    checks gets one element; one with them names the argument it cannot stand in for."""
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((n, m), "float32", name="A")
    C = pt.compute((n, m), lambda i, j: A[i, j] + 1, name="C")
    mod = pt.build(pt.create_schedule(C.op), [A, C])
    assert mod(np.zeros((0, 2**40), np.float32)).shape == (0, 2**40)
    out = np.zeros((3, 0), np.float32)
    mod(np.zeros((3, 0), np.float32), out)
    k = pt.var("k")
    X = pt.placeholder((k,), "int64", name="X")
    G = pt.compute((k,), lambda i: A[X[i], 5], name="G")
    gather = pt.build(pt.create_schedule(G.op), [A, X, G])
    assert gather(np.zeros((0, 2**20), np.float32), np.zeros(0, np.int64)).shape == (0,)
    with pytest.raises(MemoryError, match=r"argument A is empty, but the kernel checks data"):
        gather(np.zeros((0, 2**50), np.float32), np.zeros(3, np.int64))
    with pytest.raises(IndexError, match="an index into A computed from data"):
        gather(np.zeros((0, 8), np.float32), np.zeros(3, np.int64))


@pytest.mark.skipif(not hasattr(os, "RTLD_NOLOAD"), reason="a platform without RTLD_NOLOAD")
def test_a_collected_module_unloads_its_library_and_openmp_stays():
    """A process building kernel after kernel must not keep every library mapped
    (dlopen fails with ENOMEM after about 10,000); the OpenMP runtime the first
    parallel kernel brought in stays (unloading it under its idle threads crashed)."""
    import gc

    def scaled(c, n=64):
        A = pt.placeholder((n,), "float32", name="A")
        B = pt.compute((n,), lambda i: A[i] * c, name="B")
        s = pt.create_schedule(B.op)
        s[B].parallel(B.op.axis[0])
        return pt.build(s, [A, B], name="scaled")

    def mapped():
        try:
            with open("/proc/self/maps") as f:
                return f.read()
        except OSError:
            pytest.skip("no /proc/self/maps to read the mappings from")

    a = np.arange(64, dtype=np.float32)
    mods = [scaled(c + 0.25) for c in range(4)]
    for c, m in enumerate(mods):
        np.testing.assert_array_equal(m(a), a * np.float32(c + 0.25))
    paths = [m.lib_path for m in mods]
    assert all(p in mapped() for p in paths)
    del m, mods
    gc.collect()
    assert not any(p in mapped() for p in paths)
    before = pt.get_num_threads()
    pt.set_num_threads(2)
    try:
        again = scaled(1.25)  # the same library, loaded anew
        np.testing.assert_array_equal(again(a), a * np.float32(1.25))
        assert again.lib_path == paths[1]
    finally:
        pt.set_num_threads(before)


def test_contraction_off_gives_numpys_rounding():
    """Multiply-adds contract into FMAs by default; ``-ffp-contract=off`` among a target's
    flags rounds each product, as numpy does: ``sqrt(x*x - y*y)`` of ``x == y`` is 0,
    never the NaN that ``fma(x, x, -(y*y))`` gives half the time."""
    n = pt.var("n")
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.placeholder((n,), "float32", name="Y")
    Z = pt.compute((n,), lambda i: pt.sqrt(X[i] * X[i] - Y[i] * Y[i]), name="Z")
    x = np.random.default_rng(0).random(1000, dtype=np.float32)
    host = pt.Target("host")
    strict = pt.Target("host", cflags=host.cflags + ("-ffp-contract=off",))
    pt.build(pt.create_schedule(Z.op), [X, Y, Z], target=host)(x, x.copy())  # cached first
    got = pt.build(pt.create_schedule(Z.op), [X, Y, Z], target=strict)(x, x.copy())
    np.testing.assert_array_equal(got, np.sqrt(x * x - x * x))  # all 0: another object


def test_a_checked_index_a_loop_leaves_unchanged_is_computed_before_it():
    """A row gather ``Y[s, c] = X[I[s], c]``: the check of ``I[s]`` ran in every
    iteration of ``c``, a branch that kept the copy from vectorizing. It runs once per
    row now, with the same results and the same IndexError; a loop that may not run
    keeps its check inside (a hoisted one would fail where nothing was read)."""
    n, m = pt.var("n"), pt.var("m")
    X = pt.placeholder((n, 64), "float32", name="X")
    Idx = pt.placeholder((m,), "int64", name="Idx")
    Y = pt.compute((m, 64), lambda s, c: X[Idx[s], c], name="Y")
    sch = pt.create_schedule(Y.op)
    sch[Y].vectorize(Y.op.axis[1])
    mod = pt.build(sch, [X, Idx, Y])
    lines = [ln.strip() for ln in mod.source.splitlines()]
    hoisted = lines.index("const int64_t checked = pt_checked_index(Idx[s], n, -16, &status);")
    assert lines[hoisted + 1] == "#pragma omp simd"
    assert "Y[s * 64 + c] = X[checked * 64 + c];" in lines
    x = np.random.default_rng(0).random((5, 64), dtype=np.float32)
    idx = np.array([4, 0, 2, 2], np.int64)
    np.testing.assert_array_equal(mod(x, idx), x[idx])
    with pytest.raises(IndexError, match="an index into X computed from data"):
        mod(x, np.array([1, 5], np.int64))
    # a guarded gather: the check runs only where the guard holds, so it stays inside
    G = pt.compute(
        (m, 64),
        lambda s, c: pt.select((Idx[s] >= 0) & (Idx[s] < n), X[Idx[s], c], pt.const(0.0)),
        name="G",
    )
    gs = pt.create_schedule(G.op)
    gs[G].vectorize(G.op.axis[1])
    guarded = pt.build(gs, [X, Idx, G])
    assert "const int64_t checked" not in guarded.source
    idx = np.array([4, -1, 7, 2], np.int64)
    want = np.where(((idx >= 0) & (idx < 5))[:, None], x[np.clip(idx, 0, 4)], 0)
    np.testing.assert_array_equal(guarded(x, idx), want)
    W = pt.compute((m, n), lambda s, c: X[Idx[s], 0] + X[c, 1], name="W")  # c: 0..n, maybe none
    wmod = pt.build(pt.create_schedule(W.op), [X, Idx, W])
    assert "const int64_t checked" not in wmod.source
    assert wmod(np.zeros((0, 64), np.float32), np.array([3], np.int64)).shape == (1, 0)
