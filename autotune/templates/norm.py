"""Row-wise normalizations over the last axis: ``softmax``, ``layernorm``, ``rmsnorm``.

All three are memory-bound: the schedule reads each row from memory once
and writes it once. Per row (the parallel loop), every intermediate is
computed at that row (``compute_at``), so the row stays in L1/L2 between
the passes, and no full-size temporary exists:

- row reductions (max, sum, sum of squares) are vectorized by a manual
  rfactor: ``red_lanes`` partial results per row, ``P[i, l] = sum_ko
  X[i, ko * L + l]`` (the ``l`` loop is spatial, so it is vectorized, and
  ``L`` independent accumulators hide the add latency), the ragged tail of the
  row added to them and the ``L`` halved down to 4 by vector operations, then
  a short scalar combine of those (``row_reduce``);
- elementwise passes split the row by ``tile_j`` with the inner loop
  vectorized and the outer optionally unrolled (``unroll_j``);
- the rows are read from memory by the first pass and from cache by the
  later ones, so with ``prefetch`` on, the first elementwise pass prefetches
  the next row of X into L2 (``s[T].prefetch(X, jo, chunks per row,
  level=2)``) and the last one the next row of Y for writing
  (``s[Y].prefetch(Y, jo, ...)``): memory traffic overlaps the arithmetic
  instead of stalling the passes. Not the first row reduction: it runs from
  memory-speed loads, and its prefetches would issue the whole next row in a
  burst while the elementwise pass, which computes from cache, left memory
  idle; and into L2, not L1, where the next row would evict the current one
  between its passes (a Zen 4 has 32 KiB of L1 against 16 KiB rows). On a
  2-core Zen 4 (4096 x 4096, paired runs) that made softmax 1.2-1.3x,
  layernorm 1.25-1.35x and rmsnorm 1.4-1.55x faster at one thread. Softmax
  has a third mode (``prefetch=2``): its exp pass, the costly one, also
  prefetches the current row of Y for writing (``s[ex].prefetch(Y, jo, 0)``),
  so Y's store misses overlap the exponentials and the last pass, a
  multiply, writes into cache;
- short rows (at most ``SHORT_ROW``, 64 elements) are computed four at a time
  (``ROW_BLOCK``): each stage runs over the block's rows, so their reductions'
  latency chains, the bulk of a short row's time, overlap. One thread of a
  Zen 4, 16384 x 64: softmax 1153 -> 524 us (PyTorch 904), layernorm 509 ->
  414, rmsnorm 280 -> 265; rows of 128 and longer gained nothing reliably;
- softmax's exponential is either libm's ``expf`` (a scalar call: gcc
  does not vectorize it without -ffast-math) or ``pt.fast_exp``, a
  vectorizable polynomial within ~2 ulp (``exp_impl``, default ``poly``),
  stored per row for the sum and the normalization (``store_exp``).

float32 in and out; the references compute in float64.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

import pypto as pt

from ..task import template
from .knobs import add_row_flop
from .norm_stream import define_stream_knob, outgrows_cache, schedule_stream, stream_rows

F32 = "float32"


# a row reduction's kind: its reducer, the combination of two partial results, and
# the value that combines with another to give that other
_KINDS = {
    "sum": (pt.sum, lambda a, b: a + b, 0.0),
    "max": (pt.max, lambda a, b: pt.max(a, b), -math.inf),
}
FOLD_TO = 4  # a row reduction's vector partials are halved down to this many


def checked_eps(eps) -> float:
    """``eps`` as a float, ``ValueError`` unless finite and non-negative: a negative or NaN
    one makes every output NaN, which the NaN reference would call correct."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 <= eps < math.inf:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def layer_stats(X, rows, cols, eps, dtype, L, X2=None):
    """The mean and ``rsqrt(var + eps)`` of each row of ``X``, and the stages of each
    (``row_reduce``'s, then the statistic), two passes (the second reads ``X2``, the same
    values as ``X``, where given: a stage of its own). The first sums the row shifted
    by its first element, ``mean = X[i, 0] + sum_j (X[i, j] - X[i, 0]) / cols``: the
    sum of values near a large mean loses their differences, the shifted sum keeps
    them (a constant row's mean is exact, its output ``beta``):

        for i: sm[i] = sum_j X[i, j]          ->   sm[i] = sum_j (X[i, j] - X[i, 0])
               mean[i] = sm[i] / cols              mean[i] = X[i, 0] + sm[i] / cols
    """
    c = lambda v: pt.const(v, dtype)  # noqa: E731
    eps = checked_eps(eps)
    sm, sm_st = row_reduce("sum", lambda i, j: X[i, j] - X[i, 0], rows, cols, L, "sm")
    mean = pt.compute((rows,), lambda i: X[i, 0] + sm[i] * c(1.0 / cols), name="mean")

    X2 = X if X2 is None else X2

    def sq(i, j):
        dd = X2[i, j] - mean[i]
        return dd * dd

    ss, ss_st = row_reduce("sum", sq, rows, cols, L, "ss")
    rstd = pt.compute((rows,), lambda i: pt.rsqrt(ss[i] * c(1.0 / cols) + c(eps)), name="rstd")
    return mean, rstd, [*sm_st, mean], [*ss_st, rstd]


