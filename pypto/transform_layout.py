"""``transform_layout``: where a stage's elements are stored (TVM's ``transform_layout``).

The element ``T[i]`` is stored at ``T.layout[f(i)]`` of a buffer shaped to hold every
``f(i)``; ``f`` is quasi-affine (``+ - *`` by constants, ``//`` and ``%`` by
constants), one to one over the tensor. Only storage changes: every read and write of
``T`` goes through ``f``; the loops stay as scheduled, and the dependences, which are
between elements, not places, stay the same. A stage that is an argument keeps its
argument's layout: it is computed in a buffer of the new layout, and copied into the
argument at the end of the kernel. Stored as a data layout transformation for SIMD
(strips of a vector's lanes interleaved, ``i -> (i % L, i // L)``), the neighbours of
element ``i`` lie in the same lane of the vectors before and after::

    s[B].transform_layout(lambda i: [i % 250, i // 250])      (B: 2000 elements)

    for p in 0..250:                          for p in 0..250:
      for l in 0..8:  (vectorized)     ->       for l in 0..8:
        B[l*250 + p] = f(A[l*250 + p - 1])        B.layout[p*8 + l] = f(A.layout[(p - 1)*8 + l])

The ``%`` and ``//`` of the indices vanish where the loops' ranges decide them
(``pypto.index_sets`` splits the loop ``p`` at 1 and 249 so that they do).

Symbolic sizes are isl parameters: the map may use them, is checked for every value,
and the buffer is sized when the kernel runs (``B`` of ``n`` elements, ``[i % 8, i //
8]``: ``B.layout[min(8, n), ceil(n / 8)]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from .domain import IslSpace, pw_aff_expr
from .dtypes import INDEX
from .errors import ScheduleError
from .expr import Binary, Const, Expr, Var, as_expr, substitute, vars_of
from .isl_expr import NonAffine
from .simplify import simplify


@dataclass(frozen=True, slots=True, eq=False)
class StorageLayout:
    """A stage's storage: element ``dims`` is stored at ``exprs`` of a buffer of
    ``shape``; ``text`` is the map in isl's syntax (what a stored schedule holds)."""

    text: str
    dims: tuple
    exprs: tuple
    shape: tuple

    def index(self, indices) -> list[Expr]:
        """Where the element at ``indices`` is stored."""
        return [substitute(e, dict(zip(self.dims, indices))) for e in self.exprs]


def layout_text(stage, mapping) -> str:
    """The isl map of ``mapping`` (a function of the tensor's indices returning a list
    of index expressions) over ``stage``'s tensor."""
    if not callable(mapping):
        raise ScheduleError(
            f"transform_layout on stage '{stage.name}': expected a function of the "
            f"indices (lambda i, j: [j, i]), got {mapping!r}"
        )
    shape = stage.op.output(0).shape
    dims = [Var(f"i{k}", "int64") for k in range(len(shape))]
    out = mapping(*dims)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    if not out:
        raise ScheduleError(f"transform_layout on stage '{stage.name}': no index returned")
    sp = _space(dims, shape)
    out = [as_expr(e) for e in out]
    other = sorted({v.name for e in out for v in vars_of(e) if v not in sp.names})
    if other:
        raise ScheduleError(
            f"transform_layout on stage '{stage.name}': the layout uses {', '.join(other)}, "
            "neither an index nor a size of the tensor"
        )
    pr = sp.printer([])
    try:
        outs = [pr(e) for e in out]
    except NonAffine as e:
        raise ScheduleError(
            f"transform_layout on stage '{stage.name}': index {e} is not quasi-affine in "
            "the tensor's indices and sizes (use + - * by constants, // and % by constants)"
        ) from None
    return _map_text(sp, outs)


def _space(dims: list, shape) -> IslSpace:
    """The isl names of the tensor's indices, its sizes their parameters (in the order
    of the shape: the names a stored layout uses)."""
    sp = IslSpace(dims)
    sp.printer(list(shape))
    return sp


def _map_text(sp: IslSpace, outs: list) -> str:
    params = f"[{', '.join(sp.params.values())}] -> " if sp.params else ""
    return f"{params}{{ [{', '.join(sp.dims)}] -> [{', '.join(outs)}] }}"


