"""Checks of a call's arguments before C sees them, and the errors a kernel reports.

Every check names the argument: an array that is not an array (``TypeError``), arrays
that overlap an output, a temporary too large for these sizes (``MemoryError``), and the
kernel's status codes turned into Python exceptions.
"""

from __future__ import annotations

import numpy as np

from .c_helpers import MAX_BYTES
from .expr import Const, substitute
from .simplify import simplify


def raise_status(name: str, status: int):
    if status == -1:
        raise MemoryError(f"{name}: could not allocate its temporary buffers")
    if status == -3:
        raise MemoryError(f"{name}: the byte size of a temporary buffer overflows for these sizes")
    if status == -4:
        raise ZeroDivisionError(
            f"{name}: an integer division by a divisor computed at run time found 0; "
            "the outputs are incomplete"
        )
    if status == -2:
        raise IndexError(
            f"{name}: an index read from data (such as X[i] in H[X[i]]) or not affine "
            "is out of range; the outputs are incomplete"
        )
    raise RuntimeError(f"{name}: the kernel failed with status {status}")


def check_temporary(name: str, t, values: dict):
    # t: a module.Temp (its name, element bytes and shape)
    """MemoryError before the call when a temporary buffer's byte size cannot be had."""
    nbytes = t.elem_bytes
    for d in t.shape:
        v = simplify(substitute(d, values))
        nbytes *= max(v.value, 0) if isinstance(v, Const) else 1
    if nbytes > MAX_BYTES:
        raise MemoryError(f"{name}: temporary buffer {t.name} would need {nbytes} bytes")


def fmt_shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def as_array(a, name: str) -> np.ndarray:
    """A numpy view of an argument: an ndarray as it is, anything with ``__dlpack__``
    (a PyTorch CPU tensor, ...) through DLPack, without copying."""
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "__dlpack__"):
        try:
            return np.from_dlpack(a)
        except Exception as e:  # noqa: BLE001 - report any exporter failure the same way
            raise TypeError(f"argument {name}: cannot view it through __dlpack__: {e}") from None
    raise TypeError(f"argument {name}: expected a numpy array, got {type(a).__name__}")


def check_overlap(arrays, specs, written):
    spans = []
    for arr, (name, _, _), w in zip(arrays, specs, written):
        if arr.nbytes:
            spans.append((arr.ctypes.data, arr.ctypes.data + arr.nbytes, name, w))
    for i, (a0, a1, an, aw) in enumerate(spans):
        for b0, b1, bn, bw in spans[i + 1 :]:
            if (aw or bw) and a0 < b1 and b0 < a1:
                raise ValueError(
                    f"arguments {an} and {bn} overlap in memory; a kernel's "
                    "outputs must not alias its other arguments"
                )
