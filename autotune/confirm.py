"""Re-measuring the fastest configs of a workload: ``pypto-tune --confirm K``.

One measurement is one draw from a noisy machine: among configs within a few
percent of each other, the fastest record is mostly the luckiest, and a
benchmark that re-measures it later finds it slower than its neighbours. A
shared machine also drifts by 10% and more within an hour, so configs
measured at different times compare badly. So after the search, the K
fastest configs are measured again side by side, in interleaved rounds
(each of them once, then each once more), until every config among the K
fastest -- ranked by the median of all their timings (``ranked_configs``),
the new ones included -- has been measured ``rounds`` times in this call. A
config that climbs into the K fastest on one lucky draw is measured with
them; one that falls out is left.

The template's default config is measured in the same rounds when it is not
among the K fastest, as the baseline: the best record is then one that beat
the default side by side, never one that looked faster only because it was
measured in a quieter minute (``apply_history_best`` prefers any record over
the default, so a record slower than it would make the tuned kernel slower
than the untuned one).

    log: c1 7.2 ms (lucky), c2 7.3, c3 7.3   ->  + c1 8.1, c2 7.3, c3 7.4, default 7.6
         default 7.9 (a busy minute)             + c1 8.0, c2 7.2, c3 7.5, default 7.7
    best: c1                                     best: c2 (median 7.3 of three)

A round whose configs ran far slower than in the search (their median ratio above
``BUSY``: another program took the cores, and OpenMP's threads waited for each other
whole time slices) says nothing about which config is fastest: it is not recorded but
measured again after a pause (a passing burst), and when it stays that slow
(``BUSY_TRIES`` times) the confirmation stops with a ``BusyMachineWarning``. (Once,
on a shared 2-core machine, such a round timed an int8 GEMM's default at 20.8 ms
against 0.43 ms in the search, and made a config 20 times slower the best.)
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings

from .measure import EnvironmentFault, MeasureOption, Measurer
from .records import CONFIRM, append_records, config_key, load_records
from .space import SpaceError
from .tuners import MeasureInput, ranked_own, to_record

BUSY = 2.0  # a round's median time over the search's, above which the machine was busy
BUSY_TRIES, BUSY_PAUSE = 3, 2.0  # a busy round is measured again, this many times in all


class BusyMachineWarning(RuntimeWarning):
    """Re-measured configs ran ``slowdown`` times as long as in the search: nothing was
    confirmed."""

    def __init__(self, message: str, slowdown: float):
        super().__init__(message)
        self.slowdown = slowdown


def _slowdown(before: dict, todo: list, results: list) -> float:
    """The median, over the configs measured before the confirmation, of their time in
    this round over their median time then (1.0 when none was)."""
    ratios = []
    for c, r in zip(todo, results):
        old = before.get(config_key(c.to_json()))
        if old and r.ok:
            ratios.append(statistics.median(r.costs) / old)
    return statistics.median(ratios) if ratios else 1.0


def _fastest(task, records, k: int) -> list:
    """The ``k`` fastest configs of ``task`` in ``records`` that fit its template (each
    once, whatever thread counts its records state)."""
    out = []
    for r in ranked_own(task, records):
        try:
            cfg = task.config_space.config(r.config)
        except SpaceError:
            continue  # a record of another version of the template
        if all(c.index != cfg.index for c in out):
            out.append(cfg)
        if len(out) == k:
            break
    return out


def confirm_best(
    task,
    log: str,
    k: int,
    rounds: int = 2,
    measure: MeasureOption | None = None,
    measurer=None,
):
    """Measure the ``k`` fastest configs of ``task`` in ``log`` again, ``rounds`` times
    each, interleaved, with the template's default config, appending every
    measurement to ``log`` (see the module docstring). Returns how many measurements
    were made. ``EnvironmentFault`` stops it, after the measurements made before the
    fault are appended. ``measurer``: an object with ``measure(task, configs)`` to use
    instead of a fresh ``Measurer(measure)`` (a ``RayMeasurer``: confirmed on the
    cluster's nodes of the task's target)."""
    if k <= 0 or rounds <= 0:
        return 0
    records = load_records(log)
    before = {config_key(r.config): r.cost for r in ranked_own(task, records)}
    default = task.config_space.default_config()
    fresh: dict = {}  # config index -> measurements made in this call
    made = 0
    m = measurer or Measurer(measure or MeasureOption())
    with contextlib.nullcontext() if measurer else m:  # a measurer given stays open
        for _ in range(4 * rounds):  # a bound: the set of the k fastest settles quickly
            fastest = _fastest(task, records, k)
            if fastest and all(c.index != default.index for c in fastest):
                fastest.append(default)  # the baseline, side by side
            todo = [c for c in fastest if fresh.get(c.index, 0) < rounds]
            if not todo:
                break
            for _attempt in range(BUSY_TRIES):  # a busy round is measured again, later
                try:
                    results = m.measure(task, todo)
                except EnvironmentFault as e:  # keep what was measured, then stop
                    done = zip(todo, e.done)
                    append_records(
                        log, [to_record(MeasureInput(task, c), r, CONFIRM) for c, r in done]
                    )
                    raise
                slow = _slowdown(before, todo, results)
                if slow <= BUSY:
                    break
                time.sleep(BUSY_PAUSE)
            else:
                text = (
                    f"{task.name} {list(task.args)}: the re-measured configs ran {slow:.1f}x "
                    f"as long as in the search, {BUSY_TRIES} times (a busy machine?); their "
                    "times were not recorded and the search's ranking stands"
                )
                warnings.warn(BusyMachineWarning(text, slow), stacklevel=2)
                break
            new = [to_record(MeasureInput(task, c), r, CONFIRM) for c, r in zip(todo, results)]
            append_records(log, new)
            records.extend(new)
            for c in todo:
                fresh[c.index] = fresh.get(c.index, 0) + 1
            made += len(new)
    return made
