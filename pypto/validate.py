"""Numerical validation: a kernel's outputs against a reference, element by element.

    report = pt.validate(mod, lambda a, b: a @ b, [a, b])
    print(report)            # max errors, ULP histogram, mismatches, NaN/Inf disagreements
    assert report.ok         # against dtype-aware tolerances (rtol=, atol= override)

``compare`` is the same check on arrays already computed (the tuner's runner uses it).
An element matches when both values are finite and ``|got - want| <= atol + rtol * |want|``
(numpy's ``allclose`` rule), or when both are the same non-finite value (NaN and NaN,
+Inf and +Inf). Integer outputs must match exactly by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dtypes

# output dtype -> default (rtol, atol); integers and bool are exact. The absolute parts
# leave room for reductions, whose error grows with their length where terms cancel.
TOLERANCES = {
    "float64": (1e-10, 1e-10),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-3),  # two of its 8-bit-mantissa steps
}
EXACT = (0.0, 0.0)

# the ULP histogram's buckets: (label, lowest distance, highest distance)
ULP_BUCKETS = (
    ("0", 0, 0),
    ("1", 1, 1),
    ("2-4", 2, 4),
    ("5-16", 5, 16),
    ("17-256", 17, 256),
    (">256", 257, None),
)
MAX_FIRST = 10  # mismatching indices kept per output


def tolerances(dtype: str) -> tuple[float, float]:
    """The default ``(rtol, atol)`` for outputs of ``dtype`` (integers: exact)."""
    return TOLERANCES.get(dtypes.check(dtype), EXACT)


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """How one output compares with its reference."""

    name: str
    dtype: str
    size: int
    rtol: float
    atol: float
    max_abs_err: float  # over elements finite in both
    max_rel_err: float  # over elements finite in both with a nonzero reference
    ulp: tuple  # (bucket label, count) per ULP_BUCKETS, elements finite in both
    mismatches: int  # elements outside the tolerance, NaN/Inf disagreements included
    first_mismatches: tuple  # up to MAX_FIRST index tuples, in C order
    nan_mismatches: int  # NaN/Inf in one and not the same value in the other

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """``pt.validate``'s answer: one ``OutputCheck`` per output; the fields below sum or
    take the worst over them (``first_mismatches``: those of the first output with any)."""

    outputs: tuple  # of OutputCheck
    inputs_written: tuple = ()  # names of the inputs the kernel changed (it must not)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs) and not self.inputs_written

    @property
    def max_abs_err(self) -> float:
        return max((o.max_abs_err for o in self.outputs), default=0.0)

    @property
    def max_rel_err(self) -> float:
        return max((o.max_rel_err for o in self.outputs), default=0.0)

    @property
    def ulp(self) -> dict:
        """ULP distance histogram (in each output's dtype): bucket label -> count."""
        return {label: sum(dict(o.ulp)[label] for o in self.outputs) for label, _, _ in ULP_BUCKETS}

    @property
    def mismatches(self) -> int:
        return sum(o.mismatches for o in self.outputs)

    @property
    def first_mismatches(self) -> tuple:
        return next((o.first_mismatches for o in self.outputs if o.mismatches), ())

    @property
    def nan_mismatches(self) -> int:
        return sum(o.nan_mismatches for o in self.outputs)

    def summary(self) -> str:
        """One line: ok, or the worst output's mismatches and first index."""
        if self.inputs_written:
            return f"the kernel wrote its input(s) {', '.join(self.inputs_written)}"
        bad = [o for o in self.outputs if not o.ok]
        if not bad:
            return (
                f"ok (max abs error {self.max_abs_err:.3g}, max rel error {self.max_rel_err:.3g})"
            )
        o = bad[0]
        nan = f", {o.nan_mismatches} NaN/Inf disagreements" if o.nan_mismatches else ""
        return (
            f"output {o.name}: {o.mismatches} of {o.size} elements beyond rtol={o.rtol:g}, "
            f"atol={o.atol:g}{nan} (max abs error {o.max_abs_err:.3g}, first at "
            f"{_index(o.first_mismatches[0])})"
        )

    def __str__(self) -> str:
        head = ["output", "dtype", "max abs", "max rel", *(f"ulp {b}" for b, _, _ in ULP_BUCKETS)]
        head += ["mismatch", "nan/inf", "ok"]
        rows = [
            [o.name, o.dtype, f"{o.max_abs_err:.3g}", f"{o.max_rel_err:.3g}",
             *(str(c) for _, c in o.ulp), str(o.mismatches), str(o.nan_mismatches),
             "yes" if o.ok else "NO"]
            for o in self.outputs
        ]  # fmt: skip
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head, *rows]]
        for o in self.outputs:
            if o.mismatches:
                idx = ", ".join(_index(i) for i in o.first_mismatches)
                lines.append(f"{o.name}: first mismatches at {idx}")
        if self.inputs_written:
            lines.append(f"the kernel wrote its input(s) {', '.join(self.inputs_written)}: NOT ok")
        return "\n".join(lines)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit (NaN payloads and -0.0 included)."""
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _index(idx: tuple) -> str:
    return "(" + ", ".join(str(i) for i in idx) + ")"


def _ordered_bits(a: np.ndarray) -> np.ndarray:
    """Floats as int64 whose differences count ULPs (monotone across zero; -0 == +0)."""
    bits = np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}").astype(np.uint64)
    sign = np.uint64(1) << np.uint64(8 * a.dtype.itemsize - 1)
    magnitude = (bits & (sign - np.uint64(1))).astype(np.int64)
    return np.where(bits & sign, -magnitude, magnitude)


def _ulp_distance(got: np.ndarray, want: np.ndarray, dt: np.dtype) -> np.ndarray:
    """ULP distances in ``dt`` of elements finite in both (flat)."""
    if dt.kind in "iub":  # an integer's ULP is 1; a fractional reference is a part away
        return np.ceil(np.abs(got.astype(np.float64) - np.asarray(want, np.float64)))
    w = want.astype(dt)  # the reference rounded to the output's dtype
    # float64 differences: two int64 far apart would overflow (a few ULPs are still exact)
    return np.abs(_ordered_bits(got.astype(dt)).astype(np.float64) - _ordered_bits(w))


def _integral(w: np.ndarray) -> bool:
    """Whether every value of the float array ``w`` is a finite integer."""
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.isfinite(w) & (np.floor(w) == w)))


def compare_one(got, want, name: str = "output", rtol=None, atol=None) -> OutputCheck:
    """Compare one output array with its reference (any dtype; ``want`` may be wider,
    e.g. float64). ``ValueError`` when the shapes differ."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        raise ValueError(
            f"output {name}: shape {got.shape}, but the reference returned {want.shape}"
        )
    dt_name = "bool" if got.dtype == np.bool_ else np.dtype(got.dtype).name
    d_rtol, d_atol = tolerances(dt_name)
    rtol = d_rtol if rtol is None else float(rtol)
    atol = d_atol if atol is None else float(atol)
    g = got.reshape(-1)
    w = want.reshape(-1)
    exact_int = got.dtype.kind in "iub" and want.dtype.kind in "iub"
    if got.dtype.kind in "iu" and want.dtype.kind == "f" and _integral(w):
        # a float reference of integers (a.astype(np.float64) @ b) is compared exactly:
        # the int64 result 2**53 + 1 is not the float 2**53
        exact_int = True
        if np.all(np.abs(w) < 2.0**63):
            w = w.astype(np.int64)  # exact: integers, in range
        else:
            w = np.array([int(x) for x in w.tolist()], dtype=object)
    if exact_int:  # exact even for int64 values past 2**53, and 64-bit differences
        wide = max(g.dtype.itemsize, w.dtype.itemsize) == 8  # int64 - int64 may overflow
        work = object if wide else np.int64  # (Python's integers: exact at any size)
        diff_i = np.abs(g.astype(work) - w.astype(work))
        both = np.ones(g.shape, bool)
        diff = diff_i.astype(np.float64)
        wf = w.astype(np.float64)
        bad_value = diff > atol + rtol * np.abs(wf)
        bad_value |= (diff_i != 0) & (rtol == 0) & (atol == 0)
        nonfinite = np.zeros(g.shape, bool)
    else:
        gf, wf = g.astype(np.float64), w.astype(np.float64)
        fin_g, fin_w = np.isfinite(gf), np.isfinite(wf)
        both = fin_g & fin_w
        same_special = ~fin_g & ~fin_w & ((np.isnan(gf) & np.isnan(wf)) | (gf == wf))
        if got.dtype.kind == "f" or dt_name == "bfloat16":  # a finite reference whose
            with np.errstate(over="ignore"):  # rounding to the output's dtype overflows
                same_special |= np.isinf(gf) & (gf == w.astype(got.dtype).astype(np.float64))
        nonfinite = ~both & ~same_special
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(both, np.abs(gf - wf), 0.0)
        bad_value = both & (diff > atol + rtol * np.abs(wf))
    bad = bad_value | nonfinite
    nz = both & (wf != 0)
    max_abs = float(diff[both].max()) if both.any() else 0.0
    max_rel = float((diff[nz] / np.abs(wf[nz])).max()) if nz.any() else 0.0
    if exact_int:
        ulps = diff
    else:
        ulps = _ulp_distance(g[both], w[both], got.dtype)
    hist = tuple(
        (label, int(np.count_nonzero((ulps >= lo) & (True if hi is None else ulps <= hi))))
        for label, lo, hi in ULP_BUCKETS
    )
    flat_bad = np.flatnonzero(bad)
    first = tuple(
        tuple(int(i) for i in np.unravel_index(k, got.shape)) for k in flat_bad[:MAX_FIRST]
    )
    return OutputCheck(
        name, dt_name, int(g.size), rtol, atol, max_abs, max_rel, hist,
        int(flat_bad.size), first, int(np.count_nonzero(nonfinite)),
    )  # fmt: skip


