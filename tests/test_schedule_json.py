"""Schedules are data: every step is a record, ``s.to_json()`` stores them and
``pt.Schedule.from_json(doc, tensors)`` replays them to the same C -- for every golden
kernel and every built-in template's default config, on every named target."""

import json

import pytest
import snapshot_c

import pypto as pt
from pypto import steps


def test_every_snapshot_kernel_round_trips_to_the_same_c():
    """Each snapshot kernel's schedule, through JSON text and back, gives the C the
    snapshot holds, which the schedule itself gives (``test_snapshot_c``)."""
    stored = json.loads(snapshot_c.SNAPSHOT.read_text())
    differ = []
    for key, make in snapshot_c.kernels():
        s, args, name, target = make()
        doc = json.loads(json.dumps(s.to_json()))  # through text: plain data only
        again = pt.Schedule.from_json(doc, args)  # templates' micro-kernels are registered
        assert again.to_json() == doc, key
        c = pt.build(again, args, target=target, name=name, emit_only=True)
        if snapshot_c.digest(c) != stored.get(key):
            differ.append(key)
    assert not differ, f"replayed schedules give other C than the snapshot's: {differ}"


def _matmul():
    A = pt.placeholder((64, 32), "float32", name="A")
    B = pt.placeholder((32, 48), "float32", name="B")
    k = pt.reduce_axis((0, 32), name="k")
    C = pt.compute((64, 48), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_a_primitive_is_a_step_applied():
    A, B, C = _matmul()
    s = pt.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s.apply(steps.Split(s[C], i, factor=8))
    s[C].parallel(io)
    assert [type(x) for x in s.records] == [steps.Split, steps.Parallel]
    assert s.steps == [
        {"stage": "C", "prim": "split", "loop": "i", "factor": 8, "nparts": None},
        {"stage": "C", "prim": "parallel", "loop": "i.outer"},
    ]
    assert s.to_json()["outputs"] == ["C"]
    with pytest.raises(AttributeError):
        s.records[0].factor = 4  # records are frozen


def test_refused_step_is_not_recorded_and_changes_nothing():
    X = pt.placeholder((16,), "float32", name="X")
    Y = pt.compute((16,), lambda i: X[i], name="Y")
    r = pt.reduce_axis((1, 16), name="r")
    Y[r] = Y[r - 1] + X[r]
    s = pt.create_schedule(Y.op)
    u = s[Y].update(0)
    with pytest.raises(pt.ScheduleError, match="parallel"):
        s.apply(steps.Parallel(u, r))
    assert s.records == [] and u.attrs == {}


def test_apply_refuses_what_is_not_a_step_of_this_schedule():
    A, B, C = _matmul()
    s, other = pt.create_schedule(C.op), pt.create_schedule(C.op)
    with pytest.raises(TypeError, match="not a schedule step"):
        s.apply({"prim": "split"})
    with pytest.raises(pt.ScheduleError, match="is not a stage of this schedule"):
        s.apply(steps.Split(other[C], C.op.axis[0], factor=4))


def test_from_json_names_what_it_cannot_find():
    A, B, C = _matmul()
    doc = {"version": 1, "outputs": ["C"], "steps": []}
    with pytest.raises(pt.ScheduleError, match="output.*D are not computed"):
        pt.Schedule.from_json({**doc, "outputs": ["D"]}, [A, B, C])
    bad = {"stage": "C", "prim": "split", "loop": "q", "factor": 4, "nparts": None}
    with pytest.raises(pt.ScheduleError, match="no loop named 'q' in stage 'C'"):
        pt.Schedule.from_json({**doc, "steps": [bad]}, [A, B, C])
    with pytest.raises(pt.ScheduleError, match="unknown step 'twist'"):
        pt.Schedule.from_json({**doc, "steps": [{"stage": "C", "prim": "twist"}]}, [A, B, C])
    with pytest.raises(pt.ScheduleError, match="no tensor intrinsic named 'dot_nowhere'"):
        step = {"stage": "C", "prim": "tensorize", "loop": "j", "intrin": "dot_nowhere"}
        pt.Schedule.from_json({**doc, "steps": [step]}, [A, B, C])


@pytest.mark.parametrize(
    "edit, message",
    [(lambda d: [], "a schedule is a JSON object, got list"),
     (lambda d: "{not json", "not JSON"),
     (lambda d: {**d, "version": 99}, "version 99; this pypto reads 1"),
     (lambda d: {**d, "version": True}, "version True; this pypto reads 1"),
     (lambda d: {k: v for k, v in d.items() if k != "outputs"}, "'outputs' must be a list"),
     (lambda d: {**d, "steps": 5}, "'steps' must be a list of objects, each with a 'prim'"),
     (lambda d: {**d, "steps": [5]}, "'steps' must be a list of objects"),
     (lambda d: {**d, "steps": [{**d["steps"][0], "prim": ["split"]}]}, "each with a 'prim'"),
     (lambda d: {**d, "steps": [{**d["steps"][0], "factor": [4]}]}, r"step .* is malformed"),
     (lambda d: {**d, "steps": [{**d["steps"][0], "factor": 2**64}]}, "does not fit int64")],
)  # fmt: skip
def test_from_json_refuses_a_malformed_document_by_what_is_wrong(edit, message):
    A, B, C = _matmul()
    s = pt.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(pt.ScheduleError, match=message):
        pt.Schedule.from_json(edit(s.to_json()), [A, B, C])
    assert pt.Schedule.from_json(s.to_json(), [A, B, C]).steps == s.steps


def test_from_json_binds_a_symbolic_factor_to_the_tensors_size():
    n = pt.var("n")
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.compute((n,), lambda i: X[i] * 2, name="Y")
    f = pt.var("f")
    F = pt.placeholder((f,), "float32", name="F")
    s = pt.create_schedule(Y.op)
    s[Y].split(Y.op.axis[0], factor=f)
    doc = s.to_json()
    assert doc["steps"][0]["factor"] == "f"
    again = pt.Schedule.from_json(doc, [X, Y, F])
    assert again.records[0].factor is f
    with pytest.raises(pt.ScheduleError, match="size 'f' is not a variable"):
        pt.Schedule.from_json(doc, [X, Y])


def test_tile_is_one_step_and_round_trips():
    A, B, C = _matmul()
    s = pt.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], x_factor=16, y_factor=8)
    s[C].vectorize(yi)
    assert [x["prim"] for x in s.steps] == ["tile", "vectorize"]
    assert s.steps[0] == {
        "stage": "C", "prim": "tile", "x_parent": "i", "y_parent": "j",
        "x_factor": 16, "y_factor": 8,
    }  # fmt: skip
    assert [iv.name for iv in s[C].leaf_iter_vars] == [
        "i.outer", "j.outer", "i.inner", "j.inner", "k"
    ]  # fmt: skip
    doc = json.loads(json.dumps(s.to_json()))
    again = pt.Schedule.from_json(doc, [A, B, C])
    assert again.to_json() == doc
    c1 = pt.build(s, [A, B, C], target="generic", emit_only=True)
    assert pt.build(again, [A, B, C], target="generic", emit_only=True) == c1


