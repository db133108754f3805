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
backward passes (their ``*_backward`` templates, also pypto kernels).

Tensors: CPU, float32 or float64, and for gelu, rms_norm, layer_norm and softmax
(forward and backward) also bfloat16 and float16, stored in 16 bits and computed in
float32, each result rounded once (float32 runs the tuned float32 templates, the
other dtypes the dtype-generic ones); attention computes 16-bit inputs in float32
(one copy each), moe takes bfloat16 (its GEMMs on the BF16 dot kernels where the
target has them). Tensors are passed zero-copy; non-contiguous inputs are
copied to contiguous ones first. Other dtypes and devices raise ``TypeError`` /
``ValueError`` naming the argument. Outputs of 1 MiB and more come from
``pypto.torch.empty``'s pool of recycled buffers (no page faults per call).
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import NamedTuple

import torch

import pypto as pt
from pypto.torch import ModuleCache, as_numpy, dtype_name, empty, from_numpy, run

from . import dispatch
from .task import get_template, workload_key
from .templates.moe import DTYPES as MOE_DTYPES
from .templates.moe import (
    GEMMS,
    combine,
    dot_kernel,
    expert_ffn,
    moe_route,
    nominal_rows,
    pack_panels,
    panel_width,
    routed_rows,
)

_MODULES = ModuleCache()
# the row-wise operators' dtypes: 16-bit floats are computed in float32 and rounded once
ROW_DTYPES = ("float32", "float64", "bfloat16", "float16")


@functools.cache
def _target(name: str) -> pt.Target:
    return pt.Target(name)  # "host" reads the CPU's description: once


def module(name: str, args: tuple, target="host") -> pt.Module:
    """The built module of template ``name`` for ``args`` (cached): the best recorded
    config for the target (the caller's ``apply_history_best`` first, then the user's
    and the shipped records, as ``apply_history_best()`` reads them), else the default
    config."""
    t = _target(target) if isinstance(target, str) else target

    def make():
        tpl = get_template(name)
        s, tensors = tpl.func(_best_config(tpl, args, t), *args)
        return pt.build(s, tensors, target=t, name=name)

    return _MODULES.get((name, args, t.key), make)


def _best_config(tpl, args: tuple, t: pt.Target):
    """The config ``module`` builds: the records in scope, else the user's and the
    shipped ones, else the template's default."""
    if dispatch.lookup(workload_key(tpl.name, args), tpl.record_keys(args, t)):
        return tpl.best_config(*args, target=t)
    with dispatch.apply_history_best():
        return tpl.best_config(*args, target=t)


