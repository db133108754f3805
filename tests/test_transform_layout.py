"""``transform_layout`` (``pypto/transform_layout.py``) and the index-set splitting that
makes its strips' loops plain vector code (``pypto/index_sets.py``)."""

import numpy as np
import pytest

import pypto as pt
from pypto import emulate
from pypto.errors import ScheduleError
from pypto.expr import Binary, walk
from pypto.loop_ir import ExprMapper, For, walk_stmts


def _jacobi_1d(tsteps: int, n: int, lanes: int, vectorize: str = "lanes"):
    """jacobi-1d (PolyBench) with A and B stored as ``lanes`` interleaved strips and each
    sweep run a point of every strip per iteration; ``vectorize``: the loop over the
    strips' lanes, or the one over their points (the lanes loop inside it)."""
    A0 = pt.placeholder((n,), "float64", name="A0")
    B0 = pt.placeholder((n,), "float64", name="B0")
    A = pt.compute((n,), lambda i: A0[i], name="A")
    B = pt.compute((n,), lambda i: B0[i], name="B")
    t, i = pt.rdom([(0, tsteps), (1, n - 1)], names="t i")
    B[i] = 0.33333 * (A[i - 1] + A[i] + A[i + 1])
    t2, i2 = pt.rdom([(0, tsteps), (1, n - 1)], names="t2 i2")
    A[i2] = 0.33333 * (B[i2 - 1] + B[i2] + B[i2 + 1])
    s = pt.create_schedule([A.op, B.op])
    s[A].update(0).compute_with(s[B].update(0), t)
    strip = -(-n // lanes)
    for T in (A, B):
        s[T].transform_layout(lambda i: [i % strip, i // strip])
    for u in (s[B].update(0), s[A].update(0)):
        x = u.shift(u.op.axis[1], 1)
        lane, p = u.split(x, factor=strip)
        u.reorder(p, lane)
        u.vectorize(lane if vectorize == "lanes" else p)
    return s, [A0, B0, A, B]


def _jacobi_ref(a, b, tsteps):
    a, b = a.copy(), b.copy()
    for _ in range(tsteps):
        b[1:-1] = 0.33333 * (a[:-2] + a[1:-1] + a[2:])
        a[1:-1] = 0.33333 * (b[:-2] + b[1:-1] + b[2:])
    return a, b


@pytest.mark.parametrize("vectorize", ["lanes", "points"])
@pytest.mark.parametrize("target", ["host", "generic"])
@pytest.mark.parametrize("n, lanes", [(40, 8), (37, 8), (64, 4), (2000, 8), (11, 2)])
def test_strips_compute_jacobi_exactly(target, n, lanes, vectorize):
    """Same operations in the same order as the C nest: bit for bit, whether or not the
    strips divide the array (the padded places are never read)."""
    s, args = _jacobi_1d(5, n, lanes, vectorize)
    f = pt.build(s, args, target=target)
    rng = np.random.default_rng(n)
    a, b = rng.random(n), rng.random(n)
    out_a, out_b = np.full(n, np.nan), np.full(n, np.nan)
    f(a, b, out_a, out_b)
    ref_a, ref_b = _jacobi_ref(a, b, 5)
    np.testing.assert_array_equal(out_a, ref_a)
    np.testing.assert_array_equal(out_b, ref_b)


@pytest.mark.parametrize("target", sorted(pt.target.KNOWN))
def test_strips_of_each_targets_lanes_run_on_it(target):
    """Strips as many as the target's float64 lanes, built for every named target and
    run natively or under qemu (aarch64): bit for bit the C nest's results."""
    t = pt.Target(target)
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    n = 203  # not a multiple of any lane count: padded strips
    s, args = _jacobi_1d(4, n, max(t.vector_lanes(8), 2), "points")
    a, b = np.linspace(0, 1, n), np.linspace(2, 1, n)
    out_a, out_b = np.full(n, np.nan), np.full(n, np.nan)
    pt.build(s, args, target=t)(a, b, out_a, out_b)
    ref_a, ref_b = _jacobi_ref(a, b, 4)
    np.testing.assert_array_equal(out_a, ref_a)
    np.testing.assert_array_equal(out_b, ref_b)


def _vector_divisions(func) -> list:
    out = []
    for x in walk_stmts(func.body):
        if isinstance(x, For) and x.kind == "vectorized":
            ExprMapper(lambda e: out.extend(
                a for a in walk(e) if isinstance(a, Binary) and a.op in ("floordiv", "mod")
            ) or e)(x)  # fmt: skip
    return out


@pytest.mark.parametrize("vectorize", ["lanes", "points"])
def test_the_strips_loops_are_cut_where_their_divisions_change(vectorize):
    """The loop over a strip's points runs its first and last point alone; in between,
    and at both ends, the vector loops index whole vectors without // or %."""
    s, args = _jacobi_1d(3, 2000, 8, vectorize)
    func = pt.lower(s, args)
    assert _vector_divisions(func) == []
    extents = [x.extent.value for x in walk_stmts(func.body) if isinstance(x, For)]
    assert extents.count(248) == 2  # the strips' inner points, one loop per sweep
    src = pt.build(s, args, emit_only=True)
    assert "A_layout[i_shift_inner * 8 + i_shift_outer + 8]" in src  # p*8 + l, whole vectors


def test_without_cuts_the_divisions_stay():
    """A loop of more than ``MAX_PIECES`` pieces (strips of 3 over 60 rows: a cut every
    third row) is left whole, its divisions kept, and the result the same."""
    m, n = 60, 8
    X = pt.placeholder((m, n), "float64", name="X")
    Y = pt.compute((m, n), lambda i, j: X[i, j] * 2.0, name="Y")
    Z = pt.compute((m, n), lambda i, j: Y[i, j] + 1.0, name="Z")
    s = pt.create_schedule(Z.op)
    s[Y].transform_layout(lambda i, j: [i % 3, i // 3, j])
    s[Z].vectorize(Z.op.axis[1])
    func = pt.lower(s, [X, Z])
    assert _vector_divisions(func)
    x = np.random.default_rng(2).random((m, n))
    z = np.empty((m, n))
    pt.build(s, [X, Z])(x, z)
    np.testing.assert_array_equal(z, x * 2.0 + 1.0)


@pytest.mark.parametrize("target", ["host", "generic"])
def test_a_2d_intermediate_and_an_output_in_new_layouts(target):
    """A tiled layout of an intermediate read at a neighbour, and a transposed output
    (copied into the caller's array at the end)."""
    m, n = 6, 20
    X = pt.placeholder((m, n), "float32", name="X")
    Y = pt.compute((m, n), lambda i, j: X[i, j] * 3.0, name="Y")
    Z = pt.compute((m, n - 1), lambda i, j: Y[i, j] + Y[i, j + 1], name="Z")
    s = pt.create_schedule(Z.op)
    s[Y].transform_layout(lambda i, j: [j // 8, i, j % 8])
    s[Z].transform_layout(lambda i, j: [j, i])
    f = pt.build(s, [X, Z], target=target)
    x = np.random.default_rng(1).random((m, n), dtype=np.float32)
    z = np.full((m, n - 1), np.nan, np.float32)
    f(x, z)
    y = x * np.float32(3.0)
    np.testing.assert_array_equal(z, y[:, :-1] + y[:, 1:])


def test_the_layout_is_stored_and_replayed():
    s, args = _jacobi_1d(4, 40, 8)
    doc = s.to_json()
    steps = [x for x in doc["steps"] if x["prim"] == "transform_layout"]
    assert [x["stage"] for x in steps] == ["A", "B"]
    assert "mod 5" in steps[0]["layout"]
    s2 = pt.Schedule.from_json(doc, args)
    f = pt.build(s2, args)
    a, b = np.linspace(0, 1, 40), np.linspace(1, 2, 40)
    out_a, out_b = np.empty(40), np.empty(40)
    f(a, b, out_a, out_b)
    ref_a, ref_b = _jacobi_ref(a, b, 4)
    np.testing.assert_array_equal(out_a, ref_a)
    np.testing.assert_array_equal(out_b, ref_b)


def _symbolic(mapping):
    n = pt.var("n")
    X = pt.placeholder((n,), "float64", name="X")
    Y = pt.compute((n,), lambda i: X[i] + 1.0, name="Y")
    Z = pt.compute((n,), lambda i: Y[i] * 2.0 + Y[n - 1 - i], name="Z")
    s = pt.create_schedule(Z.op)
    s[Y].transform_layout(lambda i: [i % 8, i // 8])
    s[Z].transform_layout(mapping(n))
    return s, [X, Z]


def test_symbolic_sizes_size_the_buffers_at_run_time():
    """Layouts of tensors of ``n`` elements, quasi-affine in the indices and ``n``: the
    buffers take the places the layout reaches for the ``n`` of the call, and the
    stored map names ``n`` as a parameter (replayed as the same size)."""
    s, args = _symbolic(lambda n: lambda i: [n - 1 - i])
    steps = [x["layout"] for x in s.to_json()["steps"]]
    assert steps[1] == "[p_n] -> { [d_i0] -> [((p_n - 1) - d_i0)] }"
    text = str(pt.lower(s, args, simple_mode=True))
    assert "alloc Y: float64[max(min(8, n), 1) * max((n + 7) // 8, 1)]" in text
    for f in (pt.build(s, args), pt.build(pt.Schedule.from_json(s.to_json(), args), args)):
        for n in (0, 1, 7, 8, 9, 37):
            x = np.random.default_rng(n).random(n)
            z = np.full(n, np.nan)
            f(x, z)
            y = x + 1.0
            np.testing.assert_array_equal(z, y * 2.0 + y[::-1])


@pytest.mark.parametrize(
    "mapping, message",
    [
        (lambda n: lambda i: [i % n], r"index i0 % n is not quasi-affine"),
        (lambda n: lambda i: [pt.var("m") - i], "the layout uses m, neither an index nor a size"),
        (lambda n: lambda i: [n - 2 - i], r"reaches -1 \(with n = 1\); places start at 0"),
        (lambda n: lambda i: [i % 8], r"elements \[8\] and \[0\] \(with n = 9\) are stored"),
    ],
)
def test_symbolic_layouts_are_refused_with_a_witness_size(mapping, message):
    with pytest.raises(ScheduleError, match=message):
        _symbolic(mapping)


def _stages():
    X = pt.placeholder((16,), "float64", name="X")
    Y = pt.compute((16,), lambda i: X[i] + 1.0, name="Y")
    Z = pt.compute((16,), lambda i: Y[i] * 2.0, name="Z")
    return X, Y, Z, pt.create_schedule(Z.op)


@pytest.mark.parametrize(
    "mapping, message",
    [
        (lambda i: [i % 8], r"elements \[8\] and \[0\] are stored in the same place"),
        (lambda i: [i - 1], "index 0 of the layout reaches -1; places start at 0"),
        (lambda i: [i * i], "is not quasi-affine"),
        ("i % 4", "expected a function of the indices"),
        (lambda i: [], "no index returned"),
    ],
)
def test_layouts_that_are_not_one_to_one_or_affine_are_refused(mapping, message):
    X, Y, Z, s = _stages()
    with pytest.raises(ScheduleError, match=message):
        s[Y].transform_layout(mapping)
    assert s.to_json()["steps"] == []  # refused: the schedule as it was


def test_placeholders_updates_and_attached_regions_are_refused():
    X, Y, Z, s = _stages()
    with pytest.raises(ScheduleError, match="a placeholder is stored as the caller passes it"):
        s[X].transform_layout(lambda i: [15 - i])
    s[Y].compute_at(s[Z], s[Z].split(Z.op.axis[0], factor=4)[0])
    s[Y].transform_layout(lambda i: [15 - i])
    with pytest.raises(ScheduleError, match="holds only the region used there"):
        pt.lower(s, [X, Z])
    s2, args = _jacobi_1d(2, 16, 4)
    with pytest.raises(ScheduleError, match=r"transform the layout of s\[B\]"):
        s2[args[3]].update(0).transform_layout(lambda i: [i])
