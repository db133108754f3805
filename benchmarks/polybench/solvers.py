"""PolyBench linear-algebra/solvers: cholesky, durbin, gramschmidt, lu, ludcmp, trisolv.

Written as update definitions in the C nests' statement order; ``compute_with`` puts
statements before and after inner loops (imperfect nests). durbin's scalars alpha,
beta and sum are 0-d tensors overwritten at every step k, as the C nest's variables.
"""

from __future__ import annotations

import math

import numpy as np

import pypto as pt

from .common import F, Program, kernel, spd


@kernel("cholesky", "solvers", dict(N=40), dict(N=120), dict(N=400))
def cholesky(N):
    A0 = pt.placeholder((N, N), F, name="A0")
    A = pt.compute((N, N), lambda i, j: A0[i, j], name="A")
    i = pt.reduce_axis((0, N), name="i")
    j = pt.reduce_axis((0, i), name="j")
    k = pt.reduce_axis((0, j), name="k")
    A[i, j] = A[i, j] - A[i, k] * A[j, k]
    A[i, j] = A[i, j] / A[j, j]
    k2 = pt.reduce_axis((0, i), name="k2")
    A[i, i] = A[i, i] - A[i, k2] * A[i, k2]
    A[i, i] = pt.sqrt(A[i, i])

    def order(s):
        s[A].update(1).compute_with(s[A].update(0), j)
        s[A].update(2).compute_with(s[A].update(1), i)
        s[A].update(3).compute_with(s[A].update(2), i)

    def ref(a):
        a = a.copy()
        for ii in range(N):
            for jj in range(ii):
                for kk in range(jj):
                    a[ii, jj] -= a[ii, kk] * a[jj, kk]
                a[ii, jj] /= a[jj, jj]
            for kk in range(ii):
                a[ii, ii] -= a[ii, kk] * a[ii, kk]
            a[ii, ii] = math.sqrt(a[ii, ii])
        return [a]

    return Program([A0], [A], lambda rng: [spd(rng, N)], ref, order=order, rtol=1e-9)


@kernel("durbin", "solvers", dict(N=40), dict(N=120), dict(N=400))
def durbin(N):
    r = pt.placeholder((N,), F, name="r")
    y = pt.compute((N,), lambda i: -r[0], name="y")
    z = pt.compute((N,), lambda i: pt.const(0.0, F), name="z")
    alpha = pt.compute((), lambda: -r[0], name="alpha")  # the C nest's scalar variables
    beta = pt.compute((), lambda: pt.const(1.0, F), name="beta")
    total = pt.compute((), lambda: pt.const(0.0, F), name="sum")
    k = pt.reduce_axis((1, N), name="k")
    # an update runs over the rdoms it names: beta's statement names none, so it says
    # "at every k" with a condition that always holds (simplified away when lowered)
    beta[()] = pt.select(k >= 1, (1.0 - alpha[()] * alpha[()]) * beta[()], beta[()])
    i = pt.reduce_axis((0, k), name="i")
    total[()] = pt.sum(r[k - i - 1] * y[i], axis=i)
    alpha[()] = -(r[k] + total[()]) / beta[()]
    i2 = pt.reduce_axis((0, k), name="i2")
    z[i2] = y[i2] + alpha[()] * y[k - i2 - 1]
    i3 = pt.reduce_axis((0, k), name="i3")
    y[i3] = z[i3]
    y[k] = alpha[()]

    def order(s):
        s[total].update(0).compute_with(s[beta].update(0), k)
        s[alpha].update(0).compute_with(s[total].update(0), k)
        s[z].update(0).compute_with(s[alpha].update(0), k)
        s[y].update(0).compute_with(s[z].update(0), k)
        s[y].update(1).compute_with(s[y].update(0), k)

    def ref(r):
        y = np.zeros(N)
        y[0] = -r[0]
        beta, alpha = 1.0, -r[0]
        for kk in range(1, N):
            beta = (1 - alpha * alpha) * beta
            total = 0.0
            for ii in range(kk):
                total += r[kk - ii - 1] * y[ii]
            alpha = -(r[kk] + total) / beta
            z = y[:kk] + alpha * y[kk - 1 :: -1][:kk]
            y[:kk] = z
            y[kk] = alpha
        return [y]

    def init(rng):
        return [rng.random(N) / N]

    return Program([r], [y], init, ref, order=order, rtol=1e-9)


