"""int8 and bfloat16 GEMMs through dot-product tensor intrinsics (API.md 9): the kernel
comes from the TARGET's features, never the host's; the object code holds the
instruction wherever the target has it (compiled for targets this machine cannot run);
results are bit-exact (int8, against numpy in int64) or within 1e-2 of float64 at
K=4096 (bfloat16, float16), run natively or under qemu where possible."""

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
from autotune.templates import ukernels
from autotune.templates.conv2d import conv2d_reference
from autotune.templates.dense import requantize_reference
from autotune.templates.dot_ukernels import dot_isa
from pypto import emulate
from pypto.dtypes import numpy_dtype
from pypto.runtime import compile_source
from pypto.target import cross_compiler


@pytest.mark.parametrize(
    "target, dtype, kernel",
    [
        ("x86-avx512-bf16", "int8", "avx512vnni"),
        ("x86-avx512-bf16", "bfloat16", "avx512bf16"),
        ("x86-avx2-vnni", "int8", "avxvnni"),
        ("x86-avx512", "int8", "avx512bw"),
        ("x86-avx2", "int8", "avx2_b8"),  # 32 KB of L1: B kept int8
        ("aarch64-dotprod", "int8", "neondot"),
        ("aarch64-neon", "int8", None),
        ("x86-avx512", "bfloat16", None),
        ("generic", "int8", None),
        ("x86-avx512-bf16", "float32", None),
    ],
)
def test_the_kernel_follows_the_target(target, dtype, kernel):
    isa = dot_isa(pt.Target(target), dtype)
    assert (isa.name if isa else None) == kernel
    task = at.Task("matmul", (64, 64, 64, dtype), target=target)
    assert ("ukernel" in task.config_space.knobs) == (kernel is not None)


def _objdump(target: pt.Target) -> str | None:
    if target.arch == "aarch64" and target.compiler_prefix is not None:
        return shutil.which("aarch64-linux-gnu-objdump")
    return shutil.which("objdump")


def _disassembly(target_name: str, dtype: str, args=(64, 64, 128)) -> str:
    t = pt.Target(target_name)
    cc = None
    if t.compiler_prefix is not None:
        cc = cross_compiler(t)
        if cc is None:
            pytest.skip(f"no {t.compiler_prefix}")
        cc = [cc]
    objdump = _objdump(t)
    if objdump is None:
        pytest.skip("no objdump")
    task = at.Task("matmul", (*args, dtype), target=t)
    s, tensors = task.instantiate(task.config_space.default_config())
    src = pt.build(s, tensors, target=t, name="mm", emit_only=True)
    so = compile_source(src, t.cflags, cc=cc)
    return subprocess.run([objdump, "-d", so], capture_output=True, text=True).stdout


@pytest.mark.parametrize(
    "target, dtype, instruction",
    [
        ("x86-avx512-bf16", "int8", r"vpdpbusd\s+%zmm"),
        ("x86-avx512-bf16", "bfloat16", r"vdpbf16ps\s+%zmm"),
        ("x86-avx2-vnni", "int8", r"vpdpbusd\s+%ymm"),  # the VEX (AVX-VNNI) form
        ("x86-avx512", "int8", r"vpmaddwd\s+%zmm"),
        ("x86-avx2", "int8", r"vpmaddwd\s+%ymm"),
        # float16 widened once: the register tile is float32 vector FMAs
        ("x86-avx2", "float16", r"vfmadd\d+ps\s+%ymm"),
        ("aarch64-dotprod", "int8", r"\bsdot\b"),
    ],
)
def test_object_code_holds_the_instruction(target, dtype, instruction):
    asm = _disassembly(target, dtype)
    assert re.search(instruction, asm), f"no {instruction} in the code for {target}"


def test_a_target_without_vnni_gets_no_vnni_instruction():
    asm = _disassembly("x86-avx512", "int8")
    assert "vpmaddwd" in asm and "vpdpbusd" not in asm


