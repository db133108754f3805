"""Skinny GEMMs: a few rows of output (a decoder's step, a batch of one to a few
tokens), where the GEMM's register tile wastes most of its rows and packing the
weights costs more than the product itself.

With ``M`` rows the product is bound by reading B (or W) once from memory, so
neither schedule below copies it; each reads it in place, contiguously.

``matmul`` (B is K x N): the output's columns in blocks of ``skinny_cols``
(parallel), an accumulator row per output row streamed over the rows of B, the
reduction unrolled inside the vectorized column loop (``skinny_unroll`` rows of
B per pass over the accumulator)::

    for i, j: C[i, j] = sum_k A[i, k] * B[k, j]
 ->
    parallel for jo in N / cols:
      acc[M, cols] = 0
      for ko in K / u:
        for jc in cols (vectorized):
          for ic in M (unrolled):
            acc[ic, jc] += A[ic, ko*u] * B[ko*u, jo*cols + jc] + ... (u terms)
      C[:, jo*cols : +cols] = acc

(a block of ``M x cols`` within half of the vector registers: ``jc`` unrolled by whole
vectors, so the accumulator stays in registers).

``dense`` (W is N x K, each output a dot product of a row of X and a row of
W): the reduction split into ``lanes`` partial sums (a vector; a manual
rfactor), a register tile of ``skinny_rows`` rows of X by ``skinny_cols`` rows
of W (the reduction unrolled by ``skinny_unroll``), and one short combine of the
partials and the ragged tail of K::

    for i, j: D[i, j] = sum_k X[i, k] * W[j, k]
 ->
    parallel for jo in N / cols:
      for io in M / rows:
        P[rows, cols, L] = 0
        for ko in K / L:
          for ii, ji (unrolled): for l in L (vectorized):
            P[ii, ji, l] += X[io*rows+ii, ko*L+l] * W[jo*cols+ji, ko*L+l]
        D[., .] = sum_l P[., ., l] + the K % L tail
        out[., .] = epilogue(D[., .])

The other way round, a few output columns (``N`` up to ``NARROW_COLS``: a
matrix-vector product, a classifier's head) and many rows, the ``narrow`` form is
the same dot products with the rows in parallel: A (X) is the operand read once,
in place; B's columns are the few rows of W (transposed once, read in place for
one column)::

    parallel for io in M / rows:
      for jo in N / cols:
        P[rows, cols, L] = ...                   (as above)
        out[., .] = epilogue(sum_l P + tail)

``batch_matmul`` takes both forms for each of its products, the batch fused with
the parallel loop (``parallel for b, jo``; ``parallel for b, io``).

The knobs exist for ``M`` up to ``MAX_ROWS`` (``narrow_*``: ``N`` up to
``NARROW_COLS``, more than ``MAX_ROWS`` rows); ``skinny`` is on by default up to
``DEFAULT_ROWS`` (fewer where the GEMM has a dot-product kernel). Products and sums
are the GEMM's (``precision``): 16-bit floats widened (A and X once, B and W where
they are read; the narrow form the other way round) and summed in float32, integers
in int32.
"""

from __future__ import annotations

import pypto as pt
from pypto import dtypes
from pypto.dtypes import accumulator_dtype

from . import f16c, precision

MAX_ROWS = 16
NARROW_COLS = 4  # the most output columns of the narrow form
STREAM_COLS = (256, 512, 1024, 2048, 4096)
LONG_CHAIN = 256  # dependent steps of a row's lane partials (``_one_streamed_row``)
SHORT_ROW = 1024  # bytes: the streamed form reads rows of B this short one after another

