"""Standard workloads: the shapes every built-in template is tuned, shipped and benchmarked at.

One home for them: ``pypto-tune all`` tunes them, ``benchmarks/`` measures
them, ``benchmarks/ship_records.sh`` made the shipped records from them. A
workload is data -- a template, its arguments, a weight (how much its time
counts: how many times a model runs it) -- and so is a list of them in a
JSON file (``load_workloads``)::

    [{"template": "matmul", "args": [512, 512, 512], "weight": 1},
     {"template": "conv2d_nchw", "args": [1, 64, 56, 56, 64, 3, 3, 1, 1], "dtype": "float32"}]

``pypto-tune list --shell [TEMPLATE ...]`` prints the standard
ones as shell words (template, comma-separated arguments, trials, exploration
trials, extra ``pypto-tune`` options) for scripts.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from dataclasses import dataclass

from .task import get_template


class WorkloadError(ValueError):
    """A workload (or a file of them) that cannot be tuned as written."""


def place_dtype(template: str, args, dtype: str, given: str = "'args'") -> tuple:
    """``args`` with ``dtype`` at the template's ``dtype`` parameter, the parameters
    between them at their defaults (conv2d_nchw's stride and padding). ``WorkloadError``
    when the template takes no dtype, when ``args`` already reach that parameter, or
    lack one before it; ``given`` names the arguments in the message (``--args``)."""
    params = list(inspect.signature(get_template(template).func).parameters.values())[1:]
    names = [q.name for q in params]
    if "dtype" not in names:
        raise WorkloadError(f"template {template!r} takes no dtype")
    pos = names.index("dtype")
    if len(args) > pos:
        raise WorkloadError(f"{given} already gives {names[pos]} ({args[pos]!r})")
    missing = [q.name for q in params[len(args) : pos] if q.default is inspect.Parameter.empty]
    if missing:
        raise WorkloadError(f"{given} lacks {', '.join(missing)} of {template!r}")
    return (*args, *(q.default for q in params[len(args) : pos]), dtype)


def _dims(args) -> str:
    return "x".join(str(a) for a in args)


def _cube_or_dims(args) -> str:
    return f"{args[0]}^3" if len(args) == 3 and len(set(args)) == 1 else _dims(args)


def _conv_label(args) -> str:
    """``64->128 56x56 s2``; a filter other than 3 x 3 is named (``1x1``), so that a
    model's 3 x 3 and 1 x 1 layers of one shape read apart."""
    n, c, h, w, k, kh, kw, stride, pad = args[:9]
    size = "" if (kh, kw) == (3, 3) else f" {kh}x{kw}"
    return f"{c}->{k} {h}x{w}{size} s{stride}"


def _depthwise_label(args) -> str:
    n, c, h, w, kh, kw, stride, pad = args[:8]
    return f"{c}ch {kh}x{kw} {h}x{w} s{stride}"


# template -> (display name, how its arguments read); templates not listed print their args
_LABELS = {
    "matmul": ("matmul", lambda a: _cube_or_dims(a[:3])),
    "batch_matmul": ("batch_matmul", lambda a: f"{a[0]}x{_cube_or_dims(a[1:4])}"),
    "dense_bias_gelu": ("dense+bias+gelu", lambda a: _dims(a[:3])),
    "conv2d_nchw": ("conv2d", _conv_label),
    "conv2d_nchw_winograd": ("conv2d winograd", _conv_label),
    "depthwise_conv2d_nchw": ("depthwise", _depthwise_label),
    "softmax": ("softmax", lambda a: _dims(a[:2])),
    "layernorm": ("layernorm", lambda a: _dims(a[:2])),
    "rmsnorm": ("rmsnorm", lambda a: _dims(a[:2])),
}


@dataclass(frozen=True)
class Workload:
    """One tuning workload: ``template(*args[, dtype])``, counted ``weight`` times.

    ``trials`` and ``explore`` are what the shipped records got (the model-guided
    total, and a random pass before it); ``measure`` overrides ``MeasureOption``
    fields for this workload (a slow kernel needs a longer timeout, fewer calls).
    """

    template: str
    args: tuple
    weight: float = 1.0
    dtype: str | None = None
    trials: int = 64
    explore: int = 0
    measure: tuple = ()  # (MeasureOption field, value) pairs

    @property
    def task_args(self) -> tuple:
        """The template's arguments, the dtype at its ``dtype`` parameter when one is given
        (``place_dtype``)."""
        return place_dtype(self.template, self.args, self.dtype) if self.dtype else self.args

    @property
    def label(self) -> str:
        """A short human name: ``matmul 512^3``, ``conv2d 64->64 56x56 s1``."""
        name, how = _LABELS.get(self.template, (self.template, _dims))
        try:
            text = f"{name} {how(self.args)}"
        except (IndexError, TypeError, ValueError):
            text = f"{name} {_dims(self.args)}"
        return f"{text} {self.dtype}" if self.dtype else text


# The shapes of the shipped records (tuning_logs/) and of the benchmark suite; then
# the PyTorch operators' kernels.
STANDARD: tuple[Workload, ...] = (
    Workload("matmul", (512, 512, 512), trials=48),
    Workload("matmul", (1024, 1024, 1024), trials=112),
    Workload("matmul", (2048, 2048, 2048), trials=48, measure=(("timeout", 30.0), ("number", 2))),
    Workload("matmul", (128, 3072, 768), trials=48),
    Workload("batch_matmul", (8, 256, 256, 256), trials=32),
    Workload("dense_bias_gelu", (128, 3072, 768), trials=48),
    # conv2d's micro-kernel knob (ukernel) is seen by the cost model only through the
    # partial tiles it leaves, so a random pass explores it before the model-guided one
    Workload("conv2d_nchw", (1, 64, 56, 56, 64, 3, 3, 1, 1), trials=225, explore=185),
    Workload("conv2d_nchw", (1, 64, 56, 56, 128, 3, 3, 2, 1), trials=250, explore=215),
    # the same 3 x 3 layers by Winograd tiles (4 products per output instead of 9)
    Workload("conv2d_nchw_winograd", (1, 64, 56, 56, 64, 3, 3, 1, 1), trials=64),
    Workload("conv2d_nchw_winograd", (1, 128, 28, 28, 128, 3, 3, 1, 1), trials=64),
    Workload("depthwise_conv2d_nchw", (1, 64, 56, 56, 3, 3, 1, 1), trials=32),
    Workload("softmax", (4096, 4096), trials=64),
    Workload("layernorm", (4096, 4096), trials=32),
    Workload("rmsnorm", (4096, 4096), trials=32),
    # int8 inference: a BERT-base feed-forward GEMM, raw and requantized
    Workload("dense", (128, 3072, 768), dtype="int8", trials=32),
    Workload("dense_requant", (128, 3072, 768), trials=32),
    # the PyTorch operators' kernels (autotune.torch), at the shapes their benchmarks use
    Workload("gelu", (4096, 4096), trials=32),
    Workload("attention", (1, 8, 1024, 64), trials=48),
    Workload("attention", (1, 8, 1024, 64, True), trials=48),
    Workload("moe", (512, 1024, 2816, 8, 2), trials=32),
    Workload("moe", (512, 1024, 2816, 8, 2), dtype="bfloat16", trials=24),
    Workload("softmax_fwd", (4096, 4096), trials=16),
    Workload("layernorm_fwd", (4096, 4096), trials=16),
    Workload("rmsnorm_fwd", (4096, 4096), trials=16),
    Workload("gelu_backward", (4096, 4096), trials=16),
    Workload("softmax_backward", (4096, 4096), trials=16),
    Workload("layernorm_backward", (4096, 4096), trials=16),
    Workload("rmsnorm_backward", (4096, 4096), trials=16),
)


def standard_workloads(templates=None) -> list[Workload]:
    """The standard workloads, of the given templates only (names; None: all).

    An unknown name raises ``WorkloadError`` naming the templates that have some."""
    if templates is None:
        return list(STANDARD)
    known = list(dict.fromkeys(w.template for w in STANDARD))
    unknown = [t for t in templates if t not in known]
    if unknown:
        raise WorkloadError(
            f"no standard workloads for {', '.join(map(repr, unknown))}; "
            f"templates with some: {', '.join(known)}"
        )
    return [w for w in STANDARD if w.template in templates]


_FIELDS = {"template", "args", "dtype", "weight"}


def _entry(i: int, d) -> Workload:
    where = f"workload {i}"
    if not isinstance(d, dict):
        raise WorkloadError(f"{where}: expected an object, got {type(d).__name__}")
    extra = sorted(set(d) - _FIELDS)
    if extra:
        raise WorkloadError(f"{where}: unknown field(s) {extra}; allowed: {sorted(_FIELDS)}")
    tpl, args = d.get("template"), d.get("args")
    if not isinstance(tpl, str) or not tpl:
        raise WorkloadError(f"{where}: 'template' must be a template name, got {tpl!r}")
    if not isinstance(args, list) or not all(
        isinstance(a, (int, float, str)) and not isinstance(a, bool) for a in args
    ):
        raise WorkloadError(f"{where} ({tpl}): 'args' must be a list of numbers, got {args!r}")
    dtype = d.get("dtype")
    if dtype is not None and not isinstance(dtype, str):
        raise WorkloadError(f"{where} ({tpl}): 'dtype' must be a string, got {dtype!r}")
    weight = d.get("weight", 1)
    if (
        isinstance(weight, bool)
        or not isinstance(weight, (int, float))
        or not math.isfinite(weight)
        or weight <= 0
    ):
        raise WorkloadError(f"{where} ({tpl}): 'weight' must be a positive number, got {weight!r}")
    if dtype is not None:
        try:
            place_dtype(tpl, args, dtype)
        except KeyError:
            pass  # an unknown template: refused with the others' names where it is looked up
        except WorkloadError as e:
            raise WorkloadError(f"{where} ({tpl}): 'dtype' {dtype!r}: {e}") from None
    return Workload(tpl, tuple(args), weight=float(weight), dtype=dtype)


def parse_workloads(data) -> list[Workload]:
    """Workloads from JSON data: a list of ``{"template", "args", "dtype"?, "weight"?}``."""
    if not isinstance(data, list) or not data:
        raise WorkloadError("a workload list must be a non-empty JSON list of objects")
    return [_entry(i, d) for i, d in enumerate(data)]


def load_workloads(path: str) -> list[Workload]:
    """Workloads from a JSON file (see ``parse_workloads``); errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise WorkloadError(f"cannot read workloads from {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WorkloadError(f"{path}: not valid JSON ({e})") from None
    try:
        return parse_workloads(data)
    except WorkloadError as e:
        raise WorkloadError(f"{path}: {e}") from None


def merge_duplicates(workloads) -> list[Workload]:
    """One workload per (template, arguments, dtype), in first-seen order, its weight the
    sum of the duplicates' (a model that runs a layer twice counts its time twice)."""
    merged: dict = {}
    for w in workloads:
        key = (w.template, w.task_args)
        if key in merged:
            merged[key] = dataclasses.replace(merged[key], weight=merged[key].weight + w.weight)
        else:
            merged[key] = w
    return list(merged.values())


def shell_lines(workloads) -> list[str]:
    """One line per workload: ``template args trials explore [options...]``."""
    out = []
    for w in workloads:
        opts = " ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in w.measure)
        words = [w.template, ",".join(map(str, w.task_args)), str(w.trials), str(w.explore)]
        out.append(" ".join(words + ([opts] if opts else [])))
    return out
