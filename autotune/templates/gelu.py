"""GELU over a rows x cols array, forward (``gelu``) and backward (``gelu_backward``).

``approximate="none"``: ``gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))``;
``approximate="tanh"``: ``0.5 x (1 + tanh(u))`` with ``u = sqrt(2/pi) (x + 0.044715 x^3)``,
computed as ``x / (1 + exp(-2u))`` (the same function: ``0.5 (1 + tanh(u)) = sigmoid(2u)``).
In float32 both use the vectorizable ``pt.fast_erf`` / ``pt.fast_exp`` (libm's
``erff``/``tanhf`` are scalar calls gcc does not vectorize); float64 uses libm.

Schedule: rows in parallel, each row split by ``tile_j`` with the inner chunk
vectorized and ``unroll_j`` chunks unrolled (elementwise: one read, one write).
float16 on a target that converts it (``f16c``): a chunk of 16 vectors of X converted
into L1, computed, and narrowed into Y at a time.
"""

from __future__ import annotations

import math

import numpy as np

import pypto as pt

from ..task import template
from . import f16c
from .knobs import add_row_flop, inner_tile
from .norm_stream import narrowed_rows, schedule_stream
from .precision import check_row_dtype, inline_widened, rounded, widen

_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
APPROXIMATIONS = ("none", "tanh")


def _check(approximate: str, dtype: str) -> str:
    """The compute dtype for storage ``dtype`` (``precision.check_row_dtype``)."""
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return check_row_dtype("gelu", dtype)


def _erf(dtype: str):
    return pt.fast_erf if dtype == "float32" else pt.erf


def _exp(dtype: str):
    return pt.fast_exp if dtype == "float32" else pt.exp


def gelu_expr(x, approximate: str, dtype: str):
    """The GELU of expression ``x`` (``approximate``: ``"none"`` or ``"tanh"``)."""
    c = lambda v: pt.const(v, dtype)  # noqa: E731
    if approximate == "tanh":
        u = c(_SQRT_2_PI) * (x + c(0.044715) * x * x * x)
        return x / (c(1.0) + _exp(dtype)(c(-2.0) * u))
    return c(0.5) * x * (c(1.0) + _erf(dtype)(x * c(_INV_SQRT2)))


def gelu_grad_expr(x, approximate: str, dtype: str):
    """d gelu(x) / dx as an expression of ``x``."""
    c = lambda v: pt.const(v, dtype)  # noqa: E731
    if approximate == "tanh":
        u = c(_SQRT_2_PI) * (x + c(0.044715) * x * x * x)
        du = c(_SQRT_2_PI) * (c(1.0) + c(3.0 * 0.044715) * x * x)
        sg = c(1.0) / (c(1.0) + _exp(dtype)(c(-2.0) * u))  # sigmoid(2u) = (1 + tanh u) / 2
        return sg + x * c(2.0) * sg * (c(1.0) - sg) * du
    cdf = c(0.5) * (c(1.0) + _erf(dtype)(x * c(_INV_SQRT2)))
    pdf = c(_INV_SQRT_2PI) * _exp(dtype)(c(-0.5) * x * x)
    return cdf + x * pdf


def define_elementwise_knobs(cfg, cols: int, lanes: int):
    """``tile_j``: the vector chunk of a row; ``unroll_j``: chunks unrolled."""
    inner_tile(cfg, "tile_j", cols, [lanes * m for m in (1, 2, 4)], 2 * lanes)
    cfg.define_knob("unroll_j", [1, 2, 4], default=2)


def schedule_elementwise(cfg, s, Y):
    """Rows of ``Y`` in parallel, the row split by ``tile_j`` (inner chunk vectorized,
    ``unroll_j`` chunks unrolled)::

        for i, j: Y[i, j] = f(i, j)
        ->
        parallel for i:
          for jo: unrolled for ju: vectorized for ji: Y[i, (jo * U + ju) * V + ji] = ...
    """
    s[Y].parallel(Y.op.axis[0])
    _schedule_chunks(cfg, s, Y)


