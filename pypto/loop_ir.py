"""Loop IR: what ``pt.lower`` returns and the C generator consumes.

Statements are immutable records: ``For`` (kind serial | parallel |
vectorized | unrolled), ``Store`` into a flat buffer, ``Allocate`` (a
buffer living for the scope of its body), ``IfThenElse``, ``Seq`` and
``Prefetch`` (a cache hint: ``lines`` cache lines from an element on) and
``IntrinCall`` (a tensorized region: a call of a C micro-kernel).
Every loop starts at 0; buffers are indexed with one flat expression.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from . import dtypes
from .c_names import RESERVED
from .expr import Binary, Cast, Const, Expr, Not, Var, vars_of
from .printer import Printer

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    name: str
    dtype: str
    shape: tuple  # of Expr
    scope: str  # "param" | "global" | "local"

    @property
    def elem_bytes(self) -> int:
        return dtypes.dtype(self.dtype).bytes

    @property
    def elements(self) -> Expr:
        """The number of elements: the product of the shape (unsimplified)."""
        out: Expr = Const(1, dtypes.INDEX)
        for d in self.shape:
            d = d if d.dtype == dtypes.INDEX else Cast(d, dtypes.INDEX)
            out = Binary("mul", out, d, dtypes.INDEX)
        return out


class Stmt:
    __slots__ = ()

    def __str__(self):
        return IRPrinter().stmt(self)


@dataclass(frozen=True, slots=True, eq=False)
class For(Stmt):
    var: Var
    extent: Expr
    kind: str
    body: Stmt


@dataclass(frozen=True, slots=True, eq=False)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(frozen=True, slots=True, eq=False)
class Allocate(Stmt):
    buffer: Buffer
    size: Expr  # number of elements
    body: Stmt


@dataclass(frozen=True, slots=True, eq=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    else_: Stmt | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Let(Stmt):
    """``var`` holds ``value`` (an integer) in ``body``: a bound computed once outside a
    loop instead of in every expression that needs it (``const int64_t`` in C)."""

    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, slots=True, eq=False)
class Prefetch(Stmt):
    buffer: Buffer
    index: Expr  # the first element; may lie past the buffer's end (a hint never faults)
    lines: int  # cache lines (target.CACHE_LINE bytes) from there on
    write: bool = False  # prefetched to be written
    level: int = 1  # the cache level the lines go to (1: L1, 2: L2)


@dataclass(frozen=True, slots=True, eq=False)
class Operand:
    """A buffer handed to a tensor intrinsic: its element ``index`` (the address of the
    intrinsic's element 0) and the stride, in elements, of each intrinsic dimension."""

    buffer: Buffer
    index: Expr
    strides: tuple  # of int


@dataclass(frozen=True, slots=True, eq=False)
class IntrinCall(Stmt):
    """``intrin.name(inputs..., output)``, each operand as a pointer then its strides
    (see ``pypto.tensorize``); the output is the last operand."""

    intrin: Any  # pypto.tensorize.TensorIntrin
    operands: tuple  # of Operand

    def with_indices(self, f) -> IntrinCall:
        return IntrinCall(
            self.intrin, tuple(Operand(o.buffer, f(o.index), o.strides) for o in self.operands)
        )


@dataclass(frozen=True, slots=True, eq=False)
class Seq(Stmt):
    stmts: tuple


def seq(*stmts) -> Stmt:
    """A flat Seq of the non-empty statements (a single one is returned as is)."""
    out = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            out.extend(s.stmts)
        else:
            out.append(s)
    if len(out) == 1:
        return out[0]
    return Seq(tuple(out))


@dataclass(frozen=True, slots=True, eq=False)
class LoweredFunc:
    """A lowered kernel: buffer parameters, size parameters and a body."""

    name: str
    params: tuple  # Buffers, in argument order
    size_vars: tuple  # Vars bound from argument shapes
    body: Stmt
    attrs: dict = field(default_factory=dict)
    tensors: tuple = ()  # the Tensors behind params (for argument checks)
    # scalar_args.ScalarParam: arguments passed by value (integers among the size_vars)
    scalars: tuple = ()
    scalar_vars: tuple = ()  # the float ones' Vars, in order (C parameters after the sizes)

    def __str__(self):
        return IRPrinter().func(self)

    __repr__ = __str__


# ---------------------------------------------------------------- traversal

# The one table of statement kinds: node type -> (rule name, the expressions the node
# holds itself, the statements directly inside it). Visitors, mutators and printers
# dispatch through it, so a new statement kind is one row here plus its rules.
STMT_KINDS = {
    For: ("for_", lambda s: (s.extent,), lambda s: (s.body,)),
    Store: ("store", lambda s: (s.index, s.value), lambda s: ()),
    Allocate: ("allocate", lambda s: (s.size, *s.buffer.shape), lambda s: (s.body,)),
    IfThenElse: (
        "if_",
        lambda s: (s.cond,),
        lambda s: (s.then,) if s.else_ is None else (s.then, s.else_),
    ),
    Let: ("let", lambda s: (s.value,), lambda s: (s.body,)),
    Prefetch: ("prefetch", lambda s: (s.index,), lambda s: ()),
    IntrinCall: ("intrin_call", lambda s: tuple(o.index for o in s.operands), lambda s: ()),
    Seq: ("seq", lambda s: (), lambda s: s.stmts),
}


def _kind(s: Stmt) -> tuple:
    try:
        return STMT_KINDS[type(s)]
    except KeyError:
        raise TypeError(f"unknown statement {type(s).__name__}") from None


def rule(obj, prefix: str, s: Stmt):
    """``obj``'s method for statement ``s``: ``prefix`` + the kind's rule name."""
    return getattr(obj, prefix + _kind(s)[0])


def stmt_children(s: Stmt):
    return _kind(s)[2](s)


_CHILDREN = {t: kind[2] for t, kind in STMT_KINDS.items()}


def own_exprs(s: Stmt) -> tuple:
    """The expressions a statement holds itself (not those of the statements inside it)."""
    return _kind(s)[1](s)


def walk_stmts(s: Stmt):
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        children = _CHILDREN.get(type(x))
        stack.extend(reversed(children(x) if children else stmt_children(x)))


def written_buffers(s: Stmt) -> set:
    """The ids of the buffers ``s`` writes (by a store or as an intrinsic's output)."""
    out = set()
    for x in walk_stmts(s):
        if isinstance(x, Store):
            out.add(id(x.buffer))
        elif isinstance(x, IntrinCall):
            out.add(id(x.operands[-1].buffer))
    return out


def output_flags(func: LoweredFunc) -> list[bool]:
    """Per parameter of ``func``, whether it is an output: the body writes it, or a stage
    defines it (``attrs["defined"]``: an output of shape (0, 4) has no loops left)."""
    written, defined = written_buffers(func.body), func.attrs.get("defined", ())
    return [id(b) in written or k in defined for k, b in enumerate(func.params)]


class StmtMutator:
    """A bottom-up rewrite of statements: ``mutate_<kind>`` per statement kind
    (``STMT_KINDS``) and ``expr`` for every expression a statement holds. The defaults
    rebuild a node from its rewritten parts (the node itself when nothing changed); a
    pass overrides only the rules it is about.

    ``None`` is the empty statement: a loop or allocation whose body becomes empty is
    dropped, and so is an ``if`` with neither branch (an empty ``then`` with an ``else``
    becomes the negated test).

        class Double(StmtMutator):          # store[i] = v  ->  store[i] = v * 2
            def mutate_store(self, s):
                return Store(s.buffer, s.index, s.value * 2)
    """

    _rules: dict = {}  # statement type -> this class's mutate_<kind> (set per class)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls._rules = {t: getattr(cls, "mutate_" + kind[0]) for t, kind in STMT_KINDS.items()}

    def __call__(self, s: Stmt | None) -> Stmt | None:
        return self.visit(s)

    def visit(self, s: Stmt | None) -> Stmt | None:
        if s is None:
            return None
        f = self._rules.get(type(s))
        return f(self, s) if f is not None else rule(self, "mutate_", s)(s)

    def expr(self, e: Expr) -> Expr:
        return e

    def mutate_seq(self, s: Seq):
        return seq(*[self.visit(x) for x in s.stmts])  # flat, a lone statement unwrapped

    def mutate_for_(self, s: For):
        ext, body = self.expr(s.extent), self.visit(s.body)
        if body is None:
            return None
        return s if ext is s.extent and body is s.body else For(s.var, ext, s.kind, body)

    def mutate_store(self, s: Store):
        i, v = self.expr(s.index), self.expr(s.value)
        return s if i is s.index and v is s.value else Store(s.buffer, i, v)

    def mutate_allocate(self, s: Allocate):
        size, body = self.expr(s.size), self.visit(s.body)
        if body is None:
            return None
        return s if size is s.size and body is s.body else Allocate(s.buffer, size, body)

    def mutate_let(self, s: Let):
        value, body = self.expr(s.value), self.visit(s.body)
        if body is None:
            return None
        return s if value is s.value and body is s.body else Let(s.var, value, body)

    def mutate_if_(self, s: IfThenElse):
        c, then, els = self.expr(s.cond), self.visit(s.then), self.visit(s.else_)
        if then is None and els is None:
            return None
        if then is None:
            return IfThenElse(Not(c), els)
        if c is s.cond and then is s.then and els is s.else_:
            return s
        return IfThenElse(c, then, els)

    def mutate_prefetch(self, s: Prefetch):
        i = self.expr(s.index)
        return s if i is s.index else Prefetch(s.buffer, i, s.lines, s.write, s.level)

    def mutate_intrin_call(self, s: IntrinCall):
        return s.with_indices(self.expr)


StmtMutator._rules = {t: getattr(StmtMutator, "mutate_" + k[0]) for t, k in STMT_KINDS.items()}


class ExprMapper(StmtMutator):
    """Every expression of a statement through ``f``, the structure kept."""

    def __init__(self, f):
        self.expr = f


def unbound_vars(func: LoweredFunc) -> list:
    """The variables ``func``'s body uses that neither a loop nor an argument's shape
    binds (each once, in order of first use): C would not know them."""
    bound = {id(v) for v in (*func.size_vars, *func.scalar_vars)}
    bound |= {id(s.var) for s in walk_stmts(func.body) if isinstance(s, (For, Let))}
    out: list = []
    for s in walk_stmts(func.body):
        for e in own_exprs(s):
            for v in vars_of(e):
                if id(v) not in bound and all(v is not u for u in out):
                    out.append(v)
    return out


# ---------------------------------------------------------------- names


_IDENT = re.compile(r"[^A-Za-z0-9_]")


def c_identifier(name: str) -> str:
    """Make any string a safe C identifier (hostile names included): no keyword, macro,
    or name the included headers declare (``c_names.RESERVED``), nothing reserved to the
    implementation (a leading underscore) or to the generator (``pt_``)."""
    s = _IDENT.sub("_", name)
    if not s or s[0].isdigit():
        s = "v_" + s
    if s in RESERVED or s.startswith(("_", "pt_")):
        s = "v_" + s
    return s


class Namer:
    """Unique, readable identifiers per object (two loops named ``i`` get ``i``, ``i_1``)."""

    def __init__(self, taken=()):
        self.names: dict[int, str] = {}
        self.used = set(taken)

    def __call__(self, obj: Any, hint: str) -> str:
        key = id(obj)
        if key in self.names:
            return self.names[key]
        base = c_identifier(hint)
        name, n = base, 1
        while name in self.used:
            name = f"{base}_{n}"
            n += 1
        self.used.add(name)
        self.names[key] = name
        return name


# ---------------------------------------------------------------- printing


class IRPrinter(Printer):
    """Readable C-like text of loop IR, loop kinds shown."""

    def __init__(self):
        super().__init__()
        self.namer = Namer()

    def var(self, e):
        return self.namer(e, e.name), 10

    def load(self, e):
        return f"{self.namer(e.buffer, e.buffer.name)}[{self(e.index)}]", 10

    def func(self, f: LoweredFunc) -> str:
        params = [
            f"{self.namer(b, b.name)}: {b.dtype}[{', '.join(self(d) for d in b.shape)}]"
            for b in f.params
        ]
        params += [f"{self.namer(v, v.name)}: {v.dtype}" for v in (*f.size_vars, *f.scalar_vars)]
        head = f"func {f.name}({', '.join(params)}) {{\n"
        return head + self.stmt(f.body, 1) + "}\n"

    def stmt(self, s: Stmt, depth: int = 0) -> str:
        return rule(self, "print_", s)(s, "  " * depth, depth)

    def print_seq(self, s: Seq, pad: str, depth: int) -> str:
        return "".join(self.stmt(x, depth) for x in s.stmts)

    def print_for_(self, s: For, pad: str, depth: int) -> str:
        v = self.namer(s.var, s.var.name)
        kind = "" if s.kind == "serial" else s.kind + " "
        return (
            f"{pad}{kind}for ({v}, 0, {self(s.extent)}) {{\n{self.stmt(s.body, depth + 1)}{pad}}}\n"
        )

    def print_let(self, s: Let, pad: str, depth: int) -> str:
        v = self.namer(s.var, s.var.name)
        return f"{pad}let {v} = {self(s.value)}\n{self.stmt(s.body, depth)}"

    def print_store(self, s: Store, pad: str, depth: int) -> str:
        return f"{pad}{self.namer(s.buffer, s.buffer.name)}[{self(s.index)}] = {self(s.value)}\n"

    def print_allocate(self, s: Allocate, pad: str, depth: int) -> str:
        b = s.buffer
        return (
            f"{pad}alloc {self.namer(b, b.name)}: {b.dtype}[{self(s.size)}] {b.scope}\n"
            f"{self.stmt(s.body, depth)}"
        )

    def print_prefetch(self, s: Prefetch, pad: str, depth: int) -> str:
        name = self.namer(s.buffer, s.buffer.name)
        rw = " for write" if s.write else ""
        to = f" into L{s.level}" if s.level != 1 else ""
        return f"{pad}prefetch {name}[{self(s.index)}] {s.lines} line(s){rw}{to}\n"

    def print_intrin_call(self, s: IntrinCall, pad: str, depth: int) -> str:
        ops = ", ".join(
            f"{self.namer(o.buffer, o.buffer.name)}[{self(o.index)}] "
            f"strides ({', '.join(map(str, o.strides))})"
            for o in s.operands
        )
        return f"{pad}call {s.intrin.name}({ops})\n"

    def print_if_(self, s: IfThenElse, pad: str, depth: int) -> str:
        out = f"{pad}if ({self(s.cond)}) {{\n{self.stmt(s.then, depth + 1)}{pad}}}"
        if s.else_ is not None:
            out += f" else {{\n{self.stmt(s.else_, depth + 1)}{pad}}}"
        return out + "\n"
