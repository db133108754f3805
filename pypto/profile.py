"""Profiling: where a kernel's time goes, stage by stage, against the machine's roofs.

    prof = mod.profile(a, b, repeat=20)   # an instrumented build of the same loop IR
    print(prof)                           # one row per root stage
    prof.plot("roofline.png")             # the stages on a roofline (needs matplotlib)

The profiling build is the module's own lowered function with a timer around each
top-level statement (``codegen(..., timers=...)``); each statement belongs to the root
stage whose loops (or the loops of a stage computed inside it) it runs, else to the
stage whose tensor it writes. A stage's work is counted from its definition, not from
the loops: ``flops`` are the arithmetic operations of its body (inlined stages expanded,
stages computed inside it added) times the points of its domain (0 for a ``pt.extern``
call, whose work is not known); ``bytes`` are the
tensors it reads from outside read once and its output written once, from the shapes.
Its ``peak_fraction`` is of the compute roof when its intensity (flops per byte) is past
the machine's ridge, else of the triad bandwidth (``pypto.peak``), with as many threads as
the stage uses (all OpenMP threads when it has a parallel loop, else one). The compute
roof is that of the narrowest dtype the stage reads (``RootStage.dtype``): the target's
dot-product instruction for int8/uint8 or bfloat16 inputs where it has one (an int8
matmul's kernel on ``x86-avx512-bf16`` is held to ``vpdpbusd``), else the FMA of its
dtype (float64 at half the float32 rate).
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import islpy as isl

from . import dtypes
from .arg_checks import bump_versions, raise_status
from .codegen_c import codegen
from .expr import (
    BITWISE,
    Binary,
    Call,
    Const,
    Expr,
    Reduce,
    TensorRead,
    children,
    substitute,
    vars_of,
)
from .intervals import bounds
from .isl_expr import IslPrinter, NonAffine
from .loop_ir import Allocate, For, IntrinCall, Seq, Store, walk_stmts
from .module import Module
from .peak import FMA_SHARE, Peaks, measure_peaks
from .simplify import simplify

ARITH = frozenset({"add", "sub", "mul", "div", "floordiv", "mod", "min", "max"} | set(BITWISE))

# expression type -> arithmetic operations it performs itself (its children add theirs)
_OPS = {
    Binary: lambda e: 1 if e.op in ARITH else 0,
    Call: lambda e: 1,
    Reduce: lambda e: 1,  # one combine per point of the reduction
}


@dataclass(frozen=True, slots=True)
class Work:
    """One definition's arithmetic: ``ops`` per point of the domain ``axes``
    (IterVars, outermost first; an extent may depend on the axes before it)."""

    ops: int
    axes: tuple


@dataclass(frozen=True, slots=True)
class RootStage:
    """What profiling needs of a root stage, taken from the schedule at build time."""

    name: str
    buffer: str  # the tensor it writes
    loop_vars: tuple  # Vars of its loops and of the loops of stages computed inside it
    work: tuple  # of Work: its definition and those computed inside it
    reads: tuple  # (shape, element bytes) of each tensor it reads from outside
    writes: tuple  # (shape, element bytes) of its output
    dtype: str = "float32"  # the narrowest it reads: whose compute roof holds it


def _ops(e: Expr, stage_of) -> int:
    if isinstance(e, TensorRead):  # indices are addressing, not arithmetic
        st = stage_of(e.tensor)
        return _ops(st.op.body, stage_of) if st is not None and st.inline else 0
    return _OPS.get(type(e), lambda e: 0)(e) + sum(_ops(c, stage_of) for c in children(e))


def _reads(e: Expr, stage_of, out: dict) -> dict:
    """Tensors ``e`` reads, through inlined stages (id -> tensor)."""
    if isinstance(e, TensorRead):
        st = stage_of(e.tensor)
        if st is not None and st.inline:
            return _reads(st.op.body, stage_of, out)
        out.setdefault(id(e.tensor), e.tensor)
    for c in children(e):
        _reads(c, stage_of, out)
    return out


def _tensor_size(t) -> tuple:
    return tuple(t.shape), dtypes.dtype(t.dtype).bytes


_ROOF_DTYPE = {"uint8": "int8"}  # the dot instructions' roofs, by the dtype they take


def _narrowest(tensors) -> str:
    """The dtype of the fewest bits among ``tensors`` (float32 for none), as a roof's."""
    names = [t.dtype for t in tensors] or ["float32"]
    d = min(names, key=lambda n: dtypes.dtype(n).bits)
    return _ROOF_DTYPE.get(d, d)


