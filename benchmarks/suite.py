"""Every kernel of the suite against numpy, PyTorch and the machine's peak.

    python -m benchmarks [--threads 1,2] [--only softmax,matmul] [--repeat 3] [--json [FILE]]
                         [--logs DIR] [--profile [DIR]]

For each thread count a fresh worker process (numpy, OpenMP, MKL and torch
pinned to that count) builds each kernel from its built-in template twice:
with the best config of the tuning records (``--logs DIR``, default the
shipped tuning_logs/<target>/; e.g. a directory that ``pypto-tune all`` wrote) and
with the template's default config (no records), checks both outputs
against the template's float64 reference, and times them together with
the references (every contender gets the same arrays, each starting on a cache
line as torch allocates its tensors): each in two blocks of timed rounds (forward, then reverse
order, with a pause and a warm-up before each block), the figure is the
median round. The figures are measured here, in this process, not taken
from the tuner's records. numpy runs its best OpenBLAS kernel (the worker
unsets OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE) and the kernel it ran is printed.
The int8 and bfloat16 matmul rows (benchmarks/mixed.py) run on the richest target
here with a dot-product kernel, against torch._int_mm and torch's bfloat16 matmul.
``--profile`` also prints each pypto kernel's per-stage profile (``mod.profile``) and
writes its roofline PNG into DIR (default benchmarks/profiles).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import blas, history, mixed  # noqa: E402
from benchmarks.common import block_medians, counts, run_workers, table  # noqa: E402
from benchmarks.kernels import Kernel, all_kernels  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGS = os.path.join(ROOT, "tuning_logs")
REFS = ("numpy", "torch", "torch.compile")


def _schedules(k: Kernel, logs: str):
    """``(tuned, default)`` schedules of the kernel's template: the best config of the
    records in ``logs`` for this host's target (None without one), and the default
    config (the template called outside ``apply_history_best``)."""
    import autotune as at
    import pypto as pt

    tpl = at.get_template(k.template)
    if k.target is not None:  # a named target's default config: no shipped records
        task = at.Task(k.template, k.args, target=k.target)
        return None, task.instantiate(task.config_space.default_config())
    default = tpl(*k.args)
    log = _template_log(logs, k.template)
    if log is None:
        return None, default
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with at.apply_history_best(log):
            key = at.workload_key(k.template, k.args)
            tuned = bool(at.dispatch.lookup(key, tpl.record_keys(k.args, pt.Target("host"))))
            s, tensors = tpl(*k.args)
    tuned = tuned and not any("using the default config" in str(w.message) for w in caught)
    return ((s, tensors) if tuned else None), default


def _arrays(k: Kernel, tensors, rng) -> list:
    """Random inputs (and output) for every contender, each starting on a cache line as
    torch allocates its own tensors (numpy's start 16 bytes into one)."""
    shapes = [tuple(int(d.value) for d in t.shape) for t in tensors]
    if k.dtype == "float32":
        out = [rng.standard_normal(sh, dtype=np.float32) for sh in shapes]
    else:
        out = [mixed.random_array(rng, sh, t.dtype) for sh, t in zip(shapes, tensors)]
    return [mixed.aligned_copy(a) for a in out]


def _check(got, want, k: Kernel, name: str):
    if got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want, err_msg=name)
        return
    got, want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_allclose(
        got, want, rtol=k.rtol, atol=k.rtol * np.abs(want).max(), err_msg=name
    )


def _pypto_kernels(k: Kernel, logs: str, rng) -> tuple:
    """Built and checked: ``(arrays, {"pypto": run, "default": run}, the pypto module)``
    -- "default" only when there is a tuned config to compare it with."""
    import autotune as at
    import pypto as pt

    tuned, default = _schedules(k, logs)
    arrays = _arrays(k, default[1], rng)
    want = at.get_template(k.template).reference_output(arrays[:-1], k.args)[0]
    kernels = {"pypto": tuned or default}
    if tuned:
        kernels["default"] = default
    fns, mods = {}, {}
    for name, (s, tensors) in kernels.items():
        mods[name] = mod = pt.build(s, tensors, target=k.target, name=f"{k.template}_{name}")
        arrays[-1][...] = 0 if arrays[-1].dtype.kind in "iu" else np.nan
        mod(*arrays)
        _check(arrays[-1], want, k, name)
        fns[name] = lambda mod=mod: mod(*arrays)
    return arrays, fns, mods["pypto"]


