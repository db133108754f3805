"""``pt.extern``: a tensor written whole by a C function of the user's (TVM's te.extern)."""

import numpy as np
import pytest

import pypto as pt

SRC = r"""
static void my_scale(const float* A, const double* B, float* C) {
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j)
      C[i * 5 + j] = 2.0f * A[i * 5 + j] + (float)B[j];
}
"""


def _program():
    A = pt.placeholder((6, 5), "float32", name="A")
    B = pt.placeholder((5,), "float64", name="B")
    T = pt.compute((6, 5), lambda i, j: A[i, j] + 1.0, name="T")
    C = pt.extern((6, 5), [T, B], "my_scale", SRC, name="C")
    D = pt.compute((6, 5), lambda i, j: C[i, j] * 3.0 + T[i, j], name="D")
    return A, B, T, C, D


def _want(a, b):
    t = a + np.float32(1.0)
    return (np.float32(2.0) * t + b.astype(np.float32)) * np.float32(3.0) + t


def _run(s, A, B, D):
    rng = np.random.default_rng(0)
    a, b = rng.random((6, 5)).astype(np.float32), rng.random(5)
    return pt.build(s, [A, B, D])(a, b), _want(a, b)


def test_extern_runs_between_pypto_stages():
    A, B, T, C, D = _program()
    s = pt.create_schedule(D.op)
    s[D].parallel(s[D].op.axis[0])
    got, want = _run(s, A, B, D)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    text = str(pt.lower(s, [A, B, D]))
    assert "call ext_my_scale_" in text and "(T[0] strides (5, 1), B[0] strides (1), C[0]" in text
    assert "pt.extern, one call of my_scale: reads every element of T, B" in s.explain()
    again = pt.Schedule.from_json(s.to_json(), [A, B, D])
    assert pt.build(again, [A, B, D]).source == pt.build(s, [A, B, D]).source


def test_the_same_function_twice_in_one_module():
    A, B, T, C, D = _program()
    C2 = pt.extern((6, 5), [C, B], "my_scale", SRC, name="C2")
    s = pt.create_schedule(C2.op)
    rng = np.random.default_rng(1)
    a, b = rng.random((6, 5)).astype(np.float32), rng.random(5)
    mod = pt.build(s, [A, B, C2])
    assert mod.source.count("static void my_scale(") == 1
    once = np.float32(2.0) * (a + np.float32(1.0)) + b.astype(np.float32)
    np.testing.assert_allclose(mod(a, b), np.float32(2.0) * once + b.astype(np.float32), rtol=1e-6)


def test_an_extern_stage_has_no_loops_to_schedule():
    A, B, T, C, D = _program()
    s = pt.create_schedule(D.op)
    i = s[C].op.axis[0]
    for call in (
        lambda: s[C].split(i, factor=2),
        lambda: s[C].parallel(i),
        lambda: s[C].compute_at(s[D], s[D].op.axis[0]),
        lambda: s.cache_write(C, "local"),
        lambda: s.rfactor(C, s[C].op.reduce_axis[0]),
    ):
        with pytest.raises(pt.ScheduleError, match=r"a pt.extern stage is one call of its C"):
            call()
    with pytest.raises(pt.ScheduleError, match=r"the pt.extern stage 'C' reads T through its C"):
        s[T].compute_inline()
    got, want = _run(s, A, B, D)  # every refusal left the schedule as it was
    np.testing.assert_allclose(got, want, rtol=1e-6)
    s[T].compute_at(s[D], s[D].op.axis[0])  # T's rows in D's loop: C reads them all before
    with pytest.raises(pt.ScheduleError, match=r"its consumer 'C' runs outside loop i of 'D'"):
        pt.lower(s, [A, B, D])


def test_a_cache_of_an_extern_input_is_what_the_function_reads():
    A, B, T, C, D = _program()
    s = pt.create_schedule(D.op)
    s.cache_read(T, "local", [C])
    got, want = _run(s, A, B, D)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_bad_extern_declarations():
    A = pt.placeholder((4,), "float32", name="A")
    with pytest.raises(pt.ScheduleError, match=r"shapes must be positive integer constants"):
        pt.extern((pt.var("n"),), [A], "f", "void f(const float* a, float* b) {}")
    with pytest.raises(pt.ScheduleError, match=r"input X: shapes must be positive integer"):
        pt.extern((4,), [pt.placeholder((pt.var("m"),), name="X")], "f", "void f() {}")
    with pytest.raises(ValueError, match=r"'f; system' is not a C identifier"):
        pt.extern((4,), [A], "f; system", "void f() {}")
    with pytest.raises(ValueError, match=r"'printf' is reserved"):
        pt.extern((4,), [A], "printf", "void printf() {}")
    with pytest.raises(ValueError, match=r"the C source does not define g\(\.\.\.\)"):
        pt.extern((4,), [A], "g", "void f(const float* a, float* b) {}")
    with pytest.raises(pt.ScheduleError, match=r"the output needs at least one dimension"):
        pt.extern((), [A], "f", "void f(const float* a, float* b) {}")
    with pytest.raises(TypeError, match=r"inputs must be a non-empty list of tensors"):
        pt.extern((4,), [], "f", "void f(float* b) {}")
    with pytest.raises(TypeError, match=r"unsupported dtype 'float7'"):
        pt.extern((4,), [A], "f", "void f(const float* a, float* b) {}", dtype="float7")
    with pytest.raises(pt.ScheduleError, match=r"pt.extern E: one output, of one shape; got 2"):
        pt.extern([(4,), (4,)], [A], "f", "void f(const float* a, float* b) {}", name="E")


