"""``pypto-tune network``: tune a model's workloads within one budget, then report its time.

    pypto-tune network resnet18 --minutes 20        # built-in: resnet18, bert-base-layer
    pypto-tune network model.json --trials 400      # [{"template", "args", "dtype", "weight"}]
    pypto-tune network resnet18 --report-only       # the report from the logs, no tuning

The network's workloads (``autotune.networks``) are tuned as ``pypto-tune all``
tunes its own: one task scheduler shares the budget by expected gain, each
workload counting by its weight (how many times the model runs it). Then a
report: per workload its weight, the best time in the logs (with the default logs, the
user's store, a workload without a record there shows the shipped record pypto runs it
with, marked ``*``: measured where the package was made), PyTorch eager's
time for the same layer (when torch is installed) with as many intra-op threads as
pypto's kernels ran with (``--torch-threads`` to change it), and the estimated
end-to-end times ``sum weight x time`` of both with their ratio (over the workloads
both have a time for).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import time
from collections import Counter

from .. import store
from ..networks import NETWORKS, network_workloads
from ..records import load_records, ranked_configs
from ..tuners import fits, ranked_own
from ..workloads import WorkloadError
from .common import UsageError, check_ray, import_modules, positive, target_of
from .tune_all import (
    add_tuning_arguments,
    check_budget,
    log_paths,
    tasks_of,
    tune_workloads,
    untuned_status,
)

DESCRIPTION = "Tune a model's workloads within one budget, then report its estimated time."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``pypto-tune network``: the scheduler's (as ``all``) and the report's."""
    p.add_argument("network", help=f"a built-in network ({', '.join(NETWORKS)}) or FILE")
    add_tuning_arguments(p)
    p.add_argument(
        "--report-only", action="store_true", help="print the report from the logs; no tuning"
    )
    p.add_argument(
        "--torch-threads",
        type=positive("--torch-threads"),
        default=None,
        metavar="N",
        help="PyTorch eager's intra-op threads in the report (default: the threads pypto's "
        "kernels ran with: --threads, else those its records were measured with, else "
        "OMP_NUM_THREADS or the cores)",
    )


