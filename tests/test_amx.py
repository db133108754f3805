"""AMX (``x86-amx``): int8 and bfloat16 GEMMs on Intel's tile matrix multiply. The
kernel comes from the task's target; the object code holds the tile instructions on any
host (emit-only); where this machine runs them, results are bit-exact (int8, against
numpy in int64) or within 1e-2 of float64 at K = 4096 (bfloat16)."""

from __future__ import annotations

import ctypes
import dataclasses
import re
import shutil
import subprocess

import numpy as np
import pytest

import autotune as at
import pypto as pt
from autotune.templates import amx as amx_kernel
from autotune.templates.dot_knobs import default_tile
from autotune.templates.dot_ukernels import gemm_tile, usable
from pypto import amx, peak
from pypto import target as target_mod
from pypto.dtypes import numpy_dtype
from pypto.runtime import compile_source

AMX = pt.Target("x86-amx")


def _runnable():
    if not AMX.can_run():
        pytest.skip("this machine cannot run x86-amx (no AMX, or the kernel refuses its tiles)")


def test_the_target_is_avx512_bf16_with_tiles():
    assert AMX.base == "x86-avx512-bf16"
    assert AMX.vector_lanes("float32") == 16 and AMX.vector_registers == 32
    assert AMX.has("amx_tile", "amx_int8", "amx_bf16", "avx512_vnni")
    assert "-mamx-tile" in AMX.cflags
    # float32 code is the base's: its records serve; int8 and bfloat16 code is not
    assert AMX.record_keys(("float32",)) == ("x86-amx", "x86-avx512-bf16", "x86-avx512")
    assert AMX.record_keys(("int8",)) == ("x86-amx",)
    assert AMX.record_keys(("bfloat16",)) == ("x86-amx",)


def test_a_cpu_whose_kernel_refuses_the_tiles_does_not_run_amx(monkeypatch, tmp_path):
    """The flags say AMX, Linux does not grant its state: every tile instruction would
    fault, so the host is not x86-amx."""
    cpuinfo = tmp_path / "cpuinfo"
    flags = " ".join(AMX.features)
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    real_open = open
    monkeypatch.setattr(
        "builtins.open",
        lambda f, *a, **k: real_open(cpuinfo if f == "/proc/cpuinfo" else f, *a, **k),
    )
    monkeypatch.setattr(amx, "granted", lambda: False)
    feats = target_mod._host_features.__wrapped__()
    assert "amx_tile" not in feats and "avx512_bf16" in feats
    monkeypatch.setattr(amx, "granted", lambda: True)
    assert "amx_tile" in target_mod._host_features.__wrapped__()


@pytest.mark.parametrize(
    "dtype, shape, kernel",
    [
        ("int8", (64, 64, 128), "amxint8"),
        ("int8", (64, 64, 100), "avx512vnni"),  # K not whole steps of 64
        ("int8", (8, 64, 128), "avx512vnni"),  # no whole tile of rows
        ("uint8", (64, 64, 128), "amxuint8"),
        ("uint8", (64, 64, 100), None),  # no vector kernel multiplies u8 by u8
        ("bfloat16", (64, 64, 96), "amxbf16"),
        ("bfloat16", (64, 64, 40), "avx512bf16"),
        ("float32", (64, 64, 128), None),
    ],
)
def test_the_tiles_serve_gemms_they_fit(dtype, shape, kernel):
    M, N, K = shape
    isa = usable(AMX, dtype, K, M, N)
    assert (isa.name if isa else None) == kernel
    base = usable(pt.Target("x86-avx512-bf16"), dtype, K, M, N)  # no tiles without the target's
    assert base is None or not base.name.startswith("amx")


