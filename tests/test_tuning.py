"""Autotuning: spaces, tuners, isolated measurement, records, resume, the CLI."""

import collections
import dataclasses
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import tuning_templates  # noqa: F401  (registers the test templates)

import autotune as at
import cost_models
import pypto as pt
from autotune import confirm
from autotune.cli import main as cli_main
from autotune.confirm import BusyMachineWarning
from autotune.records import CONFIRM, one_per_config
from pypto.lowering import lower_nest

FAST = at.MeasureOption(number=1, repeat=2, timeout=5)
TESTS = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- spaces


def test_space_indexing_sampling_and_neighbours():
    space = at.get_template("toy_matmul").space(32, 32, 16)
    assert len(space) == 4 * 5 * 2  # tile_i in 1..8, tile_j in 1..16 (powers of 2), unroll
    for i in range(len(space)):
        cfg = space.get(i)
        assert cfg.index == i
        assert space.config(json.loads(json.dumps(cfg.to_json()))) == cfg
    rng = random.Random(0)
    cfg = space.sample(rng)
    for nb in space.neighbours(cfg, rng, n=10):
        assert sum(nb.values[k] != cfg.values[k] for k in cfg.values) == 1
    default = space.default_config()
    assert default.values == {"tile_i": [-1, 4], "tile_j": [-1, 8], "unroll": 1}
    assert default.is_fallback and default != space.get(0)
    with pytest.raises(at.SpaceError, match="not one of its values"):
        space.config({"tile_i": [-1, 3], "tile_j": [-1, 8], "unroll": 1})
    with pytest.raises(at.SpaceError, match="unknown knobs"):
        space.config({**default.values, "bogus": 1})


def test_autotvm_forms_of_knob_definitions():
    """define_split of a loop (its constant extent), policy "verbose" (divisors and
    powers of two), filter=, reorder "identity", annotate with axis_lens/max_unroll,
    numpy integers as workload arguments, the callbacks' AutoTVM arguments."""
    A = pt.placeholder((12, 12), "float32", name="A")
    C = pt.compute((12, 12), lambda i, j: A[i, j] * 2, name="C")
    y, x = C.op.axis
    sp = at.ConfigSpace()
    sp.define_split("v", y, policy="verbose")
    sp.define_split("f", x, num_outputs=3, filter=lambda e: e.size[-1] <= 2)
    sp.define_reorder("r", [y, x], policy="identity")
    assert [v[1] for v in sp.knobs["v"].values] == [1, 2, 3, 4, 6, 8, 12]
    assert all(v[-1] <= 2 for v in sp.knobs["f"].values) and [-1, 6, 2] in sp.knobs["f"].values
    assert sp.knobs["r"].values == [[0, 1]]
    with pytest.raises(at.SpaceError, match="'n': the extent must be a constant integer"):
        sp.define_split("n", pt.var("m"))
    with pytest.raises(at.SpaceError, match=r"candidate \[4, 4, 4\] is not 2 positive sizes"):
        sp.define_split("c", 16, policy="candidate", candidate=[[4, 4, 4]])
    with pytest.raises(at.SpaceError, match=r"candidate \[4, -1\] is not 2 positive sizes"):
        sp.define_split("c", 16, policy="candidate", candidate=[[4, -1]])
    with pytest.raises(at.SpaceError, match="define_knob 'u': candidate 1 is given twice"):
        sp.define_knob("u", [1, 1, 2])
    s = pt.create_schedule(C.op)
    xo, xi = s[C].split(x, factor=4)
    at.space.AnnotateEntity(("unroll", "unroll")).apply(s, C, [xo, xi], axis_lens=[3, 4],
                                                          max_unroll=3)  # fmt: skip
    assert s[C].attrs == {xo: "unrolled"}  # xi (4 > max_unroll) stays a loop
    task = at.Task("toy_matmul", (np.int64(32), 32, np.int32(16)))
    assert task.args == (32, 32, 16) and task.workload_key == '["toy_matmul",[32,32,16]]'
    assert at.get_template("toy_matmul")(np.int64(32), 32, 16)[1][0].shape[0].value == 32
    with pytest.raises(TypeError, match="progress_bar: unknown argument"):
        at.progress_bar(10, prefix="[Task 1] ", bogus=1)
    with pytest.raises(ValueError, match="protocol 'pickle': records are JSON Lines"):
        at.log_to_file("x.jsonl", protocol="pickle")


def test_split_policies():
    sp = at.ConfigSpace()
    sp.define_split("f", 12, num_outputs=2)
    sp.define_split("p", 12, num_outputs=3, policy="power2", max_factor=4)
    sp.define_split("c", 12, policy="candidate", candidate=[[-1, 5], [-1, 7]])
    assert sp.knobs["f"].values == [[-1, f] for f in (1, 2, 3, 4, 6, 12)]
    assert [-1, 2, 4] in sp.knobs["p"].values and [-1, 4, 4] not in sp.knobs["p"].values
    assert sp.knobs["c"].values == [[-1, 5], [-1, 7]]
    with pytest.raises(at.SpaceError, match="extent must be a constant integer"):
        sp.define_split("s", pt.var("n"))


def test_template_without_records_uses_its_default_config():
    s, args = at.get_template("toy_matmul")(32, 32, 16)
    assert ["i.outer", "j.outer", "k", "i.inner", "j.inner"] == [
        iv.name for iv in s[args[-1]].leaf_iter_vars
    ]
    assert any(st["prim"] == "split" and st["factor"] == 4 for st in s.steps)


# ---------------------------------------------------------------- tuners and records


@pytest.mark.parametrize("tuner_cls", [at.RandomTuner, at.GridSearchTuner, at.GATuner])
def test_tuner_writes_records_and_best_rebuilds(tuner_cls, tmp_path):
    log = tmp_path / "toy.jsonl"
    task = at.Task("toy_matmul", (32, 32, 16))
    tuner = tuner_cls(task, seed=3)
    best = tuner.tune(6, measure=FAST, callbacks=[at.log_to_file(log)])
    recs = at.load_records(log)
    assert len(recs) == 6 and all(r.ok for r in recs)
    assert len({json.dumps(r.config, sort_keys=True) for r in recs}) == 6
    assert all(r.workload == task.workload_key and r.target == task.target.key for r in recs)
    assert all(r.flop == 2 * 32 * 32 * 16 for r in recs)
    fastest = min(recs, key=lambda r: r.cost)
    assert best.to_json() == fastest.config
    with at.apply_history_best(str(log)):
        s, args = at.get_template("toy_matmul")(32, 32, 16)
    factors = [st["factor"] for st in s.steps if st["prim"] == "split"]
    assert factors == [fastest.config["tile_i"][1], fastest.config["tile_j"][1]]
    mod = pt.build(s, args)
    a, b = np.random.rand(32, 16).astype("f4"), np.random.rand(16, 32).astype("f4")
    c = np.empty((32, 32), "f4")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_records_of_another_template_version_are_passed_over(tmp_path):
    """The fastest record lacks a knob the template has now: the fastest record that
    fits is used, with a warning naming the workload; none fits: the default."""
    task = at.Task("toy_matmul", (32, 32, 16))
    good = {"tile_i": [-1, 2], "tile_j": [-1, 16], "unroll": 0}
    stale = {"tile_i": [-1, 8], "tile_j": [-1, 4]}  # made before the "unroll" knob

    def rec(cfg, cost):
        return at.Record(task.workload_key, task.target.key, cfg, costs=[cost], flop=1.0)

    log = str(tmp_path / "mixed.jsonl")
    at.append_records(log, [rec(stale, 1e-6), rec(good, 1e-3)])
    with at.apply_history_best(log):
        with pytest.warns(UserWarning, match=r"1 record\(s\) of .*toy_matmul.*best one that does"):
            s, _ = at.get_template("toy_matmul")(32, 32, 16)
    assert [st["factor"] for st in s.steps if st["prim"] == "split"] == [2, 16]

    only_stale = str(tmp_path / "stale.jsonl")
    at.append_records(only_stale, [rec(stale, 1e-6)])
    with at.apply_history_best(only_stale):
        with pytest.warns(UserWarning, match="using the default config"):
            s, _ = at.get_template("toy_matmul")(32, 32, 16)
    assert [st["factor"] for st in s.steps if st["prim"] == "split"] == [4, 8]