def row_reduce(kind: str, elem, rows: int, cols: int, lanes: int, name: str):
    """``R[i] = kind_j elem(i, j)`` over ``j < cols``; returns ``(R, [stages...])``.

    With ``lanes > 1`` (and a row at least that long) the reduction is split:
    ``name_p[i, l]`` holds ``lanes`` partial results over full chunks of the row,
    the row's last ``cols % lanes`` elements (its tail) added to them by one vector
    operation (``name_t``: the last ``lanes`` elements of the row, those before the
    tail masked), halved by vector operations down to ``FOLD_TO`` (``name_f32[i, l] =
    t[i, l] + t[i, l + 32]``, ...: each loads what one store wrote, or half of it),
    and ``R`` combines those, a chain of dependent scalar operations (of all 64
    partials, and the tail's elements, it took most of a 256-wide row's time, 64 x 4
    cycles: layernorm 1024 x 256 float32 on a Zen 4, one thread, 0.14 -> 0.06 ms; one
    fold of the 64 into 4 by a tree of 4-lane additions, 0.08)::

        for i: for ko: vectorized for l < 64: p[l] += elem(i, ko * 64 + l)
               vectorized for l < 64: t[l] = p[l] + (l >= 64 - tail ? elem(i, cols - 64 + l) : 0)
               vectorized for l < 32: f32[l] = t[l] + t[l + 32]   ... f4 from f8
               R[i] = f4[0] + f4[1] + f4[2] + f4[3]
    """
    red, combine, identity = _KINDS[kind]
    if lanes <= 1 or cols < lanes:
        k = pt.reduce_axis((0, cols), name=f"{name}_k")
        R = pt.compute((rows,), lambda i: red(elem(i, k), axis=k), name=name)
        return R, [R]
    nfull, tail = cols // lanes, cols % lanes
    ko = pt.reduce_axis((0, nfull), name=f"{name}_ko")
    P = pt.compute(
        (rows, lanes), lambda i, ln: red(elem(i, ko * lanes + ln), axis=ko), name=f"{name}_p"
    )
    parts, width = [P], lanes
    if tail:
        start = cols - lanes

        def with_tail(i, ln):
            e = elem(i, start + ln)
            return combine(P[i, ln], pt.select(ln >= lanes - tail, e, pt.const(identity, e.dtype)))

        parts.append(pt.compute((rows, lanes), with_tail, name=f"{name}_t"))
    while width > FOLD_TO and width % 2 == 0:
        width //= 2
        parts.append(_halved(kind, parts[-1], rows, width, f"{name}_f{width}"))
    Q = parts[-1]
    q = pt.reduce_axis((0, width), name=f"{name}_q")
    R = pt.compute((rows,), lambda i: red(Q[i, q], axis=q), name=name)
    return R, [*parts, R]


