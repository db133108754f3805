"""``conv2d_nchw_winograd``: a 3 x 3, stride-1 convolution by Winograd's minimal filtering.

F(2 x 2, 3 x 3) (Lavin and Gray, 2016; TVM's ``conv2d_nchw_winograd``) computes each
2 x 2 tile of output pixels from a 4 x 4 tile of input with 16 products per channel
pair instead of 36: the direct convolution's 9 multiply-adds per output become 4, in
16 independent GEMMs, one per position (e, u) of the 4 x 4 transformed tile:

    U[eu, k, c] = (G g[k, c] G^T)[e, u]                  the filters, transformed
    V[eu, c, p] = (B^T d[c, p] B)[e, u]                  each input tile p, transformed
    M[eu, k, p] = sum_c U[eu, k, c] * V[eu, c, p]        16 GEMMs (K x C times C x P)
    out[k, tile p] = A^T M[., k, p] A                    2 x 2 outputs per tile

F(4 x 4, 3 x 3) (``tile_size`` 4) does the same with 6 x 6 input tiles: 36 GEMMs, 2.25
multiplies per output. Tiles are ``TW`` per row of output, rounded up to whole vectors
(``TWp``) so that each row of tiles starts a vector: ``p = (n * TH + ty) * TWp + tx``.
The padded input is stored with its columns split by phase (``Dq[n, c, h, q, w'] =
padded[n, c, h, m w' + q]``), so the transforms read whole vectors of tiles at stride 1.
Each transform runs in two passes over a row of tiles (a nested expression unrolls to
a^4 terms, which took seconds to lower), the first into a small buffer at the row:

    for c, row (parallel):                          the input transform
      for e, j (unrolled): for tx (vector):
        BtD[e, j, tx] = sum_i BT[e, i] * Dq[n, c, m ty + i, j % m, tx + j // m]
      for e, u (unrolled): for tx (vector):
        V[e a + u, c, p] = sum_j BT[u, j] * BtD[e, j, tx]
    for eu, panels of p (parallel): ...             the GEMMs, ``matmul``'s micro-kernel
    for n, k (parallel): for ty:                    the output transform
      for e, dx (unrolled): for tx (vector):
        MA[e, dx, tx] = sum_u AT[dx, u] * M[e a + u, k, p]
      for xo (vector): for dy, dx (unrolled):       m columns per vector (interleaved stores)
        out[n, k, m ty + dy, m xo + dx] = sum_e AT[dy, e] * MA[e, dx, xo]

Where it pays: layers with many output columns. On a Zen 4 (AVX-512, 16 lanes), against
PyTorch's direct convolution (oneDNN), one / two threads: 1.80x / 2.41x at 64 channels
56 x 56 (F(4 x 4)), 1.43x / 1.49x at 128 channels 28 x 28 (F(2 x 2)), while at 14 x 14
and 7 x 7 (256, 512 channels) it is slower: a row of 7 tiles is padded to 16, and the
filters, transformed in every call, outweigh the few pixels; ``conv2d_nchw`` there.

The products are rounded differently than in the direct convolution (the transforms
add and subtract inputs first): errors grow by a small factor, as in every Winograd
convolution; float32 only.
"""

from __future__ import annotations

import pypto as pt
from pypto.errors import ScheduleError

from ..task import template
from .conv2d import conv2d_reference
from .conv_tiles import out_size
from .matmul import define_gemm_knobs, schedule_gemm

# F(2 x 2, 3 x 3): input transform B^T, filter transform G, output transform A^T
BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))
# F(4 x 4, 3 x 3), interpolation points 0, 1, -1, 2, -2 (Lavin and Gray's)
BT4 = (
    (4, 0, -5, 0, 1, 0),
    (0, -4, -4, 1, 1, 0),
    (0, 4, -4, -1, 1, 0),
    (0, -2, -1, 2, 1, 0),
    (0, 2, -1, -2, 1, 0),
    (0, 4, 0, -5, 0, 1),
)
G4 = (
    (1 / 4, 0, 0),
    (-1 / 6, -1 / 6, -1 / 6),
    (-1 / 6, 1 / 6, -1 / 6),
    (1 / 24, 1 / 12, 1 / 6),
    (1 / 24, -1 / 12, 1 / 6),
    (0, 0, 1),
)
AT4 = ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1))
# output tile size m -> (B^T, G, A^T); the input tile is m + 2 square
MATRICES = {2: (BT, G, AT), 4: (BT4, G4, AT4)}


def _linear(row, term):
    """``sum_a row[a] * term(a)`` without the zero terms and the products by +-1."""
    out = None
    for a, c in enumerate(row):
        if c == 0:
            continue
        t = term(a) if c in (1, -1) else term(a) * float(c)
        if out is None:
            out = -t if c == -1 else t
        else:
            out = out - t if c == -1 else out + t
    return out


def _matrix_row(index, table, term):
    """``sum_a table[index][a] * term(a)`` for a loop index: a chain of selects on
    ``index`` that folds to one row's sum once the loop is unrolled."""
    expr = _linear(table[-1], term)
    for r in range(len(table) - 2, -1, -1):
        expr = pt.select(index == r, _linear(table[r], term), expr)
    return expr


