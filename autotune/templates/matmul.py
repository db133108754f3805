"""Matrix multiplication templates: ``matmul`` (C = A @ B) and ``batch_matmul``.

The schedule is the classic CPU GEMM micro-kernel, in the style of TVM's
x86 dense/batch_matmul schedules:

- an ``mr x nr`` register tile of C accumulated in a local buffer
  (``cache_write``), the reduction loop outermost inside the tile so every
  step is ``mr`` broadcasts of A times ``nr / lanes`` vectors of B;
- B packed per ``nr``-column panel into a contiguous ``K x nr`` block
  (``cache_read`` + ``compute_at``), so the micro-kernel streams it;
- optionally rows blocked (``block_i`` row tiles per block) so a block of A
  stays in cache while it meets every column panel;
- tile rows unrolled, tile columns vectorized, the reduction optionally
  unrolled, an outer spatial loop parallel.

Every point of the space is a legal schedule (reductions are never
vectorized or parallel). The defaults (a 6 x 2-vector tile, B packed, column
panels in parallel, no row blocking unless A is large next to the last-level
cache) come from the task's target (``cfg.target``): its vector width,
vector registers and cache sizes.

With at most 16 rows of output the space also holds the ``skinny`` form (on by
default, but where a dot kernel wins; ``skinny.py``): B streamed row by row, in
place, into an accumulator of whole rows of C, with no packed copy. With at most
4 columns and more rows, the ``narrow`` form (on by default): each output a dot
product of a row of A and a column of B, rows in parallel. ``batch_matmul`` holds
both per product, its batches' blocks in parallel.
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from ..task import template
from . import dot_knobs, dot_ukernels, precision, skinny
from .precision import widened


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def define_gemm_knobs(
    cfg,
    M: int,
    N: int,
    lanes: int,
    prefix: str = "",
    pack_options=(0, 1),
    a_bytes: int = 0,
    wide: bool = False,
    block_default=None,
    tile_default: tuple | None = None,
    pack_default: int = 1,
    tiles: tuple | None = None,
    blocks: tuple | None = None,
    one_panel_rows: bool = False,
):
    """The knobs shared by the GEMM-like templates (matmul, batch_matmul, dense).

    ``tile_i`` = ``[-1, mr]`` rows of the register tile, ``tile_j`` = ``[-1, nr]``
    columns (multiples of the vector width), ``block_i`` row tiles per cache block
    (0: no row blocking), ``pack_b`` B packed per column panel (2: and the next panel
    prefetched into L2 over the tile's reduction loop, float32 matmul), ``unroll_k`` the
    reduction unrolled by that factor, ``par`` which loop runs in parallel.
    ``pack_options`` restricts ``pack_b`` (dense always packs its transposed weights).
    ``a_bytes`` (the size of A) turns row blocking on by default when A would not
    stay in the last-level cache while every column panel streams over it;
    ``block_default`` (row tiles, a function of ``mr``) replaces that rule.
    ``wide`` (float32 matmul) sizes the default tile by ``_wide_tile`` and unrolls its
    reduction by 4, else it is two vectors wide; a tile wider than two vectors is not
    row-blocked by default.
    ``tile_default`` (``(mr, nr)``) and ``pack_default`` replace those defaults, ``tiles``
    (``(rows, columns)``: a kernel's fixed tiles) the choices of ``mr`` and ``nr``,
    ``blocks`` those of ``block_i`` (besides 0). ``one_panel_rows`` (matmul): where the
    default tile leaves B one column panel, B is read in place (it is its own packed
    panel, rows ``N <= nr`` apart) and the row tiles run in parallel (the panel loop has
    one iteration): 8192 x 16 x 256 on a 2-core Zen 4, 2 threads, 1.14 -> 0.34 ms
    (numpy 0.99), 64 x 64 x 4096 0.33 -> 0.17; one thread unchanged.
    Returns the default tile ``(mr, nr)``.
    """
    mrs, nrs = tiles or ([2, 4, 6, 8], [lanes, 2 * lanes, 3 * lanes, 4 * lanes])
    regs = cfg.target.vector_registers
    if tile_default is not None:
        mr_d, nr_d = tile_default
    elif wide:
        nr_d, mr_d = _wide_tile(regs, lanes, mrs, M, N)
    else:
        nr_d = 2 * lanes if N > lanes else lanes
        mr_d = _default_rows(regs, nr_d // lanes, mrs, M)
    cfg.define_split(
        prefix + "tile_i",
        M,
        num_outputs=2,
        policy="candidate",
        candidate=[[-1, m] for m in mrs],
        default=[-1, mr_d],
    )
    cfg.define_split(
        prefix + "tile_j",
        N,
        num_outputs=2,
        policy="candidate",
        candidate=[[-1, n] for n in nrs],
        default=[-1, nr_d],
    )
    # the wide tile's panel pass over all of A measured 1.05x row blocks of 64 tiles at
    # 2048^3 on AVX-512 (blocks re-pack every panel of B once per block)
    block_d = 64 if a_bytes >= cfg.target.l3_bytes // 2 and nr_d <= 2 * lanes else 0
    if block_default is not None:
        block_d = block_default(mr_d)
    one_panel = one_panel_rows and N <= nr_d and 0 in pack_options
    cfg.define_knob(prefix + "block_i", [0, *(blocks or (8, 16, 32, 64))], default=block_d)
    cfg.define_knob(prefix + "pack_b", list(pack_options), default=0 if one_panel else pack_default)
    # the wide tile's reduction unrolled by 4: on a Sapphire Rapids (x86-amx), 1 and 2
    # threads, 1.03-1.10x the plain loop at the four standard shapes (4 x 4 vectors);
    # the AVX-512 records of a Zen 5 have it within 0.96-1.0x there
    cfg.define_knob(prefix + "unroll_k", [1, 2, 4, 8], default=4 if wide else 1)
    cfg.define_knob(prefix + "par", ["panel", "rows"], default="rows" if one_panel else "panel")
    return mr_d, nr_d


def define_dot_knobs(cfg, isa, M: int, N: int, lanes: int, K: int = 0, **kw):
    """``define_gemm_knobs`` with the tile choices and defaults of the dot kernel ``isa``
    (``dot_ukernels.usable``; None: the GEMM's own), and where there is a kernel the
    ``ukernel`` knob (on by default when the default tile is whole tiles of the GEMM).
    Returns the default tile ``(mr, nr)``."""
    default = dot_knobs.default_tile(isa, lanes, M, N, K, cfg.target)
    tile = define_gemm_knobs(
        cfg, M, N, lanes, tile_default=default,
        tiles=dot_knobs.tile_options(isa), blocks=dot_knobs.block_options(isa), **kw,
    )  # fmt: skip
    if isa is not None:
        cfg.define_knob("ukernel", [0, 1], default=dot_knobs.fits(tile, M, N))
    return tile


def _wide_tile(registers: int, lanes: int, mrs: list, M: int, N: int) -> tuple:
    """``(nr, mr)`` of the default float32 register tile: ``registers // 8`` vectors wide
    (at most 4, and no wider than N needs), as many rows as the registers hold
    (``_default_rows``) with at most 16 accumulators. That is 6 x 2 vectors on AVX2's
    16 registers and 4 x 4 on AVX-512's (and NEON's) 32: on a Zen 5 with one thread
    4 x 4 vectors measured 1.03x (1024^3) to 1.09x (128 x 3072 x 768) the 8 x 2 tile,
    while 6 x 4 (24 accumulators) gained less, and the AVX-512 tuning records chose
    4 x 4 for 2048^3 and 128 x 3072 x 768."""
    nv = max(1, min(registers // 8, 4, _ceil_div(N, lanes)))
    mr = _default_rows(registers, nv, [m for m in mrs if m * nv <= 16] or mrs[:1], M)
    return nv * lanes, mr


def _default_rows(registers: int, vectors: int, mrs: list, M: int) -> int:
    """Rows of the default register tile: as many as the vector registers hold with
    ``vectors`` accumulators per row, one register per B vector and one for the
    broadcast of A (6 x 2 on the 16 registers of AVX2, 8 x 2 on AVX-512's 32)."""
    fits = [m for m in mrs if m * vectors + vectors + 1 <= registers and m <= max(M, mrs[0])]
    return max(fits or mrs[:1])


def schedule_gemm(
    cfg,
    s,
    C,
    CL,
    M: int,
    B_tensor=None,
    batch_axis=None,
    prefix: str = "",
    pack=None,
    tile_intrin=None,
    pack_k_inner: bool = False,
    pack_b: bool | None = None,
):
    """Schedule ``C`` (copied out of the accumulator ``CL``) as a blocked GEMM.

    ``C``'s last two axes are (i, j) with ``M`` rows; ``batch_axis`` (if any) is an
    outer spatial axis, fused with the parallel loop when they are adjacent. When
    ``pack_b`` is on, B is packed per column panel: ``pack()`` returns the packing
    stage's tensor (default: ``cache_read(B_tensor)`` for ``CL``); with ``pack_b`` 2 the
    tile also prefetches the next panel of ``B_tensor`` into L2, a few lines per step of
    its reduction (``Stage.prefetch``'s ``spread``). ``tile_intrin``
    (a tensor intrinsic of the whole register tile, its reduction included) replaces
    the tile's loops in whole tiles; its packed B is copied with B's columns innermost,
    or its reduction with ``pack_k_inner`` (dense's W is N x K). Returns the packed
    tensor or None. ``pack_b`` (a bool) overrides the knob of that name: False when B
    already comes in panels.
    """
    i, j = C.op.axis[-2], C.op.axis[-1]
    io, ii = cfg[prefix + "tile_i"].apply(s, C, i)
    jo, ji = cfg[prefix + "tile_j"].apply(s, C, j)
    mr = cfg[prefix + "tile_i"].size[-1]
    block = cfg[prefix + "block_i"].val
    i0 = None
    if block and block < _ceil_div(M, mr):
        i0, io = s[C].split(io, factor=block)
    rows_par = cfg[prefix + "par"].val == "rows"
    order = [] if batch_axis is None else [batch_axis]
    if i0 is not None:
        order += [i0, jo, io]
        par_loop = i0 if rows_par else jo
    elif rows_par:
        order += [io, jo]
        par_loop = io
    else:
        order += [jo, io]
        par_loop = jo
    direct = CL is C  # the tile intrinsic writes C itself (no accumulator stage)
    s[C].reorder(*order, *(s[C].op.reduce_axis if direct else ()), ii, ji)
    s[C].vectorize(ji)
    attach_c = order[-1]  # the loop just outside the tile
    attach_b = jo
    if batch_axis is not None and order.index(par_loop) == 1:
        fused = s[C].fuse(batch_axis, par_loop)
        attach_b = fused if attach_b is par_loop else attach_b
        attach_c = fused if attach_c is par_loop else attach_c
        par_loop = fused
    s[C].parallel(par_loop)
    if direct:  # partial tiles keep the loops (k outermost)
        s[C].tensorize(s[C].op.reduce_axis[0], tile_intrin)
    else:
        _register_tile(s, CL, attach=(s[C], attach_c), intrin=tile_intrin,
                       unroll_k=cfg[prefix + "unroll_k"].val)  # fmt: skip
    if not (cfg[prefix + "pack_b"].val if pack_b is None else pack_b):
        return None
    BP = pack() if pack is not None else s.cache_read(B_tensor, "local", [CL])
    if tile_intrin is not None and i0 is not None and batch_axis is None:
        # row blocks revisit every panel: the dot kernels' B packed once, before them
        s[BP].parallel(s[BP].op.axis[0])
    else:  # once per column panel (per row tile too when rows are outermost unblocked)
        s[BP].compute_at(s[C], attach_b)
    if tile_intrin is None:
        s[BP].vectorize(s[BP].op.axis[-1])
        if cfg[prefix + "pack_b"].val == 2 and B_tensor is not None:  # the next panel too
            ko = next(iv for iv in s[CL].leaf_iter_vars if iv.kind == "reduce")
            s[CL].prefetch(B_tensor, attach_b, 1, level=2, spread=ko)
    elif pack_k_inner:  # the dot kernels' layout [jo, ko, ji, kq] from rows of W
        jo_, ko_, ji_, kq_ = s[BP].op.axis[-4:]
        s[BP].reorder(jo_, ji_, ko_, kq_)
        s[BP].unroll(kq_)
    else:  # the dot kernels' layout [(b,) jo, ko, ji, kq]: rows of B read contiguously
        jo_, ko_, ji_, kq_ = s[BP].op.axis[-4:]
        # the g rows' elements of a lane interleaved in one vector loop (gcc's grouped
        # stores; 1024^3 on Zen 5: 4x (int8) and 2x (bfloat16) faster than g loops)
        s[BP].unroll(kq_)
        s[BP].vectorize(ji_)
    return BP


def _register_tile(s, CL, attach, intrin, unroll_k: int) -> None:
    """The register tile ``CL`` at ``attach`` (stage, loop): k outermost, rows unrolled,
    columns vectorized; ``intrin`` (a tensor intrinsic) computes whole tiles (partial
    ones keep these loops), else k is unrolled by ``unroll_k``."""
    s[CL].compute_at(*attach)
    ic, jc = s[CL].op.axis[-2], s[CL].op.axis[-1]
    red = list(s[CL].op.reduce_axis)
    kk = red[-1]
    if intrin is not None:
        s[CL].reorder(*red, ic, jc)
        s[CL].tensorize(red[0], intrin)
    elif unroll_k > 1:
        ko, ki = s[CL].split(kk, factor=unroll_k)
        s[CL].reorder(ko, ki, ic, jc)
        s[CL].unroll(ki)
    else:
        s[CL].reorder(kk, ic, jc)
    s[CL].unroll(ic)
    s[CL].vectorize(jc)


def _matmul_ref(a, b):
    return precision.reference(widened(a) @ widened(b), a.dtype)


@template("matmul", reference=_matmul_ref)
def matmul(cfg, M, N, K, dtype="float32"):
    """C[i, j] = sum_k A[i, k] * B[k, j]; A is (M, K), B is (K, N).

    ``dtype``: float32, float64, float16, bfloat16 (float32 accumulation), int8 or uint8
    (int32 products and output; see ``precision``)."""
    p = precision.precision(dtype, "matmul")
    A = pt.placeholder((M, K), dtype, name="A")
    B = pt.placeholder((K, N), dtype, name="B")
    cfg.add_flop(2.0 * M * N * K)
    lanes = cfg.target.vector_lanes(p.out)
    isa = dot_ukernels.usable(cfg.target, dtype, K, M, N)
    wide = dtype == "float32"
    # the dot kernel reads packed B; pack_b 2 (the next panel prefetched): float32's B
    pack = (1,) if isa is not None else (0, 1, 2) if wide else (0, 1)
    a_bytes = M * K * precision.elem_bytes(p)
    block = None if isa is None else dot_knobs.row_block(cfg.target, isa, M, K, N)
    # float32: pack_b 2, the next panel of B prefetched while a panel is multiplied
    # (``schedule_gemm``; one thread of a Zen 5: 1.04-1.06x at 128 x 3072 x 768, where the
    # packing took 7% of the time, 0.99-1.00x at 512^3 to 2048^3)
    define_dot_knobs(
        cfg, isa, M, N, lanes, K, a_bytes=a_bytes, pack_options=pack, block_default=block,
        wide=wide, pack_default=2 if wide else 1, one_panel_rows=True,
    )  # fmt: skip
    skinny.define_stream_knobs(cfg, M, N, p, isa)
    skinny.define_narrow_knobs(cfg, M, N, K, p)
    if skinny.on(cfg):  # a few rows: B streamed in place (``skinny``)
        s, C = skinny.stream_matmul(cfg, p, A, B, M, N, K)
        return s, [A, B, C]
    if skinny.narrow_on(cfg):  # a few columns: dot products, rows in parallel
        s, C = skinny.narrow_matmul(cfg, p, A, B, M, N, K)
        return s, [A, B, C]
    if not dot_knobs.ukernel_on(cfg, isa, M, N):
        s, C = plain_gemm(cfg, p, A, B, M, K)
        return s, [A, B, C]
    # the dot-product kernel: B packed with g reduction elements adjacent per column
    nr, mr = cfg["tile_j"].size[-1], cfg["tile_i"].size[-1]
    g = dot_ukernels.dot_gemm(
        isa, A, lambda k, n: B[k, n], (M, N, K), mr, nr, lambda a, b: precision.product(p, a, b)
    )
    s = pt.create_schedule(g.C.op)
    CL = g.accumulator(s, into_output=True)
    schedule_gemm(cfg, s, g.C, CL, M, pack=lambda: g.BP, tile_intrin=g.tile_intrin(CL))
    return s, [A, B, g.C]


def plain_gemm(cfg, p, A, B, M: int, K: int):
    """``C = A @ B`` (``A [*b, M, K]``, ``B [*b, K, N]``, at most one batch axis) on the
    GEMM's own register tile (``schedule_gemm``); returns ``(schedule, C)``. A 16-bit
    storage float (float16, bfloat16) is widened once, so the tile multiplies float32
    as float32 matmul's does: A into a float32 stage (rows in parallel), B as each
    panel is packed (``pack_b``; else where it is read), and C rounded once as the
    tile's float32 sums are copied out::

        A_f32 = float32(A)                     for jo:  B_f32 panel = float32(B[:, jo])
                                                 for io:  acc = A_f32 rows . panel
                                                          C[io, jo] = round(acc)

    (float16 512^3 on a Sapphire Rapids, 1 thread: 3.4 GFLOP/s with each operand
    converted where the tile reads it by scalar F16C instructions, 42.6 with those
    conversions vectorized, 162 widened once; float32 175)."""
    batch = len(A.shape) == 3
    k = pt.reduce_axis((0, K), name="k")
    Aw, Bw = precision.widen(A), precision.widen(B)

    def dot(b, i, j):
        return pt.sum(precision.product(p, Aw[(*b, i, k)], Bw[(*b, k, j)]), axis=k)

    # (the loops take the lambdas' names)
    body = (lambda b, i, j: dot((b,), i, j)) if batch else (lambda i, j: dot((), i, j))
    shape = (*A.shape[:-1], B.shape[-1])
    if Aw is A:
        C = pt.compute(shape, body, name="C")
        s = pt.create_schedule(C.op)
        CL = s.cache_write(C, "local")
        schedule_gemm(cfg, s, C, CL, M, B, batch_axis=C.op.axis[0] if batch else None)
        return s, C
    acc = pt.compute(shape, body, name="C_acc")
    C = pt.compute(shape, lambda *ix: precision.rounded(acc[ix], p.out), name="C")
    s = pt.create_schedule(C.op)
    s[Aw].parallel(s[Aw].op.axis[0])
    s[Aw].vectorize(s[Aw].op.axis[-1])
    packed = schedule_gemm(
        cfg, s, C, acc, M, pack=lambda: Bw, batch_axis=C.op.axis[0] if batch else None
    )
    if packed is None:  # B read in place: converted where the tile reads it
        s[Bw].compute_inline()
    return s, C


def _batch_matmul_ref(a, b):
    return precision.reference(np.matmul(widened(a), widened(b)), a.dtype)


@template("batch_matmul", reference=_batch_matmul_ref)
def batch_matmul(cfg, B, M, N, K, dtype="float32"):
    """C[b, i, j] = sum_k A[b, i, k] * Bm[b, k, j] (numpy ``matmul`` semantics); ``dtype``
    as ``matmul``'s."""
    p = precision.precision(dtype, "batch_matmul")
    A = pt.placeholder((B, M, K), dtype, name="A")
    Bm = pt.placeholder((B, K, N), dtype, name="B")
    cfg.add_flop(2.0 * B * M * N * K)
    lanes = cfg.target.vector_lanes(p.out)
    isa = dot_ukernels.usable(cfg.target, dtype, K, M, N)
    pack = (1,) if isa is not None else (0, 1, 2) if dtype == "float32" else (0, 1)
    define_dot_knobs(
        cfg, isa, M, N, lanes, K, a_bytes=M * K * precision.elem_bytes(p), pack_options=pack
    )
    skinny.define_stream_knobs(cfg, M, N, p, isa, batch=B)
    skinny.define_narrow_knobs(cfg, M, N, K, p)
    if skinny.on(cfg) or skinny.narrow_on(cfg):  # a few rows, or columns, per product
        form = skinny.stream_matmul if skinny.on(cfg) else skinny.narrow_matmul
        s, C = form(cfg, p, A, Bm, M, N, K)
        return s, [A, Bm, C]
    if not dot_knobs.ukernel_on(cfg, isa, M, N):
        s, C = plain_gemm(cfg, p, A, Bm, M, K)
        return s, [A, Bm, C]
    # the dot-product kernel per batch: B's panels packed as matmul's, one set per batch
    nr, mr = cfg["tile_j"].size[-1], cfg["tile_i"].size[-1]
    g = dot_ukernels.dot_gemm(
        isa, A, lambda b, k, n: Bm[b, k, n], (M, N, K), mr, nr,
        lambda a, b: precision.product(p, a, b), batch=(B,),
    )  # fmt: skip
    s = pt.create_schedule(g.C.op)
    CL = g.accumulator(s, into_output=True)
    schedule_gemm(cfg, s, g.C, CL, M, batch_axis=g.C.op.axis[0], pack=lambda: g.BP,
                  tile_intrin=g.tile_intrin(CL))  # fmt: skip
    return s, [A, Bm, g.C]
