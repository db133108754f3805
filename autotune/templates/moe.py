"""Mixture of experts with SwiGLU experts, as batched GEMMs over expert segments.

Given each token's top-k experts and weights, every (token, expert) pair is one
*row*. ``moe_route`` (numpy: the routing is data, the arithmetic is here) lays
the rows out per expert: expert ``e``'s rows are slots ``0 .. n_e - 1`` of
``tok[e, :]`` (their tokens) and ``wt[e, :]`` (their weights), ``cap`` slots per
expert (the largest ``n_e`` rounded up to ``block``; the operator builds one
module per ``cap`` it meets). Free slots point at token 0 with weight 0. Then:

    Xg[e, s, c]  = X[tok[e, s], c]                                   (gather)
    G[e, s, f]   = sum_c Xg[e, s, c] Wg[e, c, f]
    H[e, s, f]   = silu(G[e, s, f]) * sum_c Xg[e, s, c] Wu[e, c, f]
    Y[e, s, c]   = wt[e, s] * sum_f H[e, s, f] Wd[e, f, c]
    out[t, c]    = sum_j Y[inv_e[t, j], inv_s[t, j], c]              (combine)

Every GEMM is affine in the expert (a batch axis), so each is ``matmul``'s
micro-kernel (``schedule_gemm``: register tiles, weights packed per panel,
panels x experts in parallel) with the SwiGLU and the routing weight fused in
as epilogues; only the gather and the combine read data-dependent indices
(bounds-checked at run time). The weights are taken K-major (``[E, d, F]`` and
``[E, F, d]``; the operator keeps such a copy of PyTorch's ``[E, F, d]`` /
``[E, d, F]`` weights). Slots past an expert's rows are computed too: with
balanced routing ``cap`` is close to ``T k / E``; with skewed routing the waste
grows (all rows on one expert: ``E`` times the work).
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from ..task import template
from .matmul import define_gemm_knobs, schedule_gemm


def _checked_ids(topk_ids, experts: int) -> np.ndarray:
    ids = np.asarray(topk_ids).astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= experts):
        raise ValueError(f"moe: topk_ids must lie in [0, {experts}), got {ids.min()}..{ids.max()}")
    return ids


def capacity(topk_ids, experts: int, block: int = 16) -> int:
    """Slots per expert for this routing: the busiest expert's rows, rounded up to
    ``block`` (so a few distinct capacities cover many calls)."""
    counts = np.bincount(_checked_ids(topk_ids, experts).reshape(-1), minlength=experts)
    return max(block, -(-int(counts.max(initial=0)) // block) * block)


def moe_route(topk_ids, topk_weights, experts: int, cap: int):
    """The kernel's routing arrays for (T, k) expert ids and weights: ``tok`` (int32
    [E, cap]), ``wt`` ([E, cap], the weights' dtype), ``inv_e`` and ``inv_s`` (int32
    [T, k]: each pair's expert and slot). Raises ``ValueError`` for an expert id
    outside ``[0, experts)`` or an expert with more than ``cap`` rows."""
    ids = _checked_ids(topk_ids, experts)
    T, k = ids.shape
    flat = ids.reshape(-1)
    counts = np.bincount(flat, minlength=experts)
    if counts.max(initial=0) > cap:
        raise ValueError(f"moe: an expert has {counts.max()} rows, more than cap = {cap}")
    order = np.argsort(flat, kind="stable")
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot = np.empty(T * k, np.int64)
    slot[order] = np.arange(T * k) - first[flat[order]]
    tok = np.zeros((experts, cap), np.int32)
    tok[flat, slot] = np.arange(T * k) // k
    wt = np.zeros((experts, cap), np.asarray(topk_weights).dtype)
    wt[flat, slot] = np.asarray(topk_weights).reshape(-1)
    return tok, wt, ids.astype(np.int32), slot.reshape(T, k).astype(np.int32)


def _moe_ref(x, tok, wt, wg, wu, wd, inv_e, inv_s):
    """float64 reference over any routing arrays (one GEMM chain per expert)."""
    x64 = x.astype(np.float64)
    y = np.zeros((*tok.shape, x.shape[1]))
    for e in range(tok.shape[0]):
        xr = x64[tok[e]]
        g = xr @ wg[e].astype(np.float64)
        h = g / (1.0 + np.exp(-g)) * (xr @ wu[e].astype(np.float64))
        y[e] = wt[e, :, None] * (h @ wd[e].astype(np.float64))
    return y[inv_e, inv_s].sum(axis=1).astype(x.dtype)


@template("moe", reference=_moe_ref)
def moe(cfg, tokens, d_model, d_ff, experts, topk, cap, dtype="float32"):
    """out[t] = sum over t's top-k experts e of w_e * (silu(x Wg_e) * (x Wu_e)) Wd_e."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"moe: dtype must be float32 or float64, got {dtype!r}")
    lanes = cfg.target.vector_lanes(dtype)
    size = np.dtype(dtype).itemsize
    gemms = (("gate_", d_ff, d_model), ("up_", d_ff, d_model), ("down_", d_model, d_ff))
    for prefix, n, kdim in gemms:
        define_gemm_knobs(cfg, cap, n, lanes, prefix=prefix, a_bytes=cap * kdim * size)
    cfg.add_flop(6.0 * tokens * topk * d_model * d_ff)
    E = experts
    X = pt.placeholder((tokens, d_model), dtype, name="X")
    tok = pt.placeholder((E, cap), "int32", name="tok")
    wt = pt.placeholder((E, cap), dtype, name="wt")
    Wg = pt.placeholder((E, d_model, d_ff), dtype, name="Wg")
    Wu = pt.placeholder((E, d_model, d_ff), dtype, name="Wu")
    Wd = pt.placeholder((E, d_ff, d_model), dtype, name="Wd")
    inv_e = pt.placeholder((tokens, topk), "int32", name="inv_e")
    inv_s = pt.placeholder((tokens, topk), "int32", name="inv_s")
    Xg = pt.compute((E, cap, d_model), lambda e, s, c: X[tok[e, s], c], name="Xg")
    c1 = pt.reduce_axis((0, d_model), name="c1")
    c2 = pt.reduce_axis((0, d_model), name="c2")
    fd = pt.reduce_axis((0, d_ff), name="fd")
    G = pt.compute(
        (E, cap, d_ff), lambda e, s, f: pt.sum(Xg[e, s, c1] * Wg[e, c1, f], axis=c1), name="G"
    )
    U = pt.compute(
        (E, cap, d_ff), lambda e, s, f: pt.sum(Xg[e, s, c2] * Wu[e, c2, f], axis=c2), name="U"
    )
    one = pt.const(1.0, dtype)
    exp = pt.fast_exp if dtype == "float32" else pt.exp
    H = pt.compute(
        (E, cap, d_ff),
        lambda e, s, f: G[e, s, f] / (one + exp(-G[e, s, f])) * U[e, s, f],
        name="H",
    )
    Dn = pt.compute(
        (E, cap, d_model), lambda e, s, c: pt.sum(H[e, s, fd] * Wd[e, fd, c], axis=fd), name="Dn"
    )
    Y = pt.compute((E, cap, d_model), lambda e, s, c: wt[e, s] * Dn[e, s, c], name="Y")
    j = pt.reduce_axis((0, topk), name="j")
    out = pt.compute(
        (tokens, d_model),
        lambda t, c: pt.sum(Y[inv_e[t, j], inv_s[t, j], c], axis=j),
        name="out",
    )
    s = pt.create_schedule(out.op)
    ge, gs, gc = Xg.op.axis
    s[Xg].parallel(s[Xg].fuse(ge, gs))
    s[Xg].vectorize(gc)
    GL = s.cache_write(G, "local")
    schedule_gemm(cfg, s, G, GL, cap, Wg, batch_axis=G.op.axis[0], prefix="gate_")
    # U's accumulator tile is copied out through the SwiGLU (U inlined into H)
    UL = s.cache_write(U, "local")
    s[U].compute_inline()
    schedule_gemm(cfg, s, H, UL, cap, Wu, batch_axis=H.op.axis[0], prefix="up_")
    DL = s.cache_write(Dn, "local")
    s[Dn].compute_inline()
    schedule_gemm(cfg, s, Y, DL, cap, Wd, batch_axis=Y.op.axis[0], prefix="down_")
    t, c = out.op.axis
    s[out].parallel(t)
    s[out].reorder(t, j, c)
    s[out].vectorize(c)
    return s, [X, tok, wt, Wg, Wu, Wd, inv_e, inv_s, out]
