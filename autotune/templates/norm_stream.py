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
      vectorized for j:             ->       for jo:   (chunks of C = 2^k <= L1 / 8 bytes)
        Y[i, j] = f(X[i, j])                   vectorized for j: Yr[j] = f(X[i, jo * C + j])
                                               stream_<isa>_f32_<C>(Yr, 1, Y + i * cols + jo * C, 1)

The copy peels scalar stores until ``Y + i * cols + j`` is aligned to the
vector width, streams whole vectors, stores the tail scalar, and fences
(``sfence``) so the rows are visible to other threads when the call returns.
"""

from __future__ import annotations

import pypto as pt

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
  _mm_sfence();
}}
"""


def stream_store(target: pt.Target):
    """The target's streaming-store rule (a row of ``STREAM_STORES``), or None."""
    return next((r for r in STREAM_STORES if target.has(r[0])), None)


def define_stream_knob(cfg) -> bool:
    """``stream``: the output written with non-temporal stores (a knob only on targets
    that have them); whether it is on. Off by default: on a 2-core Zen 5 (x86-avx512,
    4096 x 4096 float32, outputs 64 MiB against a 32 MiB L3) streamed rows were 13%
    slower at 1 thread and 2-4% at 2 (paired runs, medians; min times alike): there
    the core's outstanding misses, not the write-allocate traffic, bound a row-wise
    kernel. A tuner keeps it where a machine's memory rewards it."""
    if stream_store(cfg.target) is None:
        return False
    cfg.define_knob("stream", [0, 1], default=0)
    return bool(cfg["stream"].val)


def stream_intrin(target: pt.Target, n: int):
    """A tensor intrinsic copying ``n`` float32 with streaming stores on ``target``,
    registered by a name that tells its ISA (so a schedule using it replays from JSON)."""
    feature, nbytes, _, load, store = stream_store(target)
    a = pt.placeholder((n,), F32, name="a")
    y = pt.compute((n,), lambda j: a[j], name="y")
    name = f"stream_{feature}_f32_{n}"
    src = _SOURCE.format(name=name, n=n, lanes=nbytes // 4, mask=nbytes - 1, load=load, store=store)
    return pt.TensorIntrin.register(name, y.op, src)


def stream_rows(Yr: pt.Tensor, name: str = "Y") -> pt.Tensor:
    """The output ``name`` as a copy of ``Yr`` (rows x cols): the stage that
    ``schedule_stream`` tensorizes."""
    return pt.compute(Yr.shape, lambda i, j: Yr[i, j], name=name)


def schedule_stream(s, Y, target: pt.Target):
    """Split the rows of ``Y`` (a ``stream_rows`` stage, its row loop already placed)
    into chunks (a power of two of at most an eighth of the target's L1 data cache: a
    stack buffer that stays in L1) and copy each out with the streaming intrinsic;
    the chunk loop, where the producer's chunk is computed."""
    cols = int(Y.shape[1].value)
    chunk = 1 << (max(64, target.cache_sizes["L1"] // 8 // 4).bit_length() - 1)
    chunk = min(cols, chunk)
    jo, ji = s[Y].split(Y.op.axis[1], factor=chunk)
    s[Y].tensorize(ji, stream_intrin(target, chunk))
    return jo