def describe(sch) -> tuple:
    """The root stages of schedule ``sch`` (in program order), as ``RootStage`` records."""
    stage_of = lambda t: sch.stage_map.get(t.op)  # noqa: E731
    stages = [st for st in sch.stages if not st.is_placeholder]
    out = []
    for group in _loop_groups([st for st in stages if not st.inline and st.attach is None]):
        root = group[0]
        inside, todo = [], list(group)
        while todo:
            st = todo.pop()
            inside.append(st)
            todo += [a for a in stages if a.attach is not None and a.attach[0] is st]
        written = {id(st.op.output(0)) for st in inside}
        reads, work, loop_vars = {}, [], []
        for st in inside:
            op = st.op
            body = getattr(op, "body", None)
            exprs = [e for e in (body, *getattr(op, "lhs", ())) if e is not None]
            known = body is not None and getattr(op, "extern", None) is None  # pt.extern: opaque
            ops = _ops(body, stage_of) if known else 0
            work.append(Work(ops, (*getattr(op, "axis", ()), *getattr(op, "reduce_axis", ()))))
            for e in exprs:  # an update's indices may read data too
                _reads(e, stage_of, reads)
            loop_vars += [iv.var for iv in (*st.leaf_iter_vars, *st.root_iter_vars)]
        outside = [t for k, t in reads.items() if k not in written]
        outputs = list({id(st.op.output(0)): st.op.output(0) for st in group}.values())
        out.append(
            RootStage(
                " + ".join(st.name for st in group),
                root.op.output(0).name,
                tuple(loop_vars),
                tuple(work),
                tuple(_tensor_size(t) for t in outside),
                tuple(_tensor_size(t) for t in outputs),
                _narrowest(outside),
            )
        )
    return tuple(out)


def _loop_groups(roots: list) -> list:
    """The root stages in program order, those sharing loops by ``compute_with`` as one
    group (one entry of the profile: their statements run interleaved in those loops)."""

    def first(st):
        while st.fused_with is not None:
            st = st.fused_with.stage
        return st

    groups: dict = {}
    for st in roots:
        groups.setdefault(id(first(st)), []).append(st)
    return list(groups.values())


def _value(e: Expr, sizes: dict, ranges: dict) -> int:
    """``e`` at the bound sizes; one that still depends on outer axes at its largest."""
    v = simplify(substitute(e, sizes))
    if isinstance(v, Const):
        return int(v.value)
    hi = bounds(v, ranges)[1]
    return int(hi) if math.isfinite(hi) else 0


def _points(axes: tuple, sizes: dict) -> int:
    """The points of the domain ``axes``: a box's product of extents; counted by isl
    when an extent depends on the axes before it (``k < i + 1``: a triangle has half
    its box's points), the box where isl cannot take the bounds."""
    n, ranges = 1, {}
    for iv in axes:
        ext = max(_value(iv.extent, sizes, ranges), 0)
        lo = _value(iv.dom_min, sizes, ranges)
        ranges[iv.var] = (lo, lo + ext - 1)
        n *= ext
    axis_vars = {id(iv.var) for iv in axes}
    if n and any(
        id(v) in axis_vars for iv in axes for v in vars_of(iv.extent) + vars_of(iv.dom_min)
    ):
        return _isl_points(axes, sizes, n)
    return n


def _isl_points(axes: tuple, sizes: dict, box: int) -> int:
    names = {iv.var: f"a{k}" for k, iv in enumerate(axes)}
    pr = IslPrinter(names)
    try:
        bounds_ = [
            f"{pr(lo)} <= {names[iv.var]} < {pr(lo)} + {pr(ext)}"
            for iv in axes
            for lo, ext in [(simplify(substitute(iv.dom_min, sizes)),
                             simplify(substitute(iv.extent, sizes)))]
        ]  # fmt: skip
        space = ", ".join(names.values())
        count = isl.Set(f"{{ [{space}] : {' and '.join(bounds_)} }}").count_val()
        return int(count.to_python())
    except (NonAffine, isl.Error, KeyError):
        return box


def _nbytes(sized: tuple, sizes: dict) -> int:
    total = 0
    for shape, elem in sized:
        n = elem
        for d in shape:
            n *= max(_value(d, sizes, {}), 0)
        total += n
    return total


# ---------------------------------------------------------------- the profiling build


def _top_level(s):
    """The statements timed: those of the function body, through Seqs and Allocates."""
    if isinstance(s, Seq):
        for x in s.stmts:
            yield from _top_level(x)
    elif isinstance(s, Allocate):
        yield from _top_level(s.body)
    else:
        yield s


