"""int8 and bfloat16 ``conv2d_nchw`` on AMX's tiles (``x86-amx``): ``tdpbssd`` /
``tdpbf16ps`` over pixels x channels.

A tile of A is 16 rows of 64 bytes: 16 output pixels of a row, 64 int8 (32 bfloat16)
input channels each, when the input is padded once into pixels with their channels
adjacent (``PX[n, y, x, c]``, NHWC). B is 16 groups of g input channels (4 int8, 2
bfloat16) by 16 output channels (``WX[ko, r, s, cg, ki, q] = weight[ko * kb + ki,
cg * g + q, r, s]``). For each kernel offset (r, s) and each tile of input channels,
a tile of A is read straight from the padded input at a row stride of ``stride``
pixels, so there is no im2col copy::

    for n, y (parallel):
      for x in tiles of wb pixels, for k in tiles of kb channels:
        acc[16 x 16] per (16 pixels, 16 channels) = 0                (wb/16 x kb/16 tiles)
        for r, s, 16 g input channels:
          A = PX[n, y*st + r, x*st + s : ... + 16*st : st, c : c + 16 g] (tile loads)
          B = WX[k // kb, r, s, c/g : c/g + 16, :, :]
          acc += A . B                                            (tdpbssd, tdpbf16ps)
        ACC[n, k : k + kb, y, x : x + wb] = transposed(acc)            (channel-major)
    out[n, k, y, x] = ACC[n, k, y, x] for x < OW        (a contiguous copy; bfloat16 rounded)

``tdpbssd`` multiplies signed by signed: no offset; bfloat16's float32 sums are rounded
once, as the float rule of ``precision`` says. A row of output pixels is padded
to whole tiles (the input padded with zeros to match), so every tile is a kernel call
(ResNet-18's 56 columns: 64 computed). C must be whole tiles of channels. 1 thread on
a Sapphire Rapids-class Xeon, 64 -> 64 56x56: int8 0.21 ms (1100 GOP/s; the
``vpdpbusd`` kernels 0.39 ms): the kernel a third, the input's change of layout
another third; bfloat16 0.40 ms (float32 arithmetic on bfloat16 storage 2.6 ms).
"""

from __future__ import annotations

from dataclasses import dataclass

import pypto as pt
from pypto.amx import TILE_ROWS

from .dot_ukernels import TILE_ISAS, helpers
from .knobs import inner_tile


@dataclass(frozen=True)
class Kind:
    """How one input dtype runs on the tiles."""

    features: tuple  # the target's
    group: int  # inputs of the reduction per 32-bit lane (a column of B)
    instruction: str
    elem: str  # the inputs' C type
    acc: str  # the sums' dtype
    acc_c: str
    widen: str  # C of an input as a number

    @property
    def channels(self) -> int:  # input channels per tile of A (64 bytes)
        return TILE_ROWS * self.group


KINDS = {
    "int8": Kind(("amx_tile", "amx_int8"), 4, "_tile_dpbssd", "int8_t", "int32", "int32_t",
                 "(int32_t)"),
    "bfloat16": Kind(("amx_tile", "amx_bf16"), 2, "_tile_dpbf16ps", "uint16_t", "float32",
                     "float", "pt_dot_bf16"),
}  # fmt: skip


