"""Tensor intrinsics: declared C kernels replacing a region of loops (``tensorize``).

Every tensorized schedule is compared with numpy; every refused one expects
the specific error. The conv micro-kernels of the conv2d template are checked
for every SIMD target: run where this machine runs the target's code (natively,
or under qemu with the cross compiler), and disassembled everywhere.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import autotune
import pypto as pt
from autotune.templates import ukernels
from pypto import emulate, runtime
from pypto.target import cross_compiler

DOT4 = r"""
static inline void dot4(const float* a, int64_t a_s0, const float* b, int64_t b_s0,
                        int64_t b_s1, float* c, int64_t c_s0) {
  for (int i = 0; i < 4; ++i) {
    float t = 0.0f;
    for (int k = 0; k < 16; ++k) t += a[k * a_s0] * b[i * b_s0 + k * b_s1];
    c[i * c_s0] = t;
  }
}
"""


def _dot4(body=None, reducer=pt.sum, n=4, source=DOT4, name="dot4"):
    a = pt.placeholder((16,), name="a")
    b = pt.placeholder((n, 16), name="b")
    k = pt.reduce_axis((0, 16), name="k")
    body = body or (lambda a, b, i, k: a[k] * b[i, k])
    c = pt.compute((n,), lambda i: reducer(body(a, b, i, k), axis=k), name="c")
    return pt.decl_tensor_intrin(c.op, name, source)


def _abt(n=50):
    """C = A @ B.T with A, B n x 16."""
    A = pt.placeholder((n, 16), name="A")
    B = pt.placeholder((n, 16), name="B")
    kk = pt.reduce_axis((0, 16), name="kk")
    C = pt.compute((n, n), lambda i, j: pt.sum(A[i, kk] * B[j, kk], axis=kk), name="C")
    return A, B, C, kk


def _run_abt(s, A, B, C, n=50):
    mod = pt.build(s, [A, B, C])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 16)).astype("float32")
    y = rng.standard_normal((n, 16)).astype("float32")
    z = np.zeros((n, n), "float32")
    mod(x, y, z)
    np.testing.assert_allclose(z, x @ y.T, rtol=1e-5, atol=1e-5)
    return mod


def test_signature_lists_inputs_in_order_then_output():
    assert _dot4().signature == (
        "void dot4(const float* a, int64_t a_s0, const float* b, int64_t b_s0, "
        "int64_t b_s1, float* c, int64_t c_s0)"
    )


@pytest.mark.parametrize("n", [48, 50])  # whole tiles only; a partial last tile
def test_tensorized_dot_matches_numpy(n):
    A, B, C, _ = _abt(n)
    s = pt.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].tensorize(ji, _dot4())
    mod = _run_abt(s, A, B, C, n)
    assert "dot4(A + i * 16, 1, B + j_outer * 64, 16, 1, C + (i * " in mod.source
    # the partial tile (n = 50: columns 48, 49) keeps the loops
    assert ("for (int64_t kk" in mod.source) == (n % 4 != 0)
    assert {"stage": "C", "prim": "tensorize", "loop": "j.inner", "intrin": "dot4"} in s.steps


DOT4_BF16 = r"""
static inline float dot4_bf16_load(uint16_t b) {
  union { uint32_t u; float f; } v = { (uint32_t)b << 16 };
  return v.f;
}
static inline void dot4_bf16(const uint16_t* a, int64_t a_s0, const uint16_t* b, int64_t b_s0,
                             int64_t b_s1, uint16_t* c, int64_t c_s0) {
  for (int i = 0; i < 4; ++i) {
    float t = 0.0f;
    for (int k = 0; k < 256; ++k)
      t += dot4_bf16_load(a[k * a_s0]) * dot4_bf16_load(b[i * b_s0 + k * b_s1]);
    union { float f; uint32_t u; } v = { t };
    c[i * c_s0] = (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
  }
}
"""


def test_a_bfloat16_reduction_accumulates_in_float32_around_its_intrinsic():
    """The loops a ragged tile keeps (columns 48, 49 of 50) sum in float32 and round once,
    as the intrinsic does: summed in bfloat16, 256 products near 0.25 lose 10-20%."""
    pytest.importorskip("ml_dtypes")
    a = pt.placeholder((256,), "bfloat16", name="a")
    b = pt.placeholder((4, 256), "bfloat16", name="b")
    k = pt.reduce_axis((0, 256), name="k")
    c = pt.compute((4,), lambda i: pt.sum(a[k] * b[i, k], axis=k), name="c")
    intrin = pt.decl_tensor_intrin(c.op, "dot4_bf16", DOT4_BF16)
    A = pt.placeholder((8, 256), "bfloat16", name="A")
    B = pt.placeholder((50, 256), "bfloat16", name="B")
    kk = pt.reduce_axis((0, 256), name="kk")
    C = pt.compute((8, 50), lambda i, j: pt.sum(A[i, kk] * B[j, kk], axis=kk), name="C")
    s = pt.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].tensorize(ji, intrin)
    mod = pt.build(s, [A, B, C])
    assert "C_acc" in str(pt.lower(s, [A, B, C]))  # the ragged tile's float32 accumulator
    rng = np.random.default_rng(0)
    x = rng.uniform(0.4, 0.6, (8, 256)).astype(pt.dtypes.numpy_dtype("bfloat16"))
    y = rng.uniform(0.4, 0.6, (50, 256)).astype(pt.dtypes.numpy_dtype("bfloat16"))
    ref = x.astype(np.float64) @ y.astype(np.float64).T
    got = mod(x, y).astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=8e-3)


def test_strides_are_solved_per_dimension():
    """A transposed, strided read: the intrinsic sees b[i, k] = B[k*2, j*4 + i]."""
    A = pt.placeholder((12, 16), name="A")
    B = pt.placeholder((32, 12), name="B")
    kk = pt.reduce_axis((0, 16), name="kk")
    C = pt.compute((12, 12), lambda i, j: pt.sum(A[i, kk] * B[kk * 2, j], axis=kk), name="C")
    s = pt.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].tensorize(ji, _dot4())
    mod = pt.build(s, [A, B, C])
    assert "B + j_outer * 4, 1, 24," in mod.source  # b_s0 = 1 (along j), b_s1 = 24 (2 rows)
    x = np.random.rand(12, 16).astype("float32")
    y = np.random.rand(32, 12).astype("float32")
    z = np.zeros((12, 12), "float32")
    mod(x, y, z)
    np.testing.assert_allclose(z, x @ y[::2], rtol=1e-5)


def test_elementwise_intrinsic_on_a_2d_tile():
    src = r"""
static void add_tile(const float* x, int64_t x0, int64_t x1, const float* y, int64_t y0,
                     int64_t y1, float* z, int64_t z0, int64_t z1) {
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 8; ++j) z[i * z0 + j * z1] = x[i * x0 + j * x1] + y[i * y0 + j * y1];
}
"""
    x = pt.placeholder((2, 8), name="x")
    y = pt.placeholder((2, 8), name="y")
    z = pt.compute((2, 8), lambda i, j: x[i, j] + y[i, j], name="z")
    intrin = pt.decl_tensor_intrin(z.op, "add_tile", src)
    X = pt.placeholder((6, 17), name="X")
    Y = pt.placeholder((17, 6), name="Y")
    Z = pt.compute((6, 17), lambda i, j: Y[j, i] + X[i, j], name="Z")  # operands swapped
    s = pt.create_schedule(Z.op)
    io, jo, ii, ji = s[Z].tile(Z.op.axis[0], Z.op.axis[1], 2, 8)
    s[Z].tensorize(ii, intrin)
    mod = pt.build(s, [X, Y, Z])
    assert "add_tile(" in mod.source
    a = np.random.rand(6, 17).astype("float32")
    b = np.random.rand(17, 6).astype("float32")
    out = np.zeros((6, 17), "float32")
    mod(a, b, out)
    np.testing.assert_allclose(out, a + b.T, rtol=1e-6)


# ---------------------------------------------------------------- refused schedules


def _refused(setup, match):
    A, B, C, kk = _abt(48)
    s = pt.create_schedule(C.op)
    setup(s, C, kk)
    with pytest.raises(pt.ScheduleError, match=match):
        pt.lower(s, [A, B, C])


def test_reduce_loop_outside_the_region_is_refused():
    def setup(s, C, kk):
        jo, ji = s[C].split(C.op.axis[1], factor=4)
        ko, ki = s[C].split(kk, factor=8)
        s[C].reorder(C.op.axis[0], jo, ko, ji, ki)
        s[C].tensorize(ji, _dot4())

    _refused(setup, r"reduce loop kk.outer lies outside the tensorized loops")


def test_extent_mismatch_is_refused():
    def setup(s, C, kk):
        jo, ji = s[C].split(C.op.axis[1], factor=8)
        s[C].tensorize(ji, _dot4())

    _refused(setup, r"loops \(j.inner:8, kk:16\) do not match the axes of c \(i:4, k:16\)")


def test_other_body_is_refused():
    def setup(s, C, kk):
        jo, ji = s[C].split(C.op.axis[1], factor=4)
        s[C].tensorize(ji, _dot4(body=lambda a, b, i, k: a[k] + b[i, k]))

    _refused(setup, "not the same body")


def test_operands_in_another_order_are_refused_with_a_hint():
    """Matched as written (as TVM's structural match): B[j, kk] * A[i, kk] against
    a[k] * b[i, k] pairs a with B; the message says to check the operands' order."""

    def setup(s, C, kk):
        jo, ji = s[C].split(C.op.axis[1], factor=4)
        s[C].tensorize(ji, _dot4(body=lambda a, b, i, k: b[i, k] * a[k]))

    _refused(setup, r"are not the intrinsic's indices times strides \(the body is matched "
             r"as written: are its operands in the intrinsic's order\?\)")  # fmt: skip


def test_other_reducer_is_refused():
    def setup(s, C, kk):
        jo, ji = s[C].split(C.op.axis[1], factor=4)
        s[C].tensorize(ji, _dot4(reducer=pt.max))

    _refused(setup, "the stage reduces with sum, the intrinsic with max")


@pytest.mark.parametrize("stage_init, intrin_init, match", [
    (lambda t, i, j: t[i, j], None,
     r"starts from init=I\[i, j\] \(read per output\), the intrinsic's from the identity"),
    (lambda t, i, j: pt.const(1.0, "float32"), None,
     "starts from init=1.0, the intrinsic's from the identity"),
    (lambda t, i, j: pt.const(5.0, "float32"), 0.0,
     "starts from init=5.0, the intrinsic's from init=0.0"),
    (lambda t, i, j: t[i, j], "tensor",  # an init read from a tensor: the call passes none
     r"starts from init=I\[i, j\] \(read per output\), the intrinsic's from init=I\[i"),
])  # fmt: skip
def test_an_init_the_intrinsic_does_not_start_from_is_refused(stage_init, intrin_init, match):
    """The call's sums start where the intrinsic's do: a stage whose init= differs would
    lose it (it once did, silently)."""
    a = pt.placeholder((16,), name="a")
    b = pt.placeholder((4, 16), name="b")
    k = pt.reduce_axis((0, 16), name="k")
    i_init = pt.placeholder((4, 4), name="I")

    def init(i):
        if intrin_init == "tensor":
            return i_init[i, i]
        return None if intrin_init is None else pt.const(intrin_init, "float32")

    c = pt.compute((4,), lambda i: pt.sum(a[k] * b[i, k], axis=k, init=init(i)), name="c")
    dot4 = pt.decl_tensor_intrin(c.op, "dot4", DOT4)
    A, B, Ini = (pt.placeholder((8, 16), name=x) for x in "ABI")
    kk = pt.reduce_axis((0, 16), name="kk")
    C = pt.compute(
        (8, 8),
        lambda i, j: pt.sum(A[i, kk] * B[j, kk], axis=kk, init=stage_init(Ini, i, j)),
        name="C",
    )
    s = pt.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].tensorize(ji, dot4)
    with pytest.raises(pt.ScheduleError, match=f"tensorize\\(dot4\\) on stage 'C': .*{match}"):
        pt.build(s, [A, B, Ini, C])


