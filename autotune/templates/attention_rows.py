"""The rows of attention probabilities from a tile's scores, shared by the two-pass
and the decode forms: the scores scaled and masked (``Sc``), their row max (``mx``),
``P = exp(Sc - max)``, the row sum (``sm``) and its reciprocal (``rs``); the max and
the sum as ``lanes`` vector partials per row (``row_reduce4``)::

    Sc[b, h, i, j] = Dot[b, h, i, j] * scale        (-inf where causal or a mask hides j)
    mx[b, h, i]    = max_j Sc[b, h, i, j]
    P[b, h, i, j]  = exp(Sc[b, h, i, j] - mx[b, h, i])
    rs[b, h, i]    = 1 / sum_j P[b, h, i, j]         (0 for a row a mask hides whole)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pypto as pt

from .attention_flash import FLOOR
from .attention_mask import past_keys


def row_reduce4(kind, elem, lead, cols: int, lanes: int, name: str):
    """``R[b, h, i] = kind_j elem(b, h, i, j)`` with ``lanes`` vector partials per row
    (see ``norm.row_reduce``); returns ``(R, partial stage or None)``. ``cols`` may
    be a size bound at call (a ``pt.var``: ``_row_reduce_any``)."""
    red = {"sum": pt.sum, "max": pt.max}[kind]
    if not isinstance(cols, int) and lanes > 1:
        return _row_reduce_any(red, elem, lead, cols, lanes, name)
    if lanes <= 1 or cols < lanes:
        k = pt.reduce_axis((0, cols), name=f"{name}_k")
        R = pt.compute(lead, lambda b, h, i: red(elem(b, h, i, k), axis=k), name=name)
        return R, None
    nfull, tail = cols // lanes, cols % lanes
    ko = pt.reduce_axis((0, nfull), name=f"{name}_ko")
    P = pt.compute(
        (*lead, lanes),
        lambda b, h, i, ln: red(elem(b, h, i, ko * lanes + ln), axis=ko),
        name=f"{name}_p",
    )
    q = pt.reduce_axis((0, lanes + tail), name=f"{name}_q")
    base = nfull * lanes - lanes
    R = pt.compute(
        lead,
        lambda b, h, i: red(
            pt.select(q < lanes, P[b, h, i, q], elem(b, h, i, base + q)) if tail else P[b, h, i, q],
            axis=q,
        ),
        name=name,
    )
    return R, P


def _row_reduce_any(red, elem, lead, cols, lanes: int, name: str):
    """``row_reduce4`` of a row of ``cols`` elements, a size bound at call (at least
    1): ``lanes`` partials over its whole chunks, then the combine reduces them and the
    row's last ``cols % lanes`` elements; each combine step reads a partial or an
    element, the element's index clamped to 0 where the partial is taken (a row
    shorter than ``lanes`` has no whole chunk)::

        for ko < cols // lanes: vectorized for l: p[l] = max(p[l], x[ko * lanes + l])
        R = max over q < lanes + t: q < lanes ? p[q] : x[cols - t + q - lanes]
                                                       (t = cols % lanes)
    """
    ko = pt.reduce_axis((0, cols // lanes), name=f"{name}_ko")
    P = pt.compute(
        (*lead, lanes),
        lambda b, h, i, ln: red(elem(b, h, i, ko * lanes + ln), axis=ko),
        name=f"{name}_p",
    )
    q = pt.reduce_axis((0, lanes + cols % lanes), name=f"{name}_q")
    base = cols // lanes * lanes - lanes
    R = pt.compute(
        lead,
        lambda b, h, i: red(
            pt.select(q < lanes, P[b, h, i, q], elem(b, h, i, pt.max(base + q, 0))), axis=q
        ),
        name=name,
    )
    return R, P


@dataclass(frozen=True)
class Rows:
    """The stages of ``probabilities``; ``mx_p`` and ``sm_p`` the partials (or None)."""

    Sc: pt.Tensor
    mx: pt.Tensor
    mx_p: pt.Tensor | None
    P: pt.Tensor
    sm: pt.Tensor
    sm_p: pt.Tensor | None
    rs: pt.Tensor

    def stages(self, scores: pt.Tensor) -> list:
        """Every stage from ``scores`` (``Sc``, or the raw ``Dot`` where a micro-kernel
        stores them and ``Sc`` is inlined) to ``rs``, in order, without the Nones."""
        seq = [scores, self.mx_p, self.mx, self.P, self.sm_p, self.sm, self.rs]
        return [T for T in seq if T is not None]


def probabilities(Dot, S: int, Sk, causal: bool, sc: float, dtype: str, msk, lanes):
    """The rows of probabilities of the scores ``Dot`` (``[B, H, S, Sk]``, or padded to
    ``Skp`` keys: those beyond ``Sk`` score -inf), as the module docstring shows;
    ``msk``: the template's mask (``attention_mask``) or None; ``lanes``: the partials
    of the max and the sum. ``Sk`` may be a ``pt.var``: ``Dot`` of that many keys, or
    of a constant number at least as many (the rest score -inf)."""
    lead = tuple(int(d.value) for d in Dot.shape[:3])
    keys = Dot.shape[3]
    Skp = int(keys.value) if hasattr(keys, "value") else keys  # (a constant, or a var)
    padded = isinstance(Skp, int) and (not isinstance(Sk, int) or Skp > Sk)
    shape = (*lead, Skp)
    c = lambda v: pt.const(v, dtype)  # noqa: E731
    add = None  # the mask and the padding as one row added to the scores, where it can be
    if not causal and isinstance(Skp, int):
        add = msk.padded(Skp, Sk, dtype) if msk else past_keys(Skp, Sk, dtype) if padded else None
    if causal:  # (a padded key lies beyond every query's last one)
        Sc = pt.compute(
            shape,
            lambda b, h, i, j: pt.select(j <= i + (Sk - S), Dot[b, h, i, j] * c(sc), c(-math.inf)),
            name="Sc",
        )
    elif add is not None:
        Sc = pt.compute(
            shape, lambda b, h, i, j: add.score(Dot[b, h, i, j] * c(sc), b, h, i, j), name="Sc"
        )
    elif msk is not None:  # a mask per query: read where the scores are

        def masked(b, h, i, j):
            score = msk.score(Dot[b, h, i, j] * c(sc), b, h, i, pt.min(j, Sk - 1))
            return pt.select(j < Sk, score, c(-math.inf)) if padded else score

        Sc = pt.compute(shape, masked, name="Sc")
    else:
        Sc = pt.compute(shape, lambda b, h, i, j: Dot[b, h, i, j] * c(sc), name="Sc")
    mx, mx_p = row_reduce4("max", lambda b, h, i, j: Sc[b, h, i, j], lead, Skp, lanes, "mx")
    exp = pt.fast_exp if dtype == "float32" else pt.exp
    if msk is None:
        top = lambda b, h, i: mx[b, h, i]  # noqa: E731
    else:  # a row masked out: exp(-inf - floor) is 0, not NaN
        top = lambda b, h, i: pt.max(mx[b, h, i], c(FLOOR))  # noqa: E731
    P = pt.compute(shape, lambda b, h, i, j: exp(Sc[b, h, i, j] - top(b, h, i)), name="P")
    sm, sm_p = row_reduce4("sum", lambda b, h, i, j: P[b, h, i, j], lead, Skp, lanes, "sm")
    if msk is None:
        rs = pt.compute(lead, lambda b, h, i: c(1.0) / sm[b, h, i], name="rs")
    else:  # and its output 0
        rs = pt.compute(
            lead,
            lambda b, h, i: pt.select(sm[b, h, i] > c(0.0), c(1.0) / sm[b, h, i], c(0.0)),
            name="rs",
        )
    return Rows(Sc, mx, mx_p, P, sm, sm_p, rs)


def schedule_partial(s, P):
    """A row's vector partials (``row_reduce4``): the reduction outside, the lanes
    vectorized."""
    if P is not None:
        (ko,) = s[P].op.reduce_axis
        s[P].reorder(ko, s[P].op.axis[-1])
        s[P].vectorize(s[P].op.axis[-1])
