"""Train the shipped cost models from tuning logs: one model per target, and one over
every target's records (``all-targets``, for targets without records of their own:
the target's parameters are features).

    pypto-tune train-model [LOG ...]        # default: the user's logs and the shipped ones

Each config (once, with the median of all its timings) is instantiated with
its template, lowered, and featurized; each workload is one ranking group.
The models are written to ``out_dir`` (default: the user's store,
``$PYPTO_HOME/models/<target>.json``), which XGBTuner loads before the shipped
``cost_models/pretrained/<target>.json``; the shipped models are never
overwritten (the package may be installed read-only, and a model trained on a
few records would replace one trained on hundreds).
"""

from __future__ import annotations

import os

import numpy as np

import cost_models as cm
from pypto.errors import PyptoError

from . import store
from .records import load_records, one_per_config
from .space import SpaceError
from .task import Task


def training_data(records, target_key: str | None):
    """Feature rows, speeds (``Record.speed``) and group sizes (one group per workload
    and target), of one target's records, or of every target's (``None``), each
    featurized for its own target."""
    by_workload: dict = {}
    for r in records:
        if target_key is None or r.target == target_key:
            by_workload.setdefault((r.workload, r.target), []).append(r)
    X, y, groups = [], [], []
    for (_, target), recs in by_workload.items():
        try:
            task = Task(recs[0].template, recs[0].args, target=target)
        except (KeyError, TypeError, ValueError, ArithmeticError, SpaceError, PyptoError):
            continue  # a template this version does not have, or other arguments
        rows = 0
        for r in one_per_config(recs):
            try:
                X.append(task.featurize(r.config))
            except (SpaceError, PyptoError, ValueError, TypeError, ArithmeticError):
                continue
            y.append(r.speed)
            rows += 1
        if rows:
            groups.append(rows)
    return (np.stack(X) if X else np.zeros((0, cm.N_FEATURES))), np.asarray(y), groups


def train(paths=None, out_dir: str | None = None, say=None) -> dict:
    """Fit and save one model per target found in the logs, into ``out_dir`` (default
    ``cost_models.user_model_dir()``); returns {target: rows}. ``ValueError`` for the
    shipped models' directory. ``say(target, rows, path)``, if given, hears of each model
    as it is saved (featurizing thousands of records takes minutes). ``paths`` default to
    the user's logs and the shipped ones (``store.default_logs``). A target whose records
    hold fewer than 8 configs, or no two different speeds (a model of them would rank
    nothing, yet come before the shipped one), gets no model."""
    paths = paths or store.default_logs()
    if not paths:
        raise FileNotFoundError("no tuning logs given, and none in the user's store or shipped")
    out_dir = os.fspath(out_dir) if out_dir is not None else cm.user_model_dir()
    if os.path.exists(out_dir) and os.path.samefile(out_dir, cm.PRETRAINED_DIR):
        raise ValueError(
            f"{out_dir} holds the shipped cost models; train into another directory "
            f"(default {cm.user_model_dir()})"
        )
    records = load_records(paths)
    os.makedirs(out_dir, exist_ok=True)
    done, parts = {}, []
    for target in [*sorted({r.target for r in records}), cm.ALL_TARGETS]:
        if target == cm.ALL_TARGETS and len(done) < 2:
            break  # the all-targets model only where it knows more than one target's
        if target == cm.ALL_TARGETS:  # every target's rows, featurized once
            X, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            groups = [g for p in parts for g in p[2]]
        else:
            X, y, groups = training_data(records, target)
            parts.append((X, y, groups))
        if len(y) < 8 or len(np.unique(y[y > 0])) < 2:
            continue
        model = cm.XGBoostCostModel(target).fit(X, y, group=groups)
        model.save(os.path.join(out_dir, f"{target}.json"))
        done[target] = len(y)
        if say is not None:
            say(target, len(y), os.path.join(out_dir, f"{target}.json"))
    return done
