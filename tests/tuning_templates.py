"""Templates for the tuning tests (importable by the measurement processes)."""

import multiprocessing as mp
import sys
import time

import pypto as pt
from autotune import template


def _mm(M, N, K):
    A = pt.placeholder((M, K), "float32", name="A")
    B = pt.placeholder((K, N), "float32", name="B")
    k = pt.reduce_axis((0, K), name="k")
    C = pt.compute((M, N), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


@template("toy_matmul", reference=lambda a, b: a @ b)
def toy_matmul(cfg, M, N, K):
    """A small tunable matmul: two tile sizes and an unroll choice."""
    A, B, C, k = _mm(M, N, K)
    s = pt.create_schedule(C.op)
    cfg.define_split("tile_i", M, num_outputs=2, policy="power2", max_factor=8, default=[-1, 4])
    cfg.define_split("tile_j", N, num_outputs=2, policy="power2", max_factor=16, default=[-1, 8])
    cfg.define_knob("unroll", [0, 1], default=1)
    io, ii = cfg["tile_i"].apply(s, C, C.op.axis[0])
    jo, ji = cfg["tile_j"].apply(s, C, C.op.axis[1])
    s[C].reorder(io, jo, k, ii, ji)
    s[C].vectorize(ji)
    if cfg["unroll"].val:
        s[C].unroll(ii)
    return s, [A, B, C]


@template("toy_slow_matmul", reference=lambda a, b: a @ b)
def toy_slow_matmul(cfg, M, N, K):
    """toy_matmul whose every build takes a quarter second: a run lasts long enough to kill."""
    time.sleep(0.25)
    return toy_matmul.func(cfg, M, N, K)


# kernels that misbehave when they run (an extern's C function): the runner must survive
_CRASH = """void crash(const float* A, const float* B, float* C) {
  volatile float* nowhere = 0;
  C[0] = *nowhere + A[0] + B[0];  /* SIGSEGV */
}"""
_SPIN = """void spin(const float* A, const float* B, float* C) {
  for (volatile long i = 0;; ++i) C[0] = A[0] + B[0];  /* never returns */
}"""


@template("misbehaving", reference=lambda a, b: a @ b)
def misbehaving(cfg, M, N, K):
    """Candidates that segfault, hang, compute wrong values, are illegal or that the
    template itself fails on, and good ones."""
    A, B, C, k = _mm(M, N, K)
    cfg.define_knob(
        "mode",
        ["ok", "segfault", "hang", "wrong", "illegal", "ok_tiled", "assert", "exit"],
        default="ok",
    )
    mode = cfg["mode"].val
    assert mode != "assert", "the template's own check fails"
    if mode == "exit":
        sys.exit(3)  # the template's own way out: the candidate's error all the same
    if mode in ("segfault", "hang"):
        func, src = ("crash", _CRASH) if mode == "segfault" else ("spin", _SPIN)
        X = pt.extern((M, N), [A, B], func, src, name="C")
        return pt.create_schedule(X.op), [A, B, X]
    if mode == "wrong":
        D = pt.compute((M, N), lambda i, j: C[i, j] * 1.5, name="D")
        s = pt.create_schedule(D.op)
        return s, [A, B, D]
    s = pt.create_schedule(C.op)
    if mode == "illegal":
        s[C].parallel(k)  # refused: a reduction loop
    if mode == "ok_tiled":
        io, ii = s[C].split(C.op.axis[1], factor=8)
        s[C].vectorize(ii)
    return s, [A, B, C]


@template("slow_builder", reference=lambda a: a * 2)
def slow_builder(cfg, N):
    """One config whose Python never finishes in a build worker (a template stuck in a
    loop of its own): the build's time limit must cover it."""
    cfg.define_knob("stuck", [0, 1], default=0)
    if cfg["stuck"].val and mp.parent_process() is not None:
        time.sleep(3600)
    A = pt.placeholder((N,), "float32", name="A")
    C = pt.compute((N,), lambda i: A[i] * 2, name="C")
    return pt.create_schedule(C.op), [A, C]


_SPIN1 = """void spin1(const float* A, float* C) {
  for (volatile long i = 0;; ++i) C[0] = A[0];  /* never returns */
}"""


@template("slow_python", reference=lambda a: a * 2)
def slow_python(cfg, N):
    """A template whose Python takes 2 s in the measuring processes (a big schedule to
    build), and whose kernel takes microseconds; ``hang`` 1 also makes the kernel spin."""
    cfg.define_knob("hang", [0, 1], default=0)
    if mp.parent_process() is not None:
        time.sleep(2)
    A = pt.placeholder((N,), "float32", name="A")
    if cfg["hang"].val:
        C = pt.extern((N,), [A], "spin1", _SPIN1, name="C")
    else:
        C = pt.compute((N,), lambda i: A[i] * 2, name="C")
    return pt.create_schedule(C.op), [A, C]


_CRASH_SRC = r"""
static void crash4(const float* a, int64_t a0, float* c, int64_t c0) {
  *(volatile float*)0 = a[0];  /* a micro-kernel with a bug */
  c[0] = a[0] * c0;
}
"""


@template("crashing_default")
def crashing_default(cfg, N):
    """No reference, and a default config whose micro-kernel (tensorize) crashes: the
    definition run unscheduled is the reference, the default is recorded as a crash."""
    cfg.define_knob("mode", ["crash", "ok"], default="crash")
    A = pt.placeholder((N,), "float32", name="A")
    C = pt.compute((N,), lambda i: A[i] * 2 + 1, name="C")
    s = pt.create_schedule(C.op)
    _, ci = s[C].split(C.op.axis[0], factor=4)
    if cfg["mode"].val == "crash":
        a = pt.placeholder((4,), "float32", name="a")
        c = pt.compute((4,), lambda i: a[i] * 2 + 1, name="c")
        s[C].tensorize(ci, pt.decl_tensor_intrin(c.op, "crash4", _CRASH_SRC))
    else:
        s[C].vectorize(ci)
    return s, [A, C]


_ALIGNMENT_SRC = r"""
#include <stdint.h>
void probe(const float* a, float* c) {
  /* the copy, plus how far each buffer starts from a cache line */
  float off = (float)((uintptr_t)a % 64 + (uintptr_t)c % 64);
  for (int i = 0; i < 256; ++i) c[i] = a[i] + off;
}
"""


@template("alignment_probe", reference=lambda a: a)
def alignment_probe(cfg):
    """A copy that is right only when its input and output start on cache lines."""
    cfg.define_knob("variant", [0], default=0)
    A = pt.placeholder((256,), "float32", name="A")
    C = pt.extern((256,), [A], "probe", _ALIGNMENT_SRC, name="C")
    return pt.create_schedule(C.op), [A, C]


_OVERRUN_SRC = r"""
void overrun_%s(const float* a, float* c) {
  /* the copy, then %s */
  for (int i = 0; i < 256; ++i) c[i] = a[i];
  %s
}
"""
_OVERRUNS = {
    "none": "nothing more",
    "past_end": "16 floats past c's end",
    "before_start": "one float before c's start",
    "past_input": "one float past a's end",
}
_OVERRUN_C = {
    "none": "",
    "past_end": "for (int i = 256; i < 272; ++i) c[i] = 7.0f;",
    "before_start": "c[-1] = 7.0f;",
    "past_input": "((float*)a)[256] = 7.0f;",
}


@template("overrunning", reference=lambda a: a)
def overrunning(cfg):
    """A right copy whose hand-written C also writes outside its arguments (or not)."""
    cfg.define_knob("mode", list(_OVERRUNS), default="none")
    m = cfg["mode"].val
    A = pt.placeholder((256,), "float32", name="A")
    src = _OVERRUN_SRC % (m, _OVERRUNS[m], _OVERRUN_C[m])
    C = pt.extern((256,), [A], f"overrun_{m}", src, name="C")
    return pt.create_schedule(C.op), [A, C]


@template("dup_split", reference=lambda x: x * 2)
def dup_split(cfg, n):
    """Split candidates that repeat ([-1, lanes] where lanes is 8): one config each."""
    cfg.define_split("t", n, policy="candidate", candidate=[[-1, 8], [-1, 8], [-1, 16]])
    cfg.define_knob("k", list(range(4)))
    X = pt.placeholder((n,), "float32", name="X")
    Y = pt.compute((n,), lambda i: X[i] * pt.const(2.0, "float32"), name="Y")
    s = pt.create_schedule(Y.op)
    cfg["t"].apply(s, Y, Y.op.axis[0])
    return s, [X, Y]


@template("tiny_out", reference=lambda x: x * 1e-4)
def tiny_out(cfg, n):
    """Outputs all below 1e-3; config broken=1 writes zeros, faster than the right one."""
    cfg.define_knob("broken", [0, 1], default=0)
    X = pt.placeholder((n,), "float32", name="X")
    if cfg["broken"].val:
        Y = pt.compute((n,), lambda i: pt.const(0.0, "float32"), name="Y")
    else:
        r = pt.reduce_axis((0, 512), name="r")
        Z = pt.compute((n,), lambda i: pt.sum(X[i] * pt.const(0.0, "float32"), axis=r), name="Z")
        Y = pt.compute((n,), lambda i: X[i] * pt.const(1e-4, "float32") + Z[i], name="Y")
    return pt.create_schedule(Y.op), [X, Y]


@template("flopless_copy", reference=lambda x: x.copy())
def flopless_copy(cfg, M, N):
    """A copy: no arithmetic, so its flop count is 0 (its records' GFLOP/s too)."""
    X = pt.placeholder((M, N), "float32", name="X")
    Y = pt.compute((M, N), lambda i, j: X[i, j], name="Y")
    s = pt.create_schedule(Y.op)
    cfg.define_split("tile_j", N, num_outputs=2)
    cfg.define_knob("par", [0, 1])
    jo, ji = cfg["tile_j"].apply(s, Y, Y.op.axis[1])
    s[Y].vectorize(ji)
    if cfg["par"].val:
        s[Y].parallel(Y.op.axis[0])
    return s, [X, Y]
