"""The elementwise math functions, one row each (TVM's ``tir`` math: ``pt.sin``, ...).

A row says how many operands the function takes, whether they must be floats,
whether it answers a question (``isnan``: a ``bool``), and its C for float32 and
float64 operands (``{0}``, ``{1}``: the operands), or for integer operands (bit
counts: ``{u}`` the unsigned type of the operand's width, ``{bits}`` that width).
float16 and bfloat16 compute in float32. The expression builder
(``pypto.ops.call``) and the C generator read the same row, so a new function is
one line here:

    pt.sin(A[i])   ->   Call("sin", (A[i],), "float32")   ->   sinf(A[i])

``fast_exp`` and ``fast_erf`` have vectorizable forms of their own
(``pypto.fastmath``); libm's forms are scalar calls that gcc vectorizes only
where it has a vector library.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MathFunc:
    nargs: int
    needs_float: bool
    c_float: str
    c_double: str
    predicate: bool = False  # a bool result
    c_int: str = ""  # integer operands only, this C
    returns: str = ""  # the result's dtype when it is not the operand's
    helper: str = ""  # a C helper (pypto.c_helpers.HELPERS) the form calls


def _unary(c: str) -> MathFunc:
    """A libm function of one float: ``sinf(x)`` / ``sin(x)``."""
    return MathFunc(1, True, f"{c}f({{0}})", f"{c}({{0}})")


def _binary(c: str) -> MathFunc:
    return MathFunc(2, True, f"{c}f({{0}}, {{1}})", f"{c}({{0}}, {{1}})")


def _predicate(c: str) -> MathFunc:
    """A classification macro, as 0 or 1 (glibc's ``isinf(-INFINITY)`` is -1)."""
    return MathFunc(1, True, f"({c}({{0}}) != 0)", f"({c}({{0}}) != 0)", predicate=True)


FUNCS: dict[str, MathFunc] = {
    **{n: _unary(n) for n in ("exp", "log", "sqrt", "tanh", "erf", "floor", "ceil")},
    **{n: _unary(n) for n in ("sin", "cos", "tan", "asin", "acos", "atan")},
    **{n: _unary(n) for n in ("sinh", "cosh", "asinh", "acosh", "atanh")},
    **{n: _unary(n) for n in ("exp2", "expm1", "log2", "log10", "log1p", "trunc", "nearbyint")},
    **{n: _binary(n) for n in ("pow", "atan2", "fmod", "hypot", "copysign", "nextafter")},
    **{n: _predicate(n) for n in ("isnan", "isinf", "isfinite")},
    "rsqrt": MathFunc(1, True, "(1.0f / sqrtf({0}))", "(1.0 / sqrt({0}))"),
    "sigmoid": MathFunc(1, True, "(1.0f / (1.0f + expf(-({0}))))", "(1.0 / (1.0 + exp(-({0}))))"),
    "round": MathFunc(1, True, "rintf({0})", "rint({0})"),  # to nearest, ties to even
    "abs": MathFunc(1, False, "fabsf({0})", "fabs({0})"),  # integers: pt_abs_i32 (wrapping)
    # bits of an integer, as TVM's: popcount in the operand's dtype, clz an int32 (of a
    # zero, the width); the operand taken as its unsigned bits
    "popcount": MathFunc(1, False, "", "", c_int="__builtin_popcountll(({u})({0}))"),
    "clz": MathFunc(
        1, False, "", "", c_int="pt_clz(({u})({0}), {bits})", returns="int32", helper="clz"
    ),
    # vectorizable float32 forms (pypto.fastmath); float64 uses libm
    "fast_exp": MathFunc(1, True, "", "exp({0})"),
    "fast_erf": MathFunc(1, True, "", "erf({0})"),
}

# The functions whose float32 C gcc vectorizes without -ffast-math (single instructions,
# comparisons, plain arithmetic); every other one is a scalar libm call per element,
# which the cost model's features count (a softmax of libm's expf: 7x the time of
# fast_exp's).
VECTORIZED = frozenset(
    ("sqrt", "rsqrt", "floor", "ceil", "trunc", "round", "nearbyint", "abs", "copysign")
    + ("isnan", "isinf", "isfinite", "popcount", "clz", "fast_exp", "fast_erf")
)
