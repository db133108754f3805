"""2-D convolutions in NCHW: ``conv2d_nchw`` and ``depthwise_conv2d_nchw``.

Direct convolutions with a register tile accumulated in a local buffer
while the whole reduction (input channels, kernel rows, kernel columns, in
the order ``reorder_red``) runs over it, in the spirit of TVM's x86
schedules. Two ways to fill the vector lanes:

- **output channels** (conv2d, when whole vectors of channels divide K; see
  ``_conv_vec_k``): the GEMM micro-kernel -- a tile of ``wb`` columns x
  ``hb`` rows x ``kb`` channels, per reduction step ``kb / lanes`` vector
  loads of weights packed channels-innermost and ``hb * wb`` broadcast
  input pixels; the output tile is copied back to NCHW. Any stride reads
  the same way.
- **output columns** (depthwise, and conv2d otherwise; contiguous in NCHW,
  so input rows are read as vectors when the stride is 1): a tile of
  ``kb`` channels x ``hb`` rows x ``wb`` columns, each input vector reused
  for ``kb`` channels, each broadcast weight (packed so the ``kb`` of a
  step share a cache line) for ``hb * wb`` outputs. For stride > 1 the
  padded input is split by column phase (``x % stride``, ``x // stride``)
  so vectorized columns still read consecutive inputs.

In both, the tile's rows and columns (or channels) are unrolled; zero
padding is a separate stage computed once at the root (in parallel,
vectorized) or inlined into the convolution as a select; batch, channel
blocks (and row blocks) are fused into the parallel loop.
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from ..task import template
from . import ukernels


def _out_size(x: int, k: int, stride: int, padding: int) -> int:
    return (x + 2 * padding - k) // stride + 1


def _input_stage(cfg, data, N, C, H, W, stride, padding, dtype, phase_split=True):
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


def _schedule_pad(cfg, s, P, force_root: bool = False):
    if P is None:
        return
    if cfg["pad"].val == "inline" and not force_root:
        s[P].compute_inline()
        return
    axes = P.op.axis
    nc = s[P].fuse(axes[0], axes[1])
    s[P].parallel(nc)
    s[P].vectorize(axes[-1])


def _inner_tile(cfg, name: str, extent, sizes, default):
    """A two-way split knob ``name`` of ``extent`` whose inner part is one of ``sizes``."""
    cfg.define_split(
        name,
        extent,
        num_outputs=2,
        policy="candidate",
        candidate=[[-1, n] for n in sizes],
        default=[-1, default],
    )


def _define_tile_knobs(cfg, OH, OW, lanes, stride, padding, red_axes):
    _inner_tile(cfg, "tile_oh", OH, [1, 2, 4], 1)
    wbs = [max(1, lanes // 2), lanes, 2 * lanes, 3 * lanes]
    wb_d = 2 * lanes if OW >= 2 * lanes else lanes
    _inner_tile(cfg, "tile_ow", OW, wbs, wb_d)
    cfg.define_knob("unroll_red", [0, 1], default=1)
    if stride > 1:
        cfg.define_knob("phase_split", [0, 1], default=1)
    _define_red_pad_knobs(cfg, red_axes, stride, padding)


def _define_red_pad_knobs(cfg, red_axes, stride: int, padding: int):
    """The knobs both conv schedules share: the reduction order, and (when there is a
    padded or phase-split input) that input computed once at the root or inlined."""
    cfg.define_reorder("reorder_red", red_axes, policy="all", default=list(range(len(red_axes))))
    if padding > 0 or stride > 1:
        cfg.define_knob("pad", ["root", "inline"], default="root")


def _schedule_tile(cfg, s, Out, OL, outer_spatial, kb_loops):
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


# ----------------------------------------------------------------- conv2d


def _conv_ref(data, weight, stride=1, padding=0, groups=1):
    d = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    w = weight.astype(np.float64)
    N, C, H, W = d.shape
    K, Cg, R, S = w.shape
    OH = (H - R) // stride + 1
    OW = (W - S) // stride + 1
    out = np.zeros((N, K, OH, OW))
    for r in range(R):
        for q in range(S):
            patch = d[:, :, r::stride, q::stride][:, :, :OH, :OW]
            if groups == 1:
                out += np.einsum("nchw,kc->nkhw", patch, w[:, :, r, q])
            else:  # depthwise: one input channel per output channel
                out += patch * w[:, 0, r, q][None, :, None, None]
    return out.astype(data.dtype)


def conv2d_reference(data, weight, *, stride=1, padding=0):
    """NCHW convolution in float64 (weights K x C x R x S)."""
    return _conv_ref(data, weight, stride, padding)


def depthwise_conv2d_reference(data, weight, *, stride=1, padding=0):
    """Depthwise NCHW convolution in float64 (weights C x 1 x R x S)."""
    return _conv_ref(data, weight, stride, padding, groups=0)


@template("conv2d_nchw", reference=conv2d_reference)
def conv2d_nchw(cfg, N, C, H, W, K, R, S, stride=1, padding=0, dtype="float32"):
    """out[n, k, y, x] = sum_{c,r,s} padded[n, c, y*stride + r, x*stride + s] * weight[k, c, r, s].

    ``data`` is N x C x H x W, ``weight`` K x C x R x S, zero padding ``padding`` on
    each side; the output is N x K x OH x OW. When whole vectors of output channels
    divide K, they are vectorized (``_conv_vec_k``); otherwise output columns are
    (the schedule of the module docstring).
    """
    OH, OW = _out_size(H, R, stride, padding), _out_size(W, S, stride, padding)
    lanes = cfg.target.vector_lanes(dtype)
    data = pt.placeholder((N, C, H, W), dtype, name="data")
    weight = pt.placeholder((K, C, R, S), dtype, name="weight")
    rc = pt.reduce_axis((0, C), name="rc")
    rr = pt.reduce_axis((0, R), name="rr")
    rs = pt.reduce_axis((0, S), name="rs")
    cfg.add_flop(2.0 * N * K * OH * OW * C * R * S)
    cfg.define_knob("par", ["batch_channels", "with_rows"], default="with_rows")
    if K % lanes == 0:  # whole vectors of output channels
        _define_vec_k_knobs(cfg, K, OH, OW, stride, padding, [rc, rr, rs])
        # pixels are broadcast one at a time: no column phases to split for a stride
        P, read = _input_stage(cfg, data, N, C, H, W, stride, padding, dtype, False)
        return _conv_vec_k(cfg, data, weight, P, read, (rc, rr, rs), (N, K, OH, OW), stride)
    _inner_tile(
        cfg, "tile_k", K, [1, 2, 4, 8], 8 if K >= 8 else 4 if K >= 4 else 2 if K >= 2 else 1
    )
    _define_tile_knobs(cfg, OH, OW, lanes, stride, padding, [rc, rr, rs])
    # weights packed per tile of kb output channels, those innermost: the kb weights a
    # reduction step broadcasts share one cache line instead of touching kb lines
    cfg.define_knob("pack_w", [0, 1], default=1)
    P, read = _input_stage(cfg, data, N, C, H, W, stride, padding, dtype)
    kb = cfg["tile_k"].size[-1]
    WP = _packed_weights(weight, kb) if cfg["pack_w"].val else None

    def w(k, c, r, q):
        return weight[k, c, r, q] if WP is None else WP[k // kb, c, r, q, k % kb]

    out = pt.compute(
        (N, K, OH, OW),
        lambda n, k, y, x: pt.sum(
            read(n, rc, y * stride + rr, x, rs) * w(k, rc, rr, rs), axis=[rc, rr, rs]
        ),
        name="conv",
    )
    s = pt.create_schedule(out.op)
    OL = s.cache_write(out, "local")
    _schedule_pad(cfg, s, P)
    _schedule_packed(s, WP)
    n, k = out.op.axis[0], out.op.axis[1]
    ko, ki = cfg["tile_k"].apply(s, out, k)
    _schedule_tile(cfg, s, out, OL, [n, ko], [ki])
    return s, [data, weight, out]


def _packed_weights(weight, kb: int):
    """``WP[ko, c, r, s, ki] = weight[ko * kb + ki, c, r, s]`` (the last tile repeats
    channel K - 1 when kb does not divide K; those lanes are never stored)."""
    K, C, R, S = (int(d.value) for d in weight.shape)
    return pt.compute(
        (-(-K // kb), C, R, S, kb),
        lambda ko, c, r, q, ki: weight[pt.min(ko * kb + ki, K - 1), c, r, q],
        name="weight_packed",
    )


def _schedule_packed(s, WP):
    if WP is not None:  # once per call, at the root
        s[WP].parallel(s[WP].fuse(*WP.op.axis[:2]))
        s[WP].vectorize(WP.op.axis[-1])


def _define_vec_k_knobs(cfg, K, OH, OW, stride, padding, red_axes):
    """Knobs of the ``vec_k`` schedule: ``vk_k`` output channels per tile (whole
    vectors dividing K), ``vk_w`` / ``vk_h`` output columns / rows per tile (at most
    8 x 2: the accumulators must fit the vector registers), the reduction order,
    the padded input at the root or inlined, and (where the target has one) the
    hand-written micro-kernel for whole tiles, on by default: at the default tile it
    measured 1.1-1.5x gcc's code for the plain schedule with one AVX-512 thread.

    The default tile holds half the target's vector registers in accumulators
    (two vectors of channels x 4 columns x ``vk_h`` rows: 8 on AVX2's 16 registers,
    16 on AVX-512's 32), leaving the rest for weights and broadcast pixels.
    """
    lanes = cfg.target.vector_lanes("float32")
    kbs = [m * lanes for m in (1, 2, 4) if K % (m * lanes) == 0]
    kb_d = 2 * lanes if 2 * lanes in kbs else kbs[0]
    _inner_tile(cfg, "vk_k", K, kbs, kb_d)
    ws = [w for w in range(1, 9) if w <= OW]
    wb_d = 4 if OW >= 4 else ws[-1]
    _inner_tile(cfg, "vk_w", OW, ws, wb_d)
    hbs = [1, 2]
    acc_budget = cfg.target.vector_registers // 2
    hb_d = max([h for h in hbs if h * wb_d * (kb_d // lanes) <= acc_budget and h <= OH] or [1])
    _inner_tile(cfg, "vk_h", OH, hbs, hb_d)
    _define_red_pad_knobs(cfg, red_axes, stride, padding)
    if ukernels.simd_isa(cfg.target) is not None:
        cfg.define_knob("ukernel", [0, 1], default=1)


def _conv_vec_k(cfg, data, weight, P, read, red, shape, stride):
    """Output channels vectorized: the GEMM micro-kernel on a convolution.

    The accumulator ``acc[n, y, x, k]`` (channels innermost) is computed per tile of
    ``hb`` rows x ``wb`` columns x ``kb`` channels inside the output's tile loop; per
    reduction step (c, r, s) that is ``kb / lanes`` vector loads of the packed
    weights ``WP[ko, c, r, s, 0:kb]`` and ``hb * wb`` broadcast input pixels. The
    output copies the tile back to NCHW:

        parallel for n, ko (, yo):  for yo: for xo:
          acc[hb][wb][kb] = 0
          for c, r, s (reorder_red): for y in hb: for x in wb: for k in kb (vector):
            acc[y][x][k] += pad[n, c, y*st + r, x*st + s] * WP[ko, c, r, s, k]
          out[n, ko*kb + k, yo*hb + y, xo*wb + x] = acc[y][x][k]
    """
    rc, rr, rs = red
    N, K, OH, OW = shape
    kb = cfg["vk_k"].size[-1]
    WP = _packed_weights(weight, kb)
    acc = pt.compute(
        (N, OH, OW, K),
        lambda n, y, x, k: pt.sum(
            read(n, rc, y * stride + rr, x, rs) * WP[k // kb, rc, rr, rs, k % kb],
            axis=[rc, rr, rs],
        ),
        name="acc",
    )
    out = pt.compute((N, K, OH, OW), lambda n, k, y, x: acc[n, y, x, k], name="conv")
    s = pt.create_schedule(out.op)
    tile = _conv_tile(cfg, weight, stride)
    _schedule_pad(cfg, s, P, force_root=tile is not None)
    _schedule_packed(s, WP)
    n, k, y, x = out.op.axis
    ko, ki = cfg["vk_k"].apply(s, out, k)
    yo, yi = cfg["vk_h"].apply(s, out, y)
    xo, xi = cfg["vk_w"].apply(s, out, x)
    s[out].reorder(n, ko, yo, xo, ki, yi, xi)
    rows = cfg["par"].val == "with_rows"
    s[out].parallel(s[out].fuse(n, ko, yo) if rows else s[out].fuse(n, ko))
    s[acc].compute_at(s[out], xo)
    an, ay, ax, ak = acc.op.axis
    order = cfg["reorder_red"].apply(s, acc, list(s[acc].op.reduce_axis))
    s[acc].reorder(an, *order, ay, ax, ak)
    s[acc].unroll(ay)
    s[acc].unroll(ax)
    s[acc].vectorize(ak)
    if tile is not None:  # whole tiles by the micro-kernel, the last partial ones as above
        s[acc].tensorize(order[0], tile)
    return s, [data, weight, out]


def _conv_tile(cfg, weight, stride: int):
    """The micro-kernel intrinsic of the ``vec_k`` tile when the ``ukernel`` knob asks for
    it (it reads the padded input, so ``pad`` is then computed at the root), else None."""
    isa = ukernels.simd_isa(cfg.target)
    if isa is None or not cfg["ukernel"].val:
        return None
    _, C, R, S = (int(d.value) for d in weight.shape)
    hb, wb, kb = cfg["vk_h"].size[-1], cfg["vk_w"].size[-1], cfg["vk_k"].size[-1]
    return ukernels.conv_tile(isa, C, R, S, hb, wb, kb, stride)


@template("depthwise_conv2d_nchw", reference=depthwise_conv2d_reference)
def depthwise_conv2d_nchw(cfg, N, C, H, W, R, S, stride=1, padding=0, dtype="float32"):
    """out[n, c, y, x] = sum_{r, s} padded[n, c, y*stride + r, x*stride + s] * weight[c, 0, r, s].

    ``data`` is N x C x H x W, ``weight`` C x 1 x R x S; the output is N x C x OH x OW.
    """
    OH, OW = _out_size(H, R, stride, padding), _out_size(W, S, stride, padding)
    lanes = cfg.target.vector_lanes(dtype)
    data = pt.placeholder((N, C, H, W), dtype, name="data")
    weight = pt.placeholder((C, 1, R, S), dtype, name="weight")
    rr = pt.reduce_axis((0, R), name="rr")
    rs = pt.reduce_axis((0, S), name="rs")
    cfg.add_flop(2.0 * N * C * OH * OW * R * S)
    _define_tile_knobs(cfg, OH, OW, lanes, stride, padding, [rr, rs])
    P, read = _input_stage(cfg, data, N, C, H, W, stride, padding, dtype)
    out = pt.compute(
        (N, C, OH, OW),
        lambda n, c, y, x: pt.sum(
            read(n, c, y * stride + rr, x, rs) * weight[c, 0, rr, rs], axis=[rr, rs]
        ),
        name="dwconv",
    )
    cfg.define_knob("par", ["batch_channels", "with_rows"], default="batch_channels")
    s = pt.create_schedule(out.op)
    OL = s.cache_write(out, "local")
    _schedule_pad(cfg, s, P)
    n, c = out.op.axis[0], out.op.axis[1]
    _schedule_tile(cfg, s, out, OL, [n, c], [])
    return s, [data, weight, out]
