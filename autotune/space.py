"""Config spaces: knobs a template defines, and configs (one value per knob).

A template is run once with a ``ConfigSpace`` to learn its knobs, then once
per candidate with a ``Config`` holding one value per knob:

    cfg.define_split("tile_i", M, num_outputs=2, default=[-1, 6])
    cfg.define_knob("unroll_k", [1, 4, 8], default=4)
    io, ii = cfg["tile_i"].apply(s, C, C.op.axis[0])

Knob values are JSON data (``[-1, 6]``, ``4``, ``[2, 0, 1]``), so a config
serializes as ``{"tile_i": [-1, 6], "unroll_k": 4}``. A space is indexable
in mixed radix: index -> config and back, with random sampling and
neighbours for search.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass, field

import numpy as np

import pypto as pt
from pypto.expr import Const
from pypto.target import as_target


class SpaceError(ValueError):
    """A knob definition or a config that does not fit the space."""


# ---------------------------------------------------------------- knob values


@dataclass(frozen=True)
class SplitEntity:
    """Loop sizes outermost first, ``-1`` for the derived outer extent: ``[-1, 8, 4]``."""

    size: tuple

    def apply(self, s, op, axis) -> list:
        """Split ``axis`` of ``op``'s stage into ``len(size)`` loops; returns them outer first."""
        stage = s[op] if not hasattr(op, "leaf_iter_vars") else op
        out = []
        rest = axis
        for k in range(1, len(self.size)):
            factor = math.prod(self.size[k:])
            outer, rest = stage.split(rest, factor=factor)
            out.append(outer)
        out.append(rest)
        return out

    @property
    def val(self):
        return list(self.size)


@dataclass(frozen=True)
class OtherEntity:
    val: object


@dataclass(frozen=True)
class ReorderEntity:
    perm: tuple

    def apply(self, s, op, axes):
        stage = s[op] if not hasattr(op, "leaf_iter_vars") else op
        stage.reorder(*[axes[i] for i in self.perm])
        return [axes[i] for i in self.perm]

    @property
    def val(self):
        return list(self.perm)


ANNOTATIONS = ("none", "unroll", "vec", "parallel")


@dataclass(frozen=True)
class AnnotateEntity:
    anns: tuple

    def apply(self, s, op, axes, axis_lens=None, max_unroll=None, vec_size=None, **_):
        """Annotate ``axes``; as AutoTVM's, with ``axis_lens`` an axis longer than
        ``max_unroll`` is not unrolled and one whose length is not in ``vec_size`` is not
        vectorized (AutoTVM's ``cfg``/``source`` arguments are accepted and unused)."""
        stage = s[op] if not hasattr(op, "leaf_iter_vars") else op
        for k, (ax, ann) in enumerate(zip(axes, self.anns)):
            n = axis_lens[k] if axis_lens is not None else None
            if ann == "unroll" and None not in (n, max_unroll) and n > max_unroll:
                continue
            if ann == "vec" and None not in (n, vec_size):
                sizes = vec_size if isinstance(vec_size, (list, tuple)) else [vec_size]
                if n not in sizes:
                    continue
            {
                "none": lambda a: None,
                "unroll": stage.unroll,
                "vec": stage.vectorize,
                "parallel": stage.parallel,
            }[ann](ax)
        return list(axes)

    @property
    def val(self):
        return list(self.anns)


# ---------------------------------------------------------------- knobs


@dataclass
class Knob:
    """One dimension of a space: a name, its candidate values, a default."""

    name: str
    kind: str  # "split" | "knob" | "reorder" | "annotate"
    values: list  # JSON values
    default: object = None
    meta: dict = field(default_factory=dict)

    def entity(self, value):
        return _ENTITY[self.kind](value)

    def index(self, value) -> int:
        try:
            return self.values.index(_canon(value))
        except ValueError:
            raise SpaceError(f"knob {self.name!r}: {value!r} is not one of its values") from None

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "n": len(self.values), "meta": self.meta}