def _run(target: pt.Target, args, cfg_values=None):
    why = emulate.why_not_runnable(target)
    if why:
        pytest.skip(why)
    task = at.Task("matmul", args, target=target)
    cfg = task.config_space.default_config()
    if cfg_values:
        cfg = task.config_space.config({**cfg.values, **cfg_values})
    s, tensors = task.instantiate(cfg)
    mod = pt.build(s, tensors, target=target, name="mm")
    M, N, K, dtype = args
    rng = np.random.default_rng(4)
    if dtype == "int8":
        a = rng.integers(-128, 128, (M, K)).astype(np.int8)
        b = rng.integers(-128, 128, (K, N)).astype(np.int8)
        a[0], b[:, 0] = -128, -128  # the extremes: (-128)(-128) summed K times
        a[1], b[:, 1] = 127, -128
    else:
        a = rng.uniform(0, 1, (M, K)).astype(numpy_dtype(dtype))
        b = rng.uniform(0, 1, (K, N)).astype(numpy_dtype(dtype))
    out = np.zeros((M, N), numpy_dtype(tensors[-1].dtype))
    mod(a, b, out)
    return mod, a, b, out


INT8_TARGETS = ["x86-avx512-bf16", "x86-avx2-vnni", "x86-avx512", "x86-avx2", "aarch64-dotprod"]


@pytest.mark.parametrize("target", INT8_TARGETS)
def test_int8_matmul_is_bit_exact(target):
    """Ragged tiles (M, N not multiples of the tile) take the plain loops; whole ones
    the kernel."""
    mod, a, b, out = _run(pt.Target(target), (37, 50, 300, "int8"))
    assert mod.source.count(f"gemm_{dot_isa(pt.Target(target), 'int8').name}_") >= 2
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("target", ["x86-avx2", "x86-avx512"])
def test_vpmaddwd_kernels_broadcast_a_widened_once(target):
    """Without VNNI, A is widened to int16 once per call, in parallel, before the
    kernels; each kernel then broadcasts a pair of int16 with one load (no scalar
    sign extensions per row), and the result stays exact at the extremes."""
    t = pt.Target(target)
    s, tensors = at.get_template("matmul")(64, 64, 256, "int8", target=t)
    src = pt.build(s, tensors, target=t, name="mm", emit_only=True)
    widen = re.search(r"A_int16\[.*\] = \(int16_t\)", src)
    call = re.search(r"gemm_avx\w+\(A_int16 \+", src)
    assert widen and call and widen.start() < call.start()
    assert re.search(r"void gemm_avx\w+\(const int16_t\* restrict a", src)
    assert "pt_pair16" not in src
    if t.can_run():
        mod, a, b, out = _run(t, (64, 64, 256, "int8"))
        np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


def test_avx2_int8_tile_leaves_a_register_for_the_product():
    """vpmaddwd's product needs a register before vpaddd: AVX2's default int8 tile is
    4 x 2 vectors (8 accumulators), its float32 tile 6 x 2."""

    def tile(dtype):
        cfg = at.get_template("matmul").space(256, 256, 256, dtype, target="x86-avx2")
        d = cfg.default_config()
        return d["tile_i"].size[-1], d["tile_j"].size[-1]

    assert tile("int8") == (4, 16)
    assert tile("float32") == (6, 16)