def _diagonal():
    """T[i, j] reads T[i - 1, j + 1]: distance (1, -1), so tiles of j break it."""
    S = pt.placeholder((16, 16), "float32", name="S")
    T = pt.compute((16, 16), lambda i, j: S[i, j], name="T")
    ri, rj = pt.reduce_axis((1, 16), name="ri"), pt.reduce_axis((0, 15), name="rj")
    T[ri, rj] = T[ri - 1, rj + 1] + S[ri, rj]
    return S, T, ri, rj


def _frozen(s):
    """Everything a refused primitive must leave as it was."""
    return (
        json.dumps(s.to_json()),
        list(s.records),
        list(s.stages),
        [
            (list(st.leaf_iter_vars), list(st.relations), dict(st.attrs), st.op, st.attach)
            for st in s.stages
        ],
    )


@pytest.mark.parametrize(
    "prim, match",
    [
        ("tile", r"reorder\(ri.outer, rj.outer, ri.inner, rj.inner\) on 'T.update\(0\)'"),
        ("reorder", r"reorder\(rj, ri\) on 'T.update\(0\)' would break a dependence"),
        ("skew_parallel", r"parallel\(ri\) on 'T.update\(0\)' would race"),
        ("split_annotated", r"split on stage 'T.update\(0\)': loop rj is already annotated"),
        ("cache_write", r"cache_write: T has update definitions"),
    ],
)
def test_a_refused_primitive_leaves_the_schedule_exactly_as_before(prim, match):
    S, T, ri, rj = _diagonal()
    s = pt.create_schedule(T.op)
    u = s[T].update(0)
    i, j = T.op.axis
    jo, ji = s[T].split(j, factor=4)
    s[T].unroll(ji)
    if prim == "skew_parallel":
        u.skew(ri, rj, factor=1)
    if prim == "split_annotated":
        u.unroll(rj)
    before = _frozen(s)
    with pytest.raises(pt.ScheduleError, match=match):
        if prim == "tile":  # two splits are done before the reorder is refused
            u.tile(ri, rj, x_factor=4, y_factor=4)
        elif prim == "reorder":
            u.reorder(rj, ri)
        elif prim == "skew_parallel":
            u.parallel(ri)
        elif prim == "split_annotated":
            u.split(rj, factor=4)
        else:
            s.cache_write(T, "local")
    assert _frozen(s) == before
    c = pt.build(s, [S, T], target="generic", emit_only=True)  # still whole and usable
    again = pt.Schedule.from_json(s.to_json(), [S, T])
    assert pt.build(again, [S, T], target="generic", emit_only=True) == c


