"""PolyBench medley: deriche, floyd-warshall, nussinov.

deriche's carried scalars (xm1, ym1, ym2, ...) are the previous elements of the row or
column being filtered, read where the C nest reads its scalar copies (0 before the
first element, as the C nest initialises them).
"""

from __future__ import annotations

import math

import numpy as np

import pypto as pt

from .common import Program, kernel, rdom

F32 = "float32"  # deriche's DATA_TYPE


def _deriche_consts(alpha=0.25):
    e = math.exp
    k = (1.0 - e(-alpha)) * (1.0 - e(-alpha)) / (1.0 + 2.0 * alpha * e(-alpha) - e(2.0 * alpha))
    a1 = a5 = k
    a2 = a6 = k * e(-alpha) * (alpha - 1.0)
    a3 = a7 = k * e(-alpha) * (alpha + 1.0)
    a4 = a8 = -k * e(-2.0 * alpha)
    b1 = 2.0 ** (-alpha)
    b2 = -e(-2.0 * alpha)
    return [np.float32(c) for c in (a1, a2, a3, a4, a5, a6, a7, a8, b1, b2, 1.0, 1.0)]


@kernel("deriche", "medley", dict(W=64, H=64), dict(W=192, H=128), dict(W=720, H=480))
def deriche(W, H):
    a1, a2, a3, a4, a5, a6, a7, a8, b1, b2, c1, c2 = _deriche_consts()
    img = pt.placeholder((W, H), F32, name="imgIn")
    zero = pt.const(0.0, F32)

    def c(v):
        return pt.const(float(v), F32)

    def prev(T, i, j, cond):
        return pt.select(cond, T[i, j], zero)

    # along j, forward: y1[i, j] = a1*x[j] + a2*x[j-1] + b1*y1[j-1] + b2*y1[j-2]
    y1 = pt.compute((W, H), lambda i, j: zero, name="y1")
    i, j = rdom((0, W), (0, H), names="i j")
    y1[i, j] = (
        c(a1) * img[i, j]
        + c(a2) * prev(img, i, j - 1, j >= 1)
        + c(b1) * prev(y1, i, j - 1, j >= 1)
        + c(b2) * prev(y1, i, j - 2, j >= 2)
    )
    # along j, backward (j = H - 1 - r)
    y2 = pt.compute((W, H), lambda i, j: zero, name="y2")
    i2, r = rdom((0, W), (0, H), names="i2 r")
    jj = H - 1 - r
    y2[i2, jj] = (
        c(a3) * prev(img, i2, jj + 1, r >= 1)
        + c(a4) * prev(img, i2, jj + 2, r >= 2)
        + c(b1) * prev(y2, i2, jj + 1, r >= 1)
        + c(b2) * prev(y2, i2, jj + 2, r >= 2)
    )
    out1 = pt.compute((W, H), lambda i, j: c(c1) * (y1[i, j] + y2[i, j]), name="out1")
    # along i, forward, columns outermost
    y3 = pt.compute((W, H), lambda i, j: zero, name="y3")
    j3, i3 = rdom((0, H), (0, W), names="j3 i3")
    y3[i3, j3] = (
        c(a5) * out1[i3, j3]
        + c(a6) * prev(out1, i3 - 1, j3, i3 >= 1)
        + c(b1) * prev(y3, i3 - 1, j3, i3 >= 1)
        + c(b2) * prev(y3, i3 - 2, j3, i3 >= 2)
    )
    y4 = pt.compute((W, H), lambda i, j: zero, name="y4")
    j4, r4 = rdom((0, H), (0, W), names="j4 r4")
    ii = W - 1 - r4
    y4[ii, j4] = (
        c(a7) * prev(out1, ii + 1, j4, r4 >= 1)
        + c(a8) * prev(out1, ii + 2, j4, r4 >= 2)
        + c(b1) * prev(y4, ii + 1, j4, r4 >= 1)
        + c(b2) * prev(y4, ii + 2, j4, r4 >= 2)
    )
    out = pt.compute((W, H), lambda i, j: c(c2) * (y3[i, j] + y4[i, j]), name="imgOut")

    def ref(x):
        f = np.float32
        y1 = np.zeros((W, H), f)
        y2 = np.zeros((W, H), f)
        ym1 = np.zeros(W, f)
        ym2 = np.zeros(W, f)
        xm1 = np.zeros(W, f)
        for q in range(H):
            y1[:, q] = a1 * x[:, q] + a2 * xm1 + b1 * ym1 + b2 * ym2
            xm1, ym2, ym1 = x[:, q], ym1, y1[:, q]
        yp1 = np.zeros(W, f)
        yp2 = np.zeros(W, f)
        xp1 = np.zeros(W, f)
        xp2 = np.zeros(W, f)
        for q in range(H - 1, -1, -1):
            y2[:, q] = a3 * xp1 + a4 * xp2 + b1 * yp1 + b2 * yp2
            xp2, xp1, yp2, yp1 = xp1, x[:, q], yp1, y2[:, q]
        o = c1 * (y1 + y2)
        tm1 = np.zeros(H, f)
        ym1 = np.zeros(H, f)
        ym2 = np.zeros(H, f)
        for p in range(W):
            y1[p] = a5 * o[p] + a6 * tm1 + b1 * ym1 + b2 * ym2
            tm1, ym2, ym1 = o[p], ym1, y1[p]
        tp1 = np.zeros(H, f)
        tp2 = np.zeros(H, f)
        yp1 = np.zeros(H, f)
        yp2 = np.zeros(H, f)
        for p in range(W - 1, -1, -1):
            y2[p] = a7 * tp1 + a8 * tp2 + b1 * yp1 + b2 * yp2
            tp2, tp1, yp2, yp1 = tp1, o[p], yp1, y2[p]
        return [c2 * (y1 + y2)]

    def schedule(s):
        s[y1].update(0).reorder(j, i)  # rows filtered side by side: i is contiguous lanes
        s[y2].update(0).reorder(r, i2)
        s[out1].vectorize(out1.op.axis[1])
        s[out].vectorize(out.op.axis[1])

    def init(rng):
        return [rng.random((W, H)).astype(np.float32)]

    return Program([img], [out], init, ref, schedule=schedule, rtol=2e-4, atol=1e-5)