_ENTITY = {
    "split": lambda v: SplitEntity(tuple(v)),
    "knob": lambda v: OtherEntity(v),
    "reorder": lambda v: ReorderEntity(tuple(v)),
    "annotate": lambda v: AnnotateEntity(tuple(v)),
}


def _canon(v):
    """JSON round-trip form of a value (tuples become lists, numpy scalars Python's)."""
    if isinstance(v, (tuple, list)):
        return [_canon(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _json_value(knob: str, v):
    """``v`` if the records can hold it as it is (JSON, read back equal), else
    ``SpaceError`` naming the knob."""
    try:
        same = json.loads(json.dumps(v, allow_nan=False)) == v
    except (TypeError, ValueError):
        same = False
    if same is not True:
        raise SpaceError(
            f"knob {knob!r}: {v!r} cannot be a value; records are JSON (numbers, strings, "
            "booleans, None, and lists or string-keyed dicts of them)"
        )
    return v


def _unique(values: list) -> list:
    """``values`` without repeats, first occurrences kept (``[-1, lanes]`` and ``[-1, 8]``
    are one split where lanes is 8)."""
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def _candidates(name, n: int, candidate) -> list:
    """TVM's ``policy="candidate"`` values, checked: ``n`` sizes each, positive, a ``-1``
    (the derived size) only first."""
    if not candidate:
        raise SpaceError(f"define_split {name!r}: policy='candidate' needs candidate=[...]")
    out = []
    for c in candidate:
        c = _canon(list(c))
        ok = len(c) == n and all(isinstance(x, int) and x > 0 for x in c[1:])
        if not ok or not (c[0] == -1 or (isinstance(c[0], int) and c[0] > 0)):
            raise SpaceError(
                f"define_split {name!r}: candidate {c} is not {n} positive sizes "
                "(the first may be -1, derived from the extent)"
            )
        out.append(c)
    return _unique(out)


_FACTORS = {  # TVM's policies: divisors, powers of two, or both ("verbose")
    "factors": lambda e: [f for f in range(1, e + 1) if e % f == 0],
    "power2": lambda e: [2**k for k in range(0, max(1, e).bit_length() + 1) if 2**k <= e],
    "verbose": lambda e: sorted(set(_FACTORS["factors"](e)) | set(_FACTORS["power2"](e))),
}


def _split_values(name, extent: int, n: int, policy: str, max_factor, candidate) -> list:
    if policy == "candidate":
        return _candidates(name, n, candidate)
    if policy not in _FACTORS:
        raise SpaceError(
            f"define_split {name!r}: unknown policy {policy!r} "
            "(factors, power2, verbose, candidate)"
        )
    factors = _FACTORS[policy](extent)
    if max_factor is not None:
        factors = [f for f in factors if f <= max_factor]
    out = []
    for inner in itertools.product(factors, repeat=n - 1):
        if math.prod(inner) <= max(extent, 1) and (
            policy != "factors" or extent % math.prod(inner) == 0
        ):
            out.append([-1, *inner])
    return out


class ConfigSpace:
    """The knobs of a template, collected by running it once in definition mode."""

    def __init__(self, target=None):
        self.knobs: dict[str, Knob] = {}
        self.flop = 0.0
        # the Target the template schedules for: lanes, registers, caches (cfg.target)
        self.target = as_target(target)

    def __repr__(self):
        """As AutoTVM prints a space: its size, then each knob with its candidates."""
        lines = [f"ConfigSpace ({len(self)} configs, target {self.target.name})"]
        for k in self.knobs.values():
            shown = ", ".join(json.dumps(v) for v in k.values[:8])
            more = f", ... ({len(k.values)} in all)" if len(k.values) > 8 else ""
            lines.append(f"  {k.name} ({k.kind}): [{shown}{more}]")
        return "\n".join(lines)

    # ---- definitions (the template calls these)

    def define_split(
        self,
        name,
        extent,
        num_outputs=2,
        policy="factors",
        max_factor=None,
        candidate=None,
        default=None,
        filter=None,  # noqa: A002 - AutoTVM's name
    ):
        """Ways to split a loop of ``extent`` (an int, or the loop itself) into
        ``num_outputs`` loops (``[-1, f1, ...]``); ``filter(entity)`` keeps those it
        accepts (``entity.size``), as AutoTVM's."""
        extent = _int_extent(name, extent)
        if num_outputs < 2:
            raise SpaceError(f"define_split {name!r}: num_outputs must be at least 2")
        values = _split_values(name, extent, num_outputs, policy, max_factor, candidate)
        if filter is not None:
            values = [v for v in values if filter(SplitEntity(tuple(v)))]
        return self._add(
            Knob(name, "split", values, _canon(default), {"extent": extent, "policy": policy})
        )

    def define_knob(self, name, candidates, default=None):
        """A free choice among JSON values."""
        if not candidates:
            raise SpaceError(f"define_knob {name!r}: no candidates")
        values = [_json_value(name, _canon(c)) for c in candidates]
        again = next((v for k, v in enumerate(values) if v in values[:k]), None)
        if again is not None:
            raise SpaceError(f"define_knob {name!r}: candidate {again!r} is given twice")
        return self._add(Knob(name, "knob", values, _canon(default)))

    def define_reorder(self, name, axes, policy="all", candidate=None, default=None):
        """Orders of ``axes`` (permutations of their indices)."""
        n = len(axes)
        if policy == "all":
            values = [list(p) for p in itertools.permutations(range(n))]
        elif policy == "identity":
            values = [list(range(n))]
        elif policy == "candidate":
            values = _unique([_canon(list(c)) for c in (candidate or [])])
            bad = next((v for v in values if sorted(v) != list(range(n))), None)
            if bad is not None or not values:
                raise SpaceError(
                    f"define_reorder {name!r}: candidate {bad} is not an order of the "
                    f"{n} axes (a permutation of 0..{n - 1})"
                )
        else:
            raise SpaceError(
                f"define_reorder: unknown policy {policy!r} (all, identity, candidate)"
            )
        return self._add(Knob(name, "reorder", values, _canon(default)))

    def define_annotate(self, name, axes, policy="try_unroll_vec", default=None):
        """Per axis an annotation: none/unroll (try_unroll), none/vec (try_vec), or all three."""
        choices = {
            "try_unroll": ["none", "unroll"],
            "try_vec": ["none", "vec"],
            "try_unroll_vec": ["none", "unroll", "vec"],
            "try_parallel": ["none", "parallel"],
        }.get(policy)
        if choices is None:
            raise SpaceError(f"define_annotate: unknown policy {policy!r}")
        values = [list(p) for p in itertools.product(choices, repeat=len(axes))]
        return self._add(Knob(name, "annotate", values, _canon(default)))

    def add_flop(self, flop: float):
        """Declare the floating point operations of one run (else they are counted)."""
        self.flop += float(flop)

    def _add(self, knob: Knob):
        if knob.name in self.knobs:
            old = self.knobs[knob.name]
            if old.values != knob.values:
                raise SpaceError(f"knob {knob.name!r} defined twice with different values")
            return None
        if not knob.values:
            raise SpaceError(f"knob {knob.name!r} has no valid values")
        if knob.default is not None and knob.default not in knob.values:
            raise SpaceError(f"knob {knob.name!r}: default {knob.default!r} is not a value")
        self.knobs[knob.name] = knob
        return None

    def __getitem__(self, name):
        """While defining, a knob reads as its default (so the template can run)."""
        k = self.knobs[name]
        return k.entity(k.default if k.default is not None else k.values[0])

    @property
    def is_fallback(self) -> bool:
        return False

    # ---- the space as a whole

    def __len__(self) -> int:
        return math.prod(len(k.values) for k in self.knobs.values())

    def get(self, index: int) -> Config:
        """The config at ``index`` (mixed radix, first knob varying slowest)."""
        if not 0 <= index < len(self):
            raise IndexError(f"config index {index} out of range (space of {len(self)})")
        vals = {}
        for k in reversed(list(self.knobs.values())):
            index, r = divmod(index, len(k.values))
            vals[k.name] = k.values[r]
        return Config(self, {n: vals[n] for n in self.knobs})

    def index_of(self, values: dict) -> int:
        idx = 0
        for k in self.knobs.values():
            if k.name not in values:
                raise SpaceError(f"config lacks knob {k.name!r}")
            idx = idx * len(k.values) + k.index(values[k.name])
        return idx

    def config(self, values: dict) -> Config:
        """A Config from JSON values (checked against the space)."""
        extra = set(values) - set(self.knobs)
        if extra:
            raise SpaceError(f"config has unknown knobs {sorted(extra)}")
        self.index_of(values)  # validates
        # the space's own values: a record's 8.0 (or true) equals 8 (1) but would not
        # schedule as one
        return Config(self, {n: k.values[k.index(values[n])] for n, k in self.knobs.items()})

    def fits(self, values: dict) -> bool:
        """Whether ``values`` is a point of this space (a record made with another version
        of the template is not)."""
        try:
            self.config(values)
        except SpaceError:
            return False
        return True

    def default_config(self) -> Config:
        """Each knob's default (or its middle value): the schedule used without records."""
        return Config(
            self,
            {
                n: (k.default if k.default is not None else k.values[len(k.values) // 2])
                for n, k in self.knobs.items()
            },
            fallback=True,
        )

    def sample(self, rng: random.Random) -> Config:
        return self.get(rng.randrange(len(self)))

    def neighbours(self, cfg: Config, rng: random.Random, n: int = 1) -> list[Config]:
        """Configs that differ from ``cfg`` in one knob (random knobs, random values)."""
        movable = [k for k in self.knobs.values() if len(k.values) > 1]
        out = []
        for _ in range(n):
            if not movable:
                break
            k = rng.choice(movable)
            vals = dict(cfg.values)
            choices = [v for v in k.values if v != vals[k.name]]
            vals[k.name] = rng.choice(choices)
            out.append(Config(self, vals))
        return out

    def describe(self) -> dict:
        return {"size": len(self), "knobs": [k.to_dict() for k in self.knobs.values()]}


class Config:
    """One point of a space: ``cfg["tile_i"].apply(...)``; ``cfg.values`` is JSON data."""

    def __init__(self, space: ConfigSpace, values: dict, fallback: bool = False):
        self.space = space
        self.values = values
        self._fallback = fallback
        self.flop = space.flop
        self.target = space.target

    def __getitem__(self, name):
        try:
            k = self.space.knobs[name]
        except KeyError:
            raise SpaceError(f"knob {name!r} is not defined by this template") from None
        return k.entity(self.values[name])

    # the template calls define_* on configs too: they are already defined
    def define_split(self, name, *a, **kw):
        self._check_defined(name)

    def define_knob(self, name, *a, **kw):
        self._check_defined(name)

    def define_reorder(self, name, *a, **kw):
        self._check_defined(name)

    def define_annotate(self, name, *a, **kw):
        self._check_defined(name)

    def add_flop(self, flop: float):
        pass

    def _check_defined(self, name):
        if name not in self.space.knobs:
            raise SpaceError(f"knob {name!r} was not defined when the space was built")

    @property
    def is_fallback(self) -> bool:
        return self._fallback

    @property
    def index(self) -> int:
        return self.space.index_of(self.values)

    def to_json(self) -> dict:
        return dict(self.values)

    def __eq__(self, other):
        return isinstance(other, Config) and self.values == other.values

    def __hash__(self):
        return hash(repr(sorted(self.values.items())))

    def __repr__(self):
        return f"Config({self.values})"


def _int_extent(name, extent) -> int:
    """An extent given as an int, a constant expression, or a loop (TVM's
    ``define_split("tile_y", y)``): the loop's constant extent."""
    given = extent
    if isinstance(extent, pt.IterVar):
        extent = extent.extent
    if isinstance(extent, Const):
        extent = extent.value
    try:
        if isinstance(extent, (bool, float)) or int(extent) != extent or int(extent) < 0:
            raise ValueError
        return int(extent)
    except (TypeError, ValueError):
        raise SpaceError(
            f"define_split {name!r}: the extent must be a constant integer to tune, got "
            f"{given!r}" + (f" (extent {extent})" if given is not extent else "")
        ) from None
