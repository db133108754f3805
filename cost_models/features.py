"""Features of a lowered kernel: a fixed-length vector from its loop IR, as scheduled
(``pypto.lowering.lower_nest``: a loop marked unrolled is still a loop, its kind a
feature, its body one statement, not copies; ``pt.lower``'s unrolling took most of a
Winograd kernel's lowering, and the cost model's search lowers hundreds of candidates).

For the statement that does the most work (the hottest store), the loops
around it are described innermost first, for up to ``LEVELS`` levels:

    log2 extent, loop kind (serial / parallel / vectorized / unrolled), and
    for up to ``ACCESSES`` buffer accesses (the store first, then loads by
    how often they repeat): log2 |stride| of that loop, log2 bytes and log2
    distinct 64-byte lines touched by the loops from that level inward,
    log2 reuse (iterations per distinct element).

Then whole-kernel features: flops, bytes, arithmetic intensity, parallel
and vector extents, local buffers, prefetches, the target's vector
width and cache sizes, the math calls gcc leaves scalar (libm's ``expf``
where ``fast_exp`` vectorizes) and the bytes every other statement stores
(packing B, copying a tile out). A tensor intrinsic's call (a micro-kernel, ``tensorize``)
counts as the loop nest it computes, its output's last axis vectorized and its other
spatial axes unrolled inside its reduce loops, as a register tile's code runs them:

    for io: gemm_tile_8x32(A + .., B + .., C + ..)
    ->
    for io: for k in 0..K: unrolled for i in 0..8: vectorized for j in 0..32:
        C[.. + i*ldc + j] = C[..] + A[.. + i*lda + k] * B[.. + k*ldb + j]

so its shape and the loops around it are features (as a call they were none, and the
hottest store was whatever the kernel stored outside it). The layout is versioned
(``SCHEMA``): a saved model refuses vectors of another schema. The element type shows in
the bytes, lines and strides of each access (an int8 load is a quarter of a float32 one)
and in the flops, which count integer data arithmetic (int8 products summed in int32) as
well as float.
"""

from __future__ import annotations

import math

import numpy as np

from pypto import dtypes
from pypto.expr import (
    Binary,
    Call,
    Const,
    Expr,
    Load,
    Reduce,
    Select,
    TensorRead,
    Var,
    map_children,
    walk,
)
from pypto.intervals import INF, Ranges, bounds
from pypto.loop_ir import (
    LOOP_KINDS,
    Allocate,
    For,
    IfThenElse,
    IntrinCall,
    Let,
    LoweredFunc,
    Prefetch,
    Seq,
    Store,
)
from pypto.mathfuncs import FUNCS, VECTORIZED
from pypto.simplify import Lin, simplify
from pypto.target import CACHE_LINE

SCHEMA = "pypto-features-v6"
LEVELS = 6
ACCESSES = 4
KINDS = LOOP_KINDS  # the loop IR's kinds, in the schema's order
LINE = CACHE_LINE

_LEVEL_NAMES = ["log_extent", *[f"kind_{k}" for k in KINDS]] + [
    f"acc{a}_{f}"
    for a in range(ACCESSES)
    for f in ("log_stride", "log_bytes", "log_lines", "log_reuse")
]
_GLOBAL_NAMES = [
    "log_flops",
    "log_bytes_unique",
    "arith_intensity",
    "log_iterations",
    "n_stores",
    "log_parallel_extent",
    "log_vector_extent",
    "vector_extent_per_lane",
    "inner_contiguous",
    "log_unrolled",
    "n_local_buffers",
    "log_local_bytes",
    "n_guards",
    "depth",
    "vector_lanes",
    "log_l1",
    "log_l2",
    "log_l3",
    "cores",
    "vector_registers",
    "n_prefetches",
    "log_prefetch_bytes",
    "log_scalar_calls",
    "log_other_store_bytes",
]
FEATURE_NAMES = tuple(f"l{lvl}_{n}" for lvl in range(LEVELS) for n in _LEVEL_NAMES) + tuple(
    _GLOBAL_NAMES
)
N_FEATURES = len(FEATURE_NAMES)


def _lg(x: float) -> float:
    return math.log2(x + 1.0) if x > 0 else 0.0


