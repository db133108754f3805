"""The task scheduler: budget shared by expected gain, resume, minute budgets, dead tasks.

The measuring side is a fake (deterministic costs, a simulated clock), so these
tests check the scheduling itself with no timing noise and no compiler.
"""

import json
import os
import subprocess
import sys
import warnings

import pytest

import autotune as at
import pypto as pt
from autotune.cli import main as cli_main
from autotune.confirm import BusyMachineWarning
from autotune.measure import ErrorKind, MeasureResult
from autotune.scheduler import TaskScheduler
from autotune.workloads import (
    STANDARD,
    Workload,
    WorkloadError,
    load_workloads,
    merge_duplicates,
    parse_workloads,
    standard_workloads,
)
from pypto.target import KNOWN, can_run


@at.template("sched_toy")
def sched_toy(cfg, n, knob_values=40):
    """A one-stage kernel with a knob_values^2 space (the fake measurer gives the costs)."""
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n,), lambda i: A[i] + A[i], name="B")
    s = pt.create_schedule(B.op)
    cfg.define_knob("a", list(range(knob_values)), default=0)
    cfg.define_knob("b", list(range(knob_values)), default=0)
    return s, [A, B]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeMeasurer:
    """Cost of a config: the workload's base seconds times a fixed factor in [1, 6)
    of its knob values; ``seconds_per_trial`` advances the fake clock."""

    def __init__(self, base: dict, clock=None, seconds_per_trial=0.0, failing=()):
        self.base, self.clock, self.spt, self.failing = base, clock, seconds_per_trial, failing
        self.measured: dict = {}  # workload key -> configs measured

    def measure(self, task, configs):
        out = []
        for c in configs:
            self.measured.setdefault(task.workload_key, []).append(c.index)
            if self.clock is not None:  # seconds per trial: a figure, per workload, or f(c)
                if callable(self.spt):
                    self.clock.now += self.spt(c)
                elif isinstance(self.spt, dict):
                    self.clock.now += self.spt[task.workload_key]
                else:
                    self.clock.now += self.spt
            if task.workload_key in self.failing:
                out.append(MeasureResult(error=ErrorKind.COMPILE, error_msg="fake failure"))
                continue
            a, b = c["a"].val, c["b"].val
            factor = 1.0 + ((a * 7 + b * 13 + 20) % 50) / 10.0  # the default (0, 0): 3.0
            out.append(MeasureResult(costs=[self.base[task.workload_key] * factor]))
        return out


def _tasks(*sizes, knob_values=40):
    return [at.Task("sched_toy", (n, knob_values)) for n in sizes]


def test_the_dominant_workload_gets_most_trials():
    # the same GFLOP/s for all three (the scheduler compares tasks of one template by it)
    tasks = _tasks(6400, 64, 65)
    base = {tasks[0].workload_key: 0.1, tasks[1].workload_key: 1e-3, tasks[2].workload_key: 1e-3}
    fake = FakeMeasurer(base)
    sched = TaskScheduler(tasks, tuner="random", measurer=fake, trials_per_round=8, seed=1)
    sched.tune(trials=240)
    got = {t.workload_key: len(fake.measured.get(t.workload_key, [])) for t in tasks}
    assert sum(got.values()) == sched.trials == 240
    assert got[tasks[0].workload_key] >= 0.75 * 240, got  # it dominates the weighted latency
    assert all(got[t.workload_key] >= 8 for t in tasks[1:]), got  # warm-up: everyone a round
    # the weight, not the latency alone, decides: the same set with the small ones weighted
    # 1000x turns the order around
    fake = FakeMeasurer(base)
    sched = TaskScheduler(
        tasks, [1, 1000, 1000], tuner="random", measurer=fake, trials_per_round=8, seed=1
    )
    sched.tune(trials=240)
    assert len(fake.measured[tasks[0].workload_key]) <= 0.25 * 240


