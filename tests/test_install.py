"""Installed use: the wheel carries records and models; saved modules; calls with omitted
outputs and DLPack arguments; TVM's familiar names."""

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import tuning_templates  # noqa: F401  (registers the test templates)

import autotune as at
import pypto as pt
from autotune import store
from pypto.module import saved_digest
from pypto.target import KNOWN, can_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
SOURCES = ("pyproject.toml", "README.md", "pypto", "autotune", "cost_models", "tuning_logs")


# ---------------------------------------------------------------- the wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of the sources (the worktree gets no build/ folder)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = os.path.join(ROOT, name)
        if os.path.isdir(path):
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    dist = tmp_path_factory.mktemp("dist")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (whl,) = dist.glob("pypto-*.whl")
    return whl


def test_the_wheel_holds_every_package_the_records_and_the_models(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for top in ("pypto", "autotune", "cost_models"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            if "__init__.py" in files:
                rel = os.path.relpath(folder, ROOT)
                assert f"{rel}/__init__.py" in names, f"package {rel} is missing from the wheel"
    for path in store.shipped_logs():
        rel = os.path.relpath(path, store.shipped_dir())
        assert f"pypto_records/{rel}" in names
    models = os.listdir(os.path.join(ROOT, "cost_models", "pretrained"))
    assert models and all(f"cost_models/pretrained/{m}" in names for m in models)


INSTALLED_CHECK = """
import json, os, sys
import numpy as np
import autotune as at
import cost_models as cm
import pypto as pt
from autotune import store
from pypto.target import can_run

site = sys.argv[1]
for mod in (at, cm, pt):
    assert mod.__file__.startswith(site), mod.__file__
logs = store.shipped_logs()
assert logs and all(p.startswith(site) for p in logs), logs
runnable = [t for t in store.shipped_targets() if can_run(pt.Target(t))]
out = {"targets": store.shipped_targets(), "models": [t for t in store.shipped_targets()
       if cm.pretrained(t) is not None], "ran": None}
if runnable:
    target = runnable[0]
    key = at.workload_key("matmul", [512, 512, 512])
    with at.apply_history_best():  # no argument: finds the shipped records
        assert at.dispatch.lookup(key, target), "no shipped record found"
        s, args = at.get_template("matmul")(512, 512, 512, target=target)
    a = np.random.rand(512, 512).astype("f4")
    b = np.random.rand(512, 512).astype("f4")
    np.testing.assert_allclose(pt.build(s, args, target=target)(a, b), a @ b, rtol=1e-4)
    out["ran"] = target
print(json.dumps(out))
"""


def test_installed_wheel_finds_records_and_models_from_any_directory(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    r = subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    work = tmp_path / "elsewhere"
    (work / "pypto_records" / "x86-avx512").mkdir(parents=True)  # hides nothing installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYPTO_HOME"] = str(tmp_path / "home")
    r = subprocess.run(
        [py, "-c", INSTALLED_CHECK, site], cwd=work, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["targets"] == store.shipped_targets() and out["models"]
    runnable = [t for t in store.shipped_targets() if can_run(pt.Target(t))]
    assert out["ran"] == (runnable[0] if runnable else None)
    r = subprocess.run(
        [str(venv / "bin" / "pypto-tune"), "list"], cwd=work, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (
        "matmul(M, N, K, dtype='float32')" in r.stdout
        and "standard: --args 512,512,512  (records for" in r.stdout
    )
    assert os.listdir(work) == ["pypto_records"]  # nothing written where it ran


# ---------------------------------------------------------------- saved modules


def _two_outputs():
    n = pt.var("n")
    A = pt.placeholder((n, 4), "float32", name="A")
    C = pt.compute((n, 4), lambda i, j: A[i, j] + 1, name="C")
    D = pt.compute((n, 4), lambda i, j: C[i, j] * 2, name="D")
    return pt.create_schedule(D.op), [A, C, D]


LOAD_CHECK = """
import sys
import numpy as np
import pypto as pt

mod = pt.load_module(sys.argv[1])
a = np.random.rand(5, 4).astype("f4")
c, d = mod(a)
np.testing.assert_allclose(c, a + 1, rtol=1e-6)
np.testing.assert_allclose(d, (a + 1) * 2, rtol=1e-6)
try:
    mod(a.astype("f8"))
except TypeError as e:
    print("refused:", e)
print(mod.name, mod.target.name, "source" if "two_out" in mod.source else "no source")
"""


def test_export_library_and_load_module_without_a_compiler(tmp_path):
    s, args = _two_outputs()
    mod = pt.build(s, args, name="two_out")
    path = mod.export_library(str(tmp_path / "k.so"))
    assert path == str(tmp_path / "k.so") and os.path.exists(path + ".json")
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "PATH")}
    env["PYTHONPATH"] = ROOT
    r = subprocess.run(
        [sys.executable, "-c", LOAD_CHECK, path], env=env, capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "refused: argument A: dtype float64, expected float32" in r.stdout
    assert f"two_out {mod.target.name} source" in r.stdout


def test_load_module_refuses_a_missing_or_mismatched_signature(tmp_path):
    s, args = _two_outputs()
    path = pt.build(s, args, name="two_out").export_library(str(tmp_path / "k.so"))
    with open(path, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ValueError, match=r"k.so and .*k.so.json do not belong together"):
        pt.load_module(path)
    os.unlink(path + ".json")
    with pytest.raises(FileNotFoundError, match=r"its signature file .*k.so.json is missing"):
        pt.load_module(path)
    (tmp_path / "d.so").mkdir()
    with pytest.raises(FileNotFoundError, match=r"its shared object .*d.so is a directory"):
        pt.load_module(str(tmp_path / "d.so"))


def test_an_edited_signature_file_is_refused_before_the_kernel_runs(tmp_path):
    """The signature file decides shapes and which arguments are written: edited (shapes
    shrunk, arguments swapped) it no longer belongs to its object; malformed with a
    matching sha256, or of an older format, it is refused by name, not by a KeyError."""
    n = pt.var("n")
    A = pt.placeholder((n, 64), "float32", name="A")
    B = pt.compute((n, 64), lambda i, j: A[i, j] * 2, name="B")
    path = pt.build(pt.create_schedule(B.op), [A, B], name="dbl").export_library(
        str(tmp_path / "k.so")
    )
    meta, data = json.loads(open(path + ".json").read()), open(path, "rb").read()

    def save(m, rehash=False):
        m = {**m, "sha256": saved_digest(data, m)} if rehash else m
        json.dump(m, open(path + ".json", "w"))

    sig = meta["signature"]
    shrunk = {**sig, "params": [{**p, "shape": ["n", "1"]} for p in sig["params"]]}
    for edited in (shrunk, {**sig, "params": sig["params"][::-1]}):
        save({**meta, "signature": edited})
        with pytest.raises(ValueError, match="do not belong together"):
            pt.load_module(path)
    deep = "(" * 1000 + "n" + ")" * 1000
    nested = {**sig, "params": [{**p, "shape": [deep, "64"]} for p in sig["params"]]}
    for bad in ({**sig, "size_vars": ["n", "m"], "params": [{"name": "A"}]}, [], nested):
        save({**meta, "signature": bad}, rehash=True)
        with pytest.raises(ValueError, match=r"k.so.json: not a valid pypto module signature"):
            pt.load_module(path)
    save({**meta, "format": 1})
    with pytest.raises(ValueError, match="not a pypto module signature of format 2; export it"):
        pt.load_module(path)
    save({**meta, "format": 3})
    with pytest.raises(ValueError, match=r"it is of format 3, made by a newer pypto\); upgrade"):
        pt.load_module(path)
    save(meta)
    x = np.ones((3, 64), np.float32)
    np.testing.assert_array_equal(pt.load_module(path)(x), x * 2)


def test_a_module_exported_again_to_the_same_path_loads_its_new_code(tmp_path):
    """The dynamic loader keeps one object per path; each content loads from its own
    copy, so the second load runs the second kernel (it ran the first)."""
    X = pt.placeholder((4,), "float32", name="X")
    path, x = str(tmp_path / "k.so"), np.ones(4, np.float32)
    for c in (5.0, 7.0):
        Z = pt.compute((4,), lambda i: X[i] * c, name="Z")  # noqa: B023 - used at once
        pt.build(pt.create_schedule(Z.op), [X, Z], name="k").export_library(path)
        np.testing.assert_array_equal(pt.load_module(path)(x), x * c)


def test_loads_while_the_module_is_exported_again_get_one_whole_module(tmp_path):
    """The object and its signature are renamed into place back to back, and a load
    that meets the instant between reads them again: 38 of 150 such loads failed."""
    import threading

    X = pt.placeholder((4,), "float32", name="X")
    path, x = str(tmp_path / "k.so"), np.ones(4, np.float32)
    mods = []
    for c in (5.0, 7.0):
        Z = pt.compute((4,), lambda i: X[i] * c, name="Z")  # noqa: B023 - used at once
        mods.append(pt.build(pt.create_schedule(Z.op), [X, Z], name="k"))
    mods[0].export_library(path)
    stop = threading.Event()

    def export_again():
        k = 0
        while not stop.wait(0.003):  # exports every few milliseconds
            mods[k % 2].export_library(path)
            k += 1

    writer = threading.Thread(target=export_again)
    writer.start()
    try:
        got = {float(pt.load_module(path)(x)[0]) for _ in range(60)}
    finally:
        stop.set()
        writer.join()
    assert got <= {5.0, 7.0}


def test_load_module_checks_its_copy_its_target_and_needs_no_writable_cache(tmp_path, monkeypatch):
    """The loaded copy in the cache is checked on every load (a damaged or swapped one
    is written again, not run); a module of a target this machine cannot run is refused;
    a cache that cannot be written is replaced by a private temporary directory."""
    X = pt.placeholder((4,), "float32", name="X")
    Z = pt.compute((4,), lambda i: X[i] * 3, name="Z")
    path = pt.build(pt.create_schedule(Z.op), [X, Z], name="k").export_library(
        str(tmp_path / "k.so")
    )
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(cache))
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(pt.load_module(path)(x), x * 3)
    (copy,) = cache.glob("loaded-*.so")
    damaged = copy.read_bytes()[:2000]
    copy.unlink()  # (not in place: this process maps the file)
    copy.write_bytes(damaged)  # truncated
    load = f"import numpy as np, pypto as pt; print(pt.load_module({path!r})(np.ones(4, 'f4')))"
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-c", load], env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0 and "[3. 3. 3. 3.]" in r.stdout, r.stderr  # (was: Bus error)
    meta = json.loads(open(path + ".json").read())
    data = open(path, "rb").read()
    for other in ("aarch64-neon", *[n for n in KNOWN if not pt.Target(n).can_run()][:1]):
        moved = {**meta, "target": other}  # as an export on that machine would say
        json.dump({**moved, "sha256": saved_digest(data, moved)}, open(path + ".json", "w"))
        with pytest.raises(pt.TargetError, match=f"k.so was built for {other}, which this mac"):
            pt.load_module(path)
    json.dump(meta, open(path + ".json", "w"))
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("PYPTO_CACHE_DIR", str(blocked))
    np.testing.assert_array_equal(pt.load_module(path)(x), x * 3)


# ---------------------------------------------------------------- calls


def test_omitted_outputs_are_allocated_and_returned():
    s, args = _two_outputs()
    mod = pt.build(s, args)
    a = np.random.rand(7, 4).astype("f4")
    c, d = mod(a)
    np.testing.assert_allclose(d, (a + 1) * 2, rtol=1e-6)
    assert c.shape == d.shape == (7, 4) and c.dtype == np.float32
    c2, d2 = np.empty_like(c), np.empty_like(d)
    assert mod(a, c2, d2) is None  # given outputs: written in place
    np.testing.assert_array_equal(d2, d)


def test_an_output_whose_size_no_input_binds_must_be_passed():
    n, m = pt.var("n"), pt.var("m")
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n, m), lambda i, j: A[i], name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    with pytest.raises(ValueError, match=r"output B: its shape \(n, m\) depends on m, which no"):
        mod(np.zeros(3, "f4"))
    b = np.empty((3, 2), "f4")
    mod(np.arange(3, dtype="f4"), b)
    np.testing.assert_array_equal(b, [[0, 0], [1, 1], [2, 2]])


class DLPackOnly:
    """An array known only through the DLPack protocol."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_arguments_are_used_without_copying():
    s, args = _two_outputs()
    mod = pt.build(s, args)
    a = np.random.rand(6, 4).astype("f4")
    c, d = np.zeros((6, 4), "f4"), np.zeros((6, 4), "f4")
    mod(DLPackOnly(a), DLPackOnly(c), DLPackOnly(d))  # the kernel writes into c and d
    np.testing.assert_allclose(d, (a + 1) * 2, rtol=1e-6)
    np.testing.assert_allclose(mod(DLPackOnly(a))[1], d, rtol=0)


def test_pytorch_tensors_are_used_without_copying():
    torch = pytest.importorskip("torch")
    s, args = _two_outputs()
    mod = pt.build(s, args)
    a = torch.rand(6, 4)
    c, d = torch.zeros(6, 4), torch.zeros(6, 4)
    mod(a, c, d)
    torch.testing.assert_close(d, (a + 1) * 2)
    _, d2 = mod(a)
    np.testing.assert_allclose(d2, d.numpy(), rtol=0)
    with pytest.raises(TypeError, match="argument A: dtype float64, expected float32"):
        mod(a.double())


# ---------------------------------------------------------------- familiar names


def test_astype_and_cast_with_swapped_arguments():
    A = pt.placeholder((8,), "float32", name="A")
    B = pt.compute((8,), lambda i: (A[i] * 100).astype("int32"), name="B")
    a = np.linspace(-3, 3, 8).astype("f4")
    got = pt.build(pt.create_schedule(B.op), [A, B])(a)
    np.testing.assert_array_equal(got, (a * 100).astype("i4"))
    with pytest.raises(TypeError, match=r"pt.cast takes the dtype first, .* pt.cast\('int32', A"):
        pt.cast(A[0], "int32")


FAST = at.MeasureOption(number=1, repeat=1, timeout=5)


class _Bar(at.progress_bar):
    def __call__(self, tuner, inputs, results):
        super().__call__(tuner, inputs, results)
        self.seen_total = self.bar.total


def test_measure_option_and_a_progress_bar_that_knows_its_total():
    task = at.Task("toy_matmul", (16, 16, 8), target="host")
    bar = _Bar(file=io.StringIO())
    best = at.RandomTuner(task, seed=0).tune(3, measure_option=FAST, callbacks=[bar])
    assert best is not None and bar.seen_total == 3
    with pytest.raises(TypeError, match="measure= or measure_option="):
        at.RandomTuner(task).tune(1, measure=FAST, measure_option=FAST)