def _rows(x: torch.Tensor) -> tuple[int, int]:
    cols = x.shape[-1] if x.dim() else 1
    return (x.numel() // cols if cols else 0), cols


def _vector(w: torch.Tensor, cols: int, dtype: str, name: str):
    if tuple(w.shape) != (cols,):
        raise ValueError(f"{name}: shape {tuple(w.shape)}, expected ({cols},) (the last dim of x)")
    if dtype_name(w, name, allowed=ROW_DTYPES) != dtype:
        raise TypeError(f"{name}: dtype {w.dtype} differs from x's ({dtype})")


def _call(name: str, args: tuple, inputs: list, out_shapes: list, dtype: str):
    outs = [empty(sh, getattr(torch, dtype)) for sh in out_shapes]
    if all(o.numel() for o in outs):
        run(module(name, args), inputs, outs)
    return outs


def _flat(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    return t.contiguous().reshape(rows, cols)


# ---------------------------------------------------------------- gelu


@torch.library.custom_op("pypto::gelu", mutates_args=())
def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU (``approximate``: ``"none"``, the erf form, or ``"tanh"``), as ``F.gelu``."""
    dt = dtype_name(x, "gelu: x", allowed=ROW_DTYPES)
    rows, cols = _rows(x)
    args = (rows, cols, approximate) if dt == "float32" else (rows, cols, approximate, dt)
    (y,) = _call("gelu", args, [(_flat(x, rows, cols), "x")], [(rows, cols)], dt)
    return y.reshape(x.shape)


@gelu.register_fake
def _(x, approximate="none"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("pypto::gelu_backward", mutates_args=())
def gelu_backward(x: torch.Tensor, dy: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    dt = dtype_name(x, "gelu_backward: x", allowed=ROW_DTYPES)
    rows, cols = _rows(x)
    ins = [(_flat(x, rows, cols), "x"), (_flat(dy, rows, cols), "dy")]
    (dx,) = _call("gelu_backward", (rows, cols, approximate, dt), ins, [(rows, cols)], dt)
    return dx.reshape(x.shape)


@gelu_backward.register_fake
def _(x, dy, approximate="none"):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _gelu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.approximate = inputs[1]


def _gelu_bwd(ctx, dy):
    (x,) = ctx.saved_tensors
    return torch.ops.pypto.gelu_backward(x, dy, ctx.approximate), None


gelu.register_autograd(_gelu_bwd, setup_context=_gelu_setup)

# ---------------------------------------------------------------- rms_norm


def _norm_args(tuned: str, generic: str, rows, cols, eps, default_eps, dt):
    """float32: the tuned template (eps in the workload only when not its default, as
    in the shipped records); float64: the dtype-generic one."""
    if dt == "float32":
        return tuned, (rows, cols) if eps == default_eps else (rows, cols, eps)
    return generic, (rows, cols, eps, dt)


@torch.library.custom_op("pypto::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x * rsqrt(mean(x^2, -1) + eps) * weight`` over the last dim."""
    dt = dtype_name(x, "rms_norm: x", allowed=ROW_DTYPES)
    rows, cols = _rows(x)
    _vector(weight, cols, dt, "rms_norm: weight")
    name, args = _norm_args("rmsnorm", "rmsnorm_fwd", rows, cols, eps, 1e-6, dt)
    ins = [(_flat(x, rows, cols), "x"), (weight, "weight")]
    (y,) = _call(name, args, ins, [(rows, cols)], dt)
    return y.reshape(x.shape)


@rms_norm.register_fake
def _(x, weight, eps=1e-6):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("pypto::rms_norm_backward", mutates_args=())
def rms_norm_backward(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    dt = dtype_name(x, "rms_norm_backward: x", allowed=ROW_DTYPES)
    rows, cols = _rows(x)
    ins = [(_flat(x, rows, cols), "x"), (weight, "weight"), (_flat(dy, rows, cols), "dy")]
    dx, dw = _call("rmsnorm_backward", (rows, cols, eps, dt), ins, [(rows, cols), (cols,)], dt)
    return dx.reshape(x.shape), dw


@rms_norm_backward.register_fake
def _(x, weight, dy, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(weight)


def _save_x_w(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.eps = inputs[-1]


def _rms_bwd(ctx, dy):
    x, w = ctx.saved_tensors
    dx, dw = torch.ops.pypto.rms_norm_backward(x, w, dy, ctx.eps)
    return dx, dw, None


rms_norm.register_autograd(_rms_bwd, setup_context=_save_x_w)

# ---------------------------------------------------------------- layer_norm


@torch.library.custom_op("pypto::layer_norm", mutates_args=())
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    """``(x - mean) * rsqrt(var + eps) * weight + bias`` over the last dim (biased var)."""
    dt = dtype_name(x, "layer_norm: x", allowed=ROW_DTYPES)
    rows, cols = _rows(x)
    _vector(weight, cols, dt, "layer_norm: weight")
    _vector(bias, cols, dt, "layer_norm: bias")
    name, args = _norm_args("layernorm", "layernorm_fwd", rows, cols, eps, 1e-5, dt)
    ins = [(_flat(x, rows, cols), "x"), (weight, "weight"), (bias, "bias")]
    (y,) = _call(name, args, ins, [(rows, cols)], dt)
    return y.reshape(x.shape)


@layer_norm.register_fake
def _(x, weight, bias, eps=1e-5):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("pypto::layer_norm_backward", mutates_args=())
def layer_norm_backward(
    x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dt = dtype_name(x, "layer_norm_backward: x", allowed=ROW_DTYPES)
    rows, cols = _rows(x)
    ins = [(_flat(x, rows, cols), "x"), (weight, "weight"), (_flat(dy, rows, cols), "dy")]
    shapes = [(rows, cols), (cols,), (cols,)]
    dx, dw, db = _call("layernorm_backward", (rows, cols, eps, dt), ins, shapes, dt)
    return dx.reshape(x.shape), dw, db


@layer_norm_backward.register_fake
def _(x, weight, dy, eps):
    w = torch.empty_like(weight)
    return torch.empty_like(x, memory_format=torch.contiguous_format), w, torch.empty_like(w)


def _ln_bwd(ctx, dy):
    x, w = ctx.saved_tensors
    dx, dw, db = torch.ops.pypto.layer_norm_backward(x, w, dy, ctx.eps)
    return dx, dw, db, None


layer_norm.register_autograd(_ln_bwd, setup_context=_save_x_w)

# ---------------------------------------------------------------- softmax


def _last(x: torch.Tensor, dim: int) -> torch.Tensor:
    if not -x.dim() <= dim < max(x.dim(), 1):
        raise IndexError(f"softmax: dim {dim} is out of range for a {x.dim()}-d tensor")
    return x.movedim(dim, -1) if x.dim() else x


@torch.library.custom_op("pypto::softmax", mutates_args=())
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax along ``dim`` (moved last, made contiguous, moved back)."""
    dt = dtype_name(x, "softmax: x", allowed=ROW_DTYPES)
    xl = _last(x, dim)
    rows, cols = _rows(xl)
    name, args = ("softmax", (rows, cols)) if dt == "float32" else ("softmax_fwd", (rows, cols, dt))
    (y,) = _call(name, args, [(_flat(xl, rows, cols), "x")], [(rows, cols)], dt)
    return y.reshape(xl.shape).movedim(-1, dim).contiguous()


@softmax.register_fake
def _(x, dim=-1):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("pypto::softmax_backward", mutates_args=())
def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    dt = dtype_name(y, "softmax_backward: y", allowed=ROW_DTYPES)
    yl, dyl = _last(y, dim), _last(dy, dim)
    rows, cols = _rows(yl)
    ins = [(_flat(yl, rows, cols), "y"), (_flat(dyl, rows, cols), "dy")]
    (dx,) = _call("softmax_backward", (rows, cols, dt), ins, [(rows, cols)], dt)
    return dx.reshape(yl.shape).movedim(-1, dim).contiguous()


@softmax_backward.register_fake
def _(y, dy, dim):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.dim = inputs[1]


def _softmax_bwd(ctx, dy):
    (y,) = ctx.saved_tensors
    return torch.ops.pypto.softmax_backward(y, dy, ctx.dim), None


softmax.register_autograd(_softmax_bwd, setup_context=_softmax_setup)

# ---------------------------------------------------------------- attention


def _attention_call(q, k, v, causal: bool, scale, dt: str):
    B, H, S, D = q.shape
    args = (B, H, S, D, causal, scale) + (() if dt == "float32" else (dt,))
    if k.shape[2] != S:
        args = (B, H, S, D, causal, scale, dt, k.shape[2])
    ins = [(q.contiguous(), "q"), (k.contiguous(), "k"), (v.contiguous(), "v")]
    (o,) = _call("attention", args, ins, [tuple(q.shape)], dt)
    return o


@torch.library.custom_op("pypto::attention", mutates_args=())
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=...)``: q
    ``[B, H, S, D]``, k and v ``[B, H, S_kv, D]`` (``S_kv == S`` when causal); no mask
    tensor, no dropout. Causal calls skip the key blocks above the diagonal (the
    template's flash form, its default for them). bfloat16 and float16 are computed
    in float32 (q, k and v converted, one copy each; the output rounded once)."""
    dt = dtype_name(q, "attention: q", allowed=ROW_DTYPES)
    if q.dim() != 4:
        raise ValueError(f"attention: q must be [B, H, S, D], got shape {tuple(q.shape)}")
    B, H, S, D = q.shape
    for t, n in ((k, "k"), (v, "v")):
        if t.dim() != 4 or (t.shape[0], t.shape[1], t.shape[3]) != (B, H, D) or t.shape != k.shape:
            raise ValueError(
                f"attention: {n} has shape {tuple(t.shape)}, q has {tuple(q.shape)} "
                "(k and v: [B, H, S_kv, D] with q's B, H and D)"
            )
        if dtype_name(t, f"attention: {n}", allowed=ROW_DTYPES) != dt:
            raise TypeError(f"attention: {n} has dtype {t.dtype}, q has {q.dtype}")
    if is_causal and k.shape[2] != S:
        raise ValueError(
            f"attention: is_causal needs as many keys as queries, got {k.shape[2]} keys "
            f"for {S} queries"
        )
    if dt in ("bfloat16", "float16"):  # copies into pooled buffers: no page faults
        q32, k32, v32 = (empty(t.shape, torch.float32).copy_(t) for t in (q, k, v))
        o = _attention_call(q32, k32, v32, bool(is_causal), scale, "float32")
        return empty(q.shape, q.dtype).copy_(o)
    return _attention_call(q, k, v, bool(is_causal), scale, dt)


@attention.register_fake
def _(q, k, v, is_causal=False, scale=None):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


# ---------------------------------------------------------------- moe

_PANELS: dict = {}


def _panels(w: torch.Tensor, nr: int, group: int, name: str) -> torch.Tensor:
    """Expert weights ``w`` ([E, N, K]) in column panels of ``nr`` (``pack_panels``);
    kept while ``w`` is alive and unchanged (its memory, shape, strides and version
    counter), so inference packs each weight once. The entry holds a weak reference
    to ``w``: memory freed and reused by another tensor is never mistaken for it."""
    key = (w.data_ptr(), tuple(w.shape), w.stride(), w.dtype, w._version, nr, group)
    got = _PANELS.get(key)
    if got is None or got[0]() is None:
        if len(_PANELS) >= 16:
            _PANELS.clear()
        packed = from_numpy(pack_panels(as_numpy(w, name), nr, group))
        got = _PANELS[key] = (weakref.ref(w), packed)
    return got[1]


class _MoeModules(NamedTuple):
    """What a MoE layer shape runs: the expert module (template ``moe``'s best config,
    built with its rows bound at call time, one module for every segment length, its
    weights in panels), the panel widths of its three GEMMs and their ``pack_panels``
    group, the rows each segment is padded to a multiple of, and the combine."""

    expert: pt.Module
    widths: tuple
    group: int
    align: int
    combine: pt.Module


def _moe_modules(args: tuple, dt: str) -> _MoeModules:
    t = _target("host")
    T, d, F, E, k = args[:5]

    def expert():
        cfg = _best_config(get_template("moe"), args, t)
        rows, nominal = pt.var("rows"), nominal_rows(T, k, E)
        s, tensors = expert_ffn(cfg, T, d, F, rows, nominal, dt, panels=True)
        mod = pt.build(s, tensors, target=t, name="moe_expert")
        isa = dot_kernel(cfg, dt, d, F)
        if isa is None:
            return mod, tuple(panel_width(cfg, g) for g in GEMMS), 1, 1
        # whole register tiles only: the dot kernels' partial tiles run as plain loops
        align = math.lcm(*(cfg[g + "_tile_i"].size[-1] for g in GEMMS))
        return mod, tuple(panel_width(cfg, g) for g in GEMMS), isa.group, align

    mod, widths, group, align = _MODULES.get(("moe_expert", args, t.key), expert)
    R = routed_rows(T, k, E, align)

    def comb():
        return pt.build(*combine(T, d, k, dt, R), target=t, name="moe_combine")

    comb_mod = _MODULES.get(("moe_combine", (T, d, k, dt, R), t.key), comb)
    return _MoeModules(mod, widths, group, align, comb_mod)


@torch.library.custom_op("pypto::moe", mutates_args=())
def moe(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """Top-k mixture of SwiGLU experts: ``out[t] = sum_j topk_weights[t, j] *
    (silu(x[t] Wg_e^T) * (x[t] Wu_e^T)) Wd_e^T`` with ``e = topk_ids[t, j]``;
    x ``[T, d]``, w_gate and w_up ``[E, d_ff, d]``, w_down ``[E, d, d_ff]``."""
    dt = dtype_name(x, "moe: x", allowed=MOE_DTYPES)
    if x.dim() != 2:
        raise ValueError(f"moe: x must be [T, d_model], got shape {tuple(x.shape)}")
    T, d = x.shape
    if w_gate.dim() != 3 or w_gate.shape[2] != d:
        raise ValueError(f"moe: w_gate must be [E, d_ff, {d}], got {tuple(w_gate.shape)}")
    E, F = w_gate.shape[0], w_gate.shape[1]
    for t, n, want in ((w_up, "w_up", (E, F, d)), (w_down, "w_down", (E, d, F))):
        if tuple(t.shape) != want:
            raise ValueError(f"moe: {n} must be {list(want)}, got {list(t.shape)}")
    for t, n in ((w_gate, "w_gate"), (w_up, "w_up"), (w_down, "w_down"), (topk_weights, "w")):
        if dtype_name(t, f"moe: {n}", allowed=MOE_DTYPES) != dt:
            raise TypeError(f"moe: {n} has dtype {t.dtype}, x has {x.dtype}")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T or topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"moe: topk_ids and topk_weights must both be [{T}, k], got "
            f"{list(topk_ids.shape)} and {list(topk_weights.shape)}"
        )
    dtype_name(topk_ids, "moe: topk_ids", allowed=("int32", "int64"))
    k = topk_ids.shape[1]
    out = empty((T, d), getattr(torch, dt))
    if out.numel() == 0 or k == 0:
        return out.zero_()
    ids = as_numpy(topk_ids, "topk_ids")
    args = (T, d, F, E, k) + (() if dt == "float32" else (dt,))
    m = _moe_modules(args, dt)
    tok, wt, offsets, pos = moe_route(ids, as_numpy(topk_weights, "topk_weights"), E, m.align)
    tok, wt = torch.from_numpy(tok), from_numpy(wt)
    wg, wu, wd = (
        _panels(w, n, m.group, name)
        for w, n, name in zip((w_gate, w_up, w_down), m.widths, ("w_gate", "w_up", "w_down"))
    )
    y = empty((len(tok), d), getattr(torch, dt))
    xc = x.contiguous()
    for e in range(E):
        a, b = int(offsets[e]), int(offsets[e + 1])
        if b > a:  # one expert's segment of rows, written in place into y
            ins = [(xc, "x"), (tok[a:b], "tok"), (wt[a:b], "wt")]
            ins += [(wg[e], "w_gate"), (wu[e], "w_up"), (wd[e], "w_down")]
            run(m.expert, ins, [y[a:b]])
    run(m.combine, [(y, "y"), (torch.from_numpy(pos), "pos")], [out])
    return out


@moe.register_fake
def _(x, w_gate, w_up, w_down, topk_weights, topk_ids):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


__all__ = ["gelu", "rms_norm", "layer_norm", "softmax", "attention", "moe", "module"]