def test_parallel_loop_inside_is_refused():
    def setup(s, C, kk):
        jo, ji = s[C].split(C.op.axis[1], factor=4)
        s[C].parallel(ji)
        s[C].tensorize(ji, _dot4())

    _refused(setup, "loop j.inner is parallel")


def test_stage_attached_inside_is_refused():
    A = pt.placeholder((48, 16), name="A")
    B = pt.placeholder((48, 16), name="B")
    B2 = pt.compute((48, 16), lambda j, k: B[j, k] * 2.0, name="B2")
    kk = pt.reduce_axis((0, 16), name="kk")
    C = pt.compute((48, 48), lambda i, j: pt.sum(A[i, kk] * B2[j, kk], axis=kk), name="C")
    s = pt.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[B2].compute_at(s[C], ji)
    s[C].tensorize(ji, _dot4())
    with pytest.raises(pt.ScheduleError, match="stage 'B2' is computed at loop j.inner"):
        pt.lower(s, [A, B, C])


def test_loop_split_after_tensorize_is_refused():
    def setup(s, C, kk):
        jo, ji = s[C].split(C.op.axis[1], factor=4)
        s[C].tensorize(ji, _dot4())
        s[C].split(ji, factor=2)

    _refused(setup, "loop j.inner is no longer a loop of the stage")


