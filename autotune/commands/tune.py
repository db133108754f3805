"""``pypto-tune tune TEMPLATE --args ...`` (or ``pypto-tune TEMPLATE ...``): tune a template
on this machine and append every measurement to a log (default: the user's store)."""

from __future__ import annotations

import argparse

import autotune as at

from .. import store
from ..records import one_per_config
from ..scheduler import TUNERS
from ..tuners import fits, own_records, ranked_own
from .common import (
    add_measure_arguments,
    add_ray_argument,
    add_workload_arguments,
    check_ray,
    connect_ray,
    load_logs,
    measure_option,
    positive,
    store_logs,
    task_of,
    writable_log,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This subcommand's arguments."""
    add_workload_arguments(p, "hardware target (default: this host); it must run here")
    p.add_argument(
        "--trials",
        type=positive("--trials"),
        default=200,
        help="how many configs to measure in total (default 200)",
    )
    p.add_argument(
        "--tuner", choices=sorted(TUNERS), default="xgb", help="search strategy (default xgb)"
    )
    p.add_argument(
        "--log",
        help="JSON Lines log to append to (default: $PYPTO_HOME/logs/<template>.jsonl, "
        "PYPTO_HOME defaulting to ~/.cache/pypto)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="count the log's records of this workload as done and measure the rest (with "
        "the default log, the records shipped for the target count too)",
    )
    add_measure_arguments(p)
    p.add_argument(
        "--early-stopping",
        type=positive("--early-stopping"),
        default=None,
        help="stop after this many trials without improvement",
    )
    p.add_argument(
        "--confirm",
        type=positive("--confirm", zero_ok=True),
        default=4,
        metavar="K",
        help="after the search, measure the K fastest configs twice more, in interleaved "
        "rounds, so the best one is the one that holds up, not the luckiest draw; a config "
        "counts by the median of all its timings (default 4, 0: off)",
    )
    p.add_argument(
        "--seed",
        type=positive("--seed", zero_ok=True),
        default=None,
        help="random seed of the tuner",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_ray_argument(p)


def run(a: argparse.Namespace) -> int:
    """Run the subcommand on parsed arguments; returns the exit status."""
    check_ray(a)
    task = task_of(a, must_run=not a.ray)  # on a cluster the nodes measure
    log = writable_log(a.log) if a.log else store_logs(task.name)[0]
    opt = measure_option(a)
    measurer = connect_ray(a, opt) if a.ray else None
    try:
        return _tune(a, task, log, opt, measurer)
    finally:
        if measurer is not None:
            measurer.close()


def _tune(a, task, log, opt, measurer) -> int:
    tuner = TUNERS[a.tuner](task, seed=a.seed)
    done = earlier = 0
    sources = [log] + ([] if a.log else store.shipped_logs(task.target))
    if a.resume:
        per_log = {p: load_logs([p]) for p in sources}  # each read once
        done = tuner.load_history([r for recs in per_log.values() for r in recs])
        held = {p: len(own_records(task, recs)) for p, recs in per_log.items()}
        where = ", ".join(f"{p} ({n} record(s))" for p, n in held.items() if n) or log
        print(f"resuming: {done} trial(s) of this workload already in {where}")
    else:  # configs of this workload the log holds already: the best may be one of them
        held = one_per_config(own_records(task, load_logs([log])))
        earlier = sum(fits(task, r.config) for r in held)
    loaded = len(tuner.history)  # the trials done, and a baseline --confirm measured
    remaining = max(0, a.trials - done)
    callbacks = [at.log_to_file(log)]
    if not a.no_progress:
        callbacks.append(at.progress_bar())
    if measurer is not None:
        print(f"measuring on {measurer.describe(task.target.name)}", flush=True)
    tuner.tune(
        remaining,
        measure=opt,
        early_stopping=a.early_stopping,
        callbacks=callbacks,
        measurer=measurer,
    )
    if tuner.best_config is None:
        print(f"no valid config among {len(tuner.history)} trial(s); see {log}")
        return 1
    if a.confirm > 0:
        made = at.confirm_best(task, log, a.confirm, measure=opt, measurer=measurer)
        if made:
            print(f"confirmed the {a.confirm} fastest: {made} more measurement(s)")
    recs = at.load_records(sources if a.resume else [log])
    best = next(iter(ranked_own(task, recs)), None)
    if best is None:  # every record of the best config failed on re-measurement
        print(f"no config held up to re-measurement; see {log}")
        return 1
    rate = f" ({best.gflops:.1f} GFLOP/s)" if best.gflops else ""
    mine = any(r.config == best.config and r.ts == best.ts for r in at.load_records([log]))
    shipped = "" if mine else ", a shipped record: measured where the package was made"
    of = f"{done + len(tuner.history) - loaded} trial(s)"
    if earlier:
        of += f" and {earlier} config(s) the log held before"
    print(
        f"best of {of}: {best.cost * 1e3:.4g} ms{rate} "
        f"(median of {len(best.costs)} timing(s){shipped})\n  config {best.config}\n  log {log}"
    )
    return 0
