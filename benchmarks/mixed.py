"""The mixed-precision rows of the suite: int8, bfloat16 and float16 matmul 1024^3, and
the int8 and bfloat16 ResNet-18 64->64 56x56 convolutions.

Each runs on the richest named target this machine runs that has a dot-product
kernel for its dtype (``x86-amx`` with AMX's tiles, else ``x86-avx512-bf16`` on a CPU
with AVX-512 VNNI and BF16, else ``x86-avx2-vnni``, else the host's own target with its
``vpmaddwd`` kernel), with the
template's default config (no tuning records are shipped for these workloads); the
matmuls against ``torch._int_mm`` (int8 -> int32) and PyTorch's bfloat16 and float16
matmuls in the same run (float16 has no dot kernel: the host's target, float32 tiles).
The summary relates each to pypto's float32 row of the same shape (``ROWS``).

    python -m benchmarks mixed [--threads 1,2] [--repeat 15] [--target NAME]

runs just these rows: pypto's int8, bfloat16, float16 and float32 matmul 1024^3 against torch,
in interleaved blocks of rounds (medians of the per-round ratios, ``compare``; pypto's
float32 runs in each 16-bit and int8 row's rounds too, for its ratio to it), each as a
fraction of the peak of the instruction its kernel uses (``pypto.peak``'s roofs, with as
many threads), and
says whether torch's int8 result was exact. ``--target`` runs pypto's kernels of a
lesser target this machine runs (``x86-avx2``: the ``vpmaddwd`` kernel); to hold
PyTorch to the same instructions, set ``ONEDNN_MAX_CPU_ISA=AVX2
ATEN_CPU_CAPABILITY=avx2`` for the run (printed with the results).
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np

import pypto as pt
from autotune.templates.dot_ukernels import usable
from benchmarks.common import block_times, counts
from pypto import peak, runtime
from pypto.arg_checks import aligned_copy
from pypto.dtypes import numpy_dtype
from pypto.target import KNOWN

SHAPE = (1024, 1024, 1024)
DTYPES = ("int8", "bfloat16", "float16")


def dot_target(dtype: str) -> str:
    """The first named target extending another (the table lists the richest first
    within an architecture) this machine runs whose ``matmul`` of ``SHAPE`` has a
    dot-product or tile kernel for ``dtype``; else host."""
    host = pt.Target("host")
    M, N, K = SHAPE
    for name in (*(n for n, spec in KNOWN.items() if spec.base), host.name):
        t = pt.Target(name)
        if t.can_run() and usable(t, dtype, K, M, N) is not None:
            return name
    return host.name


def random_array(rng, shape, dtype: str) -> np.ndarray:
    """Inputs of ``dtype``: full-range integers, or standard normal floats."""
    if dtype in ("int8", "uint8", "int32"):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -128), min(info.max, 127) + 1, shape).astype(dtype)
    return rng.standard_normal(shape, dtype=np.float32).astype(numpy_dtype(dtype))


def to_torch(torch, a: np.ndarray):
    """A torch tensor sharing ``a``'s memory (bfloat16 through its bits)."""
    if a.dtype == numpy_dtype("bfloat16"):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _int_mm(torch):
    return lambda a, b, c: torch._int_mm(a, b, out=c)


def _mm(torch):
    return lambda a, b, c: torch.matmul(a, b, out=c)


TORCH = {"int8": _int_mm, "bfloat16": _mm, "float16": _mm, "float32": _mm}


def label(dtype: str) -> str:
    return f"matmul {dtype} 1024^3"


# the suite's int8 convolution row: ResNet-18's 64->64 56x56 layer, next to the float32 one
CONV_ARGS = (1, 64, 56, 56, 64, 3, 3, 1, 1)
CONV_LABEL = "conv2d int8 64->64 56x56 s1"
CONV_BF16_LABEL = "conv2d bfloat16 64->64 56x56 s1"
# each mixed row of the suite and the float32 row it is set against
ROWS = (
    *((label(dt), "matmul 1024^3") for dt in DTYPES),
    (CONV_LABEL, "conv2d 64->64 56x56 s1"),
    (CONV_BF16_LABEL, "conv2d 64->64 56x56 s1"),
)


def summary(results: dict) -> str:
    """Per thread count: each mixed row against pypto's float32 row of the same shape
    (``ROWS``) and torch."""
    lines = []
    for t, res in results.items():
        for name, f32_row in ROWS:
            f32 = res.get(f32_row, {}).get("pypto")
            r = res.get(name)
            if not r:
                continue
            parts = [f"{t} thread(s): {name} {r['pypto']:.0f} GOP/s on {r.get('target', '?')}"]
            if f32:
                parts.append(f"{r['pypto'] / f32:.2f}x pypto float32 ({f32:.0f})")
            if r.get("torch"):
                parts.append(f"{r['ratio torch']:.2f}x torch ({r['torch']:.0f})")
            lines.append(", ".join(parts))
    return "\n".join(lines)


def peak_name(target: pt.Target, dtype: str) -> str:
    """The instruction a ``dtype`` matmul on ``target`` is held to (``pypto.peak``'s
    roofs): the target's dot-product instruction for ``dtype``, else the FMA."""
    roofs = {r.dtype: r for r in peak.dot_roofs(target)}
    return roofs[dtype].name if dtype in roofs else "fma"


