"""Backward passes of ``pypto::attention`` and ``pypto::moe``: PyTorch's autograd of
their definitions, recomputed from the saved inputs. Correct, not fast (the forward
passes are pypto's kernels; these are for training through them, and let
``torch.compile`` trace a call whose inputs require grad, as every module's parameters
do)::

    attention:  P = softmax(q k^T * scale  [+ mask, causal])   (a row with no key: 0)
                out = P v                                      (k, v repeated for GQA)
    moe:        C[t, e] = sum of topk_weights[t, j] where topk_ids[t, j] = e
                out[t] = sum_e C[t, e] (silu(x[t] Wg_e^T) * (x[t] Wu_e^T)) Wd_e^T
                (dense over experts: every expert for every token)

16-bit inputs are computed in float32, the gradients rounded back to their dtype.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _wide(t):
    return t.float() if t is not None and t.dtype in (torch.float16, torch.bfloat16) else t


def attention_definition(q, k, v, is_causal=False, scale=None, enable_gqa=False, attn_mask=None):
    """SDPA as pypto's attention computes it (a query with no key left gives zeros)."""
    H, S, D = q.shape[1], q.shape[2], q.shape[3]
    if enable_gqa and k.shape[1] != H:
        k = k.repeat_interleave(H // k.shape[1], dim=1)
        v = v.repeat_interleave(H // v.shape[1], dim=1)
    scores = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1 / math.sqrt(D))
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
    p = torch.softmax(torch.where(valid, scores, 0.0), -1) * valid
    return p @ v


def moe_definition(x, w_gate, w_up, w_down, topk_weights, topk_ids):
    """The mixture as one dense composition over the experts."""
    comb = x.new_zeros(x.shape[0], w_gate.shape[0]).scatter_add(1, topk_ids, topk_weights)
    h = F.silu(torch.einsum("td,efd->tef", x, w_gate)) * torch.einsum("td,efd->tef", x, w_up)
    return torch.einsum("te,ted->td", comb, torch.einsum("tef,edf->ted", h, w_down))


def _backward(definition, n_tensors: int):
    """``register_autograd``'s pair: save the inputs; recompute ``definition`` with grad
    from them and differentiate it."""

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*(t for t in inputs if isinstance(t, torch.Tensor)))
        ctx.rest = tuple(t for t in inputs if not isinstance(t, torch.Tensor))
        ctx.kinds = tuple(isinstance(t, torch.Tensor) for t in inputs)

    def backward(ctx, dout):
        saved, rest = iter(ctx.saved_tensors), iter(ctx.rest)
        args = [next(saved) if kind else next(rest) for kind in ctx.kinds]
        wanted = [k for k, a in enumerate(args[:n_tensors]) if ctx.needs_input_grad[k]]
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
        grads = pullback(_wide(dout))
        result = [None] * len(args)
        for k, g in zip(wanted, grads):
            result[k] = g.to(args[k].dtype)
        return tuple(result)

    return setup, backward
