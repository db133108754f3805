"""float16 rows converted by the target's conversion instructions (F16C, AVX-512F).

pypto keeps float16 in ``uint16_t`` and converts it in integer and float arithmetic
that gcc vectorizes (``pypto.dtypes``): gcc 12 leaves its own ``_Float16``
conversions scalar. Where the target has ``vcvtph2ps`` / ``vcvtps2ph`` (a rule table
of ISA feature -> vector conversion), a template converts float16 that it reads in
place with a tensor intrinsic (``pypto.tensorize``) into a float32 buffer in L1, and
the loops that compute read float32 from there. A matrix-vector product's pass over
4 rows of B (``skinny.stream_matmul``), a vector of each row at a time (W: 16 lanes)::

    for ko:                                  for ko:
      vectorized for j:                        for jw:
        acc[j] += a[4ko] * half(B[4ko, j])       for r in 0..4:
                + ... (4 rows)           ->        widen_avx512f_f16_16(B[4ko + r, W jw:], Bw[r, :])
                                                 vectorized for j in 0..W:
                                                   acc[W jw + j] += a[4ko] * Bw[0, j] + ... (4 rows)

and a row-wise template's row, converted once for its passes, its output narrowed
chunk by chunk (``norm_stream.narrowed_rows``)::

    parallel for i:                          parallel for i:
      mx = max_j half(X[i, j])                 widen_avx512f_f16_1024(X[i, :], X_f32)   (by 1024)
      ex[j] = exp(half(X[i, j]) - mx)   ->     mx = max_j X_f32[j];  ex[j] = exp(X_f32[j] - mx)
      Y[i, j] = ex[j] / sum (rounded)          for jo:  Yr[j] = ex[256 jo + j] / sum
                                                        narrow_avx512f_f16_256(Yr, Y[i, 256 jo:])

A float16 row converted in L1 runs at 0.04 ns an element with the instruction,
against 0.16 in integer arithmetic (one Zen 4 core, 16 lanes); a matrix-vector
product of float16 weights is then bound by memory, as bfloat16's is.

Both conversions are exact as the integer ones are, bit for bit (NaN aside: a NaN
stays a NaN): widening takes subnormal halves exactly, and narrowing rounds to
nearest even, subnormal results included; neither flushes under the flush-to-zero
and denormals-are-zero modes (``torch.set_flush_denormal``) that float32 arithmetic
honours. A row's last ``n % lanes`` elements go through a vector-sized copy on the
stack, so the intrinsic reads and writes only its own ``n`` elements.
"""

from __future__ import annotations

import pypto as pt

F16, F32 = "float16", "float32"

# target feature -> (lanes, the halves' vector type, its load, its store, widen, narrow
# (rounding to nearest even, no exceptions), the floats' load, their store); the first
# feature the target has wins
CONVERSIONS = (
    ("avx512f", 16, "__m256i", "_mm256_loadu_si256", "_mm256_storeu_si256",
     "_mm512_cvtph_ps", "_mm512_cvtps_ph", "_mm512_loadu_ps", "_mm512_storeu_ps"),
    ("f16c", 8, "__m128i", "_mm_loadu_si128", "_mm_storeu_si128",
     "_mm256_cvtph_ps", "_mm256_cvtps_ph", "_mm256_loadu_ps", "_mm256_storeu_ps"),
)  # fmt: skip

# a long row converted this many elements a call: each call's run of float16 is at most
# 2 KiB, within what one loop iteration prefetches (``pypto.prefetch``'s ``spread``)
ROW_CHUNK = 1024

_ROUND = "_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC"

