"""What the PyTorch operators (``autotune.torch``, ``autotune.torch_moe``) share: the
cache of built modules, the best config of a template for a shape, and the checks and
reshapes of their tensor arguments."""

from __future__ import annotations

import functools
import math

import torch

import pypto as pt
from pypto.torch import ModuleCache, dtype_name, empty, run
from pypto.torch_autograd import register_kernel
from pypto.torch_plan import planned

from . import dispatch
from .task import get_template
from .templates.attention_mask import spec_of
from .templates.norm import SHORT_ROW

MODULES = ModuleCache()
# the row-wise operators' dtypes: 16-bit floats are computed in float32 and rounded once
ROW_DTYPES = ("float32", "float64", "bfloat16", "float16")


@functools.cache
def target_of(name: str) -> pt.Target:
    return pt.Target(name)  # "host" reads the CPU's description: once


def module(name: str, args: tuple, target="host", build=None) -> pt.Module:
    """The built module of template ``name`` for ``args`` (cached): the best recorded
    config for the target (the caller's ``apply_history_best`` first, then the user's
    and the shipped records, as ``apply_history_best()`` reads them), else the default
    config. A record of any spelling of the workload serves (``Template.spellings``:
    ``gelu(9, 70)`` and ``gelu(9, 70, "none")`` are one workload, built once).
    ``build(template, config, args, target)``: what is built of that config in place
    of the template's own module (cached by the function's name too)."""
    t = target_of(target) if isinstance(target, str) else target
    tpl, args, spellings, keys = _workload(name, args, t)

    def make():
        cfg = best_config(tpl, args, t)
        if build is not None:
            return build(tpl, cfg, args, t)
        s, tensors = tpl.func(cfg, *args)
        return pt.build(s, tensors, target=t, name=name)

    # the records of an enclosing apply_history_best are part of the key: a shape run
    # before, under other records or none, is built again for these
    scoped = dispatch.lookup(spellings, keys)
    how = None if build is None else build.__qualname__
    return MODULES.get((name, args, t.key, repr(scoped[:1]), how), make)


@functools.lru_cache(maxsize=4096)
def _workload(name: str, args: tuple, t: pt.Target) -> tuple:
    """``(template, short args, spellings, record keys)`` of a call, worked out once per
    shape (about 0.3 ms of Python: each operator call would pay it)."""
    tpl = get_template(name)
    args = tpl.short_args(args)
    return tpl, args, tpl.spellings(args), tpl.record_keys(args, t)


def rows_module(name: str, args: tuple, target="host") -> pt.Module:
    """``module`` of a row-wise template (``args`` = rows, cols, ...) where no record
    names these rows: one module for every row count (``rows`` a size bound at call),
    per columns, arguments and whether the output outgrows the last-level cache (its
    rows are then streamed), with the config of ``nominal_rows``. A new batch or
    sequence length builds nothing (0.15-0.35 s an operator on a Zen 4). Rows a record
    names (the user's tuned shapes) get their own module, as before, and so do rows of
    at most ``SHORT_ROW`` columns (computed in blocks of rows, whose buffers would
    be whole tensors for a ragged last block: 0.7x)."""
    t = target_of(target) if isinstance(target, str) else target
    rows, cols = args[0], args[1]
    if cols <= SHORT_ROW:
        return module(name, args, t)
    nominal = (nominal_rows(rows, cols, t), *args[1:])
    if recorded(name, args, t, like=nominal):
        return module(name, args, t)
    return module(name, nominal, t, build=_any_rows)


def recorded(name: str, args: tuple, target="host", like=None) -> bool:
    """Whether a record names this workload (any spelling) for the target: the
    caller's ``apply_history_best`` context's, the user's or the shipped ones.
    ``like``: a workload of the same dtypes whose space is built already (the targets
    whose records serve are read from it: a new shape's space costs milliseconds).
    Answered once per workload and scope (``dispatch.scope``): opening the records
    costs a millisecond or two of reading the logs' directories."""
    t = target_of(target) if isinstance(target, str) else target
    return _recorded(name, args, t, like, dispatch.scope())


