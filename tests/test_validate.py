"""pt.validate: kernels that are right, slightly off, badly off at a few indices, and
producing NaN, each compared with a numpy reference with exact expected counts."""

import numpy as np
import pytest

import autotune as at
import pypto as pt
from pypto.dtypes import numpy_dtype
from pypto.validate import compare, compare_one

N, M = 6, 8


def _build(body, dtype="float32", name="k"):
    A = pt.placeholder((N, M), dtype, name="A")
    B = pt.placeholder((N, M), dtype, name="B")
    C = pt.compute((N, M), lambda i, j: body(A, B, i, j), name="C")
    return pt.build(pt.create_schedule(C), [A, B, C], name=name)


def _inputs(dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(1, 2, (N, M)).astype(dtype) for _ in range(2)]


def _add(a, b):
    return a.astype(np.float64) + b


def test_a_right_kernel_is_ok():
    mod = _build(lambda A, B, i, j: A[i, j] + B[i, j])
    r = pt.validate(mod, _add, _inputs())
    assert r.ok and r.mismatches == 0 and r.first_mismatches == () and r.nan_mismatches == 0
    # float32 sums rounded once: at most half an ulp from the float64 reference
    assert r.ulp["0"] == N * M and sum(r.ulp.values()) == N * M
    assert 0 < r.max_abs_err < 2.0**-22 * 4 and 0 < r.max_rel_err < 2.0**-24
    assert "yes" in str(r) and r.summary().startswith("ok")


def test_slightly_off_is_ok_within_tolerance_with_its_ulps_counted():
    # every element one float32 step (at [2, 4)) too large: 2**-22 absolute
    mod = _build(lambda A, B, i, j: A[i, j] + B[i, j] + pt.const(2.0**-22, "float32"))
    r = pt.validate(mod, _add, _inputs())
    assert r.ok and r.mismatches == 0
    assert r.ulp["1"] + r.ulp["2-4"] == N * M and r.ulp["0"] == 0
    assert r.max_abs_err == pytest.approx(2.0**-22, rel=0.6)
    tight = pt.validate(mod, _add, _inputs(), rtol=0, atol=1e-9)  # the override bites
    assert not tight.ok and tight.mismatches == N * M
    assert tight.first_mismatches == tuple((0, j) for j in range(M)) + ((1, 0), (1, 1))


def test_badly_off_at_a_few_indices():
    def body(A, B, i, j):
        wrong = pt.select(((i == 1) & (j == 2)) | ((i == 4) & (j == 7)), 1.0, 0.0)
        return A[i, j] + B[i, j] + pt.cast("float32", wrong)

    mod = _build(body)
    r = pt.validate(mod, _add, _inputs())
    assert not r.ok
    assert r.mismatches == 2 and r.first_mismatches == ((1, 2), (4, 7))
    assert r.nan_mismatches == 0
    assert r.max_abs_err == pytest.approx(1.0, abs=1e-6)
    assert r.ulp[">256"] == 2 and r.ulp["0"] == N * M - 2
    assert "output C: 2 of 48 elements beyond rtol=0.0001, atol=0.0001" in r.summary()
    assert "first at (1, 2)" in r.summary() and "C: first mismatches at (1, 2), (4, 7)" in str(r)


def test_nan_and_inf_disagreements():
    def body(A, B, i, j):
        nan = pt.const(float("nan"), "float32")
        inf = pt.const(float("inf"), "float32")
        v = A[i, j] + B[i, j]
        return pt.select(j == 0, nan, pt.select((i == 5) & (j == 3), inf, v))

    mod = _build(body)

    def ref(a, b):
        out = a.astype(np.float64) + b
        out[0, 0] = np.nan  # the reference agrees at (0, 0) only
        out[2, 5] = -np.inf  # and has an infinity the kernel does not
        return out

    r = pt.validate(mod, ref, _inputs())
    # column 0 except (0, 0): 5 NaNs; (5, 3): Inf; (2, 5): the reference's -Inf
    assert r.nan_mismatches == 7 and r.mismatches == 7
    assert r.first_mismatches == ((1, 0), (2, 0), (2, 5), (3, 0), (4, 0), (5, 0), (5, 3))
    assert sum(r.ulp.values()) == N * M - 8  # histogram over elements finite in both
    assert np.isfinite(r.max_abs_err) and not r.ok


