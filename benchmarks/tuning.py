"""Tuning cost and result per tuner: matmul 1024^3 on this machine, against numpy.

    python benchmarks/tuning.py [--trials 200] [--tuners random,grid,ga,xgb]

For each tuner: the time per trial (build, run, the rest), and the best
GFLOP/s after 64 trials and at the end. Each tuner gets a fresh compile
cache, so build times are real.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import blas  # noqa: E402

blas.unforce()  # this process times numpy: its best kernel, before numpy loads

import numpy as np  # noqa: E402

import autotune as at  # noqa: E402
from benchmarks.common import median_seconds, table  # noqa: E402

TUNERS = {
    "random": at.RandomTuner,
    "grid": at.GridSearchTuner,
    "ga": at.GATuner,
    "xgb": at.XGBTuner,
}


class Curve:
    def __init__(self):
        self.best, self.build, self.run, self.t0, self.walls = [], [], [], None, []

    def start(self, tuner):
        self.t0 = time.perf_counter()

    def __call__(self, tuner, inputs, results):
        now = time.perf_counter()
        self.walls.append((now - self.t0) / len(inputs))
        self.t0 = now
        for r in results:
            self.best.append(tuner.best_gflops)
            self.build.append(r.build_s)
            self.run.append(r.run_s)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--tuners", default="random,grid,ga,xgb")
    p.add_argument("--size", type=int, default=1024)
    a = p.parse_args(argv)
    n = a.size
    x, y = np.random.rand(n, n).astype("f4"), np.random.rand(n, n).astype("f4")
    out = np.empty((n, n), "f4")
    np_gflops = 2 * n**3 / median_seconds(lambda: np.matmul(x, y, out=out)) / 1e9
    rows = []
    for name in a.tuners.split(","):
        os.environ["PYPTO_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"pypto-tune-{name}-")
        task = at.Task("matmul", (n, n, n))
        tuner = TUNERS[name](task, seed=0)
        curve = Curve()
        t0 = time.perf_counter()
        tuner.tune(
            a.trials,
            measure=at.MeasureOption(number=3, repeat=3, timeout=10),
            callbacks=[curve, at.progress_bar(total=a.trials, desc=name)],
        )
        wall = time.perf_counter() - t0
        k = len(curve.best)
        per = wall / max(k, 1)
        b64 = curve.best[min(63, k - 1)] if k else 0.0
        build, run = float(np.mean(curve.build)), float(np.mean(curve.run))
        other = per - build / max(1, os.cpu_count() or 1) - run
        best = curve.best[-1] if k else 0.0
        rows.append(
            [
                name,
                k,
                f"{per:.2f}",
                f"{build:.2f}",
                f"{run:.2f}",
                f"{other:.2f}",
                f"{b64:.1f}",
                f"{best:.1f}",
                f"{best / np_gflops:.2f}x",
            ]
        )
    print(f"matmul {n}^3 on {task.target.name}: numpy {np_gflops:.1f} GFLOP/s (same run)")
    print(f"numpy: {blas.describe(blas.info())}")
    print(
        table(
            [
                "tuner",
                "trials",
                "s/trial",
                "build s",
                "run s",
                "other s",
                "best@64",
                "best",
                "vs numpy",
            ],
            rows,
        )
    )
    print(
        "build s: per candidate in a worker process (builds run in parallel); "
        "other: search, processes, logging"
    )


if __name__ == "__main__":
    main()
