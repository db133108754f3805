"""pypto: a schedule-separated tensor compiler that emits C.

import pypto as pt
A = pt.placeholder((n, 64), "float32", name="A")
...
s = pt.create_schedule(C.op)
mod = pt.build(s, [A, B, C], target="host")
"""

from ._version import __version__
from .dtypes import DTYPES
from .errors import BuildEnvironmentError, BuildError, PyptoError, ScheduleError, TargetError
from .errors import tvm_only as _tvm_only
from .explain import explain
from .expr import Expr, Var, cast, const, if_then_else, select
from .extern import extern
from .intrin import TensorIntrin, decl_tensor_intrin
from .lowering import lower
from .ops import (
    abs,
    acos,
    acosh,
    all,
    any,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    ceil,
    clz,
    copysign,
    cos,
    cosh,
    erf,
    exp,
    exp2,
    expm1,
    fast_erf,
    fast_exp,
    floor,
    floordiv,
    floormod,
    fmod,
    hypot,
    indexdiv,
    indexmod,
    isfinite,
    isinf,
    isnan,
    log,
    log1p,
    log2,
    log10,
    logical_and,
    logical_not,
    logical_or,
    max_value,
    min_value,
    nearbyint,
    nextafter,
    popcount,
    power,
    rsqrt,
    shift_left,
    shift_right,
    sigmoid,
    sin,
    sinh,
    size_var,
    sqrt,
    tan,
    tanh,
    trunc,
    truncdiv,
    truncmod,
)
from .ops import power as pow
from .ops import round_ as round
from .reducers import comm_reducer, max, min, sum
from .runtime import Module, build, get_num_threads, load_module, set_num_threads
from .scalar_args import var
from .schedule import Schedule, Stage, create_schedule
from .target import Target
from .tensor import IterVar, Tensor, compute, placeholder, rdom, reduce_axis
from .validate import ValidationReport, validate

__all__ = [
    "DTYPES", "BuildError", "BuildEnvironmentError", "PyptoError", "ScheduleError", "TargetError",
    "Expr", "Var", "IterVar", "Tensor",
    "Schedule", "Stage", "Module", "Target", "__version__",
    "abs", "cast", "ceil", "const", "erf", "exp", "fast_erf", "fast_exp", "floor", "if_then_else",
    "log", "pow", "round", "rsqrt",
    "select", "sigmoid", "sqrt", "tanh", "max", "min", "sum", "comm_reducer",
    "var", "placeholder", "compute", "reduce_axis", "rdom", "create_schedule", "lower", "build",
    "load_module", "set_num_threads", "get_num_threads", "explain", "TensorIntrin",
    "decl_tensor_intrin", "extern",
    "validate", "ValidationReport",
    # TVM's tir helpers (pypto.ops)
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "exp2", "expm1", "log2", "log10", "log1p", "trunc", "nearbyint", "atan2", "fmod", "hypot",
    "copysign", "nextafter", "isnan", "isinf", "isfinite", "power", "max_value", "min_value",
    "all", "any", "floordiv", "floormod", "indexdiv", "indexmod", "truncdiv", "truncmod",
    "size_var", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
    "shift_right", "logical_and", "logical_or", "logical_not", "popcount", "clz",
]  # fmt: skip


def __getattr__(name):  # only for names pypto lacks: TVM's GPU ones get a hint
    raise _tvm_only("pt", name, "module 'pypto'")
