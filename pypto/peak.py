"""The machine's peaks for a target, measured once and cached: FMA throughput and
stream (triad) bandwidth, the two roofs a profiled stage is held against, and the
throughput of the target's integer and bfloat16 dot-product instruction, the roof of a
stage whose products are 8- or 16-bit (``DOT_ROOFS``; AMX's tile multiplies,
``TILE_ROOFS``, where the target has them).

    peaks = measure_peaks(target, compile_source, threads=2)   # Peaks(gflops, gbps, ...)
    peaks.roof("int8")   # GOP/s of vpdpbusd on x86-avx512-bf16; the FMA's without one
    peaks.roof("float64")  # half the float32 FMA's

Both kernels are C compiled with the target's own flags: the FMA kernel keeps
``PEAK_ACCUMULATORS`` independent vectors of the target's float32 width (GCC vector
extensions, so it is the same source for every ISA) in flight; the triad
``a[i] = b[i] + s * c[i]`` streams three arrays of twice the target's last-level
cache (at least 16 MiB each) and counts 24 bytes per element. Several threads whose
FMA or dot roofs reach less than 1.5 times one thread's, or whose triad less than
one's, are measured again (up to ``_TRIES`` times, the best of each kept; other
processes had a core), with a warning if they still do. The numbers are kept in
``$PYPTO_HOME/peaks.json`` keyed by target and thread count, so they are measured once
per machine; delete the file to measure again.
"""

from __future__ import annotations

import ctypes
import json
import os
import warnings
from dataclasses import dataclass

from .amx import C_HELPERS
from .cache import atomic_write, home
from .target import Target

PEAK_ACCUMULATORS = 12  # independent FMA chains: latency x ports on current cores
_FMA_ITERS = 2_000_000
_TRIAD_MIN_BYTES = 16 << 20
_ROUNDS = 5  # best of
_TRIES = 3  # measurements with several threads while they lose to one thread

_SOURCE = """#include <stdint.h>
#include <stdlib.h>
#include <omp.h>
typedef float pt_vec __attribute__((vector_size({vbytes})));

/* GFLOP/s of {acc} independent FMA chains per thread, on every thread */
double pt_peak_fma(int64_t iters, int threads) {{
  double best = 0;
  for (int round = 0; round < {rounds}; ++round) {{
    double t0 = omp_get_wtime();
    float sink = 0;
    #pragma omp parallel num_threads(threads) reduction(+:sink)
    {{
      pt_vec acc[{acc}], a, b;
      for (int l = 0; l < {lanes}; ++l) {{ a[l] = 0.999999f; b[l] = 1e-7f * (l + 1); }}
      for (int k = 0; k < {acc}; ++k) acc[k] = a * (float)(k + omp_get_thread_num());
      for (int64_t i = 0; i < iters; ++i) {{
        #pragma GCC unroll {acc}
        for (int k = 0; k < {acc}; ++k) acc[k] = acc[k] * a + b;
      }}
      for (int k = 0; k < {acc}; ++k) for (int l = 0; l < {lanes}; ++l) sink += acc[k][l];
    }}
    double dt = omp_get_wtime() - t0;
    double g = 2.0 * {acc} * {lanes} * (double)iters * threads / dt / 1e9;
    if (sink != sink) g = 0;  /* keeps the sums alive */
    if (g > best) best = g;
  }}
  return best;
}}

/* GB/s of the triad a = b + s * c over n doubles, 24 bytes per element */
double pt_peak_triad(int64_t n, int threads) {{
  double *a = aligned_alloc(64, n * 8), *b = aligned_alloc(64, n * 8),
         *c = aligned_alloc(64, n * 8);
  if (!a || !b || !c) {{ free(a); free(b); free(c); return 0; }}
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {{ a[i] = 0; b[i] = 1; c[i] = 2; }}
  double best = 0;
  for (int round = 0; round < {rounds}; ++round) {{
    double t0 = omp_get_wtime();
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0 * c[i];
    double dt = omp_get_wtime() - t0;
    double g = 24.0 * (double)n / dt / 1e9;
    if (g > best) best = g;
  }}
  free(a); free(b); free(c);
  return best;
}}
"""