DOT4 = """static inline void dot4(const float* a, int64_t a_s0, const float* b, int64_t b_s0,
    int64_t b_s1, float* c, int64_t c_s0) {
  for (int i = 0; i < 4; i++) { float s = 0; for (int k = 0; k < 16; k++)
    s += a[k * a_s0] * b[i * b_s0 + k * b_s1]; c[i * c_s0] = s; }
}"""


def _dot4_op():
    a, b = pt.placeholder((16,), name="a"), pt.placeholder((4, 16), name="b")
    k = pt.reduce_axis((0, 16), name="k")
    return pt.compute((4,), lambda i: pt.sum(a[k] * b[i, k], axis=k), name="d").op


def test_a_registered_intrinsic_replays_from_the_tensors_alone():
    intrin = pt.TensorIntrin.register(
        "dot4_json_test", _dot4_op(), DOT4.replace("dot4", "dot4_json_test")
    )
    assert pt.TensorIntrin.get("dot4_json_test") is intrin
    A = pt.placeholder((8, 16), name="A")
    B = pt.placeholder((12, 16), name="B")
    k = pt.reduce_axis((0, 16), name="k")
    C = pt.compute((8, 12), lambda i, j: pt.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = pt.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].tensorize(ji, intrin)
    doc = json.loads(json.dumps(s.to_json()))
    assert doc["steps"][-1]["intrin"] == "dot4_json_test"
    again = pt.Schedule.from_json(doc, [A, B, C])
    c = pt.build(s, [A, B, C], target="generic", emit_only=True)
    assert "dot4_json_test(" in c
    assert pt.build(again, [A, B, C], target="generic", emit_only=True) == c


def test_register_refuses_another_source_under_a_taken_name_and_get_names_the_unknown():
    src = DOT4.replace("dot4", "dot4_taken")
    pt.TensorIntrin.register("dot4_taken", _dot4_op(), src)
    pt.TensorIntrin.register("dot4_taken", _dot4_op(), src)  # the same kernel again: fine
    with pytest.raises(ValueError, match="'dot4_taken' is registered with another C source"):
        pt.TensorIntrin.register("dot4_taken", _dot4_op(), src + "\n")
    with pytest.raises(KeyError, match="no tensor intrinsic registered as 'nowhere'"):
        pt.TensorIntrin.get("nowhere")
