"""Scaled dot-product attention: ``O = softmax(Q K^T * scale [+ causal mask]) V``.

Q, K, V and O are ``[B, H, S, D]`` (``F.scaled_dot_product_attention``'s layout).
Two general forms (the ``form`` knob), both working on one tile of ``tile_q`` queries of
one head at a time, heads x query tiles in one parallel loop, both with the score
and the P V products in register tiles (``ukernels.gemm_tile`` where the target
has SIMD micro-kernels):

- ``flash`` (``attention_flash.py``): the keys streamed ``key_block`` at a time
  through an online softmax (running max and sum, the accumulator rescaled),
  written as an update definition; a task holds ``tile_q x key_block`` scores,
  and with ``causal`` never visits the blocks above the diagonal. The default
  for causal calls and for rows of scores too long for L2.
- ``two_pass``, below: the exact row max first. The default (not causal) while
  a tile's row of scores and probabilities (``2 x tile_q x S`` floats) fits in
  half the target's L2, where the second pass costs no memory traffic.
- ``decode`` (``attention_decode.py``), for at most 4 queries per head (a decoder's
  step), its default there: K and V read in place, once each, a task per head.

In the two-pass form every intermediate is computed at the task loop, so the
only buffers are per tile:

- ``KT``: the keys transposed per head (``[B, H, D, S]``, one pass), so the
  score GEMM reads contiguous key rows under its vectorized loop; padded with
  zero keys to whole key tiles, which score ``-inf`` (a row added to the scores,
  ``attention_mask.past_keys``, with the mask where the queries share it): no
  ragged tile of keys and rows of scores of whole vectors (ViT's 197 tokens, B=1,
  H=12, D=64, on a Zen 4, one / two threads: 3.1 / 2.1 -> 2.0 / 1.2 ms; CLIP's 77:
  0.67 / 0.46 -> 0.30 / 0.19 ms);
- ``Dot`` (``tile_q x S``): the tile's scores, computed as register tiles of
  ``mr_s`` queries x ``key_tile`` keys, the keys streamed tile by tile. With the
  target's micro-kernel (``ukernel``) each tile is stored once, as it is, and the
  scale and the mask are applied where the scores are read (the row max and the
  exponentials; a copy applying them cost 8%: 16.9 -> 15.6 ms at B=1, H=8, S=1024,
  D=64 on a Sapphire Rapids-class Xeon, one thread); with loops the tile
  accumulates in a local buffer (``cache_write``, reduction over D outermost
  inside the tile), copied out scaled and masked (``Sc``);
- the row max and the row sum as ``red_lanes`` vector partials per row, then
  ``P = exp(Sc - max)`` (``pt.fast_exp`` in float32) in a buffer of its own;
- ``O`` in register tiles of ``mr_o`` queries x ``o_cols`` of D (the P V GEMM, the reduction
  over keys outermost), scaled by 1 / sum as it is stored.

No S x S buffer exists: a thread holds ``tile_q x S`` scores and as many
probabilities (64 KiB each for ``tile_q = 16``, S = 1024), which stay in its L2.

``kv_len`` keys (default S) serve S queries; ``causal`` masks keys past
``i + kv_len - S`` (the mask aligned to the last key, as for the last S
queries of a longer sequence). In the two-pass form key tiles above the
diagonal are computed and masked (``-inf``); ``kv_len`` with ``kv_rows`` (K and
V read as a prefix of their rows) and ``k_transposed`` let a caller split a
causal call into chunks of queries, each against the keys up to its end.
"""

from __future__ import annotations

import math

import numpy as np

import pypto as pt

from ..task import template
from . import attention_amx, attention_decode, attention_mask, attention_rows, ukernels
from .attention_flash import VectorGemms, flash_attention, flash_knobs, kv_head
from .knobs import inner_tile


