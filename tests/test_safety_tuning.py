"""Safety of building and tuning (issue 15): a verified build cache, compiler timeouts,
environment faults kept apart from candidates' faults, fresh inputs per candidate,
records that cannot poison a log, cost models that cannot break the tuner, and
tuning processes that leave no orphans."""

import hashlib
import importlib
import json
import math
import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import uuid
import warnings

import numpy as np
import pytest
import safety_templates  # noqa: F401  (registers the test templates)
import tuning_templates  # noqa: F401

import autotune as at
import cost_models as cm
import pypto as pt
from autotune.cli import main as cli_main
from autotune.measure import _children_ignore_sigint
from pypto import runtime
from pypto.target import can_run

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
FAST = at.MeasureOption(number=1, repeat=1, timeout=5, n_parallel=2)


def _kernel(name: str):
    """A small kernel whose C differs by ``name`` (so each test compiles afresh)."""
    A = pt.placeholder((8,), "float32", name="A")
    B = pt.compute((8,), lambda i: A[i] * 2.0 + 1.0, name=name)
    return pt.create_schedule(B.op), [A, B]


def _check_kernel(mod):
    a = np.arange(8, dtype=np.float32)
    b = np.empty(8, np.float32)
    mod(a, b)
    np.testing.assert_allclose(b, a * 2.0 + 1.0)


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(d))
    return d


# ---------------------------------------------------------------- the build cache


def test_cache_dir_is_created_private(private_cache):
    name = _unique("priv")
    _check_kernel(pt.build(*_kernel(name), name=name))
    assert stat.S_IMODE(os.stat(private_cache).st_mode) == 0o700
    objs = [p for p in private_cache.iterdir() if p.suffix == ".so"]
    assert objs and all(stat.S_IMODE(p.stat().st_mode) & 0o022 == 0 for p in objs)
    assert all((p.parent / (p.name + ".sha256")).exists() for p in objs)


def _foreign_library(tmp_path, marker) -> bytes:
    """A shared object whose constructor creates ``marker`` when it is loaded."""
    src = tmp_path / "foreign.c"
    src.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        f'  FILE* f = fopen("{marker}", "w"); if (f) fclose(f);\n'
        "}\n"
    )
    out = tmp_path / "foreign.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    return out.read_bytes()


def _cached_object(name):
    """Compile (but do not load) the kernel ``name``; the path of its cached object."""
    s, args = _kernel(name)
    src = pt.build(s, args, name=name, emit_only=True)
    return runtime.compile_source(src, pt.Target("host").cflags)


@pytest.mark.parametrize(
    "forge", ["plain", "with_hash_group_writable", "with_hash_other_owner", "symlink_with_hash"]
)
def test_foreign_object_in_the_cache_is_never_loaded(private_cache, tmp_path, forge):
    if forge == "with_hash_other_owner" and os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    marker = tmp_path / "constructor_ran"
    foreign = _foreign_library(tmp_path, marker)
    name = _unique("foreign")
    so = _cached_object(name)
    with open(so, "wb") as f:
        f.write(foreign)
    if forge != "plain":  # the hash beside it matches the foreign object
        with open(so + ".sha256", "w") as f:
            f.write(hashlib.sha256(foreign).hexdigest())
        if forge == "with_hash_group_writable":
            os.chmod(so, 0o775)
        elif forge == "with_hash_other_owner":
            os.chown(so, 12345, -1)
        else:  # the object a link to a library elsewhere
            elsewhere = tmp_path / "elsewhere.so"
            os.replace(so, elsewhere)
            os.symlink(elsewhere, so)
    mod = pt.build(*_kernel(name), name=name)
    _check_kernel(mod)
    assert not marker.exists(), "the foreign object's constructor ran"
    assert open(mod.lib_path, "rb").read() != foreign


def test_empty_or_truncated_object_is_rebuilt(private_cache):
    for cut in (0, 100):
        name = _unique("trunc")
        so = _cached_object(name)
        with open(so, "r+b") as f:
            f.truncate(cut)
        _check_kernel(pt.build(*_kernel(name), name=name))  # was: OSError file too short


def _fake_cc(tmp_path, body: str) -> str:
    path = tmp_path / "fake-cc"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def _garbage_cc(tmp_path) -> str:
    """A "compiler" that exits 0 having written 7 bytes that are no object to -o's path."""
    return _fake_cc(
        tmp_path,
        """\
        prev=""
        for a in "$@"; do [ "$prev" = "-o" ] && printf garbage > "$a"; prev="$a"; done
        exit 0
        """,
    )


@pytest.mark.parametrize(
    "cc, match",
    [
        ("/nonexistent/cc", "cannot run the C compiler '/nonexistent/cc'"),
        ("/bin/false", "cannot build even a trivial kernel with these flags \\(exit 1\\)"),
        ("/bin/true", "reported success but wrote no object"),
        ("garbage", "wrote 7 bytes that are not an ELF object"),
    ],
)
def test_a_broken_compiler_is_an_environment_error(private_cache, tmp_path, monkeypatch, cc, match):
    name = _unique("envcc")
    monkeypatch.setenv("CC", _garbage_cc(tmp_path) if cc == "garbage" else cc)
    with pytest.raises(pt.BuildEnvironmentError, match=match):
        pt.build(*_kernel(name), name=name)
    monkeypatch.delenv("CC")
    _check_kernel(pt.build(*_kernel(name), name=name))  # nothing bad was cached


