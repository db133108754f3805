"""Attention's decode steps at any number of keys: one module per layer shape.

A decoder calls attention once per generated token, with one more key each time.
Built per shape, every step would build a module of its own (0.25-0.45 s on a Zen 4,
the kernel itself taking a millisecond). Here the decode form (``attention_decode``)
is built with the number of keys a size bound at each call, ``pt.var("kv_len")``: one
module serves every length, with the config chosen for ``NOMINAL_KEYS`` keys (the
records' or the default's form and knobs)::

    attention(q [1, 32, 1, 128], k [1, 8, L, 128], v, enable_gqa=True)   L = 100, 101, ..
        -> the decode module of (1, 32, 1, 128, kv_heads 8), kv_len = L at each call

The row max and sum over the keys take vector partials over the whole chunks of keys
and the last few keys after them (``attention_rows``). Only calls without
``is_causal`` and without a mask take it, and only where that config takes the decode
form (a record may choose ``attention_amx``'s tiles); the others are built per shape.
"""

from __future__ import annotations

import math

import pypto as pt
from pypto.torch import empty, run

from .templates import attention_decode
from .templates.attention import sdpa_parts
from .templates.attention_flash import kv_head
from .torch_call import module

NOMINAL_KEYS = 1024  # the key count whose config the any-length module takes


def decode_module(B: int, H: int, S: int, D: int, Hk: int, Dv: int, scale, dtype: str):
    """The module computing SDPA of q ``[B, H, S, D]``, k ``[B, Hk, L, D]``, v ``[B,
    Hk, L, Dv]`` for any ``L >= 1`` (non-causal, no mask), or None where the config
    for ``NOMINAL_KEYS`` keys is not the decode form."""
    if S > attention_decode.DECODE_QUERIES:
        return None
    ((_, _, args),) = sdpa_parts(B, H, S, D, Hk, NOMINAL_KEYS, Dv, False, scale, dtype)
    got = module("attention", args, build=_any_length)
    return got or None


def decode_step(q, k, v, scale, dtype: str):
    """SDPA of q, k, v (``[B, H, S, D]``, ``[B, Hk, L, D]``, ``[B, Hk, L, Dv]``, checked;
    non-causal, no mask) by ``decode_module``, or None where it does not serve."""
    B, H, S, D = q.shape
    mod = decode_module(B, H, S, D, k.shape[1], v.shape[3], scale, dtype)
    if mod is None:
        return None
    out = empty((B, H, S, v.shape[3]), q.dtype)
    run(mod, [(t.contiguous(), n) for t, n in ((q, "q"), (k, "k"), (v, "v"))], [out])
    return out


def _any_length(tpl, cfg, args: tuple, target) -> pt.Module | bool:
    """``module``'s builder: the decode form with ``kv_len`` a size; False (cached: not
    asked again) where ``cfg`` takes another form."""
    if not attention_decode.chosen(cfg):
        return False
    a = tpl.named_args(args)
    B, H, S, D, scale, dtype = (a[n] for n in ("B", "H", "S", "D", "scale", "dtype"))
    Dv = D if a["dv"] is None else a["dv"]
    Hk = H if a["kv_heads"] is None else a["kv_heads"]
    keys = pt.var("kv_len")
    Q = pt.placeholder((B, H, S, D), dtype, name="Q")
    K = pt.placeholder((B, Hk, keys, D), dtype, name="K")
    V = pt.placeholder((B, Hk, keys, Dv), dtype, name="V")
    cdt = "float32" if dtype in attention_decode.WIDENED else dtype
    sc = 1.0 / math.sqrt(D) if scale is None else float(scale)
    dims = (B, H, S, D, keys, Dv, Hk)
    s, out = attention_decode.decode_attention(
        cfg, Q, K, V, dims, False, sc, cdt, None, kv_head(H, Hk)
    )
    return pt.build(s, [Q, K, V, out], target=target, name="attention_decode")
