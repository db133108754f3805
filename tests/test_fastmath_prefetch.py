"""pt.fast_exp / pt.fast_erf (vectorizable math) and Stage.prefetch (cache hints)."""

from __future__ import annotations

import json
import math
import re
import subprocess

import numpy as np
import pytest

import pypto as pt
from pypto import runtime


def _unary(fn, x: np.ndarray, dtype="float32", lanes=8):
    n = x.size
    X = pt.placeholder((n,), dtype, name="X")
    Y = pt.compute((n,), lambda i: fn(X[i]), name="Y")
    s = pt.create_schedule(Y.op)
    _, ii = s[Y].split(Y.op.axis[0], factor=lanes)
    s[Y].vectorize(ii)
    mod = pt.build(s, [X, Y], name=f"unary_{fn.__name__}")
    y = np.full_like(x, np.nan)
    mod(x, y)
    return y, mod


def _wide_inputs():
    rng = np.random.default_rng(0)
    return np.concatenate(
        [
            np.linspace(-120.0, 95.0, 200_003),
            rng.standard_normal(50_000) * 10,
            [
                0.0,
                -0.0,
                1e-30,
                -1e-30,
                88.72,
                88.72283,
                88.72284,
                88.73,
                -87.3,
                -87.33654,
                -87.33655,
                -103.9,
                -104.0,
                -1e4,
                1e4,
            ],
        ]
    ).astype(np.float32)