def _written_names(s) -> set:
    out = set()
    for x in walk_stmts(s):
        if isinstance(x, Store):
            out.add(x.buffer.name)
        elif isinstance(x, IntrinCall):
            out.add(x.operands[-1].buffer.name)
    return out


def assign(func, stages: tuple) -> dict:
    """Top-level statement id -> index of the root stage it belongs to: the stage whose
    loops it runs, else the next stage (from the previous statement's on) whose tensor it
    writes, else the previous statement's stage."""
    by_var = {id(v): k for k, st in enumerate(stages) for v in st.loop_vars}
    timers, cur = {}, 0
    for s in _top_level(func.body):
        ks = [
            by_var[id(x.var)] for x in walk_stmts(s) if isinstance(x, For) and id(x.var) in by_var
        ]
        if ks:
            k = ks[0]
        else:
            names = _written_names(s)
            k = next((j for j in range(cur, len(stages)) if stages[j].buffer in names), cur)
        timers[id(s)] = cur = k
    return timers


def _omp_threads() -> int:
    for lib in ("libgomp.so.1", "libgomp.so"):
        try:
            return int(ctypes.CDLL(lib).omp_get_max_threads())
        except (OSError, AttributeError):
            continue
    return 1


@dataclass(frozen=True, slots=True)
class StageProfile:
    """One root stage's share of a call: ``seconds`` per call, its work and speed."""

    stage: str
    seconds: float
    flops: float
    bytes: float
    gflops: float
    gbps: float
    intensity: float  # flops per byte
    bound: str  # its roof: "compute" (float32 FMA), "memory", or a dtype (dot, float64 FMA)
    peak_fraction: float
    threads: int  # the threads of the peak it is compared with


@dataclass(frozen=True, slots=True)
class Profile:
    """``mod.profile(...)``: one ``StageProfile`` per root stage (iterate it, index it,
    print it), the whole call's ``total_seconds`` and the ``peaks`` per thread count."""

    name: str
    target: str
    entries: tuple  # of StageProfile
    total_seconds: float  # one whole call, timed around the C function
    peaks: tuple  # of pypto.peak.Peaks

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, k):
        if isinstance(k, str):
            for e in self.entries:
                if e.stage == k:
                    return e
            raise KeyError(f"{self.name} has no root stage {k!r}")
        return self.entries[k]

    def __str__(self) -> str:
        head = ["stage", "ms", "share", "GFLOP/s", "GB/s", "flop/B", "bound", "of peak"]
        total = sum(e.seconds for e in self.entries) or 1.0
        rows = [
            [e.stage, f"{e.seconds * 1e3:.4g}", f"{100 * e.seconds / total:.0f}%",
             f"{e.gflops:.3g}", f"{e.gbps:.3g}", f"{e.intensity:.3g}", e.bound,
             f"{100 * e.peak_fraction:.0f}% ({e.threads}t)"]
            for e in self.entries
        ]  # fmt: skip
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = [f"{self.name} on {self.target}: {self.total_seconds * 1e3:.4g} ms per call"]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head, *rows]]
        shares = {e.bound for e in self.entries} & set(FMA_SHARE)
        lines += [
            f"peak with {p.threads} thread(s): FMA {p.gflops:.4g} GFLOP/s, "
            + "".join(f"{d} FMA {p.roof(d):.4g} GFLOP/s, " for d in sorted(shares))
            + "".join(f"{d} dot {g:.4g} GOP/s, " for d, g in p.dot)
            + f"triad {p.gbps:.4g} GB/s"
            for p in self.peaks
        ]
        return "\n".join(lines)

    def plot(self, path: str) -> str:
        """Write a roofline PNG of the stages to ``path`` (needs matplotlib: the ``plot``
        extra); returns ``path``."""
        if importlib.util.find_spec("matplotlib") is None:
            raise RuntimeError(
                "Profile.plot needs matplotlib: pip install matplotlib (or pypto[plot])"
            )
        # an optional dependency, imported only when a picture is asked for
        matplotlib = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt = importlib.import_module("matplotlib.pyplot")
        fig, ax = plt.subplots(figsize=(7, 4.5))
        xs = [e.intensity for e in self.entries if e.intensity > 0] or [1.0]
        lo, hi = min(min(xs) / 4, 0.05), max(max(xs) * 4, 64.0)
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        held = {e.bound for e in self.entries}
        for p in self.peaks:
            fma = [min(p.gflops, x * p.gbps) for x in grid]
            ax.plot(grid, fma, label=f"FMA roof, {p.threads}t")
            for d in sorted(held & (set(dict(p.dot)) | set(FMA_SHARE))):  # dashed: by dtype
                kind = "dot" if d in dict(p.dot) else "FMA"
                ax.plot(grid, [min(p.roof(d), x * p.gbps) for x in grid], linestyle="--",
                        label=f"{d} {kind} roof, {p.threads}t")  # fmt: skip
        for e in self.entries:
            if e.intensity > 0 and e.gflops > 0:
                ax.scatter([e.intensity], [e.gflops])
                ax.annotate(e.stage, (e.intensity, e.gflops), textcoords="offset points",
                            xytext=(4, 4))  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (flop / byte)")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"{self.name} on {self.target}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path


