"""The flash form of attention: an online softmax over streamed blocks of keys.

Per parallel task (one head, ``tile_q`` queries) the keys are taken ``key_block``
at a time; a block's scores, their exponentials and its share of ``P V`` live
only while that block is processed (``tile_q x key_block`` floats), and a running
state per query carries the rest from block to block (no ``S x S`` buffer, no
``tile_q x S`` one either). The recurrence is an update definition (API.md §1)
whose sequential order over the blocks is the semantics; its loop over the
blocks hosts every per-block stage (``compute_at``)::

    for task in B * H * ceil(S / tile_q) (parallel):
      for t in key blocks (causal: up to the task's last query's):   (the update's block loop)
        d[i, j]  = Q[i] . K[t*kb + j]                   (register tiles, key_tile keys at a time)
        bm[i]    = max_j scale * d[i, j]                (lane partials, vectorized)
        p[i, j]  = exp(scale * d[i, j] - bm[i]);  lb[i] = sum_j p[i, j]
        pv[i, :] = sum_j p[i, j] V[t*kb + j, :]         (register tiles)
        for v, i:                                       (the update, one vector of a row's state)
          m' = max(m, bm);  a = exp(m - m');  b = exp(bm - m')
          l = l * a + b * lb;  acc[:] = acc[:] * a + b * pv[:];  m = m'
    O[i, :] = acc[:] / l

The scale and the mask are applied where the scores are read (the max and the
exponentials), so no pass stores them. The GEMMs are ``gemms``': vector register
tiles (``VectorGemms``) or AMX's tiles (``attention_amx``).

The state of a row is vectors of ``Ls`` lanes: ``[l, a, b, 0..]``, the
accumulator, then ``[m, 0..]``. The header vector (l, a, b) reads the previous
block's ``m`` from the last vector, which is written after it, so no vector reads
what another lane of itself writes and the update's lane loop is vectorizable
(the legality check proves it); the accumulator vectors read ``a`` and ``b``
from the header written just before. The loop over a row's vectors is unrolled:
each kind of vector gets a lane loop without conditions, which the compiler
vectorizes (the header's lanes are picked arithmetically for the same reason; a
lane loop with loads under conditions stays scalar: bfloat16 on AMX 9.0 -> 7.5 ms).

Causal: the block loop's extent depends on the query tile (an affine bound in
the update's domain), so the blocks above the diagonal are never visited; the
diagonal block is masked (``-inf`` scores). Keys past ``kv_len`` (a last,
partial block) are padded: K and V copies with zero rows (``gemms.operands``),
scores ``-inf``. A block whose scores are all masked has ``bm =
-inf``, clamped to a finite floor so that ``exp`` gives 0 instead of NaN.
"""

from __future__ import annotations

import math

import pypto as pt

from . import attention_mask

FLOOR = -3.0e38  # below every finite score; exp(FLOOR - x) is 0


