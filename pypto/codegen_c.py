"""C code generation: loop IR -> C99 (GNU dialect) text (expressions: ``c_expr``).

Rule tables map each expression and statement type to its C form. The
output is meant to be read: one statement a line, loops with constant trip
counts where the schedule allows, ``restrict`` on every buffer, inputs
``const``, local buffers 64-byte aligned, OpenMP pragmas for parallel and
SIMD loops.
"""

from __future__ import annotations

import math
import re

from . import dtypes
from ._version import __version__ as _version
from .arg_checks import index_checks
from .autovec import autovec_hazard, inner_meet, overwritten_across
from .c_expr import CPrinter, scalar_buffers
from .c_helpers import (
    ALLOC,
    CHECKED_INDEX,
    MAX_BYTES,
    SIZE_CHECK,
    STACK_LIMIT,
    WORKSPACE,
    WORKSPACE_MAX,
)
from .errors import BuildError
from .expr import Binary, Cast, Const, Load, Var, vars_of
from .intervals import INF, bounds
from .intrin import intrin_fences
from .loop_ir import (
    Allocate,
    For,
    IfThenElse,
    IntrinCall,
    Let,
    LoweredFunc,
    Namer,
    Prefetch,
    Seq,
    Store,
    rule,
    seq,
    walk_stmts,
    written_buffers,
)
from .prefetch import LEVELS
from .structural import skey
from .target import CACHE_LINE, Target

ALIGN = CACHE_LINE  # local buffers start on a cache line


_C_CALLED = r"\b([A-Za-z_]\w*)\s*\("  # a function's name where it is defined or called