def test_tvm_list_of_one_shape():
    """TVM's ``te.extern([shape], ...)`` form: a list holding the output's shape."""
    A = pt.placeholder((6, 5), "float32", name="A")
    B = pt.placeholder((5,), "float64", name="B")
    C = pt.extern([(6, 5)], [A, B], "my_scale", SRC, name="C")
    assert tuple(int(d.value) for d in C.shape) == (6, 5)
    a, b = np.ones((6, 5), np.float32), np.arange(5.0)
    got = pt.build(pt.create_schedule(C.op), [A, B, C])(a, b)
    np.testing.assert_allclose(got, 2.0 * a + b.astype(np.float32))


def test_extern_is_emitted_for_another_target():
    A, B, T, C, D = _program()
    s = pt.create_schedule(D.op)
    source = pt.build(s, [A, B, D], target="aarch64-neon", emit_only=True)
    assert "static void my_scale(" in source
    assert "  my_scale(v_pt_in0, v_pt_in1, v_pt_out);" in source


def test_the_profile_counts_no_flops_for_the_opaque_call():
    A, B, T, C, D = _program()
    s = pt.create_schedule(D.op)
    mod = pt.build(s, [A, B, D])
    rng = np.random.default_rng(2)
    prof = mod.profile(rng.random((6, 5)).astype(np.float32), rng.random(5))
    row = next(e for e in prof if e.stage == "C")
    assert row.flops == 0 and row.bytes == 6 * 5 * 4 + 5 * 8 + 6 * 5 * 4


def test_two_externs_of_one_c_source_and_one_function_at_two_shapes():
    """The source was pasted once per extern (gcc: redefinition of 'twice'), and one
    function at two shapes of one rank was refused as two intrinsics of one name."""
    src = r"""
static void twice(const float* x, float* y) { for (int i = 0; i < 32; ++i) y[i] = 2 * x[i]; }
static void plus1(const float* x, float* y) { for (int i = 0; i < 32; ++i) y[i] = x[i] + 1; }
"""
    X = pt.placeholder((4, 8), name="X")
    W = pt.placeholder((8, 4), name="W")
    Y = pt.extern((4, 8), [X], "twice", src, name="Y")
    Z = pt.extern((4, 8), [Y], "plus1", src, name="Z")
    V = pt.extern((8, 4), [W], "twice", src, name="V")
    mod = pt.build(pt.create_schedule([Z.op, V.op]), [X, W, Z, V])
    x, w = np.arange(32, dtype=np.float32).reshape(4, 8), np.ones((8, 4), np.float32)
    z, v = mod(x, w)
    np.testing.assert_array_equal(z, 2 * x + 1)
    np.testing.assert_array_equal(v, 2 * w)


@pytest.mark.parametrize("fn", ["out", "in0", "default_function"])
def test_an_extern_function_named_like_pyptos_own_names(fn):
    # the wrapper's parameters (out, in0) hid the function; the kernel's own name clashed
    body = "{ for (int i = 0; i < 8; ++i) y[i] = 3 * x[i]; }"
    src = f"static void {fn}(const float* x, float* y) {body}"
    X = pt.placeholder((8,), name="X")
    Y = pt.extern((8,), [X], fn, src, name="Y")
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(pt.build(pt.create_schedule(Y.op), [X, Y])(x), 3 * x)


def test_inlining_an_extern_stage_says_what_it_is():
    src = "static void cp(const float* x, float* y) { for (int i = 0; i < 8; ++i) y[i] = x[i]; }"
    X = pt.placeholder((8,), name="X")
    R = pt.extern((8,), [X], "cp", src, name="R")
    Y = pt.compute((8,), lambda i: R[i] + 1.0, name="Y")
    with pytest.raises(pt.ScheduleError, match="compute_inline on stage 'R': a pt.extern stage"):
        pt.create_schedule(Y.op)[R].compute_inline()


@pytest.mark.parametrize("shape", [(1,), (3, 1), (1, 4)])
def test_dimensions_of_one_element_are_whole_row_major_buffers(shape):
    """Was: the stride of a one-element dimension comes as 0, the wrapper's row-major
    check trapped and the process died (Illegal instruction)."""
    n = int(np.prod(shape))
    src = f"static void rev(const double* x, double* y) {{ for (int i = 0; i < {n}; ++i) "
    src += f"y[i] = x[{n} - 1 - i]; }}"
    X = pt.placeholder(shape, "float64", name="X")
    R = pt.extern(shape, [X], "rev", src, name="R", dtype="float64")
    Y = pt.compute(shape, lambda *i: R[i] + 1.0, name="Y")
    x = np.arange(1.0, n + 1).reshape(shape)
    got = pt.build(pt.create_schedule(Y.op), [X, Y])(x)
    np.testing.assert_array_equal(got, x.ravel()[::-1].reshape(shape) + 1)
