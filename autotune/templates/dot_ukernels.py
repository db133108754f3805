"""Dot-product micro-kernels for int8 and bfloat16 GEMMs, declared as tensor intrinsics.

The instructions multiply ``g`` adjacent elements of the reduction at once and add
them into one 32-bit lane (``vpdpbusd``: 4 int8 pairs into an int32; ``vdpbf16ps``: 2
bfloat16 pairs into a float32; NEON ``sdot``: 4 int8 pairs). B is packed so that the
``g`` reduction elements of one column are adjacent, panel by panel,
``BP[jo, ko, ji, kq] = B[ko * g + kq, jo * nr + ji]``, and the GEMM is written
over the two reduce axes ``ko`` (K / g) and ``kq`` (g). The register tile of
``mr`` rows x ``nr`` columns (``nr / lanes`` vectors) is one call:

    for ko in K / g:                               (whole reduction in the call)
      b[v] = load(BP[jo, ko, v*L*g : (v+1)*L*g])   (L lanes of g elements)
      for r in mr:
        a = broadcast(A[r, ko*g : ko*g + g])       (g elements as one 32-bit lane)
        acc[r][v] = dot(acc[r][v], a, b[v])
    out[r, v*L : v*L + L] = acc[r][v]

``vpdpbusd`` multiplies an *unsigned* byte by a signed one. B is packed as
``b + 128`` (uint8, once per panel) and is the unsigned operand; A, broadcast straight
from memory, the signed one; the kernel subtracts ``128 * sum_k A[i, k]`` per row:
``sum (b + 128) a - 128 sum a = sum a b``, exact in int32 arithmetic (wrapping in
between cancels). The GEMM is defined on the packed operand as
``int32(a) * (int32(bp) - 128)``, so the ragged tiles' plain loops agree. AVX2
without VNNI has ``vpmaddubsw`` (u8 x s8 pairs into *saturating* int16: 255 * -128 * 2
overflows, so it cannot be exact on full-range int8); it uses
``vpmovsxbw`` + ``vpmaddwd`` instead, two int8 pairs (widened to int16) per int32 lane.

Which kernel is used is decided by the task's target (``target.has``), never the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import pypto as pt
from pypto.schedule import accumulator_dtype


@dataclass(frozen=True)
class DotISA:
    """How one ISA spells a ``g``-wide dot product into 32-bit lanes."""

    name: str
    needs: tuple  # target features
    dtype: str  # the inputs' dtype
    group: int  # g: reduction elements per 32-bit lane
    lanes: int  # 32-bit lanes per vector
    header: str
    acc_type: str  # vector of accumulators
    op_type: str  # vector of packed operands
    zero: str
    load: str  # {p}: address of L * g packed B elements
    bcast: str  # {p}: address of g elements of A, broadcast to every lane (offset included)
    dot: str  # {acc} + dot({a}, {b})
    store: str  # {p}, {v}
    b_offset: bool = False  # B packed as unsigned b + 128 (the instruction's u8 operand)
    sub: str = ""  # {a} - {b}
    set1: str = ""  # {x}: an int32 in every lane


# helpers shared by every kernel of a module, defined once
_HELPERS = """#ifndef PT_DOT_HELPERS
#define PT_DOT_HELPERS
#include <string.h>
static inline int32_t pt_ld32(const void* p) { int32_t v; memcpy(&v, p, 4); return v; }
static inline int32_t pt_pair16(const int8_t* p) {  /* two int8 as two int16 halves */
  return (int32_t)((uint32_t)(uint16_t)(int16_t)p[0] | ((uint32_t)(uint16_t)(int16_t)p[1] << 16));
}
static inline float pt_dot_bf16(uint16_t b) {
  union { uint32_t u; float f; } v = { (uint32_t)b << 16 };
  return v.f;
}
#endif"""
# gcc's vpdpbusd builtins copy the accumulator around (and spill a full register tile);
# the instruction written out keeps each accumulator in its register
_ASM = {
    "pt_dpbusd512": """#ifndef PT_DPBUSD512
#define PT_DPBUSD512
static inline __m512i pt_dpbusd512(__m512i acc, __m512i a, __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#endif""",
    "pt_dpbf16512": """#ifndef PT_DPBF16512
#define PT_DPBF16512
static inline __m512 pt_dpbf16512(__m512 acc, __m512 a, __m512 b) {  /* pairs of bf16 */
  __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#endif""",
    "pt_dpbusd256": """#ifndef PT_DPBUSD256
#define PT_DPBUSD256
static inline __m256i pt_dpbusd256(__m256i acc, __m256i a, __m256i b) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
  return acc;
}
#endif""",
}