def test_tensorize_needs_an_intrinsic_and_a_current_loop():
    A, B, C, kk = _abt(48)
    s = pt.create_schedule(C.op)
    with pytest.raises(pt.ScheduleError, match="expected pt.decl_tensor_intrin"):
        s[C].tensorize(C.op.axis[1], "dot4")
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    with pytest.raises(pt.ScheduleError, match="loop j is not a current loop"):
        s[C].tensorize(C.op.axis[1], _dot4())


@pytest.mark.parametrize(
    "name, source, match",
    [
        ("dot4; system", DOT4, "is not a C identifier"),
        ("pt_dot", DOT4.replace("dot4", "pt_dot"), "is reserved"),
        ("float", DOT4, "is reserved"),
        ("dot8", DOT4, "does not define dot8"),
    ],
)
def test_declaration_checks_the_c_name(name, source, match):
    with pytest.raises(ValueError, match=match):
        _dot4(source=source, name=name)


def test_declaration_checks_the_compute():
    a = pt.placeholder((16,), name="a")
    t = pt.compute((16,), lambda i: a[i] * 2.0, name="t")
    k = pt.reduce_axis((0, 16), name="k")
    c = pt.compute((4,), lambda i: pt.sum(t[k], axis=k), name="c")
    with pytest.raises(ValueError, match="reads t, which is not a placeholder"):
        pt.decl_tensor_intrin(c.op, "dot4", DOT4)
    b = pt.placeholder((16,), name="b")
    sq = pt.compute((4,), lambda i: pt.sum(b[(k * k) % 16], axis=k), name="sq")
    with pytest.raises(ValueError, match="is not affine in the axes"):
        pt.decl_tensor_intrin(sq.op, "dot4", DOT4)