def _halved(kind: str, P, rows: int, width: int, name: str):
    """``P``'s ``2 width`` partial results per row combined pairwise into ``width``."""
    combine = _KINDS[kind][1]
    return pt.compute((rows, width), lambda i, ln: combine(P[i, ln], P[i, ln + width]), name=name)


def define_row_knobs(cfg, cols: int, lanes: int, prefetch_modes=(0, 1), prefetch_default=None):
    """``red_lanes``: partial accumulators of the row reductions (1: a scalar loop);
    ``unroll_red``: steps of the partial reductions unrolled; ``tile_j``: the vector
    chunk of elementwise passes; ``unroll_j``: chunks unrolled; ``prefetch``: the
    next row prefetched during an elementwise pass (2: and the output's row ahead of
    its pass, where a template has two elementwise passes; the default is
    ``prefetch_default``, else the last of ``prefetch_modes``)."""
    # by default the most partial sums that leave each at least 4 steps of a row (a
    # row of 64 with 64 lanes did its sums in the scalar combine: 3.5x torch's time)
    fits = [m * lanes for m in (1, 2, 4) if 4 * m * lanes <= cols] or [lanes]
    cfg.define_knob("red_lanes", [1, lanes, 2 * lanes, 4 * lanes], default=fits[-1])
    cfg.define_knob("unroll_red", [1, 2, 4], default=1)
    cfg.define_split(
        "tile_j",
        cols,
        num_outputs=2,
        policy="candidate",
        candidate=[[-1, lanes * m] for m in (1, 2, 4, 8)],
        default=[-1, 4 * lanes],
    )
    cfg.define_knob("unroll_j", [1, 2, 4], default=1)
    default = prefetch_modes[-1] if prefetch_default is None else prefetch_default
    cfg.define_knob("prefetch", list(prefetch_modes), default=default)


SHORT_ROW = 64  # rows of at most this many elements ...
ROW_BLOCK = 4  # ... are computed this many at a time


