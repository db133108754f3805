"""mod.profile: an instrumented build timing each root stage, its work counted from the
definitions, held against the machine's measured (and cached) peaks."""

import ctypes
import json
import math
import os

import numpy as np
import pytest

import autotune as at
import pypto as pt
from pypto import peak
from pypto import profile as prof_mod
from pypto.runtime import compile_source
from pypto.target import cross_compiler


def _chain(n_var=None, size=192):
    """C = A @ B (tiled, C.local accumulated inside C), D = relu(C) with E inlined into it,
    F = 2 * D + 1: three root stages C, D, F."""
    n = n_var if n_var is not None else size
    A = pt.placeholder((n, n), "float32", name="A")
    B = pt.placeholder((n, n), "float32", name="B")
    k = pt.reduce_axis((0, n), name="k")
    C = pt.compute((n, n), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    E = pt.compute((n, n), lambda i, j: C[i, j] - 0.5, name="E")
    D = pt.compute((n, n), lambda i, j: pt.max(E[i, j], pt.const(0, "float32")), name="D")
    F = pt.compute((n, n), lambda i, j: D[i, j] * 2.0 + 1.0, name="F")
    s = pt.create_schedule(F.op)
    s[E].compute_inline()
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 16, 16)
    s[CL].compute_at(s[C], jo)
    s[C].parallel(io)
    s[D].vectorize(D.op.axis[1])
    return s, [A, B, F]


@pytest.fixture(scope="module")
def profiled():
    n = 192
    s, args = _chain(size=n)
    mod = pt.build(s, args, name="chain")
    rng = np.random.default_rng(0)
    a, b = (rng.random((n, n), dtype=np.float32) for _ in range(2))
    return mod, mod.profile(a, b, repeat=5), (a, b)


def test_entries_name_every_root_stage_with_exact_work(profiled):
    mod, p, _ = profiled
    n = 192
    assert [e.stage for e in p] == ["C", "D", "F"]  # C.local inside C, E inlined into D
    # C: a multiply and an add per point of (i, j, k) in C.local, a copy in C
    assert p["C"].flops == 2 * n**3 and p["C"].bytes == 3 * n * n * 4
    assert p["D"].flops == 2 * n * n and p["D"].bytes == 2 * n * n * 4  # E's sub, max
    assert p["F"].flops == 2 * n * n and p[2] is p["F"]
    with pytest.raises(KeyError, match="chain has no root stage 'E'"):
        p["E"]
    for e in p:
        values = (e.seconds, e.gflops, e.gbps, e.peak_fraction, e.intensity)
        assert all(math.isfinite(v) and v > 0 for v in values), e
        assert e.gflops == pytest.approx(e.flops / e.seconds / 1e9)
        assert e.gbps == pytest.approx(e.bytes / e.seconds / 1e9)
    assert p["C"].bound == "compute" and p["F"].bound == "memory"
    assert p["D"].threads == 1  # no parallel loop: held against the one-thread peak


def test_stage_seconds_add_up_to_the_call(profiled):
    _, p, _ = profiled
    staged = sum(e.seconds for e in p)
    # the whole call adds only the ctypes call and the untimed allocations
    assert 0.7 * p.total_seconds <= staged <= p.total_seconds * 1.02, (staged, p.total_seconds)


def test_the_profiling_build_computes_the_same_and_prints_a_table(profiled):
    mod, p, (a, b) = profiled
    text = str(p)
    assert text.startswith("chain on ") and "ms per call" in text
    for col in ("stage", "GFLOP/s", "GB/s", "of peak"):
        assert col in text
    assert "peak with 1 thread(s): FMA" in text
    assert mod.profiler is not None and "pt_prof" not in mod.source  # the module itself is plain
    timers = prof_mod.assign(mod.func, mod.profiler.stages)
    src, _ = prof_mod.codegen(mod.func, mod.target, timers)
    assert src.count("pt_prof_t = omp_get_wtime();") == len(timers) >= 3
    ref = np.maximum(a.astype(np.float64) @ b - 0.5, 0) * 2 + 1
    np.testing.assert_allclose(mod(a, b), ref, rtol=1e-4)


