"""Compiler-side memory safety: accesses proven in bounds by isl (refused at lower, or
checked at call), hostile identifiers, heap sizes that overflow."""

from __future__ import annotations

import keyword
import platform
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pypto as pt
from pypto.c_names import RESERVED
from pypto.loop_ir import c_identifier
from pypto.runtime import compiler

F32 = "float32"


def _build(outs, args, name="k"):
    return pt.build(pt.create_schedule([t.op for t in outs]), args, name=name)


# ---------------------------------------------------------------- bounds: refused at lower


def test_constant_read_past_the_end_is_refused_with_a_witness():
    C = pt.placeholder((4,), F32, name="C")
    D = pt.compute((8,), lambda i: C[i] * 2.0, name="D")
    s = pt.create_schedule(D.op)
    msg = r"compute 'D': C\[i\] reads past dimension 0 of C \(size 4\) at i=[4-7]\b"
    with pytest.raises(pt.ScheduleError, match=msg):
        pt.lower(s, [C, D])
    with pytest.raises(pt.ScheduleError, match=msg):
        pt.build(s, [C, D])


def test_negative_index_is_refused_naming_the_dimension():
    A = pt.placeholder((3, 5), F32, name="A")
    B = pt.compute((3, 5), lambda i, j: A[i, j - 1], name="B")
    with pytest.raises(
        pt.ScheduleError,
        match=r"A\[i, j - 1\] reads before the start of dimension 1 of A \(size 5\) at i=\d, j=0",
    ):
        pt.lower(pt.create_schedule(B.op), [A, B])


def test_update_writing_past_the_end_for_every_size_is_refused():
    n = pt.var("n")
    X = pt.placeholder((n,), F32, name="X")
    Y = pt.compute((n,), lambda i: X[i], name="Y")
    r = pt.reduce_axis((0, n), name="r")
    Y[r + 2] = X[r]
    with pytest.raises(
        pt.ScheduleError,
        match=r"update 'Y.update\(0\)': Y\[r \+ 2\] writes past dimension 0 of Y \(size n\) "
        r"at r=\d+, with n=\d+",
    ):
        pt.lower(pt.create_schedule(Y.op), [X, Y])


def test_an_inlined_stage_is_checked_against_its_own_shape():
    A = pt.placeholder((8,), F32, name="A")
    P = pt.compute((4,), lambda i: A[i] + 1.0, name="P")
    B = pt.compute((8,), lambda i: P[i] * 2.0, name="B")  # P has 4 elements only
    s = pt.create_schedule(B.op)
    s[P].compute_inline()
    with pytest.raises(pt.ScheduleError, match=r"P\[i\] reads past dimension 0 of P \(size 4\)"):
        pt.lower(s, [A, B])


def test_select_limits_each_branch_to_its_instances():
    n = pt.var("n")
    A = pt.placeholder((n,), F32, name="A")
    zero = pt.const(0.0, F32)
    P = pt.compute((n + 2,), lambda i: pt.select((i >= 1) & (i < n + 1), A[i - 1], zero), name="P")
    Q = pt.compute((n,), lambda i: P[i] + P[i + 2], name="Q")
    mod = _build([Q], [A, Q])
    a = np.random.rand(7).astype(F32)
    q = np.empty(7, F32)
    mod(a, q)
    p = np.pad(a, 1)
    np.testing.assert_allclose(q, p[:-2] + p[2:], rtol=1e-6)
    # the same read without the lower half of the guard reaches A[-1]
    P2 = pt.compute((n + 2,), lambda i: pt.select(i < n + 1, A[i - 1], zero), name="P2")
    with pytest.raises(
        pt.ScheduleError, match=r"A\[i - 1\] reads before the start of dimension 0 of A"
    ):
        pt.lower(pt.create_schedule(P2.op), [A, P2])