def test_a_source_the_compiler_rejects_is_not_an_environment_error(
    private_cache, tmp_path, monkeypatch
):
    cc = _fake_cc(
        tmp_path,
        """\
        for a in "$@"; do case "$a" in *.c) src="$a";; esac; done
        if grep -q reject_me "$src"; then echo "error: rejected" >&2; exit 1; fi
        exec cc "$@"
        """,
    )
    monkeypatch.setenv("CC", cc)
    with pytest.raises(pt.BuildError, match="the C compiler failed \\(exit 1\\)") as e:
        pt.build(*_kernel("reject_me"), name="reject_me")
    assert not isinstance(e.value, pt.BuildEnvironmentError) and "rejected" in e.value.stderr


def test_a_directory_under_an_objects_name_is_an_environment_error(private_cache):
    name = _unique("dir")
    so = _cached_object(name)
    os.unlink(so)
    os.mkdir(so)
    with pytest.raises(pt.BuildEnvironmentError, match="cannot remove the damaged build cache"):
        pt.build(*_kernel(name), name=name)
    os.rmdir(so)
    _check_kernel(pt.build(*_kernel(name), name=name))


def test_another_entrys_object_and_hash_copied_under_a_key_do_not_verify(private_cache):
    """The hash covers the entry's key: a backup tool restoring the wrong pair of files
    had the x3 kernel answer for the x2 one."""
    one, two = _unique("pair"), _unique("pair")
    so_one, so_two = _cached_object(one), _cached_object(two)
    for ext in ("", ".sha256"):
        with open(so_two + ext, "rb") as f, open(so_one + ext, "wb") as g:
            g.write(f.read())
    mod = pt.build(*_kernel(one), name=one)
    _check_kernel(mod)
    data = open(mod.lib_path, "rb").read()  # rebuilt: its own kernel's symbol, not the other's
    assert one.encode() in data and two.encode() not in data


def test_a_full_disk_is_an_environment_error_naming_the_entry(private_cache, tmp_path, monkeypatch):
    """Was: a bare OSError, or the compiler's failure blamed on the source (a tuner then
    recorded every candidate as a COMPILE_ERROR that --resume never measured again)."""
    import errno

    from pypto import cache

    def full(path, data, mode=0o600):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    name = _unique("full")
    with monkeypatch.context() as m:
        m.setattr(cache, "atomic_write", full)
        with pytest.raises(pt.BuildEnvironmentError, match=r"cannot write the build cache entry "
                           r".*\.c: No space left on device"):  # fmt: skip
            pt.build(*_kernel(name), name=name)
    monkeypatch.setenv("CC", _fake_cc(tmp_path, """\
        case "$*" in *--version*|*probe*) exec cc "$@";; esac
        echo "ld: final link failed: No space left on device" >&2; exit 1
        """))  # fmt: skip
    with pytest.raises(pt.BuildEnvironmentError, match="could not write its output into the "
                       "build cache .*: No space left on device"):  # fmt: skip
        pt.build(*_kernel(name), name=name)
    _tuning_stops_with_nothing_recorded(tmp_path, "No space left on device")


def _tuning_stops_with_nothing_recorded(tmp_path, message):
    log = tmp_path / "t.jsonl"
    tuner = at.RandomTuner(at.Task("toy_matmul", (16, 16, 8)), seed=1)
    with pytest.raises(at.EnvironmentFault, match=message):
        tuner.tune(3, measure=FAST, callbacks=[at.log_to_file(log)])
    assert _log_records(log) == []


def test_a_compiler_killed_by_a_signal_is_named_and_its_candidate_built_again_alone(
    private_cache, tmp_path, monkeypatch
):
    """A compiler the out-of-memory killer took was 'failed (exit -9)' and its candidate
    a COMPILE_ERROR for good; now the signal is named, and a tuner builds it once more."""
    always = _fake_cc(tmp_path, """\
        case "$*" in *--version*|*probe*) exec cc "$@";; esac
        kill -9 $$
        """)  # fmt: skip
    monkeypatch.setenv("CC", always)
    name = _unique("killed")
    with pytest.raises(pt.BuildError, match=r"killed by SIGKILL \(out of memory\?\)"):
        pt.build(*_kernel(name), name=name)
    task = at.Task("toy_matmul", (16, 16, 8))
    cfg = task.config_space.default_config()
    (r,) = at.measure(task, [cfg], FAST)
    assert r.error is at.ErrorKind.COMPILE and "(twice, the second time alone)" in r.error_msg
    once = tmp_path / "killed-once"  # the first compile of a kernel is killed, no other
    monkeypatch.setenv("CC", _fake_cc(tmp_path, f"""\
        case "$*" in *--version*|*probe*) exec cc "$@";; esac
        if [ ! -e {once} ]; then touch {once}; kill -9 $$; fi
        exec cc "$@"
        """))  # fmt: skip
    (r,) = at.measure(task, [task.config_space.get(1)], FAST)
    assert r.error is None, r.error_msg