def _check(C, H, W, K, R, S, stride, padding, dtype):
    if (R, S) != (3, 3) or stride != 1:
        raise ScheduleError(
            f"conv2d_nchw_winograd computes 3 x 3 filters at stride 1, got {R} x {S} at "
            f"stride {stride}: use conv2d_nchw"
        )
    if dtype != "float32":
        raise ScheduleError(f"conv2d_nchw_winograd computes float32, got {dtype}: use conv2d_nchw")
    if min(C, H, W, K) < 1 or padding < 0 or min(H, W) + 2 * padding < 3:
        raise ScheduleError(
            f"conv2d_nchw_winograd: no output for C={C}, H={H}, W={W}, K={K}, padding={padding}"
        )


def _multiplies(m: int, OW: int, lanes: int) -> float:
    """Multiplies per output pixel (and channel pair) of F(m x m, 3 x 3), counting the
    tiles that pad each row to whole vectors: ``(m + 2)^2 / m^2 x TWp / TW``."""
    tw = -(-OW // m)
    return (m + 2) ** 2 / m**2 * (-(-tw // lanes) * lanes) / tw


def _default_tile(OW: int, lanes: int) -> int:
    """The output tile with the fewest multiplies per output pixel (``_multiplies``). 56
    columns on 16 lanes: F(4 x 4) (14 tiles in 16: 2.57) over F(2 x 2) (28 in 32: 4.57),
    measured 1.4x faster; 28 columns: F(2 x 2) (4.57 against 7 tiles in 16: 5.14),
    measured 1.4x."""
    return min(sorted(MATRICES), key=lambda m: _multiplies(m, OW, lanes))


# Winograd pays where its best tile needs at most this many multiplies per output
# (direct: 9). Its transforms and smaller GEMMs cost about 1.5x per multiply: on a Zen 4
# (16 lanes) 2.57 at 56 x 56 ran 1.64x the direct convolution, 4.57 at 28 x 28 1.3x;
# 14 x 14 (9.1: 7 tiles padded to 16) would not gain.
WINOGRAD_MAX_MULTIPLIES = 5.0


def winograd_pays(args: tuple, lanes: int) -> bool:
    """Whether ``conv2d_nchw``'s arguments ``(N, C, H, W, K, R, S, stride, padding[,
    dtype])`` are better computed by ``conv2d_nchw_winograd`` on ``lanes`` float32 lanes:
    a form it takes (3 x 3, stride 1, float32) whose best tile needs at most
    ``WINOGRAD_MAX_MULTIPLIES`` multiplies per output."""
    N, C, H, W, K, R, S, stride, padding, *dtype = args
    try:
        _check(C, H, W, K, R, S, stride, padding, dtype[0] if dtype else "float32")
    except ScheduleError:
        return False
    OW = out_size(W, 3, 1, padding)
    return min(_multiplies(m, OW, lanes) for m in MATRICES) <= WINOGRAD_MAX_MULTIPLIES


@template("conv2d_nchw_winograd", reference=conv2d_reference)
def conv2d_nchw_winograd(cfg, N, C, H, W, K, R=3, S=3, stride=1, padding=1, dtype="float32"):
    """out[n, k, y, x] = sum_{c,r,s} padded[n, c, y + r, x + s] * weight[k, c, r, s] for
    3 x 3 filters at stride 1 (``conv2d_nchw``'s arguments and reference), by F(2 x 2,
    3 x 3) Winograd tiles: the module docstring. The GEMMs take ``matmul``'s knobs
    (``tile_i`` output channels, ``tile_j`` tiles per register tile, ...)."""
    _check(C, H, W, K, R, S, stride, padding, dtype)
    OH, OW = out_size(H, 3, 1, padding), out_size(W, 3, 1, padding)
    lanes = cfg.target.vector_lanes("float32")
    cfg.define_knob("tile_size", sorted(MATRICES), default=_default_tile(OW, lanes))
    m = cfg["tile_size"].val
    a = m + 2  # the input tile's side; a * a positions, one GEMM each
    bt, g, at = MATRICES[m]
    TH, TW = -(-OH // m), -(-OW // m)
    TWp = -(-TW // lanes) * lanes
    P = N * TH * TWp
    data = pt.placeholder((N, C, H, W), dtype, name="data")
    weight = pt.placeholder((K, C, 3, 3), dtype, name="weight")
    cfg.add_flop(2.0 * N * K * OH * OW * C * 9)
    # default GEMM tile: the GEMMs' own (two vectors of tiles x as many channels as half
    # the registers hold: 8 x 32 on AVX-512, 6 x 16 on AVX2), V read in place. On an
    # AVX-512 Xeon, one thread, 1.09x (56 x 56) and 1.3x (28 x 28) the 4 x 16 tile
    # before it (4 accumulators: too few for two full-width FMA pipes); on AVX2 code
    # 1.1x its 8 x 8.
    define_gemm_knobs(cfg, K, P, lanes, pack_options=(0, 1), pack_default=0)

    def padded(n, c, h, w):
        inside = (h >= padding) & (h < H + padding) & (w >= padding) & (w < W + padding)
        hc = pt.min(pt.max(h - padding, 0), H - 1)
        wc = pt.min(pt.max(w - padding, 0), W - 1)
        return pt.select(inside, data[n, c, hc, wc], pt.const(0.0, dtype))

    Dq = pt.compute(
        (N, C, m * TH + 2, m, TWp + 1),
        lambda n, c, h, q, w: padded(n, c, h, m * w + q),
        name="data_split",
    )

    # the input transform in two passes per row of tiles: B^T d (rows), then (B^T d) B
    BD = pt.compute(
        (C, N * TH, a, a, TWp),
        lambda c, row, e, j, tx: _matrix_row(
            e, bt, lambda i: Dq[row // TH, c, m * (row % TH) + i, j % m, tx + j // m]
        ),
        name="BtD",
    )

    def v(eu, c, p):
        row, tx = p // TWp, p % TWp
        return _matrix_row(eu % a, bt, lambda j: BD[c, row, eu // a, j, tx])

    V = pt.compute((a * a, C, P), v, name="V")
    # the filters in two passes, G g then (G g) G^T: 3a + a * a sums per channel pair
    Gw = pt.compute(
        (K, a, 3, C), lambda k, e, j, c: _matrix_row(e, g, lambda i: weight[k, c, i, j]), name="Gw"
    )
    U = pt.compute(
        (a * a, K, C),
        lambda eu, k, c: _matrix_row(eu % a, g, lambda j: Gw[k, eu // a, j, c]),
        name="U",
    )
    rc = pt.reduce_axis((0, C), name="rc")
    M = pt.compute(
        (a * a, K, P), lambda eu, k, p: pt.sum(U[eu, k, rc] * V[eu, rc, p], axis=rc), name="M"
    )

    # the output transform in two passes per row of tiles: M A (columns) then A^T (M A)
    Z = pt.compute(
        (K, N * TH, a, m, TWp),
        lambda k, row, e, dx, tx: _matrix_row(dx, at, lambda u: M[e * a + u, k, row * TWp + tx]),
        name="MA",
    )

    def out(n, k, y, x):
        row = n * TH + y // m
        return _matrix_row(y % m, at, lambda e: Z[k, row, e, x % m, x // m])

    Y = pt.compute((N, K, OH, OW), out, name="conv")
    s = pt.create_schedule(Y.op)
    _schedule_transforms(s, Dq, BD, V, Gw, U, Y, TWp, m)
    yo = s[Y].leaf_iter_vars[1]
    s[Z].compute_at(s[Y], yo)
    k_, row_, e_, dx_, tx_ = Z.op.axis
    s[Z].unroll(e_)
    s[Z].unroll(dx_)
    s[Z].vectorize(tx_)
    ML = s.cache_write(M, "local")
    schedule_gemm(cfg, s, M, ML, K, V, batch_axis=M.op.axis[0])
    return s, [data, weight, Y]


def _schedule_transforms(s, Dq, BD, V, Gw, U, Y, TWp: int, m: int):
    """The padded copy, both transforms and the output tiles: parallel outer loops,
    the 16 positions of a tile unrolled, tiles of a row vectorized."""
    n, c, h, q, w = Dq.op.axis
    s[Dq].parallel(s[Dq].fuse(n, c))
    s[Dq].reorder(h, w, q)
    s[Dq].unroll(q)
    s[Dq].vectorize(w)
    eu, c, p = V.op.axis
    row, tx = s[V].split(p, factor=TWp)
    s[V].reorder(c, row, eu, tx)
    s[V].parallel(s[V].fuse(c, row))
    s[V].unroll(eu)
    s[V].vectorize(tx)
    s[BD].compute_at(s[V], s[V].leaf_iter_vars[0])
    _, _, e, j, tx = BD.op.axis
    s[BD].unroll(e)
    s[BD].unroll(j)
    s[BD].vectorize(tx)
    k, e, b, c = Gw.op.axis
    s[Gw].parallel(k)
    s[Gw].unroll(e)
    s[Gw].unroll(b)
    # stride-9 reads of the weights, which gcc's very-cheap cost model leaves scalar (no
    # gathers): K * 6 * 3 * C elements per call, 3% of the time of 64 channels at 56x56 (Zen 5)
    s[Gw].vectorize(c)
    eu, k, c = U.op.axis
    s[U].reorder(k, eu, c)
    s[U].parallel(k)
    s[U].unroll(eu)
    s[U].vectorize(c)
    n, k, y, x = Y.op.axis
    yo, yi = s[Y].split(y, factor=m)
    xo, xi = s[Y].split(x, factor=m)
    s[Y].reorder(n, k, yo, xo, yi, xi)
    s[Y].parallel(s[Y].fuse(n, k))
    s[Y].unroll(yi)
    s[Y].unroll(xi)
    s[Y].vectorize(xo)
