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

The knobs exist for ``M`` up to ``MAX_ROWS``; ``skinny`` is on by default up to
``DEFAULT_ROWS`` (fewer where the GEMM has a dot-product kernel). Products and sums
are the GEMM's (``precision``): 16-bit floats widened (A and X once, B and W where
they are read) and summed in float32, integers in int32.
"""

from __future__ import annotations

import pypto as pt
from pypto.dtypes import accumulator_dtype
from pypto.tensor import PlaceholderOp

from . import precision

MAX_ROWS = 16
STREAM_COLS = (256, 512, 1024, 2048, 4096)

# The most rows the skinny form is on for by default, per form and per the GEMM's dot
# kernel (None, or the kind of its inputs: the skinny form's int8 products are
# vpmulld, 16 a vector where a dot kernel does 32 or 64). One thread of a Zen 4, N = K = 4096:
# without a dot kernel it beat the GEMM's tile at every M up to 16 (float32 matmul
# 2.7x at M = 1, 1.5x at 16; dense 11x and 4.9x). Against the VNNI/BF16 kernels:
# bfloat16 matmul 7.2x at M = 1, 1.2x at 16; bfloat16 dense 21x at M = 1, 1.2x at 8,
# 0.75x at 16; int8 matmul 5.9x at 1, 1.8x at 4, 0.5x at 16; int8 dense 20x at 1, 1.1x
# at 2, 0.6x at 4 (its int32 products are vpmulld).
DEFAULT_ROWS = {
    ("stream", None): 16, ("stream", "float"): 16, ("stream", "int"): 4,
    ("dot", None): 16, ("dot", "float"): 8, ("dot", "int"): 2,
}  # fmt: skip


def has_knobs(cfg) -> bool:
    """Whether the template defined the skinny knobs (``M <= MAX_ROWS``)."""
    knobs = cfg.knobs if hasattr(cfg, "knobs") else cfg.space.knobs
    return "skinny" in knobs


def on(cfg) -> bool:
    """Whether a config takes the skinny schedule."""
    return has_knobs(cfg) and bool(cfg["skinny"].val)


def _default_on(form: str, M: int, isa) -> int:
    """``skinny``'s default: 1 up to ``DEFAULT_ROWS`` rows for the GEMM's dot kernel
    ``isa`` (None: no kernel)."""
    kind = None if isa is None else "int" if isa.dtype in ("int8", "uint8") else "float"
    return int(M <= DEFAULT_ROWS[form, kind])


def define_stream_knobs(cfg, M: int, N: int, acc_bytes: int, isa=None) -> None:
    """``skinny``, ``skinny_cols`` (the column block of the streamed form) and
    ``skinny_unroll`` for an ``M``-row matmul (``isa``: the GEMM's dot kernel, or None);
    none past ``MAX_ROWS`` rows.

    The default block is the widest whose accumulator (``M`` rows of ``acc_bytes``
    elements) fills at most half of the target's L1 and that still gives each core a
    block; the default unroll 4 rows of B per pass, 8 from 8 rows on. One thread of a
    Zen 4 (32 KiB L1), 4096^2 float32: M = 1 3.2 ms at 4096 columns by 4 (numpy 3.0),
    M = 16 12.6 at 256 by 8 (18.6 at 4096 by 8; the GEMM's tile 16.7); at 1024^2 the
    best blocks of M = 8 and 16 were 512 and 256 columns (their accumulators 16 KiB)."""
    if M > MAX_ROWS:
        return
    cfg.define_knob("skinny", [0, 1], default=_default_on("stream", M, isa))
    cores = max(1, cfg.target.cores or 1)
    half_l1 = (cfg.target.l1d_bytes or 32 * 1024) // 2
    fit = [c for c in STREAM_COLS if c * cores <= N and M * c * acc_bytes <= half_l1]
    cfg.define_knob("skinny_cols", list(STREAM_COLS), default=(fit or STREAM_COLS[:1])[-1])
    cfg.define_knob("skinny_unroll", [1, 2, 4, 8], default=8 if M >= 8 else 4)


def define_dot_knobs(cfg, M: int, isa=None) -> None:
    """``skinny``, ``skinny_rows`` (rows of X per register tile), ``skinny_cols`` (rows
    of W per register tile) and ``skinny_unroll`` for an ``M``-row dense layer (``isa``:
    the GEMM's dot kernel, or None); none past ``MAX_ROWS`` rows. The tile's
    accumulators (rows x cols vectors) stay within half of the vector registers."""
    if M > MAX_ROWS:
        return
    cfg.define_knob("skinny", [0, 1], default=_default_on("dot", M, isa))
    regs = cfg.target.vector_registers
    rows = [r for r in (1, 2, 4) if r <= M] or [1]
    cfg.define_knob("skinny_rows", [1, 2, 4], default=rows[-1])
    cols = [c for c in (2, 4, 8) if rows[-1] * c <= regs // 2] or [2]
    cfg.define_knob("skinny_cols", [2, 4, 8], default=cols[-1])
    cfg.define_knob("skinny_unroll", [1, 2, 4, 8], default=1)


def _product(p, a, b):
    """``a * b`` in the accumulator's dtype: 16-bit floats widened, integers in int32."""
    if p.widen is not None:
        return precision.product(p, a, b)
    acc = accumulator_dtype(p.out)
    return precision.rounded(a, acc) * precision.rounded(b, acc)


def _widened_once(s, T) -> None:
    """A widened operand (``precision.widen``) computed once, vectorized: read where
    the product needs it, float16's conversion of a loop-invariant A kept gcc from
    vectorizing the column loop (1 x 4096 x 4096: 34 ms, against 1.8 for bfloat16)."""
    if not isinstance(T.op, PlaceholderOp):
        s[T].vectorize(s[T].op.axis[-1])


def stream_matmul(cfg, p, A, B, M: int, N: int, K: int):
    """``C = A @ B`` (A is M x K, B is K x N) in the streamed form; ``(schedule, C)``."""
    k = pt.reduce_axis((0, K), name="k")
    Aw = precision.widen(A)  # 16-bit floats: A in float32 once (its M x K is small)
    acc = pt.compute(
        (M, N), lambda i, j: pt.sum(_product(p, Aw[i, k], B[k, j]), axis=k), name="C_acc"
    )
    C = pt.compute((M, N), lambda i, j: precision.rounded(acc[i, j], p.out), name="C")
    s = pt.create_schedule(C.op)
    _widened_once(s, Aw)
    lanes = cfg.target.vector_lanes(accumulator_dtype(p.out))
    cols = min(cfg["skinny_cols"].val, -(-N // lanes) * lanes)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=cols)
    s[C].reorder(jo, i, ji)
    s[C].parallel(jo)
    s[C].vectorize(ji)
    s[acc].compute_at(s[C], jo)
    ic, jc = s[acc].op.axis
    (kk,) = s[acc].op.reduce_axis
    u = cfg["skinny_unroll"].val
    if u > 1:
        ko, ki = s[acc].split(kk, factor=u)
        s[acc].reorder(ko, jc, ic, ki)
        s[acc].unroll(ki)
    else:
        s[acc].reorder(kk, jc, ic)
    s[acc].unroll(ic)
    s[acc].vectorize(jc)
    return s, C


def dot_product(cfg, p, X, W, M: int, N: int, K: int):
    """``D[i, j] = sum_k X[i, k] * W[j, k]`` in the accumulator's dtype as partial sums
    over ``L`` lanes and their combine; returns ``(D, P, X)`` (P None when K is shorter
    than a vector: then D is one plain sum; X widened to float32 if 16-bit)."""
    acc = accumulator_dtype(p.out)
    L = cfg.target.vector_lanes(acc)
    k = pt.reduce_axis((0, K), name="k")
    X = precision.widen(X)  # 16-bit floats: X in float32 once (``schedule_dot``)
    if K < L:
        D = pt.compute((M, N), lambda i, j: pt.sum(_product(p, X[i, k], W[j, k]), axis=k), name="D")
        return D, None, X
    nfull, tail = K // L, K % L
    ko = pt.reduce_axis((0, nfull), name="ko")
    P = pt.compute(
        (M, N, L),
        lambda i, j, ln: pt.sum(_product(p, X[i, ko * L + ln], W[j, ko * L + ln]), axis=ko),
        name="D_p",
    )
    q = pt.reduce_axis((0, L + tail), name="q")
    if not tail:
        return pt.compute((M, N), lambda i, j: pt.sum(P[i, j, q], axis=q), name="D"), P, X

    def combine(i, j):
        # q >= L: the tail element nfull*L + (q - L); q < L reads in bounds, unused
        kt = nfull * L - L + q
        return pt.sum(pt.select(q < L, P[i, j, q], _product(p, X[i, kt], W[j, kt])), axis=q)

    return pt.compute((M, N), combine, name="D"), P, X


def schedule_dot(cfg, out, D, P, X):
    """The schedule of ``out`` (an element-wise epilogue of ``D``; ``D, P, X`` from
    ``dot_product``) in the register tiles of the skinny dense form."""
    s = pt.create_schedule(out.op)
    _widened_once(s, X)
    rows, cols = cfg["skinny_rows"].val, cfg["skinny_cols"].val
    i, j = out.op.axis
    io, ii = s[out].split(i, factor=rows)
    jo, ji = s[out].split(j, factor=cols)
    s[out].reorder(jo, io, ii, ji)
    s[out].parallel(jo)
    s[D].compute_at(s[out], io)
    if P is None:
        return s
    s[P].compute_at(s[out], io)
    pi, pj, pl = s[P].op.axis
    (pk,) = s[P].op.reduce_axis
    u = cfg["skinny_unroll"].val
    if u > 1:
        pk, pku = s[P].split(pk, factor=u)
        s[P].reorder(pk, pku, pi, pj, pl)
        s[P].unroll(pku)
    else:
        s[P].reorder(pk, pi, pj, pl)
    s[P].unroll(pi)
    s[P].unroll(pj)
    s[P].vectorize(pl)
    return s
