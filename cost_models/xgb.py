"""An XGBoost model that ranks candidate kernels from their features.

It sees arrays only: ``fit(X, y)`` with ``y`` the measured throughput
(higher is better; failed candidates 0), ``predict(X)`` scores (higher is
better). The default objective ranks (pairwise) within one group; regression
on the normalized throughput is an option. ``save``/``load`` keep the
feature schema and refuse a model trained on another one.
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np

from pypto.cache import atomic_write
from pypto.target import as_target

from .features import N_FEATURES, SCHEMA

OBJECTIVES = {"rank": "rank:pairwise", "reg": "reg:squarederror"}


class SchemaError(ValueError):
    """A saved model or a feature array of another feature schema."""


class _class_or_instance:
    """A method called on the class or on an instance: ``f(cls, instance or None, ...)``."""

    def __init__(self, f):
        self.f = f
        self.__doc__ = f.__doc__

    def __get__(self, obj, cls):
        return functools.partial(self.f, cls, obj)


class XGBoostCostModel:
    """``fit(X, y)`` / ``predict(X)`` on feature arrays, per hardware target."""

    def __init__(
        self, target="host", objective: str = "rank", num_rounds: int = 300, seed: int = 0, **params
    ):
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
        # "host" is recorded as the concrete target it resolves to, as records are
        self.target = getattr(as_target(target) if target == "host" else target, "key", str(target))
        self.objective = objective
        self.num_rounds = num_rounds
        # rank: compare many random pairs per sample ("mean"), not only the top ones, so
        # the whole order is learned (the tuner anneals over all of it)
        rank = {"lambdarank_pair_method": "mean", "lambdarank_num_pair_per_sample": 64}
        self.params = {
            "max_depth": 6,
            "eta": 0.1,
            "subsample": 0.9,
            "min_child_weight": 1,
            "gamma": 0.0,
            "lambda": 1.0,
            "nthread": max(1, (os.cpu_count() or 1)),
            "seed": seed,
            "verbosity": 0,
            **(rank if objective == "rank" else {}),
            **params,
            "objective": OBJECTIVES[objective],
        }
        self.booster = None
        self.schema = SCHEMA
        self.n_train = 0

    @staticmethod
    def _check(X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != N_FEATURES:
            raise SchemaError(
                f"expected features of shape (n, {N_FEATURES}) ({SCHEMA}), got {X.shape}"
            )
        return X

    def fit(self, X, y, group=None) -> XGBoostCostModel:
        """Train on rows ``X`` with throughputs ``y``. ``group``: sizes of consecutive row
        groups (one per workload) ranked separately; labels are scaled per group."""
        import xgboost as xgb

        X = self._check(X)
        y = np.asarray(y, dtype=np.float64)
        if len(X) != len(y) or len(y) == 0:
            raise ValueError(f"fit needs as many labels as rows, got {len(X)} and {len(y)}")
        if not np.all(np.isfinite(y)):
            bad = int(np.flatnonzero(~np.isfinite(y))[0])
            raise ValueError(f"fit: label {bad} is {y[bad]}; labels must be finite throughputs")
        group = list(group) if group is not None else [len(y)]
        if sum(group) != len(y):
            raise ValueError(f"group sizes add up to {sum(group)}, not {len(y)} rows")
        label = np.zeros_like(y)
        start = 0
        for g in group:
            part = y[start : start + g]
            top = float(np.max(part)) if len(part) and np.max(part) > 0 else 1.0
            label[start : start + g] = np.clip(part / top, 0.0, 1.0)
            start += g
        d = xgb.DMatrix(X, label=label)
        # exact splits are both faster and finer than histograms on tuning-sized data
        params = {"tree_method": "exact" if len(y) < 20000 else "hist", **self.params}
        if self.objective == "rank":
            d.set_group(group)
        self.booster = xgb.train(params, d, num_boost_round=self.num_rounds)
        self.n_train = len(y)
        return self

    def predict(self, X) -> np.ndarray:
        import xgboost as xgb

        if self.booster is None:
            raise RuntimeError("the cost model is not trained yet (call fit or load)")
        X = self._check(X)
        return self.booster.predict(xgb.DMatrix(X))

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def save(self, path: str) -> None:
        if self.booster is None:
            raise RuntimeError("nothing to save: the model is not trained")
        raw = self.booster.save_raw(raw_format="json").decode()
        meta = {
            "schema": self.schema,
            "n_features": N_FEATURES,
            "target": self.target,
            "objective": self.objective,
            "num_rounds": self.num_rounds,
            "n_train": self.n_train,
            "booster": raw,
        }
        # a fresh temporary name (a fixed one in a shared directory could be a planted
        # symlink), renamed into place
        atomic_write(os.path.abspath(path), json.dumps(meta).encode(), 0o644)

    @_class_or_instance
    def load(cls, model, path: str) -> XGBoostCostModel:
        """``XGBoostCostModel.load(path)`` returns the saved model; ``model.load(path)``
        (AutoTVM's form) loads it into ``model`` and returns it."""
        import xgboost as xgb

        with open(path) as f:
            try:
                meta = json.load(f)
            except ValueError:
                meta = None
        if not isinstance(meta, dict):
            raise SchemaError(f"{path} is not a saved pypto cost model")
        if meta.get("schema") != SCHEMA or meta.get("n_features") != N_FEATURES:
            raise SchemaError(
                f"{path} was trained on features {meta.get('schema')!r} "
                f"({meta.get('n_features')} values); this pypto computes {SCHEMA!r} "
                f"({N_FEATURES} values): retrain it from the tuning logs"
            )
        try:
            fresh = cls(meta["target"], objective=meta["objective"], num_rounds=meta["num_rounds"])
            booster = xgb.Booster()
            booster.load_model(bytearray(meta["booster"].encode()))
            width = booster.num_features()
        except (KeyError, TypeError, ValueError, AttributeError, xgb.core.XGBoostError) as e:
            why = f"no field {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
            raise SchemaError(f"{path} is not a usable saved pypto cost model ({why})") from None
        if width != N_FEATURES:  # (its header says otherwise: predict would fail in xgboost)
            raise SchemaError(
                f"{path} holds a booster of {width} features, not the {N_FEATURES} its "
                f"header names: retrain it from the tuning logs"
            )
        m = fresh if model is None else model
        if model is not None:
            m.target, m.objective, m.num_rounds = fresh.target, fresh.objective, fresh.num_rounds
            m.params = fresh.params
        m.booster = booster
        m.n_train = meta.get("n_train", 0)
        return m
