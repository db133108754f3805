"""Tensor intrinsics: declared C kernels replacing a region of loops (``tensorize``).

Every tensorized schedule is compared with numpy; every refused one expects
the specific error. The conv micro-kernels of the conv2d template run where
the host has AVX2 and FMA.
"""

from __future__ import annotations

import numpy as np
import pytest

import autotune
import pypto as pt
from autotune.templates import ukernels

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


def test_other_reducer_is_refused():
    def setup(s, C, kk):
        jo, ji = s[C].split(C.op.axis[1], factor=4)
        s[C].tensorize(ji, _dot4(reducer=pt.max))

    _refused(setup, "the stage reduces with sum, the intrinsic with max")


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


needs_avx2 = pytest.mark.skipif(not ukernels.has_conv_tile(), reason="host without AVX2 + FMA")


@needs_avx2
@pytest.mark.parametrize(
    "args, tile",
    [
        ((1, 5, 9, 11, 16, 3, 3, 1, 1), (1, 3, 16)),  # ragged last column tile
        ((1, 4, 8, 8, 32, 3, 3, 1, 1), (2, 2, 32)),  # two rows, pixels held
        ((2, 3, 10, 9, 8, 3, 3, 2, 1), (1, 4, 8)),  # stride 2, batch 2
        ((1, 6, 7, 7, 16, 1, 1, 1, 0), (1, 7, 16)),  # 1x1, no padding
    ],
)
def test_conv_micro_kernel_matches_reference(args, tile):
    hb, wb, kb = tile
    task = autotune.Task("conv2d_nchw", args)
    cfg = task.config_space.default_config().values
    cfg = {**cfg, "ukernel": 1, "vk_h": [-1, hb], "vk_w": [-1, wb], "vk_k": [-1, kb]}
    s, tensors = task.instantiate(task.config_space.config(cfg))
    mod = pt.build(s, tensors)
    assert f"conv_tile_c{args[1]}_r{args[5]}s{args[6]}_st{args[7]}_{hb}x{wb}x{kb}(" in mod.source
    rng = np.random.default_rng(1)
    data, weight, out = ([int(d.value) for d in t.shape] for t in tensors)
    data = rng.standard_normal(data).astype("float32")
    weight = rng.standard_normal(weight).astype("float32")
    out = np.zeros(out, "float32")
    mod(data, weight, out)
    ref = task.template.reference_output([data, weight], args)[-1]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_two_intrinsics_with_one_name_are_refused():
    A, B, C, kk = _abt(48)
    D = pt.compute((48, 48), lambda i, j: pt.sum(A[i, kk] * B[j, kk], axis=kk), name="D")
    s = pt.create_schedule([C.op, D.op])
    for T, src in ((C, DOT4), (D, DOT4.replace("float t = 0.0f;", "float t = 0.0f; /* v2 */"))):
        jo, ji = s[T].split(T.op.axis[1], factor=4)
        s[T].tensorize(ji, _dot4(source=src))
    with pytest.raises(pt.BuildError, match="two tensor intrinsics are named dot4"):
        pt.build(s, [A, B, C, D], emit_only=True)