def peaks(target: pt.Target, threads: int) -> peak.Peaks:
    """``target``'s roofs with ``threads`` threads, measured once per machine (cached)."""
    return peak.measure_peaks(target, runtime.compile_source, threads)


def _torch_note(got: np.ndarray, want: np.ndarray) -> str:
    """Whether torch's int8 product was exact (oneDNN's AVX2 kernel is not)."""
    bad = int(np.count_nonzero(got != want))
    if not bad:
        return "exact"
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    return f"WRONG in {bad} of {got.size} outputs (max error {err:.0f})"


def _kernels(dtype: str, threads: int, rng, target_name: str | None = None):
    """``{"pypto": call, "torch": call}`` for the ``dtype`` matmul, pypto's output checked;
    with the target's name and whether torch's int8 output was exact."""
    import torch

    import autotune as at

    torch.set_num_threads(threads)
    target = pt.Target(target_name or dot_target(dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no shipped record: the default config
        s, tensors = at.get_template("matmul")(*SHAPE, dtype, target=target)
    mod = pt.build(s, tensors, target=target, name=f"matmul_{dtype}")
    # line-aligned, as torch allocates its own tensors (numpy's start 16 bytes into a line)
    a, b = (aligned_copy(random_array(rng, (1024, 1024), dtype)) for _ in range(2))
    c = aligned_copy(np.zeros((1024, 1024), numpy_dtype(tensors[-1].dtype)))
    mod(a, b, c)
    want = a.astype(np.float64) @ b.astype(np.float64)
    if dtype == "int8":
        np.testing.assert_array_equal(c, want)
    else:
        np.testing.assert_allclose(c.astype(np.float64), want, rtol=2e-2, atol=0.1)
    ta, tb, tc = (to_torch(torch, x) for x in (a, b, c))
    mm = TORCH[dtype](torch)
    mm(ta, tb, tc)
    note = _torch_note(c, want) if dtype == "int8" else ""
    fns = {"pypto": lambda: mod(a, b, c), "torch": lambda: mm(ta, tb, tc)}
    return target.name, fns, note


def compare(
    dtype: str, threads: int, repeat: int, target: str | None = None, f32: str | None = None
) -> dict:
    """pypto and torch timed in ``repeat`` rounds each, in blocks after a pause
    (``common.block_times``: the idle threads of the other library's OpenMP runtime
    spin for a while after its call and took the cores; call by call at 2 threads the
    per-pair ratios spread over 0.1-11): median speeds, the median of the per-round
    ratios and their range (the noise). With ``f32`` (a target), pypto's float32 matmul
    on it runs in the same rounds: ``vs_f32``, the median of its per-round ratios (on a
    shared machine whose speed drifts, a ratio of medians timed minutes apart is not)."""
    pt.set_num_threads(threads)
    rng = np.random.default_rng(0)
    name, fns, note = _kernels(dtype, threads, rng, target)
    if f32 is not None:
        fns["float32"] = _kernels("float32", threads, rng, f32)[1]["pypto"]
    secs = block_times(fns, rounds=repeat, round_s=0.05)
    work = 2.0 * np.prod(SHAPE) / 1e9
    ratios = [t / p for p, t in zip(secs["pypto"], secs["torch"])]
    out = {k: work / float(np.median(v)) for k, v in secs.items()}
    if f32 is not None:
        out["vs_f32"] = float(np.median([f / p for p, f in zip(secs["pypto"], secs["float32"])]))
    out.update(target=name, ratio=float(np.median(ratios)), torch_note=note)
    out.update(ratio_min=min(ratios), ratio_max=max(ratios))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks mixed",
        description="int8, bfloat16, float16 and float32 matmul 1024^3 against torch",
    )
    p.add_argument(
        "--threads", type=counts, default="1,2", help="comma-separated thread counts (1,2)"
    )
    p.add_argument("--repeat", type=int, default=15, help="timed rounds of each (15)")
    p.add_argument(
        "--target",
        help="run pypto's kernels for this target (it must run here; default: the "
        "richest target here with a dot kernel for each dtype, the host's for float32)",
    )
    a = p.parse_args(argv)
    try:
        runs = a.target is None or pt.Target(a.target).can_run()
    except ValueError as e:  # an unknown name
        p.error(f"--target: {e}")
    if not runs:
        p.error(f"target {a.target} cannot run on this machine")
    import torch

    isa_cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "all")
    print(f"torch {torch.__version__}: ATen {torch.backends.cpu.get_cpu_capability()}, "
          f"oneDNN ISA cap {isa_cap}")  # fmt: skip
    for t in a.threads:
        print(f"{t} thread(s):")
        host = a.target or pt.Target("host").name
        for dt in ("float32", *DTYPES):
            f32 = host if dt != "float32" else None
            r = compare(dt, t, a.repeat, a.target or (None if f32 else host), f32)
            target = pt.Target(r["target"])
            roof = peaks(target, t).roof(dt)
            of = f", {r['pypto'] / roof:.0%} of {peak_name(target, dt)} ({roof:.0f})"
            rel = f", {r['vs_f32']:.2f}x pypto float32 (same rounds)" if f32 else ""
            note = f" (torch {r['torch_note']})" if r["torch_note"] else ""
            print(
                f"  {label(dt)} on {r['target']}: pypto {r['pypto']:.0f}{of}{rel}, torch "
                f"{r['torch']:.0f}{note}; pypto/torch {r['ratio']:.2f} (per-round pairs "
                f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f})"
            )
