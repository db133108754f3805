"""Tuning efficiency: best GFLOP/s against trials for XGB, GA, random and grid search.

    python benchmarks/tuning_efficiency.py [--budget 96] [--seeds 3] [--png curves.png]

Workloads: fp32 matmul 1024^3 and the ResNet-18 3x3 conv layer (64 -> 64
channels, 56x56, pad 1). Tuners: XGB from scratch (no pretrained model),
XGB with transfer from the shipped records of the template's other
workloads (never those of the workload tuned), GA, random and grid search.
Every tuner and seed gets the same budget; each
distinct config is measured once and that measurement is replayed when
another run proposes it (so the runs are comparable and the study costs
only the distinct configs). Reported: the trials each tuner needs to reach
95% of the best config found by any run (median over seeds), and the cost
model's Spearman rank correlation on held-out measured configs (one 80/20
split, and the mean over 5 folds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autotune as at  # noqa: E402
import cost_models as cm  # noqa: E402
from benchmarks.common import CachedMeasurer, table  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = {
    "matmul 1024^3": ("matmul", (1024, 1024, 1024)),
    "conv2d resnet18": ("conv2d_nchw", (1, 64, 56, 56, 64, 3, 3, 1, 1)),
}


def _xgb_transfer(task, seed):
    """XGB starting from the shipped records of the template's *other* workloads (never
    the workload being tuned): what a user tuning a new shape has."""
    tuner = at.XGBTuner(task, seed=seed, use_pretrained=False)
    log = os.path.join(ROOT, "tuning_logs", task.target.key, f"{task.name}.jsonl")
    if os.path.exists(log):
        recs = [r for r in at.load_records(log) if r.workload != task.workload_key]
        tuner.load_history(recs)
    return tuner


TUNERS = {
    "xgb+transfer": _xgb_transfer,
    "xgb": lambda t, s: at.XGBTuner(t, seed=s, use_pretrained=False),
    "ga": lambda t, s: at.GATuner(t, seed=s),
    "random": lambda t, s: at.RandomTuner(t, s),
    "grid": lambda t, s: at.GridSearchTuner(t, s),
}


def run_curve(tuner, budget, measurer) -> list[float]:
    curve = []
    tuner.tune(
        budget,
        measurer=measurer,
        callbacks=[lambda tu, inp, res: curve.extend([tu.best_gflops] * len(inp))],
    )
    return curve


def trials_to(curve, level) -> float:
    for k, v in enumerate(curve, 1):
        if v >= level:
            return k
    return float("inf")


def spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def held_out_rank_correlation(task, results: dict, seed=0, folds: int = 5) -> tuple:
    """Spearman correlation of the cost model's scores with measured GFLOP/s on configs
    it was not fitted on: ``(one split, 20% held out; mean over k folds)``."""
    X, y = [], []
    for cfg_json, res in results.items():
        X.append(task.featurize(json.loads(cfg_json)))
        y.append(task.flop / res.cost / 1e9 if res.ok else 0.0)
    X, y = np.stack(X), np.asarray(y)
    idx = np.random.default_rng(seed).permutation(len(y))
    parts = np.array_split(idx, folds)
    rhos = []
    for k, test in enumerate(parts):
        train = np.concatenate([p for j, p in enumerate(parts) if j != k])
        model = cm.XGBoostCostModel(task.target).fit(X[train], y[train])
        rhos.append(spearman(model.predict(X[test]), y[test]))
    return rhos[0], float(np.mean(rhos))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=96)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--png", default="tuning_curves.png")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--records", default="", help="append every distinct measurement here")
    a = p.parse_args(argv)
    opt = at.MeasureOption(number=2, repeat=3, timeout=10)
    summary, curves = [], {}
    for wname in a.workloads.split(","):
        name, args = WORKLOADS[wname]
        task = at.Task(name, args)
        m = CachedMeasurer(at.Measurer(opt), log=a.records)
        runs = {}
        try:
            for tname, make in TUNERS.items():
                for seed in range(a.seeds):
                    runs[(tname, seed)] = run_curve(make(task, seed), a.budget, m)
                    print(
                        f"{wname} {tname} seed {seed}: best {runs[(tname, seed)][-1]:.1f} "
                        f"GFLOP/s ({m.fresh} distinct configs measured so far)",
                        flush=True,
                    )
        finally:
            m.close()
        best = max(c[-1] for c in runs.values())
        need = {
            t: float(np.median([trials_to(runs[(t, s)], 0.95 * best) for s in range(a.seeds)]))
            for t in TUNERS
        }
        measured = {k[1]: r for k, r in m.cache.items() if k[0] == task.workload_key}
        rho, rho_k = held_out_rank_correlation(task, measured)
        curves[wname] = runs
        for t in TUNERS:
            final = np.median([runs[(t, s)][-1] for s in range(a.seeds)])
            summary.append([wname, t, f"{final:.1f}", f"{need[t]:g}"])
        for t in ("xgb", "xgb+transfer"):
            ratio = need[t] / need["random"] if np.isfinite(need["random"]) else float("nan")
            summary.append([wname, f"{t} / random trials", "", f"{ratio:.2f}"])
        summary.append([wname, "rank corr. (20% held out)", "", f"{rho:.2f}"])
        summary.append([wname, "rank corr. (5-fold mean)", "", f"{rho_k:.2f}"])
        print(f"{wname}: best {best:.1f} GFLOP/s; {m.fresh} distinct configs", flush=True)
    print(table(["workload", "tuner", "median best GFLOP/s", "trials to 95% (median)"], summary))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4))
    for ax, (wname, runs) in zip(np.atleast_1d(axes), curves.items()):
        for t in TUNERS:
            ax.plot(np.median([runs[(t, s)] for s in range(a.seeds)], axis=0), label=t)
        ax.set_title(wname)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s (median of seeds)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(a.png)
    print(f"curves: {a.png}")


if __name__ == "__main__":
    main()