def test_the_tile_space_holds_only_tiles_the_registers_hold():
    cfg = at.get_template("matmul").space(512, 512, 512, "int8", target=AMX)
    assert [v[-1] for v in cfg.knobs["tile_i"].values] == [16, 32]
    assert [v[-1] for v in cfg.knobs["tile_j"].values] == [16, 32, 64, 128, 256, 512]
    assert [v for v in cfg.knobs["block_i"].values] == [0, 2, 4, 8, 16]
    d = cfg.default_config()
    # a named target has one nominal core: one panel of B, 512 x 512 int8 (256 KiB)
    assert (d["tile_i"].size[-1], d["tile_j"].size[-1], d["ukernel"].val) == (32, 512, 1)
    small = at.get_template("matmul").space(20, 24, 128, "int8", target=AMX).default_config()
    assert (small["tile_i"].size[-1], small["tile_j"].size[-1]) == (16, 16)
    # the tile leaving the fewest columns to the ragged edge's loops: 1000 = 31 x 32 + 8
    ragged = at.get_template("matmul").space(64, 1000, 128, "int8", target=AMX).default_config()
    assert ragged["tile_j"].size[-1] == 32
    assert amx_kernel.fits(32, 32) and amx_kernel.fits(32, 128) and amx_kernel.fits(16, 16)
    assert not amx_kernel.fits(48, 32) and not amx_kernel.fits(16, 48)
    assert not amx_kernel.fits(8, 16)


def test_the_default_tile_keeps_a_packed_panel_in_half_of_l2_and_a_panel_per_core():
    one = dataclasses.replace(AMX, cores=1, l2_bytes=1 << 20)
    widths = {}
    for dtype, K in (("int8", 1024), ("bfloat16", 1024), ("bfloat16", 2816), ("bfloat16", 64)):
        isa = usable(one, dtype, K, 1024, 1024)
        widths[dtype, K] = default_tile(isa, 16, 1024, 1024, K, one)[1]
    # 1024 x 512 int8 and 1024 x 256 bfloat16 are 512 KiB; 2816 deep, 64 columns fit
    assert widths == {
        ("int8", 1024): 512,
        ("bfloat16", 1024): 256,
        ("bfloat16", 2816): 64,
        ("bfloat16", 64): 512,
    }
    four = dataclasses.replace(one, cores=4)  # four panels of 256 for four cores
    assert default_tile(usable(four, "int8", 64, 1024, 1024), 16, 1024, 1024, 64, four)[1] == 256


def test_a_tile_that_is_not_whole_tiles_is_refused():
    isa = usable(AMX, "int8", 128, 64, 64)
    with pytest.raises(ValueError, match="not whole amxint8 tiles"):
        gemm_tile(isa, 24, 32, 128, lambda a, b: a * b)
    with pytest.raises(ValueError, match="not a multiple of 64"):
        gemm_tile(isa, 32, 32, 96, lambda a, b: a * b)


def _disassembly(dtype: str, args=(64, 64, 128)) -> tuple[str, str]:
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("no objdump")
    task = at.Task("matmul", (*args, dtype), target=AMX)
    s, tensors = task.instantiate(task.config_space.default_config())
    src = pt.build(s, tensors, target=AMX, name="mm", emit_only=True)
    so = compile_source(src, AMX.cflags)
    return src, subprocess.run([objdump, "-d", so], capture_output=True, text=True).stdout


@pytest.mark.parametrize(
    "dtype, instruction", [("int8", "tdpbssd"), ("uint8", "tdpbuud"), ("bfloat16", "tdpbf16ps")]
)
def test_object_code_holds_the_tile_instructions(dtype, instruction):
    src, asm = _disassembly(dtype)
    for insn in (instruction, "tileloadd", "tilestored", "ldtilecfg", "tilezero"):
        assert re.search(rf"\b{insn}\b", asm), f"no {insn} in the x86-amx code"
    # the kernel writes C itself: int32 as the tiles store it, bfloat16 rounded from them
    assert "A_aligned" not in src and "C_local" not in src
    assert bool(re.search(r"\bvcvtneps2bf16\b", asm)) == (dtype == "bfloat16")


def _tile_matmul(shape: tuple, dtype: str, kernel: str):
    """The ``dtype`` matmul module of ``shape`` on AMX, its tiles ``kernel``'s (skipped
    where this machine cannot run them)."""
    _runnable()
    s, tensors = at.get_template("matmul")(*shape, dtype, target=AMX)
    mod = pt.build(s, tensors, target=AMX, name="mm")
    assert f"gemm_{kernel}_" in mod.source
    return mod