FMA_SHARE = {"float64": 0.5}  # of the float32 FMA rate: a dtype's lanes per float32 lane


@dataclass(frozen=True, slots=True)
class Peaks:
    """The roofs: float32 FMA GFLOP/s and triad GB/s with ``threads`` threads, and
    ``dot``: ``(dtype, GOP/s)`` of the target's dot-product instruction per input dtype."""

    gflops: float
    gbps: float
    threads: int
    dot: tuple = ()

    def roof(self, dtype: str) -> float:
        """The compute roof of products of ``dtype``: its dot instruction's, else the FMA's
        (float64: half the float32 rate, as a vector holds half as many)."""
        return dict(self.dot).get(dtype, self.gflops * FMA_SHARE.get(dtype, 1.0))


@dataclass(frozen=True, slots=True)
class DotRoof:
    """How a target multiplies ``dtype`` fastest: ``insn`` (inline assembly: into the
    accumulator ``%[acc]``, or, with ``add``, into a product ``%[t]`` that ``add`` then
    sums into ``%[acc]``; operands ``%[x]`` and ``%[y]``) on vectors of ``bits``, ``ops``
    (multiplies and adds) per instruction."""

    dtype: str
    needs: tuple  # target features
    bits: int
    insn: str
    ops: int
    add: str = ""
    reg: str = "v"  # the asm constraint of a vector register

    @property
    def name(self) -> str:
        """The instruction's mnemonic (``vpdpbusd``, ``vpmaddwd``, ``sdot``)."""
        return self.insn.replace("%{vex%} ", "").split()[0]


_MADD = ("vpmaddwd %[y], %[x], %[t]", "vpaddd %[t], %[acc], %[acc]")
# the first row whose features the target has and whose width is the target's is used
DOT_ROOFS = (
    DotRoof("int8", ("avx512_vnni", "avx512f"), 512, "vpdpbusd %[y], %[x], %[acc]", 128),
    DotRoof("int8", ("avx_vnni", "avx2"), 256, "%{vex%} vpdpbusd %[y], %[x], %[acc]", 64),
    DotRoof("int8", ("avx512bw", "avx512f"), 512, _MADD[0], 64, _MADD[1]),
    DotRoof("int8", ("avx2",), 256, _MADD[0], 32, _MADD[1]),
    DotRoof("int8", ("asimddp",), 128, "sdot %[acc].4s, %[x].16b, %[y].16b", 32, reg="w"),
    DotRoof("bfloat16", ("avx512_bf16", "avx512f"), 512, "vdpbf16ps %[y], %[x], %[acc]", 64),
)  # fmt: skip
DOT_ACCUMULATORS = 12  # independent chains, fewer where the products need registers too


@dataclass(frozen=True, slots=True)
class TileRoof:
    """AMX's tile multiply of ``dtype``: the intrinsic ``insn`` (``_tile_dpbssd``) into a
    16 x 16 tile of 32-bit accumulators, ``ops`` multiplies and adds per instruction."""

    dtype: str
    needs: tuple
    insn: str
    ops: int

    @property
    def name(self) -> str:
        return "t" + self.insn.removeprefix("_tile_")  # _tile_dpbssd: tdpbssd


# preferred to the vector instruction where the target has them
TILE_ROOFS = (
    TileRoof("int8", ("amx_tile", "amx_int8"), "_tile_dpbssd", 2 * 16 * 16 * 64),
    TileRoof("uint8", ("amx_tile", "amx_int8"), "_tile_dpbuud", 2 * 16 * 16 * 64),
    TileRoof("bfloat16", ("amx_tile", "amx_bf16"), "_tile_dpbf16ps", 2 * 16 * 16 * 32),
)
TILE_ACCUMULATORS = 6  # of the 8 tiles; two hold the operands


def dot_roofs(target: Target) -> tuple:
    """The ``DotRoof`` (or AMX's ``TileRoof``) per dtype that ``target`` has one for."""
    out = {r.dtype: r for r in TILE_ROOFS if target.has(*r.needs)}
    for r in DOT_ROOFS:
        if r.dtype not in out and target.vector_bits == r.bits and target.has(*r.needs):
            out[r.dtype] = r
    return tuple(out.values())


