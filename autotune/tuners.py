"""Tuners: propose configs, learn from measurements; one shared ``tune`` loop.

Protocol: ``next_batch(n)`` returns unmeasured configs, ``update(inputs,
results)`` takes what was measured. ``tune`` measures batches until the
trial budget, the space or the patience (``early_stopping``) runs out.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

from .measure import EnvironmentFault, ErrorKind, MeasureOption, Measurer, MeasureResult
from .records import CONFIRM, Record, config_key, one_per_config, ranked_configs
from .space import Config, SpaceError
from .startup import begin_tuning


def own_records(task, records) -> list:
    """The records of ``task``: its workload in any spelling of its default arguments
    ((16,16,16) and (16,16,16,"float32") are one workload), on its target."""
    mine = is_own(task)
    return [r for r in records if mine(r)]


def fits(task, config: dict) -> bool:
    """Whether ``config`` is a point of ``task``'s space (a record another version of
    the template made may not be: ``apply_history_best`` passes over it)."""
    try:
        task.config_space.config(config)
    except SpaceError:
        return False
    return True


def ranked_own(task, records) -> list:
    """``task``'s configs as records, fastest first (``ranked_configs``), its records in
    every spelling of its workload pooled as one; only configs that fit its space."""
    key = (task.workload_key, task.target.key)
    same = [dataclasses.replace(r, workload=key[0]) for r in own_records(task, records)]
    return [r for r in ranked_configs(same).get(key, []) if fits(task, r.config)]


def is_own(task):
    """A predicate: is a record one of ``task``'s own (see ``own_records``)?"""
    keys = frozenset(task.template.spellings(task.args))
    return lambda r: r.workload in keys and r.target == task.target.key


@dataclass
class MeasureInput:
    task: object
    config: Config


def to_record(inp: MeasureInput, res: MeasureResult, tuner: str = "") -> Record:
    """The log line of one measurement (``tuner``: the search that proposed it)."""
    return Record(
        workload=inp.task.workload_key,
        target=inp.task.target.key,
        config=inp.config.to_json(),
        costs=list(res.costs),
        error=res.error.value if res.error is not None else None,
        error_msg=res.error_msg,
        flop=inp.task.flop if inp.task.flop == inp.task.flop else 0.0,
        build_s=res.build_s,
        run_s=res.run_s,
        ts=res.ts,
        tuner=tuner,
        threads=res.threads,
    )


class Tuner:
    """Base tuner: bookkeeping of visited configs and the best one so far."""

    name = ""  # a subclass's short name, as pypto-tune --tuner and the records call it

    model_based = False
    batch_size = 8

    def __init__(self, task, seed: int | None = None):
        self.task = task
        self.space = task.config_space
        self.rng = random.Random(seed)
        self.visited: set[int] = set()
        self.best_config: Config | None = None
        self.best_cost = math.inf
        self.best_trial = 0
        self.trials = 0
        self.history: list[tuple[Config, MeasureResult]] = []

    @property
    def best_gflops(self) -> float:
        flop = self.task.flop
        if not self.best_config or not flop or flop != flop:
            return 0.0
        return flop / self.best_cost / 1e9

    @property
    def best_flops(self) -> float:
        """AutoTVM's name: the best config's FLOP/s (0 before any valid measurement)."""
        return self.best_gflops * 1e9

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, n: int) -> list[Config]:
        raise NotImplementedError

    def update(self, inputs: list[MeasureInput], results: list[MeasureResult]) -> None:
        for inp, res in zip(inputs, results):
            self.visited.add(inp.config.index)
            self.history.append((inp.config, res))
            if res.ok:
                cost = res.cost
                if cost < self.best_cost:
                    self.best_cost, self.best_config = cost, inp.config
                    self.best_trial = len(self.history)

    def load_history(self, records) -> int:
        """Take earlier records of this task (same workload, in any spelling of its
        default arguments, and target) as measured:
        they count as visited and inform the search; a config measured more than once
        counts once, by the median of all its timings. Returns how many of them were
        trials: a config measured only as ``confirm_best``'s baseline informs the search
        but was never one of its trials."""
        inputs, results = [], []
        own = own_records(self.task, records)
        searched = {config_key(r.config) for r in own if r.tuner != CONFIRM}
        trials = 0
        for r in one_per_config(own):  # one per config, pooled
            try:
                cfg = self.space.config(r.config)
            except SpaceError:
                continue  # a record from another version of the template
            if cfg.index in self.visited:
                continue
            inputs.append(MeasureInput(self.task, cfg))
            trials += config_key(r.config) in searched
            err = (
                ErrorKind(r.error)
                if r.error in ErrorKind._value2member_map_
                else (None if r.error is None else ErrorKind.UNKNOWN)
            )
            results.append(
                MeasureResult(
                    costs=list(r.costs),
                    error=err,
                    error_msg=r.error_msg,
                    build_s=r.build_s,
                    run_s=r.run_s,
                    ts=r.ts,
                    threads=r.threads,
                )
            )
        if inputs:
            self.update(inputs, results)
        return trials

    def _random_unvisited(self, n: int, taken: set) -> list[Config]:
        """Up to ``n`` random unvisited configs whose indices are not in ``taken``
        (which records them)."""
        out = []
        room = len(self.space) - len(self.visited | taken)  # configs still to pick from
        while len(out) < min(n, room):
            c = self._unvisited_sample()
            if c is None:
                break
            if c.index not in taken:
                taken.add(c.index)
                out.append(c)
        return out

    def _unvisited_sample(self, tries: int = 64, exclude=frozenset()) -> Config | None:
        """A random config neither visited nor in ``exclude`` (this batch's), or None."""
        n = len(self.space)
        if len(self.visited) + sum(i not in self.visited for i in exclude) >= n:
            return None
        for _ in range(tries):
            i = self.rng.randrange(n)
            if i not in self.visited and i not in exclude:
                return self.space.get(i)
        for i in range(n):  # nearly exhausted: scan
            if i not in self.visited and i not in exclude:
                return self.space.get(i)
        return None

    def tune(
        self,
        n_trial: int,
        measure: MeasureOption | None = None,
        early_stopping: int | None = None,
        callbacks=(),
        measurer=None,
        measure_option: MeasureOption | None = None,
    ) -> Config | None:
        """Measure up to ``n_trial`` new configs; returns the best config found.

        ``EnvironmentFault`` stops the run (after logging what was measured before it):
        a broken compiler, cache or process pool is no candidate's fault.

        ``measurer``: an object with ``measure(task, configs)`` to use instead of a fresh
        ``Measurer(measure)`` (to share worker processes between tuning runs)."""
        if n_trial < 0:
            raise ValueError("n_trial must be non-negative")
        measure = begin_tuning(self, n_trial, measure, measure_option)  # TVM's name too
        done = 0
        for cb in callbacks:
            start = getattr(cb, "start", None)
            if start:
                start(self)
        own = measurer is None
        m = Measurer(measure or MeasureOption()) if own else measurer
        start = len(self.history)  # patience counts this run's trials (AutoTVM's)
        try:
            while done < n_trial and self.has_next():
                configs = self.next_batch(min(self.batch_size, n_trial - done))
                configs = [c for c in configs if c.index not in self.visited]
                if not configs:
                    break
                try:
                    results = m.measure(self.task, configs)
                except (EnvironmentFault, KeyboardInterrupt) as e:  # keep what was measured
                    finished = getattr(e, "done", None)
                    if finished:
                        self._took(configs[: len(finished)], finished, callbacks)
                    raise
                done += self._took(configs, results, callbacks)
                since_best = len(self.history) - max(self.best_trial, start)
                if early_stopping is not None and since_best >= early_stopping:
                    break
        finally:
            if own:
                m.close()
            for cb in callbacks:
                close = getattr(cb, "close", None)
                if close:
                    close()
        return self.best_config

    def _took(self, configs, results, callbacks) -> int:
        inputs = [MeasureInput(self.task, c) for c in configs]
        self.update(inputs, results)
        self.trials += len(configs)
        for cb in callbacks:
            cb(self, inputs, results)
        return len(configs)


