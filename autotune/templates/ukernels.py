"""Hand-written SIMD micro-kernels, declared as tensor intrinsics (``pt.decl_tensor_intrin``).

``conv_tile`` is the register tile of a direct convolution with output
channels in the vector lanes: ``hb x wb`` output pixels times ``nk`` vectors
of channels accumulated in ``hb * wb * nk`` registers over the whole
reduction. The tile is written straight-line, the accumulators named
variables rather than an array the compiler has to promote to registers
(gcc still unrolls the ``s`` loop and may keep broadcasts alive across it,
which spills some tile shapes: the tuner measures them like any other config):

    for c, r, s:                                 (loops; gcc may unroll s)
      w[v] = load(W[c, r, s, L*v : L*v + L])     (the fewer of weights and pixels
      p[y][x] = broadcast(P[c, y*st + r, x*st + s])   is held in registers)
      acc[y][x][v] += p[y][x] * w[v]
    out[y, x, L*v : L*v + L] = acc[y][x][v]

``tile_transpose`` copies such a tile (channels innermost) back to NCHW, four
columns at a time transposed in registers: gcc copies it one element at a time.

The vector instructions come from a table per ISA (AVX-512, AVX2 + FMA, NEON),
chosen by the task's target, never by the host: ``L`` is that ISA's float32
lanes. With the strides of a call known (they are constants), the compiler
folds the kernel's general path for strided channels away.
"""

from __future__ import annotations

from dataclasses import dataclass

import pypto as pt

from .dot_ukernels import ROUND_BF16


@dataclass(frozen=True)
class SimdISA:
    """How one ISA spells the few vector operations of a register tile (float32)."""

    name: str
    needs: tuple  # target features
    lanes: int
    header: str
    vtype: str
    zero: str
    load: str  # {p}: address
    bcast: str  # {p}: address of the scalar
    fma: str  # acc + a * b
    store: str  # {p}, {v}
    # four vectors a0..a3 to u0..u3, transposed within each group of four lanes
    # (u_j's group g holds lane 4g + j of a0..a3)
    transpose4: str
    store4: str  # {p}: address, {v}: vector, {g}: its group of four lanes to store
    # int32 lanes, for copies of int32 tiles: the vector type, a load ({p}: address),
    # a - b, a * the constant {m}, and the lanes' bits as the float vector type
    ivtype: str
    iload: str
    isub: str
    imul: str
    as_float: str
    # of bfloat16 lanes {v} (``pt_bf16_lanes`` of a float vector: AVX-512's only), the
    # group {g} of four stored at {p}; "": no rounded copy on this ISA
    store4_bf16: str = ""


# x86: unpack pairs of a0..a3, then shuffle pairs of pairs, in every 128-bit lane
_X86_TRANSPOSE4 = (
    "{V} t0 = {P}_unpacklo_ps(a0, a1), t1 = {P}_unpackhi_ps(a0, a1);\n"
    "{V} t2 = {P}_unpacklo_ps(a2, a3), t3 = {P}_unpackhi_ps(a2, a3);\n"
    "{V} u0 = {P}_shuffle_ps(t0, t2, 0x44), u1 = {P}_shuffle_ps(t0, t2, 0xEE);\n"
    "{V} u2 = {P}_shuffle_ps(t1, t3, 0x44), u3 = {P}_shuffle_ps(t1, t3, 0xEE);"
)