def test_a_compiler_killed_on_every_kernel_is_the_environments_fault(
    private_cache, tmp_path, monkeypatch
):
    """Killed on a trivial kernel too: the compiler, not the candidate, is at fault;
    a tuner stops with nothing recorded (each config had been a COMPILE_ERROR for good)."""
    monkeypatch.setenv("CC", _fake_cc(tmp_path, """\
        case "$*" in *--version*) exec cc "$@";; esac
        kill -SEGV $$
        """))  # fmt: skip
    name = _unique("segv")
    with pytest.raises(pt.BuildEnvironmentError, match=r"trivial kernel .*killed by SIGSEGV"):
        pt.build(*_kernel(name), name=name)
    _tuning_stops_with_nothing_recorded(tmp_path, "killed by SIGSEGV")


def test_temporaries_of_killed_builds_are_removed_after_an_hour(private_cache):
    from pypto import cache

    private_cache.mkdir(mode=0o700)
    old, new = private_cache / ".tmp-old.so", private_cache / ".tmp-new.so"
    for p in (old, new):
        p.write_bytes(b"half an object")
    os.utime(old, (time.time() - 2 * cache.STALE_S,) * 2)
    cache._swept.discard(str(private_cache))
    name = _unique("sweep")
    _check_kernel(pt.build(*_kernel(name), name=name))
    assert not old.exists() and new.exists()


def test_unusable_cache_dir_is_an_environment_error(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "file" / "cache"))
    with pytest.raises(pt.BuildEnvironmentError, match="cannot create the build cache directory"):
        pt.build(*_kernel("nocache"), name="nocache")
    if os.getuid() == 0:  # only root can give a directory away
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 12345, -1)
        monkeypatch.setenv("PYPTO_CACHE_DIR", str(theirs))
        with pytest.raises(pt.BuildEnvironmentError, match="belongs to another user"):
            pt.build(*_kernel("theirs"), name="theirs")


def test_an_open_cache_dir_is_refused_and_left_as_it_is(tmp_path, monkeypatch):
    """Others could plant objects in it; its mode is the user's business (a team
    directory's, or /tmp's): refused, not changed."""
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o2775)
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(d))
    name = _unique("open")
    msg = r"may be written by other users \(mode 2775\).*chmod go-w it, or set"
    with pytest.raises(pt.BuildEnvironmentError, match=msg):
        pt.build(*_kernel(name), name=name)
    assert stat.S_IMODE(d.stat().st_mode) == 0o2775
    new = tmp_path / "made" / "cache"  # made by pypto: private, whatever the umask
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(new))
    old = os.umask(0)
    try:
        _check_kernel(pt.build(*_kernel(name), name=name))
    finally:
        os.umask(old)
    assert stat.S_IMODE(new.stat().st_mode) == 0o700


def test_a_dangling_cache_symlink_and_roots_dirs_in_another_users_home_are_named(
    tmp_path, monkeypatch
):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(link))
    with pytest.raises(pt.BuildEnvironmentError, match=r"link is a symlink to .*nowhere, which"):
        pt.build(*_kernel("dangling"), name="dangling")
    if os.geteuid() != 0:
        pytest.skip("only root can create directories in another user's")
    theirs = tmp_path / "home"
    theirs.mkdir()
    os.chown(theirs, 12345, -1)
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(theirs / ".cache" / "pypto"))
    with pytest.raises(pt.BuildEnvironmentError, match=r"would be created by root inside .*home"
                                                      r", which belongs to uid 12345"):  # fmt: skip
        pt.build(*_kernel("sudo_e"), name="sudo_e")
    assert list(theirs.iterdir()) == []


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] in "ZX"
    except FileNotFoundError:
        return True


def test_build_timeout_kills_the_whole_compiler(private_cache, tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    cc = _fake_cc(
        tmp_path,
        f"""\
        for a in "$@"; do case "$a" in *.c) src="$a";; esac; done
        if grep -q hang_me "$src"; then sleep 120 & echo $! > {pidfile}; wait; fi
        exec cc "$@"
        """,
    )
    monkeypatch.setenv("CC", cc)
    t0 = time.monotonic()
    with pytest.raises(pt.BuildError, match="timed out after 1 s and was stopped") as e:
        pt.build(*_kernel("hang_me"), name="hang_me", timeout=1)
    assert time.monotonic() - t0 < 20 and not isinstance(e.value, pt.BuildEnvironmentError)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), "the compiler's child outlived the timeout"


@pytest.mark.parametrize(
    "hang_on, match",
    [
        ("--version", "did not answer --version within 1 s"),
        ("everything else", "cannot build even a trivial kernel with these flags \\(it timed out"),
    ],
)
def test_a_compiler_that_always_hangs_is_an_environment_error(
    private_cache, tmp_path, monkeypatch, hang_on, match
):
    """Was: a hanging compiler held pt.build for 300 s with no way to shorten it."""
    answer = 'case "$1" in --version) exec cc "$@";; esac\n' if hang_on != "--version" else ""
    monkeypatch.setenv("CC", _fake_cc(tmp_path, answer + "sleep 120\n"))
    t0 = time.monotonic()
    with pytest.raises(pt.BuildEnvironmentError, match=match):
        pt.build(*_kernel("always_hangs"), name="always_hangs", timeout=1)
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "5", True, None])
def test_build_timeout_is_validated(bad):
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        pt.build(*_kernel("t"), name="t", timeout=bad)


