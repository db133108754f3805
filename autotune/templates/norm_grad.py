"""Row-wise normalizations in any float dtype, and their backward passes.

``rmsnorm_fwd``, ``layernorm_fwd``, ``softmax_fwd`` compute what ``norm.py``'s
``rmsnorm``, ``layernorm`` and ``softmax`` compute, with a ``dtype`` argument
(float32, float64, or bfloat16 and float16 stored in 16 bits and computed in
float32, ``precision.widen``; the norms' weight and bias, and their gradients, may
be float32 beside 16-bit x: ``weight_dtype``; the float32 PyTorch operators run the tuned
float32 templates, these serve the other dtypes, e.g. float64 for
``torch.autograd.gradcheck``).
The backward templates (``rmsnorm_backward``, ``layernorm_backward``,
``softmax_backward``) recompute the row statistics from X (no saved state):

- rmsnorm: ``r = rsqrt(mean(x^2) + eps)``, ``g = dy * w``:
  ``dx = r g - x r^3 mean(g x)``, ``dw = sum_rows dy x r``;
- layernorm: ``xh = (x - mean) rstd``, ``g = dy * w``:
  ``dx = rstd (g - mean(g) - xh mean(g xh))``, ``dw = sum_rows dy xh``, ``db = sum_rows dy``;
- softmax (from its output y): ``dx = y (dy - sum(dy y))``.

Schedules reuse ``norm.py``'s: row reductions as vector partials, elementwise
passes split and vectorized. The backward passes read X and DY from memory once:
blocks of rows in parallel, each row's statistics, its dx and its share of the
column sums (dw, db) computed in one pass over it (``compute_with``), the
column sums into a row of partial sums per block, summed at the end::

    parallel for io:                          (blocks of B rows)
      for ii:                                 (row i = io * B + ii)
        mean, rstd, sum(g), sum(g xh) of row i        (compute_at: X's row into cache)
        for j: DX[i, j] = rstd (g - ..)
        for j: DW.rf[io, j] += DY[i, j] xh[i, j]      (compute_with(s[DX], ii))
        for j: DB.rf[io, j] += DY[i, j]
    parallel for jo: for io: DW[j] += DW.rf[io, j]; DB[j] += DB.rf[io, j]

``groups=G`` sums the column sums per group of ``rows / G`` consecutive rows instead
(DW and DB of G x cols: the per-sample weight gradients of ``vmap(grad(...))``, one
call), each block of rows within one group::

    parallel for (g, jo): for q: DW[g, j] += DW.rf[g * (blocks per group) + q, j]
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from ..task import template
from . import f16c, precision
from .norm import (
    _schedule_elementwise,
    _schedule_reduction,
    _schedule_rows,
    checked_eps,
    define_row_knobs,
    layer_stats,
    row_reduce,
)
from .norm_stream import narrowed_rows, schedule_stream
from .precision import check_row_dtype, inline_widened, rounded, widen

COLUMN_ROWS = 64  # rows of a block of the column sums' partial sums, at most (fewer ...
ROW_BLOCKS = 16  # ... where there would be fewer blocks than this to run in parallel) ...
COLUMN_BLOCKS = 256  # ... and at least what keeps at most this many (4 MiB at 4096 cols)


def row_block(rows: int, groups: int = 1) -> int:
    """Rows of a block: one row of partial column sums per block, its rows in one
    parallel iteration. With ``groups`` (the column sums per group of ``rows / groups``
    rows) a block lies in one group: a whole group of at most ``COLUMN_ROWS`` rows, else
    the largest divisor of the group up to that."""
    if groups == 1:
        return max(-(-rows // COLUMN_BLOCKS), min(COLUMN_ROWS, max(1, rows // ROW_BLOCKS)))
    group = rows // groups
    return max(d for d in range(1, min(group, COLUMN_ROWS) + 1) if group % d == 0)


def check_groups(name: str, rows: int, groups: int) -> None:
    """``ValueError`` unless ``groups`` (an int of at least 1) divides ``rows``."""
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{name}: groups must be an int of at least 1, got {groups!r}")
    if rows % groups:
        raise ValueError(f"{name}: groups={groups} does not divide the {rows} rows")


def _column_sums(cols: int, rows: int, block: int, terms: dict, cdt: str, dtype: str,
                 groups: int = 1):  # fmt: skip
    """``{name: f(i, j)}`` summed over rows per column, in the compute dtype ``cdt``:
    ``(partials, sums, outputs)``. Each block of ``block`` rows adds its rows into a
    row of partial sums (an update, which the pass over the rows computes with:
    ``_schedule_column_sums``), then ``sums`` add those up (per group of rows: ``groups``
    x cols, the blocks of a group consecutive); the outputs are the sums rounded to the
    storage ``dtype`` (the sums themselves when they are of it)."""
    nb = -(-rows // block)
    per = nb // groups  # blocks per group

    def column_sum(name, f):
        low = name.lower()
        P = pt.compute((nb, cols), lambda b, j: pt.const(0, cdt), name=name + "_rf")
        bo = pt.reduce_axis((0, nb), name=f"{low}_b")
        ext = block if rows % block == 0 else pt.min(block, rows - bo * block)
        r = pt.reduce_axis((0, ext), name=f"{low}_r")  # from 0, as the row loop's inner part
        j = pt.reduce_axis((0, cols), name=f"{low}_j")
        P[bo, j] = P[bo, j] + f(bo * block + r, j)
        q = pt.reduce_axis((0, per), name="r_" + low)
        if groups == 1:
            C = pt.compute((cols,), lambda jj: pt.sum(P[q, jj], axis=q), name=name)
        else:
            C = pt.compute(
                (groups, cols), lambda g, jj: pt.sum(P[g * per + q, jj], axis=q), name=name
            )
        if cdt == dtype:
            return P, C, C
        return P, C, pt.compute(C.shape, lambda *ix: rounded(C[ix], dtype), name=name + "_out")

    parts, sums, outs = zip(*(column_sum(name, f) for name, f in terms.items()))
    return list(parts), list(sums), list(outs)


def _schedule_column_sums(s, Y, parts, sums, lanes: int) -> None:
    """The partial column sums computed with the rows of ``Y`` (``_schedule_row_blocks``:
    blocks of rows in parallel), each block's row after the row of ``Y``, reading it
    from cache; then the partials summed, column panels of ``2 lanes`` in parallel::

        parallel for io: for ii: ... row statistics ...; for j: Y[i, j] = ..
                                 vectorized for j: DW.rf[io, j] += f(io * B + ii, j)
        parallel for jo: for io: vectorized for ji: DW[jo * 2V + ji] += DW.rf[io, jo * 2V + ji]

    (per group: ``parallel for (g, jo)``, the group's blocks summed).

    Each of X and DY is read from memory once (the column sums had a pass of their own,
    the row statistics theirs: ``layernorm_backward`` 4096 x 4096 float32 on a Zen 4,
    one / two threads, 34.2-35.2 / 20.9-23.8 -> 23.1-23.3 / 12.8-13.5 ms)."""
    prev, at = s[Y], s[Y].leaf_iter_vars[1]
    for P in parts:
        b, j = P.op.axis
        s[P].parallel(b)
        s[P].vectorize(j)
        u = s[P].update(0)
        bo, r, jj = u.op.axis
        u.parallel(bo)
        u.vectorize(jj)
        u.compute_with(prev, at)
        prev, at = u, r
    for C in sums:
        *g, j = C.op.axis
        (k,) = C.op.reduce_axis
        jo, ji = s[C].split(j, factor=2 * lanes)
        s[C].reorder(*g, jo, k, ji)
        s[C].parallel(s[C].fuse(*g, jo) if g else jo)
        s[C].vectorize(ji)


def _schedule_row_blocks(cfg, s, Y, row_stages, elementwise, reads, cols: int, block: int):
    """Blocks of ``block`` rows of ``Y`` in parallel, each row's ``row_stages`` computed
    at it; the elementwise passes split and vectorized, the last one prefetching the
    next row of each of ``reads`` into L2 (``prefetch``). A narrowed ``Y``
    (``narrowed_rows``: its float32 row is ``elementwise[-1]``) is copied out a chunk
    at a time, its float32 row computed a chunk at a time. Returns the row loop."""
    io, i = s[Y].split(Y.op.axis[0], factor=block)
    s[Y].parallel(io)
    narrowed = elementwise[-1] is not Y
    for T in row_stages:
        s[T].compute_at(s[Y], i)
    if narrowed:
        s[elementwise[-1]].compute_at(s[Y], schedule_stream(s, Y, cfg.target))
    for T in elementwise:
        jo = _schedule_elementwise(cfg, s, T, cols)
    for X in reads if cfg["prefetch"].val else ():
        s[elementwise[-1]].prefetch(X, i, 1, level=2, spread=jo)
    return i


def weight_dtype_of(name: str, dtype: str, weight_dtype) -> str:
    """The dtype of a norm's weight (and bias, and their gradients): ``dtype``'s own
    (``weight_dtype`` None), or float32 beside 16-bit x, as PyTorch's norms take a
    float32 module's parameters under autocast (computed in float32 either way)."""
    if weight_dtype is None or weight_dtype == dtype:
        return dtype
    if weight_dtype == "float32" and dtype in ("bfloat16", "float16"):
        return weight_dtype
    raise ValueError(
        f"{name}: weight_dtype must be None (x's dtype, {dtype}), or float32 when x is "
        f"bfloat16 or float16; got {weight_dtype!r}"
    )


def _grad_setup(cfg, name: str, rows: int, cols: int, dtype: str, weight_dtype=None):
    """A backward template's knobs, compute dtype and inputs: ``(lanes, L, cdt,
    [X, W, DY], W as computed with)``."""
    cdt = check_row_dtype(name, dtype)
    wdt = weight_dtype_of(name, dtype, weight_dtype)
    lanes = cfg.target.vector_lanes(cdt)
    define_row_knobs(cfg, cols, lanes)
    X = pt.placeholder((rows, cols), dtype, name="X")
    W = pt.placeholder((cols,), wdt, name="W")
    DY = pt.placeholder((rows, cols), dtype, name="DY")
    ins = [X, W, DY]
    return lanes, cfg["red_lanes"].val, cdt, ins, widen(W)


def _stats_rms(X, rows, cols, eps, dtype, L):
    c = lambda v: pt.const(v, dtype)  # noqa: E731
    ss, ss_st = row_reduce("sum", lambda i, j: X[i, j] * X[i, j], rows, cols, L, "ss")
    eps = checked_eps(eps)
    r = pt.compute((rows,), lambda i: pt.rsqrt(ss[i] * c(1.0 / cols) + c(eps)), name="r")
    return r, [*ss_st, r]


# ---------------------------------------------------------------- references (float64)


def _f64(*a):
    return [np.asarray(x, np.float64) for x in a]


def rmsnorm_ref(x, w, eps=1e-6):
    x64, w64 = _f64(x, w)
    return (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * w64).astype(x.dtype)


def layernorm_ref(x, w, b, eps=1e-5):
    x64, w64, b64 = _f64(x, w, b)
    mu = x64.mean(-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
    return ((x64 - mu) / np.sqrt(var + eps) * w64 + b64).astype(x.dtype)


def softmax_ref(x):
    (x64,) = _f64(x)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(x.dtype)


def _group_sums(t, groups: int, dtype):
    """Column sums of the rows of ``t``: over all (``groups`` 1), else per group."""
    return (t.sum(0) if groups == 1 else t.reshape(groups, -1, t.shape[-1]).sum(1)).astype(dtype)


def rmsnorm_grad_ref(x, w, dy, eps=1e-6, groups=1):
    x64, w64, dy64 = _f64(x, w, dy)
    r = 1.0 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)
    g = dy64 * w64
    dx = r * g - x64 * r**3 * (g * x64).mean(-1, keepdims=True)
    return dx.astype(x.dtype), _group_sums(dy64 * x64 * r, groups, w.dtype)


def layernorm_grad_ref(x, w, dy, eps=1e-5, groups=1):
    x64, w64, dy64 = _f64(x, w, dy)
    mu = x64.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + eps)
    xh = (x64 - mu) * rstd
    g = dy64 * w64
    dx = rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))
    return dx.astype(x.dtype), *(_group_sums(t, groups, w.dtype) for t in (dy64 * xh, dy64))


