"""GEMM register tiles on AMX: Intel's tile matrix multiply (``x86-amx``).

AMX holds eight tile registers of 16 rows x 64 bytes. One instruction multiplies a
16 x 64-byte tile of A by a tile of B packed as ``dot_ukernels`` packs it (16
groups of the reduction by 16 columns, ``g`` elements of a column adjacent: 2
bfloat16, 4 int8) into a 16 x 16 tile of 32-bit accumulators::

    tdpbf16ps  C[16][16] float += A[16][32 bf16] . B[16 pairs][16 columns]
    tdpbssd    C[16][16] int32 += A[16][64 int8] . B[16 quads][16 columns]
    tdpbuud    C[16][16] int32 += A[16][64 uint8] . B[16 quads][16 columns]

(``tdpbssd`` multiplies signed by signed, ``tdpbuud`` unsigned by unsigned: B needs
no offset.) An ``mr x nr`` register
tile (``mr`` 16 or 32, ``nr`` in 32s, or 16) is one call over the whole reduction,
two column tiles at a time (``mr/16 x 2`` accumulators, ``mr/16`` tiles of A, 2 of B:
at most the 8 registers), over K-blocks whose ``mr`` rows of A stay in L1
(``A_SLICE_BYTES``) while every column group meets them (``body`` shows the loops).
A tile multiply consumes 2 KB of operands in 16 cycles, more than L2 delivers: the
K-blocks, the wide tiles and the GEMM's row blocks (``BLOCKS``) are there to feed it.
A is read in place where its rows start on cache lines, else each K-block's rows are
copied to a line-aligned per-thread slice first (a tile row across two lines: int8
1024^3 2.05 -> 1.5 ms). The kernel writes C: int32 sums as the tiles store them,
bfloat16 ones rounded from the tiles after the last K-block (partial sums in between
in a per-thread float32 buffer): no local tile, no copy out (bfloat16 1024^3, 1
thread: 955 -> 1290 GFLOP/s with the in-place A and the 32 KB slices).

Each call starts with ``pypto.amx``'s ``pt_amx_start`` (the process's grant, asked
once; the tile shapes, checked per call and loaded where another kernel left its
own). K must be whole steps of 16 groups (``dot_ukernels.DotISA.k_step``); other
GEMMs take the target's vector dot kernel.
"""

from __future__ import annotations

from pypto.amx import C_HELPERS, TILE_ROWS, TILES

INSTRUCTION = {"int8": "_tile_dpbssd", "uint8": "_tile_dpbuud", "bfloat16": "_tile_dpbf16ps"}
ELEM_BYTES = {"int8": 1, "uint8": 1, "bfloat16": 2}
ELEM_C = {"int8": "int8_t", "uint8": "uint8_t", "bfloat16": "uint16_t"}
BLOCKS = (2, 4, 8, 16)  # row tiles per block of rows
# the register tile's rows and columns (a tile wider than two 16-column tiles is
# computed two at a time, over each K-block of A's rows; fewer column panels stream A
# fewer times: 1024^3, 1 thread on a Sapphire Rapids, int8 2017 / 2431 / 2669 GOP/s
# at 128 / 256 / 512 columns, bfloat16 1121 / 1259 / 1281 GFLOP/s)
TILE_SHAPES = ((16, 32), (16, 32, 64, 128, 256, 512))
DEFAULT_MAX_COLS = 512  # the default tile's widest (fewer where the cores need panels)
HELPERS = C_HELPERS
GROUP_COLS = 2  # column tiles computed together (with mr / 16 row tiles: 2 x 2 in 8 tiles)
# A's rows x K-block, kept in L1 across the column groups (bfloat16 1024^3, 1 thread:
# 1395 GFLOP/s with 32 KB, 1317 with 16 KB, 1210 with 64 KB, in a C harness)
A_SLICE_BYTES = 32 * 1024


