"""The loop nest of a multi-output compute: one nest, one store per output.

    X, Y = pt.compute((n,), lambda i: (A[i] * 2, A[i] + 1))
        for i: X[i] = A[i] * 2; Y[i] = A[i] + 1

A tuple reduction (an argmax) combines all of its accumulators at once, from their
values before the step, through one temporary per output:

    idx, val = pt.compute((n,), lambda i: argmax((k, A[i, k]), axis=k))
        for i:
          idx[i] = -1; val[i] = -inf                      (the reducer's identity tuple)
          for k:
            t0 = select(val[i] >= A[i, k], idx[i], k)     (fcombine's values)
            t1 = select(val[i] >= A[i, k], val[i], A[i, k])
            idx[i] = t0; val[i] = t1

The schedule is the stage's (``s[X]`` and ``s[Y]`` are the same stage); this module
only builds its statements, for ``pypto.lowering``.
"""

from __future__ import annotations

from .accumulate import needs_accumulator
from .dtypes import INDEX
from .errors import ScheduleError
from .expr import Cast, Const, Load, Reduce, substitute
from .loop_ir import Allocate, Buffer, Store, seq
from .simplify import simplify


def _starts(low, n, bodies: tuple) -> tuple:
    """The values the accumulators start from: ``init=`` or the identity tuple."""
    if all(b.init for b in bodies):
        values = [substitute(b.init[0], {iv.var: v for iv, v in n.init_value.items()})
                  for b in bodies]  # fmt: skip
        return tuple(low.lower_expr(n, v, placed=True) for v in values)
    ident = bodies[0].combiner.identity_tuple(tuple(b.dtype for b in bodies))
    return tuple(e if e.dtype == b.dtype else Cast(e, b.dtype) for e, b in zip(ident, bodies))


def multi_output_stmt(low, n):
    """The statements of multi-output stage ``n`` (see the module docstring)."""
    st = n.stage
    bodies = (low.bodies[st], *low.more_bodies[st])
    if st.tensorized is not None:
        raise ScheduleError(f"tensorize on stage '{st.name}': a multi-output stage")
    axes = [iv.var for iv in st.op.axis]
    places = [low.buffer_index(st, axes, j) for j in range(len(bodies))]
    idx = [(b, simplify(low.in_leaves(n, i), low.ranges)) for b, i in places]
    leaves = st.leaf_iter_vars
    every = range(len(leaves))
    if not isinstance(bodies[0], Reduce):
        stores = seq(*[Store(b, i, low.lower_expr(n, e)) for (b, i), e in zip(idx, bodies)])
        return low.loop_nest(n, every, stores, with_reduce=True, attached=True)
    if any(needs_accumulator(b) for b in bodies):
        raise ScheduleError(
            f"stage '{st.name}': a tuple reduction into float16/bfloat16 is not supported; "
            "reduce into float32 and cast"
        )
    init_map = {iv.var: v for iv, v in n.init_value.items()}
    init_idx = [(b, simplify(substitute(i, init_map), low.ranges)) for b, i in places]
    p = next(q for q, iv in enumerate(leaves) if iv.kind == "reduce")
    init = seq(*[Store(b, i, v) for (b, i), v in zip(init_idx, _starts(low, n, bodies))])
    olds = tuple(Load(b, i, e.dtype) for (b, i), e in zip(idx, bodies))
    srcs = tuple(low.lower_expr(n, e.source) for e in bodies)
    new = bodies[0].combiner.combine_tuple(olds, srcs)
    temps = [Buffer(f"{st.name}.t{j}", e.dtype, (Const(1, INDEX),), "local")
             for j, e in enumerate(bodies)]  # fmt: skip
    zero = Const(0, INDEX)
    update = seq(
        *[Store(t, zero, v) for t, v in zip(temps, new)],
        *[Store(b, i, Load(t, zero, t.dtype)) for (b, i), t in zip(idx, temps)],
    )
    for t in reversed(temps):
        update = Allocate(t, Const(1, INDEX), update)
    later = [q for q in range(p, len(leaves)) if leaves[q].kind == "spatial"]
    init_nest = low.loop_nest(n, later, init, with_reduce=False, attached=False)
    upd_nest = low.loop_nest(n, range(p, len(leaves)), update, with_reduce=True, attached=True)
    return low.loop_nest(n, range(p), seq(init_nest, upd_nest), True, True)
