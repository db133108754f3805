"""Attention at prompt lengths of every size: one module per bucket of lengths.

A server's prompts each have a length of their own, and attention built per shape
built a module for every new one: 1-2.5 s a length (causal) on a Zen 4, for a
kernel of milliseconds. As with ``torch.compile``'s automatic dynamic shapes, the
first lengths of a layer's shape (batch, heads, head dims, ``is_causal``, scale,
dtype; ``AS_THEY_ARE`` of them: a self- and a cross-attention) are built as they
are; a later length without a module of its own runs the module of its bucket
(``bucket``: multiples of 16 up to 128, then eight sizes an octave)::

    attention(q [1, 32, 1000, 128], k, v, is_causal=True)        (a third length)
      -> q, k, v copied into [1, 32, 1024, 128], rows 1000.. zero
         the module of (1, 32, 1024, 128, causal); its output's first 1000 rows

    attention(q [1, 12, 197, 64], k [1, 12, 197, 64], v)          (not causal)
      -> q copied into [1, 12, 208, 64]; K and V read in place, their rows a size
         the module of (1, 12, 208, 64) with kv_len a size up to 208, which computes
         208 keys, those past kv_len scoring -inf; its output's first 197 rows

Causal: a query sees the keys up to its own (PyTorch's mask), so the real queries
never see the padded keys. Either way the padded queries' rows are dropped. The
padding costs up to an eighth of a length (a quarter of a causal call's work) and
the copies: 1.06-1.36x the exact module's time on a Zen 4, against a build.

A mask the queries share (``[B, 1, 1, S_kv]``: the keys of each sequence, as an
encoder's padding mask; expanded over the queries too, ``torch_call.sdpa_mask``) is read
in place as K and V are. Lengths built as they are stay served by their modules:
the first ones, those a record names (the user's tuned shapes) and lengths that are
bucket sizes. Masks per query, causal calls with fewer keys than queries and a
decoder's steps (at most ``DECODE_QUERIES`` queries: ``torch_decode``'s, or built
per shape) are not padded.
"""

from __future__ import annotations

import threading

import torch

import pypto as pt
from pypto.torch import empty, run

from .templates.attention import sdpa_parts
from .templates.attention_decode import DECODE_QUERIES
from .torch_call import module, recorded

SMALL = 128  # up to this length, buckets are multiples of 16
AS_THEY_ARE = 2  # the lengths of a layer's shape built as they are, before buckets
_SEEN: dict = {}  # a layer's shape -> the lengths built as they are
_LOCK = threading.Lock()


def bucket(n: int) -> int:
    """The length ``n`` queries or keys are padded to: the next multiple of 16 up to
    128, then of an eighth of ``n``'s octave (197 -> 208, 1000 -> 1024, 1025 -> 1152)."""
    if n <= SMALL:
        return -(-n // 16) * 16
    step = 1 << ((n - 1).bit_length() - 4)  # n in (2^k, 2^(k+1)]: 2^(k-3)
    return -(-n // step) * step


def prefill_step(q, k, v, causal: bool, scale, dtype: str, mask=None, spec=None):
    """SDPA of q, k, v (``[B, H, S, D]``, ``[B, Hk, Sk, D]``, ``[B, Hk, Sk, Dv]``,
    checked, contiguous or not) on the module of their lengths' bucket, or None where
    the call is built as it is (see the module docstring). ``mask``: a 4-d mask the
    queries share (``spec``, ``templates.attention_mask.spec_of``: ``"bool:b11k"`` and the like,
    not causal), read in place as K and V."""
    B, H, S, D = q.shape
    Hk, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    if S <= DECODE_QUERIES or (causal and Sk < S):
        return None  # (a decoder's step: the decode form's, or padding 16x the work)
    if mask is not None and spec.split(":")[1][2] != "1":
        return None
    Sb, Kb = bucket(S), (bucket(S) if causal else bucket(Sk))
    if (Sb, Kb) == (S, S if causal else Sk):
        return None  # (lengths that are bucket sizes: built as they are)
    if _built_as_is((B, H, D, Hk, Dv, causal, scale, dtype, spec), (S, Sk)):
        return None
    ((_, _, args),) = sdpa_parts(B, H, Sb, D, Hk, Kb, Dv, causal, scale, dtype, spec)
    ((_, _, exact),) = sdpa_parts(B, H, S, D, Hk, Sk, Dv, causal, scale, dtype, spec)
    if recorded("attention", exact, like=args):
        return None
    out = empty((B, H, Sb, Dv), q.dtype)
    if causal:  # PyTorch's causal mask: the first S keys only
        ins = [(_padded(t, S, Sb), n) for t, n in ((q, "q"), (k, "k"), (v, "v"))]
        run(module("attention", args), ins, [out])
    else:  # K and V (and the mask) read in place, their keys a size
        ins = [(_padded(q, S, Sb), "q"), (k.contiguous(), "k"), (v.contiguous(), "v")]
        ins += [] if mask is None else [(mask.contiguous(), "attn_mask")]
        run(module("attention", args, build=_any_keys), ins, [out])
    return out if S == Sb else empty((B, H, S, Dv), q.dtype).copy_(out[:, :, :S])


def _any_keys(tpl, cfg, args: tuple, t) -> pt.Module:
    """``module``'s builder: the template with its keys' count a size bound at call
    (K's and V's rows, ``kv_len``), at most the workload's, which it computes."""
    a = tpl.named_args(args)
    bound = a["S"] if a["kv_len"] is None else a["kv_len"]
    a.update(kv_len=pt.var("kv_len"), kv_rows=bound)
    s, tensors = tpl.func(cfg, *a.values())
    return pt.build(s, tensors, target=t, name="attention")


def _built_as_is(shape: tuple, lengths: tuple) -> bool:
    """Whether a call of ``lengths`` is built as it is: the first ``AS_THEY_ARE`` lengths
    of its layer's ``shape`` are, and stay so; any others take buckets."""
    with _LOCK:
        seen = _SEEN.setdefault(shape, set())
        if len(seen) < AS_THEY_ARE:
            seen.add(lengths)
        return lengths in seen


def forget() -> None:
    """Forget the lengths built as they are (the next length of every shape is built
    so again)."""
    with _LOCK:
        _SEEN.clear()


def _padded(t: torch.Tensor, n: int, rows: int) -> torch.Tensor:
    """The first ``n`` rows of ``t`` (``[B, H, *, D]``) in a contiguous tensor of ``rows``
    rows, the rest zero (``t`` itself where it is that)."""
    B, H, _, D = t.shape
    if t.shape[2] == n == rows and t.is_contiguous():
        return t
    out = empty((B, H, rows, D), t.dtype)
    out[:, :, :n].copy_(t[:, :, :n])
    out[:, :, n:].zero_()
    return out