@kernel("gramschmidt", "solvers", dict(M=20, N=30), dict(M=60, N=80), dict(M=200, N=240))
def gramschmidt(M, N):
    A0 = pt.placeholder((M, N), F, name="A0")
    A = pt.compute((M, N), lambda i, j: A0[i, j], name="A")
    R = pt.compute((N, N), lambda i, j: pt.const(0.0, F), name="R")
    Q = pt.compute((M, N), lambda i, j: pt.const(0.0, F), name="Q")
    k = pt.reduce_axis((0, N), name="k")
    i0 = pt.reduce_axis((0, M), name="i0")
    R[k, k] = pt.sqrt(pt.sum(A[i0, k] * A[i0, k], axis=i0))
    i1 = pt.reduce_axis((0, M), name="i1")
    Q[i1, k] = A[i1, k] / R[k, k]
    j = pt.reduce_axis((k + 1, N), name="j")
    i2 = pt.reduce_axis((0, M), name="i2")
    R[k, j] = pt.sum(Q[i2, k] * A[i2, j], axis=i2)
    i3 = pt.reduce_axis((0, M), name="i3")
    A[i3, j] = A[i3, j] - Q[i3, k] * R[k, j]

    def order(s):
        s[Q].update(0).compute_with(s[R].update(0), k)
        s[R].update(1).compute_with(s[Q].update(0), k)
        s[A].update(0).compute_with(s[R].update(1), j)

    def schedule(s):
        """The column update distributed over j (R's row k first, then A's columns; R[k, j]
        reads column j before its update either way) and run by rows, j vectorized.

            for k: ...                               for k: ...
              for j in k+1..N-1:                       for j in k+1..N-1: R[k, j] = ...
                R[k, j] = sum_i Q[i, k] * A[i, j]  ->   for i in 0..M-1:
                for i: A[i, j] -= Q[i, k] * R[k, j]       for j in k+1..N-1 (vectorized):
                                                            A[i, j] -= Q[i, k] * R[k, j]
        """
        s[Q].update(0).compute_with(s[R].update(0), k)
        s[R].update(1).compute_with(s[Q].update(0), k)
        u = s[A].update(0)
        u.reorder(k, i3, j)
        u.vectorize(j)
        u.compute_with(s[R].update(1), k)

    def ref(a):
        a = a.copy()
        r = np.zeros((N, N))
        q = np.zeros((M, N))
        for kk in range(N):
            nrm = 0.0
            for ii in range(M):
                nrm += a[ii, kk] * a[ii, kk]
            r[kk, kk] = math.sqrt(nrm)
            q[:, kk] = a[:, kk] / r[kk, kk]
            for jj in range(kk + 1, N):
                t = 0.0
                for ii in range(M):
                    t += q[ii, kk] * a[ii, jj]
                r[kk, jj] = t
                a[:, jj] = a[:, jj] - q[:, kk] * r[kk, jj]
        return [a, r, q]

    def init(rng):
        return [rng.random((M, N)) + np.eye(M, N)]

    def view(a, r, q):  # columns past M are rounding noise (rank M), in C as here
        return [a[:, :M], r[:M], q[:, :M]]

    return Program(
        [A0],
        [A, R, Q],
        init,
        ref,
        order=order,
        schedule=schedule,
        regroup=True,
        rtol=1e-8,
        view=view,
    )


def _lu(A, N):
    """The in-place LU factorization of ``A`` (PolyBench's lu nest)."""
    i = pt.reduce_axis((0, N), name="i")
    j = pt.reduce_axis((0, i), name="j")
    k = pt.reduce_axis((0, j), name="k")
    A[i, j] = A[i, j] - A[i, k] * A[k, j]
    A[i, j] = A[i, j] / A[j, j]
    j2 = pt.reduce_axis((i, N), name="j2")
    k2 = pt.reduce_axis((0, i), name="k2")
    A[i, j2] = A[i, j2] - A[i, k2] * A[k2, j2]
    return j, i


def _lu_order(s, A, j, i):
    s[A].update(1).compute_with(s[A].update(0), j)
    s[A].update(2).compute_with(s[A].update(1), i)