def test_a_record_spelling_its_values_as_floats_schedules_as_the_space_values(tmp_path):
    """A record written by another tool (8.0 for 8, true for 1) equals a point of the
    space and is used as that point: the schedule's factors are integers."""
    task = at.Task("toy_matmul", (32, 32, 16))
    cfg = {"tile_i": [-1, 2.0], "tile_j": [-1, 16.0], "unroll": False}
    assert task.config_space.config(cfg).values == {
        "tile_i": [-1, 2], "tile_j": [-1, 16], "unroll": 0
    }  # fmt: skip
    log = str(tmp_path / "floats.jsonl")
    at.append_records(log, [at.Record(task.workload_key, task.target.key, cfg, costs=[1e-6])])
    with at.apply_history_best(log):
        s, tensors = at.get_template("toy_matmul")(32, 32, 16)
    factors = [st["factor"] for st in s.steps if st["prim"] == "split"]
    assert factors == [2, 16] and all(type(f) is int for f in factors)
    pt.build(s, tensors)  # schedules and compiles as the integer config does


def test_a_config_counts_by_the_median_of_all_its_timings(tmp_path):
    """One lucky draw does not outrank a config that held up to several; a config
    that failed once is not used (however a record spells its values)."""
    task = at.Task("toy_matmul", (32, 32, 16))
    lucky = {"tile_i": [-1, 2], "tile_j": [-1, 16], "unroll": 0}
    steady = {"tile_i": [-1, 4], "tile_j": [-1, 8], "unroll": 0}
    flaky = {"tile_i": [-1, 8], "tile_j": [-1, 8], "unroll": 0}

    def rec(cfg, *costs, error=None):
        return at.Record(task.workload_key, task.target.key, cfg, costs=list(costs), error=error)

    log = str(tmp_path / "noisy.jsonl")
    at.append_records(
        log,
        [
            rec(lucky, 1.0e-3),
            rec(steady, 1.1e-3),
            rec(flaky, 0.5e-3),
            rec({**lucky, "tile_i": [-1.0, 2.0]}, 1.5e-3),  # the same config, spelled 2.0
            rec(steady, 1.2e-3),
            rec(lucky, 1.6e-3),
            rec({**flaky, "unroll": False}, error="timeout"),  # and false for 0
        ],
    )
    (ranked,) = at.ranked_configs(at.load_records(log)).values()
    assert [r.config for r in ranked] == [steady, lucky]
    assert ranked[1].costs == [1.0e-3, 1.5e-3, 1.6e-3] and ranked[1].cost == 1.5e-3
    assert (
        at.best_by_workload(at.load_records(log))[(task.workload_key, task.target.key)].config
        == steady
    )
    with at.apply_history_best(log):
        s, _ = at.get_template("toy_matmul")(32, 32, 16)
    assert [st["factor"] for st in s.steps if st["prim"] == "split"] == [4, 8]
    once = one_per_config(at.load_records(log))  # what cost models are fitted on
    assert [(r.config, r.ok) for r in once] == [(steady, True), (lucky, True), (flaky, False)]


def test_records_of_the_thread_count_in_use_come_first(tmp_path):
    """A config measured with 2 threads is not ranked against timings with 1 (their
    costs are not comparable): each count has its own, and a template called with one
    thread takes the fastest record of one thread, then of others or of none stated."""
    task = at.Task("toy_matmul", (32, 32, 16))
    one = {"tile_i": [-1, 2], "tile_j": [-1, 16], "unroll": 0}
    two = {"tile_i": [-1, 4], "tile_j": [-1, 8], "unroll": 0}

    def rec(cfg, cost, threads):
        return at.Record(task.workload_key, task.target.key, cfg, costs=[cost], threads=threads)

    log = str(tmp_path / "threads.jsonl")
    at.append_records(log, [rec(one, 2e-3, 1), rec(two, 3e-3, 1), rec(two, 1e-3, 2)])
    assert [json.loads(line).get("threads") for line in open(log)] == [1, 1, 2]
    (ranked,) = at.ranked_configs(at.load_records(log)).values()
    assert [(r.config, r.threads, r.costs) for r in ranked] == [
        (two, 2, [1e-3]), (one, 1, [2e-3]), (two, 1, [3e-3])
    ]  # fmt: skip
    before = pt.get_num_threads()
    try:
        for threads, tile_i in ((1, 2), (2, 4), (3, 4)):  # 3: no record of 3, the fastest
            pt.set_num_threads(threads)
            with at.apply_history_best(log):
                s, _ = at.get_template("toy_matmul")(32, 32, 16)
            assert [st["factor"] for st in s.steps if st["prim"] == "split"][0] == tile_i
    finally:
        pt.set_num_threads(before)
    best = str(tmp_path / "best.jsonl")
    assert at.pick_best(log, best) == 2  # the best of each thread count
    # timings that state no count (a log older than the field) join the one count stated
    at.append_records(log, [rec(one, 4e-3, 0)])
    ranked = at.ranked_configs(at.load_records(log))[(task.workload_key, task.target.key)]
    assert [(r.threads, r.costs) for r in ranked if r.config == one] == [(1, [2e-3, 4e-3])]
    with pytest.raises(ValueError, match="bad threads"):
        at.Record.from_json(rec(one, 1e-3, 1).to_json().replace('"threads":1', '"threads":-1'))


def test_candidates_run_with_the_threads_asked_and_records_say_so(tmp_path):
    log = str(tmp_path / "t.jsonl")
    task = at.Task("toy_matmul", (32, 32, 16))
    for threads in (1, 2):
        at.RandomTuner(task).tune(
            n_trial=1, measure=at.MeasureOption(number=1, repeat=1, threads=threads),
            callbacks=[at.log_to_file(log)],
        )  # fmt: skip
    assert [r.threads for r in at.load_records(log)] == [1, 2]


def test_confirm_measures_the_fastest_again_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setattr(confirm, "BUSY", float("inf"))  # (beside a parallel test run)
    log = str(tmp_path / "confirm.jsonl")
    task = at.Task("toy_matmul", (32, 32, 16))
    at.RandomTuner(task, seed=1).tune(8, measure=FAST, callbacks=[at.log_to_file(log)])
    (before,) = at.ranked_configs(at.load_records(log)).values()
    made = at.confirm_best(task, log, k=3, rounds=2, measure=FAST)
    recs = at.load_records(log)
    assert len(recs) == 8 + made and 6 <= made <= 4 * 2 * 3 + 2  # + the default, twice
    counts = collections.Counter(json.dumps(r.config, sort_keys=True) for r in recs)
    # the first round measures the three fastest again; after it, which three rank first
    # depends on the noise of microsecond kernels (the steady measurer below pins it down)
    assert all(counts[json.dumps(r.config, sort_keys=True)] >= 2 for r in before[:3])
    again = at.confirm_best(task, log, k=3, rounds=1, measure=FAST)  # a later session
    assert 3 <= again <= 4 * 3 + 1 and len(at.load_records(log)) == 8 + made + again
    configs = {json.dumps(r.config, sort_keys=True) for r in recs}  # the 8, and the default
    assert json.dumps(task.config_space.default_config().to_json(), sort_keys=True) in configs
    tuner = at.RandomTuner(task)
    assert tuner.load_history(recs) == 8  # configs searched, not records nor the baseline
    assert len(tuner.visited) == len(configs)  # the baseline too: measured, not proposed


class _SteadyMeasurer:
    """Every config costs ``costs[index]`` (default 1.1 ms), no noise; records which
    configs it measured."""

    def __init__(self, costs):
        self.costs, self.seen = costs, []

    def measure(self, task, configs):
        self.seen.append([c.index for c in configs])
        return [at.MeasureResult(costs=[self.costs.get(c.index, 1.1e-3)]) for c in configs]