def _profile(k: Kernel, mod, arrays, threads: int, folder: str) -> str:
    """The per-stage profile of the pypto kernel as text; its roofline PNG in ``folder``."""
    prof = mod.profile(*arrays, repeat=5)
    os.makedirs(folder, exist_ok=True)
    name = "".join(c if c.isalnum() else "_" for c in k.label)
    png = os.path.join(folder, f"{name}-{threads}t.png")
    prof.plot(png)
    return f"{k.label}, {threads} thread(s), {mod.target.name} ({png}):\n{prof}"


def _torch_fns(k: Kernel, arrays, threads: int, with_compile: bool) -> dict:
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(threads)
    ts = [mixed.to_torch(torch, a) for a in arrays]  # shares memory: same inputs and output
    fns = {}
    if k.torch is not None:
        eager = k.torch(torch)
        fns["torch"] = lambda: eager(*ts)
    if with_compile and k.compiled is not None:
        comp = torch.compile(k.compiled(torch), dynamic=False)
        fns["torch.compile"] = lambda: comp(*ts)
    return fns


def worker(names, threads: int, with_compile: bool, logs: str, profile: str = ""):
    rng = np.random.default_rng(0)
    out = {}
    for k in all_kernels():
        if names and not any(n in k.label for n in names):
            continue
        arrays, fns, mod = _pypto_kernels(k, logs, rng)
        tuned = "default" in fns
        if k.numpy is not None:
            fns["numpy"] = lambda f=k.numpy, a=arrays: f(*a)
        fns.update(_torch_fns(k, arrays, threads, with_compile))
        secs = block_medians(fns)
        out[k.label] = {"unit": k.unit, "tuned": tuned, "target": mod.target.name}
        out[k.label].update({n: k.work / t / 1e9 for n, t in secs.items()})
        dots = dict(mixed.peaks(mod.target, threads).dot) if k.dtype != "float32" else {}
        if k.dtype in dots:  # held to its dot instruction's roof, not the FMA's
            out[k.label]["roof"] = dots[k.dtype]
        if profile:
            out[k.label]["profile"] = _profile(k, mod, arrays, threads, profile)
        if not tuned:  # no record: the default config is the kernel just measured
            out[k.label]["default"] = out[k.label]["pypto"]
        print(f"[{threads} thread(s)] {k.label}: done", file=sys.stderr, flush=True)
    print(json.dumps({"kernels": out, "blas": blas.info()}))


def combine(runs: list) -> dict:
    """Per thread count and kernel, the median over runs of each speed and of each ratio
    to a reference (a ratio is taken within one run, then the median of those)."""
    out = {}
    for t in runs[0]:
        out[t] = {}
        for label, first in runs[0][t]["kernels"].items():
            rs = [run[t]["kernels"][label] for run in runs]
            cell = {"unit": first["unit"], "tuned": all(r.get("tuned", True) for r in rs)}
            cell.update({f: first[f] for f in ("target", "profile", "roof") if f in first})
            for name in ("pypto", *REFS):
                if all(name in r for r in rs):
                    cell[name] = float(np.median([r[name] for r in rs]))
                    cell[f"ratio {name}"] = float(np.median([r["pypto"] / r[name] for r in rs]))
            cell["default"] = float(np.median([r["default"] for r in rs]))
            cell["default/tuned"] = float(np.median([r["default"] / r["pypto"] for r in rs]))
            out[t][label] = cell
    return out


def report(results: dict, peaks: dict) -> str:
    rows = []
    for t, res in results.items():
        for label, r in res.items():
            mem = r["unit"] == "GB/s"
            peak = r.get("roof") or peaks[t]["triad_gbps" if mem else "fma_gflops"]
            tuned = r.get("tuned", True)
            name = label if tuned else f"{label} (default: no record)"
            cells = [t, name, r["unit"], f"{r['pypto']:.1f}", f"{r['pypto'] / peak:.0%}"]
            d = f"{r['default']:.1f} ({r['default/tuned']:.2f})" if tuned else "same"
            cells.append(d)
            for ref in REFS:
                v = r.get(ref)
                cells.append(f"{v:.1f} ({r[f'ratio {ref}']:.2f}x)" if v else "-")
            rows.append(cells)
    head = ["threads", "kernel", "unit", "pypto tuned", "of peak", "default (/tuned)"]
    return table(head + [f"{ref} (pypto/ref)" for ref in REFS], rows)


def _host_logs() -> str:
    """The shipped tuning_logs/<target>/ folders whose records serve the host's target,
    its own first (x86-avx512-bf16's, then x86-avx512's float32 records), joined by
    ``os.pathsep``; a kernel's records come from the first that has its template's log."""
    import pypto as pt

    keys = pt.Target("host").record_keys(("float32",))
    dirs = [os.path.join(LOGS, key) for key in keys]
    return os.pathsep.join([d for d in dirs if os.path.isdir(d)] or dirs[:1])