def kernel_threads(target) -> int:
    """The threads pypto's parallel loops ran with when measured: OpenMP's default,
    ``OMP_NUM_THREADS`` or else this machine's cores (the measurements run here, whatever
    the target; a named target's ``cores`` is nominal)."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return (target.cores if target.is_host else None) or os.cpu_count() or 1


def recorded_threads(logs) -> int | None:
    """The threads the logs' measurements ran with, where they all agree (a report
    compares PyTorch at those); None otherwise."""
    existing = sorted({p for p in logs if os.path.isfile(p)})
    seen = {r.threads for r in load_records(existing) if r.ok and r.threads} if existing else set()
    return seen.pop() if len(seen) == 1 else None


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _eager():
    """``autotune.torch_eager.eager_timings``, or None without torch."""
    if not _installed("torch"):
        return None
    return importlib.import_module("autotune.torch_eager").eager_timings


NOISY = 1.5  # PyTorch's slowest timing of a workload past its fastest by this: flagged


def _ms(s) -> str:
    return f"{s * 1e3:.4g}" if s is not None else "-"


def report_rows(ws, tasks, logs, threads: int = 1, shipped=()) -> list[dict]:
    """Per workload: label, weight, trials in the logs (configs measured, each once), best
    seconds in them (None: none valid), whether that best is a record of ``shipped`` (the
    shipped logs, read for a workload without a valid record in ``logs``, as
    ``apply_history_best`` reads them) and PyTorch eager's seconds (None: no torch or no
    equivalent), and whether its timings spread past ``NOISY`` (a busy machine)."""
    existing = sorted({p for p in logs if os.path.isfile(p)})
    records = load_records(existing) if existing else []
    fallback = ranked_configs(load_records(list(shipped))) if shipped else {}
    configs = {(r.workload, r.target, json.dumps(r.config, sort_keys=True)) for r in records}
    trials = Counter((w, t) for w, t, _ in configs)  # as the tuners count: a config once
    eager = _eager()
    rows = []
    for w, t in zip(ws, tasks):
        times = eager(w, threads=threads) if eager else None
        key = (t.workload_key, t.target.key)
        rec = next(iter(ranked_own(t, records)), None)  # (a config that fits the template)
        theirs = [
            r
            for k in ((t.workload_key, target) for target in t.record_keys)
            for r in fallback.get(k, [])[:1]
            if fits(t, r.config)
        ]
        rows.append(
            {
                "label": w.label,
                "weight": w.weight,
                "trials": trials[key],
                "best_s": rec.cost if rec is not None else theirs[0].cost if theirs else None,
                "shipped": rec is None and bool(theirs),
                "torch_s": statistics.median(times) if times else None,
                "noisy": bool(times) and max(times) > NOISY * min(times),
            }
        )
    return rows


def report_table(rows: list[dict]) -> str:
    """The report as text: a line per workload, then the model's estimated times."""
    head = ["workload", "weight", "trials", "pypto ms", "torch ms", "speedup"]
    body = []
    for r in rows:
        both = r["best_s"] is not None and r["torch_s"] is not None
        ratio = f"{r['torch_s'] / r['best_s']:.2f}x" if both else "-"
        body.append(
            [r["label"], f"{r['weight']:g}", str(r["trials"]),
             _ms(r["best_s"]) + ("*" if r.get("shipped") else ""),
             _ms(r["torch_s"]) + ("~" if r.get("noisy") else ""), ratio]
        )  # fmt: skip
    both = [r for r in rows if r["best_s"] is not None and r["torch_s"] is not None]
    ours = sum(r["weight"] * r["best_s"] for r in both)
    theirs = sum(r["weight"] * r["torch_s"] for r in both)
    total = ["model (sum weight x time)", "", str(sum(r["trials"] for r in rows))]
    total += [_ms(ours if both else None)]
    total += [_ms(theirs if both else None), f"{theirs / ours:.2f}x" if both else "-"]
    body.append(total)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = [
        "  ".join(
            c.ljust(wd) if i == 0 else c.rjust(wd) for i, (c, wd) in enumerate(zip(row, widths))
        )
        for row in [head, *body]
    ]
    if any(r.get("shipped") for r in rows):
        lines.append("* a shipped record: measured where the package was made, not here "
                     "(tuning here replaces it)")  # fmt: skip
    if any(r.get("noisy") for r in rows):
        lines.append(f"~ PyTorch's timings spread past {NOISY:g}x: the machine was busy, the "
                     "ratio is uncertain (run the report again: --report-only)")  # fmt: skip
    left = len(rows) - len(both)
    if left:
        lines.append(f"({left} workload(s) without both times are left out of the model line)")
    return "\n".join(lines)


def run(a: argparse.Namespace) -> int:
    """Run ``pypto-tune network`` with parsed options; returns the exit status (0: every
    workload has a valid config, 1: some have none, 2: refused before measuring)."""
    t0 = time.monotonic()
    if not a.report_only:
        check_budget(a)
        check_ray(a)
    # on a cluster the nodes measure: this machine need not run the target
    target = target_of(a.target, must_run=not (a.report_only or a.ray))
    import_modules(a.imports)
    try:
        ws = network_workloads(a.network)
    except WorkloadError as e:
        raise UsageError(str(e)) from None
    tasks = tasks_of(ws, target)
    logs = log_paths(a, ws, write=not a.report_only)
    if not a.report_only:
        tune_workloads(a, target, ws, tasks, logs, t0)
    threads = a.torch_threads or a.threads or recorded_threads(logs) or kernel_threads(target)
    # with the user's store, what pypto runs: the user's records, else the shipped ones
    shipped = [] if (a.log or a.log_dir) else store.shipped_logs(target)
    rows = report_rows(ws, tasks, logs, threads=threads, shipped=shipped)
    print(
        f"\n{a.network} on {target.name}: pypto's best records against PyTorch eager "
        f"({threads} thread(s))"
    )
    print(report_table(rows))
    return untuned_status(rows, a)
