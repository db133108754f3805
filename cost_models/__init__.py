"""cost_models: features of lowered kernels and an XGBoost model that ranks them.

    X = np.stack([cost_models.featurize(lower_nest(s, args), target) for s, args in cands])
    model = cost_models.XGBoostCostModel(target).fit(X, gflops)
    scores = model.predict(X_new)          # higher is better

The model sees arrays only; tuners do the featurizing, of the loop nests as scheduled
(``pypto.lowering.lower_nest``: loops marked unrolled still loops). ``pretrained(target)``
loads the user's own model for a target (``pypto-tune train-model`` writes it to
``$PYPTO_HOME/models``), else the one shipped in ``cost_models/pretrained/``, else
its base target's.
"""

import os
import warnings

import numpy as np

from pypto import cache
from pypto.target import Target, record_lineage

from .features import FEATURE_NAMES, N_FEATURES, SCHEMA, featurize
from .xgb import SchemaError, XGBoostCostModel

PRETRAINED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained")


# trained on the records of every target (the target's parameters are features): the
# model for a target that has no records of its own
ALL_TARGETS = "all-targets"


def _key(target) -> str:
    """The records' name of ``target``: a Target's key, ``"host"`` (or None) resolved to
    the host's, any other name as given."""
    if target is None or target == "host":
        target = Target("host")
    return getattr(target, "key", str(target))


def user_model_dir() -> str:
    """Where trained models go: ``$PYPTO_HOME/models`` (``PYPTO_HOME`` defaults to
    ``~/.cache/pypto``), never the shipped ``PRETRAINED_DIR``."""
    return os.path.join(cache.home(), "models")


def pretrained_path(target) -> str:
    """The shipped model's path for ``target`` (it may not exist)."""
    return os.path.join(PRETRAINED_DIR, f"{_key(target)}.json")


def pretrained(target):
    """The model for ``target``: the user's own first, then the shipped one, then (for a
    target without one) its base target's (``x86-avx512`` for ``x86-avx512-bf16``: the
    same machine), then the model trained on every target's records; None when none
    exists. A model that cannot be loaded or cannot score a feature row (corrupt,
    another feature schema, another target) is passed over with a warning."""
    key = _key(target)
    candidates = [
        (os.path.join(folder, f"{name}.json"), name)
        for name in (*record_lineage(key), ALL_TARGETS)
        for folder in (user_model_dir(), PRETRAINED_DIR)
    ]
    unusable = []
    for path, name in candidates:
        if not os.path.exists(path):
            continue
        try:
            model = XGBoostCostModel.load(path)
            if model.target != name:
                raise SchemaError(f"it was trained for target {model.target!r}")
            if np.shape(model.predict(np.zeros((1, N_FEATURES), np.float32))) != (1,):
                raise SchemaError("it does not score one row as one value")
        except Exception as e:  # noqa: BLE001 - any unusable file: warn, go on without it
            lines = str(e).strip().splitlines() or [""]
            unusable.append(f"cost model {path} is unusable ({type(e).__name__}: {lines[0]})")
            continue
        _say(unusable, f"using {path} instead")
        return model
    _say(unusable, "tuning starts without a pretrained model")
    return None


def _say(unusable: list, then: str) -> None:
    for why in unusable:
        warnings.warn(f"{why}; {then}", stacklevel=3)


__all__ = [
    "FEATURE_NAMES",
    "N_FEATURES",
    "SCHEMA",
    "featurize",
    "SchemaError",
    "XGBoostCostModel",
    "pretrained",
    "pretrained_path",
    "PRETRAINED_DIR",
    "ALL_TARGETS",
    "user_model_dir",
]
