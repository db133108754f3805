"""Mixture of experts with SwiGLU experts, as grouped GEMMs over the experts' segments.

Every (token, expert) pair is one *row*. ``moe_route`` (numpy: the routing is data,
the arithmetic is here) sorts the rows by expert: expert ``e``'s rows are the
segment ``offsets[e] .. offsets[e + 1]`` of ``tok`` (their tokens) and ``wt``
(their weights). One module computes one expert on its segment, however long:

    Xg[s, c] = X[tok[s], c]                                  s < rows (a size, pt.var)
    G[s, f]  = sum_c Xg[s, c] Wg[c, f]
    H[s, f]  = silu(G[s, f]) * sum_c Xg[s, c] Wu[c, f]
    Y[s, c]  = wt[s] * sum_f H[s, f] Wd[f, c]

``rows`` is bound from the segment's shape at each call, so the operator runs the
same module once per expert (on views of one ``Y`` of ``T k`` rows) and computes
no padding rows, whatever the routing. Each GEMM is ``matmul``'s micro-kernel
(``schedule_gemm``: register tiles, weights packed per column panel, panels in
parallel) with the SwiGLU and the routing weight fused in as epilogues. Then one
``combine`` module sums each token's rows:

    out[t, c] = sum_j Y[pos[t, j], c]

Only the gather and the combine read data-dependent indices (bounds-checked at
run time). The weights are taken K-major (``[d, F]`` and ``[F, d]`` per expert;
the operator keeps such a copy of PyTorch's ``[E, F, d]`` / ``[E, d, F]``).

The template ``moe`` is one expert's module at constant size, for tuning: its
rows are a balanced routing's ``ceil(T k / E)``; the operator builds the tuned
config with ``rows`` symbolic (``expert_ffn``).
"""

from __future__ import annotations

import math

import numpy as np

import pypto as pt
from pypto.dtypes import numpy_dtype

from ..task import template
from . import dot_knobs, dot_ukernels
from .matmul import define_gemm_knobs, schedule_gemm

DTYPES = ("float32", "float64", "bfloat16")


