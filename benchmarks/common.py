"""Shared benchmark helpers: timing medians, thread-count workers, tables."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

from benchmarks.blas import free_env


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def median_seconds(fn, number: int = 3, repeat: int = 7, warmup: int = 2) -> float:
    """Median over ``repeat`` of the mean time of ``number`` calls, after warm-up."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return float(np.median(times))


def run_workers(script: str, threads, extra_args=()) -> dict:
    """Run ``script --worker`` once per thread count (numpy and OpenMP pinned to it).

    Thread counts of BLAS libraries are fixed when they load, so each count
    gets its own process; inside it, pypto and the references are measured
    in the same run. The workers run without the variables that force an
    OpenBLAS kernel (``benchmarks/blas.py``): numpy runs its best one.
    """
    out = {}
    for t in threads:
        env = dict(
            free_env(os.environ),
            OMP_NUM_THREADS=str(t),
            OPENBLAS_NUM_THREADS=str(t),
            MKL_NUM_THREADS=str(t),
        )
        # stderr passes through: progress and failures show as they happen
        r = subprocess.run(
            [sys.executable, script, "--worker", *extra_args],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        if r.returncode != 0:
            raise SystemExit(f"benchmark worker for {t} thread(s) failed")
        out[t] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def table(headers, rows) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(str(c).rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, sep, *body])


class CachedMeasurer:
    """Measures each distinct (workload, config) once and replays that measurement when
    another tuner or seed asks for it again: equal budgets cost only distinct configs."""

    def __init__(self, measurer, log: str = ""):
        self.m = measurer
        self.cache: dict = {}
        self.fresh = 0
        self.log = log  # fresh measurements are also appended here as records

    def measure(self, task, configs):
        import json

        keys = [(task.workload_key, json.dumps(c.to_json(), sort_keys=True)) for c in configs]
        todo = [(k, c) for k, c in zip(keys, configs) if k not in self.cache]
        if todo:
            results = self.m.measure(task, [c for _, c in todo])
            for (k, _), r in zip(todo, results):
                self.cache[k] = r
            self.fresh += len(todo)
            if self.log:
                from autotune import MeasureInput
                from autotune.records import append_records
                from autotune.tuners import to_record

                recs = [to_record(MeasureInput(task, c), r) for (_, c), r in zip(todo, results)]
                append_records(self.log, recs)
        return [self.cache[k] for k in keys]

    def close(self):
        self.m.close()
