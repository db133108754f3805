"""PolyBench linear-algebra/kernels (2mm, 3mm, atax, bicg, doitgen, mvt) and datamining
(correlation, covariance). 2mm's alpha and beta are float scalar arguments (see blas)."""

from __future__ import annotations

import math

import numpy as np

import pypto as pt

from .common import ALPHA, BETA, F, Program, kernel, rdom, scalars


def _mm(name, A, B, n, m, kk, scale=None):
    """``name[i, j] = sum_k scale * A[i, k] * B[k, j]`` (PolyBench's order of products)."""
    k = pt.reduce_axis((0, kk), name=f"k_{name}")
    if scale is None:
        return pt.compute((n, m), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name=name)
    return pt.compute((n, m), lambda i, j: pt.sum(scale * A[i, k] * B[k, j], axis=k), name=name)


def _ikj(s, T):
    """The matmul schedule: i, k, j order (rows of B streamed), j vectorized."""
    i, j = T.op.axis
    (k,) = T.op.reduce_axis
    s[T].reorder(i, k, j)
    s[T].vectorize(j)


def _mm_ref(a, b, scale=None):
    out = np.zeros((a.shape[0], b.shape[1]))
    for kk in range(a.shape[1]):
        col = a[:, kk : kk + 1] if scale is None else scale * a[:, kk : kk + 1]
        out += col * b[kk][None, :]
    return out


@kernel(
    "2mm",
    "kernels",
    dict(NI=16, NJ=18, NK=22, NL=24),
    dict(NI=40, NJ=50, NK=70, NL=80),
    dict(NI=180, NJ=190, NK=210, NL=220),
)
def two_mm(NI, NJ, NK, NL):
    alpha, beta = scalars("alpha beta")
    A = pt.placeholder((NI, NK), F, name="A")
    B = pt.placeholder((NK, NJ), F, name="B")
    C = pt.placeholder((NJ, NL), F, name="C")
    D0 = pt.placeholder((NI, NL), F, name="D0")
    tmp = _mm("tmp", A, B, NI, NJ, NK, scale=alpha)
    D = pt.compute((NI, NL), lambda i, j: D0[i, j] * beta, name="D")
    i, j, k = rdom((0, NI), (0, NL), (0, NJ), names="i j k")
    D[i, j] = D[i, j] + tmp[i, k] * C[k, j]

    def ref(al, be, a, b, c, d):
        t = _mm_ref(a, b, al)
        d = d * be
        for kk in range(NJ):
            d += t[:, kk : kk + 1] * c[kk][None, :]
        return [d]

    def schedule(s):
        _ikj(s, tmp)
        s[D].update(0).reorder(i, k, j)
        s[D].update(0).vectorize(j)

    def init(rng):
        return [ALPHA, BETA] + [rng.random(sh) for sh in ((NI, NK), (NK, NJ), (NJ, NL), (NI, NL))]

    return Program([alpha, beta, A, B, C, D0], [D], init, ref, schedule=schedule)


@kernel(
    "3mm",
    "kernels",
    dict(NI=16, NJ=18, NK=20, NL=22, NM=24),
    dict(NI=40, NJ=50, NK=60, NL=70, NM=80),
    dict(NI=180, NJ=190, NK=200, NL=210, NM=220),
)
def three_mm(NI, NJ, NK, NL, NM):
    A = pt.placeholder((NI, NK), F, name="A")
    B = pt.placeholder((NK, NJ), F, name="B")
    C = pt.placeholder((NJ, NM), F, name="C")
    D = pt.placeholder((NM, NL), F, name="D")
    E = _mm("E", A, B, NI, NJ, NK)
    Fm = _mm("F", C, D, NJ, NL, NM)
    G = _mm("G", E, Fm, NI, NL, NJ)

    def ref(a, b, c, d):
        return [_mm_ref(_mm_ref(a, b), _mm_ref(c, d))]

    def schedule(s):
        for T in (E, Fm, G):
            _ikj(s, T)

    def init(rng):
        return [rng.random(sh) for sh in ((NI, NK), (NK, NJ), (NJ, NM), (NM, NL))]

    return Program([A, B, C, D], [G], init, ref, schedule=schedule)


