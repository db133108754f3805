"""Attention masks (SDPA's ``attn_mask``): a tensor broadcast against the scores.

The template's ``mask`` argument names the mask's kind and which of the scores' dims
``[B, H, S, S_kv]`` it has (a letter) or broadcasts (``1``):

    "bool:b11k"   M[B, 1, 1, S_kv], bool: a key takes part where M is true
    "float:1hsk"  M[1, H, S, S_kv], of the scores' dtype: added to the scaled scores

    for b, h, i, j:                      for b, h, i, j:
      s[b, h, i, j] = scale * q.k   ->     s[b, h, i, j] = scale * q.k + M[b, 0, 0, j]
                                           (bool: M[b, 0, 0, j] ? scale * q.k : -inf)

A row whose keys are all masked out gets zeros, as PyTorch's: the row max is
clamped to a finite floor (``exp`` gives 0, not NaN) and a zero sum leaves the
output 0.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pypto as pt

LETTERS = "bhsk"  # the scores' dims, in order


class Mask(NamedTuple):
    tensor: pt.Tensor  # the placeholder, broadcast dims of extent 1
    kind: str  # "bool" or "float"
    dims: str  # per dim of the scores: its letter (the mask has it) or "1"

    def score(self, s, b, h, i, j):
        """The masked score ``s`` of query ``i`` and key ``j`` (head ``h``, batch ``b``)."""
        index = tuple(x if d != "1" else 0 for x, d in zip((b, h, i, j), self.dims))
        m = self.tensor[index]
        if self.kind == "bool":
            return pt.select(m, s, pt.const(-math.inf, s.dtype))
        return s + (m if m.dtype == s.dtype else pt.cast(s.dtype, m))  # bfloat16 M, float32 s

    def padded(self, keys: int, Sk, dtype: str) -> Mask | None:
        """The mask as a copy added to the scores (``"float"``, in ``dtype``) over
        ``keys`` keys, ``-inf`` past the ``Sk`` real ones (a constant or a size), where
        the queries share it (no ``s`` dim; else None): the scores of a row then read
        it as a vector, without a clamped index or a condition per key (the copy,
        ``MP``, is computed once per call, before the rows)::

            for b, j < keys: MP[b, 0, 0, j] = j < Sk && M[b, 0, 0, j] ? 0 : -inf
            ... s[b, h, i, j] = scale * q.k + MP[b, 0, 0, j]
        """
        if "s" in self.dims:
            return None
        M, c = self.tensor, lambda v: pt.const(v, dtype)  # noqa: E731
        shape = (*M.shape[:3], keys)
        k = self.dims[3] == "k"

        def entry(*at):
            m = M[(*at[:3], pt.min(at[3], Sk - 1) if k else 0)]
            if self.kind == "bool":
                return pt.select(m, c(0.0), c(-math.inf))
            return m if m.dtype == dtype else pt.cast(dtype, m)

        return Mask(
            pt.compute(
                shape, lambda *at: pt.select(at[3] < Sk, entry(*at), c(-math.inf)), name="MP"
            ),
            "float",
            self.dims[:3] + "k",
        )


def past_keys(keys: int, Sk, dtype: str) -> Mask:
    """The scores' padding as a mask added to them: 0 for the ``Sk`` keys (a constant
    or a size), ``-inf`` for the rest of ``keys``; one row, read as vectors (a
    condition per key in the row max and the exponentials cost a fifth: ViT's 197
    keys, B=1, H=12, D=64, one thread of a Zen 4, 2.1 -> 1.7 ms)::

        for j < keys: Pad[0, 0, 0, j] = j < Sk ? 0 : -inf
    """
    c = lambda v: pt.const(v, dtype)  # noqa: E731
    pad = pt.compute((1, 1, 1, keys), lambda *at: pt.select(at[3] < Sk, c(0.0), c(-math.inf)),
                     name="Pad")  # fmt: skip
    return Mask(pad, "float", "111k")


def parse(spec, dims: tuple, dtype: str) -> Mask | None:
    """The mask that ``spec`` (``"bool:b11k"``, or None) names for scores of ``dims``
    ``(B, H, S, S_kv)`` and ``dtype``; a clear error for anything else."""
    if spec is None:
        return None
    kind, _, which = str(spec).partition(":")
    ok = kind in ("bool", "float") and len(which) == 4
    if not ok or any(w not in (d, "1") for w, d in zip(which, LETTERS)):
        raise ValueError(
            f"attention: mask must be 'bool:' or 'float:' and, per dim of the scores "
            f"[B, H, S, S_kv], its letter (b, h, s, k) or 1 (broadcast), got {spec!r}"
        )
    shape = tuple(n if w != "1" else 1 for n, w in zip(dims, which))
    return Mask(pt.placeholder(shape, "bool" if kind == "bool" else dtype, name="M"), kind, which)


def spec_of(shape: tuple, dims: tuple, kind: str) -> str | None:
    """The ``mask`` argument of a mask of ``shape`` over scores of ``dims`` ``(B, H, S,
    S_kv)``, as PyTorch broadcasts it (leading dims of 1 added, each dim 1 or the
    scores'): ``"bool:b11k"``; None when it does not broadcast."""
    shape = (1,) * (4 - len(shape)) + tuple(int(n) for n in shape)
    if len(shape) != 4 or any(n not in (1, d) for n, d in zip(shape, dims)):
        return None
    which = "".join(w if n == d else "1" for n, d, w in zip(shape, dims, LETTERS))
    return f"{kind}:{which}"
