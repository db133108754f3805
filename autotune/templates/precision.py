"""What the built-in templates do with their ``dtype`` argument (API.md 9).

``matmul``, ``batch_matmul``, ``conv2d_nchw`` and ``dense`` take a last argument
``dtype`` (one of ``DTYPES``), part of the workload. One rule per dtype says what
the output is and how a product is written:

    float32, float64       out[..] = sum(a * b)                    (same dtype)
    float16, bfloat16      out[..] = sum(a * b)                    (16-bit out; lowering
                                                                    accumulates in float32)
    int8, uint8            out[..] = sum(int32(a) * int32(b))      (int32 out, exact)

The references compute in float64 (int64 for integers) and convert to the output dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import pypto as pt
from pypto.dtypes import accumulator_dtype, numpy_dtype
from pypto.tensor import PlaceholderOp


@dataclass(frozen=True)
class Precision:
    name: str
    out: str  # the dtype of the output
    widen: str | None  # the dtype each operand is cast to before multiplying (None: none)


_RULES = {
    p.name: p
    for p in (
        Precision("float32", "float32", None),
        Precision("float64", "float64", None),
        Precision("float16", "float16", None),
        Precision("bfloat16", "bfloat16", None),
        Precision("int8", "int32", "int32"),
        Precision("uint8", "int32", "int32"),
    )
}
DTYPES = tuple(_RULES)


def precision(dtype: str, template: str) -> Precision:
    """The rule for ``dtype``; a ValueError naming the template and the choices otherwise."""
    rule = _RULES.get(str(dtype))
    if rule is None:
        raise ValueError(f"{template}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return rule


def product(p: Precision, a, b):
    """``a * b`` as the rule multiplies (integers widened first)."""
    if p.widen is None:
        return a * b
    return pt.cast(p.widen, a) * pt.cast(p.widen, b)


def accumulated(p: Precision, prod):
    """A product as a reduction into the output accumulates it: 16-bit floats widened
    to float32 (what lowering and ``cache_write`` make of ``sum(a * b)``)."""
    return pt.cast(accumulator_dtype(p.out), prod)


def zero(p: Precision):
    """The zero of the inputs' dtype (padding)."""
    return pt.const(0, p.name)


def elem_bytes(p: Precision) -> int:
    return numpy_dtype(p.name).itemsize


def reference(value64: np.ndarray, input_dtype) -> np.ndarray:
    """A float64 (or int64) reference result in the output dtype of inputs of ``input_dtype``."""
    out = _RULES[np.dtype(input_dtype).name].out
    return np.asarray(value64).astype(numpy_dtype(out))


def widened(a: np.ndarray) -> np.ndarray:
    """``a`` in the reference's dtype: int64 for integers (exact), else float64."""
    return a.astype(np.int64 if a.dtype.kind in "iu" else np.float64)


# ---------------------------------------------------------------- element-wise and row-wise
#
# gelu, softmax, layernorm and rmsnorm (forward and backward) store 16-bit floats and
# compute in float32: each input is read through a cast (an inlined stage), each
# output rounded once:
#
#     Y[i, j] = f(X[i, j])    ->    Y[i, j] = bfloat16(f(float(X[i, j])))

ROW_FLOATS = ("float32", "float64", "bfloat16", "float16")
STORAGE_FLOATS = ("bfloat16", "float16")  # stored in 16 bits, computed in float32


def check_row_dtype(template: str, dtype: str) -> str:
    """The dtype the template computes in for storage ``dtype`` (float32 for 16-bit
    floats); a ValueError naming the template and the choices otherwise."""
    if dtype not in ROW_FLOATS:
        raise ValueError(f"{template}: dtype must be one of {', '.join(ROW_FLOATS)}, got {dtype!r}")
    return "float32" if dtype in ("bfloat16", "float16") else dtype


def widen(T):
    """``T`` as read in float32 when it is stored in 16 bits (a cast stage, for
    ``inline_widened``), else ``T`` itself."""
    if str(T.dtype) not in ("bfloat16", "float16"):
        return T
    return pt.compute(T.shape, lambda *ix: pt.cast("float32", T[ix]), name=T.name + "_f32")


def inline_widened(s, tensors) -> None:
    """Inline the cast stages ``widen`` made (the others are placeholders)."""
    for T in tensors:
        if not isinstance(T.op, PlaceholderOp):
            s[T].compute_inline()


def widened_once(s, T) -> None:
    """A widened operand (``widen``) computed once, vectorized, where it is a stage: read
    where the product needs it, float16's conversion of a loop-invariant A kept gcc from
    vectorizing the column loop (1 x 4096 x 4096: 34 ms, against 1.8 for bfloat16)."""
    if not isinstance(T.op, PlaceholderOp):
        s[T].vectorize(s[T].op.axis[-1])


def rounded(value, dtype: str):
    """``value`` (computed in float32 for a 16-bit ``dtype``) in the storage ``dtype``."""
    return pt.cast(dtype, value) if str(value.dtype) != dtype else value
