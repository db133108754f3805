"""The 30 PolyBench/C 4.2 kernels written in pypto (``python -m benchmarks.polybench``)."""

from . import blas, kernels, medley, solvers, stencils  # noqa: F401  (each module registers its kernels)
from .common import KERNELS, build, check, run

__all__ = ["KERNELS", "build", "check", "run"]