@kernel("floyd-warshall", "medley", dict(N=60), dict(N=180), dict(N=500))
def floyd_warshall(N):
    P0 = pt.placeholder((N, N), "float64", name="path0")
    path = pt.compute((N, N), lambda i, j: P0[i, j], name="path")
    k, i, j = rdom((0, N), (0, N), (0, N), names="k i j")
    path[i, j] = pt.min(path[i, j], path[i, k] + path[k, j])

    def ref(p):
        p = p.copy()
        for kk in range(N):
            p = np.minimum(p, p[:, kk : kk + 1] + p[kk][None, :])
        return [p]

    def init(rng):
        return [np.floor(rng.random((N, N)) * 100.0) + 1.0]

    # vectorize(j) is refused: path[i, k] is written at j = k (that it keeps its value
    # there, as path[k, k] >= 0, is beyond a dependence analysis)
    return Program([P0], [path], init, ref)


@kernel("nussinov", "medley", dict(N=60), dict(N=180), dict(N=500))
def nussinov(N):
    seq = pt.placeholder((N,), "int32", name="seq")
    T0 = pt.placeholder((N, N), "int32", name="table0")
    T = pt.compute((N, N), lambda i, j: T0[i, j], name="table")
    r = pt.reduce_axis((0, N), name="r")  # i = N - 1 - r
    i = N - 1 - r
    j = pt.reduce_axis((N - r, N), name="j")
    match = pt.select(seq[i] + seq[j] == 3, pt.const(1, "int32"), pt.const(0, "int32"))
    left = pt.max(T[i, j], T[i, j - 1])
    diag = T[i + 1, j - 1] + pt.select(i < j - 1, match, pt.const(0, "int32"))
    T[i, j] = pt.select(r >= 1, pt.max(pt.max(left, T[i + 1, j]), diag), left)
    k = pt.reduce_axis((i + 1, j), name="k")
    T[i, j] = pt.max(T[i, j], T[i, k] + T[k + 1, j])

    def order(s):
        s[T].update(1).compute_with(s[T].update(0), j)

    def ref(sq, t):
        t = t.copy()
        for p in range(N - 1, -1, -1):
            for q in range(p + 1, N):
                t[p, q] = max(t[p, q], t[p, q - 1])
                if p + 1 < N:
                    t[p, q] = max(t[p, q], t[p + 1, q])
                    m = 1 if sq[p] + sq[q] == 3 else 0
                    t[p, q] = max(t[p, q], t[p + 1, q - 1] + (m if p < q - 1 else 0))
                for kk in range(p + 1, q):
                    t[p, q] = max(t[p, q], t[p, kk] + t[kk + 1, q])
        return [t]

    def init(rng):
        return [rng.integers(0, 4, N).astype(np.int32), np.zeros((N, N), np.int32)]

    return Program([seq, T0], [T], init, ref, order=order)
