"""The statement mutator of the loop IR: one rule per statement kind, the rest rebuilt."""

import pytest

from pypto.expr import Cmp, Const, Var
from pypto.intervals import Ranges
from pypto.loop_ir import (
    STMT_KINDS,
    Allocate,
    Buffer,
    For,
    IfThenElse,
    Let,
    Seq,
    Stmt,
    StmtMutator,
    Store,
    own_exprs,
    stmt_children,
)
from pypto.passes import _var_bound, simplify_stmt


def _nest():
    i = Var("i")
    buf = Buffer("B", "float32", (Const(8, "int64"),), "local")
    store = Store(buf, i, Const(1.0, "float32"))
    return i, buf, Allocate(buf, Const(8, "int64"), For(i, Const(8, "int64"), "serial", store))


class _Double(StmtMutator):
    def mutate_store(self, s):
        return Store(s.buffer, s.index, s.value * 2)


def test_mutator_rewrites_only_its_rule_and_rebuilds_the_path():
    i, buf, nest = _nest()
    out = _Double()(nest)
    assert isinstance(out, Allocate) and isinstance(out.body, For)
    assert str(out.body.body.value) == "1.0 * 2.0"
    assert str(nest.body.body.value) == "1.0"  # the input is untouched


def test_mutator_keeps_unchanged_nodes():
    _, _, nest = _nest()
    assert StmtMutator()(nest) is nest


def test_mutator_drops_empty_bodies_and_negates_an_empty_then():
    i, buf, nest = _nest()

    class DropStores(StmtMutator):
        def mutate_store(self, s):
            return None

    assert DropStores()(nest) is None
    store = nest.body.body
    cond = Var("n") > 0
    out = DropStores()(IfThenElse(cond, store, For(i, Const(2, "int64"), "serial", _nest()[2])))
    assert out is None
    keep = IfThenElse(cond, store, store)

    class DropFirst(StmtMutator):
        def mutate_if_(self, s):
            return IfThenElse(s.cond, None, s.else_) if s.then is not None else s

    flipped = StmtMutator().mutate_if_(DropFirst().mutate_if_(keep))
    assert str(flipped.cond) == "!(n > 0)" and flipped.then is store


def test_every_statement_kind_has_exprs_children_and_rules():
    for kind, (name, _, _) in STMT_KINDS.items():
        assert hasattr(StmtMutator, "mutate_" + name), kind


def test_unknown_statement_is_refused():
    class Odd(Stmt):
        __slots__ = ()

    with pytest.raises(TypeError, match="unknown statement Odd"):
        StmtMutator()(Odd())
    with pytest.raises(TypeError, match="unknown statement Odd"):
        stmt_children(Odd())
    with pytest.raises(TypeError, match="unknown statement Odd"):
        own_exprs(Odd())


def test_simplify_drops_a_zero_trip_loop_and_unwraps_one_trip():
    i, buf, nest = _nest()
    zero = For(i, Const(0, "int64"), "serial", nest.body.body)
    one = For(i, Const(1, "int64"), "serial", nest.body.body)
    out = simplify_stmt(Seq((zero,)), Ranges())
    assert isinstance(out, Seq) and out.stmts == ()
    out = simplify_stmt(one, Ranges())
    assert isinstance(out, Store) and str(out.index) == "0"


def test_a_let_of_a_constant_or_variable_is_inlined_and_others_bound_their_uses():
    """``let v = e``: simplify substitutes a constant or a variable; an expression stays
    named, and what it ranges over decides the conditions inside."""
    i, buf, nest = _nest()
    v = Var("v")
    store = Store(buf, v, Const(1.0, "float32"))
    out = simplify_stmt(Let(v, Const(3, "int64"), store), Ranges())
    assert isinstance(out, Store) and str(out.index) == "3"
    out = simplify_stmt(Let(v, i, store), Ranges())
    assert isinstance(out, Store) and out.index is i
    value = i * 2 + 1  # 1 .. 15 for i in [0, 8)
    kept = Let(v, value, IfThenElse(v.__ge__(Const(1, "int64")), store))
    out = simplify_stmt(For(i, Const(8, "int64"), "serial", kept), Ranges())
    assert isinstance(out.body, Let) and isinstance(out.body.body, Store)
    assert "let v = i * 2 + 1" in str(out)


def test_a_branch_knows_the_bound_its_condition_puts_on_a_loop_variable():
    """``for xo in 0..2: if (xo*32 <= 24) full else tail``: in the tail xo is 1, so its
    trip count ``56 - xo*32`` is the constant 24 (partial tiles, constant trip counts)."""
    xo, xi = Var("xo"), Var("xi")
    buf = Buffer("B", "float32", (Const(56, "int64"),), "local")
    n = Const(56, "int64") - xo * 32
    tail = For(xi, n, "vectorized", Store(buf, xo * 32 + xi, Const(1.0, "float32")))
    full = For(
        xi, Const(32, "int64"), "vectorized", Store(buf, xo * 32 + xi, Const(0.0, "float32"))
    )
    nest = For(xo, Const(2, "int64"), "serial", IfThenElse(xo * 32 <= 24, full, tail))
    out = simplify_stmt(nest, Ranges())
    assert str(out.body.else_.extent) == "24" and str(out.body.else_.body.index) == "xi + 32"
    assert str(out.body.then.body.index) == "xi"  # xo <= 0 in the full tile: xo is 0


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize("a", [32, 3, 1, -1, -3])
def test_the_bound_a_comparison_puts_on_a_variable_admits_exactly_its_integers(op, a):
    v = Var("v")
    cond = Cmp(op, v * a + 5, Const(24, "int64"))
    _, lo, hi = _var_bound(cond)
    python = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
    want = [x for x in range(-60, 60) if eval(f"{a} * x + 5 {python} 24")]
    assert [x for x in range(-60, 60) if lo <= x <= hi] == want
