"""Integer ``pt.var`` arguments (TVM's ``tvm.build(s, [A, n])``): sizes a call passes,
such as the time steps of API.md's Gauss-Seidel sweep, against numpy."""

import numpy as np
import pytest

import pypto as pt
from pypto import emulate

RNG = np.random.default_rng(27)


def gauss_seidel():
    n, steps = pt.var("n"), pt.var("steps")
    U0 = pt.placeholder((n, n), "float32", name="U0")
    U = pt.compute((n, n), lambda i, j: U0[i, j], name="U")
    t, i, j = pt.rdom([(0, steps), (1, n - 1), (1, n - 1)], names="t i j")
    U[i, j] = (U[i - 1, j] + U[i + 1, j] + U[i, j - 1] + U[i, j + 1]) * 0.25
    return U0, U, steps, (t, i, j)


def sweeps(u0, steps):
    ref = u0.astype("float64")
    for _ in range(steps):
        for a in range(1, ref.shape[0] - 1):
            for b in range(1, ref.shape[1] - 1):
                ref[a, b] = (ref[a - 1, b] + ref[a + 1, b] + ref[a, b - 1] + ref[a, b + 1]) / 4
    return ref


@pytest.mark.parametrize("steps", [0, 1, 3])
def test_gauss_seidel_with_symbolic_steps(steps):
    U0, U, st, _ = gauss_seidel()
    mod = pt.build(pt.create_schedule(U.op), [U0, U, st])
    assert "int64_t steps" in mod.source
    u0 = RNG.random((9, 9), dtype="float32")
    u = np.full_like(u0, np.nan)
    assert mod(u0, u, steps) is None
    np.testing.assert_allclose(u, sweeps(u0, steps), rtol=1e-5)
    np.testing.assert_allclose(mod(u0, np.int32(steps)), sweeps(u0, steps), rtol=1e-5)


def test_split_of_the_passed_count_is_exact_for_any_value():
    U0, U, st, (t, i, j) = gauss_seidel()
    s = pt.create_schedule(U.op)
    up = s[U].update(0)
    to, ti = up.split(t, factor=4)
    mod = pt.build(s, [st, U0, U])  # its own position: first
    u0 = RNG.random((7, 7), dtype="float32")
    for steps in (1, 4, 6):
        np.testing.assert_allclose(mod(steps, u0), sweeps(u0, steps), rtol=1e-5)
    with pytest.raises(pt.ScheduleError, match="parallel"):
        s[U].update(0).parallel(i)


def test_accesses_the_count_takes_out_of_bounds_are_refused_at_the_call():
    n, steps = pt.var("n"), pt.var("steps")
    A = pt.placeholder((n,), "float32", name="A")
    S = pt.compute((1,), lambda _: pt.const(0, "float32"), name="S")
    t = pt.reduce_axis((0, steps), name="t")
    S[0] = S[0] + A[t]
    mod = pt.build(pt.create_schedule(S.op), [A, steps, S])
    a = np.arange(6, dtype="float32")
    assert mod(a, 4)[0] == 6 and mod(a, 6)[0] == 15 and mod(a, 0)[0] == 0
    with pytest.raises(ValueError, match=r"with steps=7, n=6, .* reads past dimension 0 of A"):
        mod(a, 7)


def test_a_size_that_a_shape_binds_too_must_agree():
    n = pt.var("n")
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((n,), lambda i: A[i] * 2, name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, n, B])
    a = np.arange(5, dtype="float32")
    np.testing.assert_array_equal(mod(a, 5), 2 * a)
    with pytest.raises(ValueError, match="argument n: 4, but argument A's shape makes it 5"):
        mod(a, 4)
    with pytest.raises(ValueError, match="argument n: 6, but argument A's shape makes it 5"):
        mod(a, 6, np.empty(5, "float32"))


@pytest.mark.parametrize(
    "value, error, message",
    [
        (-1, ValueError, r"argument steps: -1 is not a size \(an integer argument counts"),
        (1 << 63, ValueError, "argument steps: 9223372036854775808 is not a size"),
        (True, TypeError, "argument steps: expected an integer .a size., got bool True"),
        (2.0, TypeError, "argument steps: expected an integer .a size., got float 2.0"),
        (None, TypeError, "argument steps: expected an integer .a size., got NoneType"),
    ],
)
def test_bad_counts_are_refused_by_name(value, error, message):
    U0, U, st, _ = gauss_seidel()
    mod = pt.build(pt.create_schedule(U.op), [U0, U, st])
    u0 = np.ones((4, 4), "float32")
    u = np.zeros_like(u0)
    with pytest.raises(error, match=message):
        mod(u0, u, value)
    assert (u == 0).all()  # nothing ran