def storage_layout(stage, text: str) -> StorageLayout:
    """The checked layout of ``text`` (``layout_text``) for ``stage``'s tensor: one to
    one over the tensor, into places from 0 on (``ScheduleError`` naming a witness)."""
    where = f"transform_layout on stage '{stage.name}'"
    shape = stage.op.output(0).shape
    dims = [Var(f"i{k}", "int64") for k in range(len(shape))]
    sp = _space(dims, shape)
    pr = sp.printer([])
    try:
        m = isl.Map(text)
        box = sp.set([f"0 <= {x} < {pr(d)}" for x, d in zip(sp.dims, shape)])
    except isl.Error:
        raise ScheduleError(f"{where}: not a map in isl's syntax: {text!r}") from None
    except NonAffine as e:
        raise ScheduleError(
            f"{where}: the tensor's shape {list(shape)} is not affine ({e})"
        ) from None
    known = set(sp.params.values())
    if m.dim(isl.dim_type.in_) != len(shape) or not set(_names(m, isl.dim_type.param)) <= known:
        raise ScheduleError(
            f"{where}: {text} is not a map of the tensor's {len(shape)} indices and its sizes"
        )
    for k, name in enumerate(sp.dims):
        m = m.set_dim_name(isl.dim_type.in_, k, name)
    m = m.reset_tuple_id(isl.dim_type.in_).reset_tuple_id(isl.dim_type.out)
    m = m.intersect_domain(box)
    if not m.is_single_valued():
        raise ScheduleError(f"{where}: {text} gives an element more than one place")
    same = m.apply_range(m.reverse())
    clash = same.subtract(isl.Map.identity(same.get_space()))
    if not clash.is_empty():
        p = clash.wrap().sample_point()
        a, b = _pair(p, len(shape))
        raise ScheduleError(
            f"{where}: elements {a} and {b}{_at(p)} are stored in the same place; "
            "the layout must be one to one"
        )
    rng, sizes = m.range(), []
    for k in range(rng.dim(isl.dim_type.set)):
        below = rng.lower_bound_val(isl.dim_type.set, k, isl.Val(0)).complement().intersect(rng)
        if not below.is_empty():
            p = below.sample_point()
            lo = p.get_coordinate_val(isl.dim_type.set, k).to_python()
            raise ScheduleError(
                f"{where}: index {k} of the layout reaches {lo}{_at(p)}; places start at 0"
            )
        sizes.append(_extent(rng.dim_max(k), sp))
    pma = isl.PwMultiAff.from_map(m)
    exprs = [pw_aff_expr(pma.get_pw_aff(k), sp, m.domain()) for k in range(m.dim(isl.dim_type.out))]
    return StorageLayout(text, tuple(dims), tuple(exprs), tuple(sizes))


def _names(obj, kind) -> list:
    return [obj.get_dim_name(kind, k) for k in range(obj.dim(kind))]


def _at(p: isl.Point) -> str:
    """``" (with n = 3)"``: the sizes of a witness point, or ""."""
    sp = p.get_space()
    sizes = [
        f"{sp.get_dim_name(isl.dim_type.param, k).removeprefix('p_')} = "
        f"{p.get_coordinate_val(isl.dim_type.param, k).to_python()}"
        for k in range(sp.dim(isl.dim_type.param))
    ]
    return f" (with {', '.join(sizes)})" if sizes else ""


def _extent(hi: isl.PwAff, sp: IslSpace) -> Expr:
    """The size of a buffer axis whose places reach ``hi``: ``hi + 1``, at least 1 (a
    tensor with no elements stores none)."""
    if hi.is_cst() and not hi.domain().is_empty():
        return Const(hi.max_val().to_python() + 1, INDEX)
    one = Const(1, INDEX)
    return simplify(Binary("max", Binary("add", pw_aff_expr(hi, sp), one, INDEX), one, INDEX))


def _pair(p: isl.Point, n: int) -> tuple:
    vals = [p.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(2 * n)]
    return vals[:n], vals[n:]


def set_layout(stage, step) -> None:
    """The rule of ``TransformLayout``: ``stage`` stored as ``step.layout`` says."""
    where = f"transform_layout on stage '{stage.name}'"
    if stage.is_placeholder:
        raise ScheduleError(f"{where}: a placeholder is stored as the caller passes it")
    if stage.is_update:
        raise ScheduleError(f"{where}: an update definition writes its tensor's storage; "
                            f"transform the layout of s[{stage.target_stage.name}]")  # fmt: skip
    if getattr(stage.op, "num_outputs", 1) > 1:
        raise ScheduleError(f"{where}: a stage of several outputs is stored as it is")
    stage.layout = storage_layout(stage, step.layout)
