"""Where records and models live: the user's store and the shipped records.

    $PYPTO_HOME (default ~/.cache/pypto)
        logs/<template>.jsonl        what pypto-tune appends to (unless --log says otherwise)
        models/<target>.json         what pypto-tune train-model writes (unless --out)
    tuning_logs/<target>/<template>.jsonl   shipped records (package data ``pypto_records``
                                            when installed; read, never written)

This module is the one home of these paths; nothing else spells them out.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import warnings

import cost_models
from pypto import cache
from pypto.target import record_lineage

_SOURCE_RECORDS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tuning_logs"
)
# an installed package's data: site-packages/pypto_records beside site-packages/autotune
_INSTALLED_RECORDS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pypto_records"
)
RECORDS_PACKAGE = "pypto_records"  # the name tuning_logs/ is installed under


def home() -> str:
    """The user's store: ``$PYPTO_HOME``, default ``~/.cache/pypto``."""
    return cache.home()


def logs_dir() -> str:
    """The user's tuning logs: ``$PYPTO_HOME/logs``."""
    return os.path.join(home(), "logs")


def models_dir() -> str:
    """The user's trained cost models: ``$PYPTO_HOME/models`` (cost_models reads them)."""
    return cost_models.user_model_dir()


def user_log(template: str) -> str:
    """The log ``pypto-tune`` appends a template's measurements to by default."""
    return os.path.join(logs_dir(), f"{template}.jsonl")


def user_logs() -> list[str]:
    """Every log in the user's store that can be read (none yet: an empty list). One that
    cannot (another user's, after a ``sudo`` run; a dangling symlink) is passed over with
    a warning naming it: it must not stop every operator that looks for records."""
    logs = sorted(glob.glob(os.path.join(logs_dir(), "*.jsonl")))
    unreadable = [p for p in logs if not (os.path.isfile(p) and os.access(p, os.R_OK))]
    for p in unreadable:
        warnings.warn(f"{p}: cannot read this tuning log; its records are not used", stacklevel=2)
    return [p for p in logs if p not in unreadable]


def shipped_dir() -> str | None:
    """The shipped records' root (one folder per target): ``tuning_logs/`` beside the
    code in a source checkout, else the installed ``pypto_records`` package data."""
    if os.path.isdir(_SOURCE_RECORDS):
        return _SOURCE_RECORDS
    if os.path.isdir(_INSTALLED_RECORDS):  # installed beside this package: not any other
        return _INSTALLED_RECORDS  # ``pypto_records`` folder the path happens to reach
    spec = importlib.util.find_spec(RECORDS_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return None


def shipped_targets() -> list[str]:
    """The targets records are shipped for."""
    root = shipped_dir()
    if root is None:
        return []
    return sorted(d for d in os.listdir(root) if glob.glob(os.path.join(root, d, "*.jsonl")))


def shipped_logs(target=None) -> list[str]:
    """The shipped logs of ``target`` (a name or a ``pt.Target``) and of its base targets
    (``x86-avx512`` for ``x86-avx512-bf16``: the same machine), or of every target."""
    root = shipped_dir()
    if root is None:
        return []
    if target is None:
        return sorted(glob.glob(os.path.join(root, "*", "*.jsonl")))
    keys = record_lineage(str(getattr(target, "key", target)))
    return [p for k in keys for p in sorted(glob.glob(os.path.join(root, k, "*.jsonl")))]


def default_logs() -> list[str]:
    """What ``apply_history_best()`` reads with no argument: the user's logs, then the
    shipped ones."""
    return user_logs() + shipped_logs()