def _schedule_elementwise(cfg, s, T, cols: int, X=None, output=False, ahead=None, row=None):
    """Split a row-sized elementwise stage's last loop by ``tile_j``; vectorize the
    inner part, unroll ``unroll_j`` chunks of the outer (returns the loop over them).
    With ``prefetch`` on, each chunk prefetches the same chunk of the next row of ``X``
    (if given; or, where the stages computed at ``row`` read ``X``, not this one, the
    lines they read at the next row spread over the chunks), for the ``output`` its own
    next row (for writing), and of the consumer ``ahead`` (if given) the chunk it will
    write from this one."""
    j = s[T].op.axis[-1]
    jo, ji = cfg["tile_j"].apply(s, T, j)
    u = cfg["unroll_j"].val
    if u > 1:
        jo, jm = s[T].split(jo, factor=u)
        s[T].unroll(jm)
    s[T].vectorize(ji)
    if cfg["prefetch"].val:
        per_row = -(-cols // (cfg["tile_j"].size[-1] * u))  # chunks: the offset of a row
        if X is not None and row is not None:
            s[T].prefetch(X, row, 1, level=2, spread=jo)
        elif X is not None:
            s[T].prefetch(X, jo, per_row, level=2)  # read after this row's passes
        if output:
            s[T].prefetch(T, jo, per_row)  # for writing: the store misses overlap
        if ahead is not None:
            s[T].prefetch(ahead, jo, 0)  # the consumer's row, for writing, before its pass
    return jo


def _schedule_reduction(cfg, s, stages):
    """Vectorize the spatial lanes of a split row reduction (its partial stage, the one
    adding the row's tail and those halving them), the partial stage's reduction loop
    outside its lanes, unrolled by ``unroll_red``."""
    for F in stages[1:-1]:
        s[F].vectorize(F.op.axis[-1])
    if len(stages) >= 2:
        P = stages[0]
        _, lane = s[P].op.axis
        (ko,) = s[P].op.reduce_axis
        u = cfg["unroll_red"].val
        if u > 1:
            ko, ku = s[P].split(ko, factor=u)
            s[P].reorder(ko, ku, lane)
            s[P].unroll(ku)
        else:
            s[P].reorder(ko, lane)
        s[P].vectorize(lane)


def _schedule_rows(cfg, s, Y, row_stages, elementwise, X, cols: int, converted=False):
    """Parallel over rows of ``Y`` (short rows in blocks of ``ROW_BLOCK``: returns that
    loop); every stage in ``row_stages`` computed per row (block); the first elementwise
    stage prefetches the next row of ``X`` (``converted``: X is read by a stage to be
    computed at the row, not by the passes), ``Y`` its own next row (``prefetch=2``
    with two elementwise stages: the first one prefetches Y's row). A streamed ``Y``
    (``norm_stream``; its row ``elementwise[-1]`` is among the row stages) is copied
    out by the streaming (or narrowing) intrinsic and never prefetched."""
    i = Y.op.axis[0]
    streamed = elementwise[-1] is not Y
    if cols <= SHORT_ROW and not streamed:
        i, _ = s[Y].split(i, factor=ROW_BLOCK)
    s[Y].parallel(i)
    for T in row_stages:
        if not (streamed and T is elementwise[-1]):
            s[T].compute_at(s[Y], i)
    if streamed:  # the row computed chunk by chunk into an L1-sized buffer, then streamed
        s[elementwise[-1]].compute_at(s[Y], schedule_stream(s, Y, cfg.target))
    two = len(elementwise) > 1
    ahead = Y if cfg["prefetch"].val == 2 and two and not streamed else None
    for k, T in enumerate(elementwise):
        first = k == 0
        own_next = T is Y and ahead is None
        _schedule_elementwise(
            cfg, s, T, cols, X if first else None, own_next, ahead if first else None,
            i if converted else None,
        )  # fmt: skip
    return i


def _output(cfg, f, rows: int, cols: int):
    """The output ``Y[i, j] = f(i, j)``: ``(Yr, Y, row stages)``. With the ``stream``
    knob on (the default where the output outgrows the target's last-level cache),
    ``Yr`` is a row computed in cache and ``Y`` its streamed copy (``norm_stream``),
    else both are the one stage ``Y``."""
    if define_stream_knob(cfg, int(outgrows_cache(rows, cols, cfg.target))):
        Yr = pt.compute((rows, cols), f, name="Yr")
        return Yr, stream_rows(Yr), [Yr]
    Y = pt.compute((rows, cols), f, name="Y")
    return Y, Y, []


# ----------------------------------------------------------------- softmax


def _softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


@template("softmax", reference=_softmax_ref)
def softmax(cfg, rows, cols):
    """Y[i, j] = exp(X[i, j] - max_k X[i, k]) / sum_k exp(X[i, k] - max X[i, :])."""
    V = cfg.target.vector_lanes(F32)
    define_row_knobs(cfg, cols, V, prefetch_modes=(0, 1, 2))
    # exp: libm expf (a scalar call) or the vectorizable polynomial pt.fast_exp;
    # stored per row (1) or recomputed in the last pass (0; prefetch 2 is then 1)
    cfg.define_knob("exp_impl", ["libm", "poly"], default="poly")
    cfg.define_knob("store_exp", [0, 1], default=1)
    add_row_flop(cfg, 5.0, rows, cols)
    L = cfg["red_lanes"].val
    X = pt.placeholder((rows, cols), F32, name="X")
    mx, mx_st = row_reduce("max", lambda i, j: X[i, j], rows, cols, L, "mx")
    exp = pt.fast_exp if cfg["exp_impl"].val == "poly" else pt.exp
    ex = pt.compute((rows, cols), lambda i, j: exp(X[i, j] - mx[i]), name="ex")
    sm, sm_st = row_reduce("sum", lambda i, j: ex[i, j], rows, cols, L, "sm")
    rs = pt.compute((rows,), lambda i: pt.const(1.0, F32) / sm[i], name="rs")
    Yr, Y, out = _output(cfg, lambda i, j: ex[i, j] * rs[i], rows, cols)
    s = pt.create_schedule(Y.op)
    if cfg["store_exp"].val:
        _schedule_rows(cfg, s, Y, [*mx_st, ex, *sm_st, rs, *out], [ex, Yr], X, cols)
    else:
        s[ex].compute_inline()
        _schedule_rows(cfg, s, Y, [*mx_st, *sm_st, rs, *out], [Yr], X, cols)
    _schedule_reduction(cfg, s, mx_st)
    _schedule_reduction(cfg, s, sm_st)
    return s, [X, Y]


# ----------------------------------------------------------------- layernorm


def _layernorm_ref(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + eps) * gamma + beta).astype(np.float32)