def _dot_steps(r: DotRoof, n: int) -> list:
    """One iteration over ``n`` accumulators: every product, then every sum (as a kernel
    issues them: on a Zen 4, 1.2x the rate of each product followed by its sum)."""
    v = r.reg
    if not r.add:
        return [f'__asm__ volatile("{r.insn}" : [acc] "+{v}"(a{k}) : [x] "{v}"(x), [y] "{v}"(y));'
                for k in range(n)]  # fmt: skip
    return [
        *(f'__asm__ volatile("{r.insn}" : [t] "={v}"(t{k}) : [x] "{v}"(x), [y] "{v}"(y));'
          for k in range(n)),
        *(f'__asm__ volatile("{r.add}" : [acc] "+{v}"(a{k}) : [t] "{v}"(t{k}));' for k in range(n)),
    ]  # fmt: skip


def _timed(name: str, body: list, ops: str) -> list:
    """``double name(int64_t iters, int threads)``: the best GOP/s of ``_ROUNDS`` runs of
    ``body`` (per thread) counting ``ops`` operations (a C expression of ``iters``)."""
    return [
        f"double {name}(int64_t iters, int threads) {{",
        "  double best = 0;",
        f"  for (int round = 0; round < {_ROUNDS}; ++round) {{",
        "    double t0 = omp_get_wtime();",
        "    int32_t sink = 0;",
        "    #pragma omp parallel num_threads(threads) reduction(+:sink)",
        "    {",
        *("      " + line for line in body),
        "    }",
        "    double dt = omp_get_wtime() - t0;",
        f"    double g = {ops} * threads / dt / 1e9;",
        "    if (sink == 12345) g = 0;  /* keeps the sums alive */",
        "    if (g > best) best = g;",
        "  }",
        "  return best;",
        "}",
    ]