def softmax_grad_ref(y, dy):
    y64, dy64 = _f64(y, dy)
    return (y64 * (dy64 - (dy64 * y64).sum(-1, keepdims=True))).astype(y.dtype)


# ---------------------------------------------------------------- forward, any float dtype


def _row_input(X, target, name: str = ""):
    """``X`` (rows x cols) as a pass reads it, in float32, and whether it is converted a
    row at a time by the target's instructions (float16 where ``f16c`` has them: a
    stage ``name`` for ``f16c.convert_at`` at the row); else it is read through inlined
    casts (``widen``)."""
    Xr = f16c.widened(X, target, name)
    return (widen(X), False) if Xr is X else (Xr, True)


def _widened_inputs(s, Xs, converted: bool, Ws) -> None:
    """The casts of ``Xs`` (``_row_input`` results, not ``converted``) inlined; the
    weights' casts ``Ws`` computed once, vectorized, not at every row."""
    if not converted:
        inline_widened(s, Xs)
    for W in Ws:
        precision.widened_once(s, W)


def _convert_rows(s, Xs, converted: bool, Y, row, cols: int, target) -> None:
    """The ``converted`` rows ``Xs`` (``_row_input`` results) computed at ``row`` of
    ``Y``, by the target's conversion instructions (``f16c``)."""
    for Xc in Xs if converted else ():
        f16c.convert_at(s, Xc, Y, row, cols, target)