def fits(mr: int, nr: int) -> bool:
    """Whether an ``mr x nr`` register tile is whole 16 x 16 tiles that the eight tile
    registers compute: ``mr / 16`` (1 or 2) tiles of A, column tiles in groups of
    ``GROUP_COLS`` (a group's accumulators, and a tile of B per column tile, held)."""
    if mr % TILE_ROWS or nr % TILE_ROWS or mr <= 0 or nr <= 0:
        return False
    a, b = mr // TILE_ROWS, min(GROUP_COLS, nr // TILE_ROWS)
    return (nr // TILE_ROWS) % b == 0 and a * b + a + b <= TILES


def k_block(dtype: str, group: int, mr: int, K: int) -> int:
    """The reduction groups per K-block: ``mr`` rows of A over it fill ``A_SLICE_BYTES``
    (whole steps of 16 groups; at most all of K)."""
    step = TILE_ROWS * group
    per_step = mr * step * ELEM_BYTES[dtype]
    return max(1, min(K // step, A_SLICE_BYTES // per_step)) * TILE_ROWS


def _a_slice(elem: str, size: int, mr: int, kc: int, group: int) -> list[str]:
    """A's K-block rows: in place, or copied to the aligned slice."""
    return [
        f"    const {elem}* as = a + kb * {group};",
        "    int64_t as0 = a0;",
        "    if (!a_lines) {  /* tile rows across two cache lines: an aligned copy of the slice */",
        f"      for (int64_t r = 0; r < {mr}; ++r)",
        f"        memcpy(pt_a_slice + r * {kc * group}, a + r * a0 + kb * {group},"
        f" (size_t)(kend - kb) * {group * size});",
        f"      as = pt_a_slice, as0 = {kc * group};",
        "    }",
    ]


def _start(c: dict, acc: dict, row: str) -> list[str]:
    """The accumulators at the start of a K-block: zero, or the sums of the blocks before."""
    return [
        "      if (kb == 0) {",
        *(f"        _tile_zero({t});" for t in c.values()),
        "      } else {",
        *(f"        _tile_loadd({t}, {p}, {row} * 4);" for t, p in acc.items()),
        "      }",
    ]


def _a_rounded(mr: int, kc: int, group: int) -> list[str]:
    """A float32 A's K-block rows rounded to bfloat16 into the slice, 32 at a time
    (``vcvtne2ps2bf16``: to nearest even, subnormals flushed; the slice's rows are
    whole steps of the tiles)."""
    return [
        f"    for (int64_t r = 0; r < {mr}; ++r)",
        f"      for (int64_t k = 0; k < (kend - kb) * {group}; k += 32) {{",
        f"        const float* ap = a + r * a0 + kb * {group} + k;",
        f"        _mm512_store_si512(pt_a_slice + r * {kc * group} + k, (__m512i)"
        "_mm512_cvtne2ps_pbh(_mm512_loadu_ps(ap + 16), _mm512_loadu_ps(ap)));",
        "      }",
        "    const uint16_t* as = pt_a_slice;",
        f"    int64_t as0 = {kc * group};",
    ]


def body(
    dtype: str, group: int, mr: int, nr: int, K: int, rounded: bool = False, a_float: bool = False
) -> list[str]:
    """The C lines of the tile kernel (after the stride check; arguments ``a, a0``,
    ``b, b0`` and ``out, o0`` of ``dot_ukernels``' kernels)::

        for kb in K-blocks:
          as = A's rows over kb, in place (rows on whole lines) or copied to an aligned slice
          for each group of column tiles:
            acc = 0 (first block) or the partial sums      (tile loads)
            for ko in kb step 16: acc += as . B
            partial sums = acc, or (last block, ``rounded``) out = bfloat16(acc)

    The accumulators are ``out`` itself (int32, or a float32 local tile), or, when the
    kernel writes a bfloat16 ``out`` (``rounded``), a per-thread float32 buffer between
    K-blocks. ``vcvtneps2bf16`` rounds to nearest even and flushes subnormals to zero,
    which changes nothing here: ``tdpbf16ps`` never leaves a subnormal sum.

    ``a_float`` (bfloat16 only): A is float32, rounded to bfloat16 as each K-block's
    rows are copied to the slice (``vcvtne2ps2bf16``; an A below 2^-126 counts as 0,
    where the plain loops keep its subnormal bfloat16: a product under 2^-126 |b|).
    Attention's P V reads its float32 probabilities so, without a pass rounding them.
    """
    if not fits(mr, nr):
        raise ValueError(f"AMX tile kernel: {mr} x {nr} is not whole 16 x 16 tiles in 8 registers")
    step = TILE_ROWS * group
    if K % step:
        raise ValueError(f"AMX tile kernel: K={K} is not a multiple of {step}")
    ra, vb = mr // TILE_ROWS, min(GROUP_COLS, nr // TILE_ROWS)
    c = {(r, v): r * vb + v for r in range(ra) for v in range(vb)}
    ta = {r: ra * vb + r for r in range(ra)}
    tb = {v: ra * vb + ra + v for v in range(vb)}
    size, dot = ELEM_BYTES[dtype], INSTRUCTION[dtype]
    kg, kc = K // group, k_block(dtype, group, mr, K)
    elem = ELEM_C[dtype]
    # each operand loaded just before its first product (1.03x loading all first)
    steps = []
    for r in range(ra):
        a_row = f"as + {r * TILE_ROWS} * as0 + (ko - kb) * {group}"
        steps.append(f"_tile_loadd({ta[r]}, {a_row}, as0 * {size});")
        for v in range(vb):
            if r == 0:
                steps.append(f"_tile_loadd({tb[v]}, bc + ko * b0 + {v * step}, b0 * {size});")
            steps.append(f"{dot}({c[r, v]}, {ta[r]}, {tb[v]});")
    partial = rounded and kc < kg  # partial sums kept between K-blocks, off the output
    acc_base, acc_row = ("pt_acc + jc", str(nr)) if partial else ("out + jc", "o0")
    # (a bfloat16 kernel of one K-block only converts its tiles: no ``oc``)
    acc_type = "float*" if partial else "__typeof__(out)"
    acc = {t: f"oc + {r * TILE_ROWS} * {acc_row} + {v * TILE_ROWS}" for (r, v), t in c.items()}
    store = [f"_tile_stored({t}, {p}, {acc_row} * 4);" for t, p in acc.items()]
    lines = [
        "  pt_amx_start();",
        f"  static __thread {elem} pt_a_slice[{mr * kc * group}] __attribute__((aligned(64)));",
        *([f"  static __thread float pt_acc[{mr * nr}] __attribute__((aligned(64)));"] * partial),
        *(["  float pt_tile[256] __attribute__((aligned(64)));"] * rounded),
        *(
            []
            if a_float
            else [f"  const int a_lines = (uintptr_t)a % 64 == 0 && (a0 * {size}) % 64 == 0;"]
        ),
        f"  for (int64_t kb = 0; kb < {kg}; kb += {kc}) {{",
        f"    const int64_t kend = kb + {kc} < {kg} ? kb + {kc} : {kg};",
        *(_a_rounded(mr, kc, group) if a_float else _a_slice(elem, size, mr, kc, group)),
        f"    for (int64_t jc = 0; jc < {nr}; jc += {vb * TILE_ROWS}) {{",
        f"      const {elem}* bc = b + jc * {group};",
        *([f"      {acc_type} oc = {acc_base};"] * (not rounded or partial)),
        *(_start(c, acc, acc_row) if kc < kg else (f"      _tile_zero({t});" for t in c.values())),
        "      for (int64_t ko = kb; ko < kend; ko += 16) {",
        *("        " + x for x in steps),
        "      }",
    ]
    if not rounded:
        return [*lines, *("      " + x for x in store), "    }", "  }"]
    convert = []
    for (r, v), t in c.items():
        dst = f"out + ({r * TILE_ROWS} + r) * o0 + jc + {v * TILE_ROWS}"
        convert += [
            f"_tile_stored({t}, pt_tile, 64);",
            "for (int r = 0; r < 16; ++r)",
            f"  _mm256_storeu_si256((__m256i*)({dst}),",
            "                      (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(pt_tile + r * 16)));",
        ]
    if partial:
        return [
            *lines,
            f"      if (kend < {kg}) {{",
            *("        " + x for x in store),
            "        continue;",
            "      }",
            *("      " + x for x in convert),
            "    }",
            "  }",
        ]
    return [*lines, *("      " + x for x in convert), "    }", "  }"]