@functools.lru_cache(maxsize=4096)
def _recorded(name: str, args: tuple, t: pt.Target, like, scope: tuple) -> bool:
    tpl, _, _, keys = _workload(name, args if like is None else like, t)
    spellings = tpl.spellings(args)
    if dispatch.lookup(spellings, keys):
        return True
    with dispatch.apply_history_best():
        return bool(dispatch.lookup(spellings, keys))


def nominal_rows(rows: int, cols: int, t: pt.Target) -> int:
    """The row count whose config serves every count on the same side of the
    last-level cache as ``rows``: 4096 (the shipped records' rows) or the fewest that
    outgrow it; 64, or the most that fit, below."""
    fit = t.l3_bytes // (4 * max(cols, 1))
    if rows > fit:
        return max(4096, fit + 1)
    return max(1, min(64, fit))


def _any_rows(tpl, cfg, args: tuple, t: pt.Target) -> pt.Module:
    """``module``'s builder of ``rows_module``: the template with its rows a size."""
    s, tensors = tpl.func(cfg, pt.var("rows"), *args[1:])
    return pt.build(s, tensors, target=t, name=tpl.name)


def best_config(tpl, args: tuple, t: pt.Target):
    """The config ``module`` builds: the records in scope, else the user's and the
    shipped ones, else the template's default."""
    if dispatch.lookup(tpl.spellings(args), tpl.record_keys(args, t)):
        return tpl.best_config(*args, target=t)
    with dispatch.apply_history_best():
        return tpl.best_config(*args, target=t)


def planned_op(body):
    """An operator's body with its calls planned (``pypto.torch_plan``: replayed from
    the arguments' shapes, dtypes and scalars), per ``apply_history_best`` scope (its
    records choose the module)."""
    return planned(body, scope=dispatch.scope)


def check_finite(what: str, value: float) -> None:
    """``ValueError`` naming ``what`` (``"rms_norm: eps"``) for a NaN or infinite value."""
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value}")


def check_dim(name: str, dim: int, rank: int) -> None:
    """``IndexError`` unless ``dim`` names a dimension of a ``rank``-d tensor (a 0-d
    one takes -1 and 0, as PyTorch's softmax)."""
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise IndexError(f"{name}: dim {dim} is out of range for a {rank}-d tensor")