def test_symbolic_sizes_and_update_stages():
    n = pt.var("n")
    s, args = _chain(n_var=n)
    p = pt.build(s, args, name="sym").profile(*[np.ones((40, 40), np.float32)] * 2, repeat=2)
    assert p["C"].flops == 2 * 40**3 and p["F"].bytes == 2 * 40 * 40 * 4
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.compute((n,), lambda i: X[i], name="Y")
    r = pt.reduce_axis((1, n), name="r")
    Y[r] = Y[r - 1] + X[r]
    p = pt.build(pt.create_schedule(Y), [X, Y], name="scan").profile(np.ones(1000, "f4"))
    assert [e.stage for e in p] == ["Y", "Y.update(0)"]
    assert p["Y.update(0)"].flops == 999 and p["Y"].flops == 0
    assert p["Y.update(0)"].bytes == 2 * 1000 * 4


@pytest.mark.parametrize("sized", [False, True])
def test_a_triangular_domain_counts_its_points_not_its_box(sized):
    """Row i sums k < i + 1 (or k >= i, with a size variable): half the box's points,
    which the flops counted before, doubling the stage's GFLOP/s."""
    n = pt.var("n") if sized else 300
    A = pt.placeholder((n, n), "float32", name="A")

    def row(i):
        k = pt.reduce_axis((i, n) if sized else (0, i + 1), name="k")
        return pt.sum(A[i, k], axis=k)

    S = pt.compute((n,), row, name="S")
    p = pt.build(pt.create_schedule(S.op), [A, S]).profile(np.ones((300, 300), "f4"), repeat=1)
    assert p["S"].flops == 300 * 301 // 2


def test_peaks_are_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path))
    s, args = _chain(size=32)
    mod = pt.build(s, args, name="small")
    x = np.ones((32, 32), np.float32)
    first = mod.profile(x, x, repeat=1)
    store = tmp_path / "peaks.json"
    cached = json.loads(store.read_text())
    assert f"{mod.target.name}/1" in cached
    assert cached[f"{mod.target.name}/1"]["gflops"] == first.peaks[0].gflops > 0
    stamp = os.path.getmtime(store)
    monkeypatch.setattr(peak, "peak_source", lambda t: pytest.fail("measured twice"))
    assert mod.profile(x, x, repeat=1).peaks == first.peaks and os.path.getmtime(store) == stamp


def test_refusals(profiled, tmp_path, monkeypatch):
    mod, p, (a, b) = profiled
    with pytest.raises(ValueError, match="repeat must be a positive number of calls, got 0"):
        mod.profile(a, b, repeat=0)
    path = mod.export_library(str(tmp_path / "k.so"))
    with pytest.raises(RuntimeError, match="chain cannot be profiled: only a module pt.build"):
        pt.load_module(path).profile(a, b)
    with pytest.raises(TypeError, match="argument A: dtype float64"):
        mod.profile(a.astype(np.float64), b)
    monkeypatch.setattr(prof_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="Profile.plot needs matplotlib"):
        p.plot(str(tmp_path / "r.png"))


def test_roofline_png(profiled, tmp_path):
    pytest.importorskip("matplotlib")
    _, p, _ = profiled
    out = p.plot(str(tmp_path / "roof.png"))
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def _int8_stage(target_name, dtype="int8"):
    s, _ = at.get_template("matmul")(64, 64, 256, dtype, target=target_name)
    return {st.name: st for st in prof_mod.describe(s)}