def _template_log(logs: str, template: str) -> str | None:
    """``<dir>/<template>.jsonl`` of the first of ``logs`` (folders joined by
    ``os.pathsep``) that has it."""
    paths = [os.path.join(d, f"{template}.jsonl") for d in logs.split(os.pathsep)]
    return next((p for p in paths if os.path.exists(p)), None)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__.split("\n\n", 2)[2],
        epilog="the other benchmarks (each with --help): python -m benchmarks torch_ops "
        "(the PyTorch operators), mixed (int8 and bfloat16 matmul), lower_times (pt.lower "
        "of every template)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--threads", type=counts, default="1,2", help="comma-separated thread counts (1,2)"
    )
    p.add_argument("--only", default="", help="comma-separated substrings of kernel names")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow start)")
    p.add_argument(
        "--repeat", type=int, default=1, help="whole runs; medians over them are reported"
    )
    p.add_argument(
        "--json",
        nargs="?",
        const=history.HISTORY,
        default="",
        metavar="FILE",
        help="append the figures to a history file, one JSON line per run (default "
        "benchmarks/history.jsonl; the README's table comes from it: python -m benchmarks.history)",
    )
    p.add_argument(
        "--logs",
        default=None,
        metavar="DIR",
        help="tuning records, DIR/<template>.jsonl (default: the shipped "
        "tuning_logs/<target>/ of this host's target, then of the targets whose records serve it)",
    )
    p.add_argument(
        "--profile",
        nargs="?",
        const=os.path.join(ROOT, "benchmarks", "profiles"),
        default="",
        metavar="DIR",
        help="print each pypto kernel's per-stage profile and write its roofline PNG into "
        "DIR (default benchmarks/profiles)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.logs = a.logs or _host_logs()
    for d in a.logs.split(os.pathsep):
        if not os.path.isdir(d):
            p.error(f"--logs {d}: no such directory")
    names = [n for n in a.only.split(",") if n]
    threads = a.threads
    labels = [k.label for k in all_kernels()]
    if names and not any(n in lb for n in names for lb in labels):
        p.error(f"--only {a.only!r} matches no kernel; kernels: {', '.join(labels)}")
    if a.worker:
        threads_here = int(os.environ["OMP_NUM_THREADS"])
        return worker(names, threads_here, not a.no_compile, a.logs, a.profile)
    import pypto as pt
    from benchmarks import peak

    t0 = time.time()
    extra = ["--only", a.only, "--logs", a.logs] + (["--no-compile"] if a.no_compile else [])
    extra += ["--profile", os.path.abspath(a.profile)] if a.profile else []
    runs, peak_runs = [], []
    for _ in range(max(1, a.repeat)):
        peak_runs.append({t: peak.measure(t) for t in threads})
        runs.append(run_workers(os.path.abspath(__file__), threads, extra))
    peaks = {
        t: {k: float(np.median([p[t][k] for p in peak_runs])) for k in peak_runs[0][t]}
        for t in threads
    }
    results = combine(runs)
    print(f"pypto {pt.__version__} on {pt.Target('host').name}, {os.cpu_count()} cores")
    print(f"tuned configs from {a.logs}")
    for t in threads:
        libs = runs[0][t].get("blas", [])
        print(f"numpy, {t} thread(s): {blas.describe(libs)}")
    unset = [k for k in blas.FORCING if k in os.environ]
    if unset:
        print(f"(the workers ran without {', '.join(unset)}, set in this environment)")
    for t in threads:
        pk = peaks[t]
        print(
            f"peak, {t} thread(s): FMA {pk['fma_gflops']:.1f} GFLOP/s, "
            f"triad {pk['triad_gbps']:.1f} GB/s"
        )
    print(report(results, peaks))
    mix = mixed.summary(results)
    if mix:
        print(f"mixed precision (default configs, noisy on a shared machine):\n{mix}")
    if a.profile:
        for t in threads:
            for r in results[t].values():
                if "profile" in r:
                    print(r["profile"])
    what = f"medians over {len(runs)} runs of " if len(runs) > 1 else "medians of "
    print(f"{what}timed rounds; {time.time() - t0:.0f} s in all")
    if a.json:
        libs = blas.describe(runs[0][threads[0]].get("blas", []))
        kept = {
            t: {lb: {k: v for k, v in r.items() if k != "profile"} for lb, r in res.items()}
            for t, res in results.items()
        }
        e = history.entry(kept, peaks, len(runs), pt.Target("host").name, pt.__version__, libs)
        history.append(e, a.json)
        print(f"appended to {a.json}")


if __name__ == "__main__":
    main()