ISAS = (
    DotISA(
        "avx512vnni", ("avx512_vnni", "avx512f"), "int8", 4, 16, "immintrin.h",
        "__m512i", "__m512i", "_mm512_setzero_si512()", "_mm512_loadu_si512({p})",
        "_mm512_set1_epi32(pt_ld32({p}))",
        "pt_dpbusd512({acc}, {b}, {a})", "_mm512_storeu_si512({p}, {v});",
        True, "_mm512_sub_epi32({a}, {b})", "_mm512_set1_epi32({x})",
    ),
    DotISA(
        "avxvnni", ("avx_vnni", "avx2"), "int8", 4, 8, "immintrin.h",
        "__m256i", "__m256i", "_mm256_setzero_si256()",
        "_mm256_loadu_si256((const __m256i*)({p}))",
        "_mm256_set1_epi32(pt_ld32({p}))",
        "pt_dpbusd256({acc}, {b}, {a})",
        "_mm256_storeu_si256((__m256i*)({p}), {v});",
        True, "_mm256_sub_epi32({a}, {b})", "_mm256_set1_epi32({x})",
    ),
    DotISA(
        "avx512bw", ("avx512bw", "avx512f"), "int8", 2, 16, "immintrin.h",
        "__m512i", "__m512i", "_mm512_setzero_si512()",
        "_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)({p})))",
        "_mm512_set1_epi32(pt_pair16({p}))",
        "_mm512_add_epi32({acc}, _mm512_madd_epi16({a}, {b}))",
        "_mm512_storeu_si512({p}, {v});",
    ),
    DotISA(
        "avx2", ("avx2",), "int8", 2, 8, "immintrin.h",
        "__m256i", "__m256i", "_mm256_setzero_si256()",
        "_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)({p})))",
        "_mm256_set1_epi32(pt_pair16({p}))",
        "_mm256_add_epi32({acc}, _mm256_madd_epi16({a}, {b}))",
        "_mm256_storeu_si256((__m256i*)({p}), {v});",
    ),
    DotISA(
        "neondot", ("asimddp",), "int8", 4, 4, "arm_neon.h",
        "int32x4_t", "int8x16_t", "vdupq_n_s32(0)", "vld1q_s8({p})",
        "vreinterpretq_s8_s32(vdupq_n_s32(pt_ld32({p})))",
        "vdotq_s32({acc}, {a}, {b})", "vst1q_s32({p}, {v});",
    ),
    DotISA(
        "avx512bf16", ("avx512_bf16", "avx512f"), "bfloat16", 2, 16, "immintrin.h",
        "__m512", "__m512", "_mm512_setzero_ps()",
        "_mm512_loadu_ps({p})",
        "_mm512_castsi512_ps(_mm512_set1_epi32(pt_ld32({p})))",
        "pt_dpbf16512({acc}, {a}, {b})", "_mm512_storeu_ps({p}, {v});",
    ),
)  # fmt: skip

_C_TYPES = {"int8": ("int8_t", "int32_t"), "bfloat16": ("uint16_t", "float")}


def dot_isa(target, dtype: str) -> DotISA | None:
    """The dot-product kernel for ``dtype`` GEMMs on ``target`` (a pt.Target), or None."""
    for isa in ISAS:
        if (
            isa.dtype == dtype
            and target.has(*isa.needs)
            and isa.lanes * 4 * 8 == target.vector_bits
        ):
            return isa
    return None


def usable(target, dtype: str, K: int) -> DotISA | None:
    """The dot kernel for a ``dtype`` GEMM with reduction ``K`` on ``target``, or None
    (no kernel, or K not a whole number of groups)."""
    isa = dot_isa(target, dtype)
    return isa if isa is not None and K % isa.group == 0 else None