def test_a_very_long_build_timeout_means_no_limit(private_cache):
    name = _unique("long")
    _check_kernel(pt.build(*_kernel(name), name=name, timeout=1e300))  # was: OverflowError


# ---------------------------------------------------------------- environment faults


def _log_records(log) -> list:
    return at.load_records(str(log)) if os.path.exists(log) else []


@pytest.mark.parametrize(
    "cc, match",
    [
        ("/nonexistent/cc", "cannot run the C compiler"),
        ("/bin/false", "cannot build even a trivial kernel"),
        ("/bin/true", "reported success but wrote no object"),
        ("garbage", "wrote 7 bytes that are not an ELF object"),
    ],
)
def test_a_broken_compiler_stops_tuning_and_blames_no_config(
    private_cache, tmp_path, monkeypatch, cc, match
):
    """Was: every candidate recorded as COMPILE_ERROR (INSTANTIATION_ERROR for an object
    that would not load), so a resumed run lost good configs."""
    monkeypatch.setenv("CC", _garbage_cc(tmp_path) if cc == "garbage" else cc)
    log = tmp_path / "t.jsonl"
    tuner = at.RandomTuner(at.Task("toy_matmul", (16, 16, 8)), seed=1)
    with pytest.raises(at.EnvironmentFault, match=f"cannot build candidates: .*{match}"):
        tuner.tune(4, measure=FAST, callbacks=[at.log_to_file(log)])
    assert _log_records(log) == [] and tuner.history == []


def test_an_unusable_cache_dir_stops_tuning(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "file" / "cache"))
    log = tmp_path / "t.jsonl"
    with pytest.raises(at.EnvironmentFault, match="cannot create the build cache directory"):
        at.RandomTuner(at.Task("toy_matmul", (16, 16, 8))).tune(
            2, measure=FAST, callbacks=[at.log_to_file(log)]
        )
    assert _log_records(log) == []


def test_a_spawn_bootstrap_failure_stops_tuning(tmp_path):
    """A main module that cannot be imported again (as spawn does in every child)."""
    script = tmp_path / "tune_me.py"
    log = tmp_path / "t.jsonl"
    script.write_text(
        textwrap.dedent(f"""\
        import sys
        if __name__ != "__main__":
            raise RuntimeError("this module refuses to be imported")
        import autotune as at
        import tuning_templates
        if __name__ == "__main__":  # guarded, so the re-import itself is what fails
            tuner = at.RandomTuner(at.Task("toy_matmul", (16, 16, 8)), seed=1)
            try:
                tuner.tune(2, measure=at.MeasureOption(number=1, repeat=1, n_parallel=1),
                           callbacks=[at.log_to_file({str(log)!r})])
            except at.EnvironmentFault as e:
                print("FAULT:", e)
                sys.exit(7)
        """)
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, ROOT]))
    p = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert p.returncode == 7, p.stderr[-3000:]
    assert "FAULT: the build processes cannot start" in p.stdout
    assert _log_records(log) == []


def test_records_measured_before_a_fault_are_kept(tmp_path, monkeypatch):
    """The runner breaks (its cache dir vanishes) after one candidate ran: that one is
    logged, the rest are not blamed."""
    log = tmp_path / "t.jsonl"
    m = at.Measurer(FAST)
    task = at.Task("toy_matmul", (16, 16, 8))
    cfgs = [task.config_space.get(i) for i in range(3)]
    real_run = m.run
    calls = []

    def run_then_break(spec):
        calls.append(spec)
        if len(calls) == 2:
            raise at.EnvironmentFault("cannot run candidates: the machine broke")
        return real_run(spec)

    monkeypatch.setattr(m, "run", run_then_break)
    tuner = at.GridSearchTuner(task)
    with pytest.raises(at.EnvironmentFault, match="the machine broke"):
        tuner.tune(3, callbacks=[at.log_to_file(log)], measurer=m)
    m.close()
    recs = _log_records(log)
    assert len(recs) == 1 and recs[0].ok and recs[0].config == cfgs[0].to_json()


def test_environmental_compile_errors_of_old_logs_do_not_disqualify_good_configs(tmp_path):
    """Records written before faults were told apart: a config that compiled and ran
    correctly cannot fail to compile, so a COMPILE_ERROR beside its valid measurements
    was the environment's, and it keeps its place; other errors still disqualify."""
    w = at.workload_key("toy_matmul", [16, 16, 8])
    recs = [
        at.Record(w, "t", {"c": 1}, costs=[1.0]),
        at.Record(w, "t", {"c": 1}, error="COMPILE_ERROR", error_msg="cannot run the C compiler"),
        at.Record(w, "t", {"c": 2}, costs=[2.0]),
        at.Record(w, "t", {"c": 3}, costs=[0.5]),
        at.Record(w, "t", {"c": 3}, error="RUNTIME_ERROR", error_msg="SIGSEGV"),
        at.Record(w, "t", {"c": 4}, error="COMPILE_ERROR"),
    ]
    (ranked,) = at.ranked_configs(recs).values()
    assert [r.config["c"] for r in ranked] == [1, 2]
    assert ranked[0].costs == [1.0] and ranked[0].ok


# ---------------------------------------------------------------- candidates' own faults


