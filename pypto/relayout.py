"""The layout of ``cache_write`` after ``split``/``fuse``/``reorder`` (TVM's relayout).

A stage whose spatial loops were transformed before ``cache_write`` gets a cache
laid out as those loops run: one dimension per spatial leaf loop, in loop order.
The cache computes the body at each leaf point; the original tensor copies it back
to its own layout:

    s[C].split(i, 4); s[C].reorder(j, i.outer, i.inner); CL = s.cache_write(C, "local")

    for j: for io: for ii:                    C.local[j, io, ii] = f(io*4 + ii, j)
      C[io*4 + ii, j] = f(io*4 + ii, j)  ->   C[i, j] = C.local[j, i // 4, i % 4]

A split that does not divide its loop pads the cache (``ceil(n / f) x f`` points) and
guards its body: the points beyond the tensor compute nothing (``select``; a
reduction's source is the identity there), so they read nothing, and no copy reads
them:

    s[C].split(i, 4) with i < 10             C.local[io, ii, j] = select(io*4 + ii < 10,
                                               f(io*4 + ii, j), 0)      io < 3, ii < 4

Skews and transformed reduce loops are refused (``ScheduleError``). Values (leaves
to roots) and extents come from the relations themselves; the copy's read needs
the other direction, roots to leaves, stated here per relation kind.
"""

from __future__ import annotations

from .dtypes import INDEX
from .errors import ScheduleError
from .expr import Binary, Const, vars_of
from .intervals import INF, Ranges
from .relations import Fuse, Split
from .simplify import simplify
from .tensor import make_iter_var

# relation kind -> the created loops' coordinates from the parents' (roots to leaves)
_FORWARD = {
    Split: lambda r, c, ext: {
        r.outer: Binary("floordiv", c[r.parent], ext[r.inner], INDEX),
        r.inner: Binary("mod", c[r.parent], ext[r.inner], INDEX),
    },
    Fuse: lambda r, c, ext: {
        r.fused: Binary("add", Binary("mul", c[r.outer], ext[r.inner], INDEX), c[r.inner], INDEX)
    },
}


def relayout(st, op):
    """``(cache axes, root var -> its value over them, the cache coordinates of a root
    point, the conditions that a cache point lies inside the tensor)`` for the cache of
    stage ``st`` (computing ``op``)."""
    err = lambda msg: ScheduleError(f"cache_write on stage '{st.name}': {msg}")  # noqa: E731
    for r in st.relations:
        if type(r) not in _FORWARD:
            raise err(f"a {type(r).__name__.lower()} of its loops cannot be laid out")
        if any(p.kind == "reduce" for p in r.parents):
            raise err("call it before transforming the reduce loops")
    leaves = [iv for iv in st.leaf_iter_vars if iv.kind == "spatial"]
    reduce_leaves = [iv for iv in st.leaf_iter_vars if iv.kind == "reduce"]
    if st.leaf_iter_vars != leaves + reduce_leaves:
        raise err("call it before moving reduce loops among the spatial ones")
    ext = {iv: iv.extent for iv in op.axis}
    sizes = Ranges({v: (0, INF) for iv in op.axis for v in vars_of(iv.extent)})  # >= 0
    for r in st.relations:
        ext.update({k: simplify(v, sizes) for k, v in r.extents(ext).items()})
    axis = tuple(make_iter_var(f"{iv.name}.c", Const(0, INDEX), ext[iv], "spatial")
                 for iv in leaves)  # fmt: skip
    val = {iv: new.var for iv, new in zip(leaves, axis)}
    inside = []
    for r in reversed(st.relations):
        parents, conds = r.values(val, ext, simplify)
        inside += [c for c, _ in conds]  # spatial: transformed reduce loops are refused
        val.update(parents)
    coords = {iv: iv.var for iv in op.axis}
    for r in st.relations:
        coords.update({k: simplify(v) for k, v in _FORWARD[type(r)](r, coords, ext).items()})
    mapping = {iv.var: val[iv] for iv in op.axis}
    return axis, mapping, tuple(coords[iv] for iv in leaves), tuple(inside)