@template("rmsnorm_fwd", reference=lambda x, w, *, eps: rmsnorm_ref(x, w, eps))
def rmsnorm_fwd(cfg, rows, cols, eps=1e-6, dtype="float32", weight_dtype=None):
    """Y = X * rsqrt(mean(X^2) + eps) * w over the last axis (w of ``weight_dtype``:
    ``weight_dtype_of``)."""
    cdt = check_row_dtype("rmsnorm_fwd", dtype)
    wdt = weight_dtype_of("rmsnorm_fwd", dtype, weight_dtype)
    define_row_knobs(cfg, cols, cfg.target.vector_lanes(cdt))
    X = pt.placeholder((rows, cols), dtype, name="X")
    W = pt.placeholder((cols,), wdt, name="W")
    (Xc, conv), Wc = _row_input(X, cfg.target), widen(W)
    r, st = _stats_rms(Xc, rows, cols, eps, cdt, cfg["red_lanes"].val)
    Yr, Y = narrowed_rows(lambda i, j: Xc[i, j] * r[i] * Wc[j], rows, cols, dtype, cfg.target)
    s = pt.create_schedule(Y.op)
    _widened_inputs(s, [Xc], conv, [Wc])
    row = _schedule_rows(cfg, s, Y, st, [Yr], X, cols, conv)
    _convert_rows(s, [Xc], conv, Y, row, cols, cfg.target)
    _schedule_reduction(cfg, s, st[:-1])
    return s, [X, W, Y]


