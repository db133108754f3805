"""int8 and bfloat16 ``conv2d_nchw`` on the target's dot-product instruction
(``dot_ukernels.ISAS``).

The reduction over input channels is grouped by the instruction's ``g`` (4 for
``vpdpbusd`` and ``sdot``, 2 for ``vpmaddwd``): the input is padded once into
``P[n, co, y, x, cq] = data[n, co * g + cq, y - pad, x - pad]`` (the ``g`` channels of a
pixel adjacent, one 32-bit lane) and the weights into
``WP[ko, co, r, s, ki, cq] = weight[ko * kb + ki, co * g + cq, r, s]`` (``kb`` output
channels of ``g`` inputs each, whole vectors). A tile of ``hb`` rows x ``wb`` columns x
``kb`` channels is one call of a micro-kernel:

    for co, r, s:                                     (the whole reduction in the call)
      w[v] = load(WP[ko, co, r, s, v*L : v*L + L, :])      (L channels x g inputs)
      for y in hb, x in wb:
        p = broadcast(P[n, co, y*st + r, x*st + s, :])      (g inputs as one lane)
        acc[y][x][v] = dot(acc[y][x][v], p, w[v])
    out[n, ko*kb + v*L + l, y, x] = acc[y][x][v][l]  (- 128 * wsum[k] with an offset)

``vpdpbusd`` multiplies an unsigned byte by a signed one: there the input is the
unsigned operand, stored as ``data + 128`` (the padding as 128), and the copy-out
subtracts ``128 * wsum[k]``, the sum of output channel k's weights (computed once per
call): ``sum w (x + 128) - 128 sum w = sum w x``, exact in int32. For ``vpmaddwd``
(AVX2, AVX-512BW) the input is stored widened to int16, the weights sign-extended as
they are loaded, or on AVX2 packed widened (``DotISA.b_wide``; a Zen 5 running
``x86-avx2`` code: 179 -> 196 GOP/s at the shape below). Partial tiles (a row of
``OW`` not a multiple of ``wb``) run the same reduction as plain loops; whole tiles
are copied back to NCHW transposed in registers (``ukernels.tile_transpose``, the
offset subtracted on the way). int8 ResNet-18 64->64
56x56 s1 on a Zen 4, 1 thread: the compiler's int32 code 45 GOP/s, this 368 (79% of
``vpdpbusd``'s peak; PyTorch's quantized x86 conv 371); ``x86-avx2`` 22 -> 143. The
transposed copy: on an AVX-512 Xeon, ``x86-avx512-bf16`` code, 657 -> 753 GOP/s (the
tile loop; 72% -> 82% of ``vpdpbusd``'s peak).

bfloat16 runs the same tiles on ``vdpbf16ps`` (pairs of bfloat16 into float32 lanes,
``g`` = 2): no offset, float32 sums, rounded once to bfloat16 by the transposed copy
(``tile_transpose(rounded=True)``, to nearest even as ``pt.cast``).
"""

from __future__ import annotations

import pypto as pt

from . import dot_ukernels, ukernels
from .conv_tiles import define_channel_tile_knobs, schedule_channel_tiles
from .dot_ukernels import DotISA

_ACC = {"int8": "int32", "bfloat16": "float32"}  # the sums' dtype per input dtype


def usable(target, dtype: str, C: int, K: int) -> DotISA | None:
    """The dot kernel for an int8 or bfloat16 convolution of ``C`` -> ``K`` channels on
    ``target``: the ISA, when ``C`` is a whole number of its groups and ``K`` of its
    vectors (None for any other dtype, or without one: float32 arithmetic)."""
    isa = dot_ukernels.dot_isa(target, dtype) if dtype in ("int8", "bfloat16") else None
    if isa is None or C % isa.group or K % isa.lanes:
        return None
    return isa


def define_knobs(cfg, isa: DotISA, K: int, OH: int, OW: int) -> None:
    """``vk_k`` output channels (whole vectors dividing K), ``vk_w`` columns and ``vk_h``
    rows per tile. The default holds at most half the vector registers in accumulators,
    less the ISA's products (``vpmaddwd``'s ``rows`` budget): 2 vectors x 4 columns x 2
    rows with 32 registers, x 1 row with 16."""
    budget = cfg.target.vector_registers // 2 - (2 if isa.rows else 0)
    define_channel_tile_knobs(cfg, K, OH, OW, isa.lanes, budget)


