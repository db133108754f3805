"""The 30 PolyBench/C 4.2 kernels (benchmarks/polybench) against numpy references that
follow the C nests, at PolyBench's MINI and SMALL sizes, unscheduled and scheduled."""

import numpy as np
import pytest

import pypto as pt
from benchmarks.polybench import KERNELS, check
from benchmarks.polybench.common import copies, run, schedule_of
from benchmarks.polybench.stencils import seidel_time_tiles, tile_updates, time_tiles

CATEGORIES = {"blas", "kernels", "datamining", "solvers", "medley", "stencils"}


def test_all_thirty_kernels_are_registered():
    assert len(KERNELS) == 30
    assert {k.category for k in KERNELS.values()} == CATEGORIES
    assert sum(k.category == "stencils" for k in KERNELS.values()) == 6


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("size,tuned", [("MINI", False), ("SMALL", False), ("SMALL", True)])
def test_kernel_matches_the_c_nest(name, size, tuned):
    check(name, size, tuned)  # raises, naming the first element that differs


def test_seidel_2d_time_tiles_are_legal_and_exact():
    k = KERNELS["seidel-2d"]
    prog = k.make(**k.sizes["MINI"])
    s = pt.create_schedule([t.op for t in prog.outs])
    seidel_time_tiles(s, prog.outs[0], t_tile=4, i_tile=8, j_tile=16)
    mod = pt.build(s, prog.ins + prog.outs)
    inputs = prog.init(np.random.default_rng(3))
    (got,) = run(mod, prog, inputs)
    np.testing.assert_allclose(got, prog.reference(*inputs)[0], rtol=1e-12)
    s = pt.create_schedule([t.op for t in prog.outs])
    u = s[prog.outs[0]].update(0)
    t, i, j = u.op.axis
    with pytest.raises(pt.ScheduleError, match=r"reorder\(i, t\) on 'A.update\(0\)' would break"):
        u.reorder(i, t)  # i before t: the next sweep's rows would run first


# ------------------------------------------- the legal schedules the suite is known for


def _exact(prog, s, seed=5, atol=0.0):
    mod = pt.build(s, prog.ins + prog.outs)
    inputs = prog.init(np.random.default_rng(seed))
    for got, want in zip(run(mod, prog, inputs), prog.reference(*copies(inputs))):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=atol)
    return mod


@pytest.mark.parametrize("wavefront", [False, True])
def test_nussinov_in_diagonal_order_and_as_a_wavefront(wavefront):
    """Both statements skewed (j + r: one diagonal j - i per outer iteration) and shared
    down to the diagonal loop; the rows of one diagonal are independent (a wavefront)."""
    k = KERNELS["nussinov"]
    prog = k.make(**k.sizes["MINI"])
    (T,) = prog.outs
    s = pt.create_schedule(T.op)
    for u in (s[T].update(0), s[T].update(1)):
        r, j = u.op.axis[:2]
        r, diagonal = u.skew(r, j, factor=1)
        u.reorder(diagonal, r)
        if wavefront:
            u.parallel(r)
    s[T].update(1).compute_with(s[T].update(0), s[T].update(0).op.axis[0])
    mod = _exact(prog, s)
    assert ("#pragma omp parallel for" in mod.source) == wavefront


def test_fdtd_2d_rows_parallel_and_vectorized():
    """fdtd-2d's three sweeps of a time step: rows i in parallel, columns j vectorized."""
    k = KERNELS["fdtd-2d"]
    prog = k.make(**k.sizes["MINI"])
    ex, ey, hz = prog.outs
    s = schedule_of(prog, tuned=False)
    for u in (s[ey].update(1), s[ex].update(0), s[hz].update(0)):
        t, i, j = u.op.axis
        u.parallel(i)
        u.vectorize(j)
    mod = _exact(prog, s)
    assert mod.source.count("#pragma omp parallel for") >= 3


