"""``unroll``: each copy of an unrolled loop's body re-simplifies only what mentions the
loop's variable (``passes._Instantiate``), and gives what simplifying the whole copy
gave: the loop IR is the same, the kernels compute the same."""

import numpy as np
import pytest

import pypto as pt
from pypto import lowering, passes
from pypto.intervals import INF, Ranges


def _whole_copies(s, ranges):
    """The unrolling as it was: every copy substituted, then simplified whole."""

    class Unroll(passes.StmtMutator):
        def mutate_for_(self, f):
            body = self.visit(f.body)
            if f.kind == "unrolled" and isinstance(f.extent, pt.expr.Const):
                if f.extent.value <= passes.MAX_UNROLL:
                    return passes.seq(*(
                        passes.simplify_stmt(
                            passes.subst_stmt(body, {f.var: pt.expr.Const(i, f.var.dtype)}),
                            ranges,
                        )
                        for i in range(f.extent.value)
                    ))  # fmt: skip
            return passes.For(f.var, f.extent, f.kind, body)

    return Unroll()(s)


def _triangle(n=11):
    """Row sums of a lower triangle, rows in tiles of 4 unrolled (each row's own trip
    count, a guard of the last partial tile), columns in tiles of 8, 2 unrolled."""
    A = pt.placeholder((n, n), "float32", name="A")
    B = pt.compute((n, n), lambda i, j: pt.select(j <= i, A[i, j] * 2.0, pt.const(0.0)), name="B")
    s = pt.create_schedule(B.op)
    i, j = B.op.axis
    io, ii = s[B].split(i, factor=4)
    jo, ji = s[B].split(j, factor=8)
    jm, jv = s[B].split(ji, factor=4)
    s[B].reorder(io, jo, ii, jm, jv)
    s[B].unroll(ii)
    s[B].unroll(jm)
    s[B].vectorize(jv)
    return s, [A, B], lambda a: np.where(np.tri(n, dtype=bool), a * 2, 0)


def _gemm_tile(m=10, n=24, k=7):
    A = pt.placeholder((m, k), "float32", name="A")
    Bm = pt.placeholder((k, n), "float32", name="B")
    r = pt.reduce_axis((0, k), name="r")
    C = pt.compute((m, n), lambda i, j: pt.sum(A[i, r] * Bm[r, j], axis=r), name="C")
    s = pt.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].reorder(io, jo, ii, ji)
    s[CL].compute_at(s[C], jo)
    ci, cj = s[CL].op.axis
    (cr,) = s[CL].op.reduce_axis
    s[CL].reorder(cr, ci, cj)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)
    s[C].unroll(ii)
    return s, [A, Bm, C], None


@pytest.mark.parametrize("make", [_triangle, _gemm_tile])
def test_unrolled_copies_are_what_simplifying_each_whole_copy_gave(make, monkeypatch):
    s, args, ref = make()
    seen = []
    real = lowering.passes.finalize

    def capture(func, pipeline=passes.PIPELINE):
        seen.append(func)
        return real(func, pipeline)

    monkeypatch.setattr(lowering.passes, "finalize", capture)
    pt.lower(s, args)
    (func,) = seen
    ranges = Ranges({v: (0, INF) for v in func.size_vars})
    body = func.body
    for name, run in passes.PIPELINE:
        if name == "unroll":
            break
        body = run(body, ranges, func.size_vars)
    assert "unrolled" in str(body)  # there is something to unroll
    assert str(passes.unroll(body, ranges)) == str(_whole_copies(body, ranges))
    if ref is not None:
        a = np.random.default_rng(0).standard_normal(args[0].shape).astype(np.float32)
        np.testing.assert_allclose(pt.build(s, args)(a), ref(a), rtol=1e-6)