def test_integer_outputs_are_exact_and_float16_has_its_own_tolerance():
    got = np.array([[1, 2], [3, 4]], np.int32)
    c = compare_one(got, np.array([[1, 2], [3, 5]], np.int64), "C")
    assert (c.mismatches, c.first_mismatches, c.max_abs_err) == (1, ((1, 1),), 1.0)
    assert dict(c.ulp)["1"] == 1 and dict(c.ulp)["0"] == 3
    big = np.array([2**60 + 1], np.int64)  # exact past float64's 53 bits
    assert compare_one(big, np.array([2**60], np.int64)).mismatches == 1
    h = np.array([1.0, 2.0, 3.0], np.float16)
    near = compare_one(h, h.astype(np.float64) * (1 + 4e-3))  # float32 would reject it
    assert near.ok and near.rtol == 1e-2
    assert not compare_one(h.astype(np.float32), h.astype(np.float64) * (1 + 4e-3)).ok


def test_an_overflow_the_output_dtype_rounds_to_is_no_disagreement():
    """40000 * 2 in float16 is inf, as numpy's float16 gives: the float64 reference's
    80000 rounds to inf in the output's dtype. An inf where the reference rounds to a
    finite value still disagrees."""
    A = pt.placeholder((3,), "float16", name="A")
    B = pt.compute((3,), lambda i: A[i] * pt.const(2, "float16"), name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B], name="dbl")
    r = pt.validate(mod, lambda a: a.astype(np.float64) * 2, [np.float16([40000, 1, -40000])])
    assert r.ok and r.nan_mismatches == 0 and r.mismatches == 0
    c = compare_one(np.float16([np.inf, 1]), np.float64([60000.0, 1]))
    assert (c.nan_mismatches, c.first_mismatches) == (1, ((0,),))


def test_an_integer_output_off_a_fractional_reference_is_off_by_ulps():
    c = compare_one(np.int32([1, 2, 3]), np.float64([1.4, 2.0, 5.5]))
    assert c.mismatches == 2 and c.first_mismatches == ((0,), (2,))
    assert dict(c.ulp) == {"0": 1, "1": 1, "2-4": 1, "5-16": 0, "17-256": 0, ">256": 0}


def test_an_integer_output_is_exact_against_a_float_reference_of_integers():
    """int64 results past 2**53 became floats for the comparison: 2**60 + 1 equalled the
    reference's 2**60, and an off-by-one kernel was ok."""
    X = pt.placeholder((2,), "int64", name="X")
    Y = pt.compute((2,), lambda i: X[i] + 1, name="Y")
    mod = pt.build(pt.create_schedule(Y), [X, Y])
    x = np.array([2**53, 2**60], np.int64)
    r = pt.validate(mod, lambda x: x.astype(np.float64), [x])
    assert (r.ok, r.mismatches, r.first_mismatches) == (False, 2, ((0,), (1,)))
    assert r.outputs[0].max_abs_err == 1.0
    assert pt.validate(mod, lambda x: x.astype(np.float64) + 1, [np.int64([3, -5])]).ok


def test_a_reference_given_as_numbers_or_not_as_a_function():
    X = pt.placeholder((3,), "float32", name="X")
    Y = pt.compute((3,), lambda i: X[i] * 2, name="Y")
    mod = pt.build(pt.create_schedule(Y), [X, Y])
    x = np.float32([1, 2, 3])
    assert pt.validate(mod, lambda x: (x * 2).tolist(), [x]).ok  # one output, as a list
    with pytest.raises(TypeError, match=r"reference is a function of the inputs .* got ndarray"):
        pt.validate(mod, x * 2, [x])