@pytest.mark.parametrize("tuner_cls", [at.RandomTuner, at.GridSearchTuner, at.GATuner,
                                       at.XGBTuner])  # fmt: skip
def test_tuner_asked_for_more_trials_than_configs_measures_each_once(tuner_cls):
    """The space has fewer configs than the trials asked for (and than one batch of the
    genetic algorithm): every config is measured once, and tuning stops."""
    task = at.Task("toy_matmul", (4, 8, 2))
    m = _SteadyMeasurer({i: (1 + i) * 1e-4 for i in range(len(task.config_space))})
    tuner_cls(task, seed=1).tune(len(task.config_space) + 20, measurer=m)
    seen = [i for batch in m.seen for i in batch]
    assert sorted(seen) == list(range(len(task.config_space)))
    batch = [c.index for c in tuner_cls(task, seed=2).next_batch(len(task.config_space) + 5)]
    assert len(set(batch)) == len(batch) <= len(task.config_space)
    if tuner_cls is not at.XGBTuner:  # (the model-guided one plans a batch of its own size)
        assert sorted(batch) == list(range(len(task.config_space)))


def _logged_default_and_two(log: str, *ms):
    """A toy task, its default config and two others, logged with one timing each
    (``ms``: the default's, then the others')."""
    task = at.Task("toy_matmul", (32, 32, 16))
    space = task.config_space
    default = space.default_config()
    a, b = [space.get(i) for i in range(len(space)) if i != default.index][:2]
    key, target = task.workload_key, task.target.key
    recs = [
        at.Record(key, target, c.to_json(), costs=[t * 1e-3], flop=task.flop)
        for c, t in zip((default, a, b), ms)
    ]
    at.append_records(log, recs)
    return task, default, a, b


def test_confirm_measures_the_default_beside_the_fastest(tmp_path):
    """A config that looked fastest on one lucky draw, against a default measured in a
    busy minute: measured side by side, the default wins and becomes the best record."""
    log = str(tmp_path / "baseline.jsonl")
    task, default, lucky, other = _logged_default_and_two(log, 1.5, 0.5, 1.2)
    m = _SteadyMeasurer({default.index: 1.0e-3})
    made = at.confirm_best(task, log, k=2, rounds=2, measurer=m)
    assert all(default.index in batch for batch in m.seen[:2])  # in the same rounds
    assert made == sum(map(len, m.seen))
    best = at.best_by_workload(at.load_records(log))[(task.workload_key, task.target.key)]
    assert best.config == default.to_json()  # median 1.0 ms of three against 1.1
    # with no record of the task at all, nothing is measured
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert at.confirm_best(task, str(empty), k=2, measurer=_SteadyMeasurer({})) == 0


def test_resume_does_not_count_the_confirmation_baseline_as_a_trial(tmp_path):
    """The default config measured only beside the fastest (``--confirm``) was never a
    trial of the search: a resumed ``--trials N`` still searches N configs in all."""
    log = str(tmp_path / "baseline.jsonl")
    task, default, a, b = _logged_default_and_two(log, 9.0, 0.5, 1.2)
    recs = at.load_records(log)
    searched = [r for r in recs if r.config != default.to_json()]
    baseline = dataclasses.replace(recs[0], tuner=CONFIRM)
    assert baseline.config == default.to_json()
    tuner = at.RandomTuner(task)
    assert tuner.load_history([*searched, baseline]) == 2
    assert default.index in tuner.visited  # measured all the same: not proposed again
    tuner = at.RandomTuner(task)
    assert tuner.load_history(recs) == 3  # searched, not a baseline


def test_confirm_on_a_busy_machine_records_nothing_and_keeps_the_ranking(tmp_path, monkeypatch):
    """Re-measured while another program holds the cores (OpenMP's threads then wait
    whole time slices), the default takes 20.8 ms against 0.43 ms in the search: such a
    round ranks nothing. It is not recorded but measured again (a passing burst of load);
    still that slow three times, a BusyMachineWarning says so, and the default stays the
    best (a busy round once made a config 20x slower the best)."""
    log = str(tmp_path / "busy.jsonl")
    task, default, a, b = _logged_default_and_two(log, 0.43, 9.0, 9.8)
    monkeypatch.setattr(confirm, "BUSY_PAUSE", 0.0)
    m = _SteadyMeasurer({default.index: 20.8e-3, a.index: 11.2e-3, b.index: 12.8e-3})
    with pytest.warns(BusyMachineWarning, match="as long as in the search, 3 times"):
        made = at.confirm_best(task, log, k=2, rounds=2, measurer=m)
    assert made == 0 and len(m.seen) == 3 and len(at.load_records(log)) == 3
    best = at.best_by_workload(at.load_records(log))[(task.workload_key, task.target.key)]
    assert best.config == default.to_json()
    # a machine that drifted by 30% is not busy: that round is recorded as usual
    m = _SteadyMeasurer({default.index: 0.55e-3, a.index: 11e-3, b.index: 12e-3})
    assert at.confirm_best(task, log, k=2, rounds=1, measurer=m) == 3


def test_xgb_tuner_end_to_end(tmp_path):
    log = tmp_path / "xgb.jsonl"
    task = at.Task("toy_matmul", (32, 32, 16))
    tuner = at.XGBTuner(task, seed=0, plan_size=8, use_pretrained=False)
    assert tuner.model_based
    tuner.tune(20, measure=FAST, callbacks=[at.log_to_file(log)])
    recs = at.load_records(log)
    assert len(recs) == 20 and all(r.ok for r in recs)
    assert len({json.dumps(r.config, sort_keys=True) for r in recs}) == 20
    assert tuner.model.trained  # the later plans came from the fitted model


def test_xgb_tuner_transfers_from_other_workloads(tmp_path):
    log = tmp_path / "other.jsonl"
    at.RandomTuner(at.Task("toy_matmul", (32, 32, 16)), seed=1).tune(
        10, measure=FAST, callbacks=[at.log_to_file(log)]
    )
    tuner = at.XGBTuner(
        at.Task("toy_matmul", (16, 32, 16)), seed=0, plan_size=8, use_pretrained=False
    )
    assert tuner.load_history(at.load_records(log)) == 0  # none of them is this workload
    assert len(tuner.transfer) == 1 and len(tuner.transfer[0][1]) == 10
    tuner.tune(4, measure=FAST)
    assert tuner.model.trained  # the first plan already came from the transferred data
    assert len(tuner.history) == 4 and all(r.ok for _, r in tuner.history)


def test_xgb_tuner_transfers_from_other_targets():
    """Records of this very workload on another target train the model (each featurized
    for its own target) but do not count as trials here."""
    here = at.Task("toy_matmul", (16, 32, 16))
    other_name = next(n for n in ("generic", "aarch64-neon") if n != here.target.key)
    other = at.Task("toy_matmul", (16, 32, 16), target=other_name)
    rng = random.Random(0)
    recs = [
        at.Record(other.workload_key, other_name, other.config_space.sample(rng).to_json(),
                  costs=[1e-3 * (1 + k)], flop=other.flop)
        for k in range(12)
    ]  # fmt: skip
    tuner = at.XGBTuner(here, seed=0, plan_size=8, use_pretrained=False)
    assert tuner.load_history(recs) == 0
    assert len(tuner.transfer) == 1 and 2 <= len(tuner.transfer[0][1]) <= 12
    assert tuner._fit() is tuner.model and tuner.model.trained


