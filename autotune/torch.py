"""pypto kernels as PyTorch operators: ``import autotune.torch`` registers ``torch.ops.pypto.*``.

    import torch, autotune.torch
    y = torch.ops.pypto.rms_norm(x, w, 1e-6)           # also gelu, layer_norm, softmax,
    o = torch.ops.pypto.attention(q, k, v, True, None)  # attention, moe
    torch.compile(model, fullgraph=True)               # fake kernels: no graph breaks

Each call runs its template (``autotune/templates``) with the best recorded
config for its shape on the host target: the records of an enclosing
``at.apply_history_best(...)``, else the shipped ones (``tuning_logs/``), else
the template's default config. Modules are built once per (operator, shape,
dtype, arguments) and cached. gelu, rms_norm, layer_norm and softmax have
backward passes (their ``*_backward`` templates, also pypto kernels), whose own
derivatives (second derivatives) are PyTorch's autograd of their definitions.

Tensors: CPU, float32 or float64, and for gelu, rms_norm, layer_norm and softmax
(forward and backward) also bfloat16 and float16, stored in 16 bits and computed in
float32, each result rounded once (float32 runs the tuned float32 templates, the
other dtypes the dtype-generic ones; rms_norm's and layer_norm's weight and bias
may be float32 beside 16-bit x, as under ``torch.autocast``); attention multiplies
bfloat16 on the target's bfloat16 dot instructions (AMX's tiles, ``vdpbf16ps``) where
it has them and computes other 16-bit inputs in float32 (one copy each), moe takes
bfloat16 (its GEMMs on the BF16 dot kernels where the target has them) and float16
(computed in float32, the weights widened once).
Tensors are passed zero-copy; non-contiguous inputs are copied to contiguous ones
first. Other dtypes and devices raise ``TypeError`` /
``ValueError`` naming the argument. Outputs of 1 MiB and more come from
``pypto.torch.empty``'s pool of recycled buffers (no page faults per call).
"""

from __future__ import annotations

import torch

from pypto.torch import dtype_name, empty, fake_kernel, register_autograd

from . import torch_vmap
from .templates.attention import sdpa_parts
from .templates.attention_amx import tile_isa
from .templates.attention_decode import DECODE_QUERIES, WIDENED
from .templates.attention_mask import spec_of
from .templates.norm_grad import check_groups
from .torch_call import (
    ROW_DTYPES,
    call,
    check_dim,
    check_finite,
    check_like,
    flat,
    module,
    norm_params,
    planned_op,
    rows_cols,
    run_in_autocast_dtype,
    sdpa_mask,
    target_of,
)
from .torch_decode import decode_step
from .torch_grad import (
    _backward,
    attention_definition,
    attention_tangent,
    gelu_backward_definition,
    layer_norm_backward_definition,
    moe_definition,
    moe_tangent,
    rms_norm_backward_definition,
    softmax_backward_definition,
)
from .torch_moe import moe, release_packed_weights  # noqa: F401  (public here)
from .torch_prefill import prefill_step

ops = torch.ops.pypto

# ---------------------------------------------------------------- gelu


