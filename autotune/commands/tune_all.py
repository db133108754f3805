"""``pypto-tune all``: tune every built-in template's standard workloads on this machine.

    pypto-tune all --minutes 10                   # records in $PYPTO_HOME/logs/<template>.jsonl
    pypto-tune all --trials 400 --only matmul,softmax
    pypto-tune all --minutes 5 --workloads my_model.json --log my_model.jsonl

One task scheduler (``autotune.scheduler``) shares the budget among the
workloads by expected gain; each workload counts by its relative improvement
(``normalize``), times its weight. The logs are resumed by default: their
trials count against ``--trials`` and inform the tuners. Afterwards the
fastest configs of each workload are re-measured side by side (``--confirm``)
and a table shows, per workload, the trials it got and its best.

``add_arguments(parser)`` and ``run(namespace) -> exit status`` are the whole
interface, so any command-line front end can mount the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import time

from pypto.errors import PyptoError

from .. import store
from ..confirm import confirm_best
from ..scheduler import TUNERS, TaskScheduler
from ..space import SpaceError
from ..task import Task, get_template
from ..workloads import WorkloadError, load_workloads, merge_duplicates, standard_workloads
from .common import (
    UsageError,
    add_import_argument,
    add_measure_arguments,
    add_ray_argument,
    check_arrays,
    check_ray,
    connect_ray,
    import_modules,
    measure_option,
    positive,
    store_logs,
    target_of,
    writable_log,
)

DESCRIPTION = (
    "Tune every built-in template's standard workloads (or those of --workloads FILE) on "
    "this machine, one budget shared among them by expected gain."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``pypto-tune all``."""
    add_tuning_arguments(p)
    p.add_argument(
        "--only",
        default="",
        metavar="TEMPLATE,...",
        help="only these templates' workloads (comma-separated)",
    )
    p.add_argument(
        "--workloads",
        metavar="FILE",
        help='tune the workloads of a JSON file instead: [{"template", "args", "dtype", '
        '"weight"}, ...]',
    )


