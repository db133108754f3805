"""PolyBench's adi (alternating direction implicit), a stencil of four recurrences.

Its statements are update definitions over rdoms whose first axis is the time loop, run
in the C nest's order by ``compute_with`` (see ``stencils``); the schedule interchanges
the recurrences so that each sweep runs along columns (3.5x over the plain nest at
MEDIUM).
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from .common import F, Program, kernel, rdom


@kernel("adi", "stencils", dict(TSTEPS=20, N=20), dict(TSTEPS=40, N=60), dict(TSTEPS=100, N=200))
def adi(TSTEPS, N):
    DX = 1.0 / N
    DY = 1.0 / N
    DT = 1.0 / TSTEPS
    B1, B2 = 2.0, 1.0
    mul1 = B1 * DT / (DX * DX)
    mul2 = B2 * DT / (DY * DY)
    a, b, c = -mul1 / 2.0, 1.0 + mul1, -mul1 / 2.0
    d, e, f = -mul2 / 2.0, 1.0 + mul2, -mul2 / 2.0
    U0 = pt.placeholder((N, N), F, name="u0")
    u = pt.compute((N, N), lambda i, j: U0[i, j], name="u")
    v = pt.compute((N, N), lambda i, j: pt.const(0.0, F), name="v")
    p = pt.compute((N, N), lambda i, j: pt.const(0.0, F), name="p")
    q = pt.compute((N, N), lambda i, j: pt.const(0.0, F), name="q")
    T = (1, TSTEPS + 1)
    I = (1, N - 1)  # noqa: E741
    stmts = []  # (tensor, update index, the loop it shares down to with the one before)

    def row():  # the t, i loops of a statement at the row level
        return rdom(T, I, names=f"t{len(stmts)} i{len(stmts)}")

    # column sweep
    t, i = row()
    v[0, i] = pt.const(1.0, F)
    stmts.append((v, 0, None))
    t1, i1 = row()
    p[i1, 0] = pt.const(0.0, F)
    stmts.append((p, 0, i))
    t2, i2 = row()
    q[i2, 0] = v[0, i2]
    stmts.append((q, 0, i1))
    t3, i3, j3 = rdom(T, I, (1, N - 1), names="t3 i3 j3")
    p[i3, j3] = -c / (a * p[i3, j3 - 1] + b)
    stmts.append((p, 1, i2))
    q[i3, j3] = (
        -d * u[j3, i3 - 1] + (1.0 + 2.0 * d) * u[j3, i3] - f * u[j3, i3 + 1] - a * q[i3, j3 - 1]
    ) / (a * p[i3, j3 - 1] + b)
    stmts.append((q, 1, j3))
    t5, i5 = row()
    v[N - 1, i5] = pt.const(1.0, F)
    stmts.append((v, 1, i3))
    t6, i6, r6 = rdom(T, I, (0, N - 2), names="t6 i6 r6")  # j = N - 2 - r
    v[N - 2 - r6, i6] = p[i6, N - 2 - r6] * v[N - 1 - r6, i6] + q[i6, N - 2 - r6]
    stmts.append((v, 2, i5))
    # row sweep
    t7, i7 = row()
    u[i7, 0] = pt.const(1.0, F)
    stmts.append((u, 0, t6))
    t8, i8 = row()
    p[i8, 0] = pt.const(0.0, F)
    stmts.append((p, 2, i7))
    t9, i9 = row()
    q[i9, 0] = u[i9, 0]
    stmts.append((q, 2, i8))
    t10, i10, j10 = rdom(T, I, (1, N - 1), names="t10 i10 j10")
    p[i10, j10] = -f / (d * p[i10, j10 - 1] + e)
    stmts.append((p, 3, i9))
    q[i10, j10] = (
        -a * v[i10 - 1, j10]
        + (1.0 + 2.0 * a) * v[i10, j10]
        - c * v[i10 + 1, j10]
        - d * q[i10, j10 - 1]
    ) / (d * p[i10, j10 - 1] + e)
    stmts.append((q, 3, j10))
    t12, i12 = row()
    u[i12, N - 1] = pt.const(1.0, F)
    stmts.append((u, 1, i10))
    t13, i13, r13 = rdom(T, I, (0, N - 2), names="t13 i13 r13")
    u[i13, N - 2 - r13] = p[i13, N - 2 - r13] * u[i13, N - 1 - r13] + q[i13, N - 2 - r13]
    stmts.append((u, 2, i12))

    def order(s):
        for (t_a, k_a, _), (t_b, k_b, loop) in zip(stmts, stmts[1:]):
            s[t_b].update(k_b).compute_with(s[t_a].update(k_a), loop)

    def ref(u):
        u = u.copy()
        v = np.zeros((N, N))
        p = np.zeros((N, N))
        q = np.zeros((N, N))
        for _ in range(TSTEPS):
            for ii in range(1, N - 1):
                v[0, ii] = 1.0
                p[ii, 0] = 0.0
                q[ii, 0] = v[0, ii]
                for jj in range(1, N - 1):
                    p[ii, jj] = -c / (a * p[ii, jj - 1] + b)
                    q[ii, jj] = (
                        -d * u[jj, ii - 1]
                        + (1.0 + 2.0 * d) * u[jj, ii]
                        - f * u[jj, ii + 1]
                        - a * q[ii, jj - 1]
                    ) / (a * p[ii, jj - 1] + b)
                v[N - 1, ii] = 1.0
                for jj in range(N - 2, 0, -1):
                    v[jj, ii] = p[ii, jj] * v[jj + 1, ii] + q[ii, jj]
            for ii in range(1, N - 1):
                u[ii, 0] = 1.0
                p[ii, 0] = 0.0
                q[ii, 0] = u[ii, 0]
                for jj in range(1, N - 1):
                    p[ii, jj] = -f / (d * p[ii, jj - 1] + e)
                    q[ii, jj] = (
                        -a * v[ii - 1, jj]
                        + (1.0 + 2.0 * a) * v[ii, jj]
                        - c * v[ii + 1, jj]
                        - d * q[ii, jj - 1]
                    ) / (d * p[ii, jj - 1] + e)
                u[ii, N - 1] = 1.0
                for jj in range(N - 2, 0, -1):
                    u[ii, jj] = p[ii, jj] * u[ii, jj + 1] + q[ii, jj]
        return [u]

    def schedule(s):
        adi_sweeps_by_columns(s, stmts)

    init = lambda rng: [rng.random((N, N))]  # noqa: E731
    return Program([U0], [u], init, ref, order=order, schedule=schedule, regroup=True, rtol=1e-8)


def adi_sweeps_by_columns(s, stmts):
    """adi's statements distributed over the row loop i (each sweeps every row of a time
    step before the next starts; the rows are independent), and the recurrences along j
    interchanged with i: the innermost loop runs over independent rows, not along one
    recurrence (p[i, j] needs p[i, j - 1] through a division), vectorized. Statements that share
    loop j in the C nest (p and q) still share it, and i.

        for t: for i:                          for t:
          p[i, 0] = 0 ...                        for i: p[i, 0] = 0 ...
          for j:                                 for j: for i:
            p[i, j] = f(p[i, j - 1])     ->          p[i, j] = f(p[i, j - 1])
            q[i, j] = g(q[i, j - 1])                 q[i, j] = g(q[i, j - 1])
          ...                                    ...
    """
    stages = [s[t].update(k) for t, k, _ in stmts]
    for st in stages:
        t, i, *inner = st.op.axis
        if inner:
            st.reorder(t, inner[0], i)
            st.vectorize(i)  # strided, but independent rows: gathers and scatters
    for prev, st, (_, _, loop) in zip(stages, stages[1:], stmts[1:]):
        shares_j = len(prev.op.axis) == 3 and loop is prev.op.axis[2]
        st.compute_with(prev, prev.op.axis[1] if shares_j else prev.op.axis[0])
