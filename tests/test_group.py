"""``s.create_group``: stages between inputs and outputs attached or inlined together."""

import numpy as np
import pytest

import pypto as pt

F = "float64"


def _chain(n=20):
    A = pt.placeholder((n,), F, name="A")
    T1 = pt.compute((n,), lambda i: A[i] + 1.0, name="T1")
    T2 = pt.compute((n,), lambda i: T1[i] * 2.0, name="T2")
    C = pt.compute((n,), lambda i: T2[i] * 3.0 - A[i], name="C")
    return A, T1, T2, C


def _check(s, A, C, n=20):
    x = np.random.default_rng(0).random(n)
    y = np.empty(n)
    pt.build(s, [A, C])(x, y)
    np.testing.assert_allclose(y, (x + 1.0) * 2.0 * 3.0 - x, rtol=1e-15)


def test_group_attaches_its_members_in_the_consumers_loop():
    A, T1, T2, C = _chain()
    s = pt.create_schedule(C.op)
    io, ii = s[C].split(s[C].op.axis[0], factor=8)
    g = s.create_group(outputs=T2, inputs=A)
    assert g.members == (s[T1], s[T2]) and g.num_child_stages == 2
    assert s[T1] in g and s[C] not in g
    g.compute_at(s[C], io)
    assert s[T1].attach == (s[C], io) and s[T2].attach == (s[C], io)
    assert [st["prim"] for st in s.steps[-2:]] == ["compute_at", "compute_at"]
    _check(s, A, C)
    again = pt.Schedule.from_json(s.to_json(), [A, C])  # plain steps: no group needed
    assert pt.build(again, [A, C]).source == pt.build(s, [A, C]).source


def test_a_member_attached_inside_the_group_stays_there():
    A, T1, T2, C = _chain()
    s = pt.create_schedule(C.op)
    io, ii = s[C].split(s[C].op.axis[0], factor=8)
    jo, ji = s[T2].split(s[T2].op.axis[0], factor=4)
    s[T1].compute_at(s[T2], jo)
    s.create_group(outputs=[T2], inputs=[A]).compute_at(s[C], io)
    assert s[T1].attach == (s[T2], jo) and s[T2].attach == (s[C], io)
    _check(s, A, C)


def test_include_inputs_and_the_groups_bounds():
    A, T1, T2, C = _chain()
    s = pt.create_schedule(C.op)
    assert s.create_group(outputs=T2, inputs=T1).members == (s[T2],)
    assert s.create_group(T2, T1, include_inputs=True).members == (s[T1], s[T2])
    assert s.create_group(outputs=C).members == (s[T1], s[T2], s[C])  # down to placeholders


def test_group_inlined_together():
    A, T1, T2, C = _chain()
    s = pt.create_schedule(C.op)
    s.create_group(outputs=T2, inputs=A).compute_inline()
    assert s[T1].inline and s[T2].inline
    _check(s, A, C)


def test_bad_groups():
    A, T1, T2, C = _chain()
    s = pt.create_schedule(C.op)
    g = s.create_group(outputs=T2, inputs=A)
    with pytest.raises(pt.ScheduleError, match=r"cannot attach the group to its own member 'T2'"):
        g.compute_at(s[T2], s[T2].op.axis[0])
    with pytest.raises(TypeError, match=r"create_group: outputs must be tensors"):
        s.create_group(outputs="T2")
    other = pt.placeholder((4,), F, name="other")
    with pytest.raises(pt.ScheduleError, match=r"create_group: other is not part of this"):
        s.create_group(outputs=T2, inputs=other)
    with pytest.raises(pt.ScheduleError, match=r"no stage between the inputs and the outputs"):
        s.create_group(outputs=T1, inputs=T1)
    with pytest.raises(pt.ScheduleError, match=r"an output is computed at the root"):
        s.create_group(outputs=C, inputs=T2).compute_at(s[T1], s[T1].op.axis[0])
