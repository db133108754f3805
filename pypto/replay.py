"""``Schedule.from_json``: a schedule's steps, stored as data, replayed on a computation.

Each stored step names its objects; they are found in the schedule being
rebuilt, as it stands when the step is applied (a loop among the stage's
current loops, a stage or tensor among the schedule's stages), so a replay
makes the same loops, in the same order, as the calls that made the record::

    {"stage": "C", "prim": "split", "loop": "i", "factor": 8, "nparts": null}
        ->  sch.apply(Split(sch["C"], <C's current loop named i>, 8, None))
"""

from __future__ import annotations

import json
from dataclasses import MISSING, fields

from .errors import ScheduleError
from .expr import vars_of
from .intrin import TensorIntrin
from .steps import STEPS
from .tensor import Tensor, collect_ops

JSON_VERSION = 1  # of Schedule.to_json's documents


def _named(items, name: str, what: str, where: str):
    found = [x for x in items if x.name == name]
    if len(found) != 1:
        how = "no" if not found else f"{len(found)}"
        raise ScheduleError(f"from_json: {how} {what} named {name!r} in {where}")
    return found[0]


class _Resolver:
    """Turns a stored step's names into the objects of the schedule being rebuilt."""

    def __init__(self, sch, tensors, intrinsics):
        self.sch = sch
        self.intrinsics = list(intrinsics)
        self.sizes = {}
        for t in tensors:
            for d in t.shape:
                for v in vars_of(d):
                    self.sizes.setdefault(v.name, v)

    def stage(self, name):
        return _named(self.sch.stages, name, "stage", "the schedule")

    def loop(self, stage, name):
        return _named(stage.leaf_iter_vars, name, "loop", f"stage '{stage.name}'")

    def tensor(self, name):
        stages = [st for st in self.sch.stages if not st.is_update]
        outs = [t for st in stages for t in getattr(st.op, "outputs", (st.op.output(0),))]
        return _named(outs, name, "tensor", "the schedule")

    def size(self, value):
        if value is None or isinstance(value, int):
            return value
        if value in self.sizes:
            return self.sizes[value]
        raise ScheduleError(
            f"from_json: the size {value!r} is not a variable of the given tensors' shapes"
        )

    def intrin(self, name):
        """An intrinsic passed in ``intrinsics``, else the one registered by that name."""
        found = [x for x in self.intrinsics if x.name == name]
        if len(found) > 1:
            raise ScheduleError(f"from_json: {len(found)} tensor intrinsics named {name!r} passed")
        if found:
            return found[0]
        if name in TensorIntrin.registry:
            return TensorIntrin.registry[name]
        raise ScheduleError(
            f"from_json: no tensor intrinsic named {name!r} among the intrinsics passed or "
            "registered; register it (pt.TensorIntrin.register) or pass it in intrinsics="
        )

    def step(self, d: dict):
        cls = STEPS.get(d.get("prim"))
        if cls is None:
            raise ScheduleError(f"from_json: unknown step {d.get('prim')!r}")
        stage = self.stage(d["stage"]) if "stage" in d else None
        parent = self.stage(d["parent"]) if "parent" in d else None
        rules = {
            "stage": lambda v: stage,
            "parent": lambda v: parent,
            "loop": lambda v: self.loop(_owner(v, parent, stage, d.get("spread")), v),
            "loops": lambda v: tuple(self.loop(stage, x) for x in v),
            "spread": lambda v: self.loop(stage, v),
            "outer": lambda v: self.loop(stage, v),
            "inner": lambda v: self.loop(stage, v),
            "x_parent": lambda v: self.loop(stage, v),
            "y_parent": lambda v: self.loop(stage, v),
            "tensor": self.tensor,
            "readers": lambda v: tuple(self.tensor(x) for x in v),
            "intrin": self.intrin,
            "factor": self.size,
            "nparts": self.size,
            "x_factor": self.size,
            "y_factor": self.size,
        }
        try:
            args = {
                f.name: rules.get(f.name, lambda v: v)(d[f.name])
                for f in fields(cls)
                if f.name in d or f.default is MISSING  # a later field keeps its default
            }
        except KeyError as e:
            raise ScheduleError(f"from_json: step {d} lacks the field {e.args[0]!r}") from None
        return cls(**args)


def _owner(loop: str, parent, stage, spread=None):
    """The stage a step's loop belongs to: its parent's (compute_at; compute_with when
    the parent has it), else its own; a spread prefetch's, the innermost of the stage
    and the stages it is computed in that has a loop of that name."""
    if parent is not None and (stage is None or loop in {v.name for v in parent.leaf_iter_vars}):
        return parent
    while spread is not None and stage.attach is not None:
        if loop in {v.name for v in stage.leaf_iter_vars}:
            break
        stage = stage.attach.stage
    return stage


def replay(schedule_cls, doc, tensors, intrinsics=()):
    """A new ``schedule_cls`` of ``doc["outputs"]`` with every step of ``doc`` applied."""
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError as e:
            raise ScheduleError(f"from_json: not JSON ({e})") from None
    _check_document(doc)
    tensors = list(tensors)
    if not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("from_json needs the tensors of the computation, e.g. [A, B, C]")
    known = {op.name: op for op in collect_ops([t.op for t in tensors])}
    missing = [n for n in doc["outputs"] if n not in known]
    if missing:
        raise ScheduleError(
            f"from_json: the output(s) {', '.join(missing)} are not computed from the "
            f"given tensors ({', '.join(t.name for t in tensors)})"
        )
    sch = schedule_cls([known[n] for n in doc["outputs"]])
    res = _Resolver(sch, tensors, intrinsics)
    for d in doc["steps"]:
        try:
            step = res.step(d)
        except (TypeError, AttributeError) as e:  # a field of the wrong kind
            raise ScheduleError(f"from_json: step {d} is malformed ({e})") from None
        sch.apply(step)
    return sch


def _check_document(doc) -> None:
    """``ScheduleError`` unless ``doc`` has the shape ``Schedule.to_json`` gives it."""
    if not isinstance(doc, dict):
        raise ScheduleError(f"from_json: a schedule is a JSON object, got {type(doc).__name__}")
    version = doc.get("version", JSON_VERSION)
    if type(version) is not int or version != JSON_VERSION:
        raise ScheduleError(f"from_json: version {version!r}; this pypto reads {JSON_VERSION}")
    outputs, steps = doc.get("outputs"), doc.get("steps")
    if not isinstance(outputs, list) or not outputs or not all(isinstance(o, str) for o in outputs):
        raise ScheduleError(f"from_json: 'outputs' must be a list of names, got {outputs!r}")
    if not isinstance(steps, list) or not all(
        isinstance(x, dict) and isinstance(x.get("prim"), str) for x in steps
    ):
        raise ScheduleError("from_json: 'steps' must be a list of objects, each with a 'prim'")