@template("layernorm_fwd", reference=lambda x, w, b, *, eps: layernorm_ref(x, w, b, eps))
def layernorm_fwd(cfg, rows, cols, eps=1e-5, dtype="float32", weight_dtype=None):
    """Y = (X - mean) * rsqrt(var + eps) * w + b over the last axis (w and b of
    ``weight_dtype``: ``weight_dtype_of``)."""
    cdt = check_row_dtype("layernorm_fwd", dtype)
    wdt = weight_dtype_of("layernorm_fwd", dtype, weight_dtype)
    define_row_knobs(cfg, cols, cfg.target.vector_lanes(cdt))
    X = pt.placeholder((rows, cols), dtype, name="X")
    W = pt.placeholder((cols,), wdt, name="W")
    Bb = pt.placeholder((cols,), wdt, name="B")
    (Xc, conv), Wc, Bc = _row_input(X, cfg.target), widen(W), widen(Bb)
    mean, rstd, st1, st2 = layer_stats(Xc, rows, cols, eps, cdt, cfg["red_lanes"].val)
    Yr, Y = narrowed_rows(
        lambda i, j: (Xc[i, j] - mean[i]) * rstd[i] * Wc[j] + Bc[j], rows, cols, dtype,
        cfg.target,
    )  # fmt: skip
    s = pt.create_schedule(Y.op)
    _widened_inputs(s, [Xc], conv, [Wc, Bc])
    row = _schedule_rows(cfg, s, Y, [*st1, *st2], [Yr], X, cols, conv)
    _convert_rows(s, [Xc], conv, Y, row, cols, cfg.target)
    _schedule_reduction(cfg, s, st1[:-1])
    _schedule_reduction(cfg, s, st2[:-1])
    return s, [X, W, Bb, Y]


