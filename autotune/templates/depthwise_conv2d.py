"""``depthwise_conv2d_nchw``: one input channel per output channel, in NCHW, with the
output-column tile schedule of ``conv_tiles``."""

from __future__ import annotations

import pypto as pt

from ..task import template
from . import precision
from .conv_tiles import (
    conv_ref,
    define_tile_knobs,
    input_stage,
    out_size,
    schedule_pad,
    schedule_tile,
)


def depthwise_conv2d_reference(data, weight, *, stride=1, padding=0):
    """Depthwise NCHW convolution in float64 (weights C x 1 x R x S)."""
    return conv_ref(data, weight, stride, padding, groups=0)


@template("depthwise_conv2d_nchw", reference=depthwise_conv2d_reference)
def depthwise_conv2d_nchw(cfg, N, C, H, W, R, S, stride=1, padding=0, dtype="float32"):
    """out[n, c, y, x] = sum_{r, s} padded[n, c, y*stride + r, x*stride + s] * weight[c, 0, r, s].

    ``data`` is N x C x H x W, ``weight`` C x 1 x R x S; the output is N x C x OH x OW,
    of ``dtype`` as ``precision`` says (int8 and uint8: int32, exact).
    """
    p = precision.precision(dtype, "depthwise_conv2d_nchw")
    OH, OW = out_size(H, R, stride, padding), out_size(W, S, stride, padding)
    lanes = cfg.target.vector_lanes(p.out if p.widen else dtype)  # the accumulator's
    data = pt.placeholder((N, C, H, W), dtype, name="data")
    weight = pt.placeholder((C, 1, R, S), dtype, name="weight")
    rr = pt.reduce_axis((0, R), name="rr")
    rs = pt.reduce_axis((0, S), name="rs")
    cfg.add_flop(2.0 * N * C * OH * OW * R * S)
    define_tile_knobs(cfg, OH, OW, lanes, stride, padding, [rr, rs])
    P, read = input_stage(cfg, data, N, C, H, W, stride, padding, dtype)
    out = pt.compute(
        (N, C, OH, OW),
        lambda n, c, y, x: pt.sum(
            precision.product(p, read(n, c, y * stride + rr, x, rs), weight[c, 0, rr, rs]),
            axis=[rr, rs],
        ),
        name="dwconv",
    )
    cfg.define_knob("par", ["batch_channels", "with_rows"], default="batch_channels")
    s = pt.create_schedule(out.op)
    OL = s.cache_write(out, "local")
    schedule_pad(cfg, s, P)
    n, c = out.op.axis[0], out.op.axis[1]
    schedule_tile(cfg, s, out, OL, [n, c], [])
    return s, [data, weight, out]
