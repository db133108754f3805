"""The dtype table: one row per supported element type.

Every other module asks this table (never a chain of ``if``) what a dtype
is stored as in C, what it is computed in, and how numpy spells it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

try:  # numpy's bfloat16 (an optional dependency: the bfloat16 extra)
    import ml_dtypes
except ImportError:  # pragma: no cover - exercised where ml_dtypes is absent
    ml_dtypes = None


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
        # float16 is a storage type: loads widen to float, stores narrow; its bits are
        # kept in a uint16_t, converted by helpers the C compiler vectorizes
        DType("float16", "uint16_t", "float", "float16", 16, "float"),
        # bfloat16 too (C has no portable type for it)
        DType("bfloat16", "uint16_t", "float", "bfloat16", 16, "float"),
        DType("int8", "int8_t", "int32_t", "int8", 8, "int"),
        DType("int16", "int16_t", "int32_t", "int16", 16, "int"),
        DType("int32", "int32_t", "int32_t", "int32", 32, "int"),
        DType("int64", "int64_t", "int64_t", "int64", 64, "int"),
        DType("uint8", "uint8_t", "int32_t", "uint8", 8, "uint"),
        DType("uint32", "uint32_t", "uint32_t", "uint32", 32, "uint"),
        DType("uint64", "uint64_t", "uint64_t", "uint64", 64, "uint"),
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


def value_range(name: str) -> tuple[int, int]:
    """The values an integer dtype holds: int8 (-128, 127), uint32 (0, 2**32 - 1)."""
    d = dtype(name)
    if d.kind == "uint":
        return (0, 2**d.bits - 1)
    return (-(2 ** (d.bits - 1)), 2 ** (d.bits - 1) - 1)


def compute_bits(name: str) -> int:
    """The width of the type C computes an integer dtype in (int8: 32): shifts by
    that much or more give 0 (or the sign)."""
    return dtype(dtype(name).c_compute.removesuffix("_t")).bits


def is_narrow(name: str) -> bool:
    """An integer dtype C computes in a wider type (int8, int16, uint8: in int32, C's
    promotion): the generated C truncates a result that may leave it, as numpy's
    arithmetic in the dtype itself wraps."""
    d = dtype(name)
    return d.is_int and d.c_storage != d.c_compute


def wrap(value: int, name: str) -> int:
    """``value`` wrapped (two's complement) into ``value_range(name)``."""
    lo, hi = value_range(name)
    return (value - lo) % (hi - lo + 1) + lo


def as_computed(value, name: str) -> float:
    """A float constant as the C computes with it: float64, or rounded once to float32
    (float32, and the 16-bit floats computed in float32), an integer directly (through
    float64 it would round twice)."""
    if isinstance(value, int):
        return _int_to_float(value, 53 if name == "float64" else 24)
    if name == "float64":
        return float(value)
    with np.errstate(over="ignore"):  # past float32's range: inf, as numpy's cast
        return float(np.float32(value))


def _int_to_float(value: int, bits: int) -> float:
    """``value`` rounded once to nearest even with ``bits`` significant bits (53:
    float64, 24: float32), inf past the type's range (numpy's ``x * 10**20`` of a
    float32 ``x`` is 1e20: an int of any size)."""
    n = abs(value)
    shift = max(n.bit_length() - bits, 0)
    q, r = divmod(n, 1 << shift)
    half = (1 << shift) >> 1
    if shift and (r > half or (r == half and q & 1)):
        q += 1
    top = 2.0**128 * (1 - 2.0**-24) if bits == 24 else float("inf")  # float32's largest
    try:
        f = math.ldexp(q, shift)
    except OverflowError:
        f = math.inf
    f = f if f <= top else math.inf
    return -f if value < 0 else f


def as_value(value, name: str) -> float:
    """A float constant of ``name`` as the type holds it: ``as_computed``, and for the
    16-bit storage types rounded to nearest even once more, as their stores and casts
    round (float16 from the number itself, bfloat16 from its float32, as the C does):
    ``pt.const(0.1, "float16")`` is 0.0999755859375, 2049 is 2048, 70000 is inf."""
    v = as_computed(value, name)
    if name == "float16":
        with np.errstate(over="ignore"):
            exact = value if isinstance(value, float) else v
            return float(np.float16(exact))
    if name == "bfloat16":
        bits = int(np.array(v, np.float32).view(np.uint32))
        if (bits & 0x7FFFFFFF) > 0x7F800000:
            return v  # NaN
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return float(np.array(bits, np.uint32).view(np.float32))
    return v


def float_text(value: float, name: str) -> str:
    """The shortest decimal text that reads back as the constant (``as_computed``): 0.1,
    not 0.10000000149011612, for a float32."""
    return repr(float(value)) if name == "float64" else str(np.float32(value))


# Which dtype holds every value of another (the implicit conversions; README "Casting
# rules"): an integer kind widens within its kind, and an unsigned integer into any wider
# signed one. Nothing else converts without pt.cast: not float <-> int, not between float
# widths, not int8 <-> uint8.
_HOLDS = {
    ("int", "int"): lambda a, b: a.bits >= b.bits,
    ("uint", "uint"): lambda a, b: a.bits >= b.bits,
    ("int", "uint"): lambda a, b: a.bits > b.bits,
    ("bool", "bool"): lambda a, b: True,
}


def promote(a: str, b: str) -> str | None:
    """The dtype both ``a`` and ``b`` convert to implicitly, or None (a ``pt.cast`` is needed).

    ``promote("int64", "int32") == "int64"``, ``promote("int32", "uint8") == "int32"``,
    ``promote("int8", "uint8") is None``, ``promote("float32", "float16") is None``.
    """
    da, db = dtype(a), dtype(b)
    for x, y in ((da, db), (db, da)):
        rule = _HOLDS.get((x.kind, y.kind))
        if rule is not None and rule(x, y):
            return x.name
    return None


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of arrays of ``name``; bfloat16 needs ``ml_dtypes`` (TypeError
    saying so without it)."""
    d = dtype(name)
    if d.name == "bfloat16" and ml_dtypes is None:
        raise TypeError("bfloat16 arrays need ml_dtypes: pip install 'pypto[bfloat16]'")
    return np.dtype(ml_dtypes.bfloat16) if d.name == "bfloat16" else np.dtype(d.numpy)


@dataclass(frozen=True, slots=True)
class StorageForms:
    """C for a storage type computed in float: a load widening an element (``{0}``), a
    store narrowing a float, a cast rounding a float to the type (a float again), and
    the helper functions they call; ``cast_double``: the cast from a double, where going
    through float would round twice (else None: the float cast is right)."""

    load: str
    store: str
    cast: str
    helpers: str = ""
    cast_double: str | None = None


# float -> bfloat16 rounds to nearest even; NaN stays a (quiet) NaN
_BF16_HELPERS = """static inline float pt_bf16_load(uint16_t b) {
  union { uint32_t u; float f; } v = { (uint32_t)b << 16 };
  return v.f;
}
static inline uint16_t pt_bf16_store(float f) {
  union { float f; uint32_t u; } v = { f };
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
  return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}"""

# float16 <-> float exactly (subnormals, infinities; NaN stays a quiet NaN), rounding to
# nearest even, in integer and float arithmetic that gcc vectorizes: it leaves its own
# _Float16 conversions scalar (one F16C vcvtph2ps per element; a float16 matmul 512^3
# ran at 3.4 GFLOP/s). Widening: the bits moved into a float's place with the exponent
# rebiased, a subnormal's mantissa converted and scaled by 2^-24 (no float32 subnormal
# on the way: right under flush-to-zero too, as ``torch.set_flush_denormal`` sets).
# Narrowing: the rounding bias added to the bits (normal results), or the addition of
# 0.5 rounding a subnormal result into the low bits.
_F16_HELPERS = """static inline float pt_f16_load(uint16_t h) {
  union { uint32_t u; float f; } v = { (uint32_t)(h & 0x7fffu) << 13 };
  const uint32_t e = v.u & 0x0f800000u;
  v.u += 0x38000000u;  /* the exponent rebiased, 127 - 15 */
  if (e == 0x0f800000u) v.u += 0x38000000u;  /* infinity, NaN: exponent 255 */
  if (e == 0) {  /* subnormal: 2^-14 (1 + m / 1024) - 2^-14, never a float32 subnormal */
    v.u += 0x00800000u;
    v.f -= 0x1p-14f;
  }
  v.u |= (uint32_t)(h & 0x8000u) << 16;
  return v.f;
}
static inline uint16_t pt_f16_store(float f) {
  union { float f; uint32_t u; } v = { f };
  const uint32_t sign = v.u & 0x80000000u;
  uint32_t o;
  v.u ^= sign;
  if (v.u >= 0x47800000u) {  /* 2^16 and up: infinity, or NaN */
    o = v.u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (v.u < 0x38800000u) {  /* under 2^-14: a subnormal result, or 0 */
    union { uint32_t u; float f; } w = { v.u };
    w.f += 0.5f;
    o = w.u - 0x3f000000u;
  } else {
    o = (v.u + 0xc8000fffu + ((v.u >> 13) & 1u)) >> 13;
  }
  return (uint16_t)(o | (sign >> 16));
}
/* a double rounded to float toward zero with the last bit set where inexact ("round to
   odd"): rounded again, to float16's 11 bits, it rounds as the double would have */
static inline float pt_f32_odd(double d) {
  union { float f; uint32_t u; } v = { (float)d };
  if ((double)v.f != d && d == d) {
    if (fabs((double)v.f) > fabs(d)) v.u -= 1;  /* rounded away from zero: step back */
    v.u |= 1u;
  }
  return v.f;
}"""

STORAGE = {
    "float16": StorageForms(
        "pt_f16_load({0})", "pt_f16_store({0})", "pt_f16_load(pt_f16_store({0}))",
        _F16_HELPERS, "pt_f16_load(pt_f16_store(pt_f32_odd({0})))",
    ),
    "bfloat16": StorageForms(
        "pt_bf16_load({0})", "pt_bf16_store({0})", "pt_bf16_load(pt_bf16_store({0}))",
        _BF16_HELPERS,  # from a double through float, as ml_dtypes converts
    ),
}  # fmt: skip


def accumulator_dtype(dtype: str) -> str:
    """The dtype a reduction into ``dtype`` accumulates in: float32 for the storage types
    (float16, bfloat16; rounded once, when stored), else ``dtype`` itself."""
    return "float32" if dtype in STORAGE else dtype


def identity_value(kind: str, name: str):
    """+inf/-inf (or the integer limits) for max/min reductions."""
    d = dtype(name)
    if d.is_float:
        return math.inf if kind == "max" else -math.inf
    info = np.iinfo(d.numpy)
    return int(info.max) if kind == "max" else int(info.min)