@template("softmax_fwd", reference=softmax_ref)
def softmax_fwd(cfg, rows, cols, dtype="float32"):
    """Y[i, j] = exp(X[i, j] - max_k X[i, k]) / sum_k exp(X[i, k] - max_k X[i, k])."""
    cdt = check_row_dtype("softmax_fwd", dtype)
    define_row_knobs(cfg, cols, cfg.target.vector_lanes(cdt))
    L = cfg["red_lanes"].val
    X = pt.placeholder((rows, cols), dtype, name="X")
    Xc, conv = _row_input(X, cfg.target)
    mx, mx_st = row_reduce("max", lambda i, j: Xc[i, j], rows, cols, L, "mx")
    exp = pt.fast_exp if cdt == "float32" else pt.exp
    ex = pt.compute((rows, cols), lambda i, j: exp(Xc[i, j] - mx[i]), name="ex")
    sm, sm_st = row_reduce("sum", lambda i, j: ex[i, j], rows, cols, L, "sm")
    Yr, Y = narrowed_rows(lambda i, j: ex[i, j] / sm[i], rows, cols, dtype, cfg.target)
    s = pt.create_schedule(Y.op)
    _widened_inputs(s, [Xc], conv, [])
    row = _schedule_rows(cfg, s, Y, [*mx_st, ex, *sm_st], [ex, Yr], X, cols, conv)
    _convert_rows(s, [Xc], conv, Y, row, cols, cfg.target)
    _schedule_reduction(cfg, s, mx_st)
    _schedule_reduction(cfg, s, sm_st)
    return s, [X, Y]


# ---------------------------------------------------------------- backward


@template(
    "rmsnorm_backward",
    reference=lambda x, w, dy, *, eps, groups: rmsnorm_grad_ref(x, w, dy, eps, groups),
)
def rmsnorm_backward(cfg, rows, cols, eps=1e-6, dtype="float32", weight_dtype=None, groups=1):
    """DX, DW of Y = X * rsqrt(mean(X^2) + eps) * W, given DY (W and DW of
    ``weight_dtype``; DW per group of rows with ``groups``: groups x cols)."""
    check_groups("rmsnorm_backward", rows, groups)
    lanes, L, cdt, ins, W = _grad_setup(cfg, "rmsnorm_backward", rows, cols, dtype, weight_dtype)
    c = lambda v: pt.const(v, cdt)  # noqa: E731
    (Xd, conv), (DYd, _) = _row_input(ins[0], cfg.target), _row_input(ins[2], cfg.target)
    r, st = _stats_rms(Xd, rows, cols, eps, cdt, L)
    gx, gx_st = row_reduce("sum", lambda i, j: DYd[i, j] * W[j] * Xd[i, j], rows, cols, L, "gx")
    k = pt.compute((rows,), lambda i: r[i] * r[i] * r[i] * gx[i] * c(1.0 / cols), name="k")
    dx = lambda i, j: r[i] * W[j] * DYd[i, j] - Xd[i, j] * k[i]  # noqa: E731
    DXr, DX = narrowed_rows(dx, rows, cols, dtype, cfg.target, "DX")
    block = row_block(rows, groups)
    dw = {"DW": lambda i, j: DYd[i, j] * Xd[i, j] * r[i]}
    parts, sums, (DW,) = _column_sums(cols, rows, block, dw, cdt, str(ins[1].dtype), groups)
    s = pt.create_schedule([DX.op, DW.op])
    _widened_inputs(s, [Xd, DYd], conv, [W])
    row_stages = [*st, *gx_st, k]
    row = _schedule_row_blocks(cfg, s, DX, row_stages, [DXr], [ins[0], ins[2]], cols, block)
    _convert_rows(s, [Xd, DYd], conv, DX, row, cols, cfg.target)
    _schedule_reduction(cfg, s, st[:-1])
    _schedule_reduction(cfg, s, gx_st)
    _schedule_column_sums(s, DX, parts, sums, lanes)
    return s, [*ins, DX, DW]


