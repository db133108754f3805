"""``pypto-tune best LOG [LOG ...] [--json]``: the fastest valid config per workload and
target (a config counts by the median of all its timings)."""

from __future__ import annotations

import argparse
import json

import autotune as at

from .common import load_logs

USAGE = "pypto-tune best LOG [LOG ...] [--json]"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This subcommand's arguments."""
    p.add_argument("logs", nargs="+", metavar="LOG", help="JSON Lines tuning log(s)")
    p.add_argument("--json", action="store_true", help="one JSON object per workload and target")


def run(a: argparse.Namespace) -> int:
    """Run the subcommand on parsed arguments; returns the exit status."""
    recs = load_logs(a.logs)
    best = at.best_by_workload(recs)
    if not best:
        print(f"{', '.join(a.logs)}: {len(recs)} record(s), none valid")
        return 1
    for (workload, target), r in sorted(best.items()):
        n = sum(1 for x in recs if x.workload == workload and x.target == target)
        if a.json:
            row = {"workload": json.loads(workload), "target": target, "config": r.config}
            row.update(seconds=r.cost, costs=r.costs, gflops=r.gflops or None, records=n)
            print(json.dumps(row))
            continue
        rate = f"{r.gflops:.1f} GFLOP/s, " if r.gflops else ""
        print(
            f"{workload} on {target}: {r.cost * 1e3:.4g} ms ({rate}of {n} records)\n"
            f"  config {r.config}"
        )
    return 0