def test_a_workload_of_no_flops_trains_the_cost_models():
    """A copy counts 0 flops: every label (GFLOP/s) was 0, so the tuner never fitted its
    model and ``train-model`` found no record to learn from. Speed is runs per second
    there."""
    from autotune.measure import MeasureResult
    from autotune.pretrain import training_data
    from autotune.tuners import MeasureInput

    task = at.Task("flopless_copy", (16, 256), target="x86-avx2")
    assert task.flop == 0
    tuner = at.XGBTuner(task, seed=0, plan_size=8, min_fit=4, use_pretrained=False)
    recs = []
    for _ in range(2):
        batch = tuner.next_batch(8)
        results = [MeasureResult(costs=[1e-5 * (1 + i)]) for i in range(len(batch))]
        tuner.update([MeasureInput(task, c) for c in batch], results)
        recs += [at.Record(task.workload_key, "x86-avx2", c.to_json(), r.costs, flop=0.0)
                 for c, r in zip(batch, results)]  # fmt: skip
    assert tuner.ys and min(tuner.ys) > 0
    assert tuner._fit() is tuner.model and tuner.model.trained
    _, y, groups = training_data(recs, "x86-avx2")
    assert groups == [len(recs)] and np.all(y > 0)
    assert y[0] > y[7]  # faster first: runs per second


def test_failing_candidates_are_recorded_and_tuning_goes_on(tmp_path):
    log = tmp_path / "bad.jsonl"
    task = at.Task("misbehaving", (16, 16, 8))
    tuner = at.GridSearchTuner(task)
    opt = at.MeasureOption(number=1, repeat=1, timeout=3)
    best = tuner.tune(len(task.config_space), measure=opt, callbacks=[at.log_to_file(log)])
    by_mode = {r.config["mode"]: r for r in at.load_records(log)}
    assert set(by_mode) == {
        "ok", "segfault", "hang", "wrong", "illegal", "ok_tiled", "assert", "exit"
    }  # fmt: skip
    assert by_mode["assert"].error == "INSTANTIATION_ERROR"
    # sys.exit() in the template: was the tuning run's end, silent, the batch unlogged
    assert by_mode["exit"].error == "INSTANTIATION_ERROR"
    assert by_mode["exit"].error_msg == "SystemExit: 3"
    assert "the template's own check fails" in by_mode["assert"].error_msg
    assert by_mode["segfault"].error == "RUNTIME_ERROR"
    assert "SIGSEGV" in by_mode["segfault"].error_msg
    assert by_mode["hang"].error == "TIMEOUT"
    assert by_mode["wrong"].error == "WRONG_ANSWER"
    assert by_mode["illegal"].error == "INSTANTIATION_ERROR"
    assert "would race" in by_mode["illegal"].error_msg
    assert by_mode["ok"].ok and by_mode["ok_tiled"].ok
    assert best.values["mode"] in ("ok", "ok_tiled")


def test_a_run_longer_than_the_timeout_is_never_a_measurement(tmp_path):
    """Was: a reply waiting when the tuner looked (the run over before it polled) was
    taken as it came, a run of milliseconds recorded as a success against a timeout of
    a microsecond (3 of 8 candidates)."""
    log = tmp_path / "timeout.jsonl"
    task = at.Task("toy_matmul", (32, 32, 16))
    opt = at.MeasureOption(number=1, repeat=1, timeout=1e-6)
    at.GridSearchTuner(task).tune(4, measure=opt, callbacks=[at.log_to_file(log)])
    recs = at.load_records(log)
    assert len(recs) == 4 and all(r.error == "TIMEOUT" for r in recs), recs


def test_candidates_are_measured_on_buffers_that_start_on_cache_lines(tmp_path):
    """As the outputs a module allocates and torch's tensors (numpy's own arrays start
    16 bytes into a line): the probe's output is off by the offsets it sees."""
    log = tmp_path / "aligned.jsonl"
    task = at.Task("alignment_probe", ())
    opt = at.MeasureOption(number=1, repeat=1)
    at.GridSearchTuner(task).tune(1, measure=opt, callbacks=[at.log_to_file(log)])
    (rec,) = at.load_records(log)
    assert rec.ok, rec.error_msg


def test_a_candidate_writing_outside_its_arguments_is_not_a_measurement(tmp_path):
    """Canaries around every argument catch a hand-written kernel (an extern, a tensor
    intrinsic) writing past an end or before a start, which the comparison cannot see."""
    log = tmp_path / "overrun.jsonl"
    task = at.Task("overrunning", ())
    opt = at.MeasureOption(number=1, repeat=1)
    at.GridSearchTuner(task).tune(4, measure=opt, callbacks=[at.log_to_file(log)])
    got = {r.config["mode"]: r for r in at.load_records(log)}
    assert got["none"].ok, got["none"].error_msg
    want = {
        "past_end": "wrote outside argument C (argument 1): 64 byte(s) past its end",
        "before_start": "wrote outside argument C (argument 1): 4 byte(s) before its start",
        "past_input": "wrote outside argument A (argument 0): 4 byte(s) past its end",
    }
    for mode, msg in want.items():
        assert got[mode].error == "RUNTIME_ERROR" and msg in got[mode].error_msg, got[mode]


def test_xgb_tuner_passes_over_a_config_its_template_fails_on():
    """Featurizing lowers the candidate: a template's own exception (an assert) leaves
    the config without features (the builder records its error), not the tuner dead."""
    task = at.Task("misbehaving", (16, 16, 8))
    tuner = at.XGBTuner(task, seed=0, use_pretrained=False)
    assert tuner.feature(task.config_space.config({"mode": "assert"})) is None
    assert tuner.feature(task.config_space.config({"mode": "ok"})) is not None
    batch = [c.index for c in tuner.next_batch(len(task.config_space))]
    assert batch and len(set(batch)) == len(batch)


def test_a_template_stuck_in_its_own_python_is_a_build_timeout(tmp_path):
    """build_timeout bounds the template's Python and the lowering, not only the C
    compiler: the stuck config is recorded as a TIMEOUT when it runs out."""
    log = tmp_path / "slow.jsonl"
    task = at.Task("slow_builder", (16,))
    t0 = time.monotonic()
    opt = at.MeasureOption(number=1, repeat=1, build_timeout=2)
    at.GridSearchTuner(task).tune(2, measure=opt, callbacks=[at.log_to_file(log)])
    by_stuck = {r.config["stuck"]: r for r in at.load_records(log)}
    assert by_stuck[0].ok and by_stuck[1].error == "TIMEOUT"
    assert by_stuck[1].error_msg == "build took longer than 2 s"
    assert time.monotonic() - t0 < 30


def test_a_candidates_run_time_is_timed_from_when_it_is_loaded(tmp_path):
    """The template's Python in the runner (2 s here, against a 1 s timeout) does not
    count as running the candidate: the quick kernel is measured, the spinning one is
    still a TIMEOUT of its run."""
    log = tmp_path / "slow_python.jsonl"
    task = at.Task("slow_python", (16,))
    opt = at.MeasureOption(number=1, repeat=1, timeout=1)
    at.GridSearchTuner(task).tune(2, measure=opt, callbacks=[at.log_to_file(log)])
    by_hang = {r.config["hang"]: r for r in at.load_records(log)}
    assert by_hang[0].ok, by_hang[0].error_msg
    assert by_hang[1].error == "TIMEOUT"
    assert by_hang[1].error_msg == "the run took longer than 1 s"


def test_a_default_config_that_crashes_is_recorded_and_the_definition_is_the_reference(
    tmp_path,
):
    log = tmp_path / "crash_default.jsonl"
    task = at.Task("crashing_default", (16,))
    opt = at.MeasureOption(number=1, repeat=1, timeout=5)
    at.GridSearchTuner(task).tune(2, measure=opt, callbacks=[at.log_to_file(log)])
    by_mode = {r.config["mode"]: r for r in at.load_records(log)}
    assert by_mode["crash"].error == "RUNTIME_ERROR" and "SIGSEGV" in by_mode["crash"].error_msg
    assert by_mode["ok"].ok


