"""Index-set splitting: a loop cut where the floor divisions and moduli in its vector
loops change value, so that within each piece they are sums the vectorizer can read.

An index ``(p + k) // c`` or ``(p + k) % c`` by a constant ``c``, with ``p`` a
vectorized loop or a serial loop around one and the index's other terms multiples of
``c``, changes value only where ``p + k`` crosses a multiple of ``c``. Where ``p``'s
constant range holds few such points, the loop runs as one loop per piece between
them; in each, the simplifier, knowing the piece's range, removes the division
(``pypto.simplify``). The accesses of a layout of interleaved strips
(``pypto.transform_layout``) become whole vectors away from the strips' ends::

    for p in 0..250:                            for l in 1..8: (p = 0)
      vectorized for l in 0..8:                   B.layout[l] = f(A.layout[1992 + l - 1])
        B.layout[p*8 + l] =                ->   for p in 0..248:
          f(A.layout[(p + 249) % 250 * 8 + l        vectorized for l in 0..8:
                     + (p + 249) // 250 - 1])         B.layout[(p + 1)*8 + l] = f(A.layout[p*8 + l])
                                                for l in 0..7: (p = 249) ...

The iterations and their order are unchanged. A loop with more than ``MAX_PIECES``
pieces is left whole.
"""

from __future__ import annotations

from itertools import islice

from .expr import Binary, Const, substitute, walk
from .loop_ir import ExprMapper, For, StmtMutator, seq, walk_stmts
from .simplify import Lin
from .structural import skey

MAX_PIECES = 4
# the kinds of loops cut (the pieces of a parallel loop would each start its threads)
_CUT = ("serial", "vectorized")


def split_index_sets(s):
    """``s`` with its vectorized loops, and the serial loops around them, cut as the
    module docstring says."""
    return _Split()(s)


class _Split(StmtMutator):
    def mutate_for_(self, s: For):
        s = super().mutate_for_(s)
        if s is None or s.kind not in _CUT or not isinstance(s.extent, Const):
            return s
        cuts = sorted(_breakpoints(s))
        if not cuts or len(cuts) + 1 > MAX_PIECES:
            return s
        pieces, v = [], s.var
        for lo, hi in zip([0, *cuts], [*cuts, s.extent.value]):
            body = _subst(s.body, {v: Binary("add", v, Const(lo, v.dtype), v.dtype)})
            pieces.append(For(v, Const(hi - lo, s.extent.dtype), s.kind, body))
        return seq(*pieces)


def _subst(s, mapping):
    return ExprMapper(lambda e: substitute(e, mapping))(s)


def _breakpoints(loop: For) -> set:
    """The values of ``loop``'s variable in ``(0, extent)`` where a division inside its
    vectorized loops changes value (see the module docstring)."""
    key, n = skey(loop.var), loop.extent.value
    out: set = set()
    exprs = []
    for x in walk_stmts(loop):
        if isinstance(x, For) and x.kind == "vectorized":
            _collect(x, exprs)
    for e in exprs:
        for atom in walk(e):
            if not (isinstance(atom, Binary) and atom.op in ("floordiv", "mod")):
                continue
            if not (isinstance(atom.b, Const) and isinstance(atom.b.value, int)):
                continue
            c = atom.b.value
            lin = Lin.of(atom.a)
            terms = {k: t[1] for k, t in lin.terms.items()}
            a = terms.pop(key, 0)
            if c < 2 or a not in (1, -1) or any(x % c for x in terms.values()):
                continue
            first = (-lin.const if a == 1 else lin.const + 1) % c  # where p + k = 0 (mod c)
            out.update(islice(range(first or c, n, c), MAX_PIECES))
            if len(out) >= MAX_PIECES:  # too many pieces: the loop stays whole
                return out
    return out


def _collect(loop: For, exprs: list):
    """Every expression of ``loop`` (its extent and everything inside)."""
    exprs.append(loop.extent)
    ExprMapper(lambda e: exprs.append(e) or e)(loop.body)
