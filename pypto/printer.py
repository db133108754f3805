"""Readable text for expressions: infix with minimal parentheses.

The C code generator reuses this printer and overrides the rules that differ
(literals, math calls, floor division); see ``codegen_c``.

The rule table is keyed by the node class's name, so this module needs nothing
from ``expr`` and ``Expr.__str__`` can use it without an import cycle.
"""

from __future__ import annotations

import math

from . import dtypes

# precedence: higher binds tighter
INFIX = {
    "or": ("||", 1),
    "and": ("&&", 2),
    "eq": ("==", 3),
    "ne": ("!=", 3),
    "lt": ("<", 4),
    "le": ("<=", 4),
    "gt": (">", 4),
    "ge": (">=", 4),
    "add": ("+", 5),
    "sub": ("-", 5),
    "mul": ("*", 6),
    "div": ("/", 6),
    "floordiv": ("//", 6),
    "mod": ("%", 6),
}
ATOM = 10
# bitwise operators bind differently in C and Python: their operands and results are
# always parenthesized (``(i >> 1) + (j & 3)``), and ``x ^ -1`` prints as ``~x``
BITWISE = {"bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>"}
LOOSEST = 0


class Printer:
    """Expression printer driven by a node-type -> method table."""

    def __init__(self):
        self.rules = {
            "Var": self.var,
            "Const": self.const,
            "Binary": self.binary,
            "Cmp": self.binary,
            "Not": self.not_,
            "Select": self.select,
            "Cast": self.cast,
            "Call": self.call,
            "TensorRead": self.tensor_read,
            "Reduce": self.reduce,
            "Load": self.load,
        }

    def __call__(self, e) -> str:
        return self.p(e)[0]

    def p(self, e) -> tuple[str, int]:
        return self.rules[type(e).__name__](e)

    def wrap(self, e, prec: int, right: bool = False) -> str:
        s, q = self.p(e)
        return f"({s})" if q < prec or (right and q == prec) else s

    def var(self, e):
        return e.name, ATOM

    def const(self, e):
        v = e.value
        if isinstance(v, float):
            if math.isinf(v):
                return ("inf" if v > 0 else "-inf"), ATOM
            return dtypes.float_text(v, e.dtype), ATOM
        return str(v), ATOM

    def binary(self, e):
        if e.op in ("min", "max"):
            return f"{e.op}({self(e.a)}, {self(e.b)})", ATOM
        if e.op in BITWISE:
            b = e.b
            if e.op == "bitxor" and type(b).__name__ == "Const" and b.value == -1:
                return f"~{self.wrap(e.a, ATOM)}", LOOSEST
            sym = BITWISE[e.op]
            return f"{self.wrap(e.a, ATOM)} {sym} {self.wrap(b, ATOM)}", LOOSEST
        if e.op == "mul" and _is_minus_one(e.a):  # a float's -x: -1.0 * x, never 0 - x
            x = self.wrap(e.b, ATOM)
            return (f"-({x})" if x.startswith("-") else f"-{x}"), 7  # binds tightest
        sym, prec = INFIX[e.op]
        return f"{self.wrap(e.a, prec)} {sym} {self.wrap(e.b, prec, right=True)}", prec

    def not_(self, e):
        return f"!{self.wrap(e.a, ATOM)}", ATOM

    def select(self, e):
        return f"select({self(e.cond)}, {self(e.t)}, {self(e.f)})", ATOM

    def cast(self, e):
        return f"{e.dtype}({self(e.value)})", ATOM

    def call(self, e):
        return f"{e.name}({', '.join(self(a) for a in e.args)})", ATOM

    def tensor_read(self, e):
        return f"{e.tensor.name}[{', '.join(self(i) for i in e.indices)}]", ATOM

    def reduce(self, e):
        axes = ", ".join(a.name for a in e.axes)
        init = "".join(f", init={self(x)}" for x in e.init)
        return f"{e.combiner.name}({self(e.source)}, axis=[{axes}]{init})", ATOM

    def load(self, e):
        return f"{e.buffer.name}[{self(e.index)}]", ATOM


_default = Printer()


def expr_str(e) -> str:
    return _default(e)


def _is_minus_one(e) -> bool:
    return type(e).__name__ == "Const" and isinstance(e.value, float) and e.value == -1