@pytest.mark.parametrize("l1, wide", [(None, False), (48 << 10, True)])
def test_avx2_int8_operands_widened_once(l1, wide):
    """On x86-avx2, B's panels (matmul) and the packed weights (conv2d) are int16 where
    the target's L1 holds 48 KB: the kernels load them as they are, no sign extension per
    load; with the named target's 32 KB they stay int8, sign-extended as loaded. The
    product's temporary is not early-clobbered (gcc then moved the accumulators around
    every pair)."""
    t = pt.Target("x86-avx2")
    assert t.l1d_bytes == 32 << 10
    t = dataclasses.replace(t, l1d_bytes=l1) if l1 else t
    elem = "int16_t" if wide else "int8_t"
    s, tensors = at.get_template("matmul")(64, 64, 64, "int8", target=t)
    src = pt.build(s, tensors, target=t, emit_only=True)
    kernel = src[src.index("static inline void gemm_avx2" + ("" if wide else "_b8")) :]
    assert f"const {elem}* restrict b" in kernel
    assert ("cvtepi8_epi16" in kernel) is not wide
    assert re.search(r'"\+x"\(acc\), "=x"\(t\)', src)
    s, tensors = at.get_template("conv2d_nchw")(1, 8, 6, 6, 16, 3, 3, 1, 1, "int8", target=t)
    src = pt.build(s, tensors, target=t, emit_only=True)
    assert f"{elem}* restrict w" in src and ("cvtepi8_epi16" in src) is not wide


def _conv_int8(t, args, seed=5):
    """An int8 conv2d_nchw (its default config on ``t``), its output and the reference."""
    s, tensors = at.get_template("conv2d_nchw")(*args, "int8", target=t)
    mod = pt.build(s, tensors, target=t, name="conv")
    N, C, H, W, K, R, S, st, pad = args
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (N, C, H, W)).astype(np.int8)
    w = rng.integers(-128, 128, (K, C, R, S)).astype(np.int8)
    x[0, :, :3, :3], w[0] = -128, -128  # the extremes: (-128)(-128) summed C*R*S times
    x[-1, :, -3:, -3:], w[-1] = 127, -128
    ref = conv2d_reference(x.astype(np.float64), w.astype(np.float64), stride=st, padding=pad)
    return mod, mod(x, w), ref


@pytest.mark.parametrize("target", INT8_TARGETS)
@pytest.mark.parametrize(
    "args",
    [
        (2, 8, 11, 9, 32, 3, 3, 2, 1),
        (1, 16, 9, 10, 32, 3, 3, 1, 1),
        (1, 8, 6, 6, 32, 1, 1, 1, 0),
        (1, 8, 5, 5, 32, 3, 3, 2, 1),  # tiles of 3 columns: copied back one column at a time
    ],
)
def test_int8_conv_uses_the_dot_kernel_and_is_bit_exact(target, args):
    """Channels grouped by the instruction's g, the input padded (offset by 128 for
    vpdpbusd, widened for vpmaddwd), partial tiles as plain loops, whole tiles copied
    back to NCHW transposed in registers (less 128 x the weights' sums for vpdpbusd):
    exact at the extremes."""
    t = pt.Target(target)
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    mod, out, ref = _conv_int8(t, args)
    assert f"conv_{dot_isa(t, 'int8').name}_" in mod.source
    assert "tile_transpose_" in mod.source
    np.testing.assert_array_equal(out, ref)


def test_int8_conv_without_whole_channel_groups_takes_the_compilers_code():
    """C = 6 is not a whole number of vpdpbusd's groups of 4: the plain int32 schedule."""
    t = pt.Target("x86-avx512-bf16")
    if not t.can_run():
        pytest.skip("this CPU cannot run x86-avx512-bf16")
    mod, out, ref = _conv_int8(t, (1, 6, 9, 9, 32, 3, 3, 1, 1))
    assert "conv_avx512vnni_" not in mod.source
    np.testing.assert_array_equal(out, ref)


def _conv16(dtype, args, t, seed=7):
    s, tensors = at.get_template("conv2d_nchw")(*args, dtype, target=t)
    assert [x.dtype for x in tensors] == [dtype] * 3
    mod = pt.build(s, tensors, target=t, name="conv16")
    N, C, H, W, K, R, S, st, pad = args
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (N, C, H, W)).astype(numpy_dtype(dtype))
    w = rng.uniform(-1, 1, (K, C, R, S)).astype(numpy_dtype(dtype))
    ref = conv2d_reference(x.astype(np.float64), w.astype(np.float64), stride=st, padding=pad)
    return mod, mod(x, w).astype(np.float64), ref