def _lu_schedule(s, A):
    """The trailing row update in i-k-j order, j vectorized: rows of A streamed.

    for i: ...                                      for i: ...
      for j in i..N-1:                                for k in 0..i-1:
        for k in 0..i-1:                      ->        for j in i..N-1 (vectorized):
          A[i, j] -= A[i, k] * A[k, j]                    A[i, j] -= A[i, k] * A[k, j]
    """
    u = s[A].update(2)
    _, j2, k2 = u.op.axis
    u.reorder(k2, j2)
    u.vectorize(j2)


def _lu_ref(a, N):
    a = a.copy()
    for ii in range(N):
        for jj in range(ii):
            for kk in range(jj):
                a[ii, jj] -= a[ii, kk] * a[kk, jj]
            a[ii, jj] /= a[jj, jj]
        for jj in range(ii, N):
            for kk in range(ii):
                a[ii, jj] -= a[ii, kk] * a[kk, jj]
    return a


@kernel("lu", "solvers", dict(N=40), dict(N=120), dict(N=400))
def lu(N):
    A0 = pt.placeholder((N, N), F, name="A0")
    A = pt.compute((N, N), lambda i, j: A0[i, j], name="A")
    j, i = _lu(A, N)

    def ref(a):
        return [_lu_ref(a, N)]

    def order(s):
        _lu_order(s, A, j, i)

    def schedule(s):
        _lu_schedule(s, A)

    init = lambda rng: [spd(rng, N)]  # noqa: E731
    return Program([A0], [A], init, ref, order=order, schedule=schedule, rtol=1e-9)


@kernel("ludcmp", "solvers", dict(N=40), dict(N=120), dict(N=400))
def ludcmp(N):
    A0 = pt.placeholder((N, N), F, name="A0")
    b = pt.placeholder((N,), F, name="b")
    A = pt.compute((N, N), lambda i, j: A0[i, j], name="A")
    j, i = _lu(A, N)
    y = pt.compute((N,), lambda i: b[i], name="y")
    iy = pt.reduce_axis((0, N), name="iy")
    jy = pt.reduce_axis((0, iy), name="jy")
    y[iy] = y[iy] - A[iy, jy] * y[jy]
    x = pt.compute((N,), lambda i: y[i], name="x")
    r = pt.reduce_axis((0, N), name="r")  # i = N - 1 - r: the backward substitution
    jx = pt.reduce_axis((N - r, N), name="jx")
    x[N - 1 - r] = x[N - 1 - r] - A[N - 1 - r, jx] * x[jx]
    x[N - 1 - r] = x[N - 1 - r] / A[N - 1 - r, N - 1 - r]

    def order(s):
        _lu_order(s, A, j, i)
        s[x].update(1).compute_with(s[x].update(0), r)

    def ref(a, bb):
        a = _lu_ref(a, N)
        yy = bb.copy()
        for ii in range(N):
            for jj in range(ii):
                yy[ii] -= a[ii, jj] * yy[jj]
        xx = yy.copy()
        for ii in range(N - 1, -1, -1):
            for jj in range(ii + 1, N):
                xx[ii] -= a[ii, jj] * xx[jj]
            xx[ii] = xx[ii] / a[ii, ii]
        return [xx]

    def schedule(s):
        _lu_schedule(s, A)

    def init(rng):
        return [spd(rng, N), rng.random(N)]

    return Program([A0, b], [x], init, ref, order=order, schedule=schedule, rtol=1e-9)


@kernel("trisolv", "solvers", dict(N=40), dict(N=120), dict(N=400))
def trisolv(N):
    L = pt.placeholder((N, N), F, name="L")
    b = pt.placeholder((N,), F, name="b")
    x = pt.compute((N,), lambda i: b[i], name="x")
    i = pt.reduce_axis((0, N), name="i")
    j = pt.reduce_axis((0, i), name="j")
    x[i] = x[i] - L[i, j] * x[j]
    x[i] = x[i] / L[i, i]

    def order(s):
        s[x].update(1).compute_with(s[x].update(0), i)

    def ref(lv, bv):
        xx = bv.copy()
        for ii in range(N):
            for jj in range(ii):
                xx[ii] -= lv[ii, jj] * xx[jj]
            xx[ii] = xx[ii] / lv[ii, ii]
        return [xx]

    def init(rng):
        return [np.tril(rng.random((N, N))) + np.eye(N), rng.random(N)]

    return Program([L, b], [x], init, ref, order=order, rtol=1e-9)
