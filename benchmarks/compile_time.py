"""Time the compiler's stages for a 6-loop tiled matmul: lower, C generation, cc.

    python benchmarks/compile_time.py

A tuner builds thousands of candidates, so lowering + code generation
should stay far below the C compiler's own time.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pypto as pt  # noqa: E402
from pypto.codegen_c import codegen  # noqa: E402
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


def main():
    target = pt.Target("host")
    t_lower, t_gen, t_cc = [], [], []
    for rep in range(15):
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


if __name__ == "__main__":
    main()
