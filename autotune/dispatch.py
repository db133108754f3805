"""The dispatch context: which config a template uses when called without one.

``apply_history_best(records)`` is the only context manager: inside it, a
template call looks up the best valid record for its (workload, target);
outside, or without a match, the template's default config is used.
"""

from __future__ import annotations

import contextlib
import threading

_local = threading.local()


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def lookup(workload: str, target: str):
    """The knob values chosen for (workload, target) by the innermost context, or None."""
    for best in reversed(_stack()):
        values = best.get((workload, target))
        if values is not None:
            return values
    return None


@contextlib.contextmanager
def apply_history_best(records):
    """Use the fastest valid record per (workload, target) from ``records``.

    ``records``: a path to a JSON Lines log, a list of paths, or records
    (as returned by ``load_records``). Corrupt lines are skipped with a warning.
    """
    from .records import best_by_workload, load_records

    recs = load_records(records)
    _stack().append({key: r.config for key, r in best_by_workload(recs).items()})
    try:
        yield
    finally:
        _stack().pop()
