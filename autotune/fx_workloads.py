"""A PyTorch module's tuning workloads, found by tracing it with ``torch.fx``.

    ws, not_covered = from_torch_module(model, (torch.randn(1, 3, 224, 224),))
    # ws: [Workload("conv2d_nchw", (1, 3, 224, 224, 64, 7, 7, 2, 3), weight=1.0), ...]
    # not_covered: {"BatchNorm2d": 20, "relu": 17, ...}

``torch.fx.symbolic_trace`` gives the graph and ``ShapeProp`` the shape of
every value for the example inputs. Each operator a rule of ``_MODULE_RULES``,
``_FUNCTION_RULES`` or ``_METHOD_RULES`` knows becomes a template with its
arguments (conv2d with groups 1 or depthwise, linear and matmul, layer norm,
rms norm, GELU, softmax over the last axis, scaled dot-product attention as
``torch.ops.pypto.attention`` calls the template, in two calls when causal with
fewer keys than queries; a linear layer with bias whose only consumer is an
exact GELU becomes one ``dense_bias_gelu``); equal workloads merge, their
weights summed. Every
other call is counted in ``not_covered`` under its name, with the reason when
a known operator has an unsupported form (``Conv2d (dilation 2)``). Float32
only: other dtypes are not covered.
"""

from __future__ import annotations

import math
import operator
from collections import Counter

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from pypto.target import as_target

from .templates.attention import sdpa_parts
from .templates.attention_mask import spec_of
from .templates.winograd import winograd_pays
from .workloads import Workload, merge_duplicates


class _NotCovered(Exception):
    """An operator of a known kind in a form no template takes (the message says which)."""


def _shape(node) -> tuple:
    meta = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
    if meta is None or not hasattr(meta, "shape"):
        raise _NotCovered("shape unknown")
    if meta.dtype != torch.float32:
        raise _NotCovered(str(meta.dtype).replace("torch.", ""))
    return tuple(int(d) for d in meta.shape)


def _pair(v, what) -> int:
    a, b = (v, v) if isinstance(v, int) else tuple(v)
    if a != b:
        raise _NotCovered(f"{what} {a}x{b}")
    return int(a)


def _conv(x, weight_shape, stride, padding, dilation, groups) -> tuple:
    n, c, h, w = _shape(x)
    k, _, r, s = weight_shape
    if _pair(dilation, "dilation") != 1:
        raise _NotCovered(f"dilation {_pair(dilation, 'dilation')}")
    if isinstance(padding, str):
        raise _NotCovered(f"padding {padding!r}")
    st, pad = _pair(stride, "stride"), _pair(padding, "padding")
    if groups == 1:
        return "conv2d_nchw", (n, c, h, w, k, r, s, st, pad)
    if groups == c == k:
        return "depthwise_conv2d_nchw", (n, c, h, w, r, s, st, pad)
    raise _NotCovered(f"groups {groups}")


def _conv_module(node, m: nn.Conv2d):
    return _conv(node.args[0], tuple(m.weight.shape), m.stride, m.padding, m.dilation, m.groups)


def _rows_cols(x) -> tuple:
    shape = _shape(x)
    return math.prod(shape[:-1]), shape[-1]


def _linear(x, out_features: int) -> tuple:
    m, k = _rows_cols(x)
    return "matmul", (m, out_features, k)


def _norm(template):
    def rule(x, normalized_shape) -> tuple:
        axes = len(tuple(normalized_shape))
        if axes != 1:
            raise _NotCovered(f"normalized over {axes} axes")
        return template, _rows_cols(x)

    return rule


_layernorm, _rmsnorm = _norm("layernorm"), _norm("rmsnorm")


def _gelu(x, approximate) -> tuple:
    rows, cols = _rows_cols(x)
    return "gelu", (rows, cols) if approximate == "none" else (rows, cols, approximate)


def _softmax(x, dim) -> tuple:
    if dim not in (-1, len(_shape(x)) - 1):
        raise _NotCovered(f"dim {dim} (not the last)")
    return "softmax", _rows_cols(x)