def test_confirm_drops_a_config_that_crashes_when_measured_again(tmp_path):
    """A record claims the segfaulting config is the fastest (a measurement from a
    build that since changed, say): measured again it crashes, is not used, and the
    next configs are confirmed in its place."""
    log = str(tmp_path / "crash.jsonl")
    task = at.Task("misbehaving", (16, 16, 8))

    def rec(mode, cost):
        return at.Record(task.workload_key, task.target.key, {"mode": mode}, costs=[cost])

    at.append_records(log, [rec("segfault", 1e-9), rec("ok", 1e-3), rec("ok_tiled", 2e-3)])
    made = at.confirm_best(task, log, k=2, rounds=1, measure=at.MeasureOption(number=1, repeat=1))
    recs = at.load_records(log)
    crashed = [r for r in recs if r.config["mode"] == "segfault" and not r.ok]
    assert len(crashed) == 1 and crashed[0].error == "RUNTIME_ERROR"
    assert made == 3  # segfault and ok, then ok_tiled in its place
    (ranked,) = at.ranked_configs(recs).values()
    assert sorted(r.config["mode"] for r in ranked) == ["ok", "ok_tiled"]


def test_corrupt_and_unknown_version_lines_are_skipped(tmp_path):
    log = tmp_path / "mixed.jsonl"
    good = at.Record(
        workload=at.workload_key("toy_matmul", [32, 32, 16]),
        target="x86-avx2",
        config={"tile_i": [-1, 2], "tile_j": [-1, 4], "unroll": 0},
        costs=[1e-4, 2e-4],
        flop=1.0,
    )
    other = json.loads(good.to_json())
    other["version"] = 99
    lines = [
        good.to_json(),
        "{not json",
        good.to_json()[:40],
        json.dumps(other),
        "[1, 2]",
        json.dumps({**other, "version": True}),  # equals 1 in Python, not the version
        json.dumps({**other, "version": 1.0}),
        good.to_json(),
    ]
    log.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=r"skipped 6 corrupt or unknown-version line\(s\)"):
        recs = at.load_records(str(log))
    assert len(recs) == 2 and recs[0].config == good.config
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with at.apply_history_best(str(log)):
            s, _ = at.get_template("toy_matmul")(32, 32, 16, target="x86-avx2")
    assert [st["factor"] for st in s.steps if st["prim"] == "split"] == [2, 4]


def test_a_byte_order_mark_does_not_cost_a_record(tmp_path):
    """A log saved by an editor that writes a BOM (or two such logs joined) lost the
    measurement on that line as corrupt."""
    good = at.Record(at.workload_key("toy_matmul", [32, 32, 16]), "x86-avx2",
                     {"tile_i": [-1, 2], "tile_j": [-1, 4], "unroll": 0}, [1e-4])  # fmt: skip
    log = tmp_path / "bom.jsonl"
    log.write_bytes(("\ufeff" + good.to_json() + "\n\ufeff" + good.to_json() + "\n").encode())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no line skipped
        assert len(at.load_records(str(log))) == 2


def test_a_corrupt_log_is_reported_once_per_process(tmp_path):
    """Read again (tuning reads its log several times) it is not reported again; a new
    corrupt line is."""
    log = tmp_path / "torn.jsonl"
    rec = at.Record(
        workload=at.workload_key("toy_matmul", [8, 8, 8]), target="t", config={"x": 1}, costs=[1.0]
    )
    log.write_text(rec.to_json() + "\n{torn\n")
    with pytest.warns(UserWarning, match="skipped 1"):
        at.load_records(str(log))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(at.load_records(str(log))) == 1
    with open(log, "a") as f:
        f.write("[not a record]\n")
    with pytest.warns(UserWarning, match="skipped 2"):
        at.load_records(str(log))


def test_writer_terminates_a_partial_last_line(tmp_path):
    log = tmp_path / "partial.jsonl"
    rec = at.Record(
        workload=at.workload_key("toy_matmul", [8, 8, 8]), target="t", config={"x": 1}, costs=[1.0]
    )
    log.write_text(rec.to_json() + "\n" + rec.to_json()[:30])  # a writer killed mid-line
    at.append_records(str(log), [rec])
    lines = log.read_text().splitlines()
    assert len(lines) == 3 and lines[2] == rec.to_json()
    with pytest.warns(UserWarning, match="skipped 1"):
        assert len(at.load_records(str(log))) == 2


def _writer(path, tag, n):
    rec = at.Record(
        workload=at.workload_key("w", [tag]),
        target="t",
        config={"pad": "x" * 5000, "tag": tag},
        costs=[1.0],
    )
    for _ in range(n):
        at.append_records(path, [rec])


def test_two_concurrent_writers_leave_only_whole_lines(tmp_path):
    log = str(tmp_path / "shared.jsonl")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(log, t, 300)) for t in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    lines = open(log).read().splitlines()
    assert len(lines) == 600
    tags = [json.loads(line)["config"]["tag"] for line in lines]  # every line parses
    assert tags.count(1) == 300 and tags.count(2) == 300


def test_pick_best(tmp_path):
    src, dst = tmp_path / "all.jsonl", tmp_path / "best.jsonl"
    w = at.workload_key("toy_matmul", [8, 8, 8])
    recs = [at.Record(w, "t", {"c": i}, costs=[c]) for i, c in enumerate([3.0, 1.0, 2.0])]
    recs.append(at.Record(w, "t", {"c": 9}, costs=[], error="TIMEOUT"))
    at.append_records(str(src), recs)
    assert at.pick_best(str(src), str(dst)) == 1
    (only,) = at.load_records(str(dst))
    assert only.config == {"c": 1}
    # writing over an input would replace the history with its best: refused, kept whole
    before = src.read_text()
    for out in (src, tmp_path / "." / "all.jsonl"):
        with pytest.raises(ValueError, match="is also an input; write the best elsewhere"):
            at.pick_best([str(src), str(dst)], str(out))
    assert src.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all.jsonl", "best.jsonl"]


def test_records_from_what_is_not_a_log_are_refused_by_name(tmp_path):
    with pytest.raises(IsADirectoryError, match=f"{tmp_path} is a directory, not a tuning log"):
        at.load_records(str(tmp_path))
    with pytest.raises(TypeError, match="come from log paths, Records or their JSON dicts, got 5"):
        at.load_records([5])
    with pytest.raises(TypeError, match="come from log paths, Records or their JSON dicts, got 42"):
        with at.apply_history_best(42):  # was: 'int' object is not iterable
            pass
    log = tmp_path / "a.jsonl"
    at.append_records(str(log), [at.Record(at.workload_key("toy_matmul", [8, 8, 8]), "t",
                                           {"c": 1}, costs=[1.0])])  # fmt: skip
    assert len(at.load_records(os.fsencode(log))) == 1  # a bytes path is a path
    # log lines parsed as JSON are records too (API.md: "a path, a list of paths, or records")
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert at.load_records(lines) == at.load_records(str(log)) == at.load_records(lines[0:1])
    assert at.load_records(lines[0]) == at.load_records(str(log))
    with pytest.raises(ValueError, match=r"not a valid tuning record \(unknown format version"):
        at.load_records([{**lines[0], "version": 99}])


# ---------------------------------------------------------------- the command line


def _cli(args, tmp_path, **kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.path.dirname(TESTS)]))
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_the_cli_says_warnings_in_one_line_each(tmp_path):
    """Python's warnings (here: a corrupt line, seen as the run reads its log again at
    the end) reach a pypto-tune user as ``warning: ...`` lines, not source lines."""
    log = tmp_path / "w.jsonl"
    log.write_text("not a record\n")
    args = ["toy_matmul", "--import", "tuning_templates", "--args", "16,16,16", "--trials",
            "1", "--number", "1", "--repeat", "1", "--log", str(log), "--no-progress",
            "--confirm", "0"]  # fmt: skip
    out, err = _cli(args, tmp_path).communicate(timeout=300)
    lines = err.strip().splitlines()
    assert lines and all(x.startswith("warning: ") for x in lines), err
    assert "skipped 1 corrupt or unknown-version line(s)" in err and "UserWarning" not in err


