"""``conv2d_nchw``: a direct 2-D convolution in NCHW.

Two ways to fill the vector lanes, both accumulating a register tile in a local
buffer while the whole reduction (input channels, kernel rows, kernel columns, in
the order ``reorder_red``) runs over it:

- **output channels** (when whole vectors of channels divide K; ``_conv_vec_k``):
  the GEMM micro-kernel -- a tile of ``wb`` columns x ``hb`` rows x ``kb``
  channels, per reduction step ``kb / lanes`` vector loads of weights packed
  channels-innermost and ``hb * wb`` broadcast input pixels; the output tile is
  copied back to NCHW (transposed in registers, ``ukernels.tile_transpose``). Any
  stride reads the same way. Where the target has one, a hand-written micro-kernel
  (``ukernels``) computes whole tiles.
- **output columns** (otherwise): the tile schedule of ``conv_tiles``, with the
  weights packed per tile of ``kb`` output channels.

int8 and bfloat16 on a target with a dot-product instruction for them take
``conv_dot`` instead, and on AMX's tiles ``conv_amx``.
"""

from __future__ import annotations

import pypto as pt

from ..task import template
from . import conv_amx, conv_dot, precision, ukernels
from .conv_tiles import (
    conv_ref,
    define_channel_tile_knobs,
    define_red_pad_knobs,
    define_tile_knobs,
    input_stage,
    out_size,
    schedule_channel_tiles,
    schedule_pad,
    schedule_tile,
)
from .knobs import inner_tile


def conv2d_reference(data, weight, *, stride=1, padding=0):
    """NCHW convolution in float64 (weights K x C x R x S)."""
    return conv_ref(data, weight, stride, padding)


