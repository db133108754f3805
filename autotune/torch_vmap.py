"""Batching rules of pypto's operators for ``torch.func.vmap``: one kernel call
over the whole batch instead of PyTorch's fallback (a call per batch element, with a
warning). Each rule moves the batch dimension first, where the operator's rows are:

    vmap(rms_norm)(x [B, ..., C], w [C])  ->  rms_norm(x, w)              (one call)
    vmap(rms_norm)(x, w [B, C])           ->  rms_norm(x, 1) * w[:, None.., :]
    vmap(softmax, dim=d)(x [B, ...])      ->  softmax(x, d + 1)

(a weight or bias with its own batch dimension scales the normalized rows instead of
being the kernel's own vector). The backward operators have rules too (``jacrev`` and
``vmap(grad(...))`` batch the backward; the norms' weight gradients are summed per
element by the kernel, ``_norm_backward``). ``attention`` folds the batch into its
own batch dimension, ``moe`` into its tokens (one call, where the experts' weights are
shared).
"""

from __future__ import annotations

import math

import torch

from .templates.norm_grad import check_groups
from .torch_call import check_dim

ops = torch.ops.pypto


def _first(t: torch.Tensor, dim: int | None, size: int) -> torch.Tensor:
    """``t`` with its batch dimension ``dim`` first (expanded to ``size`` if it has none)."""
    return t.movedim(dim, 0) if dim is not None else t.expand(size, *t.shape)


def _gelu(info, in_dims, x, approximate="none"):
    return ops.gelu(x, approximate), in_dims[0]  # elementwise: any layout


def _gelu_backward(info, in_dims, x, dy, approximate="none"):
    n = info.batch_size
    return ops.gelu_backward(_first(x, in_dims[0], n), _first(dy, in_dims[1], n), approximate), 0


_HALF = (torch.bfloat16, torch.float16)


def _check_vectors(name: str, x: torch.Tensor, vectors) -> tuple:
    """The operator's checks of its weight (and bias) ``(tensor, batch dim)`` against
    ``x`` batched first (of x's dtype, or float32 beside 16-bit x, as the operator
    takes them); returns ``(the shape that broadcasts a batched vector over x, the
    vectors' dtype)``."""
    if x.dim() < 2:
        raise ValueError(f"{name}: x is 0-d; it needs a last dimension to normalize")
    vdt = vectors[0][0].dtype
    if not (vdt == torch.float32 and x.dtype in _HALF):
        vdt = x.dtype
    for v, d in vectors:
        one = v if d is None else v.movedim(d, 0)[0]  # one element's vector
        cols = one.shape[0] if one.dim() == 1 else None
        if cols != x.shape[-1]:
            raise ValueError(f"{name}: a vector of shape {tuple(v.shape)} (batch dim {d}) for "
                             f"rows of {x.shape[-1]}")  # fmt: skip
        if v.dtype != vdt:
            raise TypeError(f"{name}: dtype {v.dtype} differs from x's ({x.dtype})")
    return (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],), vdt


def _rows_scaled(info, name, x, x_dim, vectors, norm):
    """``norm(x, *vectors)`` on ``x`` batched first, the vectors ``(tensor, batch dim)``:
    unbatched, the kernel's own; batched, applied to the rows it normalized with the
    identity vectors (``norm``'s weight 1, bias 0), after the operator's own checks;
    float32 vectors beside 16-bit x: x widened, the result rounded once."""
    x = _first(x, x_dim, info.batch_size)
    if all(d is None for _, d in vectors):
        return norm(x, *(v for v, _ in vectors)), 0
    shape, vdt = _check_vectors(name, x, vectors)
    one = torch.ones(x.shape[-1], dtype=vdt)
    y = norm(x.to(vdt), one, *(torch.zeros_like(one) for _ in vectors[1:]))
    w = _first(vectors[0][0], vectors[0][1], info.batch_size).reshape(shape)
    y = y * w
    if len(vectors) > 1:
        y = y + _first(vectors[1][0], vectors[1][1], info.batch_size).reshape(shape)
    return y.to(x.dtype), 0


def _rms_norm(info, in_dims, x, weight, eps=1e-6):
    norm = lambda t, w: ops.rms_norm(t, w, eps)  # noqa: E731
    return _rows_scaled(info, "rms_norm", x, in_dims[0], [(weight, in_dims[1])], norm)


def _layer_norm(info, in_dims, x, weight, bias, eps=1e-5):
    norm = lambda t, w, b: ops.layer_norm(t, w, b, eps)  # noqa: E731
    vectors = [(weight, in_dims[1]), (bias, in_dims[2])]
    return _rows_scaled(info, "layer_norm", x, in_dims[0], vectors, norm)


