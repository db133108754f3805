"""Hand-written SIMD micro-kernels, declared as tensor intrinsics (``pt.decl_tensor_intrin``).

``conv_tile`` is the register tile of a direct convolution with output
channels in the vector lanes (AVX2 + FMA, 8 float lanes): ``hb x wb`` output
pixels times ``nk`` vectors of channels accumulated in ``hb * wb * nk``
registers over the whole reduction. The tile is written straight-line, the
accumulators named variables rather than an array the compiler has to
promote to registers (gcc still unrolls the ``s`` loop and may keep
broadcasts alive across it, which spills some tile shapes: the tuner
measures them like any other config):

    for c, r, s:                                 (loops; gcc may unroll s)
      w[v] = load(W[c, r, s, 8v : 8v + 8])       (the fewer of weights and pixels
      p[y][x] = broadcast(P[c, y*st + r, x*st + s])   is held in registers)
      acc[y][x][v] += p[y][x] * w[v]
    out[y, x, 8v : 8v + 8] = acc[y][x][v]

With the strides of a call known (they are constants), the compiler folds the
kernel's general path for strided channels away.
"""

from __future__ import annotations

import pypto as pt

LANES = 8  # float32 in a __m256


def has_conv_tile(target=None) -> bool:
    """Whether this target runs the AVX2 micro-kernels."""
    t = target if isinstance(target, pt.Target) else pt.Target(target or "host")
    return t.arch == "x86_64" and {"avx2", "fma"} <= set(t.features)


def conv_tile(C: int, R: int, S: int, hb: int, wb: int, kb: int, stride: int):
    """The intrinsic ``out[y, x, k] = sum_{c,r,s} P[c, y*st + r, x*st + s] * W[c, r, s, k]``
    over a tile of ``hb`` rows, ``wb`` columns and ``kb`` channels (a multiple of 8)."""
    if kb % LANES:
        raise ValueError(f"conv_tile: {kb} channels are not whole vectors of {LANES}")
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
    name = f"conv_tile_c{C}_r{R}s{S}_st{st}_{hb}x{wb}x{kb}"
    return pt.decl_tensor_intrin(out.op, name, _conv_source(name, C, R, S, hb, wb, kb, st))


def _conv_source(name, C, R, S, hb, wb, kb, st) -> str:
    nk = kb // LANES
    pix = [(y, x) for y in range(hb) for x in range(wb)]
    acc = {(y, x, v): f"a{y}_{x}_{v}" for y, x in pix for v in range(nk)}
    lines = [
        "#include <immintrin.h>",
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
        "  __m256 " + ", ".join(f"{a} = _mm256_setzero_ps()" for a in acc.values()) + ";",
        f"  for (int64_t c = 0; c < {C}; ++c) {{",
        f"    for (int64_t r = 0; r < {R}; ++r) {{",
        f"      for (int64_t s = 0; s < {S}; ++s) {{",
        "        const float* ip = in + c * i0 + r * i1 + s * i2;",
        "        const float* wp = w + c * w0 + r * w1 + s * w2;",
    ]

    def wload(v):
        return f"_mm256_loadu_ps(wp + {v * LANES})"

    def pload(y, x):
        return f"_mm256_broadcast_ss(ip + {y * st} * i1 + {x * st} * i2)"

    body = []
    if nk <= len(pix):  # weights held, one pixel at a time
        body += [f"__m256 w{v} = {wload(v)};" for v in range(nk)]
        for y, x in pix:
            body.append(f"__m256 p{y}_{x} = {pload(y, x)};")
            body += [
                f"{acc[y, x, v]} = _mm256_fmadd_ps(p{y}_{x}, w{v}, {acc[y, x, v]});"
                for v in range(nk)
            ]
    else:  # pixels held, one weight vector at a time
        body += [f"__m256 p{y}_{x} = {pload(y, x)};" for y, x in pix]
        for v in range(nk):
            body.append(f"__m256 w{v} = {wload(v)};")
            body += [
                f"{acc[y, x, v]} = _mm256_fmadd_ps(p{y}_{x}, w{v}, {acc[y, x, v]});" for y, x in pix
            ]
    lines += ["        " + b for b in body]
    lines += ["      }", "    }", "  }"]
    lines += [
        f"  _mm256_storeu_ps(out + {y} * o0 + {x} * o1 + {v * LANES}, {a});"
        for (y, x, v), a in acc.items()
    ]
    lines.append("}")
    return "\n".join(lines) + "\n"
