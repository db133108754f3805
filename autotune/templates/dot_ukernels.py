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
from memory, the signed one. The kernel computes the raw ``sum_k A[i, k] * bp[k, j]``
and the copy out of its tile subtracts ``128 * RS[i]``, the row sums of A computed
once per call (``A_rowsum``): ``sum (b + 128) a - 128 sum a = sum a b``, exact in
int32 arithmetic (wrapping in between cancels). Summing each tile's rows inside the
kernel instead (once per column panel) cost 10% on a Zen 5 at 1024^3. AVX2
without VNNI has ``vpmaddubsw`` (u8 x s8 pairs into *saturating* int16: 255 * -128 * 2
overflows, so it cannot be exact on full-range int8); it uses
``vpmovsxbw`` + ``vpmaddwd`` instead, two int8 pairs (widened to int16) per int32 lane.
Its broadcast operand is a pair of int16: A is widened once per call into a stage of
its own (``A_int16``, in parallel over rows), so each row's broadcast is one load
(``vpbroadcastd``) instead of two sign extensions and a shift in scalar registers per
row and pair. On AVX2 the product and its sum are one inline-assembly pair (gcc
spilled the register tile otherwise; its temporary not early-clobbered, else gcc moved
the accumulators between registers around every pair), the tile is 4 x 2 vectors
(``rows``) and, on a target whose L1 holds 48 KB, B is packed widened to int16
(``b_wide``: no sign extension per load); with a smaller L1 it is packed as int8 and
sign-extended as it is loaded (``vpmovsxbw``), half the bytes per panel.
int8 1024^3 on a Zen 4 running each target's code, 1 thread: ``x86-avx2`` 70 -> 150-157
GOP/s (80% of the ``vpmaddwd`` + ``vpaddd`` peak, 1.44-1.5x pypto's float32),
``x86-avx512`` 132 -> 180; on a Zen 5, ``x86-avx2`` 175 -> 218 GOP/s with the last two
changes (91% of that peak, 1.8x pypto's float32 there; AVX-512's B widened gained
nothing). On an AVX2-only Zen 3 (32 KB L1), 1 thread, B widened measured slower at
every depth: K = 1024 80-83 -> 97-99 GOP/s kept int8, K = 512 84-86 -> 90-93, K = 256
77-78 -> 79-88.

Which kernel is used is decided by the task's target (``target.has``), never the host.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pypto as pt
from pypto.dtypes import accumulator_dtype

from . import amx, dot_afloat
from .dot_asm import ASM


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
    a_wide: str | None = None  # A widened to this dtype once per call (the broadcast's)
    b_wide: str | None = None  # B widened to this dtype where it is packed
    wide_l1: int = 0  # b_wide only on targets whose L1 holds this many bytes (0: all)
    narrow_load: str = ""  # B's load where it stays narrow (below wide_l1): widened here
    rows: int = 0  # the default register tile's rows (0: as many as the registers hold)
    kind: str = "vector"  # "vector": registers of lanes; "amx": AMX's tile registers
    tiles: tuple | None = None  # ((rows...), (columns...)) of the register tile, if fixed
    blocks: tuple = (8, 16, 32, 64)  # the row-tile counts of the GEMM's block_i knob

    @property
    def k_step(self) -> int:
        """The reduction elements the kernel takes at a time (K must be a multiple)."""
        return self.group * (amx.TILE_ROWS if self.kind == "amx" else 1)


# helpers shared by every kernel of a module, defined once
_HELPERS = """#ifndef PT_DOT_HELPERS
#define PT_DOT_HELPERS
#include <string.h>
static inline int32_t pt_ld32(const void* p) { int32_t v; memcpy(&v, p, 4); return v; }
static inline float pt_dot_bf16(uint16_t b) {
  union { uint32_t u; float f; } v = { (uint32_t)b << 16 };
  return v.f;
}
#endif"""
# a kernel writing bfloat16 rounds (its plain loops) as the output's cast does
ROUND_BF16 = """#ifndef PT_DOT_BF16_ROUND
#define PT_DOT_BF16_ROUND
static inline uint16_t pt_dot_bf16_round(float f) {  /* to nearest even; NaN stays NaN */
  union { float f; uint32_t u; } v = { f };
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float pt_dot_bf16_round_f(float f) {  /* f rounded to bfloat16, as a float */
  union { uint32_t u; float f; } v = { (uint32_t)pt_dot_bf16_round(f) << 16 };
  return v.f;
}
#endif"""
ISAS = (
    DotISA(
        "avx512vnni", ("avx512_vnni", "avx512f"), "int8", 4, 16, "immintrin.h",
        "__m512i", "__m512i", "_mm512_setzero_si512()", "_mm512_loadu_si512({p})",
        "_mm512_set1_epi32(pt_ld32({p}))",
        "pt_dpbusd512({acc}, {b}, {a})", "_mm512_storeu_si512({p}, {v});", True,
    ),
    DotISA(
        "avxvnni", ("avx_vnni", "avx2"), "int8", 4, 8, "immintrin.h",
        "__m256i", "__m256i", "_mm256_setzero_si256()",
        "_mm256_loadu_si256((const __m256i*)({p}))",
        "_mm256_set1_epi32(pt_ld32({p}))",
        "pt_dpbusd256({acc}, {b}, {a})",
        "_mm256_storeu_si256((__m256i*)({p}), {v});", True,
    ),
    DotISA(
        "avx512bw", ("avx512bw", "avx512f"), "int8", 2, 16, "immintrin.h",
        "__m512i", "__m512i", "_mm512_setzero_si512()",
        "_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)({p})))",
        "_mm512_set1_epi32(pt_ld32({p}))",
        "_mm512_add_epi32({acc}, _mm512_madd_epi16({a}, {b}))",
        "_mm512_storeu_si512({p}, {v});", a_wide="int16",
    ),
    DotISA(
        "avx2", ("avx2",), "int8", 2, 8, "immintrin.h",
        "__m256i", "__m256i", "_mm256_setzero_si256()",
        "_mm256_loadu_si256((const __m256i*)({p}))",
        "_mm256_set1_epi32(pt_ld32({p}))",
        "pt_madd256({acc}, {a}, {b})",
        "_mm256_storeu_si256((__m256i*)({p}), {v});", a_wide="int16", b_wide="int16", rows=4,
        wide_l1=48 << 10,
        narrow_load="_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)({p})))",
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

# AMX's tile multiplies (x86-amx), preferred where K is whole steps of 16 groups
TILE_ISAS = (
    DotISA(
        "amxint8", ("amx_tile", "amx_int8"), "int8", 4, 16, "immintrin.h",
        "", "", "", "", "", amx.INSTRUCTION["int8"], "", rows=32, kind="amx",
        tiles=amx.TILE_SHAPES, blocks=amx.BLOCKS,
    ),
    DotISA(
        "amxuint8", ("amx_tile", "amx_int8"), "uint8", 4, 16, "immintrin.h",
        "", "", "", "", "", amx.INSTRUCTION["uint8"], "", rows=32, kind="amx",
        tiles=amx.TILE_SHAPES, blocks=amx.BLOCKS,
    ),
    DotISA(
        "amxbf16", ("amx_tile", "amx_bf16", "avx512_bf16"), "bfloat16", 2, 16, "immintrin.h",
        "", "", "", "", "", amx.INSTRUCTION["bfloat16"], "", rows=32, kind="amx",
        tiles=amx.TILE_SHAPES, blocks=amx.BLOCKS,
    ),
)  # fmt: skip

_ACC_C = {"int8": "int32_t", "uint8": "int32_t", "bfloat16": "float"}  # the accumulators' C type
_KIND_HELPERS = {"amx": (amx.HELPERS,)}  # C an ISA's kind needs besides its ISA's
_C_ELEM = {"int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "bfloat16": "uint16_t"}


def c_elem(dtype: str) -> str:
    """The C type of an operand element of a dot kernel."""
    return _C_ELEM[dtype]


def helpers(isa: DotISA) -> str:
    """The C helpers a kernel of ``isa`` calls (each guarded: once per module)."""
    own = _KIND_HELPERS.get(isa.kind, ())
    return "\n".join([_HELPERS, *own, *(text for fn, text in ASM.items() if fn in isa.dot)])


def packed_dtype(isa: DotISA) -> str:
    """The dtype of B's packed panels: offset to uint8, widened, or the inputs'."""
    return "uint8" if isa.b_offset else isa.b_wide or isa.dtype


def dot_isa(target, dtype: str) -> DotISA | None:
    """The dot-product kernel for ``dtype`` GEMMs on ``target`` (a pt.Target), or None."""
    for isa in ISAS:
        if (
            isa.dtype == dtype
            and target.has(*isa.needs)
            and isa.lanes * 4 * 8 == target.vector_bits
        ):
            return _for_l1(isa, target.l1d_bytes or 0)
    return None


def _for_l1(isa: DotISA, l1: int) -> DotISA:
    """``isa`` with B packed narrow, sign-extended as it is loaded (its kernels named
    ``..._b8``), on a target whose L1 is below ``isa.wide_l1``; else as it is."""
    if isa.b_wide and l1 < isa.wide_l1:
        return replace(isa, name=f"{isa.name}_b8", b_wide=None, load=isa.narrow_load)
    return isa


def usable(target, dtype: str, K: int, M: int = 0, N: int = 0) -> DotISA | None:
    """The kernel for an ``M x N`` ``dtype`` GEMM with reduction ``K`` on ``target``:
    AMX's tiles where the target has them, K is whole steps of them and the output holds
    a whole tile (M, N at least 16), else the vector dot kernel (None: no kernel, or K
    not a whole number of groups)."""
    for isa in TILE_ISAS:
        rows = isa.tiles[0]
        if (
            isa.dtype == dtype
            and target.has(*isa.needs)
            and K % isa.k_step == 0
            and min(M, N) >= min(rows)
        ):
            return isa
    isa = dot_isa(target, dtype)
    return isa if isa is not None and K % isa.group == 0 else None


def packed_b(isa: DotISA, read, N: int, K: int, nr: int, name: str = "B_packed", batch=()):
    """``BP[*b, jo, ko, ji, kq] = B[*b, ko * g + kq, jo * nr + ji]`` with
    ``read(*b, k, n)`` giving ``B[*b, k, n]`` (``batch``: the extents of leading batch
    axes; the ragged last panel repeats column N - 1; those lanes are never stored),
    plus 128 as uint8 for an ISA whose instruction wants B unsigned."""
    g = isa.group

    def value(b, jo, ko, ji, kq):
        v = read(*b, ko * g + kq, pt.min(jo * nr + ji, N - 1))
        if isa.b_offset:
            return pt.cast("uint8", pt.cast("int32", v) + 128)
        return pt.cast(isa.b_wide, v) if isa.b_wide else v

    _one_batch_axis(batch)
    if batch:
        fn = lambda b, jo, ko, ji, kq: value((b,), jo, ko, ji, kq)  # noqa: E731
    else:
        fn = lambda jo, ko, ji, kq: value((), jo, ko, ji, kq)  # noqa: E731
    return pt.compute((*batch, -(-N // nr), K // g, nr, g), fn, name=name)


def _one_batch_axis(batch: tuple) -> None:
    if len(batch) > 1:
        raise ValueError(f"dot kernels take at most one batch axis, not {len(batch)}")


@dataclass(frozen=True)
class DotGemm:
    """A GEMM over packed B (``dot_gemm``): the output ``C``, the packed ``BP``, the tile
    ``intrin``; for an offset B also the raw accumulator ``acc`` (``C = acc - 128 RS``)
    and the row sums ``RS`` of A; for an ``a_wide`` ISA, the widened A ``AW``."""

    C: pt.Tensor
    BP: pt.Tensor
    intrin: pt.TensorIntrin
    acc: pt.Tensor | None = None
    RS: pt.Tensor | None = None
    AW: pt.Tensor | None = None
    out_intrin: pt.TensorIntrin | None = None  # the kernel computing C itself (AMX)

    def accumulator(self, s, into_output: bool = False) -> pt.Tensor:
        """The stage the tile intrinsic computes, in schedule ``s``: ``cache_write`` of C,
        or the raw accumulator; with ``into_output`` (C is the kernel's output, no stage
        reads it), C itself where AMX's kernel writes it (int32 as the tiles store it,
        bfloat16 rounded from them: no local tile, no copy out). The row sums of A, or
        its widened copy, run first, in parallel over their outermost axis."""
        if self.AW is not None:
            s[self.AW].parallel(s[self.AW].op.axis[0])
            s[self.AW].vectorize(s[self.AW].op.axis[-1])
        if into_output and self.acc is None and self.out_intrin is not None:
            return self.C
        if self.acc is None:
            return s.cache_write(self.C, "local")
        s[self.RS].parallel(s[self.RS].op.axis[0])
        return self.acc

    def tile_intrin(self, stage: pt.Tensor) -> pt.TensorIntrin:
        """The intrinsic computing ``stage`` (what ``accumulator`` returned)."""
        return self.out_intrin if stage is self.C and self.out_intrin else self.intrin


def dot_gemm(
    isa: DotISA,
    A,
    read_b,
    shape: tuple,
    mr: int,
    nr: int,
    product,
    names=("C", "B"),
    batch=(),
    packed=None,
) -> DotGemm:
    """``C[*b, i, j] = sum_{ko, kq} A[*b, i, ko*g + kq] * BP[*b, j // nr, ko, j % nr, kq]``
    over the packed B of ``read_b(*b, k, n)`` (``shape`` = (M, N, K), ``batch`` the
    extents of leading batch axes of A, B and C), and the tile intrinsic for it (on the
    accumulator ``DotGemm.accumulator`` gives). ``product(a, b)`` is the template's
    product. For an offset B (``isa.b_offset``)::

        RS[*b, i] = sum_k int32(A[*b, i, k])
        acc[*b, i, j] = sum_{ko, kq} int32(A[*b, i, ko*g + kq]) * int32(BP[...])  (raw)
        C[*b, i, j] = acc[*b, i, j] - 128 * RS[*b, i]

    For an ``a_wide`` ISA, the kernel reads ``AW = a_wide(A)``, computed once. AMX's
    kernel reads A where it is when its rows start on cache lines, else copies each
    K-block's rows to an aligned slice (arrays from numpy start 16 bytes into a line:
    every row of every tile load would straddle two; 1024^3 int8 on a Sapphire Rapids,
    1 thread, 2.05 -> 1.5 ms), and computes C itself (``DotGemm.out_intrin``).
    ``packed`` (a placeholder of ``packed_b``'s shape) is B already packed by the
    caller: then ``read_b`` is unused and nothing is packed here.
    """
    g = isa.group
    M, N, K = shape
    if packed is not None:
        BP = packed
    else:
        BP = packed_b(isa, read_b, N, K, nr, name=f"{names[1]}_packed", batch=batch)
    prod = product
    if isa.b_offset or isa.a_wide:
        prod = lambda a, b: pt.cast("int32", a) * pt.cast("int32", b)  # noqa: E731
    AW = None
    if isa.a_wide:
        wide = isa.a_wide
        A = AW = pt.compute(A.shape, lambda *ix: pt.cast(wide, A[ix]), name=f"{A.name}_{wide}")
    ko, kq = pt.reduce_axis((0, K // g), name="ko"), pt.reduce_axis((0, g), name="kq")

    def body(b, i, j):
        bp = BP[(*b, j // nr, ko, j % nr, kq)]
        return pt.sum(prod(A[(*b, i, ko * g + kq)], bp), axis=[ko, kq])

    def each(f, n):  # the loops keep the axes' names
        if batch:
            return (lambda b, i: f((b,), i)) if n == 1 else (lambda b, i, j: f((b,), i, j))
        return (lambda i: f((), i)) if n == 1 else (lambda i, j: f((), i, j))

    raw = pt.compute((*batch, M, N), each(body, 2), name=names[0] + "_acc" * isa.b_offset)
    acc = accumulator_dtype(raw.dtype)
    tile = gemm_tile(isa, mr, nr, K, lambda a, b: pt.cast(acc, prod(a, b)))
    if not isa.b_offset:
        out = None
        if isa.kind == "amx":  # int32 as the tiles store it, or bfloat16 rounded from them
            rounded = str(raw.dtype) != acc
            out = gemm_tile(isa, mr, nr, K, prod, rounded=True) if rounded else tile
        return DotGemm(raw, BP, tile, AW=AW, out_intrin=out)
    k = pt.reduce_axis((0, K), name="k")
    rs = pt.compute(
        (*batch, M),
        each(lambda b, i: pt.sum(pt.cast("int32", A[(*b, i, k)]), axis=k), 1),
        name=f"{A.name}_rowsum",
    )

    def corrected(b, i, j):
        return raw[(*b, i, j)] - pt.const(128, "int32") * rs[(*b, i)]

    C = pt.compute((*batch, M, N), each(corrected, 2), name=names[0])
    return DotGemm(C, BP, tile, raw, rs)


def gemm_tile(
    isa: DotISA, mr: int, nr: int, K: int, product, rounded: bool = False, a_float: bool = False
):
    """The intrinsic ``out[i, j] = sum_{ko, kq} A[i, ko*g + kq] * BP[ko, j, kq]``
    (``product`` multiplies as the template does; for an offset B, the raw product of
    A and the unsigned packed B) over an ``mr x nr`` tile; ``rounded``: ``out`` in the
    inputs' 16-bit dtype (AMX's bfloat16), the sums float32 until rounded once.
    ``a_float`` (bfloat16 kernels, ``A_FLOAT``): A is float32, rounded to bfloat16 by
    the kernel (``product`` must say so: ``a`` is float32)."""
    g = isa.group
    if a_float and isa.name not in A_FLOAT:
        raise ValueError(f"gemm_tile: a float32 A is for bfloat16 kernels, not {isa.name}")
    if a_float and isa.kind == "vector" and K % (2 * isa.lanes):
        raise ValueError(f"gemm_tile: a float32 A needs K in whole {2 * isa.lanes}s, got {K}")
    if nr % isa.lanes or K % isa.k_step or (isa.kind == "amx" and not amx.fits(mr, nr)):
        raise ValueError(
            f"gemm_tile: {mr} x {nr} is not whole {isa.name} tiles of {isa.lanes} columns, "
            f"or K={K} is not a multiple of {isa.k_step}"
        )
    a = pt.placeholder((mr, K), "float32" if a_float else isa.a_wide or isa.dtype, name="a")
    b = pt.placeholder((K // g, nr, g), packed_dtype(isa), name="b")
    ko = pt.reduce_axis((0, K // g), name="ko")
    kq = pt.reduce_axis((0, g), name="kq")
    out = pt.compute(
        (mr, nr),
        lambda i, j: pt.sum(product(a[i, ko * g + kq], b[ko, j, kq]), axis=[ko, kq]),
        name="tile",
    )
    name = f"gemm_{isa.name}{'_u8' if isa.b_offset else ''}{'_af32' * a_float}_{mr}x{nr}_k{K}"
    name += "_out" * rounded
    src = _source(isa, name, mr, nr, K, rounded, a_float)
    return pt.TensorIntrin.register(name, out.op, src, inputs=[a, b])


def _source(
    isa: DotISA, name: str, mr: int, nr: int, K: int, rounded: bool = False, a_float: bool = False
) -> str:
    """The C of the tile kernel: the plain loops for strides other than the packed
    layout's, else the ISA's kernel."""
    g = isa.group
    acc_c = _ACC_C[isa.dtype]
    out_c, out_v = ("uint16_t", "pt_dot_bf16_round(t)") if rounded else (acc_c, "t")
    elem, belem = _C_ELEM[isa.a_wide or isa.dtype], _C_ELEM[packed_dtype(isa)]
    widen = "pt_dot_bf16" if isa.dtype == "bfloat16" else "(int32_t)"
    widen_a = widen
    if a_float:  # the loops round A as the kernel does (subnormals kept)
        elem, widen_a = "float", "pt_dot_bf16_round_f"
    lines = [
        f"#include <{isa.header}>",
        helpers(isa),
        *([ROUND_BF16] * (rounded or a_float)),
        f"static inline void {name}(const {elem}* restrict a, int64_t a0, int64_t a1,",
        f"    const {belem}* restrict b, int64_t b0, int64_t b1, int64_t b2,",
        f"    {out_c}* restrict out, int64_t o0, int64_t o1) {{",
        f"  if (a1 != 1 || b1 != {g} || b2 != 1 || o1 != 1) {{  /* other strides: plain loops */",
        f"    for (int64_t i = 0; i < {mr}; ++i)",
        f"      for (int64_t j = 0; j < {nr}; ++j) {{",
        f"        {acc_c} t = 0;",
        f"        for (int64_t k = 0; k < {K}; ++k)",
        f"          t += {widen_a}(a[i * a0 + k * a1])",
        f"            * {widen}(b[(k / {g}) * b0 + j * b1 + (k % {g}) * b2]);",
        f"        out[i * o0 + j * o1] = {out_v};",
        "      }",
        "    return;",
        "  }",
    ]
    body = _BODIES[isa.kind](isa, mr, nr, K, rounded, a_float)
    return "\n".join([*lines, *body, "}"]) + "\n"


def _amx_body(isa: DotISA, mr: int, nr: int, K: int, rounded: bool, a_float: bool) -> list[str]:
    return amx.body(isa.dtype, isa.group, mr, nr, K, rounded, a_float)


def _vector_body(isa: DotISA, mr: int, nr: int, K: int, rounded: bool, a_float: bool) -> list[str]:
    if a_float:
        return dot_afloat.body(isa, mr, nr, K)
    g, L = isa.group, isa.lanes
    elem, belem = _C_ELEM[isa.a_wide or isa.dtype], _C_ELEM[packed_dtype(isa)]
    nv = nr // L
    acc = {(r, v): f"c{r}_{v}" for r in range(mr) for v in range(nv)}
    lines = [f"  {isa.acc_type} " + ", ".join(f"{c} = {isa.zero}" for c in acc.values()) + ";"]
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
        lines.append("  " + isa.store.format(p=f"out + {r} * o0 + {v * L}", v=c))
    return lines


_BODIES = {"vector": _vector_body, "amx": _amx_body}  # the kernel's loops by the ISA's kind
A_FLOAT = ("amxbf16", "avx512bf16")  # the kernels that take a float32 A (``a_float``)