def compare(got, expected, names=None, rtol=None, atol=None) -> ValidationReport:
    """Compare output arrays ``got`` with the reference arrays ``expected`` (equal numbers,
    in order; ``names`` label them). ``ValueError`` when counts or shapes differ."""
    got, expected = list(got), list(expected)
    names = list(names) if names is not None else [f"output {i}" for i in range(len(got))]
    if len(got) != len(expected):
        raise ValueError(
            f"the kernel has {len(got)} output(s) ({', '.join(names)}), "
            f"but the reference returned {len(expected)}"
        )
    return ValidationReport(
        tuple(compare_one(g, w, n, rtol, atol) for g, w, n in zip(got, expected, names))
    )


def validate(mod, reference, inputs, rtol=None, atol=None) -> ValidationReport:
    """``pt.validate(mod, reference, inputs)``: run ``mod`` on the input arrays (its outputs
    allocated) and compare every output with ``reference(*inputs)`` (an array or a nested
    list of numbers, or a tuple or list of arrays, one per output). The kernel and the
    reference each get copies of the inputs; a kernel that changes its inputs is not ok
    (``inputs_written``).

    Default tolerances depend on each output's dtype (``pypto.validate.TOLERANCES``;
    integers exact); ``rtol=`` and ``atol=`` override them for every output."""
    for what, v in (("rtol", rtol), ("atol", atol)):
        if v is not None and (isinstance(v, bool) or not np.isfinite(v) or v < 0):
            raise ValueError(f"{what} must be a non-negative finite number, got {v!r}")
    if not callable(reference):
        raise TypeError(
            f"validate: reference is a function of the inputs that returns the expected "
            f"output(s) (lambda a, b: a @ b), got {type(reference).__name__}"
        )
    if isinstance(inputs, np.ndarray) or hasattr(inputs, "__dlpack__"):
        raise TypeError("validate: inputs is a list of the kernel's inputs, got one array; "
                        "pass [x]")  # fmt: skip
    inputs = list(inputs)
    outs = [p.name for p in mod.signature.params if p.written]
    n_in = len(mod.signature.params) - len(outs) + len(mod.signature.scalars)
    if len(inputs) != n_in:
        ins = [p.name for p in mod.signature.params if not p.written]
        ins += [p.name for p in mod.signature.scalars]
        raise TypeError(
            f"validate: {mod.name} takes {n_in} input(s) ({', '.join(ins)}), got {len(inputs)}"
        )

    def array(a) -> bool:  # (a scalar argument, numpy's too, is passed by value)
        return hasattr(a, "shape") and not isinstance(a, np.generic)

    def copies():
        return [np.array(a, copy=True) if array(a) else a for a in inputs]

    given, pristine = copies(), copies()  # the kernel runs on copies: the caller's stay
    got = mod(*given)
    got = list(got) if isinstance(got, tuple) else [got]
    want = reference(*copies())
    if want is None:
        raise TypeError(
            f"validate: the reference returned None; it returns {mod.name}'s output(s) "
            f"({', '.join(outs)}), an array or a tuple of arrays"
        )
    # a tuple, or a list of arrays, has one per output; a list of numbers is one output
    several = isinstance(want, tuple) or (
        isinstance(want, list) and all(hasattr(x, "shape") for x in want)
    )
    want = list(want) if several else [want]
    names = [p.name for p in mod.signature.params if not p.written]  # the arrays, in order
    pairs = [(a, b) for a, b in zip(given, pristine) if array(a)]
    written = tuple(n for n, (a, b) in zip(names, pairs) if not _same(a, b))
    report = compare(got, want, outs, rtol, atol)
    return ValidationReport(report.outputs, written)
