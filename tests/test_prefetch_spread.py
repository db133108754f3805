"""``prefetch(..., spread=loop)``: the next iteration's footprint of the stages computed
at a loop (a GEMM's next panel of B), a few cache lines per iteration of the loops
inside it, each line once."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import pypto as pt

M, N, K = 24, 96, 40  # 6 row tiles of 4, 6 panels of 16 columns, k in 10 steps of 4


def _gemm(n=N, m=M, nr=16):
    """C = A @ B with a 4 x 16 register tile C.local at (jo, io) and B packed per
    16-column panel at jo: the loops jo, io (C's), ko, ki, ic, jc (C.local's)."""
    A = pt.placeholder((m, K), "float32", name="A")
    B = pt.placeholder((K, n), "float32", name="B")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((m, n), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=nr)
    s[C].reorder(jo, io, ii, ji)
    s[C].vectorize(ji)
    s[CL].compute_at(s[C], io)
    ic, jc = s[CL].op.axis
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=4)
    s[CL].reorder(ko, ki, ic, jc)
    BP = s.cache_read(B, "local", [CL])
    s[BP].compute_at(s[C], jo)
    return A, B, C, s, CL, (jo, io, ko)


def _run(mod, n=N):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, n)).astype(np.float32)
    c = np.full((M, n), np.nan, np.float32)
    mod(a, b, c)  # the last panel's prefetches point past B's end: a hint never faults
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_spread_prefetch_of_the_next_panel():
    A, B, C, s, CL, (jo, io, ko) = _gemm()
    s[CL].prefetch(B, jo, 1, level=2, spread=ko)
    mod = pt.build(s, [A, B, C], name="spread")
    _run(mod)
    # B's panel: 40 rows of 16 floats (64 bytes: 2 lines each, unaligned) = 80 lines over
    # 6 x 10 iterations of (io, ko): 2 per iteration, line io * 20 + 2 ko + q
    src = mod.source
    loop = src[src.index("for (int64_t k_outer") :]
    loop = loop[: loop.index("for (int64_t k_inner")]
    assert "for (int64_t pf_q = 0; pf_q < 2; ++pf_q) {" in loop, loop
    assert "const int64_t pf_line = i_outer * 20 + k_outer * 2 + pf_q;" in loop, loop
    assert "if (pf_line < 80) {" in loop, loop
    # line l: row l / 2 of the next panel (16 columns on), its first element or its last
    # (the 64 bytes of a row may start anywhere in a line); l < 80 there, so l / 2 < 40
    want = "(pf_line / 2 * 96 + j_outer * 16 + pt_min_i64(pf_line % 2 * 16, 15) + 16) * 4)"
    want += ", 0, 2);"
    assert want in loop, loop
    assert s.steps[-1] == {"stage": "C.local", "prim": "prefetch", "tensor": "B",
                           "loop": "j.outer", "offset": 1, "level": 2,
                           "spread": "k.outer"}  # fmt: skip


def test_spread_prefetch_replays_and_older_steps_read_the_same():
    A, B, C, s, CL, (jo, io, ko) = _gemm()
    s[CL].prefetch(B, jo, 1, level=2, spread=ko)
    doc = json.dumps(s.to_json())
    again = pt.Schedule.from_json(doc, [A, B, C])
    src = pt.build(s, [A, B, C], name="spread").source
    assert pt.build(again, [A, B, C], name="spread").source == src
    # a prefetch without spread is written as before (no "spread" field)
    A2, B2, C2, s2, CL2, (jo2, io2, ko2) = _gemm()
    s2[CL2].prefetch(A2, ko2, 1)
    assert "spread" not in s2.to_json()["steps"][-1]


def test_spread_prefetch_lines_cover_the_next_panel():
    """The addresses the prefetches compute, evaluated in Python from the generated C,
    are the lines of panel jo + 1 of B, each row's lines all present."""
    A, B, C, s, CL, (jo, io, ko) = _gemm()
    s[CL].prefetch(B, jo, 1, spread=ko)
    src = pt.build(s, [A, B, C], name="spread").source
    line = re.search(r"const int64_t (\w+) = (i_outer \* 20 \+ k_outer \* 2 \+ (\w+));", src)
    addr = re.search(r"\(uintptr_t\)B \+ \(uintptr_t\)\((.*)\) \* 4\), 0, 3\);", src).group(1)
    name, q = line.group(1), line.group(3)
    c_expr = re.sub(r"pt_min_i64\(([^,]+), ([^)]+)\)", r"min(\1, \2)", addr)
    for j_outer in range(6):
        got = set()
        for i_outer in range(6):
            for k_outer in range(10):
                for qv in range(2):
                    env = {"i_outer": i_outer, "k_outer": k_outer, q: qv, "j_outer": j_outer}
                    lv = eval(line.group(2), {}, env)
                    if lv < 80:
                        env[name] = lv
                        got.add(eval(c_expr.replace("/", "//"), {"min": min}, env))
        want = {r * N + (j_outer + 1) * 16 + e for r in range(K) for e in (0, 15)}
        assert got == want, (j_outer, sorted(got - want)[:5], sorted(want - got)[:5])


