"""The 30 PolyBench/C 4.2 kernels written in pypto (``python -m benchmarks.polybench``).

Modules by PolyBench's categories: ``blas``, ``kernels`` (linear-algebra kernels and
datamining), ``solvers``, ``medley``, ``stencils``. Each kernel states its statements as
the C nest does: pure definitions for the arrays it initialises, update definitions in
the C nest's order, ``compute_with`` where statements share loops (time steps, a
statement before or after an inner loop), reductions inside updates where the C nest
accumulates into a scalar first.

Where the form departs from the C source:

- durbin's statement ``beta = (1 - alpha * alpha) * beta`` names no loop variable, and
  an update runs over the rdoms it names: it is written under ``pt.select(k >= 1, ...)``,
  a condition that always holds, to run at every step k (alpha, beta and sum are 0-d
  tensors, as the C nest's scalars);
- deriche's carried scalars (xm1, ym1, ...) are reads of the previous elements,
  under ``pt.select`` for the first ones (the C nest's zero initialisation);
- loops that run downwards (ludcmp, nussinov, deriche, adi) run over ``r`` with
  ``i = N - 1 - r``;
- symmetric results (covariance, correlation) are computed for every element, not
  for one triangle and copied.
"""

from . import blas, kernels, medley, solvers, stencils  # noqa: F401  (registration)

# isort: split
from . import adi  # noqa: F401  (after the other stencils: the suite's order)
from .common import KERNELS, build, check, run

__all__ = ["KERNELS", "build", "check", "run"]
