"""TVM's tir helpers under their TVM names (``pypto.ops``): math functions against
numpy, max/min values, all/any, the integer divisions, size_var, and the TVM spellings
of lower and of targets."""

import math

import numpy as np
import pytest

import pypto as pt

RNG = np.random.default_rng(5)

# name -> (pt function, numpy reference, input range)
UNARY = {
    "sin": (pt.sin, np.sin, (-4, 4)),
    "cos": (pt.cos, np.cos, (-4, 4)),
    "tan": (pt.tan, np.tan, (-1.2, 1.2)),
    "asin": (pt.asin, np.arcsin, (-1, 1)),
    "acos": (pt.acos, np.arccos, (-1, 1)),
    "atan": (pt.atan, np.arctan, (-5, 5)),
    "sinh": (pt.sinh, np.sinh, (-3, 3)),
    "cosh": (pt.cosh, np.cosh, (-3, 3)),
    "asinh": (pt.asinh, np.arcsinh, (-5, 5)),
    "acosh": (pt.acosh, np.arccosh, (1, 5)),
    "atanh": (pt.atanh, np.arctanh, (-0.9, 0.9)),
    "exp2": (pt.exp2, np.exp2, (-5, 5)),
    "expm1": (pt.expm1, np.expm1, (-1e-3, 1e-3)),
    "log2": (pt.log2, np.log2, (0.1, 10)),
    "log10": (pt.log10, np.log10, (0.1, 10)),
    "log1p": (pt.log1p, np.log1p, (-1e-3, 1e-3)),
    "trunc": (pt.trunc, np.trunc, (-5, 5)),
    "nearbyint": (pt.nearbyint, np.rint, (-5, 5)),
}
BINARY = {
    "atan2": (pt.atan2, np.arctan2),
    "fmod": (pt.fmod, np.fmod),
    "hypot": (pt.hypot, np.hypot),
    "copysign": (pt.copysign, np.copysign),
    "nextafter": (pt.nextafter, np.nextafter),
    "power": (lambda a, b: pt.power(pt.abs(a), b), lambda a, b: np.power(np.abs(a), b)),
}


def _build_map(f, dtype, nargs=1, n=37):
    ins = [pt.placeholder((n,), dtype, name=f"A{k}") for k in range(nargs)]
    B = pt.compute((n,), lambda i: f(*(A[i] for A in ins)), name="B")
    s = pt.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(ii)
    return pt.build(s, [*ins, B])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_math_matches_numpy(name, dtype):
    f, ref, (lo, hi) = UNARY[name]
    a = RNG.uniform(lo, hi, 37).astype(dtype)
    got = _build_map(f, dtype)(a)
    tol = 4e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, ref(a), rtol=tol, atol=tol * 1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_math_matches_numpy(name, dtype):
    f, ref = BINARY[name]
    a, b = RNG.uniform(-3, 3, 37).astype(dtype), RNG.uniform(-3, 3, 37).astype(dtype)
    got = _build_map(f, dtype, nargs=2)(a, b)
    tol = 4e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, ref(a, b), rtol=tol, atol=tol * 1e-3)


def test_predicates_and_float16_operands():
    a = np.array([0.5, np.nan, np.inf, -np.inf, -2.0, 0.0, -np.nan, 3.0], "float32")
    A = pt.placeholder((8,), "float32", name="A")
    H = pt.placeholder((8,), "float16", name="H")
    codes = pt.compute(
        (8,),
        lambda i: (
            pt.cast("int32", pt.isnan(A[i])) * 4
            + pt.cast("int32", pt.isinf(A[i])) * 2
            + pt.cast("int32", pt.isfinite(A[i]))
        ),
        name="codes",
    )
    S = pt.compute((8,), lambda i: pt.sin(H[i]), name="S")  # computed in float32
    s = pt.create_schedule([codes.op, S.op])
    s[codes].vectorize(codes.op.axis[0])
    h = RNG.uniform(-3, 3, 8).astype("float16")
    got, sin_h = pt.build(s, [A, H, codes, S])(a, h)
    want = np.isnan(a) * 4 + np.isinf(a) * 2 + np.isfinite(a)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(sin_h, np.sin(h.astype(np.float32)).astype(np.float16))


