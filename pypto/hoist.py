"""``hoist_checks``: a run-time checked index that a loop does not change is computed
once, before the loop, instead of in each of its iterations.

    for (c, 0, 1024) vectorized              let checked = checked_index(tok[s], 512)
      Xg[s*1024 + c] =                  ->   for (c, 0, 1024) vectorized
        X[checked_index(tok[s], 512)*1024 + c]   Xg[s*1024 + c] = X[checked*1024 + c]

A check in the loop body is a branch (it records a failure) that keeps the compiler
from vectorizing the loop; before it, the loop is a plain copy. Hoisted only where
this changes nothing else: the loop runs at least once (a constant extent), its body
is stores only, the check runs in each iteration (not under a select or the right
side of ``&&``/``||``: a guard there may keep it from failing), and the index reads
no buffer the loop writes.
"""

from __future__ import annotations

from .dtypes import INDEX
from .expr import Binary, Call, Const, Load, Select, Var, children, map_children, walk
from .loop_ir import For, Let, Seq, StmtMutator, Store
from .structural import skey


def _always_evaluated(e):
    """The sub-expressions of ``e`` C evaluates whenever it evaluates ``e``: not the
    branches of a select (``c ? a : b``), nor the right side of ``&&`` and ``||``."""
    yield e
    if isinstance(e, Select):
        yield from _always_evaluated(e.cond)
    elif isinstance(e, Binary) and e.op in ("and", "or"):
        yield from _always_evaluated(e.a)
    else:
        for c in children(e):
            yield from _always_evaluated(c)


def _invariant_checks(loop: For, stores: list) -> dict:
    """structural key -> a ``checked_index`` call of ``stores`` that ``loop`` leaves
    unchanged (no loop variable, no load of a buffer the stores write) and that runs
    in every iteration (not under a select, where a guard may keep it from failing)."""
    written = {id(s.buffer) for s in stores}
    found: dict = {}
    for st in stores:
        for e in (st.index, st.value):
            for x in _always_evaluated(e):
                if not (isinstance(x, Call) and x.name == "checked_index"):
                    continue
                inner = list(walk(x))
                if any(y is loop.var for y in inner):
                    continue
                if any(isinstance(y, Load) and id(y.buffer) in written for y in inner):
                    continue
                found.setdefault(skey(x), x)
    return found


class _Hoist(StmtMutator):
    def mutate_for_(self, s: For):
        s = super().mutate_for_(s)  # the inner loops first
        if not isinstance(s, For) or not (isinstance(s.extent, Const) and s.extent.value > 0):
            return s
        stores = list(s.body.stmts) if isinstance(s.body, Seq) else [s.body]
        if not all(isinstance(x, Store) for x in stores):
            return s
        found = _invariant_checks(s, stores)
        if not found:
            return s
        names = {k: Var("checked", INDEX) for k in found}  # (made unique where printed)

        def swap(e):
            if isinstance(e, Call) and e.name == "checked_index":
                v = names.get(skey(e))
                if v is not None:
                    return v
            return map_children(e, swap)

        body = [Store(x.buffer, swap(x.index), swap(x.value)) for x in stores]
        out = For(s.var, s.extent, s.kind, body[0] if len(body) == 1 else Seq(tuple(body)))
        for k, call in reversed(found.items()):
            out = Let(names[k], call, out)
        return out


def hoist_checks(s):
    """``s`` with its loop-invariant checked indices computed before their loops."""
    return _Hoist()(s)
