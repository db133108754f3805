"""What a task scheduler run shows: one progress display, and the table at the end.

tuning:  40%|████      | 96/240 [01:10<01:45, 1.4trial/s]
matmul 512^3 61@48 | matmul 1024^3 58@32 | softmax 4096x4096 3@16      (GFLOP/s @ trials)

workload       trials  new  best ms  GFLOP/s  weight  weighted ms  note
matmul 512^3       48   48    4.401     61.0       1        4.401
"""

from __future__ import annotations

import math

from tqdm.auto import tqdm


def _ms(v) -> str:
    return f"{v * 1e3:.4g}" if v is not None else "-"


def summary_table(rows: list[dict], trials: int) -> str:
    """``TaskScheduler.summary()`` rows as text, with a total line (``trials``: in all)."""
    head = ["workload", "trials", "new", "best ms", "GFLOP/s", "weight", "weighted ms", "note"]
    body = []
    for r in rows:
        rate = f"{r['gflops']:.1f}" if r["gflops"] is not None else "-"
        body.append(
            [r["label"], r["trials"], r["new"], _ms(r["best_s"]), rate, f"{r['weight']:g}",
             _ms(r["weighted_s"]), r["note"]]
        )  # fmt: skip
    weighted = [r["weighted_s"] for r in rows]
    total = f"{sum(t for t in weighted if t is not None) * 1e3:.4g}"
    if None in weighted:
        total += " (+ untuned)"
    body.append(["total", trials, sum(r["new"] for r in rows), "", "", "", total, ""])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]

    def fmt(row):
        cells = (
            str(c).ljust(w) if i in (0, 7) else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths))
        )
        return "  ".join(cells).rstrip()

    return "\n".join([fmt(head), fmt(["-" * w for w in widths]), *map(fmt, body)])


class Progress:
    """One display for the whole run: a bar of trials (or seconds), and a line with each
    task's best GFLOP/s and trials (``matmul 512^3 61@48 | softmax 4096x4096 3@16``)."""

    def __init__(self, sched, trials, minutes, start):
        self.start, self.clock = start, sched.clock
        self.by_trials = trials is not None
        self.bar = tqdm(
            total=trials if self.by_trials else round(60 * minutes),
            initial=sched.trials if self.by_trials else 0,
            unit="trial" if self.by_trials else "s",
            desc="tuning",
            dynamic_ncols=True,
        )
        self.line = tqdm(total=0, bar_format="{desc}", position=1, dynamic_ncols=True, leave=False)

    def update(self, sched, n: int):
        if self.by_trials:
            self.bar.update(n)
        else:
            self.bar.n = min(self.bar.total, round(self.clock() - self.start))
            self.bar.refresh()
        parts = []
        for st in sched.states:
            best = st.tuner.best_cost
            flop = st.task.flop if st.task.flop == st.task.flop else 0.0
            val = f"{flop / best / 1e9:.0f}" if math.isfinite(best) and flop else "-"
            parts.append(f"{st.label} {val}@{len(st.tuner.history)}")
        self.line.set_description_str(" | ".join(parts))

    def close(self):
        self.line.close()
        self.bar.close()