ISAS = (
    SimdISA(
        "avx512",
        ("avx512f",),
        16,
        "immintrin.h",
        "__m512",
        "_mm512_setzero_ps()",
        "_mm512_loadu_ps({p})",
        "_mm512_set1_ps(*({p}))",
        "_mm512_fmadd_ps({a}, {b}, {acc})",
        "_mm512_storeu_ps({p}, {v});",
        _X86_TRANSPOSE4.replace("{V}", "__m512").replace("{P}", "_mm512"),
        "_mm_storeu_ps({p}, _mm512_extractf32x4_ps({v}, {g}));",
        "__m512i",
        "_mm512_loadu_si512({p})",
        "_mm512_sub_epi32({a}, {b})",
        "_mm512_mullo_epi32({a}, _mm512_set1_epi32({m}))",
        "_mm512_castsi512_ps({a})",
        "pt_st64({p}, _mm256_extract_epi64({v}, {g}));",
    ),
    SimdISA(
        "avx2",
        ("avx2", "fma"),
        8,
        "immintrin.h",
        "__m256",
        "_mm256_setzero_ps()",
        "_mm256_loadu_ps({p})",
        "_mm256_broadcast_ss({p})",
        "_mm256_fmadd_ps({a}, {b}, {acc})",
        "_mm256_storeu_ps({p}, {v});",
        _X86_TRANSPOSE4.replace("{V}", "__m256").replace("{P}", "_mm256"),
        "_mm_storeu_ps({p}, _mm256_extractf128_ps({v}, {g}));",
        "__m256i",
        "_mm256_loadu_si256((const __m256i*)({p}))",
        "_mm256_sub_epi32({a}, {b})",
        "_mm256_mullo_epi32({a}, _mm256_set1_epi32({m}))",
        "_mm256_castsi256_ps({a})",
    ),
    SimdISA(
        "neon",
        ("asimd",),
        4,
        "arm_neon.h",
        "float32x4_t",
        "vdupq_n_f32(0.0f)",
        "vld1q_f32({p})",
        "vld1q_dup_f32({p})",
        "vfmaq_f32({acc}, {a}, {b})",
        "vst1q_f32({p}, {v});",
        "float32x4x2_t t0 = vtrnq_f32(a0, a1), t1 = vtrnq_f32(a2, a3);\n"
        "float32x4_t u0 = vcombine_f32(vget_low_f32(t0.val[0]), vget_low_f32(t1.val[0]));\n"
        "float32x4_t u1 = vcombine_f32(vget_low_f32(t0.val[1]), vget_low_f32(t1.val[1]));\n"
        "float32x4_t u2 = vcombine_f32(vget_high_f32(t0.val[0]), vget_high_f32(t1.val[0]));\n"
        "float32x4_t u3 = vcombine_f32(vget_high_f32(t0.val[1]), vget_high_f32(t1.val[1]));",
        "vst1q_f32({p}, {v});",
        "int32x4_t",
        "vld1q_s32({p})",
        "vsubq_s32({a}, {b})",
        "vmulq_n_s32({a}, {m})",
        "vreinterpretq_f32_s32({a})",
    ),
)


# AVX-512 (``store4_bf16``): 16 float32 to bfloat16 by their bits, to nearest even, NaN
# kept quiet, as ``pt.cast`` and the scalar ``pt_dot_bf16_round`` (``ROUND_BF16``) round
# (subnormals included, where ``vcvtneps2bf16`` flushes them to zero)
BF16_LANES = """#ifndef PT_BF16_LANES
#define PT_BF16_LANES
#include <string.h>
static inline void pt_st64(void* p, int64_t v) { memcpy(p, &v, 8); }
static inline __m256i pt_bf16_lanes(__m512 f) {
  __m512i b = _mm512_castps_si512(f), hi = _mm512_srli_epi32(b, 16);
  __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, bias), 16);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}
#endif"""


def simd_isa(target) -> SimdISA | None:
    """The micro-kernels' ISA for ``target`` (a pt.Target), or None (portable C only)."""
    for isa in ISAS:
        if target.has(*isa.needs) and isa.lanes == target.vector_lanes("float32"):
            return isa
    return None


def conv_tile(isa: SimdISA, C: int, R: int, S: int, hb: int, wb: int, kb: int, stride: int):
    """The intrinsic ``out[y, x, k] = sum_{c,r,s} P[c, y*st + r, x*st + s] * W[c, r, s, k]``
    over a tile of ``hb`` rows, ``wb`` columns and ``kb`` channels (whole vectors of ``isa``)."""
    if kb % isa.lanes:
        raise ValueError(
            f"conv_tile: {kb} channels are not whole {isa.name} vectors of {isa.lanes}"
        )
    st = stride
    P = pt.placeholder((C, (hb - 1) * st + R, (wb - 1) * st + S), name="inp")
    W = pt.placeholder((C, R, S, kb), name="wgt")
    c = pt.reduce_axis((0, C), name="c")
    r = pt.reduce_axis((0, R), name="r")
    s = pt.reduce_axis((0, S), name="s")
    out = pt.compute(
        (hb, wb, kb),
        lambda y, x, k: pt.sum(P[c, y * st + r, x * st + s] * W[c, r, s, k], axis=[c, r, s]),
        name="tile",
    )
    name = f"conv_tile_{isa.name}_c{C}_r{R}s{S}_st{st}_{hb}x{wb}x{kb}"
    return pt.TensorIntrin.register(name, out.op, _conv_source(isa, name, C, R, S, hb, wb, kb, st))


