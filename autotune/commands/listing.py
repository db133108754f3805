"""``pypto-tune list``: the templates, each with its arguments (by name, from its signature),
what it computes (its docstring's first line) and the workloads records are shipped for."""

from __future__ import annotations

import argparse
import inspect
import json

import autotune as at

from .. import store
from .common import import_modules, load_logs


def signature(tpl) -> str:
    """``M, N, K, dtype='float32'``: a template's arguments after ``cfg``."""
    params = list(inspect.signature(tpl.func).parameters.values())[1:]
    return ", ".join(str(p) for p in params)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This subcommand's arguments."""
    p.add_argument(
        "--import", dest="imports", action="append", default=[], metavar="MODULE",
        help="import a Python module that registers templates (repeatable)",
    )  # fmt: skip


def run(a: argparse.Namespace) -> int:
    """Run the subcommand on parsed arguments; returns the exit status."""
    import_modules(a.imports)
    shipped: dict = {}
    for r in load_logs(store.shipped_logs()):
        shipped.setdefault(r.template, {}).setdefault(json.dumps(r.args), set()).add(r.target)
    for name in at.list_templates():
        t = at.get_template(name)
        doc = (t.__doc__ or "").strip().splitlines()
        print(f"{name}({signature(t)})")
        if doc:
            print(f"    {doc[0]}")
        for args, targets in sorted(shipped.get(name, {}).items()):
            print(f"    shipped: --args {','.join(map(str, json.loads(args)))}"
                  f"  ({', '.join(sorted(targets))})")  # fmt: skip
    return 0