def test_a_stage_of_8_bit_products_is_held_to_the_targets_dot_roof():
    """The int8 kernel's stage reads int8/uint8: its compute roof is the int8 dot
    instruction's (vpdpbusd on x86-avx512-bf16), not the float32 FMA's."""
    stages = _int8_stage("x86-avx512-bf16")
    assert stages["C"].dtype == "int8"  # reads A and B (int8; packs B inside)
    roofs = peak.Peaks(100.0, 10.0, 1, (("int8", 400.0),))
    e = prof_mod._entry(stages["C"], 1e-3, {}, roofs)
    assert e.bound == "int8" and e.peak_fraction == pytest.approx(e.gflops / 400.0)
    f32 = {st.name: st for st in prof_mod.describe(_chain(size=64)[0])}["C"]
    assert f32.dtype == "float32"
    e = prof_mod._entry(f32, 1e-3, {}, roofs)
    assert e.bound == "compute" and e.peak_fraction == pytest.approx(e.gflops / 100.0)
    assert "int8 dot 400 GOP/s" in str(prof_mod.Profile("m", "t", (e,), 1e-3, (roofs,)))


def test_a_float64_stage_is_held_to_half_the_float32_fma():
    """A float64 vector holds half the lanes: its compute roof is half the FMA's."""
    n = 64
    A = pt.placeholder((n, n), "float64", name="A")
    k = pt.reduce_axis((0, n), name="k")
    C = pt.compute((n, n), lambda i, j: pt.sum(A[i, k] * A[k, j], axis=k), name="C")
    (st,) = prof_mod.describe(pt.create_schedule(C.op))
    assert st.dtype == "float64"
    roofs = peak.Peaks(100.0, 10.0, 1, (("int8", 400.0),))
    e = prof_mod._entry(st, 1e-4, {}, roofs)
    assert e.bound == "float64" and e.peak_fraction == pytest.approx(e.gflops / 50.0)
    assert "float64 FMA 50 GFLOP/s" in str(prof_mod.Profile("m", "t", (e,), 1e-4, (roofs,)))


@pytest.mark.parametrize(
    "target, dots",
    [("x86-avx512-bf16", {"int8": "vpdpbusd", "bfloat16": "vdpbf16ps"}),
     ("x86-avx2-vnni", {"int8": "vpdpbusd"}), ("x86-avx512", {"int8": "vpmaddwd"}),
     ("x86-avx2", {"int8": "vpmaddwd"}), ("aarch64-dotprod", {"int8": "sdot"}),
     ("aarch64-neon", {}), ("generic", {})],
)  # fmt: skip
def test_dot_roofs_follow_the_target_and_their_kernels_compile(target, dots, tmp_path):
    """Compiled for the target (with the cross compiler for aarch64, where there is one)."""
    t = pt.Target(target)
    roofs = peak.dot_roofs(t)
    assert {r.dtype: r.name for r in roofs} == dots
    cc = None
    if roofs and t.compiler_prefix is not None:
        cc = cross_compiler(t)
        if cc is None:
            pytest.skip(f"no {t.compiler_prefix}")
        cc = [cc]
    if roofs:
        so = compile_source(peak.dot_source(t), t.cflags, cc=cc)
        if t.can_run():
            fn = getattr(ctypes.CDLL(so), f"pt_peak_dot_{roofs[0].dtype}")
            fn.restype = ctypes.c_double
            fn.argtypes = [ctypes.c_int64, ctypes.c_int]
            assert fn(100_000, 1) > 0


def test_cached_peaks_without_the_dot_roofs_are_measured_again(tmp_path, monkeypatch):
    """A cache written before the dot roofs existed is not trusted for a target with one."""
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path))
    t = pt.Target("x86-avx2")
    if not t.can_run():
        pytest.skip("this CPU cannot run x86-avx2")
    (tmp_path / "peaks.json").write_text(json.dumps({"x86-avx2/1": {"gflops": 1, "gbps": 1}}))
    p = peak.measure_peaks(t, compile_source, 1)
    assert p.gflops > 1 and dict(p.dot)["int8"] > 0
    assert json.loads((tmp_path / "peaks.json").read_text())["x86-avx2/1"]["dot"]["int8"] > 0