def test_killed_run_resumes_without_remeasuring(tmp_path):
    log = tmp_path / "resume.jsonl"
    args = [
        "toy_slow_matmul",
        "--import",
        "tuning_templates",
        "--args",
        "32,32,16",
        "--trials",
        "14",
        "--tuner",
        "random",
        "--seed",
        "5",
        "--number",
        "1",
        "--repeat",
        "1",
        "--log",
        str(log),
        "--no-progress",
        "--confirm",
        "0",
    ]
    p = _cli(args, tmp_path, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= 5:
            break
        if p.poll() is not None:
            pytest.fail(f"tuning ended early: {p.stderr.read()}")
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)  # the tuner, its builders and its runner
    p.wait()
    first = at.load_records(str(log))
    assert 5 <= len(first) < 14
    p = _cli([*args, "--resume"], tmp_path)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert f"resuming: {len(first)} trial(s)" in out
    recs = at.load_records(str(log))
    assert len(recs) == 14
    assert len({json.dumps(r.config, sort_keys=True) for r in recs}) == 14  # none re-measured


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nosuch", "--args", "1"], "no template named 'nosuch'"),
        (["matmul"], "the following arguments are required: --args"),
        (["matmul", "--args", "64,64", "--trials", "2"], "--args do not fit template 'matmul'"),
        (["matmul", "--args", "64,64,64", "--trials", "0"], "--trials must be positive"),
        (["matmul", "--args", "64,64,64", "--confirm", "-1"], "--confirm must be non-negative"),
        (["matmul", "--args", "64,64,64", "--tuner", "magic"], "argument --tuner: invalid choice"),
        (["matmul", "--args", "64,64,64", "--target", "riscv"], "unknown target 'riscv'"),
        (["matmul", "--args", "64,,64"], "--args: empty value"),
        (["matmul", "--args", "99999999999999999999999,64,64"], "does not fit int64"),
        (["best"], "usage: pypto-tune best LOG"),
        (["best", "/nonexistent/log.jsonl"], "no tuning log at /nonexistent/log.jsonl"),
        (["best", "/tmp"], "/tmp is a directory, not a tuning log"),
        (["list", "extra"], "unknown template(s) 'extra'; known: "),
        (["list", "--shell", "softmax", "extra"], "unknown template(s) 'extra'"),
        (
            ["toy_matmul", "--import", "no_such_module_xyz", "--args", "1"],
            "--import no_such_module_xyz",
        ),
    ],
)
def test_cli_bad_arguments_one_line_and_status_2(argv, message, capsys):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pypto-tune: error:") and message in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_workload_file_of_binary_bytes_is_refused_with_status_2(tmp_path, capsys):
    """Was: ``error: UnicodeDecodeError: ...`` and status 1."""
    path = tmp_path / "model.json"
    path.write_bytes(bytes(range(128, 256)))
    assert cli_main(["network", str(path), "--trials", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pypto-tune: error: {path}: not valid JSON")
    assert len(err.splitlines()) == 1


def test_the_cli_best_is_a_config_that_fits_the_template(tmp_path):
    """A record of another version of the template (its knobs no longer fit) was shown
    as the best of ``tune``, 1e-6 ms, though ``best`` and ``apply_history_best`` pass
    over it."""
    log = str(tmp_path / "stale.jsonl")
    task, default, a, b = _logged_default_and_two(log, 1.5, 1.2, 1.3)
    key, target = task.workload_key, task.target.key
    at.append_records(log, [at.Record(key, target, {"tile_i": [-1, 8]}, costs=[1e-9])])
    args = ["toy_matmul", "--import", "tuning_templates", "--args", "32,32,16", "--trials",
            "1", "--number", "1", "--repeat", "1", "--log", log, "--no-progress",
            "--confirm", "0"]  # fmt: skip
    out, err = _cli(args, tmp_path).communicate(timeout=300)
    assert "and 3 config(s) the log held before" in out, out + err
    assert "tile_i': [-1, 8]}" not in out and "1e-06 ms" not in out, out


def test_a_resumed_cli_run_counts_trials_not_the_baseline(tmp_path):
    """The default measured only as --confirm's baseline: "resuming: 2 trial(s)", one
    more, "best of 3 trial(s)" (was 4: the baseline counted in the summary)."""
    log = str(tmp_path / "resume.jsonl")
    task, default, a, b = _logged_default_and_two(log, 1.5, 1.2, 1.3)
    recs = at.load_records(log)
    log2 = str(tmp_path / "resume2.jsonl")
    at.append_records(log2, [dataclasses.replace(recs[0], tuner=CONFIRM), *recs[1:]])
    args = ["toy_matmul", "--import", "tuning_templates", "--args", "32,32,16", "--trials",
            "3", "--number", "1", "--repeat", "1", "--log", log2, "--no-progress",
            "--confirm", "0", "--resume"]  # fmt: skip
    out, err = _cli(args, tmp_path).communicate(timeout=300)
    assert "resuming: 2 trial(s)" in out and "best of 3 trial(s)" in out, out + err
    assert len(at.load_records(log2)) == 4


def test_cli_confirms_the_fastest_configs(tmp_path):
    log = tmp_path / "c.jsonl"
    args = ["toy_matmul", "--import", "tuning_templates", "--args", "32,32,16", "--trials", "5",
            "--tuner", "random", "--seed", "2", "--number", "1", "--repeat", "1",
            "--log", str(log), "--no-progress", "--confirm", "2"]  # fmt: skip
    out, err = _cli(args, tmp_path).communicate(timeout=300)
    assert "confirmed the 2 fastest: " in out, err
    recs = at.load_records(str(log))
    best = at.best_by_workload(recs)[(recs[0].workload, recs[0].target)]
    assert len(recs) > 5 and len(best.costs) == 3  # measured three times, one timing each
    assert f"(median of 3 timing(s))\n  config {best.config}" in out


def test_cli_list_and_best(tmp_path, capsys):
    assert cli_main(["list"]) == 0
    out = capsys.readouterr().out
    for name in (
        "matmul",
        "batch_matmul",
        "conv2d_nchw",
        "depthwise_conv2d_nchw",
        "softmax",
        "layernorm",
        "rmsnorm",
        "dense_bias_gelu",
    ):
        assert name in out
    log = tmp_path / "b.jsonl"
    w = at.workload_key("not_registered_here", [8, 8, 8])  # its knobs are not checked
    at.append_records(
        str(log),
        [
            at.Record(w, "x86-avx2", {"a": 1}, costs=[2e-3], flop=1e6),
            at.Record(w, "x86-avx2", {"a": 2}, costs=[1e-3], flop=1e6),
        ],
    )
    assert cli_main(["best", str(log)]) == 0
    out = capsys.readouterr().out
    assert "1 ms (1.0 GFLOP/s, of 2 records)" in out and "{'a': 2}" in out


def test_cli_list_of_named_templates_and_as_shell_words(capsys):
    assert cli_main(["list", "softmax", "attention"]) == 0
    out = capsys.readouterr().out
    heads = [line.split("(")[0] for line in out.splitlines() if not line.startswith(" ")]
    assert heads[1:] == ["softmax", "attention"]  # after the host line, those named, in order
    assert cli_main(["list", "--shell", "attention", "matmul"]) == 0
    lines = capsys.readouterr().out.splitlines()
    want = at.standard_workloads(["attention", "matmul"])
    assert len(lines) == len(want) and len(want) >= 3
    for line, w in zip(lines, want):
        name, args, trials, explore, *opts = line.split()
        assert (name, args, int(trials), int(explore)) == (
            w.template, ",".join(map(str, w.task_args)), w.trials, w.explore
        )  # fmt: skip
        assert opts == [x for k, v in w.measure for x in (f"--{k.replace('_', '-')}", f"{v:g}")]


def test_task_featurize_is_the_features_of_the_checked_lowering_as_scheduled():
    task = at.Task("matmul", (64, 64, 64), target="x86-avx2")
    cfg = task.config_space.default_config()
    s, args = task.instantiate(cfg)
    nest = lower_nest(s, args, name="candidate")
    assert "unrolled for" in str(nest) and "unrolled for" not in str(pt.lower(s, args))
    want = cost_models.featurize(nest, task.target)
    assert np.array_equal(task.featurize(cfg), want)
    assert np.array_equal(task.featurize(dict(cfg.values)), want)  # knob values work too
    with pytest.raises(at.SpaceError, match="tile_i"):
        task.featurize({**cfg.values, "tile_i": [3, 5]})


def test_a_record_serves_every_spelling_of_its_workload():
    """``gelu(9, 70)``, ``gelu(9, 70, "none")`` and ``gelu(9, 70, "none", "float32")`` are
    one workload: a record under any spelling serves a call under any other (as
    ``pypto-tune gelu --args 9,70,none`` records and the operator calls); another
    value of the argument is another workload."""
    tmpl = at.get_template("gelu")
    task = at.Task("gelu", (9, 70, "none"))
    default = task.config_space.default_config().values
    other = {**default, "unroll_j": 4 if default["unroll_j"] != 4 else 1}
    for written in ((9, 70, "none"), (9, 70), (9, 70, "none", "float32")):
        rec = at.Record(at.workload_key("gelu", written), task.target.name, other, [1e-6])
        with at.apply_history_best([rec]):
            for called in ((9, 70), (9, 70, "none"), (9, 70, "none", "float32")):
                assert tmpl.best_config(*called).values == other, (written, called)
            assert tmpl.best_config(9, 70, "tanh").values != other
    assert tmpl.short_args((9, 70, "none", "float32")) == (9, 70)
    assert tmpl.short_args((9, 70, "tanh", "float32")) == (9, 70, "tanh")


def test_the_fastest_record_of_either_spelling_is_taken():
    """Records under two spellings of one workload are pooled by speed: the faster one
    serves, whichever spelling came first; the user's records still come before the
    shipped ones."""
    tmpl = at.get_template("gelu")
    task = at.Task("gelu", (9, 70, "none"))
    default = task.config_space.default_config().values
    slow = {**default, "unroll_j": 4 if default["unroll_j"] != 4 else 1}
    fast = {**default, "unroll_j": 2 if default["unroll_j"] != 2 else 1}
    recs = [
        at.Record(at.workload_key("gelu", (9, 70)), task.target.name, slow, [2e-6]),
        at.Record(at.workload_key("gelu", (9, 70, "none")), task.target.name, fast, [1e-6]),
    ]
    for order in (recs, recs[::-1]):
        with at.apply_history_best(order):
            for called in ((9, 70), (9, 70, "none")):
                assert tmpl.best_config(*called).values == fast, called
    with at.apply_history_best([recs[1]]), at.apply_history_best([recs[0]]):
        assert tmpl.best_config(9, 70).values == slow  # the innermost context first


def test_a_config_that_failed_under_any_spelling_or_base_target_is_not_used():
    """A WRONG_ANSWER under one spelling (or on a target whose code is the base's) left
    out the config only there: its fast record under the other spelling (or target)
    was applied."""
    tmpl = at.get_template("matmul")
    space = tmpl.space(32, 32, 32, target="x86-avx512-bf16")
    default = space.default_config().values
    bad = {**default, "unroll_k": 8 if default["unroll_k"] != 8 else 1}
    other = {**default, "unroll_k": 2 if default["unroll_k"] != 2 else 1}

    def rec(args, target, config, costs, error=None):
        return at.Record(at.workload_key("matmul", args), target, config, costs, error=error)

    good = [rec((32, 32, 32), "x86-avx512", bad, [1e-6]),
            rec((32, 32, 32), "x86-avx512", other, [2e-6])]  # fmt: skip
    for failed in (rec((32, 32, 32, "float32"), "x86-avx512", bad, [], "WRONG_ANSWER"),
                   rec((32, 32, 32), "x86-avx512-bf16", bad, [], "WRONG_ANSWER")):  # fmt: skip
        with at.apply_history_best(good):
            assert tmpl.best_config(32, 32, 32, target="x86-avx512-bf16").values == bad
        with at.apply_history_best([*good, failed]):
            assert tmpl.best_config(32, 32, 32, target="x86-avx512-bf16").values == other
        with at.apply_history_best(good), at.apply_history_best([failed]):  # another context
            assert tmpl.best_config(32, 32, 32, target="x86-avx512-bf16").values == other


def test_records_carry_the_api_field_names_and_read_the_short_ones_of_earlier_logs():
    """``version`` and ``timestamp`` (API.md §4); logs written with ``v`` and ``ts``, and
    an error given as ``{"kind", "message"}``, read the same."""
    rec = at.Record(
        workload=at.workload_key("toy_matmul", [32, 32, 16]),
        target="x86-avx2",
        config={"tile_i": [-1, 2]},
        costs=[1e-4],
        flop=1.0,
        ts=1795000000.0,
    )
    d = json.loads(rec.to_json())
    assert d["version"] == 1 and d["timestamp"] == 1795000000.0 and "v" not in d
    old = {k: v for k, v in d.items() if k not in ("version", "timestamp")}
    back = at.Record.from_json(json.dumps({**old, "v": 1, "ts": 5.0}))
    assert back.ts == 5.0 and back.costs == rec.costs and back.config == rec.config
    err = {**d, "costs": [], "error": {"kind": "COMPILE_ERROR", "message": "gcc: no"}}
    back = at.Record.from_json(json.dumps(err))
    assert (back.error, back.error_msg) == ("COMPILE_ERROR", "gcc: no")


def test_a_template_name_that_is_no_file_name_is_refused():
    """It names the default log file: ../x wrote outside the logs directory."""
    for bad in ("../../escape", ".hidden", "a/b", ""):
        with pytest.raises(ValueError, match="template name .*: use letters, digits"):
            at.template(bad)


def test_a_template_named_as_a_built_in_replaces_it_and_says_so(monkeypatch):
    """API.md's own example registers a "matmul": it is the one ``get_template`` returns
    afterwards (the built-ins, loaded later, replaced it before), with a warning."""
    from autotune import task as task_mod

    monkeypatch.setattr(task_mod, "_TEMPLATES", dict(task_mod._TEMPLATES))
    monkeypatch.setattr(task_mod, "_BUILTINS_LOADED", False)  # as in a fresh process

    def mine(cfg, M, N, K):
        raise AssertionError("not instantiated here")

    mine.__module__ = "user_script"
    with pytest.warns(UserWarning, match="template 'matmul' .user_script.mine. replaces the "
                      "built-in one from now on"):  # fmt: skip
        at.template("matmul")(mine)
    assert at.get_template("matmul").func is mine
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        at.template("matmul")(mine)  # the user's own again: no warning


def test_a_space_prints_its_knobs_and_a_tuner_its_best_flops():
    """AutoTVM's ``print(task.config_space)`` and ``tuner.best_flops``."""
    task = at.Task("toy_matmul", (32, 32, 16))
    text = repr(task.config_space)
    assert text.startswith(f"ConfigSpace ({len(task.config_space)} configs, target ")
    assert "  tile_i (split): [[-1, 1], [-1, 2]" in text and "unroll (knob)" in text
    tuner = at.RandomTuner(task, seed=2)
    assert tuner.best_flops == 0.0
    tuner.tune(3, measure=FAST)
    assert tuner.best_flops > 0 and tuner.best_flops == pytest.approx(tuner.best_gflops * 1e9)


def test_the_runner_loads_the_built_object_without_lowering_it_again(monkeypatch):
    """A run's own cost is the kernel's: the runner takes the object its build made, by
    its cache key and signature (matmul 96^3 on Ray: 20-30 ms per run -> 3)."""
    from autotune.measure import candidate_specs
    from autotune.workers import Runner, build_worker, loadable

    task = at.Task("toy_matmul", (32, 32, 16))
    opt = dict(number=1, repeat=2, min_repeat_ms=0, flush_cache=False, check_correctness=True,
               rtol=1e-5, atol=1e-5, seed=0)  # fmt: skip
    (spec,) = candidate_specs(task, [task.config_space.get(3)], FAST)
    built = build_worker(spec)
    assert set(loadable(built)) == {"object_key", "cname", "signature"}
    runner = Runner()
    runner.prepare(spec, opt)

    def no_lowering(*a, **kw):
        raise AssertionError("lowered again")

    monkeypatch.setattr(pt.runtime, "lower", no_lowering)
    r = runner.run({**spec, **loadable(built)}, opt)
    assert len(r["costs"]) == 2 and all(c > 0 for c in r["costs"]), r
    assert "lowered again" in runner.run(spec, opt)["msg"]  # without the key: built again


# ---------------------------------------------------------------- edge cases of spaces


ONE = at.MeasureOption(number=1, repeat=1, timeout=5, n_parallel=1)


@pytest.mark.parametrize("tuner", [at.GATuner, at.GridSearchTuner, at.RandomTuner])
def test_repeated_split_candidates_are_one_config_and_every_tuner_covers_the_space(tuner):
    """The GA tuner spun forever on a repeated candidate, the grid stopped at the first
    batch of repeats (8 of 16 configs)."""
    task = at.Task("dup_split", (64,))
    assert len(task.config_space) == 8
    t = tuner(task, seed=0) if tuner is not at.GridSearchTuner else tuner(task)
    t.tune(20, measure_option=ONE)
    assert sorted(c.index for c, _ in t.history) == list(range(8))


def test_a_wrong_kernel_with_small_outputs_is_a_wrong_answer():
    """Outputs under 1e-3 passed an absolute 1e-3: a kernel writing zeros became best."""
    t = at.GridSearchTuner(at.Task("tiny_out", (256,)))
    t.tune(2, measure_option=ONE)
    errors = {c.values["broken"]: r.error for c, r in t.history}
    assert errors == {0: None, 1: at.ErrorKind.WRONG_ANSWER}
    assert t.best_config.values == {"broken": 0}


@pytest.mark.parametrize(
    "field, value, message",
    [("number", 0, "number must be a whole number of at least 1"),
     ("repeat", 0, "repeat must be a whole number of at least 1"),
     ("timeout", 0, "timeout must be a positive number of seconds"),
     ("timeout", float("nan"), "timeout must be a positive number of seconds"),
     ("build_timeout", -1, "build_timeout must be a positive"),
     ("atol", -1e-3, "atol must be a number of at least 0"),
     ("n_parallel", 0, "n_parallel must be a whole number"),
     ("threads", 0, "threads must be a whole number of at least 1")],
)  # fmt: skip
def test_a_measure_option_that_would_blame_every_config_is_refused(field, value, message):
    with pytest.raises(ValueError, match=f"MeasureOption.{message}"):
        at.MeasureOption(**{field: value})


def test_knob_values_are_what_the_records_hold():
    space = at.ConfigSpace()
    space.define_knob("unroll", list(np.array([1, 2, 4])))  # numpy ints: Python's
    assert [type(v) for v in space.knobs["unroll"].values] == [int, int, int]
    for bad in ({1, 2}, float("nan"), {1: "a"}, object()):
        with pytest.raises(at.SpaceError, match="cannot be a value; records are JSON"):
            at.ConfigSpace().define_knob("k", [bad, 0])
    with pytest.raises(at.SpaceError, match=r"candidate \[0, 0\] is not an order of the 2 axes"):
        at.ConfigSpace().define_reorder("r", [0, 1], policy="candidate", candidate=[[0, 0]])


def test_early_stopping_counts_the_trials_of_this_run(tmp_path):
    """AutoTVM's patience: a resumed run whose best is among the loaded records still
    measures early_stopping new configs (it stopped after one batch)."""
    task = at.Task("toy_matmul", (16, 16, 8))
    log = str(tmp_path / "t.jsonl")
    at.GridSearchTuner(task).tune(12, measure_option=ONE, callbacks=[at.log_to_file(log)])
    t = at.RandomTuner(task, seed=3)
    t.load_history(at.load_records(log))
    t.tune(30, measure_option=ONE, early_stopping=6)
    assert t.trials >= 6


def test_stale_records_fall_through_to_the_next_context_and_numpy_args_are_numbers():
    """An inner apply_history_best holding only records of another version of the
    template hid the outer one's fitting record (the default ran); np.int64 arguments
    failed in the JSON encoder."""
    task = at.Task("toy_matmul", (16, 16, 8))
    space, tgt, key = task.config_space, task.target.key, task.workload_key
    fits = space.get(3).to_json()
    stale = {**space.get(5).to_json(), "removed_knob": 1}
    tpl = at.get_template("toy_matmul")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with at.apply_history_best([at.Record(key, tgt, fits, [2e-6])]):
            with at.apply_history_best([at.Record(key, tgt, stale, [1e-6])]):
                assert tpl.best_config(16, 16, 8).values == fits
                assert tpl.best_config(np.int64(16), 16, np.int32(8)).values == fits


def test_records_of_either_spelling_resume_and_pick_best_keeps_a_fitting_record(tmp_path):
    """A log written as matmul(16, 16, 8, "float32") resumed 0 trials of
    matmul(16, 16, 8); pick_best kept only a faster record of an older template version,
    so the picked file gave the default config."""
    mm = at.Task("matmul", (16, 16, 16))
    long_key = at.workload_key("matmul", [16, 16, 16, "float32"])
    assert long_key != mm.workload_key
    cfgs = [mm.config_space.get(k).to_json() for k in range(3)]
    long = [at.Record(long_key, mm.target.key, c, [1e-6]) for c in cfgs]
    assert at.GridSearchTuner(mm).load_history(long) == 3
    assert at.XGBTuner(mm).load_history(long) == 3
    log = tmp_path / "long.jsonl"
    at.append_records(str(log), long)
    sched = at.TaskScheduler([mm], logs=str(log), tuner="random")  # raised IndexError
    assert sched.trials == 3 and sched.states[0].curve == [1e-6]
    task = at.Task("toy_matmul", (16, 16, 8))
    space, tgt = task.config_space, task.target.key
    tpl = at.get_template("toy_matmul")
    key = task.workload_key
    recs = [at.Record(key, tgt, space.get(k).to_json(), [1e-6 * (k + 1)]) for k in range(3)]
    stale = {**space.get(4).to_json(), "removed_knob": 1}
    src, dst = tmp_path / "all.jsonl", tmp_path / "best.jsonl"
    at.append_records(str(src), [*recs, at.Record(task.workload_key, tgt, stale, [1e-9])])
    at.pick_best(str(src), str(dst))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with at.apply_history_best(str(dst)):
            assert tpl.best_config(16, 16, 8).values == space.get(0).to_json()


def test_apply_history_best_reads_unchanged_logs_once(tmp_path, monkeypatch):
    """Each operator shape's first call entered apply_history_best() and parsed every
    log again (6 s a shape beside a 100k-line log); a log that changed is read again."""
    from autotune import dispatch

    task = at.Task("toy_matmul", (32, 32, 16))
    cfgs = [task.config_space.get(i).to_json() for i in range(2)]
    log = str(tmp_path / "mine.jsonl")
    at.append_records(log, [at.Record(task.workload_key, task.target.key, cfgs[0], [2e-6])])
    reads = []
    real = dispatch.load_records
    monkeypatch.setattr(dispatch, "load_records", lambda src: reads.append(src) or real(src))
    tmpl = at.get_template("toy_matmul")
    for _ in range(3):
        with at.apply_history_best([log]):
            assert tmpl.best_config(32, 32, 16).values == cfgs[0]
    assert len(reads) == 1
    at.append_records(log, [at.Record(task.workload_key, task.target.key, cfgs[1], [1e-6])])
    with at.apply_history_best([log]):
        assert tmpl.best_config(32, 32, 16).values == cfgs[1]
    assert len(reads) == 2
    recs = at.load_records(log)
    for _ in range(2):  # records given as objects: read as given, each time
        with at.apply_history_best(recs):
            assert tmpl.best_config(32, 32, 16).values == cfgs[1]
    assert len(reads) == 4
