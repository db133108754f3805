"""The 30 PolyBench/C 4.2 kernels (benchmarks/polybench) against numpy references that
follow the C nests, at PolyBench's MINI and SMALL sizes, unscheduled and scheduled."""

import pytest

from benchmarks.polybench import KERNELS, check

CATEGORIES = {"blas", "kernels", "datamining", "solvers", "medley", "stencils"}


def test_all_thirty_kernels_are_registered():
    assert len(KERNELS) == 30
    assert {k.category for k in KERNELS.values()} == CATEGORIES
    assert sum(k.category == "stencils" for k in KERNELS.values()) == 6


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("size,tuned", [("MINI", False), ("SMALL", False), ("SMALL", True)])
def test_kernel_matches_the_c_nest(name, size, tuned):
    check(name, size, tuned)  # raises, naming the first element that differs
