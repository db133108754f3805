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

Schedules reuse ``norm.py``'s: rows in parallel, row reductions as vector
partials, elementwise passes split and vectorized. The per-row statistics that
the column sums (dw, db) also read are root stages (parallel over rows); the
column sums read blocks of whole rows in parallel into rows of partial sums,
then sum those over column panels in parallel (``_column_sum``).
"""

from __future__ import annotations

import numpy as np

import pypto as pt

from ..task import template
from . import f16c, precision
from .norm import (
    _schedule_reduction,
    _schedule_rows,
    checked_eps,
    define_row_knobs,
    layer_stats,
    row_reduce,
)
from .norm_stream import narrowed_rows
from .precision import check_row_dtype, inline_widened, rounded, widen


def _root_rows(cfg, s, R, stages, reductions):
    """A per-row statistic ``R`` as a root stage: rows parallel, ``stages`` (what it
    reads) computed at its row, ``reductions`` (a ``row_reduce``'s stages) vectorized."""
    (i,) = R.op.axis
    s[R].parallel(i)
    for T in stages:
        if T is not R:
            s[T].compute_at(s[R], i)
    _schedule_reduction(cfg, s, reductions)


def _column_sums(cols: int, rows: int, terms: dict, dtype: str):
    """``{name: f(r, j)}`` summed over rows per column, in the compute dtype: ``(sums,
    outputs)``, the outputs rounded to the storage ``dtype`` (the sums themselves when
    they are of it)."""
    sums, outs = [], []

    def column_sum(name, f):
        q = pt.reduce_axis((0, rows), name="r_" + name.lower())
        return pt.compute((cols,), lambda j: pt.sum(f(q, j), axis=q), name=name)

    def rounding(C):
        return pt.compute((cols,), lambda j: rounded(C[j], dtype), name=C.name + "_out")

    for name, f in terms.items():
        C = column_sum(name, f)
        sums.append(C)
        outs.append(rounding(C) if str(C.dtype) != dtype else C)
    return sums, outs


COLUMN_ROWS = 64  # rows of a block of the column sums' partial sums, at least ...
COLUMN_BLOCKS = 256  # ... and at most this many blocks (their partials: 4 MiB at 4096 cols)


def _column_sum(s, C, lanes: int, rows: int):
    """``C[j] = sum_i ...``: blocks of ``COLUMN_ROWS`` rows (more where there would be
    more than ``COLUMN_BLOCKS``) in parallel, each summed into a row of partial sums as
    its rows are read, in order (``rfactor``); then the partials summed, column panels
    of ``2 lanes`` in parallel. Returns the partial sums' stage and its row loop::

        for j: C[j] = 0; for i: C[j] += f(i, j)
        ->
        parallel for io: for ii: vectorized for j: C.rf[io, j] += f(io * 64 + ii, j)
        parallel for jo: for io: vectorized for ji: C[jo * 2V + ji] += C.rf[io, jo * 2V + ji]

    A panel of columns over all rows read 128 bytes of each row, 16 KiB apart: 4096 x
    4096 ``rmsnorm_backward`` in float32, one / two threads of a Zen 4, 48.6 / 25.1 ->
    29.7 / 14.9 ms; ``layernorm_backward`` in bfloat16 56.4 -> 30.0 ms with one.
    """
    (i,) = C.op.reduce_axis
    io, _ = s[C].split(i, factor=max(COLUMN_ROWS, -(-rows // COLUMN_BLOCKS)))
    CF = s.rfactor(C, io)
    fo, fj = CF.op.axis
    (fi,) = CF.op.reduce_axis
    s[CF].reorder(fo, fi, fj)
    s[CF].parallel(fo)
    s[CF].vectorize(fj)
    (j,) = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=2 * lanes)
    s[C].reorder(jo, k, ji)
    s[C].parallel(jo)
    s[C].vectorize(ji)
    return CF, fi


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


def rmsnorm_grad_ref(x, w, dy, eps=1e-6):
    x64, w64, dy64 = _f64(x, w, dy)
    r = 1.0 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)
    g = dy64 * w64
    dx = r * g - x64 * r**3 * (g * x64).mean(-1, keepdims=True)
    return dx.astype(x.dtype), (dy64 * x64 * r).sum(0).astype(w.dtype)


def layernorm_grad_ref(x, w, dy, eps=1e-5):
    x64, w64, dy64 = _f64(x, w, dy)
    mu = x64.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + eps)
    xh = (x64 - mu) * rstd
    g = dy64 * w64
    dx = rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))
    return dx.astype(x.dtype), (dy64 * xh).sum(0).astype(w.dtype), dy64.sum(0).astype(w.dtype)


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
    reference=lambda x, w, dy, *, eps: rmsnorm_grad_ref(x, w, dy, eps),
)
def rmsnorm_backward(cfg, rows, cols, eps=1e-6, dtype="float32", weight_dtype=None):
    """DX, DW of Y = X * rsqrt(mean(X^2) + eps) * W, given DY (W and DW of
    ``weight_dtype``)."""
    lanes, L, cdt, ins, W = _grad_setup(cfg, "rmsnorm_backward", rows, cols, dtype, weight_dtype)
    c = lambda v: pt.const(v, cdt)  # noqa: E731
    Xr, conv = _row_input(ins[0], cfg.target, "X_stats")
    r, st = _stats_rms(Xr, rows, cols, eps, cdt, L)
    (Xd, _), (DYd, _) = _row_input(ins[0], cfg.target), _row_input(ins[2], cfg.target)
    gx, gx_st = row_reduce("sum", lambda i, j: DYd[i, j] * W[j] * Xd[i, j], rows, cols, L, "gx")
    k = pt.compute((rows,), lambda i: r[i] * r[i] * r[i] * gx[i] * c(1.0 / cols), name="k")
    dx = lambda i, j: r[i] * W[j] * DYd[i, j] - Xd[i, j] * k[i]  # noqa: E731
    DXr, DX = narrowed_rows(dx, rows, cols, dtype, cfg.target, "DX")
    (Xs, _), (DYs, _) = (_row_input(T, cfg.target, T.name + "_dw") for T in (ins[0], ins[2]))
    dw = {"DW": lambda q, j: DYs[q, j] * Xs[q, j] * r[q]}
    sums, (DW,) = _column_sums(cols, rows, dw, str(ins[1].dtype))
    s = pt.create_schedule([DX.op, DW.op])
    _widened_inputs(s, [Xr, Xd, DYd, Xs, DYs], conv, [W])
    _root_rows(cfg, s, r, st, st[:-1])
    _convert_rows(s, [Xr], conv, r, r.op.axis[0], cols, cfg.target)
    row = _schedule_rows(cfg, s, DX, [*gx_st, k], [DXr], ins[0], cols, conv)
    _convert_rows(s, [Xd, DYd], conv, DX, row, cols, cfg.target)
    _schedule_reduction(cfg, s, gx_st)
    for C in sums:
        _convert_rows(s, [Xs, DYs], conv, *_column_sum(s, C, lanes, rows), cols, cfg.target)
    return s, [*ins, DX, DW]