def _layernorm_reference(x, gamma, beta, *, eps):
    return _layernorm_ref(x, gamma, beta, eps)


@template("layernorm", reference=_layernorm_reference)
def layernorm(cfg, rows, cols, eps=1e-5):
    """Y = (X - mean) / sqrt(var + eps) * gamma + beta over the last axis (two-pass var)."""
    V = cfg.target.vector_lanes(F32)
    define_row_knobs(cfg, cols, V)
    add_row_flop(cfg, 5.0, rows, cols)
    X = pt.placeholder((rows, cols), F32, name="X")
    gamma = pt.placeholder((cols,), F32, name="gamma")
    beta = pt.placeholder((cols,), F32, name="beta")
    mean, rstd, st1, st2 = layer_stats(X, rows, cols, eps, F32, cfg["red_lanes"].val)
    Yr, Y, out = _output(
        cfg, lambda i, j: (X[i, j] - mean[i]) * rstd[i] * gamma[j] + beta[j], rows, cols
    )
    s = pt.create_schedule(Y.op)
    _schedule_rows(cfg, s, Y, [*st1, *st2, *out], [Yr], X, cols)
    _schedule_reduction(cfg, s, st1[:-1])
    _schedule_reduction(cfg, s, st2[:-1])
    return s, [X, gamma, beta, Y]


# ----------------------------------------------------------------- rmsnorm


def _rmsnorm_reference(x, gamma, *, eps):
    x = x.astype(np.float64)
    ms = (x * x).mean(axis=-1, keepdims=True)
    return (x / np.sqrt(ms + eps) * gamma).astype(np.float32)


@template("rmsnorm", reference=_rmsnorm_reference)
def rmsnorm(cfg, rows, cols, eps=1e-6):
    """Y = X / sqrt(mean(X^2) + eps) * gamma over the last axis."""
    eps = checked_eps(eps)
    V = cfg.target.vector_lanes(F32)
    define_row_knobs(cfg, cols, V)
    add_row_flop(cfg, 5.0, rows, cols)
    L = cfg["red_lanes"].val
    X = pt.placeholder((rows, cols), F32, name="X")
    gamma = pt.placeholder((cols,), F32, name="gamma")
    ss, ss_st = row_reduce("sum", lambda i, j: X[i, j] * X[i, j], rows, cols, L, "ss")
    r = pt.compute(
        (rows,),
        lambda i: pt.rsqrt(ss[i] * pt.const(1.0 / cols, F32) + pt.const(eps, F32)),
        name="r",
    )
    Yr, Y, out = _output(cfg, lambda i, j: X[i, j] * r[i] * gamma[j], rows, cols)
    s = pt.create_schedule(Y.op)
    _schedule_rows(cfg, s, Y, [*ss_st, r, *out], [Yr], X, cols)
    _schedule_reduction(cfg, s, ss_st)
    return s, [X, gamma, Y]