def test_several_outputs_and_bad_calls():
    A = pt.placeholder((N,), "float32", name="A")
    X = pt.compute((N,), lambda i: A[i] * 2.0, name="X")
    Y = pt.compute((N,), lambda i: A[i] + pt.cast("float32", pt.select(i == 3, 1.0, 0.0)), name="Y")
    mod = pt.build(pt.create_schedule([X, Y]), [A, X, Y], name="two")
    a = np.arange(N, dtype=np.float32)
    r = pt.validate(mod, lambda a: (a * 2.0, a), [a])
    assert [o.name for o in r.outputs] == ["X", "Y"] and [o.ok for o in r.outputs] == [True, False]
    assert r.mismatches == 1 and r.first_mismatches == ((3,),)
    with pytest.raises(
        ValueError, match=r"has 2 output\(s\) \(X, Y\), but the reference returned 1"
    ):
        pt.validate(mod, lambda a: a, [a])
    with pytest.raises(
        ValueError, match=r"output Y: shape \(6,\), but the reference returned \(5,\)"
    ):
        pt.validate(mod, lambda a: (a * 2, a[:5]), [a])
    with pytest.raises(TypeError, match=r"the reference returned None; it returns two's output"):
        pt.validate(mod, lambda a: None, [a])
    with pytest.raises(TypeError, match=r"two takes 1 input\(s\) \(A\), got 2"):
        pt.validate(mod, lambda a: (a, a), [a, a])
    with pytest.raises(ValueError, match="rtol must be a non-negative finite number"):
        pt.validate(mod, lambda a: (a, a), [a], rtol=-1)
    with pytest.raises(
        ValueError, match=r"has 1 output\(s\) \(out\), but the reference returned 2"
    ):
        compare([a], [a, a], names=["out"])


def test_the_tuners_check_names_the_error_and_first_mismatch():
    from autotune.workers import Runner

    opt = {"rtol": 1e-3, "atol": 1e-3}
    want = np.ones((4, 4), np.float32)
    got = want.copy()
    got[2, 1] = np.nan
    got[3, 3] = 1.5
    arrays = [np.zeros(3, np.float32), got]
    bad = Runner._compare(arrays, [1], [want], ["A", "C"], opt)
    assert bad["error"] == "WRONG_ANSWER"
    assert bad["msg"] == (
        "differs from the reference: output C: 2 of 16 elements beyond rtol=0.001, "
        "atol=0.001, 1 NaN/Inf disagreements (max abs error 0.5, first at (2, 1))"
    )
    assert Runner._compare([arrays[0], want.copy()], [1], [want], ["A", "C"], opt) is None
    ints = np.full(3, 10_000, np.int32)  # integer outputs exact, whatever atol says
    off = Runner._compare([ints + 1], [0], [ints], ["K"], opt)
    assert "output K: 3 of 3 elements beyond rtol=0, atol=0" in off["msg"]
    shape = Runner._compare([ints], [0], [ints[:2]], ["K"], opt)
    assert shape["msg"] == "output K: shape (3,), but the reference returned (2,)"


def test_the_tuners_check_scales_atol_by_the_largest_reference_when_asked():
    """A template's ``atol_scale``: an element that cancels to near 0 may keep the
    rounding of the large ones (moe's outputs reach 1e4 on random inputs)."""
    from autotune.workers import Runner

    opt = {"rtol": 1e-3, "atol": 1e-3}
    want = np.array([1.0e4, 0.01], np.float32)
    got = np.array([1.0e4, 0.03], np.float32)  # off by 0.02 = 2e-6 of the largest
    assert Runner._compare([got], [0], [want], ["Y"], opt)["error"] == "WRONG_ANSWER"
    assert Runner._compare([got], [0], [want], ["Y"], opt, atol_scale=1e-5) is None
    worse = np.array([1.0e4, 0.5], np.float32)  # 5e-5 of the largest: still wrong
    bad = Runner._compare([worse], [0], [want], ["Y"], opt, atol_scale=1e-5)
    assert "atol=0.1" in bad["msg"]
    assert at.get_template("moe").atol_scale["float32"] == 1e-5
    per_dtype = {"float32": 1e-5, "float64": 0.0}  # float32 outputs only
    assert Runner._compare([got], [0], [want], ["Y"], opt, atol_scale=per_dtype) is None
    bf = numpy_dtype("bfloat16")  # 16-bit outputs: at least their dtype's tolerances
    one_ulp = np.array([1.0, 256.0], bf), np.array([1.0078125, 257.0], np.float64)
    assert Runner._compare([one_ulp[0]], [0], [one_ulp[1]], ["Y"], opt) is None