@kernel("atax", "kernels", dict(M=38, N=42), dict(M=116, N=124), dict(M=390, N=410))
def atax(M, N):
    A = pt.placeholder((M, N), F, name="A")
    x = pt.placeholder((N,), F, name="x")
    j = pt.reduce_axis((0, N), name="j")
    tmp = pt.compute((M,), lambda i: pt.sum(A[i, j] * x[j], axis=j), name="tmp")
    i = pt.reduce_axis((0, M), name="i")
    y = pt.compute((N,), lambda j: pt.sum(A[i, j] * tmp[i], axis=i), name="y")

    def ref(a, x):
        t = np.zeros(M)
        for jj in range(N):
            t = t + a[:, jj] * x[jj]
        y = np.zeros(N)
        for ii in range(M):
            y = y + a[ii, :] * t[ii]
        return [y]

    def schedule(s):
        s[y].reorder(i, y.op.axis[0])  # rows of A, contiguous
        s[y].vectorize(y.op.axis[0])

    return Program(
        [A, x], [y], lambda rng: [rng.random((M, N)), rng.random(N)], ref, schedule=schedule
    )


@kernel("bicg", "kernels", dict(M=38, N=42), dict(M=116, N=124), dict(M=390, N=410))
def bicg(M, N):
    A = pt.placeholder((N, M), F, name="A")
    r = pt.placeholder((N,), F, name="r")
    p = pt.placeholder((M,), F, name="p")
    i = pt.reduce_axis((0, N), name="i")
    s_ = pt.compute((M,), lambda j: pt.sum(r[i] * A[i, j], axis=i), name="s")
    j = pt.reduce_axis((0, M), name="j")
    q = pt.compute((N,), lambda i: pt.sum(A[i, j] * p[j], axis=j), name="q")

    def ref(a, r, p):
        s = np.zeros(M)
        for ii in range(N):
            s = s + r[ii] * a[ii, :]
        q = np.zeros(N)
        for jj in range(M):
            q = q + a[:, jj] * p[jj]
        return [s, q]

    def schedule(sch):
        sch[s_].reorder(i, s_.op.axis[0])
        sch[s_].vectorize(s_.op.axis[0])

    init = lambda rng: [rng.random((N, M)), rng.random(N), rng.random(M)]  # noqa: E731
    return Program([A, r, p], [s_, q], init, ref, schedule=schedule)


@kernel(
    "doitgen",
    "kernels",
    dict(NQ=8, NR=10, NP=12),
    dict(NQ=20, NR=25, NP=30),
    dict(NQ=40, NR=50, NP=60),
)
def doitgen(NQ, NR, NP):
    A0 = pt.placeholder((NR, NQ, NP), F, name="A0")
    C4 = pt.placeholder((NP, NP), F, name="C4")
    s = pt.reduce_axis((0, NP), name="s")
    A = pt.compute((NR, NQ, NP), lambda r, q, p: pt.sum(A0[r, q, s] * C4[s, p], axis=s), name="A")

    def ref(a, c4):
        out = np.zeros_like(a)
        for ss in range(NP):
            out += a[:, :, ss : ss + 1] * c4[ss][None, None, :]
        return [out]

    def schedule(sch):
        r, q, p = A.op.axis
        sch[A].reorder(r, q, s, p)
        sch[A].vectorize(p)

    init = lambda rng: [rng.random((NR, NQ, NP)), rng.random((NP, NP))]  # noqa: E731
    return Program([A0, C4], [A], init, ref, schedule=schedule)


@kernel("mvt", "kernels", dict(N=40), dict(N=120), dict(N=400))
def mvt(N):
    A = pt.placeholder((N, N), F, name="A")
    y1 = pt.placeholder((N,), F, name="y_1")
    y2 = pt.placeholder((N,), F, name="y_2")
    x10 = pt.placeholder((N,), F, name="x1_0")
    x20 = pt.placeholder((N,), F, name="x2_0")
    x1 = pt.compute((N,), lambda i: x10[i], name="x1")
    x2 = pt.compute((N,), lambda i: x20[i], name="x2")
    i, j = rdom((0, N), (0, N), names="i j")
    x1[i] = x1[i] + A[i, j] * y1[j]
    i2, j2 = rdom((0, N), (0, N), names="i2 j2")
    x2[i2] = x2[i2] + A[j2, i2] * y2[j2]

    def ref(a, y1, y2, x1, x2):
        for jj in range(N):
            x1 = x1 + a[:, jj] * y1[jj]
            x2 = x2 + a[jj, :] * y2[jj]
        return [x1, x2]

    def schedule(s):
        s[x2].update(0).reorder(j2, i2)
        s[x2].update(0).vectorize(i2)

    init = lambda rng: [rng.random((N, N))] + [rng.random(N) for _ in range(4)]  # noqa: E731
    return Program([A, y1, y2, x10, x20], [x1, x2], init, ref, schedule=schedule)


