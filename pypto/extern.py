"""``pt.extern``: a tensor computed whole by a C function of your own (TVM's ``te.extern``).

    C = pt.extern((64, 64), [A, B], "my_kernel", C_SOURCE, name="C")

``C_SOURCE`` defines ``void my_kernel(const float* A, const float* B, float* C)``
(the inputs in the order given, then the output; each a pointer to the first
element of a whole, row-major buffer of the shape given; float16 and bfloat16 as
``uint16_t``). It must write every element of the output and read nothing outside
its inputs: pypto cannot see inside it.

What pypto sees is conservative: each element of ``C`` reads every element of every
input. The stage is a reduction over all of its inputs' elements, tensorized at its
outermost loop by an intrinsic whose body calls the function, so the dependence
analysis, the buffers and the in-bounds proof around it are those of any stage:

    for i, j: C[i, j] = sum_{a, b, c} A[a, b] * B[c]   (never run)
      ->  ext_my_kernel_<hash>(A, .., B, .., C, ..)  ->  my_kernel(A, B, C)

The stage runs at the root, whole, in one call: it has no loops to schedule, cannot be
attached, inlined or cached, and shapes are constants (the call passes no sizes). The
wrapper traps if a buffer it is given is not whole and row-major (the strides are
constants in the call, so the check folds away).
"""

from __future__ import annotations

import hashlib
import math

from .dtypes import dtype as dtype_info
from .errors import ScheduleError
from .expr import Const, cast
from .intrin import check_c_function, decl_tensor_intrin
from .loop_ir import c_identifier
from .reducers import sum as reduce_sum
from .tensor import Tensor, compute, placeholder, reduce_axis


def extern(shape, inputs, func: str, source: str, name: str = "extern", dtype: str = "float32"):
    """A tensor of ``shape`` and ``dtype`` written whole by the C function ``func``
    (defined in ``source``) from ``inputs`` (see the module docstring)."""
    if isinstance(shape, list) and shape and isinstance(shape[0], (list, tuple)):
        if len(shape) != 1:  # TVM's te.extern takes a list of output shapes
            raise ScheduleError(
                f"pt.extern {name}: one output, of one shape; got {len(shape)} shapes"
            )
        shape = shape[0]
    shape = _constant_shape(shape, f"pt.extern {name}")
    if not shape:
        raise ScheduleError(f"pt.extern {name}: the output needs at least one dimension")
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if not inputs or not all(isinstance(t, Tensor) for t in inputs):
        raise TypeError(f"pt.extern {name}: inputs must be a non-empty list of tensors")
    for t in inputs:
        _constant_shape(t.shape, f"pt.extern {name}: input {t.name}")
    dtype_info(dtype)  # a known dtype, else a clear error
    check_c_function(func, source, f"pt.extern {name}")
    # (pt_ names: no user function may have one, so none is hidden by a parameter)
    params = [placeholder(t.shape, t.dtype, name=f"pt_in{k}") for k, t in enumerate(inputs)]
    declared = compute(shape, _reads_all(params, dtype), name="pt_out", dtype=dtype)
    key = repr((func, source, [(t.dtype, tuple(t.shape)) for t in (*params, declared)]))
    wrapper = f"ext_{func}_{hashlib.sha256(key.encode()).hexdigest()[:8]}"  # one per C text
    text = _wrapper_source(wrapper, func, source, params, declared)
    intrin = decl_tensor_intrin(declared.op, wrapper, text, params)
    out = compute(shape, _reads_all(inputs, dtype), name=name, dtype=dtype)
    out.op.extern, out.op.extern_func = intrin, func
    return out


def _reads_all(tensors: list, dtype: str):
    """``fcompute`` of a reduction whose every instance reads every element of ``tensors``."""

    def body(*_):
        axes, factors = [], []
        for k, t in enumerate(tensors):
            rs = [reduce_axis((0, int(d.value)), name=f"e{k}_{j}") for j, d in enumerate(t.shape)]
            axes += rs
            factors.append(cast(dtype, t[tuple(rs)] if rs else t[()]))
        prod = factors[0]
        for f in factors[1:]:
            prod = prod * f
        return reduce_sum(prod, axis=axes) if axes else prod  # 0-d inputs: a plain read

    return body


def _wrapper_source(wrapper: str, func: str, source: str, params: list, out) -> str:
    """The intrinsic's C: the user's source, then a function with the tensor intrinsic
    calling convention (pointer and strides per operand) that calls ``func``."""
    args, names, checks = [], [], []
    for t in (*params, out):
        const = "" if t is out else "const "
        p = c_identifier(t.name)
        args.append(f"{const}{dtype_info(t.dtype).c_storage}* restrict {p}")
        dims = [int(d.value) for d in t.shape]
        for d in range(len(dims)):
            args.append(f"int64_t {p}_s{d}")
            if dims[d] > 1:  # (a dimension of one element has any stride: 0 is passed)
                checks.append(f"{p}_s{d} != {math.prod(dims[d + 1 :])}")
        names.append(p)
    guard = f"PT_SOURCE_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    lines = [f"#ifndef {guard}", f"#define {guard}", source, "#endif"]  # several externs'
    lines.append(f"static inline void {wrapper}({', '.join(args)}) {{")  # functions, one file
    if checks:  # whole row-major buffers, as the function expects (folded: constants)
        lines.append(f"  if ({' || '.join(checks)}) __builtin_trap();")
    lines += [f"  {func}({', '.join(names)});", "}", ""]
    return "\n".join(lines)


def _constant_shape(shape, what: str) -> tuple:
    shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
    out = []
    for d in shape:
        v = d.value if isinstance(d, Const) else d
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(
                f"{what}: shapes must be positive integer constants (the call passes no "
                f"sizes), got {d}"
            )
        out.append(v)
    return tuple(out)


def extern_of(stage):
    """The intrinsic calling a ``pt.extern`` stage's function, or None."""
    return getattr(stage.op, "extern", None)


def refuse_extern(stage, prim: str) -> None:
    """``prim`` on a ``pt.extern`` stage: refused, it is one call without loops."""
    if extern_of(stage) is not None:
        raise stage.error(
            prim, "a pt.extern stage is one call of its C function, computed whole at the "
            "root: it has no loops to schedule and cannot be attached"
        )  # fmt: skip


def refuse_extern_input(stage, prim: str) -> None:
    """``prim`` (inlining) on a stage a ``pt.extern`` stage reads: its function reads the
    buffer."""
    for st in stage.schedule.stages:
        if extern_of(st) is not None and any(t.op is stage.op for t in st.op.input_tensors):
            raise stage.error(
                prim, f"the pt.extern stage '{st.name}' reads {stage.name} through its C "
                "function, which needs the buffer"
            )  # fmt: skip
