"""bfloat16 attention on the target's dot instructions: the flash form's two GEMMs as
AMX's ``tdpbf16ps`` tile multiplies (``x86-amx``), or as ``vdpbf16ps`` register tiles
(``x86-avx512-bf16``).

The flash form (``attention_flash``) runs unchanged around them, in float32: the
scores, their row max, the exponentials, the row sums and the running state. Only
what the tiles read is bfloat16: Q, K and V as given, and P, which the P V kernel
rounds as it reads its rows (``gemm_tile(..., a_float=True)``; as PyTorch's bfloat16
attention rounds it, no pass of its own; the row sums are of the float32 P). K and V
are packed once per
call into the panels the tile kernel reads (``dot_ukernels``: 2 bfloat16 of the
reduction adjacent per column, zero past the last key)::

    KP[b, h, jo, dk, ji, q] = K[b, h, jo * key_tile + ji, 2 dk + q]
    VP[b, h, eo, jk, ei, q] = V[b, h, 2 jk + q, eo * o_cols + ei]
    for task in B * H * ceil(S / tile_q) (parallel):
      for t in key blocks:
        s[i, j]  = sum_d Q[i, d] K[j, d]        (float32, mr_s x key_tile per kernel call)
        p[i, j]  = exp(scale s[i, j] - bm[i])   (float32)
        pv[i, :] = sum_j bfloat16(p[i, j]) V[j, :]  (float32, mr_o x o_cols per call)
        ... the online softmax's state update, float32
    O = bfloat16(acc / l)

The query/key dim must be whole steps of the kernel (32 on AMX's tiles, 2 for
``vdpbf16ps``); the value dim, the key blocks and the query tiles may be ragged (their
last tiles run as loops). B=1, H=8, S=1024, D=64 on a Zen 5, one thread: float32
arithmetic on bfloat16 storage 12.1 ms (causal 9.9), ``vdpbf16ps`` tiles 8.3 ms (6.0).
"""

from __future__ import annotations

import pypto as pt

from . import dot_ukernels
from .knobs import inner_tile

# columns of a score tile and of a key panel, by the kernel's kind: AMX's tiles, or
# register tiles of vectors (16 lanes)
KEY_TILES = {"amx": (32, 64, 128, 256), "vector": (16, 32, 64)}
BLOCKS = (32, 64, 128, 256, 512)  # keys per step of the online softmax


def tile_isa(target, dtype: str, D: int):
    """The dot kernel for ``dtype`` attention with query/key dim ``D`` on ``target``:
    AMX's tiles, or for bfloat16 the vector ``vdpbf16ps``; None without one (or with D
    not whole steps of it)."""
    isa = dot_ukernels.usable(target, dtype, D, 16, 16)
    if isa is None or not (isa.kind == "amx" or isa.dtype == "bfloat16"):
        return None
    return isa


