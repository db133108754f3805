"""The machine's peaks for a target, measured once and cached: FMA throughput and
stream (triad) bandwidth, the two roofs a profiled stage is held against.

    peaks = measure_peaks(target, compile_source, threads=2)   # Peaks(gflops, gbps)

Both kernels are C compiled with the target's own flags: the FMA kernel keeps
``PEAK_ACCUMULATORS`` independent vectors of the target's float32 width (GCC vector
extensions, so it is the same source for every ISA) in flight; the triad
``a[i] = b[i] + s * c[i]`` streams three arrays of twice the target's last-level
cache (at least 16 MiB each) and counts 24 bytes per element. Several threads that do
less than one are measured again (up to ``_TRIES`` times; other processes had the
cores). The numbers are kept in
``$PYPTO_HOME/peaks.json`` keyed by target and thread count, so they are measured once
per machine; delete the file to measure again.
"""

from __future__ import annotations

import ctypes
import json
import os
import tempfile
from dataclasses import dataclass

from .cache import home
from .target import Target

PEAK_ACCUMULATORS = 12  # independent FMA chains: latency x ports on current cores
_FMA_ITERS = 2_000_000
_TRIAD_MIN_BYTES = 16 << 20
_ROUNDS = 5  # best of
_TRIES = 3  # measurements with several threads while they lose to one thread

_SOURCE = """#include <stdint.h>
#include <stdlib.h>
#include <omp.h>
typedef float pt_vec __attribute__((vector_size({vbytes})));

/* GFLOP/s of {acc} independent FMA chains per thread, on every thread */
double pt_peak_fma(int64_t iters, int threads) {{
  double best = 0;
  for (int round = 0; round < {rounds}; ++round) {{
    double t0 = omp_get_wtime();
    float sink = 0;
    #pragma omp parallel num_threads(threads) reduction(+:sink)
    {{
      pt_vec acc[{acc}], a, b;
      for (int l = 0; l < {lanes}; ++l) {{ a[l] = 0.999999f; b[l] = 1e-7f * (l + 1); }}
      for (int k = 0; k < {acc}; ++k) acc[k] = a * (float)(k + omp_get_thread_num());
      for (int64_t i = 0; i < iters; ++i) {{
        #pragma GCC unroll {acc}
        for (int k = 0; k < {acc}; ++k) acc[k] = acc[k] * a + b;
      }}
      for (int k = 0; k < {acc}; ++k) for (int l = 0; l < {lanes}; ++l) sink += acc[k][l];
    }}
    double dt = omp_get_wtime() - t0;
    double g = 2.0 * {acc} * {lanes} * (double)iters * threads / dt / 1e9;
    if (sink != sink) g = 0;  /* keeps the sums alive */
    if (g > best) best = g;
  }}
  return best;
}}

/* GB/s of the triad a = b + s * c over n doubles, 24 bytes per element */
double pt_peak_triad(int64_t n, int threads) {{
  double *a = aligned_alloc(64, n * 8), *b = aligned_alloc(64, n * 8),
         *c = aligned_alloc(64, n * 8);
  if (!a || !b || !c) {{ free(a); free(b); free(c); return 0; }}
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {{ a[i] = 0; b[i] = 1; c[i] = 2; }}
  double best = 0;
  for (int round = 0; round < {rounds}; ++round) {{
    double t0 = omp_get_wtime();
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0 * c[i];
    double dt = omp_get_wtime() - t0;
    double g = 24.0 * (double)n / dt / 1e9;
    if (g > best) best = g;
  }}
  free(a); free(b); free(c);
  return best;
}}
"""


@dataclass(frozen=True, slots=True)
class Peaks:
    """The roofs: float32 FMA GFLOP/s and triad GB/s with ``threads`` threads."""

    gflops: float
    gbps: float
    threads: int


def peak_source(target: Target) -> str:
    """The C of the two peak kernels for ``target`` (its float32 vector width)."""
    lanes = target.vector_lanes("float32")
    return _SOURCE.format(vbytes=4 * lanes, lanes=lanes, acc=PEAK_ACCUMULATORS, rounds=_ROUNDS)


def _store() -> str:
    return os.path.join(home(), "peaks.json")


def _read() -> dict:
    try:
        with open(_store()) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def measure_peaks(target: Target, compile_source, threads: int) -> Peaks:
    """The peaks of ``target`` on this machine with ``threads`` threads: from the cache
    in ``$PYPTO_HOME``, else measured (about a second) with kernels compiled by
    ``compile_source(source, flags)`` and then cached."""
    key = f"{target.name}/{threads}"
    seen = _read().get(key)
    if isinstance(seen, dict) and seen.get("gflops", 0) > 0 and seen.get("gbps", 0) > 0:
        return Peaks(float(seen["gflops"]), float(seen["gbps"]), threads)
    lib = ctypes.CDLL(compile_source(peak_source(target), target.cflags))
    for fn in (lib.pt_peak_fma, lib.pt_peak_triad):
        fn.restype = ctypes.c_double
        fn.argtypes = [ctypes.c_int64, ctypes.c_int]
    llc = max((v for v in (target.cache_sizes or {}).values() if v), default=0)
    n = max(2 * llc, _TRIAD_MIN_BYTES) // 8
    single = measure_peaks(target, compile_source, 1) if threads > 1 else None
    gflops = gbps = 0.0
    for _ in range(_TRIES):
        gflops = max(gflops, lib.pt_peak_fma(_FMA_ITERS, threads))
        gbps = max(gbps, lib.pt_peak_triad(n, threads))
        # more threads doing less than one: other work had the cores, so measure again
        if single is None or gflops >= single.gflops:
            break
    peaks = Peaks(gflops, gbps, threads)
    if peaks.gflops <= 0 or peaks.gbps <= 0:
        raise RuntimeError(f"measuring the peaks of {target.name} failed: {peaks}")
    data = _read()
    data[key] = {"gflops": peaks.gflops, "gbps": peaks.gbps}
    os.makedirs(home(), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=home(), suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, _store())
    return peaks