def test_math_refusals_name_the_function():
    x = pt.placeholder((4,), "int32", name="x")
    with pytest.raises(TypeError, match=r"pt.sin needs a float operand, got int32; use pt.cast"):
        pt.sin(x[0])
    with pytest.raises(TypeError, match=r"pt.atan2 takes 2 argument\(s\), got 1"):
        pt.atan2(pt.const(1.0, "float32"))


@pytest.mark.parametrize(
    "dtype", ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64"]
)
def test_max_and_min_values(dtype):
    top, bottom = pt.max_value(dtype), pt.min_value(dtype)
    assert top.dtype == bottom.dtype == dtype
    if dtype == "bfloat16":
        assert top.value == (2 - 2**-7) * 2.0**127 and bottom.value == -top.value
    elif dtype.startswith("float"):
        assert top.value == float(np.finfo(dtype).max) and bottom.value == -top.value
    else:
        assert (top.value, bottom.value) == (np.iinfo(dtype).max, np.iinfo(dtype).min)


def test_min_value_is_a_hand_written_max_identity():
    # TVM's tutorial argmax: the value starts at min_value, not -inf
    def combine(x, y):
        take = x[1] >= y[1]
        return pt.select(take, x[0], y[0]), pt.select(take, x[1], y[1])

    argmax = pt.comm_reducer(
        combine, lambda t0, t1: (pt.const(-1, t0), pt.min_value(t1)), name="argmax"
    )
    V = pt.placeholder((6, 9), "int32", name="V")
    k = pt.reduce_axis((0, 9), name="k")
    idx, val = pt.compute((6,), lambda i: argmax((k, V[i, k]), axis=k), name="am")
    v = RNG.integers(-(2**31), 2**31 - 1, (6, 9)).astype("int32")
    got_i, got_v = pt.build(pt.create_schedule(idx.op), [V, idx, val])(v)
    np.testing.assert_array_equal(got_i, v.argmax(1))
    np.testing.assert_array_equal(got_v, v.max(1))


def test_all_and_any_guard_a_padded_read():
    n = pt.size_var("n")
    A = pt.placeholder((n,), "float32", name="A")
    inner = pt.compute(
        (n,), lambda i: pt.select(pt.all(i >= 1, i < n - 1), A[i], pt.const(0.0)), name="inner"
    )
    edge = pt.compute(
        (n,), lambda i: pt.select(pt.any(i == 0, i == n - 1), A[i], pt.const(0.0)), name="edge"
    )
    a = RNG.random(7).astype("float32")
    got_in, got_edge = pt.build(pt.create_schedule([inner.op, edge.op]), [A, inner, edge])(a)
    np.testing.assert_array_equal(got_in, np.r_[0, a[1:-1], 0])
    np.testing.assert_array_equal(got_edge, np.r_[a[0], np.zeros(5), a[-1]])
    with pytest.raises(TypeError, match="pt.all needs at least one condition"):
        pt.all()
    with pytest.raises(TypeError, match=r"pt.any takes conditions, got A\[0\] of type float32"):
        pt.any(A[0] > 1, A[0])


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_divisions_round_as_their_names_say(dtype):
    a = np.array([-7, -6, -1, 0, 1, 5, 6, 7, -128 if dtype == "int8" else -9], dtype)
    b = np.array([3, -3, 2, -5, -2, 3, -4, 2, 3], dtype)
    A, B = (pt.placeholder((9,), dtype, name=x) for x in "AB")

    def divide(name, f):
        return pt.compute((9,), lambda i: f(A[i], B[i]), name=name)

    funcs = [pt.floordiv, pt.floormod, pt.truncdiv, pt.truncmod, pt.indexdiv, pt.indexmod]
    outs = [divide(f"d{k}", f) for k, f in enumerate(funcs)]
    got = pt.build(pt.create_schedule([t.op for t in outs]), [A, B, *outs])(a, b)
    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    trunc = np.array([int(x / y) for x, y in zip(wide_a, wide_b)])
    floor = wide_a // wide_b
    want = [floor, wide_a % wide_b, trunc, wide_a - trunc * wide_b, floor, wide_a % wide_b]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.astype(dtype))
    with pytest.raises(TypeError, match=r"pt.truncdiv divides integers, got float32"):
        pt.truncdiv(pt.const(1.0), 2)


