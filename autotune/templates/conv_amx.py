"""int8 ``conv2d_nchw`` on AMX's tiles (``x86-amx``): ``tdpbssd`` over pixels x channels.

A tile of A is 16 rows of 64 bytes: 16 output pixels of a row, 64 input channels
each, when the input is padded once into pixels with their channels adjacent
(``PX[n, y, x, c]``, NHWC). B is 16 groups of 4 input channels by 16 output channels
(``WX[ko, r, s, cg, ki, q] = weight[ko * kb + ki, cg * 4 + q, r, s]``). For each kernel
offset (r, s) and each 64 input channels, a tile of A is read straight from the
padded input at a row stride of ``stride`` pixels, so there is no im2col copy::

    for n, y (parallel):
      for x in tiles of wb pixels, for k in tiles of kb channels:
        acc[16 x 16] per (16 pixels, 16 channels) = 0                (wb/16 x kb/16 tiles)
        for r, s, 64 input channels:
          A = PX[n, y*st + r, x*st + s : ... + 16*st : st, c : c + 64] (tile loads)
          B = WX[k // kb, r, s, c/4 : c/4 + 16, :, :]
          acc += A . B                                                 (tdpbssd)
        ACC[n, k : k + kb, y, x : x + wb] = transposed(acc)            (channel-major)
    out[n, k, y, x] = ACC[n, k, y, x] for x < OW                       (a contiguous copy)

``tdpbssd`` multiplies signed by signed: no offset. A row of output pixels is padded
to whole tiles (the input padded with zeros to match), so every tile is a kernel call
(ResNet-18's 56 columns: 64 computed). C must be whole 64s of channels. 1 thread on
a Sapphire Rapids-class Xeon, 64 -> 64 56x56: 0.21 ms (1100 GOP/s; the ``vpdpbusd``
kernels 0.39 ms): the kernel a third, the input's change of layout another third.
"""

from __future__ import annotations

import pypto as pt
from pypto.amx import C_HELPERS, TILE_ROWS

from .knobs import inner_tile

GROUP = 4  # int8 inputs of the reduction per 32-bit lane (a column of B)
CHANNELS = TILE_ROWS * GROUP  # input channels per tile of A (64 bytes)


# a 16 x 16 tile of int32 sums (rows: pixels) stored transposed (rows: channels); 64
# shuffles: unpacks of 32 and 64 bits, then two of 128-bit lanes
TRANSPOSE = """#ifndef PT_AMX_TR16
#define PT_AMX_TR16
static inline void pt_amx_tr16(const int32_t* in, int32_t* out, int64_t os) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(in + 16 * i);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
  for (int j = 0; j < 16; ++j) _mm512_storeu_si512(out + j * os, r[j]);
}
#endif"""


def usable(target, dtype: str, C: int, K: int) -> bool:
    """Whether an int8 ``C -> K`` convolution runs on ``target``'s tiles: AMX-INT8, whole
    64s of input channels, whole 16s of output channels."""
    return (
        dtype == "int8"
        and target.has("amx_tile", "amx_int8")
        and C % CHANNELS == 0
        and K % TILE_ROWS == 0
    )


def define_knobs(cfg, K: int, OW: int) -> None:
    """``amx_w`` pixels (16 or 32: one or two tiles of A) and ``amx_k`` output channels
    (16 or 32: tiles of B) per kernel call; the 2 x 2 tiles by default (four
    accumulators, each tile of A and B used twice)."""
    inner_tile(cfg, "amx_w", OW, [16, 32], 32 if OW > 16 else 16)
    inner_tile(cfg, "amx_k", K, [n for n in (16, 32) if K % n == 0], 32 if K % 32 == 0 else 16)


