"""The dispatch context: which config a template uses when called without one.

``apply_history_best(records)`` is the only context manager: inside it, a
template call looks up the best valid record for its (workload, target);
outside, or without a match, the template's default config is used.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading

from pypto.runtime import get_num_threads

from . import store
from .records import config_key, failed_configs, load_records, ranked_configs

_local = threading.local()
_SERIALS = itertools.count()  # of the contexts opened (``scope``)


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def scope() -> tuple:
    """What the configs chosen now depend on beyond the workload: ``()`` outside every
    context; inside, the open contexts (a serial number each, never reused) and the
    thread count (which orders their records)."""
    opened = getattr(_local, "scope", ())
    return opened and (opened, get_num_threads())


def record_keys(target, args) -> tuple:
    """The targets whose records serve ``target`` (a pt.Target) for a workload with
    arguments ``args``, own first: a target with a base also reads the base's records
    where its extra features do not change the code (the workload's dtype arguments
    decide; see ``pt.Target.record_keys``)."""
    return target.record_keys(tuple(a for a in args if isinstance(a, str)))


def _names(x) -> tuple:
    return (x,) if isinstance(x, str) else tuple(x)


def lookup(workload, targets) -> list:
    """The recorded knob values for ``workload`` (a workload key, or the keys of its
    spellings, ``Template.spellings``) in order of preference: by the order of
    ``targets`` (a name or a tuple of names, as ``record_keys`` gives), then the
    innermost context first, then the user's records before the shipped ones, each
    those measured with as many threads as parallel loops use now first (a config tuned
    for two threads may not be the best on one), fastest first with the spellings'
    records pooled. The caller takes the first that fits the template, so records
    another version of it made (stale) fall through to the next; or []. A config that
    failed (a crash, a timeout, a wrong result) under any of the spellings, on any of
    the targets, in any context, is left out: its code is the same for all of them."""
    if not _stack():  # outside every context (an operator's call, mostly)
        return []
    out, now = [], get_num_threads()
    names, ts = _names(workload), _names(targets)
    bad = {k for _, failed in _stack() for w in names for t in ts for k in failed.get((w, t), ())}
    for target in ts:
        for ranked, _ in reversed(_stack()):
            found = [
                (layer, threads != now, cost, config)
                for w in names
                for layer, threads, cost, config in ranked.get((w, target), [])
                if not bad or config_key(config) not in bad
            ]
            out += [e[-1] for e in sorted(found, key=lambda e: e[:3])]
    return out


def other_targets(workload, targets) -> list[str]:
    """The targets other than ``targets`` (a name or a tuple of names) that the active
    contexts have records of ``workload`` (a key, or the keys of its spellings) for."""
    mine, ws = set(_names(targets)), set(_names(workload))
    return sorted({t for ranked, _ in _stack() for (w, t) in ranked if w in ws and t not in mine})


# the contexts of logs read before, by their files' identities and sizes: an operator's
# first call of each shape enters apply_history_best() (its user's and shipped logs)
_CONTEXTS: dict = {}
_MAX_CONTEXTS = 8
_CONTEXTS_LOCK = threading.Lock()


def _files(layer) -> tuple | None:
    """``(path, inode, size, mtime)`` of each log of a layer of paths; None for records
    given as objects, or a log that cannot be read (``load_records`` says why)."""
    paths = [layer] if isinstance(layer, (str, os.PathLike)) else layer
    if not isinstance(paths, (list, tuple)) or not all(
        isinstance(p, (str, os.PathLike)) for p in paths
    ):
        return None
    try:
        stats = [(os.fspath(p), os.stat(p)) for p in paths]
    except OSError:
        return None
    return tuple((p, st.st_ino, st.st_size, st.st_mtime_ns) for p, st in stats)


def _context(layers) -> tuple[dict, dict]:
    """The (ranked, failed) tables of ``layers`` (``_ranked``'s, merged in order), read
    once for logs that have not changed since."""
    key = tuple(_files(layer) for layer in layers)
    if None not in key and (known := _CONTEXTS.get(key)) is not None:
        return known
    ranked: dict = {}
    failed: dict = {}
    for n, layer in enumerate(layers):
        good, bad = _ranked(layer, n)
        for k, values in good.items():
            ranked.setdefault(k, []).extend(values)
        for k, keys in bad.items():
            failed.setdefault(k, set()).update(keys)
    if None not in key:
        with _CONTEXTS_LOCK:
            while len(_CONTEXTS) >= _MAX_CONTEXTS:
                _CONTEXTS.pop(next(iter(_CONTEXTS)))
            _CONTEXTS[key] = (ranked, failed)
    return ranked, failed


def _ranked(records, layer: int) -> tuple[dict, dict]:
    """(workload, target) -> ``[(layer, threads, cost, config)]``, fastest first; and
    (workload, target) -> the keys of its failed configs (``failed_configs``)."""
    records = load_records(records)
    ranked = ranked_configs(records)
    return {
        key: [(layer, r.threads, r.cost, r.config) for r in recs] for key, recs in ranked.items()
    }, failed_configs(records)


@contextlib.contextmanager
def apply_history_best(records=None):
    """Use the fastest valid config per (workload, target) from ``records`` (a config
    measured several times counts by the median of all its timings).

    ``records``: a path to a JSON Lines log, a list of paths, or records
    (as returned by ``load_records``). Corrupt lines are skipped with a warning.
    Records whose config no longer fits the template (made with another version
    of it) are passed over, with a warning, for the fastest one that does. Records
    measured with as many threads as parallel loops use at the call
    (``pt.get_num_threads()``) come before those of other counts or of none stated.

    With no argument: the user's records (``$PYPTO_HOME/logs``, what ``pypto-tune``
    writes) first, then the records shipped with pypto, each for its own target; a
    shipped config is used where none of the user's fits.
    """
    layers = [records] if records is not None else [store.user_logs(), store.shipped_logs()]
    _stack().append(_context(layers))
    opened = getattr(_local, "scope", ())
    _local.scope = (*opened, next(_SERIALS))
    try:
        yield
    finally:
        _stack().pop()
        _local.scope = opened