# The most rows the skinny form is on for by default, per form and per the GEMM's dot
# kernel (None, or the kind of its inputs: the streamed form's int8 products are
# vpmulld, 16 a vector where a dot kernel does 32 or 64). One thread of a Zen 4, N = K = 4096:
# without a dot kernel it beat the GEMM's tile at every M up to 16 (float32 matmul
# 2.7x at M = 1, 1.5x at 16; dense 11x and 4.9x). Against the VNNI/BF16 kernels:
# bfloat16 matmul 7.2x at M = 1, 1.2x at 16; bfloat16 dense 21x at M = 1, 1.2x at 8,
# 0.75x at 16; int8 matmul 5.9x at 1, 1.8x at 4, 0.5x at 16; int8 dense (its sums the
# C compiler's, ``lane_partials``) 35x at 1, 1.9x at 2, 1.0x at 4, 0.6x at 8.
# A batch of products (``batch_matmul``; 16 x 2-8 x 1024^2, 8 x 8-16 x 512^2, one B
# in cache at a time), where the dot kernels' packing is cheaper: bfloat16 1.5x at
# M = 2, 1.0x at 8, 0.9x at 16; int8 3.3x at M = 1, 0.7x at 2.
DEFAULT_ROWS = {
    ("stream", None): 16, ("stream", "float"): 16, ("stream", "int"): 4,
    ("batch", None): 16, ("batch", "float"): 4, ("batch", "int"): 1,
    ("dot", None): 16, ("dot", "float"): 8, ("dot", "int"): 2,
}  # fmt: skip


def has_knobs(cfg, form: str = "skinny") -> bool:
    """Whether the template defined the skinny knobs (``M <= MAX_ROWS``), or
    ``form``'s (``narrow``)."""
    knobs = cfg.knobs if hasattr(cfg, "knobs") else cfg.space.knobs
    return form in knobs


def on(cfg) -> bool:
    """Whether a config takes the skinny schedule."""
    return has_knobs(cfg) and bool(cfg["skinny"].val)


def narrow_on(cfg) -> bool:
    """Whether a config takes the narrow schedule (few columns, rows in parallel)."""
    return has_knobs(cfg, "narrow") and bool(cfg["narrow"].val)


def _default_on(form: str, M: int, isa) -> int:
    """``skinny``'s default: 1 up to ``DEFAULT_ROWS`` rows for the GEMM's dot kernel
    ``isa`` (None: no kernel)."""
    kind = None if isa is None else "int" if isa.dtype in ("int8", "uint8") else "float"
    return int(M <= DEFAULT_ROWS[form, kind])


def define_stream_knobs(cfg, M: int, N: int, p, isa=None, batch: int = 1) -> None:
    """``skinny``, ``skinny_cols`` (the column block of the streamed form) and
    ``skinny_unroll`` for an ``M``-row matmul (``p``: the precision; ``isa``: the GEMM's
    dot kernel, or None; ``batch`` such products); none past ``MAX_ROWS`` rows.

    The default block is the widest whose accumulator (``M`` rows of it) fills at most
    half of the target's L1 and that still gives each core a block (of all ``batch``
    products' blocks); the default unroll 4 rows of B per pass, 8 from 8 rows on (or
    float16 converted by rows), 2 where the block is in registers and spans B's rows.
    One thread of a Zen 4 (32 KiB L1), 4096^2 float32: M = 1 3.2 ms at 4096 columns by
    4 (numpy 3.0), M = 16 12.6 at 256 by 8 (18.6 at 4096 by 8; the GEMM's tile 16.7); at
    1024^2 the best blocks of M = 8 and 16 were 512 and 256 columns (their accumulators
    16 KiB)."""
    if M > MAX_ROWS:
        return
    form = "stream" if batch == 1 else "batch"
    cfg.define_knob("skinny", [0, 1], default=_default_on(form, M, isa))
    cores = max(1, cfg.target.cores or 1)
    half_l1, acc_bytes = _half_l1(cfg.target), _acc_bytes(p)
    fit = [c for c in STREAM_COLS if c * cores <= N * batch and M * c * acc_bytes <= half_l1]
    cols = (fit or STREAM_COLS[:1])[-1]
    cfg.define_knob("skinny_cols", list(STREAM_COLS), default=cols)
    block, in_registers = _stream_block(cfg.target, p, M, N, cols)
    # a block in registers that spans B's rows: 2 rows of B a pass (one thread of a Zen 4,
    # 32 x 1 x 256 x 1024: 1.04 ms, against 3.7 at 4); else 4, 8 from 8 rows on, and
    # where float16 B is converted a vector of each row at a time (one thread, 1 x 11008
    # x 4096: 4.7-5.3 ms, against 6.2-7.9 by 4; two threads 4.7-5.1 against 5.6-5.9)
    converted = p.name == f16c.F16 and f16c.conversion(cfg.target) is not None
    unroll = 2 if in_registers and block >= N else 8 if M >= 8 or converted else 4
    cfg.define_knob("skinny_unroll", [1, 2, 4, 8], default=unroll)