def _inputs(rng, M, N, K, dtype):
    if dtype == "int8":
        a = rng.integers(-128, 128, (M, K)).astype(np.int8)
        b = rng.integers(-128, 128, (K, N)).astype(np.int8)
        a[0], b[:, 0] = -128, -128  # the extremes: (-128)(-128) summed K times
        a[1], b[:, 1] = 127, -128
        return a, b
    a = rng.uniform(0, 1, (M, K)).astype(numpy_dtype(dtype))
    return a, rng.uniform(0, 1, (K, N)).astype(numpy_dtype(dtype))


@pytest.mark.parametrize("shape", [(64, 64, 128), (45, 50, 192), (100, 33, 256), (64, 256, 2048)])
def test_int8_matmul_on_tiles_is_bit_exact(shape):
    """Whole tiles on AMX, the ragged edges (rows or columns short of a tile) as loops;
    at K = 2048, two K-blocks over column groups (accumulators stored and reloaded). A
    from numpy starts 16 bytes into a cache line (the kernel copies its slices); an
    aligned A is read in place."""
    M, N, K = shape
    mod = _tile_matmul(shape, "int8", "amxint8")
    a, b = _inputs(np.random.default_rng(1), M, N, K, "int8")
    out = mod(a, b)
    assert out.ctypes.data % 64 == 0  # the output a module allocates is line-aligned
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))
    np.testing.assert_array_equal(mod(_line_aligned(a), b), out)
    np.testing.assert_array_equal(mod(_line_aligned(a, offset=16), b), out)
    # a caller's output at any offset in a line gets the same
    buf = np.full(M * N + 3, -7, np.int32)
    c = buf[3:].reshape(M, N)
    mod(a, b, c)
    np.testing.assert_array_equal(c, out)
    assert (buf[:3] == -7).all()


@pytest.mark.parametrize("shape", [(64, 64, 128), (45, 50, 192), (64, 256, 2048)])
def test_uint8_matmul_on_tiles_is_bit_exact(shape):
    """``tdpbuud``: unsigned by unsigned into int32, 255 x 255 summed K times included."""
    M, N, K = shape
    mod = _tile_matmul(shape, "uint8", "amxuint8")
    rng = np.random.default_rng(6)
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(0, 256, (K, N)).astype(np.uint8)
    a[0], b[:, 0] = 255, 255
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(mod(a, b), want)
    np.testing.assert_array_equal(mod(_line_aligned(a, offset=16), b), want)