class _Walk:
    """Collects stores with their enclosing loops, and kernel-wide counts."""

    def __init__(self, func: LoweredFunc):
        self.ranges = Ranges({v: (0, INF) for v in func.size_vars})
        self.stores = []  # (Store, [loops outer->inner], iterations)
        self.locals = []
        self.guards = 0
        self.prefetches = []  # (Prefetch, executions)
        self.go(func.body, [], 1.0)

    def extent(self, e) -> float:
        hi = bounds(simplify(e, self.ranges), self.ranges)[1]
        return 1024.0 if hi == INF else float(max(hi, 0))

    def go(self, s, loops, iters):
        if s is None:
            return
        if isinstance(s, Seq):
            for x in s.stmts:
                self.go(x, loops, iters)
        elif isinstance(s, For):
            ext = self.extent(s.extent)
            self.ranges = self.ranges.child(s.var, s.extent)
            self.go(s.body, loops + [(s, ext)], iters * ext)
        elif isinstance(s, Allocate):
            self.locals.append(s)
            self.go(s.body, loops, iters)
        elif isinstance(s, IfThenElse):
            self.guards += 1
            self.go(s.then, loops, iters)
            self.go(s.else_, loops, iters)
        elif isinstance(s, Store):
            self.stores.append((s, loops, iters))
        elif isinstance(s, Prefetch):
            self.prefetches.append((s, iters))
        elif isinstance(s, IntrinCall):
            self.go(intrin_nest(s), loops, iters)
        elif isinstance(s, Let):
            self.go(s.body, loops, iters)


def _at(operand, indices) -> Expr:
    """The flat index of an intrinsic's element ``indices`` in its operand's buffer."""
    flat = operand.index
    for e, stride in zip(indices, operand.strides):
        flat = Binary("add", flat, Binary("mul", e, Const(stride, e.dtype), e.dtype), e.dtype)
    return flat


def intrin_nest(call: IntrinCall):
    """The loop nest a tensor intrinsic's call computes (see the module's docstring): its
    reads of the inputs and the output as loads of the operands' buffers."""
    op = call.intrin.op
    *ins, out = call.operands
    by_tensor = {t.op: o for t, o in zip(call.intrin.inputs, ins)}
    axes = [iv.var for iv in op.axis]

    def load(x):
        x = map_children(x, load)
        if isinstance(x, TensorRead):
            o = by_tensor.get(x.tensor.op)
            return Load(o.buffer, _at(o, x.indices), x.dtype) if o is not None else x
        return x

    index = _at(out, axes)
    body = op.body
    if isinstance(body, Reduce):  # out = out (+) source over the reduce axes
        acc = Load(out.buffer, index, body.dtype)
        value = body.combiner.combine(acc, load(body.source))
        reduce_axes = body.axes
    else:
        value, reduce_axes = load(body), ()
    s = Store(out.buffer, index, value)
    kinds = ["unrolled"] * (len(op.axis) - 1) + ["vectorized"]
    for iv, kind in reversed(list(zip(op.axis, kinds))):
        s = For(iv.var, iv.extent, kind, s)
    for iv in reversed(list(reduce_axes)):
        s = For(iv.var, iv.extent, "serial", s)
    return s


def _flops(e) -> int:
    """Arithmetic on data: float operations, and integer ones not on indices (int8
    products summed in int32 count as float32 ones do; index arithmetic is int64)."""
    return sum(1 for x in walk(e) if isinstance(x, (Binary, Call, Select)) and _data(x.dtype))


def _scalar_calls(e) -> int:
    """Math calls in ``e`` that stay scalar libm calls in vectorized code."""
    return sum(1 for x in walk(e) if isinstance(x, Call) and x.name in FUNCS
               and x.name not in VECTORIZED)  # fmt: skip


def _data(dt: str) -> bool:
    d = dtypes.dtype(dt)
    return d.is_float or (d.is_int and dt != dtypes.INDEX)


