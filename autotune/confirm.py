"""Re-measuring the fastest configs of a workload: ``pypto-tune --confirm K``.

One measurement is one draw from a noisy machine: among configs within a few
percent of each other, the fastest record is mostly the luckiest, and a
benchmark that re-measures it later finds it slower than its neighbours. So
after the search, the K fastest configs are measured again, in interleaved
rounds (each of them once, then each once more), until every one of the K
fastest, ranked by the median of all their timings (``ranked_configs``), has
been measured ``1 + rounds`` times. A config that climbs into the K fastest
on one lucky measurement is measured with them; one that falls out is left.

    log: c1 7.2 ms, c2 7.3, c3 7.3, ...     ->   + c1 8.1, c2 7.3, c3 7.4
                                                 + c1 8.0, c2 7.2, c3 7.5
    best: c1 (one lucky draw)                    best: c2 (median 7.3 of three)
"""

from __future__ import annotations

import json

from .measure import MeasureOption, Measurer
from .records import append_records, load_records, ranked_configs
from .space import SpaceError
from .tuners import MeasureInput, to_record


def _key(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def _to_confirm(task, records, k: int, times: int) -> list:
    """Configs among the ``k`` fastest of ``task`` measured fewer than ``times`` times."""
    key = (task.workload_key, task.target.key)
    mine = [r for r in records if (r.workload, r.target) == key]
    counts: dict = {}
    for r in mine:
        counts[_key(r.config)] = counts.get(_key(r.config), 0) + 1
    fastest = []
    for r in ranked_configs(mine).get(key, []):
        try:
            fastest.append((task.config_space.config(r.config), counts[_key(r.config)]))
        except SpaceError:
            continue  # a record of another version of the template
        if len(fastest) == k:
            break
    return [cfg for cfg, n in fastest if n < times]


def confirm_best(task, log: str, k: int, rounds: int = 2, measure: MeasureOption | None = None):
    """Measure the ``k`` fastest configs of ``task`` in ``log`` again, appending every
    measurement to ``log`` (see the module docstring). Returns how many were made."""
    if k <= 0 or rounds <= 0:
        return 0
    records = load_records(log)
    made = 0
    with Measurer(measure or MeasureOption()) as m:
        for _ in range(4 * rounds):  # a bound: the set of the k fastest settles quickly
            todo = _to_confirm(task, records, k, 1 + rounds)
            if not todo:
                break
            results = m.measure(task, todo)
            new = [to_record(MeasureInput(task, c), r) for c, r in zip(todo, results)]
            append_records(log, new)
            records.extend(new)
            made += len(new)
    return made
