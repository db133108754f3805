"""Shape dimensions as a saved module's signature prints them (``n``, ``64``,
``(n + 7) // 8``, ``min(n, 8)``), read back into expressions over its sizes."""

from __future__ import annotations

import ast
import operator

from .expr import Const, Expr, binary

# the arithmetic a printed shape may use: AST node type -> how to combine pypto Exprs
_SHAPE_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}


def shape_expr(text: str, sizes: dict) -> Expr:
    """A shape dimension as printed (``n``, ``64``, ``(n + 7) // 8``, ``min(n, 8)``) back
    into an Expr over the size variables; anything else is refused."""

    def conv(node):  # a literal stays a Python int: it takes the type of what it meets,
        if isinstance(node, ast.Constant) and isinstance(node.value, int):  # as it did
            return node.value
        if isinstance(node, ast.Name) and node.id in sizes:
            return sizes[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _SHAPE_OPS:
            return _SHAPE_OPS[type(node.op)](conv(node.left), conv(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return 0 - conv(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return ~conv(node.operand)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("min", "max")
            and len(node.args) == 2
        ):
            return binary(node.func.id, conv(node.args[0]), conv(node.args[1]))
        raise ValueError(f"cannot read the shape dimension {text!r} of a saved module")

    out = conv(ast.parse(text, mode="eval").body)
    return Const(out, "int64") if isinstance(out, int) else out
