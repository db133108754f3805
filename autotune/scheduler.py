"""The task scheduler: one tuning budget shared among workloads by expected gain (Ansor's).

    sched = TaskScheduler(tasks, weights, logs=["mm.jsonl", "conv.jsonl"], tuner="xgb")
    sched.tune(trials=600, minutes=10)      # whichever runs out first
    print(sched.table())

The objective is the weighted total latency ``sum_i w_i * latency_i`` (with
``normalize=True`` each latency is divided by the task's first valid one,
so a task counts by its relative improvement). Every task keeps one tuner
for the whole run; its first trial is the template's default config.
Warm-up: each task gets one round (a batch of ``trials_per_round`` trials,
fewer where the warm-up would take more than half of the budget); a task
whose log already holds trials of it (resume) has had its rounds. Then,
round after round, the task with the largest expected decrease of the
objective gets the next round::

    grad_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i)
    backward_i = (best_i(now) - best_i(W rounds ago)) / W           # recent improvement
    forward_i  = min(best_i - best_i / rounds_i,                     # optimistic: 1/t decay
                     beta * flop_i / best GFLOP/s of its template's tasks) - best_i

    pick argmin_i grad_i (the most negative), or, with probability epsilon, any live task

A task stops getting rounds when its space is exhausted, when it has no
valid config after ``fail_rounds`` rounds, or after ``early_stopping``
trials without improvement. A minute budget is checked between rounds and
the round is sized from the task's measured seconds per trial (a first
round measures them on its first trial) so it ends before the deadline,
keeping back the time ``confirm`` will need; a task whose round does not
fit what is left sits out while the others go on.

Measurement goes through one ``measurer`` (``measure(task, configs)``, the
tuners' protocol), by default a ``Measurer`` that builds in parallel and
runs one candidate at a time; a fake one makes the scheduler testable
without timing noise, and ``clock`` replaces the wall clock.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time
import warnings
from dataclasses import dataclass, field

from .callbacks import log_to_file
from .confirm import BusyMachineWarning, confirm_best
from .measure import MeasureOption, Measurer
from .records import load_records
from .scheduler_display import Progress, summary_table
from .tuners import (
    GATuner,
    GridSearchTuner,
    MeasureInput,
    RandomTuner,
    Tuner,
    own_records,
    ranked_own,
)
from .xgb_tuner import XGBTuner

TUNERS = {cls.name: cls for cls in (XGBTuner, GATuner, RandomTuner, GridSearchTuner)}
DEFAULT_SECONDS_PER_TRIAL = 2.0  # a guess for a task not measured yet in this run
PROCESS_START_S = 4.0  # a confirmation's own measurement processes starting


@dataclass
class TaskState:
    """The scheduler's bookkeeping for one task (read it through ``summary``)."""

    task: object
    weight: float
    label: str
    log: str | None
    tuner: Tuner
    resumed: int = 0  # trials found in the log
    new: int = 0  # trials measured in this run
    rounds: int = 0
    curve: list = field(default_factory=list)  # best latency after each round
    seconds: float = 0.0  # wall time of this run's rounds
    scale: float | None = None  # the first valid latency (for normalize)
    last_spt: float | None = None  # seconds per trial of its latest chunk
    dead: str = ""  # why it gets no more rounds
    confirmed: float | None = None  # the best latency after confirmation

    @property
    def best(self) -> float:
        return self.confirmed if self.confirmed is not None else self.tuner.best_cost

    @property
    def seconds_per_trial(self) -> float | None:
        return self.seconds / self.new if self.new else None


class _PerTaskOption:
    """One ``Measurer`` (its processes shared by every task), with a task's own
    ``MeasureOption`` (``option_for(task)``: a longer timeout for a slow kernel)."""

    def __init__(self, base: MeasureOption, option_for):
        self.option_for = option_for
        self.m = Measurer(base)

    def measure(self, task, configs):
        self.m.option = self.option_for(task)
        return self.m.measure(task, configs)

    def close(self):
        self.m.close()


