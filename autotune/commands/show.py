"""``pypto-tune show TEMPLATE --args ...``: a template's knobs for these arguments, its
default config, and the best recorded config (your records, then the shipped ones; the
target's own, else its base target's where the code is the same)."""

from __future__ import annotations

import argparse
import json

import autotune as at

from .common import add_workload_arguments, task_of

MAX_VALUES = 8  # values listed per knob before "..."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This subcommand's arguments."""
    add_workload_arguments(p, "hardware target whose space and records to show (default host)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _values(values: list) -> str:
    shown = ", ".join(json.dumps(v) for v in values[:MAX_VALUES])
    return shown + (f", ... ({len(values)} values)" if len(values) > MAX_VALUES else "")


def run(a: argparse.Namespace) -> int:
    """Run the subcommand on parsed arguments; returns the exit status."""
    task = task_of(a, must_run=False)
    space = task.config_space
    with at.apply_history_best():
        spellings = task.template.spellings(task.args)  # (16,16,16) and (16,16,16,"float32")
        found = [(k, at.dispatch.lookup(spellings, k)) for k in task.record_keys]
    source, best = next(((k, v) for k, v in found if v), (None, []))
    fits = [v for v in best if space.fits(v)]
    default = space.default_config().to_json()
    if a.json:
        print(json.dumps({
            "workload": [task.name, list(task.args)], "target": task.target.key,
            "size": len(space), "knobs": {k.name: k.values for k in space.knobs.values()},
            "default": default, "best": fits[0] if fits else None,
            "best_target": source if fits else None,
        }))  # fmt: skip
        return 0
    print(f"{task.name}{tuple(task.args)} on {task.target.key}: {len(space)} configs")
    for k in space.knobs.values():
        print(f"  {k.name:16s} {k.kind:9s} {_values(k.values)}")
    print(f"default config {default}")
    if not fits:
        print("best recorded  (none for this workload and target)")
    elif source == task.target.key:
        print(f"best recorded  {fits[0]}")
    else:  # a base target's record: the same code
        print(f"best recorded  {fits[0]} (a record of {source}, the base of {task.target.key})")
    return 0