@template(
    "layernorm_backward",
    reference=lambda x, w, dy, *, eps: layernorm_grad_ref(x, w, dy, eps),
)
def layernorm_backward(cfg, rows, cols, eps=1e-5, dtype="float32", weight_dtype=None):
    """DX, DW, DB of Y = (X - mean) * rstd * W + B, given DY (W, DW and DB of
    ``weight_dtype``)."""
    lanes, L, cdt, ins, W = _grad_setup(cfg, "layernorm_backward", rows, cols, dtype, weight_dtype)
    c = lambda v: pt.const(v, cdt)  # noqa: E731
    (Xm, conv), (Xv, _) = (_row_input(ins[0], cfg.target, n) for n in ("X_mean", "X_var"))
    mean, rstd, st1, st2 = layer_stats(Xm, rows, cols, eps, cdt, L, Xv)
    (Xd, _), (DYd, _) = _row_input(ins[0], cfg.target), _row_input(ins[2], cfg.target)
    xh = lambda i, j: (Xd[i, j] - mean[i]) * rstd[i]  # noqa: E731
    ga, ga_st = row_reduce("sum", lambda i, j: DYd[i, j] * W[j], rows, cols, L, "ga")
    gb, gb_st = row_reduce("sum", lambda i, j: DYd[i, j] * W[j] * xh(i, j), rows, cols, L, "gb")

    def dx(i, j):
        return rstd[i] * (
            DYd[i, j] * W[j] - ga[i] * c(1.0 / cols) - xh(i, j) * gb[i] * c(1.0 / cols)
        )

    DXr, DX = narrowed_rows(dx, rows, cols, dtype, cfg.target, "DX")
    (Xs, _), (DYs, _), (DYb, _) = (
        _row_input(T, cfg.target, T.name + suffix)
        for T, suffix in ((ins[0], "_dw"), (ins[2], "_dw"), (ins[2], "_db"))
    )
    terms = {
        "DW": lambda q, j: DYs[q, j] * ((Xs[q, j] - mean[q]) * rstd[q]),
        "DB": lambda q, j: DYb[q, j],
    }
    sums, (DW, DB) = _column_sums(cols, rows, terms, str(ins[1].dtype))
    s = pt.create_schedule([DX.op, DW.op, DB.op])
    _widened_inputs(s, [Xm, Xv, Xd, DYd, Xs, DYs, DYb], conv, [W])
    _root_rows(cfg, s, mean, st1, st1[:-1])
    _root_rows(cfg, s, rstd, st2, st2[:-1])
    _convert_rows(s, [Xm], conv, mean, mean.op.axis[0], cols, cfg.target)
    _convert_rows(s, [Xv], conv, rstd, rstd.op.axis[0], cols, cfg.target)
    row = _schedule_rows(cfg, s, DX, [*ga_st, *gb_st], [DXr], ins[0], cols, conv)
    _convert_rows(s, [Xd, DYd], conv, DX, row, cols, cfg.target)
    _schedule_reduction(cfg, s, ga_st)
    _schedule_reduction(cfg, s, gb_st)
    for C, read in zip(sums, ([Xs, DYs], [DYb])):
        _convert_rows(s, read, conv, *_column_sum(s, C, lanes, rows), cols, cfg.target)
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
