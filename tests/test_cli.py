"""pypto-tune's subcommands, the user's record store and apply_history_best() defaults."""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tuning_templates  # noqa: F401  (registers the test templates)

import autotune as at
import pypto as pt
from autotune import confirm, store
from autotune.cli import COMMANDS
from autotune.cli import main as cli_main
from autotune.commands import plot as plot_cmd
from autotune.commands.common import (
    UsageError,
    add_measure_arguments,
    measure_option,
    parse_args_list,
)
from pypto.target import can_run

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
SHIPPED_TARGET = "x86-avx2"  # the records shipped today; any target's work the same way


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh user store."""
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _one_line_error(capsys, message):
    err = capsys.readouterr().err.strip()
    assert err.startswith("pypto-tune: error:") and message in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_help_exits_0():
    r = subprocess.run(
        [sys.executable, "-m", "autotune", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.startswith("usage: pypto-tune") and r.stderr == ""
    for name in COMMANDS:
        assert f"\n    {name}" in r.stdout  # each subcommand listed


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(command, capsys):
    assert cli_main([command, "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: pypto-tune {command}") and err == ""


def test_list_shows_arguments_docs_and_standard_workloads(capsys):
    assert cli_main(["list"]) == 0
    out = capsys.readouterr().out
    assert "conv2d_nchw(N, C, H, W, K, R, S, stride=1, padding=0, dtype='float32')" in out
    assert "matmul(M, N, K, dtype='float32')\n    C[i, j] = sum_k A[i, k] * B[k, j]" in out
    shipped = "x86-amx, x86-avx2, x86-avx512, x86-avx512-bf16"
    assert f"standard: --args 1024,1024,1024  (records for {shipped})" in out
    avx512 = "x86-amx, x86-avx512, x86-avx512-bf16"  # not measured as x86-avx2
    assert f"standard: --args 1,8,1024,64  (records for {avx512})" in out  # attention
    assert f"standard: --args 1,8,1024,64,True  (records for {avx512})" in out  # causal
    assert f"standard: --args 1,128,28,28,128,3,3,1,1  (records for {avx512})" in out  # winograd
    int8 = "x86-avx512, x86-avx512-bf16"
    assert f"standard: --args 128,3072,768,int8  (records for {int8})" in out
    # each template's first sentence, whole: a docstring's first line ended mid-phrase
    assert "    C[i, j] = sum_k A[i, k] * B[k, j]\n" in out
    assert " by F(2 x 2, 3 x 3) Winograd tiles\n" in out
    assert ". K[b, h, j, :]) V[b, h, j, :] over ``kv_len`` keys (default S)\n" in out


def test_args_read_true_false_and_none_as_python_does():
    """As a string, "False" would be true: ``attention ... --args 1,8,64,16,False`` would
    tune the causal attention, keyed as no call ever asks for it."""
    assert parse_args_list("1,8,64,16,False") == [1, 8, 64, 16, False]
    assert parse_args_list("4, 2.5, True, true, None, int8") == [4, 2.5, True, True, None, "int8"]
    with pytest.raises(UsageError, match="empty value"):
        parse_args_list("1,,2")


def test_show_knobs_default_and_best(capsys):
    assert cli_main(["show", "matmul", "--args", "1024,1024,1024", "--target", SHIPPED_TARGET]) == 0
    out = capsys.readouterr().out
    space = at.Task("matmul", (1024, 1024, 1024), target=SHIPPED_TARGET).config_space
    assert f"matmul(1024, 1024, 1024) on {SHIPPED_TARGET}: {len(space)} configs" in out
    for name in space.knobs:
        assert f"\n  {name} " in out
    assert f"default config {space.default_config().to_json()}" in out
    logs = store.shipped_logs(SHIPPED_TARGET)
    best = at.best_by_workload(at.load_records(logs))[
        (at.workload_key("matmul", [1024, 1024, 1024]), SHIPPED_TARGET)
    ]
    assert f"best recorded  {best.config}" in out


def test_best_json(tmp_path, capsys):
    log = tmp_path / "b.jsonl"
    w = at.workload_key("not_registered_here", [8, 8, 8])  # knobs not checked
    at.append_records(
        str(log),
        [
            at.Record(w, "x86-avx2", {"a": 1}, costs=[2e-3], flop=1e6),
            at.Record(w, "x86-avx2", {"a": 2}, costs=[1e-3, 3e-3, 1e-3], flop=1e6),
        ],
    )
    assert cli_main(["best", str(log), "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["workload"] == ["not_registered_here", [8, 8, 8]] and row["config"] == {"a": 2}
    assert row["seconds"] == pytest.approx(1e-3) and row["gflops"] == pytest.approx(1.0)
    assert row["records"] == 2 and row["target"] == "x86-avx2"


def test_best_keeps_targets_it_does_not_know_and_names_workloads_it_drops(tmp_path, capsys):
    """A record of a target this version lacks is listed (its knobs are not checked
    here; it had been 'none valid'); a workload whose records fit nowhere is named."""
    log = tmp_path / "b.jsonl"
    mm = at.Task("matmul", (16, 16, 16))
    cfg = mm.config_space.default_config().to_json()
    at.append_records(str(log), [
        at.Record(mm.workload_key, "riscv-rvv", cfg, costs=[1e-3]),
        at.Record(at.workload_key("matmul", [16, 16]), "x86-avx2", cfg, costs=[1e-3]),
    ])  # fmt: skip
    assert cli_main(["best", str(log), "--json"]) == 0
    out = capsys.readouterr()
    (row,) = [json.loads(line) for line in out.out.splitlines()]
    assert row["target"] == "riscv-rvv" and row["config"] == cfg
    assert '["matmul",[16,16]] on x86-avx2: no record fits the template' in out.err


def _target_this_machine_cannot_run():
    for name in ("aarch64-neon", "x86-avx512", "x86-avx2"):
        if not can_run(pt.Target(name)):
            return name
    pytest.skip("this machine runs every named target")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--timeout", "nan"], "--timeout must be a finite number, got nan"),
        (["--timeout", "inf"], "--timeout must be a finite number, got inf"),
        (["--log", "{tmp}"], "is a directory; give a file"),
        (["--log", "{tmp}/afile/x.jsonl"], "afile is a file, not a directory"),
        (["--log", "{tmp}/fifo"], "not a regular file (a pipe or a device)"),
        (["--seed", "-1"], "argument --seed: --seed must be non-negative, got -1"),
    ],
)
def test_tune_refuses_bad_arguments_before_measuring(extra, message, tmp_path, home, capsys):
    (tmp_path / "afile").write_text("")
    os.mkfifo(tmp_path / "fifo")  # (opened, it would block until read)
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    assert cli_main(["tune", "matmul", "--args", "16,16,16", *extra]) == 2
    _one_line_error(capsys, message)
    assert not home.exists()  # nothing was measured nor logged


def test_version_and_a_lone_unknown_option(capsys):
    assert cli_main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"pypto-tune {pt.__version__}"
    assert cli_main(["-v"]) == 2  # was KeyError: None
    _one_line_error(capsys, "unrecognized arguments: -v; a COMMAND comes first")


def test_tune_refuses_an_empty_workload_and_a_foreign_target(home, capsys):
    assert cli_main(["matmul", "--args", "0,16,16"]) == 2
    _one_line_error(capsys, "--args 0,16,16: an empty workload (input A has shape (0, 16))")
    other = _target_this_machine_cannot_run()
    assert cli_main(["tune", "matmul", "--args", "16,16,16", "--target", other]) == 2
    _one_line_error(capsys, f"--target {other}: this machine cannot run code for {other}")
    with pytest.MonkeyPatch.context() as mp:  # no --target: the variable that chose it
        mp.setenv("PYPTO_TARGET", other)
        assert cli_main(["tune", "matmul", "--args", "16,16,16"]) == 2
    _one_line_error(capsys, f"PYPTO_TARGET={other}: this machine cannot run code for {other}")
    assert not home.exists()


def test_tune_appends_to_the_users_store_and_history_prefers_it(tmp_path, home):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, ROOT]), PYPTO_HOME=str(home))
    args = ["toy_matmul", "--import", "tuning_templates", "--args", "16,16,8", "--trials", "3",
            "--tuner", "random", "--seed", "1", "--number", "1", "--repeat", "1",
            "--no-progress", "--confirm", "0"]  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    log = home / "logs" / "toy_matmul.jsonl"
    assert f"log {log}" in r.stdout
    assert len(at.load_records(str(log))) == 3
    assert os.listdir(tmp_path) == ["home"]  # nothing written where it ran
    best = at.best_by_workload(at.load_records(str(log)))
    ((_, target), rec), *_ = best.items()
    with at.apply_history_best():
        s, tensors = at.get_template("toy_matmul")(16, 16, 8, target=target)
    a, b = np.random.rand(16, 8).astype("f4"), np.random.rand(8, 16).astype("f4")
    np.testing.assert_allclose(pt.build(s, tensors)(a, b), a @ b, rtol=1e-5)
    with at.apply_history_best():
        assert at.dispatch.lookup(rec.workload, target)[0] == rec.config
    assert at.dispatch.lookup(rec.workload, target) == []  # outside: the default config


def test_resume_with_the_default_log_counts_the_shipped_records(home, capsys):
    if not can_run(pt.Target(SHIPPED_TARGET)):
        pytest.skip(f"this machine cannot run {SHIPPED_TARGET}, the shipped records' target")
    argv = ["matmul", "--args", "512,512,512", "--target", SHIPPED_TARGET, "--resume",
            "--trials", "1", "--no-progress"]  # fmt: skip
    assert cli_main(argv) == 0  # every trial is already shipped: nothing to measure
    out = capsys.readouterr().out
    user, shipped = store.user_log("matmul"), os.path.join(SHIPPED_TARGET, "matmul.jsonl")
    key = (at.workload_key("matmul", [512, 512, 512]), SHIPPED_TARGET)
    recs = at.load_records(store.shipped_logs(SHIPPED_TARGET))
    n = sum((r.workload, r.target) == key for r in recs)
    line = next(x for x in out.splitlines() if x.startswith("resuming: "))
    assert f"{shipped} ({n} record(s))" in line and user not in line  # only logs that hold some
    assert "softmax.jsonl" not in line
    best = at.best_by_workload(recs)[key]
    assert "a shipped record: measured where the package was made)" in out
    assert f"config {best.config}\n  log {user}" in out
    assert at.load_records(user) == []  # nothing measured, nothing appended


def test_resume_counts_and_ranks_the_records_of_every_spelling(home, capsys):
    """``gelu(8,64)`` resumed from a log that holds ``gelu(8,64,"none")``: those records
    are the same workload's, counted in the "resuming" line and ranked with the new."""
    task = at.Task("gelu", (8, 64))
    default = task.config_space.default_config().values
    fast = {**default, "unroll_j": 2 if default["unroll_j"] != 2 else 1}
    log = os.path.join(store.logs_dir(), "gelu.jsonl")
    other = at.workload_key("gelu", (8, 64, "none"))
    at.append_records(log, [at.Record(other, task.target.key, fast, [1e-9], flop=task.flop)])
    argv = ["gelu", "--args", "8,64", "--resume", "--trials", "2", "--no-progress",
            "--confirm", "0", "--log", log]  # fmt: skip
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert f"resuming: 1 trial(s) of this workload already in {log} (1 record(s))" in out
    assert f"config {fast}\n" in out  # the earlier record, 1 ns, stays the best


