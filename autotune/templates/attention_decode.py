"""Attention's ``decode`` form: a few queries per head (a decoder's step; S up to
``DECODE_QUERIES``), where the two-pass form's transposed copy of K costs more than
the scores themselves (1 x 32 x 1 x 128 over 2048 keys, one thread of a Zen 4: 21.8
ms, PyTorch's SDPA 12.4). K and V are read in place, once each, row after row::

    parallel for b, h:                                    (a task per head)
      for j < Sk:                                         (the keys, in order)
        Dot_p[i, l] = sum_ko Q[i, ko*L + l] * K[j, ko*L + l]    (i < S unrolled, l vectorized)
        Dot[i, j] = sum_l Dot_p[i, l]  (+ the tail of D)
      Sc, mx, P, sm, rs                                   (``attention_rows``)
      for j < Sk:                                         (the values, in order)
        Acc[i, :] += P[i, j] * V[j, :]                    (S x Dv, in registers where it fits)
      O[i, :] = Acc[i, :] * rs[i]

bfloat16 (on the targets whose other form is the 16-bit tiles of ``attention_amx``)
computes in float32 from Q, K and V widened where they are read, and rounds O once
(1 x 32 x 1 x 128 over 2048 keys through ``torch.ops.pypto.attention``, one thread of
a Zen 4: 20.8 ms on the tiles, 4.1 decoding; SDPA's bfloat16 18.1).
"""

from __future__ import annotations

import pypto as pt

from . import attention_rows

DECODE_QUERIES = 4  # the most queries per head the decode form is the default for


def available(S: int, k_transposed: bool) -> bool:
    """Whether the ``form`` knob offers ``decode``: a few queries, K's rows contiguous."""
    return S <= DECODE_QUERIES and not k_transposed


def define_knobs(cfg, lanes: int) -> None:
    """The knobs of the decode form where the template's other form is the 16-bit tiles'
    (``attention_amx``): ``form`` (``tiles`` or ``decode``, the default) and
    ``red_lanes`` (the row max's and sum's vector partials)."""
    cfg.define_knob("form", ["tiles", "decode"], default="decode")
    cfg.define_knob("red_lanes", [1, lanes, 2 * lanes], default=2 * lanes)


def chosen(cfg) -> bool:
    """Whether ``cfg`` takes the decode form."""
    knobs = cfg.knobs if hasattr(cfg, "knobs") else cfg.space.knobs
    return "form" in knobs and cfg["form"].val == "decode"


def _as(dtype: str, x):
    """``x`` in ``dtype``: 16-bit Q, K and V widened to the compute dtype where they are
    read, the output rounded back once."""
    return x if x.dtype == dtype else pt.cast(dtype, x)


def _scores(Q, K, dims, kvh, lanes: int, cdt: str):
    """``Dot[b, h, i, j] = Q[b, h, i, :] . K[b, kvh(h), j, :]`` in ``cdt`` as ``lanes``
    partial sums along D and their combine; returns ``(Dot, partials or None)``."""
    B, H, S, D, Sk, _, _ = dims
    q_ = lambda b, h, i, d: _as(cdt, Q[b, h, i, d])  # noqa: E731
    k_ = lambda b, h, j, d: _as(cdt, K[b, kvh(h), j, d])  # noqa: E731
    nfull, tail = D // lanes, D % lanes
    if nfull == 0:
        d = pt.reduce_axis((0, D), name="d")
        Dot = pt.compute(
            (B, H, S, Sk),
            lambda b, h, i, j: pt.sum(q_(b, h, i, d) * k_(b, h, j, d), axis=d),
            name="Dot",
        )
        return Dot, None
    ko = pt.reduce_axis((0, nfull), name="ko")
    Dp = pt.compute(
        (B, H, S, Sk, lanes),
        lambda b, h, i, j, ln: pt.sum(
            q_(b, h, i, ko * lanes + ln) * k_(b, h, j, ko * lanes + ln), axis=ko
        ),
        name="Dot_p",
    )
    q = pt.reduce_axis((0, lanes + tail), name="q")
    base = nfull * lanes - lanes  # q >= lanes: the tail element base + q

    def combine(b, h, i, j):
        if not tail:
            return pt.sum(Dp[b, h, i, j, q], axis=q)
        rest = q_(b, h, i, base + q) * k_(b, h, j, base + q)
        return pt.sum(pt.select(q < lanes, Dp[b, h, i, j, q], rest), axis=q)

    return pt.compute((B, H, S, Sk), combine, name="Dot"), Dp


def decode_attention(cfg, Q, K, V, dims, causal: bool, sc: float, cdt: str, msk, kvh):
    """The decode form's ``(schedule, O)`` (``dims``: ``B, H, S, D, Sk, Dv, Hk``;
    ``cdt``: the dtype of the scores, the softmax and the sums: float32 for 16-bit
    inputs, the output rounded once)."""
    B, H, S, D, Sk, Dv, Hk = dims
    lanes = cfg.target.vector_lanes(cdt)
    Dot, Dp = _scores(Q, K, dims, kvh, lanes, cdt)
    probs = attention_rows.probabilities(Dot, S, Sk, causal, sc, cdt, msk, cfg["red_lanes"].val)
    j = pt.reduce_axis((0, Sk), name="j")
    Acc = pt.compute(
        (B, H, S, Dv),
        lambda b, h, i, e: pt.sum(probs.P[b, h, i, j] * _as(cdt, V[b, kvh(h), j, e]), axis=j),
        name="Acc",
    )
    out = str(Q.dtype)
    Out = pt.compute(
        (B, H, S, Dv),
        lambda b, h, i, e: _as(out, Acc[b, h, i, e] * probs.rs[b, h, i]),
        name="O",
    )

    s = pt.create_schedule(Out.op)
    s[probs.Sc].compute_inline()  # the scale and the mask where the scores are read
    AL = s.cache_write(Acc, "local")
    s[Acc].compute_inline()
    b, h, i, e = Out.op.axis
    task = s[Out].fuse(b, h)
    s[Out].parallel(task)
    s[Out].vectorize(e)
    for T in [*probs.stages(Dot), AL]:
        s[T].compute_at(s[Out], task)
    # the scores: key after key, the S queries' partials of each in registers
    *_, di, dj = s[Dot].op.axis
    s[Dot].reorder(dj, di)
    s[Dot].unroll(di)
    if Dp is not None:
        s[Dp].compute_at(s[Dot], dj)
        *_, pi, _, pl = s[Dp].op.axis
        (pk,) = s[Dp].op.reduce_axis
        s[Dp].reorder(pk, pi, pl)
        s[Dp].unroll(pi)
        s[Dp].vectorize(pl)
    attention_rows.schedule_partial(s, probs.mx_p)
    attention_rows.schedule_partial(s, probs.sm_p)
    _, pv = s[probs.P].split(probs.P.op.axis[3], factor=lanes)
    s[probs.P].vectorize(pv)
    # P V: value row after value row into S x Dv accumulators, their vectors unrolled
    # where they fit in half of the vector registers
    *_, ai, ae = s[AL].op.axis
    (aj,) = s[AL].op.reduce_axis
    ev, el = s[AL].split(ae, factor=lanes)
    s[AL].reorder(aj, ai, ev, el)
    s[AL].unroll(ai)
    if S * -(-Dv // lanes) <= cfg.target.vector_registers // 2:
        s[AL].unroll(ev)
    s[AL].vectorize(el)
    return s, Out
