"""Vectorized loops peeled to their first aligned store (``pypto/align_peel.py``)."""

import re

import numpy as np
import pytest

import pypto as pt
from pypto.arg_checks import aligned_copy


def _row_stencil(rows: int, n: int, dtype: str = "float64"):
    """B[i, k] = A[i, k-1] + A[i, k] + A[i, k+1] over the interior k = 1 .. n-2 of each row,
    the k loop vectorized (a stencil's row from column 1)."""
    A = pt.placeholder((rows, n), dtype, name="A")
    B0 = pt.placeholder((rows, n), dtype, name="B0")
    B = pt.compute((rows, n), lambda i, k: B0[i, k], name="B")
    i, k = pt.rdom([(0, rows), (1, n - 1)], names="i k")
    B[i, k] = A[i, k - 1] + A[i, k] + A[i, k + 1]
    s = pt.create_schedule(B.op)
    s[B].update(0).vectorize(k)
    return s, [A, B0, B]


def _simd_loops(src: str) -> list:
    """(start offset in the store's index, trip count) of each ``omp simd`` loop over k."""
    loops = re.findall(r"#pragma omp simd\n\s*for \(int64_t (k\w*) = 0; \1 < (\d+);", src)
    return [int(n) for _, n in loops]


@pytest.mark.parametrize("target, peel", [("x86-avx512", 7), ("x86-avx2", 3), ("generic", 1)])
def test_a_row_from_column_1_is_peeled_to_the_targets_vector_boundary(target, peel):
    """Rows of 128 float64 (a whole number of vectors on every target): the stores start
    at column 1, so ``lanes - 1`` iterations run first, the rest from a boundary."""
    s, args = _row_stencil(4, 128)
    src = pt.build(s, args, target=target, emit_only=True)
    assert _simd_loops(src) == [peel, 126 - peel]
    assert f"+ {peel + 1}]" in src.split("#pragma omp simd")[2]  # the rest starts there


@pytest.mark.parametrize(
    "rows, n, why",
    [(4, 100, "rows of 100 float64: where a row starts in a vector changes row by row"),
     (4, 40, "a loop of fewer than 8 vectors runs whole")],
)  # fmt: skip
def test_what_is_not_known_or_does_not_pay_is_left_whole(rows, n, why):
    s, args = _row_stencil(rows, n)
    src = pt.build(s, args, target="x86-avx512", emit_only=True)
    assert _simd_loops(src) == [n - 2], why


def test_a_store_already_on_a_boundary_is_left_whole():
    A = pt.placeholder((4, 128), "float64", name="A")
    B = pt.compute((4, 128), lambda i, k: A[i, k] * 2.0, name="B")
    s = pt.create_schedule(B.op)
    s[B].vectorize(B.op.axis[1])
    assert _simd_loops(pt.build(s, [A, B], target="x86-avx512", emit_only=True)) == [128]


@pytest.mark.parametrize("offset", [0, 8, 16])
def test_peeled_kernels_compute_the_same_on_arrays_starting_anywhere(offset):
    """The peel assumes arrays that start on a cache line; any other start (numpy's own
    are 16 bytes in) computes the same."""
    s, args = _row_stencil(6, 136)
    mod = pt.build(s, args)
    rng = np.random.default_rng(0)
    a, b0 = rng.standard_normal((6, 136)), rng.standard_normal((6, 136))

    def at_offset(x):
        raw = aligned_copy(np.zeros(x.size + 8))
        out = raw[offset // 8 : offset // 8 + x.size].reshape(x.shape)
        out[...] = x
        return out

    want = b0.copy()
    want[:, 1:-1] = a[:, :-2] + a[:, 1:-1] + a[:, 2:]
    b = at_offset(np.full((6, 136), np.nan))
    mod(at_offset(a), at_offset(b0), b)
    assert b.ctypes.data % 64 == offset
    np.testing.assert_allclose(b, want, rtol=1e-15)
    profile = mod.profile(at_offset(a), at_offset(b0), b)  # both loops timed as the update
    assert [(r.stage, r.flops) for r in profile] == [("B", 0), ("B.update(0)", 2 * 6 * 134)]