class RandomTuner(Tuner):
    """Uniform samples without repetition."""

    name = "random"  # as pypto-tune --tuner and the records call it

    def next_batch(self, n):
        return self._random_unvisited(n, set())


class GridSearchTuner(Tuner):
    """Every config in index order."""

    name = "grid"  # as pypto-tune --tuner and the records call it

    def __init__(self, task, seed=None):
        super().__init__(task, seed)
        self.cursor = 0

    def next_batch(self, n):
        out = []
        while len(out) < n and self.cursor < len(self.space):
            if self.cursor not in self.visited:
                out.append(self.space.get(self.cursor))
            self.cursor += 1
        return out


class GATuner(Tuner):
    """A genetic algorithm: fitness-proportional parents, knob-wise crossover, mutation."""

    name = "ga"  # as pypto-tune --tuner and the records call it

    def __init__(self, task, seed=None, pop_size: int = 32, mutation_prob: float = 0.15):
        super().__init__(task, seed)
        self.pop_size = max(2, min(pop_size, len(self.space)))
        self.mutation_prob = mutation_prob
        self.queue: list[Config] = []
        self.scores: dict[int, float] = {}

    def update(self, inputs, results):
        super().update(inputs, results)
        for inp, res in zip(inputs, results):
            self.scores[inp.config.index] = 1.0 / res.cost if res.ok else 0.0

    def _offspring(self, picked=frozenset()) -> list[Config]:
        ranked = sorted(self.scores.items(), key=lambda kv: -kv[1])
        parents = [self.space.get(i) for i, _ in ranked[: self.pop_size]]
        weights = [max(s, 1e-12) for _, s in ranked[: self.pop_size]]
        out, tries = [], 0
        seen = set(self.visited) | set(picked)
        while len(out) < self.pop_size and tries < 20 * self.pop_size:
            tries += 1
            a, b = self.rng.choices(parents, weights=weights, k=2)
            vals = {
                k: (a.values[k] if self.rng.random() < 0.5 else b.values[k])
                for k in self.space.knobs
            }
            for name, knob in self.space.knobs.items():
                if self.rng.random() < self.mutation_prob:
                    vals[name] = self.rng.choice(knob.values)
            c = Config(self.space, vals)
            if c.index not in seen:
                seen.add(c.index)
                out.append(c)
        return out

    def next_batch(self, n):
        out, picked = [], set()
        while len(out) < n:
            if not self.queue:
                if len(self.scores) < self.pop_size or not any(self.scores.values()):
                    self.queue = []
                else:
                    self.queue = self._offspring(picked)
                if not self.queue:  # a random one nobody visited or picked, if any is left
                    c = self._unvisited_sample(exclude=picked)
                    if c is None:
                        break
                    self.queue = [c]
            c = self.queue.pop(0)
            if c.index not in self.visited and c.index not in picked:
                out.append(c)
                picked.add(c.index)
        return out