def _schedule_chunks(cfg, s, T):
    """``T``'s last loop split by ``tile_j``, the inner chunk vectorized, ``unroll_j``
    chunks unrolled."""
    jo, ji = cfg["tile_j"].apply(s, T, T.op.axis[-1])
    u = cfg["unroll_j"].val
    if u > 1:
        jo, ju = s[T].split(jo, factor=u)
        s[T].unroll(ju)
    s[T].vectorize(ji)


def _erf64(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def gelu_ref(x, approximate: str = "none"):
    """GELU in float64, returned in x's dtype."""
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(_SQRT_2_PI * (x64 + 0.044715 * x64**3)))
    else:
        y = 0.5 * x64 * (1.0 + _erf64(x64 * _INV_SQRT2))
    return y.astype(x.dtype)


def gelu_grad_ref(x, dy, approximate: str = "none"):
    """dy * gelu'(x) in float64, returned in x's dtype."""
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        t = np.tanh(_SQRT_2_PI * (x64 + 0.044715 * x64**3))
        du = _SQRT_2_PI * (1.0 + 3 * 0.044715 * x64**2)
        d = 0.5 * (1.0 + t) + 0.5 * x64 * (1.0 - t * t) * du
    else:
        d = 0.5 * (1.0 + _erf64(x64 * _INV_SQRT2)) + x64 * _INV_SQRT_2PI * np.exp(-0.5 * x64**2)
    return (dy.astype(np.float64) * d).astype(x.dtype)


@template("gelu", reference=lambda x, *, approximate: gelu_ref(x, approximate))
def gelu(cfg, rows, cols, approximate="none", dtype="float32"):
    """Y[i, j] = gelu(X[i, j]) (exact erf form, or the tanh approximation)."""
    cdt = _check(approximate, dtype)
    define_elementwise_knobs(cfg, cols, cfg.target.vector_lanes(cdt))
    add_row_flop(cfg, 10.0, rows, cols)
    X = pt.placeholder((rows, cols), dtype, name="X")
    Xr = f16c.widened(X, cfg.target)  # float16: converted a chunk at a time
    Xc = widen(X) if Xr is X else Xr
    Yr, Y = narrowed_rows(lambda i, j: gelu_expr(Xc[i, j], approximate, cdt), rows, cols,
                          dtype, cfg.target)  # fmt: skip
    s = pt.create_schedule(Y.op)
    if Yr is Y:
        inline_widened(s, [Xc])
        schedule_elementwise(cfg, s, Y)
        return s, [X, Y]
    s[Y].parallel(Y.op.axis[0])
    chunk = schedule_stream(s, Y, cfg.target)
    s[Yr].compute_at(s[Y], chunk)
    f16c.convert_at(s, Xc, Y, chunk, min(cols, f16c.chunk(cfg.target)), cfg.target)
    _schedule_chunks(cfg, s, Yr)
    return s, [X, Y]


def _gelu_grad_reference(x, dy, *, approximate):
    return gelu_grad_ref(x, dy, approximate)


@template("gelu_backward", reference=_gelu_grad_reference)
def gelu_backward(cfg, rows, cols, approximate="none", dtype="float32"):
    """DX[i, j] = DY[i, j] * gelu'(X[i, j])."""
    cdt = _check(approximate, dtype)
    define_elementwise_knobs(cfg, cols, cfg.target.vector_lanes(cdt))
    add_row_flop(cfg, 16.0, rows, cols)
    X = pt.placeholder((rows, cols), dtype, name="X")
    DY = pt.placeholder((rows, cols), dtype, name="DY")
    Xc, DYc = widen(X), widen(DY)
    DX = pt.compute(
        (rows, cols),
        lambda i, j: rounded(DYc[i, j] * gelu_grad_expr(Xc[i, j], approximate, cdt), dtype),
        name="DX",
    )
    s = pt.create_schedule(DX.op)
    inline_widened(s, [Xc, DYc])
    schedule_elementwise(cfg, s, DX)
    return s, [X, DY, DX]