def test_tvm_spellings_of_lower_and_targets():
    A = pt.placeholder((4,), "float32", name="A")
    B = pt.compute((4,), lambda i: A[i] * 2, name="B")
    s = pt.create_schedule(B.op)
    assert str(pt.lower(s, [A, B], simple_mode=True)) == str(pt.lower(s, [A, B]))
    with pytest.raises(ValueError, match=r"TVM's llvm and c targets are host here"):
        pt.build(s, [A, B], target="llvm -mcpu=skylake-avx512")
    with pytest.raises(ValueError, match=r"unknown target ''; choose one of: host"):
        pt.Target("")
    assert math.isclose(pt.max_value("float32").value, 3.4028234663852886e38)


def test_compute_takes_tvm_tag_and_attrs():
    A = pt.placeholder((4,), "float32", name="A")
    B = pt.compute((4,), lambda i: A[i] * 2, name="B", tag="elemwise", attrs={"fuse": 1})
    C0, C1 = pt.compute((4,), lambda i: (A[i], A[i] + 1), name="C", tag="pair")
    assert (B.op.tag, dict(B.op.attrs), C0.op.tag) == ("elemwise", {"fuse": 1}, "pair")
    assert (A.op.tag, dict(A.op.attrs)) == ("", {})
    s = pt.create_schedule(B.op)
    BL = s.cache_write(B, "local")
    assert BL.op.tag == "" and B.op.tag == "elemwise"
    a = RNG.random(4).astype("float32")
    np.testing.assert_array_equal(pt.build(s, [A, B])(a), a * 2)


def test_compute_root_undoes_compute_at_and_compute_inline():
    A = pt.placeholder((10, 6), "float32", name="A")
    B = pt.compute((10, 6), lambda i, j: A[i, j] + 1, name="B")
    C = pt.compute((10, 6), lambda i, j: B[i, j] * 2, name="C")
    a = RNG.random((10, 6)).astype("float32")
    plain = pt.create_schedule(C.op)
    for place in ("at", "inline"):
        s = pt.create_schedule(C.op)
        io, ii = s[C].split(C.op.axis[0], factor=4)
        if place == "at":
            s[B].compute_at(s[C], io)
        else:
            s[B].compute_inline()
        s[B].compute_root()
        assert s[B].attach is None and not s[B].inline
        assert [st["prim"] for st in s.steps][-1] == "compute_root"
        text = str(pt.lower(s, [A, C]))
        assert text.index("B[") < text.index("for (i_outer")  # B whole, before C's loops
        np.testing.assert_array_equal(pt.build(s, [A, C])(a), (a + 1) * 2)
        replayed = pt.Schedule.from_json(s.to_json(), [A, C])
        assert str(pt.lower(replayed, [A, C])) == text
    assert str(pt.lower(plain, [A, C])).count("for") == 4
    with pytest.raises(pt.ScheduleError, match="compute_root.*a placeholder is not computed"):
        plain[A].compute_root()


def test_numpy_scalars_are_numbers_everywhere():
    # shapes, indices, literals and split factors computed with numpy
    rows, cols = np.int64(4), np.int32(6)
    A = pt.placeholder([rows, cols], "float32", name="A")
    B = pt.compute(A.shape, lambda i, j: A[i, np.int64(5) - j] * np.float32(2.0), name="B")
    s = pt.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=np.int64(3))
    s[B].vectorize(ji)
    assert s.to_json()["steps"][0]["factor"] == 3  # plain JSON
    a = RNG.random((4, 6)).astype("float32")
    np.testing.assert_array_equal(pt.build(s, [A, B])(a), a[:, ::-1] * 2)
    replayed = pt.Schedule.from_json(s.to_json(), [A, B])
    assert str(pt.lower(replayed, [A, B])) == str(pt.lower(s, [A, B]))


def test_constant_shapes_compare_and_convert_as_tvm_intimm():
    """``A.shape[0] == 3`` is a constant comparison, true or false by value (it was
    false: two constants compared by identity); shapes convert to ints for numpy."""
    A = pt.placeholder((3, 4), "float32", name="A")
    assert A.shape[0] == 3 and not (A.shape[0] != 3) and tuple(A.shape) == (3, 4)
    assert 4 in A.shape and 5 not in A.shape and A.shape[1] > 3
    assert int(A.shape[0]) == 3 and np.zeros(A.shape).shape == (3, 4)
    assert list(range(A.shape[0])) == [0, 1, 2]
    n = pt.var("n")
    B = pt.placeholder((n, 4), "float32", name="B")
    assert n in B.shape and not (B.shape[0] == 3)  # a size is not a number
    with pytest.raises(TypeError, match="is a float32 constant, not an integer"):
        range(pt.const(2.0))