def _attention_ref(q, k, v, m=None, *, causal, scale, kv_len=None, k_transposed=False):
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if k_transposed:
        k = np.swapaxes(k, 2, 3)
    g = q.shape[1] // k.shape[1]  # query heads per key/value head (grouped-query)
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    sq = q.shape[2]
    sk = k.shape[2] if kv_len is None else int(kv_len)
    k, v = k[:, :, :sk], v[:, :, :sk]
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        s = np.where(np.tril(np.ones((sq, sk), bool), k=sk - sq), s, -np.inf)
    if m is not None:  # a mask: bool (where true) or added
        s = np.where(m, s, -np.inf) if m.dtype == bool else s + m.astype(np.float64)
    mx = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isneginf(mx), 0.0, mx))  # a row masked out: zeros
    den = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, den, out=np.zeros_like(p), where=den > 0)
    return np.einsum("bhij,bhjd->bhid", p, v.astype(np.float64)).astype(q.dtype)


def sdpa_parts(B, H, S, D, Hk, Sk, Dv, causal: bool, scale, dtype: str, mask=None) -> list:
    """PyTorch's ``scaled_dot_product_attention`` of q ``[B, H, S, D]``, k ``[B, Hk, Sk,
    D]`` and v ``[B, Hk, Sk, Dv]`` as calls of this template: ``[(first query, end
    query, template arguments)]``, the arguments without their trailing defaults
    (``Template.short_args``: the workloads ``pypto-tune`` and the standard workloads
    name, ``(1, 8, 1024, 64)``, ``(1, 8, 1024, 64, True)``). PyTorch's causal mask is
    aligned to the first key (query i sees keys j <= i), this template's to the last:
    with more keys than queries only the first S count (``kv_len`` S of ``kv_rows``
    Sk); with fewer, the queries past the last key see every key (a second call).
    ``mask``: the template's (``attention_mask``; not with ``causal``)."""
    if causal and Sk < S:
        head = sdpa_parts(B, H, Sk, D, Hk, Sk, Dv, True, scale, dtype)
        return head + [(Sk, S, sdpa_parts(B, H, S - Sk, D, Hk, Sk, Dv, False, scale, dtype)[0][2])]
    kv_len = S if causal else Sk
    args = (B, H, S, D, bool(causal), scale, dtype, None if kv_len == S else kv_len)
    args += (None if Sk == kv_len else Sk, False, None if Dv == D else Dv)
    return [(0, S, attention.short_args((*args, None if Hk == H else Hk, mask)))]


