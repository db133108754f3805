"""cost_models: features of lowered kernels and an XGBoost model that ranks them.

    X = np.stack([cost_models.featurize(pt.lower(s, args), target) for s, args in cands])
    model = cost_models.XGBoostCostModel(target).fit(X, gflops)
    scores = model.predict(X_new)          # higher is better

The model sees arrays only; tuners do the featurizing. ``pretrained(target)``
loads the model shipped for a target, when there is one.
"""

import os

from .features import FEATURE_NAMES, N_FEATURES, SCHEMA, featurize
from .xgb import SchemaError, XGBoostCostModel

PRETRAINED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained")


# trained on the records of every target (the target's parameters are features): the
# model for a target that has no records of its own
ALL_TARGETS = "all-targets"


def pretrained_path(target) -> str:
    key = getattr(target, "key", str(target))
    return os.path.join(PRETRAINED_DIR, f"{key}.json")


def pretrained(target):
    """The shipped model for ``target``; for a target without one, the model trained on
    every target's records; None when neither exists."""
    for path in (pretrained_path(target), pretrained_path(ALL_TARGETS)):
        if os.path.exists(path):
            return XGBoostCostModel.load(path)
    return None


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
]