def test_resume_counts_the_trials_in_the_log(tmp_path):
    log = str(tmp_path / "toy.jsonl")
    tasks = _tasks(64, 128)
    base = {t.workload_key: 1e-3 for t in tasks}
    first = TaskScheduler(tasks, logs=log, tuner="random", measurer=FakeMeasurer(base), seed=0,
                          trials_per_round=8)  # fmt: skip
    first.tune(trials=40)
    recs = at.load_records(log)
    assert len(recs) == 40
    fake = FakeMeasurer(base)
    again = TaskScheduler(tasks, logs=log, tuner="random", measurer=fake, seed=5,
                          trials_per_round=8)  # fmt: skip
    assert again.trials == 40  # the log's trials are counted before anything runs
    assert all(st.rounds > 0 for st in again.states)  # no warm-up again
    assert [st.tuner.best_cost for st in again.states] == [
        st.tuner.best_cost for st in first.states
    ]
    again.tune(trials=56)
    assert sum(len(v) for v in fake.measured.values()) == 16  # only the rest
    recs = at.load_records(log)
    assert len(recs) == 56
    seen = {(r.workload, json.dumps(r.config, sort_keys=True)) for r in recs}
    assert len(seen) == 56  # nothing measured twice
    rows = {r["workload"]: r for r in again.summary()}
    assert sum(r["trials"] for r in rows.values()) == 56
    assert sum(r["new"] for r in rows.values()) == 16
    # without resume, nothing is read
    assert TaskScheduler(tasks, logs=log, tuner="random", resume=False).trials == 0


def test_minute_budget_sized_so_it_cannot_overrun():
    clock = FakeClock()
    tasks = _tasks(64, 128)
    fake = FakeMeasurer({t.workload_key: 1e-3 for t in tasks}, clock=clock, seconds_per_trial=3.0)
    sched = TaskScheduler(tasks, tuner="random", measurer=fake, clock=clock, trials_per_round=16)
    sched.tune(minutes=2)  # 120 s at 3 s per trial: 40 trials
    assert clock.now <= 120.0 + 3.0  # the first round, before any estimate, may overrun one
    assert sched.trials >= 36
    # both limits: the trial budget ends first
    clock2 = FakeClock()
    fake2 = FakeMeasurer({t.workload_key: 1e-3 for t in tasks}, clock=clock2, seconds_per_trial=1)
    sched2 = TaskScheduler(tasks, tuner="random", measurer=fake2, clock=clock2)
    sched2.tune(trials=20, minutes=60)
    assert sched2.trials == 20 and clock2.now == 20.0


def test_exhausted_and_failing_tasks_stop_getting_rounds():
    small, broken, big = _tasks(64, knob_values=3)[0], _tasks(96)[0], _tasks(128)[0]
    base = {t.workload_key: 1e-3 for t in (small, broken, big)}
    fake = FakeMeasurer(base, failing={broken.workload_key})
    sched = TaskScheduler([small, broken, big], tuner="random", measurer=fake,
                          trials_per_round=8, seed=2)  # fmt: skip
    sched.tune(trials=120)
    notes = {r["workload"]: r for r in sched.summary()}
    assert notes[small.workload_key]["trials"] == 9  # its whole space, once each
    assert notes[small.workload_key]["note"] == "space exhausted"
    assert notes[broken.workload_key]["note"] == "no valid config in 16 trials"
    assert notes[broken.workload_key]["best_s"] is None
    assert notes[big.workload_key]["trials"] == 120 - 9 - 16
    text = sched.table()
    assert "space exhausted" in text and "(+ untuned)" in text
    assert text.splitlines()[-1].split()[:3] == ["total", "120", "120"]


