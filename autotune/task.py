"""Templates and tasks.

    @at.template("matmul")
    def matmul(cfg, M, N, K, dtype="float32"):
        ...define knobs on cfg, build a schedule...
        return s, [A, B, C]

    matmul(1024, 1024, 1024)                 # best recorded config (apply_history_best)
                                             # or the template's default config
    task = at.Task("matmul", (1024, 1024, 1024), target="host")
    task.config_space                        # the knobs; task.instantiate(cfg) -> (s, args)

The config is always passed explicitly to the template function; calling
the template without one consults ``apply_history_best``, the one context.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
import warnings

import numpy as np

from cost_models import featurize
from pypto.expr import Binary, Call, Cast, Const, Expr, Reduce, Select, walk
from pypto.lowering import lower, lower_nest
from pypto.simplify import simplify
from pypto.target import as_target
from pypto.tensor import ComputeOp, collect_ops

from . import dispatch
from .space import Config, ConfigSpace, SpaceError

_TEMPLATES: dict = {}
_BUILTINS_LOADED = False


class Template:
    """A registered schedule template: ``f(cfg, *args) -> (schedule, tensors)``."""

    def __init__(self, name: str, func, reference=None, atol_scale: float | dict = 0.0):
        self.name = name
        self.func = func
        self.reference = reference  # optional numpy reference: inputs -> outputs
        # the tuner's check allows an absolute error of atol_scale x the largest |reference|
        self.atol_scale = atol_scale
        self.module = func.__module__
        self.__doc__ = func.__doc__
        # read once: inspect.signature costs ~60 us, and an operator call asks several times
        self._signature = inspect.signature(func)
        self._spaces: dict = {}
        self._dtypes: dict = {}  # the dtypes of the tensors, per key of _spaces

    def __repr__(self):
        return f"Template({self.name!r})"

    def short_args(self, args) -> tuple:
        """``args`` without the trailing ones that equal their parameter's default (of
        the same type: ``0`` is not ``False``): the workload as the standard workloads
        and ``pypto-tune`` name it, ``(4096, 4096)`` for ``gelu(4096, 4096, "none")``."""
        params = list(self._signature.parameters.values())[1:]  # not cfg
        out = list(args)
        while 0 < len(out) <= len(params):
            d = params[len(out) - 1].default
            if d is inspect.Parameter.empty or type(out[-1]) is not type(d) or out[-1] != d:
                break
            out.pop()
        return tuple(out)

    def spellings(self, args) -> list[str]:
        """The workload keys of every spelling of ``args`` (the same workload with more
        or fewer of its trailing defaults written out), ``args``' own first: a record of
        ``gelu(9, 70, "none")`` serves a call ``gelu(9, 70)`` and the other way round."""
        short, full = self.short_args(args), tuple(self.named_args(args).values())
        keys = [workload_key(self.name, args)]
        keys += [workload_key(self.name, full[:n]) for n in range(len(short), len(full) + 1)]
        return list(dict.fromkeys(keys))

    def named_args(self, args) -> dict:
        """The template's arguments by parameter name, defaults filled in:
        ``{"rows": 64, "cols": 128, "eps": 1e-6}`` for ``rmsnorm(cfg, rows, cols, eps=1e-6)``."""
        bound = self._signature.bind(None, *args)
        bound.apply_defaults()
        return dict(list(bound.arguments.items())[1:])  # without cfg

    def record_keys(self, args, target) -> tuple:
        """The targets whose records serve this template's ``args`` on ``target`` (a
        pt.Target), own first (``dispatch.record_keys``): the workload's dtypes are its
        arguments' (defaults filled in) and its tensors' (a template without a dtype
        argument may still compute in int8)."""
        t = as_target(target)
        self.space(*args, target=t)
        dtypes = self._dtypes[(json.dumps(list(args)), t)]
        return dispatch.record_keys(t, tuple(self.named_args(args).values()) + dtypes)

    def reference_output(self, inputs, args) -> list:
        """The numpy reference for these input arrays, as a list of outputs. A reference
        also gets, by name, the template arguments it declares as keyword-only
        parameters: ``def ref(x, w, *, eps)`` for ``rmsnorm(cfg, rows, cols, eps=1e-6)``."""
        params = inspect.signature(self.reference).parameters
        wanted = {k for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
        kw = {k: v for k, v in self.named_args(args).items() if k in wanted}
        out = self.reference(*inputs, **kw)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def space(self, *args, target=None) -> ConfigSpace:
        """The config space for these arguments on ``target`` (default: the host), found by
        running the template once to define its knobs."""
        t = as_target(target)
        key = (json.dumps(list(plain_args(args))), t)
        if key not in self._spaces:
            self._check_arity(args)
            sp = ConfigSpace(t)
            out = self.func(sp, *args)
            self._spaces[key] = sp
            tensors = out[1] if isinstance(out, tuple) and len(out) == 2 else ()
            self._dtypes[key] = tuple(str(x.dtype) for x in tensors if hasattr(x, "dtype"))
        return self._spaces[key]

    def _check_arity(self, args) -> None:
        """A ``TypeError`` naming the template's parameters (and a variant that takes a
        dtype, ``softmax_fwd`` for ``softmax``) when ``args`` do not fit them."""
        try:
            self._signature.bind(None, *args)
        except TypeError:
            params = ", ".join(list(self._signature.parameters)[1:])
            other = f"{self.name}_fwd"
            hint = ""
            if other in _TEMPLATES and "dtype" in _TEMPLATES[other]._signature.parameters:
                hint = f"; {other} takes a dtype"
            raise TypeError(f"{self.name} takes ({params}), got {tuple(args)}{hint}") from None

    def instantiate(self, cfg, *args, target=None):
        """``(schedule, tensors)`` for a Config, or for a dict of knob values on ``target``."""
        if not isinstance(cfg, Config):
            cfg = self.space(*args, target=target).config(cfg)
        return self.func(cfg, *args)

    def __call__(self, *args, target="host"):
        """The schedule with the best recorded config for ``target``, else the default config."""
        args = plain_args(args)
        return self.func(self.best_config(*args, target=target), *args)

    def best_config(self, *args, target="host") -> Config:
        """The best recorded config of these arguments for ``target`` (the records of an
        enclosing ``apply_history_best`` first), else the default config."""
        t = as_target(target)
        args = plain_args(args)  # (np.int64(16) is 16, as Task and __call__ have it)
        space = self.space(*args, target=t)
        key = workload_key(self.name, args)
        keys = self.record_keys(args, t)
        ranked = dispatch.lookup(self.spellings(args), keys)
        cfg, stale = None, 0
        for values in ranked:
            try:
                cfg = space.config(values)
                break
            except SpaceError:
                stale += 1  # a record from another version of the template
        if not ranked:
            _warn_other_targets(self.name, key, keys, self.spellings(args))
        if stale:
            use = "the best one that does" if cfg is not None else "the default config"
            warnings.warn(
                f"{stale} record(s) of {key} do not fit the knobs of template "
                f"{self.name!r} (made with another version of it); using {use}",
                stacklevel=3,
            )
        return cfg or space.default_config()


_WARNED_TARGETS: set = set()


def _warn_other_targets(name: str, workload: str, targets: tuple, spellings: list) -> None:
    """Once per workload and target: records exist, but for other targets only (a base
    target whose records serve this one is not another target)."""
    target = targets[0]
    others = dispatch.other_targets(spellings, targets)
    if others and (workload, target) not in _WARNED_TARGETS:
        _WARNED_TARGETS.add((workload, target))
        warnings.warn(
            f"no record of {workload} for target {target} (records exist for "
            f"{', '.join(others)}); template {name!r} uses its default config. Tune it "
            f"here: pypto-tune {name} --args {','.join(map(str, json.loads(workload)[1]))}",
            stacklevel=4,
        )


_TEMPLATE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")


def template(name: str, reference=None, atol_scale: float | dict = 0.0):
    """Register ``f(cfg, *args)`` as template ``name`` (``reference``: numpy inputs->outputs).
    ``atol_scale`` (a number, or one per output dtype): the tuner's correctness check
    allows an absolute error of that times the largest reference magnitude (chains of
    long reductions on random inputs give large outputs, and elements that cancel to
    near 0 keep the large ones' rounding). ``name`` names its default log file too:
    letters, digits, ``_``, ``-`` and ``.``, not starting with ``.``."""
    if not isinstance(name, str) or not _TEMPLATE_NAME.fullmatch(name):
        raise ValueError(
            f"template name {name!r}: use letters, digits, _, - and . (not first); it names "
            "the template's log file"
        )

    def deco(func):
        _load_builtins()  # first: a built-in loaded later would replace this one
        t = Template(name, func, reference, atol_scale)
        was = _TEMPLATES.get(name)
        builtin = [x is not None and x.module.startswith(_BUILTIN) for x in (was, t)]
        if builtin == [True, False]:
            warnings.warn(
                f"template {name!r} ({t.module}.{func.__name__}) replaces the built-in one "
                f"from now on, in this process; its records share the log name {name}.jsonl "
                "with the built-in's (those do not fit its knobs: a warning says so); give "
                "it a name of its own to keep them apart",
                stacklevel=2,
            )
        _TEMPLATES[name] = t
        return t

    return deco


_BUILTIN = "autotune.templates"


def _load_builtins():
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        importlib.import_module(_BUILTIN)


def get_template(name: str) -> Template:
    """A registered template by name (built-in or user-defined)."""
    _load_builtins()
    try:
        return _TEMPLATES[name]
    except KeyError:
        raise KeyError(
            f"no template named {name!r}; known: {', '.join(list_templates())}"
        ) from None


def list_templates() -> list[str]:
    _load_builtins()
    return sorted(_TEMPLATES)


def workload_key(name: str, args) -> str:
    """The string that identifies a workload in records: ``["matmul", [1024, 1024, 1024]]``."""
    return json.dumps([name, list(plain_args(args))], separators=(",", ":"))


def plain_args(args) -> tuple:
    """Workload arguments as plain Python values: numpy scalars (``np.int64(32)``) become
    the ints, floats and strings they hold, so keys and records are the same either way.
    ``ValueError`` for a float that is not finite (records are JSON: no NaN there)."""

    def plain(a):
        if isinstance(a, np.generic):
            a = a.item()
        if isinstance(a, (list, tuple)):
            return type(a)(plain(x) for x in a)
        if isinstance(a, float) and not math.isfinite(a):
            raise ValueError(f"workload arguments must be finite numbers, got {a}")
        if isinstance(a, Expr):
            raise TypeError(
                f"workload arguments must be numbers or strings, got the expression {a}: a "
                "template is tuned and recorded per shape; for a kernel of symbolic sizes, "
                "write its pt.compute and schedule (pt.var sizes) and pt.build that"
            )
        return a

    return tuple(plain(a) for a in args)


def count_flop(tensors) -> float:
    """Arithmetic operations of one run, counted from the compute definitions."""
    ops = collect_ops([t.op for t in tensors])
    total = 0.0
    for op in ops:
        if not isinstance(op, ComputeOp):
            continue
        body = op.body
        per = 0
        for e in walk(body):
            if isinstance(e, (Binary, Call, Select)) and not isinstance(e, Cast):
                per += 1
        if isinstance(body, Reduce):
            per += 1  # the combine
        points = 1
        for iv in (*op.axis, *op.reduce_axis):
            ext = simplify(iv.extent)
            if not isinstance(ext, Const):
                return math.nan  # symbolic sizes: no count
            points *= ext.value
        total += per * points
    return total


class Task:
    """A template applied to concrete arguments, on a target: what a tuner tunes."""

    def __init__(self, name: str, args, target="host"):
        self.template = get_template(name) if isinstance(name, str) else name
        self.name = self.template.name
        self.args = plain_args(args)
        self.target = as_target(target)
        self.workload_key = workload_key(self.name, self.args)
        self.config_space = self.template.space(*self.args, target=self.target)
        s, tensors = self.template.instantiate(self.config_space.default_config(), *self.args)
        declared = self.config_space.flop
        self.flop = declared if declared else count_flop(tensors)

    def instantiate(self, cfg):
        """``(schedule, tensors)`` for a Config or a dict of knob values, on the task's
        target (a dict is checked against the task's own config space)."""
        return self.template.instantiate(cfg, *self.args, target=self.target)

    @property
    def record_keys(self) -> tuple:
        """The targets whose records serve this task, own first (its target's base too
        where the base's code for this workload is the same)."""
        return self.template.record_keys(self.args, self.target)

    def lower(self, cfg, name: str = "candidate", scheduled: bool = False):
        """The loop IR of a config (a Config or a dict of knob values), checked as
        ``pt.lower`` checks every schedule: legality, bounds, bound sizes; ``scheduled``:
        its loops marked unrolled kept as loops (``pypto.lowering.lower_nest``)."""
        if not isinstance(cfg, Config):
            cfg = self.config_space.config(cfg)
        s, args = self.instantiate(cfg)
        return (lower_nest if scheduled else lower)(s, args, name=name)

    def featurize(self, cfg) -> np.ndarray:
        """The cost model's features of a config's loop nest as scheduled, for this task's
        target. Raises what lowering raises (``PyptoError``, ...) for a config that does
        not lower."""
        return featurize(self.lower(cfg, scheduled=True), self.target)

    def __repr__(self):
        return f"Task({self.name}, {self.args}, target={self.target.name})"