@pytest.mark.parametrize(
    "args",
    [
        (1, 16, 9, 9, 32, 3, 3, 1, 1),
        (2, 8, 11, 9, 32, 3, 3, 2, 1),
        (1, 8, 5, 5, 32, 3, 3, 2, 1),  # tiles of 3 columns: copied back one column at a time
    ],
)
def test_bfloat16_conv_runs_on_vdpbf16ps_and_rounds_once(args):
    """A bfloat16 convolution on a target with vdpbf16ps takes the dot kernel (pairs of
    input channels, float32 sums) and the transposed copy that rounds each sum once:
    within half a bfloat16 step (2^-8 relative) of the float64 reference, plus the
    float32 sums' own error."""
    t = pt.Target("x86-avx512-bf16")
    if not t.can_run():
        pytest.skip("this CPU cannot run x86-avx512-bf16")
    mod, out, ref = _conv16("bfloat16", args, t)
    assert "conv_avx512bf16_" in mod.source
    assert "tile_transpose_avx512_float32_bf16_" in mod.source
    assert np.all(np.abs(out - ref) <= 2.0**-8 * np.abs(ref) + 1e-5)


def test_float16_conv_stays_in_float_arithmetic():
    """float16 has no dot instruction on x86: float32 sums of widened halves."""
    t = pt.Target("x86-avx512-bf16")
    if not t.can_run():
        pytest.skip("this CPU cannot run x86-avx512-bf16")
    mod, out, ref = _conv16("float16", (1, 16, 9, 9, 32, 3, 3, 1, 1), t)
    assert "conv_avx512" not in mod.source
    np.testing.assert_allclose(out, ref, rtol=2e-2, atol=0.2)


def test_rounded_tile_copy_rounds_as_cast():
    """The bfloat16 tile copy rounds each float32 to nearest even by its bits, as
    ``pt.cast`` and ml_dtypes do: ties, subnormals (vcvtneps2bf16 would flush them),
    infinities, overflow to infinity and NaN, in the vector columns and the tail."""
    t = pt.Target("x86-avx512-bf16")
    if not t.can_run():
        pytest.skip("this CPU cannot run x86-avx512-bf16")
    hb, wb, kb = 2, 6, 16
    intrin = ukernels.tile_transpose(ukernels.simd_isa(t), hb, wb, kb, "float32", None, True)
    A = pt.placeholder((hb, wb, kb), "float32", name="A")
    Y = pt.compute((kb, hb, wb), lambda k, y, x: pt.cast("bfloat16", A[y, x, k]), name="Y")
    s = pt.create_schedule(Y.op)
    s[Y].tensorize(Y.op.axis[0], intrin)
    mod = pt.build(s, [A, Y], target=t, name="round_copy")
    assert "pt_bf16_lanes" in mod.source
    bits = np.random.default_rng(3).integers(0, 2**32, hb * wb * kb, dtype=np.uint64)
    special = [0x3F808000, 0x3F818000, 0x00008000, 0x00018000, 0x80000001, 0x007FFFFF,
               0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFF800001, 0x80000000]  # fmt: skip
    bits[: len(special)] = special
    bits[-len(special) :] = special  # the tail columns too
    a = bits.astype(np.uint32).view(np.float32).reshape(hb, wb, kb)
    with np.errstate(invalid="ignore"):  # NaN payloads
        want = a.transpose(2, 0, 1).astype(numpy_dtype("bfloat16"))
    got = mod(a)
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert np.array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])


@pytest.mark.parametrize(
    "target, instruction",
    [("x86-avx512-bf16", r"vpdpbusd\s+%zmm"), ("x86-avx2", r"vpmaddwd\s+%ymm")],
)
def test_int8_conv_object_code_holds_the_instruction(target, instruction):
    t = pt.Target(target)
    objdump = _objdump(t)
    if objdump is None:
        pytest.skip("no objdump")
    s, tensors = at.get_template("conv2d_nchw")(1, 16, 12, 12, 32, 3, 3, 1, 1, "int8", target=t)
    so = compile_source(pt.build(s, tensors, target=t, name="c", emit_only=True), t.cflags)
    asm = subprocess.run([objdump, "-d", so], capture_output=True, text=True).stdout
    assert re.search(instruction, asm)