def conv(cfg, isa: DotISA, data, weight, shape: tuple, stride: int, padding: int):
    """The schedule and tensors of the convolution of the module docstring."""
    N, C, H, W, K, R, S = shape
    g, st, p = isa.group, stride, padding
    OH, OW = (H + 2 * p - R) // st + 1, (W + 2 * p - S) // st + 1
    kb, hb, wb = (cfg[n].size[-1] for n in ("vk_k", "vk_h", "vk_w"))
    pdt = "uint8" if isa.b_offset else isa.a_wide or isa.dtype
    acc_dt = _ACC[isa.dtype]

    def padded(n, co, y, x, cq):
        v = pt.cast(acc_dt, data[n, co * g + cq, y - p, x - p])
        inside = (y >= p) & (y < H + p) & (x >= p) & (x < W + p)
        v = pt.select(inside, v, pt.const(0, acc_dt))
        return pt.cast(pdt, v + 128 if isa.b_offset else v)

    P = pt.compute((N, C // g, H + 2 * p, W + 2 * p, g), padded, name="pad")
    wdt = isa.b_wide or isa.dtype  # the vector operand, widened once where the ISA wants
    WP = pt.compute(
        (K // kb, C // g, R, S, kb, g),
        lambda ko, co, r, s, ki, cq: pt.cast(wdt, weight[ko * kb + ki, co * g + cq, r, s]),
        name="weight_packed",
    )
    co = pt.reduce_axis((0, C // g), name="co")
    rr, rs = pt.reduce_axis((0, R), name="rr"), pt.reduce_axis((0, S), name="rs")
    cq = pt.reduce_axis((0, g), name="cq")

    def product(a, b):
        return pt.cast(acc_dt, a) * pt.cast(acc_dt, b)

    acc = pt.compute(
        (N, OH, OW, K),
        lambda n, y, x, k: pt.sum(
            product(P[n, co, y * st + rr, x * st + rs, cq], WP[k // kb, co, rr, rs, k % kb, cq]),
            axis=[co, rr, rs, cq],
        ),
        name="acc",
    )
    wsum = None
    if isa.b_offset:
        c, r, s = (pt.reduce_axis((0, e), name=nm) for e, nm in ((C, "c"), (R, "r"), (S, "s")))
        wsum = pt.compute(
            (K,),
            lambda k: pt.sum(pt.cast("int32", weight[k, c, r, s]), axis=[c, r, s]),
            name="weight_sum",
        )

    def copy_out(n, k, y, x):
        v = acc[n, y, x, k]
        if acc_dt == "float32":  # bfloat16: rounded once
            return pt.cast(isa.dtype, v)
        return v - pt.const(128, "int32") * wsum[k] if wsum is not None else v

    out = pt.compute((N, K, OH, OW), copy_out, name="conv")
    s = pt.create_schedule(out.op)
    for stage, outer in ((P, 2), (WP, 2), (wsum, 1)):
        if stage is not None:  # once per call, at the root, in parallel
            axes = stage.op.axis
            s[stage].parallel(s[stage].fuse(*axes[:outer]) if outer > 1 else axes[0])
            if stage is P:  # along the rows, the g channels interleaved (unrolled): the
                # g-long loop vectorized left bfloat16's pad at 2 GB/s (17% of the conv)
                s[P].unroll(axes[-1])
                s[P].vectorize(axes[-2])
            elif len(axes) > 1:
                s[stage].vectorize(axes[-1])
    simd = ukernels.simd_isa(cfg.target)
    copy = None
    if simd is not None:  # the tile back to NCHW transposed in registers
        offset = 128 if wsum is not None else None
        rounded = acc_dt == "float32"
        if not rounded or simd.store4_bf16:
            copy = ukernels.tile_transpose(simd, hb, wb, kb, acc_dt, offset, rounded)
    schedule_channel_tiles(cfg, s, out, acc, lambda: [co, rr, rs, cq], copy)
    s[acc].tensorize(co, conv_tile(isa, C, R, S, hb, wb, kb, st))
    return s, [data, weight, out]


def conv_tile(isa: DotISA, C: int, R: int, S: int, hb: int, wb: int, kb: int, stride: int):
    """The intrinsic ``out[y, x, k] = sum_{co,r,s,q} P[co, y*st + r, x*st + s, q] *
    W[co, r, s, k, q]`` (int32 or float32 products) over a tile of ``hb`` x ``wb`` x ``kb``."""
    g, st, acc_dt = isa.group, stride, _ACC[isa.dtype]
    if kb % isa.lanes or C % g:
        raise ValueError(
            f"conv_tile: {kb} channels are not whole {isa.name} vectors of {isa.lanes}, "
            f"or C={C} is not a multiple of {g}"
        )
    pdt = "uint8" if isa.b_offset else isa.a_wide or isa.dtype
    P = pt.placeholder((C // g, (hb - 1) * st + R, (wb - 1) * st + S, g), pdt, name="inp")
    Wt = pt.placeholder((C // g, R, S, kb, g), isa.b_wide or isa.dtype, name="wgt")
    c, r, s = (pt.reduce_axis((0, e), name=nm) for e, nm in ((C // g, "c"), (R, "r"), (S, "s")))
    q = pt.reduce_axis((0, g), name="q")
    out = pt.compute(
        (hb, wb, kb),
        lambda y, x, k: pt.sum(
            pt.cast(acc_dt, P[c, y * st + r, x * st + s, q]) * pt.cast(acc_dt, Wt[c, r, s, k, q]),
            axis=[c, r, s, q],
        ),
        name="tile",
    )
    name = f"conv_{isa.name}_c{C}_r{R}s{S}_st{st}_{hb}x{wb}x{kb}"
    return pt.TensorIntrin.register(
        name, out.op, _source(isa, name, pdt, C, R, S, hb, wb, kb, st), inputs=[P, Wt]
    )


def _source(isa: DotISA, name: str, pdt: str, C, R, S, hb, wb, kb, st) -> str:
    g, L = isa.group, isa.lanes
    nk = kb // L
    pix = [(y, x) for y in range(hb) for x in range(wb)]
    acc = {(y, x, v): f"a{y}_{x}_{v}" for y, x in pix for v in range(nk)}
    pc, wc = dot_ukernels.c_elem(pdt), dot_ukernels.c_elem(isa.b_wide or isa.dtype)
    ac = {"int32": "int32_t", "float32": "float"}[_ACC[isa.dtype]]
    widen = "pt_dot_bf16" if isa.dtype == "bfloat16" else "(int32_t)"
    lines = [
        f"#include <{isa.header}>",
        dot_ukernels.helpers(isa),
        f"static inline void {name}(const {pc}* restrict in, int64_t i0, int64_t i1,",
        f"    int64_t i2, int64_t i3, const {wc}* restrict w, int64_t w0, int64_t w1,",
        f"    int64_t w2, int64_t w3, int64_t w4, {ac}* restrict out, int64_t o0,",
        "    int64_t o1, int64_t o2) {",
        f"  if (i3 != 1 || w3 != {g} || w4 != 1 || o2 != 1) {{  /* other strides: plain loops */",
        f"    for (int64_t y = 0; y < {hb}; ++y)",
        f"      for (int64_t x = 0; x < {wb}; ++x)",
        f"        for (int64_t k = 0; k < {kb}; ++k) {{",
        f"          {ac} t = 0;",
        f"          for (int64_t c = 0; c < {C // g}; ++c)",
        f"            for (int64_t r = 0; r < {R}; ++r)",
        f"              for (int64_t s = 0; s < {S}; ++s)",
        f"                for (int64_t q = 0; q < {g}; ++q)",
        f"                  t += {widen}(in[c * i0 + (y * {st} + r) * i1 + (x * {st} + s) * i2"
        " + q * i3])",
        f"                    * {widen}(w[c * w0 + r * w1 + s * w2 + k * w3 + q * w4]);",
        "          out[y * o0 + x * o1 + k * o2] = t;",
        "        }",
        "    return;",
        "  }",
        f"  {isa.acc_type} " + ", ".join(f"{a} = {isa.zero}" for a in acc.values()) + ";",
        f"  for (int64_t c = 0; c < {C // g}; ++c) {{",
        f"    for (int64_t r = 0; r < {R}; ++r) {{",
        f"      for (int64_t s = 0; s < {S}; ++s) {{",
        f"        const {pc}* ip = in + c * i0 + r * i1 + s * i2;",
        f"        const {wc}* wp = w + c * w0 + r * w1 + s * w2;",
    ]
    body = [f"{isa.op_type} w{v} = {isa.load.format(p=f'wp + {v * L * g}')};" for v in range(nk)]
    for y, x in pix:
        at = f"ip + {y * st} * i1 + {x * st} * i2"
        body.append(f"{isa.op_type} p{y}_{x} = {isa.bcast.format(p=at)};")
        body += [
            f"{acc[y, x, v]} = " + isa.dot.format(acc=acc[y, x, v], a=f"w{v}", b=f"p{y}_{x}") + ";"
            for v in range(nk)
        ]
    lines += ["        " + b for b in body]
    lines += ["      }", "    }", "  }"]
    lines += [
        "  " + isa.store.format(p=f"out + {y} * o0 + {x} * o1 + {v * L}", v=a)
        for (y, x, v), a in acc.items()
    ]
    lines.append("}")
    return "\n".join(lines) + "\n"
