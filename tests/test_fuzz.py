"""Property-based schedule fuzzing: random legal schedules must not change results.

For a few pure computations, hypothesis draws a random schedule (splits with
factors that need not divide the extents, a permutation of all loops, an
optional fuse of the two outermost loops, parallel / vectorize / unroll
annotations, and where a producer stage is computed), builds it and compares
the output against numpy. Data are small integers stored as float32, so every
result is exact whatever the summation order.

PYPTO_FUZZ_EXAMPLES sets the number of examples per test (default 25).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from fuzzing import FUZZ
from hypothesis import given
from hypothesis import strategies as st

import pypto as pt

BOUND_CHECKS = True  # every kernel checks its accesses at run time (conftest.py)


SIZE = st.integers(1, 10)
WIDE = st.integers(1, 20)
F64 = "float64"


def _ints(rng, shape):
    return rng.integers(-4, 5, shape).astype("float32")


def _nan(shape):
    return np.full(shape, np.nan, dtype="float32")


def _pick(data, loops, label):
    """Draw one of ``loops`` by name (so failing examples print readably)."""
    by_name = {iv.name: iv for iv in loops}
    return by_name[data.draw(st.sampled_from(sorted(by_name)), label=label)]


def random_loops(data, stage, label, allow_parallel=True):
    """Draw splits, a loop order, a fuse and annotations for ``stage``; return a log."""
    log = []
    for _ in range(data.draw(st.integers(0, 3), label=f"{label}.nsplits")):
        iv = _pick(data, stage.leaf_iter_vars, f"{label}.split_loop")
        amount = data.draw(st.integers(1, 9), label=f"{label}.split_amount")
        if data.draw(st.booleans(), label=f"{label}.use_nparts"):
            stage.split(iv, nparts=amount)
            log.append(f"split({iv.name}, nparts={amount})")
        else:
            stage.split(iv, factor=amount)
            log.append(f"split({iv.name}, factor={amount})")
    # any permutation: reduction and spatial loops commute for these pure computations
    by_name = {iv.name: iv for iv in stage.leaf_iter_vars}
    names = data.draw(st.permutations(sorted(by_name)), label=f"{label}.order")
    order = [by_name[n] for n in names]
    if len(order) > 1:
        stage.reorder(*order)
        log.append(f"reorder({', '.join(iv.name for iv in order)})")
    loops = stage.leaf_iter_vars
    if (
        len(loops) >= 2
        and loops[0].kind == loops[1].kind
        and data.draw(st.booleans(), label=f"{label}.fuse")
    ):
        f = stage.fuse(loops[0], loops[1])
        log.append(f"fuse -> {f.name}")
    loops = list(stage.leaf_iter_vars)
    annotated = set()
    outer_spatial = [iv for iv in loops[:2] if iv.kind == "spatial"]
    if allow_parallel and outer_spatial and data.draw(st.booleans(), label=f"{label}.par"):
        iv = _pick(data, outer_spatial, f"{label}.par_loop")
        stage.parallel(iv)
        annotated.add(iv)
        log.append(f"parallel({iv.name})")
    inner = loops[-1]
    if (
        inner.kind == "spatial"
        and inner not in annotated
        and data.draw(st.booleans(), label=f"{label}.vec")
    ):
        stage.vectorize(inner)
        annotated.add(inner)
        log.append(f"vectorize({inner.name})")
    free = [iv for iv in loops if iv not in annotated]
    if free and data.draw(st.booleans(), label=f"{label}.unroll"):
        iv = _pick(data, free, f"{label}.unroll_loop")
        stage.unroll(iv)
        log.append(f"unroll({iv.name})")
    return log


def place_producer(data, s, producer, consumer, label, allow_inline=True):
    """Compute ``producer`` at the root, inline, or at any loop of ``consumer``."""
    loops = s[consumer].leaf_iter_vars
    choices = ["root", *(["inline"] if allow_inline else []), "at"]
    where = data.draw(st.sampled_from(choices), label=f"{label}.where")
    if where == "inline":
        s[producer].compute_inline()
        return "inline"
    if where == "at":
        iv = _pick(data, loops, f"{label}.at_loop")
        s[producer].compute_at(s[consumer], iv)
        where = f"compute_at({consumer.name}, {iv.name})"
    random_loops(data, s[producer], label)
    return where


def _dims(data, symbolic, names, size=SIZE):
    """Concrete sizes, and the extents used in the definition (vars if symbolic)."""
    sizes = [data.draw(size, label=f"size_{n}") for n in names]
    exts = [pt.var(n) for n in names] if symbolic else sizes
    return sizes, exts


RACE = r"inside parallel loop .* would race: different iterations of .* compute overlapping parts"


def build_or_race(s, args, name):
    """Build, or None when a producer attached inside a parallel loop would have two
    iterations write the same part of a shared buffer: a real race, refused by design."""
    try:
        return pt.build(s, args, name=name)
    except pt.ScheduleError as e:
        assert re.search(RACE, str(e)), str(e)
        return None


def _run_sizes(data, symbolic, sizes, names, size=SIZE):
    """The shapes to call the kernel with: the drawn one, plus another if symbolic."""
    runs = [sizes]
    if symbolic:
        runs.append([data.draw(size, label=f"size2_{n}") for n in names])
    return runs


@FUZZ
@given(data=st.data(), symbolic=st.booleans(), with_producer=st.booleans())
def test_fuzz_matmul(data, symbolic, with_producer):
    (M, N, K), (Me, Ne, Ke) = _dims(data, symbolic, ["m", "n", "kk"])
    A = pt.placeholder((Me, Ke), "float32", name="A")
    B = pt.placeholder((Ke, Ne), "float32", name="B")
    if with_producer:
        AP = pt.compute((Me, Ke), lambda i, k: A[i, k] + 1.0, name="AP")
    else:
        AP = A
    k = pt.reduce_axis((0, Ke), name="k")
    C = pt.compute((Me, Ne), lambda i, j: pt.sum(AP[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    random_loops(data, s[C], "C")
    if with_producer:
        place_producer(data, s, AP, C, "AP")
    mod = build_or_race(s, [A, B, C], "fuzz_mm")
    if mod is None:
        return
    _check_matmul(mod, data, symbolic, (M, N, K), seed=0, shift=1 if with_producer else 0)


@FUZZ
@given(data=st.data(), symbolic=st.booleans(), copy=st.sampled_from(["none", "P", "B"]))
def test_fuzz_reduction_over_neighbours(data, symbolic, copy):
    """A reduction C reading a producer at two rows (``P[i, k] + P[i + 2, k]``) and read
    by D: the producer, and a ``cache_read`` copy of it or of the other input, each
    attached at any loop of the reduction (spatial or reduce), the reduction at the root
    or at any loop of D, under random schedules of both. In float64 (small integers:
    exact in any order), sizes up to 20 (whole vectors and remainders)."""
    (M, N, K), (Me, Ne, Ke) = _dims(data, symbolic, ["m", "n", "kk"], WIDE)
    A = pt.placeholder((Me + 2, Ke), F64, name="A")
    B = pt.placeholder((Ke, Ne), F64, name="B")
    P = pt.compute((Me + 2, Ke), lambda i, k: A[i, k] * 2.0 + 1.0, name="P")
    k = pt.reduce_axis((0, Ke), name="k")
    C = pt.compute(
        (Me, Ne), lambda i, j: pt.sum((P[i, k] + P[i + 2, k]) * B[k, j], axis=k), name="C"
    )
    D = pt.compute((Me, Ne), lambda i, j: C[i, j] * 0.5 + pt.cast(F64, j), name="D")
    s = pt.create_schedule(D.op)
    random_loops(data, s[D], "D")
    local = s.cache_read(P if copy == "P" else B, "local", [C]) if copy != "none" else None
    place_producer(data, s, C, D, "C", allow_inline=False)  # then C's own loops
    if local is not None:
        place_producer(data, s, local, C, local.name, allow_inline=False)
    # P at a loop of its reader: the copy of it, or C
    place_producer(data, s, P, local if copy == "P" else C, "P", allow_inline=False)
    mod = build_or_race(s, [A, B, D], "fuzz_neighbours")
    if mod is None:
        return
    rng = np.random.default_rng(3)
    for m, n, kk in _run_sizes(data, symbolic, (M, N, K), ["m", "n", "kk"], WIDE):
        a, b = _ints(rng, (m + 2, kk)).astype(F64), _ints(rng, (kk, n)).astype(F64)
        d = np.full((m, n), np.nan)
        mod(a, b, d)
        p = a * 2 + 1
        ref = ((p[:-2] + p[2:]) @ b) * 0.5 + np.arange(n)
        np.testing.assert_array_equal(d, ref, err_msg=f"{m}x{n}x{kk}")


def _check_matmul(mod, data, symbolic, sizes, seed, shift=0):
    """``mod(a, b, c)`` gives ``(a + shift) @ b`` exactly, at ``sizes`` (and others if
    symbolic), into an output prefilled with NaN."""
    rng = np.random.default_rng(seed)
    for m, n, kk in _run_sizes(data, symbolic, sizes, ["m", "n", "kk"]):
        a, b = _ints(rng, (m, kk)), _ints(rng, (kk, n))
        c = _nan((m, n))
        mod(a, b, c)
        ref = (a + shift).astype(np.float64) @ b
        np.testing.assert_array_equal(c, ref.astype("float32"), err_msg=f"{m}x{n}x{kk}")


@FUZZ
@given(data=st.data(), symbolic=st.booleans())
def test_fuzz_elementwise_chain(data, symbolic):
    (N, M), (Ne, Me) = _dims(data, symbolic, ["n", "m"])
    A = pt.placeholder((Ne, Me), "float32", name="A")
    B = pt.compute((Ne, Me), lambda i, j: A[i, j] * 2.0, name="B")
    C = pt.compute((Ne, Me), lambda i, j: B[i, j] + 1.0, name="C")
    s = pt.create_schedule(C.op)
    random_loops(data, s[C], "C")
    place_producer(data, s, B, C, "B")
    mod = build_or_race(s, [A, C], "fuzz_chain")
    if mod is None:
        return
    rng = np.random.default_rng(1)
    for n, m in _run_sizes(data, symbolic, (N, M), ["n", "m"]):
        a = _ints(rng, (n, m))
        c = _nan((n, m))
        mod(a, c)
        np.testing.assert_array_equal(c, a * 2 + 1, err_msg=f"{n}x{m}")


@FUZZ
@given(data=st.data(), symbolic=st.booleans(), with_producer=st.booleans())
def test_fuzz_row_sum(data, symbolic, with_producer):
    (N, M), (Ne, Me) = _dims(data, symbolic, ["n", "m"])
    A = pt.placeholder((Ne, Me), "float32", name="A")
    P = pt.compute((Ne, Me), lambda i, j: A[i, j] * A[i, j], name="P") if with_producer else A
    k = pt.reduce_axis((0, Me), name="k")
    R = pt.compute((Ne,), lambda i: pt.sum(P[i, k], axis=k), name="R")
    s = pt.create_schedule(R.op)
    random_loops(data, s[R], "R")
    if with_producer:
        place_producer(data, s, P, R, "P")
    mod = build_or_race(s, [A, R], "fuzz_rowsum")
    if mod is None:
        return
    rng = np.random.default_rng(2)
    for n, m in _run_sizes(data, symbolic, (N, M), ["n", "m"]):
        a = _ints(rng, (n, m))
        r = _nan((n,))
        mod(a, r)
        ref = ((a * a) if with_producer else a).sum(axis=1)
        np.testing.assert_array_equal(r, ref, err_msg=f"{n}x{m}")


@pytest.mark.parametrize("case", ["attach_at_unrolled", "attach_at_unit_loop_inside_unrolled"])
def test_unrolled_attach_loop_regression(case):
    # found by test_fuzz_row_sum / test_fuzz_elementwise_chain: unrolled copies of the
    # attach loop used to redeclare the producer's buffer in one C scope
    A = pt.placeholder((2, 1), "float32", name="A")
    B = pt.compute((2, 1), lambda i, j: A[i, j] * 2.0, name="B")
    C = pt.compute((2, 1), lambda i, j: B[i, j] + 1.0, name="C")
    s = pt.create_schedule(C.op)
    i, j = C.op.axis
    s[B].compute_at(s[C], i if case == "attach_at_unrolled" else j)
    s[C].unroll(i)
    mod = pt.build(s, [A, C], name="unroll_attach")
    a = np.array([[2], [3]], dtype="float32")
    c = _nan((2, 1))
    mod(a, c)
    np.testing.assert_array_equal(c, a * 2 + 1)


@FUZZ
@given(data=st.data(), symbolic=st.booleans())
def test_fuzz_cache_write_after_splits(data, symbolic):
    # cache_write after random splits (dividing or not), an order and a fuse of the
    # spatial loops: the cache is laid out as they run, padded where a split does not
    # divide; then the cache itself gets random loops and is computed at the root or
    # at a loop of the copy
    (M, N, K), (Me, Ne, Ke) = _dims(data, symbolic, ["m", "n", "kk"])
    A = pt.placeholder((Me, Ke), "float32", name="A")
    B = pt.placeholder((Ke, Ne), "float32", name="B")
    k = pt.reduce_axis((0, Ke), name="k")
    C = pt.compute((Me, Ne), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    for _ in range(data.draw(st.integers(0, 3), label="nsplits")):
        spatial = [iv for iv in s[C].leaf_iter_vars if iv.kind == "spatial"]
        iv = _pick(data, spatial, "split_loop")
        amount = data.draw(st.integers(1, 9), label="split_amount")
        if data.draw(st.booleans(), label="use_nparts"):
            s[C].split(iv, nparts=amount)
        else:
            s[C].split(iv, factor=amount)
    spatial = {iv.name: iv for iv in s[C].leaf_iter_vars if iv.kind == "spatial"}
    order = [spatial[n] for n in data.draw(st.permutations(sorted(spatial)), label="order")]
    s[C].reorder(*order, k)
    if len(order) >= 2 and data.draw(st.booleans(), label="fuse"):
        s[C].fuse(order[0], order[1])
    CL = s.cache_write(C, "local")
    place_producer(data, s, CL, C, "CL", allow_inline=False)
    mod = build_or_race(s, [A, B, C], "fuzz_cw")
    if mod is None:
        return
    _check_matmul(mod, data, symbolic, (M, N, K), seed=3)