# ---------------------------------------------------------------- conv micro-kernels


SIMD_TARGETS = ("x86-avx512", "x86-avx2", "aarch64-neon")


@pytest.mark.parametrize("target", SIMD_TARGETS)
@pytest.mark.parametrize(
    "args, tile",  # args with K in vectors of the target; tile (rows, columns, vectors)
    [
        ((1, 5, 9, 11, 2, 3, 3, 1, 1), (1, 3, 2)),  # ragged last column tile
        ((1, 4, 8, 8, 4, 3, 3, 1, 1), (1, 2, 4)),  # more vectors than pixels: pixels held
        ((2, 3, 10, 9, 1, 3, 3, 2, 1), (1, 4, 1)),  # stride 2, batch 2
        ((1, 6, 7, 7, 2, 1, 1, 1, 0), (2, 3, 2)),  # 1x1, no padding, two rows
        ((1, 5, 9, 13, 2, 3, 3, 1, 1), (2, 6, 2)),  # copy: four columns, then two; ragged
        ((1, 3, 8, 17, 1, 3, 3, 1, 1), (1, 8, 1)),  # copy: twice four columns
    ],
)
def test_conv_micro_kernel_matches_reference(target, args, tile):
    """The micro-kernel of each SIMD target and its tile copy back to NCHW (transposed
    in registers), run natively or under qemu, against numpy."""
    t = pt.Target(target)
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    L = t.vector_lanes("float32")
    args = (*args[:4], args[4] * L, *args[5:])
    hb, wb, nk = tile
    task = autotune.Task("conv2d_nchw", args, target=t)
    cfg = task.config_space.default_config().values
    cfg = {**cfg, "ukernel": 1, "vk_h": [-1, hb], "vk_w": [-1, wb], "vk_k": [-1, nk * L]}
    s, tensors = task.instantiate(task.config_space.config(cfg))
    mod = pt.build(s, tensors, target=t)
    isa = ukernels.simd_isa(t).name
    tile_name = f"conv_tile_{isa}_c{args[1]}_r{args[5]}s{args[6]}_st{args[7]}_{hb}x{wb}x{nk * L}("
    assert tile_name in mod.source
    assert f"tile_transpose_{isa}_float32_{hb}x{wb}x{nk * L}(" in mod.source
    rng = np.random.default_rng(1)
    data, weight, out = ([int(d.value) for d in t.shape] for t in tensors)
    data = rng.standard_normal(data).astype("float32")
    weight = rng.standard_normal(weight).astype("float32")
    out = np.zeros(out, "float32")
    mod(data, weight, out)
    ref = task.template.reference_output([data, weight], args)[-1]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


