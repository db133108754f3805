"""The machine's own peak: fp32 FMA throughput and triad memory bandwidth.

    python benchmarks/peak.py [--threads 1,2]

Compiles ``peak.c`` with the host target's flags and OpenMP, and measures
it per thread count (OMP_NUM_THREADS); the best of a few runs is the peak.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peak.c")


def _library() -> str:
    """Build peak.c once per source version into the temp dir; the path of the .so."""
    import pypto as pt
    from pypto import runtime

    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    so = os.path.join(tempfile.gettempdir(), f"pypto_peak_{digest}.so")
    if not os.path.exists(so):
        tmp = f"{so}.{os.getpid()}.tmp"  # the host target's flags: -O3, -fopenmp, -march
        cmd = [*runtime.compiler(), *pt.Target("host").cflags, SOURCE, "-o", tmp]
        subprocess.run(cmd, check=True)
        os.replace(tmp, so)
    return so


def measure(threads: int) -> dict:
    """``{"fma_gflops", "triad_gbps"}`` with ``threads`` OpenMP threads (own process)."""
    code = (
        "import ctypes, json, sys\n"
        "lib = ctypes.CDLL(sys.argv[1])\n"
        "lib.peak_fma_gflops.restype = lib.peak_triad_gbps.restype = ctypes.c_double\n"
        "fma = max(lib.peak_fma_gflops(ctypes.c_long(200_000_000)) for _ in range(3))\n"
        "bw = lib.peak_triad_gbps(ctypes.c_long(1 << 25), 10)\n"
        "print(json.dumps({'fma_gflops': fma, 'triad_gbps': bw}))\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    r = subprocess.run(
        [sys.executable, "-c", code, _library()], env=env, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise RuntimeError(f"peak microbenchmark failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    a = p.parse_args(argv)
    for t in (int(x) for x in a.threads.split(",")):
        m = measure(t)
        print(f"{t} thread(s): FMA {m['fma_gflops']:.1f} GFLOP/s, triad {m['triad_gbps']:.1f} GB/s")


if __name__ == "__main__":
    main()