def test_a_candidate_that_writes_its_inputs_harms_no_other(tmp_path):
    """Was: 'clobber' passed its own check and the next, correct candidate got a
    WRONG_ANSWER for good (inputs were shared between candidates)."""
    log = tmp_path / "w.jsonl"
    task = at.Task("input_writer", (4, 16))
    at.GridSearchTuner(task).tune(3, measure=FAST, callbacks=[at.log_to_file(log)])
    by_mode = {r.config["mode"]: r for r in at.load_records(str(log))}
    assert by_mode["clobber"].error == "WRONG_ANSWER"
    assert "wrote to input X" in by_mode["clobber"].error_msg
    assert by_mode["ok"].ok and by_mode["ok_tiled"].ok, by_mode


def test_a_crash_counts_against_a_config_only_when_it_repeats(tmp_path, monkeypatch):
    flags = tmp_path / "flags"
    flags.mkdir()
    monkeypatch.setenv("SAFETY_FLAG_DIR", str(flags))
    log = tmp_path / "c.jsonl"
    task = at.Task("flaky_crash", (64,))
    at.GridSearchTuner(task).tune(5, measure=FAST, callbacks=[at.log_to_file(log)])
    by_mode = {r.config["mode"]: r for r in at.load_records(str(log))}
    assert sorted(os.listdir(flags)) == sorted(f"crashed-{m}" for m in by_mode if m != "ok")
    for mode in ("ok", "run_crash_once", "build_crash_once"):
        assert by_mode[mode].ok, by_mode[mode]
    assert by_mode["run_crash"].error == "RUNTIME_ERROR"
    assert "(SIGKILL) (twice)" in by_mode["run_crash"].error_msg
    assert by_mode["build_crash"].error == "INSTANTIATION_ERROR"
    assert "the build process died building it" in by_mode["build_crash"].error_msg
    assert by_mode["build_crash"].error_msg.endswith("(twice)")


# ---------------------------------------------------------------- records


def _good_line(cost=1e-3, config=None) -> dict:
    rec = at.Record(
        workload=at.workload_key("toy_matmul", [16, 16, 8]),
        target="x86-avx2",
        config=config or {"tile_i": [-1, 2], "tile_j": [-1, 4], "unroll": 0},
        costs=[cost],
        flop=4096.0,
    )
    return json.loads(rec.to_json())


def _with(**fields) -> str:
    d = _good_line(config={"bad": list(fields)})
    d.update(fields)
    return json.dumps(d)


BAD_LINES = {
    "cost zero": _with(costs=[0.0]),
    "cost negative": _with(costs=[-1.0]),
    "cost NaN": _with(costs=[math.nan]),
    "cost infinite": _with(costs=[math.inf]),
    "cost a string": _with(costs=["1e-3"]),
    "cost a bool": _with(costs=[True]),
    "cost huge int": _with(costs=[10**400]),
    "costs not a list": _with(costs=1e-3),
    "flop NaN": _with(flop=math.nan),
    "flop negative": _with(flop=-5.0),
    "timestamp a string": _with(timestamp="yesterday"),
    "target a number": _with(target=7),
    "target with an escape sequence": _with(target="x86-amx\u001b[2J"),  # printed by `best`
    "tuner with a newline": _with(tuner="random\nfake output"),
    "error a list": _with(error=["x"]),
    "error_msg a dict": _with(error_msg={}),
    "config a list": _with(config=[1]),
    "no error and no costs": _with(costs=[]),
    "workload a string": _with(workload="matmul"),
    "no target": json.dumps({k: v for k, v in _good_line().items() if k != "target"}),
    "not a dict": json.dumps([1, 2, 3]),
    "a string": json.dumps("record"),
    "deep nesting": "[" * 200_000,
    "deep nesting in config": json.dumps(_good_line())[:-1] + ',"x":' + "[" * 200_000,
    "overlong line": json.dumps(_good_line(config={"pad": "x" * (2 << 20)})),
}


def test_an_append_the_disk_refuses_leaves_no_partial_line(tmp_path, monkeypatch):
    import errno

    from autotune import records

    log = str(tmp_path / "t.jsonl")
    task = at.Task("toy_matmul", (16, 16, 8))
    rec = [at.Record(task.workload_key, task.target.key, task.config_space.get(0).to_json(), [1.0])]
    at.append_records(log, rec)
    real = os.write

    def half_then_full(fd, buf):  # writes a part, then the disk is full
        if len(buf) > 20:
            return real(fd, buf[:20])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(records.os, "write", half_then_full)
    with pytest.raises(OSError, match=f"cannot append to the tuning log {log}: No space left"):
        at.append_records(log, rec * 3)
    monkeypatch.undo()
    assert open(log).read().count("\n") == 1 and len(at.load_records(log)) == 1


