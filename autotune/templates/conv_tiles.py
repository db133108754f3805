"""Output-column tiles of a direct NCHW convolution, shared by ``conv2d_nchw`` (when
whole vectors of output channels do not divide K) and ``depthwise_conv2d_nchw``.

A tile of ``kb`` channels x ``hb`` rows x ``wb`` columns (columns are contiguous in
NCHW, so input rows are read as vectors when the stride is 1) is accumulated in a
local buffer while the whole reduction (input channels, kernel rows, kernel
columns, in the order ``reorder_red``) runs over it, in the spirit of TVM's x86
schedules: each input vector is reused for ``kb`` channels, each broadcast weight
for ``hb * wb`` outputs. For stride > 1 the padded input is split by column phase
(``x % stride``, ``x // stride``) so vectorized columns still read consecutive
inputs. The tile's rows and channels are unrolled; zero padding is a separate stage
computed once at the root (in parallel, vectorized) or inlined into the convolution
as a select; batch, channel blocks (and row blocks) are fused into the parallel loop.
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from . import precision
from .knobs import inner_tile


def out_size(x: int, k: int, stride: int, padding: int) -> int:
    """The output extent of a convolution; ``ValueError`` for a stride under 1, a
    negative padding, or a kernel larger than the padded input."""
    if stride < 1 or padding < 0:
        raise ValueError(f"convolution: stride must be at least 1 and padding at least 0, "
                         f"got stride={stride}, padding={padding}")  # fmt: skip
    if x + 2 * padding < k:
        raise ValueError(f"convolution: a {k}-wide kernel does not fit {x} + 2 x {padding}")
    return (x + 2 * padding - k) // stride + 1


def input_stage(cfg, data, N, C, H, W, stride, padding, dtype, phase_split=True):
    """The stage the convolution reads, and how it reads it.

    Returns ``(P, read)``: ``P`` the padded (and, for stride > 1 with
    ``phase_split``, column-phase-split) copy of ``data`` or None, and
    ``read(n, c, y, ox, rs)`` the input element of output column ``ox``, kernel
    column ``rs``, padded row ``y``. Phase split stores column ``x`` at
    ``[x % stride, x // stride]``, so for a fixed ``rs`` the vectorized output
    columns read consecutive elements even when the stride is not 1.
    """
    p, st = padding, stride
    zero = pt.const(0.0, dtype)
    split = phase_split and stride > 1 and cfg["phase_split"].val == 1
    if split:
        Wq = -(-(W + 2 * p) // st)

        def body(n, c, y, ph, xq):
            x = xq * st + ph
            return pt.select(
                (y >= p) & (y < H + p) & (x >= p) & (x < W + p), data[n, c, y - p, x - p], zero
            )

        P = pt.compute((N, C, H + 2 * p, st, Wq), body, name="pad")
        return P, lambda n, c, y, ox, rs: P[n, c, y, rs % st, ox + rs // st]
    if padding > 0:
        P = pt.compute(
            (N, C, H + 2 * p, W + 2 * p),
            lambda n, c, y, x: pt.select(
                (y >= p) & (y < H + p) & (x >= p) & (x < W + p), data[n, c, y - p, x - p], zero
            ),
            name="pad",
        )
        return P, lambda n, c, y, ox, rs: P[n, c, y, ox * st + rs]
    return None, lambda n, c, y, ox, rs: data[n, c, y, ox * st + rs]


def define_channel_tile_knobs(cfg, K: int, OH: int, OW: int, lanes: int, budget: int):
    """The ``vec_k`` tile knobs: ``vk_k`` output channels (whole vectors of ``lanes``
    dividing K), ``vk_w`` columns (at most 8) and ``vk_h`` rows (1 or 2) per tile. The
    default is two vectors of channels x 4 columns x as many rows as keep its
    accumulators within ``budget`` vector registers."""
    kbs = [m * lanes for m in (1, 2, 4) if K % (m * lanes) == 0]
    kb_d = 2 * lanes if 2 * lanes in kbs else kbs[0]
    inner_tile(cfg, "vk_k", K, kbs, kb_d)
    ws = [w for w in range(1, 9) if w <= OW]
    wb_d = 4 if OW >= 4 else ws[-1]
    inner_tile(cfg, "vk_w", OW, ws, wb_d)
    hb_d = max([h for h in (1, 2) if h * wb_d * (kb_d // lanes) <= budget and h <= OH] or [1])
    inner_tile(cfg, "vk_h", OH, [1, 2], hb_d)


def schedule_channel_tiles(cfg, s, out, acc, red_order, copy=None) -> list:
    """The ``vec_k`` tile loops of a convolution ``out[n, k, y, x]`` computed from its
    accumulator ``acc[n, y, x, k]``: k, y, x split into ``vk_k`` x ``vk_h`` x ``vk_w``
    tiles, batch and channel tiles (and row tiles, ``par``) fused into the parallel loop,
    ``acc`` computed at the tile with the reduction outermost in the order
    ``red_order()`` gives (called once ``acc`` is attached), the tile's rows and columns
    unrolled and its channels vectorized; the tile copied back by the intrinsic ``copy``
    (``ukernels.tile_transpose``) when there is one. Returns that reduction order."""
    n, k, y, x = out.op.axis
    ko, ki = cfg["vk_k"].apply(s, out, k)
    yo, yi = cfg["vk_h"].apply(s, out, y)
    xo, xi = cfg["vk_w"].apply(s, out, x)
    s[out].reorder(n, ko, yo, xo, ki, yi, xi)
    rows = cfg["par"].val == "with_rows"
    s[out].parallel(s[out].fuse(n, ko, yo) if rows else s[out].fuse(n, ko))
    s[acc].compute_at(s[out], xo)
    an, ay, ax, ak = acc.op.axis
    order = red_order()
    s[acc].reorder(an, *order, ay, ax, ak)
    s[acc].unroll(ay)
    s[acc].unroll(ax)
    s[acc].vectorize(ak)
    if copy is not None:
        s[out].tensorize(ki, copy)
    return order


def schedule_pad(cfg, s, P, force_root: bool = False):
    if P is None:
        return
    if cfg["pad"].val == "inline" and not force_root:
        s[P].compute_inline()
        return
    axes = P.op.axis
    nc = s[P].fuse(axes[0], axes[1])
    s[P].parallel(nc)
    s[P].vectorize(axes[-1])


def define_tile_knobs(cfg, OH, OW, lanes, stride, padding, red_axes, channels: int = 1):
    """Tile knobs: ``tile_oh`` rows x ``tile_ow`` columns (x ``channels`` output channels,
    the caller's default channel tile). The default tile is two vectors of columns and as
    many rows as keep its accumulators within half the target's vector registers (the
    rest hold the input vectors and broadcast weights): 4 rows for a depthwise tile on
    16 or 32 registers, 1 row when a tile of 8 channels already fills that half."""
    wbs = [max(1, lanes // 2), lanes, 2 * lanes, 3 * lanes]
    wb_d = 2 * lanes if OW >= 2 * lanes else lanes
    budget = cfg.target.vector_registers // 2
    vecs = channels * -(-wb_d // lanes)
    hb_d = max([h for h in (1, 2, 4) if h * vecs <= budget and h <= OH] or [1])
    inner_tile(cfg, "tile_oh", OH, [1, 2, 4], hb_d)
    inner_tile(cfg, "tile_ow", OW, wbs, wb_d)
    cfg.define_knob("unroll_red", [0, 1], default=1)
    if stride > 1:
        cfg.define_knob("phase_split", [0, 1], default=1)
    define_red_pad_knobs(cfg, red_axes, stride, padding)


def define_red_pad_knobs(cfg, red_axes, stride: int, padding: int):
    """The knobs both conv schedules share: the reduction order, and (when there is a
    padded or phase-split input) that input computed once at the root or inlined."""
    cfg.define_reorder("reorder_red", red_axes, policy="all", default=list(range(len(red_axes))))
    if padding > 0 or stride > 1:
        cfg.define_knob("pad", ["root", "inline"], default="root")


def schedule_tile(cfg, s, Out, OL, outer_spatial, kb_loops):
    """Tile ``Out``'s (oh, ow) axes; ``outer_spatial`` are the loops before them
    (batch, channel block), ``kb_loops`` the tile's channel loop (or none); the
    accumulator ``OL`` is computed per tile."""
    oh, ow = Out.op.axis[2], Out.op.axis[3]
    oho, ohi = cfg["tile_oh"].apply(s, Out, oh)
    owo, owi = cfg["tile_ow"].apply(s, Out, ow)
    s[Out].reorder(*outer_spatial, oho, owo, *kb_loops, ohi, owi)
    par = cfg["par"].val
    fused = s[Out].fuse(*outer_spatial, oho) if par == "with_rows" else s[Out].fuse(*outer_spatial)
    s[Out].parallel(fused)
    s[Out].vectorize(owi)
    for lp in kb_loops:
        s[Out].unroll(lp)
    s[Out].unroll(ohi)
    s[OL].compute_at(s[Out], owo)
    # the accumulator: the reduction outside, the tile inside
    axes = s[OL].op.axis
    red = list(s[OL].op.reduce_axis)
    order = cfg["reorder_red"].apply(s, OL, red)
    tile = [axes[1], axes[2], axes[3]]  # (channel, row, col) of the tile
    s[OL].reorder(*order, *tile)
    # unrolling a long reduction (all input channels) around an unrolled tile makes
    # kilobytes of C that take minutes to compile for no gain: only short ones
    if cfg["unroll_red"].val and int(order[-1].extent.value) <= 8:
        s[OL].unroll(order[-1])
    s[OL].unroll(tile[0])
    s[OL].unroll(tile[1])
    s[OL].vectorize(tile[2])


def conv_ref(data, weight, stride=1, padding=0, groups=1):
    d = np.pad(precision.widened(data), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    w = precision.widened(weight)
    N, C, H, W = d.shape
    K, Cg, R, S = w.shape
    OH = (H - R) // stride + 1
    OW = (W - S) // stride + 1
    out = np.zeros((N, K, OH, OW), d.dtype)
    for r in range(R):
        for q in range(S):
            patch = d[:, :, r::stride, q::stride][:, :, :OH, :OW]
            if groups == 1:
                out += np.einsum("nchw,kc->nkhw", patch, w[:, :, r, q])
            else:  # depthwise: one input channel per output channel
                out += patch * w[:, 0, r, q][None, :, None, None]
    return precision.reference(out, data.dtype)