def conv(cfg, data, weight, shape: tuple, stride: int, padding: int):
    """The schedule and tensors of the module docstring's convolution."""
    N, C, H, W, K, R, S = shape
    st, p = stride, padding
    OH, OW = (H + 2 * p - R) // st + 1, (W + 2 * p - S) // st + 1
    wb, kb = cfg["amx_w"].size[-1], cfg["amx_k"].size[-1]
    OWp = -(-OW // wb) * wb  # whole tiles of pixels
    Wp = max(W + 2 * p, (OWp - 1) * st + S)
    zero = pt.const(0, "int8")

    def padded(n, y, x, c):
        inside = (y >= p) & (y < H + p) & (x >= p) & (x < W + p)
        yy, xx = pt.min(pt.max(y - p, 0), H - 1), pt.min(pt.max(x - p, 0), W - 1)
        return pt.select(inside, data[n, c, yy, xx], zero)

    PX = pt.compute((N, H + 2 * p, Wp, C), padded, name="pad_nhwc")
    WX = pt.compute(
        (K // kb, R, S, C // GROUP, kb, GROUP),
        lambda ko, r, s, cg, ki, q: weight[ko * kb + ki, cg * GROUP + q, r, s],
        name="weight_tiles",
    )
    rr, rs = pt.reduce_axis((0, R), name="rr"), pt.reduce_axis((0, S), name="rs")
    cg, q = pt.reduce_axis((0, C // GROUP), name="cg"), pt.reduce_axis((0, GROUP), name="q")

    def product(a, b):
        return pt.cast("int32", a) * pt.cast("int32", b)

    acc = pt.compute(
        (N, K, OH, OWp),
        lambda n, k, y, x: pt.sum(
            product(
                PX[n, y * st + rr, x * st + rs, cg * GROUP + q], WX[k // kb, rr, rs, cg, k % kb, q]
            ),
            axis=[rr, rs, cg, q],
        ),  # fmt: skip
        name="acc",
    )
    out = pt.compute((N, K, OH, OW), lambda n, k, y, x: acc[n, k, y, x], name="conv")
    s = pt.create_schedule(out.op)
    s[WX].parallel(s[WX].fuse(*WX.op.axis[:2]))  # once per call, in parallel
    s[WX].vectorize(WX.op.axis[-1])
    pn, py, px, pc = PX.op.axis
    s[PX].parallel(s[PX].fuse(pn, py))
    s[PX].reorder(pc, px)  # channel planes read along rows (stored 1 byte in C)
    s[PX].vectorize(px)
    n, k, y, x = acc.op.axis
    xo, xi = s[acc].split(x, factor=wb)
    ko, ki = s[acc].split(k, factor=kb)
    s[acc].reorder(n, y, ko, xo, rr, rs, cg, q, ki, xi)
    s[acc].parallel(s[acc].fuse(n, y))
    s[acc].tensorize(rr, conv_tile(C, R, S, wb, kb, st))
    on, ok, oy, ox = out.op.axis  # the padded rows cut to OW
    s[out].parallel(s[out].fuse(on, ok))
    s[out].vectorize(ox)
    return s, [data, weight, out]


def conv_tile(C: int, R: int, S: int, wb: int, kb: int, stride: int):
    """The intrinsic ``out[k, x] = sum_{r, s, cg, q} in[r, x*st + s, cg*4 + q] *
    w[r, s, cg, k, q]`` (int32 products) over ``kb`` channels x ``wb`` pixels: the
    tiles' pixel-major sums transposed as they are stored (``TRANSPOSE``)."""
    if wb % TILE_ROWS or kb % TILE_ROWS or wb > 32 or kb > 32 or C % CHANNELS:
        raise ValueError(
            f"conv_tile: {wb} pixels x {kb} channels are not 1 or 2 AMX tiles each, "
            f"or C={C} is not a multiple of {CHANNELS}"
        )
    st = stride
    inp = pt.placeholder((R, (wb - 1) * st + S, C), "int8", name="inp")
    wgt = pt.placeholder((R, S, C // GROUP, kb, GROUP), "int8", name="wgt")
    r, s = pt.reduce_axis((0, R), name="r"), pt.reduce_axis((0, S), name="s")
    c, q = pt.reduce_axis((0, C // GROUP), name="c"), pt.reduce_axis((0, GROUP), name="q")
    out = pt.compute(
        (kb, wb),
        lambda k, x: pt.sum(
            pt.cast("int32", inp[r, x * st + s, c * GROUP + q])
            * pt.cast("int32", wgt[r, s, c, k, q]),
            axis=[r, s, c, q],
        ),
        name="tile",
    )
    name = f"conv_amxint8_c{C}_r{R}s{S}_st{st}_{wb}x{kb}"
    src = _source(name, C, R, S, wb, kb, st)
    return pt.TensorIntrin.register(name, out.op, src, inputs=[inp, wgt])


def _source(name: str, C: int, R: int, S: int, wb: int, kb: int, st: int) -> str:
    a_n, b_n = wb // TILE_ROWS, kb // TILE_ROWS
    acc = {(t, v): t * b_n + v for t in range(a_n) for v in range(b_n)}
    ta = {t: a_n * b_n + t for t in range(a_n)}
    tb = {v: a_n * b_n + a_n + v for v in range(b_n)}
    body = []
    for t in range(a_n):
        body.append(f"_tile_loadd({ta[t]}, ip + {t * TILE_ROWS * st} * i1, i1 * {st});")
    for v in range(b_n):
        body.append(f"_tile_loadd({tb[v]}, wp + {v * TILE_ROWS * GROUP}, w2);")
    body += [f"_tile_dpbssd({acc[t, v]}, {ta[t]}, {tb[v]});" for t, v in acc]
    lines = [
        C_HELPERS,
        TRANSPOSE,
        f"static inline void {name}(const int8_t* restrict in, int64_t i0, int64_t i1,",
        "    int64_t i2, const int8_t* restrict w, int64_t w0, int64_t w1, int64_t w2,",
        "    int64_t w3, int64_t w4, int32_t* restrict out, int64_t o0, int64_t o1) {",
        f"  if (i2 != 1 || w4 != 1 || w3 != {GROUP} || w2 != {kb * GROUP} || o1 != 1) {{",
        f"    for (int64_t k = 0; k < {kb}; ++k)  /* other strides: plain loops */",
        f"      for (int64_t x = 0; x < {wb}; ++x) {{",
        "        int32_t t = 0;",
        f"        for (int64_t r = 0; r < {R}; ++r)",
        f"          for (int64_t s = 0; s < {S}; ++s)",
        f"            for (int64_t c = 0; c < {C}; ++c)",
        f"              t += (int32_t)in[r * i0 + (x * {st} + s) * i1 + c * i2]",
        f"                * (int32_t)w[r * w0 + s * w1 + (c / {GROUP}) * w2 + k * w3"
        f" + (c % {GROUP}) * w4];",
        "        out[k * o0 + x * o1] = t;",
        "      }",
        "    return;",
        "  }",
        "  pt_amx_start();",
        *(f"  _tile_zero({t});" for t in acc.values()),
        f"  for (int64_t r = 0; r < {R}; ++r)",
        f"    for (int64_t s = 0; s < {S}; ++s)",
        f"      for (int64_t c = 0; c < {C}; c += {CHANNELS}) {{",
        "        const int8_t* ip = in + r * i0 + s * i1 + c;",
        f"        const int8_t* wp = w + r * w0 + s * w1 + (c / {GROUP}) * w2;",
        *("        " + b for b in body),
        "      }",
        "  int32_t pt_tile[256] __attribute__((aligned(64)));",
        *(
            f"  _tile_stored({a}, pt_tile, 64);\n"
            f"  pt_amx_tr16(pt_tile, out + {v * TILE_ROWS} * o0 + {t * TILE_ROWS}, o0);"
            for (t, v), a in acc.items()
        ),
        "}",
    ]
    return "\n".join(lines) + "\n"