def test_no_line_can_poison_a_log(tmp_path, capsys):
    """Was: cost 0 -> ZeroDivisionError in `best` and --resume, -1 picked as the best,
    NaN -> XGBoostError on --resume, 200,000 '[' -> RecursionError (log unreadable)."""
    log = tmp_path / "poison.jsonl"
    good = [_good_line(cost=2e-3), _good_line(cost=3e-3, config={"tile_i": [-1, 4],
            "tile_j": [-1, 4], "unroll": 0})]  # fmt: skip
    lines = [json.dumps(good[0]), *BAD_LINES.values(), json.dumps(good[1])]
    log.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=f"skipped {len(BAD_LINES)} corrupt"):
        recs = at.load_records(str(log))
    assert [r.costs for r in recs] == [[2e-3], [3e-3]]
    (best,) = at.best_by_workload(recs).values()
    assert best.costs == [2e-3] and best.gflops == pytest.approx(4096.0 / 2e-3 / 1e9)

    assert cli_main(["best", str(log)]) == 0
    assert "2 ms" in capsys.readouterr().out
    task = at.Task("toy_matmul", (16, 16, 8), target="x86-avx2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuner = at.XGBTuner(task, use_pretrained=False)
        assert tuner.load_history(at.load_records(str(log))) == 2  # the resume path
    assert tuner.best_cost == 2e-3


# ---------------------------------------------------------------- cost models


def _training_log(tmp_path, n=12, equal=False) -> str:
    task = at.Task("toy_matmul", (16, 16, 8), target="x86-avx2")
    rng = np.random.default_rng(0)
    recs = [
        at.Record(task.workload_key, "x86-avx2", task.config_space.get(i).to_json(),
                  costs=[5e-5 if equal else float(rng.uniform(1e-5, 1e-4))], flop=task.flop)
        for i in range(n)
    ]  # fmt: skip
    log = str(tmp_path / ("equal.jsonl" if equal else "train.jsonl"))
    at.append_records(log, recs)
    return log


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_train_model_writes_to_the_users_store_never_the_shipped_model(tmp_path, monkeypatch):
    """Was: `train-model LOG` overwrote the shipped model (784 configs) with one of 8."""
    from autotune.pretrain import train

    monkeypatch.setenv("PYPTO_HOME", str(tmp_path / "home"))
    shipped = cm.pretrained_path("x86-avx2")
    before = _sha(shipped)
    assert train([_training_log(tmp_path)]) == {"x86-avx2": 12}
    assert _sha(shipped) == before
    mine = tmp_path / "home" / "models" / "x86-avx2.json"
    assert mine.exists() and cm.pretrained("x86-avx2").n_train == 12  # the user's comes first
    with pytest.raises(ValueError, match="holds the shipped cost models"):
        train([_training_log(tmp_path)], out_dir=os.path.dirname(shipped))
    assert _sha(shipped) == before
    out = tmp_path / "elsewhere"
    assert train([_training_log(tmp_path)], out_dir=str(out)) == {"x86-avx2": 12}
    assert (out / "x86-avx2.json").exists()


def test_train_model_writes_no_model_that_ranks_nothing(tmp_path, monkeypatch):
    """12 configs of one speed made a constant model, which came before the shipped one
    (784 configs) for the target."""
    from autotune.pretrain import train

    monkeypatch.setenv("PYPTO_HOME", str(tmp_path / "home"))
    assert train([_training_log(tmp_path, equal=True)]) == {}
    assert not (tmp_path / "home" / "models" / "x86-avx2.json").exists()
    assert cm.pretrained("x86-avx2").n_train > 12  # the shipped one


def test_train_model_reads_the_users_and_the_shipped_logs_by_default(tmp_path, monkeypatch):
    """It read tuning_logs/ of the current directory: FileNotFoundError elsewhere."""
    from autotune import pretrain

    monkeypatch.setenv("PYPTO_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr(pretrain, "load_records", lambda paths: seen.append(paths) or [])
    assert pretrain.train() == {}
    assert seen == [at.store.default_logs()] and seen[0]


def test_a_record_too_large_for_int64_is_skipped_by_training(tmp_path, monkeypatch):
    """Was: one record of size 10**30 stopped `train-model` for every target
    (OverflowError). The all-targets model needs usable records of two targets."""
    from autotune.pretrain import train

    monkeypatch.setenv("PYPTO_HOME", str(tmp_path / "home"))
    log = _training_log(tmp_path)
    huge = at.Record(at.workload_key("toy_matmul", [10**30, 16, 8]), "x86-avx512",
                     {"tile_i": [-1, 2]}, costs=[1e-5], flop=1.0)  # fmt: skip
    at.append_records(log, [huge])
    assert train([log], out_dir=str(tmp_path / "out")) == {"x86-avx2": 12}
    assert sorted(os.listdir(tmp_path / "out")) == ["x86-avx2.json"]  # no all-targets model


def _model_json(**fields) -> str:
    meta = {"schema": cm.SCHEMA, "n_features": cm.N_FEATURES, "target": "x86-avx2",
            "objective": "rank", "num_rounds": 1, "booster": "{}"}  # fmt: skip
    return json.dumps({k: v for k, v in {**meta, **fields}.items() if v is not None})


@pytest.mark.parametrize(
    "fields, why",
    [({"target": None}, "no field 'target'"), ({"objective": "magic"}, "objective"),
     ({"booster": "garbage"}, r"\("), ({"booster": "{}"}, r"\(")],
)  # fmt: skip
def test_a_damaged_model_file_is_refused_by_name(tmp_path, fields, why):
    """Was: KeyError: 'target', or xgboost's error with its C++ backtrace."""
    path = tmp_path / "m.json"
    path.write_text(_model_json(**fields))
    with pytest.raises(cm.SchemaError, match=f"m.json is not a usable saved pypto .*{why}"):
        cm.XGBoostCostModel.load(str(path))


def test_an_unusable_users_model_names_the_model_used_instead(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path / "home"))
    mine = tmp_path / "home" / "models" / "x86-avx2.json"
    mine.parent.mkdir(parents=True)
    mine.write_text(_model_json(booster="garbage"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = cm.pretrained("x86-avx2")
    assert model is not None and model.target == "x86-avx2"
    (w,) = [str(c.message) for c in caught]
    assert f"{mine} is unusable" in w and f"using {cm.pretrained_path('x86-avx2')} instead" in w
    assert "\n" not in w


@pytest.mark.parametrize(
    "content, why",
    [
        ("{not json", "is not a saved pypto cost model"),
        (json.dumps({"schema": "pypto-features-v0", "n_features": 3}), "trained on features"),
        (
            json.dumps(
                {
                    "schema": cm.SCHEMA,
                    "n_features": cm.N_FEATURES,
                    "target": "x86-avx2",
                    "objective": "rank",
                    "num_rounds": 1,
                    "booster": "garbage",
                }
            ),
            "Error",
        ),
    ],  # fmt: skip
)
def test_an_unusable_pretrained_model_warns_and_the_tuner_starts_without_it(
    tmp_path, monkeypatch, content, why
):
    """Was: a stale or corrupt pretrained model crashed the default tuner."""
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path / "home"))
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "x86-avx2.json").write_text(content)
    monkeypatch.setattr(cm, "PRETRAINED_DIR", str(shipped))
    task = at.Task("toy_matmul", (16, 16, 8), target="x86-avx2")
    with pytest.warns(
        UserWarning, match=f"x86-avx2.json is unusable .*{why}.*; tuning starts without a pre"
    ):
        tuner = at.XGBTuner(task, seed=0, plan_size=4)
    assert tuner.base_model is None
    if why == "Error" and can_run(pt.Target("x86-avx2")):  # one tuning run is enough
        tuner.tune(2, measure=FAST)
        assert len(tuner.history) == 2 and all(r.ok for _, r in tuner.history)


