"""``pypto-tune plot LOG [LOG ...] -o FILE.png``: best-so-far GFLOP/s against trials, one
panel per workload and target, one line per log and tuner (records name the tuner that
proposed them; records of older versions, which do not, make one line per log; the
re-measurements of ``--confirm`` are no trials and are left out). Needs
matplotlib (the ``plot`` extra: ``pip install 'pypto[plot]'``)."""

from __future__ import annotations

import argparse
import json
import math
import os

from ..records import CONFIRM
from .common import UsageError, load_logs

try:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
except ImportError:  # the plot extra is optional; run() says what to install
    plt = None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This subcommand's arguments."""
    p.add_argument("logs", nargs="+", metavar="LOG", help="JSON Lines tuning log(s)")
    p.add_argument("-o", "--out", required=True, metavar="FILE.png", help="the picture to write")


def curves(records) -> list[tuple[int, float]]:
    """(trial, best GFLOP/s so far) after each record, in the order they were measured."""
    best, out = 0.0, []
    for i, r in enumerate(records, 1):
        best = max(best, r.gflops)
        out.append((i, best))
    return out


def series(paths) -> dict:
    """(workload, target) -> line label -> its records in order: one line per log and
    tuner (``log: xgb``), or per log for records that do not name their tuner; not the
    confirmations' re-measurements (``pypto-tune --confirm``)."""
    panels: dict = {}
    for path in paths:
        label = os.path.splitext(os.path.basename(path))[0]
        for r in load_logs([path]):
            if r.flop and r.tuner != CONFIRM:  # a re-measurement is no trial
                line = f"{label}: {r.tuner}" if r.tuner else label
                panels.setdefault((r.workload, r.target), {}).setdefault(line, []).append(r)
    return panels


def run(a: argparse.Namespace) -> int:
    """Run the subcommand on parsed arguments; returns the exit status."""
    if plt is None:
        raise UsageError(
            "plot needs matplotlib, which is not installed: pip install 'pypto[plot]' "
            "(or pip install matplotlib)"
        )
    if not a.out.lower().endswith(".png"):
        raise UsageError(f"-o {a.out}: the picture is a PNG; name it FILE.png")
    panels = series(a.logs)
    if not panels:
        raise UsageError(f"{', '.join(a.logs)}: no records with a FLOP count to plot")
    cols = min(2, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.2 * rows), squeeze=False)
    for ax, ((workload, target), lines) in zip(axes.flat, sorted(panels.items())):
        name, args = json.loads(workload)
        for label, recs in sorted(lines.items()):
            xs, ys = zip(*curves(recs))
            ax.step(xs, ys, where="post", label=f"{label} ({len(recs)} trials)")
        ax.set_title(f"{name} {'x'.join(map(str, args))} on {target}", fontsize=10)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s so far")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.tight_layout()
    try:
        fig.savefig(a.out, dpi=100)
    except OSError as e:
        raise UsageError(f"-o {a.out}: cannot write it ({e.strerror})") from None
    finally:
        plt.close(fig)
    print(f"wrote {a.out}: {len(panels)} workload(s), {len(a.logs)} log(s)")
    return 0
