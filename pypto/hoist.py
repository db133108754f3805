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

from collections import Counter

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


# ---------------------------------------------------------------- a loop's common row


_PURE = frozenset({"add", "sub", "mul", "min", "max"})


def _pure(e) -> bool:
    """Integer arithmetic of variables and constants only: no call (a check records a
    failure), no load (which a loop's stores may change)."""
    if isinstance(e, (Var, Const)):
        return True
    return isinstance(e, Binary) and e.op in _PURE and _pure(e.a) and _pure(e.b)


def _terms(e, sign: int = 1):
    """``(sign, term)`` of the sum ``e``."""
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        yield from _terms(e.a, sign)
        yield from _terms(e.b, -sign if e.op == "sub" else sign)
    else:
        yield sign, e


def _sum(terms, dtype: str):
    """The sum of ``(sign, term)``, its first term added."""
    (_, out), *rest = terms
    for sign, t in rest:
        out = Binary("add" if sign > 0 else "sub", out, t, dtype)
    return out


def _split(index, var) -> tuple[list, list]:
    """The terms of ``index`` that do not change in ``var``'s loop (no constant: the
    row's start, not one element's), and the others."""
    row, rest = [], []
    for sign, t in _terms(index):
        fixed = not isinstance(t, Const) and _pure(t) and not any(x is var for x in walk(t))
        (row if fixed else rest).append((sign, t))
    return row, rest


def _indices(stores: list):
    for st in stores:
        yield st.index
        for x in walk(st.value):
            if isinstance(x, Load):
                yield x.index


def _common_row(loop: For, stores: list):
    """The terms every index of ``stores`` shares and ``loop`` leaves unchanged, when
    at least two indices share them and they are long enough to name (three terms, or
    a min or max), else None."""
    rows = {}
    for index in _indices(stores):
        row, _ = _split(index, loop.var)
        if row:
            key = frozenset(Counter((sign, skey(t)) for sign, t in row).items())
            rows.setdefault(key, []).append(row)
    if len(rows) != 1:
        return None
    ((row, *others),) = rows.values()
    big = len(row) >= 3 or any(
        isinstance(x, Binary) and x.op in ("min", "max") for _, t in row for x in walk(t)
    )
    if not others or not big or row[0][0] < 0:
        return None
    return row


class _NameRows(StmtMutator):
    def mutate_for_(self, s: For):
        s = super().mutate_for_(s)  # the inner loops first
        if not isinstance(s, For):
            return s
        stores = list(s.body.stmts) if isinstance(s.body, Seq) else [s.body]
        if not all(isinstance(x, Store) for x in stores):
            return s
        row = _common_row(s, stores)
        if row is None:
            return s
        name = Var("row", INDEX)

        def rebase(index):
            terms, rest = _split(index, s.var)
            if not terms:
                return index
            return _sum([(1, name), *rest], index.dtype)

        def swap(e):
            if isinstance(e, Load):
                return Load(e.buffer, rebase(swap(e.index)), e.dtype)
            return map_children(e, swap)

        body = [Store(x.buffer, rebase(x.index), swap(x.value)) for x in stores]
        out = For(s.var, s.extent, s.kind, body[0] if len(body) == 1 else Seq(tuple(body)))
        return Let(name, _sum(row, INDEX), out)


def name_rows(s):
    """``s`` with the start of the row its innermost loops' indices share named once
    before each loop:

        for (j, 0, 8) vectorized                     let row = io*44 + ii*11 + max(0, t*2 - jo*8)
          B[io*44 + ii*11 + j + max(0, t*2 - jo*8) + 12] =   ->   for (j, 0, 8) vectorized
            A[io*44 + ii*11 + j + max(0, t*2 - jo*8) + 11]         B[row + j + 12] = A[row + j + 11]
    """
    return _NameRows()(s)