def _matmul(a, b) -> tuple:
    sa, sb = _shape(a), _shape(b)
    if len(sa) == 2 and len(sb) == 2:
        return "matmul", (sa[0], sb[1], sa[1])
    if len(sa) >= 3 and sa[:-2] == sb[:-2]:
        return "batch_matmul", (math.prod(sa[:-2]), sa[-2], sb[-1], sa[-1])
    raise _NotCovered(f"shapes {sa} @ {sb}")


def _sdpa(node) -> tuple:
    q, k, v = node.args[:3]
    extra = dict(zip(("attn_mask", "dropout_p", "is_causal", "scale"), node.args[3:]))
    extra.update(node.kwargs)
    if extra.get("dropout_p", 0.0):
        raise _NotCovered("dropout")
    sq, sk, sv = _shape(q), _shape(k), _shape(v)
    if len(sq) != 4 or len(sk) != 4 or len(sv) != 4 or sk[:3] != sv[:3] or sq[3] != sk[3]:
        raise _NotCovered(f"shapes {sq}, {sk}, {sv}")
    if sk[1] != sq[1] and not (extra.get("enable_gqa") and sq[1] % sk[1] == 0):
        raise _NotCovered(f"{sk[1]} key heads for {sq[1]} query heads")
    b, h, s, d = sq
    causal = bool(extra.get("is_causal"))
    mask = _mask_spec(extra.get("attn_mask"), (b, h, s, sk[2]), causal)
    parts = sdpa_parts(b, h, s, d, sk[1], sk[2], sv[3], causal, extra.get("scale"), "float32", mask)
    return [("attention", args) for _, _, args in parts]  # causal, fewer keys: two calls


def _mask_spec(mask, scores: tuple, causal: bool):
    """The attention template's ``mask`` argument for SDPA's ``attn_mask`` node (bool or
    float32, broadcast to the scores' shape), or None without one."""
    if mask is None:
        return None
    meta = mask.meta.get("tensor_meta") if isinstance(mask, fx.Node) else None
    if causal or meta is None or meta.dtype not in (torch.bool, torch.float32):
        raise _NotCovered("this mask (unknown, of another dtype, or with is_causal)")
    spec = spec_of(tuple(meta.shape), scores, "bool" if meta.dtype == torch.bool else "float")
    if spec is None:
        raise _NotCovered(f"a mask of shape {tuple(meta.shape)} for scores {scores}")
    return spec


def _arg(node, i, name, default=None):
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


# module type -> (node, module) -> (template, args)
_MODULE_RULES = {
    nn.Conv2d: _conv_module,
    nn.Linear: lambda node, m: _linear(node.args[0], m.out_features),
    nn.LayerNorm: lambda node, m: _layernorm(node.args[0], m.normalized_shape),
    nn.Softmax: lambda node, m: _softmax(node.args[0], m.dim),
    nn.RMSNorm: lambda node, m: _rmsnorm(node.args[0], m.normalized_shape),
    nn.GELU: lambda node, m: _gelu(node.args[0], m.approximate),
}

# function -> node -> (template, args), or a list of them for an operator that runs as
# several calls (SDPA, causal with fewer keys than queries: two)
_FUNCTION_RULES = {
    F.conv2d: lambda n: _conv(
        n.args[0],
        _shape(_arg(n, 1, "weight")),
        _arg(n, 3, "stride", 1),
        _arg(n, 4, "padding", 0),
        _arg(n, 5, "dilation", 1),
        _arg(n, 6, "groups", 1),
    ),
    F.linear: lambda n: _linear(n.args[0], _shape(_arg(n, 1, "weight"))[0]),
    F.layer_norm: lambda n: _layernorm(n.args[0], _arg(n, 1, "normalized_shape")),
    F.rms_norm: lambda n: _rmsnorm(n.args[0], _arg(n, 1, "normalized_shape")),
    F.gelu: lambda n: _gelu(n.args[0], n.kwargs.get("approximate", "none")),
    F.softmax: lambda n: _softmax(n.args[0], _arg(n, 1, "dim")),
    torch.softmax: lambda n: _softmax(n.args[0], _arg(n, 1, "dim")),
    torch.matmul: lambda n: _matmul(n.args[0], n.args[1]),
    operator.matmul: lambda n: _matmul(n.args[0], n.args[1]),
    torch.bmm: lambda n: _matmul(n.args[0], n.args[1]),
    F.scaled_dot_product_attention: _sdpa,
}