def test_integer_literals_as_a_body_are_int32_as_pt_const():
    A = pt.placeholder((6,), "int32", name="A")
    assert pt.compute((6,), lambda i: 1).dtype == "int32"
    assert pt.compute((6,), lambda i: 1, dtype="int64").dtype == "int64"
    C = pt.compute((6,), lambda i: pt.if_then_else(pt.all(A[i] > 0, i > 0), 1, 0), name="C")
    assert C.dtype == "int32"
    a = np.array([1, -1, 2, 3, 0, 4], "int32")
    np.testing.assert_array_equal(pt.build(pt.create_schedule(C.op), [A, C])(a), [0, 0, 1, 1, 0, 1])


@pytest.mark.parametrize("then", ["split", "fuse"])
def test_compute_at_loop_split_or_fused_later_follows_it_as_tvm(then):
    """TVM's legalize_invalid_attach: the attach loop split after compute_at is its inner
    part, fused, the fused loop."""
    A = pt.compute((10, 10), lambda i, j: pt.cast("float32", i * 10 + j), name="A")
    B = pt.compute((10, 10), lambda i, j: A[i, j] * 2, name="B")
    s = pt.create_schedule(B.op)
    s[A].compute_at(s[B], B.op.axis[1])
    if then == "split":
        s[B].split(B.op.axis[1], 3)
        assert "computed at B.j.inner" in pt.explain(s)
    else:
        s[B].fuse(*B.op.axis)
        assert "computed at B.i.j.fused" in pt.explain(s)
    want = np.arange(100, dtype="float32").reshape(10, 10) * 2
    np.testing.assert_array_equal(pt.build(s, [B])(), want)


def test_iter_var_domain_as_tvm_range_and_gpu_primitives_name_their_cpu_counterpart():
    k = pt.reduce_axis((2, 8), name="k")
    assert (k.dom.min.value, k.dom.extent.value) == (2, 6) and k.iter_type == "reduce"
    lo, ext = k.dom  # still a pair
    assert lo is k.dom_min and ext is k.extent
    A = pt.placeholder((4,), "float32", name="A")
    C = pt.compute((4,), lambda i: A[i] * 2, name="C")
    s = pt.create_schedule(C.op)
    with pytest.raises(AttributeError, match=r"Stage.bind is TVM's \(GPU thread binding; on a"):
        s[C].bind(C.op.axis[0], None)
    with pytest.raises(AttributeError, match=r"pt.thread_axis is TVM's \(GPU thread axes"):
        pt.thread_axis("threadIdx.x")
    with pytest.raises(AttributeError, match="'Stage' object has no attribute 'nothing'"):
        s[C].nothing  # noqa: B018
    assert not hasattr(pt, "no_such_name")


def test_comm_reducer_takes_its_identity_as_a_constant():
    """``pt.comm_reducer(f, 1.0)`` (was: 'float' object is not callable, at lowering); a
    tuple of constants for a tuple reducer; anything else refused at once."""
    A = pt.placeholder((4, 6), "float32", name="A")
    k = pt.reduce_axis((0, 6), name="k")
    prod = pt.comm_reducer(lambda a, b: a * b, 1.0, name="prod")
    C = pt.compute((4,), lambda i: prod(A[i, k], axis=k), name="C")
    a = np.random.default_rng(0).random((4, 6), dtype=np.float32) + 0.5
    np.testing.assert_allclose(pt.build(pt.create_schedule(C.op), [A, C])(a), a.prod(1), 1e-5)

    def better(x, y):
        keep = x[1] >= y[1]
        return pt.select(keep, x[0], y[0]), pt.select(keep, x[1], y[1])

    argmax = pt.comm_reducer(better, (-1, -3.0e38))
    idx, val = pt.compute((4,), lambda i: argmax((k, A[i, k]), axis=k), name="am")
    got_idx, got_val = pt.build(pt.create_schedule(idx.op), [A, idx, val])(a)
    np.testing.assert_array_equal(got_idx, a.argmax(1))
    np.testing.assert_array_equal(got_val, a.max(1))
    for bad in ("zero", None, ()):
        with pytest.raises(TypeError, match="comm_reducer: the identity is a function of"):
            pt.comm_reducer(lambda x, y: x + y, bad)