# the vector FMA of each ISA's micro-kernel, as objdump prints it
_FMA = {
    "x86-avx512": (None, r"vfmadd\w*ps\s+.*zmm"),
    "x86-avx2": (None, r"vfmadd\w*ps\s+.*ymm"),
    "aarch64-neon": ("aarch64-linux-gnu-objdump", r"fmla\s+v\d+\.4s"),
}


@pytest.mark.parametrize("target", SIMD_TARGETS)
def test_conv_micro_kernel_object_has_the_target_vector_fmas(target):
    """Built for each target on any host (its flags, or its cross compiler): the object
    holds the micro-kernel's full-width FMAs (zmm on AVX-512, ymm on AVX2, fmla on NEON)."""
    t = pt.Target(target)
    objdump, pattern = _FMA[target]
    objdump = shutil.which(objdump or "objdump")
    if t.compiler_prefix is not None and cross_compiler(t) is None or objdump is None:
        pytest.skip(f"no compiler or objdump for {target} here")
    L = t.vector_lanes("float32")
    task = autotune.Task("conv2d_nchw", (1, 8, 10, 10, 2 * L, 3, 3, 1, 1), target=t)
    cfg = {**task.config_space.default_config().values, "ukernel": 1}
    s, tensors = task.instantiate(task.config_space.config(cfg))
    src = pt.build(s, tensors, target=t, name="conv", emit_only=True)
    cc = [cross_compiler(t)] if t.compiler_prefix else None
    so = runtime.compile_source(src, t.cflags, cc=cc)
    dis = subprocess.run([objdump, "-d", so], capture_output=True, text=True, check=True).stdout
    assert re.search(pattern, dis), f"no {pattern!r} in the object for {target}"