def define_attention_knobs(cfg, S: int, Sk: int, D: int, lanes: int, causal: bool, decode=False):
    """``tile_q`` queries per parallel task; ``mr_s`` x ``key_tile``: the score register
    tile; ``mr_o`` x ``o_cols``: the P V register tile (queries x columns of V's ``D``,
    the value dim); ``red_lanes``:
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
    if ukernels.simd_isa(cfg.target) is not None:
        cfg.define_knob("ukernel", [0, 1], default=1)
    # the two-pass form keeps a tile's scores and probabilities (2 x tile_q x Sk) in L2,
    # and visits every key tile; the flash form skips the blocks above the diagonal
    held = 2 * cfg["tile_q"].size[-1] * Sk * 4
    flash = causal or held > cfg.target.cache_sizes["L2"] // 2
    forms = ["two_pass", "flash"] + (["decode"] if decode else [])  # attention_decode
    default = "decode" if decode else "flash" if flash else "two_pass"
    cfg.define_knob("form", forms, default=default)
    flash_knobs(cfg, Sk, D, lanes)


def _tile_intrin(cfg, dtype: str, mr: int, cols: int, K: int, rows: int, ncols: int):
    """The register tile's micro-kernel (``ukernels.gemm_tile``) when the target has one,
    the ``ukernel`` knob asks for it and ``mr`` x ``cols`` (whole vectors) fits in the
    ``rows`` x ``ncols`` the tile is cut from, else None (loops)."""
    isa = ukernels.simd_isa(cfg.target)
    if dtype != "float32" or isa is None or not cfg["ukernel"].val or cols % isa.lanes:
        return None
    if mr > rows or cols > ncols:
        return None
    return ukernels.gemm_tile(isa, mr, cols, K)


def _schedule_tile_gemm(s, CL, mr: int, jc, intrin=None, outer=()):
    """A register tile inside the local accumulator ``CL`` (rows x cols ``jc``, reduction
    k): rows split by ``mr``, the reduction outermost inside a row group, rows unrolled,
    columns vectorized; with ``intrin`` (a ``gemm_tile``) the whole tiles are one call::

        for i, j: CL[i, j] = 0; for k: CL[i, j] += A[i, k] * B[k, j]
        ->
        for io: for k: unrolled for ii < mr: vectorized for j: CL[io * mr + ii, j] += ...
        or
        for io: gemm_tile(A + io * mr * a0, a0, a1, B, b0, b1, CL + io * mr * c0, c0, c1)
    """
    ic = s[CL].op.axis[-2]
    (kk,) = s[CL].op.reduce_axis
    ico, ici = s[CL].split(ic, factor=mr)
    s[CL].unroll(ici)
    s[CL].vectorize(jc)
    if intrin is None:
        s[CL].reorder(*outer, ico, kk, ici, jc)
    else:  # partial tiles (ragged rows or columns) keep the loops
        s[CL].reorder(*outer, ico, ici, jc, kk)
        s[CL].tensorize(ici, intrin)


@template("attention", reference=_attention_ref)
def attention(
    cfg,
    B,
    H,
    S,
    D,
    causal=False,
    scale=None,
    dtype="float32",
    kv_len=None,
    kv_rows=None,
    k_transposed=False,
    dv=None,
    kv_heads=None,
    mask=None,
):
    """O[b, h, i, :] = sum_j softmax_j(scale * Q[b, h, i, :] . K[b, h, j, :]) V[b, h, j, :]
    over ``kv_len`` keys (default S); ``causal``: only keys j <= i + kv_len - S. K and V
    have ``kv_rows`` rows (default ``kv_len``), of which the first ``kv_len`` are read:
    a chunk of queries reads a prefix of the whole K and V without a copy.
    ``k_transposed``: K is given as ``[B, H, D, kv_rows]`` (transposed once for several
    calls) instead of ``[B, H, kv_rows, D]``. ``dv``: the value dim (V ``[B, H,
    kv_rows, dv]``, O ``[B, H, S, dv]``) when it differs from the query and key dim D.
    ``kv_heads``: grouped-query attention, K and V with ``kv_heads`` heads (dividing
    H), query head h reading key/value head ``h // (H / kv_heads)`` (as SDPA's
    ``enable_gqa``). ``mask``: SDPA's ``attn_mask``, an input M after V (``"bool:b11k"``
    and the like, see ``attention_mask``), not with ``causal``. ``kv_len`` may be a
    ``pt.var``, K's and V's rows bound at call (at most ``kv_rows``; not causal):
    ``kv_rows`` keys are computed, those past ``kv_len`` masked out; one module for
    every key count up to a bound (``autotune.torch_prefill``)."""
    tile_isa = attention_amx.tile_isa(cfg.target, dtype, D)
    decode = attention_decode.available(S, k_transposed)
    widened = dtype in attention_decode.WIDENED and tile_isa is None  # decode form only
    if dtype not in ("float32", "float64") and tile_isa is None and not (widened and decode):
        raise ValueError(
            f"attention: dtype must be float32 or float64; bfloat16 on a target with a "
            f"bfloat16 dot instruction and an even query/key dim (a multiple of 32 on AMX) "
            f"(target {cfg.target.name}, dim {D}); or bfloat16 or float16 with at most "
            f"{attention_decode.DECODE_QUERIES} queries per head and K's rows contiguous "
            f"(the decode form; got {S} queries{', K transposed' if k_transposed else ''}); "
            f"got {dtype!r}"
        )
    dyn = isinstance(kv_len, pt.Var)  # K's and V's rows a size bound at call
    if dyn and (causal or kv_rows is None or k_transposed):
        raise ValueError(
            "attention: kv_len as a size (pt.var) needs kv_rows, its bound, and neither "
            "causal nor K transposed"
        )
    Sk = kv_len if dyn else S if kv_len is None else int(kv_len)
    top = int(kv_rows) if dyn else Sk  # the keys computed: a constant
    if causal and Sk < S:
        raise ValueError(
            f"attention: causal needs kv_len >= S (the mask is aligned to the last key), "
            f"got kv_len {Sk} < S {S}"
        )
    rows = Sk if kv_rows is None or dyn else int(kv_rows)
    if not dyn and rows < Sk:
        raise ValueError(f"attention: kv_rows {rows} < kv_len {Sk} (K and V hold the keys)")
    Dv = D if dv is None else int(dv)
    if D < 1 or Dv < 1:
        raise ValueError(f"attention: the query/key dim {D} and value dim {Dv} must be >= 1")
    Hk = H if kv_heads is None else int(kv_heads)
    if Hk < 1 or H % Hk:
        raise ValueError(
            f"attention: the {H} query heads must be a whole number per key/value head, "
            f"got kv_heads {Hk}"
        )
    kvh = kv_head(H, Hk)
    msk = attention_mask.parse(mask, (B, H, S, Sk), dtype)
    if msk is not None and causal:
        raise ValueError("attention: a mask and causal at once (SDPA refuses them too)")
    cdt = "float32" if tile_isa is not None or widened else dtype  # the softmax's dtype
    if tile_isa is not None:
        attention_amx.define_knobs(cfg, S, top, Dv, causal, tile_isa.kind)
        if decode:  # 16-bit K and V read in place too
            attention_decode.define_knobs(cfg, cfg.target.vector_lanes(cdt))
    elif widened:
        attention_decode.define_knobs(cfg, cfg.target.vector_lanes(cdt), others=())
    else:
        define_attention_knobs(cfg, S, top, Dv, cfg.target.vector_lanes(dtype), causal, decode)
    if decode:
        attention_decode.define_group_knob(cfg, B, H, S, Hk)
    pairs = S * (Sk - S) + S * (S + 1) / 2 if causal else S * top  # (query, key) pairs
    cfg.add_flop(2.0 * B * H * (D + Dv) * pairs)
    sc = 1.0 / math.sqrt(D) if scale is None else float(scale)
    Q = pt.placeholder((B, H, S, D), dtype, name="Q")
    V = pt.placeholder((B, Hk, rows, Dv), dtype, name="V")
    if attention_decode.chosen(cfg):
        K = pt.placeholder((B, Hk, rows, D), dtype, name="K")
        dims = (B, H, S, D, Sk, Dv, Hk)
        s, Out = attention_decode.decode_attention(cfg, Q, K, V, dims, causal, sc, cdt, msk, kvh)
        return s, [Q, K, V, *([msk.tensor] if msk else []), Out]
    if tile_isa is not None:
        K = pt.placeholder((B, Hk, D, rows) if k_transposed else (B, Hk, rows, D), dtype, name="K")
        gemms = attention_amx.TileGemms(cfg, tile_isa, D, k_transposed)
        dims = (B, H, S, D, Sk, Dv, Hk)
        s, Out = flash_attention(cfg, Q, K, V, None, dims, causal, sc, cdt, gemms, msk, top)
        return s, [Q, K, V, *([msk.tensor] if msk else []), Out]
    lanes = cfg.target.vector_lanes(dtype)
    if cfg["form"].val == "flash":
        K = pt.placeholder((B, Hk, D, rows) if k_transposed else (B, Hk, rows, D), dtype, name="K")

        def tiles(s, DL, PV, kb, cols, outer):
            tq = min(S, cfg["tile_q"].size[-1])
            mr_s, mr_o = cfg["mr_s"].val, cfg["mr_o"].val
            intrin = _tile_intrin(cfg, dtype, mr_s, gemms.key_tile, D, tq, kb)
            _schedule_tile_gemm(s, DL, mr_s, cols, intrin, outer)
            dco, dci = cfg["o_cols"].apply(s, PV, PV.op.axis[-1])
            otile = _tile_intrin(cfg, dtype, mr_o, cfg["o_cols"].size[-1], kb, tq, Dv)
            _schedule_tile_gemm(s, PV, mr_o, dci, otile, outer=(dco,))

        kt_in = K if k_transposed else None
        dims = (B, H, S, D, Sk, Dv, Hk)
        gemms = VectorGemms(cfg, tiles, lanes)
        s, Out = flash_attention(cfg, Q, K, V, kt_in, dims, causal, sc, dtype, gemms, msk, top)
        return s, [Q, K, V, *([msk.tensor] if msk else []), Out]
    # the keys' copy (transposed) padded to whole key tiles: rows of scores and
    # probabilities of whole vectors, no ragged tile (the padded keys score -inf); K
    # given transposed is read in place, as it is
    kt = cfg["key_tile"].size[-1]
    Skp = Sk if k_transposed else -(-top // kt) * kt
    if k_transposed:
        K = KT = pt.placeholder((B, Hk, D, rows), dtype, name="K")
    else:
        K = pt.placeholder((B, Hk, rows, D), dtype, name="K")
        zero = pt.const(0.0, dtype)
        KT = pt.compute(
            (B, Hk, D, Skp),
            lambda b, h, d, j: pt.select(j < Sk, K[b, h, pt.min(j, Sk - 1), d], zero),
            name="KT",
        )
    d = pt.reduce_axis((0, D), name="d")
    Dot = pt.compute(
        (B, H, S, Skp),
        lambda b, h, i, j: pt.sum(Q[b, h, i, d] * KT[b, kvh(h), d, j], axis=d),
        name="Dot",
    )
    probs = attention_rows.probabilities(Dot, S, Sk, causal, sc, dtype, msk, cfg["red_lanes"].val)
    Sc, P, rs = probs.Sc, probs.P, probs.rs
    VP = V
    if dyn:  # V's rows past kv_len as zeros: P V over the kv_rows keys P has
        VP = pt.compute(
            (B, Hk, top, Dv),
            lambda b, h, j, e: pt.select(j < Sk, V[b, h, pt.min(j, Sk - 1), e], zero),
            name="VP",
        )
    j = pt.reduce_axis((0, top), name="j")
    Acc = pt.compute(
        (B, H, S, Dv),
        lambda b, h, i, e: pt.sum(P[b, h, i, j] * VP[b, kvh(h), j, e], axis=j),
        name="Acc",
    )
    Out = pt.compute((B, H, S, Dv), lambda b, h, i, e: Acc[b, h, i, e] * rs[b, h, i], name="O")

    s = pt.create_schedule(Out.op)
    for T in [KT] * (not k_transposed) + [VP] * dyn:  # copies, once per call
        s[T].parallel(s[T].fuse(T.op.axis[0], T.op.axis[1]))
    mr_s = cfg["mr_s"].val
    tq = min(S, cfg["tile_q"].size[-1])
    dtile = _tile_intrin(cfg, dtype, mr_s, kt, D, tq, Skp)
    if dtile is None:  # loops accumulate in a local tile, copied out scaled and masked
        DL = s.cache_write(Dot, "local")
        s[Dot].compute_inline()
    else:  # the micro-kernel keeps its tile in registers and stores the raw scores once
        s[Sc].compute_inline()
    AL = s.cache_write(Acc, "local")
    s[Acc].compute_inline()
    b, h, i, e = Out.op.axis
    # one split of the query rows: a ragged last tile shortens only loops inside the
    # parallel task (the register tiles live inside the accumulators' own loops)
    qo, qi = cfg["tile_q"].apply(s, Out, i)
    task = s[Out].fuse(s[Out].fuse(b, h), qo)
    s[Out].parallel(task)
    s[Out].vectorize(e)
    for T in [*probs.stages(Sc if dtile is None else Dot), AL]:
        s[T].compute_at(s[Out], task)
    # scores: key tiles streamed; per key tile mr_s queries x key_tile keys in registers
    if dtile is None:
        jo, ji = cfg["key_tile"].apply(s, Sc, Sc.op.axis[3])
        s[Sc].reorder(jo, Sc.op.axis[2], ji)
        s[Sc].vectorize(ji)
        s[DL].compute_at(s[Sc], jo)
        _schedule_tile_gemm(s, DL, mr_s, DL.op.axis[-1])
    else:
        jo, ji = cfg["key_tile"].apply(s, Dot, Dot.op.axis[3])
        _schedule_tile_gemm(s, Dot, mr_s, ji, dtile, outer=(jo,))
    attention_rows.schedule_partial(s, probs.mx_p)
    attention_rows.schedule_partial(s, probs.sm_p)
    po, pi = s[P].split(P.op.axis[3], factor=lanes)
    s[P].vectorize(pi)
    # P V: mr_o queries x o_cols columns of D per register tile
    dco, dci = cfg["o_cols"].apply(s, AL, AL.op.axis[-1])
    mr_o = cfg["mr_o"].val
    otile = _tile_intrin(cfg, dtype, mr_o, cfg["o_cols"].size[-1], top, tq, Dv)
    _schedule_tile_gemm(s, AL, mr_o, dci, otile, outer=(dco,))
    return s, [Q, K, V, *([msk.tensor] if msk else []), Out]
