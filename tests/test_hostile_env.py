"""A user's machine as it may be: a compiler that speaks Latin-1 or hides behind a
wrapper, a blank $CC, a umask that forbids everything, a symlink loop, a disk that
fills while an object is stored. Each kernel is checked against numpy."""

import errno
import os
import stat
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import autotune as at
import pypto as pt
from pypto import cache, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _build_and_check(prefix: str):
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"  # its own C: compiled afresh
    A = pt.placeholder((8,), "float32", name="A")
    B = pt.compute((8,), lambda i: A[i] * 2.0 + 1.0, name=name)
    mod = pt.build(pt.create_schedule(B.op), [A, B], name=name)
    a = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(mod(a), a * 2.0 + 1.0)


def _wrapper(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_bytes(b"#!/bin/sh\n" + body.encode("latin-1") + b'\nexec gcc "$@"\n')
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_compiler_writing_latin1_to_stderr_builds(private_cache, tmp_path, monkeypatch):
    """Was: UnicodeDecodeError for every build, each tuning config a COMPILE_ERROR."""
    cc = _wrapper(tmp_path, "latin1-cc", "printf 'avertissement: d\\351j\\340 vu\\n' >&2")
    monkeypatch.setenv("CC", cc)
    _build_and_check("latin1")


def test_a_blank_cc_is_the_default_compiler(private_cache, monkeypatch):
    monkeypatch.setenv("CC", "   ")
    assert runtime.compiler() == ["cc"]
    _build_and_check("blank_cc")


def test_the_cache_key_takes_the_whole_version_of_a_wrapped_compiler(tmp_path, monkeypatch):
    """A wrapper printing its own first line hid which compiler was behind it."""
    noisy = _wrapper(tmp_path, "noisy-cc", 'echo "note: a wrapper"')
    cc = (noisy,)
    version = runtime._compiler_version(cc, 30.0)
    assert version.startswith("note: a wrapper\n") and "gcc" in version.lower()


def test_directories_made_under_any_umask_are_usable_and_private(tmp_path, monkeypatch):
    """os.makedirs applies the umask: under 0777 it made a directory nobody could enter,
    and every later build was refused."""
    d = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(d))
    old = os.umask(0o777)
    try:
        _build_and_check("umask")
    finally:
        os.umask(old)
    for p in (tmp_path / "a", tmp_path / "a" / "b", d):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p


def test_a_symlink_loop_is_named(tmp_path, monkeypatch):
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    for d in (tmp_path / "l1", tmp_path / "l1" / "cache"):
        monkeypatch.setenv("PYPTO_CACHE_DIR", str(d))
        with pytest.raises(pt.BuildEnvironmentError, match=r"runs into a loop of symlinks"):
            _build_and_check("loop")


def test_a_full_disk_while_storing_leaves_no_object_behind(private_cache, monkeypatch):
    """Was: each failed store left its whole temporary object on the full disk."""

    write = cache.atomic_write

    def full(path, data, mode=0o600):  # the disk fills after the object is compiled
        if path.endswith(cache.HASH_SUFFIX):
            raise OSError(errno.ENOSPC, "No space left on device")
        write(path, data, mode)

    monkeypatch.setattr(cache, "atomic_write", full)
    with pytest.raises(pt.BuildEnvironmentError, match="No space left on device"):
        _build_and_check("full")
    assert not [p for p in private_cache.iterdir() if p.name.startswith(".tmp-")]


def _tune_at_two_threads(tmp_path, setup: str, **env_extra):
    """One trial of a small matmul at two threads in a fresh process, its main block
    starting with ``setup``: the process's output, its log, and its environment."""
    script = tmp_path / "tune.py"
    script.write_text(
        "import os, sys\n"
        "import autotune as at\n"
        "import pypto as pt\n"
        "if __name__ == '__main__':\n"
        + textwrap.indent(setup, "    ")
        + "    task = at.Task('matmul', (32, 32, 32))\n"
        "    opt = at.MeasureOption(number=1, repeat=1, threads=2)\n"
        "    log = at.log_to_file(sys.argv[1])\n"
        "    try:\n"
        "        at.RandomTuner(task).tune(1, measure=opt, callbacks=[log])\n"
        "    except at.EnvironmentFault as e:\n"
        "        print('fault:', e)\n"
    )
    log = tmp_path / "t.jsonl"
    env = {**os.environ, "PYTHONPATH": ROOT, "PYPTO_HOME": str(tmp_path / "home"), **env_extra}
    r = subprocess.run([sys.executable, str(script), str(log)], env=env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    return r, log, env


def test_threads_beyond_the_cpus_the_runner_may_use_are_an_environment_fault(tmp_path):
    """taskset left the runner one CPU: two threads there are time-sliced, and the
    records said "threads": 2. Nothing is recorded now, and OMP_THREAD_LIMIT caps the
    count pypto states."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to leave the runner one")
    r, log, env = _tune_at_two_threads(
        tmp_path, "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
    )
    assert "fault:" in r.stdout and "may run on 1 CPU(s) but its kernels use 2 threads" in r.stdout
    assert not log.exists() or at.load_records(str(log)) == []
    limit = subprocess.run(
        [sys.executable, "-c", "import pypto as pt; print(pt.get_num_threads())"],
        env={**env, "OMP_NUM_THREADS": "2", "OMP_THREAD_LIMIT": "1"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert limit.stdout.strip() == "1", limit.stderr


def test_omp_proc_bind_leaves_the_runner_every_cpu(tmp_path):
    """OMP_PROC_BIND binds the thread that starts OpenMP to one CPU; the runner inherited
    that one CPU, ran one thread, and records said "threads": 1 on a two-CPU machine.
    Children now start on the CPUs the tuner had, and OpenMP spreads their threads."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    setup = (
        "pt.get_num_threads()  # OpenMP starts and binds this thread\n"
        "print('tuner', len(os.sched_getaffinity(0)))\n"
    )
    r, log, _ = _tune_at_two_threads(tmp_path, setup, OMP_PROC_BIND="true")
    assert r.returncode == 0 and "fault:" not in r.stdout, r.stdout + r.stderr
    assert "tuner 1" in r.stdout  # the binding this guards against did happen
    (rec,) = at.load_records(str(log))
    assert rec.error is None and rec.threads == 2


def test_a_clang_compiler_gets_no_gcc_only_flag(private_cache, tmp_path, monkeypatch):
    """clang refuses gcc's vectorizer limits (-fvect-cost-model=...): every build failed.
    A stand-in that answers as clang and refuses them as clang does."""
    fake = tmp_path / "clang"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "clang version 14.0.6"; exit 0; fi\n'
        'for a in "$@"; do case "$a" in -fvect-cost-model*|-fno-tree-slp-vectorize)\n'
        '  echo "clang: error: unknown argument: $a" >&2; exit 1;; esac; done\n'
        'exec gcc "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    _build_and_check("clang")