class CodeGen:
    """Emit one C function (plus the helpers it uses) for a LoweredFunc."""

    def __init__(self, func: LoweredFunc, target: Target, timers: dict | None = None):
        self.func = func
        self.target = target
        self.timers = timers or {}  # id(statement) -> slot it is timed in (pypto.profile)
        self.intrins = {}  # name -> TensorIntrin, each emitted once
        for s in walk_stmts(func.body):
            if isinstance(s, IntrinCall):
                seen = self.intrins.setdefault(s.intrin.name, s.intrin)
                if seen.source != s.intrin.source:
                    raise BuildError(
                        f"two tensor intrinsics are named {seen.name} with different C sources"
                    )
        # the identifiers of the intrinsics' C (a user's function named default_function,
        # as the kernel) are taken: the kernel's names step around them
        theirs = {w for i in self.intrins.values() for w in re.findall(_C_CALLED, i.source)}
        self.namer = Namer(taken=("pt_alloc", "pt_alloc_or_die", *self.intrins, *theirs))
        self.ranges = {v: (0, INF) for v in func.size_vars}
        self.p = CPrinter(self.namer, self.ranges, index_checks(func.body))
        self.p.scalars = scalar_buffers(func.body)
        self.lines: list[str] = []
        self.parallel_depth = 0
        self.simd_depth = 0  # inside a loop marked omp simd: no other loop is marked
        self.loop_depth = 0
        self.enclosing: list = []  # the loops around the statement emitted
        self.block_body = None  # the statement that is a loop's whole body
        self.cleanups: list[str] = []  # declarations of function-level heap buffers
        self.frees: list[str] = []
        self.workspace_slots = 0  # function-level buffers kept between calls
        # names of the function-level heap buffers (a failed allocation jumps to pt_exit)
        self.function_level: set = set()
        self.workspace_names: list[str] = []  # those in the kept blocks when the call owns them
        self.needs_alloc = False
        self.needs_size_check = False
        self.hoisted: dict = {}  # C name -> per-thread scratch of a parallel loop

    def emit(self, depth: int, text: str):
        self.lines.append("  " * depth + text)

    def stmt(self, s, depth: int):
        slot = self.timers.get(id(s))
        if slot is not None:
            self.emit(depth, "pt_prof_t = omp_get_wtime();")
        rule(self, "", s)(s, depth)  # one method per statement kind (loop_ir.STMT_KINDS)
        if slot is not None:
            self.emit(depth, f"pt_prof_seconds[{slot}] += omp_get_wtime() - pt_prof_t;")

    def seq(self, s, depth):
        for x in s.stmts:
            self.stmt(x, depth)

    def for_(self, s: For, depth):
        v = self.namer(s.var, s.var.name)
        ext = self.p(s.extent)
        if not isinstance(s.extent, (Const, Var)):
            # a bound that is not a constant is computed once, before the loop: gcc 12's
            # -O3 vectorizer miscompiled a short loop re-evaluating its bound
            # (``j_outer < pt_floordiv_i64(1 - j_inner, 5) + 2`` inside a parallel loop
            # ran no iteration for j_inner 2..4)
            end = self.namer(s, f"{v}_end")
            self.emit(depth, f"const int64_t {end} = {ext};")
            ext = end
        hi = bounds(s.extent, self.ranges)[1]
        self.ranges[s.var] = (0, hi - 1 if hi != INF else INF)
        scratch = []
        if s.kind == "parallel" and self.parallel_depth == 0:
            scratch = self.scratch(s.body)
            if scratch:  # one block per thread for all its iterations, not one per iteration
                self.emit(depth, "#pragma omp parallel")
                self.emit(depth, "{")
                depth += 1
                for name, t, nbytes, _ in scratch:
                    if nbytes is None:  # sized at run time: at its first use (if any)
                        self.emit(depth, f"{t}* restrict {name} = NULL;")
                    else:
                        self.emit(depth, f"{t}* restrict {name} = ({t}*)pt_alloc_or_die({nbytes});")
                self.emit(depth, "#pragma omp for schedule(static)")
            else:
                self.emit(depth, "#pragma omp parallel for schedule(static)")
        elif s.kind == "vectorized" and not _has_inner_annotated_loop(s.body):
            # OpenMP forbids a simd or parallel region nested in a simd loop
            if overwritten_across(s, tuple(self.enclosing), self.func.size_vars):
                self.emit(depth, "#pragma GCC ivdep  /* not omp simd: pypto/autovec.py */")
            elif inner_meet(s, tuple(self.enclosing), self.func.size_vars):
                self.emit(depth, "/* not omp simd: pypto/autovec.py */")
            else:
                self.emit(depth, "#pragma omp simd")
        elif s.kind == "unrolled":
            self.emit(depth, "#pragma GCC unroll 8")
        one_at_a_time = self.simd_depth == 0 and autovec_hazard(s)
        if one_at_a_time:
            self.emit(depth, "#pragma omp simd simdlen(1)  /* not vectorized: pypto/autovec.py */")
        self.emit(depth, f"for (int64_t {v} = 0; {v} < {ext}; ++{v}) {{")
        self.simd_depth += one_at_a_time or s.kind == "vectorized"
        self.parallel_depth += s.kind == "parallel"
        self.loop_depth += 1
        self.block_body = s.body
        self.enclosing.append(s)
        self.stmt(s.body, depth + 1)
        self.enclosing.pop()
        if s.kind == "parallel" and self.parallel_depth == 1:
            for fence in intrin_fences(s.body):
                self.emit(depth + 1, fence)
        self.loop_depth -= 1
        self.simd_depth -= one_at_a_time or s.kind == "vectorized"
        self.parallel_depth -= s.kind == "parallel"
        self.emit(depth, "}")
        if scratch:
            for name, *_ in reversed(scratch):
                self.emit(depth, f"free({name});")
            self.emit(depth - 1, "}")

    def scratch(self, body) -> list:
        """The heap buffers allocated inside a parallel loop's body, as ``(C name, C
        type, bytes or None, buffer)``: allocated once per thread around the loop instead
        of once per iteration (a thread runs its iterations one after another, and a
        fresh block holds nothing an iteration may read). Softmax's 16 KiB row of
        exponentials cost a malloc and a free per row, 2-5% of its time on a Zen 4. A
        buffer of constant size gets its largest; one sized by the kernel's sizes only
        (None: computed at run time) the same shape in every copy of it."""
        out, shapes, mixed = {}, {}, set()
        size_vars = {id(v) for v in self.func.size_vars}
        for a in walk_stmts(body):
            if not isinstance(a, Allocate):
                continue
            name = self.namer(a.buffer, a.buffer.name)
            t = dtypes.dtype(a.buffer.dtype).c_storage
            nbytes = self.const_bytes(a)
            if nbytes is None:
                shape = tuple(skey(d) for d in a.buffer.shape)
                free = {id(v) for d in a.buffer.shape for v in vars_of(d)}
                if free <= size_vars and shapes.setdefault(name, shape) == shape:
                    out.setdefault(name, (name, t, None, a.buffer))
                    continue
                mixed.add(name)
                continue
            if shapes.setdefault(name, None) is not None:
                mixed.add(name)  # a copy of constant size beside one sized at run time
            if STACK_LIMIT < nbytes <= MAX_BYTES:
                old = out.get(name, (name, t, 0, a.buffer))
                if old[2] is None:
                    mixed.add(name)
                out[name] = (name, t, max(nbytes, old[2] or 0), a.buffer)
        out = {k: v for k, v in out.items() if k not in mixed}
        self.hoisted.update(out)
        self.needs_alloc |= bool(out)
        return list(out.values())

    @staticmethod
    def const_bytes(s: Allocate):
        """A buffer's size in bytes when it is a constant, else None."""
        b = s.buffer
        nbytes = s.size.value * b.elem_bytes if isinstance(s.size, Const) else None
        if nbytes is not None and all(isinstance(d, Const) for d in b.shape):
            # the shape's product in Python's integers: a size past 2**63 wrapped in int64
            nbytes = max(nbytes, math.prod(int(d.value) for d in b.shape) * b.elem_bytes)
        return nbytes

    def store(self, s: Store, depth):
        b = s.buffer
        value = self.p(s.value)
        d = dtypes.dtype(b.dtype)
        if _same_storage_copy(s):  # a 16-bit float copied: its bits, not a round trip
            value = self.p.element(s.value.buffer, s.value.index)
        elif forms := self.p.storage(b.dtype):
            if isinstance(s.value, Cast) and s.value.dtype == b.dtype:
                inner = s.value.value  # stored rounded: the store rounds, once
                value = self.p.int_as_float(inner, self.p(inner), b.dtype)
                if forms.cast_double and inner.dtype == "float64":  # not twice
                    value = f"pt_f32_odd({value})"
            value = forms.store.format(value)
        elif d.c_storage != d.c_compute and not value.startswith(f"(({d.c_storage})"):
            value = f"({d.c_storage})({value})"  # (unless the value is truncated already)
        self.emit(depth, f"{self.p.element(b, s.index)} = {value};")

    def prefetch(self, s: Prefetch, depth):
        # integer address arithmetic: the lines may lie past the buffer (no fault, no UB)
        b = s.buffer
        name, index = self.namer(b, b.name), self.p(s.index)
        base = f"(uintptr_t){name} + (uintptr_t)({index}) * {b.elem_bytes}"
        rw, loc = int(s.write), LEVELS[s.level]
        if s.lines == 1:
            self.emit(depth, f"__builtin_prefetch((const void*)({base}), {rw}, {loc});")
            return
        self.emit(depth, f"for (int64_t pt_line = 0; pt_line < {s.lines}; ++pt_line) {{")
        line = f"{base} + {CACHE_LINE} * pt_line"
        self.emit(depth + 1, f"__builtin_prefetch((const void*)({line}), {rw}, {loc});")
        self.emit(depth, "}")

    def intrin_call(self, s: IntrinCall, depth):
        args = []
        for o in s.operands:
            name = self.namer(o.buffer, o.buffer.name)
            zero = isinstance(o.index, Const) and o.index.value == 0
            args.append(name if zero else f"{name} + {self.p.wrap(o.index, 5, True)}")
            args.extend(str(st) for st in o.strides)
        self.emit(depth, f"{s.intrin.name}({', '.join(args)});")

    def let(self, s: Let, depth):
        """A block: the value named once, then its body (which may be unrolled again)."""
        v = self.namer(s.var, s.var.name)
        self.ranges[s.var] = bounds(s.value, self.ranges, wrapped=True)
        self.emit(depth, "{")
        self.emit(depth + 1, f"const int64_t {v} = {self.p(s.value)};")
        self.stmt(s.body, depth + 1)
        self.emit(depth, "}")

    def allocate(self, s: Allocate, depth):
        b = s.buffer
        name = self.namer(b, b.name)
        if name in self.hoisted:  # allocated once per thread around the parallel loop
            if self.hoisted[name][2] is None:  # sized at run time: by the first iteration
                self.emit(depth, f"if (!{name}) {{")
                self.emit(depth + 1, "int32_t pt_bad = 0;")
                self.emit(depth + 1, f"int64_t pt_nb = {self.checked_bytes(b, 'pt_bad')};")
                t = dtypes.dtype(b.dtype).c_storage
                nb = "pt_bad ? SIZE_MAX : (size_t)pt_nb"  # an overflow: a clean abort
                self.emit(depth + 1, f"{name} = ({t}*)pt_alloc_or_die({nb});")
                self.emit(depth, "}")
            self.stmt(s.body, depth)
            return
        t = dtypes.dtype(b.dtype).c_storage
        nbytes = self.const_bytes(s)
        scoped = self.loop_depth > 0 or name in self.function_level
        on_heap = nbytes is None or nbytes > STACK_LIMIT
        self.needs_alloc |= on_heap
        if nbytes is not None and nbytes > MAX_BYTES:
            raise MemoryError(
                f"{self.func.name}: temporary buffer {b.name} would need {nbytes} bytes"
            )
        if on_heap and not scoped:
            # function level: declared NULL up front, freed once at the single exit
            self.cleanups.append(f"{t}* restrict {name} = NULL;")
            if nbytes is None:  # sizes bound at call time: overflow is an error, not a wrap
                self.emit(depth, "{")
                self.emit(depth + 1, "int32_t pt_bad = 0;")
                self.emit(depth + 1, f"int64_t pt_nb = {self.checked_bytes(b, 'pt_bad')};")
                self.emit(depth + 1, f"if (pt_bad || pt_nb > INT64_C({MAX_BYTES})) {{")
                self.emit(depth + 2, "status = -3;")
                self.emit(depth + 2, "goto pt_exit;")
                self.emit(depth + 1, "}")
                self.emit(depth + 1, f"{name} = ({t}*)pt_alloc((size_t)pt_nb);")
                self.emit(depth, "}")
            elif nbytes <= WORKSPACE_MAX:
                slot = self.workspace_slots
                self.workspace_slots += 1
                self.emit(
                    depth,
                    f"{name} = ({t}*)(pt_ws_own ? pt_workspace({slot}, (size_t){nbytes}) "
                    f": pt_alloc((size_t){nbytes}));",
                )
                self.workspace_names.append(name)
            else:
                self.emit(depth, f"{name} = ({t}*)pt_alloc((size_t){nbytes});")
            self.emit(depth, f"if (!{name}) {{ status = -1; goto pt_exit; }}")
            if nbytes is None or nbytes > WORKSPACE_MAX:
                self.frees.append(name)
            self.function_level.add(name)
            self.stmt(s.body, depth)
            return
        # a block of its own unless it is a loop's whole body: unrolled copies of
        # the enclosing loop would otherwise declare the buffer twice in one scope
        braces = s is not self.block_body
        inner = depth + braces
        if braces:
            self.emit(depth, "{")
        if id(b) in self.p.scalars:
            first, *rest = s.body.stmts if isinstance(s.body, Seq) else (s.body,)
            if isinstance(first, Store) and first.buffer is b and id(first) not in self.timers:
                self.store(first, inner)  # declared with its first value
                self.lines[-1] = "  " * inner + f"{t} {self.lines[-1].lstrip()}"
                self.stmt(seq(*rest), inner)
            else:
                self.emit(inner, f"{t} {name};")
                self.stmt(s.body, inner)
        elif not on_heap:
            self.emit(inner, f"{t} {name}[{s.size.value}] __attribute__((aligned({ALIGN})));")
            self.stmt(s.body, inner)
        else:
            if nbytes is None:  # an overflowing size asks for SIZE_MAX bytes: a clean abort
                flag = f"pt_bad_{name}"
                self.emit(inner, f"int32_t {flag} = 0;")
                self.emit(inner, f"int64_t pt_nb_{name} = {self.checked_bytes(b, flag)};")
                nb = f"{flag} ? SIZE_MAX : (size_t)pt_nb_{name}"
            else:
                nb = str(nbytes)
            self.emit(inner, f"{t}* restrict {name} = ({t}*)pt_alloc_or_die({nb});")
            self.stmt(s.body, inner)
            self.emit(inner, f"free({name});")
        if braces:
            self.emit(depth, "}")

    def checked_bytes(self, b, flag: str) -> str:
        """C for the byte count of buffer ``b`` with every product and sum checked for
        overflow (``flag`` is set when one overflows); a negative extent counts as 0."""
        self.needs_size_check = True

        def ck(e) -> str:
            if isinstance(e, Binary) and e.op in ("mul", "add"):
                fn = "pt_size_mul" if e.op == "mul" else "pt_size_add"
                return f"{fn}({ck(e.a)}, {ck(e.b)}, &{flag})"
            return self.p(e)

        out = str(b.elem_bytes)
        for d in b.shape:
            out = f"pt_size_mul({out}, pt_size_dim({ck(d)}), &{flag})"
        return out

    def if_(self, s: IfThenElse, depth):
        self.emit(depth, f"if ({self.p(s.cond)}) {{")
        self.stmt(s.then, depth + 1)
        if s.else_ is not None:
            self.emit(depth, "} else {")
            self.stmt(s.else_, depth + 1)
        self.emit(depth, "}")

    def generate(self) -> str:
        f = self.func
        written = written_buffers(f.body)
        params = []
        for b in f.params:
            t = dtypes.dtype(b.dtype).c_storage
            const = "" if id(b) in written else "const "
            params.append(f"{const}{t}* restrict {self.namer(b, b.name)}")
        for v in f.size_vars:
            params.append(f"int64_t {self.namer(v, v.name)}")
        for v in f.scalar_vars:
            params.append(f"{dtypes.dtype(v.dtype).c_storage} {self.namer(v, v.name)}")
        fname = self.namer(f, f.name)
        self.stmt(f.body, 1)
        for fence in intrin_fences(f.body, outside_parallel=True):
            self.emit(1, fence)
        body = self.lines
        head = [f"int32_t {fname}({', '.join(params) or 'void'}) {{"]
        if self.function_level or self.p.checks:
            head.append("  int32_t status = 0;")
            head.extend("  " + d for d in self.cleanups)
        if self.workspace_slots:  # this call owns the kept blocks unless another one does
            head.append(
                "  const int pt_ws_own = !__atomic_exchange_n(&pt_ws_busy, 1, __ATOMIC_ACQUIRE);"
            )
        out = [
            f"// generated by pypto {_version} for target {self.target.name}",
            "#if defined(__STRICT_ANSI__) && !defined(_POSIX_C_SOURCE)",
            "#define _POSIX_C_SOURCE 200112L  /* posix_memalign under -std=c99 */",
            "#endif",
            "#include <stdint.h>",
            "#include <stdio.h>",
            "#include <stdlib.h>",
            "#include <math.h>",
        ]
        if self.timers or any(
            isinstance(s, For) and s.kind == "parallel" for s in walk_stmts(f.body)
        ):
            out.append("#include <omp.h>")
        out.append("")
        if self.timers:  # seconds per slot, summed over calls, read by pypto.profile
            out.append(f"double pt_prof_seconds[{max(self.timers.values()) + 1}];")
            out.append("static double pt_prof_t;")
        out.extend(self.p.helpers.values())
        emitted = set()  # intrinsics declared on one C source: it is pasted once
        for intrin in self.intrins.values():
            out.append(f"// tensor intrinsic {intrin.name}: {intrin.signature}")
            if intrin.source not in emitted:
                out.append(intrin.source.strip("\n"))
            emitted.add(intrin.source)
        if self.needs_alloc:
            out.append(ALLOC)
        if self.workspace_slots:
            out.append(WORKSPACE.format(n=self.workspace_slots))
        if self.needs_size_check:
            out.append(SIZE_CHECK)
        if self.p.checks:
            out.append(CHECKED_INDEX)
        if self.p.helpers or self.needs_alloc or self.p.checks or self.intrins:
            out.append("")
        out.extend(head)
        out.extend(body)
        if self.function_level:
            out.append("pt_exit:")
            for name in reversed(self.frees):
                out.append(f"  free({name});")
            if self.workspace_slots:
                out.append("  if (pt_ws_own) {")
                out.append("    __atomic_store_n(&pt_ws_busy, 0, __ATOMIC_RELEASE);")
                out.append("  } else {")
                out.extend(f"    free({name});" for name in reversed(self.workspace_names))
                out.append("  }")
            out.append("  return status;")
        else:
            out.append("  return status;" if self.p.checks else "  return 0;")
        out.append("}")
        self.fname = fname
        return "\n".join(out) + "\n"


def _has_inner_annotated_loop(s) -> bool:
    return any(isinstance(x, For) and x.kind in ("vectorized", "parallel") for x in walk_stmts(s))


def codegen(func: LoweredFunc, target: Target, timers: dict | None = None) -> tuple[str, str]:
    """C source for ``func`` and the C name of its entry point. ``timers`` (a profiling
    build, see ``pypto.profile``): statement id -> slot of ``pt_prof_seconds`` that the
    statement's wall time is added to."""
    g = CodeGen(func, target, timers)
    src = g.generate()
    return src, g.fname


def _same_storage_copy(s: Store) -> bool:
    """A store of a plain load from a buffer of the same storage-only dtype (float16,
    bfloat16): widening to float and rounding back is the identity there (but for a
    signalling NaN's quiet bit), so the element is copied as it is."""
    v = s.value
    return isinstance(v, Load) and v.buffer.dtype == s.buffer.dtype and v.dtype in dtypes.STORAGE