def test_spread_prefetch_errors():
    A, B, C, s, CL, (jo, io, ko) = _gemm()
    with pytest.raises(pt.ScheduleError, match="not a current loop of this stage"):
        s[CL].prefetch(B, jo, 1, spread=io)  # io is C's, not C.local's
    s[CL].prefetch(B, io, 1, spread=ko)  # B.local is computed at jo, not io
    with pytest.raises(pt.ScheduleError, match="no stage computed at loop i.outer reads it"):
        pt.lower(s, [A, B, C])
    A, B, C, s, CL, (jo, io, ko) = _gemm()
    s[CL].prefetch(B, ko, 1, spread=ko)
    with pytest.raises(pt.ScheduleError, match="loop k.outer is not one of the loops around"):
        pt.lower(s, [A, B, C])
    A, B, C, s, CL, (jo, io, ko) = _gemm()
    s[CL].prefetch(B, jo, 1, spread=ko)
    s[C].split(jo, factor=2)  # C's own loop: its stage cannot see the prefetch that names it
    with pytest.raises(pt.ScheduleError, match=r"loop j.outer is not .* \(split or fused after"):
        pt.lower(s, [A, B, C])
    A, B, C, s, CL, (jo, io, ko) = _gemm()
    s[CL].prefetch(B, jo, 1, spread=ko)
    with pytest.raises(pt.ScheduleError, match="carries a prefetch; split before prefetching"):
        s[CL].split(ko, factor=2)
    with pytest.raises(pt.ScheduleError, match="offset must be a nonzero int"):
        s[CL].prefetch(B, jo, 0, spread=s[CL].leaf_iter_vars[2])
    # panels of 1040 floats: a row's run spans more than the 4 KiB of one request
    A, B, C, s, CL, (jo, io, ko) = _gemm(n=2080, nr=1040)
    s[CL].prefetch(B, jo, 1, spread=ko)
    with pytest.raises(pt.ScheduleError, match="a run of 1040 elements spans more than 4096 B"):
        pt.lower(s, [A, B, C])
    # a symbolic number of row tiles: the lines per iteration are unknown
    A, B, C, s, CL, (jo, io, ko) = _gemm(m=pt.var("m"))
    s[CL].prefetch(B, jo, 1, spread=ko)
    with pytest.raises(pt.ScheduleError, match="loop i.outer has no bounded extent"):
        pt.lower(s, [A, B, C])


def test_spread_prefetch_with_a_symbolic_row_length():
    """B's rows n floats apart (n known at run time): the rows' starts are computed."""
    A, B, C, s, CL, (jo, io, ko) = _gemm(n=pt.var("n"))
    s[CL].prefetch(B, jo, 1, level=2, spread=ko)
    mod = pt.build(s, [A, B, C], name="spread_n")
    assert "__builtin_prefetch" in mod.source
    for n in (16, 48, 96):
        _run(mod, n)


@pytest.mark.parametrize(
    "name, args", [("matmul", (24, 96, 40)), ("batch_matmul", (2, 24, 96, 40))]
)
def test_gemm_templates_prefetch_the_next_panel(name, args):
    """``pack_b=2``: B packed per panel and its next panel spread over the tile's k loop
    (matmul's float32 default; batch_matmul's next panel may be the next batch's);
    results as the reference."""
    from autotune.task import Task

    task = Task(name, args)
    default = task.template.space(*task.args, target=task.target).default_config().to_json()
    assert default["pack_b"] == (2 if name == "matmul" else 1)
    s, tensors = task.instantiate({**default, "pack_b": 2, "unroll_k": 2})  # the host's tile
    mod = pt.build(s, tensors)
    assert re.search(r"__builtin_prefetch\(.*\bB\b.*, 0, 2\);", mod.source)
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal([int(d.value) for d in t.shape]).astype(np.float32)
            for t in tensors[:2])  # fmt: skip
    c = np.full([int(d.value) for d in tensors[2].shape], np.nan, np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, np.matmul(a.astype(np.float64), b), rtol=1e-5, atol=1e-4)


def test_spread_prefetch_requests_a_row_once_for_the_stages_that_read_it():
    """Three row statistics computed at the row, each reading X's whole row: the next
    row's lines are requested once (one loop of hints), not once per statistic."""
    rows, cols = 6, 256
    X = pt.placeholder((rows, cols), "float32", name="X")

    def row_sum(name, f):
        k = pt.reduce_axis((0, cols), name=name + "_k")
        return pt.compute((rows,), lambda i: pt.sum(f(X[i, k]), axis=k), name=name)

    stats = [row_sum("a", lambda v: v), row_sum("b", lambda v: v * v), row_sum("c", pt.abs)]
    a, b, c = stats
    Y = pt.compute((rows, cols), lambda i, j: X[i, j] * a[i] + b[i] - c[i], name="Y")
    s = pt.create_schedule(Y.op)
    i, j = Y.op.axis
    for T in stats:
        s[T].compute_at(s[Y], i)
    jo, ji = s[Y].split(j, factor=16)
    s[Y].prefetch(X, i, 1, level=2, spread=jo)
    mod = pt.build(s, [X, Y])
    assert mod.source.count("__builtin_prefetch") == 1, mod.source
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    y = np.full_like(x, np.nan)
    mod(x, y)
    x64 = x.astype(np.float64)
    ref = x64 * x64.sum(1, keepdims=True) + (x64 * x64).sum(1, keepdims=True)
    ref -= np.abs(x64).sum(1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-2)