def test_int8_matmul_without_the_kernel_is_bit_exact_too():
    mod, a, b, out = _run(pt.Target("x86-avx512-bf16"), (16, 64, 64, "int8"), {"ukernel": 0})
    assert "gemm_" not in mod.source
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize(
    "target, dtype", [("x86-avx512-bf16", "bfloat16"), ("x86-avx2", "float16")]
)
def test_16_bit_matmul_at_k_4096_within_1e_2(target, dtype):
    mod, a, b, out = _run(pt.Target(target), (8, 48, 4096, dtype))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(out.astype(np.float64) - ref) / ref) < 1e-2


@pytest.mark.parametrize("target", ["x86-avx512-bf16", "x86-avx2", "aarch64-dotprod"])
def test_int8_dense_and_requantized_dense_use_the_kernel_and_stay_exact(target):
    t = pt.Target(target)
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (37, 300)).astype(np.int8)
    w = rng.integers(-128, 128, (50, 300)).astype(np.int8)
    scale = rng.uniform(1e-4, 1e-2, 50).astype(np.float32)
    acc = x.astype(np.int64) @ w.astype(np.int64).T
    for name, args, inputs, want in [
        ("dense", (37, 50, 300, "int8"), [x, w], acc),
        ("dense_requant", (37, 50, 300), [x, w, scale],
         requantize_reference(acc.astype(np.int32), scale)),
    ]:  # fmt: skip
        task = at.Task(name, args, target=t)
        s, tensors = task.instantiate(task.config_space.default_config())
        mod = pt.build(s, tensors, target=t, name=name)
        assert f"gemm_{dot_isa(t, 'int8').name}_" in mod.source
        out = np.zeros(want.shape, numpy_dtype(tensors[-1].dtype))
        mod(*inputs, out)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(
    "target", ["x86-avx512-bf16", "x86-avx2-vnni", "x86-avx2", "aarch64-dotprod"]
)
def test_int8_batch_matmul_uses_the_kernel_and_is_bit_exact(target):
    """One set of packed panels per batch; ragged tiles (M, N) keep the plain loops."""
    t = pt.Target(target)
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, (3, 37, 300)).astype(np.int8)
    b = rng.integers(-128, 128, (3, 300, 50)).astype(np.int8)
    a[1, 0], b[1, :, 0] = -128, -128  # (-128)(-128) summed K times
    task = at.Task("batch_matmul", (3, 37, 50, 300, "int8"), target=t)
    s, tensors = task.instantiate(task.config_space.default_config())
    mod = pt.build(s, tensors, target=t, name="bmm")
    assert mod.source.count(f"gemm_{dot_isa(t, 'int8').name}_") >= 2
    out = np.zeros((3, 37, 50), np.int32)
    mod(a, b, out)
    np.testing.assert_array_equal(out, np.matmul(a.astype(np.int64), b.astype(np.int64)))


def test_bfloat16_batch_matmul_uses_the_kernel_within_1e_2():
    t = pt.Target("x86-avx512-bf16")
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    rng = np.random.default_rng(10)
    a = rng.uniform(0, 1, (2, 16, 1024)).astype(numpy_dtype("bfloat16"))
    b = rng.uniform(0, 1, (2, 1024, 64)).astype(numpy_dtype("bfloat16"))
    task = at.Task("batch_matmul", (2, 16, 64, 1024, "bfloat16"), target=t)
    s, tensors = task.instantiate(task.config_space.default_config())
    mod = pt.build(s, tensors, target=t, name="bmm")
    assert "gemm_avx512bf16_" in mod.source
    out = mod(a, b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert np.max(np.abs(out.astype(np.float64) - ref) / ref) < 1e-2


@pytest.mark.parametrize("target", ["x86-avx512-bf16", "x86-avx2"])
def test_int8_matmul_in_row_blocks_packs_b_once_and_is_bit_exact(target):
    """Row blocks (a ragged last one) over a B packed once, before them."""
    mod, a, b, out = _run(
        pt.Target(target), (100, 70, 256, "int8"), {"block_i": 8, "tile_i": [-1, 4]}
    )
    src = mod.source
    assert src.index("B_packed[") < src.index("for (int64_t i_outer_outer")  # before the blocks
    assert f"gemm_{dot_isa(pt.Target(target), 'int8').name}_" in mod.source
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))