def _flop(st) -> float:
    return st.task.flop if st.task.flop == st.task.flop else math.inf


def _curve_from_records(records, per_round: int) -> list:
    """Best latency after each round of earlier trials (records in time order)."""
    curve, best = [], math.inf
    recs = sorted(records, key=lambda r: r.ts)
    for k, r in enumerate(recs, 1):
        best = min(best, r.cost)
        if k % per_round == 0 or k == len(recs):
            curve.append(best)
    return curve


class TaskScheduler:
    """Share a budget of trials and/or minutes among tasks by expected gain.

    ``tasks``: ``at.Task`` objects; ``weights``: how much each one's latency counts
    (default 1); ``logs``: a log path per task, one path for all, or None (no log,
    no resume); ``tuner``: a name in ``TUNERS`` or ``f(task) -> Tuner``;
    ``measure_overrides``: workload key -> ``(field, value)`` pairs of
    ``MeasureOption`` for that task (with the built-in measurer only).
    """

    def __init__(
        self,
        tasks,
        weights=None,
        logs=None,
        *,
        tuner="xgb",
        labels=None,
        measure_option: MeasureOption | None = None,
        measure_overrides: dict | None = None,
        measurer=None,
        trials_per_round: int = 16,
        alpha: float = 0.2,
        beta: float = 2.0,
        backward_window: int = 3,
        epsilon: float = 0.05,
        normalize: bool = False,
        early_stopping: int | None = None,
        fail_rounds: int = 2,
        measure_default: bool = True,
        resume: bool = True,
        seed: int | None = 0,
        clock=time.monotonic,
        progress: bool = False,
    ):
        tasks = list(tasks)
        if not tasks:
            raise ValueError("the task scheduler needs at least one task")
        weights = [1.0] * len(tasks) if weights is None else [float(w) for w in weights]
        if len(weights) != len(tasks) or any(not (w > 0 and math.isfinite(w)) for w in weights):
            raise ValueError(f"need one positive weight per task, got {weights}")
        if logs is None or isinstance(logs, str):
            logs = [logs] * len(tasks)
        if len(logs) != len(tasks):
            raise ValueError(f"need one log per task ({len(tasks)}), got {len(logs)}")
        if trials_per_round < 1:
            raise ValueError(f"trials_per_round must be positive, got {trials_per_round}")
        if isinstance(tuner, str):
            if tuner not in TUNERS:
                raise ValueError(f"unknown tuner {tuner!r}; choose one of {', '.join(TUNERS)}")
            cls = TUNERS[tuner]
            tuner = lambda t, k: cls(t, seed=None if seed is None else seed + k)  # noqa: E731
        else:
            make = tuner
            tuner = lambda t, k: make(t)  # noqa: E731
        labels = labels or [f"{t.name} {','.join(map(str, t.args))}" for t in tasks]
        self.states = [
            TaskState(t, w, lb, lg, tuner(t, k))
            for k, (t, w, lb, lg) in enumerate(zip(tasks, weights, labels, logs))
        ]
        self.option = measure_option or MeasureOption()
        self.overrides = dict(measure_overrides or {})
        self.measurer = measurer
        self.per_round = trials_per_round
        self.alpha, self.beta, self.window, self.epsilon = alpha, beta, backward_window, epsilon
        self.normalize, self.early_stopping = normalize, early_stopping
        self.fail_rounds = fail_rounds
        self.measure_default = measure_default
        self.rng = random.Random(seed)
        self.clock = clock
        self.deadline = None  # of the last ``tune`` with a minute budget (a clock value)
        self.rounds_log: list = []  # (task label, trials, seconds) of each round run
        self._limit = None  # under a minute budget: when the current round must end
        self.chunk = max(2, self.option.n_parallel or os.cpu_count() or 1)
        self.progress = progress
        self.warnings: list[str] = []  # e.g. corrupt log lines met while resuming
        if resume:
            self._resume()

    def option_for(self, task) -> MeasureOption:
        """How ``task`` is measured: the scheduler's option with the task's overrides."""
        return dataclasses.replace(self.option, **dict(self.overrides.get(task.workload_key, ())))

    # ---- resume

    def _resume(self):
        cache: dict = {}
        for st in self.states:
            if not st.log:
                continue
            if st.log not in cache:
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        cache[st.log] = load_records(st.log)
                    self.warnings += [str(w.message) for w in caught]
                except FileNotFoundError:
                    cache[st.log] = []
            recs = cache[st.log]
            st.resumed = st.tuner.load_history(recs)
            if st.resumed:
                st.curve = _curve_from_records(own_records(st.task, recs), self.per_round)
                st.curve[-1] = st.tuner.best_cost
                st.rounds = len(st.curve)
                st.scale = next((c for c in st.curve if math.isfinite(c)), None)
                self._check_alive(st)

    # ---- the budget

    @property
    def trials(self) -> int:
        """Trials of these tasks, those found in the logs included."""
        return sum(st.resumed + st.new for st in self.states)

    def _spt(self, st) -> float:
        """Seconds per trial of ``st``: measured, else (a guess, to be probed) the
        cheapest task's, so a task not measured yet gets its first trial if any fits."""
        known = [s.seconds_per_trial for s in self.states if s.seconds_per_trial]
        return st.seconds_per_trial or (min(known) if known else DEFAULT_SECONDS_PER_TRIAL)

    def _confirm_seconds(self, st, k: int, rounds: int = 2) -> float:
        """Seconds ``confirm`` may take for ``st`` at most: ``confirm_best`` measures up
        to ``4 * rounds`` times the ``k`` fastest (configs that climb into them are
        measured with them) and ``rounds`` times the default config, at the pace of the
        slowest of them now, plus the reference computed once and the measurement
        processes started."""
        fastest = sorted((r for _, r in st.tuner.history if r.ok), key=lambda r: r.cost)[:k]
        runs = [r.run_s for r in fastest if r.run_s > 0]
        each = max(runs) if runs else self._spt(st)
        return (4 * rounds * k + rounds + 1) * each + PROCESS_START_S

    def _confirm_reserve(self, k: int) -> float:
        if k <= 0:
            return 0.0
        return sum(self._confirm_seconds(st, k) for st in self.states if not st.dead)

    def _round_size(self, st, trials, deadline, reserve, warm_up_of: int = 0) -> int:
        """Trials of ``st``'s next round: what is left of the budget allows, and for a
        first round (one of ``warm_up_of`` still to come) at most a share of half of it,
        so a small budget is not spent on the warm-up alone."""
        n = self.per_round
        left_trials = None if trials is None else trials - self.trials
        left_s = None if deadline is None else deadline - self.clock() - reserve
        spt = self._spt(st)
        if warm_up_of and left_trials is not None:
            n = min(n, max(1, left_trials // (2 * warm_up_of)))
        if warm_up_of and left_s is not None:
            n = min(n, max(1, math.floor(left_s / (2 * warm_up_of) / spt)))
        if left_trials is not None:
            n = min(n, left_trials)
        if left_s is not None:
            n = min(n, math.floor(left_s / spt))
        return max(0, n)

    # ---- choosing

    def _check_alive(self, st):
        t = st.tuner
        if not t.has_next():
            st.dead = "space exhausted"
        elif not math.isfinite(t.best_cost) and st.rounds >= self.fail_rounds:
            st.dead = f"no valid config in {len(t.history)} trials"
        elif (
            self.early_stopping is not None
            and math.isfinite(t.best_cost)
            and len(t.history) - t.best_trial >= self.early_stopping
        ):
            st.dead = f"no improvement in {self.early_stopping} trials"

    def gradient(self, st) -> float:
        """Expected change of the objective per round given to ``st`` (negative: a gain)."""
        best = st.tuner.best_cost
        if not math.isfinite(best):
            return -math.inf  # nothing valid yet: its latency is the unknown that matters
        chain = st.weight / (st.scale if self.normalize and st.scale else 1.0)
        c = st.curve
        w = self.window
        backward = (c[-1] - c[-1 - w]) / w if len(c) > w and math.isfinite(c[-1 - w]) else 0.0
        g_next = best - best / max(1, st.rounds)
        group = [
            s
            for s in self.states
            if s.task.name == st.task.name
            and math.isfinite(s.tuner.best_cost)
            and s.task.flop == s.task.flop
            and s.task.flop > 0
        ]
        if len(group) > 1 and st in group:
            rate = max(s.task.flop / s.tuner.best_cost for s in group)
            g_next = min(g_next, self.beta * st.task.flop / rate)
        forward = g_next - best
        return chain * (self.alpha * backward + (1 - self.alpha) * forward)

    def _pick(self, alive):
        if self.rng.random() < self.epsilon:
            return self.rng.choice(alive)
        grads = [self.gradient(st) for st in alive]
        if max(grads) == min(grads):
            return self.rng.choice(alive)
        return alive[grads.index(min(grads))]

    # ---- running

    def _run(self, st, n, measurer, callbacks) -> int:
        """Up to ``n`` trials of ``st``'s tuner; returns how many were measured. Under a
        minute budget they run in chunks (one build per core), and the round ends early
        when the next chunk, at the pace of the last one, would pass the time limit: a
        kernel's time varies with its config, so a round's first estimate can be off."""
        done = 0
        while done < n:
            k = n - done if self._limit is None else min(n - done, self.chunk)
            pace = max(st.last_spt or 0.0, self._spt(st))
            if done and self._limit is not None and self.clock() + k * pace > self._limit:
                break
            before, t0 = len(st.tuner.history), self.clock()
            st.tuner.tune(k, measurer=measurer, callbacks=callbacks)
            got, dt = len(st.tuner.history) - before, self.clock() - t0
            st.seconds += dt
            st.new += got
            done += got
            if got:
                st.last_spt = dt / got
            if got < k:  # the tuner has nothing more to propose
                break
        return done

    def _measure_default(self, st, measurer, callbacks):
        """The template's default config first: a hand-made schedule is a baseline the
        search must beat, and the records then never rank below it."""
        t0 = self.clock()
        cfg = st.task.config_space.default_config()
        inputs = [MeasureInput(st.task, cfg)]
        results = measurer.measure(st.task, [cfg])
        st.tuner.update(inputs, results)
        st.tuner.trials += 1
        for cb in callbacks:
            cb(st.tuner, inputs, results)
        st.seconds += self.clock() - t0
        st.new += 1

    def _round(self, st, n, measurer, bar, resize=None):
        """One round of ``n`` trials. ``resize(st)``: for a task whose seconds per trial
        are not known yet, the trials that fit once its first trial has measured them."""
        callbacks = [log_to_file(st.log)] if st.log else []
        if bar is not None:
            callbacks.append(lambda tuner, inputs, results: bar.update(self, len(inputs)))
        done, t0 = 0, self.clock()
        if self.measure_default and not st.tuner.history:
            self._measure_default(st, measurer, callbacks)
            done += 1
        if resize is not None and n > 1:
            if not done:
                done += self._run(st, 1, measurer, callbacks)
            n = min(n, done + resize(st))
        done += self._run(st, n - done, measurer, callbacks)
        self.rounds_log.append((st.label, done, self.clock() - t0))
        st.rounds += 1
        st.curve.append(st.tuner.best_cost)
        if st.scale is None and math.isfinite(st.tuner.best_cost):
            st.scale = st.tuner.best_cost
        if done == 0:
            st.dead = "space exhausted"
        self._check_alive(st)

    def tune(
        self, trials: int | None = None, minutes: float | None = None, confirm_k: int = 0
    ) -> list[TaskState]:
        """Tune until ``trials`` (in all, the logs' included) or ``minutes`` (of this
        call) run out, whichever is first; with ``confirm_k``, keep back the time to
        re-measure each task's ``confirm_k`` fastest configs (``confirm``), at most a
        fifth of the budget. A task whose next round does not fit what is left sits
        out; the others go on."""
        if trials is None and minutes is None:
            raise ValueError("give the scheduler a budget: trials, minutes or both")
        if trials is not None and trials < 1:
            raise ValueError(f"trials must be positive, got {trials}")
        if minutes is not None and not 0 < minutes <= 1e6:  # more would overflow the clocks
            raise ValueError(f"minutes must be positive and at most 1e6, got {minutes}")
        start = self.clock()
        self.deadline = None if minutes is None else start + 60.0 * minutes
        own = self.measurer is None
        m = _PerTaskOption(self.option, self.option_for) if own else self.measurer
        bar = Progress(self, trials, minutes, start) if self.progress else None
        sitting_out: set = set()  # tasks whose next round does not fit the time left
        try:
            while trials is None or self.trials < trials:
                alive = [st for st in self.states if not st.dead and id(st) not in sitting_out]
                if not alive:
                    break
                cold = [st for st in alive if st.rounds == 0]
                # the warm-up goes cheapest first: a small budget warms up the most tasks
                st = min(cold, key=_flop) if cold else self._pick(alive)
                reserve = 0.0
                if minutes is not None:
                    reserve = min(self._confirm_reserve(confirm_k), 12.0 * minutes)
                args = (trials, self.deadline, reserve, len(cold) if st.rounds == 0 else 0)
                n = self._round_size(st, *args)
                self._limit = None if self.deadline is None else self.deadline - reserve
                if n <= 0:
                    sitting_out.add(id(st))
                    continue
                probe = minutes is not None and st.seconds_per_trial is None
                resize = (lambda st, args=args: self._round_size(st, *args)) if probe else None
                self._round(st, n, m, bar, resize)
        finally:
            self._limit = None
            if own:
                m.close()
            if bar is not None:
                bar.close()
        return self.states

    def confirm(self, k: int, rounds: int = 2, confirm_fn=confirm_best, deadline=None) -> int:
        """Re-measure the ``k`` fastest configs of every task with a log, side by side
        (``at.confirm_best``); afterwards each task's best is its confirmed median. With
        a ``deadline`` (a ``clock`` value), a task whose confirmation might not end
        before it is left as it is. Returns how many measurements were made."""
        made = 0
        # the cheapest first: where time is short, most tasks are confirmed
        for st in sorted(self.states, key=lambda st: self._confirm_seconds(st, k, rounds)):
            if k <= 0 or not st.log or not math.isfinite(st.tuner.best_cost):
                continue
            if (
                deadline is not None
                and self.clock() + self._confirm_seconds(st, k, rounds) > deadline
            ):
                st.dead = (st.dead + "; " if st.dead else "") + "not confirmed: out of time"
                continue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", BusyMachineWarning)
                made += confirm_fn(
                    st.task, st.log, k, rounds=rounds, measure=self.option_for(st.task)
                )
            for w in caught:
                if isinstance(w.message, BusyMachineWarning):
                    busy = f"not confirmed: busy machine ({w.message.slowdown:.1f}x slower)"
                    st.dead = (st.dead + "; " if st.dead else "") + busy
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            best = next(iter(ranked_own(st.task, load_records(st.log))), None)
            st.confirmed = best.cost if best is not None else math.inf
        return made

    # ---- reporting

    def summary(self) -> list[dict]:
        """Per task: label, trials (in all / this run), rounds, best seconds, GFLOP/s,
        weight, weighted seconds, and why it stopped early (if it did)."""
        rows = []
        for st in self.states:
            best = st.best
            ok = math.isfinite(best)
            flop = st.task.flop if st.task.flop == st.task.flop else 0.0
            rows.append(
                {
                    "label": st.label,
                    "workload": st.task.workload_key,
                    "trials": st.resumed + st.new,
                    "new": st.new,
                    "rounds": st.rounds,
                    "best_s": best if ok else None,
                    "gflops": flop / best / 1e9 if ok and flop else None,
                    "weight": st.weight,
                    "weighted_s": st.weight * best if ok else None,
                    "note": st.dead,
                }
            )
        return rows

    def table(self) -> str:
        """The summary as a text table, with the weighted total."""
        return summary_table(self.summary(), self.trials)
