"""Shared benchmark helpers: timing medians, thread-count workers, tables."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

from benchmarks.blas import free_env

# a pause before timing one library after another: longer than the time the usual
# OpenMP runtimes' idle threads spin (200 ms), stealing the cores from the next
PAUSE_S = 0.3


def counts(text: str) -> list[int]:
    """An argparse type: comma-separated positive integers (``--threads 1,2``)."""
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes comma-separated integers, got {text!r}") from None
    if min(out) < 1:
        raise argparse.ArgumentTypeError(f"takes positive integers, got {text!r}")
    return out


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


def block_times(fns: dict, rounds: int = 10, round_s: float = 0.2) -> dict:
    """Seconds per call of each function in each of ``rounds`` timed rounds (each round
    about ``round_s`` of calls).

    Each function runs in two blocks of rounds, in forward then reverse order, so slow
    drift on a shared machine hits every function alike, and round k of one function
    is timed near round k of the others. Before each block: a pause (the thread pools
    of the previous library -- OpenBLAS, torch's OpenMP -- spin for a while after its
    last call and would steal the cores) and a warm-up call.
    """
    number = {}
    for name, fn in fns.items():
        fn()  # first call: compilation for torch.compile, page faults for everyone
        t0 = time.perf_counter()
        fn()
        number[name] = max(1, int(round_s / max(time.perf_counter() - t0, 1e-6)))
    times = {name: [] for name in fns}
    order = list(fns)
    for block in (order, order[::-1]):
        for name in block:
            time.sleep(PAUSE_S)
            fns[name]()
            for _ in range(rounds // 2):
                t0 = time.perf_counter()
                for _ in range(number[name]):
                    fns[name]()
                times[name].append((time.perf_counter() - t0) / number[name])
    return times


def block_medians(fns: dict, rounds: int = 10, round_s: float = 0.2) -> dict:
    """Median seconds per call of each function over ``rounds`` timed rounds
    (``block_times``)."""
    times = block_times(fns, rounds, round_s)
    return {name: float(np.median(t)) for name, t in times.items()}


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
