"""Time the compiler's stages: lower, C generation, cc, and the isl legality check.

    python benchmarks/compile_time.py

A tuner builds thousands of candidates, so lowering + code generation
should stay far below the C compiler's own time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pypto as pt  # noqa: E402
from pypto.bounds import infer  # noqa: E402
from pypto.codegen_c import codegen  # noqa: E402
from pypto.legality import check_schedule  # noqa: E402
from pypto.runtime import compile_source  # noqa: E402


def tiled_matmul(n=1024):
    A = pt.placeholder((n, n), "float32", name="A")
    B = pt.placeholder((n, n), "float32", name="B")
    k = pt.reduce_axis((0, n), name="k")
    C = pt.compute((n, n), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].parallel(io)
    s[C].unroll(ki)
    s[C].vectorize(ji)
    return s, [A, B, C]


def skewed_dp():
    n, m = pt.var("n"), pt.var("m")
    S = pt.placeholder((n, m), "float32", name="S")
    T = pt.compute((n, m), lambda i, j: S[i, j], name="T")
    ri, rj = pt.reduce_axis((1, n), name="ri"), pt.reduce_axis((1, m), name="rj")
    T[ri, rj] = pt.max(pt.max(T[ri - 1, rj], T[ri, rj - 1]), T[ri - 1, rj - 1]) + S[ri, rj]
    s = pt.create_schedule(T.op)
    u = s[T].update(0)
    ni, nj = u.skew(ri, rj, factor=1)
    u.reorder(nj, ni)
    u.parallel(ni)
    return s, [S, T]


def legality_ms(make, reps: int = 15) -> float:
    """Median time of the whole-schedule legality check (isl) that ``lower`` runs, over
    nests already inferred (``bounds.infer``)."""
    s, args = make()
    times = []
    for _ in range(reps):
        nests = infer(s, args=args)
        t0 = time.perf_counter()
        check_schedule(s, nests)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=15, help="timed repetitions (medians)")
    a = p.parse_args(argv)
    if a.reps < 1:
        p.error(f"--reps must be positive, got {a.reps}")
    target = pt.Target("host")
    t_lower, t_gen, t_cc = [], [], []
    for rep in range(a.reps):
        t0 = time.perf_counter()
        s, args = tiled_matmul()
        func = pt.lower(s, args, name="mm")
        t1 = time.perf_counter()
        src, _ = codegen(func, target)
        t2 = time.perf_counter()
        t_lower.append(t1 - t0)
        t_gen.append(t2 - t1)
        if rep < 3:  # a fresh cache directory forces a real compiler run
            os.environ["PYPTO_CACHE_DIR"] = tempfile.mkdtemp(prefix="pypto-bench-")
            t3 = time.perf_counter()
            compile_source(src, target.cflags)
            t_cc.append(time.perf_counter() - t3)
    ms = lambda xs: f"{np.median(xs) * 1e3:.1f} ms"  # noqa: E731
    print("6-loop tiled matmul (1024^3), medians")
    print(f"  schedule + lower : {ms(t_lower)}")
    print(f"  C generation     : {ms(t_gen)}")
    print(f"  C compiler (cc)  : {ms(t_cc)}")
    print("legality check (isl), medians")
    print(f"  tiled matmul, parallel + vectorize : {legality_ms(tiled_matmul, a.reps):.1f} ms")
    print(f"  skewed 2-D DP, parallel wavefront  : {legality_ms(skewed_dp, a.reps):.1f} ms")


if __name__ == "__main__":
    main()
