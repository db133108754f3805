"""``python -m benchmarks.polybench [--size MEDIUM] [KERNEL ...]``: each PolyBench kernel's
scheduled build against the plain C nest (its unscheduled build: the statements as
written, compiled by the same compiler with the same flags), one thread, on the same
arrays, each starting on a cache line as PolyBench's own harness allocates them.

The table gives the median time of each, the speed-up, whether the scheduled build
matched the plain one on the timed inputs, and the schedule used (its steps after the
statement order that is part of the algorithm).
"""

from __future__ import annotations

import argparse
import functools
import os
import textwrap
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import pypto as pt  # noqa: E402
from benchmarks.common import cpu_name, median_seconds, table  # noqa: E402
from benchmarks.polybench import KERNELS, build, run  # noqa: E402
from benchmarks.polybench.common import copies, outputs_of, schedule_of  # noqa: E402


def describe(name: str, size: str = "MINI") -> str:
    """The steps of a kernel's timed schedule, one stage after another:
    ``A.update(0): skew(i, j, 2) reorder(t, j.skew, i)``."""
    k = KERNELS[name]
    prog = k.make(**k.sizes[size])  # a schedule may depend on the size (time tiles)
    if prog.schedule is None:
        return "-"
    done = 0 if prog.regroup else len(schedule_of(prog, tuned=False).steps)
    parts: dict[str, list[str]] = {}
    for st in schedule_of(prog, tuned=True).steps[done:]:
        args = [
            ", ".join(v) if isinstance(v, list) else f"order={v}" if key == "order" else str(v)
            for key, v in st.items()
            if key not in ("stage", "prim") and v is not None
        ]
        parts.setdefault(st["stage"], []).append(f"{st['prim']}({', '.join(args)})")
    return "; ".join(f"{stage}: {' '.join(p)}" for stage, p in parts.items())


def measure(name: str, size: str, min_time: float = 0.2, repeat: int = 7) -> dict:
    """Median seconds of the plain and the scheduled build, measured alternately (the
    machine's load drifts between them alike), and whether their outputs agree."""
    plain, prog = build(name, size, tuned=False)
    best, _ = build(name, size, tuned=True) if prog.schedule is not None else (plain, prog)
    inputs = prog.init(np.random.default_rng(0))
    got_plain, got_best = run(plain, prog, inputs), run(best, prog, inputs)
    if prog.view is not None:  # only the parts the C nest defines exactly
        got_plain, got_best = prog.view(*got_plain), prog.view(*got_best)
    same = all(
        np.allclose(a, b, rtol=max(prog.rtol, 1e-9), atol=prog.atol, equal_nan=True)
        for a, b in zip(got_plain, got_best)
    )
    outs = [outputs_of(t) for t in prog.outs]
    args = copies(inputs) + outs
    t0 = time.perf_counter()
    plain(*args)
    number = max(1, int(min_time / max(time.perf_counter() - t0, 1e-6)))
    times = {"plain": [], "best": []}
    for _ in range(repeat):
        for key, mod in (("plain", plain), ("best", best)):
            call = functools.partial(mod, *args)
            times[key].append(median_seconds(call, number, repeat=1, warmup=1))
    return {
        "plain": float(np.median(times["plain"])),
        "best": float(np.median(times["best"])),
        "same": same,
        "scheduled": prog.schedule is not None,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.polybench", description=__doc__)
    ap.add_argument("kernels", nargs="*", help="kernel names (default: all 30)")
    ap.add_argument(
        "--size", default="MEDIUM", choices=["MINI", "SMALL", "MEDIUM", "LARGE"],
        help="PolyBench dataset size; LARGE exists for the stencils timed there "
        "(jacobi-1d, jacobi-2d, heat-3d): time tiles pay once the arrays outgrow L2",
    )  # fmt: skip
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds per measurement")
    a = ap.parse_args(argv)
    names = a.kernels or list(KERNELS)
    unknown = [n for n in names if n not in KERNELS]
    if unknown:
        ap.error(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(KERNELS)}")
    sized = [n for n in names if a.size in KERNELS[n].sizes]
    if a.kernels and len(sized) < len(names):
        missing = ", ".join(n for n in names if n not in sized)
        having = ", ".join(n for n, k in KERNELS.items() if a.size in k.sizes)
        ap.error(f"no {a.size} size for {missing}; kernels with one: {having}")
    names = sized
    print(f"PolyBench/C 4.2, {a.size}, 1 thread, {cpu_name()}, target {pt.Target('host').name}")
    rows = []
    for n in names:
        r = measure(n, a.size, a.min_time)
        rows.append(
            [
                n,
                KERNELS[n].category,
                f"{r['plain'] * 1e3:.3f}",
                f"{r['best'] * 1e3:.3f}" if r["scheduled"] else "(no schedule)",
                f"{r['plain'] / r['best']:.2f}x" if r["scheduled"] else "1.00x",
                "yes" if r["same"] else "NO",
                describe(n, a.size),
            ]
        )
        print("  ".join(rows[-1][:-1]), flush=True)
    print()
    head = ["kernel", "category", "plain ms", "best ms", "speed-up", "same"]
    print(table(head, [r[:-1] for r in rows]))
    print("\nschedules (each stage's steps after the statement order):")
    for row in rows:  # long: below the table, wrapped, not a column of it
        print(textwrap.fill(row[-1], width=100, initial_indent=f"  {row[0]}: ",
                            subsequent_indent="      "))  # fmt: skip


if __name__ == "__main__":
    main()
