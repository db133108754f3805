"""GEMM register tiles on AMX: Intel's tile matrix multiply (``x86-amx``).

AMX holds eight tile registers of 16 rows x 64 bytes. One instruction multiplies a
16 x 64-byte tile of A by a tile of B packed as ``dot_ukernels`` packs it (16
groups of the reduction by 16 columns, ``g`` elements of a column adjacent: 2
bfloat16, 4 int8) into a 16 x 16 tile of 32-bit accumulators::

    tdpbf16ps  C[16][16] float += A[16][32 bf16] . B[16 pairs][16 columns]
    tdpbssd    C[16][16] int32 += A[16][64 int8] . B[16 quads][16 columns]

(``tdpbssd`` multiplies signed by signed: B needs no offset.) An ``mr x nr`` register
tile (``mr`` 16 or 32, ``nr`` in 32s, or 16) is one call over the whole reduction,
two column tiles at a time (``mr/16 x 2`` accumulators, ``mr/16`` tiles of A, 2 of B:
at most the 8 registers), over K-blocks whose ``mr`` rows of A stay in L1
(``A_SLICE_BYTES``) while every column group meets them (``body`` shows the loops).
A tile multiply consumes 2 KB of operands in 16 cycles, more than L2 delivers: the
K-blocks, the wide tiles and the GEMM's row blocks (``BLOCKS``) are there to feed it.

Each call starts with ``pypto.amx``'s ``pt_amx_start`` (the process's grant, asked
once; the tile shapes, loaded per call as a call may follow another kernel's). K must
be whole steps of 16 groups (``dot_ukernels.DotISA.k_step``); other GEMMs take the
target's vector dot kernel.
"""

from __future__ import annotations

from pypto.amx import C_HELPERS, TILE_ROWS, TILES

INSTRUCTION = {"int8": "_tile_dpbssd", "bfloat16": "_tile_dpbf16ps"}
ELEM_BYTES = {"int8": 1, "bfloat16": 2}
BLOCKS = (2, 4, 8, 16)  # row tiles per block of rows
# the register tile's rows and columns (a tile wider than two 16-column tiles is
# computed two at a time, over each K-block of A's rows; fewer column panels stream A
# fewer times: 1024^3, 1 thread on a Sapphire Rapids, int8 1610 / 1926 / 2218 GOP/s
# at 128 / 256 / 512 columns, bfloat16 864 / 931 / 888 GFLOP/s)
TILE_SHAPES = ((16, 32), (16, 32, 64, 128, 256, 512))
DEFAULT_MAX_COLS = 256  # the default tile's widest (bfloat16's local tile stays in L1)
HELPERS = C_HELPERS
GROUP_COLS = 2  # column tiles computed together (with mr / 16 row tiles: 2 x 2 in 8 tiles)
A_SLICE_BYTES = 16 * 1024  # A's rows x K-block, kept in L1 across the column groups


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


def body(dtype: str, group: int, mr: int, nr: int, K: int) -> list[str]:
    """The C lines of the tile kernel (after the stride check; arguments ``a, a0``,
    ``b, b0`` and ``out, o0`` of ``dot_ukernels``' kernels)::

        for kb in K-blocks:                      (A's rows over kb stay in L1)
          for each group of column tiles:
            acc = 0 (first block) or out         (tile loads)
            for ko in kb step 16: acc += A . B
            out = acc
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
    # each operand loaded just before its first product (1.03x loading all first)
    steps = []
    for r in range(ra):
        steps.append(f"_tile_loadd({ta[r]}, a + {r * TILE_ROWS} * a0 + ko * {group}, a0 * {size});")
        for v in range(vb):
            if r == 0:
                steps.append(f"_tile_loadd({tb[v]}, bc + ko * b0 + {v * step}, b0 * {size});")
            steps.append(f"{dot}({c[r, v]}, {ta[r]}, {tb[v]});")
    acc = {t: f"oc + {r * TILE_ROWS} * o0 + {v * TILE_ROWS}" for (r, v), t in c.items()}
    return [
        "  pt_amx_start();",
        f"  for (int64_t kb = 0; kb < {kg}; kb += {kc}) {{",
        f"    const int64_t kend = kb + {kc} < {kg} ? kb + {kc} : {kg};",
        f"    for (int64_t jc = 0; jc < {nr}; jc += {vb * TILE_ROWS}) {{",
        f"      __typeof__(b) bc = b + jc * {group};",
        "      __typeof__(out) oc = out + jc;",
        "      if (kb == 0) {",
        *(f"        _tile_zero({t});" for t in c.values()),
        "      } else {",
        *(f"        _tile_loadd({t}, {p}, o0 * 4);" for t, p in acc.items()),
        "      }",
        "      for (int64_t ko = kb; ko < kend; ko += 16) {",
        *("        " + x for x in steps),
        "      }",
        *(f"      _tile_stored({t}, {p}, o0 * 4);" for t, p in acc.items()),
        "    }",
        "  }",
    ]
