"""Templates for the safety tests (importable by the measurement processes)."""

import multiprocessing as mp
import os
import signal
import time

import pypto as pt
from autotune import template

# z = x + y over a 2x8 tile; "clobber" also zeroes its input x afterwards
_ADD_TILE = r"""
static void add_tile(const float* x, int64_t x0, int64_t x1, const float* y, int64_t y0,
                     int64_t y1, float* z, int64_t z0, int64_t z1) {
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 8; ++j) z[i * z0 + j * z1] = x[i * x0 + j * x1] + y[i * y0 + j * y1];
}
"""
_CLOBBER_TILE = _ADD_TILE.replace("add_tile", "clobber_tile").replace(
    "y[i * y0 + j * y1];\n}",
    "y[i * y0 + j * y1];\n  for (int i = 0; i < 2; ++i)\n"
    "    for (int j = 0; j < 8; ++j) ((float*)x)[i * x0 + j * x1] = 0.0f;\n}",
)


def _intrin(name, source):
    x = pt.placeholder((2, 8), name="x")
    y = pt.placeholder((2, 8), name="y")
    z = pt.compute((2, 8), lambda i, j: x[i, j] + y[i, j], name="z")
    return pt.decl_tensor_intrin(z.op, name, source)


@template("input_writer", reference=lambda x, y: x + y)
def input_writer(cfg, M, N):
    """Adds two matrices; mode 'clobber' writes zeros into its input X after adding."""
    X = pt.placeholder((M, N), "float32", name="X")
    Y = pt.placeholder((M, N), "float32", name="Y")
    Z = pt.compute((M, N), lambda i, j: X[i, j] + Y[i, j], name="Z")
    cfg.define_knob("mode", ["clobber", "ok", "ok_tiled"], default="ok")
    s = pt.create_schedule(Z.op)
    io, jo, ii, ji = s[Z].tile(Z.op.axis[0], Z.op.axis[1], 2, 8)
    mode = cfg["mode"].val
    if mode == "clobber":
        s[Z].tensorize(ii, _intrin("clobber_tile", _CLOBBER_TILE))
    elif mode == "ok_tiled":
        s[Z].tensorize(ii, _intrin("add_tile", _ADD_TILE))
    return s, [X, Y, Z]


def _crash_here(mode: str) -> bool:
    """Whether a candidate of ``mode`` dies here: 'run_*' modes in the measurement
    process, 'build_*' ones in a build process, '*_once' only the first time."""
    if mp.parent_process() is None or mode == "ok":  # never the tuning process itself
        return False
    measuring = os.environ.get("PYPTO_MEASURING") == "1"
    if measuring != mode.startswith("run_"):
        return False
    flag = os.path.join(os.environ["SAFETY_FLAG_DIR"], f"crashed-{mode}")
    if mode.endswith("_once") and os.path.exists(flag):
        return False
    open(flag, "a").close()
    return True


@template("flaky_crash", reference=lambda a: a + 1.0)
def flaky_crash(cfg, n):
    """Candidates that kill the process building or running them, once (a fault of the
    moment, not of the config) or every time."""
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n,), lambda i: A[i] + 1.0, name="B")
    modes = ["ok", "run_crash_once", "run_crash", "build_crash_once", "build_crash"]
    cfg.define_knob("mode", modes, default="ok")
    if _crash_here(cfg["mode"].val):
        os.kill(os.getpid(), signal.SIGKILL)
    return pt.create_schedule(B.op), [A, B]


@template("sleeper", reference=lambda a: a + 1.0)
def sleeper(cfg, n):
    """Mode 'hang' hangs in the measurement process, after leaving a file to say so."""
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n,), lambda i: A[i] + 1.0, name="B")
    cfg.define_knob("mode", ["ok", "hang"], default="ok")
    if os.environ.get("PYPTO_MEASURING") == "1" and cfg["mode"].val == "hang":
        open(os.path.join(os.environ["SAFETY_FLAG_DIR"], "running"), "a").close()
        time.sleep(3600)
    return pt.create_schedule(B.op), [A, B]