def define_knobs(cfg, S: int, Sk: int, Dv: int, causal: bool, kind: str = "amx"):
    """``tile_q`` queries per task, ``mr_s`` / ``mr_o`` rows per score / P V kernel
    call, ``key_tile`` columns per score call (a divisor of the block), ``key_block``
    keys per step, ``o_cols`` columns of V per P V call. On AMX's tiles (``kind``
    "amx"): 32 rows (two tiles of A), blocks of 256 keys (128 when causal: the diagonal
    block's masked keys cost less) scored 128 at a time, V's columns 64 at a time (two
    column tiles per pass of the kernel). B=1, H=8, S=1024, D=64, 1 thread on a
    Sapphire Rapids-class Xeon: 6.9 ms (causal 5.2); blocks of 128 / 512 keys 7.6 /
    6.7 (causal 256: 5.4). With ``vdpbf16ps`` ("vector"): register tiles of 16
    accumulators (4 rows x 64 keys, 4 rows x 64 columns of V: the P V kernel also holds
    a row's 16 rounded pairs), blocks of 256 keys (on a Zen 5, one thread: 7.7 ms, and
    causal 5.7, against 8.7 and 6.9 with 128)."""
    vector = kind == "vector"
    inner_tile(cfg, "tile_q", S, [16, 32, 64], 32 if S > 16 else 16)
    rows = [2, 4, 8] if vector else [16, 32]
    cfg.define_knob("mr_s", rows, default=4 if vector else 32)
    cfg.define_knob("mr_o", rows, default=4 if vector else 32)
    top = -(-Sk // 32) * 32
    sizes = sorted({min(top, b) for b in BLOCKS})
    block = 128 if causal and not vector else 256
    cfg.define_knob("key_block", sizes, default=max([b for b in sizes if b <= block] or sizes[:1]))
    tiles = KEY_TILES[kind]
    cfg.define_knob("key_tile", list(tiles), default=64 if vector else 128)
    cols = [n for n in (16, 32, 64) if n < Dv + 16] or [16]
    inner_tile(cfg, "o_cols", Dv, cols, max(cols))


def _widen(x):
    return pt.cast("float32", x)


def _product(a, b):
    return _widen(a) * _widen(b)


def _rounded_product(p, v):
    """P (float32) rounded to bfloat16 times V: what the P V kernel computes."""
    return _widen(pt.cast("bfloat16", p)) * _widen(v)


class TileGemms:
    """The flash form's GEMMs on the dot kernel ``isa`` (``attention_flash.VectorGemms``'
    interface)."""

    def __init__(self, cfg, isa, D: int, k_transposed: bool):
        self.cfg, self.isa, self.D, self.k_transposed = cfg, isa, D, k_transposed
        kb = cfg["key_block"].val
        fits = [n for n in KEY_TILES[isa.kind] if n <= cfg["key_tile"].val and kb % n == 0]
        self.key_tile = max(fits or [min(KEY_TILES[isa.kind])])
        self.nv = cfg["o_cols"].size[-1]

    def operands(self, K, KT, V, dims, Sp: int, dtype: str):
        """K and V packed (zero past the last key): ``(KP, VP, [KP, VP])``."""
        B, H, S, D, Sk, Dv, Hk = dims
        kt, nv, zero = self.key_tile, self.nv, pt.const(0.0, K.dtype)
        last = Sk - 1

        def key(b, h, jo, dk, ji, q):
            j, d = pt.min(jo * kt + ji, last), 2 * dk + q
            k = K[b, h, d, j] if self.k_transposed else K[b, h, j, d]
            return pt.select(jo * kt + ji < Sk, k, zero)

        def value(b, h, eo, jk, ei, q):
            j = 2 * jk + q
            v = V[b, h, pt.min(j, last), pt.min(eo * nv + ei, Dv - 1)]
            return pt.select(j < Sk, v, zero)

        KP = pt.compute((B, Hk, Sp // kt, D // 2, kt, 2), key, name="KP")
        VP = pt.compute((B, Hk, -(-Dv // nv), Sp // 2, nv, 2), value, name="VP")
        return KP, VP, [KP, VP]

    def dot(self, Q, KP, kvh, shape):
        kt = self.key_tile
        ko = pt.reduce_axis((0, Q.shape[-1] // 2), name="ko")
        kq = pt.reduce_axis((0, 2), name="kq")

        def body(b, h, i, j):
            k = KP[b, kvh(h), j // kt, ko, j % kt, kq]
            return pt.sum(_product(Q[b, h, i, 2 * ko + kq], k), axis=[ko, kq])

        return pt.compute(shape, body, name="Dot")

    def pv(self, P, VP, kvh, kb: int, shape):
        nv = self.nv
        ko = pt.reduce_axis((0, kb // 2), name="jo")
        kq = pt.reduce_axis((0, 2), name="jq")

        def body(b, h, t, i, e):
            p = P[b, h, i, t * kb + 2 * ko + kq]
            v = VP[b, kvh(h), e // nv, t * (kb // 2) + ko, e % nv, kq]
            return pt.sum(_rounded_product(p, v), axis=[ko, kq])

        return pt.compute(shape, body, name="PV")

    def tiles(self, s, DL, PV, kb: int, cols, outer):
        """Whole tiles are kernel calls (``dot_ukernels.gemm_tile``), ragged ones loops::

        for i, j: DL[i, j] = sum_{ko, kq} ...  ->  for io: gemm(Q + io * mr_s * D, ..., DL + ...)
        """
        cfg, isa = self.cfg, self.isa
        tq = cfg["tile_q"].size[-1]
        mr = min(cfg["mr_s"].val, tq)
        score = dot_ukernels.gemm_tile(isa, mr, self.key_tile, self.D, _product)
        _tile(s, DL, cols, mr, score, outer)
        dco, dci = cfg["o_cols"].apply(s, PV, PV.op.axis[-1])
        mr = min(cfg["mr_o"].val, tq)
        pv = dot_ukernels.gemm_tile(isa, mr, self.nv, kb, _rounded_product, a_float=True)
        _tile(s, PV, dci, mr, pv, (dco,))


def _tile(s, T, cols, mr: int, intrin, outer=()):
    rows = s[T].op.axis[-2]
    ko, kq = s[T].op.reduce_axis
    ro, ri = s[T].split(rows, factor=mr)
    s[T].reorder(*outer, ro, ko, kq, ri, cols)
    s[T].tensorize(ko, intrin)