def _line_aligned(a: np.ndarray, offset: int = 0) -> np.ndarray:
    """A copy of ``a`` starting ``offset`` bytes into a cache line."""
    buf = pt.arg_checks.aligned_empty((a.nbytes + 64,), np.uint8)
    out = buf[offset : offset + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 64 == offset
    return out


@pytest.mark.parametrize("shape", [(64, 48, 4096), (45, 50, 512)])
def test_bfloat16_matmul_on_tiles_accumulates_in_float32(shape):
    """K = 4096: eight K-blocks, partial sums in float32 between them, rounded once; the
    ragged edges' loops (45 x 50) sum in float32 too."""
    M, N, K = shape
    mod = _tile_matmul(shape, "bfloat16", "amxbf16")
    a, b = _inputs(np.random.default_rng(2), M, N, K, "bfloat16")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for x in (_line_aligned(a), _line_aligned(a, offset=16)):
        out = mod(x, b).astype(np.float64)
        assert np.max(np.abs(out - ref) / np.abs(ref)) < 1e-2


# another library's tile shapes (every tile 8 rows x 32 bytes), loaded in every thread
# of the OpenMP team and in the caller, as oneDNN leaves its own between two calls
_OTHER_SHAPES = r"""
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
/* the asm names all 64 bytes (gcc 12's _tile_loadconfig tells the compiler it reads 8) */
typedef struct { unsigned char b[64]; } __attribute__((aligned(64))) tilecfg;
static void load_other(void) {
  tilecfg cfg = {{1}};
  for (int t = 0; t < 8; ++t) cfg.b[16 + 2 * t] = 32, cfg.b[48 + t] = 8;
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}
void other_shapes(void) {
  syscall(SYS_arch_prctl, 0x1023, 18);
  load_other();
  #pragma omp parallel
  load_other();
}
int held_rows(void) {  /* the rows of tile 0 in this thread's configuration */
  tilecfg cfg;
  __asm__ volatile("sttilecfg %0" : "=m"(cfg));
  return cfg.b[48];
}
"""


def test_a_call_after_another_librarys_tile_shapes_is_still_right():
    """The tile shapes are per thread and outlive a call: a kernel that trusted the
    shapes it loaded in an earlier call would multiply 8-row tiles here."""
    shape = (64, 64, 256)
    mod = _tile_matmul(shape, "int8", "amxint8")
    lib = ctypes.CDLL(compile_source(_OTHER_SHAPES, AMX.cflags))
    a, b = _inputs(np.random.default_rng(3), *shape, "int8")
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(mod(a, b), want)
    lib.other_shapes()
    assert lib.held_rows() == 8
    np.testing.assert_array_equal(mod(a, b), want)
    assert lib.held_rows() == 16  # the caller's thread ran a share of the kernel


def test_bfloat16_tiles_keep_nan_and_inf():
    _runnable()
    M, N, K = 32, 32, 64
    s, tensors = at.get_template("matmul")(M, N, K, "bfloat16", target=AMX)
    mod = pt.build(s, tensors, target=AMX, name="mm")
    a, b = _inputs(np.random.default_rng(5), M, N, K, "bfloat16")
    a[3, 7], a[5, 0] = np.nan, np.inf
    out = mod(a, b).astype(np.float64)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isnan(out[3]).all() and np.isposinf(out[5]).all()
    ok = np.isfinite(want)
    assert np.max(np.abs(out[ok] - want[ok]) / np.abs(want[ok])) < 1e-2


@pytest.mark.parametrize("dtype", ["int8", "bfloat16"])
def test_batch_matmul_and_dense_use_the_tiles(dtype):
    _runnable()
    rng = np.random.default_rng(3)
    s, tensors = at.get_template("batch_matmul")(3, 40, 32, 128, dtype, target=AMX)
    mod = pt.build(s, tensors, target=AMX, name="bmm")
    assert "gemm_amx" in mod.source
    a = np.stack([_inputs(rng, 40, 32, 128, dtype)[0] for _ in range(3)])
    b = np.stack([_inputs(rng, 40, 32, 128, dtype)[1] for _ in range(3)])
    (ref,) = at.get_template("batch_matmul").reference_output([a, b], (3, 40, 32, 128, dtype))
    got = mod(a, b)
    if dtype == "int8":
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=2e-2)


def test_requantizing_dense_on_tiles_matches_its_reference():
    """int32 accumulators from the tiles, then scale, round to even and saturate."""
    _runnable()
    task = at.Task("dense_requant", (48, 64, 256), target=AMX)
    s, tensors = task.instantiate(task.config_space.default_config())
    mod = pt.build(s, tensors, target=AMX, name="dq")
    assert "gemm_amxint8_" in mod.source
    rng = np.random.default_rng(4)
    inputs = []
    for t in tensors[:-1]:
        shape = tuple(int(d) for d in t.shape)
        if str(t.dtype) == "int8":
            inputs.append(rng.integers(-128, 128, shape).astype(np.int8))
        else:
            inputs.append(rng.uniform(1e-4, 1e-3, shape).astype(numpy_dtype(t.dtype)))
    (ref,) = task.template.reference_output(inputs, task.args)
    np.testing.assert_array_equal(mod(*inputs), ref)


def test_the_tile_roofs_replace_the_vector_ones():
    roofs = {r.dtype: r.name for r in peak.dot_roofs(AMX)}
    assert roofs == {"int8": "tdpbssd", "uint8": "tdpbuud", "bfloat16": "tdpbf16ps"}
    base = {r.dtype: r.name for r in peak.dot_roofs(pt.Target("x86-avx512-bf16"))}
    assert base == {"int8": "vpdpbusd", "bfloat16": "vdpbf16ps"}
    src = peak.dot_source(AMX)
    assert "_tile_dpbssd(0, 6, 7)" in src and "_tile_dpbuud(0, 6, 7)" in src
    assert "pt_amx_start();" in src
    compile_source(peak.peak_source(AMX) + src, AMX.cflags)  # builds on any x86 host