def _checked_ids(topk_ids, experts: int) -> np.ndarray:
    ids = np.asarray(topk_ids).astype(np.int64)
    if ids.ndim != 2:
        raise ValueError(f"moe: topk_ids must be [T, k], got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= experts):
        raise ValueError(f"moe: topk_ids must lie in [0, {experts}), got {ids.min()}..{ids.max()}")
    return ids


def routed_rows(tokens: int, topk: int, experts: int, align: int = 1) -> int:
    """The length of ``moe_route``'s arrays: every pair, plus room to pad each
    expert's segment to a multiple of ``align``."""
    return tokens * topk + experts * (align - 1)


def moe_route(topk_ids, topk_weights, experts: int, align: int = 1):
    """The routing arrays for (T, k) expert ids and weights, rows sorted by expert:
    ``tok`` (int32 [R]: each row's token), ``wt`` ([R], the weights' dtype),
    ``offsets`` (int64 [E + 1]: expert ``e``'s rows are ``offsets[e]:offsets[e+1]``)
    and ``pos`` (int32 [T, k]: the row of each pair), ``R = routed_rows(...)``. Each
    segment is padded to a multiple of ``align`` rows (token 0, weight 0: computed,
    never read), so that a kernel's register tiles of ``align`` rows are all whole.
    Raises ``ValueError`` for an expert id outside ``[0, experts)``."""
    ids = _checked_ids(topk_ids, experts)
    T, k = ids.shape
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=experts)
    padded = -(-counts // align) * align
    offsets = np.concatenate([[0], np.cumsum(padded)])
    first = np.concatenate([[0], np.cumsum(counts)])  # each expert's first pair in order
    e_sorted = flat[order]
    rows = offsets[e_sorted] + np.arange(T * k) - first[e_sorted]
    R = routed_rows(T, k, experts, align)
    tok = np.zeros(R, np.int32)
    tok[rows] = order // k
    wt = np.zeros(R, np.asarray(topk_weights).dtype)
    wt[rows] = np.asarray(topk_weights).reshape(-1)[order]
    pos = np.empty(T * k, np.int32)
    pos[order] = rows
    return tok, wt, offsets, pos.reshape(T, k)


def nominal_rows(tokens: int, topk: int, experts: int) -> int:
    """Rows per expert under a balanced routing: the size the template is tuned at."""
    return max(1, -(-tokens * topk // experts))


def panel_width(cfg, gemm: str) -> int:
    """Columns per panel of a GEMM's weights (``"gate"``, ``"up"``, ``"down"``): its
    register tile's width."""
    return cfg[gemm + "_tile_j"].size[-1]


def pack_panels(w: np.ndarray, nr: int, group: int = 1, out: np.ndarray | None = None):
    """Weights ``[E, N, K]`` (PyTorch's out x in) as column panels ``[E, ceil(N/nr), K,
    nr]`` (columns past N are 0): each panel one contiguous block, in the order the
    micro-kernel reads it. ``group`` > 1 (the dot kernels': 2 for bfloat16) keeps that
    many reduction elements of a column adjacent: ``[E, ceil(N/nr), K/g, nr, g]``.
    ``out``: the array to write them into (a new one by default)."""
    E, N, K = w.shape
    panels, whole, g = -(-N // nr), N // nr, group
    shape = (E, panels, K, nr) if g == 1 else (E, panels, K // g, nr, g)
    if out is None:
        out = np.empty(shape, w.dtype)
    # copied as bits (numpy's copy of ml_dtypes' is slow), a group as one unit
    unit = w.dtype.itemsize * g
    whole_units = unit in (1, 2, 4, 8) and w.strides[-1] == w.dtype.itemsize
    bits, K, g = (f"u{unit}", K // g, 1) if whole_units else (f"u{w.dtype.itemsize}", K, g)
    w, o = w.view(bits), out.view(bits).reshape(E, panels, K // g, nr, g)  # (views)
    cut = whole * nr
    np.copyto(o[:, :whole], w[:, :cut].reshape(E, whole, nr, K // g, g).transpose(0, 1, 3, 2, 4))
    if cut != N:  # the last panel, its columns past N zero
        o[:, whole] = 0
        np.copyto(
            o[:, whole, :, : N - cut],
            w[:, cut:].reshape(E, N - cut, K // g, g).transpose(0, 2, 1, 3),
        )
    return out


GEMMS = ("gate", "up", "down")


def _kernel(target, dtype: str, d_model: int, d_ff: int, nominal: int):
    """The dot kernel the expert GEMMs may take (``dot_ukernels.usable`` for reductions
    of both ``d_model`` and ``d_ff``: AMX's tiles where K is whole steps of them and the
    outputs hold a tile, else the vector dot kernel), bfloat16 only, else None."""
    if dtype != "bfloat16":
        return None
    return dot_ukernels.usable(target, dtype, math.gcd(d_model, d_ff), nominal, min(d_model, d_ff))


def dot_kernel(cfg, dtype: str, d_model: int, d_ff: int, nominal: int):
    """The dot kernel the expert GEMMs of config ``cfg`` (its knobs defined for
    ``nominal`` rows) use (bfloat16 on a target with BF16 or AMX, reductions of whole
    groups, outputs at least a register tile wide), else None; its ``group`` is the
    ``pack_panels`` group of the weights."""
    isa = _kernel(cfg.target, dtype, d_model, d_ff, nominal)
    if isa is None:
        return None
    widths = (d_ff, d_ff, d_model)
    return isa if all(n >= panel_width(cfg, g) for g, n in zip(GEMMS, widths)) else None


def _weights(cfg, gemm: str, n: int, kdim: int, dtype: str, panels: bool):
    """A GEMM's weights as a placeholder and how ``(c, f)`` reads them: K-major
    ``[K, N]``, or (``panels``) one expert's ``pack_panels`` layout."""
    name = "W" + gemm[0]
    if not panels:
        w = pt.placeholder((kdim, n), dtype, name=name)
        return w, lambda c, f: w[c, f]
    nr = panel_width(cfg, gemm)
    w = pt.placeholder((-(-n // nr), kdim, nr), dtype, name=name)
    return w, lambda c, f: w[f // nr, c, f % nr]


def expert_ffn(cfg, tokens, d_model, d_ff, rows, nominal, dtype="float32", panels=False):
    """One expert's SwiGLU feed-forward over ``rows`` gathered rows (an int, or a
    ``pt.var`` bound at call time); knobs defined for ``nominal`` rows. With
    ``panels`` the weights come packed (``pack_panels`` with each GEMM's
    ``panel_width`` and ``dot_kernel``'s group): ``pack_b`` then copies each panel
    before the tiles that read it, rearranging nothing. bfloat16 runs on the dot
    kernels where ``dot_kernel`` allows."""
    if dtype not in DTYPES:
        raise ValueError(f"moe: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    isa = _kernel(cfg.target, dtype, d_model, d_ff, nominal)
    lanes = cfg.target.vector_lanes(dtype)
    size = numpy_dtype(dtype).itemsize
    gemms = (("gate_", d_ff, d_model), ("up_", d_ff, d_model), ("down_", d_model, d_ff))
    wide = dtype == "float32"  # as matmul's: 4 x 64 on AVX-512 (1.05x 8 x 32 at 128 rows)
    packs = (1,) if isa is not None else (0, 1)  # the dot kernels read packed B
    for prefix, n, kdim in gemms:
        a_bytes = nominal * kdim * size
        define_gemm_knobs(
            cfg, nominal, n, lanes, prefix=prefix, a_bytes=a_bytes, wide=wide, pack_options=packs,
            tile_default=dot_knobs.default_tile(isa, lanes, nominal, n, kdim, cfg.target),
            tiles=dot_knobs.tile_options(isa), blocks=dot_knobs.block_options(isa),
        )  # fmt: skip
    X = pt.placeholder((tokens, d_model), dtype, name="X")
    tok = pt.placeholder((rows,), "int32", name="tok")
    wt = pt.placeholder((rows,), dtype, name="wt")
    if (isa := dot_kernel(cfg, dtype, d_model, d_ff, nominal)) is not None:
        return _dot_ffn(cfg, isa, X, tok, wt, (rows, nominal, d_model, d_ff), dtype, panels)
    # else every product and sum in float (bfloat16 loads widen; stores round once)
    Wg, wg = _weights(cfg, "gate", d_ff, d_model, dtype, panels)
    Wu, wu = _weights(cfg, "up", d_ff, d_model, dtype, panels)
    Wd, wd = _weights(cfg, "down", d_model, d_ff, dtype, panels)
    Xg = pt.compute((rows, d_model), lambda s, c: X[tok[s], c], name="Xg")
    c1 = pt.reduce_axis((0, d_model), name="c1")
    c2 = pt.reduce_axis((0, d_model), name="c2")
    fd = pt.reduce_axis((0, d_ff), name="fd")
    G = pt.compute((rows, d_ff), lambda s, f: pt.sum(Xg[s, c1] * wg(c1, f), axis=c1), name="G")
    U = pt.compute((rows, d_ff), lambda s, f: pt.sum(Xg[s, c2] * wu(c2, f), axis=c2), name="U")
    one = pt.const(1.0, dtype)
    exp = pt.exp if dtype == "float64" else pt.fast_exp  # bfloat16 computes in float
    H = pt.compute((rows, d_ff), lambda s, f: G[s, f] / (one + exp(-G[s, f])) * U[s, f], name="H")
    Dn = pt.compute((rows, d_model), lambda s, c: pt.sum(H[s, fd] * wd(fd, c), axis=fd), name="Dn")
    Y = pt.compute((rows, d_model), lambda s, c: wt[s] * Dn[s, c], name="Y")
    s = pt.create_schedule(Y.op)
    gs, gc = Xg.op.axis
    s[Xg].parallel(gs)
    s[Xg].vectorize(gc)
    # with ``panels`` the knob ``pack_b`` copies each packed panel to a local buffer
    # before its tiles: a stream from memory at copy speed, where the tiles reading the
    # panel in place wait on memory (128 rows, 1 thread: 16.6 -> 14.5 ms per expert)
    GL = s.cache_write(G, "local")
    schedule_gemm(cfg, s, G, GL, nominal, Wg, prefix="gate_")
    # U's accumulator tile is copied out through the SwiGLU (U inlined into H)
    UL = s.cache_write(U, "local")
    s[U].compute_inline()
    schedule_gemm(cfg, s, H, UL, nominal, Wu, prefix="up_")
    DL = s.cache_write(Dn, "local")
    s[Dn].compute_inline()
    schedule_gemm(cfg, s, Y, DL, nominal, Wd, prefix="down_")
    return s, [X, tok, wt, Wg, Wu, Wd, Y]


def _dot_ffn(cfg, isa, X, tok, wt, sizes: tuple, dtype: str, panels: bool):
    """``expert_ffn`` on the dot kernels (bfloat16 pairs into float32 lanes, or AMX's
    tiles, which write G, U and Dn themselves): G, U and Dn are bfloat16 GEMM outputs
    (float32 accumulation, rounded once), H and Y element-wise stages computed in
    float32 and rounded::

        G = Xg Wg;  U = Xg Wu;  H = bf16(silu(G) * U);  Dn = H Wd;  Y = bf16(wt * Dn)
    """
    rows, nominal, d_model, d_ff = sizes
    g = isa.group
    f32 = lambda v: pt.cast("float32", v)  # noqa: E731
    Xg = pt.compute((rows, d_model), lambda s, c: X[tok[s], c], name="Xg")

    def gemm(prefix: str, A, n: int, k: int, name: str):
        nr, mr = cfg[prefix + "tile_j"].size[-1], cfg[prefix + "tile_i"].size[-1]
        wname = "W" + prefix[0]
        if panels:
            W = pt.placeholder((-(-n // nr), k // g, nr, g), dtype, name=wname)
            dg = dot_ukernels.dot_gemm(
                isa, A, None, (rows, n, k), mr, nr, lambda a, b: a * b, (name, wname), packed=W
            )
        else:
            W = pt.placeholder((k, n), dtype, name=wname)
            read = lambda kk, nn: W[kk, nn]  # noqa: E731
            dg = dot_ukernels.dot_gemm(isa, A, read, (rows, n, k), mr, nr, lambda a, b: a * b,
                                       (name, wname))  # fmt: skip
        return W, dg

    Wg, G = gemm("gate_", Xg, d_ff, d_model, "G")
    Wu, U = gemm("up_", Xg, d_ff, d_model, "U")

    def swiglu(s, f):
        gv = f32(G.C[s, f])
        return pt.cast(dtype, gv / (pt.const(1.0, "float32") + pt.fast_exp(-gv)) * f32(U.C[s, f]))

    H = pt.compute((rows, d_ff), swiglu, name="H")
    Wd, Dn = gemm("down_", H, d_model, d_ff, "Dn")
    Y = pt.compute(
        (rows, d_model), lambda s, c: pt.cast(dtype, f32(wt[s]) * f32(Dn.C[s, c])), name="Y"
    )
    s = pt.create_schedule(Y.op)
    for T in (Xg, H, Y):
        s[T].parallel(T.op.axis[0])
        s[T].vectorize(T.op.axis[1])
    for prefix, dg in (("gate_", G), ("up_", U), ("down_", Dn)):
        CL = dg.accumulator(s, into_output=True)  # AMX's kernel writes bfloat16 G, U, Dn
        # packed weights are still copied panel by panel, a stream from memory ahead
        # of the tiles that read each panel many times (as for float32 below)
        pack = (lambda dg=dg, CL=CL: s.cache_read(dg.BP, "local", [CL])) if panels else None
        schedule_gemm(
            cfg, s, dg.C, CL, nominal, prefix=prefix, pack=pack or (lambda dg=dg: dg.BP),
            tile_intrin=dg.tile_intrin(CL),
        )  # fmt: skip
    return s, [X, tok, wt, Wg, Wu, Wd, Y]


def combine(tokens, d_model, topk, dtype="float32", rows=None):
    """``out[t, c] = sum_j Y[pos[t, j], c]``: each token's rows summed (their routing
    weights are already in ``Y``, of ``rows`` rows, by default ``tokens * topk``);
    tokens in parallel, columns vectorized."""
    Y = pt.placeholder((rows or tokens * topk, d_model), dtype, name="Y")
    pos = pt.placeholder((tokens, topk), "int32", name="pos")
    j = pt.reduce_axis((0, topk), name="j")
    out = pt.compute((tokens, d_model), lambda t, c: pt.sum(Y[pos[t, j], c], axis=j), name="out")
    s = pt.create_schedule(out.op)
    t, c = out.op.axis
    s[out].parallel(t)
    s[out].reorder(t, j, c)
    s[out].vectorize(c)
    return s, [Y, pos, out]


def _expert_ref(x, tok, wt, wg, wu, wd):
    """float64 reference of one expert's rows."""
    xr = x.astype(np.float64)[tok]
    g = xr @ wg.astype(np.float64)
    h = g / (1.0 + np.exp(-g)) * (xr @ wu.astype(np.float64))
    return (wt[:, None] * (h @ wd.astype(np.float64))).astype(x.dtype)


# random inputs give |Y| ~ 1e4; bfloat16 rounds G, U, H and Dn on the way (2^-8 each)
@template("moe", reference=_expert_ref, atol_scale={"float32": 1e-5, "float64": 1e-5,
                                                     "bfloat16": 2e-2})  # fmt: skip
def moe(cfg, tokens, d_model, d_ff, experts, topk, dtype="float32"):
    """One expert of a top-k MoE layer on a balanced routing's rows:
    ``Y[s] = wt[s] * (silu(x[tok[s]] Wg) * (x[tok[s]] Wu)) Wd``."""
    if not 1 <= topk <= experts:
        raise ValueError(f"moe: topk must be 1 to experts ({experts}), got {topk}")
    rows = nominal_rows(tokens, topk, experts)
    cfg.add_flop(6.0 * rows * d_model * d_ff)
    return expert_ffn(cfg, tokens, d_model, d_ff, rows, rows, dtype)
