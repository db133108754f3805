"""The PolyBench/C 4.2 kernels as pypto programs: registry, building, checking.

Each kernel is a function of its sizes returning a ``Program``: input and output tensors
in the order of the module's arguments, the program's own ``compute_with`` order
(``order``: for update definitions it is part of the algorithm, as the C nest's
statement order is), a schedule for speed (``schedule``), the inputs (``init``) and a
numpy reference that follows the C nest (``reference``).

A schedule with ``regroup=True`` states the statements' grouping itself instead of
starting from ``order`` (a statement moved out of a loop it shared, loop distribution).
Where the updates are of one tensor (symm, trmm) isl checks the grouping against the
program's dependences like any other schedule. Where they are of several tensors (adi,
gramschmidt) the grouping is what orders them, so it is the tests, against the C
nest's reference at MINI and SMALL, and the benchmark's comparison with the plain
build, that show it computes the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import pypto as pt
from pypto.arg_checks import aligned_copy, aligned_empty
from pypto.target import GCC_VECTORIZER_LIMITS

F = "float64"  # PolyBench's default DATA_TYPE
ALPHA, BETA = 1.5, 1.2  # the values PolyBench's init_array gives alpha and beta


@dataclass
class Program:
    ins: list
    outs: list
    init: Callable[[np.random.Generator], list]
    reference: Callable[..., list]
    order: Callable | None = None  # order(s): compute_with steps of the algorithm
    schedule: Callable | None = None  # schedule(s): the fast schedule (after order)
    regroup: bool = False  # the schedule groups the statements itself (instead of order)
    rtol: float = 1e-10
    atol: float = 0.0
    view: Callable | None = None  # view(*outputs): the parts the C nest defines exactly
    notes: str = ""


@dataclass
class Kernel:
    name: str
    category: str
    sizes: dict  # "MINI" | "SMALL" | "MEDIUM" (| "LARGE") -> {size name: int}
    make: Callable[..., Program]
    notes: str = ""
    tags: set = field(default_factory=set)


KERNELS: dict[str, Kernel] = {}


def kernel(
    name: str, category: str, mini: dict, small: dict, medium: dict, notes: str = "",
    large: dict | None = None,
):  # fmt: skip
    """Register ``make(**sizes) -> Program`` as PolyBench kernel ``name`` (``large``: its
    LARGE size, given for the kernels whose schedules are timed there too)."""

    def deco(make):
        sizes = {"MINI": mini, "SMALL": small, "MEDIUM": medium}
        if large is not None:
            sizes["LARGE"] = large
        KERNELS[name] = Kernel(name, category, sizes, make, notes)
        return make

    return deco


def schedule_of(prog: Program, tuned: bool) -> pt.Schedule:
    s = pt.create_schedule([t.op for t in prog.outs])
    if prog.order is not None and not (tuned and prog.regroup):
        prog.order(s)
    if tuned and prog.schedule is not None:
        prog.schedule(s)
    return s


def build(name: str, size: str = "MINI", tuned: bool = False, target: str = "host"):
    """``(module, program)`` of kernel ``name`` at PolyBench size ``size``: the plain C
    nest (``tuned=False``) compiled as a C user would, gcc's vectorizer unrestricted
    (``plain_target``), the scheduled build as pypto compiles every kernel."""
    k = KERNELS[name]
    prog = k.make(**k.sizes[size])
    s = schedule_of(prog, tuned)
    tgt = pt.Target(target) if tuned else plain_target(target)
    mod = pt.build(s, prog.ins + prog.outs, target=tgt, name=name.replace("-", "_"))
    return mod, prog


def plain_target(target: str = "host") -> pt.Target:
    """``target`` with the C compiler's flags of a C user: without the limits pypto puts
    on gcc's vectorizer (``pypto.target.GCC_VECTORIZER_LIMITS``), so the plain nest is
    vectorized wherever gcc would vectorize PolyBench's own C."""
    t = pt.Target(target)
    return dataclasses.replace(
        t, cflags=tuple(f for f in t.cflags if f not in GCC_VECTORIZER_LIMITS)
    )


def run(mod, prog: Program, inputs: list) -> list:
    """The outputs of one call on copies of ``inputs`` (outputs prefilled with poison)."""
    outs = [outputs_of(t, _poison(t.dtype)) for t in prog.outs]
    mod(*copies(inputs), *outs)
    return outs


def outputs_of(t, fill=0) -> np.ndarray:
    """An array for output tensor ``t``, filled with ``fill``, starting on a cache line
    as PolyBench's own harness allocates its arrays (``posix_memalign``)."""
    out = aligned_empty(tuple(int(d.value) for d in t.shape), t.dtype)
    out[...] = fill
    return out


def copies(inputs: list) -> list:
    """Fresh copies of the input arrays, each starting on a cache line (``outputs_of``);
    scalar arguments (alpha, beta) as they are."""
    return [aligned_copy(a) if isinstance(a, np.ndarray) else a for a in inputs]


def _poison(dtype: str):
    """What outputs are prefilled with: whatever the kernel does not write shows."""
    return np.nan if np.dtype(dtype).kind == "f" else np.iinfo(np.dtype(dtype)).min


def check(name: str, size: str = "MINI", tuned: bool = False, seed: int = 0) -> float:
    """Build, run and compare with the reference; returns the largest relative error."""
    mod, prog = build(name, size, tuned)
    inputs = prog.init(np.random.default_rng(seed))
    got = run(mod, prog, inputs)
    want = prog.reference(*copies(inputs))
    if prog.view is not None:
        got, want = prog.view(*got), prog.view(*[np.asarray(w) for w in want])
    worst = 0.0
    for t, g, w in zip(prog.outs, got, want):
        w = np.asarray(w, dtype=g.dtype)
        err = np.abs(g.astype(np.float64) - w) / (np.abs(w) + 1e-300)
        bad = ~np.isclose(g, w, rtol=prog.rtol, atol=prog.atol)
        if bad.any():
            idx = tuple(int(x) for x in np.argwhere(bad)[0])
            raise AssertionError(
                f"{name} ({size}, {'tuned' if tuned else 'plain'}): {t.name}{list(idx)} = "
                f"{g[idx]}, the C nest gives {w[idx]} ({int(bad.sum())} of {g.size} differ)"
            )
        worst = max(worst, float(np.max(err, initial=0.0)))
    return worst


def scalars(names: str) -> list:
    """PolyBench's scalar parameters (``alpha beta``): float arguments of the kernel, as
    in ``kernel_gemm(ni, nj, nk, alpha, beta, C, A, B)``."""
    return [pt.var(n, F) for n in names.split()]


def rdom(*ranges, names: str):
    """``pt.rdom`` with ranges given as arguments."""
    return pt.rdom(list(ranges), names=names)


def spd(rng: np.random.Generator, n: int) -> np.ndarray:
    """A symmetric positive definite matrix (what the solvers' inits make)."""
    r = rng.random((n, n))
    return r @ r.T / n + np.eye(n)
