"""XGBTuner: model-based search over a config space (AutoTVM's recipe, IR features).

Every ``plan_size`` measurements (16: the model refits often while data is scarce):
fit the cost model on everything measured so far (plus records of
other workloads of the same template, and of any workload on other targets,
ranked in their own groups), run
parallel simulated-annealing chains over the space on the model's scores,
and queue the best unvisited configs, picked for diversity (rank traded
for knob values not yet in the plan), with an epsilon share of random ones.
Before there is enough data to fit, the shipped pretrained model for the
target (if any) ranks the first plan; without one the first batch is random.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from cost_models import XGBoostCostModel, pretrained
from pypto.errors import PyptoError
from pypto.target import Target

from .records import one_per_config
from .space import Config, SpaceError
from .task import Task
from .tuners import Tuner, is_own


class XGBTuner(Tuner):
    """Fit, anneal on the model, measure the most promising configs."""

    name = "xgb"  # as pypto-tune --tuner and the records call it

    model_based = True

    def __init__(
        self,
        task,
        seed=None,
        plan_size: int = 16,
        n_chains: int = 8,
        sa_steps: int = 40,
        epsilon: float = 0.05,
        objective: str = "rank",
        min_fit: int = 8,
        use_pretrained: bool = True,
    ):
        super().__init__(task, seed)
        self.plan_size = plan_size
        self.n_chains = n_chains
        self.sa_steps = sa_steps
        self.epsilon = epsilon
        self.min_fit = min_fit
        self.model = XGBoostCostModel(task.target, objective=objective, seed=seed or 0)
        self.base_model = pretrained(task.target) if use_pretrained else None
        self.plan: list[Config] = []
        self.features: dict[int, np.ndarray | None] = {}
        self.xs: list[np.ndarray] = []
        self.ys: list[float] = []
        self.transfer: list[tuple[np.ndarray, np.ndarray]] = []  # (X, y) per other workload

    # ---- features

    def feature(self, cfg: Config):
        """Features of a config's lowered kernel (cached; None if it does not lower)."""
        i = cfg.index
        if i not in self.features:
            try:
                self.features[i] = self.task.featurize(cfg)
            except Exception:  # noqa: BLE001 - a template's own failure: the builder records it
                self.features[i] = None
        return self.features[i]

    def _scores(self, model, cfgs) -> np.ndarray:
        feats = [self.feature(c) for c in cfgs]
        ok = [k for k, f in enumerate(feats) if f is not None]
        out = np.full(len(cfgs), -np.inf)
        if ok:
            out[ok] = model.predict(np.stack([feats[k] for k in ok]))
        return out

    # ---- learning

    def update(self, inputs, results):
        super().update(inputs, results)
        flop = self.task.flop if self.task.flop > 0 else 1.0  # no flops: runs per second
        for inp, res in zip(inputs, results):
            f = self.feature(inp.config)
            if f is None:
                continue
            self.xs.append(f)
            self.ys.append(flop / res.cost if res.ok else 0.0)

    def load_history(self, records) -> int:
        """Own records count as measured; records of the same template's other workloads,
        and of any of its workloads on other targets, train the model (transfer learning:
        each featurized for the target it was measured on, whose parameters are features)."""
        used = super().load_history(records)
        mine = is_own(self.task)
        by_workload: dict = {}
        for r in records:
            if mine(r) or r.template != self.task.name:
                continue
            by_workload.setdefault((r.workload, r.target), []).append(r)
        for (_, target_key), recs in by_workload.items():
            same = target_key == self.task.target.key
            try:
                target = self.task.target if same else Target(target_key)
                other = Task(self.task.template, recs[0].args, target=target)
            except Exception:  # noqa: BLE001 - a workload or target this version lacks
                continue
            X, y = [], []
            for r in one_per_config(recs):
                try:
                    X.append(other.featurize(r.config))
                    y.append(r.speed)
                except (PyptoError, SpaceError, ValueError, TypeError):
                    continue
            if len(X) >= 2 and max(y) > 0:
                self.transfer.append((np.stack(X), np.asarray(y)))
        return used

    def _fit(self) -> XGBoostCostModel | None:
        own = sum(1 for y in self.ys if y > 0)
        parts = [(np.stack(self.xs), np.asarray(self.ys))] if own >= 2 else []
        parts += self.transfer
        if own < self.min_fit and not self.transfer:
            return self.base_model
        if not parts:
            return self.base_model
        X = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        return self.model.fit(X, y, group=[len(p[1]) for p in parts])

    # ---- planning

    def _anneal(self, model) -> list[Config]:
        """Simulated annealing chains on the model's scores; the best configs seen."""
        starts = [
            c
            for c, _ in sorted(
                ((c, r) for c, r in self.history if r.ok), key=lambda cr: cr[1].cost
            )[: self.n_chains // 2]
        ]
        while len(starts) < self.n_chains:
            starts.append(self.space.sample(self.rng))
        cur = starts
        cur_s = self._scores(model, cur)
        seen: dict[int, tuple[float, Config]] = {}
        for c, sc in zip(cur, cur_s):
            seen[c.index] = (sc, c)
        finite = cur_s[np.isfinite(cur_s)]
        spread = float(np.std(finite)) if len(finite) > 1 else 1.0
        for step in range(self.sa_steps):
            temp = max(1e-3, spread * (1.0 - step / self.sa_steps))
            prop = [
                self.space.neighbours(c, self.rng, 1)[0] if len(self.space) > 1 else c for c in cur
            ]
            prop_s = self._scores(model, prop)
            for k, (c, sc) in enumerate(zip(prop, prop_s)):
                seen.setdefault(c.index, (sc, c))
                if sc >= cur_s[k] or (
                    np.isfinite(sc)
                    and self.rng.random()
                    < math.exp((sc - cur_s[k]) / temp if np.isfinite(cur_s[k]) else 0.0)
                ):
                    cur[k], cur_s[k] = c, sc
        ranked = sorted(seen.values(), key=lambda sc: -sc[0])
        return [c for sc, c in ranked if np.isfinite(sc) and c.index not in self.visited]

    def _make_plan(self, n: int):
        model = self._fit()
        if model is None:  # nothing to learn from yet: explore
            self.plan = [c for c in (self._unvisited_sample() for _ in range(n)) if c is not None]
            return
        n_random = int(round(self.epsilon * self.plan_size))
        plan = _diverse(self._anneal(model), self.plan_size - n_random)
        taken = {c.index for c in plan}
        self.plan = plan + self._random_unvisited(self.plan_size - len(plan), taken)

    def next_batch(self, n):
        out = []
        while len(out) < n:
            self.plan = [c for c in self.plan if c.index not in self.visited]
            if not self.plan:
                if out:
                    break
                self._make_plan(n if not self.ys and self.base_model is None else self.plan_size)
                if not self.plan:
                    break
            c = self.plan.pop(0)
            if all(c.index != o.index for o in out):
                out.append(c)
        return out


def _diverse(ranked: list, n: int, pool: int = 3) -> list:
    """Pick ``n`` of the best ``pool * n`` configs (ranked best first), trading rank for
    knob values not picked yet, so one plan does not spend itself on near-copies."""
    cands = []
    for c in ranked:
        if all(c.index != o.index for o in cands):
            cands.append(c)
        if len(cands) >= pool * n:
            break
    picked, covered = [], set()
    rank = {id(c): k for k, c in enumerate(cands)}
    while cands and len(picked) < n:

        def gain(c):
            new = sum((k, repr(v)) not in covered for k, v in c.values.items())
            return new / max(1, len(c.values)) - rank[id(c)] / len(rank)

        best = max(cands, key=gain)
        cands.remove(best)
        picked.append(best)
        covered.update((k, repr(v)) for k, v in best.values.items())
    return picked


def _quiet_xgboost():
    warnings.filterwarnings("ignore", module="xgboost")


_quiet_xgboost()