def rows_cols(x: torch.Tensor) -> tuple[int, int]:
    cols = x.shape[-1] if x.dim() else 1
    return (x.numel() // cols if cols else 0), cols


def check_vector(w: torch.Tensor, cols: int, dtype: str, name: str, of: str = "x"):
    got = dtype_name(w, name, allowed=ROW_DTYPES)
    if tuple(w.shape) != (cols,):
        raise ValueError(f"{name}: shape {tuple(w.shape)}, expected ({cols},) (the last dim of x)")
    if got != dtype:
        raise TypeError(f"{name}: dtype {w.dtype} differs from {of}'s ({dtype})")


def norm_params(dtype: str, name: str, cols: int, weight: torch.Tensor, *bias) -> str:
    """The dtype of a norm's weight (and bias), checked against x's ``dtype`` and
    ``cols``: x's own, or float32 beside bfloat16 or float16 x (a float32 module's
    parameters under autocast, as PyTorch's norms take them); both of one dtype."""
    given = [(weight, "weight", "torch.ones"), *((b, "bias", "torch.zeros") for b in bias)]
    for t, n, like in given:
        if t is None:  # F.layer_norm's and F.rms_norm's may be; the operators' schemas say not
            raise TypeError(f"{name}: {n} is None; pass {like}({cols}) for none")
    wdt = dtype_name(weight, f"{name}: weight", allowed=ROW_DTYPES)
    if not (wdt == "float32" and dtype in ("bfloat16", "float16")):
        wdt = dtype
    check_vector(weight, cols, wdt, f"{name}: weight")
    for b in bias:  # layer_norm's
        check_vector(b, cols, wdt, f"{name}: bias", of="weight" if wdt != dtype else "x")
    return wdt


def call(name: str, args: tuple, inputs: list, out_shapes: list, dtype, shaped=(), rows=False):
    """Run template ``name``'s module on ``inputs`` into fresh outputs of ``out_shapes``
    and ``dtype`` (one name for all, or one per output); ``shaped``: the shapes the
    first outputs are returned in (allocated so, the kernel writing a view of its own
    shape: the caller gets a tensor that is no view, which autograd lets ``h += r``
    change in place); ``rows``: a row-wise template's module for any row count
    (``rows_module``)."""
    dts = [
        getattr(torch, d) for d in ([dtype] * len(out_shapes) if isinstance(dtype, str) else dtype)
    ]
    whole = [empty(tuple(sh), dt) for sh, dt in zip(shaped, dts)]
    outs = [o.view(sh) for o, sh in zip(whole, out_shapes)]
    outs += [empty(sh, dt) for sh, dt in zip(out_shapes[len(whole) :], dts[len(whole) :])]
    if all(o.numel() for o in outs):
        run((rows_module if rows else module)(name, args), inputs, outs)
    else:  # no rows: the other outputs are sums over none (a norm's weight gradient)
        for o in outs:
            o.zero_()
    return whole + outs[len(whole) :]


def flat(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    return t.contiguous().reshape(rows, cols)


def check_like(t: torch.Tensor, ref: torch.Tensor, what: str, ref_name: str) -> None:
    """``ValueError`` unless ``t`` has ``ref``'s shape (a gradient of the wrong shape with
    as many elements must not be reshaped into place), ``TypeError`` unless its dtype."""
    if not isinstance(t, torch.Tensor):
        got = "None" if t is None else type(t).__name__
        raise TypeError(f"{what}: expected a torch.Tensor, got {got}")
    if tuple(t.shape) != tuple(ref.shape):
        raise ValueError(
            f"{what}: shape {tuple(t.shape)} differs from {ref_name}'s {tuple(ref.shape)}"
        )
    if t.dtype != ref.dtype:
        raise TypeError(f"{what}: dtype {t.dtype} differs from {ref_name}'s {ref.dtype}")


_AUTOCAST_CPU = torch._C.DispatchKey.AutocastCPU


def run_in_autocast_dtype(name: str) -> None:
    """Under ``torch.autocast("cpu", dtype=...)`` the operator ``pypto::name`` runs in
    the region's dtype, as PyTorch's lower-precision operators do (its SDPA, linear):
    floating tensor arguments cast to it (float64 left alone; autograd sees the casts),
    then the operator called with autocast off::

        with torch.autocast("cpu", dtype=torch.bfloat16):
            ops.attention(q32, k32, v32)    ->   attention(bf16(q32), bf16(k32), bf16(v32))
    """
    overload = getattr(torch.ops.pypto, name).default
    keys = torch._C.DispatchKeySet(_AUTOCAST_CPU)

    def eligible(a) -> bool:
        return isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float64

    def kernel(_keyset, *args, **kwargs):
        dt = torch.get_autocast_dtype("cpu")
        args = [a.to(dt) if eligible(a) and a.device.type == "cpu" else a for a in args]
        with torch._C._ExcludeDispatchKeyGuard(keys):
            return overload(*args, **kwargs)

    register_kernel(f"pypto::{name}", kernel, "AutocastCPU")


def sdpa_mask(m: torch.Tensor, q: torch.Tensor, scores: tuple, causal: bool) -> torch.Tensor:
    """Attention's ``attn_mask`` as a 4-d view (leading dims of 1 added), checked
    against the scores' shape ``[B, H, S, S_kv]``: each dim 1 or the scores'. A dim of
    stride 0 (an ``expand``ed mask, as a padding mask broadcast over the queries) is
    taken as the broadcast it is: its first entry, extent 1."""
    if causal:
        raise ValueError("attention: attn_mask and is_causal at once (as SDPA, refused)")
    if m.dtype != torch.bool:
        dtype_name(m, "attention: attn_mask", allowed=ROW_DTYPES)
        if m.dtype != q.dtype:
            raise TypeError(f"attention: attn_mask has dtype {m.dtype}, q has {q.dtype}")
    if spec_of(tuple(m.shape), scores, "bool") is None:
        raise ValueError(
            f"attention: attn_mask has shape {tuple(m.shape)}, which does not broadcast "
            f"to the scores' {scores} ([B, H, S, S_kv])"
        )
    m = m.reshape((1,) * (4 - m.dim()) + tuple(m.shape))
    return m[tuple(slice(0, 1) if m.stride(d) == 0 else slice(None) for d in range(4))]
