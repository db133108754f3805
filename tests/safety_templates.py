"""Templates for the safety tests (importable by the measurement processes)."""

import os

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


@template("flaky_crash", reference=lambda a: a + 1.0)
def flaky_crash(cfg, n):
    """Mode 'crash_once' kills the measurement process the first time it runs (a fault
    of the moment, not of the config); 'crash' kills it every time."""
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n,), lambda i: A[i] + 1.0, name="B")
    cfg.define_knob("mode", ["ok", "crash_once", "crash"], default="ok")
    if os.environ.get("PYPTO_MEASURING") == "1" and cfg["mode"].val != "ok":
        flag = os.path.join(os.environ["SAFETY_FLAG_DIR"], f"crashed-{cfg['mode'].val}")
        if cfg["mode"].val == "crash" or not os.path.exists(flag):
            open(flag, "w").close()
            os._exit(-9 % 256)
    return pt.create_schedule(B.op), [A, B]