def add_tuning_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a task scheduler run (``all``, ``network``): budget, target, logs,
    tuner, resume, confirmation, round size, measurement, seed, imports, progress."""
    budget = p.add_argument_group("budget (at least one; tuning stops at the first reached)")
    budget.add_argument(
        "--minutes", type=positive("--minutes", real=True, most=1e6), help="wall-clock minutes"
    )
    budget.add_argument(
        "--trials",
        type=positive("--trials"),
        help="trials in all, those already in the logs included",
    )
    p.add_argument("--target", default="host", help="hardware target (default: this host)")
    logs = p.add_mutually_exclusive_group()
    logs.add_argument(
        "--log-dir",
        metavar="DIR",
        help="one log per template, DIR/<template>.jsonl (default $PYPTO_HOME/logs, "
        "PYPTO_HOME defaulting to ~/.cache/pypto)",
    )
    logs.add_argument("--log", metavar="FILE", help="one log for every workload instead")
    p.add_argument(
        "--tuner", choices=sorted(TUNERS), default="xgb", help="search strategy (default xgb)"
    )
    p.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="count the logs' trials and learn from them (default on)",
    )
    p.add_argument(
        "--confirm",
        type=positive("--confirm", zero_ok=True),
        default=2,
        metavar="K",
        help="afterwards, re-measure each workload's K fastest configs side by side, "
        "within the budget (default 2, 0: off)",
    )
    p.add_argument(
        "--round",
        type=positive("--round"),
        default=16,
        metavar="N",
        help="trials per scheduling round (default 16)",
    )
    add_measure_arguments(p)
    p.add_argument(
        "--seed",
        type=positive("--seed", zero_ok=True),
        default=0,
        help="random seed of the scheduler and tuners",
    )
    add_import_argument(p)
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    add_ray_argument(p)


def _workloads(a):
    only = [t for t in a.only.split(",") if t]
    try:
        if a.workloads:
            ws = merge_duplicates(load_workloads(a.workloads))
            if only:
                ws = [w for w in ws if w.template in only]
                if not ws:
                    raise UsageError(f"--only {a.only}: no workload of {a.workloads} matches")
            return ws
        return standard_workloads(only or None)
    except WorkloadError as e:
        raise UsageError(str(e)) from None


def tasks_of(ws, target) -> list:
    """One task per workload, each checked against its template (``UsageError`` if not)."""
    tasks = []
    for w in ws:
        try:
            get_template(w.template)
            task = Task(w.template, w.task_args, target=target)
            _, tensors = task.instantiate(task.config_space.default_config())
        except KeyError as e:
            raise UsageError(str(e).strip("'\"")) from None
        except (TypeError, ValueError, SpaceError, PyptoError) as e:
            raise UsageError(
                f"workload {w.label}: arguments do not fit {w.template!r}: {e}"
            ) from None
        check_arrays(f"workload {w.label}", tensors)
        tasks.append(task)
    return tasks


def log_paths(a, ws, write: bool = True) -> list[str]:
    """Each workload's log: ``--log`` for all, else ``DIR/<template>.jsonl`` (DIR: --log-dir
    or the store). ``write``: each is checked (and created) before the first measurement,
    ``UsageError`` where it cannot be appended to."""
    d = a.log_dir or store.logs_dir()
    paths = [a.log or os.path.join(d, f"{w.template}.jsonl") for w in ws]
    if not write:
        return paths
    if a.log:
        return [writable_log(a.log)] * len(ws)
    if not a.log_dir:
        return store_logs(*(w.template for w in ws))
    what = f"--log-dir {d}"
    if os.path.exists(d) and not os.path.isdir(d):
        raise UsageError(f"{what} is a file, not a directory")
    return [writable_log(p, what) for p in paths]


def check_budget(a) -> None:
    """Refuse a run without ``--minutes`` or ``--trials``."""
    if a.minutes is None and a.trials is None:
        raise UsageError("give a budget: --minutes M and/or --trials N")


def _prepare(a):
    check_budget(a)
    check_ray(a)
    # on a cluster the nodes measure: this machine need not run the target
    target = target_of(a.target, must_run=not a.ray)
    import_modules(a.imports)
    ws = _workloads(a)
    return target, ws, tasks_of(ws, target), log_paths(a, ws)


def run(a: argparse.Namespace) -> int:
    """Run ``pypto-tune all`` with parsed options; returns the exit status (0: every
    workload has a valid config, 1: some have none, 2: refused before measuring). The
    minutes count from here: reading the logs (the tuners learn from them) is in them."""
    t0 = time.monotonic()
    target, ws, tasks, logs = _prepare(a)
    sched = tune_workloads(a, target, ws, tasks, logs, t0)
    return untuned_status(sched.summary(), a)


def untuned_status(rows: list, a: argparse.Namespace) -> int:
    """The exit status of a run whose workloads are ``rows`` (``label``, ``best_s``): 0
    when each has a valid record, else 1, with a line on stderr naming those without."""
    left = [r["label"] for r in rows if r["best_s"] is None]
    if not left:
        return 0
    why = "no valid record in the logs"
    budget = {  # what would give them trials, by the budget given
        (True, False): "the logs' trials count toward --trials: raise it, or give --minutes",
        (False, True): "the minutes ran out first: give more --minutes",
        (True, True): "the budget ran out first: raise --trials or --minutes",
    }
    given = (getattr(a, "trials", None) is not None, getattr(a, "minutes", None) is not None)
    if not getattr(a, "report_only", False):
        why += f" after this run ({budget.get(given, 'no budget')}; or every candidate failed: "
        why += "see the table)"
    shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
    print(f"pypto-tune: {len(left)} workload(s) have {why}: {shown}", file=sys.stderr)
    return 1


def tune_workloads(a, target, ws, tasks, logs, t0: float) -> TaskScheduler:
    """Tune ``tasks`` (of workloads ``ws``, weighted) with one task scheduler under the
    options of ``add_tuning_arguments``, the minutes counted from ``t0``; confirm the
    best, print the summary table, and return the scheduler."""
    opt = measure_option(a)
    measurer = connect_ray(a, opt) if a.ray else None
    try:
        return _tune(a, target, ws, tasks, logs, t0, opt, measurer)
    finally:
        if measurer is not None:
            measurer.close()


def _tune(a, target, ws, tasks, logs, t0, opt, measurer) -> TaskScheduler:
    confirm_fn = confirm_best
    if measurer is not None:
        # a round's chunk is one build per CPU of the cluster
        opt = dataclasses.replace(opt, n_parallel=max(2, measurer.n_parallel))
        confirm_fn = functools.partial(confirm_best, measurer=measurer)
        print(f"measuring on {measurer.describe(target.name)}", flush=True)
    sched = TaskScheduler(
        tasks,
        [w.weight for w in ws],
        logs,
        tuner=a.tuner,
        labels=[w.label for w in ws],
        measure_option=opt,
        measure_overrides={t.workload_key: w.measure for t, w in zip(tasks, ws) if w.measure},
        trials_per_round=a.round,
        normalize=True,
        resume=a.resume,
        seed=a.seed,
        progress=not a.no_progress,
        measurer=measurer,
    )
    if measurer is not None:
        measurer.option_for = sched.option_for  # a task's own timeout, as locally
    for msg in sched.warnings:
        print(f"warning: {msg}", file=sys.stderr)
    budget = " and ".join(
        x
        for x in (
            f"{a.minutes:g} minute(s)" if a.minutes else "",
            f"{a.trials} trials" if a.trials else "",
        )
        if x
    )
    where = a.log or os.path.dirname(logs[0])
    print(
        f"tuning {len(tasks)} workload(s) for {target.name} within {budget} "
        f"({sched.trials} trial(s) already in the logs); records in {where}",
        flush=True,
    )
    minutes = None if a.minutes is None else max(a.minutes - (time.monotonic() - t0) / 60, 1e-3)
    sched.tune(trials=a.trials, minutes=minutes, confirm_k=a.confirm)
    tuned_s = time.monotonic() - t0
    made = 0
    if a.confirm:
        made = sched.confirm(a.confirm, confirm_fn=confirm_fn, deadline=sched.deadline)
    total_s = time.monotonic() - t0
    print(
        f"{sum(st.new for st in sched.states)} new trial(s) in {tuned_s / 60:.1f} min"
        + (f", {made} confirmation measurement(s)" if made else "")
        + f"; {total_s / 60:.1f} min in all"
    )
    print(sched.table())
    return sched
