"""Mixture of experts with SwiGLU experts, as grouped GEMMs over expert segments.

Given each token's top-k experts and weights, every (token, expert) pair is one
*row*; rows are grouped by expert and each expert's segment is padded to a
multiple of ``block`` rows (``moe_route``, in numpy: the routing is data, the
arithmetic is here). The kernel then runs, for padded rows ``r`` (``e`` =
``eid[r // block]``, the block's expert; ``X[tok[r]]`` the row's token):

    H[r, f]  = silu(sum_c X[tok[r], c] Wg[e, c, f]) * sum_c X[tok[r], c] Wu[e, c, f]
    Y[r, c]  = wt[r] * sum_f H[r, f] Wd[e, f, c]
    out[t, c] = sum_k Y[inv[t, k], c]        (each token's k rows, gathered back)

The gather (``X[tok[r], c]``), the per-block expert (``W[eid[r // block], ...]``)
and the combine (``Y[inv[t, k], c]``) are data-dependent reads, bounds-checked
at run time. Padding rows point at token 0 with weight 0; a fixed number of
rows (the worst case, ``max_rows``) keeps the shapes constant, so unused
trailing blocks are computed too (under 13% extra for 512 tokens, top-2 and 8
experts with ``block = 16``). The weights are taken K-major (``[E, d, F]`` and
``[E, F, d]``: the operator keeps such a copy of PyTorch's ``[E, F, d]`` /
``[E, d, F]`` weights) so that each GEMM's vectorized column loop reads
contiguous rows.

Each GEMM: columns in ``panel``-wide panels (parallel), rows in blocks of
``tile_r``; the accumulators of a (panel, row block) live in a local buffer
holding register tiles of ``mr`` rows x ``panel`` columns (reduction outermost
inside a tile, rows unrolled, columns vectorized).
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from ..task import template


def max_rows(tokens: int, topk: int, experts: int, block: int) -> int:
    """Padded rows for any routing: every segment rounded up to ``block`` rows."""
    return -(-(tokens * topk + experts * (block - 1)) // block) * block


def moe_route(topk_ids, topk_weights, experts: int, block: int):
    """The kernel's routing arrays for (T, k) expert ids and weights:
    ``tok`` (int32 [R]), ``eid`` (int32 [R // block]), ``wt`` ([R], the weights'
    dtype) and ``inv`` (int32 [T, k], each pair's row). Raises ``ValueError`` for an
    expert id outside ``[0, experts)``."""
    ids = np.asarray(topk_ids).astype(np.int64)
    T, k = ids.shape
    if ids.size and (ids.min() < 0 or ids.max() >= experts):
        raise ValueError(f"moe: topk_ids must lie in [0, {experts}), got {ids.min()}..{ids.max()}")
    R = max_rows(T, k, experts, block)
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=experts)
    padded = -(-counts // block) * block
    starts = np.concatenate([[0], np.cumsum(padded)[:-1]])
    seg_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.empty(T * k, np.int64)
    pos[order] = starts[flat[order]] + (np.arange(T * k) - seg_start[flat[order]])
    tok = np.zeros(R, np.int32)
    tok[pos] = np.arange(T * k) // k
    wt = np.zeros(R, np.asarray(topk_weights).dtype)
    wt[pos] = np.asarray(topk_weights).reshape(-1)
    eid = np.zeros(R // block, np.int32)
    for e in range(experts):
        eid[starts[e] // block : (starts[e] + padded[e]) // block] = e
    return tok, eid, wt, pos.reshape(T, k).astype(np.int32)


def _moe_ref(x, tok, eid, wt, wg, wu, wd, inv):
    """float64 reference over any routing arrays (one GEMM per block of rows)."""
    x64 = x.astype(np.float64)
    R, bm = tok.shape[0], tok.shape[0] // eid.shape[0]
    y = np.zeros((R, x.shape[1]))
    for blk in range(eid.shape[0]):
        e = int(eid[blk])
        rows = slice(blk * bm, (blk + 1) * bm)
        xr = x64[tok[rows]]
        g = xr @ wg[e].astype(np.float64)
        h = g / (1.0 + np.exp(-g)) * (xr @ wu[e].astype(np.float64))
        y[rows] = wt[rows, None] * (h @ wd[e].astype(np.float64))
    return y[inv].sum(axis=1).astype(x.dtype)


def define_gemm_tile_knobs(cfg, prefix: str, cols: int, lanes: int):
    """``{prefix}panel``: columns per panel (parallel); ``{prefix}tile_r``: rows per
    accumulator block; ``{prefix}mr``: rows of a register tile. Defaults fill the
    target's vector registers (mr x panel / lanes accumulators)."""
    nr = 2 * lanes if cols > lanes else lanes
    cfg.define_split(
        prefix + "panel",
        cols,
        num_outputs=2,
        policy="candidate",
        candidate=[[-1, lanes * m] for m in (1, 2, 3, 4)],
        default=[-1, nr],
    )
    cfg.define_knob(prefix + "tile_r", [16, 32, 64], default=32)
    regs = cfg.target.vector_registers
    fit = [m for m in (2, 4, 6, 8) if m * (nr // lanes) + nr // lanes + 1 <= regs]
    cfg.define_knob(prefix + "mr", [2, 4, 6, 8], default=max(fit or [2]))


def schedule_grouped_gemm(cfg, s, C, accs, prefix: str):
    """``C`` (rows x cols) from the accumulators ``accs`` (its GEMM reductions)::

    for r, c: C[r, c] = f(acc_1[r, c], ...)
    ->
    parallel for co (panels): for ro (row blocks):
      acc_n[tile_r x panel]: for rt: for k: unrolled for ri < mr: vectorized for c: ...
      for ri, vectorized ci: C[...] = f(acc...)
    """
    r, c = C.op.axis
    co, ci = cfg[prefix + "panel"].apply(s, C, c)
    ro, ri = s[C].split(r, factor=cfg[prefix + "tile_r"].val)
    s[C].reorder(co, ro, ri, ci)
    s[C].parallel(co)
    s[C].vectorize(ci)
    for A in accs:
        s[A].compute_at(s[C], ro)
        ic, jc = s[A].op.axis
        (kk,) = s[A].op.reduce_axis
        ico, ici = s[A].split(ic, factor=cfg[prefix + "mr"].val)
        s[A].reorder(ico, kk, ici, jc)
        s[A].unroll(ici)
        s[A].vectorize(jc)


@template("moe", reference=_moe_ref)
def moe(cfg, tokens, d_model, d_ff, experts, topk, block=16, dtype="float32"):
    """out[t] = sum over t's top-k experts e of w_e * (silu(x Wg_e) * (x Wu_e)) Wd_e."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"moe: dtype must be float32 or float64, got {dtype!r}")
    lanes = cfg.target.vector_lanes(dtype)
    define_gemm_tile_knobs(cfg, "up_", d_ff, lanes)
    define_gemm_tile_knobs(cfg, "down_", d_model, lanes)
    R = max_rows(tokens, topk, experts, block)
    cfg.add_flop(6.0 * tokens * topk * d_model * d_ff)
    X = pt.placeholder((tokens, d_model), dtype, name="X")
    tok = pt.placeholder((R,), "int32", name="tok")
    eid = pt.placeholder((R // block,), "int32", name="eid")
    wt = pt.placeholder((R,), dtype, name="wt")
    Wg = pt.placeholder((experts, d_model, d_ff), dtype, name="Wg")
    Wu = pt.placeholder((experts, d_model, d_ff), dtype, name="Wu")
    Wd = pt.placeholder((experts, d_ff, d_model), dtype, name="Wd")
    inv = pt.placeholder((tokens, topk), "int32", name="inv")
    Xg = pt.compute((R, d_model), lambda r, c: X[tok[r], c], name="Xg")
    c1 = pt.reduce_axis((0, d_model), name="c1")
    c2 = pt.reduce_axis((0, d_model), name="c2")
    G = pt.compute(
        (R, d_ff),
        lambda r, f: pt.sum(Xg[r, c1] * Wg[eid[r // block], c1, f], axis=c1),
        name="G",
    )
    U = pt.compute(
        (R, d_ff),
        lambda r, f: pt.sum(Xg[r, c2] * Wu[eid[r // block], c2, f], axis=c2),
        name="U",
    )
    one = pt.const(1.0, dtype)
    exp = pt.fast_exp if dtype == "float32" else pt.exp
    H = pt.compute((R, d_ff), lambda r, f: G[r, f] / (one + exp(-G[r, f])) * U[r, f], name="H")
    fd = pt.reduce_axis((0, d_ff), name="fd")
    Dn = pt.compute(
        (R, d_model),
        lambda r, c: pt.sum(H[r, fd] * Wd[eid[r // block], fd, c], axis=fd),
        name="Dn",
    )
    Y = pt.compute((R, d_model), lambda r, c: wt[r] * Dn[r, c], name="Y")
    kk = pt.reduce_axis((0, topk), name="kk")
    out = pt.compute((tokens, d_model), lambda t, c: pt.sum(Y[inv[t, kk], c], axis=kk), name="out")
    s = pt.create_schedule(out.op)
    s[Xg].parallel(Xg.op.axis[0])
    s[Xg].vectorize(Xg.op.axis[1])
    schedule_grouped_gemm(cfg, s, H, [G, U], "up_")
    DL = s.cache_write(Dn, "local")
    s[Dn].compute_inline()
    schedule_grouped_gemm(cfg, s, Y, [DL], "down_")
    t, c = out.op.axis
    s[out].parallel(t)
    s[out].reorder(t, kk, c)
    s[out].vectorize(c)
    return s, [X, tok, eid, wt, Wg, Wu, Wd, inv, out]