def test_no_argument_history_uses_the_users_records_first_then_the_shipped(home):
    key = at.workload_key("softmax", [4096, 4096])
    shipped = at.best_by_workload(at.load_records(store.shipped_logs(SHIPPED_TARGET)))
    shipped_best = shipped[(key, SHIPPED_TARGET)].config
    with at.apply_history_best():
        assert at.dispatch.lookup(key, SHIPPED_TARGET)[0] == shipped_best
    space = at.get_template("softmax").space(4096, 4096)
    mine = next(
        c.to_json() for c in map(space.get, range(len(space))) if c.to_json() != shipped_best
    )
    at.append_records(store.user_log("softmax"), [at.Record(key, SHIPPED_TARGET, mine, [1.0])])
    with at.apply_history_best():
        ranked = at.dispatch.lookup(key, SHIPPED_TARGET)
    assert ranked[0] == mine and shipped_best in ranked[1:]  # the shipped ones follow
    assert store.default_logs()[0] == store.user_log("softmax")


def test_validate_default_and_best_configs(capsys):
    assert cli_main(["validate", "matmul", "--args", "48,40,24"]) == 0
    out = capsys.readouterr().out
    assert "default config {" in out and "ok against the reference" in out
    assert "no recorded config for" in out


def test_validate_reports_a_wrong_config(home, capsys):
    key = at.workload_key("toy_matmul", [16, 16, 8])
    target = pt.Target("host").key
    cfg = {"tile_i": [-1, 2], "tile_j": [-1, 4], "unroll": 0}
    at.append_records(store.user_log("toy_matmul"), [at.Record(key, target, cfg, [1e-6])])
    tpl = at.get_template("toy_matmul")
    good = tpl.reference
    tpl.reference = lambda a, b: a @ b + 1.0  # a reference the kernels cannot match
    try:
        code = cli_main(["validate", "toy_matmul", "--args", "16,16,8"])
    finally:
        tpl.reference = good
    out = capsys.readouterr().out
    assert code == 1
    assert f"best recorded config {cfg}: WRONG against the reference (max abs error 1)" in out


