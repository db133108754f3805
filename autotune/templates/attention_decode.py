"""Attention's ``decode`` form: a few queries per head (a decoder's step; S up to
``DECODE_QUERIES``), where the two-pass form's transposed copy of K costs more than
the scores themselves (1 x 32 x 1 x 128 over 2048 keys, one thread of a Zen 4: 21.8
ms, PyTorch's SDPA 12.4). K and V are read in place, once each, row after row; with
grouped-query heads (``head_group``) a task takes the query heads of one key/value
head, so their K and V rows are read once for all of them::

    parallel for b, hk:                                   (a task per key/value head)
      for j < Sk:                                         (the keys, in order)
        Dot_p[g, i, l] = sum_ko Q[g, i, ko*L + l] * K[j, ko*L + l]  (g, i unrolled, l vectorized)
        Dot[g, i, j] = sum_l Dot_p[g, i, l]  (+ the tail of D)
      Sc, mx, P, sm, rs                                   (``attention_rows``)
      for j < Sk:                                         (the values, in order)
        Acc[g, i, :] += P[g, i, j] * V[j, :]              (in registers where they fit)
      O[g, i, :] = Acc[g, i, :] * rs[g, i]

bfloat16 and float16 compute in float32: Q widened once per task, a row of K or V
into a float32 buffer in L1 where it is read (float16 by the target's conversion
instructions, ``f16c``), the output rounded once. This form is the only one for them
on a target without a bfloat16 dot instruction, and the default on those with one (the
other form is then the 16-bit tiles of ``attention_amx``). 1 x 32 x 1 x 128 over 2048
keys through ``torch.ops.pypto.attention``, one thread of a Zen 4: bfloat16 on the
tiles 20.8 ms, decoding 4.1 (SDPA's bfloat16 18.1); float16, from float32 copies of
q, k and v, 9.0 -> 2.2 ms read in place (SDPA's float16 35).
"""

from __future__ import annotations

import pypto as pt

from . import attention_rows, f16c

DECODE_QUERIES = 4  # the most queries per head the decode form is the default for
WIDENED = ("bfloat16", "float16")  # computed in float32, read in place


def available(S: int, k_transposed: bool) -> bool:
    """Whether the ``form`` knob offers ``decode``: a few queries, K's rows contiguous."""
    return S <= DECODE_QUERIES and not k_transposed


def define_knobs(cfg, lanes: int, others=("tiles",)) -> None:
    """The knobs of the decode form where the template's other form is the 16-bit tiles'
    (``attention_amx``), or where it has no other (``others`` empty: 16-bit dtypes
    without a dot instruction): ``form`` (``decode``, the default, or one of
    ``others``) and ``red_lanes`` (the row max's and sum's vector partials)."""
    cfg.define_knob("form", [*others, "decode"], default="decode")
    cfg.define_knob("red_lanes", [1, lanes, 2 * lanes], default=2 * lanes)


def define_group_knob(cfg, B: int, H: int, S: int, Hk: int) -> None:
    """``head_group`` (grouped-query attention): the query heads of a key/value head one
    task takes, all of them (K and V read once for the group; their S queries each a
    row of the register tiles) or 1 (a task per query head, reading its key/value head
    again). Offered while the group's queries fit in half of the vector registers; the
    group is the default while its ``B x Hk`` tasks give each core one."""
    g = H // Hk
    if g > 1 and g * S <= cfg.target.vector_registers // 2:
        cores = max(1, cfg.target.cores or 1)
        cfg.define_knob("head_group", [1, g], default=g if B * Hk >= cores else 1)


def chosen(cfg) -> bool:
    """Whether ``cfg`` takes the decode form."""
    return _knob(cfg, "form", None) == "decode"


def _knob(cfg, name: str, absent):
    """The value of knob ``name`` of ``cfg`` (a config or the space), ``absent`` where
    the template did not define it."""
    knobs = cfg.knobs if hasattr(cfg, "knobs") else cfg.space.knobs
    return cfg[name].val if name in knobs else absent


def _rounded(dtype: str, x):
    """``x`` (in the compute dtype) in the output's ``dtype``, rounded once."""
    return x if x.dtype == dtype else pt.cast(dtype, x)


def _widened(T, cdt: str):
    """``T`` in ``cdt``, as a stage of its own (converted a row at a time)."""
    return pt.compute(T.shape, lambda *ix: pt.cast(cdt, T[ix]), name=T.name + "_f32")