def _stream_block(target, p, M: int, N: int, cols: int) -> tuple[int, bool]:
    """The streamed form's column block for a ``skinny_cols`` of ``cols`` (whole vectors,
    no wider than N's), and whether its accumulators (``M`` rows of it) stay in
    registers: at most half of the target's vector registers, the block's vectors
    unrolled (one thread of a Zen 4, 32 x 1 x 256 x 1024: 3.4 ms with the block in
    memory, 1.1 in registers). Not where B is narrower than the accumulator (int8,
    16-bit floats): a loop of one accumulator vector holds too few of B's narrow
    elements for the C compiler to vectorize it (int8 1 x 128 x 65536: 0.4 -> 0.8 ms)."""
    acc = accumulator_dtype(p.out)
    lanes = target.vector_lanes(acc)
    block = min(cols, -(-N // lanes) * lanes)
    return block, p.name == acc and M * (block // lanes) <= target.vector_registers // 2


def _acc_bytes(p) -> int:
    """The bytes of an element of the accumulator of precision ``p``."""
    return dtypes.dtype(accumulator_dtype(p.out)).bits // 8


def _half_l1(target) -> int:
    return (target.l1d_bytes or 32 * 1024) // 2


def _one_streamed_row(cfg, small_bytes: int, K: int, p) -> bool:
    """Whether a dot-product form's register tile takes one row of the streamed operand
    (W, or A) by default: while the other operand (X, or B's few columns:
    ``small_bytes``) fits in half of the target's L1, reading it again for each
    streamed row is an L1 hit, and one row at a time reads the streamed operand as one
    sequential stream. A tile of several rows interleaves as many streams, one a row
    apart, which the hardware prefetcher follows worse, the more so the shorter the rows.
    One thread of a Zen 4, 32 MB of float32 read: matrix-vector products 65536 x 1 x
    128 1.4 ms one row at a time, 6.1 eight (numpy 3.0); at 2048 x 1 x 4096 (16 KiB of
    B) 1.5 and 1.0. dense 1 x 4096 x 2048: 0.96 ms one row of W, 1.17 eight; at
    4 x 8192 x 1024 (16 KiB of X) 3.1 and 2.0.

    Not where a row's lane partials are a chain of ``LONG_CHAIN`` or more dependent
    multiply-adds (K / lanes): one row then waits on their latency, and a tile's rows
    are independent chains. float16, 32 MB of A, one / two threads: 4096 x 1 x 4096
    2.0 / 1.9 ms one row, 1.7 / 1.1 eight (bfloat16 4.4 / 2.4 and 2.8 / 1.5); dense
    1 x 4096 x 4096 2.1 / 1.9 and 1.8 / 1.4; at K = 2048 one row is still ahead (float16
    8192 x 1 x 2048 2.4 / 1.4 ms, 2.6 / 1.5 eight)."""
    lanes = cfg.target.vector_lanes(accumulator_dtype(p.out))
    chain = lane_partials(p) and K // lanes >= LONG_CHAIN
    return small_bytes < _half_l1(cfg.target) and not chain


def define_dot_knobs(cfg, M: int, K: int, p, isa=None) -> None:
    """``skinny``, ``skinny_rows`` (rows of X per register tile), ``skinny_cols`` (rows
    of W per register tile) and ``skinny_unroll`` for an ``M x K`` X of a dense layer
    (``p``: the precision; ``isa``: the GEMM's dot kernel, or None); none past
    ``MAX_ROWS`` rows. The tile's accumulators (rows x cols vectors) stay within half of
    the vector registers; one row of W at a time where X is small
    (``_one_streamed_row``)."""
    if M > MAX_ROWS:
        return
    cfg.define_knob("skinny", [0, 1], default=_default_on("dot", M, isa))
    regs = cfg.target.vector_registers
    rows = [r for r in (1, 2, 4) if r <= M] or [1]
    cfg.define_knob("skinny_rows", [1, 2, 4], default=rows[-1])
    cols = [c for c in (2, 4, 8) if rows[-1] * c <= regs // 2] or [2]
    if _one_streamed_row(cfg, M * K * precision.elem_bytes(p), K, p):
        cols = [1]
    cfg.define_knob("skinny_cols", [1, 2, 4, 8], default=cols[-1])
    cfg.define_knob("skinny_unroll", [1, 2, 4, 8] if lane_partials(p) else [1], default=1)


def lane_partials(p) -> bool:
    """Whether the dot-product forms (dense's skinny form, the narrow form) sum in
    explicit partial sums per lane: floats only. An integer sum is associative, so the
    C compiler vectorizes it as it stands, with its own dot-product instructions (one
    thread of a Zen 4, int8: 4096 x 1 x 4096 1.0 ms, against 1.8 with partials
    multiplied by ``vpmulld``; dense 2 x 4096 x 4096 1.9 ms, against 3.4)."""
    return p.widen is None


def define_narrow_knobs(cfg, M: int, N: int, K: int, p) -> None:
    """``narrow``, ``narrow_rows`` (rows of A per register tile), ``narrow_cols``
    (columns per tile) and ``narrow_unroll`` for an ``M x N`` output of at most
    ``NARROW_COLS`` columns and more than ``MAX_ROWS`` rows (``p``: the precision).
    The tile's accumulators (rows x cols vectors) fill at most the vector registers
    (the other operand is read from memory: float32 4096 x 4 x 4096, one thread of a
    Zen 4: 3.4 ms at 8 x 4, 4.4 at 4 x 4); one row of A at a time where B is small
    (``_one_streamed_row``).

    On by default: on one thread of a Zen 4, M = K = 1024 to 4096, N = 1, 2, 4, the
    GEMM's default (its dot kernels included) took 1.1-10x as long, but for int8 at
    N = 1 and float64 at N = 4 (0.9-1.2x); float32 matrix-vector products 1.7-5x
    (numpy's GEMV 0.9-1.2x)."""
    if N > NARROW_COLS or M <= MAX_ROWS:
        return
    cfg.define_knob("narrow", [0, 1], default=1)
    regs = cfg.target.vector_registers
    cols = [c for c in (1, 2, 4) if c <= N]
    cfg.define_knob("narrow_cols", cols, default=cols[-1])
    rows = [r for r in (1, 2, 4, 8) if r * cols[-1] <= regs]
    if _one_streamed_row(cfg, N * K * precision.elem_bytes(p), K, p):
        rows = [1]
    cfg.define_knob("narrow_rows", [1, 2, 4, 8], default=rows[-1])
    cfg.define_knob("narrow_unroll", [1, 2, 4] if lane_partials(p) else [1], default=1)


def _product(p, a, b):
    """``a * b`` in the accumulator's dtype: 16-bit floats widened, integers in int32."""
    if p.widen is not None:
        return precision.product(p, a, b)
    acc = accumulator_dtype(p.out)
    return precision.rounded(a, acc) * precision.rounded(b, acc)


def _batched(body, batch: tuple):
    """A compute body over ``(*batch, M, N)`` (at most one batch axis) from
    ``body(b, i, j)``, ``b`` the tuple of batch indices (the loops take these names)."""
    if batch:
        return lambda b, i, j: body((b,), i, j)
    return lambda i, j: body((), i, j)


def _round(p, T, b, i, j):
    """``T[*b, i, j]`` rounded to the output's dtype (``precision.rounded``)."""
    return precision.rounded(T[(*b, i, j)], p.out)


def _outer(s, stage, batch_axes: tuple, axis):
    """``axis`` of ``stage``, fused after its batch axes (the parallel loop)."""
    return s[stage].fuse(*batch_axes, axis) if batch_axes else axis


def stream_matmul(cfg, p, A, B, M: int, N: int, K: int):
    """``C = A @ B`` (A is ``[*b,] M x K``, B ``[*b,] K x N``, at most one batch axis)
    in the streamed form, the batches' column blocks in parallel; ``(schedule, C)``."""
    batch = tuple(A.shape[:-2])
    k = pt.reduce_axis((0, K), name="k")
    Aw = precision.widen(A)  # 16-bit floats: A in float32 once (its M x K is small)
    Bw = f16c.widened(B, cfg.target)  # float16: each pass's rows of B converted in L1
    shape = (*batch, M, N)
    acc = pt.compute(
        shape,
        _batched(
            lambda b, i, j: pt.sum(_product(p, Aw[(*b, i, k)], Bw[(*b, k, j)]), axis=k), batch
        ),
        name="C_acc",
    )
    C = pt.compute(shape, _batched(lambda b, i, j: _round(p, acc, b, i, j), batch), name="C")
    s = pt.create_schedule(C.op)
    precision.widened_once(s, Aw)
    lanes = cfg.target.vector_lanes(accumulator_dtype(p.out))
    cols, in_registers = _stream_block(cfg.target, p, M, N, cfg["skinny_cols"].val)
    *bs, i, j = C.op.axis
    jo, ji = s[C].split(j, factor=cols)
    s[C].reorder(*bs, jo, i, ji)
    outer = _outer(s, C, tuple(bs), jo)
    s[C].parallel(outer)
    s[C].vectorize(ji)
    s[acc].compute_at(s[C], outer)
    *_, ic, jc = s[acc].op.axis
    (kk,) = s[acc].op.reduce_axis
    u = cfg["skinny_unroll"].val
    ko, ki = s[acc].split(kk, factor=u) if u > 1 else (kk, None)
    jv = None
    if in_registers:  # the block's vectors unrolled
        jv, jc = s[acc].split(jc, factor=lanes)
    # short whole rows of B: read row after row, one sequential stream (one thread of a
    # Zen 4, 4 x 128 x 65536: 1.3 ms, against 3.3 with the pass's rows interleaved);
    # else each vector's rows of the pass together, the accumulator read once a pass
    # (1 x 4096 x 4096: 3.5 ms, against 7.3; 8 x 1 x 4096 x 4096: 25 against 38)
    short = cols >= N and cols * _acc_bytes(p) <= SHORT_ROW
    # float16 B converted by the target's instructions: a pass's rows whole where short
    # or in registers, else a vector of each at a time, so the converted rows stay in
    # L1 (two threads of a Zen 4, 1 x 4096 x 4096: 1.2 ms against 1.7-2.1 with integer
    # conversions; 3.0 with the block's 4 x 2048 converted at once, in L2)
    jw = None
    if Bw is not B and not short and jv is None:
        jw, jc = s[acc].split(jc, factor=lanes)
    order = (ko, ic, ki, jv, jc) if short else (ko, jw, jv, jc, ic, ki)
    s[acc].reorder(*(x for x in order if x is not None))
    for x in (ki, ic, jv):
        if x is not None:
            s[acc].unroll(x)
    s[acc].vectorize(jc)
    if Bw is not B:
        at, n = (ko, min(cols, N)) if jw is None else (jw, lanes)
        f16c.convert_at(s, Bw, acc, at, n, cfg.target)
    return s, C


def dot_product(cfg, p, X, W, M: int, N: int, K: int, widen_x: bool = True, partials=True):
    """``D[*b, i, j] = sum_k X[*b, i, k] * W[*b, j, k]`` (at most one batch axis ``b``)
    in the accumulator's dtype as partial sums over ``L`` lanes and their combine;
    returns ``(D, P, X, converted)`` (P None when K is shorter than a vector or not
    ``partials``: then D is one plain sum; X widened to float32 if 16-bit and
    ``widen_x``, else where it is read; ``converted``: the stages through which P reads
    the float16 operands read in place, ``f16c.widened``, for ``schedule_dot``)."""
    acc = accumulator_dtype(p.out)
    L = cfg.target.vector_lanes(acc)
    batch = tuple(X.shape[:-2])
    k = pt.reduce_axis((0, K), name="k")
    if widen_x:  # 16-bit floats: X in float32 once (``schedule_dot``)
        X = precision.widen(X)

    def prod(b, i, j, kk, Xr=X, Wr=W):
        return _product(p, Xr[(*b, i, kk)], Wr[(*b, j, kk)])

    if K < L or not partials:
        D = pt.compute(
            (*batch, M, N), _batched(lambda b, i, j: pt.sum(prod(b, i, j, k), axis=k), batch),
            name="D",
        )  # fmt: skip
        return D, None, X, ()
    nfull, tail = K // L, K % L
    ko = pt.reduce_axis((0, nfull), name="ko")
    Xs, Ws = f16c.widened(X, cfg.target), f16c.widened(W, cfg.target)
    converted = tuple(T for T, src in ((Xs, X), (Ws, W)) if T is not src)

    def partial(b, i, j, ln):
        return pt.sum(prod(b, i, j, ko * L + ln, Xs, Ws), axis=ko)

    if batch:
        P = pt.compute((*batch, M, N, L), lambda b, i, j, ln: partial((b,), i, j, ln), name="D_p")
    else:
        P = pt.compute((M, N, L), lambda i, j, ln: partial((), i, j, ln), name="D_p")
    q = pt.reduce_axis((0, L + tail), name="q")
    if not tail:
        D = pt.compute(
            (*batch, M, N), _batched(lambda b, i, j: pt.sum(P[(*b, i, j, q)], axis=q), batch),
            name="D",
        )  # fmt: skip
        return D, P, X, converted

    def combine(b, i, j):
        # q >= L: the tail element nfull*L + (q - L); q < L reads in bounds, unused
        kt = nfull * L - L + q
        return pt.sum(pt.select(q < L, P[(*b, i, j, q)], prod(b, i, j, kt)), axis=q)

    return pt.compute((*batch, M, N), _batched(combine, batch), name="D"), P, X, converted


def schedule_dot(cfg, out, D, P, X, form: str = "skinny", converted=()):
    """The schedule of ``out`` (an element-wise epilogue of ``D``; ``D, P, X, converted``
    from ``dot_product``) in the register tiles of the skinny dense form (its columns in
    parallel), or of the ``narrow`` form (its rows in parallel, and its batches);
    ``form`` names the knobs. The ``converted`` operands' rows are converted where each
    step of the partials reads them, ``unroll`` vectors a row (one thread of a Zen 4,
    float16 4096 x 1 x 4096: 2.1 ms, against 5.5 with integer conversions)."""
    s = pt.create_schedule(out.op)
    precision.widened_once(s, X)
    rows, cols = cfg[form + "_rows"].val, cfg[form + "_cols"].val
    *bs, i, j = out.op.axis
    io, ii = s[out].split(i, factor=rows)
    jo, ji = s[out].split(j, factor=cols)
    outer, inner = (io, jo) if form == "narrow" else (jo, io)
    s[out].reorder(*bs, outer, inner, ii, ji)
    s[out].parallel(_outer(s, out, tuple(bs), outer))
    s[D].compute_at(s[out], inner)
    if P is None:
        return s
    s[P].compute_at(s[out], inner)
    *_, pi, pj, pl = s[P].op.axis
    (pk,) = s[P].op.reduce_axis
    u = cfg[form + "_unroll"].val
    if u > 1:
        pk, pku = s[P].split(pk, factor=u)
        s[P].reorder(pk, pku, pi, pj, pl)
        s[P].unroll(pku)
    else:
        s[P].reorder(pk, pi, pj, pl)
    s[P].unroll(pi)
    s[P].unroll(pj)
    s[P].vectorize(pl)
    for T in converted:
        f16c.convert_at(s, T, P, pk, u * int(P.shape[-1].value), cfg.target)
    return s


def narrow_matmul(cfg, p, A, B, M: int, N: int, K: int):
    """``C = A @ B`` (A is ``[*b,] M x K``, B ``[*b,] K x N``, at most one batch axis, N
    at most ``NARROW_COLS``) in the narrow form: B's columns as the rows of ``Bt`` (read
    in place for one column, else transposed once; 16-bit floats widened there, once:
    float16 4096 x 1 x 4096, one thread of a Zen 4, 11.1 -> 7.3 ms), A read in place;
    ``(schedule, C)``."""
    batch = tuple(A.shape[:-2])
    wide = p.widen is None and str(B.dtype) in precision.STORAGE_FLOATS

    def column(b, j, k):
        v = B[(*b, k, j)]
        return pt.cast("float32", v) if wide else v

    if batch:
        Bt = pt.compute((*batch, N, K), lambda b, j, k: column((b,), j, k), name="Bt")
    else:
        Bt = pt.compute((N, K), lambda j, k: column((), j, k), name="Bt")
    D, P, _, converted = dot_product(
        cfg, p, A, Bt, M, N, K, widen_x=False, partials=lane_partials(p)
    )
    C = pt.compute((*batch, M, N), _batched(lambda b, i, j: _round(p, D, b, i, j), batch), name="C")
    s = schedule_dot(cfg, C, D, P, A, form="narrow", converted=converted)
    if N == 1 and not wide:  # B's one column is contiguous already (16-bit: widened once)
        s[Bt].compute_inline()
    return s, C