def test_size_arguments_refused_at_build():
    U0, U, st, _ = gauss_seidel()
    s = pt.create_schedule(U.op)
    with pytest.raises(pt.ScheduleError, match="a scalar argument is passed twice"):
        pt.build(s, [U0, U, st, st])
    with pytest.raises(pt.ScheduleError, match=r"steps appear in the schedule but in no .* pass"):
        pt.build(s, [U0, U])
    other = pt.var("n")  # another variable of the shape's name
    with pytest.raises(pt.ScheduleError, match=r"size argument\(s\) n share a name"):
        pt.build(s, [U0, U, st, other])
    with pytest.raises(TypeError, match="args must be tensors or pt.var scalars, got 3"):
        pt.build(s, [U0, U, 3])


def test_size_arguments_survive_export(tmp_path):
    U0, U, st, _ = gauss_seidel()
    mod = pt.build(pt.create_schedule(U.op), [U0, st, U])
    loaded = pt.load_module(mod.export_library(str(tmp_path / "gs.so")))
    u0 = RNG.random((6, 6), dtype="float32")
    np.testing.assert_allclose(loaded(u0, 2), sweeps(u0, 2), rtol=1e-5)
    with pytest.raises(ValueError, match="argument steps: -2 is not a size"):
        loaded(u0, -2)


@pytest.mark.parametrize("dtype", ["uint8", "int32"])
def test_a_narrow_size_keeps_its_dtype_through_export(tmp_path, dtype):
    """Was: the saved signature named its sizes only, so a loaded module computed
    ``2 * n`` in int64 (400 for n = 200) where the kernel wraps in uint8 (144): 256
    elements left unwritten, and n past the dtype's range no longer refused."""
    n = pt.var("n", dtype)
    A = pt.placeholder((n,), "float32", name="A")
    B = pt.compute((2 * n,), lambda i: A[i // 2], name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B])
    loaded = pt.load_module(mod.export_library(str(tmp_path / f"{dtype}.so")))
    a = np.arange(200, dtype="float32")
    want = mod(a)
    np.testing.assert_array_equal(loaded(a), want)
    assert want.shape == ((144,) if dtype == "uint8" else (400,))
    if dtype == "uint8":
        for m in (mod, loaded):
            with pytest.raises(ValueError, match="n = 300 does not fit its dtype uint8"):
                m(np.arange(300, dtype="float32"))


def test_two_sizes_of_one_name_are_refused_at_build():
    """Was: built, a kernel with ``n`` and ``n_1``; exported and loaded, one size ``n``,
    and the kernel read its second size from whatever a register held."""
    n1, n2 = pt.var("n"), pt.var("n")
    A, B = pt.placeholder((n1,), name="A"), pt.placeholder((n2,), name="B")
    C = pt.compute((n2,), lambda i: B[i] * 2.0 + A[0], name="C")
    with pytest.raises(ValueError, match="two different size variables are named 'n'"):
        pt.build(pt.create_schedule(C.op), [A, B, C])


def test_validate_takes_size_arguments():
    U0, U, st, _ = gauss_seidel()
    mod = pt.build(pt.create_schedule(U.op), [U0, U, st])
    u0 = RNG.random((6, 6), dtype="float32")
    assert pt.validate(mod, lambda x, k: sweeps(x, k), [u0, 3]).ok
    assert not pt.validate(mod, lambda x, k: sweeps(x, k + 1), [u0, 3]).ok


def test_size_arguments_under_emulation():
    t = pt.Target("aarch64-neon")
    why = emulate.why_not_runnable(t)
    if why:
        pytest.skip(why)
    alpha = pt.var("alpha", "float32")
    U0, U, st, _ = gauss_seidel()
    V = pt.compute(U.shape, lambda i, j: alpha * U[i, j], name="V")
    mod = pt.build(pt.create_schedule(V.op), [U0, alpha, st, V], target=t)
    u0 = RNG.random((6, 6), dtype="float32")
    np.testing.assert_allclose(mod(u0, 0.5, 2), 0.5 * sweeps(u0, 2), rtol=1e-5)