def test_compute_at_stage_is_covered_and_its_shrunk_buffer_is_right():
    A = pt.placeholder((64,), F32, name="A")
    B = pt.compute((64,), lambda i: A[i] * 3.0, name="B")
    C = pt.compute((62,), lambda i: B[i] + B[i + 2], name="C")
    s = pt.create_schedule(C.op)
    co, ci = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], co)
    assert "alloc B: float32[10] local" in str(pt.lower(s, [A, C]))
    mod = pt.build(s, [A, C])
    a = np.random.rand(64).astype(F32)
    c = np.empty(62, F32)
    mod(a, c)
    np.testing.assert_allclose(c, 3 * a[:-2] + 3 * a[2:], rtol=1e-6)
    # an attached stage whose consumer reads past it is refused as well
    D = pt.compute((64,), lambda i: B[i] + B[i + 2], name="D")
    s = pt.create_schedule(D.op)
    do, di = s[D].split(D.op.axis[0], factor=8)
    s[B].compute_at(s[D], do)
    with pytest.raises(pt.ScheduleError, match=r"B\[i \+ 2\] reads past dimension 0 of B"):
        pt.lower(s, [A, D])


def test_integer_division_by_a_constant_zero_is_refused():
    A = pt.placeholder((4,), "int32", name="A")
    B = pt.compute((4,), lambda i: A[i] // 0, name="B")
    with pytest.raises(pt.ScheduleError, match=r"compute 'B': A\[i\] // 0 divides by zero"):
        pt.lower(pt.create_schedule(B.op), [A, B])
    C = pt.compute((4,), lambda i: A[i % 0], name="C")
    with pytest.raises(pt.ScheduleError, match=r"compute 'C': i % 0 divides by zero"):
        pt.lower(pt.create_schedule(C.op), [A, C])


def test_integer_division_by_a_run_time_zero_is_an_error_not_a_trap():
    A = pt.placeholder((4,), "int32", name="A")
    D = pt.placeholder((4,), "int32", name="D")
    B = pt.compute((4,), lambda i: A[i] // D[i] + A[i] % D[i], name="B")
    mod = _build([B], [A, D, B], name="div")
    a = np.array([7, -7, 5, np.iinfo(np.int32).min], "int32")
    d = np.array([2, 2, -1, -1], "int32")
    b = np.empty(4, "int32")
    mod(a, d, b)  # INT_MIN // -1 wraps as in numpy instead of trapping
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(b, a // d + a % d)
    with pytest.raises(ZeroDivisionError, match="div: an integer division .* found 0"):
        mod(a, np.array([1, 0, 1, 1], "int32"), b)


@pytest.mark.parametrize("how", ["factor", "nparts"])
def test_a_symbolic_split_amount_below_one_is_refused_by_name(how):
    n, f = pt.var("n"), pt.var("f")
    A = pt.placeholder((n,), F32, name="A")
    B = pt.compute((n,), lambda i: A[i] * 2, name="B")
    s = pt.create_schedule(B.op)
    s[B].split(B.op.axis[0], **{how: f})
    mod = pt.build(s, [A, B, f])
    a, b = np.arange(5, dtype=F32), np.full(5, -1.0, F32)
    with pytest.raises(
        ValueError,
        match=rf"with f=0, the split {how} f of stage 'B' \(loop i\) must be at least 1 and "
        r"at most 2\*\*62 \(a trip count past it wraps in C\); nothing was run",
    ):
        mod(a, b, 0)
    with pytest.raises(ValueError, match=r"with f=9223372036854775807, the split"):
        mod(a, b, 2**63 - 1)  # was: the loop ran no iteration, b left as it was
    with pytest.raises(ValueError, match="argument f: -3 is not a size"):
        mod(a, b, -3)
    np.testing.assert_array_equal(b, -1.0)
    mod(a, b, 2)
    np.testing.assert_array_equal(b, a * 2)


def test_a_split_factor_computed_from_a_size_is_checked_at_call():
    n = pt.var("n")
    A = pt.placeholder((n,), F32, name="A")
    B = pt.compute((n,), lambda i: A[i] + 1, name="B")
    s = pt.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=n // 4)
    mod = pt.build(s, [A, B])
    with pytest.raises(ValueError, match=r"with n=3, the split factor n // 4 of stage 'B'"):
        mod(np.ones(3, F32))
    np.testing.assert_array_equal(mod(np.ones(9, F32)), 2.0)


# ---------------------------------------------------------------- bounds: checked at call


def _shifted_read():
    n, m = pt.var("n"), pt.var("m")
    X = pt.placeholder((m,), F32, name="X")
    Y = pt.compute((n,), lambda i: pt.const(0.0, F32), name="Y")
    r = pt.reduce_axis((0, n), name="r")
    Y[r] = X[r + 1]
    return _build([Y], [X, Y], name="shift")


def test_symbolic_condition_is_checked_at_call_before_anything_is_written():
    mod = _shifted_read()
    x = np.random.rand(6).astype(F32)
    y = np.empty(5, F32)
    mod(x, y)
    np.testing.assert_array_equal(y, x[1:])
    y = np.full(6, -7.0, F32)
    with pytest.raises(
        ValueError,
        match=r"shift: with n=6, m=6, update 'Y.update\(0\)': X\[r \+ 1\] reads past "
        r"dimension 0 of X \(size m\) at r=5; nothing was run",
    ):
        mod(x, y)
    assert (y == -7.0).all()
    with pytest.raises(ValueError, match=r"X\[r \+ 1\] reads past dimension 0 of X"):
        mod.time_evaluator(number=1, repeat=1)(x, y)


def test_a_saved_module_keeps_its_call_time_checks(tmp_path):
    """export_library carries the size conditions and heap temporaries: the loaded module
    refuses the same calls, before anything runs."""
    mod = pt.load_module(_shifted_read().export_library(str(tmp_path / "shift.so")))
    x, y = np.random.rand(6).astype(F32), np.full(6, -7.0, F32)
    with pytest.raises(ValueError, match=r"X\[r \+ 1\] reads past dimension 0 of X"):
        mod(x, y)
    assert (y == -7.0).all()
    y = np.empty(5, F32)
    mod(x, y)
    np.testing.assert_array_equal(y, x[1:])
    n = pt.var("n")
    A = pt.placeholder((n,), F32, name="A")
    T = pt.compute((n, n, n, n), lambda i, j, k, q: A[i] + A[j] + A[k] + A[q], name="T")
    B = pt.compute((n,), lambda i: T[i, i, i, i], name="B")
    big = pt.load_module(_build([B], [A, B], name="big").export_library(str(tmp_path / "b.so")))
    with pytest.raises(MemoryError, match=r"big: temporary buffer T would need \d+ bytes"):
        big(np.ones(65536, F32), np.empty(65536, F32))


def test_non_affine_index_is_checked_at_run_time():
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((m,), F32, name="A")
    B = pt.compute((n, n), lambda i, j: A[i * j], name="B")
    mod = _build([B], [A, B])
    a = np.random.rand(16).astype(F32)
    b = np.empty((4, 4), F32)
    mod(a, b)
    i, j = np.indices((4, 4))
    np.testing.assert_array_equal(b, a[i * j])
    with pytest.raises(
        IndexError, match=r"the index of A\[i \* j\] in dimension 0 \(size m\) is out of range"
    ):
        mod(a[:9].copy(), b)


def test_interval_arithmetic_proves_modular_indices_without_checks():
    A = pt.placeholder((16,), F32, name="A")
    k = pt.reduce_axis((0, 9), name="k")
    B = pt.compute((1,), lambda i: pt.sum(A[(k * k) % 16], axis=k), name="B")
    mod = _build([B], [A, B])
    assert "pt_checked_index" not in mod.source
    a = np.random.rand(16).astype(F32)
    b = np.empty(1, F32)
    mod(a, b)
    np.testing.assert_allclose(b[0], sum(a[(k * k) % 16] for k in range(9)), rtol=1e-6)


# ---------------------------------------------------------------- identifiers

HOSTILE = sorted(
    {
        "status", "INFINITY", "NULL", "M_PI", "EOF", "sin", "abs", "errno", "int", "main",
        "exp", "expf", "FILE", "stdin", "stderr", "linux", "unix", "NAN", "INT64_C",
        "size_t", "int64_t", "restrict", "for", "free", "posix_memalign", "omp_get_num_threads",
        "HUGE_VAL", "_x", "__y", "pt_alloc", "pt_exit", "pt_line", "pt_bad", "i", "1x", "a b",
        "SIZE_MAX", "fabsf", "llabs", "isnan", "signbit", "offsetof", "alloca", "default",
    }
)  # fmt: skip


@pytest.mark.parametrize("nm", HOSTILE)
def test_kernels_named_after_c_names_compute_the_right_thing(nm):
    n = pt.var(nm)
    A = pt.placeholder((n,), F32, name=nm)
    idx = pt.placeholder((n,), "int32", name=nm)
    if nm.isidentifier() and not keyword.iskeyword(nm):  # a spatial loop named nm
        T = pt.compute((n,), eval(f"lambda {nm}: A[{nm}] * 2.0", {"A": A}), name=nm)
    else:
        T = pt.compute((n,), lambda i: A[i] * 2.0, name=nm)
    k = pt.reduce_axis((0, n), name=nm)
    M = pt.compute((1,), lambda i: pt.max(T[k], axis=k), name=nm)  # starts at -INFINITY
    G = pt.compute((n,), lambda i: pt.const(1.0, F32), name=nm + "_g")
    r = pt.reduce_axis((0, n), name=nm)
    G[r] = G[r] + T[idx[r]]  # a run-time checked index inside a loop named nm
    mod = pt.build(pt.create_schedule([M.op, G.op]), [A, idx, M, G], name=nm)
    assert c_identifier(nm) not in RESERVED
    a = np.random.rand(5).astype(F32) - 0.5
    ix = np.array([4, 0, 3, 3, 1], "int32")
    m, g = np.empty(1, F32), np.empty(5, F32)
    mod(a, ix, m, g)
    np.testing.assert_allclose(m[0], (2 * a).max(), rtol=1e-6)
    np.testing.assert_allclose(g, 1.0 + 2 * a[ix], rtol=1e-6)
    with pytest.raises(IndexError, match=r"computed from data \(dimension 0 of size .+\) is out"):
        mod(a, np.array([0, 0, 5, 0, 0], "int32"), m, g)


@pytest.mark.skipif(shutil.which(compiler()[0]) is None, reason="needs a C compiler")
def test_the_table_holds_every_macro_of_the_included_headers():
    src = "".join(f"#include <{h}>\n" for h in ("stdint.h", "stdio.h", "stdlib.h", "math.h"))
    out = subprocess.run(
        [*compiler(), "-dM", "-E", "-"], input=src, capture_output=True, text=True, timeout=60
    ).stdout
    names = {re.match(r"#define (\w+)", ln).group(1) for ln in out.splitlines() if ln}
    missing = sorted(x for x in names if not x.startswith("_") and x not in RESERVED)
    assert missing == []


# ---------------------------------------------------------------- heap sizes


def test_heap_size_that_overflows_is_a_memory_error_not_a_segfault():
    n = pt.var("n")
    A = pt.placeholder((n,), F32, name="A")
    T = pt.compute((n, n, n, n), lambda i, j, k, q: A[i] + A[j] + A[k] + A[q], name="T")
    B = pt.compute((n,), lambda i: T[i, i, i, i], name="B")
    mod = _build([B], [A, B], name="big")
    a, b = np.ones(3, F32), np.empty(3, F32)
    mod(a, b)
    np.testing.assert_array_equal(b, 4.0)
    a, b = np.ones(65536, F32), np.empty(65536, F32)
    with pytest.raises(MemoryError, match=r"big: temporary buffer T would need \d+ bytes"):
        mod(a, b)
    # the kernel itself refuses too (status -3), for callers that skip the Python checks
    assert mod._c(a.ctypes.data, b.ctypes.data, 65536) == -3


@pytest.mark.parametrize(
    "split, message",
    [(dict(factor=2**63), r"factor: integer 9223372036854775808 does not fit int64"),
     (dict(nparts=2**64), r"nparts: integer 18446744073709551616 does not fit int64"),
     (dict(factor=2.5), r"factor must be an integer, got 2\.5"),
     (dict(nparts=True), r"nparts must be an integer, got True"),
     (dict(factor=float("nan")), r"factor must be an integer, got nan")],
)  # fmt: skip
@pytest.mark.parametrize("symbolic", [False, True])
def test_a_split_amount_c_could_not_hold_is_refused(split, message, symbolic):
    """A factor past int64 would wrap in C (a kernel that computes nothing, or a division
    by zero that kills the process): refused at the split, as are non-integers."""
    n = pt.var("n") if symbolic else 10
    A = pt.placeholder((n,), F32, name="A")
    C = pt.compute((n,), lambda i: A[i] * 2, name="C")
    s = pt.create_schedule(C.op)
    with pytest.raises(pt.ScheduleError, match=r"split on stage 'C': " + message):
        s[C].split(C.op.axis[0], **split)
    s[C].split(C.op.axis[0], factor=2**40)  # large but in range: one outer iteration
    c = np.full(10, np.nan, F32)
    pt.build(s, [A, C])(np.arange(10, dtype=F32), c)
    np.testing.assert_array_equal(c, np.arange(10, dtype=F32) * 2)


@pytest.mark.parametrize(
    "shape, error, message",
    [((2**64,), OverflowError, r"integer 18446744073709551616 does not fit int64"),
     ((2**40, 2**40), ValueError, r"has 1208925819614629174706176 elements, more than 2\*\*60")],
)  # fmt: skip
def test_a_shape_whose_offsets_would_overflow_is_refused(shape, error, message):
    with pytest.raises(error, match=message):
        pt.placeholder(shape, F32, name="A")
    with pytest.raises(error, match=message):
        pt.compute(shape, lambda *ix: pt.const(0.0, F32), name="B")


def test_constant_buffer_too_large_to_exist_is_refused_at_build():
    A = pt.placeholder((2,), "float64", name="A")  # 2**60 elements of 8 bytes
    T = pt.compute((2**30, 2**29, 2), lambda i, j, k: A[k], name="T")
    B = pt.compute((2,), lambda i: T[0, 0, i], name="B")
    with pytest.raises(MemoryError, match=r"temporary buffer T would need \d+ bytes"):
        pt.build(pt.create_schedule(B.op), [A, B], emit_only=True)


# ---------------------------------------------------------------- fuzz

GUARD = 8  # NaN elements on each side of every array


def _guarded(n: int, fill=None):
    buf = np.full(n + 2 * GUARD, np.nan, F32)
    view = buf[GUARD : GUARD + n]
    if fill is not None:
        view[:] = fill
    return buf, view


_read = st.tuples(
    st.sampled_from([1, 2, -1, 0]),  # a in X[a * i + b]
    st.integers(-3, 3),  # b
    st.sampled_from([None, ("ge", 1), ("ge", 2), ("lt", 3), ("lt", -1)]),  # guard on i
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    symbolic=st.booleans(),
    lx=st.integers(1, 7),
    ly=st.integers(1, 7),
    reads=st.lists(_read, min_size=1, max_size=2),
    write=st.sampled_from([None, -1, 0, 1]),
)
def test_fuzz_affine_accesses_refused_or_exact(symbolic, lx, ly, reads, write):
    """Random reads ``X[a*i + b]`` (under random guards) and update writes ``Y[r + w]``:
    refused with a true witness, refused at call, or equal to a numpy interpreter, and
    never a write into the NaN guards around the arrays."""
    n = pt.var("n") if symbolic else ly
    dx = lx - ly
    X = pt.placeholder(((n + dx) if symbolic else lx,), F32, name="X")
    zero = pt.const(0.0, F32)

    def value(i):
        out = zero
        for a, b, g in reads:
            term = X[a * i + b]
            if g is not None:
                term = pt.select(i >= g[1] if g[0] == "ge" else i < g[1], term, zero)
            out = out + term
        return out

    if write is None:
        Y = pt.compute((n,), value, name="Y")
    else:
        Y = pt.compute((n,), lambda i: pt.const(1.0, F32), name="Y")
        r = pt.reduce_axis((0, n), name="r")
        Y[r + write] = Y[r + write] + value(r)

    def interpret(x):  # the numpy interpreter: (output, first out-of-bounds position)
        y = np.zeros(ly, F32) if write is None else np.ones(ly, F32)
        for i in range(ly):
            acc = np.float32(0)
            for a, b, g in reads:
                if g is None or (i >= g[1] if g[0] == "ge" else i < g[1]):
                    j = a * i + b
                    if not 0 <= j < lx:
                        return None, i
                    acc += x[j]
            w = i if write is None else i + write
            if not 0 <= w < ly:
                return None, i
            y[w] = acc if write is None else y[w] + acc
        return y, None

    x = np.random.rand(lx).astype(F32)
    want, bad_at = interpret(x)
    try:
        mod = pt.build(pt.create_schedule(Y.op), [X, Y], name="fz")
    except pt.ScheduleError as e:
        assert bad_at is not None, f"refused a program that stays in bounds: {e}"
        m = re.search(r"at (?:i|r)=(-?\d+)", str(e))
        assert m, str(e)
        if not symbolic:  # the witness is a position that goes out of bounds
            assert interpret_at(reads, write, lx, ly, int(m.group(1)))
        event("refused at lower")
        return
    xbuf, xv = _guarded(lx, x)
    ybuf, yv = _guarded(ly, 0.0)
    if bad_at is not None:
        assert symbolic, "built a program that goes out of bounds for constant sizes"
        with pytest.raises(ValueError, match=r"(reads|writes) (past|before the start of)"):
            mod(xv, yv)
        assert (yv == 0.0).all()  # nothing was run
        event("refused at call")
    else:
        if write is not None:
            yv[:] = 0.0
        mod(xv, yv)
        np.testing.assert_allclose(yv, want, rtol=1e-5, atol=1e-6)
        event("built, equal to the interpreter")
    assert np.isnan(ybuf[:GUARD]).all() and np.isnan(ybuf[-GUARD:]).all()
    assert np.isnan(xbuf[:GUARD]).all() and np.isnan(xbuf[-GUARD:]).all()


def interpret_at(reads, write, lx, ly, i) -> bool:
    """Whether iteration ``i`` reads or writes out of bounds."""
    for a, b, g in reads:
        if g is None or (i >= g[1] if g[0] == "ge" else i < g[1]):
            if not 0 <= a * i + b < lx:
                return True
    w = i if write is None else i + write
    return not 0 <= w < ly


_coef = st.integers(-1, 2)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    symbolic=st.booleans(),
    lx=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    ly=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    rows=st.tuples(_coef, _coef, st.integers(-2, 2)),  # X[ai*i + aj*j + b, ...]
    cols=st.tuples(_coef, _coef, st.integers(-2, 2)),  # X[..., ci*i + cj*j + d]
)
def test_fuzz_two_dimensional_reads(symbolic, lx, ly, rows, cols):
    """``Y[i, j] = X[ai*i + aj*j + b, ci*i + cj*j + d]`` over random shapes: refused with a
    witness that is out of bounds, refused at call, or equal to numpy; guards untouched."""
    n, m = (pt.var("n"), pt.var("m")) if symbolic else ly
    X = pt.placeholder(lx, F32, name="X")  # constant, so every witness is checkable

    def index(c, i, j):
        return c[0] * i + c[1] * j + c[2]

    Y = pt.compute((n, m), lambda i, j: X[index(rows, i, j), index(cols, i, j)], name="Y")
    bad = [
        (i, j)
        for i in range(ly[0])
        for j in range(ly[1])
        if not (0 <= index(rows, i, j) < lx[0] and 0 <= index(cols, i, j) < lx[1])
    ]
    try:
        mod = pt.build(pt.create_schedule(Y.op), [X, Y], name="fz2")
    except pt.ScheduleError as e:
        w = re.search(r"at i=(-?\d+), j=(-?\d+)", str(e))
        assert w, str(e)
        i, j = int(w.group(1)), int(w.group(2))
        d = int(re.search(r"dimension (\d)", str(e)).group(1))
        assert not 0 <= index((rows, cols)[d], i, j) < lx[d], str(e)
        if not symbolic:
            assert bad
        event("refused at lower")
        return
    x = np.random.rand(*lx).astype(F32)
    xbuf, xv = _guarded(lx[0] * lx[1], x.ravel())
    ybuf, yv = _guarded(ly[0] * ly[1], 0.0)
    xv, yv = xv.reshape(lx), yv.reshape(ly)
    if bad:
        assert symbolic, "built a program that goes out of bounds for constant sizes"
        with pytest.raises(ValueError, match=r"X\[.*\] reads (past|before the start of)"):
            mod(xv, yv)
        assert (yv == 0.0).all()
        event("refused at call")
    else:
        mod(xv, yv)
        i, j = np.indices(ly)
        np.testing.assert_array_equal(yv, x[index(rows, i, j), index(cols, i, j)])
        event("built, equal to numpy")
    assert np.isnan(ybuf[:GUARD]).all() and np.isnan(ybuf[-GUARD:]).all()


def test_a_size_variable_no_argument_binds_is_refused_before_the_c_compiler():
    """Was: a split factor pt.var that no argument's shape carries reached cc ('f'
    undeclared)."""
    n, f = pt.var("n"), pt.var("f")
    A = pt.placeholder((n,), F32, name="A")
    B = pt.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = pt.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=f)
    with pytest.raises(pt.ScheduleError, match=r"size variable\(s\) f appear in the schedule"):
        pt.lower(s, [A, B], name="k")


def test_a_narrowing_integer_cast_in_an_index_is_checked_at_run_time():
    """Was: transparent to the proof, so A[int8(i)] over 200 elements was accepted and
    read A[-128..-57] (written, on an update's left side). A widening cast keeps its
    values and stays transparent to the proof."""
    A = pt.placeholder((200,), "float32", name="A")
    B = pt.compute((200,), lambda i: A[pt.cast("int8", i)], name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    with pytest.raises(IndexError, match=r"the index of A\[int8\(i\)\] in dimension 0"):
        mod(np.ones(200, np.float32))
    H = pt.placeholder((200,), "float32", name="H")
    Hs = pt.compute((200,), lambda i: H[i], name="Hs")
    (r,) = pt.rdom([(0, 200)], names="r")
    Hs[pt.cast("int8", r)] = 1.0
    scatter = pt.build(pt.create_schedule(Hs.op), [H, Hs])
    with pytest.raises(IndexError, match=r"the index of Hs?\[int8\(r\)\]"):
        scatter(np.zeros(200, np.float32))
    C = pt.compute((100,), lambda i: A[pt.cast("int8", i)], name="C")  # in range: no error
    np.testing.assert_array_equal(
        pt.build(pt.create_schedule(C.op), [A, C])(np.arange(200.0, dtype=np.float32)),
        np.arange(100.0),
    )


def test_int32_sizes_and_their_arithmetic_in_indices():
    """Was: k + 3 of an int32 k computed in int32 wrapped at k = 2**31 - 1 while the
    proof counted exactly (a read far before A); an int32 size bound from a dimension of
    3e9 was accepted. Narrow index arithmetic is checked at run time now, and a size or
    an argument beyond its dtype is refused."""
    k = pt.var("k", "int32")
    A = pt.placeholder((4,), "float32", name="A")
    B = pt.compute((2,), lambda i: A[(k + 3) // 2 - k // 2 + i], name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, k, B])
    a = np.arange(4.0, dtype=np.float32)
    np.testing.assert_array_equal(mod(a, 5), [2, 3])
    with pytest.raises(IndexError, match=r"the index of A\[.*\] in dimension 0 \(size 4\)"):
        mod(a, 2**31 - 1)
    with pytest.raises(ValueError, match="argument k: k = 2147483648 does not fit its dtype int32"):
        mod(a, 2**31)
    m = pt.var("m", "int32")
    C = pt.placeholder((2, m), "float32", name="C")
    D = pt.compute((2,), lambda i: C[i, m - 1], name="D")
    dmod = pt.build(pt.create_schedule(D.op), [C, D])
    big = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (2, 3 * 10**9), (0, 0))
    with pytest.raises(ValueError, match="argument C: m = 3000000000 does not fit its dtype int32"):
        dmod(big)
    np.testing.assert_array_equal(dmod(np.ones((2, 3), np.float32)), [1, 1])


@pytest.mark.parametrize("dtype, at_call", [("int32", True), ("int64", True), ("uint8", False)])
def test_narrow_size_arithmetic_that_cannot_wrap_is_checked_at_the_call(dtype, at_call):
    """``m - 1`` of an int32 size is at least -1: exact, so the proof covers it and a
    call that would read before A is refused before anything is written (was: checked
    during the run, the output half written). Of a uint8 size it may wrap (m = 0): the
    run's own check, as before."""
    n, m = pt.var("n", dtype), pt.var("m", dtype)
    A = pt.placeholder((m,), "float32", name="A")
    B = pt.compute((n,), lambda i: A[m - 1 - i], name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    a, b = np.arange(5, dtype=F32), np.full(7, -7.0, F32)
    if at_call:
        with pytest.raises(ValueError, match=r"A\[m - 1 - i\] reads before the start"):
            mod(a, b)
        assert (b == -7.0).all()
    else:
        with pytest.raises(IndexError, match=r"the index of A\[m - 1 - i\] in dimension 0"):
            mod(a, b)
    b = np.full(5, -7.0, F32)
    mod(a, b)
    np.testing.assert_array_equal(b, a[::-1])


def _guarded_tail():
    """A read guarded by a select in a vectorized loop of 8 floats whose last tile runs
    past A (37 of 40): gcc 12 folded its constant mask into a full-width load."""
    A = pt.placeholder((37,), "float32", name="A")
    C = pt.compute((40,), lambda i: pt.select(i < 37, A[i], pt.const(0, "float32")), name="C")
    s = pt.create_schedule(C.op)
    s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
    return s, [A, C]


@pytest.mark.parametrize("target", ["x86-avx512", "x86-avx512-bf16", "x86-amx"])
def test_a_guarded_read_is_no_full_width_load_on_avx512(target, tmp_path):
    """Was: `vblendps $31, 128(%rdi)`, 32 bytes read from A[32..39] of 37 (a fault at a
    page's end); the AVX-512 targets build without AVX-512VL now: vmaskmovps."""
    if platform.machine() != "x86_64" or shutil.which("gcc") is None:
        pytest.skip("needs gcc for x86-64")
    src = tmp_path / "k.c"
    src.write_text(pt.build(*_guarded_tail(), target=target, emit_only=True))
    flags = [f for f in pt.Target(target).cflags if f not in ("-shared", "-fPIC")]
    asm = subprocess.run(["gcc", *flags, "-S", "-o", "-", str(src)], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert not re.search(r"v(p)?blend\w*\s+\$\d+, -?\d*\(%", asm), asm
    assert re.search(r"vmaskmovps|\{%k\d\}", asm), "no masked load: the guard was lost"


def test_a_guarded_read_at_a_page_end_runs():
    """The same kernel on this host's target with A ending at an unreadable page (in a
    child process: a fault would kill it)."""
    r = subprocess.run([sys.executable, "-c", _PAGE_END], capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-1500:])


_PAGE_END = """
import ctypes, mmap, numpy as np, pypto as pt
page = mmap.PAGESIZE
buf = mmap.mmap(-1, 2 * page)
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
assert libc.mprotect(base + page, page, 0) == 0
a = np.frombuffer(buf, np.float32, 37, page - 37 * 4)
a[:] = np.arange(37)
A = pt.placeholder((37,), "float32", name="A")
C = pt.compute((40,), lambda i: pt.select(i < 37, A[i], pt.const(0, "float32")), name="C")
s = pt.create_schedule(C.op)
s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
c = pt.build(s, [A, C])(a)
assert (c[:37] == a).all() and (c[37:] == 0).all()
print("ok")
"""


def test_an_index_with_a_huge_constant_is_refused():
    """Was: proven in bounds with exact integers, while C's int64 product overflowed
    (undefined: gcc even dropped the run-time check) and read A[-2]."""
    A = pt.placeholder((8,), "float32", name="A")
    B = pt.compute((8,), lambda i: A[(i * 2**62 + i) // 2**62], name="B")
    with pytest.raises(pt.ScheduleError, match=r"an index constant of 2\*\*32 or more may "
                                               "overflow the int64 arithmetic"):  # fmt: skip
        pt.build(pt.create_schedule(B.op), [A, B])
