"""The benchmark scripts: --help everywhere, numpy's workers free of forced OpenBLAS kernels,
kernels from the standard workloads, the default-config column. Nothing here times a kernel."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import pypto as pt
from autotune.workloads import STANDARD
from benchmarks import blas, mixed
from benchmarks.common import run_workers
from benchmarks.kernels import KERNELS, all_kernels
from benchmarks.suite import combine, report

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _scripts():
    found = [
        p.name for p in sorted(BENCH.glob("*.py")) if '__name__ == "__main__"' in p.read_text()
    ]
    # the scripts there today; a new one is picked up by the glob above
    assert {"compile_time.py", "matmul.py", "peak.py", "suite.py", "tuning.py",
            "tuning_efficiency.py"} <= set(found)  # fmt: skip
    return found


@pytest.mark.parametrize(
    "cmd",
    [[sys.executable, str(BENCH / name)] for name in _scripts()]
    + [[sys.executable, "-m", "benchmarks"], ["bash", str(BENCH / "ship_records.sh")]],
    ids=lambda c: c[-1].rsplit("/", 1)[-1],
)
def test_every_benchmark_script_honours_help(cmd):
    r = subprocess.run([*cmd, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    # the usage and nothing else: no benchmark ran
    assert out.startswith(("usage:", "How the records")), out[:300]
    assert "GFLOP/s," not in out and "medians of" not in out


def test_numpy_workers_run_without_forced_openblas_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "512")
    monkeypatch.setenv("PYPTO_SOMETHING_ELSE", "kept")
    script = tmp_path / "show_env.py"
    script.write_text(
        "import json, os\n"
        "keys = ['OPENBLAS_CORETYPE', 'OPENBLAS_L2_SIZE', 'PYPTO_SOMETHING_ELSE',"
        " 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS']\n"
        "print(json.dumps({k: os.environ.get(k) for k in keys}))\n"
    )
    got = run_workers(str(script), [1, 2])
    for t in (1, 2):
        assert got[t] == {
            "OPENBLAS_CORETYPE": None,
            "OPENBLAS_L2_SIZE": None,
            "PYPTO_SOMETHING_ELSE": "kept",
            "OMP_NUM_THREADS": str(t),
            "OPENBLAS_NUM_THREADS": str(t),
        }
    assert os.environ["OPENBLAS_CORETYPE"] == "Haswell"  # this process keeps them
    assert blas.free_env({"OPENBLAS_CORETYPE": "x", "OPENBLAS_L2_SIZE": "1", "A": "b"}) == {
        "A": "b"
    }


def test_blas_description():
    libs = [{"package": "numpy", "internal_api": "openblas", "version": "0.3.31",
             "architecture": "SkylakeX", "num_threads": 2}]  # fmt: skip
    assert blas.describe(libs) == "numpy's openblas 0.3.31 (SkylakeX kernels, 2 threads)"
    assert "threadpoolctl" in blas.describe([])
    for lib in blas.info():  # whatever this machine has, in the same shape
        assert set(lib) == {"package", "internal_api", "version", "architecture", "num_threads"}


def test_kernels_come_from_the_standard_workloads():
    ks = all_kernels()
    std = [(w.template, w.args) for w in STANDARD if w.template in KERNELS]
    assert [(k.template, k.args) for k in ks[: len(std)]] == std
    # then a decoder's one-row GEMMs and a matrix-vector product (memory-bound: GB/s),
    # in float32 and (the matmuls) float16, then the mixed-precision rows, each on a
    # named target with a dot kernel for its dtype
    decode = [(k.template, k.args, k.unit) for k in ks[len(std) : len(std) + 5]]
    assert decode == [("matmul", (1, 4096, 4096), "GB/s"),
                      ("dense_bias_gelu", (1, 4096, 4096), "GB/s"),
                      ("matmul", (4096, 1, 4096), "GB/s"),
                      ("matmul", (1, 4096, 4096, "float16"), "GB/s"),
                      ("matmul", (4096, 1, 4096, "float16"), "GB/s")]  # fmt: skip
    ks = ks[: len(std)] + ks[len(std) + 5 :]
    assert [(k.template, k.args, k.dtype) for k in ks[len(std) :]] == [
        ("matmul", (1024, 1024, 1024, "int8"), "int8"),
        ("matmul", (1024, 1024, 1024, "bfloat16"), "bfloat16"),
        ("matmul", (1024, 1024, 1024, "float16"), "float16"),
        ("conv2d_nchw", (1, 64, 56, 56, 64, 3, 3, 1, 1, "int8"), "int8"),
        ("conv2d_nchw", (1, 64, 56, 56, 64, 3, 3, 1, 1, "bfloat16"), "bfloat16"),
    ]
    assert all(k.target in pt.target.KNOWN for k in ks[len(std) :])
    # every template is benchmarked but the PyTorch operators' kernels (not in the suite yet)
    operators = {"gelu", "attention", "moe", "softmax_fwd", "layernorm_fwd", "rmsnorm_fwd"}
    operators |= {f"{n}_backward" for n in ("gelu", "softmax", "layernorm", "rmsnorm")}
    operators |= {"dense", "dense_requant"}  # int8 inference GEMMs: no reference in the suite yet
    assert {w.template for w in STANDARD} - set(KERNELS) == operators
    assert len({k.label for k in ks}) == len(ks)
    by = {k.label: k for k in ks}
    assert by["conv2d 64->64 56x56 s1"].work == 2.0 * 64 * 64 * 9 * 56 * 56
    assert by["conv2d 64->128 56x56 s2"].work == 2.0 * 128 * 64 * 9 * 28 * 28
    assert by["depthwise 64ch 3x3 56x56 s1"].work == 2.0 * 64 * 9 * 56 * 56
    assert by["matmul 128x3072x768"].work == 2.0 * 128 * 3072 * 768
    assert by["softmax 4096x4096"].unit == "GB/s"


def test_report_shows_the_default_config_next_to_the_tuned_one():
    def run(tuned_speed, default_speed):
        return {
            1: {
                "kernels": {
                    "matmul 512^3": {
                        "unit": "GFLOP/s",
                        "tuned": True,
                        "pypto": tuned_speed,
                        "default": default_speed,
                        "numpy": 100.0,
                    },
                    "softmax 4096x4096": {
                        "unit": "GB/s",
                        "tuned": False,
                        "pypto": 10.0,
                        "default": 10.0,
                    },
                },  # fmt: skip
                "blas": [],
            }
        }

    res = combine([run(90.0, 81.0), run(100.0, 80.0), run(80.0, 76.0)])
    cell = res[1]["matmul 512^3"]
    assert cell["pypto"] == 90.0 and cell["default"] == 80.0
    assert cell["default/tuned"] == pytest.approx(0.9)  # median of 0.9, 0.8, 0.95
    assert cell["ratio numpy"] == pytest.approx(0.9)
    text = report(res, {1: {"fma_gflops": 100.0, "triad_gbps": 20.0}})
    lines = text.splitlines()
    assert "default (/tuned)" in lines[0]
    mm = next(x for x in lines if "matmul 512^3" in x)
    assert "80.0 (0.90)" in mm and "100.0 (0.90x)" in mm  # numpy, pypto at 0.9x
    sm = next(x for x in lines if "softmax" in x)
    assert "(default: no record)" in sm and " same " in sm
    json.dumps(res)  # the --json output stays plain data


# ---------------------------------------------------------------- history and README table


def _entry():
    from benchmarks import history

    cell = {"unit": "GFLOP/s", "tuned": True, "pypto": 90.0, "numpy": 100.0,
            "ratio numpy": 0.9, "default": 45.0, "default/tuned": 0.5}  # fmt: skip
    row = {"unit": "GB/s", "tuned": False, "pypto": 20.0, "default": 20.0, "default/tuned": 1.0}
    return history.entry(
        {1: {"matmul 1024^3": cell, "softmax 4096x4096": row}},
        {1: {"fma_gflops": 100.0, "triad_gbps": 40.0}},
        runs=3,
        target="x86-avx2",
        version="0.1.0",
        blas="numpy's openblas",
    )


def test_history_appends_entries_and_the_table_is_generated_from_one(tmp_path):
    from benchmarks import history

    path = str(tmp_path / "h.jsonl")
    history.append(_entry(), path)
    with open(path, "a") as f:
        f.write("{torn line\n")  # a killed writer's partial line is skipped
    history.append(_entry(), path)
    entries = history.load(path)
    assert len(entries) == 2 and entries[0]["target"] == "x86-avx2"
    table = history.markdown(entries[-1])
    assert "| 1 | matmul 1024^3 | GFLOP/s | 90.0 | 90% | 45.0 (0.50) | 100.0 (0.90x) |  |  |" in (
        table
    )
    assert "| 1 | softmax 4096x4096 | GB/s | 20.0 | 50% | no record |  |  |  |" in table
    assert "medians over 3 whole runs" in table and "FMA 100.0 GFLOP/s" in table
    readme = f"intro\n{history.START}\nold table\n{history.END}\nrest\n"
    new = history.update(readme, table)
    assert new == f"intro\n{history.START}\n{table}\n{history.END}\nrest\n"
    assert history.update(new, table) == new
    with pytest.raises(ValueError, match="needs exactly one"):
        history.update("no markers", table)


def test_the_readme_performance_table_is_the_last_history_entry():
    """Generated by python -m benchmarks.history --update README.md, never pasted."""
    from benchmarks import history

    entries = history.load()
    assert entries, "benchmarks/history.jsonl has no entry"
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert history.update(readme, history.markdown(entries[-1])) == readme


def test_torch_ops_report_ratios_and_triad_share():
    """The operators' table: reference time / pypto time per reference, and a memory-bound
    row's GB/s (one read, one write of 4096 x 4096 floats) as a share of triad."""
    from benchmarks import torch_ops

    run = {1: {"rms_norm": {"pypto": 0.01, "eager": 0.03, "torch.compile": 0.015},
               "attention": {"pypto": 0.02, "sdpa": 0.03}}}  # fmt: skip
    text = torch_ops.report([run, run], {1: 26.8435456})
    assert "eager 30.00 ms (3.00x); torch.compile 15.00 ms (1.50x)" in text
    assert "13.4 GB/s = 50% of triad" in text  # 2 * 4 * 4096**2 / 0.01 s
    assert "sdpa 30.00 ms (1.50x)" in text


