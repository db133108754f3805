"""``pypto-tune list [TEMPLATE ...]``: the templates (all, or those named), each with its
arguments (by name, from its signature), what it computes (its docstring's first line),
and its standard workloads (what ``pypto-tune all`` tunes) with the targets records are
shipped for; first, the target ``host`` is here and the base targets whose records it
reads. ``--shell`` prints only the standard workloads, one line each as shell words
(template, comma-separated arguments, trials, exploration trials, extra ``pypto-tune``
options), for scripts such as ``benchmarks/ship_records.sh``."""

from __future__ import annotations

import argparse
import inspect
import json

import autotune as at
import pypto as pt

from .. import store
from ..workloads import WorkloadError, shell_lines, standard_workloads
from .common import UsageError, add_import_argument, import_modules, load_logs


def summary(doc: str) -> str:
    """A docstring's first sentence, on one line: up to the first ``. ``, ``; `` or ``: ``
    outside brackets (``Q[b, h, i, :] . K[b, h, j, :]`` is a dot product, not an end)."""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    depth = 0
    for n, c in enumerate(text):
        depth += (c in "([{") - (c in ")]}")
        if depth == 0 and c in ".;:" and text[n + 1 : n + 2] in (" ", ""):
            return text[:n]
    return text


def signature(tpl) -> str:
    """``M, N, K, dtype='float32'``: a template's arguments after ``cfg``."""
    params = list(inspect.signature(tpl.func).parameters.values())[1:]
    return ", ".join(str(p) for p in params)


def host_line(target) -> str:
    """What ``host`` is here, and whose records it reads besides its own."""
    bases = target.record_keys()[1:]
    also = f"; records of {', '.join(bases)} serve it where its code is the same" if bases else ""
    return f"target host: {target.name}{also}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This subcommand's arguments."""
    p.add_argument("templates", nargs="*", metavar="TEMPLATE", help="only these (default: all)")
    p.add_argument(
        "--shell",
        action="store_true",
        help="only the standard workloads, one line each: template, args, trials, "
        "exploration trials, options",
    )
    add_import_argument(p)


def run(a: argparse.Namespace) -> int:
    """Run the subcommand on parsed arguments; returns the exit status."""
    import_modules(a.imports)
    known = at.list_templates()
    unknown = [t for t in a.templates if t not in known]
    if unknown:
        raise UsageError(
            f"unknown template(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}"
        )
    if a.shell:
        try:
            print("\n".join(shell_lines(standard_workloads(a.templates or None))))
        except WorkloadError as e:
            raise UsageError(str(e)) from None
        return 0
    shipped: dict = {}
    for r in load_logs(store.shipped_logs()):
        shipped.setdefault((r.template, json.dumps(r.args)), set()).add(r.target)
    standard: dict = {}
    for w in standard_workloads():
        standard.setdefault(w.template, []).append(w.task_args)
    print(host_line(pt.Target("host")))
    for name in a.templates or known:
        t = at.get_template(name)
        doc = summary(t.__doc__ or "")
        print(f"{name}({signature(t)})")
        if doc:
            print(f"    {doc}")
        for args in standard.get(name, []):
            targets = sorted(shipped.get((name, json.dumps(list(args))), ()))
            where = f"records for {', '.join(targets)}" if targets else "no shipped records"
            print(f"    standard: --args {','.join(map(str, args))}  ({where})")
    return 0