# tensor method name -> node -> (template, args)
_METHOD_RULES = {
    "softmax": lambda n: _softmax(n.args[0], _arg(n, 1, "dim")),
    "matmul": lambda n: _matmul(n.args[0], n.args[1]),
}

# calls that move no data worth tuning (shape bookkeeping): neither covered nor reported
_IGNORED_FUNCTIONS = {getattr, operator.getitem}
_IGNORED_METHODS = {"size", "dim"}


def _has_bias(node, gm) -> bool:
    if node.op == "call_module":
        return getattr(gm.get_submodule(node.target), "bias", None) is not None
    return _arg(node, 2, "bias") is not None


def _fused_gelu(node, gm, template, args):
    """The exact GELU node that alone consumes ``node`` when ``node`` is a linear layer
    with bias (together they are one ``dense_bias_gelu``), else None."""
    if template != "matmul" or len(node.users) != 1 or not _is_linear(node, gm):
        return None
    (user,) = node.users
    if not _has_bias(node, gm) or user.op not in ("call_module", "call_function"):
        return None
    rule, _ = _rule(user, gm)
    try:
        return user if rule is not None and rule(user) == ("gelu", args[:2]) else None
    except _NotCovered:
        return None


def _is_linear(node, gm) -> bool:
    if node.op == "call_module":
        return isinstance(gm.get_submodule(node.target), nn.Linear)
    return node.op == "call_function" and node.target is F.linear


def _rule(node, gm):
    """(rule, name) for a call node; rule None when no template covers its operator."""
    if node.op == "call_module":
        m = gm.get_submodule(node.target)
        rule = _MODULE_RULES.get(type(m))
        return (lambda n: rule(n, m)) if rule else None, type(m).__name__
    if node.op == "call_function":
        return _FUNCTION_RULES.get(node.target), getattr(node.target, "__name__", str(node))
    return _METHOD_RULES.get(node.target), str(node.target)


def from_torch_module(
    module: nn.Module, example_inputs: tuple, target="host"
) -> tuple[list[Workload], dict[str, int]]:
    """The workloads of ``module`` run on ``example_inputs`` (a tuple of tensors), and the
    operators no template covers with how often each runs. A convolution that Winograd
    tiles compute with fewer multiplies on ``target``'s vectors (``winograd_pays``: 3 x 3
    at stride 1 on images wide enough to fill them) is a ``conv2d_nchw_winograd``
    workload, as in the built-in resnet18.

    Raises ``TypeError`` when ``module`` is not an ``nn.Module`` or fx cannot trace it."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"from_torch_module: expected a torch.nn.Module, got {type(module)}")
    lanes = as_target(target).vector_lanes("float32")
    try:
        gm = fx.symbolic_trace(module)
    except Exception as e:  # noqa: BLE001 - fx raises many kinds; the message says why
        raise TypeError(f"from_torch_module: torch.fx cannot trace the module: {e}") from e
    with torch.no_grad():
        ShapeProp(gm).propagate(*example_inputs)
    found, missing, fused = [], Counter(), set()
    for node in gm.graph.nodes:
        if node.op not in ("call_module", "call_function", "call_method") or node in fused:
            continue
        if node.target in _IGNORED_FUNCTIONS or node.target in _IGNORED_METHODS:
            continue
        rule, name = _rule(node, gm)
        if rule is None:
            missing[name] += 1
            continue
        try:
            calls = rule(node)
        except _NotCovered as e:
            missing[f"{name} ({e})"] += 1
            continue
        for template, args in calls if isinstance(calls, list) else [calls]:
            gelu = _fused_gelu(node, gm, template, args)
            if gelu is not None:  # X W^T + b, then GELU: one kernel
                fused.add(gelu)
                template = "dense_bias_gelu"
            if template == "conv2d_nchw" and winograd_pays(tuple(args), lanes):
                template = "conv2d_nchw_winograd"
            found.append(Workload(template, tuple(args)))
    return merge_duplicates(found), dict(missing)
