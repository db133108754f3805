"""Run-time bound checkers (``pt.build(..., bound_checks=True)``, TVM's
``tir.instrument_bound_checkers``): a correct kernel computes the same; an access a
defective lowering took out of its buffer is refused by name, never made."""

import numpy as np
import pytest

import pypto as pt
from pypto.expr import Binary, Const, Load, map_children
from pypto.loop_ir import ExprMapper, Store

RNG = np.random.default_rng(44)


def stencil():
    n = pt.var("n")
    A = pt.placeholder((n,), name="A")
    B = pt.compute((n - 2,), lambda i: A[i] + A[i + 2], name="B")
    s = pt.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].vectorize(ii)
    return s, A, B


def test_a_checked_kernel_computes_the_same():
    s, A, B = stencil()
    mod = pt.build(s, [A, B], bound_checks=True)
    assert mod.source.count("pt_checked_index(") >= 3  # two loads and a store, per version
    a = RNG.random(11, dtype="float32")
    np.testing.assert_array_equal(mod(a), a[:-2] + a[2:])
    assert "pt_checked_index" not in pt.build(s, [A, B]).source  # off by default


def _shift_loads(func, by):
    """``func`` with every load of A reading ``by`` elements further: a defective lowering."""

    def go(x):
        x = map_children(x, go)
        if isinstance(x, Load) and x.buffer.name == "A":
            return Load(x.buffer, Binary("add", x.index, Const(by, "int64"), "int64"), x.dtype)
        return x

    return ExprMapper(go)(func.body)


@pytest.mark.parametrize("by", [1, -3])
def test_an_access_outside_its_buffer_is_refused_by_name(by):
    s, A, B = stencil()
    func = pt.lower(s, [A, B], name="stencil")
    bad = type(func)(**{**{f: getattr(func, f) for f in func.__dataclass_fields__},
                        "body": _shift_loads(func, by)})  # fmt: skip
    mod = pt.build(bad, bound_checks=True)
    a = RNG.random(9, dtype="float32")
    with pytest.raises(IndexError, match=r"stencil: A\[.*\] \(of n elements\) is out of range"):
        mod(a)


def test_the_environment_turns_them_on_and_the_argument_wins(monkeypatch):
    s, A, B = stencil()
    monkeypatch.setenv("PYPTO_BOUND_CHECKS", "1")
    assert "pt_checked_index" in pt.build(s, [A, B], emit_only=True)
    assert "pt_checked_index" not in pt.build(s, [A, B], emit_only=True, bound_checks=False)
    monkeypatch.setenv("PYPTO_BOUND_CHECKS", "0")
    assert "pt_checked_index" not in pt.build(s, [A, B], emit_only=True)
    with pytest.raises(TypeError, match="bound_checks must be True, False or None, got 'yes'"):
        pt.build(s, [A, B], bound_checks="yes")


def test_stores_are_checked_too():
    s, A, B = stencil()
    func = pt.lower(s, [A, B], name="stencil")

    class Past(ExprMapper):
        def mutate_store(self, st):
            return Store(st.buffer, Binary("add", st.index, Const(2, "int64"), "int64"), st.value)

    bad = type(func)(**{**{f: getattr(func, f) for f in func.__dataclass_fields__},
                        "body": Past(lambda e: e)(func.body)})  # fmt: skip
    mod = pt.build(bad, bound_checks=True)
    with pytest.raises(IndexError, match=r"stencil: B\[.* \+ 2\] \(of n - 2 elements\)"):
        mod(RNG.random(10, dtype="float32"))
