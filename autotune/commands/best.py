"""``pypto-tune best LOG [LOG ...] [--json]``: the fastest valid config per workload and
target (a config counts by the median of all its timings)."""

from __future__ import annotations

import argparse
import json
import sys

import autotune as at
from pypto.target import KNOWN

from .common import load_logs

USAGE = "pypto-tune best LOG [LOG ...] [--json]"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This subcommand's arguments."""
    p.add_argument("logs", nargs="+", metavar="LOG", help="JSON Lines tuning log(s)")
    p.add_argument("--json", action="store_true", help="one JSON object per workload and target")


def _fits(r) -> bool:
    """Whether a record's config is a point of its template's space (as
    ``apply_history_best`` takes it); True for a template or target not known here."""
    try:
        t = at.get_template(r.template)
    except KeyError:
        return True
    if r.target not in KNOWN:  # a target this version does not know: not checked here
        return True
    try:
        space = t.space(*r.args, target=r.target)
    except Exception:  # noqa: BLE001 - arguments the template refuses: not its record
        return False
    return space.fits(r.config)


def _best(recs) -> tuple[dict, dict]:
    """(workload, target) -> the fastest record whose config fits its template, and how
    many faster ones did not (made with another version of the template)."""
    best, stale = {}, {}
    for key, ranked in at.ranked_configs(recs).items():
        for k, r in enumerate(ranked):
            if _fits(r):
                best[key], stale[key] = r, k
                break
        else:
            print(f"{key[0]} on {key[1]}: no record fits the template (another version of "
                  "it, or arguments it refuses)", file=sys.stderr)  # fmt: skip
    return best, stale


def run(a: argparse.Namespace) -> int:
    """Run the subcommand on parsed arguments; returns the exit status."""
    recs = load_logs(a.logs)
    best, stale = _best(recs)
    if not best:  # (on stderr: with --json, stdout holds JSON only)
        print(f"{', '.join(a.logs)}: {len(recs)} record(s), none valid", file=sys.stderr)
        return 1
    for (workload, target), r in sorted(best.items()):
        if stale[workload, target]:
            print(f"{workload} on {target}: skipped {stale[workload, target]} faster record(s) "
                  "whose configs do not fit the template's knobs (another version of it)",
                  file=sys.stderr)  # fmt: skip
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
