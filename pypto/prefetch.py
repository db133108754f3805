"""``Stage.prefetch``: its checks, and its lowering to cache-line hints at the top
of a loop body.

    for j:                          for j:
      for k in 0..64:        ->       prefetch A[f(j + 2, 0)] ... (lines up to f(j + 2, 63))
        B[j] += A[f(j, k)]            for k in 0..64: B[j] += A[f(j, k)]

The elements an iteration touches must be affine in the inner loops, whose
extents must be constant, and span at most ``PREFETCH_BYTES``. A stage's own
output, and an elementwise consumer's output at the stage's own indices, are
prefetched for writing, so the consumer's store misses overlap this stage's
arithmetic:

    for j:                          for j:
      T[j] = f(X[j])         ->       prefetch Y[j] for writing; T[j] = f(X[j])
    for j:                          for j:
      Y[j] = g(T[j])                  Y[j] = g(T[j])      (Y's lines now cached)

Level 2 (L2 only) is for data needed after other work, which in L1 would evict the
lines in use: a row pass that prefetches the next row while it computes on the
current one from L1 (the row-wise templates: 1.2-1.5x on a Zen 4, whose L1 holds two
rows).

With ``spread`` (``spread_stmts``), the lines that the stages computed at ``loop``
read in iteration ``loop + offset`` are requested a few at a time, each once, over the
iterations of the loops from inside ``loop`` down to ``spread``: a packed panel's
next source arrives while the current panel is multiplied, instead of at the
packing's own pace. A GEMM whose B panels are packed from the last-level cache:

    for jo:                               for jo:
      B.local = B[:, 64 jo ..]              B.local = B[:, 64 jo ..]
      for io in 0..32:              ->      for io in 0..32:
        for ko in 0..192:                     for ko in 0..192:
          C.local += A * B.local                prefetch line io * 192 + ko of B[:, 64 (jo + 1) ..]
                                                C.local += A * B.local

(128 x 3072 x 768, float32, one thread of a Zen 5: the packing took 7% of the time;
1.04-1.06x with the next panel spread over the current one.)
"""

from __future__ import annotations

from math import prod

from .dtypes import INDEX
from .errors import ScheduleError
from .expr import Binary, Const, Expr, Load, TensorRead, Var, binary, substitute, vars_of, walk
from .intervals import INF
from .loop_ir import For, IfThenElse, Let, Prefetch
from .simplify import Lin, simplify, upper_bound
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


def check_prefetch(st, tensor, offset, level=1, spread=False) -> None:
    """Validate ``st.prefetch(tensor, loop, offset, level)`` (``st`` a Stage): ``tensor``
    is read by the stage (through inlined stages too), is its own output, or is an
    elementwise consumer of it; ``offset`` is a nonzero int (0 allowed for a consumer);
    ``level`` a cache level of ``LEVELS``. With ``spread`` the readers are the stages
    computed at the loop, known once lowered (``spread_stmts``)."""
    if not isinstance(level, int) or isinstance(level, bool) or level not in LEVELS:
        raise st.error("prefetch", f"level must be a cache level {sorted(LEVELS)}, got {level!r}")
    if not isinstance(tensor, Tensor):
        raise st.error("prefetch", f"expected a tensor, got {tensor!r}")
    consumer = (
        not spread and tensor.op is not st.op and not any(tensor.op is op for op in _read_ops(st))
    )
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
    for pf in st.prefetches:
        if pf.spread is not None:
            out.extend(spread_stmts(low, n, pf) if pf.spread is iv else ())
            continue
        tensor, at_iv, offset, level = pf.tensor, pf.loop, pf.offset, pf.level
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


def spread_stmts(low, n, pf) -> list:
    """The statements of ``prefetch(..., spread=s)`` at the top of loop ``s`` of nest
    ``n`` (module docstring): line ``it * per + q`` (``q < per``) of the footprint, ``it``
    the iteration of the loops inside ``pf.loop`` down to ``s`` counted as one, ``per``
    the lines per iteration that cover the footprint once."""
    where = f"prefetch of {pf.tensor.name} at loop {pf.loop.name} over loop {pf.spread.name}"
    chain = [iv for iv, _ in n.context]
    q = next((k for k, iv in enumerate(chain) if iv is pf.loop), None)
    p = next(k for k, iv in enumerate(chain) if iv is pf.spread)
    if q is None or q >= p:
        raise ScheduleError(
            f"{where}: loop {pf.loop.name} is not one of the loops around {pf.spread.name} "
            "(split or fused after the prefetch?)"
        )
    it, count = Const(0, INDEX), 1
    for iv, ext in n.context[q + 1 : p + 1]:
        ext = _most(ext, low, iv, where)
        it, count = it * ext + iv.var, count * ext
    owner = next(a for a in low.sch.stages if any(x is pf.loop for x in a.leaf_iter_vars))
    out, seen = [], set()
    for a in low.sch.stages:
        if a.inline or a.attach is None or a.attach[0] is not owner or a.attach_loop is not pf.loop:
            continue
        na = low.nests[a]
        for r in walk(low.bodies[a]):
            if not (isinstance(r, TensorRead) and r.tensor.op is pf.tensor.op):
                continue
            buf, idx = low.buffer_index(low.stage_of(r.tensor), r.indices)
            idx = substitute(low.in_leaves(na, idx), {pf.loop.var: pf.loop.var + pf.offset})
            idx = simplify(idx, low.ranges)
            loops = [(x, na.box_ext[x]) for x in a.leaf_iter_vars]
            key = _footprint(idx, loops)
            if key not in seen:  # one per footprint, whichever stage reads it
                seen.add(key)
                out.append(_spread_lines(low, buf, idx, loops, (it, count), pf, where))
    if not out:
        raise ScheduleError(f"{where}: no stage computed at loop {pf.loop.name} reads it")
    return out


