"""The GEMM templates' tile and blocking choices for a dot-product kernel
(``dot_ukernels.usable``): which register tiles and row blocks its space holds and
which it takes by default, measured per kernel kind (vector dot instructions, AMX's
tiles).
"""

from __future__ import annotations

from pypto.dtypes import numpy_dtype

from . import amx
from .dot_ukernels import DotISA


def _fewest_left(sizes: tuple, n: int) -> int:
    held = [x for x in sizes if x <= n] or list(sizes[:1])
    return min(held, key=lambda x: (n % x, -x))


def block_options(isa: DotISA | None) -> tuple | None:
    """The row-tile counts a block of rows may take with ``isa``'s kernel (None: the
    GEMM's own choices)."""
    return isa.blocks if isa is not None else None


def default_tile(
    isa: DotISA | None, lanes: int, M: int = 0, N: int = 0, K: int = 0, target=None
) -> tuple | None:
    """``(mr, nr)`` of the default register tile of ``isa``'s kernel, two vectors of
    ``lanes`` wide, where the ISA sets its rows, else None (the GEMM's own default). AVX2's
    ``vpmaddwd`` kernel needs a register more than a float32 tile (the product before
    its ``vpaddd``): 4 x 2 vectors measured 150-157 GOP/s at int8 1024^3 on a Zen 4
    running AVX2 code, 6 x 2 (all 16 registers) 114-140. An ISA of fixed tiles
    (``tiles``, AMX) takes, of those an ``M x N`` GEMM holds (columns up to
    ``amx.DEFAULT_MAX_COLS``, narrow enough for a column panel per core of ``target``,
    and for a packed panel of B, K deep, in half of its L2), the one leaving the fewest
    rows (columns) to the plain loops of the ragged edge, the largest among equals.
    Panels past half of L2 measured slower, in 1 and 2 threads on a Sapphire Rapids: the
    MoE's 128 x 1024 x 2816 bfloat16 GEMM 4.84 -> 3.94 ms at 128 columns instead of 512,
    128 x 3072 x 768 751 -> 801 GFLOP/s at 256; no change at 1024^3."""
    if isa is not None and isa.tiles:
        rows, cols = isa.tiles
        cores = (target.cores if target is not None else 0) or 1
        l2 = (target.l2_bytes if target is not None else 0) or 0
        column = K * numpy_dtype(isa.dtype).itemsize  # a packed panel's bytes per column
        wide = amx.DEFAULT_MAX_COLS
        while wide > cols[0] and (wide * cores > N or l2 and wide * column > l2 // 2):
            wide //= 2
        return _fewest_left(rows, M), _fewest_left(tuple(c for c in cols if c <= wide), N)
    return (isa.rows, 2 * lanes) if isa is not None and isa.rows else None


def fits(tile: tuple, M: int, N: int) -> int:
    """1 when the default register tile ``(mr, nr)`` has whole tiles in an M x N GEMM
    (the kernel computes whole tiles: the ``ukernel`` knob's default), else 0."""
    return int(M >= tile[0] and N >= tile[1])


def ukernel_on(cfg, isa: DotISA | None, M: int, N: int) -> bool:
    """Whether a GEMM config runs the dot kernel: a kernel for it, the ``ukernel`` knob
    on, and a register tile of whole tiles of the M x N GEMM (a wider or taller one,
    which the space also holds, runs the plain loops, as ``fits`` makes the default)."""
    if isa is None or not cfg["ukernel"].val:
        return False
    return bool(fits((cfg["tile_i"].size[-1], cfg["tile_j"].size[-1]), M, N))


def tile_options(isa: DotISA | None) -> tuple | None:
    """``(rows, columns)`` the register tile may take with ``isa``'s kernel (None: the
    GEMM's own choices)."""
    return isa.tiles if isa is not None else None


def row_block(target, isa: DotISA, M: int, K: int, N: int = 0):
    """The default rows blocking of a dot-kernel GEMM, as a function of ``mr``: none
    (0) while the A the kernel reads (widened, for an ``a_wide`` ISA) fits in half of
    ``target``'s L2, else the most row tiles whose rows of it fill a quarter of it (A's
    block then stays in L2 while it meets every column panel, which is packed once
    before the blocks instead of streaming A from L3 per panel). 1 thread, int8
    1024^3 on Zen 5: 0.74x -> 0.86-0.92x torch._int_mm.

    AMX streams both operands from L2 (a tile multiply consumes 2 KB in 16 cycles):
    blocks of ``isa.blocks[0]`` row tiles while the packed B (of ``N`` columns), which
    every block reads again, fits in half of L2, else none (B packed per column panel,
    just before its use). 1 thread on a Sapphire Rapids, 1024^3: int8 1600 -> 1830
    GOP/s with blocks; bfloat16 (B twice the size) 850 without, 650-760 with."""
    l2 = target.l2_bytes or 0
    row = K * numpy_dtype(isa.a_wide or isa.dtype).itemsize
    if isa.kind == "amx":
        small = isa.blocks[0]
        return lambda mr: small if N * row <= l2 // 2 and small * mr < M else 0
    if not l2 or M * row <= l2 // 2:
        return lambda mr: 0

    def block(mr: int) -> int:
        fits = [b for b in isa.blocks if b * mr * row <= l2 // 4 and b * mr < M]
        return max(fits, default=0)

    return block
