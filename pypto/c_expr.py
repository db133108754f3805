"""C text of expressions: the expression printer of ``codegen_c``, with the C forms
that differ from the readable printer's (literals, wrapping and checked integer
arithmetic, numpy's shifts, NaN-propagating min/max, numpy's float divmod, casts
that narrow as numpy's) and the helper functions they call, each emitted once.

    A[i] + 1 (int32, may overflow)   ->  pt_wadd_i32(A[i], 1)
    I8[i] * 2 (int8)                 ->  ((int8_t)(I8[i] * 2))
"""

from __future__ import annotations

import math

from . import dtypes, fastmath
from .arg_checks import index_status
from .c_helpers import (
    CLAMPED_INDEX,
    FLOAT_TO_INT,
    FLOAT_TO_UINT64,
    HELPERS,
    INT_TO_FLOAT,
    KEEP,
)
from .expr import Binary, Call, Cast, Const, Load, walk
from .intervals import INF, bounds, leaves_type, may_wrap
from .loop_ir import Allocate, IntrinCall, Namer, Prefetch, Store, own_exprs, walk_stmts
from .mathfuncs import FUNCS
from .printer import ATOM, Printer


def _ctype(dt: str) -> str:
    return dtypes.dtype(dt).c_compute


# signed + - * on values read from tensors that may overflow: wrapping helpers
_WRAPPING = {"add": "wadd", "sub": "wsub", "mul": "wmul"}


# float forms of an operation whose helper has the integer form's name (pt_mod_float)
_FLOAT_KINDS = ("fmod", "fmin", "fmax", "ffloordiv")
# floor division and modulo: op -> (the float helper, C's operator for two integers >= 0)
_DIVISION = {"floordiv": ("ffloordiv", "/"), "mod": ("fmod", "%")}


def _nonzero_const(e) -> bool:
    return isinstance(e, Const) and e.value != 0


def _widened(e):
    """``e`` with each integer operand in ``e``'s C type: C computes ``Y[i] + 1`` in
    ``int`` for an int32 ``Y``, where the sum is int64 (``(int64_t)Y[i] + 1``); a
    constant takes the type itself."""
    t = _ctype(e.dtype)
    if not dtypes.dtype(e.dtype).is_int:
        return e

    def cast(x):
        if _ctype(x.dtype) == t or not dtypes.dtype(x.dtype).is_int:
            return x
        return Const(x.value, e.dtype) if isinstance(x, Const) else Cast(x, e.dtype)

    a, b = cast(e.a), cast(e.b)
    return e if a is e.a and b is e.b else Binary(e.op, a, b, e.dtype)


def _from_float(e) -> bool:
    """Whether an integer expression holds a conversion from a float."""
    return any(isinstance(x, Cast) and dtypes.dtype(x.value.dtype).is_float for x in walk(e))