@template(
    "layernorm_backward",
    reference=lambda x, w, dy, *, eps, groups: layernorm_grad_ref(x, w, dy, eps, groups),
)
def layernorm_backward(cfg, rows, cols, eps=1e-5, dtype="float32", weight_dtype=None, groups=1):
    """DX, DW, DB of Y = (X - mean) * rstd * W + B, given DY (W, DW and DB of
    ``weight_dtype``; DW and DB per group of rows with ``groups``: groups x cols)."""
    check_groups("layernorm_backward", rows, groups)
    lanes, L, cdt, ins, W = _grad_setup(cfg, "layernorm_backward", rows, cols, dtype, weight_dtype)
    c = lambda v: pt.const(v, cdt)  # noqa: E731
    (Xd, conv), (DYd, _) = _row_input(ins[0], cfg.target), _row_input(ins[2], cfg.target)
    mean, rstd, st1, st2 = layer_stats(Xd, rows, cols, eps, cdt, L)
    xh = lambda i, j: (Xd[i, j] - mean[i]) * rstd[i]  # noqa: E731
    ga, ga_st = row_reduce("sum", lambda i, j: DYd[i, j] * W[j], rows, cols, L, "ga")
    gb, gb_st = row_reduce("sum", lambda i, j: DYd[i, j] * W[j] * xh(i, j), rows, cols, L, "gb")

    def dx(i, j):
        return rstd[i] * (
            DYd[i, j] * W[j] - ga[i] * c(1.0 / cols) - xh(i, j) * gb[i] * c(1.0 / cols)
        )

    DXr, DX = narrowed_rows(dx, rows, cols, dtype, cfg.target, "DX")
    block = row_block(rows, groups)
    terms = {"DW": lambda i, j: DYd[i, j] * xh(i, j), "DB": lambda i, j: DYd[i, j]}
    parts, sums, (DW, DB) = _column_sums(cols, rows, block, terms, cdt, str(ins[1].dtype), groups)
    s = pt.create_schedule([DX.op, DW.op, DB.op])
    _widened_inputs(s, [Xd, DYd], conv, [W])
    row_stages = [*st1, *st2, *ga_st, *gb_st]
    row = _schedule_row_blocks(cfg, s, DX, row_stages, [DXr], [ins[0], ins[2]], cols, block)
    _convert_rows(s, [Xd, DYd], conv, DX, row, cols, cfg.target)
    for st in (st1[:-1], st2[:-1], ga_st, gb_st):
        _schedule_reduction(cfg, s, st)
    _schedule_column_sums(s, DX, parts, sums, lanes)
    return s, [*ins, DX, DW, DB]


@template("softmax_backward", reference=softmax_grad_ref)
def softmax_backward(cfg, rows, cols, dtype="float32"):
    """DX = Y * (DY - sum_j DY * Y) per row, from softmax's output Y."""
    cdt = check_row_dtype("softmax_backward", dtype)
    Y = pt.placeholder((rows, cols), dtype, name="Y")
    DY = pt.placeholder((rows, cols), dtype, name="DY")
    (Yc, conv), (DYc, _) = _row_input(Y, cfg.target), _row_input(DY, cfg.target)
    # one multiply-add per element between the passes: the hardware prefetcher keeps
    # up (Zen 4, 1 thread, paired runs: 4096x4096 9.8 vs 10.4 ms, 8192x1024 3.4 vs 3.8);
    # rows converted by the target's instructions are read ahead (float16 4096x4096,
    # one / two threads: 15.5 / 7.5 ms -> 14.3 / 6.9)
    define_row_knobs(cfg, cols, cfg.target.vector_lanes(cdt), prefetch_default=int(conv))
    a, a_st = row_reduce(
        "sum", lambda i, j: DYc[i, j] * Yc[i, j], rows, cols, cfg["red_lanes"].val, "a"
    )
    f = lambda i, j: Yc[i, j] * (DYc[i, j] - a[i])  # noqa: E731
    DXr, DX = narrowed_rows(f, rows, cols, dtype, cfg.target, "DX")
    s = pt.create_schedule(DX.op)
    _widened_inputs(s, [Yc, DYc], conv, [])
    row = _schedule_rows(cfg, s, DX, a_st, [DXr], Y, cols, conv)
    _convert_rows(s, [Yc, DYc], conv, DX, row, cols, cfg.target)
    _schedule_reduction(cfg, s, a_st)
    return s, [Y, DY, DX]