# the contiguous rows whole vectors at a time, a strided or short row through a
# vector-sized copy of it (``in``, ``out``)
_SOURCE = """\
#include <immintrin.h>
static inline void {name}(const {src}* restrict a, int64_t a_s0, {dst}* restrict y,
                          int64_t y_s0) {{
  int64_t j = 0;
  if (a_s0 == 1 && y_s0 == 1)
    for (; j + {lanes} <= {n}; j += {lanes}) {store}(({store_t}*)(y + j), {conv_a});
  if (j < {n}) {{
    {src} in[{lanes}] = {{0}};
    {dst} out[{lanes}];
    for (int64_t t = j; t < {n} && t < j + {lanes}; ++t) in[t - j] = a[t * a_s0];
    for (; j < {n}; j += {lanes}) {{
      {store}(({store_t}*)out, {conv_in});
      for (int64_t t = j; t < {n} && t < j + {lanes}; ++t) y[t * y_s0] = out[t - j];
      for (int64_t t = j + {lanes}; t < {n} && t < j + 2 * {lanes}; ++t)
        in[t - j - {lanes}] = a[t * a_s0];
    }}
  }}
}}
"""


def conversion(target: pt.Target):
    """The target's float16 conversion rule (a row of ``CONVERSIONS``), or None."""
    return next((r for r in CONVERSIONS if target.has(r[0])), None)


def chunk(target: pt.Target) -> int:
    """Elements of a chunk converted for a pass that produces or consumes it chunk by
    chunk (``norm_stream.schedule_stream``): 16 vectors of the target's conversion."""
    return 16 * conversion(target)[1]


def intrin(target: pt.Target, n: int, widen: bool = True):
    """A tensor intrinsic converting ``n`` float16 to float32 (``widen``) or float32 to
    float16 on ``target`` (which must have a ``conversion``), registered by a name that
    tells its ISA, so a schedule using it replays from JSON."""
    feature, lanes, half_t, hload, hstore, cvt_in, cvt_out, fload, fstore = conversion(target)
    src_dt, dst_dt = (F16, F32) if widen else (F32, F16)
    a = pt.placeholder((n,), src_dt, name="a")
    y = pt.compute((n,), lambda j: pt.cast(dst_dt, a[j]), name="y")
    if widen:
        conv = lambda x: f"{cvt_in}({hload}((const {half_t}*)({x})))"  # noqa: E731
        src, dst, store, store_t = "uint16_t", "float", fstore, "float"
    else:
        conv = lambda x: f"{cvt_out}({fload}({x}), {_ROUND})"  # noqa: E731
        src, dst, store, store_t = "float", "uint16_t", hstore, half_t
    name = f"{'widen' if widen else 'narrow'}_{feature}_f16_{n}"
    source = _SOURCE.format(
        name=name, n=n, lanes=lanes, src=src, dst=dst, store=store, store_t=store_t,
        conv_a=conv("a + j"), conv_in=conv("in"),
    )  # fmt: skip
    return pt.TensorIntrin.register(name, y.op, source)


def widened(T, target: pt.Target, name: str = ""):
    """``T`` read in float32 through a stage (``name``, else T's name and ``_f32``) that
    ``convert_at`` converts by rows, where it is float16 and ``target`` has a
    ``conversion``; else ``T`` itself."""
    if str(T.dtype) != F16 or conversion(target) is None:
        return T
    return pt.compute(T.shape, lambda *ix: pt.cast(F32, T[ix]), name=name or T.name + "_f32")


def convert_at(s, T, stage, loop, n: int, target: pt.Target) -> None:
    """``T`` (a ``widened`` stage, or a float16 copy of a float32 stage) computed at
    ``loop`` of ``stage``, its rows of ``n`` (its last axis's extent there) converted
    by the target's instructions, ``ROW_CHUNK`` elements a call (a row's last partial
    chunk in a plain loop)."""
    s[T].compute_at(s[stage], loop)
    ax = T.op.axis[-1]
    if n > ROW_CHUNK:
        _, ax = s[T].split(ax, factor=ROW_CHUNK)
    s[T].tensorize(ax, intrin(target, min(n, ROW_CHUNK), widen=str(T.dtype) == F32))