@torch.library.custom_op("pypto::gelu", mutates_args=())
@planned_op
def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU (``approximate``: ``"none"``, the erf form, or ``"tanh"``), as ``F.gelu``."""
    dt = dtype_name(x, "gelu: x", allowed=ROW_DTYPES)
    rows, cols = rows_cols(x)
    args = (rows, cols, approximate, dt)
    (y,) = call(
        "gelu", args, [(flat(x, rows, cols), "x")], [(rows, cols)], dt, [x.shape], rows=True
    )
    return y


@gelu.register_fake
@fake_kernel("pypto::gelu")
def _(x, approximate="none"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("pypto::gelu_backward", mutates_args=())
@planned_op
def gelu_backward(x: torch.Tensor, dy: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    dt = dtype_name(x, "gelu_backward: x", allowed=ROW_DTYPES)
    check_like(dy, x, "gelu_backward: dy", "x")
    rows, cols = rows_cols(x)
    ins = [(flat(x, rows, cols), "x"), (flat(dy, rows, cols), "dy")]
    args = (rows, cols, approximate, dt)
    (dx,) = call("gelu_backward", args, ins, [(rows, cols)], dt, [x.shape], rows=True)
    return dx


@gelu_backward.register_fake
@fake_kernel("pypto::gelu_backward")
def _(x, dy, approximate="none"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _gelu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.approximate = inputs[1]


def _gelu_bwd(ctx, dy):
    (x,) = ctx.saved_tensors
    return torch.ops.pypto.gelu_backward(x, dy, ctx.approximate), None


def _gelu_jvp(inputs, out, tx, *_):  # gelu'(x) tx, as the backward's gelu'(x) dy
    return ops.gelu_backward(inputs[0], tx, inputs[1])


register_autograd(gelu, _gelu_bwd, setup_context=_gelu_setup, jvp=_gelu_jvp)

# ---------------------------------------------------------------- rms_norm


def _norm_args(tuned: str, generic: str, rows, cols, eps, dt, wdt):
    """float32: the tuned template; the other dtypes: the dtype-generic one (``module``
    names the workload without its trailing defaults, as the shipped records do), with
    a float32 weight beside 16-bit x as ``weight_dtype``."""
    if dt == "float32":
        return tuned, (rows, cols, eps)
    return generic, (rows, cols, eps, dt) + ((wdt,) if wdt != dt else ())


@torch.library.custom_op("pypto::rms_norm", mutates_args=())
@planned_op
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x * rsqrt(mean(x^2, -1) + eps) * weight`` over the last dim."""
    dt = dtype_name(x, "rms_norm: x", allowed=ROW_DTYPES)
    check_finite("rms_norm: eps", eps)
    if x.dim() == 0:  # as PyTorch: a norm is over a last dimension
        raise ValueError("rms_norm: x is 0-d; it needs a last dimension to normalize")
    rows, cols = rows_cols(x)
    wdt = norm_params(dt, "rms_norm", cols, weight)
    name, args = _norm_args("rmsnorm", "rmsnorm_fwd", rows, cols, eps, dt, wdt)
    ins = [(flat(x, rows, cols), "x"), (weight, "weight")]
    (y,) = call(name, args, ins, [(rows, cols)], dt, [x.shape], rows=True)
    return y


@rms_norm.register_fake
@fake_kernel("pypto::rms_norm")
def _(x, weight, eps=1e-6):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _grad_args(name: str, rows: int, cols: int, eps, dt: str, wdt: str, groups: int):
    """A norm backward's template arguments, ``groups`` checked (``ValueError``), and
    the shape of its weight's gradient (per group of rows with ``groups``)."""
    check_groups(name, rows, groups)
    args = (rows, cols, eps, dt) + ((wdt,) if wdt != dt else ())
    if groups == 1:
        return args, (cols,)
    return args[:4] + (args[4:] or (None,)) + (groups,), (groups, cols)


def _grouped_like(weight: torch.Tensor, groups: int) -> torch.Tensor:
    return torch.empty_like(weight) if groups == 1 else weight.new_empty(groups, *weight.shape)