def _footprint(idx, loops) -> tuple:
    """What ``idx`` reads over ``loops`` ((leaf, extent)), whatever the loops are named:
    several stages computed at one loop read the same row (a norm's statistics)."""
    while len(_LOOPS) < len(loops):
        _LOOPS.append(Var(f"pf_k{len(_LOOPS)}", INDEX))
    canon = {iv.var: k for (iv, _), k in zip(loops, _LOOPS)}
    return skey(substitute(idx, canon)), tuple(skey(e) for _, e in loops)


_LOOPS: list = []  # the loops of a footprint, named by position (a key compares names by id)


def _spread_lines(low, buf, idx, loops, iteration, pf, where):
    """``for q < per: l = it * per + q; if l < lines: prefetch line l`` of the elements
    ``idx`` takes over ``loops`` ((leaf, extent), constant): rows over all loops but
    the innermost, each row the lines of its run over the innermost."""
    if any(isinstance(x, Load) for x in walk(idx)):
        raise ScheduleError(f"{where}: the index {idx} depends on data")
    exts = [(iv, _most(ext, low, iv, where)) for iv, ext in loops]
    (run, run_ext), rows = exts[-1], exts[:-1]
    terms = Lin.of(idx).terms.values()
    strides = [c for atom, c in terms if atom is run.var] or [0]  # 0: one element (N = 1)
    inside = [a for a, _ in terms if a is not run.var and any(x is run.var for x in vars_of(a))]
    if len(strides) != 1 or inside:
        raise ScheduleError(f"{where}: the index {idx} is not affine in {run.name}")
    span = abs(strides[0]) * (run_ext - 1) + 1
    if span * buf.elem_bytes > PREFETCH_BYTES:
        raise ScheduleError(f"{where}: a run of {span} elements spans more than {PREFETCH_BYTES} B")
    per_row = (span * buf.elem_bytes + CACHE_LINE - 1) // CACHE_LINE + 1  # + 1: unaligned runs
    total = per_row * prod(e for _, e in rows)
    it, count = iteration
    per = -(-total // count)
    q, line = Var("pf_q", INDEX), Var("pf_line", INDEX)
    at = {run.var: Const(run_ext - 1 if strides[0] < 0 else 0, INDEX)}  # the run's first
    r, stride = line // per_row, 1
    for iv, e in reversed(rows):
        at[iv.var], stride = (r // stride) % e, stride * e
    # the run's last line given by its last element: no line past the run when aligned
    step = (line % per_row) * (CACHE_LINE // buf.elem_bytes)
    first = simplify(substitute(idx, at) + binary("min", step, Const(span - 1, INDEX)), low.ranges)
    hint = IfThenElse(line < total, Prefetch(buf, first, 1, False, pf.level))
    return For(q, Const(per, INDEX), "serial", Let(line, simplify(it * per + q), hint))


def _most(ext, low, iv, where) -> int:
    """The largest extent of loop ``iv`` (a partial tile counts as whole: a hint may
    point past what is read)."""
    hi = _upper(ext, low.ranges)
    if hi == INF:
        raise ScheduleError(f"{where}: loop {iv.name} has no bounded extent")
    return int(hi)


def _upper(e: Expr, ranges) -> float:
    """An upper bound of ``e`` that also tries each argument of a ``min`` term with the
    other terms added (``min(16 jo + t, n) - 16 jo``: ``t``, which the bound of the
    whole misses as the two ``16 jo`` are not seen together)."""
    e = simplify(e, ranges)
    best = upper_bound(e, ranges)
    for atom, c in Lin.of(e).terms.values():
        if c == 1 and isinstance(atom, Binary) and atom.op == "min":
            rest = e - atom
            best = min(best, _upper(atom.a + rest, ranges), _upper(atom.b + rest, ranges))
    return best
