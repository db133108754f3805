"""Scaled dot-product attention: ``O = softmax(Q K^T * scale [+ causal mask]) V``.

Q, K, V and O are ``[B, H, S, D]`` (``F.scaled_dot_product_attention``'s layout).
The schedule works on one tile of ``tile_q`` queries of one head at a time,
heads x query tiles in one parallel loop; per tile every intermediate is
computed at that loop, so the only buffers are per tile:

- ``KT``: the keys transposed per head (``[B, H, D, S]``, one pass), so the
  score GEMM reads contiguous key rows under its vectorized loop;
- ``Sc`` (``tile_q x S``): the tile's scores, computed as register tiles of
  ``mr_s`` queries x ``key_tile`` keys (``cache_write``, reduction over D
  outermost inside the tile) with the scale and the causal mask applied as the
  tile is stored; the keys are streamed tile by tile;
- the row max and the row sum as ``red_lanes`` vector partials per row, then
  ``P = exp(Sc - max)`` (``pt.fast_exp`` in float32), in place of the scores;
- ``O`` in register tiles of ``mr_o`` queries x ``o_cols`` of D (the P V GEMM, the reduction
  over keys outermost), scaled by 1 / sum as it is stored.

No S x S buffer exists: a thread holds ``tile_q x S`` scores (64 KiB for
``tile_q = 16``, S = 1024), which stay in its L2. This is the two-pass
(exact max first) form of the flash schedule, not the online-softmax one:
the DSL has no loop-carried rescaling of an accumulator across key tiles
short of update definitions, and with the score row of a tile in L2 the
second pass costs no memory traffic.

``kv_len`` keys (default S) serve S queries; ``causal`` masks keys past
``i + kv_len - S`` (the mask aligned to the last key, as for the last S
queries of a longer sequence). Key tiles entirely above the diagonal are still
computed and masked (``-inf``): the PyTorch operator therefore splits a causal
call into chunks of queries, each against the keys up to its end
(``kv_len``), which skips most of the masked work.
"""

from __future__ import annotations

import math

import numpy as np

import pypto as pt

from ..task import template
from .knobs import inner_tile