def test_train_model_writes_to_the_users_store(home, tmp_path, capsys):
    shipped = os.path.join(store.shipped_dir(), SHIPPED_TARGET, "softmax.jsonl")
    log = str(tmp_path / "few.jsonl")
    at.append_records(log, [r for r in at.load_records(shipped) if r.ok][:12])
    before = {p: os.path.getmtime(p) for p in store.shipped_logs()}
    assert cli_main(["train-model", log]) == 0
    out = home / "models" / f"{SHIPPED_TARGET}.json"
    said = capsys.readouterr().out
    assert said.startswith("training on 12 record(s) of 1 target(s) from 1 log(s)")
    assert f"{SHIPPED_TARGET}: trained on 12 configs -> {out}" in said and out.exists()
    assert {p: os.path.getmtime(p) for p in store.shipped_logs()} == before
    assert cli_main(["train-model", str(home / "none.jsonl")]) == 2
    _one_line_error(capsys, "no tuning log at")
    strange = str(tmp_path / "strange.jsonl")  # records of a template not registered here
    at.append_records(strange, [
        at.Record(r.workload.replace('"softmax"', '"not_here"'), r.target, r.config, r.costs)
        for r in at.load_records(log)
    ])  # fmt: skip
    assert cli_main(["train-model", strange, "--import", "json"]) == 1
    assert "templates not registered here were skipped: not_here; --import the module" in (
        capsys.readouterr().out
    )


