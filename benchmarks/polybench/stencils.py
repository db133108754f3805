"""PolyBench stencils: fdtd-2d, heat-3d, jacobi-1d, jacobi-2d, seidel-2d (adi in ``adi``).

Every statement of a time step is an update definition over an rdom whose first axis
is the time loop; ``compute_with`` runs them in the C nest's order inside one time loop.

Schedules: seidel-2d by diagonals, adi with its recurrences interchanged (3.5x over the
plain nest at MEDIUM); jacobi-2d, heat-3d and fdtd-2d by time tiles once their arrays
outgrow the L2 cache (``time_tiles``: the second statement shifted a row behind the
first, both skewed by the time step and tiled, the tiles' loops and the time loop
shared, each tile's time loop running only the steps that have points in it;
``tile_updates`` for fdtd-2d's four statements), below that only vectorized, where the
plain nest already runs from the cache, but for jacobi-1d at every size (its arrays
stay in L1) and jacobi-2d: their rows as interleaved strips (``strips``: the plain
nest's loads of a point's neighbours in its row straddle vectors; in strips each load
is a whole aligned vector).
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from .common import F, Program, kernel, rdom


def _chain(s, stages_and_loops):
    """``compute_with`` each stage after the one before it, sharing loops down to the
    given loop of the one before: [(stage, None), (stage, loop), ...]."""
    for (prev, _), (st, loop) in zip(stages_and_loops, stages_and_loops[1:]):
        st.compute_with(prev, loop)


@kernel(
    "jacobi-1d",
    "stencils",
    dict(TSTEPS=20, N=30),
    dict(TSTEPS=40, N=120),
    dict(TSTEPS=100, N=400),
    large=dict(TSTEPS=500, N=2000),
)
def jacobi_1d(TSTEPS, N):
    A0 = pt.placeholder((N,), F, name="A0")
    B0 = pt.placeholder((N,), F, name="B0")
    A = pt.compute((N,), lambda i: A0[i], name="A")
    B = pt.compute((N,), lambda i: B0[i], name="B")
    t, i = rdom((0, TSTEPS), (1, N - 1), names="t i")
    B[i] = 0.33333 * (A[i - 1] + A[i] + A[i + 1])
    t2, i2 = rdom((0, TSTEPS), (1, N - 1), names="t2 i2")
    A[i2] = 0.33333 * (B[i2 - 1] + B[i2] + B[i2 + 1])

    def order(s):
        s[A].update(0).compute_with(s[B].update(0), t)

    def ref(a, b):
        a, b = a.copy(), b.copy()
        for _ in range(TSTEPS):
            b[1:-1] = 0.33333 * (a[:-2] + a[1:-1] + a[2:])
            a[1:-1] = 0.33333 * (b[:-2] + b[1:-1] + b[2:])
        return [a, b]

    def schedule(s):
        strips(s, [A, B], [s[B].update(0), s[A].update(0)])

    init = lambda rng: [rng.random(N), rng.random(N)]  # noqa: E731
    return Program([A0, B0], [A, B], init, ref, order=order, schedule=schedule)


def strips(s, tensors, updates):
    """Each tensor's rows (its last dimension) stored as strips interleaved in a
    vector's lanes (data layout transformation), and each update (over ``(t, ...,
    i)``, ``i`` from 1) run a point of every strip per iteration: lane ``l`` holds
    element ``l*L + p`` at place ``(p, l)``, so a point's neighbours ``i - 1`` and ``i +
    1`` lie in the same lane of the vectors before and after, and the stencil loads
    and stores whole aligned vectors (``pypto.transform_layout``; the strips' ends run
    alone, ``pypto.index_sets``). The loop over the points is the one vectorized: the
    compiler makes the lanes loop inside it one vector, and keeps each loaded vector in
    a register for the next two points (where the lanes loop is the vectorized one, it
    loads each three times)::

        for t: for i in 1..n-1:             for t: vectorized for p in 0..L:
          B[i] = f(A[i-1], A[i], A[i+1])      for l in 0..lanes:
                                                B[p, l] = f(A[p-1, l], A[p, l], A[p+1, l])
    """
    lanes = pt.Target("host").vector_lanes(8)
    strip = -(-int(tensors[0].shape[-1].value) // lanes)
    for t in tensors:
        s[t].transform_layout(lambda *ix: [*ix[:-1], ix[-1] % strip, ix[-1] // strip])
    for u in updates:
        x = u.shift(u.op.axis[-1], 1)  # counted from 0: i = l*strip + p
        lane, p = u.split(x, factor=strip)
        u.reorder(*u.op.axis[:-1], p, lane)
        u.vectorize(p)


def time_tiles(s, first, second, tiles, skew=2):
    """Time tiles of a stencil whose time step computes ``first`` from ``second``, then
    ``second`` from ``first`` (jacobi's B from A, then A from B), each update over
    ``(t, *space)``; ``tiles``: a tile size per spatial loop, None for a loop that runs
    whole. The innermost loop (whole, or its tile) is vectorized. In the tiled loops
    ``second`` runs one point behind ``first`` (``shift``: the points of ``first`` it
    reads are computed), both are skewed by ``skew`` times the time step (the next
    step's reads then lie in this or earlier tiles) and share the tile loops, the time
    loop and all but the innermost loop (``compute_with``, ``order=t``: the program is
    still one time step after another):

        for t:                                for io, jo:      (tiles of i + 2t, j + 2t)
          for i, j: B[i, j] = f(A)      ->      for t: for i in the tile:
          for i, j: A[i, j] = f(B)                for j in the tile: B[i, j] = f(A)
                                                  for j in the tile: A[i - 1, j - 1] = f(B)
    """
    tile_updates(s, [s[first].update(0), s[second].update(0)], tiles, skew, shifts=(0, 1))


def tile_updates(s, updates, tiles, skew, shifts):
    """Time tiles of several update stages over ``(t, *space)`` run in this order in
    each time step: update ``k`` shifted ``shifts[k]`` points along each tiled loop (a
    number for all, or one per tiled loop; a loop counts from its own minimum, so a
    loop over ``[1, n)`` shifted by 1 lines up with one over ``[0, n)``), all skewed by
    ``skew`` times the time step and tiled by ``tiles`` (None: a loop that runs whole),
    sharing the tiles' loops, the time loop and all but the innermost loop, which is
    vectorized (``time_tiles``)."""
    shared = []
    for u, shift in zip(updates, shifts):
        t, *space = u.op.axis
        outer, inner = [], []
        tiled = [x for x, f in zip(space, tiles) if f is not None]
        by = dict(zip(tiled, shift if isinstance(shift, tuple) else [shift] * len(tiled)))
        for x, f in zip(space, tiles):
            if f is None:
                inner.append(x)
                continue
            if by[x]:
                x = u.shift(x, by[x])
            _, x = u.skew(t, x, skew)
            o, x = u.split(x, factor=f)
            outer.append(o)
            inner.append(x)
        u.reorder(*outer, t, *inner)
        u.vectorize(inner[-1])
        shared.append(u.leaf_iter_vars[-2])
    for prev, u, loop in zip(updates, updates[1:], shared[1:]):
        u.compute_with(prev, loop, order=u.op.axis[0])


def outgrow_l2(*arrays) -> bool:
    """Whether arrays of these shapes (float64) together exceed the host target's L2
    (1 MiB when the target does not say)."""
    l2 = pt.Target("host").l2_bytes or (1 << 20)
    return sum(8 * int(np.prod(a)) for a in arrays) > l2


def _five_point(T, i, j):
    return 0.2 * (T[i, j] + T[i, j - 1] + T[i, 1 + j] + T[1 + i, j] + T[i - 1, j])


@kernel(
    "jacobi-2d",
    "stencils",
    dict(TSTEPS=20, N=30),
    dict(TSTEPS=40, N=90),
    dict(TSTEPS=100, N=250),
    large=dict(TSTEPS=500, N=1300),
)
def jacobi_2d(TSTEPS, N):
    A0 = pt.placeholder((N, N), F, name="A0")
    B0 = pt.placeholder((N, N), F, name="B0")
    A = pt.compute((N, N), lambda i, j: A0[i, j], name="A")
    B = pt.compute((N, N), lambda i, j: B0[i, j], name="B")
    t, i, j = rdom((0, TSTEPS), (1, N - 1), (1, N - 1), names="t i j")
    B[i, j] = _five_point(A, i, j)
    t2, i2, j2 = rdom((0, TSTEPS), (1, N - 1), (1, N - 1), names="t2 i2 j2")
    A[i2, j2] = _five_point(B, i2, j2)

    def order(s):
        s[A].update(0).compute_with(s[B].update(0), t)

    def ref(a, b):
        a, b = a.copy(), b.copy()
        for _ in range(TSTEPS):
            b[1:-1, 1:-1] = 0.2 * (
                a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[2:, 1:-1] + a[:-2, 1:-1]
            )
            a[1:-1, 1:-1] = 0.2 * (
                b[1:-1, 1:-1] + b[1:-1, :-2] + b[1:-1, 2:] + b[2:, 1:-1] + b[:-2, 1:-1]
            )
        return [a, b]

    tiled = outgrow_l2((N, N), (N, N))

    def schedule(s):
        if tiled:  # LARGE on a Zen 5: tiles of 32 rows, each whole, 2.35-2.45x the plain
            # nest; 64 x 128 points 2.08-2.16x (more partial tiles)
            time_tiles(s, B, A, tiles=(32, None))
        else:  # rows as strips: 1.17-1.21x at MEDIUM on a Zen 5, 1.00x only vectorized
            order(s)
            strips(s, [A, B], [s[B].update(0), s[A].update(0)])

    init = lambda rng: [rng.random((N, N)), rng.random((N, N))]  # noqa: E731
    return Program([A0, B0], [A, B], init, ref, order=order, schedule=schedule, regroup=True)


def _heat(T, i, j, k):
    return (
        0.125 * (T[i + 1, j, k] - 2.0 * T[i, j, k] + T[i - 1, j, k])
        + 0.125 * (T[i, j + 1, k] - 2.0 * T[i, j, k] + T[i, j - 1, k])
        + 0.125 * (T[i, j, k + 1] - 2.0 * T[i, j, k] + T[i, j, k - 1])
        + T[i, j, k]
    )


def _heat_ref(a):
    c = a[1:-1, 1:-1, 1:-1]
    return (
        0.125 * (a[2:, 1:-1, 1:-1] - 2.0 * c + a[:-2, 1:-1, 1:-1])
        + 0.125 * (a[1:-1, 2:, 1:-1] - 2.0 * c + a[1:-1, :-2, 1:-1])
        + 0.125 * (a[1:-1, 1:-1, 2:] - 2.0 * c + a[1:-1, 1:-1, :-2])
        + c
    )


@kernel(
    "heat-3d",
    "stencils",
    dict(TSTEPS=20, N=10),
    dict(TSTEPS=40, N=20),
    dict(TSTEPS=100, N=40),
    large=dict(TSTEPS=500, N=120),
)
def heat_3d(TSTEPS, N):
    A0 = pt.placeholder((N, N, N), F, name="A0")
    B0 = pt.placeholder((N, N, N), F, name="B0")
    A = pt.compute((N, N, N), lambda i, j, k: A0[i, j, k], name="A")
    B = pt.compute((N, N, N), lambda i, j, k: B0[i, j, k], name="B")
    t, i, j, k = rdom((1, TSTEPS + 1), (1, N - 1), (1, N - 1), (1, N - 1), names="t i j k")
    B[i, j, k] = _heat(A, i, j, k)
    t2, i2, j2, k2 = rdom((1, TSTEPS + 1), (1, N - 1), (1, N - 1), (1, N - 1), names="t2 i2 j2 k2")
    A[i2, j2, k2] = _heat(B, i2, j2, k2)

    def order(s):
        s[A].update(0).compute_with(s[B].update(0), t)

    def ref(a, b):
        a, b = a.copy(), b.copy()
        for _ in range(TSTEPS):
            b[1:-1, 1:-1, 1:-1] = _heat_ref(a)
            a[1:-1, 1:-1, 1:-1] = _heat_ref(b)
        return [a, b]

    tiled = outgrow_l2((N, N, N), (N, N, N))

    def schedule(s):
        if tiled:  # LARGE on a Zen 5: tiles of 32 planes, each whole, 2.36-2.49x the plain
            # nest; 16 x 64 rows 1.90-1.98x, 32 x 256 2.16-2.22x (fewer partial tiles)
            time_tiles(s, B, A, tiles=(32, None, None))
        else:
            order(s)
            s[B].update(0).vectorize(k)
            s[A].update(0).vectorize(k2)

    init = lambda rng: [rng.random((N, N, N)), rng.random((N, N, N))]  # noqa: E731
    return Program([A0, B0], [A, B], init, ref, order=order, schedule=schedule, regroup=True)


@kernel(
    "seidel-2d", "stencils", dict(TSTEPS=20, N=40), dict(TSTEPS=40, N=120), dict(TSTEPS=100, N=400)
)
def seidel_2d(TSTEPS, N):
    A0 = pt.placeholder((N, N), F, name="A0")
    A = pt.compute((N, N), lambda i, j: A0[i, j], name="A")
    t, i, j = rdom((0, TSTEPS), (1, N - 1), (1, N - 1), names="t i j")
    A[i, j] = (
        A[i - 1, j - 1]
        + A[i - 1, j]
        + A[i - 1, j + 1]
        + A[i, j - 1]
        + A[i, j]
        + A[i, j + 1]
        + A[i + 1, j - 1]
        + A[i + 1, j]
        + A[i + 1, j + 1]
    ) / 9.0

    def ref(a):
        a = a.copy()
        for _ in range(TSTEPS):
            for p in range(1, N - 1):
                for q in range(1, N - 1):
                    a[p, q] = (
                        a[p - 1, q - 1]
                        + a[p - 1, q]
                        + a[p - 1, q + 1]
                        + a[p, q - 1]
                        + a[p, q]
                        + a[p, q + 1]
                        + a[p + 1, q - 1]
                        + a[p + 1, q]
                        + a[p + 1, q + 1]
                    ) / 9.0
        return [a]

    def schedule(s):
        seidel_diagonals(s, A)

    # time tiling (seidel_time_tiles) is legal and exact but slower than the plain nest
    # here: the j loop carries A[i, j - 1] (a chain of additions), which tiles do not
    # shorten, and the tiles' lower bounds stay guards; diagonals do shorten it
    return Program([A0], [A], lambda rng: [rng.random((N, N))], ref, schedule=schedule)


def seidel_diagonals(s, A):
    """seidel-2d's sweep by diagonals j' = j + 2i, i innermost: the points of one
    diagonal are independent, so the chain through A[i, j - 1] (8 additions and a
    division per point in the row order) no longer bounds the sweep.

        for t:                               for t:
          for i in 1..N-1:             ->      for j' in 3..3N-6:
            for j in 1..N-1:                     for i in 1..min(N-1, j'/2):
              A[i, j] = (...) / 9                  if j' - 2i < N - 1: A[i, j' - 2i] = (...) / 9
    """
    u = s[A].update(0)
    t, i, j = u.op.axis
    _, diagonal = u.skew(i, j, 2)
    u.reorder(t, diagonal, i)


def seidel_time_tiles(s, A, t_tile=8, i_tile=32, j_tile=64):
    """seidel-2d's update skewed (i' = i + t, j' = j + i + 2t: every dependence then
    points forward in t, i', j') and tiled in all three."""
    u = s[A].update(0)
    t, i, j = u.op.axis
    _, i1 = u.skew(t, i, 1)
    _, j1 = u.skew(i1, j, 1)
    _, j2 = u.skew(t, j1, 1)
    to, ti = u.split(t, factor=t_tile)
    io, ii = u.split(i1, factor=i_tile)
    jo, ji = u.split(j2, factor=j_tile)
    u.reorder(to, io, jo, ti, ii, ji)


@kernel(
    "fdtd-2d",
    "stencils",
    dict(TMAX=20, NX=20, NY=30),
    dict(TMAX=40, NX=60, NY=80),
    dict(TMAX=100, NX=200, NY=240),
    large=dict(TMAX=500, NX=1000, NY=1200),
)
def fdtd_2d(TMAX, NX, NY):
    fict = pt.placeholder((TMAX,), F, name="fict")
    ex0, ey0, hz0 = (pt.placeholder((NX, NY), F, name=n) for n in ("ex0", "ey0", "hz0"))
    ex = pt.compute((NX, NY), lambda i, j: ex0[i, j], name="ex")
    ey = pt.compute((NX, NY), lambda i, j: ey0[i, j], name="ey")
    hz = pt.compute((NX, NY), lambda i, j: hz0[i, j], name="hz")
    t0, i0, j0 = rdom((0, TMAX), (0, 1), (0, NY), names="t0 i0 j0")  # row 0
    ey[i0, j0] = fict[t0]
    t1, i1, j1 = rdom((0, TMAX), (1, NX), (0, NY), names="t1 i1 j1")
    ey[i1, j1] = ey[i1, j1] - 0.5 * (hz[i1, j1] - hz[i1 - 1, j1])
    t2, i2, j2 = rdom((0, TMAX), (0, NX), (1, NY), names="t2 i2 j2")
    ex[i2, j2] = ex[i2, j2] - 0.5 * (hz[i2, j2] - hz[i2, j2 - 1])
    t3, i3, j3 = rdom((0, TMAX), (0, NX - 1), (0, NY - 1), names="t3 i3 j3")
    hz[i3, j3] = hz[i3, j3] - 0.7 * (ex[i3, j3 + 1] - ex[i3, j3] + ey[i3 + 1, j3] - ey[i3, j3])

    def order(s):
        _chain(
            s,
            [
                (s[ey].update(0), None),
                (s[ey].update(1), t0),
                (s[ex].update(0), t1),
                (s[hz].update(0), t2),
            ],
        )

    def ref(f, ex, ey, hz):
        ex, ey, hz = ex.copy(), ey.copy(), hz.copy()
        for tt in range(TMAX):
            ey[0, :] = f[tt]
            ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
            ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
            hz[:-1, :-1] = hz[:-1, :-1] - 0.7 * (
                ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1]
            )
        return [ex, ey, hz]

    tiled = outgrow_l2((NX, NY), (NX, NY), (NX, NY))

    def schedule(s):
        updates = [s[ey].update(0), s[ey].update(1), s[ex].update(0), s[hz].update(0)]
        if tiled:  # hz a row and a column behind ey and ex, whose next ones it reads
            shifts = ((0, 0), (1, 0), (0, 1), (1, 1))  # ey's rows and ex's columns from 1
            tile_updates(s, updates, tiles=(64, 512), skew=1, shifts=shifts)
            return
        order(s)
        s[ey].update(1).vectorize(j1)
        s[ex].update(0).vectorize(j2)
        s[hz].update(0).vectorize(j3)

    def init(rng):
        return [rng.random(TMAX)] + [rng.random((NX, NY)) for _ in range(3)]

    return Program(
        [fict, ex0, ey0, hz0], [ex, ey, hz], init, ref, order=order, schedule=schedule,
        regroup=True,
    )  # fmt: skip