class CPrinter(Printer):
    def __init__(self, namer: Namer, ranges: dict, index_notes: tuple = ()):
        super().__init__()
        self.namer = namer
        self.ranges = ranges
        self.helpers: dict[str, str] = {}
        self.checks = False  # data-dependent indices are checked at run time
        self.index_notes = index_notes  # the checked accesses, in status order (arg_checks)
        self.scalars: set = set()  # ids of one-element local buffers declared as scalars

    def element(self, buf, index) -> str:
        """C for ``buf[index]``: the name alone for a buffer declared as a scalar."""
        name = self.namer(buf, buf.name)
        return name if id(buf) in self.scalars else f"{name}[{self(index)}]"

    def helper(self, kind: str, dt: str) -> str:
        t = _ctype(dt)
        s = t.replace("_t", "").replace("int", "i")
        name = f"pt_{kind[1:] if kind in _FLOAT_KINDS else kind}_{s}"
        u, bits = t if t.startswith("u") else "u" + t, "".join(c for c in t if c.isdigit())
        f = "f" if t == "float" else ""  # libm's suffix
        self.helpers.setdefault(name, HELPERS[kind].format(t=t, s=s, u=u, bits=bits, f=f))
        return name

    def var(self, e):
        return self.namer(e, e.name), ATOM

    def const(self, e):
        v, dt = e.value, e.dtype
        d = dtypes.dtype(dt)
        if d.is_float:
            if math.isinf(v):
                text = "INFINITY" if v > 0 else "-INFINITY"
            elif math.isnan(v):
                text = "NAN"
            else:
                text = dtypes.float_text(v, dt)
                if "e" not in text and "." not in text:
                    text += ".0"
                if _ctype(dt) == "float":
                    text += "f"
        else:
            v = int(v)
            wide = "INT64_C"
            unsigned = _ctype(dt) in ("uint32_t", "uint64_t")
            if unsigned:  # an unsigned literal keeps its type: 0 - 2 wraps there, not in int
                wide = "UINT32_C" if _ctype(dt) == "uint32_t" else "UINT64_C"
            text = str(v) if -(2**31) <= v < 2**31 and not unsigned else f"{wide}({v})"
        return text, (ATOM if not text.startswith("-") else 7)

    def nonneg(self, e) -> bool:
        return bounds(e, self.ranges, wrapped=True)[0] >= 0

    def binary(self, e):
        text, prec = self.operation(_widened(e))
        if dtypes.is_narrow(e.dtype) and leaves_type(e, self.ranges):  # wraps, as numpy's
            return f"(({dtypes.dtype(e.dtype).c_storage})({text}))", ATOM
        return text, prec

    def operation(self, e):
        op, dt = e.op, e.dtype
        is_float = dtypes.dtype(dt).is_float
        if op in ("min", "max"):
            kind = "f" + op if is_float else op
            return f"{self.helper(kind, dt)}({self(e.a)}, {self(e.b)})", ATOM
        if op in ("floordiv", "mod") and not is_float and not _nonzero_const(e.b):
            self.checks = True  # the status the checked division reports to
            return f"{self.helper('c' + op, dt)}({self(e.a)}, {self(e.b)}, &status)", ATOM
        if op in _DIVISION:  # a float helper; C's / and % where both sides are >= 0
            float_kind, c_op = _DIVISION[op]
            if not is_float and self.nonneg(e.a) and self.nonneg(e.b):
                return f"{self.wrap(e.a, 6)} {c_op} {self.wrap(e.b, 6, True)}", 6
            kind = float_kind if is_float else op
            return f"{self.helper(kind, dt)}({self(e.a)}, {self(e.b)})", ATOM
        if op in ("shl", "shr"):
            return self.shift(e)
        signed = dtypes.dtype(dt).c_storage in ("int32_t", "int64_t")  # int8 & co: truncated
        if op in _WRAPPING and signed and may_wrap(e, self.ranges):
            return f"{self.helper(_WRAPPING[op], dt)}({self(e.a)}, {self(e.b)})", ATOM
        return super().binary(e)

    def shift(self, e):
        """``a << b``, ``a >> b`` as numpy's: a shift by the type's width or more (or by
        a negative amount) gives 0 (or the sign), and ``<<`` wraps. The plain C operator
        where that cannot happen: ``i << 2`` of a loop variable, ``x >> 3``."""
        a, b, t = e.a, e.b, _ctype(e.dtype)
        width = dtypes.compute_bits(e.dtype)
        if isinstance(b, Const) and 0 <= b.value < width:
            lo, hi = bounds(a, self.ranges, wrapped=True)
            fits = lo >= 0 and hi * 2**b.value < 2 ** (width - 1)  # no sign bit reached
            if e.op == "shr" or t.startswith("u") or fits:
                return f"{self.wrap(a, ATOM)} {'<<' if e.op == 'shl' else '>>'} {self(b)}", 0
        return f"{self.helper(e.op, e.dtype)}({self(a)}, {self(b)})", ATOM

    def select(self, e):
        return f"({self(e.cond)} ? {self(e.t)} : {self(e.f)})", ATOM

    def storage(self, dt: str):
        """The load/store/cast forms of a storage type computed in float (or None)."""
        forms = dtypes.STORAGE.get(dt)
        if forms is not None and forms.helpers:
            self.helpers.setdefault(f"storage {dt}", forms.helpers)
        return forms

    def cast(self, e):
        inner = self(e.value)
        if dtypes.dtype(e.dtype).is_float:
            inner = self.int_as_float(e.value, inner, e.dtype)
        if forms := self.storage(e.dtype):
            twice = forms.cast_double and e.value.dtype == "float64"  # would round twice
            return (forms.cast_double if twice else forms.cast).format(inner), ATOM
        if e.dtype == "bool":  # numpy's: any nonzero value (NaN too) is true
            return f"({inner} != 0)", ATOM
        d, src = dtypes.dtype(e.dtype), dtypes.dtype(e.value.dtype)
        if src.is_float and d.is_int:
            return self.float_to_int(inner, e.value, _ctype(e.value.dtype), d), ATOM
        if dtypes.is_narrow(e.dtype):  # int8 <- int32 wraps
            lo, hi = bounds(e.value, self.ranges, True) if src.is_int else (-INF, INF)
            vlo, vhi = dtypes.value_range(e.dtype)
            if lo < vlo or hi > vhi:
                return f"(({d.c_storage})({inner}))", ATOM
        return f"(({d.c_compute})({inner}))", ATOM

    def int_as_float(self, value, text: str, dtype: str) -> str:
        """The C ``text`` of integer ``value`` converted to float ``dtype``: where the
        integer came from a float, through a helper that gives +0.0 for 0 (gcc folds
        ``(float)(int)x`` into ``truncf(x)``, ``frintz`` on aarch64, which keeps -0.0 for
        -0.5); otherwise ``text``, C converting it."""
        if not dtypes.dtype(value.dtype).is_int or not _from_float(value):
            return text
        self.helpers.setdefault("PT_KEEP", KEEP)
        it, ft = _ctype(value.dtype), "double" if _ctype(dtype) == "double" else "float"
        name = f"pt_{it.replace('_t', '')}_to_{ft}"
        self.helpers.setdefault(name, INT_TO_FLOAT.format(name=name, i=it, f=ft))
        return f"{name}({text})"

    def float_to_int(self, inner: str, value, src: str, d) -> str:
        """A float converted to an integer type as x86 converts it (``FLOAT_TO_INT``):
        to int32 or int64 directly, to a narrower type through int32, to uint32 through
        int64, wrapping (numpy's on x86 for -1.0; beyond int64's range or for NaN numpy's
        answer depends on its version and build), to uint64 as x86-64 code does
        (``FLOAT_TO_UINT64``). A value clamped into the type by constants converts
        directly."""
        bits = 64 if d.bits >= 32 and (d.bits == 64 or d.kind == "uint") else 32
        via, f = f"int{bits}_t", "f" if src == "float" else ""
        if d.c_storage == "uint64_t":  # through int64, as x86-64 code converts
            name, i64 = f"pt_{f or 'd'}2u64", dtypes.dtype("int64")
            low = self.float_to_int("x", value, src, i64)
            high = self.float_to_int(f"x - 9223372036854775808.0{f}", value, src, i64)
            self.helpers.setdefault(
                name, FLOAT_TO_UINT64.format(name=name, t=src, f=f, i=low, i_high=high)
            )
            return f"{name}({inner})"
        if _clamped_within(value, -(2 ** (bits - 1)), 2 ** (bits - 1)):
            text = f"({via})({inner})"  # a requantizing epilogue: NaN alone, 0 in int8 on
        else:  # x86 and aarch64 alike; the guard costs it 5%
            name = f"pt_{f or 'd'}2i{bits}"
            low = f"-{2 ** (bits - 1)}.0{f}"
            self.helpers.setdefault(name, FLOAT_TO_INT.format(
                i=via, name=name, t=src, lo=low, hi=low[1:], min=f"INT{bits}_MIN"))  # fmt: skip
            text = f"{name}({inner})"
        return text if via == d.c_storage else f"(({d.c_storage}){text})"

    def call(self, e):
        args = [self(a) for a in e.args]
        if e.name == "checked_index":
            self.checks = True
            code = index_status(self.index_notes, e.note)
            return f"pt_checked_index({args[0]}, {args[1]}, {code}, &status)", ATOM
        if e.name == "clamped_index":  # a region's bound under a read that may not run
            self.helpers.setdefault("pt_clamped_index", CLAMPED_INDEX)
            return f"pt_clamped_index({args[0]}, {args[1]})", ATOM
        if e.name == "abs" and not dtypes.dtype(e.dtype).is_float:
            d = dtypes.dtype(e.dtype)
            if d.kind == "uint":
                return self.p(e.args[0])  # its own text and precedence
            # wrapping, as numpy's: abs(INT32_MIN) is INT32_MIN (C's abs leaves it
            # undefined, and the C compiler then takes every result as >= 0)
            text = f"{self.helper('abs', e.dtype)}({args[0]})"
            if dtypes.is_narrow(e.dtype):  # abs(-128) is -128 in int8
                return f"(({d.c_storage}){text})", ATOM
            return text, ATOM
        if e.name in fastmath.FORMS:
            fn, double = fastmath.FORMS[e.name]
            if _ctype(e.dtype) != "float":
                return double.format(*args), ATOM
            self.helpers.setdefault(fn, fastmath.HELPERS[fn])
            return f"{fn}({args[0]})", ATOM
        if e.name == "pow" and isinstance(e.args[1], Const) and e.args[1].value == 0.5:
            # numpy's power takes sqrt for 0.5 (sqrt(-inf) is nan, C's pow gives inf), and
            # gcc sometimes does: always, so no schedule differs
            e, args = Call("sqrt", e.args[:1], e.dtype), args[:1]
        if e.name == "nextafter" and self.storage(e.dtype) is not None:
            return self.half_nextafter(e.dtype, args), ATOM
        f = FUNCS[e.name]
        if f.c_int:  # the operand's bits: as the unsigned type of its storage width
            d = dtypes.dtype(e.args[0].dtype)
            if f.helper:
                self.helpers.setdefault(f"pt_{f.helper}", HELPERS[f.helper])
            u = d.c_storage if d.kind == "uint" else "u" + d.c_storage
            return f.c_int.format(args[0], u=u, bits=d.bits), ATOM
        operand = e.args[0].dtype if f.predicate else e.dtype  # isnan: by its operand's type
        form = f.c_float if _ctype(operand) == "float" else f.c_double
        return form.format(*args), ATOM

    def half_nextafter(self, dt: str, args: list) -> str:
        """``nextafter`` in a 16-bit type: a step of one in its bits (float32's
        ``nextafterf`` steps by 2^-23 at 1.0, which the store rounds away again); the
        operands rounded to the type first, as numpy's are."""
        s = "bf16" if dt == "bfloat16" else "f16"
        name = f"pt_nextafter_{s}"
        self.helpers.setdefault(name, HALF_NEXTAFTER.format(s=s))
        return f"{name}({args[0]}, {args[1]})"

    def tensor_read(self, e):
        """Lowering turns every read into a ``Load`` of a buffer; a read that reaches the C
        (in a bound) would print as C it is not (``Idx[i, 1]`` is a comma expression)."""
        raise AssertionError(f"internal: the tensor read {e} reached the C code unlowered")

    def load(self, e):
        text = self.element(e.buffer, e.index)
        if forms := self.storage(e.buffer.dtype):
            return forms.load.format(text), ATOM
        return text, ATOM