def test_best_skips_configs_that_do_not_fit_the_template_as_apply_history_best(tmp_path, capsys):
    """A faster record from another version of the template (knobs it no longer has)
    is not reported as the best: apply_history_best would not use it."""
    log = tmp_path / "v.jsonl"
    w = at.workload_key("matmul", [8, 8, 8])
    good = at.get_template("matmul").space(8, 8, 8, target="x86-avx2").default_config()
    stale = dict(good.values, par="nope")
    at.append_records(
        str(log),
        [
            at.Record(w, "x86-avx2", stale, costs=[1e-9], flop=1e6),
            at.Record(w, "x86-avx2", good.values, costs=[1e-3], flop=1e6),
        ],
    )
    assert cli_main(["best", str(log), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["config"] == good.values
    assert "skipped 1 faster record(s) whose configs do not fit" in out.err
    with at.apply_history_best(str(log)), pytest.warns(UserWarning, match="do not fit the knobs"):
        assert (
            at.get_template("matmul").best_config(8, 8, 8, target="x86-avx2").values == good.values
        )


def test_plot_writes_a_png_of_best_so_far(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    logs = []
    w = at.workload_key("matmul", [8, 8, 8])
    for name, costs in (("random", [3e-3, 2e-3, 4e-3]), ("xgb", [2e-3, 1e-3, 1.5e-3])):
        logs.append(str(tmp_path / f"{name}.jsonl"))
        recs = [at.Record(w, "x86-avx2", {"a": i}, [c], flop=1e6) for i, c in enumerate(costs)]
        at.append_records(logs[-1], recs)
    png = tmp_path / "curves.png"
    assert cli_main(["plot", *logs, "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote " in capsys.readouterr().out
    assert plot_cmd.curves(at.load_records(logs[1])) == [(1, 0.5), (2, 1.0), (3, 1.0)]


def test_records_name_their_tuner_and_plot_draws_a_line_per_tuner(tmp_path, monkeypatch):
    """Two tuners appending to one log: each record says which proposed it."""
    monkeypatch.setattr(confirm, "BUSY", float("inf"))  # (beside a parallel test run)
    log = str(tmp_path / "both.jsonl")
    task = at.Task("matmul", (16, 16, 16))
    fast = at.MeasureOption(number=1, repeat=1)
    for tuner in (at.RandomTuner(task, seed=1), at.GridSearchTuner(task)):
        tuner.tune(2, measure=fast, callbacks=[at.log_to_file(log)])
    made = at.confirm_best(task, log, 1, measure=fast)  # the fastest (and the default) again
    recs = at.load_records(log)
    assert made >= 2 and len(recs) == 4 + made
    assert [r.tuner for r in recs] == ["random", "random", "grid", "grid"] + ["confirm"] * made
    (lines,) = plot_cmd.series([log]).values()
    assert sorted(lines) == ["both: grid", "both: random"]  # re-measurements are no trials
    assert all(len(v) == 2 for v in lines.values())


def test_plot_without_matplotlib_says_what_to_install(tmp_path, monkeypatch, capsys):
    log = tmp_path / "l.jsonl"
    at.append_records(str(log), [at.Record(at.workload_key("m", [1]), "generic", {}, [1.0])])
    monkeypatch.setattr(plot_cmd, "plt", None)
    assert cli_main(["plot", str(log), "-o", str(tmp_path / "x.png")]) == 2
    _one_line_error(capsys, "plot needs matplotlib, which is not installed: pip install")


def test_flush_cache_measures_each_call_cold(tmp_path, capsys):
    """--flush-cache: the caches evicted before each repeat, one call per repeat unless
    --number says otherwise; the candidates are measured (a cost per repeat)."""
    p = argparse.ArgumentParser()
    add_measure_arguments(p)
    plain, cold = measure_option(p.parse_args([])), measure_option(p.parse_args(["--flush-cache"]))
    assert (plain.number, plain.flush_cache, cold.number, cold.flush_cache) == (5, False, 1, True)
    assert measure_option(p.parse_args(["--flush-cache", "--number", "3"])).number == 3
    log = tmp_path / "cold.jsonl"
    args = ["tune", "toy_matmul", "--args", "32,32,16", "--trials", "2", "--tuner", "random",
            "--repeat", "2", "--flush-cache", "--confirm", "0", "--log", str(log),
            "--no-progress"]  # fmt: skip
    assert cli_main(args) == 0
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(recs) == 2 and all(len(r["costs"]) == 2 and not r["error"] for r in recs)


def test_a_workload_larger_than_the_machine_is_refused_in_one_line(capsys):
    """Was: an XGBoostError with a C++ backtrace, or numpy's MemoryError mid-tuning."""
    code = cli_main(["matmul", "--args", "1000000,1000000,1000000", "--trials", "1"])
    err = capsys.readouterr().err  # 12 TB: more than any machine the tests run on
    assert code == 2 and err.count("\n") == 1
    assert "--args 1000000,1000000,1000000: the workload's arrays take 1.12e+04 GiB" in err


def test_a_reader_that_leaves_ends_the_command_quietly():
    """``pypto-tune list | head``: the closed pipe ends it with 141 and no error."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "list"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root,
    )  # fmt: skip
    proc.stdout.close()  # the reader leaves before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""


def test_the_store_is_made_private_and_an_open_one_refused(home, tmp_path, capsys, monkeypatch):
    """Logs in a store others may write could be fed records that choose the user's
    configs: the store pypto makes is 0700 (its logs 0600) whatever the umask, and one
    others may write is refused before anything is measured."""
    import stat

    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "cache"))
    old = os.umask(0)
    try:
        assert cli_main(["tune", "matmul", "--args", "8,8,8", "--trials", "1", "--confirm", "0",
                         "--no-progress"]) == 0  # fmt: skip
    finally:
        os.umask(old)
    log = home / "logs" / "matmul.jsonl"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "logs").stat().st_mode) == 0o700
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and at.load_records(str(log))
    capsys.readouterr()
    home.chmod(0o777)
    assert cli_main(["tune", "matmul", "--args", "8,8,8", "--trials", "1"]) == 2
    _one_line_error(capsys, "may be written by other users (mode 777)")
    assert len(at.load_records(str(log))) == 1  # nothing measured


def test_a_log_written_from_python_is_private_as_the_cli_makes_it(home):
    """The README's ``at.log_to_file(at.store.user_log(...))`` makes the log as
    ``pypto-tune`` does: 0600, in a logs directory made 0700."""
    import stat

    key = at.workload_key("softmax", (4, 8))
    old = os.umask(0o022)
    try:
        at.append_records(store.user_log("softmax"), [at.Record(key, "x86-avx2", {}, [1.0])])
    finally:
        os.umask(old)
    assert stat.S_IMODE((home / "logs").stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "logs" / "softmax.jsonl").stat().st_mode) == 0o600


def test_a_log_in_the_store_that_cannot_be_read_is_passed_over(home):
    """A dangling symlink (or another user's log) in the store: a warning naming it, and
    the records of the others and the shipped ones still serve."""
    logs = home / "logs"
    logs.mkdir(parents=True)
    (logs / "softmax.jsonl").symlink_to(home / "gone.jsonl")
    (logs / "gelu.jsonl").mkdir()  # not a file either
    with pytest.warns(UserWarning, match=r"softmax.jsonl: cannot read this tuning log"):
        with at.apply_history_best():
            s, tensors = at.get_template("matmul")(16, 16, 16)
    a, b = np.ones((16, 16), np.float32), np.ones((16, 16), np.float32)
    np.testing.assert_allclose(pt.build(s, tensors)(a, b), a @ b)


def test_train_model_checks_its_output_before_training(tmp_path, capsys, monkeypatch):
    """An --out that cannot be made is refused at once, not after the training."""
    (tmp_path / "file").write_text("")
    log = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "tuning_logs", "x86-avx2", "softmax.jsonl")  # fmt: skip
    trained = []
    monkeypatch.setattr("autotune.commands.train_model.train", lambda *a, **k: trained.append(1))
    out = tmp_path / "file" / "models"
    assert cli_main(["train-model", log, "--out", str(out)]) == 2
    _one_line_error(capsys, f"--out {out}: cannot create it (Not a directory)")
    assert trained == []


def test_the_summary_counts_the_logs_trials_and_this_runs(home, tmp_path, capsys):
    """A second run into the same log (without --resume) may find its best among the
    first run's trials: the summary says how many it chose from."""
    log = str(tmp_path / "mm.jsonl")
    run = ["tune", "matmul", "--args", "8,8,8", "--tuner", "grid", "--confirm", "1",
           "--no-progress", "--log", log, "--trials"]  # fmt: skip
    assert cli_main([*run, "2"]) == 0  # configs 0 and 1; confirmed with the default
    assert "best of 2 trial(s):" in capsys.readouterr().out
    held = len({json.dumps(r.config, sort_keys=True) for r in at.load_records(log)})
    assert held >= 2  # (3 where the target's default config is neither 0 nor 1)
    assert cli_main([*run, "1"]) == 0  # config 0 again
    out = capsys.readouterr().out
    assert f"best of 1 trial(s) and {held} config(s) the log held before:" in out


def test_shipped_logs_spell_their_fields_as_the_api_does():
    """API.md §4: ``version`` and ``timestamp``; a reader written to the contract reads
    every shipped line (pypto also reads the older ``v`` and ``ts``)."""
    logs = store.shipped_logs()
    assert logs
    for path in logs:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                d = json.loads(line)
                assert d["version"] == 1 and d["timestamp"] > 0, f"{path}:{n}"
                assert "v" not in d and "ts" not in d, f"{path}:{n}"