@template("conv2d_nchw", reference=conv2d_reference)
def conv2d_nchw(cfg, N, C, H, W, K, R, S, stride=1, padding=0, dtype="float32"):
    """out[n, k, y, x] = sum_{c,r,s} padded[n, c, y*stride + r, x*stride + s] * weight[k, c, r, s].

    ``data`` is N x C x H x W, ``weight`` K x C x R x S, zero padding ``padding`` on
    each side; the output is N x K x OH x OW. When whole vectors of output channels
    divide K, they are vectorized (``_conv_vec_k``); otherwise output columns are
    (the schedule of the module docstring). ``dtype`` as ``matmul``'s: int8 and uint8
    inputs give an exact int32 output.
    """
    p = precision.precision(dtype, "conv2d_nchw")
    OH, OW = out_size(H, R, stride, padding), out_size(W, S, stride, padding)
    lanes = cfg.target.vector_lanes(p.out)
    data = pt.placeholder((N, C, H, W), dtype, name="data")
    weight = pt.placeholder((K, C, R, S), dtype, name="weight")
    rc = pt.reduce_axis((0, C), name="rc")
    rr = pt.reduce_axis((0, R), name="rr")
    rs = pt.reduce_axis((0, S), name="rs")
    cfg.add_flop(2.0 * N * K * OH * OW * C * R * S)
    if conv_amx.usable(cfg.target, dtype, C, K):  # int8 and bfloat16 on AMX's tiles
        conv_amx.define_knobs(cfg, K, OW)
        return conv_amx.conv(cfg, data, weight, (N, C, H, W, K, R, S), stride, padding)
    cfg.define_knob("par", ["batch_channels", "with_rows"], default="with_rows")
    isa = conv_dot.usable(cfg.target, dtype, C, K)
    if isa is not None:  # int8, bfloat16 on the target's dot-product instruction
        conv_dot.define_knobs(cfg, isa, K, OH, OW)
        return conv_dot.conv(cfg, isa, data, weight, (N, C, H, W, K, R, S), stride, padding)
    if K % lanes == 0:  # whole vectors of output channels
        _define_vec_k_knobs(cfg, K, OH, OW, lanes, stride, padding, [rc, rr, rs], p)
        # pixels are broadcast one at a time: no column phases to split for a stride;
        # a 16-bit float is widened once, where the input is padded (``_conv_vec_k``)
        wide = precision.widen(data)
        P, read = input_stage(cfg, wide, N, C, H, W, stride, padding, wide.dtype, False)
        shape = (N, K, OH, OW)
        return _conv_vec_k(cfg, data, weight, P, read, (rc, rr, rs), shape, stride, p, wide)
    inner_tile(cfg, "tile_k", K, [1, 2, 4, 8], 8 if K >= 8 else 4 if K >= 4 else 2 if K >= 2 else 1)
    define_tile_knobs(cfg, OH, OW, lanes, stride, padding, [rc, rr, rs], cfg["tile_k"].size[-1])
    # weights packed per tile of kb output channels, those innermost: the kb weights a
    # reduction step broadcasts share one cache line instead of touching kb lines
    cfg.define_knob("pack_w", [0, 1], default=1)
    P, read = input_stage(cfg, data, N, C, H, W, stride, padding, dtype)
    kb = cfg["tile_k"].size[-1]
    WP = _packed_weights(weight, kb) if cfg["pack_w"].val else None

    def w(k, c, r, q):
        return weight[k, c, r, q] if WP is None else WP[k // kb, c, r, q, k % kb]

    out = pt.compute(
        (N, K, OH, OW),
        lambda n, k, y, x: pt.sum(
            precision.product(p, read(n, rc, y * stride + rr, x, rs), w(k, rc, rr, rs)),
            axis=[rc, rr, rs],
        ),
        name="conv",
    )
    s = pt.create_schedule(out.op)
    OL = s.cache_write(out, "local")
    schedule_pad(cfg, s, P)
    _schedule_packed(s, WP)
    n, k = out.op.axis[0], out.op.axis[1]
    ko, ki = cfg["tile_k"].apply(s, out, k)
    schedule_tile(cfg, s, out, OL, [n, ko], [ki])
    return s, [data, weight, out]


def _packed_weights(weight, kb: int, widen: bool = False):
    """``WP[ko, c, r, s, ki] = weight[ko * kb + ki, c, r, s]`` (the last tile repeats
    channel K - 1 when kb does not divide K; those lanes are never stored); ``widen``:
    in float32."""
    K, C, R, S = (int(d.value) for d in weight.shape)

    def value(ko, c, r, q, ki):
        v = weight[pt.min(ko * kb + ki, K - 1), c, r, q]
        return pt.cast("float32", v) if widen else v

    return pt.compute((-(-K // kb), C, R, S, kb), value, name="weight_packed")


def _schedule_packed(s, WP):
    if WP is not None:  # once per call, at the root
        s[WP].parallel(s[WP].fuse(*WP.op.axis[:2]))
        s[WP].vectorize(WP.op.axis[-1])


def _define_vec_k_knobs(cfg, K, OH, OW, lanes, stride, padding, red_axes, p):
    """Knobs of the ``vec_k`` schedule: ``vk_k`` output channels per tile (whole
    vectors dividing K), ``vk_w`` / ``vk_h`` output columns / rows per tile (at most
    8 x 2: the accumulators must fit the vector registers), the reduction order,
    the padded input at the root or inlined (``lanes``: of the computed dtype, float64's
    half of float32's), and (where the target has one) the
    hand-written micro-kernel for whole tiles, on by default: at the default tile it
    measured 1.1-1.5x gcc's code for the plain schedule with one AVX-512 thread.

    The default tile holds half the target's vector registers in accumulators
    (two vectors of channels x 4 columns x ``vk_h`` rows: 8 on AVX2's 16 registers,
    16 on AVX-512's 32), leaving the rest for weights and broadcast pixels.
    """
    define_channel_tile_knobs(cfg, K, OH, OW, lanes, cfg.target.vector_registers // 2)
    define_red_pad_knobs(cfg, red_axes, stride, padding)
    # (a 16-bit float takes it in float32, from the padded copy widened once)
    f32 = p.name == "float32" or (p.name in precision.STORAGE_FLOATS and padding > 0)
    if ukernels.simd_isa(cfg.target) is not None and f32:
        cfg.define_knob("ukernel", [0, 1], default=1)


def _conv_vec_k(cfg, data, weight, P, read, red, shape, stride, p, wide_data):
    """Output channels vectorized: the GEMM micro-kernel on a convolution.

    The accumulator ``acc[n, y, x, k]`` (channels innermost) is computed per tile of
    ``hb`` rows x ``wb`` columns x ``kb`` channels inside the output's tile loop; per
    reduction step (c, r, s) that is ``kb / lanes`` vector loads of the packed
    weights ``WP[ko, c, r, s, 0:kb]`` and ``hb * wb`` broadcast input pixels. The
    output copies the tile back to NCHW (a 16-bit float: ``read`` gives the input
    widened to float32, ``WP`` is float32 and the copy rounds once, so the tile, the
    micro-kernel too where the input is padded, is float32's):

        parallel for n, ko (, yo):  for yo: for xo:
          acc[hb][wb][kb] = 0
          for c, r, s (reorder_red): for y in hb: for x in wb: for k in kb (vector):
            acc[y][x][k] += pad[n, c, y*st + r, x*st + s] * WP[ko, c, r, s, k]
          out[n, ko*kb + k, yo*hb + y, xo*wb + x] = acc[y][x][k]
    """
    rc, rr, rs = red
    N, K, OH, OW = shape
    kb = cfg["vk_k"].size[-1]
    WP = _packed_weights(weight, kb, widen=p.name in precision.STORAGE_FLOATS)
    acc = pt.compute(
        (N, OH, OW, K),
        lambda n, y, x, k: pt.sum(
            precision.product(
                p, read(n, rc, y * stride + rr, x, rs), WP[k // kb, rc, rr, rs, k % kb]
            ),
            axis=[rc, rr, rs],
        ),
        name="acc",
    )
    out = pt.compute(
        (N, K, OH, OW), lambda n, k, y, x: precision.rounded(acc[n, y, x, k], p.out), name="conv"
    )
    s = pt.create_schedule(out.op)
    # the input's cast stage (``wide_data``, a 16-bit float's): inside the pad's copy
    precision.inline_widened(s, [wide_data])
    tile = _conv_tile(cfg, weight, stride, p, P is not None)
    schedule_pad(cfg, s, P, force_root=tile is not None)
    _schedule_packed(s, WP)
    order = schedule_channel_tiles(
        cfg,
        s,
        out,
        acc,
        lambda: cfg["reorder_red"].apply(s, acc, list(s[acc].op.reduce_axis)),
        _copy_tile(cfg, p),
    )
    if tile is not None:  # whole tiles by the micro-kernel, the last partial ones as above
        s[acc].tensorize(order[0], tile)
    return s, [data, weight, out]


def _copy_tile(cfg, p):
    """The intrinsic copying a float32 tile back to NCHW in registers, four columns at
    a time, where the target has the vector ISA (else None: gcc copies it one element
    at a time, up to a tenth of a float32 convolution's time)."""
    isa = ukernels.simd_isa(cfg.target)
    if isa is None or p.name != "float32":
        return None
    hb, wb, kb = cfg["vk_h"].size[-1], cfg["vk_w"].size[-1], cfg["vk_k"].size[-1]
    return ukernels.tile_transpose(isa, hb, wb, kb)


def _conv_tile(cfg, weight, stride: int, p, padded: bool = True):
    """The micro-kernel intrinsic of the ``vec_k`` tile when the ``ukernel`` knob asks for
    it (it reads the padded input, so ``pad`` is then computed at the root), else None.
    A 16-bit float takes it where the input is padded (``padded``): in float32."""
    isa = ukernels.simd_isa(cfg.target)
    f32 = p.name == "float32" or (p.name in precision.STORAGE_FLOATS and padded)
    if isa is None or not f32 or not cfg["ukernel"].val:
        return None
    _, C, R, S = (int(d.value) for d in weight.shape)
    hb, wb, kb = cfg["vk_h"].size[-1], cfg["vk_w"].size[-1], cfg["vk_k"].size[-1]
    return ukernels.conv_tile(isa, C, R, S, hb, wb, kb, stride)
