"""Whole-tensor arithmetic with numpy broadcasting (``A + B``), against numpy."""

import numpy as np
import pytest
from fuzzing import FUZZ
from hypothesis import given
from hypothesis import strategies as st

import pypto as pt

RNG = np.random.default_rng(3)


def test_broadcast_chain_matches_numpy():
    n = pt.var("n")
    A = pt.placeholder((n, 1, 4), "float64", name="A")
    B = pt.placeholder((3, 1), "float64", name="B")
    C = A + B
    D = -(C * 2.0) / (1 + A) - B % 0.75
    assert (C.name, D.name) == ("T_add", "T_subtract")
    assert [str(d) for d in D.shape] == ["n", "3", "4"]
    s = pt.create_schedule(D.op)
    mod = pt.build(s, [A, B, D])
    a, b = RNG.random((5, 1, 4)), RNG.random((3, 1))
    np.testing.assert_allclose(mod(a, b), -((a + b) * 2.0) / (1 + a) - np.mod(b, 0.75))


def test_broadcast_stages_schedule_like_any_other():
    A = pt.placeholder((8, 16), "float32", name="A")
    bias = pt.placeholder((16,), "float32", name="bias")
    alpha = pt.var("alpha", "float32")
    Y = alpha * (A + bias)
    s = pt.create_schedule(Y.op)
    s[Y.op.input_tensors[0]].compute_inline()
    io, ii = s[Y].split(Y.op.axis[1], factor=8)
    s[Y].vectorize(ii)
    mod = pt.build(s, [A, bias, alpha, Y])
    a, b = RNG.random((8, 16), "float32"), RNG.random(16, "float32")
    np.testing.assert_allclose(mod(a, b, 3.0), 3.0 * (a + b), rtol=1e-6)


def test_integer_tensors_and_reversed_operands():
    A = pt.placeholder((4, 1), "int32", name="A")
    B = pt.placeholder((5,), "int32", name="B")
    C = 10 - A * B // 3
    a, b = np.arange(4, dtype="int32").reshape(4, 1), np.arange(5, dtype="int32")
    mod = pt.build(pt.create_schedule(C.op), [A, B, C])
    np.testing.assert_array_equal(mod(a, b), 10 - a * b // 3)


def test_shapes_that_do_not_broadcast():
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((n, 4), "float32", name="A")
    with pytest.raises(ValueError, match=r"shapes \(n, 4\) and \(5,\) do not broadcast"):
        A + pt.placeholder((5,), "float32")
    with pytest.raises(ValueError, match=r"shapes \(n, 4\) and \(m, 4\) do not broadcast"):
        A * pt.placeholder((m, 4), "float32")
    with pytest.raises(TypeError, match="mixed dtypes float32 and float64"):
        A + pt.placeholder((4,), "float64")
    with pytest.raises(TypeError, match="'/' on integer expressions"):
        pt.placeholder((2,), "int32") / 2


# ---------------------------------------------------------------- fuzz against numpy

NUMPY_OP = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
PY_OP = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b,
         "mul": lambda a, b: a * b, "div": lambda a, b: a / b}  # fmt: skip


@st.composite
def shape_pair(draw):
    out = draw(st.lists(st.integers(1, 4), min_size=0, max_size=3))

    def operand():  # noqa: E306 - a suffix of out, some dimensions stretched from 1
        tail = out[len(out) - draw(st.integers(0, len(out))) :]
        return tuple(1 if draw(st.booleans()) else d for d in tail)

    return operand(), operand()


@FUZZ
@given(shape_pair(), st.lists(st.sampled_from(sorted(NUMPY_OP)), min_size=1, max_size=3))
def test_broadcast_chains_match_numpy(shapes, ops):
    sa, sb = shapes
    A = pt.placeholder(sa, "float64", name="A")
    B = pt.placeholder(sb, "float64", name="B")
    a, b = np.asarray(RNG.random(sa) + 0.5), np.asarray(RNG.random(sb) + 0.5)
    T, ref = A, a
    for k, op in enumerate(ops):  # alternate the sides and mix in a number
        other, oref = (B, b) if k % 2 == 0 else (1.5, 1.5)
        T, ref = PY_OP[op](T, other), NUMPY_OP[op](ref, oref)
    mod = pt.build(pt.create_schedule(T.op), [A, B, T])
    np.testing.assert_allclose(mod(a, b), ref, rtol=1e-12)
