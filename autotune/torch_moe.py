"""``torch.ops.pypto.moe``: a top-k mixture of SwiGLU experts as one PyTorch operator.

The tokens are routed into one segment of rows per expert (``moe_route``), each
segment runs the expert module (template ``moe``'s best config for the layer's shape,
its rows bound at call time) on the expert's weights packed once in panels, and the
combine scatters the rows back, weighted.
"""

from __future__ import annotations

import math
import weakref
from typing import NamedTuple

import torch

import pypto as pt
from pypto.torch import as_numpy, dtype_name, empty, fake_kernel, from_numpy, run

from .task import get_template
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
from .torch_call import MODULES, best_config, target_of

_PANELS: dict = {}  # in order of use, the most recent last
MAX_PACKED = 256  # weights kept packed (a model's MoE layers: three each)
_DTYPES = (*MOE_DTYPES, "float16")  # the template's, and float16 computed in float32


def _pack(w: torch.Tensor, nr: int, group: int, experts=None) -> torch.Tensor:
    """``pack_panels`` of ``w`` (float16 widened to float32 on the way): of every
    expert (kept), or only of ``experts`` (into a recycled buffer, the other experts'
    panels left unwritten)."""
    w = w.float() if w.dtype == torch.float16 else w
    wide = as_numpy(w, "expert weights")
    if experts is None:
        return from_numpy(pack_panels(wide, nr, group))
    one = pack_panels(wide[:0], nr, group)  # (the shape of the panels, of no expert)
    out = empty((w.shape[0], *one.shape[1:]), w.dtype)
    panels = as_numpy(out, "panels")
    for e in experts:
        pack_panels(wide[e : e + 1], nr, group, out=panels[e : e + 1])
    return out


