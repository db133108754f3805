"""fp32 matmul: pypto kernels against numpy (OpenBLAS), 1 and 2 threads.

    python benchmarks/matmul.py [--sizes 512,1024,2048] [--threads 1,2] [--log LOG]

Three kernels: a hand-written schedule, the matmul template's default
config, and its best config from the tuning records (what pypto-tune wrote, or --log).

The schedule: a 6x16 register tile accumulated in a local buffer
(cache_write), B packed into a contiguous K x 16 panel per column block
(cache_read + compute_at), the tile's rows unrolled and columns vectorized,
column blocks in parallel.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pypto as pt  # noqa: E402
from autotune.store import user_log  # noqa: E402
from benchmarks import blas  # noqa: E402
from benchmarks.common import median_seconds, run_workers, table  # noqa: E402


def matmul_schedule(M: int, N: int, K: int, mr: int = 6, nr: int = 16):
    A = pt.placeholder((M, K), "float32", name="A")
    B = pt.placeholder((K, N), "float32", name="B")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M, N), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    BP = s.cache_read(B, "local", [CL])
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=mr)
    jo, ji = s[C].split(j, factor=nr)
    s[C].reorder(jo, io, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(jo)
    s[CL].compute_at(s[C], io)
    ic, jc = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    s[CL].reorder(kk, ic, jc)
    s[CL].unroll(ic)
    s[CL].vectorize(jc)
    s[BP].compute_at(s[C], jo)
    s[BP].vectorize(s[BP].op.axis[1])
    return s, [A, B, C]


KERNELS = ("hand", "default", "tuned")


def kernels(n: int, log: str):
    """The three pypto kernels compared: the hand schedule above, the matmul template's
    default config, and its best config in the tuning log (when the log has one)."""
    import autotune as at

    tpl = at.get_template("matmul")
    out = {"hand": matmul_schedule(n, n, n), "default": tpl(n, n, n)}
    if os.path.exists(log):
        wl = at.workload_key("matmul", [n, n, n])
        keys = tpl.record_keys((n, n, n), pt.Target("host"))  # the host's, then its base's
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            best = at.best_by_workload(at.load_records(log))
            if any((wl, k) in best for k in keys):
                with at.apply_history_best(log):
                    out["tuned"] = tpl(n, n, n)
    return out


def worker(sizes, log):
    rng = np.random.default_rng(0)
    out = {}
    for n in sizes:
        a = rng.random((n, n), dtype=np.float32)
        b = rng.random((n, n), dtype=np.float32)
        c = np.empty((n, n), np.float32)
        number = max(3, int(2e9 / n**3))  # small sizes: enough calls to average out
        t_np = median_seconds(lambda a=a, b=b, c=c: np.matmul(a, b, out=c), number=number)
        row = {"numpy": 2 * n**3 / t_np / 1e9}
        for name, (s, args) in kernels(n, log).items():
            mod = pt.build(s, args, name=f"matmul_{name}_{n}")
            mod(a, b, c)
            np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3 * n)
            t = median_seconds(lambda m=mod, a=a, b=b, c=c: m(a, b, c), number=number)
            row[name] = 2 * n**3 / t / 1e9
        out[n] = row
    print(json.dumps({"sizes": out, "blas": blas.info()}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="512,1024,2048", help="comma-separated square sizes")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument(
        "--log",
        default=user_log("matmul"),
        help="tuning records to take the tuned config from (default: what pypto-tune "
        "wrote, $PYPTO_HOME/logs/matmul.jsonl; the shipped ones: tuning_logs/<target>/)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    try:
        sizes = [int(x) for x in a.sizes.split(",")]
        threads = [int(x) for x in a.threads.split(",")]
    except ValueError:
        p.error("--sizes and --threads take comma-separated integers")
    if a.worker:
        return worker(sizes, a.log)
    res = run_workers(os.path.abspath(__file__), threads, ["--sizes", a.sizes, "--log", a.log])
    rows = []
    for t in threads:
        for n in sizes:
            r = res[t]["sizes"][str(n)]
            cells = [
                f"{r[k]:.1f} ({r[k] / r['numpy']:.2f}x)" if k in r else "no record" for k in KERNELS
            ]
            rows.append([t, f"{n}^3", f"{r['numpy']:.1f}", *cells])
    print(f"fp32 matmul on {pt.Target('host').name}: GFLOP/s (ratio to numpy), medians")
    for t in threads:
        print(f"numpy, {t} thread(s): {blas.describe(res[t].get('blas', []))}")
    print(
        table(
            ["threads", "size", "numpy", "hand schedule", "template default", "tuned (records)"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