def test_early_stopping_ends_a_task():
    task = _tasks(64)[0]
    fake = FakeMeasurer({task.workload_key: 1e-3})
    sched = TaskScheduler([task], tuner="grid", measurer=fake, early_stopping=20,
                          trials_per_round=4)  # fmt: skip
    sched.tune(trials=1000)
    st = sched.states[0]
    assert st.dead == "no improvement in 20 trials"
    assert len(st.tuner.history) - st.tuner.best_trial >= 20
    assert sched.trials < 1000


def test_confirm_reports_the_confirmed_best(tmp_path):
    log = str(tmp_path / "c.jsonl")
    tasks = _tasks(64, 128)
    sched = TaskScheduler(tasks, logs=log, tuner="random",
                          measurer=FakeMeasurer({t.workload_key: 1e-3 for t in tasks}))  # fmt: skip
    sched.tune(trials=32)
    calls = []

    def fake_confirm(task, path, k, rounds, measure):
        calls.append((task.workload_key, path, k, rounds))
        best = at.best_by_workload(at.load_records(path))[(task.workload_key, task.target.key)]
        slower = at.Record(best.workload, best.target, best.config, costs=[best.cost * 3] * 2)
        at.append_records(path, [slower])  # the "lucky" best holds up worse when re-measured
        return 1

    assert sched.confirm(2, confirm_fn=fake_confirm) == 2
    assert sorted(c[0] for c in calls) == sorted(t.workload_key for t in tasks)
    for st in sched.states:
        assert st.confirmed is not None and st.confirmed >= st.tuner.best_cost


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"weights": [1]}, r"one positive weight per task"),
        ({"weights": [1, -2]}, r"one positive weight per task"),
        ({"tuner": "magic"}, r"unknown tuner 'magic'"),
        ({"logs": ["a", "b", "c"]}, r"one log per task \(2\), got 3"),
        ({"trials_per_round": 0}, r"trials_per_round must be positive"),
    ],
)
def test_bad_scheduler_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TaskScheduler(_tasks(64, 128), **kwargs)


def test_a_budget_is_required():
    sched = TaskScheduler(_tasks(64), tuner="random", measurer=FakeMeasurer({}))
    with pytest.raises(ValueError, match="give the scheduler a budget"):
        sched.tune()
    with pytest.raises(ValueError, match="minutes must be positive"):
        sched.tune(minutes=0)
    with pytest.raises(ValueError, match="at most 1e6"):  # was: OverflowError at 1e308
        sched.tune(minutes=1e308)


# ---------------------------------------------------------------- workloads


def test_standard_workloads_cover_every_builtin_template():
    builtin = {n for n in at.list_templates() if at.get_template(n).module.startswith("autotune.")}
    assert {w.template for w in STANDARD} == builtin
    for w in STANDARD:
        at.get_template(w.template).space(*w.task_args)  # the arguments fit the template
    assert [w.label for w in standard_workloads(["softmax", "conv2d_nchw"])] == [
        "conv2d 64->64 56x56 s1",
        "conv2d 64->128 56x56 s2",
        "softmax 4096x4096",
    ]
    with pytest.raises(WorkloadError, match=r"no standard workloads for 'nosuch'; templates"):
        standard_workloads(["nosuch"])


