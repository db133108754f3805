"""Backward passes of ``pypto::attention`` and ``pypto::moe``: PyTorch's autograd of
their definitions, recomputed from the saved inputs (and their forward-mode tangents,
``attention_tangent`` and ``moe_tangent``, by the product rule). Correct, not fast (the forward
passes are pypto's kernels; these are for training through them, and let
``torch.compile`` trace a call whose inputs require grad, as every module's parameters
do)::

    attention:  P = softmax(q k^T * scale  [+ mask, causal])   (a row with no key: 0)
                out = P v                                      (k, v repeated for GQA)
    moe:        C[t, e] = sum of topk_weights[t, j] where topk_ids[t, j] = e
                out[t] = sum_e C[t, e] (silu(x[t] Wg_e^T) * (x[t] Wu_e^T)) Wd_e^T
                (dense over experts: every expert for every token)

16-bit inputs are computed in float32, the gradients rounded back to their dtype.

The backward operators of gelu, rms_norm, layer_norm and softmax are pypto kernels
too; their own derivatives (second derivatives of the row operators: a gradient
penalty, a Hessian-vector product) are PyTorch's, of their definitions
(``*_backward_definition``): the backward's backward as above, and under forward mode
the definition computed in place of the kernel (``register_autograd``'s
``definition``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _wide(t):
    return t.float() if t is not None and t.dtype in (torch.float16, torch.bfloat16) else t


def _gqa(t, heads: int):
    """Key or value heads repeated to the query's ``heads`` (grouped-query attention)."""
    return t if t is None or t.shape[1] == heads else t.repeat_interleave(heads // t.shape[1], 1)


def _probabilities(q, k, is_causal, scale, attn_mask):
    """``(P, scale)`` of attention: P the softmax of the masked, scaled scores, a row
    with no key left all zeros; k already repeated for GQA."""
    S, D = q.shape[2], q.shape[3]
    scale = scale if scale is not None else 1 / math.sqrt(D)
    scores = (q @ k.transpose(-2, -1)) * scale
    keep = None
    if is_causal:
        keep = torch.ones(S, k.shape[2], dtype=torch.bool, device=q.device).tril()
    elif attn_mask is not None and attn_mask.dtype == torch.bool:
        keep = attn_mask
    elif attn_mask is not None:
        scores = scores + attn_mask
    if keep is not None:
        scores = scores.masked_fill(~keep, -math.inf)
    valid = torch.isfinite(scores).any(-1, keepdim=True)
    return torch.softmax(torch.where(valid, scores, 0.0), -1) * valid, scale


def attention_definition(q, k, v, is_causal=False, scale=None, enable_gqa=False, attn_mask=None):
    """SDPA as pypto's attention computes it (a query with no key left gives zeros)."""
    H = q.shape[1]
    k, v = (_gqa(t, H) if enable_gqa else t for t in (k, v))
    return _probabilities(q, k, is_causal, scale, attn_mask)[0] @ v


def attention_tangent(inputs, out, dq, dk, dv, *rest):
    """``register_autograd``'s ``jvp`` of attention: with ``dS = (dq k^T + q dk^T)
    scale [+ dmask]``, ``dP = P (dS - rowsum(P dS))`` and ``dO = dP v + P dv``."""
    q, k, v, is_causal, scale, gqa, mask = (*inputs, *(None,) * (7 - len(inputs)))[:7]
    dmask = rest[3] if len(rest) > 3 else None
    H = q.shape[1]
    q, k, v, dq, dk, dv = (_wide(t) for t in (q, k, v, dq, dk, dv))
    k, v, dk, dv = (_gqa(t, H) if gqa else t for t in (k, v, dk, dv))
    p, scale = _probabilities(q, k, is_causal, scale, mask)
    ds = torch.zeros_like(p)
    if dq is not None:
        ds = ds + (dq @ k.transpose(-2, -1)) * scale
    if dk is not None:
        ds = ds + (q @ dk.transpose(-2, -1)) * scale
    if dmask is not None and mask is not None and mask.dtype != torch.bool:
        ds = ds + _wide(dmask)
    dp = p * (ds - (p * ds).sum(-1, keepdim=True))
    do = dp @ v + (p @ dv if dv is not None else 0)
    return do.to(out.dtype)


def _combine(x, n_experts: int, topk_weights, topk_ids):
    """``C[t, e]``: token t's weight of expert e."""
    return x.new_zeros(x.shape[0], n_experts).scatter_add(1, topk_ids, topk_weights)


def _routed(topk_ids, *weights) -> tuple:
    """The expert ``weights`` with those of the experts no token is routed to set to 0:
    the dense composition multiplies their outputs by a weight of 0, and 0 * inf (an
    unused expert's weights or activations, which the kernel never reads) would make
    the derivatives NaN. Their gradients are 0, as they are."""
    E = weights[0].shape[0]
    ids = topk_ids.reshape(-1)
    used = ids.new_zeros(E).scatter_add(0, ids, torch.ones_like(ids)) > 0
    return tuple(torch.where(used[:, None, None], w, 0) for w in weights)


def moe_definition(x, w_gate, w_up, w_down, topk_weights, topk_ids):
    """The mixture as one dense composition over the experts (those routed to)."""
    w_gate, w_up, w_down = _routed(topk_ids, w_gate, w_up, w_down)
    comb = _combine(x, w_gate.shape[0], topk_weights, topk_ids)
    h = F.silu(torch.einsum("td,efd->tef", x, w_gate)) * torch.einsum("td,efd->tef", x, w_up)
    return torch.einsum("te,ted->td", comb, torch.einsum("tef,edf->ted", h, w_down))


def moe_tangent(inputs, out, dx, dwg, dwu, dwd, dtw, *_):
    """``register_autograd``'s ``jvp`` of moe, by the product rule over its definition:
    ``a = x Wg^T``, ``b = x Wu^T``, ``h = silu(a) b``, ``y = h Wd^T``, ``out = C y``."""
    x, wg, wu, wd, tw, ti = inputs
    x, wg, wu, wd, tw, dx, dwg, dwu, dwd, dtw = (
        _wide(t) for t in (x, wg, wu, wd, tw, dx, dwg, dwu, dwd, dtw)
    )
    wg, wu, wd = _routed(ti, wg, wu, wd)

    def lin(a, w, da, dw, eq):  # d(a w) for the einsum eq
        d = torch.einsum(eq, da, w) if da is not None else 0
        return d + (torch.einsum(eq, a, dw) if dw is not None else 0)

    a, b = torch.einsum("td,efd->tef", x, wg), torch.einsum("td,efd->tef", x, wu)
    da, db = lin(x, wg, dx, dwg, "td,efd->tef"), lin(x, wu, dx, dwu, "td,efd->tef")
    sig = torch.sigmoid(a)
    h = a * sig * b
    dh = sig * (1 + a * (1 - sig)) * da * b + a * sig * db
    y = torch.einsum("tef,edf->ted", h, wd)
    dy = lin(h, wd, dh, dwd, "tef,edf->ted")
    comb = _combine(x, wg.shape[0], tw, ti)
    dout = torch.einsum("te,ted->td", comb, dy) if torch.is_tensor(dy) else torch.zeros_like(x)
    if dtw is not None:
        dout = dout + torch.einsum("te,ted->td", _combine(x, wg.shape[0], dtw, ti), y)
    return dout.to(out.dtype)


def gelu_backward_definition(x, dy, approximate="none"):
    """``gelu'(x) dy``: ``Phi(x) + x phi(x)``, or the derivative of the tanh form."""
    x32 = _wide(x)
    if approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        t = torch.tanh(k * (x32 + c * x32**3))
        d = 0.5 * (1 + t) + 0.5 * x32 * (1 - t * t) * k * (1 + 3 * c * x32 * x32)
    else:
        cdf = 0.5 * (1 + torch.erf(x32 * math.sqrt(0.5)))
        d = cdf + x32 * torch.exp(-0.5 * x32 * x32) / math.sqrt(2 * math.pi)
    return (d * _wide(dy)).to(x.dtype)


def _row_sums(t, groups: int, dtype):
    """Column sums over the rows of ``t`` (its dims before the last), per group of
    ``rows / groups`` consecutive rows with ``groups``."""
    if groups == 1:
        return t.sum(tuple(range(t.dim() - 1))).to(dtype)
    return t.reshape(groups, -1, t.shape[-1]).sum(1).to(dtype)


def rms_norm_backward_definition(x, weight, dy, eps, groups=1):
    """``r = rsqrt(mean(x^2) + eps)``: ``dx = r w dy - x r^3 mean(w dy x)``,
    ``dw = sum_rows dy x r``."""
    x32, w, dy32 = _wide(x), _wide(weight), _wide(dy)
    r = torch.rsqrt((x32 * x32).mean(-1, keepdim=True) + eps)
    g = dy32 * w
    dx = r * g - x32 * r**3 * (g * x32).mean(-1, keepdim=True)
    return dx.to(x.dtype), _row_sums(dy32 * x32 * r, groups, weight.dtype)


def layer_norm_backward_definition(x, weight, dy, eps, groups=1):
    """``xh = (x - mean) rstd``, ``g = dy w``: ``dx = rstd (g - mean(g) - xh mean(g
    xh))``, ``dw = sum_rows dy xh``, ``db = sum_rows dy``."""
    x32, w, dy32 = _wide(x), _wide(weight), _wide(dy)
    mu = x32.mean(-1, keepdim=True)
    rstd = torch.rsqrt(((x32 - mu) ** 2).mean(-1, keepdim=True) + eps)
    xh, g = (x32 - mu) * rstd, dy32 * w
    dx = rstd * (g - g.mean(-1, keepdim=True) - xh * (g * xh).mean(-1, keepdim=True))
    sums = (_row_sums(t, groups, weight.dtype) for t in (dy32 * xh, dy32))
    return dx.to(x.dtype), *sums


def softmax_backward_definition(y, dy, dim):
    """``y (dy - sum(dy y))`` along ``dim``, from softmax's output ``y``."""
    y32, dy32 = _wide(y), _wide(dy)
    return (y32 * (dy32 - (dy32 * y32).sum(dim, keepdim=True))).to(y.dtype)


def _backward(definition, n_tensors: int):
    """``register_autograd``'s pair: save the inputs; recompute ``definition`` with grad
    from them and differentiate it."""

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*(t for t in inputs if isinstance(t, torch.Tensor)))
        ctx.rest = tuple(t for t in inputs if not isinstance(t, torch.Tensor))
        ctx.kinds = tuple(isinstance(t, torch.Tensor) for t in inputs)

    def backward(ctx, *douts):
        saved, rest = iter(ctx.saved_tensors), iter(ctx.rest)
        args = [next(saved) if kind else next(rest) for kind in ctx.kinds]
        flags = ctx.needs_input_grad  # (the inputs given: the defaults are not among them)
        wanted = [k for k in range(min(n_tensors, len(flags))) if flags[k]]
        # torch.func.vjp, not requires_grad_ and autograd.grad: it holds inside
        # transforms (jacrev's vmap over this backward), and with gradients enabled
        # here (create_graph, torch.func.grad) the gradients keep their graph to the
        # saved inputs, so a second derivative holds
        wide = [_wide(a) if isinstance(a, torch.Tensor) else a for a in args]

        def of_wanted(*ts):
            full = list(wide)
            for k, t in zip(wanted, ts):
                full[k] = t
            return definition(*full)

        _, pullback = torch.func.vjp(of_wanted, *(wide[k] for k in wanted))
        grads = pullback(_wide(douts[0]) if len(douts) == 1 else tuple(map(_wide, douts)))
        result = [None] * len(args)
        for k, g in zip(wanted, grads):
            result[k] = g.to(args[k].dtype)
        return tuple(result)

    return setup, backward
