"""Non-temporal stores for row-wise outputs that do not fit in the last-level cache.

A plain store first reads its cache line (write-allocate), so a kernel that reads
X and writes Y moves three arrays' worth of bytes, not two; and the lines it
writes evict the input rows still to come. A non-temporal (streaming) store
writes full lines straight to memory. Where the target has them (a rule table
of ISA feature -> vector store), a row-wise template with its ``stream`` knob on
computes each chunk of a row of its output into a buffer in L1 and copies it out
with streaming stores, a tensor intrinsic (``pypto.tensorize``)::

    parallel for i:                        parallel for i:
      ... row reductions of X[i, :] ...      ... row reductions of X[i, :] ...
      vectorized for j:             ->       for jo:   (chunks of C = 16 vectors)
        Y[i, j] = f(X[i, j])                   vectorized for j: Yr[j] = f(X[i, jo * C + j])
                                               stream_<isa>_f32_<C>(Yr, 1, Y + i * cols + jo * C, 1)
                                             _mm_sfence();   (the intrinsic's fence)

The copy peels scalar stores until ``Y + i * cols + j`` is aligned to the
vector width, streams whole vectors and stores the tail scalar. Its fence
(``sfence``, so the rows are visible to other threads when the call returns)
runs once per row, at the end of each parallel iteration: a fence per chunk
waits for each chunk's stores to reach memory (on a Zen 5, layernorm 4096 x 4096
took 1.5x as long with it).
"""

from __future__ import annotations

import pypto as pt

from . import f16c, precision

F32 = "float32"

# target feature -> (vector bytes, C vector type, unaligned load, streaming store);
# the first feature the target has wins. NEON's stnp stores pairs of registers with
# a hint only, and generic C has none: those targets keep plain stores.
STREAM_STORES = (
    ("avx512f", 64, "__m512", "_mm512_loadu_ps", "_mm512_stream_ps"),
    ("avx2", 32, "__m256", "_mm256_loadu_ps", "_mm256_stream_ps"),
)

_SOURCE = """\
#include <immintrin.h>
static inline void {name}(const float* restrict a, int64_t a_s0, float* restrict y,
                          int64_t y_s0) {{
  int64_t j = 0;
  if (a_s0 != 1 || y_s0 != 1) {{
    for (; j < {n}; ++j) y[j * y_s0] = a[j * a_s0];
    return;
  }}
  for (; j < {n} && ((uintptr_t)(y + j) & {mask}); ++j) y[j] = a[j];
  for (; j + {lanes} <= {n}; j += {lanes}) {store}(y + j, {load}(a + j));
  for (; j < {n}; ++j) y[j] = a[j];
}}
"""


def stream_store(target: pt.Target):
    """The target's streaming-store rule (a row of ``STREAM_STORES``), or None."""
    return next((r for r in STREAM_STORES if target.has(r[0])), None)


def outgrows_cache(rows, cols: int, target: pt.Target) -> bool:
    """Whether a float32 output of ``rows x cols`` outgrows the target's last-level
    cache (where streaming its rows pays; ``rows`` a ``pt.var``: no)."""
    return isinstance(rows, int) and rows * cols * 4 > target.l3_bytes


def define_stream_knob(cfg, default: int) -> bool:
    """``stream``: the output written with non-temporal stores (a knob only on targets
    that have them); whether it is on, by default ``default``. Where the output fits
    in the last-level cache, streaming loses (8 MiB of rows of 64 against a 32 MiB L3:
    rmsnorm 3.9 ms streamed, 0.56 ms not; each parallel iteration ends in a fence). On a
    2-core Zen 5
    (x86-avx512, 4096 x 4096 float32, outputs 64 MiB against a 32 MiB L3; paired runs,
    medians) streamed rows made layernorm 1.26x and rmsnorm 1.13x faster at 1 thread
    (1.16x and 1.08x at 2), and softmax's best tuned configs streamed; on a Zen 4 with
    the next row prefetched into L2, streaming made layernorm 1.2-1.35x, rmsnorm
    1.45x and softmax 1.03-1.18x faster."""
    if stream_store(cfg.target) is None:
        return False
    cfg.define_knob("stream", [0, 1], default=default)
    return bool(cfg["stream"].val)


def stream_intrin(target: pt.Target, n: int):
    """A tensor intrinsic copying ``n`` float32 with streaming stores on ``target``,
    registered by a name that tells its ISA (so a schedule using it replays from JSON)."""
    feature, nbytes, _, load, store = stream_store(target)
    a = pt.placeholder((n,), F32, name="a")
    y = pt.compute((n,), lambda j: a[j], name="y")
    name = f"stream_{feature}_f32_{n}"
    src = _SOURCE.format(name=name, n=n, lanes=nbytes // 4, mask=nbytes - 1, load=load, store=store)
    return pt.TensorIntrin.register(name, y.op, src, fence="_mm_sfence();")


def stream_rows(Yr: pt.Tensor, name: str = "Y", dtype: str | None = None) -> pt.Tensor:
    """The output ``name`` as a copy of ``Yr`` (rows x cols), in ``dtype`` (float16: a
    float32 ``Yr`` narrowed, ``narrowed_rows``): the stage that ``schedule_stream``
    tensorizes."""
    if dtype is None or dtype == str(Yr.dtype):
        return pt.compute(Yr.shape, lambda i, j: Yr[i, j], name=name)
    return pt.compute(Yr.shape, lambda i, j: pt.cast(dtype, Yr[i, j]), name=name)


def narrowed_rows(f, rows: int, cols: int, dtype: str, target: pt.Target, name: str = "Y"):
    """The output ``name`` ``[i, j] = f(i, j)`` (a float32 value) stored in ``dtype``:
    ``(Yr, Y)``. Where ``dtype`` is float16 and the target converts it (``f16c``),
    ``Yr`` is the row in float32 and ``Y`` its narrowed copy (``schedule_stream``), at
    0.07 ns an element against 0.21 for the integer rounding (one Zen 4 core); else
    both are ``Y``."""
    if dtype != f16c.F16 or f16c.conversion(target) is None:
        Y = pt.compute((rows, cols), lambda i, j: precision.rounded(f(i, j), dtype), name=name)
        return Y, Y
    Yr = pt.compute((rows, cols), f, name=name + "r")
    return Yr, stream_rows(Yr, name, dtype)


def schedule_stream(s, Y, target: pt.Target):
    """Split the rows of ``Y`` (a ``stream_rows`` stage, its row loop already placed)
    into chunks of 16 vectors (a stack buffer that stays in L1; on a Zen 5, chunks of
    1 KiB beat 512 B and 2-4 KiB by 5-25%) and copy each out with the streaming
    intrinsic, or the narrowing one for a float16 ``Y``; the chunk loop, where the
    producer's chunk is computed."""
    cols = int(Y.shape[1].value)
    if str(Y.dtype) == f16c.F16:
        chunk = min(cols, f16c.chunk(target))
        intrin = f16c.intrin(target, chunk, widen=False)
    else:
        chunk = min(cols, 16 * stream_store(target)[1] // 4)
        intrin = stream_intrin(target, chunk)
    jo, ji = s[Y].split(Y.op.axis[1], factor=chunk)
    s[Y].tensorize(ji, intrin)
    return jo