def test_two_intrinsics_with_one_name_are_refused():
    A, B, C, kk = _abt(48)
    D = pt.compute((48, 48), lambda i, j: pt.sum(A[i, kk] * B[j, kk], axis=kk), name="D")
    s = pt.create_schedule([C.op, D.op])
    for T, src in ((C, DOT4), (D, DOT4.replace("float t = 0.0f;", "float t = 0.0f; /* v2 */"))):
        jo, ji = s[T].split(T.op.axis[1], factor=4)
        s[T].tensorize(ji, _dot4(source=src))
    with pytest.raises(pt.BuildError, match="two tensor intrinsics are named dot4"):
        pt.build(s, [A, B, C, D], emit_only=True)


FENCE = "__atomic_thread_fence(__ATOMIC_RELEASE);"


@pytest.mark.parametrize("parallel", [True, False])
def test_an_intrinsic_fence_runs_once_per_parallel_iteration_or_at_the_end(parallel):
    A, B, C, _ = _abt(48)
    a = pt.placeholder((16,), name="a")
    b = pt.placeholder((4, 16), name="b")
    k = pt.reduce_axis((0, 16), name="k")
    c = pt.compute((4,), lambda i: pt.sum(a[k] * b[i, k], axis=k), name="c")
    intrin = pt.decl_tensor_intrin(c.op, "dot4", DOT4, fence=FENCE)
    s = pt.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].tensorize(ji, intrin)
    if parallel:
        s[C].parallel(C.op.axis[0])
    lines = _run_abt(s, A, B, C, 48).source.splitlines()
    call = next(n for n, x in enumerate(lines) if "dot4(A + " in x)
    (fence,) = [n for n, x in enumerate(lines) if FENCE in x]  # once, not per call
    assert fence > call and all(x.strip() == "}" for x in lines[call + 1 : fence])
    depth = len(lines[fence]) - len(lines[fence].lstrip())
    assert depth == (4 if parallel else 2)  # the i loop's body, or the function's
    assert lines[fence + 1].strip() == ("}" if parallel else "return 0;")


def test_a_fence_that_is_not_c_statements_is_refused():
    a = pt.placeholder((16,), name="a")
    c = pt.compute((16,), lambda i: a[i], name="c")
    with pytest.raises(ValueError, match="fence must be C statements"):
        pt.decl_tensor_intrin(c.op, "cp", "void cp(...) {}", fence="} x();")


def test_a_symbolic_stride_under_tensorize_is_named():
    src = ("static void col4(const float* x, int64_t xs, float* y, int64_t ys) "
           "{ for (int i = 0; i < 4; ++i) y[i * ys] = x[i * xs] + 1; }")  # fmt: skip
    x = pt.placeholder((4,), name="x")
    col4 = pt.decl_tensor_intrin(pt.compute((4,), lambda i: x[i] + 1.0, name="c").op, "col4", src)
    m = pt.var("m")
    X = pt.placeholder((8, m), name="X")
    Y = pt.compute((8, m), lambda i, j: X[i, j] + 1.0, name="Y")
    s = pt.create_schedule(Y.op)
    io, ii = s[Y].split(Y.op.axis[0], 4)
    s[Y].reorder(io, Y.op.axis[1], ii)
    s[Y].tensorize(ii, col4)
    with pytest.raises(pt.ScheduleError, match=r"it moves by m \(a size\) along them; an "
                       "intrinsic's strides must be constants"):  # fmt: skip
        pt.build(s, [X, Y])
