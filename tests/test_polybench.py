"""The 30 PolyBench/C 4.2 kernels (benchmarks/polybench) against numpy references that
follow the C nests, at PolyBench's MINI and SMALL sizes, unscheduled and scheduled."""

import numpy as np
import pytest

import pypto as pt
from benchmarks.polybench import KERNELS, check
from benchmarks.polybench.common import run
from benchmarks.polybench.stencils import seidel_time_tiles

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