def test_torch_ops_refuses_an_unknown_row():
    r = subprocess.run([sys.executable, "-m", "benchmarks", "torch_ops", "--only", "conv"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2
    assert "--only 'conv' matches no row; rows: attention, attention causal, att" in r.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--threads", "0"], "argument --threads: takes positive integers, got '0'"),
        (["torch_ops", "--threads", "1,x"], "takes comma-separated integers, got '1,x'"),
        (["mixed", "--target", "nosuch"], "--target: unknown target 'nosuch'"),
        (["lower_times", "--against", "no-such-rev"], "'no-such-rev' is not a git revision"),
        ([".ray_throughput", "--trials", "0"], "--trials and --batch must be positive, got 0"),
        ([".ray_throughput", "--args", "1,2"], "matmul takes (M, N, K, dtype), got (1, 2)"),
        (["/examples/transformer_block.py", "--kv-heads", "3"], "--kv-heads 3 must divide"),
        (["/examples/transformer_block.py", "--dim", "30"], "--dim 30 must be a multiple of"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(argv, message):
    cmd = [sys.executable, "-m", "benchmarks", *argv]
    if argv[0].startswith("."):  # a module of its own: python -m benchmarks.ray_throughput
        cmd = [sys.executable, "-m", "benchmarks" + argv[0], *argv[1:]]
    elif argv[0].startswith("/"):  # a script beside the package
        cmd = [sys.executable, str(ROOT) + argv[0], *argv[1:]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_default_logs_are_those_of_a_target_whose_records_serve_the_host(monkeypatch):
    from benchmarks import suite

    derived = pt.Target("x86-avx512-bf16")  # its own records first, then x86-avx512's
    monkeypatch.setattr(pt, "Target", lambda name: derived)
    logs = suite._host_logs()
    own, base = (os.path.join(suite.LOGS, k) for k in ("x86-avx512-bf16", "x86-avx512"))
    assert logs == os.pathsep.join([own, base])
    # softmax has a log of its own target's; conv2d_nchw only x86-avx512's
    assert suite._template_log(logs, "softmax") == os.path.join(own, "softmax.jsonl")
    assert suite._template_log(logs, "conv2d_nchw") == os.path.join(base, "conv2d_nchw.jsonl")
    assert suite._template_log(logs, "no_such_template") is None


def test_mixed_rows_name_their_kernels_peak_and_torchs_exactness():
    """Each matmul is measured against the peak of the instruction its kernel uses, and
    torch's int8 output is reported wrong where it is (oneDNN without VNNI saturates)."""
    assert mixed.peak_name(pt.Target("x86-avx512-bf16"), "int8") == "vpdpbusd"
    assert mixed.peak_name(pt.Target("x86-avx512-bf16"), "bfloat16") == "vdpbf16ps"
    assert mixed.peak_name(pt.Target("x86-avx2-vnni"), "int8") == "vpdpbusd"
    assert mixed.peak_name(pt.Target("x86-avx2"), "int8") == "vpmaddwd"
    assert mixed.peak_name(pt.Target("aarch64-dotprod"), "int8") == "sdot"
    assert mixed.peak_name(pt.Target("x86-avx2"), "float32") == "fma"
    assert mixed.peak_name(pt.Target("x86-avx2"), "bfloat16") == "fma"  # float arithmetic
    want = np.arange(6.0).reshape(2, 3)
    assert mixed._torch_note(want.astype(np.int32), want) == "exact"
    got = want.astype(np.int32)
    got[1, 2] = -32768
    assert mixed._torch_note(got, want) == "WRONG in 1 of 6 outputs (max error 32773)"