def _centered(data, M, N, name):
    """mean[j] = sum_i data[i, j] / N, then the data minus its column mean."""
    i = pt.reduce_axis((0, N), name="i_mean")
    msum = pt.compute((M,), lambda j: pt.sum(data[i, j], axis=i), name=f"{name}_sum")
    mean = pt.compute((M,), lambda j: msum[j] / float(N), name=f"{name}_mean")
    return msum, mean


def _mean_ref(d, N):
    m = np.zeros(d.shape[1])
    for ii in range(N):
        m = m + d[ii]
    return m / float(N)


@kernel("covariance", "datamining", dict(M=28, N=32), dict(M=80, N=100), dict(M=240, N=260))
def covariance(M, N):
    data = pt.placeholder((N, M), F, name="data")
    msum, mean = _centered(data, M, N, "cov")
    d = pt.compute((N, M), lambda i, j: data[i, j] - mean[j], name="d")
    k = pt.reduce_axis((0, N), name="k")
    csum = pt.compute((M, M), lambda i, j: pt.sum(d[k, i] * d[k, j], axis=k), name="csum")
    cov = pt.compute((M, M), lambda i, j: csum[i, j] / (float(N) - 1.0), name="cov")

    def ref(x):
        dd = x - _mean_ref(x, N)[None, :]
        c = np.zeros((M, M))
        for kk in range(N):
            c += dd[kk][:, None] * dd[kk][None, :]
        return [c / (float(N) - 1.0)]

    def schedule(s):
        s[mean].compute_inline()
        i, j = csum.op.axis
        s[csum].reorder(i, k, j)
        s[csum].vectorize(j)

    return Program([data], [cov], lambda rng: [rng.random((N, M))], ref, schedule=schedule)


@kernel("correlation", "datamining", dict(M=28, N=32), dict(M=80, N=100), dict(M=240, N=260))
def correlation(M, N):
    eps = 0.1
    data = pt.placeholder((N, M), F, name="data")
    msum, mean = _centered(data, M, N, "cor")
    i = pt.reduce_axis((0, N), name="i_var")
    vsum = pt.compute(
        (M,),
        lambda j: pt.sum((data[i, j] - mean[j]) * (data[i, j] - mean[j]), axis=i),
        name="vsum",
    )
    std = pt.compute((M,), lambda j: pt.sqrt(vsum[j] / float(N)), name="std0")
    stddev = pt.compute((M,), lambda j: pt.select(std[j] <= eps, 1.0, std[j]), name="stddev")
    d = pt.compute(
        (N, M), lambda i, j: (data[i, j] - mean[j]) / (math.sqrt(float(N)) * stddev[j]), name="d"
    )
    k = pt.reduce_axis((0, N), name="k")
    corr = pt.compute((M, M), lambda i, j: pt.sum(d[k, i] * d[k, j], axis=k), name="corr")
    r = pt.reduce_axis((0, M), name="r")
    corr[r, r] = pt.const(1.0, F)

    def ref(x):
        mean = _mean_ref(x, N)
        var = np.zeros(M)
        for ii in range(N):
            var = var + (x[ii] - mean) * (x[ii] - mean)
        sd = np.sqrt(var / float(N))
        sd = np.where(sd <= eps, 1.0, sd)
        dd = (x - mean[None, :]) / (math.sqrt(float(N)) * sd[None, :])
        c = np.zeros((M, M))
        for kk in range(N):
            c += dd[kk][:, None] * dd[kk][None, :]
        np.fill_diagonal(c, 1.0)
        return [c]

    def schedule(s):
        s[mean].compute_inline()
        s[std].compute_inline()
        a, b = corr.op.axis
        s[corr].reorder(a, k, b)
        s[corr].vectorize(b)

    return Program([data], [corr], lambda rng: [rng.random((N, M))], ref, schedule=schedule)