def test_workload_files(tmp_path):
    p = tmp_path / "w.json"
    p.write_text(json.dumps([{"template": "matmul", "args": [64, 64, 64], "dtype": "int8",
                              "weight": 3}, {"template": "softmax", "args": [8, 8]}]))  # fmt: skip
    ws = load_workloads(str(p))
    assert ws == [
        Workload("matmul", (64, 64, 64), weight=3.0, dtype="int8"),
        Workload("softmax", (8, 8)),
    ]
    assert ws[0].task_args == (64, 64, 64, "int8") and ws[0].label == "matmul 64^3 int8"
    # the dtype goes to the template's dtype parameter, past conv2d's stride and padding
    conv = parse_workloads([{"template": "conv2d_nchw", "args": [1, 8, 8, 8, 8, 3, 3],
                             "dtype": "int8"}])[0]  # fmt: skip
    assert conv.task_args == (1, 8, 8, 8, 8, 3, 3, 1, 0, "int8")
    bad = [
        ({"template": "matmul"}, r"workload 0 \(matmul\): 'args' must be a list of numbers"),
        ({"template": "matmul", "args": [1], "weight": 0}, r"'weight' must be a positive"),
        ({"template": "matmul", "args": [1], "wieght": 2}, r"unknown field\(s\) \['wieght'\]"),
        ({"args": [1]}, r"workload 0: 'template' must be a template name"),
        (
            {"template": "matmul", "args": [8, 8, 8, "int8"], "dtype": "float16"},
            r"workload 0 \(matmul\): 'dtype' 'float16': 'args' already gives dtype \('int8'\)",
        ),
        (
            {"template": "softmax", "args": [8, 8], "dtype": "int8"},
            r"'dtype' 'int8': template 'softmax' takes no dtype",
        ),
    ]
    for entry, message in bad:
        with pytest.raises(WorkloadError, match=message):
            parse_workloads([entry])
    with pytest.raises(WorkloadError, match="non-empty JSON list"):
        parse_workloads({"template": "matmul"})
    dup = parse_workloads([{"template": "softmax", "args": [8, 8], "weight": 2},
                           {"template": "matmul", "args": [4, 4, 4]},
                           {"template": "softmax", "args": [8, 8], "weight": 3}])  # fmt: skip
    assert merge_duplicates(dup) == [Workload("softmax", (8, 8), weight=5.0),
                                     Workload("matmul", (4, 4, 4))]  # fmt: skip
    p.write_text("[{")
    with pytest.raises(WorkloadError, match=r"w\.json: not valid JSON"):
        load_workloads(str(p))
    with pytest.raises(WorkloadError, match="cannot read workloads from"):
        load_workloads(str(tmp_path / "missing.json"))


def test_gradient_is_ansors():
    """weight x (alpha x backward + (1 - alpha) x forward), forward the optimistic 1/t
    decay capped by the best GFLOP/s among the template's tasks."""
    tasks = _tasks(64, 128)
    fake = FakeMeasurer({tasks[0].workload_key: 1e-3, tasks[1].workload_key: 3e-3})
    sched = TaskScheduler(tasks, [1, 10], tuner="random", measurer=fake, trials_per_round=4)
    sched.tune(trials=48)
    rate = max(st.task.flop / st.tuner.best_cost for st in sched.states)
    for st in sched.states:
        best, c = st.tuner.best_cost, st.curve
        backward = (c[-1] - c[-4]) / 3 if len(c) > 3 else 0.0
        forward = min(best - best / st.rounds, 2.0 * st.task.flop / rate) - best
        want = st.weight * (0.2 * backward + 0.8 * forward)
        assert sched.gradient(st) == pytest.approx(want) and want < 0
    assert sum(st.rounds for st in sched.states) == 12


