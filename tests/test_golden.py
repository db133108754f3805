"""Golden text of ``pt.lower`` and of the generated C for a few kernels.

Run ``pytest tests/test_golden.py --update-golden`` after an intended change
and review the diff of tests/golden/.
"""

import pathlib

import pytest

import pypto as pt

GOLDEN = pathlib.Path(__file__).parent / "golden"


def check(name: str, text: str, update: bool):
    path = GOLDEN / name
    if update or not path.exists():
        if not update:
            pytest.fail(f"missing golden file {path}; run pytest --update-golden")
        path.write_text(text)
        return
    assert text == path.read_text(), f"{name} changed; run pytest --update-golden if intended"


def matmul_relu():
    n = pt.var("n")
    A = pt.placeholder((n, 64), "float32", name="A")
    B = pt.placeholder((64, 32), "float32", name="B")
    k = pt.reduce_axis((0, 64), name="k")
    C = pt.compute((n, 32), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = pt.compute((n, 32), lambda i, j: pt.max(C[i, j], pt.const(0, "float32")), name="D")
    s = pt.create_schedule(D.op)
    xo, yo, xi, yi = s[D].tile(D.op.axis[0], D.op.axis[1], x_factor=8, y_factor=16)
    s[C].compute_at(s[D], yo)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
    s[D].parallel(xo)
    s[D].vectorize(yi)
    return s, [A, B, D]


def softmax():
    n, m = pt.var("n"), pt.var("m")
    X = pt.placeholder((n, m), "float32", name="X")
    k1, k2 = pt.reduce_axis((0, m), "k1"), pt.reduce_axis((0, m), "k2")
    mx = pt.compute((n,), lambda i: pt.max(X[i, k1], axis=k1), name="mx")
    ex = pt.compute((n, m), lambda i, j: pt.exp(X[i, j] - mx[i]), name="ex")
    sm = pt.compute((n,), lambda i: pt.sum(ex[i, k2], axis=k2), name="sm")
    Y = pt.compute((n, m), lambda i, j: ex[i, j] / sm[i], name="Y")
    s = pt.create_schedule(Y.op)
    for t in (mx, ex, sm):
        s[t].compute_at(s[Y], Y.op.axis[0])
    s[Y].parallel(Y.op.axis[0])
    return s, [X, Y]


def packed_matmul():
    A = pt.placeholder((64, 64), "float32", name="A")
    B = pt.placeholder((64, 64), "float32", name="B")
    k = pt.reduce_axis((0, 64), name="k")
    C = pt.compute((64, 64), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    BP = s.cache_read(B, "local", [CL])
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    s[C].reorder(jo, io, ii, ji)
    s[CL].compute_at(s[C], io)
    ic, jc = s[CL].op.axis
    s[CL].reorder(s[CL].op.reduce_axis[0], ic, jc)
    s[CL].unroll(ic)
    s[CL].vectorize(jc)
    s[BP].compute_at(s[C], jo)
    return s, [A, B, C]


@pytest.mark.parametrize("kernel", [matmul_relu, softmax, packed_matmul])
def test_lower_text(kernel, update_golden):
    s, args = kernel()
    check(f"{kernel.__name__}.ir.txt", str(pt.lower(s, args, name=kernel.__name__)), update_golden)


@pytest.mark.parametrize("kernel", [matmul_relu, packed_matmul])
def test_c_text(kernel, update_golden):
    s, args = kernel()
    src = pt.build(s, args, target="x86-avx2", name=kernel.__name__, emit_only=True)
    check(f"{kernel.__name__}.c.txt", src, update_golden)