@dataclass(frozen=True, slots=True)
class Profiler:
    """What ``Module.profile`` runs: the module's root stages and the compile function
    (``pypto.runtime.compile_source``), given to the module by ``pt.build``."""

    stages: tuple  # of RootStage
    compile: Callable

    def __call__(self, mod: Module, args: tuple, repeat: int) -> Profile:
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"repeat must be a positive number of calls, got {repeat!r}")
        timers = assign(mod.func, self.stages)
        if not timers:
            raise RuntimeError(f"{mod.name} has no statements to time")
        source, cname = codegen(mod.func, mod.target, timers)
        so = self.compile(source, mod.target.cflags)
        prof = Module(mod.func, source, cname, so, mod.target)
        n_slots = max(timers.values()) + 1  # as many as codegen declared
        slots = (ctypes.c_double * n_slots).in_dll(ctypes.CDLL(so), "pt_prof_seconds")
        args = prof._with_outputs(args)[0]
        cargs, keep = prof._prepare(args)
        bump_versions(prof._slots.split(args)[0], prof._written)  # it writes them
        sizes = {
            v: Const(x, "int64")
            for v, x in zip(mod.signature.size_vars, cargs[len(mod.signature.params) :])
        }
        status = prof._invoke(cargs, keep)  # warm-up: fails as a call of the module would
        if status != 0:
            raise_status(mod.name, status, prof.signature.index_checks)
        ctypes.memset(slots, 0, ctypes.sizeof(slots))
        total = 0.0
        for _ in range(repeat):
            t0 = time.perf_counter()
            status = prof._invoke(cargs, keep)
            total += time.perf_counter() - t0
            if status != 0:
                raise_status(mod.name, status, prof.signature.index_checks)
        del keep
        threads = _omp_threads()
        peaks = {1: measure_peaks(mod.target, self.compile, 1)}
        if threads > 1:
            peaks[threads] = measure_peaks(mod.target, self.compile, threads)
        parallel = {k for s, k in _stmt_stages(mod.func, timers) if _has_parallel(s)}
        per_call = [slots[k] / repeat if k < n_slots else 0.0 for k in range(len(self.stages))]
        entries = tuple(
            _entry(st, seconds, sizes, peaks[threads if k in parallel else 1])
            for k, (st, seconds) in enumerate(zip(self.stages, per_call))
        )
        return Profile(mod.name, mod.target.name, entries, total / repeat, tuple(peaks.values()))


def _stmt_stages(func, timers: dict):
    return [(s, timers[id(s)]) for s in _top_level(func.body)]


def _has_parallel(s) -> bool:
    return any(isinstance(x, For) and x.kind == "parallel" for x in walk_stmts(s))


def _entry(st: RootStage, seconds: float, sizes: dict, peak: Peaks) -> StageProfile:
    flops = float(sum(w.ops * _points(w.axes, sizes) for w in st.work))
    nbytes = float(_nbytes(st.reads, sizes) + _nbytes(st.writes, sizes))
    gflops = flops / seconds / 1e9 if seconds > 0 else 0.0
    gbps = nbytes / seconds / 1e9 if seconds > 0 else 0.0
    intensity = flops / nbytes if nbytes > 0 else 0.0
    roof = peak.roof(st.dtype)
    compute = intensity * peak.gbps >= roof
    fraction = gflops / roof if compute else gbps / peak.gbps
    own = st.dtype in dict(peak.dot) or st.dtype in FMA_SHARE  # a roof of its dtype's
    bound = (st.dtype if own else "compute") if compute else "memory"
    return StageProfile(
        st.name, seconds, flops, nbytes, gflops, gbps, intensity, bound, fraction, peak.threads,
    )  # fmt: skip