def test_peaks_that_cannot_be_kept_are_returned_with_a_warning(tmp_path, monkeypatch):
    """The cache of the peaks is only a cache: a store that cannot be written (a path
    under a file here; read-only for another user) costs a warning, not the profile."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path / "file" / "home"))
    t = pt.Target("host")
    with pytest.warns(UserWarning, match=r"the measured peaks could not be kept in .*peaks.json"):
        p = peak.measure_peaks(t, compile_source, 1)
    assert p.gflops > 0 and p.gbps > 0


def test_several_threads_short_of_one_are_measured_again():
    """Two threads below 1.5 times one thread's FMA or dot roof, or below its triad: other
    work had a core; such figures would be cached for every later profile."""
    one = peak.Peaks(100.0, 10.0, 1, (("int8", 1000.0), ("bfloat16", 500.0)))
    assert not peak._short(one, 2, 190.0, 12.0, [1900.0, 990.0])
    assert peak._short(one, 2, 140.0, 12.0, [1900.0, 990.0])  # the FMA
    assert peak._short(one, 2, 190.0, 9.0, [1900.0, 990.0])  # the triad
    assert peak._short(one, 2, 190.0, 12.0, [1900.0, 600.0])  # a dot roof


def test_peaks_that_stay_short_are_cached_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path))
    monkeypatch.setattr(peak, "_TRIES", 1)
    monkeypatch.setattr(peak, "_short", lambda *a: True)
    t = pt.Target("host")
    with pytest.warns(UserWarning, match=r"with 2 threads stayed below one thread's after 1"):
        p = peak.measure_peaks(t, compile_source, 2)
    assert p.gflops > 0 and f"{t.name}/2" in json.loads((tmp_path / "peaks.json").read_text())


def test_a_profiled_kernel_fails_as_a_call_does():
    """An index read from data out of range: IndexError naming it, as a call raises
    (was: RuntimeError 'failed with status -16')."""
    A = pt.placeholder((8,), "float32", name="A")
    Idx = pt.placeholder((4,), "int32", name="Idx")
    B = pt.compute((4,), lambda i: A[Idx[i]], name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, Idx, B], name="g")
    a, idx = np.zeros(8, np.float32), np.array([0, 1, 2, 99], np.int32)
    with pytest.raises(IndexError, match="g: an index into A computed from data"):
        mod(a, idx)
    with pytest.raises(IndexError, match="g: an index into A computed from data"):
        mod.profile(a, idx)


def test_stages_sharing_loops_by_compute_with_are_one_entry():
    """Their statements run interleaved in one loop nest: one entry with both stages'
    work (one stage had shown 0 ms, the other both times against its own flops)."""
    n, steps = 400, 5
    A0 = pt.placeholder((n,), "float64", name="A0")
    A = pt.compute((n,), lambda i: A0[i], name="A")
    B = pt.compute((n,), lambda i: A0[i], name="B")
    t, i = pt.rdom([(0, steps), (1, n - 1)], names="t i")
    B[i] = 0.5 * (A[i - 1] + A[i + 1])
    t2, i2 = pt.rdom([(0, steps), (1, n - 1)], names="t2 i2")
    A[i2] = 0.5 * (B[i2 - 1] + B[i2 + 1])
    s = pt.create_schedule([A.op, B.op])
    s[A].update(0).compute_with(s[B].update(0), t)
    prof = pt.build(s, [A0, A, B], name="jacobi").profile(np.ones(n), repeat=2)
    entries = {e.stage: e for e in prof}
    assert set(entries) == {"A", "B", "B.update(0) + A.update(0)"}
    both = entries["B.update(0) + A.update(0)"]
    assert both.flops == 2 * steps * (n - 2) * 2 and both.seconds > 0  # an add, a mul each