def _access_stats(index, elem: int, loops, level: int):
    """Stride of loop ``level`` and the footprint of loops ``level``.. (innermost) for one
    access with flat ``index``."""
    lin = Lin.of(index)
    coeff = {}
    for atom, c in lin.terms.values():
        if isinstance(atom, Var):
            coeff[atom] = c
    inner = loops[level:]
    var = loops[level][0].var
    stride = abs(coeff.get(var, 0))
    span = 1.0
    lines = 1.0
    touched = 1.0
    small_span = 0.0
    for loop, ext in inner:
        c = abs(coeff.get(loop.var, 0))
        if c == 0:
            continue
        span += c * (ext - 1)
        touched *= ext
        if c * elem >= LINE:
            lines *= ext
        else:
            small_span += c * (ext - 1)
    lines *= math.ceil((small_span + 1) * elem / LINE)
    iterations = math.prod(ext for _, ext in inner)
    nbytes = min(span, touched) * elem
    reuse = iterations / max(1.0, min(span, touched))
    return stride, nbytes, lines, reuse


def featurize(func: LoweredFunc, target=None) -> np.ndarray:
    """A ``float32`` vector of ``N_FEATURES`` features (schema ``SCHEMA``)."""
    w = _Walk(func)
    out = np.zeros(N_FEATURES, dtype=np.float32)
    if not w.stores:
        return out
    work = [(_flops(s.value) + 1) * it for s, _, it in w.stores]
    s, loops, iters = w.stores[int(np.argmax(work))]
    accesses = [(s.index, s.buffer)]
    loads = [x for x in walk(s.value) if isinstance(x, Load)]
    seen = set()
    for ld in loads:
        key = (id(ld.buffer), str(ld.index))
        if key not in seen:
            seen.add(key)
            accesses.append((ld.index, ld.buffer))
    accesses = accesses[:ACCESSES]
    per = len(_LEVEL_NAMES)
    for lvl in range(min(LEVELS, len(loops))):
        depth = len(loops) - 1 - lvl  # innermost first
        loop, ext = loops[depth]
        base = lvl * per
        out[base] = _lg(ext)
        out[base + 1 + KINDS.index(loop.kind)] = 1.0
        for a, (index, buf) in enumerate(accesses):
            stride, nbytes, lines, reuse = _access_stats(index, buf.elem_bytes, loops, depth)
            k = base + 1 + len(KINDS) + 4 * a
            out[k : k + 4] = (_lg(stride), _lg(nbytes), _lg(lines), _lg(reuse))
    flops = sum(_flops(st.value) * it for st, _, it in w.stores)
    unique = 0.0
    for p in func.params:
        n = 1.0
        for d in p.shape:
            n *= w.extent(d)
        unique += n * p.elem_bytes
    par = math.prod(e for lp, e in loops if lp.kind == "parallel")
    vec = [e for lp, e in loops if lp.kind == "vectorized"]
    unrolled = math.prod(e for lp, e in loops if lp.kind == "unrolled")
    lanes = target.vector_lanes(s.buffer.elem_bytes) if target is not None else 8
    inner_index = Lin.of(s.index)
    inner_var = loops[-1][0].var if loops else None
    contiguous = float(
        inner_var is not None
        and any(a is inner_var and c == 1 for a, c in inner_index.terms.values())
    )
    local_bytes = 0.0
    for al in w.locals:
        local_bytes += w.extent(al.size) * al.buffer.elem_bytes
    g = LEVELS * per
    out[g:] = (
        _lg(flops),
        _lg(unique),
        flops / max(unique, 1.0),
        _lg(iters),
        len(w.stores),
        _lg(par),
        _lg(vec[-1] if vec else 0),
        (vec[-1] / lanes) if vec else 0.0,
        contiguous,
        _lg(unrolled if unrolled > 1 else 0),
        len(w.locals),
        _lg(local_bytes),
        w.guards,
        len(loops),
        lanes,
        _lg(getattr(target, "l1d_bytes", 32768) or 0),
        _lg(getattr(target, "l2_bytes", 0) or 0),
        _lg(getattr(target, "l3_bytes", 0) or 0),
        getattr(target, "cores", 1) or 1,
        getattr(target, "vector_registers", 16) or 16,
        len(w.prefetches),
        _lg(sum(p.lines * LINE * it for p, it in w.prefetches)),
        _lg(sum(_scalar_calls(st.value) * it for st, _, it in w.stores)),
        _lg(sum(st.buffer.elem_bytes * it for st, _, it in w.stores if st is not s)),
    )
    return out