def test_pypto_tune_validate_prints_the_report(capsys):
    from autotune.cli import main as cli_main

    assert cli_main(["validate", "matmul", "--args", "16,24,8"]) == 0
    out = capsys.readouterr().out
    assert "default config {" in out and ": ok against the reference (max abs error" in out
    header = next(line for line in out.splitlines() if "ulp 0" in line)
    for col in ("output", "max abs", "max rel", "ulp >256", "mismatch", "nan/inf", "ok"):
        assert col in header
    row = out.splitlines()[out.splitlines().index(header) + 1].split()
    assert row[0] == "C" and row[1] == "float32" and row[-3:] == ["0", "0", "yes"]
    assert sum(int(c) for c in row[4:10]) == 16 * 24  # every element in one ULP bucket
    # --rtol 0 --atol 0 asks for bit-exact floats (refused as "not positive" before)
    assert cli_main(["validate", "matmul", "--args", "16,24,8", "--rtol", "0", "--atol", "0"]) == 1
    out = capsys.readouterr().out.splitlines()
    row = out[next(n for n, line in enumerate(out) if "ulp 0" in line) + 1].split()
    assert row[0] == "C" and int(row[-3]) > 0 and row[-1] == "NO"  # float64 rounds apart


def test_a_kernel_that_writes_its_input_is_not_ok_and_the_callers_arrays_stay():
    """The reference got copies made after the kernel ran: a kernel zeroing its input
    and output agreed with a reference computed from the zeroed input."""
    src = r"""
static void scale(const float* x, float* y) {
  float* xw = (float*)x;
  for (int i = 0; i < 8; ++i) { y[i] = 0.0f; xw[i] = 0.0f; }
}"""
    X = pt.placeholder((8,), name="X")
    Y = pt.extern((8,), [X], "scale", src, name="Y")
    mod = pt.build(pt.create_schedule(Y.op), [X, Y])
    x = np.arange(1, 9, dtype="float32")
    r = pt.validate(mod, lambda a: 2 * a, [x])
    assert not r.ok and r.inputs_written == ("X",) and r.outputs[0].mismatches == 8
    assert r.summary() == "the kernel wrote its input(s) X"
    np.testing.assert_array_equal(x, np.arange(1, 9, dtype="float32"))


@pytest.mark.parametrize("dtype", ["int64", "uint64"])
def test_64_bit_integer_differences_do_not_wrap(dtype):
    # int64 differences wrapped: max abs 1 for INT64_MIN against INT64_MAX, and any
    # tolerance then called them ok
    X = pt.placeholder((3,), dtype, name="X")
    Y = pt.compute((3,), lambda i: X[i], name="Y")
    mod = pt.build(pt.create_schedule(Y.op), [X, Y])
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 7, 5], dtype)
    want = np.array([info.max, info.min + 7, 5], dtype)
    for kw in ({}, {"rtol": 1e-6}, {"atol": 1.0}):
        r = pt.validate(mod, lambda a: want, [x], **kw)
        o = r.outputs[0]
        assert (r.ok, o.mismatches, o.first_mismatches) == (False, 1, ((0,),))
        assert o.max_abs_err == float(int(info.max) - int(info.min))
        assert dict(o.ulp) == {"0": 2, "1": 0, "2-4": 0, "5-16": 0, "17-256": 0, ">256": 1}
