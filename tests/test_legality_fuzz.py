"""The isl legality checker against a brute-force dependence check in plain Python.

For a few recurrences (update definitions) with small constant sizes, every
instance of the update is enumerated in its original (sequential) order; the
elements of the updated tensor each instance writes and reads are computed
from Python lambdas written next to the pypto definition, and every
dependence pair (same element, at least one write, source first) is listed.

For a stage state (loop relations + leaf order) the scheduled time of every
instance is computed here, in Python, from the relations:

    off = root - dom_min
    split(f):  outer = off // f, inner = off % f      (nparts=p: f = ceil(ext/p),
               outer extent ceil(ext/f): no more parts than cover the parent)
    fuse:      fused = outer * ext(inner) + inner
    skew(k):   skewed = inner + k * outer

and the time vector is the tuple of leaf values in leaf order. An order is
legal iff every dependence pair runs source-first lexicographically; a loop
at position p may be parallel/vectorized iff no pair agrees on the first p
time components and differs at p.

Hypothesis draws sequences of split / reorder / skew / fuse and finally
parallel / vectorize on the update stage. Each checked primitive must be
refused (pt.ScheduleError) exactly when the brute force says illegal, and a
refusal must leave the stage unchanged. Every final schedule is built and
its output compared bitwise with a sequential numpy reference (data are small
integers, multipliers are powers of two, so results are exact even with FMA
contraction).

PYPTO_FUZZ_EXAMPLES sets the number of examples per problem (default 25).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pytest
from fuzzing import FUZZ
from hypothesis import event, given
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

import pypto as pt

BOUND_CHECKS = True  # every kernel checks its accesses at run time (conftest.py)


MAX_LEAVES = 5  # splits stop adding loops beyond this many

F32 = np.float32


# --------------------------------------------------------------------------- problems


@dataclass
class Problem:
    """A recurrence: the pypto definition plus the same thing in plain Python."""

    name: str
    inputs: list  # pypto placeholders
    T: object  # the updated tensor
    root_names: list  # update loop names, outermost first
    doms: list  # [(lo, hi)] per update root, hi exclusive
    write: object  # lambda *roots -> index tuple written
    reads: list  # lambdas *roots -> index tuple read (of T only)
    shapes: list  # input shapes
    reference: object  # (numpy inputs) -> expected T
    _pairs: list = field(default=None, repr=False)
    _instances: list = field(default=None, repr=False)

    @property
    def instances(self) -> list:
        """Every instance (tuple of root values) in the original sequential order."""
        if self._instances is None:
            self._instances = list(itertools.product(*(range(lo, hi) for lo, hi in self.doms)))
        return self._instances

    @property
    def pairs(self) -> list:
        """Dependence pairs (a, b) of instance positions, a before b in original order."""
        if self._pairs is None:
            self._pairs = brute_dependences(self)
        return self._pairs

    def fresh(self):
        s = pt.create_schedule(self.T)
        u = s[self.T].update(0)
        assert [iv.name for iv in u.op.axis] == self.root_names
        return s, u

    def data(self, seed=0):
        rng = np.random.default_rng(seed)
        return [rng.integers(-4, 5, shp).astype("float32") for shp in self.shapes]

    def run(self, s, arrays):
        mod = pt.build(s, [*self.inputs, self.T], name=f"fz_{self.name}")
        out = np.full(tuple(int(d.value) for d in self.T.shape), np.nan, dtype="float32")
        mod(*arrays, out)
        return out


def brute_dependences(p: Problem) -> list:
    touches = {}  # element -> [(instance position, is_write)]
    for k, inst in enumerate(p.instances):
        acc = {(tuple(p.write(*inst)), True)}
        acc |= {(tuple(r(*inst)), False) for r in p.reads}
        for elem, w in acc:
            touches.setdefault(elem, []).append((k, w))
    pairs = set()
    for lst in touches.values():
        for (a, wa), (b, wb) in itertools.combinations(lst, 2):
            if a != b and (wa or wb):
                pairs.add((min(a, b), max(a, b)))
    return sorted(pairs)


def prefix_sum(n=8):
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.compute((n,), lambda i: X[i], name="Y")
    r = pt.reduce_axis((1, n), name="r")
    Y[r] = Y[r - 1] + X[r]

    def ref(x):
        y = x.copy()
        for i in range(1, n):
            y[i] = F32(y[i - 1] + x[i])
        return y

    return Problem(
        "prefix", [X], Y, ["r"], [(1, n)], lambda r: (r,), [lambda r: (r - 1,)], [(n,)], ref
    )


def iir(n=9):
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.compute((n,), lambda i: X[i], name="Y")
    r = pt.reduce_axis((1, n), name="r")
    Y[r] = Y[r - 1] * 0.5 + X[r]

    def ref(x):
        y = x.copy()
        for i in range(1, n):
            y[i] = F32(F32(y[i - 1] * F32(0.5)) + x[i])
        return y

    return Problem(
        "iir", [X], Y, ["r"], [(1, n)], lambda r: (r,), [lambda r: (r - 1,)], [(n,)], ref
    )


def dp2d(n=7, m=6):
    S = pt.placeholder((n, m), "float32", name="S")
    T = pt.compute((n, m), lambda i, j: S[i, j], name="T")
    ri, rj = pt.reduce_axis((1, n), name="ri"), pt.reduce_axis((1, m), name="rj")
    T[ri, rj] = pt.max(T[ri - 1, rj], T[ri, rj - 1]) + S[ri, rj]

    def ref(s):
        t = s.copy()
        for i in range(1, n):
            for j in range(1, m):
                t[i, j] = F32(max(t[i - 1, j], t[i, j - 1]) + s[i, j])
        return t

    return Problem(
        "dp2d",
        [S],
        T,
        ["ri", "rj"],
        [(1, n), (1, m)],
        lambda i, j: (i, j),
        [lambda i, j: (i - 1, j), lambda i, j: (i, j - 1)],
        [(n, m)],
        ref,
    )


def antidiag(n=7, m=7, shift=1):
    """T[ri, rj] = T[ri - 1, rj + shift] + S[ri, rj]: distance (1, -shift)."""
    S = pt.placeholder((n, m), "float32", name="S")
    T = pt.compute((n, m), lambda i, j: S[i, j], name="T")
    ri, rj = pt.reduce_axis((1, n), name="ri"), pt.reduce_axis((0, m - shift), name="rj")
    T[ri, rj] = T[ri - 1, rj + shift] + S[ri, rj]

    def ref(s):
        t = s.copy()
        for i in range(1, n):
            for j in range(0, m - shift):
                t[i, j] = F32(t[i - 1, j + shift] + s[i, j])
        return t

    return Problem(
        f"antidiag{shift}",
        [S],
        T,
        ["ri", "rj"],
        [(1, n), (0, m - shift)],
        lambda i, j: (i, j),
        [lambda i, j: (i - 1, j + shift)],
        [(n, m)],
        ref,
    )


def gauss_seidel(n=6, steps=2):
    U0 = pt.placeholder((n, n), "float32", name="U0")
    U = pt.compute((n, n), lambda i, j: U0[i, j], name="U")
    t, i, j = pt.rdom([(0, steps), (1, n - 1), (1, n - 1)], names="t i j")
    U[i, j] = (U[i - 1, j] + U[i + 1, j] + U[i, j - 1] + U[i, j + 1]) * 0.25

    def ref(u0):
        u = u0.copy()
        for _ in range(steps):
            for a in range(1, n - 1):
                for b in range(1, n - 1):
                    acc = F32(F32(F32(u[a - 1, b] + u[a + 1, b]) + u[a, b - 1]) + u[a, b + 1])
                    u[a, b] = F32(acc * F32(0.25))
        return u

    return Problem(
        "gauss_seidel",
        [U0],
        U,
        ["t", "i", "j"],
        [(0, steps), (1, n - 1), (1, n - 1)],
        lambda t, i, j: (i, j),
        [
            lambda t, i, j: (i - 1, j),
            lambda t, i, j: (i + 1, j),
            lambda t, i, j: (i, j - 1),
            lambda t, i, j: (i, j + 1),
        ],
        [(n, n)],
        ref,
    )


PROBLEMS = {
    p.name: p
    for p in [prefix_sum(), iir(), dp2d(), antidiag(shift=1), antidiag(shift=2), gauss_seidel()]
}


# --------------------------------------------------------------------------- brute-force schedule


class Shadow:
    """Our own copy of a stage's loop structure, with Python integer extents."""

    def __init__(self, roots, doms):
        self.roots = list(roots)
        self.lo = {iv: lo for iv, (lo, _) in zip(roots, doms)}
        self.ext = {iv: hi - lo for iv, (lo, hi) in zip(roots, doms)}
        self.leaves = list(roots)
        # ("split", parent, outer, inner, f) | ("fuse", o, i, f) | ("skew", o, i, s, k)
        self.rels = []

    def copy(self) -> Shadow:
        c = Shadow.__new__(Shadow)
        c.roots, c.lo, c.ext = self.roots, self.lo, dict(self.ext)
        c.leaves, c.rels = list(self.leaves), list(self.rels)
        return c

    def split(self, parent, outer, inner, factor=None, nparts=None):
        e = self.ext[parent]
        if factor is not None:
            f, eo = factor, -(-e // factor)
        else:
            f = -(-e // nparts)
            eo = -(-e // f)  # as pypto: 4 parts of 7 by 5 (no part left empty)
        self.ext[outer], self.ext[inner] = eo, f
        self.rels.append(("split", parent, outer, inner, f))
        k = self.leaves.index(parent)
        self.leaves[k : k + 1] = [outer, inner]

    def fuse(self, outer, inner, fused):
        self.ext[fused] = self.ext[outer] * self.ext[inner]
        self.rels.append(("fuse", outer, inner, fused))
        k = self.leaves.index(outer)
        assert self.leaves[k + 1] is inner
        self.leaves[k : k + 2] = [fused]

    def skew(self, outer, inner, skewed, k):
        self.ext[skewed] = self.ext[inner] + k * (self.ext[outer] - 1)
        self.rels.append(("skew", outer, inner, skewed, k))
        self.leaves[self.leaves.index(inner)] = skewed

    def reorder(self, ivars):
        pos = sorted(self.leaves.index(iv) for iv in ivars)
        for p, iv in zip(pos, ivars):
            self.leaves[p] = iv

    def time(self, inst) -> tuple:
        v = {iv: x - self.lo[iv] for iv, x in zip(self.roots, inst)}
        for r in self.rels:
            if r[0] == "split":
                _, p, o, i, f = r
                v[o], v[i] = v[p] // f, v[p] % f
            elif r[0] == "fuse":
                _, o, i, f = r
                v[f] = v[o] * self.ext[i] + v[i]
            else:
                _, o, i, s, k = r
                v[s] = v[i] + k * v[o]
        return tuple(v[iv] for iv in self.leaves)

    def times(self, p: Problem) -> list:
        return [self.time(inst) for inst in p.instances]


def order_violation(p: Problem, sh: Shadow):
    """A dependence pair the order of ``sh`` does not run source-first, or None."""
    t = sh.times(p)
    assert len(set(t)) == len(t), "brute force: two instances at the same time"
    for a, b in p.pairs:
        if not t[a] < t[b]:
            return p.instances[a], p.instances[b]
    return None


def carried_violation(p: Problem, sh: Shadow, leaf):
    """A dependence pair carried by ``leaf`` (equal before it, different at it), or None."""
    t = sh.times(p)
    k = sh.leaves.index(leaf)
    for a, b in p.pairs:
        if t[a][:k] == t[b][:k] and t[a][k] != t[b][k]:
            return p.instances[a], p.instances[b]
    return None


def snapshot(s, u):
    return (list(u.leaf_iter_vars), list(u.relations), dict(u.attrs), len(s.steps))


def same_state(a, b) -> bool:
    return (
        len(a[0]) == len(b[0])
        and all(x is y for x, y in zip(a[0], b[0]))
        and len(a[1]) == len(b[1])
        and all(x is y for x, y in zip(a[1], b[1]))
        and a[2] == b[2]
        and a[3] == b[3]
    )


def _event(text: str):
    if currently_in_test_context():  # statistics for --hypothesis-show-statistics
        event(text)


def names(ivs) -> str:
    return ", ".join(iv.name for iv in ivs)


class Driver:
    """Applies primitives to pypto and to the shadow, checking verdicts as it goes."""

    def __init__(self, p: Problem):
        self.p = p
        self.s, self.u = p.fresh()
        self.sh = Shadow(self.u.op.axis, p.doms)
        self.log = []

    def _in_sync(self):
        assert len(self.u.leaf_iter_vars) == len(self.sh.leaves)
        assert all(a is b for a, b in zip(self.u.leaf_iter_vars, self.sh.leaves)), (
            names(self.u.leaf_iter_vars),
            names(self.sh.leaves),
        )

    def _checked(self, call: str, expect_bad, fn):
        """Run ``fn``; it must raise ScheduleError iff ``expect_bad`` is not None."""
        before = snapshot(self.s, self.u)
        try:
            out = fn()
        except pt.ScheduleError as e:
            self.log.append(f"{call} -> refused")
            _event(f"{call.split('(')[0]} refused")
            assert expect_bad is not None, (
                f"{self.p.name}: {call} refused, but brute force finds it legal; "
                f"schedule so far: {self.log}\nerror: {e}"
            )
            assert same_state(before, snapshot(self.s, self.u)), f"{call}: refusal changed state"
            return False, None
        self.log.append(f"{call} -> ok")
        _event(f"{call.split('(')[0]} accepted")
        assert expect_bad is None, (
            f"{self.p.name}: {call} accepted, but brute force finds dependence "
            f"{expect_bad[0]} -> {expect_bad[1]} violated; schedule so far: {self.log}"
        )
        return True, out

    def split(self, iv, factor=None, nparts=None):
        o, i = self.u.split(iv, factor=factor, nparts=nparts)
        self.sh.split(iv, o, i, factor, nparts)
        self.log.append(f"split({iv.name}, factor={factor}, nparts={nparts})")
        self._in_sync()
        return o, i

    def fuse(self, a, b):
        f = self.u.fuse(a, b)
        self.sh.fuse(a, b, f)
        self.log.append(f"fuse({a.name}, {b.name})")
        self._in_sync()
        return f

    def reorder(self, *ivs):
        new = self.sh.copy()
        new.reorder(ivs)
        ok, _ = self._checked(
            f"reorder({names(ivs)})", order_violation(self.p, new), lambda: self.u.reorder(*ivs)
        )
        if ok:
            self.sh = new
        self._in_sync()
        return ok

    def skew(self, outer, inner, factor=1):
        new = self.sh.copy()
        token = object()
        new.skew(outer, inner, token, factor)
        ok, out = self._checked(
            f"skew({outer.name}, {inner.name}, factor={factor})",
            order_violation(self.p, new),
            lambda: self.u.skew(outer, inner, factor=factor),
        )
        if ok:
            o, skewed = out
            assert o is outer
            self.sh.skew(outer, inner, skewed, factor)
        self._in_sync()
        return ok

    def annotate(self, kind: str, iv):
        # the order is legal at this point, so only the carried check decides
        assert order_violation(self.p, self.sh) is None
        ok, _ = self._checked(
            f"{kind}({iv.name})",
            carried_violation(self.p, self.sh, iv),
            lambda: getattr(self.u, kind)(iv),
        )
        self._in_sync()
        return ok

    def check_build(self):
        arrays = self.p.data()
        out = self.p.run(self.s, arrays)
        ref = self.p.reference(*arrays)
        assert np.array_equal(out, ref), (
            f"{self.p.name}: wrong result for schedule {self.log}\n{out}\n!=\n{ref}"
        )


# --------------------------------------------------------------------------- the property test


@pytest.mark.parametrize("name", list(PROBLEMS))
@FUZZ
@given(data=st.data())
def test_checker_agrees_with_brute_force(name, data):
    p = PROBLEMS[name]
    d = Driver(p)
    n_steps = data.draw(st.integers(0, 6), label="steps")
    for _ in range(n_steps):
        leaves = list(d.u.leaf_iter_vars)
        kind = data.draw(st.sampled_from(["split", "reorder", "reorder", "skew", "skew", "fuse"]))
        if kind == "split" and len(leaves) < MAX_LEAVES:
            iv = data.draw(st.sampled_from(leaves), label="split.loop")
            amount = data.draw(st.integers(1, 5), label="split.amount")
            if data.draw(st.booleans(), label="split.nparts"):
                d.split(iv, nparts=amount)
            else:
                d.split(iv, factor=amount)
        elif kind == "reorder" and len(leaves) >= 2:
            pos = sorted(
                data.draw(
                    st.sets(st.integers(0, len(leaves) - 1), min_size=2), label="reorder.positions"
                )
            )
            perm = data.draw(st.permutations(pos), label="reorder.perm")
            d.reorder(*[leaves[k] for k in perm])
        elif kind == "skew" and len(leaves) >= 2:
            a, b = sorted(
                data.draw(
                    st.lists(st.integers(0, len(leaves) - 1), min_size=2, max_size=2, unique=True),
                    label="skew.loops",
                )
            )
            d.skew(leaves[a], leaves[b], factor=data.draw(st.integers(1, 2), label="skew.factor"))
        elif kind == "fuse" and len(leaves) >= 2:
            k = data.draw(st.integers(0, len(leaves) - 2), label="fuse.pos")
            d.fuse(leaves[k], leaves[k + 1])
    leaves = list(d.u.leaf_iter_vars)
    n_ann = data.draw(st.integers(0, min(2, len(leaves))), label="n_annotations")
    chosen = data.draw(st.permutations(leaves), label="annotated")[:n_ann]
    for iv in chosen:
        d.annotate(data.draw(st.sampled_from(["parallel", "vectorize"]), label="kind"), iv)
    d.check_build()


# ---------------------------------------------------------------- dependences and times vs isl


def _isl_model(s, u):
    from pypto.legality import model_of

    return model_of(s, u)


def _points(m) -> set:
    """The integer points of an isl map (constant sizes: no parameters)."""
    import islpy as isl

    w = m.wrap()
    n = w.dim(isl.dim_type.set)
    out = set()
    w.foreach_point(
        lambda q: out.add(
            tuple(q.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(n))
        )
    )
    return out


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_isl_dependences_match_brute_force(name):
    """The dependences isl finds inside the update are exactly the enumerated pairs."""
    p = PROBLEMS[name]
    s, u = p.fresh()
    m = _isl_model(s, u)
    k = len(p.doms)
    found = set()
    for dep in m.deps:
        if dep.src.stage is u and dep.dst.stage is u:
            found |= {(x[:k], x[k:]) for x in _points(dep.rel)}
    expected = {(p.instances[a], p.instances[b]) for a, b in p.pairs}
    assert found == expected


@pytest.mark.parametrize("name", ["dp2d", "gauss_seidel"])
def test_isl_scheduled_time_matches_brute_force(name):
    """After split(nparts) + skew + fuse + reorder, isl's time vectors equal ours."""
    p = PROBLEMS[name]
    d = Driver(p)
    leaves = d.u.leaf_iter_vars
    o, i = d.split(leaves[-1], nparts=3)
    d.skew(leaves[0], o, factor=2)
    lv = list(d.u.leaf_iter_vars)
    d.fuse(lv[-2], lv[-1])
    d.reorder(*reversed(d.u.leaf_iter_vars[-2:]))
    m = _isl_model(d.s, d.u)
    stmt = next(x for x in m.statements if x.stage is d.u)
    got = {x[: len(p.doms)]: x[len(p.doms) + 1 :] for x in _points(stmt.scheduled)}
    want = {inst: d.sh.time(inst) for inst in p.instances}
    assert {k: v[: len(d.sh.leaves)] for k, v in got.items()} == want


# --------------------------------------------------------------------------- deterministic cases


def test_dp_wavefront_parallel_inner():
    p = PROBLEMS["dp2d"]
    d = Driver(p)
    ri, rj = d.u.op.axis
    with pytest.raises(pt.ScheduleError, match=r"parallel\(rj\).*would race"):
        d.u.parallel(rj)
    assert d.skew(ri, rj, factor=1)
    rjs = d.u.leaf_iter_vars[1]
    assert d.reorder(rjs, ri)
    with pytest.raises(pt.ScheduleError, match="would race"):
        d.u.parallel(rjs)  # the wavefront loop carries both dependences
    assert d.annotate("parallel", ri)  # a wavefront's points are independent
    d.check_build()


def test_dp_interchange_is_legal_but_not_parallel():
    p = PROBLEMS["dp2d"]
    d = Driver(p)
    ri, rj = d.u.op.axis
    assert d.reorder(rj, ri)  # distances (1,0),(0,1) stay positive
    assert not d.annotate("parallel", ri)
    assert not d.annotate("vectorize", ri)
    d.check_build()


def test_antidiagonal_interchange_refused():
    p = PROBLEMS["antidiag1"]
    d = Driver(p)
    ri, rj = d.u.op.axis
    with pytest.raises(
        pt.ScheduleError, match=r"reorder\(rj, ri\) on 'T.update\(0\)' would break a dependence"
    ):
        d.u.reorder(rj, ri)
    assert d.u.leaf_iter_vars == [ri, rj]
    # rj may be parallel: the dependence (1, -1) is carried by ri
    assert d.annotate("parallel", rj)
    d.check_build()


def test_antidiagonal_skew_then_interchange():
    p = PROBLEMS["antidiag1"]
    d = Driver(p)
    ri, rj = d.u.op.axis
    assert d.skew(ri, rj, factor=1)  # distance (1, 0)
    rjs = d.u.leaf_iter_vars[1]
    assert d.reorder(rjs, ri)  # (0, 1): legal, but ri carries it
    assert not d.annotate("parallel", ri)
    d.check_build()


def test_antidiagonal_skew2_then_parallel_inner():
    p = PROBLEMS["antidiag1"]
    d = Driver(p)
    ri, rj = d.u.op.axis
    assert d.skew(ri, rj, factor=2)  # distance (1, 1)
    rjs = d.u.leaf_iter_vars[1]
    assert d.reorder(rjs, ri)  # (1, 1): carried by the outer loop
    assert d.annotate("parallel", ri)
    d.check_build()


def test_antidiagonal_shift2_needs_skew2():
    p = PROBLEMS["antidiag2"]
    d = Driver(p)
    ri, rj = d.u.op.axis
    assert d.skew(ri, rj, factor=1)  # (1, -2) -> (1, -1)
    rjs = d.u.leaf_iter_vars[1]
    assert not d.reorder(rjs, ri)
    assert d.skew(ri, rjs, factor=1)  # -> (1, 0)
    assert d.reorder(d.u.leaf_iter_vars[1], ri)
    d.check_build()


def test_prefix_sum_refusals():
    p = PROBLEMS["prefix"]
    d = Driver(p)
    (r,) = d.u.op.axis
    with pytest.raises(pt.ScheduleError, match=r"parallel\(r\) on 'Y.update\(0\)' would race"):
        d.u.parallel(r)
    with pytest.raises(pt.ScheduleError, match=r"vectorize\(r\)"):
        d.u.vectorize(r)
    assert d.u.attrs == {}
    ro, rin = d.split(r, factor=3)
    with pytest.raises(pt.ScheduleError, match="would break a dependence"):
        d.u.reorder(rin, ro)
    assert d.u.leaf_iter_vars == [ro, rin]
    d.check_build()


def test_nparts_split_leaves_no_empty_part():
    """7 iterations in 5 parts are 4 parts of 2 (no part left empty); split again in 4
    parts, the inner loop has one iteration, so moving it outward changes no order."""
    d = Driver(PROBLEMS["prefix"])
    (r,) = d.u.op.axis
    ro, _ = d.split(r, nparts=5)
    roo, roi = d.split(ro, nparts=4)
    assert d.sh.ext[ro] == 4 and d.sh.ext[roi] == 1
    assert d.reorder(roi, roo)
    d.check_build()


def test_gauss_seidel_time_interchange_refused():
    p = PROBLEMS["gauss_seidel"]
    d = Driver(p)
    t, i, j = d.u.op.axis
    assert not d.reorder(i, t)  # (t, i, j) -> (t+1, i-1, j) would be reversed
    assert not d.reorder(j, t)
    assert d.reorder(j, i)  # inside one sweep the stencil is symmetric in i and j
    assert not d.annotate("parallel", t)
    assert not d.annotate("parallel", i)
    assert not d.annotate("parallel", j)
    d.check_build()


def test_gauss_seidel_time_skewing():
    """Sweep-to-sweep distances (1, -1, 0), (1, 0, -1): skewing i by t makes i' and t
    interchangeable (j stays innermost)."""
    p = PROBLEMS["gauss_seidel"]
    d = Driver(p)
    t, i, j = d.u.op.axis
    assert d.skew(t, i, factor=1)
    ip = d.u.leaf_iter_vars[1]
    assert d.reorder(ip, t)
    assert not d.annotate("parallel", t)
    jo, ji = d.split(j, factor=2)
    assert not d.reorder(ji, t)
    d.check_build()


def test_reorder_after_parallel_rechecks_annotations():
    p = PROBLEMS["dp2d"]
    s, u = p.fresh()
    ri, rj = u.op.axis
    _, rjs = u.skew(ri, rj)
    u.reorder(rjs, ri)
    u.parallel(ri)  # legal: inner loop of a wavefront
    with pytest.raises(
        pt.ScheduleError,
        match=r"reorder\(ri, rj.skew\), with parallel\(ri\), on 'T.update\(0\)' "
        r"would race",
    ):
        u.reorder(ri, rjs)  # now ri carries T[ri-1, rj]: must be refused