def _conv_source(isa: SimdISA, name, C, R, S, hb, wb, kb, st) -> str:
    L, V = isa.lanes, isa.vtype
    nk = kb // L
    pix = [(y, x) for y in range(hb) for x in range(wb)]
    acc = {(y, x, v): f"a{y}_{x}_{v}" for y, x in pix for v in range(nk)}
    lines = [
        f"#include <{isa.header}>",
        f"static inline void {name}(const float* restrict in, int64_t i0, int64_t i1, int64_t i2,",
        "    const float* restrict w, int64_t w0, int64_t w1, int64_t w2, int64_t w3,",
        "    float* restrict out, int64_t o0, int64_t o1, int64_t o2) {",
        "  if (w3 != 1 || o2 != 1) {  /* channels not contiguous: the plain loops */",
        f"    for (int64_t y = 0; y < {hb}; ++y)",
        f"      for (int64_t x = 0; x < {wb}; ++x)",
        f"        for (int64_t k = 0; k < {kb}; ++k) {{",
        "          float t = 0.0f;",
        f"          for (int64_t c = 0; c < {C}; ++c)",
        f"            for (int64_t r = 0; r < {R}; ++r)",
        f"              for (int64_t s = 0; s < {S}; ++s)",
        f"                t += in[c * i0 + (y * {st} + r) * i1 + (x * {st} + s) * i2]"
        " * w[c * w0 + r * w1 + s * w2 + k * w3];",
        "          out[y * o0 + x * o1 + k * o2] = t;",
        "        }",
        "    return;",
        "  }",
        f"  {V} " + ", ".join(f"{a} = {isa.zero}" for a in acc.values()) + ";",
        f"  for (int64_t c = 0; c < {C}; ++c) {{",
        f"    for (int64_t r = 0; r < {R}; ++r) {{",
        f"      for (int64_t s = 0; s < {S}; ++s) {{",
        "        const float* ip = in + c * i0 + r * i1 + s * i2;",
        "        const float* wp = w + c * w0 + r * w1 + s * w2;",
    ]

    def wload(v):
        return isa.load.format(p=f"wp + {v * L}")

    def pload(y, x):
        return isa.bcast.format(p=f"ip + {y * st} * i1 + {x * st} * i2")

    def fma(y, x, v):
        return f"{acc[y, x, v]} = " + isa.fma.format(a=f"p{y}_{x}", b=f"w{v}", acc=acc[y, x, v])

    body = []
    if nk <= len(pix):  # weights held, one pixel at a time
        body += [f"{V} w{v} = {wload(v)};" for v in range(nk)]
        for y, x in pix:
            body.append(f"{V} p{y}_{x} = {pload(y, x)};")
            body += [fma(y, x, v) + ";" for v in range(nk)]
    else:  # pixels held, one weight vector at a time
        body += [f"{V} p{y}_{x} = {pload(y, x)};" for y, x in pix]
        for v in range(nk):
            body.append(f"{V} w{v} = {wload(v)};")
            body += [fma(y, x, v) + ";" for y, x in pix]
    lines += ["        " + b for b in body]
    lines += ["      }", "    }", "  }"]
    lines += [
        "  " + isa.store.format(p=f"out + {y} * o0 + {x} * o1 + {v * L}", v=a)
        for (y, x, v), a in acc.items()
    ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def gemm_tile(isa: SimdISA, mr: int, nc: int, K: int):
    """The intrinsic ``out[i, j] = sum_k a[i, k] * b[k, j]`` over a register tile of ``mr``
    rows x ``nc`` columns (whole vectors of ``isa``), the whole reduction of ``K`` inside:

        acc[i][v] = 0                                   (mr * nc / L registers)
        for k < K:
          b[v] = load(B[k, L*v : L*v + L])
          acc[i][v] += broadcast(A[i, k]) * b[v]        (i < mr, unrolled)
        out[i, L*v : L*v + L] = acc[i][v]

    gcc keeps an accumulator array of ``omp simd`` loops in memory (a load and a store per
    FMA); named vector variables are registers."""
    if nc % isa.lanes:
        raise ValueError(f"gemm_tile: {nc} columns are not whole {isa.name} vectors of {isa.lanes}")
    A = pt.placeholder((mr, K), name="a")
    B = pt.placeholder((K, nc), name="b")
    k = pt.reduce_axis((0, K), name="k")
    out = pt.compute((mr, nc), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="tile")
    name = f"gemm_tile_{isa.name}_{mr}x{nc}x{K}"
    return pt.TensorIntrin.register(name, out.op, _gemm_source(isa, name, mr, nc, K))


def _gemm_source(isa: SimdISA, name: str, mr: int, nc: int, K: int) -> str:
    L, V = isa.lanes, isa.vtype
    nv = nc // L
    acc = {(i, v): f"c{i}_{v}" for i in range(mr) for v in range(nv)}
    lines = [
        f"#include <{isa.header}>",
        f"static inline void {name}(const float* restrict a, int64_t a0, int64_t a1,",
        "    const float* restrict b, int64_t b0, int64_t b1,",
        "    float* restrict out, int64_t o0, int64_t o1) {",
        "  if (b1 != 1 || o1 != 1) {  /* columns not contiguous: the plain loops */",
        f"    for (int64_t i = 0; i < {mr}; ++i)",
        f"      for (int64_t j = 0; j < {nc}; ++j) {{",
        "        float t = 0.0f;",
        f"        for (int64_t k = 0; k < {K}; ++k) t += a[i * a0 + k * a1] * b[k * b0 + j * b1];",
        "        out[i * o0 + j * o1] = t;",
        "      }",
        "    return;",
        "  }",
        f"  {V} " + ", ".join(f"{c} = {isa.zero}" for c in acc.values()) + ";",
        f"  for (int64_t k = 0; k < {K}; ++k) {{",
        "    const float* bp = b + k * b0;",
        "    const float* ap = a + k * a1;",
    ]
    body = [f"{V} y{v} = " + isa.load.format(p=f"bp + {v * L}") + ";" for v in range(nv)]
    for i in range(mr):
        body.append(f"{V} x{i} = " + isa.bcast.format(p=f"ap + {i} * a0") + ";")
        body += [
            f"{acc[i, v]} = " + isa.fma.format(a=f"x{i}", b=f"y{v}", acc=acc[i, v]) + ";"
            for v in range(nv)
        ]
    lines += ["    " + b for b in body]
    lines.append("  }")
    lines += [
        "  " + isa.store.format(p=f"out + {i} * o0 + {v * L}", v=c) for (i, v), c in acc.items()
    ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def tile_transpose(
    isa: SimdISA, hb: int, wb: int, kb: int, dtype="float32", offset=None, rounded=False
):
    """The intrinsic ``out[k, y, x] = in[y, x, k]`` over a tile of ``hb`` rows, ``wb``
    columns and ``kb`` channels (whole vectors of ``isa``): a channels-innermost register
    tile copied back to NCHW. ``dtype``: float32 or int32; ``offset`` (int32): the copy
    subtracts ``offset * ws[k]`` (``conv_dot``'s unsigned input); ``rounded`` (float32,
    ISAs with ``store4_bf16``): ``out`` is bfloat16, each value rounded to nearest even
    as ``pt.cast`` rounds. Four columns at a time, in registers (the rest one by one):

        for y < hb: for v < kb / L: for x0 in 0, 4, ..:
          a[j] = load(in[y, x0 + j, L*v : L*v + L])            (j < 4; - offset * ws)
          u = transpose4(a)        (u[j]'s group g: channel 4g + j of the four columns)
          out[L*v + 4g + j, y, x0 : x0 + 4] = u[j].group(g)    (L stores of four lanes)
    """
    if kb % isa.lanes:
        raise ValueError(
            f"tile_transpose: {kb} channels are not whole {isa.name} vectors of {isa.lanes}"
        )
    if rounded and (dtype != "float32" or offset is not None or not isa.store4_bf16):
        raise ValueError(f"tile_transpose: no rounded {dtype} copy on {isa.name}")
    A = pt.placeholder((hb, wb, kb), dtype, name="inp")
    inputs = [A]
    if rounded:
        out = pt.compute((kb, hb, wb), lambda k, y, x: pt.cast("bfloat16", A[y, x, k]), name="tile")
        name = f"tile_transpose_{isa.name}_{dtype}_bf16_{hb}x{wb}x{kb}"
    elif offset is None:
        out = pt.compute((kb, hb, wb), lambda k, y, x: A[y, x, k], name="tile")
        name = f"tile_transpose_{isa.name}_{dtype}_{hb}x{wb}x{kb}"
    else:
        ws = pt.placeholder((kb,), "int32", name="ws")
        inputs.append(ws)
        out = pt.compute(
            (kb, hb, wb),
            lambda k, y, x: A[y, x, k] - pt.const(offset, "int32") * ws[k],
            name="tile",
        )
        name = f"tile_transpose_{isa.name}_{dtype}_off{offset}_{hb}x{wb}x{kb}"
    src = _transpose_source(isa, name, (hb, wb, kb), dtype, offset, rounded)
    return pt.TensorIntrin.register(name, out.op, src, inputs=inputs)


def _transpose_source(
    isa: SimdISA, name: str, tile: tuple, dtype: str, offset, rounded=False
) -> str:
    (hb, wb, kb), L, V = tile, isa.lanes, isa.vtype
    T = {"float32": "float", "int32": "int32_t"}[dtype]
    OT = "uint16_t" if rounded else T

    # int32: the offset subtracted in unsigned arithmetic (wrapping, as the vector
    # instructions do, where a signed overflow would be undefined)
    def minus(v, w):
        if rounded:
            return f"pt_dot_bf16_round({v})"
        return v if offset is None else f"(int32_t)((uint32_t){v} - {offset}u * (uint32_t){w})"

    lines = [
        f"#include <{isa.header}>",
        *([ROUND_BF16, BF16_LANES] if rounded else []),
        f"static inline void {name}(const {T}* restrict in, int64_t i0, int64_t i1, int64_t i2,",
        *([] if offset is None else ["    const int32_t* restrict ws, int64_t w0,"]),
        f"    {OT}* restrict out, int64_t o0, int64_t o1, int64_t o2) {{",
        "  if (i2 != 1 || o2 != 1"
        + ("" if offset is None else " || w0 != 1")
        + ") {  /* not contiguous: plain loops */",
        f"    for (int64_t k = 0; k < {kb}; ++k)",
        f"      for (int64_t y = 0; y < {hb}; ++y)",
        f"        for (int64_t x = 0; x < {wb}; ++x)",
        "          out[k * o0 + y * o1 + x * o2] = "
        + minus("in[y * i0 + x * i1 + k * i2]", "ws[k * w0]")
        + ";",
        "    return;",
        "  }",
        f"  for (int64_t y = 0; y < {hb}; ++y) {{",
        f"    for (int64_t v = 0; v < {kb // L}; ++v) {{",
        f"      const {T}* ip = in + y * i0 + v * {L};",
        f"      {OT}* op = out + v * {L} * o0 + y * o1;",
    ]
    if offset is not None:
        lines.append(
            f"      {isa.ivtype} off = "
            + isa.imul.format(a=isa.iload.format(p=f"ws + v * {L}"), m=offset)
            + ";"
        )

    def load(p):  # four columns' lanes as the float vector type (an int32's bits)
        if dtype == "float32":
            return isa.load.format(p=p)
        v = isa.iload.format(p=p)
        return isa.as_float.format(a=v if offset is None else isa.isub.format(a=v, b="off"))

    def cast(p):  # the float vector type's store, of an int32's bits
        return p if dtype == "float32" else f"(float*)({p})"

    for x0 in range(0, wb - 3, 4):
        lines.append(
            f"      {{ {V} "
            + ", ".join(f"a{j} = " + load(f"ip + {x0 + j} * i1") for j in range(4))
            + ";"
        )
        lines += ["        " + t for t in isa.transpose4.split("\n")]
        if rounded:
            lines += [f"        __m256i h{j} = pt_bf16_lanes(u{j});" for j in range(4)]
        lines += [
            "        "
            + (
                isa.store4_bf16.format(p=f"op + {4 * g + j} * o0 + {x0}", v=f"h{j}", g=g)
                if rounded
                else isa.store4.format(p=cast(f"op + {4 * g + j} * o0 + {x0}"), v=f"u{j}", g=g)
            )
            for g in range(L // 4)
            for j in range(4)
        ]
        lines.append("      }")
    lines += [
        f"      for (int64_t k = 0; k < {L}; ++k) op[k * o0 + {x}] = "
        + minus(f"ip[{x} * i1 + k]", f"ws[v * {L} + k]")
        + ";"
        for x in range(wb - wb % 4, wb)
    ]
    lines += ["    }", "  }", "}"]
    return "\n".join(lines) + "\n"