# ---------------------------------------------------------------- process hygiene


def _marked(mark: str) -> list[int]:
    """Live (not zombie) processes whose environment carries ``mark``."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark.encode() not in f.read():
                    continue
        except OSError:
            continue
        if not _gone(int(pid)):
            out.append(int(pid))
    return out


def _wait_for(path, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if proc.poll() is not None:
            pytest.fail(f"tuning ended early: {proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{path} did not appear")
        time.sleep(0.05)


def _start_tuning(tmp_path, mark, phase):
    flags = tmp_path / "flags"
    flags.mkdir()
    cc = _fake_cc(
        tmp_path,
        f"""\
        case "$1" in --version) exec cc "$@";; esac
        touch {flags}/compiling
        sleep 120
        exec cc "$@"
        """,
    )
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([TESTS, ROOT]),
        PYPTO_CACHE_DIR=str(tmp_path / "cache"),
        SAFETY_FLAG_DIR=str(flags),
        PYPTO_ORPHAN_MARK=mark,
    )
    if phase == "compiling":
        env["CC"] = cc
    args = ["sleeper", "--import", "safety_templates", "--args", "64", "--tuner", "grid",
            "--trials", "2", "--timeout", "600", "--number", "1", "--repeat", "1",
            "--confirm", "0", "--no-progress", "--log", str(tmp_path / "h.jsonl")]  # fmt: skip
    p = subprocess.Popen(
        [sys.executable, "-m", "autotune", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_default_sigint,
    )  # fmt: skip
    return p, flags / phase


def _default_sigint():
    """A user's terminal delivers SIGINT; a shell's background job (``cmd &`` without
    job control, as CI may run the suite) ignores it, and children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    "phase, sig",
    [
        ("compiling", signal.SIGTERM),
        ("compiling", signal.SIGKILL),
        ("running", signal.SIGKILL),
        ("running", signal.SIGINT),
    ],
)
def test_killing_the_tuner_leaves_no_orphan(tmp_path, phase, sig):
    """Was: SIGTERM or SIGKILL of pypto-tune left its build workers (and their
    compilers) running."""
    mark = f"pypto-orphan-{uuid.uuid4().hex}"
    p, flag = _start_tuning(tmp_path, mark, phase)
    try:
        _wait_for(flag, p)
        children = [pid for pid in _marked(mark) if pid != p.pid]
        assert children  # workers, the runner, compilers
        p.send_signal(sig)
        try:
            p.wait(90)  # seconds on an idle machine; a loaded one may take longer
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            pytest.fail(f"pypto-tune did not end within 90 s of {sig.name}: {err[-3000:]}")
        deadline = time.monotonic() + 15
        while _marked(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _marked(mark)
        assert left == [], [open(f"/proc/{pid}/cmdline").read() for pid in left]
    finally:
        for pid in _marked(mark):  # only processes this test started
            os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
            p.wait()


def test_sigkill_at_random_moments_and_resume_keeps_every_record(tmp_path):
    """Fault injection: a tuning run killed with SIGKILL at random moments and resumed
    each time ends with a valid log, every record kept, none measured twice, no orphan."""
    log = tmp_path / "fi.jsonl"
    mark = f"pypto-orphan-{uuid.uuid4().hex}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, ROOT]), PYPTO_ORPHAN_MARK=mark,
               PYPTO_CACHE_DIR=str(tmp_path / "cache"))  # fmt: skip
    trials = 16
    args = ["toy_matmul", "--import", "tuning_templates", "--args", "32,32,16", "--tuner",
            "random", "--seed", "3", "--trials", str(trials), "--number", "1", "--repeat", "1",
            "--confirm", "0", "--no-progress", "--log", str(log), "--resume"]  # fmt: skip
    rng = np.random.default_rng(15)
    seen: list = []
    try:
        for moment in [*rng.uniform(0.5, 4.5, 5), None]:
            p = subprocess.Popen(
                [sys.executable, "-m", "autotune", *args], cwd=ROOT, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            try:
                out, err = p.communicate(timeout=moment if moment is not None else 300)
                assert p.returncode == 0, err[-3000:]
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.communicate()
            deadline = time.monotonic() + 15
            while _marked(mark) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _marked(mark) == []
            lines = log.read_text().splitlines() if log.exists() else []
            recs = [at.Record.from_json(line) for line in lines]  # every line whole and valid
            keys = [json.dumps(r.config, sort_keys=True) for r in recs]
            assert keys[: len(seen)] == seen  # every earlier record kept
            assert len(set(keys)) == len(keys)  # none measured twice
            seen = keys
    finally:
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)
    assert len(seen) == trials and all(r.ok for r in recs)