@torch.library.custom_op("pypto::rms_norm_backward", mutates_args=())
@planned_op
def rms_norm_backward(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float, groups: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """dx and dw of rms_norm (dw per group of ``rows / groups`` consecutive rows of x
    taken as rows x last dim, ``groups`` x cols: per-sample weight gradients)."""
    dt = dtype_name(x, "rms_norm_backward: x", allowed=ROW_DTYPES)
    check_like(dy, x, "rms_norm_backward: dy", "x")
    rows, cols = rows_cols(x)
    wdt = norm_params(dt, "rms_norm_backward", cols, weight)
    ins = [(flat(x, rows, cols), "x"), (weight, "weight"), (flat(dy, rows, cols), "dy")]
    args, dw_shape = _grad_args("rms_norm_backward", rows, cols, eps, dt, wdt, groups)
    shapes = [(rows, cols), dw_shape]
    return tuple(call("rmsnorm_backward", args, ins, shapes, (dt, wdt), [x.shape]))


@rms_norm_backward.register_fake
@fake_kernel("pypto::rms_norm_backward")
def _(x, weight, dy, eps, groups=1):
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    return dx, _grouped_like(weight, groups)


def _save_x_w(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.eps = inputs[-1]


def _rms_bwd(ctx, dy):
    x, w = ctx.saved_tensors
    dx, dw = torch.ops.pypto.rms_norm_backward(x, w, dy, ctx.eps)
    return dx, dw, None


def _norm_jvp(norm, backward, inputs, out, tx, *vector_tangents):
    """A norm's tangent: ``w * N'(x) tx + norm(x, tw[, tb])``. The Jacobian N'(x) of
    the normalized rows is symmetric, so it is the backward's dx with weight 1."""
    x, vectors, eps = inputs[0], inputs[1:-1], inputs[-1]
    t = torch.zeros_like(out)
    if tx is not None:
        t = t + backward(x, torch.ones_like(vectors[0]), tx, eps)[0] * vectors[0]
    tv = vector_tangents[: len(vectors)]
    if any(v is not None for v in tv):
        t = t + norm(
            x, *(torch.zeros_like(v) if d is None else d for v, d in zip(vectors, tv)), eps
        )
    return t.to(out.dtype)


def _rms_jvp(inputs, out, *tangents):
    return _norm_jvp(ops.rms_norm, ops.rms_norm_backward, inputs, out, *tangents)


register_autograd(rms_norm, _rms_bwd, setup_context=_save_x_w, jvp=_rms_jvp)

# ---------------------------------------------------------------- layer_norm


@torch.library.custom_op("pypto::layer_norm", mutates_args=())
@planned_op
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    """``(x - mean) * rsqrt(var + eps) * weight + bias`` over the last dim (biased var)."""
    dt = dtype_name(x, "layer_norm: x", allowed=ROW_DTYPES)
    check_finite("layer_norm: eps", eps)
    if x.dim() == 0:  # as PyTorch: a norm is over a last dimension
        raise ValueError("layer_norm: x is 0-d; it needs a last dimension to normalize")
    rows, cols = rows_cols(x)
    wdt = norm_params(dt, "layer_norm", cols, weight, bias)
    name, args = _norm_args("layernorm", "layernorm_fwd", rows, cols, eps, dt, wdt)
    ins = [(flat(x, rows, cols), "x"), (weight, "weight"), (bias, "bias")]
    (y,) = call(name, args, ins, [(rows, cols)], dt, [x.shape], rows=True)
    return y


@layer_norm.register_fake
@fake_kernel("pypto::layer_norm")
def _(x, weight, bias, eps=1e-5):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("pypto::layer_norm_backward", mutates_args=())
@planned_op
def layer_norm_backward(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float, groups: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, dw and db of layer_norm (dw and db per group of rows, as rms_norm_backward's)."""
    dt = dtype_name(x, "layer_norm_backward: x", allowed=ROW_DTYPES)
    check_like(dy, x, "layer_norm_backward: dy", "x")
    rows, cols = rows_cols(x)
    wdt = norm_params(dt, "layer_norm_backward", cols, weight)
    ins = [(flat(x, rows, cols), "x"), (weight, "weight"), (flat(dy, rows, cols), "dy")]
    args, dw_shape = _grad_args("layer_norm_backward", rows, cols, eps, dt, wdt, groups)
    shapes = [(rows, cols), dw_shape, dw_shape]
    return tuple(call("layernorm_backward", args, ins, shapes, (dt, wdt, wdt), [x.shape]))


@layer_norm_backward.register_fake
@fake_kernel("pypto::layer_norm_backward")
def _(x, weight, dy, eps, groups=1):
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    return dx, _grouped_like(weight, groups), _grouped_like(weight, groups)


def _ln_bwd(ctx, dy):
    x, w = ctx.saved_tensors
    dx, dw, db = torch.ops.pypto.layer_norm_backward(x, w, dy, ctx.eps)
    return dx, dw, db, None


def _ln_jvp(inputs, out, *tangents):
    return _norm_jvp(ops.layer_norm, ops.layer_norm_backward, inputs, out, *tangents)


register_autograd(layer_norm, _ln_bwd, setup_context=_save_x_w, jvp=_ln_jvp)

# ---------------------------------------------------------------- softmax


def _last(x: torch.Tensor, dim: int) -> torch.Tensor:
    check_dim("softmax", dim, x.dim())
    return x.movedim(dim, -1) if dim not in (-1, x.dim() - 1) else x


@torch.library.custom_op("pypto::softmax", mutates_args=())
@planned_op
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax along ``dim`` (moved last, made contiguous, moved back)."""
    dt = dtype_name(x, "softmax: x", allowed=ROW_DTYPES)
    xl = _last(x, dim)
    rows, cols = rows_cols(xl)
    name, args = ("softmax", (rows, cols)) if dt == "float32" else ("softmax_fwd", (rows, cols, dt))
    (y,) = call(
        name, args, [(flat(xl, rows, cols), "x")], [(rows, cols)], dt, [xl.shape], rows=True
    )
    return _back(y, dim)


def _back(y: torch.Tensor, dim: int) -> torch.Tensor:
    """``y`` with its last dim moved back to ``dim``: ``y`` itself where it is last."""
    if not y.dim() or dim in (-1, y.dim() - 1):
        return y
    return y.movedim(-1, dim).contiguous()


@softmax.register_fake
@fake_kernel("pypto::softmax")
def _(x, dim=-1):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("pypto::softmax_backward", mutates_args=())
@planned_op
def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    dt = dtype_name(y, "softmax_backward: y", allowed=ROW_DTYPES)
    check_like(dy, y, "softmax_backward: dy", "y")
    yl, dyl = _last(y, dim), _last(dy, dim)
    rows, cols = rows_cols(yl)
    ins = [(flat(yl, rows, cols), "y"), (flat(dyl, rows, cols), "dy")]
    (dx,) = call(
        "softmax_backward", (rows, cols, dt), ins, [(rows, cols)], dt, [yl.shape], rows=True
    )
    return _back(dx, dim)


@softmax_backward.register_fake
@fake_kernel("pypto::softmax_backward")
def _(y, dy, dim):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.dim = inputs[1]


def _softmax_bwd(ctx, dy):
    (y,) = ctx.saved_tensors
    return torch.ops.pypto.softmax_backward(y, dy, ctx.dim), None


def _softmax_jvp(inputs, out, tx, *_):  # (diag(y) - y y^T) tx: symmetric, the backward's
    return ops.softmax_backward(out, tx, inputs[1])


register_autograd(softmax, _softmax_bwd, setup_context=_softmax_setup, jvp=_softmax_jvp)

# ---------------------------------------------------------------- attention


def _attention_call(q, k, v, causal: bool, scale, dt: str, mask=None):
    """The attention template on contiguous copies of q, k, v and the 4-d ``mask``
    (``sdpa_parts``: one call, or two when a causal call has fewer keys than queries)."""
    B, H, S, D = q.shape
    Hk, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    spec = None
    if mask is not None:
        spec = spec_of(
            tuple(mask.shape), (B, H, S, Sk), "bool" if mask.dtype == torch.bool else "float"
        )
    if (o := prefill_step(q, k, v, causal, scale, dt, mask, spec)) is not None:
        return o  # a new prompt length: the module of its bucket
    parts = sdpa_parts(B, H, S, D, Hk, Sk, Dv, causal, scale, dt, spec)
    kc, vc, outs = k.contiguous(), v.contiguous(), []
    for lo, hi, args in parts:
        qc = (q if (lo, hi) == (0, S) else q[:, :, lo:hi]).contiguous()
        ins = [(qc, "q"), (kc, "k"), (vc, "v")]
        ins += [] if mask is None else [(mask.contiguous(), "attn_mask")]
        outs += call("attention", args, ins, [(B, H, hi - lo, v.shape[3])], dt)
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)


@torch.library.custom_op("pypto::attention", mutates_args=())
@planned_op
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    attn_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=...,
    enable_gqa=...)``: q ``[B, H, S, D]``, k ``[B, Hkv, S_kv, D]``, v ``[B, Hkv, S_kv,
    Dv]``, the output ``[B, H, S, Dv]``; Hkv = H unless ``enable_gqa`` (grouped-query
    attention: Hkv divides H, query head h reads key/value head h // (H / Hkv),
    without copies); the causal mask as PyTorch's (query i sees keys j <= i, whatever
    S_kv), the scale ``1 / sqrt(D)`` unless given; ``attn_mask`` as SDPA's (bool: the
    keys that take part; of q's dtype: added to the scores; broadcast to [B, H, S,
    S_kv]; not with ``is_causal``), a query with no key left gets zeros; no dropout.
    With no keys the output is zeros, as PyTorch's. Causal calls skip the key blocks
    above the diagonal (the template's flash form, its default for them). bfloat16 on
    a target with a bfloat16 dot instruction (and D even; on AMX's tiles a multiple of
    32) multiplies on it (the template's bfloat16 form: the softmax in float32, P
    rounded to bfloat16 for the P V product, as PyTorch's); elsewhere bfloat16 and
    float16 are computed in float32: for at most ``DECODE_QUERIES`` queries per head (a
    decoder's step) in the template's decode form, which widens K and V where it reads
    them (float16 with the target's conversion instructions, ``f16c``), else from
    float32 copies of q, k and v; the output is rounded once."""
    dt = dtype_name(q, "attention: q", allowed=ROW_DTYPES)
    if scale is not None:
        check_finite("attention: scale", scale)
    if q.dim() != 4:
        raise ValueError(f"attention: q must be [B, H, S, D], got shape {tuple(q.shape)}")
    B, H, S, D = q.shape
    dts = {n: dtype_name(t, f"attention: {n}", allowed=ROW_DTYPES) for t, n in ((k, "k"), (v, "v"))}
    Hk, Sk = (k.shape[1], k.shape[2]) if k.dim() == 4 else (None, None)
    heads = Hk if enable_gqa and Hk and H % Hk == 0 else H
    for t, n, want in ((k, "k", (B, heads, D)), (v, "v", (B, heads, Sk))):
        if t.dim() != 4 or (t.shape[0], t.shape[1], t.shape[3 if n == "k" else 2]) != want:
            also = f" and k {tuple(k.shape)}" if n == "v" else ""
            raise ValueError(
                f"attention: {n} has shape {tuple(t.shape)}, q has {tuple(q.shape)}{also} "
                "(k: [B, Hkv, S_kv, D] with q's B and D; v: [B, Hkv, S_kv, Dv]; Hkv is q's "
                "H, or with enable_gqa a divisor of it)"
            )
        if dts[n] != dt:
            raise TypeError(f"attention: {n} has dtype {t.dtype}, q has {q.dtype}")
    mask = None if attn_mask is None else sdpa_mask(attn_mask, q, (B, H, S, Sk), is_causal)
    if Sk == 0:
        return empty((B, H, S, v.shape[3]), q.dtype).zero_()
    if mask is None and not is_causal and (o := decode_step(q, k, v, scale, dt)) is not None:
        return o  # a decoder's step: one module for every Sk
    if dt == "bfloat16" and tile_isa(target_of("host"), dt, D) is not None:
        return _attention_call(q, k, v, bool(is_causal), scale, dt, mask)  # AMX's tiles
    if dt in WIDENED and S <= DECODE_QUERIES:  # the decode form reads K and V in place
        return _attention_call(q, k, v, bool(is_causal), scale, dt, mask)
    if dt in ("bfloat16", "float16"):  # copies into pooled buffers: no page faults
        q32, k32, v32 = (empty(t.shape, torch.float32).copy_(t) for t in (q, k, v))
        if mask is not None and mask.dtype != torch.bool:
            mask = mask.float()
        o = _attention_call(q32, k32, v32, bool(is_causal), scale, "float32", mask)
        return empty(o.shape, q.dtype).copy_(o)
    return _attention_call(q, k, v, bool(is_causal), scale, dt, mask)


@attention.register_fake
@fake_kernel("pypto::attention")
def _(q, k, v, is_causal=False, scale=None, enable_gqa=False, attn_mask=None):
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


_attn_setup, _attn_bwd = _backward(attention_definition, 7)  # (a float mask's gradient too)
register_autograd(attention, _attn_bwd, setup_context=_attn_setup, jvp=attention_tangent)
_moe_setup, _moe_bwd = _backward(moe_definition, 5)
register_autograd(moe, _moe_bwd, setup_context=_moe_setup, jvp=moe_tangent)
for _op, _definition in (  # second derivatives: PyTorch's, of the backward's definition
    (gelu_backward, gelu_backward_definition),
    (rms_norm_backward, rms_norm_backward_definition),
    (layer_norm_backward, layer_norm_backward_definition),
    (softmax_backward, softmax_backward_definition),
):
    _setup, _bwd = _backward(_definition, 3)
    register_autograd(_op, _bwd, setup_context=_setup, definition=_definition)
for _name in ("attention", "moe"):  # in the autocast dtype, as PyTorch's SDPA and linear
    run_in_autocast_dtype(_name)
torch_vmap.register()  # batching rules of the row-wise operators

__all__ = ["gelu", "rms_norm", "layer_norm", "softmax", "attention", "moe", "module"]