def _scores(Q, K, dims, kvh, lanes: int):
    """``Dot[b, h, i, j] = Q[b, h, i, :] . K[b, kvh(h), j, :]`` (in Q's and K's dtype,
    the compute dtype) as ``lanes`` partial sums along D and their combine; returns
    ``(Dot, partials or None)``."""
    B, H, S, D, Sk, _, _ = dims
    q_ = lambda b, h, i, d: Q[b, h, i, d]  # noqa: E731
    k_ = lambda b, h, j, d: K[b, kvh(h), j, d]  # noqa: E731
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


def _schedule_scores(s, Dot, Dp):
    """The scores key after key, the task's queries' partials of each in registers.
    Returns ``(stage, loop)`` at which a key's row is read."""
    *_, dh, di, dj = s[Dot].op.axis
    s[Dot].reorder(dj, dh, di)
    s[Dot].unroll(dh)
    s[Dot].unroll(di)
    if Dp is not None:
        s[Dp].compute_at(s[Dot], dj)
        *_, ph, pi, _, pl = s[Dp].op.axis
        (pk,) = s[Dp].op.reduce_axis
        s[Dp].reorder(pk, ph, pi, pl)
        s[Dp].unroll(ph)
        s[Dp].unroll(pi)
        s[Dp].vectorize(pl)
    return Dot, dj


def decode_attention(cfg, Q, K, V, dims, causal: bool, sc: float, cdt: str, msk, kvh):
    """The decode form's ``(schedule, O)`` (``dims``: ``B, H, S, D, Sk, Dv, Hk``;
    ``cdt``: the dtype of the scores, the softmax and the sums: float32 for 16-bit
    inputs, the output rounded once)."""
    B, H, S, D, Sk, Dv, Hk = dims
    lanes = cfg.target.vector_lanes(cdt)
    out = str(Q.dtype)
    # 16-bit rows widened into float32 buffers a row at a time (float16 by the target's
    # conversion instructions where it has them, ``f16c``)
    converted = f16c.conversion(cfg.target) is not None and out == "float16"
    wide = out != cdt
    if wide:
        Q, K, V = (_widened(T, cdt) for T in (Q, K, V))
    Dot, Dp = _scores(Q, K, dims, kvh, lanes)
    probs = attention_rows.probabilities(Dot, S, Sk, causal, sc, cdt, msk, cfg["red_lanes"].val)
    j = pt.reduce_axis((0, Sk), name="j")
    Acc = pt.compute(
        (B, H, S, Dv),
        lambda b, h, i, e: pt.sum(probs.P[b, h, i, j] * V[b, kvh(h), j, e], axis=j),
        name="Acc",
    )
    Out = pt.compute(
        (B, H, S, Dv),
        lambda b, h, i, e: _rounded(out, Acc[b, h, i, e] * probs.rs[b, h, i]),
        name="O",
    )

    s = pt.create_schedule(Out.op)
    s[probs.Sc].compute_inline()  # the scale and the mask where the scores are read
    AL = s.cache_write(Acc, "local")
    s[Acc].compute_inline()
    b, h, i, e = Out.op.axis
    group = _knob(cfg, "head_group", 1)
    if group > 1:  # a task per key/value head, its query heads inside
        h, _ = s[Out].split(h, factor=group)
    task = s[Out].fuse(b, h)
    s[Out].parallel(task)
    s[Out].vectorize(e)
    for T in [*probs.stages(Dot), AL]:
        s[T].compute_at(s[Out], task)
    k_at = _schedule_scores(s, Dot, Dp)
    attention_rows.schedule_partial(s, probs.mx_p)
    attention_rows.schedule_partial(s, probs.sm_p)
    _, pv = s[probs.P].split(probs.P.op.axis[3], factor=lanes)
    s[probs.P].vectorize(pv)
    # P V: value row after value row into S x Dv accumulators, their vectors unrolled
    # where they fit in half of the vector registers
    *_, ah, ai, ae = s[AL].op.axis
    (aj,) = s[AL].op.reduce_axis
    ev, el = s[AL].split(ae, factor=lanes)
    s[AL].reorder(aj, ah, ai, ev, el)
    s[AL].unroll(ah)
    s[AL].unroll(ai)
    if group * S * -(-Dv // lanes) <= cfg.target.vector_registers // 2:
        s[AL].unroll(ev)
    s[AL].vectorize(el)
    # the converted rows: Q's once per task, a row of K or V where it is read
    if wide:
        for T, (stage, loop), n in ((Q, (Out, task), D), (K, k_at, D), (V, (AL, aj), Dv)):
            if converted:
                f16c.convert_at(s, T, stage, loop, n, cfg.target)
            else:
                s[T].compute_at(s[stage], loop)
                s[T].vectorize(T.op.axis[-1])
    return s, Out