@pytest.mark.parametrize("how", ["interrupt", "terminate"])
def test_an_interrupted_run_logs_the_trials_that_finished(tmp_path, monkeypatch, capsys, how):
    """Ctrl-C or SIGTERM in the third measurement of a batch of 8: the two before it
    are in the log (records were written per batch, so all were lost), and pypto-tune
    says so in one line with 130 or 143."""
    measure = importlib.import_module("autotune.measure")
    run, calls = measure.Measurer.run, []

    def stopping(self, spec):
        calls.append(spec)
        if len(calls) == 3:
            if how == "terminate":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises here
            raise KeyboardInterrupt
        return run(self, spec)

    monkeypatch.setattr(measure.Measurer, "run", stopping)
    log = tmp_path / "stopped.jsonl"
    argv = ["toy_matmul", "--args", "32,32,16", "--trials", "8", "--tuner", "random",
            "--log", str(log)]  # fmt: skip
    code = cli_main(argv)
    assert code == (143 if how == "terminate" else 130)
    said = "terminated" if how == "terminate" else "interrupted"
    assert f"pypto-tune: {said}; the log holds every finished trial" in capsys.readouterr().err
    assert len(at.load_records(str(log))) == 2


def test_a_template_the_workers_cannot_find_is_a_clear_fault_not_failed_configs(tmp_path):
    """A template defined inside main() is not registered in the spawned workers:
    tuning stops with a message saying where to define it, and records nothing."""
    script = tmp_path / "inner.py"
    log = tmp_path / "inner.jsonl"
    script.write_text(
        textwrap.dedent(f"""
        import pypto as pt, autotune as at

        def main():
            @at.template("defined_in_main")
            def t(cfg, N):
                A = pt.placeholder((N,), "float32", name="A")
                C = pt.compute((N,), lambda i: A[i] * 2, name="C")
                s = pt.create_schedule(C.op)
                cfg.define_split("t", N)
                cfg["t"].apply(s, C, C.op.axis[0])
                return s, [A, C]
            at.RandomTuner(at.Task("defined_in_main", (16,))).tune(
                2, callbacks=[at.log_to_file({str(log)!r})])

        if __name__ == "__main__":
            main()
    """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode != 0
    assert "template 'defined_in_main' is not registered in the worker processes" in (done.stderr)
    assert not log.exists() or not log.read_text().strip()


def _sigint_ignored(q) -> None:
    q.put(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)


def test_workers_are_born_ignoring_the_terminals_ctrl_c():
    """A Ctrl-C reaches the whole process group: a worker still importing printed its
    traceback beside the tuner's one-line "interrupted". Started inside the guard, a
    process ignores SIGINT from its first instruction; the tuner's own handler is back
    after it. (The tuner's handler is installed first: a test run started in the
    background by a shell without job control inherits SIGINT ignored, and so would
    every child.)"""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with _children_ignore_sigint():
            p = ctx.Process(target=_sigint_ignored, args=(q,))
            p.start()
        assert q.get(timeout=60) is True
        p.join(10)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        p = ctx.Process(target=_sigint_ignored, args=(q,))  # outside it: Python's own
        p.start()
        assert q.get(timeout=60) is False
        p.join(10)
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_a_record_that_would_not_read_back_is_not_appended(tmp_path):
    """A cost of 0 was written, then counted as a corrupt line by every reader."""
    task = at.Task("toy_matmul", (16, 16, 8), target="x86-avx2")
    log = tmp_path / "t.jsonl"
    ok = at.Record(task.workload_key, "x86-avx2", task.config_space.get(0).to_json(), [1e-5])
    zero = at.Record(task.workload_key, "x86-avx2", task.config_space.get(1).to_json(), [0.0])
    with pytest.raises(ValueError, match=r"record 1 is not valid .*nothing was appended"):
        at.append_records(str(log), [ok, zero])
    assert not log.exists() or log.read_text() == ""
    at.append_records(str(log), [ok])
    assert len(at.load_records(str(log))) == 1