def test_fast_exp_accuracy_and_special_values():
    x = np.concatenate([_wide_inputs(), np.float32([np.nan, np.inf, -np.inf])])
    y, _ = _unary(pt.fast_exp, x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    normal = (want >= np.finfo(np.float32).tiny) & (want <= np.finfo(np.float32).max)
    rel = np.abs(y[normal] - want[normal]) / want[normal]
    assert rel.max() < 2.1e-7, rel.max()
    assert np.all(y[~normal & (x < 0)] == 0.0)  # subnormal results are flushed to zero
    assert np.all(np.isposinf(y[~normal & (x > 0)]))  # past FLT_MAX, inf at 88.72284
    assert np.isnan(y[-3]) and np.isposinf(y[-2]) and y[-1] == 0.0


def test_fast_erf_accuracy():
    x = np.concatenate([_wide_inputs(), np.float32([np.nan])])
    y, _ = _unary(pt.fast_erf, x)
    want = np.array([math.erf(v) for v in x[:-1].astype(np.float64)])
    assert np.abs(y[:-1] - want).max() < 1e-6
    assert np.isnan(y[-1])


def test_fast_erf_stays_within_minus_one_and_one():
    """Rounding took x P(x^2) / Q(x^2) to 1 + 2^-23 between x = 3.65 and 4 (0.3% of
    [-6, 6]): log(1 - erf(x)) was NaN there."""
    x = np.linspace(3.0, 4.5, 20001, dtype=np.float32)
    x = np.concatenate([x, -x, np.float32([3.6502283, 3.704706])])
    y, _ = _unary(pt.fast_erf, x)
    assert np.abs(y).max() == 1.0


@pytest.mark.parametrize("fn, ref", [(pt.fast_exp, np.exp), (pt.fast_erf, None)])
def test_fast_math_float64_uses_libm(fn, ref):
    x = np.linspace(-5, 5, 1001)
    y, mod = _unary(fn, x, dtype="float64", lanes=4)
    want = ref(x) if ref is not None else np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(y, want, rtol=1e-14, atol=1e-15)
    assert "pt_fast_" not in mod.source


def test_fast_exp_is_vectorized_by_the_compiler(tmp_path):
    """gcc vectorizes the loop that calls pt.fast_exp (libm's expf it would not)."""
    _, mod = _unary(pt.fast_exp, np.zeros(1024, np.float32))
    assert "pt_fast_expf(" in mod.source and "expf(" not in mod.source.replace("fast_expf", "")
    src = tmp_path / "k.c"
    src.write_text(mod.source)
    flags = [f for f in mod.target.cflags if f != "-shared"]
    r = subprocess.run(
        [*runtime.compiler(), *flags, "-c", str(src), "-o", str(tmp_path / "k.o"),
         "-fopt-info-vec-optimized"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert re.search(r"k\.c:\d+:\d+: optimized: loop vectorized", r.stderr), r.stderr


def _rows(n=64, m=200):
    X = pt.placeholder((n, m), "float32", name="X")
    Y = pt.compute((n, m), lambda i, j: X[i, j] * 2.0 + 1.0, name="Y")
    return X, Y


def test_prefetch_reads_and_writes_keep_results():
    X, Y = _rows()
    s = pt.create_schedule(Y.op)
    i, j = Y.op.axis
    jo, ji = s[Y].split(j, factor=32)  # ragged: 200 = 6 * 32 + 8
    s[Y].vectorize(ji)
    s[Y].prefetch(X, jo, 7)  # the next row
    s[Y].prefetch(Y, jo, 7)  # for writing
    ir = str(pt.lower(s, [X, Y]))
    assert "prefetch X[" in ir and "line(s) for write" in ir
    mod = pt.build(s, [X, Y], name="prefetched")
    assert re.search(r"__builtin_prefetch\(.*, 0, 3\)", mod.source)
    assert re.search(r"__builtin_prefetch\(.*, 1, 3\)", mod.source)
    x = np.random.default_rng(1).standard_normal((64, 200)).astype(np.float32)
    y = np.full_like(x, np.nan)
    mod(x, y)  # the last row's prefetches point past the end: a hint never faults
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)
    assert s.steps[-1] == {"stage": "Y", "prim": "prefetch", "tensor": "Y", "loop": "j.outer",
                           "offset": 7, "level": 1}  # fmt: skip


def test_prefetch_into_l2_and_its_replay():
    """``level=2`` brings the lines to L2 only (prefetcht1, gcc's locality 2); the level
    is part of the step, and a step written without it (older schedules) replays as L1."""
    X, Y = _rows()
    s = pt.create_schedule(Y.op)
    jo, ji = s[Y].split(Y.op.axis[1], factor=32)
    s[Y].vectorize(ji)
    s[Y].prefetch(X, jo, 7, level=2)
    ir = str(pt.lower(s, [X, Y]))
    assert re.search(r"prefetch X\[.*\] \d line\(s\) into L2", ir), ir
    mod = pt.build(s, [X, Y], name="prefetched_l2")
    assert re.search(r"__builtin_prefetch\(.*\bX\b.*, 0, 2\);", mod.source)
    assert not re.search(r"__builtin_prefetch\(.*, 3\);", mod.source)
    x = np.random.default_rng(4).standard_normal((64, 200)).astype(np.float32)
    y = np.full_like(x, np.nan)
    mod(x, y)
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)
    doc = json.dumps(s.to_json())
    assert json.loads(doc)["steps"][-1]["level"] == 2
    again = pt.Schedule.from_json(doc, [X, Y])
    assert pt.build(again, [X, Y], name="prefetched_l2").source == mod.source
    old = json.loads(doc)
    del old["steps"][-1]["level"]  # as written before steps had a level
    replayed = pt.Schedule.from_json(json.dumps(old), [X, Y])
    assert replayed.steps[-1]["level"] == 1
    assert re.search(r"__builtin_prefetch\(.*\bX\b.*, 0, 3\);", pt.build(replayed, [X, Y]).source)


def test_prefetch_through_an_inlined_stage():
    X, _ = _rows()
    T = pt.compute((64, 200), lambda i, j: X[i, j] + 1.0, name="T")
    Y = pt.compute((64, 200), lambda i, j: T[i, j] * 3.0, name="Y")
    s = pt.create_schedule(Y.op)
    s[T].compute_inline()
    s[Y].prefetch(X, Y.op.axis[0], 1)
    mod = pt.build(s, [X, Y], name="prefetch_inline")
    x = np.random.default_rng(2).standard_normal((64, 200)).astype(np.float32)
    y = np.empty_like(x)
    mod(x, y)
    np.testing.assert_allclose(y, (x + 1) * 3, rtol=1e-6)


def _two_passes(read_t=lambda T, i, j: T[i, j]):
    X, _ = _rows()
    T = pt.compute((64, 200), lambda i, j: X[i, j] + 1.0, name="T")
    Y = pt.compute((64, 200), lambda i, j: read_t(T, i, j) * 3.0, name="Y")
    return X, T, Y


def test_prefetch_of_a_consumer_for_writing():
    """The first pass prefetches, for writing, the row of Y the second pass will write."""
    X, T, Y = _two_passes()
    s = pt.create_schedule(Y.op)
    s[T].compute_at(s[Y], Y.op.axis[0])
    jo, ji = s[T].split(T.op.axis[1], factor=8)
    s[T].vectorize(ji)
    s[T].prefetch(Y, jo, 0)
    ir = str(pt.lower(s, [X, Y]))
    first_pass = ir[ir.index("for (j_outer") : ir.index("for (j, 0, 200)")]
    assert re.search(r"prefetch Y\[i \* 200 \+ j_outer \* 8\] 2 line\(s\) for write", first_pass)
    mod = pt.build(s, [X, Y], name="prefetch_consumer")
    assert re.search(r"__builtin_prefetch\(.*\bY\b.*, 1, 3\)", mod.source)
    x = np.random.default_rng(3).standard_normal((64, 200)).astype(np.float32)
    y = np.full_like(x, np.nan)
    mod(x, y)
    np.testing.assert_allclose(y, (x + 1) * 3, rtol=1e-6)


def test_prefetch_of_a_consumer_errors():
    X, T, Y = _two_passes(lambda T, i, j: T[i, 199 - j])  # reversed: not elementwise
    s = pt.create_schedule(Y.op)
    with pytest.raises(pt.ScheduleError, match="Y reads it other than elementwise"):
        s[T].prefetch(Y, T.op.axis[0], 0)
    X, T, Y = _two_passes()
    Z = pt.compute((64, 200), lambda i, j: X[i, j] - 1.0, name="Z")
    s = pt.create_schedule([Y.op, Z.op])
    with pytest.raises(pt.ScheduleError, match="neither reads nor writes Z, nor is Z computed"):
        s[T].prefetch(Z, T.op.axis[0], 0)
    with pytest.raises(pt.ScheduleError, match="offset must be a nonzero int"):
        s[T].prefetch(X, T.op.axis[0], 0)  # a read: offset 0 is the data being read
    W = pt.compute((64, 200), lambda i, j: Y[i, j] + T[i, j], name="W")
    s = pt.create_schedule(W.op)
    s[Y].compute_at(s[W], W.op.axis[0])
    with pytest.raises(pt.ScheduleError, match="Y must be computed at the root"):
        s[T].prefetch(Y, T.op.axis[0], 0)
    s = pt.create_schedule(W.op)
    s[T].prefetch(Y, T.op.axis[0], 0)
    s[Y].compute_at(s[W], W.op.axis[0])  # after the prefetch: caught when lowering
    with pytest.raises(pt.ScheduleError, match="Y is no longer computed at the root"):
        pt.lower(s, [X, W])


def test_prefetch_errors():
    X, Y = _rows()
    Z = pt.placeholder((64, 200), "float32", name="Z")
    s = pt.create_schedule(Y.op)
    i, j = Y.op.axis
    with pytest.raises(pt.ScheduleError, match="neither reads nor writes Z"):
        s[Y].prefetch(Z, j, 1)
    with pytest.raises(pt.ScheduleError, match="offset must be a nonzero int"):
        s[Y].prefetch(X, j, 0)
    for level in (0, 3, True, "L2", [2]):
        with pytest.raises(pt.ScheduleError, match=r"level must be a cache level \[1, 2\]"):
            s[Y].prefetch(X, j, 1, level=level)
    s[Y].prefetch(X, i, 1)
    with pytest.raises(pt.ScheduleError, match="carries a prefetch; split before prefetching"):
        s[Y].split(i, factor=2)
    with pytest.raises(pt.ScheduleError, match="carries a prefetch; fuse before prefetching"):
        s[Y].fuse(i, j)
    # a row is 800 bytes: fine at the row loop; the whole array at the root is not
    pt.lower(s, [X, Y])
    X2 = pt.placeholder((64, 4096), "float32", name="X2")
    Y2 = pt.compute((64, 4096), lambda i, j: X2[i, j] * 2.0, name="Y2")
    s2 = pt.create_schedule(Y2.op)
    s2[Y2].prefetch(X2, Y2.op.axis[0], 1)
    with pytest.raises(pt.ScheduleError, match="prefetch of X2 at loop i.*prefetch at an inner"):
        pt.lower(s2, [X2, Y2])


def test_prefetch_refuses_data_dependent_indices():
    idx = pt.placeholder((16,), "int32", name="idx")
    A = pt.placeholder((100,), "float32", name="A")
    B = pt.compute((16,), lambda i: A[idx[i]], name="B")
    s = pt.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].prefetch(A, io, 1)
    with pytest.raises(pt.ScheduleError, match="not affine in the inner loops"):
        pt.lower(s, [idx, A, B])