def packed_b(isa: DotISA, read, N: int, K: int, nr: int, name: str = "B_packed"):
    """``BP[jo, ko, ji, kq] = B[ko * g + kq, jo * nr + ji]`` with ``read(k, n)`` giving
    ``B[k, n]`` (the ragged last panel repeats column N - 1; those lanes are never
    stored), plus 128 as uint8 for an ISA whose instruction wants B unsigned."""
    g = isa.group

    def value(jo, ko, ji, kq):
        b = read(ko * g + kq, pt.min(jo * nr + ji, N - 1))
        return pt.cast("uint8", pt.cast("int32", b) + 128) if isa.b_offset else b

    return pt.compute((-(-N // nr), K // g, nr, g), value, name=name)


def dot_gemm(isa: DotISA, A, read_b, shape: tuple, mr: int, nr: int, product, names=("C", "B")):
    """``C[i, j] = sum_{ko, kq} A[i, ko*g + kq] * BP[j // nr, ko, j % nr, kq]`` over the
    packed B of ``read_b(k, n)`` (``shape`` = (M, N, K)), and the tile intrinsic for it
    (on the accumulator ``cache_write`` makes). ``product(a, b)`` is the template's
    product. Returns ``(C, BP, intrinsic)``."""
    g = isa.group
    M, N, K = shape
    BP = packed_b(isa, read_b, N, K, nr, name=f"{names[1]}_packed")
    prod = operand_product(isa, product)
    ko, kq = pt.reduce_axis((0, K // g), name="ko"), pt.reduce_axis((0, g), name="kq")
    C = pt.compute(
        (M, N),
        lambda i, j: pt.sum(prod(A[i, ko * g + kq], BP[j // nr, ko, j % nr, kq]), axis=[ko, kq]),
        name=names[0],
    )
    acc = accumulator_dtype(C.dtype)
    tile = gemm_tile(isa, mr, nr, K, lambda a, b: pt.cast(acc, prod(a, b)))
    return C, BP, tile


def operand_product(isa: DotISA, product):
    """How the GEMM multiplies A by packed B: ``product`` (the template's), or for an
    offset B ``int32(a) * (int32(b) - 128)``."""
    if not isa.b_offset:
        return product
    return lambda a, b: pt.cast("int32", a) * (pt.cast("int32", b) - 128)


def gemm_tile(isa: DotISA, mr: int, nr: int, K: int, product):
    """The intrinsic ``out[i, j] = sum_{ko, kq} A[i, ko*g + kq] * BP[ko, j, kq]``
    (``product`` multiplies as the template does) over an ``mr x nr`` tile."""
    g = isa.group
    if nr % isa.lanes or K % g:
        raise ValueError(
            f"gemm_tile: {nr} columns are not whole {isa.name} vectors of {isa.lanes}, "
            f"or K={K} is not a multiple of {g}"
        )
    a = pt.placeholder((mr, K), isa.dtype, name="a")
    b = pt.placeholder((K // g, nr, g), "uint8" if isa.b_offset else isa.dtype, name="b")
    ko = pt.reduce_axis((0, K // g), name="ko")
    kq = pt.reduce_axis((0, g), name="kq")
    out = pt.compute(
        (mr, nr),
        lambda i, j: pt.sum(product(a[i, ko * g + kq], b[ko, j, kq]), axis=[ko, kq]),
        name="tile",
    )
    name = f"gemm_{isa.name}_{mr}x{nr}_k{K}"
    return pt.TensorIntrin.register(name, out.op, _source(isa, name, mr, nr, K), inputs=[a, b])


def _source(isa: DotISA, name: str, mr: int, nr: int, K: int) -> str:
    g, L = isa.group, isa.lanes
    elem, acc_c = _C_TYPES[isa.dtype]
    belem = "uint8_t" if isa.b_offset else elem
    nv = nr // L
    acc = {(r, v): f"c{r}_{v}" for r in range(mr) for v in range(nv)}
    widen = "pt_dot_bf16" if isa.dtype == "bfloat16" else "(int32_t)"
    bshift = " - 128" if isa.b_offset else ""
    lines = [
        f"#include <{isa.header}>",
        _HELPERS,
        *(text for fn, text in _ASM.items() if fn in isa.dot),
        f"static inline void {name}(const {elem}* restrict a, int64_t a0, int64_t a1,",
        f"    const {belem}* restrict b, int64_t b0, int64_t b1, int64_t b2,",
        f"    {acc_c}* restrict out, int64_t o0, int64_t o1) {{",
        f"  if (a1 != 1 || b1 != {g} || b2 != 1 || o1 != 1) {{  /* other strides: plain loops */",
        f"    for (int64_t i = 0; i < {mr}; ++i)",
        f"      for (int64_t j = 0; j < {nr}; ++j) {{",
        f"        {acc_c} t = 0;",
        f"        for (int64_t k = 0; k < {K}; ++k)",
        f"          t += {widen}(a[i * a0 + k * a1])",
        f"            * ({widen}(b[(k / {g}) * b0 + j * b1 + (k % {g}) * b2]){bshift});",
        "        out[i * o0 + j * o1] = t;",
        "      }",
        "    return;",
        "  }",
        f"  {isa.acc_type} " + ", ".join(f"{c} = {isa.zero}" for c in acc.values()) + ";",
    ]
    if isa.b_offset:  # sum (b + 128) a = sum a b + 128 sum a: the row sums of A
        for r in range(mr):
            lines += [
                f"  int32_t rs{r} = 0;",
                f"  for (int64_t k = 0; k < {K}; ++k) rs{r} += a[{r} * a0 + k];",
            ]
    lines += [
        f"  for (int64_t ko = 0; ko < {K // g}; ++ko) {{",
        f"    const {belem}* bp = b + ko * b0;",
        f"    const {elem}* ap = a + ko * {g};",
    ]
    body = [f"{isa.op_type} vb{v} = {isa.load.format(p=f'bp + {v * L * g}')};" for v in range(nv)]
    for r in range(mr):
        body.append(f"{isa.op_type} va{r} = {isa.bcast.format(p=f'ap + {r} * a0')};")
        body += [
            f"{acc[r, v]} = {isa.dot.format(acc=acc[r, v], a=f'va{r}', b=f'vb{v}')};"
            for v in range(nv)
        ]
    lines += ["    " + x for x in body]
    lines.append("  }")
    for (r, v), c in acc.items():
        off = isa.set1.format(x=f"128 * rs{r}")
        val = isa.sub.format(a=c, b=off) if isa.b_offset else c
        lines.append("  " + isa.store.format(p=f"out + {r} * o0 + {v * L}", v=val))
    lines.append("}")
    return "\n".join(lines) + "\n"