def scalar_buffers(body) -> set:
    """Ids of the one-element local buffers (a promoted accumulator, a reduction's
    register) that only loads and stores at the constant index 0 name: declared
    ``float acc;``, not ``float acc[1]``, and read as ``acc``. Any other index (which
    may be out of range, and checked) keeps the array, and so does a tensor intrinsic
    or a prefetch, which takes an address."""
    ones = {
        id(s.buffer)
        for s in walk_stmts(body)
        if isinstance(s, Allocate) and isinstance(s.size, Const) and s.size.value == 1
    }

    def at_zero(buf, index):
        if not (isinstance(index, Const) and index.value == 0):
            ones.discard(id(buf))

    for s in walk_stmts(body):
        if isinstance(s, IntrinCall):
            ones -= {id(o.buffer) for o in s.operands}
        elif isinstance(s, Prefetch):
            ones.discard(id(s.buffer))
        elif isinstance(s, Store):
            at_zero(s.buffer, s.index)
        for e in own_exprs(s):
            for x in walk(e):
                if isinstance(x, Load):
                    at_zero(x.buffer, x.index)
    return ones


# the neighbour of x towards y in a 16-bit float type whose bits pt_{s}_store and
# pt_{s}_load convert (NaN for a NaN; y when equal; from zero the least subnormal)
HALF_NEXTAFTER = """static inline float pt_nextafter_{s}(float x, float y) {{
  uint16_t a = pt_{s}_store(x), b = pt_{s}_store(y);
  const float fx = pt_{s}_load(a), fy = pt_{s}_load(b);
  if (fx != fx || fy != fy) return fx + fy;
  if (fx == fy) return fy;
  if (fx == 0.0f) return pt_{s}_load((uint16_t)((b & 0x8000u) | 1u));
  a = (fx < fy) == (fx > 0.0f) ? (uint16_t)(a + 1u) : (uint16_t)(a - 1u);
  return pt_{s}_load(a);
}}"""

_ROUNDING = ("round", "floor", "ceil", "trunc")


def _clamped_within(e, lo: int, hi: int) -> bool:
    """Whether ``e`` is (a rounding of) ``min(max(x, a), b)`` or ``max(min(x, b), a)``
    with constants ``lo <= a`` and ``b < hi``: in range but for NaN."""
    while type(e).__name__ == "Call" and e.name in _ROUNDING:
        e = e.args[0]
    consts = []
    while type(e).__name__ == "Binary" and e.op in ("min", "max") and isinstance(e.b, Const):
        consts.append(e.b.value)
        e = e.a
    return len(consts) == 2 and lo <= min(consts) and max(consts) < hi