def flash_knobs(cfg, Sk: int, Dv: int, lanes: int):
    """``key_block``: keys per step of the online softmax (multiples of the lanes); by
    default the largest whose scores, probabilities and block of V (``(2 x tile_q +
    Dv) x key_block`` floats: the P V tile's operands) fit in the target's L1: the
    per-block work (row max and sum, the state update) is paid once per block, but a
    block of V that spills to L2 is read from there by every row tile. Causal 1 x 8 x
    1024 x 64 on a Sapphire Rapids-class Xeon (48 KiB L1), one thread: 128 keys (80
    KiB with K's block) 1.4x 256, 1.05x 64."""
    top = -(-Sk // lanes) * lanes
    sizes = sorted({min(top, b) for b in (lanes, 2 * lanes, 64, 128, 256, 512) if b % lanes == 0})
    room = cfg.target.cache_sizes["L1"] // ((2 * cfg["tile_q"].size[-1] + Dv) * 4)
    cfg.define_knob("key_block", sizes, default=max([b for b in sizes if b <= room] or sizes[:1]))


def kv_head(H: int, Hk: int):
    """The key/value head a query head reads: ``h // (H / Hk)`` (grouped-query
    attention), ``h`` itself when there are as many."""
    g = H // Hk
    return (lambda h: h) if g == 1 else (lambda h: h // g)


class VectorGemms:
    """The flash form's GEMMs as register tiles of vectors in the compute dtype: the
    scores over K transposed (``KT [B, Hk, D, Sp]``, the keys padded to whole blocks
    with zero rows), ``P V`` over V padded likewise; ``tiles(s, DL, PV, key_block)``
    schedules the two tiles. (``attention_amx.TileGemms``: the same on AMX's tiles.)"""

    def __init__(self, cfg, tiles, lanes: int):
        self.tiles = tiles
        # the score tile's columns: the knob's, or the widest whole vectors below it that
        # divide the block (48 of a block of 128 left 32 keys a tile to the loops)
        kb, kt = cfg["key_block"].val, cfg["key_tile"].size[-1]
        fits = [t for t in range(lanes, kt + 1, lanes) if kb % t == 0]
        self.key_tile = max(fits) if fits else kt

    def operands(self, K, KT, V, dims, Sp: int, dtype: str):
        """``(keys, values, stages computed once per call)``."""
        B, H, S, D, Sk, Dv, Hk = dims
        last, zero = Sk - 1, pt.const(0.0, dtype)
        new = []
        padded = not isinstance(Sk, int) or Sp != Sk  # (Sk a size bound at call: padded)
        if padded or KT is None:
            src = (
                (lambda b, h, d, j: KT[b, h, d, j])
                if KT is not None
                else (lambda b, h, d, j: K[b, h, j, d])
            )
            KT = pt.compute(
                (B, Hk, D, Sp),
                lambda b, h, d, j: pt.select(j < Sk, src(b, h, d, pt.min(j, last)), zero),
                name="KT",
            )
            new.append(KT)
        if padded:
            V = pt.compute(
                (B, Hk, Sp, Dv),
                lambda b, h, j, e: pt.select(j < Sk, V[b, h, pt.min(j, last), e], zero),
                name="VP",
            )
            new.append(V)
        return KT, V, new

    def dot(self, Q, KT, kvh, shape):
        d = pt.reduce_axis((0, Q.shape[-1]), name="d")
        return pt.compute(
            shape,
            lambda b, h, i, j: pt.sum(Q[b, h, i, d] * KT[b, kvh(h), d, j], axis=d),
            name="Dot",
        )

    def pv(self, P, VP, kvh, kb: int, shape):
        jj = pt.reduce_axis((0, kb), name="jj")
        return pt.compute(
            shape,
            lambda b, h, t, i, e: pt.sum(
                P[b, h, i, t * kb + jj] * VP[b, kvh(h), t * kb + jj, e], axis=jj
            ),
            name="PV",
        )


def flash_attention(cfg, Q, K, V, KT, dims: tuple, causal: bool, sc: float, dtype: str, gemms,
                    mask=None, bound=None):  # fmt: skip
    """The output tensor and schedule of the flash form over placeholders ``Q``, ``K``,
    ``V`` (``KT``: K as ``[B, H, D, rows]``, K itself when given transposed, else None),
    computed in ``dtype`` (the output in Q's). ``gemms`` (``VectorGemms`` or
    ``attention_amx.TileGemms``) builds and schedules the two GEMMs. ``mask``: an
    ``attention_mask.Mask`` (a row masked out gives zeros). ``bound``: the keys
    computed where the key count ``Sk`` is a ``pt.var`` (at least as many; not causal)."""
    B, H, S, D, Sk, Dv, Hk = dims
    kvh = kv_head(H, Hk)
    L = cfg.target.vector_lanes(dtype)
    Ls = max(L, 4)  # the state's vectors hold at least the header l, a, b
    kb = cfg["key_block"].val
    nt = -(-(Sk if bound is None else bound) // kb)
    Sp = nt * kb
    c = lambda v: pt.const(v, dtype)  # noqa: E731
    exp = pt.fast_exp if dtype == "float32" else pt.exp
    last = Sk - 1
    keys, values, copies = gemms.operands(K, KT, V, dims, Sp, dtype)
    Dot = gemms.dot(Q, keys, kvh, (B, H, S, Sp))
    lim = (lambda i: pt.min(i + (Sk - S), last)) if causal else (lambda i: last)  # noqa: E731
    add = None  # the mask and the padding as one row added to the scores (-inf past the keys)
    if mask is not None:  # (not causal)
        add = mask.padded(Sp, Sk, dtype)
    elif not causal and (not isinstance(Sk, int) or Sp > Sk):
        add = attention_mask.past_keys(Sp, Sk, dtype)

    def score(b, h, i, j):
        s = Dot[b, h, i, j] * c(sc)
        if add is not None:
            return add.score(s, b, h, i, j)
        s = s if mask is None else mask.score(s, b, h, i, pt.min(j, last))
        return pt.select(j <= lim(i), s, c(-math.inf))

    Sc = pt.compute((B, H, S, Sp), score, name="Sc")
    nk = kb // L
    jm, lm = pt.reduce_axis((0, nk), name="jm"), pt.reduce_axis((0, L), name="lm")
    bmp = pt.compute(
        (B, H, S, nt, L),
        lambda b, h, i, t, n: pt.max(Sc[b, h, i, t * kb + jm * L + n], axis=jm),
        name="bmp",
    )
    bm = pt.compute(
        (B, H, S, nt), lambda b, h, i, t: pt.max(bmp[b, h, i, t, lm], axis=lm), name="bm"
    )
    P = pt.compute(
        (B, H, S, Sp),
        lambda b, h, i, j: exp(Sc[b, h, i, j] - pt.max(bm[b, h, i, j // kb], c(FLOOR))),
        name="P",
    )
    js, ls = pt.reduce_axis((0, nk), name="js"), pt.reduce_axis((0, L), name="ls")
    lbp = pt.compute(
        (B, H, S, nt, L),
        lambda b, h, i, t, n: pt.sum(P[b, h, i, t * kb + js * L + n], axis=js),
        name="lbp",
    )
    lb = pt.compute(
        (B, H, S, nt), lambda b, h, i, t: pt.sum(lbp[b, h, i, t, ls], axis=ls), name="lb"
    )
    PV = gemms.pv(P, values, kvh, kb, (B, H, nt, S, Dv))
    NV = -(-Dv // Ls) + 2
    St = pt.compute(
        (B, H, S, NV, Ls),
        lambda b, h, i, v, n: pt.select((v == NV - 1) & (n == 0), c(FLOOR), c(0.0)),
        name="St",
    )
    tq = cfg["tile_q"].size[-1]
    rb, rh, ri = pt.rdom([(0, B), (0, H), (0, S)], names="rb rh ri")
    if causal:  # the blocks up to the last key the query tile of ri sees
        last_key = pt.min((ri // tq) * tq + (tq - 1 + Sk - S), Sk - 1)
        rt = pt.reduce_axis((0, last_key // kb + 1), name="rt")
    else:
        rt = pt.reduce_axis((0, nt), name="rt")
    rv, rl = pt.rdom([(0, NV), (0, Ls)], names="rv rl")
    cur = lambda v, n: St[rb, rh, ri, v, n]  # noqa: E731
    bmv = pt.max(bm[rb, rh, ri, rt], c(FLOOR))
    m_new = pt.max(cur(NV - 1, 0), bmv)
    a, b_ = exp(cur(NV - 1, 0) - m_new), exp(bmv - m_new)
    # the header's lanes picked by multiplying with 0 or 1 (all finite), not by selects:
    # every load then happens in every lane, and the compiler vectorizes the lane loop
    one = lambda k: pt.select(rl == k, c(1.0), c(0.0))  # noqa: E731
    head = (cur(0, rl) * a + b_ * lb[rb, rh, ri, rt]) * one(0) + a * one(1) + b_ * one(2)
    if Dv % Ls:  # the accumulator's column of a lane, clamped into the last vector
        e = pt.min(pt.max(rv - 1, 0) * Ls + rl, Dv - 1)
    else:  # clamped a whole vector at a time: a unit-stride load of the lanes
        e = pt.min(pt.max(rv - 1, 0), NV - 3) * Ls + rl
    acc = cur(rv, rl) * cur(0, 1) + cur(0, 2) * PV[rb, rh, rt, ri, e]
    mvec = pt.select(rl == 0, m_new, c(0.0))  # lane 0 alone reads what it writes
    St[rb, rh, ri, rv, rl] = pt.select(rv == 0, head, pt.select(rv == NV - 1, mvec, acc))

    def out(b, h, i, e):
        o = St[b, h, i, 1 + e // Ls, e % Ls] / St[b, h, i, 0, 0]
        o = o if mask is None else pt.select(St[b, h, i, 0, 0] > c(0.0), o, c(0.0))
        return o if Q.dtype == dtype else pt.cast(Q.dtype, o)

    Out = pt.compute((B, H, S, Dv), out, name="O")

    s = pt.create_schedule(Out.op)
    for T in copies:  # the padded, transposed or packed copies, once per call
        s[T].parallel(s[T].fuse(T.op.axis[0], T.op.axis[1]))
    DL = s.cache_write(Dot, "local")
    s[Dot].compute_inline()
    u = s[St].update(0)
    ub, uh, ui, ut, uv, un = u.op.axis
    uio, uii = u.split(ui, factor=tq)
    u.reorder(ub, uh, uio, ut, uv, uii, un)  # the header, accumulator, max vectors in turn
    u.parallel(u.fuse(u.fuse(ub, uh), uio))
    u.unroll(uv)  # each kind of vector a loop of its own
    u.vectorize(un)
    for T in (PV, lb, lbp, P, bm, bmp):
        s[T].compute_at(u, ut)
    s[Out].parallel(s[Out].fuse(*Out.op.axis[:3]))
    s[St].parallel(s[St].fuse(*St.op.axis[:3]))
    s[St].vectorize(St.op.axis[-1])
    s[Out].vectorize(Out.op.axis[3])
    # the scale and mask applied where the scores are read (no pass storing them); the
    # scores of a block as key tiles of register tiles
    s[Sc].compute_inline()
    s[DL].compute_at(u, ut)
    jo, ji = s[DL].split(DL.op.axis[-1], factor=gemms.key_tile)
    s[DL].reorder(jo, DL.op.axis[-2], ji)
    for T in (bmp, lbp):
        (r,) = s[T].op.reduce_axis
        s[T].reorder(r, T.op.axis[-1])
        s[T].vectorize(T.op.axis[-1])
    po, pi = s[P].split(P.op.axis[3], factor=L)
    s[P].vectorize(pi)
    gemms.tiles(s, DL, PV, kb, ji, (jo,))
    return s, Out
