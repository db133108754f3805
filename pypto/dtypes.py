"""The dtype table: one row per supported element type.

Every other module asks this table (never a chain of ``if``) what a dtype
is stored as in C, what it is computed in, and how numpy spells it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    c_storage: str  # the C type of a buffer element
    c_compute: str  # the C type arithmetic happens in
    numpy: str
    bits: int
    kind: str  # "float" | "int" | "uint" | "bool"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)


_TABLE = {
    d.name: d
    for d in (
        DType("float32", "float", "float", "float32", 32, "float"),
        DType("float64", "double", "double", "float64", 64, "float"),
        # float16 is a storage type: loads widen to float, stores narrow.
        DType("float16", "_Float16", "float", "float16", 16, "float"),
        DType("int8", "int8_t", "int32_t", "int8", 8, "int"),
        DType("int32", "int32_t", "int32_t", "int32", 32, "int"),
        DType("int64", "int64_t", "int64_t", "int64", 64, "int"),
        DType("uint8", "uint8_t", "int32_t", "uint8", 8, "uint"),
        DType("bool", "uint8_t", "int", "bool", 1, "bool"),
    )
}

DTYPES = tuple(n for n in _TABLE if n != "bool")
INDEX = "int64"


def dtype(name: str | np.dtype | type) -> DType:
    """Look up a dtype by name (or numpy dtype); raise TypeError for unknown ones."""
    key = np.dtype(name).name if not isinstance(name, str) else name
    try:
        return _TABLE[key]
    except KeyError:
        raise TypeError(f"unsupported dtype {name!r}; supported: {', '.join(DTYPES)}") from None


def check(name) -> str:
    """Return the canonical dtype name, or raise TypeError."""
    return dtype(name).name