def _norm_backward(info, in_dims, x, weight, dy, eps, groups=1, *, centred: bool):
    """``rms_norm_backward`` (``layer_norm_backward``: ``centred``) over a batch, the
    weight's (and bias's) gradient per element of it (per group of its rows: the
    operator's ``groups``) by the kernel's own ``groups``. One kernel call where the
    weight is shared; a batched weight, on which dx depends only through
    ``weight * dy``, is folded into dy for dx, and the sums, which do not depend on it,
    come from a second call given ones::

        dx, dw[b], db[b]  = kernel(x, w, dy, groups=B)            (dw: sums of dy * xhat)
        (a batched w:) dx = kernel(x, 1, w[b] * dy).dx;  dw, db = kernel(x, 1, dy, groups=B)
    """
    name = "layer_norm_backward" if centred else "rms_norm_backward"
    op = getattr(ops, name)
    n = info.batch_size
    x, dy = _first(x, in_dims[0], n), _first(dy, in_dims[2], n)
    per = (n, groups) if groups > 1 else (n,)
    if n == 0:  # an empty batch: nothing to sum
        check_groups(name, math.prod(x.shape[1:-1]), groups)
        w = weight if in_dims[1] is None else weight.movedim(in_dims[1], 0)[0]
        sums = [w.new_zeros(*per, *w.shape) for _ in range(1 + centred)]
        return (torch.empty_like(x), *sums), (0,) * (1 + len(sums))
    total = n * groups  # each element's groups, the elements' rows one after another
    if in_dims[1] is None:
        dx, *sums = op(x, weight, dy, eps, total)
    else:  # (a float32 weight beside 16-bit x: x and dy widened, dx rounded once)
        shape, vdt = _check_vectors(name, x, [(weight, in_dims[1])])
        w = _first(weight, in_dims[1], n).reshape(shape)
        one = torch.ones(x.shape[-1], dtype=vdt)
        dx = op(x.to(vdt), one, dy.to(vdt) * w, eps)[0].to(x.dtype)
        sums = [t.to(weight.dtype) for t in op(x, one, dy, eps, total)[1:]]
    sums = [t.reshape(*per, t.shape[-1]) for t in sums]
    return (dx, *sums), (0,) * (1 + len(sums))


def _softmax(info, in_dims, x, dim=-1):
    x = _first(x, in_dims[0], info.batch_size)
    rank = x.dim() - 1  # of one element of the batch
    check_dim("softmax", dim, rank)
    if rank == 0:  # each element a 0-d tensor: a softmax over one value
        return ops.softmax(x.unsqueeze(-1), -1).squeeze(-1), 0
    return ops.softmax(x, dim % rank + 1), 0


def _softmax_backward(info, in_dims, y, dy, dim):
    y, dy = _first(y, in_dims[0], info.batch_size), _first(dy, in_dims[1], info.batch_size)
    rank = y.dim() - 1
    check_dim("softmax_backward", dim, rank)
    if rank == 0:
        return ops.softmax_backward(y.unsqueeze(-1), dy.unsqueeze(-1), -1).squeeze(-1), 0
    return ops.softmax_backward(y, dy, dim % rank + 1), 0


def _each(info, in_dims, op, args):
    """``op`` per element of the batch, stacked (the operator's own checks and errors)."""
    n = info.batch_size
    firsts = [_first(a, d, n) if d is not None else a for a, d in zip(args, in_dims)]
    outs = [op(*(a[i] if d is not None else a for a, d in zip(firsts, in_dims))) for i in range(n)]
    return torch.stack(outs), 0


def _fold(t: torch.Tensor) -> torch.Tensor:
    """``[n, B, ...]`` as ``[n * B, ...]``."""
    return t.reshape(t.shape[0] * t.shape[1], *t.shape[2:])


def _attention(info, in_dims, q, k, v, is_causal=False, scale=None, enable_gqa=False,
               attn_mask=None):  # fmt: skip
    """The batch folded into the operator's own batch dimension: one call. A mask is
    given that dimension explicitly first (an unbatched one of batch 1 broadcasts)."""
    n = info.batch_size

    def op(q, k, v, m):
        return ops.attention(q, k, v, is_causal, scale, enable_gqa, m)

    qkv = [_first(t, d, n) for t, d in zip((q, k, v), in_dims[:3])]
    mask, md = attn_mask, (in_dims[6] if len(in_dims) > 6 else None)  # (defaults: no dims)
    if any(t.dim() != 5 for t in qkv) or (mask is not None and mask.dim() - (md is not None) > 4):
        return _each(info, (*in_dims[:3], md), op, (q, k, v, mask))  # the operator's errors
    B = qkv[0].shape[1]
    if mask is not None:
        m = mask.movedim(md, 0) if md is not None else mask.unsqueeze(0)
        m = m.reshape(m.shape[0], *(1,) * (5 - m.dim()), *m.shape[1:])  # [n or 1, b, h, s, sk]
        if md is not None or m.shape[1] != 1:
            mask = _fold(m.expand(n, B, *m.shape[2:]))
        else:  # one mask for every element and every batch: broadcast as it is
            mask = m[0]
    out = op(*(_fold(t) for t in qkv), mask)
    return out.reshape(n, B, *out.shape[1:]), 0


def _moe(info, in_dims, x, w_gate, w_up, w_down, topk_weights, topk_ids):
    """A batch of token sets with shared experts: the tokens of all elements in one
    call (the experts' weights packed once); batched expert weights: one call each."""
    n, args = info.batch_size, (x, w_gate, w_up, w_down, topk_weights, topk_ids)
    tok = [_first(args[k], in_dims[k], n) for k in (0, 4, 5)]
    if any(d is not None for d in in_dims[1:4]) or any(t.dim() != 3 for t in tok):
        return _each(info, in_dims, ops.moe, args)
    x, tw, ti = tok
    T = x.shape[1]
    out = ops.moe(_fold(x), w_gate, w_up, w_down, _fold(tw), _fold(ti))
    return out.reshape(n, T, *out.shape[1:]), 0


RULES = {
    "gelu": _gelu,
    "rms_norm": _rms_norm,
    "layer_norm": _layer_norm,
    "softmax": _softmax,
    "attention": _attention,
    "moe": _moe,
    "gelu_backward": _gelu_backward,
    "rms_norm_backward": lambda info, d, *a: _norm_backward(info, d, *a, centred=False),
    "layer_norm_backward": lambda info, d, *a: _norm_backward(info, d, *a, centred=True),
    "softmax_backward": _softmax_backward,
}


def register() -> None:
    """Register the rules with ``torch.library.register_vmap``."""
    for name, rule in RULES.items():
        torch.library.register_vmap(f"pypto::{name}", rule)