def _vector_roof(target: Target, r: DotRoof) -> list:
    n = DOT_ACCUMULATORS
    if r.add:  # a product register per accumulator, and x and y
        n = min(n, (target.vector_registers - 2) // 2)
    vec = f"pt_dot_{r.dtype}_vec"
    names = [f"a{k}" for k in range(n)] + [f"t{k}" for k in range(n) if r.add]
    body = [
        f"{vec} x, y;",
        "memset(&x, 1, sizeof x); memset(&y, 0, sizeof y);",
        f"{vec} " + ", ".join(f"{a} = x" for a in names) + ";",
        "for (int64_t i = 0; i < iters; ++i) {",
        *("  " + step for step in _dot_steps(r, n)),
        "}",
        "sink += " + " + ".join(f"{a}[0]" for a in names) + ";",
    ]
    return [
        f"typedef int32_t {vec} __attribute__((vector_size({r.bits // 8})));",
        *_timed(f"pt_peak_dot_{r.dtype}", body, f"{r.ops}.0 * {n} * (double)iters"),
    ]


def _tile_roof(target: Target, r: TileRoof) -> list:
    n = TILE_ACCUMULATORS
    body = [
        "pt_amx_start();",
        *(f"_tile_zero({t});" for t in range(n + 2)),
        "for (int64_t i = 0; i < iters / 16; ++i) {",
        *(f"  {r.insn}({t}, {n}, {n + 1});" for t in range(n)),
        "}",
    ]
    return [C_HELPERS, *_timed(f"pt_peak_dot_{r.dtype}", body, f"{r.ops}.0 * {n} * (iters / 16)")]


_ROOF_SOURCE = {DotRoof: _vector_roof, TileRoof: _tile_roof}


def dot_source(target: Target) -> str:
    """C with ``double pt_peak_dot_<dtype>(int64_t iters, int threads)`` (GOP/s) per
    dtype ``target`` has a dot instruction for (AMX's: 1/16 of the iterations, each
    instruction being 16 rows)."""
    out = ["#include <stdint.h>", "#include <string.h>", "#include <omp.h>"]
    for r in dot_roofs(target):
        out += _ROOF_SOURCE[type(r)](target, r)
    return "\n".join(out) + "\n"


def peak_source(target: Target) -> str:
    """The C of the two peak kernels for ``target`` (its float32 vector width)."""
    lanes = target.vector_lanes("float32")
    return _SOURCE.format(vbytes=4 * lanes, lanes=lanes, acc=PEAK_ACCUMULATORS, rounds=_ROUNDS)


def _short(single: Peaks, threads: int, gflops: float, gbps: float, dots: list) -> bool:
    """Whether several threads' roofs fall short of one thread's: the arithmetic ones
    below 1.5 times it, the triad below it. Other work had a core (or the threads share
    one), so the caller measures again, keeping the best (cached, a roof measured while
    the machine was busy would misjudge every later profile)."""
    gain = min(threads, 1.5)
    ones = [g for _, g in single.dot]
    return (
        gflops < gain * single.gflops
        or gbps < single.gbps
        or any(g < gain * one for g, one in zip(dots, ones))
    )


def _store() -> str:
    return os.path.join(home(), "peaks.json")


def _read() -> dict:
    try:
        with open(_store()) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def measure_peaks(target: Target, compile_source, threads: int) -> Peaks:
    """The peaks of ``target`` on this machine with ``threads`` threads: from the cache
    in ``$PYPTO_HOME``, else measured (about a second) with kernels compiled by
    ``compile_source(source, flags)`` and then cached."""
    key = f"{target.name}/{threads}"
    seen = _read().get(key)
    roofs = dot_roofs(target)
    if (
        isinstance(seen, dict)
        and seen.get("gflops", 0) > 0
        and seen.get("gbps", 0) > 0
        and isinstance(seen.get("dot"), dict)
        and all(seen["dot"].get(r.dtype, 0) > 0 for r in roofs)
    ):
        dot = tuple((r.dtype, float(seen["dot"][r.dtype])) for r in roofs)
        return Peaks(float(seen["gflops"]), float(seen["gbps"]), threads, dot)
    lib = ctypes.CDLL(compile_source(peak_source(target) + dot_source(target), target.cflags))
    dot_fns = [getattr(lib, f"pt_peak_dot_{r.dtype}") for r in roofs]
    for fn in (lib.pt_peak_fma, lib.pt_peak_triad, *dot_fns):
        fn.restype = ctypes.c_double
        fn.argtypes = [ctypes.c_int64, ctypes.c_int]
    llc = max((v for v in (target.cache_sizes or {}).values() if v), default=0)
    n = max(2 * llc, _TRIAD_MIN_BYTES) // 8
    single = measure_peaks(target, compile_source, 1) if threads > 1 else None
    gflops = gbps = 0.0
    dots = [0.0] * len(roofs)
    for _ in range(_TRIES):
        gflops = max(gflops, lib.pt_peak_fma(_FMA_ITERS, threads))
        gbps = max(gbps, lib.pt_peak_triad(n, threads))
        dots = [max(g, fn(_FMA_ITERS, threads)) for g, fn in zip(dots, dot_fns)]
        if single is None or not _short(single, threads, gflops, gbps, dots):
            break
    if single is not None and _short(single, threads, gflops, gbps, dots):
        warnings.warn(
            f"the peaks of {target.name} with {threads} threads stayed below one thread's "
            f"after {_TRIES} tries (other work running, or threads sharing a core?); delete "
            f"{_store()} to measure again",
            stacklevel=2,
        )
    dot = tuple((r.dtype, g) for r, g in zip(roofs, dots))
    peaks = Peaks(gflops, gbps, threads, dot)
    if peaks.gflops <= 0 or peaks.gbps <= 0 or any(g <= 0 for _, g in dot):
        raise RuntimeError(f"measuring the peaks of {target.name} failed: {peaks}")
    data = _read()
    data[key] = {"gflops": peaks.gflops, "gbps": peaks.gbps, "dot": dict(dot)}
    try:  # only a cache: the peaks stand whether or not they are kept
        os.makedirs(home(), mode=0o700, exist_ok=True)
        atomic_write(_store(), json.dumps(data, indent=1).encode(), 0o600)
    except OSError as e:
        warnings.warn(f"the measured peaks could not be kept in {_store()} ({e})", stacklevel=2)
    return peaks