def _attention_ref(q, k, v, *, causal, scale):
    causal = bool(causal)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    sq, sk = q.shape[2], k.shape[2]
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        s = np.where(np.tril(np.ones((sq, sk), bool), k=sk - sq), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", p, v.astype(np.float64)).astype(q.dtype)


def _row_reduce4(kind, elem, lead, cols: int, lanes: int, name: str):
    """``R[b, h, i] = kind_j elem(b, h, i, j)`` with ``lanes`` vector partials per row
    (see ``norm.row_reduce``); returns ``(R, partial stage or None)``."""
    red = {"sum": pt.sum, "max": pt.max}[kind]
    if lanes <= 1 or cols < lanes:
        k = pt.reduce_axis((0, cols), name=f"{name}_k")
        R = pt.compute(lead, lambda b, h, i: red(elem(b, h, i, k), axis=k), name=name)
        return R, None
    nfull, tail = cols // lanes, cols % lanes
    ko = pt.reduce_axis((0, nfull), name=f"{name}_ko")
    P = pt.compute(
        (*lead, lanes),
        lambda b, h, i, ln: red(elem(b, h, i, ko * lanes + ln), axis=ko),
        name=f"{name}_p",
    )
    q = pt.reduce_axis((0, lanes + tail), name=f"{name}_q")
    base = nfull * lanes - lanes
    R = pt.compute(
        lead,
        lambda b, h, i: red(
            pt.select(q < lanes, P[b, h, i, q], elem(b, h, i, base + q)) if tail else P[b, h, i, q],
            axis=q,
        ),
        name=name,
    )
    return R, P


def define_attention_knobs(cfg, S: int, Sk: int, D: int, lanes: int):
    """``tile_q`` queries per parallel task; ``mr_s`` x ``key_tile``: the score register
    tile; ``mr_o`` x ``o_cols``: the P V register tile (queries x columns of D); ``red_lanes``:
    vector partials of the row max and sum. Defaults from the target's vector width
    and registers."""
    regs = cfg.target.vector_registers
    inner_tile(cfg, "tile_q", S, [8, 16, 32, 64], 16 if S >= 16 else 8)
    nr = 2 * lanes if Sk >= 2 * lanes else lanes
    mr_s = max(m for m in (2, 4, 8) if m * (nr // lanes) + nr // lanes + 1 <= regs)
    cfg.define_knob("mr_s", [2, 4, 8], default=mr_s)  # divisors of tile_q
    inner_tile(cfg, "key_tile", Sk, [lanes, 2 * lanes, 3 * lanes, 4 * lanes], nr)
    # P V tile: as many vectors of D as leave room for 4 rows (AVX-512, D = 64: 4 x 4)
    dv = max(1, -(-D // lanes))
    vecs = [v for v in (1, 2, 4, 8) if v <= dv] or [1]
    v_d = max([v for v in vecs if 4 * v + v + 1 <= regs] or [1])
    inner_tile(cfg, "o_cols", D, [lanes * v for v in vecs], lanes * v_d)
    fit = [m for m in (1, 2, 4, 8) if m * v_d + v_d + 1 <= regs]  # divisors of tile_q
    cfg.define_knob("mr_o", [1, 2, 4, 8], default=max(fit or [1]))
    cfg.define_knob("red_lanes", [1, lanes, 2 * lanes], default=2 * lanes)


def _schedule_tile_gemm(s, CL, mr: int):
    """A register tile inside the local accumulator ``CL`` (rows x cols, reduction k):
    rows split by ``mr``, the reduction outermost inside a row group, rows unrolled,
    columns vectorized::

        for i, j: CL[i, j] = 0; for k: CL[i, j] += A[i, k] * B[k, j]
        ->
        for io: for k: unrolled for ii < mr: vectorized for j: CL[io * mr + ii, j] += ...
    """
    ic, jc = s[CL].op.axis[-2], s[CL].op.axis[-1]
    (kk,) = s[CL].op.reduce_axis
    ico, ici = s[CL].split(ic, factor=mr)
    s[CL].reorder(ico, kk, ici, jc)
    s[CL].unroll(ici)
    s[CL].vectorize(jc)


def _schedule_partial(s, P):
    if P is not None:
        (ko,) = s[P].op.reduce_axis
        s[P].reorder(ko, s[P].op.axis[-1])
        s[P].vectorize(s[P].op.axis[-1])


@template("attention", reference=_attention_ref)
def attention(cfg, B, H, S, D, causal=False, scale=None, dtype="float32", kv_len=None):
    """O[b, h, i, :] = sum_j softmax_j(scale * Q[b, h, i, :] . K[b, h, j, :]) V[b, h, j, :]
    over ``kv_len`` keys (default S); ``causal``: only keys j <= i + kv_len - S."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"attention: dtype must be float32 or float64, got {dtype!r}")
    Sk = S if kv_len is None else int(kv_len)
    if causal and Sk < S:
        raise ValueError(
            f"attention: causal needs kv_len >= S (the mask is aligned to the last key), "
            f"got kv_len {Sk} < S {S}"
        )
    lanes = cfg.target.vector_lanes(dtype)
    define_attention_knobs(cfg, S, Sk, D, lanes)
    pairs = S * (Sk - S) + S * (S + 1) / 2 if causal else S * Sk  # (query, key) pairs
    cfg.add_flop(4.0 * B * H * D * pairs)
    sc = 1.0 / math.sqrt(D) if scale is None else float(scale)
    c = lambda v: pt.const(v, dtype)  # noqa: E731
    Q = pt.placeholder((B, H, S, D), dtype, name="Q")
    K = pt.placeholder((B, H, Sk, D), dtype, name="K")
    V = pt.placeholder((B, H, Sk, D), dtype, name="V")
    KT = pt.compute((B, H, D, Sk), lambda b, h, d, j: K[b, h, j, d], name="KT")
    d = pt.reduce_axis((0, D), name="d")
    Dot = pt.compute(
        (B, H, S, Sk), lambda b, h, i, j: pt.sum(Q[b, h, i, d] * KT[b, h, d, j], axis=d), name="Dot"
    )
    if causal:
        Sc = pt.compute(
            (B, H, S, Sk),
            lambda b, h, i, j: pt.select(j <= i + (Sk - S), Dot[b, h, i, j] * c(sc), c(-math.inf)),
            name="Sc",
        )
    else:
        Sc = pt.compute((B, H, S, Sk), lambda b, h, i, j: Dot[b, h, i, j] * c(sc), name="Sc")
    L = cfg["red_lanes"].val
    lead = (B, H, S)
    mx, mx_p = _row_reduce4("max", lambda b, h, i, j: Sc[b, h, i, j], lead, Sk, L, "mx")
    exp = pt.fast_exp if dtype == "float32" else pt.exp
    P = pt.compute((B, H, S, Sk), lambda b, h, i, j: exp(Sc[b, h, i, j] - mx[b, h, i]), name="P")
    sm, sm_p = _row_reduce4("sum", lambda b, h, i, j: P[b, h, i, j], lead, Sk, L, "sm")
    rs = pt.compute(lead, lambda b, h, i: c(1.0) / sm[b, h, i], name="rs")
    j = pt.reduce_axis((0, Sk), name="j")
    Acc = pt.compute(
        (B, H, S, D), lambda b, h, i, e: pt.sum(P[b, h, i, j] * V[b, h, j, e], axis=j), name="Acc"
    )
    Out = pt.compute((B, H, S, D), lambda b, h, i, e: Acc[b, h, i, e] * rs[b, h, i], name="O")

    s = pt.create_schedule(Out.op)
    kb, kh = KT.op.axis[0], KT.op.axis[1]
    s[KT].parallel(s[KT].fuse(kb, kh))
    DL = s.cache_write(Dot, "local")
    s[Dot].compute_inline()
    AL = s.cache_write(Acc, "local")
    s[Acc].compute_inline()
    b, h, i, e = Out.op.axis
    # one split of the query rows: a ragged last tile shortens only loops inside the
    # parallel task (the register tiles live inside the accumulators' own loops)
    qo, qi = cfg["tile_q"].apply(s, Out, i)
    task = s[Out].fuse(s[Out].fuse(b, h), qo)
    s[Out].parallel(task)
    s[Out].vectorize(e)
    for T in [Sc, mx_p, mx, P, sm_p, sm, rs, AL]:
        if T is not None:
            s[T].compute_at(s[Out], task)
    # scores: key tiles streamed; per key tile mr_s queries x key_tile keys in registers
    jo, ji = cfg["key_tile"].apply(s, Sc, Sc.op.axis[3])
    s[Sc].reorder(jo, Sc.op.axis[2], ji)
    s[Sc].vectorize(ji)
    s[DL].compute_at(s[Sc], jo)
    _schedule_tile_gemm(s, DL, cfg["mr_s"].val)
    _schedule_partial(s, mx_p)
    _schedule_partial(s, sm_p)
    po, pi = s[P].split(P.op.axis[3], factor=lanes)
    s[P].vectorize(pi)
    # P V: mr_o queries x o_cols columns of D per register tile
    ic, dc = AL.op.axis[-2], AL.op.axis[-1]
    (jj,) = s[AL].op.reduce_axis
    ico, ici = s[AL].split(ic, factor=cfg["mr_o"].val)
    dco, dci = cfg["o_cols"].apply(s, AL, dc)
    s[AL].reorder(ico, dco, jj, ici, dci)
    s[AL].unroll(ici)
    s[AL].vectorize(dci)
    return s, [Q, K, V, Out]