def test_dot_gemm_row_blocks_follow_the_targets_l2():
    """Blocked when A is over half of L2: the most row tiles filling a quarter of it."""

    def default_block(l2):
        t = pt.Target("x86-avx512-bf16", l2_bytes=l2)
        space = at.get_template("matmul").space(1024, 1024, 1024, "int8", target=t)
        cfg = space.default_config()
        return cfg["block_i"].val, cfg["tile_i"].size[-1]

    assert default_block(4 << 20) == (0, 8)  # A (1 MiB) fits in half of 4 MiB
    assert default_block(1 << 20) == (32, 8)  # 32 tiles x 8 rows x 1 KiB = 256 KiB
    assert default_block(512 << 10) == (16, 8)


# vpdpbusd (VEX) in portable C: this machine, and qemu 7, may lack AVX-VNNI, but the
# kernels written for it are still checked for what they compute
_DPBUSD256_IN_C = """#include <immintrin.h>
#include <stdint.h>
#define PT_DPBUSD256
static inline __m256i pt_dpbusd256(__m256i acc, __m256i a, __m256i b) {
  uint8_t u[32]; int8_t s[32]; uint32_t r[8];
  _mm256_storeu_si256((__m256i*)u, a);
  _mm256_storeu_si256((__m256i*)s, b);
  _mm256_storeu_si256((__m256i*)r, acc);
  for (int i = 0; i < 32; ++i) r[i / 4] += (uint32_t)((int32_t)u[i] * (int32_t)s[i]);
  return _mm256_loadu_si256((const __m256i*)r);
}
"""


@pytest.mark.parametrize(
    "template, args",
    [("matmul", (37, 50, 300)), ("conv2d_nchw", (2, 8, 11, 9, 32, 3, 3, 2, 1)),
     ("batch_matmul", (3, 37, 50, 300)), ("dense", (37, 50, 300))],
)  # fmt: skip
def test_avx_vnni_kernels_are_exact_with_the_instruction_in_c(template, args):
    """x86-avx2-vnni's int8 kernels, compiled with vpdpbusd replaced by the C above and
    without -mavxvnni, run on any AVX2 machine: bit-exact at the extremes."""
    t = pt.Target("x86-avx2-vnni")
    if not pt.Target("x86-avx2").can_run():
        pytest.skip("this CPU cannot run x86-avx2")
    s, tensors = at.get_template(template)(*args, "int8", target=t)
    src = pt.build(s, tensors, target=t, name="k", emit_only=True)
    assert "pt_dpbusd256(" in src
    so = compile_source(_DPBUSD256_IN_C + src, tuple(f for f in t.cflags if f != "-mavxvnni"))
    rng = np.random.default_rng(6)
    shapes = [tuple(int(d.value) for d in x.shape) for x in tensors]
    ins = [rng.integers(-128, 128, sh).astype(np.int8) for sh in shapes[:-1]]
    for x in ins:
        x.reshape(-1)[:64] = -128  # the extremes
    out = np.zeros(shapes[-1], np.int32)
    fn = ctypes.CDLL(so).k
    fn.restype = ctypes.c_int32
    assert fn(*(ctypes.c_void_p(a.ctypes.data) for a in (*ins, out))) == 0
    want = at.get_template(template).reference_output(ins, (*args, "int8"))[0]
    np.testing.assert_array_equal(out, want)