# a 16 x 16 tile of int32 sums (rows: pixels) stored transposed (rows: channels); 64
# shuffles: unpacks of 32 and 64 bits, then two of 128-bit lanes
TRANSPOSE = """#ifndef PT_AMX_TR16
#define PT_AMX_TR16
static inline void pt_amx_tr16(const void* tile, void* dst, int64_t os) {
  const int32_t* in = (const int32_t*)tile;  /* 32-bit lanes: int32 or float sums */
  int32_t* out = (int32_t*)dst;
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
    """Whether a ``dtype`` ``C -> K`` convolution runs on ``target``'s tiles: int8 or
    bfloat16 on a target with AMX's multiplies of it, whole tiles of input channels (64
    int8, 32 bfloat16), whole 16s of output channels."""
    kind = KINDS.get(dtype)
    return (
        kind is not None
        and target.has(*kind.features)
        and C % kind.channels == 0
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
    dtype = str(data.dtype)
    kind = KINDS[dtype]
    g = kind.group
    zero = pt.const(0, dtype)

    def padded(n, y, x, c):
        inside = (y >= p) & (y < H + p) & (x >= p) & (x < W + p)
        yy, xx = pt.min(pt.max(y - p, 0), H - 1), pt.min(pt.max(x - p, 0), W - 1)
        return pt.select(inside, data[n, c, yy, xx], zero)

    PX = pt.compute((N, H + 2 * p, Wp, C), padded, name="pad_nhwc")
    WX = pt.compute(
        (K // kb, R, S, C // g, kb, g),
        lambda ko, r, s, cg, ki, q: weight[ko * kb + ki, cg * g + q, r, s],
        name="weight_tiles",
    )
    rr, rs = pt.reduce_axis((0, R), name="rr"), pt.reduce_axis((0, S), name="rs")
    cg, q = pt.reduce_axis((0, C // g), name="cg"), pt.reduce_axis((0, g), name="q")
    acc = pt.compute(
        (N, K, OH, OWp),
        lambda n, k, y, x: pt.sum(
            _product(
                kind,
                PX[n, y * st + rr, x * st + rs, cg * g + q],
                WX[k // kb, rr, rs, cg, k % kb, q],
            ),
            axis=[rr, rs, cg, q],
        ),
        name="acc",
    )
    cut = (lambda v: v) if kind.acc == "int32" else (lambda v: pt.cast(dtype, v))  # noqa: E731
    out = pt.compute((N, K, OH, OW), lambda n, k, y, x: cut(acc[n, k, y, x]), name="conv")
    s = pt.create_schedule(out.op)
    s[WX].parallel(s[WX].fuse(*WX.op.axis[:2]))  # once per call, in parallel
    s[WX].vectorize(WX.op.axis[-1])
    pn, py, px, pc = PX.op.axis
    s[PX].parallel(s[PX].fuse(pn, py))
    s[PX].reorder(pc, px)  # each channel's plane read along its rows, stored C bytes apart
    s[PX].vectorize(px)
    n, k, y, x = acc.op.axis
    xo, xi = s[acc].split(x, factor=wb)
    ko, ki = s[acc].split(k, factor=kb)
    s[acc].reorder(n, y, ko, xo, rr, rs, cg, q, ki, xi)
    s[acc].parallel(s[acc].fuse(n, y))
    s[acc].tensorize(rr, conv_tile(dtype, C, R, S, wb, kb, st))
    on, ok, oy, ox = out.op.axis  # the padded rows cut to OW
    s[out].parallel(s[out].fuse(on, ok))
    s[out].vectorize(ox)
    return s, [data, weight, out]


def _product(kind: Kind, a, b):
    return pt.cast(kind.acc, a) * pt.cast(kind.acc, b)


def conv_tile(dtype: str, C: int, R: int, S: int, wb: int, kb: int, stride: int):
    """The intrinsic ``out[k, x] = sum_{r, s, cg, q} in[r, x*st + s, cg*g + q] *
    w[r, s, cg, k, q]`` (int32 or float32 products) over ``kb`` channels x ``wb``
    pixels: the tiles' pixel-major sums transposed as they are stored (``TRANSPOSE``)."""
    kind = KINDS[dtype]
    g = kind.group
    if wb % TILE_ROWS or kb % TILE_ROWS or wb > 32 or kb > 32 or C % kind.channels:
        raise ValueError(
            f"conv_tile: {wb} pixels x {kb} channels are not 1 or 2 AMX tiles each, "
            f"or C={C} is not a multiple of {kind.channels}"
        )
    st = stride
    inp = pt.placeholder((R, (wb - 1) * st + S, C), dtype, name="inp")
    wgt = pt.placeholder((R, S, C // g, kb, g), dtype, name="wgt")
    r, s = pt.reduce_axis((0, R), name="r"), pt.reduce_axis((0, S), name="s")
    c, q = pt.reduce_axis((0, C // g), name="c"), pt.reduce_axis((0, g), name="q")
    out = pt.compute(
        (kb, wb),
        lambda k, x: pt.sum(
            _product(kind, inp[r, x * st + s, c * g + q], wgt[r, s, c, k, q]), axis=[r, s, c, q]
        ),
        name="tile",
    )
    name = f"conv_amx{dtype}_c{C}_r{R}s{S}_st{st}_{wb}x{kb}"
    src = _source(kind, dtype, name, C, R, S, wb, kb, st)
    return pt.TensorIntrin.register(name, out.op, src, inputs=[inp, wgt])


def _source(kind: Kind, dtype: str, name: str, C, R, S, wb: int, kb: int, st: int) -> str:
    g, e, a_c = kind.group, kind.elem, kind.acc_c
    isa = next(i for i in TILE_ISAS if i.dtype == dtype)
    a_n, b_n = wb // TILE_ROWS, kb // TILE_ROWS
    acc = {(t, v): t * b_n + v for t in range(a_n) for v in range(b_n)}
    ta = {t: a_n * b_n + t for t in range(a_n)}
    tb = {v: a_n * b_n + a_n + v for v in range(b_n)}
    body = []
    for t in range(a_n):
        body.append(f"_tile_loadd({ta[t]}, ip + {t * TILE_ROWS * st} * i1, i1 * {st * 4 // g});")
    for v in range(b_n):
        body.append(f"_tile_loadd({tb[v]}, wp + {v * TILE_ROWS * g}, w2 * {4 // g});")
    body += [f"{kind.instruction}({acc[t, v]}, {ta[t]}, {tb[v]});" for t, v in acc]
    lines = [
        helpers(isa),
        TRANSPOSE,
        f"static inline void {name}(const {e}* restrict in, int64_t i0, int64_t i1,",
        f"    int64_t i2, const {e}* restrict w, int64_t w0, int64_t w1, int64_t w2,",
        f"    int64_t w3, int64_t w4, {a_c}* restrict out, int64_t o0, int64_t o1) {{",
        f"  if (i2 != 1 || w4 != 1 || w3 != {g} || w2 != {kb * g} || o1 != 1) {{",
        f"    for (int64_t k = 0; k < {kb}; ++k)  /* other strides: plain loops */",
        f"      for (int64_t x = 0; x < {wb}; ++x) {{",
        f"        {a_c} t = 0;",
        f"        for (int64_t r = 0; r < {R}; ++r)",
        f"          for (int64_t s = 0; s < {S}; ++s)",
        f"            for (int64_t c = 0; c < {C}; ++c)",
        f"              t += {kind.widen}(in[r * i0 + (x * {st} + s) * i1 + c * i2])",
        f"                * {kind.widen}(w[r * w0 + s * w1 + (c / {g}) * w2 + k * w3"
        f" + (c % {g}) * w4]);",
        "        out[k * o0 + x * o1] = t;",
        "      }",
        "    return;",
        "  }",
        "  pt_amx_start();",
        *(f"  _tile_zero({t});" for t in acc.values()),
        f"  for (int64_t r = 0; r < {R}; ++r)",
        f"    for (int64_t s = 0; s < {S}; ++s)",
        f"      for (int64_t c = 0; c < {C}; c += {kind.channels}) {{",
        f"        const {e}* ip = in + r * i0 + s * i1 + c;",
        f"        const {e}* wp = w + r * w0 + s * w1 + (c / {g}) * w2;",
        *("        " + b for b in body),
        "      }",
        f"  {a_c} pt_tile[256] __attribute__((aligned(64)));",
        *(
            f"  _tile_stored({a}, pt_tile, 64);\n"
            f"  pt_amx_tr16(pt_tile, out + {v * TILE_ROWS} * o0 + {t * TILE_ROWS}, o0);"
            for (t, v), a in acc.items()
        ),
        "}",
    ]
    return "\n".join(lines) + "\n"
