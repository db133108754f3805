"""PolyBench linear-algebra/blas: gemm, gemver, gesummv, symm, syr2k, syrk, trmm.

alpha and beta are float scalar arguments (``pt.var("alpha", "float64")``), first in
the argument list as in PolyBench's ``kernel_gemm(ni, nj, nk, alpha, beta, C, A, B)``;
the inputs give them PolyBench's values, 1.5 and 1.2.
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from .common import ALPHA, BETA, F, Program, kernel, rdom, scalars


@kernel(
    "gemm",
    "blas",
    dict(NI=20, NJ=25, NK=30),
    dict(NI=60, NJ=70, NK=80),
    dict(NI=200, NJ=220, NK=240),
)
def gemm(NI, NJ, NK):
    alpha, beta = scalars("alpha beta")
    A = pt.placeholder((NI, NK), F, name="A")
    B = pt.placeholder((NK, NJ), F, name="B")
    C0 = pt.placeholder((NI, NJ), F, name="C0")
    C = pt.compute((NI, NJ), lambda i, j: C0[i, j] * beta, name="C")
    i, k, j = rdom((0, NI), (0, NK), (0, NJ), names="i k j")
    C[i, j] = C[i, j] + alpha * A[i, k] * B[k, j]

    def ref(al, be, a, b, c):
        c = c * be
        for kk in range(NK):
            c += al * a[:, kk : kk + 1] * b[kk][None, :]
        return [c]

    def schedule(s):
        """Blocks of 4 rows of C by 8 steps of k: each row's vectorized j loop adds 8
        products per load and store of C (gcc keeps the unrolled sum in registers), and
        the 8 rows of B stay in L1 across the 4 rows of C. A register tile across all of
        k (``io, jo, k, ii, ji``) would need C accumulated in a local buffer, which
        ``cache_write`` does not give a tensor with update definitions: as loads and
        stores of C it ran at 0.82x the C nest."""
        u = s[C].update(0)
        io, ii = u.split(i, factor=4)
        ko, ki = u.split(k, factor=8)
        u.reorder(io, ko, ii, j, ki)
        u.unroll(ki)
        u.vectorize(j)

    def init(rng):
        return [ALPHA, BETA, rng.random((NI, NK)), rng.random((NK, NJ)), rng.random((NI, NJ))]

    return Program([alpha, beta, A, B, C0], [C], init, ref, schedule=schedule)


@kernel("gemver", "blas", dict(N=40), dict(N=120), dict(N=400))
def gemver(N):
    alpha, beta = scalars("alpha beta")
    names = ["A0", "u1", "v1", "u2", "v2", "w0", "x0", "y", "z"]
    A0, u1, v1, u2, v2, w0, x0, y, z = [
        pt.placeholder((N, N) if n == "A0" else (N,), F, name=n) for n in names
    ]
    A = pt.compute((N, N), lambda i, j: A0[i, j] + u1[i] * v1[j] + u2[i] * v2[j], name="A")
    x = pt.compute((N,), lambda i: x0[i], name="x")
    i, j = rdom((0, N), (0, N), names="i j")
    x[i] = x[i] + beta * A[j, i] * y[j]
    i2 = pt.reduce_axis((0, N), name="i2")
    x[i2] = x[i2] + z[i2]
    w = pt.compute((N,), lambda i: w0[i], name="w")
    i3, j3 = rdom((0, N), (0, N), names="i3 j3")
    w[i3] = w[i3] + alpha * A[i3, j3] * x[j3]

    def ref(al, be, a, u1, v1, u2, v2, w, x, y, z):
        a = a + u1[:, None] * v1[None, :] + u2[:, None] * v2[None, :]
        for jj in range(N):
            x = x + be * a[jj, :] * y[jj]
        x = x + z
        for jj in range(N):
            w = w + al * a[:, jj] * x[jj]
        return [a, x, w]

    def schedule(s):
        s[A].vectorize(A.op.axis[1])
        s[x].update(0).reorder(j, i)  # rows of A, contiguous
        s[x].update(0).vectorize(i)
        s[w].update(0).reorder(j3, i3)
        s[w].update(0).vectorize(i3)

    def init(rng):
        return [ALPHA, BETA, rng.random((N, N))] + [rng.random(N) for _ in range(8)]

    return Program(
        [alpha, beta, A0, u1, v1, u2, v2, w0, x0, y, z], [A, x, w], init, ref, schedule=schedule
    )


@kernel("gesummv", "blas", dict(N=30), dict(N=90), dict(N=250))
def gesummv(N):
    alpha, beta = scalars("alpha beta")
    A = pt.placeholder((N, N), F, name="A")
    B = pt.placeholder((N, N), F, name="B")
    x = pt.placeholder((N,), F, name="x")
    j = pt.reduce_axis((0, N), name="j")
    tmp = pt.compute((N,), lambda i: pt.sum(A[i, j] * x[j], axis=j), name="tmp")
    j2 = pt.reduce_axis((0, N), name="j2")
    yb = pt.compute((N,), lambda i: pt.sum(B[i, j2] * x[j2], axis=j2), name="yb")
    y = pt.compute((N,), lambda i: alpha * tmp[i] + beta * yb[i], name="y")

    def ref(al, be, a, b, x):
        t = np.zeros(N)
        yy = np.zeros(N)
        for jj in range(N):
            t = a[:, jj] * x[jj] + t
            yy = b[:, jj] * x[jj] + yy
        return [al * t + be * yy]

    def schedule(s):
        s[tmp].compute_at(s[y], y.op.axis[0])
        s[yb].compute_at(s[y], y.op.axis[0])

    init = lambda rng: [ALPHA, BETA, rng.random((N, N)), rng.random((N, N)), rng.random(N)]  # noqa: E731
    return Program([alpha, beta, A, B, x], [y], init, ref, schedule=schedule)


@kernel("symm", "blas", dict(M=20, N=30), dict(M=60, N=80), dict(M=200, N=240))
def symm(M, N):
    alpha, beta = scalars("alpha beta")
    A = pt.placeholder((M, M), F, name="A")
    B = pt.placeholder((M, N), F, name="B")
    C0 = pt.placeholder((M, N), F, name="C0")
    C = pt.compute((M, N), lambda i, j: C0[i, j], name="C")
    i, j = rdom((0, M), (0, N), names="i j")
    k = pt.reduce_axis((0, i), name="k")
    C[k, j] = C[k, j] + alpha * B[i, j] * A[i, k]
    k2 = pt.reduce_axis((0, i), name="k2")
    temp2 = pt.sum(B[k2, j] * A[i, k2], axis=k2)
    C[i, j] = beta * C[i, j] + alpha * B[i, j] * A[i, i] + alpha * temp2

    def order(s):
        s[C].update(1).compute_with(s[C].update(0), j)  # C[i, j] after the k loop

    def schedule(s):
        """Row i's final values after all of its updates of the rows above (which the
        final statement of row i does not read), those in i-k-j order, j vectorized.

            for i: for j:                            for i:
              for k < i: C[k, j] += a B[i, j] A[i, k]  ->  for k < i: for j (vectorized):
              C[i, j] = b C[i, j] + ...                      C[k, j] += a B[i, j] A[i, k]
                                                          for j (vectorized):
                                                            C[i, j] = b C[i, j] + ...
        """
        u = s[C].update(0)
        u.reorder(i, k, j)
        u.vectorize(j)
        last = s[C].update(1)
        last.compute_with(u, i)
        last.vectorize(last.op.axis[1])  # j: the rows' reductions side by side

    def ref(al, be, a, b, c):
        c = c.copy()
        for ii in range(M):
            for jj in range(N):
                t2 = 0.0
                for kk in range(ii):
                    c[kk, jj] += al * b[ii, jj] * a[ii, kk]
                    t2 += b[kk, jj] * a[ii, kk]
                c[ii, jj] = be * c[ii, jj] + al * b[ii, jj] * a[ii, ii] + al * t2
        return [c]

    init = lambda rng: [ALPHA, BETA, rng.random((M, M)), rng.random((M, N)), rng.random((M, N))]  # noqa: E731
    return Program(
        [alpha, beta, A, B, C0], [C], init, ref, order=order, schedule=schedule, regroup=True
    )


def _syrk_like(N, M, two: bool):
    alpha, beta = scalars("alpha beta")
    A = pt.placeholder((N, M), F, name="A")
    B = pt.placeholder((N, M), F, name="B") if two else None
    C0 = pt.placeholder((N, N), F, name="C0")
    C = pt.compute((N, N), lambda i, j: C0[i, j], name="C")
    i = pt.reduce_axis((0, N), name="i")
    j = pt.reduce_axis((0, i + 1), name="j")
    C[i, j] = C[i, j] * beta
    k = pt.reduce_axis((0, M), name="k")
    j2 = pt.reduce_axis((0, i + 1), name="j2")
    if two:
        C[i, j2] = C[i, j2] + (A[j2, k] * alpha * B[i, k] + B[j2, k] * alpha * A[i, k])
    else:
        C[i, j2] = C[i, j2] + alpha * A[i, k] * A[j2, k]

    def order(s):
        s[C].update(1).compute_with(s[C].update(0), i)

    def ref(al, be, a, *rest):
        b, c = rest if two else (None, rest[0])
        c = c.copy()
        for ii in range(N):
            c[ii, : ii + 1] *= be
            for kk in range(M):
                if two:
                    c[ii, : ii + 1] += (
                        a[: ii + 1, kk] * al * b[ii, kk] + b[: ii + 1, kk] * al * a[ii, kk]
                    )
                else:
                    c[ii, : ii + 1] += al * a[ii, kk] * a[: ii + 1, kk]
        return [c]

    def schedule(s):
        """The sums by dot products of rows (k innermost: A[j, k] read along its row,
        not down a column), 8 of them (columns j) at a time, unrolled: 8 independent
        chains of additions.

            for i: for k: for j <= i:        for i: for jo: for k:
              C[i, j] += ...           ->      for ji in 0..7 (unrolled): C[i, 8 jo + ji] += ...
        """
        s[C].update(0).vectorize(j)
        u = s[C].update(1)
        jo, ji = u.split(j2, factor=8)
        u.reorder(i, jo, k, ji)
        u.unroll(ji)

    def init(rng):
        mats = [rng.random((N, M))] + ([rng.random((N, M))] if two else [])
        return [ALPHA, BETA] + mats + [rng.random((N, N))]

    ins = [alpha, beta] + ([A, B, C0] if two else [A, C0])
    return Program(ins, [C], init, ref, order=order, schedule=schedule)


@kernel("syr2k", "blas", dict(M=20, N=30), dict(M=60, N=80), dict(M=200, N=240))
def syr2k(M, N):
    return _syrk_like(N, M, two=True)


@kernel("syrk", "blas", dict(M=20, N=30), dict(M=60, N=80), dict(M=200, N=240))
def syrk(M, N):
    return _syrk_like(N, M, two=False)


@kernel("trmm", "blas", dict(M=20, N=30), dict(M=60, N=80), dict(M=200, N=240))
def trmm(M, N):
    (alpha,) = scalars("alpha")
    A = pt.placeholder((M, M), F, name="A")
    B0 = pt.placeholder((M, N), F, name="B0")
    B = pt.compute((M, N), lambda i, j: B0[i, j], name="B")
    i, j = rdom((0, M), (0, N), names="i j")
    k = pt.reduce_axis((i + 1, M), name="k")
    B[i, j] = B[i, j] + A[k, i] * B[k, j]
    B[i, j] = alpha * B[i, j]

    def order(s):
        s[B].update(1).compute_with(s[B].update(0), j)

    def ref(al, a, b):
        b = b.copy()
        for ii in range(M):
            for kk in range(ii + 1, M):
                b[ii, :] += a[kk, ii] * b[kk, :]
            b[ii, :] = al * b[ii, :]
        return [b]

    def schedule(s):
        """Row i's scaling after all of its sums (rows below i are not scaled yet either
        way), the sums in i-k-j order with j vectorized: rows of B streamed.

            for i: for j:                          for i:
              for k in i+1..M-1:                     for k in i+1..M-1:
                B[i, j] += A[k, i] * B[k, j]   ->      for j (vectorized):
              B[i, j] = alpha * B[i, j]                  B[i, j] += A[k, i] * B[k, j]
                                                     for j: B[i, j] = alpha * B[i, j]
        """
        u = s[B].update(0)
        u.reorder(i, k, j)
        u.vectorize(j)
        s[B].update(1).compute_with(u, i)

    init = lambda rng: [ALPHA, rng.random((M, M)), rng.random((M, N))]  # noqa: E731
    return Program([alpha, A, B0], [B], init, ref, order=order, schedule=schedule, regroup=True)