# ---------------------------------------------------------------- pypto-tune all

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tune_all(args, home, timeout=300):
    env = dict(os.environ, PYPTO_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "autotune", "all", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_tune_all_end_to_end_and_resume(tmp_path):
    wl = tmp_path / "tiny.json"
    wl.write_text(json.dumps([{"template": "matmul", "args": [32, 32, 32]},
                              {"template": "softmax", "args": [16, 64], "weight": 2}]))  # fmt: skip
    args = ["--workloads", str(wl), "--tuner", "random", "--round", "3", "--number", "1",
            "--repeat", "1", "--confirm", "0", "--no-progress"]  # fmt: skip
    r = _tune_all([*args, "--trials", "6"], tmp_path / "home")
    assert r.returncode == 0, r.stderr
    logs = tmp_path / "home" / "logs"
    recs = {t: at.load_records(str(logs / f"{t}.jsonl")) for t in ("matmul", "softmax")}
    n = {t: len(v) for t, v in recs.items()}
    assert sum(n.values()) == 6 and min(n.values()) >= 1, n  # warm-up: a round each
    host = pt.Target("host").name
    assert all(r.target == host and r.ok for v in recs.values() for r in v)
    assert f"tuning 2 workload(s) for {host} within 6 trials (0 trial(s) already" in r.stdout
    table = r.stdout.splitlines()[-3:]
    assert table[0].split()[:4] == ["matmul", "32^3", str(n["matmul"]), str(n["matmul"])]
    assert table[1].split()[:4] == ["softmax", "16x64", str(n["softmax"]), str(n["softmax"])]
    assert table[2].split()[:3] == ["total", "6", "6"]
    # again with a larger budget: the logs' trials count, only the rest is measured
    r = _tune_all([*args, "--trials", "9"], tmp_path / "home")
    assert r.returncode == 0, r.stderr
    assert "(6 trial(s) already in the logs)" in r.stdout
    assert "3 new trial(s)" in r.stdout
    assert sum(len(at.load_records(str(logs / f"{t}.jsonl"))) for t in recs) == 9


def _unrunnable_target():
    for name in KNOWN:
        if not can_run(pt.Target(name)):
            return name
    pytest.skip("this machine runs every known target")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--trials", "5", "--target", "UNRUNNABLE"], "this machine cannot run code for"),
        (["--only", "matmul"], "give a budget: --minutes M and/or --trials N"),
        (["--trials", "5", "--only", "nosuch"], "no standard workloads for 'nosuch'"),
        (["--trials", "5", "--target", "riscv"], "unknown target 'riscv'"),
        (["--minutes", "0"], "--minutes must be positive"),
        (["--minutes", "1e308"], "--minutes must be at most 1e+06"),
        (["--trials", "5", "--timeout", "1e308"], "--timeout must be at most 1e+06"),
        (["--trials", "5", "--tuner", "magic"], "argument --tuner: invalid choice"),
        (["--trials", "5", "--workloads", "/nonexistent.json"], "cannot read workloads from"),
        (["--trials", "5", "--log", "a.jsonl", "--log-dir", "d"], "not allowed with argument"),
        (["--trials", "5", "--workloads", "{empty}"],
         "workload matmul 0x1x1: an empty workload (input A has shape (0, 1))"),
    ],
)  # fmt: skip
def test_tune_all_refuses_before_measuring(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path))
    empty = tmp_path / "empty.json"
    empty.write_text('[{"template": "matmul", "args": [0, 1, 1]}]')
    argv = [str(empty) if a == "{empty}" else a for a in argv]
    argv = [_unrunnable_target() if a == "UNRUNNABLE" else a for a in argv]
    assert cli_main(["all", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pypto-tune: error:") and message in err, err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "logs").exists()  # nothing was measured


def test_tune_all_refuses_workloads_that_do_not_fit(tmp_path, capsys):
    wl = tmp_path / "bad.json"
    wl.write_text(json.dumps([{"template": "matmul", "args": [32, 32]}]))
    assert cli_main(["all", "--trials", "2", "--workloads", str(wl), "--log-dir",
                     str(tmp_path)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "workload matmul 32x32: arguments do not fit 'matmul'" in err


def test_a_small_budget_still_warms_every_task_up():
    for budget in ({"trials": 20}, {"minutes": 1.0}):
        clock = FakeClock()
        tasks = _tasks(64, 96, 128, 160)
        fake = FakeMeasurer({t.workload_key: 1e-3 for t in tasks}, clock, seconds_per_trial=3.0)
        sched = TaskScheduler(tasks, tuner="random", measurer=fake, clock=clock, epsilon=0.0)
        sched.tune(**budget)
        got = [len(fake.measured.get(t.workload_key, [])) for t in tasks]
        assert min(got) >= 1 and sum(got) <= 21, (budget, got)  # 20, or 60 s at 3 s each
        assert all(st.rounds >= 1 for st in sched.states)


def test_the_default_config_is_every_fresh_task_s_first_trial(tmp_path):
    log = str(tmp_path / "d.jsonl")
    tasks = _tasks(64, 128)
    fake = FakeMeasurer({t.workload_key: 1e-3 for t in tasks})
    TaskScheduler(tasks, logs=log, tuner="random", measurer=fake).tune(trials=20)
    default = tasks[0].config_space.default_config()
    for t in tasks:
        assert fake.measured[t.workload_key][0] == default.index
    recs = at.load_records(log)
    assert all(
        [r for r in recs if r.workload == t.workload_key][0].config == default.to_json()
        for t in tasks
    )


def test_a_slow_task_sits_out_while_the_others_use_the_time():
    clock = FakeClock()
    slow, fast = _tasks(64, 128)
    spt = {slow.workload_key: 30.0, fast.workload_key: 1.0}
    fake = FakeMeasurer({t.workload_key: 1e-3 for t in (slow, fast)}, clock, spt)
    sched = TaskScheduler([slow, fast], tuner="random", measurer=fake, clock=clock, epsilon=0.0)
    sched.tune(minutes=2)
    n_slow, n_fast = (len(fake.measured[t.workload_key]) for t in (slow, fast))
    assert n_slow <= 3  # its first trial, then what its share of the time allows
    assert n_fast >= 20  # the rest of the budget
    assert clock.now <= 120.0 + 1.0


def test_confirmation_on_a_busy_machine_is_named_in_the_table(tmp_path):
    log = str(tmp_path / "c.jsonl")
    tasks = _tasks(64)
    sched = TaskScheduler(tasks, logs=log, tuner="random",
                          measurer=FakeMeasurer({t.workload_key: 1e-3 for t in tasks}))  # fmt: skip
    sched.tune(trials=8)

    def busy(task, *a, **kw):
        warnings.warn(BusyMachineWarning("ran 24.6x as long", 24.6), stacklevel=2)
        return 0

    sched.confirm(2, confirm_fn=busy)
    assert [r["note"] for r in sched.summary()] == ["not confirmed: busy machine (24.6x slower)"]


def test_confirmation_that_would_miss_the_deadline_is_left_out(tmp_path):
    clock = FakeClock()
    tasks = _tasks(64, 128)
    log = str(tmp_path / "c.jsonl")
    fake = FakeMeasurer({t.workload_key: 1e-3 for t in tasks}, clock, seconds_per_trial=1.0)
    sched = TaskScheduler(tasks, logs=log, tuner="random", measurer=fake, clock=clock)
    sched.tune(trials=16)
    calls = []
    confirm = lambda task, *a, **kw: calls.append(task) or 0  # noqa: E731
    sched.confirm(4, confirm_fn=confirm, deadline=clock.now + 1.0)
    assert calls == []
    assert all(r["note"] == "not confirmed: out of time" for r in sched.summary())
    sched.confirm(4, confirm_fn=confirm, deadline=clock.now + 1e6)
    assert sorted(t.workload_key for t in calls) == sorted(t.workload_key for t in tasks)


def test_a_round_that_turns_slow_ends_before_the_deadline():
    """The default config runs in 0.5 s, every other one in 10 s: the round, sized by the
    first, stops between chunks once the next would pass the limit."""
    clock = FakeClock()
    (task,) = _tasks(64)
    default = task.config_space.default_config().index
    fake = FakeMeasurer({task.workload_key: 1e-3}, clock,
                        lambda c: 0.5 if c.index == default else 10.0)  # fmt: skip
    sched = TaskScheduler([task], tuner="random", measurer=fake, clock=clock)
    sched.tune(minutes=1)
    assert clock.now <= 60.0 + 2 * 10.0  # at most one chunk (a build per core) over
    assert sched.states[0].new >= 4