def test_tiled_loops_shared_by_tensors_that_read_each_other_are_refused():
    """Was: an IndexError inside the polyhedral model. jacobi-1d's A and B read each
    other, so their fused nest is the program's order: it cannot share the three loops
    of a skewed and split time nest when each statement has two."""
    k = KERNELS["jacobi-1d"]
    p = k.make(**k.sizes["MINI"])
    A, B = p.outs
    s = pt.create_schedule([A.op, B.op])
    leaves = []
    for T in (B, A):
        u = s[T].update(0)
        t, i = u.op.axis
        _, i2 = u.skew(t, i, 2)
        to, ti = u.split(t, factor=4)
        io, ii = u.split(i2, factor=8)
        u.reorder(to, io, ti, ii)
        leaves.append(ti)
    s[A].update(0).compute_with(s[B].update(0), leaves[0])
    with pytest.raises(pt.ScheduleError, match="shares 3 loops .* only 2 loop"):
        pt.build(s, p.ins + p.outs, emit_only=True)


@pytest.mark.parametrize(
    "name, tiles",
    [
        ("jacobi-1d", (8,)),
        ("jacobi-2d", (4, 8)),
        ("jacobi-2d", (8, None)),
        ("heat-3d", (4, 4, None)),
        ("heat-3d", (4, None, None)),
    ],
)
def test_stencil_time_tiles_are_exact_at_small(name, tiles):
    """The LARGE schedule (time tiles, shift, ``order=t``) at SMALL, where the timed
    schedule keeps the plain time loop: the same values as the C nest."""
    k = KERNELS[name]
    prog = k.make(**k.sizes["SMALL"])
    A, B = prog.outs
    s = pt.create_schedule([A.op, B.op])
    time_tiles(s, B, A, tiles)
    _exact(prog, s)


@pytest.mark.parametrize("tiles", [(4, 16), (8, None)])
def test_fdtd_2d_time_tiles_of_four_statements_are_exact_at_small(tiles):
    """fdtd-2d's LARGE schedule at SMALL: the boundary row, ey, ex and hz (a row and a
    column behind) skewed by the time step and sharing the tiles, the time loop and
    the rows; the C nest's values (up to 1e-14 where a difference of values near 1
    cancels, as the compiler fuses other multiply-adds in the vectorized rows)."""
    k = KERNELS["fdtd-2d"]
    prog = k.make(**k.sizes["SMALL"])
    ex, ey, hz = prog.outs
    s = pt.create_schedule([t.op for t in prog.outs])
    updates = [s[ey].update(0), s[ey].update(1), s[ex].update(0), s[hz].update(0)]
    tile_updates(s, updates, tiles, skew=1, shifts=((0, 0), (1, 0), (0, 1), (1, 1)))
    _exact(prog, s, atol=1e-14)


def test_fdtd_2d_time_tiles_without_the_shifts_are_refused():
    """hz reads ey's next row: with hz not a row behind, the tiles break that."""
    k = KERNELS["fdtd-2d"]
    prog = k.make(**k.sizes["MINI"])
    ex, ey, hz = prog.outs
    s = pt.create_schedule([t.op for t in prog.outs])
    updates = [s[ey].update(0), s[ey].update(1), s[ex].update(0), s[hz].update(0)]
    with pytest.raises(pt.ScheduleError, match="would break a dependence"):
        tile_updates(s, updates, (4, 8), skew=1, shifts=((0, 0), (1, 0), (0, 1), (0, 0)))


@pytest.mark.parametrize("name, shifts", [("jacobi-2d", 1), ("heat-3d", 1), ("fdtd-2d", 4)])
def test_the_large_stencils_are_time_tiled(name, shifts):
    """At LARGE (arrays past any L2 this project targets) the timed schedules of
    jacobi-2d, heat-3d and fdtd-2d are the time-tiled ones; schedule only, as the arrays
    are 9.6 to 13.8 MB each."""
    k = KERNELS[name]
    prog = k.make(**k.sizes["LARGE"])
    s = schedule_of(prog, tuned=True)
    assert [st["prim"] for st in s.steps].count("shift") == shifts
    assert s.steps[-1]["prim"] == "compute_with" and s.steps[-1]["order"] == 1
