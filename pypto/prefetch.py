"""``Stage.prefetch``: its checks, and its lowering to cache-line hints at the top
of a loop body.

    for j:                          for j:
      for k in 0..64:        ->       prefetch A[f(j + 2, 0)] ... (lines up to f(j + 2, 63))
        B[j] += A[f(j, k)]            for k in 0..64: B[j] += A[f(j, k)]

The elements an iteration touches must be affine in the inner loops, whose
extents must be constant, and span at most ``PREFETCH_BYTES``. A stage's own
output, and an elementwise consumer's output at the stage's own indices, are
prefetched for writing.
"""

from __future__ import annotations

from .dtypes import INDEX
from .errors import ScheduleError
from .expr import Const, Expr, Load, TensorRead, Var, substitute, walk
from .loop_ir import Prefetch
from .simplify import Lin, simplify
from .structural import skey
from .target import CACHE_LINE
from .tensor import Tensor

PREFETCH_BYTES = 4096  # at most 4 KiB prefetched per loop iteration

# cache level -> the locality argument of gcc's __builtin_prefetch (x86: prefetcht0, t1)
LEVELS = {1: 3, 2: 2}


def _span(idx: Expr, inner: dict, ranges, where: str):
    """``(first, span)``: the smallest value of the affine ``idx`` over the loops in
    ``inner`` (var -> extent, constant) and the distance to its largest value."""
    lin = Lin.of(idx)
    ext_of = {id(v): e for v, e in inner.items()}
    first, span = Lin({}, lin.const, INDEX), 0
    for key, (atom, coeff) in lin.terms.items():
        if isinstance(atom, Var) and id(atom) in ext_of:
            ext = simplify(ext_of[id(atom)], ranges)
            if not isinstance(ext, Const):
                raise ScheduleError(f"{where}: inner loop {atom.name} has no constant extent")
            if coeff < 0:
                first.terms[key] = [Const(ext.value - 1, INDEX), coeff]
            span += abs(coeff) * (ext.value - 1)
        elif any(isinstance(x, Load) or id(x) in ext_of for x in walk(atom)):
            raise ScheduleError(f"{where}: the index {idx} is not affine in the inner loops")
        else:
            first.terms[key] = [atom, coeff]
    return simplify(first.to_expr()), span


def check_prefetch(st, tensor, offset, level=1) -> None:
    """Validate ``st.prefetch(tensor, loop, offset, level)`` (``st`` a Stage): ``tensor``
    is read by the stage (through inlined stages too), is its own output, or is an
    elementwise consumer of it; ``offset`` is a nonzero int (0 allowed for a consumer);
    ``level`` a cache level of ``LEVELS``."""
    if not isinstance(level, int) or isinstance(level, bool) or level not in LEVELS:
        raise st.error("prefetch", f"level must be a cache level {sorted(LEVELS)}, got {level!r}")
    if not isinstance(tensor, Tensor):
        raise st.error("prefetch", f"expected a tensor, got {tensor!r}")
    consumer = tensor.op is not st.op and not any(tensor.op is op for op in _read_ops(st))
    if consumer:
        _check_elementwise_consumer(st, tensor)
    if not isinstance(offset, int) or isinstance(offset, bool) or not (offset or consumer):
        raise st.error("prefetch", f"offset must be a nonzero int, got {offset!r}")


def _read_ops(st) -> list:
    """The operations the stage reads, through stages inlined into it."""
    out, todo = [], [t.op for t in st.op.input_tensors]
    while todo:
        op = todo.pop()
        if any(op is o for o in out):
            continue
        out.append(op)
        src = st.schedule.stage_map.get(op)
        if src is not None and src.inline:
            todo.extend(t.op for t in op.input_tensors)
    return out


def _at_root(st) -> bool:
    """The stage is computed at the root, into a buffer of its whole shape."""
    return st is not None and not st.inline and st.attach is None


def _check_elementwise_consumer(st, tensor) -> None:
    """A tensor the stage does not access must read the stage only at its own
    indices, have the stage's shape, and own a buffer (be computed at the root)."""
    op, what = tensor.op, f"this stage neither reads nor writes {tensor.name}"
    body = getattr(op, "body", None)
    reads = [
        r
        for r in (walk(body) if body is not None else ())
        if isinstance(r, TensorRead) and r.tensor.op is st.op
    ]
    if not reads:
        raise st.error("prefetch", f"{what}, nor is {tensor.name} computed from it")
    axes = [x.var for x in op.axis]
    same = [skey(e) for e in tensor.shape] == [skey(e) for e in st.op.output(0).shape]
    if not same or any(
        len(r.indices) != len(axes) or any(a is not b for a, b in zip(r.indices, axes))
        for r in reads
    ):
        raise st.error(
            "prefetch", f"{what}; {tensor.name} reads it other than elementwise at its own indices"
        )
    if not _at_root(st.schedule.stage_map.get(op)):
        raise st.error(
            "prefetch", f"{tensor.name} must be computed at the root to be prefetched here"
        )


def prefetch_stmts(low, n, p: int) -> list:
    """The Prefetch statements at the top of leaf loop ``p`` of the stage of nest ``n``
    (``low`` is the Lowering): for each ``stage.prefetch(tensor, leaf p, offset)``, per
    access to the tensor, its elements over the loops inside ``p`` at iteration
    ``p + offset``."""
    st = n.stage
    iv = st.leaf_iter_vars[p]
    inner = {x.var: n.leaf_ext[x] for x in st.leaf_iter_vars[p + 1 :]}
    out, seen = [], set()
    for tensor, at_iv, offset, level in st.prefetches:
        if at_iv is not iv:
            continue
        where = f"prefetch of {tensor.name} at loop {iv.name}"
        own = [x.var for x in st.op.axis]
        write = tensor.op is st.op or not any(
            isinstance(r, TensorRead) and r.tensor.op is tensor.op for r in walk(low.bodies[st])
        )
        if write:  # its own output, or an elementwise consumer's at the same indices
            dst = low.stage_of(tensor)
            if dst is not st and not _at_root(dst):
                raise ScheduleError(
                    f"{where}: {tensor.name} is no longer computed at the root "
                    "(compute_at or compute_inline after the prefetch)"
                )
            accesses = [(dst, own)]
        else:
            accesses = [
                (low.stage_of(r.tensor), r.indices)
                for r in walk(low.bodies[st])
                if isinstance(r, TensorRead) and r.tensor.op is tensor.op
            ]
        for src, indices in accesses:
            buf, idx = low.buffer_index(src, indices)
            idx = substitute(low.in_leaves(n, idx), {iv.var: iv.var + offset})
            first, span = _span(simplify(idx, low.ranges), inner, low.ranges, where)
            if (span + 1) * buf.elem_bytes > PREFETCH_BYTES:
                raise ScheduleError(
                    f"{where}: one iteration reads {span + 1} elements apart "
                    f"(more than {PREFETCH_BYTES} bytes); prefetch at an inner loop"
                )
            # lines from the first element's on: one more when it is not line-aligned
            lines = (span * buf.elem_bytes + CACHE_LINE - 1) // CACHE_LINE + 1
            key = (id(buf), skey(first), write)
            if key not in seen:
                seen.add(key)
                out.append(Prefetch(buf, first, lines, write, level))
    return out
