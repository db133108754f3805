"""The mixed-precision rows of the suite: int8 and bfloat16 matmul 1024^3.

Each runs on the richest named target this machine runs that has a dot-product
kernel for its dtype (``x86-avx512-bf16`` on a CPU with AVX-512 VNNI and BF16, else
``x86-avx2-vnni``, else the host's own target with its ``vpmaddwd`` kernel), with the
template's default config (no tuning records are shipped for these workloads), against
``torch._int_mm`` (int8 -> int32) and PyTorch's bfloat16 matmul in the same run. The
summary relates them to pypto's float32 matmul of the same shape in the same run.
"""

from __future__ import annotations

import numpy as np

import pypto as pt
from autotune.templates.dot_ukernels import dot_isa
from pypto.dtypes import numpy_dtype
from pypto.target import KNOWN

SHAPE = (1024, 1024, 1024)
DTYPES = ("int8", "bfloat16")


def dot_target(dtype: str) -> str:
    """The first named target (the table lists the richest first within an architecture)
    this machine runs whose ``matmul`` has a dot-product kernel for ``dtype``; else host."""
    host = pt.Target("host")
    for name in (*(n for n in KNOWN if n.endswith(("-bf16", "-vnni"))), host.name):
        t = pt.Target(name)
        if t.can_run() and dot_isa(t, dtype) is not None:
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


def _bf16_mm(torch):
    return lambda a, b, c: torch.matmul(a, b, out=c)


TORCH = {"int8": _int_mm, "bfloat16": _bf16_mm}


def label(dtype: str) -> str:
    return f"matmul {dtype} 1024^3"


def summary(results: dict) -> str:
    """Per thread count: each mixed row against pypto's float32 matmul 1024^3 and torch."""
    lines = []
    for t, res in results.items():
        f32 = res.get("matmul 1024^3", {}).get("pypto")
        for dt in DTYPES:
            r = res.get(label(dt))
            if not r:
                continue
            parts = [f"{t} thread(s): {dt} {r['pypto']:.0f} GOP/s on {r.get('target', '?')}"]
            if f32:
                parts.append(f"{r['pypto'] / f32:.2f}x pypto float32 ({f32:.0f})")
            if r.get("torch"):
                parts.append(f"{r['ratio torch']:.2f}x torch ({r['torch']:.0f})")
            lines.append(", ".join(parts))
    return "\n".join(lines)