def _panels(w: torch.Tensor, nr: int, group: int, experts) -> torch.Tensor:
    """Expert weights ``w`` ([E, N, K]) in column panels of ``nr`` (``_pack``); kept
    while ``w`` is alive and unchanged (its memory, shape, strides and version counter),
    so inference packs each weight once (the 256 used most recently). The entry holds a
    weak reference to ``w`` (to its base, for a view such as ``W[0]``): memory freed
    and reused by another tensor is never mistaken for it.

    Weights whose writes the version counter may not see are packed on every call, only
    the ``experts`` it routes tokens to: an inference tensor (made under
    ``torch.inference_mode()``: it has no counter) and one that requires grad (written
    through ``.data``, as ``torch.autograd.gradcheck`` and optimizers of old do; its
    values change every step of training anyway). Of the others, a write through
    ``.data`` or a numpy view is caught where it changes one of 64 weights sampled
    across ``w``, compared on every call (``release_packed_weights`` for the rest)."""
    if w.is_inference() or w.requires_grad:
        return _pack(w.detach(), nr, group, experts)
    key = (w.data_ptr(), tuple(w.shape), w.stride(), w.dtype, w._version, nr, group)
    got = _PANELS.pop(key, None)  # (put back last: the most recently used)
    flat = w if w.is_contiguous() else w[..., 0]  # no copy of all of w
    sample = flat.reshape(-1)[:: max(1, flat.numel() // 64)][:64]
    if got is None or got[0]() is None or not torch.equal(got[2], sample):
        packed = _pack(w, nr, group)
        owner = w._base if w._base is not None else w  # a view (W[0]) lives one call
        got = (weakref.ref(owner), packed, sample.clone())
    _PANELS[key] = got
    while len(_PANELS) > MAX_PACKED:  # the least recently used go first
        _PANELS.pop(next(iter(_PANELS)))
    return got[1]


def release_packed_weights() -> None:
    """Forget every packed copy of expert weights (and their memory): the next call
    packs its weights again. For weights that require no grad written where PyTorch's
    version counter does not see it (``.data``, a numpy view) and the 64 sampled
    weights may not either."""
    _PANELS.clear()


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
    t = target_of("host")
    T, d, F, E, k = args[:5]

    def expert():
        cfg = best_config(get_template("moe"), args, t)
        rows, nominal = pt.var("rows"), nominal_rows(T, k, E)
        s, tensors = expert_ffn(cfg, T, d, F, rows, nominal, dt, panels=True)
        mod = pt.build(s, tensors, target=t, name="moe_expert")
        isa = dot_kernel(cfg, dt, d, F, nominal)
        if isa is None:
            return mod, tuple(panel_width(cfg, g) for g in GEMMS), 1, 1
        # whole register tiles only: the dot kernels' partial tiles run as plain loops
        align = math.lcm(*(cfg[g + "_tile_i"].size[-1] for g in GEMMS))
        return mod, tuple(panel_width(cfg, g) for g in GEMMS), isa.group, align

    mod, widths, group, align = MODULES.get(("moe_expert", args, t.key), expert)
    R = routed_rows(T, k, E, align)

    def comb():
        return pt.build(*combine(T, d, k, dt, R), target=t, name="moe_combine")

    comb_mod = MODULES.get(("moe_combine", (T, d, k, dt, R), t.key), comb)
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
    x ``[T, d]``, w_gate and w_up ``[E, d_ff, d]``, w_down ``[E, d, d_ff]``. float16
    is computed in float32 (x converted per call, the weights once, as they are
    packed) and the output rounded once."""
    dt = dtype_name(x, "moe: x", allowed=_DTYPES)
    given = {"w_gate": w_gate, "w_up": w_up, "w_down": w_down, "topk_weights": topk_weights}
    dts = {n: dtype_name(t, f"moe: {n}", allowed=_DTYPES) for n, t in given.items()}
    dtype_name(topk_ids, "moe: topk_ids", allowed=("int32", "int64"))
    if x.dim() != 2:
        raise ValueError(f"moe: x must be [T, d_model], got shape {tuple(x.shape)}")
    T, d = x.shape
    if w_gate.dim() != 3 or w_gate.shape[2] != d:
        raise ValueError(f"moe: w_gate must be [E, d_ff, {d}], got {tuple(w_gate.shape)}")
    E, F = w_gate.shape[0], w_gate.shape[1]
    if E == 0:
        raise ValueError("moe: w_gate has no experts (E = 0)")
    for t, n, want in ((w_up, "w_up", (E, F, d)), (w_down, "w_down", (E, d, F))):
        if tuple(t.shape) != want:
            raise ValueError(f"moe: {n} must be {list(want)}, got {list(t.shape)}")
    for n, got in dts.items():
        if got != dt:
            raise TypeError(f"moe: {n} has dtype {given[n].dtype}, x has {x.dtype}")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T or topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"moe: topk_ids and topk_weights must both be [{T}, k], got "
            f"{list(topk_ids.shape)} and {list(topk_weights.shape)}"
        )
    if topk_ids.shape[1] > E:
        raise ValueError(
            f"moe: topk_ids picks {topk_ids.shape[1]} experts per token, but there are {E} "
            "(w_gate's first dim)"
        )
    if dt == "float16":
        wide = (x.float(), (w_gate, w_up, w_down), topk_weights.float(), topk_ids, "float32")
        return empty((T, d), torch.float16).copy_(_experts(*wide))
    return _experts(x, (w_gate, w_up, w_down), topk_weights, topk_ids, dt)


def _experts(x, weights: tuple, topk_weights, topk_ids, dt: str) -> torch.Tensor:
    """``moe`` on checked arguments: route, run each expert's segment, combine."""
    (T, d), (E, F, _), k = x.shape, weights[0].shape, topk_ids.shape[1]
    out = empty((T, d), getattr(torch, dt))
    if out.numel() == 0 or k == 0:
        return out.zero_()
    ids = as_numpy(topk_ids, "topk_ids")
    args = (T, d, F, E, k) + (() if dt == "float32" else (dt,))
    m = _moe_modules(args, dt)
    tok, wt, offsets, pos = moe_route(ids, as_numpy(topk_weights, "topk_weights"), E, m.align)
    tok, wt = torch.from_numpy(tok), from_numpy(wt)
    used = [e for e in range(E) if offsets[e + 1] > offsets[e]]
    wg, wu, wd = (_panels(w, n, m.group, used) for w, n in zip(weights, m.widths))
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
@fake_kernel("pypto::moe")
def _(x, w_gate, w_up, w_down, topk_weights, topk_ids):
    return torch.empty_like(x, memory_format=torch.contiguous_format)
